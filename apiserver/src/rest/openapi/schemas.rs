//! The schemas of the documents: each served kind's, from k8s-openapi's `JsonSchema` impls,
//! and the `<Kind>List` schemas k8s-openapi has none of.

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::authorization::v1 as authorization;
use k8s_openapi::api::autoscaling::v1 as autoscaling;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::rbac::v1 as rbac;
use k8s_openapi::schemars::JsonSchema;
use k8s_openapi::schemars::generate::SchemaGenerator;
use serde_json::{Value, json};

use crate::rest::discovery::GroupVersion;

/// Adds `T`'s schema (and every schema it references) to the generator; returns its name.
pub(super) fn add<T: JsonSchema>(generator: &mut SchemaGenerator) -> String {
    generator.subschema_for::<T>();
    T::schema_name().into_owned()
}

/// The schema of a served kind, by group, version and kind name.
pub(super) fn kind_schema(
    gv: GroupVersion,
    kind: &str,
    generator: &mut SchemaGenerator,
) -> Option<String> {
    Some(match (gv.group, gv.version, kind) {
        ("", "v1", "Pod") => add::<core::Pod>(generator),
        ("", "v1", "Node") => add::<core::Node>(generator),
        ("", "v1", "Namespace") => add::<core::Namespace>(generator),
        ("", "v1", "Event") => add::<core::Event>(generator),
        ("", "v1", "ResourceQuota") => add::<core::ResourceQuota>(generator),
        ("", "v1", "LimitRange") => add::<core::LimitRange>(generator),
        ("", "v1", "Secret") => add::<core::Secret>(generator),
        ("", "v1", "Binding") => add::<core::Binding>(generator),
        ("policy", "v1", "Eviction") => add::<policy::Eviction>(generator),
        ("authentication.k8s.io", "v1", "TokenRequest") => {
            add::<k8s_openapi::api::authentication::v1::TokenRequest>(generator)
        }
        ("apps", "v1", "Deployment") => add::<apps::Deployment>(generator),
        ("apps", "v1", "ReplicaSet") => add::<apps::ReplicaSet>(generator),
        ("autoscaling", "v1", "Scale") => add::<autoscaling::Scale>(generator),
        ("rbac.authorization.k8s.io", "v1", "Role") => add::<rbac::Role>(generator),
        ("rbac.authorization.k8s.io", "v1", "ClusterRole") => add::<rbac::ClusterRole>(generator),
        ("rbac.authorization.k8s.io", "v1", "RoleBinding") => add::<rbac::RoleBinding>(generator),
        ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding") => {
            add::<rbac::ClusterRoleBinding>(generator)
        }
        ("authorization.k8s.io", "v1", "SubjectAccessReview") => {
            add::<authorization::SubjectAccessReview>(generator)
        }
        ("authorization.k8s.io", "v1", "SelfSubjectAccessReview") => {
            add::<authorization::SelfSubjectAccessReview>(generator)
        }
        ("", "v1", "Service") => add::<core::Service>(generator),
        ("discovery.k8s.io", "v1", "EndpointSlice") => {
            add::<k8s_openapi::api::discovery::v1::EndpointSlice>(generator)
        }
        ("certificates.k8s.io", "v1", "CertificateSigningRequest") => {
            add::<k8s_openapi::api::certificates::v1::CertificateSigningRequest>(generator)
        }
        _ => {
            let declared = skiff_proto::api::GenericKind::all()
                .map(|g| g.info())
                .find(|info| info.kind == kind && info.api_version == gv.api_version())?;
            declared.schema.schema(generator)
        }
    })
}

pub(super) fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// The list schema Kubernetes names `<Kind>List`: k8s-openapi models lists as one generic
/// type without a schema of its own, so it is written here.
pub(super) fn list_schema(kind: &str, item: &str, list_meta: &str) -> Value {
    json!({
        "description": format!("{kind}List is a list of {kind} objects."),
        "type": "object",
        "properties": {
            "apiVersion": {
                "description": "APIVersion defines the versioned schema of this representation of an object.",
                "type": "string",
            },
            "items": {
                "description": format!("List of {kind} objects."),
                "type": "array",
                "items": schema_ref(item),
            },
            "kind": {
                "description": "Kind is a string value representing the REST resource this object represents.",
                "type": "string",
            },
            "metadata": {
                "description": "Standard list metadata.",
                "default": {},
                "allOf": [schema_ref(list_meta)],
            },
        },
        "required": ["items"],
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::core;

    /// What `kubectl explain` walks: each kind and list schema names its kind, descriptions
    /// beside references survive as `allOf`, and `node.status.addresses` resolves to a list of
    /// NodeAddress.
    #[test]
    fn explain_can_walk_the_schemas() {
        let doc = core();
        let schemas = &doc["components"]["schemas"];
        for (name, kind, group) in [
            ("io.k8s.api.core.v1.Pod", "Pod", ""),
            ("io.k8s.api.core.v1.PodList", "PodList", ""),
            ("io.k8s.api.core.v1.Node", "Node", ""),
            ("io.k8s.api.core.v1.NodeList", "NodeList", ""),
            ("io.k8s.api.core.v1.Namespace", "Namespace", ""),
            ("io.k8s.api.core.v1.NamespaceList", "NamespaceList", ""),
            ("io.k8s.api.core.v1.Event", "Event", ""),
            ("io.k8s.api.core.v1.EventList", "EventList", ""),
            ("io.k8s.api.core.v1.ResourceQuota", "ResourceQuota", ""),
            (
                "io.k8s.api.core.v1.ResourceQuotaList",
                "ResourceQuotaList",
                "",
            ),
            ("io.k8s.api.core.v1.LimitRange", "LimitRange", ""),
            ("io.k8s.api.core.v1.LimitRangeList", "LimitRangeList", ""),
            ("io.k8s.api.core.v1.Secret", "Secret", ""),
            ("io.k8s.api.core.v1.SecretList", "SecretList", ""),
            ("io.k8s.api.core.v1.Binding", "Binding", ""),
            ("io.k8s.api.policy.v1.Eviction", "Eviction", "policy"),
            ("io.k8s.apimachinery.pkg.apis.meta.v1.Status", "Status", ""),
            (
                "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent",
                "WatchEvent",
                "",
            ),
            (
                "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
                "DeleteOptions",
                "",
            ),
            (
                "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
                "DeleteOptions",
                "policy",
            ),
        ] {
            let gvks = schemas[name]["x-kubernetes-group-version-kind"]
                .as_array()
                .unwrap_or_else(|| panic!("{name} names no kind"));
            assert!(
                gvks.contains(&json!({"group": group, "kind": kind, "version": "v1"})),
                "{name}: {gvks:?}"
            );
        }
        let pod = &schemas["io.k8s.api.core.v1.Pod"];
        assert!(pod.get("required").is_none());
        assert_eq!(
            pod["properties"]["spec"]["allOf"],
            json!([{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}])
        );
        assert!(pod["properties"]["spec"]["description"].is_string());
        assert_eq!(
            schemas["io.k8s.api.core.v1.Binding"]["required"],
            json!(["target"])
        );

        let node_status =
            &schemas["io.k8s.api.core.v1.Node"]["properties"]["status"]["allOf"][0]["$ref"];
        assert_eq!(
            node_status,
            "#/components/schemas/io.k8s.api.core.v1.NodeStatus"
        );
        let addresses = &schemas["io.k8s.api.core.v1.NodeStatus"]["properties"]["addresses"];
        assert_eq!(addresses["type"], "array");
        assert_eq!(
            addresses["items"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.NodeAddress"
        );
        assert!(schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"].is_object());
        assert_eq!(
            schemas["io.k8s.api.core.v1.PodList"]["properties"]["items"]["items"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.Pod"
        );
    }
}
