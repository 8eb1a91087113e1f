//! The scheduling cycle for one batch of pods that share a signature: one filter pass over
//! every node, one score pass, then one placement per pod, each seeing the ones before it.
//!
//! ```text
//!  feasible(pod₀) ─► base bitmap ─┐                 ┌─► totals[i]  (−inf: infeasible)
//!  term counts ───► term bitmap ──┴─► F = base ∧ term ┤
//!  resource/taint/affinity/spread/image scores ───────┘
//!  for each pod: best = argmax totals (seeded tie-break) → place → patch row, or redo
//!                the passes when a term count or the feasible set changed
//! ```
//!
//! The engine is pure: it reads the table, never writes it; the caller commits the
//! placements it returns (see `parallel` and `service`).

use std::collections::HashMap;
use std::sync::Arc;

use crate::filter::{self, Diagnosis, PodCtx};
use crate::kernels::{self, Kernels, weight};
use crate::model::{PodInfo, Resources};
use crate::table::NodeTable;

/// A small, fast, seedable generator (SplitMix64) for tie-breaks.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n ≥ 1), one draw.
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

/// Where one pod of a batch goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Placed {
        row: usize,
        score: f32,
    },
    Unschedulable(Diagnosis),
    /// Not attempted: the nodes changed while the batch paused
    /// ([`schedule_batch_yielding`]).
    Unplaced,
}

/// The per-node score components that do not depend on resources, before normalisation.
#[derive(Debug, Default)]
struct Components {
    taint: Option<Vec<f32>>,
    node_affinity: Option<Vec<f32>>,
    spread: Option<Vec<f32>>,
    inter_pod: Option<Vec<f32>>,
    image: Option<Vec<f32>>,
}

/// Raw PreferNoSchedule counts; `None` when the pod tolerates every such taint present.
fn taint_counts(table: &NodeTable, ctx: &PodCtx) -> Option<Vec<f32>> {
    if ctx.taint_soft.iter().all(|w| *w == 0) {
        return None;
    }
    Some(
        (0..table.len())
            .map(|r| {
                table
                    .taints
                    .row(r)
                    .iter()
                    .zip(&ctx.taint_soft)
                    .map(|(a, b)| (a & b).count_ones())
                    .sum::<u32>() as f32
            })
            .collect(),
    )
}

fn node_affinity_sums(table: &NodeTable, pod: &PodInfo) -> Option<Vec<f32>> {
    if pod.preferred_node_affinity.is_empty() {
        return None;
    }
    let mut sums = vec![0f32; table.len()];
    for term in &pod.preferred_node_affinity {
        let p = &term.preference;
        if p.match_expressions.is_empty() && p.match_fields.is_empty() {
            continue;
        }
        for (row, sum) in sums.iter_mut().enumerate() {
            let info = &table.infos[row];
            let ok =
                p.match_expressions.iter().all(|r| {
                    filter::requirement_holds(r, info.labels.get(&r.key).map(String::as_str))
                }) && p.match_fields.iter().all(|r| {
                    r.key == "metadata.name"
                        && filter::requirement_holds(r, Some(&*table.names[row]))
                });
            if ok {
                *sum += term.weight as f32;
            }
        }
    }
    Some(sums)
}

fn image_sums(table: &NodeTable, pod: &PodInfo) -> Option<Vec<f32>> {
    let present: Vec<&(i64, Vec<u32>)> = pod
        .images
        .iter()
        .filter_map(|i| table.images.get(i))
        .collect();
    if present.is_empty() {
        return None;
    }
    let n = table.len() as f32;
    let mut sums = vec![0f32; table.len()];
    for (size, rows) in present {
        let spread = rows.len() as f32 / n;
        for &r in rows {
            sums[r as usize] += *size as f32 * spread;
        }
    }
    let containers = pod.images.len().max(1) as f32;
    Some(
        sums.into_iter()
            .map(|s| kernels::image_score(s, containers))
            .collect(),
    )
}

/// Preferred inter-pod affinity raw scores from the batch-local counts.
fn inter_pod_raw(table: &NodeTable, ctx: &PodCtx) -> Option<Vec<f32>> {
    if ctx.preferred.is_empty() {
        return None;
    }
    let mut raw = vec![0f32; table.len()];
    for s in &ctx.preferred {
        let col = &table.labels[s.topo as usize].col;
        let w = s.weight as f32;
        for (r, v) in raw.iter_mut().enumerate() {
            *v += w * s.at(col[r]) as f32;
        }
    }
    Some(raw)
}

/// Soft spread raw scores: per constraint, the matching pods in the node's domain weighted
/// by ln(domains + 2); −1 for a node lacking a key.
fn spread_raw(table: &NodeTable, ctx: &PodCtx) -> Option<Vec<f32>> {
    let soft: Vec<&filter::SpreadSlot> = ctx.spread.iter().filter(|s| !s.hard).collect();
    if soft.is_empty() {
        return None;
    }
    let mut raw = vec![0f32; table.len()];
    for s in soft {
        let domains = s.present.iter().filter(|p| **p).count() as f32;
        let w = (domains + 2.0).ln();
        let col = &table.labels[s.slot.topo as usize].col;
        for (r, v) in raw.iter_mut().enumerate() {
            if *v < 0.0 {
                continue;
            }
            if col[r] == 0 {
                *v = -1.0;
            } else {
                *v += s.slot.at(col[r]) as f32 * w;
            }
        }
    }
    Some(raw)
}

/// Min and max of `raw` over the feasible rows (rows with a negative raw value are skipped
/// when `skip_negative`).
fn min_max(raw: &[f32], feasible: &[u64], skip_negative: bool) -> (f32, f32) {
    let mut min = f32::INFINITY;
    let mut max = f32::NEG_INFINITY;
    for (r, v) in raw.iter().enumerate() {
        if kernels::get(feasible, r) && !(skip_negative && *v < 0.0) {
            min = min.min(*v);
            max = max.max(*v);
        }
    }
    if min > max { (0.0, 0.0) } else { (min, max) }
}

/// Adds the weighted, normalised components to `totals`, in the fixed order the reference
/// implementation uses (taint, node affinity, spread, inter-pod, image); a component the pod
/// does not have adds the value its normalisation gives everywhere.
fn add_components(totals: &mut [f32], c: &Components, feasible: &[u64], k: &Kernels) {
    let mut norm = vec![0f32; totals.len()];
    match &c.taint {
        Some(raw) => {
            let (_, max) = min_max(raw, feasible, false);
            for (o, v) in norm.iter_mut().zip(raw) {
                *o = kernels::normalize_taint(*v, max);
            }
            (k.add_weighted)(totals, &norm, weight::TAINT_TOLERATION);
        }
        None => add_constant(
            totals,
            weight::TAINT_TOLERATION * kernels::normalize_taint(0.0, 0.0),
        ),
    }
    match &c.node_affinity {
        Some(raw) => {
            let (_, max) = min_max(raw, feasible, false);
            for (o, v) in norm.iter_mut().zip(raw) {
                *o = kernels::normalize_node_affinity(*v, max);
            }
            (k.add_weighted)(totals, &norm, weight::NODE_AFFINITY);
        }
        None => add_constant(
            totals,
            weight::NODE_AFFINITY * kernels::normalize_node_affinity(0.0, 0.0),
        ),
    }
    if let Some(raw) = &c.spread {
        let (min, max) = min_max(raw, feasible, true);
        for (o, v) in norm.iter_mut().zip(raw) {
            *o = kernels::normalize_spread(*v, min, max);
        }
        (k.add_weighted)(totals, &norm, weight::POD_TOPOLOGY_SPREAD);
    }
    if let Some(raw) = &c.inter_pod {
        let (min, max) = min_max(raw, feasible, false);
        for (o, v) in norm.iter_mut().zip(raw) {
            *o = kernels::normalize_inter_pod(*v, min, max);
        }
        (k.add_weighted)(totals, &norm, weight::INTER_POD_AFFINITY);
    }
    if let Some(img) = &c.image {
        (k.add_weighted)(totals, img, weight::IMAGE_LOCALITY);
    }
}

fn add_constant(totals: &mut [f32], c: f32) {
    for t in totals {
        *t += c;
    }
}

/// Rows per block of the best-row index.
const BLOCK: usize = 256;

/// What a batch (or a commit) has put on a row beyond what the table counts.
#[derive(Debug, Default, Clone)]
pub(crate) struct Overlay {
    pub(crate) req: Resources,
    pub(crate) pods: i64,
    nz_cpu: i64,
    nz_mem: i64,
}

impl Overlay {
    pub(crate) fn add(&mut self, pod: &PodInfo) {
        self.req.add(&pod.requests);
        self.pods += 1;
        self.nz_cpu += pod.nonzero_milli_cpu;
        self.nz_mem += pod.nonzero_memory;
    }

    /// Whether `pod`'s host ports are taken here by what the overlay holds: pods of one
    /// signature ask for the same ports.
    pub(crate) fn holds_ports_of(&self, pod: &PodInfo) -> bool {
        self.pods > 0 && !pod.host_ports.is_empty()
    }
}

/// One batch in progress.
///
/// It borrows no table: every method is handed the table it runs against, so the caller can
/// let the table's lock go between placements (see [`schedule_batch_yielding`]). Its own
/// state (feasible rows, scores, overlay) stays what it was computed from.
struct Batch<'a> {
    pod: &'a PodInfo,
    ctx: PodCtx,
    k: &'a Kernels,
    base: Vec<u64>,
    feasible: Vec<u64>,
    used_cpu: Vec<f32>,
    used_mem: Vec<f32>,
    comps: Components,
    totals: Vec<f32>,
    /// Per block of `BLOCK` rows: the largest total and how many rows have it, so picking
    /// the best row costs O(rows / BLOCK + BLOCK) after a one-row patch, not O(rows).
    block_max: Vec<f32>,
    block_ties: Vec<usize>,
    overlay: HashMap<usize, Overlay>,
    /// Whether any score is normalised over the feasible set (then a row dropping out of it
    /// means recomputing every total).
    normalised: bool,
}

impl<'a> Batch<'a> {
    fn new(table: &NodeTable, pod: &'a PodInfo, k: &'a Kernels) -> Self {
        let ctx = PodCtx::new(table, pod, k);
        let mut base = filter::feasible(table, pod, &ctx, k);
        let n = table.len();
        if ctx.has_terms() {
            // `feasible` applied the term filters; keep them apart so they can be redone.
            base = filter::feasible(table, pod, &without_terms(&ctx), k);
        }
        let comps = Components {
            taint: taint_counts(table, &ctx),
            node_affinity: node_affinity_sums(table, pod),
            spread: None,
            inter_pod: None,
            image: image_sums(table, pod),
        };
        let normalised = comps.taint.is_some()
            || comps.node_affinity.is_some()
            || !ctx.preferred.is_empty()
            || ctx.spread.iter().any(|s| !s.hard);
        let mut b = Batch {
            pod,
            ctx,
            k,
            feasible: base.clone(),
            base,
            used_cpu: table.used_cpu_f.clone(),
            used_mem: table.used_mem_f.clone(),
            comps,
            totals: vec![0f32; n],
            block_max: vec![f32::NEG_INFINITY; n.div_ceil(BLOCK)],
            block_ties: vec![0; n.div_ceil(BLOCK)],
            overlay: HashMap::new(),
            normalised,
        };
        b.recompute(table);
        b
    }

    /// Redoes the term filters, the term-dependent scores and every total.
    fn recompute(&mut self, t: &NodeTable) {
        let n = t.len();
        self.feasible.copy_from_slice(&self.base);
        if self.ctx.has_terms() {
            let mut tmp = vec![0u64; kernels::words(n)];
            filter::term_mask(t, &self.ctx, self.k, &mut self.feasible, &mut tmp);
            self.comps.spread = spread_raw(t, &self.ctx);
            self.comps.inter_pod = inter_pod_raw(t, &self.ctx);
        }
        (self.k.resource_scores)(
            &mut self.totals,
            &self.feasible,
            &self.used_cpu,
            &self.used_mem,
            &t.inv_cpu,
            &t.inv_mem,
            self.pod.nonzero_milli_cpu as f32,
            self.pod.nonzero_memory as f32,
        );
        add_components(&mut self.totals, &self.comps, &self.feasible, self.k);
        for b in 0..self.block_max.len() {
            self.refresh_block(b);
        }
    }

    fn refresh_block(&mut self, b: usize) {
        let end = ((b + 1) * BLOCK).min(self.totals.len());
        let (max, ties) = (self.k.max_count)(&self.totals[b * BLOCK..end]);
        self.block_max[b] = max;
        self.block_ties[b] = ties;
    }

    /// The best total and how many rows have it.
    fn best(&self) -> (f32, usize) {
        let max = self
            .block_max
            .iter()
            .copied()
            .fold(f32::NEG_INFINITY, |m, v| if v > m { v } else { m });
        let ties = self
            .block_max
            .iter()
            .zip(&self.block_ties)
            .filter(|(m, _)| **m == max)
            .map(|(_, t)| *t)
            .sum();
        (max, ties)
    }

    /// The `k`-th row (in row order) whose total is `max`.
    fn nth_best(&self, max: f32, mut k: usize) -> Option<usize> {
        for (b, (m, t)) in self.block_max.iter().zip(&self.block_ties).enumerate() {
            if *m != max {
                continue;
            }
            if k < *t {
                let end = ((b + 1) * BLOCK).min(self.totals.len());
                return kernels::nth_equal(&self.totals[b * BLOCK..end], max, k)
                    .map(|i| b * BLOCK + i);
            }
            k -= t;
        }
        None
    }

    /// The total of one row, as `recompute` would give it (same operations, same order;
    /// normalisation over the current feasible set).
    fn row_total(&self, t: &NodeTable, row: usize) -> f32 {
        if !kernels::get(&self.feasible, row) {
            return f32::NEG_INFINITY;
        }
        let c = &self.comps;
        let f = &self.feasible;
        let mut total = kernels::resource_score(
            self.used_cpu[row],
            self.used_mem[row],
            t.inv_cpu[row],
            t.inv_mem[row],
            self.pod.nonzero_milli_cpu as f32,
            self.pod.nonzero_memory as f32,
        );
        total += weight::TAINT_TOLERATION
            * match &c.taint {
                Some(v) => kernels::normalize_taint(v[row], min_max(v, f, false).1),
                None => kernels::normalize_taint(0.0, 0.0),
            };
        total += weight::NODE_AFFINITY
            * match &c.node_affinity {
                Some(v) => kernels::normalize_node_affinity(v[row], min_max(v, f, false).1),
                None => kernels::normalize_node_affinity(0.0, 0.0),
            };
        if let Some(v) = &c.spread {
            let (min, max) = min_max(v, f, true);
            total += weight::POD_TOPOLOGY_SPREAD * kernels::normalize_spread(v[row], min, max);
        }
        if let Some(v) = &c.inter_pod {
            let (min, max) = min_max(v, f, false);
            total += weight::INTER_POD_AFFINITY * kernels::normalize_inter_pod(v[row], min, max);
        }
        if let Some(v) = &c.image {
            total += weight::IMAGE_LOCALITY * v[row];
        }
        total
    }

    fn place(&mut self, t: &NodeTable, row: usize) {
        let p = self.pod;
        let o = self.overlay.entry(row).or_default();
        o.add(p);
        self.used_cpu[row] = (t.nz_cpu[row] + o.nz_cpu) as f32;
        self.used_mem[row] = (t.nz_mem[row] + o.nz_mem) as f32;
        let version = self.ctx.version;
        self.ctx.place(t, row);
        let fits = self.row_fits_resources(t, row);
        let dropped = !fits && kernels::get(&self.base, row);
        if dropped {
            kernels::set(&mut self.base, row, false);
        }
        if self.ctx.version != version || (dropped && self.normalised) {
            self.recompute(t);
        } else {
            if dropped {
                kernels::set(&mut self.feasible, row, false);
            }
            self.totals[row] = self.row_total(t, row);
            self.refresh_block(row / BLOCK);
        }
    }

    /// Resource, pod-count and port fit of `row` with the overlay (the static filters held
    /// when the row entered the batch; the term filters are redone separately).
    fn row_fits_resources(&self, t: &NodeTable, row: usize) -> bool {
        let o = self.overlay.get(&row).cloned().unwrap_or_default();
        !o.holds_ports_of(self.pod) && filter::fits_resources(t, self.pod, row, &o.req, o.pods)
    }

    fn diagnose(&self, t: &NodeTable) -> Diagnosis {
        Diagnosis::of(
            t.len(),
            (0..t.len()).map(|row| {
                let o = self.overlay.get(&row).cloned().unwrap_or_default();
                let mut why = filter::check_row(t, self.pod, &self.ctx, row, &o.req, o.pods);
                if why.is_empty() && o.holds_ports_of(self.pod) {
                    why.push(filter::Reason::Ports);
                }
                why
            }),
        )
    }
}

fn without_terms(ctx: &PodCtx) -> PodCtx {
    PodCtx {
        affinity: Vec::new(),
        anti: Vec::new(),
        existing_anti: Vec::new(),
        preferred: Vec::new(),
        spread: Vec::new(),
        ..ctx.clone()
    }
}

/// Places `count` pods of one signature (`pod` stands for all of them), one after another.
/// Terms the pod depends on must be registered in the table (`filter::register_terms`).
pub fn schedule_batch(
    table: &NodeTable,
    pod: &PodInfo,
    count: usize,
    k: &Kernels,
    rng: &mut Rng,
) -> Vec<Outcome> {
    let mut table = table;
    place_all(&mut table, pod, count, k, rng, |_| true)
}

/// As [`schedule_batch`], against a table behind a read lock that is let go between
/// placements whenever another thread waits for it (a worker's commit needs the write
/// lock, and a batch can take milliseconds), so no commit waits for a whole batch.
///
/// Placements after such a pause were made against the batch's view: its feasible rows
/// and scores, the pods the table held, plus its own placements, and the rows the table
/// has now for resources. The commit re-checks each one, as it re-checks every optimistic
/// placement. If a node was added, changed or removed meanwhile, rows no longer mean the
/// nodes they meant: the batch stops there, and every pod of it comes back
/// [`Outcome::Unplaced`], to be queued again.
pub fn schedule_batch_yielding(
    guard: &mut parking_lot::RwLockReadGuard<'_, NodeTable>,
    pod: &PodInfo,
    count: usize,
    k: &Kernels,
    rng: &mut Rng,
) -> Vec<Outcome> {
    let node_version = guard.node_version;
    place_all(guard, pod, count, k, rng, |g| {
        parking_lot::RwLockReadGuard::bump(g);
        g.node_version == node_version
    })
}

/// The batch loop of both: `pause` runs between placements and says whether the batch
/// may go on.
fn place_all<T: std::ops::Deref<Target = NodeTable>>(
    view: &mut T,
    pod: &PodInfo,
    count: usize,
    k: &Kernels,
    rng: &mut Rng,
    mut pause: impl FnMut(&mut T) -> bool,
) -> Vec<Outcome> {
    let mut out = Vec::with_capacity(count);
    if view.is_empty() {
        out.resize(count, Outcome::Unschedulable(Diagnosis::default()));
        return out;
    }
    let mut b = Batch::new(view, pod, k);
    for i in 0..count {
        if i > 0 && !pause(view) {
            // The rows of the placements so far name other nodes now.
            out.clear();
            out.resize(count, Outcome::Unplaced);
            break;
        }
        let table: &NodeTable = view;
        let (max, ties) = b.best();
        if max == f32::NEG_INFINITY || ties == 0 {
            let d = b.diagnose(table);
            out.extend(std::iter::repeat_n(Outcome::Unschedulable(d), count - i));
            break;
        }
        let pick = rng.below(ties);
        let row = b.nth_best(max, pick).expect("invariant: ties counted");
        out.push(Outcome::Placed { row, score: max });
        b.place(table, row);
    }
    out
}

/// Convenience for callers holding `Arc`s.
pub fn schedule_pods(
    table: &NodeTable,
    pods: &[Arc<PodInfo>],
    k: &Kernels,
    rng: &mut Rng,
) -> Vec<Outcome> {
    match pods.first() {
        Some(p) => schedule_batch(table, p, pods.len(), k, rng),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NodeInfo;
    use crate::synth::{self, Profile};

    fn cluster(nodes: usize) -> (NodeTable, PodInfo) {
        let (nodes, pods) = synth::workload(nodes, 1, Profile::Basic, 7);
        let mut table = NodeTable::new();
        for n in &nodes {
            table.upsert_node(NodeInfo::from_node(n));
        }
        (table, PodInfo::from_pod(&pods[0]))
    }

    #[test]
    fn pauses_that_let_the_batch_go_on_change_nothing() {
        let (table, pod) = cluster(64);
        let k = Kernels::auto();
        let plain = schedule_batch(&table, &pod, 40, &k, &mut Rng::new(3));
        let mut pauses = 0;
        let mut view = &table;
        let paused = place_all(&mut view, &pod, 40, &k, &mut Rng::new(3), |_| {
            pauses += 1;
            true
        });
        assert_eq!(plain, paused);
        assert_eq!(
            pauses, 39,
            "a pause between placements, none before the first"
        );
    }

    #[test]
    fn a_batch_whose_nodes_change_in_a_pause_places_none_of_its_pods() {
        let (mut table, pod) = cluster(64);
        let k = Kernels::auto();
        let version = table.node_version;
        let mut view = &mut table;
        let mut pauses = 0;
        let out = place_all(&mut view, &pod, 40, &k, &mut Rng::new(3), |t| {
            pauses += 1;
            if pauses == 5 {
                let gone = t.names[0].clone();
                t.remove_node(&gone);
            }
            t.node_version == version
        });
        assert_eq!(out.len(), 40);
        assert!(
            out.iter().all(|o| *o == Outcome::Unplaced),
            "rows placed before the change name other nodes now: {out:?}"
        );
    }
}
