//! The scheduling queue: the one owner of pending pods. It holds every pending pod this
//! scheduler may place, from the first event that shows it until the store confirms its
//! binding; hands out active pods in batches of one signature, in priority order; backs off
//! pods that fit nowhere; retries them when the cluster changes.
//!
//! ```text
//!             add / update                    pop_batch
//!   pending ───────────────► active ─────────────────────► in flight
//!                               ▲  ▲                          │ │ │
//!   assumed, Bind refused ──────┘  │ back-off over            │ │ └─ placed: assumed until
//!                                  │ and cluster changed      │ │    the store confirms it
//!                     backing off ◄┴───────── unschedulable ◄─┘ └─ conflict: active
//! ```
//!
//! A pod in any state leaves when the informer sees it bound, deleted, or no longer this
//! scheduler's ([`Queue::remove`]); an assumed pod whose Bind is refused goes back to active
//! ([`Queue::unassume`]).
//!
//! Back-off is 1 s, doubling per failed attempt, at most 10 s. An unschedulable pod goes
//! back to active when an event that can make it fit arrives (a node added or changed, a
//! pod deleted or finished) and its back-off has passed, and at least every minute.
//!
//! A pod that some node turned away only for other pods (pod affinity, anti-affinity,
//! topology spread: the last filters, so that node passed every other) also goes back when
//! a pod is placed, as the store sees it, that one of those terms selects, when a placed
//! pod's labels change to or from what they select, and when a node is removed (its
//! domains and the pods counted in them go), as kube-scheduler's queueing hints move it.
//! Such pods are indexed by signature (pods of one signature have the same terms), so a pod
//! event checks each waiting signature once and costs nothing when no pod waits on pods.
//!
//! # Why the queue owns pending pods
//!
//! Three structures see a pending pod. The pod informer's cache holds every pod, but it
//! lives inside the informer's task and is lent to the handler only for the length of one
//! event, so the binder and the status writer cannot ask it. The node table accounts a
//! placed pod on its node from the moment it is assumed, but it holds the version that was
//! placed and answers "what is on this node", not "what is pending". The queue already held
//! every pending pod from its first event to its placement; it now also holds a placed pod,
//! as *assumed*, until the informer sees it bound (or gone), with the newest version and
//! object the store has sent. So one structure answers "is this pod pending" ([`contains`])
//! and "what is its newest version" ([`object`]) for the informer handlers, the binder and
//! the status writer, and nothing keeps a second copy:
//!
//! - an update of an assumed pod changes what the queue holds but does not queue it again
//!   (its Bind is in flight: a second placement would be a double bind);
//! - a refused Bind ([`unassume`]) sends the newest version back to active, so the retry
//!   carries the resourceVersion Bind checks;
//! - the table still accounts an assumed pod on its node until the Bind's outcome is known,
//!   so no later placement overcommits that node (`Core::unassume` takes a refused one back
//!   out of both). The table answers "is a placement of this pod in flight", which is why
//!   a pod the queue does not hold yet but the table does comes in assumed ([`hold_pod`]).
//!
//! # Names and UIDs
//!
//! The queue holds one pod per `namespace/name`, as the store does (and as kube-scheduler's
//! queue keys pods). What reaches it from a worker or a Bind ([`done`], [`unassume`]) names
//! the pod it was about, UID and all, and acts only if that is still the pod held: a pod
//! deleted and created again under its name is another pod, and a late verdict or Bind
//! outcome of the old one must not place, hold or forget the new one. A version with
//! another UID replaces the one held as a new pod.
//!
//! [`contains`]: Queue::contains
//! [`object`]: Queue::object
//! [`unassume`]: Queue::unassume
//! [`hold_pod`]: Queue::hold_pod
//! [`done`]: Queue::done

use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};

// Keyed by pod names and hashed on every pop and verdict under the queue's lock: foldhash
// (randomly seeded per map), several times faster than SipHash on short keys.
use foldhash::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use skiff_proto::api::Pod;
use skiff_proto::api::pod::PodAffinityTerm;

use crate::model::{PodInfo, term_namespaces, term_selects};

pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// An unschedulable pod is retried at least this often, events or not.
pub const UNSCHEDULABLE_FLUSH: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Active,
    InFlight,
    Unschedulable {
        since: Instant,
        until: Instant,
        /// Some node turned it away only for other pods: indexed in `Inner::waiting`.
        on_pods: bool,
    },
    /// Placed and assumed in the table; its Bind is in flight. Never served: it leaves
    /// when the store confirms the binding (`remove`) or goes back to active when the Bind is
    /// refused (`unassume`).
    Assumed,
}

/// How a worker reports a popped pod placed without taking the queue's lock or looking the
/// pod up by name (what [`Queue::done`] with [`Done::Placed`] costs, per pod, under the
/// lock every worker takes to pop): the pod's entry shares the flag with the worker that
/// popped it, until it is popped again. An entry in flight whose flag is set is assumed.
#[derive(Debug, Clone, Default)]
pub struct PlacedFlag(Arc<AtomicBool>);

impl PlacedFlag {
    /// The pod was placed and committed: assumed until the store confirms the binding.
    /// Set it before the placement reaches the binder, whose refusal unassumes the pod.
    pub fn set(&self) {
        self.0.store(true, Ordering::Release);
    }

    fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    fn clear(&self) {
        self.0.store(false, Ordering::Release);
    }
}

#[derive(Debug)]
struct Entry {
    pod: Arc<PodInfo>,
    /// The object the pod was read from, when it came from a store (for status writes).
    object: Option<Arc<Pod>>,
    signature: u64,
    state: State,
    attempts: u32,
    /// A newer version arrived while the pod was in flight.
    updated: bool,
    placed: PlacedFlag,
}

impl Entry {
    /// The pod's state, counting a placement reported through its flag: in flight and
    /// placed is assumed (as [`Inner::done`] with [`Done::Placed`] makes it).
    fn current(&self) -> State {
        if self.state == State::InFlight && self.placed.is_set() {
            State::Assumed
        } else {
            self.state
        }
    }

    /// As [`Entry::current`], written into the entry.
    fn settle(&mut self) -> State {
        if self.current() != self.state {
            self.state = State::Assumed;
            // A version that arrived in flight is already in `pod`.
            self.updated = false;
        }
        self.state
    }
}

/// Unschedulable pods of one signature waiting on other pods (see the module documentation).
#[derive(Debug)]
struct Waiters {
    /// One of them: they share their terms.
    pod: Arc<PodInfo>,
    keys: HashSet<String>,
}

/// A pod with its key and signature: hashing a signature costs microseconds, so it is
/// done before the queue's lock is taken.
type Keyed = (String, u64, Arc<PodInfo>);

fn keyed(pod: Arc<PodInfo>) -> Keyed {
    (pod.key(), pod.signature(), pod)
}

/// Active pods group by (priority, signature); groups are served highest priority first,
/// oldest first within a priority.
#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Signature → the unschedulable pods of it that wait on other pods.
    waiting: HashMap<u64, Waiters>,
    groups: HashMap<(i32, u64), VecDeque<String>>,
    /// (priority, sequence) → group key, for the order groups are served in.
    order: BTreeMap<(Reverse<i32>, u64), (i32, u64)>,
    queued_groups: HashMap<(i32, u64), (Reverse<i32>, u64)>,
    seq: u64,
    closed: bool,
}

impl Inner {
    fn activate(&mut self, key: &str) {
        self.unwait(key);
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

impl Inner {
    /// Adds a pod in state `new`, or replaces the version held (see [`Queue::add_pod`]).
    /// `key` and `signature` are the pod's, worked out before the lock was taken.
    fn insert(&mut self, (key, signature, pod): Keyed, object: Option<Arc<Pod>>, new: State) {
        if self.entries.get(&key).is_some_and(|e| {
            e.pod.uid != pod.uid || e.signature != signature || e.pod.priority != pod.priority
        }) {
            // Indexed under the old signature, if waiting on pods.
            self.unwait(&key);
        }
        match self.entries.get_mut(&key) {
            Some(e) if e.pod.uid == pod.uid => {
                let moved = e.signature != signature || e.pod.priority != pod.priority;
                e.pod = pod;
                e.object = object;
                e.signature = signature;
                match e.settle() {
                    State::InFlight => e.updated = true,
                    State::Active if moved => {
                        // Its group changed: re-file it (the stale group slot is skipped).
                        self.activate(&key);
                    }
                    State::Active => {}
                    State::Unschedulable { .. } if moved => {
                        // Its scheduling-relevant spec changed: it may fit now.
                        self.activate(&key);
                    }
                    // A status or metadata change (our own FailedScheduling condition,
                    // say) does not change where it fits.
                    State::Unschedulable { .. } => {}
                    // Its Bind is in flight: kept for a retry, not placed a second time.
                    State::Assumed => {}
                }
            }
            // A new pod, or the same name for another pod: the one held was deleted (a late
            // verdict or Bind outcome for it finds the UID changed and leaves this one alone).
            _ => {
                self.entries.insert(
                    key.clone(),
                    Entry {
                        pod,
                        object,
                        signature,
                        state: new,
                        attempts: 0,
                        updated: false,
                        placed: PlacedFlag::default(),
                    },
                );
                if new == State::Active {
                    self.activate(&key);
                }
            }
        }
    }

    /// See [`Queue::done`]; whether the pod went back to active at once (a waiting worker
    /// should be woken).
    fn done(&mut self, key: &str, pod: &PodInfo, how: Done) -> bool {
        let Some(e) = self.entries.get_mut(key) else {
            return false;
        };
        if e.settle() != State::InFlight || e.pod.uid != pod.uid {
            return false;
        }
        // A version that arrived in flight is already in `e.pod`.
        let updated = std::mem::take(&mut e.updated);
        match how {
            Done::Placed => {
                // Assumed until the store confirms the binding; a version that arrived in
                // flight is held for a retry should the Bind be refused.
                e.state = State::Assumed;
                false
            }
            Done::Retry => {
                self.activate(key);
                true
            }
            Done::Unschedulable | Done::BlockedByPods => {
                let now = Instant::now();
                let backoff = backoff(e.attempts);
                let on_pods = how == Done::BlockedByPods;
                e.state = State::Unschedulable {
                    since: now,
                    until: now + backoff,
                    on_pods,
                };
                if on_pods {
                    let (signature, pod) = (e.signature, e.pod.clone());
                    self.waiting
                        .entry(signature)
                        .or_insert_with(|| Waiters {
                            pod,
                            keys: HashSet::default(),
                        })
                        .keys
                        .insert(key.to_string());
                }
                if updated {
                    self.activate(key);
                }
                updated
            }
        }
    }

    /// Takes `key` out of the index of pods waiting on pods, if it is there: it leaves
    /// the unschedulable state, or its signature is about to change.
    fn unwait(&mut self, key: &str) {
        let Some(e) = self.entries.get(key) else {
            return;
        };
        if let State::Unschedulable { on_pods: true, .. } = e.state {
            let signature = e.signature;
            if let Some(w) = self.waiting.get_mut(&signature) {
                w.keys.remove(key);
                if w.keys.is_empty() {
                    self.waiting.remove(&signature);
                }
            }
        }
    }

    /// Unschedulable pods `keys` may fit now: those whose back-off has passed go to active,
    /// the others when theirs passes (their `since` moves a flush into the past, so
    /// [`Queue::tick`] takes them then). How many went to active.
    fn wake(&mut self, keys: Vec<String>, now: Instant) -> usize {
        let mut woken = 0;
        for k in keys {
            let Some(e) = self.entries.get_mut(&k) else {
                continue;
            };
            if let State::Unschedulable { until, on_pods, .. } = e.state {
                if until <= now {
                    self.activate(&k);
                    woken += 1;
                } else {
                    e.state = State::Unschedulable {
                        since: now - UNSCHEDULABLE_FLUSH,
                        until,
                        on_pods,
                    };
                }
            }
        }
        woken
    }
}

/// Whether `pod` (its namespace and `labels`, counted now) or the labels it was counted with
/// until now (`before`) can let `waiter` fit where other pods turned it away: newly counted
/// labels can satisfy required affinity or raise a spread domain's count; labels no longer
/// counted can lift anti-affinity or lower a crowded spread domain.
fn helps(
    waiter: &PodInfo,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    before: Option<&BTreeMap<String, String>>,
) -> bool {
    let term = |t: &PodAffinityTerm, l: &BTreeMap<String, String>| {
        term_selects(
            t.label_selector.as_ref(),
            &term_namespaces(t, &waiter.namespace),
            namespace,
            l,
        )
    };
    let spread = |l: &BTreeMap<String, String>| {
        waiter.spread.iter().any(|c| {
            term_selects(
                c.label_selector.as_ref(),
                std::slice::from_ref(&waiter.namespace),
                namespace,
                l,
            )
        })
    };
    let gained = waiter.required_affinity.iter().any(|t| term(t, labels)) || spread(labels);
    let lost = before.is_some_and(|old| {
        waiter.required_anti_affinity.iter().any(|t| term(t, old)) || spread(old)
    });
    gained || lost
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
    /// Placed and committed: assumed until the store confirms the binding.
    Placed,
    /// Lost a race (conflict): straight back to active.
    Retry,
    /// Fits nowhere: back off until the cluster changes.
    Unschedulable,
    /// Fits nowhere, but some node turned it away only for other pods (pod affinity,
    /// anti-affinity, topology spread): as `Unschedulable`, and pod events that change what
    /// its terms count retry it too.
    BlockedByPods,
}

impl Queue {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a pending pod, or replaces the queued version of it.
    pub fn add(&self, pod: Arc<PodInfo>) {
        self.insert(pod, None, State::Active);
    }

    /// Adds a pending pod read from the store, or replaces the version held; the queue keeps
    /// the object for [`Queue::object`].
    pub fn add_pod(&self, pod: &Pod) {
        let info = Arc::new(PodInfo::from_pod(pod));
        self.insert(info, Some(Arc::new(pod.clone())), State::Active);
    }

    /// As [`Queue::add_pod`], but a pod the queue does not hold yet comes in assumed: the
    /// table accounts a placement of it whose Bind is in flight (the queue forgot it while a
    /// worker placed it). It is served again only if that Bind is refused
    /// ([`Queue::unassume`]).
    pub fn hold_pod(&self, pod: &Pod) {
        let info = Arc::new(PodInfo::from_pod(pod));
        self.insert(info, Some(Arc::new(pod.clone())), State::Assumed);
    }

    fn insert(&self, pod: Arc<PodInfo>, object: Option<Arc<Pod>>, new: State) {
        let keyed = keyed(pod);
        self.inner.lock().insert(keyed, object, new);
        self.ready.notify_one();
    }

    /// Adds many pending pods (or replaces the queued versions) under one hold of the lock,
    /// as [`Queue::add`] adds one: what an informer's list, or a benchmark's workload, hands
    /// over at once.
    pub fn add_many(&self, pods: impl IntoIterator<Item = Arc<PodInfo>>) {
        let pods: Vec<Keyed> = pods.into_iter().map(keyed).collect();
        let mut q = self.inner.lock();
        for pod in pods {
            q.insert(pod, None, State::Active);
        }
        drop(q);
        self.ready.notify_all();
    }

    /// Forgets a pod: deleted, bound (by us, confirmed, or by someone else), or no longer
    /// ours.
    pub fn remove(&self, key: &str) {
        let mut q = self.inner.lock();
        q.unwait(key);
        q.entries.remove(key);
    }

    /// Whether the pod is pending: queued, in flight, backing off, or assumed with its Bind in
    /// flight.
    pub fn contains(&self, key: &str) -> bool {
        self.inner.lock().entries.contains_key(key)
    }

    /// Whether the pod is assumed: placed, its Bind in flight.
    pub fn is_assumed(&self, key: &str) -> bool {
        self.inner
            .lock()
            .entries
            .get(key)
            .is_some_and(|e| e.current() == State::Assumed)
    }

    /// The newest object of a pending pod, if it was added with one ([`Queue::add_pod`]).
    pub fn object(&self, key: &str) -> Option<Arc<Pod>> {
        self.inner.lock().entries.get(key)?.object.clone()
    }

    /// The Bind of an assumed pod was refused or failed. With `requeue` the pod goes back to
    /// active with the newest version held, its attempts counted afresh; without (it is gone,
    /// bound elsewhere, or terminating) it is forgotten until an event shows it pending again.
    /// A pod of the same name created since (another UID) is not this placement's: it is
    /// left as it is.
    pub fn unassume(&self, placed: &PodInfo, requeue: bool) {
        let key = placed.key();
        let mut q = self.inner.lock();
        let Some(e) = q.entries.get_mut(&key) else {
            return;
        };
        if e.settle() != State::Assumed || e.pod.uid != placed.uid {
            return;
        }
        if !requeue {
            q.entries.remove(&key);
            return;
        }
        e.attempts = 0;
        e.updated = false;
        q.activate(&key);
        drop(q);
        self.ready.notify_one();
    }

    /// Up to `max` active pods of one signature, highest priority first; waits up to
    /// `wait` for one. Empty when closed or nothing arrived in time.
    pub fn pop_batch(&self, max: usize, wait: Duration) -> Vec<Arc<PodInfo>> {
        self.pop_batch_flagged(max, wait)
            .into_iter()
            .map(|(pod, _)| pod)
            .collect()
    }

    /// As [`Queue::pop_batch`], each pod with the flag that reports it placed
    /// ([`PlacedFlag::set`], in place of [`Queue::done`] with [`Done::Placed`]).
    pub fn pop_batch_flagged(&self, max: usize, wait: Duration) -> Vec<(Arc<PodInfo>, PlacedFlag)> {
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
                    e.placed.clear();
                    batch.push((e.pod.clone(), e.placed.clone()));
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

    /// Reports how a popped pod's attempt ended. A pod of that name created since (another
    /// UID) is not the one popped: it is left as it is.
    pub fn done(&self, pod: &PodInfo, how: Done) {
        let key = pod.key();
        let requeued = self.inner.lock().done(&key, pod, how);
        if requeued {
            self.ready.notify_one();
        }
    }

    /// Reports a batch's verdicts, as [`Queue::done`] reports each, under one hold of the
    /// lock.
    pub fn done_batch<'a>(&self, verdicts: impl IntoIterator<Item = (&'a PodInfo, Done)>) {
        // Keys are formatted before the lock is taken.
        let verdicts: Vec<(String, &PodInfo, Done)> = verdicts
            .into_iter()
            .map(|(pod, how)| (pod.key(), pod, how))
            .collect();
        let mut q = self.inner.lock();
        let mut requeued = 0;
        for (key, pod, how) in verdicts {
            requeued += usize::from(q.done(&key, pod, how));
        }
        drop(q);
        match requeued {
            0 => {}
            1 => {
                self.ready.notify_one();
            }
            _ => {
                self.ready.notify_all();
            }
        }
    }

    /// Something changed that can make unschedulable pods fit: every one whose back-off has
    /// passed goes back to active now; the others when theirs passes (see [`Queue::tick`]).
    pub fn cluster_changed(&self) {
        let now = Instant::now();
        let mut q = self.inner.lock();
        let unschedulable: Vec<String> = q
            .entries
            .iter()
            .filter(|(_, e)| matches!(e.state, State::Unschedulable { .. }))
            .map(|(k, _)| k.clone())
            .collect();
        let n = q.wake(unschedulable, now);
        drop(q);
        if n > 0 {
            self.ready.notify_all();
        }
    }

    /// A pod is placed as the store sees it (bound when created, or its binding confirmed),
    /// or a placed pod's labels changed from `before`: the pods waiting on pods whose terms
    /// it can satisfy or stop blocking are retried, as [`Queue::cluster_changed`] retries
    /// them. One check per waiting signature; nothing when no pod waits on pods.
    pub fn pod_placed(&self, pod: &PodInfo, before: Option<&BTreeMap<String, String>>) {
        self.wake_waiting(|w| helps(&w.pod, &pod.namespace, &pod.labels, before));
    }

    /// A node was removed: its topology domains and the pods counted in them went, so every
    /// pod waiting on pods is retried (as [`Queue::cluster_changed`] retries them). Pods
    /// that fit nowhere for resources gain nothing from it.
    pub fn node_removed(&self) {
        self.wake_waiting(|_| true);
    }

    /// Retries (after their back-off) the pods waiting on pods whose signature `which`
    /// selects.
    fn wake_waiting(&self, which: impl Fn(&Waiters) -> bool) {
        let mut q = self.inner.lock();
        if q.waiting.is_empty() {
            return;
        }
        let keys: Vec<String> = q
            .waiting
            .values()
            .filter(|w| which(w))
            .flat_map(|w| w.keys.iter().cloned())
            .collect();
        let n = q.wake(keys, Instant::now());
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
                State::Unschedulable { since, until, .. }
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

    /// (active, in flight, unschedulable) counts; assumed pods are in none.
    pub fn depth(&self) -> (usize, usize, usize) {
        let q = self.inner.lock();
        let mut d = (0, 0, 0);
        for e in q.entries.values() {
            match e.current() {
                State::Active => d.0 += 1,
                State::InFlight => d.1 += 1,
                State::Unschedulable { .. } => d.2 += 1,
                State::Assumed => {}
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
        q.done(&b[0], Done::Unschedulable);
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
    fn conflicts_retry_at_once_and_placed_pods_stay_assumed_until_removed() {
        let q = Queue::new();
        q.add(pod("a", 0, 100));
        let b = q.pop_batch(1, Duration::ZERO);
        q.done(&b[0], Done::Retry);
        let b = q.pop_batch(1, Duration::ZERO);
        assert_eq!(b.len(), 1);
        q.done(&b[0], Done::Placed);
        assert!(q.is_assumed("default/a"));
        assert_eq!(q.depth(), (0, 0, 0));
        q.remove("default/a");
        assert!(q.is_empty());
    }

    #[test]
    fn a_batch_added_and_reported_at_once_ends_as_each_pod_would() {
        let q = Queue::new();
        q.add_many(["a", "b", "c", "d"].map(|n| pod(n, 0, 100)));
        let b = q.pop_batch(4, Duration::ZERO);
        assert_eq!(b.len(), 4, "one signature, one batch");
        q.done_batch([
            (b[0].as_ref(), Done::Placed),
            (b[1].as_ref(), Done::Retry),
            (b[2].as_ref(), Done::Unschedulable),
            (b[3].as_ref(), Done::Placed),
        ]);
        assert!(q.is_assumed("default/a") && q.is_assumed("default/d"));
        assert_eq!(q.depth(), (1, 0, 1), "b active again, c backing off");
        let again = q.pop_batch(4, Duration::ZERO);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].name, "b");
    }

    #[test]
    fn an_assumed_pod_takes_updates_but_is_served_again_only_when_its_bind_is_refused() {
        let q = Queue::new();
        q.add(pod("a", 0, 100));
        let b = q.pop_batch(1, Duration::ZERO);
        q.done(&b[0], Done::Placed);
        // An update while the Bind is in flight: held, not served (no second placement).
        q.add(pod("a", 0, 300));
        q.cluster_changed();
        q.tick();
        assert!(q.pop_batch(1, Duration::ZERO).is_empty());
        assert!(q.contains("default/a"));
        // Refused: back to active with the newest version.
        q.unassume(&b[0], true);
        let again = q.pop_batch(1, Duration::ZERO);
        assert_eq!(again[0].requests.milli_cpu, 300);
        // Refused for good (pod gone): forgotten until an event shows it pending again.
        q.done(&again[0], Done::Placed);
        q.unassume(&again[0], false);
        assert!(!q.contains("default/a"));
        q.add(pod("a", 0, 300));
        assert_eq!(q.pop_batch(1, Duration::ZERO).len(), 1);
    }

    #[test]
    fn a_placement_reported_through_its_flag_is_assumed_as_one_reported_by_done() {
        let q = Queue::new();
        q.add_many(["a", "b"].map(|n| pod(n, 0, 100)));
        let b = q.pop_batch_flagged(2, Duration::ZERO);
        assert_eq!(b.len(), 2);
        assert_eq!(q.depth(), (0, 2, 0));
        b[0].1.set();
        q.done(&b[1].0, Done::Retry);
        assert!(q.is_assumed("default/a") && !q.is_assumed("default/b"));
        assert_eq!(q.depth(), (1, 0, 0), "a assumed, b active again");
        // A late verdict for a placed pod changes nothing.
        q.done(&b[0].0, Done::Unschedulable);
        assert!(q.is_assumed("default/a"));
        // An update while the Bind is in flight is held, not served.
        q.add(pod("a", 0, 300));
        assert_eq!(q.pop_batch(2, Duration::ZERO)[0].name, "b");
        assert!(q.pop_batch(2, Duration::ZERO).is_empty());
        // Refused: back to active with the newest version, and popped again with its flag
        // down, so the earlier placement counts no more.
        q.unassume(&b[0].0, true);
        let again = q.pop_batch_flagged(1, Duration::ZERO);
        assert_eq!(again[0].0.requests.milli_cpu, 300);
        assert!(!q.is_assumed("default/a"));
        q.done(&again[0].0, Done::Unschedulable);
        assert_eq!(q.depth(), (0, 1, 1), "b in flight, a backing off");
    }

    #[test]
    fn a_pod_recreated_under_its_name_is_another_pod_to_late_verdicts_and_bind_outcomes() {
        let q = Queue::new();
        let with_uid = |uid: &str| {
            let mut p = (*pod("a", 0, 100)).clone();
            p.uid = uid.into();
            Arc::new(p)
        };
        q.add(with_uid("earlier"));
        let earlier = q.pop_batch(1, Duration::ZERO);
        // Deleted and created again while the earlier one is in flight: a new pod, pending.
        q.add(with_uid("later"));
        let later = q.pop_batch(1, Duration::ZERO);
        assert_eq!(
            later.len(),
            1,
            "the later pod waits for nothing of the earlier one"
        );
        assert_eq!(later[0].uid, "later");
        // The earlier pod's verdict and Bind outcome arrive late: the later pod, in flight,
        // is neither assumed nor forgotten nor served again by them.
        q.done(&earlier[0], Done::Placed);
        assert_eq!(q.depth(), (0, 1, 0));
        q.unassume(&earlier[0], false);
        assert!(q.contains("default/a"));
        q.done(&later[0], Done::Placed);
        q.unassume(&earlier[0], true);
        assert!(
            q.is_assumed("default/a"),
            "the later pod's own Bind is in flight"
        );
        assert!(q.pop_batch(1, Duration::ZERO).is_empty());
        q.unassume(&later[0], true);
        assert_eq!(q.pop_batch(1, Duration::ZERO)[0].uid, "later");
    }

    #[test]
    fn a_pod_held_behind_its_own_placement_is_served_only_if_that_bind_is_refused() {
        let q = Queue::new();
        let mut p = Pod::default();
        p.metadata.namespace = "default".into();
        p.metadata.name = "a".into();
        p.metadata.uid = "u".into();
        q.hold_pod(&p);
        assert!(q.is_assumed("default/a"));
        assert!(q.pop_batch(1, Duration::ZERO).is_empty());
        q.unassume(&PodInfo::from_pod(&p), true);
        let b = q.pop_batch(1, Duration::ZERO);
        assert_eq!(b[0].uid, "u");
        assert!(q.object("default/a").is_some());
    }

    fn needs(name: &str, app: &str) -> Arc<PodInfo> {
        let mut p = (*pod(name, 0, 100)).clone();
        p.required_affinity = vec![PodAffinityTerm {
            label_selector: Some(skiff_proto::api::LabelSelector {
                match_labels: [("app".to_string(), app.to_string())].into(),
                ..Default::default()
            }),
            namespaces: Vec::new(),
            topology_key: "kubernetes.io/hostname".into(),
            other: Default::default(),
        }];
        Arc::new(p)
    }

    /// Whether the unschedulable pod `key` is marked to go back when its back-off ends.
    fn marked(q: &Queue, key: &str) -> bool {
        match q.inner.lock().entries[key].current() {
            State::Unschedulable { since, .. } => since.elapsed() >= UNSCHEDULABLE_FLUSH,
            _ => false,
        }
    }

    #[test]
    fn pod_events_retry_only_the_pods_waiting_on_terms_they_touch() {
        let q = Queue::new();
        q.add(needs("a", "db"));
        q.add(needs("b", "cache"));
        q.add(pod("c", 0, 100));
        for _ in 0..3 {
            let b = q.pop_batch(1, Duration::ZERO);
            let how = if b[0].name == "c" {
                Done::Unschedulable
            } else {
                Done::BlockedByPods
            };
            q.done(&b[0], how);
        }
        assert_eq!(q.depth(), (0, 0, 3));
        let mut db = (*pod("db-0", 0, 100)).clone();
        db.labels.insert("app".into(), "db".into());
        q.pod_placed(&db, None);
        assert!(marked(&q, "default/a"), "a needs an app=db pod");
        assert!(!marked(&q, "default/b"), "b needs an app=cache pod");
        assert!(!marked(&q, "default/c"), "c fits nowhere for resources");
        // Relabelled from app=cache: no newly counted app=cache pod, so b still waits.
        q.pod_placed(
            &db,
            Some(&[("app".to_string(), "cache".to_string())].into()),
        );
        assert!(!marked(&q, "default/b"));
        // A node removed: every pod waiting on pods, none waiting for resources.
        q.node_removed();
        assert!(marked(&q, "default/b"));
        assert!(!marked(&q, "default/c"));
    }

    #[test]
    fn the_index_of_pods_waiting_on_pods_forgets_what_leaves() {
        let q = Queue::new();
        q.add(needs("a", "db"));
        q.add(needs("b", "db"));
        let batch = q.pop_batch(2, Duration::ZERO);
        for p in &batch {
            q.done(p, Done::BlockedByPods);
        }
        assert_eq!(q.inner.lock().waiting.len(), 1, "one signature");
        q.remove("default/a");
        // Its spec changed: indexed no more under the old signature, and active.
        q.add(needs("b", "cache"));
        assert!(q.inner.lock().waiting.is_empty());
        assert_eq!(q.depth(), (1, 0, 0));
    }

    #[test]
    fn an_update_in_flight_is_scheduled_again() {
        let q = Queue::new();
        q.add(pod("a", 0, 100));
        let b = q.pop_batch(1, Duration::ZERO);
        q.add(pod("a", 0, 300));
        q.done(&b[0], Done::Retry);
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
