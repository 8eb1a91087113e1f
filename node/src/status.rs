//! Pod status written back to the cluster API: coalesced, batched, never lost.
//!
//! Pod workers [`StatusWriter::submit`] whole statuses as often as they change; the writer
//! keeps only the latest per pod (a worker that changes status ten times while a write is in
//! flight causes one more write, not ten), and a small pool of tasks shared by every pod of
//! the process writes them. Each task takes every queued status (up to [`BATCH`]) and writes
//! them in one request, one log entry (UpdateStatusMany): a quiet node's status goes out
//! alone at once, and a busy process's statuses share entries instead of queueing behind
//! each other. A failed write is retried with back-off until it lands or the pod is gone,
//! always with the newest status. Each status is pinned to its pod's UID, so it never lands
//! on a different pod that reuses the name, and it patches: the store keeps the conditions
//! others wrote (a readiness gate's, a `DisruptionTarget`), and writes nothing when the
//! status is already stored.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use skiff_proto::api::{Kind, Node, Object, Pod, PodStatus};
use skiff_proto::backoff::Backoff;
use skiff_proto::client::{ClientError, ClusterClient, Code};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The most statuses one request carries.
pub const BATCH: usize = 128;

/// A pod's namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What a write achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Stored,
    /// The object no longer exists (or the name now belongs to another UID): nothing to
    /// write.
    Gone,
    /// The store refused the status for good (it does not validate): written off, so the
    /// pod's worker is not held up waiting for it.
    Refused,
}

/// Where statuses go: the cluster API, or a recorder in tests. A status travels as its
/// object: kind, namespace, name, UID (when pinned to one) and status.
#[async_trait]
pub trait StatusSink: Send + Sync + fmt::Debug + 'static {
    async fn write(&self, object: &Object) -> Result<Written, ClientError>;

    /// Many statuses at once: one outcome per object, in order, or the error that failed
    /// them all. One by one unless the sink can do better.
    async fn write_many(
        &self,
        objects: &[Object],
    ) -> Result<Vec<Result<Written, ClientError>>, ClientError> {
        Ok(one_by_one(self, objects).await)
    }
}

async fn one_by_one<S: StatusSink + ?Sized>(
    sink: &S,
    objects: &[Object],
) -> Vec<Result<Written, ClientError>> {
    let mut out = Vec::with_capacity(objects.len());
    for object in objects {
        out.push(sink.write(object).await);
    }
    out
}

/// A status's outcome as the store answered it.
fn outcome(r: Result<Object, ClientError>) -> Result<Written, ClientError> {
    match r {
        Ok(_) => Ok(Written::Stored),
        Err(e) if e.code() == Some(Code::NotFound) => Ok(Written::Gone),
        Err(e) => Err(e),
    }
}

/// The pod as a status write sends it: its name, UID and status.
pub fn pod_status(key: &PodKey, uid: &str, status: PodStatus) -> Object {
    let mut pod = Pod::default();
    pod.metadata.namespace = key.namespace.clone();
    pod.metadata.name = key.name.clone();
    pod.metadata.uid = uid.to_string();
    pod.status = Some(status);
    Object::Pod(pod)
}

#[async_trait]
impl StatusSink for ClusterClient {
    /// One status the way a store without UpdateStatusMany takes it. A pod's: read it, keep
    /// the conditions others wrote, write it pinned to the version read. A node's heartbeat
    /// replaces the node's status.
    async fn write(&self, object: &Object) -> Result<Written, ClientError> {
        if object.kind() != Kind::Pod {
            return outcome(self.update_status(object).await);
        }
        let m = object.metadata();
        loop {
            let Some(mut stored) = self.get(Kind::Pod, &m.namespace, &m.name).await? else {
                return Ok(Written::Gone);
            };
            if stored.metadata().uid != m.uid {
                return Ok(Written::Gone);
            }
            let mut next = object.clone();
            next.keep_stored_conditions(&stored);
            let (Object::Pod(pod), Object::Pod(ours)) = (&mut stored, next) else {
                return Ok(Written::Gone);
            };
            if pod.status == ours.status {
                return Ok(Written::Stored);
            }
            pod.status = ours.status;
            match outcome(self.update_status(&stored).await) {
                Err(e) if e.code() == Some(Code::Aborted) => continue,
                done => return done,
            }
        }
    }

    async fn write_many(
        &self,
        objects: &[Object],
    ) -> Result<Vec<Result<Written, ClientError>>, ClientError> {
        match self.update_status_many(objects).await {
            Ok(results) => Ok(results.into_iter().map(outcome).collect()),
            // A store from before UpdateStatusMany.
            Err(e) if e.code() == Some(Code::Unimplemented) => Ok(one_by_one(self, objects).await),
            Err(e) => Err(e),
        }
    }
}

/// An object's entry: by kind, namespace, name and UID, so a pod that reuses a name never
/// shares (or loses) the statuses of the one before it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Id {
    kind: Kind,
    key: PodKey,
    uid: String,
}

impl Id {
    fn pod(key: &PodKey, uid: &str) -> Id {
        Id {
            kind: Kind::Pod,
            key: key.clone(),
            uid: uid.to_string(),
        }
    }

    fn of(object: &Object) -> Id {
        let m = object.metadata();
        Id {
            kind: object.kind(),
            key: PodKey {
                namespace: m.namespace.clone(),
                name: m.name.clone(),
            },
            uid: m.uid.clone(),
        }
    }
}

#[derive(Debug)]
struct Entry {
    /// The newest status not yet taken by a writer (as its object), with its sequence number.
    latest: Option<(u64, Object)>,
    submitted: u64,
    written: u64,
    in_flight: bool,
    queued: bool,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<Id, Entry>,
    queue: VecDeque<Id>,
}

#[derive(Debug)]
struct Inner {
    sink: Arc<dyn StatusSink>,
    // Held only for map operations, never across an await.
    state: Mutex<State>,
    work: Notify,
    written: Notify,
}

/// The process-wide status writer (cloning shares it).
#[derive(Debug, Clone)]
pub struct StatusWriter {
    inner: Arc<Inner>,
}

impl StatusWriter {
    /// Starts `concurrency` writer tasks that stop when `cancel` fires.
    pub fn start(
        sink: Arc<dyn StatusSink>,
        concurrency: usize,
        cancel: CancellationToken,
    ) -> StatusWriter {
        let w = StatusWriter {
            inner: Arc::new(Inner {
                sink,
                state: Mutex::new(State::default()),
                work: Notify::new(),
                written: Notify::new(),
            }),
        };
        for _ in 0..concurrency.max(1) {
            let w = w.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = cancel.cancelled() => {}
                    _ = w.serve() => {}
                }
            });
        }
        w
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `status` as the pod's newest; returns its sequence number for [`Self::flush`].
    pub fn submit(&self, key: &PodKey, uid: &str, status: PodStatus) -> u64 {
        self.submit_object(Id::pod(key, uid), pod_status(key, uid, status))
    }

    /// Queues a node's status (its heartbeat) as the newest, written with the pods' statuses;
    /// returns its sequence number for [`Self::flush_node`].
    pub fn submit_node(&self, node: Node) -> u64 {
        let node = Object::Node(node);
        self.submit_object(Id::of(&node), node)
    }

    fn submit_object(&self, id: Id, object: Object) -> u64 {
        let mut st = self.state();
        let State { entries, queue } = &mut *st;
        let e = entries.entry(id.clone()).or_insert_with(|| Entry {
            latest: None,
            submitted: 0,
            written: 0,
            in_flight: false,
            queued: false,
        });
        e.submitted += 1;
        let seq = e.submitted;
        e.latest = Some((seq, object));
        if !e.queued && !e.in_flight {
            e.queued = true;
            queue.push_back(id);
            self.inner.work.notify_one();
        }
        seq
    }

    /// Waits until the status numbered `seq` (or a newer one) is written, or the pod is gone.
    pub async fn flush(&self, key: &PodKey, uid: &str, seq: u64) {
        self.flush_id(&Id::pod(key, uid), seq).await
    }

    /// Waits until the node's status numbered `seq` (or a newer one) is written.
    pub async fn flush_node(&self, name: &str, seq: u64) {
        let id = Id {
            kind: Kind::Node,
            key: PodKey {
                namespace: String::new(),
                name: name.to_string(),
            },
            uid: String::new(),
        };
        self.flush_id(&id, seq).await
    }

    async fn flush_id(&self, id: &Id, seq: u64) {
        loop {
            let notified = self.inner.written.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self
                .state()
                .entries
                .get(id)
                .is_none_or(|e| e.written >= seq)
            {
                return;
            }
            notified.await;
        }
    }

    /// Drops the pod's entry once nothing is pending (its worker has ended).
    pub fn forget(&self, key: &PodKey, uid: &str) {
        let id = Id::pod(key, uid);
        let mut st = self.state();
        if st
            .entries
            .get(&id)
            .is_some_and(|e| e.latest.is_none() && !e.in_flight)
        {
            st.entries.remove(&id);
        }
    }

    /// Statuses submitted but not yet written, for tests and metrics.
    pub fn pending(&self) -> usize {
        self.state()
            .entries
            .values()
            .filter(|e| e.latest.is_some() || e.in_flight)
            .count()
    }

    /// Takes the newest status of each queued pod, up to [`BATCH`] of them.
    fn take(&self) -> Vec<Taken> {
        let mut st = self.state();
        let State { entries, queue } = &mut *st;
        let mut batch = Vec::new();
        while batch.len() < BATCH
            && let Some(id) = queue.pop_front()
        {
            let Some(e) = entries.get_mut(&id) else {
                continue;
            };
            e.queued = false;
            if e.in_flight {
                continue;
            }
            if let Some((seq, object)) = e.latest.take() {
                e.in_flight = true;
                batch.push(Taken { id, seq, object });
            }
        }
        batch
    }

    /// A newer status submitted while a write was failing replaces the one being retried.
    fn newer(&self, t: &mut Taken) {
        let mut st = self.state();
        if let Some(e) = st.entries.get_mut(&t.id)
            && let Some((seq, newer)) = e.latest.take()
        {
            t.seq = seq;
            t.object = newer;
        }
    }

    fn done(&self, id: &Id, seq: u64, outcome: Written) {
        let mut st = self.state();
        let State { entries, queue } = &mut *st;
        if let Some(e) = entries.get_mut(id) {
            e.in_flight = false;
            e.written = e.written.max(seq);
            if outcome == Written::Gone {
                e.latest = None;
                e.written = e.submitted;
            } else if e.latest.is_some() && !e.queued {
                e.queued = true;
                queue.push_back(id.clone());
                self.inner.work.notify_one();
            }
        }
        drop(st);
        self.inner.written.notify_waiters();
    }

    async fn serve(&self) {
        loop {
            let notified = self.inner.work.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let mut batch = self.take();
            if batch.is_empty() {
                notified.await;
                continue;
            }
            // Another task may be waiting on the same wake-up while more is queued.
            self.inner.work.notify_one();
            let mut backoff = Backoff::for_store();
            while !batch.is_empty() {
                let objects: Vec<Object> = batch.iter().map(|t| t.object.clone()).collect();
                let (failed, error) = match self.inner.sink.write_many(&objects).await {
                    Ok(outcomes) if outcomes.len() == batch.len() => {
                        let (mut failed, mut error) = (Vec::new(), None);
                        for (t, o) in batch.into_iter().zip(outcomes) {
                            match o {
                                Ok(w) => self.done(&t.id, t.seq, w),
                                Err(e) if e.code() == Some(Code::InvalidArgument) => {
                                    tracing::error!(kind = %t.id.kind.name(), object = %t.id.key, error = %e, "the store refused the status");
                                    self.done(&t.id, t.seq, Written::Refused);
                                }
                                Err(e) => {
                                    error.get_or_insert(e);
                                    failed.push(t);
                                }
                            }
                        }
                        (failed, error)
                    }
                    Ok(outcomes) => {
                        let e = format!("{} outcomes for {} statuses", outcomes.len(), batch.len());
                        (batch, Some(ClientError::Status(tonic::Status::internal(e))))
                    }
                    Err(e) => (batch, Some(e)),
                };
                let Some(error) = error else { break };
                let delay = backoff.next_delay();
                tracing::warn!(statuses = failed.len(), first = %failed[0].id.key, %error, retry_in = ?delay, "status write failed");
                tokio::time::sleep(delay).await;
                batch = failed;
                for t in &mut batch {
                    self.newer(t);
                }
            }
        }
    }
}

/// A status taken for writing.
#[derive(Debug)]
struct Taken {
    id: Id,
    seq: u64,
    object: Object,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Debug)]
    struct Recorder {
        writes: Mutex<Vec<(PodKey, String)>>,
        fail_first: AtomicUsize,
        gate: tokio::sync::Semaphore,
    }

    impl Default for Recorder {
        fn default() -> Self {
            Recorder {
                writes: Mutex::default(),
                fail_first: AtomicUsize::new(0),
                gate: tokio::sync::Semaphore::new(0),
            }
        }
    }

    /// A pod's key and its status's message, which tells the tests' statuses apart.
    fn told(o: &Object) -> (PodKey, String) {
        let Object::Pod(p) = o else {
            panic!("not a pod: {o:?}")
        };
        let key = PodKey {
            namespace: p.metadata.namespace.clone(),
            name: p.metadata.name.clone(),
        };
        (
            key,
            p.status
                .as_ref()
                .map(|s| s.message.clone())
                .unwrap_or_default(),
        )
    }

    #[async_trait]
    impl StatusSink for Recorder {
        async fn write(&self, object: &Object) -> Result<Written, ClientError> {
            let _permit = self.gate.acquire().await.expect("gate open");
            if self
                .fail_first
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(ClientError::NoEndpoints);
            }
            self.writes.lock().unwrap().push(told(object));
            Ok(Written::Stored)
        }
    }

    fn key(n: &str) -> PodKey {
        PodKey {
            namespace: "default".into(),
            name: n.into(),
        }
    }

    /// A status told apart from others by its message.
    fn phase(p: &str) -> PodStatus {
        PodStatus {
            message: p.into(),
            ..PodStatus::default()
        }
    }

    /// A sink where the pod named `a` now belongs to UID `new`.
    #[derive(Debug)]
    struct Reused {
        writes: Mutex<Vec<(String, String)>>,
        gate: tokio::sync::Semaphore,
    }

    #[async_trait]
    impl StatusSink for Reused {
        async fn write(&self, object: &Object) -> Result<Written, ClientError> {
            let _permit = self.gate.acquire().await.expect("gate open");
            let uid = &object.metadata().uid;
            if uid != "new" {
                return Ok(Written::Gone);
            }
            self.writes
                .lock()
                .unwrap()
                .push((uid.to_string(), told(object).1));
            Ok(Written::Stored)
        }
    }

    /// A late status of a deleted pod neither takes the place of, nor drops, the status of
    /// the pod that now has its name.
    #[tokio::test(start_paused = true)]
    async fn a_reused_name_keeps_each_pods_statuses_apart() {
        let sink = Arc::new(Reused {
            writes: Mutex::default(),
            gate: tokio::sync::Semaphore::new(0),
        });
        let w = StatusWriter::start(sink.clone(), 1, CancellationToken::new());
        w.submit(&key("a"), "old", phase("Failed"));
        let seq = w.submit(&key("a"), "new", phase("Running"));
        w.submit(&key("a"), "old", phase("Failed again"));
        sink.gate.add_permits(1000);
        w.flush(&key("a"), "new", seq).await;
        w.flush(&key("a"), "old", 2).await;
        let writes = sink.writes.lock().unwrap().clone();
        assert_eq!(writes, [("new".to_string(), "Running".to_string())]);
        assert_eq!(w.pending(), 0);
    }

    /// A sink that takes whole batches and records their sizes.
    #[derive(Debug)]
    struct Batches {
        sizes: Mutex<Vec<usize>>,
        gate: tokio::sync::Semaphore,
    }

    #[async_trait]
    impl StatusSink for Batches {
        async fn write(&self, _: &Object) -> Result<Written, ClientError> {
            unreachable!("statuses go in batches")
        }

        async fn write_many(
            &self,
            objects: &[Object],
        ) -> Result<Vec<Result<Written, ClientError>>, ClientError> {
            let _permit = self.gate.acquire().await.expect("gate open");
            self.sizes.lock().unwrap().push(objects.len());
            Ok(objects.iter().map(|_| Ok(Written::Stored)).collect())
        }
    }

    /// Statuses queued while a write is in flight go out together in the next one, at most
    /// [`BATCH`] to a request.
    #[tokio::test(start_paused = true)]
    async fn statuses_queued_behind_a_write_share_the_next() {
        let sink = Arc::new(Batches {
            sizes: Mutex::default(),
            gate: tokio::sync::Semaphore::new(0),
        });
        let w = StatusWriter::start(sink.clone(), 1, CancellationToken::new());
        w.submit(&key("first"), "u", phase("Running"));
        // The writer takes the first status alone and waits at the gate with it.
        tokio::task::yield_now().await;
        let n = BATCH + 10;
        let mut last = 0;
        for i in 0..n {
            last = w.submit(&key(&format!("p{i}")), "u", phase("Running"));
        }
        sink.gate.add_permits(1000);
        w.flush(&key(&format!("p{}", n - 1)), "u", last).await;
        w.flush(&key("p0"), "u", 1).await;
        assert_eq!(*sink.sizes.lock().unwrap(), [1, BATCH, 10]);
        assert_eq!(w.pending(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn latest_wins_and_failures_are_retried() {
        let rec = Arc::new(Recorder::default());
        rec.fail_first.store(2, Ordering::SeqCst);
        let w = StatusWriter::start(rec.clone(), 2, CancellationToken::new());
        // Nothing can be written until the gate opens: at most the first of five submissions
        // is taken before then, the other four coalesce into the newest.
        for p in ["Pending", "Pending2", "Running", "Running2", "Succeeded"] {
            w.submit(&key("a"), "u1", phase(p));
        }
        let last = w.submit(&key("b"), "u2", phase("Running"));
        rec.gate.add_permits(1000);
        w.flush(&key("b"), "u2", last).await;
        w.flush(&key("a"), "u1", 5).await;
        let writes = rec.writes.lock().unwrap().clone();
        let of_a: Vec<&str> = writes
            .iter()
            .filter(|(k, _)| k.name == "a")
            .map(|(_, p)| p.as_str())
            .collect();
        assert!(of_a.len() <= 2, "{writes:?}");
        assert_eq!(of_a.last(), Some(&"Succeeded"), "{writes:?}");
        assert!(writes.iter().any(|(k, p)| k.name == "b" && p == "Running"));
        assert_eq!(w.pending(), 0);
    }
}
