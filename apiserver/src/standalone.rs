//! The API server on its own process, over any etcd v3 cluster (`skiff apiserver
//! --etcd-servers`): etcd 3.4 or 3.5, or Skiff's own store over the wire. The store is a
//! [`RemoteKv`]: writes go to etcd, reads and watches come from its mirror.
//!
//! It serves the REST API on its API URLs and, on its client URLs, the cluster API beside
//! etcd's services passed through to its etcd, so Skiff's components (which hold their
//! leader leases through etcd's API and everything else through the cluster API) take the
//! API server's client URLs as their endpoints, as they take a member's.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::Context as _;
use futures::future::BoxFuture;
use skiff_proto::cluster::v1::cluster_server::ClusterServer;
use skiff_store::client_port::ClientPortLayer;
use skiff_store::remote::{RemoteConfig, RemoteKv};
use skiff_store::server::{listen_all, reserve_all, server_tls};
use skiff_store::tls::{ClientCerts, TlsSettings};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::codegen::http;
use tonic::service::Routes;
use tonic::transport::Channel;

use crate::access::{Access, AccessConfig};
use crate::cluster::gate::ApiGate;
use crate::cluster::{ApiConfig, ClusterApi};
use crate::server::ApiListen;

/// Largest cluster API request, as a member takes it (etcd's 1.5 MiB and gRPC framing).
const MAX_REQUEST: usize = 2 * 1024 * 1024;

/// Everything `skiff apiserver` runs with.
#[derive(Debug)]
pub struct Standalone {
    pub api: ApiConfig,
    pub access: AccessConfig,
    pub etcd: RemoteConfig,
    pub listen: ApiListen,
    /// The serving certificate of `https://` URLs (its `client` files; `client_ca` names the
    /// Kubernetes users' CA).
    pub tls: TlsSettings,
}

/// Runs the API server until `shutdown` resolves.
pub async fn run(
    config: Standalone,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    config.listen.check()?;
    let access = Arc::new(Access::new(config.access)?);
    let tls = server_tls(
        config.tls.client.as_ref(),
        &config.tls.cipher_suites,
        ClientCerts::Optional,
    )?;
    let no_tls = "https:// needs --tls-cert-file and --tls-private-key-file";
    let rest = reserve_all(
        &config.listen.rest_urls,
        "the Kubernetes API",
        tls.as_ref(),
        no_tls,
    )?;
    let grpc = reserve_all(
        &config.listen.client_urls,
        "the cluster API",
        tls.as_ref(),
        no_tls,
    )?;
    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();
    let etcd = skiff_store::remote::channel(&config.etcd)?;
    let kv = RemoteKv::connect(
        config.etcd,
        Some(crate::cluster::watch::tagger()),
        cancel.clone(),
        &tracker,
    )
    .await
    .context("connecting to etcd")?;
    let api = ClusterApi::with_access(kv.clone(), access, config.api);
    let mut tasks = JoinSet::new();
    crate::server::serve_rest(&api, rest, &mut tasks, &cancel)?;
    let gate = ApiGate::new(&api).map(|g| Arc::new(g) as _);
    let registry = Arc::new(skiff_proto::metrics::registry());
    for (l, tls) in listen_all(grpc, "the cluster API")? {
        let routes = Routes::new(
            ClusterServer::new(api.clone())
                .max_decoding_message_size(MAX_REQUEST)
                .max_encoding_message_size(usize::MAX),
        );
        let router = routes.into_axum_router().fallback_service(EtcdProxy {
            etcd: etcd.clone(),
            kv: kv.clone(),
        });
        let http = skiff_proto::metrics::router(registry.clone())
            .route("/healthz", axum::routing::get(|| async { "ok" }));
        let layer = ClientPortLayer::new(http, Default::default(), gate.clone());
        let stop = cancel.clone();
        tasks.spawn(async move {
            tonic::transport::Server::builder()
                .accept_http1(true)
                .max_concurrent_streams(Some(1 << 20))
                .layer(layer)
                .add_routes(Routes::from(router))
                .serve_with_incoming_shutdown(
                    skiff_store::tls::accept(l, tls),
                    stop.cancelled_owned(),
                )
                .await
                .context("cluster API server")
        });
    }
    tracing::info!("API server serving");
    let result = tokio::select! {
        () = shutdown => Ok(()),
        Some(r) = tasks.join_next() => match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(e.into()),
        },
    };
    cancel.cancel();
    tracker.close();
    tasks.shutdown().await;
    tracker.wait().await;
    result
}

/// etcd's services on the API server's client URLs, passed through to its etcd unchanged:
/// the components' leader elections (KV, Lease, Watch) reach the etcd the API server uses. A
/// compaction made this way compacts the API server's mirror too.
#[derive(Debug, Clone)]
struct EtcdProxy {
    etcd: Channel,
    kv: Arc<RemoteKv>,
}

/// The path of etcd's Compact call.
const COMPACT: &str = "/etcdserverpb.KV/Compact";

impl tower::Service<http::Request<axum::body::Body>> for EtcdProxy {
    type Response = http::Response<axum::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<axum::body::Body>) -> Self::Future {
        let proxy = self.clone();
        Box::pin(async move {
            let path = req.uri().path().to_owned();
            if !path.starts_with("/etcdserverpb.") {
                let status = tonic::Status::unimplemented(format!("{path} is not served here"));
                return Ok(status.into_http());
            }
            if path == COMPACT {
                return Ok(proxy.compact(req).await.unwrap_or_else(|s| s.into_http()));
            }
            Ok(proxy.forward(req.map(tonic::body::Body::new)).await)
        })
    }
}

impl EtcdProxy {
    async fn forward(
        &self,
        req: http::Request<tonic::body::Body>,
    ) -> http::Response<axum::body::Body> {
        let mut channel = self.etcd.clone();
        let answer = match tower::ServiceExt::ready(&mut channel).await {
            Ok(ch) => tower::Service::call(ch, req).await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(resp) => resp.map(axum::body::Body::new),
            Err(e) => tonic::Status::unavailable(format!("etcd: {e}")).into_http(),
        }
    }

    /// Compact: read (a small unary message), passed on, and once etcd has compacted, the
    /// mirror compacted to the same revision.
    async fn compact(
        &self,
        req: http::Request<axum::body::Body>,
    ) -> Result<http::Response<axum::body::Body>, tonic::Status> {
        use http_body_util::BodyExt as _;
        use prost::Message as _;
        let (parts, body) = req.into_parts();
        let bytes = body
            .collect()
            .await
            .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?
            .to_bytes();
        // One gRPC frame: a flag byte, the length (4 bytes), the message.
        let message = bytes
            .get(5..)
            .ok_or_else(|| tonic::Status::invalid_argument("a Compact call without a message"))?;
        let revision = skiff_proto::etcd::PbCompactionRequest::decode(message)
            .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?
            .revision;
        let req = http::Request::from_parts(
            parts,
            tonic::body::Body::new(http_body_util::Full::new(bytes)),
        );
        let (parts, body) = self.forward(req).await.into_parts();
        let collected = body
            .collect()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let ok = |h: &http::HeaderMap| h.get("grpc-status").is_some_and(|v| v == "0");
        if ok(&parts.headers) || collected.trailers().is_some_and(ok) {
            self.kv
                .compacted(revision)
                .await
                .map_err(tonic::Status::from)?;
        }
        let trailers = collected.trailers().cloned();
        let mut body = http_body_util::Full::new(collected.to_bytes())
            .map_err(|never| match never {})
            .boxed_unsync();
        if let Some(t) = trailers {
            body = body
                .with_trailers(async move { Some(Ok(t)) })
                .boxed_unsync();
        }
        Ok(http::Response::from_parts(
            parts,
            axum::body::Body::new(body),
        ))
    }
}
