//! `skiff up`: a whole local cluster from one command. Three store members, the scheduler and
//! the node agents (simulated, or one node on a containerd of its own) run as child
//! processes of this one, with their logs in `<data-dir>/logs`; the client configuration the
//! CLI reads is written to `~/.skiff/config` (or `$SKIFF_CONFIG`).
//!
//! ```text
//!  skiff up ─┬─ store a ─┐
//!            ├─ store b ─┼─ quorum (etcd v3 API + cluster API on every member)
//!            ├─ store c ─┘
//!            ├─ scheduler
//!            ├─ node agents (sim: one process, N nodes | cri: containerd + one agent)
//!            └─ supervises: a member that dies is started again on its data directory
//! ```
//!
//! Ctrl-C (or SIGTERM) stops the agents, then the scheduler, then the members, each with
//! SIGTERM and SIGKILL after a deadline. Children die with this process even when it is
//! killed (`PR_SET_PDEATHSIG`), so nothing is left behind. A second `up` on the same
//! directory resumes the same cluster (same ports, same data); a lock on the directory keeps
//! two from running at once.

use std::fs::File;
use std::io::Write as _;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use skiff_proto::api::{Kind, Object};
use skiff_proto::client::ClusterClient;

use crate::config::{self, ClientConfig};

const MEMBERS: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    /// Simulated nodes (kubemark-style): thousands in one process, no containers.
    Sim,
    /// One node running real containers through containerd's CRI (root needed).
    Cri,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where data, logs and the cluster's settings live [default: ~/.skiff/up].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Node agents to run (simulated runtime; `--runtime cri` runs one).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// The container runtime of the nodes.
    #[arg(long, value_enum, default_value = "sim")]
    runtime: RuntimeKind,
    /// First port: member i listens on base+10i (clients), +1 (peers), +2 (metrics); the
    /// scheduler's metrics are on base+30, the agents' log service on base+31. A resumed
    /// cluster keeps the ports it was created with [default: 2379, or the next free range
    /// 100 ports up].
    #[arg(long)]
    base_port: Option<u16>,
    /// Allocatable CPU of each simulated node.
    #[arg(long, default_value = "4")]
    node_cpu: String,
    /// Allocatable memory of each simulated node.
    #[arg(long, default_value = "8Gi")]
    node_memory: String,
    /// Most pods per node.
    #[arg(long, default_value_t = 110)]
    max_pods: i64,
    /// Run the demo workload (examples/), show it, then stop the cluster and exit.
    #[arg(long)]
    demo: bool,
    /// The manifests the demo applies.
    #[arg(long, default_value = "examples")]
    demo_dir: PathBuf,
}

/// What a directory's cluster was created with, so a second `up` resumes it as it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Layout {
    base_port: u16,
}

impl Layout {
    fn client(&self, i: usize) -> u16 {
        self.base_port + 10 * i as u16
    }
    fn peer(&self, i: usize) -> u16 {
        self.client(i) + 1
    }
    fn metrics(&self, i: usize) -> u16 {
        self.client(i) + 2
    }
    fn scheduler_metrics(&self) -> u16 {
        self.base_port + 30
    }
    fn node_logs(&self) -> u16 {
        self.base_port + 31
    }
    fn ports(&self) -> Vec<u16> {
        let mut p: Vec<u16> = (0..MEMBERS.len())
            .flat_map(|i| [self.client(i), self.peer(i), self.metrics(i)])
            .collect();
        p.extend([self.scheduler_metrics(), self.node_logs()]);
        p
    }
    fn endpoints(&self) -> Vec<String> {
        (0..MEMBERS.len())
            .map(|i| format!("127.0.0.1:{}", self.client(i)))
            .collect()
    }
    fn initial_cluster(&self) -> String {
        MEMBERS
            .iter()
            .enumerate()
            .map(|(i, m)| format!("{m}=http://127.0.0.1:{}", self.peer(i)))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// One supervised child process.
struct Proc {
    name: String,
    log: PathBuf,
    command: Vec<String>,
    child: Option<Child>,
    /// Started again when it exits (store members).
    restart: bool,
    restarts: u32,
}

impl Proc {
    fn new(name: &str, log: PathBuf, command: Vec<String>, restart: bool) -> Proc {
        Proc {
            name: name.to_string(),
            log,
            command,
            child: None,
            restart,
            restarts: 0,
        }
    }

    fn start(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let mut cmd = Command::new(&self.command[0]);
        cmd.args(&self.command[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("log file")?)
            .stderr(log)
            // Its own process group: Ctrl-C reaches only `up`, which stops the children in
            // order.
            .process_group(0);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                // Die with `up`, even when it is killed with SIGKILL.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}: {}", self.name, self.command.join(" ")))?;
        self.child = Some(child);
        Ok(())
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The exit status, if it has exited since the last look.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status)
    }

    fn signal(&self, sig: i32) {
        if let Some(pid) = self.pid() {
            // SAFETY: kill(2) on a child we spawned and have not reaped.
            unsafe {
                libc::kill(pid as i32, sig);
            }
        }
    }

    /// SIGTERM, then SIGKILL once `grace` has passed.
    fn stop(&mut self, grace: Duration) {
        self.signal(libc::SIGTERM);
        self.reap(Instant::now() + grace);
    }

    /// Waits for the child to exit, SIGKILL at `deadline`.
    fn reap(&mut self, deadline: Instant) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

/// The running cluster: every child, in start order.
pub struct Cluster {
    dir: PathBuf,
    layout: Layout,
    procs: Vec<Proc>,
    containerd: Option<Containerd>,
}

impl Cluster {
    pub fn endpoints(&self) -> Vec<String> {
        self.layout.endpoints()
    }

    /// kill -9 of store member `i` (the supervisor starts it again).
    pub fn kill_member(&mut self, i: usize) {
        let name = format!("store-{}", MEMBERS[i]);
        if let Some(p) = self.procs.iter().find(|p| p.name == name) {
            p.signal(libc::SIGKILL);
        }
    }

    /// Restarts members that died; reports other children that died. Returns false when
    /// a child that is not restarted has exited.
    pub fn supervise(&mut self) -> bool {
        let mut healthy = true;
        for p in &mut self.procs {
            if let Some(status) = p.exited() {
                if p.restart {
                    p.restarts += 1;
                    eprintln!(
                        "skiff up: {} exited ({status}); starting it again on its data directory",
                        p.name
                    );
                    if let Err(e) = p.start() {
                        eprintln!("skiff up: {e:#}");
                        healthy = false;
                    }
                } else {
                    eprintln!(
                        "skiff up: {} exited ({status}); its log: {}",
                        p.name,
                        p.log.display()
                    );
                    healthy = false;
                }
            }
        }
        healthy
    }

    /// Stops everything: the agents, then the scheduler, then the members, all three at
    /// once (one by one, the first would wait out its peers' connections).
    fn stop(&mut self) {
        let grace = Duration::from_secs(10);
        for p in self.procs.iter_mut().rev().filter(|p| !p.restart) {
            p.stop(grace);
        }
        for p in self.procs.iter().filter(|p| p.restart) {
            p.signal(libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        for p in self.procs.iter_mut().filter(|p| p.restart) {
            p.reap(deadline);
        }
        if let Some(c) = self.containerd.take() {
            c.stop();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

fn default_dir() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".skiff").join("up")
}

/// Holds an exclusive lock on `<dir>/up.lock` while the cluster runs.
fn lock(dir: &Path) -> Result<File> {
    let path = dir.join("up.lock");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: flock on a file descriptor we own.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    if !locked {
        let holder = std::fs::read_to_string(&path).unwrap_or_default();
        bail!(
            "another `skiff up` runs from {} (pid {}); stop it first, or pass another --data-dir",
            dir.display(),
            holder.trim()
        );
    }
    file.set_len(0).context("lock file")?;
    write!(file, "{}", std::process::id()).context("lock file")?;
    Ok(file)
}

fn free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

fn load_layout(dir: &Path, base_port: Option<u16>) -> Result<(Layout, bool)> {
    let path = dir.join("cluster.json");
    match std::fs::read(&path) {
        Ok(bytes) => {
            let layout: Layout = serde_json::from_slice(&bytes)
                .with_context(|| format!("{}: not a cluster layout", path.display()))?;
            if let Some(p) = base_port
                && p != layout.base_port
            {
                bail!(
                    "{} holds a cluster on base port {}; it keeps its ports (drop --base-port, or use another --data-dir)",
                    dir.display(),
                    layout.base_port
                );
            }
            Ok((layout, true))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A new cluster without --base-port takes etcd's ports, or the next free range
            // (a running etcd or another cluster may hold 2379).
            let base_port = base_port.unwrap_or_else(|| {
                (0..50)
                    .map(|i| 2379 + 100 * i)
                    .find(|b| Layout { base_port: *b }.ports().into_iter().all(free))
                    .unwrap_or(2379)
            });
            let layout = Layout { base_port };
            if u32::from(layout.base_port) + 40 > u32::from(u16::MAX) {
                bail!(
                    "--base-port {} leaves no room for the cluster's ports",
                    layout.base_port
                );
            }
            std::fs::write(&path, serde_json::to_vec_pretty(&layout)?)
                .with_context(|| format!("writing {}", path.display()))?;
            Ok((layout, false))
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    let started = Instant::now();
    if args.runtime == RuntimeKind::Cri && args.nodes != 1 {
        bail!("--runtime cri runs one node (one containerd); pass --nodes 1");
    }
    if args.nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    let dir = args.data_dir.clone().unwrap_or_else(default_dir);
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let dir = dir
        .canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))?;
    let logs = dir.join("logs");
    let _lock = lock(&dir)?;
    let (layout, resumed) = load_layout(&dir, args.base_port)?;
    let busy: Vec<u16> = layout.ports().into_iter().filter(|p| !free(*p)).collect();
    if !busy.is_empty() {
        bail!(
            "port(s) {busy:?} on 127.0.0.1 are in use; is another cluster running? (a new cluster can take --base-port)"
        );
    }
    let exe = std::env::current_exe().context("finding the skiff binary")?;
    let exe = exe.to_string_lossy().to_string();

    let mut cluster = Cluster {
        dir: dir.clone(),
        layout: layout.clone(),
        procs: Vec::new(),
        containerd: None,
    };
    println!(
        "{} a three-member store quorum in {}",
        if resumed { "resuming" } else { "starting" },
        dir.display()
    );
    let initial = layout.initial_cluster();
    for (i, m) in MEMBERS.iter().enumerate() {
        let command = vec![
            exe.clone(),
            "store".into(),
            "--name".into(),
            (*m).into(),
            "--data-dir".into(),
            dir.join("store").join(m).to_string_lossy().into(),
            "--listen-client-urls".into(),
            format!("http://127.0.0.1:{}", layout.client(i)),
            "--listen-peer-urls".into(),
            format!("http://127.0.0.1:{}", layout.peer(i)),
            "--listen-metrics-urls".into(),
            format!("http://127.0.0.1:{}", layout.metrics(i)),
            "--initial-cluster".into(),
            initial.clone(),
        ];
        let mut p = Proc::new(
            &format!("store-{m}"),
            logs.join(format!("store-{m}.log")),
            command,
            true,
        );
        p.start()?;
        cluster.procs.push(p);
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // Clients spawn their connection tasks on the runtime they are made in.
    let _guard = rt.enter();
    let endpoints = cluster.endpoints();
    let api = ClusterClient::connect(&endpoints)?;
    rt.block_on(wait_for(
        &mut cluster,
        Duration::from_secs(60),
        "the store quorum",
        || async { api.list(Kind::Namespace, "", "", "").await.is_ok() },
    ))?;
    let quorum_at = started.elapsed();

    let mut scheduler = Proc::new(
        "scheduler",
        logs.join("scheduler.log"),
        vec![
            exe.clone(),
            "scheduler".into(),
            "--endpoints".into(),
            endpoints.join(","),
            "--metrics-addr".into(),
            format!("127.0.0.1:{}", layout.scheduler_metrics()),
        ],
        false,
    );
    scheduler.start()?;
    cluster.procs.push(scheduler);

    let mut node = vec![
        exe.clone(),
        "node".into(),
        "--endpoints".into(),
        endpoints.join(","),
        "--logs-address".into(),
        format!("127.0.0.1:{}", layout.node_logs()),
        "--max-pods".into(),
        args.max_pods.to_string(),
        "--heartbeat-interval".into(),
        "5s".into(),
    ];
    let names: Vec<String> = match args.runtime {
        RuntimeKind::Sim => {
            let names: Vec<String> = (0..args.nodes).map(|i| format!("node-{i}")).collect();
            node.extend([
                "--runtime".into(),
                "sim".into(),
                "--cpu".into(),
                args.node_cpu.clone(),
                "--memory".into(),
                args.node_memory.clone(),
                "--labels".into(),
                format!(
                    "kubernetes.io/os=linux,node.skiff.dev/cpus={}",
                    args.node_cpu
                ),
            ]);
            if args.nodes == 1 {
                node.extend(["--name".into(), names[0].clone()]);
            } else {
                node.extend([
                    "--count".into(),
                    args.nodes.to_string(),
                    "--name-prefix".into(),
                    "node-".into(),
                ]);
            }
            names
        }
        RuntimeKind::Cri => {
            let c = Containerd::start(&dir, &exe)?;
            let (cpus, _) = skiff_node::agent::host_capacity();
            node.extend([
                "--runtime".into(),
                "cri".into(),
                "--name".into(),
                "node-0".into(),
                "--containerd-socket".into(),
                c.socket.to_string_lossy().into(),
                "--pod-log-dir".into(),
                dir.join("pods").to_string_lossy().into(),
                "--labels".into(),
                format!("kubernetes.io/os=linux,node.skiff.dev/cpus={cpus}"),
            ]);
            cluster.containerd = Some(c);
            vec!["node-0".into()]
        }
    };
    let mut agents = Proc::new("node agents", logs.join("nodes.log"), node, false);
    agents.start()?;
    cluster.procs.push(agents);

    rt.block_on(wait_for(
        &mut cluster,
        Duration::from_secs(60),
        "the nodes to be Ready",
        || async {
            match api.list(Kind::Node, "", "", "").await {
                Ok((nodes, _)) => names.iter().all(|n| {
                    nodes.iter().any(|o| {
                        matches!(o, Object::Node(node) if &node.metadata.name == n && node.is_ready())
                    })
                }),
                Err(_) => false,
            }
        },
    ))?;
    let ready_at = started.elapsed();

    let config_path = config::path();
    let previous = ClientConfig::load(&config_path).ok().flatten();
    let client_config = ClientConfig {
        endpoints: endpoints.clone(),
        data_dir: Some(dir.clone()),
    };
    client_config.save(&config_path)?;

    println!(
        "ready in {:.1} s (quorum in {:.1} s): 3 store members, the scheduler, {} {} node(s)",
        ready_at.as_secs_f64(),
        quorum_at.as_secs_f64(),
        names.len(),
        match args.runtime {
            RuntimeKind::Sim => "simulated",
            RuntimeKind::Cri => "containerd",
        }
    );
    println!();
    println!("  etcd v3 + cluster API   {}", endpoints.join(","));
    println!(
        "  store metrics           {}",
        (0..MEMBERS.len())
            .map(|i| format!("http://127.0.0.1:{}/metrics", layout.metrics(i)))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "  scheduler metrics       http://127.0.0.1:{}/metrics",
        layout.scheduler_metrics()
    );
    println!("  logs                    {}", logs.display());
    println!(
        "  client configuration    {}{}",
        config_path.display(),
        if previous.is_some_and(|p| p != client_config) {
            " (replaced)"
        } else {
            ""
        }
    );
    println!();
    println!("  skiff apply -f examples/pod.yaml");
    println!("  skiff get pods -o wide");
    println!("  skiff describe pod hello");
    println!(
        "  ETCDCTL_API=3 etcdctl --endpoints={} endpoint status -w table",
        endpoints.join(",")
    );
    println!();

    if args.demo {
        let result = crate::demo::run(&rt, &mut cluster, &exe, &args.demo_dir);
        println!("==> stopping the cluster");
        cluster.stop();
        return result.map(|()| ExitCode::SUCCESS);
    }

    println!(
        "Ctrl-C stops the cluster; `skiff up` on {} resumes it.",
        dir.display()
    );
    let stop = rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("SIGTERM handler")?;
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return Ok::<_, anyhow::Error>(true),
                _ = term.recv() => return Ok(true),
                _ = tick.tick() => {
                    if !cluster.supervise() {
                        return Ok(false);
                    }
                }
            }
        }
    })?;
    println!("stopping the cluster");
    cluster.stop();
    println!("stopped; data and logs kept in {}", cluster.dir.display());
    Ok(if stop {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Polls `ready` until it holds, supervising the children meanwhile.
pub async fn wait_for<F, Fut>(
    cluster: &mut Cluster,
    limit: Duration,
    what: &str,
    mut ready: F,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if ready().await {
            return Ok(());
        }
        if !cluster.supervise() {
            bail!(
                "a process exited while waiting for {what}; logs in {}",
                cluster.dir.join("logs").display()
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "{what} not ready after {} s; logs in {}",
                limit.as_secs(),
                cluster.dir.join("logs").display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A containerd of the cluster's own (`--runtime cri`): its config, root, state and socket
/// under `<data-dir>/containerd`, the CRI plugin set up for this machine (full image names,
/// `restrict_oom_score_adj`), and the busybox and pause images imported from busybox-static.
struct Containerd {
    proc: Proc,
    socket: PathBuf,
}

impl Containerd {
    fn start(dir: &Path, exe: &str) -> Result<Containerd> {
        let home = dir.join("containerd");
        std::fs::create_dir_all(home.join("cni"))
            .with_context(|| format!("creating {}", home.display()))?;
        let socket = home.join("containerd.sock");
        let config = skiff_node::cri::containerd_config(&home);
        std::fs::write(home.join("config.toml"), config).context("containerd config")?;
        let mut proc = Proc::new(
            "containerd",
            dir.join("logs").join("containerd.log"),
            vec![
                "containerd".into(),
                "--config".into(),
                home.join("config.toml").to_string_lossy().into(),
            ],
            false,
        );
        proc.start()
            .context("containerd (Debian: apt-get install containerd runc)")?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            if let Some(s) = proc.exited() {
                bail!(
                    "containerd exited ({s}); see {}",
                    dir.join("logs").join("containerd.log").display()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "containerd did not listen on {} within 20 s",
                    socket.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let images = home.join("images");
        let run = |args: &[&str]| -> Result<()> {
            let out = Command::new(exe)
                .args(args)
                .output()
                .with_context(|| format!("skiff {}", args.join(" ")))?;
            if !out.status.success() {
                bail!(
                    "skiff {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            Ok(())
        };
        let images_s = images.to_string_lossy().to_string();
        run(&["image", "build", "--out", &images_s])?;
        run(&[
            "image",
            "import",
            "--containerd-socket",
            &socket.to_string_lossy(),
            &format!("{images_s}/busybox.tar"),
            &format!("{images_s}/pause.tar"),
        ])?;
        Ok(Containerd { proc, socket })
    }

    /// Stops what containerd runs (its shims outlive it by design), then containerd.
    fn stop(mut self) {
        let ctr = |args: &[&str]| {
            Command::new("ctr")
                .arg("--address")
                .arg(&self.socket)
                .args(["-n", "k8s.io"])
                .args(args)
                .output()
        };
        if let Ok(o) = ctr(&["tasks", "ls", "-q"]) {
            for id in String::from_utf8_lossy(&o.stdout).lines() {
                let _ = ctr(&["tasks", "kill", "-s", "SIGKILL", id]);
            }
        }
        let shims = Command::new("pgrep")
            .args([
                "-f",
                &format!("containerd-shim.*-address {}", self.socket.display()),
            ])
            .output();
        self.proc.stop(Duration::from_secs(10));
        if let Ok(o) = shims {
            for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                if let Ok(pid) = pid.parse::<i32>() {
                    // SAFETY: kill(2) of a shim of the containerd this cluster started.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
            }
        }
    }
}
