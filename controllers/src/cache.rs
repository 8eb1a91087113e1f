//! The controllers' shared view of the cluster: one cache per kind, fed by an informer
//! (list, then watch), read by every worker at once, indexed by owner.
//!
//! Objects are held as `Arc<Object>`, so a worker takes a consistent snapshot of the few it
//! needs without copying them, and the lock is held only for the lookup. The owner index
//! maps an owner's uid to the keys of the objects that name it in `ownerReferences` (any
//! reference, controller or not): the ReplicaSet controller finds its pods there, and the
//! garbage collector an owner's dependents, without scanning a namespace of 30,000 pods.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use skiff_proto::api::meta::OwnerReference;
use skiff_proto::api::{Kind, Object};
use skiff_proto::client::Event;

#[derive(Debug, Default)]
struct Inner {
    /// Storage key → object.
    objects: BTreeMap<String, Arc<Object>>,
    /// Owner uid → keys of the objects that reference it.
    by_owner: HashMap<String, BTreeSet<String>>,
    /// Keys of objects without a controller reference, per namespace: candidates for adoption.
    orphans: HashMap<String, BTreeSet<String>>,
    /// Keys of the pods bound to each node.
    by_node: HashMap<String, BTreeSet<String>>,
    synced: bool,
}

/// The cache of one kind.
#[derive(Debug)]
pub struct Cache {
    kind: Kind,
    // Never held across an await.
    inner: RwLock<Inner>,
}

/// The controller reference of an object: the owner that manages it.
pub fn controller_of(object: &Object) -> Option<&OwnerReference> {
    object
        .metadata()
        .owner_references
        .iter()
        .find(|r| r.controller == Some(true))
}

impl Cache {
    pub fn new(kind: Kind) -> Self {
        Cache {
            kind,
            inner: RwLock::new(Inner::default()),
        }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Applies a watch event; returns the object as it was before, if it was cached.
    pub fn apply(&self, event: &Event) -> Option<Arc<Object>> {
        match event {
            Event::Added(o) | Event::Modified(o) => self.insert(Arc::new(o.clone())),
            Event::Deleted(o) => self.remove(&o.key()),
            Event::Bookmark(_) => None,
        }
    }

    /// Marks the cache as holding a full list.
    pub fn set_synced(&self) {
        self.write().synced = true;
    }

    pub fn is_synced(&self) -> bool {
        self.read().synced
    }

    fn insert(&self, object: Arc<Object>) -> Option<Arc<Object>> {
        let key = object.key();
        let mut inner = self.write();
        let old = inner.objects.insert(key.clone(), object.clone());
        if let Some(old) = &old {
            unindex(&mut inner, &key, old);
        }
        index(&mut inner, &key, &object);
        old
    }

    fn remove(&self, key: &str) -> Option<Arc<Object>> {
        let mut inner = self.write();
        let old = inner.objects.remove(key)?;
        unindex(&mut inner, key, &old);
        Some(old)
    }

    /// The object `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Object>> {
        self.read()
            .objects
            .get(&self.kind.key(namespace, name))
            .cloned()
    }

    /// Every object that references the owner with `uid`.
    pub fn owned_by(&self, uid: &str) -> Vec<Arc<Object>> {
        let inner = self.read();
        inner
            .by_owner
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|k| inner.objects.get(k).cloned())
            .collect()
    }

    /// The pods bound to `node`.
    pub fn on_node(&self, node: &str) -> Vec<Arc<Object>> {
        let inner = self.read();
        inner
            .by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|k| inner.objects.get(k).cloned())
            .collect()
    }

    /// Objects of `namespace` without a controller.
    pub fn orphans_in(&self, namespace: &str) -> Vec<Arc<Object>> {
        let inner = self.read();
        inner
            .orphans
            .get(namespace)
            .into_iter()
            .flatten()
            .filter_map(|k| inner.objects.get(k).cloned())
            .collect()
    }

    /// Every object of `namespace` (every object, for `None`).
    pub fn list(&self, namespace: Option<&str>) -> Vec<Arc<Object>> {
        let inner = self.read();
        let prefix = self.kind.prefix(namespace);
        inner
            .objects
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(_, o)| o.clone())
            .collect()
    }

    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn index(inner: &mut Inner, key: &str, object: &Object) {
    let meta = object.metadata();
    for r in &meta.owner_references {
        inner
            .by_owner
            .entry(r.uid.clone())
            .or_default()
            .insert(key.to_owned());
    }
    if controller_of(object).is_none() {
        inner
            .orphans
            .entry(meta.namespace.clone())
            .or_default()
            .insert(key.to_owned());
    }
    if let Object::Pod(p) = object
        && !p.spec.node_name.is_empty()
    {
        inner
            .by_node
            .entry(p.spec.node_name.clone())
            .or_default()
            .insert(key.to_owned());
    }
}

fn unindex(inner: &mut Inner, key: &str, object: &Object) {
    let meta = object.metadata();
    for r in &meta.owner_references {
        if let Some(keys) = inner.by_owner.get_mut(&r.uid) {
            keys.remove(key);
            if keys.is_empty() {
                inner.by_owner.remove(&r.uid);
            }
        }
    }
    if let Some(keys) = inner.orphans.get_mut(&meta.namespace) {
        keys.remove(key);
        if keys.is_empty() {
            inner.orphans.remove(&meta.namespace);
        }
    }
    if let Object::Pod(p) = object
        && let Some(keys) = inner.by_node.get_mut(&p.spec.node_name)
    {
        keys.remove(key);
        if keys.is_empty() {
            inner.by_node.remove(&p.spec.node_name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_proto::api::Pod;

    fn pod(name: &str, owner: Option<&str>) -> Object {
        let mut p = Pod::default();
        p.metadata.name = name.into();
        p.metadata.namespace = "default".into();
        if let Some(uid) = owner {
            p.metadata.owner_references.push(OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: "rs".into(),
                uid: uid.into(),
                controller: Some(true),
                ..OwnerReference::default()
            });
        }
        Object::Pod(p)
    }

    /// The owner and orphan indexes follow every add, change and delete.
    #[test]
    fn indexes_follow_the_objects() {
        let c = Cache::new(Kind::Pod);
        c.apply(&Event::Added(pod("a", Some("u1"))));
        c.apply(&Event::Added(pod("b", None)));
        assert_eq!(c.owned_by("u1").len(), 1);
        assert_eq!(c.orphans_in("default").len(), 1);
        // a is released, b adopted
        c.apply(&Event::Modified(pod("a", None)));
        c.apply(&Event::Modified(pod("b", Some("u1"))));
        let owned: Vec<String> = c
            .owned_by("u1")
            .iter()
            .map(|o| o.metadata().name.clone())
            .collect();
        assert_eq!(owned, ["b"]);
        assert_eq!(c.orphans_in("default")[0].metadata().name, "a");
        let mut bound = pod("c", None);
        if let Object::Pod(p) = &mut bound {
            p.spec.node_name = "n1".into();
        }
        c.apply(&Event::Added(bound.clone()));
        assert_eq!(c.on_node("n1").len(), 1);
        c.apply(&Event::Deleted(bound));
        assert!(c.on_node("n1").is_empty());
        c.apply(&Event::Deleted(pod("b", Some("u1"))));
        assert!(c.owned_by("u1").is_empty());
        assert_eq!(c.list(Some("default")).len(), 1);
        assert!(c.get("default", "a").is_some());
    }
}
