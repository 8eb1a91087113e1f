//! The encoders every protobuf kind uses: an object's metadata, label selectors,
//! int-or-string values, and the `put`s that leave out what Go writes for unset fields.

use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value, json};

/// A JSON object holding `metadata` as the client set it.
pub(super) fn object(m: Option<meta::ObjectMeta>) -> Map<String, Value> {
    let m = m.unwrap_or_default();
    let mut meta = Map::new();
    let mut put = |k: &str, v: Option<String>| {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            meta.insert(k.into(), json!(v));
        }
    };
    put("name", m.name);
    put("generateName", m.generate_name);
    put("namespace", m.namespace);
    put("uid", m.uid);
    // An update's precondition (a create ignores it).
    put("resourceVersion", m.resource_version);
    if !m.labels.is_empty() {
        meta.insert("labels".into(), json!(m.labels));
    }
    if !m.annotations.is_empty() {
        meta.insert("annotations".into(), json!(m.annotations));
    }
    if !m.finalizers.is_empty() {
        meta.insert("finalizers".into(), json!(m.finalizers));
    }
    if !m.owner_references.is_empty() {
        let refs: Vec<Value> = m
            .owner_references
            .into_iter()
            .map(|r| {
                let mut o = json!({
                    "apiVersion": r.api_version.unwrap_or_default(),
                    "kind": r.kind.unwrap_or_default(),
                    "name": r.name.unwrap_or_default(),
                    "uid": r.uid.unwrap_or_default(),
                });
                if let Some(c) = r.controller {
                    o["controller"] = json!(c);
                }
                if let Some(b) = r.block_owner_deletion {
                    o["blockOwnerDeletion"] = json!(b);
                }
                o
            })
            .collect();
        meta.insert("ownerReferences".into(), Value::Array(refs));
    }
    let mut o = Map::new();
    o.insert("metadata".into(), Value::Object(meta));
    o
}

/// A label selector's JSON: `matchLabels` and `matchExpressions`.
pub(super) fn label_selector(s: meta::LabelSelector) -> Value {
    let mut o = Map::new();
    if !s.match_labels.is_empty() {
        o.insert("matchLabels".into(), json!(s.match_labels));
    }
    if !s.match_expressions.is_empty() {
        let exprs: Vec<Value> = s
            .match_expressions
            .into_iter()
            .map(|e| {
                json!({
                    "key": e.key.unwrap_or_default(),
                    "operator": e.operator.unwrap_or_default(),
                    "values": e.values,
                })
            })
            .collect();
        o.insert("matchExpressions".into(), json!(exprs));
    }
    Value::Object(o)
}

/// Puts `v` under `k` when it is set.
pub(super) fn put<T: Into<Value>>(o: &mut Map<String, Value>, k: &str, v: Option<T>) {
    if let Some(v) = v {
        o.insert(k.into(), v.into());
    }
}

/// Puts a string under `k` unless it is unset or empty (Go writes its strings either way).
pub(super) fn put_str(o: &mut Map<String, Value>, k: &str, v: Option<String>) {
    put(o, k, v.filter(|s| !s.is_empty()));
}

/// Puts a flag under `k` when it is true (Go writes its `false`s too).
pub(super) fn put_flag(o: &mut Map<String, Value>, k: &str, v: Option<bool>) {
    put(o, k, v.filter(|b| *b));
}

pub(super) fn int_or_string(v: IntOrString) -> Value {
    match (v.r#type, v.int_val, v.str_val) {
        (Some(1), _, Some(s)) => json!(s),
        (_, Some(i), _) => json!(i),
        (_, _, Some(s)) => json!(s),
        _ => json!(0),
    }
}
