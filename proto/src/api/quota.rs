//! ResourceQuota accounting: which objects count against which of a quota's resources, by how
//! much, and which pods a scoped quota takes in. The API server's quota admission (a create
//! that would exceed a quota is refused) and the quota controller (which keeps `status.used`
//! current) both count with these rules, so what a quota refuses and what it shows agree.
//!
//! | resource name                                    | counts                               |
//! |--------------------------------------------------|--------------------------------------|
//! | `count/<plural>` (core), `count/<plural>.<group>` | objects of that resource            |
//! | `pods`, `services`, `secrets`, `configmaps`, `replicationcontrollers`, `resourcequotas`, `persistentvolumeclaims` | objects (pods that have not finished) |
//! | `requests.<r>`, `limits.<r>`; `cpu`, `memory`, `ephemeral-storage` (requests) | pods' container totals (an init container counts as the largest of them) |
//! | `services.nodeports`, `services.loadbalancers`   | ports of NodePort and LoadBalancer Services (each takes a node port); LoadBalancer Services |
//! | `requests.storage`; `<class>.storageclass.storage.k8s.io/requests.storage`, `…/persistentvolumeclaims` | PVC requests and counts, all and per StorageClass |

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Kind, Object, Pod, ResourceQuota};
use crate::quantity::Quantity;

/// Quantities by the names a quota gives them (`pods`, `requests.cpu`, `count/jobs.batch`).
pub type Usage = BTreeMap<String, Quantity>;

/// The core resources a quota may count by their bare plural (before `count/` existed).
const LEGACY_COUNTS: [&str; 7] = [
    "pods",
    "services",
    "secrets",
    "configmaps",
    "replicationcontrollers",
    "resourcequotas",
    "persistentvolumeclaims",
];

/// Pod resources a quota names bare, meaning the requests.
const BARE_REQUESTS: [&str; 3] = ["cpu", "memory", "ephemeral-storage"];

const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

/// The kind whose objects count toward `resource`, a name from a quota's `spec.hard`; `None`
/// for a name no object counts toward.
pub fn kind_counted(resource: &str) -> Option<Kind> {
    if let Some(what) = resource.strip_prefix("count/") {
        let (plural, group) = what.split_once('.').unwrap_or((what, ""));
        return Kind::all().find(|k| k.plural() == plural && k.group() == group && k.is_stored());
    }
    if LEGACY_COUNTS.contains(&resource) {
        return Kind::from_plural(resource).filter(|k| k.group().is_empty());
    }
    if resource.starts_with("services.") {
        return Some(Kind::Service);
    }
    if resource == "requests.storage" || resource.contains(STORAGE_CLASS_SUFFIX) {
        return Kind::from_name("PersistentVolumeClaim");
    }
    if resource.starts_with("requests.")
        || resource.starts_with("limits.")
        || BARE_REQUESTS.contains(&resource)
    {
        return Some(Kind::Pod);
    }
    None
}

/// Whether a quota may limit `resource`: a name some kind's objects count toward, an object
/// count of a resource not served yet (`count/widgets.example.com`), or another qualified name
/// (`example.com/licenses`), as Kubernetes allows.
pub fn is_resource_name(resource: &str) -> bool {
    kind_counted(resource).is_some()
        || resource
            .strip_prefix("count/")
            .is_some_and(|r| !r.is_empty())
        || resource.contains('/')
}

/// The scopes `quota` names in `spec.scopes`.
pub fn scopes(quota: &ResourceQuota) -> Vec<&str> {
    quota
        .spec
        .other
        .0
        .get("scopes")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The name an object of `kind` counts under as `count/…`.
fn count_name(kind: Kind) -> String {
    format!("count/{}", kind.qualified_resource())
}

/// Everything `object` counts toward, under every name a quota may give it. A pod that has
/// finished counts toward nothing.
pub fn usage(object: &Object) -> Usage {
    let kind = object.kind();
    let mut out = Usage::new();
    if let Object::Pod(pod) = object
        && pod.is_terminal()
    {
        return out;
    }
    let one = Quantity::from_units(1);
    out.insert(count_name(kind), one);
    if kind.group().is_empty() && LEGACY_COUNTS.contains(&kind.plural()) {
        out.insert(kind.plural().to_owned(), one);
    }
    match object {
        Object::Pod(pod) => pod_resources(pod, &mut out),
        Object::Service(svc) => {
            // Every port of a NodePort Service takes a node port, allocated or still to be;
            // so does a LoadBalancer's, unless it asks for none.
            let lb_allocates =
                svc.spec.other.0.get("allocateLoadBalancerNodePorts") != Some(&Value::Bool(false));
            let nodeports =
                if svc.is_node_port() || svc.spec.type_ == "LoadBalancer" && lb_allocates {
                    svc.spec.ports.len()
                } else {
                    0
                };
            out.insert(
                "services.nodeports".into(),
                Quantity::from_units(i64::try_from(nodeports).unwrap_or(i64::MAX)),
            );
            let lb = i64::from(svc.spec.type_ == "LoadBalancer");
            out.insert("services.loadbalancers".into(), Quantity::from_units(lb));
        }
        Object::Generic(_, claim) if kind.name() == "PersistentVolumeClaim" => {
            let storage = claim
                .at("/spec/resources/requests/storage")
                .and_then(Value::as_str)
                .and_then(|s| Quantity::parse(s).ok())
                .unwrap_or(Quantity::ZERO);
            out.insert("requests.storage".into(), storage);
            if let Some(class) = claim
                .at("/spec/storageClassName")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty())
            {
                out.insert(
                    format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"),
                    storage,
                );
                out.insert(
                    format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"),
                    one,
                );
            }
        }
        _ => {}
    }
    out
}

/// A pod's requests and limits: `requests.<r>` and `limits.<r>` for every resource its
/// containers name, and the bare `cpu`, `memory` and `ephemeral-storage` for their requests.
fn pod_resources(pod: &Pod, out: &mut Usage) {
    let mut names: Vec<&String> = Vec::new();
    for c in pod.spec.containers.iter().chain(&pod.spec.init_containers) {
        names.extend(c.resources.requests.keys());
        names.extend(c.resources.limits.keys());
    }
    names.sort_unstable();
    names.dedup();
    for name in names {
        if let Some(q) = pod_total(pod, name, false) {
            if BARE_REQUESTS.contains(&name.as_str()) {
                out.insert(name.clone(), q);
            }
            out.insert(format!("requests.{name}"), q);
        }
        if let Some(q) = pod_total(pod, name, true) {
            out.insert(format!("limits.{name}"), q);
        }
    }
}

/// Sum over containers of a request or limit, with init containers counted as the largest of
/// them (as the effective request is). None when no container sets it.
fn pod_total(pod: &Pod, resource: &str, limits: bool) -> Option<Quantity> {
    let pick = |c: &super::Container| {
        let list = if limits {
            &c.resources.limits
        } else {
            &c.resources.requests
        };
        list.get(resource).copied()
    };
    let mut any = false;
    let mut sum = Quantity::ZERO;
    for c in &pod.spec.containers {
        if let Some(q) = pick(c) {
            any = true;
            sum = sum.checked_add(&q).unwrap_or(sum);
        }
    }
    for c in &pod.spec.init_containers {
        if let Some(q) = pick(c) {
            any = true;
            sum = sum.max(q);
        }
    }
    any.then_some(sum)
}

/// Adds `more` into `into` (a sum past what a quantity holds stays where it was).
pub fn add(into: &mut Usage, more: &Usage) {
    for (resource, q) in more {
        let e = into.entry(resource.clone()).or_insert(Quantity::ZERO);
        *e = e.checked_add(q).unwrap_or(*e);
    }
}

/// Whether a quota naming `resource` refuses a pod that does not set it: compute resources
/// under a quota must be given (`must specify requests.cpu`).
pub fn must_specify(resource: &str) -> bool {
    resource.starts_with("requests.") && resource != "requests.storage"
        || resource.starts_with("limits.")
        || BARE_REQUESTS.contains(&resource)
}

/// What a pod is, for the scopes a quota may be limited to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodScope {
    /// `activeDeadlineSeconds` is set: the pod ends by itself.
    pub terminating: bool,
    /// No container requests or limits CPU or memory.
    pub best_effort: bool,
    pub priority_class: String,
}

impl PodScope {
    pub fn of(pod: &Pod) -> PodScope {
        let terminating = pod.spec.active_deadline_seconds.is_some_and(|s| s >= 0);
        let best_effort = pod
            .spec
            .containers
            .iter()
            .chain(&pod.spec.init_containers)
            .all(|c| {
                ["cpu", "memory"].iter().all(|r| {
                    !c.resources.requests.contains_key(*r) && !c.resources.limits.contains_key(*r)
                })
            });
        PodScope {
            terminating,
            best_effort,
            priority_class: pod.spec.priority_class_name.clone(),
        }
    }
}

/// Whether `quota` takes in an object (`pod` is its scope when it is a pod): a quota with
/// scopes (`spec.scopes`, `spec.scopeSelector`) takes in only the pods in all of them, one
/// without takes in everything.
pub fn in_scope(quota: &ResourceQuota, pod: Option<&PodScope>) -> bool {
    let other = &quota.spec.other.0;
    let scopes = scopes(quota);
    let selector: &[Value] = other
        .get("scopeSelector")
        .and_then(|s| s.get("matchExpressions"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    if scopes.is_empty() && selector.is_empty() {
        return true;
    }
    let Some(pod) = pod else { return false };
    let named = scopes.iter().all(|s| scope_matches(s, "Exists", &[], pod));
    named
        && selector.iter().all(|e| {
            let scope = e.get("scopeName").and_then(Value::as_str).unwrap_or("");
            let op = e.get("operator").and_then(Value::as_str).unwrap_or("");
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            scope_matches(scope, op, &values, pod)
        })
}

/// One scope requirement against a pod. Scopes other than `PriorityClass` only take
/// `Exists`; a scope Skiff does not know takes in nothing.
fn scope_matches(scope: &str, op: &str, values: &[&str], pod: &PodScope) -> bool {
    let flag = match scope {
        "Terminating" => pod.terminating,
        "NotTerminating" => !pod.terminating,
        "BestEffort" => pod.best_effort,
        "NotBestEffort" => !pod.best_effort,
        "PriorityClass" => {
            let class = pod.priority_class.as_str();
            return match op {
                "In" => values.contains(&class),
                "NotIn" => !values.contains(&class),
                "Exists" => !class.is_empty(),
                "DoesNotExist" => class.is_empty(),
                _ => false,
            };
        }
        _ => return false,
    };
    match op {
        "Exists" => flag,
        "DoesNotExist" => !flag,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(kind: &str, value: Value) -> Object {
        Object::from_value(Kind::from_name(kind).expect(kind), value).expect("object")
    }

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).expect(s)
    }

    #[test]
    fn resource_names_find_their_kind() {
        assert_eq!(kind_counted("pods"), Some(Kind::Pod));
        assert_eq!(kind_counted("count/pods"), Some(Kind::Pod));
        assert_eq!(kind_counted("requests.cpu"), Some(Kind::Pod));
        assert_eq!(kind_counted("limits.nvidia.com/gpu"), Some(Kind::Pod));
        assert_eq!(kind_counted("memory"), Some(Kind::Pod));
        assert_eq!(kind_counted("services.nodeports"), Some(Kind::Service));
        assert_eq!(
            kind_counted("count/deployments.apps"),
            Some(Kind::Deployment)
        );
        assert_eq!(kind_counted("configmaps"), Kind::from_name("ConfigMap"));
        assert_eq!(kind_counted("count/jobs.batch"), Kind::from_name("Job"));
        assert_eq!(
            kind_counted("gold.storageclass.storage.k8s.io/requests.storage"),
            Kind::from_name("PersistentVolumeClaim")
        );
        assert_eq!(kind_counted("count/jobs"), None, "jobs are not core");
        assert_eq!(kind_counted("count/bindings"), None, "never stored");
        assert_eq!(kind_counted("widgets"), None);
    }

    #[test]
    fn pods_count_requests_limits_and_themselves_until_they_finish() {
        let pod = object(
            "Pod",
            json!({"metadata": {"name": "p", "namespace": "default"},
                   "spec": {"containers": [
                       {"name": "a", "image": "i", "resources": {
                           "requests": {"cpu": "100m", "memory": "64Mi"},
                           "limits": {"cpu": "200m", "nvidia.com/gpu": "1"}}},
                       {"name": "b", "image": "i", "resources": {"requests": {"cpu": "50m"}}}],
                     "initContainers": [
                       {"name": "init", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}}),
        );
        let u = usage(&pod);
        assert_eq!(u["pods"], Quantity::from_units(1));
        assert_eq!(u["count/pods"], Quantity::from_units(1));
        assert_eq!(
            u["requests.cpu"],
            q("1"),
            "the init container is the largest"
        );
        assert_eq!(u["cpu"], q("1"));
        assert_eq!(u["requests.memory"], q("64Mi"));
        assert_eq!(u["limits.cpu"], q("200m"));
        assert_eq!(u["limits.nvidia.com/gpu"], q("1"));
        assert!(!u.contains_key("limits.memory"));

        let mut done = pod.clone();
        if let Object::Pod(p) = &mut done {
            p.status.get_or_insert_default().phase = Some(super::super::PodPhase::Succeeded);
        }
        assert!(usage(&done).is_empty());
    }

    #[test]
    fn services_claims_and_other_kinds() {
        let svc = object(
            "Service",
            json!({"metadata": {"name": "s", "namespace": "default"},
                   "spec": {"type": "NodePort", "ports": [
                       {"name": "a", "port": 80, "nodePort": 30080}, {"name": "b", "port": 443}]}}),
        );
        let u = usage(&svc);
        assert_eq!(u["services"], Quantity::from_units(1));
        assert_eq!(u["services.nodeports"], Quantity::from_units(2));
        assert_eq!(u["services.loadbalancers"], Quantity::ZERO);

        let pvc = object(
            "PersistentVolumeClaim",
            json!({"metadata": {"name": "c", "namespace": "default"},
                   "spec": {"storageClassName": "gold", "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "5Gi"}}}}),
        );
        let u = usage(&pvc);
        assert_eq!(u["persistentvolumeclaims"], Quantity::from_units(1));
        assert_eq!(u["requests.storage"], q("5Gi"));
        assert_eq!(
            u["gold.storageclass.storage.k8s.io/requests.storage"],
            q("5Gi")
        );
        assert_eq!(
            u["gold.storageclass.storage.k8s.io/persistentvolumeclaims"],
            Quantity::from_units(1)
        );

        let job = object(
            "Job",
            json!({"metadata": {"name": "j", "namespace": "default"},
                   "spec": {"template": {"spec": {"restartPolicy": "Never",
                            "containers": [{"name": "c", "image": "i"}]}}}}),
        );
        assert_eq!(
            usage(&job).into_iter().collect::<Vec<_>>(),
            [("count/jobs.batch".to_owned(), Quantity::from_units(1))]
        );
    }

    #[test]
    fn scopes_take_in_the_pods_they_name() {
        let quota = |spec: Value| -> ResourceQuota {
            serde_json::from_value(json!({"metadata": {"name": "q"}, "spec": spec})).unwrap()
        };
        let best_effort = PodScope {
            terminating: false,
            best_effort: true,
            priority_class: String::new(),
        };
        let high = PodScope {
            terminating: true,
            best_effort: false,
            priority_class: "high".into(),
        };
        let plain = quota(json!({"hard": {"pods": "1"}}));
        assert!(
            in_scope(&plain, None),
            "an unscoped quota takes in any object"
        );
        assert!(in_scope(&plain, Some(&best_effort)));

        let be = quota(json!({"hard": {"pods": "1"}, "scopes": ["BestEffort"]}));
        assert!(in_scope(&be, Some(&best_effort)));
        assert!(!in_scope(&be, Some(&high)));
        assert!(!in_scope(&be, None), "a scoped quota takes in only pods");

        let by_class = quota(
            json!({"hard": {"pods": "1"}, "scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}),
        );
        assert!(in_scope(&by_class, Some(&high)));
        assert!(!in_scope(&by_class, Some(&best_effort)));

        let both =
            quota(json!({"hard": {"pods": "1"}, "scopes": ["Terminating", "NotBestEffort"]}));
        assert!(in_scope(&both, Some(&high)));
        assert!(!in_scope(&both, Some(&best_effort)));
    }
}
