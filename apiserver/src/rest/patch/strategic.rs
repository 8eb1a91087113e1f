//! Kubernetes' strategic merge patch: a JSON merge patch (RFC 7386) that merges some lists
//! instead of replacing them, steered by the [`schema`](super::schema) table and by directives
//! in the patch. Written from the semantics of apimachinery's `strategicpatch` package as the
//! API server applies it (`StrategicMergePatch`: nulls not in the original are dropped,
//! `$deleteFromPrimitiveList` lists are applied).
//!
//! | in the patch                           | effect                                              |
//! |----------------------------------------|-----------------------------------------------------|
//! | `"key": null`                          | deletes `key`                                       |
//! | an object                              | merges into the original's object, recursively      |
//! | a list of a field merged by key        | elements merge into the same-keyed element, or join |
//! | a list of a field merged as a set      | values join, duplicates dropped                     |
//! | any other list, or any scalar          | replaces the original's value                       |
//! | `{"$patch": "delete", key: v}` in a list | deletes the elements keyed `v`                    |
//! | `{"$patch": "replace"}` in a list      | the list's other elements replace the original list |
//! | `"$patch": "replace"` in an object     | the object (less the directive) replaces the original |
//! | `"$patch": "delete"` in an object      | deletes the object                                  |
//! | `"$deleteFromPrimitiveList/f": [..]`   | removes those values from list `f`                  |
//! | `"$setElementOrder/f": [..]`           | orders list `f` (elements by merge key or value)    |
//! | `"$retainKeys": [..]`                  | drops the original's keys not listed, then merges   |
//!
//! Order of a merged list. apimachinery keeps the patch's elements in the patch's order and the
//! original's other ("server-only") elements in their original order, then interleaves the two:
//! a server-only element goes before a patch element when the original had it first. So an
//! element the original lacked lands ahead of the server-only elements after its predecessor in
//! the patch; patching `containers: [{name: b}]` into `[a]` gives `[b, a]`, as Kubernetes'
//! "Update API Objects in Place Using kubectl patch" shows. `$setElementOrder` orders the same
//! way with its list in place of the patch's. kubectl sends it for every list it touches, so the
//! order of what `kubectl apply` manages is exactly the configuration's, with elements added by
//! others kept near their old neighbours.
//!
//! One departure: apimachinery turns `"$patch": "delete"` on an object that exists into `{}`;
//! here the field is removed, which is what the directive is documented to do.

use std::fmt;

use serde_json::{Map, Value};

use super::PatchError;
use super::schema::{Field, ListMerge, Schema};

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// Applies the strategic merge patch `patch` to `original`, an object described by `schema`.
pub(super) fn apply(
    schema: &'static Schema,
    original: &Value,
    patch: &Map<String, Value>,
) -> Result<Value, PatchError> {
    // A stored object is always an object; anything else merges like nothing, as in RFC 7386.
    let mut object = original.as_object().cloned().unwrap_or_default();
    match merge_map(&mut object, patch, Some(schema), &At::ROOT)? {
        Fate::Keep => Ok(Value::Object(object)),
        Fate::Delete => Err(PatchError::DeletesObject),
    }
}

/// What becomes of an object a patch was merged into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Keep,
    /// The patch said `"$patch": "delete"`.
    Delete,
}

/// Where in the object the merge is, for error messages: `spec.containers[name="app"].env`.
/// A chain of borrowed steps on the stack, so finding a place costs nothing until it is shown.
#[derive(Debug, Clone, Copy)]
struct At<'a> {
    parent: Option<&'a At<'a>>,
    step: Step<'a>,
}

#[derive(Debug, Clone, Copy)]
enum Step<'a> {
    Root,
    Field(&'a str),
    Element { key: &'a str, value: &'a Value },
}

impl<'a> At<'a> {
    const ROOT: At<'static> = At {
        parent: None,
        step: Step::Root,
    };

    fn field(&'a self, name: &'a str) -> At<'a> {
        At {
            parent: Some(self),
            step: Step::Field(name),
        }
    }

    fn element(&'a self, key: &'a str, value: &'a Value) -> At<'a> {
        At {
            parent: Some(self),
            step: Step::Element { key, value },
        }
    }

    fn is_root(&self) -> bool {
        matches!(self.step, Step::Root)
    }
}

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parent = self.parent.filter(|parent| !parent.is_root());
        if let Some(parent) = parent {
            write!(f, "{parent}")?;
        }
        match self.step {
            Step::Root => f.write_str("the object's root"),
            Step::Field(name) if parent.is_some() => write!(f, ".{name}"),
            Step::Field(name) => f.write_str(name),
            Step::Element { key, value } => write!(f, "[{key}={value}]"),
        }
    }
}

/// How the elements of a list are told apart, by `$setElementOrder` and when ordering.
#[derive(Debug, Clone, Copy)]
enum Identity {
    /// By the value of the merge key.
    Key(&'static str),
    /// By the whole value.
    Value,
}

impl Identity {
    fn of_field(field: Option<&Field>) -> Identity {
        match field.and_then(|field| field.list) {
            Some(ListMerge::ByKey(key)) => Identity::Key(key),
            Some(ListMerge::Union | ListMerge::ByKeys(_)) | None => Identity::Value,
        }
    }

    fn of(self, element: &Value) -> Option<&Value> {
        match self {
            Identity::Key(key) => element.get(key),
            Identity::Value => Some(element),
        }
    }

    /// The identity of an element the patch gives, which for a keyed list must have the key.
    fn required<'v>(self, element: &'v Value, at: &At<'_>) -> Result<&'v Value, PatchError> {
        match self {
            Identity::Key(key) => keyed(element, key, at).map(|(_, value)| value),
            Identity::Value => Ok(element),
        }
    }
}

/// The directives of one patch object, sorted out of its ordinary fields.
#[derive(Debug, Default)]
struct Directives<'p> {
    retain_keys: Option<&'p [Value]>,
    /// `$setElementOrder/<field>`: the field and its order.
    orders: Vec<(&'p str, &'p [Value])>,
    /// `$deleteFromPrimitiveList/<field>`: the field and the values to remove.
    deletions: Vec<(&'p str, &'p [Value])>,
    fields: Vec<(&'p str, &'p Value)>,
}

impl<'p> Directives<'p> {
    /// Sorts `patch` into directives and fields; its `$patch`, if any, is the caller's.
    fn sort(patch: &'p Map<String, Value>, at: &At<'_>) -> Result<Self, PatchError> {
        let mut sorted = Directives::default();
        for (key, value) in patch {
            if key == PATCH {
                // `replace`, handled by the caller
                continue;
            } else if key == RETAIN_KEYS {
                sorted.retain_keys = Some(directive_list(key, value, at)?);
            } else if let Some(field) = key.strip_prefix(SET_ELEMENT_ORDER) {
                sorted.orders.push((field, directive_list(key, value, at)?));
            } else if let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
                sorted
                    .deletions
                    .push((field, directive_list(key, value, at)?));
            } else if key.starts_with('$') {
                return Err(PatchError::UnknownDirective {
                    at: at.to_string(),
                    directive: key.clone(),
                });
            } else {
                sorted.fields.push((key, value));
            }
        }
        Ok(sorted)
    }
}

fn directive_list<'p>(
    directive: &str,
    value: &'p Value,
    at: &At<'_>,
) -> Result<&'p [Value], PatchError> {
    value
        .as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| PatchError::DirectiveNotList {
            at: at.to_string(),
            directive: directive.to_owned(),
        })
}

/// A `$setElementOrder` to enforce once its list is merged.
#[derive(Debug)]
struct Ordering<'p> {
    field: &'p str,
    order: Vec<&'p Value>,
    identity: Identity,
    /// The identities of the original list, before the merge.
    server_order: Vec<Value>,
}

/// Merges `patch` into `original`, an object described by `schema` (none: every list atomic).
fn merge_map(
    original: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    schema: Option<&'static Schema>,
    at: &At<'_>,
) -> Result<Fate, PatchError> {
    if let Some(directive) = patch.get(PATCH) {
        match directive.as_str() {
            // The rest of the patch, merged into nothing, is the object.
            Some("replace") => original.clear(),
            Some("delete") => return Ok(Fate::Delete),
            _ => {
                return Err(PatchError::UnknownPatchDirective {
                    at: at.to_string(),
                    value: directive.to_string(),
                });
            }
        }
    }
    let directives = Directives::sort(patch, at)?;

    if let Some(retained) = directives.retain_keys {
        let listed = |key: &str| retained.iter().any(|name| name.as_str() == Some(key));
        if let Some((key, _)) = directives
            .fields
            .iter()
            .find(|(key, value)| !value.is_null() && !listed(key))
        {
            return Err(PatchError::RetainKeysOmitsField {
                at: at.to_string(),
                field: (*key).to_owned(),
            });
        }
        original.retain(|key, _| listed(key));
    }

    let mut orderings = Vec::with_capacity(directives.orders.len());
    for &(field, order) in &directives.orders {
        orderings.push(plan_ordering(original, patch, schema, field, order, at)?);
    }

    for &(name, value) in &directives.fields {
        merge_field(original, name, value, schema, at)?;
    }

    for &(field, values) in &directives.deletions {
        if let Some(Value::Array(list)) = original.get_mut(field) {
            list.retain(|element| !values.contains(element));
        }
    }

    for ordering in orderings {
        if let Some(Value::Array(list)) = original.get_mut(ordering.field) {
            let merged = std::mem::take(list);
            *list = arrange(
                merged,
                &ordering.order,
                &ordering.server_order,
                ordering.identity,
            );
        }
    }
    Ok(Fate::Keep)
}

/// Checks `$setElementOrder/<field>` against the patch's list (its elements must appear in the
/// order's order) and notes the original list's order, which the merge is about to change.
fn plan_ordering<'p>(
    original: &Map<String, Value>,
    patch: &'p Map<String, Value>,
    schema: Option<&'static Schema>,
    field: &'p str,
    order: &'p [Value],
    at: &At<'_>,
) -> Result<Ordering<'p>, PatchError> {
    let identity = Identity::of_field(schema.and_then(|schema| schema.field(field)));
    let here = at.field(field);
    let order = order
        .iter()
        .map(|element| identity.required(element, &here))
        .collect::<Result<Vec<_>, _>>()?;
    if let (false, Some(Value::Array(patch_list))) = (order.is_empty(), patch.get(field)) {
        let mut remaining = order.iter();
        for element in patch_list
            .iter()
            .filter(|element| element.get(PATCH).is_none())
        {
            let id = identity.required(element, &here)?;
            if !remaining.any(|listed| *listed == id) {
                return Err(PatchError::ElementOrderMismatch {
                    at: at.to_string(),
                    field: field.to_owned(),
                });
            }
        }
    }
    let server_order = match original.get(field) {
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(|element| identity.of(element))
            .cloned()
            .collect(),
        _ => Vec::new(),
    };
    Ok(Ordering {
        field,
        order,
        identity,
        server_order,
    })
}

/// Merges the patch's `value` for the field `name` into `original`.
fn merge_field(
    original: &mut Map<String, Value>,
    name: &str,
    value: &Value,
    schema: Option<&'static Schema>,
    at: &At<'_>,
) -> Result<(), PatchError> {
    let field = schema.and_then(|schema| schema.field(name));
    let here = at.field(name);
    let merged = match (original.get_mut(name), value) {
        (_, Value::Null) => None,
        (Some(Value::Object(object)), Value::Object(patch)) => {
            match merge_map(object, patch, field.and_then(|f| f.schema), &here)? {
                Fate::Keep => return Ok(()),
                Fate::Delete => None,
            }
        }
        (Some(Value::Array(list)), Value::Array(patch)) => {
            let merged = merge_list(std::mem::take(list), patch, field, &here)?;
            *list = merged;
            return Ok(());
        }
        // Absent, or of another type: the patch's value is taken, less its directives and nulls.
        (_, value) => fresh(value, field, &here)?,
    };
    match merged {
        Some(value) => original.insert(name.to_owned(), value),
        None => original.remove(name),
    };
    Ok(())
}

/// A patch value where there is nothing to merge it into: merged into nothing, which drops its
/// nulls and carries out its directives. `None` when it deletes itself.
fn fresh(value: &Value, field: Option<&Field>, at: &At<'_>) -> Result<Option<Value>, PatchError> {
    Ok(match value {
        Value::Null => None,
        Value::Object(patch) => {
            fresh_object(patch, field.and_then(|field| field.schema), at)?.map(Value::Object)
        }
        Value::Array(patch) => Some(Value::Array(merge_list(Vec::new(), patch, field, at)?)),
        scalar => Some(scalar.clone()),
    })
}

fn fresh_object(
    patch: &Map<String, Value>,
    schema: Option<&'static Schema>,
    at: &At<'_>,
) -> Result<Option<Map<String, Value>>, PatchError> {
    let mut object = Map::new();
    Ok(match merge_map(&mut object, patch, schema, at)? {
        Fate::Keep => Some(object),
        Fate::Delete => None,
    })
}

/// A list element the patch gives where there is nothing to merge it into. Unlike an object's
/// field, a null element stays: it is a value of the list.
fn fresh_element(
    element: &Value,
    schema: Option<&'static Schema>,
    at: &At<'_>,
) -> Result<Option<Value>, PatchError> {
    Ok(match element {
        Value::Object(patch) => fresh_object(patch, schema, at)?.map(Value::Object),
        Value::Array(patch) => Some(Value::Array(
            patch
                .iter()
                .map(|inner| fresh_element(inner, None, at))
                .filter_map(Result::transpose)
                .collect::<Result<_, _>>()?,
        )),
        other => Some(other.clone()),
    })
}

/// The `$patch` elements of a patch list, sorted out of its ordinary elements.
#[derive(Debug, Default)]
struct ListDirectives<'p> {
    /// `{"$patch": "replace"}`: the ordinary elements are the whole list.
    replace: bool,
    /// `{"$patch": "delete", key: v}`: the merge-key values to delete.
    deletions: Vec<&'p Value>,
    elements: Vec<&'p Value>,
}

impl<'p> ListDirectives<'p> {
    fn sort(
        patch: &'p [Value],
        merge_key: Option<&'static str>,
        at: &At<'_>,
    ) -> Result<Self, PatchError> {
        let mut sorted = ListDirectives::default();
        for element in patch {
            let Some(directive) = element.get(PATCH) else {
                sorted.elements.push(element);
                continue;
            };
            match (directive.as_str(), merge_key) {
                (Some("replace"), _) => sorted.replace = true,
                (Some("delete"), Some(key)) => sorted.deletions.push(keyed(element, key, at)?.1),
                // `merge` is reserved by apimachinery; `delete` needs a merge key to name its victims.
                (Some("delete" | "merge"), _) => {
                    return Err(PatchError::UnsupportedListDirective {
                        at: at.to_string(),
                        value: directive.to_string(),
                    });
                }
                _ => {
                    return Err(PatchError::UnknownPatchDirective {
                        at: at.to_string(),
                        value: directive.to_string(),
                    });
                }
            }
        }
        Ok(sorted)
    }
}

/// An element of a list merged by `key`: an object, and its key's value.
fn keyed<'v>(
    element: &'v Value,
    key: &'static str,
    at: &At<'_>,
) -> Result<(&'v Map<String, Value>, &'v Value), PatchError> {
    let object = element
        .as_object()
        .ok_or_else(|| PatchError::ElementNotObject {
            at: at.to_string(),
            key,
        })?;
    let value = object.get(key).ok_or_else(|| PatchError::MissingMergeKey {
        at: at.to_string(),
        key,
    })?;
    Ok((object, value))
}

/// Merges the patch's list into `original` as the field's strategy says.
fn merge_list(
    original: Vec<Value>,
    patch: &[Value],
    field: Option<&Field>,
    at: &At<'_>,
) -> Result<Vec<Value>, PatchError> {
    let schema = field.and_then(|field| field.schema);
    // A list merged by several keys (a custom kind's) is replaced: Kubernetes takes no
    // strategic merge patch of a custom object.
    let strategy = field
        .and_then(|field| field.list)
        .filter(|l| !matches!(l, ListMerge::ByKeys(_)));
    let merge_key = match strategy {
        Some(ListMerge::ByKey(key)) => Some(key),
        Some(ListMerge::Union | ListMerge::ByKeys(_)) | None => None,
    };
    let directives = ListDirectives::sort(patch, merge_key, at)?;
    if directives.replace || strategy.is_none() {
        // Atomic, or replaced on request.
        let mut list = Vec::with_capacity(directives.elements.len());
        for element in directives.elements {
            list.extend(fresh_element(element, schema, at)?);
        }
        return Ok(list);
    }
    match merge_key {
        Some(key) => merge_by_key(original, &directives, key, schema, at),
        None => Ok(merge_union(original, &directives.elements)),
    }
}

/// A list of primitives merged as a set.
fn merge_union(original: Vec<Value>, patch: &[&Value]) -> Vec<Value> {
    let server_order = original.clone();
    let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
    for value in original
        .into_iter()
        .chain(patch.iter().map(|value| (*value).clone()))
    {
        if !merged.contains(&value) {
            merged.push(value);
        }
    }
    arrange(merged, patch, &server_order, Identity::Value)
}

/// A list of objects merged by the value of `key`.
fn merge_by_key(
    mut merged: Vec<Value>,
    patch: &ListDirectives<'_>,
    key: &'static str,
    schema: Option<&'static Schema>,
    at: &At<'_>,
) -> Result<Vec<Value>, PatchError> {
    merged.retain(|element| {
        element
            .get(key)
            .is_none_or(|value| !patch.deletions.contains(&value))
    });
    let server_order: Vec<Value> = merged
        .iter()
        .filter_map(|element| element.get(key))
        .cloned()
        .collect();
    let mut order = Vec::with_capacity(patch.elements.len());
    for element in &patch.elements {
        let (object, value) = keyed(element, key, at)?;
        order.push(value);
        let here = at.element(key, value);
        match merged
            .iter()
            .position(|existing| existing.get(key) == Some(value))
        {
            Some(index) => {
                if let Value::Object(existing) = &mut merged[index]
                    && merge_map(existing, object, schema, &here)? == Fate::Delete
                {
                    merged.remove(index);
                }
            }
            None => merged.extend(fresh_object(object, schema, &here)?.map(Value::Object)),
        }
    }
    Ok(arrange(merged, &order, &server_order, Identity::Key(key)))
}

/// Orders a merged list: the elements named in `order` in its order, the others ("server-only")
/// in `server_order`, the original's, the two interleaved so that a server-only element goes
/// before a named one when the original had it first.
fn arrange(
    merged: Vec<Value>,
    order: &[&Value],
    server_order: &[Value],
    identity: Identity,
) -> Vec<Value> {
    let rank_in_order = |element: &Value| {
        let id = identity.of(element)?;
        order.iter().position(|listed| *listed == id)
    };
    let rank_in_server = |element: &Value| {
        let id = identity.of(element)?;
        server_order.iter().position(|listed| listed == id)
    };
    let (mut named, mut server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|element| rank_in_order(element).is_some());
    named.sort_by_key(|element| rank_in_order(element));
    server_only.sort_by_key(|element| rank_in_server(element).unwrap_or(usize::MAX));

    let mut arranged = Vec::with_capacity(named.len() + server_only.len());
    let mut named = named.into_iter().peekable();
    let mut server_only = server_only.into_iter().peekable();
    while let Some(next) = match (server_only.peek(), named.peek()) {
        (Some(server), Some(listed)) => {
            let server_first = matches!(
                (rank_in_server(server), rank_in_server(listed)),
                (Some(server), Some(listed)) if server < listed
            );
            if server_first {
                server_only.next()
            } else {
                named.next()
            }
        }
        (Some(_), None) => server_only.next(),
        (None, _) => named.next(),
    } {
        arranged.push(next);
    }
    arranged
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};
    use skiff_proto::api::Kind;

    use crate::rest::patch::{PatchError, PatchType, apply};

    fn smp(kind: Kind, original: &Value, patch: &Value) -> Result<Value, PatchError> {
        apply(
            kind,
            PatchType::StrategicMerge,
            original,
            patch.to_string().as_bytes(),
        )
    }

    fn pod_with(spec: Value) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "labels": {"app": "web", "tier": "front"}, "finalizers": ["a.io/x", "a.io/y"]},
            "spec": spec,
        })
    }

    fn two_containers() -> Value {
        pod_with(json!({
            "containers": [
                {"name": "app", "image": "nginx:1.27", "args": ["-g", "daemon off;"],
                 "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 80}]},
                {"name": "sidecar", "image": "envoy:1.30"},
            ],
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "nodeSelector": {"zone": "a", "disk": "hdd"},
        }))
    }

    fn names(list: &Value) -> Vec<&str> {
        list.as_array()
            .expect("a list")
            .iter()
            .map(|element| element["name"].as_str().expect("a name"))
            .collect()
    }

    /// A patch element merges into the container of the same name; the container's other
    /// fields and the other containers stay, in their order.
    #[test]
    fn merges_container_image_by_name() {
        let result = smp(
            Kind::Pod,
            &two_containers(),
            &json!({"spec": {"containers": [{"name": "app", "image": "nginx:1.28"}]}}),
        )
        .expect("applies");
        let containers = &result["spec"]["containers"];
        assert_eq!(names(containers), ["app", "sidecar"]);
        assert_eq!(containers[0]["image"], "nginx:1.28");
        assert_eq!(containers[0]["env"], json!([{"name": "A", "value": "1"}]));
        assert_eq!(containers[1]["image"], "envoy:1.30");
    }

    /// An env var added as kubectl apply sends it (with `$setElementOrder` on both lists) joins
    /// the named container's env, in the configuration's order.
    #[test]
    fn adds_env_var_as_kubectl_apply_sends_it() {
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
            "containers": [{
                "$setElementOrder/env": [{"name": "A"}, {"name": "B"}],
                "name": "app",
                "env": [{"name": "B", "value": "2"}],
            }],
        }});
        let result = smp(Kind::Pod, &two_containers(), &patch).expect("applies");
        assert_eq!(
            result["spec"]["containers"][0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
        );
        assert_eq!(names(&result["spec"]["containers"]), ["app", "sidecar"]);
    }

    /// Without `$setElementOrder`, a new element lands before the server-only elements that
    /// follow it, as Kubernetes' kubectl patch tutorial shows (redis ahead of nginx).
    #[test]
    fn new_element_placed_as_kubernetes_places_it() {
        let original =
            pod_with(json!({"containers": [{"name": "patch-demo-ctr", "image": "nginx"}]}));
        let patch =
            json!({"spec": {"containers": [{"name": "patch-demo-ctr-2", "image": "redis"}]}});
        let result = smp(Kind::Pod, &original, &patch).expect("applies");
        assert_eq!(
            names(&result["spec"]["containers"]),
            ["patch-demo-ctr-2", "patch-demo-ctr"]
        );
    }

    /// `{"$patch": "delete", "name": ...}` deletes the container so named, and only it.
    #[test]
    fn deletes_container_with_patch_delete() {
        let patch = json!({"spec": {"containers": [{"$patch": "delete", "name": "sidecar"}]}});
        let result = smp(Kind::Pod, &two_containers(), &patch).expect("applies");
        assert_eq!(names(&result["spec"]["containers"]), ["app"]);
        assert_eq!(result["spec"]["containers"][0]["image"], "nginx:1.27");
    }

    /// `$setElementOrder` alone reorders a list; elements it does not name keep their place
    /// beside their old neighbours.
    #[test]
    fn set_element_order_reorders_containers() {
        let patch = json!({"spec": {"$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}]}});
        let result = smp(Kind::Pod, &two_containers(), &patch).expect("applies");
        assert_eq!(names(&result["spec"]["containers"]), ["sidecar", "app"]);

        let original =
            pod_with(json!({"containers": [{"name": "a"}, {"name": "injected"}, {"name": "b"}]}));
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
            "containers": [{"name": "c", "image": "busybox"}],
        }});
        let result = smp(Kind::Pod, &original, &patch).expect("applies");
        assert_eq!(
            names(&result["spec"]["containers"]),
            ["a", "injected", "b", "c"]
        );
    }

    /// Finalizers merge as a set, `$deleteFromPrimitiveList/finalizers` removes values, and
    /// `$setElementOrder/finalizers` orders the rest.
    #[test]
    fn finalizers_union_and_delete_from_primitive_list() {
        let patch = json!({"metadata": {"finalizers": ["a.io/y", "a.io/z"]}});
        let result = smp(Kind::Pod, &two_containers(), &patch).expect("applies");
        assert_eq!(
            result["metadata"]["finalizers"],
            json!(["a.io/x", "a.io/y", "a.io/z"])
        );

        let patch = json!({"metadata": {
            "$setElementOrder/finalizers": ["a.io/z", "a.io/y"],
            "$deleteFromPrimitiveList/finalizers": ["a.io/x"],
            "finalizers": ["a.io/z"],
        }});
        let result = smp(Kind::Pod, &two_containers(), &patch).expect("applies");
        assert_eq!(
            result["metadata"]["finalizers"],
            json!(["a.io/z", "a.io/y"])
        );
    }

    /// A Node's podCIDRs are a set too.
    #[test]
    fn node_pod_cidrs_union() {
        let node = json!({"metadata": {"name": "n1"}, "spec": {"podCIDRs": ["10.0.0.0/24"]}});
        let result = smp(
            Kind::Node,
            &node,
            &json!({"spec": {"podCIDRs": ["10.0.0.0/24", "fd00::/64"]}}),
        )
        .expect("applies");
        assert_eq!(
            result["spec"]["podCIDRs"],
            json!(["10.0.0.0/24", "fd00::/64"])
        );
    }

    /// `$retainKeys` drops the keys it does not list before merging: a volume switched from
    /// emptyDir to hostPath loses its emptyDir, as kubectl apply means it to.
    #[test]
    fn retain_keys_drops_unlisted_keys() {
        let patch = json!({"spec": {"volumes": [
            {"$retainKeys": ["hostPath", "name"], "name": "data", "hostPath": {"path": "/srv"}},
        ]}});
        let result = smp(Kind::Pod, &two_containers(), &patch).expect("applies");
        assert_eq!(
            result["spec"]["volumes"],
            json!([{"name": "data", "hostPath": {"path": "/srv"}}])
        );

        let patch = json!({"spec": {"volumes": [
            {"$retainKeys": ["name"], "name": "data", "hostPath": {"path": "/srv"}},
        ]}});
        let error =
            smp(Kind::Pod, &two_containers(), &patch).expect_err("hostPath set but not retained");
        assert!(
            matches!(&error, PatchError::RetainKeysOmitsField { field, .. } if field == "hostPath"),
            "{error:?}"
        );
        assert!(
            error.to_string().contains(r#"spec.volumes[name="data"]"#),
            "{error}"
        );
    }

    /// `"$patch": "replace"` in a map replaces the map with the rest of the patch's map.
    #[test]
    fn patch_replace_on_a_map() {
        let patch = json!({"spec": {"nodeSelector": {"$patch": "replace", "disk": "ssd"}}});
        let result = smp(Kind::Pod, &two_containers(), &patch).expect("applies");
        assert_eq!(result["spec"]["nodeSelector"], json!({"disk": "ssd"}));
    }

    /// `{"$patch": "replace"}` in a list makes the list's other elements the whole list.
    #[test]
    fn patch_replace_on_a_list() {
        let patch = json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "busybox"}]}});
        let result = smp(Kind::Pod, &two_containers(), &patch).expect("applies");
        assert_eq!(
            result["spec"]["containers"],
            json!([{"name": "only", "image": "busybox"}])
        );
    }

    /// `"$patch": "delete"` in a map removes the field that held it.
    #[test]
    fn patch_delete_on_a_map() {
        let patch = json!({"spec": {"nodeSelector": {"$patch": "delete"}}});
        let result = smp(Kind::Pod, &two_containers(), &patch).expect("applies");
        assert!(result["spec"].get("nodeSelector").is_none(), "{result}");
    }

    /// A null deletes a label and leaves the others; nulls in a new value are dropped.
    #[test]
    fn null_deletes_a_label() {
        let patch = json!({
            "metadata": {"labels": {"tier": null, "absent": null}},
            "spec": {"securityContext": {"runAsUser": 1000, "fsGroup": null}},
        });
        let result = smp(Kind::Pod, &two_containers(), &patch).expect("applies");
        assert_eq!(result["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(
            result["spec"]["securityContext"],
            json!({"runAsUser": 1000})
        );
    }

    /// Lists without a merge strategy are replaced wholesale: tolerations, and a container's
    /// args inside a merged container.
    #[test]
    fn atomic_lists_are_replaced() {
        let patch = json!({"spec": {
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "containers": [{"name": "app", "args": ["--quiet"]}],
        }});
        let result = smp(Kind::Pod, &two_containers(), &patch).expect("applies");
        assert_eq!(
            result["spec"]["tolerations"],
            json!([{"key": "gpu", "operator": "Exists"}])
        );
        assert_eq!(result["spec"]["containers"][0]["args"], json!(["--quiet"]));
    }

    /// A status condition merges by type: its other fields stay, the other conditions stay.
    #[test]
    fn status_condition_merged_by_type() {
        let mut pod = two_containers();
        pod["status"] = json!({"conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": "2025-01-01T00:00:00Z"},
        ]});
        let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": null}]}});
        let result = smp(Kind::Pod, &pod, &patch).expect("applies");
        assert_eq!(
            result["status"]["conditions"],
            json!([
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"},
            ])
        );

        let node = json!({"metadata": {"name": "n1"}, "status": {
            "conditions": [{"type": "Ready", "status": "False"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        }});
        let patch = json!({"status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "Hostname", "address": "n1"}],
        }});
        let result = smp(Kind::Node, &node, &patch).expect("applies");
        assert_eq!(
            result["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}])
        );
        assert_eq!(
            result["status"]["addresses"].as_array().map(Vec::len),
            Some(2)
        );
    }

    /// Container ports merge by their numeric key.
    #[test]
    fn ports_merge_by_container_port() {
        let patch = json!({"spec": {"containers": [{"name": "app", "ports": [{"containerPort": 80, "name": "http"}]}]}});
        let result = smp(Kind::Pod, &two_containers(), &patch).expect("applies");
        assert_eq!(
            result["spec"]["containers"][0]["ports"],
            json!([{"containerPort": 80, "name": "http"}])
        );
    }

    /// Misused directives are refused, each with its cause and place.
    #[test]
    fn directive_misuse_is_refused() {
        let cases = [
            (
                json!({"spec": {"nodeSelector": {"$patch": "merge"}}}),
                "UnknownPatchDirective",
            ),
            (
                json!({"spec": {"containers": [{"$patch": "frob", "name": "app"}]}}),
                "UnknownPatchDirective",
            ),
            (
                json!({"metadata": {"finalizers": [{"$patch": "delete"}]}}),
                "UnsupportedListDirective",
            ),
            (
                json!({"spec": {"$setElementOrder/containers": {"name": "app"}}}),
                "DirectiveNotList",
            ),
            (json!({"spec": {"$retainKeys": "name"}}), "DirectiveNotList"),
            (json!({"spec": {"$frobnicate": 1}}), "UnknownDirective"),
            (
                json!({"spec": {"containers": [{"image": "nginx"}]}}),
                "MissingMergeKey",
            ),
            (
                json!({"spec": {"containers": [{"$patch": "delete"}]}}),
                "MissingMergeKey",
            ),
            (
                json!({"spec": {"$setElementOrder/containers": [{"image": "x"}]}}),
                "MissingMergeKey",
            ),
            (json!({"spec": {"containers": ["app"]}}), "ElementNotObject"),
            (
                json!({"spec": {
                    "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
                    "containers": [{"name": "sidecar", "image": "x"}, {"name": "app", "image": "y"}],
                }}),
                "ElementOrderMismatch",
            ),
            (json!({"$patch": "delete"}), "DeletesObject"),
        ];
        for (patch, expected) in cases {
            let error = smp(Kind::Pod, &two_containers(), &patch).expect_err("refused");
            let debug = format!("{error:?}");
            assert!(
                debug.starts_with(expected),
                "{patch}: expected {expected}, got {debug}"
            );
        }
        let error = smp(
            Kind::Pod,
            &two_containers(),
            &json!({"spec": {"containers": [{"image": "nginx"}]}}),
        )
        .expect_err("no name");
        assert_eq!(
            error.to_string(),
            r#"the list spec.containers merges by "name", but a patch element lacks it"#
        );
    }

    proptest! {
        /// `$setElementOrder/containers` naming every container puts them in exactly its order,
        /// whichever of them the patch also changes.
        #[test]
        fn set_element_order_is_obeyed(
            order in Just((0..6).collect::<Vec<usize>>()).prop_shuffle(),
            changed in prop::collection::vec(any::<bool>(), 6),
        ) {
            let name = |i: usize| format!("c{i}");
            let original = pod_with(json!({
                "containers": (0..6).map(|i| json!({"name": name(i), "image": "old"})).collect::<Vec<_>>(),
            }));
            let patch = json!({"spec": {
                "$setElementOrder/containers": order.iter().map(|&i| json!({"name": name(i)})).collect::<Vec<_>>(),
                "containers": order.iter().filter(|&&i| changed[i]).map(|&i| json!({"name": name(i), "image": "new"})).collect::<Vec<_>>(),
            }});
            let result = smp(Kind::Pod, &original, &patch).expect("applies");
            let expected: Vec<String> = order.iter().map(|&i| name(i)).collect();
            prop_assert_eq!(names(&result["spec"]["containers"]), expected.iter().map(String::as_str).collect::<Vec<_>>());
            for container in result["spec"]["containers"].as_array().expect("a list") {
                let i: usize = container["name"].as_str().and_then(|n| n[1..].parse().ok()).expect("cN");
                prop_assert_eq!(&container["image"], if changed[i] { "new" } else { "old" });
            }
        }
    }
}
