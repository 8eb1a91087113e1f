//! What the garbage collector sees: every stored kind but events, as kube-controller-manager's
//! collector watches every deletable resource but events. The kinds a controller already
//! caches whole are read from its cache; the collector keeps caches of the others, the
//! custom kinds of the CustomResourceDefinitions stored among them, followed while the
//! cluster runs (a CRD created, changed or deleted starts or stops its kind's informer).
//!
//! ```text
//!   Context's whole caches (Pods, ReplicaSets, Jobs …) ─┐
//!   own caches: ConfigMaps, Secrets, RBAC, CRDs …  ─────┼─► dependents(uid), get(kind, ns, name)
//!   own caches of custom kinds, one per CRD ───────────┘     (started and stopped as CRDs change)
//! ```
//!
//! Every version of a kind shares its objects, so caches are keyed by group and name
//! ([`TypeKey`]), as owner references name their owners.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use skiff_proto::api::meta::OwnerReference;
use skiff_proto::api::{GenericObject, Kind, Object, custom};

use crate::cache::Cache;
use crate::core::Context;

/// A kind's group and name (`apps`, `Deployment`): what identifies it across versions.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TypeKey {
    pub group: String,
    pub name: String,
}

impl TypeKey {
    pub fn of(kind: Kind) -> TypeKey {
        TypeKey {
            group: kind.group().to_owned(),
            name: kind.name().to_owned(),
        }
    }

    /// The kind an owner reference names (its `apiVersion`'s group and its `kind`).
    pub fn of_ref(r: &OwnerReference) -> TypeKey {
        TypeKey {
            group: r
                .api_version
                .rsplit_once('/')
                .map_or("", |(g, _)| g)
                .to_owned(),
            name: r.kind.clone(),
        }
    }

    /// `Deployment.apps`, `Pod.`: a queue key's first part ([`TypeKey::parse`] reads it).
    pub fn format(&self) -> String {
        format!("{}.{}", self.name, self.group)
    }

    pub fn parse(s: &str) -> Option<TypeKey> {
        let (name, group) = s.split_once('.')?;
        Some(TypeKey {
            group: group.to_owned(),
            name: name.to_owned(),
        })
    }
}

/// Whether the collector looks at objects of `kind`: stored kinds, but not events (too many,
/// and never owners), as kube-controller-manager's collector ignores them.
pub fn collected(kind: Kind) -> bool {
    kind.is_stored() && kind != Kind::Event
}

pub use custom::crd_kind;

/// A cache the collector reads: a controller's, or its own.
#[derive(Debug)]
pub enum CacheRef<'a> {
    Shared(&'a Cache),
    Own(Arc<Cache>),
}

impl Deref for CacheRef<'_> {
    type Target = Cache;

    fn deref(&self) -> &Cache {
        match self {
            CacheRef::Shared(c) => c,
            CacheRef::Own(c) => c,
        }
    }
}

/// How long an owner's finalizing waits for a kind's cache to fill before it goes on
/// without it (kube-controller-manager's collector waits for its caches as long): a kind
/// that cannot be listed must not hold every foreground deletion in the cluster.
const SYNC_WAIT: Duration = Duration::from_secs(30);

/// The caches the collector reads.
#[derive(Debug)]
pub struct Graph {
    ctx: Arc<Context>,
    /// The built-in and declared kinds no controller caches whole, from the start.
    fixed: Vec<Kind>,
    /// Caches of the kinds no controller holds whole (custom kinds included), each with when
    /// it was first wanted. Never held across an await.
    own: RwLock<BTreeMap<TypeKey, (Arc<Cache>, Instant)>>,
    /// The custom kinds the collector should see, as the follower last found them. Never
    /// held across an await.
    wanted: Mutex<BTreeSet<TypeKey>>,
}

/// The kind a CRD defines, by group and name.
pub fn crd_type(crd: &GenericObject) -> TypeKey {
    TypeKey {
        group: crd.text("/spec/group").to_owned(),
        name: crd.text("/spec/names/kind").to_owned(),
    }
}

impl Graph {
    pub fn new(ctx: Arc<Context>) -> Graph {
        let fixed: Vec<Kind> = Kind::all()
            .filter(|&k| {
                collected(k)
                    && !matches!(k, Kind::Generic(g) if g.custom_index().is_some())
                    && !ctx.whole_caches().iter().any(|c| c.kind() == k)
            })
            .collect();
        let now = Instant::now();
        let own = fixed
            .iter()
            .map(|&k| (TypeKey::of(k), (Arc::new(Cache::new(k)), now)))
            .collect();
        Graph {
            ctx,
            fixed,
            own: RwLock::new(own),
            wanted: Mutex::default(),
        }
    }

    fn own(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<TypeKey, (Arc<Cache>, Instant)>> {
        self.own
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn own_mut(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<TypeKey, (Arc<Cache>, Instant)>> {
        self.own
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The built-in and declared kinds whose informers the controller manager starts for the
    /// collector (custom kinds are started by [`super::GarbageCollector::follow_custom_kinds`]).
    pub fn fixed_kinds(&self) -> &[Kind] {
        &self.fixed
    }

    /// The cache of the kind `key` names, if the collector sees that kind now.
    pub fn cache(&self, key: &TypeKey) -> Option<CacheRef<'_>> {
        if let Some(c) = self
            .ctx
            .whole_caches()
            .into_iter()
            .find(|c| c.kind().name() == key.name && c.kind().group() == key.group)
        {
            return Some(CacheRef::Shared(c));
        }
        self.own().get(key).map(|(c, _)| CacheRef::Own(c.clone()))
    }

    /// Every cache the collector reads.
    pub fn caches(&self) -> Vec<CacheRef<'_>> {
        let mut all: Vec<CacheRef<'_>> = self
            .ctx
            .whole_caches()
            .into_iter()
            .map(CacheRef::Shared)
            .collect();
        all.extend(self.own().values().map(|(c, _)| CacheRef::Own(c.clone())));
        all
    }

    /// Every cached object that names `uid` among its owners.
    pub fn dependents(&self, uid: &str) -> Vec<Arc<Object>> {
        self.caches().iter().flat_map(|c| c.owned_by(uid)).collect()
    }

    /// Starts a cache for custom kind `kind`, wanted since `since`; `None` when there is one.
    pub fn add(&self, kind: Kind, since: Instant) -> Option<Arc<Cache>> {
        let mut own = self.own_mut();
        let key = TypeKey::of(kind);
        if own.contains_key(&key) {
            return None;
        }
        let cache = Arc::new(Cache::new(kind));
        own.insert(key, (cache.clone(), since));
        Some(cache)
    }

    /// Forgets the cache of a custom kind no longer followed, and returns it.
    pub fn remove(&self, key: &TypeKey) -> Option<Arc<Cache>> {
        self.own_mut().remove(key).map(|(c, _)| c)
    }

    /// The custom kinds the collector should see now.
    pub fn want(&self, kinds: BTreeSet<TypeKey>) {
        *self
            .wanted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = kinds;
    }

    /// The custom kinds to follow, one version of each (every version shares its objects),
    /// and every custom kind a CRD in the cache defines, served or not. Each CRD is defined
    /// in this process as the API server defines it, so its objects decode here; the kinds
    /// of CRDs that are gone are retired.
    pub fn custom_kinds(&self) -> (BTreeMap<TypeKey, Kind>, BTreeSet<TypeKey>) {
        let Some(crds) = self.cache(&TypeKey::of(crd_kind())) else {
            return Default::default();
        };
        let crds = crds.list(None);
        let crds: Vec<&GenericObject> = crds
            .iter()
            .filter_map(|crd| match &**crd {
                Object::Generic(_, crd) => Some(crd),
                _ => None,
            })
            .collect();
        let defined = crds.iter().map(|crd| crd_type(crd)).collect();
        let wanted = custom::sync(crds.iter().copied())
            .into_iter()
            .filter_map(|kinds| kinds.first().map(|&k| Kind::Generic(k)))
            .map(|kind| (TypeKey::of(kind), kind))
            .collect();
        (wanted, defined)
    }

    /// Whether every kind the collector should see is cached in full: the fixed kinds, and
    /// each CRD's kind, or waited for longer than [`SYNC_WAIT`]. An owner's dependents are
    /// not known before (a foreground deletion or an orphaning would miss some).
    pub fn synced(&self) -> bool {
        let own = self.own();
        let wanted = self
            .wanted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        own.values()
            .all(|(c, since)| c.is_synced() || since.elapsed() > SYNC_WAIT)
            && wanted.iter().all(|k| own.contains_key(k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_keys_name_group_and_kind_across_versions() {
        let r = OwnerReference {
            api_version: "example.com/v2".into(),
            kind: "Widget".into(),
            ..OwnerReference::default()
        };
        let key = TypeKey::of_ref(&r);
        assert_eq!(key.format(), "Widget.example.com");
        assert_eq!(TypeKey::parse(&key.format()), Some(key));
        let pod = TypeKey::of(Kind::Pod);
        assert_eq!(pod.format(), "Pod.");
        assert_eq!(TypeKey::parse("Pod."), Some(pod));
        let core = OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            ..OwnerReference::default()
        };
        assert_eq!(TypeKey::of_ref(&core).group, "");
        assert_eq!(TypeKey::parse("Pod"), None);
    }

    #[test]
    fn events_are_not_collected_nor_what_is_never_stored() {
        assert!(!collected(Kind::Event));
        assert!(!collected(Kind::Binding));
        assert!(collected(Kind::Secret));
        assert!(collected(crd_kind()));
    }
}
