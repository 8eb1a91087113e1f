//! The informer handlers: what the scheduler does with each node and pod event.
//!
//! ```text
//!  node added / changed ──► table row (and unschedulable pods retried)
//!  node deleted         ──► row removed (its pods stay known, counted again if it returns)
//!  pod bound            ──► queue forgets it; table accounts it on its node (confirmed),
//!                           every update (labels change what pod terms count)
//!  pod bound, finished  ──► queue and table forget it
//!  pod pending, ours    ──► queue holds the newest version (see `queue` on why the queue
//!                           is the one owner of pending pods)
//!  pod being deleted    ──► queue forgets it
//!  or another's
//!  pod deleted          ──► queue and table forget it
//! ```
//!
//! The handlers need no store: they read events, so tests drive them directly.

use std::sync::Arc;

use skiff_proto::api::Object;
use skiff_proto::client::Event;

use super::DEFAULT_SCHEDULER_NAME;
use crate::model::{NodeInfo, PodInfo};
use crate::parallel::Core;

/// The node and pod informers' handlers, over the table and the queue.
#[derive(Debug)]
pub struct Handlers {
    core: Arc<Core>,
    /// The `spec.schedulerName`s this scheduler takes (an empty name too).
    names: Vec<String>,
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
        Handlers { core, names }
    }

    fn ours(&self, scheduler_name: &str) -> bool {
        scheduler_name.is_empty() || self.names.iter().any(|n| n == scheduler_name)
    }

    pub fn on_node(&self, event: &Event) {
        match event {
            Event::Added(Object::Node(n)) | Event::Modified(Object::Node(n)) => {
                let info = NodeInfo::from_node(n);
                let mut table = self.core.table.write();
                let same = table
                    .row(&info.name)
                    .is_some_and(|r| *table.infos[r] == info);
                if !same {
                    table.upsert_node(info);
                    drop(table);
                    self.core.queue.cluster_changed();
                }
            }
            Event::Deleted(Object::Node(n)) => {
                self.core.table.write().remove_node(&n.metadata.name);
            }
            _ => {}
        }
    }

    pub fn on_pod(&self, event: &Event) {
        match event {
            Event::Added(o @ Object::Pod(p)) | Event::Modified(o @ Object::Pod(p)) => {
                let key = pod_key(o);
                if !p.spec.node_name.is_empty() {
                    self.core.queue.remove(&key);
                    if p.is_terminal() {
                        if self.core.table.write().remove_pod(&key).is_some() {
                            self.core.queue.cluster_changed();
                        }
                        return;
                    }
                    // Every update of a bound pod reaches the table: its labels may have
                    // changed, and the terms that select it count what it has now.
                    let info = Arc::new(PodInfo::from_pod(p));
                    let mut table = self.core.table.write();
                    if table
                        .pods
                        .get(&key)
                        .is_some_and(|e| e.node != p.spec.node_name)
                    {
                        // Bound elsewhere than we assumed (another scheduler won).
                        table.remove_pod(&key);
                    }
                    let _ = table.add_pod(info, &p.spec.node_name, false);
                } else if p.metadata.deletion_timestamp.is_none()
                    && self.ours(&p.spec.scheduler_name)
                {
                    // The queue holds it (updated in place while assumed). A name the table
                    // still accounts a placement under comes in held: that placement's Bind
                    // is in flight, and a second one would bind twice or overcommit.
                    if self.core.table.read().pods.contains_key(&key) {
                        self.core.queue.hold_pod(p);
                    } else {
                        self.core.queue.add_pod(p);
                    }
                } else {
                    // Being deleted before it was placed, or another scheduler's.
                    self.core.queue.remove(&key);
                }
            }
            Event::Deleted(o @ Object::Pod(_)) => {
                let key = pod_key(o);
                self.core.queue.remove(&key);
                if self.core.table.write().remove_pod(&key).is_some() {
                    self.core.queue.cluster_changed();
                }
            }
            _ => {}
        }
    }
}
