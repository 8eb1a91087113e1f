//! The command lines of `skiff store`, `skiff scheduler` and `skiff node` as launchers set
//! them. Each `args()` is the argv after the program name; the skiff crate's tests parse it
//! with the real clap definitions and compare every field, so the two cannot drift apart.
//! Unset (`None`) fields are left to the command's defaults.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The container runtime a node agent runs its pods on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeKind {
    /// Simulated containers (kubemark-style): thousands of nodes in one process.
    Sim,
    /// Real containers through containerd's CRI plugin (root needed).
    Cri,
}

impl RuntimeKind {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::Sim => "sim",
            RuntimeKind::Cri => "cri",
        }
    }
}

/// `--initial-cluster-state`: bootstrap a cluster, or join one after `member add`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ClusterState {
    #[default]
    New,
    Existing,
}

impl ClusterState {
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterState::New => "new",
            ClusterState::Existing => "existing",
        }
    }
}

/// Durations as the skiff flags read them (`1500ms`).
fn duration(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// Builds an argv of `--flag value` pairs.
#[derive(Default)]
struct Argv(Vec<OsString>);

impl Argv {
    fn flag(&mut self, name: &str, value: impl Into<OsString>) -> &mut Argv {
        self.0.push(format!("--{name}").into());
        self.0.push(value.into());
        self
    }

    fn opt<T: ToString>(&mut self, name: &str, value: Option<T>) -> &mut Argv {
        if let Some(v) = value {
            self.flag(name, v.to_string());
        }
        self
    }

    fn list(&mut self, name: &str, values: &[String]) -> &mut Argv {
        if !values.is_empty() {
            self.flag(name, values.join(","));
        }
        self
    }
}

/// `skiff store`: one member of the replicated store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreCommand {
    pub name: String,
    pub data_dir: PathBuf,
    /// `http://host:port`.
    pub listen_client_url: String,
    pub listen_peer_url: String,
    pub listen_metrics_url: Option<String>,
    /// Run Skiff's Kubernetes API server in the member's process (`--apiserver`): the cluster
    /// API on the client URL, the REST API on `listen_api_url`. Without TLS the command also
    /// says `--apiserver-insecure`: every URL is then plain `http://`.
    pub apiserver: bool,
    /// Where to serve the Kubernetes REST API, with `apiserver`; `None` serves none.
    pub listen_api_url: Option<String>,
    /// Every member of the initial cluster: (name, peer URL); empty: this member alone.
    pub initial_cluster: Vec<(String, String)>,
    pub initial_cluster_state: ClusterState,
    /// Milliseconds.
    pub heartbeat_interval: Option<u64>,
    /// Milliseconds.
    pub election_timeout: Option<u64>,
    pub snapshot_count: Option<u64>,
    pub snapshot_catchup_entries: Option<u64>,
    pub max_request_bytes: Option<usize>,
    pub max_txn_ops: Option<usize>,
    /// Bytes.
    pub quota_backend_bytes: Option<u64>,
    pub event_ttl: Option<Duration>,
    /// `--lease-checkpoint-interval`.
    pub lease_checkpoint_interval: Option<Duration>,
    /// `--auto-compaction-retention` in periodic mode (history kept by the leader's
    /// compaction on a timer).
    pub auto_compaction_retention: Option<Duration>,
    /// The log filter (`--log`, tracing's EnvFilter syntax).
    pub log: Option<String>,
    /// TLS on `https://` client and peer URLs, with certificates required on both.
    pub tls: Option<StoreTls>,
    /// `--experimental-corrupt-check-time`.
    pub corrupt_check: Option<Duration>,
    /// `--bcrypt-cost` (tests use the cheapest, 4).
    pub bcrypt_cost: Option<u32>,
    /// `--auth-token-ttl`.
    pub auth_token_ttl: Option<Duration>,
    /// Kubernetes security on top of `tls`: client certificates from its CA name Kubernetes
    /// users (`--client-ca-file`), and the node authorizer then RBAC authorize them
    /// (`--authorization-mode Node,RBAC`).
    pub rbac: bool,
    /// `--token-auth-file`: static bearer tokens for the Kubernetes API.
    pub token_auth_file: Option<PathBuf>,
    /// `--enable-bootstrap-token-auth`: bootstrap tokens authenticate joining nodes.
    pub bootstrap_tokens: bool,
    /// `--audit-log-path`: the Kubernetes API's audit log.
    pub audit_log: Option<PathBuf>,
    /// `--audit-log-maxsize` (MB) and `--audit-log-maxbackup`: when the audit log is
    /// rotated, and how many rotated files are kept.
    pub audit_log_maxsize: Option<u64>,
    pub audit_log_maxbackup: Option<usize>,
    /// How the member reaches node agents that serve TLS (`--kubelet-certificate-authority`,
    /// `--kubelet-client-certificate`, `--kubelet-client-key`).
    pub kubelet: Option<ClientCert>,
    /// `--service-account-signing-key-file`: the key service account tokens are signed with
    /// (and checked against).
    pub service_account_key: Option<PathBuf>,
    /// `--advertise-address`: where pods reach the member's Kubernetes API.
    pub advertise_address: Option<SocketAddr>,
    /// `--cluster-cidr` (`a.b.c.d/n`; empty: no pod CIDR blocks).
    pub cluster_cidr: Option<String>,
    /// `--node-cidr-mask-size`.
    pub node_cidr_mask_size: Option<u8>,
}

/// One certificate for a member's client and peer URLs alike (as `skiff certs` makes them),
/// and the CA that clients' and peers' certificates must chain to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl StoreCommand {
    /// `--initial-cluster`'s items: `name=url`.
    fn initial_cluster_list(&self) -> Vec<String> {
        self.initial_cluster
            .iter()
            .map(|(name, url)| format!("{name}={url}"))
            .collect()
    }

    /// The same member as etcd 3.4 takes it (`etcd …`, no subcommand): the flags the two
    /// share, for benchmarks that run etcd beside Skiff. What etcd lacks (the Kubernetes API,
    /// Skiff's own limits and logging) is left out.
    pub fn etcd_args(&self) -> Vec<OsString> {
        let initial = self.initial_cluster_list();
        let peer = self
            .initial_cluster
            .iter()
            .find(|(name, _)| *name == self.name)
            .map_or(self.listen_peer_url.as_str(), |(_, url)| url.as_str());
        let mut a = Argv(Vec::new());
        a.flag("name", &self.name)
            .flag("data-dir", &self.data_dir)
            .flag("listen-client-urls", &self.listen_client_url)
            .flag("advertise-client-urls", &self.listen_client_url)
            .flag("listen-peer-urls", &self.listen_peer_url)
            .flag("initial-advertise-peer-urls", peer)
            .opt("listen-metrics-urls", self.listen_metrics_url.as_ref())
            .list("initial-cluster", &initial)
            .flag("initial-cluster-state", self.initial_cluster_state.as_str())
            .opt("heartbeat-interval", self.heartbeat_interval)
            .opt("election-timeout", self.election_timeout)
            .opt("snapshot-count", self.snapshot_count)
            .opt("quota-backend-bytes", self.quota_backend_bytes);
        a.0
    }

    pub fn args(&self) -> Vec<OsString> {
        let initial = self.initial_cluster_list();
        let mut a = Argv(vec!["store".into()]);
        a.flag("name", &self.name)
            .flag("data-dir", &self.data_dir)
            .flag("listen-client-urls", &self.listen_client_url)
            .flag("listen-peer-urls", &self.listen_peer_url)
            .opt("listen-metrics-urls", self.listen_metrics_url.as_ref())
            .opt("listen-api-urls", self.listen_api_url.as_ref())
            .list("initial-cluster", &initial)
            .flag("initial-cluster-state", self.initial_cluster_state.as_str())
            .opt("heartbeat-interval", self.heartbeat_interval)
            .opt("election-timeout", self.election_timeout)
            .opt("snapshot-count", self.snapshot_count)
            .opt("snapshot-catchup-entries", self.snapshot_catchup_entries)
            .opt("max-request-bytes", self.max_request_bytes)
            .opt("max-txn-ops", self.max_txn_ops)
            .opt("quota-backend-bytes", self.quota_backend_bytes)
            .opt("event-ttl", self.event_ttl.map(duration))
            .opt(
                "lease-checkpoint-interval",
                self.lease_checkpoint_interval.map(duration),
            )
            .opt(
                "auto-compaction-retention",
                self.auto_compaction_retention.map(duration),
            )
            .opt(
                "experimental-corrupt-check-time",
                self.corrupt_check.map(duration),
            )
            .opt("bcrypt-cost", self.bcrypt_cost)
            .opt("auth-token-ttl", self.auth_token_ttl.map(|d| d.as_secs()))
            .opt("cluster-cidr", self.cluster_cidr.as_ref())
            .opt("node-cidr-mask-size", self.node_cidr_mask_size)
            .opt("log", self.log.as_ref());
        if self.apiserver {
            a.flag("apiserver", "true");
            if self.tls.is_none() {
                a.flag("apiserver-insecure", "true");
            }
        }
        if let Some(f) = &self.token_auth_file {
            a.flag("token-auth-file", f);
        }
        if self.bootstrap_tokens {
            a.flag("enable-bootstrap-token-auth", "true");
        }
        if let Some(f) = &self.audit_log {
            a.flag("audit-log-path", f)
                .opt("audit-log-maxsize", self.audit_log_maxsize.as_ref())
                .opt("audit-log-maxbackup", self.audit_log_maxbackup.as_ref());
        }
        if let Some(k) = &self.kubelet {
            a.flag("kubelet-certificate-authority", &k.ca)
                .flag("kubelet-client-certificate", &k.cert)
                .flag("kubelet-client-key", &k.key);
        }
        if let Some(f) = &self.service_account_key {
            a.flag("service-account-signing-key-file", f);
        }
        a.opt("advertise-address", self.advertise_address);
        if let Some(tls) = &self.tls {
            a.flag("cert-file", &tls.cert)
                .flag("key-file", &tls.key)
                .flag("trusted-ca-file", &tls.ca)
                .flag("client-cert-auth", "true")
                .flag("peer-cert-file", &tls.cert)
                .flag("peer-key-file", &tls.key)
                .flag("peer-trusted-ca-file", &tls.ca)
                .flag("peer-client-cert-auth", "true");
            if self.rbac {
                a.flag("client-ca-file", &tls.ca)
                    .flag("authorization-mode", "Node,RBAC");
            }
        }
        a.0
    }
}

/// How a component reaches the store over TLS: the CA, and the client certificate (with
/// its key) that names it (`--cacert`, `--cert`, `--key`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientCert {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A node agent's serving certificate (with its key) and the CA its callers' client
/// certificates must chain to (the kubelet's `--tls-cert-file`, `--tls-private-key-file`,
/// `--client-ca-file`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServingCert {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
}

impl Argv {
    fn client_cert(&mut self, tls: Option<&ClientCert>) -> &mut Argv {
        if let Some(t) = tls {
            self.flag("cacert", &t.ca)
                .flag("cert", &t.cert)
                .flag("key", &t.key);
        }
        self
    }
}

/// `skiff apiserver`: the Kubernetes API server on its own, over an etcd.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiServerCommand {
    /// etcd's client URLs.
    pub etcd_servers: Vec<String>,
    /// Where its mirror of etcd lives.
    pub data_dir: PathBuf,
    /// The cluster API's URL (and etcd's services passed through).
    pub listen_client_url: String,
    /// The REST API's URL; none: no REST API.
    pub listen_api_url: Option<String>,
    /// `--apiserver-insecure`: plain `http://` URLs.
    pub insecure: bool,
    /// The client of etcd's `https://` URLs (`--etcd-cafile`, `--etcd-certfile`,
    /// `--etcd-keyfile`).
    pub etcd_tls: Option<ClientCert>,
    /// `--etcd-prefix`: where in etcd the API server keeps its objects.
    pub etcd_prefix: Option<String>,
    /// The serving certificate, and the CA whose client certificates name users
    /// (`--tls-cert-file`, `--tls-private-key-file`, `--client-ca-file`).
    pub tls: Option<StoreTls>,
    /// `--authorization-mode Node,RBAC` (with `tls`).
    pub rbac: bool,
    pub bootstrap_tokens: bool,
    pub kubelet: Option<ClientCert>,
    /// `--service-account-signing-key-file`: the key service account tokens are signed with
    /// (and checked against).
    pub service_account_key: Option<PathBuf>,
    /// `--advertise-address`: where pods reach this API server.
    pub advertise_address: Option<SocketAddr>,
    pub audit_log: Option<PathBuf>,
    pub audit_log_maxsize: Option<u64>,
    pub audit_log_maxbackup: Option<usize>,
    pub event_ttl: Option<Duration>,
    pub cluster_cidr: Option<String>,
    pub node_cidr_mask_size: Option<u8>,
    pub log: Option<String>,
}

impl ApiServerCommand {
    pub fn args(&self) -> Vec<OsString> {
        let mut a = Argv(vec!["apiserver".into()]);
        a.list("etcd-servers", &self.etcd_servers)
            .flag("data-dir", &self.data_dir)
            .flag("listen-client-urls", &self.listen_client_url)
            .flag(
                "listen-api-urls",
                self.listen_api_url.as_deref().unwrap_or_default(),
            )
            .opt("etcd-prefix", self.etcd_prefix.as_ref())
            .opt("event-ttl", self.event_ttl.map(duration))
            .opt("cluster-cidr", self.cluster_cidr.as_ref())
            .opt("node-cidr-mask-size", self.node_cidr_mask_size)
            .opt("log", self.log.as_ref());
        if self.insecure {
            a.flag("apiserver-insecure", "true");
        }
        if let Some(t) = &self.etcd_tls {
            a.flag("etcd-cafile", &t.ca)
                .flag("etcd-certfile", &t.cert)
                .flag("etcd-keyfile", &t.key);
        }
        if let Some(tls) = &self.tls {
            a.flag("tls-cert-file", &tls.cert)
                .flag("tls-private-key-file", &tls.key)
                .flag("client-ca-file", &tls.ca);
            if self.rbac {
                a.flag("authorization-mode", "Node,RBAC");
            }
        }
        if self.bootstrap_tokens {
            a.flag("enable-bootstrap-token-auth", "true");
        }
        if let Some(k) = &self.kubelet {
            a.flag("kubelet-certificate-authority", &k.ca)
                .flag("kubelet-client-certificate", &k.cert)
                .flag("kubelet-client-key", &k.key);
        }
        if let Some(f) = &self.service_account_key {
            a.flag("service-account-signing-key-file", f);
        }
        a.opt("advertise-address", self.advertise_address);
        if let Some(f) = &self.audit_log {
            a.flag("audit-log-path", f)
                .opt("audit-log-maxsize", self.audit_log_maxsize.as_ref())
                .opt("audit-log-maxbackup", self.audit_log_maxbackup.as_ref());
        }
        a.0
    }
}

/// `skiff scheduler`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulerCommand {
    /// Store members' client endpoints (`host:port`).
    pub endpoints: Vec<String>,
    pub tls: Option<ClientCert>,
    pub metrics_addr: Option<SocketAddr>,
    /// Seconds.
    pub lease_ttl: Option<Duration>,
    pub log: Option<String>,
}

impl SchedulerCommand {
    pub fn args(&self) -> Vec<OsString> {
        let mut a = Argv(vec!["scheduler".into()]);
        a.list("endpoints", &self.endpoints)
            .client_cert(self.tls.as_ref())
            .opt("metrics-addr", self.metrics_addr)
            .opt("lease-ttl", self.lease_ttl.map(duration))
            .opt("log", self.log.as_ref());
        a.0
    }
}

/// `skiff controller-manager`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ControllerManagerCommand {
    /// Store members' client endpoints (`host:port`).
    pub endpoints: Vec<String>,
    pub tls: Option<ClientCert>,
    pub metrics_addr: Option<SocketAddr>,
    pub lease_ttl: Option<Duration>,
    pub node_monitor_grace_period: Option<Duration>,
    /// Nodes per second per zone.
    pub node_eviction_rate: Option<f64>,
    /// The CA that signs approved certificate requests.
    pub signing: Option<SigningCa>,
    /// `--root-ca-file`: the CA published in every namespace as `kube-root-ca.crt` (the
    /// signing CA when none).
    pub root_ca: Option<PathBuf>,
    pub log: Option<String>,
}

/// A CA certificate and its key, for signing (kube-controller-manager's
/// `--cluster-signing-cert-file`, `--cluster-signing-key-file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningCa {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ControllerManagerCommand {
    pub fn args(&self) -> Vec<OsString> {
        let mut a = Argv(vec!["controller-manager".into()]);
        a.list("endpoints", &self.endpoints)
            .client_cert(self.tls.as_ref())
            .opt("metrics-addr", self.metrics_addr)
            .opt("lease-ttl", self.lease_ttl.map(duration))
            .opt(
                "node-monitor-grace-period",
                self.node_monitor_grace_period.map(duration),
            )
            .opt("node-eviction-rate", self.node_eviction_rate);
        if let Some(f) = &self.root_ca {
            a.flag("root-ca-file", f);
        }
        if let Some(ca) = &self.signing {
            a.flag("cluster-signing-cert-file", &ca.cert)
                .flag("cluster-signing-key-file", &ca.key);
        }
        a.opt("log", self.log.as_ref());
        a.0
    }
}

/// A node that joins with a bootstrap token: the CA it checks the store against, the token,
/// and where it keeps the certificate it gets (`skiff node --bootstrap-token --cert-dir`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeBootstrap {
    pub ca: PathBuf,
    pub token: String,
    /// A member's Kubernetes API URL (`https://host:port`).
    pub server: String,
    pub cert_dir: PathBuf,
}

/// `skiff node`: the node agent of one node, or of `count` simulated ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCommand {
    /// Store members' client endpoints (`host:port`).
    pub endpoints: Vec<String>,
    pub tls: Option<ClientCert>,
    pub runtime: RuntimeKind,
    pub name: Option<String>,
    /// Nodes in this process (simulated runtime), named `<name_prefix><i>`.
    pub count: Option<usize>,
    pub name_prefix: Option<String>,
    /// A quantity: `4`, `3500m`.
    pub cpu: Option<String>,
    /// A quantity: `8Gi`.
    pub memory: Option<String>,
    pub max_pods: Option<i64>,
    /// `key=value`.
    pub labels: Vec<String>,
    pub containerd_socket: Option<PathBuf>,
    pub pod_log_dir: Option<PathBuf>,
    /// Where the node keeps its pods' volumes (`--root-dir`).
    pub root_dir: Option<PathBuf>,
    /// How often running pods' volumes are brought up to date.
    pub volume_resync: Option<Duration>,
    /// Where the agent serves container logs (`host:port`, port 0 for any).
    pub logs_address: Option<String>,
    /// TLS on that port, with client certificates required.
    pub serving: Option<ServingCert>,
    /// Join with a bootstrap token instead of `tls`'s certificate.
    pub bootstrap: Option<NodeBootstrap>,
    /// containerd's CNI configuration directory, and host-local's lease directory.
    pub cni: Option<(PathBuf, PathBuf)>,
    /// containerd's network namespace, when it runs in one of its own.
    pub runtime_netns: Option<PathBuf>,
    /// The node's address (InternalIP).
    pub host_ip: Option<String>,
    /// The cluster's pod network: pod traffic within it is routed, not masqueraded.
    pub cluster_cidr: Option<String>,
    /// Where the process serves `/metrics` and `/healthz` (`host:port`).
    pub metrics_addr: Option<SocketAddr>,
    pub heartbeat_interval: Option<Duration>,
    pub backoff_initial: Option<Duration>,
    pub log: Option<String>,
}

impl NodeCommand {
    /// A node agent of `runtime` against `endpoints`; everything else at its default.
    pub fn new(runtime: RuntimeKind, endpoints: Vec<String>) -> NodeCommand {
        NodeCommand {
            endpoints,
            tls: None,
            runtime,
            name: None,
            count: None,
            name_prefix: None,
            cpu: None,
            memory: None,
            max_pods: None,
            labels: Vec::new(),
            containerd_socket: None,
            pod_log_dir: None,
            root_dir: None,
            volume_resync: None,
            logs_address: None,
            serving: None,
            bootstrap: None,
            cni: None,
            runtime_netns: None,
            host_ip: None,
            cluster_cidr: None,
            metrics_addr: None,
            heartbeat_interval: None,
            backoff_initial: None,
            log: None,
        }
    }

    pub fn args(&self) -> Vec<OsString> {
        let mut a = Argv(vec!["node".into()]);
        a.list("endpoints", &self.endpoints)
            .client_cert(self.tls.as_ref())
            .flag("runtime", self.runtime.as_str())
            .opt("name", self.name.as_ref())
            .opt("count", self.count)
            .opt("name-prefix", self.name_prefix.as_ref())
            .opt("cpu", self.cpu.as_ref())
            .opt("memory", self.memory.as_ref())
            .opt("max-pods", self.max_pods)
            .list("labels", &self.labels);
        if let Some(s) = &self.containerd_socket {
            a.flag("containerd-socket", s);
        }
        if let Some(d) = &self.pod_log_dir {
            a.flag("pod-log-dir", d);
        }
        if let Some(d) = &self.root_dir {
            a.flag("root-dir", d);
        }
        a.opt("logs-address", self.logs_address.as_ref());
        if let Some(t) = &self.serving {
            a.flag("tls-cert-file", &t.cert)
                .flag("tls-private-key-file", &t.key)
                .flag("client-ca-file", &t.client_ca);
        }
        if let Some((conf, ipam)) = &self.cni {
            a.flag("cni-conf-dir", conf).flag("cni-ipam-dir", ipam);
        }
        if let Some(ns) = &self.runtime_netns {
            a.flag("runtime-netns", ns);
        }
        a.opt("host-ip", self.host_ip.as_ref())
            .opt("cluster-cidr", self.cluster_cidr.as_ref());
        if let Some(b) = &self.bootstrap {
            a.flag("cacert", &b.ca)
                .flag("bootstrap-token", &b.token)
                .flag("bootstrap-server", &b.server)
                .flag("cert-dir", &b.cert_dir);
        }
        a.opt("metrics-addr", self.metrics_addr)
            .opt("heartbeat-interval", self.heartbeat_interval.map(duration))
            .opt("backoff-initial", self.backoff_initial.map(duration))
            .opt("volume-resync", self.volume_resync.map(duration))
            .opt("log", self.log.as_ref());
        a.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_fields_stay_off_the_command_line() {
        let n = NodeCommand::new(RuntimeKind::Sim, vec!["a:1".into(), "b:2".into()]);
        assert_eq!(
            n.args(),
            ["node", "--endpoints", "a:1,b:2", "--runtime", "sim"].map(OsString::from)
        );
        let s = SchedulerCommand {
            lease_ttl: Some(Duration::from_secs(2)),
            ..SchedulerCommand::default()
        };
        assert_eq!(
            s.args(),
            ["scheduler", "--lease-ttl", "2000ms"].map(OsString::from)
        );
        assert_eq!(duration(Duration::from_secs(3)), "3000ms");
    }
}
