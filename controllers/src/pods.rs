//! What the controllers read off a pod: whether it counts (active), serves (ready), has
//! served long enough (available), and in which order a ReplicaSet gives pods up.

use std::cmp::Ordering;

use skiff_proto::api::{ConditionStatus, Pod, PodConditionType, PodPhase, Time};

/// Neither finished nor being deleted: a pod that counts towards `replicas`.
pub fn is_active(pod: &Pod) -> bool {
    !pod.is_terminal() && pod.metadata.deletion_timestamp.is_none()
}

/// The time since which the pod has been ready, when it is.
pub fn ready_since(pod: &Pod) -> Option<Option<Time>> {
    let c = pod.condition(&PodConditionType::Ready)?;
    (c.status == ConditionStatus::True).then_some(c.last_transition_time)
}

pub fn is_ready(pod: &Pod) -> bool {
    ready_since(pod).is_some()
}

/// Ready for at least `min_ready_seconds` at `now` (unix seconds).
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: i64) -> bool {
    match ready_since(pod) {
        None => false,
        Some(_) if min_ready_seconds <= 0 => true,
        Some(None) => false,
        Some(Some(t)) => t.unix() + i64::from(min_ready_seconds) <= now,
    }
}

/// Seconds until a ready pod becomes available, when it is ready but not yet available.
pub fn seconds_to_available(pod: &Pod, min_ready_seconds: i32, now: i64) -> Option<i64> {
    let since = ready_since(pod)??;
    let due = since.unix() + i64::from(min_ready_seconds);
    (due > now).then_some(due - now)
}

fn phase_rank(pod: &Pod) -> u8 {
    match pod.phase() {
        Some(PodPhase::Pending) | None => 0,
        Some(PodPhase::Unknown) => 1,
        Some(PodPhase::Running) => 2,
        Some(PodPhase::Succeeded | PodPhase::Failed) => 3,
    }
}

fn restarts(pod: &Pod) -> i64 {
    pod.status
        .as_ref()
        .map(|s| {
            s.container_statuses
                .iter()
                .map(|c| i64::from(c.restart_count))
                .sum()
        })
        .unwrap_or(0)
}

/// The order a ReplicaSet deletes pods in, first to go first (Kubernetes' `ActivePods`):
/// unscheduled before scheduled, pending before unknown before running, not ready before
/// ready, ready more recently before ready longer, more restarts before fewer, newer before
/// older.
pub fn deletion_order(a: &Pod, b: &Pod) -> Ordering {
    let scheduled = |p: &Pod| !p.spec.node_name.is_empty();
    scheduled(a)
        .cmp(&scheduled(b))
        .then_with(|| phase_rank(a).cmp(&phase_rank(b)))
        .then_with(|| is_ready(a).cmp(&is_ready(b)))
        .then_with(|| {
            // Both ready: the one ready for a shorter time goes first.
            match (ready_since(a).flatten(), ready_since(b).flatten()) {
                (Some(x), Some(y)) => y.cmp(&x),
                _ => Ordering::Equal,
            }
        })
        .then_with(|| restarts(b).cmp(&restarts(a)))
        .then_with(|| {
            b.metadata
                .creation_timestamp
                .cmp(&a.metadata.creation_timestamp)
        })
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

#[cfg(test)]
pub(crate) mod testing {
    use skiff_proto::api::pod::PodStatus;
    use skiff_proto::api::{ConditionStatus, Pod, PodCondition, PodConditionType, PodPhase, Time};

    /// A pod named `name`, created at `created`, bound to `node` (empty: unscheduled), in
    /// `phase`, ready since `ready` (unix seconds) when given.
    pub(crate) fn pod(
        name: &str,
        created: i64,
        node: &str,
        phase: PodPhase,
        ready: Option<i64>,
    ) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = name.into();
        p.metadata.namespace = "default".into();
        p.metadata.creation_timestamp = Time::from_unix(created);
        p.spec.node_name = node.into();
        let mut status = PodStatus {
            phase: Some(phase),
            ..PodStatus::default()
        };
        if let Some(at) = ready {
            status.conditions.push(PodCondition {
                last_transition_time: Time::from_unix(at),
                ..PodCondition::new(PodConditionType::Ready, ConditionStatus::True)
            });
        }
        p.status = Some(status);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::testing::pod;
    use super::*;

    #[test]
    fn deletion_prefers_the_least_useful_pod() {
        let unscheduled = pod("unscheduled", 5, "", PodPhase::Pending, None);
        let pending = pod("pending", 5, "n", PodPhase::Pending, None);
        let not_ready = pod("not-ready", 5, "n", PodPhase::Running, None);
        let ready_recently = pod("ready-recently", 5, "n", PodPhase::Running, Some(90));
        let ready_long = pod("ready-long", 1, "n", PodPhase::Running, Some(10));
        let mut pods = [
            &ready_long,
            &ready_recently,
            &not_ready,
            &pending,
            &unscheduled,
        ];
        pods.sort_by(|a, b| deletion_order(a, b));
        let names: Vec<&str> = pods.iter().map(|p| p.metadata.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "unscheduled",
                "pending",
                "not-ready",
                "ready-recently",
                "ready-long"
            ]
        );
    }

    #[test]
    fn availability_waits_min_ready_seconds() {
        let p = pod("p", 0, "n", PodPhase::Running, Some(100));
        assert!(is_available(&p, 0, 100));
        assert!(!is_available(&p, 10, 105));
        assert_eq!(seconds_to_available(&p, 10, 105), Some(5));
        assert!(is_available(&p, 10, 110));
        let mut gone = p.clone();
        gone.metadata.deletion_timestamp = Time::from_unix(1);
        assert!(!is_active(&gone));
    }
}
