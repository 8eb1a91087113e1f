//! The OpenAPI v3 documents: one per served group version, generated from Kubernetes' own
//! schema (k8s-openapi's `JsonSchema` impls) and from [`super::discovery::resources`].
//!
//! kubectl reads them for three things, and each shapes the document:
//!
//! * **Server-side field validation.** Before sending `fieldValidation=Strict`, kubectl looks
//!   through `paths` for a PATCH operation whose `x-kubernetes-group-version-kind` is the
//!   object's, and checks that operation's own `parameters` for a `fieldValidation` query
//!   parameter. So every operation carries its parameters inline (kubectl does not follow
//!   `$ref`s into `components.parameters`).
//! * **`kubectl explain`.** It finds the kind from an operation on the resource's paths, then
//!   the schema in `components.schemas` whose `x-kubernetes-group-version-kind` list holds
//!   that kind, and walks `properties`, `$ref`s, `allOf`, `items` and `additionalProperties`.
//!   A field's own description beside a `$ref` is kept by wrapping the reference in `allOf`,
//!   as Kubernetes' documents do, so explain prints both the field's and its type's text.
//! * **Client-side apply.** kubectl computes a strategic merge patch from the OpenAPI schema
//!   when a PATCH operation's request body lists `application/strategic-merge-patch+json`.
//!   k8s-openapi's schemas carry no `x-kubernetes-patch-strategy` / `-merge-key`, so a patch
//!   computed from them would replace lists that Kubernetes merges by key. The media type is
//!   therefore left out of the request bodies (the server still accepts it); kubectl then
//!   falls back to the merge keys compiled into it, which are Kubernetes' own.
//!
//! The index (`GET /openapi/v3`) names each document with the SHA-256 of its bytes, so a
//! client's cache of a document stays valid exactly as long as the document does.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::OnceLock;

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::authorization::v1 as authorization;
use k8s_openapi::api::autoscaling::v1 as autoscaling;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::rbac::v1 as rbac;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::schemars::JsonSchema;
use k8s_openapi::schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::discovery::{self, GroupVersion, Resource, Subresource, verb};

/// The Kubernetes release whose schema k8s-openapi generated (its `v1_33` feature).
const SCHEMA_RELEASE: &str = "v1.33";

/// One built document.
struct Document {
    /// `api/v1`, `apis/apps/v1`.
    path: String,
    bytes: Vec<u8>,
    /// Upper-case hex SHA-256 of `bytes`.
    hash: String,
}

fn documents() -> &'static [Document] {
    static DOCUMENTS: OnceLock<Vec<Document>> = OnceLock::new();
    DOCUMENTS.get_or_init(|| {
        discovery::group_versions()
            .into_iter()
            .map(|gv| {
                let bytes = serde_json::to_vec(&build(gv))
                    .expect("invariant: a serde_json::Value always serializes");
                let hash = Sha256::digest(&bytes).iter().fold(
                    String::with_capacity(64),
                    |mut hex, byte| {
                        let _ = write!(hex, "{byte:02X}");
                        hex
                    },
                );
                Document {
                    path: gv.path(),
                    bytes,
                    hash,
                }
            })
            .collect()
    })
}

/// `GET /openapi/v3`: each group version's document, by path, with its hash in the URL.
pub fn index() -> Value {
    let paths: Map<String, Value> = documents()
        .iter()
        .map(|d| {
            let url = format!("/openapi/v3/{}?hash={}", d.path, d.hash);
            (d.path.clone(), json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

/// `GET /openapi/v3/<path>` (`api/v1`): the document's JSON, built once per process.
pub fn document(group_version_path: &str) -> Option<&'static [u8]> {
    documents()
        .iter()
        .find(|d| d.path == group_version_path)
        .map(|d| d.bytes.as_slice())
}

/// The hash the index gives for a document: a request whose `?hash=` equals it may be answered
/// as immutable, since a different document would have a different hash.
pub fn hash(group_version_path: &str) -> Option<&'static str> {
    documents()
        .iter()
        .find(|d| d.path == group_version_path)
        .map(|d| d.hash.as_str())
}

/// Adds `T`'s schema (and every schema it references) to the generator; returns its name.
fn add<T: JsonSchema>(generator: &mut SchemaGenerator) -> String {
    generator.subschema_for::<T>();
    T::schema_name().into_owned()
}

/// Subresources that upgrade the connection instead of carrying an object.
const CONNECT_SUBRESOURCES: [&str; 2] = ["attach", "exec"];

/// The schema of a served kind, by group, version and kind name.
fn kind_schema(gv: GroupVersion, kind: &str, generator: &mut SchemaGenerator) -> Option<String> {
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
        _ => return None,
    })
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// The schemas an operation refers to, by name.
struct Common {
    status: String,
    delete_options: String,
    patch: String,
}

/// The names of one resource's schemas and what its operations say about it.
struct Target<'a> {
    gv: GroupVersion,
    /// `Pod`: the kind named in operation ids.
    kind: &'a str,
    /// `{"group": "", "kind": "Pod", "version": "v1"}`.
    gvk: Value,
    schema: String,
    /// The list kind's schema, for resources that can be listed.
    list: Option<String>,
    namespaced: bool,
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
fn group_word(gv: GroupVersion) -> String {
    if gv.group.is_empty() {
        "Core".to_owned()
    } else {
        gv.group.split('.').map(capitalize).collect()
    }
}

/// The tag Kubernetes files a group version's operations under: `core_v1`, `apps_v1`.
fn tag(gv: GroupVersion) -> String {
    let group = if gv.group.is_empty() {
        "core"
    } else {
        gv.group
    };
    format!("{group}_{}", gv.version)
}

fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(chars).collect()
    })
}

fn query(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": schema})
}

fn string() -> Value {
    json!({"type": "string", "uniqueItems": true})
}

fn boolean() -> Value {
    json!({"type": "boolean", "uniqueItems": true})
}

fn integer() -> Value {
    json!({"type": "integer", "uniqueItems": true})
}

fn pretty() -> Value {
    query(
        "pretty",
        "If 'true', the output is pretty printed.",
        string(),
    )
}

fn dry_run() -> Value {
    query(
        "dryRun",
        "When present, indicates that modifications should not be persisted. The only valid value is 'All': all dry run stages are processed.",
        string(),
    )
}

fn field_manager() -> Value {
    query(
        "fieldManager",
        "A name associated with the actor or entity that is making these changes; at most 128 printable characters.",
        string(),
    )
}

fn field_validation() -> Value {
    query(
        "fieldValidation",
        "How the server treats unknown or duplicate fields in the request: Ignore drops them silently, Warn drops them and returns a warning for each, Strict fails the request on the first one.",
        string(),
    )
}

fn write_parameters() -> Vec<Value> {
    vec![dry_run(), field_manager(), field_validation()]
}

fn selection_parameters() -> Vec<Value> {
    vec![
        query(
            "continue",
            "The continue token of the previous page of a paginated list.",
            string(),
        ),
        query(
            "fieldSelector",
            "A selector restricting the list of returned objects by their fields. Defaults to everything.",
            string(),
        ),
        query(
            "labelSelector",
            "A selector restricting the list of returned objects by their labels. Defaults to everything.",
            string(),
        ),
        query(
            "limit",
            "The maximum number of objects to return; more are signalled by a continue token in the list's metadata.",
            integer(),
        ),
        query(
            "resourceVersion",
            "The resource version the list is served at, with resourceVersionMatch deciding how it is matched; for a watch, the version to start after. Unset means most recent.",
            string(),
        ),
        query(
            "resourceVersionMatch",
            "How resourceVersion applies to list calls: Exact or NotOlderThan.",
            string(),
        ),
        query(
            "sendInitialEvents",
            "With watch=true, begin the watch stream with synthetic ADDED events for the current state of the objects, then a bookmark.",
            boolean(),
        ),
        query(
            "timeoutSeconds",
            "A timeout for the list or watch call, regardless of activity.",
            integer(),
        ),
    ]
}

fn list_parameters() -> Vec<Value> {
    let mut parameters = vec![query(
        "allowWatchBookmarks",
        "Ask for BOOKMARK watch events, which carry only the resource version reached.",
        boolean(),
    )];
    parameters.extend(selection_parameters());
    parameters.push(query(
        "watch",
        "Watch for changes to the described resources and return them as a stream of add, update and remove notifications.",
        boolean(),
    ));
    parameters
}

fn delete_parameters() -> Vec<Value> {
    vec![
        dry_run(),
        query(
            "gracePeriodSeconds",
            "The duration in seconds before the object should be deleted; zero means immediately. Unset uses the kind's default.",
            integer(),
        ),
        query(
            "propagationPolicy",
            "Whether and how garbage collection is performed: Orphan, Background or Foreground.",
            string(),
        ),
    ]
}

fn delete_collection_parameters() -> Vec<Value> {
    let mut parameters = delete_parameters();
    parameters.extend(selection_parameters());
    parameters
}

fn log_parameters() -> Vec<Value> {
    vec![
        query(
            "container",
            "The container whose logs to stream; may be omitted when the pod has one container.",
            string(),
        ),
        query("follow", "Follow the log stream of the pod.", boolean()),
        query(
            "limitBytes",
            "The number of bytes to read from the server before terminating the log output.",
            integer(),
        ),
        query(
            "previous",
            "Return the logs of the previous, terminated instance of the container.",
            boolean(),
        ),
        query(
            "sinceSeconds",
            "Only return logs newer than this many seconds before the present.",
            integer(),
        ),
        query(
            "tailLines",
            "The number of lines from the end of the logs to show.",
            integer(),
        ),
        query(
            "timestamps",
            "Prefix every line of log output with an RFC3339 timestamp.",
            boolean(),
        ),
    ]
}

fn path_parameter(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "path",
        "description": description,
        "required": true,
        "schema": string(),
    })
}

fn namespace_parameter() -> Value {
    path_parameter(
        "namespace",
        "object name and auth scope, such as for teams and projects",
    )
}

fn content(types: &[&str], schema: &Value) -> Value {
    let content: Map<String, Value> = types
        .iter()
        .map(|t| ((*t).to_owned(), json!({"schema": schema})))
        .collect();
    Value::Object(content)
}

fn responses(codes: &[(&str, &str)], types: &[&str], schema: &Value) -> Value {
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

const JSON: &[&str] = &["application/json"];
const OK: &[(&str, &str)] = &[("200", "OK")];
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
/// the module documentation.
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
fn resource_paths(
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

/// The list schema Kubernetes names `<Kind>List`: k8s-openapi models lists as one generic
/// type without a schema of its own, so it is written here.
fn list_schema(kind: &str, item: &str, list_meta: &str) -> Value {
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

/// The whole document of one group version.
fn build(gv: GroupVersion) -> Value {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let common = Common {
        status: add::<meta::Status>(&mut generator),
        delete_options: add::<meta::DeleteOptions>(&mut generator),
        patch: add::<meta::Patch>(&mut generator),
    };
    let list_meta = add::<meta::ListMeta>(&mut generator);
    let watch_event = add::<meta::WatchEvent<Value>>(&mut generator);
    let resource_list = add::<meta::APIResourceList>(&mut generator);

    // schema name → the kinds it is the schema of
    let mut kinds: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    // the top-level kinds, whose `metadata` Kubernetes does not require
    let mut objects: Vec<String> = Vec::new();
    let mut lists: Vec<(String, Value)> = Vec::new();
    let mut paths = Map::new();
    let mut group_versions = vec![gv];

    paths.insert(
        format!("/{}/", gv.path()),
        json!({"get": {
            "tags": [tag(gv)],
            "description": "get available resources",
            "operationId": format!("get{}{}APIResources", group_word(gv), capitalize(gv.version)),
            "responses": responses(OK, JSON, &schema_ref(&resource_list)),
        }}),
    );

    for resource in discovery::resources()
        .iter()
        .filter(|r| r.group_version() == gv)
    {
        let kind = resource.kind.name();
        let schema = kind_schema(gv, kind, &mut generator)
            .expect("invariant: every served kind has a schema (tested)");
        kinds
            .entry(schema.clone())
            .or_default()
            .push(gv.kind_json(kind));
        objects.push(schema.clone());
        let list = resource.allows(verb::LIST).then(|| {
            let list_kind = format!("{kind}List");
            let name = format!("{schema}List");
            let mut list = list_schema(kind, &schema, &list_meta);
            list["x-kubernetes-group-version-kind"] = json!([gv.kind_json(&list_kind)]);
            lists.push((name.clone(), list));
            name
        });
        let subresource_schemas: Vec<(&Subresource, Value, String)> = resource
            .subresources
            .iter()
            // Connect subresources (exec, attach: WebSocket upgrades) take their options from
            // the query and have no body to describe; kubectl reads no document for them.
            .filter(|sub| !CONNECT_SUBRESOURCES.contains(&sub.name))
            .map(|sub| {
                let sub_gv = sub.group_version(gv);
                let schema = kind_schema(sub_gv, sub.kind, &mut generator)
                    .expect("invariant: every served subresource kind has a schema (tested)");
                if sub_gv != gv {
                    if !group_versions.contains(&sub_gv) {
                        group_versions.push(sub_gv);
                    }
                    let gvk = sub_gv.kind_json(sub.kind);
                    let entry = kinds.entry(schema.clone()).or_default();
                    if !entry.contains(&gvk) {
                        entry.push(gvk);
                        objects.push(schema.clone());
                    }
                }
                (sub, sub_gv.kind_json(sub.kind), schema)
            })
            .collect();
        let target = Target {
            gv,
            kind,
            gvk: gv.kind_json(kind),
            schema,
            list,
            namespaced: resource.kind.is_namespaced(),
        };
        resource_paths(resource, &target, &subresource_schemas, &common, &mut paths);
    }

    // Status and watch events are core/v1 kinds whatever the document; delete options are a
    // kind of every group version an operation here belongs to.
    kinds.insert(
        common.status.clone(),
        vec![GroupVersion::CORE_V1.kind_json("Status")],
    );
    kinds.insert(
        watch_event,
        vec![GroupVersion::CORE_V1.kind_json("WatchEvent")],
    );
    kinds.insert(
        common.delete_options.clone(),
        group_versions
            .iter()
            .map(|gv| gv.kind_json("DeleteOptions"))
            .collect(),
    );

    let mut schemas = generator.take_definitions(true);
    schemas.extend(lists);
    for (name, gvks) in kinds {
        if let Some(Value::Object(schema)) = schemas.get_mut(&name) {
            schema.insert("x-kubernetes-group-version-kind".into(), gvks.into());
        }
    }
    // k8s-openapi marks `metadata` required on every top-level kind (its Rust field is not
    // optional); Kubernetes' schema does not, and explain would print it as required.
    for name in objects {
        if let Some(Value::Object(schema)) = schemas.get_mut(&name)
            && let Some(Value::Array(required)) = schema.get_mut("required")
        {
            required.retain(|field| field != "metadata");
            if required.is_empty() {
                schema.remove("required");
            }
        }
    }

    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": SCHEMA_RELEASE},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(path: &str) -> Value {
        serde_json::from_slice(document(path).unwrap_or_else(|| panic!("{path} is not served")))
            .expect("the document is JSON")
    }

    fn core() -> Value {
        doc("api/v1")
    }

    fn apps() -> Value {
        doc("apis/apps/v1")
    }

    /// Every `$ref` anywhere in `value`.
    fn refs<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
        match value {
            Value::Object(map) => {
                for (key, v) in map {
                    match (key.as_str(), v) {
                        ("$ref", Value::String(r)) => out.push(r),
                        _ => refs(v, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    /// The index names each served group version (`api/v1`, `apis/apps/v1`) with the SHA-256
    /// of exactly the bytes served for it, and nothing else.
    #[test]
    fn index_hash_is_the_documents() {
        let index = index();
        let paths = [
            "api/v1",
            "apis/apps/v1",
            "apis/rbac.authorization.k8s.io/v1",
            "apis/authorization.k8s.io/v1",
            "apis/certificates.k8s.io/v1",
            "apis/discovery.k8s.io/v1",
        ];
        for path in paths {
            let url = index["paths"][path]["serverRelativeURL"]
                .as_str()
                .unwrap_or_else(|| panic!("{path} in the index"));
            let bytes = document(path).expect("document");
            let expected: String = Sha256::digest(bytes)
                .iter()
                .map(|b| format!("{b:02X}"))
                .collect();
            assert_eq!(url, format!("/openapi/v3/{path}?hash={expected}"));
            assert_eq!(hash(path), Some(expected.as_str()));
        }
        assert_eq!(document("apis/autoscaling/v1"), None);
        assert_eq!(index["paths"].as_object().map(Map::len), Some(paths.len()));
    }

    /// Every reference resolves within the document's own components, and references use
    /// the OpenAPI 3 location.
    #[test]
    fn every_reference_resolves() {
        for doc in [core(), apps()] {
            let schemas = doc["components"]["schemas"].as_object().expect("schemas");
            let mut all = Vec::new();
            refs(&doc, &mut all);
            assert!(all.len() > 100);
            for r in all {
                let name = r
                    .strip_prefix("#/components/schemas/")
                    .unwrap_or_else(|| panic!("{r} is not a component reference"));
                assert!(
                    schemas.contains_key(name),
                    "{name} is referenced but absent"
                );
            }
        }
    }

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

    /// The apps/v1 document serves the workloads as Kubernetes' does: their paths with
    /// Kubernetes' operation ids, the `scale` subresource speaking autoscaling/v1 `Scale`, and
    /// schemas `kubectl explain deployment.spec.strategy` can walk.
    #[test]
    fn apps_document() {
        let doc = apps();
        let paths = doc["paths"].as_object().expect("paths");
        let ns = "/apis/apps/v1/namespaces/{namespace}";
        assert_eq!(
            paths[&format!("{ns}/deployments")]["get"]["operationId"],
            "listAppsV1NamespacedDeployment"
        );
        assert_eq!(
            paths["/apis/apps/v1/replicasets"]["get"]["operationId"],
            "listAppsV1ReplicaSetForAllNamespaces"
        );
        let scale = &paths[&format!("{ns}/deployments/{{name}}/scale")];
        assert_eq!(
            scale["patch"]["operationId"],
            "patchAppsV1NamespacedDeploymentScale"
        );
        assert_eq!(
            scale["get"]["x-kubernetes-group-version-kind"],
            json!({"group": "autoscaling", "kind": "Scale", "version": "v1"})
        );
        assert_eq!(
            scale["put"]["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/io.k8s.api.autoscaling.v1.Scale"
        );
        assert!(paths.contains_key(&format!("{ns}/replicasets/{{name}}/status")));
        assert!(!paths.keys().any(|p| p.starts_with("/api/v1")));

        let schemas = &doc["components"]["schemas"];
        for (name, group, kind) in [
            ("io.k8s.api.apps.v1.Deployment", "apps", "Deployment"),
            (
                "io.k8s.api.apps.v1.DeploymentList",
                "apps",
                "DeploymentList",
            ),
            ("io.k8s.api.apps.v1.ReplicaSet", "apps", "ReplicaSet"),
            (
                "io.k8s.api.apps.v1.ReplicaSetList",
                "apps",
                "ReplicaSetList",
            ),
            ("io.k8s.api.autoscaling.v1.Scale", "autoscaling", "Scale"),
            (
                "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
                "apps",
                "DeleteOptions",
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
        assert!(
            schemas["io.k8s.api.apps.v1.Deployment"]
                .get("required")
                .is_none()
        );
        let spec =
            &schemas["io.k8s.api.apps.v1.Deployment"]["properties"]["spec"]["allOf"][0]["$ref"];
        assert_eq!(
            spec,
            "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"
        );
        let strategy = &schemas["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["strategy"];
        assert!(strategy["description"].is_string());
        assert_eq!(
            strategy["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.api.apps.v1.DeploymentStrategy"
        );
        assert!(
            schemas["io.k8s.api.apps.v1.DeploymentStrategy"]["properties"]["rollingUpdate"]
                .is_object()
        );
        assert!(
            schemas["io.k8s.api.autoscaling.v1.ScaleSpec"]["properties"]["replicas"].is_object()
        );
    }
}
