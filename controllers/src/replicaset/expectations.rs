//! Expectations (client-go's `ControllerExpectations`): the creates and deletes a
//! ReplicaSet's last sync made that its pod cache has not shown yet.
//!
//! A sync reads the cache. Right after it created 8 pods the cache may still show none of
//! them, and a sync then would create 8 more. So a sync records what it expects to see; the
//! pod informer counts each create and delete off as it arrives; and the ReplicaSet is not
//! scaled again until nothing is outstanding (or the record is older than [`TTL`], when a
//! watch event was lost to a relist: the cache is then trusted again).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long outstanding expectations hold a ReplicaSet back at most.
pub const TTL: Duration = Duration::from_secs(5 * 60);

#[derive(Debug)]
struct Expected {
    creates: i64,
    /// Storage keys of the pods being deleted.
    deletes: HashSet<String>,
    since: Instant,
}

/// Outstanding creates and deletes per ReplicaSet key.
#[derive(Debug, Default)]
pub struct Expectations {
    // Never held across an await.
    inner: Mutex<HashMap<String, Expected>>,
}

impl Expectations {
    fn inner(&self) -> std::sync::MutexGuard<'_, HashMap<String, Expected>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the cache shows everything the last sync of `key` did.
    pub fn satisfied(&self, key: &str) -> bool {
        match self.inner().get(key) {
            None => true,
            Some(e) => (e.creates <= 0 && e.deletes.is_empty()) || e.since.elapsed() > TTL,
        }
    }

    /// A sync of `key` is about to create `creates` pods and delete the pods `deletes`.
    pub fn expect(&self, key: &str, creates: usize, deletes: impl IntoIterator<Item = String>) {
        self.inner().insert(
            key.to_owned(),
            Expected {
                creates: i64::try_from(creates).unwrap_or(i64::MAX),
                deletes: deletes.into_iter().collect(),
                since: Instant::now(),
            },
        );
    }

    /// A pod of `key` was seen created, or one of its creates failed or was never made.
    pub fn created(&self, key: &str, n: usize) {
        if let Some(e) = self.inner().get_mut(key) {
            e.creates -= i64::try_from(n).unwrap_or(i64::MAX);
        }
    }

    /// The pod `pod_key` of `key` was seen deleted (or being deleted), or its delete failed.
    pub fn deleted(&self, key: &str, pod_key: &str) {
        if let Some(e) = self.inner().get_mut(key) {
            e.deletes.remove(pod_key);
        }
    }

    /// The ReplicaSet is gone.
    pub fn forget(&self, key: &str) {
        self.inner().remove(key);
    }

    /// ReplicaSets with outstanding expectations.
    pub fn pending(&self) -> usize {
        self.inner()
            .values()
            .filter(|e| e.creates > 0 || !e.deletes.is_empty())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn satisfied_once_every_create_and_delete_is_seen() {
        let e = Expectations::default();
        assert!(e.satisfied("ns/rs"));
        e.expect("ns/rs", 2, ["/registry/pods/ns/a".to_string()]);
        assert!(!e.satisfied("ns/rs"));
        e.created("ns/rs", 1);
        e.deleted("ns/rs", "/registry/pods/ns/a");
        assert!(!e.satisfied("ns/rs"));
        e.created("ns/rs", 1);
        assert!(e.satisfied("ns/rs"));
        e.forget("ns/rs");
        assert_eq!(e.pending(), 0);
    }
}
