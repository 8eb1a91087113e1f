//! The root CA publisher: a ConfigMap `kube-root-ca.crt` in every namespace, holding the CA
//! that the API server's certificate chains to (`ca.crt`), as kube-controller-manager's
//! `root-ca-cert-publisher` keeps it. Pods verify the API server with it (a projected
//! service account volume mounts it), and so do tools that look for it.
//!
//! ```text
//!  a namespace appears or changes, or a `kube-root-ca.crt` changes or goes
//!    ──► the namespace's key ──► sync: active ──► the ConfigMap made, or made right
//! ```

use std::sync::Arc;

use serde_json::{Value, json};
use skiff_proto::api::{Kind, Object};
use skiff_proto::client::{ClientError, Event};

use crate::core::{Context, Controller, Requeue, created_or_there, gone_is_none};
use crate::queue::WorkQueue;

/// The controller's name in logs and metrics.
pub const NAME: &str = "root-ca-cert-publisher";
/// The ConfigMap it keeps in every namespace.
pub const CONFIG_MAP: &str = "kube-root-ca.crt";
/// Its key holding the CA.
pub const CA_KEY: &str = "ca.crt";
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver \
    when using internal endpoints such as the internal service IP or kubernetes.default.svc. \
    No other usage is guaranteed across distributions of Kubernetes clusters.";

#[derive(Debug)]
pub struct RootCa {
    ctx: Arc<Context>,
    queue: WorkQueue,
    /// The CA's PEM.
    ca: String,
}

/// The kind of ConfigMaps.
pub fn config_map_kind() -> Kind {
    Kind::from_name("ConfigMap").expect("invariant: ConfigMap is declared")
}

impl RootCa {
    pub fn new(ctx: Arc<Context>, ca: String) -> Self {
        RootCa {
            ctx,
            queue: WorkQueue::new(),
            ca,
        }
    }

    pub fn on_namespace(&self, event: &Event) {
        if let Event::Added(o) | Event::Modified(o) = event {
            self.queue.add(o.metadata().name.clone());
        }
    }

    /// A `kube-root-ca.crt` changed or went (the cache holds no other ConfigMap).
    pub fn on_config_map(&self, event: &Event) {
        if let Event::Added(o) | Event::Modified(o) | Event::Deleted(o) = event
            && o.metadata().name == CONFIG_MAP
        {
            self.queue.add(o.metadata().namespace.clone());
        }
    }

    fn wanted(&self) -> Value {
        json!({CA_KEY: self.ca})
    }
}

impl Controller for RootCa {
    const NAME: &'static str = NAME;

    fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    async fn sync(&self, namespace: &str) -> Result<Requeue, ClientError> {
        if !self.ctx.namespace_active(namespace) {
            return Ok(None);
        }
        let client = &self.ctx.client;
        match self.ctx.root_ca_maps.get(namespace, CONFIG_MAP).as_deref() {
            Some(Object::Generic(g, current)) => {
                if current.at("/data") == Some(&self.wanted()) {
                    return Ok(None);
                }
                let mut next = current.clone();
                next.body.insert("data".into(), self.wanted());
                next.metadata
                    .annotations
                    .insert("kubernetes.io/description".into(), DESCRIPTION.into());
                gone_is_none(client.update(&Object::Generic(*g, next)).await)?;
                Ok(None)
            }
            _ => {
                let map = Object::from_value(
                    config_map_kind(),
                    json!({
                        "metadata": {
                            "name": CONFIG_MAP,
                            "namespace": namespace,
                            "annotations": {"kubernetes.io/description": DESCRIPTION},
                        },
                        "data": self.wanted(),
                    }),
                )
                .expect("invariant: the root CA ConfigMap decodes");
                created_or_there(client.create(&map).await)?;
                Ok(None)
            }
        }
    }
}
