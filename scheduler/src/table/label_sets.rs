//! The placed pods' label sets: each distinct namespace and labels (all a `Matches` term
//! reads of a pod) interned once, with how many pods on each row have it. A term registered
//! while pods are placed is counted once per label set on each row
//! ([`super::NodeTable::count_term`]), not once per pod: pods of one owner share their
//! labels, so a cluster of a hundred thousand pods has a few hundred sets.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use foldhash::HashMap;

use crate::model::PodInfo;

/// The hash of a pod's label set, worked out before the table's locks are taken.
pub(super) fn label_hash(pod: &PodInfo) -> u64 {
    let mut h = foldhash::fast::FixedState::default().build_hasher();
    pod.namespace.hash(&mut h);
    pod.labels.hash(&mut h);
    h.finish()
}

/// A label set, known by one pod that has it, and hashed by [`label_hash`].
#[derive(Debug, Clone)]
struct Key {
    hash: u64,
    pod: Arc<PodInfo>,
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
            && self.pod.namespace == other.pod.namespace
            && self.pod.labels == other.pod.labels
    }
}

impl Eq for Key {}

/// See the module documentation.
#[derive(Debug, Default, Clone)]
pub(super) struct LabelSets {
    ids: HashMap<Key, u32>,
    /// By id: a pod with the set, and how many placed pods have it (`None`: a free id).
    sets: Vec<Option<(Arc<PodInfo>, u32)>>,
    free: Vec<u32>,
    /// Per row: the sets of its pods, with how many pods have each.
    rows: Vec<Vec<(u32, u32)>>,
}

impl LabelSets {
    pub(super) fn push_row(&mut self) {
        self.rows.push(Vec::new());
    }

    /// Row `row` goes; the last row takes its place.
    pub(super) fn swap_remove_row(&mut self, row: usize) {
        for (set, n) in std::mem::take(&mut self.rows[row]) {
            self.release(set, n);
        }
        self.rows.swap_remove(row);
    }

    /// Counts `pod` (whose [`label_hash`] is `hash`) on `row`, or stops counting it.
    pub(super) fn count(&mut self, row: usize, pod: &Arc<PodInfo>, hash: u64, add: bool) {
        let key = Key {
            hash,
            pod: pod.clone(),
        };
        if add {
            let set = match self.ids.get(&key) {
                Some(&set) => set,
                None => {
                    let set = match self.free.pop() {
                        Some(set) => set,
                        None => {
                            self.sets.push(None);
                            (self.sets.len() - 1) as u32
                        }
                    };
                    self.sets[set as usize] = Some((pod.clone(), 0));
                    self.ids.insert(key, set);
                    set
                }
            };
            if let Some((_, n)) = &mut self.sets[set as usize] {
                *n += 1;
            }
            let on = &mut self.rows[row];
            match on.iter_mut().find(|(s, _)| *s == set) {
                Some((_, n)) => *n += 1,
                None => on.push((set, 1)),
            }
        } else {
            let Some(&set) = self.ids.get(&key) else {
                return;
            };
            let on = &mut self.rows[row];
            if let Some(i) = on.iter().position(|(s, _)| *s == set) {
                on[i].1 -= 1;
                if on[i].1 == 0 {
                    on.swap_remove(i);
                }
                self.release(set, 1);
            }
        }
    }

    /// `n` pods with set `set` are counted no more; a set no pod has goes.
    fn release(&mut self, set: u32, n: u32) {
        let Some((pod, count)) = &mut self.sets[set as usize] else {
            return;
        };
        *count -= n;
        if *count == 0 {
            let key = Key {
                hash: label_hash(pod),
                pod: pod.clone(),
            };
            self.ids.remove(&key);
            self.sets[set as usize] = None;
            self.free.push(set);
        }
    }

    /// Per row, how many of its pods `selects` selects, deciding once per set.
    pub(super) fn count_selected(&self, selects: impl Fn(&PodInfo) -> bool) -> Vec<u32> {
        let mut verdicts: Vec<Option<bool>> = vec![None; self.sets.len()];
        self.rows
            .iter()
            .map(|sets| {
                let mut counted = 0;
                for &(set, n) in sets {
                    let verdict = verdicts[set as usize].get_or_insert_with(|| {
                        self.sets[set as usize]
                            .as_ref()
                            .is_some_and(|(pod, _)| selects(pod))
                    });
                    if *verdict {
                        counted += n;
                    }
                }
                counted
            })
            .collect()
    }

    /// How many distinct sets the placed pods have.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, app: &str) -> Arc<PodInfo> {
        let mut p = PodInfo {
            namespace: ns.into(),
            name: format!("{ns}-{app}"),
            ..PodInfo::default()
        };
        p.labels.insert("app".into(), app.into());
        Arc::new(p)
    }

    #[test]
    fn pods_alike_share_a_set_per_row_and_a_set_no_pod_has_goes() {
        let mut s = LabelSets::default();
        for _ in 0..3 {
            s.push_row();
        }
        let (web, db, other_ns) = (pod("a", "web"), pod("a", "db"), pod("b", "web"));
        for (row, p) in [(0, &web), (0, &web), (1, &web), (1, &db), (2, &other_ns)] {
            s.count(row, p, label_hash(p), true);
        }
        assert_eq!(s.len(), 3, "namespace and labels make a set");
        let selects_web_in_a = |p: &PodInfo| p.namespace == "a" && p.labels["app"] == "web";
        assert_eq!(s.count_selected(selects_web_in_a), [2, 1, 0]);

        s.count(1, &db, label_hash(&db), false);
        assert_eq!(s.len(), 2);
        // Row 0 goes; row 2 takes its place.
        s.swap_remove_row(0);
        assert_eq!(s.count_selected(selects_web_in_a), [0, 1]);
        assert_eq!(s.count_selected(|p| p.namespace == "b"), [1, 0]);
        s.count(1, &web, label_hash(&web), false);
        s.count(0, &other_ns, label_hash(&other_ns), false);
        assert_eq!(s.len(), 0);
        // A freed id serves the next set.
        s.count(0, &db, label_hash(&db), true);
        assert_eq!(s.count_selected(|p| p.labels["app"] == "db"), [1, 0]);
    }
}
