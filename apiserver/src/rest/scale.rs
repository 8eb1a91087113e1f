//! The `scale` subresource of Deployments, ReplicaSets and the declared kinds that have one
//! (StatefulSets, ReplicationControllers): the workload's replica count as an
//! autoscaling/v1 `Scale`, which `kubectl scale` and autoscalers read and write without
//! knowing the workload's kind.
//!
//! ```text
//! {"apiVersion": "autoscaling/v1", "kind": "Scale",
//!  "metadata": {name, namespace, uid, resourceVersion, creationTimestamp}   ← the workload's
//!  "spec":   {"replicas": 3}                                                ← spec.replicas
//!  "status": {"replicas": 2, "selector": "app=web"}}                        ← status.replicas,
//!                                                                             spec.selector
//! ```
//!
//! A Scale is never stored. A write (PUT, or PATCH applied to the Scale as read) changes the
//! workload's `spec.replicas` and nothing else, through [`ClusterApi::update`] like every other
//! write: defaults, validation (a negative count is refused there, as `spec.replicas`), and
//! compare-and-swap against the workload's resourceVersion. A `resourceVersion` in the Scale
//! pins the write to that version of the workload (409 when it moved on); without one, a write
//! that lost a race is made again on the newer version.

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use skiff_proto::api::{GenericObject, Kind, LabelSelector, Object, custom};
use skiff_proto::selector::LabelQuery;

use super::patch::{self, PatchType};
use super::request::{Params, Target, content_type, object_body};
use super::status::{ApiError, Reason};
use super::verbs::json_response;
use crate::cluster::{ClusterApi, ClusterError, Part, Stored, conflict, not_found};

/// Attempts at a write that lost a race with another writer of the workload.
const ATTEMPTS: usize = 8;

/// The group version and kind of a Scale.
const API_VERSION: &str = "autoscaling/v1";
const KIND: &str = "Scale";

/// What a client's Scale says: its identity, to be checked against the path and the workload,
/// and the replica count. Other fields (the status) are the server's and are ignored.
#[derive(Debug, Default, Deserialize)]
struct ScaleRequest {
    #[serde(default, rename = "apiVersion")]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: ScaleMeta,
    #[serde(default)]
    spec: ScaleSpec,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ScaleMeta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    resource_version: String,
}

#[derive(Debug, Default, Deserialize)]
struct ScaleSpec {
    /// Absent is 0, as autoscaling/v1 leaves a 0 out.
    #[serde(default)]
    replicas: i32,
}

/// A declared workload's selector: a label selector, or (a ReplicationController's) a plain
/// map of labels.
fn workload_selector(o: &GenericObject) -> LabelSelector {
    let selector = o.at("/spec/selector").cloned().unwrap_or_default();
    serde_json::from_value::<LabelSelector>(selector.clone())
        .ok()
        .filter(|s| !s.match_labels.is_empty() || !s.match_expressions.is_empty())
        .or_else(|| {
            serde_json::from_value(selector)
                .ok()
                .map(|match_labels| LabelSelector {
                    match_labels,
                    ..LabelSelector::default()
                })
        })
        .unwrap_or_default()
}

/// The Scale of a stored workload.
pub fn scale_of(workload: &Object) -> Result<Value, ApiError> {
    // Validation admits only selectors that convert; an empty one selects everything.
    let text = |selector: &LabelSelector| {
        LabelQuery::try_from(selector)
            .map(|q| q.to_string())
            .unwrap_or_default()
    };
    let (replicas, observed, selector) = match workload {
        Object::Deployment(d) => (
            d.replicas(),
            d.status.as_ref().map_or(0, |s| s.replicas),
            text(&d.spec.selector),
        ),
        Object::ReplicaSet(rs) => (
            rs.replicas(),
            rs.status.as_ref().map_or(0, |s| s.replicas),
            text(&rs.spec.selector),
        ),
        Object::Generic(g, o) if g.info().scale => {
            let count = |pointer: &str| {
                o.int(pointer)
                    .and_then(|n| i32::try_from(n).ok())
                    .unwrap_or(0)
            };
            match custom::live(*g).and_then(|l| l.scale.clone()) {
                // A custom kind's paths are its CRD's; its selector is already a string.
                Some(paths) => (
                    count(&paths.spec_replicas),
                    count(&paths.status_replicas),
                    paths
                        .label_selector
                        .as_deref()
                        .map(|p| o.text(p).to_owned())
                        .unwrap_or_default(),
                ),
                None => (
                    count("/spec/replicas"),
                    count("/status/replicas"),
                    text(&workload_selector(o)),
                ),
            }
        }
        other => return Err(no_scale(other.kind())),
    };
    let m = workload.metadata();
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(m.name));
    metadata.insert("namespace".into(), json!(m.namespace));
    metadata.insert("uid".into(), json!(m.uid));
    metadata.insert("resourceVersion".into(), json!(m.resource_version));
    if let Some(created) = &m.creation_timestamp {
        metadata.insert("creationTimestamp".into(), json!(created));
    }
    let mut spec = Map::new();
    if replicas != 0 {
        spec.insert("replicas".into(), json!(replicas));
    }
    let mut status = Map::new();
    status.insert("replicas".into(), json!(observed));
    if !selector.is_empty() {
        status.insert("selector".into(), json!(selector));
    }
    Ok(json!({
        "kind": KIND,
        "apiVersion": API_VERSION,
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }))
}

fn no_scale(kind: Kind) -> ApiError {
    ApiError::new(
        Reason::NotFound,
        format!(
            "the server could not find the requested resource ({}/scale)",
            kind.plural()
        ),
    )
}

/// The workload `target` names, read linearizably.
async fn workload(api: &ClusterApi, target: &Target) -> Result<Stored, ApiError> {
    api.barrier(false).await?;
    let (_, found) = api.get_local(target.kind, &target.namespace, &target.name)?;
    Ok(found.ok_or_else(|| not_found(target.kind, &target.name))?)
}

fn scale_response(workload: &Object) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, &scale_of(workload)?, &[]))
}

/// GET `<workload>/scale`.
pub async fn get(api: &ClusterApi, target: &Target, params: &Params) -> Result<Response, ApiError> {
    api.barrier(params.resource_version == "0").await?;
    let (_, found) = api.get_local(target.kind, &target.namespace, &target.name)?;
    let found = found.ok_or_else(|| not_found(target.kind, &target.name))?;
    scale_response(&found.object)
}

/// Reads a Scale a client sent (or a patch produced) and checks it against the path and the
/// workload it scales.
fn read_request(target: &Target, value: Value, current: &Stored) -> Result<ScaleRequest, ApiError> {
    let request: ScaleRequest = serde_json::from_value(value).map_err(|e| {
        ApiError::bad_request(format!("the Scale in the request does not decode: {e}"))
    })?;
    if !request.api_version.is_empty() && request.api_version != API_VERSION {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({}) does not match the expected API version ({API_VERSION})",
            request.api_version
        )));
    }
    if !request.kind.is_empty() && request.kind != KIND {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({}) does not match the expected kind ({KIND})",
            request.kind
        )));
    }
    let m = &request.metadata;
    if !m.name.is_empty() && m.name != target.name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({})",
            m.name, target.name
        )));
    }
    if !m.namespace.is_empty() && m.namespace != target.namespace {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let uid = &current.object.metadata().uid;
    if !m.uid.is_empty() && m.uid != *uid {
        return Err(ApiError::new(
            Reason::Conflict,
            format!(
                "Precondition failed: UID in precondition: {}, UID in object meta: {uid}",
                m.uid
            ),
        ));
    }
    Ok(request)
}

/// The resourceVersion a Scale pins its write to, if it names one.
fn pinned(request: &ScaleRequest) -> Result<Option<i64>, ApiError> {
    match request.metadata.resource_version.as_str() {
        "" => Ok(None),
        rv => rv.parse().map(Some).map_err(|_| {
            ClusterError::BadResourceVersion {
                value: rv.to_string(),
            }
            .into()
        }),
    }
}

/// The workload read as `current` with `replicas`, to be written compare-and-swap against
/// `resource_version`.
fn with_replicas(
    current: &Stored,
    replicas: i32,
    resource_version: i64,
) -> Result<Object, ApiError> {
    let mut next = current.object.clone();
    match &mut next {
        Object::Deployment(d) => d.spec.replicas = Some(replicas),
        Object::ReplicaSet(rs) => rs.spec.replicas = Some(replicas),
        Object::Generic(g, o) if g.info().scale => {
            let pointer = custom::live(*g)
                .and_then(|l| l.scale.as_ref().map(|p| p.spec_replicas.clone()))
                .unwrap_or_else(|| "/spec/replicas".to_owned());
            let (parent, field) = pointer.rsplit_once('/').expect("invariant: a JSON pointer");
            o.object_at(parent)
                .insert(field.to_owned(), json!(replicas));
        }
        other => return Err(no_scale(other.kind())),
    }
    next.metadata_mut().resource_version = resource_version.to_string();
    Ok(next)
}

/// PUT `<workload>/scale`.
pub async fn update(
    api: &ClusterApi,
    target: &Target,
    params: &Params,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let value = object_body(headers, body)?;
    let api = &super::verbs::tracked(api, target, params, headers)?;
    for _ in 0..ATTEMPTS {
        let current = workload(api, target).await?;
        let request = read_request(target, value.clone(), &current)?;
        let pinned = pinned(&request)?;
        let next = with_replicas(
            &current,
            request.spec.replicas,
            pinned.unwrap_or(current.mod_revision),
        )?;
        match api.update(next, Part::Main, params.dry_run).await {
            Ok((_, updated)) => return scale_response(&updated),
            Err(ClusterError::Conflict { .. }) if pinned.is_none() => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(conflict(target.kind, &target.name).into())
}

/// PATCH `<workload>/scale`: the patch applies to the Scale as read, and the result is
/// written as a PUT of it would be, again on a lost race unless the patch pins a
/// `resourceVersion`.
pub async fn patch(
    api: &ClusterApi,
    target: &Target,
    params: &Params,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let ct = content_type(headers);
    let patch_type = match PatchType::from_content_type(&ct) {
        Some(PatchType::Apply) => {
            return Err(ApiError::bad_request(
                "server-side apply is served on the object itself, not its subresources",
            ));
        }
        Some(t) => t,
        None => {
            return Err(ApiError::new(
                Reason::UnsupportedMediaType,
                format!(
                    "the body of the request was in an unknown format - accepted media types \
                     include: application/json-patch+json, application/merge-patch+json, \
                     application/strategic-merge-patch+json (got {ct:?})"
                ),
            ));
        }
    };
    let api = &super::verbs::tracked(api, target, params, headers)?;
    for _ in 0..ATTEMPTS {
        let current = workload(api, target).await?;
        let original = scale_of(&current.object)?;
        let patched = patch::apply_to_scale(patch_type, &original, body)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let request = read_request(target, patched, &current)?;
        let pinned = pinned(&request)?.filter(|rv| *rv != current.mod_revision);
        let next = with_replicas(
            &current,
            request.spec.replicas,
            pinned.unwrap_or(current.mod_revision),
        )?;
        match api.update(next, Part::Main, params.dry_run).await {
            Ok((_, updated)) => return scale_response(&updated),
            Err(ClusterError::Conflict { .. }) if pinned.is_none() => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ClusterError::Contended {
        kind: target.kind,
        name: target.name.clone(),
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_proto::api::Deployment;

    fn deployment(yaml: &str) -> Object {
        let mut d: Deployment = serde_yaml_ng::from_str(yaml).expect("decodes");
        d.metadata.resource_version = "12".into();
        Object::Deployment(d)
    }

    /// A workload's Scale: its identity, spec.replicas, status.replicas and the selector as a
    /// string, in autoscaling/v1's shape (a 0 left out of the spec).
    #[test]
    fn scale_of_a_deployment() {
        let d = deployment(
            "metadata: {name: web, namespace: default, uid: u1, creationTimestamp: '2025-06-01T12:00:00Z'}\n\
             spec: {replicas: 3, selector: {matchLabels: {app: web}}}\n\
             status: {replicas: 2}\n",
        );
        assert_eq!(
            scale_of(&d).unwrap(),
            json!({
                "kind": "Scale",
                "apiVersion": "autoscaling/v1",
                "metadata": {
                    "name": "web", "namespace": "default", "uid": "u1",
                    "resourceVersion": "12", "creationTimestamp": "2025-06-01T12:00:00Z",
                },
                "spec": {"replicas": 3},
                "status": {"replicas": 2, "selector": "app=web"},
            })
        );
        let zero = deployment("metadata: {name: web}\nspec: {replicas: 0}\n");
        let scale = scale_of(&zero).unwrap();
        assert_eq!(scale["spec"], json!({}));
        assert_eq!(scale["status"], json!({"replicas": 0}));
    }

    /// A Scale must name the path's workload and the workload's uid; its type, when given,
    /// must be autoscaling/v1 Scale; a resourceVersion pins.
    #[test]
    fn requests_are_checked_against_the_path() {
        let current = Stored {
            object: deployment("metadata: {name: web, namespace: default, uid: u1}\n"),
            mod_revision: 12,
        };
        let target = Target {
            kind: Kind::Deployment,
            namespace: "default".into(),
            name: "web".into(),
            subresource: Some("scale".into()),
        };
        let read = |v: Value| read_request(&target, v, &current);
        let ok =
            read(json!({"metadata": {"resourceVersion": "9"}, "spec": {"replicas": 5}})).unwrap();
        assert_eq!(ok.spec.replicas, 5);
        assert_eq!(pinned(&ok).unwrap(), Some(9));
        assert_eq!(read(json!({})).unwrap().spec.replicas, 0);
        for (bad, reason) in [
            (json!({"metadata": {"name": "db"}}), Reason::BadRequest),
            (json!({"metadata": {"namespace": "x"}}), Reason::BadRequest),
            (json!({"kind": "Deployment"}), Reason::BadRequest),
            (json!({"apiVersion": "apps/v1"}), Reason::BadRequest),
            (json!({"spec": {"replicas": "five"}}), Reason::BadRequest),
            (json!({"metadata": {"uid": "u2"}}), Reason::Conflict),
        ] {
            assert_eq!(read(bad.clone()).unwrap_err().reason, reason, "{bad}");
        }
        let rv = read(json!({"metadata": {"resourceVersion": "x"}})).unwrap();
        assert_eq!(pinned(&rv).unwrap_err().reason, Reason::BadRequest);
    }

    /// kubectl scale's merge patch and a JSON patch both change only the replica count.
    #[test]
    fn patches_apply_to_the_scale() {
        let d = deployment(
            "metadata: {name: web, namespace: default}\nspec: {replicas: 3, selector: {matchLabels: {app: web}}}\n",
        );
        let original = scale_of(&d).unwrap();
        let merged =
            patch::apply_to_scale(PatchType::Merge, &original, br#"{"spec":{"replicas":5}}"#)
                .unwrap();
        assert_eq!(merged["spec"]["replicas"], 5);
        assert_eq!(merged["metadata"], original["metadata"]);
        let strategic = patch::apply_to_scale(
            PatchType::StrategicMerge,
            &original,
            br#"{"spec":{"replicas":0}}"#,
        )
        .unwrap();
        assert_eq!(strategic["spec"]["replicas"], 0);
        let json_patch = patch::apply_to_scale(
            PatchType::Json,
            &original,
            br#"[{"op":"replace","path":"/spec/replicas","value":7}]"#,
        )
        .unwrap();
        assert_eq!(json_patch["spec"]["replicas"], 7);
    }
}
