//! `skiff up` and the kubectl-style CLI end to end, through the real binary only: a user's
//! session from `up` to Ctrl-C, on simulated nodes and on a real containerd.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{eventually, skiff_bin};
use nix::sys::signal::Signal;
use skiff_launch::{Child, Launch};
use skiff_proto::api::{Kind, Object, PodPhase};
use skiff_proto::client::{ClusterClient, ListParams};

/// A base port whose 32 successors are free now (below the ephemeral range). Calls in one
/// test process walk distinct ranges, so tests running side by side never pick the same one.
fn free_base() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id();
    let _ = NEXT.compare_exchange(u32::MAX, seed % 120, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..120 {
        let slot = NEXT.fetch_add(1, Ordering::Relaxed) % 120;
        let base = 20_000 + slot as u16 * 100;
        if (base..base + 32).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return base;
        }
    }
    panic!("no free range of 32 ports");
}

/// A `skiff up` process. Dropped: Ctrl-C (SIGINT) and a wait, then SIGKILL; its whole
/// output is printed if the test failed.
struct Up {
    child: Child,
    config: PathBuf,
    dir: PathBuf,
}

impl Up {
    fn start(work: &Path, base: u16, extra: &[&str]) -> Up {
        static STARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let out = work.join(format!("up-{n}.out"));
        let dir = work.join("cluster");
        let config = work.join("config");
        let child = Launch::new("skiff up", skiff_bin(), out)
            .arg("up")
            .arg("--data-dir")
            .arg(&dir)
            .args(["--base-port", &base.to_string()])
            .args(extra)
            .env("SKIFF_CONFIG", &config)
            .env_remove("SKIFF_ENDPOINTS")
            .spawn()
            .expect("spawn skiff up")
            .tail_on_panic(usize::MAX);
        let up = Up { child, config, dir };
        up.wait_output("ready in", Duration::from_secs(120));
        up
    }

    fn output(&self) -> String {
        std::fs::read_to_string(self.child.log()).unwrap_or_default()
    }

    fn wait_output(&self, what: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.output().contains(what) {
            assert!(
                Instant::now() < deadline,
                "`skiff up` did not print {what:?} within {limit:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn pid(&self) -> u32 {
        self.child.pid().expect("running")
    }

    /// The processes `up` started.
    fn children(&self) -> Vec<u32> {
        let out = Command::new("pgrep")
            .args(["-P", &self.pid().to_string()])
            .output()
            .expect("pgrep");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// Ctrl-C, and its exit status once it has stopped everything.
    fn interrupt(&mut self, limit: Duration) -> std::process::ExitStatus {
        assert!(self.child.is_running(), "`skiff up` is not running");
        match self.child.stop(Signal::SIGINT, limit) {
            Some(status) => status,
            None => panic!(
                "`skiff up` did not stop within {limit:?}:\n{}",
                self.output()
            ),
        }
    }

    /// Runs `skiff ARGS` as a user would, with only the client configuration `up` wrote.
    fn skiff(&self, args: &[&str]) -> Output {
        Command::new(skiff_bin())
            .args(args)
            .env("SKIFF_CONFIG", &self.config)
            .env_remove("SKIFF_ENDPOINTS")
            .output()
            .expect("skiff")
    }

    fn endpoints(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.config).expect("client configuration");
        text.lines()
            .filter_map(|l| l.trim().strip_prefix("- "))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if self.child.is_running() {
            self.interrupt(Duration::from_secs(30));
        }
        // Mounts a containerd of the cluster may have left (overlay snapshots, shims' state).
        common::unmount_under(&self.dir);
    }
}

fn ok(o: &Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "command failed ({}):\n{text}", o.status);
    text
}

async fn pods(api: &ClusterClient) -> Vec<skiff_proto::api::Pod> {
    match api.list(Kind::Pod, &ListParams::default()).await {
        Ok((items, _)) => items
            .into_iter()
            .filter_map(|o| match o {
                Object::Pod(p) => Some(p),
                _ => None,
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The user's flow on simulated nodes: `up` → `apply` 100 pods → all Running, spread over the
/// nodes, each with its events → `delete` → gone; Ctrl-C stops every process `up` started;
/// a second `up` on the same directory resumes the same data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_apply_run_delete_stop_resume() {
    let work = tempfile::tempdir().expect("temp dir");
    let base = free_base();
    let mut up = Up::start(work.path(), base, &["--nodes", "3"]);
    assert!(up.output().contains("starting a three-member store quorum"));
    let api = ClusterClient::connect(&up.endpoints()).expect("client");

    let mut manifest = String::new();
    for i in 0..100 {
        manifest.push_str(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p-{i}\n  labels: {{app: load}}\nspec:\n  containers:\n  - name: main\n    image: localhost/skiff/busybox:1\n    command: [sleep, \"3600\"]\n    resources:\n      requests: {{cpu: 100m, memory: 64Mi}}\n---\n"
        ));
    }
    let file = work.path().join("pods.yaml");
    std::fs::write(&file, manifest).expect("manifest");
    let applied = ok(&up.skiff(&["apply", "-f", file.to_str().expect("path")]));
    assert_eq!(applied.matches(" created").count(), 100, "{applied}");

    let running = eventually(Duration::from_secs(120), "100 pods Running", || async {
        let p = pods(&api).await;
        let running = p
            .iter()
            .filter(|p| p.phase() == Some(PodPhase::Running))
            .count();
        (running == 100).then_some(p)
    })
    .await;
    let mut per_node = std::collections::BTreeMap::<String, usize>::new();
    for p in &running {
        *per_node.entry(p.spec.node_name.clone()).or_default() += 1;
    }
    assert_eq!(
        per_node.keys().cloned().collect::<Vec<_>>(),
        ["node-0", "node-1", "node-2"],
        "{per_node:?}"
    );
    assert!(
        per_node.values().all(|n| *n >= 10),
        "not spread: {per_node:?}"
    );

    // kubectl-style output, with endpoints from the configuration file alone.
    let table = ok(&up.skiff(&["get", "pods", "-o", "wide"]));
    assert_eq!(table.lines().count(), 101, "{table}");
    assert!(
        table.lines().next().is_some_and(|h| h.starts_with("NAME")),
        "{table}"
    );
    let described = eventually(Duration::from_secs(30), "the events of p-7", || async {
        let d = ok(&up.skiff(&["describe", "pod", "p-7"]));
        (d.contains("Scheduled") && d.contains("Started container main")).then_some(d)
    })
    .await;
    assert!(described.contains("default-scheduler"), "{described}");

    let names: Vec<String> = (0..100).map(|i| format!("p-{i}")).collect();
    let mut delete = vec!["delete", "pod"];
    delete.extend(names.iter().map(String::as_str));
    let deleted = ok(&up.skiff(&delete));
    assert_eq!(deleted.matches(" deleted").count(), 100, "{deleted}");
    // `delete` waits: nothing is left when it returns.
    assert!(pods(&api).await.is_empty());
    let events = ok(&up.skiff(&["get", "events"]));
    assert!(events.contains("Killing"), "{events}");

    // Something to find after a restart.
    ok(&up.skiff(&["apply", "-f", "../examples/namespace-policy.yaml"]));
    let children = up.children();
    assert!(
        children.len() >= 5,
        "members, scheduler, agents: {children:?}"
    );
    let status = up.interrupt(Duration::from_secs(60));
    assert!(status.success(), "{status}\n{}", up.output());
    for pid in children {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} outlived `skiff up`"
        );
    }

    let up = Up::start(work.path(), base, &["--nodes", "3"]);
    assert!(up.output().contains("resuming"), "{}", up.output());
    let ns = ok(&up.skiff(&["get", "namespaces"]));
    assert!(ns.contains("team-a"), "{ns}");
    let quota = ok(&up.skiff(&["get", "quota", "-n", "team-a"]));
    assert!(quota.contains("compute"), "{quota}");
}

/// A second `up` on a directory in use is refused and names the holder.
#[test]
fn a_second_up_on_the_same_directory_is_refused() {
    let work = tempfile::tempdir().expect("temp dir");
    let base = free_base();
    let _up = Up::start(work.path(), base, &["--nodes", "1"]);
    let out = Command::new(skiff_bin())
        .arg("up")
        .arg("--data-dir")
        .arg(work.path().join("cluster"))
        .env("SKIFF_CONFIG", work.path().join("config2"))
        .output()
        .expect("skiff up");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another `skiff up` runs from"), "{err}");
}

/// Without `up` and without endpoints the CLI says where endpoints come from.
#[test]
fn the_cli_without_a_cluster_says_what_to_do() {
    let work = tempfile::tempdir().expect("temp dir");
    let out = Command::new(skiff_bin())
        .args(["get", "pods"])
        .env("SKIFF_CONFIG", work.path().join("absent"))
        .env_remove("SKIFF_ENDPOINTS")
        .output()
        .expect("skiff get");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pass --endpoints, set SKIFF_ENDPOINTS, or start one with `skiff up`"),
        "{err}"
    );
}

/// With `--runtime cri` on a real containerd (Debian's containerd + runc, started by `up`
/// with its own root and socket): a busybox pod runs, `skiff logs` shows its output, and
/// `skiff delete` stops it gracefully (the container's TERM handler runs; the Killing event
/// is recorded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_with_containerd_runs_logs_and_stops_a_busybox_pod() {
    let missing: Vec<&str> = ["containerd", "runc", "ctr"]
        .into_iter()
        .filter(|b| {
            !Command::new("sh")
                .arg("-c")
                .arg(format!("command -v {b}"))
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .collect();
    let root = nix::unistd::geteuid().is_root();
    if !missing.is_empty() || !root || !Path::new("/bin/busybox").exists() {
        eprintln!(
            "skipped: needs root, containerd, runc and busybox-static (missing: {missing:?}, root: {root}); scripts/test.sh installs them"
        );
        return;
    }
    let work = tempfile::tempdir().expect("temp dir");
    let base = free_base();
    let up = Up::start(work.path(), base, &["--runtime", "cri", "--nodes", "1"]);
    let api = ClusterClient::connect(&up.endpoints()).expect("client");
    let manifest = work.path().join("hello.yaml");
    std::fs::write(
        &manifest,
        r#"apiVersion: v1
kind: Pod
metadata:
  name: hello-cri
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 60
  containers:
  - name: main
    image: localhost/skiff/busybox:1
    command: ["sh", "-c", "trap 'echo stopping on TERM; exit 0' TERM; echo hello from containerd; while true; do sleep 0.2; done"]
"#,
    )
    .expect("manifest");
    ok(&up.skiff(&["apply", "-f", manifest.to_str().expect("path")]));
    eventually(Duration::from_secs(90), "hello-cri Running", || async {
        pods(&api)
            .await
            .iter()
            .any(|p| p.metadata.name == "hello-cri" && p.phase() == Some(PodPhase::Running))
            .then_some(())
    })
    .await;
    let logs = eventually(Duration::from_secs(30), "the pod's output", || async {
        let o = up.skiff(&["logs", "hello-cri"]);
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        (o.status.success() && text.contains("hello from containerd")).then_some(text)
    })
    .await;
    assert!(logs.contains("hello from containerd"), "{logs}");

    // Graceful: the TERM handler ends the container long before the 60 s grace period, and
    // `delete` returns once the pod is gone.
    let started = Instant::now();
    let deleted = ok(&up.skiff(&["delete", "pod", "hello-cri"]));
    assert!(deleted.contains("pod \"hello-cri\" deleted"), "{deleted}");
    assert!(
        started.elapsed() < Duration::from_secs(55),
        "the container ignored SIGTERM and was killed after the grace period"
    );
    let events = ok(&up.skiff(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=hello-cri",
    ]));
    for reason in ["Scheduled", "Pulled", "Created", "Started", "Killing"] {
        assert!(events.contains(reason), "no {reason} event:\n{events}");
    }
}
