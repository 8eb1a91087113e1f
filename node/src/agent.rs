//! The agent of one or many nodes: registers each Node, keeps its heartbeat, watches only the
//! pods bound to it (field selector `spec.nodeName=NAME`) and runs a worker per pod.
//!
//! **Heartbeat through the Node's status, not a Lease.** Every `heartbeat` interval the agent
//! writes the Node's status with a fresh `lastHeartbeatTime` on its conditions (a status
//! write touches only the status, so it never conflicts with spec edits), through the same
//! batching writer as its pods' statuses. The cluster API has no Lease kind, and an etcd
//! lease would make liveness invisible to the scheduler, which reads Node conditions through
//! its informer. The cost is a Node status per beat, replicated through Raft: about 1 KiB
//! every 10 s per node, 100 statuses a second for 1000 simulated nodes, which share a few
//! log entries a second. A Lease kind would make beats cheaper still; the agent would keep
//! the conditions current on change.
//!
//! **Reconcile on restart.** Before following the watch, the agent lists its node's sandboxes
//! in the runtime: a pod that still exists and still runs is adopted (its worker follows the
//! running containers without restarting them); sandboxes of pods that are gone are stopped
//! and removed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use skiff_proto::api::node::{NodeAddress, NodeSystemInfo};
use skiff_proto::api::{
    ConditionStatus, Kind, Node, NodeCondition, NodeConditionType, NodeStatus, Object, Pod, Taint,
    Time,
};
use skiff_proto::backoff::Backoff;
use skiff_proto::client::{ClientError, ClusterClient, Code, Event, Informer, ListParams};
use skiff_proto::quantity::Quantity;
use skiff_proto::recorder::{self, EventRecorder};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admission;
use crate::engine::{Adopted, EngineConfig};
use crate::guard::Guard;
use crate::logs::{ENDPOINT_ANNOTATION, LogService};
use crate::metrics::{self, AgentMetrics};
use crate::runtime::{Runtime, RuntimeError};
use crate::sessions::SessionService;
use crate::status::{PodKey, StatusWriter};
use crate::volumes::Volumes;
use crate::worker::{self, WorkerContext, WorkerHandle};
use skiff_proto::api::volume::LOCAL_VOLUMES_ANNOTATION;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("node {node}: cluster API: {source}")]
    Api { node: String, source: ClientError },
    #[error("node {node}: runtime: {source}")]
    Runtime { node: String, source: RuntimeError },
    #[error("invalid node configuration: {0}")]
    Config(String),
}

pub type Result<T, E = AgentError> = std::result::Result<T, E>;

/// Where the node keeps its local PersistentVolumes (published in its Node's
/// [`LOCAL_VOLUMES_ANNOTATION`] for the provisioner).
fn local_volumes(c: &NodeConfig) -> String {
    crate::volumes::local_volumes_dir(&c.root_dir)
        .to_string_lossy()
        .into_owned()
}

/// Where a node keeps its pods' volumes unless told otherwise (under the node's name).
pub const DEFAULT_ROOT_DIR: &str = "/var/lib/skiff/node";

/// One node's identity and capacity.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    pub name: String,
    pub cpu: Quantity,
    pub memory: Quantity,
    /// The node filesystem's size, where container logs and writable layers live.
    pub ephemeral_storage: Quantity,
    /// Huge pages by resource name (`hugepages-2Mi`), as the kernel has them reserved.
    pub hugepages: BTreeMap<String, Quantity>,
    pub max_pods: i64,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// The node's address (status `hostIP`, host-network pod IPs).
    pub host_ip: String,
    pub heartbeat: Duration,
    pub engine: EngineConfig,
    /// Where this agent serves logs (`host:port`), published in the Node's annotations.
    pub logs_endpoint: Option<String>,
    /// Record events about the node and its pods (Pulled, Started, Killing, BackOff, …).
    pub events: bool,
    /// Where to write the node's CNI configuration once it has a pod CIDR (CRI runtime).
    pub cni: Option<crate::cni::CniConfig>,
    /// Serve cluster DNS for this domain on the node's bridge address, in the node's network
    /// namespace (this process's when none is given), and point pods on the pod network at
    /// it.
    pub dns: Option<(String, Option<std::path::PathBuf>)>,
    /// Where the node keeps its pods' volumes (`<root_dir>/<pod uid>/volumes/…`).
    pub root_dir: std::path::PathBuf,
    /// Mount tmpfs for medium-Memory emptyDirs, Secrets and projected volumes (needs root;
    /// a real node's agent).
    pub volume_tmpfs: bool,
    /// How often a running pod's volumes are brought up to date.
    pub volume_resync: Duration,
}

impl NodeConfig {
    /// A node named `name` with the host's CPU count, memory, root filesystem and huge pages,
    /// 110 pods, 10 s heartbeat.
    pub fn from_host(name: &str) -> NodeConfig {
        let (cpu, memory) = host_capacity();
        NodeConfig {
            name: name.to_string(),
            cpu: Quantity::from_units(cpu),
            memory: Quantity::from_bytes(memory),
            ephemeral_storage: Quantity::from_bytes(
                filesystem_bytes(std::path::Path::new("/")).unwrap_or(0),
            ),
            hugepages: host_hugepages(std::path::Path::new(HUGEPAGES_DIR)),
            max_pods: 110,
            labels: BTreeMap::new(),
            taints: Vec::new(),
            host_ip: "127.0.0.1".into(),
            heartbeat: Duration::from_secs(10),
            engine: EngineConfig::default(),
            logs_endpoint: None,
            events: true,
            cni: None,
            dns: None,
            root_dir: std::path::PathBuf::from(DEFAULT_ROOT_DIR).join(name),
            volume_tmpfs: false,
            volume_resync: crate::volumes::DEFAULT_RESYNC,
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.name.is_empty() {
            return Err(AgentError::Config("the node needs a name".into()));
        }
        if self.max_pods < 1
            || self.cpu.is_negative()
            || self.memory.is_negative()
            || self.ephemeral_storage.is_negative()
        {
            return Err(AgentError::Config(format!(
                "node {}: cpu, memory, ephemeral storage and max pods must be positive",
                self.name
            )));
        }
        if self.heartbeat.is_zero() {
            return Err(AgentError::Config("heartbeat must be positive".into()));
        }
        Ok(())
    }
}

/// The host's CPU count and memory (bytes), from the OS.
pub fn host_capacity() -> (i64, i64) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as i64);
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
        })
        .map_or(0, |kib| kib * 1024);
    (cpus, memory)
}

/// The size in bytes of the filesystem that holds `path` (its nearest existing ancestor, so a
/// directory the agent has not created yet still names its filesystem).
pub fn filesystem_bytes(path: &std::path::Path) -> Option<i64> {
    let existing = path.ancestors().find(|p| p.exists())?;
    let st = nix::sys::statvfs::statvfs(existing).ok()?;
    i64::try_from(u128::from(st.blocks()) * u128::from(st.fragment_size())).ok()
}

/// Where the kernel lists its huge page pools.
pub const HUGEPAGES_DIR: &str = "/sys/kernel/mm/hugepages";

/// The huge pages reserved in each pool under `dir` (`hugepages-2048kB/nr_hugepages`), as the
/// kubelet reports them: `hugepages-2Mi` → pages × page size, a pool with none included.
pub fn host_hugepages(dir: &std::path::Path) -> BTreeMap<String, Quantity> {
    let Ok(pools) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    pools
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            let kib: i64 = name
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            let pages: i64 = std::fs::read_to_string(e.path().join("nr_hugepages"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            let size = if kib % (1024 * 1024) == 0 {
                format!("{}Gi", kib / (1024 * 1024))
            } else if kib % 1024 == 0 {
                format!("{}Mi", kib / 1024)
            } else {
                format!("{kib}Ki")
            };
            Some((
                format!("hugepages-{size}"),
                Quantity::from_bytes(pages.saturating_mul(kib).saturating_mul(1024)),
            ))
        })
        .collect()
}

/// The files of the log and session port's TLS (the kubelet's `--tls-cert-file`,
/// `--tls-private-key-file` and `--client-ca-file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortTls {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    pub client_ca: std::path::PathBuf,
}

/// [`PortTls`] read: the port's TLS configuration.
#[derive(Debug, Clone)]
pub struct LoadedPortTls(tonic::transport::ServerTlsConfig);

impl PortTls {
    /// Reads the files; the error names the one that could not be read.
    pub fn load(&self) -> std::io::Result<LoadedPortTls> {
        use tonic::transport::{Certificate, Identity, ServerTlsConfig};
        let read = |path: &std::path::Path| {
            std::fs::read(path)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
        };
        Ok(LoadedPortTls(
            ServerTlsConfig::new()
                .identity(Identity::from_pem(read(&self.cert)?, read(&self.key)?))
                .client_ca_root(Certificate::from_pem(read(&self.client_ca)?)),
        ))
    }
}

/// Where an agent process serves, each optional: container logs (gRPC) and `/metrics` +
/// `/healthz` (HTTP). One of each per process, however many nodes it hosts.
#[derive(Debug, Default)]
pub struct Listeners {
    pub logs: Option<tokio::net::TcpListener>,
    /// TLS on the log and session port (the serving certificate, and the CA callers'
    /// certificates must chain to); each call is then authorized by the API. None: plain TCP.
    pub logs_tls: Option<LoadedPortTls>,
    pub metrics: Option<tokio::net::TcpListener>,
}

/// Runs every node in `nodes` on one client connection and one runtime until `cancel` fires,
/// serving their container logs and the process's metrics (`counters`, which the process's
/// Service proxy shares) on `listeners`. Pods keep running
/// in the runtime when the agent stops (the next agent adopts them).
pub async fn run(
    client: ClusterClient,
    runtime: Arc<dyn Runtime>,
    nodes: Vec<NodeConfig>,
    listeners: Listeners,
    counters: AgentMetrics,
    cancel: CancellationToken,
) -> Result<()> {
    for n in &nodes {
        n.validate()?;
    }
    if let Some(listener) = listeners.metrics {
        metrics::serve(listener, counters.registry(), cancel.clone());
    }
    if let Some(listener) = listeners.logs {
        let guard = listeners
            .logs_tls
            .is_some()
            .then(|| Arc::new(Guard::new(client.clone())));
        let logs_service = LogService::new(runtime.clone(), guard.clone()).server();
        let sessions = SessionService::new(runtime.clone(), guard).server();
        let mut server = tonic::transport::Server::builder();
        if let Some(tls) = listeners.logs_tls {
            server = server
                .tls_config(tls.0)
                .map_err(|e| AgentError::Config(format!("the log and session port's TLS: {e}")))?;
        }
        let stop = cancel.clone();
        tokio::spawn(async move {
            let served = server
                .add_service(logs_service)
                .add_service(sessions)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    stop.cancelled_owned(),
                )
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "log and session service stopped");
            }
        });
    }
    // Each writer task sends every status queued when it is free (up to a batch), so a few
    // keep up with thousands of pods.
    let writers = (nodes.len() / 100).clamp(2, 8);
    let status = StatusWriter::start(Arc::new(client.clone()), writers, cancel.clone());
    let tracker = TaskTracker::new();
    let (err_tx, mut err_rx) = tokio::sync::mpsc::channel(nodes.len().max(1));
    // One writer for every node of the process, as for status.
    let recorder = nodes
        .iter()
        .any(|n| n.events)
        .then(|| EventRecorder::spawn(client.clone(), "kubelet", ""));
    // One watch of this process's Nodes keeps every node's admission on its stored labels
    // and taints.
    let mut watched = HashMap::new();
    let mut receivers = Vec::with_capacity(nodes.len());
    for n in &nodes {
        let (tx, rx) = tokio::sync::watch::channel(None);
        watched.insert(n.name.clone(), tx);
        receivers.push(rx);
    }
    tracker.spawn(watch_nodes(client.clone(), watched, cancel.clone()));
    // One watch of the Services gives every container its Service variables.
    let (services, mut informers) = crate::services::follow_services(&client);
    {
        let (err_tx, cancel) = (err_tx.clone(), cancel.clone());
        tracker.spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                Some(done) = informers.join_next() => {
                    let why = match done {
                        Ok((kind, r)) => format!("the {kind} informer stopped: {r:?}"),
                        Err(e) => format!("the Service informer's task: {e}"),
                    };
                    let _ = err_tx.send(AgentError::Config(why)).await;
                }
            }
        });
    }
    for ((i, n), node_rx) in nodes.into_iter().enumerate().zip(receivers) {
        let agent = NodeAgent {
            services: services.clone(),
            node_rx,
            client: client.clone(),
            runtime: runtime.clone(),
            status: status.clone(),
            cancel: cancel.clone(),
            metrics: counters.clone(),
            events: recorder
                .as_ref()
                .filter(|_| n.events)
                .map(|r| r.with_host(&n.name)),
            config: n,
        };
        let err_tx = err_tx.clone();
        // Spread registrations and heartbeats of many nodes over the interval.
        let stagger = Duration::from_millis((i as u64 * 7) % 1000);
        tracker.spawn(async move {
            if let Err(e) = agent.run(stagger).await {
                let _ = err_tx.send(e).await;
            }
        });
    }
    tracker.close();
    drop(err_tx);
    tokio::select! {
        Some(e) = err_rx.recv() => {
            cancel.cancel();
            tracker.wait().await;
            Err(e)
        }
        _ = tracker.wait() => Ok(()),
    }
}

struct NodeAgent {
    client: ClusterClient,
    /// The Services the process follows, for containers' variables.
    services: crate::services::Followed,
    /// This node as the store has it, from the process's watch of its Nodes.
    node_rx: tokio::sync::watch::Receiver<Option<Node>>,
    runtime: Arc<dyn Runtime>,
    status: StatusWriter,
    cancel: CancellationToken,
    config: NodeConfig,
    events: Option<EventRecorder>,
    metrics: AgentMetrics,
}

impl NodeAgent {
    fn api(&self, source: ClientError) -> AgentError {
        AgentError::Api {
            node: self.config.name.clone(),
            source,
        }
    }

    async fn run(self, stagger: Duration) -> Result<()> {
        tokio::select! {
            _ = self.cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep(stagger) => {}
        }
        let node = self.register().await?;
        if let Some(cni) = &self.config.cni {
            self.configure_network(cni, &node.spec.pod_cidr);
        }
        self.metrics.nodes.inc();
        if let Some(events) = &self.events {
            events.normal(
                recorder::reference_to(Kind::Node, &node.metadata),
                "Starting",
                "Starting skiff node agent.".into(),
            );
        }
        let heartbeat = tokio::spawn(heartbeat(
            self.status.clone(),
            self.config.clone(),
            node.status.clone().unwrap_or_default(),
            self.metrics.clone(),
            self.cancel.clone(),
        ));
        let result = self.follow_pods(node).await;
        heartbeat.abort();
        self.metrics.nodes.dec();
        result
    }

    /// The node's capacity, all of it allocatable.
    fn resources(&self) -> BTreeMap<String, Quantity> {
        let c = &self.config;
        let mut resources: BTreeMap<String, Quantity> = BTreeMap::from([
            ("cpu".to_string(), c.cpu),
            ("memory".to_string(), c.memory),
            ("ephemeral-storage".to_string(), c.ephemeral_storage),
            ("pods".to_string(), Quantity::from_units(c.max_pods)),
        ]);
        resources.extend(c.hugepages.clone());
        resources
    }

    fn node_status(&self, previous: Option<&NodeStatus>) -> NodeStatus {
        let c = &self.config;
        let now = Time::now();
        let resources = self.resources();
        let cond =
            |type_: NodeConditionType, status: ConditionStatus, reason: &str, message: &str| {
                // Keep the transition time when the condition did not change.
                let since = previous
                    .and_then(|p| p.conditions.iter().find(|x| x.type_ == type_))
                    .filter(|x| x.status == status)
                    .and_then(|x| x.last_transition_time)
                    .unwrap_or(now);
                NodeCondition {
                    type_,
                    status,
                    last_heartbeat_time: Some(now),
                    last_transition_time: Some(since),
                    reason: reason.into(),
                    message: message.into(),
                    other: Default::default(),
                }
            };
        NodeStatus {
            capacity: resources.clone(),
            allocatable: resources,
            conditions: vec![
                cond(
                    NodeConditionType::MemoryPressure,
                    ConditionStatus::False,
                    "KubeletHasSufficientMemory",
                    "agent has sufficient memory available",
                ),
                cond(
                    NodeConditionType::DiskPressure,
                    ConditionStatus::False,
                    "KubeletHasNoDiskPressure",
                    "agent has no disk pressure",
                ),
                cond(
                    NodeConditionType::PIDPressure,
                    ConditionStatus::False,
                    "KubeletHasSufficientPID",
                    "agent has sufficient PID available",
                ),
                cond(
                    NodeConditionType::Ready,
                    ConditionStatus::True,
                    "KubeletReady",
                    "skiff agent is posting ready status",
                ),
            ],
            addresses: vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: c.host_ip.clone(),
                    other: Default::default(),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: c.name.clone(),
                    other: Default::default(),
                },
            ],
            node_info: Some(NodeSystemInfo {
                kubelet_version: format!("skiff/{}", skiff_proto::VERSION),
                container_runtime_version: self.runtime.version(),
                operating_system: std::env::consts::OS.into(),
                architecture: std::env::consts::ARCH.into(),
                ..if self.runtime.simulated() {
                    NodeSystemInfo::default()
                } else {
                    host_system_info()
                }
            }),
            ..NodeStatus::default()
        }
    }

    /// Creates the Node, or takes over an existing one (labels and taints from the flags are
    /// added; capacity and conditions are ours to write).
    /// The cluster DNS server of this node's pods (its bridge address) and the domain, when
    /// the agent serves DNS and the node has a pod CIDR; the server is started here.
    fn cluster_dns(&self, pod_cidr: &str) -> Option<(String, String)> {
        let (domain, netns) = self.config.dns.clone()?;
        let (network, _) = pod_cidr.split_once('/')?;
        let gateway = network
            .parse::<std::net::Ipv4Addr>()
            .ok()
            .map(|ip| std::net::Ipv4Addr::from(u32::from(ip) + 1))?;
        // A namespace of the node's own has nothing else on port 53: every address. The
        // host's (a bare node) may have a resolver there: the bridge's address only, bound
        // before the bridge appears with the first pod.
        let listen = match &netns {
            Some(_) => std::net::Ipv4Addr::UNSPECIFIED,
            None => gateway,
        };
        let config = crate::dns::DnsConfig {
            netns,
            listen: std::net::SocketAddr::from((listen, 53)),
            domain: domain.clone(),
        };
        let (client, cancel) = (self.client.clone(), self.cancel.clone());
        crate::supervise("cluster DNS", cancel.clone(), move || {
            crate::dns::run(client.clone(), config.clone(), cancel.clone())
        });
        Some((gateway.to_string(), domain))
    }

    /// Writes the node's CNI configuration for its pod CIDR; without a CIDR (node IPAM off)
    /// only host-network pods can run, and the agent says so.
    fn configure_network(&self, cni: &crate::cni::CniConfig, pod_cidr: &str) {
        if pod_cidr.is_empty() {
            tracing::warn!(
                node = %self.config.name,
                "the node has no pod CIDR (the store's --cluster-cidr is empty): only \
                 hostNetwork pods can run"
            );
            return;
        }
        match crate::cni::write(cni, pod_cidr) {
            Ok(written) => tracing::info!(
                node = %self.config.name,
                pod_cidr,
                conf_dir = %cni.conf_dir.display(),
                written,
                "pod network configured"
            ),
            Err(e) => tracing::error!(
                node = %self.config.name,
                conf_dir = %cni.conf_dir.display(),
                error = %e,
                "writing the CNI configuration failed: pods without hostNetwork cannot start"
            ),
        }
        let config = crate::routes::RoutesConfig {
            node: self.config.name.clone(),
            host_ip: self.config.host_ip.clone(),
            pod_cidr: pod_cidr.to_string(),
            cluster_cidr: cni.cluster_cidr.clone(),
            netns: cni.netns.clone(),
        };
        let (client, cancel) = (self.client.clone(), self.cancel.clone());
        crate::supervise("the pod network routes", cancel.clone(), move || {
            crate::routes::run(client.clone(), config.clone(), cancel.clone())
        });
    }

    async fn register(&self) -> Result<Node> {
        let c = &self.config;
        let mut backoff = Backoff::for_store();
        loop {
            let attempt = async {
                match self.client.get(Kind::Node, "", &c.name).await? {
                    None => {
                        let mut node = Node::default();
                        node.metadata.name = c.name.clone();
                        node.metadata.labels = c.labels.clone();
                        node.metadata
                            .labels
                            .insert("kubernetes.io/hostname".into(), c.name.clone());
                        if let Some(e) = &c.logs_endpoint {
                            node.metadata
                                .annotations
                                .insert(ENDPOINT_ANNOTATION.into(), e.clone());
                        }
                        node.metadata
                            .annotations
                            .insert(LOCAL_VOLUMES_ANNOTATION.into(), local_volumes(c));
                        node.spec.taints = c.taints.clone();
                        node.status = Some(self.node_status(None));
                        let created = self.client.create(&Object::Node(node)).await?;
                        Ok::<Object, ClientError>(created)
                    }
                    Some(Object::Node(mut node)) => {
                        let before = node.clone();
                        node.metadata.labels.extend(c.labels.clone());
                        if let Some(e) = &c.logs_endpoint {
                            node.metadata
                                .annotations
                                .insert(ENDPOINT_ANNOTATION.into(), e.clone());
                        }
                        node.metadata
                            .annotations
                            .insert(LOCAL_VOLUMES_ANNOTATION.into(), local_volumes(c));
                        for t in &c.taints {
                            if !node
                                .spec
                                .taints
                                .iter()
                                .any(|x| x.key == t.key && x.effect == t.effect)
                            {
                                node.spec.taints.push(t.clone());
                            }
                        }
                        if node != before {
                            self.client.update(&Object::Node(node.clone())).await?;
                        }
                        node.metadata.resource_version.clear();
                        node.status = Some(self.node_status(node.status.as_ref()));
                        self.client.update_status(&Object::Node(node)).await
                    }
                    Some(other) => Ok(other),
                }
            };
            match attempt.await {
                Ok(Object::Node(n)) => {
                    tracing::info!(node = %c.name, "registered");
                    return Ok(n);
                }
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.code(),
                        Some(Code::AlreadyExists | Code::Aborted | Code::Unavailable)
                    ) || e.code().is_none() =>
                {
                    tracing::debug!(node = %c.name, error = %e, "registration retry");
                }
                // Not allowed yet: a binding just made reaches every member a moment later,
                // and an administrator may grant it; the kubelet retries too.
                Err(e) if e.code() == Some(Code::PermissionDenied) => {
                    tracing::warn!(node = %c.name, error = %e, "registration refused; trying again");
                }
                Err(e) => return Err(self.api(e)),
            }
            tokio::select! {
                _ = self.cancel.cancelled() => return Err(self.api(ClientError::NoEndpoints)),
                _ = backoff.wait() => {}
            }
        }
    }

    /// What the runtime already holds for this node, by pod UID.
    async fn runtime_state(&self) -> Result<HashMap<String, Adopted>> {
        let wrap = |source| AgentError::Runtime {
            node: self.config.name.clone(),
            source,
        };
        let mut out: HashMap<String, Adopted> = HashMap::new();
        let sandboxes = self
            .runtime
            .list_sandboxes(&self.config.name)
            .await
            .map_err(wrap)?;
        for sb in sandboxes {
            let containers = self.runtime.list_containers(&sb.id).await.map_err(wrap)?;
            // Of several sandboxes of one pod, follow the ready one; clean up the others.
            match out.get(&sb.pod_uid) {
                Some(existing) if existing.sandbox.ready || !sb.ready => {
                    remove_sandbox(self.runtime.clone(), sb.id.clone());
                }
                _ => {
                    if let Some(old) = out.insert(
                        sb.pod_uid.clone(),
                        Adopted {
                            sandbox: sb,
                            containers,
                        },
                    ) {
                        remove_sandbox(self.runtime.clone(), old.sandbox.id);
                    }
                }
            }
        }
        Ok(out)
    }

    async fn follow_pods(&self, node: Node) -> Result<()> {
        let ctx = Arc::new(WorkerContext {
            runtime: self.runtime.clone(),
            status: self.status.clone(),
            client: Some(self.client.clone()),
            node: self.config.name.clone(),
            host_ip: self.config.host_ip.clone(),
            pod_cidr: node.spec.pod_cidr.clone(),
            cluster_dns: self.cluster_dns(&node.spec.pod_cidr),
            engine: self.config.engine,
            events: self.events.clone(),
            metrics: self.metrics.clone(),
            volumes: Volumes::new(
                self.config.root_dir.clone(),
                Some(self.client.clone()),
                self.config.volume_tmpfs,
                self.config.volume_resync,
                self.resources(),
            ),
            services: Some(self.services.clone()),
        });
        let mut pods = Pods {
            ctx,
            node,
            node_rx: self.node_rx.clone(),
            workers: HashMap::new(),
            adoptable: self.runtime_state().await?,
            cancel: self.cancel.child_token(),
        };
        let fields = format!("spec.nodeName={}", self.config.name);
        let mut informer = Informer::new(
            self.client.clone(),
            Kind::Pod,
            ListParams::default().fields(fields),
        );
        let mut backoff = Backoff::for_store();
        let initial = loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return Ok(()),
                r = informer.sync() => match r {
                    Ok(events) => break events,
                    Err(e) => {
                        tracing::warn!(node = %self.config.name, error = %e, "listing pods failed; retrying");
                        backoff.wait().await;
                    }
                },
            }
        };
        backoff.reset();
        for e in &initial {
            pods.dispatch(e);
        }
        // The volumes of pods that went while the agent was away go too.
        let live: std::collections::HashSet<String> =
            pods.workers.values().map(|(_, w)| w.uid.clone()).collect();
        pods.ctx.volumes.remove_orphans(&live).await;
        // Local volumes whose object is gone go too, now and every few resyncs.
        let collector = {
            let (volumes, cancel) = (pods.ctx.volumes.clone(), pods.cancel.clone());
            let every = self.config.volume_resync * 4;
            tokio::spawn(async move {
                loop {
                    volumes.collect_local_volumes().await;
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(every) => {}
                    }
                }
            })
        };
        let _stop_collector = AbortOnDrop(collector);
        // Whatever the runtime holds for pods that no longer exist goes.
        for (_, orphan) in pods.adoptable.drain() {
            tracing::info!(node = %self.config.name, pod = %orphan.sandbox.pod_name, "removing the sandbox of a pod that is gone");
            remove_sandbox(self.runtime.clone(), orphan.sandbox.id);
        }
        loop {
            let result = tokio::select! {
                _ = self.cancel.cancelled() => return Ok(()),
                r = informer.run(|e, _| pods.dispatch(e)) => r,
            };
            if let Err(e) = result {
                tracing::warn!(node = %self.config.name, error = %e, "pod watch failed; resuming");
                tokio::select! {
                    _ = self.cancel.cancelled() => return Ok(()),
                    _ = backoff.wait() => {}
                }
            }
        }
    }
}

/// Aborts a task when its owner goes, however it goes.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn remove_sandbox(runtime: Arc<dyn Runtime>, id: String) {
    tokio::spawn(async move {
        if let Err(e) = runtime.stop_sandbox(&id).await {
            tracing::debug!(sandbox = %id, error = %e, "stop of an orphan sandbox");
        }
        if let Err(e) = runtime.remove_sandbox(&id).await {
            tracing::warn!(sandbox = %id, error = %e, "removing an orphan sandbox failed");
        }
    });
}

/// Watches the Nodes named in `nodes` (only its own when the process hosts one, as the
/// kubelet does) and publishes each new version, until `cancel` fires.
async fn watch_nodes(
    client: ClusterClient,
    nodes: HashMap<String, tokio::sync::watch::Sender<Option<Node>>>,
    cancel: CancellationToken,
) {
    let params = match nodes.keys().collect::<Vec<_>>().as_slice() {
        [only] => ListParams::default().fields(format!("metadata.name={only}")),
        _ => ListParams::default(),
    };
    let mut informer = Informer::new(client, Kind::Node, params);
    let mut backoff = Backoff::for_store();
    loop {
        let result = tokio::select! {
            _ = cancel.cancelled() => return,
            r = informer.run(|e, _| {
                if let Event::Added(Object::Node(n)) | Event::Modified(Object::Node(n)) = e
                    && let Some(tx) = nodes.get(&n.metadata.name)
                {
                    tx.send_replace(Some(n.clone()));
                }
            }) => r,
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "node watch failed; resuming");
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = backoff.wait() => {}
        }
    }
}

/// The revision a version of an object was written at (0 when unknown).
fn revision_of(node: &Node) -> i64 {
    node.metadata.resource_version.parse().unwrap_or(0)
}

/// The pods of one node and their workers.
struct Pods {
    ctx: Arc<WorkerContext>,
    /// The newest version of this node seen: at registration, then from the watch.
    node: Node,
    node_rx: tokio::sync::watch::Receiver<Option<Node>>,
    workers: HashMap<String, (Pod, WorkerHandle)>,
    adoptable: HashMap<String, Adopted>,
    cancel: CancellationToken,
}

impl Pods {
    fn dispatch(&mut self, event: &Event) {
        match event {
            Event::Added(Object::Pod(p)) | Event::Modified(Object::Pod(p)) => self.upsert(p),
            Event::Deleted(Object::Pod(p)) => {
                let key = pod_key(p);
                if let Some((_, h)) = self.workers.remove(&key) {
                    h.pod.send_replace(None);
                }
            }
            _ => {}
        }
        self.workers
            .retain(|_, (_, h)| !h.done.load(Ordering::Acquire));
    }

    fn upsert(&mut self, pod: &Pod) {
        let key = pod_key(pod);
        if let Some((known, h)) = self.workers.get_mut(&key) {
            if h.uid == pod.metadata.uid {
                *known = pod.clone();
                h.pod.send_replace(Some(pod.clone()));
                return;
            }
            // The name now belongs to a new pod: the old one is gone.
            h.pod.send_replace(None);
            self.workers.remove(&key);
        }
        let adopted = self.adoptable.remove(&pod.metadata.uid);
        if pod.is_terminal() {
            // Finished before this agent started: nothing to run, only leftovers to remove.
            if let Some(a) = adopted {
                remove_sandbox(self.ctx.runtime.clone(), a.sandbox.id);
            }
            // Finished and being deleted (the agent that ran it stopped before removing it):
            // nothing runs it any more, so it is removed now, as the kubelet removes it.
            if pod.metadata.deletion_timestamp.is_some()
                && let Some(client) = self.ctx.client.clone()
            {
                let key = PodKey {
                    namespace: pod.metadata.namespace.clone(),
                    name: pod.metadata.name.clone(),
                };
                let uid = pod.metadata.uid.clone();
                let cancel = self.cancel.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = cancel.cancelled() => {}
                        _ = worker::delete_pod(&client, &key, &uid) => {}
                    }
                });
            }
            return;
        }
        let verdict = if adopted.is_some() {
            // Already running here: admitted by an earlier agent.
            Ok(())
        } else {
            if let Some(newer) = self
                .node_rx
                .borrow()
                .as_ref()
                .filter(|n| revision_of(n) > revision_of(&self.node))
            {
                self.node = newer.clone();
            }
            let admitted = self
                .workers
                .values()
                .filter(|(_, h)| !h.terminal.load(Ordering::Acquire))
                .map(|(p, _)| p);
            admission::admit(&self.node, admitted, pod)
        };
        if let Err(r) = &verdict {
            tracing::info!(pod = %key, reason = %r.reason, "admission refused");
        }
        let handle = worker::spawn(
            self.ctx.clone(),
            pod.clone(),
            verdict,
            adopted,
            self.cancel.clone(),
        );
        self.workers.insert(key, (pod.clone(), handle));
    }
}

fn pod_key(p: &Pod) -> String {
    format!("{}/{}", p.metadata.namespace, p.metadata.name)
}

/// Writes the Node's status with fresh heartbeat times every `config.heartbeat`, through the
/// process's status writer: with many nodes in one process, their beats share log entries
/// with each other and with the pods' statuses. A beat not written within the interval counts
/// as failed (the writer keeps trying with the newest).
async fn heartbeat(
    status_writer: StatusWriter,
    config: NodeConfig,
    mut status: NodeStatus,
    metrics: AgentMetrics,
    cancel: CancellationToken,
) {
    let mut tick = tokio::time::interval(config.heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = Time::now();
        for c in &mut status.conditions {
            c.last_heartbeat_time = Some(now);
        }
        let mut node = Node::default();
        node.metadata.name = config.name.clone();
        node.status = Some(status.clone());
        let seq = status_writer.submit_node(node);
        let written = status_writer.flush_node(&config.name, seq);
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = tokio::time::timeout(config.heartbeat, written) => match r {
                Ok(()) => {
                    metrics.heartbeats.inc();
                }
                Err(_) => {
                    metrics.heartbeat_failures.inc();
                    tracing::warn!(node = %config.name, "heartbeat not written within {:?}", config.heartbeat);
                }
            },
        }
    }
}

/// The host's identity as the kubelet reports it: machine and boot IDs, the DMI system UUID
/// (readable by root only), the kernel release and the OS's pretty name. A fact that cannot be
/// read is reported empty, as Kubernetes does.
fn host_system_info() -> NodeSystemInfo {
    fn read(path: &str) -> String {
        std::fs::read_to_string(path)
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    }
    let os_image = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|line| {
                let value = line.strip_prefix("PRETTY_NAME=")?;
                Some(value.trim_matches('"').to_owned())
            })
        })
        .unwrap_or_default();
    NodeSystemInfo {
        machine_id: read("/etc/machine-id"),
        system_uuid: read("/sys/class/dmi/id/product_uuid").to_ascii_lowercase(),
        boot_id: read("/proc/sys/kernel/random/boot_id"),
        kernel_version: read("/proc/sys/kernel/osrelease"),
        os_image,
        ..NodeSystemInfo::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pools are read as the kernel lays them out and named as the kubelet names them.
    #[test]
    fn huge_pages_are_read_from_the_kernel_pools() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (pool, pages) in [("hugepages-2048kB", "3\n"), ("hugepages-1048576kB", "0\n")] {
            std::fs::create_dir(dir.path().join(pool)).expect("pool");
            std::fs::write(dir.path().join(pool).join("nr_hugepages"), pages).expect("pages");
        }
        std::fs::create_dir(dir.path().join("not-a-pool")).expect("dir");
        let pools = host_hugepages(dir.path());
        assert_eq!(pools.len(), 2, "{pools:?}");
        assert_eq!(pools["hugepages-2Mi"].value(), 3 * 2 * 1024 * 1024);
        assert_eq!(pools["hugepages-1Gi"].value(), 0);
        assert!(host_hugepages(&dir.path().join("absent")).is_empty());
    }

    /// A path that does not exist yet is measured on the filesystem that will hold it.
    #[test]
    fn filesystem_size_of_a_path_not_yet_created() {
        let dir = tempfile::tempdir().expect("tempdir");
        let here = filesystem_bytes(dir.path()).expect("size");
        assert!(here > 0);
        assert_eq!(filesystem_bytes(&dir.path().join("a/b/c")), Some(here));
        let node = NodeConfig::from_host("n");
        assert!(node.ephemeral_storage.value() > 0);
    }
}
