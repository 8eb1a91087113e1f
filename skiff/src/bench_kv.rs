//! `skiff bench kv`: load through the etcd v3 API, modelled on etcd's own `benchmark` tool,
//! so the same command drives Skiff and a real etcd alike. Global flags choose the endpoints,
//! connections and concurrent clients; each test prints throughput, latency percentiles and
//! errors (or one JSON object with `--json`).
//!
//! | test              | what one operation is                                             |
//! |-------------------|-------------------------------------------------------------------|
//! | `put`             | a put of a `--key-size` key and `--val-size` value                  |
//! | `range`           | a range read of a key or key range, linearizable or serializable    |
//! | `txn-put`         | a transaction of `--txn-ops` puts                                   |
//! | `watch`           | fan-out: `--watchers` watch one prefix over `--streams` streams; puts at `--put-rate`; latency from put sent to each delivery |
//! | `lease-keepalive` | one keep-alive of a client's lease                                  |
//! | `compaction`      | a put and its watch delivery, one at a time, while the store compacts `--revisions` stale revisions; the longest pauses |
//! | `stuck-watch`     | a put, while `--stuck` watch streams on the whole keyspace from revision 1 never read; one report per count |

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use etcd_client::{Client, GetOptions, PutOptions, Txn, TxnOp, WatchOptions};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use skiff_proto::http::HttpClient;
use skiff_proto::metrics;
pub use skiff_scheduler::bench::{Latencies, Percentiles};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Client endpoints (host:port), comma-separated; connections go round-robin over them.
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:2379")]
    endpoints: Vec<String>,
    /// gRPC connections.
    #[arg(long, default_value_t = 1)]
    conns: usize,
    /// Concurrent clients, spread over the connections.
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    test: Test,
}

#[derive(Debug, Clone, clap::Subcommand)]
enum Test {
    /// Puts.
    Put(PutArgs),
    /// Range reads.
    Range(RangeArgs),
    /// Transactions of puts.
    TxnPut(TxnPutArgs),
    /// Watch fan-out: event delivery latency and memory per watcher.
    Watch(WatchArgs),
    /// Lease keep-alives.
    LeaseKeepalive(LeaseArgs),
    /// Puts while watch streams that never read are open: one run per count in `--stuck`.
    StuckWatch(StuckWatchArgs),
    /// Puts and watch delivery while the store compacts a backlog of stale revisions.
    Compaction(CompactionArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct PutArgs {
    /// Operations in all.
    #[arg(long, default_value_t = 10_000)]
    total: usize,
    #[arg(long, default_value_t = 8)]
    key_size: usize,
    #[arg(long, default_value_t = 256)]
    val_size: usize,
    /// Distinct keys, chosen at random (0: every put a new key).
    #[arg(long, default_value_t = 0)]
    key_space_size: usize,
    /// Keys in order (0, 1, 2, …) instead of at random within the key space.
    #[arg(long)]
    sequential_keys: bool,
}

#[derive(Debug, Clone, clap::Args)]
struct RangeArgs {
    /// The key (or the start of the range).
    key: String,
    /// The end of the range (exclusive); `--prefix` reads every key under `key`.
    end: Option<String>,
    #[arg(long, conflicts_with = "end")]
    prefix: bool,
    #[arg(long, default_value_t = 10_000)]
    total: usize,
    /// `l`inearizable (ReadIndex) or `s`erializable (the member's local state).
    #[arg(long, default_value = "l", value_parser = ["l", "s"])]
    consistency: String,
    /// Most keys per read (0: all).
    #[arg(long, default_value_t = 0)]
    limit: i64,
}

#[derive(Debug, Clone, clap::Args)]
struct TxnPutArgs {
    #[command(flatten)]
    put: PutArgs,
    /// Puts per transaction.
    #[arg(long, default_value_t = 1)]
    txn_ops: usize,
}

#[derive(Debug, Clone, clap::Args)]
struct WatchArgs {
    /// Watchers in all, every one on `--prefix`.
    #[arg(long, default_value_t = 10_000)]
    watchers: usize,
    /// Watch streams the watchers share (spread over the connections).
    #[arg(long, default_value_t = 10)]
    streams: usize,
    /// Puts under the prefix while they watch.
    #[arg(long, default_value_t = 5_000)]
    puts: usize,
    /// Puts per second.
    #[arg(long, default_value_t = 1_000.0)]
    put_rate: f64,
    /// Clients issuing the puts, each waiting for its put's answer before the next; puts are
    /// due at `--put-rate` across all of them. With one (as etcd's benchmark), the rate is at
    /// most one put per put latency.
    #[arg(long, default_value_t = 1)]
    put_clients: usize,
    #[arg(long, default_value = "/bench/watch/")]
    prefix: String,
    #[arg(long, default_value_t = 256)]
    val_size: usize,
    /// Members' metrics URLs (`http://host:port/metrics`), to report memory per watcher:
    /// resident set (`process_resident_memory_bytes`, both export it) and heap in use
    /// (Skiff's `skiff_heap_allocated_bytes`, etcd's `go_memstats_heap_alloc_bytes`).
    #[arg(long, value_delimiter = ',')]
    metrics_urls: Vec<String>,
}

#[derive(Debug, Clone, clap::Args)]
struct CompactionArgs {
    /// Stale revisions written before compacting them all (puts over `--keys` keys, with the
    /// global clients and connections).
    #[arg(long, default_value_t = 1_000_000)]
    revisions: usize,
    #[arg(long, default_value_t = 1000)]
    keys: usize,
    #[arg(long, default_value_t = 64)]
    val_size: usize,
    /// How long to measure before the compaction, and after its request returns.
    #[arg(long, default_value = "5s", value_parser = skiff_proto::duration::parse)]
    window: Duration,
}

#[derive(Debug, Clone, clap::Args)]
struct StuckWatchArgs {
    #[command(flatten)]
    put: PutArgs,
    /// Watch streams that never read, one run per count (comma-separated). Each watches the
    /// whole keyspace from revision 1 on a connection of its own (an unread stream on a shared
    /// connection would exhaust the connection's HTTP/2 window and stall the puts client-side).
    #[arg(long, value_delimiter = ',', default_value = "0,4,64")]
    stuck: Vec<usize>,
}

#[derive(Debug, Clone, clap::Args)]
struct LeaseArgs {
    #[arg(long, default_value_t = 10_000)]
    total: usize,
}

/// What every test reports.
#[derive(Debug, Serialize)]
pub struct Report {
    pub test: String,
    pub endpoints: Vec<String>,
    pub conns: usize,
    pub clients: usize,
    pub ok: usize,
    pub errors: usize,
    pub seconds: f64,
    pub per_second: f64,
    pub latency_ms: Percentiles,
    /// Test-specific figures.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra: Vec<(String, f64)>,
}

impl Report {
    fn print(&self, json: bool) -> Result<()> {
        if json {
            println!("{}", serde_json::to_string(self)?);
            return Ok(());
        }
        let l = &self.latency_ms;
        println!(
            "{}: {} ok, {} errors in {:.2} s: {:.0}/s ({} clients, {} conns)",
            self.test,
            self.ok,
            self.errors,
            self.seconds,
            self.per_second,
            self.clients,
            self.conns
        );
        println!(
            "  latency ms: p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}",
            l.p50, l.p90, l.p99, l.p999, l.max
        );
        for (k, v) in &self.extra {
            println!("  {k}: {v:.2}");
        }
        Ok(())
    }
}

fn progress(total: usize, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(total as u64);
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "{what} {{bar:40}} {{pos}}/{{len}} {{per_sec}} eta {{eta}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

/// A small, fast, seeded generator for key choice (no cryptographic needs here).
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

fn key(a: &PutArgs, n: usize) -> Vec<u8> {
    let k = match (a.key_space_size, a.sequential_keys) {
        (0, _) => n,
        (space, true) => n % space,
        (space, false) => (mix(n as u64) % space as u64) as usize,
    };
    let mut key = format!("{k:0width$}", width = a.key_size).into_bytes();
    key.truncate(a.key_size.max(1));
    key
}

async fn connect(a: &Args) -> Result<Vec<Client>> {
    if a.conns == 0 || a.clients == 0 || a.endpoints.is_empty() {
        bail!("--conns, --clients and --endpoints must not be empty or 0");
    }
    let mut conns = Vec::new();
    for i in 0..a.conns {
        let ep = &a.endpoints[i % a.endpoints.len()];
        let c = Client::connect([ep.as_str()], None)
            .await
            .with_context(|| format!("connecting to {ep}"))?;
        conns.push(c);
    }
    Ok(conns)
}

/// Runs `total` operations over `clients` concurrent clients; `op(client, n)` performs
/// operation `n`.
async fn drive<F, Fut>(a: &Args, test: &str, total: usize, op: F) -> Result<Report>
where
    F: Fn(Client, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), etcd_client::Error>> + Send,
{
    let conns = connect(a).await?;
    let op = Arc::new(op);
    let next = Arc::new(AtomicUsize::new(0));
    let pb = progress(total, test);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..a.clients {
        let client = conns[c % conns.len()].clone();
        let (op, next, pb) = (op.clone(), next.clone(), pb.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Latencies::new();
            let mut errors = 0usize;
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    break;
                }
                let t = Instant::now();
                match op(client.clone(), n).await {
                    Ok(()) => lat.record(t.elapsed()),
                    Err(_) => errors += 1,
                }
                pb.inc(1);
            }
            (lat, errors)
        }));
    }
    let mut lat = Latencies::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await?;
        lat.merge(&l);
        errors += e;
    }
    pb.finish_and_clear();
    let seconds = start.elapsed().as_secs_f64();
    Ok(Report {
        test: test.to_string(),
        endpoints: a.endpoints.clone(),
        conns: a.conns,
        clients: a.clients,
        ok: lat.len() as usize,
        errors,
        seconds,
        per_second: lat.len() as f64 / seconds,
        latency_ms: lat.percentiles(),
        extra: Vec::new(),
    })
}

pub async fn run(a: Args) -> Result<std::process::ExitCode> {
    let reports = match a.test.clone() {
        Test::Put(p) => vec![put(&a, p).await?],
        Test::Range(r) => vec![range(&a, r).await?],
        Test::TxnPut(t) => vec![txn_put(&a, t).await?],
        Test::Watch(w) => vec![watch(&a, w).await?],
        Test::LeaseKeepalive(l) => vec![lease_keepalive(&a, l).await?],
        Test::StuckWatch(s) => stuck_watch(&a, s).await?,
        Test::Compaction(c) => vec![compaction(&a, c).await?],
    };
    for r in &reports {
        r.print(a.json)?;
    }
    Ok(if reports.iter().all(|r| r.errors == 0) {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}

/// `bench put` (kept for its older command lines) and `bench kv put`.
pub async fn put_with(
    endpoints: Vec<String>,
    conns: usize,
    clients: usize,
    p: PutArgs,
) -> Result<std::process::ExitCode> {
    run(Args {
        endpoints,
        conns,
        clients,
        json: false,
        test: Test::Put(p),
    })
    .await
}

async fn put(a: &Args, p: PutArgs) -> Result<Report> {
    let value = Arc::new(vec![b'v'; p.val_size]);
    let sizes = [
        ("key size B".to_string(), p.key_size as f64),
        ("value size B".to_string(), p.val_size as f64),
    ];
    let mut r = drive(a, "put", p.total, move |mut c, n| {
        let (k, v) = (key(&p, n), value.clone());
        async move { c.put(k, v.as_slice(), None).await.map(|_| ()) }
    })
    .await?;
    r.extra.extend(sizes);
    Ok(r)
}

/// One put run per count of stuck watch streams, the streams opened before and closed after.
async fn stuck_watch(a: &Args, s: StuckWatchArgs) -> Result<Vec<Report>> {
    let mut reports = Vec::new();
    for &n in &s.stuck {
        let mut stuck = Vec::new();
        for i in 0..n {
            let ep = &a.endpoints[i % a.endpoints.len()];
            let mut c = Client::connect([ep.as_str()], None)
                .await
                .with_context(|| format!("connecting to {ep}"))?;
            let opts = WatchOptions::new()
                .with_range(b"\0".to_vec())
                .with_start_revision(1);
            let mut w = c.watch(b"\0".to_vec(), Some(opts)).await?;
            // The created response, then never another read.
            match w.message().await? {
                Some(r) if r.created() && !r.canceled() => {}
                other => bail!("a stuck watcher was not created: {other:?}"),
            }
            stuck.push((c, w));
        }
        let mut r = put(a, s.put.clone()).await?;
        r.test = format!("put, {n} stuck watch streams");
        r.extra.push(("stuck watch streams".into(), n as f64));
        reports.push(r);
        drop(stuck);
    }
    Ok(reports)
}

/// The longest time between two successive instants in `t` (sorted), within `[from, to]`.
fn longest_gap(t: &[Instant], from: Instant, to: Instant) -> Duration {
    let inside: Vec<Instant> = t
        .iter()
        .copied()
        .filter(|x| *x >= from && *x <= to)
        .collect();
    let mut points = vec![from];
    points.extend(inside);
    points.push(to);
    points
        .windows(2)
        .map(|w| w[1].saturating_duration_since(w[0]))
        .max()
        .unwrap_or_default()
}

/// Fills the store with `--revisions` stale revisions, then, while one client puts a probe
/// key one put at a time and a watcher receives those puts, compacts everything at the
/// newest revision (etcd's `physical`, so the request returns when the backend is done).
/// Reports the probe's latency during the compaction and the longest pause of puts and of
/// watch delivery, beside the same pauses in an equal window before it.
async fn compaction(a: &Args, c: CompactionArgs) -> Result<Report> {
    let value = Arc::new(vec![b'v'; c.val_size]);
    let keys = c.keys.max(1);
    let fill = drive(a, "compaction fill", c.revisions, move |mut cl, n| {
        let v = value.clone();
        async move {
            cl.put(format!("/compact/k{}", n % keys), v.as_slice(), None)
                .await
                .map(|_| ())
        }
    })
    .await?;
    let ep = a.endpoints[0].as_str();
    let mut prober = Client::connect([ep], None).await?;
    let mut watcher = Client::connect([ep], None).await?;
    let mut stream = watcher
        .watch("/compact/probe", Some(WatchOptions::new().with_prefix()))
        .await?;
    match stream.message().await? {
        Some(r) if r.created() && !r.canceled() => {}
        other => bail!("the probe's watcher was not created: {other:?}"),
    }
    let delivered = Arc::new(std::sync::Mutex::new(Vec::<Instant>::new()));
    let watch_task = {
        let delivered = delivered.clone();
        tokio::spawn(async move {
            while let Ok(Some(r)) = stream.message().await {
                let now = Instant::now();
                let mut d = delivered.lock().unwrap_or_else(|p| p.into_inner());
                d.extend(std::iter::repeat_n(now, r.events().len()));
            }
        })
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probe_task = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut done = Vec::new();
            let mut errors = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                match prober.put("/compact/probe", "p", None).await {
                    Ok(_) => done.push((t, Instant::now())),
                    Err(_) => errors += 1,
                }
            }
            (done, errors)
        })
    };
    tokio::time::sleep(c.window).await;
    let mut admin = Client::connect([ep], None).await?;
    let rev = admin
        .get("/compact/k0", None)
        .await?
        .header()
        .map_or(0, |h| h.revision());
    let start = Instant::now();
    admin
        .compact(
            rev,
            Some(etcd_client::CompactionOptions::new().with_physical()),
        )
        .await
        .context("compaction")?;
    let compacted = Instant::now();
    tokio::time::sleep(c.window).await;
    let end = Instant::now();
    stop.store(true, Ordering::Relaxed);
    let (done, errors) = probe_task.await?;
    // Give the last probe put's event a moment to arrive.
    tokio::time::sleep(Duration::from_millis(200)).await;
    watch_task.abort();
    let delivered = delivered.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let before = start - c.window;
    let completions: Vec<Instant> = done.iter().map(|(_, d)| *d).collect();
    let during: Vec<Duration> = done
        .iter()
        .filter(|(t, _)| *t >= start)
        .map(|(t, d)| d.saturating_duration_since(*t))
        .collect();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let seconds = end.duration_since(start).as_secs_f64();
    Ok(Report {
        test: format!("compaction of {} revisions", c.revisions),
        endpoints: vec![ep.to_string()],
        conns: 1,
        clients: 1,
        ok: during.len(),
        errors,
        seconds,
        per_second: during.len() as f64 / seconds,
        latency_ms: during.iter().collect::<Latencies>().percentiles(),
        extra: vec![
            ("stale revisions".into(), c.revisions as f64),
            ("fill puts/s".into(), fill.per_second),
            (
                "compaction request s".into(),
                compacted.duration_since(start).as_secs_f64(),
            ),
            (
                "longest put pause ms".into(),
                ms(longest_gap(&completions, start, end)),
            ),
            (
                "longest watch pause ms".into(),
                ms(longest_gap(&delivered, start, end)),
            ),
            (
                "longest put pause before ms".into(),
                ms(longest_gap(&completions, before, start)),
            ),
            (
                "longest watch pause before ms".into(),
                ms(longest_gap(&delivered, before, start)),
            ),
        ],
    })
}

async fn range(a: &Args, r: RangeArgs) -> Result<Report> {
    let test = format!(
        "range ({})",
        if r.consistency == "s" {
            "serializable"
        } else {
            "linearizable"
        }
    );
    let total = r.total;
    drive(a, &test, total, move |mut c, _| {
        let r = r.clone();
        async move {
            let mut opts = GetOptions::new();
            if r.consistency == "s" {
                opts = opts.with_serializable();
            }
            if r.prefix {
                opts = opts.with_prefix();
            } else if let Some(end) = &r.end {
                opts = opts.with_range(end.as_bytes().to_vec());
            }
            if r.limit > 0 {
                opts = opts.with_limit(r.limit);
            }
            c.get(r.key.as_bytes(), Some(opts)).await.map(|_| ())
        }
    })
    .await
}

async fn txn_put(a: &Args, t: TxnPutArgs) -> Result<Report> {
    if t.txn_ops == 0 {
        bail!("--txn-ops must be at least 1");
    }
    let value = Arc::new(vec![b'v'; t.put.val_size]);
    let ops_per_txn = t.txn_ops as f64;
    let mut r = drive(a, "txn-put", t.put.total, move |mut c, n| {
        let ops: Vec<TxnOp> = (0..t.txn_ops)
            .map(|i| TxnOp::put(key(&t.put, n * t.txn_ops + i), value.as_slice(), None))
            .collect();
        async move { c.txn(Txn::new().and_then(ops)).await.map(|_| ()) }
    })
    .await?;
    r.extra.push(("puts per txn".into(), ops_per_txn));
    Ok(r)
}

async fn lease_keepalive(a: &Args, l: LeaseArgs) -> Result<Report> {
    // One lease per client, granted up front; each operation is one keep-alive round trip.
    let conns = connect(a).await?;
    let mut leases = Vec::new();
    for i in 0..a.clients {
        let mut c = conns[i % conns.len()].clone();
        let g = c.lease_grant(60, None).await.context("granting a lease")?;
        leases.push(g.id());
    }
    let ids = Arc::new(leases.clone());
    let clients = a.clients;
    let r = drive(a, "lease-keepalive", l.total, move |mut c, n| {
        let id = ids[n % clients];
        async move {
            let (mut keeper, mut stream) = c.lease_keep_alive(id).await?;
            keeper.keep_alive().await?;
            match stream.message().await? {
                Some(_) => Ok(()),
                None => Err(etcd_client::Error::WatchError(
                    "keep-alive stream closed".into(),
                )),
            }
        }
    })
    .await?;
    let mut c = conns[0].clone();
    for id in leases {
        let _ = c.lease_revoke(id).await;
    }
    Ok(r)
}

/// A member's memory as its metrics report it.
#[derive(Debug, Clone, Copy)]
struct Memory {
    /// `process_resident_memory_bytes`.
    resident: f64,
    /// Heap in use: `skiff_heap_allocated_bytes` (jemalloc) or etcd's
    /// `go_memstats_heap_alloc_bytes` (live objects and garbage not yet collected).
    heap: Option<f64>,
}

/// Reads each member's memory from its metrics URL (`http://host:port`, `/metrics` unless
/// the URL names another path).
async fn memory(urls: &[String]) -> Result<Vec<Memory>> {
    let client = HttpClient::new();
    let mut out = Vec::new();
    for url in urls {
        let rest = url
            .strip_prefix("http://")
            .with_context(|| format!("{url}: only http:// metrics URLs"))?;
        let url = if rest.contains('/') {
            url.clone()
        } else {
            format!("{url}/metrics")
        };
        let answer = client.get(&url, Duration::from_secs(10)).await?;
        if answer.status != 200 {
            bail!("GET {url}: status {}", answer.status);
        }
        let body = answer.text();
        let gauge = |name: &str| metrics::sample(&body, name);
        let resident = gauge("process_resident_memory_bytes")
            .with_context(|| format!("{url} exports no process_resident_memory_bytes"))?;
        let heap =
            gauge("skiff_heap_allocated_bytes").or_else(|| gauge("go_memstats_heap_alloc_bytes"));
        out.push(Memory { resident, heap });
    }
    Ok(out)
}

/// Growth from `before` to `after`, summed over members, per `n`: resident set, and heap
/// when every member reports one.
fn growth_per(before: &[Memory], after: &[Memory], n: usize) -> (f64, Option<f64>) {
    let resident: f64 = after
        .iter()
        .zip(before)
        .map(|(a, b)| a.resident - b.resident)
        .sum();
    let heap: Option<f64> = after
        .iter()
        .zip(before)
        .map(|(a, b)| Some(a.heap? - b.heap?))
        .sum();
    (resident / n as f64, heap.map(|h| h / n as f64))
}

async fn watch(a: &Args, w: WatchArgs) -> Result<Report> {
    if w.streams == 0 || w.watchers < w.streams || w.put_rate <= 0.0 {
        bail!("--streams must be at least 1, --watchers at least --streams, --put-rate above 0");
    }
    let conns = connect(a).await?;
    let before = memory(&w.metrics_urls).await?;
    let epoch = Instant::now();
    let delivered = Arc::new(AtomicU64::new(0));
    let stop = tokio_util::sync::CancellationToken::new();
    let expected = (w.watchers * w.puts) as u64;
    let pb = progress(w.watchers, "watchers");
    let mut readers = Vec::new();
    for s in 0..w.streams {
        let mut c = conns[s % conns.len()].clone();
        let on_this = w.watchers / w.streams + usize::from(s < w.watchers % w.streams);
        let opts = || WatchOptions::new().with_prefix();
        let stream = c.watch(w.prefix.as_bytes(), Some(opts())).await?;
        let (mut watcher, mut stream) = stream.split();
        // The first watcher's creation confirmation, then one per added watcher.
        let mut created = 0;
        for _ in 1..on_this {
            watcher.watch(w.prefix.as_bytes(), Some(opts())).await?;
        }
        while created < on_this {
            let Some(resp) = stream.message().await? else {
                bail!("a watch stream closed while its watchers were created");
            };
            if resp.created() {
                created += 1;
                pb.inc(1);
            }
        }
        let delivered = delivered.clone();
        let stop = stop.clone();
        readers.push(tokio::spawn(async move {
            let _keep = watcher;
            let mut lat = Latencies::new();
            loop {
                let resp = tokio::select! {
                    () = stop.cancelled() => break,
                    r = stream.message() => match r {
                        Ok(Some(resp)) => resp,
                        _ => break,
                    },
                };
                for e in resp.events() {
                    let Some(kv) = e.kv() else { continue };
                    let sent = kv
                        .value()
                        .get(..8)
                        .and_then(|b| b.try_into().ok())
                        .map_or(0, u64::from_le_bytes);
                    let now = epoch.elapsed().as_nanos() as u64;
                    lat.record(Duration::from_nanos(now.saturating_sub(sent)));
                    delivered.fetch_add(1, Ordering::Relaxed);
                }
            }
            lat
        }));
    }
    pb.finish_and_clear();
    let after_watch = memory(&w.metrics_urls).await?;

    // Puts at the rate asked for, each value stamped with its send time: put i is due at
    // start + i / rate, taken by whichever put client is free.
    let step = Duration::from_secs_f64(1.0 / w.put_rate);
    let start = Instant::now();
    let pb = progress(w.puts, "puts");
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut putters = Vec::new();
    for p in 0..w.put_clients.max(1) {
        let mut writer = conns[p % conns.len()].clone();
        let (next, failed, pb) = (next.clone(), failed.clone(), pb.clone());
        let (puts, val_size, prefix) = (w.puts as u64, w.val_size, w.prefix.clone());
        putters.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= puts {
                    break;
                }
                tokio::time::sleep_until((start + step.mul_f64(i as f64)).into()).await;
                let mut value = (epoch.elapsed().as_nanos() as u64).to_le_bytes().to_vec();
                value.resize(val_size.max(8), b'v');
                let key = format!("{prefix}{:08}", i % 1000);
                if writer
                    .put(key, value, Some(PutOptions::new()))
                    .await
                    .is_err()
                {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                pb.inc(1);
            }
        }));
    }
    for p in putters {
        p.await?;
    }
    pb.finish_and_clear();
    let put_errors = failed.load(Ordering::Relaxed) as usize;
    let put_seconds = start.elapsed().as_secs_f64();
    let want = expected - (put_errors * w.watchers) as u64;
    let deadline = Instant::now() + Duration::from_secs(30);
    while delivered.load(Ordering::Relaxed) < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    let got = delivered.load(Ordering::Relaxed);
    stop.cancel();
    let mut lat = Latencies::new();
    for r in readers {
        lat.merge(&r.await?);
    }
    let mut report = Report {
        test: "watch".into(),
        endpoints: a.endpoints.clone(),
        conns: a.conns,
        clients: w.streams,
        ok: got as usize,
        errors: (want.saturating_sub(got)) as usize + put_errors,
        seconds,
        per_second: got as f64 / seconds,
        latency_ms: lat.percentiles(),
        extra: vec![
            ("watchers".into(), w.watchers as f64),
            ("puts/s achieved".into(), w.puts as f64 / put_seconds),
            ("events expected".into(), want as f64),
        ],
    };
    if !before.is_empty() {
        let (resident, heap) = growth_per(&before, &after_watch, w.watchers);
        report.extra.push((
            "server resident memory per watcher B (all members)".into(),
            resident,
        ));
        if let Some(heap) = heap {
            report
                .extra
                .push(("server heap per watcher B (all members)".into(), heap));
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_growth_is_summed_over_members_and_heap_needs_every_member() {
        let m = |resident, heap| Memory { resident, heap };
        let before = [m(100.0, Some(10.0)), m(200.0, Some(20.0))];
        let after = [m(1100.0, Some(410.0)), m(200.0, Some(220.0))];
        assert_eq!(growth_per(&before, &after, 10), (100.0, Some(60.0)));
        let after = [m(1100.0, Some(410.0)), m(200.0, None)];
        assert_eq!(growth_per(&before, &after, 10), (100.0, None));
    }
}
