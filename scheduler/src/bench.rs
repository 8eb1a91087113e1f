//! The in-process scheduler benchmark: a synthetic cluster and workload (see `synth`),
//! every pod through the queue, the workers and the committer, timed from the workers'
//! start, with every pod queued, to the last one committed. Reports throughput, attempt latency and placement
//! quality (how evenly the nodes ended up used, and a recount proving nothing overcommitted).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

use crate::kernels::Kernels;
use crate::model::{NodeInfo, PodInfo};
use crate::parallel::{Core, Pool, PoolConfig, Verdict};
use crate::synth::{self, Profile};

#[derive(Debug, Clone)]
pub struct Config {
    pub nodes: usize,
    pub pods: usize,
    pub workers: usize,
    pub batch: usize,
    pub profile: Profile,
    pub seed: u64,
    pub scalar: bool,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// Recorded latencies: an HDR histogram of microseconds with three significant figures, so
/// every percentile is within 0.1 % and the recorder stays a few tens of kilobytes however
/// many samples a benchmark takes (it runs on the machine it measures). Every benchmark
/// records its latencies here and reports them as [`Percentiles`].
#[derive(Debug, Clone)]
pub struct Latencies(hdrhistogram::Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        Latencies::new()
    }
}

impl Latencies {
    pub fn new() -> Self {
        match hdrhistogram::Histogram::new(3) {
            Ok(h) => Latencies(h),
            // Three significant figures is within the histogram's range (0 to 5).
            Err(e) => unreachable!("histogram precision: {e}"),
        }
    }

    /// Records one sample, at microsecond resolution. The histogram grows to take any value
    /// (`saturating_record` would clamp to its current range instead of growing it).
    pub fn record(&mut self, d: Duration) {
        let us = d.as_micros().min(u128::from(u64::MAX)) as u64;
        if self.0.record(us).is_err() {
            // Only a value beyond what any histogram can hold: keep its largest.
            self.0.saturating_record(us);
        }
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Latencies) {
        // Both histograms auto-resize, so adding cannot run out of range.
        let _ = self.0.add(&other.0);
    }

    pub fn len(&self) -> u64 {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The percentiles, in milliseconds (all zero without samples).
    pub fn percentiles(&self) -> Percentiles {
        if self.0.is_empty() {
            return Percentiles::default();
        }
        let at = |q: f64| self.0.value_at_quantile(q) as f64 / 1000.0;
        Percentiles {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            p999: at(0.999),
            max: self.0.max() as f64 / 1000.0,
        }
    }
}

impl FromIterator<Duration> for Latencies {
    fn from_iter<I: IntoIterator<Item = Duration>>(iter: I) -> Self {
        let mut l = Latencies::new();
        for d in iter {
            l.record(d);
        }
        l
    }
}

impl<'a> FromIterator<&'a Duration> for Latencies {
    fn from_iter<I: IntoIterator<Item = &'a Duration>>(iter: I) -> Self {
        iter.into_iter().copied().collect()
    }
}

/// What one benchmark run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub profile: &'static str,
    pub nodes: usize,
    pub pods: usize,
    pub workers: usize,
    pub batch: usize,
    pub kernels: &'static str,
    pub seconds: f64,
    pub pods_per_second: f64,
    pub placed: usize,
    pub unschedulable: usize,
    pub conflicts: u64,
    pub batches: u64,
    /// Attempt latency (popped from the queue → committed), per pod; the pods of one batch
    /// share their batch's.
    pub attempt_ms: Percentiles,
    /// CPU requested / allocatable over the nodes: min, mean, max, standard deviation.
    pub cpu_utilisation: [f64; 4],
    /// Nodes whose requests exceed what they can allocate, recounted from the pods.
    pub overcommitted_nodes: usize,
}

/// A latch the pool's sink sets once every pod is decided, and the benchmark waits on.
#[derive(Debug, Default)]
struct Latch(std::sync::Mutex<bool>, std::sync::Condvar);

impl Latch {
    fn set(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.1.notify_all();
    }

    fn wait(&self) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        while !*g {
            g = self
                .1
                .wait_timeout(g, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// A pod with a verdict, known by its namespace and name.
struct Decided(Arc<PodInfo>);

impl Decided {
    fn shard(&self, shards: usize) -> usize {
        use std::hash::BuildHasher;
        (foldhash::fast::FixedState::default().hash_one(self) % shards as u64) as usize
    }
}

impl std::hash::Hash for Decided {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.namespace.hash(state);
        self.0.name.hash(state);
    }
}

impl PartialEq for Decided {
    fn eq(&self, other: &Self) -> bool {
        self.0.namespace == other.0.namespace && self.0.name == other.0.name
    }
}

impl Eq for Decided {}

/// Runs the benchmark; `progress` is called with the count of pods decided so far.
pub fn run(config: &Config, progress: impl Fn(usize) + Send + Sync + 'static) -> Report {
    let kernels = if config.scalar {
        Kernels::scalar()
    } else {
        Kernels::auto()
    };
    let core = Arc::new(Core::new(kernels));
    let (nodes, pods) = synth::workload(config.nodes, config.pods, config.profile, config.seed);
    {
        let mut t = core.table.write();
        for n in &nodes {
            t.upsert_node(NodeInfo::from_node(n));
        }
    }
    // Every pod is pending before the clock starts, as when a scheduler comes up behind a
    // backlog: what is timed is the scheduler's own work (queue, workers, commits), not the
    // informer's (decoding pods and handing them over), which the service does on its own
    // thread as events arrive.
    core.queue
        .add_many(pods.iter().map(|p| Arc::new(PodInfo::from_pod(p))));
    drop(pods);
    let decided = Arc::new(AtomicUsize::new(0));
    // One histogram per worker, merged at the end: the sinks share no lock while every
    // pod is placed.
    let latencies = Arc::new(Mutex::new(Vec::<Arc<Mutex<Latencies>>>::new()));
    let unschedulable = Arc::new(AtomicUsize::new(0));
    // Every pod with a verdict, in shards (a pod's verdicts can reach two workers' sinks in
    // either order: one's unschedulable verdict, then another's placement of it).
    const SHARDS: usize = 64;
    let seen: Arc<Vec<Mutex<foldhash::HashSet<Decided>>>> = Arc::new(
        (0..SHARDS)
            .map(|_| {
                let room = config.pods / SHARDS + config.pods / SHARDS / 4 + 16;
                Mutex::new(foldhash::HashSet::with_capacity_and_hasher(
                    room,
                    Default::default(),
                ))
            })
            .collect(),
    );
    let done = Arc::new(Latch::default());
    let total = config.pods;
    let progress = Arc::new(progress);
    let shown = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let pool = Pool::start(
        core.clone(),
        PoolConfig {
            workers: config.workers,
            batch: config.batch,
            seed: config.seed,
        },
        || {
            let mine = Arc::new(Mutex::new(Latencies::new()));
            latencies.lock().push(mine.clone());
            let (d, u, s, dn, progress, shown) = (
                decided.clone(),
                unschedulable.clone(),
                seen.clone(),
                done.clone(),
                progress.clone(),
                shown.clone(),
            );
            move |verdicts: Vec<Verdict>| {
                let mut lat = mine.lock();
                let mut new = 0;
                for v in verdicts {
                    let (pod, latency, placed) = match &v {
                        Verdict::Placed { pod, latency, .. } => (pod, *latency, true),
                        Verdict::Unschedulable { pod, latency, .. } => (pod, *latency, false),
                    };
                    lat.record(latency);
                    let decided = Decided(pod.clone());
                    let shard = &s[decided.shard(s.len())];
                    // A pod counts once: its first unschedulable verdict, or its placement.
                    if shard.lock().insert(decided) {
                        new += 1;
                        if !placed {
                            u.fetch_add(1, Ordering::Relaxed);
                        }
                    } else if placed {
                        u.fetch_sub(1, Ordering::Relaxed);
                    }
                }
                let now = d.fetch_add(new, Ordering::Relaxed) + new;
                // Sinks report at once: the highest count shown so far is what is shown.
                progress(shown.fetch_max(now, Ordering::Relaxed).max(now));
                if now >= total {
                    dn.set();
                }
            }
        },
    );
    if total > 0 {
        done.wait();
    }
    let seconds = start.elapsed().as_secs_f64();
    core.queue.close();
    pool.join();

    let table = core.table.read();
    let mut util = Vec::with_capacity(table.len());
    let mut overcommitted = 0;
    for row in 0..table.len() {
        let (mut cpu, mut mem, mut n) = (0i64, 0i64, 0i64);
        for e in table.pods_on(row) {
            cpu += e.info.requests.milli_cpu;
            mem += e.info.requests.memory;
            n += 1;
        }
        if cpu > table.alloc_cpu[row] || mem > table.alloc_mem[row] || n > table.alloc_pods[row] {
            overcommitted += 1;
        }
        util.push(cpu as f64 / table.alloc_cpu[row].max(1) as f64);
    }
    let mean = util.iter().sum::<f64>() / util.len().max(1) as f64;
    let var = util.iter().map(|u| (u - mean).powi(2)).sum::<f64>() / util.len().max(1) as f64;
    let min = util.iter().copied().fold(f64::INFINITY, f64::min);
    let max = util.iter().copied().fold(0.0, f64::max);
    let stats = &core.stats;
    let unsched = unschedulable.load(Ordering::Relaxed);
    Report {
        profile: config.profile.name(),
        nodes: config.nodes,
        pods: config.pods,
        workers: config.workers,
        batch: config.batch,
        kernels: core.kernels.name,
        seconds,
        pods_per_second: config.pods as f64 / seconds.max(1e-9),
        placed: config.pods - unsched,
        unschedulable: unsched,
        conflicts: stats.conflicts.load(Ordering::Relaxed),
        batches: stats.batches.load(Ordering::Relaxed),
        attempt_ms: latencies
            .lock()
            .iter()
            .fold(Latencies::new(), |mut all, one| {
                all.merge(&one.lock());
                all
            })
            .percentiles(),
        cpu_utilisation: [
            if min.is_finite() { min } else { 0.0 },
            mean,
            max,
            var.sqrt(),
        ],
        overcommitted_nodes: overcommitted,
    }
}

/// Settings of the preemption benchmark: `nodes` nodes (`synth`'s, 4 cores each), each full
/// with `per_node` pods of priority 0, then `pods` pods of priority 1000, each asking for
/// the room of `victims_each` of them.
#[derive(Debug, Clone)]
pub struct PreemptionConfig {
    pub nodes: usize,
    pub per_node: usize,
    pub pods: usize,
    pub victims_each: usize,
    pub workers: usize,
    pub seed: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PreemptionReport {
    pub nodes: usize,
    pub pods_on_nodes: usize,
    pub preemptors: usize,
    pub workers: usize,
    /// Preemptors nominated (victims chosen) per second, from the workers' start.
    pub nominations_per_second: f64,
    pub seconds: f64,
    pub nominated: usize,
    pub victims: usize,
    /// Attempt latency of a preemptor, filters and the preemption dry run over every node
    /// included (popped from the queue → nominated).
    pub attempt_ms: Percentiles,
    /// Nominations with a victim not of lower priority or not held in the table, and nodes
    /// over what they can allocate once the victims are gone (must be 0).
    pub wrong: usize,
}

/// Runs the preemption benchmark: every preemptor is tried once against the full cluster;
/// its victims go as soon as they are chosen (a node agent confirming the deletions at
/// once), so later preemptors see the nodes as they now are, nominations included.
pub fn preemption(config: &PreemptionConfig) -> PreemptionReport {
    let core = Arc::new(Core::new(Kernels::auto()));
    let per_node = config.per_node.max(1) as i64;
    let (nodes, _) = synth::workload(config.nodes, 0, Profile::Basic, config.seed);
    let mut slot = 0i64;
    {
        let mut t = core.table.write();
        for (i, n) in nodes.iter().enumerate() {
            let info = NodeInfo::from_node(n);
            slot = info.allocatable.milli_cpu / per_node;
            t.upsert_node(info.clone());
            for j in 0..per_node {
                let mut p = PodInfo {
                    namespace: "bench".into(),
                    name: format!("low-{i}-{j}"),
                    uid: format!("low-{i}-{j}"),
                    start_time: Some(j),
                    ..PodInfo::default()
                };
                p.requests.milli_cpu = slot;
                let _ = t.add_pod(Arc::new(p), &info.name, false);
            }
        }
    }
    core.queue.add_many((0..config.pods).map(|i| {
        let mut p = PodInfo {
            namespace: "bench".into(),
            name: format!("high-{i}"),
            uid: format!("high-{i}"),
            priority: 1000,
            ..PodInfo::default()
        };
        p.requests.milli_cpu = slot * config.victims_each.max(1) as i64;
        Arc::new(p)
    }));
    let latencies = Arc::new(Mutex::new(Latencies::new()));
    let counts = Arc::new(Mutex::new((0usize, 0usize, 0usize, 0usize)));
    let done = Arc::new(Latch::default());
    let total = config.pods;
    let (l, c, dn, sink_core) = (
        latencies.clone(),
        counts.clone(),
        done.clone(),
        core.clone(),
    );
    let start = Instant::now();
    let pool = Pool::start_shared(
        core.clone(),
        PoolConfig {
            workers: config.workers,
            batch: 256,
            seed: config.seed,
        },
        move |verdicts| {
            let mut counts = c.lock();
            for v in verdicts {
                let Verdict::Unschedulable {
                    pod,
                    latency,
                    preemption,
                    ..
                } = v
                else {
                    continue;
                };
                counts.0 += 1;
                l.lock().record(latency);
                let crate::preemption::Outcome::Nominated(n) = preemption else {
                    continue;
                };
                counts.1 += 1;
                let mut t = sink_core.table.write();
                for v in &n.victims {
                    // A preemptor decided in the same batch as another may share its
                    // victims (still terminating then): each goes, and counts, once.
                    counts.2 += usize::from(t.remove_pod(&v.id()).is_some());
                }
                let right = n.victims.iter().all(|v| v.priority < pod.priority)
                    && t.nominated
                        .get(&pod.id())
                        .is_some_and(|(at, _)| *at == n.node);
                counts.3 += usize::from(!right);
            }
            if counts.0 >= total {
                dn.set();
            }
        },
    );
    if total > 0 {
        done.wait();
    }
    let seconds = start.elapsed().as_secs_f64();
    core.queue.close();
    pool.join();
    let (_, nominated, victims, mut wrong) = *counts.lock();
    // With every victim gone, each node holds what it runs and the room nominated on it
    // within what it can allocate.
    let t = core.table.read();
    wrong += (0..t.len())
        .filter(|&row| t.req_cpu[row] > t.alloc_cpu[row] || t.req_pods[row] > t.alloc_pods[row])
        .count();
    PreemptionReport {
        nodes: config.nodes,
        pods_on_nodes: config.nodes * config.per_node,
        preemptors: config.pods,
        workers: config.workers,
        nominations_per_second: nominated as f64 / seconds.max(1e-9),
        seconds,
        nominated,
        victims,
        attempt_ms: latencies.lock().percentiles(),
        wrong,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_grow_to_any_value_and_read_back_within_a_thousandth() {
        let l: Latencies = (1..=1000u64).map(Duration::from_millis).collect();
        assert_eq!(l.len(), 1000);
        let p = l.percentiles();
        let near = |got: f64, want: f64| (got - want).abs() <= want / 1000.0 + 0.001;
        assert!(near(p.p50, 500.0), "{p:?}");
        assert!(near(p.p99, 990.0), "{p:?}");
        assert!(near(p.max, 1000.0), "{p:?}");
        let mut merged = Latencies::new();
        merged.merge(&l);
        merged.record(Duration::from_secs(60));
        assert!(
            near(merged.percentiles().max, 60_000.0),
            "{:?}",
            merged.percentiles()
        );
    }

    #[test]
    fn every_preemptor_is_nominated_with_lower_victims_that_make_room() {
        let r = preemption(&PreemptionConfig {
            nodes: 50,
            per_node: 10,
            pods: 100,
            victims_each: 2,
            workers: 2,
            seed: 3,
        });
        assert_eq!((r.nominated, r.wrong), (100, 0), "{r:?}");
        assert!((200..=300).contains(&r.victims), "{r:?}");
    }
}
