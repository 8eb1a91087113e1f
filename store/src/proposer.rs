//! Group commit: transactions proposed on the leader at about the same time go through the
//! Raft log as one entry.
//!
//! openraft (0.9) appends, and so fsyncs, every client write on its own. Under load the
//! leader's disk then caps throughput at one write per fsync. Here a few proposals are in
//! flight at once; while they are, new transactions queue, and the next free slot takes
//! everything queued (up to a size bound) as one `Command::Batch`. The state machine applies
//! a batch's transactions in order, each at its own revision, in one atomic write, so every
//! client sees exactly what it would have seen alone. With a single client nothing waits: a
//! lone transaction is proposed as itself.
//!
//! ```text
//!  txn ─┐                       ┌─ slot 1: Batch[t1..t40] ─ append+fsync ─ replicate ─ apply ─┐
//!  txn ─┼─► queue ─► next free ─┼─ slot 2: Batch[t41..t97] ...                                ├─► replies
//!  txn ─┘     (bounded)  slot   └─ …                                                         ─┘
//! ```
//!
//! Every entry proposed here carries a [`ProposalId`], and [`Proposals`] follows what becomes
//! of it, so that a proposal is answered as soon as its fate is known and a write is sent to
//! the next leader only when it certainly was not applied.

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::ClientWriteError;
use tokio::sync::{RwLock, Semaphore, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::command::{Command, Outcome, Proposal, ProposalId, RequestOp, Response, TxnRequest};
use crate::error::StoreError;
use crate::raft::{Raft, RaftGate};

/// Entries of this proposer in the log at once, not yet applied. Since the leader replicates
/// while it syncs, an entry commits sooner and a slot frees sooner; four slots then made the
/// batches under 1,000 clients small enough to cost about 5% of puts/s (`scripts/race.sh
/// puts`, two slots beside four), with no loss at 1 to 100 clients.
const IN_FLIGHT: usize = 2;
/// Most transactions in one entry.
const MAX_BATCH: usize = 1024;
/// Most bytes (keys and values) in one entry: replication sends entries within a heartbeat.
const MAX_BATCH_BYTES: usize = 1 << 20;
/// Transactions waiting for a slot.
const QUEUE: usize = 8192;

type Reply = oneshot::Sender<Result<Response, StoreError>>;

struct Pending {
    txn: TxnRequest,
    bytes: usize,
    reply: Reply,
}

/// The leader-side proposer of a member. Cheap to clone.
#[derive(Clone)]
pub struct Proposer {
    tx: mpsc::Sender<Pending>,
    log: Log,
    /// Whether proposals are held back (while leadership is handed over).
    held: Arc<watch::Sender<bool>>,
}

/// What openraft answers a write handed to it with, once the entry is applied or refused.
type Written = oneshot::Receiver<openraft::raft::ClientWriteResult<crate::raft::TypeConfig>>;

impl std::fmt::Debug for Proposer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proposer").finish_non_exhaustive()
    }
}

/// What a proposal needs: the Raft handle, this process's proposals, the proposal timeout.
#[derive(Clone)]
struct Log {
    raft: Raft,
    proposals: Arc<Proposals>,
    timeout: Duration,
    held: watch::Receiver<bool>,
    /// Taken (shared) from checking `held` until the entry is in Raft's queue, and (alone) by
    /// [`Proposer::hold`]: once `hold` returns, no proposal that saw "not held" is still on
    /// its way into the log.
    entering: Arc<RwLock<()>>,
    /// Proposals that timed out, lost their leader or were dropped (etcd's
    /// `proposals_failed_total`).
    failed: prometheus_client::metrics::counter::Counter,
    /// The member's gate into its Raft core.
    gate: Arc<RaftGate>,
}

impl Proposer {
    /// Starts the batching task; it ends when the last clone is dropped. `proposals` must be
    /// the tracker the member's log store and state machine report to; proposals enter Raft
    /// through `gate`.
    pub fn start(
        raft: Raft,
        gate: Arc<RaftGate>,
        proposals: Arc<Proposals>,
        failed: prometheus_client::metrics::counter::Counter,
        timeout: Duration,
        cancel: CancellationToken,
        tasks: &TaskTracker,
    ) -> Proposer {
        let (tx, rx) = mpsc::channel(QUEUE);
        let (held, held_rx) = watch::channel(false);
        let log = Log {
            raft,
            proposals,
            timeout,
            held: held_rx,
            entering: Arc::default(),
            failed,
            gate,
        };
        let batches = log.clone();
        tasks.spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = run(batches, rx) => {}
            }
        });
        Proposer {
            tx,
            log,
            held: Arc::new(held),
        }
    }

    /// The index of the last entry in this member's log (see [`Proposals::log_reaches`]).
    pub fn log_end(&self) -> u64 {
        self.log.proposals.log_end()
    }

    /// Proposals of this member waiting for their fate (etcd's `proposals_pending`).
    pub fn pending(&self) -> usize {
        self.log.proposals.outstanding.load(Ordering::Relaxed)
    }

    /// Holds every proposal not yet handed to Raft until the returned guard is dropped: a
    /// leader handing over stops its log from growing, so the transferee can catch up with
    /// it. Returns once every proposal that got past the gate before is in Raft's queue (so
    /// Raft's next answer counts its entry). Held proposals count against their timeout;
    /// released, they go to Raft, which refuses them if this member no longer leads, and the
    /// caller sends them to the leader.
    pub async fn hold(&self) -> Held {
        self.held.send_replace(true);
        drop(self.log.entering.write().await);
        Held(self.held.clone())
    }

    /// Proposes `txn` (with others, when they arrive together) and returns what applying it
    /// produced.
    pub async fn propose(&self, txn: TxnRequest) -> Result<Response, StoreError> {
        let (reply, rx) = oneshot::channel();
        let bytes = txn_bytes(&txn);
        self.tx
            .send(Pending { txn, bytes, reply })
            .await
            .map_err(|_| StoreError::Stopped)?;
        rx.await.map_err(|_| StoreError::Stopped)?
    }

    /// Proposes `cmd` as an entry of its own (leases, compaction, alarms: rare, and not
    /// batched).
    pub async fn propose_alone(&self, cmd: Command) -> Result<Response, StoreError> {
        self.log.write(cmd).await
    }
}

async fn run(log: Log, mut rx: mpsc::Receiver<Pending>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        // A slot first: while every slot is busy, what arrives queues and joins this batch.
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut bytes = first.bytes;
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(p) => {
                    bytes += p.bytes;
                    batch.push(p);
                }
                Err(_) => break,
            }
        }
        let log = log.clone();
        tokio::spawn(async move {
            let _permit = permit;
            commit(&log, batch).await;
        });
    }
}

async fn commit(log: &Log, mut batch: Vec<Pending>) {
    if batch.len() == 1 {
        let p = batch.pop().expect("invariant: one pending transaction");
        let _ = p.reply.send(log.write(Command::Txn(p.txn)).await);
        return;
    }
    let (txns, replies): (Vec<TxnRequest>, Vec<Reply>) =
        batch.into_iter().map(|p| (p.txn, p.reply)).unzip();
    let n = txns.len();
    match log.write(Command::Batch(txns)).await {
        Ok(Response {
            result: Ok(Outcome::Batch(responses)),
            ..
        }) if responses.len() == n => {
            for (reply, r) in replies.into_iter().zip(responses) {
                let _ = reply.send(Ok(r));
            }
        }
        Ok(Response { result: Err(e), .. }) | Err(e) => {
            // The entry as a whole failed (no leader, timeout, stopped, NOSPACE before any
            // transaction ran): every transaction in it gets the same answer.
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
        Ok(other) => {
            let e = StoreError::internal(format!("a batch answered {other:?}"));
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

impl Log {
    /// Hands `proposal` to Raft once proposals are not held.
    async fn enter(&self, proposal: Proposal) -> Result<Written, StoreError> {
        let mut held = self.held.clone();
        loop {
            if held.wait_for(|held| !*held).await.is_err() {
                return Err(StoreError::Stopped);
            }
            let _entering = self.entering.read().await;
            // `hold` may have begun between the two: it waits for this guard, so look again.
            if *held.borrow() {
                continue;
            }
            return self
                .gate
                .pass(self.raft.client_write_ff(proposal))
                .await?
                .map_err(|_| StoreError::Stopped);
        }
    }

    /// One entry through the log, with the proposal timeout; errors as the API reports them.
    ///
    /// - `NoLeader`: the entry certainly was not applied and never will be (this member does
    ///   not lead, or another entry took its place): the caller may send it to the leader.
    /// - `LeaderChanged`, `Timeout`: it may or may not have been applied.
    async fn write(&self, command: Command) -> Result<Response, StoreError> {
        let mut ticket = self.proposals.open();
        let proposal = Proposal {
            id: ticket.id,
            command,
        };
        // A leader cut off from its quorum never commits: give up (ambiguously) rather than
        // hang, as etcd's request timeout does.
        let decided = tokio::time::timeout(self.timeout, async {
            let mut written = self.enter(proposal).await?;
            tokio::select! {
                biased;
                fate = &mut ticket.fate => return fate.map_err(|_| StoreError::Stopped),
                written = &mut written => match written {
                    // Applied: the state machine has already handed the response to the
                    // ticket; openraft's copy carries the revision only.
                    Ok(Ok(_)) => {}
                    // openraft says this both when it refused the entry (it never reached any
                    // log) and when a new leader overwrote it here (a copy may survive on
                    // another member and still be committed). Only the first is safe to send
                    // again; in the second the fate decides.
                    Ok(Err(ClientWriteError::ForwardToLeader(_))) => {
                        if ticket.appended_at().is_none() {
                            return Ok(Fate::Lost);
                        }
                    }
                    Ok(Err(ClientWriteError::ChangeMembershipError(e))) => {
                        return Err(StoreError::Invalid(e.to_string()));
                    }
                    // Raft dropped the answer: it stopped.
                    Err(_) => return Err(StoreError::Stopped),
                },
            }
            (&mut ticket.fate).await.map_err(|_| StoreError::Stopped)
        })
        .await;
        if !matches!(decided, Ok(Ok(Fate::Applied(_)))) {
            self.failed.inc();
        }
        match decided {
            Err(_elapsed) => Err(StoreError::Timeout),
            Ok(Err(e)) => Err(e),
            Ok(Ok(Fate::Applied(response))) => Ok(response),
            Ok(Ok(Fate::Lost)) => Err(StoreError::NoLeader),
            Ok(Ok(Fate::Unknown)) => Err(StoreError::LeaderChanged),
        }
    }
}

/// Proposals are held while this lives (see [`Proposer::hold`]).
#[derive(Debug)]
pub struct Held(Arc<watch::Sender<bool>>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.send_replace(false);
    }
}

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

/// About how many bytes a transaction adds to an entry.
fn txn_bytes(t: &TxnRequest) -> usize {
    fn ops(ops: &[RequestOp]) -> usize {
        ops.iter()
            .map(|op| {
                16 + match op {
                    RequestOp::Range(r) => r.key.len() + r.range_end.len(),
                    RequestOp::Put(p) => p.key.len() + p.value.len(),
                    RequestOp::DeleteRange(d) => d.key.len() + d.range_end.len(),
                    RequestOp::Txn(t) => txn_bytes(t),
                }
            })
            .sum()
    }
    let compares: usize = t.compare.iter().map(|c| 24 + c.key.len()).sum();
    compares + ops(&t.success) + ops(&t.failure)
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
