//! TLS with etcd's flags: a three-member cluster on `https://` client and peer URLs, with
//! client certificates required on both, made by `skiff certs`. etcdctl (`--cacert --cert
//! --key`) and the Rust etcd client work; a client without a certificate, or with one from
//! another CA, is refused; a member whose peer certificate comes from another CA cannot join;
//! with etcd's auth on, a client certificate's CN is the user; a certificate replaced on disk
//! is served from the next connection on.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Cluster, eventually};

fn certs(dir: &Path, args: &[&str]) {
    let mut all = vec!["certs", "--dir", dir.to_str().expect("utf8 path")];
    all.extend_from_slice(args);
    let (ok, out) = common::run_skiff(&all);
    assert!(ok, "skiff certs: {out}");
}

/// etcdctl against `endpoint` with `ca` to trust and, when given, the client certificate
/// `cert` (`<cert>.pem`, `<cert>-key.pem` in `cert_dir`).
fn etcdctl(
    endpoint: &str,
    ca: &Path,
    cert: Option<(&Path, &str)>,
    args: &[&str],
) -> (bool, String) {
    let mut cmd = Command::new("etcdctl");
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .arg("--command-timeout=5s")
        .arg("--dial-timeout=2s")
        .arg(format!("--cacert={}", ca.display()));
    if let Some((dir, name)) = cert {
        cmd.arg(format!(
            "--cert={}",
            dir.join(format!("{name}.pem")).display()
        ))
        .arg(format!(
            "--key={}",
            dir.join(format!("{name}-key.pem")).display()
        ));
    }
    common::outcome(cmd.args(args).output().expect("etcdctl is installed"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_tls_serves_its_clients_and_keeps_strangers_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ours = dir.path().join("certs");
    let other = dir.path().join("other");
    certs(
        &ours,
        &[
            "--member", "m0", "--member", "m1", "--member", "m2", "--client", "root", "--client",
            "carol",
        ],
    );
    certs(
        &other,
        &["--member", "m0", "--member", "m3", "--client", "root"],
    );
    let mut cluster = Cluster::start_tls(3, &ours).await;
    let urls: Vec<String> = cluster
        .members
        .iter()
        .map(|m| m.client_url.clone())
        .collect();
    assert!(urls.iter().all(|u| u.starts_with("https://")), "{urls:?}");
    let all = urls.join(",");
    let ca = ours.join("ca.pem");
    let root = Some((ours.as_path(), "root"));

    // etcdctl with the cluster's CA and a client certificate.
    let (ok, out) = etcdctl(&all, &ca, root, &["put", "/tls/a", "1"]);
    assert!(ok && out.trim() == "OK", "{out}");
    let (ok, out) = etcdctl(&all, &ca, root, &["endpoint", "status", "-w", "table"]);
    assert!(ok, "{out}");
    for u in &urls {
        assert!(out.contains(u.as_str()), "{u} in\n{out}");
    }
    let (ok, out) = etcdctl(&all, &ca, root, &["endpoint", "health"]);
    assert!(ok && out.matches("is healthy").count() == 3, "{out}");

    // The Rust client over TLS.
    let mut client = cluster.client_all().await;
    let got = client.get("/tls/a", None).await.expect("get over TLS");
    assert_eq!(got.kvs()[0].value_str().expect("utf8"), "1");
    client.put("/tls/b", "2", None).await.expect("put over TLS");

    // No client certificate, or one from another CA: refused.
    let (ok, out) = etcdctl(&urls[0], &ca, None, &["get", "/tls/a"]);
    assert!(!ok, "no client certificate, and yet: {out}");
    let (ok, out) = etcdctl(
        &urls[0],
        &ca,
        Some((other.as_path(), "root")),
        &["get", "/tls/a"],
    );
    assert!(!ok, "a certificate from another CA, and yet: {out}");
    // Nor does a client that trusts another CA take the members' certificates.
    let (ok, out) = etcdctl(&urls[0], &other.join("ca.pem"), root, &["get", "/tls/a"]);
    assert!(
        !ok,
        "a server certificate from an untrusted CA, and yet: {out}"
    );

    // A member whose peer certificate comes from another CA cannot join.
    let i = cluster.add_spec();
    for f in ["m3.pem", "m3-key.pem"] {
        std::fs::copy(other.join(f), ours.join(f)).expect("copy the stranger's certificate");
    }
    let peer = cluster.members[i].peer_url.clone();
    let (ok, out) = etcdctl(
        &all,
        &ca,
        root,
        &["member", "add", "m3", &format!("--peer-urls={peer}")],
    );
    assert!(ok, "member add: {out}");
    cluster.start_joining(i);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = cluster.members[i].exited() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the stranger is still trying to join:\n{}",
            cluster.log_of(i)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!status.success(), "{status}");
    assert!(
        cluster
            .log_of(i)
            .contains("no member of --initial-cluster answered"),
        "{}",
        cluster.log_of(i)
    );
    let (ok, out) = etcdctl(&all, &ca, root, &["member", "list"]);
    assert!(
        ok && out.contains(&format!(", unstarted, , {peer}")),
        "{out}"
    );
    let (ok, out) = etcdctl(&all, &ca, root, &["put", "/tls/c", "3"]);
    assert!(ok, "the cluster still takes writes: {out}");
    for m in 0..3 {
        let log = cluster.log_of(m);
        assert!(
            !log.contains("does not speak the Raft stream")
                && !log.contains("does not speak the relay"),
            "AppendEntries and forwarded requests travel on the stream and relay over TLS \
             too:\n{log}"
        );
    }

    // etcd's auth under --client-cert-auth: a request without a token is made by the user
    // its certificate names (CN), who needs no password.
    let carol = Some((ours.as_path(), "carol"));
    for args in [
        &["user", "add", "root", "--no-password"][..],
        &["user", "add", "carol", "--no-password"],
        &["role", "add", "c"],
        &[
            "role",
            "grant-permission",
            "c",
            "readwrite",
            "/carol/",
            "--prefix=true",
        ],
        &["user", "grant-role", "carol", "c"],
        &["auth", "enable"],
    ] {
        let (ok, out) = etcdctl(&urls[1], &ca, root, args);
        assert!(ok, "{args:?}: {out}");
    }
    let (ok, out) = etcdctl(&urls[2], &ca, carol, &["put", "/carol/a", "1"]);
    assert!(ok, "carol writes her prefix: {out}");
    let (ok, out) = etcdctl(&urls[2], &ca, carol, &["put", "/tls/d", "1"]);
    assert!(!ok && out.contains("permission denied"), "{out}");
    let (ok, out) = etcdctl(
        &urls[1],
        &ca,
        root,
        &["get", "/carol/a", "--print-value-only"],
    );
    assert!(ok && out == "1\n", "{out}");
    // She has no password: no password logs her in.
    let (ok, out) = etcdctl(
        &urls[1],
        &ca,
        carol,
        &["--user=carol:guess", "get", "/carol/a"],
    );
    assert!(!ok && out.contains("authentication failed"), "{out}");
    let (ok, out) = etcdctl(&urls[1], &ca, root, &["auth", "disable"]);
    assert!(ok, "{out}");

    // Rotation: m0's certificate files replaced (here by one from the other CA, so the change
    // shows); new connections get the new one, with no restart.
    for f in ["m0.pem", "m0-key.pem"] {
        let tmp = ours.join(format!("{f}.new"));
        std::fs::copy(other.join(f), &tmp).expect("copy");
        std::fs::rename(&tmp, ours.join(f)).expect("replace");
    }
    let endpoint = urls[0].clone();
    let other_ca = other.join("ca.pem");
    eventually(
        Duration::from_secs(10),
        "m0 to serve its new certificate",
        || {
            let (ok, _) = etcdctl(
                &endpoint,
                &other_ca,
                root,
                &["get", "/tls/a", "--consistency=s"],
            );
            async move { ok.then_some(()) }
        },
    )
    .await;
    let (ok, out) = etcdctl(&urls[0], &ca, root, &["get", "/tls/a", "--consistency=s"]);
    assert!(!ok, "m0 still serves its old certificate: {out}");
}
