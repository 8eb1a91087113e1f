//! The ReplicaSet controller's decisions, without I/O: how many pods to create or which to
//! delete, in what batches to create them, and the status that describes the pods.

use std::future::Future;
use std::ops::Range;

use skiff_proto::api::apps::{ReplicaSet, ReplicaSetStatus, WorkloadCondition};
use skiff_proto::api::{ConditionStatus, Pod, Time, WorkloadConditionType};

use crate::pods;

/// The most pods one sync creates or deletes (Kubernetes' `burstReplicas`): a ReplicaSet
/// of 30,000 gets there in syncs of 500, each seen through before the next.
pub const BURST: usize = 500;

/// What a sync does about the number of pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Diff {
    /// Create this many.
    Create(usize),
    /// Delete these pods (indexes into the active pods given), first to go first.
    Delete(Vec<usize>),
    Steady,
}

/// Compares `replicas` with the active pods a ReplicaSet owns.
pub fn diff(replicas: i32, active: &[&Pod]) -> Diff {
    let want = usize::try_from(replicas).unwrap_or(0);
    let have = active.len();
    if have < want {
        Diff::Create((want - have).min(BURST))
    } else if have > want {
        let mut order: Vec<usize> = (0..have).collect();
        order.sort_by(|&a, &b| pods::deletion_order(active[a], active[b]));
        order.truncate((have - want).min(BURST));
        Diff::Delete(order)
    } else {
        Diff::Steady
    }
}

/// Slow start: makes `total` calls in batches of 1, 2, 4, 8 …, doubling after each batch
/// that fully succeeded and stopping after the first batch with a failure. `call` makes one
/// batch (given its calls' indexes): one answer per call, in order, or one error for them
/// all. Returns what the calls that succeeded returned, the number of calls never made, and
/// the first error. A quota or an admission rule that refuses every pod so costs one
/// request, not thousands.
pub async fn slow_start<F, Fut, T, E>(total: usize, mut call: F) -> (Vec<T>, usize, Option<E>)
where
    F: FnMut(Range<usize>) -> Fut,
    Fut: Future<Output = Result<Vec<Result<T, E>>, E>>,
{
    let mut done = 0;
    let mut batch = 1;
    let mut succeeded = Vec::new();
    while done < total {
        let n = batch.min(total - done);
        let mut first_error = None;
        match call(done..done + n).await {
            Ok(results) => {
                for r in results {
                    match r {
                        Ok(v) => succeeded.push(v),
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                }
            }
            Err(e) => first_error = Some(e),
        }
        done += n;
        if first_error.is_some() {
            return (succeeded, total - done, first_error);
        }
        batch *= 2;
    }
    (succeeded, 0, None)
}

/// What the sync could not do, for the `ReplicaFailure` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// `FailedCreate` or `FailedDelete`.
    pub reason: &'static str,
    pub message: String,
}

/// The status of `rs` given the active pods it owns (`owned`) at `now` (unix seconds), and
/// the failure of this sync, if any. A failure sets `ReplicaFailure=True`; a sync without
/// one clears it.
pub fn status(
    rs: &ReplicaSet,
    owned: &[&Pod],
    now: i64,
    failure: Option<&Failure>,
) -> ReplicaSetStatus {
    let min_ready = rs.spec.min_ready_seconds.unwrap_or(0);
    let template_labels = &rs.spec.template.metadata.labels;
    let count = |f: &dyn Fn(&Pod) -> bool| {
        i32::try_from(owned.iter().filter(|p| f(p)).count()).unwrap_or(i32::MAX)
    };
    let mut status = ReplicaSetStatus {
        replicas: count(&|_| true),
        fully_labeled_replicas: count(&|p| {
            template_labels
                .iter()
                .all(|(k, v)| p.metadata.labels.get(k) == Some(v))
        }),
        ready_replicas: count(&pods::is_ready),
        available_replicas: count(&|p| pods::is_available(p, min_ready, now)),
        observed_generation: rs.metadata.generation,
        ..rs.status.clone().unwrap_or_default()
    };
    let kept = status
        .conditions
        .iter()
        .find(|c| c.type_ == WorkloadConditionType::ReplicaFailure)
        .cloned();
    status
        .conditions
        .retain(|c| c.type_ != WorkloadConditionType::ReplicaFailure);
    if let Some(f) = failure {
        let since = kept
            .filter(|c| c.status == ConditionStatus::True)
            .and_then(|c| c.last_transition_time);
        status.conditions.push(WorkloadCondition {
            type_: WorkloadConditionType::ReplicaFailure,
            status: ConditionStatus::True,
            last_update_time: None,
            last_transition_time: since.or_else(|| Time::from_unix(now)),
            reason: f.reason.to_owned(),
            message: f.message.clone(),
            other: Default::default(),
        });
    }
    status
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use proptest::prelude::*;
    use skiff_proto::api::PodPhase;

    use super::*;
    use crate::pods::testing::pod;

    fn run<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn creates_and_deletes_up_to_the_burst() {
        let p = pod("a", 1, "n", PodPhase::Running, Some(1));
        let q = pod("b", 2, "", PodPhase::Pending, None);
        assert_eq!(diff(3, &[&p]), Diff::Create(2));
        assert_eq!(diff(100_000, &[]), Diff::Create(BURST));
        assert_eq!(
            diff(1, &[&p, &q]),
            Diff::Delete(vec![1]),
            "the unscheduled one"
        );
        assert_eq!(diff(2, &[&p, &q]), Diff::Steady);
    }

    proptest! {
        /// Batches double after each full success and stop at the first batch with a
        /// failure: the calls made are never more than twice the successes before the
        /// first failure, plus one; every call is made or counted as skipped.
        #[test]
        fn slow_start_stops_at_the_first_failing_batch(
            total in 0usize..2000,
            fails in proptest::collection::btree_set(0usize..2000, 0..5),
        ) {
            let made = Cell::new(0usize);
            let (done, skipped, err) = run(slow_start(total, |batch| {
                made.set(made.get() + batch.len());
                let answers: Vec<Result<usize, usize>> = batch
                    .map(|i| if fails.contains(&i) { Err(i) } else { Ok(i) })
                    .collect();
                async move { Ok(answers) }
            }));
            let ok = done.len();
            prop_assert!(done.iter().all(|i| !fails.contains(i)), "only successes: {done:?}");
            prop_assert_eq!(made.get() + skipped, total);
            match fails.iter().find(|&&f| f < total) {
                None => {
                    prop_assert_eq!(ok, total);
                    prop_assert!(err.is_none());
                }
                Some(&first) => {
                    prop_assert!(err.is_some());
                    // Successes before the first failure: `first` calls (indexes 0..first).
                    prop_assert!(made.get() <= 2 * first + 1, "made {} for first failure {}", made.get(), first);
                }
            }
        }
    }

    #[test]
    fn status_counts_and_failure_condition() {
        let mut rs = ReplicaSet::default();
        rs.metadata.generation = Some(4);
        rs.spec.min_ready_seconds = Some(10);
        rs.spec
            .template
            .metadata
            .labels
            .insert("app".into(), "web".into());
        let mut labelled = pod("a", 1, "n", PodPhase::Running, Some(100));
        labelled.metadata.labels.insert("app".into(), "web".into());
        let fresh = pod("b", 1, "n", PodPhase::Running, Some(105));
        let pending = pod("c", 1, "", PodPhase::Pending, None);
        let failure = Failure {
            reason: "FailedCreate",
            message: "quota".into(),
        };
        let s = status(&rs, &[&labelled, &fresh, &pending], 110, Some(&failure));
        assert_eq!(
            (
                s.replicas,
                s.fully_labeled_replicas,
                s.ready_replicas,
                s.available_replicas
            ),
            (3, 1, 2, 1)
        );
        assert_eq!(s.observed_generation, Some(4));
        assert_eq!(s.conditions[0].reason, "FailedCreate");
        rs.status = Some(s);
        let s = status(&rs, &[&labelled], 120, None);
        assert!(
            s.conditions.is_empty(),
            "a clean sync clears ReplicaFailure"
        );
    }
}
