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

/// A base port whose 33 successors are free now (below the ephemeral range). Calls in one
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
        // Every port `up` takes: members at base+10i..+3, the scheduler and agents at
        // +30..+32, the controller manager at +33.
        if (base..=base + 33).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return base;
        }
    }
    panic!("no free range of 34 ports");
}

/// A `skiff up` process. Dropped: Ctrl-C (SIGINT) and a wait, then SIGKILL; its whole
/// output is printed if the test failed.
struct Up {
    child: Child,
    config: PathBuf,
    /// The kubeconfig `up` merged its context into (never the user's own).
    kubeconfig: PathBuf,
    dir: PathBuf,
    /// The base port it runs on.
    base: u16,
}

impl Up {
    /// Starts `up` on `base` and waits until it is ready. A range found free can be taken by
    /// another process before `up` binds it; `up` then refuses to start, and a new cluster is
    /// started on another free range (twice at most). A cluster resumed from `work` keeps its
    /// ports, so that is never retried.
    fn start(work: &Path, base: u16, extra: &[&str]) -> Up {
        let fresh = !work.join("cluster").join("cluster.json").exists();
        let mut base = base;
        for attempt in 1.. {
            let mut up = Up::spawn(work, base, extra);
            match up.wait_ready(Duration::from_secs(120)) {
                Ok(()) => return up,
                Err(out) if fresh && attempt < 3 && out.contains("are in use") => {
                    eprintln!("ports of {base} taken before `up` bound them; another range");
                    base = free_base();
                }
                Err(out) => panic!("`skiff up` exited before it was ready:\n{out}"),
            }
        }
        unreachable!("the loop returns or panics")
    }

    /// Waits until `up` says it is ready; its output if it exits first.
    fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        while !self.output().contains("ready in") {
            if self.child.exited().is_some() {
                return Err(self.output());
            }
            assert!(
                Instant::now() < deadline,
                "`skiff up` was not ready within {limit:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    fn spawn(work: &Path, base: u16, extra: &[&str]) -> Up {
        static STARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let out = work.join(format!("up-{n}.out"));
        let dir = work.join("cluster");
        let config = work.join("config");
        let kubeconfig = work.join("kubeconfig");
        let child = Launch::new("skiff up", skiff_bin(), out)
            .arg("up")
            .arg("--data-dir")
            .arg(&dir)
            .args(["--base-port", &base.to_string()])
            .args(extra)
            .env("SKIFF_CONFIG", &config)
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("SKIFF_ENDPOINTS")
            .spawn()
            .expect("spawn skiff up")
            .tail_on_panic(usize::MAX);
        Up {
            child,
            config,
            kubeconfig,
            dir,
            base,
        }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(self.child.log()).unwrap_or_default()
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

    /// Runs `kubectl ARGS` with only the kubeconfig `up` wrote (and `stdin`, when given).
    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Output {
        self.kubectl_env(args, stdin, &[])
    }

    /// `kubectl ARGS` with `env` set (kubectl's switches between protocols).
    fn kubectl_env(&self, args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Output {
        let mut child = Command::new("kubectl")
            .args(args)
            .envs(env.iter().copied())
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl");
        if let Some(text) = stdin {
            use std::io::Write as _;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(text.as_bytes())
                .expect("kubectl stdin");
        }
        drop(child.stdin.take());
        child.wait_with_output().expect("kubectl output")
    }

    /// `kubectl ARGS` that must succeed; its standard output.
    fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl(args, stdin);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A cluster API client with the admin's certificate `up` made.
    fn client(&self) -> ClusterClient {
        let tls = skiff_proto::tls::ClientTls::in_dir(&self.dir.join("certs"), "admin");
        ClusterClient::connect_with(&self.endpoints(), Some(&tls)).expect("client")
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
    let mut up = Up::start(work.path(), free_base(), &["--nodes", "3"]);
    let base = up.base;
    assert!(up.output().contains("starting a three-member store quorum"));
    let api = up.client();

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

/// With `--runtime cri --nodes 2`: two real nodes, each a containerd of its own (Debian's
/// containerd + runc, started by `up` with its own root and socket) in a network namespace
/// of its own on a link they share: both register with their address on the link, a busybox
/// pod on the pod network runs with an address from its node's block, `skiff logs` shows its
/// output, `kubectl exec`
/// runs in it through containerd's streaming server, `kubectl port-forward` reaches a server
/// on its loopback, and
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
    let up = Up::start(work.path(), base, &["--runtime", "cri", "--nodes", "2"]);
    let api = up.client();
    let manifest = work.path().join("hello.yaml");
    std::fs::write(
        &manifest,
        r#"apiVersion: v1
kind: Pod
metadata:
  name: hello-cri
spec:
  terminationGracePeriodSeconds: 60
  containers:
  - name: main
    image: localhost/skiff/busybox:1
    command: ["sh", "-c", "mkdir -p /www && echo hello through port-forward > /www/index.html && httpd -p 127.0.0.1:8080 -h /www; trap 'echo stopping on TERM; exit 0' TERM; echo hello from containerd; while true; do sleep 0.2; done"]
"#,
    )
    .expect("manifest");
    ok(&up.skiff(&["apply", "-f", manifest.to_str().expect("path")]));
    let (nodes, _) = api
        .list(Kind::Node, &ListParams::default())
        .await
        .expect("nodes");
    let addresses: Vec<String> = nodes
        .iter()
        .filter_map(|o| match o {
            Object::Node(n) => n
                .status
                .as_ref()?
                .addresses
                .first()
                .map(|a| a.address.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        addresses,
        ["10.78.0.11", "10.78.0.12"],
        "the nodes' InternalIPs"
    );
    let pod = eventually(Duration::from_secs(90), "hello-cri Running", || async {
        pods(&api)
            .await
            .into_iter()
            .find(|p| p.metadata.name == "hello-cri" && p.phase() == Some(PodPhase::Running))
    })
    .await;
    let ip = pod.status.map(|s| s.pod_ip).unwrap_or_default();
    assert!(ip.starts_with("10.244."), "a pod network address: {ip:?}");
    let logs = eventually(Duration::from_secs(30), "the pod's output", || async {
        let o = up.skiff(&["logs", "hello-cri"]);
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        (o.status.success() && text.contains("hello from containerd")).then_some(text)
    })
    .await;
    assert!(logs.contains("hello from containerd"), "{logs}");

    // exec through containerd's streaming server, over WebSocket and over SPDY: output,
    // stderr and the exit code.
    if kubectl_on_path() {
        for env in [
            &[][..],
            &[("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")][..],
        ] {
            let out = up.kubectl_env(
                &[
                    "exec",
                    "hello-cri",
                    "--",
                    "sh",
                    "-c",
                    "echo out; echo err >&2; exit 7",
                ],
                None,
                env,
            );
            assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n", "{env:?}");
            assert!(String::from_utf8_lossy(&out.stderr).contains("err"));
            assert_eq!(out.status.code(), Some(7));
        }
        // port-forward through CRI's PortForward to a server on the pod's own loopback,
        // which only a connection made in the pod's network namespace reaches.
        let mut forward = PortForward::start(&up, "pod/hello-cri", 8080, false);
        let answer = forward.exchange("GET /index.html HTTP/1.0\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.ends_with("hello through port-forward\n"), "{answer}");
        drop(forward);
        in_cluster_client(&up).await;
        security_contexts(&up).await;
    } else {
        eprintln!("exec and the in-cluster client not checked: kubectl is not on PATH");
    }

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

/// A pod's securityContext reaches containerd: the container runs as its user, group and
/// supplemental groups (the fsGroup among them), the emptyDir it writes to belongs to the
/// fsGroup, its root filesystem is read-only; `runAsNonRoot` with an image that runs as root
/// is the kubelet's `CreateContainerConfigError`.
async fn security_contexts(up: &Up) {
    let manifest = r#"apiVersion: v1
kind: Pod
metadata: {name: secured}
spec:
  restartPolicy: Never
  securityContext: {runAsUser: 1000, runAsGroup: 3000, fsGroup: 2000, supplementalGroups: [4000]}
  containers:
  - name: c
    image: localhost/skiff/busybox:1
    securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false}
    command: [sh, -c, 'echo "uid $(id -u) gid $(id -g) groups $(id -G)"; touch /data/f && ls -ln /data/f; touch /made 2>/dev/null || echo "root filesystem read-only"']
    volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, emptyDir: {}}]
---
apiVersion: v1
kind: Pod
metadata: {name: rooted}
spec:
  securityContext: {runAsNonRoot: true}
  containers:
  - {name: c, image: localhost/skiff/busybox:1, command: [sleep, "3600"]}
"#;
    ok(&up.kubectl(&["apply", "-f", "-"], Some(manifest)));
    let logs = eventually(Duration::from_secs(90), "secured finished", || async {
        let o = up.kubectl(
            &["get", "pod", "secured", "-o", "jsonpath={.status.phase}"],
            None,
        );
        (String::from_utf8_lossy(&o.stdout) == "Succeeded").then_some(())?;
        let o = up.kubectl(&["logs", "secured"], None);
        Some(String::from_utf8_lossy(&o.stdout).to_string())
    })
    .await;
    assert!(logs.contains("uid 1000 gid 3000 groups 3000 "), "{logs}");
    assert!(logs.contains("4000") && logs.contains("2000"), "{logs}");
    assert!(
        logs.contains(" 1000     2000 "),
        "the file is the fsGroup's: {logs}"
    );
    assert!(logs.contains("root filesystem read-only"), "{logs}");
    let waiting = eventually(Duration::from_secs(60), "rooted refused", || async {
        let o = up.kubectl(
            &["get", "pod", "rooted", "-o",
              "jsonpath={.status.containerStatuses[0].state.waiting.reason}: {.status.containerStatuses[0].state.waiting.message}"],
            None,
        );
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        text.starts_with("CreateContainerConfigError").then_some(text)
    })
    .await;
    assert!(
        waiting.contains(
            "container has runAsNonRoot and image will run as root (pod: \"rooted_default("
        ),
        "{waiting}"
    );
}

/// A client inside the cluster, as operators run: kubectl in a pod (`localhost/skiff/kubectl:1`,
/// which `up` builds from the host's static kubectl) finds the API server through the
/// `kubernetes` Service and its variables, authenticates with its service account's mounted
/// token, checks the server against the mounted CA, lists the pods its Role allows and is
/// refused the Secrets it does not.
async fn in_cluster_client(up: &Up) {
    let manifest = r#"apiVersion: v1
kind: ServiceAccount
metadata: {name: lister}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader}
rules: [{apiGroups: [""], resources: [pods], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: lister-reads-pods}
subjects: [{kind: ServiceAccount, name: lister}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
---
apiVersion: v1
kind: Pod
metadata: {name: in-cluster}
spec:
  serviceAccountName: lister
  restartPolicy: Never
  containers:
  - name: c
    image: localhost/skiff/kubectl:1
    command: [sh, -c, 'kubectl get pods -o name; echo "pods: $?"; kubectl get secrets -n kube-system; echo "secrets: $?"']
"#;
    ok(&up.kubectl(&["apply", "-f", "-"], Some(manifest)));
    let logs = eventually(Duration::from_secs(90), "in-cluster finished", || async {
        let o = up.kubectl(
            &["get", "pod", "in-cluster", "-o", "jsonpath={.status.phase}"],
            None,
        );
        let phase = String::from_utf8_lossy(&o.stdout).to_string();
        if phase != "Succeeded" && phase != "Failed" {
            return None;
        }
        let o = up.kubectl(&["logs", "in-cluster"], None);
        Some(String::from_utf8_lossy(&o.stdout).to_string())
    })
    .await;
    assert!(
        logs.contains("pod/hello-cri") && logs.contains("pod/in-cluster"),
        "{logs}"
    );
    assert!(logs.contains("pods: 0"), "{logs}");
    assert!(
        logs.contains(
            "User \"system:serviceaccount:default:lister\" cannot list resource \"secrets\""
        ) && logs.contains("secrets: 1"),
        "{logs}"
    );
}

/// Compares `actual` with `tests/golden/NAME` (kubectl 1.32's output against Skiff);
/// `SKIFF_BLESS=1` writes it instead.
fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("SKIFF_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().expect("golden dir")).expect("golden dir");
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (SKIFF_BLESS=1 writes it)", path.display()));
    assert_eq!(
        actual,
        expected,
        "kubectl's output differs from {} (SKIFF_BLESS=1 rewrites it)",
        path.display()
    );
}

/// Runs `f` until its standard output contains `what` (60 s at most); that output.
fn eventually_output(f: impl Fn() -> Output, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = f();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains(what) || Instant::now() > deadline {
            return format!("{text}{}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn kubectl_on_path() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `kubectl port-forward <target> :<port>`, running until dropped.
struct PortForward {
    child: std::process::Child,
    /// The local port kubectl listens on.
    local: u16,
}

impl PortForward {
    /// Starts kubectl with its defaults, or with SPDY alone (`spdy_only`), and waits for
    /// the local port it chose.
    fn start(up: &Up, target: &str, port: u16, spdy_only: bool) -> PortForward {
        use std::io::BufRead as _;
        let mut command = Command::new("kubectl");
        command
            .args(["port-forward", target, &format!(":{port}")])
            .env("KUBECONFIG", &up.kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if spdy_only {
            command.env("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false");
        }
        let mut child = command.spawn().expect("kubectl port-forward");
        let stdout = child.stdout.take().expect("stdout");
        let (lines, printed) = std::sync::mpsc::channel();
        // Reads to the end: kubectl dies of SIGPIPE if its output goes nowhere ("Handling
        // connection for …" follows every connection).
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let _ = lines.send(line);
            }
        });
        let mut forward = PortForward { child, local: 0 };
        let deadline = Instant::now() + Duration::from_secs(30);
        while forward.local == 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = printed.recv_timeout(left) else {
                let stderr = forward.finish();
                panic!("kubectl port-forward {target} printed no local port:\n{stderr}");
            };
            // "Forwarding from 127.0.0.1:41234 -> 8080"
            if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
                let local = rest.split_whitespace().next().unwrap_or_default();
                forward.local = local.parse().expect("a local port");
            }
        }
        forward
    }

    /// Sends `text` on a new connection, closes it for writing, and returns what came back
    /// until the far end closed it.
    fn exchange(&mut self, text: &str) -> String {
        use std::io::{Read as _, Write as _};
        let exchanged = (|| {
            let mut conn = std::net::TcpStream::connect(("127.0.0.1", self.local))?;
            conn.set_read_timeout(Some(Duration::from_secs(30)))?;
            // Written beside the reads: an echo of more than the buffers on the way hold
            // needs both.
            let mut writer = conn.try_clone()?;
            let sent = text.to_string();
            let writing = std::thread::spawn(move || {
                writer.write_all(sent.as_bytes())?;
                writer.shutdown(std::net::Shutdown::Write)
            });
            let mut back = String::new();
            conn.read_to_string(&mut back)?;
            writing.join().expect("the writer")?;
            std::io::Result::Ok(back)
        })();
        exchanged.unwrap_or_else(|e| {
            let stderr = self.finish();
            panic!("a connection through kubectl port-forward: {e}\nkubectl:\n{stderr}")
        })
    }

    /// Waits up to 30 s for kubectl to stop (killing it then) and returns its stderr.
    fn finish(&mut self) -> String {
        use std::io::Read as _;
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().expect("kubectl").is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        stderr
    }
}

impl Drop for PortForward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The real kubectl, with only the kubeconfig `skiff up` wrote and its default settings
/// (client-side apply, Strict field validation, Tables from the server): discovery, apply
/// twice, server-side apply twice, get and get -o wide, a watch seeing a pod go Pending → Running, describe with
/// events, logs, exec (WebSocket and SPDY), port-forward (SPDY in a WebSocket, and SPDY), a manifest kubectl generates, explain, a bad manifest refused with its field path,
/// create namespace and drain (protobuf bodies), delete --wait, a CRD's CEL rules, a CRD's object deleted in the
/// foreground after the ConfigMap it owns, and apps/v1: a Deployment
/// applied, listed wide with replica sets, explained, scaled through its scale subresource,
/// deleted with --cascade=orphan (the garbage collector leaves its ReplicaSet, owned by
/// nothing), and a Deployment whose selector misses its template refused with the field path.
#[test]
fn kubectl_session() {
    if !kubectl_on_path() {
        eprintln!("skipped: kubectl is not on PATH");
        return;
    }
    let work = tempfile::tempdir().expect("tempdir");
    kubectl_session_on(work.path(), &[]);
}

/// The same session on `skiff up --etcd-servers`: three `skiff apiserver` processes over
/// Debian's etcd 3.4 (started here) in place of the store members.
#[test]
fn kubectl_session_on_etcd() {
    if !kubectl_on_path() {
        eprintln!("skipped: kubectl is not on PATH");
        return;
    }
    let work = tempfile::tempdir().expect("tempdir");
    let (client, peer) = (common::free_port(), common::free_port());
    let url = format!("http://127.0.0.1:{client}");
    let _etcd = Launch::new("etcd", common::etcd_bin(), work.path().join("etcd.log"))
        .args([
            "--name=etcd".to_string(),
            format!("--data-dir={}", work.path().join("etcd").display()),
            format!("--listen-client-urls={url}"),
            format!("--advertise-client-urls={url}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-cluster=etcd=http://127.0.0.1:{peer}"),
        ])
        .spawn()
        .expect("etcd is installed (Debian package etcd-server; the test command installs it)");
    kubectl_session_on(work.path(), &["--etcd-servers", &url]);
}

/// The kubectl session of [`kubectl_session`], on `skiff up` with `extra` flags.
fn kubectl_session_on(work: &Path, extra: &[&str]) {
    let flags: Vec<&str> = ["--nodes", "2"]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let up = Up::start(work, free_base(), &flags);
    assert!(
        up.output().contains("kubectl: context \"skiff\""),
        "{}",
        up.output()
    );

    let version = up.kubectl_ok(&["version", "-o", "json"], None);
    assert!(version.contains("skiff"), "{version}");
    let nodes = up.kubectl_ok(&["get", "nodes"], None);
    assert!(nodes.starts_with("NAME"), "{nodes}");
    assert_eq!(nodes.matches(" Ready ").count(), 2, "{nodes}");

    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/pod.yaml");
    let examples = examples.to_str().expect("utf-8 path");
    let applied = up.kubectl_ok(&["apply", "-f", examples], None);
    assert_eq!(applied.trim(), "pod/hello created");
    let again = up.kubectl_ok(&["apply", "-f", examples], None);
    assert_eq!(again.trim(), "pod/hello unchanged");

    // A watch started before the pod exists sees it created and then Running.
    let mut watch = Command::new("kubectl")
        .args(["get", "pods", "-w", "--request-timeout=60s"])
        .env("KUBECONFIG", &up.kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get -w");
    let web = up.kubectl_ok(
        &[
            "run",
            "web",
            "--image=localhost/skiff/busybox:1",
            "--port=8080",
            "--dry-run=client",
            "-o",
            "yaml",
            "--",
            "sleep",
            "3600",
        ],
        None,
    );
    assert!(web.contains("dnsPolicy"), "{web}");
    assert_eq!(
        up.kubectl_ok(&["apply", "-f", "-"], Some(&web)).trim(),
        "pod/web created"
    );
    let stdout = watch.stdout.take().expect("watch stdout");
    let seen = std::thread::spawn(move || {
        use std::io::BufRead as _;
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let running = line.starts_with("web ") && line.contains("Running");
            lines.push(line);
            if running {
                break;
            }
        }
        lines
    });
    let lines = seen.join().expect("watch reader");
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("web ") && l.contains("Running")),
        "{lines:?}"
    );

    let wide = up.kubectl_ok(&["get", "pods", "-o", "wide"], None);
    let header: Vec<&str> = wide
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED",
            "NODE",
            "READINESS",
            "GATES"
        ],
        "{wide}"
    );
    let described = up.kubectl_ok(&["describe", "pod", "web"], None);
    assert!(
        described.contains("Events:") && described.contains("Scheduled"),
        "{described}"
    );

    let logs = eventually_output(|| up.kubectl(&["logs", "hello"], None), "hello from skiff");
    assert!(logs.contains("hello from skiff"), "{logs}");

    // exec over WebSocket (v5.channel.k8s.io, kubectl's default), then over SPDY (its
    // fallback, and client-go's before 1.30), through the API server and the pod's agent:
    // output, the exit code, and standard input closed by the client.
    for env in [
        &[][..],
        &[("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")][..],
    ] {
        let out = up.kubectl_env(
            &["exec", "web", "--", "sh", "-c", "echo hello from exec"],
            None,
            env,
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "hello from exec\n",
            "{env:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let failed = up.kubectl_env(&["exec", "web", "--", "sh", "-c", "exit 3"], None, env);
        assert_eq!(
            failed.status.code(),
            Some(3),
            "{env:?}: {}",
            String::from_utf8_lossy(&failed.stderr)
        );
        let piped = up.kubectl_env(
            &["exec", "-i", "web", "--", "cat"],
            Some("piped through\n"),
            env,
        );
        assert_eq!(
            String::from_utf8_lossy(&piped.stdout),
            "piped through\n",
            "{env:?}: {}",
            String::from_utf8_lossy(&piped.stderr)
        );
    }
    let nowhere = up.kubectl(&["exec", "nowhere", "--", "true"], None);
    assert!(
        String::from_utf8_lossy(&nowhere.stderr).contains("pods \"nowhere\" not found"),
        "{}",
        String::from_utf8_lossy(&nowhere.stderr)
    );

    // port-forward: SPDY tunneled in a WebSocket (kubectl's default), then SPDY on an
    // upgraded POST (its fallback); two connections through each kubectl, echoed by the
    // simulated pod's declared port.
    for spdy_only in [false, true] {
        let mut forward = PortForward::start(&up, "pod/web", 8080, spdy_only);
        for text in ["first connection\n", "second\n"] {
            assert_eq!(forward.exchange(text), text, "SPDY alone: {spdy_only}");
        }
        // 16 MiB, sent while it comes back: many frames each way, more than every buffer
        // on the way holds, and no flow-control window to wait for.
        let large: String = (0..16 << 20)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let echoed = forward.exchange(&large);
        assert!(
            echoed == large,
            "{} of {} bytes came back",
            echoed.len(),
            large.len()
        );
    }
    // A port nothing listens on: kubectl prints the pod's refusal and stops.
    let mut refused = PortForward::start(&up, "pod/web", 9090, false);
    assert_eq!(refused.exchange("anyone there?"), "");
    let stderr = refused.finish();
    assert!(stderr.contains("connection refused"), "{stderr}");

    let ssa = "apiVersion: v1\nkind: Pod\nmetadata: {name: ssa}\nspec:\n  containers:\n  - {name: c, image: localhost/skiff/busybox:1, command: [sleep, '3600']}\n";
    assert_eq!(
        up.kubectl_ok(&["apply", "--server-side", "-f", "-"], Some(ssa))
            .trim(),
        "pod/ssa serverside-applied"
    );
    assert_eq!(
        up.kubectl_ok(&["apply", "--server-side", "-f", "-"], Some(ssa))
            .trim(),
        "pod/ssa serverside-applied"
    );

    let explained = up.kubectl_ok(&["explain", "pod.spec.containers"], None);
    assert!(
        explained.contains("FIELDS:") && explained.contains("image"),
        "{explained}"
    );
    // What the server's discovery and schema alone decide, compared whole.
    golden(
        "kubectl-api-resources.txt",
        &up.kubectl_ok(&["api-resources"], None),
    );
    golden(
        "kubectl-explain-pod.spec.restartPolicy.txt",
        &up.kubectl_ok(&["explain", "pod.spec.restartPolicy"], None),
    );

    let bad = "apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  containers:\n  - name: c\n    image: i\n    imagee: j\n";
    let out = up.kubectl(&["apply", "-f", "-"], Some(bad));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("unknown field \"spec.containers[0].imagee\""),
        "{err}"
    );
    golden("kubectl-apply-unknown-field.txt", &err);
    let missing = up.kubectl(&["get", "pod", "bad"], None);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("pods \"bad\" not found"));

    // A CRD, and its objects through kubectl: established, applied, listed with the CRD's
    // printer columns, explained, refused with field paths, gone with the CRD.
    let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: crontabs.stable.example.com}\nspec:\n  group: stable.example.com\n  scope: Namespaced\n  names: {plural: crontabs, singular: crontab, kind: CronTab, shortNames: [ct]}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            required: [cronSpec]\n            x-kubernetes-validations:\n            - {rule: \"size(self.cronSpec.split(' ')) == 5\", message: cronSpec must have five fields, fieldPath: .cronSpec}\n            properties:\n              cronSpec: {type: string, description: the schedule, x-kubernetes-validations: [{rule: self == oldSelf, message: cronSpec is immutable}]}\n              replicas: {type: integer, minimum: 1, maximum: 10, default: 1}\n    additionalPrinterColumns:\n    - {name: Spec, type: string, jsonPath: .spec.cronSpec}\n    - {name: Replicas, type: integer, jsonPath: .spec.replicas}\n";
    assert_eq!(
        up.kubectl_ok(&["apply", "-f", "-"], Some(crd)).trim(),
        "customresourcedefinition.apiextensions.k8s.io/crontabs.stable.example.com created"
    );
    up.kubectl_ok(
        &[
            "wait",
            "--for=condition=established",
            "--timeout=30s",
            "crd/crontabs.stable.example.com",
        ],
        None,
    );
    let cron = "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata: {name: nightly}\nspec: {cronSpec: '0 3 * * *'}\n";
    assert_eq!(
        up.kubectl_ok(&["apply", "-f", "-"], Some(cron)).trim(),
        "crontab.stable.example.com/nightly created"
    );
    let listed = up.kubectl_ok(&["get", "ct"], None);
    let columns: Vec<&str> = listed
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(columns, ["NAME", "SPEC", "REPLICAS"], "{listed}");
    assert!(
        listed.contains("nightly") && listed.contains("0 3 * * *"),
        "{listed}"
    );
    // The CRD's CEL rules: a schedule of four fields, then a change of an immutable one.
    let short = "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata: {name: short}\nspec: {cronSpec: '0 3 * *'}\n";
    let out = up.kubectl(&["apply", "-f", "-"], Some(short));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.cronSpec: Invalid value: \"object\": cronSpec must have five fields"),
        "{err}"
    );
    let out = up.kubectl(
        &[
            "patch",
            "ct",
            "nightly",
            "--type=merge",
            "-p",
            r#"{"spec":{"cronSpec":"0 4 * * *"}}"#,
        ],
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.cronSpec: Invalid value: \"string\": cronSpec is immutable"),
        "{err}"
    );
    let explained = up.kubectl_ok(&["explain", "crontab.spec.cronSpec"], None);
    assert!(explained.contains("the schedule"), "{explained}");
    let wrong = "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata: {name: wrong}\nspec: {replicas: 20}\n";
    let out = up.kubectl(&["apply", "-f", "-"], Some(wrong));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("spec.cronSpec: Required value") && err.contains("spec.replicas"),
        "{err}"
    );
    // What a custom object owns goes before it when kubectl deletes it in the foreground
    // (the controller manager's collector follows the CRD's kind, under RBAC).
    let uid = up.kubectl_ok(
        &["get", "ct", "nightly", "-o", "jsonpath={.metadata.uid}"],
        None,
    );
    let owned = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: nightly-config\n  ownerReferences: [{{apiVersion: stable.example.com/v1, kind: CronTab, name: nightly, uid: {uid}, blockOwnerDeletion: true}}]\ndata: {{at: '3'}}\n"
    );
    up.kubectl_ok(&["apply", "-f", "-"], Some(&owned));
    let deleted = up.kubectl_ok(
        &[
            "delete",
            "ct",
            "nightly",
            "--cascade=foreground",
            "--timeout=30s",
        ],
        None,
    );
    assert_eq!(
        deleted.trim(),
        "crontab.stable.example.com \"nightly\" deleted"
    );
    let owned_gone = up.kubectl(&["get", "configmap", "nightly-config"], None);
    assert!(
        !owned_gone.status.success(),
        "the CronTab went before what it owned"
    );
    up.kubectl_ok(
        &[
            "delete",
            "crd",
            "crontabs.stable.example.com",
            "--timeout=30s",
        ],
        None,
    );
    let gone = up.kubectl(&["get", "ct"], None);
    assert!(!gone.status.success());

    let deleted = up.kubectl_ok(&["delete", "pod", "web", "--wait", "--timeout=60s"], None);
    assert_eq!(deleted.trim(), "pod \"web\" deleted");
    let after = up.kubectl(&["get", "pod", "web"], None);
    assert!(!after.status.success());

    // kubectl's generators send protobuf bodies; drain cordons (a strategic merge patch) and
    // evicts (a protobuf Eviction).
    assert_eq!(
        up.kubectl_ok(&["create", "namespace", "team"], None).trim(),
        "namespace/team created"
    );
    assert_eq!(
        up.kubectl_ok(
            &[
                "create",
                "deployment",
                "gen",
                "-n",
                "team",
                "--image=localhost/skiff/busybox:1",
                // No pods: the drain below is about t1.
                "--replicas=0",
                "--port=80",
                "--",
                "sleep",
                "3600",
            ],
            None,
        )
        .trim(),
        "deployment.apps/gen created"
    );
    let generated = up.kubectl_ok(
        &[
            "get",
            "deployment",
            "gen",
            "-n",
            "team",
            "-o",
            "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].command}",
        ],
        None,
    );
    assert_eq!(generated.trim(), r#"0 ["sleep","3600"]"#);
    up.kubectl_ok(&["delete", "deployment", "gen", "-n", "team"], None);
    let secret = up.kubectl_ok(
        &[
            "create",
            "secret",
            "generic",
            "db",
            "-n",
            "team",
            "--from-literal=user=alice",
        ],
        None,
    );
    assert_eq!(secret.trim(), "secret/db created");
    let ingress = up.kubectl_ok(
        &[
            "create",
            "ingress",
            "shop",
            "-n",
            "team",
            "--class=nginx",
            "--rule=shop.example.com/cart*=cart:80,tls=shop-cert",
            "--default-backend=web:http",
        ],
        None,
    );
    assert_eq!(ingress.trim(), "ingress.networking.k8s.io/shop created");
    let routed = up.kubectl_ok(
        &[
            "get",
            "ingress",
            "shop",
            "-n",
            "team",
            "-o",
            "jsonpath={.spec.ingressClassName} {.spec.rules[0].host} \
             {.spec.rules[0].http.paths[0].path} {.spec.rules[0].http.paths[0].pathType} \
             {.spec.rules[0].http.paths[0].backend.service.port.number} \
             {.spec.tls[0].secretName} {.spec.defaultBackend.service.port.name}",
        ],
        None,
    );
    assert_eq!(
        routed.trim(),
        "nginx shop.example.com /cart Prefix 80 shop-cert http"
    );
    // A protobuf SelfSubjectReview, answered with who the server takes the caller for.
    let whoami = up.kubectl_ok(
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username} {.status.userInfo.groups}",
        ],
        None,
    );
    assert_eq!(
        whoami.trim(),
        r#"admin ["system:masters","system:authenticated"]"#
    );
    up.kubectl_ok(
        &[
            "run",
            "t1",
            "-n",
            "team",
            "--image=localhost/skiff/busybox:1",
            "--",
            "sleep",
            "3600",
        ],
        None,
    );
    let node = eventually_output(
        || {
            up.kubectl(
                &[
                    "get",
                    "pod",
                    "t1",
                    "-n",
                    "team",
                    "-o",
                    "jsonpath={.spec.nodeName}",
                ],
                None,
            )
        },
        "node-",
    );
    let drained = up.kubectl_ok(&["drain", node.trim(), "--force", "--grace-period=1"], None);
    assert!(drained.contains("pod/t1 evicted"), "{drained}");
    let nodes = up.kubectl_ok(&["get", "node", node.trim()], None);
    assert!(nodes.contains("Ready,SchedulingDisabled"), "{nodes}");

    let deployment = |name: &str, template_app: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n  \
             replicas: 2\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    \
             metadata: {{labels: {{app: {template_app}}}}}\n    spec:\n      containers:\n      \
             - {{name: c, image: busybox}}\n"
        )
    };
    assert_eq!(
        up.kubectl_ok(&["apply", "-f", "-"], Some(&deployment("web", "web")))
            .trim(),
        "deployment.apps/web created"
    );
    let wide = up.kubectl_ok(&["get", "deploy,rs", "-o", "wide"], None);
    let header = wide.lines().next().unwrap_or_default();
    for column in [
        "NAME",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "AGE",
        "CONTAINERS",
        "IMAGES",
        "SELECTOR",
    ] {
        assert!(header.contains(column), "{column} in {wide}");
    }
    assert!(
        wide.lines().any(|l| l.starts_with("deployment.apps/web")
            && l.contains("/2")
            && l.contains("busybox")
            && l.contains("app=web")),
        "{wide}"
    );
    let explained = up.kubectl_ok(&["explain", "deployment.spec.strategy"], None);
    assert!(explained.contains("rollingUpdate"), "{explained}");
    assert_eq!(
        up.kubectl_ok(&["scale", "deploy/web", "--replicas=5"], None)
            .trim(),
        "deployment.apps/web scaled"
    );
    assert_eq!(
        up.kubectl_ok(
            &["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"],
            None
        ),
        "5"
    );
    // Orphaned: the garbage collector strips the Deployment from its ReplicaSet, which stays.
    let orphaned = up.kubectl_ok(&["delete", "deploy", "web", "--cascade=orphan"], None);
    assert_eq!(orphaned.trim(), "deployment.apps \"web\" deleted");
    let sets = up.kubectl_ok(&["get", "rs", "-l", "app=web", "-o", "name"], None);
    assert_eq!(sets.lines().count(), 1, "the set stays: {sets}");
    assert_eq!(
        up.kubectl_ok(
            &[
                "get",
                "rs",
                "-l",
                "app=web",
                "-o",
                "jsonpath={.items[*].metadata.ownerReferences}"
            ],
            None
        ),
        "",
        "owned by nothing"
    );
    let refused = up.kubectl(&["apply", "-f", "-"], Some(&deployment("bad", "other")));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        err.contains("is invalid") && err.contains("spec.template.metadata.labels"),
        "{err}"
    );
}
