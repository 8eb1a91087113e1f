//! What the scheduler reads from a Pod or a Node, extracted once into plain numbers and
//! strings so that the table and the kernels never touch quantities or JSON.
//!
//! A pod's [`PodInfo::signature`] hashes everything that decides where it may go and how nodes
//! score for it; pods with equal signatures are interchangeable to the filters and share one
//! filter pass (see `engine`).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use skiff_proto::api::node::ContainerImage;
use skiff_proto::api::pod::{
    NodeSelector, PREEMPT_NEVER, PodAffinityTerm, PreferredSchedulingTerm, TopologySpreadConstraint,
};
use skiff_proto::api::{
    ConditionStatus, LabelSelector, Node, NodeConditionType, ObjectReference, Pod,
    PodConditionType, Taint, TaintEffect, Toleration,
};

/// The CPU kube-scheduler assumes for a container without a CPU request when it scores
/// (not when it filters): 0.1 core.
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// The memory kube-scheduler assumes for a container without a memory request when it scores.
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

pub use skiff_proto::api::node::{TAINT_NOT_READY, TAINT_UNREACHABLE};

/// The reason of the `DisruptionTarget` condition the scheduler sets on the pods it preempts.
pub const PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";

/// The taint on a cordoned node (`spec.unschedulable`).
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// Requested (pod) or allocatable (node) amounts of the resources the scheduler accounts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    /// Extended resources (`example.com/gpu`), in whole units, sorted by name.
    pub extended: Vec<(String, i64)>,
}

impl Resources {
    /// Adds `other`'s requests to these.
    pub fn add(&mut self, other: &Resources) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.ephemeral_storage += other.ephemeral_storage;
        for (name, v) in &other.extended {
            match self.extended.iter_mut().find(|(n, _)| n == name) {
                Some((_, x)) => *x += v,
                None => self.extended.push((name.clone(), *v)),
            }
        }
    }

    /// Reads `cpu`, `memory`, `ephemeral-storage` and any other named resource from a list.
    fn from_list<'a>(get: impl Fn(&str) -> i64, names: impl Iterator<Item = &'a String>) -> Self {
        let mut extended: Vec<(String, i64)> = names
            .filter(|n| !matches!(n.as_str(), "cpu" | "memory" | "ephemeral-storage" | "pods"))
            .map(|n| (n.clone(), get(n)))
            .collect();
        extended.sort();
        extended.dedup_by(|a, b| a.0 == b.0);
        Resources {
            milli_cpu: get("cpu"),
            memory: get("memory"),
            ephemeral_storage: get("ephemeral-storage"),
            extended,
        }
    }

    pub fn extended(&self, name: &str) -> i64 {
        self.extended
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v)
    }
}

/// The scheduling-relevant view of one pod.
#[derive(Debug, Clone, Default)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The pod's resourceVersion when read; Bind checks it has not changed.
    pub resource_version: i64,
    pub priority: i32,
    pub labels: BTreeMap<String, String>,
    /// Effective requests (app containers summed, raised to the largest init container).
    pub requests: Resources,
    /// Requests with kube-scheduler's defaults for containers that request nothing; used for
    /// scoring only, so that empty pods still spread.
    pub nonzero_milli_cpu: i64,
    pub nonzero_memory: i64,
    pub node_selector: BTreeMap<String, String>,
    pub required_node_affinity: Option<NodeSelector>,
    pub preferred_node_affinity: Vec<PreferredSchedulingTerm>,
    pub tolerations: Vec<Toleration>,
    /// `(protocol, hostPort)` pairs the pod claims on its node.
    pub host_ports: Vec<(String, i32)>,
    pub required_affinity: Vec<PodAffinityTerm>,
    pub required_anti_affinity: Vec<PodAffinityTerm>,
    /// `(weight, term)`; weight is negative for anti-affinity.
    pub preferred_terms: Vec<(i32, PodAffinityTerm)>,
    pub spread: Vec<TopologySpreadConstraint>,
    pub images: Vec<String>,
    pub best_effort: bool,
    pub scheduler_name: String,
    /// `preemptionPolicy: Never`: the pod waits for room and never preempts others.
    pub never_preempts: bool,
    /// `status.startTime` in Unix seconds; `None` before the agent started it. Preemption
    /// spares pods that started earlier, as kube-scheduler does.
    pub start_time: Option<i64>,
    /// Being deleted (`deletionTimestamp` set).
    pub terminating: bool,
    /// Being deleted because the scheduler preempted it (a `DisruptionTarget` condition
    /// with reason `PreemptionByScheduler`).
    pub preempted: bool,
    /// `status.nominatedNodeName`: where an earlier preemption made room for the pod.
    pub nominated_node: String,
}

fn requested_milli_cpu(q: Option<&skiff_proto::Quantity>) -> i64 {
    q.map_or(0, |q| q.milli_value())
}

impl PodInfo {
    /// The pod as an event names it.
    pub fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            field_path: String::new(),
            other: Default::default(),
        }
    }

    pub fn from_pod(pod: &Pod) -> Self {
        let spec = &pod.spec;
        let status = pod.status.as_ref();
        let effective = |name: &str| -> i64 {
            let q = pod.effective_request(name);
            if name == "cpu" {
                q.milli_value()
            } else {
                q.value()
            }
        };
        let mut names: Vec<&String> = spec
            .containers
            .iter()
            .chain(&spec.init_containers)
            .flat_map(|c| c.resources.requests.keys())
            .collect();
        names.sort();
        names.dedup();
        let requests = Resources::from_list(effective, names.into_iter());
        // Non-zero requests: per app container, a missing request counts as the default.
        let mut nonzero_milli_cpu = 0i64;
        let mut nonzero_memory = 0i64;
        for c in &spec.containers {
            let cpu = c.resources.requests.get("cpu");
            nonzero_milli_cpu += if cpu.is_some() {
                requested_milli_cpu(cpu)
            } else {
                DEFAULT_MILLI_CPU_REQUEST
            };
            nonzero_memory += c
                .resources
                .requests
                .get("memory")
                .map_or(DEFAULT_MEMORY_REQUEST, |q| q.value());
        }
        for c in &spec.init_containers {
            let cpu = c
                .resources
                .requests
                .get("cpu")
                .map_or(DEFAULT_MILLI_CPU_REQUEST, |q| q.milli_value());
            let mem = c
                .resources
                .requests
                .get("memory")
                .map_or(DEFAULT_MEMORY_REQUEST, |q| q.value());
            nonzero_milli_cpu = nonzero_milli_cpu.max(cpu);
            nonzero_memory = nonzero_memory.max(mem);
        }
        let best_effort = spec
            .containers
            .iter()
            .chain(&spec.init_containers)
            .all(|c| c.resources.is_empty());
        let mut host_ports: Vec<(String, i32)> = spec
            .containers
            .iter()
            .chain(&spec.init_containers)
            .flat_map(|c| &c.ports)
            .filter_map(|p| {
                let port = p.host_port.filter(|&h| h > 0)?;
                let proto = if p.protocol.is_empty() {
                    "TCP".to_string()
                } else {
                    p.protocol.clone()
                };
                Some((proto, port))
            })
            .collect();
        host_ports.sort();
        host_ports.dedup();
        let affinity = spec.affinity.as_ref();
        let node_affinity = affinity.and_then(|a| a.node_affinity.as_ref());
        let pod_affinity = affinity.and_then(|a| a.pod_affinity.as_ref());
        let pod_anti_affinity = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
        let mut preferred_terms = Vec::new();
        if let Some(a) = pod_affinity {
            for w in &a.preferred {
                preferred_terms.push((w.weight, w.pod_affinity_term.clone()));
            }
        }
        if let Some(a) = pod_anti_affinity {
            for w in &a.preferred {
                preferred_terms.push((-w.weight, w.pod_affinity_term.clone()));
            }
        }
        let mut images: Vec<String> = spec
            .containers
            .iter()
            .map(|c| normalize_image(&c.image))
            .collect();
        images.sort();
        images.dedup();
        PodInfo {
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            resource_version: pod.metadata.revision().unwrap_or(0),
            priority: spec.priority.unwrap_or(0),
            labels: pod.metadata.labels.clone(),
            requests,
            nonzero_milli_cpu,
            nonzero_memory,
            node_selector: spec.node_selector.clone(),
            required_node_affinity: node_affinity.and_then(|n| n.required.clone()),
            preferred_node_affinity: node_affinity
                .map(|n| n.preferred.clone())
                .unwrap_or_default(),
            tolerations: spec.tolerations.clone(),
            host_ports,
            required_affinity: pod_affinity.map(|a| a.required.clone()).unwrap_or_default(),
            required_anti_affinity: pod_anti_affinity
                .map(|a| a.required.clone())
                .unwrap_or_default(),
            preferred_terms,
            spread: spec.topology_spread_constraints.clone(),
            images,
            best_effort,
            scheduler_name: spec.scheduler_name.clone(),
            never_preempts: spec.preemption_policy.as_deref() == Some(PREEMPT_NEVER),
            start_time: status.and_then(|s| s.start_time.as_ref()).map(|t| t.unix()),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            preempted: pod.metadata.deletion_timestamp.is_some()
                && status
                    .and_then(|s| s.condition(&PodConditionType::DisruptionTarget))
                    .is_some_and(|c| {
                        c.status == ConditionStatus::True && c.reason == PREEMPTION_BY_SCHEDULER
                    }),
            nominated_node: status
                .map(|s| s.nominated_node_name.clone())
                .unwrap_or_default(),
        }
    }

    /// `namespace/name`, the pod's key in the queue (one pending pod per name, as in the
    /// store).
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The pod's identity in the table: see [`pod_id`].
    pub fn id(&self) -> String {
        pod_id(&self.namespace, &self.name, &self.uid)
    }

    /// Hash of everything that decides where the pod may go and how nodes score for it.
    /// Name, uid, resourceVersion and priority are left out: they do not change placement.
    pub fn signature(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.namespace.hash(&mut h);
        self.labels.hash(&mut h);
        self.requests.hash(&mut h);
        self.nonzero_milli_cpu.hash(&mut h);
        self.nonzero_memory.hash(&mut h);
        self.node_selector.hash(&mut h);
        // The object model's affinity types are not `Hash`; their JSON, streamed into the
        // hasher, is a faithful key.
        hash_json(&mut h, &self.required_node_affinity);
        hash_json(&mut h, &self.preferred_node_affinity);
        hash_json(&mut h, &self.tolerations);
        self.host_ports.hash(&mut h);
        hash_json(&mut h, &self.required_affinity);
        hash_json(&mut h, &self.required_anti_affinity);
        hash_json(&mut h, &self.preferred_terms);
        hash_json(&mut h, &self.spread);
        self.images.hash(&mut h);
        self.best_effort.hash(&mut h);
        h.finish()
    }

    /// Whether the pod's placement depends on other pods (affinity, anti-affinity, spread).
    pub fn has_pod_terms(&self) -> bool {
        !self.required_affinity.is_empty()
            || !self.required_anti_affinity.is_empty()
            || !self.preferred_terms.is_empty()
            || !self.spread.is_empty()
    }

    /// Whether one of the tolerations tolerates `taint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        self.tolerations
            .iter()
            .any(|t| toleration_matches(t, taint))
    }
}

/// A pod's identity where two pods of one name can meet: its UID. A pod deleted and created
/// again under the same name is another pod, and the old one's placement (its Bind perhaps
/// still in flight) and events must not be taken for the new one's, as kube-scheduler's cache
/// keys pods by UID. A pod read from no store has no UID; `namespace/name` stands in (it
/// cannot clash with a UID, which has no `/`).
pub fn pod_id(namespace: &str, name: &str, uid: &str) -> String {
    if uid.is_empty() {
        format!("{namespace}/{name}")
    } else {
        uid.to_string()
    }
}

/// Feeds the JSON of `value` to `h` without building the string, then a separator.
fn hash_json<H: Hasher, T: serde::Serialize>(h: &mut H, value: &T) {
    struct Feed<'a, H>(&'a mut H);
    impl<H: Hasher> std::io::Write for Feed<'_, H> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.write(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // Writing into a hasher cannot fail; a value that does not serialise hashes as nothing.
    let _ = serde_json::to_writer(Feed(h), value);
    h.write_u8(0xff);
}

/// Kubernetes' toleration rule: the effect matches (empty matches all), and either the
/// operator is `Exists` (empty key: every key) or the key and value are equal.
pub fn toleration_matches(t: &Toleration, taint: &Taint) -> bool {
    t.tolerates(taint)
}

/// `busybox` → `docker.io/library/busybox:latest`, as image locality compares names.
pub fn normalize_image(image: &str) -> String {
    let mut name = image.to_string();
    let last = name.rsplit('/').next().unwrap_or("");
    if !last.contains(':') && !last.contains('@') {
        name.push_str(":latest");
    }
    let first = name.split('/').next().unwrap_or("");
    let has_registry =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    if has_registry {
        name
    } else if name.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    }
}

/// The scheduling-relevant view of one node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Spec taints plus the taints its conditions imply (not-ready, pressure), as the node
    /// lifecycle controller would add them.
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    pub allocatable: Resources,
    pub allocatable_pods: i64,
    /// `(normalised name, size in bytes)` of the images present.
    pub images: Vec<(String, i64)>,
}

fn condition_taint(key: &str) -> Taint {
    Taint {
        key: key.to_string(),
        value: String::new(),
        effect: TaintEffect::NoSchedule,
        time_added: None,
        other: Default::default(),
    }
}

impl NodeInfo {
    /// The node as its stored conditions and taints describe it: a node that is not Ready
    /// (False, Unknown or never reported) is not schedulable, as the condition taints
    /// Kubernetes' node lifecycle controller puts on it say, whether or not they are there
    /// yet.
    pub fn from_node(node: &Node) -> Self {
        let status = node.status.clone().unwrap_or_default();
        let alloc = if status.allocatable.is_empty() {
            &status.capacity
        } else {
            &status.allocatable
        };
        let get = |name: &str| -> i64 {
            alloc.get(name).map_or(0, |q| {
                if name == "cpu" {
                    q.milli_value()
                } else {
                    q.value()
                }
            })
        };
        let allocatable = Resources::from_list(get, alloc.keys());
        let allocatable_pods = alloc.get("pods").map_or(110, |q| q.value());
        let mut taints = node.spec.taints.clone();
        let mut add = |key: &str| {
            if !taints
                .iter()
                .any(|t| t.key == key && t.effect == TaintEffect::NoSchedule)
            {
                taints.push(condition_taint(key));
            }
        };
        match node.condition(&NodeConditionType::Ready).map(|c| c.status) {
            Some(ConditionStatus::True) => {}
            Some(ConditionStatus::Unknown) => add(TAINT_UNREACHABLE),
            _ => add(TAINT_NOT_READY),
        }
        for (cond, key) in [
            (
                NodeConditionType::MemoryPressure,
                "node.kubernetes.io/memory-pressure",
            ),
            (
                NodeConditionType::DiskPressure,
                "node.kubernetes.io/disk-pressure",
            ),
            (
                NodeConditionType::PIDPressure,
                "node.kubernetes.io/pid-pressure",
            ),
            (
                NodeConditionType::NetworkUnavailable,
                "node.kubernetes.io/network-unavailable",
            ),
        ] {
            if node
                .condition(&cond)
                .is_some_and(|c| c.status == ConditionStatus::True)
            {
                add(key);
            }
        }
        let images = status
            .images
            .iter()
            .flat_map(
                |ContainerImage {
                     names, size_bytes, ..
                 }| {
                    names.iter().map(move |n| (normalize_image(n), *size_bytes))
                },
            )
            .collect();
        NodeInfo {
            name: node.metadata.name.clone(),
            labels: node.metadata.labels.clone(),
            taints,
            unschedulable: node.spec.unschedulable.unwrap_or(false),
            allocatable,
            allocatable_pods,
            images,
        }
    }
}

/// Namespaces a pod-affinity term applies to: its own list, or the owning pod's namespace.
pub fn term_namespaces(term: &PodAffinityTerm, owner_namespace: &str) -> Vec<String> {
    if term.namespaces.is_empty() {
        vec![owner_namespace.to_string()]
    } else {
        let mut v = term.namespaces.clone();
        v.sort();
        v.dedup();
        v
    }
}

/// Whether a pod in `namespace` with `labels` is selected by a term owned by a pod in
/// `owner_namespace`. A term without a selector selects nothing, as in Kubernetes.
pub fn term_selects(
    selector: Option<&LabelSelector>,
    namespaces: &[String],
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    selector.is_some_and(|s| s.matches(labels)) && namespaces.iter().any(|n| n == namespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_normalise_like_the_runtime() {
        assert_eq!(
            normalize_image("busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(normalize_image("team/app:1"), "docker.io/team/app:1");
        assert_eq!(
            normalize_image("localhost/skiff/pause:1"),
            "localhost/skiff/pause:1"
        );
        assert_eq!(
            normalize_image("registry.example:5000/app"),
            "registry.example:5000/app:latest"
        );
    }

    #[test]
    fn signatures_ignore_identity_and_see_every_constraint() {
        let mut rng = crate::engine::Rng::new(7);
        let a = crate::synth::pod(0, 10, 10, crate::synth::Profile::Taints, &mut rng);
        let mut b = a.clone();
        b.metadata.name = "other".into();
        b.metadata.uid = "u2".into();
        b.metadata.resource_version = "99".into();
        let sig = |p: &Pod| PodInfo::from_pod(p).signature();
        assert_eq!(sig(&a), sig(&b));
        let mut c = a.clone();
        c.spec.tolerations.clear();
        assert_ne!(sig(&a), sig(&c));
        let mut d = a.clone();
        d.spec.node_selector.insert("disk".into(), "hdd".into());
        assert_ne!(sig(&a), sig(&d));
        let mut e = a.clone();
        e.metadata.labels.insert("app".into(), "x".into());
        assert_ne!(sig(&a), sig(&e));
    }

    #[test]
    fn toleration_rules() {
        let taint = Taint {
            key: "k".into(),
            value: "v".into(),
            effect: TaintEffect::NoSchedule,
            time_added: None,
            other: Default::default(),
        };
        let tol = |key: &str, op: &str, value: &str, effect: Option<TaintEffect>| Toleration {
            key: key.into(),
            operator: op.into(),
            value: value.into(),
            effect,
            toleration_seconds: None,
            other: Default::default(),
        };
        let no_schedule = Some(TaintEffect::NoSchedule);
        assert!(toleration_matches(&tol("k", "Equal", "v", None), &taint));
        assert!(toleration_matches(&tol("k", "", "v", no_schedule), &taint));
        assert!(!toleration_matches(&tol("k", "Equal", "w", None), &taint));
        assert!(toleration_matches(&tol("", "Exists", "", None), &taint));
        assert!(toleration_matches(
            &tol("k", "Exists", "", no_schedule),
            &taint
        ));
        assert!(!toleration_matches(
            &tol("k", "Exists", "", Some(TaintEffect::NoExecute)),
            &taint
        ));
    }
}
