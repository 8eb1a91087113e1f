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
    /// Set once the Services have been listed.
    synced: Synced,
}

/// Whether the first list of Services is in.
#[derive(Debug, Clone)]
struct Synced(
    tokio::sync::watch::Sender<bool>,
    tokio::sync::watch::Receiver<bool>,
);

impl Default for Synced {
    fn default() -> Self {
        let (tx, rx) = tokio::sync::watch::channel(false);
        Synced(tx, rx)
    }
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

    /// Returns once the Services have been listed, as the kubelet starts no container
    /// before its Service lister has synced (their variables would be missing).
    pub async fn synced(&self) {
        let mut rx = self.synced.1.clone();
        let _ = rx.wait_for(|done| *done).await;
    }

    /// The variables a container in `namespace` gets for Services
    /// ([`crate::volumes::env::service_env`]): the namespace's when `links`
    /// (`enableServiceLinks`, true unless the pod says false), and always the API's
    /// (`default/kubernetes`).
    pub fn service_env(&self, namespace: &str, links: bool) -> Vec<(String, String)> {
        let objects = self
            .services
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let master = objects.get(&Kind::Service.key("default", "kubernetes"));
        let prefix = Kind::Service.key(namespace, "");
        let local = objects
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|_| links)
            .map(|(_, o)| o);
        let chosen = master
            .filter(|_| !(links && namespace == "default"))
            .into_iter()
            .chain(local)
            .filter_map(|o| match o {
                Object::Service(s) => Some(s),
                _ => None,
            });
        crate::volumes::service_env(chosen)
    }
}

/// Starts following Services and EndpointSlices; the informers run in the returned set
/// (each ends only with an error its caller reports).
pub fn follow(client: &ClusterClient) -> (Followed, Informers) {
    follow_kinds(client, true)
}

/// Starts following Services alone (for containers' environment).
pub fn follow_services(client: &ClusterClient) -> (Followed, Informers) {
    follow_kinds(client, false)
}

fn follow_kinds(client: &ClusterClient, slices: bool) -> (Followed, Informers) {
    let followed = Followed::default();
    let mut informers = tokio::task::JoinSet::new();
    let kinds = [
        (Kind::Service, followed.services.clone()),
        (Kind::EndpointSlice, followed.slices.clone()),
    ];
    for (kind, objects) in kinds.into_iter().take(if slices { 2 } else { 1 }) {
        let (client, changed) = (client.clone(), followed.changed.clone());
        let synced = (kind == Kind::Service).then(|| followed.synced.0.clone());
        informers.spawn(async move {
            let apply = |e: &Event| {
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
            };
            let mut informer = Informer::new(client, kind, ListParams::default());
            match informer.sync().await {
                Ok(events) => events.iter().for_each(&apply),
                Err(e) => return (kind, Err(e)),
            }
            if let Some(synced) = synced {
                synced.send_replace(true);
            }
            let r = informer.run(|e: &Event, _| apply(e)).await;
            (kind, r)
        });
    }
    (followed, informers)
}
