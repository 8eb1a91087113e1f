//! Where the hub keeps its watchers: in pages of slots, and each stream's watch ids in a sorted
//! list. Both are what a watcher costs for as long as it lives, and a hash map spends up to
//! twice an entry's size on spare buckets (it doubles, and stays half full after each step);
//! these spend at most one page per member, and nothing per watcher beyond its entry.
//!
//! A watcher's id is its slot and a serial number:
//!
//! ```text
//!  id (u64): | serial (32 bits) | slot index (32 bits) |
//! ```
//!
//! A freed slot is reused by the next watcher, with a new serial, so an id held across an
//! unlock (the catch-up task holds them while it reads history) finds nothing, not a stranger,
//! once its watcher is gone: a mix-up needs 2^32 watchers created in between.

use super::Watcher;

/// Slots per page: 1,024 watchers of 56 bytes, 56 KiB.
const PAGE: usize = 1024;

/// The hub's watchers by id.
#[derive(Debug, Default)]
pub(super) struct Watchers {
    pages: Vec<Box<[Option<Watcher>]>>,
    /// Slots whose watcher was removed, reused first.
    free: Vec<u32>,
    len: usize,
    serial: u32,
}

fn split(id: u64) -> (u32, usize) {
    ((id >> 32) as u32, (id & u64::from(u32::MAX)) as usize)
}

fn join(serial: u32, slot: usize) -> u64 {
    (u64::from(serial) << 32) | slot as u64
}

impl Watchers {
    /// Adds a watcher (its `serial` is set here) and returns its id.
    pub(super) fn insert(&mut self, mut w: Watcher) -> u64 {
        self.serial = self.serial.wrapping_add(1);
        w.serial = self.serial;
        let slot = match self.free.pop() {
            Some(slot) => slot as usize,
            None => {
                let slot = self.pages.len() * PAGE;
                self.pages.push((0..PAGE).map(|_| None).collect());
                self.free
                    .extend((slot as u32 + 1..(slot + PAGE) as u32).rev());
                slot
            }
        };
        self.pages[slot / PAGE][slot % PAGE] = Some(w);
        self.len += 1;
        join(self.serial, slot)
    }

    fn slot(&self, id: u64) -> Option<&Option<Watcher>> {
        let (serial, slot) = split(id);
        let s = self.pages.get(slot / PAGE)?.get(slot % PAGE)?;
        s.as_ref().is_some_and(|w| w.serial == serial).then_some(s)
    }

    pub(super) fn get(&self, id: u64) -> Option<&Watcher> {
        self.slot(id)?.as_ref()
    }

    pub(super) fn get_mut(&mut self, id: u64) -> Option<&mut Watcher> {
        self.slot(id)?;
        let (_, slot) = split(id);
        self.pages[slot / PAGE][slot % PAGE].as_mut()
    }

    pub(super) fn remove(&mut self, id: u64) -> Option<Watcher> {
        self.slot(id)?;
        let (_, slot) = split(id);
        let w = self.pages[slot / PAGE][slot % PAGE].take();
        self.free.push(slot as u32);
        self.len -= 1;
        w
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &Watcher)> {
        self.pages.iter().enumerate().flat_map(|(p, page)| {
            page.iter().enumerate().filter_map(move |(i, w)| {
                let w = w.as_ref()?;
                Some((join(w.serial, p * PAGE + i), w))
            })
        })
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut Watcher)> {
        self.pages.iter_mut().enumerate().flat_map(|(p, page)| {
            page.iter_mut().enumerate().filter_map(move |(i, w)| {
                let w = w.as_mut()?;
                Some((join(w.serial, p * PAGE + i), w))
            })
        })
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Watcher> {
        self.iter().map(|(_, w)| w)
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Watcher> {
        self.iter_mut().map(|(_, w)| w)
    }
}

/// A stream's watchers by watch id, sorted by it. Ids the hub assigns only grow, so inserts
/// append; a client's own ids may land anywhere.
#[derive(Debug, Default)]
pub(super) struct WatchIds(Vec<(i64, u64)>);

impl WatchIds {
    fn find(&self, watch_id: i64) -> Result<usize, usize> {
        self.0.binary_search_by_key(&watch_id, |(w, _)| *w)
    }

    pub(super) fn contains_key(&self, watch_id: i64) -> bool {
        self.find(watch_id).is_ok()
    }

    pub(super) fn get(&self, watch_id: i64) -> Option<u64> {
        self.find(watch_id).ok().map(|i| self.0[i].1)
    }

    /// Adds `watch_id` (the caller has checked it is not there).
    pub(super) fn insert(&mut self, watch_id: i64, id: u64) {
        match self.find(watch_id) {
            Ok(i) => self.0[i].1 = id,
            Err(i) => self.0.insert(i, (watch_id, id)),
        }
    }

    pub(super) fn remove(&mut self, watch_id: i64) -> Option<u64> {
        let i = self.find(watch_id).ok()?;
        let id = self.0.remove(i).1;
        // A stream whose watchers went shrinks with them.
        if self.0.capacity() > 64 && self.0.len() < self.0.capacity() / 4 {
            self.0.shrink_to(self.0.len() * 2);
        }
        Some(id)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().map(|(_, id)| *id)
    }
}

#[cfg(test)]
mod tests {
    use super::super::events::{Interest, Options};
    use super::*;
    use crate::watch::WatchSpec;

    fn watcher(watch_id: i64) -> Watcher {
        let spec = WatchSpec {
            key: b"k".to_vec(),
            ..WatchSpec::default()
        };
        Watcher {
            stream: 1,
            watch_id,
            next_rev: 1,
            interest: Interest::new(&spec),
            options: Options::of(&spec),
            synced: true,
            serial: 0,
        }
    }

    #[test]
    fn a_freed_slot_is_reused_and_its_old_id_finds_nothing() {
        let mut ws = Watchers::default();
        let a = ws.insert(watcher(1));
        let b = ws.insert(watcher(2));
        assert_eq!(ws.len(), 2);
        assert_eq!(ws.get(a).map(|w| w.watch_id), Some(1));
        assert_eq!(ws.remove(a).map(|w| w.watch_id), Some(1));
        assert!(ws.remove(a).is_none(), "removed once");
        let c = ws.insert(watcher(3));
        assert_eq!(c & 0xffff_ffff, a & 0xffff_ffff, "the slot is reused");
        assert_ne!(c, a);
        assert!(
            ws.get(a).is_none(),
            "an old id does not find the new watcher"
        );
        assert!(ws.get_mut(a).is_none());
        let mut seen: Vec<(u64, i64)> = ws.iter().map(|(id, w)| (id, w.watch_id)).collect();
        seen.sort();
        let mut want = vec![(b, 2), (c, 3)];
        want.sort();
        assert_eq!(seen, want);
        for (id, w) in ws.iter_mut() {
            assert_eq!(Some(id), [b, c].into_iter().find(|x| *x == id));
            w.next_rev = 9;
        }
        assert!(ws.values().all(|w| w.next_rev == 9));
    }

    #[test]
    fn pages_are_added_as_needed() {
        let mut ws = Watchers::default();
        let ids: Vec<u64> = (0..(PAGE as i64 * 2 + 5))
            .map(|i| ws.insert(watcher(i)))
            .collect();
        assert_eq!(ws.len(), PAGE * 2 + 5);
        assert_eq!(ws.pages.len(), 3);
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(ws.get(*id).map(|w| w.watch_id), Some(i as i64));
        }
        for id in &ids {
            ws.remove(*id);
        }
        assert_eq!((ws.len(), ws.iter().count()), (0, 0));
    }

    #[test]
    fn watch_ids_stay_sorted_whatever_the_order() {
        let mut ids = WatchIds::default();
        for (w, id) in [(5, 50), (1, 10), (9, 90), (3, 30)] {
            ids.insert(w, id);
        }
        assert_eq!(ids.values().collect::<Vec<_>>(), vec![10, 30, 50, 90]);
        assert!(ids.contains_key(3) && !ids.contains_key(4));
        assert_eq!(ids.get(9), Some(90));
        assert_eq!(ids.remove(5), Some(50));
        assert_eq!(ids.remove(5), None);
        assert_eq!(ids.values().collect::<Vec<_>>(), vec![10, 30, 90]);
    }
}
