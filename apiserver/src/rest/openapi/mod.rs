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
//!
//! The document of a group version follows from discovery alone, so the module splits by what
//! each part is rather than by group: this module builds the documents, `operations` the paths
//! and operations of one resource, `parameters` the query and path parameters they take, and
//! `schemas` the schema of each served kind (the one table of per-kind facts here).

mod operations;
mod parameters;
mod schemas;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::discovery::{self, GroupVersion, Subresource, verb};
use operations::{
    Common, JSON, OK, Target, capitalize, group_word, resource_paths, responses, tag,
};
use schemas::{add, kind_schema, list_schema, schema_ref};

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

fn document_of(gv: GroupVersion) -> Document {
    let bytes =
        serde_json::to_vec(&build(gv)).expect("invariant: a serde_json::Value always serializes");
    let hash = Sha256::digest(&bytes)
        .iter()
        .fold(String::with_capacity(64), |mut hex, byte| {
            let _ = write!(hex, "{byte:02X}");
            hex
        });
    Document {
        path: gv.path(),
        bytes,
        hash,
    }
}

/// The documents of the built-in group versions, built once per process.
fn built_in() -> &'static [Document] {
    static DOCUMENTS: OnceLock<Vec<Document>> = OnceLock::new();
    DOCUMENTS.get_or_init(|| {
        discovery::group_versions()
            .into_iter()
            .filter(|gv| !discovery::is_custom(*gv))
            .map(document_of)
            .collect()
    })
}

/// The documents of the group versions of custom kinds served now, built again when what is
/// served changes.
fn custom() -> Arc<Vec<Document>> {
    static DOCUMENTS: Mutex<Option<(u64, Arc<Vec<Document>>)>> = Mutex::new(None);
    let generation = skiff_proto::api::custom::generation();
    let mut cached = DOCUMENTS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((built, documents)) = cached.as_ref()
        && *built == generation
    {
        return documents.clone();
    }
    let documents: Arc<Vec<Document>> = Arc::new(
        discovery::group_versions()
            .into_iter()
            .filter(|gv| discovery::is_custom(*gv))
            .map(document_of)
            .collect(),
    );
    *cached = Some((generation, documents.clone()));
    documents
}

/// `GET /openapi/v3`: each group version's document, by path, with its hash in the URL.
pub fn index() -> Value {
    let custom = custom();
    let paths: Map<String, Value> = built_in()
        .iter()
        .chain(custom.iter())
        .map(|d| {
            let url = format!("/openapi/v3/{}?hash={}", d.path, d.hash);
            (d.path.clone(), json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

/// `GET /openapi/v3/<path>` (`api/v1`): the document's JSON.
pub fn document(group_version_path: &str) -> Option<Cow<'static, [u8]>> {
    if let Some(d) = built_in().iter().find(|d| d.path == group_version_path) {
        return Some(Cow::Borrowed(d.bytes.as_slice()));
    }
    custom()
        .iter()
        .find(|d| d.path == group_version_path)
        .map(|d| Cow::Owned(d.bytes.clone()))
}

/// The hash the index gives for a document: a request whose `?hash=` equals it may be answered
/// as immutable, since a different document would have a different hash.
pub fn hash(group_version_path: &str) -> Option<String> {
    built_in()
        .iter()
        .chain(custom().iter())
        .find(|d| d.path == group_version_path)
        .map(|d| d.hash.clone())
}

/// Subresources that upgrade the connection instead of carrying an object.
const CONNECT_SUBRESOURCES: [&str; 3] = ["attach", "exec", "portforward"];

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

    for resource in discovery::resources().filter(|r| r.group_version() == gv) {
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
            // Connect subresources (exec, attach, portforward: upgrades) take their options from
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

    pub(super) fn doc(path: &str) -> Value {
        serde_json::from_slice(&document(path).unwrap_or_else(|| panic!("{path} is not served")))
            .expect("the document is JSON")
    }

    pub(super) fn core() -> Value {
        doc("api/v1")
    }

    pub(super) fn apps() -> Value {
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
            "apis/coordination.k8s.io/v1",
            "apis/batch/v1",
            "apis/policy/v1",
            "apis/scheduling.k8s.io/v1",
            "apis/storage.k8s.io/v1",
            "apis/networking.k8s.io/v1",
            "apis/autoscaling/v2",
            "apis/apiextensions.k8s.io/v1",
            "apis/apiregistration.k8s.io/v1",
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
            assert_eq!(hash(path), Some(expected));
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
