//! A node whose agent stops beating is not schedulable once its heartbeat is older than the
//! node monitor grace period, without any event about it: the service's ticker looks at every
//! node again, as the node lifecycle controller would taint it unreachable. A new heartbeat
//! brings it back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use skiff_proto::api::{Node, NodeConditionType, Object, Time};
use skiff_proto::client::Event;
use skiff_scheduler::kernels::Kernels;
use skiff_scheduler::model::{NODE_MONITOR_GRACE_SECS, TAINT_UNREACHABLE};
use skiff_scheduler::parallel::Core;
use skiff_scheduler::service::Handlers;
use skiff_scheduler::synth::{self, Profile};

fn beating_at(mut node: Node, at: Time) -> Node {
    let status = node.status.as_mut().expect("a synthetic node has a status");
    let ready = status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == NodeConditionType::Ready)
        .expect("a synthetic node is Ready");
    ready.last_heartbeat_time = Some(at);
    node
}

fn unreachable(core: &Core, name: &str) -> bool {
    let table = core.table.read();
    let row = table.row(name).expect("the node has a row");
    table.infos[row]
        .taints
        .iter()
        .any(|t| t.key == TAINT_UNREACHABLE)
}

#[test]
fn a_silent_node_becomes_unreachable_and_returns_with_its_heartbeat() {
    let core = Arc::new(Core::new(Kernels::auto()));
    let handlers = Handlers::new(core.clone(), "");
    let t0 = Instant::now();
    let after = |secs: i64| t0 + Duration::from_secs(secs.unsigned_abs());
    let node = synth::node(0, Profile::Basic);
    let name = node.metadata.name.clone();
    // The agent's clock is far off: only when the heartbeat changes counts.
    let beat = |secs: i64| beating_at(node.clone(), Time::from_unix(1_000 + secs).expect("time"));
    handlers.on_node_at(&Event::Added(Object::Node(beat(0))), t0);
    assert!(!unreachable(&core, &name));

    // No event: only time passes.
    handlers.recheck_nodes_at(after(NODE_MONITOR_GRACE_SECS - 1));
    assert!(!unreachable(&core, &name), "still within the grace");
    // An update that is not a heartbeat (a label) does not count as one.
    handlers.on_node_at(
        &Event::Modified(Object::Node(beat(0))),
        after(NODE_MONITOR_GRACE_SECS),
    );
    handlers.recheck_nodes_at(after(NODE_MONITOR_GRACE_SECS + 1));
    assert!(unreachable(&core, &name), "silent past the grace");

    // A node that never reported a heartbeat is judged by its conditions alone.
    let made = synth::node(1, Profile::Basic);
    handlers.on_node_at(&Event::Added(Object::Node(made.clone())), t0);
    handlers.recheck_nodes_at(after(10 * NODE_MONITOR_GRACE_SECS));
    assert!(!unreachable(&core, &made.metadata.name));

    // A heartbeat brings it back.
    handlers.on_node_at(
        &Event::Modified(Object::Node(beat(50))),
        after(NODE_MONITOR_GRACE_SECS + 2),
    );
    assert!(!unreachable(&core, &name));
}
