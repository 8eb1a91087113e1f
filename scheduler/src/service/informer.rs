//! The informer handlers: what the scheduler does with each node and pod event.
//!
//! ```text
//!  node added / changed ──► table row (and unschedulable pods retried); a node whose
//!                           heartbeat is silent past the grace counts as unreachable
//!                           (rechecked every few seconds without events)
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
//!  pod deleted          ──► queue and table forget it
//! ```
//!
//! The queue holds one pending pod per name, as the store does; the table keys pods by UID,
//! so an event about a pod re-created under a name never updates or removes its
//! predecessor's placement (whose Bind may still be in flight), and a confirmed pod of that
//! name with another UID is known to be gone (a relist shows a re-created pod as an update).
//!
//! The handlers need no store: they read events, so tests drive them directly.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use skiff_proto::api::{Node, NodeConditionType, Object, Time};
use skiff_proto::client::Event;

use super::DEFAULT_SCHEDULER_NAME;
use crate::model::{NODE_MONITOR_GRACE_SECS, NodeInfo, PodInfo, pod_id};
use crate::parallel::Core;
use crate::table::{Placement, counted_alike};

/// The node and pod informers' handlers, over the table and the queue.
#[derive(Debug)]
pub struct Handlers {
    core: Arc<Core>,
    /// The newest version of every node and when its heartbeat last changed, by this
    /// process's clock (so the agents' clocks do not matter), so a node whose heartbeat goes
    /// silent is marked unreachable without an event ([`Handlers::recheck_nodes`]).
    nodes: Mutex<HashMap<String, Heard>>,
    /// The `spec.schedulerName`s this scheduler takes (an empty name too).
    names: Vec<String>,
}

/// A node and when its heartbeat was last seen to change.
#[derive(Debug, Clone)]
struct Heard {
    node: Node,
    beat: Option<Time>,
    at: Instant,
}

fn heartbeat_of(n: &Node) -> Option<Time> {
    n.condition(&NodeConditionType::Ready)
        .and_then(|c| c.last_heartbeat_time)
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
            nodes: Mutex::default(),
            names,
        }
    }

    fn ours(&self, scheduler_name: &str) -> bool {
        scheduler_name.is_empty() || self.names.iter().any(|n| n == scheduler_name)
    }

    pub fn on_node(&self, event: &Event) {
        self.on_node_at(event, Instant::now());
    }

    /// [`Self::on_node`] with the time the event is seen.
    pub fn on_node_at(&self, event: &Event, now: Instant) {
        match event {
            Event::Added(Object::Node(n)) | Event::Modified(Object::Node(n)) => {
                let beat = heartbeat_of(n);
                let heard = {
                    let mut nodes = self.nodes.lock();
                    let at = match nodes.get(&n.metadata.name) {
                        Some(h) if h.beat == beat => h.at,
                        _ => now,
                    };
                    let heard = Heard {
                        node: n.clone(),
                        beat,
                        at,
                    };
                    nodes.insert(n.metadata.name.clone(), heard.clone());
                    heard
                };
                self.apply_node(&heard, now);
            }
            Event::Deleted(Object::Node(n)) => {
                self.nodes.lock().remove(&n.metadata.name);
                self.core.table.write().remove_node(&n.metadata.name);
                self.core.queue.node_removed();
            }
            _ => {}
        }
    }

    /// Looks at every node again as of now: one whose heartbeat has not changed within the
    /// grace becomes unreachable, and is back with its next heartbeat.
    pub fn recheck_nodes(&self) {
        self.recheck_nodes_at(Instant::now());
    }

    pub fn recheck_nodes_at(&self, now: Instant) {
        let nodes: Vec<Heard> = self.nodes.lock().values().cloned().collect();
        for h in &nodes {
            self.apply_node(h, now);
        }
    }

    /// The node's row as of `now`, written only when it changed.
    fn apply_node(&self, h: &Heard, now: Instant) {
        let grace = Duration::from_secs(NODE_MONITOR_GRACE_SECS.unsigned_abs());
        // A node that never reported a heartbeat (made by hand, or by a benchmark) is judged
        // by its conditions alone.
        let heard = h.beat.is_none() || now.saturating_duration_since(h.at) <= grace;
        let info = NodeInfo::from_node_heard(&h.node, heard);
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
                    let mut freed = table.remove_replaced(&key, &id);
                    let mut placed = None;
                    if p.is_terminal() {
                        freed |= table.remove_pod(&id).is_some();
                    } else {
                        if table
                            .pods
                            .get(&id)
                            .is_some_and(|e| e.node != p.spec.node_name)
                        {
                            // Bound elsewhere than we assumed (another scheduler won).
                            table.remove_pod(&id);
                            freed = true;
                        }
                        placed = table.add_pod(info.clone(), &p.spec.node_name, false).ok();
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
                    if self.core.table.read().pods.contains_key(&id) {
                        self.core.queue.hold_pod(p);
                    } else {
                        self.core.queue.add_pod(p);
                    }
                } else {
                    // Being deleted before it was placed, or another scheduler's.
                    self.core.queue.remove(&key);
                    if self.remove_replaced(&key, &id) {
                        self.core.queue.cluster_changed();
                    }
                }
            }
            Event::Deleted(o @ Object::Pod(p)) => {
                self.core.queue.remove(&pod_key(o));
                let id = pod_id(&p.metadata.namespace, &p.metadata.name, &p.metadata.uid);
                if self.core.table.write().remove_pod(&id).is_some() {
                    self.core.queue.cluster_changed();
                }
            }
            _ => {}
        }
    }

    /// Whether the table already counts this pod as `info` says, confirmed on `node`, alone
    /// under its name: the update changes nothing there.
    fn counted_as_is(&self, key: &str, id: &str, node: &str, info: &PodInfo) -> bool {
        let table = self.core.table.read();
        table
            .pods
            .get(id)
            .is_some_and(|e| !e.assumed && e.node == node && counted_alike(&e.info, info))
            && table.named(key).all(|(other, _)| other == id)
    }

    /// [`NodeTable::remove_replaced`] for a pod that is not bound, behind a read lock when
    /// there is nothing to remove (the common case).
    ///
    /// [`NodeTable::remove_replaced`]: crate::table::NodeTable::remove_replaced
    fn remove_replaced(&self, key: &str, id: &str) -> bool {
        let stale = self
            .core
            .table
            .read()
            .named(key)
            .any(|(other, e)| other != id && !e.assumed);
        stale && self.core.table.write().remove_replaced(key, id)
    }
}
