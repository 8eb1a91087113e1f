//! `/metrics` for every Skiff process: one [`Registry`] per process, encoded in the Prometheus
//! text format (version 0.0.4, the format etcd serves), and served by one axum router.
//!
//! A component registers two kinds of metrics:
//!
//! * counters and gauges it updates as things happen (`prometheus_client`'s `Counter`,
//!   `Gauge`, `Family`), registered once at start;
//! * figures it already holds (a Raft index, a queue depth), read when scraped through a
//!   [`Scrape`] collector, so nothing is copied on the hot path.
//!
//! Every registry made by [`registry`] also exports the standard process metrics
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_open_fds`, …), read
//! from `/proc` through the `procfs` crate, with the names and meanings of the Go client's, so
//! a dashboard or a benchmark reads Skiff and etcd members alike.
//!
//! Counters are registered without their `_total` suffix: the encoder appends it. Help text
//! given to `Registry::register` ends without a period (the registry adds one); a [`Sink`]
//! writes its help as given.

use std::fmt;
use std::sync::Arc;

pub use prometheus_client;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
pub use prometheus_client::registry::Registry;

/// The `Content-Type` of [`encode`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// A registry that already exports this process's CPU, memory, file descriptors and start
/// time.
pub fn registry() -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(ProcessCollector));
    r
}

/// The registry's metrics in the Prometheus text format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, registry) {
        // Writing into a String cannot fail; a collector that fails is a bug worth seeing.
        tracing::error!(error = %e, "encoding metrics failed");
    }
    out
}

/// A router serving `GET /metrics`; components add their own health routes to it.
pub fn router(registry: Arc<Registry>) -> axum::Router {
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let r = registry.clone();
            async move {
                (
                    [(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)],
                    encode(&r),
                )
            }
        }),
    )
}

/// Binds `addr` and serves the registry at `http://addr/metrics` until the task is aborted.
pub async fn serve(
    addr: std::net::SocketAddr,
    registry: Registry,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let app = router(Arc::new(registry));
    Ok(tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    }))
}

/// The value of the unlabelled sample `name` in a text exposition (Skiff's, etcd's or any
/// Prometheus client's), for benchmarks and tests that read one figure.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// A collector whose figures are read at each scrape by a closure that writes them into a
/// [`Sink`].
pub struct Scrape<F>(pub F);

impl<F> fmt::Debug for Scrape<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Scrape")
    }
}

impl<F> Collector for Scrape<F>
where
    F: Fn(&mut Sink<'_>) -> fmt::Result + Send + Sync + 'static,
{
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        (self.0)(&mut Sink(encoder))
    }
}

/// Where a [`Scrape`] collector writes its figures, each with its name, help and type.
#[derive(Debug)]
pub struct Sink<'a>(DescriptorEncoder<'a>);

impl Sink<'_> {
    pub fn gauge(&mut self, name: &str, help: &str, value: impl EncodeGaugeValue) -> fmt::Result {
        self.0
            .encode_descriptor(name, help, None, MetricType::Gauge)?
            .encode_gauge(&value)
    }

    /// A counter; `name` without `_total`, which the encoding appends.
    pub fn counter(
        &mut self,
        name: &str,
        help: &str,
        value: impl EncodeCounterValue,
    ) -> fmt::Result {
        self.0
            .encode_descriptor(name, help, None, MetricType::Counter)?
            .encode_counter::<NoLabelSet, _, u64>(&value, None)
    }

    /// A gauge with one series per label set.
    pub fn gauges<L: EncodeLabelSet, V: EncodeGaugeValue>(
        &mut self,
        name: &str,
        help: &str,
        series: &[(L, V)],
    ) -> fmt::Result {
        let mut m = self
            .0
            .encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (labels, value) in series {
            m.encode_family(labels)?.encode_gauge(value)?;
        }
        Ok(())
    }

    /// A counter with one series per label set; `name` without `_total`.
    pub fn counters<L: EncodeLabelSet, V: EncodeCounterValue>(
        &mut self,
        name: &str,
        help: &str,
        series: &[(L, V)],
    ) -> fmt::Result {
        let mut m = self
            .0
            .encode_descriptor(name, help, None, MetricType::Counter)?;
        for (labels, value) in series {
            m.encode_family(labels)?
                .encode_counter::<NoLabelSet, _, u64>(value, None)?;
        }
        Ok(())
    }

    /// A histogram from counts already kept: `buckets` pairs each upper bound with the
    /// observations in that bucket alone (not cumulative); `count` includes those above the
    /// last bound.
    pub fn histogram(
        &mut self,
        name: &str,
        help: &str,
        sum: f64,
        count: u64,
        buckets: &[(f64, u64)],
    ) -> fmt::Result {
        self.0
            .encode_descriptor(name, help, None, MetricType::Histogram)?
            .encode_histogram::<NoLabelSet>(sum, count, buckets, None)
    }
}

/// The process metrics of the Prometheus client libraries, from `/proc/self` (nothing where
/// there is no procfs).
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        let Ok(me) = procfs::process::Process::myself() else {
            return Ok(());
        };
        let mut sink = Sink(encoder);
        if let Ok(stat) = me.stat() {
            let ticks = procfs::ticks_per_second().max(1) as f64;
            sink.counter(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                (stat.utime + stat.stime) as f64 / ticks,
            )?;
            sink.gauge(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                stat.rss * procfs::page_size(),
            )?;
            sink.gauge(
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                stat.vsize,
            )?;
            sink.gauge(
                "process_threads",
                "Number of OS threads in the process.",
                stat.num_threads,
            )?;
            if let Ok(boot) = procfs::boot_time_secs() {
                sink.gauge(
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    boot as f64 + stat.starttime as f64 / ticks,
                )?;
            }
        }
        if let Ok(fds) = me.fd_count() {
            sink.gauge(
                "process_open_fds",
                "Number of open file descriptors.",
                fds as u64,
            )?;
        }
        if let Ok(limits) = me.limits()
            && let procfs::process::LimitValue::Value(max) = limits.max_open_files.soft_limit
        {
            sink.gauge(
                "process_max_fds",
                "Maximum number of open file descriptors.",
                max,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    /// Counters keep their `_total` names, every metric has HELP and TYPE, and the process
    /// metrics are there.
    #[test]
    fn text_has_help_type_and_process_metrics() {
        let mut r = registry();
        let c: Counter = Counter::default();
        c.inc_by(3);
        r.register("skiff_test_things", "Things seen", c);
        r.register_collector(Box::new(Scrape(|s: &mut Sink<'_>| {
            s.gauge("skiff_test_depth", "Depth now.", 7i64)?;
            s.gauges(
                "skiff_test_queue",
                "Queue by state.",
                &[([("state", "active")], 2i64)],
            )?;
            s.histogram(
                "skiff_test_seconds",
                "Latency.",
                0.5,
                3,
                &[(0.1, 1), (1.0, 1)],
            )
        })));
        let text = encode(&r);
        for line in [
            "# TYPE skiff_test_things_total counter",
            "skiff_test_things_total 3",
            "# HELP skiff_test_depth Depth now.",
            "skiff_test_depth 7",
            "skiff_test_queue{state=\"active\"} 2",
            "skiff_test_seconds_bucket{le=\"0.1\"} 1",
            "skiff_test_seconds_bucket{le=\"1\"} 2",
            "skiff_test_seconds_bucket{le=\"+Inf\"} 3",
            "skiff_test_seconds_count 3",
            "# TYPE process_cpu_seconds_total counter",
            "# TYPE process_resident_memory_bytes gauge",
            "# TYPE process_open_fds gauge",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing in\n{text}"
            );
        }
        let rss = text
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .and_then(|v| v.parse::<f64>().ok())
            .expect("resident memory");
        assert!(rss > 0.0);
        assert_eq!(sample(&text, "skiff_test_things_total"), Some(3.0));
    }

    #[test]
    fn samples_are_read_by_exact_name() {
        let text = "# TYPE a gauge\na_b 2\na 1.5e+07\nb{l=\"x\"} 3\nc 4 1700000000000\n";
        assert_eq!(sample(text, "a"), Some(1.5e7));
        assert_eq!(sample(text, "a_b"), Some(2.0));
        assert_eq!(sample(text, "c"), Some(4.0));
        assert_eq!(sample(text, "b"), None);
    }
}
