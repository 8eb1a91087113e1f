//! The children of `up`: each one logs to its own file, runs in its own process group and
//! dies with `up`; store members are started again when they exit; shutdown goes in order
//! (agents, scheduler, then the members together).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use nix::sys::signal::Signal;
use skiff_launch::{Child, Containerd, Launch, NodeNetwork};

use super::MEMBERS;
use super::layout::Layout;

/// One supervised child process.
pub(super) struct Proc {
    child: Child,
    /// Started again when it exits (store members).
    restart: bool,
    restarts: u32,
}

/// The running cluster: every child, in start order.
pub struct Cluster {
    pub(super) dir: PathBuf,
    pub(super) layout: Layout,
    pub(super) procs: Vec<Proc>,
    /// The real nodes' containerds (`--runtime cri`), one per node.
    pub(super) containerds: Vec<Containerd>,
    /// The link between the real nodes' namespaces.
    pub(super) node_network: Option<NodeNetwork>,
    /// Whether [`Cluster::stop`] has run.
    stopped: bool,
}

impl Cluster {
    /// A cluster in `dir` on `layout`'s ports; nothing runs yet.
    pub(super) fn new(dir: PathBuf, layout: Layout) -> Cluster {
        Cluster {
            dir,
            layout,
            procs: Vec::new(),
            containerds: Vec::new(),
            node_network: None,
            stopped: false,
        }
    }

    /// Whether the cluster has been stopped.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Where every child's log goes.
    pub(crate) fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }

    /// Starts `launch` and keeps it (children stop in the reverse order of their start);
    /// `restart`: started again when it exits.
    pub(super) fn start(&mut self, launch: Launch, restart: bool) -> Result<()> {
        let child = launch.spawn()?;
        self.procs.push(Proc {
            child,
            restart,
            restarts: 0,
        });
        Ok(())
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.layout.endpoints()
    }

    /// Each process's name and its metrics URL: the members', the scheduler's, the
    /// controller manager's and the node agents'.
    pub fn metrics_urls(&self) -> Vec<(String, String)> {
        let l = &self.layout;
        let url = |port: u16| format!("http://127.0.0.1:{port}/metrics");
        let mut urls: Vec<(String, String)> = MEMBERS
            .iter()
            .enumerate()
            .map(|(i, m)| (format!("store-{m}"), url(l.metrics(i))))
            .collect();
        urls.push(("scheduler".into(), url(l.scheduler_metrics())));
        urls.push(("controller-manager".into(), url(l.controller_metrics())));
        let agents = self.containerds.len().max(1);
        urls.extend((0..agents).map(|i| (format!("agent-{i}"), url(l.agent_metrics(i)))));
        urls
    }

    /// kill -9 of store member `i` (the supervisor starts it again).
    pub fn kill_member(&mut self, i: usize) {
        let name = format!("store-{}", MEMBERS[i]);
        if let Some(p) = self.procs.iter().find(|p| p.child.name() == name) {
            let _ = p.child.signal(Signal::SIGKILL);
        }
    }

    /// Restarts the children started with `restart` that exited; reports the others that
    /// exited. Returns false when a child that is not restarted has exited.
    pub fn supervise(&mut self) -> bool {
        let mut healthy = true;
        for p in &mut self.procs {
            if let Some(status) = p.child.exited() {
                if p.restart {
                    p.restarts += 1;
                    eprintln!(
                        "skiff up: {} exited ({status}); starting it again on its data directory",
                        p.child.name()
                    );
                    if let Err(e) = p.child.restart() {
                        eprintln!("skiff up: {e:#}");
                        healthy = false;
                    }
                } else {
                    eprintln!(
                        "skiff up: {} exited ({status}); its log: {}",
                        p.child.name(),
                        p.child.log().display()
                    );
                    // The reason is usually in its last words.
                    let log = std::fs::read_to_string(p.child.log()).unwrap_or_default();
                    let lines: Vec<&str> = log.lines().collect();
                    for line in &lines[lines.len().saturating_sub(3)..] {
                        eprintln!("  | {line}");
                    }
                    healthy = false;
                }
            }
        }
        healthy
    }

    /// Stops everything: the agents, then the scheduler, then the members, all three at
    /// once (one by one, the first would wait out its peers' connections).
    pub(crate) fn stop(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        let grace = Duration::from_secs(10);
        for p in self.procs.iter_mut().rev().filter(|p| !p.restart) {
            p.child.stop(Signal::SIGTERM, grace);
        }
        for p in self.procs.iter().filter(|p| p.restart) {
            let _ = p.child.signal(Signal::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        for p in self.procs.iter_mut().filter(|p| p.restart) {
            p.child.wait_until(deadline);
        }
        // Stops what each containerd runs, then the containerd; then the nodes' link.
        let real_nodes = !self.containerds.is_empty();
        self.containerds.clear();
        drop(self.node_network.take());
        // The pods' memory-backed volumes stay mounted after their containers: unmounted,
        // the directory can be removed (or the cluster resumed on it, whose agents set the
        // volumes of adopted pods up again).
        if real_nodes {
            skiff_launch::unmount_under(&self.dir.join("nodes"));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
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
