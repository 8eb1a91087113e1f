//! Which keys carry each tag now: the hub's [`Tagger`] read over the present keyspace, so
//! a list of the pods bound to one node reads those pods instead of decoding every pod.
//!
//! The apply path keeps it, under the keyspace write lock, as it publishes each revision;
//! a reader holding the keyspace read lock therefore sees it at exactly the keyspace's
//! revision. It knows the present only: a read at an older revision scans.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::command::{Event, EventKind, RangeRequest};
use crate::error::StoreError;
use crate::key_index::prefix_end;
use crate::mvcc::Mvcc;

/// The tags of one stored value; none for a value it cannot read.
pub type ValueTags = Arc<dyn Fn(&[u8]) -> Vec<String> + Send + Sync>;

/// Derives tags from a stored value (e.g. `spec.nodeName=n1` from a pod bound to `n1`), for
/// keys under one prefix: watchers that want one tag among thousands are skipped at publish
/// time, and lists of one tag read only the keys that carry it.
#[derive(Clone)]
pub struct Tagger {
    /// Only keys under this prefix are tagged.
    pub prefix: Vec<u8>,
    pub tags: ValueTags,
}

impl std::fmt::Debug for Tagger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tagger")
            .field("prefix", &String::from_utf8_lossy(&self.prefix))
            .finish_non_exhaustive()
    }
}

impl Tagger {
    /// The tags of an event read from history: its new value's and its previous value's, so
    /// a watcher of a tag sees a key both enter and leave it.
    pub fn event_tags(&self, e: &Event) -> Vec<String> {
        if !e.kv.key.starts_with(&self.prefix) {
            return Vec::new();
        }
        let mut tags = self.new_tags(e);
        if let Some(prev) = &e.prev_kv {
            merge(&mut tags, (self.tags)(&prev.value));
        }
        tags
    }

    /// The tags of the key's state after `e`: its new value's, none once deleted.
    fn new_tags(&self, e: &Event) -> Vec<String> {
        match e.kind {
            EventKind::Put => (self.tags)(&e.kv.value),
            EventKind::Delete => Vec::new(),
        }
    }
}

fn merge(into: &mut Vec<String>, more: Vec<String>) {
    for t in more {
        if !into.contains(&t) {
            into.push(t);
        }
    }
}

/// Keys by tag, and each tagged key's tags (only keys with at least one tag are held).
#[derive(Debug, Default)]
pub struct TagIndex {
    by_tag: HashMap<String, BTreeSet<Vec<u8>>>,
    by_key: HashMap<Vec<u8>, Vec<String>>,
}

/// Keys read per step while the index is built from the keyspace.
const BUILD_CHUNK: i64 = 1000;

impl TagIndex {
    /// The index of `mvcc`'s present keyspace under `tagger`.
    pub fn build(tagger: &Tagger, mvcc: &Mvcc) -> Result<TagIndex, StoreError> {
        let mut index = TagIndex::default();
        let end = prefix_end(&tagger.prefix);
        let mut from = tagger.prefix.clone();
        loop {
            let resp = mvcc.range(&RangeRequest {
                key: from,
                range_end: end.clone(),
                limit: BUILD_CHUNK,
                ..RangeRequest::default()
            })?;
            for kv in &resp.kvs {
                index.set(&kv.key, (tagger.tags)(&kv.value));
            }
            let Some(last) = resp.kvs.last().filter(|_| resp.more) else {
                return Ok(index);
            };
            from = last.key.clone();
            from.push(0);
        }
    }

    /// Records one revision's change of a key under the tagger's prefix and returns the
    /// event's tags: the new value's and those the key carried before.
    pub fn apply(&mut self, tagger: &Tagger, e: &Event) -> Vec<String> {
        let mut tags = tagger.new_tags(e);
        let before = self.set(&e.kv.key, tags.clone());
        merge(&mut tags, before);
        tags
    }

    /// Gives `key` exactly `tags`; returns the ones it had.
    fn set(&mut self, key: &[u8], tags: Vec<String>) -> Vec<String> {
        let before = if tags.is_empty() {
            self.by_key.remove(key).unwrap_or_default()
        } else {
            self.by_key
                .insert(key.to_vec(), tags.clone())
                .unwrap_or_default()
        };
        for t in before.iter().filter(|t| !tags.contains(t)) {
            if let Some(keys) = self.by_tag.get_mut(t) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_tag.remove(t);
                }
            }
        }
        for t in tags.iter().filter(|t| !before.contains(t)) {
            self.by_tag
                .entry(t.clone())
                .or_default()
                .insert(key.to_vec());
        }
        before
    }

    /// The keys in `[from, end)` that carry `tag`, in key order (`end` empty: no bound).
    pub fn keys(&self, tag: &str, from: &[u8], end: &[u8]) -> Vec<Vec<u8>> {
        let Some(keys) = self.by_tag.get(tag) else {
            return Vec::new();
        };
        keys.range(from.to_vec()..)
            .take_while(|k| end.is_empty() || k.as_slice() < end)
            .cloned()
            .collect()
    }

    /// Keys that carry at least one tag.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::KeyValue;

    fn tagger() -> Tagger {
        Tagger {
            prefix: b"/p/".to_vec(),
            tags: Arc::new(|v: &[u8]| {
                std::str::from_utf8(v)
                    .ok()
                    .filter(|v| !v.is_empty())
                    .map(|v| vec![format!("n={v}")])
                    .unwrap_or_default()
            }),
        }
    }

    fn event(kind: EventKind, key: &str, value: &str, prev: Option<&str>) -> Event {
        let kv = |v: &str| KeyValue {
            key: key.as_bytes().to_vec(),
            value: v.as_bytes().to_vec(),
            ..KeyValue::default()
        };
        Event {
            kind,
            kv: kv(value),
            prev_kv: prev.map(kv),
        }
    }

    /// A key enters a tag when its value gets it and leaves when the value loses it or the
    /// key is deleted; each event's tags name both sides, as watchers of either need.
    #[test]
    fn keys_enter_and_leave_their_tags() {
        let (t, mut ix) = (tagger(), TagIndex::default());
        assert!(
            ix.apply(&t, &event(EventKind::Put, "/p/a", "", None))
                .is_empty()
        );
        assert_eq!(
            ix.apply(&t, &event(EventKind::Put, "/p/a", "1", Some(""))),
            vec!["n=1"]
        );
        ix.apply(&t, &event(EventKind::Put, "/p/b", "1", None));
        ix.apply(&t, &event(EventKind::Put, "/p/c", "2", None));
        assert_eq!(
            ix.keys("n=1", b"/p/", b"/p0"),
            vec![b"/p/a".to_vec(), b"/p/b".to_vec()]
        );
        assert_eq!(ix.keys("n=1", b"/p/a\0", b""), vec![b"/p/b".to_vec()]);
        assert_eq!(ix.keys("n=1", b"/p/", b"/p/b"), vec![b"/p/a".to_vec()]);
        // Moved: both tags on the event, the key under the new one only.
        let mut moved = ix.apply(&t, &event(EventKind::Put, "/p/a", "2", Some("1")));
        moved.sort();
        assert_eq!(moved, vec!["n=1", "n=2"]);
        assert_eq!(ix.keys("n=1", b"", b""), vec![b"/p/b".to_vec()]);
        assert_eq!(
            ix.keys("n=2", b"", b""),
            vec![b"/p/a".to_vec(), b"/p/c".to_vec()]
        );
        // Deleted: the event still carries the tag the key had.
        assert_eq!(
            ix.apply(&t, &event(EventKind::Delete, "/p/b", "", None)),
            vec!["n=1"]
        );
        assert!(ix.keys("n=1", b"", b"").is_empty());
        assert!(!ix.by_tag.contains_key("n=1"), "an empty tag is dropped");
        assert_eq!(ix.len(), 2);
    }

    /// History's events are tagged from both values, with no index to ask.
    #[test]
    fn history_events_are_tagged_from_both_values() {
        let t = tagger();
        let mut tags = t.event_tags(&event(EventKind::Put, "/p/a", "2", Some("1")));
        tags.sort();
        assert_eq!(tags, vec!["n=1", "n=2"]);
        assert_eq!(
            t.event_tags(&event(EventKind::Delete, "/p/a", "", Some("1"))),
            vec!["n=1"]
        );
        assert!(
            t.event_tags(&event(EventKind::Put, "/q/a", "1", None))
                .is_empty()
        );
    }
}
