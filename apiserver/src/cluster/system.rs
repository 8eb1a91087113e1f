//! The objects a cluster always has, as kube-apiserver's bootstrap controllers keep them: the
//! namespaces `default`, `kube-system`, `kube-public` and `kube-node-lease` (where node
//! leases and components' leader-election leases live), and the PriorityClasses
//! `system-node-critical` and `system-cluster-critical`. Every API server that serves the
//! Kubernetes API creates the missing ones when it starts, trying again while the store
//! cannot take writes; one that exists is left as it is.

use std::time::Duration;

use serde_json::json;
use skiff_proto::api::kinds::SYSTEM_PRIORITY_CLASSES;
use skiff_proto::api::{Kind, Object};
use skiff_proto::backoff::Backoff;

use super::{ClusterApi, ClusterError};

/// The namespaces every cluster has.
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// The namespaces that may not be deleted (kube-apiserver's NamespaceLifecycle admission
/// refuses it): where the cluster's own objects live.
pub const IMMORTAL_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

/// The system objects, as created.
fn objects() -> Vec<Object> {
    let namespaces = SYSTEM_NAMESPACES
        .into_iter()
        .map(|name| json!({"metadata": {"name": name}}));
    let namespaces = namespaces.map(|v| Object::from_value(Kind::Namespace, v));
    let priority_class =
        Kind::from_name("PriorityClass").expect("invariant: PriorityClass is declared");
    let classes = SYSTEM_PRIORITY_CLASSES
        .iter()
        .map(|(name, value, description)| {
            Object::from_value(
                priority_class,
                json!({"metadata": {"name": name}, "value": value, "description": description}),
            )
        });
    namespaces
        .chain(classes)
        .map(|o| o.expect("invariant: the system objects decode"))
        .collect()
}

/// Creates each missing system object; returns once all exist.
pub async fn ensure(api: ClusterApi) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let mut missing = objects();
    while !missing.is_empty() {
        let mut failed = Vec::new();
        for o in missing {
            match api.create(o.clone(), false).await {
                Ok(_) | Err(ClusterError::AlreadyExists { .. }) => {}
                Err(e) => {
                    tracing::debug!(error = %e, object = %o.display_name(), "creating a system object; trying again");
                    failed.push(o);
                }
            }
        }
        missing = failed;
        if !missing.is_empty() {
            backoff.wait().await;
        }
    }
    tracing::debug!("the system namespaces and priority classes are in place");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The system objects are valid as written.
    #[test]
    fn system_objects_are_valid() {
        for mut o in objects() {
            skiff_proto::api::defaults::apply(&mut o);
            skiff_proto::api::validation::validate(&o)
                .unwrap_or_else(|e| panic!("{}: {e}", o.display_name()));
        }
    }
}
