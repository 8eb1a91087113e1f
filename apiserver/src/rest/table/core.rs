//! The printers of the core (`v1`) kinds: pods, nodes, namespaces, events, resource quotas,
//! secrets and services, with the columns kubectl shows for each.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use skiff_proto::api::{
    ConditionStatus, NodeConditionType, PodConditionType, PodPhase, RestartPolicy,
};

use super::{
    AGE, Column, NAME, Row, age, column, flag, items, name, number, or_none, or_unknown, since,
    text, time,
};

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

pub(super) const POD_COLUMNS: &[Column] = &[
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

pub(super) const NODE_COLUMNS: &[Column] = &[
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

pub(super) const NAMESPACE_COLUMNS: &[Column] = &[
    NAME,
    column("Status", 0, "The status of the namespace"),
    AGE,
];

pub(super) const EVENT_COLUMNS: &[Column] = &[
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
pub(super) const SECRET_COLUMNS: &[Column] = &[
    NAME,
    column("Type", 0, "The type of the secret"),
    column("Data", 0, "The number of entries in the secret"),
    AGE,
];

/// kubectl's for Services.
pub(super) const SERVICE_COLUMNS: &[Column] = &[
    NAME,
    column("Type", 0, "The type of the service"),
    column("Cluster-IP", 0, "The cluster IP of the service"),
    column("External-IP", 0, "The external IPs of the service"),
    column("Port(s)", 0, "The ports the service exposes"),
    AGE,
    column("Selector", 1, "The label selector of the service's pods"),
];

pub(super) const RESOURCE_QUOTA_COLUMNS: &[Column] = &[
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
pub(super) fn pod_row(pod: &Value, now: DateTime<Utc>) -> Row {
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

/// kubectl's node row: `Ready`/`NotReady`/`Unknown` from the Ready condition, with
/// `SchedulingDisabled` added for a cordoned node; roles from the role labels.
pub(super) fn node_cells(node: &Value, now: DateTime<Utc>) -> Vec<Value> {
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

/// kubectl's namespace row: the phase.
pub(super) fn namespace_cells(namespace: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![
        name(namespace).into(),
        text(namespace, "/status/phase").into(),
        age(namespace, now).into(),
    ]
}

/// kubectl's secret row: the type, and how many entries its data has.
pub(super) fn secret_cells(secret: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![
        name(secret).into(),
        text(secret, "/type").into(),
        secret
            .get("data")
            .and_then(Value::as_object)
            .map_or(0, Map::len)
            .into(),
        age(secret, now).into(),
    ]
}

/// kubectl's event row. Events written through `events.k8s.io` carry `eventTime` and a series
/// instead of first/last timestamps and a count; either form prints the same way.
pub(super) fn event_cells(event: &Value, now: DateTime<Utc>) -> Vec<Value> {
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

/// kubectl's PORT(S): `80/TCP`, `80:30080/TCP` for a node port, comma-separated.
pub(super) fn service_cells(svc: &Value, now: DateTime<Utc>) -> Vec<Value> {
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

/// kubectl's quota row: `used/hard` of every hard limit, sorted by resource name; those named
/// `limits.*` in the Limit column, the rest in Request.
pub(super) fn resource_quota_cells(quota: &Value, now: DateTime<Utc>) -> Vec<Value> {
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use skiff_proto::api::Kind;

    use super::super::tests::{ago, cells, now, pod, two_containers};
    use super::super::{IncludeObject, table};

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
}
