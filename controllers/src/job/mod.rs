//! The Job controller: runs a Job's pods to its completions, as kube-controller-manager's
//! `job` controller does (Kubernetes 1.32): `parallelism` at a time, NonIndexed or Indexed
//! (each index in `[0, completions)` succeeds once; its pods carry the index as an
//! annotation, a label, `JOB_COMPLETION_INDEX` and their hostname), work queues (no
//! `completions`), `backoffLimit` with an exponential pause before a failed pod is replaced,
//! a pod failure policy (`FailJob`, `Ignore`, `Count`), `activeDeadlineSeconds`, `suspend`
//! and `ttlSecondsAfterFinished`.
//!
//! Pods are counted exactly once, whatever deletes them: each is created with the
//! `batch.kubernetes.io/job-tracking` finalizer; a finished pod is first recorded in the
//! Job's `status.uncountedTerminatedPods` (one status write), then its finalizer is removed,
//! then it moves into `succeeded` or `failed` (another). A sync that stops anywhere in
//! between is finished by the next. The decisions are in [`plan`], without I/O.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::json;
use skiff_proto::api::batch::{
    JOB_COMPLETION_INDEX, JOB_COMPLETION_INDEX_ENV, JOB_TRACKING_FINALIZER, Job,
};
use skiff_proto::api::pod::EnvVar;
use skiff_proto::api::volume::{EnvVarSource, ObjectFieldSelector};
use skiff_proto::api::{DeletionPropagation, GenericObject, Kind, Object, Pod, Time};
use skiff_proto::client::{ClientError, Event};
use skiff_proto::recorder::EventRecorder;

use crate::cache::controller_of;
use crate::core::{Context, Controller, Requeue, gone_is_none, key_of, split_key};
use crate::podcontrol;
use crate::queue::WorkQueue;

pub mod plan;

/// How many tracking finalizers one sync removes at once.
const CONCURRENT_RELEASES: usize = 64;

/// The controller's name in logs and metrics.
pub const NAME: &str = "job";

/// The kind of Jobs.
pub fn kind() -> Kind {
    Kind::from_name("Job").expect("invariant: Job is declared")
}

#[derive(Debug)]
pub struct Jobs {
    ctx: Arc<Context>,
    queue: WorkQueue,
    /// Events from `job-controller`, as Kubernetes names their source.
    events: EventRecorder,
    /// Per Job uid, the pods whose tracking finalizer this controller removed and whose
    /// change the pod cache has not shown yet: counted already, never again.
    released: Mutex<HashMap<String, HashSet<String>>>,
}

impl Jobs {
    pub fn new(ctx: Arc<Context>) -> Self {
        Jobs {
            events: ctx.events.with_component("job-controller"),
            ctx,
            queue: WorkQueue::new(),
            released: Mutex::default(),
        }
    }

    fn released(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashSet<String>>> {
        self.released
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn released_of(&self, job_uid: &str) -> HashSet<String> {
        self.released().get(job_uid).cloned().unwrap_or_default()
    }

    pub fn on_job(&self, event: &Event) {
        if let Event::Added(o) | Event::Modified(o) | Event::Deleted(o) = event {
            self.queue.add(key_of(o.metadata()));
        }
    }

    /// A pod changed: count it off its Job's expectations and sync the Job; a pod whose
    /// finalizer is seen gone is no longer among the released.
    pub fn on_pod(&self, event: &Event) {
        let Some(key) = podcontrol::observe(&self.ctx, event, kind()) else {
            return;
        };
        let (Event::Added(object) | Event::Modified(object) | Event::Deleted(object)) = event
        else {
            return;
        };
        let tracked = object
            .metadata()
            .finalizers
            .iter()
            .any(|f| f == JOB_TRACKING_FINALIZER);
        if !tracked
            && self
                .ctx
                .jobs
                .get(&object.metadata().namespace, split_key(&key).1)
                .is_none()
        {
            // Its Job is gone and nothing holds the pod: nothing to release, no sync (a Job's
            // pods going one by one would scan the namespace each time).
            let uid = controller_of(object).map_or("", |r| r.uid.as_str());
            self.released().remove(uid);
            return;
        }
        if matches!(event, Event::Deleted(_)) || !tracked {
            let uid = controller_of(object).map_or("", |r| r.uid.as_str());
            let mut released = self.released();
            if let Some(pods) = released.get_mut(uid) {
                pods.remove(&object.metadata().uid);
                if pods.is_empty() {
                    released.remove(uid);
                }
            }
        }
        self.queue.add(key);
    }

    /// Removes the tracking finalizer of `pod`; false if the pod is gone.
    async fn release(&self, pod: &Pod) -> Result<bool, ClientError> {
        let mut next = pod.clone();
        next.metadata
            .finalizers
            .retain(|f| f != JOB_TRACKING_FINALIZER);
        Ok(gone_is_none(self.ctx.client.update(&Object::Pod(next)).await)?.is_some())
    }

    /// The pods of a Job that is gone (or going) keep no tracking finalizer. Run for a
    /// missing Job only when a pod it still tracks changes ([`Jobs::on_pod`]).
    async fn release_all(&self, namespace: &str, job: &str) -> Result<(), ClientError> {
        for object in self.ctx.pods.list(Some(namespace)) {
            let Object::Pod(pod) = &*object else { continue };
            let ours = controller_of(&object).is_some_and(|r| r.kind == "Job" && r.name == job);
            if ours
                && pod
                    .metadata
                    .finalizers
                    .iter()
                    .any(|f| f == JOB_TRACKING_FINALIZER)
            {
                self.release(pod).await?;
            }
        }
        Ok(())
    }

    /// Writes the Job's status; returns the stored Job as written (`None`: it is gone).
    async fn write_status(
        &self,
        stored: &GenericObject,
        job: &Job,
    ) -> Result<Option<GenericObject>, ClientError> {
        podcontrol::write_status(&self.ctx, kind(), stored.with_status(&job.status)).await
    }

    /// Creates a pod for each index of `create`; returns the first error.
    async fn create(&self, job: &Job, create: &[Option<i32>]) -> Option<ClientError> {
        let uid = job.metadata.uid.as_str();
        self.ctx.expectations.expect(uid, create.len(), []);
        let pods: Vec<Object> = create
            .iter()
            .map(|i| Object::Pod(pod_for(job, *i)))
            .collect();
        let me = job_reference(job);
        podcontrol::create(&self.ctx, &self.events, &me, uid, pods, create.len()).await
    }

    async fn delete_pods(&self, job: &Job, names: &[String]) -> Option<ClientError> {
        let (ns, uid) = (&job.metadata.namespace, &job.metadata.uid);
        self.ctx
            .expectations
            .expect(uid, 0, names.iter().map(|n| Kind::Pod.key(ns, n)));
        let me = job_reference(job);
        podcontrol::delete(&self.ctx, &self.events, &me, uid, ns, names).await
    }
}

fn job_reference(job: &Job) -> skiff_proto::api::ObjectReference {
    skiff_proto::recorder::reference_to(kind(), &job.metadata)
}

/// A pod of `job`'s template: named by the store from `<job>-` (`<job>-<index>-`),
/// controlled by the Job, tracked by its finalizer; an Indexed Job's carries its index as an
/// annotation, a label, its hostname (unless the template names one) and
/// `JOB_COMPLETION_INDEX` in every container.
pub fn pod_for(job: &Job, index: Option<i32>) -> Pod {
    let name = &job.metadata.name;
    let prefix = match index {
        Some(i) => format!("{name}-{i}-"),
        None => format!("{name}-"),
    };
    let mut pod = podcontrol::pod_of_template(&job.spec.template, kind(), &job.metadata, prefix);
    pod.metadata
        .finalizers
        .push(JOB_TRACKING_FINALIZER.to_owned());
    if let Some(i) = index {
        let meta = &mut pod.metadata;
        meta.annotations
            .insert(JOB_COMPLETION_INDEX.to_owned(), i.to_string());
        meta.labels
            .insert(JOB_COMPLETION_INDEX.to_owned(), i.to_string());
        let hostname = pod.spec.other.0.entry("hostname").or_insert(json!(""));
        if hostname.as_str().is_none_or(str::is_empty) {
            *hostname = json!(format!("{name}-{i}"));
        }
        let env = EnvVar {
            name: JOB_COMPLETION_INDEX_ENV.to_owned(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: "v1".to_owned(),
                    field_path: format!("metadata.annotations['{JOB_COMPLETION_INDEX}']"),
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        };
        for c in pod
            .spec
            .init_containers
            .iter_mut()
            .chain(pod.spec.containers.iter_mut())
        {
            c.env.push(env.clone());
        }
    }
    pod
}

impl Controller for Jobs {
    const NAME: &'static str = NAME;

    fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    async fn sync(&self, key: &str) -> Result<Requeue, ClientError> {
        let (namespace, name) = split_key(key);
        let Some(object) = self.ctx.jobs.get(namespace, name) else {
            self.release_all(namespace, name).await?;
            return Ok(None);
        };
        let Some((stored, mut job)) = podcontrol::typed::<Job>(&object, key) else {
            return Ok(None);
        };
        let uid = job.metadata.uid.clone();
        if job.metadata.deletion_timestamp.is_some() {
            self.ctx.expectations.forget(&uid);
            self.released().remove(&uid);
            self.release_all(namespace, name).await?;
            return Ok(None);
        }
        let owned = podcontrol::controlled(&self.ctx, &uid);
        let pods = podcontrol::pods(&owned);
        let now = Time::now();
        let mut stored = stored.clone();

        // Finished pods are recorded before their finalizers go.
        let released = self.released_of(&uid);
        let recorded = plan::record(&mut job, &pods, &released, now);
        if recorded.changed {
            match self.write_status(&stored, &job).await? {
                Some(written) => stored = written,
                None => return Ok(None),
            }
        }
        let mut held: HashSet<String> = pods
            .iter()
            .filter(|p| {
                p.metadata
                    .finalizers
                    .iter()
                    .any(|f| f == JOB_TRACKING_FINALIZER)
            })
            .map(|p| p.metadata.uid.clone())
            .filter(|u| !released.contains(u))
            .collect();
        // Released side by side: one update each, and a Job finishing a thousand pods at once
        // would otherwise wait out a thousand round trips.
        let releasing: Vec<&Pod> = pods
            .iter()
            .copied()
            .filter(|p| recorded.release.contains(&p.metadata.name))
            .collect();
        let mut results: Vec<(&Pod, Result<bool, ClientError>)> = Vec::new();
        for chunk in releasing.chunks(CONCURRENT_RELEASES) {
            let done = futures::future::join_all(chunk.iter().map(|pod| self.release(pod))).await;
            results.extend(chunk.iter().copied().zip(done));
        }
        let mut failed = None;
        for (pod, result) in results {
            match result {
                Ok(true) => {
                    self.released()
                        .entry(uid.clone())
                        .or_default()
                        .insert(pod.metadata.uid.clone());
                }
                Ok(false) => {}
                Err(e) => {
                    failed.get_or_insert(e);
                    continue;
                }
            }
            held.remove(&pod.metadata.uid);
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let before = job.status.clone();
        plan::count(&mut job, &held);

        let waiting = self.ctx.expectations.satisfied(&uid).err();
        if let Some(wait) = waiting {
            // Creates or deletes of the last sync not yet seen: only the counts move.
            if job.status != before {
                self.write_status(&stored, &job).await?;
            }
            return Ok(Some(wait));
        }
        let decision = plan::decide(&mut job, &pods, now);
        let mut error = None;
        if !decision.delete.is_empty() {
            error = self.delete_pods(&job, &decision.delete).await;
        }
        if !decision.create.is_empty()
            && let Some(e) = self.create(&job, &decision.create).await
        {
            error.get_or_insert(e);
        }
        if job.status != before || recorded.changed {
            self.write_status(&stored, &job).await?;
        }
        let me = job_reference(&job);
        for note in &decision.notes {
            if note.warning {
                self.events
                    .warning(me.clone(), note.reason, note.message.clone());
            } else {
                self.events
                    .normal(me.clone(), note.reason, note.message.clone());
            }
        }
        if decision.delete_job {
            gone_is_none(
                self.ctx
                    .client
                    .delete_propagating(kind(), namespace, name, 0, DeletionPropagation::Foreground)
                    .await,
            )?;
        }
        if let Some(e) = error {
            return Err(e);
        }
        Ok(decision.requeue)
    }
}
