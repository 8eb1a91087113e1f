//! The CustomResourceDefinition kind's own defaults and rules, kube-apiserver's
//! (`apiextensions/validation`): names that fit the group, exactly one storage version, a
//! structural schema per version, printer columns and subresources it can serve.

use serde_json::{Value, json};

use super::structural::check_schema;
use super::{CLEANUP_FINALIZER, pointer_of};
use crate::api::Kind;
use crate::api::registry::{GenericObject, default_field};
use crate::api::validation::{Errors, Path, is_dns1123_label, is_dns1123_subdomain};

/// The column types a printer column may have.
const COLUMN_TYPES: [&str; 5] = ["integer", "number", "string", "boolean", "date"];

pub(crate) fn defaults(o: &mut GenericObject) {
    let names = o.object_at("/spec/names");
    if let Some(kind) = names.get("kind").and_then(Value::as_str).map(str::to_owned) {
        default_field(names, "singular", json!(kind.to_ascii_lowercase()));
        default_field(names, "listKind", json!(format!("{kind}List")));
    }
    default_field(o.object_at("/spec/conversion"), "strategy", json!("None"));
    if let Some(Value::Array(versions)) = o.body.get_mut("spec").and_then(|s| s.get_mut("versions"))
    {
        for v in versions.iter_mut().filter_map(Value::as_object_mut) {
            for c in v
                .get_mut("additionalPrinterColumns")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
                .filter_map(Value::as_object_mut)
            {
                default_field(c, "priority", json!(0));
            }
        }
    }
    // Until its objects are gone, a deleted CRD stays (the API server's CRD controller
    // removes them, then the finalizer).
    if o.metadata.deletion_timestamp.is_none()
        && !o.metadata.finalizers.iter().any(|f| f == CLEANUP_FINALIZER)
    {
        o.metadata.finalizers.push(CLEANUP_FINALIZER.to_owned());
    }
}

fn at<'a>(o: &'a GenericObject, pointer: &str) -> &'a str {
    o.text(pointer)
}

/// A lowercase RFC 1035 label: what a plural or singular resource name must be.
fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

pub(crate) fn validate(errs: &mut Errors, o: &GenericObject, stored: Option<&GenericObject>) {
    let spec = Path::root("spec");
    let group = at(o, "/spec/group");
    let plural = at(o, "/spec/names/plural");
    if group.is_empty() {
        errs.add(&spec.field("group"), "Required value");
    } else if !is_dns1123_subdomain(group) || !group.contains('.') {
        errs.add(
            &spec.field("group"),
            format!("invalid value {group:?}: should be a domain with at least one dot"),
        );
    }
    let built_in = Kind::all()
        .filter(|k| !matches!(k, Kind::Generic(g) if g.custom_index().is_some()))
        .any(|k| k.group() == group);
    if built_in {
        errs.add(
            &spec.field("group"),
            format!("invalid value {group:?}: the API server serves this group itself"),
        );
    }
    if !plural.is_empty() && !group.is_empty() && o.metadata.name != format!("{plural}.{group}") {
        errs.add(
            &Path::root("metadata").field("name"),
            format!(
                "invalid value {:?}: must be spec.names.plural+\".\"+spec.group",
                o.metadata.name
            ),
        );
    }
    names(errs, o);
    let scope = at(o, "/spec/scope");
    errs.one_of(&spec.field("scope"), scope, &["Cluster", "Namespaced"]);
    match at(o, "/spec/conversion/strategy") {
        "None" => {}
        "Webhook" => errs.add(
            &spec.field("conversion").field("strategy"),
            "unsupported value \"Webhook\": Skiff converts versions with the None strategy only",
        ),
        other => errs.one_of(
            &spec.field("conversion").field("strategy"),
            other,
            &["None", "Webhook"],
        ),
    }
    versions(errs, o);
    if let Some(stored) = stored {
        for pointer in ["/spec/group", "/spec/scope", "/spec/names/plural"] {
            if o.at(pointer) != stored.at(pointer) {
                errs.add(
                    &crate::api::registry::path_of(pointer),
                    "field is immutable",
                );
            }
        }
    }
}

fn names(errs: &mut Errors, o: &GenericObject) {
    let path = Path::root("spec").field("names");
    for (field, required) in [
        ("plural", true),
        ("singular", true),
        ("kind", true),
        ("listKind", true),
    ] {
        let value = at(o, &format!("/spec/names/{field}"));
        if value.is_empty() {
            if required {
                errs.add(&path.field(field), "Required value");
            }
            continue;
        }
        let fits = match field {
            "plural" | "singular" => is_dns1035_label(value),
            _ => {
                value.starts_with(|c: char| c.is_ascii_alphabetic())
                    && is_dns1035_label(&value.to_ascii_lowercase())
            }
        };
        if !fits {
            errs.add(
                &path.field(field),
                format!(
                    "invalid value {value:?}: a lowercase RFC 1035 label{}",
                    if matches!(field, "kind" | "listKind") {
                        " when lowercased"
                    } else {
                        ""
                    }
                ),
            );
        }
    }
    for (list, what) in [("shortNames", "short name"), ("categories", "category")] {
        if let Some(items) = o
            .at(&format!("/spec/names/{list}"))
            .and_then(Value::as_array)
        {
            for (i, item) in items.iter().enumerate() {
                let text = item.as_str().unwrap_or_default();
                if !is_dns1123_label(text) {
                    errs.add(
                        &path.field(list).index(i),
                        format!("invalid value {text:?}: a {what} must be a DNS-1123 label"),
                    );
                }
            }
        }
    }
}

fn versions(errs: &mut Errors, o: &GenericObject) {
    let path = Path::root("spec").field("versions");
    let Some(versions) = o.at("/spec/versions").and_then(Value::as_array) else {
        errs.add(&path, "Required value: must have at least one version");
        return;
    };
    if versions.is_empty() {
        errs.add(&path, "Required value: must have at least one version");
        return;
    }
    let storage = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if storage != 1 {
        errs.add(
            &path,
            format!("invalid value: must have exactly one version marked as storage version, not {storage}"),
        );
    }
    let mut seen: Vec<&str> = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let at = path.index(i);
        let name = v.get("name").and_then(Value::as_str).unwrap_or_default();
        if name.is_empty() {
            errs.add(&at.field("name"), "Required value");
        } else if !is_dns1035_label(name) {
            errs.add(
                &at.field("name"),
                format!("invalid value {name:?}: a DNS-1035 label"),
            );
        } else if seen.contains(&name) {
            errs.add(&at.field("name"), format!("duplicate value {name:?}"));
        }
        seen.push(name);
        for flag in ["served", "storage"] {
            if !v.get(flag).is_some_and(Value::is_boolean) {
                errs.add(&at.field(flag), "Required value");
            }
        }
        match v.pointer("/schema/openAPIV3Schema") {
            Some(schema) => check_schema(
                errs,
                &at.field("schema").field("openAPIV3Schema"),
                schema,
                true,
            ),
            None => errs.add(
                &at.field("schema").field("openAPIV3Schema"),
                "Required value: schemas are required",
            ),
        }
        columns(errs, &at, v);
        if let Some(scale) = v.pointer("/subresources/scale") {
            let at = at.field("subresources").field("scale");
            for (field, prefix, required) in [
                ("specReplicasPath", ".spec.", true),
                ("statusReplicasPath", ".status.", true),
                ("labelSelectorPath", ".status.", false),
            ] {
                match scale.get(field).and_then(Value::as_str) {
                    None if required => errs.add(&at.field(field), "Required value"),
                    None => {}
                    Some(p) if !p.starts_with(prefix) || pointer_of(p).contains("//") => {
                        errs.add(
                            &at.field(field),
                            format!("invalid value {p:?}: should be a json path under {prefix}"),
                        );
                    }
                    Some(_) => {}
                }
            }
        }
    }
}

fn columns(errs: &mut Errors, at: &Path, v: &Value) {
    let Some(columns) = v.get("additionalPrinterColumns").and_then(Value::as_array) else {
        return;
    };
    for (i, c) in columns.iter().enumerate() {
        let at = at.field("additionalPrinterColumns").index(i);
        let text = |f: &str| c.get(f).and_then(Value::as_str).unwrap_or_default();
        if text("name").is_empty() {
            errs.add(&at.field("name"), "Required value");
        }
        errs.one_of(&at.field("type"), text("type"), &COLUMN_TYPES);
        let path = text("jsonPath");
        if path.is_empty() {
            errs.add(&at.field("jsonPath"), "Required value");
        } else if jsonpath_rust::parser::parse_json_path(&format!("${path}")).is_err() {
            errs.add(
                &at.field("jsonPath"),
                format!("invalid value {path:?}: must be a simple json path"),
            );
        }
        if c.get("priority")
            .and_then(Value::as_i64)
            .is_some_and(|p| p < 0)
        {
            errs.add(&at.field("priority"), "must be greater than or equal to 0");
        }
    }
}
