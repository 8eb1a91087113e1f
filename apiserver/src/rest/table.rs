//! Server-side printing: the `meta.k8s.io/v1` Table kubectl asks for on `get`, with the columns
//! and cells kube-apiserver's printers give these kinds.
//!
//! kubectl prints whatever columns the server sends, so this module decides what
//! `kubectl get pods` looks like. Like kube-apiserver, every row carries every column;
//! columns of priority 1 are the ones kubectl shows only with `-o wide`. Kinds without a
//! printer of their own (LimitRange, Binding) get Kubernetes' default table: name and
//! creation time.
//!
//! Objects are read as served JSON rather than decoded into typed structs: a printer must not
//! fail on a field it does not look at, and every field it does look at has a fallback
//! (`<none>`, `<unknown>`, `0`), as in Kubernetes.
//!
//! ```text
//! {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
//!  "metadata": {"resourceVersion": "42"},
//!  "columnDefinitions": [{"name": "Name", "type": "string", "format": "name", ...}, ...],
//!  "rows": [{"cells": ["web", "1/1", "Running", "0", "5m", ...],
//!            "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", ...}}]}
//! ```

use std::collections::BTreeSet;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Map, Value, json};
use skiff_proto::api::{
    CertificateSigningRequest, ConditionStatus, Kind, LabelSelector, NodeConditionType,
    PodConditionType, PodPhase, RestartPolicy,
};
use skiff_proto::selector::LabelQuery;

/// Reasons and values the printers recognise that the API does not enumerate.
mod word {
    /// `PodScheduled` condition reason of a pod held by scheduling gates.
    pub const SCHEDULING_GATED: &str = "SchedulingGated";
    /// Waiting reason of an init container whose predecessors are still running.
    pub const POD_INITIALIZING: &str = "PodInitializing";
    /// Terminated reason of a container that exited 0.
    pub const COMPLETED: &str = "Completed";
    /// `status.reason` of a pod whose node stopped reporting.
    pub const NODE_LOST: &str = "NodeLost";
    /// Pod status words the printer composes.
    pub const RUNNING: &str = "Running";
    pub const NOT_READY: &str = "NotReady";
    pub const TERMINATING: &str = "Terminating";
    pub const UNKNOWN: &str = "Unknown";
    /// Node status words.
    pub const READY: &str = "Ready";
    pub const SCHEDULING_DISABLED: &str = "SchedulingDisabled";
    /// Node address types.
    pub const INTERNAL_IP: &str = "InternalIP";
    pub const EXTERNAL_IP: &str = "ExternalIP";
    /// Labels naming a node's roles: `node-role.kubernetes.io/<role>` (any value), or the
    /// older `kubernetes.io/role: <role>`.
    pub const ROLE_LABEL_PREFIX: &str = "node-role.kubernetes.io/";
    pub const ROLE_LABEL: &str = "kubernetes.io/role";
}

/// What each row's `object` holds: the `includeObject` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// No object.
    None,
    /// The object's metadata as a `PartialObjectMetadata` (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// The query parameter's value, spelled as Kubernetes spells it (`None`, `Metadata`,
    /// `Object`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "None" => Some(IncludeObject::None),
            "Metadata" => Some(IncludeObject::Metadata),
            "Object" => Some(IncludeObject::Object),
            _ => None,
        }
    }
}

/// A Table of `objects`, each the full object as served (with `apiVersion`, `kind`,
/// `metadata`). `list_meta` (`resourceVersion`, `continue`) becomes the Table's metadata.
/// Without `with_columns` the column definitions are left out, as kube-apiserver does for every
/// watch event after the first. Ages are measured to `now`.
pub fn table(
    kind: Kind,
    objects: &[Value],
    list_meta: Value,
    include: IncludeObject,
    with_columns: bool,
    now: DateTime<Utc>,
) -> Value {
    let printer = Printer::of(kind);
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let Row { cells, conditions } = printer.row(object, now);
            let mut row = Map::new();
            row.insert("cells".into(), cells.into());
            if let Some(conditions) = conditions {
                row.insert("conditions".into(), conditions);
            }
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    row.insert(
                        "object".into(),
                        json!({
                            "kind": "PartialObjectMetadata",
                            "apiVersion": "meta.k8s.io/v1",
                            "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
                        }),
                    );
                }
                IncludeObject::Object => {
                    row.insert("object".into(), object.clone());
                }
            }
            Value::Object(row)
        })
        .collect();
    let mut table = Map::new();
    table.insert("kind".into(), "Table".into());
    table.insert("apiVersion".into(), "meta.k8s.io/v1".into());
    let metadata = match list_meta {
        Value::Object(meta) => Value::Object(meta),
        _ => json!({}),
    };
    table.insert("metadata".into(), metadata);
    if with_columns {
        let columns: Vec<Value> = printer.columns().iter().map(Column::to_json).collect();
        table.insert("columnDefinitions".into(), columns.into());
    }
    table.insert("rows".into(), rows.into());
    Value::Object(table)
}

/// A column's type, as Table column definitions name OpenAPI types.
#[derive(Debug, Clone, Copy)]
enum ColumnType {
    String,
    Integer,
    Date,
}

#[derive(Debug)]
struct Column {
    name: &'static str,
    kind: ColumnType,
    /// `name` marks the column holding the object's name.
    format: &'static str,
    /// 0: always shown; 1: shown with `-o wide`.
    priority: u8,
    description: &'static str,
}

impl Column {
    fn to_json(&self) -> Value {
        let kind = match self.kind {
            ColumnType::String => "string",
            ColumnType::Integer => "integer",
            ColumnType::Date => "date",
        };
        json!({
            "name": self.name,
            "type": kind,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }
}

const fn column(name: &'static str, priority: u8, description: &'static str) -> Column {
    Column {
        name,
        kind: ColumnType::String,
        format: "",
        priority,
        description,
    }
}

const NAME: Column = Column {
    name: "Name",
    kind: ColumnType::String,
    format: "name",
    priority: 0,
    description: "Name must be unique within a namespace; it is the object's identity in the API.",
};

const AGE: Column = column(
    "Age",
    0,
    "CreationTimestamp is when the server created the object, shown as the time since.",
);

const POD_COLUMNS: &[Column] = &[
    NAME,
    column(
        "Ready",
        0,
        "The aggregate readiness state of this pod for accepting traffic.",
    ),
    column(
        "Status",
        0,
        "The aggregate status of the containers in this pod.",
    ),
    column(
        "Restarts",
        0,
        "The number of times the containers in this pod have been restarted, and how long ago the last restart was.",
    ),
    AGE,
    column(
        "IP",
        1,
        "The IP address allocated to the pod, routable at least within the cluster.",
    ),
    column("Node", 1, "The node the pod is scheduled onto."),
    column(
        "Nominated Node",
        1,
        "The node the scheduler expects the pod to run on once preempted pods leave.",
    ),
    column(
        "Readiness Gates",
        1,
        "How many of the pod's readiness gates hold: conditions beyond its containers' readiness.",
    ),
];

const NODE_COLUMNS: &[Column] = &[
    NAME,
    column("Status", 0, "The status of the node"),
    column("Roles", 0, "The roles of the node"),
    AGE,
    column("Version", 0, "The kubelet version the node reports."),
    column(
        "Internal-IP",
        1,
        "The node's first address of type InternalIP.",
    ),
    column(
        "External-IP",
        1,
        "The node's first address of type ExternalIP.",
    ),
    column("OS-Image", 1, "The OS image the node reports."),
    column("Kernel-Version", 1, "The kernel version the node reports."),
    column(
        "Container-Runtime",
        1,
        "The container runtime and version the node reports.",
    ),
];

const NAMESPACE_COLUMNS: &[Column] = &[
    NAME,
    column("Status", 0, "The status of the namespace"),
    AGE,
];

const EVENT_COLUMNS: &[Column] = &[
    column(
        "Last Seen",
        0,
        "The time since this event was last recorded.",
    ),
    column("Type", 0, "The type of the event: Normal or Warning."),
    column(
        "Reason",
        0,
        "A short, machine-understandable reason for the event.",
    ),
    column("Object", 0, "The object the event is about."),
    column(
        "Subobject",
        1,
        "The part of the object the event is about, such as a container.",
    ),
    column(
        "Source",
        1,
        "The component, and host, that reported the event.",
    ),
    column("Message", 0, "A human-readable description of the event."),
    column(
        "First Seen",
        1,
        "The time since this event was first recorded.",
    ),
    column("Count", 1, "The number of times this event has occurred."),
    Column {
        priority: 1,
        ..NAME
    },
];

/// kubectl's for Secrets: what kind of data, and how many entries.
const SECRET_COLUMNS: &[Column] = &[
    NAME,
    column("Type", 0, "The type of the secret"),
    column("Data", 0, "The number of entries in the secret"),
    AGE,
];

/// kubectl's for Services.
const SERVICE_COLUMNS: &[Column] = &[
    NAME,
    column("Type", 0, "The type of the service"),
    column("Cluster-IP", 0, "The cluster IP of the service"),
    column("External-IP", 0, "The external IPs of the service"),
    column("Port(s)", 0, "The ports the service exposes"),
    AGE,
    column("Selector", 1, "The label selector of the service's pods"),
];

/// kubectl's for EndpointSlices.
const ENDPOINT_SLICE_COLUMNS: &[Column] = &[
    NAME,
    column("AddressType", 0, "The type of the slice's addresses"),
    column("Ports", 0, "The ports of the slice"),
    column("Endpoints", 0, "The endpoints' addresses (the first three)"),
    AGE,
];

/// kubectl's for CertificateSigningRequests: who asked which signer, and where it stands.
const CSR_COLUMNS: &[Column] = &[
    NAME,
    AGE,
    column("SignerName", 0, "The name of the signer"),
    column("Requestor", 0, "The user who made the request"),
    column(
        "RequestedDuration",
        0,
        "How long the certificate is asked to be valid",
    ),
    column(
        "Condition",
        0,
        "Approved, Denied, Failed, Issued or Pending",
    ),
];

const RESOURCE_QUOTA_COLUMNS: &[Column] = &[
    NAME,
    AGE,
    column(
        "Request",
        0,
        "Request represents a minimum amount of cpu/memory that a container may consume.",
    ),
    column(
        "Limit",
        0,
        "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
    ),
];

/// RoleBindings and ClusterRoleBindings: the role, and (wide) who it is granted to.
const ROLE_BINDING_COLUMNS: &[Column] = &[
    NAME,
    column("Role", 0, "Role is the role this binding grants."),
    AGE,
    column("Users", 1, "Users are the users the role is granted to."),
    column("Groups", 1, "Groups are the groups the role is granted to."),
    column(
        "ServiceAccounts",
        1,
        "ServiceAccounts are the service accounts the role is granted to.",
    ),
];

const fn integer_column(name: &'static str, description: &'static str) -> Column {
    Column {
        kind: ColumnType::Integer,
        ..column(name, 0, description)
    }
}

/// The wide columns of the workloads, after their own.
const CONTAINERS: Column = column("Containers", 1, "Names of each container in the template.");
const IMAGES: Column = column(
    "Images",
    1,
    "Images referenced by each container in the template.",
);

/// kube-apiserver's deployment columns, described as its printer describes them (the
/// Deployment schema's own field descriptions).
const DEPLOYMENT_COLUMNS: &[Column] = &[
    NAME,
    column("Ready", 0, "Number of the pod with ready state"),
    column(
        "Up-to-date",
        0,
        "Total number of non-terminating pods targeted by this deployment that have the desired template spec.",
    ),
    column(
        "Available",
        0,
        "Total number of available non-terminating pods (ready for at least minReadySeconds) targeted by this deployment.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    column(
        "Selector",
        1,
        "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment. It must match the pod template's labels.",
    ),
];

const REPLICA_SET_COLUMNS: &[Column] = &[
    NAME,
    integer_column(
        "Desired",
        "Replicas is the number of desired pods. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicaset",
    ),
    integer_column(
        "Current",
        "Replicas is the most recently observed number of non-terminating pods. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicaset",
    ),
    integer_column(
        "Ready",
        "The number of non-terminating pods targeted by this ReplicaSet with a Ready Condition.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    column(
        "Selector",
        1,
        "Selector is a label query over pods that should match the replica count. Label keys and values that must match in order to be controlled by this replica set. It must match the pod template's labels. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors",
    ),
];

const DEFAULT_COLUMNS: &[Column] = &[
    NAME,
    Column {
        name: "Created At",
        kind: ColumnType::Date,
        format: "",
        priority: 0,
        description: "CreationTimestamp is when the server created the object.",
    },
];

/// One row: its cells, and the row conditions Kubernetes sets (pods that completed).
struct Row {
    cells: Vec<Value>,
    conditions: Option<Value>,
}

impl Row {
    fn cells(cells: Vec<Value>) -> Row {
        Row {
            cells,
            conditions: None,
        }
    }
}

/// The printer of a kind.
#[derive(Debug, Clone, Copy)]
enum Printer {
    Pod,
    Node,
    Namespace,
    Event,
    ResourceQuota,
    Deployment,
    ReplicaSet,
    RoleBinding,
    Secret,
    CertificateSigningRequest,
    Service,
    EndpointSlice,
    /// Kubernetes' default table, for kinds without a printer.
    Default,
}

impl Printer {
    fn of(kind: Kind) -> Printer {
        match kind {
            Kind::Pod => Printer::Pod,
            Kind::Node => Printer::Node,
            Kind::Namespace => Printer::Namespace,
            Kind::Event => Printer::Event,
            Kind::ResourceQuota => Printer::ResourceQuota,
            Kind::Deployment => Printer::Deployment,
            Kind::ReplicaSet => Printer::ReplicaSet,
            Kind::RoleBinding | Kind::ClusterRoleBinding => Printer::RoleBinding,
            Kind::Secret => Printer::Secret,
            Kind::CertificateSigningRequest => Printer::CertificateSigningRequest,
            Kind::Service => Printer::Service,
            Kind::EndpointSlice => Printer::EndpointSlice,
            Kind::LimitRange
            | Kind::Binding
            | Kind::Role
            | Kind::ClusterRole
            | Kind::SubjectAccessReview
            | Kind::SelfSubjectAccessReview => Printer::Default,
        }
    }

    fn columns(self) -> &'static [Column] {
        match self {
            Printer::Pod => POD_COLUMNS,
            Printer::Node => NODE_COLUMNS,
            Printer::Namespace => NAMESPACE_COLUMNS,
            Printer::Event => EVENT_COLUMNS,
            Printer::ResourceQuota => RESOURCE_QUOTA_COLUMNS,
            Printer::Deployment => DEPLOYMENT_COLUMNS,
            Printer::ReplicaSet => REPLICA_SET_COLUMNS,
            Printer::RoleBinding => ROLE_BINDING_COLUMNS,
            Printer::Secret => SECRET_COLUMNS,
            Printer::CertificateSigningRequest => CSR_COLUMNS,
            Printer::Service => SERVICE_COLUMNS,
            Printer::EndpointSlice => ENDPOINT_SLICE_COLUMNS,
            Printer::Default => DEFAULT_COLUMNS,
        }
    }

    fn row(self, object: &Value, now: DateTime<Utc>) -> Row {
        match self {
            Printer::Pod => pod_row(object, now),
            Printer::Node => Row::cells(node_cells(object, now)),
            Printer::Namespace => Row::cells(vec![
                name(object).into(),
                text(object, "/status/phase").into(),
                age(object, now).into(),
            ]),
            Printer::Event => Row::cells(event_cells(object, now)),
            Printer::ResourceQuota => Row::cells(resource_quota_cells(object, now)),
            Printer::Deployment => Row::cells(deployment_cells(object, now)),
            Printer::ReplicaSet => Row::cells(replica_set_cells(object, now)),
            Printer::RoleBinding => Row::cells(role_binding_cells(object, now)),
            Printer::Secret => Row::cells(vec![
                name(object).into(),
                text(object, "/type").into(),
                object
                    .get("data")
                    .and_then(Value::as_object)
                    .map_or(0, Map::len)
                    .into(),
                age(object, now).into(),
            ]),
            Printer::CertificateSigningRequest => Row::cells(csr_cells(object, now)),
            Printer::Service => Row::cells(service_cells(object, now)),
            Printer::EndpointSlice => Row::cells(endpoint_slice_cells(object, now)),
            Printer::Default => Row::cells(vec![name(object).into(), created_at(object).into()]),
        }
    }
}

/// The string at a JSON pointer, or `""` (Go's zero value, which the printers test for).
fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The integer at a JSON pointer, or 0.
fn number(object: &Value, pointer: &str) -> i64 {
    object
        .pointer(pointer)
        .and_then(Value::as_i64)
        .unwrap_or_default()
}

fn flag(object: &Value, pointer: &str) -> bool {
    object
        .pointer(pointer)
        .and_then(Value::as_bool)
        .unwrap_or_default()
}

/// The array at a JSON pointer, or none.
fn items<'a>(object: &'a Value, pointer: &str) -> &'a [Value] {
    object
        .pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The timestamp at a JSON pointer (RFC 3339, as the API writes `Time` and `MicroTime`);
/// absent, null and unparsable all read as Go's zero time.
fn time(object: &Value, pointer: &str) -> Option<DateTime<Utc>> {
    let text = object.pointer(pointer)?.as_str()?;
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

fn name(object: &Value) -> &str {
    text(object, "/metadata/name")
}

/// The time since `t` as kubectl prints ages, or `<unknown>` for the zero time.
fn since(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    t.map_or_else(|| "<unknown>".to_owned(), |t| human_duration(now - t))
}

fn age(object: &Value, now: DateTime<Utc>) -> String {
    since(time(object, "/metadata/creationTimestamp"), now)
}

/// The default table's creation time: RFC 3339 in UTC, seconds precision.
fn created_at(object: &Value) -> String {
    time(object, "/metadata/creationTimestamp").map_or_else(
        || "0001-01-01T00:00:00Z".to_owned(),
        |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    )
}

/// A duration the way kubectl prints ages (apimachinery's `duration.HumanDuration`): about
/// two significant figures, `45s`, `3m20s`, `5h`, `2d3h`, `400d`, `3y20d`. Clocks a second
/// apart count as now; a time further in the future is `<invalid>`.
pub fn human_duration(d: TimeDelta) -> String {
    let seconds = d.num_seconds();
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = d.num_minutes();
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = d.num_hours();
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{}d", hours / 24),
            h => format!("{}d{h}h", hours / 24),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return match (hours / 24) % 365 {
            0 => format!("{}y", hours / 24 / 365),
            d => format!("{}y{d}d", hours / 24 / 365),
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// The later of two optional times.
fn later(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    a.max(b)
}

/// Whether the pod condition `kind` is listed with status `True`.
fn condition_holds(status: &Value, kind: &PodConditionType) -> bool {
    items(status, "/conditions")
        .iter()
        .any(|c| c["type"] == kind.as_str() && c["status"] == ConditionStatus::True.as_str())
}

/// `Init:ExitCode:1`, `Signal:9` and the like: a terminated container without a reason.
fn exit_reason(prefix: &str, terminated: &Value) -> String {
    match number(terminated, "/signal") {
        0 => format!("{prefix}ExitCode:{}", number(terminated, "/exitCode")),
        signal => format!("{prefix}Signal:{signal}"),
    }
}

/// kubectl's pod row. The status column is the first of these that applies:
///
/// ```text
///  deleted, on a lost node                  Unknown
///  deleted, phase not Succeeded/Failed      Terminating
///  an init container failing or waiting    Init:<reason>, Init:ExitCode:<n>, Init:<i>/<n>
///  a container waiting or terminated        its reason (the first such container's),
///                                           ExitCode:<n>, Signal:<n>
///  Completed but a container still runs     Running (pod Ready) or NotReady
///  gated from scheduling                    SchedulingGated
///  otherwise                                status.reason, else the phase
/// ```
fn pod_row(pod: &Value, now: DateTime<Utc>) -> Row {
    let status = pod.get("status").unwrap_or(&Value::Null);
    let phase = text(status, "/phase");
    let known_phase = phase.parse::<PodPhase>().ok();
    let mut reason = match text(status, "/reason") {
        "" => phase.to_owned(),
        r => r.to_owned(),
    };
    if items(status, "/conditions").iter().any(|c| {
        c["type"] == PodConditionType::PodScheduled.as_str()
            && c["reason"] == word::SCHEDULING_GATED
    }) {
        reason = word::SCHEDULING_GATED.to_owned();
    }

    let init_containers = items(pod, "/spec/initContainers");
    // Sidecars: init containers that keep running beside the main containers.
    let sidecars: BTreeSet<&str> = init_containers
        .iter()
        .filter(|c| c["restartPolicy"] == RestartPolicy::Always.as_str())
        .map(|c| text(c, "/name"))
        .collect();
    let total = items(pod, "/spec/containers").len() + sidecars.len();
    let mut ready = 0usize;
    let mut restarts = 0i64;
    let mut last_restart = None;
    let mut sidecar_restarts = 0i64;
    let mut last_sidecar_restart = None;

    let mut initializing = false;
    for (i, container) in items(status, "/initContainerStatuses").iter().enumerate() {
        restarts += number(container, "/restartCount");
        let finished = time(container, "/lastState/terminated/finishedAt");
        last_restart = later(last_restart, finished);
        let sidecar = sidecars.contains(text(container, "/name"));
        if sidecar {
            sidecar_restarts += number(container, "/restartCount");
            last_sidecar_restart = later(last_sidecar_restart, finished);
        }
        let terminated = container
            .pointer("/state/terminated")
            .filter(|t| t.is_object());
        let waiting_reason = text(container, "/state/waiting/reason");
        if terminated.is_some_and(|t| number(t, "/exitCode") == 0) {
            continue;
        }
        if sidecar && flag(container, "/started") {
            if flag(container, "/ready") {
                ready += 1;
            }
            continue;
        }
        reason = if let Some(terminated) = terminated {
            match text(terminated, "/reason") {
                "" => exit_reason("Init:", terminated),
                r => format!("Init:{r}"),
            }
        } else if !waiting_reason.is_empty() && waiting_reason != word::POD_INITIALIZING {
            format!("Init:{waiting_reason}")
        } else {
            format!("Init:{i}/{}", init_containers.len())
        };
        initializing = true;
        break;
    }

    if !initializing || condition_holds(status, &PodConditionType::Initialized) {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut running = false;
        for container in items(status, "/containerStatuses").iter().rev() {
            restarts += number(container, "/restartCount");
            last_restart = later(
                last_restart,
                time(container, "/lastState/terminated/finishedAt"),
            );
            let terminated = container
                .pointer("/state/terminated")
                .filter(|t| t.is_object());
            let waiting_reason = text(container, "/state/waiting/reason");
            if !waiting_reason.is_empty() {
                reason = waiting_reason.to_owned();
            } else if let Some(terminated) = terminated {
                reason = match text(terminated, "/reason") {
                    "" => exit_reason("", terminated),
                    r => r.to_owned(),
                };
            } else if flag(container, "/ready")
                && container
                    .pointer("/state/running")
                    .is_some_and(Value::is_object)
            {
                running = true;
                ready += 1;
            }
        }
        if reason == word::COMPLETED && running {
            reason = if condition_holds(status, &PodConditionType::Ready) {
                word::RUNNING
            } else {
                word::NOT_READY
            }
            .to_owned();
        }
    }

    if pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        if text(status, "/reason") == word::NODE_LOST {
            reason = word::UNKNOWN.to_owned();
        } else if !known_phase.is_some_and(PodPhase::is_terminal) {
            reason = word::TERMINATING.to_owned();
        }
    }

    let restarts = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(t), now)),
        _ => restarts.to_string(),
    };

    // The API's internal form lists every pod IP in podIPs, filled from podIP when a client
    // wrote only that; the printer shows the first.
    let ip = items(status, "/podIPs")
        .first()
        .map(|p| text(p, "/ip"))
        .filter(|ip| !ip.is_empty())
        .unwrap_or_else(|| text(status, "/podIP"));

    let gates = items(pod, "/spec/readinessGates");
    let gates = if gates.is_empty() {
        "<none>".to_owned()
    } else {
        let conditions = items(status, "/conditions");
        let holding = gates
            .iter()
            .filter(|gate| {
                conditions
                    .iter()
                    .find(|c| c["type"] == gate["conditionType"])
                    .is_some_and(|c| c["status"] == ConditionStatus::True.as_str())
            })
            .count();
        format!("{holding}/{}", gates.len())
    };

    // Finished pods carry the Completed row condition, with the phase as its reason.
    let conditions = match known_phase {
        Some(PodPhase::Succeeded) => Some("The pod has completed successfully."),
        Some(PodPhase::Failed) => Some("The pod failed."),
        _ => None,
    }
    .map(|message| {
        json!([{
            "type": word::COMPLETED,
            "status": ConditionStatus::True.as_str(),
            "reason": phase,
            "message": message,
        }])
    });

    Row {
        cells: vec![
            name(pod).into(),
            format!("{ready}/{total}").into(),
            reason.into(),
            restarts.into(),
            age(pod, now).into(),
            or_none(ip).into(),
            or_none(text(pod, "/spec/nodeName")).into(),
            or_none(text(status, "/nominatedNodeName")).into(),
            gates.into(),
        ],
        conditions,
    }
}

fn or_none(s: &str) -> &str {
    if s.is_empty() { "<none>" } else { s }
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "<unknown>" } else { s }
}

/// kubectl's node row: `Ready`/`NotReady`/`Unknown` from the Ready condition, with
/// `SchedulingDisabled` added for a cordoned node; roles from the role labels.
fn node_cells(node: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let mut status = Vec::new();
    // Kubernetes keeps the last condition of a type when a node lists one twice.
    if let Some(ready) = items(node, "/status/conditions")
        .iter()
        .rev()
        .find(|c| c["type"] == NodeConditionType::Ready.as_str())
    {
        status.push(if ready["status"] == ConditionStatus::True.as_str() {
            word::READY
        } else {
            word::NOT_READY
        });
    }
    if status.is_empty() {
        status.push(word::UNKNOWN);
    }
    if flag(node, "/spec/unschedulable") {
        status.push(word::SCHEDULING_DISABLED);
    }

    let mut roles = BTreeSet::new();
    if let Some(labels) = node.pointer("/metadata/labels").and_then(Value::as_object) {
        for (key, value) in labels {
            if let Some(role) = key.strip_prefix(word::ROLE_LABEL_PREFIX) {
                if !role.is_empty() {
                    roles.insert(role);
                }
            } else if key == word::ROLE_LABEL
                && let Some(role) = value.as_str().filter(|r| !r.is_empty())
            {
                roles.insert(role);
            }
        }
    }
    let roles = if roles.is_empty() {
        "<none>".to_owned()
    } else {
        roles.into_iter().collect::<Vec<_>>().join(",")
    };

    let address = |kind: &str| {
        items(node, "/status/addresses")
            .iter()
            .find(|a| a["type"] == kind)
            .map_or("<none>", |a| text(a, "/address"))
    };
    vec![
        name(node).into(),
        status.join(",").into(),
        roles.into(),
        age(node, now).into(),
        text(node, "/status/nodeInfo/kubeletVersion").into(),
        address(word::INTERNAL_IP).into(),
        address(word::EXTERNAL_IP).into(),
        or_unknown(text(node, "/status/nodeInfo/osImage")).into(),
        or_unknown(text(node, "/status/nodeInfo/kernelVersion")).into(),
        or_unknown(text(node, "/status/nodeInfo/containerRuntimeVersion")).into(),
    ]
}

/// kubectl's event row. Events written through `events.k8s.io` carry `eventTime` and a series
/// instead of first/last timestamps and a count; either form prints the same way.
fn event_cells(event: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let first = match time(event, "/firstTimestamp") {
        Some(t) => since(Some(t), now),
        None => since(time(event, "/eventTime"), now),
    };
    let mut last = match time(event, "/lastTimestamp") {
        Some(t) => since(Some(t), now),
        None => first.clone(),
    };
    let mut count = number(event, "/count");
    if event.get("series").is_some_and(Value::is_object) {
        last = since(time(event, "/series/lastObservedTime"), now);
        count = number(event, "/series/count");
    } else if count == 0 {
        count = 1;
    }

    let kind = text(event, "/involvedObject/kind").to_lowercase();
    let target = match text(event, "/involvedObject/name") {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let component = match text(event, "/source/component") {
        "" => text(event, "/reportingComponent"),
        c => c,
    };
    let host = match text(event, "/source/host") {
        "" => text(event, "/reportingInstance"),
        h => h,
    };
    let source = if host.is_empty() {
        component.to_owned()
    } else {
        format!("{component}, {host}")
    };
    vec![
        last.into(),
        text(event, "/type").into(),
        text(event, "/reason").into(),
        target.into(),
        text(event, "/involvedObject/fieldPath").into(),
        source.into(),
        text(event, "/message").trim().into(),
        first.into(),
        count.into(),
        name(event).into(),
    ]
}

/// kubectl's quota row: `used/hard` of every hard limit, sorted by resource name; those named
/// `limits.*` in the Limit column, the rest in Request.
/// kubectl's cells of a binding: `ClusterRole/view`, and its subjects by kind (service
/// accounts as `namespace/name`).
/// kubectl's PORT(S): `80/TCP`, `80:30080/TCP` for a node port, comma-separated.
fn service_cells(svc: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let ports: Vec<String> = items(svc, "/spec/ports")
        .iter()
        .map(|p| {
            let proto = text(p, "/protocol");
            match p.get("nodePort").and_then(Value::as_i64) {
                Some(np) => format!("{}:{np}/{proto}", number(p, "/port")),
                None => format!("{}/{proto}", number(p, "/port")),
            }
        })
        .collect();
    let selector: Vec<String> = svc
        .pointer("/spec/selector")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    vec![
        name(svc).into(),
        text(svc, "/spec/type").into(),
        or_none(text(svc, "/spec/clusterIP")).into(),
        "<none>".into(),
        if ports.is_empty() {
            "<none>".to_owned()
        } else {
            ports.join(",")
        }
        .into(),
        age(svc, now).into(),
        if selector.is_empty() {
            "<none>".to_owned()
        } else {
            selector.join(",")
        }
        .into(),
    ]
}

/// kubectl's ENDPOINTS: the first three addresses, `+ N more...`; `<unset>` for none.
fn endpoint_slice_cells(slice: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let addresses: Vec<&str> = items(slice, "/endpoints")
        .iter()
        .flat_map(|e| items(e, "/addresses"))
        .filter_map(Value::as_str)
        .collect();
    let endpoints = match addresses.len() {
        0 => "<unset>".to_owned(),
        n if n <= 3 => addresses.join(","),
        n => format!("{} + {} more...", addresses[..3].join(","), n - 3),
    };
    let ports: Vec<String> = items(slice, "/ports")
        .iter()
        .map(|p| number(p, "/port").to_string())
        .collect();
    vec![
        name(slice).into(),
        text(slice, "/addressType").into(),
        if ports.is_empty() {
            "<unset>".to_owned()
        } else {
            ports.join(",")
        }
        .into(),
        endpoints.into(),
        age(slice, now).into(),
    ]
}

fn csr_cells(csr: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let duration = match csr
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
    {
        Some(secs) => human_duration(TimeDelta::seconds(secs)),
        None => "<none>".to_owned(),
    };
    let condition = serde_json::from_value::<CertificateSigningRequest>(csr.clone())
        .map(|c| c.condition_summary())
        .unwrap_or_default();
    vec![
        name(csr).into(),
        age(csr, now).into(),
        text(csr, "/spec/signerName").into(),
        text(csr, "/spec/username").into(),
        duration.into(),
        condition.into(),
    ]
}

fn role_binding_cells(binding: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let role = format!(
        "{}/{}",
        text(binding, "/roleRef/kind"),
        text(binding, "/roleRef/name")
    );
    let of_kind = |kind: &str| {
        items(binding, "/subjects")
            .iter()
            .filter(|s| text(s, "/kind") == kind)
            .map(|s| match text(s, "/namespace") {
                ns if kind == "ServiceAccount" => format!("{ns}/{}", text(s, "/name")),
                _ => text(s, "/name").to_owned(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    vec![
        name(binding).into(),
        role.into(),
        age(binding, now).into(),
        of_kind("User").into(),
        of_kind("Group").into(),
        of_kind("ServiceAccount").into(),
    ]
}

fn resource_quota_cells(quota: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let mut request = Vec::new();
    let mut limit = Vec::new();
    if let Some(hard) = quota.pointer("/status/hard").and_then(Value::as_object) {
        let mut resources: Vec<&String> = hard.keys().collect();
        resources.sort();
        for resource in resources {
            let used = quota
                .pointer("/status/used")
                .and_then(|u| u.get(resource.as_str()))
                .and_then(Value::as_str)
                .unwrap_or("0");
            let hard = hard[resource.as_str()].as_str().unwrap_or("0");
            let entry = format!("{resource}: {used}/{hard}");
            match resource.split_once('.') {
                Some(("limits", _)) => limit.push(entry),
                _ => request.push(entry),
            }
        }
    }
    vec![
        name(quota).into(),
        age(quota, now).into(),
        request.join(", ").into(),
        limit.join(", ").into(),
    ]
}

/// The template's container names and images, each joined with commas, as the workload
/// printers lay them out.
fn template_containers(workload: &Value) -> (String, String) {
    let containers = items(workload, "/spec/template/spec/containers");
    let names: Vec<&str> = containers.iter().map(|c| text(c, "/name")).collect();
    let images: Vec<&str> = containers.iter().map(|c| text(c, "/image")).collect();
    (names.join(","), images.join(","))
}

/// `spec.selector` in the label selector syntax, or `<invalid>` when it does not convert.
fn selector(workload: &Value) -> String {
    let selector = workload
        .pointer("/spec/selector")
        .cloned()
        .unwrap_or_else(|| json!({}));
    serde_json::from_value::<LabelSelector>(selector)
        .ok()
        .and_then(|s| LabelQuery::try_from(&s).ok())
        .map_or_else(|| "<invalid>".to_owned(), |q| q.to_string())
}

/// `spec.replicas`, 1 when unset (the default, which a stored object always has).
fn desired_replicas(workload: &Value) -> i64 {
    workload
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

/// kubectl's deployment row: READY is ready of desired; up-to-date and available counts as
/// the deployment controller last wrote them.
fn deployment_cells(deployment: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let (containers, images) = template_containers(deployment);
    vec![
        name(deployment).into(),
        format!(
            "{}/{}",
            number(deployment, "/status/readyReplicas"),
            desired_replicas(deployment)
        )
        .into(),
        number(deployment, "/status/updatedReplicas").into(),
        number(deployment, "/status/availableReplicas").into(),
        age(deployment, now).into(),
        containers.into(),
        images.into(),
        selector(deployment).into(),
    ]
}

/// kubectl's replica set row: desired, current and ready pod counts.
fn replica_set_cells(replica_set: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let (containers, images) = template_containers(replica_set);
    vec![
        name(replica_set).into(),
        desired_replicas(replica_set).into(),
        number(replica_set, "/status/replicas").into(),
        number(replica_set, "/status/readyReplicas").into(),
        age(replica_set, now).into(),
        containers.into(),
        images.into(),
        selector(replica_set).into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2025-06-01T12:00:00Z")
            .expect("valid time")
            .with_timezone(&Utc)
    }

    /// `now` minus `seconds`, as the API writes timestamps.
    fn ago(seconds: i64) -> String {
        (now() - TimeDelta::seconds(seconds))
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    }

    fn cells(kind: Kind, object: Value) -> Vec<Value> {
        let t = table(kind, &[object], json!({}), IncludeObject::None, true, now());
        t["rows"][0]["cells"].as_array().expect("cells").clone()
    }

    fn pod(spec: Value, status: Value) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "creationTimestamp": ago(300), "resourceVersion": "7"},
            "spec": spec,
            "status": status,
        })
    }

    fn two_containers() -> Value {
        json!({"containers": [{"name": "app", "image": "nginx"}, {"name": "log", "image": "busybox"}]})
    }

    /// apimachinery's own HumanDuration cases, boundaries included.
    #[test]
    fn human_duration_matches_apimachinery() {
        let ms = TimeDelta::milliseconds;
        let s = TimeDelta::seconds;
        let m = TimeDelta::minutes;
        let h = TimeDelta::hours;
        let d = TimeDelta::days;
        for (delta, want) in [
            (s(1), "1s"),
            (s(70), "70s"),
            (s(190), "3m10s"),
            (m(70), "70m"),
            (h(47), "47h"),
            (h(49), "2d1h"),
            (h(8 * 24 + 2), "8d"),
            (h(367 * 24), "367d"),
            (h(365 * 2 * 24 + 25), "2y1d"),
            (h(365 * 8 * 24 + 2), "8y"),
            (s(-2), "<invalid>"),
            (s(-2) + TimeDelta::nanoseconds(1), "0s"),
            (s(0), "0s"),
            (s(1) - ms(1), "0s"),
            (m(2) - ms(1), "119s"),
            (m(2), "2m"),
            (m(2) + s(1), "2m1s"),
            (m(10) - ms(1), "9m59s"),
            (m(10), "10m"),
            (m(10) + s(1), "10m"),
            (h(3) - ms(1), "179m"),
            (h(3), "3h"),
            (h(3) + m(1), "3h1m"),
            (h(8) - ms(1), "7h59m"),
            (h(8), "8h"),
            (h(8) + m(59), "8h"),
            (d(2) - ms(1), "47h"),
            (d(2), "2d"),
            (d(2) + h(1), "2d1h"),
            (d(8) - ms(1), "7d23h"),
            (d(8), "8d"),
            (d(8) + h(23), "8d"),
            (d(2 * 365) - ms(1), "729d"),
            (d(2 * 365), "2y"),
            (d(2 * 365) + h(23), "2y"),
            (d(2 * 365) + d(1) - ms(1), "2y"),
            (d(2 * 365) + d(1), "2y1d"),
            (d(3 * 365), "3y"),
            (d(8 * 365) - ms(1), "7y364d"),
            (d(8 * 365), "8y"),
            (d(8 * 365) + d(364), "8y"),
            (d(9 * 365), "9y"),
        ] {
            assert_eq!(human_duration(delta), want, "{delta}");
        }
    }

    /// `includeObject` takes Kubernetes' three spellings and nothing else; Metadata is the
    /// default.
    #[test]
    fn include_object_parses() {
        assert_eq!(IncludeObject::parse("None"), Some(IncludeObject::None));
        assert_eq!(
            IncludeObject::parse("Metadata"),
            Some(IncludeObject::Metadata)
        );
        assert_eq!(IncludeObject::parse("Object"), Some(IncludeObject::Object));
        assert_eq!(IncludeObject::parse("object"), None);
        assert_eq!(IncludeObject::default(), IncludeObject::Metadata);
    }

    /// The Table envelope: kind, list metadata copied, nine pod columns with kubectl's names,
    /// types and priorities, and a PartialObjectMetadata per row by default.
    #[test]
    fn table_envelope() {
        let object = pod(two_containers(), json!({"phase": "Pending"}));
        let t = table(
            Kind::Pod,
            std::slice::from_ref(&object),
            json!({"resourceVersion": "42", "continue": "abc"}),
            IncludeObject::Metadata,
            true,
            now(),
        );
        assert_eq!(t["kind"], "Table");
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(
            t["metadata"],
            json!({"resourceVersion": "42", "continue": "abc"})
        );
        let columns = t["columnDefinitions"].as_array().expect("columns");
        let summary: Vec<(&str, &str, u64)> = columns
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().expect("name"),
                    c["type"].as_str().expect("type"),
                    c["priority"].as_u64().expect("priority"),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("Name", "string", 0),
                ("Ready", "string", 0),
                ("Status", "string", 0),
                ("Restarts", "string", 0),
                ("Age", "string", 0),
                ("IP", "string", 1),
                ("Node", "string", 1),
                ("Nominated Node", "string", 1),
                ("Readiness Gates", "string", 1),
            ]
        );
        assert_eq!(columns[0]["format"], "name");
        assert_eq!(columns[1]["format"], "");
        assert_eq!(
            t["rows"][0]["object"],
            json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": object["metadata"],
            })
        );

        let whole = table(
            Kind::Pod,
            std::slice::from_ref(&object),
            Value::Null,
            IncludeObject::Object,
            false,
            now(),
        );
        assert_eq!(whole["rows"][0]["object"], object);
        assert_eq!(whole["metadata"], json!({}));
        assert!(whole.get("columnDefinitions").is_none());
        let bare = table(
            Kind::Pod,
            &[object],
            json!({}),
            IncludeObject::None,
            true,
            now(),
        );
        assert!(bare["rows"][0].get("object").is_none());
    }

    /// A pod not yet scheduled: Pending, nothing ready, no IP or node.
    #[test]
    fn pending_pod() {
        assert_eq!(
            cells(
                Kind::Pod,
                pod(two_containers(), json!({"phase": "Pending"}))
            ),
            json!([
                "web", "0/2", "Pending", "0", "5m", "<none>", "<none>", "<none>", "<none>"
            ])
            .as_array()
            .expect("array")
            .clone()
        );
    }

    /// A pod whose containers are being created shows the waiting reason.
    #[test]
    fn container_creating_pod() {
        let status = json!({
            "phase": "Pending",
            "containerStatuses": [
                {"name": "app", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}},
            ],
        });
        let row = cells(
            Kind::Pod,
            pod(
                json!({"containers": [{"name": "app"}], "nodeName": "n1"}),
                status,
            ),
        );
        assert_eq!(row[1], "0/1");
        assert_eq!(row[2], "ContainerCreating");
        assert_eq!(row[6], "n1");
    }

    /// A running pod, one container ready and one crash-looping after restarts: the waiting
    /// reason wins, and restarts show how long ago the last one ended.
    #[test]
    fn running_pod_with_restarts() {
        let status = json!({
            "phase": "Running",
            "podIP": "10.1.0.5",
            "podIPs": [{"ip": "10.1.0.5"}],
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"name": "app", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": ago(200)}}},
                {"name": "log", "ready": false, "restartCount": 5,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": ago(90)}}},
            ],
        });
        let mut spec = two_containers();
        spec["nodeName"] = json!("node-1");
        spec["readinessGates"] = json!([{"conditionType": "example.com/lb"}]);
        assert_eq!(
            cells(Kind::Pod, pod(spec, status)),
            json!([
                "web",
                "1/2",
                "CrashLoopBackOff",
                "5 (90s ago)",
                "5m",
                "10.1.0.5",
                "node-1",
                "<none>",
                "0/1"
            ])
            .as_array()
            .expect("array")
            .clone()
        );
    }

    /// Running and fully ready; IP read from podIP when podIPs is absent.
    #[test]
    fn running_pod() {
        let status = json!({
            "phase": "Running",
            "podIP": "10.1.0.6",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": "app", "ready": true, "restartCount": 0, "state": {"running": {}}},
                {"name": "log", "ready": true, "restartCount": 0, "state": {"running": {}}},
            ],
        });
        let row = cells(Kind::Pod, pod(two_containers(), status));
        assert_eq!(
            row[1..6],
            [
                json!("2/2"),
                json!("Running"),
                json!("0"),
                json!("5m"),
                json!("10.1.0.6")
            ]
        );
    }

    /// A pod being deleted shows Terminating whatever its containers say; a finished one keeps
    /// its phase; one on a lost node shows Unknown.
    #[test]
    fn terminating_pod() {
        let status = json!({
            "phase": "Running",
            "containerStatuses": [{"name": "app", "ready": true, "state": {"running": {}}}],
        });
        let mut p = pod(json!({"containers": [{"name": "app"}]}), status);
        p["metadata"]["deletionTimestamp"] = json!(ago(5));
        assert_eq!(cells(Kind::Pod, p.clone())[2], "Terminating");

        p["status"]["reason"] = json!("NodeLost");
        assert_eq!(cells(Kind::Pod, p.clone())[2], "Unknown");

        let mut done = pod(
            json!({"containers": [{"name": "app"}]}),
            json!({"phase": "Succeeded", "containerStatuses": [
                {"name": "app", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}),
        );
        done["metadata"]["deletionTimestamp"] = json!(ago(5));
        assert_eq!(cells(Kind::Pod, done)[2], "Completed");
    }

    /// Completed and failed pods show the terminated reason (or exit code) and carry the
    /// Completed row condition.
    #[test]
    fn completed_and_failed_pods() {
        let done = pod(
            json!({"containers": [{"name": "app"}]}),
            json!({"phase": "Succeeded", "containerStatuses": [
                {"name": "app", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": ago(60)}}}]}),
        );
        let t = table(
            Kind::Pod,
            &[done],
            json!({}),
            IncludeObject::None,
            false,
            now(),
        );
        assert_eq!(t["rows"][0]["cells"][1], "0/1");
        assert_eq!(t["rows"][0]["cells"][2], "Completed");
        assert_eq!(
            t["rows"][0]["conditions"],
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded",
                    "message": "The pod has completed successfully."}])
        );

        let failed = pod(
            json!({"containers": [{"name": "app"}]}),
            json!({"phase": "Failed", "containerStatuses": [
                {"name": "app", "state": {"terminated": {"exitCode": 137}}}]}),
        );
        let t = table(
            Kind::Pod,
            &[failed],
            json!({}),
            IncludeObject::None,
            false,
            now(),
        );
        assert_eq!(t["rows"][0]["cells"][2], "ExitCode:137");
        assert_eq!(t["rows"][0]["conditions"][0]["reason"], "Failed");
    }

    /// Init containers: progress `Init:i/n`, a failing one's reason, and a sidecar counted in
    /// the ready total once started.
    #[test]
    fn init_containers() {
        let spec = json!({
            "initContainers": [{"name": "setup"}, {"name": "migrate"}],
            "containers": [{"name": "app"}],
        });
        let progressing = json!({"phase": "Pending", "initContainerStatuses": [
            {"name": "setup", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "migrate", "state": {"running": {}}},
        ]});
        assert_eq!(
            cells(Kind::Pod, pod(spec.clone(), progressing))[2],
            "Init:1/2"
        );

        let crashing = json!({"phase": "Pending", "initContainerStatuses": [
            {"name": "setup", "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(30)}}},
            {"name": "migrate", "state": {"waiting": {"reason": "PodInitializing"}}},
        ]});
        let row = cells(Kind::Pod, pod(spec.clone(), crashing));
        assert_eq!(row[2], "Init:CrashLoopBackOff");
        assert_eq!(row[3], "3 (30s ago)");

        let failed = json!({"phase": "Failed", "initContainerStatuses": [
            {"name": "setup", "state": {"terminated": {"exitCode": 2}}},
        ]});
        assert_eq!(cells(Kind::Pod, pod(spec, failed))[2], "Init:ExitCode:2");

        let with_sidecar = json!({
            "initContainers": [{"name": "proxy", "restartPolicy": "Always"}],
            "containers": [{"name": "app"}],
        });
        let status = json!({"phase": "Running", "initContainerStatuses": [
            {"name": "proxy", "started": true, "ready": true, "state": {"running": {}}},
        ], "containerStatuses": [
            {"name": "app", "ready": true, "state": {"running": {}}},
        ]});
        let row = cells(Kind::Pod, pod(with_sidecar, status));
        assert_eq!(row[1], "2/2");
        assert_eq!(row[2], "Running");
    }

    /// A pod held by scheduling gates says so.
    #[test]
    fn scheduling_gated_pod() {
        let status = json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]});
        assert_eq!(
            cells(Kind::Pod, pod(two_containers(), status))[2],
            "SchedulingGated"
        );
    }

    fn node(labels: Value, ready: Option<&str>, unschedulable: bool) -> Value {
        let conditions = ready.map_or_else(
            || json!([]),
            |s| {
                json!([
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": s},
                ])
            },
        );
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "node-1", "labels": labels, "creationTimestamp": ago(3 * 86400 + 3600)},
            "spec": {"unschedulable": unschedulable},
            "status": {
                "conditions": conditions,
                "addresses": [
                    {"type": "Hostname", "address": "node-1"},
                    {"type": "InternalIP", "address": "192.168.1.10"},
                ],
                "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
                             "kernelVersion": "6.1.0-18-amd64", "containerRuntimeVersion": "containerd://1.7.24"},
            },
        })
    }

    /// A ready control-plane node: roles from both label forms, sorted; wide columns filled.
    #[test]
    fn ready_node() {
        let labels = json!({
            "node-role.kubernetes.io/control-plane": "",
            "kubernetes.io/role": "etcd",
            "node-role.kubernetes.io/": "ignored",
            "kubernetes.io/hostname": "node-1",
        });
        assert_eq!(
            cells(Kind::Node, node(labels, Some("True"), false)),
            json!([
                "node-1",
                "Ready",
                "control-plane,etcd",
                "3d1h",
                "v1.32.0",
                "192.168.1.10",
                "<none>",
                "Debian GNU/Linux 12 (bookworm)",
                "6.1.0-18-amd64",
                "containerd://1.7.24"
            ])
            .as_array()
            .expect("array")
            .clone()
        );
    }

    /// NotReady, cordoned, and never-reported nodes.
    #[test]
    fn not_ready_and_cordoned_nodes() {
        let row = cells(Kind::Node, node(json!({}), Some("False"), false));
        assert_eq!((&row[1], &row[2]), (&json!("NotReady"), &json!("<none>")));
        let row = cells(Kind::Node, node(json!({}), Some("True"), true));
        assert_eq!(row[1], "Ready,SchedulingDisabled");
        let row = cells(Kind::Node, node(json!({}), Some("Unknown"), true));
        assert_eq!(row[1], "NotReady,SchedulingDisabled");
        let mut bare = node(json!({}), None, false);
        bare["status"] = json!({});
        let row = cells(Kind::Node, bare);
        assert_eq!(row[1], "Unknown");
        assert_eq!(row[4], "");
        assert_eq!(row[5], "<none>");
        assert_eq!(row[7], "<unknown>");
    }

    /// A core/v1 event: ages of last and first sighting, `kind/name`, source with host,
    /// message trimmed, count as a number; and an events.k8s.io-style event with a series.
    #[test]
    fn event_rows() {
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "web.17f1", "namespace": "default", "creationTimestamp": ago(600)},
            "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default",
                               "fieldPath": "spec.containers{app}"},
            "reason": "Pulled",
            "message": "Successfully pulled image \"nginx\"\n",
            "source": {"component": "kubelet", "host": "node-1"},
            "firstTimestamp": ago(600),
            "lastTimestamp": ago(45),
            "count": 3,
            "type": "Normal",
        });
        assert_eq!(
            cells(Kind::Event, event),
            json!([
                "45s",
                "Normal",
                "Pulled",
                "pod/web",
                "spec.containers{app}",
                "kubelet, node-1",
                "Successfully pulled image \"nginx\"",
                "10m",
                3,
                "web.17f1"
            ])
            .as_array()
            .expect("array")
            .clone()
        );

        let series = json!({
            "metadata": {"name": "sched.1"},
            "involvedObject": {"kind": "Node"},
            "reason": "FailedScheduling",
            "message": "no nodes",
            "eventTime": "2025-06-01T11:58:00.000000Z",
            "series": {"count": 7, "lastObservedTime": "2025-06-01T11:59:30.000000Z"},
            "reportingComponent": "default-scheduler",
            "type": "Warning",
        });
        let row = cells(Kind::Event, series);
        assert_eq!(row[0], "30s");
        assert_eq!(row[3], "node");
        assert_eq!(row[5], "default-scheduler");
        assert_eq!(row[7], "2m");
        assert_eq!(row[8], 7);

        let bare = cells(Kind::Event, json!({"metadata": {"name": "x"}}));
        assert_eq!(
            (&bare[0], &bare[7], &bare[8]),
            (&json!("<unknown>"), &json!("<unknown>"), &json!(1))
        );
    }

    /// Event columns in kubectl's order, the wide ones at priority 1.
    #[test]
    fn event_columns() {
        let t = table(
            Kind::Event,
            &[],
            json!({}),
            IncludeObject::None,
            true,
            now(),
        );
        let names: Vec<(&str, u64)> = t["columnDefinitions"]
            .as_array()
            .expect("columns")
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().expect("name"),
                    c["priority"].as_u64().expect("priority"),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("Last Seen", 0),
                ("Type", 0),
                ("Reason", 0),
                ("Object", 0),
                ("Subobject", 1),
                ("Source", 1),
                ("Message", 0),
                ("First Seen", 1),
                ("Count", 1),
                ("Name", 1),
            ]
        );
        assert_eq!(t["rows"], json!([]));
    }

    /// Namespaces, quotas and the default table of limit ranges.
    #[test]
    fn namespace_quota_and_default_rows() {
        let ns = json!({"metadata": {"name": "team-a", "creationTimestamp": ago(7200)},
                        "status": {"phase": "Active"}});
        assert_eq!(
            cells(Kind::Namespace, ns),
            [json!("team-a"), json!("Active"), json!("120m")]
        );

        let quota = json!({
            "metadata": {"name": "compute", "creationTimestamp": ago(30)},
            "status": {
                "hard": {"requests.cpu": "1", "pods": "4", "limits.memory": "2Gi", "limits.cpu": "2", "requests.memory": "1Gi"},
                "used": {"requests.cpu": "500m", "pods": "1", "limits.cpu": "1"},
            },
        });
        assert_eq!(
            cells(Kind::ResourceQuota, quota),
            [
                json!("compute"),
                json!("30s"),
                json!("pods: 1/4, requests.cpu: 500m/1, requests.memory: 0/1Gi"),
                json!("limits.cpu: 1/2, limits.memory: 0/2Gi"),
            ]
        );
        let t = table(
            Kind::ResourceQuota,
            &[],
            json!({}),
            IncludeObject::None,
            true,
            now(),
        );
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .expect("columns")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(names, ["Name", "Age", "Request", "Limit"]);

        let limits =
            json!({"metadata": {"name": "defaults", "creationTimestamp": "2025-05-01T08:30:00Z"}});
        assert_eq!(
            cells(Kind::LimitRange, limits),
            [json!("defaults"), json!("2025-05-01T08:30:00Z")]
        );
        let t = table(
            Kind::LimitRange,
            &[],
            json!({}),
            IncludeObject::None,
            true,
            now(),
        );
        assert_eq!(t["columnDefinitions"][1]["name"], "Created At");
        assert_eq!(t["columnDefinitions"][1]["type"], "date");
    }

    fn workload(kind: &str, spec: Value, status: Value) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": {"name": "web", "namespace": "default", "creationTimestamp": ago(90), "resourceVersion": "7"},
            "spec": spec,
            "status": status,
        })
    }

    fn workload_spec(replicas: i64) -> Value {
        json!({
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]},
            "template": {"metadata": {"labels": {"app": "web", "tier": "a"}}, "spec": two_containers()},
        })
    }

    /// kubectl's deployment columns (names, types, priorities) and a row: READY is
    /// ready/desired, counts absent from the status are 0, and the wide cells join the
    /// template's containers and print the selector.
    #[test]
    fn deployment_rows() {
        let t = table(
            Kind::Deployment,
            &[workload(
                "Deployment",
                workload_spec(3),
                json!({"replicas": 3, "updatedReplicas": 2, "readyReplicas": 1}),
            )],
            json!({}),
            IncludeObject::None,
            true,
            now(),
        );
        let columns: Vec<(&str, &str, u64)> = t["columnDefinitions"]
            .as_array()
            .expect("columns")
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().expect("name"),
                    c["type"].as_str().expect("type"),
                    c["priority"].as_u64().expect("priority"),
                )
            })
            .collect();
        assert_eq!(
            columns,
            [
                ("Name", "string", 0),
                ("Ready", "string", 0),
                ("Up-to-date", "string", 0),
                ("Available", "string", 0),
                ("Age", "string", 0),
                ("Containers", "string", 1),
                ("Images", "string", 1),
                ("Selector", "string", 1),
            ]
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "web",
                "1/3",
                2,
                0,
                "90s",
                "app,log",
                "nginx,busybox",
                "app=web,tier in (a,b)"
            ])
        );
    }

    /// kubectl's replica set columns and a row: desired from the spec, current and ready from
    /// the status; a fresh replica set with no status reads 0 of each.
    #[test]
    fn replica_set_rows() {
        let t = table(
            Kind::ReplicaSet,
            &[workload("ReplicaSet", workload_spec(2), json!({}))],
            json!({}),
            IncludeObject::None,
            true,
            now(),
        );
        let names: Vec<(&str, &str)> = t["columnDefinitions"]
            .as_array()
            .expect("columns")
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().expect("name"),
                    c["type"].as_str().expect("type"),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("Name", "string"),
                ("Desired", "integer"),
                ("Current", "integer"),
                ("Ready", "integer"),
                ("Age", "string"),
                ("Containers", "string"),
                ("Images", "string"),
                ("Selector", "string"),
            ]
        );
        assert_eq!(
            cells(
                Kind::ReplicaSet,
                workload(
                    "ReplicaSet",
                    workload_spec(2),
                    json!({"replicas": 2, "readyReplicas": 1})
                )
            ),
            [
                json!("web"),
                json!(2),
                json!(2),
                json!(1),
                json!("90s"),
                json!("app,log"),
                json!("nginx,busybox"),
                json!("app=web,tier in (a,b)")
            ]
        );
        assert_eq!(t["rows"][0]["cells"][2], 0);
    }
}
