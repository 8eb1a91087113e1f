//! `Node`: a machine the scheduler places pods on and whose agent runs them.

use serde::{Deserialize, Serialize};

use super::meta::{ObjectMeta, ResourceList, Time, Unmodelled};
#[cfg(test)]
use super::testing::{small_map, small_vec};
use super::vocabulary::{ConditionStatus, NodeConditionType, TaintEffect};

/// The group of every node agent's user (a certificate's O, as Kubernetes names it).
pub const NODES_GROUP: &str = "system:nodes";
/// The prefix of a node agent's user name: `system:node:<node name>`.
pub const NODE_USER_PREFIX: &str = "system:node:";

/// The taint the node lifecycle controller puts on a node that is not Ready.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The taint on a node whose Ready condition is Unknown (its agent stopped reporting).
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// How long a node's Ready heartbeat may be silent before the node counts as unreachable
/// (kube-controller-manager's `--node-monitor-grace-period`).
pub const NODE_MONITOR_GRACE_SECS: i64 = 40;
/// How long a pod stays on a not-ready or unreachable node before it is evicted, when it
/// says nothing itself (the DefaultTolerationSeconds admission plugin's default).
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Node {
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"v1\".to_string()"))]
    pub api_version: String,
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"Node\".to_string()"))]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: NodeSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<NodeStatus>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    /// Cordoned: no new pods are scheduled here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unschedulable: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub taints: Vec<Taint>,
    /// The node's block of the cluster's pod network (given at registration).
    #[serde(default, rename = "podCIDR", skip_serializing_if = "String::is_empty")]
    pub pod_cidr: String,
    /// The same block (a second one for another IP family, in Kubernetes).
    #[serde(default, rename = "podCIDRs", skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub pod_cidrs: Vec<String>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    pub effect: TaintEffect,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<Time>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub capacity: ResourceList,
    /// What pods may use: capacity minus what the system reserves.
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub allocatable: ResourceList,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub conditions: Vec<NodeCondition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub addresses: Vec<NodeAddress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_info: Option<NodeSystemInfo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub images: Vec<ContainerImage>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct NodeCondition {
    #[serde(rename = "type")]
    pub type_: NodeConditionType,
    pub status: ConditionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,
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

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct NodeAddress {
    /// `InternalIP`, `ExternalIP` or `Hostname`.
    #[serde(rename = "type")]
    pub type_: String,
    pub address: String,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct NodeSystemInfo {
    // Every field is written, empty when unknown, as Kubernetes' Go type writes them: strict
    // clients refuse a node whose `nodeInfo` lacks one.
    #[serde(default, rename = "machineID")]
    pub machine_id: String,
    #[serde(default, rename = "systemUUID")]
    pub system_uuid: String,
    #[serde(default, rename = "bootID")]
    pub boot_id: String,
    #[serde(default)]
    pub kernel_version: String,
    #[serde(default)]
    pub os_image: String,
    #[serde(default)]
    pub container_runtime_version: String,
    #[serde(default)]
    pub kubelet_version: String,
    /// Deprecated in Kubernetes and never set by it since 1.31; still required by its schema.
    #[serde(default)]
    pub kube_proxy_version: String,
    #[serde(default)]
    pub operating_system: String,
    #[serde(default)]
    pub architecture: String,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ContainerImage {
    #[serde(default)]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub names: Vec<String>,
    #[serde(default)]
    pub size_bytes: i64,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

impl NodeCondition {
    /// A condition with no reason, message or times.
    pub fn new(type_: NodeConditionType, status: ConditionStatus) -> NodeCondition {
        NodeCondition {
            type_,
            status,
            last_heartbeat_time: None,
            last_transition_time: None,
            reason: String::new(),
            message: String::new(),
            other: Default::default(),
        }
    }
}

impl Node {
    /// The condition of `type_`, if reported.
    pub fn condition(&self, type_: &NodeConditionType) -> Option<&NodeCondition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == *type_)
    }

    /// Whether the node reports `Ready=True`.
    pub fn is_ready(&self) -> bool {
        self.condition(&NodeConditionType::Ready)
            .is_some_and(|c| c.status == ConditionStatus::True)
    }
}

impl NodeSpec {
    /// An update that names no pod CIDR keeps the one registration gave (`current`'s).
    pub fn keep_pod_cidr(&mut self, current: &NodeSpec) {
        if self.pod_cidr.is_empty() && self.pod_cidrs.is_empty() {
            self.pod_cidr = current.pod_cidr.clone();
            self.pod_cidrs = current.pod_cidrs.clone();
        }
    }
}
