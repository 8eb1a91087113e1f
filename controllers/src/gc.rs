//! The garbage collector: an object whose owners are all gone is deleted; an owner deleted
//! in the foreground goes after its dependents; an owner deleted with `orphan` leaves its
//! dependents, their references to it removed.
//!
//! Dependents are found through the caches' owner index, so the collector covers the kinds
//! the controller manager watches (Deployments, ReplicaSets, Pods, Nodes, Services,
//! EndpointSlices, Jobs, ControllerRevisions, PersistentVolumeClaims); an owner may be
//! of any kind. An owner missing from the caches is looked up in the store before anything is
//! deleted for it: a cache that is behind must never cost a live object.
//!
//! ```text
//!  dependent added / owners changed ──► sync(dependent): every owner gone? ─► delete it
//!                                                        some gone? ─► drop those references
//!  object deleted ──► sync(each dependent), sync(each owner)
//!  owner marked for deletion with a finalizer ──► sync(owner):
//!      orphan             → remove its reference from every dependent, then the finalizer
//!      foregroundDeletion → delete every dependent (in the foreground too, when it owns
//!                           others), then, with none left, the finalizer (and so the owner)
//! ```

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use skiff_proto::api::meta::{FOREGROUND_DELETION_FINALIZER, ORPHAN_FINALIZER, OwnerReference};
use skiff_proto::api::{DeletionPropagation, Kind, Object};
use skiff_proto::client::{ClientError, Code, Event};

use crate::cache::Cache;
use crate::core::{Context, Controller, Requeue};
use crate::queue::WorkQueue;

/// The controller's name in logs and metrics.
pub const NAME: &str = "garbagecollector";

/// Owners remembered as gone at most; the memory is cleared when it fills.
const ABSENT_OWNERS: usize = 100_000;

/// The garbage collector.
#[derive(Debug)]
pub struct GarbageCollector {
    ctx: Arc<Context>,
    queue: WorkQueue,
    /// Uids of owners the store said are gone. Uids are never reused, so the 30,000 pods of
    /// a deleted ReplicaSet cost one lookup of it, not 30,000. Never held across an await.
    absent: Mutex<HashSet<String>>,
}

/// `Kind/namespace/name`: the collector's queue key.
fn gc_key(object: &Object) -> String {
    let m = object.metadata();
    format!("{}/{}/{}", object.kind().name(), m.namespace, m.name)
}

fn parse_key(key: &str) -> Option<(Kind, &str, &str)> {
    let mut parts = key.splitn(3, '/');
    let kind = Kind::from_name(parts.next()?)?;
    Some((kind, parts.next()?, parts.next()?))
}

impl GarbageCollector {
    pub fn new(ctx: Arc<Context>) -> Self {
        GarbageCollector {
            ctx,
            queue: WorkQueue::new(),
            absent: Mutex::new(HashSet::new()),
        }
    }

    fn caches(&self) -> [&Cache; 9] {
        [
            &self.ctx.deployments,
            &self.ctx.replica_sets,
            &self.ctx.pods,
            &self.ctx.nodes,
            &self.ctx.services,
            &self.ctx.endpoint_slices,
            // A CronJob's Jobs, a DaemonSet's or StatefulSet's revisions, a StatefulSet's
            // claims.
            &self.ctx.jobs,
            &self.ctx.controller_revisions,
            &self.ctx.claims,
        ]
    }

    fn cache(&self, kind: Kind) -> Option<&Cache> {
        self.caches().into_iter().find(|c| c.kind() == kind)
    }

    /// Every cached object that names `uid` among its owners.
    fn dependents(&self, uid: &str) -> Vec<Arc<Object>> {
        self.caches()
            .into_iter()
            .flat_map(|c| c.owned_by(uid))
            .collect()
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
                for d in self.dependents(&o.metadata().uid) {
                    self.queue.add(gc_key(&d));
                }
                for r in &o.metadata().owner_references {
                    self.queue_owner(o, r);
                }
            }
            Event::Bookmark(_) => {}
        }
    }

    fn absent(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.absent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues the owner `r` names of `dependent`.
    fn queue_owner(&self, dependent: &Object, r: &OwnerReference) {
        if let Some(kind) = Kind::from_name(&r.kind) {
            let ns = if kind.is_namespaced() {
                dependent.metadata().namespace.as_str()
            } else {
                ""
            };
            self.queue.add(format!("{}/{ns}/{}", kind.name(), r.name));
        }
    }

    /// Whether the owner `r` of an object in `namespace` still exists (same uid), from the
    /// caches or, when they do not have it, from the store. An owner of a kind Skiff does
    /// not serve is taken to exist: nothing is collected for an owner that cannot be
    /// looked up.
    async fn owner_exists(&self, namespace: &str, r: &OwnerReference) -> Result<bool, ClientError> {
        let Some(kind) = Kind::from_name(&r.kind) else {
            return Ok(true);
        };
        let ns = if kind.is_namespaced() { namespace } else { "" };
        if let Some(cached) = self.cache(kind).and_then(|c| c.get(ns, &r.name))
            && cached.metadata().uid == r.uid
        {
            return Ok(true);
        }
        if self.absent().contains(&r.uid) {
            return Ok(false);
        }
        let live = self.ctx.client.get(kind, ns, &r.name).await?;
        let exists = live.is_some_and(|o| o.metadata().uid == r.uid);
        if !exists {
            let mut absent = self.absent();
            if absent.len() >= ABSENT_OWNERS {
                absent.clear();
            }
            absent.insert(r.uid.clone());
        }
        Ok(exists)
    }

    /// An owner marked for deletion with the `orphan` or `foregroundDeletion` finalizer.
    async fn finalize(&self, owner: &Object) -> Result<Requeue, ClientError> {
        let meta = owner.metadata();
        let dependents = self.dependents(&meta.uid);
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
                    if self.owner_exists(&dm.namespace, r).await? {
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
                let propagation = if self.dependents(&dm.uid).is_empty() {
                    DeletionPropagation::Background
                } else {
                    DeletionPropagation::Foreground
                };
                let rv = dm.revision().unwrap_or(0);
                match self
                    .ctx
                    .client
                    .delete_propagating(d.kind(), &dm.namespace, &dm.name, rv, propagation)
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.code() == Some(Code::NotFound) => {}
                    Err(e) => return Err(e),
                }
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
        let Some((kind, namespace, name)) = parse_key(key) else {
            return Ok(None);
        };
        let Some(object) = self.cache(kind).and_then(|c| c.get(namespace, name)) else {
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
            if !self.owner_exists(&meta.namespace, r).await? {
                gone.push(r.uid.clone());
            }
        }
        if gone.is_empty() {
            return Ok(None);
        }
        if gone.len() == meta.owner_references.len() {
            tracing::info!(object = key, "deleting: every owner is gone");
            let rv = meta.revision().unwrap_or(0);
            match self
                .ctx
                .client
                .delete_propagating(kind, namespace, name, rv, DeletionPropagation::Background)
                .await
            {
                Ok(_) => {}
                Err(e) if e.code() == Some(Code::NotFound) => {}
                Err(e) => return Err(e),
            }
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
        assert_eq!(key, "ReplicaSet/team/web-1");
        assert_eq!(parse_key(&key), Some((Kind::ReplicaSet, "team", "web-1")));
        assert_eq!(parse_key("Node//n1"), Some((Kind::Node, "", "n1")));
        assert_eq!(parse_key("Widget/a/b"), None);
    }
}
