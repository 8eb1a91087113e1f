//! The node table as the informer keeps it: after any sequence of bound-pod events (binds,
//! relabels, status updates, deletes, a pod re-created under the same name with a new UID and
//! seen only as an update, as a relist shows it), the table counts exactly what a table built
//! from the pods that exist at the end counts — resources, pod-affinity terms, anti-affinity
//! terms and spread selectors alike, on every node and in every topology domain. So
//! inter-pod affinity, anti-affinity and topology spread never act on a label a pod no longer
//! has, nor on a pod that is gone.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use skiff_proto::api::pod::{Affinity, PodAffinity, PodAffinityTerm, TopologySpreadConstraint};
use skiff_proto::api::{LabelSelector, Node, Object, Pod};
use skiff_proto::client::Event;
use skiff_scheduler::engine::{self, Outcome, Rng};
use skiff_scheduler::filter;
use skiff_scheduler::kernels::Kernels;
use skiff_scheduler::model::PodInfo;
use skiff_scheduler::parallel::Core;
use skiff_scheduler::service::Handlers;
use skiff_scheduler::synth::{self, Profile};
use skiff_scheduler::table::NodeTable;

const NODES: usize = 3;
const APPS: [&str; 3] = ["db", "web", "cache"];
const ZONE: &str = "topology.kubernetes.io/zone";
const HOST: &str = "kubernetes.io/hostname";

/// Three nodes over two zones (`zone-0` holds two).
fn nodes() -> Vec<Node> {
    (0..NODES)
        .map(|i| {
            let mut n = synth::node(i, Profile::Basic);
            n.metadata
                .labels
                .insert(ZONE.into(), format!("zone-{}", i % 2));
            n
        })
        .collect()
}

fn selects(app: &str) -> LabelSelector {
    LabelSelector {
        match_labels: [("app".to_string(), app.to_string())].into_iter().collect(),
        ..LabelSelector::default()
    }
}

fn term(app: &str, topology_key: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(selects(app)),
        namespaces: Vec::new(),
        topology_key: topology_key.into(),
        other: Default::default(),
    }
}

/// A 100m pod in `bench`; `app` as its label, if any.
fn pod(name: &str, uid: &str, app: Option<&str>) -> Pod {
    let mut p = synth::pod(0, 1, 1, Profile::Basic, &mut Rng::new(1));
    p.metadata.name = name.into();
    p.metadata.uid = uid.into();
    p.metadata.labels = app
        .map(|a| [("app".to_string(), a.to_string())].into_iter().collect())
        .unwrap_or_default();
    p
}

/// A pod that may not share a node with an `app=db` pod.
fn anti_db(name: &str) -> Pod {
    let mut p = pod(name, &format!("uid-{name}"), Some("probe"));
    p.spec.affinity = Some(Affinity {
        pod_anti_affinity: Some(PodAffinity {
            required: vec![term("db", HOST)],
            preferred: Vec::new(),
            other: Default::default(),
        }),
        ..Affinity::default()
    });
    p
}

/// A pending pod whose filters read every kind of counted term: required anti-affinity to
/// `app=db` per node, required affinity to `app=web` per zone, a zone spread of `app=web`.
fn probe() -> PodInfo {
    let mut p = anti_db("probe");
    let affinity = p.spec.affinity.as_mut().expect("set above");
    affinity.pod_affinity = Some(PodAffinity {
        required: vec![term("web", ZONE)],
        preferred: Vec::new(),
        other: Default::default(),
    });
    p.spec.topology_spread_constraints = vec![TopologySpreadConstraint {
        max_skew: 1,
        topology_key: ZONE.into(),
        when_unsatisfiable: "DoNotSchedule".into(),
        label_selector: Some(selects("web")),
        min_domains: None,
        other: Default::default(),
    }];
    PodInfo::from_pod(&p)
}

fn core_with_nodes() -> (Arc<Core>, Handlers) {
    let core = Arc::new(Core::new(Kernels::auto()));
    let handlers = Handlers::new(core.clone(), "");
    for n in nodes() {
        handlers.on_node(&Event::Added(Object::Node(n)));
    }
    (core, handlers)
}

#[derive(Debug, Clone)]
enum Op {
    /// Bound to a node: a new pod if there is none of this name, else a relabel.
    Bind {
        pod: usize,
        node: usize,
        app: usize,
    },
    Relabel {
        pod: usize,
        app: Option<usize>,
    },
    /// A status-only update.
    Status {
        pod: usize,
    },
    Delete {
        pod: usize,
    },
    /// Deleted and created again, bound anywhere, seen only as an update of the name.
    Recreate {
        pod: usize,
        node: usize,
        app: usize,
    },
    /// A node goes (its pods stay bound to its name) or, if gone, comes back.
    NodeToggle {
        node: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let pod = 0usize..4;
    prop_oneof![
        (pod.clone(), 0..NODES, 0..APPS.len()).prop_map(|(pod, node, app)| Op::Bind {
            pod,
            node,
            app
        }),
        (pod.clone(), prop::option::of(0..APPS.len()))
            .prop_map(|(pod, app)| Op::Relabel { pod, app }),
        pod.clone().prop_map(|pod| Op::Status { pod }),
        pod.clone().prop_map(|pod| Op::Delete { pod }),
        (pod, 0..NODES, 0..APPS.len()).prop_map(|(pod, node, app)| Op::Recreate { pod, node, app }),
        (0..NODES).prop_map(|node| Op::NodeToggle { node }),
    ]
}

/// Applies `ops` through the handlers; returns the pods that exist at the end.
/// Every node that went is back at the end.
fn apply(handlers: &Handlers, ops: &[Op]) -> BTreeMap<usize, Pod> {
    let node_objs = nodes();
    let node_names: Vec<String> = node_objs.iter().map(|n| n.metadata.name.clone()).collect();
    let mut gone = std::collections::BTreeSet::new();
    let mut live: BTreeMap<usize, Pod> = BTreeMap::new();
    let mut uids = 0;
    let fresh = |i: usize, node: usize, app: usize, uids: &mut i32| {
        *uids += 1;
        // Even pods own an anti-affinity term, so the terms pods own are counted too.
        let mut p = if i.is_multiple_of(2) {
            anti_db(&format!("p{i}"))
        } else {
            pod(&format!("p{i}"), "", None)
        };
        p.metadata.uid = format!("p{i}-{uids}");
        p.metadata.labels.insert("app".into(), APPS[app].into());
        p.spec.node_name = node_names[node].clone();
        p
    };
    for (revision, op) in (1i64..).zip(ops) {
        let event = match op.clone() {
            Op::Bind { pod, node, app } => match live.get_mut(&pod) {
                Some(p) => {
                    p.metadata.labels.insert("app".into(), APPS[app].into());
                    Event::Modified(Object::Pod(p.clone()))
                }
                None => {
                    let p = fresh(pod, node, app, &mut uids);
                    live.insert(pod, p.clone());
                    Event::Added(Object::Pod(p))
                }
            },
            Op::Relabel { pod, app } => {
                let Some(p) = live.get_mut(&pod) else {
                    continue;
                };
                match app {
                    Some(a) => p.metadata.labels.insert("app".into(), APPS[a].into()),
                    None => p.metadata.labels.remove("app"),
                };
                Event::Modified(Object::Pod(p.clone()))
            }
            Op::Status { pod } => match live.get(&pod) {
                Some(p) => Event::Modified(Object::Pod(p.clone())),
                None => continue,
            },
            Op::Delete { pod } => match live.remove(&pod) {
                Some(p) => Event::Deleted(Object::Pod(p)),
                None => continue,
            },
            Op::NodeToggle { node } => {
                let n = Object::Node(node_objs[node].clone());
                if gone.remove(&node) {
                    handlers.on_node(&Event::Added(n));
                } else {
                    gone.insert(node);
                    handlers.on_node(&Event::Deleted(n));
                }
                continue;
            }
            Op::Recreate { pod, node, app } => {
                let p = fresh(pod, node, app, &mut uids);
                let event = if live.contains_key(&pod) {
                    Event::Modified(Object::Pod(p.clone()))
                } else {
                    Event::Added(Object::Pod(p.clone()))
                };
                live.insert(pod, p);
                event
            }
        };
        let stamp = |o: &mut Object| {
            if let Object::Pod(p) = o {
                p.metadata.resource_version = revision.to_string();
            }
        };
        let event = match event {
            Event::Added(mut o) => {
                stamp(&mut o);
                Event::Added(o)
            }
            Event::Modified(mut o) => {
                stamp(&mut o);
                Event::Modified(o)
            }
            other => other,
        };
        handlers.on_pod(&event);
    }
    for node in gone {
        handlers.on_node(&Event::Added(Object::Node(node_objs[node].clone())));
    }
    live
}

/// Every count `actual` keeps equals the one `expected` keeps; terms only one of them has
/// registered count nothing.
///
/// Rows are compared by node name: a node that went and came back has another row.
fn same_counts(actual: &NodeTable, expected: &NodeTable) {
    let mut names = actual.names.clone();
    names.sort();
    let mut expected_names = expected.names.clone();
    expected_names.sort();
    assert_eq!(names, expected_names);
    // `expected`'s row of each of `actual`'s rows.
    let rows: Vec<usize> = (0..actual.len())
        .map(|r| expected.row(&actual.names[r]).expect("the same nodes"))
        .collect();
    let by_name = |v: &[i64]| -> Vec<i64> { rows.iter().map(|&r| v[r]).collect() };
    assert_eq!(
        actual.req_cpu,
        by_name(&expected.req_cpu),
        "cpu requested per node"
    );
    assert_eq!(
        actual.req_pods,
        by_name(&expected.req_pods),
        "pods per node"
    );
    assert_eq!(actual.pod_count(), expected.pod_count(), "pods known");
    for (this, other, side) in [(actual, expected, "actual"), (expected, actual, "expected")] {
        for t in &this.terms {
            let domains = t.by_domain.len();
            match other.find_term(&t.key) {
                Some(id) => {
                    let o = &other.terms[id];
                    let others: Vec<u32> = (0..this.len())
                        .map(|r| o.per_node[other.row(&this.names[r]).expect("the same nodes")])
                        .collect();
                    assert_eq!(t.per_node, others, "{side} {:?} per node", t.key);
                    assert_eq!(t.total, o.total, "{side} {:?} in all", t.key);
                    for d in 0..domains.max(o.by_domain.len()) as u32 {
                        assert_eq!(
                            t.in_domain(d),
                            o.in_domain(d),
                            "{side} {:?} in domain {d}",
                            t.key
                        );
                    }
                }
                None => assert_eq!(t.total, 0, "{side} {:?} counts pods", t.key),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn bound_pod_events_leave_the_counts_of_the_pods_that_exist(
        ops in prop::collection::vec(op(), 1..24)
    ) {
        let probe = probe();
        let (core, handlers) = core_with_nodes();
        // Terms registered first, so every later event must move their counts.
        filter::register_terms(&mut core.table.write(), &probe);
        let live = apply(&handlers, &ops);
        // And terms registered after the events: counted over the pods placed then.
        let late = PodInfo::from_pod(&{
            let mut p = anti_db("late");
            p.spec.affinity = Some(Affinity {
                pod_anti_affinity: Some(PodAffinity {
                    required: vec![term("cache", ZONE), term("web", HOST)],
                    preferred: Vec::new(),
                    other: Default::default(),
                }),
                ..Affinity::default()
            });
            p
        });
        filter::register_terms(&mut core.table.write(), &late);

        let (fresh, fresh_handlers) = core_with_nodes();
        filter::register_terms(&mut fresh.table.write(), &probe);
        for p in live.into_values() {
            fresh_handlers.on_pod(&Event::Added(Object::Pod(p)));
        }
        filter::register_terms(&mut fresh.table.write(), &late);
        same_counts(&core.table.read(), &fresh.table.read());
    }
}

/// One node, one `app=db` pod bound to it: a pod anti-affine to `app=db` fits only once
/// that pod has been relabelled, and fits no more once it is relabelled back.
#[test]
fn a_relabelled_bound_pod_stops_and_starts_blocking_anti_affinity() {
    let core = Arc::new(Core::new(Kernels::auto()));
    let handlers = Handlers::new(core.clone(), "");
    let node = synth::node(0, Profile::Basic);
    handlers.on_node(&Event::Added(Object::Node(node.clone())));
    let mut db = pod("db-0", "uid-db-0", Some("db"));
    db.spec.node_name = node.metadata.name.clone();
    db.metadata.resource_version = "1".into();
    handlers.on_pod(&Event::Added(Object::Pod(db.clone())));

    let incoming = Arc::new(PodInfo::from_pod(&anti_db("incoming")));
    let fits = || {
        let mut table = core.table.write();
        filter::register_terms(&mut table, &incoming);
        let outcome =
            engine::schedule_batch(&table, &incoming, 1, &Kernels::auto(), &mut Rng::new(1));
        matches!(outcome[..], [Outcome::Placed { .. }])
    };
    assert!(!fits(), "an app=db pod is on the only node");

    db.metadata.labels.insert("app".into(), "web".into());
    db.metadata.resource_version = "2".into();
    handlers.on_pod(&Event::Modified(Object::Pod(db.clone())));
    assert!(fits(), "the pod on the node is app=web now");

    db.metadata.labels.insert("app".into(), "db".into());
    db.metadata.resource_version = "3".into();
    handlers.on_pod(&Event::Modified(Object::Pod(db)));
    assert!(!fits(), "the pod on the node is app=db again");
}

/// Two pods that hold one host port on a node (bound by hand, or on different host
/// addresses): the port stays taken until both are gone.
#[test]
fn a_host_port_held_twice_stays_taken_until_both_holders_go() {
    let core = Arc::new(Core::new(Kernels::auto()));
    let handlers = Handlers::new(core.clone(), "");
    let node = synth::node(0, Profile::Basic);
    handlers.on_node(&Event::Added(Object::Node(node.clone())));
    let with_port = |name: &str| {
        let mut p = pod(name, &format!("uid-{name}"), None);
        p.spec.containers[0].ports = vec![
            serde_json::from_value(serde_json::json!({"containerPort": 80, "hostPort": 8080}))
                .expect("port"),
        ];
        p
    };
    let mut held = Vec::new();
    for name in ["a", "b"] {
        let mut p = with_port(name);
        p.spec.node_name = node.metadata.name.clone();
        p.metadata.resource_version = "1".into();
        handlers.on_pod(&Event::Added(Object::Pod(p.clone())));
        held.push(p);
    }
    let incoming = Arc::new(PodInfo::from_pod(&with_port("incoming")));
    let fits = || {
        let table = core.table.read();
        let outcome =
            engine::schedule_batch(&table, &incoming, 1, &Kernels::auto(), &mut Rng::new(1));
        matches!(outcome[..], [Outcome::Placed { .. }])
    };
    assert!(!fits(), "two pods hold the port");
    handlers.on_pod(&Event::Deleted(Object::Pod(held.remove(0))));
    assert!(!fits(), "one pod still holds the port");
    handlers.on_pod(&Event::Deleted(Object::Pod(held.remove(0))));
    assert!(fits(), "nothing holds the port");
}
