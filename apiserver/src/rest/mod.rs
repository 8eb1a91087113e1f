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
//! | [`portforward`] | `pods/portforward` over SPDY or WebSocket, through the agent    |
//! | [`spdy`]      | SPDY/3.1 framing and header compression, for port-forward         |
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
pub mod portforward;
pub mod protobuf;
pub mod request;
pub mod review;
pub mod scale;
pub mod spdy;
pub mod status;
pub mod table;
pub mod token;
pub mod verbs;
pub mod watch;
pub mod whoami;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{ConnectInfo, Extension, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::json;

use crate::access::audit::{AuditLog, Level, Record};
use crate::access::{Attributes, User};
use crate::cluster::{ClusterApi, ClusterError, kind_attributes};
use crate::listener::ApiPeer;
use request::{Accept, Params, Target, read_body};
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
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}/portforward",
            any(pod_port_forward),
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

/// A response that refuses a request for who sent it (authentication or authorization), as
/// the audit log tells refusals apart.
#[derive(Debug, Clone, Copy)]
struct Refused;

/// The answer `e`, once the request's body has been read (and dropped): answering before a
/// client has sent its body closes the connection on data still in flight, and the client
/// sees a reset instead of the refusal.
async fn refused(body: Body, e: ApiError) -> Response {
    let _ = read_body(body).await;
    let mut r = e.into_response();
    r.extensions_mut().insert(Refused);
    r
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
/// request's extensions. Every request, refused or not, goes to the audit log when one is
/// kept.
async fn authenticate(State(rest): State<Arc<Rest>>, mut req: Request, next: Next) -> Response {
    let received = chrono::Utc::now();
    let access = &rest.api.access;
    let conn = req
        .extensions()
        .get::<ConnectInfo<ApiPeer>>()
        .and_then(|c| c.0.0.clone());
    let attributes = request_attributes(req.method(), req.uri());
    let mut audit = access.audit.as_ref().map(|log| Audit {
        log,
        uri: req
            .uri()
            .path_and_query()
            .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned()),
        impersonator: None,
        source_ip: conn
            .as_ref()
            .and_then(|c| c.tcp.remote_addr().map(|a| a.ip().to_string())),
        user_agent: req
            .headers()
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
        received,
        request_object: None,
    });
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::access::bearer);
    let cert = conn.as_ref().and_then(|c| c.client.as_ref());
    let real = match access.authenticate(bearer, cert, &rest.api) {
        Ok(user) => user,
        Err(e) => {
            let r = refused(req.into_body(), ClusterError::from(e).into()).await;
            let nobody = User {
                name: String::new(),
                uid: String::new(),
                groups: Vec::new(),
            };
            return audited(audit.as_mut(), &nobody, attributes, r).await;
        }
    };
    let user = match impersonated(&rest.api, real.clone(), req.headers()) {
        Ok(user) => user,
        Err(e) => {
            let r = refused(req.into_body(), e).await;
            return audited(audit.as_mut(), &real, attributes, r).await;
        }
    };
    if user != real
        && let Some(a) = audit.as_mut()
    {
        a.impersonator = Some(real);
    }
    let level = audit
        .as_ref()
        .map_or(Level::None, |a| a.log.policy.level(&user, &attributes));
    if level == Level::None {
        audit = None;
    }
    if let Some(a) = audit.as_mut()
        && level >= Level::Request
        && matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH)
    {
        // The body is read here for the log, and handed on as it came.
        let (parts, body) = req.into_parts();
        let bytes = match read_body(body).await {
            Ok(b) => b,
            Err(e) => return audited(Some(a), &user, attributes, e.into_response()).await,
        };
        a.request_object = serde_json::from_slice(&bytes).ok();
        req = Request::from_parts(parts, Body::from(bytes));
    }
    let path = req.uri().path();
    if !access.allows_everything()
        && !is_resource_path(path)
        && let Err(e) = rest.api.authorize(&user, attributes.clone())
    {
        let r = refused(req.into_body(), e.into()).await;
        return audited(audit.as_mut(), &user, attributes, r).await;
    }
    req.extensions_mut().insert(user.clone());
    let response = next.run(req).await;
    audited(audit.as_mut(), &user, attributes, response).await
}

/// What the audit log is told of a request being served.
struct Audit<'a> {
    log: &'a AuditLog,
    uri: String,
    /// Who sent a request that acts as another user.
    impersonator: Option<User>,
    source_ip: Option<String>,
    user_agent: String,
    received: chrono::DateTime<chrono::Utc>,
    request_object: Option<serde_json::Value>,
}

/// The biggest response body the audit log keeps at `RequestResponse`.
const AUDITED_RESPONSE: usize = 1 << 20;

/// Writes the request's event (when the log keeps one) and hands `response` on.
async fn audited(
    audit: Option<&mut Audit<'_>>,
    user: &User,
    attributes: Attributes,
    response: Response,
) -> Response {
    let Some(a) = audit else {
        return response;
    };
    let level = a.log.policy.level(user, &attributes);
    if level == Level::None {
        return response;
    }
    let refused = response.extensions().get::<Refused>().is_some();
    let code = response.status().as_u16();
    let streaming = attributes.verb() == "watch"
        || response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_none_or(|t| !t.starts_with("application/json"));
    let (response, response_object) = if level == Level::RequestResponse && !streaming {
        let (parts, body) = response.into_parts();
        match axum::body::to_bytes(body, AUDITED_RESPONSE).await {
            Ok(bytes) => {
                let object = serde_json::from_slice(&bytes).ok();
                (Response::from_parts(parts, Body::from(bytes)), object)
            }
            Err(e) => (
                ApiError::new(
                    Reason::InternalError,
                    format!("reading the response for the audit log: {e}"),
                )
                .into_response(),
                None,
            ),
        }
    } else {
        (response, None)
    };
    let (user, impersonated) = match a.impersonator.take() {
        Some(real) => (real, Some(user.clone())),
        None => (user.clone(), None),
    };
    a.log.record(&Record {
        level,
        id: AuditLog::new_id(),
        uri: a.uri.clone(),
        user,
        impersonated,
        source_ip: a.source_ip.clone(),
        user_agent: a.user_agent.clone(),
        attributes,
        decision: if code == 401 {
            None
        } else if refused {
            Some("forbid")
        } else {
            Some("allow")
        },
        code,
        received: a.received,
        done: chrono::Utc::now(),
        request_object: a.request_object.take(),
        response_object,
    });
    response
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

/// A connect request (exec, attach, portforward) is a `create` of its subresource, whatever
/// its method (a WebSocket's is GET), as kube-apiserver authorizes it: the refusal, if any.
async fn authorize_connect(rest: &Rest, user: &User, target: &Target) -> Option<Response> {
    let asked = kind_attributes(
        "create",
        target.kind,
        target.subresource.as_deref(),
        &target.namespace,
        &target.name,
        "",
    );
    match rest.api.authorize(user, asked) {
        Ok(_) => None,
        Err(e) => Some(refused(Body::empty(), e.into()).await),
    }
}

/// A connect request (exec, attach, port-forward) as its handler takes it: the pod, the
/// query, the request's parts, and its upgrade to WebSocket or to another protocol (SPDY).
struct Connect {
    target: Target,
    params: Params,
    parts: axum::http::request::Parts,
    websocket: Option<WebSocketUpgrade>,
    upgrade: Option<hyper::upgrade::OnUpgrade>,
}

/// A connect request's handler ([`exec::session`], [`portforward::forward`]), once the
/// request is parsed and authorized.
async fn connect<F>(rest: Arc<Rest>, user: User, request: Request, serve: F) -> Response
where
    F: AsyncFnOnce(&ClusterApi, Connect) -> Result<Response, ApiError>,
{
    match Connect::of(&rest, &user, request).await {
        Ok(c) => serve(&rest.api, c)
            .await
            .unwrap_or_else(IntoResponse::into_response),
        Err(refusal) => refusal,
    }
}

impl Connect {
    /// The request, or the refusal of a user who may not make it.
    async fn of(rest: &Arc<Rest>, user: &User, request: Request) -> Result<Connect, Response> {
        use axum::extract::FromRequestParts as _;
        let (mut parts, _) = request.into_parts();
        let parsed = Target::parse("v1", parts.uri.path().trim_start_matches("/api/v1/"))
            .and_then(|target| Ok((target, Params::parse(parts.uri.query())?)));
        let (target, params) = match parsed {
            Ok(parsed) => parsed,
            Err(e) => return Err(e.into_response()),
        };
        if let Some(refusal) = authorize_connect(rest, user, &target).await {
            return Err(refusal);
        }
        // A WebSocket's upgrade is a GET; SPDY's, a POST.
        if parts.method != Method::GET && parts.method != Method::POST {
            let message = format!(
                "the server does not allow this method on pods/{} ({})",
                target.subresource.as_deref().unwrap_or_default(),
                parts.method
            );
            return Err(ApiError::new(Reason::MethodNotAllowed, message).into_response());
        }
        let websocket = WebSocketUpgrade::from_request_parts(&mut parts, rest)
            .await
            .ok();
        let upgrade = parts.extensions.remove::<hyper::upgrade::OnUpgrade>();
        Ok(Connect {
            target,
            params,
            parts,
            websocket,
            upgrade,
        })
    }
}

/// `pods/<name>/exec` and `pods/<name>/attach`: a WebSocket or SPDY upgrade, relayed to the
/// agent.
async fn pod_session(
    State(rest): State<Arc<Rest>>,
    Extension(user): Extension<User>,
    request: Request,
) -> Response {
    connect(rest, user, request, exec::session).await
}

/// `pods/<name>/portforward`: a WebSocket or SPDY upgrade, relayed to the agent.
async fn pod_port_forward(
    State(rest): State<Arc<Rest>>,
    Extension(user): Extension<User>,
    request: Request,
) -> Response {
    connect(rest, user, request, portforward::forward).await
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
    if whoami::asks(&group, &version, &path) {
        if method != Method::POST {
            return Err(ApiError::new(
                Reason::MethodNotAllowed,
                format!("{} take POST only", whoami::RESOURCE),
            ));
        }
        if let Err(e) = rest
            .api
            .as_user(&user)
            .authorize(&user, whoami::attributes())
        {
            return Ok(refused(body, e.into()).await);
        }
        let body = read_body(body).await?;
        return whoami::create(&user, &headers, &body);
    }
    let target = Target::parse(&format!("{group}/{version}"), &path)?;
    resource(rest, &user, target, method, query, headers, body).await
}

/// The Kubernetes verb of a request for a resource: its method, and whether it names a
/// collection or asks for a watch; empty when no verb fits.
fn verb_of(method: &Method, collection: bool, watch: bool) -> &'static str {
    match (method, collection, watch) {
        (&Method::GET, _, true) => "watch",
        (&Method::GET, true, false) => "list",
        (&Method::GET, false, false) => "get",
        (&Method::POST, _, _) => "create",
        (&Method::PUT, false, _) => "update",
        (&Method::PATCH, false, _) => "patch",
        (&Method::DELETE, false, _) => "delete",
        (&Method::DELETE, true, _) => "deletecollection",
        _ => "",
    }
}

/// What a request asks, as the authorizers and the audit log name it: a verb on a resource
/// for resource paths (one that does not parse is taken as a path), else a verb on a path.
fn request_attributes(method: &Method, uri: &axum::http::Uri) -> Attributes {
    let path = uri.path();
    let as_path = || Attributes::path(&method.as_str().to_ascii_lowercase(), path);
    if !is_resource_path(path) {
        return as_path();
    }
    let parts: Vec<&str> = path.trim_matches('/').splitn(4, '/').collect();
    let (api_version, rest) = match parts.as_slice() {
        ["api", v, rest @ ..] => ((*v).to_owned(), rest.join("/")),
        ["apis", g, v, rest] => (format!("{g}/{v}"), (*rest).to_owned()),
        _ => return as_path(),
    };
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    if whoami::asks(group, version, &rest) {
        // A question with no kind of its own (see `group_resource`).
        return whoami::attributes();
    }
    let Ok(target) = Target::parse(&api_version, &rest) else {
        return as_path();
    };
    let params = Params::parse(uri.query()).unwrap_or_default();
    let verb = verb_of(method, target.is_collection(), params.watch);
    let mut a = kind_attributes(
        verb,
        target.kind,
        target.subresource.as_deref(),
        &target.namespace,
        &target.name,
        &params.field_selector,
    );
    if let Attributes::Resource(r) = &mut a {
        r.version = api_version
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned();
    }
    a
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
    let verb = verb_of(&method, collection, params.watch);
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
    let asked = kind_attributes(
        verb,
        target.kind,
        sub,
        &target.namespace,
        &target.name,
        &params.field_selector,
    );
    if let Err(e) = api.authorize(user, asked) {
        return Ok(refused(body, e.into()).await);
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
                Some("token") => token::create(api, &target, &headers, &body).await,
                _ if target.kind.is_review() => {
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
    use skiff_proto::api::Kind;

    fn target(kind: Kind, sub: Option<&str>) -> Target {
        Target {
            kind,
            namespace: "default".into(),
            name: "web".into(),
            subresource: sub.map(str::to_string),
        }
    }

    /// `kubectl auth whoami` is audited (and matched by audit policies) as the create of a
    /// resource, though the question has no kind of its own.
    #[test]
    fn a_self_subject_review_is_a_create_of_its_resource() {
        let uri: axum::http::Uri = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
            .parse()
            .unwrap();
        let Attributes::Resource(r) = request_attributes(&Method::POST, &uri) else {
            panic!("taken as a path");
        };
        assert_eq!(
            (r.verb.as_str(), r.group.as_str(), r.version.as_str()),
            ("create", "authentication.k8s.io", "v1")
        );
        assert_eq!(r.resource, "selfsubjectreviews");
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
