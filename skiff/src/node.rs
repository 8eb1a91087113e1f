//! `skiff node`: the node agent. One process runs one node against containerd's CRI, or many
//! simulated nodes (`--runtime sim --count 1000`) sharing one runtime and one connection.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use skiff_launch::RuntimeKind;
use skiff_node::agent::{self, NodeConfig};
use skiff_node::cri::{CriConfig, CriRuntime};
use skiff_node::engine::EngineConfig;
use skiff_node::image;
use skiff_node::runtime::Runtime;
use skiff_node::sim::{SimConfig, SimRuntime};
use skiff_proto::api::{Taint, TaintEffect};
use skiff_proto::client::ClusterClient;
use skiff_proto::quantity::Quantity;
use tokio_util::sync::CancellationToken;

#[derive(Debug, clap::Subcommand)]
enum NodeCommand {
    /// The local images: no registry is reachable, so they are built here and imported.
    #[command(subcommand)]
    Image(ImageCommand),
    /// Print a container's log, read through the agent of the pod's node (like kubectl logs).
    Logs(LogsArgs),
}

#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The pod.
    pod: String,
    #[arg(short, long, default_value = "default")]
    namespace: String,
    /// The container (default: the pod's only one).
    #[arg(short, long, default_value = "")]
    container: String,
    /// The previous instance of a restarted container.
    #[arg(short, long)]
    previous: bool,
    /// Only the last N lines.
    #[arg(long)]
    tail: Option<u64>,
    #[command(flatten)]
    endpoints: crate::config::Endpoints,
}

#[derive(Debug, clap::Subcommand)]
pub enum ImageCommand {
    /// Write `busybox.tar` and `pause.tar` (OCI image layouts of `localhost/skiff/busybox:1`
    /// and `localhost/skiff/pause:1`) built from Debian's busybox-static, and `kubectl.tar`
    /// (`localhost/skiff/kubectl:1`, a client for pods) when a static kubectl is at hand.
    Build {
        /// Directory to write the archives to.
        #[arg(long)]
        out: PathBuf,
        /// The static busybox binary to put in the images.
        #[arg(long, default_value = "/bin/busybox")]
        busybox: PathBuf,
        /// The static kubectl to put in `localhost/skiff/kubectl:1` (default: `kubectl` on
        /// PATH, skipped when there is none or it is dynamically linked).
        #[arg(long)]
        kubectl: Option<PathBuf>,
    },
    /// Import OCI archives into containerd's CRI namespace (`k8s.io`) with `ctr`.
    Import {
        files: Vec<PathBuf>,
        /// containerd's socket.
        #[arg(long, default_value = "/run/containerd/containerd.sock")]
        containerd_socket: String,
    },
}

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<NodeCommand>,
    /// The node's name (with `--count`, the names are `<name-prefix><i>` instead).
    #[arg(long, default_value = "node-1")]
    name: String,
    /// Cluster API endpoints (store members' client addresses), comma-separated.
    #[arg(long, default_value = "127.0.0.1:2379", value_delimiter = ',')]
    endpoints: Vec<String>,
    #[command(flatten)]
    tls: crate::config::TlsArgs,
    /// Which container runtime runs the pods.
    #[arg(long, value_enum, default_value = "cri")]
    runtime: RuntimeKind,
    /// containerd's socket (CRI runtime).
    #[arg(long, default_value = "/run/containerd/containerd.sock")]
    containerd_socket: PathBuf,
    /// Where container logs are written (CRI runtime).
    #[arg(long, default_value = "/var/log/skiff/pods")]
    pod_log_dir: PathBuf,
    /// The sandbox image (CRI runtime); fully named, it must be present.
    #[arg(long, default_value = image::PAUSE)]
    pause_image: String,
    /// How many nodes this process hosts (simulated runtime only).
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// Name prefix of the nodes when `--count` is given: `sim-0`, `sim-1`, …
    #[arg(long, default_value = "sim-")]
    name_prefix: String,
    /// Allocatable CPU (a quantity: `4`, `3500m`); default: the host's CPU count.
    #[arg(long)]
    cpu: Option<String>,
    /// Allocatable memory (a quantity: `8Gi`); default: the host's memory.
    #[arg(long)]
    memory: Option<String>,
    /// Allocatable ephemeral storage (a quantity: `100Gi`); default: the size of the
    /// filesystem that holds the pod logs (`--runtime cri`) or of `/` (simulated nodes).
    #[arg(long)]
    ephemeral_storage: Option<String>,
    /// Most pods the node runs.
    #[arg(long, default_value_t = 110)]
    max_pods: i64,
    /// Node labels: `key=value,key=value`.
    #[arg(long, value_delimiter = ',')]
    labels: Vec<String>,
    /// Node taints: `key=value:Effect` or `key:Effect`, comma-separated.
    #[arg(long, value_delimiter = ',')]
    taints: Vec<String>,
    /// The node's address, reported as InternalIP and as hostIP of its pods.
    #[arg(long, default_value = "127.0.0.1")]
    host_ip: String,
    /// Where the agent serves container logs and exec/attach sessions (the kubelet's
    /// port); port 0 picks a free one [default: the node's address (`--host-ip`), port
    /// 10250]. Plain TCP is served on loopback only: any other address needs
    /// `--tls-cert-file`, `--tls-private-key-file` and `--client-ca-file`.
    #[arg(long)]
    logs_address: Option<String>,
    /// The kubelet's: the certificate the log and session port serves (PEM), valid for the
    /// node's address.
    #[arg(long, env = "SKIFF_NODE_TLS_CERT_FILE", requires_all = ["tls_private_key_file", "client_ca_file"])]
    tls_cert_file: Option<PathBuf>,
    /// The key of `--tls-cert-file`.
    #[arg(
        long,
        env = "SKIFF_NODE_TLS_PRIVATE_KEY_FILE",
        requires = "tls_cert_file"
    )]
    tls_private_key_file: Option<PathBuf>,
    /// The kubelet's: the CA the certificates of the port's callers must chain to (the
    /// cluster's); the API then says whether the certificate's user may read that pod's log
    /// or exec into it (a SubjectAccessReview).
    #[arg(long, env = "SKIFF_NODE_CLIENT_CA_FILE", requires = "tls_cert_file")]
    client_ca_file: Option<PathBuf>,
    /// Write the node's CNI network configuration here once it has a pod CIDR (containerd's
    /// CNI `conf_dir`; the kubelet's `--cni-conf-dir`): a bridge with host-local addresses
    /// from the node's `spec.podCIDR`, and portmap for hostPort. Without it, pods need
    /// `hostNetwork: true` unless something else configures containerd's network.
    #[arg(long)]
    cni_conf_dir: Option<PathBuf>,
    /// Where host-local keeps its address leases (one file per pod address).
    #[arg(long, default_value = "/var/lib/cni/networks")]
    cni_ipam_dir: PathBuf,
    /// The cluster's pod network (the store's `--cluster-cidr`), with `--cni-conf-dir`: pod
    /// traffic within it keeps its pods' addresses (other nodes' pod CIDRs are routed
    /// through their InternalIPs, host-gw style), and only traffic leaving it is
    /// masqueraded. Without it, everything leaving the node's block is masqueraded (the
    /// routes are made all the same).
    #[arg(long)]
    cluster_cidr: Option<String>,
    /// The cluster's DNS domain. With `--cni-conf-dir`, the agent serves cluster DNS
    /// (`<service>.<namespace>.svc.<domain>`) on its bridge address, port 53, in the node's
    /// namespace (`--runtime-netns`, or the host's), and gives pods on the pod network a
    /// resolv.conf pointing there.
    #[arg(long, default_value = skiff_node::dns::DEFAULT_DOMAIN)]
    cluster_domain: String,
    /// How Services reach their endpoints on this node: `iptables` (kube-proxy's iptables
    /// mode, in the node's network namespace) or `none` [default: iptables with `--runtime
    /// cri`, none for simulated nodes].
    #[arg(long, value_parser = ["iptables", "none"])]
    proxy_mode: Option<String>,
    /// containerd's network namespace (`/proc/<pid>/ns/net`, or a file under /run/netns)
    /// when it runs in one of its own: the agent reaches pods (probes) and containerd's
    /// streaming server (exec, attach) there.
    #[arg(long)]
    runtime_netns: Option<PathBuf>,
    /// Join with this bootstrap token (`<id>.<secret>`, from `skiff token create`) instead of
    /// a client certificate: the node asks `--bootstrap-server` for its certificate and
    /// keeps it in `--cert-dir` (the kubelet's TLS bootstrap). Needs `--cacert`.
    #[arg(
        long,
        env = "SKIFF_BOOTSTRAP_TOKEN",
        hide_env_values = true,
        requires_all = ["cacert", "bootstrap_server"],
        conflicts_with = "cert"
    )]
    bootstrap_token: Option<String>,
    /// A member's Kubernetes API (`https://HOST:PORT`, its `--listen-api-urls`), where the
    /// bootstrap token is accepted.
    #[arg(long, env = "SKIFF_BOOTSTRAP_SERVER", requires = "bootstrap_token")]
    bootstrap_server: Option<String>,
    /// Where the node keeps the client certificate it got by joining, and its key; a valid
    /// one there is used at start without asking again.
    #[arg(long, default_value = "/var/lib/skiff/pki")]
    cert_dir: PathBuf,
    /// Serve Prometheus metrics at http://ADDR/metrics and a health check at
    /// http://ADDR/healthz; one endpoint for all the nodes of the process. Off by default.
    #[arg(long)]
    metrics_addr: Option<std::net::SocketAddr>,
    /// How often the Node's heartbeat is written (`10s`, `500ms`).
    #[arg(long, default_value = "10s", value_parser = skiff_proto::duration::parse)]
    heartbeat_interval: Duration,
    /// First CrashLoopBackOff delay (kubelet: 10s).
    #[arg(long, default_value = "10s", value_parser = skiff_proto::duration::parse)]
    backoff_initial: Duration,
    /// CrashLoopBackOff cap (kubelet: 5m).
    #[arg(long, default_value = "5m", value_parser = skiff_proto::duration::parse)]
    backoff_max: Duration,
    /// Simulated runtime: how long starting a sandbox takes.
    #[arg(long, default_value = "5ms", value_parser = skiff_proto::duration::parse)]
    sim_sandbox_latency: Duration,
    /// Simulated runtime: how long starting a container takes.
    #[arg(long, default_value = "5ms", value_parser = skiff_proto::duration::parse)]
    sim_start_latency: Duration,
    /// Do not record events (Pulled, Created, Started, Killing, BackOff, …).
    #[arg(long)]
    no_events: bool,
    /// Where the node keeps its pods' volumes, `<root-dir>/<pod uid>/volumes/…` (the
    /// kubelet's `--root-dir`); with `--count`, one directory per node under it [default:
    /// /var/lib/skiff/node/<name> with `--runtime cri`; for simulated nodes a temporary
    /// directory in /dev/shm (a tmpfs) when it has 1 GiB free, else in $TMPDIR, removed when
    /// the process ends].
    #[arg(long)]
    root_dir: Option<PathBuf>,
    /// How often running pods' configMap, secret, downwardAPI and projected volumes are
    /// brought up to date (a changed ConfigMap or Secret reaches the files within about
    /// twice this).
    #[arg(long, default_value = "15s", value_parser = skiff_proto::duration::parse)]
    volume_resync: Duration,
}

fn parse_labels(items: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    items
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (k, v) = s
                .split_once('=')
                .with_context(|| format!("label {s:?}: expected key=value"))?;
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

fn parse_taints(items: &[String]) -> anyhow::Result<Vec<Taint>> {
    items
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (kv, effect) = s
                .rsplit_once(':')
                .with_context(|| format!("taint {s:?}: expected key=value:Effect"))?;
            let effect = effect
                .parse::<TaintEffect>()
                .map_err(|e| anyhow::anyhow!("taint {s:?}: effect: {e}"))?;
            let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
            Ok(Taint {
                key: key.to_string(),
                value: value.to_string(),
                effect,
                time_added: None,
                other: Default::default(),
            })
        })
        .collect()
}

/// The prefix of simulated nodes' temporary volume directories, followed by the agent's PID.
const SIM_VOLUMES: &str = "skiff-sim-volumes-";

/// The file in a simulated nodes' volume directory that its agent holds locked while it runs.
const SIM_VOLUMES_LOCK: &str = ".agent.lock";

/// A simulated nodes' temporary volume directory, locked for as long as it is held: the lock
/// goes with the process, however it ends, and the directory when this is dropped.
struct SimVolumes {
    _lock: nix::fcntl::Flock<std::fs::File>,
    _dir: tempfile::TempDir,
}

/// Whether the agent that made the volume directory `dir` has gone. Its lock says so when it
/// has one, whatever PID namespace the agent ran in (`/dev/shm` is often shared between
/// containers); an older directory without one goes by its PID.
fn sim_volumes_orphaned(dir: &Path, pid: u32) -> bool {
    use nix::fcntl::{Flock, FlockArg};
    match std::fs::File::open(dir.join(SIM_VOLUMES_LOCK)) {
        Ok(file) => Flock::lock(file, FlockArg::LockExclusiveNonblock).is_ok(),
        Err(_) => !Path::new(&format!("/proc/{pid}")).exists(),
    }
}

/// Removes the simulated nodes' volume directories in `base` of agents that are gone: one
/// killed (SIGKILL, as tests and `skiff up` stop them) never removed its own.
fn sweep_sim_volumes(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(SIM_VOLUMES)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !sim_volumes_orphaned(&entry.path(), pid) {
            continue;
        }
        if let Err(e) = std::fs::remove_dir_all(entry.path()) {
            tracing::debug!(path = %entry.path().display(), error = %e, "removing a gone agent's volumes");
        }
    }
}

/// Where the shared memory file system is mounted on Linux.
const SHM: &str = "/dev/shm";

/// The room a tmpfs must have free to take the simulated nodes' volumes.
const SIM_VOLUMES_ROOM: u64 = 1 << 30;

/// Where simulated nodes keep their pods' files: `/dev/shm` when it is a tmpfs with
/// [`SIM_VOLUMES_ROOM`] free, else the temporary directory. One process of simulated nodes
/// makes and removes directories for thousands of pods at rates no real node sees, and on a
/// disk's file system finding free inodes for them can cost the agent more CPU than the pods
/// themselves: on ext4 without a journal, right after many were freed, most of the agent's
/// time. A real node's secret and token volumes are tmpfs mounts too.
fn sim_volumes_base() -> PathBuf {
    use nix::sys::statfs::{TMPFS_MAGIC, statfs};
    let roomy_tmpfs = statfs(SHM).is_ok_and(|fs| {
        let free = fs
            .blocks_available()
            .saturating_mul(u64::try_from(fs.block_size()).unwrap_or(0));
        fs.filesystem_type() == TMPFS_MAGIC && free >= SIM_VOLUMES_ROOM
    });
    let writable = nix::unistd::access(SHM, nix::unistd::AccessFlags::W_OK).is_ok();
    if roomy_tmpfs && writable {
        PathBuf::from(SHM)
    } else {
        std::env::temp_dir()
    }
}

impl Args {
    /// Where the nodes keep their volumes: `--root-dir`, else for simulated nodes a
    /// temporary directory (held by the returned guard; see [`sim_volumes_base`]), else the
    /// default under /var/lib/skiff.
    fn root_dir(&self) -> anyhow::Result<(PathBuf, Option<SimVolumes>)> {
        if let Some(d) = &self.root_dir {
            return Ok((d.clone(), None));
        }
        if self.runtime == RuntimeKind::Sim {
            let base = sim_volumes_base();
            // Gone agents' directories, wherever they were made.
            sweep_sim_volumes(Path::new(SHM));
            sweep_sim_volumes(&std::env::temp_dir());
            let dir = tempfile::Builder::new()
                .prefix(&format!("{SIM_VOLUMES}{}-", std::process::id()))
                .tempdir_in(&base)
                .context("a temporary directory for the simulated nodes' volumes")?;
            let lock_path = dir.path().join(SIM_VOLUMES_LOCK);
            let file = std::fs::File::create(&lock_path)
                .with_context(|| format!("creating {}", lock_path.display()))?;
            let lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
                .map_err(|(_, e)| anyhow::anyhow!("locking {}: {e}", lock_path.display()))?;
            let path = dir.path().to_owned();
            return Ok((
                path,
                Some(SimVolumes {
                    _lock: lock,
                    _dir: dir,
                }),
            ));
        }
        Ok((
            PathBuf::from(agent::DEFAULT_ROOT_DIR).join(&self.name),
            None,
        ))
    }

    fn nodes(&self, root_dir: &Path) -> anyhow::Result<Vec<NodeConfig>> {
        if self.count > 1 && self.runtime != RuntimeKind::Sim {
            bail!("--count needs --runtime sim: one containerd serves one node");
        }
        let quantity = |flag: &str, v: &str| {
            Quantity::parse(v).map_err(|e| anyhow::anyhow!("--{flag} {v:?}: {e}"))
        };
        let mut base = NodeConfig::from_host(&self.name);
        if let Some(c) = &self.cpu {
            base.cpu = quantity("cpu", c)?;
        }
        if let Some(m) = &self.memory {
            base.memory = quantity("memory", m)?;
        }
        if let Some(e) = &self.ephemeral_storage {
            base.ephemeral_storage = quantity("ephemeral-storage", e)?;
        } else if self.runtime == RuntimeKind::Cri
            && let Some(bytes) = agent::filesystem_bytes(&self.pod_log_dir)
        {
            base.ephemeral_storage = Quantity::from_bytes(bytes);
        }
        base.max_pods = self.max_pods;
        base.labels = parse_labels(&self.labels)?;
        base.taints = parse_taints(&self.taints)?;
        base.host_ip = self.host_ip.clone();
        base.heartbeat = self.heartbeat_interval;
        base.events = !self.no_events;
        // Pods on the pod network get the node's cluster DNS.
        base.dns = self
            .cni_conf_dir
            .as_ref()
            .map(|_| (self.cluster_domain.clone(), self.runtime_netns.clone()));
        base.cni = self
            .cni_conf_dir
            .clone()
            .map(|conf_dir| skiff_node::cni::CniConfig {
                conf_dir,
                ipam_dir: self.cni_ipam_dir.clone(),
                cluster_cidr: self.cluster_cidr.clone(),
                netns: self.runtime_netns.clone(),
            });
        base.engine = EngineConfig {
            backoff_initial: self.backoff_initial,
            backoff_max: self.backoff_max,
            ..EngineConfig::default()
        };
        base.root_dir = root_dir.to_owned();
        // A real node's secrets stay in memory; simulated nodes may not be root.
        base.volume_tmpfs = self.runtime == RuntimeKind::Cri;
        base.volume_resync = self.volume_resync;
        if self.count <= 1 {
            return Ok(vec![base]);
        }
        Ok((0..self.count)
            .map(|i| {
                let name = format!("{}{i}", self.name_prefix);
                NodeConfig {
                    root_dir: root_dir.join(&name),
                    name,
                    ..base.clone()
                }
            })
            .collect())
    }

    /// The log and session port's TLS, when its files are given.
    fn logs_tls(&self) -> anyhow::Result<Option<agent::LoadedPortTls>> {
        let (Some(cert), Some(key), Some(client_ca)) = (
            &self.tls_cert_file,
            &self.tls_private_key_file,
            &self.client_ca_file,
        ) else {
            return Ok(None);
        };
        let files = agent::PortTls {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: client_ca.clone(),
        };
        Ok(Some(files.load().context(
            "the log and session port's TLS (--tls-cert-file, --tls-private-key-file, --client-ca-file)",
        )?))
    }

    async fn runtime(&self) -> anyhow::Result<Arc<dyn Runtime>> {
        Ok(match self.runtime {
            RuntimeKind::Sim => Arc::new(SimRuntime::new(SimConfig {
                sandbox_latency: self.sim_sandbox_latency,
                start_latency: self.sim_start_latency,
            })),
            RuntimeKind::Cri => Arc::new(
                CriRuntime::connect(CriConfig {
                    socket: self.containerd_socket.clone(),
                    pause_image: self.pause_image.clone(),
                    log_dir: self.pod_log_dir.clone(),
                    netns: self.runtime_netns.clone(),
                    ..CriConfig::default()
                })
                .await
                .context("containerd (--containerd-socket)")?,
            ),
        })
    }
}

async fn logs(a: LogsArgs) -> anyhow::Result<()> {
    use skiff_node::logs::pb;
    use skiff_proto::api::{Kind, Object};
    use skiff_proto::logs::{ENDPOINT_ANNOTATION, connect_agent, text_of};
    let store = a.endpoints.resolve()?;
    let api = store.connect()?;
    let Some(Object::Pod(pod)) = api.get(Kind::Pod, &a.namespace, &a.pod).await? else {
        bail!("pods \"{}\" not found in namespace {}", a.pod, a.namespace);
    };
    let node = pod.spec.node_name.clone();
    if node.is_empty() {
        bail!("pod {}/{} is not bound to a node yet", a.namespace, a.pod);
    }
    let Some(Object::Node(n)) = api.get(Kind::Node, "", &node).await? else {
        bail!("nodes \"{node}\" not found");
    };
    let endpoint = n
        .metadata
        .annotations
        .get(ENDPOINT_ANNOTATION)
        .with_context(|| format!("node {node} publishes no log endpoint"))?;
    let tls = store
        .tls
        .as_ref()
        .map(|t| t.config())
        .transpose()
        .context("the TLS files (--cacert, --cert, --key)")?;
    let channel = connect_agent(endpoint, tls.as_ref(), Duration::from_secs(10))
        .await
        .map_err(|e| anyhow::anyhow!("the agent of node {node} at {endpoint}: {e}"))?;
    let mut client = pb::logs_client::LogsClient::new(channel);
    let r = client
        .container_log(pb::ContainerLogRequest {
            node,
            namespace: a.namespace,
            pod: a.pod,
            container: a.container,
            previous: a.previous,
            tail_lines: a.tail.unwrap_or(0),
        })
        .await
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?;
    print!("{}", text_of(&r.into_inner().data));
    Ok(())
}

fn images(cmd: ImageCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ImageCommand::Build {
            out,
            busybox,
            kubectl,
        } => {
            let bin = std::fs::read(&busybox).with_context(|| {
                format!(
                    "{}: a static busybox is needed (Debian: busybox-static)",
                    busybox.display()
                )
            })?;
            std::fs::create_dir_all(&out).with_context(|| format!("{}", out.display()))?;
            for (file, data, name) in [
                ("busybox.tar", image::busybox_archive(&bin), image::BUSYBOX),
                ("pause.tar", image::pause_archive(&bin), image::PAUSE),
            ] {
                let path = out.join(file);
                std::fs::write(&path, data).with_context(|| format!("{}", path.display()))?;
                println!("{} ({name})", path.display());
            }
            match kubectl_binary(kubectl)? {
                Ok((from, data)) => {
                    let path = out.join("kubectl.tar");
                    std::fs::write(&path, image::kubectl_archive(&bin, &data))
                        .with_context(|| format!("{}", path.display()))?;
                    println!(
                        "{} ({}, kubectl from {})",
                        path.display(),
                        image::KUBECTL,
                        from.display()
                    );
                }
                Err(why) => println!("no {}: {why}", image::KUBECTL),
            }
        }
        ImageCommand::Import {
            files,
            containerd_socket,
        } => {
            for f in files {
                let status = std::process::Command::new("ctr")
                    .args(["--address", &containerd_socket, "-n", "k8s.io"])
                    .args(["images", "import", "--all-platforms"])
                    .arg(&f)
                    .status()
                    .context("running ctr (Debian: containerd)")?;
                if !status.success() {
                    bail!("importing {} failed: ctr {status}", f.display());
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The kubectl binary for the client image: the one named (which must be static), else
/// `kubectl` on PATH when it is static; `Err` says why there is none.
fn kubectl_binary(named: Option<PathBuf>) -> anyhow::Result<Result<(PathBuf, Vec<u8>), String>> {
    let (path, asked) = match named {
        Some(p) => (p, true),
        None => {
            let found = std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join("kubectl"))
                    .find(|p| p.is_file())
            });
            match found {
                Some(p) => (p, false),
                None => return Ok(Err("no kubectl on PATH".into())),
            }
        }
    };
    let data = std::fs::read(&path).with_context(|| format!("{}", path.display()))?;
    if image::is_static_executable(&data) {
        return Ok(Ok((path, data)));
    }
    let why = format!(
        "{} is not a static executable (an image holds no libraries for it)",
        path.display()
    );
    if asked {
        bail!("{why}");
    }
    Ok(Err(why))
}

/// `skiff logs` (also `skiff node logs`).
pub fn logs_command(a: LogsArgs) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(logs(a))?;
    Ok(ExitCode::SUCCESS)
}

/// `skiff image` (also `skiff node image`).
pub fn image_command(cmd: ImageCommand) -> anyhow::Result<ExitCode> {
    images(cmd)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match args.command {
        Some(NodeCommand::Image(cmd)) => return images(cmd),
        Some(NodeCommand::Logs(a)) => {
            rt.block_on(logs(a))?;
            return Ok(ExitCode::SUCCESS);
        }
        None => {}
    }
    // Held to the end: a temporary root goes when the process does.
    let (root_dir, temporary_root) = args.root_dir()?;
    let mut nodes = args.nodes(&root_dir)?;
    let ran = rt.block_on(async move {
        let runtime = args.runtime().await?;
        let address = args
            .logs_address
            .clone()
            .unwrap_or_else(|| format!("{}:10250", args.host_ip));
        let listener = tokio::net::TcpListener::bind(&address)
            .await
            .with_context(|| format!("--logs-address {address}"))?;
        let bound = listener.local_addr().context("log service address")?;
        let logs_tls = args.logs_tls()?;
        if logs_tls.is_none() && !bound.ip().is_loopback() {
            bail!(
                "the log and session port at {bound} would serve anyone on the network: give it \
                 --tls-cert-file, --tls-private-key-file and --client-ca-file, or a loopback \
                 --logs-address"
            );
        }
        // An unspecified bind address is reached at the node's own address.
        let advertised = if bound.ip().is_unspecified() {
            format!("{}:{}", args.host_ip, bound.port())
        } else {
            bound.to_string()
        };
        // `https://` tells the store and the CLI to connect with TLS; plain is the bare address.
        let advertised = if logs_tls.is_some() {
            format!("https://{advertised}")
        } else {
            advertised
        };
        for n in &mut nodes {
            n.logs_endpoint = Some(advertised.clone());
        }
        let metrics = match args.metrics_addr {
            Some(addr) => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("--metrics-addr {addr}"))?,
            ),
            None => None,
        };
        let tls = match (&args.bootstrap_token, args.tls.client_tls()) {
            (Some(token), Some(tls)) => {
                if nodes.len() > 1 {
                    bail!("--bootstrap-token joins one node: it cannot serve --count nodes");
                }
                let bootstrap = skiff_node::bootstrap::Bootstrap {
                    token: token.clone(),
                    server: args.bootstrap_server.clone().unwrap_or_default(),
                    cert_dir: args.cert_dir.clone(),
                };
                let joined = skiff_node::bootstrap::client_tls(&tls.ca, &args.name, &bootstrap);
                tokio::select! {
                    tls = joined => Some(tls.context("joining with --bootstrap-token")?),
                    () = crate::signals::terminated() => return Ok(()),
                }
            }
            (_, tls) => tls,
        };
        let client = ClusterClient::connect_with(&args.endpoints, tls.as_ref())
            .context("cluster API endpoints")?;
        let cancel = CancellationToken::new();
        let stop = cancel.clone();
        tokio::spawn(async move {
            crate::signals::terminated().await;
            stop.cancel();
        });
        let counters = skiff_node::metrics::AgentMetrics::default();
        let proxy = match args.proxy_mode.as_deref() {
            Some("iptables") => true,
            Some(_) => false,
            None => args.runtime == RuntimeKind::Cri,
        };
        if proxy {
            let (client, cancel) = (client.clone(), cancel.clone());
            let config = skiff_node::proxy::ProxyConfig {
                netns: args.runtime_netns.clone(),
                metrics: counters.proxy.clone(),
                observer: None,
            };
            skiff_node::supervise("the Service proxy", cancel.clone(), move || {
                skiff_node::proxy::run(client.clone(), config.clone(), cancel.clone())
            });
        }
        tracing::info!(nodes = nodes.len(), "node agent starting");
        let listeners = agent::Listeners {
            logs: Some(listener),
            logs_tls,
            metrics,
        };
        agent::run(client, runtime, nodes, listeners, counters, cancel)
            .await
            .context("node agent")
    });
    // The runtime waits for the volumes' last file system jobs, which must not make
    // directories again in a temporary root already removed.
    drop(rt);
    drop(temporary_root);
    ran?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The directories of agents that are gone go; a live agent's, and anything else, stay.
    #[test]
    fn sim_volumes_of_gone_agents_are_swept() {
        let base = tempfile::tempdir().expect("tempdir");
        // Above any PID_MAX the kernel allows (2^22): never a live process.
        let gone = base.path().join(format!("{SIM_VOLUMES}4194305-abc"));
        let live = base
            .path()
            .join(format!("{SIM_VOLUMES}{}-abc", std::process::id()));
        let other = base.path().join(format!("{SIM_VOLUMES}xyz"));
        for d in [&gone, &live, &other] {
            std::fs::create_dir_all(d.join("n1")).expect("mkdir");
        }
        sweep_sim_volumes(base.path());
        assert!(!gone.exists());
        assert!(live.exists() && other.exists());
    }

    /// A directory's lock says whether its agent lives, whatever its PID reads as here: one
    /// held (an agent in another PID namespace) stays, one free (its agent gone, its PID
    /// since reused) goes.
    #[test]
    fn sim_volumes_are_judged_by_their_lock() {
        use nix::fcntl::{Flock, FlockArg};
        let base = tempfile::tempdir().expect("tempdir");
        let held = base.path().join(format!("{SIM_VOLUMES}4194305-abc"));
        let free = base
            .path()
            .join(format!("{SIM_VOLUMES}{}-def", std::process::id()));
        for d in [&held, &free] {
            std::fs::create_dir_all(d).expect("mkdir");
            std::fs::File::create(d.join(SIM_VOLUMES_LOCK)).expect("lock file");
        }
        let file = std::fs::File::open(held.join(SIM_VOLUMES_LOCK)).expect("open");
        let _lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).expect("lock");
        sweep_sim_volumes(base.path());
        assert!(held.exists(), "a live agent's directory stays");
        assert!(!free.exists(), "a gone agent's directory goes");
    }

    #[test]
    fn flags_parse() {
        let t = parse_taints(&["dedicated=db:NoExecute".into(), "gpu:NoSchedule".into()])
            .expect("taints");
        assert_eq!(
            (t[0].key.as_str(), t[0].value.as_str()),
            ("dedicated", "db")
        );
        assert_eq!(
            (t[1].key.as_str(), t[1].effect),
            ("gpu", TaintEffect::NoSchedule)
        );
        assert!(parse_taints(&["x:Sometimes".into()]).is_err());
        let l = parse_labels(&["zone=a".into()]).expect("labels");
        assert_eq!(l["zone"], "a");
    }

    /// What `skiff-launch` starts is what this command reads: every field it sets parses
    /// back to the same value.
    #[test]
    fn the_launch_crates_command_line_parses_as_set() {
        use clap::Parser as _;
        use skiff_launch::NodeCommand;

        let parse = |cmd: &NodeCommand| {
            let cli = crate::Cli::try_parse_from(std::iter::once("skiff".into()).chain(cmd.args()))
                .expect("the launch crate's argv parses");
            match cli.command {
                crate::Command::Node(a) => (cli.log, *a),
                other => panic!("not `skiff node`: {other:?}"),
            }
        };
        let sim = NodeCommand {
            name: Some("solo".into()),
            count: Some(3),
            name_prefix: Some("sim-".into()),
            cpu: Some("4".into()),
            memory: Some("8Gi".into()),
            max_pods: Some(200),
            labels: vec!["kubernetes.io/os=linux".into(), "zone=a".into()],
            logs_address: Some("127.0.0.1:0".into()),
            serving: Some(skiff_launch::ServingCert {
                cert: "/c/agents.pem".into(),
                key: "/c/agents-key.pem".into(),
                client_ca: "/c/ca.pem".into(),
            }),
            metrics_addr: Some(([127, 0, 0, 1], 9100).into()),
            heartbeat_interval: Some(Duration::from_millis(1500)),
            backoff_initial: Some(Duration::from_secs(1)),
            log: Some("info".into()),
            ..NodeCommand::new(RuntimeKind::Sim, vec!["127.0.0.1:1".into()])
        };
        let (log, a) = parse(&sim);
        assert_eq!(log.as_deref(), Some("info"));
        assert!(a.command.is_none());
        assert_eq!(a.endpoints, sim.endpoints);
        assert_eq!(a.runtime, RuntimeKind::Sim);
        assert_eq!(Some(a.name), sim.name);
        assert_eq!(Some(a.count), sim.count);
        assert_eq!(Some(a.name_prefix), sim.name_prefix);
        assert_eq!(a.cpu, sim.cpu);
        assert_eq!(a.memory, sim.memory);
        assert_eq!(Some(a.max_pods), sim.max_pods);
        assert_eq!(a.labels, sim.labels);
        assert_eq!(a.logs_address, sim.logs_address);
        let serving = sim.serving.as_ref().expect("serving");
        assert_eq!(a.tls_cert_file.as_ref(), Some(&serving.cert));
        assert_eq!(a.tls_private_key_file.as_ref(), Some(&serving.key));
        assert_eq!(a.client_ca_file.as_ref(), Some(&serving.client_ca));
        assert_eq!(a.metrics_addr, sim.metrics_addr);
        assert_eq!(Some(a.heartbeat_interval), sim.heartbeat_interval);
        assert_eq!(Some(a.backoff_initial), sim.backoff_initial);

        let cri = NodeCommand {
            name: Some("c1".into()),
            containerd_socket: Some("/tmp/c/containerd.sock".into()),
            pod_log_dir: Some("/tmp/c/pods".into()),
            host_ip: Some("10.78.0.11".into()),
            cluster_cidr: Some("10.244.0.0/16".into()),
            ..NodeCommand::new(RuntimeKind::Cri, vec!["127.0.0.1:1".into()])
        };
        let (_, a) = parse(&cri);
        assert_eq!(a.runtime, RuntimeKind::Cri);
        assert_eq!(Some(a.host_ip), cri.host_ip);
        assert_eq!(a.cluster_cidr, cri.cluster_cidr);
        assert_eq!(Some(a.containerd_socket), cri.containerd_socket);
        assert_eq!(Some(a.pod_log_dir), cri.pod_log_dir);
    }
}
