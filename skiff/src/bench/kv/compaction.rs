//! `bench kv compaction` and `bench kv stuck-watch`: what a compaction backlog and watch
//! streams that never read cost the writes beside them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use etcd_client::{Client, WatchOptions};

use super::{Args, Latencies, PutArgs, Report, drive, put};
#[derive(Debug, Clone, clap::Args)]
pub(super) struct CompactionArgs {
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
pub(super) struct StuckWatchArgs {
    #[command(flatten)]
    put: PutArgs,
    /// Watch streams that never read, one run per count (comma-separated). Each watches the
    /// whole keyspace from revision 1 on a connection of its own (an unread stream on a shared
    /// connection would exhaust the connection's HTTP/2 window and stall the puts client-side).
    #[arg(long, value_delimiter = ',', default_value = "0,4,64")]
    stuck: Vec<usize>,
}

/// One put run per count of stuck watch streams, the streams opened before and closed after.
pub(super) async fn stuck_watch(a: &Args, s: StuckWatchArgs) -> Result<Vec<Report>> {
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
pub(super) async fn compaction(a: &Args, c: CompactionArgs) -> Result<Report> {
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
