//! The verbs on resources: get, list, create, update, patch, delete, deletecollection, and the
//! pods/binding and pods/eviction subresources. Each decodes its request with kube-apiserver's
//! rules and calls the cluster API's one implementation of the operation.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde_json::{Value, json};
use skiff_proto::api::{DeletionPropagation, FieldValidation, Kind, Object};
use skiff_proto::cluster::v1 as pb;

use super::patch::{self, PatchType};
use super::request::{Accept, Params, Target, content_type, object_body};
use super::status::{ApiError, Reason};
use super::table::{self, IncludeObject};
use crate::cluster::watch::Filter;
use crate::cluster::{ClusterApi, ClusterError, DeleteOptions, Part, decode_request, not_found};

/// Attempts at a patch that lost a race with another writer.
const ATTEMPTS: usize = 8;

/// `api`, recording what a write of the request (of `target`'s object or subresource)
/// changes as its field manager's ([`patch::FieldManager`]).
pub(super) fn tracked(
    api: &ClusterApi,
    target: &Target,
    params: &Params,
    headers: &HeaderMap,
) -> Result<ClusterApi, ApiError> {
    let user_agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    let manager = patch::FieldManager::of_request(
        &params.field_manager,
        user_agent,
        target.subresource.as_deref(),
    )
    .map_err(|message| ApiError::new(Reason::Invalid, message))?;
    Ok(api.tracked_by(std::sync::Arc::new(manager)))
}

/// An object as served: its JSON with `apiVersion` and `kind`.
pub fn served(object: &Object) -> Value {
    let mut o = object.clone();
    o.set_type_meta();
    o.to_json_value()
}

/// A JSON response with `code`, and kube-apiserver's `Warning` headers.
pub fn json_response(code: StatusCode, body: &Value, warnings: &[String]) -> Response {
    let bytes = serde_json::to_vec(body).expect("invariant: JSON values always encode");
    let mut response = (
        code,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response();
    for w in warnings {
        // RFC 7234 warn-code 299 "miscellaneous persistent warning", as kube-apiserver sends.
        let text = format!("299 - \"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""));
        if let Ok(v) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
    response
}

/// One object in the representation the client accepts.
fn object_response(
    kind: Kind,
    object: &Object,
    accept: Accept,
    params: &Params,
    code: StatusCode,
    warnings: &[String],
) -> Result<Response, ApiError> {
    let value = served(object);
    let body = match accept {
        Accept::Json => value,
        Accept::Metadata => partial_metadata(&value),
        Accept::Table => {
            let rv = object.metadata().resource_version.clone();
            table::table(
                kind,
                &[value],
                json!({ "resourceVersion": rv }),
                include_object(params)?,
                true,
                Utc::now(),
            )
        }
    };
    Ok(json_response(code, &body, warnings))
}

fn partial_metadata(object: &Value) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

pub fn include_object(params: &Params) -> Result<IncludeObject, ApiError> {
    if params.include_object.is_empty() {
        return Ok(IncludeObject::Metadata);
    }
    IncludeObject::parse(&params.include_object).ok_or_else(|| {
        ApiError::bad_request(format!(
            "includeObject: unsupported value {:?}: supported values: \"None\", \"Metadata\", \"Object\"",
            params.include_object
        ))
    })
}

/// The selectors of a list, watch or deletecollection.
pub fn filter(kind: Kind, params: &Params) -> Result<Filter, ApiError> {
    let selectors = pb::Selectors {
        label_selector: params.label_selector.clone(),
        field_selector: params.field_selector.clone(),
    };
    Ok(Filter::parse(kind, Some(&selectors))?)
}

fn no_subresource(target: &Target, verb: &str) -> Result<(), ApiError> {
    match &target.subresource {
        None => Ok(()),
        Some(sub) => Err(ApiError::new(
            Reason::MethodNotAllowed,
            format!(
                "the server does not allow this method on the requested resource ({verb} {}/{sub})",
                target.kind.plural()
            ),
        )),
    }
}

/// Whether an update or patch writes the status (`/status`) or the rest of the object.
fn status_write(target: &Target) -> Result<Part, ApiError> {
    let part = match target.subresource.as_deref() {
        None => return Ok(Part::Main),
        Some("status") => Part::Status,
        Some("approval") => Part::Approval,
        Some("finalize") => Part::Finalize,
        Some(_) => Part::Main,
    };
    match target.subresource.as_deref() {
        Some(sub)
            if part != Part::Main
                && super::discovery::resource(target.kind)
                    .is_some_and(|r| r.subresource(sub).is_some()) =>
        {
            Ok(part)
        }
        sub => Err(ApiError::new(
            Reason::NotFound,
            format!(
                "the server could not find the requested resource ({}/{})",
                target.kind.plural(),
                sub.unwrap_or_default()
            ),
        )),
    }
}

/// GET of one object (or its status).
pub async fn get(
    api: &ClusterApi,
    target: &Target,
    params: &Params,
    accept: Accept,
) -> Result<Response, ApiError> {
    status_write(target)?;
    api.barrier(params.resource_version == "0").await?;
    let (_, found) = api.get_local(target.kind, &target.namespace, &target.name)?;
    let found = found.ok_or_else(|| not_found(target.kind, &target.name))?;
    object_response(
        target.kind,
        &found.object,
        accept,
        params,
        StatusCode::OK,
        &[],
    )
}

/// GET of a collection: one page, as a `<Kind>List`, a Table, or metadata only.
pub async fn list(
    api: &ClusterApi,
    target: &Target,
    params: &Params,
    accept: Accept,
) -> Result<Response, ApiError> {
    no_subresource(target, "list")?;
    let filter = filter(target.kind, params)?;
    let page = api
        .list(
            target.kind,
            &target.namespace,
            &filter,
            params.limit,
            &params.continue_token,
            params.read_at()?,
        )
        .await?;
    let mut list_meta = json!({ "resourceVersion": page.revision.to_string() });
    if !page.continue_token.is_empty() {
        list_meta["continue"] = json!(page.continue_token);
    }
    let items: Vec<Value> = page.items.iter().map(|s| served(&s.object)).collect();
    let body = match accept {
        Accept::Json => json!({
            "apiVersion": target.kind.api_version(),
            "kind": format!("{}List", target.kind.name()),
            "metadata": list_meta,
            "items": items,
        }),
        Accept::Metadata => json!({
            "apiVersion": "meta.k8s.io/v1",
            "kind": "PartialObjectMetadataList",
            "metadata": list_meta,
            "items": items.iter().map(partial_metadata).collect::<Vec<_>>(),
        }),
        Accept::Table => table::table(
            target.kind,
            &items,
            list_meta,
            include_object(params)?,
            true,
            Utc::now(),
        ),
    };
    Ok(json_response(StatusCode::OK, &body, &[]))
}

/// Checks the type, name and namespace of a body against the path, filling in what the body
/// leaves out, as kube-apiserver does.
fn match_path(target: &Target, body: &mut Value, kind: Kind) -> Result<(), ApiError> {
    let api_version = body.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if !api_version.is_empty() && api_version != kind.api_version() {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            kind.api_version()
        )));
    }
    let body_kind = body.get("kind").and_then(Value::as_str).unwrap_or("");
    if !body_kind.is_empty() && body_kind != kind.name() {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({body_kind}) does not match the expected kind ({})",
            kind.name()
        )));
    }
    body["apiVersion"] = json!(kind.api_version());
    body["kind"] = json!(kind.name());
    if !body.get("metadata").is_some_and(Value::is_object) {
        body["metadata"] = json!({});
    }
    let meta = &mut body["metadata"];
    if kind.is_namespaced() {
        let ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("");
        if ns.is_empty() {
            meta["namespace"] = json!(target.namespace);
        } else if ns != target.namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    if !target.name.is_empty() {
        let name = meta.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            meta["name"] = json!(target.name);
        } else if name != target.name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({name}) does not match the name on the URL ({})",
                target.name
            )));
        }
    }
    Ok(())
}

pub(super) fn encode(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("invariant: JSON values always encode")
}

/// kube-apiserver's default when a request names no `fieldValidation`.
pub(super) fn validation(params: &Params) -> FieldValidation {
    params.field_validation.unwrap_or_default()
}

/// POST to a collection: create (with `generateName`), or a Binding through `bindings`.
pub async fn create(
    api: &ClusterApi,
    target: &Target,
    params: &Params,
    accept: Accept,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    no_subresource(target, "create")?;
    if target.kind == Kind::Binding {
        return bind(api, target, headers, body).await;
    }
    if target.kind.is_namespaced() && target.namespace.is_empty() {
        return Err(ApiError::new(
            Reason::MethodNotAllowed,
            format!(
                "{} are created in a namespace: POST /api/v1/namespaces/<namespace>/{}",
                target.kind.plural(),
                target.kind.plural()
            ),
        ));
    }
    let mut value = object_body(headers, body)?;
    match_path(target, &mut value, target.kind)?;
    // A name from `generateName` is made (and made again if taken) by the create itself.
    let (object, warnings) = decode_request(target.kind, &encode(&value), validation(params))?;
    let api = tracked(api, target, params, headers)?;
    let (_, created) = api.create(object, params.dry_run).await?;
    object_response(
        target.kind,
        &created,
        accept,
        params,
        StatusCode::CREATED,
        &warnings,
    )
}

/// PUT of an object or its status. A `resourceVersion` in the body makes it compare-and-swap.
pub async fn update(
    api: &ClusterApi,
    target: &Target,
    params: &Params,
    accept: Accept,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let status = status_write(target)?;
    let mut value = object_body(headers, body)?;
    match_path(target, &mut value, target.kind)?;
    let (object, warnings) = decode_request(target.kind, &encode(&value), validation(params))?;
    let api = tracked(api, target, params, headers)?;
    let (_, updated) = api.update(object, status, params.dry_run).await?;
    object_response(
        target.kind,
        &updated,
        accept,
        params,
        StatusCode::OK,
        &warnings,
    )
}

/// PATCH of an object or its status: the patch is applied to the stored object and the result
/// written with compare-and-swap against the version patched, again on a lost race unless the
/// patch itself pins a `resourceVersion`.
pub async fn patch(
    api: &ClusterApi,
    target: &Target,
    params: &Params,
    accept: Accept,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let status = status_write(target)?;
    let ct = content_type(headers);
    let patch_type = PatchType::from_content_type(&ct).ok_or_else(|| {
        ApiError::new(
            Reason::UnsupportedMediaType,
            format!(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, \
                 application/strategic-merge-patch+json (got {ct:?})"
            ),
        )
    })?;
    if patch_type == PatchType::Apply {
        return server_side_apply(api, target, params, accept, body).await;
    }
    // A custom kind's schema says nothing of merge keys, so strategic merge has no meaning
    // for it (kube-apiserver refuses it alike; kubectl then sends a merge patch).
    if patch_type == PatchType::StrategicMerge
        && matches!(target.kind, Kind::Generic(g) if g.custom_index().is_some())
    {
        return Err(ApiError::new(
            Reason::UnsupportedMediaType,
            format!(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, \
                 application/apply-patch+yaml (strategic merge patch is not supported for the \
                 custom resource {})",
                target.kind.qualified_resource()
            ),
        ));
    }
    let api = &tracked(api, target, params, headers)?;
    for _ in 0..ATTEMPTS {
        api.barrier(false).await?;
        let (_, current) = api.get_local(target.kind, &target.namespace, &target.name)?;
        let current = current.ok_or_else(|| not_found(target.kind, &target.name))?;
        let original = served(&current.object);
        let mut patched = patch::apply(target.kind, patch_type, &original, body)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        if !patched.is_object() {
            return Err(ApiError::bad_request(
                "the patched object is not a JSON object",
            ));
        }
        match_path(target, &mut patched, target.kind)?;
        let pinned_by_patch = patched["metadata"]
            .get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|rv| rv != current.mod_revision.to_string());
        if !pinned_by_patch {
            patched["metadata"]["resourceVersion"] = json!(current.mod_revision.to_string());
        }
        let write = Write {
            api,
            target,
            params,
            accept,
        };
        if let Some(done) = write.patched(&patched, status, !pinned_by_patch).await? {
            return Ok(done);
        }
    }
    Err(ClusterError::Contended {
        kind: target.kind,
        name: target.name.clone(),
    }
    .into())
}

/// What a patch or an apply writes back, and for whom.
struct Write<'a> {
    api: &'a ClusterApi,
    target: &'a Target,
    params: &'a Params,
    accept: Accept,
}

impl Write<'_> {
    /// Writes `patched` (a stored object changed, its `resourceVersion` the version changed)
    /// with compare-and-swap: the response, or `None` when another write came first and
    /// `retry` lets the caller change the newer version instead.
    async fn patched(
        &self,
        patched: &Value,
        status: Part,
        retry: bool,
    ) -> Result<Option<Response>, ApiError> {
        let kind = self.target.kind;
        let (object, warnings) = decode_request(kind, &encode(patched), validation(self.params))?;
        match self.api.update(object, status, self.params.dry_run).await {
            Ok((_, updated)) => object_response(
                kind,
                &updated,
                self.accept,
                self.params,
                StatusCode::OK,
                &warnings,
            )
            .map(Some),
            Err(ClusterError::Conflict { .. }) if retry => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// PATCH with `application/apply-patch+yaml`: the body is the configuration `fieldManager`
/// wants (YAML or JSON); it creates the object when there is none.
async fn server_side_apply(
    api: &ClusterApi,
    target: &Target,
    params: &Params,
    accept: Accept,
    body: &[u8],
) -> Result<Response, ApiError> {
    if target.subresource.is_some() {
        return Err(ApiError::bad_request(
            "server-side apply is served on the object itself, not its subresources",
        ));
    }
    if params.field_manager.is_empty() {
        return Err(ApiError::bad_request(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required \
             for apply patch",
        ));
    }
    let mut config: Value = serde_yaml_ng::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the apply configuration is not valid YAML or JSON: {e}"
        ))
    })?;
    if !config.is_object() {
        return Err(ApiError::bad_request(
            "the apply configuration must be an object",
        ));
    }
    match_path(target, &mut config, target.kind)?;
    let now = skiff_proto::api::Time::now().to_string();
    for _ in 0..ATTEMPTS {
        api.barrier(false).await?;
        let (_, current) = api.get_local(target.kind, &target.namespace, &target.name)?;
        let current_json = current.as_ref().map(|c| served(&c.object));
        let mut applied = patch::server_side_apply(
            target.kind,
            current_json.as_ref(),
            &config,
            &params.field_manager,
            params.force,
            &now,
        )
        .map_err(|c| {
            let mut e = ApiError::new(Reason::Conflict, c.to_string());
            e.kind = target.kind.plural().to_string();
            e.name = target.name.clone();
            e.causes =
                c.0.iter()
                    .map(|(manager, field)| super::status::Cause {
                        reason: "FieldManagerConflict",
                        message: format!("conflict with {manager}"),
                        field: field.clone(),
                    })
                    .collect();
            e
        })?;
        let Some(current) = current else {
            let (object, warnings) =
                decode_request(target.kind, &encode(&applied), validation(params))?;
            match api.create(object, params.dry_run).await {
                Ok((_, created)) => {
                    return object_response(
                        target.kind,
                        &created,
                        accept,
                        params,
                        StatusCode::CREATED,
                        &warnings,
                    );
                }
                // Created by someone else meanwhile: apply to theirs.
                Err(ClusterError::AlreadyExists { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        applied["metadata"]["resourceVersion"] = json!(current.mod_revision.to_string());
        let write = Write {
            api,
            target,
            params,
            accept,
        };
        if let Some(done) = write.patched(&applied, Part::Main, true).await? {
            return Ok(done);
        }
    }
    Err(ClusterError::Contended {
        kind: target.kind,
        name: target.name.clone(),
    }
    .into())
}

/// `propagationPolicy` and the deprecated `orphanDependents`, which may not both be given.
fn propagation(
    policy: Option<&str>,
    orphan_dependents: Option<bool>,
) -> Result<Option<DeletionPropagation>, ApiError> {
    match (policy, orphan_dependents) {
        (Some(_), Some(_)) => Err(ApiError::new(
            Reason::Invalid,
            "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Invalid value: \
             orphanDependents and deletionPropagation cannot be both set",
        )),
        (Some(p), None) => p.parse().map(Some).map_err(|_| {
            ApiError::bad_request(format!(
                "propagationPolicy: Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
            ))
        }),
        (None, Some(true)) => Ok(Some(DeletionPropagation::Orphan)),
        (None, Some(false)) => Ok(Some(DeletionPropagation::Background)),
        (None, None) => Ok(None),
    }
}

/// `DeleteOptions`, from the body (kubectl sends one) or the query.
fn delete_options(params: &Params, body: &[u8]) -> Result<DeleteOptions, ApiError> {
    let query_policy = Some(params.propagation_policy.as_str()).filter(|p| !p.is_empty());
    let mut o = DeleteOptions {
        grace: params.grace_period_seconds,
        dry_run: params.dry_run,
        propagation: propagation(query_policy, params.orphan_dependents)?,
        ..DeleteOptions::default()
    };
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(o);
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("DeleteOptions: not valid JSON: {e}")))?;
    // The body's choice, when it makes one, stands for the whole request.
    let body_policy = v.get("propagationPolicy").and_then(Value::as_str);
    let body_orphan = v.get("orphanDependents").and_then(Value::as_bool);
    if body_policy.is_some() || body_orphan.is_some() {
        o.propagation = propagation(body_policy, body_orphan)?;
    }
    if let Some(g) = v.get("gracePeriodSeconds").and_then(Value::as_i64) {
        o.grace = Some(g);
    }
    if let Some(p) = v.get("preconditions") {
        if let Some(rv) = p.get("resourceVersion").and_then(Value::as_str) {
            o.resource_version = rv.parse().map_err(|_| {
                ApiError::bad_request(format!(
                    "preconditions.resourceVersion: invalid value {rv:?}"
                ))
            })?;
        }
        if let Some(uid) = p.get("uid").and_then(Value::as_str) {
            o.uid = uid.to_string();
        }
    }
    if let Some(d) = v.get("dryRun").and_then(Value::as_array) {
        o.dry_run |= d.iter().any(|x| x == "All");
    }
    Ok(o)
}

/// The DeleteOptions of a delete as JSON bytes, whichever encoding the client used.
fn delete_body(headers: &HeaderMap, body: &[u8]) -> Result<Vec<u8>, ApiError> {
    if content_type(headers) == super::protobuf::MEDIA_TYPE && !body.is_empty() {
        return Ok(encode(&super::protobuf::to_json(body)?));
    }
    Ok(body.to_vec())
}

async fn delete_one(
    api: &ClusterApi,
    kind: Kind,
    namespace: &str,
    name: &str,
    options: &DeleteOptions,
) -> Result<Object, ApiError> {
    if options.grace.is_some_and(|g| g < 0) {
        return Err(ClusterError::NegativeGrace.into());
    }
    if !options.uid.is_empty() || options.dry_run {
        api.barrier(false).await?;
        let (_, current) = api.get_local(kind, namespace, name)?;
        let current = current.ok_or_else(|| not_found(kind, name))?;
        let uid = &current.object.metadata().uid;
        if !options.uid.is_empty() && *uid != options.uid {
            return Err(ApiError::new(
                Reason::Conflict,
                format!(
                    "Precondition failed: UID in precondition: {}, UID in object meta: {uid}",
                    options.uid
                ),
            ));
        }
        if options.dry_run {
            return Ok(current.object);
        }
    }
    let (_, deleted) = api
        .delete(
            kind,
            namespace,
            name,
            options.resource_version,
            options.grace,
            options.propagation,
        )
        .await?;
    Ok(deleted)
}

/// DELETE of one object: graceful for a bound pod, at once otherwise.
pub async fn delete(
    api: &ClusterApi,
    target: &Target,
    params: &Params,
    accept: Accept,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    no_subresource(target, "delete")?;
    let options = delete_options(params, &delete_body(headers, body)?)?;
    let deleted = delete_one(api, target.kind, &target.namespace, &target.name, &options).await?;
    let warnings = default_propagation_warning(target.kind, &options);
    object_response(
        target.kind,
        &deleted,
        accept,
        params,
        StatusCode::OK,
        &warnings,
    )
}

/// kube-apiserver's warning to a client that deletes Jobs without a propagation policy: their
/// pods stay ([`crate::cluster::default_propagation`]; a ReplicationController's stay too,
/// unwarned, as in Kubernetes).
fn default_propagation_warning(kind: Kind, options: &DeleteOptions) -> Vec<String> {
    let is_job = kind
        .declared()
        .is_some_and(|i| i.api_version == "batch/v1" && i.kind == "Job");
    if is_job && options.propagation.is_none() {
        vec![crate::cluster::JOB_DELETE_WARNING.to_owned()]
    } else {
        Vec::new()
    }
}

/// DELETE of a collection: every object the selectors match, answered with the list of what
/// was deleted (or began a graceful deletion).
pub async fn delete_collection(
    api: &ClusterApi,
    target: &Target,
    params: &Params,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    no_subresource(target, "deletecollection")?;
    let options = delete_options(params, &delete_body(headers, body)?)?;
    let filter = filter(target.kind, params)?;
    let mut deleted = Vec::new();
    let mut token = String::new();
    loop {
        let page = api
            .list(
                target.kind,
                &target.namespace,
                &filter,
                0,
                &token,
                crate::cluster::list::ReadAt::Latest,
            )
            .await?;
        for s in &page.items {
            let m = s.object.metadata();
            match delete_one(api, target.kind, &m.namespace, &m.name, &options).await {
                Ok(o) => deleted.push(served(&o)),
                // Deleted by someone else in between: the collection is still emptied.
                Err(e) if e.reason == Reason::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        if page.continue_token.is_empty() {
            break;
        }
        token = page.continue_token;
    }
    let body = json!({
        "apiVersion": target.kind.api_version(),
        "kind": format!("{}List", target.kind.name()),
        "metadata": {},
        "items": deleted,
    });
    let warnings = default_propagation_warning(target.kind, &options);
    Ok(json_response(StatusCode::OK, &body, &warnings))
}

/// A Binding (POST `pods/<name>/binding`, or `bindings` with the pod's name): binds the pod
/// through the same batch Bind the scheduler uses.
pub async fn bind(
    api: &ClusterApi,
    target: &Target,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let mut value = object_body(headers, body)?;
    let binding_target = Target {
        kind: Kind::Binding,
        namespace: target.namespace.clone(),
        name: target.name.clone(),
        subresource: None,
    };
    match_path(&binding_target, &mut value, Kind::Binding)?;
    let name = value["metadata"]["name"].as_str().unwrap_or("").to_string();
    let node = value
        .get("target")
        .and_then(|t| t.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if name.is_empty() {
        return Err(ApiError::bad_request("metadata.name: Required value"));
    }
    if node.is_empty() {
        return Err(ApiError::bad_request("target.name: Required value"));
    }
    // A Binding that names the pod's UID binds only that incarnation of the pod: pinned to the
    // version whose UID was checked.
    let uid = value["metadata"]
        .get("uid")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut pod_resource_version = 0;
    if !uid.is_empty() {
        api.barrier(false).await?;
        let (_, pod) = api.get_local(Kind::Pod, &target.namespace, &name)?;
        let pod = pod.ok_or_else(|| not_found(Kind::Pod, &name))?;
        if pod.object.metadata().uid != uid {
            return Err(ApiError::new(
                Reason::Conflict,
                format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    pod.object.metadata().uid
                ),
            ));
        }
        pod_resource_version = pod.mod_revision;
    }
    let (_, results) = api
        .bind(
            &[pb::Binding {
                namespace: target.namespace.clone(),
                pod: name.clone(),
                node,
                pod_resource_version,
            }],
            None,
        )
        .await?;
    let result = results.into_iter().next().unwrap_or_default();
    use pb::bind_result::Outcome;
    let reason = match Outcome::try_from(result.outcome) {
        Ok(Outcome::Bound) => {
            let status = json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201
            });
            return Ok(json_response(StatusCode::CREATED, &status, &[]));
        }
        Ok(Outcome::PodNotFound | Outcome::NodeNotFound) => Reason::NotFound,
        Ok(Outcome::Invalid) => Reason::Invalid,
        _ => Reason::Conflict,
    };
    Err(ApiError::new(reason, result.message))
}

/// POST `pods/<name>/eviction`: a delete that the pod's PodDisruptionBudget may refuse
/// (429), with the Eviction's DeleteOptions; the rules are the cluster API's
/// ([`ClusterApi::evict`]).
pub async fn evict(
    api: &ClusterApi,
    target: &Target,
    params: &Params,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let value = object_body(headers, body)?;
    let named = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !named.is_empty() && named != target.name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let options_json = value.get("deleteOptions").map(encode).unwrap_or_default();
    let options = delete_options(params, &options_json)?;
    api.evict(&target.namespace, &target.name, &options).await?;
    let status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201
    });
    Ok(json_response(StatusCode::CREATED, &status, &[]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body's type, namespace and name must agree with the path; what it leaves out is
    /// filled in from the path.
    #[test]
    fn body_against_path() {
        let t = Target {
            kind: Kind::Pod,
            namespace: "a".into(),
            name: String::new(),
            subresource: None,
        };
        let mut v = json!({"metadata": {"name": "web"}});
        match_path(&t, &mut v, Kind::Pod).unwrap();
        assert_eq!(v["metadata"]["namespace"], "a");
        assert_eq!(v["kind"], "Pod");
        let mut v = json!({"metadata": {"name": "web", "namespace": "b"}});
        assert!(match_path(&t, &mut v, Kind::Pod).is_err());
        let mut v = json!({"kind": "Node", "metadata": {"name": "web"}});
        assert!(match_path(&t, &mut v, Kind::Pod).is_err());
        let mut v = json!({"apiVersion": "apps/v1", "metadata": {"name": "web"}});
        assert!(match_path(&t, &mut v, Kind::Pod).is_err());
    }

    #[test]
    fn delete_options_from_body_and_query() {
        let p = Params {
            grace_period_seconds: Some(5),
            ..Params::default()
        };
        let o = delete_options(&p, b"").unwrap();
        assert_eq!(o.grace, Some(5));
        let o = delete_options(
            &p,
            br#"{"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":0,"preconditions":{"resourceVersion":"7","uid":"u"},"propagationPolicy":"Background"}"#,
        )
        .unwrap();
        assert_eq!(
            (o.grace, o.resource_version, o.uid.as_str()),
            (Some(0), 7, "u")
        );
        assert_eq!(o.propagation, Some(DeletionPropagation::Background));
        assert!(delete_options(&p, br#"{"propagationPolicy":"Sideways"}"#).is_err());
    }

    /// The propagation of a delete: `propagationPolicy` or the deprecated `orphanDependents`,
    /// from the query or the body (the body's choice standing), never both at once.
    #[test]
    fn propagation_from_policy_or_orphan_dependents() {
        let query = |q: &str| Params::parse(Some(q)).unwrap();
        let from = |q: &str, body: &[u8]| delete_options(&query(q), body).map(|o| o.propagation);
        assert_eq!(from("", b"").unwrap(), None);
        assert_eq!(
            from("propagationPolicy=Foreground", b"").unwrap(),
            Some(DeletionPropagation::Foreground)
        );
        assert_eq!(
            from("orphanDependents=true", b"").unwrap(),
            Some(DeletionPropagation::Orphan)
        );
        assert_eq!(
            from("", br#"{"orphanDependents":false}"#).unwrap(),
            Some(DeletionPropagation::Background)
        );
        assert_eq!(
            from(
                "propagationPolicy=Foreground",
                br#"{"kind":"DeleteOptions","propagationPolicy":"Orphan"}"#
            )
            .unwrap(),
            Some(DeletionPropagation::Orphan)
        );
        assert_eq!(
            from(
                "propagationPolicy=Foreground",
                br#"{"gracePeriodSeconds":1}"#
            )
            .unwrap(),
            Some(DeletionPropagation::Foreground)
        );
        assert_eq!(
            from("propagationPolicy=Sideways", b"").unwrap_err().reason,
            Reason::BadRequest
        );
        assert_eq!(
            from(
                "",
                br#"{"orphanDependents":true,"propagationPolicy":"Orphan"}"#
            )
            .unwrap_err()
            .reason,
            Reason::Invalid
        );
    }

    /// POST pods/<name>/eviction: a budget with no disruption left answers 429 with
    /// kube-apiserver's Status (the budget's figures as a `DisruptionBudget` cause) and the pod
    /// stays; an Eviction naming another pod than the path is a bad request; with the budget
    /// allowing one, 201 and the pod goes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn eviction_answers_as_kube_apiserver() {
        use crate::cluster::testing::TestApi;
        use skiff_proto::api::policy::pod_disruption_budget_kind;
        let t = TestApi::start(|_| crate::access::AccessConfig::default()).await;
        t.create(Kind::Namespace, json!({"metadata": {"name": "team"}}))
            .await;
        let pod = t
            .create(
                Kind::Pod,
                json!({"metadata": {"name": "web-1", "namespace": "team", "labels": {"app": "web"}},
                       "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}}),
            )
            .await;
        let Object::Pod(mut pod) = pod else {
            unreachable!("a pod")
        };
        let status = pod.status.get_or_insert_with(Default::default);
        status.phase = Some(skiff_proto::api::PodPhase::Running);
        status.set_condition(skiff_proto::api::PodCondition::new(
            skiff_proto::api::PodConditionType::Ready,
            skiff_proto::api::ConditionStatus::True,
        ));
        t.api
            .update(Object::Pod(pod), Part::Status, false)
            .await
            .expect("running and ready");
        let pdb = t
            .create(
                pod_disruption_budget_kind(),
                json!({"metadata": {"name": "web", "namespace": "team"},
                       "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
            )
            .await;
        let set_allowed = |allowed: i32| {
            let Object::Generic(g, o) = pdb.clone() else {
                unreachable!("a declared kind")
            };
            let mut o = o;
            o.metadata.resource_version.clear();
            let o = o.with_status(
                &json!({"observedGeneration": 1, "disruptionsAllowed": allowed,
                "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}),
            );
            let api = t.api.clone();
            async move {
                api.update(Object::Generic(g, o), Part::Status, false)
                    .await
                    .expect("budget status")
            }
        };
        set_allowed(0).await;
        let target = Target {
            kind: Kind::Pod,
            namespace: "team".into(),
            name: "web-1".into(),
            subresource: Some("eviction".into()),
        };
        let body = |name: &str| {
            serde_json::to_vec(&json!({"apiVersion": "policy/v1", "kind": "Eviction",
                                       "metadata": {"name": name, "namespace": "team"}}))
            .unwrap()
        };
        let headers = HeaderMap::new();
        let e = evict(
            &t.api,
            &target,
            &Params::default(),
            &headers,
            &body("web-1"),
        )
        .await
        .expect_err("the budget has none left");
        assert_eq!(
            e.to_status(),
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                "reason": "TooManyRequests", "code": 429,
                "details": {"causes": [{"reason": "DisruptionBudget",
                    "message": "The disruption budget web needs 1 healthy pods and has 1 currently"}]}
            })
        );
        let e = evict(
            &t.api,
            &target,
            &Params::default(),
            &headers,
            &body("web-2"),
        )
        .await
        .expect_err("another pod's name");
        assert_eq!(
            (e.reason, e.message.as_str()),
            (
                Reason::BadRequest,
                "name in URL does not match name in Eviction object"
            )
        );
        let (_, kept) = t.api.get_local(Kind::Pod, "team", "web-1").unwrap();
        assert!(
            kept.expect("kept")
                .object
                .metadata()
                .deletion_timestamp
                .is_none()
        );

        set_allowed(1).await;
        let answer = evict(
            &t.api,
            &target,
            &Params::default(),
            &headers,
            &body("web-1"),
        )
        .await
        .expect("evicted");
        assert_eq!(answer.status(), StatusCode::CREATED);
        let (_, going) = t.api.get_local(Kind::Pod, "team", "web-1").unwrap();
        assert!(
            going
                .expect("going gracefully")
                .object
                .metadata()
                .deletion_timestamp
                .is_some()
        );
        t.stop().await;
    }
    /// A Job deleted without a propagation policy is warned that its pods stay; with one,
    /// and any other kind, not.
    #[test]
    fn deleting_jobs_without_a_policy_is_warned() {
        let job = Kind::from_name("Job").expect("declared");
        let unset = DeleteOptions::default();
        assert_eq!(
            default_propagation_warning(job, &unset),
            [crate::cluster::JOB_DELETE_WARNING]
        );
        let background = DeleteOptions {
            propagation: Some(DeletionPropagation::Background),
            ..DeleteOptions::default()
        };
        assert!(default_propagation_warning(job, &background).is_empty());
        assert!(default_propagation_warning(Kind::Deployment, &unset).is_empty());
    }
}
