//! Claims and local volumes: the part of kube-controller-manager's `persistentvolume`
//! controller that binds claims, with a local-path provisioner in it, as single-machine
//! distributions ship one. The StorageClass `standard` (the default; provisioner
//! `skiff.dev/local-path`, `WaitForFirstConsumer`, reclaim `Delete`) is made when missing.
//!
//! ```text
//!  claim without a class, a default class exists ──► given the default class
//!  claim of the local class, unbound, a pod using it is bound to node N
//!      ──► PersistentVolume pvc-<claim uid>: a directory in N's local volumes
//!          (the Node's skiff.dev/local-volumes annotation), node affinity to N, the claim's
//!          size and access modes, bound to the claim
//!      ──► the claim bound to it (spec.volumeName, status Bound), the volume Bound
//!  claim deleted, its volume's reclaim policy Delete ──► the volume deleted
//! ```
//!
//! The volume's node affinity keeps every later pod of the claim on that node (the
//! scheduler reads it), so a StatefulSet's pod made again finds its data. The directory
//! itself is made by the node's agent when a pod first mounts it.

use std::sync::Arc;

use serde_json::json;
use skiff_proto::api::volume::{
    DEFAULT_STORAGE_CLASS, LOCAL_PROVISIONER, LOCAL_VOLUMES_ANNOTATION,
};
use skiff_proto::api::{GenericObject, Kind, Object};
use skiff_proto::client::{ClientError, Event};
use skiff_proto::recorder::{EventRecorder, reference_to};

use crate::core::{
    Context, Controller, Requeue, created_or_there, gone_is_none, key_of, split_key,
};
use crate::queue::WorkQueue;

/// The controller's name in logs and metrics.
pub const NAME: &str = "persistentvolume-binder";
/// The annotation that makes a StorageClass the default.
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";
/// The annotation naming the node a claim is provisioned on (set by whoever chose it).
pub const SELECTED_NODE_ANNOTATION: &str = "volume.kubernetes.io/selected-node";

pub fn volume_kind() -> Kind {
    Kind::from_name("PersistentVolume").expect("invariant: PersistentVolume is declared")
}

pub fn class_kind() -> Kind {
    Kind::from_name("StorageClass").expect("invariant: StorageClass is declared")
}

#[derive(Debug)]
pub struct Provisioner {
    ctx: Arc<Context>,
    queue: WorkQueue,
    events: EventRecorder,
}

fn generic(o: &Object) -> Option<&GenericObject> {
    match o {
        Object::Generic(_, g) => Some(g),
        _ => None,
    }
}

impl Provisioner {
    pub fn new(ctx: Arc<Context>) -> Self {
        Provisioner {
            events: ctx.events.with_component("persistentvolume-controller"),
            ctx,
            queue: WorkQueue::new(),
        }
    }

    /// Makes the local StorageClass when it is missing.
    pub async fn ensure_class(&self) -> Result<(), ClientError> {
        if self
            .ctx
            .storage_classes
            .get("", DEFAULT_STORAGE_CLASS)
            .is_some()
        {
            return Ok(());
        }
        let class = Object::from_value(
            class_kind(),
            json!({
                "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": DEFAULT_STORAGE_CLASS,
                             "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
                "provisioner": LOCAL_PROVISIONER,
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "WaitForFirstConsumer",
            }),
        )
        .expect("invariant: the local StorageClass decodes");
        created_or_there(self.ctx.client.create(&class).await)
    }

    pub fn on_claim(&self, event: &Event) {
        match event {
            Event::Added(o) | Event::Modified(o) => self.queue.add(key_of(o.metadata())),
            Event::Deleted(o) => {
                // Its volume is looked at through the claim's key: gone, it is released.
                self.queue.add(key_of(o.metadata()));
            }
            Event::Bookmark(_) => {}
        }
    }

    /// A pod bound to a node: its claims may now be provisioned there.
    pub fn on_pod(&self, event: &Event) {
        let (Event::Added(Object::Pod(p)) | Event::Modified(Object::Pod(p))) = event else {
            return;
        };
        if p.spec.node_name.is_empty() {
            return;
        }
        for v in &p.spec.volumes {
            if let Some(c) = &v.persistent_volume_claim {
                self.queue
                    .add(format!("{}/{}", p.metadata.namespace, c.claim_name));
            }
        }
    }

    /// The default StorageClass's name, if one is marked default.
    fn default_class(&self) -> Option<String> {
        self.ctx
            .storage_classes
            .list(None)
            .iter()
            .filter_map(|o| generic(o))
            .find(|c| {
                c.metadata
                    .annotations
                    .get(DEFAULT_CLASS_ANNOTATION)
                    .map(String::as_str)
                    == Some("true")
            })
            .map(|c| c.metadata.name.clone())
    }

    /// The node the claim `namespace/name` goes to: the one named on it, else that of a pod
    /// bound with it.
    fn node_for(&self, claim: &GenericObject) -> Option<String> {
        if let Some(n) = claim.metadata.annotations.get(SELECTED_NODE_ANNOTATION) {
            return Some(n.clone());
        }
        let ns = &claim.metadata.namespace;
        self.ctx
            .pods
            .list(Some(ns))
            .iter()
            .find_map(|o| match &**o {
                Object::Pod(p)
                    if !p.spec.node_name.is_empty()
                        && !p.is_terminal()
                        && p.spec.volumes.iter().any(|v| {
                            v.persistent_volume_claim
                                .as_ref()
                                .is_some_and(|c| c.claim_name == claim.metadata.name)
                        }) =>
                {
                    Some(p.spec.node_name.clone())
                }
                _ => None,
            })
    }

    /// Deletes the local volumes of claims that are gone, when their policy says so.
    async fn release(&self, namespace: &str, name: &str) -> Result<(), ClientError> {
        for o in self.ctx.volumes.list(None) {
            let Some(pv) = generic(&o) else { continue };
            let ours = pv
                .metadata
                .annotations
                .get("pv.kubernetes.io/provisioned-by")
                .map(String::as_str)
                == Some(LOCAL_PROVISIONER);
            let of_claim = pv.text("/spec/claimRef/namespace") == namespace
                && pv.text("/spec/claimRef/name") == name;
            if !(ours && of_claim) {
                continue;
            }
            let claim_uid = pv.text("/spec/claimRef/uid");
            let live = self
                .ctx
                .claims
                .get(namespace, name)
                .is_some_and(|c| c.metadata().uid == claim_uid);
            if live || pv.text("/spec/persistentVolumeReclaimPolicy") != "Delete" {
                continue;
            }
            gone_is_none(
                self.ctx
                    .client
                    .delete(volume_kind(), "", &pv.metadata.name, 0, None)
                    .await,
            )?;
            tracing::info!(volume = %pv.metadata.name, claim = %format!("{namespace}/{name}"), "deleted the volume of a deleted claim");
        }
        Ok(())
    }

    /// Provisions the claim's volume on `node` and binds the two.
    async fn provision(&self, claim: &GenericObject, node: &str) -> Result<Requeue, ClientError> {
        let Some(Object::Node(n)) = self.ctx.nodes.get("", node).as_deref().cloned() else {
            return Ok(Some(std::time::Duration::from_secs(1)));
        };
        let Some(dir) = n.metadata.annotations.get(LOCAL_VOLUMES_ANNOTATION) else {
            self.events.warning(
                reference_to(crate::statefulset::claim_kind(), &claim.metadata),
                "ProvisioningFailed",
                format!(
                    "node {node} publishes no local volume directory ({LOCAL_VOLUMES_ANNOTATION})"
                ),
            );
            return Ok(Some(std::time::Duration::from_secs(10)));
        };
        let name = format!("pvc-{}", claim.metadata.uid);
        let class = claim.text("/spec/storageClassName").to_owned();
        let size = claim
            .at("/spec/resources/requests/storage")
            .cloned()
            .unwrap_or_else(|| json!("1Gi"));
        let modes = claim
            .at("/spec/accessModes")
            .cloned()
            .unwrap_or_else(|| json!(["ReadWriteOnce"]));
        if self.ctx.volumes.get("", &name).is_none() {
            let pv = Object::from_value(
                volume_kind(),
                json!({
                    "apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": {"name": name,
                                 "annotations": {"pv.kubernetes.io/provisioned-by": LOCAL_PROVISIONER}},
                    "spec": {
                        "capacity": {"storage": size},
                        "accessModes": modes,
                        "persistentVolumeReclaimPolicy": "Delete",
                        "storageClassName": class,
                        "volumeMode": "Filesystem",
                        "local": {"path": format!("{dir}/{name}")},
                        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
                        "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                     "namespace": claim.metadata.namespace,
                                     "name": claim.metadata.name,
                                     "uid": claim.metadata.uid},
                    },
                }),
            )
            .expect("invariant: a local PersistentVolume decodes");
            created_or_there(self.ctx.client.create(&pv).await)?;
            self.events.normal(
                reference_to(crate::statefulset::claim_kind(), &claim.metadata),
                "ProvisioningSucceeded",
                format!("Successfully provisioned volume {name} on node {node}"),
            );
        }
        // The claim names its volume, then says it is bound; the volume says so too.
        let mut bound = claim.clone();
        bound
            .object_at("/spec")
            .insert("volumeName".into(), json!(name));
        let annotations = &mut bound.metadata.annotations;
        annotations.insert("pv.kubernetes.io/bind-completed".into(), "yes".into());
        annotations.insert("pv.kubernetes.io/bound-by-controller".into(), "yes".into());
        annotations.insert(SELECTED_NODE_ANNOTATION.into(), node.to_owned());
        let claims = crate::statefulset::claim_kind();
        let Kind::Generic(g) = claims else {
            unreachable!("invariant: claims are declared")
        };
        let Some(Object::Generic(_, written)) =
            gone_is_none(self.ctx.client.update(&Object::Generic(g, bound)).await)?
        else {
            return Ok(None);
        };
        let status = json!({"phase": "Bound", "accessModes": modes, "capacity": {"storage": size}});
        crate::podcontrol::write_status(&self.ctx, claims, written.with_status(&status)).await?;
        if let Some(Object::Generic(_, pv)) = self.ctx.client.get(volume_kind(), "", &name).await? {
            let status = json!({"phase": "Bound"});
            crate::podcontrol::write_status(&self.ctx, volume_kind(), pv.with_status(&status))
                .await?;
        }
        Ok(None)
    }
}

impl Controller for Provisioner {
    const NAME: &'static str = NAME;

    fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    async fn sync(&self, key: &str) -> Result<Requeue, ClientError> {
        let (namespace, name) = split_key(key);
        let Some(object) = self.ctx.claims.get(namespace, name) else {
            self.release(namespace, name).await?;
            return Ok(None);
        };
        let Some(claim) = generic(&object) else {
            return Ok(None);
        };
        if claim.metadata.deletion_timestamp.is_some() || !claim.text("/spec/volumeName").is_empty()
        {
            return Ok(None);
        }
        let class = claim.text("/spec/storageClassName").to_owned();
        if class.is_empty() && claim.at("/spec/storageClassName").is_none() {
            // No class asked for: the default one, as Kubernetes gives it retroactively.
            if let Some(default) = self.default_class() {
                let mut next = claim.clone();
                next.object_at("/spec")
                    .insert("storageClassName".into(), json!(default));
                let Kind::Generic(g) = crate::statefulset::claim_kind() else {
                    unreachable!("invariant: claims are declared")
                };
                gone_is_none(self.ctx.client.update(&Object::Generic(g, next)).await)?;
            }
            return Ok(None);
        }
        let Some(class_object) = self.ctx.storage_classes.get("", &class) else {
            return Ok(None);
        };
        let provisioner = generic(&class_object).map_or("", |c| c.text("/provisioner"));
        if provisioner != LOCAL_PROVISIONER {
            return Ok(None);
        }
        match self.node_for(claim) {
            Some(node) => self.provision(claim, &node).await,
            // WaitForFirstConsumer: a pod bound with it tells where.
            None => Ok(None),
        }
    }
}
