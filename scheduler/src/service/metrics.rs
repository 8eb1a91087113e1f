//! `/metrics`: the queue, the table, the workers' attempts and the binder's outcomes in the
//! Prometheus text format.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use super::{Error, Result, Shared};
use crate::parallel::{Core, LATENCY_BUCKETS_US};

/// Counts of Bind outcomes and status writes, and the recent binding rate.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) bound: AtomicU64,
    pub(super) refused: AtomicU64,
    pub(super) failed_calls: AtomicU64,
    pub(super) status_writes: AtomicU64,
    /// (time, pods bound so far), sampled every second, the last ten seconds.
    rate: Mutex<VecDeque<(Instant, u64)>>,
}

impl Counters {
    /// Takes this second's sample of pods bound so far.
    pub(super) fn sample(&self) {
        let mut rate = self.rate.lock();
        rate.push_back((Instant::now(), self.bound.load(Ordering::Relaxed)));
        if rate.len() > 11 {
            rate.pop_front();
        }
    }

    fn per_second(&self) -> f64 {
        let rate = self.rate.lock();
        match (rate.front(), rate.back()) {
            (Some((t0, n0)), Some((t1, n1))) if t1 > t0 => {
                (n1 - n0) as f64 / t1.duration_since(*t0).as_secs_f64()
            }
            _ => 0.0,
        }
    }
}

/// Serves `/metrics` on `addr` until the task is aborted.
pub(super) async fn serve(
    addr: SocketAddr,
    shared: Arc<Shared>,
) -> Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Metrics { addr, source })?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let s = shared.clone();
            async move { text(&s.core, &s.counters) }
        }),
    );
    Ok(tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    }))
}

fn text(core: &Core, c: &Counters) -> String {
    use std::fmt::Write;
    let st = &core.stats;
    let (active, in_flight, unschedulable) = core.queue.depth();
    let mut out = String::new();
    let _ = writeln!(out, "# TYPE skiff_scheduler_queue_pods gauge");
    let _ = writeln!(
        out,
        "skiff_scheduler_queue_pods{{state=\"active\"}} {active}"
    );
    let _ = writeln!(
        out,
        "skiff_scheduler_queue_pods{{state=\"in_flight\"}} {in_flight}"
    );
    let _ = writeln!(
        out,
        "skiff_scheduler_queue_pods{{state=\"unschedulable\"}} {unschedulable}"
    );
    let _ = writeln!(out, "# TYPE skiff_scheduler_nodes gauge");
    let _ = writeln!(out, "skiff_scheduler_nodes {}", core.table.read().len());
    let _ = writeln!(
        out,
        "# TYPE skiff_scheduler_schedule_attempts_total counter"
    );
    for (result, v) in [
        ("scheduled", &st.placed),
        ("unschedulable", &st.unschedulable),
        ("conflict", &st.conflicts),
    ] {
        let _ = writeln!(
            out,
            "skiff_scheduler_schedule_attempts_total{{result=\"{result}\"}} {}",
            v.load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(out, "# TYPE skiff_scheduler_binds_total counter");
    for (outcome, v) in [("bound", &c.bound), ("refused", &c.refused)] {
        let _ = writeln!(
            out,
            "skiff_scheduler_binds_total{{outcome=\"{outcome}\"}} {}",
            v.load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(
        out,
        "skiff_scheduler_bind_call_errors_total {}",
        c.failed_calls.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "skiff_scheduler_unschedulable_status_writes_total {}",
        c.status_writes.load(Ordering::Relaxed)
    );
    let per_second = c.per_second();
    let _ = writeln!(
        out,
        "# HELP skiff_scheduler_pods_per_second pods bound per second over the last 10 s"
    );
    let _ = writeln!(out, "# TYPE skiff_scheduler_pods_per_second gauge");
    let _ = writeln!(out, "skiff_scheduler_pods_per_second {per_second:.1}");
    let _ = writeln!(
        out,
        "# TYPE skiff_scheduler_attempt_duration_seconds histogram"
    );
    let mut cumulative = 0;
    for (i, le) in LATENCY_BUCKETS_US.iter().enumerate() {
        cumulative += st.latency[i].load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "skiff_scheduler_attempt_duration_seconds_bucket{{le=\"{}\"}} {cumulative}",
            *le as f64 / 1e6
        );
    }
    cumulative += st.latency[LATENCY_BUCKETS_US.len()].load(Ordering::Relaxed);
    let _ = writeln!(
        out,
        "skiff_scheduler_attempt_duration_seconds_bucket{{le=\"+Inf\"}} {cumulative}"
    );
    let _ = writeln!(
        out,
        "skiff_scheduler_attempt_duration_seconds_sum {}",
        st.latency_sum_us.load(Ordering::Relaxed) as f64 / 1e6
    );
    let _ = writeln!(
        out,
        "skiff_scheduler_attempt_duration_seconds_count {cumulative}"
    );
    out
}
