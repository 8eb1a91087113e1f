//! Counted terms: pod-affinity terms and spread selectors, with the pods they match per node
//! and per topology domain.

use skiff_proto::api::LabelSelector;
use skiff_proto::api::pod::PodAffinityTerm;

use crate::model::{PodInfo, term_selects};

/// What a term counts on each node and in each domain.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TermRole {
    /// Pods the selector selects (for the incoming pod's own terms and spread constraints).
    Matches,
    /// Pods owning a required anti-affinity term with this selector.
    RequiredAnti,
    /// Pods owning a preferred term (or a required affinity term, at the hard weight 1) with
    /// this selector; the weight is signed (negative for anti-affinity).
    Preferred(i32),
}

/// The identity of a counted term: selector, namespaces and topology key, and its role.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TermKey {
    pub selector: String,
    pub namespaces: Vec<String>,
    pub topology_key: String,
    pub role: TermRole,
}

/// Per-node and per-domain counts of one term.
#[derive(Debug, Clone)]
pub struct Term {
    pub key: TermKey,
    pub selector: Option<LabelSelector>,
    /// Label column of the topology key.
    pub topo: u32,
    pub per_node: Vec<u32>,
    pub by_domain: Vec<u32>,
    /// Pods counted in all (including those on nodes that lack the topology key).
    pub total: u64,
}

impl Term {
    pub(crate) fn bump(&mut self, node: usize, domain: u32, up: bool) {
        if up {
            self.add(node, domain, 1);
        } else {
            self.per_node[node] -= 1;
            self.total -= 1;
            if domain > 0 {
                self.by_domain[domain as usize] -= 1;
            }
        }
    }
    /// Counts `n` more pods on `node`, in `domain`.
    pub(crate) fn add(&mut self, node: usize, domain: u32, n: u32) {
        self.per_node[node] += n;
        self.total += u64::from(n);
        if domain > 0 {
            let d = domain as usize;
            if self.by_domain.len() <= d {
                self.by_domain.resize(d + 1, 0);
            }
            self.by_domain[d] += n;
        }
    }

    /// Whether the term's selector, in its namespaces, selects `pod`.
    pub fn selects(&self, pod: &PodInfo) -> bool {
        term_selects(
            self.selector.as_ref(),
            &self.key.namespaces,
            &pod.namespace,
            &pod.labels,
        )
    }

    /// Count in domain `d` (0 when the domain is unknown or absent).
    pub fn in_domain(&self, d: u32) -> u32 {
        if d == 0 {
            0
        } else {
            self.by_domain.get(d as usize).copied().unwrap_or(0)
        }
    }
}

/// The terms a pod owns, with the role each is counted in: required anti-affinity (for the
/// symmetric filter), and preferred terms plus required affinity at weight 1 (for the
/// symmetric score).
pub fn owned_terms(pod: &PodInfo) -> impl Iterator<Item = (TermRole, &PodAffinityTerm)> {
    pod.required_anti_affinity
        .iter()
        .map(|t| (TermRole::RequiredAnti, t))
        .chain(
            pod.required_affinity
                .iter()
                .map(|t| (TermRole::Preferred(HARD_POD_AFFINITY_WEIGHT), t)),
        )
        .chain(
            pod.preferred_terms
                .iter()
                .map(|(w, t)| (TermRole::Preferred(*w), t)),
        )
}

/// The weight kube-scheduler gives an existing pod's required affinity term when scoring
/// the nodes for a pod it selects (`hardPodAffinityWeight`).
pub const HARD_POD_AFFINITY_WEIGHT: i32 = 1;
