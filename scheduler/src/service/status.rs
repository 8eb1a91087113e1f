//! The status writer: a pod that fits nowhere gets `PodScheduled=False, reason
//! Unschedulable` with the diagnosis, and a `FailedScheduling` event.

use skiff_proto::api::pod::PodCondition;
use skiff_proto::api::{ConditionStatus, Kind, Object, PodConditionType, PodPhase};
use skiff_proto::recorder;

use super::Shared;
use crate::model::PodInfo;

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
/// the queue holds of `diagnosed`, unless the pod already says exactly that. A pod created
/// since under its name (another UID) is not the one diagnosed: nothing is written.
pub(super) async fn write_unschedulable(s: &Shared, diagnosed: &PodInfo, message: &str) {
    let key = diagnosed.key();
    let key = key.as_str();
    let Some(pod) = s
        .core
        .queue
        .object(key)
        .filter(|o| o.metadata.uid == diagnosed.uid)
    else {
        return;
    };
    let mut pod = (*pod).clone();
    if let Some(events) = &s.events {
        // Every attempt is recorded; repeats fold into one event with a count.
        events.warning(
            recorder::reference_to(Kind::Pod, &pod.metadata),
            "FailedScheduling",
            message.to_string(),
        );
    }
    let status = pod.status.get_or_insert_with(Default::default);
    if !status.set_condition(unschedulable(message)) {
        return;
    }
    status.phase.get_or_insert(PodPhase::Pending);
    match s.client.update_status(&Object::Pod(pod)).await {
        Ok(_) => {
            s.counters.status_writes.inc();
        }
        // A newer version exists: the next attempt writes on top of it.
        Err(e) => tracing::debug!(pod = key, error = %e, "unschedulable status not written"),
    }
}
