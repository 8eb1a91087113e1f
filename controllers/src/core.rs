//! What every controller shares: the [`Context`] it reads and writes through, the
//! [`Controller`] trait its workers run, and how objects are named in queue keys and owner
//! references. It sits below the controllers; [`crate::manager`], which starts them, sits
//! above.

use std::sync::Arc;
use std::time::Duration;

use skiff_proto::api::meta::OwnerReference;
use skiff_proto::api::{Kind, Object, ObjectMeta};
use skiff_proto::client::{ClientError, ClusterClient, Code};
use skiff_proto::recorder::EventRecorder;

use crate::cache::{self, Cache};
use crate::metrics::Metrics;
use crate::queue::WorkQueue;
use crate::replicaset::expectations::Expectations;

/// What every controller reads and writes through.
#[derive(Debug)]
pub struct Context {
    pub client: ClusterClient,
    pub pods: Cache,
    pub replica_sets: Cache,
    pub deployments: Cache,
    pub nodes: Cache,
    pub csrs: Cache,
    pub services: Cache,
    pub endpoint_slices: Cache,
    pub endpoints: Cache,
    pub quotas: Cache,
    pub namespaces: Cache,
    pub service_accounts: Cache,
    pub jobs: Cache,
    pub cron_jobs: Cache,
    pub daemon_sets: Cache,
    /// The ControllerRevisions of DaemonSets (and, later, StatefulSets).
    pub controller_revisions: Cache,
    pub stateful_sets: Cache,
    /// PersistentVolumeClaims (a StatefulSet's pods' own, and the provisioner's to bind).
    pub claims: Cache,
    /// PersistentVolumes and StorageClasses (the provisioner's).
    pub volumes: Cache,
    pub storage_classes: Cache,
    /// The `kube-root-ca.crt` ConfigMaps (no other).
    pub root_ca_maps: Cache,
    /// PodDisruptionBudgets (the disruption controller's).
    pub disruption_budgets: Cache,
    /// ReplicationControllers, read for the scale of their pods' budgets.
    pub replication_controllers: Cache,
    pub events: EventRecorder,
    pub metrics: Arc<Metrics>,
    /// The ReplicaSet controller's outstanding creates and deletes, per ReplicaSet uid: the
    /// Deployment controller counts creates in flight towards the surge.
    pub expectations: Expectations,
}

impl Context {
    /// Every cache that holds all objects of its kind: all but `root_ca_maps`, which holds
    /// one name only.
    pub fn whole_caches(&self) -> [&Cache; 21] {
        [
            &self.pods,
            &self.replica_sets,
            &self.deployments,
            &self.nodes,
            &self.csrs,
            &self.services,
            &self.endpoint_slices,
            &self.endpoints,
            &self.quotas,
            &self.namespaces,
            &self.service_accounts,
            &self.jobs,
            &self.cron_jobs,
            &self.daemon_sets,
            &self.controller_revisions,
            &self.stateful_sets,
            &self.claims,
            &self.volumes,
            &self.storage_classes,
            &self.disruption_budgets,
            &self.replication_controllers,
        ]
    }

    /// Whether namespace `name` exists and is not being deleted (as the cache has it).
    pub fn namespace_active(&self, name: &str) -> bool {
        self.namespaces
            .get("", name)
            .is_some_and(|n| n.metadata().deletion_timestamp.is_none())
    }
}

/// A create's result, with "someone made it meanwhile" (the cache was behind; its event
/// syncs again) and "its namespace went" as done.
pub fn created_or_there(r: Result<Object, ClientError>) -> Result<(), ClientError> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.code(), Some(Code::AlreadyExists | Code::NotFound)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// `namespace/name`: the key a controller's queue holds for an object.
pub fn key_of(meta: &ObjectMeta) -> String {
    format!("{}/{}", meta.namespace, meta.name)
}

/// The parts of a queue key.
pub fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

/// The controller reference an owner of `kind` puts on what it creates or adopts.
pub fn controller_ref(kind: Kind, owner: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: kind.api_version().into(),
        kind: kind.name().into(),
        name: owner.name.clone(),
        uid: owner.uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
        other: Default::default(),
    }
}

/// The queue key (`namespace/name`) of the owner of `kind` that controls `object`, if one
/// does.
pub fn owner_key(object: &Object, kind: Kind) -> Option<String> {
    let r = cache::controller_of(object)?;
    (r.kind == kind.name()).then(|| format!("{}/{}", object.metadata().namespace, r.name))
}

/// A write's result, with "the object is gone" as `None` rather than an error. A conflict
/// stays an error: the sync runs again on the newer object.
pub fn gone_is_none(r: Result<Object, ClientError>) -> Result<Option<Object>, ClientError> {
    match r {
        Ok(o) => Ok(Some(o)),
        Err(e) if e.code() == Some(Code::NotFound) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A sync's answer: look again after this long, or not unless something changes.
pub type Requeue = Option<Duration>;

/// A controller: a queue of keys and what syncing one key does.
pub trait Controller: Send + Sync + 'static {
    /// The name in logs and metrics (`replicaset`, `deployment`).
    const NAME: &'static str;

    fn queue(&self) -> &WorkQueue;

    /// Makes the object of `key` as its spec says; an error queues it again after its
    /// back-off.
    fn sync(&self, key: &str) -> impl Future<Output = Result<Requeue, ClientError>> + Send;
}
