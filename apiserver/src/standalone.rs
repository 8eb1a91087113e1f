//! The API server on its own process, over any etcd v3 cluster (`skiff apiserver
//! --etcd-servers`): etcd 3.4 or 3.5, or Skiff's own store over the wire. The store is a
//! [`RemoteKv`]: writes go to etcd, reads and watches come from its mirror.
//!
//! It serves the REST API on its API URLs and, on its client URLs, the cluster API beside
//! etcd's services passed through to its etcd (keys moved to where `--etcd-prefix` keeps
//! them), so Skiff's components (which hold their leader leases through etcd's API and
//! everything else through the cluster API) take the API server's client URLs as their
//! endpoints, as they take a member's.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::Context as _;
use futures::future::BoxFuture;
use skiff_proto::cluster::v1::cluster_server::ClusterServer;
use skiff_proto::etcd::{PbKvServer, PbWatchServer};
use skiff_store::client_port::ClientPortLayer;
use skiff_store::remote::namespace::{NamespacedKv, NamespacedWatch};
use skiff_store::remote::{KeyMap, RemoteConfig, RemoteKv};
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

/// kube-apiserver's default `--etcd-prefix`: the objects' keys as the API server names them.
pub const DEFAULT_ETCD_PREFIX: &str = "/registry";

/// Where the API server's keys are in etcd for `--etcd-prefix prefix`: `/registry/…` under
/// `prefix/…` and Skiff's own `/skiff/…` under `prefix-skiff/…`; for the default prefix,
/// every key where it is named (the layout of a member's own API server), and all of etcd.
pub fn etcd_keys(prefix: &str) -> anyhow::Result<KeyMap> {
    let trimmed = prefix.trim_end_matches('/');
    anyhow::ensure!(
        trimmed.starts_with('/') && trimmed.len() > 1,
        "--etcd-prefix {prefix:?}: a key prefix such as /registry or /clusters/a (starting \
         with / and not / alone)"
    );
    if trimmed == DEFAULT_ETCD_PREFIX {
        return Ok(KeyMap::everything());
    }
    KeyMap::new([
        (
            format!("{DEFAULT_ETCD_PREFIX}/").into_bytes(),
            format!("{trimmed}/").into_bytes(),
        ),
        (
            b"/skiff/".to_vec(),
            format!("{trimmed}-skiff/").into_bytes(),
        ),
    ])
    .map_err(|e| anyhow::anyhow!("--etcd-prefix {prefix:?}: {e}"))
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
    let mut shutdown = Box::pin(shutdown);
    let connect = RemoteKv::connect(
        config.etcd,
        Some(crate::cluster::watch::tagger()),
        cancel.clone(),
        &tracker,
    );
    let kv = tokio::select! {
        kv = connect => kv.context("connecting to etcd")?,
        () = &mut shutdown => {
            cancel.cancel();
            tracker.close();
            tracker.wait().await;
            return Ok(());
        }
    };
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
        )
        .add_service(
            PbKvServer::new(NamespacedKv::new(kv.clone()))
                .max_decoding_message_size(MAX_REQUEST)
                .max_encoding_message_size(usize::MAX),
        )
        .add_service(
            PbWatchServer::new(NamespacedWatch::new(kv.clone()))
                .max_decoding_message_size(MAX_REQUEST)
                .max_encoding_message_size(usize::MAX),
        );
        let router = routes
            .into_axum_router()
            .fallback_service(EtcdProxy { etcd: etcd.clone() });
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
        () = &mut shutdown => Ok(()),
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

/// etcd's services other than KV and Watch (Lease, Cluster, Maintenance, Auth) on the API
/// server's client URLs, passed through to its etcd unchanged: they name no key. KV and Watch
/// go through [`NamespacedKv`] and [`NamespacedWatch`], which move keys to where the API
/// server keeps them (`--etcd-prefix`).
#[derive(Debug, Clone)]
struct EtcdProxy {
    etcd: Channel,
}

impl tower::Service<http::Request<axum::body::Body>> for EtcdProxy {
    type Response = http::Response<axum::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<axum::body::Body>) -> Self::Future {
        let mut channel = self.etcd.clone();
        Box::pin(async move {
            let path = req.uri().path().to_owned();
            if !path.starts_with("/etcdserverpb.") {
                let status = tonic::Status::unimplemented(format!("{path} is not served here"));
                return Ok(status.into_http());
            }
            let req = req.map(tonic::body::Body::new);
            let answer = match tower::ServiceExt::ready(&mut channel).await {
                Ok(ch) => tower::Service::call(ch, req).await,
                Err(e) => Err(e),
            };
            Ok(match answer {
                Ok(resp) => resp.map(axum::body::Body::new),
                Err(e) => tonic::Status::unavailable(format!("etcd: {e}")).into_http(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_etcd_prefix_takes_the_place_of_registry() {
        let keys = etcd_keys("/clusters/a/").expect("valid");
        assert_eq!(
            keys.key_to_etcd(b"/registry/pods/ns/p").expect("an object"),
            b"/clusters/a/pods/ns/p"
        );
        assert_eq!(
            keys.key_to_etcd(b"/skiff/ipam/podcidrs/x")
                .expect("a claim"),
            b"/clusters/a-skiff/ipam/podcidrs/x"
        );
        assert!(keys.key_to_etcd(b"/other").is_err());
        // The default: every key where it is named, as in a member.
        let default = etcd_keys(DEFAULT_ETCD_PREFIX).expect("valid");
        assert!(default.is_identity());
        assert_eq!(default.key_to_etcd(b"/other").expect("any key"), b"/other");
        for bad in ["", "/", "registry"] {
            let e = etcd_keys(bad).expect_err(bad).to_string();
            assert!(e.contains("--etcd-prefix"), "{e}");
        }
    }
}
