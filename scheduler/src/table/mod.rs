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
use parking_lot::RwLockUpgradableReadGuard;
use std::sync::Arc;

use skiff_proto::api::pod::PodAffinityTerm;
use skiff_proto::api::{LabelSelector, TaintEffect};

use crate::model::{NodeInfo, PodInfo, Resources, term_namespaces};

mod columns;
mod label_sets;
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

/// A pod about to be accounted, with the id the table indexes it by, worked out before the
/// table's lock is taken.
#[derive(Debug, Clone)]
pub struct Placing {
    info: Arc<PodInfo>,
    id: PodId,
    /// The hash of its label set.
    labels: u64,
}

impl Placing {
    pub fn new(info: Arc<PodInfo>) -> Self {
        Placing {
            id: info.id().into(),
            labels: label_sets::label_hash(&info),
            info,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TableError {
    #[error("pod {0} is already on node {1}")]
    AlreadyPlaced(String, String),
}

/// The pods the table accounts, by identity and by row.
///
/// The committer indexes a placement under the table's upgradable read, beside the workers'
/// reads, and takes the write lock only to count it in the columns ([`NodeTable::claims`]):
/// hashing a pod into maps of hundreds of thousands was most of what a commit held the
/// write lock for. So the index has a lock of its own, always taken inside the table's
/// (never the other way round), and mutated only by the holder of the table's upgradable
/// read or write lock: whoever holds either sees the index and the columns agree.
#[derive(Debug, Default, Clone)]
struct PodIndex {
    /// By [`PodInfo::id`].
    pods: HashMap<PodId, PodEntry>,
    node_pods: Vec<Vec<PodId>>,
    /// The label sets of the pods on each row, for counting new terms.
    label_sets: label_sets::LabelSets,
    /// Pods bound to nodes the table does not have yet, by node name.
    orphans: HashMap<String, Vec<PodId>>,
    /// Pods claimed and not counted yet ([`Claims`]): none outside a commit.
    pending: usize,
}

impl PodIndex {
    /// Indexes a pod not indexed yet, on `row` (`None`: on `node`, which the table does not
    /// have).
    fn insert(&mut self, pod: Placing, row: Option<usize>, node: Arc<str>, assumed: bool) {
        let Placing { info, id, labels } = pod;
        match row {
            Some(row) => self.attach(row, id.clone(), &info, labels),
            None => self
                .orphans
                .entry(node.to_string())
                .or_default()
                .push(id.clone()),
        }
        self.pods.insert(
            id,
            PodEntry {
                info,
                node,
                assumed,
            },
        );
    }

    /// Puts pod `id` on row `row`'s lists (`labels`: its [`label_sets::label_hash`]).
    fn attach(&mut self, row: usize, id: PodId, info: &Arc<PodInfo>, labels: u64) {
        self.node_pods[row].push(id);
        self.label_sets.count(row, info, labels, true);
    }

    /// Takes pod `id` off row `row`'s lists.
    fn detach(&mut self, row: usize, id: &str, info: &Arc<PodInfo>) {
        let list = &mut self.node_pods[row];
        if let Some(i) = list.iter().position(|k| **k == *id) {
            list.swap_remove(i);
        }
        self.label_sets
            .count(row, info, label_sets::label_hash(info), false);
    }

    /// Whether any claim is waiting to be counted (a commit in progress: only its holder of
    /// the table's upgradable read may see the index then).
    fn claims_pending(&self) -> bool {
        self.pending > 0
    }
}

/// A lock that clones what it guards (for [`NodeTable`]'s `Clone`, which copies a commit's
/// claims not yet counted unless the table's upgradable read or write lock is held).
#[derive(Debug, Default)]
struct Guarded<T>(parking_lot::Mutex<T>);

impl<T: Clone> Clone for Guarded<T> {
    fn clone(&self) -> Self {
        Guarded(parking_lot::Mutex::new(self.0.lock().clone()))
    }
}

/// A commit's placements, indexed under the table's upgradable read and not counted in the
/// columns yet: the first half of [`NodeTable::claims`]. Dropped before
/// [`Claims::into_claimed`] (a panic between the two halves), it takes its pods out of the
/// index again, so the index never keeps a pod the columns do not count.
#[derive(Debug)]
pub struct Claims<'t> {
    table: &'t NodeTable,
    claimed: Vec<(Arc<PodInfo>, PodId, usize)>,
}

/// Pods indexed by [`Claims`], to be counted by [`NodeTable::account_claimed`] under the
/// write lock the same upgradable read was upgraded to.
#[derive(Debug)]
#[must_use = "claimed pods must be counted before the table's lock goes"]
pub struct Claimed(Vec<(Arc<PodInfo>, PodId, usize)>);

impl Claimed {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Claims<'_> {
    /// Indexes `pod` on `row`, assumed, unless the table already accounts it (bound by
    /// another scheduler, or by hand, since the pod was popped): then whether it was claimed.
    pub fn claim(&mut self, pod: Placing, row: usize) -> bool {
        let t = self.table;
        let mut ix = t.placed.0.lock();
        if ix.pods.contains_key(&pod.id) {
            return false;
        }
        ix.pending += 1;
        self.claimed.push((pod.info.clone(), pod.id.clone(), row));
        ix.insert(pod, Some(row), t.names[row].clone(), true);
        true
    }

    /// The claims, for [`NodeTable::account_claimed`].
    pub fn into_claimed(mut self) -> Claimed {
        Claimed(std::mem::take(&mut self.claimed))
    }
}

impl Drop for Claims<'_> {
    fn drop(&mut self) {
        if self.claimed.is_empty() {
            return;
        }
        let mut ix = self.table.placed.0.lock();
        for (info, id, row) in self.claimed.drain(..) {
            ix.pods.remove(&id);
            ix.detach(row, &id, &info);
            ix.pending -= 1;
        }
    }
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

    /// The pods it accounts, behind a lock of their own (see [`NodeTable::claims`]).
    placed: Guarded<PodIndex>,

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
        let ix = self.placed.0.get_mut();
        debug_assert!(!ix.claims_pending(), "a node added during a commit");
        let mut back = Vec::new();
        if let Some(waiting) = ix.orphans.remove(&*self.names[row]) {
            for key in waiting {
                if let Some(entry) = ix.pods.get(&key) {
                    let info = entry.info.clone();
                    ix.attach(row, key, &info, label_sets::label_hash(&info));
                    back.push(info);
                }
            }
        }
        for info in back {
            self.account(row, &info, true);
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
        let ix = self.placed.0.get_mut();
        ix.node_pods.push(Vec::new());
        ix.label_sets.push_row();
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
        let ix = self.placed.0.get_mut();
        debug_assert!(!ix.claims_pending(), "a node removed during a commit");
        let keys = std::mem::take(&mut ix.node_pods[row]);
        let gone: Vec<Arc<PodInfo>> = keys
            .iter()
            .filter_map(|key| Some(ix.pods.get(key)?.info.clone()))
            .collect();
        // The pods stay known (they are bound to this name) and count again if the node
        // comes back.
        ix.orphans.entry(name.to_string()).or_default().extend(keys);
        for info in gone {
            self.account(row, &info, false);
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
        let ix = self.placed.0.get_mut();
        ix.node_pods.swap_remove(row);
        ix.label_sets.swap_remove_row(row);
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
        self.count_alike(&pod.info, alike);
        let node = self.names[row].clone();
        self.add_pod_with(
            pod,
            Some(row),
            &node,
            assumed,
            alike.as_ref().map(|(_, counted)| counted),
        )
    }

    /// Makes `alike` the terms `pod` is counted in: kept when the pod it was worked out for
    /// is counted alike and no term was registered since, else worked out again.
    fn count_alike(&mut self, pod: &Arc<PodInfo>, alike: &mut Option<(Arc<PodInfo>, CountedIn)>) {
        let reusable = alike.as_ref().is_some_and(|(first, counted)| {
            counted.terms == self.terms.len() && counted_alike(first, pod)
        });
        if !reusable {
            *alike = Some((pod.clone(), self.terms_of(pod)));
        }
    }

    /// The committer's placements, in two halves. The first, [`Claims::claim`], under the
    /// table's upgradable read (beside the workers' reads), indexes each pod, assumed, and
    /// checks that the table has no other placement of it. The second,
    /// [`NodeTable::account_claimed`], under the write lock that read is upgraded to, counts
    /// them in the columns. Between the two the columns do not count them: the caller checks
    /// the fit of its next placements with what it claimed added, as a batch's placements
    /// are checked. Taking the upgradable read keeps any other commit, and every writer,
    /// out until the claims are counted.
    pub fn claims<'t>(table: &'t RwLockUpgradableReadGuard<'_, NodeTable>) -> Claims<'t> {
        Claims {
            table,
            claimed: Vec::new(),
        }
    }

    /// Counts what [`Claims`] indexed. Pods of one signature share the terms they are
    /// counted in, worked out once, as [`NodeTable::add_pod_alike`] shares them.
    pub fn account_claimed(&mut self, claimed: Claimed) {
        let mut alike = None;
        for (info, id, row) in claimed.0 {
            self.placed.0.get_mut().pending -= 1;
            self.count_alike(&info, &mut alike);
            self.placing(&id, &info);
            self.account_with(row, &info, true, alike.as_ref().map(|(_, c)| c));
        }
    }

    /// What a new placement of a pod changes beside its row: it ends the pod's nomination
    /// (on that node or any other), and counts its priority.
    fn placing(&mut self, id: &str, info: &PodInfo) {
        self.unnominate(id);
        self.generation += 1;
        self.count_priority(info.priority, true);
    }

    /// `row` is `node`'s row, `None` when the table has no such node.
    fn add_pod_with(
        &mut self,
        pod: Placing,
        row: Option<usize>,
        node: &str,
        assumed: bool,
        alike: Option<&CountedIn>,
    ) -> Result<Placement, TableError> {
        let Placing { info, id, labels } = pod;
        if let Some(e) = self.placed.0.get_mut().pods.get(&id) {
            if *e.node != *node {
                return Err(TableError::AlreadyPlaced(info.key(), e.node.to_string()));
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
                    let ix = self.placed.0.get_mut();
                    ix.detach(row, &id, &old);
                    ix.attach(row, id.clone(), &info, labels);
                }
                Some(old)
            };
            let e = self
                .placed
                .0
                .get_mut()
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
        self.placing(&id, &info);
        let node = match row {
            Some(row) => {
                self.account_with(row, &info, true, alike);
                self.names[row].clone()
            }
            None => node.into(),
        };
        self.placed
            .0
            .get_mut()
            .insert(Placing { info, id, labels }, row, node, assumed);
        Ok(Placement::New)
    }

    /// Stops accounting a pod (deleted, finished, or its Bind was refused), by
    /// [`PodInfo::id`].
    pub fn remove_pod(&mut self, id: &str) -> Option<PodEntry> {
        let ix = self.placed.0.get_mut();
        debug_assert!(!ix.claims_pending(), "a pod removed during a commit");
        let entry = ix.pods.remove(id)?;
        let row = self.index.get(&*entry.node).map(|&r| r as usize);
        match row {
            Some(row) => ix.detach(row, id, &entry.info),
            None => {
                if let Some(list) = ix.orphans.get_mut(&*entry.node) {
                    list.retain(|k| **k != *id);
                }
            }
        }
        self.generation += 1;
        self.count_priority(entry.info.priority, false);
        if let Some(row) = row {
            self.account(row, &entry.info, false);
        }
        Some(entry)
    }

    /// The pod the table accounts under `id` ([`PodInfo::id`]), if any.
    pub fn pod(&self, id: &str) -> Option<PodEntry> {
        self.placed.0.lock().pods.get(id).cloned()
    }

    /// Whether the table accounts a pod under `id`.
    pub fn has_pod(&self, id: &str) -> bool {
        self.placed.0.lock().pods.contains_key(id)
    }

    /// How many pods the table accounts (placed on a node it has or not).
    pub fn pod_count(&self) -> usize {
        self.placed.0.lock().pods.len()
    }

    /// Every pod the table accounts, with its id.
    pub fn pods(&self) -> Vec<(PodId, PodEntry)> {
        let ix = self.placed.0.lock();
        ix.pods
            .iter()
            .map(|(id, e)| (id.clone(), e.clone()))
            .collect()
    }

    /// The pods on row `row`.
    ///
    /// Under a plain read of the table, the pods a commit in progress has claimed may show
    /// here before the columns count them ([`NodeTable::claims`]); under its upgradable read
    /// or write lock the two agree.
    pub fn pods_on(&self, row: usize) -> Vec<PodEntry> {
        let mut on = Vec::new();
        self.each_pod_on(row, |e| on.push(e.clone()));
        on
    }

    /// Calls `f` with each pod on row `row`, read in place (as [`NodeTable::pods_on`] says).
    pub fn each_pod_on(&self, row: usize, mut f: impl FnMut(&PodEntry)) {
        let ix = self.placed.0.lock();
        for id in &ix.node_pods[row] {
            if let Some(e) = ix.pods.get(id) {
                f(e);
            }
        }
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
        if self.placed.0.get_mut().pods.contains_key(id.as_str()) {
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
        let ix = self.placed.0.lock();
        // Claims not counted yet would be counted here and again when they are.
        debug_assert!(!ix.claims_pending(), "a term counted during a commit");
        if key.role == TermRole::Matches {
            let selected = ix.label_sets.count_selected(|pod| term.selects(pod));
            for (row, counted) in selected.into_iter().enumerate() {
                term.add(row, column.col[row], counted);
            }
            return Some(term);
        }
        for (row, ids) in ix.node_pods.iter().enumerate() {
            let d = column.col[row];
            let mut counted = 0;
            for id in ids {
                let Some(e) = ix.pods.get(id) else { continue };
                // The pod's own term with this key: compared field by field (the key's
                // selector string is that selector's JSON, and equal selectors give equal
                // JSON), without encoding each placed pod's selectors.
                let counts = owned_terms(&e.info).any(|(r, t)| {
                    r == key.role
                        && t.topology_key == key.topology_key
                        && t.label_selector.as_ref() == term.selector.as_ref()
                        && term_namespaces(t, &e.info.namespace) == key.namespaces
                });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{self, Profile};
    use parking_lot::RwLock;

    fn pod(name: &str) -> Arc<PodInfo> {
        let mut p = PodInfo {
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            ..PodInfo::default()
        };
        p.requests.milli_cpu = 100;
        p.labels.insert("app".into(), "web".into());
        Arc::new(p)
    }

    #[test]
    fn claims_count_once_accounted_and_leave_nothing_when_dropped() {
        let mut t = NodeTable::new();
        t.upsert_node(NodeInfo::from_node(&synth::node(0, Profile::Basic)));
        let lock = RwLock::new(t);
        let (a, b) = (pod("a"), pod("b"));
        {
            let table = lock.upgradable_read();
            let mut claims = NodeTable::claims(&table);
            assert!(claims.claim(Placing::new(a.clone()), 0));
            assert!(
                !claims.claim(Placing::new(a.clone()), 0),
                "a pod is claimed once"
            );
            // Dropped before it is counted (a panic between the halves): the index forgets it.
        }
        let t = lock.read();
        assert!(!t.has_pod(&a.id()) && t.pods_on(0).is_empty());
        assert_eq!(t.req_cpu[0], 0);
        assert!(!t.placed.0.lock().claims_pending());
        drop(t);

        let table = lock.upgradable_read();
        let mut claims = NodeTable::claims(&table);
        assert!(claims.claim(Placing::new(a.clone()), 0));
        assert!(claims.claim(Placing::new(b.clone()), 0));
        let claimed = claims.into_claimed();
        RwLockUpgradableReadGuard::upgrade(table).account_claimed(claimed);
        let t = lock.read();
        assert_eq!(t.req_cpu[0], 200);
        assert_eq!(t.pods_on(0).len(), 2);
        assert!(t.pod(&b.id()).is_some_and(|e| e.assumed));
        let selects_web = |p: &PodInfo| p.labels.get("app").is_some_and(|v| v == "web");
        assert_eq!(
            t.placed.0.lock().label_sets.count_selected(selects_web),
            [2]
        );
    }
}
