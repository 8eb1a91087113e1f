//! The core group's (`v1`) served resources: pods with their subresources, nodes,
//! namespaces, events, quotas, limit ranges, secrets, services and bindings.

use skiff_proto::api::Kind;

use super::verb::{CREATE, DELETE, GET, LIST, PATCH, UPDATE, WATCH};
use super::{READ_WRITE, Resource, STATUS_VERBS, Subresource};

/// Namespaces are deleted one at a time (each deletion drains the namespace's contents), so
/// Kubernetes serves no `deletecollection` for them.
const NAMESPACE_VERBS: &[&str] = &[CREATE, DELETE, GET, LIST, PATCH, UPDATE, WATCH];

/// The group's served resources, in discovery order.
pub(super) const RESOURCES: &[Resource] = &[
    Resource {
        kind: Kind::Pod,
        verbs: READ_WRITE,
        subresources: &[
            Subresource {
                name: "attach",
                kind: "PodAttachOptions",
                api_version: None,
                verbs: &[CREATE, GET],
            },
            Subresource {
                name: "binding",
                kind: "Binding",
                api_version: None,
                verbs: &[CREATE],
            },
            Subresource {
                name: "eviction",
                kind: "Eviction",
                api_version: Some("policy/v1"),
                verbs: &[CREATE],
            },
            Subresource {
                name: "exec",
                kind: "PodExecOptions",
                api_version: None,
                verbs: &[CREATE, GET],
            },
            Subresource {
                name: "portforward",
                kind: "PodPortForwardOptions",
                api_version: None,
                verbs: &[CREATE, GET],
            },
            Subresource {
                name: "log",
                kind: "Pod",
                api_version: None,
                verbs: &[GET],
            },
            Subresource {
                name: "status",
                kind: "Pod",
                api_version: None,
                verbs: STATUS_VERBS,
            },
        ],
        categories: &["all"],
    },
    Resource {
        kind: Kind::Node,
        verbs: READ_WRITE,
        subresources: &[Subresource {
            name: "status",
            kind: "Node",
            api_version: None,
            verbs: STATUS_VERBS,
        }],
        categories: &[],
    },
    Resource {
        kind: Kind::Namespace,
        verbs: NAMESPACE_VERBS,
        subresources: &[
            // The namespace controller's: `spec.finalizers`, once a deleted namespace is empty.
            Subresource {
                name: "finalize",
                kind: "Namespace",
                api_version: None,
                verbs: &[UPDATE],
            },
            Subresource {
                name: "status",
                kind: "Namespace",
                api_version: None,
                verbs: STATUS_VERBS,
            },
        ],
        categories: &[],
    },
    Resource {
        kind: Kind::Event,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
    },
    Resource {
        kind: Kind::ResourceQuota,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
    },
    Resource {
        kind: Kind::LimitRange,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
    },
    Resource {
        kind: Kind::Secret,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
    },
    Resource {
        kind: Kind::Service,
        verbs: READ_WRITE,
        subresources: &[Subresource {
            name: "status",
            kind: "Service",
            api_version: None,
            verbs: STATUS_VERBS,
        }],
        categories: &["all"],
    },
    // Bindings are only ever created: the scheduler's assignment of a pod to a node.
    Resource {
        kind: Kind::Binding,
        verbs: &[CREATE],
        subresources: &[],
        categories: &[],
    },
];

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::core_v1_resources;
    use super::super::tests::find;

    /// The core resource list has kubectl's names, scopes and verbs, lists subresources as
    /// `parent/sub` entries, names the eviction kind's group, and leaves out what is not served.
    #[test]
    fn core_resource_list() {
        let list = core_v1_resources();
        assert_eq!(list["kind"], "APIResourceList");
        assert_eq!(list["groupVersion"], "v1");
        let pods = find(&list, "pods");
        assert_eq!(pods["singularName"], "pod");
        assert_eq!(pods["namespaced"], true);
        assert_eq!(pods["kind"], "Pod");
        assert_eq!(
            pods["verbs"],
            json!([
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch"
            ])
        );
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["categories"], json!(["all"]));
        let nodes = find(&list, "nodes");
        assert_eq!(nodes["namespaced"], false);
        assert!(nodes.get("categories").is_none());
        assert!(
            !find(&list, "namespaces")["verbs"]
                .as_array()
                .expect("verbs")
                .contains(&json!("deletecollection"))
        );
        assert_eq!(find(&list, "bindings")["verbs"], json!(["create"]));
        assert_eq!(find(&list, "events")["shortNames"], json!(["ev"]));
        assert_eq!(
            find(&list, "resourcequotas")["shortNames"],
            json!(["quota"])
        );
        assert_eq!(find(&list, "limitranges")["shortNames"], json!(["limits"]));

        let status = find(&list, "pods/status");
        assert_eq!(status["singularName"], "");
        assert_eq!(status["kind"], "Pod");
        assert_eq!(status["verbs"], json!(["get", "patch", "update"]));
        let eviction = find(&list, "pods/eviction");
        assert_eq!(
            (&eviction["group"], &eviction["version"], &eviction["kind"]),
            (&json!("policy"), &json!("v1"), &json!("Eviction"))
        );
        assert_eq!(find(&list, "pods/binding")["kind"], "Binding");
        assert!(find(&list, "pods/binding").get("group").is_none());
        assert_eq!(find(&list, "pods/log")["verbs"], json!(["get"]));
        assert_eq!(find(&list, "nodes/status")["namespaced"], false);
        assert_eq!(find(&list, "namespaces/status")["kind"], "Namespace");
        assert_eq!(find(&list, "pods/exec")["verbs"], json!(["create", "get"]));
        assert_eq!(
            find(&list, "pods/portforward")["kind"],
            "PodPortForwardOptions"
        );
        assert_eq!(find(&list, "pods/attach")["kind"], "PodAttachOptions");
        for absent in ["pods/proxy", "nodes/proxy"] {
            assert!(
                list["resources"]
                    .as_array()
                    .expect("resources")
                    .iter()
                    .all(|r| r["name"] != absent),
                "{absent} is advertised"
            );
        }
    }
}
