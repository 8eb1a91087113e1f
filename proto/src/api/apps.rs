//! apps/v1 `Deployment` and `ReplicaSet`: the workloads the controller manager keeps running.
//!
//! A Deployment owns ReplicaSets, one per pod template it has had (named
//! `<deployment>-<pod-template-hash>`); a ReplicaSet owns the pods its selector matches and
//! keeps `replicas` of them. Field names, JSON shape and defaults follow apps/v1.

use serde::{Deserialize, Serialize};

use super::meta::{IntOrString, LabelSelector, ObjectMeta, Time, Unmodelled};
use super::pod::PodSpec;
#[cfg(test)]
use super::testing::small_vec;
use super::vocabulary::{ConditionStatus, DeploymentStrategyType, WorkloadConditionType};

/// The label a Deployment puts on its ReplicaSets and their pods: a hash of the pod template,
/// so the ReplicaSets of different templates select disjoint pods.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";
/// The annotation holding a ReplicaSet's (and its Deployment's) rollout revision.
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";
/// The revisions a ReplicaSet has been, when a rollback made an old template current again.
pub const REVISION_HISTORY_ANNOTATION: &str = "deployment.kubernetes.io/revision-history";
/// The Deployment's desired replicas, written on its ReplicaSets.
pub const DESIRED_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/desired-replicas";
/// `replicas + maxSurge` of the Deployment, written on its ReplicaSets.
pub const MAX_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/max-replicas";

/// The pod a workload creates: labels and annotations, and the pod spec.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct PodTemplateSpec {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PodSpec,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSet {
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"apps/v1\".to_string()"))]
    pub api_version: String,
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"ReplicaSet\".to_string()"))]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ReplicaSetSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ReplicaSetStatus>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSetSpec {
    /// 1 when defaulted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// How long a ready pod must stay ready before it counts as available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    /// Which pods are this ReplicaSet's; must match the template's labels; immutable.
    #[serde(default)]
    pub selector: LabelSelector,
    #[serde(default)]
    #[cfg_attr(test, proptest(strategy = "boxed_template()"))]
    pub template: PodTemplateSpec,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSetStatus {
    /// Pods the ReplicaSet owns and that are not being deleted.
    #[serde(default)]
    pub replicas: i32,
    /// Of those, the ones whose labels match the template's.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fully_labeled_replicas: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ready_replicas: i32,
    /// Ready for at least `minReadySeconds`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub available_replicas: i32,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub conditions: Vec<WorkloadCondition>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Deployment {
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"apps/v1\".to_string()"))]
    pub api_version: String,
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"Deployment\".to_string()"))]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: DeploymentSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<DeploymentStatus>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct DeploymentSpec {
    /// 1 when defaulted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Must match the template's labels; immutable.
    #[serde(default)]
    pub selector: LabelSelector,
    #[serde(default)]
    #[cfg_attr(test, proptest(strategy = "boxed_template()"))]
    pub template: PodTemplateSpec,
    /// RollingUpdate 25 % / 25 % when defaulted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<DeploymentStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    /// Old ReplicaSets kept for rollback; 10 when defaulted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,
    /// A paused Deployment scales, but does not roll out template changes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Seconds a rollout may go without progress before `Progressing=False`; 600 when
    /// defaulted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_seconds: Option<i32>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStrategy {
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<DeploymentStrategyType>,
    /// Only with `type: RollingUpdate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateDeployment>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

/// How far a rolling update may stray from `replicas`: a count, or a percentage of
/// `replicas` (`25%`; surge rounds up, unavailability down).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateDeployment {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pods of every ReplicaSet of the Deployment.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub replicas: i32,
    /// Pods of the current template.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub updated_replicas: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ready_replicas: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub available_replicas: i32,
    /// `replicas` wanted but not available (never negative).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unavailable_replicas: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub conditions: Vec<WorkloadCondition>,
    /// Bumped when a new ReplicaSet's name collides with an object the Deployment does not
    /// own; part of the template hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

/// A condition of a Deployment (which also sets `lastUpdateTime`) or a ReplicaSet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct WorkloadCondition {
    #[serde(rename = "type")]
    pub type_: WorkloadConditionType,
    pub status: ConditionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

/// A template's strategy on the heap: a pod spec's strategy is too large for the test
/// thread's stack when it sits inline in another object's.
#[cfg(test)]
fn boxed_template() -> proptest::strategy::BoxedStrategy<PodTemplateSpec> {
    use proptest::strategy::Strategy;
    proptest::arbitrary::any::<PodTemplateSpec>().boxed()
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

impl Deployment {
    /// `spec.replicas`, defaulted.
    pub fn replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(1)
    }

    pub fn strategy_type(&self) -> DeploymentStrategyType {
        self.spec
            .strategy
            .as_ref()
            .and_then(|s| s.type_)
            .unwrap_or(DeploymentStrategyType::RollingUpdate)
    }

    /// `(maxSurge, maxUnavailable)` as pod counts for the current `replicas`, as Kubernetes
    /// resolves them: surge rounds up, unavailability down, and when both come to 0
    /// unavailability is 1 so a rollout can move. Recreate has neither.
    pub fn surge_and_unavailable(&self) -> (i32, i32) {
        if self.strategy_type() == DeploymentStrategyType::Recreate {
            return (0, 0);
        }
        let ru = self
            .spec
            .strategy
            .as_ref()
            .and_then(|s| s.rolling_update.as_ref());
        let quarter = IntOrString::String("25%".into());
        let replicas = self.replicas();
        let surge = ru
            .and_then(|r| r.max_surge.as_ref())
            .unwrap_or(&quarter)
            .scaled(replicas, true)
            .unwrap_or(0);
        let unavailable = ru
            .and_then(|r| r.max_unavailable.as_ref())
            .unwrap_or(&quarter)
            .scaled(replicas, false)
            .unwrap_or(0);
        if surge == 0 && unavailable == 0 {
            (0, 1)
        } else {
            (surge, unavailable.min(replicas.max(0)))
        }
    }

    pub fn condition(&self, type_: &WorkloadConditionType) -> Option<&WorkloadCondition> {
        self.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| &c.type_ == type_))
    }
}

impl ReplicaSet {
    /// `spec.replicas`, defaulted.
    pub fn replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(yaml: &str) -> Deployment {
        serde_yaml_ng::from_str(yaml).expect("decodes")
    }

    #[test]
    fn surge_rounds_up_and_unavailability_down() {
        let d = deployment("spec: {replicas: 10}");
        assert_eq!(d.surge_and_unavailable(), (3, 2));
        let d = deployment(
            "spec: {replicas: 3, strategy: {rollingUpdate: {maxSurge: 0, maxUnavailable: '0%'}}}",
        );
        assert_eq!(
            d.surge_and_unavailable(),
            (0, 1),
            "a rollout must be able to move"
        );
        let d = deployment("spec: {replicas: 4, strategy: {type: Recreate}}");
        assert_eq!(d.surge_and_unavailable(), (0, 0));
        let d = deployment(
            "spec: {replicas: 2, strategy: {rollingUpdate: {maxSurge: 1, maxUnavailable: 5}}}",
        );
        assert_eq!(d.surge_and_unavailable(), (1, 2));
    }
}

/// A typed view of a stored DaemonSet (a declared kind), for its controller: read with
/// [`super::GenericObject::typed`], its status written back with
/// [`super::GenericObject::with_status`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DaemonSet {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: DaemonSetSpec,
    #[serde(default)]
    pub status: DaemonSetStatus,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DaemonSetSpec {
    #[serde(default)]
    pub selector: LabelSelector,
    #[serde(default)]
    pub template: PodTemplateSpec,
    #[serde(default)]
    pub update_strategy: DaemonSetUpdateStrategy,
    #[serde(default)]
    pub min_ready_seconds: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DaemonSetUpdateStrategy {
    /// `RollingUpdate` (the default) or `OnDelete`.
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
    #[serde(default)]
    pub rolling_update: Option<RollingUpdateDaemonSet>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateDaemonSet {
    #[serde(default)]
    pub max_unavailable: Option<IntOrString>,
    #[serde(default)]
    pub max_surge: Option<IntOrString>,
}

/// A DaemonSet's status, all of it: the controller writes it whole. The four counts
/// Kubernetes always writes are always written.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DaemonSetStatus {
    #[serde(default)]
    pub current_number_scheduled: i32,
    #[serde(default)]
    pub number_misscheduled: i32,
    #[serde(default)]
    pub desired_number_scheduled: i32,
    #[serde(default)]
    pub number_ready: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_number_scheduled: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number_available: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number_unavailable: Option<i32>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    pub other: Unmodelled,
}

impl DaemonSet {
    /// Whether pods of an old template are replaced as they are (`OnDelete`: only once
    /// deleted).
    pub fn rolls(&self) -> bool {
        self.spec.update_strategy.type_.as_deref() != Some("OnDelete")
    }
}

/// A typed view of a stored StatefulSet (a declared kind), for its controller: read with
/// [`super::GenericObject::typed`], its status written back with
/// [`super::GenericObject::with_status`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatefulSet {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: StatefulSetSpec,
    #[serde(default)]
    pub status: StatefulSetStatus,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatefulSetSpec {
    /// 1 when unset.
    #[serde(default)]
    pub replicas: Option<i32>,
    #[serde(default)]
    pub selector: LabelSelector,
    #[serde(default)]
    pub template: PodTemplateSpec,
    /// PersistentVolumeClaims each pod gets one of, named `<claim>-<set>-<ordinal>`.
    #[serde(default)]
    pub volume_claim_templates: Vec<serde_json::Value>,
    /// The headless Service that gives the pods their DNS names (`<pod>.<service>`).
    #[serde(default)]
    pub service_name: String,
    /// `OrderedReady` (the default) or `Parallel`.
    #[serde(default)]
    pub pod_management_policy: Option<String>,
    #[serde(default)]
    pub update_strategy: StatefulSetUpdateStrategy,
    #[serde(default)]
    pub revision_history_limit: Option<i32>,
    #[serde(default)]
    pub min_ready_seconds: Option<i32>,
    #[serde(default)]
    pub persistent_volume_claim_retention_policy: Option<ClaimRetentionPolicy>,
    /// The first ordinal (`ordinals.start`, 0 when unset).
    #[serde(default)]
    pub ordinals: Option<StatefulSetOrdinals>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatefulSetUpdateStrategy {
    /// `RollingUpdate` (the default) or `OnDelete`.
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
    #[serde(default)]
    pub rolling_update: Option<RollingUpdateStatefulSet>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateStatefulSet {
    /// Pods with an ordinal below it keep the current revision.
    #[serde(default)]
    pub partition: Option<i32>,
}

/// What becomes of the claims when the set is deleted or scaled down: `Retain` (the default)
/// or `Delete`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRetentionPolicy {
    #[serde(default)]
    pub when_deleted: Option<String>,
    #[serde(default)]
    pub when_scaled: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatefulSetOrdinals {
    #[serde(default)]
    pub start: i32,
}

/// A StatefulSet's status, all of it: the controller writes it whole. The counts Kubernetes
/// always writes are always written.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatefulSetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub replicas: i32,
    #[serde(default)]
    pub ready_replicas: i32,
    #[serde(default)]
    pub current_replicas: i32,
    #[serde(default)]
    pub updated_replicas: i32,
    #[serde(default)]
    pub available_replicas: i32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current_revision: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub update_revision: String,
    #[serde(default)]
    pub collision_count: i32,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    pub other: Unmodelled,
}

impl StatefulSet {
    pub fn replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(1).max(0)
    }

    /// The first ordinal.
    pub fn start(&self) -> i32 {
        self.spec.ordinals.as_ref().map_or(0, |o| o.start.max(0))
    }

    /// Pods start and stop one at a time, each waiting for the one before (`OrderedReady`).
    pub fn ordered(&self) -> bool {
        self.spec.pod_management_policy.as_deref() != Some("Parallel")
    }

    /// Pods of an old revision are replaced as they are (`OnDelete`: only once deleted).
    pub fn rolls(&self) -> bool {
        self.spec.update_strategy.type_.as_deref() != Some("OnDelete")
    }

    /// Ordinals below it keep the current revision in a rolling update.
    pub fn partition(&self) -> i32 {
        self.spec
            .update_strategy
            .rolling_update
            .as_ref()
            .and_then(|r| r.partition)
            .unwrap_or(0)
            .max(0)
    }

    /// Whether the claims go when the set is deleted (`whenDeleted`) or scaled down
    /// (`whenScaled`).
    pub fn deletes_claims(&self) -> (bool, bool) {
        let p = self.spec.persistent_volume_claim_retention_policy.as_ref();
        let is = |v: Option<&String>| v.is_some_and(|v| v == "Delete");
        (
            is(p.and_then(|p| p.when_deleted.as_ref())),
            is(p.and_then(|p| p.when_scaled.as_ref())),
        )
    }
}
