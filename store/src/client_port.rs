//! What a client URL serves besides the gRPC services: `/health`, `/readyz`, `/livez` and
//! `/metrics` over HTTP/1.1 or HTTP/2, as etcd serves them on its client URLs (so probes and
//! scrapers pointed at an etcd endpoint work unchanged), and the count of every gRPC call by
//! how it ended (`grpc_server_handled_total`).
//!
//! A request is gRPC when its `content-type` says so; anything else goes to the HTTP routes.
//!
//! A process that serves more than the etcd API on the client URLs may put a [`CallGate`] in
//! front of every gRPC call: it refuses a call before its service sees it, and is told how
//! each call it let through ended. Skiff's Kubernetes API server, in the member's process,
//! gates the etcd services with Kubernetes RBAC and writes its own calls to its audit log.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http_body_util::BodyExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tonic::body::Body;
use tonic::codegen::http;
use tower::ServiceExt;

use crate::metrics::GrpcLabels;

/// Who may make a gRPC call on the client URLs, and what is done when it ends.
pub trait CallGate: std::fmt::Debug + Send + Sync + 'static {
    /// Checks the call to `path` (its headers, and in `extensions` the connection it came on,
    /// a `ConnInfo`): the status to answer when it may not be made; else what to run with
    /// its status code when it has ended, if anything. It may leave in `extensions` what the
    /// service reads.
    fn admit(
        &self,
        path: &str,
        headers: &http::HeaderMap,
        extensions: &mut http::Extensions,
    ) -> Result<Option<CallDone>, tonic::Status>;
}

/// What a [`CallGate`] runs when a call it let through has ended, with its status code.
pub type CallDone = Box<dyn FnOnce(tonic::Code) + Send>;

/// Puts the HTTP routes beside the gRPC services of a tonic server, and counts its calls.
#[derive(Debug, Clone)]
pub struct ClientPortLayer {
    http: axum::Router,
    handled: Family<GrpcLabels, Counter>,
    gate: Option<Arc<dyn CallGate>>,
}

impl ClientPortLayer {
    pub fn new(
        http: axum::Router,
        handled: Family<GrpcLabels, Counter>,
        gate: Option<Arc<dyn CallGate>>,
    ) -> Self {
        ClientPortLayer {
            http,
            handled,
            gate,
        }
    }
}

impl<S> tower::Layer<S> for ClientPortLayer {
    type Service = ClientPort<S>;
    fn layer(&self, grpc: S) -> ClientPort<S> {
        ClientPort {
            grpc,
            http: self.http.clone(),
            handled: self.handled.clone(),
            gate: self.gate.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ClientPort<S> {
    grpc: S,
    http: axum::Router,
    handled: Family<GrpcLabels, Counter>,
    gate: Option<Arc<dyn CallGate>>,
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
        let mut done = None;
        if let Some(gate) = &self.gate {
            let (parts, body) = req.into_parts();
            let mut parts = parts;
            match gate.admit(parts.uri.path(), &parts.headers, &mut parts.extensions) {
                Ok(d) => done = d,
                Err(status) => return Box::pin(async move { Ok(status.into_http()) }),
            }
            req = http::Request::from_parts(parts, body);
        }
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
            Ok(count(resp, labels, handled, done))
        })
    }
}

/// Counts the call once its status is known: in the headers of a trailers-only answer, else
/// in the trailers at the end of the body. A stream the client abandons is not counted.
fn count(
    resp: http::Response<Body>,
    labels: GrpcLabels,
    handled: Family<GrpcLabels, Counter>,
    mut done: Option<CallDone>,
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
        if let Some(done) = done.take() {
            done(code.map_or(tonic::Code::Unknown, tonic::Code::from_i32));
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
