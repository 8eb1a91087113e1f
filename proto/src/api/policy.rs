//! policy/v1 `PodDisruptionBudget`, as a typed view of the declared kind: read with
//! [`super::GenericObject::typed`], its status written back with
//! [`super::GenericObject::with_status`]. Two parties share it:
//!
//! ```text
//!   disruption controller ── keeps status: expectedPods, currentHealthy, desiredHealthy,
//!   (controller manager)     disruptionsAllowed, observedGeneration, the DisruptionAllowed
//!                            condition; drops disruptedPods entries once their pod is gone
//!                            or DELETION_TIMEOUT has passed
//!   eviction (API server) ── spends it: disruptionsAllowed − 1 and the pod in disruptedPods,
//!                            by compare-and-swap, before the pod is deleted
//! ```
//!
//! A pod in `disruptedPods` is one an eviction is deleting: the controller does not count it
//! healthy meanwhile, so two evictions never spend the same disruption.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::meta::{Condition, IntOrString, LabelSelector, ObjectMeta, Unmodelled, set_condition};
use super::object::Kind;
use super::vocabulary::ConditionStatus;

/// The condition type the disruption controller and eviction keep.
pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";
/// `DisruptionAllowed` True: at least one disruption may happen now.
pub const SUFFICIENT_PODS: &str = "SufficientPods";
/// `DisruptionAllowed` False: none may.
pub const INSUFFICIENT_PODS: &str = "InsufficientPods";
/// `DisruptionAllowed` False: the controller could not work out the budget (the message
/// says why).
pub const SYNC_FAILED: &str = "SyncFailed";
/// `unhealthyPodEvictionPolicy`: a pod that is not ready may be evicted only while the
/// budget's healthy pods are enough (the default).
pub const IF_HEALTHY_BUDGET: &str = "IfHealthyBudget";
/// `unhealthyPodEvictionPolicy`: a pod that is not ready may always be evicted.
pub const ALWAYS_ALLOW: &str = "AlwaysAllow";
/// How long (seconds) a pod stays in `disruptedPods` waiting for its deletion to be seen
/// before the controller gives up on it (kube-controller-manager's `DeletionTimeout`).
pub const DELETION_TIMEOUT_SECS: i64 = 120;
/// The most pods `disruptedPods` may hold; an eviction past it is refused
/// (kube-apiserver's `MaxDisruptedPodSize`).
pub const MAX_DISRUPTED_PODS: usize = 2000;

/// The kind of PodDisruptionBudgets (declared).
pub fn pod_disruption_budget_kind() -> Kind {
    Kind::from_name("PodDisruptionBudget").expect("invariant: PodDisruptionBudget is declared")
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodDisruptionBudget {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PodDisruptionBudgetSpec,
    #[serde(default)]
    pub status: PodDisruptionBudgetStatus,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodDisruptionBudgetSpec {
    /// Pods that must stay available: a count, or a percentage of the expected pods.
    #[serde(default)]
    pub min_available: Option<IntOrString>,
    /// Pods that may be unavailable: a count, or a percentage of the expected pods.
    #[serde(default)]
    pub max_unavailable: Option<IntOrString>,
    /// Which pods of the namespace the budget covers: none when unset, all when empty.
    #[serde(default)]
    pub selector: Option<LabelSelector>,
    /// [`IF_HEALTHY_BUDGET`] (unset) or [`ALWAYS_ALLOW`].
    #[serde(default)]
    pub unhealthy_pod_eviction_policy: Option<String>,
}

/// A budget's status, all of it: the controller writes it whole, eviction changes it. The
/// counts Kubernetes always writes are always written.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodDisruptionBudgetStatus {
    /// The `metadata.generation` the counts were worked out for; eviction trusts none older.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
    /// Pods an eviction is deleting, by name, with when it began.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub disrupted_pods: BTreeMap<String, super::meta::Time>,
    #[serde(default)]
    pub disruptions_allowed: i32,
    #[serde(default)]
    pub current_healthy: i32,
    #[serde(default)]
    pub desired_healthy: i32,
    #[serde(default)]
    pub expected_pods: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    pub other: Unmodelled,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl PodDisruptionBudget {
    /// Whether the budget covers a pod with `labels` (of its namespace): policy/v1's
    /// reading, in which an unset selector covers none and an empty one every pod.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.spec
            .selector
            .as_ref()
            .is_some_and(|s| s.matches(labels))
    }

    /// Whether a pod that is not ready may be evicted whatever the budget says.
    pub fn always_allows_unhealthy(&self) -> bool {
        self.spec.unhealthy_pod_eviction_policy.as_deref() == Some(ALWAYS_ALLOW)
    }

    /// Whether the `DisruptionAllowed` condition says what the status does, for the
    /// current generation (Kubernetes' `ConditionsAreUpToDate`).
    pub fn conditions_up_to_date(&self) -> bool {
        let s = &self.status;
        let Some(c) = s.condition(DISRUPTION_ALLOWED) else {
            return false;
        };
        if s.observed_generation != self.metadata.generation.unwrap_or(0) {
            return false;
        }
        if s.disruptions_allowed > 0 {
            c.status == ConditionStatus::True && c.reason == SUFFICIENT_PODS
        } else {
            c.status == ConditionStatus::False && c.reason == INSUFFICIENT_PODS
        }
    }
}

impl PodDisruptionBudgetStatus {
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Sets `DisruptionAllowed` from `disruptionsAllowed` (Kubernetes'
    /// `UpdateDisruptionAllowedCondition`, which the controller and eviction both call).
    pub fn set_allowed_condition(&mut self) {
        let (status, reason) = if self.disruptions_allowed > 0 {
            (ConditionStatus::True, SUFFICIENT_PODS)
        } else {
            (ConditionStatus::False, INSUFFICIENT_PODS)
        };
        self.set_disruption_condition(status, reason, String::new());
    }

    /// Sets `DisruptionAllowed` False with reason [`SYNC_FAILED`] and `why` (the
    /// controller's fail-safe, no disruption allowed).
    pub fn set_sync_failed(&mut self, why: String) {
        self.disruptions_allowed = 0;
        self.set_disruption_condition(ConditionStatus::False, SYNC_FAILED, why);
    }

    fn set_disruption_condition(&mut self, status: ConditionStatus, reason: &str, message: String) {
        // Written only when set, as Kubernetes' `omitempty` does.
        let observed_generation = Some(self.observed_generation).filter(|g| *g > 0);
        set_condition(
            &mut self.conditions,
            Condition {
                type_: DISRUPTION_ALLOWED.to_owned(),
                status,
                observed_generation,
                last_transition_time: None,
                reason: reason.to_owned(),
                message,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::labels;

    /// An unset selector covers no pod, an empty one every pod (policy/v1).
    #[test]
    fn selectors_as_policy_v1_reads_them() {
        let mut pdb = PodDisruptionBudget::default();
        assert!(!pdb.selects(&labels(&[("app", "web")])));
        pdb.spec.selector = Some(LabelSelector::default());
        assert!(pdb.selects(&labels(&[("app", "web")])));
        assert!(pdb.selects(&labels(&[])));
        pdb.spec.selector = Some(LabelSelector {
            match_labels: labels(&[("app", "db")]),
            ..LabelSelector::default()
        });
        assert!(!pdb.selects(&labels(&[("app", "web")])));
    }

    /// The condition follows the allowed disruptions; its time moves only when its status
    /// does; a sync failure is False with the error; it is up to date only for the current
    /// generation.
    #[test]
    fn the_condition_follows_the_allowed_disruptions() {
        let mut pdb = PodDisruptionBudget::default();
        pdb.metadata.generation = Some(2);
        pdb.status.observed_generation = 2;
        assert!(!pdb.conditions_up_to_date());
        pdb.status.disruptions_allowed = 1;
        pdb.status.set_allowed_condition();
        assert!(pdb.conditions_up_to_date());
        let c = pdb.status.condition(DISRUPTION_ALLOWED).unwrap().clone();
        assert_eq!(
            (c.status, c.reason.as_str(), c.observed_generation),
            (ConditionStatus::True, SUFFICIENT_PODS, Some(2))
        );
        assert!(c.last_transition_time.is_some());
        pdb.status.disruptions_allowed = 0;
        assert!(!pdb.conditions_up_to_date());
        pdb.status.set_allowed_condition();
        assert!(pdb.conditions_up_to_date());
        pdb.status
            .set_sync_failed("found no controllers for pod \"x\"".into());
        let c = pdb.status.condition(DISRUPTION_ALLOWED).unwrap();
        assert_eq!(
            (c.reason.as_str(), c.message.as_str()),
            (SYNC_FAILED, "found no controllers for pod \"x\"")
        );
        assert!(!pdb.conditions_up_to_date());
        assert_eq!(pdb.status.conditions.len(), 1);
        pdb.metadata.generation = Some(3);
        pdb.status.set_allowed_condition();
        assert!(!pdb.conditions_up_to_date(), "generation 3 not observed");
    }

    /// A status reads and writes as Kubernetes' JSON: the four counts always, the rest when
    /// set.
    #[test]
    fn status_json() {
        let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "generation": 1},
            "spec": {"maxUnavailable": "25%", "selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptedPods": {"web-1": "2026-01-02T15:04:05Z"}, "observedGeneration": 1,
                       "disruptionsAllowed": 0, "currentHealthy": 3, "desiredHealthy": 3,
                       "expectedPods": 4},
        }))
        .unwrap();
        assert_eq!(
            pdb.spec.max_unavailable,
            Some(IntOrString::String("25%".into()))
        );
        assert_eq!(pdb.status.disrupted_pods.len(), 1);
        assert_eq!(
            serde_json::to_value(PodDisruptionBudgetStatus::default()).unwrap(),
            serde_json::json!({"disruptionsAllowed": 0, "currentHealthy": 0,
                               "desiredHealthy": 0, "expectedPods": 0})
        );
    }
}
