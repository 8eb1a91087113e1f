//! The Services and EndpointSlices a node follows, for its Service rules ([`crate::proxy`])
//! and its cluster DNS ([`crate::dns`]): two informers, their objects by key, and a
//! notification on every change.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use skiff_proto::api::{Kind, Object};
use skiff_proto::client::{ClientError, ClusterClient, Event, Informer, ListParams};
use tokio::sync::Notify;

type Objects = Arc<Mutex<BTreeMap<String, Object>>>;

/// The informers' tasks: each ends only with its kind and the error that stopped it.
pub type Informers = tokio::task::JoinSet<(Kind, Result<(), ClientError>)>;

/// What the informers have seen, kept current.
#[derive(Debug, Clone, Default)]
pub struct Followed {
    services: Objects,
    slices: Objects,
    /// Woken on every change (one waiter: each follower has its own).
    pub changed: Arc<Notify>,
}

fn copy(objects: &Objects) -> BTreeMap<String, Object> {
    objects
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

impl Followed {
    /// The Services and EndpointSlices as they are now.
    pub fn snapshot(&self) -> (BTreeMap<String, Object>, BTreeMap<String, Object>) {
        (copy(&self.services), copy(&self.slices))
    }
}

/// Starts following; the informers run in the returned set (each ends only with an error
/// its caller reports).
pub fn follow(client: &ClusterClient) -> (Followed, Informers) {
    let followed = Followed::default();
    let mut informers = tokio::task::JoinSet::new();
    for (kind, objects) in [
        (Kind::Service, followed.services.clone()),
        (Kind::EndpointSlice, followed.slices.clone()),
    ] {
        let (client, changed) = (client.clone(), followed.changed.clone());
        informers.spawn(async move {
            let mut informer = Informer::new(client, kind, ListParams::default());
            let r = informer
                .run(|e: &Event, _| {
                    {
                        let mut objects = objects
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        match e {
                            Event::Added(o) | Event::Modified(o) => {
                                objects.insert(o.key(), o.clone());
                            }
                            Event::Deleted(o) => {
                                objects.remove(&o.key());
                            }
                            Event::Bookmark(_) => return,
                        }
                    }
                    changed.notify_one();
                })
                .await;
            (kind, r)
        });
    }
    (followed, informers)
}
