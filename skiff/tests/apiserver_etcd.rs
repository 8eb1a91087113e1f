//! `skiff apiserver` on an etcd that is not Skiff's: Debian's etcd 3.4, started by the test.
//! The API server keeps its objects in etcd (etcdctl sees them under `/registry/`), answers
//! both faces from its mirror of etcd, and its watches see writes made through the other face
//! and through etcd itself.

mod common;

use std::time::Duration;

use common::{etcd_bin, eventually, free_port, skiff_bin};
use futures::StreamExt;
use serde_json::json;
use skiff_launch::Launch;
use skiff_proto::api::{Kind, Object};
use skiff_proto::client::{ClusterClient, Event, ListParams, WatchParams};

fn obj(kind: Kind, v: serde_json::Value) -> Object {
    Object::from_json(kind, v.to_string().as_bytes()).expect("test object decodes")
}

fn etcdctl(endpoint: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(args)
        .output()
        .expect("etcdctl is installed (Debian package etcd-client)");
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An etcd of one member in `dir` (Debian's 3.4 unless `SKIFF_TEST_ETCD` names another):
/// its client URL.
fn start_etcd(dir: &std::path::Path) -> (String, skiff_launch::Child) {
    let (client, peer) = (free_port(), free_port());
    let etcd_url = format!("http://127.0.0.1:{client}");
    let etcd = Launch::new("etcd", etcd_bin(), dir.join("etcd.log"))
        .args([
            "--name=e0".to_string(),
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-cluster=e0=http://127.0.0.1:{peer}"),
        ])
        .spawn()
        .expect("etcd is installed (Debian package etcd-server; the test command installs it)");
    (etcd_url, etcd)
}

/// A `skiff apiserver` over `etcd_url` with `extra` flags, serving: its REST and gRPC ports.
async fn start_apiserver(
    dir: &std::path::Path,
    name: &str,
    etcd_url: &str,
    extra: &[&str],
) -> (u16, u16, skiff_launch::Child) {
    let (rest, grpc) = (free_port(), free_port());
    let api = Launch::new(name, skiff_bin(), dir.join(format!("{name}.log")))
        .args([
            "apiserver".to_string(),
            format!("--etcd-servers={etcd_url}"),
            format!(
                "--data-dir={}",
                dir.join(format!("{name}-mirror")).display()
            ),
            format!("--listen-api-urls=http://127.0.0.1:{rest}"),
            format!("--listen-client-urls=http://127.0.0.1:{grpc}"),
            "--apiserver-insecure".to_string(),
        ])
        .args(extra.iter().map(|a| a.to_string()))
        .spawn()
        .expect("spawn skiff apiserver");
    let http = skiff_proto::http::HttpClient::new();
    let healthz = format!("http://127.0.0.1:{rest}/healthz");
    eventually(Duration::from_secs(30), "the API server serving", || {
        let (http, url) = (http.clone(), healthz.clone());
        async move {
            let r = http.get(&url, Duration::from_secs(2)).await.ok()?;
            (r.status == 200).then_some(())
        }
    })
    .await;
    (rest, grpc, api)
}

/// Both faces of the API server work over Debian's etcd 3.4, as over a member: creates are
/// validated and land in etcd, lists and gets read them back at etcd's revisions, a watch
/// from a list's revision sees what follows, a stale update is refused as a conflict, and a
/// key written to etcd behind the API server's back reaches its watchers too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_runs_on_debians_etcd() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (etcd_url, _etcd) = start_etcd(dir.path());
    let (rest, grpc, _api) = start_apiserver(dir.path(), "apiserver", &etcd_url, &[]).await;
    let http = skiff_proto::http::HttpClient::new();
    let api = ClusterClient::connect(&[format!("127.0.0.1:{grpc}")]).expect("client");
    api.create(&obj(
        Kind::Namespace,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
    ))
    .await
    .expect("namespace");
    let pod = |name: &str| {
        obj(
            Kind::Pod,
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "team", "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "localhost/skiff/busybox:1"}]}
            }),
        )
    };
    let created = api.create(&pod("a")).await.expect("pod a");
    // Validation runs as on a member: nothing reaches etcd.
    assert!(api.create(&pod("Bad_Name")).await.is_err());
    // The object is in etcd, under kube-apiserver's layout.
    let keys = etcdctl(
        &etcd_url,
        &["get", "--prefix", "/registry/pods/", "--keys-only"],
    );
    assert_eq!(keys.trim(), "/registry/pods/team/a");
    // Read back at etcd's revision.
    let (items, revision) = api
        .list(Kind::Pod, &ListParams::default().namespace("team"))
        .await
        .expect("list");
    assert_eq!(items.len(), 1);
    let etcd_rev: i64 = {
        let status = etcdctl(&etcd_url, &["endpoint", "status", "-w", "json"]);
        let v: serde_json::Value = serde_json::from_str(status.trim()).expect("json");
        v[0]["Status"]["header"]["revision"]
            .as_i64()
            .expect("revision")
    };
    assert!(
        revision > 0 && revision <= etcd_rev,
        "{revision} against etcd's {etcd_rev}"
    );
    // A watch from the list's revision sees the next pod.
    let mut watch = Box::pin(
        api.watch(
            Kind::Pod,
            &WatchParams {
                list: ListParams::default().namespace("team"),
                resource_version: revision,
                bookmarks: false,
            },
        )
        .await
        .expect("watch"),
    );
    api.create(&pod("b")).await.expect("pod b");
    let next = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("an event within 10 s")
        .expect("open")
        .expect("event");
    assert!(
        matches!(&next, Event::Added(o) if o.metadata().name == "b"),
        "{next:?}"
    );
    // REST reads the same objects.
    let list = http
        .get(
            &format!("http://127.0.0.1:{rest}/api/v1/namespaces/team/pods"),
            Duration::from_secs(5),
        )
        .await
        .expect("REST list");
    assert_eq!(list.status, 200);
    let v: serde_json::Value = serde_json::from_str(&list.text()).expect("json");
    let names: Vec<&str> = v["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["a", "b"]);
    // A stale update is a conflict, as on a member.
    let mut stale = created.clone();
    stale.metadata_mut().labels.insert("v".into(), "2".into());
    api.update(&stale).await.expect("first update");
    assert!(api.update(&stale).await.is_err(), "stale resourceVersion");
    // Deleted in etcd behind the API server's back: its watchers hear of it.
    etcdctl(&etcd_url, &["del", "/registry/pods/team/b"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match tokio::time::timeout(left, watch.next()).await {
            Ok(Some(Ok(Event::Deleted(o)))) => {
                assert_eq!(o.metadata().name, "b");
                break;
            }
            Ok(Some(Ok(_))) => continue,
            other => panic!("no deletion of b within 10 s: {other:?}"),
        }
    }
}

/// Two clusters share one etcd, each under its own `--etcd-prefix`: the same names live
/// side by side, each API server lists only its own, and etcd calls passed through an API
/// server see and write that cluster's keys alone, under the names the API server uses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_share_one_etcd_under_their_prefixes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (etcd_url, _etcd) = start_etcd(dir.path());
    // Another user's key, there before either cluster.
    etcdctl(&etcd_url, &["put", "/elsewhere/k", "v"]);
    let (_, grpc_a, _a) =
        start_apiserver(dir.path(), "apiserver-a", &etcd_url, &["--etcd-prefix=/a"]).await;
    let (_, grpc_b, _b) =
        start_apiserver(dir.path(), "apiserver-b", &etcd_url, &["--etcd-prefix=/b/"]).await;
    for grpc in [grpc_a, grpc_b] {
        let api = ClusterClient::connect(&[format!("127.0.0.1:{grpc}")]).expect("client");
        api.create(&obj(
            Kind::Namespace,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
        ))
        .await
        .expect("namespace");
        api.create(&obj(
            Kind::Pod,
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web", "namespace": "team", "labels": {"port": grpc.to_string()}},
                "spec": {"containers": [{"name": "c", "image": "localhost/skiff/busybox:1"}]}
            }),
        ))
        .await
        .expect("the same pod in each cluster");
    }
    // In etcd: each cluster's objects under its prefix.
    let keys = etcdctl(&etcd_url, &["get", "--prefix", "/", "--keys-only"]);
    let keys: Vec<&str> = keys.lines().filter(|l| !l.is_empty()).collect();
    for key in ["/a/pods/team/web", "/b/pods/team/web", "/a/namespaces/team"] {
        assert!(keys.contains(&key), "{key} in {keys:?}");
    }
    assert!(
        !keys.iter().any(|k| k.starts_with("/registry/")),
        "nothing at the default prefix: {keys:?}"
    );
    for (grpc, other) in [(grpc_a, grpc_b), (grpc_b, grpc_a)] {
        let api = ClusterClient::connect(&[format!("127.0.0.1:{grpc}")]).expect("client");
        let (pods, _) = api
            .list(Kind::Pod, &ListParams::default())
            .await
            .expect("list");
        let labels: Vec<_> = pods
            .iter()
            .map(|p| p.metadata().labels.get("port").cloned().unwrap_or_default())
            .collect();
        assert_eq!(labels, [grpc.to_string()], "not {other}'s pod");
        // etcd's API through the API server: its keys, under the names it uses.
        let through = format!("http://127.0.0.1:{grpc}");
        let seen = etcdctl(
            &through,
            &["get", "--prefix", "/registry/pods/", "--keys-only"],
        );
        assert_eq!(seen.trim(), "/registry/pods/team/web");
        etcdctl(&through, &["put", "/skiff/leader/test", "x"]);
    }
    let leases = etcdctl(&etcd_url, &["get", "--prefix", "/", "--keys-only"]);
    for key in [
        "/a-skiff/leader/test",
        "/b-skiff/leader/test",
        "/elsewhere/k",
    ] {
        assert!(leases.contains(key), "{key} in {leases}");
    }
    // A key that is neither cluster's is refused through an API server, and names itself.
    let out = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints=http://127.0.0.1:{grpc_a}"))
        .args(["get", "/elsewhere/k"])
        .output()
        .expect("etcdctl");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("/elsewhere/k"),
        "{err}"
    );
}
