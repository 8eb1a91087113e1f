//! What filters and scores know of one pod signature beyond the table: its terms resolved
//! against the table with batch-local counts, its node-affinity bitmap, its requirement tables.

use skiff_proto::api::pod::{NodeSelectorRequirement, PodAffinityTerm};
use skiff_proto::api::{LabelSelector, TaintEffect};

use super::{node_affinity_mask, requirement_holds};
use crate::kernels::{self, Kernels};
use crate::model::{PodInfo, TAINT_UNSCHEDULABLE, term_namespaces, term_selects};
use crate::table::{NodeTable, TermKey, TermRole, owned_terms};

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
    each_term(pod, |selector, namespaces, topology_key, role| {
        table.term_for(selector, namespaces, topology_key, role);
    });
}

/// Whether every term [`register_terms`] would register for `pod` is registered already,
/// so a worker needs the table's write lock only for a signature the table has not seen.
pub fn terms_registered(table: &NodeTable, pod: &PodInfo) -> bool {
    let mut all = true;
    each_term(pod, |selector, namespaces, topology_key, role| {
        all = all && table.has_term(selector, namespaces, topology_key, role);
    });
    all
}

/// The terms [`register_terms`] would register for `pod` that the table lacks, counted
/// over the pods placed now ([`NodeTable::count_term`]), for [`NodeTable::insert_term`]
/// while nothing has changed the table since: under an upgradable read, the part of a
/// registration that reads every placed pod runs beside the other workers' placements.
/// Terms whose topology key has no column yet are left to [`register_terms`].
pub fn count_missing_terms(table: &NodeTable, pod: &PodInfo) -> Vec<crate::table::Term> {
    let mut counted = Vec::new();
    each_term(pod, |selector, namespaces, topology_key, role| {
        let key = TermKey::new(selector, namespaces, topology_key, role);
        if table.find_term(&key).is_none()
            && !counted.iter().any(|t: &crate::table::Term| t.key == key)
        {
            counted.extend(table.count_term(key, selector));
        }
    });
    counted
}

/// Every term a pod's filters and scores read, as (selector, namespaces, topology key,
/// role): its own terms, the terms it owns for others to match, its spread constraints.
fn each_term(
    pod: &PodInfo,
    mut f: impl FnMut(Option<&LabelSelector>, Vec<String>, &str, TermRole),
) {
    for t in pod
        .required_affinity
        .iter()
        .chain(&pod.required_anti_affinity)
        .chain(pod.preferred_terms.iter().map(|(_, t)| t))
    {
        f(
            t.label_selector.as_ref(),
            term_namespaces(t, &pod.namespace),
            &t.topology_key,
            TermRole::Matches,
        );
    }
    for (role, t) in owned_terms(pod) {
        f(
            t.label_selector.as_ref(),
            term_namespaces(t, &pod.namespace),
            &t.topology_key,
            role,
        );
    }
    for c in &pod.spread {
        f(
            c.label_selector.as_ref(),
            vec![pod.namespace.clone()],
            &c.topology_key,
            TermRole::Matches,
        );
    }
}

fn matches_key(pod: &PodInfo, term: &PodAffinityTerm, role: TermRole) -> TermKey {
    TermKey::new(
        term.label_selector.as_ref(),
        term_namespaces(term, &pod.namespace),
        &term.topology_key,
        role,
    )
}

/// Whether `pod` owns a term with exactly this key.
fn owns(pod: &PodInfo, key: &TermKey) -> bool {
    owned_terms(pod).any(|(role, t)| matches_key(pod, t, role) == *key)
}

impl PodCtx {
    /// Resolves the pod against the table. Terms must have been registered
    /// ([`register_terms`]); one that was not (the table changed since) is treated as empty.
    pub fn new(table: &NodeTable, pod: &PodInfo, k: &Kernels) -> Self {
        let self_selected = |t: &PodAffinityTerm| {
            term_selects(
                t.label_selector.as_ref(),
                &term_namespaces(t, &pod.namespace),
                &pod.namespace,
                &pod.labels,
            )
        };
        let slot = |t: &PodAffinityTerm, w: i32| {
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
            let selects = || term.selects(pod);
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
            let key = TermKey::new(
                c.label_selector.as_ref(),
                vec![pod.namespace.clone()],
                &c.topology_key,
                TermRole::Matches,
            );
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
                other: Default::default(),
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
            other: Default::default(),
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

    /// Whether a filter can turn `pod` away from a node because of other pods placed
    /// there: its own required affinity, anti-affinity or DoNotSchedule spread constraints,
    /// or a placed pod's required anti-affinity term that selects it. O(terms in the table),
    /// without building a context.
    pub fn depends_on_pods(table: &NodeTable, pod: &PodInfo) -> bool {
        !pod.required_affinity.is_empty()
            || !pod.required_anti_affinity.is_empty()
            || pod
                .spread
                .iter()
                .any(|c| c.when_unsatisfiable != "ScheduleAnyway")
            || table
                .terms
                .iter()
                .any(|term| term.key.role == TermRole::RequiredAnti && term.selects(pod))
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

pub(super) fn requirement_lut(
    table: &NodeTable,
    r: &NodeSelectorRequirement,
) -> Option<(u32, Vec<bool>)> {
    let key = table.label_keys.get(&r.key)?;
    let column = &table.labels[key as usize];
    let mut lut = vec![false; column.domains()];
    for (v, slot) in lut.iter_mut().enumerate() {
        *slot = requirement_holds(r, (v > 0).then(|| column.value(v as u32)));
    }
    Some((key, lut))
}
