//! The global order check that applies to every workload: if operation A completed before
//! operation B was invoked, the revision B observed is at least A's. Every `ok` completion
//! that carries a header revision (`value.rev`) takes part; this catches stale reads and
//! revision regressions across keys, which a per-key linearizability check cannot see.
//!
//! Sweep in O(n log n): walk invocations in time order, folding in every completion that
//! happened strictly before, and compare against the highest revision seen so far.

use serde_json::json;

use super::{Validity, Verdict};
use crate::history::{History, OpType, Process};

pub fn check(history: &History) -> Verdict {
    let pairs = history.pairs();
    let mut done: Vec<(u64, i64, usize)> = Vec::new();
    let mut started: Vec<(u64, i64, usize)> = Vec::new();
    for (i, p) in pairs.iter().enumerate() {
        if p.invoke.process == Process::Nemesis || p.outcome() != OpType::Ok {
            continue;
        }
        let Some(c) = p.completion else { continue };
        let Some(rev) = c.rev() else { continue };
        done.push((c.time, rev, i));
        started.push((p.invoke.time, rev, i));
    }
    done.sort_unstable();
    started.sort_unstable();
    let mut anomalies = Vec::new();
    let mut max: Option<(i64, usize)> = None;
    let mut d = 0;
    for &(t, rev, i) in &started {
        while d < done.len() && done[d].0 < t {
            if max.is_none_or(|(m, _)| done[d].1 > m) {
                max = Some((done[d].1, done[d].2));
            }
            d += 1;
        }
        if let Some((m, j)) = max
            && rev < m
        {
            anomalies.push(json!({
                "before": pairs[j].describe(),
                "after": pairs[i].describe(),
                "before_rev": m,
                "after_rev": rev,
            }));
        }
    }
    let valid = Validity::from_ok(anomalies.is_empty());
    let summary = if anomalies.is_empty() {
        format!("{} ops in revision order", started.len())
    } else {
        format!(
            "{} ops observed a revision lower than an op that completed before they began; first: {} then {}",
            anomalies.len(),
            anomalies[0]["before"],
            anomalies[0]["after"]
        )
    };
    anomalies.truncate(20);
    Verdict::new(
        "revision-order",
        valid,
        summary,
        json!({ "ops": started.len(), "anomalies": anomalies }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Builder, F};
    use proptest::prelude::*;

    #[test]
    fn concurrent_ops_may_observe_any_order() {
        let mut b = Builder::new();
        b.invoke(1, F::Write, json!({}))
            .invoke(2, F::Read, json!({}))
            .ok(1, F::Write, json!({"rev": 9}))
            .ok(2, F::Read, json!({"rev": 8}));
        assert_eq!(check(&b.build()).valid, Validity::True);
    }

    #[test]
    fn later_op_with_lower_revision_is_caught() {
        let mut b = Builder::new();
        b.invoke(1, F::Write, json!({}))
            .ok(1, F::Write, json!({"rev": 9}))
            .invoke(2, F::Read, json!({}))
            .ok(2, F::Read, json!({"rev": 8}));
        let v = check(&b.build());
        assert_eq!(v.valid, Validity::False);
        assert_eq!(v.details["anomalies"][0]["before_rev"], 9);
    }

    #[test]
    fn failed_and_indeterminate_ops_do_not_count() {
        let mut b = Builder::new();
        b.invoke(1, F::Write, json!({}))
            .info(1, F::Write, json!({"rev": 9}))
            .invoke(3, F::Write, json!({}))
            .fail(3, F::Write, json!({"rev": 12}))
            .invoke(2, F::Read, json!({}))
            .ok(2, F::Read, json!({"rev": 8}));
        assert_eq!(check(&b.build()).valid, Validity::True);
    }

    proptest! {
        /// Against a naive all-pairs model.
        #[test]
        fn matches_naive_pairwise_check(ops in proptest::collection::vec((0u64..50, 1u64..20, 0i64..30), 0..40)) {
            let mut entries: Vec<(u64, bool, u64, i64)> = Vec::new();
            for (p, &(start, len, rev)) in ops.iter().enumerate() {
                entries.push((start * 2, false, p as u64, rev));
                entries.push((start * 2 + len * 2 + 1, true, p as u64, rev));
            }
            entries.sort_unstable();
            let mut h = History::default();
            for (i, &(t, is_ret, p, rev)) in entries.iter().enumerate() {
                h.ops.push(crate::history::Op {
                    index: i as u64,
                    time: t,
                    process: Process::Client(p),
                    kind: if is_ret { OpType::Ok } else { OpType::Invoke },
                    f: F::Read,
                    value: if is_ret { json!({"rev": rev}) } else { json!({}) },
                    node: None,
                    error: None,
                });
            }
            let naive = ops.iter().all(|&(sa, la, ra)| {
                ops.iter().all(|&(sb, _, rb)| sa * 2 + la * 2 + 1 >= sb * 2 || rb >= ra)
            });
            prop_assert_eq!(check(&h).valid, Validity::from_ok(naive));
        }
    }
}
