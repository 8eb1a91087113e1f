//! Filters: which nodes can take a pod. The vector path ([`feasible`]) builds one bitmap over
//! every row; the scalar path ([`check_row`]) decides one row and says why not, for the
//! committer's re-check of an optimistic placement and for the FailedScheduling message.
//!
//! Filters, in kube-scheduler's order (a node is charged to the first one it fails):
//! NodeUnschedulable, NodeName, NodeAffinity (nodeSelector + required affinity),
//! TaintToleration (NoSchedule, NoExecute; not-ready and pressure conditions arrive as taints),
//! NodePorts, NodeResourcesFit, InterPodAffinity (required affinity, anti-affinity, and the
//! anti-affinity of pods already placed), PodTopologySpread (DoNotSchedule).

use std::collections::BTreeMap;
use std::fmt;

use skiff_proto::api::TaintEffect;
use skiff_proto::api::pod::NodeSelectorRequirement;

use crate::kernels::{self, Kernels};
use crate::model::PodInfo;
use crate::table::NodeTable;

mod ctx;
use ctx::requirement_lut;
pub use ctx::{
    PodCtx, SpreadSlot, TermSlot, count_missing_terms, register_terms, terms_registered,
};

/// Why a node cannot take a pod, worded as kube-scheduler words it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    Unschedulable,
    NodeName,
    NodeAffinity,
    Taint(String),
    Ports,
    Insufficient(String),
    TooManyPods,
    Affinity,
    AntiAffinity,
    ExistingAntiAffinity,
    SpreadMissingLabel,
    Spread,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Unschedulable => f.write_str("node(s) were unschedulable"),
            Reason::NodeName => f.write_str("node(s) didn't match the requested node name"),
            Reason::NodeAffinity => {
                f.write_str("node(s) didn't match Pod's node affinity/selector")
            }
            Reason::Taint(t) => write!(f, "node(s) had untolerated taint {{{t}}}"),
            Reason::Ports => {
                f.write_str("node(s) didn't have free ports for the requested pod ports")
            }
            Reason::Insufficient(r) => write!(f, "Insufficient {r}"),
            Reason::TooManyPods => f.write_str("Too many pods"),
            Reason::Affinity => f.write_str("node(s) didn't match pod affinity rules"),
            Reason::AntiAffinity => f.write_str("node(s) didn't match pod anti-affinity rules"),
            Reason::ExistingAntiAffinity => {
                f.write_str("node(s) didn't satisfy existing pods anti-affinity rules")
            }
            Reason::SpreadMissingLabel => f.write_str(
                "node(s) didn't match pod topology spread constraints (missing required label)",
            ),
            Reason::Spread => f.write_str("node(s) didn't match pod topology spread constraints"),
        }
    }
}

impl Reason {
    /// Whether removing pods from the node can lift it: the room a pod needs (resources, a
    /// pod slot, host ports). kube-scheduler's preemption also tries nodes that fail
    /// anti-affinity or topology spread; Skiff's does not (see `preemption`).
    pub fn resolvable_by_preemption(&self) -> bool {
        matches!(
            self,
            Reason::Ports | Reason::Insufficient(_) | Reason::TooManyPods
        )
    }
}

/// Reason counts over all nodes: kube-scheduler's "0/5000 nodes are available: …".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnosis {
    pub nodes: usize,
    pub reasons: BTreeMap<String, usize>,
    /// Nodes that turned the pod away only for the room it needs, which preemption can free
    /// ([`Reason::resolvable_by_preemption`]).
    pub resolvable: usize,
}

impl Diagnosis {
    /// The diagnosis of the reasons each of `nodes` nodes gave (one list per node).
    pub fn of(nodes: usize, per_node: impl IntoIterator<Item = Vec<Reason>>) -> Self {
        let mut d = Diagnosis {
            nodes,
            ..Diagnosis::default()
        };
        for why in per_node {
            if !why.is_empty() && why.iter().all(Reason::resolvable_by_preemption) {
                d.resolvable += 1;
            }
            for r in why {
                *d.reasons.entry(r.to_string()).or_insert(0) += 1;
            }
        }
        d
    }

    /// Whether some node turned the pod away only for other pods: charged to inter-pod
    /// affinity, anti-affinity or topology spread, the last filters, so it passed every
    /// other. A pod placed or relabelled can then make it fit (see `queue`).
    pub fn blocked_by_pods(&self) -> bool {
        [
            Reason::Affinity,
            Reason::AntiAffinity,
            Reason::ExistingAntiAffinity,
            Reason::Spread,
        ]
        .iter()
        .any(|r| self.reasons.contains_key(&r.to_string()))
    }
}

impl fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0/{} nodes are available", self.nodes)?;
        if self.reasons.is_empty() {
            return f.write_str(".");
        }
        f.write_str(": ")?;
        let parts: Vec<String> = self
            .reasons
            .iter()
            .map(|(r, n)| format!("{n} {r}"))
            .collect();
        write!(f, "{}.", parts.join(", "))
    }
}

/// One node-selector requirement against a node's value of its key (`None`: no such label).
pub fn requirement_holds(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    r.matches(value)
}

/// Rows passing NodeName (matchFields `metadata.name`) and NodeAffinity (nodeSelector and
/// required node affinity terms, ORed).
fn node_affinity_mask(table: &NodeTable, pod: &PodInfo, k: &Kernels) -> Vec<u64> {
    let n = table.len();
    let mut acc = kernels::all_ones(n);
    let mut tmp = vec![0u64; kernels::words(n)];
    for (key, value) in &pod.node_selector {
        match table
            .label(key)
            .and_then(|c| c.value_id(value).map(|v| (c, v)))
        {
            Some((column, v)) => {
                (k.eq)(&mut tmp, &column.col, v);
                kernels::and_counting(&mut acc, &tmp);
            }
            None => acc.fill(0),
        }
    }
    if let Some(sel) = &pod.required_node_affinity {
        let mut any = vec![0u64; kernels::words(n)];
        for term in &sel.node_selector_terms {
            if term.match_expressions.is_empty() && term.match_fields.is_empty() {
                continue; // an empty term matches nothing
            }
            let mut t = kernels::all_ones(n);
            for r in &term.match_expressions {
                match requirement_lut(table, r) {
                    Some((key, lut)) => {
                        (k.lut)(&mut tmp, &table.labels[key as usize].col, &lut);
                        kernels::and_counting(&mut t, &tmp);
                    }
                    None if requirement_holds(r, None) => {}
                    None => t.fill(0),
                }
            }
            for r in &term.match_fields {
                let mut m = vec![0u64; kernels::words(n)];
                for row in 0..n {
                    let ok =
                        r.key == "metadata.name" && requirement_holds(r, Some(&*table.names[row]));
                    kernels::set(&mut m, row, ok);
                }
                kernels::and_counting(&mut t, &m);
            }
            for (a, b) in any.iter_mut().zip(&t) {
                *a |= b;
            }
        }
        kernels::and_counting(&mut acc, &any);
    }
    acc
}

/// The feasibility bitmap for a pod over all rows, given its context (whose batch-local
/// term counts include the batch's earlier placements). Resource fit is against the table;
/// the engine patches the rows its batch has filled.
pub fn feasible(table: &NodeTable, pod: &PodInfo, ctx: &PodCtx, k: &Kernels) -> Vec<u64> {
    let n = table.len();
    let mut acc = kernels::all_ones(n);
    let mut tmp = vec![0u64; kernels::words(n)];
    if !ctx.tolerates_unschedulable {
        (k.eq)(&mut tmp, &table.unschedulable, 0);
        kernels::and_counting(&mut acc, &tmp);
    }
    kernels::and_counting(&mut acc, &ctx.node_affinity);
    disjoint(k, &mut tmp, &table.taints, &ctx.taint_hard, n);
    kernels::and_counting(&mut acc, &tmp);
    if ctx.port_mask.iter().any(|w| *w != 0) {
        disjoint(k, &mut tmp, &table.ports, &ctx.port_mask, n);
        kernels::and_counting(&mut acc, &tmp);
    }
    let r = &pod.requests;
    for (alloc, used, want) in [
        (&table.alloc_cpu, &table.req_cpu, r.milli_cpu),
        (&table.alloc_mem, &table.req_mem, r.memory),
        (&table.alloc_eph, &table.req_eph, r.ephemeral_storage),
        (&table.alloc_pods, &table.req_pods, 1),
    ] {
        if want > 0 {
            (k.fit)(&mut tmp, alloc, used, want);
            kernels::and_counting(&mut acc, &tmp);
        }
    }
    for (name, want) in &r.extended {
        match table.extended.get(name) {
            Some((alloc, used)) if *want > 0 => {
                (k.fit)(&mut tmp, alloc, used, *want);
                kernels::and_counting(&mut acc, &tmp);
            }
            Some(_) => {}
            None if *want > 0 => acc.fill(0),
            None => {}
        }
    }
    term_mask(table, ctx, k, &mut acc, &mut tmp);
    acc
}

/// `acc &= ` the inter-pod affinity and hard spread filters, from the batch-local counts.
pub fn term_mask(table: &NodeTable, ctx: &PodCtx, k: &Kernels, acc: &mut [u64], tmp: &mut [u64]) {
    for s in &ctx.affinity {
        if s.total == 0 && s.self_counts {
            continue; // the first pod of a group that selects itself may go anywhere
        }
        (k.domain_nonzero)(tmp, &table.labels[s.topo as usize].col, &s.counts);
        kernels::and_counting(acc, tmp);
    }
    for s in ctx.anti.iter().chain(&ctx.existing_anti) {
        if s.total == 0 {
            continue;
        }
        (k.domain_at_most)(tmp, &table.labels[s.topo as usize].col, &s.counts, 0, true);
        kernels::and_counting(acc, tmp);
    }
    for s in ctx.spread.iter().filter(|s| s.hard) {
        let self_add = u32::from(s.slot.self_counts);
        let limit = (s.min() + s.max_skew).saturating_sub(self_add);
        (k.domain_at_most)(
            tmp,
            &table.labels[s.slot.topo as usize].col,
            &s.slot.counts,
            limit,
            false,
        );
        kernels::and_counting(acc, tmp);
    }
}

fn disjoint(k: &Kernels, out: &mut [u64], rows: &crate::table::BitRows, mask: &[u64], n: usize) {
    if rows.words <= 1 {
        (k.disjoint1)(out, &rows.data[..n], mask.first().copied().unwrap_or(0));
        return;
    }
    for row in 0..n {
        let ok = rows.row(row).iter().zip(mask).all(|(a, b)| a & b == 0);
        kernels::set(out, row, ok);
    }
}

/// Every reason `row` cannot take the pod, for the first filter it fails (empty: it can).
/// `extra` is what the caller's batch has already put on the row beyond the table.
pub fn check_row(
    table: &NodeTable,
    pod: &PodInfo,
    ctx: &PodCtx,
    row: usize,
    extra: &crate::model::Resources,
    extra_pods: i64,
) -> Vec<Reason> {
    let info = &table.infos[row];
    if table.unschedulable[row] != 0 && !ctx.tolerates_unschedulable {
        return vec![Reason::Unschedulable];
    }
    if !kernels::get(&ctx.node_affinity, row) {
        let name_fails = pod.required_node_affinity.as_ref().is_some_and(|s| {
            s.node_selector_terms.iter().all(|t| {
                t.match_fields
                    .iter()
                    .any(|r| !requirement_holds(r, Some(&table.names[row])))
            }) && s
                .node_selector_terms
                .iter()
                .any(|t| !t.match_fields.is_empty())
        });
        return vec![if name_fails {
            Reason::NodeName
        } else {
            Reason::NodeAffinity
        }];
    }
    if let Some(t) = info
        .taints
        .iter()
        .find(|t| t.effect != TaintEffect::PreferNoSchedule && !pod.tolerates(t))
    {
        return vec![Reason::Taint(format!("{}: {}", t.key, t.value))];
    }
    if !ports_free(table, pod, row) {
        return vec![Reason::Ports];
    }
    let out = insufficient(table, pod, row, extra, extra_pods);
    if !out.is_empty() {
        return out;
    }
    term_reason(table, ctx, row).into_iter().collect()
}

/// The filters that read other pods' terms (InterPodAffinity, PodTopologySpread) for one
/// row: the first that turns the pod away, if any.
pub fn term_reason(table: &NodeTable, ctx: &PodCtx, row: usize) -> Option<Reason> {
    let dom = |topo: u32| table.labels[topo as usize].col[row];
    for s in &ctx.affinity {
        if !(s.total == 0 && s.self_counts) && s.at(dom(s.topo)) == 0 {
            return Some(Reason::Affinity);
        }
    }
    for s in &ctx.anti {
        if s.at(dom(s.topo)) > 0 {
            return Some(Reason::AntiAffinity);
        }
    }
    for s in &ctx.existing_anti {
        if s.at(dom(s.topo)) > 0 {
            return Some(Reason::ExistingAntiAffinity);
        }
    }
    for s in ctx.spread.iter().filter(|s| s.hard) {
        let d = dom(s.slot.topo);
        if d == 0 {
            return Some(Reason::SpreadMissingLabel);
        }
        if s.slot.at(d) + u32::from(s.slot.self_counts) > s.min() + s.max_skew {
            return Some(Reason::Spread);
        }
    }
    None
}

/// NodePorts and NodeResourcesFit for row `row` as if the pods `gone` had left it: what the
/// pod would still lack there (empty: it fits). Preemption's dry run.
pub fn room_without(
    table: &NodeTable,
    pod: &PodInfo,
    row: usize,
    gone: &[&PodInfo],
) -> Vec<Reason> {
    let mut freed = crate::model::Resources::default();
    for g in gone {
        freed.milli_cpu -= g.requests.milli_cpu;
        freed.memory -= g.requests.memory;
        freed.ephemeral_storage -= g.requests.ephemeral_storage;
        for (name, v) in &g.requests.extended {
            match freed.extended.iter_mut().find(|(n, _)| n == name) {
                Some((_, have)) => *have -= v,
                None => freed.extended.push((name.clone(), -v)),
            }
        }
    }
    let held = |port: &(String, i32)| {
        let leaving = gone.iter().filter(|g| g.host_ports.contains(port)).count() as u32;
        table.port_holders(row, port) > leaving
    };
    if pod.host_ports.iter().any(held) {
        return vec![Reason::Ports];
    }
    insufficient(table, pod, row, &freed, -(gone.len() as i64))
}

/// NodeResourcesFit for one row: every resource the pod does not get, given what the
/// caller's batch has already put there (`extra`).
fn insufficient(
    table: &NodeTable,
    pod: &PodInfo,
    row: usize,
    extra: &crate::model::Resources,
    extra_pods: i64,
) -> Vec<Reason> {
    let mut out = Vec::new();
    let r = &pod.requests;
    if table.req_pods[row] + extra_pods + 1 > table.alloc_pods[row] {
        out.push(Reason::TooManyPods);
    }
    for (name, alloc, used, extra, want) in [
        (
            "cpu",
            table.alloc_cpu[row],
            table.req_cpu[row],
            extra.milli_cpu,
            r.milli_cpu,
        ),
        (
            "memory",
            table.alloc_mem[row],
            table.req_mem[row],
            extra.memory,
            r.memory,
        ),
        (
            "ephemeral-storage",
            table.alloc_eph[row],
            table.req_eph[row],
            extra.ephemeral_storage,
            r.ephemeral_storage,
        ),
    ] {
        if want > 0 && alloc - used - extra < want {
            out.push(Reason::Insufficient(name.to_string()));
        }
    }
    for (name, want) in &r.extended {
        let free = table
            .extended
            .get(name)
            .map_or(0, |(a, u)| a[row] - u[row] - extra.extended(name));
        if *want > 0 && free < *want {
            out.push(Reason::Insufficient(name.clone()));
        }
    }
    out
}

/// NodePorts for one row: whether none of the pod's host ports is held there.
fn ports_free(table: &NodeTable, pod: &PodInfo, row: usize) -> bool {
    let taken = table.ports.row(row);
    !pod.host_ports.iter().any(|p| {
        table
            .port_ids
            .get(p)
            .is_some_and(|id| taken[id as usize / 64] >> (id % 64) & 1 == 1)
    })
}

/// The committer's re-check of a placement made against an older table, for a pod whose
/// fit other placements can change only through the row's resources and host ports: the
/// nodes are as the placement saw them (no node added, changed or removed since) and
/// [`PodCtx::depends_on_pods`] is false. Then a row that passed every filter then fails
/// now only for NodePorts or NodeResourcesFit, and this is [`check_row`] less the filters
/// that cannot have changed: O(1), where `check_row` needs a [`PodCtx`], O(nodes) to build.
/// `extra` requests and `extra_pods` pods are on the row beyond what the table counts (the
/// committer's claims not counted yet).
pub fn still_fits(
    table: &NodeTable,
    pod: &PodInfo,
    row: usize,
    extra: &crate::model::Resources,
    extra_pods: i64,
) -> bool {
    ports_free(table, pod, row) && fits_resources(table, pod, row, extra, extra_pods)
}

/// Whether one more pod fits `row`'s resources (the batch has put `extra` there already).
pub fn fits_resources(
    table: &NodeTable,
    pod: &PodInfo,
    row: usize,
    extra: &crate::model::Resources,
    extra_pods: i64,
) -> bool {
    insufficient(table, pod, row, extra, extra_pods).is_empty()
}

/// Counts, over every row, the reasons the pod fits nowhere.
pub fn diagnose(table: &NodeTable, pod: &PodInfo, ctx: &PodCtx) -> Diagnosis {
    let none = crate::model::Resources::default();
    Diagnosis::of(
        table.len(),
        (0..table.len()).map(|row| check_row(table, pod, ctx, row, &none, 0)),
    )
}
