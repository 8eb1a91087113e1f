//! The status writer: a pod that fits nowhere gets `PodScheduled=False, reason
//! Unschedulable` with the diagnosis, and a `FailedScheduling` event; a pod that preempted
//! gets its `nominatedNodeName`, and its victims a `DisruptionTarget` condition, a graceful
//! deletion and a `Preempted` event.

use skiff_proto::api::pod::{PodCondition, PodStatus};
use skiff_proto::api::{ConditionStatus, Kind, Object, Pod, PodConditionType, PodPhase};
use skiff_proto::client::{ClientError, Code};
use skiff_proto::recorder;

use super::{DEFAULT_SCHEDULER_NAME, Shared};
use crate::model::{PREEMPTION_BY_SCHEDULER, PodInfo};
use crate::preemption::Candidate;

/// How often a victim's condition and deletion are tried when the pod changes under them.
const PREEMPT_TRIES: usize = 5;

/// `PodScheduled=False, reason Unschedulable` with the diagnosis.
///
/// The scheduler owns this case, as kube-scheduler does, and this is its only writer; the
/// `True` case belongs to the binding (`assign` in the store's `cluster::bind`).
fn unschedulable(message: &str) -> PodCondition {
    PodCondition {
        reason: "Unschedulable".into(),
        message: message.to_string(),
        ..PodCondition::new(PodConditionType::PodScheduled, ConditionStatus::False)
    }
}

/// Sets `PodScheduled=False, reason Unschedulable` with the diagnosis on the newest version
/// the queue holds of `diagnosed`, and `nominatedNodeName` to `nominated` when given (empty:
/// cleared), unless the pod already says exactly that.
pub(super) async fn write_unschedulable(
    s: &Shared,
    diagnosed: &PodInfo,
    message: &str,
    nominated: Option<&str>,
) {
    if let (Some(events), Some(pod)) = (&s.events, pending(s, diagnosed)) {
        // Every attempt is recorded; repeats fold into one event with a count.
        events.warning(
            recorder::reference_to(Kind::Pod, &pod.metadata),
            "FailedScheduling",
            message.to_string(),
        );
    }
    write_pending(s, diagnosed, |status| {
        let renominated = nominated.is_some_and(|n| renominate(status, n));
        status.set_condition(unschedulable(message)) | renominated
    })
    .await;
}

/// Sets `status.nominatedNodeName` to `node`; whether that changed it.
fn renominate(status: &mut PodStatus, node: &str) -> bool {
    if status.nominated_node_name == node {
        return false;
    }
    status.nominated_node_name = node.to_owned();
    true
}

/// The newest object the queue holds of the pending pod `pod`, unless a pod created since
/// under its name (another UID) has taken its place.
fn pending(s: &Shared, pod: &PodInfo) -> Option<Pod> {
    let held = s.core.queue.object(&pod.key())?;
    (held.metadata.uid == pod.uid).then(|| (*held).clone())
}

/// Writes the status of the pending pod `pod` as `change` leaves it, when `change` says it
/// changed anything. A version newer than the queue's makes the write fail: the next attempt
/// writes on top of it.
async fn write_pending(s: &Shared, pod: &PodInfo, change: impl FnOnce(&mut PodStatus) -> bool) {
    let Some(mut object) = pending(s, pod) else {
        return;
    };
    let status = object.status.get_or_insert_with(Default::default);
    if !change(status) {
        return;
    }
    status.phase.get_or_insert(PodPhase::Pending);
    match s.client.update_status(&Object::Pod(object)).await {
        Ok(_) => {
            s.counters.status_writes.inc();
        }
        Err(e) => tracing::debug!(pod = %pod.key(), error = %e, "pending pod's status not written"),
    }
}

/// Carries out a preemption: each victim not already terminating gets the `DisruptionTarget`
/// condition, then a graceful deletion (its own grace period) and a `Preempted` event; the
/// lower-priority pods nominated to the node lose their nomination.
pub(super) async fn preempt(s: &Shared, preemptor: &PodInfo, c: &Candidate) {
    for victim in c.victims.iter().filter(|v| !v.terminating) {
        match preempt_one(s, preemptor, &c.node, victim).await {
            Ok(true) => {
                s.counters.preempted.inc();
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(
                pod = %preemptor.key(), victim = %victim.key(), error = %e, "victim not preempted"
            ),
        }
    }
    for displaced in &c.displaced {
        write_pending(s, displaced, |status| renominate(status, "")).await;
    }
}

/// One victim: whether this call deleted it (it may be gone, re-created or deleting
/// already). Its condition is written first, on the version read, and the deletion is
/// made on the version that wrote: a pod re-created under the name meanwhile is not
/// touched.
async fn preempt_one(
    s: &Shared,
    preemptor: &PodInfo,
    node: &str,
    victim: &PodInfo,
) -> Result<bool, ClientError> {
    let conflict = |e: &ClientError| e.code() == Some(Code::Aborted);
    for _ in 0..PREEMPT_TRIES {
        let Some(Object::Pod(mut pod)) = s
            .client
            .get(Kind::Pod, &victim.namespace, &victim.name)
            .await?
        else {
            return Ok(false);
        };
        if pod.metadata.uid != victim.uid || pod.metadata.deletion_timestamp.is_some() {
            return Ok(false);
        }
        let condition = PodCondition {
            reason: PREEMPTION_BY_SCHEDULER.into(),
            message: format!(
                "{DEFAULT_SCHEDULER_NAME}: preempting to accommodate a higher priority pod"
            ),
            ..PodCondition::new(PodConditionType::DisruptionTarget, ConditionStatus::True)
        };
        let reference = recorder::reference_to(Kind::Pod, &pod.metadata);
        pod.status
            .get_or_insert_with(Default::default)
            .set_condition(condition);
        let written = match s.client.update_status(&Object::Pod(pod)).await {
            Ok(o) => o,
            Err(e) if conflict(&e) => continue,
            Err(e) if e.code() == Some(Code::NotFound) => return Ok(false),
            Err(e) => return Err(e),
        };
        let revision = written.metadata().revision().unwrap_or(0);
        match s
            .client
            .delete(Kind::Pod, &victim.namespace, &victim.name, revision, None)
            .await
        {
            Ok(_) => {}
            Err(e) if conflict(&e) => continue,
            Err(e) if e.code() == Some(Code::NotFound) => return Ok(false),
            Err(e) => return Err(e),
        }
        if let Some(events) = &s.events {
            events.normal(
                reference,
                "Preempted",
                format!("Preempted by pod {} on node {node}", preemptor.uid),
            );
        }
        return Ok(true);
    }
    Ok(false)
}
