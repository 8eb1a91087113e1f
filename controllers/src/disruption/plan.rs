//! The disruption controller's arithmetic, without I/O: how many pods a budget expects, how
//! many it wants healthy, how many are, which evictions are still under way, and the status
//! that says so (kube-controller-manager's `disruption` controller, Kubernetes 1.32).
//!
//! ```text
//!  minAvailable: N     expected = the pods selected          desired = N
//!  minAvailable: P%    expected = Σ scale of their controllers desired = ⌈P% × expected⌉
//!  maxUnavailable: M   expected = Σ scale of their controllers desired = expected − M
//!                                                              (M as P%: ⌈P% × expected⌉)
//!  healthy = selected pods Ready, not being deleted, not in disruptedPods (an eviction under
//!            way, for DELETION_TIMEOUT)
//!  allowed = max(0, healthy − desired), 0 while nothing is expected
//! ```

use std::collections::{BTreeMap, HashMap};

use skiff_proto::api::meta::{IntOrString, OwnerReference};
use skiff_proto::api::policy::{
    DELETION_TIMEOUT_SECS, PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
};
use skiff_proto::api::{Pod, Time};

use crate::pods;

/// A pod's controller as the finders read it: its uid (the Deployment's for a pod of a
/// Deployment's ReplicaSet, so a Deployment counts once however many ReplicaSets it has)
/// and its `spec.replicas`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scale {
    pub uid: String,
    pub replicas: i32,
}

/// The pods a budget expects and the healthy ones it wants.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Expected {
    pub expected: i32,
    pub desired_healthy: i32,
    /// Pods without a controller, left out of a scale (the controller records it).
    pub unmanaged: Vec<String>,
}

/// `expectedPods` and `desiredHealthy` of a budget over `pods` (every pod it selects);
/// `scale_of` finds the scale of a pod's controller (`None`: no controller Skiff knows, or it
/// is gone). An error is the controller's reason for failing safe, in
/// kube-controller-manager's words.
pub fn expected(
    spec: &PodDisruptionBudgetSpec,
    pods: &[&Pod],
    scale_of: impl FnMut(&Pod, &OwnerReference) -> Option<Scale>,
) -> Result<Expected, String> {
    if let Some(max) = &spec.max_unavailable {
        let (expected, unmanaged) = expected_scale(pods, scale_of)?;
        let unavailable = max.scaled(expected, true)?;
        return Ok(Expected {
            expected,
            desired_healthy: expected.saturating_sub(unavailable).max(0),
            unmanaged,
        });
    }
    match &spec.min_available {
        Some(IntOrString::Int(n)) => Ok(Expected {
            expected: count(pods.len()),
            desired_healthy: *n,
            unmanaged: Vec::new(),
        }),
        Some(min) => {
            let (expected, unmanaged) = expected_scale(pods, scale_of)?;
            Ok(Expected {
                expected,
                desired_healthy: min.scaled(expected, true)?,
                unmanaged,
            })
        }
        // Neither set (validation lets it through): nothing to protect.
        None => Ok(Expected::default()),
    }
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The sum of the scales of the controllers of `pods`, each controller once, and the pods
/// without one. A pod whose controller is not a ReplicaSet, Deployment, StatefulSet or
/// ReplicationController that exists is an error.
fn expected_scale(
    pods: &[&Pod],
    mut scale_of: impl FnMut(&Pod, &OwnerReference) -> Option<Scale>,
) -> Result<(i32, Vec<String>), String> {
    let mut scales: HashMap<String, i32> = HashMap::new();
    let mut unmanaged = Vec::new();
    for pod in pods {
        let Some(owner) = pod
            .metadata
            .owner_references
            .iter()
            .find(|r| r.controller == Some(true))
        else {
            unmanaged.push(pod.metadata.name.clone());
            continue;
        };
        if scales.contains_key(&owner.uid) {
            continue;
        }
        match scale_of(pod, owner) {
            Some(s) => {
                // Keyed by the pod's own controller (seen again: skipped above) and by the
                // scale's owner (a Deployment, reached from several ReplicaSets: counted once).
                scales.insert(owner.uid.clone(), 0);
                scales.insert(s.uid, s.replicas);
            }
            None => {
                return Err(format!(
                    "found no controllers for pod {:?}",
                    pod.metadata.name
                ));
            }
        }
    }
    let expected = scales.values().fold(0i32, |sum, n| sum.saturating_add(*n));
    Ok((expected, unmanaged))
}

/// The evictions still under way, of a budget's `disruptedPods`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Disrupted {
    /// The entries kept: the next `disruptedPods`.
    pub pods: BTreeMap<String, Time>,
    /// When (unix seconds) the first of them expires: the controller looks again then.
    pub recheck_at: Option<i64>,
    /// Pods whose eviction did not delete them in time (the controller records it).
    pub expired: Vec<String>,
}

/// The entries of `recorded` (a budget's `disruptedPods`) still under way at `now`: their
/// pod is still selected, not yet being deleted, and was named no more than
/// [`DELETION_TIMEOUT_SECS`] before.
pub fn disrupted(recorded: &BTreeMap<String, Time>, pods: &[&Pod], now: i64) -> Disrupted {
    let mut out = Disrupted::default();
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(at) = recorded.get(&pod.metadata.name) else {
            continue;
        };
        let expires = at.unix().saturating_add(DELETION_TIMEOUT_SECS);
        if expires < now {
            out.expired.push(pod.metadata.name.clone());
        } else {
            out.recheck_at = Some(out.recheck_at.map_or(expires, |r| r.min(expires)));
            out.pods.insert(pod.metadata.name.clone(), *at);
        }
    }
    out
}

/// The healthy pods among `pods`: Ready, not being deleted, and not being evicted (in
/// `disrupted` and named less than [`DELETION_TIMEOUT_SECS`] before `now`).
pub fn current_healthy(pods: &[&Pod], disrupted: &BTreeMap<String, Time>, now: i64) -> i32 {
    let healthy = pods.iter().filter(|p| {
        p.metadata.deletion_timestamp.is_none()
            && disrupted
                .get(&p.metadata.name)
                .is_none_or(|at| at.unix().saturating_add(DELETION_TIMEOUT_SECS) <= now)
            && pods::is_ready(p)
    });
    count(healthy.count())
}

/// The status `pdb` should have given what was worked out; `None` when it has it already
/// (nothing to write). Disruptions are allowed only while some pods are expected, so a new
/// budget whose first pods appear before its first sync stays safe.
pub fn status(
    pdb: &PodDisruptionBudget,
    expected: &Expected,
    current_healthy: i32,
    disrupted: BTreeMap<String, Time>,
) -> Option<PodDisruptionBudgetStatus> {
    let mut allowed = current_healthy.saturating_sub(expected.desired_healthy);
    if expected.expected <= 0 || allowed <= 0 {
        allowed = 0;
    }
    let generation = pdb.metadata.generation.unwrap_or(0);
    let s = &pdb.status;
    if s.current_healthy == current_healthy
        && s.desired_healthy == expected.desired_healthy
        && s.expected_pods == expected.expected
        && s.disruptions_allowed == allowed
        && s.disrupted_pods == disrupted
        && s.observed_generation == generation
        && pdb.conditions_up_to_date()
    {
        return None;
    }
    let mut next = PodDisruptionBudgetStatus {
        observed_generation: generation,
        disrupted_pods: disrupted,
        disruptions_allowed: allowed,
        current_healthy,
        desired_healthy: expected.desired_healthy,
        expected_pods: expected.expected,
        conditions: s.conditions.clone(),
        other: s.other.clone(),
    };
    next.set_allowed_condition();
    Some(next)
}

/// The status of a budget whose sync failed with `why`: no disruption allowed, and the
/// condition says why (kube-controller-manager's fail-safe); the rest as it was.
pub fn fail_safe(pdb: &PodDisruptionBudget, why: String) -> PodDisruptionBudgetStatus {
    let mut next = pdb.status.clone();
    next.set_sync_failed(why);
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::testing::pod;
    use skiff_proto::api::policy::{DISRUPTION_ALLOWED, INSUFFICIENT_PODS, SUFFICIENT_PODS};
    use skiff_proto::api::{ConditionStatus, LabelSelector, PodPhase};

    const NOW: i64 = 10_000;

    /// A ready pod controlled by the owner with `owner` as uid (none: unmanaged).
    fn owned(name: &str, owner: Option<&str>, ready: bool) -> Pod {
        let mut p = pod(name, 1, "n1", PodPhase::Running, ready.then_some(5));
        if let Some(uid) = owner {
            p.metadata.owner_references.push(OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: uid.into(),
                uid: uid.into(),
                controller: Some(true),
                ..OwnerReference::default()
            });
        }
        p
    }

    fn spec(min: Option<IntOrString>, max: Option<IntOrString>) -> PodDisruptionBudgetSpec {
        PodDisruptionBudgetSpec {
            min_available: min,
            max_unavailable: max,
            selector: Some(LabelSelector::default()),
            unhealthy_pod_eviction_policy: None,
        }
    }

    fn int(n: i32) -> Option<IntOrString> {
        Some(IntOrString::Int(n))
    }

    fn percent(p: &str) -> Option<IntOrString> {
        Some(IntOrString::String(p.into()))
    }

    /// ReplicaSet `rs-a` scales to 3 and belongs to Deployment `d` (5); `rs-b` belongs to
    /// `d` too; `rs-c` scales to 2; anything else is unknown.
    fn scales(_: &Pod, owner: &OwnerReference) -> Option<Scale> {
        match owner.uid.as_str() {
            "rs-a" | "rs-b" => Some(Scale {
                uid: "d".into(),
                replicas: 5,
            }),
            "rs-c" => Some(Scale {
                uid: "rs-c".into(),
                replicas: 2,
            }),
            _ => None,
        }
    }

    /// minAvailable as a count expects the pods selected and wants that many healthy; as a
    /// percentage, of the controllers' scale, rounded up; maxUnavailable takes its count
    /// (a percentage rounded up) from the scale, never below 0. A Deployment reached through
    /// two ReplicaSets counts once.
    #[test]
    fn expected_and_desired_by_the_budget() {
        let (a, b, c) = (
            owned("a", Some("rs-a"), true),
            owned("b", Some("rs-b"), true),
            owned("c", Some("rs-c"), false),
        );
        let pods = [&a, &b, &c];
        let e = |min, max| expected(&spec(min, max), &pods, scales).unwrap();
        assert_eq!(
            (e(int(2), None).expected, e(int(2), None).desired_healthy),
            (3, 2)
        );
        // Scale: 5 (d) + 2 (rs-c) = 7.
        assert_eq!(
            (
                e(percent("50%"), None).expected,
                e(percent("50%"), None).desired_healthy
            ),
            (7, 4)
        );
        assert_eq!(e(None, int(1)).desired_healthy, 6);
        assert_eq!(e(None, percent("30%")).desired_healthy, 7 - 3);
        assert_eq!(e(None, int(9)).desired_healthy, 0);
        assert_eq!(e(None, None), Expected::default());
    }

    /// A pod without a controller is left out of the scale and named; one whose controller
    /// cannot be found fails the sync in kube-controller-manager's words (a count budget
    /// needs no controllers).
    #[test]
    fn pods_without_a_known_controller() {
        let (a, lone, stray) = (
            owned("a", Some("rs-c"), true),
            owned("lone", None, true),
            owned("stray", Some("job-1"), true),
        );
        let e = expected(&spec(None, int(1)), &[&a, &lone], scales).unwrap();
        assert_eq!((e.expected, e.unmanaged), (2, vec!["lone".to_owned()]));
        assert_eq!(
            expected(&spec(percent("50%"), None), &[&a, &stray], scales).unwrap_err(),
            "found no controllers for pod \"stray\""
        );
        assert!(expected(&spec(int(1), None), &[&a, &stray], scales).is_ok());
    }

    /// An eviction's entry holds its pod out of the healthy count for two minutes, then
    /// expires; an entry whose pod is gone or being deleted is dropped; the controller looks
    /// again when the first entry left would expire.
    #[test]
    fn disrupted_pods_expire() {
        let (a, b, c, mut d) = (
            owned("a", None, true),
            owned("b", None, true),
            owned("c", None, true),
            owned("d", None, true),
        );
        d.metadata.deletion_timestamp = Time::from_unix(NOW);
        let at = |s: i64| Time::from_unix(s).unwrap();
        let recorded: BTreeMap<String, Time> = [
            ("a".to_owned(), at(NOW - 10)),
            ("b".to_owned(), at(NOW - DELETION_TIMEOUT_SECS - 1)),
            ("d".to_owned(), at(NOW - 5)),
            ("gone".to_owned(), at(NOW - 5)),
        ]
        .into();
        let pods = [&a, &b, &c, &d];
        let left = disrupted(&recorded, &pods, NOW);
        assert_eq!(left.pods.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(left.recheck_at, Some(NOW - 10 + DELETION_TIMEOUT_SECS));
        assert_eq!(left.expired, ["b"]);
        // a is being evicted, d deleted: b and c count.
        assert_eq!(current_healthy(&pods, &left.pods, NOW), 2);
        // Once a's time is up it counts again.
        assert_eq!(
            current_healthy(&pods, &left.pods, NOW - 10 + DELETION_TIMEOUT_SECS),
            3
        );
        let unready = owned("e", None, false);
        assert_eq!(current_healthy(&[&unready], &BTreeMap::new(), NOW), 0);
    }

    /// disruptionsAllowed is healthy − desired, never below 0, and 0 while nothing is
    /// expected; the condition says which; a status already right is not written again, one
    /// of an older generation is.
    #[test]
    fn the_status_and_when_it_is_written() {
        let mut pdb = PodDisruptionBudget::default();
        pdb.metadata.generation = Some(1);
        let e = Expected {
            expected: 3,
            desired_healthy: 2,
            unmanaged: Vec::new(),
        };
        let s = status(&pdb, &e, 3, BTreeMap::new()).expect("a first status");
        assert_eq!(
            (
                s.observed_generation,
                s.expected_pods,
                s.current_healthy,
                s.desired_healthy,
                s.disruptions_allowed
            ),
            (1, 3, 3, 2, 1)
        );
        let c = s.condition(DISRUPTION_ALLOWED).expect("condition");
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::True, SUFFICIENT_PODS)
        );
        pdb.status = s;
        assert_eq!(status(&pdb, &e, 3, BTreeMap::new()), None, "unchanged");
        let s = status(&pdb, &e, 1, BTreeMap::new()).expect("fewer healthy");
        assert_eq!(s.disruptions_allowed, 0);
        let c = s.condition(DISRUPTION_ALLOWED).expect("condition");
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::False, INSUFFICIENT_PODS)
        );
        let nothing = Expected {
            expected: 0,
            desired_healthy: 0,
            unmanaged: Vec::new(),
        };
        assert_eq!(
            status(&pdb, &nothing, 2, BTreeMap::new())
                .expect("changed")
                .disruptions_allowed,
            0
        );
        pdb.metadata.generation = Some(2);
        assert_eq!(
            status(&pdb, &e, 3, BTreeMap::new())
                .expect("a new generation")
                .observed_generation,
            2
        );
    }

    /// A failed sync allows no disruption and says why, keeping the rest of the status.
    #[test]
    fn a_failed_sync_fails_safe() {
        let mut pdb = PodDisruptionBudget::default();
        pdb.status.disruptions_allowed = 2;
        pdb.status.expected_pods = 4;
        let s = fail_safe(&pdb, "found no controllers for pod \"x\"".into());
        assert_eq!((s.disruptions_allowed, s.expected_pods), (0, 4));
        let c = s.condition(DISRUPTION_ALLOWED).expect("condition");
        assert_eq!(c.message, "found no controllers for pod \"x\"");
    }
}
