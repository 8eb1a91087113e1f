//! `skiff bench soak`: a cluster of `skiff up`'s under steady churn for a long time (an hour
//! by default). Pods are created at a steady rate, each one deleted a while after it runs, and
//! a store member is killed (kill -9; `up` starts it again) every few minutes, in turn.
//!
//! Throughout, every process's resident memory and each member's database size are sampled
//! from their metrics, written as CSV and charted (SVG), and summed up as growth per minute in
//! each half of the run: what levels off shows flat in the second half. At the end it stops
//! the cluster and counts the pods that never ran and the ERROR lines in every process's log,
//! its stop included; either fails the run.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use parking_lot::Mutex;
use skiff_proto::api::{Kind, Object, PodPhase};
use skiff_proto::client::{ClusterClient, Code, Event, Informer, ListParams};
use skiff_proto::http::HttpClient;
use skiff_proto::metrics;
use skiff_scheduler::bench::Latencies;

use super::fixtures;
use crate::plot::{self, Series, XAxis};
use crate::up::{Cluster, Workload};

#[derive(Debug, clap::Args)]
#[group(id = "soak")]
pub struct Args {
    /// The cluster to start, as `skiff up` takes it (`--nodes 1000`, `--data-dir` …).
    #[command(flatten)]
    cluster: crate::up::Args,
    #[command(flatten)]
    plan: Plan,
}

/// The churn.
#[derive(Debug, clap::Args)]
struct Plan {
    /// How long to churn.
    #[arg(long, default_value = "1h", value_parser = skiff_proto::duration::parse)]
    duration: Duration,
    /// Pods created per second (and, once the first have lived their time, deleted).
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// How long a pod lives once Running, before it is deleted.
    #[arg(long, default_value = "30s", value_parser = skiff_proto::duration::parse)]
    lifetime: Duration,
    /// A store member is killed this often, each in turn (0s: never).
    #[arg(long, default_value = "10m", value_parser = skiff_proto::duration::parse)]
    restart_every: Duration,
    /// Memory and database size are sampled this often.
    #[arg(long, default_value = "10s", value_parser = skiff_proto::duration::parse)]
    sample_every: Duration,
    /// A pod not Running this long after its create was sent counts as one that never ran.
    #[arg(long, default_value = "2m", value_parser = skiff_proto::duration::parse)]
    run_within: Duration,
    /// Where the samples (`samples.csv`) and their charts (`memory.svg`, `database.svg`) go.
    #[arg(long, default_value = "soak")]
    out: PathBuf,
}

/// The most creates and deletes in flight at once.
const IN_FLIGHT: usize = 256;

pub fn run(Args { cluster, plan }: Args) -> Result<ExitCode> {
    if plan.rate <= 0.0 || plan.duration.is_zero() || plan.sample_every.is_zero() {
        bail!("--rate, --duration and --sample-every must be positive");
    }
    std::fs::create_dir_all(&plan.out)
        .with_context(|| format!("creating {}", plan.out.display()))?;
    if cluster.demo_dir().is_some() {
        bail!("--demo runs the demo workload; a benchmark's cannot run with it");
    }
    let workload: Workload<'_> = Box::new(move |rt, c| soak(rt, c, &plan));
    crate::up::run_then(cluster, Some(workload))
}

/// What the churn has done so far; shared by its tasks (held only for map operations).
#[derive(Default)]
struct Pods {
    /// Pods created (or being created) and not yet seen Running: how far each has come.
    pending: HashMap<String, Progress>,
    /// Pods seen Running, to delete once their time is up, in the order they ran.
    to_delete: VecDeque<(Instant, String)>,
    /// The stages of every pod that ran.
    to_running: Vec<Stages>,
    /// Running since the last report.
    window: Vec<Stages>,
}

/// A pod on its way to Running: when its create was sent, answered, and seen bound.
#[derive(Clone, Copy)]
struct Progress {
    sent: Instant,
    created: Option<Instant>,
    bound: Option<Instant>,
}

/// Where a pod's time went from its create to Running: the create (sent → answered, retries
/// included), the scheduler (answered → seen bound) and the node (bound → seen Running). A
/// stage seen out of order (the watch shows the pod bound before the create's answer
/// arrives) counts as zero, so the three add up to the whole.
#[derive(Clone, Copy, Default)]
struct Stages {
    total: Duration,
    create: Duration,
    bind: Duration,
    run: Duration,
}

impl Progress {
    fn stages(&self, running: Instant) -> Stages {
        let created = self.created.unwrap_or(running).clamp(self.sent, running);
        let bound = self.bound.unwrap_or(running).clamp(created, running);
        Stages {
            total: running - self.sent,
            create: created - self.sent,
            bind: bound - created,
            run: running - bound,
        }
    }
}

/// One stage of a pod's time.
type Stage = fn(&Stages) -> Duration;

/// The stages as the report names them.
const STAGES: [(&str, Stage); 3] = [
    ("create sent → answered", |s| s.create),
    ("answered → bound", |s| s.bind),
    ("bound → Running", |s| s.run),
];

/// The percentiles of one stage of `stages`.
fn percentiles(stages: &[Stages], stage: Stage) -> skiff_scheduler::bench::Percentiles {
    stages
        .iter()
        .map(stage)
        .collect::<Latencies>()
        .percentiles()
}

#[derive(Default)]
struct Counts {
    created: AtomicU64,
    deleted: AtomicU64,
    create_retries: AtomicU64,
    delete_retries: AtomicU64,
    /// Creates and deletes refused for good (a bug the soak reports).
    refused: AtomicU64,
}

/// One sample of one process.
struct Sample {
    at: Duration,
    process: String,
    resident: f64,
    /// A store member's database size.
    database: Option<f64>,
}

fn soak(rt: &tokio::runtime::Runtime, cluster: &mut Cluster, plan: &Plan) -> Result<ExitCode> {
    let api = ClusterClient::connect_with(&cluster.endpoints(), cluster.client_tls().as_ref())?;
    let (ns, _) = rt.block_on(fixtures::fresh_namespace(&api, "soak"))?;
    let alive = plan.rate * plan.lifetime.as_secs_f64();
    println!(
        "==> soak for {}: {} pods/s created and deleted (about {alive:.0} alive) in namespace {ns}; {}",
        humantime(plan.duration),
        plan.rate,
        if plan.restart_every.is_zero() {
            "no member killed".to_string()
        } else {
            format!(
                "a store member killed every {}",
                humantime(plan.restart_every)
            )
        },
    );
    let pods = Arc::new(Mutex::new(Pods::default()));
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();

    let watcher = rt.spawn(follow(api.clone(), ns.clone(), pods.clone(), plan.lifetime));
    let creator = rt.spawn(create(
        api.clone(),
        ns.clone(),
        plan.rate,
        pods.clone(),
        counts.clone(),
        stop.clone(),
    ));
    let deleter = rt.spawn(delete(
        api.clone(),
        ns.clone(),
        pods.clone(),
        counts.clone(),
        stop.clone(),
    ));

    let urls = cluster.metrics_urls();
    let http = HttpClient::new();
    let mut samples = Vec::new();
    let mut next_sample = start;
    let mut next_report = start + Duration::from_secs(60);
    let mut next_kill = (!plan.restart_every.is_zero()).then(|| start + plan.restart_every);
    let mut kills = 0usize;
    let end = start + plan.duration;
    let mut healthy = true;
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let interrupted = interrupted.clone();
        rt.spawn(async move {
            crate::signals::terminated().await;
            interrupted.store(true, Ordering::Relaxed);
        });
    }
    while Instant::now() < end {
        if !cluster.supervise() {
            healthy = false;
            println!("a process that is not restarted exited; ending the soak");
            break;
        }
        if interrupted.load(Ordering::Relaxed) {
            healthy = false;
            println!("interrupted; ending the soak");
            break;
        }
        if counts.refused.load(Ordering::Relaxed) > 0 {
            healthy = false;
            println!("the store refused a create or delete for good; ending the soak");
            break;
        }
        let now = Instant::now();
        if now >= next_sample {
            samples.extend(rt.block_on(sample(&http, &urls, start.elapsed())));
            next_sample += plan.sample_every;
        }
        if let Some(at) = next_kill
            && now >= at
        {
            let member = kills % 3;
            println!(
                "  {:>6}  kill -9 of store member {} (up starts it again)",
                clock(start.elapsed()),
                ["a", "b", "c"][member]
            );
            cluster.kill_member(member);
            kills += 1;
            next_kill = Some(at + plan.restart_every);
        }
        if now >= next_report {
            println!(
                "  {:>6}  {}",
                clock(start.elapsed()),
                progress(&pods, &counts, &samples)
            );
            next_report += Duration::from_secs(60);
        }
        rt.block_on(tokio::time::sleep(Duration::from_millis(100)));
    }
    stop.store(true, Ordering::Relaxed);
    rt.block_on(async {
        let _ = creator.await;
        let _ = deleter.await;
    });
    // The last pods created get their time to run.
    let deadline = Instant::now() + plan.run_within;
    while Instant::now() < deadline
        && !pods.lock().pending.is_empty()
        && !interrupted.load(Ordering::Relaxed)
    {
        cluster.supervise();
        rt.block_on(tokio::time::sleep(Duration::from_millis(200)));
    }
    watcher.abort();
    samples.extend(rt.block_on(sample(&http, &urls, start.elapsed())));
    println!("==> deleting the soak's namespace");
    rt.block_on(fixtures::remove_namespace(&api, &ns, IN_FLIGHT));
    // The logs are read once every process has stopped: what they log as they stop (a
    // member handing over leadership, a follower seeing it go) counts too.
    println!("==> stopping the cluster");
    cluster.stop();

    let pods = pods.lock();
    let never_ran = pods.pending.len();
    let created = counts.created.load(Ordering::Relaxed);
    let latencies = percentiles(&pods.to_running, |s| s.total);
    println!(
        "soak: {} in {}: {created} pods created, {} Running, {never_ran} never ran, {} deleted; {kills} member kills",
        if healthy { "done" } else { "ended early" },
        humantime(start.elapsed()),
        pods.to_running.len(),
        counts.deleted.load(Ordering::Relaxed),
    );
    println!(
        "  create sent → Running   p50 {:>6.0} ms   p90 {:>6.0} ms   p99 {:>6.0} ms   max {:>6.0} ms",
        latencies.p50, latencies.p90, latencies.p99, latencies.max
    );
    for (stage, of) in STAGES {
        let p = percentiles(&pods.to_running, of);
        println!(
            "    {stage:<21} p50 {:>6.0} ms   p90 {:>6.0} ms   p99 {:>6.0} ms   max {:>6.0} ms",
            p.p50, p.p90, p.p99, p.max
        );
    }
    let refused = counts.refused.load(Ordering::Relaxed);
    println!(
        "  retried: {} creates, {} deletes (a member away or a leader changing); refused: {refused}",
        counts.create_retries.load(Ordering::Relaxed),
        counts.delete_retries.load(Ordering::Relaxed)
    );
    print!("{}", growth_table(&samples));
    write_samples(&plan.out, &samples)?;
    let errors = errors_in_logs(&cluster.logs())?;
    if errors.is_empty() {
        println!("  logs: no ERROR line in {}", cluster.logs().display());
    } else {
        println!("  logs: ERROR lines:");
        for (file, count, first) in &errors {
            println!("    {file}: {count}, the first: {first}");
        }
    }
    Ok(
        if healthy && never_ran == 0 && refused == 0 && errors.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        },
    )
}

/// `1h`, `10m`, `90s`, as the flags take them.
fn humantime(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s >= 3600 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// Minutes and seconds since the start, `12:05`.
fn clock(d: Duration) -> String {
    format!("{}:{:02}", d.as_secs() / 60, d.as_secs() % 60)
}

/// Sends `request` until it is done: answered, or failed with `done` (a create whose first
/// answer was lost, a delete of a pod already gone). A failure of the store's (away, no
/// leader, a timeout) is sent again 200 ms later and counted in `retries`; the error of a
/// refusal (invalid, forbidden, out of space), which the soak reports, is returned.
async fn until_done<F, Fut>(
    mut request: F,
    done: Code,
    retries: &AtomicU64,
) -> Result<(), skiff_proto::client::ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = skiff_proto::client::Result<Object>>,
{
    loop {
        match request().await {
            Ok(_) => return Ok(()),
            Err(e) if e.code() == Some(done) => return Ok(()),
            // A refusal that retrying will not change: invalid, forbidden, or the store out
            // of space (its NOSPACE alarm stays raised until an operator disarms it).
            Err(e)
                if !matches!(
                    e.code(),
                    Some(
                        Code::InvalidArgument
                            | Code::PermissionDenied
                            | Code::Unauthenticated
                            | Code::ResourceExhausted
                    )
                ) =>
            {
                retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Creates `rate` pods a second until `stop`, each retried until the store takes it.
async fn create(
    api: ClusterClient,
    ns: String,
    rate: f64,
    pods: Arc<Mutex<Pods>>,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let step = Duration::from_secs_f64(1.0 / rate);
    let start = tokio::time::Instant::now();
    for i in 0u64.. {
        tokio::time::sleep_until(start + step.mul_f64(i as f64)).await;
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let (api, ns, pods, counts) = (api.clone(), ns.clone(), pods.clone(), counts.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let name = format!("s-{i:08}");
            // A grace period of a second: its agent stops it and then deletes it.
            let Ok(object) = fixtures::pod(&ns, &name, "soak", "10m", 1) else {
                return;
            };
            let sent = Instant::now();
            pods.lock().pending.insert(
                name.clone(),
                Progress {
                    sent,
                    created: None,
                    bound: None,
                },
            );
            // AlreadyExists: a retry after a create that landed but whose answer was lost.
            let create = || api.create(&object);
            if let Err(e) = until_done(create, Code::AlreadyExists, &counts.create_retries).await {
                eprintln!("the soak's create of {name} was refused: {e}");
                pods.lock().pending.remove(&name);
                counts.refused.fetch_add(1, Ordering::Relaxed);
                return;
            }
            if let Some(p) = pods.lock().pending.get_mut(&name) {
                p.created = Some(Instant::now());
            }
            counts.created.fetch_add(1, Ordering::Relaxed);
        });
    }
    // Creates in flight finish.
    let _ = slots.acquire_many(IN_FLIGHT as u32).await;
}

/// Follows the namespace's pods: one seen Running is timed and queued for deletion.
async fn follow(api: ClusterClient, ns: String, pods: Arc<Mutex<Pods>>, lifetime: Duration) {
    let mut informer = Informer::new(api, Kind::Pod, ListParams::default().namespace(&ns));
    let result = informer
        .run(|event, _| {
            let (Event::Added(Object::Pod(p)) | Event::Modified(Object::Pod(p))) = event else {
                return;
            };
            let mut pods = pods.lock();
            if p.phase() != Some(PodPhase::Running) {
                if !p.spec.node_name.is_empty()
                    && let Some(progress) = pods.pending.get_mut(&p.metadata.name)
                {
                    progress.bound.get_or_insert_with(Instant::now);
                }
                return;
            }
            if let Some(progress) = pods.pending.remove(&p.metadata.name) {
                let now = Instant::now();
                let stages = progress.stages(now);
                pods.to_running.push(stages);
                pods.window.push(stages);
                pods.to_delete
                    .push_back((now + lifetime, p.metadata.name.clone()));
            }
        })
        .await;
    if let Err(e) = result {
        eprintln!("the soak's pod watch ended: {e}");
    }
}

/// Deletes each Running pod once its time is up, until `stop`.
async fn delete(
    api: ClusterClient,
    ns: String,
    pods: Arc<Mutex<Pods>>,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    while !stop.load(Ordering::Relaxed) {
        let due = {
            let mut pods = pods.lock();
            let now = Instant::now();
            let mut due = Vec::new();
            while pods.to_delete.front().is_some_and(|(at, _)| *at <= now) {
                if let Some((_, name)) = pods.to_delete.pop_front() {
                    due.push(name);
                }
            }
            due
        };
        for name in due {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let (api, ns, counts) = (api.clone(), ns.clone(), counts.clone());
            tokio::spawn(async move {
                let _slot = slot;
                let delete = || api.delete(Kind::Pod, &ns, &name, 0, None);
                if let Err(e) = until_done(delete, Code::NotFound, &counts.delete_retries).await {
                    eprintln!("the soak's delete of {name} was refused: {e}");
                    counts.refused.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                counts.deleted.fetch_add(1, Ordering::Relaxed);
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = slots.acquire_many(IN_FLIGHT as u32).await;
}

/// Each process's resident memory, and each member's database size, now; a process that does
/// not answer (a member being restarted) is missing from this sample.
async fn sample(http: &HttpClient, urls: &[(String, String)], at: Duration) -> Vec<Sample> {
    let mut out = Vec::new();
    for (process, url) in urls {
        let Ok(answer) = http.get(url, Duration::from_secs(2)).await else {
            continue;
        };
        let text = answer.text();
        if let Some(resident) = metrics::sample(&text, "process_resident_memory_bytes") {
            out.push(Sample {
                at,
                process: process.clone(),
                resident,
                database: metrics::sample(&text, "etcd_mvcc_db_total_size_in_bytes"),
            });
        }
    }
    out
}

/// The last minute: pods alive, created, Running (and their p99), deleted; the members' memory.
fn progress(pods: &Mutex<Pods>, counts: &Counts, samples: &[Sample]) -> String {
    let mut pods = pods.lock();
    let window = std::mem::take(&mut pods.window);
    let p99 = |of| percentiles(&window, of).p99;
    let mut line = format!(
        "created {:>7}  Running {:>7} (last minute {:>5}, p99 {:>5.0} ms: create {:.0}, bind {:.0}, run {:.0})  deleted {:>7}  waiting to run {:>5}",
        counts.created.load(Ordering::Relaxed),
        pods.to_running.len(),
        window.len(),
        p99(|s| s.total),
        p99(STAGES[0].1),
        p99(STAGES[1].1),
        p99(STAGES[2].1),
        counts.deleted.load(Ordering::Relaxed),
        pods.pending.len(),
    );
    let newest = samples.last().map(|s| s.at);
    for s in samples.iter().rev().take_while(|s| Some(s.at) == newest) {
        if let Some(db) = s.database {
            let _ = write!(
                line,
                "  {} {:.0}/{:.0} MB",
                s.process.trim_start_matches("store-"),
                s.resident / 1e6,
                db / 1e6
            );
        }
    }
    line
}

/// Growth per minute of each series over the first and the second half of the run, and its
/// last value: a series that levels off grows far less in the second half.
fn growth_table(samples: &[Sample]) -> String {
    let Some(end) = samples.iter().map(|s| s.at).max() else {
        return "  no samples\n".into();
    };
    let half = end / 2;
    let mut out =
        String::from("  series                          first half      second half     last\n");
    for (name, points) in series(samples) {
        let rate = |from: Duration, to: Duration| {
            let inside: Vec<&(f64, f64)> = points
                .iter()
                .filter(|(t, _)| *t >= from.as_secs_f64() && *t <= to.as_secs_f64())
                .collect();
            let (first, last) = (inside.first()?, inside.last()?);
            let minutes = (last.0 - first.0) / 60.0;
            (minutes > 0.0).then(|| (last.1 - first.1) / minutes)
        };
        let fmt = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:+.2} MB/min"));
        let _ = writeln!(
            out,
            "  {name:<30}  {:<14}  {:<14}  {:.1} MB",
            fmt(rate(Duration::ZERO, half)),
            fmt(rate(half, end)),
            points.last().map_or(0.0, |p| p.1),
        );
    }
    out
}

/// The samples as named series of (seconds, MB): each process's resident memory, then each
/// member's database size.
fn series(samples: &[Sample]) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut names: Vec<String> = Vec::new();
    let mut seen = HashSet::new();
    for s in samples {
        if seen.insert(s.process.clone()) {
            names.push(s.process.clone());
        }
    }
    let mut out = Vec::new();
    for name in &names {
        let of = samples.iter().filter(|s| &s.process == name);
        out.push((
            format!("{name} resident"),
            of.clone()
                .map(|s| (s.at.as_secs_f64(), s.resident / 1e6))
                .collect(),
        ));
        let db: Vec<(f64, f64)> = of
            .filter_map(|s| Some((s.at.as_secs_f64(), s.database? / 1e6)))
            .collect();
        if !db.is_empty() {
            out.push((format!("{name} database"), db));
        }
    }
    out
}

/// `samples.csv`, `memory.svg` and `database.svg` under `dir`.
fn write_samples(dir: &Path, samples: &[Sample]) -> Result<()> {
    let mut csv = String::from("seconds,process,resident_bytes,database_bytes\n");
    for s in samples {
        let _ = writeln!(
            csv,
            "{:.1},{},{:.0},{}",
            s.at.as_secs_f64(),
            s.process,
            s.resident,
            s.database.map_or(String::new(), |d| format!("{d:.0}"))
        );
    }
    let path = dir.join("samples.csv");
    std::fs::write(&path, csv).with_context(|| format!("writing {}", path.display()))?;
    let (database, memory): (Vec<_>, Vec<_>) = series(samples)
        .into_iter()
        .map(|(label, points)| Series { label, points })
        .partition(|s| s.label.ends_with(" database"));
    for (file, title, y, series) in [
        ("memory.svg", "resident memory under churn", "MB", memory),
        (
            "database.svg",
            "store database size under churn",
            "MB",
            database,
        ),
    ] {
        if !series.is_empty() {
            plot::lines(&dir.join(file), title, "seconds", y, XAxis::Linear, &series)?;
        }
    }
    println!(
        "  samples: {} (charts: memory.svg, database.svg)",
        path.display()
    );
    Ok(())
}

/// Every log under `dir` with ERROR lines: its name, how many, and the first.
fn errors_in_logs(dir: &Path) -> Result<Vec<(String, usize, String)>> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let errors: Vec<&str> = text.lines().filter(|l| is_error(l)).collect();
        if let Some(first) = errors.first() {
            out.push((
                f.file_name().unwrap_or_default().to_string_lossy().into(),
                errors.len(),
                first.chars().take(300).collect(),
            ));
        }
    }
    Ok(out)
}

/// A log line at level ERROR, in the text format (`… ERROR target: …`, coloured or not) or
/// JSON, or the `error: …` a process says as it exits.
fn is_error(line: &str) -> bool {
    let plain = without_colour(line);
    plain.split_whitespace().nth(1) == Some("ERROR")
        || plain.starts_with("error: ")
        || plain.contains("\"level\":\"ERROR\"")
}

/// `line` without its ANSI colour sequences (`ESC [ … m`).
fn without_colour(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pods_stages_add_up_even_when_seen_out_of_order() {
        let sent = Instant::now();
        let ms = |n| sent + Duration::from_millis(n);
        let in_order = Progress {
            sent,
            created: Some(ms(10)),
            bound: Some(ms(40)),
        }
        .stages(ms(100));
        assert_eq!(
            (in_order.create, in_order.bind, in_order.run),
            (
                Duration::from_millis(10),
                Duration::from_millis(30),
                Duration::from_millis(60)
            )
        );
        // The watch showed the pod bound before the create's answer came back.
        let bound_first = Progress {
            sent,
            created: Some(ms(50)),
            bound: Some(ms(20)),
        }
        .stages(ms(100));
        assert_eq!(bound_first.create, Duration::from_millis(50));
        assert_eq!(bound_first.bind, Duration::ZERO);
        assert_eq!(bound_first.run, Duration::from_millis(50));
        // Neither seen: the whole time is the create's.
        let unseen = Progress {
            sent,
            created: None,
            bound: None,
        }
        .stages(ms(100));
        assert_eq!(unseen.create, Duration::from_millis(100));
        for s in [in_order, bound_first, unseen] {
            assert_eq!(s.create + s.bind + s.run, s.total);
        }
    }

    #[test]
    fn error_lines_are_told_by_their_level() {
        assert!(is_error(
            "2026-11-28T13:00:00.000000Z ERROR skiff_store::server: boom"
        ));
        assert!(is_error(r#"{"timestamp":"…","level":"ERROR","fields":{}}"#));
        assert!(!is_error(
            "2026-11-28T13:00:00.000000Z  WARN skiff_store: an ERROR elsewhere"
        ));
        assert!(is_error(
            "\u{1b}[2m2026-11-28T13:47:01.442390Z\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m \u{1b}[2mopenraft::replication\u{1b}[0m: RPCError"
        ));
        assert!(is_error(
            "error: the ReplicaSet informer stopped: transport error"
        ));
    }

    #[test]
    fn growth_is_per_minute_in_each_half() {
        let at = |s: u64, process: &str, mb: f64| Sample {
            at: Duration::from_secs(s),
            process: process.into(),
            resident: mb * 1e6,
            database: Some(mb * 1e6),
        };
        // 10 MB a minute for the first 10 minutes, then flat.
        let samples: Vec<Sample> = (0..=20)
            .map(|m| at(m * 60, "store-a", 100.0 + 10.0 * (m.min(10) as f64)))
            .collect();
        let table = growth_table(&samples);
        let line = table
            .lines()
            .find(|l| l.contains("store-a resident"))
            .expect("a row");
        assert!(line.contains("+10.00 MB/min"), "{table}");
        assert!(line.contains("+0.00 MB/min"), "{table}");
        assert!(line.contains("200.0 MB"), "{table}");
    }
}
