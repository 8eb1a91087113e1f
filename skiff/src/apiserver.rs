//! `skiff apiserver`: Skiff's Kubernetes API server on its own, over any etcd v3 cluster
//! (kube-apiserver's `--etcd-servers` and its TLS flags), and the API server's flags, which
//! `skiff store --apiserver` takes too.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use skiff_apiserver::access::{self, AccessConfig};
use skiff_apiserver::cluster::ApiConfig;
use skiff_apiserver::cluster::addresses::{NodePorts, ServiceIps, ServiceRanges};
use skiff_apiserver::cluster::ipam::PodCidrs;
use skiff_apiserver::server::ApiListen;
use skiff_apiserver::standalone::Standalone;
use skiff_store::remote::RemoteConfig;
use skiff_store::tls::{TlsFiles, TlsSettings};

/// The API server's flags, kube-apiserver's and kube-controller-manager's names (shared by
/// `skiff apiserver` and `skiff store --apiserver`; their variables are `SKIFF_STORE_*`
/// under both).
#[derive(Debug, clap::Args)]
pub struct ApiFlags {
    /// How long an Event object is kept after its last update (kube-apiserver's
    /// `--event-ttl`): `1h`, `30m`.
    #[arg(long, env = "SKIFF_STORE_EVENT_TTL", default_value = "1h", value_parser = skiff_proto::duration::parse)]
    pub event_ttl: Duration,
    /// kube-apiserver's: the CA of client certificates that name Kubernetes users (CN) and
    /// groups (O), on the client URLs (the cluster API) and the Kubernetes API URLs. A
    /// certificate is then asked for, and checked when presented, without being required.
    #[arg(long, env = "SKIFF_STORE_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// Who may do what on the Kubernetes API (both faces), asked in order, comma-separated:
    /// `AlwaysAllow` (everything; kube-apiserver's default), `Node` (node agents reach their
    /// own Node and pods) and `RBAC` (roles and bindings; the bootstrap roles are created at
    /// start), as `Node,RBAC`.
    #[arg(
        long,
        env = "SKIFF_STORE_AUTHORIZATION_MODE",
        value_delimiter = ',',
        default_value = "AlwaysAllow"
    )]
    pub authorization_mode: Vec<access::Mode>,
    /// Bearer tokens for the Kubernetes API, kube-apiserver's CSV: `token,user,uid,"group1,group2"`.
    #[arg(long, env = "SKIFF_STORE_TOKEN_AUTH_FILE")]
    pub token_auth_file: Option<PathBuf>,
    /// kube-apiserver's: bootstrap tokens (`<id>.<secret>`, kept as Secrets
    /// `kube-system/bootstrap-token-<id>`) authenticate joining nodes as
    /// `system:bootstrap:<id>` in `system:bootstrappers`.
    #[arg(long, env = "SKIFF_STORE_ENABLE_BOOTSTRAP_TOKEN_AUTH", num_args = 0..=1, default_value_t = false,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub enable_bootstrap_token_auth: bool,
    /// A request without credentials is `system:anonymous` (and authorized as such); off:
    /// it is refused with 401.
    #[arg(long, env = "SKIFF_STORE_ANONYMOUS_AUTH", num_args = 0..=1, default_value_t = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub anonymous_auth: bool,
    /// kube-apiserver's: where the Kubernetes API's audit log goes (JSON lines, one
    /// `audit.k8s.io/v1` Event per request); none: no audit log.
    #[arg(long, env = "SKIFF_STORE_AUDIT_LOG_PATH")]
    pub audit_log_path: Option<PathBuf>,
    /// kube-apiserver's audit policy (`audit.k8s.io/v1` Policy, YAML): the level of each
    /// request; without one every request is logged at `Metadata`.
    #[arg(
        long,
        env = "SKIFF_STORE_AUDIT_POLICY_FILE",
        requires = "audit_log_path"
    )]
    pub audit_policy_file: Option<PathBuf>,
    /// kube-apiserver's: megabytes the audit log may reach before it is rotated (renamed
    /// with the time in its name, and a new one started); 0: never rotated.
    #[arg(
        long = "audit-log-maxsize",
        env = "SKIFF_STORE_AUDIT_LOG_MAXSIZE",
        default_value_t = 0,
        value_name = "MB"
    )]
    pub audit_log_maxsize: u64,
    /// kube-apiserver's: rotated audit logs to keep, the newest; 0: all of them.
    #[arg(
        long = "audit-log-maxbackup",
        env = "SKIFF_STORE_AUDIT_LOG_MAXBACKUP",
        default_value_t = 0
    )]
    pub audit_log_maxbackup: usize,
    /// kube-apiserver's: days a rotated audit log is kept; 0: no limit.
    #[arg(
        long = "audit-log-maxage",
        env = "SKIFF_STORE_AUDIT_LOG_MAXAGE",
        default_value_t = 0,
        value_name = "DAYS"
    )]
    pub audit_log_maxage: u64,
    /// kube-apiserver's: the CA that node agents' serving certificates chain to, for
    /// `pods/log`, `pods/exec` and `pods/attach` through agents that serve TLS.
    #[arg(long, env = "SKIFF_STORE_KUBELET_CERTIFICATE_AUTHORITY", requires_all = ["kubelet_client_certificate", "kubelet_client_key"])]
    pub kubelet_certificate_authority: Option<PathBuf>,
    /// kube-apiserver's: the client certificate this member presents to node agents; its
    /// user must be allowed what it asks of them (the bootstrap policy binds
    /// `system:kubelet-api-admin` to `kube-apiserver-kubelet-client`).
    #[arg(long, env = "SKIFF_STORE_KUBELET_CLIENT_CERTIFICATE", requires_all = ["kubelet_certificate_authority", "kubelet_client_key"])]
    pub kubelet_client_certificate: Option<PathBuf>,
    /// The key of `--kubelet-client-certificate`.
    #[arg(
        long,
        env = "SKIFF_STORE_KUBELET_CLIENT_KEY",
        requires = "kubelet_client_certificate"
    )]
    pub kubelet_client_key: Option<PathBuf>,
    /// kube-controller-manager's: the cluster's pod network, cut into one block per Node
    /// (`--node-cidr-mask-size`) given when the Node registers (`spec.podCIDR`) and freed
    /// when it is deleted; empty: Nodes get no block.
    #[arg(
        long,
        env = "SKIFF_STORE_CLUSTER_CIDR",
        default_value = "10.244.0.0/16"
    )]
    pub cluster_cidr: String,
    /// The prefix length of each Node's block of `--cluster-cidr`.
    #[arg(long, env = "SKIFF_STORE_NODE_CIDR_MASK_SIZE", default_value_t = 24)]
    pub node_cidr_mask_size: u8,
    /// Where Services' cluster IPs come from (kube-apiserver's flag); each is given once,
    /// in the write that creates its Service, and freed with it.
    #[arg(
        long,
        env = "SKIFF_STORE_SERVICE_CLUSTER_IP_RANGE",
        default_value = "10.96.0.0/12"
    )]
    pub service_cluster_ip_range: String,
    /// The ports NodePort Services get on every node (`FIRST-LAST`).
    #[arg(
        long,
        env = "SKIFF_STORE_SERVICE_NODE_PORT_RANGE",
        default_value = "30000-32767"
    )]
    pub service_node_port_range: String,
    /// kube-apiserver's: the private key (PEM: ECDSA P-256 or RSA) service account tokens
    /// are signed with (TokenRequest, `kubectl create token`); none: no tokens are issued.
    #[arg(long, env = "SKIFF_STORE_SERVICE_ACCOUNT_SIGNING_KEY_FILE")]
    pub service_account_signing_key_file: Option<PathBuf>,
    /// kube-apiserver's: keys service account tokens are checked against (PEM, public or
    /// private; repeatable); none: the signing key's public half.
    #[arg(
        long,
        env = "SKIFF_STORE_SERVICE_ACCOUNT_KEY_FILE",
        value_delimiter = ','
    )]
    pub service_account_key_file: Vec<PathBuf>,
    /// kube-apiserver's: the `iss` of the tokens issued, and the only one accepted.
    #[arg(
        long,
        env = "SKIFF_STORE_SERVICE_ACCOUNT_ISSUER",
        default_value = skiff_apiserver::access::serviceaccount::DEFAULT_ISSUER
    )]
    pub service_account_issuer: String,
    /// kube-apiserver's: the audiences a token must name to authenticate to the API
    /// (comma-separated); none: the issuer.
    #[arg(long, env = "SKIFF_STORE_API_AUDIENCES", value_delimiter = ',')]
    pub api_audiences: Vec<String>,
    /// kube-apiserver's: where pods reach this server's Kubernetes API (`IP:PORT`), listed
    /// among the endpoints of the `kubernetes` Service in `default` while the server runs;
    /// none: it lists none (the Service is kept all the same).
    #[arg(long, env = "SKIFF_STORE_ADVERTISE_ADDRESS")]
    pub advertise_address: Option<std::net::SocketAddr>,
}

impl ApiFlags {
    /// The API server's settings and access rules, as these flags set them.
    pub fn build(self) -> anyhow::Result<(ApiConfig, AccessConfig)> {
        if self.authorization_mode.is_empty() {
            bail!("--authorization-mode needs at least one mode: AlwaysAllow or RBAC");
        }
        let pod_cidrs = (!self.cluster_cidr.is_empty())
            .then(|| PodCidrs::new(&self.cluster_cidr, self.node_cidr_mask_size))
            .transpose()?;
        let services = ServiceRanges {
            ips: ServiceIps::new(&self.service_cluster_ip_range)?,
            node_ports: NodePorts::new(&self.service_node_port_range)?,
        };
        let config = ApiConfig {
            event_ttl: self.event_ttl,
            pod_cidrs,
            services,
            advertise: self.advertise_address,
        };
        let access = AccessConfig {
            modes: self.authorization_mode,
            token_auth_file: self.token_auth_file,
            anonymous: self.anonymous_auth,
            client_certs: self.client_ca_file.is_some(),
            audit: self.audit_log_path.map(|path| access::AuditConfig {
                path,
                policy: self.audit_policy_file,
                rotation: access::audit::Rotation {
                    max_bytes: self.audit_log_maxsize << 20,
                    max_backups: self.audit_log_maxbackup,
                    max_age: Duration::from_secs(self.audit_log_maxage * 86_400),
                },
            }),
            bootstrap_tokens: self.enable_bootstrap_token_auth,
            kubelet: self
                .kubelet_certificate_authority
                .map(|ca| skiff_proto::tls::ClientTls {
                    ca,
                    cert: self.kubelet_client_certificate,
                    key: self.kubelet_client_key,
                }),
            service_accounts: (self.service_account_signing_key_file.is_some()
                || !self.service_account_key_file.is_empty())
            .then_some(access::serviceaccount::ServiceAccountConfig {
                issuer: self.service_account_issuer,
                signing_key_file: self.service_account_signing_key_file,
                key_files: self.service_account_key_file,
                api_audiences: self.api_audiences,
            }),
        };
        Ok((config, access))
    }
}

/// `skiff apiserver`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// etcd's client URLs, comma-separated (`http://host:port`, `https://host:port`): any
    /// etcd v3 cluster (etcd 3.4, 3.5, or a Skiff store).
    #[arg(
        long,
        env = "SKIFF_APISERVER_ETCD_SERVERS",
        value_delimiter = ',',
        required = true
    )]
    etcd_servers: Vec<String>,
    /// The CA etcd's certificates chain to (`https://` etcd servers).
    #[arg(long, env = "SKIFF_APISERVER_ETCD_CAFILE")]
    etcd_cafile: Option<PathBuf>,
    /// The client certificate presented to etcd.
    #[arg(long, env = "SKIFF_APISERVER_ETCD_CERTFILE", requires = "etcd_keyfile")]
    etcd_certfile: Option<PathBuf>,
    /// Its key.
    #[arg(long, env = "SKIFF_APISERVER_ETCD_KEYFILE", requires = "etcd_certfile")]
    etcd_keyfile: Option<PathBuf>,
    /// Where the API server keeps its mirror of etcd (a cache, emptied at start).
    #[arg(
        long,
        env = "SKIFF_APISERVER_DATA_DIR",
        default_value = "apiserver.skiff"
    )]
    data_dir: PathBuf,
    /// How much history the mirror keeps for watches and lists at a past resourceVersion.
    #[arg(long, env = "SKIFF_APISERVER_WATCH_HISTORY", default_value = "5m",
          value_parser = skiff_proto::duration::parse)]
    watch_history: Duration,
    /// The most operations etcd takes in one transaction (its `--max-txn-ops`).
    #[arg(long, env = "SKIFF_APISERVER_ETCD_MAX_TXN_OPS", default_value_t = 128)]
    etcd_max_txn_ops: usize,
    /// Where in etcd the objects are: kube-apiserver's `--etcd-prefix`, which takes the
    /// place of `/registry` in every object's key (`/registry/pods/NS/NAME` becomes
    /// `PREFIX/pods/NS/NAME`), with Skiff's own keys (address claims, leader leases) under
    /// `PREFIX-skiff/`. Several clusters share one etcd, each under its own prefix, and
    /// each API server, and the etcd calls of clients passed through it, sees only its own
    /// keys. The default keeps the layout of `skiff store --apiserver` and follows all of
    /// etcd.
    #[arg(long, env = "SKIFF_APISERVER_ETCD_PREFIX", default_value = "/registry")]
    etcd_prefix: String,
    /// URLs of the Kubernetes REST API (kubectl, client libraries), comma-separated.
    #[arg(
        long,
        env = "SKIFF_APISERVER_LISTEN_API_URLS",
        value_delimiter = ',',
        default_value = "https://127.0.0.1:6443"
    )]
    listen_api_urls: Vec<String>,
    /// URLs of the cluster API (gRPC: Skiff's scheduler, controllers and agents), with
    /// etcd's services passed through to `--etcd-servers` beside it.
    #[arg(
        long,
        env = "SKIFF_APISERVER_LISTEN_CLIENT_URLS",
        value_delimiter = ',',
        default_value = "https://127.0.0.1:6444"
    )]
    listen_client_urls: Vec<String>,
    /// The certificate `https://` URLs serve (kube-apiserver's name).
    #[arg(
        long,
        env = "SKIFF_APISERVER_TLS_CERT_FILE",
        requires = "tls_private_key_file"
    )]
    tls_cert_file: Option<PathBuf>,
    /// Its key.
    #[arg(
        long,
        env = "SKIFF_APISERVER_TLS_PRIVATE_KEY_FILE",
        requires = "tls_cert_file"
    )]
    tls_private_key_file: Option<PathBuf>,
    /// Serve the API on `http://` URLs too: to anyone who reaches them, with no certificate
    /// to say who they are.
    #[arg(long, env = "SKIFF_APISERVER_INSECURE", num_args = 0..=1, default_value_t = false,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    apiserver_insecure: bool,
    #[command(flatten)]
    api: ApiFlags,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let client_ca = args.api.client_ca_file.clone();
    if client_ca.is_some() && args.tls_cert_file.is_none() {
        bail!("--client-ca-file needs --tls-cert-file and --tls-private-key-file");
    }
    let (api, access) = args.api.build()?;
    let config = Standalone {
        api,
        access,
        etcd: RemoteConfig {
            endpoints: args.etcd_servers,
            ca: args.etcd_cafile,
            cert: args.etcd_certfile,
            key: args.etcd_keyfile,
            data_dir: args.data_dir,
            history: args.watch_history,
            max_txn_ops: args.etcd_max_txn_ops,
            keys: skiff_apiserver::standalone::etcd_keys(&args.etcd_prefix)?,
        },
        listen: ApiListen {
            rest_urls: args
                .listen_api_urls
                .into_iter()
                .filter(|u| !u.is_empty())
                .collect(),
            client_urls: args
                .listen_client_urls
                .into_iter()
                .filter(|u| !u.is_empty())
                .collect(),
            insecure: args.apiserver_insecure,
        },
        tls: TlsSettings {
            client: args.tls_cert_file.map(|cert| TlsFiles {
                cert,
                key: args.tls_private_key_file.unwrap_or_default(),
                trusted_ca: None,
                client_cert_auth: false,
                client_ca,
            }),
            peer: None,
            cipher_suites: Vec::new(),
        },
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(skiff_apiserver::standalone::run(
        config,
        crate::signals::terminated(),
    ))?;
    Ok(ExitCode::SUCCESS)
}
