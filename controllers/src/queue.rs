//! The work queue every controller runs on, as client-go's: keys, not events.
//!
//! * **De-duplicated per key.** A key added while it waits is not added twice; a key added
//!   while a worker holds it is queued once more when the worker is done, so the latest
//!   state is always looked at and no two workers sync the same key at once.
//! * **Rate-limited on failure.** A sync that fails is tried again after a delay that doubles
//!   with each consecutive failure of that key (5 ms up to 1000 s, as client-go's default
//!   per-item limiter), so an object that cannot be made right (a quota refusing its pods)
//!   costs a few requests per back-off period, never a hot loop. Success forgets the count.
//! * **Delayed adds** for work that is due later (a pod becoming available after
//!   `minReadySeconds`, a progress deadline).
//!
//! ```text
//!   add ──► dirty? ──no──► processing? ──no──► queue ──get──► worker ──done──┐
//!             │yes             │yes                                          │
//!             ▼                ▼                                             │
//!           (drop)       (re-queued at done) ◄───────────────────────────────┘
//! ```

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// The first retry delay of a failing key, and the longest.
const RETRY_BASE: Duration = Duration::from_millis(5);
const RETRY_MAX: Duration = Duration::from_secs(1000);

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<String>,
    /// Keys waiting in `queue`, or to be re-queued when their worker is done.
    dirty: HashSet<String>,
    /// Keys a worker holds.
    processing: HashSet<String>,
    /// Consecutive failures per key.
    failures: HashMap<String, u32>,
    closed: bool,
}

/// A de-duplicating, rate-limited queue of object keys (`namespace/name`). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct WorkQueue {
    // Never held across an await: every method takes it briefly.
    state: Arc<Mutex<State>>,
    ready: Arc<Notify>,
}

impl WorkQueue {
    pub fn new() -> Self {
        WorkQueue::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `key` unless it is already waiting.
    pub fn add(&self, key: impl Into<String>) {
        let key = key.into();
        let mut s = self.state();
        if s.closed || s.dirty.contains(&key) {
            return;
        }
        s.dirty.insert(key.clone());
        if !s.processing.contains(&key) {
            s.queue.push_back(key);
            drop(s);
            self.ready.notify_one();
        }
    }

    /// Queues `key` after `delay`.
    pub fn add_after(&self, key: impl Into<String>, delay: Duration) {
        let key = key.into();
        if delay.is_zero() {
            return self.add(key);
        }
        let q = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            q.add(key);
        });
    }

    /// Queues `key` again after its back-off, which doubles with each call until
    /// [`WorkQueue::forget`].
    pub fn add_rate_limited(&self, key: &str) {
        let delay = {
            let mut s = self.state();
            let n = s.failures.entry(key.to_owned()).or_insert(0);
            *n = n.saturating_add(1);
            retry_delay(*n)
        };
        self.add_after(key, delay);
    }

    /// The key synced: its back-off starts over.
    pub fn forget(&self, key: &str) {
        self.state().failures.remove(key);
    }

    /// Consecutive failures of `key`.
    pub fn failures(&self, key: &str) -> u32 {
        self.state().failures.get(key).copied().unwrap_or(0)
    }

    /// The next key to sync, held until [`WorkQueue::done`]; `None` once closed.
    pub async fn get(&self) -> Option<String> {
        loop {
            let notified = self.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut s = self.state();
                if s.closed {
                    return None;
                }
                if let Some(key) = s.queue.pop_front() {
                    s.dirty.remove(&key);
                    s.processing.insert(key.clone());
                    // Another waiter may find more.
                    if !s.queue.is_empty() {
                        self.ready.notify_one();
                    }
                    return Some(key);
                }
            }
            notified.await;
        }
    }

    /// The worker is done with `key`; if it was added meanwhile, it is queued again.
    pub fn done(&self, key: &str) {
        let mut s = self.state();
        s.processing.remove(key);
        if s.dirty.contains(key) && !s.closed {
            s.queue.push_back(key.to_owned());
            drop(s);
            self.ready.notify_one();
        }
    }

    /// Keys waiting (not those being synced).
    pub fn len(&self) -> usize {
        self.state().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wakes every worker with `None`; later adds are dropped.
    pub fn close(&self) {
        self.state().closed = true;
        self.ready.notify_waiters();
    }
}

/// client-go's per-item exponential limiter: 5 ms · 2^(n-1), at most 1000 s.
fn retry_delay(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(30);
    RETRY_BASE
        .checked_mul(1u32 << exp)
        .unwrap_or(RETRY_MAX)
        .min(RETRY_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key added while waiting is queued once; added while held, it comes back after
    /// `done`, never to two workers at once.
    #[tokio::test]
    async fn keys_are_deduplicated_and_never_held_twice() {
        let q = WorkQueue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        let a = q.get().await.expect("a");
        assert_eq!(a, "a");
        q.add("a"); // while held
        assert_eq!(q.len(), 1, "not queued while a worker holds it");
        assert_eq!(q.get().await.as_deref(), Some("b"));
        q.done("a");
        assert_eq!(q.get().await.as_deref(), Some("a"), "re-queued at done");
        q.done("a");
        q.done("b");
        assert!(q.is_empty());
        q.close();
        assert_eq!(q.get().await, None);
    }

    #[test]
    fn back_off_doubles_up_to_its_ceiling() {
        assert_eq!(retry_delay(1), Duration::from_millis(5));
        assert_eq!(retry_delay(2), Duration::from_millis(10));
        assert_eq!(retry_delay(11), Duration::from_millis(5120));
        assert_eq!(retry_delay(40), RETRY_MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_wait_longer_until_forgotten() {
        let q = WorkQueue::new();
        q.add_rate_limited("k");
        q.add_rate_limited("k");
        assert_eq!(q.failures("k"), 2);
        assert!(q.is_empty(), "nothing before the delay");
        tokio::time::sleep(Duration::from_millis(11)).await;
        assert_eq!(q.get().await.as_deref(), Some("k"));
        q.forget("k");
        assert_eq!(q.failures("k"), 0);
    }
}
