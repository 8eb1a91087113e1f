//! Parallel scheduling, Omega style: workers take batches from the queue and place them
//! optimistically against the shared table under a read lock (let go between placements
//! whenever a commit waits for it); then the commit step re-checks every placement against
//! the table as it is now and commits (assumes) the ones that still fit. Commits run one at a
//! time, so they act as a single committer: each re-checks and indexes its placements under
//! the table's upgradable read, beside the other workers' reads, and takes the write lock
//! only to count them in the columns ([`NodeTable::claims`]). A placement that lost a race
//! to another worker's commit goes back to the queue, so the table, and therefore what the
//! binder sends, never overcommits a node.
//!
//! A worker commits its batch before it takes the next one, so it always schedules against
//! its own earlier placements; only the batches other workers have in flight are unseen.
//!
//! ```text
//!  queue ──pop_batch──► worker 1 ─┐ place (read lock)   ┌───────────────────┐  verdicts
//!        ──pop_batch──► worker 2 ─┼────────────────────►│ commit, one at a  │────────► sink
//!        ──pop_batch──► worker W ─┘                     │ time: check + add │ (binder, or
//!                          ▲                            └─────────┬─────────┘  benchmark)
//!                          └──────────── table ◄── read → write ──┘
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock, RwLockUpgradableReadGuard};

use crate::engine::{self, Outcome, Overlay, Rng};
use crate::filter::{self, Diagnosis, PodCtx};
use crate::kernels::Kernels;
use crate::model::{PodInfo, Resources};
use crate::preemption;
use crate::queue::{Done, PlacedFlag, Queue};
use crate::table::{NodeTable, Placing};

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
        /// What preemption decided for it.
        preemption: preemption::Outcome,
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
    /// Pods nominated by preemption, and the victims chosen for them.
    pub preemptions: AtomicU64,
    pub victims: AtomicU64,
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
    /// The PodDisruptionBudgets preemption respects, by `namespace/name`.
    pub budgets: Mutex<BTreeMap<String, preemption::Budget>>,
}

impl Core {
    pub fn new(kernels: Kernels) -> Self {
        Core {
            table: RwLock::new(NodeTable::new()),
            queue: Queue::new(),
            kernels,
            stats: Stats::default(),
            budgets: Mutex::new(BTreeMap::new()),
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
            if table.pod(id.as_str()).is_some_and(|e| e.assumed) {
                table.remove_pod(&id);
            }
        }
        self.queue.cluster_changed();
        self.queue.unassume(placed, requeue);
    }
}

/// Where a worker put a pod: the row and its node's name, as the table had them.
type Chosen = (usize, Arc<str>);

struct Proposal {
    pods: Vec<Arc<PodInfo>>,
    /// Per pod: how its placement is reported to the queue.
    flags: Vec<PlacedFlag>,
    /// Per pod: the chosen node's row and name, or the diagnosis; `None` when the batch
    /// stopped before the pod (the nodes changed under it).
    outcomes: Vec<Option<Result<Chosen, Diagnosis>>>,
    /// The table's `node_version` the placements were made against.
    node_version: u64,
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
    /// to a sink of its own, made by `sink` (so that no lock is shared there: a sink the
    /// workers shared was a part of every batch that ran one worker at a time).
    pub fn start<F, S>(core: Arc<Core>, config: PoolConfig, mut sink: F) -> Pool
    where
        F: FnMut() -> S,
        S: FnMut(Vec<Verdict>) + Send + 'static,
    {
        let mut handles = Vec::new();
        for w in 0..config.workers.max(1) {
            let core = core.clone();
            let sink = sink();
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

    /// As [`Pool::start`], with one sink every worker shares, called by one worker at a time.
    pub fn start_shared<S>(core: Arc<Core>, config: PoolConfig, sink: S) -> Pool
    where
        S: FnMut(Vec<Verdict>) + Send + 'static,
    {
        let sink = Arc::new(Mutex::new(sink));
        Pool::start(core, config, move || {
            let sink = sink.clone();
            move |verdicts| (sink.lock())(verdicts)
        })
    }

    /// As [`Pool::start`], with every verdict sent on its own to the channel returned (as
    /// the tests and tools that follow verdicts one by one read them).
    pub fn start_channel(
        core: Arc<Core>,
        config: PoolConfig,
    ) -> (Pool, std::sync::mpsc::Receiver<Verdict>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let pool = Pool::start(core, config, move || {
            let tx = tx.clone();
            move |verdicts| {
                for v in verdicts {
                    // A reader that went away wants no more.
                    let _ = tx.send(v);
                }
            }
        });
        (pool, rx)
    }

    /// Waits for every thread (close the queue first).
    pub fn join(self) {
        for h in self.handles {
            let _ = h.join();
        }
    }
}

fn worker<S>(core: Arc<Core>, mut sink: S, batch: usize, seed: u64)
where
    S: FnMut(Vec<Verdict>) + Send + 'static,
{
    let mut rng = Rng::new(seed);
    loop {
        let pods = core
            .queue
            .pop_batch_flagged(batch, Duration::from_millis(200));
        if pods.is_empty() {
            if core.queue.is_closed() {
                return;
            }
            continue;
        }
        let popped = Instant::now();
        // Pods nominated by an earlier preemption try their nominated node first.
        let pods = if core.table.read().nominated.is_empty() {
            pods
        } else {
            let (rest, placed) = place_nominated(&core, pods, popped);
            if !placed.is_empty() {
                sink(placed);
            }
            if rest.is_empty() {
                continue;
            }
            rest
        };
        let (pods, flags): (Vec<_>, Vec<_>) = pods.into_iter().unzip();
        let first = pods[0].clone();
        // One scheduling attempt: a batch of pods of one signature, filtered, scored and
        // committed together.
        let _attempt = tracing::debug_span!(
            "scheduler.attempt",
            pod = %first.key(),
            pods = pods.len()
        )
        .entered();
        // Terms the table does not count yet are counted over every placed pod under an
        // upgradable read, beside the other workers, and only inserted under the write lock.
        if first.has_pod_terms() && !filter::terms_registered(&core.table.read(), &first) {
            let table = core.table.upgradable_read();
            let counted = filter::count_missing_terms(&table, &first);
            let mut table = RwLockUpgradableReadGuard::upgrade(table);
            for term in counted {
                table.insert_term(term);
            }
            filter::register_terms(&mut table, &first);
        }
        let (outcomes, node_version) = {
            let mut table = core.table.read();
            let outcomes = engine::schedule_batch_yielding(
                &mut table,
                &first,
                pods.len(),
                &core.kernels,
                &mut rng,
            );
            // Rows name the nodes they named when the batch began (it stops if the nodes
            // change), and the guard holds the table as it is now.
            let outcomes = outcomes
                .into_iter()
                .map(|o| match o {
                    Outcome::Placed { row, .. } => Some(Ok((row, table.names[row].clone()))),
                    Outcome::Unschedulable(d) => Some(Err(d)),
                    Outcome::Unplaced => None,
                })
                .collect();
            (outcomes, table.node_version)
        };
        core.stats.batches.fetch_add(1, Ordering::Relaxed);
        let verdicts = commit(
            &core,
            Proposal {
                pods,
                flags,
                outcomes,
                node_version,
                popped,
            },
            &mut rng,
        );
        sink(verdicts);
    }
}

/// kube-scheduler's first look at a nominated pod's node: each pod of the batch nominated
/// to a node that now takes it (its victims gone) is placed there at once, under the write
/// lock that ends its nomination, so no other pod can take the room between the two. The
/// others go on to the whole batch's attempt with their nominations held (their nominated
/// node cannot take them yet, so it costs them nothing there).
fn place_nominated(
    core: &Core,
    pods: Vec<(Arc<PodInfo>, PlacedFlag)>,
    popped: Instant,
) -> (Vec<(Arc<PodInfo>, PlacedFlag)>, Vec<Verdict>) {
    let mut rest = Vec::with_capacity(pods.len());
    let mut placed = Vec::new();
    let table = core.table.upgradable_read();
    if !pods
        .iter()
        .any(|(p, _)| table.nominated.contains_key(&p.id()))
    {
        return (pods, placed);
    }
    // The pods of a batch share a signature, so one context serves them all.
    let mut ctx = PodCtx::new(&table, &pods[0].0, &core.kernels);
    let mut table = RwLockUpgradableReadGuard::upgrade(table);
    let none = Resources::default();
    for (pod, flag) in pods {
        let id = pod.id();
        let Some((node, held)) = table.unnominate(&id) else {
            rest.push((pod, flag));
            continue;
        };
        let fits = table
            .row(&node)
            .is_some_and(|row| filter::check_row(&table, &pod, &ctx, row, &none, 0).is_empty());
        if fits && table.add_pod(pod.clone(), &node, true).is_ok() {
            if let Some(row) = table.row(&node) {
                ctx.place(&table, row);
            }
            let latency = popped.elapsed();
            core.stats.observe(latency);
            core.stats.placed.fetch_add(1, Ordering::Relaxed);
            core.stats.attempts.fetch_add(1, Ordering::Relaxed);
            flag.set();
            placed.push(Verdict::Placed { pod, node, latency });
        } else {
            table.nominate(held, &node);
            rest.push((pod, flag));
        }
    }
    (rest, placed)
}

/// Preemption for `pod`, which fit nowhere: decided under the write lock, with the pod's own
/// nomination (if it still has one) let go first, so that no commit comes between the
/// decision and the room it holds.
fn preempt(
    core: &Core,
    pod: &Arc<PodInfo>,
    diagnosis: &Diagnosis,
    rng: &mut Rng,
) -> preemption::Outcome {
    let budgets: Vec<preemption::Budget> = core.budgets.lock().values().cloned().collect();
    let mut table = core.table.write();
    let held = table.unnominate(&pod.id()).map(|(node, _)| node);
    let before = held
        .as_deref()
        .or(Some(pod.nominated_node.as_str()).filter(|n| !n.is_empty()));
    let outcome = preemption::preempt(&table, pod, diagnosis, before, &budgets, &core.kernels, rng);
    match &outcome {
        preemption::Outcome::Nominated(c) => {
            for d in &c.displaced {
                table.unnominate(&d.id());
            }
            table.nominate(pod.clone(), &c.node);
            core.stats.preemptions.fetch_add(1, Ordering::Relaxed);
            core.stats
                .victims
                .fetch_add(c.victims.len() as u64, Ordering::Relaxed);
        }
        preemption::Outcome::Waiting(node) => table.nominate(pod.clone(), node),
        preemption::Outcome::NotEligible(_) | preemption::Outcome::NotHelpful(_) => {}
    }
    outcome
}

/// Re-checks and commits one proposal; reports every pod to the queue (before the sink hears
/// of it: what happens once a verdict is out, the queue must be able to act on).
///
/// The re-check is what other workers' commits since the placement can have changed. While
/// no node has changed and nothing placed can turn this signature away (no pod terms of
/// its own, no placed pod's anti-affinity selecting it), that is each row's resources and
/// host ports: [`filter::still_fits`], O(1) per pod. Otherwise every filter runs again
/// against the table as it is now ([`filter::check_row`]).
fn commit(core: &Core, p: Proposal, rng: &mut Rng) -> Vec<Verdict> {
    let mut verdicts = Vec::with_capacity(p.pods.len());
    let mut unplaced = Vec::new();
    let mut retry = Vec::new();
    // The keys the table indexes each placement by, formatted before the lock.
    let placing: Vec<Option<Placing>> = p
        .pods
        .iter()
        .zip(&p.outcomes)
        .map(|(pod, o)| matches!(o, Some(Ok(_))).then(|| Placing::new(pod.clone())))
        .collect();
    let mut placed = Vec::with_capacity(placing.len());
    {
        // The checks and the index are done under an upgradable read, beside the other
        // workers' reads: no other writer can change the table before the upgrade. The
        // exclusive part is only counting the claimed pods in the columns.
        let table = core.table.upgradable_read();
        let first = &p.pods[0];
        // While no node changed, every row still is the node it was when placed.
        let same_nodes = table.node_version == p.node_version;
        // The worker registered the signature's terms before placing it, and the table
        // never forgets a term.
        let quick = same_nodes && !PodCtx::depends_on_pods(&table, first);
        let placing_any = placing.iter().any(Option::is_some);
        let mut ctx = (!quick && placing_any).then(|| PodCtx::new(&table, first, &core.kernels));
        // What this commit's claims put on each row, which the columns do not count until
        // the upgrade.
        let mut added: foldhash::HashMap<usize, Overlay> = Default::default();
        let none = Overlay::default();
        let mut claims = NodeTable::claims(&table);
        for (((pod, outcome), placing), flag) in
            p.pods.iter().zip(p.outcomes).zip(placing).zip(p.flags)
        {
            match (outcome, placing) {
                (Some(Ok((row, node))), Some(placing)) => {
                    let row = if same_nodes {
                        Some(row)
                    } else {
                        table.row(&node)
                    };
                    let fits = |row: usize| {
                        let o = added.get(&row).unwrap_or(&none);
                        if o.holds_ports_of(pod) {
                            return false;
                        }
                        if quick {
                            return filter::still_fits(&table, pod, row, &o.req, o.pods);
                        }
                        ctx.as_ref().is_some_and(|ctx| {
                            filter::check_row(&table, pod, ctx, row, &o.req, o.pods).is_empty()
                        })
                    };
                    // A pod the table accounts already was bound since it was popped.
                    match row.filter(|&row| fits(row)) {
                        Some(row) if claims.claim(placing, row) => {
                            added.entry(row).or_default().add(pod);
                            if let Some(ctx) = ctx.as_mut() {
                                ctx.place(&table, row);
                            }
                            placed.push((pod.clone(), flag, node));
                        }
                        _ => retry.push(pod.clone()),
                    }
                }
                (Some(Err(diagnosis)), _) => unplaced.push((pod.clone(), diagnosis)),
                _ => retry.push(pod.clone()),
            }
        }
        let claimed = claims.into_claimed();
        if !claimed.is_empty() {
            RwLockUpgradableReadGuard::upgrade(table).account_claimed(claimed);
        }
    }
    let placed: Vec<_> = placed
        .into_iter()
        .map(|(pod, flag, node)| {
            // Assumed from here on, before the binder hears of it.
            flag.set();
            (pod, node, p.popped.elapsed())
        })
        .collect();
    for (pod, node, latency) in placed {
        core.stats.observe(latency);
        verdicts.push(Verdict::Placed {
            pod,
            node: node.to_string(),
            latency,
        });
    }
    // Before the queue hears of them: a pod nominated is held back as unschedulable
    // (waiting for its victims) with its room already held.
    for (pod, diagnosis) in unplaced {
        let preemption = preempt(core, &pod, &diagnosis, rng);
        // The attempt's latency includes its preemption, as kube-scheduler's does.
        let latency = p.popped.elapsed();
        core.stats.observe(latency);
        verdicts.push(Verdict::Unschedulable {
            pod,
            diagnosis,
            latency,
            preemption,
        });
    }
    let placed = verdicts
        .iter()
        .filter(|v| matches!(v, Verdict::Placed { .. }))
        .count() as u64;
    let stats = &core.stats;
    stats
        .attempts
        .fetch_add(p.pods.len() as u64, Ordering::Relaxed);
    stats.placed.fetch_add(placed, Ordering::Relaxed);
    stats
        .unschedulable
        .fetch_add(verdicts.len() as u64 - placed, Ordering::Relaxed);
    stats
        .conflicts
        .fetch_add(retry.len() as u64, Ordering::Relaxed);
    // Placed pods were reported through their flags.
    let reports = verdicts.iter().filter_map(|v| match v {
        Verdict::Placed { .. } => None,
        Verdict::Unschedulable { pod, diagnosis, .. } => Some((
            pod.as_ref(),
            if diagnosis.blocked_by_pods() {
                Done::BlockedByPods
            } else {
                Done::Unschedulable
            },
        )),
    });
    core.queue
        .done_batch(reports.chain(retry.iter().map(|pod| (pod.as_ref(), Done::Retry))));
    verdicts
}
