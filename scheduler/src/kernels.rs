//! The hot loops: feasibility bitmaps and scores over every row of the node table.
//!
//! Each kernel is a plain loop written so LLVM vectorises it (fixed 64-row blocks that build
//! one bitmap word, independent lanes, no bounds checks inside the block), compiled several
//! times by `multiversion` (AVX-512, AVX2+FMA, and the baseline) with the best chosen at run
//! time. The same source compiled for the baseline is [`Kernels::scalar`]; property tests
//! hold the dispatched kernels to it and to the reference implementation in `reference`.
//!
//! Scores are `f32` and computed by the per-node functions in this module (`resource_score`,
//! the `normalize_*` family), which the reference implementation calls too: vector lanes do
//! the same IEEE operations in the same order as the scalar code, so scores agree bit for bit
//! and a seeded tie-break picks the same node.

use multiversion::multiversion;

/// Bitmap words needed for `n` rows.
pub fn words(n: usize) -> usize {
    n.div_ceil(64)
}

/// A bitmap with the first `n` bits set.
pub fn all_ones(n: usize) -> Vec<u64> {
    let mut v = vec![u64::MAX; words(n)];
    if !n.is_multiple_of(64)
        && let Some(last) = v.last_mut()
    {
        *last = (1u64 << (n % 64)) - 1;
    }
    v
}

pub fn count(bits: &[u64]) -> usize {
    bits.iter().map(|w| w.count_ones() as usize).sum()
}

pub fn get(bits: &[u64], i: usize) -> bool {
    bits[i / 64] >> (i % 64) & 1 == 1
}

pub fn set(bits: &mut [u64], i: usize, on: bool) {
    if on {
        bits[i / 64] |= 1 << (i % 64);
    } else {
        bits[i / 64] &= !(1 << (i % 64));
    }
}

/// `acc &= mask`, returning how many set bits of `acc` the mask cleared.
pub fn and_counting(acc: &mut [u64], mask: &[u64]) -> usize {
    let mut cleared = 0;
    for (a, m) in acc.iter_mut().zip(mask) {
        cleared += (*a & !*m).count_ones() as usize;
        *a &= *m;
    }
    cleared
}

/// Builds bitmap words from a per-row predicate, 64 rows per word. `#[inline(always)]` so
/// that each multiversioned caller gets its own vectorised copy.
#[inline(always)]
fn collect<F: Fn(usize) -> bool>(out: &mut [u64], n: usize, f: F) {
    let full = n / 64;
    for (w, word) in out.iter_mut().enumerate().take(full) {
        let base = w * 64;
        let mut bits = 0u64;
        for j in 0..64 {
            bits |= u64::from(f(base + j)) << j;
        }
        *word = bits;
    }
    if !n.is_multiple_of(64) {
        let base = full * 64;
        let mut bits = 0u64;
        for j in 0..n % 64 {
            bits |= u64::from(f(base + j)) << j;
        }
        out[full] = bits;
    }
}

/// `alloc[i] - used[i] >= want` per row: does the request fit?
#[inline(always)]
fn fit_impl(out: &mut [u64], alloc: &[i64], used: &[i64], want: i64) {
    let n = alloc.len().min(used.len());
    let (alloc, used) = (&alloc[..n], &used[..n]);
    collect(out, n, |i| alloc[i] - used[i] >= want);
}

/// `col[i] == value` per row.
#[inline(always)]
fn eq_impl(out: &mut [u64], col: &[u32], value: u32) {
    collect(out, col.len(), |i| col[i] == value);
}

/// `lut[col[i]]` per row: a requirement evaluated once per distinct value.
#[inline(always)]
fn lut_impl(out: &mut [u64], col: &[u32], lut: &[bool]) {
    collect(out, col.len(), |i| {
        lut.get(col[i] as usize).copied().unwrap_or(false)
    });
}

/// Rows of a one-word bit table that share no bit with `mask`.
#[inline(always)]
fn disjoint1_impl(out: &mut [u64], rows: &[u64], mask: u64) {
    collect(out, rows.len(), |i| rows[i] & mask == 0);
}

/// `count[domain[i]] <= limit` per row (a domain of 0, no such label, passes when
/// `absent_ok`).
#[inline(always)]
fn domain_at_most_impl(
    out: &mut [u64],
    domain: &[u32],
    counts: &[u32],
    limit: u32,
    absent_ok: bool,
) {
    collect(out, domain.len(), |i| {
        let d = domain[i] as usize;
        if d == 0 {
            absent_ok
        } else {
            counts.get(d).copied().unwrap_or(0) <= limit
        }
    });
}

/// `count[domain[i]] >= 1` per row; rows without the label fail.
#[inline(always)]
fn domain_nonzero_impl(out: &mut [u64], domain: &[u32], counts: &[u32]) {
    collect(out, domain.len(), |i| {
        let d = domain[i] as usize;
        d != 0 && counts.get(d).copied().unwrap_or(0) > 0
    });
}

/// LeastAllocated + BalancedAllocation per node (see [`resource_score`]), written into
/// `out`, or `-inf` where the node is infeasible.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn resource_scores_impl(
    out: &mut [f32],
    feasible: &[u64],
    used_cpu: &[f32],
    used_mem: &[f32],
    inv_cpu: &[f32],
    inv_mem: &[f32],
    pod_cpu: f32,
    pod_mem: f32,
) {
    let n = out.len();
    let (used_cpu, used_mem, inv_cpu, inv_mem) =
        (&used_cpu[..n], &used_mem[..n], &inv_cpu[..n], &inv_mem[..n]);
    for (w, chunk) in out.chunks_mut(64).enumerate() {
        let bits = feasible[w];
        let base = w * 64;
        for (j, o) in chunk.iter_mut().enumerate() {
            let i = base + j;
            let s = resource_score(
                used_cpu[i],
                used_mem[i],
                inv_cpu[i],
                inv_mem[i],
                pod_cpu,
                pod_mem,
            );
            *o = if bits >> j & 1 == 1 {
                s
            } else {
                f32::NEG_INFINITY
            };
        }
    }
}

/// `out[i] += weight * values[i]` where `out[i]` is finite.
#[inline(always)]
fn add_weighted_impl(out: &mut [f32], values: &[f32], weight: f32) {
    let n = out.len();
    let values = &values[..n];
    for i in 0..n {
        out[i] += weight * values[i];
    }
}

/// The largest score and how many rows have it.
#[inline(always)]
fn max_count_impl(scores: &[f32]) -> (f32, usize) {
    const L: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; L];
    let chunks = scores.chunks_exact(L);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..L {
            lanes[k] = if c[k] > lanes[k] { c[k] } else { lanes[k] };
        }
    }
    let mut max = f32::NEG_INFINITY;
    for v in lanes.iter().chain(rest) {
        if *v > max {
            max = *v;
        }
    }
    let mut counts = [0u32; L];
    let chunks = scores.chunks_exact(L);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..L {
            counts[k] += u32::from(c[k] == max);
        }
    }
    let mut n: usize = counts.iter().map(|&c| c as usize).sum();
    n += rest.iter().filter(|&&v| v == max).count();
    (max, n)
}

macro_rules! dispatched {
    ($($name:ident => $imp:ident ( $($arg:ident : $ty:ty),* ) $(-> $ret:ty)?;)*) => {
        $(
            #[multiversion(targets(
                "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+popcnt",
                "x86_64+avx2+fma+bmi1+bmi2+popcnt",
                "aarch64+neon",
            ))]
            #[allow(clippy::too_many_arguments)]
            fn $name($($arg: $ty),*) $(-> $ret)? {
                $imp($($arg),*)
            }
        )*

        /// The kernels as function pointers, so the engine can run on the dispatched
        /// (vectorised) versions or on the baseline build of the same code.
        #[derive(Clone, Copy)]
        pub struct Kernels {
            $(pub $name: fn($($ty),*) $(-> $ret)?,)*
            pub name: &'static str,
        }

        impl Kernels {
            /// The best version for this CPU, chosen at run time.
            pub fn auto() -> Self {
                Kernels { $($name,)* name: detected() }
            }
            /// The same loops compiled for the baseline target only: the scalar reference.
            pub fn scalar() -> Self {
                Kernels { $($name: $imp,)* name: "scalar" }
            }
        }
    };
}

dispatched! {
    fit => fit_impl(out: &mut [u64], alloc: &[i64], used: &[i64], want: i64);
    eq => eq_impl(out: &mut [u64], col: &[u32], value: u32);
    lut => lut_impl(out: &mut [u64], col: &[u32], lut: &[bool]);
    disjoint1 => disjoint1_impl(out: &mut [u64], rows: &[u64], mask: u64);
    domain_at_most => domain_at_most_impl(out: &mut [u64], domain: &[u32], counts: &[u32], limit: u32, absent_ok: bool);
    domain_nonzero => domain_nonzero_impl(out: &mut [u64], domain: &[u32], counts: &[u32]);
    resource_scores => resource_scores_impl(out: &mut [f32], feasible: &[u64], used_cpu: &[f32], used_mem: &[f32], inv_cpu: &[f32], inv_mem: &[f32], pod_cpu: f32, pod_mem: f32);
    add_weighted => add_weighted_impl(out: &mut [f32], values: &[f32], weight: f32);
    max_count => max_count_impl(scores: &[f32]) -> (f32, usize);
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernels").field("name", &self.name).finish()
    }
}

/// Which instruction set `Kernels::auto` runs on this machine.
fn detected() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            return "avx512";
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return "avx2";
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        return "neon";
    }
    #[allow(unreachable_code)]
    "baseline"
}

/// Index of the `k`-th (0-based) row whose score equals `max`, in row order.
pub fn nth_equal(scores: &[f32], max: f32, k: usize) -> Option<usize> {
    scores
        .iter()
        .enumerate()
        .filter(|(_, v)| **v == max)
        .nth(k)
        .map(|(i, _)| i)
}

/// The fraction of an allocatable amount in use after adding the pod; a node with nothing
/// allocatable counts as full.
#[inline(always)]
fn fraction(used: f32, inv_alloc: f32, pod: f32) -> f32 {
    if inv_alloc == 0.0 {
        1.0
    } else {
        (used + pod) * inv_alloc
    }
}

/// LeastAllocated (weight 1) plus BalancedAllocation (weight 1) of one node, each 0–100:
/// least = mean over cpu and memory of 100 · (1 − fraction used), balanced =
/// 100 · (1 − |cpu fraction − memory fraction| / 2), fractions capped at 1.
#[inline(always)]
pub fn resource_score(
    used_cpu: f32,
    used_mem: f32,
    inv_cpu: f32,
    inv_mem: f32,
    pod_cpu: f32,
    pod_mem: f32,
) -> f32 {
    let c = fraction(used_cpu, inv_cpu, pod_cpu);
    let m = fraction(used_mem, inv_mem, pod_mem);
    let c = if c > 1.0 { 1.0 } else { c };
    let m = if m > 1.0 { 1.0 } else { m };
    let least = ((1.0 - c) * 100.0 + (1.0 - m) * 100.0) * 0.5;
    let d = c - m;
    let d = if d < 0.0 { -d } else { d };
    let balanced = (1.0 - d * 0.5) * 100.0;
    least + balanced
}

/// kube-scheduler's plugin weights in its default profile.
pub mod weight {
    pub const TAINT_TOLERATION: f32 = 3.0;
    pub const NODE_AFFINITY: f32 = 2.0;
    pub const POD_TOPOLOGY_SPREAD: f32 = 2.0;
    pub const INTER_POD_AFFINITY: f32 = 2.0;
    pub const IMAGE_LOCALITY: f32 = 1.0;
}

/// TaintToleration: fewer intolerable PreferNoSchedule taints is better; `max` over the
/// feasible nodes. 100 when no feasible node has any.
#[inline(always)]
pub fn normalize_taint(count: f32, max: f32) -> f32 {
    if max == 0.0 {
        100.0
    } else {
        100.0 - count * 100.0 / max
    }
}

/// Preferred NodeAffinity: the sum of matched weights, scaled so the best node has 100.
#[inline(always)]
pub fn normalize_node_affinity(sum: f32, max: f32) -> f32 {
    if max == 0.0 { 0.0 } else { sum * 100.0 / max }
}

/// Preferred InterPodAffinity: min–max scaled to 0–100; 0 everywhere when all are equal.
#[inline(always)]
pub fn normalize_inter_pod(raw: f32, min: f32, max: f32) -> f32 {
    if max == min {
        0.0
    } else {
        (raw - min) * 100.0 / (max - min)
    }
}

/// PodTopologySpread (ScheduleAnyway): fewer matching pods in the node's domains is better.
/// `raw` is negative for a node that lacks a topology key (it scores 0).
#[inline(always)]
pub fn normalize_spread(raw: f32, min: f32, max: f32) -> f32 {
    if raw < 0.0 {
        0.0
    } else if max == 0.0 {
        100.0
    } else {
        (max + min - raw) * 100.0 / max
    }
}

/// ImageLocality: the size of the pod's images already on the node, each scaled by the
/// share of nodes that have it, mapped from [23 MB, 1000 MB × containers] onto 0–100.
#[inline(always)]
pub fn image_score(sum: f32, containers: f32) -> f32 {
    const MIN: f32 = 23.0 * 1024.0 * 1024.0;
    let max = 1000.0 * 1024.0 * 1024.0 * containers;
    let s = if sum < MIN {
        MIN
    } else if sum > max {
        max
    } else {
        sum
    };
    (s - MIN) * 100.0 / (max - MIN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bits_of(out: &[u64], n: usize) -> Vec<bool> {
        (0..n).map(|i| get(out, i)).collect()
    }

    proptest! {
        #[test]
        fn fit_matches_naive(rows in proptest::collection::vec((0i64..8000, 0i64..8000), 0..300), want in 0i64..4000) {
            let alloc: Vec<i64> = rows.iter().map(|r| r.0).collect();
            let used: Vec<i64> = rows.iter().map(|r| r.1).collect();
            let n = rows.len();
            for k in [Kernels::auto(), Kernels::scalar()] {
                let mut out = vec![0u64; words(n)];
                (k.fit)(&mut out, &alloc, &used, want);
                let naive: Vec<bool> = rows.iter().map(|(a, u)| a - u >= want).collect();
                prop_assert_eq!(bits_of(&out, n), naive);
            }
        }

        #[test]
        fn column_kernels_match_naive(col in proptest::collection::vec(0u32..6, 0..300), v in 0u32..6, lut in proptest::collection::vec(any::<bool>(), 6)) {
            let n = col.len();
            for k in [Kernels::auto(), Kernels::scalar()] {
                let mut out = vec![0u64; words(n)];
                (k.eq)(&mut out, &col, v);
                prop_assert_eq!(bits_of(&out, n), col.iter().map(|c| *c == v).collect::<Vec<_>>());
                (k.lut)(&mut out, &col, &lut);
                prop_assert_eq!(bits_of(&out, n), col.iter().map(|c| lut[*c as usize]).collect::<Vec<_>>());
                let counts = [0u32, 3, 0, 1, 2, 0];
                (k.domain_at_most)(&mut out, &col, &counts, 1, true);
                prop_assert_eq!(bits_of(&out, n), col.iter().map(|c| *c == 0 || counts[*c as usize] <= 1).collect::<Vec<_>>());
                (k.domain_nonzero)(&mut out, &col, &counts);
                prop_assert_eq!(bits_of(&out, n), col.iter().map(|c| *c != 0 && counts[*c as usize] > 0).collect::<Vec<_>>());
                let rows: Vec<u64> = col.iter().map(|c| u64::from(*c)).collect();
                (k.disjoint1)(&mut out, &rows, 0b10);
                prop_assert_eq!(bits_of(&out, n), rows.iter().map(|r| r & 0b10 == 0).collect::<Vec<_>>());
            }
        }

        #[test]
        fn scores_match_scalar_bit_for_bit(
            rows in proptest::collection::vec((0f32..64000.0, 0f32..3.0e10, 1i64..64000, 1i64..40_000_000_000, any::<bool>()), 0..300),
            pod in (0f32..4000.0, 0f32..4.0e9),
        ) {
            let n = rows.len();
            let uc: Vec<f32> = rows.iter().map(|r| r.0).collect();
            let um: Vec<f32> = rows.iter().map(|r| r.1).collect();
            let ic: Vec<f32> = rows.iter().map(|r| crate::table::inverse(r.2)).collect();
            let im: Vec<f32> = rows.iter().map(|r| crate::table::inverse(r.3)).collect();
            let mut feasible = vec![0u64; words(n)];
            for (i, r) in rows.iter().enumerate() { set(&mut feasible, i, r.4); }
            let mut a = vec![0f32; n];
            let mut b = vec![0f32; n];
            (Kernels::auto().resource_scores)(&mut a, &feasible, &uc, &um, &ic, &im, pod.0, pod.1);
            (Kernels::scalar().resource_scores)(&mut b, &feasible, &uc, &um, &ic, &im, pod.0, pod.1);
            for i in 0..n {
                let expect = if rows[i].4 { resource_score(uc[i], um[i], ic[i], im[i], pod.0, pod.1) } else { f32::NEG_INFINITY };
                prop_assert_eq!(a[i].to_bits(), expect.to_bits());
                prop_assert_eq!(b[i].to_bits(), expect.to_bits());
            }
            let (ma, ca) = (Kernels::auto().max_count)(&a);
            let naive_max = a.iter().copied().fold(f32::NEG_INFINITY, |m, v| if v > m { v } else { m });
            prop_assert_eq!(ma.to_bits(), naive_max.to_bits());
            prop_assert_eq!(ca, a.iter().filter(|v| **v == naive_max).count());
        }
    }

    #[test]
    fn all_ones_sets_exactly_n_bits() {
        for n in [0, 1, 63, 64, 65, 200] {
            assert_eq!(count(&all_ones(n)), n);
        }
    }
}
