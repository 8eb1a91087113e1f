//! The Raft log: its entries in segment files ([`super::wal`]), the vote, committed and purged
//! ids in RocksDB's `raft` column family.
//!
//! An append is reported flushed to openraft only once it is on disk: a follower
//! acknowledges entries to the leader only after that, and the leader counts itself toward a
//! commit only after that, which is what makes an acknowledged write survive kill -9 of any
//! member. A follower's append is written and synced at once (Raft's core waits for it). The
//! leader's is written without syncing, readable at once, and reported flushed by the
//! [`Flusher`] once it has synced the newest segment; meanwhile the leader's replication sends
//! the entries (our openraft patch, `vendor/README.md`). Votes and truncations are synced. The
//! committed log id is not written on its own: it rides on the next vote or purge.
//! Purging records the last purged id first, synced (which makes every state-machine write
//! before it durable too: the keyspace shares RocksDB's WAL with it), and then deletes the
//! segments behind it, so a crash between the two leaves a consistent state.
//!
//! A member's database in format 2 held the entries in RocksDB's `log` family: opening the log
//! moves them into segment files and stamps the current format, in that order, so a member
//! stopped halfway moves them again.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{EntryPayload, OptionalSend, RaftLogReader, StorageIOError, Vote};
use rocksdb::{DB, IteratorMode, WriteBatch, WriteOptions};

use super::wal::Segments;

/// The directory of the log's segment files, in a member's data directory.
pub const LOG_DIR: &str = "raft-log";
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

/// The log's last id, for answering PreVotes (see `member::election`).
#[derive(Debug, Clone)]
pub struct LogTail(Arc<parking_lot::Mutex<Segments>>);

impl LogTail {
    /// The id of the last entry in the log (or of the last purged one, when a snapshot took
    /// them all): what a candidate's log is compared by.
    pub(crate) fn last_log_id(&self) -> Option<LogId> {
        self.0.lock().last_log_id()
    }
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
    /// The entries, shared with every reader clone.
    log: Arc<parking_lot::Mutex<Segments>>,
    /// This process's waiting proposals, told where their entries were appended.
    proposals: Arc<Proposals>,
    /// The committed index is noted here.
    metrics: crate::metrics::StoreMetrics,
    flusher: Arc<Flusher>,
    /// The committed id openraft last saved, not yet written: it rides on the next vote or
    /// purge (see `save_committed` below).
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
/// until the first append. A read that starts before its first entry goes to the segment
/// files.
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

/// Syncs the newest segment under appends written without syncing, then reports each of them
/// flushed, in the order they were written (an older segment was synced before the next was
/// begun). Appends that arrive during a sync share the next one. Its thread ends when the last
/// [`LogStore`] clone is dropped, and the drop waits for it: a thread still syncing as the
/// process exits would report to a Raft that is gone.
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
    fn start(
        sync: impl Fn() -> std::io::Result<()> + Send + 'static,
        metrics: crate::metrics::StoreMetrics,
    ) -> Arc<Self> {
        let (tx, rx) = std::sync::mpsc::channel::<F>();
        let spawned = std::thread::Builder::new()
            .name("raft-log-sync".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut waiting = vec![first];
                    waiting.extend(rx.try_iter());
                    let started = std::time::Instant::now();
                    let res = sync();
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

fn other(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// Moves a format-2 database's entries from the `log` family into segment files in `dir`
/// (anything there is from a move that was interrupted, and is written again), then deletes
/// them from the family and stamps the current format, synced.
fn move_log_family(db: &DB, dir: &Path, purged: Option<LogId>) -> std::io::Result<()> {
    let context = |e: std::io::Error| {
        std::io::Error::new(
            e.kind(),
            format!(
                "moving a format-{} database's Raft log into {}: {e}",
                backend::LOG_IN_FAMILY,
                dir.display()
            ),
        )
    };
    // Emptied, not removed: it may be a link to another disk.
    if dir.exists() {
        for item in std::fs::read_dir(dir).map_err(context)? {
            let path = item.map_err(context)?.path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path).map_err(context)?;
            } else {
                std::fs::remove_file(&path).map_err(context)?;
            }
        }
    }
    let mut log = Segments::open(dir, purged).map_err(context)?;
    let cf = backend::cf(db, CF_LOG);
    let mut moved = 0u64;
    let mut batch: Vec<(LogId, Box<[u8]>)> = Vec::new();
    let mut iter = db.iterator_cf(cf, IteratorMode::Start).peekable();
    while let Some(item) = iter.next() {
        let (_, bytes) = item.map_err(other)?;
        let e: Entry = backend::decode(&bytes).map_err(other)?;
        batch.push((e.log_id, bytes));
        if batch.len() == 1024 || iter.peek().is_none() {
            log.append(batch.iter().map(|(id, b)| (*id, &b[..])))
                .map_err(context)?;
            moved += batch.len() as u64;
            batch.clear();
        }
    }
    if let Some(file) = log.newest_file() {
        file.sync_data().map_err(context)?;
    }
    let mut done = WriteBatch::default();
    done.delete_range_cf(cf, 0u64.to_be_bytes(), u64::MAX.to_be_bytes());
    done.delete_cf(cf, u64::MAX.to_be_bytes());
    backend::stamp_format(db, &mut done);
    db.write_opt(done, &synced()).map_err(other)?;
    // The deletion frees nothing until the family's files are compacted away.
    db.compact_range_cf(cf, None::<&[u8]>, None::<&[u8]>);
    tracing::info!(
        entries = moved,
        dir = %dir.display(),
        "moved the Raft log's entries from RocksDB into segment files"
    );
    Ok(())
}

impl LogStore {
    /// Opens the log whose entries are in `dir` and whose metadata is in `db`, timing its log
    /// syncs into `metrics` (and noting the committed index there).
    pub fn open(
        db: Arc<DB>,
        dir: &Path,
        proposals: Arc<Proposals>,
        metrics: crate::metrics::StoreMetrics,
    ) -> std::io::Result<Self> {
        let purged = read_purged(&db).map_err(other)?;
        if backend::format(&db).map_err(other)? == backend::LOG_IN_FAMILY {
            move_log_family(&db, dir, purged)?;
        } else if !dir.exists()
            && (purged.is_some() || raft_meta::<Vote<u64>>(&db, VOTE).map_err(other)?.is_some())
        {
            // The database has voted or purged, so it had a log: starting with an empty one
            // would forget entries this member acknowledged.
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "the Raft log's directory {} is missing, and the database beside it holds a \
                     member's vote: restore it (a disk not mounted?), or start this member in an \
                     empty --data-dir and let it catch up from the cluster",
                    dir.display()
                ),
            ));
        }
        let log = Arc::new(parking_lot::Mutex::new(Segments::open(dir, purged)?));
        let newest = log.clone();
        let sync = move || {
            // Not synced under the lock: appends go on meanwhile. Every append handed over
            // before is in this file, or in an older one synced as the next was begun.
            let file = newest.lock().newest_file();
            file.map_or(Ok(()), |f| f.sync_data())
        };
        Ok(LogStore {
            flusher: Flusher::start(sync, metrics.clone()),
            db,
            log,
            proposals,
            metrics,
            unsaved_committed: None,
            recent: Arc::default(),
        })
    }

    /// The encodings of the entries this store holds, for replication.
    pub fn held_encodings(&self) -> HeldEncodings {
        HeldEncodings(self.recent.clone())
    }

    /// The log's last id, as it changes.
    pub fn tail(&self) -> LogTail {
        LogTail(self.log.clone())
    }

    /// Puts the committed id saved since the last write of it into `batch`.
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
        self.log.lock().read(start, more).map_err(read_err)
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
        // The segments hold the purged id as recorded (read at open, kept at each purge).
        let log = self.log.lock();
        Ok(LogState {
            last_purged_log_id: log.purged(),
            last_log_id: log.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        self.carry_committed(&mut batch);
        batch.put_cf(backend::cf(&self.db, CF_RAFT), VOTE, backend::encode(vote));
        self.db
            .write_opt(batch, &synced())
            .map_err(|e| StorageIOError::write_vote(&io_error(e)).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError> {
        self.get_meta(VOTE)
    }

    /// Kept in memory and written with the next vote or purge, not on its own. openraft
    /// saves the committed id before it applies what was committed, so a write of its own
    /// would stand between every commit and its answer, on the leader and on each follower.
    /// A lagging id is safe: a committed id is only a hint for what to apply again at start
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
        let mut proposed = Vec::new();
        let mut end = None;
        let mut written = Vec::new();
        for e in entries {
            end = Some(e.log_id.index);
            let bytes = backend::encode(&e);
            if let EntryPayload::Normal(p) = &e.payload {
                proposed.push((p.id, e.log_id.index));
            }
            written.push((e, Arc::new(bytes)));
        }
        // A follower's append is synced here: Raft's core waits for it anyway. The leader's is
        // written without syncing and the flusher reports it flushed once it has synced it;
        // written, the entries are readable at once, so the leader's replication sends them
        // while they are being synced.
        let core_waits = callback.core_waits();
        let res = {
            let mut log = self.log.lock();
            let res = log
                .append(written.iter().map(|(e, b)| (e.log_id, b.as_slice())))
                .map(|()| log.newest_file());
            // Entries the purge reached were skipped (see `Segments::append`).
            let purged = log.purged().map(|p| p.index);
            written.retain(|(e, _)| Some(e.log_id.index) > purged);
            res
        };
        let res = match res {
            Ok(Some(file)) if core_waits => {
                let started = std::time::Instant::now();
                let res = file.sync_data();
                self.metrics
                    .wal_fsync
                    .observe(started.elapsed().as_secs_f64());
                res
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
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
        // Out of the held run first: a reader must not be served what the log no longer
        // has, even while the deletion is being written.
        self.recent.lock().truncated(log_id.index);
        self.log.lock().truncate(log_id.index).map_err(write_err)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // The marker first, synced: after a crash the log state never shows entries gone
        // without it, and it makes the state machine's writes of the purged entries durable
        // before they go (the keyspace shares RocksDB's WAL with it). Entries behind a marker
        // whose deletion did not happen are skipped, and deleted at the next open.
        let mut batch = WriteBatch::default();
        self.carry_committed(&mut batch);
        batch.put_cf(
            backend::cf(&self.db, CF_RAFT),
            PURGED,
            backend::encode(&log_id),
        );
        self.db.write_opt(batch, &synced()).map_err(write_err)?;
        self.recent.lock().purged(log_id.index);
        self.log.lock().purge(log_id).map_err(write_err)
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
        let syncs = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = syncs.clone();
        let sync = move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_micros(200));
            Ok(())
        };
        let flusher = Flusher::<Report>::start(sync, Default::default());
        let (tx, rx) = std::sync::mpsc::channel();
        for i in 0..500u32 {
            flusher.flushed_after(Report(i, tx.clone()));
        }
        let reports: Vec<(u32, bool)> = (0..500)
            .map(|_| {
                rx.recv_timeout(std::time::Duration::from_secs(30))
                    .expect("reported")
            })
            .collect();
        assert_eq!(reports, (0..500).map(|i| (i, true)).collect::<Vec<_>>());
        let syncs = syncs.load(std::sync::atomic::Ordering::Relaxed);
        assert!((1..=500).contains(&syncs), "{syncs} syncs");
    }

    /// Log entry `i` of term 1: a put of `k<i>` with a value of `size` bytes.
    fn put_entry(i: u64, size: usize) -> Entry {
        use crate::command::{Command, Proposal, ProposalId, PutRequest, RequestOp, TxnRequest};
        Entry {
            log_id: openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), i),
            payload: EntryPayload::Normal(Proposal {
                id: ProposalId::default(),
                command: Arc::new(Command::Txn(TxnRequest::single(RequestOp::Put(
                    PutRequest {
                        key: format!("k{i}").into_bytes(),
                        value: vec![b'v'; size],
                        ..PutRequest::default()
                    },
                )))),
            }),
        }
    }

    fn open_log(dir: &Path, db: &Arc<DB>) -> LogStore {
        LogStore::open(
            db.clone(),
            &dir.join(LOG_DIR),
            Proposals::new(1),
            Default::default(),
        )
        .expect("open log")
    }

    /// What replication sends a follower that is behind is bounded in bytes, not only in
    /// entries: openraft 0.9 gives each AppendEntries one heartbeat interval, and 512 large
    /// entries at once never made it (the follower stayed behind for good). A range of large
    /// entries comes back cut after about 1 MiB; a single entry larger than that still comes
    /// back alone; a range of small entries comes back whole. Read from the segment files, as
    /// after a start.
    #[tokio::test]
    async fn replication_reads_are_cut_at_a_mebibyte_but_never_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = backend::open(&dir.path().join("db")).expect("open backend");
        let mut store = open_log(dir.path(), &db);
        // 1..=40: 100 KiB each; 41: 3 MiB; 42..=50: 10 bytes each.
        let entries: Vec<(LogId, Vec<u8>)> = (1..=50u64)
            .map(|i| {
                let size = match i {
                    1..=40 => 100 << 10,
                    41 => 3 << 20,
                    _ => 10,
                };
                let e = put_entry(i, size);
                (e.log_id, backend::encode(&e))
            })
            .collect();
        store
            .log
            .lock()
            .append(entries.iter().map(|(id, b)| (*id, b.as_slice())))
            .expect("append");
        let indexes = |v: &Vec<Entry>| -> Vec<u64> { v.iter().map(|e| e.log_id.index).collect() };
        let first = store.limited_get_log_entries(1, 51).await.expect("read");
        assert_eq!(
            indexes(&first),
            (1..=11).collect::<Vec<_>>(),
            "cut past 1 MiB"
        );
        let big = store.limited_get_log_entries(41, 51).await.expect("read");
        assert_eq!(
            indexes(&big),
            vec![41],
            "one entry over the limit comes alone"
        );
        let small = store.limited_get_log_entries(42, 51).await.expect("read");
        assert_eq!(indexes(&small), (42..=50).collect::<Vec<_>>());
        let whole = store.try_get_log_entries(1..51).await.expect("read");
        assert_eq!(whole.len(), 50, "a plain read is not cut");
    }

    /// A database that has voted had a log: with the log's directory gone (a disk not
    /// mounted), the member refuses to start rather than forget what it acknowledged.
    #[tokio::test]
    async fn a_missing_log_beside_a_database_that_voted_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = backend::open(&dir.path().join("db")).expect("open backend");
        let mut store = open_log(dir.path(), &db);
        store.save_vote(&Vote::new(3, 1)).await.expect("vote");
        drop(store);
        std::fs::remove_dir_all(dir.path().join(LOG_DIR)).expect("remove the log");
        let err = LogStore::open(
            db.clone(),
            &dir.path().join(LOG_DIR),
            Proposals::new(1),
            Default::default(),
        )
        .expect_err("refused");
        assert!(err.to_string().contains("is missing"), "{err}");
    }

    /// A database in format 2 keeps its entries in the `log` family: opening the log moves
    /// them into segment files, empties the family and stamps the current format; a move
    /// interrupted before the stamp is done again whole.
    #[tokio::test]
    async fn a_format_2_log_is_moved_into_segment_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = backend::open(&dir.path().join("db")).expect("open backend");
        let meta = backend::cf(&db, backend::CF_META);
        db.put_cf(meta, b"format", backend::LOG_IN_FAMILY.to_be_bytes())
            .expect("stamp format 2");
        db.put_cf(
            backend::cf(&db, CF_RAFT),
            PURGED,
            backend::encode(&put_entry(10, 0).log_id),
        )
        .expect("purged");
        for i in 11..=3000u64 {
            db.put_cf(
                backend::cf(&db, CF_LOG),
                i.to_be_bytes(),
                backend::encode(&put_entry(i, 100)),
            )
            .expect("put entry");
        }
        // A move that stopped halfway left a segment behind.
        let segments = dir.path().join(LOG_DIR);
        std::fs::create_dir_all(&segments).expect("mkdir");
        std::fs::write(segments.join(format!("{:020}.seg", 11)), b"partial").expect("write");

        let mut store = open_log(dir.path(), &db);
        assert_eq!(
            backend::format(&db).expect("format"),
            backend::FORMAT_VERSION
        );
        let left = db
            .iterator_cf(backend::cf(&db, CF_LOG), IteratorMode::Start)
            .count();
        assert_eq!(left, 0, "the family is emptied");
        let state = store.get_log_state().await.expect("log state");
        assert_eq!(state.last_log_id.map(|l| l.index), Some(3000));
        assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(10));
        let all = store.try_get_log_entries(0..).await.expect("read");
        assert_eq!(
            all.iter().map(|e| e.log_id.index).collect::<Vec<_>>(),
            (11..=3000).collect::<Vec<_>>()
        );
        assert_eq!(all[5], put_entry(16, 100));
        drop(store);
        // Opened again, in format 3, nothing moves.
        let store = open_log(dir.path(), &db);
        assert_eq!(store.tail().last_log_id().map(|l| l.index), Some(3000));
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
