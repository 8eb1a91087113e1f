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
//! A batch holds the keyspace *read* lock: reads go on beside it, and the apply path waits for
//! at most one batch. A snapshot install (write lock) never overlaps a batch, and it replaces
//! the backlog with the one rebuilt from the installed data.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::raft::state_machine::Shared;

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
}

/// How long the task waits after a failed batch before trying again.
const RETRY: Duration = Duration::from_secs(1);

/// Starts the background deletion of `shared`'s backlog on `tracker`, until `cancel`.
///
/// Supervised: a failed batch (a RocksDB error) or a panic in one is logged, flags the
/// backlog as failing (so `/health` fails) and is retried after [`RETRY`]; the flag clears
/// with the next batch that succeeds. The loop itself holds no lock across an `.await`.
pub fn spawn(
    shared: Arc<Shared>,
    backlog: Arc<Backlog>,
    config: CompactorConfig,
    cancel: CancellationToken,
    tracker: &TaskTracker,
) {
    tracker.spawn(async move {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = backlog.work.notified() => {}
            }
            if backlog.pending() == 0 {
                continue;
            }
            // Drain the backlog, one batch per blocking call.
            loop {
                let step = {
                    let shared = shared.clone();
                    tokio::task::spawn_blocking(move || {
                        shared.read().delete_compacted(config.batch_limit)
                    })
                    .await
                };
                let pause = match step {
                    Ok(Ok(0)) => {
                        backlog.failing.store(false, Ordering::Relaxed);
                        tracing::info!(
                            took_ms = backlog.last_duration().as_millis() as u64,
                            "compaction: stale versions deleted"
                        );
                        break;
                    }
                    Ok(Ok(_)) => {
                        backlog.failing.store(false, Ordering::Relaxed);
                        config.pause
                    }
                    Ok(Err(e)) => {
                        backlog.failing.store(true, Ordering::Relaxed);
                        tracing::error!(error = %e, "compaction: deleting stale versions failed");
                        RETRY
                    }
                    Err(e) => {
                        backlog.failing.store(true, Ordering::Relaxed);
                        tracing::error!(error = %e, "compaction: a deletion batch panicked");
                        RETRY
                    }
                };
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        }
    });
}
