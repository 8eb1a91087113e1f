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
//!
//! This module holds the machinery: the Table envelope, the columns, the printer of each kind
//! and the JSON readers every printer uses. Each API group's columns and rows are a module of
//! their own: `core`, `apps`, `rbac`, `certificates` and `endpoint_slices` (`discovery.k8s.io`).

mod apps;
mod certificates;
mod core;
mod endpoint_slices;
mod rbac;

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use jsonpath_rust::JsonPath as _;
use serde_json::{Map, Value, json};
use skiff_proto::api::custom::{self, PrinterColumn};
use skiff_proto::api::{GenericKind, Kind, KindInfo};

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
        let columns: Vec<Value> = match printer {
            Printer::Custom(g) => with_custom_columns(g, |columns| {
                std::iter::once(NAME.to_json())
                    .chain(columns.iter().map(|c| {
                        column_json(&c.name, &c.type_, &c.format, &c.description, c.priority)
                    }))
                    .collect()
            }),
            Printer::Declared(info) => std::iter::once(NAME.to_json())
                .chain(info.columns.iter().map(|c| {
                    column_json(
                        c.name,
                        c.type_,
                        c.format,
                        c.description,
                        i64::from(c.priority),
                    )
                }))
                .collect(),
            _ => printer.columns().iter().map(Column::to_json).collect(),
        };
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

/// A Table's column definition.
fn column_json(name: &str, type_: &str, format: &str, description: &str, priority: i64) -> Value {
    json!({
        "name": name,
        "type": type_,
        "format": format,
        "description": description,
        "priority": priority,
    })
}

impl Column {
    fn to_json(&self) -> Value {
        let kind = match self.kind {
            ColumnType::String => "string",
            ColumnType::Integer => "integer",
            ColumnType::Date => "date",
        };
        column_json(
            self.name,
            kind,
            self.format,
            self.description,
            i64::from(self.priority),
        )
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

const fn integer_column(name: &'static str, description: &'static str) -> Column {
    Column {
        kind: ColumnType::Integer,
        ..column(name, 0, description)
    }
}

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
    /// A declared kind's columns, after its name.
    Declared(&'static KindInfo),
    /// A custom kind's additional printer columns (its CRD's), after its name.
    Custom(GenericKind),
}

impl Printer {
    fn of(kind: Kind) -> Printer {
        match kind {
            Kind::Generic(g) if g.custom_index().is_some() => Printer::Custom(g),
            Kind::Generic(g) if g.info().columns.is_empty() => Printer::Default,
            Kind::Generic(g) => Printer::Declared(g.info()),
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
            Printer::Pod => core::POD_COLUMNS,
            Printer::Node => core::NODE_COLUMNS,
            Printer::Namespace => core::NAMESPACE_COLUMNS,
            Printer::Event => core::EVENT_COLUMNS,
            Printer::ResourceQuota => core::RESOURCE_QUOTA_COLUMNS,
            Printer::Deployment => apps::DEPLOYMENT_COLUMNS,
            Printer::ReplicaSet => apps::REPLICA_SET_COLUMNS,
            Printer::RoleBinding => rbac::ROLE_BINDING_COLUMNS,
            Printer::Secret => core::SECRET_COLUMNS,
            Printer::CertificateSigningRequest => certificates::CSR_COLUMNS,
            Printer::Service => core::SERVICE_COLUMNS,
            Printer::EndpointSlice => endpoint_slices::ENDPOINT_SLICE_COLUMNS,
            Printer::Default | Printer::Declared(_) | Printer::Custom(_) => DEFAULT_COLUMNS,
        }
    }

    fn row(self, object: &Value, now: DateTime<Utc>) -> Row {
        match self {
            Printer::Pod => core::pod_row(object, now),
            Printer::Node => Row::cells(core::node_cells(object, now)),
            Printer::Namespace => Row::cells(core::namespace_cells(object, now)),
            Printer::Event => Row::cells(core::event_cells(object, now)),
            Printer::ResourceQuota => Row::cells(core::resource_quota_cells(object, now)),
            Printer::Deployment => Row::cells(apps::deployment_cells(object, now)),
            Printer::ReplicaSet => Row::cells(apps::replica_set_cells(object, now)),
            Printer::RoleBinding => Row::cells(rbac::role_binding_cells(object, now)),
            Printer::Secret => Row::cells(core::secret_cells(object, now)),
            Printer::CertificateSigningRequest => Row::cells(certificates::csr_cells(object, now)),
            Printer::Service => Row::cells(core::service_cells(object, now)),
            Printer::EndpointSlice => {
                Row::cells(endpoint_slices::endpoint_slice_cells(object, now))
            }
            Printer::Default => Row::cells(vec![name(object).into(), created_at(object).into()]),
            Printer::Declared(info) => Row::cells(
                std::iter::once(name(object).into())
                    .chain(info.columns.iter().map(|c| (c.cell)(object, now)))
                    .collect(),
            ),
            Printer::Custom(g) => Row::cells(with_custom_columns(g, |columns| {
                std::iter::once(name(object).into())
                    .chain(columns.iter().map(|c| custom_cell(c, object, now)))
                    .collect()
            })),
        }
    }
}

/// The column of a custom kind without printer columns: `Age`, as kube-apiserver prints
/// custom resources.
static CUSTOM_AGE: LazyLock<[PrinterColumn; 1]> = LazyLock::new(|| {
    [PrinterColumn {
        name: "Age".into(),
        type_: "date".into(),
        format: String::new(),
        description: AGE.description.into(),
        priority: 0,
        json_path: ".metadata.creationTimestamp".into(),
    }]
});

/// `f` of a custom kind's columns: its CRD's additional printer columns, or [`CUSTOM_AGE`].
fn with_custom_columns<T>(g: GenericKind, f: impl FnOnce(&[PrinterColumn]) -> T) -> T {
    let live = custom::live(g);
    match live.as_deref() {
        Some(l) if !l.columns.is_empty() => f(&l.columns),
        _ => f(&*CUSTOM_AGE),
    }
}

/// The cell of a printer column: the first value its JSONPath finds (none: `null`, which
/// kubectl prints as `<none>`); a `date` as the time since, as kubectl prints ages.
fn custom_cell(column: &PrinterColumn, object: &Value, now: DateTime<Utc>) -> Value {
    let found = object
        .query(&format!("${}", column.json_path))
        .ok()
        .and_then(|values| values.first().map(|v| (*v).clone()));
    match (column.type_.as_str(), found) {
        (_, None) => Value::Null,
        ("date", Some(Value::String(t))) => {
            let at = DateTime::parse_from_rfc3339(&t)
                .ok()
                .map(|t| t.with_timezone(&Utc));
            json!(since(at, now))
        }
        ("string", Some(Value::String(s))) => json!(s),
        ("string", Some(other)) => json!(other.to_string()),
        (_, Some(v)) => v,
    }
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

fn name(object: &Value) -> &str {
    text(object, "/metadata/name")
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

pub use skiff_proto::api::print::human_duration;
use skiff_proto::api::print::{number, since, text, time};

fn or_none(s: &str) -> &str {
    if s.is_empty() { "<none>" } else { s }
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "<unknown>" } else { s }
}

/// The fixtures the printers' tests share: a fixed `now`, timestamps before it, a pod.
#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    pub(super) fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2025-06-01T12:00:00Z")
            .expect("valid time")
            .with_timezone(&Utc)
    }

    /// `now` minus `seconds`, as the API writes timestamps.
    pub(super) fn ago(seconds: i64) -> String {
        (now() - TimeDelta::seconds(seconds))
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    }

    pub(super) fn cells(kind: Kind, object: Value) -> Vec<Value> {
        let t = table(kind, &[object], json!({}), IncludeObject::None, true, now());
        t["rows"][0]["cells"].as_array().expect("cells").clone()
    }

    pub(super) fn pod(spec: Value, status: Value) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "creationTimestamp": ago(300), "resourceVersion": "7"},
            "spec": spec,
            "status": status,
        })
    }

    pub(super) fn two_containers() -> Value {
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
}
