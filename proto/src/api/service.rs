//! `Service` (v1) and `EndpointSlice` (discovery.k8s.io/v1): a stable virtual address for the
//! pods a selector picks, and the list of those pods' addresses the EndpointSlice controller
//! keeps, as Kubernetes has them.
//!
//! A Service of type `ClusterIP` (the default) or `NodePort` gets a cluster IP from
//! `--service-cluster-ip-range` when it is created (`clusterIP: None` makes it headless:
//! no virtual address, its endpoints are the pods themselves); a `NodePort` one also gets a
//! port on every node from `--service-node-port-range` for each of its ports.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::meta::{IntOrString, ObjectMeta, Unmodelled};
#[cfg(test)]
use super::testing::{small_map, small_vec};

/// `spec.type` values Skiff serves.
pub const CLUSTER_IP: &str = "ClusterIP";
pub const NODE_PORT: &str = "NodePort";
/// `spec.clusterIP` of a headless Service.
pub const HEADLESS: &str = "None";
/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label that names who keeps an EndpointSlice.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// Its value on the slices the controller manager keeps.
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
/// Its value on the slices mirrored from the Endpoints of a Service without a selector.
pub const MIRRORED_BY: &str = "endpointslicemirroring-controller.k8s.io";
/// The label that names who keeps an Endpoints object.
pub const ENDPOINTS_MANAGED_BY_LABEL: &str = "endpoints.kubernetes.io/managed-by";
/// Its value on the Endpoints the controller manager keeps.
pub const ENDPOINTS_MANAGED_BY: &str = "endpoint-controller";
/// Addresses an Endpoints object holds at most; past them it is truncated and says so with
/// [`OVER_CAPACITY_ANNOTATION`].
pub const MAX_ENDPOINTS_ADDRESSES: usize = 1000;
pub const OVER_CAPACITY_ANNOTATION: &str = "endpoints.kubernetes.io/over-capacity";
/// When the change an EndpointSlice reflects happened (RFC 3339 with nanoseconds), as
/// Kubernetes' EndpointSlice controller writes it: each node's Service proxy measures its
/// network programming latency from it.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// The trigger time annotation's value for now.
pub fn trigger_time_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

/// How long ago a trigger time annotation's instant was (zero when it is in the future: a
/// clock ahead of this one); `None` when it is not RFC 3339.
pub fn trigger_age(value: &str) -> Option<std::time::Duration> {
    let at = chrono::DateTime::parse_from_rfc3339(value).ok()?;
    Some(
        chrono::Utc::now()
            .signed_duration_since(at)
            .to_std()
            .unwrap_or_default(),
    )
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Service {
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"v1\".to_string()"))]
    pub api_version: String,
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"Service\".to_string()"))]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ServiceSpec,
    /// `status.loadBalancer` and conditions: kept, not acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, proptest(value = "None"))]
    pub status: Option<serde_json::Value>,
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// `ClusterIP` (default) or `NodePort`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    /// The pods the Service sends to; none: its endpoints are kept by hand.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub ports: Vec<ServicePort>,
    /// Allocated when empty; `None`: headless.
    #[serde(
        default,
        rename = "clusterIP",
        skip_serializing_if = "String::is_empty"
    )]
    pub cluster_ip: String,
    #[serde(default, rename = "clusterIPs", skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub cluster_ips: Vec<String>,
    /// `None` (default) or `ClientIP`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session_affinity: String,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on (`ipFamilies`,
    /// `internalTrafficPolicy`, `externalTrafficPolicy`, ...).
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    /// Required when the Service has more than one port.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `TCP` (default), `UDP` or `SCTP`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    pub port: i32,
    /// The pods' port: a number, or the name of a container port; `port` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, proptest(value = "None"))]
    pub target_port: Option<IntOrString>,
    /// The port on every node (NodePort Services); allocated when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_port: Option<i32>,
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

impl Service {
    pub fn is_headless(&self) -> bool {
        self.spec.cluster_ip == HEADLESS
    }

    pub fn is_node_port(&self) -> bool {
        self.spec.type_ == NODE_PORT
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct EndpointSlice {
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"discovery.k8s.io/v1\".to_string()"))]
    pub api_version: String,
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"EndpointSlice\".to_string()"))]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `IPv4` here (`IPv6`, `FQDN` accepted).
    #[serde(default)]
    pub address_type: String,
    #[serde(default)]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub endpoints: Vec<Endpoint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub ports: Vec<EndpointPort>,
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub addresses: Vec<String>,
    #[serde(default)]
    pub conditions: EndpointConditions,
    /// The pod's hostname, for a pod whose `subdomain` is the Service: cluster DNS then
    /// answers `<hostname>.<service>.<namespace>.svc` with its address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_ref: Option<ObjectReference>,
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

/// Whether an endpoint takes traffic: `ready` (its pod is Ready and not terminating),
/// `serving` (Ready, terminating or not), `terminating`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct EndpointConditions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminating: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct EndpointPort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}
