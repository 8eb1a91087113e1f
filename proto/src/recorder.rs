//! The event recorder: components say what happened to an object (`Scheduled`, `Started`,
//! `BackOff`, …) without waiting for the store, and the recorder writes `Event` objects in
//! the background.
//!
//! As Kubernetes' recorder does, an event that repeats (same object, type, reason and
//! message) is folded into the one already written: its `count` grows, `lastTimestamp`
//! moves and the message is the latest. Messages that differ only in the runtime's IDs in
//! them (a new sandbox's on every retry) are the same message here, so a failure that
//! repeats is one event with a count, not one event per try. Recording never blocks the caller: the queue is bounded, and when the store falls
//! behind, the newest events are dropped and counted ([`EventRecorder::dropped`]), never the
//! work that produced them.
//!
//! New events are written together: one `CreateMany`, so one request and one log entry, for
//! up to 64 of them, gathered while the writes before are in flight and for 50 ms after the
//! first. A thousand agents starting pods record four events a pod
//! (`Scheduled`, `Pulled`, `Created`, `Started`), more writes than the pods themselves cost.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::{Semaphore, mpsc};

use crate::api::{Event, EventSource, Kind, Object, ObjectMeta, ObjectReference, Time};
use crate::client::{ClusterClient, Code};

/// Events waiting to be written; more are dropped.
const QUEUE: usize = 4096;
/// Writes in flight at once.
const IN_FLIGHT: usize = 8;
/// New events created together in one request (one log entry) when that many are queued.
const BATCH: usize = 64;
/// How long a batch waits for more events after its first.
const LINGER: std::time::Duration = std::time::Duration::from_millis(50);
/// Distinct events remembered for folding repeats; the memory is cleared when it fills.
const REMEMBERED: usize = 8192;

/// `Normal` or `Warning`, as Kubernetes' event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

#[derive(Debug)]
struct Record {
    source: Arc<EventSource>,
    object: ObjectReference,
    type_: EventType,
    reason: String,
    message: String,
    at: Time,
}

/// Records events for one component (`default-scheduler`, `kubelet`) on one host. Cheap to
/// clone; the writer task ends when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct EventRecorder {
    tx: mpsc::Sender<Record>,
    source: Arc<EventSource>,
    dropped: Arc<AtomicU64>,
}

/// The reference an event names for `object` (a container of a pod: add a `field_path`).
pub fn reference(object: &Object) -> ObjectReference {
    reference_to(object.kind(), object.metadata())
}

/// The reference to an object of `kind` with metadata `m`.
pub fn reference_to(kind: Kind, m: &ObjectMeta) -> ObjectReference {
    ObjectReference {
        api_version: kind.api_version().into(),
        kind: kind.name().into(),
        namespace: m.namespace.clone(),
        name: m.name.clone(),
        uid: m.uid.clone(),
        field_path: String::new(),
        other: Default::default(),
    }
}

impl EventRecorder {
    /// Starts the writer on the current tokio runtime.
    pub fn spawn(client: ClusterClient, component: &str, host: &str) -> EventRecorder {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write_loop(client, rx));
        EventRecorder {
            tx,
            source: Arc::new(EventSource {
                component: component.to_string(),
                host: host.to_string(),
                other: Default::default(),
            }),
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The same writer (and queue) reporting from another host: the agents of many
    /// simulated nodes in one process share one writer.
    pub fn with_host(&self, host: &str) -> EventRecorder {
        EventRecorder {
            tx: self.tx.clone(),
            source: Arc::new(EventSource {
                component: self.source.component.clone(),
                host: host.to_string(),
                other: Default::default(),
            }),
            dropped: self.dropped.clone(),
        }
    }

    /// The same writer (and queue) reporting as another component: the controllers of one
    /// controller manager (`deployment-controller`, `replicaset-controller`) share one writer.
    pub fn with_component(&self, component: &str) -> EventRecorder {
        EventRecorder {
            tx: self.tx.clone(),
            source: Arc::new(EventSource {
                component: component.to_string(),
                host: self.source.host.clone(),
                other: Default::default(),
            }),
            dropped: self.dropped.clone(),
        }
    }

    pub fn normal(&self, object: ObjectReference, reason: &str, message: String) {
        self.record(object, EventType::Normal, reason, message);
    }

    pub fn warning(&self, object: ObjectReference, reason: &str, message: String) {
        self.record(object, EventType::Warning, reason, message);
    }

    pub fn record(&self, object: ObjectReference, type_: EventType, reason: &str, message: String) {
        let record = Record {
            source: self.source.clone(),
            object,
            type_,
            reason: reason.to_string(),
            message,
            at: Time::now(),
        };
        if self.tx.try_send(record).is_err() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(dropped = n, "event queue full: events dropped");
            }
        }
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// What folds repeats together.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FoldKey {
    host: String,
    object: (String, String, String, String, String),
    type_: EventType,
    reason: String,
    message: String,
}

/// Folds a batch of records into the events written so far (`written`, numbered by `seq`):
/// the new events, to create, and the repeats of events written before, to update. A repeat
/// of an event new in this same batch folds into it (it is not written yet).
fn fold(
    written: &mut HashMap<FoldKey, Event>,
    seq: &mut u64,
    records: impl Iterator<Item = Record>,
) -> (Vec<Event>, Vec<Event>) {
    let mut news: Vec<Event> = Vec::new();
    let mut in_batch: HashMap<FoldKey, usize> = HashMap::new();
    let mut repeats: Vec<Event> = Vec::new();
    for r in records {
        let key = FoldKey {
            host: r.source.host.clone(),
            object: (
                r.object.kind.clone(),
                r.object.namespace.clone(),
                r.object.name.clone(),
                r.object.uid.clone(),
                r.object.field_path.clone(),
            ),
            type_: r.type_,
            reason: r.reason.clone(),
            message: fingerprint(&r.message),
        };
        match written.get_mut(&key) {
            Some(e) => {
                e.count = Some(e.count.unwrap_or(1) + 1);
                e.last_timestamp = Some(r.at);
                e.message = truncate(r.message);
                match in_batch.get(&key) {
                    Some(&i) => news[i] = e.clone(),
                    None => repeats.push(e.clone()),
                }
            }
            None => {
                *seq += 1;
                let e = new_event(r, *seq);
                if written.len() >= REMEMBERED {
                    written.clear();
                }
                written.insert(key.clone(), e.clone());
                in_batch.insert(key, news.len());
                news.push(e);
            }
        }
    }
    (news, repeats)
}

async fn write_loop(client: ClusterClient, mut rx: mpsc::Receiver<Record>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut written: HashMap<FoldKey, Event> = HashMap::new();
    let mut seq: u64 = 0;
    let batched = Arc::new(AtomicBool::new(true));
    let mut records = Vec::with_capacity(BATCH);
    loop {
        // A slot first: while every write is in flight, events wait in the queue and the
        // next batch takes them together.
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        if rx.recv_many(&mut records, BATCH).await == 0 {
            return;
        }
        // Then a moment for more: events come in bursts (a pod's start records three), and
        // nobody waits on them.
        let deadline = tokio::time::Instant::now() + LINGER;
        while records.len() < BATCH {
            let room = BATCH - records.len();
            match tokio::time::timeout_at(deadline, rx.recv_many(&mut records, room)).await {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
        let (news, repeats) = fold(&mut written, &mut seq, records.drain(..));
        let client = client.clone();
        let batched = batched.clone();
        tokio::spawn(async move {
            let _permit = permit;
            create(&client, news, &batched).await;
            for e in repeats {
                write(&client, e, true).await;
            }
        });
    }
}

/// Creates new events, all in one request while the store takes CreateMany (one it does not,
/// an older member, gets them one by one from then on).
async fn create(client: &ClusterClient, events: Vec<Event>, batched: &AtomicBool) {
    if events.len() > 1 && batched.load(Ordering::Relaxed) {
        let objects: Vec<Object> = events.into_iter().map(Object::Event).collect();
        match client.create_many(&objects).await {
            Ok(results) => {
                for (o, r) in objects.iter().zip(results) {
                    if let Err(e) = r {
                        tracing::debug!(event = %o.metadata().name, error = %e, "event not written");
                    }
                }
                return;
            }
            Err(e) if e.code() == Some(Code::Unimplemented) => {
                batched.store(false, Ordering::Relaxed);
                for o in objects {
                    if let Object::Event(e) = o {
                        write(client, e, false).await;
                    }
                }
                return;
            }
            Err(e) => {
                tracing::debug!(events = objects.len(), error = %e, "events not written");
                return;
            }
        }
    }
    for e in events {
        write(client, e, false).await;
    }
}

/// `message` with every run of 32 or more hex digits (container and sandbox IDs) replaced
/// by `…`: what folds messages that differ only in the IDs they name.
fn fingerprint(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.len() >= 32 {
            out.push('…');
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in message.chars() {
        if c.is_ascii_hexdigit() {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

fn new_event(r: Record, seq: u64) -> Event {
    // Kubernetes names events `<object>.<unique hex>`; the nanoseconds plus a sequence keep
    // names from one recorder apart even within a clock tick.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    let namespace = if r.object.namespace.is_empty() {
        crate::api::defaults::DEFAULT_NAMESPACE.to_string()
    } else {
        r.object.namespace.clone()
    };
    Event {
        api_version: "v1".into(),
        kind: Kind::Event.name().into(),
        metadata: ObjectMeta {
            name: format!("{}.{:x}", r.object.name, nanos.wrapping_add(seq)),
            namespace,
            ..ObjectMeta::default()
        },
        involved_object: r.object,
        reason: r.reason,
        message: truncate(r.message),
        type_: r.type_.as_str().to_string(),
        first_timestamp: Some(r.at),
        last_timestamp: Some(r.at),
        count: Some(1),
        reporting_component: r.source.component.clone(),
        reporting_instance: r.source.host.clone(),
        source: (*r.source).clone(),
        other: Default::default(),
    }
}

/// Messages longer than the store accepts are cut (on a character boundary), not refused.
fn truncate(mut message: String) -> String {
    let max = crate::api::validation::MAX_EVENT_MESSAGE;
    if message.len() > max {
        let mut end = max - 3;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str("...");
    }
    message
}

async fn write(client: &ClusterClient, event: Event, repeat: bool) {
    let object = Object::Event(event);
    let result = if repeat {
        match client.update(&object).await {
            // Expired (or never written, when the first write failed): write it anew.
            Err(e) if e.code() == Some(Code::NotFound) => client.create(&object).await,
            other => other,
        }
    } else {
        client.create(&object).await
    };
    if let Err(e) = result {
        tracing::debug!(event = %object.metadata().name, error = %e, "event not written");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_that_differ_only_in_runtime_ids_fold_together() {
        let id = |c: char| c.to_string().repeat(64);
        let a = format!(
            "failed to setup network for sandbox \"{}\": no plugin",
            id('a')
        );
        let b = format!(
            "failed to setup network for sandbox \"{}\": no plugin",
            id('7')
        );
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_eq!(
            fingerprint(&a),
            "failed to setup network for sandbox \"…\": no plugin"
        );
        // Short hex words (addresses, ports, `deadbeef`) are kept.
        assert_ne!(fingerprint("port 8080 busy"), fingerprint("port 8081 busy"));
        assert_eq!(fingerprint("cafe"), "cafe");
    }

    fn record(pod: &str, reason: &str, message: &str) -> Record {
        Record {
            source: Arc::new(EventSource {
                component: "kubelet".into(),
                host: "n1".into(),
                ..EventSource::default()
            }),
            object: ObjectReference {
                kind: "Pod".into(),
                namespace: "default".into(),
                name: pod.into(),
                uid: format!("uid-{pod}"),
                ..ObjectReference::default()
            },
            type_: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
            at: Time::now(),
        }
    }

    #[test]
    fn a_batch_creates_new_events_once_and_updates_those_written_before() {
        let (mut written, mut seq) = (HashMap::new(), 0);
        let (news, repeats) = fold(
            &mut written,
            &mut seq,
            [
                record("a", "Pulled", "image present"),
                record("b", "Pulled", "image present"),
                record("a", "Pulled", "image present"),
            ]
            .into_iter(),
        );
        assert!(
            repeats.is_empty(),
            "a repeat within the batch folds into its event"
        );
        assert_eq!(news.len(), 2);
        assert_eq!(news[0].count, Some(2), "{:?}", news[0]);
        assert_ne!(news[0].metadata.name, news[1].metadata.name);
        // The next batch: a's event was written, so its repeat is an update of it.
        let (news2, repeats) = fold(
            &mut written,
            &mut seq,
            [
                record("a", "Pulled", "image present"),
                record("c", "Started", "s"),
            ]
            .into_iter(),
        );
        assert_eq!(news2.len(), 1);
        assert_eq!(repeats.len(), 1);
        assert_eq!(repeats[0].metadata.name, news[0].metadata.name);
        assert_eq!(repeats[0].count, Some(3));
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let max = crate::api::validation::MAX_EVENT_MESSAGE;
        let m = truncate("é".repeat(max));
        assert!(m.len() <= max, "{}", m.len());
        assert!(m.ends_with("..."));
        assert_eq!(truncate("short".into()), "short");
    }

    #[test]
    fn events_about_cluster_scoped_objects_go_to_default() {
        let r = Record {
            source: Arc::new(EventSource {
                component: "kubelet".into(),
                host: "n1".into(),
                other: Default::default(),
            }),
            object: ObjectReference {
                kind: "Node".into(),
                name: "n1".into(),
                ..ObjectReference::default()
            },
            type_: EventType::Normal,
            reason: "NodeReady".into(),
            message: "Node n1 status is now: NodeReady".into(),
            at: Time::now(),
        };
        let mut e = Object::Event(new_event(r, 1));
        assert_eq!(e.metadata().namespace, "default");
        assert!(e.metadata().name.starts_with("n1."));
        crate::api::defaults::apply(&mut e);
        crate::api::validation::validate(&e).expect("a recorded event is valid");
    }
}
