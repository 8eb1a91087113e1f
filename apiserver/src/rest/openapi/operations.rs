//! The paths of a served resource and the operations on them, with Kubernetes' operation
//! ids, tags, request bodies and responses.

use serde_json::{Map, Value, json};

use super::parameters::{
    delete_collection_parameters, delete_parameters, list_parameters, log_parameters,
    namespace_parameter, path_parameter, pretty, write_parameters,
};
use super::schemas::schema_ref;
use crate::rest::discovery::{GroupVersion, Resource, Subresource, verb};

/// The schemas an operation refers to, by name.
pub(super) struct Common {
    pub(super) status: String,
    pub(super) delete_options: String,
    pub(super) patch: String,
}

/// The names of one resource's schemas and what its operations say about it.
pub(super) struct Target<'a> {
    pub(super) gv: GroupVersion,
    /// `Pod`: the kind named in operation ids.
    pub(super) kind: &'a str,
    /// `{"group": "", "kind": "Pod", "version": "v1"}`.
    pub(super) gvk: Value,
    pub(super) schema: String,
    /// The list kind's schema, for resources that can be listed.
    pub(super) list: Option<String>,
    pub(super) namespaced: bool,
}

impl Target<'_> {
    /// `listCoreV1NamespacedPod`, `readCoreV1NodeStatus`, `deleteCoreV1CollectionNamespacedPod`,
    /// `listCoreV1PodForAllNamespaces`: Kubernetes' operation ids.
    fn operation_id(&self, verb: &str, scope: Scope, suffix: &str) -> String {
        let scope = match scope {
            Scope::Object if self.namespaced => "Namespaced",
            Scope::Collection if self.namespaced => "CollectionNamespaced",
            Scope::Collection => "Collection",
            Scope::Object | Scope::AllNamespaces => "",
        };
        format!(
            "{verb}{}{}{scope}{}{suffix}",
            group_word(self.gv),
            capitalize(self.gv.version),
            self.kind,
        )
    }
}

/// Which operation id form: one object (or a collection read or created in its namespace),
/// a whole collection deleted, or a list across every namespace.
#[derive(Debug, Clone, Copy)]
enum Scope {
    Object,
    Collection,
    AllNamespaces,
}

/// The group as operation ids spell it: `Core`, `Apps`, `Policy`.
pub(super) fn group_word(gv: GroupVersion) -> String {
    if gv.group.is_empty() {
        "Core".to_owned()
    } else {
        gv.group.split('.').map(capitalize).collect()
    }
}

/// The tag Kubernetes files a group version's operations under: `core_v1`, `apps_v1`.
pub(super) fn tag(gv: GroupVersion) -> String {
    let group = if gv.group.is_empty() {
        "core"
    } else {
        gv.group
    };
    format!("{group}_{}", gv.version)
}

pub(super) fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(chars).collect()
    })
}

fn content(types: &[&str], schema: &Value) -> Value {
    let content: Map<String, Value> = types
        .iter()
        .map(|t| ((*t).to_owned(), json!({"schema": schema})))
        .collect();
    Value::Object(content)
}

pub(super) fn responses(codes: &[(&str, &str)], types: &[&str], schema: &Value) -> Value {
    let responses: Map<String, Value> = codes
        .iter()
        .map(|(code, description)| {
            (
                (*code).to_owned(),
                json!({"description": description, "content": content(types, schema)}),
            )
        })
        .collect();
    Value::Object(responses)
}

pub(super) const JSON: &[&str] = &["application/json"];
pub(super) const OK: &[(&str, &str)] = &[("200", "OK")];
const WRITTEN: &[(&str, &str)] = &[("200", "OK"), ("201", "Created")];
const CREATED: &[(&str, &str)] = &[("200", "OK"), ("201", "Created"), ("202", "Accepted")];
const DELETED: &[(&str, &str)] = &[("200", "OK"), ("202", "Accepted")];

/// One operation: what kubectl reads (`x-kubernetes-action`, the kind, inline parameters)
/// and what documents it (id, description, bodies).
struct Operation {
    id: String,
    description: String,
    action: &'static str,
    gvk: Value,
    parameters: Vec<Value>,
    request: Option<Value>,
    responses: Value,
    tag: String,
}

impl Operation {
    fn into_json(self) -> Value {
        let mut op = Map::new();
        op.insert("tags".into(), json!([self.tag]));
        op.insert("description".into(), self.description.into());
        op.insert("operationId".into(), self.id.into());
        if !self.parameters.is_empty() {
            op.insert("parameters".into(), self.parameters.into());
        }
        if let Some(body) = self.request {
            op.insert("requestBody".into(), body);
        }
        op.insert("responses".into(), self.responses);
        op.insert("x-kubernetes-action".into(), self.action.into());
        op.insert("x-kubernetes-group-version-kind".into(), self.gvk);
        Value::Object(op)
    }
}

fn body(types: &[&str], schema: &Value) -> Value {
    json!({"content": content(types, schema), "required": true})
}

/// The request bodies a PATCH accepts. Strategic merge patch is served but left out here; see
/// the documentation of [`super`].
const PATCH_TYPES: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
];

/// Adds an operation to the path item at `path`, creating the item with its path-level
/// parameters (name, namespace, pretty) the first time.
fn put_operation(
    paths: &mut Map<String, Value>,
    path: String,
    path_parameters: Vec<Value>,
    method: &str,
    operation: Operation,
) {
    let item = paths
        .entry(path)
        .or_insert_with(|| json!({"parameters": path_parameters}));
    if let Value::Object(item) = item {
        item.insert(method.into(), operation.into_json());
    }
}

/// The paths of one served resource: collection, all-namespaces list, object, subresources.
pub(super) fn resource_paths(
    resource: &Resource,
    target: &Target<'_>,
    subresource_schemas: &[(&Subresource, Value, String)],
    common: &Common,
    paths: &mut Map<String, Value>,
) {
    let plural = resource.plural();
    let root = format!("/{}", target.gv.path());
    let (collection, mut collection_parameters) = if target.namespaced {
        (
            format!("{root}/namespaces/{{namespace}}/{plural}"),
            vec![namespace_parameter()],
        )
    } else {
        (format!("{root}/{plural}"), vec![])
    };
    collection_parameters.push(pretty());
    let item = format!("{collection}/{{name}}");
    let mut item_parameters = vec![path_parameter(
        "name",
        &format!("name of the {}", target.kind),
    )];
    item_parameters.extend(collection_parameters.iter().cloned());

    let object = schema_ref(&target.schema);
    let operation = |id: String, description: String, action: &'static str| Operation {
        id,
        description,
        action,
        gvk: target.gvk.clone(),
        parameters: Vec::new(),
        request: None,
        responses: Value::Null,
        tag: tag(target.gv),
    };
    let kind = target.kind;

    if let Some(list) = target.list.as_deref() {
        let list_types = &["application/json", "application/json;stream=watch"];
        let list_ref = schema_ref(list);
        put_operation(
            paths,
            collection.clone(),
            collection_parameters.clone(),
            "get",
            Operation {
                parameters: list_parameters(),
                responses: responses(OK, list_types, &list_ref),
                ..operation(
                    target.operation_id("list", Scope::Object, ""),
                    format!("list or watch objects of kind {kind}"),
                    "list",
                )
            },
        );
        if target.namespaced {
            put_operation(
                paths,
                format!("{root}/{plural}"),
                vec![pretty()],
                "get",
                Operation {
                    parameters: list_parameters(),
                    responses: responses(OK, list_types, &list_ref),
                    ..operation(
                        target.operation_id("list", Scope::AllNamespaces, "ForAllNamespaces"),
                        format!("list or watch objects of kind {kind} in every namespace"),
                        "list",
                    )
                },
            );
        }
    }
    if resource.allows(verb::CREATE) {
        put_operation(
            paths,
            collection.clone(),
            collection_parameters.clone(),
            "post",
            Operation {
                parameters: write_parameters(),
                request: Some(body(JSON, &object)),
                responses: responses(CREATED, JSON, &object),
                ..operation(
                    target.operation_id("create", Scope::Object, ""),
                    format!("create a {kind}"),
                    "post",
                )
            },
        );
    }
    if resource.allows(verb::DELETE_COLLECTION) {
        put_operation(
            paths,
            collection.clone(),
            collection_parameters.clone(),
            "delete",
            Operation {
                parameters: delete_collection_parameters(),
                request: Some(body(JSON, &schema_ref(&common.delete_options))),
                responses: responses(OK, JSON, &schema_ref(&common.status)),
                ..operation(
                    target.operation_id("delete", Scope::Collection, ""),
                    format!("delete a collection of {kind}"),
                    "deletecollection",
                )
            },
        );
    }
    if resource.allows(verb::GET) {
        put_operation(
            paths,
            item.clone(),
            item_parameters.clone(),
            "get",
            Operation {
                responses: responses(OK, JSON, &object),
                ..operation(
                    target.operation_id("read", Scope::Object, ""),
                    format!("read the specified {kind}"),
                    "get",
                )
            },
        );
    }
    if resource.allows(verb::UPDATE) {
        put_operation(
            paths,
            item.clone(),
            item_parameters.clone(),
            "put",
            Operation {
                parameters: write_parameters(),
                request: Some(body(JSON, &object)),
                responses: responses(WRITTEN, JSON, &object),
                ..operation(
                    target.operation_id("replace", Scope::Object, ""),
                    format!("replace the specified {kind}"),
                    "put",
                )
            },
        );
    }
    if resource.allows(verb::PATCH) {
        put_operation(
            paths,
            item.clone(),
            item_parameters.clone(),
            "patch",
            Operation {
                parameters: write_parameters(),
                request: Some(body(PATCH_TYPES, &schema_ref(&common.patch))),
                responses: responses(WRITTEN, JSON, &object),
                ..operation(
                    target.operation_id("patch", Scope::Object, ""),
                    format!("partially update the specified {kind}"),
                    "patch",
                )
            },
        );
    }
    if resource.allows(verb::DELETE) {
        put_operation(
            paths,
            item.clone(),
            item_parameters.clone(),
            "delete",
            Operation {
                parameters: delete_parameters(),
                request: Some(body(JSON, &schema_ref(&common.delete_options))),
                responses: responses(DELETED, JSON, &object),
                ..operation(
                    target.operation_id("delete", Scope::Object, ""),
                    format!("delete a {kind}"),
                    "delete",
                )
            },
        );
    }

    for (sub, gvk, schema) in subresource_schemas {
        let path = format!("{item}/{}", sub.name);
        let suffix = capitalize(sub.name);
        let sub_ref = schema_ref(schema);
        let sub_operation =
            |verb_word: &str, description: String, action: &'static str| Operation {
                gvk: gvk.clone(),
                ..operation(
                    target.operation_id(verb_word, Scope::Object, &suffix),
                    description,
                    action,
                )
            };
        // The log subresource answers GET with the container's output as text, not an object.
        if sub.name == "log" {
            if sub.allows(verb::GET) {
                put_operation(
                    paths,
                    path.clone(),
                    item_parameters.clone(),
                    "get",
                    Operation {
                        parameters: log_parameters(),
                        responses: responses(OK, &["text/plain"], &json!({"type": "string"})),
                        ..sub_operation("read", format!("read log of the specified {kind}"), "get")
                    },
                );
            }
            continue;
        }
        if sub.allows(verb::CREATE) {
            put_operation(
                paths,
                path.clone(),
                item_parameters.clone(),
                "post",
                Operation {
                    parameters: write_parameters(),
                    request: Some(body(JSON, &sub_ref)),
                    responses: responses(CREATED, JSON, &sub_ref),
                    ..sub_operation("create", format!("create {} of a {kind}", sub.name), "post")
                },
            );
        }
        if sub.allows(verb::GET) {
            put_operation(
                paths,
                path.clone(),
                item_parameters.clone(),
                "get",
                Operation {
                    responses: responses(OK, JSON, &sub_ref),
                    ..sub_operation(
                        "read",
                        format!("read {} of the specified {kind}", sub.name),
                        "get",
                    )
                },
            );
        }
        if sub.allows(verb::UPDATE) {
            put_operation(
                paths,
                path.clone(),
                item_parameters.clone(),
                "put",
                Operation {
                    parameters: write_parameters(),
                    request: Some(body(JSON, &sub_ref)),
                    responses: responses(WRITTEN, JSON, &sub_ref),
                    ..sub_operation(
                        "replace",
                        format!("replace {} of the specified {kind}", sub.name),
                        "put",
                    )
                },
            );
        }
        if sub.allows(verb::PATCH) {
            put_operation(
                paths,
                path.clone(),
                item_parameters.clone(),
                "patch",
                Operation {
                    parameters: write_parameters(),
                    request: Some(body(PATCH_TYPES, &schema_ref(&common.patch))),
                    responses: responses(WRITTEN, JSON, &sub_ref),
                    ..sub_operation(
                        "patch",
                        format!("partially update {} of the specified {kind}", sub.name),
                        "patch",
                    )
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::tests::{apps, core, doc};
    use crate::rest::discovery;

    /// kubectl's server-side validation check: for every served kind with PATCH, some PATCH
    /// operation names that kind and carries an inline `fieldValidation` query parameter.
    #[test]
    fn patch_operations_offer_field_validation() {
        let (core, apps) = (core(), apps());
        for (doc, group, kind) in [
            (&core, "", "Pod"),
            (&core, "", "Node"),
            (&core, "", "Namespace"),
            (&core, "", "Event"),
            (&core, "", "ResourceQuota"),
            (&core, "", "LimitRange"),
            (&core, "", "Secret"),
            (&apps, "apps", "Deployment"),
            (&apps, "apps", "ReplicaSet"),
            (&apps, "autoscaling", "Scale"),
        ] {
            let paths = doc["paths"].as_object().expect("paths");
            let gvk = json!({"group": group, "kind": kind, "version": "v1"});
            let patches: Vec<&Value> = paths
                .values()
                .filter_map(|item| item.get("patch"))
                .filter(|op| op["x-kubernetes-group-version-kind"] == gvk)
                .collect();
            assert!(!patches.is_empty(), "no PATCH for {kind}");
            for op in patches {
                assert_eq!(op["x-kubernetes-action"], "patch");
                let params = op["parameters"].as_array().expect("parameters");
                assert!(
                    params
                        .iter()
                        .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"),
                    "{kind}: {op}"
                );
                let body = op["requestBody"]["content"].as_object().expect("body");
                assert!(body.contains_key("application/merge-patch+json"));
                assert!(body.contains_key("application/apply-patch+yaml"));
                assert!(!body.contains_key("application/strategic-merge-patch+json"));
            }
        }
    }

    /// The paths kubectl and clients call exist with the methods served, in both scopes, and
    /// nothing unserved is described.
    #[test]
    fn paths_follow_discovery() {
        let doc = core();
        let paths = doc["paths"].as_object().expect("paths");
        let methods = |path: &str| -> Vec<&str> {
            let item = paths
                .get(path)
                .unwrap_or_else(|| panic!("{path} missing"))
                .as_object()
                .expect("path item");
            ["get", "put", "post", "delete", "patch"]
                .into_iter()
                .filter(|m| item.contains_key(*m))
                .collect()
        };
        assert_eq!(
            methods("/api/v1/namespaces/{namespace}/pods"),
            ["get", "post", "delete"]
        );
        assert_eq!(
            methods("/api/v1/namespaces/{namespace}/pods/{name}"),
            ["get", "put", "delete", "patch"]
        );
        assert_eq!(methods("/api/v1/pods"), ["get"]);
        assert_eq!(
            methods("/api/v1/namespaces/{namespace}/pods/{name}/status"),
            ["get", "put", "patch"]
        );
        assert_eq!(
            methods("/api/v1/namespaces/{namespace}/pods/{name}/binding"),
            ["post"]
        );
        assert_eq!(
            methods("/api/v1/namespaces/{namespace}/pods/{name}/eviction"),
            ["post"]
        );
        assert_eq!(
            methods("/api/v1/namespaces/{namespace}/pods/{name}/log"),
            ["get"]
        );
        assert_eq!(methods("/api/v1/nodes"), ["get", "post", "delete"]);
        assert_eq!(
            methods("/api/v1/nodes/{name}/status"),
            ["get", "put", "patch"]
        );
        assert_eq!(methods("/api/v1/namespaces"), ["get", "post"]);
        assert_eq!(
            methods("/api/v1/namespaces/{name}"),
            ["get", "put", "delete", "patch"]
        );
        assert_eq!(methods("/api/v1/namespaces/{namespace}/bindings"), ["post"]);
        assert!(!paths.contains_key("/api/v1/bindings"));
        assert!(!paths.contains_key("/api/v1/namespaces/{namespace}/bindings/{name}"));
        assert!(!paths.contains_key("/api/v1/namespaces/{namespace}/pods/{name}/exec"));
        assert!(!paths.contains_key("/api/v1/nodes/{name}/proxy"));

        let list = &paths["/api/v1/namespaces/{namespace}/pods"]["get"];
        assert_eq!(list["operationId"], "listCoreV1NamespacedPod");
        assert_eq!(list["x-kubernetes-action"], "list");
        let names: Vec<&str> = list["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        for name in [
            "labelSelector",
            "fieldSelector",
            "limit",
            "continue",
            "resourceVersion",
            "resourceVersionMatch",
            "watch",
            "timeoutSeconds",
            "allowWatchBookmarks",
            "sendInitialEvents",
        ] {
            assert!(names.contains(&name), "{name}");
        }
        assert_eq!(
            paths["/api/v1/pods"]["get"]["operationId"],
            "listCoreV1PodForAllNamespaces"
        );
        assert_eq!(
            paths["/api/v1/namespaces/{namespace}/pods"]["delete"]["operationId"],
            "deleteCoreV1CollectionNamespacedPod"
        );
        assert_eq!(
            paths["/api/v1/nodes/{name}/status"]["patch"]["operationId"],
            "patchCoreV1NodeStatus"
        );
        let eviction = &paths["/api/v1/namespaces/{namespace}/pods/{name}/eviction"]["post"];
        assert_eq!(
            eviction["x-kubernetes-group-version-kind"],
            json!({"group": "policy", "kind": "Eviction", "version": "v1"})
        );
        let item = &paths["/api/v1/namespaces/{namespace}/pods/{name}"];
        let path_params: Vec<&str> = item["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert_eq!(path_params, ["name", "namespace", "pretty"]);
        let delete: Vec<&str> = item["delete"]["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert_eq!(
            delete,
            ["dryRun", "gracePeriodSeconds", "propagationPolicy"]
        );
    }

    /// Explain finds a kind from the first operation on the resource's paths; each such
    /// operation, in the document of the resource's group version, names the resource's own
    /// kind (not its list's).
    #[test]
    fn resource_paths_name_the_kind() {
        for resource in discovery::resources() {
            let gv = resource.group_version();
            let doc = doc(&gv.path());
            let root = gv.path();
            let plural = resource.plural();
            let gvk = gv.kind_json(resource.kind.name());
            let candidates = [
                format!("/{root}/{plural}"),
                format!("/{root}/{plural}/{{name}}"),
                format!("/{root}/namespaces/{{namespace}}/{plural}"),
                format!("/{root}/namespaces/{{namespace}}/{plural}/{{name}}"),
            ];
            let mut found = false;
            for path in &candidates {
                for method in ["get", "post", "put", "patch", "delete"] {
                    let op = &doc["paths"][path][method];
                    if op.is_object() {
                        assert_eq!(
                            op["x-kubernetes-group-version-kind"], gvk,
                            "{path} {method}"
                        );
                        found = true;
                    }
                }
            }
            assert!(found, "{plural} has no operation");
        }
    }
}
