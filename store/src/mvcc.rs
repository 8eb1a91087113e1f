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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use rocksdb::{DB, IteratorMode, WriteBatch};
use serde::{Deserialize, Serialize};

use crate::backend::{self, CF_KV, CF_LEASE, CF_META, Record};
use crate::command::{
    Alarm, Command, Compare, CompareResult, CompareTarget, DeleteRangeRequest, DeleteRangeResponse,
    Event, EventKind, KeyValue, Outcome, PutRequest, PutResponse, RangeRequest, RangeResponse,
    RequestOp, Response, ResponseOp, SortOrder, SortTarget, TxnRequest, TxnResponse,
};
use crate::compaction::Backlog;
use crate::error::StoreError;
use crate::key_index::{KeyState, TreeIndex};
use crate::revision::{Revision, split_versioned_key, versioned_key};

mod history;
pub use history::{History, HistoryPlan};

/// A lease as the state machine knows it: its granted TTL and the keys attached to it.
/// Deadlines are not replicated state; the leader's lessor keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lease {
    pub ttl: i64,
    pub keys: BTreeSet<Vec<u8>>,
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

/// The whole keyspace as a snapshot carries it.
#[derive(Debug, Serialize, Deserialize)]
pub struct SnapshotPayload {
    pub revision: i64,
    pub compacted: i64,
    pub leases: Vec<(i64, i64)>,
    pub alarms: Vec<(u64, Alarm)>,
    /// (versioned key, encoded record) in key order.
    pub kv: Vec<StoredVersion>,
}

/// Raw values of metadata keys read alongside a snapshot (absent keys are `None`).
pub type RawMeta = Vec<Option<Vec<u8>>>;

/// One stored version in a snapshot: versioned key and encoded record.
#[derive(Debug, Serialize, Deserialize)]
pub struct StoredVersion(
    #[serde(with = "serde_bytes")] pub Vec<u8>,
    #[serde(with = "serde_bytes")] pub Vec<u8>,
);

const META_REVISION: &[u8] = b"revision";
const META_COMPACTED: &[u8] = b"compacted";
const META_ALARMS: &[u8] = b"alarms";

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
                    keys: BTreeSet::new(),
                },
            );
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

    /// Applies one command. Writes are not fsynced: durability comes from the Raft log, whose
    /// synced appends share this database's WAL. `meta` entries are written into the same batch (the Raft applied
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
            let result = if self.no_space() && txn_has_put(t) {
                Err(StoreError::NoSpace)
            } else {
                self.txn(t, &mut w).map(Outcome::Txn)
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

    fn apply_command(&mut self, cmd: &Command, w: &mut TxnWrite) -> Result<Outcome, StoreError> {
        if self.no_space() && cmd_has_put(cmd) {
            return Err(StoreError::NoSpace);
        }
        match cmd {
            Command::Batch(_) => Err(StoreError::Invalid("a batch inside a batch".into())),
            Command::Txn(t) => self.txn(t, w).map(Outcome::Txn),
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
                        keys: BTreeSet::new(),
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
                // All expired leases go in one revision: each lease's keys still vanish
                // together, and a watcher sees one batch.
                for id in ids {
                    if self.leases.contains_key(id) {
                        self.revoke(*id, w)?;
                    }
                }
                Ok(Outcome::LeaseRevoked)
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

    fn revoke(&mut self, id: i64, w: &mut TxnWrite) -> Result<(), StoreError> {
        let lease = self.leases.remove(&id).unwrap_or_default();
        w.batch
            .delete_cf(backend::cf(&self.db, CF_LEASE), id.to_be_bytes());
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

    // ---- reads ----

    fn load_record(
        &self,
        key: &[u8],
        rev: Revision,
        w: Option<&TxnWrite>,
    ) -> Result<Record, StoreError> {
        let vk = versioned_key(key, rev);
        if let Some(r) = w.and_then(|w| w.overlay.get(&vk)) {
            return Ok(r.clone());
        }
        let raw = self
            .db
            .get_pinned_cf(backend::cf(&self.db, CF_KV), &vk)
            .map_err(io)?
            .ok_or_else(|| {
                StoreError::internal(format!("version {rev} of an indexed key is missing"))
            })?;
        Record::decode(&raw).ok_or_else(|| StoreError::internal("malformed record in backend"))
    }

    fn key_value(
        &self,
        key: &[u8],
        state: KeyState,
        w: Option<&TxnWrite>,
    ) -> Result<KeyValue, StoreError> {
        match self.load_record(key, state.modified, w)? {
            Record::Put { lease, value, .. } => Ok(KeyValue {
                key: key.to_vec(),
                create_revision: state.created.main,
                mod_revision: state.modified.main,
                version: state.version,
                value,
                lease,
            }),
            Record::Tombstone => Err(StoreError::internal("index points at a tombstone")),
        }
    }

    /// The key as of main revision `at`, if it existed.
    pub fn get(&self, key: &[u8], at: i64) -> Result<Option<KeyValue>, StoreError> {
        match self.index.get(key, at) {
            Some(state) => self.key_value(key, state, None).map(Some),
            None => Ok(None),
        }
    }

    fn check_read_revision(&self, revision: i64) -> Result<i64, StoreError> {
        if revision <= 0 {
            return Ok(self.revision);
        }
        if revision > self.revision {
            return Err(StoreError::FutureRevision);
        }
        if revision < self.compacted {
            return Err(StoreError::Compacted {
                compacted: self.compacted,
            });
        }
        Ok(revision)
    }

    /// A Range outside any transaction.
    pub fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StoreError> {
        self.range_in(req, None)
    }

    fn range_in(
        &self,
        req: &RangeRequest,
        w: Option<&TxnWrite>,
    ) -> Result<RangeResponse, StoreError> {
        let at = match w {
            // Inside a write transaction the current view includes its own writes.
            Some(w) if req.revision <= 0 && w.sub > 0 => w.main,
            _ => self.check_read_revision(req.revision)?,
        };
        let filtered = req.min_mod_revision > 0
            || req.max_mod_revision > 0
            || req.min_create_revision > 0
            || req.max_create_revision > 0;
        let mut order = req.sort_order;
        if order == SortOrder::None && req.sort_target != SortTarget::Key {
            order = SortOrder::Ascend;
        }
        let needs_all = filtered
            || !matches!(
                (order, req.sort_target),
                (SortOrder::None, _) | (SortOrder::Ascend, SortTarget::Key)
            );
        let limit = if needs_all || req.count_only || req.limit <= 0 {
            0
        } else {
            req.limit as usize + 1
        };
        let (mut items, total) = self.index.range(&req.key, &req.range_end, at, limit);
        let count = total as i64;
        if req.count_only {
            return Ok(RangeResponse {
                kvs: Vec::new(),
                more: false,
                count,
            });
        }
        if filtered {
            items.retain(|(_, s)| {
                (req.min_mod_revision <= 0 || s.modified.main >= req.min_mod_revision)
                    && (req.max_mod_revision <= 0 || s.modified.main <= req.max_mod_revision)
                    && (req.min_create_revision <= 0 || s.created.main >= req.min_create_revision)
                    && (req.max_create_revision <= 0 || s.created.main <= req.max_create_revision)
            });
        }
        let mut kvs = Vec::with_capacity(items.len());
        for (key, state) in items {
            kvs.push(self.key_value(&key, state, w)?);
        }
        if order != SortOrder::None {
            sort_kvs(&mut kvs, req.sort_target, order == SortOrder::Descend);
        }
        let mut more = false;
        if req.limit > 0 && kvs.len() > req.limit as usize {
            kvs.truncate(req.limit as usize);
            more = true;
        }
        // Values are blanked only now: a sort by value, and the limit after it, must see them
        // (etcd sorts and truncates first too).
        if req.keys_only {
            for kv in &mut kvs {
                kv.value = Vec::new();
            }
        }
        Ok(RangeResponse { kvs, more, count })
    }

    // ---- transactions ----

    /// Whether `c` holds now. `w` carries what earlier transactions of the same batch wrote
    /// (not yet in RocksDB); this transaction has written nothing when compares run.
    fn compare(&self, c: &Compare, w: &TxnWrite) -> Result<bool, StoreError> {
        let (items, _) = if c.range_end.is_empty() {
            let items = self
                .index
                .get(&c.key, self.revision)
                .map(|s| vec![(c.key.clone(), s)])
                .unwrap_or_default();
            (items, 0)
        } else {
            self.index.range(&c.key, &c.range_end, self.revision, 0)
        };
        if items.is_empty() {
            // etcd: a missing key compares as zero values, except VALUE, which fails.
            return Ok(match &c.target {
                CompareTarget::Value(_) => false,
                _ => compare_one(c, &KeyValue::default()),
            });
        }
        for (key, state) in items {
            let kv = self.key_value(&key, state, Some(w))?;
            if !compare_one(c, &kv) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Evaluates every compare of `t` and its nested transactions on the chosen branches,
    /// before anything is written; returns the choices in depth-first order.
    fn choose_paths(
        &self,
        t: &TxnRequest,
        w: &TxnWrite,
        path: &mut Vec<bool>,
    ) -> Result<(), StoreError> {
        let mut ok = true;
        for c in &t.compare {
            if !self.compare(c, w)? {
                ok = false;
                break;
            }
        }
        path.push(ok);
        let ops = if ok { &t.success } else { &t.failure };
        for op in ops {
            if let RequestOp::Txn(inner) = op {
                self.choose_paths(inner, w, path)?;
            }
        }
        Ok(())
    }

    fn check_ops(&self, t: &TxnRequest, path: &[bool], at: &mut usize) -> Result<(), StoreError> {
        let ops = if path[*at] { &t.success } else { &t.failure };
        *at += 1;
        for op in ops {
            match op {
                RequestOp::Range(r) => {
                    self.check_read_revision(r.revision)?;
                }
                RequestOp::Put(p) => {
                    if p.lease != 0 && !p.ignore_lease && !self.leases.contains_key(&p.lease) {
                        return Err(StoreError::LeaseNotFound);
                    }
                    if (p.ignore_value || p.ignore_lease)
                        && self.index.get(&p.key, self.revision).is_none()
                    {
                        return Err(StoreError::KeyNotFound);
                    }
                }
                RequestOp::DeleteRange(_) => {}
                RequestOp::Txn(inner) => self.check_ops(inner, path, at)?,
            }
        }
        Ok(())
    }

    fn txn(&mut self, t: &TxnRequest, w: &mut TxnWrite) -> Result<TxnResponse, StoreError> {
        let mut path = Vec::new();
        self.choose_paths(t, w, &mut path)?;
        self.check_ops(t, &path, &mut 0)?;
        self.execute(t, &path, &mut 0, w)
    }

    fn execute(
        &mut self,
        t: &TxnRequest,
        path: &[bool],
        at: &mut usize,
        w: &mut TxnWrite,
    ) -> Result<TxnResponse, StoreError> {
        let succeeded = path[*at];
        *at += 1;
        let ops = if succeeded { &t.success } else { &t.failure };
        let mut responses = Vec::with_capacity(ops.len());
        for op in ops {
            responses.push(match op {
                RequestOp::Range(r) => ResponseOp::Range(self.range_in(r, Some(w))?),
                RequestOp::Put(p) => ResponseOp::Put(self.put(p, w)?),
                RequestOp::DeleteRange(d) => ResponseOp::DeleteRange(self.delete_range(d, w)?),
                RequestOp::Txn(inner) => ResponseOp::Txn(self.execute(inner, path, at, w)?),
            });
        }
        Ok(TxnResponse {
            succeeded,
            responses,
        })
    }

    fn view(&self, w: &TxnWrite) -> i64 {
        if w.sub > 0 { w.main } else { self.revision }
    }

    fn put(&mut self, p: &PutRequest, w: &mut TxnWrite) -> Result<PutResponse, StoreError> {
        let prev = match self.index.get(&p.key, self.view(w)) {
            Some(s) => Some(self.key_value(&p.key, s, Some(w))?),
            None => None,
        };
        let value = match (&prev, p.ignore_value) {
            (Some(prev), true) => prev.value.clone(),
            _ => p.value.clone(),
        };
        let lease = match (&prev, p.ignore_lease) {
            (Some(prev), true) => prev.lease,
            _ => p.lease,
        };
        let rev = w.next_rev();
        self.index.put(&p.key, rev);
        let state = self
            .index
            .get(&p.key, rev.main)
            .expect("invariant: just written");
        let record = Record::Put {
            create_main: state.created.main,
            create_sub: state.created.sub,
            version: state.version,
            lease,
            value: value.clone(),
        };
        let vk = versioned_key(&p.key, rev);
        w.batch
            .put_cf(backend::cf(&self.db, CF_KV), &vk, record.encode());
        w.overlay.insert(vk, record);
        if let Some(prev) = &prev
            && prev.lease != 0
            && prev.lease != lease
            && let Some(l) = self.leases.get_mut(&prev.lease)
        {
            l.keys.remove(&p.key);
        }
        if lease != 0
            && let Some(l) = self.leases.get_mut(&lease)
        {
            l.keys.insert(p.key.clone());
        }
        w.events.push(Event {
            kind: EventKind::Put,
            kv: KeyValue {
                key: p.key.clone(),
                create_revision: state.created.main,
                mod_revision: rev.main,
                version: state.version,
                value,
                lease,
            },
            prev_kv: prev.clone(),
        });
        Ok(PutResponse {
            prev_kv: if p.prev_kv { prev } else { None },
        })
    }

    fn delete_range(
        &mut self,
        d: &DeleteRangeRequest,
        w: &mut TxnWrite,
    ) -> Result<DeleteRangeResponse, StoreError> {
        let (items, _) = self.index.range(&d.key, &d.range_end, self.view(w), 0);
        let mut prev_kvs = Vec::new();
        let deleted = items.len() as i64;
        for (key, state) in items {
            let prev = self.key_value(&key, state, Some(w))?;
            let rev = w.next_rev();
            self.index
                .tombstone(&key, rev)
                .map_err(|_| StoreError::internal("tombstone of a key the index just listed"))?;
            let vk = versioned_key(&key, rev);
            w.batch.put_cf(
                backend::cf(&self.db, CF_KV),
                &vk,
                Record::Tombstone.encode(),
            );
            w.overlay.insert(vk, Record::Tombstone);
            if prev.lease != 0
                && let Some(l) = self.leases.get_mut(&prev.lease)
            {
                l.keys.remove(&key);
            }
            w.events.push(Event {
                kind: EventKind::Delete,
                kv: KeyValue {
                    key,
                    mod_revision: rev.main,
                    ..KeyValue::default()
                },
                prev_kv: Some(prev.clone()),
            });
            if d.prev_kv {
                prev_kvs.push(prev);
            }
        }
        Ok(DeleteRangeResponse { deleted, prev_kvs })
    }

    // ---- snapshots ----

    /// The keyspace as a snapshot payload, read entirely from one RocksDB snapshot of `db`
    /// (no lock needed: every applied entry is one write batch, so the snapshot sits between
    /// two entries), together with the raw values of `extra_meta` keys from the same snapshot
    /// (the Raft applied id and membership), so data and metadata always agree. Versions that
    /// compaction dropped but the background has not deleted yet are left out.
    pub fn snapshot_from(
        db: &DB,
        extra_meta: &[&[u8]],
    ) -> Result<(SnapshotPayload, RawMeta), StoreError> {
        let snap = db.snapshot();
        let meta_cf = backend::cf(db, CF_META);
        let read_i64 = |k: &[u8]| -> Result<i64, StoreError> {
            match snap.get_cf(meta_cf, k).map_err(io)? {
                Some(b) => backend::decode(&b).map_err(StoreError::internal),
                None => Ok(0),
            }
        };
        let alarms = match snap.get_cf(meta_cf, META_ALARMS).map_err(io)? {
            Some(b) => backend::decode(&b).map_err(StoreError::internal)?,
            None => Vec::new(),
        };
        let mut leases = Vec::new();
        for item in snap.iterator_cf(backend::cf(db, CF_LEASE), IteratorMode::Start) {
            let (k, v) = item.map_err(io)?;
            let id = i64::from_be_bytes(k.as_ref().try_into().map_err(StoreError::internal)?);
            let ttl = i64::from_be_bytes(v.as_ref().try_into().map_err(StoreError::internal)?);
            leases.push((id, ttl));
        }
        let compacted = read_i64(META_COMPACTED)?;
        let mut kv = Vec::new();
        // One key's versions at a time: which of them compaction dropped depends on its
        // whole history.
        let mut key_versions: Vec<(Revision, StoredVersion)> = Vec::new();
        let mut current: Option<Vec<u8>> = None;
        for item in snap.iterator_cf(backend::cf(db, CF_KV), IteratorMode::Start) {
            let (k, v) = item.map_err(io)?;
            let (key, rev) = split_versioned_key(&k)
                .ok_or_else(|| StoreError::internal("malformed versioned key in backend"))?;
            if let Some(done) = current.as_ref().filter(|c| **c != key) {
                keep_compacted(done, &mut key_versions, compacted, &mut kv)?;
            }
            current = Some(key);
            key_versions.push((rev, StoredVersion(k.to_vec(), v.to_vec())));
        }
        if let Some(last) = &current {
            keep_compacted(last, &mut key_versions, compacted, &mut kv)?;
        }
        let extra = extra_meta
            .iter()
            .map(|k| snap.get_cf(meta_cf, k).map_err(io))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((
            SnapshotPayload {
                revision: read_i64(META_REVISION)?,
                compacted,
                leases,
                alarms,
                kv,
            },
            extra,
        ))
    }

    /// Replaces the whole keyspace with a snapshot's; `meta` as in [`apply`](Self::apply).
    pub fn install(
        &mut self,
        payload: &SnapshotPayload,
        meta: &[(&[u8], Vec<u8>)],
    ) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        for name in [CF_KV, CF_LEASE] {
            let cf = backend::cf(&self.db, name);
            for item in self.db.iterator_cf(cf, IteratorMode::Start) {
                let (k, _) = item.map_err(io)?;
                batch.delete_cf(cf, k);
            }
        }
        let kv = backend::cf(&self.db, CF_KV);
        for StoredVersion(k, v) in &payload.kv {
            batch.put_cf(kv, k, v);
        }
        let lease = backend::cf(&self.db, CF_LEASE);
        for (id, ttl) in &payload.leases {
            batch.put_cf(lease, id.to_be_bytes(), ttl.to_be_bytes());
        }
        let meta_cf = backend::cf(&self.db, CF_META);
        batch.put_cf(meta_cf, META_REVISION, backend::encode(&payload.revision));
        batch.put_cf(meta_cf, META_COMPACTED, backend::encode(&payload.compacted));
        batch.put_cf(meta_cf, META_ALARMS, backend::encode(&payload.alarms));
        for (k, v) in meta {
            batch.put_cf(meta_cf, k, v);
        }
        self.db.write(batch).map_err(io)?;
        self.load()
    }
}

/// The state of one write transaction while it executes.
struct TxnWrite {
    main: i64,
    sub: i64,
    batch: WriteBatch,
    /// Versions written by this transaction, for reads before the batch commits.
    overlay: HashMap<Vec<u8>, Record>,
    events: Vec<Event>,
    /// Versioned keys a compaction dropped from the index, for the background to delete once
    /// the entry is committed.
    compacted: Vec<Vec<u8>>,
}

impl TxnWrite {
    fn new(revision: i64) -> Self {
        TxnWrite {
            main: revision + 1,
            sub: 0,
            batch: WriteBatch::default(),
            overlay: HashMap::new(),
            events: Vec::new(),
            compacted: Vec::new(),
        }
    }

    fn next_rev(&mut self) -> Revision {
        let r = Revision::new(self.main, self.sub);
        self.sub += 1;
        r
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

/// Moves the stored versions of `key` (`versions`, oldest first) into `out`, leaving out
/// those a compaction at `compacted` drops: the same rule as rebuilding the index on start-up.
fn keep_compacted(
    key: &[u8],
    versions: &mut Vec<(Revision, StoredVersion)>,
    compacted: i64,
    out: &mut Vec<StoredVersion>,
) -> Result<(), StoreError> {
    if compacted <= 0 {
        out.extend(versions.drain(..).map(|(_, v)| v));
        return Ok(());
    }
    let mut index = TreeIndex::default();
    for (rev, StoredVersion(_, v)) in versions.iter() {
        let record =
            Record::decode(v).ok_or_else(|| StoreError::internal("malformed record in backend"))?;
        restore(&mut index, key, *rev, &record);
    }
    let dropped: BTreeSet<Revision> = index
        .compact(compacted)
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    out.extend(
        versions
            .drain(..)
            .filter(|(rev, _)| !dropped.contains(rev))
            .map(|(_, v)| v),
    );
    Ok(())
}

fn txn_has_put(t: &TxnRequest) -> bool {
    fn ops_have_put(ops: &[RequestOp]) -> bool {
        ops.iter().any(|op| match op {
            RequestOp::Put(_) => true,
            RequestOp::Txn(t) => txn_has_put(t),
            _ => false,
        })
    }
    ops_have_put(&t.success) || ops_have_put(&t.failure)
}

fn cmd_has_put(cmd: &Command) -> bool {
    match cmd {
        Command::Txn(t) => txn_has_put(t),
        Command::Batch(ts) => ts.iter().any(txn_has_put),
        Command::LeaseGrant { .. } => true,
        _ => false,
    }
}

fn compare_one(c: &Compare, kv: &KeyValue) -> bool {
    use std::cmp::Ordering;
    let ord = match &c.target {
        CompareTarget::Version(v) => kv.version.cmp(v),
        CompareTarget::Create(v) => kv.create_revision.cmp(v),
        CompareTarget::Mod(v) => kv.mod_revision.cmp(v),
        CompareTarget::Lease(v) => kv.lease.cmp(v),
        CompareTarget::Value(v) => kv.value.as_slice().cmp(v.as_slice()),
    };
    match c.result {
        CompareResult::Equal => ord == Ordering::Equal,
        CompareResult::NotEqual => ord != Ordering::Equal,
        CompareResult::Greater => ord == Ordering::Greater,
        CompareResult::Less => ord == Ordering::Less,
    }
}

fn sort_kvs(kvs: &mut [KeyValue], target: SortTarget, descend: bool) {
    // Stable, so equal sort keys stay in key order as etcd's do.
    match target {
        SortTarget::Key => kvs.sort_by(|a, b| a.key.cmp(&b.key)),
        SortTarget::Version => kvs.sort_by_key(|kv| kv.version),
        SortTarget::Create => kvs.sort_by_key(|kv| kv.create_revision),
        SortTarget::Mod => kvs.sort_by_key(|kv| kv.mod_revision),
        SortTarget::Value => kvs.sort_by(|a, b| a.value.cmp(&b.value)),
    }
    if descend {
        kvs.reverse();
    }
}

#[cfg(test)]
mod tests;
