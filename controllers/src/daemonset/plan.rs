//! The DaemonSet controller's decisions, without I/O: which nodes should run the daemon pod,
//! what to create and delete on each, the rolling update within `maxUnavailable` and
//! `maxSurge`, and the status. Kubernetes 1.32's `daemonset` controller is the model.
//!
//! ```text
//!  per node:  should run?  (nodeSelector, required node affinity, taints: NoSchedule and
//!             │              NoExecute ones tolerated, with the daemon tolerations added)
//!             ├ yes, no pod at all (none stopping or ended) ──► create one, pinned by affinity
//!             ├ yes, several                 ──► the newest extras go
//!             ├ yes, one ended               ──► it goes (a new one follows once it is gone)
//!             ├ no, but every NoExecute taint tolerated (a NoSchedule `unreachable`, say)
//!             │                              ──► the pod there stays (misscheduled)
//!             └ no, pods there               ──► they go (misscheduled)
//!  rolling:   old-template pods go while no more than maxUnavailable nodes are without an
//!             available pod; with maxSurge, a new pod starts beside the old, which goes
//!             once the new one is available
//! ```

use std::collections::BTreeMap;

use skiff_proto::api::apps::{DaemonSet, DaemonSetStatus};
use skiff_proto::api::{Node, Pod, PodPhase, TaintEffect, Toleration};

use crate::pods;

pub use crate::history::REVISION_HASH_LABEL;
/// The label a daemon pod carries: the DaemonSet's generation when it was made.
pub const TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";

/// The tolerations every daemon pod gets, so a daemon keeps running on (and comes to) a
/// node under pressure, unreachable or cordoned, as Kubernetes adds them; with the
/// network-unavailable one for host-network pods.
pub fn daemon_tolerations(host_network: bool) -> Vec<Toleration> {
    let mut out: Vec<Toleration> = [
        ("node.kubernetes.io/not-ready", TaintEffect::NoExecute),
        ("node.kubernetes.io/unreachable", TaintEffect::NoExecute),
        ("node.kubernetes.io/disk-pressure", TaintEffect::NoSchedule),
        (
            "node.kubernetes.io/memory-pressure",
            TaintEffect::NoSchedule,
        ),
        ("node.kubernetes.io/pid-pressure", TaintEffect::NoSchedule),
        ("node.kubernetes.io/unschedulable", TaintEffect::NoSchedule),
    ]
    .into_iter()
    .map(|(key, effect)| toleration(key, effect))
    .collect();
    if host_network {
        out.push(toleration(
            "node.kubernetes.io/network-unavailable",
            TaintEffect::NoSchedule,
        ));
    }
    out
}

fn toleration(key: &str, effect: TaintEffect) -> Toleration {
    Toleration {
        key: key.to_owned(),
        operator: "Exists".to_owned(),
        effect: Some(effect),
        ..Toleration::default()
    }
}

/// Adds the daemon tolerations a pod does not have yet.
pub fn add_daemon_tolerations(pod: &mut Pod) {
    let host_network = pod.spec.host_network == Some(true);
    for t in daemon_tolerations(host_network) {
        let present = pod
            .spec
            .tolerations
            .iter()
            .any(|o| o.key == t.key && o.effect == t.effect);
        if !present {
            pod.spec.tolerations.push(t);
        }
    }
}

/// Whether a daemon pod (`template`, with the daemon tolerations) should run on `node`: it
/// selects the node, and tolerates each of its NoSchedule and NoExecute taints.
pub fn should_run(template: &Pod, node: &Node) -> bool {
    tolerated(template, node, |e| e != TaintEffect::PreferNoSchedule)
}

/// Whether a daemon pod already on `node` may stay: it selects the node and tolerates each
/// NoExecute taint (a NoSchedule one, such as `unreachable` while the node's agent is away,
/// keeps new pods off, not the one running), as Kubernetes' `NodeShouldRunDaemonPod` has it.
pub fn should_continue_running(template: &Pod, node: &Node) -> bool {
    tolerated(template, node, |e| e == TaintEffect::NoExecute)
}

/// `template` selects `node` and tolerates every taint of it whose effect `counts`.
fn tolerated(template: &Pod, node: &Node, counts: impl Fn(TaintEffect) -> bool) -> bool {
    template.selects_node(node)
        && node.spec.taints.iter().all(|taint| {
            !counts(taint.effect) || template.spec.tolerations.iter().any(|t| t.tolerates(taint))
        })
}

/// The node a daemon pod is for: the one it is bound to, or the one its affinity pins it to.
pub fn node_of(pod: &Pod) -> Option<&str> {
    if !pod.spec.node_name.is_empty() {
        return Some(&pod.spec.node_name);
    }
    let required = pod
        .spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?;
    required.node_selector_terms.iter().find_map(|term| {
        term.match_fields
            .iter()
            .find(|r| r.key == "metadata.name" && r.operator == "In")
            .and_then(|r| r.values.first())
            .map(String::as_str)
    })
}

fn hash_of(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .get(REVISION_HASH_LABEL)
        .map(String::as_str)
}

/// What the sync does.
#[derive(Debug, Default, PartialEq)]
pub struct Decision {
    /// Nodes to create a daemon pod on.
    pub create: Vec<String>,
    /// Names of the pods to delete.
    pub delete: Vec<String>,
    pub status: DaemonSetStatus,
}

/// The plan for `ds` (whose current template hashes to `hash`), given the nodes and its
/// pods, at `now` (unix seconds).
pub fn decide(
    ds: &DaemonSet,
    template: &Pod,
    hash: &str,
    nodes: &[&Node],
    owned: &[&Pod],
    now: i64,
) -> Decision {
    let mut d = Decision::default();
    let min_ready = ds.spec.min_ready_seconds.unwrap_or(0);
    let mut by_node: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    for pod in owned {
        match node_of(pod) {
            Some(n) => by_node.entry(n).or_default().push(pod),
            None => d.delete.push(pod.metadata.name.clone()),
        }
    }
    let known: std::collections::HashSet<&str> =
        nodes.iter().map(|n| n.metadata.name.as_str()).collect();
    // Pods of nodes that are gone.
    for (node, pods) in &by_node {
        if !known.contains(node) {
            d.delete.extend(
                pods.iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .map(|p| p.metadata.name.clone()),
            );
        }
    }

    /// A node's daemon pods, as the rolling update sees them.
    struct Here<'a> {
        node: &'a str,
        new: Option<&'a Pod>,
        old: Vec<&'a Pod>,
        stopping: bool,
    }
    let mut running: Vec<Here> = Vec::new();
    let mut status = DaemonSetStatus {
        observed_generation: ds.metadata.generation,
        ..DaemonSetStatus::default()
    };
    let (mut available, mut updated) = (0, 0);
    for node in nodes {
        let name = node.metadata.name.as_str();
        let pods = by_node.get(name).cloned().unwrap_or_default();
        let stopping = pods
            .iter()
            .any(|p| p.metadata.deletion_timestamp.is_some() && !p.is_terminal());
        let standing: Vec<&Pod> = pods
            .iter()
            .copied()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let run = should_run(template, node);
        if !run && !standing.is_empty() {
            status.number_misscheduled += 1;
        }
        if !run && !should_continue_running(template, node) {
            d.delete
                .extend(standing.iter().map(|p| p.metadata.name.clone()));
            continue;
        }
        if run {
            status.desired_number_scheduled += 1;
            // A new pod only where none is left, not even one stopping or ended: two never
            // run at once (as Kubernetes, which replaces an ended one on the next pass).
            if pods.is_empty() {
                d.create.push(name.to_owned());
                continue;
            }
        }
        let mut active: Vec<&Pod> = Vec::new();
        for p in standing {
            if matches!(p.phase(), Some(PodPhase::Failed | PodPhase::Succeeded)) {
                // A daemon that ended goes; its replacement comes once it is gone.
                d.delete.push(p.metadata.name.clone());
            } else {
                active.push(p);
            }
        }
        if !run || active.is_empty() {
            continue;
        }
        status.current_number_scheduled += 1;
        // Oldest first: the one kept.
        active.sort_by_key(|p| {
            (
                p.metadata.creation_timestamp.map(|t| t.unix()),
                p.metadata.name.clone(),
            )
        });
        let new: Vec<&Pod> = active
            .iter()
            .copied()
            .filter(|p| hash_of(p) == Some(hash))
            .collect();
        let old: Vec<&Pod> = active
            .iter()
            .copied()
            .filter(|p| hash_of(p) != Some(hash))
            .collect();
        // More than one of a kind: the extras go.
        for extra in new.iter().skip(1).chain(old.iter().skip(1)) {
            d.delete.push(extra.metadata.name.clone());
        }
        let new = new.first().copied();
        let old: Vec<&Pod> = old.into_iter().take(1).collect();
        if active.iter().any(|p| pods::is_ready(p)) {
            status.number_ready += 1;
        }
        if active.iter().any(|p| pods::is_available(p, min_ready, now)) {
            available += 1;
        }
        if new.is_some() {
            updated += 1;
        }
        running.push(Here {
            node: name,
            new,
            old,
            stopping,
        });
    }

    if ds.rolls() {
        let desired = status.desired_number_scheduled;
        let rolling = ds
            .spec
            .update_strategy
            .rolling_update
            .clone()
            .unwrap_or_default();
        let resolve = |v: Option<&skiff_proto::api::IntOrString>, default: i32| {
            v.and_then(|v| v.scaled(desired, true).ok())
                .unwrap_or(default)
                .max(0)
        };
        let max_surge = resolve(rolling.max_surge.as_ref(), 0);
        let max_unavailable = resolve(rolling.max_unavailable.as_ref(), 1);
        let is_available = |p: &Pod| pods::is_available(p, min_ready, now);
        if max_surge == 0 {
            // Nodes without an available pod count against the budget.
            let mut budget = max_unavailable - (desired - available);
            for here in &running {
                let Some(old) = here.old.first() else {
                    continue;
                };
                if here.new.is_some() {
                    // The new one is up: the old goes.
                    d.delete.push(old.metadata.name.clone());
                } else if !is_available(old) {
                    // Unavailable already: replacing it costs nothing.
                    d.delete.push(old.metadata.name.clone());
                } else if budget > 0 {
                    budget -= 1;
                    d.delete.push(old.metadata.name.clone());
                }
            }
        } else {
            // Surging: a new pod beside an old one, not yet available.
            let mut surging = running
                .iter()
                .filter(|h| h.new.is_some_and(|n| !is_available(n)) && !h.old.is_empty())
                .count();
            let max_surge = usize::try_from(max_surge).unwrap_or(0);
            for here in &running {
                let Some(old) = here.old.first() else {
                    continue;
                };
                match here.new {
                    // The new one is available: the old goes.
                    Some(new) if is_available(new) => d.delete.push(old.metadata.name.clone()),
                    Some(_) => {}
                    _ if here.stopping => {}
                    // The old one serves nothing: its replacement starts whatever the surge.
                    None if !is_available(old) => d.create.push(here.node.to_owned()),
                    None if surging < max_surge => {
                        surging += 1;
                        d.create.push(here.node.to_owned());
                    }
                    None => {}
                }
            }
        }
    }

    status.number_available = Some(available);
    status.number_unavailable = Some(status.desired_number_scheduled - available);
    status.updated_number_scheduled = Some(updated);
    status.other = ds.status.other.clone();
    d.delete.sort();
    d.delete.dedup();
    d.status = status;
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use skiff_proto::api::{Kind, Object};

    fn ds(strategy: serde_json::Value) -> (DaemonSet, Pod) {
        let ds: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "agent", "namespace": "kube-system", "uid": "ds", "generation": 2},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "updateStrategy": strategy,
                     "template": {"metadata": {"labels": {"app": "agent"}},
                                  "spec": {"nodeSelector": {"role": "worker"},
                                           "containers": [{"name": "c", "image": "i"}]}}}
        }))
        .unwrap();
        let mut template: Pod = serde_json::from_value(json!({
            "metadata": ds.spec.template.metadata, "spec": ds.spec.template.spec
        }))
        .unwrap();
        add_daemon_tolerations(&mut template);
        (ds, template)
    }

    fn node(name: &str, labels: serde_json::Value, taints: serde_json::Value) -> Node {
        match Object::from_value(
            Kind::Node,
            json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}}),
        )
        .unwrap()
        {
            Object::Node(n) => n,
            _ => unreachable!(),
        }
    }

    fn pod(name: &str, node: &str, hash: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {REVISION_HASH_LABEL: hash},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready {"True"} else {"False"},
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap()
    }

    const NOW: i64 = 1_800_000_000;

    #[test]
    fn a_pod_for_each_eligible_node_and_none_elsewhere() {
        let (ds, t) = ds(json!({"type": "RollingUpdate"}));
        let worker = node("w1", json!({"role": "worker"}), json!([]));
        let cordoned = node(
            "w2",
            json!({"role": "worker"}),
            json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
        );
        let tainted = node(
            "w3",
            json!({"role": "worker"}),
            json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]),
        );
        let other = node("m1", json!({"role": "control"}), json!([]));
        let stray = pod("stray", "m1", "h", true);
        let d = decide(
            &ds,
            &t,
            "h",
            &[&worker, &cordoned, &tainted, &other],
            &[&stray],
            NOW,
        );
        assert_eq!(d.create, ["w1", "w2"]);
        assert_eq!(d.delete, ["stray"]);
        assert_eq!(d.status.desired_number_scheduled, 2);
        assert_eq!(d.status.number_misscheduled, 1);
        assert_eq!(d.status.observed_generation, Some(2));
    }

    /// Two pods never run on a node at once: an ended daemon goes before its replacement
    /// comes (on the pass after it is gone), and while a node's agent is away (`unreachable`
    /// NoSchedule, tolerated NoExecute) its pod stays and no other is made.
    #[test]
    fn an_ended_or_unreachable_daemon_is_not_doubled() {
        let (ds, t) = ds(json!({"type": "RollingUpdate"}));
        let worker = node("w1", json!({"role": "worker"}), json!([]));
        let mut failed = pod("a-1", "w1", "h", false);
        if let Some(s) = failed.status.as_mut() {
            s.phase = Some(PodPhase::Failed);
        }
        let d = decide(&ds, &t, "h", &[&worker], &[&failed], NOW);
        assert_eq!(d.delete, ["a-1"]);
        assert!(d.create.is_empty(), "{:?}", d.create);
        let d = decide(&ds, &t, "h", &[&worker], &[], NOW);
        assert_eq!(d.create, ["w1"]);

        let away = node(
            "w1",
            json!({"role": "worker"}),
            json!([{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                   {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]),
        );
        let running = pod("a-2", "w1", "h", true);
        let d = decide(&ds, &t, "h", &[&away], &[&running], NOW);
        assert!(d.delete.is_empty() && d.create.is_empty(), "{d:?}");
        assert_eq!(
            (
                d.status.desired_number_scheduled,
                d.status.number_misscheduled
            ),
            (0, 1)
        );
        // An untolerated NoExecute taint does send it away.
        let evicting = node(
            "w1",
            json!({"role": "worker"}),
            json!([{"key": "dedicated", "effect": "NoExecute"}]),
        );
        let d = decide(&ds, &t, "h", &[&evicting], &[&running], NOW);
        assert_eq!(d.delete, ["a-2"]);
    }

    #[test]
    fn a_rolling_update_keeps_within_max_unavailable() {
        let (ds, t) = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}));
        let nodes: Vec<Node> = (1..=3)
            .map(|i| node(&format!("w{i}"), json!({"role": "worker"}), json!([])))
            .collect();
        let nodes: Vec<&Node> = nodes.iter().collect();
        let pods = [
            pod("a", "w1", "old", true),
            pod("b", "w2", "old", true),
            pod("c", "w3", "old", true),
        ];
        let owned: Vec<&Pod> = pods.iter().collect();
        let d = decide(&ds, &t, "new", &nodes, &owned, NOW);
        assert_eq!(d.delete, ["a"]);
        assert!(d.create.is_empty());
        assert_eq!(d.status.updated_number_scheduled, Some(0));
        // w1 replaced but not ready yet: nothing more goes.
        let pods = [
            pod("a2", "w1", "new", false),
            pod("b", "w2", "old", true),
            pod("c", "w3", "old", true),
        ];
        let owned: Vec<&Pod> = pods.iter().collect();
        let d = decide(&ds, &t, "new", &nodes, &owned, NOW);
        assert!(d.delete.is_empty(), "{:?}", d.delete);
        assert_eq!(d.status.number_unavailable, Some(1));
    }

    #[test]
    fn a_surge_starts_the_new_pod_before_the_old_goes() {
        let (ds, t) = ds(json!({"type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}));
        let nodes: Vec<Node> = (1..=2)
            .map(|i| node(&format!("w{i}"), json!({"role": "worker"}), json!([])))
            .collect();
        let nodes: Vec<&Node> = nodes.iter().collect();
        let pods = [pod("a", "w1", "old", true), pod("b", "w2", "old", true)];
        let owned: Vec<&Pod> = pods.iter().collect();
        let d = decide(&ds, &t, "new", &nodes, &owned, NOW);
        assert_eq!(d.create, ["w1"]);
        assert!(d.delete.is_empty());
        let pods = [
            pod("a", "w1", "old", true),
            pod("a2", "w1", "new", true),
            pod("b", "w2", "old", true),
        ];
        let owned: Vec<&Pod> = pods.iter().collect();
        let d = decide(&ds, &t, "new", &nodes, &owned, NOW);
        assert_eq!(d.delete, ["a"]);
        assert_eq!(d.create, ["w2"]);
    }

    #[test]
    fn on_delete_replaces_nothing_by_itself() {
        let (ds, t) = ds(json!({"type": "OnDelete"}));
        let w = node("w1", json!({"role": "worker"}), json!([]));
        let old = pod("a", "w1", "old", true);
        let d = decide(&ds, &t, "new", &[&w], &[&old], NOW);
        assert!(d.delete.is_empty() && d.create.is_empty());
        assert_eq!(d.status.updated_number_scheduled, Some(0));
    }
}
