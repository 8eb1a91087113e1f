//! The informer handlers: what the scheduler does with each node and pod event.
//!
//! ```text
//!  node added / changed ──► table row (and unschedulable pods retried); its conditions
//!                           and taints as stored (a silent node is marked Ready=Unknown
//!                           and tainted by the controller manager's node lifecycle
//!                           controller, not judged here)
//!  node deleted         ──► row removed (its pods stay known, counted again if it returns);
//!                           pods waiting on pod terms retried
//!  pod bound            ──► queue forgets it; table accounts it on its node (confirmed),
//!                           every update (labels change what pod terms count); pods
//!                           waiting on terms it now satisfies (or stopped blocking) retried
//!  pod bound, finished  ──► queue and table forget it
//!  pod pending, ours    ──► queue holds the newest version (see `queue` on why the queue
//!                           is the one owner of pending pods)
//!  pod being deleted    ──► queue forgets it
//!  or another's
//!  pod deleted          ──► queue and table forget it (and a nomination it held)
//!  budget changed       ──► what preemption spares
//! ```
//!
//! The queue holds one pending pod per name, as the store does; the table keys pods by UID,
//! so an event about a pod re-created under a name never updates or removes its
//! predecessor's placement (whose Bind may still be in flight), and a confirmed pod of that
//! name with another UID is known to be gone (a relist shows a re-created pod as an update).
//!
//! A pending pod whose claims are bound to volumes pinned to nodes (the local provisioner's)
//! is queued with those nodes as one more required node affinity term: a StatefulSet's pod
//! made again goes back to its data.
//!
//! The handlers need no store: they read events, so tests drive them directly.

use std::sync::Arc;

use skiff_proto::api::Object;
use skiff_proto::client::Event;

use super::DEFAULT_SCHEDULER_NAME;
use crate::model::{NodeInfo, PodInfo, pod_id};
use crate::parallel::Core;
use crate::preemption::Budget;
use crate::table::{NodeTable, Placement, counted_alike};

/// The node and pod informers' handlers, over the table and the queue.
#[derive(Debug)]
pub struct Handlers {
    core: Arc<Core>,
    /// The `spec.schedulerName`s this scheduler takes (an empty name too).
    names: Vec<String>,
    /// Claims and the nodes their volumes are pinned to.
    volumes: std::sync::Mutex<Volumes>,
    /// The bound pods these handlers gave the table, by `namespace/name`: their ids (two
    /// when a pod was deleted and created again under its name while the informer was
    /// away). Taken inside the table's lock, never the other way round. Kept here rather
    /// than in the table, whose committers place pods (assumed) by the hundred thousand
    /// and need no name.
    confirmed: parking_lot::Mutex<std::collections::HashMap<String, Vec<String>>>,
}

/// What the scheduler knows of claims and volumes: a pod of a claim bound to a volume with
/// node affinity (a local volume) goes only to the volume's nodes, as kube-scheduler's
/// VolumeBinding plugin keeps it.
#[derive(Debug, Default)]
struct Volumes {
    /// `namespace/name` of each bound claim → its volume.
    claims: std::collections::HashMap<String, String>,
    /// Volume → the nodes its required node affinity names.
    pins: std::collections::HashMap<String, Vec<String>>,
}

fn pod_key(o: &Object) -> String {
    format!("{}/{}", o.metadata().namespace, o.metadata().name)
}

impl Handlers {
    /// Handlers for a scheduler that takes `default-scheduler` pods and, if set and
    /// different, pods that name `scheduler_name`.
    pub fn new(core: Arc<Core>, scheduler_name: &str) -> Self {
        let mut names = vec![DEFAULT_SCHEDULER_NAME.to_string()];
        if !scheduler_name.is_empty() && scheduler_name != DEFAULT_SCHEDULER_NAME {
            names.push(scheduler_name.to_string());
        }
        Handlers {
            core,
            names,
            volumes: Default::default(),
            confirmed: Default::default(),
        }
    }

    fn lock_volumes(&self) -> std::sync::MutexGuard<'_, Volumes> {
        self.volumes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A claim or volume changed.
    pub fn on_volume(&self, event: &Event) {
        let (o, gone) = match event {
            Event::Added(o) | Event::Modified(o) => (o, false),
            Event::Deleted(o) => (o, true),
            Event::Bookmark(_) => return,
        };
        let Object::Generic(_, g) = o else { return };
        let mut v = self.lock_volumes();
        let m = &g.metadata;
        match o.kind().name() {
            "PersistentVolumeClaim" => {
                let key = format!("{}/{}", m.namespace, m.name);
                let volume = g.text("/spec/volumeName");
                if gone || volume.is_empty() {
                    v.claims.remove(&key);
                } else {
                    v.claims.insert(key, volume.to_owned());
                }
            }
            "PersistentVolume" => {
                let pins = skiff_proto::api::volume::pinned_nodes(&o.to_json_value());
                match pins.filter(|_| !gone) {
                    Some(nodes) => {
                        v.pins.insert(m.name.clone(), nodes);
                    }
                    None => {
                        v.pins.remove(&m.name);
                    }
                }
            }
            _ => {}
        }
    }

    /// A PodDisruptionBudget changed: preemption spares the pods it protects where it can.
    pub fn on_budget(&self, event: &Event) {
        let (o, gone) = match event {
            Event::Added(o) | Event::Modified(o) => (o, false),
            Event::Deleted(o) => (o, true),
            Event::Bookmark(_) => return,
        };
        let key = pod_key(o);
        let mut budgets = self.core.budgets.lock();
        if gone {
            budgets.remove(&key);
        } else {
            budgets.insert(key, Budget::from_json(&o.to_json_value()));
        }
    }

    /// A pending pod left this scheduler (deleted, or another's): the room a preemption
    /// held for it is free again.
    fn forget_nomination(&self, id: &str) {
        let held = self.core.table.read().nominated.contains_key(id);
        if held && self.core.table.write().unnominate(id).is_some() {
            self.core.queue.cluster_changed();
        }
    }

    /// `p`, with its claims' volumes' nodes as one more required node affinity term (every
    /// term of its own ANDed with it); `None` when no claim of it is pinned.
    fn pinned(&self, p: &skiff_proto::api::Pod) -> Option<skiff_proto::api::Pod> {
        let nodes: Vec<String> = {
            let v = self.lock_volumes();
            let mut sets = p.spec.volumes.iter().filter_map(|vol| {
                let claim = vol.persistent_volume_claim.as_ref()?;
                let volume = v
                    .claims
                    .get(&format!("{}/{}", p.metadata.namespace, claim.claim_name))?;
                v.pins.get(volume).cloned()
            });
            let first = sets.next()?;
            sets.fold(first, |acc, s| {
                acc.into_iter().filter(|n| s.contains(n)).collect()
            })
        };
        let mut pod = p.clone();
        let requirement =
            serde_json::json!({"key": "metadata.name", "operator": "In", "values": nodes});
        let mut spec = serde_json::to_value(&pod.spec).ok()?;
        let terms = spec
            .pointer_mut("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
            .and_then(serde_json::Value::as_array_mut);
        match terms {
            Some(terms) if !terms.is_empty() => {
                for t in terms.iter_mut() {
                    let fields = t
                        .as_object_mut()?
                        .entry("matchFields")
                        .or_insert_with(|| serde_json::json!([]));
                    fields.as_array_mut()?.push(requirement.clone());
                }
            }
            _ => {
                spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
                    serde_json::json!({"nodeSelectorTerms": [{"matchFields": [requirement]}]});
            }
        }
        pod.spec = serde_json::from_value(spec).ok()?;
        Some(pod)
    }

    fn ours(&self, scheduler_name: &str) -> bool {
        scheduler_name.is_empty() || self.names.iter().any(|n| n == scheduler_name)
    }

    pub fn on_node(&self, event: &Event) {
        match event {
            Event::Added(Object::Node(n)) | Event::Modified(Object::Node(n)) => {
                let info = NodeInfo::from_node(n);
                let same = {
                    let table = self.core.table.read();
                    table
                        .row(&info.name)
                        .is_some_and(|r| *table.infos[r] == info)
                };
                if !same {
                    self.core.table.write().upsert_node(info);
                    self.core.queue.cluster_changed();
                }
            }
            Event::Deleted(Object::Node(n)) => {
                self.core.table.write().remove_node(&n.metadata.name);
                self.core.queue.node_removed();
            }
            _ => {}
        }
    }

    pub fn on_pod(&self, event: &Event) {
        match event {
            Event::Added(o @ Object::Pod(p)) | Event::Modified(o @ Object::Pod(p)) => {
                // The store holds one pod under a name: whatever the queue holds under it
                // that is pending no more (bound, being deleted, another's) is forgotten, and
                // the table forgets confirmed pods of the name with another UID.
                let key = pod_key(o);
                let id = pod_id(&p.metadata.namespace, &p.metadata.name, &p.metadata.uid);
                if !p.spec.node_name.is_empty() {
                    self.core.queue.remove(&key);
                    // Every update of a bound pod reaches the table: its labels may have
                    // changed, and the terms that select it count what it has now.
                    let info = Arc::new(PodInfo::from_pod(p));
                    if !p.is_terminal() && self.counted_as_is(&key, &id, &p.spec.node_name, &info) {
                        return; // a status update, say: behind a read lock only
                    }
                    let mut table = self.core.table.write();
                    let mut freed = self.remove_replaced_in(&mut table, &key, &id);
                    let mut placed = None;
                    if p.is_terminal() {
                        freed |= table.remove_pod(&id).is_some();
                        self.unconfirm(&key, &id);
                    } else {
                        if table
                            .pod(id.as_str())
                            .is_some_and(|e| *e.node != *p.spec.node_name)
                        {
                            // Bound elsewhere than we assumed (another scheduler won).
                            table.remove_pod(&id);
                            freed = true;
                        }
                        placed = table.add_pod(info.clone(), &p.spec.node_name, false).ok();
                        if placed.is_some() {
                            let mut confirmed = self.confirmed.lock();
                            let ids = confirmed.entry(key.clone()).or_default();
                            if !ids.contains(&id) {
                                ids.push(id.clone());
                            }
                        }
                    }
                    drop(table);
                    if freed {
                        self.core.queue.cluster_changed();
                    }
                    // What the pod terms count changed: the pods waiting on them may fit.
                    match placed {
                        Some(Placement::New)
                        | Some(Placement::Known {
                            was_assumed: true,
                            replaced: None,
                        }) => self.core.queue.pod_placed(&info, None),
                        Some(Placement::Known {
                            replaced: Some(before),
                            ..
                        }) => self.core.queue.pod_placed(&info, Some(&before.labels)),
                        _ => {}
                    }
                } else if p.metadata.deletion_timestamp.is_none()
                    && self.ours(&p.spec.scheduler_name)
                {
                    if self.remove_replaced(&key, &id) {
                        self.core.queue.cluster_changed();
                    }
                    // The queue holds it (updated in place while assumed). A pod the table
                    // already accounts a placement of comes in held: that placement's Bind is
                    // in flight, and a second one would bind twice or overcommit.
                    let pinned = self.pinned(p);
                    let p = pinned.as_ref().unwrap_or(p);
                    if self.core.table.read().has_pod(id.as_str()) {
                        self.core.queue.hold_pod(p);
                    } else {
                        self.core.queue.add_pod(p);
                    }
                } else {
                    // Being deleted before it was placed, or another scheduler's.
                    self.core.queue.remove(&key);
                    self.forget_nomination(&id);
                    if self.remove_replaced(&key, &id) {
                        self.core.queue.cluster_changed();
                    }
                }
            }
            Event::Deleted(o @ Object::Pod(p)) => {
                self.core.queue.remove(&pod_key(o));
                let id = pod_id(&p.metadata.namespace, &p.metadata.name, &p.metadata.uid);
                self.forget_nomination(&id);
                let mut table = self.core.table.write();
                let freed = table.remove_pod(&id).is_some();
                self.unconfirm(&pod_key(o), &id);
                drop(table);
                if freed {
                    self.core.queue.cluster_changed();
                }
            }
            _ => {}
        }
    }

    /// Whether the table already counts this pod as `info` says, confirmed on `node`, alone
    /// under its name, and holds what preemption reads of it: the update changes nothing
    /// there.
    fn counted_as_is(&self, key: &str, id: &str, node: &str, info: &PodInfo) -> bool {
        let table = self.core.table.read();
        table.pod(id).is_some_and(|e| {
            !e.assumed
                && *e.node == *node
                && counted_alike(&e.info, info)
                && same_to_preemption(&e.info, info)
        }) && self
            .confirmed
            .lock()
            .get(key)
            .is_none_or(|ids| ids.iter().all(|other| other == id))
    }

    /// The store holds the pod `id` under `namespace/name` (`key`): every bound pod of
    /// that name with another id is gone (deleted, perhaps re-created, while the informer
    /// was away) and stops counting. Assumed ones stay: their Bind is in flight, and its
    /// refusal takes them out. Whether any went. The table's write lock is taken only when
    /// there is something to remove (the common case has nothing).
    fn remove_replaced(&self, key: &str, id: &str) -> bool {
        let stale = self
            .confirmed
            .lock()
            .get(key)
            .is_some_and(|ids| ids.iter().any(|other| other != id));
        stale && self.remove_replaced_in(&mut self.core.table.write(), key, id)
    }

    /// As [`Handlers::remove_replaced`], under the table's write lock.
    fn remove_replaced_in(&self, table: &mut NodeTable, key: &str, id: &str) -> bool {
        let mut freed = false;
        self.forget_confirmed(key, |other| {
            if other == id {
                return false;
            }
            // The table holds a bound pod as bound until it is removed.
            freed |= table.remove_pod(other).is_some();
            true
        });
        freed
    }

    /// The bound pod `id` left the table.
    fn unconfirm(&self, key: &str, id: &str) {
        self.forget_confirmed(key, |other| other == id);
    }

    /// Forgets the ids bound under `key` that `gone` says are gone.
    fn forget_confirmed(&self, key: &str, mut gone: impl FnMut(&str) -> bool) {
        let mut confirmed = self.confirmed.lock();
        if let Some(ids) = confirmed.get_mut(key) {
            ids.retain(|other| !gone(other));
            if ids.is_empty() {
                confirmed.remove(key);
            }
        }
    }
}

/// Whether preemption reads two versions of a placed pod alike: when it started, and whether
/// it is terminating, by preemption or otherwise.
fn same_to_preemption(a: &PodInfo, b: &PodInfo) -> bool {
    a.start_time == b.start_time && a.terminating == b.terminating && a.preempted == b.preempted
}
