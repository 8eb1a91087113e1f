//! The scheduler against a running store: informers feed the table and the queue, the
//! worker pool places pods, the binder commits placements with batch Bind, and pods that fit
//! nowhere get a `PodScheduled=False` condition that says why, and preempt lower-priority
//! pods where that makes room (see `preemption`).
//!
//! ```text
//!  node informer ──► table ◄── pod informer (bound pods: accounting; pending: queue)
//!                      │
//!  queue ──► workers ──► committer ──► binder ──Bind(batch)──► store
//!                                  └─► status writer ──UpdateStatus──► store
//! ```
//!
//! A placement is assumed in the table from the moment the committer accepts it, so later
//! pods see it before the store confirms it; a Bind the store refuses is taken back out of
//! the table and the pod is queued again (unless it is gone or bound elsewhere). The queue
//! is the one owner of pending pods, assumed ones included (see `queue` for why).
//!
//! | module       | what                                                                  |
//! |--------------|-----------------------------------------------------------------------|
//! | this one     | [`Config`], [`Error`], [`run`]: start, wire and stop the parts        |
//! | [`informer`] | node and pod events into the table and the queue                      |
//! | `binder`     | batch Binds; a refused one taken back and the pod re-queued           |
//! | `status`     | `PodScheduled=False` and `FailedScheduling` for pods that fit nowhere |
//! | `metrics`    | `/metrics` in the Prometheus text format                              |

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use skiff_proto::api::Kind;
use skiff_proto::client::{ClusterClient, Informer, ListParams};
use skiff_proto::recorder::EventRecorder;
use tokio::sync::mpsc;

use crate::kernels::Kernels;
use crate::parallel::{Core, Pool, PoolConfig, Verdict};

mod binder;
pub mod informer;
mod metrics;
mod status;

pub use informer::Handlers;

/// The key scheduler processes elect their leader on.
pub const LEADER_KEY: &str = "/skiff/leader/scheduler";

/// The names a pod's `spec.schedulerName` may carry for this scheduler to take it.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Client(#[from] skiff_proto::client::ClientError),
    #[error(transparent)]
    Leader(#[from] skiff_proto::leader::Error),
    #[error("lost the scheduler leadership; stopping so a standby can take over")]
    LeadershipLost,
    #[error("metrics address {addr}: {source}")]
    Metrics {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Settings of `skiff scheduler`.
#[derive(Debug, Clone)]
pub struct Config {
    pub endpoints: Vec<String>,
    /// TLS to the store, with the certificate that names this component.
    pub tls: Option<skiff_proto::tls::ClientTls>,
    pub workers: usize,
    /// Most pods of one signature per engine batch.
    pub batch: usize,
    /// Most bindings per Bind call, and Bind calls in flight.
    pub bind_batch: usize,
    pub bind_concurrency: usize,
    pub seed: u64,
    /// Besides `default-scheduler` (and an empty name), the name pods may ask for.
    pub scheduler_name: String,
    pub metrics_addr: Option<SocketAddr>,
    /// Elect a leader among scheduler processes and fence its Binds (see `leader`).
    pub leader_elect: bool,
    pub lease_ttl: Duration,
    /// This process in the leadership key (host and pid by default).
    pub identity: String,
    /// Record `Scheduled` and `FailedScheduling` events (as kube-scheduler does).
    pub events: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            endpoints: Vec::new(),
            tls: None,
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            batch: 256,
            bind_batch: 1000,
            bind_concurrency: 4,
            seed: 1,
            scheduler_name: DEFAULT_SCHEDULER_NAME.to_string(),
            metrics_addr: None,
            leader_elect: true,
            lease_ttl: Duration::from_secs(10),
            identity: format!("scheduler-{}", std::process::id()),
            events: true,
        }
    }
}

/// What the binder, the status writer and `/metrics` share.
struct Shared {
    core: Arc<Core>,
    client: ClusterClient,
    counters: metrics::Counters,
    /// (key, create revision) every Bind is fenced with, when leader-elected.
    fence: Option<(String, i64)>,
    events: Option<EventRecorder>,
}

/// Runs until `shutdown` resolves.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<()> {
    tokio::pin!(shutdown);
    let mut leadership = if config.leader_elect {
        tokio::select! {
            l = skiff_proto::leader::acquire(&config.endpoints, config.tls.as_ref(), LEADER_KEY, &config.identity, config.lease_ttl) => Some(l?),
            () = &mut shutdown => return Ok(()),
        }
    } else {
        None
    };
    let client = ClusterClient::connect_with(&config.endpoints, config.tls.as_ref())?;
    let core = Arc::new(Core::new(Kernels::auto()));
    let handlers = Arc::new(Handlers::new(core.clone(), &config.scheduler_name));
    let shared = Arc::new(Shared {
        core: core.clone(),
        client: client.clone(),
        counters: metrics::Counters::default(),
        fence: leadership.as_ref().map(|l| (l.key.clone(), l.revision)),
        events: config
            .events
            .then(|| EventRecorder::spawn(client.clone(), DEFAULT_SCHEDULER_NAME, "")),
    });

    // Caches first: nodes, then pods, listed before any pod is placed.
    let mut nodes = Informer::new(client.clone(), Kind::Node, ListParams::default());
    for e in nodes.sync().await? {
        handlers.on_node(&e);
    }
    // Claims and volumes before pods: a pending pod of a bound claim is pinned as it comes.
    let mut budgets = Informer::new(
        client.clone(),
        Kind::from_name("PodDisruptionBudget").expect("invariant: budgets are declared"),
        ListParams::default(),
    );
    for e in budgets.sync().await? {
        handlers.on_budget(&e);
    }
    let mut volume_informers = Vec::new();
    for name in ["PersistentVolumeClaim", "PersistentVolume"] {
        let kind = Kind::from_name(name).expect("invariant: claims and volumes are declared");
        let mut informer = Informer::new(client.clone(), kind, ListParams::default());
        for e in informer.sync().await? {
            handlers.on_volume(&e);
        }
        volume_informers.push(informer);
    }
    let mut pods = Informer::new(client.clone(), Kind::Pod, ListParams::default());
    for e in pods.sync().await? {
        handlers.on_pod(&e);
    }
    tracing::info!(
        nodes = core.table.read().len(),
        pending = core.queue.depth().0,
        "scheduler caches synced"
    );
    let h = handlers.clone();
    let node_task = tokio::spawn(async move { nodes.run(|e, _| h.on_node(e)).await });
    let h = handlers.clone();
    let pod_task = tokio::spawn(async move { pods.run(|e, _| h.on_pod(e)).await });
    let h = handlers.clone();
    let budget_task = tokio::spawn(async move { budgets.run(|e, _| h.on_budget(e)).await });
    let h = handlers.clone();
    let volume_task = tokio::spawn(async move {
        let runs = volume_informers.into_iter().map(|mut i| {
            let h = h.clone();
            async move { i.run(|e, _| h.on_volume(e)).await }
        });
        let (r, _, _) = futures::future::select_all(runs.map(Box::pin)).await;
        r
    });

    let (tx, rx) = mpsc::unbounded_channel::<Vec<Verdict>>();
    let pool = Pool::start(
        core.clone(),
        PoolConfig {
            workers: config.workers,
            batch: config.batch,
            seed: config.seed,
        },
        // Each worker's sender: the channel closes when the last worker ends.
        move || {
            let tx = tx.clone();
            move |v| {
                let _ = tx.send(v);
            }
        },
    );
    let binder = tokio::spawn(binder::bind_loop(shared.clone(), rx, config.clone()));
    let s = shared.clone();
    let ticker = tokio::spawn(async move {
        let mut t = tokio::time::interval(Duration::from_secs(1));
        loop {
            t.tick().await;
            s.core.queue.tick();
        }
    });
    let metrics = match config.metrics_addr {
        Some(addr) => Some(metrics::serve(addr, shared.clone()).await?),
        None => None,
    };

    let informers = async {
        tokio::select! {
            r = node_task => r,
            r = pod_task => r,
            r = volume_task => r,
            r = budget_task => r,
        }
    };
    let lost = async {
        match leadership.as_mut() {
            Some(l) => l.lost().await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        () = &mut shutdown => Ok(()),
        () = lost => Err(Error::LeadershipLost),
        r = informers => match r {
            Ok(Err(e)) => Err(Error::Client(e)),
            _ => Ok(()),
        },
    };
    core.queue.close();
    ticker.abort();
    if let Some(m) = metrics {
        m.abort();
    }
    let _ = tokio::task::spawn_blocking(move || pool.join()).await;
    let _ = binder.await;
    if let (Some(l), Ok(())) = (leadership, &outcome) {
        l.release().await;
    }
    outcome
}
