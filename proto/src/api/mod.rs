//! The object model: Kubernetes core/v1 types, for the subset Skiff stores, schedules and runs.
//!
//! Field names, JSON shape and meaning follow core/v1, so manifests written for Kubernetes
//! decode unchanged. Fields Skiff does not act on are kept verbatim beside the modelled ones
//! ([`Unmodelled`]); which fields exist at all is Kubernetes' schema ([`schema`]).
//!
//! | module       | what                                                        |
//! |--------------|-------------------------------------------------------------|
//! | `meta`       | `ObjectMeta`, `Time`, label selectors, `IntOrString`        |
//! | `pod`        | `Pod` spec and status                                       |
//! | `node`       | `Node` spec and status                                      |
//! | `event`      | `Event`: what happened to an object, for `describe`     |
//! | `apps`       | apps/v1 `Deployment`, `ReplicaSet` and the pod template   |
//! | `batch`      | typed views of batch/v1 Jobs and CronJobs, for their controllers |
//! | `cron`       | CronJob schedules: parsed, and when they fire in a time zone |
//! | `namespace`  | `Namespace`, `ResourceQuota`, `LimitRange`, `Binding`       |
//! | `policy`     | a typed view of policy/v1 PodDisruptionBudgets, for their controller and eviction |
//! | `rbac`       | `Role`, `ClusterRole`, their bindings, access reviews       |
//! | `secret`     | `Secret`: named data, bootstrap tokens                      |
//! | `certificates` | `CertificateSigningRequest`: certificates asked for, approved, signed |
//! | `service`    | `Service`, `EndpointSlice`: stable addresses for the pods a selector picks |
//! | `object`     | [`Object`], [`Kind`]: one enum over every kind, storage keys |
//! | `registry`   | [`KindInfo`]: a kind served from its declaration; [`GenericObject`] |
//! | `kinds`      | the declared kinds: ConfigMap, Job, DaemonSet, Lease, ...      |
//! | `custom`     | kinds defined by CustomResourceDefinitions; structural schemas |
//! | `print`      | ages and field readers for table columns                    |
//! | `quota`      | what counts against a ResourceQuota, and which pods a scope takes in |
//! | `vocabulary` | Kubernetes' fixed values as enums: phase, restart policy, conditions, taint effects |
//! | `defaults`   | defaulting applied before validation                        |
//! | `validation` | field-path errors for every rule                            |
//! | `schema`     | Kubernetes' schema: which fields exist (`fieldValidation`)  |

pub mod apps;
pub mod batch;
pub mod certificates;
pub mod cron;
pub mod custom;
pub mod defaults;
pub mod event;
pub mod kinds;
pub mod meta;
pub mod namespace;
pub mod node;
pub mod object;
pub mod pod;
pub mod policy;
pub mod print;
pub mod quota;
pub mod rbac;
pub mod registry;
pub mod schema;
pub mod secret;
pub mod service;
#[cfg(test)]
pub(crate) mod testing;
pub mod validation;
pub mod vocabulary;
pub mod volume;

pub use apps::{
    Deployment, DeploymentSpec, DeploymentStatus, DeploymentStrategy, PodTemplateSpec, ReplicaSet,
    ReplicaSetSpec, ReplicaSetStatus, RollingUpdateDeployment, WorkloadCondition,
};
pub use certificates::CertificateSigningRequest;
pub use event::{Event, EventSource};
pub use meta::{
    IntOrString, LabelSelector, LabelSelectorRequirement, ObjectMeta, ResourceList, Time,
    Unmodelled,
};
pub use namespace::{
    Binding, FINALIZER_KUBERNETES, LimitRange, LimitRangeItem, Namespace, NamespaceCondition,
    ObjectReference, ResourceQuota,
};
pub use node::{Node, NodeCondition, NodeSpec, NodeStatus, Taint};
pub use object::{Kind, Object};
pub use pod::{Container, Pod, PodCondition, PodSpec, PodStatus, Toleration};
pub use registry::{GenericKind, GenericObject, KindInfo};
pub use schema::{FieldValidation, SchemaError};
pub use secret::Secret;
pub use service::{EndpointSlice, Service};
pub use validation::{FieldError, ValidationErrors};
pub use vocabulary::{
    CertificateConditionType, ConditionStatus, DeletionPropagation, DeploymentStrategyType,
    NamespaceConditionType, NamespacePhase, NodeConditionType, PodConditionType, PodPhase,
    RestartPolicy, TaintEffect, WorkloadConditionType,
};
