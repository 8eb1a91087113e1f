//! The catch-up task: brings unsynced watchers up to the current revision from the keyspace's
//! history, and back to the apply path's feed.
//!
//! A pass works like etcd's `syncWatchers`, on a keyspace that indexes history by key:
//!
//! 1. **Select** (hub mutex, briefly): the unsynced watchers whose stream has room in its
//!    queue, grouped by what they read (range, whether previous versions are needed) and
//!    where they are: watchers whose next revisions lie within [`SPAN`] of the oldest of
//!    them share one read from that oldest revision, as etcd's `syncWatchers` reads once for
//!    all its unsynced watchers. After a member's kill a third of the agents resume on each
//!    other member, each at its own revision; one read serves them all instead of one each.
//!    A watcher further ahead starts a group of its own, so one far behind does not hold back
//!    those nearly there. A stream without room is marked blocked and costs nothing more
//!    until its client reads (see [`super::receiver`]).
//! 2. **Plan** (keyspace read lock, index only): each group's changes from its oldest next
//!    revision, at most [`MAX_CHANGES`], never splitting a revision; or the compacted answer
//!    for the members behind the compaction.
//! 3. **Load** (no lock): the planned versions from a RocksDB snapshot taken under the plan's
//!    lock, at most [`MAX_BYTES`] of keys and values.
//! 4. **Deliver** (hub mutex, `try_send` only): one response per watcher holding every
//!    revision of the batch it wants from its own next revision on, as etcd sends a backlog.
//!
//! A group whose plan reaches the current revision with at most [`FINAL_CHANGES`] changes is
//! loaded and delivered without releasing the keyspace lock, and its watchers become synced:
//! no revision can be applied in between (the module docs of [`super`] give the argument).
//!
//! Failure is contained: a group whose read fails or panics has its watchers cancelled with
//! the reason (their clients can watch again), the error is logged and counted, and the task
//! goes on serving every other watcher. The task runs each pass on the blocking pool, so a
//! panic that escapes a group still ends only that pass; `/health` fails if the task stops.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::RwLockReadGuard;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::{
    Inner, Interest, Options, Part, SharedRevision, Tags, WatchEvents, WatchHub, WatchMessage,
};
use crate::error::StoreError;
use crate::mvcc::{History, Mvcc};

/// Changes one catch-up response carries at most (etcd: 1,000 revisions).
const MAX_CHANGES: usize = 1000;
/// Keys and values one catch-up response carries at most, beyond its last revision's: well
/// under the 4 MiB that gRPC clients accept by default.
const MAX_BYTES: usize = 1 << 20;
/// A remainder this small is read under the keyspace lock, so its watchers can move back to
/// the apply path's feed.
const FINAL_CHANGES: usize = 256;
/// Watchers of one range whose next revisions are at most this far past the oldest of them
/// share its read.
const SPAN: i64 = MAX_CHANGES as i64;
/// While watchers wait on blocked streams, how often to look again in case a drain's wake-up
/// raced with the stream being marked blocked.
const BACKSTOP: Duration = Duration::from_secs(1);

/// Counters of the catch-up task, for `/metrics`.
#[derive(Debug, Default)]
pub struct CatchUpStats {
    passes: AtomicU64,
    reads: AtomicU64,
    responses: AtomicU64,
    events: AtomicU64,
    failures: AtomicU64,
}

impl CatchUpStats {
    /// Passes run.
    pub fn passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
    }

    /// History reads planned: one per group of watchers a pass serves.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Responses queued to watchers that were behind.
    pub fn responses(&self) -> u64 {
        self.responses.load(Ordering::Relaxed)
    }

    /// Events in those responses.
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    /// Reads that failed or panicked (their watchers were cancelled), and passes that
    /// panicked.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}

/// Unsynced watchers that read the same history.
#[derive(Debug, Clone)]
struct Group {
    /// Key range and `needs_prev_kv` of every member.
    range: Interest,
    options: Options,
    /// The oldest next revision among the members: the read starts there.
    from: i64,
    /// Whether any member wants previous versions.
    prev_kv: bool,
    /// Whether any member is tagged (events must be tagged to pick).
    tagged: bool,
    members: Vec<Member>,
}

/// A watcher of a group, and its next revision when it was selected.
type Member = (u64, i64);

/// Watchers may share a group when they read the same range with the same options.
type GroupKey = (Interest, Options);

/// An unsynced watcher as selected: id, next revision, whether it wants previous versions,
/// whether it is tagged.
type Selected = (u64, i64, bool, bool);

/// Clears the hub's running flag when the task ends, however it ends.
struct Running<'a>(&'a WatchHub);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::SeqCst);
        if std::thread::panicking() {
            tracing::error!("watch catch-up task died: watchers that fall behind get no events");
        }
    }
}

impl WatchHub {
    pub fn catch_up_stats(&self) -> &CatchUpStats {
        &self.stats
    }

    /// Whether the catch-up task is running (a member without it must fail its health check:
    /// every watch from a past revision would get `created` and then silence).
    pub fn catch_up_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// Runs the catch-up task: each time there is work, `pass` starts one pass (on the
    /// blocking pool, calling [`catch_up`](Self::catch_up) with the member's keyspace lock),
    /// until it returns `None` because the member is gone. A pass that panics is counted,
    /// logged and followed by another.
    pub async fn run_catch_up<F>(&self, mut pass: F)
    where
        F: FnMut() -> Option<tokio::task::JoinHandle<bool>>,
    {
        self.running.store(true, Ordering::SeqCst);
        let _running = Running(self);
        loop {
            let Some(handle) = pass() else { return };
            let more = match handle.await {
                Ok(more) => more,
                Err(e) if e.is_panic() => {
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(error = %e, "watch catch-up pass panicked; starting another");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    true
                }
                Err(_) => return,
            };
            self.wait_for_work(more).await;
        }
    }

    /// Waits until a pass is worth running: at once when the last one left work that can be
    /// done now; else when woken (a parked or new watcher, a drained queue, a cancel that a
    /// progress request waited for), or after [`BACKSTOP`] while anyone is behind.
    async fn wait_for_work(&self, more: bool) {
        if more {
            tokio::task::yield_now().await;
            return;
        }
        let idle = {
            let inner = self.lock();
            inner.unsynced == 0 && !inner.streams.values().any(|s| s.progress_pending)
        };
        if idle {
            self.wake.notified().await;
        } else {
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(BACKSTOP) => {}
            }
        }
    }

    /// One catch-up pass; `read` takes the keyspace read lock. Returns whether work is left
    /// that could be done now (a group read only part of its backlog, and its streams have
    /// room).
    pub fn catch_up<'a>(&self, read: impl Fn() -> RwLockReadGuard<'a, Mvcc>) -> bool {
        self.stats.passes.fetch_add(1, Ordering::Relaxed);
        let (groups, progress) = self.select();
        let mut moved = false;
        for group in &groups {
            let result =
                std::panic::catch_unwind(AssertUnwindSafe(|| self.catch_up_group(group, &read)));
            let reason = match result {
                Ok(Ok(m)) => {
                    moved |= m;
                    continue;
                }
                Ok(Err(e)) => {
                    tracing::error!(error = %e, from = group.from, "watch catch-up read failed");
                    format!("etcdserver: watch catch-up failed: {e}")
                }
                Err(panic) => {
                    let what = panic_message(&panic);
                    tracing::error!(panic = %what, from = group.from, "watch catch-up panicked");
                    format!("etcdserver: watch catch-up failed: {what}")
                }
            };
            self.stats.failures.fetch_add(1, Ordering::Relaxed);
            let ids: Vec<u64> = group.members.iter().map(|(id, _)| *id).collect();
            self.fail(&ids, &reason);
        }
        if !progress.is_empty() {
            let mvcc = read();
            let mut inner = self.lock();
            for stream in progress {
                inner.flush_progress(stream, mvcc.revision());
            }
        }
        // Another pass at once only if this one moved someone forward: a watcher that
        // cannot move waits for a wake-up instead of spinning.
        moved && self.has_ready_work()
    }

    /// Step 1: unsynced watchers with room, grouped; and streams whose progress request
    /// may be answerable.
    fn select(&self) -> (Vec<Group>, Vec<u64>) {
        let mut inner = self.lock();
        let progress: Vec<u64> = inner
            .streams
            .iter()
            .filter(|(_, s)| s.progress_pending && !s.tx.is_closed() && s.tx.capacity() > 0)
            .map(|(id, _)| *id)
            .collect();
        if inner.unsynced == 0 {
            return (Vec::new(), progress);
        }
        let Inner {
            watchers, streams, ..
        } = &mut *inner;
        let mut ranges: HashMap<GroupKey, Vec<Selected>> = HashMap::new();
        for (id, w) in watchers.iter().filter(|(_, w)| !w.synced) {
            let Some(s) = streams.get(&w.stream) else {
                continue;
            };
            // A closed stream's task removes it; a full one waits for its client.
            if s.tx.is_closed() || (s.tx.capacity() == 0 && s.gate.block(&s.tx)) {
                continue;
            }
            let tagged = w.options.tagged();
            let prev_kv = w.options.prev_kv() || w.options.needs_prev_kv() || tagged;
            ranges
                .entry((w.interest.without_tag(), w.options.for_history()))
                .or_default()
                .push((id, w.next_rev, prev_kv, tagged));
        }
        let mut groups = Vec::new();
        for ((range, options), mut selected) in ranges {
            selected.sort_unstable_by_key(|&(_, next_rev, ..)| next_rev);
            let mut group: Option<Group> = None;
            for (id, next_rev, prev_kv, tagged) in selected {
                if group.as_ref().is_none_or(|g| next_rev - g.from > SPAN) {
                    groups.extend(group.take());
                    group = Some(Group {
                        range: range.clone(),
                        options,
                        from: next_rev,
                        prev_kv: false,
                        tagged: false,
                        members: Vec::new(),
                    });
                }
                let g = group.as_mut().expect("a group was just started");
                g.prev_kv |= prev_kv;
                g.tagged |= tagged;
                g.members.push((id, next_rev));
            }
            groups.extend(group);
        }
        // Oldest first: the furthest behind have waited longest.
        groups.sort_by_key(|g| g.from);
        (groups, progress)
    }

    /// Steps 2–4 for one group. Returns whether any member moved forward.
    fn catch_up_group<'a>(
        &self,
        group: &Group,
        read: &impl Fn() -> RwLockReadGuard<'a, Mvcc>,
    ) -> Result<bool, StoreError> {
        let mvcc = read();
        let current = mvcc.revision();
        let compacted = mvcc.compacted();
        if group.options.is_compacted(group.from, compacted) {
            drop(mvcc);
            // Those behind the compaction are told so; the others read on from the oldest
            // of them.
            let (gone, rest): (Vec<Member>, Vec<Member>) = group
                .members
                .iter()
                .partition(|&&(_, next_rev)| group.options.is_compacted(next_rev, compacted));
            let moved = self.deliver_compacted(&gone, compacted, current);
            let Some(from) = rest.iter().map(|&(_, next_rev)| next_rev).min() else {
                return Ok(moved);
            };
            let rest = Group {
                from,
                members: rest,
                ..group.clone()
            };
            return Ok(self.catch_up_group(&rest, read)? || moved);
        }
        self.stats.reads.fetch_add(1, Ordering::Relaxed);
        let plan = mvcc.plan_history(
            group.range.key(),
            group.range.range_end(),
            group.from,
            MAX_CHANGES,
            group.prev_kv,
        );
        if plan.covered >= current && plan.len() <= FINAL_CHANGES {
            // Small enough to finish under the lock: no revision can slip in between.
            let db = mvcc.db();
            let snapshot = db.snapshot();
            let history = plan.load(db, &snapshot, MAX_BYTES)?;
            let synced_at = (history.covered >= current).then_some(current);
            return Ok(self.deliver(group, history, synced_at));
        }
        let db = mvcc.db().clone();
        let snapshot = db.snapshot();
        drop(mvcc);
        let history = plan.load(&db, &snapshot, MAX_BYTES)?;
        Ok(self.deliver(group, history, None))
    }

    /// Step 4: one response per member with the events it wants from its next revision on.
    /// `synced_at`: the current revision, when the caller holds the keyspace lock and
    /// `history` reaches it. Returns whether any member moved forward.
    fn deliver(&self, group: &Group, history: History, synced_at: Option<i64>) -> bool {
        let revisions: Vec<(i64, std::sync::Arc<SharedRevision>, Tags)> = history
            .revisions
            .into_iter()
            .map(|(revision, events)| {
                let tags = self.tags(&events, group.tagged);
                (revision, SharedRevision::new(events), tags)
            })
            .collect();
        let mut inner = self.lock();
        let Inner {
            watchers,
            streams,
            unsynced,
            ..
        } = &mut *inner;
        let mut now_synced = Vec::new();
        let mut moved = false;
        for &(id, selected_at) in &group.members {
            let Some(w) = watchers.get_mut(id) else {
                continue; // cancelled meanwhile
            };
            if w.synced || w.next_rev != selected_at {
                continue;
            }
            let Some(stream) = streams.get(&w.stream) else {
                continue;
            };
            let parts: Vec<Part> = revisions
                .iter()
                .filter(|(revision, ..)| *revision >= w.next_rev)
                .filter_map(|(_, shared, tags)| {
                    Part::new(
                        shared.clone(),
                        w.interest.pick(w.options, shared.events(), tags),
                    )
                })
                .collect();
            if let Some(events) = WatchEvents::many(parts, w.options.prev_kv()) {
                let n = events.len() as u64;
                let msg = WatchMessage::Events {
                    watch_id: w.watch_id,
                    revision: history.covered,
                    events,
                };
                if stream.tx.try_send(msg).is_err() {
                    stream.gate.block(&stream.tx);
                    continue;
                }
                self.stats.responses.fetch_add(1, Ordering::Relaxed);
                self.stats.events.fetch_add(n, Ordering::Relaxed);
            }
            // A watcher that starts in the future keeps its start.
            moved |= history.covered + 1 > w.next_rev;
            w.next_rev = w.next_rev.max(history.covered + 1);
            if let Some(current) = synced_at
                && w.next_rev > current
            {
                w.synced = true;
                *unsynced -= 1;
                moved = true;
                now_synced.push(w.stream);
            }
        }
        if let Some(current) = synced_at {
            now_synced.sort_unstable();
            now_synced.dedup();
            for stream in now_synced {
                inner.flush_progress(stream, current);
            }
        }
        moved
    }

    /// Tells each of `members` still where it was selected that its history is compacted,
    /// and removes it. Returns whether any was.
    fn deliver_compacted(&self, members: &[Member], compacted: i64, current: i64) -> bool {
        let mut inner = self.lock();
        let mut gone = Vec::new();
        for &(id, selected_at) in members {
            let Some(w) = inner.watchers.get(id) else {
                continue;
            };
            if w.synced || w.next_rev != selected_at {
                continue;
            }
            let Some(stream) = inner.streams.get(&w.stream) else {
                continue;
            };
            let msg = WatchMessage::Compacted {
                watch_id: w.watch_id,
                compact_revision: compacted,
            };
            if stream.tx.try_send(msg).is_ok() {
                gone.push((id, w.stream));
            } else {
                stream.gate.block(&stream.tx);
            }
        }
        let moved = !gone.is_empty();
        for (id, stream) in gone {
            inner.remove(id);
            inner.flush_progress(stream, current);
        }
        moved
    }

    /// Cancels watchers that cannot be served, telling their clients why where the queue has
    /// room.
    fn fail(&self, ids: &[u64], reason: &str) {
        let mut inner = self.lock();
        for id in ids {
            if let Some(w) = inner.remove(*id)
                && let Some(s) = inner.streams.get(&w.stream)
            {
                let _ = s.tx.try_send(WatchMessage::Canceled {
                    watch_id: w.watch_id,
                    reason: reason.to_string(),
                });
            }
        }
    }

    /// Whether some unsynced watcher's stream has room now.
    fn has_ready_work(&self) -> bool {
        let inner = self.lock();
        inner.unsynced > 0
            && inner.watchers.values().any(|w| {
                !w.synced
                    && inner
                        .streams
                        .get(&w.stream)
                        .is_some_and(|s| !s.tx.is_closed() && s.tx.capacity() > 0)
            })
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".to_string())
}
