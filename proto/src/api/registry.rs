//! Kinds served from a declaration.
//!
//! The kinds Skiff's components act on have types of their own ([`super::Pod`],
//! [`super::Node`], ...). Every other kind is declared once, as a [`KindInfo`]: its names, group
//! and scope; whether it has a status; where its pod template is; Kubernetes' own type of it
//! (which fields exist, their JSON types, and which ones kube-apiserver always writes); its
//! defaults, its validation and its table columns. Its objects are [`GenericObject`]s, metadata
//! typed and everything else kept as JSON, and they go through the same path as the typed kinds:
//! storage under `/registry/…`, every verb, watch, patches, tables, discovery and OpenAPI. A new
//! kind costs a declaration ([`super::kinds`]), not a new pipeline.
//!
//! ```text
//!   request JSON ─► schema check (unknown fields, types) ─► Kubernetes' type and back
//!                   (every field Go always writes is there) ─► GenericObject
//!                   ─► KindInfo::defaults ─► names + KindInfo::validate ─► store
//! ```

use std::fmt;
use std::marker::PhantomData;

use chrono::{DateTime, Utc};
use k8s_openapi::schemars::JsonSchema;
use k8s_openapi::schemars::generate::SchemaGenerator;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::apps::PodTemplateSpec;
use super::meta::ObjectMeta;
use super::schema::SchemaError;
use super::validation::{Errors, Path};

/// Kubernetes' own type of a kind (`k8s-openapi`'s struct): the judge of which fields exist and
/// of which ones are always written.
pub trait KubeType: Sync {
    /// The object decoded as the type and encoded again: unknown fields gone, every field the
    /// Go type writes without `omitempty` present. A value of the wrong JSON type is an error
    /// naming its path.
    fn round_trip(&self, object: &Value) -> Result<Value, SchemaError>;

    /// Adds the type's schema (and every schema it references) to `generator`; its name
    /// (`io.k8s.api.core.v1.ConfigMap`).
    fn schema(&self, generator: &mut SchemaGenerator) -> String;
}

/// [`KubeType`] of `T`.
#[derive(Debug)]
pub struct Typed<T>(pub PhantomData<fn() -> T>);

impl<T> KubeType for Typed<T>
where
    T: DeserializeOwned + Serialize + JsonSchema,
{
    fn round_trip(&self, object: &Value) -> Result<Value, SchemaError> {
        let decoded: T = serde_path_to_error::deserialize(object).map_err(|e| {
            let path = e.path().to_string();
            SchemaError::Type {
                path: if path == "." { String::new() } else { path },
                message: e.into_inner().to_string(),
            }
        })?;
        Ok(serde_json::to_value(decoded)
            .expect("invariant: Kubernetes' types always encode as JSON"))
    }

    fn schema(&self, generator: &mut SchemaGenerator) -> String {
        generator.subschema_for::<T>();
        T::schema_name().into_owned()
    }
}

/// A column of the kind's table, as kube-apiserver's printer for it has them.
#[derive(Debug)]
pub struct Column {
    pub name: &'static str,
    /// The OpenAPI type of the cells: `string`, `integer`, `date`.
    pub type_: &'static str,
    /// `name` for the column of the object's name.
    pub format: &'static str,
    /// 0: always shown; 1: with `-o wide`.
    pub priority: u8,
    pub description: &'static str,
    /// The cell of an object, given as served, at `now`.
    pub cell: fn(&Value, DateTime<Utc>) -> Value,
}

/// One kind, declared: everything the API needs of it.
pub struct KindInfo {
    /// `kind:` (`ConfigMap`).
    pub kind: &'static str,
    /// The resource (`configmaps`).
    pub plural: &'static str,
    /// `apiVersion:` (`v1`, `batch/v1`).
    pub api_version: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    /// Groupings such as `all`, what `kubectl get all` lists.
    pub categories: &'static [&'static str],
    /// Whether the kind has a `status` subresource: a write of the object keeps the stored
    /// status, a write of `/status` keeps everything else.
    pub status: bool,
    /// Whether the kind has a `scale` subresource (autoscaling/v1 `Scale`) over
    /// `spec.replicas`, `status.replicas` and `spec.selector`.
    pub scale: bool,
    /// JSON pointer to the pod template of a kind that makes pods (`/spec/template`).
    pub template: Option<&'static str>,
    pub schema: &'static dyn KubeType,
    /// Defaults, applied before validation on every write.
    pub(crate) defaults: fn(&mut GenericObject),
    /// The kind's rules, on a defaulted object; on an update, with the stored object.
    pub(crate) validate: fn(&mut Errors, &GenericObject, Option<&GenericObject>),
    /// The table columns after `Name` (kube-apiserver's printer; `Age` where it has one).
    pub columns: &'static [Column],
}

impl fmt::Debug for KindInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.kind, self.api_version)
    }
}

impl KindInfo {
    /// The group (`batch`; empty for the core group).
    pub fn group(&self) -> &'static str {
        self.api_version.split_once('/').map_or("", |(g, _)| g)
    }
}

/// A declared kind: an index into the declarations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GenericKind(u16);

impl GenericKind {
    /// Every kind served from a declaration: the declared ones, then the custom kinds served
    /// now ([`super::custom`]).
    pub fn all() -> impl Iterator<Item = GenericKind> {
        GenericKind::declared().chain(super::custom::served())
    }

    /// The kinds declared in [`super::kinds`].
    pub fn declared() -> impl Iterator<Item = GenericKind> {
        (0..super::kinds::DECLARED.len()).map(GenericKind::from_index)
    }

    pub(crate) fn from_index(i: usize) -> GenericKind {
        GenericKind(
            u16::try_from(i).expect("invariant: fewer than 65536 declared and custom kinds"),
        )
    }

    /// The kind's number among the custom kinds, if it is one.
    pub fn custom_index(self) -> Option<usize> {
        usize::from(self.0).checked_sub(super::kinds::DECLARED.len())
    }

    pub fn info(self) -> &'static KindInfo {
        match self.custom_index() {
            None => &super::kinds::DECLARED[usize::from(self.0)],
            Some(i) => super::custom::info(i),
        }
    }
}

/// An object of a declared kind: its metadata, and the rest (`spec`, `status`, `data`, ...) as
/// JSON, with every field Kubernetes always writes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GenericObject {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(flatten)]
    pub body: Map<String, Value>,
}

impl GenericObject {
    /// A typed view of the object (the Job controller's `Job`): its metadata and body read
    /// as `T`.
    pub fn typed<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        let mut value = Value::Object(self.body.clone());
        value["metadata"] = serde_json::to_value(&self.metadata)?;
        serde_json::from_value(value)
    }

    /// The object with `status` in place of its own (the rest as it is), as a controller
    /// writes it.
    pub fn with_status<S: Serialize>(&self, status: &S) -> GenericObject {
        let mut next = self.clone();
        let status = serde_json::to_value(status).unwrap_or(Value::Null);
        next.body.insert("status".to_owned(), status);
        next
    }

    /// The value at a JSON pointer into the body (`/spec/replicas`).
    pub fn at(&self, pointer: &str) -> Option<&Value> {
        let rest = pointer.strip_prefix('/')?;
        let (first, tail) = rest.split_once('/').unwrap_or((rest, ""));
        let value = self.body.get(first)?;
        if tail.is_empty() {
            Some(value)
        } else {
            value.pointer(&format!("/{tail}"))
        }
    }

    /// The object at a JSON pointer into the body, made (with every object above it) when
    /// absent or not an object.
    pub fn object_at(&mut self, pointer: &str) -> &mut Map<String, Value> {
        let mut here = &mut self.body;
        for step in pointer.split('/').filter(|s| !s.is_empty()) {
            let slot = here
                .entry(step.to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            here = slot
                .as_object_mut()
                .expect("invariant: just made an object");
        }
        here
    }

    /// The string at a JSON pointer into the body, or `""`.
    pub fn text(&self, pointer: &str) -> &str {
        self.at(pointer).and_then(Value::as_str).unwrap_or_default()
    }

    /// The integer at a JSON pointer into the body.
    pub fn int(&self, pointer: &str) -> Option<i64> {
        self.at(pointer).and_then(Value::as_i64)
    }
}

/// Sets `field` of `map` to `value` unless it holds a value already (`null` counts as none).
pub(crate) fn default_field(map: &mut Map<String, Value>, field: &str, value: Value) {
    match map.get(field) {
        Some(v) if !v.is_null() => {}
        _ => {
            map.insert(field.to_owned(), value);
        }
    }
}

/// The kind's defaults (a custom kind's from its schema), then those of its pod template (a
/// pod's, as every workload's).
pub(crate) fn apply_defaults(kind: GenericKind, object: &mut GenericObject) {
    let info = kind.info();
    (info.defaults)(object);
    super::custom::apply_defaults(kind, object);
    if let Some(pointer) = info.template
        && let Some(value) = object.at(pointer)
        && let Ok(mut template) = serde_json::from_value::<PodTemplateSpec>(value.clone())
    {
        super::defaults::template_defaults(&mut template);
        let (parent, field) = pointer.rsplit_once('/').expect("invariant: a JSON pointer");
        object.object_at(parent).insert(
            field.to_owned(),
            serde_json::to_value(template).expect("invariant: a template always encodes"),
        );
    }
}

/// The kind's rules (on a create, and on an update with [`validate_update`]'s); a custom
/// kind's are its schema's, on an update with the `stored` object.
pub(crate) fn validate(
    errs: &mut Errors,
    kind: GenericKind,
    object: &GenericObject,
    stored: Option<&GenericObject>,
) {
    (kind.info().validate)(errs, object, None);
    super::custom::validate(errs, kind, object, stored);
}

/// The pod template of `object` at `pointer`, typed; a template that does not decode is an
/// error at its path.
pub(crate) fn template(
    errs: &mut Errors,
    object: &GenericObject,
    pointer: &str,
) -> Option<PodTemplateSpec> {
    let value = object.at(pointer)?;
    match serde_json::from_value(value.clone()) {
        Ok(t) => Some(t),
        Err(e) => {
            errs.add(&path_of(pointer), format!("invalid value: {e}"));
            None
        }
    }
}

/// The rules of an update of a declared kind: its own, with the stored object.
pub(crate) fn validate_update(
    errs: &mut Errors,
    kind: GenericKind,
    object: &GenericObject,
    stored: &GenericObject,
) {
    (kind.info().validate)(errs, object, Some(stored));
}

/// A path for field errors: `spec.template`, from a JSON pointer.
pub(crate) fn path_of(pointer: &str) -> Path {
    let mut path = Path::root("");
    for step in pointer.split('/').filter(|s| !s.is_empty()) {
        path = path.field(step);
    }
    path
}
