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

use std::sync::Arc;
use std::time::Duration;

use openraft::error::ClientWriteError;
use tokio::sync::{RwLock, Semaphore, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::command::{Command, Outcome, Proposal, RequestOp, Response, TxnRequest};
use crate::error::StoreError;
pub use crate::proposals::{Fate, Proposals, Ticket};
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
        self.log.proposals.outstanding()
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
            command: Arc::new(command),
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
