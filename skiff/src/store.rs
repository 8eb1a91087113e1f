//! `skiff store`: one member of the replicated store, with etcd's flag names so scripts and
//! habits carry over.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use skiff_apiserver::cluster::ApiConfig;
use skiff_apiserver::server::{ApiListen, InProcess};
use skiff_store::compaction::CompactorConfig;
use skiff_store::member::{AutoCompaction, MemberConfig};
use skiff_store::server::{self, Listen};

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    action: Option<Action>,
    /// A configuration file in etcd's YAML format: the flags' names as keys (`name`,
    /// `data-dir`, `listen-client-urls`, `initial-cluster`, …). Its settings replace the
    /// command line's; `SKIFF_STORE_*` variables fill in what it leaves out. Keys this member
    /// has no setting for are reported and skipped, so an etcd file works as it is.
    #[arg(long, env = "SKIFF_STORE_CONFIG_FILE")]
    config_file: Option<PathBuf>,
    /// Human-readable name of this member.
    #[arg(long, env = "SKIFF_STORE_NAME", default_value = "default")]
    name: String,
    /// Directory for the member's data (default: `<name>.skiff`).
    #[arg(long, env = "SKIFF_STORE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// URLs to serve the etcd v3 API on (comma-separated).
    #[arg(
        long,
        env = "SKIFF_STORE_LISTEN_CLIENT_URLS",
        default_value = "http://127.0.0.1:2379",
        value_delimiter = ','
    )]
    listen_client_urls: Vec<String>,
    /// Client URLs other members and clients should use (default: the listen URLs).
    #[arg(long, env = "SKIFF_STORE_ADVERTISE_CLIENT_URLS", value_delimiter = ',')]
    advertise_client_urls: Vec<String>,
    /// URLs to serve the peer (Raft) API on.
    #[arg(
        long,
        env = "SKIFF_STORE_LISTEN_PEER_URLS",
        default_value = "http://127.0.0.1:2380",
        value_delimiter = ','
    )]
    listen_peer_urls: Vec<String>,
    /// This member's peer URLs as the others reach them (default: the listen peer URLs).
    #[arg(
        long,
        env = "SKIFF_STORE_INITIAL_ADVERTISE_PEER_URLS",
        value_delimiter = ','
    )]
    initial_advertise_peer_urls: Vec<String>,
    /// The initial members: `name=peer-url,name=peer-url,…` (default: this member alone).
    #[arg(long, env = "SKIFF_STORE_INITIAL_CLUSTER")]
    initial_cluster: Option<String>,
    /// `new` to bootstrap a cluster, `existing` to join one (after `member add`).
    #[arg(long, env = "SKIFF_STORE_INITIAL_CLUSTER_STATE", default_value = "new", value_parser = ["new", "existing"])]
    initial_cluster_state: String,
    /// Token that keeps clusters apart; member ids are derived from it.
    #[arg(
        long,
        env = "SKIFF_STORE_INITIAL_CLUSTER_TOKEN",
        default_value = "skiff-cluster"
    )]
    initial_cluster_token: String,
    /// Run Skiff's Kubernetes API server in this member's process: the cluster API (gRPC)
    /// beside the etcd API on the client URLs, and the REST API (kubectl, client libraries)
    /// on `--listen-api-urls`. Without it the member is an etcd and serves nothing else.
    #[arg(long, env = "SKIFF_STORE_APISERVER", num_args = 0..=1, default_value_t = false,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    apiserver: bool,
    /// Let `--apiserver` serve the Kubernetes API on `http://` URLs: to anyone who reaches
    /// them, with no certificate to say who they are. Without it the API is served over
    /// `https://` only.
    #[arg(long, env = "SKIFF_STORE_APISERVER_INSECURE", num_args = 0..=1, default_value_t = false,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    apiserver_insecure: bool,
    /// The API server's own flags (with `--apiserver`).
    #[command(flatten)]
    api: crate::apiserver::ApiFlags,
    /// URLs to serve the Kubernetes REST API on, with `--apiserver` (comma-separated;
    /// `https://` ones serve the client URLs' certificate); none by default.
    #[arg(long, env = "SKIFF_STORE_LISTEN_API_URLS", value_delimiter = ',')]
    listen_api_urls: Vec<String>,
    /// URLs to serve `/health` and `/metrics` on.
    #[arg(long, env = "SKIFF_STORE_LISTEN_METRICS_URLS", value_delimiter = ',')]
    listen_metrics_urls: Vec<String>,
    /// Raft heartbeat interval in milliseconds.
    #[arg(long, env = "SKIFF_STORE_HEARTBEAT_INTERVAL", default_value_t = 100)]
    heartbeat_interval: u64,
    /// Raft election timeout in milliseconds.
    #[arg(long, env = "SKIFF_STORE_ELECTION_TIMEOUT", default_value_t = 1000)]
    election_timeout: u64,
    /// Applied entries between snapshots (the log behind a snapshot is purged); etcd 3.4's
    /// default.
    #[arg(long, env = "SKIFF_STORE_SNAPSHOT_COUNT", default_value_t = 100_000)]
    snapshot_count: u64,
    /// Log entries kept behind a snapshot for slow followers; one further behind is sent the
    /// snapshot.
    #[arg(
        long,
        env = "SKIFF_STORE_SNAPSHOT_CATCHUP_ENTRIES",
        alias = "experimental-snapshot-catchup-entries",
        default_value_t = 5_000
    )]
    snapshot_catchup_entries: u64,
    /// How often the leader records in the log the time left of leases nobody renewed
    /// meanwhile, so that a new leader expires them on time instead of giving
    /// them a full TTL again (etcd's lease checkpoints).
    #[arg(long, env = "SKIFF_STORE_LEASE_CHECKPOINT_INTERVAL", default_value = "1m",
          value_parser = skiff_proto::duration::parse)]
    lease_checkpoint_interval: Duration,
    /// Largest request a client may send, in bytes.
    #[arg(long, env = "SKIFF_STORE_MAX_REQUEST_BYTES", default_value_t = 1536 * 1024)]
    max_request_bytes: usize,
    /// Most operations in one branch of a transaction.
    #[arg(long, env = "SKIFF_STORE_MAX_TXN_OPS", default_value_t = 128)]
    max_txn_ops: usize,
    /// Backend size that raises the NOSPACE alarm, in bytes.
    #[arg(long, env = "SKIFF_STORE_QUOTA_BACKEND_BYTES", default_value_t = 2 << 30)]
    quota_backend_bytes: u64,
    /// Versions a compaction deletes from the backend per batch, in the background after the
    /// compaction itself (which only updates the index) has answered.
    #[arg(
        long, env = "SKIFF_STORE_COMPACTION_BATCH_LIMIT",
        alias = "experimental-compaction-batch-limit",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    compaction_batch_limit: u64,
    /// Pause between two batches of a compaction's deletions (e.g. 10ms), so writes and the
    /// apply path get the keyspace in between.
    #[arg(
        long, env = "SKIFF_STORE_COMPACTION_SLEEP_INTERVAL",
        alias = "experimental-compaction-sleep-interval",
        default_value = "10ms",
        value_parser = skiff_proto::duration::parse
    )]
    compaction_sleep_interval: Duration,
    /// How `--auto-compaction-retention` is read: `periodic` (keep that much time of history)
    /// or `revision` (keep that many revisions).
    #[arg(long, env = "SKIFF_STORE_AUTO_COMPACTION_MODE", default_value = "periodic", value_parser = ["periodic", "revision"])]
    auto_compaction_mode: String,
    /// History kept by compaction on a timer, run by the leader: a duration (`5m`, `1h`; a
    /// bare number is hours, as in etcd) in periodic mode, a count in revision mode. `0`
    /// (etcd's default) compacts only when a client asks; `skiff up` keeps 5 minutes, as
    /// kube-apiserver compacts its etcd.
    #[arg(
        long,
        env = "SKIFF_STORE_AUTO_COMPACTION_RETENTION",
        default_value = "0"
    )]
    auto_compaction_retention: String,
    /// Certificate (PEM, with its chain) served on `https://` client URLs.
    #[arg(long, env = "SKIFF_STORE_CERT_FILE", requires = "key_file")]
    cert_file: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long, env = "SKIFF_STORE_KEY_FILE", requires = "cert_file")]
    key_file: Option<PathBuf>,
    /// CA that client certificates must chain to.
    #[arg(long, env = "SKIFF_STORE_TRUSTED_CA_FILE")]
    trusted_ca_file: Option<PathBuf>,
    /// Clients must present a certificate from `--trusted-ca-file`.
    #[arg(long, env = "SKIFF_STORE_CLIENT_CERT_AUTH", num_args = 0..=1, default_value_t = false,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    client_cert_auth: bool,
    /// Certificate served on `https://` peer URLs and presented to peers.
    #[arg(long, env = "SKIFF_STORE_PEER_CERT_FILE", requires = "peer_key_file")]
    peer_cert_file: Option<PathBuf>,
    /// Its private key.
    #[arg(long, env = "SKIFF_STORE_PEER_KEY_FILE", requires = "peer_cert_file")]
    peer_key_file: Option<PathBuf>,
    /// CA that peers' certificates must chain to.
    #[arg(long, env = "SKIFF_STORE_PEER_TRUSTED_CA_FILE")]
    peer_trusted_ca_file: Option<PathBuf>,
    /// Peers dialling in must present a certificate from `--peer-trusted-ca-file`.
    #[arg(long, env = "SKIFF_STORE_PEER_CLIENT_CERT_AUTH", num_args = 0..=1, default_value_t = false,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    peer_client_cert_auth: bool,
    /// TLS 1.2 cipher suites allowed, by IANA name, comma-separated (TLS 1.3's are always
    /// allowed); empty: the defaults.
    #[arg(long, env = "SKIFF_STORE_CIPHER_SUITES", value_delimiter = ',')]
    cipher_suites: Vec<String>,
    /// How often the leader compares every member's keyspace hash with its own and raises
    /// the CORRUPT alarm for one that differs (e.g. 5m); `0s` (etcd's default): never.
    #[arg(long, env = "SKIFF_STORE_EXPERIMENTAL_CORRUPT_CHECK_TIME", default_value = "0s",
          value_parser = skiff_proto::duration::parse)]
    experimental_corrupt_check_time: Duration,
    /// Kind of auth token: `simple` (etcd's default; JWT tokens are not supported).
    #[arg(long, env = "SKIFF_STORE_AUTH_TOKEN", default_value = "simple")]
    auth_token: String,
    /// Seconds an auth token may go unused before it expires.
    #[arg(long, env = "SKIFF_STORE_AUTH_TOKEN_TTL", default_value_t = 300)]
    auth_token_ttl: u64,
    /// bcrypt's cost for users' passwords (4 to 31; each step doubles the work of
    /// authenticating).
    #[arg(long, env = "SKIFF_STORE_BCRYPT_COST", default_value_t = skiff_store::auth::DEFAULT_BCRYPT_COST,
          value_parser = clap::value_parser!(u32).range(4..=31))]
    bcrypt_cost: u32,
    /// Interval of progress notifications to watchers that asked for them (e.g. 10m, 5s).
    #[arg(long, env = "SKIFF_STORE_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL", default_value = "10m", value_parser = skiff_proto::duration::parse)]
    experimental_watch_progress_notify_interval: Duration,
}

/// What `skiff store` does besides serving a member.
#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Creates the data directory of one member of a new cluster from a backup taken with
    /// `etcdctl snapshot save` (etcd's `snapshot restore` flags); run it for every member with
    /// the same backup and `--initial-cluster`, then start the members on their directories.
    Restore(RestoreArgs),
    /// Checks a backup file (its SHA-256 and every frame) and prints what it holds.
    SnapshotStatus {
        /// The backup file.
        file: PathBuf,
        /// `table` or `json`.
        #[arg(long, short = 'w', default_value = "table", value_parser = ["table", "json"])]
        write_out: String,
    },
}

#[derive(Debug, clap::Args)]
struct RestoreArgs {
    /// The backup file.
    file: PathBuf,
    /// This member's name.
    #[arg(long, default_value = "default")]
    name: String,
    /// The data directory to create (default: `<name>.skiff`); it must not exist or be empty.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The new cluster's members: `name=peer-url,…` (default: this member alone).
    #[arg(long)]
    initial_cluster: Option<String>,
    /// The new cluster's token; use a new one, so members of the old cluster are kept out.
    #[arg(long, default_value = "skiff-cluster")]
    initial_cluster_token: String,
    /// This member's peer URLs.
    #[arg(long, default_value = "http://127.0.0.1:2380", value_delimiter = ',')]
    initial_advertise_peer_urls: Vec<String>,
}

fn restore(a: RestoreArgs) -> anyhow::Result<ExitCode> {
    let initial_cluster = match &a.initial_cluster {
        Some(s) => parse_initial_cluster(s)?,
        None => vec![(a.name.clone(), a.initial_advertise_peer_urls[0].clone())],
    };
    let config = skiff_store::restore::RestoreConfig {
        data_dir: a
            .data_dir
            .unwrap_or_else(|| PathBuf::from(format!("{}.skiff", a.name))),
        name: a.name,
        initial_cluster,
        initial_cluster_token: a.initial_cluster_token,
        initial_advertise_peer_urls: a.initial_advertise_peer_urls,
    };
    let started = std::time::Instant::now();
    let (summary, cluster) = skiff_store::restore::restore(&a.file, &config)?;
    println!(
        "restored {} at revision {} ({} keys, {} versions) into {} in {:.1} s; new cluster {cluster:x}",
        a.file.display(),
        summary.head.revision,
        summary.keys,
        summary.versions,
        config.data_dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

fn snapshot_status(file: &std::path::Path, json: bool) -> anyhow::Result<ExitCode> {
    let size = std::fs::metadata(file)
        .with_context(|| file.display().to_string())?
        .len();
    let summary = skiff_store::backup::read(file, |_| Ok(()))?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "revision": summary.head.revision,
                "compactRevision": summary.head.compacted,
                "totalKey": summary.keys,
                "totalVersions": summary.versions,
                "leases": summary.head.leases.len(),
                "users": summary.head.auth.users.len(),
                "roles": summary.head.auth.roles.len(),
                "authEnabled": summary.head.auth.enabled,
                "totalSize": size,
                "clusterID": format!("{:x}", summary.source.cluster_id),
                "memberID": format!("{:x}", summary.source.member_id),
                "member": summary.source.member_name,
                "takenAt": summary.taken_at,
            })
        );
    } else {
        println!("REVISION  COMPACTED  KEYS  VERSIONS  LEASES  USERS  AUTH  SIZE  FROM");
        println!(
            "{}  {}  {}  {}  {}  {}  {}  {}  {} ({:x}) of cluster {:x}",
            summary.head.revision,
            summary.head.compacted,
            summary.keys,
            summary.versions,
            summary.head.leases.len(),
            summary.head.auth.users.len(),
            if summary.head.auth.enabled {
                "on"
            } else {
                "off"
            },
            size,
            summary.source.member_name,
            summary.source.member_id,
            summary.source.cluster_id
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The settings of an etcd-style YAML configuration file, read as the same flags would be.
fn from_config_file(path: &std::path::Path) -> anyhow::Result<Args> {
    use clap::{Args as _, FromArgMatches as _};
    use serde_yaml_ng::Value;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let doc: Value =
        serde_yaml_ng::from_str(&text).with_context(|| format!("{}: not YAML", path.display()))?;
    let map = match doc {
        Value::Mapping(m) => m,
        Value::Null => serde_yaml_ng::Mapping::new(),
        _ => bail!(
            "{}: expected a mapping of setting names to values",
            path.display()
        ),
    };
    let cmd = Args::augment_args(clap::Command::new("skiff store")).no_binary_name(true);
    let known: std::collections::BTreeSet<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_long())
        .map(String::from)
        .collect();
    let scalar = |key: &str, v: &Value| -> anyhow::Result<Option<String>> {
        Ok(match v {
            Value::Null => None,
            Value::Bool(b) => Some(b.to_string()),
            Value::Number(n) => Some(n.to_string()),
            Value::String(s) => Some(s.clone()),
            _ => bail!("{}: {key}: expected a value", path.display()),
        })
    };
    let mut argv = Vec::new();
    for (k, v) in &map {
        let Some(key) = k.as_str() else {
            bail!("{}: {k:?} is not a setting name", path.display());
        };
        if key == "config-file" {
            bail!("{}: config-file cannot name another file", path.display());
        }
        if !known.contains(key) {
            tracing::warn!(file = %path.display(), key, "not a skiff store setting: skipped");
            continue;
        }
        let value = match v {
            Value::Sequence(items) => {
                let items = items
                    .iter()
                    .map(|i| scalar(key, i).map(Option::unwrap_or_default))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                Some(items.join(","))
            }
            v => scalar(key, v)?,
        };
        if let Some(value) = value {
            argv.push(format!("--{key}={value}"));
        }
    }
    let matches = cmd
        .try_get_matches_from(argv)
        .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.render()))?;
    Ok(Args::from_arg_matches(&matches)?)
}

fn parse_initial_cluster(s: &str) -> anyhow::Result<Vec<(String, String)>> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (name, url) = p
                .split_once('=')
                .with_context(|| format!("--initial-cluster: {p:?} is not name=peer-url"))?;
            server::socket_addr(url)
                .with_context(|| format!("--initial-cluster: member {name}"))?;
            Ok((name.to_string(), url.to_string()))
        })
        .collect()
}

impl Args {
    fn config(self) -> anyhow::Result<(MemberConfig, Listen, Option<ApiServer>)> {
        let advertise_peer = if self.initial_advertise_peer_urls.is_empty() {
            self.listen_peer_urls.clone()
        } else {
            self.initial_advertise_peer_urls
        };
        let advertise_client = if self.advertise_client_urls.is_empty() {
            self.listen_client_urls.clone()
        } else {
            self.advertise_client_urls
        };
        let initial_cluster = match &self.initial_cluster {
            Some(s) => parse_initial_cluster(s)?,
            None => vec![(self.name.clone(), advertise_peer[0].clone())],
        };
        if !initial_cluster
            .iter()
            .any(|(n, u)| *n == self.name && advertise_peer.contains(u))
        {
            bail!(
                "--initial-cluster has no entry {}={} for this member",
                self.name,
                advertise_peer[0]
            );
        }
        let auto_compaction =
            auto_compaction(&self.auto_compaction_mode, &self.auto_compaction_retention)?;
        if self.election_timeout < 5 * self.heartbeat_interval {
            bail!("--election-timeout should be at least 5 times --heartbeat-interval");
        }
        let tls = skiff_store::tls::TlsSettings {
            client: self.cert_file.map(|cert| skiff_store::tls::TlsFiles {
                cert,
                key: self.key_file.clone().unwrap_or_default(),
                trusted_ca: self.trusted_ca_file.clone(),
                client_cert_auth: self.client_cert_auth,
                client_ca: self.api.client_ca_file.clone(),
            }),
            peer: self.peer_cert_file.map(|cert| skiff_store::tls::TlsFiles {
                cert,
                key: self.peer_key_file.clone().unwrap_or_default(),
                trusted_ca: self.peer_trusted_ca_file.clone(),
                client_cert_auth: self.peer_client_cert_auth,
                client_ca: None,
            }),
            cipher_suites: self
                .cipher_suites
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect(),
        };
        if self.client_cert_auth && self.trusted_ca_file.is_none() {
            bail!(
                "--client-cert-auth needs --trusted-ca-file to check client certificates against"
            );
        }
        if self.peer_client_cert_auth && self.peer_trusted_ca_file.is_none() {
            bail!("--peer-client-cert-auth needs --peer-trusted-ca-file");
        }
        if advertise_peer.iter().any(|u| u.starts_with("https://")) && tls.peer.is_none() {
            bail!("https:// peer URLs need --peer-cert-file and --peer-key-file");
        }
        let simple = self.auth_token.split(',').next() == Some("simple");
        if !simple {
            bail!(
                "--auth-token {:?}: only simple tokens are supported (JWT is not)",
                self.auth_token
            );
        }
        if self.api.client_ca_file.is_some() && tls.client.is_none() {
            bail!(
                "--client-ca-file needs --cert-file and --key-file (https:// client or API URLs)"
            );
        }
        if self.client_cert_auth
            && let (Some(k8s), Some(etcd)) = (&self.api.client_ca_file, &self.trusted_ca_file)
            && k8s != etcd
        {
            bail!(
                "--client-ca-file and --trusted-ca-file name different CAs under --client-cert-auth: \
                 the client URLs take certificates from both, so an etcd client's would name a \
                 Kubernetes user; use one CA for both"
            );
        }
        if self.auth_token_ttl == 0 {
            bail!("--auth-token-ttl must be at least 1 (second)");
        }
        let api_urls: Vec<String> = self
            .listen_api_urls
            .into_iter()
            .filter(|u| !u.is_empty())
            .collect();
        if !self.apiserver && !api_urls.is_empty() {
            bail!("--listen-api-urls serves the Kubernetes API: it needs --apiserver");
        }
        let listen = Listen {
            client_urls: self.listen_client_urls,
            peer_urls: self.listen_peer_urls,
            metrics_urls: self.listen_metrics_urls,
            watch_progress_notify_interval: self.experimental_watch_progress_notify_interval,
        };
        let apiserver = if self.apiserver {
            let (config, access) = self.api.build()?;
            Some(ApiServer {
                config,
                access,
                listen: ApiListen {
                    rest_urls: api_urls,
                    client_urls: listen.client_urls.clone(),
                    insecure: self.apiserver_insecure,
                },
            })
        } else {
            None
        };
        let config = MemberConfig {
            data_dir: self
                .data_dir
                .unwrap_or_else(|| PathBuf::from(format!("{}.skiff", self.name))),
            name: self.name,
            advertise_client_urls: advertise_client,
            initial_advertise_peer_urls: advertise_peer,
            initial_cluster,
            initial_cluster_state_new: self.initial_cluster_state == "new",
            initial_cluster_token: self.initial_cluster_token,
            heartbeat_interval: Duration::from_millis(self.heartbeat_interval),
            election_timeout: Duration::from_millis(self.election_timeout),
            snapshot_count: self.snapshot_count,
            snapshot_catchup_entries: self.snapshot_catchup_entries,
            max_request_bytes: self.max_request_bytes,
            max_txn_ops: self.max_txn_ops,
            quota_backend_bytes: self.quota_backend_bytes,
            lease_checkpoint_interval: self.lease_checkpoint_interval,
            compactor: CompactorConfig {
                batch_limit: self.compaction_batch_limit as usize,
                pause: self.compaction_sleep_interval,
            },
            auto_compaction,
            tls,
            corrupt_check: (!self.experimental_corrupt_check_time.is_zero())
                .then_some(self.experimental_corrupt_check_time),
            auth_token_ttl: Duration::from_secs(self.auth_token_ttl),
            bcrypt_cost: self.bcrypt_cost,
        };
        Ok((config, listen, apiserver))
    }
}

/// Skiff's Kubernetes API server in the member's process (`--apiserver`), as the flags set it.
#[derive(Debug)]
struct ApiServer {
    config: ApiConfig,
    access: skiff_apiserver::access::AccessConfig,
    listen: ApiListen,
}

pub fn run(mut args: Args) -> anyhow::Result<ExitCode> {
    match args.action.take() {
        Some(Action::Restore(a)) => return restore(a),
        Some(Action::SnapshotStatus { file, write_out }) => {
            return snapshot_status(&file, write_out == "json");
        }
        None => {}
    }
    if let Some(path) = args.config_file.take() {
        args = from_config_file(&path)?;
    }
    let (config, listen, apiserver) = args.config()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let shutdown = crate::signals::terminated();
    rt.block_on(async move {
        match apiserver {
            Some(api) => {
                let api = InProcess::new(api.config, api.access, &api.listen, &config.tls)?;
                server::run_with(config, listen, api, shutdown).await
            }
            None => server::run(config, listen, shutdown).await,
        }
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `--auto-compaction-mode` and `--auto-compaction-retention` as etcd reads them; `None` when
/// the retention is zero.
fn auto_compaction(mode: &str, retention: &str) -> anyhow::Result<Option<AutoCompaction>> {
    let bad = |why: &str| anyhow::anyhow!("--auto-compaction-retention {retention:?}: {why}");
    if mode == "revision" {
        let keep: i64 = retention
            .parse()
            .map_err(|_| bad("revision mode takes a number of revisions"))?;
        return match keep {
            0 => Ok(None),
            n if n > 0 => Ok(Some(AutoCompaction::Revision(n))),
            _ => Err(bad("must not be negative")),
        };
    }
    let keep = match retention.parse::<u64>() {
        Ok(hours) => Duration::from_secs(hours * 3600),
        Err(_) => skiff_proto::duration::parse(retention).map_err(|e| bad(&e))?,
    };
    Ok((!keep.is_zero()).then_some(AutoCompaction::Periodic(keep)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_compaction_flags_read_as_etcd_reads_them() {
        let periodic = |r| auto_compaction("periodic", r).unwrap();
        assert_eq!(periodic("0"), None);
        assert_eq!(
            periodic("1"),
            Some(AutoCompaction::Periodic(Duration::from_secs(3600)))
        );
        assert_eq!(
            periodic("5m"),
            Some(AutoCompaction::Periodic(Duration::from_secs(300)))
        );
        assert_eq!(
            auto_compaction("revision", "1000").unwrap(),
            Some(AutoCompaction::Revision(1000))
        );
        assert!(auto_compaction("revision", "5m").is_err());
        assert!(auto_compaction("periodic", "soon").is_err());
    }

    #[test]
    fn an_etcd_configuration_file_sets_the_flags_it_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("etcd.yaml");
        std::fs::write(
            &file,
            "name: 'm1'\n\
             data-dir: /var/lib/m1\n\
             listen-client-urls: http://127.0.0.1:2379,http://127.0.0.1:22379\n\
             listen-peer-urls: [http://127.0.0.1:2380]\n\
             initial-cluster: m1=http://127.0.0.1:2380\n\
             heartbeat-interval: 50\n\
             election-timeout: 500\n\
             auto-compaction-retention: '1'\n\
             enable-v2: false\n\
             logger: zap\n",
        )
        .expect("write");
        let a = from_config_file(&file).expect("parses");
        assert_eq!(a.name, "m1");
        assert_eq!(a.data_dir, Some(PathBuf::from("/var/lib/m1")));
        assert_eq!(a.listen_client_urls.len(), 2);
        assert_eq!(a.listen_peer_urls, ["http://127.0.0.1:2380"]);
        assert_eq!((a.heartbeat_interval, a.election_timeout), (50, 500));
        let (config, _, _) = a.config().expect("valid");
        assert_eq!(
            config.auto_compaction,
            Some(AutoCompaction::Periodic(Duration::from_secs(3600)))
        );

        std::fs::write(&file, "heartbeat-interval: soon\n").expect("write");
        let e = from_config_file(&file).expect_err("bad value").to_string();
        assert!(
            e.contains("heartbeat-interval") && e.contains("soon"),
            "{e}"
        );
        std::fs::write(&file, "- a\n").expect("write");
        assert!(from_config_file(&file).is_err());
    }

    /// Under --client-cert-auth the client URLs take certificates from both CAs, so two
    /// different ones would let an etcd client's certificate name a Kubernetes user.
    #[test]
    fn the_kubernetes_ca_is_the_etcd_ca_under_client_cert_auth() {
        use clap::Parser as _;
        let args = |ca: &str| {
            let cli = crate::Cli::try_parse_from([
                "skiff",
                "store",
                "--listen-client-urls",
                "https://127.0.0.1:1",
                "--cert-file",
                "/c/m.pem",
                "--key-file",
                "/c/m-key.pem",
                "--trusted-ca-file",
                "/c/ca.pem",
                "--client-cert-auth",
                "--client-ca-file",
                ca,
                "--apiserver",
            ])
            .expect("parses");
            match cli.command {
                crate::Command::Store(a) => a,
                other => panic!("not `skiff store`: {other:?}"),
            }
        };
        let e = args("/other/ca.pem").config().expect_err("two CAs");
        assert!(e.to_string().contains("different CAs"), "{e}");
        let (_, _, api) = args("/c/ca.pem").config().expect("one CA");
        assert!(api.expect("--apiserver").access.client_certs);
    }

    #[test]
    fn initial_cluster() {
        let c = parse_initial_cluster("a=http://127.0.0.1:1,b=http://127.0.0.1:2").expect("valid");
        assert_eq!(c[1], ("b".to_string(), "http://127.0.0.1:2".to_string()));
        assert!(parse_initial_cluster("a").is_err());
    }

    /// What `skiff-launch` starts is what this command reads: every field it sets parses
    /// back to the same value, and a command with only the required fields parses too.
    #[test]
    fn the_launch_crates_command_line_parses_as_set() {
        use clap::Parser as _;
        use skiff_launch::{ClusterState, StoreCommand};

        let cmd = StoreCommand {
            name: "m0".into(),
            data_dir: "/tmp/m0".into(),
            listen_client_url: "http://127.0.0.1:1".into(),
            listen_peer_url: "http://127.0.0.1:2".into(),
            listen_metrics_url: Some("http://127.0.0.1:3".into()),
            apiserver: true,
            listen_api_url: Some("http://127.0.0.1:5".into()),
            initial_cluster: vec![
                ("m0".into(), "http://127.0.0.1:2".into()),
                ("m1".into(), "http://127.0.0.1:4".into()),
            ],
            initial_cluster_state: ClusterState::Existing,
            heartbeat_interval: Some(50),
            election_timeout: Some(500),
            snapshot_count: Some(50),
            snapshot_catchup_entries: Some(10),
            max_request_bytes: Some(65_536),
            max_txn_ops: Some(16),
            quota_backend_bytes: Some(4_000_000),
            event_ttl: Some(Duration::from_secs(3)),
            lease_checkpoint_interval: Some(Duration::from_secs(2)),
            auto_compaction_retention: Some(Duration::from_secs(300)),
            log: Some("info,openraft=warn".into()),
            corrupt_check: Some(Duration::from_secs(7)),
            bcrypt_cost: Some(5),
            auth_token_ttl: Some(Duration::from_secs(60)),
            tls: Some(skiff_launch::StoreTls {
                cert: "/c/m0.pem".into(),
                key: "/c/m0-key.pem".into(),
                ca: "/c/ca.pem".into(),
            }),
            rbac: true,
            token_auth_file: Some("/c/tokens.csv".into()),
            bootstrap_tokens: true,
            audit_log: Some("/l/audit.log".into()),
            audit_log_maxsize: Some(100),
            audit_log_maxbackup: Some(5),
            kubelet: Some(skiff_launch::ClientCert {
                ca: "/c/ca.pem".into(),
                cert: "/c/kubelet-client.pem".into(),
                key: "/c/kubelet-client-key.pem".into(),
            }),
            service_account_key: Some("/c/service-account-key.pem".into()),
            advertise_address: Some("10.78.0.1:6443".parse().expect("an address")),
            cluster_cidr: Some("10.0.0.0/8".into()),
            node_cidr_mask_size: Some(26),
        };
        let cli = crate::Cli::try_parse_from(std::iter::once("skiff".into()).chain(cmd.args()))
            .expect("the launch crate's argv parses");
        assert_eq!(cli.log.as_deref(), Some("info,openraft=warn"));
        let a = match cli.command {
            crate::Command::Store(a) => a,
            other => panic!("not `skiff store`: {other:?}"),
        };
        assert_eq!(a.name, cmd.name);
        assert_eq!(a.data_dir, Some(cmd.data_dir.clone()));
        assert_eq!(
            a.listen_client_urls,
            std::slice::from_ref(&cmd.listen_client_url)
        );
        assert_eq!(
            a.listen_peer_urls,
            std::slice::from_ref(&cmd.listen_peer_url)
        );
        assert_eq!(
            a.listen_metrics_urls,
            cmd.listen_metrics_url.iter().cloned().collect::<Vec<_>>()
        );
        assert_eq!(
            a.listen_api_urls,
            cmd.listen_api_url.iter().cloned().collect::<Vec<_>>()
        );
        let initial = parse_initial_cluster(a.initial_cluster.as_deref().unwrap_or_default())
            .expect("initial cluster");
        assert_eq!(initial, cmd.initial_cluster);
        assert_eq!(a.initial_cluster_state, "existing");
        assert_eq!(Some(a.heartbeat_interval), cmd.heartbeat_interval);
        assert_eq!(Some(a.election_timeout), cmd.election_timeout);
        assert_eq!(Some(a.snapshot_count), cmd.snapshot_count);
        assert_eq!(
            Some(a.snapshot_catchup_entries),
            cmd.snapshot_catchup_entries
        );
        assert_eq!(Some(a.max_request_bytes), cmd.max_request_bytes);
        assert_eq!(Some(a.max_txn_ops), cmd.max_txn_ops);
        assert_eq!(Some(a.quota_backend_bytes), cmd.quota_backend_bytes);
        assert_eq!(Some(a.api.event_ttl), cmd.event_ttl);
        assert_eq!(a.api.advertise_address, cmd.advertise_address);
        assert_eq!(
            Some(a.lease_checkpoint_interval),
            cmd.lease_checkpoint_interval
        );
        assert_eq!(
            auto_compaction(&a.auto_compaction_mode, &a.auto_compaction_retention).unwrap(),
            Some(AutoCompaction::Periodic(Duration::from_secs(300)))
        );
        assert_eq!(a.experimental_corrupt_check_time, Duration::from_secs(7));
        assert_eq!(Some(a.bcrypt_cost), cmd.bcrypt_cost);
        assert_eq!(a.auth_token_ttl, 60);
        let tls = cmd.tls.as_ref().expect("tls");
        assert_eq!(a.cert_file.as_ref(), Some(&tls.cert));
        assert_eq!(a.key_file.as_ref(), Some(&tls.key));
        assert_eq!(a.trusted_ca_file.as_ref(), Some(&tls.ca));
        assert_eq!(a.peer_cert_file.as_ref(), Some(&tls.cert));
        assert_eq!(a.peer_key_file.as_ref(), Some(&tls.key));
        assert_eq!(a.peer_trusted_ca_file.as_ref(), Some(&tls.ca));
        assert!(a.client_cert_auth && a.peer_client_cert_auth);
        assert!(
            a.apiserver && !a.apiserver_insecure,
            "TLS: no --apiserver-insecure"
        );
        assert_eq!(a.api.client_ca_file.as_ref(), Some(&tls.ca));
        assert_eq!(
            a.api.authorization_mode,
            [
                skiff_apiserver::access::Mode::Node,
                skiff_apiserver::access::Mode::Rbac
            ]
        );
        assert_eq!(a.api.token_auth_file, cmd.token_auth_file);
        assert!(a.api.enable_bootstrap_token_auth);
        assert_eq!(a.api.audit_log_path, cmd.audit_log);
        assert_eq!(Some(a.api.audit_log_maxsize), cmd.audit_log_maxsize);
        assert_eq!(Some(a.api.audit_log_maxbackup), cmd.audit_log_maxbackup);
        assert_eq!(Some(&a.api.cluster_cidr), cmd.cluster_cidr.as_ref());
        assert_eq!(Some(a.api.node_cidr_mask_size), cmd.node_cidr_mask_size);
        let kubelet = cmd.kubelet.as_ref().expect("kubelet");
        assert_eq!(
            a.api.kubelet_certificate_authority.as_ref(),
            Some(&kubelet.ca)
        );
        assert_eq!(
            a.api.kubelet_client_certificate.as_ref(),
            Some(&kubelet.cert)
        );
        assert_eq!(a.api.kubelet_client_key.as_ref(), Some(&kubelet.key));
        assert_eq!(
            a.api.service_account_signing_key_file,
            cmd.service_account_key
        );

        // Unset options stay at the command's defaults.
        let least = StoreCommand {
            name: "m0".into(),
            data_dir: "/tmp/m0".into(),
            listen_client_url: "http://127.0.0.1:1".into(),
            listen_peer_url: "http://127.0.0.1:2".into(),
            ..StoreCommand::default()
        };
        let cli = crate::Cli::try_parse_from(std::iter::once("skiff".into()).chain(least.args()))
            .expect("the least argv parses");
        let crate::Command::Store(a) = cli.command else {
            panic!("not `skiff store`");
        };
        assert_eq!(a.initial_cluster_state, "new");
        assert_eq!(a.heartbeat_interval, 100);
        assert!(a.listen_metrics_urls.is_empty());
        // No API server, no API URL: an etcd.
        assert!(!a.apiserver && a.listen_api_urls.is_empty());
        assert_eq!(a.initial_cluster, None);
    }
}
