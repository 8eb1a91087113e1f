//! Debian's `etcdctl` (etcd-client 3.4) against a Skiff cluster, unmodified.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Cluster, eventually};

struct Etcdctl {
    endpoints: String,
}

impl Etcdctl {
    fn run(&self, args: &[&str], stdin: Option<&str>) -> (bool, String) {
        let mut child = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoints))
            .arg("--command-timeout=10s")
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect(
                "etcdctl is installed (Debian package etcd-client; the test command installs it)",
            );
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input.as_bytes())
                .expect("write stdin");
        }
        let out = child.wait_with_output().expect("etcdctl output");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    fn ok(&self, args: &[&str]) -> String {
        let (ok, out) = self.run(args, None);
        assert!(ok, "etcdctl {args:?} failed:\n{out}");
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_works_unmodified() {
    let cluster = Cluster::start(3).await;
    let all = Etcdctl {
        endpoints: cluster.endpoints().join(","),
    };
    let one = |i: usize| Etcdctl {
        endpoints: cluster.members[i].endpoint(),
    };
    // put / get --prefix / --rev.
    assert_eq!(one(0).ok(&["put", "/ctl/a", "1"]).trim(), "OK");
    one(1).ok(&["put", "/ctl/b", "2"]);
    let rev: i64 = {
        let json = one(2).ok(&["get", "/ctl/a", "-w", "json"]);
        let v: serde_json::Value = serde_json::from_str(json.trim()).expect("json");
        v["kvs"][0]["mod_revision"].as_i64().expect("mod revision")
    };
    one(0).ok(&["put", "/ctl/a", "changed"]);
    assert_eq!(
        one(2).ok(&["get", "--prefix", "/ctl/"]),
        "/ctl/a\nchanged\n/ctl/b\n2\n"
    );
    assert_eq!(
        one(2).ok(&[
            "get",
            "/ctl/a",
            &format!("--rev={rev}"),
            "--print-value-only"
        ]),
        "1\n"
    );
    // del.
    assert_eq!(one(1).ok(&["del", "/ctl/b"]).trim(), "1");
    assert_eq!(one(0).ok(&["get", "/ctl/b"]), "");
    // txn, non-interactive form on stdin: compares, blank line, success ops, blank, failure ops.
    let (ok, out) = all.run(
        &["txn"],
        Some("value(\"/ctl/a\") = \"changed\"\n\nput /ctl/txn yes\n\nput /ctl/txn no\n\n"),
    );
    assert!(ok, "{out}");
    assert!(out.starts_with("SUCCESS"), "{out}");
    assert_eq!(
        one(1).ok(&["get", "/ctl/txn", "--print-value-only"]),
        "yes\n"
    );
    // watch --rev replays history, then exits when killed; read what it printed.
    let watch = Command::new("timeout")
        .args(["3", "etcdctl"])
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", cluster.members[1].endpoint()))
        .args(["watch", "--prefix", "/ctl/", &format!("--rev={rev}")])
        .output()
        .expect("etcdctl watch");
    let w = String::from_utf8_lossy(&watch.stdout);
    assert!(
        w.starts_with(
            "PUT\n/ctl/a\n1\nPUT\n/ctl/b\n2\nPUT\n/ctl/a\nchanged\nDELETE\n/ctl/b\n\nPUT\n/ctl/txn\nyes\n"
        ),
        "watch printed:\n{w}"
    );
    // Leases: grant, attach, keep-alive once, time-to-live with keys, revoke removes the keys.
    let grant = all.ok(&["lease", "grant", "60"]);
    let id = grant
        .split_whitespace()
        .nth(1)
        .expect("lease id")
        .to_string();
    all.ok(&["put", "--lease", &id, "/ctl/leased", "x"]);
    assert!(
        all.ok(&["lease", "keep-alive", "--once", &id])
            .contains("keepalived with TTL(60)")
    );
    let ttl = one(2).ok(&["lease", "timetolive", &id, "--keys"]);
    assert!(ttl.contains("attached keys([/ctl/leased])"), "{ttl}");
    assert!(all.ok(&["lease", "list"]).contains(&id));
    assert!(all.ok(&["lease", "revoke", &id]).contains("revoked"));
    assert_eq!(all.ok(&["get", "/ctl/leased"]), "");
    // A short lease expires by itself and takes its key along.
    let grant = all.ok(&["lease", "grant", "2"]);
    let id = grant
        .split_whitespace()
        .nth(1)
        .expect("lease id")
        .to_string();
    all.ok(&["put", "--lease", &id, "/ctl/ephemeral", "x"]);
    eventually(Duration::from_secs(10), "the lease to expire", || {
        let gone = one(0).ok(&["get", "/ctl/ephemeral"]).is_empty();
        async move { gone.then_some(()) }
    })
    .await;
    // member list, endpoint status.
    let members = all.ok(&["member", "list"]);
    assert_eq!(members.lines().count(), 3, "{members}");
    for m in &cluster.members {
        assert!(
            members.contains(&m.name) && members.contains(&m.client_url),
            "{members}"
        );
    }
    let status = all.ok(&["endpoint", "status"]);
    assert_eq!(
        status.lines().filter(|l| l.contains("true")).count(),
        1,
        "one leader:\n{status}"
    );
    let health = all.ok(&["endpoint", "health"]);
    assert_eq!(health.matches("is healthy").count(), 3, "{health}");
    // compaction, then a read below it fails.
    let cur: i64 = {
        let json = one(0).ok(&["get", "/ctl/a", "-w", "json"]);
        let v: serde_json::Value = serde_json::from_str(json.trim()).expect("json");
        v["header"]["revision"].as_i64().expect("revision")
    };
    assert!(
        all.ok(&["compaction", &cur.to_string()])
            .contains(&format!("compacted revision {cur}"))
    );
    let (ok, out) = one(1).run(&["get", "/ctl/a", &format!("--rev={rev}")], None);
    assert!(
        !ok && out.contains("required revision has been compacted"),
        "{out}"
    );
}

/// The URL form of the endpoints (`http://host:port`, what `ETCDCTL_ENDPOINTS` usually
/// holds): etcdctl sends it whole as the HTTP/2 `:authority` of its per-endpoint commands,
/// and every one of them answers as with `host:port`; `endpoint hashkv` finds the members
/// alike at each revision, and `move-leader` hands leadership to the member named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_per_endpoint_commands_take_url_endpoints() {
    let cluster = Cluster::start(3).await;
    let urls: Vec<String> = cluster
        .members
        .iter()
        .map(|m| m.client_url.clone())
        .collect();
    assert!(urls.iter().all(|u| u.starts_with("http://")), "{urls:?}");
    let ctl = Etcdctl {
        endpoints: urls.join(","),
    };
    // Every member in the table, one of them leading (just after the start the first leader
    // may not have been heard of by everyone yet, itself included: asked until it has).
    let status = eventually(
        Duration::from_secs(10),
        "one leader in the status table",
        || {
            let status = ctl.ok(&["endpoint", "status", "-w", "table"]);
            async move {
                (status.lines().filter(|l| l.contains(" true ")).count() == 1).then_some(status)
            }
        },
    )
    .await;
    for u in &urls {
        assert!(status.contains(u.as_str()), "{u} in\n{status}");
    }
    let health = ctl.ok(&["endpoint", "health"]);
    assert_eq!(health.matches("is healthy").count(), 3, "{health}");
    let defrag = ctl.ok(&["defrag"]);
    assert_eq!(
        defrag.matches("Finished defragmenting").count(),
        3,
        "{defrag}"
    );
    assert_eq!(ctl.ok(&["put", "/url/a", "1"]).trim(), "OK");
    assert_eq!(ctl.ok(&["get", "/url/a", "--print-value-only"]).trim(), "1");

    // HashKV: every member hashes the same keyspace at one revision alike, and another
    // revision's keyspace differently.
    let revision = |ctl: &Etcdctl| -> i64 {
        let json = ctl.ok(&["get", "/url/a", "-w", "json"]);
        let v: serde_json::Value = serde_json::from_str(json.trim()).expect("json");
        v["header"]["revision"].as_i64().expect("revision")
    };
    let hashes = |rev: i64| -> Vec<String> {
        let table = ctl.ok(&[
            "endpoint",
            "hashkv",
            "--rev",
            &rev.to_string(),
            "-w",
            "table",
        ]);
        table
            .lines()
            .filter(|l| l.contains("http://"))
            .map(|l| l.split('|').nth(2).unwrap_or_default().trim().to_string())
            .collect()
    };
    let first = revision(&ctl);
    // Every member has applied the put once a linearizable read on each has seen it.
    for u in &urls {
        let one = Etcdctl {
            endpoints: u.clone(),
        };
        assert!(revision(&one) >= first);
    }
    let at_first = hashes(first);
    assert_eq!(at_first.len(), 3, "{at_first:?}");
    assert!(at_first.iter().all(|h| h == &at_first[0]), "{at_first:?}");
    ctl.ok(&["put", "/url/a", "2"]);
    let later = revision(&ctl);
    for u in &urls {
        let one = Etcdctl {
            endpoints: u.clone(),
        };
        assert!(revision(&one) >= later);
    }
    let at_later = hashes(later);
    assert!(at_later.iter().all(|h| h == &at_later[0]), "{at_later:?}");
    assert_ne!(at_first[0], at_later[0], "another value, another hash");
    assert_eq!(
        hashes(first),
        at_first,
        "an older revision hashes as before"
    );
    let (ok, out) = ctl.run(&["endpoint", "hashkv", "--rev", "1000000"], None);
    assert!(!ok && out.contains("future revision"), "{out}");

    // move-leader: etcdctl asks the leader among its endpoints to hand over to a member.
    let leader_and_ids = |ctl: &Etcdctl| -> (u64, Vec<u64>) {
        let json = ctl.ok(&["endpoint", "status", "-w", "json"]);
        let v: serde_json::Value = serde_json::from_str(json.trim()).expect("json");
        let all = v.as_array().expect("array");
        let leader = all[0]["Status"]["leader"].as_u64().expect("leader");
        let ids = all
            .iter()
            .map(|s| s["Status"]["header"]["member_id"].as_u64().expect("id"))
            .collect();
        (leader, ids)
    };
    let (leader, ids) = leader_and_ids(&ctl);
    let target = *ids.iter().find(|id| **id != leader).expect("a follower");
    let out = ctl.ok(&["move-leader", &format!("{target:x}")]);
    assert!(
        out.contains(&format!(
            "Leadership transferred from {leader:x} to {target:x}"
        )),
        "{out}"
    );
    let (now, _) = leader_and_ids(&ctl);
    assert_eq!(now, target, "the transferee leads");
    let (ok, out) = ctl.run(&["move-leader", "abcdef"], None);
    assert!(!ok && out.contains("bad leader transferee"), "{out}");
    assert_eq!(ctl.ok(&["put", "/url/a", "3"]).trim(), "OK");
}

/// The client URLs also answer plain HTTP as etcd's do: `/health`, `/readyz`, `/livez` and
/// `/metrics` with the etcd metric names dashboards read, gRPC calls counted by code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_urls_serve_health_and_etcd_metrics() {
    let cluster = Cluster::start(3).await;
    // The leader: peer round trips are timed by the member that sends heartbeats.
    let leader = cluster.wait_leader(Duration::from_secs(10)).await;
    let ctl = Etcdctl {
        endpoints: cluster.members[leader].client_url.clone(),
    };
    ctl.ok(&["put", "/m/a", "1"]);
    let (ok, _) = ctl.run(&["get", "/m/a", "--rev", "1000000"], None);
    assert!(!ok, "a future revision is refused");
    let http = skiff_proto::http::HttpClient::new();
    let get = |path: &str| {
        let url = format!("{}{path}", cluster.members[leader].client_url);
        let http = http.clone();
        async move {
            http.get(&url, Duration::from_secs(5))
                .await
                .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        }
    };
    let health = get("/health").await;
    assert_eq!(health.status, 200);
    assert!(
        health.text().contains("\"health\":\"true\""),
        "{}",
        health.text()
    );
    assert_eq!(get("/readyz").await.text(), "ok");
    assert!(get("/readyz?verbose").await.text().contains("[+]leader ok"));
    assert_eq!(get("/livez").await.text(), "ok");
    let metrics = get("/metrics").await.text();
    for name in [
        "etcd_server_has_leader 1",
        "etcd_server_leader_changes_seen_total",
        "etcd_server_proposals_committed_total",
        "etcd_server_proposals_applied_total",
        "etcd_server_proposals_pending",
        "etcd_server_proposals_failed_total",
        "etcd_mvcc_db_total_size_in_bytes",
        "etcd_disk_wal_fsync_duration_seconds_bucket",
        "etcd_disk_backend_commit_duration_seconds_bucket",
        "etcd_network_peer_round_trip_time_seconds_bucket{To=",
        "grpc_server_handled_total{grpc_type=\"unary\",grpc_service=\"etcdserverpb.KV\",grpc_method=\"Put\",grpc_code=\"OK\"}",
        "grpc_code=\"OutOfRange\"",
        "skiff_store_backend_memory_bytes{part=\"table_readers\"}",
        "skiff_store_backend_memory_bytes{part=\"block_cache\"}",
    ] {
        assert!(metrics.contains(name), "{name} in\n{metrics}");
    }
    // The puts above are in a memtable.
    let memtables = metrics
        .lines()
        .find_map(|l| l.strip_prefix("skiff_store_backend_memory_bytes{part=\"memtables\"} "))
        .and_then(|v| v.parse::<f64>().ok());
    assert!(
        memtables.is_some_and(|b| b > 0.0),
        "memtables: {memtables:?}"
    );
    // gRPC still works on the same port, over the same HTTP/2 connections.
    assert_eq!(ctl.ok(&["get", "/m/a", "--print-value-only"]).trim(), "1");
}

/// Three `skiff store` members started on one host with etcd's flags alone (the shape of
/// etcd's own three-member Procfile) form a cluster that serves etcdctl, and each is an etcd
/// and nothing else: it listens on its client and peer URLs only (no Kubernetes API port), and
/// its client URL answers the cluster API's calls as an etcd would, UNIMPLEMENTED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_with_etcds_flags_alone_are_an_etcd() {
    use common::{free_port, skiff_bin};
    let dir = tempfile::tempdir().expect("tempdir");
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let initial = ports
        .iter()
        .enumerate()
        .map(|(i, (_, peer))| format!("infra{i}=http://127.0.0.1:{peer}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut members = Vec::new();
    for (i, (client, peer)) in ports.iter().enumerate() {
        let name = format!("infra{i}");
        let child = skiff_launch::Launch::new(&name, skiff_bin(), dir.path().join(&name))
            .args([
                "store".to_string(),
                format!("--name={name}"),
                format!(
                    "--data-dir={}",
                    dir.path().join(format!("{name}.etcd")).display()
                ),
                format!("--listen-client-urls=http://127.0.0.1:{client}"),
                format!("--advertise-client-urls=http://127.0.0.1:{client}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
                "--initial-cluster-token=etcd-cluster-1".to_string(),
                format!("--initial-cluster={initial}"),
                "--initial-cluster-state=new".to_string(),
            ])
            .spawn()
            .expect("spawn skiff store");
        members.push(child);
    }
    let endpoints: Vec<String> = ports
        .iter()
        .map(|(c, _)| format!("http://127.0.0.1:{c}"))
        .collect();
    let ctl = Etcdctl {
        endpoints: endpoints.join(","),
    };
    eventually(
        Duration::from_secs(20),
        "the members elect a leader",
        || {
            let ok = ctl.run(&["put", "/procfile/a", "1"], None).0;
            async move { ok.then_some(()) }
        },
    )
    .await;
    for e in &endpoints {
        let one = Etcdctl {
            endpoints: e.clone(),
        };
        assert_eq!(
            one.ok(&["get", "/procfile/a", "--print-value-only"]).trim(),
            "1"
        );
    }
    // Each member listens on its own two ports and no other.
    for (child, (client, peer)) in members.iter().zip(&ports) {
        let pid = child.pid().expect("running");
        let out = Command::new("ss")
            .args(["-Hltnp"])
            .output()
            .expect("ss (iproute2)");
        let mut listening: Vec<u16> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(&format!("pid={pid},")))
            .filter_map(|l| {
                l.split_whitespace()
                    .nth(3)?
                    .rsplit(':')
                    .next()?
                    .parse()
                    .ok()
            })
            .collect();
        listening.sort_unstable();
        let mut expected = vec![*client, *peer];
        expected.sort_unstable();
        assert_eq!(
            listening, expected,
            "member {pid} listens on its URLs alone"
        );
    }
    // The cluster API is not served: an etcd client port knows no such service.
    let channel = tonic::transport::Channel::from_shared(endpoints[0].clone())
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut api = skiff_proto::cluster::v1::cluster_client::ClusterClient::new(channel);
    let status = api
        .list(skiff_proto::cluster::v1::ListRequest {
            kind: "Pod".into(),
            ..Default::default()
        })
        .await
        .expect_err("no cluster API on an etcd");
    assert_eq!(status.code(), tonic::Code::Unimplemented, "{status}");
}
