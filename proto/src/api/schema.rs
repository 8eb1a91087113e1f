//! Kubernetes' schema as the judge of which fields an object may carry.
//!
//! Skiff's own types model the fields it acts on and keep every other field verbatim
//! ([`super::Unmodelled`]), so they cannot tell a field Kubernetes has (`dnsPolicy`) from a typo
//! (`comand`). Kubernetes' full schema can: an object is decoded as `k8s-openapi`'s type of its
//! kind (every field of that Kubernetes release, with its JSON type) and encoded again; what the
//! request had and the round trip lost is unknown to Kubernetes. The manifest reader and the
//! store (for both of its APIs) call this one check.
//!
//! What an unknown field costs is kube-apiserver's `fieldValidation`: `Strict` refuses the
//! write, `Warn` drops the field and says so, `Ignore` drops it silently. A value of the wrong
//! type (`containerPort: "80"`) is refused in every mode, as kube-apiserver's decoder does.

use std::fmt;

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::authorization::v1 as authz;
use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::api::rbac::v1 as rbac;
use std::marker::PhantomData;

use serde_json::Value;

use super::Kind;
use super::registry::{KubeType, Typed};

/// kube-apiserver's `fieldValidation` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    Ignore,
    /// kube-apiserver's default when a request names none.
    #[default]
    Warn,
    Strict,
}

impl FieldValidation {
    /// The query parameter's value, as kube-apiserver spells it.
    pub fn parse(value: &str) -> Option<FieldValidation> {
        match value {
            "Ignore" => Some(FieldValidation::Ignore),
            "Warn" => Some(FieldValidation::Warn),
            "Strict" => Some(FieldValidation::Strict),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// A field whose value does not have the JSON type Kubernetes gives it.
    #[error("{}{message}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
    Type { path: String, message: String },
    /// Fields Kubernetes' schema does not have, refused under `Strict`.
    #[error("strict decoding error: {}", UnknownList(paths))]
    Unknown { paths: Vec<String> },
}

struct UnknownList<'a>(&'a [String]);

impl fmt::Display for UnknownList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "unknown field \"{p}\"")?;
        }
        Ok(())
    }
}

/// Checks `object`, the JSON of an object of `kind`, against Kubernetes' schema and applies
/// `mode` to its unknown fields: refused, or removed from `object` (and returned as warnings
/// under `Warn`, in kube-apiserver's words).
pub fn check(
    kind: Kind,
    object: &mut Value,
    mode: FieldValidation,
) -> Result<Vec<String>, SchemaError> {
    let unknown = unknown_fields(kind, object)?;
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    if mode == FieldValidation::Strict {
        return Err(SchemaError::Unknown { paths: unknown });
    }
    let known = round_trip(kind, object)?;
    prune(object, &known);
    Ok(match mode {
        FieldValidation::Warn => unknown
            .into_iter()
            .map(|p| format!("unknown field \"{p}\""))
            .collect(),
        _ => Vec::new(),
    })
}

/// The paths (`spec.containers[0].comand`) of the fields of `object` that Kubernetes' schema
/// for `kind` does not have. A field whose value is `null` counts as absent, as in Kubernetes.
pub fn unknown_fields(kind: Kind, object: &Value) -> Result<Vec<String>, SchemaError> {
    let known = round_trip(kind, object)?;
    let mut out = Vec::new();
    collect_unknown(object, &known, &mut String::new(), &mut out);
    Ok(out)
}

/// Kubernetes' own type of `kind`: the one place a kind is mapped to it.
pub fn kube_type(kind: Kind) -> &'static dyn KubeType {
    macro_rules! typed {
        ($t:ty) => {
            &Typed::<$t>(PhantomData)
        };
    }
    match kind {
        Kind::Pod => typed!(k8s::Pod),
        Kind::Node => typed!(k8s::Node),
        Kind::Namespace => typed!(k8s::Namespace),
        Kind::ResourceQuota => typed!(k8s::ResourceQuota),
        Kind::LimitRange => typed!(k8s::LimitRange),
        Kind::Binding => typed!(k8s::Binding),
        Kind::Event => typed!(k8s::Event),
        Kind::Deployment => typed!(apps::Deployment),
        Kind::ReplicaSet => typed!(apps::ReplicaSet),
        Kind::Role => typed!(rbac::Role),
        Kind::ClusterRole => typed!(rbac::ClusterRole),
        Kind::RoleBinding => typed!(rbac::RoleBinding),
        Kind::ClusterRoleBinding => typed!(rbac::ClusterRoleBinding),
        Kind::SubjectAccessReview => typed!(authz::SubjectAccessReview),
        Kind::SelfSubjectAccessReview => typed!(authz::SelfSubjectAccessReview),
        Kind::Secret => typed!(k8s::Secret),
        Kind::CertificateSigningRequest => {
            typed!(k8s_openapi::api::certificates::v1::CertificateSigningRequest)
        }
        Kind::Service => typed!(k8s::Service),
        Kind::EndpointSlice => typed!(k8s_openapi::api::discovery::v1::EndpointSlice),
        Kind::Generic(g) => g.info().schema,
    }
}

/// `object` decoded as Kubernetes' type of `kind` and encoded again: only the fields Kubernetes
/// knows survive, and every field its Go type always writes is there (empty when unknown).
pub fn round_trip(kind: Kind, object: &Value) -> Result<Value, SchemaError> {
    kube_type(kind).round_trip(object)
}

/// Kubernetes' schema of `kind`, as a reference to its definition, and every definition.
pub fn openapi(kind: Kind) -> (Value, serde_json::Map<String, Value>) {
    let mut generator =
        k8s_openapi::schemars::generate::SchemaSettings::openapi3().into_generator();
    let name = kube_type(kind).schema(&mut generator);
    let definitions = generator.take_definitions(true);
    (
        serde_json::json!({ "$ref": format!("#/components/schemas/{name}") }),
        definitions,
    )
}

/// What in `object`, the JSON of an object of `kind` as served, Kubernetes' OpenAPI schema
/// for that kind refuses: a required field absent or `null`, a value of the wrong JSON type, an
/// integer out of its format's range, a `date-time` that is not RFC 3339. Each is named by its
/// path (`status.nodeInfo.bootID`). Strict clients generated from the schema (the official
/// Python client's models, for one) refuse an object with any of these; kube-apiserver never
/// serves one, because its Go types write every field they do not mark `omitempty`.
pub fn violations(kind: Kind, object: &Value) -> Vec<String> {
    let (root, definitions) = openapi(kind);
    let mut out = Vec::new();
    check_value(object, &root, &definitions, &mut String::new(), &mut out);
    out
}

/// The definition a schema stands for: a `$ref`, or the one `allOf` that a field with a
/// description of its own wraps its `$ref` in.
pub(crate) fn reference(schema: &Value) -> Option<&str> {
    let target = match schema.get("allOf").and_then(Value::as_array) {
        Some(all) if all.len() == 1 => all[0].get("$ref"),
        _ => schema.get("$ref"),
    }?;
    target.as_str()?.rsplit('/').next()
}

fn check_value(
    value: &Value,
    schema: &Value,
    definitions: &serde_json::Map<String, Value>,
    path: &mut String,
    out: &mut Vec<String>,
) {
    let mut schema = schema;
    while let Some(name) = reference(schema) {
        match definitions.get(name) {
            Some(s) => schema = s,
            None => return,
        }
    }
    let at = |path: &str| {
        if path.is_empty() {
            ".".to_owned()
        } else {
            path.to_owned()
        }
    };
    let int_or_string = schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    if let Some(ty) = schema.get("type").and_then(Value::as_str) {
        let ok = match ty {
            "string" => value.is_string() || (int_or_string && value.is_i64()),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            _ => true,
        };
        if !ok {
            out.push(format!("{}: expected {ty}, found {value}", at(path)));
            return;
        }
    }
    match (schema.get("format").and_then(Value::as_str), value) {
        (Some("int32"), Value::Number(n))
            if n.as_i64().and_then(|n| i32::try_from(n).ok()).is_none() =>
        {
            out.push(format!("{}: {n} is not an int32", at(path)));
        }
        (Some("date-time"), Value::String(s))
            if chrono::DateTime::parse_from_rfc3339(s).is_err() =>
        {
            out.push(format!("{}: {s:?} is not an RFC 3339 date-time", at(path)));
        }
        _ => {}
    }
    match value {
        Value::Object(fields) => {
            for required in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if fields.get(required).is_none_or(Value::is_null) {
                    let sep = if path.is_empty() { "" } else { "." };
                    out.push(format!("{path}{sep}{required}: required, absent"));
                }
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (name, field) in fields {
                let Some(field_schema) = properties.and_then(|p| p.get(name)).or(additional) else {
                    continue;
                };
                if field.is_null() {
                    continue;
                }
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(name);
                check_value(field, field_schema, definitions, path, out);
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    check_value(item, item_schema, definitions, path, out);
                    path.truncate(len);
                }
            }
        }
        _ => {}
    }
}

fn collect_unknown(input: &Value, known: &Value, path: &mut String, out: &mut Vec<String>) {
    match (input, known) {
        (Value::Object(fields), Value::Object(kept)) => {
            for (name, value) in fields {
                if value.is_null() {
                    continue;
                }
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(name);
                match kept.get(name) {
                    None => out.push(path.clone()),
                    Some(k) => collect_unknown(value, k, path, out),
                }
                path.truncate(len);
            }
        }
        (Value::Array(items), Value::Array(kept)) => {
            for (i, (value, k)) in items.iter().zip(kept).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                collect_unknown(value, k, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Removes from `input` every field that `known` (its round trip) lost.
fn prune(input: &mut Value, known: &Value) {
    match (input, known) {
        (Value::Object(fields), Value::Object(kept)) => {
            fields.retain(|name, value| value.is_null() || kept.contains_key(name));
            for (name, value) in fields.iter_mut() {
                if let Some(k) = kept.get(name) {
                    prune(value, k);
                }
            }
        }
        (Value::Array(items), Value::Array(kept)) => {
            for (value, k) in items.iter_mut().zip(kept) {
                prune(value, k);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "labels": {"app": "web"}, "finalizers": ["x/y"]},
            "spec": {
                "dnsPolicy": "ClusterFirst",
                "volumes": [{"name": "data", "emptyDir": {}}],
                "containers": [{
                    "name": "c",
                    "image": "nginx",
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "securityContext": {"runAsUser": 1000}
                }]
            }
        })
    }

    /// Every field Kubernetes has passes, however little of it Skiff models.
    #[test]
    fn kubernetes_fields_are_known() {
        assert_eq!(
            unknown_fields(Kind::Pod, &pod()).unwrap(),
            Vec::<String>::new()
        );
    }

    /// Unknown fields are named by their full path, in arrays too; nulls are absent.
    #[test]
    fn unknown_fields_by_path() {
        let mut p = pod();
        p["spec"]["containers"][0]["comand"] = json!(["sh"]);
        p["spec"]["bogus"] = json!({"a": 1});
        p["metadata"]["nmae"] = json!("x");
        p["spec"]["nodeSelectr"] = Value::Null;
        let mut u = unknown_fields(Kind::Pod, &p).unwrap();
        u.sort();
        assert_eq!(
            u,
            ["metadata.nmae", "spec.bogus", "spec.containers[0].comand"]
        );
    }

    /// Strict refuses; Warn removes and warns; Ignore removes silently. Known fields stay.
    #[test]
    fn modes() {
        let mut p = pod();
        p["spec"]["containers"][0]["comand"] = json!(["sh"]);
        let e = check(Kind::Pod, &mut p.clone(), FieldValidation::Strict).unwrap_err();
        assert_eq!(
            e.to_string(),
            "strict decoding error: unknown field \"spec.containers[0].comand\""
        );
        let mut warned = p.clone();
        let w = check(Kind::Pod, &mut warned, FieldValidation::Warn).unwrap();
        assert_eq!(w, ["unknown field \"spec.containers[0].comand\""]);
        assert_eq!(warned, pod());
        let mut ignored = p.clone();
        assert!(
            check(Kind::Pod, &mut ignored, FieldValidation::Ignore)
                .unwrap()
                .is_empty()
        );
        assert_eq!(ignored, pod());
    }

    /// A value of the wrong type is refused whatever the mode, naming the field.
    #[test]
    fn wrong_type_is_refused() {
        let mut p = pod();
        p["spec"]["dnsPolicy"] = json!(5);
        let e = check(Kind::Pod, &mut p, FieldValidation::Ignore).unwrap_err();
        assert!(
            matches!(&e, SchemaError::Type { path, .. } if path == "spec.dnsPolicy"),
            "{e}"
        );
    }
}
