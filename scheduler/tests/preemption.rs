//! Preemption through the informer handlers and the worker pool, as the service runs it: a
//! pod of higher priority that fits nowhere is nominated with its victims chosen; while the
//! victim terminates the pod waits and its room is held against pods of lower priority; once
//! the victim is gone the pod goes to its nominated node before anyone else.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::json;
use skiff_proto::api::{Kind, Object, Pod};
use skiff_proto::client::Event;
use skiff_scheduler::kernels::Kernels;
use skiff_scheduler::parallel::{Core, Pool, PoolConfig, Verdict};
use skiff_scheduler::preemption::Outcome;
use skiff_scheduler::service::Handlers;

fn object(kind: Kind, v: serde_json::Value) -> Object {
    Object::from_json(kind, v.to_string().as_bytes()).expect("the object decodes")
}

fn node(name: &str) -> Object {
    object(
        Kind::Node,
        json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
               "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                          "conditions": [{"type": "Ready", "status": "True"}]}}),
    )
}

fn pod(name: &str, priority: i32, cpu: &str, node: &str) -> Pod {
    let o = object(
        Kind::Pod,
        json!({"metadata": {"name": name, "namespace": "default", "uid": name,
                            "resourceVersion": "1"},
               "spec": {"priority": priority, "nodeName": node,
                        "containers": [{"name": "c", "image": "i",
                            "resources": {"requests": {"cpu": cpu}}}]},
               "status": {"startTime": "2026-01-01T00:00:00Z"}}),
    );
    match o {
        Object::Pod(p) => p,
        _ => unreachable!(),
    }
}

fn next(rx: &mpsc::Receiver<Verdict>) -> Verdict {
    rx.recv_timeout(Duration::from_secs(30))
        .expect("a verdict within 30 s")
}

#[test]
fn a_nominated_pod_keeps_its_room_and_takes_it_first() {
    let core = Arc::new(Core::new(Kernels::auto()));
    let handlers = Handlers::new(core.clone(), "");
    handlers.on_node(&Event::Added(node("n1")));
    let victim = pod("low", 10, "1500m", "n1");
    handlers.on_pod(&Event::Added(Object::Pod(victim.clone())));
    let (_pool, rx) = Pool::start_channel(
        core.clone(),
        PoolConfig {
            workers: 2,
            batch: 8,
            seed: 1,
        },
    );
    // The service's ticker: pods whose back-off is over after a change go back to active.
    let ticking = core.clone();
    std::thread::spawn(move || {
        while !ticking.queue.is_closed() {
            ticking.queue.tick();
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    handlers.on_pod(&Event::Added(Object::Pod(pod("high", 1000, "1", ""))));
    match next(&rx) {
        Verdict::Unschedulable {
            pod,
            preemption: Outcome::Nominated(c),
            ..
        } => {
            assert_eq!(pod.name, "high");
            assert_eq!(c.node, "n1");
            let victims: Vec<&str> = c.victims.iter().map(|v| v.name.as_str()).collect();
            assert_eq!(victims, ["low"]);
        }
        other => panic!("expected a nomination, got {other:?}"),
    }
    // The victim terminates: marked by the scheduler's condition, deleted gracefully.
    let mut terminating = victim.clone();
    terminating.metadata.deletion_timestamp = Some(skiff_proto::api::Time::now());
    terminating
        .status
        .get_or_insert_with(Default::default)
        .set_condition(skiff_proto::api::PodCondition {
            reason: "PreemptionByScheduler".into(),
            ..skiff_proto::api::PodCondition::new(
                skiff_proto::api::PodConditionType::DisruptionTarget,
                skiff_proto::api::ConditionStatus::True,
            )
        });
    handlers.on_pod(&Event::Modified(Object::Pod(terminating)));
    // A pod of lower priority than the nominee finds the nominee's room held.
    handlers.on_pod(&Event::Added(Object::Pod(pod("filler", 10, "1500m", ""))));
    match next(&rx) {
        Verdict::Unschedulable { pod, .. } => assert_eq!(pod.name, "filler"),
        other => panic!("the room on n1 is held for the nominee: {other:?}"),
    }
    assert_eq!(
        core.table
            .read()
            .nominated
            .get("high")
            .map(|(n, _)| n.as_str()),
        Some("n1")
    );
    // The victim goes: the nominee is placed on its node.
    handlers.on_pod(&Event::Deleted(Object::Pod(victim)));
    loop {
        match next(&rx) {
            Verdict::Placed { pod, node, .. } if pod.name == "high" => {
                assert_eq!(node, "n1");
                break;
            }
            Verdict::Placed { pod, .. } => panic!("{} took the nominee's room", pod.name),
            Verdict::Unschedulable { .. } => {}
        }
    }
    assert!(core.table.read().nominated.is_empty());
    core.queue.close();
}
