//! The in-memory index from user key to the revisions at which it changed.
//!
//! A key's history is a list of *generations*: a generation begins with the put that creates
//! the key and ends with the delete (tombstone) that removes it; the last generation is the
//! current one and is empty while the key does not exist.
//!
//! ```text
//!  key "foo": put@1.0 put@4.0 del@6.0 | put@8.0 put@9.0 | (current)
//!             generation 0 (ver 3)     | generation 1    |
//!
//!  get at 5  → mod 4.0, create 1.0, version 2
//!  get at 7  → not found (deleted at 6)
//!  compact 7 → generation 0 dropped (its tombstone is below 7)
//! ```
//!
//! Compaction at revision R keeps every change at R itself, a tombstone included, so a watch
//! that starts at the compaction revision still sees the delete that happened there.
//!
//! The index is rebuilt from the versioned keys on start-up; the values live in the backend.
//!
//! Beside the keys, the index keeps its most recent changes in revision order ([`Recent`]):
//! a watcher that is a few seconds behind is caught up at the cost of the changes it missed,
//! not of every key in its range.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::ops::Bound;

use crate::revision::Revision;

/// What a read at some revision sees of a live key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyState {
    /// The revision whose value is visible (etcd's `mod_revision` is its main part).
    pub modified: Revision,
    /// The revision that created this incarnation of the key.
    pub created: Revision,
    /// Number of puts since creation, 1 for a new key.
    pub version: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Generation {
    /// Revisions recorded in this generation (puts and its tombstone), including ones
    /// compacted away.
    version: i64,
    created: Revision,
    /// Ascending; in a non-current generation the last one is the tombstone.
    revs: Vec<Revision>,
}

/// The history of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyIndex {
    generations: Vec<Generation>,
}

/// A delete of a key that does not exist at that point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("key does not exist")]
pub struct NotFound;

impl Default for KeyIndex {
    fn default() -> Self {
        KeyIndex {
            generations: vec![Generation::default()],
        }
    }
}

impl KeyIndex {
    fn current(&mut self) -> &mut Generation {
        self.generations
            .last_mut()
            .expect("invariant: a key index always has a current generation")
    }

    /// Whether the key exists at the newest revision.
    pub fn is_live(&self) -> bool {
        self.generations.last().is_some_and(|g| !g.revs.is_empty())
    }

    /// Records a put at `rev`, which must be newer than every revision recorded so far.
    pub fn put(&mut self, rev: Revision) {
        let g = self.current();
        debug_assert!(
            g.revs.last().is_none_or(|last| *last < rev),
            "revisions must grow"
        );
        if g.revs.is_empty() {
            g.created = rev;
        }
        g.revs.push(rev);
        g.version += 1;
    }

    /// Records a put read back from the backend on start-up: like [`put`](Self::put), but a new
    /// generation takes its creation revision and version from the stored record, because
    /// compaction may have dropped the versions before it.
    pub fn restore(&mut self, rev: Revision, created: Revision, version: i64) {
        let g = self.current();
        if g.revs.is_empty() {
            g.created = created;
            g.version = version - 1;
        }
        g.revs.push(rev);
        g.version += 1;
    }

    /// Records a delete at `rev`: ends the current generation.
    pub fn tombstone(&mut self, rev: Revision) -> Result<(), NotFound> {
        if !self.is_live() {
            return Err(NotFound);
        }
        // The tombstone counts like a put (as in etcd), so that in every generation
        // `version - (revisions after n)` is the version at revision n.
        let g = self.current();
        g.revs.push(rev);
        g.version += 1;
        self.generations.push(Generation::default());
        Ok(())
    }

    /// The key as a read at main revision `at` sees it, or `None` if it did not exist then.
    pub fn get(&self, at: i64) -> Option<KeyState> {
        let last = self.generations.len() - 1;
        for (i, g) in self.generations.iter().enumerate().rev() {
            let Some(first) = g.revs.first() else {
                continue;
            };
            if first.main > at {
                continue;
            }
            if i != last && g.revs.last().is_some_and(|tomb| tomb.main <= at) {
                return None; // deleted at or before `at`
            }
            let n = g
                .revs
                .iter()
                .rposition(|r| r.main <= at)
                .expect("invariant: first.main <= at");
            let newer = (g.revs.len() - 1 - n) as i64;
            return Some(KeyState {
                modified: g.revs[n],
                created: g.created,
                version: g.version - newer,
            });
        }
        None
    }

    /// Recorded revisions with main ≥ `from`, oldest first. Each generation is searched,
    /// not scanned, so a long history before `from` costs nothing.
    pub fn revisions_from(&self, from: i64) -> impl Iterator<Item = Revision> + '_ {
        self.generations.iter().flat_map(move |g| {
            let start = g.revs.partition_point(|r| r.main < from);
            g.revs[start..].iter().copied()
        })
    }

    /// Forgets history at or below `at`, keeping what a read at `at` needs: the newest revision
    /// ≤ `at` of a key live at `at`. Returns the revisions dropped (the backend deletes exactly
    /// those versions) and whether the key has no history left.
    pub fn compact(&mut self, at: i64) -> (Vec<Revision>, bool) {
        let mut removed = Vec::new();
        // Generations whose tombstone is below `at` are gone entirely; one whose tombstone is at
        // `at` keeps only the tombstone (see the module docs).
        let mut dead = 0;
        while dead < self.generations.len() - 1 {
            let tomb = self.generations[dead]
                .revs
                .last()
                .expect("invariant: an ended generation has its tombstone");
            if tomb.main >= at {
                break;
            }
            dead += 1;
        }
        for g in self.generations.drain(..dead) {
            removed.extend(g.revs);
        }
        let g = &mut self.generations[0];
        if let Some(n) = g.revs.iter().rposition(|r| r.main <= at) {
            removed.extend(g.revs.drain(..n));
        }
        let empty = self.generations.len() == 1 && self.generations[0].revs.is_empty();
        (removed, empty)
    }
}

/// The index over all keys, ordered by key bytes.
#[derive(Debug, Clone, Default)]
pub struct TreeIndex {
    keys: BTreeMap<Vec<u8>, KeyIndex>,
    recent: Recent,
}

/// The most recent changes the index kept, at most this many (about 100 B each with their
/// key: a few MB, and half a minute of a churning cluster's writes).
const RECENT_CHANGES: usize = 1 << 16;

/// The index's most recent changes in revision order, oldest first.
///
/// Why: [`TreeIndex::changes`] by key visits every key in the range, whatever happened since
/// `from`. A member's kill sends its watchers to the others, each resuming at its own
/// revision, and each group of them walked the whole pod prefix (tens of thousands of keys,
/// deleted ones included until compaction) once per pass: passes took seconds while new
/// revisions arrived faster than they were caught up, and the watchers fell further behind.
/// Read from here, a catch-up costs what it delivers.
#[derive(Debug, Clone, Default)]
struct Recent {
    changes: VecDeque<(Revision, Box<[u8]>)>,
    /// Every change at a main revision at or above `from` is in `changes`.
    from: i64,
}

impl Recent {
    fn push(&mut self, key: &[u8], rev: Revision) {
        if self.changes.len() >= RECENT_CHANGES
            && let Some((dropped, _)) = self.changes.pop_front()
        {
            self.from = self.from.max(dropped.main + 1);
        }
        self.changes.push_back((rev, key.into()));
    }

    /// Changes at main revisions up to `main` are no longer answered from here: compacted,
    /// or restored from the backend in key order rather than applied in revision order.
    fn forget_through(&mut self, main: i64) {
        while self.changes.front().is_some_and(|(r, _)| r.main <= main) {
            self.changes.pop_front();
        }
        self.from = self.from.max(main + 1);
    }

    /// [`TreeIndex::changes`] from here; the caller checked that `from` is covered.
    fn changes(&self, key: &[u8], range_end: &[u8], from: i64, to: i64, max: usize) -> Changes {
        let start = self.changes.partition_point(|(r, _)| r.main < from);
        let mut out: Vec<(Vec<u8>, Revision)> = Vec::new();
        for (rev, k) in self.changes.range(start..) {
            if rev.main > to {
                break;
            }
            if !in_range(k, key, range_end) {
                continue;
            }
            if out.len() >= max && out.last().is_some_and(|(_, last)| last.main != rev.main) {
                return Changes {
                    changes: out,
                    covered: rev.main - 1,
                };
            }
            out.push((k.to_vec(), *rev));
        }
        Changes {
            changes: out,
            covered: to,
        }
    }
}

/// Whether `k` is in `[key, range_end)` (etcd semantics: [`range_bounds`]).
fn in_range(k: &[u8], key: &[u8], range_end: &[u8]) -> bool {
    std::ops::RangeBounds::<&[u8]>::contains(&range_bounds(key, range_end), &k)
}

/// The end of an etcd range: `range_end` empty means the single key; `\0` means every key ≥
/// `key`; anything else is an exclusive upper bound.
///
/// Callers check [`is_empty_range`] first: a `range_end` at or before `key` selects nothing,
/// and `BTreeMap::range` panics on bounds that cross.
pub fn range_bounds<'a>(key: &'a [u8], range_end: &'a [u8]) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    match range_end {
        [] => (Bound::Included(key), Bound::Included(key)),
        [0] => (Bound::Included(key), Bound::Unbounded),
        end => (Bound::Included(key), Bound::Excluded(end)),
    }
}

/// `range_end` that covers every key starting with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Whether `[key, range_end)` selects no key at all: an explicit end at or before the key
/// (etcd: "mvcc: watcher range is empty" for a watch, an empty result for a read).
pub fn is_empty_range(key: &[u8], range_end: &[u8]) -> bool {
    !range_end.is_empty() && range_end != [0] && range_end <= key
}

/// What [`TreeIndex::changes`] found: changes in revision order and how far they reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub changes: Vec<(Vec<u8>, Revision)>,
    /// Every change in the range at main revisions in `[from, covered]` is in `changes`.
    pub covered: i64,
}

impl TreeIndex {
    pub fn put(&mut self, key: &[u8], rev: Revision) {
        match self.keys.get_mut(key) {
            Some(ki) => ki.put(rev),
            None => {
                let mut ki = KeyIndex::default();
                ki.put(rev);
                self.keys.insert(key.to_vec(), ki);
            }
        }
        self.recent.push(key, rev);
    }

    /// See [`KeyIndex::restore`].
    pub fn restore(&mut self, key: &[u8], rev: Revision, created: Revision, version: i64) {
        self.recent.forget_through(rev.main);
        if let Some(ki) = self.keys.get_mut(key) {
            ki.restore(rev, created, version);
        } else {
            let mut ki = KeyIndex::default();
            ki.restore(rev, created, version);
            self.keys.insert(key.to_vec(), ki);
        }
    }

    /// A tombstone read back from the backend on start-up: a delete of the live key, or one
    /// kept alone by compaction, which becomes a generation of its own.
    pub fn restore_tombstone(&mut self, key: &[u8], rev: Revision) {
        self.recent.forget_through(rev.main);
        let ki = self.keys.entry(key.to_vec()).or_default();
        if ki.tombstone(rev).is_err() {
            let g = ki.current();
            g.created = rev;
            g.revs.push(rev);
            g.version = 1;
            ki.generations.push(Generation::default());
        }
    }

    pub fn tombstone(&mut self, key: &[u8], rev: Revision) -> Result<(), NotFound> {
        self.keys.get_mut(key).ok_or(NotFound)?.tombstone(rev)?;
        self.recent.push(key, rev);
        Ok(())
    }

    pub fn get(&self, key: &[u8], at: i64) -> Option<KeyState> {
        self.keys.get(key)?.get(at)
    }

    /// Keys in `[key, range_end)` (etcd semantics) live at `at`, in key order, at most `limit`
    /// of them (0: no limit), plus the total number that matched.
    pub fn range(
        &self,
        key: &[u8],
        range_end: &[u8],
        at: i64,
        limit: usize,
    ) -> (Vec<(Vec<u8>, KeyState)>, usize) {
        let mut out = Vec::new();
        let mut total = 0;
        if is_empty_range(key, range_end) {
            return (out, 0);
        }
        for (k, ki) in self.keys.range::<[u8], _>(range_bounds(key, range_end)) {
            if let Some(state) = ki.get(at) {
                total += 1;
                if limit == 0 || out.len() < limit {
                    out.push((k.clone(), state));
                }
            }
        }
        (out, total)
    }

    /// Changes to keys in the range at main revisions in `[from, to]`, oldest first, for a
    /// watcher's catch-up: at most `max` of them, except that a revision is never split (its
    /// last changes are included even past `max`).
    ///
    /// A range of keys read from a revision the recent changes still cover costs the changes
    /// since `from` (each checked against the range). Otherwise, and for a single key, the
    /// walk is by key: each key in the range costs a binary search for its first revision ≥
    /// `from`, and the keys' histories are then merged through a heap, so only the changes
    /// returned are visited.
    pub fn changes(&self, key: &[u8], range_end: &[u8], from: i64, to: i64, max: usize) -> Changes {
        if is_empty_range(key, range_end) || from > to {
            return Changes {
                changes: Vec::new(),
                covered: to,
            };
        }
        if !range_end.is_empty() && from >= self.recent.from {
            return self.recent.changes(key, range_end, from, to, max);
        }
        self.changes_by_key(key, range_end, from, to, max)
    }

    /// [`Self::changes`], walking the keys of the range.
    fn changes_by_key(
        &self,
        key: &[u8],
        range_end: &[u8],
        from: i64,
        to: i64,
        max: usize,
    ) -> Changes {
        let mut cursors = Vec::new();
        let mut heap = BinaryHeap::new();
        for (k, ki) in self.keys.range::<[u8], _>(range_bounds(key, range_end)) {
            let mut revs = ki.revisions_from(from).take_while(move |r| r.main <= to);
            if let Some(first) = revs.next() {
                heap.push(Reverse((first, cursors.len())));
                cursors.push((k, revs));
            }
        }
        let mut out = Vec::new();
        while let Some(Reverse((rev, i))) = heap.pop() {
            if out.len() >= max
                && out
                    .last()
                    .is_some_and(|(_, last): &(Vec<u8>, Revision)| last.main != rev.main)
            {
                let covered = rev.main - 1;
                return Changes {
                    changes: out,
                    covered,
                };
            }
            let (k, revs) = &mut cursors[i];
            out.push((k.to_vec(), rev));
            if let Some(next) = revs.next() {
                heap.push(Reverse((next, i)));
            }
        }
        Changes {
            changes: out,
            covered: to,
        }
    }

    /// Compacts every key at `at`; returns the (key, revision) versions the backend must delete.
    pub fn compact(&mut self, at: i64) -> Vec<(Vec<u8>, Revision)> {
        // Changes at `at` itself stay readable, as the keys keep them.
        self.recent.forget_through(at - 1);
        let mut removed = Vec::new();
        self.keys.retain(|k, ki| {
            let (revs, empty) = ki.compact(at);
            removed.extend(revs.into_iter().map(|r| (k.clone(), r)));
            !empty
        });
        removed
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn r(main: i64) -> Revision {
        Revision::new(main, 0)
    }

    #[test]
    fn generations_as_documented() {
        let mut ki = KeyIndex::default();
        ki.put(r(1));
        ki.put(r(4));
        ki.tombstone(r(6)).unwrap();
        ki.put(r(8));
        ki.put(r(9));
        assert_eq!(ki.get(0), None);
        assert_eq!(
            ki.get(5),
            Some(KeyState {
                modified: r(4),
                created: r(1),
                version: 2
            })
        );
        assert_eq!(ki.get(7), None);
        assert_eq!(
            ki.get(9),
            Some(KeyState {
                modified: r(9),
                created: r(8),
                version: 2
            })
        );
        assert_eq!(
            ki.revisions_from(5).collect::<Vec<_>>(),
            vec![r(6), r(8), r(9)]
        );
        let (removed, empty) = ki.compact(7);
        assert_eq!(removed, vec![r(1), r(4), r(6)]);
        assert!(!empty);
        assert_eq!(
            ki.get(9),
            Some(KeyState {
                modified: r(9),
                created: r(8),
                version: 2
            })
        );
        let (removed, _) = ki.compact(9);
        assert_eq!(removed, vec![r(8)]);
        // the version count survives compaction
        assert_eq!(ki.get(9).map(|s| s.version), Some(2));
    }

    #[test]
    fn deleting_a_missing_key_is_an_error() {
        let mut ki = KeyIndex::default();
        assert_eq!(ki.tombstone(r(1)), Err(NotFound));
        ki.put(r(2));
        ki.tombstone(r(3)).unwrap();
        assert_eq!(ki.tombstone(r(4)), Err(NotFound));
    }

    #[test]
    fn a_compacted_deleted_key_disappears() {
        let mut t = TreeIndex::default();
        t.put(b"a", r(1));
        t.tombstone(b"a", r(2)).unwrap();
        t.put(b"b", r(3));
        // The tombstone at the compaction revision stays, for watchers that start there.
        let removed = t.compact(2);
        assert_eq!(removed, vec![(b"a".to_vec(), r(1))]);
        assert_eq!(t.get(b"a", 2), None);
        assert_eq!(
            t.changes(b"a", b"", 2, 3, 10).changes,
            vec![(b"a".to_vec(), r(2))]
        );
        let removed = t.compact(3);
        assert_eq!(removed, vec![(b"a".to_vec(), r(2))]);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn etcd_range_ends() {
        let mut t = TreeIndex::default();
        for (i, k) in [&b"a"[..], b"ab", b"b", b"c"].into_iter().enumerate() {
            t.put(k, r(i as i64 + 1));
        }
        let keys = |(v, _): (Vec<(Vec<u8>, KeyState)>, usize)| {
            v.into_iter().map(|(k, _)| k).collect::<Vec<_>>()
        };
        assert_eq!(keys(t.range(b"a", b"", 10, 0)), vec![b"a".to_vec()]);
        assert_eq!(
            keys(t.range(b"a", b"b", 10, 0)),
            vec![b"a".to_vec(), b"ab".to_vec()]
        );
        assert_eq!(
            keys(t.range(b"b", b"\0", 10, 0)),
            vec![b"b".to_vec(), b"c".to_vec()]
        );
        assert_eq!(t.range(b"\0", b"\0", 10, 2).1, 4);
        assert_eq!(t.range(b"\0", b"\0", 10, 2).0.len(), 2);
        assert_eq!(t.range(b"c", b"a", 10, 0).1, 0);
        // A range whose end sorts before (or at) its key selects nothing, and never panics.
        assert!(is_empty_range(b"c", b"a") && is_empty_range(b"c", b"c"));
        assert!(!is_empty_range(b"c", b"") && !is_empty_range(b"c", b"\0"));
        let none = t.changes(b"c", b"a", 1, 10, 100);
        assert_eq!((none.changes.len(), none.covered), (0, 10));
    }

    /// A write in the naive model: `None` is a delete.
    #[derive(Debug, Clone)]
    enum Op {
        Put(u8),
        Delete(u8),
        Compact,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![6 => (0u8..5).prop_map(Op::Put), 3 => (0u8..5).prop_map(Op::Delete), 1 => Just(Op::Compact)]
    }

    /// The naive model: the full log of (revision, key, is_put); a read replays it.
    fn model_get(log: &[(i64, u8, bool)], key: u8, at: i64) -> Option<KeyState> {
        let mut state: Option<KeyState> = None;
        for &(rev, k, put) in log.iter().filter(|(rev, k, _)| *k == key && *rev <= at) {
            debug_assert_eq!(k, key);
            state = if put {
                Some(match state {
                    Some(s) => KeyState {
                        modified: r(rev),
                        created: s.created,
                        version: s.version + 1,
                    },
                    None => KeyState {
                        modified: r(rev),
                        created: r(rev),
                        version: 1,
                    },
                })
            } else {
                None
            };
        }
        state
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// Reads at every revision at or above the compaction point agree with replaying the
        /// full log, and compaction drops exactly the versions no such read can see.
        #[test]
        fn index_matches_naive_model(ops in proptest::collection::vec(op(), 1..60)) {
            let mut index = TreeIndex::default();
            let mut log: Vec<(i64, u8, bool)> = Vec::new();
            let mut rev = 0i64;
            let mut compacted = 0i64;
            let mut stored: std::collections::BTreeSet<(u8, i64)> = Default::default();
            for op in ops {
                match op {
                    Op::Put(k) => {
                        rev += 1;
                        index.put(&[k], r(rev));
                        log.push((rev, k, true));
                        stored.insert((k, rev));
                    }
                    Op::Delete(k) => {
                        let live = model_get(&log, k, rev).is_some();
                        let res = index.tombstone(&[k], r(rev + 1));
                        prop_assert_eq!(res.is_ok(), live);
                        if live {
                            rev += 1;
                            log.push((rev, k, false));
                            stored.insert((k, rev));
                        }
                    }
                    Op::Compact => {
                        compacted = rev;
                        for (k, rv) in index.compact(rev) {
                            prop_assert!(stored.remove(&(k[0], rv.main)), "removed twice or never stored");
                        }
                    }
                }
            }
            for at in compacted..=rev {
                for k in 0u8..5 {
                    prop_assert_eq!(index.get(&[k], at), model_get(&log, k, at), "key {} at {}", k, at);
                }
                let (live, total) = index.range(&[0], &[0], at, 0);
                prop_assert_eq!(total, live.len());
                prop_assert_eq!(total, (0u8..5).filter(|k| model_get(&log, *k, at).is_some()).count());
            }
            // What survives compaction is exactly what reads at >= compacted can reach, plus
            // every later revision.
            for (k, rv) in &stored {
                let visible = (compacted..=rev).any(|at| index.get(&[*k], at).is_some_and(|s| s.modified.main == *rv));
                prop_assert!(visible || *rv >= compacted, "kept a dead version {}@{}", k, rv);
            }
            // Watch catch-up lists every change from the compaction point on, in order, in
            // pieces of any size that never split a revision and never skip one.
            let want: Vec<i64> = log.iter().map(|(rv, _, _)| *rv).filter(|rv| *rv >= compacted).collect();
            for max in [1, 2, 7, 1000] {
                let mut got = Vec::new();
                let mut from = compacted;
                while from <= rev {
                    let c = index.changes(&[0], &[0], from, rev, max);
                    prop_assert!(c.covered >= from, "no progress from {}", from);
                    prop_assert!(c.changes.iter().all(|(_, r)| r.main >= from && r.main <= c.covered));
                    got.extend(c.changes.iter().map(|(_, r)| r.main));
                    from = c.covered + 1;
                }
                prop_assert_eq!(&got, &want, "max {}", max);
            }
            // Read from the recent changes, any range from any start answers what the walk by
            // key does.
            let ranges: [(&[u8], &[u8]); 4] = [(&[0], &[0]), (&[1], &[3]), (&[2], &[0]), (&[4], &[5])];
            for (key, end) in ranges {
                for from in compacted..=rev {
                    for max in [1, 3, 1000] {
                        prop_assert_eq!(
                            index.changes(key, end, from, rev, max),
                            index.changes_by_key(key, end, from, rev, max),
                            "{:?}..{:?} from {} max {}", key, end, from, max
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn catch_up_reads_fall_back_to_the_keys_where_the_recent_changes_do_not_reach() {
        // More changes than are kept: the oldest are read by key.
        let mut t = TreeIndex::default();
        let last = RECENT_CHANGES as i64 + 10;
        for rev in 1..=last {
            t.put(&[(rev % 7) as u8], r(rev));
        }
        assert_eq!(t.recent.from, 11);
        for from in [1, 5, 10, 11, 12, last - 3] {
            for max in [1, 100] {
                assert_eq!(
                    t.changes(&[0], &[0], from, last, max),
                    t.changes_by_key(&[0], &[0], from, last, max),
                    "from {from} max {max}"
                );
            }
        }
        // A rebuilt index knows no order among what it restored: those changes are read by
        // key, the ones applied since from the recent changes, and both agree.
        let mut rebuilt = TreeIndex::default();
        rebuilt.restore(b"a", r(5), r(5), 1);
        rebuilt.restore(b"b", r(7), r(7), 1);
        rebuilt.put(b"a", r(8));
        assert_eq!(rebuilt.recent.from, 8);
        assert_eq!(
            rebuilt.changes(b"a", b"c", 5, 8, 10).changes,
            vec![
                (b"a".to_vec(), r(5)),
                (b"b".to_vec(), r(7)),
                (b"a".to_vec(), r(8))
            ]
        );
        assert_eq!(
            rebuilt.changes(b"a", b"c", 8, 8, 10).changes,
            vec![(b"a".to_vec(), r(8))]
        );
        // Compaction keeps the changes at its revision readable from the recent changes.
        rebuilt.put(b"b", r(9));
        rebuilt.compact(8);
        assert_eq!(rebuilt.recent.from, 8);
        assert_eq!(
            rebuilt.changes(b"a", b"\0", 8, 9, 10),
            rebuilt.changes_by_key(b"a", b"\0", 8, 9, 10)
        );
    }
}
