//! What a watcher is sent: views of revisions' events that every watcher shares.
//!
//! The apply path clones a revision's events once, not once per watcher, and a service's
//! encoding of them is made once and reused by every stream (see [`WatchEvents::encoded`]),
//! as is what a service makes of each event (its decoding: [`WatchEvents::shared`]).
//! A watcher that wants only some of a revision's events holds the indices it wants; one that
//! is caught up from disk holds several revisions in one message, as etcd sends an unsynced
//! watcher's backlog.

use std::any::Any;
use std::sync::{Arc, OnceLock};

use prost::bytes::{Bytes, BytesMut};

use crate::command::{Event, EventKind};
use crate::key_index::range_bounds;

use super::Tags;

/// One revision's events, shared by every watcher that receives any of them.
#[derive(Debug)]
pub(super) struct SharedRevision {
    events: Vec<Event>,
    /// Encodings by the etcd service, without and with `prev_kv`.
    encoded: [OnceLock<Encoded>; 2],
    /// What a service made of each event, by index, once one asked (see
    /// [`WatchEvents::shared`]).
    made: OnceLock<Box<[OnceLock<Made>]>>,
}

/// What a service made of an event, of a type the store does not know.
type Made = Arc<dyn Any + Send + Sync>;

impl SharedRevision {
    pub(super) fn new(events: Vec<Event>) -> Arc<SharedRevision> {
        Arc::new(SharedRevision {
            events,
            encoded: [OnceLock::new(), OnceLock::new()],
            made: OnceLock::new(),
        })
    }

    /// What `make` makes of event `i`, made once and then shared.
    fn made<T: Send + Sync + 'static>(&self, i: usize, make: &impl Fn(&Event) -> T) -> Arc<T> {
        let slots = self.made.get_or_init(|| {
            std::iter::repeat_with(OnceLock::new)
                .take(self.events.len())
                .collect()
        });
        let event = &self.events[i];
        let made = slots[i].get_or_init(|| Arc::new(make(event)));
        // A second service's type: made for this watcher alone.
        Arc::clone(made)
            .downcast::<T>()
            .unwrap_or_else(|_| Arc::new(make(event)))
    }

    pub(super) fn events(&self) -> &[Event] {
        &self.events
    }
}

/// A revision's events encoded one after another, and where each ends.
#[derive(Debug, Clone)]
pub struct Encoded {
    pub buf: Bytes,
    pub ends: Vec<usize>,
}

/// Which events of a revision a watcher gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Pick {
    Nothing,
    All,
    Some(Vec<usize>),
}

/// A watcher's share of one revision.
#[derive(Debug, Clone)]
pub(super) struct Part {
    shared: Arc<SharedRevision>,
    /// `None`: all of the revision's events.
    pick: Option<Arc<[usize]>>,
}

impl Part {
    /// `None` for [`Pick::Nothing`].
    pub(super) fn new(shared: Arc<SharedRevision>, pick: Pick) -> Option<Part> {
        let pick = match pick {
            Pick::Nothing => return None,
            Pick::All => None,
            Pick::Some(ix) => Some(ix.into()),
        };
        Some(Part { shared, pick })
    }

    fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        let all = self.pick.is_none().then(|| 0..self.shared.events.len());
        all.into_iter()
            .flatten()
            .chain(self.pick.iter().flat_map(|p| p.iter().copied()))
    }

    fn len(&self) -> usize {
        self.pick
            .as_ref()
            .map_or(self.shared.events.len(), |p| p.len())
    }
}

/// The parts of one message: one revision on the apply path (no allocation beyond the
/// `Arc`s), several when a backlog is caught up.
#[derive(Debug, Clone)]
enum Parts {
    One(Part),
    Many(Arc<[Part]>),
}

/// What one watcher receives in one message: a view of shared events.
#[derive(Debug, Clone)]
pub struct WatchEvents {
    parts: Parts,
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
        let part = Part {
            shared: SharedRevision::new(events),
            pick: None,
        };
        WatchEvents::one(part, prev_kv)
    }

    pub(super) fn one(part: Part, prev_kv: bool) -> WatchEvents {
        WatchEvents {
            parts: Parts::One(part),
            prev_kv,
        }
    }

    /// Several revisions' parts, oldest first; `None` when there are none.
    pub(super) fn many(mut parts: Vec<Part>, prev_kv: bool) -> Option<WatchEvents> {
        let parts = match parts.len() {
            0 => return None,
            1 => Parts::One(parts.pop().expect("invariant: one part")),
            _ => Parts::Many(parts.into()),
        };
        Some(WatchEvents { parts, prev_kv })
    }

    fn parts(&self) -> &[Part] {
        match &self.parts {
            Parts::One(p) => std::slice::from_ref(p),
            Parts::Many(ps) => ps,
        }
    }

    pub fn len(&self) -> usize {
        self.parts().iter().map(Part::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The events, owned, oldest first; `prev_kv` only where the watcher asked for it.
    pub fn iter(&self) -> impl Iterator<Item = Event> + '_ {
        self.parts().iter().flat_map(move |part| {
            part.indices().map(move |i| {
                let e = &part.shared.events[i];
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
        })
    }

    pub fn to_vec(&self) -> Vec<Event> {
        self.iter().collect()
    }

    /// The events, oldest first, each beside what `make` makes of it. `make` runs once per
    /// event, on whichever stream gets there first, and every other watcher of the revision
    /// gets the same `Arc`: a service whose watchers all decode the same events decodes each
    /// once, whatever the store knows of them (nothing). The events are borrowed, not
    /// copied, and carry their previous versions whenever the store kept them, whether or
    /// not this watcher asked. One type is kept per event: a second service's `T` is made
    /// for each of its watchers.
    pub fn shared<'a, T: Send + Sync + 'static>(
        &'a self,
        make: impl Fn(&Event) -> T + 'a,
    ) -> impl Iterator<Item = (&'a Event, Arc<T>)> + 'a {
        let make = Arc::new(make);
        self.parts().iter().flat_map(move |part| {
            let make = Arc::clone(&make);
            part.indices()
                .map(move |i| (&part.shared.events[i], part.shared.made(i, &*make)))
        })
    }

    /// These events as `encode` writes them, one after another. `encode` runs once per
    /// revision (and `prev_kv` setting), on whichever stream sends them first; every other
    /// watcher's message shares its buffer (or, for a watcher that wants only some of the
    /// revision's events or receives several revisions, copies their slices).
    pub fn encoded(&self, encode: impl Fn(&[Event], bool) -> Encoded) -> Bytes {
        let one = |part: &Part| {
            part.shared.encoded[usize::from(self.prev_kv)]
                .get_or_init(|| encode(&part.shared.events, self.prev_kv))
                .clone()
        };
        if let Parts::One(part @ Part { pick: None, .. }) = &self.parts {
            return one(part).buf;
        }
        let mut out = BytesMut::new();
        for part in self.parts() {
            let enc = one(part);
            match &part.pick {
                None => out.extend_from_slice(&enc.buf),
                Some(ix) => {
                    for &i in ix.iter() {
                        let start = if i == 0 { 0 } else { enc.ends[i - 1] };
                        out.extend_from_slice(&enc.buf[start..enc.ends[i]]);
                    }
                }
            }
        }
        out.freeze()
    }
}

/// What a watcher asks for.
#[derive(Debug, Clone, Default)]
pub struct WatchSpec {
    pub key: Vec<u8>,
    /// etcd's range end: empty for the key alone, `\0` for every key from `key` on.
    pub range_end: Vec<u8>,
    /// 0: from the next revision.
    pub start_revision: i64,
    pub prev_kv: bool,
    /// The watcher cannot do without previous versions (the cluster API converts deletes
    /// and selector exits from them): a position at the compaction revision itself, whose
    /// previous versions compaction dropped, counts as compacted for it.
    pub needs_prev_kv: bool,
    pub no_put: bool,
    pub no_delete: bool,
    /// Only events the hub's tagger gives this tag (see [`Tagger`](super::Tagger)).
    pub tag: Option<String>,
}

impl WatchSpec {
    /// Whether a watcher whose next revision is `next_rev` has lost history to compaction at
    /// `compacted`: the one rule for creation and for catch-up, on every face.
    pub fn is_compacted(&self, next_rev: i64, compacted: i64) -> bool {
        is_compacted(self.needs_prev_kv, next_rev, compacted)
    }
}

fn is_compacted(needs_prev_kv: bool, next_rev: i64, compacted: i64) -> bool {
    next_rev < compacted || (needs_prev_kv && next_rev == compacted && compacted > 0)
}

/// The keys a registered watcher wants (and its tag), packed into one allocation. The hub
/// keeps one per watcher for as long as it lives, with its [`Options`], so these two are most
/// of what a watcher costs (see docs/benchmarks.md, memory per watcher); the start revision,
/// used once, is not kept.
///
/// ```text
///  bytes: | key (key_len) | range_end (end_len) | tag (the rest, if Options::TAG) |
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Interest {
    bytes: Box<[u8]>,
    key_len: u32,
    end_len: u32,
}

/// A registered watcher's options, one bit each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(super) struct Options(u8);

impl Options {
    const PREV_KV: u8 = 1;
    const NEEDS_PREV_KV: u8 = 1 << 1;
    const NO_PUT: u8 = 1 << 2;
    const NO_DELETE: u8 = 1 << 3;
    const TAG: u8 = 1 << 4;

    pub(super) fn of(spec: &WatchSpec) -> Options {
        let bit = |on: bool, b: u8| if on { b } else { 0 };
        Options(
            bit(spec.prev_kv, Self::PREV_KV)
                | bit(spec.needs_prev_kv, Self::NEEDS_PREV_KV)
                | bit(spec.no_put, Self::NO_PUT)
                | bit(spec.no_delete, Self::NO_DELETE)
                | bit(spec.tag.is_some(), Self::TAG),
        )
    }

    pub(super) fn prev_kv(self) -> bool {
        self.0 & Self::PREV_KV != 0
    }

    pub(super) fn needs_prev_kv(self) -> bool {
        self.0 & Self::NEEDS_PREV_KV != 0
    }

    pub(super) fn tagged(self) -> bool {
        self.0 & Self::TAG != 0
    }

    /// Whether a watcher whose next revision is `next_rev` has lost history to compaction
    /// at `compacted` ([`WatchSpec::is_compacted`]).
    pub(super) fn is_compacted(self, next_rev: i64, compacted: i64) -> bool {
        is_compacted(self.needs_prev_kv(), next_rev, compacted)
    }

    /// Only what a catch-up's history read depends on.
    pub(super) fn for_history(self) -> Options {
        Options(self.0 & Self::NEEDS_PREV_KV)
    }
}

impl Interest {
    pub(super) fn new(spec: &WatchSpec) -> Interest {
        let tag = spec.tag.as_deref().unwrap_or_default().as_bytes();
        let mut bytes = Vec::with_capacity(spec.key.len() + spec.range_end.len() + tag.len());
        bytes.extend_from_slice(&spec.key);
        bytes.extend_from_slice(&spec.range_end);
        bytes.extend_from_slice(tag);
        // A gRPC message's length is 32 bits: no key is longer.
        let len = |b: &[u8]| u32::try_from(b.len()).expect("invariant: a key is under 4 GiB");
        Interest {
            bytes: bytes.into_boxed_slice(),
            key_len: len(&spec.key),
            end_len: len(&spec.range_end),
        }
    }

    /// The key range alone, without the tag: what a catch-up reads history for.
    pub(super) fn without_tag(&self) -> Interest {
        Interest {
            bytes: self.bytes[..self.tag_start()].into(),
            key_len: self.key_len,
            end_len: self.end_len,
        }
    }

    fn tag_start(&self) -> usize {
        self.key_len as usize + self.end_len as usize
    }

    pub(super) fn key(&self) -> &[u8] {
        &self.bytes[..self.key_len as usize]
    }

    pub(super) fn range_end(&self) -> &[u8] {
        &self.bytes[self.key_len as usize..self.tag_start()]
    }

    /// The tag (see [`Tagger`](super::Tagger)), for a watcher whose options say it has one.
    pub(super) fn tag(&self, options: Options) -> Option<&str> {
        options.tagged().then(|| {
            std::str::from_utf8(&self.bytes[self.tag_start()..])
                .expect("invariant: the tag was a str")
        })
    }

    fn matches(&self, key: &[u8]) -> bool {
        use std::ops::RangeBounds;
        RangeBounds::<&[u8]>::contains(&range_bounds(self.key(), self.range_end()), &key)
    }

    fn wants(&self, options: Options, e: &Event, tags: Option<&Vec<String>>) -> bool {
        if let Some(tag) = self.tag(options)
            && !tags.is_some_and(|t| t.iter().any(|t| t == tag))
        {
            return false;
        }
        match e.kind {
            EventKind::Put if options.0 & Options::NO_PUT != 0 => false,
            EventKind::Delete if options.0 & Options::NO_DELETE != 0 => false,
            _ => self.matches(&e.kv.key),
        }
    }

    /// Which of `events` a watcher with these options gets.
    pub(super) fn pick(&self, options: Options, events: &[Event], tags: &Tags) -> Pick {
        let wanted = |i: usize| self.wants(options, &events[i], tags.get(i));
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::request::KeyValue;

    fn put(key: &str, revision: i64) -> Event {
        Event {
            kind: EventKind::Put,
            kv: KeyValue {
                key: key.as_bytes().to_vec(),
                mod_revision: revision,
                value: format!("v{revision}").into_bytes(),
                ..KeyValue::default()
            },
            prev_kv: None,
        }
    }

    /// Two watchers of one revision, one wanting all of it and one a single event: each
    /// event is made once, and both get the same value for it.
    #[test]
    fn each_event_is_made_once_for_every_watcher() {
        let shared = SharedRevision::new(vec![put("a", 7), put("b", 7)]);
        let all = WatchEvents::one(
            Part::new(Arc::clone(&shared), Pick::All).expect("a part"),
            true,
        );
        let second = WatchEvents::one(
            Part::new(Arc::clone(&shared), Pick::Some(vec![1])).expect("a part"),
            false,
        );
        let made = AtomicUsize::new(0);
        let make = |e: &Event| {
            made.fetch_add(1, Ordering::Relaxed);
            String::from_utf8(e.kv.key.clone()).expect("utf-8")
        };
        let first: Vec<(Vec<u8>, Arc<String>)> = all
            .shared(make)
            .map(|(e, m)| (e.kv.key.clone(), m))
            .collect();
        let again: Vec<Arc<String>> = second.shared(make).map(|(_, m)| m).collect();
        assert_eq!(made.load(Ordering::Relaxed), 2);
        assert_eq!(first[0].0, b"a");
        assert_eq!(*first[1].1, "b");
        assert!(Arc::ptr_eq(&first[1].1, &again[0]));
        // Another type is made for its caller, not kept.
        let lengths: Vec<Arc<usize>> = all
            .shared(|e: &Event| e.kv.value.len())
            .collect::<Vec<_>>()
            .into_iter()
            .map(|(_, m)| m)
            .collect();
        assert_eq!(*lengths[0], 2);
        assert_eq!(made.load(Ordering::Relaxed), 2);
    }
}
