//! The set: clients add unique elements (a CAS loop on one key), readers read the whole set,
//! and a final read after the faults heal decides what survived.
//!
//! - **lost**: acknowledged (or once read) but missing from the final read;
//! - **unexpected**: read but never attempted, or attempted and definitely failed;
//! - **stale**: a read that began after an element was known to be present (its add was
//!   acknowledged, or an earlier read returned it) and did not contain it — with linearizable
//!   reads there must be none.
//!
//! Op values: `add` `{key, element}`; `read` ok `{key, elements: [..], final: bool, rev}`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::{Validity, Verdict};
use crate::history::{F, History, OpType};

/// Keys of the set workload start with this.
pub const PREFIX: &str = "s/";

struct Read {
    invoke: u64,
    complete: u64,
    elements: BTreeSet<i64>,
    is_final: bool,
}

fn in_set(v: &Value) -> bool {
    v.get("key")
        .and_then(Value::as_str)
        .is_some_and(|k| k.starts_with(PREFIX))
}

pub fn check(history: &History) -> Verdict {
    let mut attempted: BTreeSet<i64> = BTreeSet::new();
    let mut failed: BTreeSet<i64> = BTreeSet::new();
    // element -> earliest time it is known present
    let mut known: BTreeMap<i64, u64> = BTreeMap::new();
    let mut reads: Vec<Read> = Vec::new();
    for p in history.pairs() {
        if !in_set(&p.invoke.value) {
            continue;
        }
        match p.invoke.f {
            F::Add => {
                let Some(e) = p.invoke.value.get("element").and_then(Value::as_i64) else {
                    continue;
                };
                attempted.insert(e);
                match (p.outcome(), p.end()) {
                    (OpType::Ok, Some(t)) => {
                        known.entry(e).and_modify(|k| *k = (*k).min(t)).or_insert(t);
                    }
                    (OpType::Fail, _) => {
                        failed.insert(e);
                    }
                    _ => {}
                }
            }
            F::Read if p.outcome() == OpType::Ok => {
                let Some(c) = p.completion else { continue };
                let elements: BTreeSet<i64> = c
                    .value
                    .get("elements")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_i64).collect())
                    .unwrap_or_default();
                for &e in &elements {
                    known
                        .entry(e)
                        .and_modify(|k| *k = (*k).min(c.time))
                        .or_insert(c.time);
                }
                reads.push(Read {
                    invoke: p.invoke.time,
                    complete: c.time,
                    elements,
                    is_final: c.value.get("final").and_then(Value::as_bool) == Some(true),
                });
            }
            _ => {}
        }
    }
    let Some(last) = reads
        .iter()
        .filter(|r| r.is_final)
        .max_by_key(|r| r.complete)
    else {
        return Verdict::new(
            "set",
            Validity::Unknown,
            "no final read completed".to_string(),
            json!({ "attempted": attempted.len(), "reads": reads.len() }),
        );
    };
    // An add acknowledged only after the final read began may legitimately be missing
    // from it: never read, not lost.
    let mut lost = Vec::new();
    let mut never_read = Vec::new();
    for (&e, &t) in &known {
        if !last.elements.contains(&e) {
            if t < last.invoke {
                lost.push(e);
            } else {
                never_read.push(e);
            }
        }
    }
    let seen: BTreeSet<i64> = reads
        .iter()
        .flat_map(|r| r.elements.iter().copied())
        .collect();
    let unexpected: Vec<i64> = seen
        .iter()
        .filter(|e| !attempted.contains(e) || failed.contains(e))
        .copied()
        .collect();
    let mut stale: BTreeMap<i64, usize> = BTreeMap::new();
    for r in &reads {
        for (&e, &t) in &known {
            if r.invoke > t && !r.elements.contains(&e) && last.elements.contains(&e) {
                *stale.entry(e).or_default() += 1;
            }
        }
    }
    let acked = history
        .pairs()
        .iter()
        .filter(|p| p.invoke.f == F::Add && p.outcome() == OpType::Ok && in_set(&p.invoke.value))
        .count();
    let valid = Validity::from_ok(lost.is_empty() && unexpected.is_empty() && stale.is_empty());
    let summary = format!(
        "{} attempted, {} acknowledged, {} in the final read; lost {}, never read {}, unexpected {}, stale {}",
        attempted.len(),
        acked,
        last.elements.len(),
        lost.len(),
        never_read.len(),
        unexpected.len(),
        stale.len()
    );
    let first = |v: &[i64]| v.iter().take(50).copied().collect::<Vec<_>>();
    Verdict::new(
        "set",
        valid,
        summary,
        json!({
            "attempted": attempted.len(),
            "acknowledged": acked,
            "final": last.elements.len(),
            "lost": first(&lost),
            "never_read": first(&never_read),
            "unexpected": first(&unexpected),
            "stale": stale.iter().take(50).map(|(e, n)| json!({"element": e, "reads": n})).collect::<Vec<_>>(),
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Builder;

    fn add(b: &mut Builder, p: u64, e: i64, ok: bool) {
        b.invoke(p, F::Add, json!({"key": "s/set", "element": e}));
        if ok {
            b.ok(p, F::Add, json!({"key": "s/set", "element": e}));
        } else {
            b.fail(p, F::Add, json!({"key": "s/set", "element": e}));
        }
    }

    fn read(b: &mut Builder, p: u64, elements: &[i64], is_final: bool) {
        b.invoke(p, F::Read, json!({"key": "s/set"})).ok(
            p,
            F::Read,
            json!({"key": "s/set", "elements": elements, "final": is_final}),
        );
    }

    #[test]
    fn everything_acknowledged_survives() {
        let mut b = Builder::new();
        add(&mut b, 1, 1, true);
        add(&mut b, 1, 2, false);
        b.invoke(2, F::Add, json!({"key": "s/set", "element": 3}))
            .info(2, F::Add, json!({"key": "s/set", "element": 3}));
        read(&mut b, 3, &[1], false);
        read(&mut b, 3, &[1, 3], true);
        let v = check(&b.build());
        assert_eq!(v.valid, Validity::True, "{v:?}");
    }

    #[test]
    fn lost_acknowledged_add_is_caught() {
        let mut b = Builder::new();
        add(&mut b, 1, 1, true);
        add(&mut b, 1, 2, true);
        read(&mut b, 3, &[1], true);
        let v = check(&b.build());
        assert_eq!(v.valid, Validity::False);
        assert_eq!(v.details["lost"], json!([2]));
    }

    #[test]
    fn stale_and_unexpected_reads_are_caught() {
        let mut b = Builder::new();
        add(&mut b, 1, 1, true);
        read(&mut b, 2, &[], false); // began after 1 was acknowledged
        read(&mut b, 2, &[1, 9], true); // 9 was never added
        let v = check(&b.build());
        assert_eq!(v.valid, Validity::False);
        assert_eq!(v.details["unexpected"], json!([9]));
        assert_eq!(v.details["stale"][0]["element"], 1);
    }

    #[test]
    fn add_acknowledged_after_the_final_read_began_is_not_lost() {
        let mut b = Builder::new();
        add(&mut b, 1, 1, true);
        b.invoke(2, F::Add, json!({"key": "s/set", "element": 2}))
            .invoke(3, F::Read, json!({"key": "s/set"}))
            .ok(2, F::Add, json!({"key": "s/set", "element": 2}))
            .ok(
                3,
                F::Read,
                json!({"key": "s/set", "elements": [1], "final": true}),
            );
        let v = check(&b.build());
        assert_eq!(v.valid, Validity::True, "{v:?}");
        assert_eq!(v.details["never_read"], json!([2]));
    }

    #[test]
    fn failed_add_that_appears_is_unexpected() {
        let mut b = Builder::new();
        add(&mut b, 1, 1, false);
        read(&mut b, 3, &[1], true);
        assert_eq!(check(&b.build()).details["unexpected"], json!([1]));
    }

    #[test]
    fn without_a_final_read_the_answer_is_unknown() {
        let mut b = Builder::new();
        add(&mut b, 1, 1, true);
        assert_eq!(check(&b.build()).valid, Validity::Unknown);
    }
}
