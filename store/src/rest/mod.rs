//! The Kubernetes REST API: what kubectl, client-go, kube-rs and the Python client speak,
//! served by every member beside the etcd and cluster APIs. It is a second face of the
//! cluster API ([`crate::cluster::ClusterApi`]): the same decoding, defaulting, validation,
//! admission, compare-and-swap writes and watch hub, with Kubernetes' paths, verbs, query
//! parameters, content types and `metav1.Status` errors on top.
//!
//! | module        | what                                                              |
//! |---------------|-------------------------------------------------------------------|
//! | [`discovery`] | the served resources, their verbs and subresources; `/api`, `/apis` |
//! | [`openapi`]   | `/openapi/v3` documents generated from Kubernetes' schema         |
//! | [`patch`]     | JSON patch, JSON merge patch and strategic merge patch            |
//! | [`protobuf`]  | protobuf request bodies (client-go's typed clients) read as JSON   |
//! | [`table`]     | server-side printing: `meta.k8s.io/v1` Tables with kubectl's columns |
//! | [`request`]   | a request's target, query parameters, accepted media type and body |
//! | [`scale`]     | the workloads' `scale` subresource, as autoscaling/v1 `Scale`       |
//! | [`status`]    | errors as `metav1.Status` with kube-apiserver's codes and reasons  |
//! | [`verbs`]     | get, list, create, update, patch, delete, bindings and evictions   |
//! | [`watch`]     | watch streams: initial events, bookmarks, 410 Expired             |
//! | [`logs`]      | `pods/log` through the agent of the pod's node                    |
//! | [`exec`]      | `pods/exec` and `pods/attach` over WebSocket, through the agent   |
//! | [`review`]    | access reviews: `kubectl auth can-i`                               |
//!
//! Every request is authenticated first ([`crate::access`]): the user rides in the
//! request's extensions. A request for a path that is no resource (discovery, OpenAPI,
//! health) is authorized there; a resource request once its verb and target are known.

pub mod discovery;
pub mod exec;
pub mod logs;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod request;
pub mod review;
pub mod scale;
pub mod status;
pub mod table;
pub mod verbs;
pub mod watch;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::ws::{WebSocketUpgrade, rejection::WebSocketUpgradeRejection};
use axum::extract::{ConnectInfo, Extension, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::json;

use crate::access::{Attributes, User};
use crate::cluster::{ClusterApi, ClusterError};
use crate::tls::ApiPeer;
use request::{Accept, Params, Target, read_body};
use skiff_proto::api::Kind;
use status::{ApiError, Reason};
use verbs::json_response;

/// The Kubernetes release whose API (and schema) Skiff serves.
pub const KUBERNETES_VERSION: (&str, &str) = ("1", "33");

#[derive(Debug, Clone)]
struct Rest {
    api: ClusterApi,
    /// `host:port` clients reach this member's API at, for `/api`'s server addresses.
    address: String,
}

/// The Kubernetes API of one member: discovery, OpenAPI, health, and every resource under
/// `/api/v1`. `address` is where clients reach it (`127.0.0.1:6443`).
pub fn router(api: ClusterApi, address: String) -> Router {
    let state = Arc::new(Rest { api, address });
    let authn = middleware::from_fn_with_state(state.clone(), authenticate);
    Router::new()
        .route("/version", get(version))
        .route("/healthz", get(health))
        .route("/livez", get(health))
        .route("/readyz", get(ready))
        .route("/api", get(api_versions))
        .route("/apis", get(api_groups))
        .route("/api/v1", get(core_v1))
        .route("/openapi/v3", get(openapi_index))
        .route("/openapi/v3/{*path}", get(openapi_document))
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}/exec",
            any(pod_session),
        )
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}/attach",
            any(pod_session),
        )
        .route("/api/v1/{*rest}", any(core_resource))
        .route("/apis/{group}/{version}", get(group_version))
        .route("/apis/{group}/{version}/{*rest}", any(group_resource))
        .fallback(not_found)
        .layer(authn)
        .with_state(state)
}

/// The user a request acts as: its own, or the one its `Impersonate-User` (and
/// `Impersonate-Group`) headers name when it may impersonate them (the `impersonate` verb
/// on `users`, `groups`, or the service account), as kube-apiserver allows `kubectl --as`.
fn impersonated(api: &ClusterApi, user: User, headers: &HeaderMap) -> Result<User, ApiError> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect()
    };
    let (names, groups, uids) = (
        values("impersonate-user"),
        values("impersonate-group"),
        values("impersonate-uid"),
    );
    let extras = headers
        .keys()
        .any(|k| k.as_str().starts_with("impersonate-extra-"));
    if names.is_empty() {
        if groups.is_empty() && uids.is_empty() && !extras {
            return Ok(user);
        }
        return Err(ApiError::bad_request(
            "Impersonate-Group, Impersonate-Uid and Impersonate-Extra need Impersonate-User",
        ));
    }
    if names.len() > 1 || uids.len() > 1 {
        return Err(ApiError::bad_request(
            "at most one Impersonate-User and one Impersonate-Uid",
        ));
    }
    if extras {
        return Err(ApiError::bad_request(
            "Impersonate-Extra headers are not supported",
        ));
    }
    let name = names[0].clone();
    let target = match name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
    {
        Some((ns, sa)) => Attributes::resource("impersonate", "", "serviceaccounts", None, ns, sa),
        None => Attributes::resource("impersonate", "", "users", None, "", &name),
    };
    api.authorize(&user, target)?;
    for g in &groups {
        api.authorize(
            &user,
            Attributes::resource("impersonate", "", "groups", None, "", g),
        )?;
    }
    for uid in &uids {
        api.authorize(
            &user,
            Attributes::resource(
                "impersonate",
                "authentication.k8s.io",
                "uids",
                None,
                "",
                uid,
            ),
        )?;
    }
    let mut groups = groups;
    if name != crate::access::ANONYMOUS && !groups.iter().any(|g| g == crate::access::AUTHENTICATED)
    {
        groups.push(crate::access::AUTHENTICATED.to_owned());
    }
    Ok(User {
        name,
        uid: uids.into_iter().next().unwrap_or_default(),
        groups,
    })
}

/// `e`, once the request's body has been read (and dropped): answering before a client has
/// sent its body closes the connection on data still in flight, and the client sees a reset
/// instead of the refusal.
async fn refuse(body: Body, e: ApiError) -> ApiError {
    let _ = read_body(body).await;
    e
}

/// Whether a path names resources (`/api/v1/pods`, `/apis/apps/v1/deployments`) rather
/// than discovery, OpenAPI or health: kube-apiserver's split between resource and
/// non-resource requests.
fn is_resource_path(path: &str) -> bool {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.first() {
        Some(&"api") => parts.len() >= 3,
        Some(&"apis") => parts.len() >= 4,
        _ => false,
    }
}

/// Finds the request's user (401 when its credentials are wrong, or missing where anonymous
/// requests are off) and authorizes paths that are no resource; the user goes on in the
/// request's extensions.
async fn authenticate(State(rest): State<Arc<Rest>>, mut req: Request, next: Next) -> Response {
    let access = &rest.api.access;
    let cert = req
        .extensions()
        .get::<ConnectInfo<ApiPeer>>()
        .and_then(|c| c.0.0.as_ref())
        .and_then(|c| c.client.clone());
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::access::bearer);
    let user = match access.authenticate(bearer, cert.as_ref()) {
        Ok(user) => user,
        Err(e) => {
            return refuse(req.into_body(), ClusterError::from(e).into())
                .await
                .into_response();
        }
    };
    let user = match impersonated(&rest.api, user, req.headers()) {
        Ok(user) => user,
        Err(e) => return refuse(req.into_body(), e).await.into_response(),
    };
    let path = req.uri().path();
    if !access.allows_everything() && !is_resource_path(path) {
        let verb = req.method().as_str().to_ascii_lowercase();
        if let Err(e) = rest.api.authorize(&user, Attributes::path(&verb, path)) {
            return refuse(req.into_body(), e.into()).await.into_response();
        }
    }
    req.extensions_mut().insert(user);
    next.run(req).await
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        Reason::NotFound,
        format!(
            "the server could not find the requested resource ({})",
            uri.path()
        ),
    )
}

async fn version() -> Response {
    let (major, minor) = KUBERNETES_VERSION;
    let body = json!({
        "major": major,
        "minor": minor,
        "gitVersion": format!("v{major}.{minor}.0-skiff.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        }),
    });
    json_response(StatusCode::OK, &body, &[])
}

async fn health() -> &'static str {
    "ok"
}

/// Ready once this member knows a leader: it can then answer linearizable reads and writes.
async fn ready(State(rest): State<Arc<Rest>>) -> Response {
    match rest.api.barrier(false).await {
        Ok(()) => "ok".into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("[-]store failed: {e}\nreadyz check failed\n"),
        )
            .into_response(),
    }
}

/// Whether the client asked for aggregated discovery (kubectl 1.30 and later do, with the
/// legacy documents as their fallback).
fn wants_aggregated(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(discovery::accepts_aggregated)
}

fn aggregated_response(body: &serde_json::Value) -> Response {
    let mut r = json_response(StatusCode::OK, body, &[]);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(discovery::AGGREGATED_V2),
    );
    r
}

async fn api_versions(State(rest): State<Arc<Rest>>, headers: HeaderMap) -> Response {
    if wants_aggregated(&headers) {
        return aggregated_response(&discovery::aggregated_core());
    }
    json_response(StatusCode::OK, &discovery::api_versions(&rest.address), &[])
}

async fn api_groups(headers: HeaderMap) -> Response {
    if wants_aggregated(&headers) {
        return aggregated_response(&discovery::aggregated_groups());
    }
    json_response(StatusCode::OK, &discovery::api_group_list(), &[])
}

async fn core_v1() -> Response {
    json_response(StatusCode::OK, &discovery::core_v1_resources(), &[])
}

async fn openapi_index() -> Response {
    json_response(StatusCode::OK, &openapi::index(), &[])
}

async fn openapi_document(Path(path): Path<String>) -> Result<Response, ApiError> {
    let doc = openapi::document(&path).ok_or_else(|| {
        ApiError::new(
            Reason::NotFound,
            format!("no OpenAPI document for {path:?}"),
        )
    })?;
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            // Addressed by content hash (`?hash=`), so it never changes under its URL.
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, immutable, max-age=31536000"),
            ),
        ],
        doc,
    )
        .into_response())
}

/// `pods/<name>/exec` and `pods/<name>/attach`: a WebSocket upgrade, relayed to the agent.
async fn pod_session(
    State(rest): State<Arc<Rest>>,
    Extension(user): Extension<User>,
    uri: axum::http::Uri,
    method: Method,
    RawQuery(query): RawQuery,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let path = uri.path().trim_start_matches("/api/v1/");
    let target = Target::parse("v1", path)?;
    let params = Params::parse(query.as_deref())?;
    rest.api.authorize_kind(
        &user,
        "create",
        target.kind,
        target.subresource.as_deref(),
        &target.namespace,
        &target.name,
        "",
    )?;
    exec::session(&rest.api, &target, &params, &method, upgrade.ok()).await
}

/// `GET /apis/<group>/<version>`: the resources of a served group version.
async fn group_version(Path((group, version)): Path<(String, String)>) -> Response {
    let api_version = format!("{group}/{version}");
    match discovery::group_versions()
        .into_iter()
        .find(|gv| gv.api_version() == api_version)
    {
        Some(gv) => json_response(StatusCode::OK, &discovery::resource_list(gv), &[]),
        None => ApiError::new(
            Reason::NotFound,
            format!("the server could not find the requested resource (/apis/{api_version})"),
        )
        .into_response(),
    }
}

/// Every request under `/api/v1/`.
async fn core_resource(
    State(rest): State<Arc<Rest>>,
    Extension(user): Extension<User>,
    Path(path): Path<String>,
    method: Method,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let target = Target::parse("v1", &path)?;
    resource(rest, &user, target, method, query, headers, body).await
}

/// Every request under `/apis/<group>/<version>/`.
async fn group_resource(
    State(rest): State<Arc<Rest>>,
    Extension(user): Extension<User>,
    Path((group, version, path)): Path<(String, String, String)>,
    method: Method,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let target = Target::parse(&format!("{group}/{version}"), &path)?;
    resource(rest, &user, target, method, query, headers, body).await
}

/// The verbs served at `target`'s path. A subresource the resource does not have is no path
/// at all: 404, as kube-apiserver answers (405 is for a verb a served path does not take).
fn served_verbs(target: &Target) -> Result<&'static [&'static str], ApiError> {
    let resource = discovery::resource(target.kind);
    match target.subresource.as_deref() {
        None => Ok(resource.map_or(&[], |r| r.verbs)),
        Some(sub) => resource
            .and_then(|r| r.subresource(sub))
            .map(|s| s.verbs)
            .ok_or_else(|| {
                ApiError::new(
                    Reason::NotFound,
                    format!(
                        "the server could not find the requested resource ({}/{sub})",
                        target.kind.plural()
                    ),
                )
            }),
    }
}

/// A request for a resource: the path named it, the method and query name the verb.
async fn resource(
    rest: Arc<Rest>,
    user: &User,
    target: Target,
    method: Method,
    query: Option<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let params = Params::parse(query.as_deref())?;
    let accept = Accept::negotiate(&headers)?;
    let api = &rest.api.as_user(user);
    let collection = target.is_collection();
    let sub = target.subresource.as_deref();
    let allowed = served_verbs(&target)?;
    let verb = match (&method, collection, params.watch) {
        (&Method::GET, true, true) | (&Method::GET, false, true) => "watch",
        (&Method::GET, true, false) => "list",
        (&Method::GET, false, false) => "get",
        (&Method::POST, _, _) => "create",
        (&Method::PUT, false, _) => "update",
        (&Method::PATCH, false, _) => "patch",
        (&Method::DELETE, false, _) => "delete",
        (&Method::DELETE, true, _) => "deletecollection",
        _ => "",
    };
    if verb.is_empty() || !allowed.contains(&verb) {
        return Err(ApiError::new(
            Reason::MethodNotAllowed,
            format!(
                "the server does not allow this method on the requested resource ({method} {}{})",
                target.kind.plural(),
                sub.map(|s| format!("/{s}")).unwrap_or_default()
            ),
        ));
    }
    if let Err(e) = api.authorize_kind(
        user,
        verb,
        target.kind,
        sub,
        &target.namespace,
        &target.name,
        &params.field_selector,
    ) {
        return Err(refuse(body, e.into()).await);
    }
    match verb {
        "watch" => watch::watch(api, &target, &params, accept).await,
        "list" => verbs::list(api, &target, &params, accept).await,
        "get" if sub == Some("log") => logs::logs(api, &target, &params).await,
        "get" if sub == Some("scale") => scale::get(api, &target, &params).await,
        "get" => verbs::get(api, &target, &params, accept).await,
        "create" => {
            let body = read_body(body).await?;
            match sub {
                Some("binding") => verbs::bind(api, &target, &headers, &body).await,
                Some("eviction") => verbs::evict(api, &target, &params, &headers, &body).await,
                _ if !target.kind.is_stored() && target.kind != Kind::Binding => {
                    review::create(api, user, &target, &params, &headers, &body).await
                }
                _ => verbs::create(api, &target, &params, accept, &headers, &body).await,
            }
        }
        "update" => {
            let body = read_body(body).await?;
            match sub {
                Some("scale") => scale::update(api, &target, &params, &headers, &body).await,
                _ => verbs::update(api, &target, &params, accept, &headers, &body).await,
            }
        }
        "patch" => {
            let body = read_body(body).await?;
            match sub {
                Some("scale") => scale::patch(api, &target, &params, &headers, &body).await,
                _ => verbs::patch(api, &target, &params, accept, &headers, &body).await,
            }
        }
        "delete" => {
            let body = read_body(body).await?;
            verbs::delete(api, &target, &params, accept, &headers, &body).await
        }
        _ => {
            let body = read_body(body).await?;
            verbs::delete_collection(api, &target, &params, &headers, &body).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(kind: Kind, sub: Option<&str>) -> Target {
        Target {
            kind,
            namespace: "default".into(),
            name: "web".into(),
            subresource: sub.map(str::to_string),
        }
    }

    /// A subresource the resource lacks is not found (404), as in kube-apiserver; served
    /// subresources answer with their own verbs.
    #[test]
    fn unknown_subresources_are_not_found() {
        for (kind, sub) in [
            (Kind::Deployment, "log"),
            (Kind::Pod, "scale"),
            (Kind::Node, "widgets"),
        ] {
            let e = served_verbs(&target(kind, Some(sub))).unwrap_err();
            assert_eq!(e.reason, Reason::NotFound, "{kind} {sub}");
        }
        assert_eq!(
            served_verbs(&target(Kind::Deployment, Some("scale"))).unwrap(),
            ["get", "patch", "update"]
        );
        assert!(
            served_verbs(&target(Kind::Pod, None))
                .unwrap()
                .contains(&"watch")
        );
    }
}
