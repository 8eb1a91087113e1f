//! The StatefulSet controller: pods with stable names (`<set>-<ordinal>`) and stable DNS
//! names (`<pod>.<serviceName>`, their hostname and subdomain), each with its own
//! PersistentVolumeClaims made from `volumeClaimTemplates` (`<claim>-<set>-<ordinal>`),
//! started and stopped in order (`OrderedReady`) or all at once (`Parallel`), and rolled to a
//! new template from the highest ordinal down to the partition, as kube-controller-manager's
//! `statefulset` controller does (Kubernetes 1.32).
//!
//! The templates are ControllerRevisions ([`crate::history`]): a pod carries the name of the
//! revision it was made from (`controller-revision-hash`), a pod made again below the
//! partition gets the current revision's template. A claim outlives its pod, so a pod made
//! again finds its data; `persistentVolumeClaimRetentionPolicy` decides whether claims go
//! with the set (`whenDeleted: Delete`: the set owns them) or with a pod scaled away
//! (`whenScaled: Delete`: the pod owns them once condemned), both through the garbage
//! collector. The decisions are in [`plan`], without I/O.

use std::sync::Arc;

use serde_json::{Value, json};
use skiff_proto::api::apps::{PodTemplateSpec, StatefulSet};
use skiff_proto::api::meta::OwnerReference;
use skiff_proto::api::volume::{PersistentVolumeClaimVolumeSource, Volume};
use skiff_proto::api::{Kind, Object, Pod, Time};
use skiff_proto::client::{ClientError, Code, Event};
use skiff_proto::recorder::{EventRecorder, reference_to};

use crate::core::{Context, Controller, Requeue, controller_ref, gone_is_none, key_of, split_key};
use crate::deployment::template_hash;
use crate::history::{self, REVISION_HASH_LABEL};
use crate::podcontrol;
use crate::queue::WorkQueue;

pub mod plan;

/// The controller's name in logs and metrics.
pub const NAME: &str = "statefulset";

/// The kind of StatefulSets.
pub fn kind() -> Kind {
    Kind::from_name("StatefulSet").expect("invariant: StatefulSet is declared")
}

/// The kind of PersistentVolumeClaims.
pub fn claim_kind() -> Kind {
    Kind::from_name("PersistentVolumeClaim").expect("invariant: PersistentVolumeClaim is declared")
}

#[derive(Debug)]
pub struct StatefulSets {
    ctx: Arc<Context>,
    queue: WorkQueue,
    /// Events from `statefulset-controller`, as Kubernetes names their source.
    events: EventRecorder,
}

/// The names of the claims of the pod of `set` at `ordinal`, with their templates.
fn claims(set: &StatefulSet, ordinal: i32) -> Vec<(String, &Value)> {
    set.spec
        .volume_claim_templates
        .iter()
        .filter_map(|t| {
            let name = t.pointer("/metadata/name")?.as_str()?;
            Some((format!("{name}-{}-{ordinal}", set.metadata.name), t))
        })
        .collect()
}

/// The claim of `template` for the pod at `ordinal`: the template's spec, its labels with
/// the set's selector's, owned by the set when it goes with it.
fn claim(set: &StatefulSet, name: &str, template: &Value) -> Option<Object> {
    let mut labels = template
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(l) = labels.as_object_mut() {
        for (k, v) in &set.spec.selector.match_labels {
            l.insert(k.clone(), json!(v));
        }
    }
    let mut metadata = json!({
        "name": name,
        "namespace": set.metadata.namespace,
        "labels": labels,
    });
    if let Some(a) = template.pointer("/metadata/annotations") {
        metadata["annotations"] = a.clone();
    }
    if set.deletes_claims().0 {
        metadata["ownerReferences"] = json!([controller_ref(kind(), &set.metadata)]);
    }
    let value = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    });
    Object::from_value(claim_kind(), value).ok()
}

/// The pod of `set` at `ordinal`, of `template` (revision `revision`): its stable name,
/// hostname and subdomain, its identity labels, and its claims as its volumes.
pub fn pod_at(set: &StatefulSet, template: &PodTemplateSpec, revision: &str, ordinal: i32) -> Pod {
    let name = format!("{}-{ordinal}", set.metadata.name);
    let mut pod = podcontrol::pod_of_template(template, kind(), &set.metadata, String::new());
    pod.metadata.name = name.clone();
    let labels = &mut pod.metadata.labels;
    labels.insert(plan::POD_NAME_LABEL.to_owned(), name.clone());
    labels.insert(plan::POD_INDEX_LABEL.to_owned(), ordinal.to_string());
    labels.insert(REVISION_HASH_LABEL.to_owned(), revision.to_owned());
    pod.spec.other.0.insert("hostname".into(), json!(name));
    if !set.spec.service_name.is_empty() {
        pod.spec
            .other
            .0
            .insert("subdomain".into(), json!(set.spec.service_name));
    }
    for (claim_name, t) in claims(set, ordinal) {
        let Some(volume) = t.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        pod.spec.volumes.retain(|v| v.name != volume);
        pod.spec.volumes.push(Volume {
            name: volume.to_owned(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name,
                read_only: None,
            }),
            ..Volume::default()
        });
    }
    pod
}

impl StatefulSets {
    pub fn new(ctx: Arc<Context>) -> Self {
        StatefulSets {
            events: ctx.events.with_component("statefulset-controller"),
            ctx,
            queue: WorkQueue::new(),
        }
    }

    pub fn on_stateful_set(&self, event: &Event) {
        if let Event::Added(o) | Event::Modified(o) | Event::Deleted(o) = event {
            self.queue.add(key_of(o.metadata()));
        }
    }

    /// A pod changed: count it off its set's expectations and sync the set.
    pub fn on_pod(&self, event: &Event) {
        if let Some(key) = podcontrol::observe(&self.ctx, event, kind()) {
            self.queue.add(key);
        }
    }

    /// Makes the claims of the pod at `ordinal` that are missing; an error names the claim.
    async fn ensure_claims(&self, set: &StatefulSet, ordinal: i32) -> Result<(), ClientError> {
        let me = reference_to(kind(), &set.metadata);
        let pod = format!("{}-{ordinal}", set.metadata.name);
        for (name, t) in claims(set, ordinal) {
            if self
                .ctx
                .claims
                .get(&set.metadata.namespace, &name)
                .is_some()
            {
                continue;
            }
            let Some(c) = claim(set, &name, t) else {
                continue;
            };
            match self.ctx.client.create(&c).await {
                Ok(_) => self.events.normal(
                    me.clone(),
                    "SuccessfulCreate",
                    format!(
                        "create Claim {name} Pod {pod} in StatefulSet {} success",
                        set.metadata.name
                    ),
                ),
                Err(e) if e.code() == Some(Code::AlreadyExists) => {}
                Err(e) => {
                    self.events.warning(
                        me.clone(),
                        "FailedCreate",
                        format!(
                            "create Claim {name} for Pod {pod} in StatefulSet {} failed error: {e}",
                            set.metadata.name
                        ),
                    );
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Gives the claims of the condemned pod `pod` to it alone, so they go once it has gone
    /// (`whenScaled: Delete`), as Kubernetes hands them over.
    async fn give_claims_to(&self, set: &StatefulSet, pod: &Pod) -> Result<(), ClientError> {
        let Some(ordinal) = plan::ordinal_of(&set.metadata.name, &pod.metadata.name) else {
            return Ok(());
        };
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            ..OwnerReference::default()
        };
        for (name, _) in claims(set, ordinal) {
            let Some(stored) = self.ctx.claims.get(&set.metadata.namespace, &name) else {
                continue;
            };
            let mut c = (*stored).clone();
            let refs = &mut c.metadata_mut().owner_references;
            if refs.iter().any(|r| r.uid == owner.uid) {
                continue;
            }
            // The pod alone owns it now: an object goes once all its owners are gone, and
            // the set stays.
            refs.retain(|r| r.uid != set.metadata.uid);
            refs.push(owner.clone());
            gone_is_none(self.ctx.client.update(&c).await)?;
        }
        Ok(())
    }

    /// The template of revision `name`: the set's own when it is the update revision,
    /// else the stored revision's (the set's when that is gone).
    fn template_of(&self, set: &StatefulSet, update: &str, name: &str) -> PodTemplateSpec {
        if name != update {
            let stored = history::revisions_of(&self.ctx, &set.metadata.uid);
            if let Some(t) = stored.iter().find_map(|o| match &**o {
                Object::Generic(_, g) if g.metadata.name == name => history::template_of(g),
                _ => None,
            }) {
                return t;
            }
        }
        set.spec.template.clone()
    }
}

impl Controller for StatefulSets {
    const NAME: &'static str = NAME;

    fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    async fn sync(&self, key: &str) -> Result<Requeue, ClientError> {
        let (namespace, name) = split_key(key);
        let Some(object) = self.ctx.stateful_sets.get(namespace, name) else {
            return Ok(None);
        };
        let Some((stored, set)) = podcontrol::typed::<StatefulSet>(&object, key) else {
            return Ok(None);
        };
        let uid = set.metadata.uid.clone();
        if set.metadata.deletion_timestamp.is_some() {
            self.ctx.expectations.forget(&uid);
            return Ok(None);
        }
        let hash = template_hash(&set.spec.template, set.status.collision_count);
        let update = format!("{}-{hash}", set.metadata.name);
        let limit = set.spec.revision_history_limit.unwrap_or(10).max(0);
        let owner = history::Owner {
            kind: kind(),
            meta: &set.metadata,
            template: &set.spec.template,
        };
        history::record(&self.ctx, owner, &hash, usize::try_from(limit).unwrap_or(0)).await?;
        let current = if set.status.current_revision.is_empty() {
            update.clone()
        } else {
            set.status.current_revision.clone()
        };
        let owned = podcontrol::controlled(&self.ctx, &uid);
        let pods = podcontrol::pods(&owned);
        let now = Time::now().unix();
        let decision = plan::decide(&set, &pods, &current, &update, now);
        let waiting = self.ctx.expectations.satisfied(&uid).err();
        let mut error = None;
        if waiting.is_none() {
            let ns = &set.metadata.namespace;
            self.ctx.expectations.expect(
                &uid,
                decision.create.len(),
                decision.delete.iter().map(|(n, _)| Kind::Pod.key(ns, n)),
            );
            let me = reference_to(kind(), &set.metadata);
            let mut deletes = Vec::new();
            for (pod_name, condemned) in &decision.delete {
                if *condemned
                    && set.deletes_claims().1
                    && let Some(p) = pods.iter().find(|p| &p.metadata.name == pod_name)
                    && let Err(e) = self.give_claims_to(&set, p).await
                {
                    error.get_or_insert(e);
                }
                deletes.push(pod_name.clone());
            }
            if !deletes.is_empty()
                && let Some(e) =
                    podcontrol::delete(&self.ctx, &self.events, &me, &uid, ns, &deletes).await
            {
                error.get_or_insert(e);
            }
            let mut made = Vec::new();
            let mut short = 0;
            for (ordinal, revision) in &decision.create {
                if let Err(e) = self.ensure_claims(&set, *ordinal).await {
                    error.get_or_insert(e);
                    short += 1;
                    continue;
                }
                let template = self.template_of(&set, &update, revision);
                made.push(Object::Pod(pod_at(&set, &template, revision, *ordinal)));
            }
            if short > 0 {
                self.ctx.expectations.created(&uid, short);
            }
            if !made.is_empty() {
                let expected = made.len();
                if let Some(e) =
                    podcontrol::create(&self.ctx, &self.events, &me, &uid, made, expected).await
                {
                    error.get_or_insert(e);
                }
            }
        }
        if decision.status != set.status {
            podcontrol::write_status(&self.ctx, kind(), stored.with_status(&decision.status))
                .await?;
        }
        if let Some(e) = error {
            return Err(e);
        }
        let min_ready = set.spec.min_ready_seconds.unwrap_or(0);
        Ok(podcontrol::next_look(&pods, min_ready, now, waiting))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "db", "namespace": "team", "uid": "s"},
            "spec": {"replicas": 2, "serviceName": "db",
                     "selector": {"matchLabels": {"app": "db"}},
                     "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete"},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"},
                         "spec": {"accessModes": ["ReadWriteOnce"],
                                  "resources": {"requests": {"storage": "1Gi"}}}}],
                     "template": {"metadata": {"labels": {"app": "db"}},
                                  "spec": {"containers": [{"name": "c", "image": "i",
                                      "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}}
        }))
        .unwrap()
    }

    /// A pod's name, DNS identity, labels and claim come from its ordinal.
    #[test]
    fn a_pod_is_named_by_its_ordinal_and_mounts_its_claim() {
        let s = set();
        let p = pod_at(&s, &s.spec.template, "db-abc", 1);
        assert_eq!(p.metadata.name, "db-1");
        assert!(p.metadata.generate_name.is_empty());
        assert_eq!(p.spec.other.get("hostname"), Some(&json!("db-1")));
        assert_eq!(p.spec.other.get("subdomain"), Some(&json!("db")));
        assert_eq!(p.metadata.labels[plan::POD_NAME_LABEL], "db-1");
        assert_eq!(p.metadata.labels[plan::POD_INDEX_LABEL], "1");
        assert_eq!(p.metadata.labels[REVISION_HASH_LABEL], "db-abc");
        let v = p.spec.volumes.iter().find(|v| v.name == "data").unwrap();
        assert_eq!(
            v.persistent_volume_claim.as_ref().unwrap().claim_name,
            "data-db-1"
        );
        let c = claim(&s, "data-db-1", &s.spec.volume_claim_templates[0]).unwrap();
        let m = c.metadata();
        assert_eq!(m.labels["app"], "db");
        assert_eq!(m.owner_references[0].uid, "s", "whenDeleted: Delete");
    }
}
