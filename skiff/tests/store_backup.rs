//! Backups: `etcdctl snapshot save` from a member of a cluster under write load, `skiff store
//! restore` into the data directories of a new three-member cluster, and every key with its
//! revisions as the source had them at the backup's revision.

mod common;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{Cluster, eventually};
use etcd_client::{Client, GetOptions, PutOptions};

/// Every key at `revision` (0: now), with what etcd reports per key.
async fn keyspace(client: &mut Client, revision: i64) -> Vec<common::KeyValue> {
    let mut opts = GetOptions::new().with_from_key();
    if revision > 0 {
        opts = opts.with_revision(revision);
    }
    let r = client.get(vec![0u8], Some(opts)).await.expect("range");
    common::key_values(&r)
}

fn skiff(args: &[&str]) -> (bool, String) {
    common::run_skiff(args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_write_load_restores_into_a_new_cluster_with_every_key_and_revision() {
    let source = Cluster::start(3).await;
    let mut client = source.client_all().await;
    let lease = client.lease_grant(600, None).await.expect("lease").id();
    client
        .put(
            "/backup/leased",
            "l",
            Some(PutOptions::new().with_lease(lease)),
        )
        .await
        .expect("put");
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let mut writers = Vec::new();
    for w in 0..3 {
        let mut c = source.client(w).await;
        let (stop, acked) = (stop.clone(), acked.clone());
        writers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Overwrites and deletes too, so keys have several versions and tombstones.
                let key = format!("/backup/w{w}/{:03}", n % 200);
                let ok = if n % 7 == 3 {
                    c.delete(key, None).await.is_ok()
                } else {
                    c.put(key, n.to_string(), None).await.is_ok()
                };
                if ok {
                    acked.fetch_add(1, Ordering::Relaxed);
                }
                n += 1;
            }
        }));
    }
    eventually(Duration::from_secs(30), "writes before the backup", || {
        let n = acked.load(Ordering::Relaxed);
        async move { (n >= 600).then_some(()) }
    })
    .await;
    // A compaction, so the backup leaves out what it dropped.
    let now = client.get("/backup/leased", None).await.expect("get");
    let compact_at = now.header().expect("header").revision() - 100;
    client.compact(compact_at, None).await.expect("compact");

    let file = source.dir.path().join("backup.db");
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", source.members[1].client_url))
        .args(["snapshot", "save"])
        .arg(&file)
        .output()
        .expect("etcdctl is installed");
    assert!(
        out.status.success(),
        "etcdctl snapshot save: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = acked.load(Ordering::Relaxed) + 100;
    eventually(Duration::from_secs(30), "writes after the backup", || {
        let n = acked.load(Ordering::Relaxed);
        async move { (n >= after).then_some(()) }
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.expect("writer");
    }

    let path = file.to_str().expect("utf8 path");
    let (ok, status) = skiff(&["store", "snapshot-status", "-w", "json", path]);
    assert!(ok, "{status}");
    let status: serde_json::Value = serde_json::from_str(status.trim()).expect("json");
    let revision = status["revision"].as_i64().expect("revision");
    assert_eq!(status["compactRevision"].as_i64(), Some(compact_at));
    let expected = keyspace(&mut client, revision).await;
    assert!(expected.len() > 300, "{} keys", expected.len());
    let source_hash = client.hash_kv(revision).await.expect("hashkv").hash();

    // A truncated copy is refused, and leaves no data directory behind.
    let bytes = std::fs::read(&file).expect("read backup");
    let truncated = source.dir.path().join("truncated.db");
    std::fs::write(&truncated, &bytes[..bytes.len() - 700]).expect("write");
    let target = source.dir.path().join("never");
    let (ok, out) = skiff(&[
        "store",
        "restore",
        truncated.to_str().expect("utf8"),
        "--data-dir",
        target.to_str().expect("utf8"),
    ]);
    assert!(!ok && out.contains("truncated or damaged"), "{out}");
    assert!(!target.exists(), "a failed restore leaves nothing");

    let restored = Cluster::start_prepared(3, |c| {
        let initial = c
            .initial_cluster()
            .iter()
            .map(|(n, u)| format!("{n}={u}"))
            .collect::<Vec<_>>()
            .join(",");
        for m in &c.members {
            let (ok, out) = skiff(&[
                "store",
                "restore",
                path,
                "--name",
                &m.name,
                "--data-dir",
                m.data_dir.to_str().expect("utf8"),
                "--initial-cluster",
                &initial,
                "--initial-advertise-peer-urls",
                &m.peer_url,
            ]);
            assert!(ok, "restore {}: {out}", m.name);
        }
    })
    .await;
    // Their logs start past entries no snapshot held: each builds one when it starts, so a
    // member that falls behind can be sent it. A Raft snapshot's data file is a backup.
    for m in &restored.members {
        let snap = m.data_dir.join("snap");
        let data = eventually(
            Duration::from_secs(30),
            "a snapshot of the restored keyspace",
            || {
                let data = std::fs::read_dir(&snap).ok().and_then(|d| {
                    d.flatten()
                        .map(|e| e.path())
                        .find(|p| p.to_string_lossy().contains("/data."))
                });
                let kept = snap.join("current").exists();
                async move { data.filter(|_| kept) }
            },
        )
        .await;
        let (ok, status) = skiff(&[
            "store",
            "snapshot-status",
            "-w",
            "json",
            data.to_str().expect("utf8"),
        ]);
        assert!(ok, "{status}");
        let status: serde_json::Value = serde_json::from_str(status.trim()).expect("json");
        assert_eq!(status["revision"].as_i64(), Some(revision), "{}", m.name);
    }
    let mut back = restored.client_all().await;
    let got = keyspace(&mut back, 0).await;
    assert_eq!(got.len(), expected.len());
    assert_eq!(got, expected, "every key with its revisions and lease");
    for i in 0..3 {
        let mut one = restored.client(i).await;
        let hash = one.hash_kv(revision).await.expect("hashkv");
        assert_eq!(
            hash.hash(),
            source_hash,
            "member {i} hashes the keyspace at {revision} as the source did"
        );
        assert_eq!(hash.compact_version(), compact_at);
    }
    let before = back
        .get("/backup/leased", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision();
    assert_eq!(
        before, revision,
        "the new cluster starts at the backup's revision"
    );
    let put = back.put("/backup/new", "x", None).await.expect("put");
    assert_eq!(put.header().expect("header").revision(), revision + 1);
    let cluster_id = async |c: &mut Client| {
        let s = c.status().await.expect("status");
        s.header().expect("header").cluster_id()
    };
    assert_ne!(
        cluster_id(&mut client).await,
        cluster_id(&mut back).await,
        "a restored cluster has a new cluster ID"
    );
    // The lease came back too.
    let ttl = back.lease_time_to_live(lease, None).await.expect("ttl");
    assert!(ttl.ttl() > 0, "lease {lease:x} restored");
}
