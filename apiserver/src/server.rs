//! The API server in a store member's process: the cluster API beside the etcd services on
//! the member's client URLs, the REST API on URLs of its own, and the RBAC policy kept
//! current, all started once the member is ready ([`InProcess`] is the member's
//! [`Extension`]).

use std::sync::Arc;

use anyhow::Context as _;
use skiff_proto::cluster::v1::cluster_server::ClusterServer;
use skiff_store::kv::MemberKv;
use skiff_store::member::StoreMember;
use skiff_store::server::{
    ClientExtras, Extension, GRPC_OVERHEAD, Reserved, listen_all, reserve_all, server_tls,
};
use skiff_store::tls::{ClientCerts, TlsSettings};
use skiff_store::watch::Tagger;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::access::{Access, AccessConfig};
use crate::cluster::gate::ApiGate;
use crate::cluster::{ApiConfig, ClusterApi};
use crate::listener::{ApiListener, ApiPeer};

/// Where the API server is served in a member's process.
#[derive(Debug, Clone, Default)]
pub struct ApiListen {
    /// The REST API's URLs (none: the cluster API alone, on the client URLs).
    pub rest_urls: Vec<String>,
    /// The member's client URLs, where the cluster API is served.
    pub client_urls: Vec<String>,
    /// Whether `http://` URLs may serve the API (`--apiserver-insecure`).
    pub insecure: bool,
}

impl ApiListen {
    /// The API is served over TLS only, unless the user asked for plain HTTP by name: on a
    /// plain `http://` URL anyone who reaches the port is a client no certificate names
    /// (kube-apiserver dropped its insecure port for this reason).
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        if self.insecure {
            return Ok(());
        }
        let mut urls = self.rest_urls.iter().chain(&self.client_urls);
        if let Some(url) = urls.find(|u| u.starts_with("http://")) {
            anyhow::bail!(
                "{url}: the Kubernetes API is served over https:// only, with a serving \
                 certificate (`skiff store --cert-file --key-file`, `skiff apiserver \
                 --tls-cert-file --tls-private-key-file`); on http:// it answers anyone who \
                 reaches the port without knowing who they are: add --apiserver-insecure to \
                 serve it so anyway"
            );
        }
        Ok(())
    }
}

/// The API server, to run inside a store member's process.
#[derive(Debug)]
pub struct InProcess {
    config: ApiConfig,
    access: Arc<Access>,
    /// The REST API's ports, bound (a taken one fails the start before the member's data
    /// directory is touched), listened on once the member is ready.
    rest: Vec<Reserved>,
}

impl InProcess {
    /// Loads the access rules (a token file or audit policy that does not load fails here)
    /// and binds the REST API's URLs, which serve the member's client certificate (client
    /// certificates optional there: a bearer token may name the user instead).
    pub fn new(
        config: ApiConfig,
        access: AccessConfig,
        listen: &ApiListen,
        tls: &TlsSettings,
    ) -> anyhow::Result<InProcess> {
        listen.check()?;
        let access = Arc::new(Access::new(access)?);
        let rest_tls = server_tls(
            tls.client.as_ref(),
            &tls.cipher_suites,
            ClientCerts::Optional,
        )?;
        let rest = reserve_all(
            &listen.rest_urls,
            "the Kubernetes API",
            rest_tls.as_ref(),
            "https:// needs --cert-file and --key-file (the Kubernetes API serves the client URLs' certificate)",
        )?;
        Ok(InProcess {
            config,
            access,
            rest,
        })
    }
}

impl Extension for InProcess {
    fn tagger(&self) -> Option<Tagger> {
        Some(crate::cluster::watch::tagger())
    }

    fn start(
        self,
        member: Arc<StoreMember>,
        tasks: &mut JoinSet<anyhow::Result<()>>,
        stop: CancellationToken,
    ) -> anyhow::Result<ClientExtras> {
        let limit = member.config.max_request_bytes + GRPC_OVERHEAD;
        // One cluster API behind both faces: they share its event lease, UID sequence,
        // quota usage and access rules.
        let api =
            ClusterApi::with_access(Arc::new(MemberKv(member)), self.access.clone(), self.config);
        serve_rest(&api, self.rest, tasks, &stop)?;
        let gate = ApiGate::new(&api).map(|g| Arc::new(g) as _);
        Ok(ClientExtras {
            services: Some(Arc::new(move |routes: tonic::service::Routes| {
                routes.add_service(
                    ClusterServer::new(api.clone())
                        .max_decoding_message_size(limit)
                        .max_encoding_message_size(usize::MAX),
                )
            })),
            gate,
        })
    }
}

/// Starts what the API server runs beside its cluster API, on `tasks` until `stop`: the
/// system objects (when it serves REST), the CRDs' kinds, the RBAC policy kept current (under
/// RBAC), the node authorizer's graph kept current (under Node), and the REST API on the
/// `rest` ports.
pub(crate) fn serve_rest(
    api: &ClusterApi,
    rest: Vec<Reserved>,
    tasks: &mut JoinSet<anyhow::Result<()>>,
    stop: &CancellationToken,
) -> anyhow::Result<()> {
    // The system namespaces and priority classes are the Kubernetes API's: a member that
    // serves only the cluster API (an etcd for Skiff's own components) writes nothing of
    // its own accord.
    if !rest.is_empty() {
        // Every task here lives as long as the server (one that ends stops it), so this one
        // waits for the stop once the system objects are in place.
        let api = api.clone();
        let stop = stop.clone();
        tasks.spawn(async move {
            tokio::select! {
                () = async {
                    crate::cluster::system::ensure(api).await;
                    stop.cancelled().await;
                } => {}
                () = stop.cancelled() => {}
            }
            Ok(())
        });
    }
    tasks.spawn(crate::cluster::crds::maintain(api.clone(), stop.clone()));
    if !rest.is_empty() {
        tasks.spawn(crate::cluster::apiservices::maintain(
            api.clone(),
            stop.clone(),
        ));
        tasks.spawn(crate::cluster::kubernetes_service::maintain(
            api.clone(),
            api.config.advertise,
            stop.clone(),
        ));
    }
    if api.access.config.rbac() {
        let policy = api.access.policy().clone();
        tasks.spawn(crate::cluster::rbac_policy::maintain(
            api.clone(),
            policy,
            true,
            stop.clone(),
        ));
    }
    if api.access.node_mode() {
        tasks.spawn(crate::cluster::node_graph::maintain(
            api.clone(),
            stop.clone(),
        ));
    }
    for (l, tls) in listen_all(rest, "the Kubernetes API")? {
        let address = l
            .local_addr()
            .context("the Kubernetes API listener")?
            .to_string();
        let router = crate::rest::router(api.clone(), address);
        let stop = stop.clone();
        tasks.spawn(async move {
            axum::serve(
                ApiListener::new(l, tls),
                router.into_make_service_with_connect_info::<ApiPeer>(),
            )
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
            .context("Kubernetes API server")
        });
    }
    Ok(())
}
