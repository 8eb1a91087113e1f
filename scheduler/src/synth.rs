//! Synthetic clusters and workloads from a seed, shaped like kube-scheduler's scheduler_perf
//! cases: nodes of 4 CPU / 32 Gi / 110 pods spread over zones, pods of 100m / 500 Mi with
//! the constraints of each profile. Real `Node` and `Pod` objects, so the same workload can
//! go through the store (`bench scheduler --e2e`) or straight into the engine.

use std::collections::BTreeMap;
use std::str::FromStr;

use skiff_proto::Quantity;
use skiff_proto::api::node::{NodeCondition, NodeStatus};
use skiff_proto::api::pod::{
    Affinity, Container, NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, PodAffinity,
    PodAffinityTerm, PreferredSchedulingTerm, ResourceRequirements, TopologySpreadConstraint,
    WeightedPodAffinityTerm,
};
use skiff_proto::api::{
    ConditionStatus, LabelSelector, Node, NodeConditionType, NodeSpec, ObjectMeta, Pod, PodSpec,
    RestartPolicy, Taint, TaintEffect, Toleration,
};

use crate::engine::Rng;

/// The benchmark's workload shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// Requests only.
    Basic,
    /// Required pod affinity to a group in the same zone, preferred node affinity.
    Affinity,
    /// Required pod anti-affinity per hostname within a group (≤ 1 pod of a group per node).
    AntiAffinity,
    /// Zone spread (DoNotSchedule, maxSkew 1) plus hostname spread (ScheduleAnyway).
    Spread,
    /// A third of the nodes tainted NoSchedule, a third PreferNoSchedule; half the pods
    /// tolerate the NoSchedule taint.
    Taints,
    /// All of the above, and varied requests.
    Mixed,
}

impl FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "basic" => Profile::Basic,
            "affinity" => Profile::Affinity,
            "anti-affinity" => Profile::AntiAffinity,
            "spread" => Profile::Spread,
            "taints" => Profile::Taints,
            "mixed" => Profile::Mixed,
            _ => {
                return Err(format!(
                    "unknown profile {s:?}: expected basic, affinity, anti-affinity, spread, taints or mixed"
                ));
            }
        })
    }
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::Basic => "basic",
            Profile::Affinity => "affinity",
            Profile::AntiAffinity => "anti-affinity",
            Profile::Spread => "spread",
            Profile::Taints => "taints",
            Profile::Mixed => "mixed",
        }
    }
}

/// Zones the synthetic nodes are spread over.
pub const ZONES: usize = 10;

fn q(s: &str) -> Quantity {
    Quantity::parse(s).expect("invariant: literal quantities parse")
}

fn labels(pairs: &[(&str, String)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// Node `i` of a synthetic cluster: Ready, 4 CPU / 32 Gi / 110 pods, hostname and zone labels.
pub fn node(i: usize, profile: Profile) -> Node {
    let name = format!("node-{i:05}");
    let mut taints = Vec::new();
    if matches!(profile, Profile::Taints | Profile::Mixed) {
        match i % 3 {
            0 => taints.push(Taint {
                key: "dedicated".into(),
                value: "batch".into(),
                effect: TaintEffect::NoSchedule,
                time_added: None,
                other: Default::default(),
            }),
            1 => taints.push(Taint {
                key: "spot".into(),
                value: "true".into(),
                effect: TaintEffect::PreferNoSchedule,
                time_added: None,
                other: Default::default(),
            }),
            _ => {}
        }
    }
    let resources: BTreeMap<String, Quantity> = [
        ("cpu".to_string(), q("4")),
        ("memory".to_string(), q("32Gi")),
        ("pods".to_string(), q("110")),
    ]
    .into_iter()
    .collect();
    Node {
        api_version: "v1".into(),
        kind: "Node".into(),
        metadata: ObjectMeta {
            name: name.clone(),
            labels: labels(&[
                ("kubernetes.io/hostname", name),
                ("topology.kubernetes.io/zone", format!("zone-{}", i % ZONES)),
                (
                    "disk",
                    if i.is_multiple_of(2) { "ssd" } else { "hdd" }.to_string(),
                ),
            ]),
            ..ObjectMeta::default()
        },
        spec: NodeSpec {
            taints,
            ..NodeSpec::default()
        },
        status: Some(NodeStatus {
            capacity: resources.clone(),
            allocatable: resources,
            conditions: vec![NodeCondition::new(
                NodeConditionType::Ready,
                ConditionStatus::True,
            )],
            ..NodeStatus::default()
        }),
        other: Default::default(),
    }
}

fn selector(key: &str, value: &str) -> LabelSelector {
    LabelSelector {
        match_labels: labels(&[(key, value.to_string())]),
        ..LabelSelector::default()
    }
}

/// Pod `i` of a synthetic workload of `pods` pods over `nodes` nodes.
pub fn pod(i: usize, pods: usize, nodes: usize, profile: Profile, rng: &mut Rng) -> Pod {
    let profile = if profile == Profile::Mixed {
        [
            Profile::Basic,
            Profile::Affinity,
            Profile::AntiAffinity,
            Profile::Spread,
            Profile::Taints,
        ][rng.below(5)]
    } else {
        profile
    };
    let (cpu, mem) = match rng.below(4) {
        _ if profile == Profile::Basic => ("100m", "500Mi"),
        0 => ("100m", "500Mi"),
        1 => ("250m", "1Gi"),
        2 => ("50m", "256Mi"),
        _ => ("100m", "500Mi"),
    };
    let mut meta_labels = BTreeMap::new();
    let mut spec = PodSpec {
        containers: vec![Container {
            name: "app".into(),
            image: "localhost/skiff/busybox:1".into(),
            resources: ResourceRequirements {
                requests: [("cpu".to_string(), q(cpu)), ("memory".to_string(), q(mem))]
                    .into_iter()
                    .collect(),
                limits: BTreeMap::new(),
                other: Default::default(),
            },
            ..Container::default()
        }],
        restart_policy: Some(RestartPolicy::Always),
        ..PodSpec::default()
    };
    match profile {
        Profile::Basic | Profile::Mixed => {}
        Profile::Affinity => {
            // Groups of pods that must share a zone with their group; prefer ssd nodes.
            let group = format!("g{}", i % 50);
            meta_labels.insert("group".to_string(), group.clone());
            spec.affinity = Some(Affinity {
                pod_affinity: Some(PodAffinity {
                    required: vec![PodAffinityTerm {
                        label_selector: Some(selector("group", &group)),
                        namespaces: Vec::new(),
                        topology_key: "topology.kubernetes.io/zone".into(),
                        other: Default::default(),
                    }],
                    preferred: Vec::new(),
                    other: Default::default(),
                }),
                node_affinity: Some(NodeAffinity {
                    required: None,
                    preferred: vec![PreferredSchedulingTerm {
                        weight: 10,
                        preference: NodeSelectorTerm {
                            match_expressions: vec![NodeSelectorRequirement {
                                key: "disk".into(),
                                operator: "In".into(),
                                values: vec!["ssd".into()],
                                other: Default::default(),
                            }],
                            match_fields: Vec::new(),
                            other: Default::default(),
                        },
                        other: Default::default(),
                    }],
                    other: Default::default(),
                }),
                pod_anti_affinity: None,
                other: Default::default(),
            });
        }
        Profile::AntiAffinity => {
            // At most one pod of a group per node: enough groups that every pod fits.
            let groups = pods.div_ceil(nodes.max(1)).max(1) * 2;
            let group = format!("a{}", i % groups);
            meta_labels.insert("anti".to_string(), group.clone());
            spec.affinity = Some(Affinity {
                pod_anti_affinity: Some(PodAffinity {
                    required: vec![PodAffinityTerm {
                        label_selector: Some(selector("anti", &group)),
                        namespaces: Vec::new(),
                        topology_key: "kubernetes.io/hostname".into(),
                        other: Default::default(),
                    }],
                    preferred: vec![WeightedPodAffinityTerm {
                        weight: 1,
                        pod_affinity_term: PodAffinityTerm {
                            label_selector: Some(selector("anti", &group)),
                            namespaces: Vec::new(),
                            topology_key: "topology.kubernetes.io/zone".into(),
                            other: Default::default(),
                        },
                        other: Default::default(),
                    }],
                    other: Default::default(),
                }),
                ..Affinity::default()
            });
        }
        Profile::Spread => {
            let app = format!("s{}", i % 20);
            meta_labels.insert("app".to_string(), app.clone());
            spec.topology_spread_constraints = vec![
                TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: "topology.kubernetes.io/zone".into(),
                    when_unsatisfiable: "DoNotSchedule".into(),
                    label_selector: Some(selector("app", &app)),
                    min_domains: None,
                    other: Default::default(),
                },
                TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: "kubernetes.io/hostname".into(),
                    when_unsatisfiable: "ScheduleAnyway".into(),
                    label_selector: Some(selector("app", &app)),
                    min_domains: None,
                    other: Default::default(),
                },
            ];
        }
        Profile::Taints => {
            if i.is_multiple_of(2) {
                spec.tolerations.push(Toleration {
                    key: "dedicated".into(),
                    operator: "Equal".into(),
                    value: "batch".into(),
                    effect: Some(TaintEffect::NoSchedule),
                    toleration_seconds: None,
                    other: Default::default(),
                });
            }
            spec.node_selector = if i.is_multiple_of(7) {
                labels(&[("disk", "ssd".to_string())])
            } else {
                BTreeMap::new()
            };
        }
    }
    Pod {
        api_version: "v1".into(),
        kind: "Pod".into(),
        metadata: ObjectMeta {
            name: format!("pod-{i:06}"),
            namespace: "bench".into(),
            uid: format!("uid-{i}"),
            labels: meta_labels,
            ..ObjectMeta::default()
        },
        spec,
        status: None,
        other: Default::default(),
    }
}

/// A whole synthetic cluster and workload.
pub fn workload(nodes: usize, pods: usize, profile: Profile, seed: u64) -> (Vec<Node>, Vec<Pod>) {
    let mut rng = Rng::new(seed);
    let n = (0..nodes).map(|i| node(i, profile)).collect();
    let p = (0..pods)
        .map(|i| pod(i, pods, nodes, profile, &mut rng))
        .collect();
    (n, p)
}
