//! The proposals of this process still waiting for their entries, and what became of each
//! (see [`Proposals`]). It sits below Raft: the log store and the state machine report what
//! they append and apply here, and the proposer above them waits on it.

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::command::{Outcome, ProposalId, Response};

/// What became of a proposal.
#[derive(Debug, PartialEq)]
pub enum Fate {
    /// Applied, with what applying it produced.
    Applied(Response),
    /// Certainly never applied, and never will be: safe to propose again.
    Lost,
    /// A snapshot replaced the log where its entry was: it may be in the snapshot or not.
    Unknown,
}

/// The proposals of this process still waiting for their entries, and what became of them.
///
/// openraft answers a proposal when its entry is applied on this member at the index it was
/// appended at, and otherwise says little. It answers ForwardToLeader both to a proposal it
/// refused (never appended anywhere) and to one whose entry a new leader overwrote here, and
/// it never answers one whose entry a snapshot install purged (the proposal then waited for
/// its timeout, holding a group-commit slot). So every entry carries its [`ProposalId`], and
/// the log store and the state machine report here:
///
/// | this member…                                       | fate                 |
/// |----------------------------------------------------|----------------------|
/// | applies the entry (whenever, however it got back)  | `Applied(response)`  |
/// | applies another entry at the index it was appended | `Lost`               |
/// | was refused it by openraft before appending it     | `Lost` (see `write`) |
/// | installs a snapshot covering that index            | `Unknown`            |
///
/// An entry never moves to another index, and an index, once applied, holds that entry for
/// good: that is what makes `Lost` certain.
pub struct Proposals {
    member: u64,
    boot: u64,
    next: AtomicU64,
    waiting: Mutex<Waiting>,
    /// How many wait, read without the lock by the log store and state machine.
    outstanding: AtomicUsize,
    /// The index of the last entry the log store was given (every entry, not only this
    /// member's proposals).
    log_end: AtomicU64,
}

#[derive(Default)]
struct Waiting {
    by_seq: HashMap<u64, Waiter>,
    /// (index, sequence number) for each entry appended on this member, at the index it was
    /// last appended at. Two may share an index: an entry overwritten here, and a later one
    /// this member appended there when it led again.
    by_index: BTreeSet<(u64, u64)>,
}

struct Waiter {
    index: Option<u64>,
    fate: oneshot::Sender<Fate>,
}

impl Waiting {
    fn take(&mut self, seq: u64) -> Option<Waiter> {
        let w = self.by_seq.remove(&seq)?;
        if let Some(i) = w.index {
            self.by_index.remove(&(i, seq));
        }
        Some(w)
    }
}

impl std::fmt::Debug for Proposals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proposals")
            .field("member", &self.member)
            .field("outstanding", &self.outstanding.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// One waiting proposal; dropping it stops the wait.
#[derive(Debug)]
pub struct Ticket {
    proposals: Arc<Proposals>,
    pub id: ProposalId,
    pub fate: oneshot::Receiver<Fate>,
}

impl Ticket {
    /// The index this member last appended the entry at, if it ever did.
    pub fn appended_at(&self) -> Option<u64> {
        self.proposals
            .lock()
            .by_seq
            .get(&self.id.seq)
            .and_then(|w| w.index)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut waiting = self.proposals.lock();
        if waiting.take(self.id.seq).is_some() {
            self.proposals.outstanding.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Proposals {
    /// The tracker of this process of member `member`.
    pub fn new(member: u64) -> Arc<Proposals> {
        // Random per process: a restarted member never mistakes an entry proposed by its
        // previous life for one of its own.
        let boot = RandomState::new().hash_one((std::process::id(), std::time::SystemTime::now()));
        Arc::new(Proposals {
            member,
            boot,
            next: AtomicU64::new(1),
            waiting: Mutex::new(Waiting::default()),
            outstanding: AtomicUsize::new(0),
            log_end: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn mine(&self, id: &ProposalId) -> bool {
        id.member == self.member && id.boot == self.boot
    }

    /// A new proposal id, waiting for its fate.
    pub fn open(self: &Arc<Self>) -> Ticket {
        let id = ProposalId {
            member: self.member,
            boot: self.boot,
            seq: self.next.fetch_add(1, Ordering::Relaxed),
        };
        let (tx, rx) = oneshot::channel();
        self.lock().by_seq.insert(
            id.seq,
            Waiter {
                index: None,
                fate: tx,
            },
        );
        self.outstanding.fetch_add(1, Ordering::Relaxed);
        Ticket {
            proposals: self.clone(),
            id,
            fate: rx,
        }
    }

    /// The log store was given entries up to `index` (appended, or about to be: Raft's core
    /// waits for the store's `append` to return before it handles its next message).
    pub fn log_reaches(&self, index: u64) {
        self.log_end.store(index, Ordering::Release);
    }

    /// See [`Proposals::log_reaches`].
    pub fn log_end(&self) -> u64 {
        self.log_end.load(Ordering::Acquire)
    }

    /// Proposals of this process waiting for their fate.
    pub fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Relaxed)
    }

    /// The log store appended the entry of proposal `id` at `index` (written; on the leader
    /// the sync may still be under way).
    pub fn appended(&self, id: &ProposalId, index: u64) {
        if !self.mine(id) || self.outstanding.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut waiting = self.lock();
        let Some(w) = waiting.by_seq.get_mut(&id.seq) else {
            return;
        };
        if let Some(old) = w.index.replace(index) {
            waiting.by_index.remove(&(old, id.seq));
        }
        waiting.by_index.insert((index, id.seq));
    }

    /// The state machine applied the entry at `index` (of proposal `id`, if a normal entry),
    /// which produced `response`. Returns what to hand openraft: the response itself, or only
    /// its revision when the response went to the waiting proposal (whose `write` does not
    /// read openraft's copy), so a batch's responses are not cloned.
    pub fn applied(&self, index: u64, id: Option<&ProposalId>, mut response: Response) -> Response {
        if self.outstanding.load(Ordering::Relaxed) == 0 {
            return response;
        }
        let mut waiting = self.lock();
        if let Some(id) = id
            && self.mine(id)
            && let Some(w) = waiting.take(id.seq)
        {
            self.outstanding.fetch_sub(1, Ordering::Relaxed);
            let revision_only = Response {
                revision: response.revision,
                result: Ok(Outcome::Nothing),
            };
            let _ = w.fate.send(Fate::Applied(std::mem::replace(
                &mut response,
                revision_only,
            )));
        }
        // Any other entry appended here before has been overwritten for good.
        self.end_appended(&mut waiting, (index, 0)..=(index, u64::MAX), || Fate::Lost);
        response
    }

    /// A snapshot up to `last_index` replaced the log (and the keyspace) here.
    pub fn snapshot_installed(&self, last_index: u64) {
        if self.outstanding.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut waiting = self.lock();
        self.end_appended(&mut waiting, ..=(last_index, u64::MAX), || Fate::Unknown);
    }

    /// Ends the wait of every proposal last appended at an index in `at` with `fate`.
    fn end_appended(
        &self,
        waiting: &mut Waiting,
        at: impl std::ops::RangeBounds<(u64, u64)>,
        fate: impl Fn() -> Fate,
    ) {
        let seqs: Vec<u64> = waiting.by_index.range(at).map(|&(_, seq)| seq).collect();
        for seq in seqs {
            if let Some(w) = waiting.take(seq) {
                self.outstanding.fetch_sub(1, Ordering::Relaxed);
                let _ = w.fate.send(fate());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(revision: i64) -> Response {
        Response {
            revision,
            result: Ok(Outcome::Compacted),
        }
    }

    fn fate(t: &mut Ticket) -> Option<Fate> {
        t.fate.try_recv().ok()
    }

    #[test]
    fn an_applied_entry_answers_its_proposal_and_openraft_gets_the_revision_only() {
        let p = Proposals::new(7);
        let mut t = p.open();
        assert_eq!(t.appended_at(), None);
        p.appended(&t.id, 10);
        assert_eq!(t.appended_at(), Some(10));
        let to_openraft = p.applied(10, Some(&t.id), response(5));
        assert_eq!(to_openraft.result, Ok(Outcome::Nothing));
        assert_eq!(to_openraft.revision, 5);
        assert_eq!(fate(&mut t), Some(Fate::Applied(response(5))));
        assert_eq!(p.outstanding.load(Ordering::Relaxed), 0);
        // Nobody waits any more: responses pass through untouched.
        assert_eq!(p.applied(11, Some(&t.id), response(6)), response(6));
    }

    #[test]
    fn another_entry_applied_where_a_proposal_was_appended_means_it_is_lost() {
        let p = Proposals::new(7);
        let mut t = p.open();
        p.appended(&t.id, 10);
        assert_eq!(p.applied(9, None, response(1)), response(1));
        assert_eq!(fate(&mut t), None, "index 9 says nothing about index 10");
        // The new leader's blank entry took index 10.
        p.applied(10, None, response(2));
        assert_eq!(fate(&mut t), Some(Fate::Lost));
        assert_eq!(p.outstanding.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn an_entry_overwritten_here_that_comes_back_and_is_applied_is_applied() {
        // Appended here, overwritten by a new leader (nothing tells the tracker), then sent
        // back by a later leader that had kept a copy: same id, same index.
        let p = Proposals::new(7);
        let mut t = p.open();
        p.appended(&t.id, 10);
        p.appended(&t.id, 10);
        p.applied(10, Some(&t.id), response(3));
        assert_eq!(fate(&mut t), Some(Fate::Applied(response(3))));
    }

    #[test]
    fn two_proposals_appended_at_one_index_are_told_apart() {
        // The first was overwritten here; the log shrank, and this member, leading again,
        // appended the second at the same index.
        let p = Proposals::new(7);
        let mut first = p.open();
        let mut second = p.open();
        p.appended(&first.id, 10);
        p.appended(&second.id, 10);
        assert_eq!(first.appended_at(), Some(10));
        p.applied(10, Some(&second.id), response(4));
        assert_eq!(fate(&mut second), Some(Fate::Applied(response(4))));
        assert_eq!(fate(&mut first), Some(Fate::Lost));
    }

    #[test]
    fn a_snapshot_over_an_appended_entry_leaves_its_fate_unknown() {
        let p = Proposals::new(7);
        let mut covered = p.open();
        let mut beyond = p.open();
        let mut unappended = p.open();
        p.appended(&covered.id, 10);
        p.appended(&beyond.id, 30);
        p.snapshot_installed(20);
        assert_eq!(fate(&mut covered), Some(Fate::Unknown));
        assert_eq!(fate(&mut beyond), None);
        assert_eq!(fate(&mut unappended), None);
        assert_eq!(p.outstanding.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn entries_of_other_members_or_an_earlier_process_are_not_ours() {
        let p = Proposals::new(7);
        let mut t = p.open();
        let earlier_life = ProposalId {
            boot: t.id.boot.wrapping_add(1),
            ..t.id
        };
        let other_member = ProposalId { member: 8, ..t.id };
        for id in [earlier_life, other_member] {
            p.appended(&id, 10);
            assert_eq!(t.appended_at(), None);
            assert_eq!(p.applied(10, Some(&id), response(1)), response(1));
            assert_eq!(fate(&mut t), None);
        }
    }

    #[test]
    fn a_dropped_ticket_stops_waiting() {
        let p = Proposals::new(7);
        let t = p.open();
        p.appended(&t.id, 10);
        let id = t.id;
        drop(t);
        assert_eq!(p.outstanding.load(Ordering::Relaxed), 0);
        assert!(p.lock().by_index.is_empty());
        assert_eq!(p.applied(10, Some(&id), response(1)), response(1));
    }
}
