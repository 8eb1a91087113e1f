//! The queue is the one owner of pending pods: it holds a pod from the first event that shows
//! it pending until the informer sees it bound. These tests drive the informer handlers, the
//! workers and the binder's refusals without a store, and prove that an update arriving while
//! a pod's Bind is in flight neither places it a second time (no double bind) nor is lost (a
//! refused Bind is retried with the newest resourceVersion), and that the node's accounting
//! counts the pod once throughout; and that a pod deleted and created again under its name is
//! another pod (another UID): its predecessor's placement, late Bind outcome or confirmed
//! binding neither holds it back nor takes its own placement away.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use skiff_proto::api::{Node, Object, Pod};
use skiff_proto::client::Event;
use skiff_scheduler::kernels::Kernels;
use skiff_scheduler::model::PodInfo;
use skiff_scheduler::parallel::{Core, Pool, PoolConfig, Verdict};
use skiff_scheduler::service::Handlers;
use skiff_scheduler::synth::{self, Profile};

const DEADLINE: Duration = Duration::from_secs(30);

struct Cluster {
    core: Arc<Core>,
    handlers: Handlers,
    node: Node,
    pod: Pod,
}

fn cluster() -> Cluster {
    let core = Arc::new(Core::new(Kernels::auto()));
    let handlers = Handlers::new(core.clone(), "");
    let (mut nodes, mut pods) = synth::workload(1, 1, Profile::Basic, 7);
    let node = nodes.remove(0);
    handlers.on_node(&Event::Added(Object::Node(node.clone())));
    Cluster {
        core,
        handlers,
        node,
        pod: pods.remove(0),
    }
}

fn version(pod: &Pod, rv: i64) -> Pod {
    let mut p = pod.clone();
    p.metadata.resource_version = rv.to_string();
    p
}

fn start(core: &Arc<Core>) -> (Pool, mpsc::Receiver<Verdict>) {
    let (pool, rx) = Pool::start_channel(
        core.clone(),
        PoolConfig {
            workers: 1,
            batch: 8,
            seed: 1,
        },
    );
    (pool, rx)
}

/// The next placement the workers commit (waits up to the deadline).
fn placed(rx: &mpsc::Receiver<Verdict>) -> (Arc<PodInfo>, String) {
    match rx.recv_timeout(DEADLINE) {
        Ok(Verdict::Placed { pod, node, .. }) => (pod, node),
        other => panic!("expected a placement, got {other:?}"),
    }
}

/// The node's CPU column equals the pod's request: it is accounted exactly once.
fn accounted_once(c: &Cluster, info: &PodInfo) {
    let table = c.core.table.read();
    let row = table
        .row(&c.node.metadata.name)
        .expect("the node has a row");
    assert_eq!(table.req_cpu[row], info.requests.milli_cpu);
    assert_eq!(table.req_pods[row], 1);
}

#[test]
fn an_update_during_a_bind_is_held_not_placed_twice_and_a_refused_bind_retries_it() {
    let c = cluster();
    let key = format!("{}/{}", c.pod.metadata.namespace, c.pod.metadata.name);
    c.handlers
        .on_pod(&Event::Added(Object::Pod(version(&c.pod, 1))));
    assert!(c.core.queue.contains(&key));
    let (pool, rx) = start(&c.core);

    let (first, node) = placed(&rx);
    assert_eq!(first.resource_version, 1);
    assert_eq!(node, c.node.metadata.name);
    assert!(c.core.queue.is_assumed(&key));
    accounted_once(&c, &first);

    // A newer version arrives while the Bind is in flight: the queue holds it, serves nothing.
    let mut newer = version(&c.pod, 2);
    newer.metadata.labels.insert("touched".into(), "yes".into());
    c.handlers
        .on_pod(&Event::Modified(Object::Pod(newer.clone())));
    assert_eq!(c.core.queue.depth(), (0, 0, 0), "placed a second time");
    assert!(c.core.queue.is_assumed(&key));
    let held = c
        .core
        .queue
        .object(&key)
        .expect("the queue holds the object");
    assert_eq!(held.metadata.resource_version, "2");
    accounted_once(&c, &first);

    // The store refuses the Bind (the resourceVersion changed): retried with the newest.
    c.core.unassume(&first, true);
    let (second, _) = placed(&rx);
    assert_eq!(second.resource_version, 2);
    accounted_once(&c, &second);

    // The store confirms the binding: the pod is pending nowhere, counted once, bound.
    let mut bound = version(&newer, 3);
    bound.spec.node_name = node.clone();
    c.handlers.on_pod(&Event::Modified(Object::Pod(bound)));
    assert!(!c.core.queue.contains(&key));
    {
        let table = c.core.table.read();
        let entry = table
            .pod(second.id().as_str())
            .expect("the table accounts the bound pod");
        assert!(!entry.assumed);
        assert_eq!(*entry.node, *node);
    }
    accounted_once(&c, &second);

    c.core.queue.close();
    pool.join();
    assert!(rx.try_recv().is_err(), "no other verdict");
}

/// A pod created again under its name while its predecessor's placement binds is placed at
/// once beside it (both count until that Bind's outcome is known), and the predecessor's
/// refusal takes out only the predecessor's placement.
#[test]
fn a_pod_recreated_while_an_earlier_placement_of_its_name_binds_is_placed_beside_it() {
    let c = cluster();
    let key = format!("{}/{}", c.pod.metadata.namespace, c.pod.metadata.name);
    // The earlier pod was deleted after its placement was committed: the table still
    // accounts that placement, whose Bind is in flight.
    let mut earlier = version(&c.pod, 1);
    earlier.metadata.uid = "earlier".into();
    let earlier = Arc::new(PodInfo::from_pod(&earlier));
    c.core
        .table
        .write()
        .add_pod(earlier.clone(), &c.node.metadata.name, true)
        .expect("the node has room");

    let mut later = version(&c.pod, 5);
    later.metadata.uid = "later".into();
    c.handlers.on_pod(&Event::Added(Object::Pod(later)));
    let (pool, rx) = start(&c.core);
    let (pod, _) = placed(&rx);
    assert_eq!(pod.uid, "later");
    assert_eq!(pod.resource_version, 5);
    c.core.queue.close();
    pool.join();
    {
        let table = c.core.table.read();
        let row = table
            .row(&c.node.metadata.name)
            .expect("the node has a row");
        assert_eq!(
            table.req_pods[row], 2,
            "both placements count while one binds"
        );
    }

    // The earlier Bind is refused for good (that pod is gone): only its placement goes.
    c.core.unassume(&earlier, false);
    accounted_once(&c, &pod);
    assert!(
        c.core.queue.is_assumed(&key),
        "the later pod's Bind is in flight"
    );
}

/// A pod is placed, deleted, and created again under its name, and the new pod is placed;
/// then the old pod's Bind is refused (it is gone). That late outcome neither takes the new
/// pod's placement out of the table nor sends the new pod to be placed a second time.
#[test]
fn a_late_refusal_of_a_deleted_pods_bind_leaves_its_successor_alone() {
    let c = cluster();
    let key = format!("{}/{}", c.pod.metadata.namespace, c.pod.metadata.name);
    let mut first = version(&c.pod, 1);
    first.metadata.uid = "first".into();
    c.handlers.on_pod(&Event::Added(Object::Pod(first.clone())));
    let (pool, rx) = start(&c.core);
    let (old, _) = placed(&rx);
    assert_eq!(old.uid, "first");

    c.handlers
        .on_pod(&Event::Deleted(Object::Pod(version(&first, 2))));
    let mut second = version(&c.pod, 3);
    second.metadata.uid = "second".into();
    c.handlers.on_pod(&Event::Added(Object::Pod(second)));
    let (new, _) = placed(&rx);
    assert_eq!(new.uid, "second");
    c.core.queue.close();
    pool.join();
    accounted_once(&c, &new);

    c.core.unassume(&old, false);
    accounted_once(&c, &new);
    assert!(
        c.core.queue.is_assumed(&key),
        "the new pod's own Bind is in flight: not to be placed again"
    );
}

/// The informer was away while a bound pod was deleted and created again under its name: the
/// relist shows the new, pending pod as an update of the name. The old pod stops counting and
/// the new one is placed.
#[test]
fn a_pod_recreated_while_the_informer_was_away_is_placed() {
    let c = cluster();
    let mut gone = version(&c.pod, 1);
    gone.metadata.uid = "gone".into();
    gone.spec.node_name = c.node.metadata.name.clone();
    c.handlers.on_pod(&Event::Added(Object::Pod(gone)));

    let mut fresh = version(&c.pod, 7);
    fresh.metadata.uid = "fresh".into();
    c.handlers.on_pod(&Event::Modified(Object::Pod(fresh)));
    let (pool, rx) = start(&c.core);
    let (pod, _) = placed(&rx);
    assert_eq!(pod.uid, "fresh");
    c.core.queue.close();
    pool.join();
    accounted_once(&c, &pod);
}
