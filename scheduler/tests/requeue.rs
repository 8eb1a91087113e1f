//! Pods that fit nowhere because of other pods (pod affinity, anti-affinity, topology spread)
//! are retried by the events that can change that, as kube-scheduler's queueing hints move
//! them, not only by the one-minute flush: a pod their terms select being bound, a bound pod
//! relabelled out of what blocks them, a node removed. Each test drives the informer
//! handlers and the workers without a store, calls the queue's tick as the service's ticker
//! does, and waits (well under the minute) for the pod to be placed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use skiff_proto::Quantity;
use skiff_proto::api::pod::{Affinity, PodAffinity, PodAffinityTerm, TopologySpreadConstraint};
use skiff_proto::api::{LabelSelector, Node, Object, Pod};
use skiff_proto::client::Event;
use skiff_scheduler::engine::Rng;
use skiff_scheduler::kernels::Kernels;
use skiff_scheduler::parallel::{Core, Pool, PoolConfig, Verdict};
use skiff_scheduler::queue::UNSCHEDULABLE_FLUSH;
use skiff_scheduler::service::Handlers;
use skiff_scheduler::synth::{self, Profile};

const HOST: &str = "kubernetes.io/hostname";
/// Well under the flush: a pod placed by then was retried by an event.
const DEADLINE: Duration = Duration::from_secs(20);

struct Cluster {
    core: Arc<Core>,
    handlers: Handlers,
    pool: Pool,
    verdicts: mpsc::Receiver<Verdict>,
    revision: i64,
}

impl Cluster {
    fn new(nodes: &[Node]) -> Self {
        assert!(DEADLINE < UNSCHEDULABLE_FLUSH);
        let core = Arc::new(Core::new(Kernels::auto()));
        let handlers = Handlers::new(core.clone(), "");
        for n in nodes {
            handlers.on_node(&Event::Added(Object::Node(n.clone())));
        }
        let (pool, verdicts) = Pool::start_channel(
            core.clone(),
            PoolConfig {
                workers: 1,
                batch: 8,
                seed: 1,
            },
        );
        Cluster {
            core,
            handlers,
            pool,
            verdicts,
            revision: 0,
        }
    }

    /// Hands `pod` to the informer handlers as an add or an update, with a new revision.
    fn send(&mut self, mut pod: Pod, added: bool) {
        self.revision += 1;
        pod.metadata.resource_version = self.revision.to_string();
        let o = Object::Pod(pod);
        self.handlers.on_pod(&if added {
            Event::Added(o)
        } else {
            Event::Modified(o)
        });
    }

    /// The next verdict about `name` before `deadline`, ticking the queue meanwhile.
    fn verdict(&self, name: &str, deadline: Instant) -> Verdict {
        while Instant::now() < deadline {
            self.core.queue.tick();
            match self.verdicts.recv_timeout(Duration::from_millis(20)) {
                Ok(v) => {
                    let pod = match &v {
                        Verdict::Placed { pod, .. } | Verdict::Unschedulable { pod, .. } => pod,
                    };
                    if pod.name == name {
                        return v;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(e) => panic!("the workers stopped: {e}"),
            }
        }
        panic!("no verdict about {name} within {DEADLINE:?}");
    }

    fn unschedulable(&self, name: &str) {
        match self.verdict(name, Instant::now() + DEADLINE) {
            Verdict::Unschedulable { .. } => {}
            v => panic!("expected {name} to fit nowhere yet, got {v:?}"),
        }
    }

    /// Waits for `name` to be placed; returns the node.
    fn placed(&self, name: &str) -> String {
        let deadline = Instant::now() + DEADLINE;
        loop {
            match self.verdict(name, deadline) {
                Verdict::Placed { node, .. } => return node,
                // Retried too early by another event (or by the retry itself): keep waiting.
                Verdict::Unschedulable { .. } => {}
            }
        }
    }

    fn stop(self) {
        self.core.queue.close();
        self.pool.join();
    }
}

fn selects(app: &str) -> LabelSelector {
    LabelSelector {
        match_labels: [("app".to_string(), app.to_string())].into_iter().collect(),
        ..LabelSelector::default()
    }
}

fn term(app: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(selects(app)),
        namespaces: Vec::new(),
        topology_key: HOST.into(),
        other: Default::default(),
    }
}

/// A 100m pod labelled `app`, bound to `node` when given.
fn pod(name: &str, app: &str, node: Option<&Node>) -> Pod {
    let mut p = synth::pod(0, 1, 1, Profile::Basic, &mut Rng::new(1));
    p.metadata.name = name.into();
    p.metadata.uid = format!("uid-{name}");
    p.metadata.labels = BTreeMap::from([("app".to_string(), app.to_string())]);
    if let Some(n) = node {
        p.spec.node_name = n.metadata.name.clone();
    }
    p
}

/// A pending pod that needs an `app=db` pod on its node (or may not share one with it).
fn with_db(name: &str, anti: bool) -> Pod {
    let mut p = pod(name, "web", None);
    let terms = PodAffinity {
        required: vec![term("db")],
        preferred: Vec::new(),
        other: Default::default(),
    };
    p.spec.affinity = Some(if anti {
        Affinity {
            pod_anti_affinity: Some(terms),
            ..Affinity::default()
        }
    } else {
        Affinity {
            pod_affinity: Some(terms),
            ..Affinity::default()
        }
    });
    p
}

/// A pod with required affinity to `app=db` waits while there is none, and is placed once
/// an `app=db` pod is bound, not a minute later.
#[test]
fn a_pod_waiting_for_pod_affinity_is_retried_when_a_pod_it_selects_is_bound() {
    let node = synth::node(0, Profile::Basic);
    let mut c = Cluster::new(std::slice::from_ref(&node));
    c.send(with_db("web", false), true);
    c.unschedulable("web");

    c.send(pod("db", "db", Some(&node)), true);
    assert_eq!(c.placed("web"), node.metadata.name);
    c.stop();
}

/// A pod anti-affine to `app=db` waits while the only node holds an `app=db` pod, and is
/// placed once that pod is relabelled out of `app=db`.
#[test]
fn a_pod_waiting_for_anti_affinity_is_retried_when_the_pod_in_its_way_is_relabelled() {
    let node = synth::node(0, Profile::Basic);
    let mut c = Cluster::new(std::slice::from_ref(&node));
    let db = pod("db", "db", Some(&node));
    c.send(db.clone(), true);
    c.send(with_db("web", true), true);
    c.unschedulable("web");

    let mut relabelled = db;
    relabelled
        .metadata
        .labels
        .insert("app".into(), "cache".into());
    c.send(relabelled, false);
    assert_eq!(c.placed("web"), node.metadata.name);
    c.stop();
}

/// Hostname spread of `app=web` (maxSkew 1, DoNotSchedule) over two nodes: one holds an
/// `app=web` pod, the other is full. The next `app=web` pod waits (one node would be two
/// over the empty one, the other has no room) and is placed once the full node is removed.
#[test]
fn a_pod_waiting_for_topology_spread_is_retried_when_a_node_is_removed() {
    let nodes = [
        synth::node(0, Profile::Basic),
        synth::node(1, Profile::Basic),
    ];
    let mut c = Cluster::new(&nodes);
    c.send(pod("web-0", "web", Some(&nodes[0])), true);
    let mut big = pod("big", "batch", Some(&nodes[1]));
    big.spec.containers[0]
        .resources
        .requests
        .insert("cpu".into(), Quantity::parse("4").expect("a quantity"));
    c.send(big, true);
    let mut web = pod("web-1", "web", None);
    web.spec.topology_spread_constraints = vec![TopologySpreadConstraint {
        max_skew: 1,
        topology_key: HOST.into(),
        when_unsatisfiable: "DoNotSchedule".into(),
        label_selector: Some(selects("web")),
        min_domains: None,
        other: Default::default(),
    }];
    c.send(web, true);
    c.unschedulable("web-1");

    c.handlers
        .on_node(&Event::Deleted(Object::Node(nodes[1].clone())));
    assert_eq!(c.placed("web-1"), nodes[0].metadata.name);
    c.stop();
}
