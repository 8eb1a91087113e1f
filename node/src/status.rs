//! Pod status written back to the cluster API: coalesced, never lost.
//!
//! Pod workers [`StatusWriter::submit`] whole statuses as often as they change; the writer
//! keeps only the latest per pod (a worker that changes status ten times while a write is in
//! flight causes one more write, not ten), and a small pool of tasks shared by every pod of
//! the process writes them. A failed write is retried with back-off until it lands or the pod
//! is gone, always with the newest status. Each write reads the pod first and pins the update
//! to that `resourceVersion` and UID, so a status never lands on a different pod that reuses
//! the name; a conflict (the pod changed in between) is simply read and tried again.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use skiff_proto::api::{Kind, Object, PodStatus};
use skiff_proto::backoff::Backoff;
use skiff_proto::client::{ClientError, ClusterClient, Code};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

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
    /// The pod no longer exists (or the name now belongs to another UID): nothing to write.
    Gone,
    /// The store refused the status for good (it does not validate): written off, so the
    /// pod's worker is not held up waiting for it.
    Refused,
}

/// Where statuses go: the cluster API, or a recorder in tests.
#[async_trait]
pub trait StatusSink: Send + Sync + fmt::Debug + 'static {
    async fn write(
        &self,
        key: &PodKey,
        uid: &str,
        status: &PodStatus,
    ) -> Result<Written, ClientError>;
}

#[async_trait]
impl StatusSink for ClusterClient {
    async fn write(
        &self,
        key: &PodKey,
        uid: &str,
        status: &PodStatus,
    ) -> Result<Written, ClientError> {
        loop {
            let Some(Object::Pod(mut pod)) = self.get(Kind::Pod, &key.namespace, &key.name).await?
            else {
                return Ok(Written::Gone);
            };
            if pod.metadata.uid != uid {
                return Ok(Written::Gone);
            }
            let merged = keep_others_conditions(pod.status.as_ref(), status);
            if pod.status.as_ref() == Some(&merged) {
                return Ok(Written::Stored);
            }
            pod.status = Some(merged);
            match self.update_status(&Object::Pod(pod)).await {
                Ok(_) => return Ok(Written::Stored),
                Err(e) if e.code() == Some(Code::Aborted) => continue,
                Err(e) if e.code() == Some(Code::NotFound) => return Ok(Written::Gone),
                Err(e) => return Err(e),
            }
        }
    }
}

/// A pod's entry: by name and UID, so a pod that reuses a name never shares (or loses) the
/// statuses of the one before it.
type Id = (PodKey, String);

/// The agent's status with the conditions others wrote (a readiness gate's, a
/// `DisruptionTarget`) kept: the agent owns only the condition types it reports.
fn keep_others_conditions(stored: Option<&PodStatus>, ours: &PodStatus) -> PodStatus {
    let mut merged = ours.clone();
    if let Some(stored) = stored {
        merged.conditions.extend(
            stored
                .conditions
                .iter()
                .filter(|c| !ours.conditions.iter().any(|o| o.type_ == c.type_))
                .cloned(),
        );
    }
    merged
}

#[derive(Debug)]
struct Entry {
    /// The newest status not yet taken by a writer, with its sequence number.
    latest: Option<(u64, PodStatus)>,
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
        let mut st = self.state();
        let State { entries, queue } = &mut *st;
        let id = (key.clone(), uid.to_string());
        let e = entries.entry(id.clone()).or_insert_with(|| Entry {
            latest: None,
            submitted: 0,
            written: 0,
            in_flight: false,
            queued: false,
        });
        e.submitted += 1;
        let seq = e.submitted;
        e.latest = Some((seq, status));
        if !e.queued && !e.in_flight {
            e.queued = true;
            queue.push_back(id);
            self.inner.work.notify_one();
        }
        seq
    }

    /// Waits until the status numbered `seq` (or a newer one) is written, or the pod is gone.
    pub async fn flush(&self, key: &PodKey, uid: &str, seq: u64) {
        let id = (key.clone(), uid.to_string());
        loop {
            let notified = self.inner.written.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self
                .state()
                .entries
                .get(&id)
                .is_none_or(|e| e.written >= seq)
            {
                return;
            }
            notified.await;
        }
    }

    /// Drops the pod's entry once nothing is pending (its worker has ended).
    pub fn forget(&self, key: &PodKey, uid: &str) {
        let id = (key.clone(), uid.to_string());
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

    /// Takes the next queued pod's newest status.
    fn take(&self) -> Option<(Id, u64, PodStatus)> {
        let mut st = self.state();
        let State { entries, queue } = &mut *st;
        while let Some(id) = queue.pop_front() {
            let Some(e) = entries.get_mut(&id) else {
                continue;
            };
            e.queued = false;
            if e.in_flight {
                continue;
            }
            if let Some((seq, status)) = e.latest.take() {
                e.in_flight = true;
                return Some((id, seq, status));
            }
        }
        None
    }

    /// A newer status submitted while a write was failing replaces the one being retried.
    fn newer(&self, id: &Id, seq: &mut u64, status: &mut PodStatus) {
        let mut st = self.state();
        if let Some(e) = st.entries.get_mut(id)
            && let Some((s, newer)) = e.latest.take()
        {
            *seq = s;
            *status = newer;
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
            let Some((id, mut seq, mut status)) = self.take() else {
                notified.await;
                continue;
            };
            // Another task may be waiting on the same wake-up while more is queued.
            self.inner.work.notify_one();
            let mut backoff = Backoff::for_store();
            let outcome = loop {
                let (key, uid) = &id;
                match self.inner.sink.write(key, uid, &status).await {
                    Ok(w) => break w,
                    Err(e) if e.code() == Some(Code::InvalidArgument) => {
                        tracing::error!(pod = %key, error = %e, "the store refused the pod's status");
                        break Written::Refused;
                    }
                    Err(e) => {
                        let delay = backoff.next_delay();
                        tracing::warn!(pod = %key, error = %e, retry_in = ?delay, "status write failed");
                        tokio::time::sleep(delay).await;
                        self.newer(&id, &mut seq, &mut status);
                    }
                }
            };
            self.done(&id, seq, outcome);
        }
    }
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

    #[async_trait]
    impl StatusSink for Recorder {
        async fn write(
            &self,
            key: &PodKey,
            _uid: &str,
            status: &PodStatus,
        ) -> Result<Written, ClientError> {
            let _permit = self.gate.acquire().await.expect("gate open");
            if self
                .fail_first
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(ClientError::NoEndpoints);
            }
            self.writes
                .lock()
                .unwrap()
                .push((key.clone(), status.message.clone()));
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
        async fn write(
            &self,
            _key: &PodKey,
            uid: &str,
            status: &PodStatus,
        ) -> Result<Written, ClientError> {
            let _permit = self.gate.acquire().await.expect("gate open");
            if uid != "new" {
                return Ok(Written::Gone);
            }
            self.writes
                .lock()
                .unwrap()
                .push((uid.to_string(), status.message.clone()));
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

    #[test]
    fn conditions_written_by_others_are_kept() {
        let cond = |t: &str, s: &str| -> skiff_proto::api::PodCondition {
            serde_json::from_value(serde_json::json!({"type": t, "status": s})).expect("condition")
        };
        let stored = PodStatus {
            conditions: vec![cond("Ready", "False"), cond("example.com/gate", "True")],
            ..PodStatus::default()
        };
        let ours = PodStatus {
            conditions: vec![cond("Ready", "True")],
            ..PodStatus::default()
        };
        let merged = keep_others_conditions(Some(&stored), &ours);
        assert_eq!(
            merged.conditions,
            vec![cond("Ready", "True"), cond("example.com/gate", "True")]
        );
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
