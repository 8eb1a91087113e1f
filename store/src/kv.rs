//! The one interface through which Skiff's API server reaches a store: etcd's key-value
//! model, at the level kube-apiserver's etcd3 storage speaks it (transactions guarded by
//! compares, ranges at a revision, watches from a revision, leases), and Skiff's two
//! extensions beside it, the keys changed under a prefix since a revision and the present
//! keys by tag.
//!
//! ```text
//!   API server ──► Kv ─┬─ txn, lease_grant, barrier        (writes, linearizable reads)
//!                      ├─ header                           (cluster, member, term)
//!                      └─ keyspace ─┬─ read: revision, compacted, range,
//!                                   │        changed_since, tagged_keys
//!                                   └─ watch streams, progress notifications
//! ```
//!
//! A [`Keyspace`] is read locally and at once, a consistent view under one read lock; a read
//! that must see every write acknowledged before it calls [`Kv::barrier`] first, as a
//! ReadIndex read does. Writes go through [`Kv::txn`] and come back with the revision they
//! were applied at. The in-process member is one implementation ([`MemberKv`]): no socket
//! hop, the keyspace read in place.

use std::sync::Arc;
use std::sync::RwLockReadGuard;
use std::sync::atomic::Ordering;

use futures::future::BoxFuture;

use crate::command::{Command, Outcome};
use crate::error::StoreError;
use crate::member::StoreMember;
use crate::mvcc::Mvcc;
use crate::raft::state_machine::Shared;
use crate::request::{KeyValue, RangeRequest, RangeResponse, TxnRequest, TxnResponse};
use crate::watch::{Refusal, WatchReceiver, WatchSpec};

/// What every response names: the cluster, the member that answered, and its Raft term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub cluster_id: u64,
    pub member_id: u64,
    pub raft_term: u64,
}

/// A store, as the API server uses it.
pub trait Kv: std::fmt::Debug + Send + Sync + 'static {
    /// The keyspace, to read and watch.
    fn keyspace(&self) -> Keyspace;

    /// The header of a response now.
    fn header(&self) -> Header;

    /// Applies `txn` once, through the log: the revision after it and its response.
    fn txn(&self, txn: TxnRequest) -> BoxFuture<'_, Result<(i64, TxnResponse), StoreError>>;

    /// Grants a lease of `ttl` seconds; its id.
    fn lease_grant(&self, ttl: i64) -> BoxFuture<'_, Result<i64, StoreError>>;

    /// Returns once the keyspace holds every write acknowledged before the call: a read of
    /// it after this is linearizable.
    fn barrier(&self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The most operations one transaction may hold (etcd's `--max-txn-ops`; a member takes
    /// any number from its own API server).
    fn max_txn_ops(&self) -> usize {
        usize::MAX
    }
}

/// A keyspace, and the watch hub fed as it changes.
#[derive(Debug, Clone)]
pub struct Keyspace(Arc<Shared>);

impl Keyspace {
    pub fn new(shared: Arc<Shared>) -> Keyspace {
        Keyspace(shared)
    }

    /// A consistent view of the keyspace: nothing is applied while it is held, so hold it
    /// briefly and never across an `.await`.
    pub fn read(&self) -> Reader<'_> {
        Reader {
            mvcc: self.0.read(),
            shared: &self.0,
        }
    }

    /// How often the keyspace was replaced whole (a snapshot installed): what was counted
    /// from it before may be stale. Read it under [`Keyspace::read`] for the view's epoch.
    pub fn epoch(&self) -> u64 {
        self.0.snapshots_installed.load(Ordering::Relaxed)
    }

    /// Opens a watch stream, its messages queued up to `capacity`: its id and its receiver.
    /// Watches are added to it with [`Reader::watch`]; close it with [`Keyspace::close`].
    pub fn open(&self, capacity: usize) -> (u64, WatchReceiver) {
        let (id, _, rx) = self.0.hub.open_stream(capacity);
        (id, rx)
    }

    /// Closes a watch stream and every watch on it.
    pub fn close(&self, stream: u64) {
        self.0.hub.close_stream(stream);
    }
}

/// A consistent view of a keyspace (see [`Keyspace::read`]).
#[derive(Debug)]
pub struct Reader<'a> {
    mvcc: RwLockReadGuard<'a, Mvcc>,
    shared: &'a Shared,
}

impl Reader<'_> {
    /// The revision of the last write applied.
    pub fn revision(&self) -> i64 {
        self.mvcc.revision()
    }

    /// The revision history is compacted up to: reads and watches start after it.
    pub fn compacted(&self) -> i64 {
        self.mvcc.compacted()
    }

    pub fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StoreError> {
        self.mvcc.range(req)
    }

    /// Every key in `[key, range_end)` written since `revision`, with what it holds now
    /// (`None`: deleted); `None` when history no longer reaches back that far.
    #[allow(clippy::type_complexity)]
    pub fn changed_since(
        &self,
        key: &[u8],
        range_end: &[u8],
        revision: i64,
    ) -> Result<Option<Vec<(Vec<u8>, Option<KeyValue>)>>, StoreError> {
        self.mvcc.changed_since(key, range_end, revision)
    }

    /// The present keys in `[from, end)` tagged `tag` by the hub's tagger, in key order;
    /// `None` without a tagger.
    pub fn tagged_keys(&self, tag: &str, from: &[u8], end: &[u8]) -> Option<Vec<Vec<u8>>> {
        self.shared.hub.tagged_keys(tag, from, end)
    }

    /// Adds a watch to `stream`, placed at this view's revision: its id.
    pub fn watch(&self, stream: u64, spec: WatchSpec) -> Result<i64, Refusal> {
        self.shared.hub.add(&self.mvcc, stream, 0, spec, None)
    }

    /// Sends `stream`'s watchers a progress notification, as of this view.
    pub fn notify_progress(&self, stream: u64) {
        self.shared.hub.notify_progress(&self.mvcc, stream, &[0]);
    }
}

/// The in-process member as a [`Kv`]: proposals to its Raft log (forwarded to the leader),
/// its keyspace read in place.
#[derive(Debug, Clone)]
pub struct MemberKv(pub Arc<StoreMember>);

impl Kv for MemberKv {
    fn keyspace(&self) -> Keyspace {
        Keyspace(self.0.shared.clone())
    }

    fn header(&self) -> Header {
        Header {
            cluster_id: self.0.cluster_id,
            member_id: self.0.id,
            raft_term: self.0.term(),
        }
    }

    fn txn(&self, txn: TxnRequest) -> BoxFuture<'_, Result<(i64, TxnResponse), StoreError>> {
        Box::pin(async move {
            let resp = self.0.propose(Command::Txn(txn)).await?;
            match resp.result? {
                Outcome::Txn(t) => Ok((resp.revision, t)),
                other => Err(StoreError::internal(format!(
                    "a transaction answered with {other:?}"
                ))),
            }
        })
    }

    fn lease_grant(&self, ttl: i64) -> BoxFuture<'_, Result<i64, StoreError>> {
        Box::pin(async move {
            let id = self.0.new_lease_id();
            let resp = self.0.propose(Command::LeaseGrant { id, ttl }).await?;
            match resp.result? {
                Outcome::LeaseGranted { id, .. } => Ok(id),
                other => Err(StoreError::internal(format!(
                    "a lease grant answered with {other:?}"
                ))),
            }
        })
    }

    fn barrier(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.0.linearizable_barrier())
    }
}
