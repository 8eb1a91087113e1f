//! `Namespace`, `ResourceQuota`, `LimitRange` and `Binding`: the policy objects admission
//! consults and the object a scheduler posts.

use serde::{Deserialize, Serialize};

use super::meta::{ObjectMeta, ResourceList, Unmodelled};
#[cfg(test)]
use super::testing::{small_map, small_vec};

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
    pub status: Option<NamespaceStatus>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct NamespaceStatus {
    /// `Active` or `Terminating`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
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
