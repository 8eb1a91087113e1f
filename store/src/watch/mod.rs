//! Watch fan-out: the apply path hands each revision's events to the hub, which delivers them
//! to every watcher whose range they touch.
//!
//! A watcher is either *synced* (it has seen everything up to the current revision and is fed
//! from the apply path) or *unsynced* (it is behind: it started at an old revision, or its
//! stream's queue was full). The apply path never waits for a watcher: when a stream's queue is
//! full, the watcher is parked as unsynced, and the catch-up task ([`catch_up`]) later reads
//! what it missed from the keyspace and moves it back once it is current.
//!
//! ```text
//!             publish (apply path, keyspace write lock)
//!   synced ───────────── queue full ─────────────► unsynced ──┐ catch-up pass:
//!     ▲                                                       │ read a batch of revisions,
//!     └──── caught up to the current revision, under the ─────┘ one response per watcher
//!           keyspace read lock (no revision in between)
//! ```
//!
//! Ordering argument: events are published while the apply path holds the keyspace lock for
//! writing; the move back to synced happens while the catch-up task holds it for reading, with
//! everything up to the current revision already queued. So a watcher crosses from unsynced
//! to synced between two revisions, never in the middle of one, and `next_rev` (the first
//! revision it has not been sent) makes every revision go out exactly once, in order.
//!
//! Locks: the hub's mutex guards only the registry (watchers, streams). Nothing awaits while
//! holding it or the keyspace lock: messages are queued with `try_send`, and a full queue
//! parks the watcher or blocks the stream (see [`receiver`]) instead of waiting.
//!
//! Memory: what a watcher costs for as long as it lives is its [`Watcher`] in the
//! [`registry`]'s pages (56 bytes), its key range in one allocation, and its watch id in its
//! stream's list (16 bytes); see docs/benchmarks.md for the figure against etcd's.

mod catch_up;
mod events;
mod receiver;
mod registry;
mod tag_index;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, mpsc};

use crate::command::Event;
use crate::key_index::is_empty_range;
use crate::mvcc::Mvcc;

pub use catch_up::CatchUpStats;
pub use events::{Encoded, WatchEvents, WatchSpec};
use events::{Interest, Options, Part, SharedRevision};
use receiver::Gate;
pub use receiver::WatchReceiver;
use registry::{WatchIds, Watchers};
pub use tag_index::{TagIndex, Tagger};

/// What a watch stream receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchMessage {
    /// The watcher exists; sent before any of its events.
    Created { watch_id: i64, revision: i64 },
    /// A create was refused: etcd answers it with one response, created and canceled.
    Refused {
        watch_id: i64,
        revision: i64,
        reason: String,
    },
    /// The watcher was removed at the client's request, or because it could not be served.
    Canceled { watch_id: i64, reason: String },
    /// Events this watcher wants: one revision's from the apply path, a batch of revisions'
    /// when it catches up. Everything up to `revision` has now been sent to it.
    Events {
        watch_id: i64,
        revision: i64,
        events: WatchEvents,
    },
    /// The watcher's start revision was compacted; it has been removed.
    Compacted {
        watch_id: i64,
        compact_revision: i64,
    },
    /// Everything up to `revision` has been delivered (to `watch_id`, or to the whole stream
    /// when it is -1).
    Progress { watch_id: i64, revision: i64 },
}

/// Why a watch create was refused (etcd's messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("mvcc: watcher range is empty")]
    EmptyRange,
    #[error("mvcc: duplicate watch ID provided on the WatchStream")]
    DuplicateId,
    #[error("mvcc: watch stream is closed")]
    StreamClosed,
}

/// Tags of each event of a revision (empty when no watcher needs them).
type Tags = Vec<Vec<String>>;

/// A registered watcher. The hub holds one per watcher in a hash map: keep it small (56
/// bytes; `a_watcher_stays_small` holds it there).
#[derive(Debug)]
struct Watcher {
    stream: u64,
    watch_id: i64,
    /// The first revision this watcher has not been sent.
    next_rev: i64,
    interest: Interest,
    options: Options,
    synced: bool,
    /// Set by [`Watchers::insert`]: with the slot, the watcher's id.
    serial: u32,
}

#[derive(Debug)]
struct Stream {
    tx: mpsc::Sender<WatchMessage>,
    gate: Arc<Gate>,
    /// The stream's watchers by their watch id.
    ids: WatchIds,
    /// The next id to try for a create that asks for one (etcd's `AutoWatchID`).
    next_auto: i64,
    /// A whole-stream progress request waits for every watcher to be synced (and for room
    /// in the queue).
    progress_pending: bool,
}

#[derive(Debug, Default)]
struct Inner {
    watchers: Watchers,
    streams: HashMap<u64, Stream>,
    unsynced: usize,
    /// Watchers by tag, so publish visits a tagged watcher only when an event carries its tag.
    by_tag: HashMap<String, HashSet<u64>>,
}

impl Inner {
    /// Removes a watcher from every index; the caller has already told the client, or the
    /// client is gone.
    fn remove(&mut self, id: u64) -> Option<Watcher> {
        let w = self.watchers.remove(id)?;
        if !w.synced {
            self.unsynced -= 1;
        }
        if let Some(s) = self.streams.get_mut(&w.stream) {
            s.ids.remove(w.watch_id);
        }
        if let Some(tag) = w.interest.tag(w.options)
            && let Some(ids) = self.by_tag.get_mut(tag)
        {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_tag.remove(tag);
            }
        }
        Some(w)
    }

    fn all_synced(&self, stream: u64) -> bool {
        self.streams.get(&stream).is_none_or(|s| {
            s.ids
                .values()
                .all(|id| self.watchers.get(id).is_none_or(|w| w.synced))
        })
    }

    /// Answers a stream's pending progress request if every one of its watchers is synced
    /// and its queue has room. `current` must be the revision under the keyspace lock the
    /// caller holds, so every event up to it has been queued to synced watchers.
    fn flush_progress(&mut self, stream: u64, current: i64) {
        let pending = self
            .streams
            .get(&stream)
            .is_some_and(|s| s.progress_pending);
        if !pending || !self.all_synced(stream) {
            return;
        }
        let s = self
            .streams
            .get_mut(&stream)
            .expect("invariant: checked above");
        let msg = WatchMessage::Progress {
            watch_id: -1,
            revision: current,
        };
        match s.tx.try_send(msg) {
            Ok(()) => s.progress_pending = false,
            // The drain of the queue wakes the catch-up task, which tries again.
            Err(_) => {
                s.gate.block(&s.tx);
            }
        }
    }
}

/// The hub: one per member.
pub struct WatchHub {
    inner: Mutex<Inner>,
    next_id: AtomicU64,
    wake: Arc<Notify>,
    tagger: Option<Tagger>,
    /// The present keyspace's keys by tag (empty without a tagger). Kept by `publish` under
    /// the keyspace write lock; taken after the keyspace lock, never before it, and never
    /// with the registry's.
    index: Mutex<TagIndex>,
    stats: CatchUpStats,
    /// Whether the catch-up task is running (see [`WatchHub::catch_up_running`]).
    running: AtomicBool,
}

impl std::fmt::Debug for WatchHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchHub")
            .field("watchers", &self.watcher_count())
            .finish_non_exhaustive()
    }
}

impl Default for WatchHub {
    fn default() -> Self {
        WatchHub::new(None)
    }
}

impl WatchHub {
    pub fn new(tagger: Option<Tagger>) -> Self {
        WatchHub {
            inner: Mutex::new(Inner::default()),
            next_id: AtomicU64::new(1),
            wake: Arc::new(Notify::new()),
            tagger,
            index: Mutex::new(TagIndex::default()),
            stats: CatchUpStats::default(),
            running: AtomicBool::new(false),
        }
    }

    /// Tags of events read back from history (see [`Tagger::event_tags`]).
    fn tags(&self, events: &[Event], needed: bool) -> Tags {
        match &self.tagger {
            Some(t) if needed => events.iter().map(|e| t.event_tags(e)).collect(),
            _ => Vec::new(),
        }
    }

    /// Tags of a revision being applied, recorded in the tag index as they are read: each
    /// new value is read once, and what a key carried before comes from the index.
    fn index_revision(&self, events: &[Event]) -> Tags {
        let Some(t) = &self.tagger else {
            return Vec::new();
        };
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        events
            .iter()
            .map(|e| {
                if e.kv.key.starts_with(&t.prefix) {
                    index.apply(t, e)
                } else {
                    Vec::new()
                }
            })
            .collect()
    }

    /// Builds the tag index from `mvcc`'s present keyspace: at start, and after a snapshot
    /// replaced the keyspace. The caller holds the keyspace write lock (or owns `mvcc`).
    pub fn index_keyspace(&self, mvcc: &Mvcc) -> Result<(), crate::error::StoreError> {
        if let Some(t) = &self.tagger {
            let built = TagIndex::build(t, mvcc)?;
            *self.index.lock().unwrap_or_else(|p| p.into_inner()) = built;
        }
        Ok(())
    }

    /// The keys in `[from, end)` whose present value carries `tag`, in key order; `None`
    /// without a tagger. The caller holds the keyspace read lock, so the answer is the
    /// keyspace's at its current revision.
    pub fn tagged_keys(&self, tag: &str, from: &[u8], end: &[u8]) -> Option<Vec<Vec<u8>>> {
        self.tagger.as_ref()?;
        Some(
            self.index
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .keys(tag, from, end),
        )
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a stream; its queue holds `capacity` messages before watchers are parked. The
    /// sender is for the stream's own control messages (canceled).
    pub fn open_stream(&self, capacity: usize) -> (u64, mpsc::Sender<WatchMessage>, WatchReceiver) {
        let (tx, rx) = mpsc::channel(capacity);
        let gate = Arc::new(Gate::default());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().streams.insert(
            id,
            Stream {
                tx: tx.clone(),
                gate: gate.clone(),
                ids: WatchIds::default(),
                next_auto: 0,
                progress_pending: false,
            },
        );
        (id, tx, WatchReceiver::new(rx, gate, self.wake.clone()))
    }

    pub fn close_stream(&self, stream: u64) {
        let mut inner = self.lock();
        let ids: Vec<u64> = inner
            .streams
            .get(&stream)
            .map(|s| s.ids.values().collect())
            .unwrap_or_default();
        for id in ids {
            inner.remove(id);
        }
        inner.streams.remove(&stream);
    }

    /// Adds a watcher to `stream`, or refuses it as etcd does (an empty range, a watch id the
    /// stream already uses). `requested_id` 0 asks the hub to pick the stream's lowest free
    /// id. `created` (a reserved slot of the stream's queue) carries the answer, `Created` or
    /// `Refused`, queued before the watcher can receive anything.
    ///
    /// `mvcc` must be the keyspace lock's read guard's target, held by the caller, so no
    /// revision is applied while the watcher's position is decided.
    pub fn add(
        &self,
        mvcc: &Mvcc,
        stream: u64,
        requested_id: i64,
        spec: WatchSpec,
        created: Option<mpsc::Permit<'_, WatchMessage>>,
    ) -> Result<i64, Refusal> {
        let current = mvcc.revision();
        let mut inner = self.lock();
        let answer = match inner.streams.get_mut(&stream) {
            None => Err(Refusal::StreamClosed),
            Some(_) if is_empty_range(&spec.key, &spec.range_end) => Err(Refusal::EmptyRange),
            Some(s) if requested_id != 0 && s.ids.contains_key(requested_id) => {
                Err(Refusal::DuplicateId)
            }
            Some(_) if requested_id != 0 => Ok(requested_id),
            Some(s) => {
                while s.ids.contains_key(s.next_auto) {
                    s.next_auto += 1;
                }
                s.next_auto += 1;
                Ok(s.next_auto - 1)
            }
        };
        if let Some(permit) = created {
            permit.send(match &answer {
                Ok(watch_id) => WatchMessage::Created {
                    watch_id: *watch_id,
                    revision: current,
                },
                Err(why) => WatchMessage::Refused {
                    watch_id: -1,
                    revision: current,
                    reason: why.to_string(),
                },
            });
        }
        let watch_id = answer?;
        let next_rev = if spec.start_revision <= 0 {
            current + 1
        } else {
            spec.start_revision
        };
        let synced = next_rev > current;
        let id = inner.watchers.insert(Watcher {
            stream,
            watch_id,
            next_rev,
            interest: Interest::new(&spec),
            options: Options::of(&spec),
            synced,
            serial: 0,
        });
        if let Some(tag) = spec.tag {
            inner.by_tag.entry(tag).or_default().insert(id);
        }
        inner
            .streams
            .get_mut(&stream)
            .expect("invariant: checked above")
            .ids
            .insert(watch_id, id);
        if !synced {
            inner.unsynced += 1;
            drop(inner);
            self.wake.notify_one();
        }
        Ok(watch_id)
    }

    /// Removes a watcher; false if it was not there (already cancelled or compacted).
    pub fn cancel(&self, stream: u64, watch_id: i64) -> bool {
        let mut inner = self.lock();
        let Some(id) = inner.streams.get(&stream).and_then(|s| s.ids.get(watch_id)) else {
            return false;
        };
        let was_behind = inner.remove(id).is_some_and(|w| !w.synced);
        let pending = inner
            .streams
            .get(&stream)
            .is_some_and(|s| s.progress_pending);
        drop(inner);
        // The last watcher a deferred progress request waited for may be gone: the catch-up
        // task answers it (it holds the keyspace lock the answer needs).
        if was_behind && pending {
            self.wake.notify_one();
        }
        true
    }

    /// Whether `stream` has a watcher with this id.
    pub fn has(&self, stream: u64, watch_id: i64) -> bool {
        self.lock()
            .streams
            .get(&stream)
            .is_some_and(|s| s.ids.contains_key(watch_id))
    }

    /// Number of watchers (all streams).
    pub fn watcher_count(&self) -> usize {
        self.lock().watchers.len()
    }

    /// Number of watchers that are behind.
    pub fn unsynced_count(&self) -> usize {
        self.lock().unsynced
    }

    /// Called by the apply path with the keyspace write lock held.
    pub fn publish(&self, revision: i64, events: &[Event]) {
        if events.is_empty() {
            return;
        }
        let tags = self.index_revision(events);
        let mut inner = self.lock();
        let Inner {
            watchers,
            streams,
            unsynced,
            by_tag,
        } = &mut *inner;
        let mut parked = false;
        let hit: HashSet<u64> = tags
            .iter()
            .flatten()
            .filter_map(|t| by_tag.get(t))
            .flatten()
            .copied()
            .collect();
        let mut shared: Option<Arc<SharedRevision>> = None;
        for (id, w) in watchers.iter_mut() {
            if !w.synced || w.next_rev > revision {
                continue;
            }
            // A tagged watcher none of these events is tagged for: nothing to do. Its
            // `next_rev` may lag; a catch-up from there finds nothing it wants either.
            if w.options.tagged() && !hit.contains(&id) {
                continue;
            }
            let pick = w.interest.pick(w.options, events, &tags);
            let Some(stream) = streams.get(&w.stream) else {
                continue;
            };
            let shared = shared
                .get_or_insert_with(|| SharedRevision::new(events.to_vec()))
                .clone();
            let Some(part) = Part::new(shared, pick) else {
                w.next_rev = revision + 1;
                continue;
            };
            let msg = WatchMessage::Events {
                watch_id: w.watch_id,
                revision,
                events: WatchEvents::one(part, w.options.prev_kv()),
            };
            match stream.tx.try_send(msg) {
                Ok(()) => w.next_rev = revision + 1,
                Err(_) => {
                    // Full (or closing): park it; catch-up resends from this revision. A synced
                    // watcher has seen everything before it (a tagged one may have been
                    // skipped, with `next_rev` lagging, by revisions it did not want).
                    w.next_rev = revision;
                    w.synced = false;
                    *unsynced += 1;
                    parked = true;
                }
            }
        }
        drop(inner);
        if parked {
            self.wake.notify_one();
        }
    }

    /// Asks for a progress notification for the whole stream: sent now if every watcher of
    /// the stream is current, else as soon as they are (etcd 3.5's deferred progress).
    pub fn request_progress(&self, mvcc: &Mvcc, stream: u64) {
        let mut inner = self.lock();
        if let Some(s) = inner.streams.get_mut(&stream) {
            s.progress_pending = true;
            inner.flush_progress(stream, mvcc.revision());
        }
    }

    /// Progress notifications for watchers that asked for them (`progress_notify`), sent
    /// periodically to synced watchers by the service layer's ticker. One that meets a full
    /// queue is dropped: the next tick sends a newer one.
    pub fn notify_progress(&self, mvcc: &Mvcc, stream: u64, watch_ids: &[i64]) {
        let inner = self.lock();
        let Some(s) = inner.streams.get(&stream) else {
            return;
        };
        for watch_id in watch_ids {
            let synced = s
                .ids
                .get(*watch_id)
                .and_then(|id| inner.watchers.get(id))
                .is_some_and(|w| w.synced);
            if synced {
                let _ = s.tx.try_send(WatchMessage::Progress {
                    watch_id: *watch_id,
                    revision: mvcc.revision(),
                });
            }
        }
    }

    /// Marks every watcher as behind, after a snapshot replaced the keyspace; `before` is the
    /// revision the keyspace had until then, which every synced watcher had seen.
    pub fn unsync_all(&self, before: i64) {
        let mut inner = self.lock();
        let mut n = 0;
        for w in inner.watchers.values_mut() {
            if w.synced {
                w.synced = false;
                w.next_rev = w.next_rev.max(before + 1);
                n += 1;
            }
        }
        inner.unsynced += n;
        drop(inner);
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests;
