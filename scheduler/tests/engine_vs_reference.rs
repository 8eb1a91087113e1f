//! The engine (table, interning, bitmaps, vector kernels, batches with incremental updates)
//! against the reference scheduler (plain loops over the objects): on random clusters and
//! workloads with every filter and score in play, both make the same decision for every pod —
//! same node, same score bit for bit, or both find no node — for the same seed; with the
//! dispatched kernels and with the scalar build alike.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use skiff_proto::Quantity;
use skiff_proto::api::node::{ContainerImage, NodeCondition, NodeStatus};
use skiff_proto::api::pod::{
    Affinity, Container, ContainerPort, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, PodAffinity, PodAffinityTerm, PreferredSchedulingTerm, ResourceRequirements,
    TopologySpreadConstraint, WeightedPodAffinityTerm,
};
use skiff_proto::api::{
    LabelSelector, Node, NodeConditionType, NodeSpec, ObjectMeta, Pod, PodSpec, Taint, TaintEffect,
    Toleration,
};
use skiff_scheduler::engine::{self, Outcome, Rng};
use skiff_scheduler::filter;
use skiff_scheduler::kernels::Kernels;
use skiff_scheduler::model::{NodeInfo, PodInfo};
use skiff_scheduler::reference::Cluster;
use skiff_scheduler::table::NodeTable;

fn q(s: &str) -> Quantity {
    Quantity::parse(s).expect("literal quantity")
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn sel(app: &str) -> LabelSelector {
    LabelSelector {
        match_labels: map(&[("app", app)]),
        ..Default::default()
    }
}

fn taint(key: &str, value: &str, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        value: value.into(),
        effect: effect.parse().expect("a taint effect"),
        time_added: None,
        other: Default::default(),
    }
}

fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: values.iter().map(|v| v.to_string()).collect(),
        other: Default::default(),
    }
}

prop_compose! {
    fn arb_node(i: usize)(
        cpu in prop::sample::select(vec!["1", "2", "4"]),
        mem in prop::sample::select(vec!["1Gi", "2Gi", "4Gi"]),
        pods in prop::sample::select(vec!["3", "5", "110"]),
        zone in prop::option::weighted(0.9, 0usize..3),
        disk in prop::option::of(prop::sample::select(vec!["ssd", "hdd"])),
        rack in 1usize..6,
        taints in prop::collection::vec(0usize..4, 0..3),
        unschedulable in prop::bool::weighted(0.1),
        ready in prop::bool::weighted(0.9),
        images in prop::collection::vec(0usize..2, 0..2),
    ) -> Node {
        let name = format!("n{i}");
        let mut labels = map(&[("kubernetes.io/hostname", &name), ("rack", &rack.to_string())]);
        if let Some(z) = zone { labels.insert("zone".into(), format!("z{z}")); }
        if let Some(d) = disk { labels.insert("disk".into(), d.into()); }
        let all = [
            taint("dedicated", "batch", "NoSchedule"),
            taint("spot", "true", "PreferNoSchedule"),
            taint("gpu", "yes", "NoExecute"),
            taint("slow", "", "PreferNoSchedule"),
        ];
        let mut ts: Vec<Taint> = taints.iter().map(|t| all[*t].clone()).collect();
        ts.dedup();
        let resources: BTreeMap<String, Quantity> =
            [("cpu".to_string(), q(cpu)), ("memory".to_string(), q(mem)), ("pods".to_string(), q(pods)), ("example.com/gpu".to_string(), q("1"))]
                .into_iter().collect();
        let imgs = [("docker.io/library/a:1", 300 << 20), ("docker.io/library/b:1", 60 << 20)];
        Node {
            api_version: "v1".into(),
            kind: "Node".into(),
            metadata: ObjectMeta { name, labels, ..Default::default() },
            spec: NodeSpec { unschedulable: Some(unschedulable), taints: ts, ..Default::default() },
            status: Some(NodeStatus {
                capacity: resources.clone(),
                allocatable: resources,
                conditions: vec![NodeCondition::new(NodeConditionType::Ready, ready.into())],
                images: images.iter().map(|i| ContainerImage { names: vec![imgs[*i].0.into()], size_bytes: imgs[*i].1, other: Default::default() }).collect(),
                ..Default::default()
            }),
            other: Default::default(),
        }
    }
}

prop_compose! {
    fn arb_template()(
        cpu in prop::sample::select(vec!["", "100m", "500m", "1500m"]),
        mem in prop::sample::select(vec!["", "256Mi", "1Gi"]),
        gpu in prop::bool::weighted(0.1),
        port in prop::bool::weighted(0.15),
        app in prop::sample::select(vec!["a", "b"]),
        node_selector in prop::bool::weighted(0.2),
        required in prop::option::weighted(0.3, 0usize..4),
        preferred in prop::bool::weighted(0.3),
        tolerate in prop::collection::vec(0usize..4, 0..3),
        pod_affinity in prop::option::weighted(0.2, (0usize..2, any::<bool>())),
        pod_anti in prop::option::weighted(0.3, (0usize..2, any::<bool>())),
        pref_terms in prop::collection::vec((-20i32..20, 0usize..2, any::<bool>()), 0..2),
        spread in prop::option::weighted(0.3, (1i32..3, 0usize..2, any::<bool>(), any::<bool>())),
        image in prop::option::of(0usize..2),
    ) -> Pod {
        let topo = |t: usize| if t == 0 { "zone" } else { "kubernetes.io/hostname" }.to_string();
        let other = |same: bool| if same { app } else if app == "a" { "b" } else { "a" };
        let mut requests = BTreeMap::new();
        if !cpu.is_empty() { requests.insert("cpu".to_string(), q(cpu)); }
        if !mem.is_empty() { requests.insert("memory".to_string(), q(mem)); }
        if gpu { requests.insert("example.com/gpu".to_string(), q("1")); }
        let tols = [
            Toleration { key: "dedicated".into(), operator: "Equal".into(), value: "batch".into(), effect: Some(TaintEffect::NoSchedule), toleration_seconds: None, other: Default::default() },
            Toleration { key: "spot".into(), operator: "Exists".into(), ..Default::default() },
            Toleration { key: "node.kubernetes.io/not-ready".into(), operator: "Exists".into(), ..Default::default() },
            Toleration { key: "node.kubernetes.io/unschedulable".into(), operator: "Exists".into(), effect: Some(TaintEffect::NoSchedule), ..Default::default() },
        ];
        let required = required.map(|r| NodeSelector { node_selector_terms: match r {
            0 => vec![NodeSelectorTerm { match_expressions: vec![req("rack", "Gt", &["2"])], match_fields: vec![], other: Default::default() }],
            1 => vec![NodeSelectorTerm { match_expressions: vec![req("zone", "In", &["z0", "z1"])], match_fields: vec![], other: Default::default() },
                      NodeSelectorTerm { match_expressions: vec![req("disk", "Exists", &[])], match_fields: vec![], other: Default::default() }],
            2 => vec![NodeSelectorTerm { match_expressions: vec![req("disk", "DoesNotExist", &[]), req("rack", "Lt", &["4"])], match_fields: vec![], other: Default::default() }],
            _ => vec![NodeSelectorTerm { match_expressions: vec![req("zone", "NotIn", &["z2"])], match_fields: vec![req("metadata.name", "NotIn", &["n0"])], other: Default::default() }],
        }, other: Default::default() });
        let term = |(t, same): (usize, bool)| PodAffinityTerm { label_selector: Some(sel(other(same))), namespaces: vec![], topology_key: topo(t), other: Default::default() };
        let affinity = Affinity {
            node_affinity: Some(NodeAffinity {
                required,
                preferred: if preferred { vec![PreferredSchedulingTerm { weight: 7, preference: NodeSelectorTerm { match_expressions: vec![req("disk", "In", &["ssd"])], match_fields: vec![], other: Default::default() }, other: Default::default() }] } else { vec![] },
                other: Default::default(),
            }),
            pod_affinity: Some(PodAffinity {
                required: pod_affinity.map(term).into_iter().collect(),
                preferred: pref_terms.iter().filter(|p| p.0 > 0).map(|p| WeightedPodAffinityTerm { weight: p.0, pod_affinity_term: term((p.1, p.2)), other: Default::default() }).collect(),
                other: Default::default(),
            }),
            pod_anti_affinity: Some(PodAffinity {
                required: pod_anti.map(term).into_iter().collect(),
                preferred: pref_terms.iter().filter(|p| p.0 < 0).map(|p| WeightedPodAffinityTerm { weight: -p.0, pod_affinity_term: term((p.1, p.2)), other: Default::default() }).collect(),
                other: Default::default(),
            }),
            other: Default::default(),
        };
        Pod {
            api_version: "v1".into(),
            kind: "Pod".into(),
            metadata: ObjectMeta { namespace: "default".into(), labels: map(&[("app", app)]), ..Default::default() },
            spec: PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    image: image.map_or("busybox".to_string(), |i| ["a:1", "b:1"][i].to_string()),
                    ports: if port { vec![ContainerPort { container_port: 80, host_port: Some(8080), ..Default::default() }] } else { vec![] },
                    resources: ResourceRequirements { requests, limits: BTreeMap::new(), other: Default::default() },
                    ..Default::default()
                }],
                node_selector: if node_selector { map(&[("disk", "ssd")]) } else { BTreeMap::new() },
                affinity: Some(affinity),
                tolerations: tolerate.iter().map(|t| tols[*t].clone()).collect(),
                topology_spread_constraints: spread.map(|(skew, t, hard, same)| vec![TopologySpreadConstraint {
                    max_skew: skew,
                    topology_key: topo(t),
                    when_unsatisfiable: if hard { "DoNotSchedule" } else { "ScheduleAnyway" }.into(),
                    label_selector: Some(sel(other(same))),
                    min_domains: None,
                    other: Default::default(),
                }]).unwrap_or_default(),
                ..Default::default()
            },
            status: None,
            other: Default::default(),
        }
    }
}

/// Nodes, pod templates, (template, count) steps, seed.
type Scenario = (Vec<Node>, Vec<Pod>, Vec<(usize, usize)>, u64);

fn scenario() -> impl Strategy<Value = Scenario> {
    (1usize..9)
        .prop_flat_map(|n| {
            (
                (0..n).map(arb_node).collect::<Vec<_>>(),
                prop::collection::vec(arb_template(), 1..5),
                Just(n),
            )
        })
        .prop_flat_map(|(nodes, templates, _)| {
            let t = templates.len();
            (
                Just(nodes),
                Just(templates),
                prop::collection::vec((0..t, 1usize..6), 1..8),
                any::<u64>(),
            )
        })
}

fn run(nodes: &[Node], templates: &[Pod], steps: &[(usize, usize)], seed: u64, k: &Kernels) {
    let mut table = NodeTable::new();
    let mut reference = Cluster::default();
    for n in nodes {
        table.upsert_node(NodeInfo::from_node(n));
        reference.nodes.push(NodeInfo::from_node(n));
    }
    let mut rng_engine = Rng::new(seed);
    let mut rng_reference = Rng::new(seed);
    let mut serial = 0;
    for (step, (t, count)) in steps.iter().enumerate() {
        let pods: Vec<Arc<PodInfo>> = (0..*count)
            .map(|_| {
                serial += 1;
                let mut p = templates[*t].clone();
                p.metadata.name = format!("p{serial}");
                Arc::new(PodInfo::from_pod(&p))
            })
            .collect();
        filter::register_terms(&mut table, &pods[0]);
        let outcomes = engine::schedule_batch(&table, &pods[0], pods.len(), k, &mut rng_engine);
        for (i, (pod, outcome)) in pods.iter().zip(&outcomes).enumerate() {
            let expected = reference.schedule(pod.clone(), &mut rng_reference);
            match (outcome, expected) {
                (Outcome::Placed { row, score }, Some((r, s))) => {
                    assert_eq!(
                        (*row, score.to_bits()),
                        (r, s.to_bits()),
                        "step {step} pod {i}: engine chose n{row} ({score}), reference n{r} ({s})"
                    );
                    table
                        .add_pod(pod.clone(), &table.names[*row].clone(), true)
                        .expect("a new pod");
                }
                (Outcome::Unschedulable(d), None) => {
                    assert!(d.nodes == nodes.len(), "{d}");
                }
                (o, e) => panic!("step {step} pod {i}: engine {o:?}, reference {e:?}"),
            }
        }
    }
}

/// Hundreds of nodes, so the engine's best-row index spans several blocks.
fn wide_scenario() -> impl Strategy<Value = Scenario> {
    (257usize..700)
        .prop_flat_map(|n| {
            (
                (0..n).map(arb_node).collect::<Vec<_>>(),
                prop::collection::vec(arb_template(), 1..3),
            )
        })
        .prop_flat_map(|(nodes, templates)| {
            let t = templates.len();
            (
                Just(nodes),
                Just(templates),
                prop::collection::vec((0..t, 1usize..20), 1..4),
                any::<u64>(),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn wide_clusters_decide_like_the_reference((nodes, templates, steps, seed) in wide_scenario()) {
        run(&nodes, &templates, &steps, seed, &Kernels::auto());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn engine_decides_like_the_reference((nodes, templates, steps, seed) in scenario()) {
        run(&nodes, &templates, &steps, seed, &Kernels::auto());
    }

    #[test]
    fn scalar_kernels_decide_like_the_reference((nodes, templates, steps, seed) in scenario()) {
        run(&nodes, &templates, &steps, seed, &Kernels::scalar());
    }
}

/// The diagnosis counts every node once per failing filter, in kube-scheduler's words.
#[test]
fn unschedulable_pods_get_kube_style_reasons() {
    let mut table = NodeTable::new();
    let mut nodes = Vec::new();
    for i in 0..5 {
        let mut n = skiff_scheduler::synth::node(i, skiff_scheduler::synth::Profile::Basic);
        if i < 2 {
            n.spec
                .taints
                .push(taint("dedicated", "batch", "NoSchedule"));
        }
        nodes.push(n);
    }
    for n in &nodes {
        table.upsert_node(NodeInfo::from_node(n));
    }
    let mut pod = skiff_scheduler::synth::pod(
        0,
        1,
        5,
        skiff_scheduler::synth::Profile::Basic,
        &mut Rng::new(1),
    );
    pod.spec.containers[0]
        .resources
        .requests
        .insert("cpu".into(), q("8"));
    let info = PodInfo::from_pod(&pod);
    let out = engine::schedule_batch(&table, &info, 1, &Kernels::auto(), &mut Rng::new(1));
    let Outcome::Unschedulable(d) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!(
        d.to_string(),
        "0/5 nodes are available: 3 Insufficient cpu, 2 node(s) had untolerated taint {dedicated: batch}."
    );
}
