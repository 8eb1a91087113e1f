//! The patch types of a PATCH request, applied to the stored object as JSON: JSON patch
//! (RFC 6902), JSON merge patch (RFC 7386) and Kubernetes' strategic merge patch, which kubectl
//! sends by default (`kubectl patch`, and the client-side `kubectl apply`). Server-side apply,
//! the fourth type, also takes the field manager and the recorded field ownership:
//! [`server_side_apply`].
//!
//! | module        | what                                                               |
//! |---------------|--------------------------------------------------------------------|
//! | [`strategic`] | the strategic merge patch engine and its directives                |
//! | [`schema`]    | which lists merge, by what key: Kubernetes' struct tags as a table |
//! | [`apply`]     | server-side apply: field managers, conflicts, managedFields        |
//!
//! Every function is pure: the original is borrowed, the result is a new document, and nothing
//! here decodes, defaults or validates the result, which the caller does as for any write.

mod apply;
mod schema;
mod strategic;

pub use apply::Conflicts;

use serde_json::Value;
use skiff_proto::api::{Kind, Object};

/// The patch types of a PATCH request, by Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json`: RFC 6902, a list of operations.
    Json,
    /// `application/merge-patch+json`: RFC 7386, a partial document where null deletes.
    Merge,
    /// `application/strategic-merge-patch+json`: a merge patch that merges some lists.
    StrategicMerge,
    /// `application/apply-patch+yaml`: server-side apply.
    Apply,
}

impl PatchType {
    const ALL: [PatchType; 4] = [
        PatchType::Json,
        PatchType::Merge,
        PatchType::StrategicMerge,
        PatchType::Apply,
    ];

    /// `application/json-patch+json`, `application/merge-patch+json`,
    /// `application/strategic-merge-patch+json`, `application/apply-patch+yaml` (parameters
    /// such as `; charset=utf-8` ignored, and case, as media types are case-insensitive);
    /// None otherwise.
    pub fn from_content_type(content_type: &str) -> Option<PatchType> {
        let essence = content_type.split(';').next().unwrap_or_default().trim();
        Self::ALL
            .into_iter()
            .find(|patch_type| patch_type.content_type().eq_ignore_ascii_case(essence))
    }

    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }
}

/// Why a patch could not be applied. Every cause lies in the request, so all of them are the
/// client's to fix; `at` fields name a place in the object, as in `spec.containers[name="app"]`.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("the patch is not valid JSON: {0}")]
    MalformedJson(#[source] serde_json::Error),
    #[error("a JSON patch must be a JSON array of operations, not {found}")]
    JsonPatchNotArray { found: &'static str },
    #[error("the JSON patch has an operation that is not one: {0}")]
    InvalidOperation(#[source] serde_json::Error),
    /// An operation of a JSON patch failed; none of the patch is applied.
    #[error("JSON patch operation {index} ({op} {path:?}) failed: {reason}")]
    OperationFailed {
        /// Its place in the patch, from 0.
        index: usize,
        op: &'static str,
        path: String,
        #[source]
        reason: json_patch::PatchErrorKind,
    },
    #[error("a {} body must be a JSON object, not {found}", patch_type.content_type())]
    PatchNotObject {
        patch_type: PatchType,
        found: &'static str,
    },
    #[error("$patch: {value} at {at} is not a patch directive (replace, delete)")]
    UnknownPatchDirective { at: String, value: String },
    #[error("$patch: {value} is not supported in the list {at}")]
    UnsupportedListDirective { at: String, value: String },
    #[error("{directive} at {at} is not a patch directive")]
    UnknownDirective { at: String, directive: String },
    #[error("{directive} at {at} must be a list")]
    DirectiveNotList { at: String, directive: String },
    #[error("the list {at} merges by {key:?}, but a patch element lacks it")]
    MissingMergeKey { at: String, key: &'static str },
    #[error("the list {at} merges by {key:?}, but a patch element is not an object")]
    ElementNotObject { at: String, key: &'static str },
    #[error(
        "$setElementOrder/{field} at {at} omits elements of the patch's {field} list, or orders them otherwise"
    )]
    ElementOrderMismatch { at: String, field: String },
    #[error("$retainKeys at {at} omits {field:?}, which the patch sets")]
    RetainKeysOmitsField { at: String, field: String },
    #[error(
        "a strategic merge patch cannot delete the whole object ($patch: delete at its root); send a DELETE"
    )]
    DeletesObject,
    #[error("server-side apply ({}) is applied by the field manager, not as a patch", PatchType::Apply.content_type())]
    ApplyPatch,
    #[error("the patched object is {found}, not a JSON object")]
    ResultNotObject { found: &'static str },
}

/// Server-side apply of `config` (the applied configuration, as JSON) by `manager` to
/// `current` (`None`: the apply creates the object); refused with the conflicts when it would
/// change fields other managers own, unless `force`.
pub fn server_side_apply(
    kind: Kind,
    current: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
    now: &str,
) -> Result<Value, Conflicts> {
    apply::server_side_apply(schema::for_kind(kind), current, config, manager, force, now)
}

/// The REST API's field manager: it records each create, update and patch other than an
/// apply in the written object's `managedFields`, as the `Update` of `manager` (see
/// [`apply::record_update`]). A write whose object carries no `managedFields` keeps the
/// stored ones, as in Kubernetes (`kubectl replace` of a file without them); one that
/// carries an empty list starts them over.
#[derive(Debug, Clone)]
pub struct FieldManager {
    manager: String,
    subresource: Option<String>,
    time: String,
}

/// The longest field manager name kube-apiserver takes.
const MAX_MANAGER: usize = 128;

impl FieldManager {
    /// The writer of a request: its `fieldManager`, else the product of its User-Agent
    /// (`kubectl/v1.32.0 …` is `kubectl`), as kube-apiserver names it; writing `subresource`
    /// (`status`, `scale`) or the object itself.
    pub fn of_request(
        field_manager: &str,
        user_agent: Option<&str>,
        subresource: Option<&str>,
    ) -> Result<FieldManager, String> {
        if field_manager.len() > MAX_MANAGER {
            return Err(format!(
                "fieldManager: Too long: may not be more than {MAX_MANAGER} bytes"
            ));
        }
        let manager = if field_manager.is_empty() {
            let product = user_agent
                .and_then(|ua| ua.split('/').next())
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .unwrap_or("unknown");
            product.chars().take(MAX_MANAGER).collect()
        } else {
            field_manager.to_string()
        };
        Ok(FieldManager {
            manager,
            subresource: subresource.map(str::to_string),
            time: skiff_proto::api::Time::now().to_string(),
        })
    }
}

impl crate::cluster::FieldTracker for FieldManager {
    fn track(&self, current: Option<&Object>, next: &mut Object) {
        let before = current.map(super::verbs::served);
        let mut after = super::verbs::served(next);
        if after["metadata"].get("managedFields").is_none()
            && let Some(kept) = before
                .as_ref()
                .and_then(|b| b["metadata"].get("managedFields"))
        {
            after["metadata"]["managedFields"] = kept.clone();
        }
        let entries = apply::record_update(
            schema::for_kind(next.kind()),
            before.as_ref(),
            &after,
            &apply::Update {
                manager: &self.manager,
                subresource: self.subresource.as_deref(),
                time: &self.time,
            },
        );
        let other = &mut next.metadata_mut().other.0;
        if entries.is_empty() {
            other.remove("managedFields");
        } else {
            other.insert("managedFields".into(), Value::Array(entries));
        }
    }
}

/// Applies `patch` (raw request body) of `patch_type` to `original` (the stored object as JSON)
/// for an object of `kind`.
pub fn apply(
    kind: Kind,
    patch_type: PatchType,
    original: &Value,
    patch: &[u8],
) -> Result<Value, PatchError> {
    apply_with(schema::for_kind(kind), patch_type, original, patch)
}

/// Applies `patch` to a workload's autoscaling/v1 `Scale` (the `scale` subresource) as JSON.
pub fn apply_to_scale(
    patch_type: PatchType,
    original: &Value,
    patch: &[u8],
) -> Result<Value, PatchError> {
    apply_with(schema::scale(), patch_type, original, patch)
}

fn apply_with(
    schema: &'static schema::Schema,
    patch_type: PatchType,
    original: &Value,
    patch: &[u8],
) -> Result<Value, PatchError> {
    let parse = || serde_json::from_slice::<Value>(patch).map_err(PatchError::MalformedJson);
    let result = match patch_type {
        PatchType::Json => json_patch(original, parse()?)?,
        PatchType::Merge => {
            let patch = parse()?;
            require_object(patch_type, &patch)?;
            let mut result = original.clone();
            json_patch::merge(&mut result, &patch);
            result
        }
        PatchType::StrategicMerge => {
            let patch = parse()?;
            strategic::apply(schema, original, require_object(patch_type, &patch)?)?
        }
        PatchType::Apply => return Err(PatchError::ApplyPatch),
    };
    if !result.is_object() {
        return Err(PatchError::ResultNotObject {
            found: json_type(&result),
        });
    }
    Ok(result)
}

fn json_patch(original: &Value, patch: Value) -> Result<Value, PatchError> {
    if !patch.is_array() {
        return Err(PatchError::JsonPatchNotArray {
            found: json_type(&patch),
        });
    }
    let operations: json_patch::Patch =
        serde_json::from_value(patch).map_err(PatchError::InvalidOperation)?;
    // Applied to a copy, dropped on failure: json-patch's own rollback (`patch`) can panic
    // undoing a `move` whose target failed (found by the `rest_patch` fuzz target).
    let mut result = original.clone();
    json_patch::patch_unsafe(&mut result, &operations).map_err(|error| {
        PatchError::OperationFailed {
            index: error.operation,
            op: operations
                .0
                .get(error.operation)
                .map_or("unknown", operation_name),
            path: error.path.to_string(),
            reason: error.kind,
        }
    })?;
    Ok(result)
}

fn operation_name(operation: &json_patch::PatchOperation) -> &'static str {
    use json_patch::PatchOperation as Op;
    match operation {
        Op::Add(_) => "add",
        Op::Remove(_) => "remove",
        Op::Replace(_) => "replace",
        Op::Move(_) => "move",
        Op::Copy(_) => "copy",
        Op::Test(_) => "test",
    }
}

fn require_object(
    patch_type: PatchType,
    patch: &Value,
) -> Result<&serde_json::Map<String, Value>, PatchError> {
    patch.as_object().ok_or(PatchError::PatchNotObject {
        patch_type,
        found: json_type(patch),
    })
}

/// What a JSON value is, for messages.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Map, json};

    use super::*;

    fn pod() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web", "tier": "front"}},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]},
        })
    }

    fn patch(patch_type: PatchType, body: &Value) -> Result<Value, PatchError> {
        apply(Kind::Pod, patch_type, &pod(), body.to_string().as_bytes())
    }

    /// Every patch type is found by its Content-Type, with parameters and in any case, and
    /// nothing else is.
    #[test]
    fn content_types_round_trip() {
        for patch_type in PatchType::ALL {
            assert_eq!(
                PatchType::from_content_type(patch_type.content_type()),
                Some(patch_type)
            );
        }
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchType::Merge)
        );
        assert_eq!(
            PatchType::from_content_type("Application/Strategic-Merge-Patch+JSON"),
            Some(PatchType::StrategicMerge)
        );
        assert_eq!(PatchType::from_content_type("application/json"), None);
        assert_eq!(PatchType::from_content_type(""), None);
    }

    /// A JSON patch's operations apply in order, `test` included.
    #[test]
    fn json_patch_applies_operations() {
        let result = patch(
            PatchType::Json,
            &json!([
                {"op": "test", "path": "/metadata/labels/app", "value": "web"},
                {"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:1.28"},
                {"op": "add", "path": "/metadata/labels/env", "value": "prod"},
                {"op": "remove", "path": "/metadata/labels/tier"},
            ]),
        )
        .expect("patch applies");
        assert_eq!(result["spec"]["containers"][0]["image"], "nginx:1.28");
        assert_eq!(
            result["metadata"]["labels"],
            json!({"app": "web", "env": "prod"})
        );
    }

    /// A failed `test` names the operation by its index and path, and leaves nothing applied.
    #[test]
    fn json_patch_test_failure_names_the_operation() {
        let error = patch(
            PatchType::Json,
            &json!([
                {"op": "add", "path": "/metadata/labels/env", "value": "prod"},
                {"op": "test", "path": "/metadata/labels/app", "value": "db"},
            ]),
        )
        .expect_err("test fails");
        match &error {
            PatchError::OperationFailed {
                index: 1,
                op: "test",
                path,
                reason,
            } => {
                assert_eq!(path, "/metadata/labels/app");
                assert!(
                    matches!(reason, json_patch::PatchErrorKind::TestFailed),
                    "{reason:?}"
                );
            }
            other => panic!("unexpected error {other:?}"),
        }
        assert!(error.to_string().contains("operation 1 (test"), "{error}");
    }

    /// Removing what is not there fails, naming the operation.
    #[test]
    fn json_patch_missing_path_fails() {
        let error = patch(
            PatchType::Json,
            &json!([{"op": "remove", "path": "/spec/nodeName"}]),
        )
        .expect_err("nothing to remove");
        assert!(
            matches!(
                error,
                PatchError::OperationFailed {
                    index: 0,
                    op: "remove",
                    ..
                }
            ),
            "{error:?}"
        );
    }

    /// A JSON patch body must be an array of well-formed operations.
    #[test]
    fn json_patch_shape_errors() {
        let error = patch(PatchType::Json, &json!({"op": "add"})).expect_err("not an array");
        assert!(
            matches!(error, PatchError::JsonPatchNotArray { found: "an object" }),
            "{error:?}"
        );
        let error = patch(
            PatchType::Json,
            &json!([{"op": "frobnicate", "path": "/a"}]),
        )
        .expect_err("bad op");
        assert!(
            matches!(error, PatchError::InvalidOperation(_)),
            "{error:?}"
        );
    }

    /// A JSON patch may replace the whole document, but the result must still be an object.
    #[test]
    fn json_patch_result_must_be_an_object() {
        let error = patch(
            PatchType::Json,
            &json!([{"op": "replace", "path": "", "value": 7}]),
        )
        .expect_err("not object");
        assert!(
            matches!(error, PatchError::ResultNotObject { found: "a number" }),
            "{error:?}"
        );
    }

    /// A merge patch merges objects, deletes on null and replaces lists wholesale.
    #[test]
    fn merge_patch_merges_and_deletes() {
        let result = patch(
            PatchType::Merge,
            &json!({
                "metadata": {"labels": {"tier": null, "env": "prod"}},
                "spec": {"containers": [{"name": "sidecar", "image": "envoy"}]},
            }),
        )
        .expect("patch applies");
        assert_eq!(
            result["metadata"]["labels"],
            json!({"app": "web", "env": "prod"})
        );
        assert_eq!(
            result["spec"]["containers"],
            json!([{"name": "sidecar", "image": "envoy"}])
        );
        assert_eq!(result["metadata"]["name"], "web");
    }

    /// Merge and strategic merge patches must be objects.
    #[test]
    fn merge_patch_must_be_an_object() {
        for patch_type in [PatchType::Merge, PatchType::StrategicMerge] {
            let error = patch(patch_type, &json!([1, 2])).expect_err("not an object");
            assert!(
                matches!(
                    error,
                    PatchError::PatchNotObject {
                        found: "an array",
                        ..
                    }
                ),
                "{error:?}"
            );
            assert!(
                error.to_string().contains(patch_type.content_type()),
                "{error}"
            );
        }
    }

    /// A body that is not JSON is refused with serde's message, whatever the type.
    #[test]
    fn malformed_json_is_refused() {
        for patch_type in [PatchType::Json, PatchType::Merge, PatchType::StrategicMerge] {
            let error =
                apply(Kind::Pod, patch_type, &pod(), b"{\"metadata\": ").expect_err("malformed");
            assert!(matches!(error, PatchError::MalformedJson(_)), "{error:?}");
            assert!(error.to_string().contains("EOF"), "{error}");
        }
    }

    /// Server-side apply is not this module's, even when its body would parse.
    #[test]
    fn apply_patches_are_refused() {
        let error = apply(Kind::Pod, PatchType::Apply, &pod(), b"{}").expect_err("apply");
        assert!(matches!(error, PatchError::ApplyPatch), "{error:?}");
    }

    /// Any JSON value, or one without nulls: what a merge patch can produce.
    fn document(with_nulls: bool) -> impl Strategy<Value = Value> {
        let key = prop::sample::select(vec!["a", "b", "c", "d", "e"]);
        let scalar = prop_oneof![
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(Value::from),
            "[a-z]{0,3}".prop_map(Value::String),
        ];
        let leaf = if with_nulls {
            prop_oneof![scalar, Just(Value::Null)].boxed()
        } else {
            scalar.boxed()
        };
        leaf.prop_recursive(4, 32, 4, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(key.clone(), inner, 0..4).prop_map(
                    |map| Value::Object(map.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
                ),
            ]
        })
    }

    fn object(with_nulls: bool) -> impl Strategy<Value = Value> {
        prop::collection::btree_map("[a-e]", document(with_nulls), 0..5)
            .prop_map(|map| Value::Object(map.into_iter().collect()))
    }

    /// The merge patch that turns `from` into `to` (neither holding nulls in objects): the naive
    /// model of RFC 7386, recursing where both sides are objects.
    fn merge_diff(from: &Map<String, Value>, to: &Map<String, Value>) -> Value {
        let mut patch = Map::new();
        for key in from.keys().filter(|key| !to.contains_key(*key)) {
            patch.insert(key.clone(), Value::Null);
        }
        for (key, value) in to {
            match (from.get(key), value) {
                (Some(old), new) if old == new => {}
                (Some(Value::Object(old)), Value::Object(new)) => {
                    patch.insert(key.clone(), merge_diff(old, new));
                }
                _ => {
                    patch.insert(key.clone(), value.clone());
                }
            }
        }
        Value::Object(patch)
    }

    proptest! {
        /// A JSON patch of `diff(a, b)` turns `a` into `b`.
        #[test]
        fn json_patch_of_diff_gives_target(a in object(true), b in object(true)) {
            let diff = serde_json::to_vec(&json_patch::diff(&a, &b)).expect("a patch serializes");
            prop_assert_eq!(apply(Kind::Pod, PatchType::Json, &a, &diff).expect("diff applies"), b);
        }

        /// A merge patch of the merge diff of `a` and `b` turns `a` into `b`, and so does the
        /// same body as a strategic merge patch where neither the schema nor a directive
        /// applies (keys `a`..`e` name no field of a Pod): strategic merge patch is a superset.
        #[test]
        fn merge_patch_of_diff_gives_target(a in object(false), b in object(false)) {
            let (Value::Object(from), Value::Object(to)) = (&a, &b) else {
                unreachable!("the strategy makes objects");
            };
            let body = merge_diff(from, to).to_string();
            prop_assert_eq!(&apply(Kind::Pod, PatchType::Merge, &a, body.as_bytes()).expect("applies"), &b);
            prop_assert_eq!(&apply(Kind::Pod, PatchType::StrategicMerge, &a, body.as_bytes()).expect("applies"), &b);
        }
    }
}
