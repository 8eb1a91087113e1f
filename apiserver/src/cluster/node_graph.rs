//! The node authorizer's graph ([`crate::access::graph`]) kept current from the store, as
//! kube-apiserver keeps its Node authorizer's graph from a pod informer, and the cluster
//! API's answer to the authorizer's questions ([`Graph`]).
//!
//! ```text
//!   list the pods at R (in chunks) ─► index them, current to R ─► watch from R ─┬─ put, delete ─► index the pod
//!          ▲                                                                    ├─ bookmark ─► current to its revision
//!          └──────────────────────────── the watch ended ◄──────────────────────┘
//! ```
//!
//! The index learns of a change a moment after it is applied, so a request it denies is
//! checked again when the keyspace has moved past the index's revision: against the pods of
//! the request's namespace changed since (all of its pods when history no longer reaches
//! back so far). A node agent that has just been told of a pod bound to it (it watches its
//! pods) and asks for the pod's ConfigMap or token is therefore never refused by a member
//! that applied the binding; a request the index allows costs no read.

use std::time::Duration;

use futures::StreamExt as _;
use skiff_proto::api::{Kind, Object};
use skiff_proto::backoff::Backoff;
use skiff_proto::cluster::v1 as pb;
use skiff_proto::cluster::v1::watch_event::Type;
use skiff_store::request::{KeyValue, RangeRequest};
use tokio_stream::wrappers::ReceiverStream;

use super::{ClusterApi, ClusterError, Stored, decode};
use crate::access::graph::{Index, NodeGraph, PodEdges, Position};
use crate::access::node::{Graph, Referent};

/// Pods decoded per read of a list, so a list of many pods holds the keyspace briefly each
/// time and never all of their JSON at once.
const LIST_CHUNK: usize = 500;

impl Graph for ClusterApi {
    fn pod_node(&self, namespace: &str, name: &str) -> Option<String> {
        match self.get_local(Kind::Pod, namespace, name) {
            Ok((
                _,
                Some(Stored {
                    object: Object::Pod(p),
                    ..
                }),
            )) => Some(p.spec.node_name),
            _ => None,
        }
    }

    fn references(&self, node: &str, namespace: &str, referent: Referent, name: &str) -> bool {
        let (found, at) = self.access.graph().reaches(node, namespace, referent, name);
        found || changed_pods_reach(self, at, (node, namespace, referent, name))
    }
}

/// Whether a pod of `namespace` changed since the index's position `at` now makes `node`
/// reach `referent` `name` (the index denied it): no read when the index is as of now;
/// every pod of the namespace when history no longer reaches back to `at`, or a snapshot
/// replaced the keyspace since.
fn changed_pods_reach(
    api: &ClusterApi,
    at: Position,
    (node, namespace, referent, name): (&str, &str, Referent, &str),
) -> bool {
    let keyspace = api.keyspace();
    let mvcc = keyspace.read();
    let same_keyspace = keyspace.epoch() == at.epoch;
    if same_keyspace && mvcc.revision() <= at.revision {
        return false;
    }
    let (key, end) = super::watch::key_range(Kind::Pod, namespace);
    let changed = if same_keyspace && at.revision > 0 {
        mvcc.changed_since(&key, &end, at.revision)
    } else {
        Ok(None)
    };
    let kvs: Vec<KeyValue> = match changed {
        Ok(Some(changed)) => changed.into_iter().filter_map(|(_, kv)| kv).collect(),
        Ok(None) => match mvcc.range(&RangeRequest {
            key,
            range_end: end,
            ..RangeRequest::default()
        }) {
            Ok(all) => all.kvs,
            Err(e) => {
                tracing::warn!(error = %e, namespace, "reading pods for the node authorizer");
                return false;
            }
        },
        Err(e) => {
            tracing::warn!(error = %e, namespace, "reading pods for the node authorizer");
            return false;
        }
    };
    // Decoded without the keyspace lock, so the apply path does not wait on it.
    drop(mvcc);
    kvs.iter().any(|kv| match decode(Kind::Pod, kv) {
        Ok(Stored {
            object: Object::Pod(pod),
            ..
        }) => PodEdges::of(&pod).is_some_and(|e| e.node == node && e.reaches(referent, name)),
        _ => false,
    })
}

/// Keeps the node authorizer's graph current until `stop`: lists the pods, then follows a
/// watch from the list's revision, listing again when it ends.
pub async fn maintain(
    api: ClusterApi,
    stop: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    tokio::select! {
        () = run(&api) => {}
        () = stop.cancelled() => {}
    }
    Ok(())
}

async fn run(api: &ClusterApi) {
    let graph = api.access.graph().clone();
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        // Decoding every pod is work for a blocking thread, not the runtime's.
        let lister = api.clone();
        let listed = tokio::task::spawn_blocking(move || list(&lister)).await;
        let revision = match listed {
            Ok(Ok((index, revision, epoch))) => {
                tracing::debug!(pods = index.len(), revision, "node authorizer graph listed");
                graph.replace(index, revision, epoch);
                revision
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "listing pods for the node authorizer; trying again");
                backoff.wait().await;
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "listing pods for the node authorizer; trying again");
                backoff.wait().await;
                continue;
            }
        };
        let req = pb::WatchRequest {
            kind: Kind::Pod.name().to_owned(),
            resource_version: revision,
            allow_bookmarks: true,
            ..pb::WatchRequest::default()
        };
        let rx = match api.watch(req) {
            Ok(rx) => rx,
            Err(e) => {
                tracing::warn!(error = %e, "watching pods for the node authorizer");
                backoff.wait().await;
                continue;
            }
        };
        backoff.reset();
        let mut events = ReceiverStream::new(rx);
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => apply(&graph, event),
                Err(e) => {
                    tracing::info!(error = %e, "the node authorizer's pod watch ended; listing again");
                    break;
                }
            }
        }
        backoff.wait().await;
    }
}

/// Every pod, indexed: the index, the revision it was read at and the keyspace's epoch.
fn list(api: &ClusterApi) -> Result<(Index, i64, u64), ClusterError> {
    let keyspace = api.keyspace();
    let epoch = keyspace.epoch();
    let (mut from, end) = super::watch::key_range(Kind::Pod, "");
    let mut index = Index::default();
    let mut at = 0;
    loop {
        let (revision, items, more) = api.range_chunk(Kind::Pod, &from, &end, at, LIST_CHUNK)?;
        at = revision;
        let Some(last) = items.last() else { break };
        let m = last.object.metadata();
        from = Kind::Pod.key(&m.namespace, &m.name).into_bytes();
        from.push(0);
        for s in items {
            if let Object::Pod(pod) = &s.object {
                let m = &pod.metadata;
                index.set(&m.namespace, &m.name, PodEdges::of(pod));
            }
        }
        if !more {
            break;
        }
    }
    Ok((index, at, epoch))
}

/// One event of the pod watch.
fn apply(graph: &NodeGraph, event: pb::WatchEvent) {
    let ty = Type::try_from(event.r#type).unwrap_or(Type::Modified);
    if ty == Type::Bookmark {
        graph.progress(event.revision);
        return;
    }
    let Some(object) = event.object else { return };
    match Object::from_json(Kind::Pod, &object.json) {
        Ok(Object::Pod(pod)) => {
            let edges = match ty {
                Type::Deleted => None,
                _ => PodEdges::of(&pod),
            };
            let m = &pod.metadata;
            graph.apply(&m.namespace, &m.name, edges, event.revision);
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(error = %e, "a pod of the node authorizer's watch does not decode")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{Attributes, NODES, User};
    use crate::cluster::testing::{TestApi, secured_access, team};
    use Referent::{ConfigMap, ServiceAccount};
    use skiff_proto::api::volume::{ConfigMapVolumeSource, Volume};
    use skiff_proto::api::{ObjectMeta, Pod, PodSpec};
    use std::time::Instant;

    /// A graph that has not heard of a pod (never listed, or behind the store) does not
    /// refuse what the pod lets its node read: the pods changed since are read from the
    /// store. A request the index allows, and one it denies while current, read nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_graph_behind_the_store_reads_what_changed() {
        let t = TestApi::start(secured_access).await;
        team(&t).await;
        let api = &t.api;
        assert!(api.access.graph().is_empty());
        assert!(api.references("n1", "team", ConfigMap, "web-config"));
        assert!(api.references("n1", "team", ServiceAccount, "web"));
        assert!(!api.references("n2", "team", ConfigMap, "web-config"));
        assert!(!api.references("n1", "other", ConfigMap, "web-config"));
        // The node authorizer, deciding over the store.
        let n1 = User::named("system:node:n1", &[NODES]);
        let get = |name: &str| Attributes::resource("get", "", "configmaps", None, "team", name);
        assert!(api.access.decide(&n1, &get("web-config"), api).allowed);
        assert!(
            api.access
                .decide(&n1, &get("kube-root-ca.crt"), api)
                .allowed,
            "the token volume's CA"
        );
        assert!(!api.access.decide(&n1, &get("db-config"), api).allowed);

        let (index, revision, epoch) = list(api).expect("listed");
        assert_eq!(index.len(), 2);
        assert_eq!(revision, api.revision());
        api.access.graph().replace(index, revision, epoch);
        let (found, at) = api
            .access
            .graph()
            .reaches("n1", "team", ConfigMap, "web-config");
        assert!(found);
        assert_eq!(
            at.revision,
            api.revision(),
            "current: a denial reads nothing"
        );
        assert!(!api.references("n2", "team", ConfigMap, "web-config"));

        // A pod bound after the list: the store knows it, the index does not yet.
        t.create(
            Kind::Pod,
            crate::cluster::testing::pod("web-2", "n1", "web", "new-config"),
        )
        .await;
        assert!(
            !api.access
                .graph()
                .reaches("n1", "team", ConfigMap, "new-config")
                .0
        );
        assert!(api.references("n1", "team", ConfigMap, "new-config"));
        assert!(!api.references("n2", "team", ConfigMap, "new-config"));
        // Another keyspace (a snapshot installed since the list): the namespace is read whole.
        api.access
            .graph()
            .replace(Index::default(), api.revision(), epoch + 1);
        assert!(api.references("n1", "team", ConfigMap, "web-config"));
        t.stop().await;
    }

    /// Waits, with a deadline, until `done`.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The loop lists, then follows the watch: a pod bound, then deleted, reaches and then no
    /// longer reaches its node in the index, and bookmarks bring the index's revision to the
    /// store's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn maintain_follows_the_pods() {
        let t = TestApi::start(secured_access).await;
        team(&t).await;
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(maintain(t.api.clone(), stop.clone()));
        let graph = t.api.access.graph().clone();
        until("listed", || {
            graph.reaches("n1", "team", ConfigMap, "web-config").0
        })
        .await;
        t.create(
            Kind::Pod,
            crate::cluster::testing::pod("web-2", "n1", "web", "new-config"),
        )
        .await;
        until("added", || {
            graph.reaches("n1", "team", ConfigMap, "new-config").0
        })
        .await;
        t.api
            .delete(Kind::Pod, "team", "web-2", 0, Some(0), None)
            .await
            .expect("deleted");
        until("deleted", || {
            !graph.reaches("n1", "team", ConfigMap, "new-config").0
        })
        .await;
        assert!(graph.reaches("n1", "team", ConfigMap, "web-config").0);
        let now = t.api.revision();
        until("current", || {
            graph.reaches("n1", "team", ConfigMap, "x").1.revision >= now
        })
        .await;
        stop.cancel();
        task.await.expect("joined").expect("stopped");
        t.stop().await;
    }

    fn pod(name: &str, node: &str, config_map: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: name.into(),
                namespace: "team".into(),
                ..ObjectMeta::default()
            },
            spec: PodSpec {
                node_name: node.into(),
                service_account_name: "web".into(),
                volumes: vec![Volume {
                    name: "config".into(),
                    config_map: Some(ConfigMapVolumeSource {
                        name: config_map.into(),
                        ..ConfigMapVolumeSource::default()
                    }),
                    ..Volume::default()
                }],
                ..PodSpec::default()
            },
            ..Pod::default()
        }
    }

    fn event(ty: Type, pod: &Pod, revision: i64) -> pb::WatchEvent {
        pb::WatchEvent {
            r#type: ty as i32,
            object: Some(super::super::to_pb(&Object::Pod(pod.clone()))),
            revision,
        }
    }

    /// Watch events move the graph: a pod bound lets its node reach its ConfigMap and
    /// account, a pod moved or deleted takes that away, a bookmark moves the revision only.
    #[test]
    fn watch_events_keep_the_graph() {
        let graph = NodeGraph::default();
        let reaches =
            |node: &str, referent, name: &str| graph.reaches(node, "team", referent, name).0;
        apply(&graph, event(Type::Added, &pod("a", "", "cfg"), 5));
        assert!(!reaches("n1", ConfigMap, "cfg"), "unbound");
        apply(&graph, event(Type::Modified, &pod("a", "n1", "cfg"), 6));
        assert!(reaches("n1", ConfigMap, "cfg"));
        assert!(reaches("n1", ServiceAccount, "web"));
        apply(&graph, event(Type::Modified, &pod("a", "n2", "cfg"), 7));
        assert!(!reaches("n1", ConfigMap, "cfg"));
        assert!(reaches("n2", ConfigMap, "cfg"));
        apply(&graph, event(Type::Deleted, &pod("a", "n2", "cfg"), 8));
        assert!(!reaches("n2", ConfigMap, "cfg"));
        assert!(graph.is_empty());
        assert_eq!(
            graph
                .reaches("n2", "team", Referent::Secret, "x")
                .1
                .revision,
            7
        );
        apply(
            &graph,
            pb::WatchEvent {
                r#type: Type::Bookmark as i32,
                object: None,
                revision: 20,
            },
        );
        assert_eq!(
            graph
                .reaches("n2", "team", Referent::Secret, "x")
                .1
                .revision,
            20
        );
    }
}
