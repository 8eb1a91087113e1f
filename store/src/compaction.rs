//! Compaction in two halves, as etcd does it: the Raft apply path forgets history in the
//! in-memory index (fast, and the same on every member), and a background task deletes the
//! versions the index dropped from RocksDB, a batch at a time.
//!
//! ```text
//!  apply Compact{R}                       background (one task per member)
//!  ────────────────                       ─────────────────────────────────
//!  index.compact(R) → dropped versions    loop:
//!  meta "compacted" = R  (same batch)       wait for work (or cancellation)
//!  backlog += dropped (after the commit)    keyspace READ lock:
//!                                             take ≤ batch-limit versions, delete them
//!                                           unlock, pause, repeat until the backlog is empty
//! ```
//!
//! Why it is safe for the backend to hold versions the index no longer has:
//!
//! * Every read (range, compare, watch catch-up) goes through the index, so a dropped version
//!   is never looked up.
//! * Rebuilding the index (start-up, snapshot install) restores every stored version and then
//!   compacts again at the durable compaction revision; compacting the restored history drops
//!   exactly the versions still waiting here, and that result *is* the backlog after a restart,
//!   so no "finished compaction" marker is needed (etcd keeps one because its index cannot
//!   tell which revisions it dropped; ours can).
//! * A key's dropped versions are queued oldest first and deleted in that order, so after a
//!   crash between two batches each key has lost a prefix of its stale history: restored,
//!   that reads like a history compacted earlier, and compacting it again gives the same index.
//! * Snapshots are read without the keyspace lock; they leave out what the index would drop
//!   (see [`Mvcc::snapshot_from`](crate::mvcc::Mvcc::snapshot_from)).
//!
//! The deleting task is the member's (`member/compactor.rs`); this module holds what it works
//! through.
//!
//! A batch holds the keyspace *read* lock: reads go on beside it, and the apply path waits for
//! at most one batch. A snapshot install (write lock) never overlaps a batch, and it replaces
//! the backlog with the one rebuilt from the installed data.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// How the background deletion paces itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactorConfig {
    /// Versions deleted per batch (etcd's `--experimental-compaction-batch-limit`).
    pub batch_limit: usize,
    /// Pause between two batches, so the apply path and writers get the lock in between.
    pub pause: Duration,
}

impl Default for CompactorConfig {
    fn default() -> Self {
        CompactorConfig {
            batch_limit: 1000,
            pause: Duration::from_millis(10),
        }
    }
}

/// Versioned keys compaction dropped from the index that the backend still holds, oldest
/// first per key, with what `/metrics` and `/health` tell about their deletion.
#[derive(Debug, Default)]
pub struct Backlog {
    pending: Mutex<Pending>,
    work: Notify,
    /// Milliseconds the last backlog took from its first compaction to its last deletion.
    last_millis: AtomicU64,
    /// Set while the background deletion fails, cleared by its next successful batch.
    failing: AtomicBool,
}

#[derive(Debug, Default)]
struct Pending {
    versions: VecDeque<Vec<u8>>,
    /// When the backlog last went from empty to non-empty.
    since: Option<Instant>,
}

impl Backlog {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues versions dropped by a compaction that has been committed.
    pub(crate) fn schedule(&self, versions: impl IntoIterator<Item = Vec<u8>>) {
        let mut p = self.lock();
        let before = p.versions.len();
        p.versions.extend(versions);
        if before == 0 && !p.versions.is_empty() {
            p.since = Some(Instant::now());
        }
        drop(p);
        self.work.notify_one();
    }

    /// Replaces the whole backlog (the index was rebuilt from the backend).
    pub(crate) fn reset(&self, versions: impl IntoIterator<Item = Vec<u8>>) {
        let mut p = self.lock();
        p.versions.clear();
        p.since = None;
        drop(p);
        self.schedule(versions);
    }

    /// Takes up to `limit` versions to delete.
    pub(crate) fn take(&self, limit: usize) -> Vec<Vec<u8>> {
        let mut p = self.lock();
        let n = limit.max(1).min(p.versions.len());
        p.versions.drain(..n).collect()
    }

    /// Puts a batch whose deletion failed back at the front, in its order.
    pub(crate) fn give_back(&self, batch: Vec<Vec<u8>>) {
        let mut p = self.lock();
        for v in batch.into_iter().rev() {
            p.versions.push_front(v);
        }
    }

    /// Records that a batch was deleted; returns the versions still pending.
    pub(crate) fn deleted(&self) -> usize {
        let mut p = self.lock();
        if p.versions.is_empty()
            && let Some(since) = p.since.take()
        {
            self.last_millis
                .store(since.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
        p.versions.len()
    }

    /// Versions waiting to be deleted from the backend.
    pub fn pending(&self) -> usize {
        self.lock().versions.len()
    }

    /// How long the last completed backlog took, from the compaction that started it to its
    /// last batch.
    pub fn last_duration(&self) -> Duration {
        Duration::from_millis(self.last_millis.load(Ordering::Relaxed))
    }

    /// Whether the background deletion is failing (the member reports itself unhealthy).
    pub fn failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }

    /// Records whether the last deletion batch failed.
    pub(crate) fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::Relaxed);
    }

    /// Waits until versions are scheduled (at once if some were since the last wait).
    pub(crate) async fn work(&self) {
        self.work.notified().await;
    }
}
