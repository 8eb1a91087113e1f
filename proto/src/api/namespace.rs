//! `Namespace`, `ResourceQuota`, `LimitRange` and `Binding`: the policy objects admission
//! consults and the object a scheduler posts.

use serde::{Deserialize, Serialize};

use super::meta::{ObjectMeta, ResourceList, Time, Unmodelled};
#[cfg(test)]
use super::testing::{small_map, small_vec};
use super::vocabulary::{ConditionStatus, NamespaceConditionType, NamespacePhase};

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Namespace {
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"v1\".to_string()"))]
    pub api_version: String,
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"Namespace\".to_string()"))]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<NamespaceSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<NamespaceStatus>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

/// The finalizer every namespace is created with: the namespace controller removes it (through
/// the `finalize` subresource) once everything in the namespace is gone, and only then does a
/// deleted namespace go.
pub const FINALIZER_KUBERNETES: &str = "kubernetes";

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct NamespaceSpec {
    /// What must finish before a deleted namespace goes ([`FINALIZER_KUBERNETES`]); written
    /// only through the `finalize` subresource.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub finalizers: Vec<String>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct NamespaceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<NamespacePhase>,
    /// The namespace controller's account of a deletion under way.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub conditions: Vec<NamespaceCondition>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct NamespaceCondition {
    #[serde(rename = "type")]
    pub type_: NamespaceConditionType,
    pub status: ConditionStatus,
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

impl Namespace {
    /// What kube-apiserver makes of a new namespace: `Active`, and held by
    /// [`FINALIZER_KUBERNETES`] (added to any finalizers the request names).
    pub fn prepare_for_create(&mut self) {
        self.status = Some(NamespaceStatus {
            phase: Some(NamespacePhase::Active),
            ..NamespaceStatus::default()
        });
        let spec = self.spec.get_or_insert_with(Default::default);
        if !spec.finalizers.iter().any(|f| f == FINALIZER_KUBERNETES) {
            spec.finalizers.push(FINALIZER_KUBERNETES.to_owned());
        }
    }

    /// `spec.finalizers`: what a deleted namespace still waits for.
    pub fn finalizers(&self) -> &[String] {
        self.spec.as_ref().map_or(&[], |s| &s.finalizers)
    }

    pub fn phase(&self) -> Option<NamespacePhase> {
        self.status.as_ref().and_then(|s| s.phase)
    }
}

/// Caps per namespace: object counts (`pods`) and request/limit totals (`requests.cpu`,
/// `limits.memory`, or the short forms `cpu`, `memory` meaning requests).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ResourceQuota {
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"v1\".to_string()"))]
    pub api_version: String,
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"ResourceQuota\".to_string()"))]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ResourceQuotaSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ResourceQuotaStatus>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ResourceQuotaSpec {
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub hard: ResourceList,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ResourceQuotaStatus {
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub hard: ResourceList,
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub used: ResourceList,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

/// Defaults and bounds for the containers (or whole pods) of a namespace.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct LimitRange {
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"v1\".to_string()"))]
    pub api_version: String,
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"LimitRange\".to_string()"))]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: LimitRangeSpec,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct LimitRangeSpec {
    #[serde(default)]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub limits: Vec<LimitRangeItem>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct LimitRangeItem {
    /// `Container` or `Pod`.
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub max: ResourceList,
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub min: ResourceList,
    /// Limits given to containers that set none.
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub default: ResourceList,
    /// Requests given to containers that set none.
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub default_request: ResourceList,
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub max_limit_request_ratio: ResourceList,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

/// Binds a pod (named by `metadata`) to a node (`target`), as posted by a scheduler.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Binding {
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"v1\".to_string()"))]
    pub api_version: String,
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"Binding\".to_string()"))]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub target: ObjectReference,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Which part of the object, e.g. `spec.containers{web}` for one container of a pod.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field_path: String,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}
