//! The reference scheduler: every filter and score written the plain way, node by node and
//! pod by pod, from the extracted objects, with no table, interning, bitmaps or batching.
//! Property tests hold the engine to it: same feasible set, same scores bit for bit, same
//! choice for the same seed. It is slow on purpose (quadratic), and only for tests.

use std::sync::Arc;

use skiff_proto::api::TaintEffect;

use crate::engine::Rng;
use crate::filter::requirement_holds;
use crate::kernels::{self, weight};
use crate::model::{NodeInfo, PodInfo, TAINT_UNSCHEDULABLE, term_namespaces, term_selects};
use crate::table::HARD_POD_AFFINITY_WEIGHT;

/// Nodes in row order and the pods placed on them (by row).
#[derive(Debug, Default, Clone)]
pub struct Cluster {
    pub nodes: Vec<NodeInfo>,
    pub placed: Vec<(Arc<PodInfo>, usize)>,
}

fn domain<'a>(node: &'a NodeInfo, key: &str) -> Option<&'a String> {
    node.labels.get(key)
}

fn same_domain(a: &NodeInfo, b: &NodeInfo, key: &str) -> bool {
    matches!((domain(a, key), domain(b, key)), (Some(x), Some(y)) if x == y)
}

impl Cluster {
    fn pods_on(&self, row: usize) -> impl Iterator<Item = &PodInfo> {
        self.placed
            .iter()
            .filter(move |(_, r)| *r == row)
            .map(|(p, _)| p.as_ref())
    }

    /// NodeName + NodeAffinity (also the spread constraints' eligible nodes).
    pub fn node_affinity(&self, pod: &PodInfo, row: usize) -> bool {
        let node = &self.nodes[row];
        if !pod
            .node_selector
            .iter()
            .all(|(k, v)| node.labels.get(k) == Some(v))
        {
            return false;
        }
        match &pod.required_node_affinity {
            None => true,
            Some(sel) => sel.node_selector_terms.iter().any(|t| {
                (!t.match_expressions.is_empty() || !t.match_fields.is_empty())
                    && t.match_expressions
                        .iter()
                        .all(|r| requirement_holds(r, node.labels.get(&r.key).map(String::as_str)))
                    && t.match_fields
                        .iter()
                        .all(|r| r.key == "metadata.name" && requirement_holds(r, Some(&node.name)))
            }),
        }
    }

    /// Spread counts for one constraint: per domain value, matching pods on eligible nodes,
    /// and the minimum over the domains present.
    fn spread_counts(
        &self,
        pod: &PodInfo,
        c: &skiff_proto::api::pod::TopologySpreadConstraint,
    ) -> (std::collections::BTreeMap<String, u32>, u32) {
        let mut counts = std::collections::BTreeMap::new();
        for (row, node) in self.nodes.iter().enumerate() {
            let Some(d) = domain(node, &c.topology_key) else {
                continue;
            };
            if !self.node_affinity(pod, row) {
                continue;
            }
            let n = self
                .pods_on(row)
                .filter(|p| {
                    term_selects(
                        c.label_selector.as_ref(),
                        std::slice::from_ref(&pod.namespace),
                        &p.namespace,
                        &p.labels,
                    )
                })
                .count() as u32;
            *counts.entry(d.clone()).or_insert(0) += n;
        }
        let min_domains = c.min_domains.unwrap_or(1).max(1) as usize;
        let min = if counts.is_empty() || counts.len() < min_domains {
            0
        } else {
            counts.values().copied().min().unwrap_or(0)
        };
        (counts, min)
    }

    /// Every filter, for one node.
    pub fn feasible(&self, pod: &PodInfo, row: usize) -> bool {
        let node = &self.nodes[row];
        let unsched = skiff_proto::api::Taint {
            key: TAINT_UNSCHEDULABLE.into(),
            value: String::new(),
            effect: TaintEffect::NoSchedule,
            time_added: None,
            other: Default::default(),
        };
        if node.unschedulable && !pod.tolerates(&unsched) {
            return false;
        }
        if !self.node_affinity(pod, row) {
            return false;
        }
        if node
            .taints
            .iter()
            .any(|t| t.effect != TaintEffect::PreferNoSchedule && !pod.tolerates(t))
        {
            return false;
        }
        let on: Vec<&PodInfo> = self.pods_on(row).collect();
        if on
            .iter()
            .any(|p| p.host_ports.iter().any(|hp| pod.host_ports.contains(hp)))
        {
            return false;
        }
        let sum = |f: &dyn Fn(&PodInfo) -> i64| on.iter().map(|p| f(p)).sum::<i64>();
        let r = &pod.requests;
        let a = &node.allocatable;
        if on.len() as i64 + 1 > node.allocatable_pods {
            return false;
        }
        if r.milli_cpu > 0 && a.milli_cpu - sum(&|p| p.requests.milli_cpu) < r.milli_cpu {
            return false;
        }
        if r.memory > 0 && a.memory - sum(&|p| p.requests.memory) < r.memory {
            return false;
        }
        if r.ephemeral_storage > 0
            && a.ephemeral_storage - sum(&|p| p.requests.ephemeral_storage) < r.ephemeral_storage
        {
            return false;
        }
        for (name, want) in &r.extended {
            if *want > 0 && a.extended(name) - sum(&|p| p.requests.extended(name)) < *want {
                return false;
            }
        }
        // Inter-pod affinity.
        let selects = |t: &skiff_proto::api::pod::PodAffinityTerm, owner_ns: &str, p: &PodInfo| {
            term_selects(
                t.label_selector.as_ref(),
                &term_namespaces(t, owner_ns),
                &p.namespace,
                &p.labels,
            )
        };
        for t in &pod.required_affinity {
            let matching: Vec<usize> = self
                .placed
                .iter()
                .filter(|(p, _)| selects(t, &pod.namespace, p))
                .map(|(_, r)| *r)
                .collect();
            if matching.is_empty() && selects(t, &pod.namespace, pod) {
                continue;
            }
            if !matching
                .iter()
                .any(|&r| same_domain(&self.nodes[r], node, &t.topology_key))
            {
                return false;
            }
        }
        for t in &pod.required_anti_affinity {
            if self.placed.iter().any(|(p, r)| {
                selects(t, &pod.namespace, p) && same_domain(&self.nodes[*r], node, &t.topology_key)
            }) {
                return false;
            }
        }
        for (p, r) in &self.placed {
            for t in &p.required_anti_affinity {
                if selects(t, &p.namespace, pod)
                    && same_domain(&self.nodes[*r], node, &t.topology_key)
                {
                    return false;
                }
            }
        }
        for c in pod
            .spread
            .iter()
            .filter(|c| c.when_unsatisfiable != "ScheduleAnyway")
        {
            let Some(d) = domain(node, &c.topology_key) else {
                return false;
            };
            let (counts, min) = self.spread_counts(pod, c);
            let self_add = u32::from(
                c.label_selector
                    .as_ref()
                    .is_some_and(|s| s.matches(&pod.labels)),
            );
            let here = counts.get(d).copied().unwrap_or(0);
            if here + self_add > min + c.max_skew.max(1) as u32 {
                return false;
            }
        }
        true
    }

    /// Totals per node (−inf where infeasible), in the engine's order of operations.
    pub fn totals(&self, pod: &PodInfo) -> Vec<f32> {
        let n = self.nodes.len();
        let feasible: Vec<bool> = (0..n).map(|r| self.feasible(pod, r)).collect();
        let mut out = vec![f32::NEG_INFINITY; n];
        // Raw components.
        let taint: Vec<f32> = self
            .nodes
            .iter()
            .map(|node| {
                let mut seen: Vec<(&str, &str, TaintEffect)> = Vec::new();
                for t in &node.taints {
                    let k = (t.key.as_str(), t.value.as_str(), t.effect);
                    if t.effect == TaintEffect::PreferNoSchedule
                        && !pod.tolerates(t)
                        && !seen.contains(&k)
                    {
                        seen.push(k);
                    }
                }
                seen.len() as f32
            })
            .collect();
        let node_aff: Vec<f32> =
            self.nodes
                .iter()
                .map(|node| {
                    let mut s = 0f32;
                    for term in &pod.preferred_node_affinity {
                        let p = &term.preference;
                        if p.match_expressions.is_empty() && p.match_fields.is_empty() {
                            continue;
                        }
                        let ok = p.match_expressions.iter().all(|r| {
                            requirement_holds(r, node.labels.get(&r.key).map(String::as_str))
                        }) && p.match_fields.iter().all(|r| {
                            r.key == "metadata.name" && requirement_holds(r, Some(&node.name))
                        });
                        if ok {
                            s += term.weight as f32;
                        }
                    }
                    s
                })
                .collect();
        let soft: Vec<_> = pod
            .spread
            .iter()
            .filter(|c| c.when_unsatisfiable == "ScheduleAnyway")
            .collect();
        let spread: Vec<f32> = {
            let per: Vec<_> = soft.iter().map(|c| self.spread_counts(pod, c)).collect();
            self.nodes
                .iter()
                .map(|node| {
                    let mut v = 0f32;
                    for (c, (counts, _)) in soft.iter().zip(&per) {
                        if v < 0.0 {
                            continue;
                        }
                        match domain(node, &c.topology_key) {
                            None => v = -1.0,
                            Some(d) => {
                                let w = (counts.len() as f32 + 2.0).ln();
                                v += counts.get(d).copied().unwrap_or(0) as f32 * w;
                            }
                        }
                    }
                    v
                })
                .collect()
        };
        let inter: Vec<f32> = self
            .nodes
            .iter()
            .map(|node| {
                let mut v = 0f32;
                for (w, t) in &pod.preferred_terms {
                    let c = self
                        .placed
                        .iter()
                        .filter(|(p, r)| {
                            term_selects(
                                t.label_selector.as_ref(),
                                &term_namespaces(t, &pod.namespace),
                                &p.namespace,
                                &p.labels,
                            ) && same_domain(&self.nodes[*r], node, &t.topology_key)
                        })
                        .count();
                    v += *w as f32 * c as f32;
                }
                for (p, r) in &self.placed {
                    let owned = p
                        .required_affinity
                        .iter()
                        .map(|t| (HARD_POD_AFFINITY_WEIGHT, t))
                        .chain(p.preferred_terms.iter().map(|(w, t)| (*w, t)));
                    for (w, t) in owned {
                        if term_selects(
                            t.label_selector.as_ref(),
                            &term_namespaces(t, &p.namespace),
                            &pod.namespace,
                            &pod.labels,
                        ) && same_domain(&self.nodes[*r], node, &t.topology_key)
                        {
                            v += w as f32;
                        }
                    }
                }
                v
            })
            .collect();
        let image: Vec<f32> = self
            .nodes
            .iter()
            .map(|node| {
                let mut s = 0f32;
                for img in &pod.images {
                    if let Some((_, size)) = node.images.iter().find(|(n, _)| n == img) {
                        let with = self
                            .nodes
                            .iter()
                            .filter(|x| x.images.iter().any(|(n, _)| n == img))
                            .count();
                        s += *size as f32 * (with as f32 / n as f32);
                    }
                }
                kernels::image_score(s, pod.images.len().max(1) as f32)
            })
            .collect();
        let over = |v: &[f32], skip_negative: bool| {
            let mut min = f32::INFINITY;
            let mut max = f32::NEG_INFINITY;
            for (r, x) in v.iter().enumerate() {
                if feasible[r] && !(skip_negative && *x < 0.0) {
                    min = min.min(*x);
                    max = max.max(*x);
                }
            }
            if min > max { (0.0, 0.0) } else { (min, max) }
        };
        let (_, taint_max) = over(&taint, false);
        let (_, aff_max) = over(&node_aff, false);
        let (spread_min, spread_max) = over(&spread, true);
        let (inter_min, inter_max) = over(&inter, false);
        for (row, node) in self.nodes.iter().enumerate() {
            if !feasible[row] {
                continue;
            }
            let on: Vec<&PodInfo> = self.pods_on(row).collect();
            let nz_cpu: i64 = on.iter().map(|p| p.nonzero_milli_cpu).sum();
            let nz_mem: i64 = on.iter().map(|p| p.nonzero_memory).sum();
            let mut t = kernels::resource_score(
                nz_cpu as f32,
                nz_mem as f32,
                crate::table::inverse(node.allocatable.milli_cpu),
                crate::table::inverse(node.allocatable.memory),
                pod.nonzero_milli_cpu as f32,
                pod.nonzero_memory as f32,
            );
            t += weight::TAINT_TOLERATION * kernels::normalize_taint(taint[row], taint_max);
            t += weight::NODE_AFFINITY * kernels::normalize_node_affinity(node_aff[row], aff_max);
            if !soft.is_empty() {
                t += weight::POD_TOPOLOGY_SPREAD
                    * kernels::normalize_spread(spread[row], spread_min, spread_max);
            }
            t += weight::INTER_POD_AFFINITY
                * kernels::normalize_inter_pod(inter[row], inter_min, inter_max);
            t += weight::IMAGE_LOCALITY * image[row];
            out[row] = t;
        }
        out
    }

    /// Schedules one pod: the chosen row (placing it), or `None` when no node fits.
    pub fn schedule(&mut self, pod: Arc<PodInfo>, rng: &mut Rng) -> Option<(usize, f32)> {
        let totals = self.totals(&pod);
        let max = totals.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if max == f32::NEG_INFINITY {
            return None;
        }
        let ties = totals.iter().filter(|t| **t == max).count();
        let pick = rng.below(ties);
        let row = kernels::nth_equal(&totals, max, pick)?;
        self.placed.push((pod, row));
        Some((row, max))
    }
}
