//! The short Jepsen run of the default suite: about 30 s of `register` and `watch` traffic
//! against three real `skiff store` members in private network namespaces, while the
//! nemesis partitions the network (iptables grudges) and kill -9s members (restarting them on
//! their data directories). It runs with `--tls`: members on `https://` client and peer URLs
//! with certificates required on both, so TLS handshakes are under the same faults; and with
//! `--auth`: etcd's auth on, every client request authenticated and permission-checked, tokens
//! renewed after a killed member comes back without them.
//!
//! Property proven: under those faults every history the store produces is linearizable per
//! key, in revision order across keys, and every watcher's stream is ordered, unique,
//! atomic, gap-free against acknowledged writes, resumable and in agreement with the other
//! watchers — so any change that breaks those guarantees under faults fails the suite.

use std::path::{Path, PathBuf};
use std::process::Command;

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
}

fn results_file(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path().join("results.json"))
        .find(|p| p.is_file())
}

#[test]
fn register_and_watch_stay_correct_under_partitions_and_kills() {
    for tool in ["unshare", "ip"] {
        if !on_path(tool) {
            eprintln!(
                "SKIPPED: `{tool}` is not installed, so no network namespaces can be made \
                 (Debian: apt-get install util-linux iproute2)"
            );
            return;
        }
    }
    assert!(
        on_path("iptables"),
        "the Jepsen run needs iptables for partitions: apt-get install iptables"
    );
    let dir = tempfile::Builder::new()
        .prefix("skiff-jepsen-")
        .tempdir()
        .expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args([
            "jepsen",
            "--workload",
            "register,watch",
            "--nemesis",
            "partition,kill",
            "--time-limit",
            "30",
            "--seed",
            "7",
            "--tls",
            "--auth",
            "--report-dir",
        ])
        .arg(dir.path())
        .env("SKIFF_LOG", "warn,openraft=error")
        .output()
        .expect("run skiff jepsen");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let results = results_file(dir.path()).map(|p| std::fs::read_to_string(p).expect("read"));
    if !out.status.success() || results.is_none() {
        let kept = dir.keep();
        panic!(
            "skiff jepsen failed ({}); report kept in {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status,
            kept.display()
        );
    }
    let results: serde_json::Value =
        serde_json::from_str(&results.expect("checked above")).expect("results.json parses");
    assert_eq!(results["valid"], true, "{results:#}");
    let checkers: Vec<&str> = results["checkers"]
        .as_array()
        .expect("checkers")
        .iter()
        .filter_map(|c| c["checker"].as_str())
        .collect();
    for c in ["linearizable", "watch", "revision-order", "convergence"] {
        assert!(checkers.contains(&c), "{c} missing from {checkers:?}");
    }
    assert!(
        results["ops"]["ok"].as_u64().unwrap_or(0) >= 200,
        "too little traffic to mean anything: {}",
        results["ops"]
    );
    assert!(
        !results["faults"].as_array().expect("faults").is_empty(),
        "no fault was injected"
    );
    println!("{stdout}");
}
