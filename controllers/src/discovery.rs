//! The kinds the cluster serves now, as this controller manager needs to know them to act on
//! every object of a namespace: the built-in and declared kinds, and the custom kinds of the
//! CustomResourceDefinitions stored. A custom kind is defined in this process as the API server
//! defines it ([`skiff_proto::api::custom`]), so its objects decode here; one whose CRD is gone
//! is retired.

use std::collections::HashSet;

use skiff_proto::api::{Kind, Object, custom};
use skiff_proto::client::{ClientError, ClusterClient, ListParams};

/// The kind of CustomResourceDefinitions.
fn crd_kind() -> Kind {
    Kind::from_name("CustomResourceDefinition")
        .expect("invariant: CustomResourceDefinition is declared")
}

/// Defines the custom kinds of every CRD stored, and retires those of CRDs no longer there.
pub async fn refresh_custom_kinds(client: &ClusterClient) -> Result<(), ClientError> {
    let (crds, _) = client.list(crd_kind(), &ListParams::default()).await?;
    let mut names = HashSet::new();
    for crd in &crds {
        if let Object::Generic(_, crd) = crd {
            custom::define(crd);
            names.insert(crd.metadata.name.clone());
        }
    }
    let gone: HashSet<String> = custom::served()
        .into_iter()
        .filter_map(custom::live)
        .map(|live| live.crd.clone())
        .filter(|crd| !names.contains(crd))
        .collect();
    for crd in gone {
        custom::retire(&crd);
    }
    Ok(())
}

/// Every kind whose objects live in a namespace and are stored, custom ones included (as
/// last refreshed).
pub fn namespaced_kinds() -> Vec<Kind> {
    Kind::all()
        .filter(|k| k.is_namespaced() && k.is_stored())
        .collect()
}
