//! A CustomResourceDefinition's structural schema (`openAPIV3Schema`) applied to its objects,
//! as kube-apiserver applies it: unknown fields pruned, defaults filled in, then every
//! constraint checked, each violation at its field path.
//!
//! The schema is the subset of OpenAPI v3 that Kubernetes allows in a CRD: `type`,
//! `properties`, `required`, `items`, `additionalProperties`, `enum`, `default`, `nullable`,
//! the numeric, string and collection bounds, `pattern`, `format` (`date-time`, `int32`,
//! `int64`), the `allOf`/`anyOf`/`oneOf`/`not` combinators (which validate but never change
//! which fields exist), and the extensions `x-kubernetes-preserve-unknown-fields`,
//! `x-kubernetes-int-or-string` and `x-kubernetes-embedded-resource`.

use serde_json::{Map, Value};

use crate::api::validation::{Errors, Path};

/// The fields an object has whatever its schema says.
const TYPE_META: [&str; 3] = ["apiVersion", "kind", "metadata"];

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn properties(schema: &Value) -> Option<&Map<String, Value>> {
    schema.get("properties").and_then(Value::as_object)
}

/// `additionalProperties` when it is a schema (`true` or absent is not).
fn additional(schema: &Value) -> Option<&Value> {
    schema.get("additionalProperties").filter(|v| v.is_object())
}

/// `object` with the fields its schema does not declare removed, at every depth. The root's
/// `apiVersion`, `kind` and `metadata` stay; so do an embedded resource's. A value of the
/// wrong type is kept as it is, for validation to report.
pub fn prune(object: &Value, schema: &Value) -> Value {
    let mut out = object.clone();
    prune_in(&mut out, schema, true);
    out
}

fn prune_in(value: &mut Value, schema: &Value, keep_type_meta: bool) {
    match value {
        Value::Object(map) => {
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
            let embedded = keep_type_meta || flag(schema, "x-kubernetes-embedded-resource");
            let props = properties(schema);
            let extra = additional(schema);
            let open = schema.get("additionalProperties") == Some(&Value::Bool(true));
            map.retain(|k, _| {
                preserve
                    || open
                    || extra.is_some()
                    || props.is_some_and(|p| p.contains_key(k))
                    || (embedded && TYPE_META.contains(&k.as_str()))
            });
            for (k, v) in map.iter_mut() {
                if let Some(s) = props.and_then(|p| p.get(k)) {
                    prune_in(v, s, false);
                } else if let Some(s) = extra {
                    prune_in(v, s, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items").filter(|s| s.is_object()) {
                for v in items {
                    prune_in(v, s, false);
                }
            }
        }
        _ => {}
    }
}

/// Fills in the schema's defaults where a field is absent (or `null` and not nullable), at
/// every depth, as kube-apiserver does before validation.
pub fn apply_defaults(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(map) => {
            if let Some(props) = properties(schema) {
                for (k, s) in props {
                    let Some(default) = s.get("default") else {
                        continue;
                    };
                    let absent = match map.get(k) {
                        None => true,
                        Some(Value::Null) => !flag(s, "nullable"),
                        Some(_) => false,
                    };
                    if absent {
                        map.insert(k.clone(), default.clone());
                    }
                }
            }
            for (k, v) in map.iter_mut() {
                if let Some(s) = properties(schema).and_then(|p| p.get(k)) {
                    apply_defaults(v, s);
                } else if let Some(s) = additional(schema) {
                    apply_defaults(v, s);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items").filter(|s| s.is_object()) {
                for v in items {
                    apply_defaults(v, s);
                }
            }
        }
        _ => {}
    }
}

/// The JSON type of a value, as OpenAPI names it (`integer` for a whole number).
fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 80 {
        format!("{}...", text.chars().take(77).collect::<String>())
    } else {
        text
    }
}

/// Checks `value` at `path` against `schema`, adding one error per violated constraint.
/// The root's `apiVersion`, `kind` and `metadata` are the API server's to check.
pub(crate) fn validate(errs: &mut Errors, path: &Path, value: &Value, schema: &Value, root: bool) {
    if value.is_null() {
        if !flag(schema, "nullable") && schema.get("type").is_some() {
            errs.add(path, "invalid value null: must not be null");
        }
        return;
    }
    let actual = type_of(value);
    if flag(schema, "x-kubernetes-int-or-string") {
        if !matches!(actual, "integer" | "string") {
            errs.add(
                path,
                format!(
                    "invalid value {}: must be an integer or a string, not {actual}",
                    short(value)
                ),
            );
            return;
        }
    } else if let Some(want) = schema.get("type").and_then(Value::as_str) {
        let fits = want == actual || (want == "number" && actual == "integer");
        if !fits {
            errs.add(
                path,
                format!(
                    "invalid value {}: must be of type {want}, not {actual}",
                    short(value)
                ),
            );
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        errs.add(
            path,
            format!(
                "unsupported value {}: supported values: {}",
                short(value),
                list.join(", ")
            ),
        );
    }
    match value {
        Value::Number(n) => number(errs, path, n.as_f64().unwrap_or_default(), schema),
        Value::String(s) => string(errs, path, s, schema),
        Value::Array(items) => array(errs, path, items, schema),
        Value::Object(map) => object(errs, path, map, schema, root),
        _ => {}
    }
    combinators(errs, path, value, schema, root);
}

fn bound(schema: &Value, name: &str) -> Option<f64> {
    schema.get(name).and_then(Value::as_f64)
}

fn count(schema: &Value, name: &str) -> Option<usize> {
    schema
        .get(name)
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
}

fn number(errs: &mut Errors, path: &Path, n: f64, schema: &Value) {
    if let Some(min) = bound(schema, "minimum") {
        if flag(schema, "exclusiveMinimum") && n <= min {
            errs.add(
                path,
                format!("invalid value {n}: must be greater than {min}"),
            );
        } else if n < min {
            errs.add(
                path,
                format!("invalid value {n}: must be greater than or equal to {min}"),
            );
        }
    }
    if let Some(max) = bound(schema, "maximum") {
        if flag(schema, "exclusiveMaximum") && n >= max {
            errs.add(path, format!("invalid value {n}: must be less than {max}"));
        } else if n > max {
            errs.add(
                path,
                format!("invalid value {n}: must be less than or equal to {max}"),
            );
        }
    }
    if let Some(m) = bound(schema, "multipleOf")
        && m > 0.0
        && (n / m).fract() != 0.0
    {
        errs.add(
            path,
            format!("invalid value {n}: must be a multiple of {m}"),
        );
    }
    match schema.get("format").and_then(Value::as_str) {
        Some("int32") if n < f64::from(i32::MIN) || n > f64::from(i32::MAX) => {
            errs.add(
                path,
                format!("invalid value {n}: must fit in a 32-bit integer"),
            );
        }
        _ => {}
    }
}

fn string(errs: &mut Errors, path: &Path, s: &str, schema: &Value) {
    let chars = s.chars().count();
    if let Some(min) = count(schema, "minLength")
        && chars < min
    {
        errs.add(
            path,
            format!("invalid value {s:?}: must be at least {min} characters long"),
        );
    }
    if let Some(max) = count(schema, "maxLength")
        && chars > max
    {
        errs.add(
            path,
            format!("too long: may not be more than {max} characters"),
        );
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        match regex::Regex::new(pattern) {
            Ok(re) if !re.is_match(s) => errs.add(
                path,
                format!("invalid value {s:?}: must match the pattern {pattern:?}"),
            ),
            Ok(_) => {}
            Err(e) => errs.add(
                path,
                format!("the schema's pattern {pattern:?} is invalid: {e}"),
            ),
        }
    }
    if schema.get("format").and_then(Value::as_str) == Some("date-time")
        && chrono::DateTime::parse_from_rfc3339(s).is_err()
    {
        errs.add(
            path,
            format!("invalid value {s:?}: must be a date-time (RFC 3339)"),
        );
    }
}

fn array(errs: &mut Errors, path: &Path, items: &[Value], schema: &Value) {
    if let Some(min) = count(schema, "minItems")
        && items.len() < min
    {
        errs.add(path, format!("must have at least {min} items"));
    }
    if let Some(max) = count(schema, "maxItems")
        && items.len() > max
    {
        errs.add(
            path,
            format!("too many: {}: must have at most {max} items", items.len()),
        );
    }
    if flag(schema, "uniqueItems") {
        for (i, v) in items.iter().enumerate() {
            if items[..i].contains(v) {
                errs.add(&path.index(i), format!("duplicate value {}", short(v)));
            }
        }
    }
    if let Some(s) = schema.get("items").filter(|s| s.is_object()) {
        for (i, v) in items.iter().enumerate() {
            validate(errs, &path.index(i), v, s, false);
        }
    }
}

fn object(errs: &mut Errors, path: &Path, map: &Map<String, Value>, schema: &Value, root: bool) {
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if map.get(name).is_none_or(Value::is_null) {
                errs.add(&path.field(name), "Required value");
            }
        }
    }
    if let Some(min) = count(schema, "minProperties")
        && map.len() < min
    {
        errs.add(path, format!("must have at least {min} properties"));
    }
    if let Some(max) = count(schema, "maxProperties")
        && map.len() > max
    {
        errs.add(path, format!("must have at most {max} properties"));
    }
    let props = properties(schema);
    for (k, v) in map {
        if root && TYPE_META.contains(&k.as_str()) {
            continue;
        }
        if let Some(s) = props.and_then(|p| p.get(k)) {
            validate(errs, &path.field(k), v, s, false);
        } else if let Some(s) = additional(schema) {
            validate(errs, &path.key(k), v, s, false);
        }
    }
}

fn combinators(errs: &mut Errors, path: &Path, value: &Value, schema: &Value, root: bool) {
    let passes = |s: &Value| {
        let mut e = Errors::default();
        validate(&mut e, path, value, s, root);
        e.is_empty()
    };
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for s in all {
            validate(errs, path, value, s, root);
        }
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array)
        && !any.iter().any(passes)
    {
        errs.add(path, "must match at least one of the schemas in anyOf");
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
        let matching = one.iter().filter(|s| passes(s)).count();
        if matching != 1 {
            errs.add(
                path,
                format!("must match exactly one of the schemas in oneOf (matches {matching})"),
            );
        }
    }
    if let Some(not) = schema.get("not")
        && passes(not)
    {
        errs.add(path, "must not match the schema in not");
    }
}

/// The rules a CRD's schema itself must follow to be structural, at `path`: every node says its
/// type (unless it is int-or-string or preserves unknown fields), the root is an object, and
/// each default is valid for its own schema.
pub(crate) fn check_schema(errs: &mut Errors, path: &Path, schema: &Value, root: bool) {
    let Some(map) = schema.as_object() else {
        errs.add(path, "must be an object");
        return;
    };
    let typed = map.get("type").and_then(Value::as_str);
    if let Some(t) = typed
        && !matches!(
            t,
            "object" | "array" | "string" | "integer" | "number" | "boolean"
        )
    {
        errs.one_of(
            &path.field("type"),
            t,
            &["object", "array", "string", "integer", "number", "boolean"],
        );
    }
    if root && typed != Some("object") {
        errs.add(&path.field("type"), "must be object at the root");
    }
    if typed.is_none()
        && !flag(schema, "x-kubernetes-int-or-string")
        && !flag(schema, "x-kubernetes-preserve-unknown-fields")
    {
        errs.add(
            &path.field("type"),
            "Required value: must not be empty for specified object fields",
        );
    }
    super::rules::check(errs, path, schema);
    if let Some(pattern) = map.get("pattern").and_then(Value::as_str)
        && let Err(e) = regex::Regex::new(pattern)
    {
        errs.add(
            &path.field("pattern"),
            format!("invalid pattern {pattern:?}: {e}"),
        );
    }
    if let Some(props) = map.get("properties") {
        match props.as_object() {
            Some(props) => {
                for (k, s) in props {
                    check_schema(errs, &path.field("properties").key(k), s, false);
                }
            }
            None => errs.add(&path.field("properties"), "must be an object"),
        }
    }
    if let Some(items) = map.get("items") {
        check_schema(errs, &path.field("items"), items, false);
    }
    if let Some(extra) = additional(schema) {
        check_schema(errs, &path.field("additionalProperties"), extra, false);
    }
    if let Some(default) = map.get("default") {
        if root {
            errs.add(&path.field("default"), "must not be set at the root");
        } else {
            let mut e = Errors::default();
            let mut pruned = prune(default, schema);
            apply_defaults(&mut pruned, schema);
            validate(&mut e, &path.field("default"), &pruned, schema, false);
            for err in e.into_vec() {
                errs.add(&Path::root(&err.path), err.message);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["image"],
                    "properties": {
                        "image": {"type": "string", "minLength": 1},
                        "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
                        "mode": {"type": "string", "enum": ["fast", "safe"], "default": "safe"},
                        "port": {"x-kubernetes-int-or-string": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "items": {"type": "array", "maxItems": 2, "items": {
                            "type": "object", "properties": {"name": {"type": "string", "pattern": "^[a-z]+$"}}
                        }}
                    }
                },
                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
            }
        })
    }

    fn errors(value: &Value) -> Vec<String> {
        let mut errs = Errors::default();
        validate(&mut errs, &Path::root(""), value, &schema(), true);
        errs.into_vec().iter().map(ToString::to_string).collect()
    }

    /// Unknown fields go at every depth; preserved, mapped and type-meta fields stay.
    #[test]
    fn pruning_keeps_what_the_schema_declares() {
        let object = json!({
            "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"image": "x", "typo": 1, "labels": {"a": "b"}, "extra": {"any": {"thing": 1}},
                     "items": [{"name": "a", "junk": true}]},
            "other": 1
        });
        assert_eq!(
            prune(&object, &schema()),
            json!({
                "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
                "spec": {"image": "x", "labels": {"a": "b"}, "extra": {"any": {"thing": 1}},
                         "items": [{"name": "a"}]}
            })
        );
    }

    /// Defaults fill absent fields only, and go no deeper than the object that exists.
    #[test]
    fn defaults_fill_absent_fields() {
        let mut object = json!({"spec": {"image": "x", "mode": "fast"}});
        apply_defaults(&mut object, &schema());
        assert_eq!(
            object,
            json!({"spec": {"image": "x", "mode": "fast", "replicas": 1}})
        );
        let mut empty = json!({});
        apply_defaults(&mut empty, &schema());
        assert_eq!(empty, json!({}));
    }

    /// Each violation is reported at its path, all together.
    #[test]
    fn violations_name_their_fields() {
        assert!(errors(&json!({"spec": {"image": "x", "replicas": 3}})).is_empty());
        assert_eq!(
            errors(
                &json!({"spec": {"replicas": "3", "mode": "slow", "port": true,
                                    "labels": {"a": 1}, "items": [{"name": "A"}, {}, {}]}})
            ),
            [
                "spec.image: Required value",
                "spec.items: too many: 3: must have at most 2 items",
                "spec.items[0].name: invalid value \"A\": must match the pattern \"^[a-z]+$\"",
                "spec.labels.a: invalid value 1: must be of type string, not integer",
                "spec.mode: unsupported value \"slow\": supported values: \"fast\", \"safe\"",
                "spec.port: invalid value true: must be an integer or a string, not boolean",
                "spec.replicas: invalid value \"3\": must be of type integer, not string",
            ]
        );
        assert_eq!(
            errors(&json!({"spec": {"image": "", "replicas": 11}})),
            [
                "spec.image: invalid value \"\": must be at least 1 characters long",
                "spec.replicas: invalid value 11: must be less than or equal to 10",
            ]
        );
    }

    /// A schema that is not structural, or whose default breaks it, is refused.
    #[test]
    fn schemas_must_be_structural() {
        let check = |s: Value| {
            let mut errs = Errors::default();
            check_schema(&mut errs, &Path::root("schema"), &s, true);
            errs.into_vec()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        assert!(check(schema()).is_empty());
        assert_eq!(
            check(json!({"type": "object", "properties": {
                "a": {"properties": {}},
                "b": {"type": "integer", "default": "x"},
                "c": {"type": "strin"}
            }})),
            [
                "schema.properties.a.type: Required value: must not be empty for specified object fields",
                "schema.properties.b.default: invalid value \"x\": must be of type integer, not string",
                "schema.properties.c.type: unsupported value \"strin\": supported values: \"object\", \"array\", \"string\", \"integer\", \"number\", \"boolean\"",
            ]
        );
        assert_eq!(
            check(json!({"type": "array"})),
            ["schema.type: must be object at the root"]
        );
    }
}
