//! The seam between the agent and whatever actually runs containers.
//!
//! The shape follows CRI (the kubelet's runtime interface) closely — a pod sandbox that owns
//! the pod's network identity, containers created and started inside it, stop with a timeout
//! (SIGTERM, then SIGKILL), removal, logs and exec — so the CRI implementation is a thin
//! translation and the simulated one models the same lifecycle the pod worker relies on.
//! Two deliberate departures from raw CRI:
//!
//! * [`Runtime::wait_container`] resolves when a container exits. containerd 1.6 has no
//!   `GetContainerEvents`, so the CRI implementation polls status inside this call (a
//!   per-container PLEG); the simulated runtime answers from its own clock. The pod worker
//!   never polls.
//! * [`Runtime::tcp_probe`] lives here (with a real-socket default) so the simulated runtime
//!   can answer network probes for containers that have no sockets.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use skiff_proto::api::Time;

/// Errors from a runtime call; the pod worker turns them into container waiting reasons.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    /// The image is not present and cannot be fetched (no registry is reachable here).
    #[error("image {image:?} not found: {message}")]
    ImageNotFound { image: String, message: String },
    #[error("{what} {id:?} not found")]
    NotFound { what: &'static str, id: String },
    /// The runtime answered with an error (the message is the runtime's own).
    #[error("{call}: {message}")]
    Call { call: &'static str, message: String },
    #[error("{call} did not answer within {timeout:?}")]
    Timeout {
        call: &'static str,
        timeout: Duration,
    },
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// What a sandbox is created from: the pod's identity, the node that owns it and its network
/// mode. Labels let an agent that restarts find its own sandboxes again.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SandboxSpec {
    pub node: String,
    pub pod_uid: String,
    pub pod_name: String,
    pub namespace: String,
    pub host_network: bool,
    /// The node's address: a host-network pod's IP.
    pub host_ip: String,
    /// Attempt number (a sandbox recreated for the same pod gets the next one).
    pub attempt: u32,
}

/// A sandbox as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sandbox {
    pub id: String,
    pub node: String,
    pub pod_uid: String,
    pub pod_name: String,
    pub namespace: String,
    /// The pod IP (the host's address for host-network pods).
    pub ip: String,
    /// Running (not stopped).
    pub ready: bool,
}

/// CPU and memory settings derived from the container's requests and limits, as the kubelet
/// derives them (cpu shares from the request, CFS quota and the memory limit from limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resources {
    pub cpu_request_milli: i64,
    pub cpu_limit_milli: Option<i64>,
    pub memory_limit_bytes: Option<i64>,
}

/// What a container is created from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ContainerSpec {
    pub pod_uid: String,
    pub name: String,
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub working_dir: String,
    pub ports: Vec<i32>,
    pub resources: Resources,
    /// An init container (runs to completion before the app containers).
    pub init: bool,
    /// 0 for the first run, then the restart count: the runtime keeps it as a label so an
    /// agent that restarts can recover restart counts.
    pub attempt: u32,
}

/// How a container ended.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Exit {
    pub exit_code: i32,
    /// `Completed`, `Error` or `OOMKilled`; empty lets the pod worker choose from the code.
    pub reason: String,
    pub message: String,
    pub started_at: Option<Time>,
    pub finished_at: Option<Time>,
}

/// The state of one container.
#[derive(Debug, Clone, PartialEq)]
pub enum ContainerState {
    Created,
    Running { started_at: Option<Time> },
    Exited(Exit),
}

/// A container as the runtime lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct Container {
    pub id: String,
    pub sandbox_id: String,
    pub pod_uid: String,
    pub name: String,
    pub init: bool,
    pub attempt: u32,
    pub state: ContainerState,
}

/// The result of a command run inside a container.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecOutput {
    pub exit_code: i32,
    pub output: Vec<u8>,
}

/// A container runtime. Implementations are shared by every pod worker of a node (and, for
/// the simulated runtime, by every node of a process), so every method takes `&self`.
#[async_trait]
pub trait Runtime: Send + Sync + fmt::Debug + 'static {
    /// `name version`, reported in the Node's `containerRuntimeVersion`.
    fn version(&self) -> String;

    /// The prefix of container IDs in pod status (`containerd://…`, `sim://…`).
    fn id_scheme(&self) -> &'static str;

    async fn run_sandbox(&self, spec: &SandboxSpec) -> Result<Sandbox>;
    async fn stop_sandbox(&self, id: &str) -> Result<()>;
    async fn remove_sandbox(&self, id: &str) -> Result<()>;
    /// The sandboxes that belong to `node`.
    async fn list_sandboxes(&self, node: &str) -> Result<Vec<Sandbox>>;

    /// Creates a container in `sandbox` and returns its ID (not started yet).
    async fn create_container(&self, sandbox: &Sandbox, spec: &ContainerSpec) -> Result<String>;
    async fn start_container(&self, id: &str) -> Result<()>;
    async fn container_state(&self, id: &str) -> Result<ContainerState>;
    /// Resolves when the container has exited.
    async fn wait_container(&self, id: &str) -> Result<Exit>;
    /// SIGTERM, then SIGKILL once `timeout` has passed; returns when the container is gone
    /// or `timeout` has passed.
    async fn stop_container(&self, id: &str, timeout: Duration) -> Result<()>;
    async fn remove_container(&self, id: &str) -> Result<()>;
    /// The containers in the given sandbox.
    async fn list_containers(&self, sandbox_id: &str) -> Result<Vec<Container>>;

    /// The container's log (the last `tail` lines when given).
    async fn logs(&self, id: &str, tail: Option<usize>) -> Result<Vec<u8>>;
    /// Runs `command` in the container, for exec probes and lifecycle hooks.
    async fn exec(&self, id: &str, command: &[String], timeout: Duration) -> Result<ExecOutput>;

    /// Whether something accepts TCP connections on `ip:port` within `timeout`.
    async fn tcp_probe(&self, ip: &str, port: u16, timeout: Duration) -> Result<bool> {
        let addr = format!("{ip}:{port}");
        Ok(matches!(
            tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&addr)).await,
            Ok(Ok(_))
        ))
    }

    /// Whether `GET path` on `ip:port` answers 2xx or 3xx within `timeout`.
    async fn http_probe(&self, ip: &str, port: u16, path: &str, timeout: Duration) -> Result<bool> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = format!("{ip}:{port}");
        let attempt = async {
            let mut s = tokio::net::TcpStream::connect(&addr).await?;
            let request =
                format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\nUser-Agent: skiff-probe\r\n\r\n");
            s.write_all(request.as_bytes()).await?;
            let mut buf = [0u8; 64];
            let n = s.read(&mut buf).await?;
            let line = String::from_utf8_lossy(&buf[..n]);
            let code = line
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse::<u16>().ok());
            Ok::<bool, std::io::Error>(code.is_some_and(|c| (200..400).contains(&c)))
        };
        Ok(matches!(
            tokio::time::timeout(timeout, attempt).await,
            Ok(Ok(true))
        ))
    }
}

/// Labels every runtime object carries, so an agent that restarts can tell its own objects
/// and their pods apart. The names follow the kubelet's.
pub mod labels {
    pub const NODE: &str = "skiff.node";
    pub const POD_UID: &str = "io.kubernetes.pod.uid";
    pub const POD_NAME: &str = "io.kubernetes.pod.name";
    pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
    pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
    pub const INIT: &str = "skiff.init";
    pub const ATTEMPT: &str = "skiff.attempt";
    pub const HOST_IP: &str = "skiff.host-ip";
    pub const HOST_NETWORK: &str = "skiff.host-network";
}

/// The labels of a sandbox, as the CRI implementation writes them.
pub fn sandbox_labels(spec: &SandboxSpec) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::NODE.to_string(), spec.node.clone()),
        (labels::POD_UID.to_string(), spec.pod_uid.clone()),
        (labels::POD_NAME.to_string(), spec.pod_name.clone()),
        (labels::POD_NAMESPACE.to_string(), spec.namespace.clone()),
    ])
}
