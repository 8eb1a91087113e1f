//! What goes through the Raft log, and what applying it returns.
//!
//! Every write, whatever API it came from, is one [`Command`]: a Put or DeleteRange is a
//! [`TxnRequest`] with no compares and one operation, so the state machine has a single write
//! path. The types mirror etcd's `etcdserverpb` messages but are our own (serde, no protobuf
//! presence quirks); the etcd service converts at the edge. The requests themselves are
//! [`crate::request`]'s, re-exported here.

use serde::{Deserialize, Serialize};

use crate::error::StoreError;
pub use crate::request::{
    Compare, CompareResult, CompareTarget, DeleteRangeRequest, DeleteRangeResponse, Event,
    EventKind, KeyValue, PutRequest, PutResponse, RangeRequest, RangeResponse, RequestOp,
    ResponseOp, SortOrder, SortTarget, TxnRequest, TxnResponse,
};

/// Alarms, as etcd's `AlarmType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Alarm {
    /// The backend outgrew its quota: puts are refused.
    NoSpace,
    /// A member's keyspace differs from the leader's at the same revision: writes are refused
    /// until an operator disarms it.
    Corrupt,
}

impl Alarm {
    /// etcd's `AlarmType` number.
    pub fn number(self) -> i32 {
        match self {
            Alarm::NoSpace => 1,
            Alarm::Corrupt => 2,
        }
    }

    /// The alarm of etcd's `AlarmType` number `n`.
    pub fn from_number(n: i32) -> Option<Alarm> {
        match n {
            1 => Some(Alarm::NoSpace),
            2 => Some(Alarm::Corrupt),
            _ => None,
        }
    }

    /// etcd's name, as `alarm list` and `/health` print it.
    pub fn name(self) -> &'static str {
        match self {
            Alarm::NoSpace => "NOSPACE",
            Alarm::Corrupt => "CORRUPT",
        }
    }
}

/// A replicated state-machine command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    Txn(TxnRequest),
    Compact {
        revision: i64,
    },
    LeaseGrant {
        id: i64,
        ttl: i64,
    },
    LeaseRevoke {
        id: i64,
    },
    /// Leases the leader found expired; ones revoked meanwhile are skipped, not errors.
    LeaseExpire {
        ids: Vec<i64>,
    },
    /// Seconds left of leases that are not being kept alive, as the leader's clock had them
    /// (`(id, Some(remaining))`), or a checkpoint cleared (`None`) once a lease is renewed: a
    /// new leader starts a checkpointed lease's clock from what was left rather than from a
    /// full TTL (see `member::lessor`). Leases gone meanwhile are skipped.
    LeaseCheckpoint {
        leases: Vec<(i64, Option<i64>)>,
    },
    AlarmActivate {
        member: u64,
        alarm: Alarm,
    },
    AlarmDeactivate {
        member: u64,
        alarm: Alarm,
    },
    /// Transactions proposed together as one log entry (group commit): applied in order, each
    /// at its own revision, and written in one atomic batch with the entry's applied id.
    Batch(Vec<TxnRequest>),
    /// A change to users, roles or permissions, or a token issued (see [`crate::auth`]).
    Auth(crate::auth::AuthCommand),
}

impl Command {
    /// Whether the command can add data (refused while the NOSPACE alarm is raised).
    pub fn may_grow(&self) -> bool {
        match self {
            Command::Txn(t) => !t.is_read_only(),
            Command::Batch(ts) => ts.iter().any(|t| !t.is_read_only()),
            Command::LeaseGrant { .. } => true,
            _ => false,
        }
    }
}

/// Which proposal put an entry in the log: the proposing member, a random id of that
/// member's process, and a sequence number within it. Only the proposing process waits for
/// its entries, and it tells its own entry from another at the same index by this id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct ProposalId {
    pub member: u64,
    pub boot: u64,
    pub seq: u64,
}

/// A log entry's command, with the proposal that put it there.
///
/// The command is shared, not copied, as the entry is cloned: into the log store's newest
/// entries, into each follower's AppendEntries, into the state machine. A batch holds up to
/// a thousand transactions with their keys and values, and copying it deeply was 4 % of the
/// leader's samples under 1,000 clients. It is encoded as the command itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    pub id: ProposalId,
    pub command: std::sync::Arc<Command>,
}

/// What applying a command produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Txn(TxnResponse),
    Compacted,
    LeaseGranted {
        id: i64,
        ttl: i64,
    },
    LeaseRevoked,
    Alarms(Vec<(u64, Alarm)>),
    /// A membership change or blank entry.
    Nothing,
    /// One response per transaction of a `Batch`, in order.
    Batch(Vec<Response>),
    /// An auth change applied (see [`crate::auth`]).
    Auth,
}

/// The state machine's answer to one log entry: the store revision after applying it, and the
/// outcome or the deterministic error (every member reaches the same one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    pub revision: i64,
    pub result: Result<Outcome, StoreError>,
}

impl Default for Response {
    fn default() -> Self {
        Response {
            revision: 0,
            result: Ok(Outcome::Nothing),
        }
    }
}
