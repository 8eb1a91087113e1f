//! rbac.authorization.k8s.io/v1 (`Role`, `ClusterRole`, `RoleBinding`, `ClusterRoleBinding`)
//! and authorization.k8s.io/v1 (`SubjectAccessReview`, `SelfSubjectAccessReview`): who may do
//! what, and the question a client asks about it (`kubectl auth can-i`).
//!
//! The store's authorizer reads these objects; what a rule grants is decided there, in one
//! place, for both APIs.

use serde::{Deserialize, Serialize};

use super::meta::{ObjectMeta, Unmodelled};
#[cfg(test)]
use super::testing::small_vec;

/// The API group of the RBAC kinds, as `roleRef.apiGroup` and subjects name it.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// One grant: these verbs on these resources (of these API groups, optionally only these
/// names), or these verbs on non-resource URLs (`/healthz`, `/api/*`). `*` matches anything.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    #[serde(default)]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub verbs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub api_groups: Vec<String>,
    /// Resources, or `resource/subresource` (`pods/log`), or `*/scale`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub resources: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub resource_names: Vec<String>,
    /// Paths that are no resource; a trailing `*` matches every path below.
    #[serde(
        default,
        rename = "nonResourceURLs",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub non_resource_urls: Vec<String>,
}

/// Rules that hold in one namespace (and, as a [`ClusterRole`], in any).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Role {
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"rbac.authorization.k8s.io/v1\".to_string()"))]
    pub api_version: String,
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"Role\".to_string()"))]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub rules: Vec<PolicyRule>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

/// Rules that hold in every namespace (through a ClusterRoleBinding) or in one (through a
/// RoleBinding), and the only place non-resource URLs are granted: a Role's shape, cluster
/// wide (its `aggregationRule` kept, not acted on).
pub type ClusterRole = Role;

/// Who a binding grants its role to.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    /// `User`, `Group` or `ServiceAccount`.
    pub kind: String,
    /// `rbac.authorization.k8s.io` for users and groups, empty for service accounts.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    pub name: String,
    /// A service account's namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// The role a binding grants: a `Role` of the binding's namespace or a `ClusterRole`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct RoleRef {
    #[serde(default)]
    pub api_group: String,
    pub kind: String,
    pub name: String,
}

/// Grants a role's rules, within the binding's namespace, to its subjects (and, as a
/// [`ClusterRoleBinding`], in every namespace).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct RoleBinding {
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"rbac.authorization.k8s.io/v1\".to_string()"))]
    pub api_version: String,
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"RoleBinding\".to_string()"))]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub subjects: Vec<Subject>,
    #[serde(default)]
    pub role_ref: RoleRef,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

/// Grants a ClusterRole's rules, in every namespace, to its subjects: a RoleBinding's shape,
/// cluster wide.
pub type ClusterRoleBinding = RoleBinding;

/// The request a review asks about: a verb on a resource (`resourceAttributes`) or on a path
/// (`nonResourceAttributes`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ResourceAttributes {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub verb: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The list's or watch's field selector (what the node authorizer reads: an agent lists
    /// the pods of `spec.nodeName=<itself>` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<FieldSelectorAttributes>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct FieldSelectorAttributes {
    /// The selector as a client wrote it (`spec.nodeName=n1`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub raw_selector: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct NonResourceAttributes {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub verb: String,
}

/// What a review asks: for `SubjectAccessReview` also who asks (`user`, `groups`); a
/// `SelfSubjectAccessReview` asks for the user who sends it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct AccessReviewSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_attributes: Option<ResourceAttributes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_resource_attributes: Option<NonResourceAttributes>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on (`extra`).
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

/// The answer to a review.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct AccessReviewStatus {
    pub allowed: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub denied: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub evaluation_error: String,
}

/// `SubjectAccessReview` and `SelfSubjectAccessReview` alike: created, answered, never
/// stored.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct AccessReview {
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"authorization.k8s.io/v1\".to_string()"))]
    pub api_version: String,
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"SubjectAccessReview\".to_string()"))]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: AccessReviewSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<AccessReviewStatus>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}
