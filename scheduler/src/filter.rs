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
use crate::model::{PodInfo, TAINT_UNSCHEDULABLE, term_namespaces, term_selects};
use crate::table::{NodeTable, TermKey, TermRole, owned_terms};

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

/// Reason counts over all nodes: kube-scheduler's "0/5000 nodes are available: …".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnosis {
    pub nodes: usize,
    pub reasons: BTreeMap<String, usize>,
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

/// One counted term the pod depends on, with batch-local counts per domain.
#[derive(Debug, Clone)]
pub struct TermSlot {
    pub term: usize,
    /// Label column of the topology key.
    pub topo: u32,
    /// Counts per domain, as of the batch start plus the batch's own placements.
    pub counts: Vec<u32>,
    pub total: u64,
    /// Whether a pod of this signature, once placed, adds to the count.
    pub self_counts: bool,
    pub weight: i32,
}

impl TermSlot {
    fn new(table: &NodeTable, term: usize, self_counts: bool, weight: i32) -> Self {
        let t = &table.terms[term];
        let mut counts = t.by_domain.clone();
        counts.resize(table.labels[t.topo as usize].domains(), 0);
        TermSlot {
            term,
            topo: t.topo,
            counts,
            total: t.total,
            self_counts,
            weight,
        }
    }

    pub fn at(&self, domain: u32) -> u32 {
        if domain == 0 {
            0
        } else {
            self.counts.get(domain as usize).copied().unwrap_or(0)
        }
    }

    fn place(&mut self, domain: u32) {
        if self.self_counts {
            self.total += 1;
            if domain > 0 {
                let d = domain as usize;
                if self.counts.len() <= d {
                    self.counts.resize(d + 1, 0);
                }
                self.counts[d] += 1;
            }
        }
    }
}

/// A topology spread constraint with its counts over the eligible nodes.
#[derive(Debug, Clone)]
pub struct SpreadSlot {
    pub slot: TermSlot,
    pub max_skew: u32,
    pub min_domains: usize,
    pub hard: bool,
    /// Domains that have at least one eligible node.
    pub present: Vec<bool>,
}

impl SpreadSlot {
    /// The smallest count over present domains (0 when fewer than minDomains exist).
    pub fn min(&self) -> u32 {
        let mut n = 0;
        let mut min = u32::MAX;
        for (d, &p) in self.present.iter().enumerate() {
            if p {
                n += 1;
                min = min.min(self.slot.counts.get(d).copied().unwrap_or(0));
            }
        }
        if n == 0 || n < self.min_domains {
            0
        } else {
            min
        }
    }
}

/// Everything about one pod signature that filters and scores need beyond the table:
/// resolved terms with batch-local counts, the node-affinity bitmap, requirement tables.
#[derive(Debug, Clone)]
pub struct PodCtx {
    pub affinity: Vec<TermSlot>,
    pub anti: Vec<TermSlot>,
    /// Required anti-affinity terms of placed pods that select this pod.
    pub existing_anti: Vec<TermSlot>,
    /// The pod's preferred terms, and placed pods' terms that select it (signed weights).
    pub preferred: Vec<TermSlot>,
    pub spread: Vec<SpreadSlot>,
    /// Rows passing NodeName + NodeAffinity (also the spread constraints' eligible nodes).
    pub node_affinity: Vec<u64>,
    /// Untolerated NoSchedule/NoExecute and PreferNoSchedule taint masks (word per id word).
    pub taint_hard: Vec<u64>,
    pub taint_soft: Vec<u64>,
    pub port_mask: Vec<u64>,
    pub tolerates_unschedulable: bool,
    /// Bumped whenever a batch placement changes a term count.
    pub version: u64,
}

/// Registers every term a pod's filters and scores read, so the table counts them. Needs
/// the table mutably; [`PodCtx::new`] then reads it shared.
pub fn register_terms(table: &mut NodeTable, pod: &PodInfo) {
    for t in pod
        .required_affinity
        .iter()
        .chain(&pod.required_anti_affinity)
    {
        table.term(t, &pod.namespace, TermRole::Matches);
    }
    for (_, t) in &pod.preferred_terms {
        table.term(t, &pod.namespace, TermRole::Matches);
    }
    for (role, t) in owned_terms(pod) {
        table.term(t, &pod.namespace, role);
    }
    for c in &pod.spread {
        table.term_for(
            c.label_selector.as_ref(),
            vec![pod.namespace.clone()],
            &c.topology_key,
            TermRole::Matches,
        );
    }
}

fn matches_key(
    pod: &PodInfo,
    term: &skiff_proto::api::pod::PodAffinityTerm,
    role: TermRole,
) -> TermKey {
    TermKey {
        selector: term
            .label_selector
            .as_ref()
            .map(|s| serde_json::to_string(s).unwrap_or_default())
            .unwrap_or_default(),
        namespaces: term_namespaces(term, &pod.namespace),
        topology_key: term.topology_key.clone(),
        role,
    }
}

/// Whether `pod` owns a term with exactly this key.
fn owns(pod: &PodInfo, key: &TermKey) -> bool {
    owned_terms(pod).any(|(role, t)| matches_key(pod, t, role) == *key)
}

impl PodCtx {
    /// Resolves the pod against the table. Terms must have been registered
    /// ([`register_terms`]); one that was not (the table changed since) is treated as empty.
    pub fn new(table: &NodeTable, pod: &PodInfo, k: &Kernels) -> Self {
        let self_selected = |t: &skiff_proto::api::pod::PodAffinityTerm| {
            term_selects(
                t.label_selector.as_ref(),
                &term_namespaces(t, &pod.namespace),
                &pod.namespace,
                &pod.labels,
            )
        };
        let slot = |t: &skiff_proto::api::pod::PodAffinityTerm, w: i32| {
            table
                .find_term(&matches_key(pod, t, TermRole::Matches))
                .map(|id| TermSlot::new(table, id, self_selected(t), w))
        };
        let affinity = pod
            .required_affinity
            .iter()
            .filter_map(|t| slot(t, 0))
            .collect();
        let anti = pod
            .required_anti_affinity
            .iter()
            .filter_map(|t| slot(t, 0))
            .collect();
        let mut preferred: Vec<TermSlot> = pod
            .preferred_terms
            .iter()
            .filter_map(|(w, t)| slot(t, *w))
            .collect();
        let mut existing_anti = Vec::new();
        for (id, term) in table.terms.iter().enumerate() {
            let selects = || {
                term_selects(
                    term.selector.as_ref(),
                    &term.key.namespaces,
                    &pod.namespace,
                    &pod.labels,
                )
            };
            match term.key.role {
                TermRole::RequiredAnti if selects() => {
                    existing_anti.push(TermSlot::new(table, id, owns(pod, &term.key), 0));
                }
                TermRole::Preferred(w) if selects() => {
                    preferred.push(TermSlot::new(table, id, owns(pod, &term.key), w));
                }
                _ => {}
            }
        }
        let n = table.len();
        let node_affinity = node_affinity_mask(table, pod, k);
        let mut spread = Vec::new();
        for c in &pod.spread {
            let key = TermKey {
                selector: c
                    .label_selector
                    .as_ref()
                    .map(|s| serde_json::to_string(s).unwrap_or_default())
                    .unwrap_or_default(),
                namespaces: vec![pod.namespace.clone()],
                topology_key: c.topology_key.clone(),
                role: TermRole::Matches,
            };
            let Some(id) = table.find_term(&key) else {
                continue;
            };
            let term = &table.terms[id];
            let column = &table.labels[term.topo as usize];
            // Counts over eligible nodes only (nodeAffinityPolicy: Honor).
            let mut counts = vec![0u32; column.domains()];
            let mut present = vec![false; column.domains()];
            for row in 0..n {
                let d = column.col[row] as usize;
                if d != 0 && kernels::get(&node_affinity, row) {
                    counts[d] += term.per_node[row];
                    present[d] = true;
                }
            }
            let self_counts = c
                .label_selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.labels));
            spread.push(SpreadSlot {
                slot: TermSlot {
                    term: id,
                    topo: term.topo,
                    counts,
                    total: term.total,
                    self_counts,
                    weight: 0,
                },
                max_skew: c.max_skew.max(1) as u32,
                min_domains: c.min_domains.unwrap_or(1).max(1) as usize,
                hard: c.when_unsatisfiable != "ScheduleAnyway",
                present,
            });
        }
        let mut taint_hard = vec![0u64; table.taints.words.max(1)];
        let mut taint_soft = vec![0u64; table.taints.words.max(1)];
        for id in 0..table.taint_ids.len() as u32 {
            let (key, value, effect) = table.taint_ids.key(id);
            let taint = skiff_proto::api::Taint {
                key: key.clone(),
                value: value.clone(),
                effect: *effect,
                time_added: None,
            };
            if pod.tolerates(&taint) {
                continue;
            }
            let mask = if *effect == TaintEffect::PreferNoSchedule {
                &mut taint_soft
            } else {
                &mut taint_hard
            };
            mask[id as usize / 64] |= 1 << (id % 64);
        }
        let mut port_mask = vec![0u64; table.ports.words.max(1)];
        for p in &pod.host_ports {
            if let Some(id) = table.port_ids.get(p) {
                port_mask[id as usize / 64] |= 1 << (id % 64);
            }
        }
        let tolerates_unschedulable = pod.tolerates(&skiff_proto::api::Taint {
            key: TAINT_UNSCHEDULABLE.into(),
            value: String::new(),
            effect: TaintEffect::NoSchedule,
            time_added: None,
        });
        PodCtx {
            affinity,
            anti,
            existing_anti,
            preferred,
            spread,
            node_affinity,
            taint_hard,
            taint_soft,
            port_mask,
            tolerates_unschedulable,
            version: 0,
        }
    }

    /// Whether any filter or score depends on other pods' placement.
    pub fn has_terms(&self) -> bool {
        !self.affinity.is_empty()
            || !self.anti.is_empty()
            || !self.existing_anti.is_empty()
            || !self.preferred.is_empty()
            || !self.spread.is_empty()
    }

    /// Counts a pod of this signature placed on `row` (batch-local).
    pub fn place(&mut self, table: &NodeTable, row: usize) {
        let dom = |topo: u32| table.labels[topo as usize].col[row];
        let mut changed = false;
        for s in self
            .affinity
            .iter_mut()
            .chain(&mut self.anti)
            .chain(&mut self.existing_anti)
            .chain(&mut self.preferred)
        {
            if s.self_counts {
                s.place(dom(s.topo));
                changed = true;
            }
        }
        for s in &mut self.spread {
            if s.slot.self_counts {
                s.slot.place(dom(s.slot.topo));
                changed = true;
            }
        }
        if changed {
            self.version += 1;
        }
    }
}

fn requirement_lut(table: &NodeTable, r: &NodeSelectorRequirement) -> Option<(u32, Vec<bool>)> {
    let key = table.label_keys.get(&r.key)?;
    let column = &table.labels[key as usize];
    let mut lut = vec![false; column.domains()];
    for (v, slot) in lut.iter_mut().enumerate() {
        *slot = requirement_holds(r, (v > 0).then(|| column.value(v as u32)));
    }
    Some((key, lut))
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
                    let ok = r.key == "metadata.name"
                        && requirement_holds(r, Some(table.names[row].as_str()));
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
    let taken = table.ports.row(row);
    if pod.host_ports.iter().any(|p| {
        table
            .port_ids
            .get(p)
            .is_some_and(|id| taken[id as usize / 64] >> (id % 64) & 1 == 1)
    }) {
        return vec![Reason::Ports];
    }
    let out = insufficient(table, pod, row, extra, extra_pods);
    if !out.is_empty() {
        return out;
    }
    let dom = |topo: u32| table.labels[topo as usize].col[row];
    for s in &ctx.affinity {
        if !(s.total == 0 && s.self_counts) && s.at(dom(s.topo)) == 0 {
            return vec![Reason::Affinity];
        }
    }
    for s in &ctx.anti {
        if s.at(dom(s.topo)) > 0 {
            return vec![Reason::AntiAffinity];
        }
    }
    for s in &ctx.existing_anti {
        if s.at(dom(s.topo)) > 0 {
            return vec![Reason::ExistingAntiAffinity];
        }
    }
    for s in ctx.spread.iter().filter(|s| s.hard) {
        let d = dom(s.slot.topo);
        if d == 0 {
            return vec![Reason::SpreadMissingLabel];
        }
        if s.slot.at(d) + u32::from(s.slot.self_counts) > s.min() + s.max_skew {
            return vec![Reason::Spread];
        }
    }
    Vec::new()
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
    let mut reasons = BTreeMap::new();
    let none = crate::model::Resources::default();
    for row in 0..table.len() {
        for r in check_row(table, pod, ctx, row, &none, 0) {
            *reasons.entry(r.to_string()).or_insert(0) += 1;
        }
    }
    Diagnosis {
        nodes: table.len(),
        reasons,
    }
}
