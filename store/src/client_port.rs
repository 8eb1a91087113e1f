//! What a client URL serves besides the gRPC services: `/health`, `/readyz`, `/livez` and
//! `/metrics` over HTTP/1.1 or HTTP/2, as etcd serves them on its client URLs (so probes and
//! scrapers pointed at an etcd endpoint work unchanged), and the count of every gRPC call by
//! how it ended (`grpc_server_handled_total`).
//!
//! A request is gRPC when its `content-type` says so; anything else goes to the HTTP routes.
//!
//! Under Kubernetes RBAC the etcd services are the cluster's back end, as etcd is behind
//! kube-apiserver: a call to one is a request for the path that names it
//! (`/etcdserverpb.KV/Range`, verb `post`), made by the user its client certificate names,
//! and refused (PERMISSION_DENIED) unless a ClusterRole grants that path. `cluster-admin`
//! grants every path; the scheduler and the controller manager hold their leadership keys
//! through KV, Lease and Watch; node agents get none of it.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body_util::BodyExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tonic::body::Body;
use tonic::codegen::http;
use tower::ServiceExt;

use crate::access::Attributes;
use crate::access::audit::{AuditLog, Level, Record, Slot, http_code};
use crate::cluster::ClusterApi;
use crate::metrics::GrpcLabels;
use crate::tls::ConnInfo;

/// Puts the HTTP routes beside the gRPC services of a tonic server, and counts its calls.
#[derive(Debug, Clone)]
pub struct ClientPortLayer {
    http: axum::Router,
    handled: Family<GrpcLabels, Counter>,
    /// The API whose access rules gate the etcd services, when they are gated (RBAC).
    gate: Option<ClusterApi>,
    /// The API whose audit log records the cluster API's calls, when one is kept.
    audit: Option<ClusterApi>,
}

impl ClientPortLayer {
    pub fn new(http: axum::Router, handled: Family<GrpcLabels, Counter>, api: &ClusterApi) -> Self {
        ClientPortLayer {
            http,
            handled,
            gate: api.access.config.rbac().then(|| api.clone()),
            audit: api.access.audit.is_some().then(|| api.clone()),
        }
    }
}

/// Whether the etcd service call at `path` may be made on `conn`; the status to answer if not.
fn etcd_gate(api: &ClusterApi, path: &str, conn: Option<&ConnInfo>) -> Result<(), tonic::Status> {
    if !path.starts_with("/etcdserverpb.") {
        return Ok(());
    }
    let user = api
        .access
        .authenticate(None, conn.and_then(|c| c.client.as_ref()), api)
        .map_err(|e| tonic::Status::unauthenticated(e.to_string()))?;
    api.authorize(&user, Attributes::path("post", path))
        .map_err(|e| tonic::Status::permission_denied(e.to_string()))
}

impl<S> tower::Layer<S> for ClientPortLayer {
    type Service = ClientPort<S>;
    fn layer(&self, grpc: S) -> ClientPort<S> {
        ClientPort {
            grpc,
            http: self.http.clone(),
            handled: self.handled.clone(),
            gate: self.gate.clone(),
            audit: self.audit.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ClientPort<S> {
    grpc: S,
    http: axum::Router,
    handled: Family<GrpcLabels, Counter>,
    gate: Option<ClusterApi>,
    audit: Option<ClusterApi>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower::Service<http::Request<B>> for ClientPort<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<http::Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.grpc.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let grpc = req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/grpc"));
        if !grpc {
            let router = self.http.clone();
            return Box::pin(async move {
                let resp = match router.oneshot(req).await {
                    Ok(resp) => resp,
                    Err(never) => match never {},
                };
                Ok(resp.map(Body::new))
            });
        }
        if let Some(api) = &self.gate
            && let Err(status) = etcd_gate(api, req.uri().path(), req.extensions().get())
        {
            return Box::pin(async move { Ok(status.into_http()) });
        }
        // Calls of the cluster API go to the audit log, when one is kept: the handler says
        // who asked what through the slot, the event is written when the call has ended.
        let audit = self
            .audit
            .as_ref()
            .filter(|_| req.uri().path().starts_with(CLUSTER_API))
            .map(|api| {
                let slot = Slot::default();
                req.extensions_mut().insert(slot.clone());
                let conn = req.extensions().get::<ConnInfo>();
                Pending {
                    api: api.clone(),
                    slot,
                    uri: req.uri().path().to_owned(),
                    source_ip: conn
                        .and_then(|c| c.tcp.remote_addr())
                        .map(|a| a.ip().to_string()),
                    user_agent: req
                        .headers()
                        .get(http::header::USER_AGENT)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned(),
                    received: chrono::Utc::now(),
                }
            });
        let (service, method) = split_path(req.uri().path());
        let labels = GrpcLabels {
            grpc_type: grpc_type(&service, &method),
            grpc_service: service,
            grpc_method: method,
            grpc_code: "",
        };
        let handled = self.handled.clone();
        // The service that was polled ready takes the call; a fresh clone waits for the next.
        let ready = self.grpc.clone();
        let mut inner = std::mem::replace(&mut self.grpc, ready);
        Box::pin(async move {
            let resp = inner.call(req).await?;
            Ok(count(resp, labels, handled, audit))
        })
    }
}

/// Counts the call once its status is known: in the headers of a trailers-only answer, else
/// in the trailers at the end of the body. A stream the client abandons is not counted.
fn count(
    resp: http::Response<Body>,
    labels: GrpcLabels,
    handled: Family<GrpcLabels, Counter>,
    mut audit: Option<Pending>,
) -> http::Response<Body> {
    let mut record = move |headers: &http::HeaderMap, labels: &GrpcLabels| {
        let Some(code) = headers
            .get("grpc-status")
            .map(|c| c.to_str().ok().and_then(|c| c.parse::<i32>().ok()))
        else {
            return false;
        };
        handled
            .get_or_create(&GrpcLabels {
                grpc_code: code_name(code),
                ..labels.clone()
            })
            .inc();
        if let Some(a) = audit.take() {
            a.done(code.map_or(tonic::Code::Unknown, tonic::Code::from_i32));
        }
        true
    };
    if record(resp.headers(), &labels) {
        return resp;
    }
    resp.map(|body| {
        Body::new(body.map_frame(move |frame| {
            if let Some(trailers) = frame.trailers_ref() {
                record(trailers, &labels);
            }
            frame
        }))
    })
}

/// The path prefix of the cluster API's calls.
const CLUSTER_API: &str = "/skiff.cluster.v1.Cluster/";

/// A cluster API call on its way, for the audit log.
struct Pending {
    api: ClusterApi,
    slot: Slot,
    uri: String,
    source_ip: Option<String>,
    user_agent: String,
    received: chrono::DateTime<chrono::Utc>,
}

impl Pending {
    /// Writes the call's event, at the level the policy gives who asked what; a call that
    /// ended before its handler knew either (it did not decode, its credentials were
    /// wrong) is written as a path.
    fn done(self, code: tonic::Code) {
        let Some(log) = self.api.access.audit.as_ref() else {
            return;
        };
        let asked = self.slot.take();
        let (user, attributes, allowed) = match asked {
            Some(a) => (a.user, a.attributes, Some(a.allowed)),
            None => (
                crate::access::User {
                    name: String::new(),
                    uid: String::new(),
                    groups: Vec::new(),
                },
                Attributes::path("post", &self.uri),
                None,
            ),
        };
        let level = log.policy.level(&user, &attributes);
        if level == Level::None {
            return;
        }
        log.record(&Record {
            level,
            id: AuditLog::new_id(),
            uri: self.uri,
            user,
            impersonated: None,
            source_ip: self.source_ip,
            user_agent: self.user_agent,
            attributes,
            decision: allowed.map(|a| if a { "allow" } else { "forbid" }),
            code: http_code(code),
            received: self.received,
            done: chrono::Utc::now(),
            request_object: None,
            response_object: None,
        });
    }
}

fn split_path(path: &str) -> (String, String) {
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let service = parts.next().unwrap_or_default().to_string();
    let method = parts.next().unwrap_or_default().to_string();
    (service, method)
}

/// etcd's label for the shape of a call.
fn grpc_type(service: &str, method: &str) -> &'static str {
    match (service, method) {
        ("etcdserverpb.Watch", "Watch") | ("etcdserverpb.Lease", "LeaseKeepAlive") => "bidi_stream",
        ("etcdserverpb.Maintenance", "Snapshot") | (_, "Watch") => "server_stream",
        _ => "unary",
    }
}

/// grpc-go's names of the status codes, which etcd's label values are.
fn code_name(code: Option<i32>) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "Canceled",
        "Unknown",
        "InvalidArgument",
        "DeadlineExceeded",
        "NotFound",
        "AlreadyExists",
        "PermissionDenied",
        "ResourceExhausted",
        "FailedPrecondition",
        "Aborted",
        "OutOfRange",
        "Unimplemented",
        "Internal",
        "Unavailable",
        "DataLoss",
        "Unauthenticated",
    ];
    code.and_then(|c| usize::try_from(c).ok())
        .and_then(|c| NAMES.get(c).copied())
        .unwrap_or("Unknown")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_labelled_as_etcd_labels_them() {
        assert_eq!(
            split_path("/etcdserverpb.KV/Range"),
            ("etcdserverpb.KV".into(), "Range".into())
        );
        assert_eq!(grpc_type("etcdserverpb.Watch", "Watch"), "bidi_stream");
        assert_eq!(
            grpc_type("etcdserverpb.Lease", "LeaseKeepAlive"),
            "bidi_stream"
        );
        assert_eq!(
            grpc_type("etcdserverpb.Maintenance", "Snapshot"),
            "server_stream"
        );
        assert_eq!(
            grpc_type("skiff.cluster.v1.Cluster", "Watch"),
            "server_stream"
        );
        assert_eq!(grpc_type("etcdserverpb.KV", "Put"), "unary");
        assert_eq!(code_name(Some(0)), "OK");
        assert_eq!(code_name(Some(14)), "Unavailable");
        assert_eq!(code_name(Some(99)), "Unknown");
        assert_eq!(code_name(None), "Unknown");
    }
}
