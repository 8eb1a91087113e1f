//! The simulated runtime (kubemark-style): containers that "run" in memory on tokio's clock, so
//! one process can host thousands of nodes and the pod worker can be tested with paused time.
//!
//! A container's behaviour is read from its command, using the shell words a busybox image
//! would run, so the same manifest behaves alike under the simulated and the real runtime:
//!
//! | command (or `sh -c` script)     | simulated behaviour                                  |
//! |---------------------------------|------------------------------------------------------|
//! | empty, `sleep infinity`         | runs until stopped                                   |
//! | `sleep N` (summed over a script)| runs N seconds, then exits with the script's status  |
//! | `exit N`, `true`, `false`       | sets the exit status (`exit` ends the script)        |
//! | `echo WORDS`                    | writes a line to the log at start                    |
//! | `trap '' TERM`                  | ignores SIGTERM: only the SIGKILL after the grace ends it |
//! | `tail /dev/zero`                | with a memory limit: OOMKilled (137); without: runs forever |
//! | busybox's one-shot utilities (`mkdir`, `cp`, `touch`, …) | succeed at once           |
//! | anything else (`httpd -f`, …)   | runs until stopped, like a server                    |
//!
//! Exec (probes, hooks, `kubectl exec`) understands `true`, `false`, `exit N`, `echo`,
//! `sleep N`, `touch F`, `rm F` and `cat F` / `test -e F` / `ls F` against a per-container set
//! of files, which tests can also change with [`SimRuntime::touch`] and
//! [`SimRuntime::remove_file`]; an interactive `sh` runs the lines it reads from standard input
//! and `cat` copies its input back. Attaching shows nothing and ends when the container does. TCP probes succeed on the
//! container's declared ports while it runs, and a connection forwarded to one of them
//! (`kubectl port-forward`) echoes what it receives. Images tagged `:absent` cannot be pulled.
//!
//! A container that honours SIGTERM exits at once with 143, as a process killed by it would.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use skiff_proto::api::Time;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

mod script;
mod session;

use self::script::{Plan, exec_in, exit_of};
use crate::runtime::{
    Container, ContainerSpec, ContainerState, ExecOutput, Exit, PortConnection, PortInput, Result,
    Runtime, RuntimeError, Sandbox, SandboxSpec, Session, SessionSpec,
};

/// Timing of the simulated runtime.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// How long RunPodSandbox takes.
    pub sandbox_latency: Duration,
    /// How long StartContainer takes.
    pub start_latency: Duration,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            sandbox_latency: Duration::from_millis(5),
            start_latency: Duration::from_millis(5),
        }
    }
}

/// An in-memory runtime shared by every node of the process (cloning shares it).
#[derive(Debug, Clone)]
pub struct SimRuntime {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: SimConfig,
    seq: AtomicU64,
    // Never held across an await: every method takes the lock for a few map operations.
    state: Mutex<State>,
}

/// Every node's sandboxes and containers; one process's thousands of nodes share it, so what
/// one node asks for is found through its node's or its sandbox's ids, not by a walk over all.
#[derive(Debug, Default)]
struct State {
    sandboxes: HashMap<String, Sandbox>,
    containers: HashMap<String, SimContainer>,
    /// Sandbox ids by node.
    by_node: HashMap<String, HashSet<String>>,
    /// Container ids by sandbox id.
    by_sandbox: HashMap<String, HashSet<String>>,
}

impl State {
    fn add_sandbox(&mut self, sandbox: Sandbox) {
        self.by_node
            .entry(sandbox.node.clone())
            .or_default()
            .insert(sandbox.id.clone());
        self.sandboxes.insert(sandbox.id.clone(), sandbox);
    }

    /// Removes a sandbox and its containers.
    fn remove_sandbox(&mut self, id: &str) {
        if let Some(sb) = self.sandboxes.remove(id)
            && let Some(ids) = self.by_node.get_mut(&sb.node)
        {
            ids.remove(id);
            if ids.is_empty() {
                self.by_node.remove(&sb.node);
            }
        }
        for c in self.by_sandbox.remove(id).unwrap_or_default() {
            self.containers.remove(&c);
        }
    }

    fn node_sandboxes<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a Sandbox> + 'a {
        self.by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|id| self.sandboxes.get(id))
    }

    fn add_container(&mut self, c: SimContainer) {
        self.by_sandbox
            .entry(c.info.sandbox_id.clone())
            .or_default()
            .insert(c.info.id.clone());
        self.containers.insert(c.info.id.clone(), c);
    }

    fn remove_container(&mut self, id: &str) {
        if let Some(c) = self.containers.remove(id)
            && let Some(ids) = self.by_sandbox.get_mut(&c.info.sandbox_id)
        {
            ids.remove(id);
            if ids.is_empty() {
                self.by_sandbox.remove(&c.info.sandbox_id);
            }
        }
    }

    fn container(&self, id: &str) -> Result<&SimContainer> {
        self.containers.get(id).ok_or_else(|| not_found(id))
    }

    fn container_mut(&mut self, id: &str) -> Result<&mut SimContainer> {
        self.containers.get_mut(id).ok_or_else(|| not_found(id))
    }
}

fn not_found(id: &str) -> RuntimeError {
    RuntimeError::NotFound {
        what: "container",
        id: id.into(),
    }
}

#[derive(Debug)]
struct SimContainer {
    info: Container,
    plan: Plan,
    ports: Vec<i32>,
    files: BTreeSet<String>,
    log: Vec<u8>,
    /// When it started, on tokio's clock (for the planned exit).
    started: Option<Instant>,
    started_wall: Option<Time>,
    /// Set by a stop that SIGTERM did not end: when SIGKILL lands.
    kill_at: Option<Instant>,
    changed: Arc<Notify>,
}

impl SimContainer {
    /// Whether it runs at `now` (settled first) and declares `port`: what accepts a probe's
    /// or a forwarded connection.
    fn listens(&mut self, now: Instant, port: u16) -> bool {
        self.settle(now);
        matches!(self.info.state, ContainerState::Running { .. })
            && self.ports.contains(&i32::from(port))
    }

    /// Applies whatever the clock says has happened by `now`: a planned exit or a SIGKILL.
    fn settle(&mut self, now: Instant) {
        if !matches!(self.info.state, ContainerState::Running { .. }) {
            return;
        }
        if self.kill_at.is_some_and(|k| now >= k) {
            self.finish(Exit {
                exit_code: 137,
                reason: "Error".into(),
                message: "killed after the grace period".into(),
                started_at: self.started_wall,
                finished_at: Some(Time::now()),
            });
            return;
        }
        if let (Some(started), Some(run_for)) = (self.started, self.plan.run_for)
            && now >= started + run_for
        {
            let exit = exit_of(&self.plan, self.started_wall, Time::now());
            self.finish(exit);
        }
    }

    fn finish(&mut self, exit: Exit) {
        self.info.state = ContainerState::Exited(exit);
        self.changed.notify_waiters();
    }

    /// The next moment `settle` could change something.
    fn next_change(&self) -> Option<Instant> {
        if !matches!(self.info.state, ContainerState::Running { .. }) {
            return None;
        }
        let planned = self.started.zip(self.plan.run_for).map(|(s, d)| s + d);
        match (planned, self.kill_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl SimRuntime {
    pub fn new(config: SimConfig) -> SimRuntime {
        SimRuntime {
            inner: Arc::new(Inner {
                config,
                seq: AtomicU64::new(1),
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// `f` on a container that runs now; `call` names the refused call otherwise.
    fn with_running<T>(
        &self,
        id: &str,
        call: &'static str,
        f: impl FnOnce(&mut SimContainer) -> T,
    ) -> Result<T> {
        let now = Instant::now();
        let mut st = self.state();
        let c = st.container_mut(id)?;
        c.settle(now);
        if !matches!(c.info.state, ContainerState::Running { .. }) {
            return Err(RuntimeError::Call {
                call,
                message: format!("container {id} is not running"),
            });
        }
        Ok(f(c))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock leaves only plain maps behind; keep serving them.
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn next_id(&self, prefix: &str) -> String {
        format!(
            "{prefix}{:012x}",
            self.inner.seq.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Creates `path` in the container's file set (as if the process wrote it).
    pub fn touch(&self, container_id: &str, path: &str) -> bool {
        self.state()
            .containers
            .get_mut(container_id)
            .map(|c| c.files.insert(path.to_string()))
            .is_some()
    }

    /// Removes `path` from the container's file set.
    pub fn remove_file(&self, container_id: &str, path: &str) -> bool {
        self.state()
            .containers
            .get_mut(container_id)
            .map(|c| c.files.remove(path))
            .is_some()
    }

    /// Ends a running container now with `exit_code`, as if its process exited on its own.
    pub fn crash(&self, container_id: &str, exit_code: i32) -> bool {
        let mut st = self.state();
        let Some(c) = st.containers.get_mut(container_id) else {
            return false;
        };
        if !matches!(c.info.state, ContainerState::Running { .. }) {
            return false;
        }
        let reason = if exit_code == 0 { "Completed" } else { "Error" };
        let started_at = c.started_wall;
        c.finish(Exit {
            exit_code,
            reason: reason.into(),
            message: String::new(),
            started_at,
            finished_at: Some(Time::now()),
        });
        true
    }

    /// Every container of a pod (any node), for tests.
    pub fn containers_of(&self, pod_uid: &str) -> Vec<Container> {
        let now = Instant::now();
        let mut st = self.state();
        let mut out: Vec<Container> = st
            .containers
            .values_mut()
            .filter(|c| c.info.pod_uid == pod_uid)
            .map(|c| {
                c.settle(now);
                c.info.clone()
            })
            .collect();
        out.sort_by(|a, b| (&a.name, a.attempt).cmp(&(&b.name, b.attempt)));
        out
    }

    /// How many sandboxes and containers exist (any node, any state).
    pub fn counts(&self) -> (usize, usize) {
        let st = self.state();
        (st.sandboxes.len(), st.containers.len())
    }
}

#[async_trait]
impl Runtime for SimRuntime {
    fn version(&self) -> String {
        format!("sim {}", skiff_proto::VERSION)
    }

    fn simulated(&self) -> bool {
        true
    }

    fn id_scheme(&self) -> &'static str {
        "sim"
    }

    async fn run_sandbox(&self, spec: &SandboxSpec) -> Result<Sandbox> {
        tokio::time::sleep(self.inner.config.sandbox_latency).await;
        let id = self.next_id("sb");
        let n = self.inner.seq.fetch_add(1, Ordering::Relaxed);
        let mut state = self.state();
        let ip = if spec.host_network {
            spec.host_ip.clone()
        } else if !spec.pod_cidr.is_empty() {
            // As CNI's host-local IPAM: the lowest address of the node's block that no
            // sandbox of the node holds (the first is the network's, the second its gateway).
            let held: HashSet<&str> = state
                .node_sandboxes(&spec.node)
                .map(|s| s.ip.as_str())
                .collect();
            pod_addresses(&spec.pod_cidr)
                .ok_or_else(|| RuntimeError::Call {
                    call: "RunPodSandbox",
                    message: format!("pod CIDR {:?} is not an IPv4 block", spec.pod_cidr),
                })?
                .find(|ip| !held.contains(ip.as_str()))
                .ok_or_else(|| RuntimeError::Call {
                    call: "RunPodSandbox",
                    message: format!(
                        "failed to allocate for range 0: no IP addresses available in range set: {}",
                        spec.pod_cidr
                    ),
                })?
        } else {
            format!(
                "10.{}.{}.{}",
                (n >> 16) & 0xff,
                (n >> 8) & 0xff,
                (n & 0xff).max(2)
            )
        };
        let sandbox = Sandbox {
            id: id.clone(),
            node: spec.node.clone(),
            pod_uid: spec.pod_uid.clone(),
            pod_name: spec.pod_name.clone(),
            namespace: spec.namespace.clone(),
            ip,
            ready: true,
        };
        state.add_sandbox(sandbox.clone());
        Ok(sandbox)
    }

    async fn stop_sandbox(&self, id: &str) -> Result<()> {
        let now = Instant::now();
        let mut st = self.state();
        let Some(sb) = st.sandboxes.get_mut(id) else {
            return Err(RuntimeError::NotFound {
                what: "sandbox",
                id: id.into(),
            });
        };
        sb.ready = false;
        // Stopping a sandbox kills what is still running in it, as CRI does.
        for c in st
            .containers
            .values_mut()
            .filter(|c| c.info.sandbox_id == id)
        {
            c.settle(now);
            if matches!(c.info.state, ContainerState::Running { .. }) {
                let started_at = c.started_wall;
                c.finish(Exit {
                    exit_code: 137,
                    reason: "Error".into(),
                    message: "sandbox stopped".into(),
                    started_at,
                    finished_at: Some(Time::now()),
                });
            }
        }
        Ok(())
    }

    async fn remove_sandbox(&self, id: &str) -> Result<()> {
        self.state().remove_sandbox(id);
        Ok(())
    }

    async fn list_sandboxes(&self, node: &str) -> Result<Vec<Sandbox>> {
        Ok(self.state().node_sandboxes(node).cloned().collect())
    }

    async fn create_container(&self, sandbox: &Sandbox, spec: &ContainerSpec) -> Result<String> {
        if spec.image.ends_with(":absent") {
            return Err(RuntimeError::ImageNotFound {
                image: spec.image.clone(),
                message: "no registry is reachable and the image is not present".into(),
            });
        }
        // The simulated images run as root, as busybox's does.
        spec.security
            .verify_non_root(&crate::security::ImageUser::default(), &spec.name)
            .map_err(|message| RuntimeError::Config { message })?;
        let mut command = spec.command.clone();
        command.extend(spec.args.iter().cloned());
        let plan = Plan::parse(&command, spec.resources.memory_limit_bytes.is_some());
        let id = self.next_id("c");
        let mut st = self.state();
        if !st.sandboxes.get(&sandbox.id).is_some_and(|s| s.ready) {
            return Err(RuntimeError::Call {
                call: "CreateContainer",
                message: format!("sandbox {} is not ready", sandbox.id),
            });
        }
        st.add_container(SimContainer {
            info: Container {
                id: id.clone(),
                sandbox_id: sandbox.id.clone(),
                pod_uid: spec.pod_uid.clone(),
                name: spec.name.clone(),
                init: spec.init,
                attempt: spec.attempt,
                state: ContainerState::Created,
                image_ref: String::new(),
            },
            plan,
            ports: spec.ports.clone(),
            files: BTreeSet::new(),
            log: Vec::new(),
            started: None,
            started_wall: None,
            kill_at: None,
            changed: Arc::new(Notify::new()),
        });
        Ok(id)
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        tokio::time::sleep(self.inner.config.start_latency).await;
        let mut st = self.state();
        let c = st.container_mut(id)?;
        if c.info.state != ContainerState::Created {
            return Err(RuntimeError::Call {
                call: "StartContainer",
                message: format!("container {id} is not in the created state"),
            });
        }
        let wall = Time::now();
        c.started = Some(Instant::now());
        c.started_wall = Some(wall);
        for line in &c.plan.lines {
            c.log
                .extend_from_slice(format!("{wall} stdout F {line}\n").as_bytes());
        }
        c.info.state = ContainerState::Running {
            started_at: Some(wall),
        };
        c.changed.notify_waiters();
        Ok(())
    }

    async fn container_state(&self, id: &str) -> Result<ContainerState> {
        let now = Instant::now();
        let mut st = self.state();
        let c = st.container_mut(id)?;
        c.settle(now);
        Ok(c.info.state.clone())
    }

    /// Simulated images have no digest: `imageID` is reported empty, as for an image the
    /// runtime cannot name.
    async fn image_ref(&self, id: &str) -> Result<String> {
        Ok(self.state().container_mut(id)?.info.image_ref.clone())
    }

    async fn wait_container(&self, id: &str) -> Result<Exit> {
        loop {
            let (changed, next) = {
                let now = Instant::now();
                let mut st = self.state();
                let c = st.container_mut(id)?;
                c.settle(now);
                if let ContainerState::Exited(e) = &c.info.state {
                    return Ok(e.clone());
                }
                (c.changed.clone(), c.next_change())
            };
            // Created before the lock was released would be ideal; `notify_waiters` only wakes
            // registered futures, so register first and re-check the state once more.
            let notified = changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.state();
                if let Some(c) = st.containers.get_mut(id) {
                    c.settle(Instant::now());
                    if let ContainerState::Exited(e) = &c.info.state {
                        return Ok(e.clone());
                    }
                } else {
                    return Err(RuntimeError::NotFound {
                        what: "container",
                        id: id.into(),
                    });
                }
            }
            match next {
                Some(at) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    async fn stop_container(&self, id: &str, timeout: Duration) -> Result<()> {
        let kill_at = {
            let now = Instant::now();
            let mut st = self.state();
            let c = st.container_mut(id)?;
            c.settle(now);
            match c.info.state {
                ContainerState::Running { .. } if c.plan.ignore_term && !timeout.is_zero() => {
                    let at = now + timeout;
                    c.kill_at = Some(c.kill_at.map_or(at, |k| k.min(at)));
                    c.changed.notify_waiters();
                    c.kill_at
                }
                ContainerState::Running { .. } => {
                    let (code, message) = if timeout.is_zero() {
                        (137, "killed")
                    } else {
                        (143, "terminated by SIGTERM")
                    };
                    let started_at = c.started_wall;
                    c.finish(Exit {
                        exit_code: code,
                        reason: "Error".into(),
                        message: message.into(),
                        started_at,
                        finished_at: Some(Time::now()),
                    });
                    None
                }
                ContainerState::Created => {
                    c.info.state = ContainerState::Exited(Exit {
                        exit_code: 0,
                        reason: "Error".into(),
                        message: "stopped before it started".into(),
                        started_at: None,
                        finished_at: Some(Time::now()),
                    });
                    c.changed.notify_waiters();
                    None
                }
                ContainerState::Exited(_) => None,
            }
        };
        if let Some(at) = kill_at {
            tokio::time::sleep_until(at).await;
            if let Some(c) = self.state().containers.get_mut(id) {
                c.settle(Instant::now());
            }
        }
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        self.state().remove_container(id);
        Ok(())
    }

    async fn list_containers(&self, sandbox_id: &str) -> Result<Vec<Container>> {
        let now = Instant::now();
        let mut st = self.state();
        let State {
            containers,
            by_sandbox,
            ..
        } = &mut *st;
        Ok(by_sandbox
            .get(sandbox_id)
            .into_iter()
            .flatten()
            .filter_map(|id| {
                let c = containers.get_mut(id)?;
                c.settle(now);
                Some(c.info.clone())
            })
            .collect())
    }

    async fn logs(&self, id: &str, tail: Option<usize>) -> Result<Vec<u8>> {
        let st = self.state();
        let c = st.container(id)?;
        Ok(match tail {
            None => c.log.clone(),
            Some(n) => {
                let lines: Vec<&[u8]> = c.log.split_inclusive(|b| *b == b'\n').collect();
                lines[lines.len().saturating_sub(n)..].concat()
            }
        })
    }

    async fn exec(&self, id: &str, command: &[String], _timeout: Duration) -> Result<ExecOutput> {
        let (exit_code, output) =
            self.with_running(id, "ExecSync", |c| exec_in(&mut c.files, command))?;
        Ok(ExecOutput { exit_code, output })
    }

    async fn session(&self, id: &str, spec: &SessionSpec) -> Result<Session> {
        self.open_session(id, spec)
    }

    /// An echo of what the client sends, on a declared port of a running container of the
    /// sandbox; refused on any other.
    async fn port_forward(&self, sandbox_id: &str, port: u16) -> Result<PortConnection> {
        let now = Instant::now();
        let listening = {
            let mut st = self.state();
            let State {
                sandboxes,
                containers,
                ..
            } = &mut *st;
            if !sandboxes.get(sandbox_id).is_some_and(|s| s.ready) {
                return Err(RuntimeError::NotFound {
                    what: "running sandbox",
                    id: sandbox_id.to_string(),
                });
            }
            containers
                .values_mut()
                .any(|c| c.info.sandbox_id == sandbox_id && c.listens(now, port))
        };
        if !listening {
            return Err(RuntimeError::Call {
                call: "PortForward",
                message: format!("dial tcp 127.0.0.1:{port}: connect: connection refused"),
            });
        }
        let (input, mut input_rx) = mpsc::channel(16);
        let (output_tx, output) = mpsc::channel(16);
        // Bounded by the connection: it ends when the client closes its end for writing or
        // drops either end.
        tokio::spawn(async move {
            while let Some(PortInput::Data(data)) = input_rx.recv().await {
                if output_tx.send(Ok(data)).await.is_err() {
                    return;
                }
            }
        });
        Ok(PortConnection { input, output })
    }

    async fn http_probe(
        &self,
        ip: &str,
        port: u16,
        _path: &str,
        timeout: Duration,
    ) -> Result<bool> {
        self.tcp_probe(ip, port, timeout).await
    }

    async fn tcp_probe(&self, ip: &str, port: u16, _timeout: Duration) -> Result<bool> {
        let now = Instant::now();
        let mut st = self.state();
        let State {
            sandboxes,
            containers,
            ..
        } = &mut *st;
        Ok(containers.values_mut().any(|c| {
            c.listens(now, port)
                && sandboxes
                    .get(&c.info.sandbox_id)
                    .is_some_and(|s| s.ready && s.ip == ip)
        }))
    }
}

/// The addresses of an IPv4 block a pod may get, lowest first: all but the network's, the
/// gateway's (the first host) and the broadcast address.
fn pod_addresses(cidr: &str) -> Option<impl Iterator<Item = String>> {
    let (ip, len) = cidr.split_once('/')?;
    let ip: std::net::Ipv4Addr = ip.parse().ok()?;
    let len: u32 = len.parse().ok().filter(|l| *l <= 30)?;
    let size = 1u32 << (32 - len);
    let network = u32::from(ip) & !(size - 1);
    Some((2..size - 1).map(move |i| std::net::Ipv4Addr::from(network + i).to_string()))
}

#[cfg(test)]
mod tests;
