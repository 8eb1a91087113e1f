//! A cluster's CA rotated with no downtime, as an operator does it: every member first
//! trusts both CAs (its CA file replaced by the two), then serves a certificate from the new
//! one, then trusts the new CA alone. The members read their files again as they change, so
//! nothing restarts: a client writing all along (etcdctl, a new connection each time,
//! trusting both CAs and moving to a new certificate when the members accept it) sees no
//! error, and at the end a certificate from the old CA is refused by every member, on the
//! client URLs and between peers alike.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Cluster, eventually};

fn certs(dir: &Path, args: &[&str]) {
    let mut all = vec!["certs", "--dir", dir.to_str().expect("utf8 path")];
    all.extend_from_slice(args);
    let (ok, out) = common::run_skiff(&all);
    assert!(ok, "skiff certs: {out}");
}

/// etcdctl against `endpoint`, trusting `ca`, presenting `cert` (`<cert>.pem` and
/// `<cert>-key.pem`).
fn etcdctl(endpoint: &str, ca: &Path, cert: &Path, args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new("etcdctl");
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .arg("--command-timeout=5s")
        .arg("--dial-timeout=2s")
        .arg(format!("--cacert={}", ca.display()))
        .arg(format!("--cert={}.pem", cert.display()))
        .arg(format!("--key={}-key.pem", cert.display()));
    common::outcome(cmd.args(args).output().expect("etcdctl is installed"))
}

/// Replaces `to` with `from`'s contents in one step (a reader sees the old or the new file).
fn replace(from: &Path, to: &Path) {
    let tmp = to.with_extension("new");
    std::fs::copy(from, &tmp).expect("copy");
    std::fs::rename(&tmp, to).expect("rename");
}

fn concat(files: &[PathBuf], to: &Path) {
    let mut all = Vec::new();
    for f in files {
        all.extend(std::fs::read(f).expect("read a CA"));
    }
    let tmp = to.with_extension("new");
    std::fs::write(&tmp, all).expect("write");
    std::fs::rename(&tmp, to).expect("rename");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ca_is_rotated_without_downtime() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ours = dir.path().join("certs");
    let new = dir.path().join("new");
    certs(
        &ours,
        &[
            "--member", "m0", "--member", "m1", "--member", "m2", "--client", "root",
        ],
    );
    certs(
        &new,
        &[
            "--member", "m0", "--member", "m1", "--member", "m2", "--client", "root",
        ],
    );
    let cluster = Cluster::start_tls(3, &ours).await;
    let urls: Vec<String> = cluster
        .members
        .iter()
        .map(|m| m.client_url.clone())
        .collect();
    let all = urls.join(",");
    let old_ca = dir.path().join("old-ca.pem");
    std::fs::copy(ours.join("ca.pem"), &old_ca).expect("keep the old CA");
    let (old_root, new_root) = (ours.join("root"), new.join("root"));
    // What the writer trusts from the start: both CAs.
    let both = dir.path().join("both-ca.pem");
    concat(&[old_ca.clone(), new.join("ca.pem")], &both);

    // A writer, one etcdctl after another, for the whole rotation.
    let stop = Arc::new(AtomicBool::new(false));
    let writer_cert = Arc::new(Mutex::new(old_root.clone()));
    let writer = {
        let (stop, cert, both, all) =
            (stop.clone(), writer_cert.clone(), both.clone(), all.clone());
        std::thread::spawn(move || {
            let (mut writes, mut failures) = (0u32, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                let cert = cert.lock().expect("cert").clone();
                let (ok, out) = etcdctl(
                    &all,
                    &both,
                    &cert,
                    &["put", "/rotation", &writes.to_string()],
                );
                if !ok {
                    failures.push(out);
                }
                writes += 1;
            }
            (writes, failures)
        })
    };

    // 1. Every member trusts both CAs (its CA file is the pair now).
    concat(&[old_ca.clone(), new.join("ca.pem")], &ours.join("ca.pem"));
    for u in &urls {
        let u = u.clone();
        let (ca, root) = (old_ca.clone(), new_root.clone());
        eventually(
            Duration::from_secs(10),
            "a member to take the new CA's client certificates",
            move || {
                let (ok, _) = etcdctl(&u, &ca, &root, &["get", "/rotation", "--consistency=s"]);
                async move { ok.then_some(()) }
            },
        )
        .await;
    }
    *writer_cert.lock().expect("cert") = new_root.clone();

    // 2. Every member serves (and presents to its peers) a certificate from the new CA.
    for (i, u) in urls.iter().enumerate() {
        for f in [format!("m{i}.pem"), format!("m{i}-key.pem")] {
            replace(&new.join(&f), &ours.join(&f));
        }
        let u = u.clone();
        let (ca, root) = (new.join("ca.pem"), new_root.clone());
        eventually(
            Duration::from_secs(10),
            "a member to serve its new certificate",
            move || {
                let (ok, _) = etcdctl(&u, &ca, &root, &["get", "/rotation", "--consistency=s"]);
                async move { ok.then_some(()) }
            },
        )
        .await;
    }

    // 3. The new CA alone: the old one's certificates are refused everywhere.
    replace(&new.join("ca.pem"), &ours.join("ca.pem"));
    for u in &urls {
        let u = u.clone();
        let (ca, root) = (both.clone(), old_root.clone());
        eventually(
            Duration::from_secs(10),
            "a member to refuse the old CA's certificates",
            move || {
                let (ok, _) = etcdctl(&u, &ca, &root, &["get", "/rotation", "--consistency=s"]);
                async move { (!ok).then_some(()) }
            },
        )
        .await;
    }
    // The peers still talk: a linearizable read and a write go through every member.
    for u in &urls {
        let (ok, out) = etcdctl(u, &new.join("ca.pem"), &new_root, &["put", "/after", "1"]);
        assert!(ok, "{u}: {out}");
        let (ok, out) = etcdctl(u, &new.join("ca.pem"), &new_root, &["get", "/after"]);
        assert!(ok && out.contains("/after"), "{u}: {out}");
    }

    stop.store(true, Ordering::Relaxed);
    let (writes, failures) = writer.join().expect("the writer");
    assert!(writes > 0, "the writer wrote nothing");
    assert!(
        failures.is_empty(),
        "{} of {writes} writes failed during the rotation, first: {}",
        failures.len(),
        failures[0]
    );
    eprintln!("{writes} writes during the rotation, none failed");
}
