//! `/metrics` of the controller manager: per controller, the queue depth, how long syncs
//! take and how many fail; the pods the ReplicaSet controller created and deleted, by
//! outcome. Rates are left to PromQL
//! (`rate(skiff_controller_pod_writes_total{verb="create",outcome="ok"}[10s])`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use skiff_proto::metrics::prometheus_client::metrics::counter::Counter;
use skiff_proto::metrics::prometheus_client::metrics::family::Family;
use skiff_proto::metrics::prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use skiff_proto::metrics::{self, Registry, Scrape, Sink};

use crate::queue::WorkQueue;

type Labels = [(&'static str, &'static str); 1];

fn sync_histogram() -> Histogram {
    // 0.5 ms to about 16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// What the controllers count as they go.
#[derive(Debug)]
pub struct Metrics {
    syncs: Family<Labels, Histogram, fn() -> Histogram>,
    errors: Family<Labels, Counter>,
    pod_writes: Family<[(&'static str, &'static str); 2], Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            syncs: Family::new_with_constructor(sync_histogram as fn() -> Histogram),
            errors: Family::default(),
            pod_writes: Family::default(),
        }
    }
}

impl Metrics {
    /// One sync of `controller` took `took`, and failed when `failed`.
    pub fn synced(&self, controller: &'static str, took: Duration, failed: bool) {
        self.syncs
            .get_or_create(&[("controller", controller)])
            .observe(took.as_secs_f64());
        if failed {
            self.errors
                .get_or_create(&[("controller", controller)])
                .inc();
        }
    }

    /// `n` pod writes of `verb` (`create`, `delete`) ended with `outcome` (`ok`, `error`).
    pub fn pod_writes(&self, verb: &'static str, outcome: &'static str, n: usize) {
        self.pod_writes
            .get_or_create(&[("verb", verb), ("outcome", outcome)])
            .inc_by(n as u64);
    }

    /// Pod writes of `verb` with `outcome` so far (for tests and benchmarks).
    pub fn pod_write_count(&self, verb: &'static str, outcome: &'static str) -> u64 {
        self.pod_writes
            .get_or_create(&[("verb", verb), ("outcome", outcome)])
            .get()
    }
}

/// The registry of the controller manager's figures (and the process's).
pub fn registry(metrics: Arc<Metrics>, queues: Vec<(&'static str, WorkQueue)>) -> Registry {
    let mut r = metrics::registry();
    r.register(
        "skiff_controller_sync_duration_seconds",
        "How long one sync of one object took, by controller",
        metrics.syncs.clone(),
    );
    r.register(
        "skiff_controller_sync_errors",
        "Syncs that failed and were queued again after their back-off, by controller",
        metrics.errors.clone(),
    );
    r.register(
        "skiff_controller_pod_writes",
        "Pods the ReplicaSet controller created and deleted, by verb and outcome",
        metrics.pod_writes.clone(),
    );
    r.register_collector(Box::new(Scrape(move |s: &mut Sink<'_>| {
        let depths: Vec<(Labels, u64)> = queues
            .iter()
            .map(|(name, q)| ([("controller", *name)], q.len() as u64))
            .collect();
        s.gauges(
            "skiff_controller_queue_depth",
            "Keys waiting in each controller's work queue.",
            &depths,
        )
    })));
    r
}

/// Serves the registry at `http://addr/metrics` until the task is aborted.
pub async fn serve(
    addr: SocketAddr,
    registry: Registry,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    metrics::serve(addr, registry).await
}
