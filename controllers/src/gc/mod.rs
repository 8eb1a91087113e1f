//! The garbage collector: an object whose owners are all gone is deleted; an owner deleted
//! in the foreground goes after its dependents; an owner deleted with `orphan` leaves its
//! dependents, their references to it removed.
//!
//! The collector sees every stored kind but events ([`graph`]): custom kinds too, followed
//! as their CRDs come and go, so an operator's custom object takes the Deployments,
//! ConfigMaps and Secrets it owns with it, and a custom object owned by another object goes
//! with its owner. Owners are named by group and kind, as owner references name them. An
//! owner missing from the caches is looked up in the store before anything is deleted for
//! it: a cache that is behind must never cost a live object. An owner of a kind not served
//! (yet) is taken to exist; its dependents are looked at again when a CRD serves it.
//!
//! ```text
//!  dependent added / owners changed ──► sync(dependent): every owner gone? ─► delete it
//!                                                        some gone? ─► drop those references
//!  object deleted ──► its uid remembered as gone; sync(each dependent), sync(each owner)
//!  owner marked for deletion with a finalizer ──► sync(owner), once every kind is cached:
//!      orphan             → remove its reference from every dependent, then the finalizer
//!      foregroundDeletion → delete every dependent (in the foreground too, when it owns
//!                           others), then, with none left, the finalizer (and so the owner)
//! ```

pub mod graph;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use skiff_proto::api::meta::{FOREGROUND_DELETION_FINALIZER, ORPHAN_FINALIZER, OwnerReference};
use skiff_proto::api::{DeletionPropagation, Kind, Object};
use skiff_proto::backoff::Backoff;
use skiff_proto::client::{ClientError, ClusterClient, Code, Event, Informer, ListParams};
use tokio::sync::Notify;

use crate::cache::Cache;
use crate::core::{Context, Controller, Requeue};
use crate::queue::WorkQueue;
use graph::{Graph, TypeKey};

/// The controller's name in logs and metrics.
pub const NAME: &str = "garbagecollector";

/// Owners remembered as gone at most; the memory is cleared when it fills.
const ABSENT_OWNERS: usize = 100_000;

/// How long an owner's finalizing waits for a custom kind's cache to fill.
const GRAPH_WAIT: Duration = Duration::from_secs(1);

/// The garbage collector.
#[derive(Debug)]
pub struct GarbageCollector {
    ctx: Arc<Context>,
    queue: WorkQueue,
    graph: Graph,
    /// Uids of owners known to be gone: deleted while watched, or not found in the store.
    /// Uids are never reused, so the 30,000 pods of a deleted ReplicaSet cost one lookup of
    /// it, not 30,000. Never held across an await.
    absent: Mutex<HashSet<String>>,
    /// Queue keys of objects with an owner of a kind not served when they were looked at, by
    /// that kind: looked at again when a CRD serves it. Never held across an await.
    unresolved: Mutex<HashMap<TypeKey, HashSet<String>>>,
    /// Custom kinds whose CRDs were deleted since this collector started following them:
    /// the API server deletes a CRD's objects before the CRD, so an owner of such a kind is
    /// gone. Never held across an await.
    vanished: Mutex<HashSet<TypeKey>>,
    /// A CRD changed: the custom kinds to follow may have.
    crds_changed: Notify,
}

/// What the collector knows of an owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Exists,
    Gone,
    /// Of a kind not served (yet): nothing is collected for it until a CRD serves it.
    Unresolved,
    /// Not one this dependent may name (a namespaced owner of a cluster-scoped object):
    /// never collected for, as in Kubernetes.
    Invalid,
}

/// `Kind.group/namespace/name`: the collector's queue key.
fn gc_key(object: &Object) -> String {
    let m = object.metadata();
    format!(
        "{}/{}/{}",
        TypeKey::of(object.kind()).format(),
        m.namespace,
        m.name
    )
}

fn parse_key(key: &str) -> Option<(TypeKey, &str, &str)> {
    let mut parts = key.splitn(3, '/');
    let kind = TypeKey::parse(parts.next()?)?;
    Some((kind, parts.next()?, parts.next()?))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl GarbageCollector {
    pub fn new(ctx: Arc<Context>) -> Self {
        GarbageCollector {
            graph: Graph::new(ctx.clone()),
            ctx,
            queue: WorkQueue::new(),
            absent: Mutex::new(HashSet::new()),
            unresolved: Mutex::default(),
            vanished: Mutex::default(),
            crds_changed: Notify::new(),
        }
    }

    /// The kinds the controller manager runs informers of for the collector alone; their
    /// events go to [`GarbageCollector::observe`].
    pub fn fixed_kinds(&self) -> &[Kind] {
        self.graph.fixed_kinds()
    }

    /// An event of one of [`GarbageCollector::fixed_kinds`].
    pub fn observe(&self, kind: Kind, event: &Event) {
        if let Some(cache) = self.graph.cache(&TypeKey::of(kind)) {
            self.observe_in(&cache, event);
        }
        if kind == graph::crd_kind() && !matches!(event, Event::Bookmark(_)) {
            self.crds_changed.notify_one();
        }
    }

    /// Marks the cache of one of [`GarbageCollector::fixed_kinds`] as full.
    pub fn set_synced(&self, kind: Kind) {
        if let Some(cache) = self.graph.cache(&TypeKey::of(kind)) {
            cache.set_synced();
        }
    }

    fn observe_in(&self, cache: &Cache, event: &Event) {
        let old = cache.apply(event);
        self.on_event(event, old.as_deref());
    }

    /// Follows the custom kinds of the CRDs stored for as long as the controller runs: an
    /// informer per CRD's kind, started when the CRD appears (or serves a version again),
    /// stopped when it goes; one that fails is started again after a wait.
    pub async fn follow_custom_kinds(self: Arc<Self>, client: ClusterClient) {
        let mut running: BTreeMap<TypeKey, tokio::task::AbortHandle> = BTreeMap::new();
        // When each kind was first wanted (kept while an informer is started again).
        let mut since: BTreeMap<TypeKey, std::time::Instant> = BTreeMap::new();
        let mut informers = tokio::task::JoinSet::new();
        let mut backoff = Backoff::for_store();
        loop {
            let (wanted, defined) = self.graph.custom_kinds();
            self.graph.want(wanted.keys().cloned().collect());
            since.retain(|key, _| wanted.contains_key(key));
            running.retain(|key, task| {
                let keep = wanted.contains_key(key) && !task.is_finished();
                if !keep {
                    task.abort();
                    self.stop_following(key, !defined.contains(key));
                }
                keep
            });
            lock(&self.vanished).retain(|key| !defined.contains(key));
            for (key, &kind) in &wanted {
                if running.contains_key(key) {
                    continue;
                }
                let first = *since
                    .entry(key.clone())
                    .or_insert_with(std::time::Instant::now);
                let Some(cache) = self.graph.add(kind, first) else {
                    continue;
                };
                tracing::info!(controller = NAME, kind = %kind.wire_name(), "following a custom kind");
                let task = informers.spawn(self.clone().follow(client.clone(), kind, cache));
                running.insert(key.clone(), task);
            }
            tokio::select! {
                () = self.crds_changed.notified() => {}
                Some(ended) = informers.join_next() => {
                    match ended {
                        // Aborted: its CRD went.
                        Err(e) if e.is_cancelled() => {}
                        Err(e) => tracing::warn!(controller = NAME, error = %e, "a custom kind's informer panicked"),
                        Ok(Err(e)) => {
                            // Its CRD is going, or the store refused: a wait, then the next
                            // look starts it again if its CRD is still there.
                            tracing::debug!(controller = NAME, error = %e, "a custom kind's informer stopped");
                            backoff.wait().await;
                        }
                        Ok(Ok(())) => {}
                    }
                }
            }
        }
    }

    /// Drops the cache of a custom kind no longer followed (or followed again after its
    /// informer failed). What its objects own and are owned by is looked at again: when the
    /// kind's CRD is gone (`vanished`), so are they, though their deletions may not all have
    /// been seen before the CRD's; an owner waiting for one of them to go looks again once
    /// the cache is back.
    fn stop_following(&self, key: &TypeKey, vanished: bool) {
        let Some(cache) = self.graph.remove(key) else {
            return;
        };
        if vanished {
            lock(&self.vanished).insert(key.clone());
        }
        for o in cache.list(None) {
            for d in self.graph.dependents(&o.metadata().uid) {
                self.queue.add(gc_key(&d));
            }
            for r in &o.metadata().owner_references {
                self.queue_owner(&o, r);
            }
        }
    }

    /// Lists and watches custom kind `kind` into `cache`; then the objects that were waiting
    /// for the kind to be served are looked at again.
    async fn follow(
        self: Arc<Self>,
        client: ClusterClient,
        kind: Kind,
        cache: Arc<Cache>,
    ) -> Result<(), ClientError> {
        let mut informer = Informer::new(client, kind, ListParams::default());
        for e in informer.sync().await? {
            self.observe_in(&cache, &e);
        }
        cache.set_synced();
        let waiting = lock(&self.unresolved).remove(&TypeKey::of(kind));
        for key in waiting.into_iter().flatten() {
            self.queue.add(key);
        }
        informer.run(|e, _| self.observe_in(&cache, e)).await
    }

    /// An object changed (`old` is how it was): queue what may now be garbage, or may now
    /// be free to go.
    pub fn on_event(&self, event: &Event, old: Option<&Object>) {
        match event {
            Event::Added(o) => {
                if !o.metadata().owner_references.is_empty() || being_finalized(o) {
                    self.queue.add(gc_key(o));
                }
            }
            Event::Modified(o) => {
                let refs = &o.metadata().owner_references;
                let before = old.map_or(&[][..], |old| &old.metadata().owner_references[..]);
                if (before != refs.as_slice() && !refs.is_empty()) || being_finalized(o) {
                    self.queue.add(gc_key(o));
                }
                // An owner this object no longer names may be waiting for it to go.
                for r in before
                    .iter()
                    .filter(|r| !refs.iter().any(|n| n.uid == r.uid))
                {
                    self.queue_owner(o, r);
                }
            }
            Event::Deleted(o) => {
                // Its dependents may be orphans now; an owner deleting in the foreground
                // may be waiting for it.
                self.remember_absent(&o.metadata().uid);
                if !o.metadata().owner_references.is_empty() {
                    let key = gc_key(o);
                    for waiting in lock(&self.unresolved).values_mut() {
                        waiting.remove(&key);
                    }
                }
                for d in self.graph.dependents(&o.metadata().uid) {
                    self.queue.add(gc_key(&d));
                }
                for r in &o.metadata().owner_references {
                    self.queue_owner(o, r);
                }
            }
            Event::Bookmark(_) => {}
        }
    }

    fn remember_absent(&self, uid: &str) {
        let mut absent = lock(&self.absent);
        if absent.len() >= ABSENT_OWNERS {
            absent.clear();
        }
        absent.insert(uid.to_owned());
    }

    /// Queues the owner `r` names of `dependent`.
    fn queue_owner(&self, dependent: &Object, r: &OwnerReference) {
        if let Some(kind) = Kind::from_type(&r.api_version, &r.kind) {
            let ns = if kind.is_namespaced() {
                dependent.metadata().namespace.as_str()
            } else {
                ""
            };
            self.queue
                .add(format!("{}/{ns}/{}", TypeKey::of(kind).format(), r.name));
        }
    }

    /// Whether the owner `r` of an object in `namespace` still exists (same uid): from what
    /// the collector saw deleted, the caches or, when they do not have it, the store.
    async fn owner(&self, namespace: &str, r: &OwnerReference) -> Result<Owner, ClientError> {
        if lock(&self.absent).contains(&r.uid) {
            return Ok(Owner::Gone);
        }
        let Some(kind) = Kind::from_type(&r.api_version, &r.kind) else {
            if lock(&self.vanished).contains(&TypeKey::of_ref(r)) {
                return Ok(Owner::Gone);
            }
            return Ok(Owner::Unresolved);
        };
        let ns = match (kind.is_namespaced(), namespace) {
            (true, "") => return Ok(Owner::Invalid),
            (true, ns) => ns,
            (false, _) => "",
        };
        if let Some(cache) = self.graph.cache(&TypeKey::of(kind))
            && let Some(cached) = cache.get(ns, &r.name)
            && cached.metadata().uid == r.uid
        {
            return Ok(Owner::Exists);
        }
        let live = self.ctx.client.get(kind, ns, &r.name).await?;
        if live.is_some_and(|o| o.metadata().uid == r.uid) {
            return Ok(Owner::Exists);
        }
        self.remember_absent(&r.uid);
        Ok(Owner::Gone)
    }

    /// An owner marked for deletion with the `orphan` or `foregroundDeletion` finalizer.
    async fn finalize(&self, owner: &Object) -> Result<Requeue, ClientError> {
        if !self.graph.synced() {
            // A custom kind's cache is filling: its objects may be dependents.
            return Ok(Some(GRAPH_WAIT));
        }
        let meta = owner.metadata();
        let dependents = self.graph.dependents(&meta.uid);
        let finalizer = if meta.finalizers.iter().any(|f| f == ORPHAN_FINALIZER) {
            for d in &dependents {
                let mut next = (**d).clone();
                next.metadata_mut()
                    .owner_references
                    .retain(|r| r.uid != meta.uid);
                ignore_gone(self.ctx.client.update(&next).await)?;
            }
            ORPHAN_FINALIZER
        } else {
            let mut waiting = false;
            for d in &dependents {
                let dm = d.metadata();
                // A dependent another live owner still holds is only let go of.
                let mut others_live = false;
                for r in dm.owner_references.iter().filter(|r| r.uid != meta.uid) {
                    if self.owner(&dm.namespace, r).await? != Owner::Gone {
                        others_live = true;
                        break;
                    }
                }
                if others_live {
                    let mut next = (**d).clone();
                    next.metadata_mut()
                        .owner_references
                        .retain(|r| r.uid != meta.uid);
                    ignore_gone(self.ctx.client.update(&next).await)?;
                    continue;
                }
                waiting = true;
                if dm.deletion_timestamp.is_some() {
                    continue;
                }
                // A dependent that owns others goes in the foreground too, so the owner
                // outlives the whole tree; a leaf (a pod) is deleted as usual, gracefully.
                let propagation = if self.graph.dependents(&dm.uid).is_empty() {
                    DeletionPropagation::Background
                } else {
                    DeletionPropagation::Foreground
                };
                let rv = dm.revision().unwrap_or(0);
                ignore_gone(
                    self.ctx
                        .client
                        .delete_propagating(d.kind(), &dm.namespace, &dm.name, rv, propagation)
                        .await,
                )?;
            }
            if waiting {
                // Each dependent's deletion wakes this owner again.
                return Ok(None);
            }
            FOREGROUND_DELETION_FINALIZER
        };
        let mut next = owner.clone();
        next.metadata_mut().finalizers.retain(|f| f != finalizer);
        ignore_gone(self.ctx.client.update(&next).await)?;
        Ok(None)
    }
}

/// Marked for deletion and held by a finalizer the collector serves.
fn being_finalized(o: &Object) -> bool {
    let m = o.metadata();
    m.deletion_timestamp.is_some()
        && m.finalizers
            .iter()
            .any(|f| f == ORPHAN_FINALIZER || f == FOREGROUND_DELETION_FINALIZER)
}

impl Controller for GarbageCollector {
    const NAME: &'static str = NAME;

    fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    async fn sync(&self, key: &str) -> Result<Requeue, ClientError> {
        let Some((type_key, namespace, name)) = parse_key(key) else {
            return Ok(None);
        };
        let Some(object) = self
            .graph
            .cache(&type_key)
            .and_then(|c| c.get(namespace, name))
        else {
            return Ok(None);
        };
        if being_finalized(&object) {
            return self.finalize(&object).await;
        }
        let meta = object.metadata();
        if meta.owner_references.is_empty() || meta.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let mut gone = Vec::new();
        for r in &meta.owner_references {
            match self.owner(&meta.namespace, r).await? {
                Owner::Gone => gone.push(r.uid.clone()),
                Owner::Exists | Owner::Invalid => {}
                Owner::Unresolved => {
                    let mut unresolved = lock(&self.unresolved);
                    if unresolved.values().map(HashSet::len).sum::<usize>() >= ABSENT_OWNERS {
                        // Bounded: what is dropped is looked at again at its next change.
                        unresolved.clear();
                    }
                    unresolved
                        .entry(TypeKey::of_ref(r))
                        .or_default()
                        .insert(key.to_owned());
                }
            }
        }
        if gone.is_empty() {
            return Ok(None);
        }
        let kind = object.kind();
        if gone.len() == meta.owner_references.len() {
            tracing::info!(object = key, "deleting: every owner is gone");
            let rv = meta.revision().unwrap_or(0);
            ignore_gone(
                self.ctx
                    .client
                    .delete_propagating(kind, namespace, name, rv, DeletionPropagation::Background)
                    .await,
            )?;
        } else {
            let mut next = (*object).clone();
            next.metadata_mut()
                .owner_references
                .retain(|r| !gone.contains(&r.uid));
            ignore_gone(self.ctx.client.update(&next).await)?;
        }
        Ok(None)
    }
}

/// A write's result, with "the object is gone" as success. A conflict is an error: the
/// sync runs again on the newer object (an orphaning must reach every dependent).
fn ignore_gone(r: Result<Object, ClientError>) -> Result<(), ClientError> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some(Code::NotFound) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_kind_namespace_and_object() {
        let mut rs = skiff_proto::api::ReplicaSet::default();
        rs.metadata.namespace = "team".into();
        rs.metadata.name = "web-1".into();
        let key = gc_key(&Object::ReplicaSet(rs));
        assert_eq!(key, "ReplicaSet.apps/team/web-1");
        let (kind, ns, name) = parse_key(&key).expect("parses");
        assert_eq!(
            (kind, ns, name),
            (TypeKey::of(Kind::ReplicaSet), "team", "web-1")
        );
        assert_eq!(
            parse_key("Node.//n1"),
            Some((TypeKey::of(Kind::Node), "", "n1"))
        );
        assert_eq!(
            parse_key("Widget.example.com/a/b").map(|(k, _, _)| k.group),
            Some("example.com".to_owned())
        );
        assert_eq!(parse_key("Widget/a/b"), None);
    }
}
