//! The `apps` group's served resources: Deployments and ReplicaSets, each with its `scale`
//! and `status` subresources.

use skiff_proto::api::Kind;

use super::{READ_WRITE, Resource, STATUS_VERBS, Subresource};

/// The group's served resources, in discovery order.
pub(super) const RESOURCES: &[Resource] = &[
    Resource {
        kind: Kind::Deployment,
        verbs: READ_WRITE,
        subresources: &[
            SCALE,
            Subresource {
                name: "status",
                kind: "Deployment",
                api_version: None,
                verbs: STATUS_VERBS,
            },
        ],
        categories: &["all"],
    },
    Resource {
        kind: Kind::ReplicaSet,
        verbs: READ_WRITE,
        subresources: &[
            SCALE,
            Subresource {
                name: "status",
                kind: "ReplicaSet",
                api_version: None,
                verbs: STATUS_VERBS,
            },
        ],
        categories: &["all"],
    },
];

/// A workload's replica count as an autoscaling/v1 `Scale`: what `kubectl scale` and
/// autoscalers read and write.
pub(super) const SCALE: Subresource = Subresource {
    name: "scale",
    kind: "Scale",
    api_version: Some("autoscaling/v1"),
    verbs: STATUS_VERBS,
};

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::find;
    use super::super::{GroupVersion, aggregated_groups, api_group_list, resource_list};

    /// `/apis` lists apps/v1 first in both forms, with the workloads and their `Scale`,
    /// then RBAC and access reviews.
    #[test]
    fn apps_is_the_other_group() {
        let gv = |g: &str| json!({"groupVersion": format!("{g}/v1"), "version": "v1"});
        let group = |g: &str| json!({"name": g, "preferredVersion": gv(g), "versions": [gv(g)]});
        assert_eq!(
            api_group_list()["groups"],
            json!([
                group("apps"),
                group("rbac.authorization.k8s.io"),
                group("authorization.k8s.io"),
                group("discovery.k8s.io"),
                group("certificates.k8s.io"),
                group("coordination.k8s.io"),
                group("batch"),
                group("policy"),
                group("scheduling.k8s.io"),
                group("storage.k8s.io"),
                group("networking.k8s.io"),
                json!({
                    "name": "autoscaling",
                    "preferredVersion": {"groupVersion": "autoscaling/v2", "version": "v2"},
                    "versions": [{"groupVersion": "autoscaling/v2", "version": "v2"}]
                }),
                group("apiextensions.k8s.io"),
                group("apiregistration.k8s.io")
            ])
        );
        let aggregated = aggregated_groups();
        assert_eq!(aggregated["kind"], "APIGroupDiscoveryList");
        assert_eq!(aggregated["items"][0]["metadata"]["name"], "apps");
        let version = &aggregated["items"][0]["versions"][0];
        assert_eq!(version["version"], "v1");
        let deployments = version["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .find(|r| r["resource"] == "deployments")
            .expect("deployments");
        assert_eq!(
            deployments["responseKind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        assert_eq!(deployments["shortNames"], json!(["deploy"]));
        assert_eq!(deployments["categories"], json!(["all"]));
        assert_eq!(
            deployments["subresources"],
            json!([
                {
                    "subresource": "scale",
                    "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                    "verbs": ["get", "patch", "update"],
                },
                {
                    "subresource": "status",
                    "responseKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                    "verbs": ["get", "patch", "update"],
                },
            ])
        );
        let list = resource_list(GroupVersion::parse("apps/v1"));
        let scale = find(&list, "deployments/scale");
        assert_eq!(
            (&scale["group"], &scale["version"], &scale["kind"]),
            (&json!("autoscaling"), &json!("v1"), &json!("Scale"))
        );
        assert_eq!(find(&list, "replicasets")["shortNames"], json!(["rs"]));
    }
}
