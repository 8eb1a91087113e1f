//! The Raft log, vote and committed log id in RocksDB.
//!
//! Entries live in the `log` column family under their index (big-endian, so iteration order is
//! log order). Appends and votes are written with `sync`: an entry is acknowledged to the leader
//! only once it is on disk, which is what makes an acknowledged write survive kill -9 of any
//! member. Purging deletes a prefix and records the last purged id first, so a crash between the
//! two leaves a consistent state.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{EntryPayload, OptionalSend, RaftLogReader, StorageIOError, Vote};
use rocksdb::{DB, Direction, IteratorMode, WriteBatch, WriteOptions};

use super::{Entry, LogId, StorageError, TypeConfig, io_error};
use crate::backend::{self, CF_LOG, CF_RAFT};
use crate::proposer::Proposals;

const VOTE: &[u8] = b"vote";
const COMMITTED: &[u8] = b"committed";
const PURGED: &[u8] = b"purged";

/// A restored member's log (see [`crate::backup`]): empty, purged up to `last`, which is
/// also committed.
pub(crate) fn write_purged(db: &DB, last: LogId) -> Result<(), crate::error::StoreError> {
    let cf = backend::cf(db, CF_RAFT);
    let mut batch = WriteBatch::default();
    batch.put_cf(cf, PURGED, backend::encode(&last));
    batch.put_cf(cf, COMMITTED, backend::encode(&Some(last)));
    db.write_opt(batch, &synced())
        .map_err(crate::error::StoreError::internal)
}

/// The id of the last entry in the log (or of the last purged one, when a snapshot took them
/// all): what a candidate's log is compared by.
pub(crate) fn last_log_id(db: &DB) -> Result<Option<LogId>, StorageError> {
    let mut it = db.iterator_cf(backend::cf(db, CF_LOG), IteratorMode::End);
    let last = match it.next() {
        Some(item) => {
            let (_, v) = item.map_err(read_err)?;
            let e: Entry = backend::decode(&v).map_err(read_err)?;
            Some(e.log_id)
        }
        None => None,
    };
    // A purge may reach past the last entry (after installing a snapshot).
    Ok(last.max(read_purged(db)?))
}

/// The last purged log id (none: nothing purged), before the log store is opened.
pub(crate) fn read_purged(db: &DB) -> Result<Option<LogId>, StorageError> {
    raft_meta(db, PURGED)
}

/// The value of `key` in the `raft` column family.
fn raft_meta<T: serde::de::DeserializeOwned>(
    db: &DB,
    key: &[u8],
) -> Result<Option<T>, StorageError> {
    match db.get_cf(backend::cf(db, CF_RAFT), key).map_err(read_err)? {
        Some(b) => backend::decode(&b).map(Some).map_err(read_err),
        None => Ok(None),
    }
}

#[derive(Debug, Clone)]
pub struct LogStore {
    db: Arc<DB>,
    /// This process's waiting proposals, told where their entries were appended.
    proposals: Arc<Proposals>,
    /// Synced appends are timed, and the committed index noted, here.
    metrics: crate::metrics::StoreMetrics,
}

fn synced() -> WriteOptions {
    let mut o = WriteOptions::default();
    o.set_sync(true);
    o
}

fn read_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::read_logs(&io_error(e)).into()
}

fn write_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_logs(&io_error(e)).into()
}

impl LogStore {
    pub fn new(db: Arc<DB>, proposals: Arc<Proposals>) -> Self {
        LogStore {
            db,
            proposals,
            metrics: crate::metrics::StoreMetrics::default(),
        }
    }

    /// The same, timing its synced appends into `metrics`.
    pub fn with_metrics(mut self, metrics: crate::metrics::StoreMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    fn get_meta<T: serde::de::DeserializeOwned>(
        &self,
        key: &[u8],
    ) -> Result<Option<T>, StorageError> {
        raft_meta(&self.db, key)
    }
}

/// The most bytes of entries one AppendEntries carries (at least one entry, whatever its size).
/// openraft 0.9 gives every AppendEntries one heartbeat interval to be answered, and a follower
/// that is behind is sent as many entries as `max_payload_entries` allows: 512 entries of
/// batched writes (a CreateMany of 64 events, a Bind of 1,000 pods) took longer than that to
/// send and append, timed out, were sent again, and the follower never caught up while the
/// leader spent its CPU encoding them over and over.
const MAX_PAYLOAD_BYTES: usize = 1 << 20;

impl LogStore {
    /// Entries from `start` on while `more(index, bytes so far)` holds.
    fn read_entries(
        &self,
        start: u64,
        mut more: impl FnMut(u64, usize) -> bool,
    ) -> Result<Vec<Entry>, StorageError> {
        let mut out = Vec::new();
        let mut bytes = 0;
        let it = self.db.iterator_cf(
            backend::cf(&self.db, CF_LOG),
            IteratorMode::From(&start.to_be_bytes(), Direction::Forward),
        );
        for item in it {
            let (k, v) = item.map_err(read_err)?;
            let index = u64::from_be_bytes(k.as_ref().try_into().map_err(read_err)?);
            if !more(index, bytes) {
                break;
            }
            bytes += v.len();
            out.push(backend::decode(&v).map_err(read_err)?);
        }
        Ok(out)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    /// What replication sends: up to [`MAX_PAYLOAD_BYTES`] of the range, at least one entry.
    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError> {
        self.read_entries(start, |index, bytes| {
            index < end && (index == start || bytes < MAX_PAYLOAD_BYTES)
        })
    }

    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i + 1,
            Bound::Unbounded => 0,
        };
        self.read_entries(start, |index, _| range.contains(&index))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        Ok(LogState {
            last_purged_log_id: self.get_meta(PURGED)?,
            last_log_id: last_log_id(&self.db)?,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError> {
        self.db
            .put_cf_opt(
                backend::cf(&self.db, CF_RAFT),
                VOTE,
                backend::encode(vote),
                &synced(),
            )
            .map_err(|e| StorageIOError::write_vote(&io_error(e)).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError> {
        self.get_meta(VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        if let Some(c) = committed {
            self.metrics.committed(c.index);
        }
        // Not synced: a lost committed id only means re-applying from the last applied one.
        self.db
            .put_cf(
                backend::cf(&self.db, CF_RAFT),
                COMMITTED,
                backend::encode(&committed),
            )
            .map_err(write_err)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.get_meta::<Option<LogId>>(COMMITTED)?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let cf = backend::cf(&self.db, CF_LOG);
        let mut batch = WriteBatch::default();
        let mut proposed = Vec::new();
        let mut end = None;
        for e in entries {
            end = Some(e.log_id.index);
            batch.put_cf(cf, e.log_id.index.to_be_bytes(), backend::encode(&e));
            if let EntryPayload::Normal(p) = &e.payload {
                proposed.push((p.id, e.log_id.index));
            }
        }
        let started = std::time::Instant::now();
        let res = self.db.write_opt(batch, &synced());
        self.metrics
            .wal_fsync
            .observe(started.elapsed().as_secs_f64());
        // Before the callback: once openraft hears of the append it may overwrite the entry
        // and answer ForwardToLeader, and the proposal must know by then that it was appended.
        // (A failed write stops Raft, and with it every proposal.)
        if res.is_ok() {
            for (id, index) in &proposed {
                self.proposals.appended(id, *index);
            }
            if let Some(end) = end {
                self.proposals.log_reaches(end);
            }
        }
        let failed = res.as_ref().err().map(|e| e.to_string());
        callback.log_io_completed(res.map_err(io_error));
        match failed {
            Some(e) => Err(write_err(e)),
            None => Ok(()),
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let cf = backend::cf(&self.db, CF_LOG);
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(cf, log_id.index.to_be_bytes(), u64::MAX.to_be_bytes());
        batch.delete_cf(cf, u64::MAX.to_be_bytes());
        self.db.write_opt(batch, &synced()).map_err(write_err)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // The marker and the deletion in one synced batch: after a crash the log state never
        // shows entries gone without the marker, nor the marker without its deletion.
        let mut batch = WriteBatch::default();
        batch.put_cf(
            backend::cf(&self.db, CF_RAFT),
            PURGED,
            backend::encode(&log_id),
        );
        batch.delete_range_cf(
            backend::cf(&self.db, CF_LOG),
            0u64.to_be_bytes(),
            (log_id.index + 1).to_be_bytes(),
        );
        self.db.write_opt(batch, &synced()).map_err(write_err)
    }
}
