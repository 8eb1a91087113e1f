//! Preemption held to kube-scheduler: the cases of its own tests of DefaultPreemption
//! (`TestSelectBestCandidate` and `TestPostFilter` in `default_preemption_test.go`, Kubernetes
//! 1.32), set up here with the same nodes, pods, priorities and budgets and expected to pick
//! the same node and give the same message; then properties of every victim set.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::engine::Rng;
use crate::filter::Diagnosis;
use crate::model::NodeInfo;

const NEG: i32 = -100;
const LOW: i32 = 0;
const MID: i32 = 100;
const HIGH: i32 = 1000;
const VERY_HIGH: i32 = 10000;

/// kube-scheduler's test sizes: (milli-CPU, memory).
const SMALL: (i64, i64) = (100, 100);
const MEDIUM: (i64, i64) = (200, 200);
const LARGE: (i64, i64) = (300, 300);
const VERY_LARGE: (i64, i64) = (500, 500);
const NONE: (i64, i64) = (0, 0);

fn node(name: &str, (cpu, memory): (i64, i64), pods: i64) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        labels: BTreeMap::from([("kubernetes.io/hostname".to_string(), name.to_string())]),
        allocatable: Resources {
            milli_cpu: cpu,
            memory,
            ..Resources::default()
        },
        allocatable_pods: pods,
        ..NodeInfo::default()
    }
}

fn pod(name: &str, priority: i32, (cpu, memory): (i64, i64), start: i64) -> PodInfo {
    let mut p = PodInfo {
        namespace: "default".into(),
        name: name.into(),
        uid: name.into(),
        priority,
        start_time: Some(start),
        ..PodInfo::default()
    };
    p.requests.milli_cpu = cpu;
    p.requests.memory = memory;
    p
}

fn labelled(mut p: PodInfo, key: &str, value: &str) -> PodInfo {
    p.labels.insert(key.into(), value.into());
    p
}

fn table(nodes: &[NodeInfo], pods: &[(PodInfo, &str)]) -> NodeTable {
    let mut t = NodeTable::new();
    for n in nodes {
        t.upsert_node(n.clone());
    }
    for (p, n) in pods {
        t.add_pod(Arc::new(p.clone()), n, false)
            .expect("each pod is placed once");
    }
    t
}

/// Runs an attempt as the scheduler does: the diagnosis over every node, then preemption.
fn attempt(t: &NodeTable, p: &PodInfo, budgets: &[Budget], seed: u64) -> Outcome {
    let k = Kernels::auto();
    let ctx = PodCtx::new(t, p, &k);
    let d = filter::diagnose(t, p, &ctx);
    assert_ne!(d.reasons.len(), 0, "the pod must fit nowhere: {d}");
    preempt(t, p, &d, None, budgets, &k, &mut Rng::new(seed))
}

fn nominated(o: &Outcome) -> &Candidate {
    match o {
        Outcome::Nominated(c) => c,
        other => panic!("expected a nomination, got {other:?}"),
    }
}

fn names(pods: &[Arc<PodInfo>]) -> Vec<&str> {
    pods.iter().map(|p| p.name.as_str()).collect()
}

/// The nodes of `TestSelectBestCandidate`: `veryLargeRes` each.
fn best_candidate(nodes: &[&str], pods: &[(PodInfo, &str)], preemptor: PodInfo) -> Vec<String> {
    let nodes: Vec<NodeInfo> = nodes.iter().map(|n| node(n, VERY_LARGE, 110)).collect();
    let t = table(&nodes, pods);
    // Every seed: the random first row must not change which node wins (ties aside).
    (0..8)
        .map(|seed| nominated(&attempt(&t, &preemptor, &[], seed)).node.clone())
        .collect()
}

fn all_in(picked: &[String], expected: &[&str]) {
    for p in picked {
        assert!(
            expected.contains(&p.as_str()),
            "picked {p}, expected one of {expected:?}"
        );
    }
}

#[test]
fn fits_on_both_nodes_when_lower_priority_pods_are_preempted() {
    let picked = best_candidate(
        &["node1", "node2"],
        &[
            (pod("p1", MID, LARGE, 0), "node1"),
            (pod("p2", MID, LARGE, 0), "node2"),
        ],
        pod("p", HIGH, LARGE, 0),
    );
    all_in(&picked, &["node1", "node2"]);
}

#[test]
fn node_with_min_highest_priority_pod_is_picked() {
    let picked = best_candidate(
        &["node1", "node2", "node3"],
        &[
            (pod("p1.1", MID, MEDIUM, 0), "node1"),
            (pod("p1.2", MID, LARGE, 0), "node1"),
            (pod("p2.1", MID, MEDIUM, 0), "node2"),
            (pod("p2.2", LOW, MEDIUM, 0), "node2"),
            (pod("p3.1", LOW, MEDIUM, 0), "node3"),
            (pod("p3.2", LOW, MEDIUM, 0), "node3"),
        ],
        pod("p", HIGH, VERY_LARGE, 0),
    );
    all_in(&picked, &["node3"]);
}

#[test]
fn when_highest_priorities_are_the_same_minimum_sum_of_priorities_is_picked() {
    let picked = best_candidate(
        &["node1", "node2", "node3"],
        &[
            (pod("p1.1", MID, MEDIUM, 0), "node1"),
            (pod("p1.2", MID, LARGE, 0), "node1"),
            (pod("p2.1", MID, LARGE, 0), "node2"),
            (pod("p2.2", LOW, MEDIUM, 0), "node2"),
            (pod("p3.1", MID, MEDIUM, 0), "node3"),
            (pod("p3.2", MID, MEDIUM, 0), "node3"),
        ],
        pod("p", HIGH, VERY_LARGE, 0),
    );
    all_in(&picked, &["node2"]);
}

#[test]
fn when_highest_priority_and_sum_are_the_same_minimum_number_of_pods_is_picked() {
    let picked = best_candidate(
        &["node1", "node2", "node3"],
        &[
            (pod("p1.1", MID, SMALL, 0), "node1"),
            (pod("p1.2", NEG, SMALL, 0), "node1"),
            (pod("p1.3", MID, SMALL, 0), "node1"),
            (pod("p1.4", NEG, SMALL, 0), "node1"),
            (pod("p2.1", MID, LARGE, 0), "node2"),
            (pod("p2.2", NEG, MEDIUM, 0), "node2"),
            (pod("p3.1", MID, MEDIUM, 0), "node3"),
            (pod("p3.2", NEG, SMALL, 0), "node3"),
            (pod("p3.3", LOW, SMALL, 0), "node3"),
        ],
        pod("p", HIGH, VERY_LARGE, 0),
    );
    all_in(&picked, &["node2"]);
}

#[test]
fn sum_of_adjusted_priorities_is_considered() {
    let picked = best_candidate(
        &["node1", "node2", "node3"],
        &[
            (pod("p1.1", MID, SMALL, 0), "node1"),
            (pod("p1.2", NEG, SMALL, 0), "node1"),
            (pod("p1.3", NEG, SMALL, 0), "node1"),
            (pod("p2.1", MID, LARGE, 0), "node2"),
            (pod("p2.2", NEG, MEDIUM, 0), "node2"),
            (pod("p3.1", MID, MEDIUM, 0), "node3"),
            (pod("p3.2", NEG, SMALL, 0), "node3"),
            (pod("p3.3", LOW, SMALL, 0), "node3"),
        ],
        pod("p", HIGH, VERY_LARGE, 0),
    );
    all_in(&picked, &["node2"]);
}

#[test]
fn non_overlapping_lowest_high_priority_sum_priorities_and_number_of_pods() {
    let picked = best_candidate(
        &["node1", "node2", "node3", "node4"],
        &[
            (pod("p1.1", MID, SMALL, 0), "node1"),
            (pod("p1.2", LOW, SMALL, 0), "node1"),
            (pod("p1.3", LOW, SMALL, 0), "node1"),
            (pod("p2.1", HIGH, LARGE, 0), "node2"),
            (pod("p3.1", MID, MEDIUM, 0), "node3"),
            (pod("p3.2", LOW, SMALL, 0), "node3"),
            (pod("p3.3", LOW, SMALL, 0), "node3"),
            (pod("p3.4", LOW, MEDIUM, 0), "node3"),
            (pod("p4.1", MID, MEDIUM, 0), "node4"),
            (pod("p4.2", MID, SMALL, 0), "node4"),
            (pod("p4.3", MID, SMALL, 0), "node4"),
            (pod("p4.4", NEG, SMALL, 0), "node4"),
        ],
        pod("p", VERY_HIGH, VERY_LARGE, 0),
    );
    all_in(&picked, &["node1"]);
}

#[test]
fn same_priority_same_number_of_victims_different_start_time_per_node() {
    let picked = best_candidate(
        &["node1", "node2", "node3"],
        &[
            (pod("p1.1", MID, MEDIUM, 2), "node1"),
            (pod("p1.2", MID, MEDIUM, 2), "node1"),
            (pod("p2.1", MID, MEDIUM, 3), "node2"),
            (pod("p2.2", MID, MEDIUM, 3), "node2"),
            (pod("p3.1", MID, MEDIUM, 1), "node3"),
            (pod("p3.2", MID, MEDIUM, 1), "node3"),
        ],
        pod("p", HIGH, VERY_LARGE, 0),
    );
    all_in(&picked, &["node2"]);
}

#[test]
fn same_priority_same_number_of_victims_different_start_time_for_all_pods() {
    let picked = best_candidate(
        &["node1", "node2", "node3"],
        &[
            (pod("p1.1", MID, MEDIUM, 4), "node1"),
            (pod("p1.2", MID, MEDIUM, 2), "node1"),
            (pod("p2.1", MID, MEDIUM, 5), "node2"),
            (pod("p2.2", MID, MEDIUM, 1), "node2"),
            (pod("p3.1", MID, MEDIUM, 3), "node3"),
            (pod("p3.2", MID, MEDIUM, 6), "node3"),
        ],
        pod("p", HIGH, VERY_LARGE, 0),
    );
    all_in(&picked, &["node3"]);
}

#[test]
fn different_priority_same_number_of_victims_different_start_time_for_all_pods() {
    let picked = best_candidate(
        &["node1", "node2", "node3"],
        &[
            (pod("p1.1", LOW, MEDIUM, 4), "node1"),
            (pod("p1.2", MID, MEDIUM, 2), "node1"),
            (pod("p2.1", MID, MEDIUM, 6), "node2"),
            (pod("p2.2", LOW, MEDIUM, 1), "node2"),
            (pod("p3.1", LOW, MEDIUM, 3), "node3"),
            (pod("p3.2", MID, MEDIUM, 5), "node3"),
        ],
        pod("p", HIGH, VERY_LARGE, 0),
    );
    all_in(&picked, &["node2"]);
}

/// `onePodRes` of `TestPostFilter`: room for one pod, no CPU or memory to speak of.
fn one_pod(name: &str) -> NodeInfo {
    node(name, NONE, 1)
}

/// `nodeRes` of `TestPostFilter`: 200m CPU, 400 bytes.
fn small_node(name: &str) -> NodeInfo {
    node(name, (200, 400), 110)
}

#[test]
fn pod_with_higher_priority_can_be_made_schedulable() {
    let t = table(&[one_pod("node1")], &[(pod("p1", LOW, NONE, 0), "node1")]);
    let c = nominated(&attempt(&t, &pod("p", HIGH, NONE, 0), &[], 1)).clone();
    assert_eq!((c.node.as_str(), names(&c.victims)), ("node1", vec!["p1"]));
}

#[test]
fn pod_with_tied_priority_is_still_unschedulable() {
    let t = table(&[one_pod("node1")], &[(pod("p1", LOW, NONE, 0), "node1")]);
    let o = attempt(&t, &pod("p", LOW, NONE, 0), &[], 1);
    assert_eq!(
        o.message().as_deref(),
        Some(
            "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        )
    );
    assert_eq!(o.nominated_node(), Some(""));
}

#[test]
fn pod_can_be_made_schedulable_on_one_node() {
    let t = table(
        &[one_pod("node1"), one_pod("node2")],
        &[
            (pod("p1", HIGH, NONE, 0), "node1"),
            (pod("p2", LOW, NONE, 0), "node2"),
        ],
    );
    for seed in 0..8 {
        let o = attempt(&t, &pod("p", MID, NONE, 0), &[], seed);
        assert_eq!(nominated(&o).node, "node2");
    }
}

#[test]
fn pod_can_be_made_schedulable_on_min_highest_priority_node_with_budgets() {
    const KEY: &str = "test.kubernetes.io/is-violating-pdb";
    let t = table(
        &[one_pod("node1"), one_pod("node2")],
        &[
            (
                labelled(pod("p1", HIGH, NONE, 0), KEY, "non-violating"),
                "node1",
            ),
            (labelled(pod("p2", LOW, NONE, 0), KEY, "violating"), "node1"),
            (labelled(pod("p3", MID, NONE, 0), KEY, "violating"), "node2"),
        ],
    );
    let budget = |value: &str, allowed: i32| Budget {
        namespace: "default".into(),
        selector: Some(LabelSelector {
            match_labels: BTreeMap::from([(KEY.to_string(), value.to_string())]),
            ..LabelSelector::default()
        }),
        allowed,
        disrupted: Vec::new(),
    };
    // minAvailable 100% (none allowed), and minAvailable 0 (any number).
    let budgets = [budget("violating", 0), budget("non-violating", i32::MAX)];
    for seed in 0..8 {
        let o = attempt(&t, &pod("p", VERY_HIGH, NONE, 0), &budgets, seed);
        let c = nominated(&o);
        assert_eq!((c.node.as_str(), c.violations), ("node2", 1));
    }
}

#[test]
fn no_candidate_when_removing_lower_priority_pods_leaves_too_little() {
    let t = table(
        &[small_node("node1"), small_node("node2")],
        &[
            (pod("p1", LOW, NONE, 0), "node1"),
            (pod("p2", LOW, NONE, 0), "node2"),
        ],
    );
    let o = attempt(&t, &pod("p", HIGH, LARGE, 0), &[], 1);
    assert_eq!(
        o.message().as_deref(),
        Some("preemption: 0/2 nodes are available: 2 Insufficient cpu.")
    );
}

#[test]
fn no_candidate_with_mixed_reasons() {
    let t = table(
        &[one_pod("node1"), small_node("node2"), one_pod("node3")],
        &[
            (pod("p1", HIGH, NONE, 0), "node1"),
            (pod("p2", LOW, NONE, 0), "node2"),
            (pod("p3", HIGH, NONE, 0), "node3"),
        ],
    );
    let o = attempt(&t, &pod("p", HIGH, LARGE, 0), &[], 1);
    assert_eq!(
        o.message().as_deref(),
        Some(
            "preemption: 0/3 nodes are available: 1 Insufficient cpu, 2 No preemption victims \
             found for incoming pod."
        )
    );
}

#[test]
fn nodes_turned_away_for_good_are_not_helped() {
    let mut cordoned = one_pod("node2");
    cordoned.unschedulable = true;
    let t = table(
        &[one_pod("node1"), cordoned],
        &[
            (pod("p1", HIGH, NONE, 0), "node1"),
            (pod("p2", LOW, NONE, 0), "node2"),
        ],
    );
    let o = attempt(&t, &pod("p", HIGH, NONE, 0), &[], 1);
    assert_eq!(
        o.message().as_deref(),
        Some(
            "preemption: 0/2 nodes are available: 1 No preemption victims found for incoming \
             pod, 1 Preemption is not helpful for scheduling."
        )
    );
}

#[test]
fn a_pod_that_never_preempts_is_not_eligible() {
    let t = table(&[one_pod("node1")], &[(pod("p1", LOW, NONE, 0), "node1")]);
    let mut p = pod("p", HIGH, NONE, 0);
    p.never_preempts = true;
    let o = attempt(&t, &p, &[], 1);
    assert_eq!(
        o.message().as_deref(),
        Some("preemption: not eligible due to preemptionPolicy=Never.")
    );
    assert_eq!(o.nominated_node(), None);
}

#[test]
fn the_smallest_lower_pod_is_reprieved_first_the_least_important_goes() {
    // kube-scheduler's "medium priority pod is preempted, but lower priority one stays as
    // it is small": reprieving starts with the most important pod and keeps what fits.
    let t = table(
        &[node("node1", VERY_LARGE, 110)],
        &[
            (pod("a", LOW, SMALL, 0), "node1"),
            (pod("b", MID, LARGE, 0), "node1"),
        ],
    );
    let c = nominated(&attempt(&t, &pod("p", HIGH, LARGE, 0), &[], 1)).clone();
    // Room 500 with both gone: b back leaves 200 (too little), a back leaves 400.
    assert_eq!(names(&c.victims), vec!["b"]);
    // Equal priority: the one that started later goes.
    let t = table(
        &[node("node1", VERY_LARGE, 110)],
        &[
            (pod("late", MID, MEDIUM, 9), "node1"),
            (pod("early", MID, MEDIUM, 1), "node1"),
        ],
    );
    let c = nominated(&attempt(&t, &pod("p", HIGH, LARGE, 0), &[], 1)).clone();
    assert_eq!(names(&c.victims), vec!["late"]);
}

#[test]
fn a_budget_already_counting_a_pod_as_disrupted_spends_nothing_on_it() {
    let t = table(
        &[one_pod("node1")],
        &[(labelled(pod("p1", LOW, NONE, 0), "app", "db"), "node1")],
    );
    let mut budget = Budget {
        namespace: "default".into(),
        selector: Some(LabelSelector {
            match_labels: BTreeMap::from([("app".to_string(), "db".to_string())]),
            ..LabelSelector::default()
        }),
        allowed: 0,
        disrupted: Vec::new(),
    };
    let o = attempt(
        &t,
        &pod("p", HIGH, NONE, 0),
        std::slice::from_ref(&budget),
        1,
    );
    assert_eq!(nominated(&o).violations, 1);
    budget.disrupted.push("p1".into());
    let o = attempt(&t, &pod("p", HIGH, NONE, 0), &[budget], 1);
    assert_eq!(nominated(&o).violations, 0);
}

#[test]
fn a_nominated_pod_waits_for_its_victims() {
    let mut victim = pod("p1", LOW, NONE, 0);
    victim.terminating = true;
    victim.preempted = true;
    let t = table(&[one_pod("node1")], &[(victim, "node1")]);
    let p = pod("p", HIGH, NONE, 0);
    let k = Kernels::auto();
    let d = filter::diagnose(&t, &p, &PodCtx::new(&t, &p, &k));
    let o = preempt(&t, &p, &d, Some("node1"), &[], &k, &mut Rng::new(1));
    assert!(matches!(&o, Outcome::Waiting(n) if n == "node1"), "{o:?}");
    // Without the nomination it is a fresh preemption of the same pod.
    let o = preempt(&t, &p, &d, None, &[], &k, &mut Rng::new(1));
    assert_eq!(names(&nominated(&o).victims), vec!["p1"]);
}

#[test]
fn a_higher_pod_ends_lower_nominations_instead_of_preempting() {
    let mut t = table(&[one_pod("node1")], &[]);
    t.nominate(Arc::new(pod("low", LOW, NONE, 0)), "node1");
    let o = attempt(&t, &pod("p", HIGH, NONE, 0), &[], 1);
    let c = nominated(&o);
    assert!(c.victims.is_empty());
    assert_eq!(names(&c.displaced), vec!["low"]);
    // An equal nomination holds: the pod waits like any other.
    let o = attempt(&t, &pod("p", LOW, NONE, 0), &[], 1);
    assert!(matches!(o, Outcome::NotHelpful(_)), "{o:?}");
}

#[test]
fn nominations_hold_room_and_end_with_a_placement() {
    let mut t = table(&[node("node1", VERY_LARGE, 110)], &[]);
    let p = Arc::new(pod("p", HIGH, LARGE, 0));
    t.nominate(p.clone(), "node1");
    assert_eq!(t.req_cpu[0], 300);
    assert_eq!(t.lowest_priority(), Some(HIGH));
    t.add_pod(p.clone(), "node1", true).unwrap();
    assert!(t.nominated.is_empty());
    assert_eq!((t.req_cpu[0], t.req_pods[0]), (300, 1));
    t.remove_pod(&p.id());
    assert_eq!(
        (t.req_cpu[0], t.req_pods[0], t.lowest_priority()),
        (0, 0, None)
    );
    t.nominate(p.clone(), "node1");
    t.remove_node("node1");
    assert!(t.nominated.is_empty());
    assert_eq!(t.lowest_priority(), None);
}

#[test]
fn without_victims_counts_nodes_not_reasons() {
    let d = Diagnosis::of(
        3,
        [
            vec![
                Reason::Insufficient("cpu".into()),
                Reason::Insufficient("memory".into()),
            ],
            vec![Reason::Unschedulable],
            vec![Reason::TooManyPods],
        ],
    );
    assert_eq!(d.resolvable, 2);
    assert_eq!(
        without_victims(&d).to_string(),
        "0/3 nodes are available: 2 No preemption victims found for incoming pod, 1 Preemption \
         is not helpful for scheduling."
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// On any cluster: victims are of lower priority and on the chosen node, their going
    /// makes room for the pod there, and none of them could have stayed (each one back,
    /// the pod no longer fits).
    #[test]
    fn victims_make_room_and_none_could_stay(
        nodes in prop::collection::vec((1i64..8, 1i64..6), 1..6),
        pods in prop::collection::vec((0usize..6, 0i32..4, 0i64..4, 0i64..10), 0..30),
        want in (1i64..6, 1i32..5),
        seed in 0u64..1000,
    ) {
        let infos: Vec<NodeInfo> = nodes
            .iter()
            .enumerate()
            .map(|(i, &(cpu, slots))| node(&format!("n{i}"), (cpu * 100, 1 << 30), slots))
            .collect();
        let mut t = table(&infos, &[]);
        for (i, &(n, priority, cpu, start)) in pods.iter().enumerate() {
            let row = n % infos.len();
            let p = pod(&format!("p{i}"), priority, (cpu * 100, 0), start);
            if filter::room_without(&t, &p, row, &[]).is_empty() {
                t.add_pod(Arc::new(p), &infos[row].name, false).unwrap();
            }
        }
        let preemptor = pod("x", want.1, (want.0 * 100, 0), 0);
        let k = Kernels::auto();
        let ctx = PodCtx::new(&t, &preemptor, &k);
        let d = filter::diagnose(&t, &preemptor, &ctx);
        let none = Resources::default();
        prop_assume!((0..t.len()).all(|row| {
            !filter::check_row(&t, &preemptor, &ctx, row, &none, 0).is_empty()
        }));
        prop_assume!(d.nodes > 0);
        let o = preempt(&t, &preemptor, &d, None, &[], &k, &mut Rng::new(seed));
        if let Outcome::Nominated(c) = &o {
            let row = t.row(&c.node).unwrap();
            let on_node: Vec<String> = t.pods_on(row).iter().map(|e| e.info.name.clone()).collect();
            for v in &c.victims {
                prop_assert!(v.priority < preemptor.priority);
                prop_assert!(on_node.contains(&v.name));
            }
            let gone: Vec<&PodInfo> = c.victims.iter().map(|v| v.as_ref()).collect();
            prop_assert!(filter::room_without(&t, &preemptor, row, &gone).is_empty());
            for i in 0..gone.len() {
                let mut kept = gone.clone();
                kept.remove(i);
                prop_assert!(!filter::room_without(&t, &preemptor, row, &kept).is_empty());
            }
        } else {
            // Nothing nominated: no node would take the pod with all its lower pods gone.
            for row in 0..t.len() {
                let on = t.pods_on(row);
                let lower: Vec<&PodInfo> = on
                    .iter()
                    .filter(|e| e.info.priority < preemptor.priority)
                    .map(|e| e.info.as_ref())
                    .collect();
                prop_assert!(!filter::room_without(&t, &preemptor, row, &lower).is_empty());
            }
        }
    }
}
