//! The DaemonSet controller: one pod of a DaemonSet's template on each node it should run
//! on, following nodes as they come, go and change their labels and taints, and rolling a
//! new template across them (`RollingUpdate` within `maxUnavailable` and `maxSurge`, or
//! `OnDelete`), as kube-controller-manager's `daemonset` controller does (Kubernetes 1.32).
//!
//! Daemon pods are placed by the scheduler, like any pod: each is pinned to its node by a
//! required node affinity on `metadata.name`, so the scheduler still checks that it fits
//! and never overcommits the node. Each carries the daemon tolerations (a daemon keeps
//! running on a node that is unreachable, under pressure or cordoned) and the
//! `controller-revision-hash` of its template, by which the update tells old pods from new;
//! the templates are kept as ControllerRevisions ([`history`]) for `kubectl rollout history`
//! and `undo`. The decisions are in [`plan`], without I/O.

use std::sync::Arc;

use serde_json::json;
use skiff_proto::api::apps::DaemonSet;
use skiff_proto::api::{Kind, Node, Object, Pod, Time};
use skiff_proto::client::{ClientError, Event};
use skiff_proto::recorder::{EventRecorder, reference_to};

use crate::core::{Context, Controller, Requeue, key_of, split_key};
use crate::deployment::template_hash;
use crate::history;
use crate::podcontrol;
use crate::queue::WorkQueue;

pub mod plan;

/// The controller's name in logs and metrics.
pub const NAME: &str = "daemonset";

/// The kind of DaemonSets.
pub fn kind() -> Kind {
    Kind::from_name("DaemonSet").expect("invariant: DaemonSet is declared")
}

#[derive(Debug)]
pub struct DaemonSets {
    ctx: Arc<Context>,
    queue: WorkQueue,
    /// Events from `daemonset-controller`, as Kubernetes names their source.
    events: EventRecorder,
}

/// The pod of `ds`'s template that `node` would run, before it is pinned there: the
/// template with the daemon tolerations and the revision labels.
pub fn template_pod(ds: &DaemonSet, hash: &str) -> Pod {
    let prefix = format!("{}-", ds.metadata.name);
    let mut pod = podcontrol::pod_of_template(&ds.spec.template, kind(), &ds.metadata, prefix);
    let labels = &mut pod.metadata.labels;
    labels.insert(plan::REVISION_HASH_LABEL.to_owned(), hash.to_owned());
    labels.insert(
        plan::TEMPLATE_GENERATION_LABEL.to_owned(),
        ds.metadata.generation.unwrap_or(1).to_string(),
    );
    plan::add_daemon_tolerations(&mut pod);
    pod
}

/// `template` pinned to `node`: its required node affinity is the node's name alone (the
/// controller has checked the rest), as Kubernetes replaces it.
fn pinned(template: &Pod, node: &str) -> Result<Pod, skiff_proto::api::object::DecodeError> {
    let mut v = serde_json::to_value(template).unwrap_or_default();
    v["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!({
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]
    });
    match Object::from_value(Kind::Pod, v)? {
        Object::Pod(p) => Ok(p),
        _ => unreachable!("invariant: a Pod decodes as a Pod"),
    }
}

impl DaemonSets {
    pub fn new(ctx: Arc<Context>) -> Self {
        DaemonSets {
            events: ctx.events.with_component("daemonset-controller"),
            ctx,
            queue: WorkQueue::new(),
        }
    }

    pub fn on_daemon_set(&self, event: &Event) {
        if let Event::Added(o) | Event::Modified(o) | Event::Deleted(o) = event {
            self.queue.add(key_of(o.metadata()));
        }
    }

    /// A node came, went or changed: every DaemonSet looks at it again.
    pub fn on_node(&self, event: &Event, old: Option<&Object>) {
        let relevant = match (event, old) {
            (Event::Modified(Object::Node(n)), Some(Object::Node(o))) => {
                n.metadata.labels != o.metadata.labels || n.spec.taints != o.spec.taints
            }
            (Event::Added(_) | Event::Deleted(_), _) => true,
            _ => false,
        };
        if relevant {
            for ds in self.ctx.daemon_sets.list(None) {
                self.queue.add(key_of(ds.metadata()));
            }
        }
    }

    /// A pod changed: count it off its DaemonSet's expectations and sync the DaemonSet.
    pub fn on_pod(&self, event: &Event) {
        if let Some(key) = podcontrol::observe(&self.ctx, event, kind()) {
            self.queue.add(key);
        }
    }

    async fn create(
        &self,
        ds: &DaemonSet,
        template: &Pod,
        nodes: &[String],
    ) -> Option<ClientError> {
        let pods: Vec<Object> = nodes
            .iter()
            .filter_map(|n| pinned(template, n).ok().map(Object::Pod))
            .collect();
        let me = reference_to(kind(), &ds.metadata);
        podcontrol::create(
            &self.ctx,
            &self.events,
            &me,
            &ds.metadata.uid,
            pods,
            nodes.len(),
        )
        .await
    }

    async fn delete(&self, ds: &DaemonSet, names: &[String]) -> Option<ClientError> {
        let me = reference_to(kind(), &ds.metadata);
        let (ns, uid) = (&ds.metadata.namespace, &ds.metadata.uid);
        podcontrol::delete(&self.ctx, &self.events, &me, uid, ns, names).await
    }
}

impl Controller for DaemonSets {
    const NAME: &'static str = NAME;

    fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    async fn sync(&self, key: &str) -> Result<Requeue, ClientError> {
        let (namespace, name) = split_key(key);
        let Some(object) = self.ctx.daemon_sets.get(namespace, name) else {
            return Ok(None);
        };
        let Some((stored, ds)) = podcontrol::typed::<DaemonSet>(&object, key) else {
            return Ok(None);
        };
        let uid = ds.metadata.uid.clone();
        if ds.metadata.deletion_timestamp.is_some() {
            self.ctx.expectations.forget(&uid);
            return Ok(None);
        }
        let hash = template_hash(&ds.spec.template, 0);
        let template = template_pod(&ds, &hash);
        let limit = stored
            .at("/spec/revisionHistoryLimit")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(10);
        let owner = history::Owner {
            kind: kind(),
            meta: &ds.metadata,
            template: &ds.spec.template,
        };
        history::record(
            &self.ctx,
            owner,
            &hash,
            usize::try_from(limit).unwrap_or(usize::MAX),
        )
        .await?;
        let owned = podcontrol::controlled(&self.ctx, &uid);
        let pods = podcontrol::pods(&owned);
        let nodes: Vec<Arc<Object>> = self.ctx.nodes.list(None);
        let nodes: Vec<&Node> = nodes
            .iter()
            .filter_map(|o| match &**o {
                Object::Node(n) => Some(n),
                _ => None,
            })
            .collect();
        let now = Time::now().unix();
        let decision = plan::decide(&ds, &template, &hash, &nodes, &pods, now);
        let waiting = self.ctx.expectations.satisfied(&uid).err();
        let mut error = None;
        if waiting.is_none() {
            // What this sync creates and deletes is expected as one: the next sync waits
            // until the caches show all of it.
            let ns = &ds.metadata.namespace;
            self.ctx.expectations.expect(
                &uid,
                decision.create.len(),
                decision.delete.iter().map(|n| Kind::Pod.key(ns, n)),
            );
            if !decision.delete.is_empty() {
                error = self.delete(&ds, &decision.delete).await;
            }
            if !decision.create.is_empty()
                && let Some(e) = self.create(&ds, &template, &decision.create).await
            {
                error.get_or_insert(e);
            }
        }
        if decision.status != ds.status {
            podcontrol::write_status(&self.ctx, kind(), stored.with_status(&decision.status))
                .await?;
        }
        if let Some(e) = error {
            return Err(e);
        }
        // A pod that is ready but not yet available for `minReadySeconds`: look again then.
        let min_ready = ds.spec.min_ready_seconds.unwrap_or(0);
        Ok(podcontrol::next_look(&pods, min_ready, now, waiting))
    }
}
