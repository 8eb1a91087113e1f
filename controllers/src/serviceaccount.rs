//! The ServiceAccount controller: a `default` ServiceAccount in every namespace, made again
//! if it is deleted, as kube-controller-manager's `serviceaccount` controller keeps it. Pods
//! that name no service account run as `default`, and `kubectl create token default` asks for
//! its token.
//!
//! ```text
//!  a namespace appears or changes, or a `default` ServiceAccount is deleted
//!    ──► the namespace's key ──► sync: active, and no `default` in the cache ──► create it
//! ```

use std::sync::Arc;

use serde_json::json;
use skiff_proto::api::{Kind, Object};
use skiff_proto::client::{ClientError, Event};

use crate::core::{Context, Controller, Requeue, created_or_there};
use crate::queue::WorkQueue;

/// The controller's name in logs and metrics.
pub const NAME: &str = "serviceaccount";
/// The service account every namespace has.
pub const DEFAULT: &str = "default";

#[derive(Debug)]
pub struct ServiceAccounts {
    ctx: Arc<Context>,
    queue: WorkQueue,
}

/// The kind of ServiceAccounts.
pub fn kind() -> Kind {
    Kind::from_name("ServiceAccount").expect("invariant: ServiceAccount is declared")
}

impl ServiceAccounts {
    pub fn new(ctx: Arc<Context>) -> Self {
        ServiceAccounts {
            ctx,
            queue: WorkQueue::new(),
        }
    }

    pub fn on_namespace(&self, event: &Event) {
        if let Event::Added(o) | Event::Modified(o) = event {
            self.queue.add(o.metadata().name.clone());
        }
    }

    pub fn on_service_account(&self, event: &Event) {
        if let Event::Deleted(o) = event
            && o.metadata().name == DEFAULT
        {
            self.queue.add(o.metadata().namespace.clone());
        }
    }
}

impl Controller for ServiceAccounts {
    const NAME: &'static str = NAME;

    fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    async fn sync(&self, namespace: &str) -> Result<Requeue, ClientError> {
        if !self.ctx.namespace_active(namespace)
            || self.ctx.service_accounts.get(namespace, DEFAULT).is_some()
        {
            return Ok(None);
        }
        let account = Object::from_value(
            kind(),
            json!({"metadata": {"name": DEFAULT, "namespace": namespace}}),
        )
        .expect("invariant: a bare ServiceAccount decodes");
        created_or_there(self.ctx.client.create(&account).await)?;
        Ok(None)
    }
}
