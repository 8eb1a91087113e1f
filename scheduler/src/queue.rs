//! The scheduling queue: pending pods in priority order, handed out in batches of one
//! signature; back-off for pods that fit nowhere; retries when the cluster changes.
//!
//! ```text
//!             add / update                    pop_batch
//!   pending ───────────────► active ─────────────────────► in flight
//!                               ▲  ▲                          │ │ │
//!       conflict (Bind lost) ───┘  │ back-off over            │ │ └─ placed: done
//!                                  │ and cluster changed      │ │
//!                     backing off ◄┴───────── unschedulable ◄─┘ └─ conflict: active
//! ```
//!
//! Back-off is 1 s, doubling per failed attempt, at most 10 s. An unschedulable pod goes
//! back to active when an event that can make it fit arrives (a node added or changed, a
//! pod deleted or finished) and its back-off has passed, and at least every minute.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::model::PodInfo;

pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// An unschedulable pod is retried at least this often, events or not.
pub const UNSCHEDULABLE_FLUSH: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Active,
    InFlight,
    Unschedulable { since: Instant, until: Instant },
}

#[derive(Debug)]
struct Entry {
    pod: Arc<PodInfo>,
    signature: u64,
    state: State,
    attempts: u32,
    /// A newer version arrived while the pod was in flight.
    updated: bool,
}

/// Active pods group by (priority, signature); groups are served highest priority first,
/// oldest first within a priority.
#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    groups: HashMap<(i32, u64), VecDeque<String>>,
    /// (priority, sequence) → group key, for the order groups are served in.
    order: BTreeMap<(Reverse<i32>, u64), (i32, u64)>,
    queued_groups: HashMap<(i32, u64), (Reverse<i32>, u64)>,
    seq: u64,
    closed: bool,
}

impl Inner {
    fn activate(&mut self, key: &str) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        e.state = State::Active;
        let g = (e.pod.priority, e.signature);
        self.groups.entry(g).or_default().push_back(key.to_string());
        if !self.queued_groups.contains_key(&g) {
            self.seq += 1;
            let k = (Reverse(g.0), self.seq);
            self.order.insert(k, g);
            self.queued_groups.insert(g, k);
        }
    }
}

/// See the module documentation. Shared by the informer side (add/update/delete, events)
/// and the workers (pop_batch, done).
#[derive(Debug, Default)]
pub struct Queue {
    inner: Mutex<Inner>,
    ready: Condvar,
}

/// How a popped pod's attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// Placed and committed: the queue forgets it.
    Placed,
    /// Lost a race (conflict): straight back to active.
    Retry,
    /// Fits nowhere: back off until the cluster changes.
    Unschedulable,
}

impl Queue {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a pending pod, or replaces the queued version of it.
    pub fn add(&self, pod: Arc<PodInfo>) {
        let key = pod.key();
        let signature = pod.signature();
        let mut q = self.inner.lock();
        match q.entries.get_mut(&key) {
            Some(e) => {
                let moved = e.signature != signature || e.pod.priority != pod.priority;
                e.pod = pod;
                e.signature = signature;
                match e.state {
                    State::InFlight => e.updated = true,
                    State::Active if moved => {
                        // Its group changed: re-file it (the stale group slot is skipped).
                        q.activate(&key);
                    }
                    State::Active => {}
                    State::Unschedulable { .. } if moved => {
                        // Its scheduling-relevant spec changed: it may fit now.
                        q.activate(&key);
                    }
                    // A status or metadata change (our own FailedScheduling condition,
                    // say) does not change where it fits.
                    State::Unschedulable { .. } => {}
                }
            }
            None => {
                q.entries.insert(
                    key.clone(),
                    Entry {
                        pod,
                        signature,
                        state: State::Active,
                        attempts: 0,
                        updated: false,
                    },
                );
                q.activate(&key);
            }
        }
        drop(q);
        self.ready.notify_one();
    }

    /// Forgets a pod (deleted, or bound by someone else).
    pub fn remove(&self, key: &str) {
        self.inner.lock().entries.remove(key);
    }

    /// Up to `max` active pods of one signature, highest priority first; waits up to
    /// `wait` for one. Empty when closed or nothing arrived in time.
    pub fn pop_batch(&self, max: usize, wait: Duration) -> Vec<Arc<PodInfo>> {
        let deadline = Instant::now() + wait;
        let mut q = self.inner.lock();
        loop {
            if q.closed {
                return Vec::new();
            }
            while let Some((&order_key, &g)) = q.order.iter().next() {
                q.order.remove(&order_key);
                q.queued_groups.remove(&g);
                let mut batch = Vec::new();
                let mut keys = q.groups.remove(&g).unwrap_or_default();
                while batch.len() < max {
                    let Some(key) = keys.pop_front() else { break };
                    let Some(e) = q.entries.get_mut(&key) else {
                        continue; // deleted since
                    };
                    if e.state != State::Active || (e.pod.priority, e.signature) != g {
                        continue; // moved to another group, or already taken
                    }
                    e.state = State::InFlight;
                    e.attempts += 1;
                    batch.push(e.pod.clone());
                }
                if !keys.is_empty() {
                    q.groups.insert(g, keys);
                    q.seq += 1;
                    let k = (Reverse(g.0), q.seq);
                    q.order.insert(k, g);
                    q.queued_groups.insert(g, k);
                }
                if !batch.is_empty() {
                    return batch;
                }
            }
            if self.ready.wait_until(&mut q, deadline).timed_out() {
                return Vec::new();
            }
        }
    }

    /// Reports how a popped pod's attempt ended.
    pub fn done(&self, key: &str, how: Done) {
        let mut q = self.inner.lock();
        let Some(e) = q.entries.get_mut(key) else {
            return;
        };
        if e.state != State::InFlight {
            return;
        }
        // A version that arrived in flight is already in `e.pod`.
        let updated = std::mem::take(&mut e.updated);
        match how {
            Done::Placed => {
                // Bound now: a version that arrived meanwhile is for a bound pod.
                q.entries.remove(key);
            }
            Done::Retry => {
                q.activate(key);
                drop(q);
                self.ready.notify_one();
            }
            Done::Unschedulable => {
                let now = Instant::now();
                let backoff = backoff(e.attempts);
                e.state = State::Unschedulable {
                    since: now,
                    until: now + backoff,
                };
                if updated {
                    q.activate(key);
                }
            }
        }
    }

    /// Something changed that can make unschedulable pods fit: every one whose back-off has
    /// passed goes back to active now; the others when theirs passes (see [`Queue::tick`]).
    pub fn cluster_changed(&self) {
        let now = Instant::now();
        let mut q = self.inner.lock();
        let mut wake = Vec::new();
        for (k, e) in q.entries.iter_mut() {
            if let State::Unschedulable { until, .. } = e.state {
                if until <= now {
                    wake.push(k.clone());
                } else {
                    // Retry when the back-off ends: mark by moving `since` into the past.
                    e.state = State::Unschedulable {
                        since: now - UNSCHEDULABLE_FLUSH,
                        until,
                    };
                }
            }
        }
        let n = wake.len();
        for k in wake {
            q.activate(&k);
        }
        drop(q);
        if n > 0 {
            self.ready.notify_all();
        }
    }

    /// Moves to active the unschedulable pods that are due: back-off over and either a
    /// cluster change seen meanwhile or a minute passed. Call about once a second.
    pub fn tick(&self) {
        let now = Instant::now();
        let mut q = self.inner.lock();
        let due: Vec<String> = q
            .entries
            .iter()
            .filter_map(|(k, e)| match e.state {
                State::Unschedulable { since, until }
                    if until <= now && now.duration_since(since) >= UNSCHEDULABLE_FLUSH =>
                {
                    Some(k.clone())
                }
                _ => None,
            })
            .collect();
        let n = due.len();
        for k in due {
            q.activate(&k);
        }
        drop(q);
        if n > 0 {
            self.ready.notify_all();
        }
    }

    /// (active, in flight, unschedulable) counts.
    pub fn depth(&self) -> (usize, usize, usize) {
        let q = self.inner.lock();
        let mut d = (0, 0, 0);
        for e in q.entries.values() {
            match e.state {
                State::Active => d.0 += 1,
                State::InFlight => d.1 += 1,
                State::Unschedulable { .. } => d.2 += 1,
            }
        }
        d
    }

    pub fn is_empty(&self) -> bool {
        self.inner.lock().entries.is_empty()
    }

    pub fn is_closed(&self) -> bool {
        self.inner.lock().closed
    }

    /// Wakes every waiter; `pop_batch` returns empty from now on.
    pub fn close(&self) {
        self.inner.lock().closed = true;
        self.ready.notify_all();
    }
}

/// 1 s after the first failed attempt, doubling, at most 10 s.
pub fn backoff(attempts: u32) -> Duration {
    let shift = attempts.saturating_sub(1).min(16);
    (INITIAL_BACKOFF * (1u32 << shift)).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, priority: i32, cpu: i64) -> Arc<PodInfo> {
        let mut p = PodInfo {
            namespace: "default".into(),
            name: name.into(),
            priority,
            ..PodInfo::default()
        };
        p.requests.milli_cpu = cpu;
        Arc::new(p)
    }

    #[test]
    fn batches_are_one_signature_in_priority_order() {
        let q = Queue::new();
        q.add(pod("a", 0, 100));
        q.add(pod("b", 0, 200));
        q.add(pod("c", 0, 100));
        q.add(pod("d", 10, 100));
        let first = q.pop_batch(10, Duration::ZERO);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].name, "d");
        let second = q.pop_batch(10, Duration::ZERO);
        let names: Vec<&str> = second.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a", "c"]);
        let third = q.pop_batch(10, Duration::ZERO);
        assert_eq!(third[0].name, "b");
        assert!(q.pop_batch(10, Duration::ZERO).is_empty());
    }

    #[test]
    fn batches_respect_the_limit_and_resume() {
        let q = Queue::new();
        for i in 0..5 {
            q.add(pod(&format!("p{i}"), 0, 100));
        }
        assert_eq!(q.pop_batch(2, Duration::ZERO).len(), 2);
        assert_eq!(q.pop_batch(2, Duration::ZERO).len(), 2);
        assert_eq!(q.pop_batch(2, Duration::ZERO).len(), 1);
    }

    #[test]
    fn unschedulable_pods_wait_for_backoff_and_an_event() {
        let q = Queue::new();
        q.add(pod("a", 0, 100));
        let b = q.pop_batch(1, Duration::ZERO);
        q.done(&b[0].key(), Done::Unschedulable);
        assert_eq!(q.depth(), (0, 0, 1));
        // The back-off (1 s) has not passed: an event does not move it yet.
        q.cluster_changed();
        assert!(q.pop_batch(1, Duration::ZERO).is_empty());
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(4), Duration::from_secs(8));
        assert_eq!(backoff(5), Duration::from_secs(10));
        assert_eq!(backoff(30), Duration::from_secs(10));
    }

    #[test]
    fn conflicts_retry_at_once_and_placed_pods_are_forgotten() {
        let q = Queue::new();
        q.add(pod("a", 0, 100));
        let b = q.pop_batch(1, Duration::ZERO);
        q.done(&b[0].key(), Done::Retry);
        let b = q.pop_batch(1, Duration::ZERO);
        assert_eq!(b.len(), 1);
        q.done(&b[0].key(), Done::Placed);
        assert!(q.is_empty());
    }

    #[test]
    fn an_update_in_flight_is_scheduled_again() {
        let q = Queue::new();
        q.add(pod("a", 0, 100));
        let b = q.pop_batch(1, Duration::ZERO);
        q.add(pod("a", 0, 300));
        q.done(&b[0].key(), Done::Retry);
        let again = q.pop_batch(1, Duration::ZERO);
        assert_eq!(again[0].requests.milli_cpu, 300);
    }

    #[test]
    fn removed_pods_are_skipped() {
        let q = Queue::new();
        q.add(pod("a", 0, 100));
        q.add(pod("b", 0, 100));
        q.remove("default/a");
        let b = q.pop_batch(10, Duration::ZERO);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].name, "b");
    }
}
