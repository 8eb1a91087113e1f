//! The MVCC keyspace: the state machine's data, over the RocksDB backend.
//!
//! The in-memory [`TreeIndex`] maps every key to the revisions at which it changed; the
//! versions themselves live in the `kv` column family under their versioned keys. A write
//! transaction takes the next main revision and numbers its writes with sub revisions; a
//! read-only transaction takes none. Every write goes into one RocksDB write batch together
//! with the caller's Raft metadata (the applied log id), so a crash leaves either all of an
//! entry or none of it, and the log replays what is missing.
//!
//! Transactions follow etcd: all compares (including those of nested transactions) are
//! evaluated against the state before the transaction, the chosen branches are checked
//! (leases exist, `ignore_value` keys exist, read revisions valid) before anything is written,
//! and reads inside a transaction see its earlier writes.
//!
//! Compaction forgets history in the index when it is applied; the backend keeps the dropped
//! versions until the background deletes them (see [`crate::compaction`]), so every read goes
//! through the index, and rebuilding it compacts again.
//!
//! | module        | what it holds                                                          |
//! |---------------|------------------------------------------------------------------------|
//! | this one      | opening (rebuilding the index), applying commands, leases, compaction  |
//! | [`reads`]     | one key at a revision, ranges                                          |
//! | [`txn`]       | transactions: compares, checks, puts and deletes                       |
//! | [`snapshot`]  | the keyspace as a snapshot, and installing one                         |
//! | [`history`]   | changes in a revision range, for watchers catching up                  |

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use rocksdb::{DB, IteratorMode, WriteBatch};

use crate::auth::{Auth, AuthCommand, AuthState};
use crate::backend::{self, CF_KV, CF_LEASE, CF_META, Record};
use crate::command::{Alarm, Command, DeleteRangeRequest, Event, Outcome, Response, TxnRequest};
use crate::compaction::Backlog;
use crate::error::StoreError;
use crate::key_index::TreeIndex;
use crate::revision::{Revision, split_versioned_key, versioned_key};

mod history;
mod mirror;
mod reads;
mod snapshot;
mod txn;

pub use history::{History, HistoryPlan};
pub use mirror::Mirrored;
pub use snapshot::{RawMeta, SnapshotHead, StoredVersion};
use txn::{TxnWrite, cmd_has_put, txn_has_put};

/// A lease as the state machine knows it: its granted TTL and the keys attached to it.
/// Deadlines are not replicated state; the leader's lessor keeps them, and checkpoints the
/// seconds left of leases nobody keeps alive ([`Command::LeaseCheckpoint`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lease {
    pub ttl: i64,
    pub keys: BTreeSet<Vec<u8>>,
    /// Seconds left at the last checkpoint, if one was taken.
    pub checkpoint: Option<i64>,
}

/// The MVCC state. Shared behind a lock: the apply path writes, reads take it shared.
#[derive(Debug)]
pub struct Mvcc {
    db: Arc<DB>,
    index: TreeIndex,
    revision: i64,
    compacted: i64,
    leases: BTreeMap<i64, Lease>,
    alarms: BTreeSet<(u64, Alarm)>,
    /// Users, roles and permissions (replicated), and this member's tokens.
    auth: Auth,
    /// How long a token may go unused (`--auth-token-ttl`).
    token_ttl: std::time::Duration,
    /// Versions compaction dropped from the index that the backend still holds (see
    /// [`crate::compaction`]).
    backlog: Arc<Backlog>,
}

/// The result of applying one command.
#[derive(Debug)]
pub struct Applied {
    pub response: Response,
    /// Changes at `response.revision`, in sub-revision order (empty if nothing changed).
    pub events: Vec<Event>,
    /// For a `Batch`: the changes of each transaction at its revision, in order (and
    /// `events` is empty).
    pub batch: Vec<(i64, Vec<Event>)>,
}

const META_REVISION: &[u8] = b"revision";
const META_COMPACTED: &[u8] = b"compacted";
const META_ALARMS: &[u8] = b"alarms";
const META_AUTH: &[u8] = b"auth";
/// The leases' checkpoints, `(id, seconds left)`: in the meta family, not beside each lease's
/// TTL, so that a lease's record keeps the format every release reads.
const META_LEASE_CHECKPOINTS: &[u8] = b"lease-checkpoints";

/// etcd's `--auth-token-ttl` default.
pub const DEFAULT_TOKEN_TTL: std::time::Duration = std::time::Duration::from_secs(300);

fn io(e: rocksdb::Error) -> StoreError {
    StoreError::internal(e)
}

impl Mvcc {
    /// Loads the keyspace from the backend, rebuilding the index.
    pub fn open(db: Arc<DB>) -> Result<Mvcc, StoreError> {
        let mut m = Mvcc {
            db,
            index: TreeIndex::default(),
            revision: 0,
            compacted: 0,
            leases: BTreeMap::new(),
            alarms: BTreeSet::new(),
            auth: Auth::default(),
            token_ttl: DEFAULT_TOKEN_TTL,
            backlog: Arc::new(Backlog::default()),
        };
        m.load()?;
        Ok(m)
    }

    fn load(&mut self) -> Result<(), StoreError> {
        let meta = backend::cf(&self.db, CF_META);
        let read_i64 = |k: &[u8]| -> Result<i64, StoreError> {
            Ok(match self.db.get_cf(meta, k).map_err(io)? {
                Some(b) => backend::decode(&b).map_err(StoreError::internal)?,
                None => 0,
            })
        };
        self.revision = read_i64(META_REVISION)?;
        self.compacted = read_i64(META_COMPACTED)?;
        self.alarms = match self.db.get_cf(meta, META_ALARMS).map_err(io)? {
            Some(b) => backend::decode::<Vec<(u64, Alarm)>>(&b)
                .map_err(StoreError::internal)?
                .into_iter()
                .collect(),
            None => BTreeSet::new(),
        };
        let auth = match self.db.get_cf(meta, META_AUTH).map_err(io)? {
            Some(b) => backend::decode(&b).map_err(StoreError::internal)?,
            None => AuthState::default(),
        };
        self.auth.replace(auth);
        self.leases.clear();
        for item in self
            .db
            .iterator_cf(backend::cf(&self.db, CF_LEASE), IteratorMode::Start)
        {
            let (k, v) = item.map_err(io)?;
            let id = i64::from_be_bytes(k.as_ref().try_into().map_err(StoreError::internal)?);
            let ttl = i64::from_be_bytes(v.as_ref().try_into().map_err(StoreError::internal)?);
            self.leases.insert(
                id,
                Lease {
                    ttl,
                    ..Lease::default()
                },
            );
        }
        if let Some(b) = self.db.get_cf(meta, META_LEASE_CHECKPOINTS).map_err(io)? {
            for (id, left) in
                backend::decode::<Vec<(i64, i64)>>(&b).map_err(StoreError::internal)?
            {
                if let Some(lease) = self.leases.get_mut(&id) {
                    lease.checkpoint = Some(left);
                }
            }
        }
        self.index = TreeIndex::default();
        // The last record of each key tells which lease it is attached to now.
        let mut last: Option<(Vec<u8>, Record)> = None;
        let db = self.db.clone();
        for item in db.iterator_cf(backend::cf(&db, CF_KV), IteratorMode::Start) {
            let (vk, v) = item.map_err(io)?;
            let (key, rev) = split_versioned_key(&vk)
                .ok_or_else(|| StoreError::internal("malformed versioned key in backend"))?;
            let record = Record::decode(&v)
                .ok_or_else(|| StoreError::internal("malformed record in backend"))?;
            restore(&mut self.index, &key, rev, &record);
            if let Some((k, r)) = last.take().filter(|(k, _)| *k != key) {
                self.attach_restored(k, &r);
            }
            last = Some((key, record));
        }
        if let Some((k, r)) = last {
            self.attach_restored(k, &r);
        }
        // The backend may still hold versions the last compaction dropped (their deletion runs
        // in the background): compacting the restored history again drops exactly those, and
        // they are what is left to delete.
        let stale = self.index.compact(self.compacted);
        self.backlog
            .reset(stale.into_iter().map(|(k, rev)| versioned_key(&k, rev)));
        Ok(())
    }

    fn attach_restored(&mut self, key: Vec<u8>, record: &Record) {
        if let Record::Put { lease, .. } = record
            && *lease != 0
            && let Some(l) = self.leases.get_mut(lease)
        {
            l.keys.insert(key);
        }
    }

    pub fn revision(&self) -> i64 {
        self.revision
    }

    pub fn compacted(&self) -> i64 {
        self.compacted
    }

    pub fn leases(&self) -> &BTreeMap<i64, Lease> {
        &self.leases
    }

    pub fn alarms(&self) -> Vec<(u64, Alarm)> {
        self.alarms.iter().copied().collect()
    }

    /// Users, roles and permissions, and this member's tokens.
    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    /// How long a token may go unused before it expires (`--auth-token-ttl`).
    pub fn set_token_ttl(&mut self, ttl: std::time::Duration) {
        self.token_ttl = ttl;
    }

    pub fn token_ttl(&self) -> std::time::Duration {
        self.token_ttl
    }

    /// Refuses a transaction checked against an older auth state than the one in force.
    fn check_auth_revision(&self, t: &TxnRequest) -> Result<(), StoreError> {
        match t.auth_revision {
            Some(checked) if self.auth.state.enabled && checked < self.auth.state.revision => {
                Err(StoreError::AuthOldRevision)
            }
            _ => Ok(()),
        }
    }

    pub fn key_count(&self) -> usize {
        self.index.len()
    }

    pub fn db(&self) -> &Arc<DB> {
        &self.db
    }

    /// The versions compaction dropped that the backend still holds.
    pub fn backlog(&self) -> &Arc<Backlog> {
        &self.backlog
    }

    /// Deletes up to `limit` versions of the compaction backlog from the backend; returns how
    /// many are left. Needs only shared access: nothing reads the versions it deletes.
    pub fn delete_compacted(&self, limit: usize) -> Result<usize, StoreError> {
        let versions = self.backlog.take(limit);
        if versions.is_empty() {
            return Ok(self.backlog.deleted());
        }
        let kv = backend::cf(&self.db, CF_KV);
        let mut batch = WriteBatch::default();
        for vk in &versions {
            batch.delete_cf(kv, vk);
        }
        if let Err(e) = self.db.write(batch) {
            self.backlog.give_back(versions);
            return Err(io(e));
        }
        Ok(self.backlog.deleted())
    }

    /// Applies one command. Writes are not fsynced: the Raft log is applied again from the
    /// applied id after a crash, and the log behind a snapshot is purged only after a synced
    /// write to this database (the purge marker), which makes what was applied durable first.
    /// `meta` entries are written into the same batch (the Raft applied
    /// log id and membership), so they commit atomically with the change.
    pub fn apply(
        &mut self,
        cmd: &Command,
        meta: &[(&[u8], Vec<u8>)],
    ) -> Result<Applied, StoreError> {
        if let Command::Batch(txns) = cmd {
            return self.apply_batch(txns, meta);
        }
        let mut w = TxnWrite::new(self.revision);
        let result = self.apply_command(cmd, &mut w);
        if let Err(e @ StoreError::Internal(_)) = result {
            // The index may be half-updated: the member must stop, not go on diverged.
            return Err(e);
        }
        if w.sub > 0 {
            self.revision = w.main;
        }
        self.commit(std::mem::take(&mut w.batch), meta)?;
        // Only once the compaction revision is written may the background delete anything.
        if !w.compacted.is_empty() {
            self.backlog.schedule(std::mem::take(&mut w.compacted));
        }
        Ok(Applied {
            response: Response {
                revision: self.revision,
                result,
            },
            events: w.events,
            batch: Vec::new(),
        })
    }

    /// A `Batch`: each transaction at its own revision, as if proposed alone, but one
    /// RocksDB write for all (with the entry's meta), so a crash leaves all or none. The
    /// write batch and the overlay of written versions carry from one transaction to the
    /// next, so a transaction reads what an earlier one in the batch wrote.
    fn apply_batch(
        &mut self,
        txns: &[TxnRequest],
        meta: &[(&[u8], Vec<u8>)],
    ) -> Result<Applied, StoreError> {
        let mut batch = WriteBatch::default();
        let mut overlay = HashMap::new();
        let mut responses = Vec::with_capacity(txns.len());
        let mut published = Vec::with_capacity(txns.len());
        for t in txns {
            let mut w = TxnWrite::new(self.revision);
            w.batch = std::mem::take(&mut batch);
            w.overlay = std::mem::take(&mut overlay);
            let result = if self.corrupt() {
                Err(StoreError::Corrupt)
            } else if self.no_space() && txn_has_put(t) {
                Err(StoreError::NoSpace)
            } else {
                self.check_auth_revision(t)
                    .and_then(|()| self.txn(t, &mut w).map(Outcome::Txn))
            };
            if let Err(e @ StoreError::Internal(_)) = result {
                return Err(e);
            }
            if w.sub > 0 {
                self.revision = w.main;
            }
            batch = std::mem::take(&mut w.batch);
            overlay = std::mem::take(&mut w.overlay);
            responses.push(Response {
                revision: self.revision,
                result,
            });
            published.push((self.revision, w.events));
        }
        self.commit(batch, meta)?;
        Ok(Applied {
            response: Response {
                revision: self.revision,
                result: Ok(Outcome::Batch(responses)),
            },
            events: Vec::new(),
            batch: published,
        })
    }

    /// Writes one applied entry's batch with the store revision and the Raft meta.
    fn commit(
        &mut self,
        mut batch: WriteBatch,
        meta: &[(&[u8], Vec<u8>)],
    ) -> Result<(), StoreError> {
        let meta_cf = backend::cf(&self.db, CF_META);
        batch.put_cf(meta_cf, META_REVISION, backend::encode(&self.revision));
        for (k, v) in meta {
            batch.put_cf(meta_cf, k, v);
        }
        self.db.write(batch).map_err(io)
    }

    /// Writes Raft metadata for an entry that carries no command (blank, membership).
    pub fn write_meta(&self, meta: &[(&[u8], Vec<u8>)]) -> Result<(), StoreError> {
        let meta_cf = backend::cf(&self.db, CF_META);
        let mut batch = WriteBatch::default();
        for (k, v) in meta {
            batch.put_cf(meta_cf, k, v);
        }
        self.db.write(batch).map_err(io)
    }

    fn no_space(&self) -> bool {
        self.alarms.iter().any(|(_, a)| *a == Alarm::NoSpace)
    }

    fn corrupt(&self) -> bool {
        self.alarms.iter().any(|(_, a)| *a == Alarm::Corrupt)
    }

    fn apply_command(&mut self, cmd: &Command, w: &mut TxnWrite) -> Result<Outcome, StoreError> {
        // Under CORRUPT nothing changes the keyspace (as etcd's corrupt applier); the alarms
        // themselves can still be raised and disarmed.
        let alarm = matches!(
            cmd,
            Command::AlarmActivate { .. } | Command::AlarmDeactivate { .. }
        );
        if self.corrupt() && !alarm {
            return Err(StoreError::Corrupt);
        }
        if self.no_space() && cmd_has_put(cmd) {
            return Err(StoreError::NoSpace);
        }
        match cmd {
            Command::Batch(_) => Err(StoreError::Invalid("a batch inside a batch".into())),
            Command::Txn(t) => {
                self.check_auth_revision(t)?;
                self.txn(t, w).map(Outcome::Txn)
            }
            Command::Auth(a) => {
                self.auth.apply(a, self.token_ttl)?;
                if !matches!(a, AuthCommand::Authenticate { .. }) {
                    w.batch.put_cf(
                        backend::cf(&self.db, CF_META),
                        META_AUTH,
                        backend::encode(&self.auth.state),
                    );
                }
                Ok(Outcome::Auth)
            }
            Command::Compact { revision } => self.compact(*revision, w).map(|_| Outcome::Compacted),
            Command::LeaseGrant { id, ttl } => {
                if *id <= 0 {
                    return Err(StoreError::Invalid("lease id must be positive".into()));
                }
                if self.leases.contains_key(id) {
                    return Err(StoreError::LeaseExists);
                }
                self.leases.insert(
                    *id,
                    Lease {
                        ttl: *ttl,
                        ..Lease::default()
                    },
                );
                w.batch.put_cf(
                    backend::cf(&self.db, CF_LEASE),
                    id.to_be_bytes(),
                    ttl.to_be_bytes(),
                );
                Ok(Outcome::LeaseGranted { id: *id, ttl: *ttl })
            }
            Command::LeaseRevoke { id } => {
                if !self.leases.contains_key(id) {
                    return Err(StoreError::LeaseNotFound);
                }
                self.revoke(*id, w)?;
                Ok(Outcome::LeaseRevoked)
            }
            Command::LeaseExpire { ids } => {
                // The entry's leases go in one revision: each lease's keys vanish together
                // (as etcd revokes a lease), and a watcher sees one batch. The leader splits
                // a large expiry into several entries, by lease (see `member::lessor`).
                for id in ids {
                    if self.leases.contains_key(id) {
                        self.revoke(*id, w)?;
                    }
                }
                Ok(Outcome::LeaseRevoked)
            }
            Command::LeaseCheckpoint { leases } => {
                for (id, left) in leases {
                    if let Some(lease) = self.leases.get_mut(id) {
                        lease.checkpoint = *left;
                    }
                }
                self.persist_checkpoints(w);
                Ok(Outcome::Nothing)
            }
            Command::AlarmActivate { member, alarm } => {
                self.alarms.insert((*member, *alarm));
                self.persist_alarms(w);
                Ok(Outcome::Alarms(self.alarms()))
            }
            Command::AlarmDeactivate { member, alarm } => {
                self.alarms.remove(&(*member, *alarm));
                self.persist_alarms(w);
                Ok(Outcome::Alarms(self.alarms()))
            }
        }
    }

    fn persist_alarms(&self, w: &mut TxnWrite) {
        w.batch.put_cf(
            backend::cf(&self.db, CF_META),
            META_ALARMS,
            backend::encode(&self.alarms()),
        );
    }

    /// Writes every lease's checkpoint (one small value: leases nobody keeps alive are few,
    /// kube-apiserver's event leases one a minute).
    fn persist_checkpoints(&self, w: &mut TxnWrite) {
        let checkpoints: Vec<(i64, i64)> = self
            .leases
            .iter()
            .filter_map(|(id, l)| l.checkpoint.map(|left| (*id, left)))
            .collect();
        w.batch.put_cf(
            backend::cf(&self.db, CF_META),
            META_LEASE_CHECKPOINTS,
            backend::encode(&checkpoints),
        );
    }

    fn revoke(&mut self, id: i64, w: &mut TxnWrite) -> Result<(), StoreError> {
        let lease = self.leases.remove(&id).unwrap_or_default();
        w.batch
            .delete_cf(backend::cf(&self.db, CF_LEASE), id.to_be_bytes());
        if lease.checkpoint.is_some() {
            self.persist_checkpoints(w);
        }
        for key in lease.keys {
            self.delete_range(
                &DeleteRangeRequest {
                    key,
                    range_end: Vec::new(),
                    prev_kv: false,
                },
                w,
            )?;
        }
        Ok(())
    }

    fn compact(&mut self, revision: i64, w: &mut TxnWrite) -> Result<(), StoreError> {
        if revision <= self.compacted {
            return Err(StoreError::Compacted {
                compacted: self.compacted,
            });
        }
        if revision > self.revision {
            return Err(StoreError::FutureRevision);
        }
        // Only the index is compacted here: deleting the dropped versions from RocksDB can take
        // long for a large backlog, and happens in the background (see `compaction`).
        w.compacted = self
            .index
            .compact(revision)
            .into_iter()
            .map(|(key, rev)| versioned_key(&key, rev))
            .collect();
        self.compacted = revision;
        w.batch.put_cf(
            backend::cf(&self.db, CF_META),
            META_COMPACTED,
            backend::encode(&self.compacted),
        );
        Ok(())
    }
}

/// Records one stored version in `index` (start-up, or sorting a snapshot's versions).
fn restore(index: &mut TreeIndex, key: &[u8], rev: Revision, record: &Record) {
    match record {
        Record::Put {
            create_main,
            create_sub,
            version,
            ..
        } => index.restore(key, rev, Revision::new(*create_main, *create_sub), *version),
        Record::Tombstone => index.restore_tombstone(key, rev),
    }
}

#[cfg(test)]
mod tests;
