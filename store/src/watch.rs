//! Watch fan-out: the apply path hands each revision's events to the hub, which delivers them
//! to every watcher whose range they touch.
//!
//! A watcher is either *synced* (it has seen everything up to the current revision and is fed
//! from the apply path) or *unsynced* (it is behind: it started at an old revision, or its
//! stream's queue was full). The apply path never waits for a watcher: when a stream's queue is
//! full, the watcher is parked as unsynced, and the catch-up task later reads what it missed
//! from the keyspace (the key index and the backend) and moves it back once it is current.
//!
//! Ordering argument: events are published while the apply path holds the keyspace lock for
//! writing; catch-up reads and the move back to synced happen while holding it for reading. So
//! a watcher crosses from unsynced to synced between two revisions, never in the middle of one,
//! and `next_rev` (the first revision it has not been sent) makes every revision go out exactly
//! once, in order.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use prost::bytes::{Bytes, BytesMut};
use tokio::sync::{Notify, mpsc};

use crate::command::{Event, EventKind};
use crate::key_index::range_bounds;
use crate::mvcc::Mvcc;

/// What a watch stream receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchMessage {
    /// The watcher exists; sent before any of its events.
    Created { watch_id: i64, revision: i64 },
    /// The watcher was removed at the client's request, or refused.
    Canceled { watch_id: i64, reason: String },
    /// The events of one revision this watcher wants.
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

/// What a watcher asks for.
#[derive(Debug, Clone, Default)]
pub struct WatchSpec {
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
    /// 0: from the next revision.
    pub start_revision: i64,
    pub prev_kv: bool,
    pub no_put: bool,
    pub no_delete: bool,
    /// Only events the hub's tagger gives this tag (see [`Tagger`]).
    pub tag: Option<String>,
}

/// Derives index tags from an event (e.g. `spec.nodeName=n1` from a pod's new and previous
/// state), so a watcher interested in one tag among thousands of watchers is skipped at
/// publish time without its queue ever seeing the others' events.
pub type Tagger = Arc<dyn Fn(&Event) -> Vec<String> + Send + Sync>;

impl WatchSpec {
    fn matches(&self, key: &[u8]) -> bool {
        use std::ops::RangeBounds;
        RangeBounds::<&[u8]>::contains(&range_bounds(&self.key, &self.range_end), &key)
    }

    fn wants(&self, e: &Event, tags: Option<&Vec<String>>) -> bool {
        if let Some(tag) = &self.tag
            && !tags.is_some_and(|t| t.contains(tag))
        {
            return false;
        }
        match e.kind {
            EventKind::Put if self.no_put => false,
            EventKind::Delete if self.no_delete => false,
            _ => self.matches(&e.kv.key),
        }
    }

    /// Which of `events` this watcher gets.
    fn pick(&self, events: &[Event], tags: &[Vec<String>]) -> Pick {
        let wanted = |i: usize| self.wants(&events[i], tags.get(i));
        let n = (0..events.len()).filter(|&i| wanted(i)).count();
        if n == 0 {
            Pick::Nothing
        } else if n == events.len() {
            Pick::All
        } else {
            Pick::Some((0..events.len()).filter(|&i| wanted(i)).collect())
        }
    }
}

/// Which events of a revision a watcher gets.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pick {
    Nothing,
    All,
    Some(Vec<usize>),
}

/// One revision's events, shared by every watcher that receives any of them: the apply path
/// clones them once per revision, not once per watcher, and a service's encoding of them is
/// made once and reused by every stream (see [`WatchEvents::encoded`]).
#[derive(Debug)]
struct SharedRevision {
    events: Vec<Event>,
    /// Encodings by the etcd service, without and with `prev_kv`.
    encoded: [OnceLock<Encoded>; 2],
}

/// A revision's events encoded one after another, and where each ends.
#[derive(Debug, Clone)]
pub struct Encoded {
    pub buf: Bytes,
    pub ends: Vec<usize>,
}

/// What one watcher receives of one revision: a view of the shared events.
#[derive(Debug, Clone)]
pub struct WatchEvents {
    shared: Arc<SharedRevision>,
    /// `None`: all of them.
    pick: Option<Arc<[usize]>>,
    prev_kv: bool,
}

impl PartialEq for WatchEvents {
    fn eq(&self, other: &Self) -> bool {
        self.to_vec() == other.to_vec()
    }
}

impl Eq for WatchEvents {}

impl WatchEvents {
    /// Every event of a revision, with their previous versions or without.
    pub fn new(events: Vec<Event>, prev_kv: bool) -> WatchEvents {
        WatchEvents::picked(Arc::new(SharedRevision::new(events)), Pick::All, prev_kv)
    }

    fn picked(shared: Arc<SharedRevision>, pick: Pick, prev_kv: bool) -> WatchEvents {
        let pick = match pick {
            Pick::Some(ix) => Some(ix.into()),
            Pick::All | Pick::Nothing => None,
        };
        WatchEvents {
            shared,
            pick,
            prev_kv,
        }
    }

    fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        let all = self.pick.is_none().then(|| 0..self.shared.events.len());
        all.into_iter()
            .flatten()
            .chain(self.pick.iter().flat_map(|p| p.iter().copied()))
    }

    pub fn len(&self) -> usize {
        self.pick
            .as_ref()
            .map_or(self.shared.events.len(), |p| p.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The events, owned; `prev_kv` only where the watcher asked for it.
    pub fn iter(&self) -> impl Iterator<Item = Event> + '_ {
        self.indices().map(|i| {
            let e = &self.shared.events[i];
            Event {
                kind: e.kind,
                kv: e.kv.clone(),
                prev_kv: if self.prev_kv {
                    e.prev_kv.clone()
                } else {
                    None
                },
            }
        })
    }

    pub fn to_vec(&self) -> Vec<Event> {
        self.iter().collect()
    }

    /// These events as `encode` writes them, one after another. `encode` runs once per
    /// revision (and `prev_kv` setting), on whichever stream sends them first; every other
    /// watcher's message shares its buffer (or, for a watcher that wants only some of the
    /// revision's events, copies their slices).
    pub fn encoded(&self, encode: impl FnOnce(&[Event], bool) -> Encoded) -> Bytes {
        let shared = &self.shared;
        let enc = shared.encoded[usize::from(self.prev_kv)]
            .get_or_init(|| encode(&shared.events, self.prev_kv));
        match &self.pick {
            None => enc.buf.clone(),
            Some(ix) => {
                let mut out = BytesMut::new();
                for &i in ix.iter() {
                    let start = if i == 0 { 0 } else { enc.ends[i - 1] };
                    out.extend_from_slice(&enc.buf[start..enc.ends[i]]);
                }
                out.freeze()
            }
        }
    }
}

impl SharedRevision {
    fn new(events: Vec<Event>) -> SharedRevision {
        SharedRevision {
            events,
            encoded: [OnceLock::new(), OnceLock::new()],
        }
    }
}

#[derive(Debug)]
struct Watcher {
    stream: u64,
    watch_id: i64,
    spec: WatchSpec,
    /// The first revision this watcher has not been sent.
    next_rev: i64,
    synced: bool,
}

#[derive(Debug)]
struct Stream {
    tx: mpsc::Sender<WatchMessage>,
    /// A whole-stream progress request waits for every watcher to be synced.
    progress_pending: bool,
}

#[derive(Debug, Default)]
struct Inner {
    watchers: HashMap<u64, Watcher>,
    streams: HashMap<u64, Stream>,
    unsynced: usize,
    /// Watchers by tag, so publish visits a tagged watcher only when an event carries its tag.
    by_tag: HashMap<String, HashSet<u64>>,
}

fn unindex(by_tag: &mut HashMap<String, HashSet<u64>>, id: u64, spec: &WatchSpec) {
    if let Some(tag) = &spec.tag
        && let Some(ids) = by_tag.get_mut(tag)
    {
        ids.remove(&id);
        if ids.is_empty() {
            by_tag.remove(tag);
        }
    }
}

/// The hub: one per member.
pub struct WatchHub {
    inner: Mutex<Inner>,
    next_id: AtomicU64,
    wake: Notify,
    tagger: Option<Tagger>,
}

impl std::fmt::Debug for WatchHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchHub")
            .field("watchers", &self.watcher_count())
            .finish_non_exhaustive()
    }
}

/// Events of one revision, as many revisions a catch-up pass reads at most per watcher.
const CATCH_UP_REVISIONS: usize = 256;

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
            wake: Notify::new(),
            tagger,
        }
    }

    fn tags(&self, events: &[Event], needed: bool) -> Vec<Vec<String>> {
        match &self.tagger {
            Some(t) if needed => events.iter().map(|e| t(e)).collect(),
            _ => Vec::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a stream; its queue holds `capacity` messages before watchers are parked. The
    /// sender is for the stream's own control messages (created, canceled).
    pub fn open_stream(
        &self,
        capacity: usize,
    ) -> (
        u64,
        mpsc::Sender<WatchMessage>,
        mpsc::Receiver<WatchMessage>,
    ) {
        let (tx, rx) = mpsc::channel(capacity);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().streams.insert(
            id,
            Stream {
                tx: tx.clone(),
                progress_pending: false,
            },
        );
        (id, tx, rx)
    }

    pub fn close_stream(&self, stream: u64) {
        let mut inner = self.lock();
        let Inner {
            watchers,
            streams,
            unsynced,
            by_tag,
        } = &mut *inner;
        streams.remove(&stream);
        watchers.retain(|id, w| {
            let keep = w.stream != stream;
            if !keep {
                if !w.synced {
                    *unsynced -= 1;
                }
                unindex(by_tag, *id, &w.spec);
            }
            keep
        });
    }

    /// Adds a watcher. `mvcc` must be the keyspace lock's read guard's target, held by the
    /// caller, so no revision is applied while the watcher's position is decided.
    pub fn add(&self, mvcc: &Mvcc, stream: u64, watch_id: i64, spec: WatchSpec) -> u64 {
        let current = mvcc.revision();
        let next_rev = if spec.start_revision <= 0 {
            current + 1
        } else {
            spec.start_revision
        };
        let synced = next_rev > current;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut inner = self.lock();
        if let Some(tag) = &spec.tag {
            inner.by_tag.entry(tag.clone()).or_default().insert(id);
        }
        inner.watchers.insert(
            id,
            Watcher {
                stream,
                watch_id,
                spec,
                next_rev,
                synced,
            },
        );
        if !synced {
            inner.unsynced += 1;
            drop(inner);
            self.wake.notify_one();
        }
        id
    }

    /// Removes a watcher; false if it was not there (already cancelled or compacted).
    pub fn cancel(&self, stream: u64, watch_id: i64) -> bool {
        let mut inner = self.lock();
        let found = inner
            .watchers
            .iter()
            .find(|(_, w)| w.stream == stream && w.watch_id == watch_id)
            .map(|(id, w)| (*id, w.synced));
        match found {
            Some((id, synced)) => {
                if let Some(w) = inner.watchers.remove(&id) {
                    unindex(&mut inner.by_tag, id, &w.spec);
                }
                if !synced {
                    inner.unsynced -= 1;
                }
                true
            }
            None => false,
        }
    }

    /// Whether `stream` has a watcher with this id.
    pub fn has(&self, stream: u64, watch_id: i64) -> bool {
        self.lock()
            .watchers
            .values()
            .any(|w| w.stream == stream && w.watch_id == watch_id)
    }

    /// Number of watchers (all streams).
    pub fn watcher_count(&self) -> usize {
        self.lock().watchers.len()
    }

    /// Called by the apply path with the keyspace write lock held.
    pub fn publish(&self, revision: i64, events: &[Event]) {
        if events.is_empty() {
            return;
        }
        let mut inner = self.lock();
        let Inner {
            watchers,
            streams,
            unsynced,
            by_tag,
        } = &mut *inner;
        let mut parked = false;
        let tags = self.tags(events, !by_tag.is_empty());
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
            if w.spec.tag.is_some() && !hit.contains(id) {
                continue;
            }
            let pick = w.spec.pick(events, &tags);
            if pick == Pick::Nothing {
                w.next_rev = revision + 1;
                continue;
            }
            let Some(stream) = streams.get(&w.stream) else {
                continue;
            };
            let shared = shared
                .get_or_insert_with(|| Arc::new(SharedRevision::new(events.to_vec())))
                .clone();
            let msg = WatchMessage::Events {
                watch_id: w.watch_id,
                revision,
                events: WatchEvents::picked(shared, pick, w.spec.prev_kv),
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
    /// the stream is current, else as soon as they are.
    pub fn request_progress(&self, mvcc: &Mvcc, stream: u64) {
        let mut inner = self.lock();
        let all_synced = inner
            .watchers
            .values()
            .filter(|w| w.stream == stream)
            .all(|w| w.synced);
        if let Some(s) = inner.streams.get_mut(&stream) {
            if all_synced {
                let _ = s.tx.try_send(WatchMessage::Progress {
                    watch_id: -1,
                    revision: mvcc.revision(),
                });
            } else {
                s.progress_pending = true;
            }
        }
    }

    /// Progress notifications for watchers that asked for them (`progress_notify`), sent
    /// periodically to synced watchers by the service layer's ticker.
    pub fn notify_progress(&self, mvcc: &Mvcc, stream: u64, watch_ids: &[i64]) {
        let inner = self.lock();
        let Some(s) = inner.streams.get(&stream) else {
            return;
        };
        for w in inner.watchers.values() {
            if w.stream == stream && w.synced && watch_ids.contains(&w.watch_id) {
                let _ = s.tx.try_send(WatchMessage::Progress {
                    watch_id: w.watch_id,
                    revision: mvcc.revision(),
                });
            }
        }
    }

    /// One catch-up pass over the unsynced watchers. Call with the keyspace read lock held.
    /// Returns whether any watcher is still behind.
    pub fn catch_up(&self, mvcc: &Mvcc) -> bool {
        let mut inner = self.lock();
        if inner.unsynced == 0 {
            return false;
        }
        let current = mvcc.revision();
        let compacted = mvcc.compacted();
        let Inner {
            watchers,
            streams,
            unsynced,
            by_tag,
        } = &mut *inner;
        let mut gone = Vec::new();
        let mut now_synced_streams = Vec::new();
        for (id, w) in watchers.iter_mut().filter(|(_, w)| !w.synced) {
            let Some(stream) = streams.get(&w.stream) else {
                gone.push(*id);
                continue;
            };
            if w.next_rev < compacted {
                let msg = WatchMessage::Compacted {
                    watch_id: w.watch_id,
                    compact_revision: compacted,
                };
                if stream.tx.try_send(msg).is_ok() {
                    gone.push(*id);
                }
                continue;
            }
            let batches = match mvcc.events_since(
                &w.spec.key,
                &w.spec.range_end,
                w.next_rev,
                w.spec.prev_kv,
                CATCH_UP_REVISIONS,
            ) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(error = %e, "watch catch-up read failed");
                    continue;
                }
            };
            let complete = batches.len() < CATCH_UP_REVISIONS;
            let mut blocked = false;
            for (rev, events) in batches {
                let tags = self.tags(&events, w.spec.tag.is_some());
                let pick = w.spec.pick(&events, &tags);
                if pick == Pick::Nothing {
                    w.next_rev = rev + 1;
                    continue;
                }
                let shared = Arc::new(SharedRevision::new(events));
                let msg = WatchMessage::Events {
                    watch_id: w.watch_id,
                    revision: rev,
                    events: WatchEvents::picked(shared, pick, w.spec.prev_kv),
                };
                if stream.tx.try_send(msg).is_err() {
                    blocked = true;
                    break;
                }
                w.next_rev = rev + 1;
            }
            if !blocked && complete {
                w.next_rev = w.next_rev.max(current + 1);
                w.synced = true;
                *unsynced -= 1;
                now_synced_streams.push(w.stream);
            }
        }
        for id in gone {
            if let Some(w) = watchers.remove(&id) {
                unindex(by_tag, id, &w.spec);
                if !w.synced {
                    *unsynced -= 1;
                }
            }
        }
        // Streams whose watchers were removed above may now be all synced as well.
        now_synced_streams.extend(
            streams
                .iter()
                .filter(|(_, s)| s.progress_pending)
                .map(|(id, _)| *id),
        );
        now_synced_streams.sort_unstable();
        now_synced_streams.dedup();
        for sid in now_synced_streams {
            let all_synced = watchers
                .values()
                .filter(|w| w.stream == sid)
                .all(|w| w.synced);
            if let Some(s) = streams.get_mut(&sid)
                && s.progress_pending
                && all_synced
                && s.tx
                    .try_send(WatchMessage::Progress {
                        watch_id: -1,
                        revision: current,
                    })
                    .is_ok()
            {
                s.progress_pending = false;
            }
        }
        *unsynced > 0
    }

    /// Waits until a catch-up pass is worth running: woken by a parked or new watcher, or
    /// after a few milliseconds while some watcher is still behind (its stream's queue drains
    /// at the client's pace).
    pub async fn wait_for_work(&self, behind: bool) {
        if behind {
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
        } else {
            self.wake.notified().await;
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
mod tests {
    use super::*;
    use crate::backend;
    use crate::command::{Command, PutRequest, RequestOp, TxnRequest};

    fn put(m: &mut Mvcc, hub: &WatchHub, key: &str, value: &str) -> i64 {
        let cmd = Command::Txn(TxnRequest::single(RequestOp::Put(PutRequest {
            key: key.into(),
            value: value.into(),
            ..PutRequest::default()
        })));
        let a = m.apply(&cmd, &[]).expect("apply");
        hub.publish(a.response.revision, &a.events);
        a.response.revision
    }

    fn drain(rx: &mut mpsc::Receiver<WatchMessage>) -> Vec<(i64, Vec<u8>)> {
        let mut out = Vec::new();
        while let Ok(msg) = rx.try_recv() {
            if let WatchMessage::Events { events, .. } = msg {
                out.extend(events.iter().map(|e| (e.kv.mod_revision, e.kv.value)));
            }
        }
        out
    }

    /// Watchers of one revision share its events; each gets only those in its range, and
    /// the shared encoding is sliced to them.
    #[test]
    fn watchers_share_a_revision_and_each_gets_its_own_events() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut m = Mvcc::open(backend::open(dir.path()).expect("db")).expect("mvcc");
        let hub = WatchHub::default();
        let (sid, _tx, mut rx) = hub.open_stream(16);
        let range = |k: &str, e: &str, id: i64, prev_kv| {
            let spec = WatchSpec {
                key: k.into(),
                range_end: e.into(),
                prev_kv,
                ..WatchSpec::default()
            };
            hub.add(&m, sid, id, spec);
        };
        range("a", "z", 1, false); // all three keys
        range("b", "c", 2, false); // only b
        range("a", "z", 3, true); // all three, with previous versions
        put(&mut m, &hub, "b", "old");
        while rx.try_recv().is_ok() {}
        let ops = ["a", "b", "c"]
            .map(|k| {
                RequestOp::Put(PutRequest {
                    key: k.into(),
                    value: format!("{k}1").into(),
                    prev_kv: true,
                    ..PutRequest::default()
                })
            })
            .to_vec();
        let txn = Command::Txn(TxnRequest {
            success: ops,
            ..TxnRequest::default()
        });
        let a = m.apply(&txn, &[]).expect("apply");
        hub.publish(a.response.revision, &a.events);
        // A stand-in encoding: each event as its key and, when present, its previous value.
        let encode = |events: &[Event], prev_kv: bool| {
            let mut buf = BytesMut::new();
            let mut ends = Vec::new();
            for e in events {
                buf.extend_from_slice(&e.kv.key);
                if prev_kv && let Some(p) = &e.prev_kv {
                    buf.extend_from_slice(b"<");
                    buf.extend_from_slice(&p.value);
                }
                ends.push(buf.len());
            }
            Encoded {
                buf: buf.freeze(),
                ends,
            }
        };
        let mut got = Vec::new();
        while let Ok(WatchMessage::Events {
            watch_id, events, ..
        }) = rx.try_recv()
        {
            let keys: Vec<_> = events.iter().map(|e| e.kv.key).collect();
            let prevs = events.iter().filter(|e| e.prev_kv.is_some()).count();
            got.push((watch_id, keys, prevs, events.encoded(encode)));
        }
        got.sort_by_key(|g| g.0);
        let abc = vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()];
        assert_eq!(
            got,
            vec![
                (1, abc.clone(), 0, Bytes::from_static(b"abc")),
                (2, vec![b"b".to_vec()], 0, Bytes::from_static(b"b")),
                (3, abc, 1, Bytes::from_static(b"ab<oldc")),
            ]
        );
    }

    #[test]
    fn a_parked_watcher_catches_up_without_gaps_or_repeats() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut m = Mvcc::open(backend::open(dir.path()).expect("db")).expect("mvcc");
        let hub = WatchHub::default();
        let (sid, _tx, mut rx) = hub.open_stream(2);
        let spec = WatchSpec {
            key: b"k".to_vec(),
            range_end: b"l".to_vec(),
            ..WatchSpec::default()
        };
        hub.add(&m, sid, 7, spec);
        let mut seen = Vec::new();
        for i in 0..50 {
            put(&mut m, &hub, &format!("k{}", i % 5), &i.to_string());
            put(&mut m, &hub, "other", "x");
            if i % 7 == 0 {
                seen.extend(drain(&mut rx));
                hub.catch_up(&m);
            }
        }
        loop {
            seen.extend(drain(&mut rx));
            if !hub.catch_up(&m) {
                seen.extend(drain(&mut rx));
                break;
            }
        }
        let want: Vec<(i64, Vec<u8>)> = (0..50)
            .map(|i| (2 * i + 1, i.to_string().into_bytes()))
            .collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn a_watch_from_a_compacted_revision_is_told_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut m = Mvcc::open(backend::open(dir.path()).expect("db")).expect("mvcc");
        let hub = WatchHub::default();
        for i in 0..5 {
            put(&mut m, &hub, "a", &i.to_string());
        }
        m.apply(&Command::Compact { revision: 4 }, &[])
            .expect("compact");
        let (sid, _tx, mut rx) = hub.open_stream(8);
        hub.add(
            &m,
            sid,
            1,
            WatchSpec {
                key: b"a".to_vec(),
                start_revision: 2,
                ..WatchSpec::default()
            },
        );
        hub.catch_up(&m);
        assert_eq!(
            rx.try_recv().expect("message"),
            WatchMessage::Compacted {
                watch_id: 1,
                compact_revision: 4
            }
        );
        assert_eq!(hub.watcher_count(), 0);
    }

    #[test]
    fn a_progress_request_is_answered_once_no_watcher_is_behind() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut m = Mvcc::open(backend::open(dir.path()).expect("db")).expect("mvcc");
        let hub = WatchHub::default();
        for i in 0..5 {
            put(&mut m, &hub, "a", &i.to_string());
        }
        m.apply(&Command::Compact { revision: 4 }, &[])
            .expect("compact");
        let (sid, _tx, mut rx) = hub.open_stream(8);
        let behind = WatchSpec {
            key: b"a".to_vec(),
            start_revision: 2,
            ..WatchSpec::default()
        };
        hub.add(&m, sid, 1, behind);
        // Not answered while the watcher is behind …
        hub.request_progress(&m, sid);
        assert!(rx.try_recv().is_err());
        // … and answered when catch-up removes it as compacted.
        hub.catch_up(&m);
        assert!(matches!(rx.try_recv(), Ok(WatchMessage::Compacted { .. })));
        assert_eq!(
            rx.try_recv().expect("progress"),
            WatchMessage::Progress {
                watch_id: -1,
                revision: 5
            }
        );
    }
}
