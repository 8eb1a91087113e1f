//! `skiff up`: a whole local cluster from one command. Three store members, the scheduler, the
//! controller manager and the node agents (simulated, or one node on a containerd of its own) run as child
//! processes of this one, with their logs in `<data-dir>/logs`; the client configuration the
//! CLI reads is written to `~/.skiff/config` (or `$SKIFF_CONFIG`), and a `skiff` context for kubectl
//! is merged into `~/.kube/config` (or the first file of `$KUBECONFIG`).
//!
//! ```text
//!  skiff up ─┬─ store a ─┐
//!            ├─ store b ─┼─ quorum (etcd v3 API + cluster API on every member)
//!            ├─ store c ─┘
//!            ├─ scheduler
//!            ├─ controller manager (Deployments, ReplicaSets)
//!            ├─ node agents (sim: one process, N nodes | cri: per node, containerd + an agent)
//!            └─ supervises: a member that dies is started again on its data directory
//! ```
//!
//! Unless `--insecure`, the cluster is secured as a production one is: a CA and a
//! certificate for every member and component in `<data-dir>/certs` (keys readable by
//! their owner only), TLS on every member's client, peer and Kubernetes API URLs, each
//! component presenting the certificate that names it (`system:kube-scheduler`,
//! `system:kube-controller-manager`, a node in `system:nodes`), and RBAC deciding what each
//! may do; the CLI and kubectl are given an admin's certificate (`system:masters`).
//!
//! Ctrl-C (or SIGTERM) stops the agents, then the controller manager and the scheduler, then
//! the members, each with
//! SIGTERM and SIGKILL after a deadline. Children die with this process even when it is
//! killed (`PR_SET_PDEATHSIG`), so nothing is left behind. A second `up` on the same
//! directory resumes the same cluster (same ports, same data); a lock on the directory keeps
//! two from running at once.
//!
//! | module | what lives there |
//! |---|---|
//! | [`kubeconfig`] | the `skiff` context merged into kubectl's configuration |
//! | [`layout`] | the data directory, its lock, the ports, `cluster.json` |
//! | [`supervisor`] | the children: start, restart of members and leaders, ordered shutdown |
//!
//! The children are started through `skiff-launch` (typed command lines, one child handle),
//! as is the cluster's own containerd for `--runtime cri`.

mod kubeconfig;
mod layout;
mod supervisor;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use skiff_launch::{
    ApiServerCommand, Containerd, ControllerManagerCommand, Launch, NodeCommand, NodeNetwork,
    RuntimeKind, SchedulerCommand, StoreCommand, StoreTls,
};
use skiff_proto::api::{Kind, Object};
use skiff_proto::client::{ClusterClient, ListParams};

use crate::config::{self, ClientConfig};
use layout::Layout;
pub(crate) use layout::kubernetes_api;
pub use supervisor::{Cluster, wait_for};

const MEMBERS: [&str; 3] = ["a", "b", "c"];
/// The most real nodes (`--runtime cri`) one `up` runs.
const MAX_REAL_NODES: usize = 30;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where data, logs and the cluster's settings live [default: ~/.skiff/up].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Nodes to run: simulated ones in one process, or with `--runtime cri` real ones, each an
    /// agent with a containerd of its own in a network namespace of its own, on a link they
    /// share (at most 30).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// The container runtime of the nodes.
    #[arg(long, value_enum, default_value = "sim")]
    runtime: RuntimeKind,
    /// First port: member i listens on base+10i (clients), +1 (peers), +2 (metrics), +3 (the
    /// Kubernetes API); the scheduler's metrics are on base+30, the agents' log service on
    /// base+31, their metrics on base+32 and the controller manager's on base+33. A resumed cluster keeps the ports it was created with [default:
    /// 2379, or the next free range 100 ports up].
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
    /// Plain TCP and no authorization (everything allowed), as before security: for
    /// benchmarks that compare against an unsecured etcd. Fixed when the cluster is created.
    #[arg(long)]
    insecure: bool,
    /// How long an event lives (kube-apiserver's `--event-ttl`): the members hold every event
    /// of this window, so under steady churn their memory and database grow for this long
    /// before they level off.
    #[arg(long, default_value = "1h", value_parser = skiff_proto::duration::parse)]
    event_ttl: Duration,
    /// The kubeconfig to merge the `skiff` context into [default: the first file of
    /// $KUBECONFIG, else ~/.kube/config].
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Run the cluster on this etcd (its client URLs, comma-separated) instead of three store
    /// members: three `skiff apiserver` processes over it, then everything else as usual.
    /// Fixed when the cluster is created.
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// The CA of the etcd's certificates (`https://` etcd servers).
    #[arg(long, requires = "etcd_servers")]
    etcd_cafile: Option<PathBuf>,
    /// The client certificate presented to the etcd.
    #[arg(long, requires_all = ["etcd_servers", "etcd_keyfile"])]
    etcd_certfile: Option<PathBuf>,
    /// Its key.
    #[arg(long, requires_all = ["etcd_servers", "etcd_certfile"])]
    etcd_keyfile: Option<PathBuf>,
    /// Where in the etcd the cluster keeps its objects, so several clusters can share one
    /// etcd (kube-apiserver's flag; see `skiff apiserver --help`) [default: /registry].
    #[arg(long, requires = "etcd_servers")]
    etcd_prefix: Option<String>,
}

/// What runs on the cluster `up` started, once it is ready (`skiff bench soak`, `--demo`);
/// the cluster stops after it.
pub(crate) type Workload<'a> =
    Box<dyn FnOnce(&tokio::runtime::Runtime, &mut Cluster) -> Result<ExitCode> + 'a>;

impl Args {
    /// The manifests of the demo when `--demo` asks for it. `up` does not run the demo itself:
    /// whoever starts it hands the demo over as the workload.
    pub(crate) fn demo_dir(&self) -> Option<&Path> {
        self.demo.then_some(self.demo_dir.as_path())
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    run_then(args, None)
}

/// [`run`], then `workload` instead of serving until Ctrl-C.
pub(crate) fn run_then(args: Args, workload: Option<Workload<'_>>) -> Result<ExitCode> {
    let started = Instant::now();
    check(&args)?;
    let (dir, _lock) = open_dir(&args)?;
    let etcd = (!args.etcd_servers.is_empty()).then(|| layout::Etcd {
        servers: args.etcd_servers.clone(),
        ca: args.etcd_cafile.clone(),
        cert: args.etcd_certfile.clone(),
        key: args.etcd_keyfile.clone(),
        prefix: args.etcd_prefix.clone(),
    });
    let (layout, resumed) = layout::load_layout(&dir, args.base_port, !args.insecure, etcd)?;
    let agents = real_node_names(&args).len();
    let busy: Vec<u16> = layout
        .ports()
        .into_iter()
        .chain((1..agents).flat_map(|i| [layout.agent_logs(i), layout.agent_metrics(i)]))
        .filter(|p| !layout::free(*p))
        .collect();
    if !busy.is_empty() {
        bail!(
            "port(s) {busy:?} on 127.0.0.1 are in use; is another cluster running? (a new cluster can take --base-port)"
        );
    }
    if !resumed {
        layout::save(&dir, &layout)?;
    }
    if layout.tls {
        // The members serve pods too, through the `kubernetes` Service (its cluster IP, the
        // range's first, and its names) and the relay on the real nodes' link.
        let hosts: Vec<String> = [
            "127.0.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "10.96.0.1",
        ]
        .into_iter()
        .map(str::to_owned)
        .chain([NodeNetwork::switch_ip().to_string()])
        .collect();
        // The members' certificates, and the one the node agents' port serves.
        let servers: Vec<&str> = MEMBERS.iter().copied().chain([AGENTS]).collect();
        let nodes: Vec<(String, String)> = real_node_names(&args)
            .into_iter()
            .map(|n| {
                let user = format!("{}{n}", skiff_proto::api::node::NODE_USER_PREFIX);
                (n, user)
            })
            .collect();
        let mut clients = identities(&args);
        clients.extend(
            nodes
                .iter()
                .map(|(file, user)| crate::certs::ClientIdentity {
                    file,
                    user,
                    group: Some(skiff_apiserver::access::bootstrap::NODES),
                }),
        );
        crate::certs::ensure(&dir.join(CERTS), &servers, &hosts, &clients)?;
        crate::certs::ensure_service_account_key(&dir.join(CERTS))?;
    }
    let exe = std::env::current_exe().context("finding the skiff binary")?;
    let exe = exe.to_string_lossy().to_string();
    let mut cluster = Cluster::new(dir.clone(), layout.clone());

    match &layout.etcd {
        Some(etcd) => {
            println!(
                "{} three API servers on etcd {} in {}",
                if resumed { "resuming" } else { "starting" },
                etcd.servers.join(","),
                dir.display()
            );
            start_apiservers(&mut cluster, &exe, etcd, &args)?;
        }
        None => {
            println!(
                "{} a three-member store quorum in {}",
                if resumed { "resuming" } else { "starting" },
                dir.display()
            );
            start_members(&mut cluster, &exe, &args)?;
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // Clients spawn their connection tasks on the runtime they are made in.
    let _guard = rt.enter();
    let endpoints = cluster.endpoints();
    let api = ClusterClient::connect_with(&endpoints, cluster.client_tls().as_ref())?;
    rt.block_on(wait_for(
        &mut cluster,
        Duration::from_secs(60),
        if layout.etcd.is_some() {
            "the API servers"
        } else {
            "the store quorum"
        },
        || async {
            api.list(Kind::Namespace, &ListParams::default())
                .await
                .is_ok()
        },
    ))?;
    let quorum_at = started.elapsed();
    if layout.tls {
        // The members create the bootstrap roles as they start; the components need theirs.
        rt.block_on(wait_for(
            &mut cluster,
            Duration::from_secs(60),
            "the cluster's bootstrap roles",
            || async {
                let last = skiff_apiserver::access::bootstrap::cluster_role_bindings()
                    .pop()
                    .map(|b| b.metadata.name)
                    .unwrap_or_default();
                matches!(
                    api.get(Kind::ClusterRoleBinding, "", &last).await,
                    Ok(Some(_))
                )
            },
        ))?;
    }

    if layout.tls && args.nodes > 1 {
        rt.block_on(wait_for(
            &mut cluster,
            Duration::from_secs(60),
            "the simulated nodes' binding",
            || grant_simulated_nodes(&api),
        ))?;
    }
    start_scheduler(&mut cluster, &exe)?;
    start_controller_manager(&mut cluster, &exe)?;
    let names = start_nodes(&mut cluster, &exe, &args)?;
    rt.block_on(wait_for(
        &mut cluster,
        Duration::from_secs(60),
        "the nodes to be Ready",
        || nodes_ready(&api, &names),
    ))?;
    let ready_at = started.elapsed();

    let config_path = config::path();
    let previous = ClientConfig::load(&config_path).ok().flatten();
    let client_config = ClientConfig {
        endpoints: endpoints.clone(),
        data_dir: Some(dir.clone()),
        tls: cluster.client_tls(),
    };
    client_config.save(&config_path)?;
    let kubeconfig_path = args.kubeconfig.clone().unwrap_or_else(kubeconfig::path);
    let kube_server = layout.api_url(0);
    let credentials = cluster.client_tls().map(|t| kubeconfig::Credentials {
        ca: t.ca,
        cert: t.cert.unwrap_or_default(),
        key: t.key.unwrap_or_default(),
    });
    let kube = kubeconfig::write(&kubeconfig_path, &kube_server, credentials.as_ref())?;
    println!(
        "ready in {:.1} s (quorum in {:.1} s): {}, the scheduler, the controller manager, {} {} node(s)",
        ready_at.as_secs_f64(),
        quorum_at.as_secs_f64(),
        if layout.etcd.is_some() {
            "3 API servers on etcd"
        } else {
            "3 store members"
        },
        names.len(),
        match args.runtime {
            RuntimeKind::Sim => "simulated",
            RuntimeKind::Cri => "containerd",
        }
    );
    print_endpoints(
        &layout,
        &dir,
        &config_path,
        previous.is_some_and(|p| p != client_config),
    );
    for (i, (name, c)) in names.iter().zip(&cluster.containerds).enumerate() {
        println!(
            "  {name:<22}  {} on the nodes' link; its network: nsenter --net={}",
            skiff_launch::network::node_ip(i),
            c.netns().display()
        );
    }
    if layout.tls {
        println!(
            "  security: TLS everywhere, RBAC; certificates in {} (admin: system:masters)",
            dir.join(CERTS).display()
        );
    } else {
        println!("  security: none (--insecure): plain TCP, every request allowed");
    }
    println!(
        "  kubectl: context \"{}\" in {} is now current{}",
        kubeconfig::NAME,
        kubeconfig_path.display(),
        kube.previous_context
            .map(|c| format!(" (was \"{c}\": `kubectl config use-context {c}` switches back)"))
            .unwrap_or_default()
    );
    println!("  kubectl get nodes; kubectl apply -f examples/pod.yaml; kubectl get pods -o wide");
    println!();

    if let Some(workload) = workload {
        let result = workload(&rt, &mut cluster);
        if !cluster.is_stopped() {
            println!("==> stopping the cluster");
            cluster.stop();
        }
        return result;
    }
    println!(
        "Ctrl-C stops the cluster; `skiff up` on {} resumes it.",
        dir.display()
    );
    let stop = rt.block_on(supervise_until_signal(&mut cluster))?;
    println!("stopping the cluster");
    cluster.stop();
    println!("stopped; data and logs kept in {}", dir.display());
    Ok(if stop {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Where a secured cluster's certificates live, under its directory.
const CERTS: &str = "certs";
/// The CLI's and kubectl's certificate file.
const ADMIN: &str = "admin";
/// The serving certificate of the node agents' log and session port.
const AGENTS: &str = "agents";
/// The certificate the members present to node agents.
const KUBELET_CLIENT: &str = "kubelet-client";
/// The user (and group) of a process hosting many simulated nodes.
const SIMULATED_NODES: &str = "skiff:simulated-nodes";

/// Binds `system:node`'s rules (every node's) to the process of the simulated nodes: the
/// node authorizer confines a node agent to one node, and that process is many. Whether it
/// is in place (made now, or by an earlier `up`); a member still starting answers no.
async fn grant_simulated_nodes(api: &ClusterClient) -> bool {
    let binding = serde_json::from_value::<skiff_proto::api::rbac::ClusterRoleBinding>(
        serde_json::json!({
            "metadata": {"name": SIMULATED_NODES},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": SIMULATED_NODES}],
        }),
    )
    .expect("invariant: the binding's JSON is a ClusterRoleBinding");
    match api.create(&Object::ClusterRoleBinding(binding)).await {
        Ok(_) => true,
        Err(e) => e.code() == Some(skiff_proto::client::Code::AlreadyExists),
    }
}

/// The real nodes `--runtime cri` runs, one agent each (none for simulated nodes).
fn real_node_names(args: &Args) -> Vec<String> {
    match args.runtime {
        RuntimeKind::Cri => (0..args.nodes).map(|i| format!("node-{i}")).collect(),
        RuntimeKind::Sim => Vec::new(),
    }
}

/// The client certificates of a secured cluster: the admin, the scheduler, the controller
/// manager and the simulated nodes' process (a lone node's names it, the simulated nodes of
/// one process share the process's). Each real node has its own (the file is its name),
/// made by `run`.
fn identities(args: &Args) -> Vec<crate::certs::ClientIdentity<'static>> {
    use crate::certs::ClientIdentity;
    use skiff_apiserver::access::bootstrap::{CONTROLLER_MANAGER, NODES, SCHEDULER};
    // A lone node is a node agent like any; many simulated nodes in one process are one
    // client, which `up` grants every node's rules (see `grant_simulated_nodes`).
    let (nodes_user, nodes_group) = if args.nodes == 1 {
        ("system:node:node-0", NODES)
    } else {
        (SIMULATED_NODES, SIMULATED_NODES)
    };
    vec![
        ClientIdentity {
            file: ADMIN,
            user: "admin",
            group: Some(skiff_apiserver::access::MASTERS),
        },
        ClientIdentity {
            file: "scheduler",
            user: SCHEDULER,
            group: None,
        },
        ClientIdentity {
            file: "controller-manager",
            user: CONTROLLER_MANAGER,
            group: None,
        },
        ClientIdentity {
            file: "nodes",
            user: nodes_user,
            group: Some(nodes_group),
        },
        ClientIdentity {
            file: KUBELET_CLIENT,
            user: skiff_apiserver::access::bootstrap::KUBELET_CLIENT,
            group: None,
        },
    ]
}

impl Cluster {
    /// A component's TLS to the store: the CA and the certificate `file` (none when the
    /// cluster is not secured).
    fn client_cert(&self, file: &str) -> Option<skiff_launch::ClientCert> {
        self.layout.tls.then(|| {
            let dir = self.dir.join(CERTS);
            skiff_launch::ClientCert {
                ca: dir.join("ca.pem"),
                cert: dir.join(format!("{file}.pem")),
                key: dir.join(format!("{file}-key.pem")),
            }
        })
    }

    /// The admin's TLS to the store (the CLI's, kubectl's and this process's own).
    pub fn client_tls(&self) -> Option<skiff_proto::tls::ClientTls> {
        self.layout
            .tls
            .then(|| skiff_proto::tls::ClientTls::in_dir(&self.dir.join(CERTS), ADMIN))
    }
}

/// Flags that cannot go together.
fn check(args: &Args) -> Result<()> {
    if args.runtime == RuntimeKind::Cri && args.nodes > MAX_REAL_NODES {
        bail!(
            "--runtime cri runs a containerd and an agent per node: at most {MAX_REAL_NODES} (--runtime sim runs thousands)"
        );
    }
    if args.nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    Ok(())
}

/// Creates the data directory (and its `logs`), resolves it and takes its lock.
fn open_dir(args: &Args) -> Result<(PathBuf, std::fs::File)> {
    let dir = args.data_dir.clone().unwrap_or_else(layout::default_dir);
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let dir = dir
        .canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))?;
    let lock = layout::lock(&dir)?;
    Ok((dir, lock))
}

/// The pod network of a local cluster: Kubernetes' usual 10.244.0.0/16 (256 nodes of a /24
/// each), wider when more nodes need a block (10.244.0.0/14 for 1,000).
fn cluster_cidr(nodes: usize) -> String {
    let bits = usize::BITS - nodes.max(1).saturating_sub(1).leading_zeros();
    let prefix = 24u32.saturating_sub(bits.max(8)).max(8);
    let network = u32::from(Ipv4Addr::new(10, 244, 0, 0)) & (u32::MAX << (32 - prefix));
    format!("{}/{prefix}", Ipv4Addr::from(network))
}

/// The port the API servers are relayed on at the switch's address on the real nodes' link.
const API_RELAY_PORT: u16 = 6443;

/// Where pods reach the API servers (the `kubernetes` Service's endpoint): on real nodes,
/// the relay on their link; simulated pods reach nothing, so none.
fn advertised_api(args: &Args) -> Option<SocketAddr> {
    (args.runtime == RuntimeKind::Cri)
        .then(|| SocketAddr::from((NodeNetwork::switch_ip(), API_RELAY_PORT)))
}

/// The three store members, restarted by the supervisor when they exit.
fn start_members(cluster: &mut Cluster, exe: &str, args: &Args) -> Result<()> {
    let (nodes, event_ttl) = (args.nodes, args.event_ttl);
    let layout = cluster.layout.clone();
    for (i, m) in MEMBERS.iter().enumerate() {
        let scheme = layout.scheme();
        let certs = cluster.dir.join(CERTS);
        let store = StoreCommand {
            name: (*m).into(),
            data_dir: cluster.dir.join("store").join(m),
            listen_client_url: format!("{scheme}://127.0.0.1:{}", layout.client(i)),
            listen_peer_url: format!("{scheme}://127.0.0.1:{}", layout.peer(i)),
            listen_metrics_url: Some(format!("http://127.0.0.1:{}", layout.metrics(i))),
            apiserver: true,
            listen_api_url: Some(layout.api_url(i)),
            tls: layout.tls.then(|| StoreTls {
                cert: certs.join(format!("{m}.pem")),
                key: certs.join(format!("{m}-key.pem")),
                ca: certs.join("ca.pem"),
            }),
            rbac: layout.tls,
            bootstrap_tokens: layout.tls,
            kubelet: cluster.client_cert(KUBELET_CLIENT),
            service_account_key: layout
                .tls
                .then(|| certs.join(crate::certs::SERVICE_ACCOUNT_KEY)),
            // Every request to the Kubernetes API, at Metadata, as kube-apiserver logs it.
            audit_log: layout
                .tls
                .then(|| cluster.logs().join(format!("audit-{m}.log"))),
            // At most 600 MB a member: a thousand nodes' churn writes 15 MB a minute.
            audit_log_maxsize: Some(100),
            audit_log_maxbackup: Some(5),
            initial_cluster: layout.initial_cluster(),
            // As kube-apiserver compacts its etcd: five minutes of history.
            auto_compaction_retention: Some(Duration::from_secs(300)),
            // etcd's largest recommended quota, as large clusters run theirs: five minutes of
            // history at a thousand nodes' churn (`skiff bench soak`) outgrow the default
            // 2 GiB.
            quota_backend_bytes: Some(8 << 30),
            event_ttl: Some(event_ttl),
            cluster_cidr: Some(cluster_cidr(nodes)),
            advertise_address: advertised_api(args),
            ..StoreCommand::default()
        };
        let log = cluster.logs().join(format!("store-{m}.log"));
        cluster.start(
            Launch::new(format!("store-{m}"), exe, log).args(store.args()),
            true,
        )?;
    }
    Ok(())
}

/// Three API servers over `etcd` in place of the members, on the members' client and
/// Kubernetes API ports, restarted by the supervisor when they exit.
fn start_apiservers(
    cluster: &mut Cluster,
    exe: &str,
    etcd: &layout::Etcd,
    args: &Args,
) -> Result<()> {
    let (nodes, event_ttl) = (args.nodes, args.event_ttl);
    let layout = cluster.layout.clone();
    let certs = cluster.dir.join(CERTS);
    for (i, m) in MEMBERS.iter().enumerate() {
        let api = ApiServerCommand {
            etcd_servers: etcd.servers.clone(),
            data_dir: cluster.dir.join("apiserver").join(m),
            listen_client_url: format!("{}://127.0.0.1:{}", layout.scheme(), layout.client(i)),
            listen_api_url: Some(layout.api_url(i)),
            insecure: !layout.tls,
            etcd_tls: match (&etcd.ca, &etcd.cert, &etcd.key) {
                (Some(ca), Some(cert), Some(key)) => Some(skiff_launch::ClientCert {
                    ca: ca.clone(),
                    cert: cert.clone(),
                    key: key.clone(),
                }),
                _ => None,
            },
            etcd_prefix: etcd.prefix.clone(),
            tls: layout.tls.then(|| StoreTls {
                cert: certs.join(format!("{m}.pem")),
                key: certs.join(format!("{m}-key.pem")),
                ca: certs.join("ca.pem"),
            }),
            rbac: layout.tls,
            bootstrap_tokens: layout.tls,
            kubelet: cluster.client_cert(KUBELET_CLIENT),
            service_account_key: layout
                .tls
                .then(|| certs.join(crate::certs::SERVICE_ACCOUNT_KEY)),
            audit_log: layout
                .tls
                .then(|| cluster.logs().join(format!("audit-{m}.log"))),
            audit_log_maxsize: Some(100),
            audit_log_maxbackup: Some(5),
            event_ttl: Some(event_ttl),
            cluster_cidr: Some(cluster_cidr(nodes)),
            advertise_address: advertised_api(args),
            ..ApiServerCommand::default()
        };
        let log = cluster.logs().join(format!("apiserver-{m}.log"));
        cluster.start(
            Launch::new(format!("apiserver-{m}"), exe, log).args(api.args()),
            true,
        )?;
    }
    Ok(())
}

fn start_scheduler(cluster: &mut Cluster, exe: &str) -> Result<()> {
    let scheduler = SchedulerCommand {
        endpoints: cluster.endpoints(),
        tls: cluster.client_cert("scheduler"),
        metrics_addr: Some(SocketAddr::from((
            Ipv4Addr::LOCALHOST,
            cluster.layout.scheduler_metrics(),
        ))),
        ..SchedulerCommand::default()
    };
    let log = cluster.logs().join("scheduler.log");
    // The scheduler and the controller manager exit when they lose their leader lease (the
    // store away too long), so that a standby takes over, as kube-scheduler does; there is
    // no standby here, so they are started again, as the kubelet restarts its static pods.
    cluster.start(
        Launch::new("scheduler", exe, log).args(scheduler.args()),
        true,
    )
}

fn start_controller_manager(cluster: &mut Cluster, exe: &str) -> Result<()> {
    let cm = ControllerManagerCommand {
        endpoints: cluster.endpoints(),
        tls: cluster.client_cert("controller-manager"),
        metrics_addr: Some(SocketAddr::from((
            Ipv4Addr::LOCALHOST,
            cluster.layout.controller_metrics(),
        ))),
        // The cluster's CA signs the certificates nodes join with (`skiff node
        // --bootstrap-token`), as kubeadm gives kube-controller-manager its CA.
        signing: cluster.layout.tls.then(|| {
            let dir = cluster.dir.join(CERTS);
            skiff_launch::SigningCa {
                cert: dir.join("ca.pem"),
                key: dir.join("ca-key.pem"),
            }
        }),
        ..ControllerManagerCommand::default()
    };
    let log = cluster.logs().join("controller-manager.log");
    cluster.start(
        Launch::new("controller-manager", exe, log).args(cm.args()),
        true,
    )
}

/// The node agents (and, for `--runtime cri`, the containerd they run on); returns the
/// names of the nodes they register.
fn start_nodes(cluster: &mut Cluster, exe: &str, args: &Args) -> Result<Vec<String>> {
    let mut node = NodeCommand {
        logs_address: Some(format!("127.0.0.1:{}", cluster.layout.node_logs())),
        metrics_addr: Some(SocketAddr::from((
            [127, 0, 0, 1],
            cluster.layout.node_metrics(),
        ))),
        max_pods: Some(args.max_pods),
        heartbeat_interval: Some(Duration::from_secs(5)),
        tls: cluster.client_cert("nodes"),
        serving: cluster.layout.tls.then(|| {
            let certs = cluster.dir.join(CERTS);
            skiff_launch::ServingCert {
                cert: certs.join(format!("{AGENTS}.pem")),
                key: certs.join(format!("{AGENTS}-key.pem")),
                client_ca: certs.join("ca.pem"),
            }
        }),
        ..NodeCommand::new(args.runtime, cluster.endpoints())
    };
    let names: Vec<String> = match args.runtime {
        RuntimeKind::Sim => {
            let names: Vec<String> = (0..args.nodes).map(|i| format!("node-{i}")).collect();
            node.cpu = Some(args.node_cpu.clone());
            node.memory = Some(args.node_memory.clone());
            node.labels = vec![
                "kubernetes.io/os=linux".into(),
                format!("node.skiff.dev/cpus={}", args.node_cpu),
            ];
            if args.nodes == 1 {
                node.name = Some(names[0].clone());
            } else {
                node.count = Some(args.nodes);
                node.name_prefix = Some("node-".into());
            }
            names
        }
        RuntimeKind::Cri => return start_real_nodes(cluster, exe, args, node),
    };
    let log = cluster.logs().join("nodes.log");
    cluster.start(
        Launch::new("node agents", exe, log).args(node.args()),
        false,
    )?;
    Ok(names)
}

/// The real nodes of `--runtime cri`: the link they share, then for each a containerd in a
/// network namespace of its own joined to the link, and an agent (`node` is the agents'
/// common command line); returns their names.
fn start_real_nodes(
    cluster: &mut Cluster,
    exe: &str,
    args: &Args,
    common: NodeCommand,
) -> Result<Vec<String>> {
    let network = NodeNetwork::start(&cluster.logs().join("node-network.log"))
        .context("the nodes' link (Debian: apt-get install util-linux iproute2)")?;
    // Pods reach the API servers (on the host's loopback) through the switch's address.
    let members: Vec<SocketAddr> = (0..MEMBERS.len())
        .map(|i| SocketAddr::from((Ipv4Addr::LOCALHOST, cluster.layout.api(i))))
        .collect();
    network
        .relay(API_RELAY_PORT, members)
        .context("relaying the API servers onto the nodes' link")?;
    cluster.node_network = Some(network);
    let (cpus, _) = skiff_node::agent::host_capacity();
    let names = real_node_names(args);
    for (i, name) in names.iter().enumerate() {
        let home = cluster.dir.join("nodes").join(name);
        let c = Containerd::start(
            &home.join("containerd"),
            &cluster.logs().join(format!("containerd-{name}.log")),
            Path::new(exe),
            skiff_node::image::PAUSE,
        )
        .context("containerd (Debian: apt-get install containerd runc)")?;
        let address = cluster
            .node_network
            .as_ref()
            .expect("invariant: the link was started above")
            .attach(&c.netns(), i)
            .with_context(|| format!("joining {name} to the nodes' link"))?;
        let layout = &cluster.layout;
        let node = NodeCommand {
            name: Some(name.clone()),
            host_ip: Some(address.to_string()),
            logs_address: Some(format!("127.0.0.1:{}", layout.agent_logs(i))),
            metrics_addr: Some(SocketAddr::from((
                Ipv4Addr::LOCALHOST,
                layout.agent_metrics(i),
            ))),
            tls: cluster.client_cert(name),
            containerd_socket: Some(c.socket().to_path_buf()),
            pod_log_dir: Some(home.join("pods")),
            root_dir: Some(home.join("root")),
            // Pods get addresses from the node's pod CIDR on a bridge in the node's own
            // namespace; other nodes' pod CIDRs are routed over the link.
            cni: Some(c.cni_dirs()),
            runtime_netns: Some(c.netns()),
            cluster_cidr: Some(cluster_cidr(args.nodes)),
            labels: vec![
                "kubernetes.io/os=linux".into(),
                format!("node.skiff.dev/cpus={cpus}"),
            ],
            ..common.clone()
        };
        cluster.containerds.push(c);
        let log = cluster.logs().join(format!("{name}.log"));
        cluster.start(
            Launch::new(format!("node agent {name}"), exe, log).args(node.args()),
            false,
        )?;
    }
    Ok(names)
}

/// Whether every node in `names` is registered and Ready.
async fn nodes_ready(api: &ClusterClient, names: &[String]) -> bool {
    match api.list(Kind::Node, &ListParams::default()).await {
        Ok((nodes, _)) => names.iter().all(|n| {
            nodes.iter().any(
                |o| matches!(o, Object::Node(node) if &node.metadata.name == n && node.is_ready()),
            )
        }),
        Err(_) => false,
    }
}

/// Where to reach the cluster, and what to try first.
fn print_endpoints(layout: &Layout, dir: &Path, config_path: &Path, replaced: bool) {
    let endpoints = layout.endpoints();
    println!();
    println!(
        "  etcd v3 + cluster API   {}",
        endpoints
            .iter()
            .map(|e| format!("{}://{e}", layout.scheme()))
            .collect::<Vec<_>>()
            .join(",")
    );
    println!(
        "  Kubernetes API          {}",
        (0..MEMBERS.len())
            .map(|i| layout.api_url(i))
            .collect::<Vec<_>>()
            .join(" ")
    );
    match &layout.etcd {
        Some(etcd) => println!("  etcd                    {}", etcd.servers.join(",")),
        None => println!(
            "  store metrics           {}",
            (0..MEMBERS.len())
                .map(|i| format!("http://127.0.0.1:{}/metrics", layout.metrics(i)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
    println!(
        "  scheduler metrics       http://127.0.0.1:{}/metrics",
        layout.scheduler_metrics()
    );
    println!(
        "  controller metrics      http://127.0.0.1:{}/metrics",
        layout.controller_metrics()
    );
    println!(
        "  node agents' metrics    http://127.0.0.1:{}/metrics",
        layout.node_metrics()
    );
    println!("  logs                    {}", dir.join("logs").display());
    println!(
        "  client configuration    {}{}",
        config_path.display(),
        if replaced { " (replaced)" } else { "" }
    );
    println!();
    println!("  skiff apply -f examples/pod.yaml");
    println!("  skiff get pods -o wide");
    println!("  skiff describe pod hello");
    let scheme = layout.scheme();
    let urls: Vec<String> = endpoints
        .iter()
        .map(|e| format!("{scheme}://{e}"))
        .collect();
    let tls = if layout.tls {
        let certs = dir.join(CERTS);
        format!(
            " --cacert {} --cert {} --key {}",
            certs.join("ca.pem").display(),
            certs.join(format!("{ADMIN}.pem")).display(),
            certs.join(format!("{ADMIN}-key.pem")).display()
        )
    } else {
        String::new()
    };
    println!(
        "  ETCDCTL_API=3 etcdctl --endpoints={}{tls} endpoint status -w table",
        urls.join(",")
    );
    println!();
}

/// Supervises the children until Ctrl-C or SIGTERM (true) or until a child that is not
/// restarted exits (false).
async fn supervise_until_signal(cluster: &mut Cluster) -> Result<bool> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("SIGTERM handler")?;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(true),
            _ = term.recv() => return Ok(true),
            _ = tick.tick() => {
                if !cluster.supervise() {
                    return Ok(false);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pod_network_has_a_block_for_every_node() {
        assert_eq!(cluster_cidr(1), "10.244.0.0/16");
        assert_eq!(cluster_cidr(256), "10.244.0.0/16");
        assert_eq!(cluster_cidr(257), "10.244.0.0/15");
        assert_eq!(cluster_cidr(1000), "10.244.0.0/14");
        assert_eq!(cluster_cidr(5000), "10.224.0.0/11");
        assert_eq!(cluster_cidr(1_000_000), "10.0.0.0/8");
    }
}
