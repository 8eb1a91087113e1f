//! The binder: placements go to the store in batch Binds, several calls in flight; a Bind
//! the store refuses is taken back out of the table and the pod handed back to the queue.
//! Unschedulable verdicts go to the status writer, which carries out their preemptions.

use std::sync::Arc;

use skiff_proto::cluster::v1::Binding;
use skiff_proto::cluster::v1::bind_result::Outcome;
use tokio::sync::{Semaphore, mpsc};

use super::{Config, Shared, status};
use crate::model::PodInfo;
use crate::parallel::Verdict;
use crate::preemption;

/// Sends placements to the store in batches, several calls in flight, and writes the
/// FailedScheduling condition of pods that fit nowhere.
pub(super) async fn bind_loop(
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Vec<Verdict>>,
    config: Config,
) {
    let calls = Arc::new(Semaphore::new(config.bind_concurrency.max(1)));
    let writes = Arc::new(Semaphore::new(16));
    let mut tasks = tokio::task::JoinSet::new();
    while let Some(first) = rx.recv().await {
        let mut verdicts = first;
        while let Ok(more) = rx.try_recv() {
            verdicts.extend(more);
        }
        let mut placed = Vec::new();
        for v in verdicts {
            match v {
                Verdict::Placed { pod, node, .. } => placed.push((pod, node)),
                Verdict::Unschedulable {
                    pod,
                    diagnosis,
                    preemption,
                    ..
                } => {
                    let s = shared.clone();
                    let permit = writes.clone().acquire_owned().await;
                    tasks.spawn(async move {
                        let _permit = permit;
                        if let preemption::Outcome::Nominated(c) = &preemption {
                            status::preempt(&s, &pod, c).await;
                        }
                        let mut message = diagnosis.to_string();
                        if let Some(more) = preemption.message() {
                            message = format!("{message} {more}");
                        }
                        let nominated = preemption.nominated_node();
                        status::write_unschedulable(&s, &pod, &message, nominated).await;
                    });
                }
            }
        }
        for chunk in placed.chunks(config.bind_batch.max(1)) {
            let chunk = chunk.to_vec();
            let s = shared.clone();
            let permit = calls.clone().acquire_owned().await;
            tasks.spawn(async move {
                let _permit = permit;
                bind_chunk(&s, chunk).await;
            });
        }
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
}

async fn bind_chunk(s: &Shared, chunk: Vec<(Arc<PodInfo>, String)>) {
    let bindings = chunk
        .iter()
        .map(|(p, node)| Binding {
            namespace: p.namespace.clone(),
            pod: p.name.clone(),
            node: node.clone(),
            pod_resource_version: p.resource_version,
        })
        .collect();
    let (fence_key, fence_revision) = s.fence.as_ref().map_or(("", 0), |(k, r)| (k.as_str(), *r));
    match s
        .client
        .bind_fenced(bindings, fence_key, fence_revision)
        .await
    {
        Ok(results) => {
            for ((pod, node), r) in chunk.iter().zip(results) {
                let outcome = Outcome::try_from(r.outcome).unwrap_or(Outcome::Invalid);
                if outcome == Outcome::Bound {
                    s.counters.bound.inc();
                    if let Some(events) = &s.events {
                        events.normal(
                            pod.reference(),
                            "Scheduled",
                            format!(
                                "Successfully assigned {}/{} to {node}",
                                pod.namespace, pod.name
                            ),
                        );
                    }
                    continue;
                }
                s.counters.refused.inc();
                tracing::debug!(pod = %pod.key(), node, ?outcome, message = r.message, "bind refused");
                let requeue = !matches!(
                    outcome,
                    Outcome::PodNotFound | Outcome::AlreadyBound | Outcome::PodTerminating
                );
                s.core.unassume(pod, requeue);
            }
        }
        Err(e) => {
            s.counters.failed_calls.inc();
            tracing::warn!(error = %e, bindings = chunk.len(), "bind call failed; re-queueing");
            for (pod, _) in &chunk {
                s.core.unassume(pod, true);
            }
        }
    }
}
