//! `skiff apply` and `skiff get` against a real three-member store: manifests are created,
//! re-applied as unchanged or configured, shown in kubectl's table; a manifest set with one
//! bad document is refused whole, naming the file, document and field path, and nothing of
//! it is written.

mod common;

use std::process::{Command, Output};

use common::{Cluster, skiff_bin};

fn skiff(cluster: &Cluster, args: &[&str]) -> Output {
    Command::new(skiff_bin())
        .args(args)
        .env("SKIFF_ENDPOINTS", cluster.endpoints().join(","))
        .output()
        .expect("run skiff")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_creates_updates_and_refuses_bad_manifests_whole() {
    let cluster = Cluster::start(3).await;
    let dir = tempfile::tempdir().expect("tempdir");

    let out = skiff(&cluster, &["apply", "-f", "../examples/pod.yaml"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(text(&out).trim(), "pod/hello created");
    let out = skiff(&cluster, &["apply", "-f", "../examples/pod.yaml"]);
    assert_eq!(text(&out).trim(), "pod/hello unchanged");

    let changed = std::fs::read_to_string("../examples/pod.yaml")
        .expect("example")
        .replace("app: hello", "app: hello2");
    let path = dir.path().join("pod.yaml");
    std::fs::write(&path, changed).expect("write");
    let out = skiff(&cluster, &["apply", "-f", path.to_str().expect("utf-8")]);
    assert_eq!(text(&out).trim(), "pod/hello configured", "{}", text(&out));

    let out = skiff(&cluster, &["get", "pods"]);
    let table = text(&out);
    let mut lines = table.lines();
    let header = lines.next().expect("header");
    assert!(header.starts_with("NAME"), "{table}");
    for col in ["READY", "STATUS", "RESTARTS", "AGE"] {
        assert!(header.contains(col), "{table}");
    }
    let row = lines.next().expect("a row");
    assert!(row.starts_with("hello "), "{table}");
    assert!(row.contains("Pending"), "{table}");
    let out = skiff(&cluster, &["get", "pods", "hello", "-o", "json"]);
    assert!(text(&out).contains("\"app\": \"hello2\""), "{}", text(&out));

    // One good and one bad document: the error names the field, and neither is created.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: fine}\nspec:\n  containers: [{name: c, image: localhost/skiff/busybox:1}]\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: broken}\nspec:\n  containers:\n  - name: c\n    image: localhost/skiff/busybox:1\n    resources: {requests: {cpu: lots}}\n",
    )
    .expect("write");
    let out = skiff(&cluster, &["apply", "-f", bad.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(
        msg.contains("document 2") && msg.contains("spec.containers[0].resources.requests.cpu"),
        "{msg}"
    );
    assert!(msg.contains("nothing was created"), "{msg}");
    let out = skiff(&cluster, &["get", "pods", "fine"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("\"fine\" not found"), "{}", text(&out));

    // A value outside Kubernetes' fixed set is refused as the manifest decodes, at its path.
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: sometimes}\nspec:\n  restartPolicy: Sometimes\n  containers: [{name: c, image: localhost/skiff/busybox:1}]\n",
    )
    .expect("write");
    let out = skiff(&cluster, &["apply", "-f", policy.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(
        msg.contains("document 1: spec.restartPolicy: unsupported value \"Sometimes\""),
        "{msg}"
    );
    assert!(msg.contains("nothing was created"), "{msg}");
}
