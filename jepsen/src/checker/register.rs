//! The versioned compare-and-set register: each key holds a value and etcd's per-key
//! `version` (number of puts since creation). Reads return both, writes bump the version,
//! and CAS compares the version, so a read that returns a value with the wrong version is
//! caught as surely as a stale value.
//!
//! Linearizability is compositional, so the history is split per key and each key is
//! searched on its own with [`wgl::check`] and its own step budget; a key whose budget runs
//! out is `unknown`, never silently valid.
//!
//! Op values (`key` always present):
//!
//! | f | invoke | ok |
//! |---|---|---|
//! | read | `{key}` | `{key, value: n or null, version, rev}` |
//! | write | `{key, value}` | `{key, value, rev}` |
//! | cas | `{key, expect, value}` | `{key, expect, value, succeeded, rev}` |

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use super::wgl::{self, Call, Model, Outcome};
use super::{Validity, Verdict};
use crate::history::{F, History, OpType, Pair};

/// Keys of the register workload start with this.
pub const PREFIX: &str = "r/";

/// Default per-key search budget (steps).
pub const DEFAULT_BUDGET: u64 = 5_000_000;

/// The register's state.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Register {
    pub value: Option<i64>,
    pub version: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegOp {
    Read {
        value: Option<i64>,
        version: i64,
    },
    Write {
        value: i64,
    },
    /// `succeeded` is `None` when the outcome is unknown.
    Cas {
        expect: i64,
        value: i64,
        succeeded: Option<bool>,
    },
}

impl Model for Register {
    type Op = RegOp;

    fn step(&self, op: &RegOp) -> Option<Register> {
        let put = |value: i64| Register {
            value: Some(value),
            version: self.version + 1,
        };
        match *op {
            RegOp::Read { value, version } => {
                (value == self.value && version == self.version).then(|| self.clone())
            }
            RegOp::Write { value } => Some(put(value)),
            RegOp::Cas {
                expect,
                value,
                succeeded,
            } => match (succeeded, expect == self.version) {
                (Some(true), true) | (None, true) => Some(put(value)),
                (Some(true), false) | (Some(false), true) => None,
                (Some(false), false) | (None, false) => Some(self.clone()),
            },
        }
    }
}

#[derive(Debug, Deserialize)]
struct RegValue {
    key: String,
    #[serde(default)]
    value: Option<i64>,
    #[serde(default)]
    version: Option<i64>,
    #[serde(default)]
    expect: Option<i64>,
    #[serde(default)]
    succeeded: Option<bool>,
}

/// The register op a history pair stands for; `None` for ops without effect (failed ops and
/// reads that did not complete) and for ops of other workloads.
fn reg_op(p: &Pair<'_>) -> Result<Option<(String, RegOp)>, String> {
    let outcome = p.outcome();
    if outcome == OpType::Fail {
        return Ok(None);
    }
    let v: RegValue = serde_json::from_value(p.value().clone())
        .map_err(|e| format!("op {}: {e}", p.invoke.index))?;
    if !v.key.starts_with(PREFIX) {
        return Ok(None);
    }
    let determinate = outcome == OpType::Ok;
    let missing = |what: &str| format!("op {}: {} without {what}", p.invoke.index, p.invoke.f);
    let op = match p.invoke.f {
        F::Read if !determinate => return Ok(None),
        F::Read => RegOp::Read {
            value: v.value,
            version: v.version.ok_or_else(|| missing("version"))?,
        },
        F::Write => RegOp::Write {
            value: v.value.ok_or_else(|| missing("value"))?,
        },
        F::Cas => RegOp::Cas {
            expect: v.expect.ok_or_else(|| missing("expect"))?,
            value: v.value.ok_or_else(|| missing("value"))?,
            succeeded: if determinate {
                Some(v.succeeded.ok_or_else(|| missing("succeeded"))?)
            } else {
                None
            },
        },
        _ => return Ok(None),
    };
    Ok(Some((v.key, op)))
}

/// Checks every register key of `history`, each with `budget` search steps.
pub fn check(history: &History, budget: u64) -> Verdict {
    let pairs = history.pairs();
    let mut per_key: BTreeMap<String, Vec<Call<RegOp>>> = BTreeMap::new();
    for (i, p) in pairs.iter().enumerate() {
        if !matches!(p.invoke.f, F::Read | F::Write | F::Cas) || p.invoke.value.get("key").is_none()
        {
            continue;
        }
        match reg_op(p) {
            Ok(Some((key, op))) => per_key.entry(key).or_default().push(Call {
                id: i,
                op,
                invoke: p.invoke.time,
                complete: p.end(),
            }),
            Ok(None) => {}
            Err(e) => {
                return Verdict::new(
                    "linearizable",
                    Validity::Unknown,
                    format!("malformed history: {e}"),
                    Value::Null,
                );
            }
        }
    }
    let mut valid = Validity::True;
    let mut failures = Vec::new();
    let mut unknown = Vec::new();
    for (key, calls) in &per_key {
        match wgl::check(&Register::default(), calls, budget) {
            Outcome::Linearizable => {}
            Outcome::Unknown { steps } => {
                valid = valid.and(Validity::Unknown);
                unknown.push(json!({ "key": key, "ops": calls.len(), "steps": steps }));
            }
            Outcome::NotLinearizable(cx) => {
                valid = Validity::False;
                let render = |id: &usize| pairs[*id].describe();
                let tail = cx.prefix.len().saturating_sub(8);
                failures.push(json!({
                    "key": key,
                    "ops": calls.len(),
                    "linearized_prefix_len": cx.prefix.len(),
                    "last_linearized": cx.prefix[tail..].iter().map(render).collect::<Vec<_>>(),
                    "state": format!("value={:?} version={}", cx.state.value, cx.state.version),
                    "blocked": render(&cx.blocked),
                    "concurrent_candidates": cx.pending.iter().map(render).collect::<Vec<_>>(),
                }));
            }
        }
    }
    let summary = match valid {
        Validity::True => format!("{} keys linearizable", per_key.len()),
        Validity::Unknown => format!(
            "{} of {} keys undecided within the search budget",
            unknown.len(),
            per_key.len()
        ),
        Validity::False => format!(
            "{} of {} keys not linearizable; first: {}",
            failures.len(),
            per_key.len(),
            counterexample_text(&failures[0])
        ),
    };
    Verdict::new(
        "linearizable",
        valid,
        summary,
        json!({ "keys": per_key.len(), "failures": failures, "unknown": unknown }),
    )
}

/// A failure's counterexample as indented text, for the console.
pub fn counterexample_text(failure: &Value) -> String {
    let lines = |k: &str| {
        failure[k]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(|s| format!("\n      {s}"))
                    .collect::<String>()
            })
            .unwrap_or_default()
    };
    format!(
        "key {}: after linearizing {} ops (last ones:{}\n    ) the state is {}; this op completed \
         before any order could place it:\n      {}\n    while these were pending:{}",
        failure["key"].as_str().unwrap_or("?"),
        failure["linearized_prefix_len"],
        lines("last_linearized"),
        failure["state"].as_str().unwrap_or("?"),
        failure["blocked"].as_str().unwrap_or("?"),
        lines("concurrent_candidates"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Builder;
    use proptest::prelude::*;

    fn read(b: &mut Builder, p: u64, key: &str, value: Option<i64>, version: i64) {
        b.invoke(p, F::Read, json!({"key": key})).ok(
            p,
            F::Read,
            json!({"key": key, "value": value, "version": version}),
        );
    }

    fn write(b: &mut Builder, p: u64, key: &str, value: i64) {
        b.invoke(p, F::Write, json!({"key": key, "value": value}))
            .ok(p, F::Write, json!({"key": key, "value": value}));
    }

    #[test]
    fn sequential_history_is_linearizable() {
        let mut b = Builder::new();
        read(&mut b, 1, "r/a", None, 0);
        write(&mut b, 1, "r/a", 5);
        b.invoke(2, F::Cas, json!({"key": "r/a", "expect": 1, "value": 6}))
            .ok(
                2,
                F::Cas,
                json!({"key": "r/a", "expect": 1, "value": 6, "succeeded": true}),
            );
        b.invoke(2, F::Cas, json!({"key": "r/a", "expect": 1, "value": 7}))
            .ok(
                2,
                F::Cas,
                json!({"key": "r/a", "expect": 1, "value": 7, "succeeded": false}),
            );
        read(&mut b, 3, "r/a", Some(6), 2);
        let v = check(&b.build(), DEFAULT_BUDGET);
        assert_eq!(v.valid, Validity::True, "{v:?}");
    }

    /// The classic anomaly after a leader change: the old leader, cut off, serves a read
    /// from its own state after the new leader acknowledged a newer write.
    #[test]
    fn stale_read_after_leader_change_is_caught() {
        let mut b = Builder::new();
        write(&mut b, 1, "r/a", 1);
        b.nemesis(F::Start, "partition leader n1");
        write(&mut b, 2, "r/a", 2); // acknowledged by the new leader
        read(&mut b, 1, "r/a", Some(1), 1); // old leader answers from stale state
        let v = check(&b.build(), DEFAULT_BUDGET);
        assert_eq!(v.valid, Validity::False, "{v:?}");
        assert!(v.summary.contains("key r/a"), "{}", v.summary);
        assert!(v.summary.contains("\"value\":1"), "{}", v.summary);
    }

    #[test]
    fn lost_acknowledged_write_is_caught() {
        let mut b = Builder::new();
        write(&mut b, 1, "r/a", 1);
        write(&mut b, 1, "r/a", 2);
        b.nemesis(F::Start, "kill n1").nemesis(F::Stop, "kill n1");
        read(&mut b, 2, "r/a", Some(1), 1);
        assert_eq!(check(&b.build(), DEFAULT_BUDGET).valid, Validity::False);
    }

    #[test]
    fn wrong_version_is_caught_even_with_the_right_value() {
        let mut b = Builder::new();
        write(&mut b, 1, "r/a", 1);
        read(&mut b, 2, "r/a", Some(1), 2);
        assert_eq!(check(&b.build(), DEFAULT_BUDGET).valid, Validity::False);
    }

    #[test]
    fn info_cas_may_or_may_not_have_applied() {
        for (value, version) in [(Some(1), 1), (Some(9), 2)] {
            let mut b = Builder::new();
            write(&mut b, 1, "r/a", 1);
            b.invoke(2, F::Cas, json!({"key": "r/a", "expect": 1, "value": 9}))
                .info(2, F::Cas, json!({"key": "r/a", "expect": 1, "value": 9}));
            read(&mut b, 3, "r/a", value, version);
            assert_eq!(
                check(&b.build(), DEFAULT_BUDGET).valid,
                Validity::True,
                "read {value:?}"
            );
        }
    }

    #[test]
    fn keys_are_checked_independently_and_other_workloads_ignored() {
        let mut b = Builder::new();
        write(&mut b, 1, "r/a", 1);
        write(&mut b, 1, "r/b", 2);
        read(&mut b, 2, "r/a", Some(1), 1);
        read(&mut b, 2, "r/b", Some(2), 1);
        read(&mut b, 2, "l/x", Some(7), 7); // a lease-workload read: not a register key
        let v = check(&b.build(), DEFAULT_BUDGET);
        assert_eq!(v.valid, Validity::True);
        assert_eq!(v.details["keys"], 2);
    }

    #[test]
    fn exhausted_budget_is_unknown() {
        let mut b = Builder::new();
        for p in 0..10 {
            b.invoke(p, F::Write, json!({"key": "r/a", "value": p}));
        }
        for p in 0..10 {
            b.ok(p, F::Write, json!({"key": "r/a", "value": p}));
        }
        read(&mut b, 20, "r/a", Some(3), 11);
        assert_eq!(check(&b.build(), 100).valid, Validity::Unknown);
        assert_eq!(check(&b.build(), DEFAULT_BUDGET).valid, Validity::False);
    }

    /// A random concurrent run against a real register: processes invoke, take effect at a
    /// random moment inside their interval, then complete; some completions are lost (info).
    fn simulate(choices: &[(u8, u8)], procs: u64) -> History {
        #[derive(Clone)]
        enum Phase {
            Idle,
            Invoked(usize, Value),
            Applied(usize, Value),
        }
        const FS: [F; 3] = [F::Read, F::Write, F::Cas];
        let mut reg = Register::default();
        let mut next_value = 100;
        let mut phase = vec![Phase::Idle; procs as usize];
        let mut proc_id: Vec<u64> = (0..procs).collect();
        let mut b = Builder::new();
        for &(who, what) in choices {
            let p = (u64::from(who) % procs) as usize;
            let id = proc_id[p];
            phase[p] = match phase[p].clone() {
                Phase::Idle => {
                    let kind = usize::from(what % 3);
                    let value = match kind {
                        0 => json!({"key": "r/k"}),
                        1 => json!({"key": "r/k", "value": next_value}),
                        _ => {
                            json!({"key": "r/k", "expect": i64::from(what % 4), "value": next_value})
                        }
                    };
                    next_value += 1;
                    b.invoke(id, FS[kind], value.clone());
                    Phase::Invoked(kind, value)
                }
                Phase::Invoked(kind, inv) => {
                    let out = match kind {
                        0 => json!({"key": "r/k", "value": reg.value, "version": reg.version}),
                        1 => {
                            reg = Register {
                                value: inv["value"].as_i64(),
                                version: reg.version + 1,
                            };
                            inv
                        }
                        _ => {
                            let ok = inv["expect"].as_i64() == Some(reg.version);
                            if ok {
                                reg = Register {
                                    value: inv["value"].as_i64(),
                                    version: reg.version + 1,
                                };
                            }
                            let mut o = inv;
                            o["succeeded"] = json!(ok);
                            o
                        }
                    };
                    Phase::Applied(kind, out)
                }
                Phase::Applied(kind, out) => {
                    if what % 7 == 0 && kind != 0 {
                        b.info(id, FS[kind], out);
                        proc_id[p] += procs;
                    } else {
                        b.ok(id, FS[kind], out);
                    }
                    Phase::Idle
                }
            };
        }
        b.build()
    }

    proptest! {
        #[test]
        fn simulated_register_histories_are_linearizable(
            choices in proptest::collection::vec((any::<u8>(), any::<u8>()), 0..120),
        ) {
            let h = simulate(&choices, 4);
            let v = check(&h, DEFAULT_BUDGET);
            prop_assert_eq!(v.valid, Validity::True, "{:?}", v);
        }

        #[test]
        fn a_read_of_a_value_never_written_is_caught(
            choices in proptest::collection::vec((any::<u8>(), any::<u8>()), 1..120),
        ) {
            let mut h = simulate(&choices, 4);
            let target = h.ops.iter().position(|o| o.f == F::Read && o.kind == OpType::Ok);
            prop_assume!(target.is_some());
            if let Some(i) = target {
                h.ops[i].value["value"] = json!(-1);
            }
            prop_assert_eq!(check(&h, DEFAULT_BUDGET).valid, Validity::False);
        }
    }
}
