//! Bad input gets etcd's errors, and nothing is partially applied; a member whose disk fills
//! exits, saying why.

mod common;

use std::time::Duration;

use common::{Cluster, eventually};
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};

fn assert_err<T: std::fmt::Debug>(r: Result<T, etcd_client::Error>, code: Code, msg: &str) {
    match r {
        Err(etcd_client::Error::GRpcStatus(s)) => {
            assert_eq!(s.code() as i32, code as i32, "code of {s:?}");
            assert!(
                s.message().contains(msg),
                "{:?} does not say {msg:?}",
                s.message()
            );
        }
        other => panic!("expected {code:?} {msg:?}, got {other:?}"),
    }
}

/// The gRPC codes the checks expect (numbered as in the gRPC spec).
mod tonic_code {
    #[derive(Debug, Clone, Copy)]
    pub enum Code {
        InvalidArgument = 3,
        NotFound = 5,
        ResourceExhausted = 8,
        OutOfRange = 11,
        Unavailable = 14,
    }
}
use tonic_code::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_with_etcds_errors_and_write_nothing() {
    let cluster = Cluster::start_with(3, |s| {
        s.max_request_bytes = Some(65_536);
        s.max_txn_ops = Some(16);
    })
    .await;
    let mut c = cluster.client(1).await;
    // Oversized put.
    let big = vec![b'x'; 100 * 1024];
    assert_err(
        c.put("/big", big, None).await,
        Code::InvalidArgument,
        "etcdserver: request is too large",
    );
    assert_eq!(c.get("/big", None).await.expect("get").count(), 0);
    // Over the limit plus gRPC's allowance, the server refuses to read it, as grpc-go does.
    let huge = vec![b'x'; 700 * 1024];
    assert_err(
        c.put("/big", huge, None).await,
        Code::ResourceExhausted,
        "grpc: received message larger than max",
    );
    // A compare needs a key.
    assert_err(
        c.txn(
            Txn::new()
                .when([Compare::version("", CompareOp::Equal, 0)])
                .and_then([TxnOp::put("/cmp", "v", None)]),
        )
        .await,
        Code::InvalidArgument,
        "etcdserver: key is not provided",
    );
    assert_eq!(c.get("/cmp", None).await.expect("get").count(), 0);
    // A transaction over the op limit: none of its puts land.
    let ops: Vec<TxnOp> = (0..17)
        .map(|i| TxnOp::put(format!("/txn/{i}"), "v", None))
        .collect();
    assert_err(
        c.txn(Txn::new().and_then(ops)).await,
        Code::InvalidArgument,
        "etcdserver: too many operations in txn request",
    );
    let some = c
        .get("/txn/", Some(GetOptions::new().with_prefix()))
        .await
        .expect("get");
    assert_eq!(some.count(), 0);
    // Duplicate keys in one branch.
    assert_err(
        c.txn(Txn::new().and_then([TxnOp::put("/d", "1", None), TxnOp::put("/d", "2", None)]))
            .await,
        Code::InvalidArgument,
        "etcdserver: duplicate key given in txn request",
    );
    // A put under a lease that does not exist, inside a transaction with a good put.
    let txn = Txn::new()
        .when([Compare::version("/nope", CompareOp::Equal, 0)])
        .and_then([
            TxnOp::put("/good", "1", None),
            TxnOp::put("/leased", "1", Some(PutOptions::new().with_lease(12345))),
        ]);
    assert_err(
        c.txn(txn).await,
        Code::NotFound,
        "etcdserver: requested lease not found",
    );
    assert_eq!(c.get("/good", None).await.expect("get").count(), 0);
    // ignore_value with a value.
    assert_err(
        c.put("/k", "v", Some(PutOptions::new().with_ignore_value()))
            .await,
        Code::InvalidArgument,
        "etcdserver: value is provided",
    );
    // ignore_value on a missing key.
    assert_err(
        c.put("/missing", "", Some(PutOptions::new().with_ignore_value()))
            .await,
        Code::InvalidArgument,
        "etcdserver: key not found",
    );
    // Reads at compacted and future revisions.
    let mut rev = 0;
    for i in 0..3 {
        rev = c
            .put("/h", i.to_string(), None)
            .await
            .expect("put")
            .header()
            .expect("h")
            .revision();
    }
    c.compact(rev, None).await.expect("compact");
    assert_err(
        c.get("/h", Some(GetOptions::new().with_revision(rev - 1)))
            .await,
        Code::OutOfRange,
        "etcdserver: mvcc: required revision has been compacted",
    );
    assert_err(
        c.get("/h", Some(GetOptions::new().with_revision(rev + 100)))
            .await,
        Code::OutOfRange,
        "etcdserver: mvcc: required revision is a future revision",
    );
    assert_err(
        c.compact(rev - 1, None).await,
        Code::OutOfRange,
        "required revision has been compacted",
    );
    // An empty key.
    assert_err(
        c.put("", "v", None).await,
        Code::InvalidArgument,
        "etcdserver: key is not provided",
    );
    // Ranges whose end sorts before their key are empty, for reads, deletes and compares
    // alike, and the member goes on serving.
    let reversed = || GetOptions::new().with_range("/a");
    assert_eq!(c.get("/z", Some(reversed())).await.expect("get").count(), 0);
    let deleted = c
        .delete(
            "/z",
            Some(etcd_client::DeleteOptions::new().with_range("/a")),
        )
        .await
        .expect("delete");
    assert_eq!(deleted.deleted(), 0);
    let t = c
        .txn(
            Txn::new()
                .when([Compare::version("/z", CompareOp::Equal, 0).with_range("/a")])
                .and_then([TxnOp::delete(
                    "/z",
                    Some(etcd_client::DeleteOptions::new().with_range("/a")),
                )]),
        )
        .await
        .expect("txn over a reversed range");
    assert!(t.succeeded());
    assert_eq!(c.get("/h", None).await.expect("get").count(), 1);
}

/// Membership changes are checked as etcd checks them: peer URLs that are not
/// `http://host:port` are refused and change nothing, and a change that would leave fewer
/// reachable voters than a quorum is refused (strict reconfiguration), except removing the
/// member that is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_changes_are_checked_as_etcd_checks_them() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_leader(Duration::from_secs(10)).await;
    let mut c = cluster.client(leader).await;
    for urls in [
        vec!["not a url"],
        vec![],
        vec!["http://127.0.0.1"],
        vec!["http://127.0.0.1:2380/path"],
    ] {
        let urls: Vec<String> = urls.into_iter().map(String::from).collect();
        assert_err(
            c.member_add(urls, None).await,
            Code::InvalidArgument,
            "etcdserver: given member URLs are invalid",
        );
    }
    // Every member has started (recorded its client URLs).
    let list = eventually(Duration::from_secs(10), "every client URL recorded", || {
        let mut c = c.clone();
        async move {
            let l = c.member_list().await.ok()?;
            l.members()
                .iter()
                .all(|m| !m.client_urls().is_empty())
                .then_some(l)
        }
    })
    .await;
    assert_eq!(list.members().len(), 3);
    let id_of = |i: usize| {
        list.members()
            .iter()
            .find(|m| m.peer_urls().contains(&cluster.members[i].peer_url))
            .map(|m| m.id())
            .expect("listed")
    };
    let (down, up) = match leader {
        0 => (1, 2),
        1 => (0, 2),
        _ => (0, 1),
    };
    let (down_id, up_id) = (id_of(down), id_of(up));
    assert_err(
        c.member_update(up_id, vec!["nope".into()]).await,
        Code::InvalidArgument,
        "etcdserver: given member URLs are invalid",
    );
    cluster.kill(down);
    let members = &cluster;
    eventually(
        Duration::from_secs(10),
        "the leader to count the killed member out",
        || async move {
            let active = members.metric(leader, "skiff_store_active_voters").await;
            (active == Some(2.0)).then_some(())
        },
    )
    .await;
    let new_peer = format!("http://127.0.0.1:{}", common::free_port());
    assert_err(
        c.member_add([new_peer], None).await,
        Code::Unavailable,
        "etcdserver: unhealthy cluster",
    );
    assert_err(
        c.member_remove(up_id).await,
        Code::Unavailable,
        "etcdserver: unhealthy cluster",
    );
    assert_eq!(c.member_list().await.expect("list").members().len(), 3);
    c.member_remove(down_id)
        .await
        .expect("removing the member that is down");
    assert_eq!(c.member_list().await.expect("list").members().len(), 2);
    c.put("/after", "v", None)
        .await
        .expect("writes go on with two");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_quota_the_cluster_refuses_writes_but_serves_reads_and_deletes() {
    let cluster = Cluster::start_with(3, |s| s.quota_backend_bytes = Some(4_000_000)).await;
    let mut c = cluster.client(2).await;
    c.put("/kept", "v", None)
        .await
        .expect("put under the quota");
    // Fill past the quota; the leader raises the alarm within a tick.
    let chunk = vec![b'x'; 60 * 1024];
    for i in 0..80 {
        if c.put(format!("/fill/{i}"), chunk.clone(), None)
            .await
            .is_err()
        {
            break;
        }
    }
    eventually(Duration::from_secs(10), "the NOSPACE alarm", || {
        let mut c = c.clone();
        async move {
            let alarms = c
                .alarm(
                    etcd_client::AlarmAction::Get,
                    etcd_client::AlarmType::None,
                    None,
                )
                .await
                .ok()?;
            (!alarms.alarms().is_empty()).then_some(())
        }
    })
    .await;
    let status = c.status().await.expect("status");
    assert!(
        status.errors().iter().any(|e| e.contains("NOSPACE")),
        "{:?}",
        status.errors()
    );
    assert_err(
        c.put("/new", "v", None).await,
        Code::ResourceExhausted,
        "etcdserver: mvcc: database space exceeded",
    );
    assert_eq!(
        c.get("/new", None)
            .await
            .expect("reads still served")
            .count(),
        0
    );
    assert_eq!(
        c.get("/kept", None)
            .await
            .expect("reads still served")
            .count(),
        1
    );
    let d = c
        .delete(
            "/fill/",
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await;
    assert!(d.expect("deletes still allowed").deleted() > 0);
}

/// Unmounts (lazily) what a test mounted under its directory, however the test ends.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        common::unmount_under(&self.0);
    }
}

/// A member whose disk fills stops its Raft core on the storage error and exits, saying why,
/// rather than stay up unable to write: whatever supervises it starts it again from its data
/// directory. (The quota is far above the disk here, so no NOSPACE alarm refuses the writes
/// first.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_disk_fills_exits_saying_why() {
    let mut cluster = Cluster::start_prepared(1, |c| {
        let data = &c.members[0].data_dir;
        std::fs::create_dir_all(data).expect("data dir");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=48m", "skiff-disk-full"])
            .arg(data)
            .output()
            .expect("run mount");
        assert!(out.status.success(), "mount a tmpfs: {out:?}");
    })
    .await;
    let _unmount = Unmount(cluster.dir.path().to_path_buf());
    let mut c = cluster.client(0).await;
    let value = vec![b'v'; 1 << 20];
    let mut refused = None;
    for i in 0..200 {
        if let Err(e) = c.put(format!("/fill/{i}"), value.clone(), None).await {
            refused = Some(e);
            break;
        }
    }
    let refused = refused.expect("a 48 MiB disk takes fewer than 200 puts of 1 MiB");
    let status = eventually(Duration::from_secs(30), "the member to exit", || {
        let status = cluster.members[0].exited();
        async move { status }
    })
    .await;
    assert!(!status.success(), "exited with {status} after {refused:?}");
    let log = cluster.log_of(0);
    assert!(
        log.contains("Raft stopped on an error") && log.contains("No space left on device"),
        "the log says why: {}",
        log.lines().rev().take(5).collect::<Vec<_>>().join("\n")
    );
}
