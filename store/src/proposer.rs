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

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::command::{Command, Outcome, RequestOp, Response, TxnRequest};
use crate::error::StoreError;
use crate::raft::Raft;

/// Entries of this proposer in the log at once, not yet applied.
const IN_FLIGHT: usize = 4;
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
#[derive(Debug, Clone)]
pub struct Proposer {
    tx: mpsc::Sender<Pending>,
}

impl Proposer {
    /// Starts the batching task; it ends when the last clone is dropped.
    pub fn start(raft: Raft, timeout: Duration) -> Proposer {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(raft, timeout, rx));
        Proposer { tx }
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
}

async fn run(raft: Raft, timeout: Duration, mut rx: mpsc::Receiver<Pending>) {
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
        let raft = raft.clone();
        tokio::spawn(async move {
            let _permit = permit;
            commit(&raft, timeout, batch).await;
        });
    }
}

async fn commit(raft: &Raft, timeout: Duration, mut batch: Vec<Pending>) {
    if batch.len() == 1 {
        let p = batch.pop().expect("invariant: one pending transaction");
        let _ = p
            .reply
            .send(client_write(raft, timeout, Command::Txn(p.txn)).await);
        return;
    }
    let (txns, replies): (Vec<TxnRequest>, Vec<Reply>) =
        batch.into_iter().map(|p| (p.txn, p.reply)).unzip();
    let n = txns.len();
    match client_write(raft, timeout, Command::Batch(txns)).await {
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

/// One entry through the log, with the proposal timeout; errors as the API reports them.
pub async fn client_write(
    raft: &Raft,
    timeout: Duration,
    cmd: Command,
) -> Result<Response, StoreError> {
    // A leader cut off from its quorum never commits: give up (ambiguously) rather than
    // hang, as etcd's request timeout does.
    let Ok(result) = tokio::time::timeout(timeout, raft.client_write(cmd)).await else {
        return Err(StoreError::Timeout);
    };
    match result {
        Ok(resp) => Ok(resp.data),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => Err(StoreError::NoLeader),
        Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e))) => {
            Err(StoreError::Invalid(e.to_string()))
        }
        Err(RaftError::Fatal(_)) => Err(StoreError::Stopped),
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
