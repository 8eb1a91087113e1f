//! A pod of a claim bound to a volume pinned to a node (the local provisioner's) goes only to
//! that node, among nodes that would all take it; a pod of an unbound claim goes anywhere.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use skiff_proto::api::{Kind, Object, Pod};
use skiff_proto::client::Event;
use skiff_scheduler::kernels::Kernels;
use skiff_scheduler::parallel::{Core, Pool, PoolConfig, Verdict};
use skiff_scheduler::service::Handlers;
use skiff_scheduler::synth::{self, Profile};

fn object(kind: &str, v: serde_json::Value) -> Object {
    let kind = Kind::from_name(kind).expect("a declared kind");
    Object::from_json(kind, v.to_string().as_bytes()).expect("the object decodes")
}

fn pod_of_claim(name: &str, claim: &str) -> Pod {
    match object(
        "Pod",
        json!({"metadata": {"name": name, "namespace": "default", "uid": name,
                            "resourceVersion": "1"},
               "spec": {"containers": [{"name": "c", "image": "i"}],
                        "volumes": [{"name": "data",
                                     "persistentVolumeClaim": {"claimName": claim}}]}}),
    ) {
        Object::Pod(p) => p,
        _ => unreachable!(),
    }
}

#[test]
fn a_pod_of_a_pinned_claim_goes_to_its_volume_node() {
    let core = Arc::new(Core::new(Kernels::auto()));
    let handlers = Handlers::new(core.clone(), "");
    let (nodes, _) = synth::workload(8, 0, Profile::Basic, 3);
    for n in &nodes {
        handlers.on_node(&Event::Added(Object::Node(n.clone())));
    }
    let target = nodes[5].metadata.name.clone();
    handlers.on_volume(&Event::Added(object(
        "PersistentVolume",
        json!({"metadata": {"name": "pvc-1"},
               "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                   {"key": "kubernetes.io/hostname", "operator": "In", "values": [target]}]}]}}}}),
    )));
    handlers.on_volume(&Event::Added(object(
        "PersistentVolumeClaim",
        json!({"metadata": {"name": "data-db-0", "namespace": "default"},
               "spec": {"volumeName": "pvc-1"}}),
    )));
    handlers.on_volume(&Event::Added(object(
        "PersistentVolumeClaim",
        json!({"metadata": {"name": "unbound", "namespace": "default"}, "spec": {}}),
    )));
    let (_pool, rx) = Pool::start_channel(
        core.clone(),
        PoolConfig {
            workers: 1,
            batch: 8,
            seed: 1,
        },
    );
    for round in 0..5 {
        let p = pod_of_claim(&format!("db-{round}"), "data-db-0");
        handlers.on_pod(&Event::Added(Object::Pod(p)));
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Verdict::Placed { node, .. }) => assert_eq!(node, target),
            other => panic!("expected a placement, got {other:?}"),
        }
    }
    handlers.on_pod(&Event::Added(Object::Pod(pod_of_claim("free", "unbound"))));
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Verdict::Placed { .. }) => {}
        other => panic!("an unbound claim's pod goes anywhere: {other:?}"),
    }
}
