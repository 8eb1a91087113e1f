//! `skiff apiserver` on an etcd that is not Skiff's: Debian's etcd 3.4, started by the test.
//! The API server keeps its objects in etcd (etcdctl sees them under `/registry/`), answers
//! both faces from its mirror of etcd, and its watches see writes made through the other face
//! and through etcd itself.

mod common;

use std::time::Duration;

use common::{eventually, free_port, skiff_bin};
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

/// Both faces of the API server work over Debian's etcd 3.4, as over a member: creates are
/// validated and land in etcd, lists and gets read them back at etcd's revisions, a watch
/// from a list's revision sees what follows, a stale update is refused as a conflict, and a
/// key written to etcd behind the API server's back reaches its watchers too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_runs_on_debians_etcd() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (client, peer) = (free_port(), free_port());
    let etcd_url = format!("http://127.0.0.1:{client}");
    let _etcd = Launch::new("etcd", "etcd", dir.path().join("etcd.log"))
        .args([
            "--name=e0".to_string(),
            format!("--data-dir={}", dir.path().join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-cluster=e0=http://127.0.0.1:{peer}"),
        ])
        .spawn()
        .expect("etcd is installed (Debian package etcd-server; the test command installs it)");
    let (rest, grpc) = (free_port(), free_port());
    let _api = Launch::new("apiserver", skiff_bin(), dir.path().join("apiserver.log"))
        .args([
            "apiserver".to_string(),
            format!("--etcd-servers={etcd_url}"),
            format!("--data-dir={}", dir.path().join("mirror").display()),
            format!("--listen-api-urls=http://127.0.0.1:{rest}"),
            format!("--listen-client-urls=http://127.0.0.1:{grpc}"),
            "--apiserver-insecure".to_string(),
        ])
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
