//! `Pod`: core/v1 semantics for the fields Skiff schedules and runs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::meta::{IntOrString, LabelSelector, ObjectMeta, ResourceList, Time, Unmodelled};
#[cfg(test)]
use super::testing::{small_map, small_vec};
use super::vocabulary::{ConditionStatus, PodConditionType, PodPhase, RestartPolicy, TaintEffect};
use super::volume::{EnvFromSource, EnvVarSource, Volume, VolumeMount};

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Pod {
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"v1\".to_string()"))]
    pub api_version: String,
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"Pod\".to_string()"))]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PodSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodStatus>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub init_containers: Vec<Container>,
    #[serde(default)]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub containers: Vec<Container>,
    /// `Always` when defaulted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<RestartPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    /// How long the pod may be active on its node, from its start time, before the node
    /// stops it and it fails with `DeadlineExceeded`. It may be set, or shortened, later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// The node the pod is bound to; set by the scheduler through Bind.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub priority_class_name: String,
    /// `PreemptLowerPriority` (the default, from the pod's PriorityClass) or `Never`: whether
    /// the scheduler may preempt lower-priority pods to place this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_policy: Option<String>,
    /// Which scheduler places this pod; Skiff's answers to `default-scheduler`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scheduler_name: String,
    /// The pod's service account; ServiceAccount admission names `default` when none is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_account_name: String,
    /// The deprecated alias of `service_account_name`, kept equal to it as Kubernetes does.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_account: String,
    /// `false`: no service account token is mounted (else the ServiceAccount's own
    /// setting decides, and it is mounted when that says nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automount_service_account_token: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub volumes: Vec<Volume>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_network: Option<bool>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Container {
    pub name: String,
    #[serde(default)]
    pub image: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub working_dir: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub env: Vec<EnvVar>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub env_from: Vec<EnvFromSource>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub volume_mounts: Vec<VolumeMount>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub ports: Vec<ContainerPort>,
    #[serde(default, skip_serializing_if = "ResourceRequirements::is_empty")]
    pub resources: ResourceRequirements,
    /// `Always`, `IfNotPresent` or `Never`; defaulted from the image tag.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_pull_policy: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<Probe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<Probe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_probe: Option<Probe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<EnvVarSource>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ContainerPort {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    pub container_port: i32,
    /// A port on the node; the scheduler keeps two pods from claiming the same one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_port: Option<i32>,
    /// `TCP` (default), `UDP` or `SCTP`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    #[serde(default, rename = "hostIP", skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub requests: ResourceList,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub limits: ResourceList,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

impl ResourceRequirements {
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty() && self.limits.is_empty()
    }
}

/// A health check. Exactly one handler (`exec`, `tcpSocket`, `httpGet`) is set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Probe {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecAction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_socket: Option<TcpSocketAction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HttpGetAction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_delay_seconds: Option<i32>,
    /// Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i32>,
    /// Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_seconds: Option<i32>,
    /// Default 1; must be 1 for liveness and startup probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_threshold: Option<i32>,
    /// Default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<i32>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ExecAction {
    #[serde(default)]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub command: Vec<String>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct TcpSocketAction {
    pub port: IntOrString,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct HttpGetAction {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    pub port: IntOrString,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
    /// Only `HTTP` is served.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scheme: String,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_start: Option<LifecycleHandler>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_stop: Option<LifecycleHandler>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct LifecycleHandler {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecAction>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Affinity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<NodeAffinity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_affinity: Option<PodAffinity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_anti_affinity: Option<PodAffinity>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct NodeAffinity {
    #[serde(
        default,
        rename = "requiredDuringSchedulingIgnoredDuringExecution",
        skip_serializing_if = "Option::is_none"
    )]
    pub required: Option<NodeSelector>,
    #[serde(
        default,
        rename = "preferredDuringSchedulingIgnoredDuringExecution",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub preferred: Vec<PreferredSchedulingTerm>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

/// Terms are ORed; the requirements inside one term are ANDed.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct NodeSelector {
    #[serde(default)]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub node_selector_terms: Vec<NodeSelectorTerm>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorTerm {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub match_expressions: Vec<NodeSelectorRequirement>,
    /// Requirements on node fields; only `metadata.name` is supported, as in Kubernetes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub match_fields: Vec<NodeSelectorRequirement>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirement {
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt` or `Lt`.
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub values: Vec<String>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct PreferredSchedulingTerm {
    /// 1–100.
    pub weight: i32,
    pub preference: NodeSelectorTerm,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

/// Pod affinity or anti-affinity (the same shape serves both).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct PodAffinity {
    #[serde(
        default,
        rename = "requiredDuringSchedulingIgnoredDuringExecution",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub required: Vec<PodAffinityTerm>,
    #[serde(
        default,
        rename = "preferredDuringSchedulingIgnoredDuringExecution",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub preferred: Vec<WeightedPodAffinityTerm>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct PodAffinityTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Namespaces the selector applies to; empty means the pod's own namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub namespaces: Vec<String>,
    #[serde(default)]
    pub topology_key: String,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct WeightedPodAffinityTerm {
    /// 1–100.
    pub weight: i32,
    pub pod_affinity_term: PodAffinityTerm,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// Empty with operator `Exists` tolerates every taint.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// `Equal` (default) or `Exists`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operator: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// `None` matches every effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct TopologySpreadConstraint {
    pub max_skew: i32,
    pub topology_key: String,
    /// `DoNotSchedule` or `ScheduleAnyway`.
    pub when_unsatisfiable: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_domains: Option<i32>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PodPhase>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub conditions: Vec<PodCondition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub init_container_statuses: Vec<ContainerStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub container_statuses: Vec<ContainerStatus>,
    #[serde(default, rename = "podIP", skip_serializing_if = "String::is_empty")]
    pub pod_ip: String,
    #[serde(default, rename = "hostIP", skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// `Guaranteed`, `Burstable` or `BestEffort`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub qos_class: String,
    /// The node the scheduler preempted pods on for this pending pod: where it expects to
    /// place it once they are gone (it may still go elsewhere).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub nominated_node_name: String,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct PodCondition {
    #[serde(rename = "type")]
    pub type_: PodConditionType,
    pub status: ConditionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
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
pub struct ContainerStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ContainerState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_state: Option<ContainerState>,
    #[serde(default)]
    pub ready: bool,
    #[serde(default)]
    pub restart_count: i32,
    // Kubernetes writes both, empty until the runtime has pulled the image.
    #[serde(default)]
    pub image: String,
    #[serde(default, rename = "imageID")]
    pub image_id: String,
    #[serde(
        default,
        rename = "containerID",
        skip_serializing_if = "String::is_empty"
    )]
    pub container_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<bool>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

/// At most one of the three is set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ContainerState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<ContainerStateWaiting>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<ContainerStateRunning>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminated: Option<ContainerStateTerminated>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ContainerStateWaiting {
    /// `ContainerCreating`, `ErrImagePull`, `ImagePullBackOff`, `CrashLoopBackOff`, ...
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
pub struct ContainerStateRunning {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ContainerStateTerminated {
    pub exit_code: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// `Completed`, `Error`, `OOMKilled`, ...
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    #[serde(
        default,
        rename = "containerID",
        skip_serializing_if = "String::is_empty"
    )]
    pub container_id: String,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

impl NodeSelectorRequirement {
    /// Whether a node whose label `key` has `value` (`None`: no such label) satisfies the
    /// requirement. `Gt` and `Lt` compare integers; anything unparsable fails.
    pub fn matches(&self, value: Option<&str>) -> bool {
        let number = |s: &str| s.parse::<i64>().ok();
        match self.operator.as_str() {
            "In" => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            "NotIn" => value.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            "Gt" | "Lt" => {
                let (Some(v), Some(bound)) = (
                    value.and_then(number),
                    self.values.first().and_then(|b| number(b)),
                ) else {
                    return false;
                };
                if self.operator == "Gt" {
                    v > bound
                } else {
                    v < bound
                }
            }
            _ => false,
        }
    }
}

impl Toleration {
    /// Kubernetes' rule: the effect matches (empty matches every effect), and either the
    /// operator is `Exists` (with an empty key: every key) or key and value are equal.
    pub fn tolerates(&self, taint: &super::node::Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        match self.operator.as_str() {
            "Exists" => self.key.is_empty() || self.key == taint.key,
            _ => self.key == taint.key && self.value == taint.value,
        }
    }
}

impl PodCondition {
    /// A condition with no reason, message or times.
    pub fn new(type_: PodConditionType, status: ConditionStatus) -> PodCondition {
        PodCondition {
            type_,
            status,
            last_probe_time: None,
            last_transition_time: None,
            reason: String::new(),
            message: String::new(),
            other: Default::default(),
        }
    }
}

impl PodStatus {
    /// The condition of `type_`, if reported.
    pub fn condition(&self, type_: &PodConditionType) -> Option<&PodCondition> {
        self.conditions.iter().find(|c| c.type_ == *type_)
    }

    /// Sets `condition` in place of the one of its type, or appends it; the one way
    /// conditions are written. As Kubernetes' `UpdatePodCondition`: `lastTransitionTime` is
    /// kept when the status stays the same, and otherwise is the condition's own (now when it
    /// has none). Returns whether the status changed in any way.
    pub fn set_condition(&mut self, condition: PodCondition) -> bool {
        super::meta::set_condition(&mut self.conditions, condition)
    }
}

impl super::meta::StatusCondition for PodCondition {
    type Type = PodConditionType;
    fn condition_type(&self) -> &PodConditionType {
        &self.type_
    }
    fn condition_status(&self) -> &ConditionStatus {
        &self.status
    }
    fn transition_time(&mut self) -> &mut Option<Time> {
        &mut self.last_transition_time
    }
}

impl Pod {
    /// Whether `node` is one the pod may run on by its `nodeSelector` and its required node
    /// affinity (labels, and `metadata.name` as a field), as the scheduler, the kubelet's
    /// admission and the DaemonSet controller all decide it.
    pub fn selects_node(&self, node: &super::node::Node) -> bool {
        let labels = &node.metadata.labels;
        if !self
            .spec
            .node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
        {
            return false;
        }
        let Some(required) = self
            .spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| n.required.as_ref())
        else {
            return true;
        };
        required.node_selector_terms.iter().any(|term| {
            (!term.match_expressions.is_empty() || !term.match_fields.is_empty())
                && term
                    .match_expressions
                    .iter()
                    .all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
                && term.match_fields.iter().all(|r| {
                    let value = (r.key == "metadata.name").then_some(node.metadata.name.as_str());
                    r.matches(value)
                })
        })
    }

    /// Sum of app-container requests for `resource`, raised to the largest init-container
    /// request (init containers run one at a time, before the app containers), as the
    /// kube-scheduler computes a pod's effective request.
    pub fn effective_request(&self, resource: &str) -> crate::quantity::Quantity {
        use crate::quantity::Quantity;
        let sum = self
            .spec
            .containers
            .iter()
            .filter_map(|c| c.resources.requests.get(resource))
            .fold(Quantity::ZERO, |acc, q| acc.checked_add(q).unwrap_or(acc));
        self.spec
            .init_containers
            .iter()
            .filter_map(|c| c.resources.requests.get(resource))
            .fold(sum, |acc, q| if *q > acc { *q } else { acc })
    }

    /// Whether the pod has reached a phase it never leaves.
    pub fn is_terminal(&self) -> bool {
        self.phase().is_some_and(PodPhase::is_terminal)
    }

    /// The pod's phase, when its status has one.
    pub fn phase(&self) -> Option<PodPhase> {
        self.status.as_ref()?.phase
    }

    /// The condition of `type_`, if reported.
    pub fn condition(&self, type_: &PodConditionType) -> Option<&PodCondition> {
        self.status.as_ref()?.condition(type_)
    }
}

/// `spec.preemptionPolicy` (and a PriorityClass's `preemptionPolicy`): the pod may have pods
/// of lower priority preempted to make room for it. The default.
pub const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";
/// `spec.preemptionPolicy`: the pod waits for room and preempts no one.
pub const PREEMPT_NEVER: &str = "Never";
/// Every preemption policy Kubernetes knows.
pub const PREEMPTION_POLICIES: [&str; 2] = [PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER];

impl PodSpec {
    /// An update that names no service account keeps the one admission gave (`current`'s):
    /// a manifest applied again need not repeat it.
    pub fn keep_service_account(&mut self, current: &PodSpec) {
        if self.service_account_name.is_empty() && self.service_account.is_empty() {
            self.service_account_name = current.service_account_name.clone();
            self.service_account = current.service_account.clone();
        }
    }

    /// An update that leaves out `priority` or `preemptionPolicy` keeps what Priority
    /// admission gave at creation (`current`'s), as kube-apiserver's plugin does on update;
    /// so does one that leaves out `priorityClassName` (the default class admission named,
    /// which a manifest applied again need not repeat). One that gives other values is
    /// refused with the rest of an immutable spec.
    pub fn keep_priority(&mut self, current: &PodSpec) {
        if self.priority_class_name.is_empty() {
            self.priority_class_name = current.priority_class_name.clone();
        }
        if self.priority.is_none() {
            self.priority = current.priority;
        }
        if self.preemption_policy.is_none() {
            self.preemption_policy = current.preemption_policy.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scheduled(status: ConditionStatus, at: i64, message: &str) -> PodCondition {
        PodCondition {
            last_transition_time: Time::from_unix(at),
            message: message.into(),
            ..PodCondition::new(PodConditionType::PodScheduled, status)
        }
    }

    /// Replace-or-append by type; the transition time moves only when the status does.
    #[test]
    fn set_condition_keeps_the_transition_time_while_the_status_holds() {
        let mut s = PodStatus::default();
        assert!(s.set_condition(scheduled(ConditionStatus::False, 10, "0/3 nodes")));
        assert!(!s.set_condition(scheduled(ConditionStatus::False, 20, "0/3 nodes")));
        assert!(s.set_condition(scheduled(ConditionStatus::False, 30, "0/4 nodes")));
        let c = s.condition(&PodConditionType::PodScheduled).unwrap();
        assert_eq!(
            (c.last_transition_time, c.message.as_str()),
            (Time::from_unix(10), "0/4 nodes")
        );
        assert!(s.set_condition(scheduled(ConditionStatus::True, 40, "")));
        let c = s.condition(&PodConditionType::PodScheduled).unwrap();
        assert_eq!(
            (c.status, c.last_transition_time),
            (ConditionStatus::True, Time::from_unix(40))
        );
        assert!(s.set_condition(PodCondition::new(
            PodConditionType::Ready,
            ConditionStatus::False
        )));
        assert_eq!(s.conditions.len(), 2);
        assert!(
            s.conditions[1].last_transition_time.is_some(),
            "a new condition gets now"
        );
    }
}
