//! Linearizability search after Wing & Gong, with Lowe's memoisation ("Testing for
//! linearizability", 2017): a depth-first search for an order of the operations that respects
//! real time and that the sequential model accepts.
//!
//! The history becomes a doubly linked list of call and return entries in time order:
//!
//! ```text
//! head ─► call a ─► call b ─► ret a ─► call c ─► ret b ─► ret c ─► ret d(∞) ─► nil
//! ```
//!
//! Scanning from the head, the search tries each call before the first return: if the model
//! accepts it, the op is *lifted* out (its call and return unlinked), pushed on a stack, and
//! the scan restarts from the head. Reaching a return means that op could not be placed before
//! its own completion: pop the last choice, relink it, and try the next call after it. A cache
//! of (set of linearized ops, model state) prunes configurations already explored, which is
//! what makes the search practical.
//!
//! Indeterminate (`info`) ops have their return at infinity: they may be linearized anywhere
//! after their call, or never. The search succeeds as soon as every op that completed is
//! placed, whatever is left of the indeterminate ones.

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;

/// A sequential specification.
pub trait Model: Clone + Eq + Hash + Debug {
    type Op: Debug;
    /// The state after applying `op`, or `None` if `op`'s recorded result cannot happen in
    /// this state.
    fn step(&self, op: &Self::Op) -> Option<Self>;
}

/// One operation to place: its call and completion times, and the caller's id for it.
#[derive(Debug, Clone)]
pub struct Call<O> {
    pub id: usize,
    pub op: O,
    pub invoke: u64,
    /// `None` for an indeterminate op.
    pub complete: Option<u64>,
}

/// Why no linearization exists, from the deepest point the search reached.
#[derive(Debug, Clone, PartialEq)]
pub struct Counterexample<M> {
    /// Ids of the longest linearizable prefix found, in linearization order.
    pub prefix: Vec<usize>,
    /// The model state after that prefix.
    pub state: M,
    /// The op that completed before any order could place it.
    pub blocked: usize,
    /// Ops called before that completion and not in the prefix: the candidates that were
    /// tried and refused.
    pub pending: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome<M> {
    Linearizable,
    NotLinearizable(Counterexample<M>),
    /// The search budget ran out after this many steps.
    Unknown {
        steps: u64,
    },
}

const NIL: usize = usize::MAX;

/// The call/return list with O(1) unlink and relink (dancing links).
struct Entries {
    next: Vec<usize>,
    prev: Vec<usize>,
    /// For each node (0 is the head): the op index and whether it is the return.
    node: Vec<(usize, bool)>,
    call_node: Vec<usize>,
    ret_node: Vec<usize>,
}

impl Entries {
    fn new<O>(calls: &[Call<O>]) -> Entries {
        let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(calls.len() * 2);
        for (i, c) in calls.iter().enumerate() {
            events.push((c.invoke, false, i));
            events.push((c.complete.unwrap_or(u64::MAX), true, i));
        }
        // At equal times calls sort before returns: such ops count as concurrent, the
        // lenient reading of a tie.
        events.sort_unstable();
        let len = events.len() + 1;
        let mut e = Entries {
            next: (1..=len).map(|k| if k == len { NIL } else { k }).collect(),
            prev: (0..len).map(|k| k.wrapping_sub(1)).collect(),
            node: Vec::with_capacity(len),
            call_node: vec![0; calls.len()],
            ret_node: vec![0; calls.len()],
        };
        e.prev[0] = NIL;
        e.node.push((NIL, false));
        for (k, (_, is_ret, op)) in events.into_iter().enumerate() {
            e.node.push((op, is_ret));
            if is_ret {
                e.ret_node[op] = k + 1;
            } else {
                e.call_node[op] = k + 1;
            }
        }
        e
    }

    fn unlink(&mut self, k: usize) {
        let (p, n) = (self.prev[k], self.next[k]);
        self.next[p] = n;
        if n != NIL {
            self.prev[n] = p;
        }
    }

    fn relink(&mut self, k: usize) {
        let (p, n) = (self.prev[k], self.next[k]);
        self.next[p] = k;
        if n != NIL {
            self.prev[n] = k;
        }
    }

    fn lift(&mut self, op: usize) {
        self.unlink(self.call_node[op]);
        self.unlink(self.ret_node[op]);
    }

    fn unlift(&mut self, op: usize) {
        self.relink(self.ret_node[op]);
        self.relink(self.call_node[op]);
    }
}

/// Fixed-size bit set of linearized ops; part of the cache key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

/// Searches for a linearization of `calls` from `init`, giving up after `budget` steps.
pub fn check<M: Model>(init: &M, calls: &[Call<M::Op>], budget: u64) -> Outcome<M> {
    let mut remaining = calls.iter().filter(|c| c.complete.is_some()).count();
    if remaining == 0 {
        return Outcome::Linearizable;
    }
    let mut entries = Entries::new(calls);
    let mut linearized = Bits::new(calls.len());
    let mut cache: HashSet<(Bits, M)> = HashSet::new();
    let mut stack: Vec<(usize, M)> = Vec::new();
    let mut state = init.clone();
    let mut best: Option<Counterexample<M>> = None;
    let mut entry = entries.next[0];
    let mut steps = 0u64;
    loop {
        steps += 1;
        if steps > budget {
            return Outcome::Unknown { steps };
        }
        let (op, is_ret) = if entry == NIL {
            (NIL, true)
        } else {
            entries.node[entry]
        };
        if !is_ret {
            if let Some(next_state) = state.step(&calls[op].op) {
                linearized.set(op);
                if cache.insert((linearized.clone(), next_state.clone())) {
                    let prev = std::mem::replace(&mut state, next_state);
                    stack.push((op, prev));
                    entries.lift(op);
                    if calls[op].complete.is_some() {
                        remaining -= 1;
                        if remaining == 0 {
                            return Outcome::Linearizable;
                        }
                    }
                    entry = entries.next[0];
                    continue;
                }
                linearized.clear(op);
            }
            entry = entries.next[entry];
            continue;
        }
        // A return: `op` cannot be placed before its completion in this configuration.
        if best.as_ref().is_none_or(|b| stack.len() > b.prefix.len()) {
            best = Some(counterexample(&entries, &stack, &state, entry, op, calls));
        }
        let Some((last, prev)) = stack.pop() else {
            let cx = best.unwrap_or_else(|| Counterexample {
                prefix: Vec::new(),
                state: state.clone(),
                blocked: calls.first().map_or(0, |c| c.id),
                pending: Vec::new(),
            });
            return Outcome::NotLinearizable(cx);
        };
        linearized.clear(last);
        state = prev;
        entries.unlift(last);
        if calls[last].complete.is_some() {
            remaining += 1;
        }
        entry = entries.next[entries.call_node[last]];
    }
}

fn counterexample<M: Model>(
    entries: &Entries,
    stack: &[(usize, M)],
    state: &M,
    at: usize,
    blocked: usize,
    calls: &[Call<M::Op>],
) -> Counterexample<M> {
    let mut pending = Vec::new();
    let mut k = entries.next[0];
    while k != NIL && k != at {
        let (op, is_ret) = entries.node[k];
        if !is_ret {
            pending.push(calls[op].id);
        }
        k = entries.next[k];
    }
    Counterexample {
        prefix: stack.iter().map(|(op, _)| calls[*op].id).collect(),
        state: state.clone(),
        blocked: if blocked == NIL {
            calls.first().map_or(0, |c| c.id)
        } else {
            calls[blocked].id
        },
        pending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain read/write register for testing the search itself.
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    struct Reg(i64);

    #[derive(Debug)]
    enum RegOp {
        Read(i64),
        Write(i64),
    }

    impl Model for Reg {
        type Op = RegOp;
        fn step(&self, op: &RegOp) -> Option<Reg> {
            match op {
                RegOp::Read(v) => (*v == self.0).then(|| self.clone()),
                RegOp::Write(v) => Some(Reg(*v)),
            }
        }
    }

    fn call(id: usize, op: RegOp, invoke: u64, complete: Option<u64>) -> Call<RegOp> {
        Call {
            id,
            op,
            invoke,
            complete,
        }
    }

    #[test]
    fn concurrent_write_may_be_seen_or_not() {
        // w1 |-----------|
        // r        |--|       reads 1 or 0: both linearizable
        for seen in [0, 1] {
            let calls = [
                call(0, RegOp::Write(1), 0, Some(10)),
                call(1, RegOp::Read(seen), 3, Some(5)),
            ];
            assert_eq!(check(&Reg(0), &calls, 1000), Outcome::Linearizable);
        }
    }

    #[test]
    fn read_after_completed_write_must_see_it() {
        let calls = [
            call(0, RegOp::Write(1), 0, Some(2)),
            call(1, RegOp::Read(0), 3, Some(5)),
        ];
        match check(&Reg(0), &calls, 1000) {
            Outcome::NotLinearizable(cx) => {
                assert_eq!(cx.blocked, 1);
                assert_eq!(cx.prefix, vec![0]);
                assert_eq!(cx.state, Reg(1));
            }
            other => panic!("expected a counterexample, got {other:?}"),
        }
    }

    #[test]
    fn indeterminate_write_may_land_late_or_never() {
        // w1 is info: a read long after may see it, or not.
        for seen in [0, 1] {
            let calls = [
                call(0, RegOp::Write(1), 0, None),
                call(1, RegOp::Read(seen), 50, Some(60)),
            ];
            assert_eq!(check(&Reg(0), &calls, 1000), Outcome::Linearizable);
        }
        // but once seen, it cannot be unseen
        let calls = [
            call(0, RegOp::Write(1), 0, None),
            call(1, RegOp::Read(1), 50, Some(60)),
            call(2, RegOp::Read(0), 70, Some(80)),
        ];
        assert!(matches!(
            check(&Reg(0), &calls, 1000),
            Outcome::NotLinearizable(_)
        ));
    }

    #[test]
    fn budget_exhaustion_is_unknown() {
        // Many concurrent writes and an impossible final read force a wide search.
        let mut calls: Vec<Call<RegOp>> = (0..12)
            .map(|i| call(i, RegOp::Write(i as i64), 0, Some(100)))
            .collect();
        calls.push(call(12, RegOp::Read(99), 200, Some(210)));
        assert!(matches!(
            check(&Reg(0), &calls, 50),
            Outcome::Unknown { .. }
        ));
        assert!(matches!(
            check(&Reg(0), &calls, 10_000_000),
            Outcome::NotLinearizable(_)
        ));
    }
}
