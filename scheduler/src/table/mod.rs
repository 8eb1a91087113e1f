//! The node table: every node as one row of a structure of arrays, kept current by node and
//! pod events, so the kernels scan plain `i64` / `f32` / `u32` / `u64` columns.
//!
//! ```text
//!  row i ─┬─ alloc_cpu[i] alloc_mem[i] alloc_eph[i] alloc_pods[i]      (i64, from the Node)
//!         ├─ req_cpu[i]   req_mem[i]   req_eph[i]   req_pods[i]        (i64, sum of its pods)
//!         ├─ used_cpu_f[i] used_mem_f[i] inv_cpu[i] inv_mem[i]         (f32, for scoring)
//!         ├─ unschedulable[i]                                          (u8)
//!         ├─ labels: one u32 column per label key, value id (0 = no such label)
//!         ├─ taints: bit row of interned (key, value, effect) ids     (u64 words)
//!         └─ ports:  bit row of interned (protocol, hostPort) ids     (u64 words)
//!  terms: per pod-affinity term / spread selector, matching pods per node and per
//!         topology domain (the value id of the term's topology key)
//! ```
//!
//! Rows are dense: removing a node moves the last row into its place. Pods are accounted on
//! their node's row whether the store has confirmed them (bound) or the scheduler has only
//! assumed them (placed, Bind in flight).
//!
//! Pods are keyed by identity ([`PodInfo::id`], the UID), not by name: a pod deleted and
//! created again under its name while the old one's Bind is in flight is another pod, and
//! both placements count until the old Bind's outcome takes its placement out.

use std::collections::BTreeMap;

// Keyed by pod and node names, hashed on every placement under the table's write lock:
// foldhash (randomly seeded per map), several times faster than SipHash on short keys.
use foldhash::HashMap;
use std::sync::Arc;

use skiff_proto::api::pod::PodAffinityTerm;
use skiff_proto::api::{LabelSelector, TaintEffect};

use crate::model::{NodeInfo, PodInfo, Resources, term_namespaces};

mod columns;
mod terms;
pub use columns::{BitRows, Interner, LabelColumn};
pub use terms::{HARD_POD_AFFINITY_WEIGHT, Term, TermKey, TermRole, owned_terms};

/// A pod's identity in the table ([`PodInfo::id`]), shared by the maps that index it.
pub type PodId = Arc<str>;

/// A pod the table accounts for.
#[derive(Debug, Clone)]
pub struct PodEntry {
    pub info: Arc<PodInfo>,
    pub node: Arc<str>,
    /// Placed by this scheduler, Bind not yet confirmed by the store.
    pub assumed: bool,
}

/// The terms a pod is counted in (ids in [`NodeTable::terms`]), as the table had them when
/// they were worked out: pods it counts alike ([`counted_alike`]) are counted in the same
/// terms, so a batch of one signature works them out once ([`NodeTable::add_pod_alike`]).
#[derive(Debug, Clone)]
pub struct CountedIn {
    /// `Matches` terms that select the pod.
    selected: Vec<usize>,
    /// Terms the pod owns, one per owned term.
    owned: Vec<usize>,
    /// How many terms the table had: a term registered since may select the pod too.
    terms: usize,
}

/// What [`NodeTable::add_pod`] did with a pod.
#[derive(Debug, Clone)]
pub enum Placement {
    /// The table did not account it yet; it now counts on its node.
    New,
    /// It was already on that node. `was_assumed`: this confirms a placement of ours.
    /// `replaced`: the version held before, when what the table counts of the pod changed
    /// and it was counted again (`None`: the counts stand).
    Known {
        was_assumed: bool,
        replaced: Option<Arc<PodInfo>>,
    },
}

/// A pod about to be accounted, with the keys the table indexes it by, worked out before
/// the table's lock is taken: formatting and allocating them is most of what a placement
/// costs the table, and the committer holds the lock exclusively.
#[derive(Debug, Clone)]
pub struct Placing {
    pub info: Arc<PodInfo>,
    id: PodId,
    key: String,
}

impl Placing {
    pub fn new(info: Arc<PodInfo>) -> Self {
        Placing {
            id: info.id().into(),
            key: info.key(),
            info,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TableError {
    #[error("pod {0} is already on node {1}")]
    AlreadyPlaced(String, String),
}

/// See the module documentation.
#[derive(Debug, Default, Clone)]
pub struct NodeTable {
    pub names: Vec<Arc<str>>,
    index: HashMap<String, u32>,
    pub infos: Vec<Arc<NodeInfo>>,

    pub alloc_cpu: Vec<i64>,
    pub alloc_mem: Vec<i64>,
    pub alloc_eph: Vec<i64>,
    pub alloc_pods: Vec<i64>,
    pub req_cpu: Vec<i64>,
    pub req_mem: Vec<i64>,
    pub req_eph: Vec<i64>,
    pub req_pods: Vec<i64>,
    /// Non-zero requests (for scoring), exact, and as `f32` for the score kernels.
    pub nz_cpu: Vec<i64>,
    pub nz_mem: Vec<i64>,
    pub used_cpu_f: Vec<f32>,
    pub used_mem_f: Vec<f32>,
    /// `1 / allocatable` (0 when nothing is allocatable), for the score kernels.
    pub inv_cpu: Vec<f32>,
    pub inv_mem: Vec<f32>,
    /// Extended resources: name → (allocatable, requested) columns.
    pub extended: BTreeMap<String, (Vec<i64>, Vec<i64>)>,
    pub unschedulable: Vec<u32>,

    pub label_keys: Interner<String>,
    pub labels: Vec<LabelColumn>,
    pub taint_ids: Interner<(String, String, TaintEffect)>,
    pub taints: BitRows,
    pub port_ids: Interner<(String, i32)>,
    pub ports: BitRows,
    /// Per row: how many counted pods hold each port id (its bit is set while any does: two
    /// pods can hold one port, bound by hand or on different host addresses).
    port_holders: Vec<HashMap<u32, u32>>,
    /// Image → (size, rows that hold it).
    pub images: HashMap<String, (i64, Vec<u32>)>,

    /// By [`PodInfo::id`].
    pub pods: HashMap<PodId, PodEntry>,
    /// `namespace/name` → the ids accounted under that name (two while a re-created pod's
    /// predecessor still has a placement in flight).
    named: HashMap<String, Vec<PodId>>,
    node_pods: Vec<Vec<PodId>>,
    /// Pods bound to nodes the table does not have yet, by node name.
    orphans: HashMap<String, Vec<PodId>>,

    /// Pending pods nominated to a node by preemption, by id, with that node: see
    /// [`NodeTable::nominate`].
    pub nominated: HashMap<String, (String, Arc<PodInfo>)>,
    /// How many pods of each priority the table counts (placed and nominated alike).
    priorities: BTreeMap<i32, u32>,

    pub terms: Vec<Term>,
    term_index: HashMap<TermKey, u32>,
    /// Bumped on every change, so workers can tell whether their view is current.
    pub generation: u64,
    /// Bumped when a node is added, changed or removed: while it stands, every row is the
    /// node it was, with the labels, taints and schedulability it had (only the pods on
    /// it change).
    pub node_version: u64,
}

fn selector_key(s: Option<&LabelSelector>) -> String {
    s.map(|s| serde_json::to_string(s).unwrap_or_default())
        .unwrap_or_default()
}

impl TermKey {
    pub fn new(
        selector: Option<&LabelSelector>,
        namespaces: Vec<String>,
        topology_key: &str,
        role: TermRole,
    ) -> Self {
        TermKey {
            selector: selector_key(selector),
            namespaces,
            topology_key: topology_key.to_string(),
            role,
        }
    }
}

impl NodeTable {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn row(&self, name: &str) -> Option<usize> {
        self.index.get(name).map(|&r| r as usize)
    }

    /// The value-id column of label `key`, if any node has ever had it.
    pub fn label(&self, key: &str) -> Option<&LabelColumn> {
        self.label_keys
            .get(&key.to_string())
            .map(|k| &self.labels[k as usize])
    }

    fn label_id(&mut self, key: &str) -> u32 {
        let rows = self.len();
        let id = self.label_keys.intern(&key.to_string());
        if id as usize == self.labels.len() {
            self.labels.push(LabelColumn {
                name: key.to_string(),
                values: Interner::default(),
                col: vec![0; rows],
            });
        }
        id
    }

    /// Adds a node, or replaces what the table knows of it.
    pub fn upsert_node(&mut self, info: NodeInfo) {
        self.generation += 1;
        self.node_version += 1;
        let row = match self.index.get(&info.name) {
            Some(&r) => r as usize,
            None => self.push_row(&info.name),
        };
        self.set_row(row, info);
        if let Some(waiting) = self.orphans.remove(&*self.names[row]) {
            for key in waiting {
                if let Some(entry) = self.pods.get(&key).cloned() {
                    self.account(row, &entry.info, true);
                    self.node_pods[row].push(key);
                }
            }
        }
    }

    fn push_row(&mut self, name: &str) -> usize {
        let row = self.len();
        self.names.push(name.into());
        self.index.insert(name.to_string(), row as u32);
        self.infos.push(Arc::new(NodeInfo::default()));
        for c in self.i64_columns() {
            c.push(0);
        }
        for c in self.f32_columns() {
            c.push(0.0);
        }
        for (a, r) in self.extended.values_mut() {
            a.push(0);
            r.push(0);
        }
        self.unschedulable.push(0);
        for l in &mut self.labels {
            l.col.push(0);
        }
        self.taints.push_row();
        self.ports.push_row();
        self.port_holders.push(HashMap::default());
        self.node_pods.push(Vec::new());
        for t in &mut self.terms {
            t.per_node.push(0);
        }
        row
    }

    /// Every `i64` resource column, for operations on whole rows.
    fn i64_columns(&mut self) -> [&mut Vec<i64>; 10] {
        [
            &mut self.alloc_cpu,
            &mut self.alloc_mem,
            &mut self.alloc_eph,
            &mut self.alloc_pods,
            &mut self.req_cpu,
            &mut self.req_mem,
            &mut self.req_eph,
            &mut self.req_pods,
            &mut self.nz_cpu,
            &mut self.nz_mem,
        ]
    }

    /// Every `f32` scoring column.
    fn f32_columns(&mut self) -> [&mut Vec<f32>; 4] {
        [
            &mut self.used_cpu_f,
            &mut self.used_mem_f,
            &mut self.inv_cpu,
            &mut self.inv_mem,
        ]
    }

    fn set_row(&mut self, row: usize, info: NodeInfo) {
        let old = self.infos[row].clone();
        // Labels: move term counts between domains where a topology value changes.
        let mut changed_keys: Vec<u32> = Vec::new();
        for (k, _) in old
            .labels
            .iter()
            .filter(|(k, _)| !info.labels.contains_key(*k))
        {
            let id = self.label_id(k);
            self.labels[id as usize].col[row] = 0;
            changed_keys.push(id);
        }
        for (k, v) in &info.labels {
            let id = self.label_id(k);
            let column = &mut self.labels[id as usize];
            let vid = column.values.intern(v) + 1;
            if column.col[row] != vid {
                changed_keys.push(id);
            }
            column.col[row] = vid;
        }
        if !changed_keys.is_empty() {
            self.recount_row_domains(row, &old, &changed_keys);
        }
        self.alloc_cpu[row] = info.allocatable.milli_cpu;
        self.alloc_mem[row] = info.allocatable.memory;
        self.alloc_eph[row] = info.allocatable.ephemeral_storage;
        self.alloc_pods[row] = info.allocatable_pods;
        self.inv_cpu[row] = inverse(info.allocatable.milli_cpu);
        self.inv_mem[row] = inverse(info.allocatable.memory);
        for (name, _) in &info.allocatable.extended {
            self.extended_column(name);
        }
        for (name, (alloc, _)) in self.extended.iter_mut() {
            alloc[row] = info.allocatable.extended(name);
        }
        self.unschedulable[row] = u32::from(info.unschedulable);
        self.taints.clear_row(row);
        for t in &info.taints {
            let id = self
                .taint_ids
                .intern(&(t.key.clone(), t.value.clone(), t.effect));
            self.taints.widen(self.names.len(), self.taint_ids.len());
            self.taints.set(row, id, true);
        }
        for (name, _) in &old.images {
            if let Some((_, rows)) = self.images.get_mut(name) {
                rows.retain(|&r| r as usize != row);
            }
        }
        for (name, size) in &info.images {
            let e = self
                .images
                .entry(name.clone())
                .or_insert_with(|| (*size, Vec::new()));
            e.0 = *size;
            if !e.1.contains(&(row as u32)) {
                e.1.push(row as u32);
            }
        }
        self.images.retain(|_, (_, rows)| !rows.is_empty());
        self.infos[row] = Arc::new(info);
    }

    /// After topology labels of `row` changed: moves the row's term counts to its new domains.
    fn recount_row_domains(&mut self, row: usize, old: &NodeInfo, keys: &[u32]) {
        for t in &mut self.terms {
            if !keys.contains(&t.topo) || t.per_node[row] == 0 {
                continue;
            }
            let n = t.per_node[row];
            let column = &self.labels[t.topo as usize];
            let old_domain = old
                .labels
                .get(&column.name)
                .and_then(|v| column.value_id(v))
                .unwrap_or(0);
            let new_domain = column.col[row];
            if old_domain > 0 {
                t.by_domain[old_domain as usize] -= n;
            }
            if new_domain > 0 {
                let d = new_domain as usize;
                if t.by_domain.len() <= d {
                    t.by_domain.resize(d + 1, 0);
                }
                t.by_domain[d] += n;
            }
        }
    }

    fn extended_column(&mut self, name: &str) -> &mut (Vec<i64>, Vec<i64>) {
        let rows = self.len();
        self.extended
            .entry(name.to_string())
            .or_insert_with(|| (vec![0; rows], vec![0; rows]))
    }

    /// Removes a node; the pods on it stop counting anywhere.
    pub fn remove_node(&mut self, name: &str) {
        let Some(row) = self.index.remove(name).map(|r| r as usize) else {
            return;
        };
        self.generation += 1;
        self.node_version += 1;
        // A nomination is room on a node; with the node gone there is none to hold (the
        // columns it was counted in go with the row).
        let void: Vec<String> = self
            .nominated
            .iter()
            .filter(|(_, (node, _))| node == name)
            .map(|(id, _)| id.clone())
            .collect();
        for id in void {
            if let Some((_, info)) = self.nominated.remove(&id) {
                self.count_priority(info.priority, false);
            }
        }
        for key in std::mem::take(&mut self.node_pods[row]) {
            if let Some(entry) = self.pods.get(&key).cloned() {
                self.account(row, &entry.info, false);
            }
            // The pod stays known (it is bound to this name) and counts again if the node
            // comes back.
            self.orphans.entry(name.to_string()).or_default().push(key);
        }
        let rows = self.len();
        let last = rows - 1;
        if row != last {
            let moved = self.names[last].to_string();
            self.index.insert(moved, row as u32);
        }
        self.names.swap_remove(row);
        self.infos.swap_remove(row);
        for c in self.i64_columns() {
            c.swap_remove(row);
        }
        for c in self.f32_columns() {
            c.swap_remove(row);
        }
        for (a, r) in self.extended.values_mut() {
            a.swap_remove(row);
            r.swap_remove(row);
        }
        self.unschedulable.swap_remove(row);
        for l in &mut self.labels {
            l.col.swap_remove(row);
        }
        self.taints.swap_remove(row, rows);
        self.ports.swap_remove(row, rows);
        self.port_holders.swap_remove(row);
        self.node_pods.swap_remove(row);
        for t in &mut self.terms {
            t.per_node.swap_remove(row);
        }
        for (_, rows_with) in self.images.values_mut() {
            rows_with.retain(|&r| r as usize != row);
            for r in rows_with.iter_mut() {
                if *r as usize == last {
                    *r = row as u32;
                }
            }
        }
        self.images.retain(|_, (_, r)| !r.is_empty());
    }

    /// Accounts a pod on `node` (bound, or assumed when `assumed`), under its
    /// [`PodInfo::id`]. A pod already placed elsewhere is an error: the caller removes it
    /// first.
    ///
    /// A pod already on `node` (its confirmation, or any later update of a bound pod) takes
    /// the new version: when what the table counts of it differs (labels, requests, host
    /// ports, its own terms), it is counted again, as kube-scheduler's cache updates a pod on
    /// every update. Labels of a bound pod change, and inter-pod affinity, anti-affinity and
    /// topology spread must count the labels it has now.
    pub fn add_pod(
        &mut self,
        info: Arc<PodInfo>,
        node: &str,
        assumed: bool,
    ) -> Result<Placement, TableError> {
        let row = self.row(node);
        self.add_pod_with(Placing::new(info), row, node, assumed, None)
    }

    /// As [`NodeTable::add_pod`], for the pods of one batch: `alike` carries the terms the
    /// last pod added this way was counted in, reused for this one when the table counts the
    /// two alike and no term was registered since, and otherwise worked out again. Counting a
    /// pod in its terms evaluates every registered selector against its labels; under the
    /// committer's write lock that was most of a placement's cost once hundreds of terms
    /// were registered.
    ///
    /// The pod goes on row `row`, and its keys come worked out ([`Placing`]), so that under
    /// the committer's lock a placement hashes no node name and formats no key.
    pub fn add_pod_alike(
        &mut self,
        pod: Placing,
        row: usize,
        assumed: bool,
        alike: &mut Option<(Arc<PodInfo>, CountedIn)>,
    ) -> Result<Placement, TableError> {
        let reusable = alike.as_ref().is_some_and(|(first, counted)| {
            counted.terms == self.terms.len() && counted_alike(first, &pod.info)
        });
        if !reusable {
            *alike = Some((pod.info.clone(), self.terms_of(&pod.info)));
        }
        let node = self.names[row].clone();
        self.add_pod_with(
            pod,
            Some(row),
            &node,
            assumed,
            alike.as_ref().map(|(_, counted)| counted),
        )
    }

    /// `row` is `node`'s row, `None` when the table has no such node.
    fn add_pod_with(
        &mut self,
        Placing { info, id, key }: Placing,
        row: Option<usize>,
        node: &str,
        assumed: bool,
        alike: Option<&CountedIn>,
    ) -> Result<Placement, TableError> {
        if let Some(e) = self.pods.get(&id) {
            if *e.node != *node {
                return Err(TableError::AlreadyPlaced(key, e.node.to_string()));
            }
            let was_assumed = e.assumed;
            let old = e.info.clone();
            let replaced = if counted_alike(&old, &info) {
                None
            } else {
                self.generation += 1;
                if let Some(row) = row {
                    self.account(row, &old, false);
                    self.account(row, &info, true);
                }
                Some(old)
            };
            let e = self
                .pods
                .get_mut(&id)
                .expect("invariant: the entry was just read");
            e.info = info;
            e.assumed &= assumed;
            return Ok(Placement::Known {
                was_assumed,
                replaced,
            });
        }
        // A placement ends the pod's nomination (on that node or any other).
        self.unnominate(&id);
        self.generation += 1;
        self.count_priority(info.priority, true);
        let node = match row {
            Some(row) => {
                self.account_with(row, &info, true, alike);
                self.node_pods[row].push(id.clone());
                self.names[row].clone()
            }
            None => {
                self.orphans
                    .entry(node.to_string())
                    .or_default()
                    .push(id.clone());
                node.into()
            }
        };
        self.named.entry(key).or_default().push(id.clone());
        self.pods.insert(
            id,
            PodEntry {
                info,
                node,
                assumed,
            },
        );
        Ok(Placement::New)
    }

    /// Stops accounting a pod (deleted, finished, or its Bind was refused), by
    /// [`PodInfo::id`].
    pub fn remove_pod(&mut self, id: &str) -> Option<PodEntry> {
        let entry = self.pods.remove(id)?;
        self.generation += 1;
        self.count_priority(entry.info.priority, false);
        let name = entry.info.key();
        if let Some(ids) = self.named.get_mut(&name) {
            ids.retain(|i| **i != *id);
            if ids.is_empty() {
                self.named.remove(&name);
            }
        }
        match self.row(&entry.node) {
            Some(row) => {
                self.account(row, &entry.info, false);
                let list = &mut self.node_pods[row];
                if let Some(i) = list.iter().position(|k| **k == *id) {
                    list.swap_remove(i);
                }
            }
            None => {
                if let Some(list) = self.orphans.get_mut(&*entry.node) {
                    list.retain(|k| **k != *id);
                }
            }
        }
        Some(entry)
    }

    /// The pods accounted under `namespace/name`, with their ids.
    pub fn named(&self, key: &str) -> impl Iterator<Item = (&str, &PodEntry)> {
        self.named
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|id| Some((&**id, self.pods.get(id)?)))
    }

    /// The store holds the pod `id` under `namespace/name` (`key`): every confirmed pod of
    /// that name with another id is gone (deleted, perhaps re-created, while the informer
    /// was away) and stops counting. Assumed ones stay: their Bind is in flight, and its
    /// refusal takes them out. Whether any went.
    pub fn remove_replaced(&mut self, key: &str, id: &str) -> bool {
        let gone: Vec<String> = self
            .named(key)
            .filter(|(other, e)| *other != id && !e.assumed)
            .map(|(other, _)| other.to_string())
            .collect();
        for other in &gone {
            self.remove_pod(other);
        }
        !gone.is_empty()
    }

    /// The pods on row `row`.
    pub fn pods_on(&self, row: usize) -> impl Iterator<Item = &PodEntry> {
        self.node_pods[row].iter().filter_map(|k| self.pods.get(k))
    }

    fn account(&mut self, row: usize, pod: &PodInfo, add: bool) {
        self.account_with(row, pod, add, None);
    }

    /// As [`NodeTable::account`], with the terms the pod is counted in when the caller
    /// knows them (`alike`, from [`NodeTable::terms_of`] for a pod counted alike).
    fn account_with(&mut self, row: usize, pod: &PodInfo, add: bool, alike: Option<&CountedIn>) {
        self.account_room(row, pod, add);
        let computed;
        let terms = match alike {
            Some(terms) => terms,
            None => {
                computed = self.terms_of(pod);
                &computed
            }
        };
        for &t in &terms.selected {
            let d = self.labels[self.terms[t].topo as usize].col[row];
            self.terms[t].bump(row, d, add);
        }
        for &t in &terms.owned {
            let d = self.labels[self.terms[t].topo as usize].col[row];
            self.terms[t].bump(row, d, add);
        }
    }

    /// The room a pod takes on row `row`: its requests, a pod slot, its host ports.
    fn account_room(&mut self, row: usize, pod: &PodInfo, add: bool) {
        let s = if add { 1 } else { -1 };
        let r = &pod.requests;
        self.req_cpu[row] += s * r.milli_cpu;
        self.req_mem[row] += s * r.memory;
        self.req_eph[row] += s * r.ephemeral_storage;
        self.req_pods[row] += s;
        self.nz_cpu[row] += s * pod.nonzero_milli_cpu;
        self.nz_mem[row] += s * pod.nonzero_memory;
        self.used_cpu_f[row] = self.nz_cpu[row] as f32;
        self.used_mem_f[row] = self.nz_mem[row] as f32;
        for (name, v) in &r.extended {
            let (_, req) = self.extended_column(name);
            req[row] += s * v;
        }
        for (proto, port) in &pod.host_ports {
            let id = self.port_ids.intern(&(proto.clone(), *port));
            self.ports.widen(self.names.len(), self.port_ids.len());
            let holders = &mut self.port_holders[row];
            let n = holders.entry(id).or_insert(0);
            *n = if add { *n + 1 } else { n.saturating_sub(1) };
            let held = *n > 0;
            if !held {
                holders.remove(&id);
            }
            self.ports.set(row, id, held);
        }
    }

    fn count_priority(&mut self, priority: i32, add: bool) {
        if add {
            *self.priorities.entry(priority).or_insert(0) += 1;
        } else if let Some(n) = self.priorities.get_mut(&priority) {
            *n -= 1;
            if *n == 0 {
                self.priorities.remove(&priority);
            }
        }
    }

    /// The lowest priority of any pod the table counts, placed or nominated: a pod of this
    /// priority or lower has nothing to preempt.
    pub fn lowest_priority(&self) -> Option<i32> {
        self.priorities.keys().next().copied()
    }

    /// Holds room on `node` for a pending pod that preempted pods there (kube-scheduler's
    /// nominated pods): its requests, a pod slot and its host ports count on the node, so
    /// that the room its victims free as they terminate is not taken by others. Its pod
    /// terms are not counted (a pending pod is nobody's affinity yet). The pod's earlier
    /// nomination, if any, ends. A placement of the pod ends it too
    /// ([`NodeTable::add_pod`]), as does [`NodeTable::unnominate`].
    pub fn nominate(&mut self, info: Arc<PodInfo>, node: &str) {
        let id = info.id();
        self.unnominate(&id);
        if self.pods.contains_key(id.as_str()) {
            return; // placed already: its placement holds its room
        }
        let Some(row) = self.row(node) else { return };
        self.generation += 1;
        self.account_room(row, &info, true);
        self.count_priority(info.priority, true);
        self.nominated.insert(id, (node.to_string(), info));
    }

    /// Ends the nomination of pod `id`: the room it held is free again. The node and the
    /// version nominated, if it had one.
    pub fn unnominate(&mut self, id: &str) -> Option<(String, Arc<PodInfo>)> {
        let (node, info) = self.nominated.remove(id)?;
        self.generation += 1;
        self.count_priority(info.priority, false);
        if let Some(row) = self.row(&node) {
            self.account_room(row, &info, false);
        }
        Some((node, info))
    }

    /// The pods nominated to row `row`.
    pub fn nominated_on(&self, row: usize) -> impl Iterator<Item = &Arc<PodInfo>> {
        let name = &self.names[row];
        self.nominated
            .values()
            .filter(move |(node, _)| **node == **name)
            .map(|(_, info)| info)
    }

    /// How many counted pods on row `row` hold host port `port` (a nomination's included).
    pub fn port_holders(&self, row: usize, port: &(String, i32)) -> u32 {
        self.port_ids
            .get(port)
            .and_then(|id| self.port_holders[row].get(&id).copied())
            .unwrap_or(0)
    }

    /// The terms `pod` is counted in: every registered `Matches` term that selects it, and
    /// the terms it owns (registered here if new).
    fn terms_of(&mut self, pod: &PodInfo) -> CountedIn {
        let selected = self
            .terms
            .iter()
            .enumerate()
            .filter(|(_, term)| term.key.role == TermRole::Matches && term.selects(pod))
            .map(|(t, _)| t)
            .collect();
        let owned = owned_terms(pod)
            .map(|(role, term)| self.term(term, &pod.namespace, role))
            .collect();
        CountedIn {
            selected,
            owned,
            terms: self.terms.len(),
        }
    }

    /// The id of a counted term, registering it (and counting every known pod) if new.
    pub fn term(&mut self, term: &PodAffinityTerm, owner_ns: &str, role: TermRole) -> usize {
        self.term_for(
            term.label_selector.as_ref(),
            term_namespaces(term, owner_ns),
            &term.topology_key,
            role,
        )
    }

    /// As [`NodeTable::term`], from parts (spread constraints use it too).
    pub fn term_for(
        &mut self,
        selector: Option<&LabelSelector>,
        namespaces: Vec<String>,
        topology_key: &str,
        role: TermRole,
    ) -> usize {
        let key = TermKey::new(selector, namespaces, topology_key, role);
        if let Some(&id) = self.term_index.get(&key) {
            return id as usize;
        }
        self.label_id(topology_key);
        let term = self
            .count_term(key, selector)
            .expect("invariant: the topology key's column was just added");
        self.insert_term(term)
    }

    /// A term not registered yet, counted over the pods placed now, for
    /// [`NodeTable::insert_term`]: the part of registering a term that reads every placed
    /// pod needs the table only shared, so it can run beside the workers' reads. `None`
    /// when no node has had the topology key yet (registering its column needs the table
    /// mutably: [`NodeTable::term_for`]).
    pub fn count_term(&self, key: TermKey, selector: Option<&LabelSelector>) -> Option<Term> {
        let topo = self.label_keys.get(&key.topology_key)?;
        let column = &self.labels[topo as usize];
        let mut term = Term {
            key,
            selector: selector.cloned(),
            topo,
            per_node: vec![0; self.len()],
            by_domain: vec![0; column.domains()],
            total: 0,
        };
        // A counted pod is counted in the terms it owns from its first accounting, which
        // registers them (`terms_of`): a term of an owner's role that is not registered yet
        // has no pod to count, and reading every placed pod would find none.
        if term.key.role != TermRole::Matches && self.find_term(&term.key).is_none() {
            return Some(term);
        }
        let mut per_row = Vec::with_capacity(self.len());
        let key = &term.key;
        for (row, ids) in self.node_pods.iter().enumerate() {
            let d = column.col[row];
            let mut counted = 0;
            for id in ids {
                let Some(e) = self.pods.get(id) else { continue };
                let counts = match &key.role {
                    TermRole::Matches => term.selects(&e.info),
                    // The pod's own term with this key: compared field by field (the key's
                    // selector string is that selector's JSON, and equal selectors give equal
                    // JSON), without encoding each placed pod's selectors.
                    role => owned_terms(&e.info).any(|(r, t)| {
                        r == *role
                            && t.topology_key == key.topology_key
                            && t.label_selector.as_ref() == term.selector.as_ref()
                            && term_namespaces(t, &e.info.namespace) == key.namespaces
                    }),
                };
                counted += u32::from(counts);
            }
            per_row.push((row, d, counted));
        }
        for (row, d, counted) in per_row {
            term.add(row, d, counted);
        }
        Some(term)
    }

    /// Registers a term counted by [`NodeTable::count_term`] against this table as it is
    /// (no pod placed or removed since); its id. A term registered meanwhile keeps its id.
    pub fn insert_term(&mut self, term: Term) -> usize {
        if let Some(&id) = self.term_index.get(&term.key) {
            return id as usize;
        }
        let id = self.terms.len();
        self.term_index.insert(term.key.clone(), id as u32);
        self.terms.push(term);
        id
    }

    /// Whether [`NodeTable::term_for`] with these parts would find the term registered.
    pub fn has_term(
        &self,
        selector: Option<&LabelSelector>,
        namespaces: Vec<String>,
        topology_key: &str,
        role: TermRole,
    ) -> bool {
        self.term_index
            .contains_key(&TermKey::new(selector, namespaces, topology_key, role))
    }

    /// The registered term with this key, without registering it.
    pub fn find_term(&self, key: &TermKey) -> Option<usize> {
        self.term_index.get(key).map(|&i| i as usize)
    }

    /// Resource columns of row `row` as one record (for scalar checks and diagnostics).
    pub fn free(&self, row: usize) -> Resources {
        Resources {
            milli_cpu: self.alloc_cpu[row] - self.req_cpu[row],
            memory: self.alloc_mem[row] - self.req_mem[row],
            ephemeral_storage: self.alloc_eph[row] - self.req_eph[row],
            extended: self
                .extended
                .iter()
                .map(|(n, (a, r))| (n.clone(), a[row] - r[row]))
                .collect(),
        }
    }
}

/// Whether the table counts two versions of a pod alike: they agree on everything it
/// accounts (resources, host ports, labels and namespace for the terms that select them, the
/// terms the pod owns).
pub fn counted_alike(a: &PodInfo, b: &PodInfo) -> bool {
    a.namespace == b.namespace
        && a.labels == b.labels
        && a.requests == b.requests
        && a.nonzero_milli_cpu == b.nonzero_milli_cpu
        && a.nonzero_memory == b.nonzero_memory
        && a.host_ports == b.host_ports
        && a.required_anti_affinity == b.required_anti_affinity
        && a.required_affinity == b.required_affinity
        && a.preferred_terms == b.preferred_terms
}

/// `1 / x` in `f32`, 0 for nothing allocatable (every fraction then scores 0).
pub fn inverse(x: i64) -> f32 {
    if x <= 0 { 0.0 } else { 1.0 / x as f32 }
}
