//! The ReplicaSet controller: keeps `replicas` pods of a ReplicaSet's template, claims the
//! pods its selector matches, and reports them in its status.
//!
//! A sync of one ReplicaSet:
//! 1. claims pods: adopts active orphans its selector matches (adding its controller
//!    reference), releases owned pods it no longer selects;
//! 2. if the creates and deletes of its last sync have all been seen
//!    ([`expectations`]), creates the pods it lacks in slow-start batches or deletes the
//!    surplus, least useful first ([`plan`]);
//! 3. writes its status (counts, `observedGeneration`, `ReplicaFailure` when creates fail),
//!    and looks again when a ready pod is due to become available.

use std::sync::Arc;
use std::time::Duration;

use skiff_proto::api::ObjectReference;
use skiff_proto::api::apps::ReplicaSet;
use skiff_proto::api::{Kind, Object, Pod, Time};
use skiff_proto::client::{ClientError, Code, Event};
use skiff_proto::recorder::{EventRecorder, reference};

use crate::cache::controller_of;
use crate::core::{
    Context, Controller, Requeue, controller_ref, gone_is_none, key_of, owner_key, split_key,
};
use crate::pods;
use crate::queue::WorkQueue;

pub mod expectations;
pub mod plan;

use expectations::Expectations;
use plan::{Diff, Failure};

/// The controller's name in logs and metrics.
pub const NAME: &str = "replicaset";

/// Pods named in events per sync; a larger batch is summed up in one more event.
const EVENTS_PER_SYNC: usize = 10;

/// The reasons of a ReplicaSet's events and its `ReplicaFailure` condition, as Kubernetes
/// spells them.
pub mod reason {
    pub const SUCCESSFUL_CREATE: &str = "SuccessfulCreate";
    pub const FAILED_CREATE: &str = "FailedCreate";
    pub const SUCCESSFUL_DELETE: &str = "SuccessfulDelete";
    pub const FAILED_DELETE: &str = "FailedDelete";
}

/// The ReplicaSet controller.
#[derive(Debug)]
pub struct ReplicaSets {
    ctx: Arc<Context>,
    queue: WorkQueue,
    /// Events from `replicaset-controller`, as Kubernetes names their source.
    events: EventRecorder,
}

impl ReplicaSets {
    pub fn new(ctx: Arc<Context>) -> Self {
        ReplicaSets {
            events: ctx.events.with_component("replicaset-controller"),
            ctx,
            queue: WorkQueue::new(),
        }
    }

    fn expectations(&self) -> &Expectations {
        &self.ctx.expectations
    }

    /// A pod changed: count it off its owner's expectations and sync the owner (the old one
    /// too, if it changed hands); an orphan wakes the ReplicaSets that may adopt it.
    pub fn on_pod(&self, event: &Event, old: Option<&Object>) {
        let (object, deleted) = match event {
            Event::Added(o) | Event::Modified(o) => (o, false),
            Event::Deleted(o) => (o, true),
            Event::Bookmark(_) => return,
        };
        let owner = owner_key(object, Kind::ReplicaSet);
        if let Some(key) = &owner {
            let uid = controller_of(object).map_or("", |r| r.uid.as_str());
            let marked = object.metadata().deletion_timestamp.is_some();
            if deleted || marked {
                self.expectations().deleted(uid, &object.key());
            } else if matches!(event, Event::Added(_)) {
                self.expectations().created(uid, 1);
            }
            self.queue.add(key.clone());
        }
        if let Some(previous) = old.and_then(|o| owner_key(o, Kind::ReplicaSet))
            && Some(&previous) != owner.as_ref()
        {
            self.queue.add(previous);
        }
        if owner.is_none() && !deleted {
            let meta = object.metadata();
            for rs in self.ctx.replica_sets.list(Some(&meta.namespace)) {
                if let Object::ReplicaSet(rs) = &*rs
                    && rs.spec.selector.matches(&meta.labels)
                {
                    self.queue.add(key_of(&rs.metadata));
                }
            }
        }
    }

    pub fn on_replica_set(&self, event: &Event) {
        match event {
            Event::Added(o) | Event::Modified(o) | Event::Deleted(o) => {
                self.queue.add(key_of(o.metadata()));
            }
            Event::Bookmark(_) => {}
        }
    }

    /// The pods `rs` controls once adoptions and releases are done.
    async fn claim(&self, rs: &ReplicaSet) -> Result<Vec<Arc<Object>>, ClientError> {
        let selector = &rs.spec.selector;
        let deleting = rs.metadata.deletion_timestamp.is_some();
        let mut owned = Vec::new();
        for object in self.ctx.pods.owned_by(&rs.metadata.uid) {
            if controller_of(&object).is_none_or(|r| r.uid != rs.metadata.uid) {
                continue;
            }
            if deleting || selector.matches(&object.metadata().labels) {
                owned.push(object);
                continue;
            }
            let mut released = (*object).clone();
            released
                .metadata_mut()
                .owner_references
                .retain(|r| r.uid != rs.metadata.uid);
            gone_is_none(self.ctx.client.update(&released).await)?;
        }
        if deleting {
            return Ok(owned);
        }
        for object in self.ctx.pods.orphans_in(&rs.metadata.namespace) {
            let Object::Pod(pod) = &*object else { continue };
            if !pods::is_active(pod) || !selector.matches(&pod.metadata.labels) {
                continue;
            }
            let mut adopted = (*object).clone();
            adopted
                .metadata_mut()
                .owner_references
                .push(controller_ref(Kind::ReplicaSet, &rs.metadata));
            if let Some(done) = gone_is_none(self.ctx.client.update(&adopted).await)? {
                owned.push(Arc::new(done));
            }
        }
        Ok(owned)
    }

    /// `Created pod: web-x7k2p` for each pod, as Kubernetes records them, up to
    /// [`EVENTS_PER_SYNC`]; the rest of a large batch in one event, so a burst of 500 creates
    /// costs the store a few event writes, not 500.
    fn record_each<'a>(
        &self,
        me: &ObjectReference,
        reason: &str,
        verb: &str,
        names: impl Iterator<Item = &'a str>,
    ) {
        let names: Vec<&str> = names.collect();
        for name in names.iter().take(EVENTS_PER_SYNC) {
            self.events
                .normal(me.clone(), reason, format!("{verb} pod: {name}"));
        }
        if names.len() > EVENTS_PER_SYNC {
            let more = names.len() - EVENTS_PER_SYNC;
            self.events
                .normal(me.clone(), reason, format!("{verb} {more} more pod(s)"));
        }
    }

    /// Creates or deletes pods towards `replicas`; a failure is recorded and returned.
    async fn manage(&self, rs: &ReplicaSet, active: &[&Pod]) -> Result<(), (Failure, ClientError)> {
        let key = rs.metadata.uid.as_str();
        let me = reference(&Object::ReplicaSet(rs.clone()));
        match plan::diff(rs.replicas(), active) {
            Diff::Steady => Ok(()),
            Diff::Create(n) => {
                self.expectations().expect(key, n, []);
                let pod = Object::Pod(pod_for(rs));
                let client = &self.ctx.client;
                // Each batch is one CreateMany: one request and one log entry for up to 256
                // pods, each named and admitted on its own.
                let (created, skipped, error) = plan::slow_start(n, |batch| {
                    let pods = vec![pod.clone(); batch.len()];
                    async move { client.create_many(&pods).await }
                })
                .await;
                let ok = created.len();
                let failed = n - ok - skipped;
                // A create that failed without an answer may have committed: its pod may
                // still appear, so it stays expected until the watch or the TTL settles it.
                let refused = match &error {
                    Some(e) if !refusal(e) => 0,
                    _ => failed,
                };
                self.expectations().created(key, refused + skipped);
                self.ctx.metrics.pod_writes("create", "ok", ok);
                self.ctx.metrics.pod_writes("create", "error", failed);
                let names = created.iter().map(|o| o.metadata().name.as_str());
                self.record_each(&me, reason::SUCCESSFUL_CREATE, "Created", names);
                match error {
                    None => Ok(()),
                    Some(e) => {
                        let message = format!("Error creating: {e}");
                        self.events
                            .warning(me, reason::FAILED_CREATE, message.clone());
                        Err((
                            Failure {
                                reason: reason::FAILED_CREATE,
                                message,
                            },
                            e,
                        ))
                    }
                }
            }
            Diff::Delete(victims) => {
                let victims: Vec<&Pod> = victims.into_iter().map(|i| active[i]).collect();
                let keys = victims
                    .iter()
                    .map(|p| Kind::Pod.key(&p.metadata.namespace, &p.metadata.name));
                self.expectations().expect(key, 0, keys);
                let client = &self.ctx.client;
                let results = futures::future::join_all(victims.iter().map(|p| {
                    client.delete(Kind::Pod, &p.metadata.namespace, &p.metadata.name, 0, None)
                }))
                .await;
                let mut first_error = None;
                let mut deleted = Vec::new();
                for (pod, r) in victims.iter().zip(results) {
                    match r {
                        Ok(_) => deleted.push(pod.metadata.name.as_str()),
                        Err(e) => {
                            let pod_key =
                                Kind::Pod.key(&pod.metadata.namespace, &pod.metadata.name);
                            self.expectations().deleted(key, &pod_key);
                            if e.code() != Some(Code::NotFound) {
                                first_error.get_or_insert(e);
                            }
                        }
                    }
                }
                self.ctx.metrics.pod_writes("delete", "ok", deleted.len());
                self.record_each(
                    &me,
                    reason::SUCCESSFUL_DELETE,
                    "Deleted",
                    deleted.into_iter(),
                );
                match first_error {
                    None => Ok(()),
                    Some(e) => {
                        self.ctx.metrics.pod_writes("delete", "error", 1);
                        let message = format!("Error deleting: {e}");
                        self.events
                            .warning(me, reason::FAILED_DELETE, message.clone());
                        Err((
                            Failure {
                                reason: reason::FAILED_DELETE,
                                message,
                            },
                            e,
                        ))
                    }
                }
            }
        }
    }
}

impl Controller for ReplicaSets {
    const NAME: &'static str = NAME;

    fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    async fn sync(&self, key: &str) -> Result<Requeue, ClientError> {
        let (namespace, name) = split_key(key);
        let Some(object) = self.ctx.replica_sets.get(namespace, name) else {
            return Ok(None);
        };
        let Object::ReplicaSet(rs) = &*object else {
            return Ok(None);
        };
        if rs.metadata.deletion_timestamp.is_some() {
            self.expectations().forget(&rs.metadata.uid);
        }
        let waiting = self.expectations().satisfied(&rs.metadata.uid).err();
        let needs_sync = waiting.is_none() && rs.metadata.deletion_timestamp.is_none();
        let owned = self.claim(rs).await?;
        let active: Vec<&Pod> = owned
            .iter()
            .filter_map(|o| match &**o {
                Object::Pod(p) if pods::is_active(p) => Some(p),
                _ => None,
            })
            .collect();
        let outcome = if needs_sync {
            self.manage(rs, &active).await
        } else {
            Ok(())
        };
        let now = Time::now().unix();
        let failure = outcome.as_ref().err().map(|(f, _)| f);
        let status = plan::status(rs, &active, now, failure);
        if rs.status.as_ref() != Some(&status) {
            let mut next = rs.clone();
            next.status = Some(status);
            gone_is_none(
                self.ctx
                    .client
                    .update_status(&Object::ReplicaSet(next))
                    .await,
            )?;
        }
        if let Err((_, e)) = outcome {
            return Err(e);
        }
        let min_ready = rs.spec.min_ready_seconds.unwrap_or(0);
        let due = active
            .iter()
            .filter_map(|p| pods::seconds_to_available(p, min_ready, now))
            .min()
            .map(|s| Duration::from_secs(s.unsigned_abs()));
        // Expectations that are never met (an event lost to a relist) expire: look again
        // then, even if nothing else happens.
        Ok(match (due, waiting) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }
}

/// Whether a create's error says the store refused it (nothing was written), rather than
/// that the answer was lost.
fn refusal(e: &ClientError) -> bool {
    matches!(
        e.code(),
        Some(
            Code::InvalidArgument
                | Code::FailedPrecondition
                | Code::AlreadyExists
                | Code::Aborted
                | Code::NotFound
                | Code::PermissionDenied
                | Code::Unauthenticated
                | Code::ResourceExhausted
                | Code::OutOfRange
        )
    )
}

/// A pod of `rs`'s template: named by the store from `<rs>-`, controlled by `rs`.
pub fn pod_for(rs: &ReplicaSet) -> Pod {
    crate::podcontrol::pod_of_template(
        &rs.spec.template,
        Kind::ReplicaSet,
        &rs.metadata,
        format!("{}-", rs.metadata.name),
    )
}
