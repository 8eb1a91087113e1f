//! Parallel scheduling, Omega style: workers take batches from the queue and place them
//! optimistically against the shared table under a read lock; then the commit step re-checks
//! every placement against the table as it is now and commits (assumes) the ones that still
//! fit. Commits run one at a time, under the table's write lock, so they act as a single
//! committer; a placement that lost a race to another worker's commit goes back to the
//! queue, so the table, and therefore what the binder sends, never overcommits a node.
//!
//! A worker commits its batch before it takes the next one, so it always schedules against
//! its own earlier placements; only the batches other workers have in flight are unseen.
//!
//! ```text
//!  queue ──pop_batch──► worker 1 ─┐ place (read lock)   ┌───────────────────┐  verdicts
//!        ──pop_batch──► worker 2 ─┼────────────────────►│ commit, one at a  │────────► sink
//!        ──pop_batch──► worker W ─┘                     │ time: check + add │ (binder, or
//!                          ▲                            └─────────┬─────────┘  benchmark)
//!                          └──────────── table ◄── write lock ────┘
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use crate::engine::{self, Outcome, Rng};
use crate::filter::{self, Diagnosis, PodCtx};
use crate::kernels::Kernels;
use crate::model::{PodInfo, Resources};
use crate::queue::{Done, Queue};
use crate::table::NodeTable;

/// What became of one pod's attempt.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// Committed to the table (assumed) on `node`.
    Placed {
        pod: Arc<PodInfo>,
        node: String,
        latency: Duration,
    },
    /// Fits nowhere now.
    Unschedulable {
        pod: Arc<PodInfo>,
        diagnosis: Diagnosis,
        latency: Duration,
    },
}

/// Counters the scheduler exports.
#[derive(Debug, Default)]
pub struct Stats {
    pub attempts: AtomicU64,
    pub placed: AtomicU64,
    pub conflicts: AtomicU64,
    pub unschedulable: AtomicU64,
    pub batches: AtomicU64,
    /// Attempt latency histogram: counts per bucket of `LATENCY_BUCKETS_US`, plus overflow.
    pub latency: [AtomicU64; LATENCY_BUCKETS_US.len() + 1],
    pub latency_sum_us: AtomicU64,
}

/// Upper bounds (µs) of the attempt-latency histogram buckets.
pub const LATENCY_BUCKETS_US: [u64; 12] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000,
];

impl Stats {
    fn observe(&self, d: Duration) {
        let us = d.as_micros() as u64;
        let i = LATENCY_BUCKETS_US
            .iter()
            .position(|b| us <= *b)
            .unwrap_or(LATENCY_BUCKETS_US.len());
        self.latency[i].fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us.fetch_add(us, Ordering::Relaxed);
    }
}

/// The state workers and the committer share.
#[derive(Debug)]
pub struct Core {
    pub table: RwLock<NodeTable>,
    pub queue: Queue,
    pub kernels: Kernels,
    pub stats: Stats,
}

impl Core {
    pub fn new(kernels: Kernels) -> Self {
        Core {
            table: RwLock::new(NodeTable::new()),
            queue: Queue::new(),
            kernels,
            stats: Stats::default(),
        }
    }

    /// Takes a placement whose Bind was refused back out of the table and, with `requeue`,
    /// hands the pod back to the queue (see [`Queue::unassume`]).
    /// Only that pod's placement goes: a pod created since under the same name is another
    /// pod (another UID), placed or pending on its own.
    pub fn unassume(&self, placed: &PodInfo, requeue: bool) {
        let id = placed.id();
        {
            let mut table = self.table.write();
            if table.pods.get(&id).is_some_and(|e| e.assumed) {
                table.remove_pod(&id);
            }
        }
        self.queue.cluster_changed();
        self.queue.unassume(placed, requeue);
    }
}

struct Proposal {
    pods: Vec<Arc<PodInfo>>,
    /// Per pod: the chosen node's name, or the diagnosis.
    outcomes: Vec<Result<String, Diagnosis>>,
    popped: Instant,
}

/// Settings of the worker pool.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    pub workers: usize,
    /// Most pods of one signature per batch.
    pub batch: usize,
    pub seed: u64,
}

/// Running workers and committer; [`Pool::join`] after closing the queue.
#[derive(Debug)]
pub struct Pool {
    handles: Vec<JoinHandle<()>>,
}

impl Pool {
    /// Starts `workers` worker threads; each hands the verdicts of every batch it commits
    /// to `sink`.
    pub fn start<S>(core: Arc<Core>, config: PoolConfig, sink: S) -> Pool
    where
        S: FnMut(Vec<Verdict>) + Send + 'static,
    {
        let sink = Arc::new(Mutex::new(sink));
        let mut handles = Vec::new();
        for w in 0..config.workers.max(1) {
            let core = core.clone();
            let sink = sink.clone();
            let batch = config.batch.max(1);
            let seed = config.seed ^ (w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            handles.push(
                std::thread::Builder::new()
                    .name(format!("sched-worker-{w}"))
                    .spawn(move || worker(core, sink, batch, seed))
                    .expect("invariant: threads can be spawned"),
            );
        }
        Pool { handles }
    }

    /// Waits for every thread (close the queue first).
    pub fn join(self) {
        for h in self.handles {
            let _ = h.join();
        }
    }
}

fn worker<S>(core: Arc<Core>, sink: Arc<Mutex<S>>, batch: usize, seed: u64)
where
    S: FnMut(Vec<Verdict>) + Send + 'static,
{
    let mut rng = Rng::new(seed);
    loop {
        let pods = core.queue.pop_batch(batch, Duration::from_millis(200));
        if pods.is_empty() {
            if core.queue.is_closed() {
                return;
            }
            continue;
        }
        let popped = Instant::now();
        let first = pods[0].clone();
        // One scheduling attempt: a batch of pods of one signature, filtered, scored and
        // committed together.
        let _attempt = tracing::debug_span!(
            "scheduler.attempt",
            pod = %first.key(),
            pods = pods.len()
        )
        .entered();
        if first.has_pod_terms() {
            filter::register_terms(&mut core.table.write(), &first);
        }
        let outcomes = {
            let table = core.table.read();
            engine::schedule_batch(&table, &first, pods.len(), &core.kernels, &mut rng)
                .into_iter()
                .map(|o| match o {
                    Outcome::Placed { row, .. } => Ok(table.names[row].clone()),
                    Outcome::Unschedulable(d) => Err(d),
                })
                .collect()
        };
        core.stats.batches.fetch_add(1, Ordering::Relaxed);
        let verdicts = commit(
            &core,
            Proposal {
                pods,
                outcomes,
                popped,
            },
        );
        (sink.lock())(verdicts);
    }
}

/// Re-checks and commits one proposal; reports every pod to the queue.
fn commit(core: &Core, p: Proposal) -> Vec<Verdict> {
    let mut verdicts = Vec::with_capacity(p.pods.len());
    let mut retry = Vec::new();
    {
        let mut table = core.table.write();
        let first = &p.pods[0];
        if first.has_pod_terms() {
            filter::register_terms(&mut table, first);
        }
        let mut ctx: Option<PodCtx> = None;
        let none = Resources::default();
        for (pod, outcome) in p.pods.iter().zip(p.outcomes) {
            core.stats.attempts.fetch_add(1, Ordering::Relaxed);
            let latency = p.popped.elapsed();
            match outcome {
                Ok(node) => {
                    let ctx = ctx.get_or_insert_with(|| PodCtx::new(&table, first, &core.kernels));
                    let fits = table.row(&node).is_some_and(|row| {
                        filter::check_row(&table, pod, ctx, row, &none, 0).is_empty()
                    });
                    if fits && table.add_pod(pod.clone(), &node, true).is_ok() {
                        if let Some(row) = table.row(&node) {
                            ctx.place(&table, row);
                        }
                        core.stats.placed.fetch_add(1, Ordering::Relaxed);
                        core.stats.observe(latency);
                        verdicts.push(Verdict::Placed {
                            pod: pod.clone(),
                            node,
                            latency,
                        });
                    } else {
                        core.stats.conflicts.fetch_add(1, Ordering::Relaxed);
                        retry.push(pod.clone());
                    }
                }
                Err(diagnosis) => {
                    core.stats.unschedulable.fetch_add(1, Ordering::Relaxed);
                    core.stats.observe(latency);
                    verdicts.push(Verdict::Unschedulable {
                        pod: pod.clone(),
                        diagnosis,
                        latency,
                    });
                }
            }
        }
    }
    for v in &verdicts {
        match v {
            Verdict::Placed { pod, .. } => core.queue.done(pod, Done::Placed),
            Verdict::Unschedulable { pod, diagnosis, .. } => core.queue.done(
                pod,
                if diagnosis.blocked_by_pods() {
                    Done::BlockedByPods
                } else {
                    Done::Unschedulable
                },
            ),
        }
    }
    for pod in retry {
        core.queue.done(&pod, Done::Retry);
    }
    verdicts
}
