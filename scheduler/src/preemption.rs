//! Preemption: what kube-scheduler's DefaultPreemption does for a pod that fits nowhere.
//! Lower-priority pods on one node are chosen to make room for it; the pod is nominated to
//! that node (its room held there, [`NodeTable::nominate`]) while the victims terminate.
//!
//! ```text
//!  eligible?  preemptionPolicy Never ─────────────────────────► not eligible
//!             a victim still terminating on its nominated node ► wait there
//!             nothing of lower priority in the table ──────────► not helpful
//!  each node  (from a random row, until enough candidates):
//!             fails only for room (resources, pod slots, ports), its other filters pass
//!             all lower-priority pods gone: does the pod fit? ─no► not a candidate
//!             reprieve the most important first, budget-violating ones before the rest:
//!             a pod stays if the preemptor still fits with it back
//!  pick       fewest budget violations, lowest highest victim priority, smallest sum of
//!             priorities, fewest victims, latest start of the highest-priority victims,
//!             then the first candidate
//! ```
//!
//! Where Skiff differs from kube-scheduler:
//! - Nodes that turn the pod away for inter-pod anti-affinity or topology spread are not
//!   candidates (kube-scheduler tries removing pods there too); a victim that one of the
//!   pod's required affinity terms selects is never chosen, so what the pod's affinity leans
//!   on stays.
//! - A nomination holds room for every pod (kube-scheduler: for pods of lower or equal
//!   priority). A higher-priority pod turned away by lower nominations alone finds a
//!   candidate without victims, and those nominations end, as kube-scheduler ends the
//!   lower nominations on the node it preempts on.

use std::cmp::Ordering;
use std::sync::Arc;

use skiff_proto::api::LabelSelector;

use crate::engine::Rng;
use crate::filter::{self, Diagnosis, PodCtx, Reason};
use crate::kernels::Kernels;
use crate::model::{PodInfo, Resources, term_namespaces, term_selects};
use crate::table::NodeTable;

/// A node no preemption can open for the pod (filters that removing pods cannot lift).
pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// A node with nothing of lower priority to preempt.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// The share of nodes, and the least number, the dry run looks for candidates on before it
/// stops (kube-scheduler's `minCandidateNodesPercentage` and `minCandidateNodesAbsolute`).
pub const CANDIDATE_PERCENT: usize = 10;
pub const CANDIDATE_MIN: usize = 100;

/// What preemption reads of a PodDisruptionBudget.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub namespace: String,
    pub selector: Option<LabelSelector>,
    /// `status.disruptionsAllowed`.
    pub allowed: i32,
    /// `status.disruptedPods`: pods whose eviction the API server has already counted.
    pub disrupted: Vec<String>,
}

impl Budget {
    /// A PodDisruptionBudget's JSON as preemption reads it.
    pub fn from_json(v: &serde_json::Value) -> Self {
        let text = |p: &str| v.pointer(p).and_then(|x| x.as_str()).unwrap_or_default();
        Budget {
            namespace: text("/metadata/namespace").to_owned(),
            selector: v
                .pointer("/spec/selector")
                .and_then(|s| serde_json::from_value(s.clone()).ok()),
            allowed: v
                .pointer("/status/disruptionsAllowed")
                .and_then(|x| x.as_i64())
                .map_or(0, |n| n.clamp(0, i64::from(i32::MAX)) as i32),
            disrupted: v
                .pointer("/status/disruptedPods")
                .and_then(|x| x.as_object())
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default(),
        }
    }

    /// Whether the budget covers `pod`: same namespace, and a selector that is not empty and
    /// selects it (for preemption an empty selector covers nothing, as in kube-scheduler).
    fn covers(&self, pod: &PodInfo) -> bool {
        self.namespace == pod.namespace
            && self.selector.as_ref().is_some_and(|s| {
                !(s.match_labels.is_empty() && s.match_expressions.is_empty())
                    && s.matches(&pod.labels)
            })
    }
}

/// A node where preemption would make room, and at what cost.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub node: String,
    /// The pods to preempt, most important first.
    pub victims: Vec<Arc<PodInfo>>,
    /// How many of them a PodDisruptionBudget would not allow to go.
    pub violations: usize,
    /// Lower-priority pods nominated to the node: their nominations end.
    pub displaced: Vec<Arc<PodInfo>>,
}

/// What preemption decided for one pod.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Not tried, in kube-scheduler's words.
    NotEligible(&'static str),
    /// Pods it preempted on its nominated node are still terminating: it waits for them
    /// there, nominated still.
    Waiting(String),
    /// No node can be opened; why, per node.
    NotHelpful(Diagnosis),
    /// Preempt on this node.
    Nominated(Candidate),
}

impl Outcome {
    /// The `preemption: …` part of the FailedScheduling message, as kube-scheduler adds it.
    pub fn message(&self) -> Option<String> {
        match self {
            Outcome::NotEligible(why) => Some(format!("preemption: {why}")),
            Outcome::NotHelpful(d) => Some(format!("preemption: {d}")),
            Outcome::Waiting(_) | Outcome::Nominated(_) => None,
        }
    }

    /// What the pod's `status.nominatedNodeName` should say: a node, empty (cleared), or
    /// `None` (left as it is).
    pub fn nominated_node(&self) -> Option<&str> {
        match self {
            Outcome::NotEligible(_) => None,
            Outcome::Waiting(node) => Some(node),
            Outcome::NotHelpful(_) => Some(""),
            Outcome::Nominated(c) => Some(&c.node),
        }
    }
}

/// kube-scheduler's order of importance: higher priority first, then the one that started
/// earlier (a pod not started yet counts as starting now, after every started one).
fn more_important(a: &PodInfo, b: &PodInfo) -> Ordering {
    b.priority.cmp(&a.priority).then_with(|| {
        a.start_time
            .unwrap_or(i64::MAX)
            .cmp(&b.start_time.unwrap_or(i64::MAX))
    })
}

/// Decides preemption for `pod`, which fit nowhere (`diagnosis`). `nominated` is the node an
/// earlier preemption nominated it to, if any.
pub fn preempt(
    table: &NodeTable,
    pod: &PodInfo,
    diagnosis: &Diagnosis,
    nominated: Option<&str>,
    budgets: &[Budget],
    k: &Kernels,
    rng: &mut Rng,
) -> Outcome {
    if pod.never_preempts {
        return Outcome::NotEligible("not eligible due to preemptionPolicy=Never.");
    }
    let lower_anywhere = table.lowest_priority().is_some_and(|p| p < pod.priority);
    if !lower_anywhere {
        return Outcome::NotHelpful(without_victims(diagnosis));
    }
    let ctx = PodCtx::new(table, pod, k);
    if let Some((node, row)) = nominated
        .filter(|n| !n.is_empty())
        .and_then(|n| Some((n, table.row(n)?)))
    {
        let mut terminating = false;
        table.each_pod_on(row, |e| {
            terminating |= e.info.priority < pod.priority && e.info.preempted;
        });
        // Unless the node now turns the pod away for good (a taint, its labels), it waits
        // for its victims there rather than preempting more.
        let resolvable = filter::check_row(table, pod, &ctx, row, &Resources::default(), 0)
            .iter()
            .all(Reason::resolvable_by_preemption);
        if terminating && resolvable {
            return Outcome::Waiting(node.to_owned());
        }
    }
    let n = table.len();
    let wanted = (n * CANDIDATE_PERCENT / 100).max(CANDIDATE_MIN).min(n);
    let offset = if n == 0 { 0 } else { rng.below(n) };
    let mut fine = Vec::new();
    let mut violating = Vec::new();
    let mut why_not = Vec::new();
    for i in 0..n {
        let row = (offset + i) % n;
        match candidate_on(table, pod, &ctx, row, budgets) {
            Ok(c) if c.violations == 0 => fine.push(c),
            Ok(c) => violating.push(c),
            Err(why) => why_not.push(why),
        }
        if !fine.is_empty() && fine.len() + violating.len() >= wanted {
            break;
        }
    }
    fine.append(&mut violating);
    match pick(&fine) {
        Some(i) => Outcome::Nominated(fine.swap_remove(i)),
        None => {
            let mut d = Diagnosis {
                nodes: n,
                ..Diagnosis::default()
            };
            for why in why_not {
                for r in why {
                    *d.reasons.entry(r).or_insert(0) += 1;
                }
            }
            Outcome::NotHelpful(d)
        }
    }
}

/// The dry run's answer when nothing in the table has a lower priority: every node that
/// only lacked room has no victims, the others cannot be helped.
fn without_victims(d: &Diagnosis) -> Diagnosis {
    let mut out = Diagnosis {
        nodes: d.nodes,
        ..Diagnosis::default()
    };
    for (why, count) in [
        (NO_VICTIMS, d.resolvable),
        (NOT_HELPFUL, d.nodes.saturating_sub(d.resolvable)),
    ] {
        if count > 0 {
            out.reasons.insert(why.to_owned(), count);
        }
    }
    out
}

/// kube-scheduler's `SelectVictimsOnNode` for row `row`: the fewest pods of lower priority,
/// the least important first, whose going makes room for `pod`; or why the row is no
/// candidate.
pub fn candidate_on(
    table: &NodeTable,
    pod: &PodInfo,
    ctx: &PodCtx,
    row: usize,
    budgets: &[Budget],
) -> Result<Candidate, Vec<String>> {
    let node = table.names[row].to_string();
    let why = filter::check_row(table, pod, ctx, row, &Resources::default(), 0);
    if why.is_empty() {
        // The table changed since the attempt and the pod fits: nothing to preempt.
        return Ok(Candidate {
            node,
            victims: Vec::new(),
            violations: 0,
            displaced: Vec::new(),
        });
    }
    if !why.iter().all(Reason::resolvable_by_preemption)
        || filter::term_reason(table, ctx, row).is_some()
    {
        return Err(vec![NOT_HELPFUL.to_owned()]);
    }
    // What the pod's required affinity selects stays: it may be what the pod leans on.
    let leaned_on = |p: &PodInfo| {
        pod.required_affinity.iter().any(|t| {
            term_selects(
                t.label_selector.as_ref(),
                &term_namespaces(t, &pod.namespace),
                &p.namespace,
                &p.labels,
            )
        })
    };
    let mut potential: Vec<Arc<PodInfo>> = Vec::new();
    table.each_pod_on(row, |e| {
        if e.info.priority < pod.priority && !leaned_on(&e.info) {
            potential.push(e.info.clone());
        }
    });
    let displaced: Vec<Arc<PodInfo>> = table
        .nominated_on(row)
        .filter(|p| p.priority < pod.priority)
        .cloned()
        .collect();
    if potential.is_empty() && displaced.is_empty() {
        return Err(vec![NO_VICTIMS.to_owned()]);
    }
    // Every potential victim and displaced nomination gone: does the pod fit at all?
    let mut gone: Vec<Arc<PodInfo>> = potential.iter().chain(&displaced).cloned().collect();
    let lacking = room_without_all(table, pod, row, &gone);
    if !lacking.is_empty() {
        return Err(lacking.iter().map(Reason::to_string).collect());
    }
    potential.sort_by(|a, b| more_important(a, b));
    let (violating, fine) = split_by_budgets(potential, budgets);
    let mut victims = Vec::new();
    let mut violations = 0;
    for (group, counts) in [(&violating, true), (&fine, false)] {
        for p in group {
            let at = gone
                .iter()
                .position(|g| Arc::ptr_eq(g, p))
                .expect("invariant: every potential victim starts out gone");
            let back = gone.swap_remove(at);
            if !room_without_all(table, pod, row, &gone).is_empty() {
                gone.push(back);
                victims.push(p.clone());
                violations += usize::from(counts);
            }
        }
    }
    if !violating.is_empty() && !fine.is_empty() {
        victims.sort_by(|a, b| more_important(a, b));
    }
    Ok(Candidate {
        node,
        victims,
        violations,
        displaced,
    })
}

/// [`filter::room_without`] for pods held by `Arc`.
fn room_without_all(
    table: &NodeTable,
    pod: &PodInfo,
    row: usize,
    gone: &[Arc<PodInfo>],
) -> Vec<Reason> {
    let gone: Vec<&PodInfo> = gone.iter().map(|p| p.as_ref()).collect();
    filter::room_without(table, pod, row, &gone)
}

/// kube-scheduler's `filterPodsWithPDBViolation`: the pods whose going would take a budget
/// below what it allows (counted in the given order, each budget's allowance spent pod by
/// pod), and the rest, each in the order given.
fn split_by_budgets(
    pods: Vec<Arc<PodInfo>>,
    budgets: &[Budget],
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i64> = budgets.iter().map(|b| i64::from(b.allowed)).collect();
    let mut violating = Vec::new();
    let mut fine = Vec::new();
    for p in pods {
        let mut violates = false;
        if !p.labels.is_empty() {
            for (i, b) in budgets.iter().enumerate() {
                if !b.covers(&p) || b.disrupted.iter().any(|n| *n == p.name) {
                    continue;
                }
                allowed[i] -= 1;
                violates |= allowed[i] < 0;
            }
        }
        if violates {
            violating.push(p);
        } else {
            fine.push(p);
        }
    }
    (violating, fine)
}

/// kube-scheduler's `pickOneNodeForPreemption`: the index of the best candidate. One that
/// needs no victim is taken first; then, in order, fewest budget violations, the lowest
/// highest victim priority, the smallest sum of victim priorities (each raised by 2³¹, so
/// more victims weigh more), fewest victims, and the latest start among the victims of the
/// highest priority; the first of those left.
pub fn pick(candidates: &[Candidate]) -> Option<usize> {
    if let Some(i) = candidates.iter().position(|c| c.victims.is_empty()) {
        return Some(i);
    }
    let score = |c: &Candidate| {
        let highest = c.victims[0].priority;
        let sum: i64 = c
            .victims
            .iter()
            .map(|v| i64::from(v.priority) + i64::from(i32::MAX) + 1)
            .sum();
        let earliest = c
            .victims
            .iter()
            .filter(|v| v.priority == highest)
            .map(|v| v.start_time.unwrap_or(i64::MAX))
            .min()
            .unwrap_or(i64::MAX);
        (
            -(c.violations as i64),
            -i64::from(highest),
            -sum,
            -(c.victims.len() as i64),
            earliest,
        )
    };
    let mut best: Option<(usize, _)> = None;
    for (i, c) in candidates.iter().enumerate() {
        let s = score(c);
        if best.as_ref().is_none_or(|(_, b)| s > *b) {
            best = Some((i, s));
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests;
