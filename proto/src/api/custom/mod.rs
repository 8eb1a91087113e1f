//! Kinds defined while the cluster runs, by CustomResourceDefinitions.
//!
//! A CRD (`apiextensions.k8s.io/v1`, itself a declared kind) defines a kind in one or more
//! versions. Each served version becomes a [`GenericKind`] like the declared ones, so
//! everything they go through serves it as well: storage, every verb, watch, patches, tables,
//! discovery and OpenAPI. What cannot change while a kind exists (its names, scope and
//! subresources) is kept once per distinct shape, so [`super::Kind`] stays a small `Copy`
//! value; what can (the schema, the printer columns, whether it is served) is [`Live`], swapped
//! whole when the CRD changes.
//!
//! ```text
//!   CRD written ─► API server's CRD watch ─► define(crd) ─► GenericKind per served version
//!                                                           └► Live: schema, columns, scale
//!   custom object ─► prune (structural schema) ─► defaults ─► names + schema validation ─► store
//!                    /registry/<group>/<plural>/…, one key space for every version
//! ```
//!
//! Versions convert as `None` conversion does: only `apiVersion` differs. Objects are stored
//! in the storage version and read in the version asked for.
//!
//! The registry is process-wide: a process serves one cluster.

pub(crate) mod crd;
pub(crate) mod rules;
pub mod structural;

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, RwLock};

use k8s_openapi::schemars::generate::SchemaGenerator;
use serde_json::{Map, Value, json};

use super::registry::{GenericKind, GenericObject, KindInfo, KubeType};
use super::schema::SchemaError;
use super::validation::{Errors, Path};
use crate::api::meta::strings_of as strings;

/// The group of CustomResourceDefinitions.
pub const GROUP: &str = "apiextensions.k8s.io";
/// The finalizer that keeps a deleted CRD until its objects are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// An additional printer column of a custom kind's table.
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    pub format: String,
    pub description: String,
    /// 0: always shown; more: with `-o wide`.
    pub priority: i64,
    /// kubectl's JSONPath into the object (`.spec.replicas`).
    pub json_path: String,
}

/// Where a custom kind's `scale` subresource reads and writes, as JSON pointers.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

/// What may change of a served custom version while the cluster runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Live {
    /// The defining CRD's name (`widgets.example.com`).
    pub crd: String,
    /// `openAPIV3Schema`.
    pub schema: Value,
    pub columns: Vec<PrinterColumn>,
    /// The `apiVersion` objects are stored in (`example.com/v1`).
    pub storage_version: String,
    pub scale: Option<ScalePaths>,
}

/// What cannot change while a custom kind is served: one [`GenericKind`] each.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Shape {
    api_version: String,
    kind: String,
    plural: String,
    namespaced: bool,
    short_names: Vec<String>,
    categories: Vec<String>,
    status: bool,
    scale: bool,
}

struct Entry {
    info: &'static KindInfo,
    live: Option<Arc<Live>>,
}

#[derive(Default)]
struct Registry {
    entries: Vec<Entry>,
    shapes: HashMap<Shape, usize>,
}

static REGISTRY: LazyLock<RwLock<Registry>> = LazyLock::new(RwLock::default);

/// Counts the changes to what is served, so documents derived from it know when to rebuild.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// A number that changes whenever a custom kind is served, changed or retired.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

fn read() -> std::sync::RwLockReadGuard<'static, Registry> {
    REGISTRY
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write() -> std::sync::RwLockWriteGuard<'static, Registry> {
    REGISTRY
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

fn leak_all(v: &[String]) -> &'static [&'static str] {
    Box::leak(
        v.iter()
            .map(|s| leak(s))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    )
}

/// The declaration of a custom kind's shape: its names are interned, its schema is looked up
/// live, and its rules are the schema's (see [`apply_defaults`] and [`validate`]).
fn declare(shape: &Shape, kind: GenericKind) -> &'static KindInfo {
    Box::leak(Box::new(KindInfo {
        kind: leak(&shape.kind),
        plural: leak(&shape.plural),
        api_version: leak(&shape.api_version),
        namespaced: shape.namespaced,
        short_names: leak_all(&shape.short_names),
        categories: leak_all(&shape.categories),
        status: shape.status,
        scale: shape.scale,
        template: None,
        schema: Box::leak(Box::new(Structural(kind))),
        defaults: |_| {},
        validate: |_, _, _| {},
        columns: &[],
    }))
}

fn custom_kind(index: usize) -> GenericKind {
    GenericKind::from_index(super::kinds::DECLARED.len() + index)
}

/// The declaration of custom kind number `index`.
pub(crate) fn info(index: usize) -> &'static KindInfo {
    read().entries[index].info
}

/// The custom kinds served now, in the order they were first defined.
pub fn served() -> Vec<GenericKind> {
    read()
        .entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.live.is_some())
        .map(|(i, _)| custom_kind(i))
        .collect()
}

/// What is current of a custom kind; `None` when it is not served (or not custom).
pub fn live(kind: GenericKind) -> Option<Arc<Live>> {
    let index = kind.custom_index()?;
    read().entries.get(index)?.live.clone()
}

/// Serves the versions `crd` defines (a CRD as stored, valid), and stops serving the ones it
/// no longer does. Returns the kinds now served for it.
pub fn define(crd: &GenericObject) -> Vec<GenericKind> {
    let name = crd.metadata.name.clone();
    let defined = versions(crd);
    let mut registry = write();
    let mut kinds = Vec::new();
    for (shape, live) in defined {
        let index = match registry.shapes.get(&shape) {
            Some(&i) => i,
            None => {
                let i = registry.entries.len();
                let info = declare(&shape, custom_kind(i));
                registry.entries.push(Entry { info, live: None });
                registry.shapes.insert(shape, i);
                i
            }
        };
        if registry.entries[index].live.as_deref() != Some(&live) {
            registry.entries[index].live = Some(Arc::new(live));
            GENERATION.fetch_add(1, Ordering::AcqRel);
        }
        kinds.push(custom_kind(index));
    }
    for (i, e) in registry.entries.iter_mut().enumerate() {
        if e.live.as_ref().is_some_and(|l| l.crd == name) && !kinds.contains(&custom_kind(i)) {
            e.live = None;
            GENERATION.fetch_add(1, Ordering::AcqRel);
        }
    }
    kinds
}

/// The kind of CustomResourceDefinitions (a declared kind).
pub fn crd_kind() -> super::Kind {
    super::Kind::from_name("CustomResourceDefinition")
        .expect("invariant: CustomResourceDefinition is declared")
}

/// Serves the kinds of `crds` (every CRD stored, as a process sees them) and retires those of
/// CRDs no longer among them. Returns the kinds served for each CRD, in its order.
pub fn sync<'a>(crds: impl IntoIterator<Item = &'a GenericObject>) -> Vec<Vec<GenericKind>> {
    let mut names = std::collections::HashSet::new();
    let mut kinds = Vec::new();
    for crd in crds {
        names.insert(crd.metadata.name.clone());
        kinds.push(define(crd));
    }
    let gone: std::collections::HashSet<String> = served()
        .into_iter()
        .filter_map(live)
        .map(|live| live.crd.clone())
        .filter(|crd| !names.contains(crd))
        .collect();
    for crd in gone {
        retire(&crd);
    }
    kinds
}

/// Stops serving every kind of the CRD called `name`.
pub fn retire(name: &str) {
    for e in &mut write().entries {
        if e.live.as_ref().is_some_and(|l| l.crd == name) {
            e.live = None;
            GENERATION.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// kubectl's JSONPath of a field (`.spec.replicas`) as a JSON pointer (`/spec/replicas`).
pub fn pointer_of(json_path: &str) -> String {
    json_path.replace('.', "/")
}

/// The served versions of a CRD, each with its shape and what is live of it.
fn versions(crd: &GenericObject) -> Vec<(Shape, Live)> {
    let group = crd.text("/spec/group");
    let names = crd.at("/spec/names").cloned().unwrap_or_default();
    let name = |field: &str| names.get(field).and_then(Value::as_str).unwrap_or_default();
    let namespaced = crd.text("/spec/scope") != "Cluster";
    let all = crd
        .at("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let storage = all
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .and_then(|v| v.get("name").and_then(Value::as_str))
        .unwrap_or_default();
    let storage_version = format!("{group}/{storage}");
    all.iter()
        .filter(|v| v.get("served").and_then(Value::as_bool) == Some(true))
        .map(|v| {
            let version = v.get("name").and_then(Value::as_str).unwrap_or_default();
            let subresources = v.get("subresources");
            let scale = subresources.and_then(|s| s.get("scale")).map(|s| {
                let path = |f: &str| s.get(f).and_then(Value::as_str).map(pointer_of);
                ScalePaths {
                    spec_replicas: path("specReplicasPath").unwrap_or_default(),
                    status_replicas: path("statusReplicasPath").unwrap_or_default(),
                    label_selector: path("labelSelectorPath"),
                }
            });
            let columns = v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .map(|cols| {
                    cols.iter()
                        .map(|c| {
                            let text = |f: &str| {
                                c.get(f)
                                    .and_then(Value::as_str)
                                    .unwrap_or_default()
                                    .to_owned()
                            };
                            PrinterColumn {
                                name: text("name"),
                                type_: text("type"),
                                format: text("format"),
                                description: text("description"),
                                priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                                json_path: text("jsonPath"),
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            let shape = Shape {
                api_version: format!("{group}/{version}"),
                kind: name("kind").to_owned(),
                plural: name("plural").to_owned(),
                namespaced,
                short_names: strings(names.get("shortNames")),
                categories: strings(names.get("categories")),
                status: subresources.and_then(|s| s.get("status")).is_some(),
                scale: scale.is_some(),
            };
            let live = Live {
                crd: crd.metadata.name.clone(),
                schema: v
                    .pointer("/schema/openAPIV3Schema")
                    .cloned()
                    .unwrap_or_else(
                        || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                    ),
                columns,
                storage_version: storage_version.clone(),
                scale,
            };
            (shape, live)
        })
        .collect()
}

/// A custom kind's schema as a [`KubeType`]: the round trip prunes what the schema does not
/// declare; the OpenAPI schema is the CRD's, with the type meta and metadata added.
struct Structural(GenericKind);

impl KubeType for Structural {
    fn round_trip(&self, object: &Value) -> Result<Value, SchemaError> {
        Ok(match live(self.0) {
            Some(live) => structural::prune(object, &live.schema),
            None => object.clone(),
        })
    }

    fn schema(&self, generator: &mut SchemaGenerator) -> String {
        let info = self.0.info();
        let (group, version) = info
            .api_version
            .split_once('/')
            .unwrap_or(("", info.api_version));
        let mut reversed: Vec<&str> = group.split('.').collect();
        reversed.reverse();
        let name = format!("{}.{version}.{}", reversed.join("."), info.kind);
        let mut schema = live(self.0).map(|l| l.schema.clone()).unwrap_or_else(
            || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
        if let Some(map) = schema.as_object_mut() {
            let properties = map
                .entry("properties")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(properties) = properties.as_object_mut() {
                properties.insert(
                    "apiVersion".into(),
                    json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}),
                );
                properties.insert(
                    "kind".into(),
                    json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}),
                );
                let meta = super::registry::Typed::<
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
                >(PhantomData)
                .schema(generator);
                properties.insert(
                    "metadata".into(),
                    json!({"$ref": format!("#/$defs/{meta}")}),
                );
            }
            map.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": group, "version": version, "kind": info.kind}]),
            );
        }
        generator.definitions_mut().insert(name.clone(), schema);
        name
    }
}

/// The schema's defaults, applied to a custom object.
pub(crate) fn apply_defaults(kind: GenericKind, object: &mut GenericObject) {
    if let Some(live) = live(kind) {
        let mut body = Value::Object(std::mem::take(&mut object.body));
        structural::apply_defaults(&mut body, &live.schema);
        if let Value::Object(map) = body {
            object.body = map;
        }
    }
}

/// A custom object against its kind's schema, then, when that holds, its validation rules;
/// on an update, with the `stored` object (transition rules), and ratcheted as Kubernetes
/// ratchets them: a body left as it was is not checked again (a finalizer's or an owner's
/// removal goes through whatever the CRD says now), and a rule whose node is unchanged is
/// not run.
pub(crate) fn validate(
    errs: &mut Errors,
    kind: GenericKind,
    object: &GenericObject,
    stored: Option<&GenericObject>,
) {
    let Some(live) = live(kind) else {
        return;
    };
    if stored.is_some_and(|s| s.body == object.body) {
        return;
    }
    let body = Value::Object(object.body.clone());
    let mut found = Errors::default();
    structural::validate(&mut found, &Path::root(""), &body, &live.schema, true);
    if found.is_empty() {
        let root = rule_root(kind, object);
        let old = stored.map(|s| rule_root(kind, s));
        rules::validate(
            &mut found,
            &Path::root(""),
            &root,
            old.as_ref(),
            &live.schema,
        );
    }
    errs.extend(found);
}

/// What a custom object's rules see at its root.
fn rule_root(kind: GenericKind, object: &GenericObject) -> Value {
    let info = kind.info();
    rules::root_value(
        info.api_version,
        info.kind,
        &object.metadata.name,
        &object.metadata.generate_name,
        &object.body,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Kind, Object};

    pub(crate) fn widget_crd(name_suffix: &str) -> GenericObject {
        serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("widgets{name_suffix}.example.com")},
            "spec": {
                "group": format!("example.com"),
                "scope": "Namespaced",
                "names": {"plural": format!("widgets{name_suffix}"), "singular": "widget",
                          "kind": format!("Widget{name_suffix}"), "shortNames": ["wd"]},
                "versions": [
                    {"name": "v1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                         "spec": {"type": "object", "properties": {"size": {"type": "integer", "default": 1}}}}}},
                     "subresources": {"status": {}},
                     "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]},
                    {"name": "v2", "served": true, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                    {"name": "v0", "served": false, "storage": false}
                ]
            }
        }))
        .expect("a CRD")
    }

    /// A CRD's served versions become kinds; a change keeps their identity, and a version no
    /// longer served (or a CRD retired) stops being served.
    #[test]
    fn define_change_and_retire() {
        let mut crd = widget_crd("reg");
        let kinds = define(&crd);
        assert_eq!(kinds.len(), 2);
        let v1 = kinds[0];
        assert!(v1.custom_index().is_some());
        assert_eq!(v1.info().api_version, "example.com/v1");
        assert_eq!(v1.info().kind, "Widgetreg");
        assert_eq!(v1.info().short_names, ["wd"]);
        assert!(v1.info().status);
        let live_v1 = live(v1).expect("served");
        assert_eq!(live_v1.storage_version, "example.com/v1");
        assert_eq!(live_v1.columns[0].json_path, ".spec.size");
        assert!(served().contains(&v1));

        // a new column: the same kind, new live data
        crd.body["spec"]["versions"][0]["additionalPrinterColumns"] = json!([]);
        assert_eq!(define(&crd)[0], v1);
        assert!(live(v1).expect("served").columns.is_empty());

        // v2 no longer served
        crd.body["spec"]["versions"][1]["served"] = json!(false);
        assert_eq!(define(&crd), [v1]);
        assert!(live(kinds[1]).is_none());

        retire(&crd.metadata.name);
        assert!(live(v1).is_none());
        assert!(!served().contains(&v1));
        // defined again: the same kind
        assert_eq!(define(&crd), [v1]);
    }

    /// The cluster API names each version of a custom kind apart, and apart from a
    /// built-in kind of the same name; owner references find a kind by group when their
    /// version is not served.
    #[test]
    fn wire_names_tell_versions_and_groups_apart() {
        let mut crd = widget_crd("wire");
        crd.body["spec"]["names"]["kind"] = json!("Pod");
        let kinds = define(&crd);
        let (v1, v2) = (Kind::Generic(kinds[0]), Kind::Generic(kinds[1]));
        assert_eq!(v1.wire_name(), "Pod.v1.example.com");
        assert_eq!(Kind::from_wire(&v1.wire_name()), Some(v1));
        assert_eq!(Kind::from_wire(&v2.wire_name()), Some(v2));
        assert_eq!(Kind::Pod.wire_name(), "Pod");
        assert_eq!(Kind::from_wire("Pod"), Some(Kind::Pod));
        assert_eq!(Kind::from_wire("Pod.v9.example.com"), None);
        assert_eq!(Kind::from_type("v1", "Pod"), Some(Kind::Pod));
        assert_eq!(Kind::from_type("example.com/v2", "Pod"), Some(v2));
        assert_eq!(Kind::from_type("example.com/v0", "Pod"), Some(v1));
        assert_eq!(Kind::from_type("other.io/v1", "Pod"), None);
        retire(&crd.metadata.name);
    }

    /// A CRD whose validation rule does not compile is refused, naming the rule; its
    /// objects are held to the rules it gives, on creates and (transition rules) updates.
    #[test]
    fn crds_carry_cel_rules_their_objects_must_hold() {
        let Some(Kind::Generic(crd_kind)) = Kind::from_name("CustomResourceDefinition") else {
            panic!("CustomResourceDefinition is declared");
        };
        let mut crd = widget_crd("cel");
        let rules = json!([{"rule": "self.size <= 3", "message": "too big"},
                           {"rule": "self.size >= oldSelf.size", "message": "may not shrink"}]);
        crd.body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] =
            json!([{"rule": "self.size >"}]);
        let refused = crate::api::validation::validate(&Object::Generic(crd_kind, crd.clone()))
            .expect_err("a rule that does not compile");
        assert!(
            refused.to_string().contains(
                "spec.versions[0].schema.openAPIV3Schema.properties.spec.x-kubernetes-validations[0].rule: \
                 Invalid value: \"self.size >\": compilation failed"
            ),
            "{refused}"
        );
        crd.body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] =
            rules;
        let kind = define(&crd)[0];
        let widget = |size: i64| {
            let o: GenericObject = serde_json::from_value(json!({
                "apiVersion": "example.com/v1", "kind": "Widgetcel",
                "metadata": {"name": "w", "namespace": "default"}, "spec": {"size": size}}))
            .expect("widget");
            Object::Generic(kind, o)
        };
        crate::api::validation::validate(&widget(2)).expect("a widget that holds");
        let big = crate::api::validation::validate(&widget(4)).expect_err("too big");
        assert_eq!(big.to_string(), "spec: Invalid value: \"object\": too big");
        let update = |next: i64, stored: i64| {
            crate::api::validation::validate_write(&widget(next), Some(&widget(stored)))
        };
        let shrunk = update(1, 2).expect_err("shrunk");
        assert!(shrunk.to_string().contains("may not shrink"), "{shrunk}");
        assert!(update(3, 2).is_ok());
        // Ratcheting: a widget stored too big (before the rule) may be written unchanged, as
        // a finalizer's removal writes it, but not changed to another size too big.
        assert!(update(4, 4).is_ok());
        assert!(update(5, 4).is_err());
        retire(&crd.metadata.name);
    }

    /// A custom object is pruned, defaulted and validated by its schema.
    #[test]
    fn objects_follow_the_schema() {
        let kind = define(&widget_crd("obj"))[0];
        let raw = json!({"apiVersion": "example.com/v1", "kind": "Widgetobj",
                         "metadata": {"name": "w"}, "spec": {"typo": 1}});
        let pruned = kind.info().schema.round_trip(&raw).expect("prunes");
        assert_eq!(pruned["spec"], json!({}));
        let mut object: GenericObject = serde_json::from_value(pruned).expect("object");
        apply_defaults(kind, &mut object);
        assert_eq!(object.body["spec"], json!({"size": 1}));
        object.body["spec"]["size"] = json!("big");
        let mut errs = Errors::default();
        validate(&mut errs, kind, &object, None);
        assert_eq!(
            errs.into_vec()[0].to_string(),
            "spec.size: invalid value \"big\": must be of type integer, not string"
        );
    }
}
