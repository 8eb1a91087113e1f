//! The kinds the cluster serves now, as this controller manager needs to know them to act on
//! every object of a namespace: the built-in and declared kinds, and the custom kinds of the
//! CustomResourceDefinitions stored. A custom kind is defined in this process as the API server
//! defines it ([`skiff_proto::api::custom`]), so its objects decode here; one whose CRD is gone
//! is retired.

use skiff_proto::api::{Kind, Object, custom};
use skiff_proto::client::{ClientError, ClusterClient, ListParams};

/// Defines the custom kinds of every CRD stored, and retires those of CRDs no longer there.
pub async fn refresh_custom_kinds(client: &ClusterClient) -> Result<(), ClientError> {
    let (crds, _) = client
        .list(custom::crd_kind(), &ListParams::default())
        .await?;
    custom::sync(crds.iter().filter_map(|crd| match crd {
        Object::Generic(_, crd) => Some(crd),
        _ => None,
    }));
    Ok(())
}

/// Every kind whose objects live in a namespace and are stored, custom ones included (as
/// last refreshed).
pub fn namespaced_kinds() -> Vec<Kind> {
    Kind::all()
        .filter(|k| k.is_namespaced() && k.is_stored())
        .collect()
}
