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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use etcd_client::{Client, GetOptions, Txn, TxnOp};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
pub use skiff_scheduler::bench::{Latencies, Percentiles};

mod compaction;
mod watch;

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
    /// CA to verify `https://` endpoints with (etcdctl's `--cacert`).
    #[arg(long, requires = "cert")]
    cacert: Option<std::path::PathBuf>,
    /// Client certificate to present (etcdctl's `--cert`).
    #[arg(long, requires_all = ["key", "cacert"])]
    cert: Option<std::path::PathBuf>,
    /// Its key (etcdctl's `--key`).
    #[arg(long, requires = "cert")]
    key: Option<std::path::PathBuf>,
    /// `name:password` of the user to authenticate as, when the store has etcd's auth on
    /// (etcd's benchmark `--user`).
    #[arg(long)]
    user: Option<String>,
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
    Watch(watch::WatchArgs),
    /// Lease keep-alives.
    LeaseKeepalive(LeaseArgs),
    /// Puts while watch streams that never read are open: one run per count in `--stuck`.
    StuckWatch(compaction::StuckWatchArgs),
    /// Puts and watch delivery while the store compacts a backlog of stale revisions.
    Compaction(compaction::CompactionArgs),
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
    let mut options = match (&a.cacert, &a.cert, &a.key) {
        (Some(ca), Some(cert), Some(key)) => {
            let read = |p: &std::path::Path| {
                std::fs::read(p).with_context(|| format!("reading {}", p.display()))
            };
            Some(
                etcd_client::ConnectOptions::new().with_tls(
                    etcd_client::TlsOptions::new()
                        .ca_certificate(etcd_client::Certificate::from_pem(read(ca)?))
                        .identity(etcd_client::Identity::from_pem(read(cert)?, read(key)?)),
                ),
            )
        }
        _ => None,
    };
    if let Some(user) = &a.user {
        let (name, password) = user
            .split_once(':')
            .with_context(|| format!("--user {user:?}: expected name:password"))?;
        options = Some(options.unwrap_or_default().with_user(name, password));
    }
    let mut conns = Vec::new();
    for i in 0..a.conns {
        let ep = &a.endpoints[i % a.endpoints.len()];
        let c = Client::connect([ep.as_str()], options.clone())
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
        Test::Watch(w) => vec![watch::watch(&a, w).await?],
        Test::LeaseKeepalive(l) => vec![lease_keepalive(&a, l).await?],
        Test::StuckWatch(s) => compaction::stuck_watch(&a, s).await?,
        Test::Compaction(c) => vec![compaction::compaction(&a, c).await?],
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
        cacert: None,
        cert: None,
        key: None,
        user: None,
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
