//! The Deployment controller: one ReplicaSet per pod template, rolled forward by the
//! Deployment's strategy, old ones kept for rollback up to `revisionHistoryLimit`.
//!
//! A sync of one Deployment:
//! 1. claims ReplicaSets (adopts orphans its selector matches, releases those it no longer
//!    matches) and splits them into the *new* one (whose template is the Deployment's) and
//!    the *old* ones;
//! 2. when `replicas` changed mid-rollout, scales the active sets proportionally
//!    ([`plan::proportional`]); a paused Deployment does only this;
//! 3. otherwise takes one step of its strategy ([`plan::rolling`], [`plan::recreate`]),
//!    creating the new ReplicaSet (named `<deployment>-<pod-template-hash>`, revision one
//!    above the highest) when the template is new;
//! 4. once the rollout is complete, deletes old ReplicaSets beyond the history limit;
//! 5. writes its status: counts, `Available` and `Progressing` (with
//!    `ProgressDeadlineExceeded` when a rollout made no progress for
//!    `progressDeadlineSeconds`), the fields `kubectl rollout status` reads.
//!
//! Every step is a few writes and then waits for the ReplicaSet and pod events they cause,
//! so each decision is made on what the caches show after the last one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use skiff_proto::api::apps::{
    DESIRED_REPLICAS_ANNOTATION, Deployment, DeploymentStatus, MAX_REPLICAS_ANNOTATION,
    POD_TEMPLATE_HASH_LABEL, PodTemplateSpec, REVISION_ANNOTATION, REVISION_HISTORY_ANNOTATION,
    ReplicaSet, ReplicaSetSpec, WorkloadCondition,
};
use skiff_proto::api::meta::NAME_ALPHABET;
use skiff_proto::api::{
    ConditionStatus, DeploymentStrategyType, Kind, Object, ObjectMeta, Time, WorkloadConditionType,
};
use skiff_proto::client::{ClientError, Code, Event};
use skiff_proto::recorder::{EventRecorder, reference};

use crate::cache::controller_of;
use crate::core::{
    Context, Controller, Requeue, controller_ref, gone_is_none, key_of, owner_key, split_key,
};
use crate::pods;
use crate::queue::WorkQueue;

pub mod plan;

use plan::{Bounds, Set, Step};

/// The controller's name in logs and metrics.
pub const NAME: &str = "deployment";

/// The reasons of a Deployment's conditions and events, as Kubernetes spells them (`kubectl
/// rollout status` reads `ProgressDeadlineExceeded`).
pub mod reason {
    pub const MINIMUM_REPLICAS_AVAILABLE: &str = "MinimumReplicasAvailable";
    pub const MINIMUM_REPLICAS_UNAVAILABLE: &str = "MinimumReplicasUnavailable";
    pub const PAUSED: &str = "DeploymentPaused";
    pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
    pub const RS_UPDATED: &str = "ReplicaSetUpdated";
    pub const DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
    pub const SCALING: &str = "ScalingReplicaSet";
}

/// The Deployment controller.
#[derive(Debug)]
pub struct Deployments {
    ctx: Arc<Context>,
    queue: WorkQueue,
    /// Events from `deployment-controller`, as Kubernetes names their source.
    events: EventRecorder,
}

/// A ReplicaSet of the Deployment, with what the plan needs to know of it.
#[derive(Debug, Clone)]
struct Owned {
    rs: ReplicaSet,
    /// Available pods, at most `spec.replicas` (see [`plan`]).
    available: i32,
    /// Active pods, whatever `spec.replicas` says.
    pods: i32,
    revision: i64,
}

impl Owned {
    fn set(&self) -> Set {
        Set {
            replicas: self.rs.replicas(),
            available: self.available,
            pods: self.pods,
        }
    }
}

/// The Deployment's annotations its ReplicaSets carry too: all but kubectl's applied
/// configuration and the ones the controller keeps per set.
fn copied_annotations(d: &Deployment) -> impl Iterator<Item = (&String, &String)> {
    const KEPT_PER_SET: [&str; 5] = [
        "kubectl.kubernetes.io/last-applied-configuration",
        REVISION_ANNOTATION,
        REVISION_HISTORY_ANNOTATION,
        DESIRED_REPLICAS_ANNOTATION,
        MAX_REPLICAS_ANNOTATION,
    ];
    d.metadata
        .annotations
        .iter()
        .filter(|(k, _)| !KEPT_PER_SET.contains(&k.as_str()))
}

fn revision_of(meta: &ObjectMeta) -> i64 {
    meta.annotations
        .get(REVISION_ANNOTATION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// The template without the `pod-template-hash` label: what a ReplicaSet's template is
/// compared to the Deployment's by.
fn without_hash(t: &PodTemplateSpec) -> PodTemplateSpec {
    let mut t = t.clone();
    t.metadata.labels.remove(POD_TEMPLATE_HASH_LABEL);
    t
}

/// The `pod-template-hash` of a template: FNV-1a (32 bits) of its canonical JSON and the
/// collision count, its decimal digits spelled in the name alphabet, as Kubernetes spells
/// them (`7d9f8b6c5`).
pub fn template_hash(template: &PodTemplateSpec, collision_count: i32) -> String {
    let json = serde_json::to_vec(&without_hash(template))
        .expect("invariant: a pod template always encodes as JSON");
    let mut h: u32 = 0x811c_9dc5;
    for b in json.iter().copied().chain(
        collision_count
            .to_le_bytes()
            .into_iter()
            .take_while(|_| collision_count > 0),
    ) {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h.to_string()
        .bytes()
        .map(|d| NAME_ALPHABET[usize::from(d - b'0')] as char)
        .collect()
}

fn condition(
    type_: WorkloadConditionType,
    status: ConditionStatus,
    reason: &str,
    message: String,
    now: Time,
) -> WorkloadCondition {
    WorkloadCondition {
        type_,
        status,
        last_update_time: Some(now),
        last_transition_time: Some(now),
        reason: reason.to_owned(),
        message,
        other: Default::default(),
    }
}

/// Sets `c` in `conditions`: the transition time is kept while the status stays, the update
/// time while nothing about it changes (unless `touched`: progress was made).
fn set_condition(conditions: &mut Vec<WorkloadCondition>, mut c: WorkloadCondition, touched: bool) {
    match conditions.iter_mut().find(|o| o.type_ == c.type_) {
        None => conditions.push(c),
        Some(old) => {
            if old.status == c.status {
                c.last_transition_time = old.last_transition_time;
                if old.reason == c.reason && old.message == c.message && !touched {
                    c.last_update_time = old.last_update_time;
                }
            }
            *old = c;
        }
    }
}

impl Deployments {
    pub fn new(ctx: Arc<Context>) -> Self {
        Deployments {
            events: ctx.events.with_component("deployment-controller"),
            ctx,
            queue: WorkQueue::new(),
        }
    }

    pub fn on_deployment(&self, event: &Event) {
        if let Event::Added(o) | Event::Modified(o) | Event::Deleted(o) = event {
            self.queue.add(key_of(o.metadata()));
        }
    }

    /// A ReplicaSet changed: sync its Deployment (the old one too, if it changed hands); an
    /// orphan wakes the Deployments that may adopt it.
    pub fn on_replica_set(&self, event: &Event, old: Option<&Object>) {
        let (Event::Added(object) | Event::Modified(object) | Event::Deleted(object)) = event
        else {
            return;
        };
        let owner = owner_key(object, Kind::Deployment);
        if let Some(key) = &owner {
            self.queue.add(key.clone());
        }
        if let Some(previous) = old.and_then(|o| owner_key(o, Kind::Deployment))
            && Some(&previous) != owner.as_ref()
        {
            self.queue.add(previous);
        }
        if owner.is_none() && !matches!(event, Event::Deleted(_)) {
            let meta = object.metadata();
            for d in self.ctx.deployments.list(Some(&meta.namespace)) {
                if let Object::Deployment(d) = &*d
                    && d.spec.selector.matches(&meta.labels)
                {
                    self.queue.add(key_of(&d.metadata));
                }
            }
        }
    }

    /// A pod went away: a Recreate rollout may be waiting for the last old one.
    pub fn on_pod(&self, event: &Event) {
        let Event::Deleted(pod) = event else { return };
        let Some(r) = controller_of(pod).filter(|r| r.kind == Kind::ReplicaSet.name()) else {
            return;
        };
        if let Some(rs) = self
            .ctx
            .replica_sets
            .get(&pod.metadata().namespace, &r.name)
            && let Some(key) = owner_key(&rs, Kind::Deployment)
        {
            self.queue.add(key);
        }
    }

    /// The ReplicaSets `d` controls once adoptions and releases are done, with their
    /// available pods counted from the pod cache.
    async fn claim(&self, d: &Deployment) -> Result<Vec<Owned>, ClientError> {
        let uid = &d.metadata.uid;
        let deleting = d.metadata.deletion_timestamp.is_some();
        let mut sets = Vec::new();
        for object in self.ctx.replica_sets.owned_by(uid) {
            if controller_of(&object).is_none_or(|r| &r.uid != uid) {
                continue;
            }
            if deleting || d.spec.selector.matches(&object.metadata().labels) {
                sets.push(object);
                continue;
            }
            let mut released = (*object).clone();
            released
                .metadata_mut()
                .owner_references
                .retain(|r| &r.uid != uid);
            gone_is_none(self.ctx.client.update(&released).await)?;
        }
        if !deleting {
            for object in self.ctx.replica_sets.orphans_in(&d.metadata.namespace) {
                if object.metadata().deletion_timestamp.is_some()
                    || !d.spec.selector.matches(&object.metadata().labels)
                {
                    continue;
                }
                let mut adopted = (*object).clone();
                adopted
                    .metadata_mut()
                    .owner_references
                    .push(controller_ref(Kind::Deployment, &d.metadata));
                if let Some(done) = gone_is_none(self.ctx.client.update(&adopted).await)? {
                    sets.push(Arc::new(done));
                }
            }
        }
        let now = Time::now().unix();
        Ok(sets
            .iter()
            .filter_map(|o| match &**o {
                Object::ReplicaSet(rs) => Some(rs.clone()),
                _ => None,
            })
            .map(|rs| {
                let min_ready = rs.spec.min_ready_seconds.unwrap_or(0);
                let owned = self.ctx.pods.owned_by(&rs.metadata.uid);
                let active: Vec<&skiff_proto::api::Pod> = owned
                    .iter()
                    .filter_map(|p| match &**p {
                        Object::Pod(p) if pods::is_active(p) => Some(p),
                        _ => None,
                    })
                    .collect();
                let from_pods = active
                    .iter()
                    .filter(|p| pods::is_available(p, min_ready, now))
                    .count();
                // Creates the ReplicaSet controller has sent and the cache not yet shown count
                // as pods: they may appear at any moment.
                let active = i32::try_from(active.len())
                    .unwrap_or(i32::MAX)
                    .saturating_add(self.ctx.expectations.pending_creates(&rs.metadata.uid));
                let from_status = rs.status.as_ref().map_or(0, |s| s.available_replicas);
                let available = i32::try_from(from_pods)
                    .unwrap_or(i32::MAX)
                    .min(from_status)
                    .min(rs.replicas());
                let revision = revision_of(&rs.metadata);
                Owned {
                    rs,
                    available,
                    pods: active,
                    revision,
                }
            })
            .collect())
    }

    /// Writes `rs` scaled to `replicas`, with the Deployment's size and surge noted on it;
    /// records the scaling.
    async fn scale(
        &self,
        d: &Deployment,
        rs: &ReplicaSet,
        replicas: i32,
    ) -> Result<ReplicaSet, ClientError> {
        let (surge, _) = d.surge_and_unavailable();
        let mut next = rs.clone();
        next.spec.replicas = Some(replicas);
        let notes = &mut next.metadata.annotations;
        notes.insert(DESIRED_REPLICAS_ANNOTATION.into(), d.replicas().to_string());
        notes.insert(
            MAX_REPLICAS_ANNOTATION.into(),
            (d.replicas() + surge).to_string(),
        );
        if next == *rs {
            return Ok(next);
        }
        let written = self.ctx.client.update(&Object::ReplicaSet(next)).await?;
        let from = rs.replicas();
        if from != replicas {
            let direction = if replicas > from { "up" } else { "down" };
            self.events.normal(
                reference(&Object::Deployment(d.clone())),
                reason::SCALING,
                format!(
                    "Scaled {direction} replica set {} from {from} to {replicas}",
                    rs.metadata.name
                ),
            );
        }
        match written {
            Object::ReplicaSet(rs) => Ok(rs),
            _ => Ok(rs.clone()),
        }
    }

    /// The new ReplicaSet of `d`'s template, created with `replicas` and revision `revision`.
    async fn create_new(
        &self,
        d: &Deployment,
        replicas: i32,
        revision: i64,
    ) -> Result<Option<ReplicaSet>, ClientError> {
        let collisions = d
            .status
            .as_ref()
            .and_then(|s| s.collision_count)
            .unwrap_or(0);
        let hash = template_hash(&d.spec.template, collisions);
        let mut template = d.spec.template.clone();
        template
            .metadata
            .labels
            .insert(POD_TEMPLATE_HASH_LABEL.into(), hash.clone());
        let mut selector = d.spec.selector.clone();
        selector
            .match_labels
            .insert(POD_TEMPLATE_HASH_LABEL.into(), hash.clone());
        let (surge, _) = d.surge_and_unavailable();
        let mut annotations: BTreeMap<String, String> = copied_annotations(d)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        annotations.extend([
            (REVISION_ANNOTATION.to_owned(), revision.to_string()),
            (
                DESIRED_REPLICAS_ANNOTATION.to_owned(),
                d.replicas().to_string(),
            ),
            (
                MAX_REPLICAS_ANNOTATION.to_owned(),
                (d.replicas() + surge).to_string(),
            ),
        ]);
        let rs = ReplicaSet {
            metadata: ObjectMeta {
                name: format!("{}-{hash}", d.metadata.name),
                namespace: d.metadata.namespace.clone(),
                labels: template.metadata.labels.clone(),
                annotations,
                owner_references: vec![controller_ref(Kind::Deployment, &d.metadata)],
                ..ObjectMeta::default()
            },
            spec: ReplicaSetSpec {
                replicas: Some(replicas),
                min_ready_seconds: d.spec.min_ready_seconds,
                selector,
                template,
                other: Default::default(),
            },
            ..ReplicaSet::default()
        };
        match self
            .ctx
            .client
            .create(&Object::ReplicaSet(rs.clone()))
            .await
        {
            Ok(Object::ReplicaSet(created)) => {
                self.events.normal(
                    reference(&Object::Deployment(d.clone())),
                    reason::SCALING,
                    format!(
                        "Scaled up replica set {} from 0 to {replicas}",
                        created.metadata.name
                    ),
                );
                Ok(Some(created))
            }
            Ok(_) => Ok(None),
            Err(e) if e.code() == Some(Code::AlreadyExists) => {
                // Ours with this template (the cache is behind): use it. Anything else is a
                // hash collision: count it, so the next name differs.
                let existing = self
                    .ctx
                    .client
                    .get(Kind::ReplicaSet, &rs.metadata.namespace, &rs.metadata.name)
                    .await?;
                if let Some(Object::ReplicaSet(found)) = existing
                    && controller_of(&Object::ReplicaSet(found.clone()))
                        .is_some_and(|r| r.uid == d.metadata.uid)
                    && without_hash(&found.spec.template) == without_hash(&d.spec.template)
                {
                    return Ok(Some(found));
                }
                let mut next = d.clone();
                let status = next.status.get_or_insert_with(DeploymentStatus::default);
                status.collision_count = Some(collisions + 1);
                self.ctx
                    .client
                    .update_status(&Object::Deployment(next))
                    .await?;
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Deletes the oldest drained ReplicaSets beyond `revisionHistoryLimit`.
    async fn clean_up(&self, d: &Deployment, old: &[Owned]) -> Result<(), ClientError> {
        let limit = usize::try_from(d.spec.revision_history_limit.unwrap_or(10)).unwrap_or(0);
        let mut drained: Vec<&Owned> = old
            .iter()
            .filter(|o| {
                o.rs.replicas() == 0
                    && o.rs.status.as_ref().is_none_or(|s| s.replicas == 0)
                    && o.rs.metadata.deletion_timestamp.is_none()
            })
            .collect();
        if drained.len() <= limit {
            return Ok(());
        }
        drained.sort_by_key(|o| (o.revision, o.rs.metadata.creation_timestamp));
        for o in &drained[..drained.len() - limit] {
            let m = &o.rs.metadata;
            let rv = m.revision().unwrap_or(0);
            match self
                .ctx
                .client
                .delete(Kind::ReplicaSet, &m.namespace, &m.name, rv, None)
                .await
            {
                Ok(_) => {}
                Err(e) if matches!(e.code(), Some(Code::NotFound | Code::Aborted)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Status from the ReplicaSets as they now are; writes it when it changed. Returns when
    /// to look again for the progress deadline.
    async fn sync_status(
        &self,
        d: &Deployment,
        new: Option<&Owned>,
        old: &[Owned],
        progressed: bool,
    ) -> Result<Requeue, ClientError> {
        let now = Time::now();
        let all = new.into_iter().chain(old);
        let mut status = d.status.clone().unwrap_or_default();
        let previous = status.clone();
        let count = |f: &dyn Fn(&Owned) -> i32| -> i32 { all.clone().map(f).sum() };
        status.observed_generation = d.metadata.generation;
        status.replicas = count(&|o| o.rs.status.as_ref().map_or(0, |s| s.replicas));
        status.updated_replicas = new.map_or(0, |o| o.rs.status.as_ref().map_or(0, |s| s.replicas));
        status.ready_replicas = count(&|o| o.rs.status.as_ref().map_or(0, |s| s.ready_replicas));
        status.available_replicas =
            count(&|o| o.rs.status.as_ref().map_or(0, |s| s.available_replicas));
        status.unavailable_replicas =
            (count(&|o| o.rs.replicas()) - status.available_replicas).max(0);
        let (_, max_unavailable) = d.surge_and_unavailable();
        let available = status.available_replicas >= d.replicas() - max_unavailable;
        set_condition(
            &mut status.conditions,
            if available {
                condition(
                    WorkloadConditionType::Available,
                    ConditionStatus::True,
                    reason::MINIMUM_REPLICAS_AVAILABLE,
                    "Deployment has minimum availability.".into(),
                    now,
                )
            } else {
                condition(
                    WorkloadConditionType::Available,
                    ConditionStatus::False,
                    reason::MINIMUM_REPLICAS_UNAVAILABLE,
                    "Deployment does not have minimum availability.".into(),
                    now,
                )
            },
            false,
        );
        // A set that cannot create or delete its pods (a quota) says so on the Deployment too,
        // so `kubectl describe deployment` shows why replicas are missing.
        let failure = new.into_iter().chain(old).find_map(|o| {
            o.rs.status.as_ref()?.conditions.iter().find(|c| {
                c.type_ == WorkloadConditionType::ReplicaFailure
                    && c.status == ConditionStatus::True
            })
        });
        match failure {
            Some(c) => set_condition(
                &mut status.conditions,
                condition(
                    WorkloadConditionType::ReplicaFailure,
                    ConditionStatus::True,
                    &c.reason,
                    c.message.clone(),
                    now,
                ),
                false,
            ),
            None => status
                .conditions
                .retain(|c| c.type_ != WorkloadConditionType::ReplicaFailure),
        }
        let name = new.map_or_else(String::new, |o| o.rs.metadata.name.clone());
        let complete = status.updated_replicas == d.replicas()
            && status.replicas == d.replicas()
            && status.available_replicas == d.replicas()
            && new.is_some_and(|o| o.available == d.replicas());
        let moved = progressed
            || status.updated_replicas > previous.updated_replicas
            || status.ready_replicas > previous.ready_replicas
            || status.available_replicas > previous.available_replicas
            || status.replicas - status.updated_replicas
                < previous.replicas - previous.updated_replicas;
        let deadline = d.spec.progress_deadline_seconds.map(i64::from);
        let mut requeue = None;
        let progressing = d.condition(&WorkloadConditionType::Progressing).cloned();
        if d.spec.paused {
            set_condition(
                &mut status.conditions,
                condition(
                    WorkloadConditionType::Progressing,
                    ConditionStatus::Unknown,
                    reason::PAUSED,
                    "Deployment is paused".into(),
                    now,
                ),
                false,
            );
        } else if complete {
            set_condition(
                &mut status.conditions,
                condition(
                    WorkloadConditionType::Progressing,
                    ConditionStatus::True,
                    reason::NEW_RS_AVAILABLE,
                    format!("ReplicaSet \"{name}\" has successfully progressed."),
                    now,
                ),
                false,
            );
        } else if moved
            || progressing
                .as_ref()
                .is_none_or(|c| c.reason == reason::PAUSED)
        {
            set_condition(
                &mut status.conditions,
                condition(
                    WorkloadConditionType::Progressing,
                    ConditionStatus::True,
                    reason::RS_UPDATED,
                    format!("ReplicaSet \"{name}\" is progressing."),
                    now,
                ),
                true,
            );
            requeue = deadline.map(|s| Duration::from_secs(s.unsigned_abs() + 1));
        } else if let (Some(c), Some(limit)) = (&progressing, deadline)
            && c.status == ConditionStatus::True
            && c.reason != reason::NEW_RS_AVAILABLE
        {
            let since = c.last_update_time.map_or(now.unix(), |t| t.unix());
            let left = since + limit - now.unix();
            if left < 0 {
                set_condition(
                    &mut status.conditions,
                    condition(
                        WorkloadConditionType::Progressing,
                        ConditionStatus::False,
                        reason::DEADLINE_EXCEEDED,
                        format!("ReplicaSet \"{name}\" has timed out progressing."),
                        now,
                    ),
                    false,
                );
                self.events.warning(
                    reference(&Object::Deployment(d.clone())),
                    reason::DEADLINE_EXCEEDED,
                    format!("ReplicaSet \"{name}\" has timed out progressing."),
                );
            } else {
                requeue = Some(Duration::from_secs(left.unsigned_abs() + 1));
            }
        }
        if status != previous {
            let mut next = d.clone();
            next.status = Some(status);
            gone_is_none(
                self.ctx
                    .client
                    .update_status(&Object::Deployment(next))
                    .await,
            )?;
        }
        Ok(requeue)
    }

    /// Makes the new ReplicaSet's revision the highest, and the Deployment's revision its.
    async fn sync_revision(
        &self,
        d: &mut Deployment,
        new: &mut Owned,
        old: &[Owned],
    ) -> Result<(), ClientError> {
        let highest_old = old.iter().map(|o| o.revision).max().unwrap_or(0);
        let mut next = new.rs.clone();
        let notes = &mut next.metadata.annotations;
        // The Deployment's own annotations (`kubernetes.io/change-cause` for `kubectl
        // rollout history`) follow it onto its current set, as in Kubernetes.
        for (k, v) in copied_annotations(d) {
            notes.insert(k.clone(), v.clone());
        }
        if new.revision <= highest_old {
            if new.revision > 0 {
                let mut history: Vec<String> = notes
                    .get(REVISION_HISTORY_ANNOTATION)
                    .map(|h| h.split(',').map(str::to_owned).collect())
                    .unwrap_or_default();
                history.push(new.revision.to_string());
                notes.insert(REVISION_HISTORY_ANNOTATION.into(), history.join(","));
            }
            new.revision = highest_old + 1;
            notes.insert(REVISION_ANNOTATION.into(), new.revision.to_string());
        }
        // Availability is judged by the Deployment's current minReadySeconds.
        next.spec.min_ready_seconds = d.spec.min_ready_seconds;
        if next != new.rs
            && let Some(Object::ReplicaSet(rs)) =
                gone_is_none(self.ctx.client.update(&Object::ReplicaSet(next)).await)?
        {
            new.rs = rs;
        }
        let revision = new.revision.to_string();
        if d.metadata.annotations.get(REVISION_ANNOTATION) != Some(&revision) {
            let mut next = d.clone();
            next.metadata
                .annotations
                .insert(REVISION_ANNOTATION.into(), revision);
            if let Some(Object::Deployment(written)) =
                gone_is_none(self.ctx.client.update(&Object::Deployment(next)).await)?
            {
                *d = written;
            }
        }
        Ok(())
    }

    /// Old pods still running or terminating: a Recreate rollout waits for them.
    fn old_pods_left(&self, old: &[Owned]) -> usize {
        old.iter()
            .map(|o| {
                self.ctx
                    .pods
                    .owned_by(&o.rs.metadata.uid)
                    .iter()
                    .filter(|p| matches!(&***p, Object::Pod(p) if !p.is_terminal()))
                    .count()
            })
            .sum()
    }
}

impl Controller for Deployments {
    const NAME: &'static str = NAME;

    fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    async fn sync(&self, key: &str) -> Result<Requeue, ClientError> {
        let (namespace, name) = split_key(key);
        let Some(object) = self.ctx.deployments.get(namespace, name) else {
            return Ok(None);
        };
        let Object::Deployment(d) = &*object else {
            return Ok(None);
        };
        // Written to as the sync goes (the revision annotation), so later writes carry the
        // resourceVersion of the last.
        let mut d = d.clone();
        let d = &mut d;
        if d.metadata.deletion_timestamp.is_some() {
            // The garbage collector takes the ReplicaSets; nothing rolls any more.
            return Ok(None);
        }
        let sets = self.claim(d).await?;
        let template = without_hash(&d.spec.template);
        let (mut new, mut old): (Vec<Owned>, Vec<Owned>) = sets
            .into_iter()
            .partition(|o| without_hash(&o.rs.spec.template) == template);
        // Several sets of the same template (adopted): the oldest is the new one.
        new.sort_by_key(|o| o.rs.metadata.creation_timestamp);
        let mut new = if new.is_empty() {
            None
        } else {
            let first = new.remove(0);
            old.extend(new);
            Some(first)
        };
        old.sort_by_key(|o| (o.revision, o.rs.metadata.creation_timestamp));
        let (surge, unavailable) = d.surge_and_unavailable();
        let bounds = Bounds {
            replicas: d.replicas(),
            max_surge: surge,
            max_unavailable: unavailable,
        };
        if let Some(n) = new.as_mut() {
            self.sync_revision(d, n, &old).await?;
        }

        // Replicas changed mid-rollout (or while paused): spread the change over the active
        // sets, then look again.
        let desired = d.replicas().to_string();
        let scaling = new.iter().chain(&old).any(|o| {
            o.rs.replicas() > 0
                && o.rs.metadata.annotations.get(DESIRED_REPLICAS_ANNOTATION) != Some(&desired)
        });
        if scaling || d.spec.paused {
            // The new set first, then old ones by falling revision.
            let sets: Vec<&Owned> = new.iter().chain(old.iter().rev()).collect();
            let views: Vec<Set> = sets.iter().map(|o| o.set()).collect();
            let rolling = d.strategy_type() == DeploymentStrategyType::RollingUpdate;
            let sizes = plan::scale(&bounds, &views, new.as_ref().map(|_| 0), rolling);
            let mut wrote = false;
            for (o, size) in sets.iter().zip(sizes) {
                let noted = o.rs.metadata.annotations.get(DESIRED_REPLICAS_ANNOTATION);
                if size != o.rs.replicas() || (size > 0 && noted != Some(&desired)) {
                    self.scale(d, &o.rs, size).await?;
                    wrote = true;
                }
            }
            if wrote || d.spec.paused {
                return self.sync_status(d, new.as_ref(), &old, wrote).await;
            }
        }

        let old_sets: Vec<Set> = old.iter().map(Owned::set).collect();
        let mut progressed = false;
        match new.as_ref() {
            None => {
                let replicas = match d.strategy_type() {
                    DeploymentStrategyType::Recreate => {
                        match plan::recreate(
                            &bounds,
                            &Set::default(),
                            &old_sets,
                            self.old_pods_left(&old),
                        ) {
                            Step::ScaleNew(n) => Some(n),
                            Step::ScaleOld(changes) => {
                                for (i, n) in changes {
                                    self.scale(d, &old[i].rs, n).await?;
                                }
                                None
                            }
                            Step::Wait => None,
                        }
                    }
                    DeploymentStrategyType::RollingUpdate => {
                        Some(plan::new_set_size(&bounds, &Set::default(), &old_sets))
                    }
                };
                if let Some(replicas) = replicas {
                    let revision = old.iter().map(|o| o.revision).max().unwrap_or(0) + 1;
                    if let Some(rs) = self.create_new(d, replicas, revision).await? {
                        new = Some(Owned {
                            revision: revision_of(&rs.metadata),
                            rs,
                            available: 0,
                            pods: 0,
                        });
                        progressed = true;
                        if let Some(n) = new.as_mut() {
                            self.sync_revision(d, n, &old).await?;
                        }
                    }
                }
            }
            Some(n) => {
                let step = match d.strategy_type() {
                    DeploymentStrategyType::Recreate => {
                        plan::recreate(&bounds, &n.set(), &old_sets, self.old_pods_left(&old))
                    }
                    DeploymentStrategyType::RollingUpdate => {
                        plan::rolling(&bounds, &n.set(), &old_sets)
                    }
                };
                match step {
                    Step::ScaleNew(size) => {
                        let rs = self.scale(d, &n.rs, size).await?;
                        new = Some(Owned { rs, ..n.clone() });
                        progressed = true;
                    }
                    Step::ScaleOld(changes) => {
                        for (i, size) in changes {
                            let rs = self.scale(d, &old[i].rs, size).await?;
                            old[i].rs = rs;
                        }
                        progressed = true;
                    }
                    Step::Wait => {}
                }
            }
        }
        let requeue = self.sync_status(d, new.as_ref(), &old, progressed).await?;
        let complete = new
            .as_ref()
            .is_some_and(|n| n.rs.replicas() == d.replicas() && n.available == d.replicas())
            && old.iter().all(|o| o.rs.replicas() == 0);
        if complete {
            self.clean_up(d, &old).await?;
        }
        Ok(requeue)
    }
}

#[cfg(test)]
mod hash_tests {
    use super::*;

    #[test]
    fn the_hash_ignores_its_own_label_and_moves_with_collisions() {
        let mut t = PodTemplateSpec::default();
        t.metadata.labels.insert("app".into(), "web".into());
        let h = template_hash(&t, 0);
        assert!(h.bytes().all(|b| NAME_ALPHABET.contains(&b)), "{h}");
        let mut labelled = t.clone();
        labelled
            .metadata
            .labels
            .insert(POD_TEMPLATE_HASH_LABEL.into(), h.clone());
        assert_eq!(template_hash(&labelled, 0), h);
        assert_ne!(template_hash(&t, 1), h);
    }
}
