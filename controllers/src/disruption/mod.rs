//! The disruption controller: each PodDisruptionBudget's status, as
//! kube-controller-manager's `disruption` controller keeps it (Kubernetes 1.32), so the API
//! server's eviction knows how many of the budget's pods may go now.
//!
//! ```text
//!  a budget changes ───────────────┐
//!  a pod changes (the budgets of   │
//!    its namespace that select it, ├──► sync: the pods it selects, their controllers' scale
//!    by its old and new labels) ───┤     (ReplicaSet, Deployment through its ReplicaSet,
//!  every budget, every RESYNC ─────┤     StatefulSet, ReplicationController), the evictions
//!  an eviction's entry expiring ───┘     under way ──► plan ──► status written where it differs
//! ```
//!
//! The arithmetic is in [`plan`], without I/O. A budget whose expected pods cannot be worked
//! out (a pod's controller unknown or gone) fails safe: no disruption allowed, and the
//! `DisruptionAllowed` condition (reason `SyncFailed`) says why. A controller's scale is read
//! from the caches; its changes reach the budget through its pods' events, or at the next
//! [`RESYNC`].

use std::sync::Arc;
use std::time::Duration;

use skiff_proto::api::meta::OwnerReference;
use skiff_proto::api::policy::{PodDisruptionBudget, pod_disruption_budget_kind};
use skiff_proto::api::{GenericObject, Kind, Object, Pod, Time};
use skiff_proto::client::{ClientError, Event};
use skiff_proto::recorder::{EventRecorder, reference_to};

use crate::cache::controller_of;
use crate::core::{Context, Controller, Requeue, key_of, split_key};
use crate::podcontrol;
use crate::queue::WorkQueue;

pub mod plan;

/// The controller's name in logs and metrics.
pub const NAME: &str = "disruption";
/// How often every budget is looked at whatever was seen (kube-controller-manager resyncs
/// its budgets every 30 s): a controller scaled without its pods changing yet is caught
/// there.
pub const RESYNC: Duration = Duration::from_secs(30);

/// The kind of PodDisruptionBudgets.
pub fn kind() -> Kind {
    pod_disruption_budget_kind()
}

/// The kind of ReplicationControllers (read for their scale).
pub fn replication_controller_kind() -> Kind {
    Kind::from_name("ReplicationController").expect("invariant: ReplicationController is declared")
}

#[derive(Debug)]
pub struct Disruption {
    ctx: Arc<Context>,
    queue: WorkQueue,
    /// Events from `controllermanager`, as Kubernetes names this controller's source.
    events: EventRecorder,
}

/// Whether `owner` names `kind` of one of `groups` (`apps`, or `extensions` of old).
fn names(owner: &OwnerReference, kind: &str, groups: &[&str]) -> bool {
    let group = owner.api_version.split_once('/').map_or("", |(g, _)| g);
    owner.kind == kind && groups.contains(&group)
}

impl Disruption {
    pub fn new(ctx: Arc<Context>) -> Self {
        Disruption {
            events: ctx.events.with_component("controllermanager"),
            ctx,
            queue: WorkQueue::new(),
        }
    }

    pub fn on_budget(&self, event: &Event) {
        if let Event::Added(o) | Event::Modified(o) | Event::Deleted(o) = event {
            self.queue.add(key_of(o.metadata()));
        }
    }

    /// A pod changed: the budgets that select it now, and those that did before a change
    /// of its labels.
    pub fn on_pod(&self, event: &Event, old: Option<&Object>) {
        let (Event::Added(o) | Event::Modified(o) | Event::Deleted(o)) = event else {
            return;
        };
        for pod in [Some(o), old].into_iter().flatten() {
            for key in self.budgets_of(pod) {
                self.queue.add(key);
            }
        }
    }

    /// The keys of the budgets of `pod`'s namespace that select it.
    fn budgets_of(&self, pod: &Object) -> Vec<String> {
        let meta = pod.metadata();
        self.ctx
            .disruption_budgets
            .list(Some(&meta.namespace))
            .iter()
            .filter_map(|b| podcontrol::typed::<PodDisruptionBudget>(b, &b.key()))
            .filter(|(_, pdb)| pdb.selects(&meta.labels))
            .map(|(_, pdb)| key_of(&pdb.metadata))
            .collect()
    }

    /// Queues every budget each [`RESYNC`], for as long as the controller runs.
    pub async fn resync(self: Arc<Self>) {
        let mut every = tokio::time::interval(RESYNC);
        every.tick().await;
        loop {
            every.tick().await;
            for b in self.ctx.disruption_budgets.list(None) {
                self.queue.add(key_of(b.metadata()));
            }
        }
    }

    /// The scale of `pod`'s controller `owner` as the caches have it: a ReplicaSet's (its
    /// Deployment's, when one controls it), a StatefulSet's or a ReplicationController's
    /// `spec.replicas`. `None` when it is none of those, or is not (or no longer) the one
    /// the reference names.
    fn scale_of(&self, pod: &Pod, owner: &OwnerReference) -> Option<plan::Scale> {
        let ns = &pod.metadata.namespace;
        const APPS: &[&str] = &["apps", "extensions"];
        if names(owner, "ReplicaSet", APPS) {
            let object = self.ctx.replica_sets.get(ns, &owner.name)?;
            let Object::ReplicaSet(rs) = &*object else {
                return None;
            };
            if rs.metadata.uid != owner.uid {
                return None;
            }
            return match controller_of(&object) {
                Some(d) if d.kind == Kind::Deployment.name() => {
                    if !names(d, "Deployment", APPS) {
                        return None;
                    }
                    let object = self.ctx.deployments.get(ns, &d.name)?;
                    match &*object {
                        Object::Deployment(dep) if dep.metadata.uid == d.uid => Some(plan::Scale {
                            uid: dep.metadata.uid.clone(),
                            replicas: dep.replicas(),
                        }),
                        _ => None,
                    }
                }
                _ => Some(plan::Scale {
                    uid: rs.metadata.uid.clone(),
                    replicas: rs.spec.replicas.unwrap_or(1),
                }),
            };
        }
        let (cache, replicas): (_, fn(&GenericObject) -> i32) = if names(owner, "StatefulSet", APPS)
        {
            (&self.ctx.stateful_sets, |o| {
                o.typed::<skiff_proto::api::apps::StatefulSet>()
                    .map_or(1, |s| s.replicas())
            })
        } else if names(owner, "ReplicationController", &[""]) {
            (&self.ctx.replication_controllers, |o| {
                o.int("/spec/replicas")
                    .and_then(|n| i32::try_from(n).ok())
                    .unwrap_or(1)
            })
        } else {
            return None;
        };
        let object = cache.get(ns, &owner.name)?;
        match &*object {
            Object::Generic(_, o) if o.metadata.uid == owner.uid => Some(plan::Scale {
                uid: o.metadata.uid.clone(),
                replicas: replicas(o),
            }),
            _ => None,
        }
    }
}

impl Controller for Disruption {
    const NAME: &'static str = NAME;

    fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    async fn sync(&self, key: &str) -> Result<Requeue, ClientError> {
        let (namespace, name) = split_key(key);
        let Some(object) = self.ctx.disruption_budgets.get(namespace, name) else {
            return Ok(None);
        };
        let Some((stored, pdb)) = podcontrol::typed::<PodDisruptionBudget>(&object, key) else {
            return Ok(None);
        };
        let selected: Vec<Arc<Object>> = self
            .ctx
            .pods
            .list(Some(namespace))
            .into_iter()
            .filter(|p| pdb.selects(&p.metadata().labels))
            .collect();
        let pods = podcontrol::pods(&selected);
        let me = reference_to(kind(), &pdb.metadata);
        if pods.is_empty() {
            self.events
                .normal(me.clone(), "NoPods", "No matching pods found".into());
        }
        let now = Time::now().unix();
        let (next, recheck_at) = match plan::expected(&pdb.spec, &pods, |p, r| self.scale_of(p, r))
        {
            Err(why) => {
                self.events.warning(
                    me,
                    "CalculateExpectedPodCountFailed",
                    format!("Failed to calculate the number of expected pods: {why}"),
                );
                let next = plan::fail_safe(&pdb, why);
                ((next != pdb.status).then_some(next), None)
            }
            Ok(expected) => {
                if !expected.unmanaged.is_empty() {
                    self.events.warning(
                        me,
                        "UnmanagedPods",
                        format!(
                            "Pods selected by this PodDisruptionBudget (selector: {}) were \
                                 found to be unmanaged. As a result, the status of the PDB \
                                 cannot be calculated correctly, which may result in undefined \
                                 behavior. To account for these pods please set \
                                 \".spec.minAvailable\" field of the PDB to an integer value.",
                            serde_json::to_string(&pdb.spec.selector).unwrap_or_default()
                        ),
                    );
                }
                let disrupted = plan::disrupted(&pdb.status.disrupted_pods, &pods, now);
                let expired = pods
                    .iter()
                    .filter(|p| disrupted.expired.contains(&p.metadata.name));
                for pod in expired {
                    self.events.warning(
                        reference_to(Kind::Pod, &pod.metadata),
                        "NotDeleted",
                        format!(
                            "Pod was expected by PDB {namespace}/{name} to be deleted but \
                                 it wasn't"
                        ),
                    );
                }
                let healthy = plan::current_healthy(&pods, &disrupted.pods, now);
                (
                    plan::status(&pdb, &expected, healthy, disrupted.pods),
                    disrupted.recheck_at,
                )
            }
        };
        if let Some(status) = next {
            // Pinned to the budget read: an eviction's write meanwhile makes this a
            // conflict, and the sync runs again on the newer budget.
            podcontrol::write_status(&self.ctx, kind(), stored.with_status(&status)).await?;
        }
        // A second past the expiry, so the entry is gone when looked at.
        Ok(recheck_at
            .map(|at| Duration::from_secs(at.saturating_sub(now).max(0).unsigned_abs() + 1)))
    }
}
