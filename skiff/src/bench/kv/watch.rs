//! `bench kv watch`: fan-out of one prefix to many watchers, delivery latency from the put's
//! send time, and memory per watcher from the members' metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use etcd_client::{PutOptions, WatchOptions};
use skiff_proto::http::HttpClient;
use skiff_proto::metrics;

use super::{Args, Latencies, Report, connect, progress};
#[derive(Debug, Clone, clap::Args)]
pub(super) struct WatchArgs {
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

pub(super) async fn watch(a: &Args, w: WatchArgs) -> Result<Report> {
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
