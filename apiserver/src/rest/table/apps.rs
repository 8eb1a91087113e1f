//! The printers of the `apps` kinds: Deployments and ReplicaSets, with their template's
//! containers, images and selector in the wide columns.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use skiff_proto::api::LabelSelector;
use skiff_proto::selector::LabelQuery;

use super::{AGE, Column, NAME, age, column, integer_column, items, name, number, text};

/// The wide columns of the workloads, after their own.
const CONTAINERS: Column = column("Containers", 1, "Names of each container in the template.");
const IMAGES: Column = column(
    "Images",
    1,
    "Images referenced by each container in the template.",
);

/// kube-apiserver's deployment columns, described as its printer describes them (the
/// Deployment schema's own field descriptions).
pub(super) const DEPLOYMENT_COLUMNS: &[Column] = &[
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

pub(super) const REPLICA_SET_COLUMNS: &[Column] = &[
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
pub(super) fn deployment_cells(deployment: &Value, now: DateTime<Utc>) -> Vec<Value> {
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
pub(super) fn replica_set_cells(replica_set: &Value, now: DateTime<Utc>) -> Vec<Value> {
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
    use serde_json::{Value, json};
    use skiff_proto::api::Kind;

    use super::super::tests::{ago, cells, now, two_containers};
    use super::super::{IncludeObject, table};

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
