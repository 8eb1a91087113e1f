//! The scheduler against a running store: informers feed the table and the queue, the
//! worker pool places pods, the binder commits placements with batch Bind, and pods that fit
//! nowhere get a `PodScheduled=False` condition that says why.
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
//! the table and the pod is queued again (unless it is gone or bound elsewhere).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use skiff_proto::api::pod::PodCondition;
use skiff_proto::api::{Kind, Object, Time};
use skiff_proto::client::{ClusterClient, Event, Informer};
use skiff_proto::cluster::v1::Binding;
use skiff_proto::cluster::v1::bind_result::Outcome;
use skiff_proto::recorder::{self, EventRecorder};
use tokio::sync::{Semaphore, mpsc};

use crate::kernels::Kernels;
use crate::model::{NodeInfo, PodInfo};
use crate::parallel::{Core, LATENCY_BUCKETS_US, Pool, PoolConfig, Verdict};

/// The names a pod's `spec.schedulerName` may carry for this scheduler to take it.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Client(#[from] skiff_proto::client::ClientError),
    #[error(transparent)]
    Leader(#[from] crate::leader::Error),
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

/// Counts of Bind outcomes and the recent scheduling rate, for `/metrics`.
#[derive(Debug, Default)]
struct BindStats {
    bound: AtomicU64,
    refused: AtomicU64,
    failed_calls: AtomicU64,
    status_writes: AtomicU64,
}

struct Shared {
    core: Arc<Core>,
    client: ClusterClient,
    /// The newest object of every pending pod this scheduler may place (for status writes
    /// and re-queueing after a refused Bind).
    pending: Mutex<HashMap<String, Object>>,
    names: Vec<String>,
    binds: BindStats,
    /// (time, pods bound so far), sampled every second, the last ten seconds.
    rate: Mutex<std::collections::VecDeque<(Instant, u64)>>,
    /// (key, create revision) every Bind is fenced with, when leader-elected.
    fence: Option<(String, i64)>,
    events: Option<EventRecorder>,
}

fn pod_key(o: &Object) -> String {
    format!("{}/{}", o.metadata().namespace, o.metadata().name)
}

impl Shared {
    fn ours(&self, scheduler_name: &str) -> bool {
        scheduler_name.is_empty() || self.names.iter().any(|n| n == scheduler_name)
    }

    fn on_node(&self, event: &Event) {
        match event {
            Event::Added(Object::Node(n)) | Event::Modified(Object::Node(n)) => {
                let info = NodeInfo::from_node(n);
                let mut table = self.core.table.write();
                let same = table
                    .row(&info.name)
                    .is_some_and(|r| *table.infos[r] == info);
                if !same {
                    table.upsert_node(info);
                    drop(table);
                    self.core.queue.cluster_changed();
                }
            }
            Event::Deleted(Object::Node(n)) => {
                self.core.table.write().remove_node(&n.metadata.name);
            }
            _ => {}
        }
    }

    fn on_pod(&self, event: &Event) {
        match event {
            Event::Added(o @ Object::Pod(p)) | Event::Modified(o @ Object::Pod(p)) => {
                let key = pod_key(o);
                if !p.spec.node_name.is_empty() {
                    self.pending.lock().remove(&key);
                    self.core.queue.remove(&key);
                    if p.is_terminal() {
                        if self.core.table.write().remove_pod(&key).is_some() {
                            self.core.queue.cluster_changed();
                        }
                        return;
                    }
                    let known = self
                        .core
                        .table
                        .read()
                        .pods
                        .get(&key)
                        .map(|e| (e.node.clone(), e.assumed));
                    match known {
                        Some((node, false)) if node == p.spec.node_name => {}
                        _ => {
                            let info = Arc::new(PodInfo::from_pod(p));
                            let mut table = self.core.table.write();
                            if table
                                .pods
                                .get(&key)
                                .is_some_and(|e| e.node != p.spec.node_name)
                            {
                                // Bound elsewhere than we assumed (another scheduler won).
                                table.remove_pod(&key);
                            }
                            let _ = table.add_pod(info, &p.spec.node_name, false);
                        }
                    }
                } else if p.metadata.deletion_timestamp.is_none()
                    && self.ours(&p.spec.scheduler_name)
                {
                    self.pending.lock().insert(key.clone(), o.clone());
                    if self.core.table.read().pods.contains_key(&key) {
                        return; // our Bind for it is in flight
                    }
                    self.core.queue.add(Arc::new(PodInfo::from_pod(p)));
                } else {
                    // Being deleted before it was placed, or another scheduler's.
                    self.pending.lock().remove(&key);
                    self.core.queue.remove(&key);
                }
            }
            Event::Deleted(o @ Object::Pod(_)) => {
                let key = pod_key(o);
                self.pending.lock().remove(&key);
                self.core.queue.remove(&key);
                if self.core.table.write().remove_pod(&key).is_some() {
                    self.core.queue.cluster_changed();
                }
            }
            _ => {}
        }
    }

    /// Takes a refused placement back out of the table and queues the pod again if it is
    /// still pending.
    fn unassume(&self, key: &str, requeue: bool) {
        {
            let mut table = self.core.table.write();
            if table.pods.get(key).is_some_and(|e| e.assumed) {
                table.remove_pod(key);
            }
        }
        self.core.queue.cluster_changed();
        if requeue {
            let pending = self.pending.lock().get(key).cloned();
            if let Some(Object::Pod(p)) = pending {
                self.core.queue.add(Arc::new(PodInfo::from_pod(&p)));
            }
        }
    }
}

/// Runs until `shutdown` resolves.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<()> {
    tokio::pin!(shutdown);
    let mut leadership = if config.leader_elect {
        tokio::select! {
            l = crate::leader::acquire(&config.endpoints, &config.identity, config.lease_ttl) => Some(l?),
            () = &mut shutdown => return Ok(()),
        }
    } else {
        None
    };
    let client = ClusterClient::connect(&config.endpoints)?;
    let core = Arc::new(Core::new(Kernels::auto()));
    let mut names = vec![DEFAULT_SCHEDULER_NAME.to_string()];
    if !config.scheduler_name.is_empty() && config.scheduler_name != DEFAULT_SCHEDULER_NAME {
        names.push(config.scheduler_name.clone());
    }
    let shared = Arc::new(Shared {
        core: core.clone(),
        client: client.clone(),
        pending: Mutex::new(HashMap::new()),
        names,
        binds: BindStats::default(),
        rate: Mutex::new(std::collections::VecDeque::new()),
        fence: leadership.as_ref().map(|l| (l.key.clone(), l.revision)),
        events: config
            .events
            .then(|| EventRecorder::spawn(client.clone(), DEFAULT_SCHEDULER_NAME, "")),
    });

    // Caches first: nodes, then pods, listed before any pod is placed.
    let mut nodes = Informer::new(client.clone(), Kind::Node, "", "", "");
    for e in nodes.relist().await? {
        shared.on_node(&e);
    }
    let mut pods = Informer::new(client.clone(), Kind::Pod, "", "", "");
    for e in pods.relist().await? {
        shared.on_pod(&e);
    }
    tracing::info!(
        nodes = core.table.read().len(),
        pending = core.queue.depth().0,
        "scheduler caches synced"
    );
    let s = shared.clone();
    let node_task = tokio::spawn(async move { nodes.run(|e, _| s.on_node(e)).await });
    let s = shared.clone();
    let pod_task = tokio::spawn(async move { pods.run(|e, _| s.on_pod(e)).await });

    let (tx, rx) = mpsc::unbounded_channel::<Vec<Verdict>>();
    let pool = Pool::start(
        core.clone(),
        PoolConfig {
            workers: config.workers,
            batch: config.batch,
            seed: config.seed,
        },
        move |v| {
            let _ = tx.send(v);
        },
    );
    let binder = tokio::spawn(bind_loop(shared.clone(), rx, config.clone()));
    let s = shared.clone();
    let ticker = tokio::spawn(async move {
        let mut t = tokio::time::interval(Duration::from_secs(1));
        loop {
            t.tick().await;
            s.core.queue.tick();
            let mut rate = s.rate.lock();
            rate.push_back((Instant::now(), s.binds.bound.load(Ordering::Relaxed)));
            if rate.len() > 11 {
                rate.pop_front();
            }
        }
    });
    let metrics = match config.metrics_addr {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| Error::Metrics { addr, source })?;
            let s = shared.clone();
            let app = axum::Router::new().route(
                "/metrics",
                axum::routing::get(move || {
                    let s = s.clone();
                    async move { metrics_text(&s) }
                }),
            );
            Some(tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            }))
        }
        None => None,
    };

    let informers = async {
        tokio::select! {
            r = node_task => r,
            r = pod_task => r,
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

/// Sends placements to the store in batches, several calls in flight, and writes the
/// FailedScheduling condition of pods that fit nowhere.
async fn bind_loop(
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Vec<Verdict>>,
    config: Config,
) {
    let calls = Arc::new(Semaphore::new(config.bind_concurrency.max(1)));
    let writes = Arc::new(Semaphore::new(16));
    let mut tasks = tokio::task::JoinSet::new();
    while let Some(first) = rx.recv().await {
        let mut verdicts = first;
        while let Ok(more) = rx.try_recv() {
            verdicts.extend(more);
        }
        let mut placed = Vec::new();
        for v in verdicts {
            match v {
                Verdict::Placed { pod, node, .. } => placed.push((pod, node)),
                Verdict::Unschedulable { pod, diagnosis, .. } => {
                    let s = shared.clone();
                    let permit = writes.clone().acquire_owned().await;
                    tasks.spawn(async move {
                        let _permit = permit;
                        write_unschedulable(&s, &pod.key(), &diagnosis.to_string()).await;
                    });
                }
            }
        }
        for chunk in placed.chunks(config.bind_batch.max(1)) {
            let chunk = chunk.to_vec();
            let s = shared.clone();
            let permit = calls.clone().acquire_owned().await;
            tasks.spawn(async move {
                let _permit = permit;
                bind_chunk(&s, chunk).await;
            });
        }
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
}

async fn bind_chunk(s: &Shared, chunk: Vec<(Arc<PodInfo>, String)>) {
    let bindings = chunk
        .iter()
        .map(|(p, node)| Binding {
            namespace: p.namespace.clone(),
            pod: p.name.clone(),
            node: node.clone(),
            pod_resource_version: p.resource_version,
        })
        .collect();
    let (fence_key, fence_revision) = s.fence.as_ref().map_or(("", 0), |(k, r)| (k.as_str(), *r));
    match s
        .client
        .bind_fenced(bindings, fence_key, fence_revision)
        .await
    {
        Ok(results) => {
            for ((pod, node), r) in chunk.iter().zip(results) {
                let outcome = Outcome::try_from(r.outcome).unwrap_or(Outcome::Invalid);
                if outcome == Outcome::Bound {
                    s.binds.bound.fetch_add(1, Ordering::Relaxed);
                    if let Some(events) = &s.events {
                        events.normal(
                            pod.reference(),
                            "Scheduled",
                            format!(
                                "Successfully assigned {}/{} to {node}",
                                pod.namespace, pod.name
                            ),
                        );
                    }
                    continue;
                }
                s.binds.refused.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(pod = %pod.key(), node, ?outcome, message = r.message, "bind refused");
                let requeue = !matches!(
                    outcome,
                    Outcome::PodNotFound | Outcome::AlreadyBound | Outcome::PodTerminating
                );
                s.unassume(&pod.key(), requeue);
            }
        }
        Err(e) => {
            s.binds.failed_calls.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, bindings = chunk.len(), "bind call failed; re-queueing");
            for (pod, _) in &chunk {
                s.unassume(&pod.key(), true);
            }
        }
    }
}

/// Sets `PodScheduled=False, reason Unschedulable` with the diagnosis, unless the pod
/// already says exactly that.
async fn write_unschedulable(s: &Shared, key: &str, message: &str) {
    let Some(Object::Pod(mut pod)) = s.pending.lock().get(key).cloned() else {
        return;
    };
    if let Some(events) = &s.events {
        // Every attempt is recorded; repeats fold into one event with a count.
        events.warning(
            recorder::reference_to(Kind::Pod, &pod.metadata),
            "FailedScheduling",
            message.to_string(),
        );
    }
    let status = pod.status.get_or_insert_with(Default::default);
    if status
        .conditions
        .iter()
        .any(|c| c.type_ == "PodScheduled" && c.status == "False" && c.message == message)
    {
        return;
    }
    status.conditions.retain(|c| c.type_ != "PodScheduled");
    status.conditions.push(PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        last_probe_time: None,
        last_transition_time: Some(Time::now()),
        reason: "Unschedulable".into(),
        message: message.to_string(),
    });
    if status.phase.is_empty() {
        status.phase = "Pending".into();
    }
    match s.client.update_status(&Object::Pod(pod)).await {
        Ok(_) => {
            s.binds.status_writes.fetch_add(1, Ordering::Relaxed);
        }
        // A newer version exists: the next attempt writes on top of it.
        Err(e) => tracing::debug!(pod = key, error = %e, "unschedulable status not written"),
    }
}

fn metrics_text(s: &Shared) -> String {
    use std::fmt::Write;
    let st = &s.core.stats;
    let (active, in_flight, unschedulable) = s.core.queue.depth();
    let mut out = String::new();
    let _ = writeln!(out, "# TYPE skiff_scheduler_queue_pods gauge");
    let _ = writeln!(
        out,
        "skiff_scheduler_queue_pods{{state=\"active\"}} {active}"
    );
    let _ = writeln!(
        out,
        "skiff_scheduler_queue_pods{{state=\"in_flight\"}} {in_flight}"
    );
    let _ = writeln!(
        out,
        "skiff_scheduler_queue_pods{{state=\"unschedulable\"}} {unschedulable}"
    );
    let _ = writeln!(out, "# TYPE skiff_scheduler_nodes gauge");
    let _ = writeln!(out, "skiff_scheduler_nodes {}", s.core.table.read().len());
    let _ = writeln!(
        out,
        "# TYPE skiff_scheduler_schedule_attempts_total counter"
    );
    for (result, v) in [
        ("scheduled", &st.placed),
        ("unschedulable", &st.unschedulable),
        ("conflict", &st.conflicts),
    ] {
        let _ = writeln!(
            out,
            "skiff_scheduler_schedule_attempts_total{{result=\"{result}\"}} {}",
            v.load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(out, "# TYPE skiff_scheduler_binds_total counter");
    for (outcome, v) in [("bound", &s.binds.bound), ("refused", &s.binds.refused)] {
        let _ = writeln!(
            out,
            "skiff_scheduler_binds_total{{outcome=\"{outcome}\"}} {}",
            v.load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(
        out,
        "skiff_scheduler_bind_call_errors_total {}",
        s.binds.failed_calls.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "skiff_scheduler_unschedulable_status_writes_total {}",
        s.binds.status_writes.load(Ordering::Relaxed)
    );
    let per_second = {
        let rate = s.rate.lock();
        match (rate.front(), rate.back()) {
            (Some((t0, n0)), Some((t1, n1))) if t1 > t0 => {
                (n1 - n0) as f64 / t1.duration_since(*t0).as_secs_f64()
            }
            _ => 0.0,
        }
    };
    let _ = writeln!(
        out,
        "# HELP skiff_scheduler_pods_per_second pods bound per second over the last 10 s"
    );
    let _ = writeln!(out, "# TYPE skiff_scheduler_pods_per_second gauge");
    let _ = writeln!(out, "skiff_scheduler_pods_per_second {per_second:.1}");
    let _ = writeln!(
        out,
        "# TYPE skiff_scheduler_attempt_duration_seconds histogram"
    );
    let mut cumulative = 0;
    for (i, le) in LATENCY_BUCKETS_US.iter().enumerate() {
        cumulative += st.latency[i].load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "skiff_scheduler_attempt_duration_seconds_bucket{{le=\"{}\"}} {cumulative}",
            *le as f64 / 1e6
        );
    }
    cumulative += st.latency[LATENCY_BUCKETS_US.len()].load(Ordering::Relaxed);
    let _ = writeln!(
        out,
        "skiff_scheduler_attempt_duration_seconds_bucket{{le=\"+Inf\"}} {cumulative}"
    );
    let _ = writeln!(
        out,
        "skiff_scheduler_attempt_duration_seconds_sum {}",
        st.latency_sum_us.load(Ordering::Relaxed) as f64 / 1e6
    );
    let _ = writeln!(
        out,
        "skiff_scheduler_attempt_duration_seconds_count {cumulative}"
    );
    out
}
