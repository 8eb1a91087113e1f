//! The seam between the agent and whatever actually runs containers.
//!
//! The shape follows CRI (the kubelet's runtime interface) closely — a pod sandbox that owns
//! the pod's network identity, containers created and started inside it, stop with a timeout
//! (SIGTERM, then SIGKILL), removal, logs, exec and interactive sessions — so the CRI implementation is a thin
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
    /// The container's configuration could not be built (a ConfigMap, Secret or key its
    /// environment names is missing; a mount cannot be made): the kubelet's
    /// `CreateContainerConfigError`, tried again until it can.
    #[error("{message}")]
    Config { message: String },
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
    /// The pod's hostname (`spec.hostname`, else its name); empty: its name.
    pub hostname: String,
    pub host_network: bool,
    /// The node's address: a host-network pod's IP.
    pub host_ip: String,
    /// The node's block of the pod network (`spec.podCIDR`), which pod IPs come from;
    /// empty when the node has none.
    pub pod_cidr: String,
    /// Attempt number (a sandbox recreated for the same pod gets the next one).
    pub attempt: u32,
    /// The containers' `hostPort`s: the node's ports that lead to the pod's (CNI's portmap).
    pub host_ports: Vec<HostPort>,
    /// The pod's `/etc/resolv.conf` (dnsPolicy `ClusterFirst` on the pod network); none: the
    /// runtime's default.
    pub dns: Option<PodDns>,
}

/// A pod's resolver configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodDns {
    pub servers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

impl PodDns {
    /// Kubernetes' `ClusterFirst` for a pod in `namespace`: the cluster's DNS server, the
    /// namespace's, the cluster's and the domain's search paths, `ndots:5`.
    pub fn cluster_first(server: &str, namespace: &str, domain: &str) -> PodDns {
        PodDns {
            servers: vec![server.to_owned()],
            searches: vec![
                format!("{namespace}.svc.{domain}"),
                format!("svc.{domain}"),
                domain.to_owned(),
            ],
            options: vec!["ndots:5".into()],
        }
    }
}

/// A node port that leads to a pod's port (`ports[].hostPort` of a container).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostPort {
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    pub container_port: i32,
    pub host_port: i32,
    /// The node address it is bound on; empty: all of them.
    pub host_ip: String,
}

impl HostPort {
    /// The `hostPort`s of `pod`'s containers (init containers' included, as the kubelet
    /// does).
    pub fn of(pod: &skiff_proto::api::Pod) -> Vec<HostPort> {
        HostPort::read(pod, false)
    }

    /// The node ports `pod` holds: its `hostPort`s, and for a host-network pod every
    /// container port (node-side admission keeps two pods off one).
    pub fn held_by(pod: &skiff_proto::api::Pod) -> Vec<HostPort> {
        HostPort::read(pod, pod.spec.host_network == Some(true))
    }

    fn read(pod: &skiff_proto::api::Pod, container_ports_too: bool) -> Vec<HostPort> {
        pod.spec
            .init_containers
            .iter()
            .chain(&pod.spec.containers)
            .flat_map(|c| &c.ports)
            .filter_map(|p| {
                let host_port = match p.host_port {
                    Some(h) if h > 0 => h,
                    _ if container_ports_too => p.container_port,
                    _ => return None,
                };
                Some(HostPort {
                    protocol: if p.protocol.is_empty() {
                        "TCP".into()
                    } else {
                        p.protocol.clone()
                    },
                    container_port: p.container_port,
                    host_port,
                    host_ip: p.host_ip.clone(),
                })
            })
            .collect()
    }
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
    /// The pod's volumes mounted into the container.
    pub mounts: Vec<crate::volumes::Mount>,
    /// What it runs as and may do.
    pub security: crate::security::Security,
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
    /// The image it runs, by digest where the runtime knows one
    /// (`docker.io/library/busybox@sha256:…`, CRI's `image_ref`): a pod status's `imageID`.
    pub image_ref: String,
}

/// The result of a command run inside a container.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecOutput {
    pub exit_code: i32,
    pub output: Vec<u8>,
}

/// What an interactive session runs: a command in the container (`kubectl exec`), or, with no
/// command, the container's own process (`kubectl attach`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionSpec {
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    /// A terminal: standard error is merged into standard output.
    pub tty: bool,
}

/// What a client sends into a session. Dropping the session's input sender closes standard
/// input too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionInput {
    Stdin(Vec<u8>),
    Resize { width: u16, height: u16 },
    CloseStdin,
}

/// What a session sends back. `Exit` is the last message; an error ends the session too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionOutput {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exit(i32),
}

/// The two ends of an interactive session. Dropping `output` ends the session.
#[derive(Debug)]
pub struct Session {
    pub input: tokio::sync::mpsc::Sender<SessionInput>,
    pub output: tokio::sync::mpsc::Receiver<Result<SessionOutput>>,
}

/// What a client sends into a forwarded connection. Dropping the connection's input sender
/// closes it for writing too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortInput {
    Data(Vec<u8>),
    /// The client sends no more.
    CloseWrite,
}

/// A connection to a port in a pod's network namespace (CRI's `PortForward`): what the pod
/// sends comes out of `output`, which ends when the pod closes its end, or with an error (no
/// one listens on the port, the runtime lost the connection).
#[derive(Debug)]
pub struct PortConnection {
    pub input: tokio::sync::mpsc::Sender<PortInput>,
    pub output: tokio::sync::mpsc::Receiver<Result<Vec<u8>>>,
}

/// A container runtime. Implementations are shared by every pod worker of a node (and, for
/// the simulated runtime, by every node of a process), so every method takes `&self`.
#[async_trait]
pub trait Runtime: Send + Sync + fmt::Debug + 'static {
    /// `name version`, reported in the Node's `containerRuntimeVersion`.
    fn version(&self) -> String;

    /// Whether the runtime's nodes are simulated: they report none of the host's identity
    /// (machine ID, boot ID, kernel), which thousands of them would share.
    fn simulated(&self) -> bool {
        false
    }

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
    /// The image container `id` runs, by digest where the runtime knows one (see
    /// [`Container::image_ref`]).
    async fn image_ref(&self, id: &str) -> Result<String>;
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
    /// Starts an interactive session in a running container (CRI's Exec and Attach).
    async fn session(&self, id: &str, spec: &SessionSpec) -> Result<Session>;

    /// Connects to `port` on localhost in the network namespace of sandbox `sandbox_id`.
    async fn port_forward(&self, sandbox_id: &str, port: u16) -> Result<PortConnection>;

    /// Whether something accepts TCP connections on `ip:port` within `timeout`.
    async fn tcp_probe(&self, ip: &str, port: u16, timeout: Duration) -> Result<bool> {
        Ok(tcp_connects(None, ip, port, timeout).await)
    }

    /// Whether `GET path` on `ip:port` answers 2xx or 3xx within `timeout`.
    async fn http_probe(&self, ip: &str, port: u16, path: &str, timeout: Duration) -> Result<bool> {
        Ok(http_get_succeeds(None, ip, port, path, timeout).await)
    }
}

fn socket_addr(ip: &str, port: u16) -> Option<std::net::SocketAddr> {
    Some(std::net::SocketAddr::new(ip.parse().ok()?, port))
}

/// The kubelet's TCP probe: a connection to `ip:port` (in the network namespace `netns`,
/// when given) within `timeout`.
pub async fn tcp_connects(
    netns: Option<&std::path::Path>,
    ip: &str,
    port: u16,
    timeout: Duration,
) -> bool {
    let Some(addr) = socket_addr(ip, port) else {
        return false;
    };
    crate::netns::connect(netns, addr, timeout).await.is_ok()
}

/// The kubelet's HTTP probe: `GET http://ip:port/path` on a connection of its own (made in
/// the network namespace `netns`, when given) succeeds when it answers 200..400 within
/// `timeout` (redirects are not followed).
pub async fn http_get_succeeds(
    netns: Option<&std::path::Path>,
    ip: &str,
    port: u16,
    path: &str,
    timeout: Duration,
) -> bool {
    use http_body_util::Empty;
    let Some(addr) = socket_addr(ip, port) else {
        return false;
    };
    let slash = if path.starts_with('/') { "" } else { "/" };
    let request = hyper::Request::get(format!("{slash}{path}"))
        .header(hyper::header::HOST, addr.to_string())
        .header(hyper::header::USER_AGENT, "skiff-probe")
        .body(Empty::<hyper::body::Bytes>::new());
    let Ok(request) = request else { return false };
    let answered = tokio::time::timeout(timeout, async {
        let stream = crate::netns::connect(netns, addr, timeout).await.ok()?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .ok()?;
        let driver = tokio::spawn(conn);
        // The body is not read: the status decides.
        let status = sender
            .send_request(request)
            .await
            .ok()
            .map(|r| r.status().as_u16());
        driver.abort();
        status
    })
    .await;
    matches!(answered, Ok(Some(status)) if (200..400).contains(&status))
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
    /// On a container with a memory limit: the limit in bytes.
    pub const MEMORY_LIMIT: &str = "skiff.memory-limit";
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers every request with `status`, after `delay`.
    async fn server(status: &'static str, delay: Duration) -> u16 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = l.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    let _ = s.read(&mut buf).await;
                    tokio::time::sleep(delay).await;
                    let answer = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                    );
                    let _ = s.write_all(answer.as_bytes()).await;
                });
            }
        });
        port
    }

    /// 2xx and 3xx succeed, 4xx and 5xx fail, and so do an answer past the timeout and a
    /// port where nothing listens.
    #[tokio::test]
    async fn http_probe_follows_the_kubelet() {
        let second = Duration::from_secs(1);
        for (status, ok) in [
            ("200 OK", true),
            ("301 Moved Permanently", true),
            ("399 Whatever", true),
            ("404 Not Found", false),
            ("500 Internal Server Error", false),
        ] {
            let port = server(status, Duration::ZERO).await;
            assert_eq!(
                http_get_succeeds(None, "127.0.0.1", port, "/healthz", second).await,
                ok,
                "{status}"
            );
            // A path without its leading slash is the same path.
            assert_eq!(
                http_get_succeeds(None, "127.0.0.1", port, "healthz", second).await,
                ok,
                "{status}"
            );
        }
        let slow = server("200 OK", Duration::from_millis(500)).await;
        assert!(!http_get_succeeds(None, "127.0.0.1", slow, "/", Duration::from_millis(100)).await);
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        assert!(!http_get_succeeds(None, "127.0.0.1", closed, "/", second).await);
    }
}
