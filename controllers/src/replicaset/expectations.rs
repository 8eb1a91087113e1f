//! Expectations (client-go's `ControllerExpectations`): the creates and deletes a
//! ReplicaSet's last sync made that its pod cache has not shown yet. They are kept per
//! ReplicaSet uid (what a pod's controller reference names), so a ReplicaSet deleted and
//! created again under its name starts afresh.
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

/// Outstanding creates and deletes per ReplicaSet uid.
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

    /// Whether the cache shows everything the last sync of `key` did; when not, how long
    /// until the record expires and the cache is trusted anyway.
    pub fn satisfied(&self, key: &str) -> Result<(), Duration> {
        match self.inner().get(key) {
            None => Ok(()),
            Some(e) if e.creates <= 0 && e.deletes.is_empty() => Ok(()),
            Some(e) => match TTL.checked_sub(e.since.elapsed()) {
                None => Ok(()),
                Some(left) => Err(left),
            },
        }
    }

    /// Creates of `key` sent and not yet seen: pods that may appear at any moment.
    pub fn pending_creates(&self, key: &str) -> i32 {
        self.inner().get(key).map_or(0, |e| {
            if e.since.elapsed() > TTL {
                0
            } else {
                i32::try_from(e.creates.max(0)).unwrap_or(i32::MAX)
            }
        })
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
        assert!(e.satisfied("uid").is_ok());
        e.expect("uid", 2, ["/registry/pods/ns/a".to_string()]);
        assert!(e.satisfied("uid").is_err_and(|left| left <= TTL));
        assert_eq!(e.pending_creates("uid"), 2);
        e.created("uid", 1);
        e.deleted("uid", "/registry/pods/ns/a");
        assert!(e.satisfied("uid").is_err());
        e.created("uid", 1);
        assert!(e.satisfied("uid").is_ok());
        assert_eq!(e.pending_creates("uid"), 0);
        e.forget("uid");
        assert_eq!(e.pending(), 0);
    }
}
