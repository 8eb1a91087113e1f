//! The Raft log, vote and committed log id in RocksDB.
//!
//! Entries live in the `log` column family under their index (big-endian, so iteration order is
//! log order). An append is reported flushed to openraft only once it is on disk: a follower
//! acknowledges entries to the leader only after that, and the leader counts itself toward a
//! commit only after that, which is what makes an acknowledged write survive kill -9 of any
//! member. A follower's append is a synced write (Raft's core waits for it). The leader's is
//! written without `sync`, readable at once, and reported flushed by the [`Flusher`] once it
//! has synced the write-ahead log; meanwhile the leader's replication sends the entries (our
//! openraft patch, `vendor/README.md`). Votes, truncations and purges are written with `sync`.
//! The committed log id is not written on its own: it rides on the log's next write.
//! Purging deletes a prefix and records the last purged id first, so a crash between the two
//! leaves a consistent state.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{EntryPayload, OptionalSend, RaftLogReader, StorageIOError, Vote};
use rocksdb::{DB, Direction, IteratorMode, WriteBatch, WriteOptions};

use super::{Entry, LogId, StorageError, TypeConfig, io_error};
use crate::backend::{self, CF_LOG, CF_RAFT};
use crate::proposals::Proposals;

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
    /// The committed index is noted here.
    metrics: crate::metrics::StoreMetrics,
    flusher: Arc<Flusher>,
    /// The committed id openraft last saved, not yet written: it rides on the log's next
    /// write (see `save_committed` below).
    unsaved_committed: Option<LogId>,
    /// The newest entries, shared with every reader clone (see [`Recent`]).
    recent: Arc<parking_lot::Mutex<Recent>>,
}

/// The log's newest entries, as appended, so replication and apply read what was just
/// written without reading it back from RocksDB and decoding it again: on the leader every
/// entry is read once per follower and once more to apply it. Each is held with its
/// encoding as written, which the leader sends to its followers as it is (see
/// [`HeldEncodings`]). It holds a contiguous run of entries that ends at the log's last
/// entry (every append, truncation and purge goes through it), or nothing: after a start,
/// until the first append. A read that starts before its first entry goes to RocksDB.
#[derive(Debug, Default)]
struct Recent {
    /// Each with its encoding.
    entries: std::collections::VecDeque<(Entry, Arc<Vec<u8>>)>,
    /// The encodings' buffers, in bytes (their capacity: what they hold in memory).
    bytes: usize,
}

/// The most bytes of encodings [`Recent`] holds (the decoded entries beside them take about
/// as much again): a second or two of writes at full load; older entries leave first.
const RECENT_BYTES: usize = 16 << 20;

impl Recent {
    fn pop_front(&mut self) {
        if let Some((_, encoded)) = self.entries.pop_front() {
            self.bytes -= encoded.capacity();
        }
    }

    /// The encoding of the entry with `log_id`, when it is held.
    fn encoding(&self, log_id: &LogId) -> Option<Arc<Vec<u8>>> {
        let first = self.entries.front()?.0.log_id.index;
        let at = usize::try_from(log_id.index.checked_sub(first)?).ok()?;
        let (e, encoded) = self.entries.get(at)?;
        // Raft's log matching: an entry with the same index and term is the same entry.
        (e.log_id == *log_id).then(|| encoded.clone())
    }

    /// Entries appended after the last held (or, if they do not follow it, in its place).
    fn appended(&mut self, entries: Vec<(Entry, Arc<Vec<u8>>)>) {
        let Some((first, _)) = entries.first() else {
            return;
        };
        let follows = self
            .entries
            .back()
            .is_some_and(|(last, _)| last.log_id.index + 1 == first.log_id.index);
        if !follows {
            self.entries.clear();
            self.bytes = 0;
        }
        for (e, encoded) in entries {
            self.bytes += encoded.capacity();
            self.entries.push_back((e, encoded));
        }
        while self.bytes > RECENT_BYTES && self.entries.len() > 1 {
            self.pop_front();
        }
    }

    /// Entries from `index` on are gone.
    fn truncated(&mut self, index: u64) {
        while let Some((last, encoded)) = self.entries.back() {
            if last.log_id.index < index {
                break;
            }
            self.bytes -= encoded.capacity();
            self.entries.pop_back();
        }
    }

    /// Entries up to `index` are gone.
    fn purged(&mut self, index: u64) {
        while self
            .entries
            .front()
            .is_some_and(|(first, _)| first.log_id.index <= index)
        {
            self.pop_front();
        }
    }

    /// As [`LogStore::read_entries`], when the run holds `start`; `None` when it does not.
    fn read(&self, start: u64, mut more: impl FnMut(u64, usize) -> bool) -> Option<Vec<Entry>> {
        let first = self.entries.front()?.0.log_id.index;
        if start < first {
            return None;
        }
        let skip = usize::try_from(start - first).ok()?;
        let mut out = Vec::new();
        let mut bytes = 0;
        for (e, encoded) in self.entries.iter().skip(skip) {
            if !more(e.log_id.index, bytes) {
                break;
            }
            bytes += encoded.len();
            out.push(e.clone());
        }
        Some(out)
    }
}

/// The encodings of the log's newest entries, for the leader's replication: an
/// AppendEntries is encoded with each entry's bytes as the log store wrote them, not
/// encoded again for every follower. A handle on the [`LogStore`]'s held run.
#[derive(Debug, Clone, Default)]
pub struct HeldEncodings(Arc<parking_lot::Mutex<Recent>>);

impl HeldEncodings {
    /// `rpc` encoded exactly as [`backend::encode`] encodes it: the request's fields in
    /// their order (`vote`, `prev_log_id`, `entries`, `leader_commit`), the entries as a
    /// length and then each entry, held ones copied from their encoding.
    pub fn encode_append_entries(
        &self,
        rpc: &openraft::raft::AppendEntriesRequest<TypeConfig>,
    ) -> Vec<u8> {
        if rpc.entries.is_empty() {
            return backend::encode(rpc);
        }
        let held: Vec<Option<Arc<Vec<u8>>>> = {
            let recent = self.0.lock();
            rpc.entries
                .iter()
                .map(|e| recent.encoding(&e.log_id))
                .collect()
        };
        let size: usize = held.iter().flatten().map(|b| b.len()).sum();
        let mut out = Vec::with_capacity(size + 64);
        backend::encode_into(&rpc.vote, &mut out);
        backend::encode_into(&rpc.prev_log_id, &mut out);
        backend::encode_into(&(rpc.entries.len() as u64), &mut out);
        for (e, encoded) in rpc.entries.iter().zip(held) {
            match encoded {
                Some(bytes) => out.extend_from_slice(&bytes),
                None => backend::encode_into(e, &mut out),
            }
        }
        backend::encode_into(&rpc.leader_commit, &mut out);
        out
    }
}

/// Syncs the write-ahead log under appends written without `sync`, then reports each of them
/// flushed, in the order they were written. Appends that arrive during a sync share the next
/// one. Its thread ends when the last [`LogStore`] clone is dropped, and the drop waits for
/// it: a thread still syncing (or closing the database) as the process exits runs into
/// RocksDB's statics being torn down ("pthread lock: Invalid argument", an abort).
struct Flusher<F = LogFlushed<TypeConfig>> {
    tx: Option<std::sync::mpsc::Sender<F>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<F> Drop for Flusher<F> {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl<F> Debug for Flusher<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flusher").finish_non_exhaustive()
    }
}

/// What the [`Flusher`] reports to: openraft's callback (and a test's).
trait Flushed: Send + 'static {
    fn flushed(self, result: Result<(), std::io::Error>);
}

impl Flushed for LogFlushed<TypeConfig> {
    fn flushed(self, result: Result<(), std::io::Error>) {
        self.log_io_completed(result);
    }
}

impl<F: Flushed> Flusher<F> {
    fn start(db: Arc<DB>, metrics: crate::metrics::StoreMetrics) -> Arc<Self> {
        let (tx, rx) = std::sync::mpsc::channel::<F>();
        let spawned = std::thread::Builder::new()
            .name("raft-log-sync".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut waiting = vec![first];
                    waiting.extend(rx.try_iter());
                    let started = std::time::Instant::now();
                    let res = db.flush_wal(true);
                    metrics.wal_fsync.observe(started.elapsed().as_secs_f64());
                    for f in waiting {
                        f.flushed(res.as_ref().map(|_| ()).map_err(io_error));
                    }
                }
            });
        let thread = match spawned {
            Ok(thread) => Some(thread),
            Err(e) => {
                // Without the thread every append reports its failure (see `flushed_after`).
                tracing::error!(error = %e, "starting the Raft log's sync thread");
                None
            }
        };
        Arc::new(Flusher {
            tx: Some(tx),
            thread,
        })
    }

    /// Reports to `f` once everything written so far is on disk.
    fn flushed_after(&self, f: F) {
        let sent = match &self.tx {
            Some(tx) => tx.send(f).map_err(|std::sync::mpsc::SendError(f)| f),
            None => Err(f),
        };
        if let Err(f) = sent {
            f.flushed(Err(io_error("the Raft log's sync thread has ended")));
        }
    }
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
    /// A log store timing its log syncs into `metrics` (and noting the committed index there).
    pub fn new(
        db: Arc<DB>,
        proposals: Arc<Proposals>,
        metrics: crate::metrics::StoreMetrics,
    ) -> Self {
        LogStore {
            flusher: Flusher::start(db.clone(), metrics.clone()),
            db,
            proposals,
            metrics,
            unsaved_committed: None,
            recent: Arc::default(),
        }
    }

    /// The encodings of the entries this store holds, for replication.
    pub fn held_encodings(&self) -> HeldEncodings {
        HeldEncodings(self.recent.clone())
    }

    /// Puts the committed id saved since the last write of the log into `batch`.
    fn carry_committed(&mut self, batch: &mut WriteBatch) {
        if let Some(c) = self.unsaved_committed.take() {
            batch.put_cf(
                backend::cf(&self.db, CF_RAFT),
                COMMITTED,
                backend::encode(&Some(c)),
            );
        }
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
        if let Some(held) = self.recent.lock().read(start, &mut more) {
            return Ok(held);
        }
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

    /// Kept in memory and written with the log's next write (an append, a truncation, a
    /// purge), not on its own. openraft saves the committed id before it applies what was
    /// committed, so a write of its own stood between every commit and its answer, on the
    /// leader and on each follower. The id written lags by at most the writes since, and a
    /// lagging one is safe: a committed id is only a hint for what to apply again at start
    /// (openraft takes the state machine's applied id when that is later), and a member
    /// learns the rest from its leader.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        if let Some(c) = committed {
            self.metrics.committed(c.index);
            self.unsaved_committed = Some(c);
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        let saved = self.get_meta::<Option<LogId>>(COMMITTED)?.flatten();
        Ok(saved.max(self.unsaved_committed))
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
        let mut batch = WriteBatch::default();
        self.carry_committed(&mut batch);
        let cf = backend::cf(&self.db, CF_LOG);
        let mut proposed = Vec::new();
        let mut end = None;
        let mut written = Vec::new();
        for e in entries {
            end = Some(e.log_id.index);
            let bytes = backend::encode(&e);
            batch.put_cf(cf, e.log_id.index.to_be_bytes(), &bytes);
            if let EntryPayload::Normal(p) = &e.payload {
                proposed.push((p.id, e.log_id.index));
            }
            written.push((e, Arc::new(bytes)));
        }
        // A follower's append is synced here: Raft's core waits for it anyway. The leader's is
        // written without `sync` and the flusher reports it flushed once it has synced the
        // write-ahead log; written, the entries are readable at once, so the leader's
        // replication sends them while they are being synced.
        let core_waits = callback.core_waits();
        let res = if core_waits {
            let started = std::time::Instant::now();
            let res = self.db.write_opt(batch, &synced());
            self.metrics
                .wal_fsync
                .observe(started.elapsed().as_secs_f64());
            res
        } else {
            self.db.write(batch)
        };
        // Before openraft hears of the append: it may then overwrite the entry and answer
        // ForwardToLeader, and the proposal must know by then that it was appended. (A failed
        // write stops Raft, and with it every proposal.)
        if let Err(e) = res {
            let e = e.to_string();
            callback.log_io_completed(Err(io_error(&e)));
            return Err(write_err(e));
        }
        self.recent.lock().appended(written);
        for (id, index) in &proposed {
            self.proposals.appended(id, *index);
        }
        if let Some(end) = end {
            self.proposals.log_reaches(end);
        }
        if core_waits {
            callback.log_io_completed(Ok(()));
        } else {
            self.flusher.flushed_after(callback);
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        self.carry_committed(&mut batch);
        let cf = backend::cf(&self.db, CF_LOG);
        batch.delete_range_cf(cf, log_id.index.to_be_bytes(), u64::MAX.to_be_bytes());
        batch.delete_cf(cf, u64::MAX.to_be_bytes());
        // Out of the held run first: a reader must not be served what the log no longer
        // has, even while the deletion is being written.
        self.recent.lock().truncated(log_id.index);
        self.db.write_opt(batch, &synced()).map_err(write_err)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // The marker and the deletion in one synced batch: after a crash the log state never
        // shows entries gone without the marker, nor the marker without its deletion.
        let mut batch = WriteBatch::default();
        self.carry_committed(&mut batch);
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
        self.recent.lock().purged(log_id.index);
        self.db.write_opt(batch, &synced()).map_err(write_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Report(u32, std::sync::mpsc::Sender<(u32, bool)>);

    impl Flushed for Report {
        fn flushed(self, result: Result<(), std::io::Error>) {
            let _ = self.1.send((self.0, result.is_ok()));
        }
    }

    fn blank(index: u64) -> Entry {
        Entry {
            log_id: openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    proptest::proptest! {
        /// The held run answers every read it takes exactly as the log would, through any
        /// sequence of appends (following, or overwriting a suffix), truncations and purges,
        /// and its byte count stays the sum of what it holds.
        #[test]
        fn the_held_run_reads_as_the_log_does(
            ops in proptest::collection::vec((0u8..4, 0u64..40, 1usize..5), 1..60)
        ) {
            let mut recent = Recent::default();
            let mut log = std::collections::BTreeMap::<u64, usize>::new();
            for (op, at, n) in ops {
                match op {
                    0 | 1 => {
                        // Append n entries at the end (op 0), or from `at` on, replacing
                        // what follows it, as a follower's conflicting append does (op 1).
                        let start = match (op, log.keys().next_back()) {
                            (0, Some(last)) => last + 1,
                            _ => at,
                        };
                        log.retain(|i, _| *i < start);
                        let batch: Vec<(Entry, Arc<Vec<u8>>)> = (start..start + n as u64)
                            .map(|i| (blank(i), Arc::new(vec![i as u8; 10 + i as usize])))
                            .collect();
                        for (e, encoded) in &batch {
                            log.insert(e.log_id.index, encoded.len());
                        }
                        recent.truncated(start);
                        recent.appended(batch);
                        proptest::prop_assert!(
                            recent.read(start, |_, _| true).is_some(),
                            "what was just appended is held"
                        );
                    }
                    2 => {
                        log.retain(|i, _| *i < at);
                        recent.truncated(at);
                    }
                    _ => {
                        log.retain(|i, _| *i > at);
                        recent.purged(at);
                    }
                }
                proptest::prop_assert_eq!(
                    recent.bytes,
                    recent.entries.iter().map(|(_, e)| e.capacity()).sum::<usize>()
                );
                // An entry's encoding is held exactly while the entry is, and only under
                // its own log id.
                let first = recent.entries.front().map(|(e, _)| e.log_id.index);
                for i in 0..45 {
                    let encoding = recent.encoding(&blank(i).log_id);
                    let held = first.is_some_and(|f| i >= f) && log.contains_key(&i);
                    proptest::prop_assert_eq!(encoding.is_some(), held, "entry {}", i);
                    if let Some(bytes) = encoding {
                        proptest::prop_assert_eq!(bytes.len(), log[&i]);
                    }
                    let other_term =
                        openraft::LogId::new(openraft::CommittedLeaderId::new(2, 1), i);
                    proptest::prop_assert!(recent.encoding(&other_term).is_none());
                }
                for start in 0..45 {
                    let Some(held) = recent.read(start, |i, bytes| i < start + 3 || bytes < 30) else {
                        continue;
                    };
                    let mut want = Vec::new();
                    let mut bytes = 0;
                    for (&i, size) in log.range(start..) {
                        if !(i < start + 3 || bytes < 30) {
                            break;
                        }
                        bytes += size;
                        want.push(i);
                    }
                    let got: Vec<u64> = held.iter().map(|e| e.log_id.index).collect();
                    proptest::prop_assert_eq!(got, want, "read from {}", start);
                }
            }
        }
    }

    /// Every append handed to the flusher is reported, once, in the order it was handed over,
    /// also when many arrive during one sync.
    #[test]
    fn the_flusher_reports_every_append_once_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = backend::open(&dir.path().join("db")).expect("open backend");
        let flusher = Flusher::<Report>::start(db.clone(), Default::default());
        let (tx, rx) = std::sync::mpsc::channel();
        for i in 0..500u32 {
            db.put_cf(backend::cf(&db, CF_LOG), u64::from(i).to_be_bytes(), b"e")
                .expect("write");
            flusher.flushed_after(Report(i, tx.clone()));
        }
        let reports: Vec<(u32, bool)> = (0..500)
            .map(|_| {
                rx.recv_timeout(std::time::Duration::from_secs(30))
                    .expect("reported")
            })
            .collect();
        assert_eq!(reports, (0..500).map(|i| (i, true)).collect::<Vec<_>>());
    }

    /// An AppendEntries encoded from the held encodings is byte for byte what encoding the
    /// request whole gives, whether its entries are held, not held, or held under another
    /// term (a follower's log being overwritten), so a follower of any release decodes it.
    #[test]
    fn an_append_entries_from_held_encodings_encodes_as_the_request_does() {
        use crate::command::{Command, Proposal, ProposalId, PutRequest, RequestOp, TxnRequest};
        let put = |term: u64, index: u64| Entry {
            log_id: openraft::LogId::new(openraft::CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(Proposal {
                id: ProposalId {
                    member: 1,
                    boot: 7,
                    seq: index,
                },
                command: Arc::new(Command::Batch(
                    (0..3)
                        .map(|k| {
                            TxnRequest::single(RequestOp::Put(PutRequest {
                                key: format!("k{index}/{k}").into_bytes(),
                                value: vec![b'v'; 100 + k],
                                ..PutRequest::default()
                            }))
                        })
                        .collect(),
                )),
            }),
        };
        // Entry 7 is a blank one (a new leader's first): an entry is the same wherever its
        // log id is, and the requests below keep to that, as Raft does.
        let recent = Arc::new(parking_lot::Mutex::new(Recent::default()));
        recent.lock().appended(
            (5..10)
                .map(|i| {
                    let e = if i == 7 { blank(i) } else { put(1, i) };
                    let bytes = Arc::new(backend::encode(&e));
                    (e, bytes)
                })
                .collect(),
        );
        let held = HeldEncodings(recent);
        for entries in [
            vec![],
            (5..10)
                .map(|i| if i == 7 { blank(i) } else { put(1, i) })
                .collect(),
            (3..12)
                .map(|i| if i == 7 { blank(i) } else { put(1, i) })
                .collect(),
            (6..9).map(|i| put(2, i)).collect(),
        ] {
            let rpc = openraft::raft::AppendEntriesRequest::<TypeConfig> {
                vote: Vote::new_committed(2, 1),
                prev_log_id: Some(openraft::LogId::new(
                    openraft::CommittedLeaderId::new(1, 1),
                    4,
                )),
                entries,
                leader_commit: Some(openraft::LogId::new(
                    openraft::CommittedLeaderId::new(1, 1),
                    6,
                )),
            };
            let (got, want) = (held.encode_append_entries(&rpc), backend::encode(&rpc));
            assert!(
                got == want,
                "{} entries encode differently",
                rpc.entries.len()
            );
        }
    }
}
