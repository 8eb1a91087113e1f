//! `/metrics`: the queue, the table, the workers' attempts and the binder's outcomes, in the
//! registry every Skiff process serves (`skiff_proto::metrics`). Rates (pods bound per
//! second) are left to PromQL: `rate(skiff_scheduler_binds_total{outcome="bound"}[10s])`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use skiff_proto::metrics::prometheus_client::metrics::counter::Counter;
use skiff_proto::metrics::{self, Registry, Scrape, Sink};

use super::{Error, Result, Shared};
use crate::parallel::{Core, LATENCY_BUCKETS_US};

/// Counts of Bind outcomes and status writes.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) bound: Counter,
    pub(super) refused: Counter,
    pub(super) failed_calls: Counter,
    pub(super) status_writes: Counter,
    /// Victims this scheduler deleted.
    pub(super) preempted: Counter,
}

/// Serves `/metrics` on `addr` until the task is aborted.
pub(super) async fn serve(
    addr: SocketAddr,
    shared: Arc<Shared>,
) -> Result<tokio::task::JoinHandle<()>> {
    metrics::serve(addr, registry(shared))
        .await
        .map_err(|source| Error::Metrics { addr, source })
}

fn registry(shared: Arc<Shared>) -> Registry {
    let mut r = metrics::registry();
    r.register(
        "skiff_scheduler_bind_call_errors",
        "Bind calls that failed as a whole (their pods were queued again)",
        shared.counters.failed_calls.clone(),
    );
    r.register(
        "skiff_scheduler_unschedulable_status_writes",
        "PodScheduled=False statuses written for pods that fit nowhere",
        shared.counters.status_writes.clone(),
    );
    r.register(
        "skiff_scheduler_preemption_victims_deleted",
        "Pods deleted to make room for pods of higher priority",
        shared.counters.preempted.clone(),
    );
    r.register_collector(Box::new(Scrape(move |s: &mut Sink<'_>| {
        scrape(s, &shared.core, &shared.counters)
    })));
    r
}

fn scrape(s: &mut Sink<'_>, core: &Core, c: &Counters) -> std::fmt::Result {
    let st = &core.stats;
    let (active, in_flight, unschedulable) = core.queue.depth();
    s.gauges(
        "skiff_scheduler_queue_pods",
        "Pods in the scheduling queue, by state.",
        &[
            ([("state", "active")], active as u64),
            ([("state", "in_flight")], in_flight as u64),
            ([("state", "unschedulable")], unschedulable as u64),
        ],
    )?;
    s.gauge(
        "skiff_scheduler_nodes",
        "Nodes in the scheduler's table.",
        core.table.read().len() as u64,
    )?;
    let load = |v: &std::sync::atomic::AtomicU64| v.load(Ordering::Relaxed);
    s.counters(
        "skiff_scheduler_schedule_attempts",
        "Scheduling attempts, by result.",
        &[
            ([("result", "scheduled")], load(&st.placed)),
            ([("result", "unschedulable")], load(&st.unschedulable)),
            ([("result", "conflict")], load(&st.conflicts)),
        ],
    )?;
    s.counter(
        "skiff_scheduler_preemption_attempts",
        "Pods that fit nowhere for which preemption chose victims on a node.",
        load(&st.preemptions),
    )?;
    s.counter(
        "skiff_scheduler_preemption_victims",
        "Victims chosen by preemption (deleted by the status writer).",
        load(&st.victims),
    )?;
    s.counters(
        "skiff_scheduler_binds",
        "Bindings the store answered, by outcome.",
        &[
            ([("outcome", "bound")], c.bound.get()),
            ([("outcome", "refused")], c.refused.get()),
        ],
    )?;
    let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS_US
        .iter()
        .zip(&st.latency)
        .map(|(le, n)| (*le as f64 / 1e6, load(n)))
        .collect();
    let count = st.latency.iter().map(load).sum();
    s.histogram(
        "skiff_scheduler_attempt_duration_seconds",
        "How long one scheduling attempt took, filters and scores included.",
        load(&st.latency_sum_us) as f64 / 1e6,
        count,
        &buckets,
    )
}
