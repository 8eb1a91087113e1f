//! Serving a member: the etcd services on the client URLs, the peer service on the peer URLs,
//! and `/health` and `/metrics` over HTTP on the metrics URLs (and on the client URLs). What
//! else a process serves beside its member (Skiff's Kubernetes API server, in-process) comes
//! in through one [`Extension`].

use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use skiff_proto::etcd::{
    PbAuthServer, PbClusterServer, PbKvServer, PbLeaseServer, PbMaintenanceServer,
};
use skiff_proto::raft::v1::raft_peer_server::RaftPeerServer;
use tokio::net::{TcpListener, TcpSocket};

use skiff_proto::metrics::{self, Registry, Scrape, Sink};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;

use crate::client_port::{CallGate, ClientPortLayer};
use crate::command::Alarm;
use crate::etcd::auth::AuthService;
use crate::etcd::cluster::ClusterService;
use crate::etcd::kv::KvService;
use crate::etcd::lease::LeaseService;
use crate::etcd::maintenance::MaintenanceService;
use crate::etcd::watch::{WatchServer, WatchService};
use crate::member::peer::PeerService;
use crate::member::{MemberConfig, StoreMember};
use crate::watch::Tagger;

/// gRPC framing and metadata on top of the largest request, as etcd allows.
pub const GRPC_OVERHEAD: usize = 512 * 1024;

/// Where a member listens.
#[derive(Debug, Clone)]
pub struct Listen {
    pub client_urls: Vec<String>,
    pub peer_urls: Vec<String>,
    pub metrics_urls: Vec<String>,
    /// How often watchers that asked for progress notifications get one.
    pub watch_progress_notify_interval: Duration,
}

/// `http://host:port` or `https://host:port` → the address to bind.
pub fn socket_addr(url: &str) -> anyhow::Result<SocketAddr> {
    let rest = if let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    {
        rest
    } else if url.starts_with("unix://") {
        bail!("{url}: unix sockets are not supported; use http:// or https://");
    } else {
        bail!("{url}: expected a URL like http://127.0.0.1:2379");
    };
    let hostport = rest.trim_end_matches('/');
    hostport
        .to_socket_addrs()
        .with_context(|| format!("{url}: not a host:port"))?
        .next()
        .with_context(|| format!("{url}: resolves to no address"))
}

/// The TLS a listener serves (`https://` URLs), or none.
pub type ServerTls = Option<Arc<rustls::ServerConfig>>;

/// Each URL's address and the TLS it serves (`https://` URLs), from `tls` (an `https://`
/// URL without it is refused, saying why: `no_tls`).
fn targets(
    urls: &[String],
    tls: Option<&Arc<rustls::ServerConfig>>,
    no_tls: &str,
) -> anyhow::Result<Vec<(SocketAddr, String, ServerTls)>> {
    urls.iter()
        .map(|url| {
            let tls = if url.starts_with("https://") {
                Some(tls.with_context(|| format!("{url}: {no_tls}"))?.clone())
            } else {
                None
            };
            Ok((socket_addr(url)?, url.clone(), tls))
        })
        .collect()
}

/// Binds and listens on every URL; each listener comes with the TLS it serves.
async fn bind_all(
    urls: &[String],
    what: &str,
    tls: Option<&Arc<rustls::ServerConfig>>,
    no_tls: &str,
) -> anyhow::Result<Vec<(TcpListener, ServerTls)>> {
    let mut out = Vec::new();
    for (addr, url, tls) in targets(urls, tls, no_tls)? {
        out.push((
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("listening for {what} on {url}"))?,
            tls,
        ));
    }
    Ok(out)
}

/// A port bound at start and listened on once the member is ready for what comes to it:
/// until then a connection is refused, not held.
#[derive(Debug)]
pub struct Reserved {
    socket: TcpSocket,
    url: String,
    tls: ServerTls,
}

/// Binds every URL without listening yet (see [`Reserved`]): a port another process listens
/// on still fails the start at once.
pub fn reserve_all(
    urls: &[String],
    what: &str,
    tls: Option<&Arc<rustls::ServerConfig>>,
    no_tls: &str,
) -> anyhow::Result<Vec<Reserved>> {
    let mut out = Vec::new();
    for (addr, url, tls) in targets(urls, tls, no_tls)? {
        let bind = || -> std::io::Result<TcpSocket> {
            let socket = if addr.is_ipv4() {
                TcpSocket::new_v4()?
            } else {
                TcpSocket::new_v6()?
            };
            // As a listener binds: a restarted member's port may hold connections in TIME_WAIT.
            socket.set_reuseaddr(true)?;
            socket.bind(addr)?;
            Ok(socket)
        };
        let socket = bind().with_context(|| format!("listening for {what} on {url}"))?;
        out.push(Reserved { socket, url, tls });
    }
    Ok(out)
}

/// Listens on reserved ports.
pub fn listen_all(
    reserved: Vec<Reserved>,
    what: &str,
) -> anyhow::Result<Vec<(TcpListener, ServerTls)>> {
    reserved
        .into_iter()
        .map(|r| {
            let l = r
                .socket
                .listen(LISTEN_BACKLOG)
                .with_context(|| format!("listening for {what} on {}", r.url))?;
            Ok((l, r.tls))
        })
        .collect()
}

/// Connections a listener queues before it accepts them (tokio's own listeners' figure).
const LISTEN_BACKLOG: u32 = 1024;

/// How long a starting member keeps its client ports closed waiting to know a leader, in
/// election timeouts; past it, it serves anyway (requests then wait for a leader, or fail
/// saying there is none), so a member cut off from its majority still answers.
const READY_WAIT_ELECTIONS: u32 = 2;

/// How long a stopping member lets requests in flight finish before closing connections.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(1);

/// Streams a client may reset before the server has accepted them, per connection, before h2
/// closes the connection (its guard against "rapid reset" floods). h2's default is 20. A
/// client that cancels requests it has given up on (a deadline passed while this member was
/// busy) reaches 20 in a burst, and the closing breaks every stream on the connection, its
/// watches and lease keep-alives included. A thousand still bounds what one connection can
/// queue.
const PENDING_RESET_STREAMS: usize = 1_000;

/// What a process that serves a member adds to it, beside the etcd API: Skiff's Kubernetes
/// API server, when it runs in the member's process. The store knows it only through this
/// trait: an extension tags watched keys, starts its own listeners once the member is ready,
/// and adds gRPC services (and a gate over every call) to the client URLs.
pub trait Extension: Send + 'static {
    /// How the watch hub tags keys for its tag index (see [`Tagger`]); none by default.
    fn tagger(&self) -> Option<Tagger> {
        None
    }

    /// Starts what the extension serves over `member`, once the member knows its leader and
    /// just before the client URLs listen: its tasks go on `tasks` and end when `stop` is
    /// cancelled (an error from one stops the member). What it adds to the client URLs.
    fn start(
        self,
        member: Arc<StoreMember>,
        tasks: &mut JoinSet<anyhow::Result<()>>,
        stop: CancellationToken,
    ) -> anyhow::Result<ClientExtras>;
}

/// What an [`Extension`] serves on the client URLs beside the etcd services.
#[derive(Default)]
pub struct ClientExtras {
    /// Adds more gRPC services to the etcd services' routes (their paths must not be
    /// etcd's); called once per client URL.
    pub services: Option<Arc<AddServices>>,
    /// Checks every gRPC call before it reaches its service.
    pub gate: Option<Arc<dyn CallGate>>,
}

/// Adds gRPC services to a client URL's routes.
pub type AddServices = dyn Fn(Routes) -> Routes + Send + Sync;

impl std::fmt::Debug for ClientExtras {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientExtras")
            .field("services", &self.services.is_some())
            .field("gate", &self.gate)
            .finish()
    }
}

/// A member serving the etcd API and nothing else.
#[derive(Debug, Clone, Copy)]
pub struct EtcdOnly;

impl Extension for EtcdOnly {
    fn start(
        self,
        _: Arc<StoreMember>,
        _: &mut JoinSet<anyhow::Result<()>>,
        _: CancellationToken,
    ) -> anyhow::Result<ClientExtras> {
        Ok(ClientExtras::default())
    }
}

/// The TLS a URL serves when it is `https://`, from `files` (none: `https://` is refused).
pub fn server_tls(
    files: Option<&crate::tls::TlsFiles>,
    cipher_suites: &[String],
    certs: crate::tls::ClientCerts,
) -> anyhow::Result<ServerTls> {
    let Some(files) = files else {
        return Ok(None);
    };
    let provider = crate::tls::provider(cipher_suites)?;
    Ok(Some(crate::tls::server_config(files, provider, certs)?))
}

/// Starts the member and serves the etcd API until `shutdown` resolves.
pub async fn run(
    config: MemberConfig,
    listen: Listen,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    run_with(config, listen, EtcdOnly, shutdown).await
}

/// Starts the member and serves it, with what `extension` adds, until `shutdown` resolves.
pub async fn run_with<E: Extension>(
    config: MemberConfig,
    listen: Listen,
    extension: E,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    use crate::tls::ClientCerts;
    let suites = &config.tls.cipher_suites;
    let client_tls = server_tls(
        config.tls.client.as_ref(),
        suites,
        ClientCerts::AsConfigured,
    )?;
    let peer_tls = server_tls(config.tls.peer.as_ref(), suites, ClientCerts::AsConfigured)?;
    // Bind first: a taken port fails the start before anything touches the data directory.
    // The client ports listen once the member knows its leader (see below); peers and
    // metrics at once.
    let client = reserve_all(
        &listen.client_urls,
        "clients",
        client_tls.as_ref(),
        "https:// needs --cert-file and --key-file",
    )?;
    let peer = bind_all(
        &listen.peer_urls,
        "peers",
        peer_tls.as_ref(),
        "https:// needs --peer-cert-file and --peer-key-file",
    )
    .await?;
    let metrics = plain(
        bind_all(
            &listen.metrics_urls,
            "metrics",
            None,
            "metrics URLs serve plain HTTP only (the client URLs serve /metrics over TLS)",
        )
        .await?,
    );
    let stop = CancellationToken::new();
    let mut tasks = JoinSet::new();
    // Peers must be reachable while the member starts (a joining member says hello first).
    let (member_tx, member_rx) = tokio::sync::watch::channel(None::<Arc<StoreMember>>);
    for (l, tls) in peer {
        let mut rx = member_rx.clone();
        let stop = stop.clone();
        tasks.spawn(async move {
            let member = loop {
                if let Some(m) = rx.borrow().clone() {
                    break m;
                }
                if rx.changed().await.is_err() {
                    return Ok(());
                }
            };
            let service = PeerService::new(member.clone());
            // AppendEntries arrive on the peer stream; everything else over gRPC.
            let incoming = crate::raft::stream::split(
                crate::tls::accept(l, tls),
                service.clone(),
                member.config.max_request_bytes,
            );
            tonic::transport::Server::builder()
                .http2_max_pending_accept_reset_streams(Some(PENDING_RESET_STREAMS))
                .trace_fn(|req| tracing::trace_span!("store.peer", method = %req.uri().path()))
                .add_service(
                    RaftPeerServer::new(service)
                        .max_decoding_message_size(usize::MAX)
                        .max_encoding_message_size(usize::MAX),
                )
                .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
                .await
                .context("peer server")
        });
    }
    let member = StoreMember::start(config, extension.tagger()).await?;
    let _ = member_tx.send(Some(member.clone()));
    // A member started again on a busy cluster knows no leader until the leader's next
    // heartbeat finds it; the requests it took meanwhile could only wait, and every client
    // that tried it stalled. Refused instead, they go to the other members at once.
    let ready_wait = member.config.election_timeout * READY_WAIT_ELECTIONS;
    if !member.wait_for_leader(ready_wait).await {
        tracing::info!(
            waited_ms = ready_wait.as_millis() as u64,
            "no leader known yet: serving clients anyway"
        );
    }
    let extras = extension.start(member.clone(), &mut tasks, stop.clone())?;
    let client = listen_all(client, "clients")?;
    let limit = member.config.max_request_bytes + GRPC_OVERHEAD;
    for (l, tls) in client {
        let m = member.clone();
        let stop = stop.clone();
        let progress = listen.watch_progress_notify_interval;
        let (services, gate) = (extras.services.clone(), extras.gate.clone());
        tasks.spawn(async move {
            let mut server = tonic::transport::Server::builder()
                // etcd serves `/health` and the like on its client URLs, over HTTP/1.1 too.
                .accept_http1(true)
                .http2_max_pending_accept_reset_streams(Some(PENDING_RESET_STREAMS))
                // One span per request (and per stream), named by its gRPC method.
                .trace_fn(|req| tracing::debug_span!("store.request", method = %req.uri().path()))
                // Watch streams are long-lived; etcd allows practically unlimited ones too.
                .max_concurrent_streams(Some(1 << 20))
                .layer(tower::util::MapResponseLayer::new(
                    crate::etcd::oversized_as_grpc_go::<tonic::body::Body>,
                ))
                .layer(ClientPortLayer::new(
                    http_routes(m.clone()),
                    m.shared.metrics.grpc_handled.clone(),
                    gate,
                ));
            let mut routes = Routes::new(
                PbKvServer::new(KvService::new(m.clone())).max_decoding_message_size(limit),
            )
            .add_service(WatchServer::new(
                WatchService::new(m.clone(), progress),
                limit,
            ))
            .add_service(
                PbLeaseServer::new(LeaseService::new(m.clone())).max_decoding_message_size(limit),
            )
            .add_service(
                PbClusterServer::new(ClusterService::new(m.clone()))
                    .max_decoding_message_size(limit),
            )
            .add_service(
                PbMaintenanceServer::new(MaintenanceService::new(m.clone()))
                    .max_decoding_message_size(limit),
            )
            .add_service(
                PbAuthServer::new(AuthService::new(m.clone())).max_decoding_message_size(limit),
            );
            if let Some(add) = services {
                routes = add(routes);
            }
            server
                .add_routes(routes)
                .serve_with_incoming_shutdown(crate::tls::accept(l, tls), stop.cancelled_owned())
                .await
                .context("client server")
        });
    }
    for l in metrics {
        let m = member.clone();
        let stop = stop.clone();
        tasks.spawn(async move {
            axum::serve(l, http_routes(m))
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
                .context("metrics server")
        });
    }
    tracing::info!(
        member = %format_args!("{:x}", member.id),
        cluster = %format_args!("{:x}", member.cluster_id),
        name = %member.config.name,
        "store member serving"
    );
    let result = tokio::select! {
        _ = shutdown => Ok(()),
        fatal = raft_failed(&member) => Err(anyhow::anyhow!(
            "Raft stopped on an error: {fatal}; exiting so that the member starts again from its \
             data directory"
        )),
        Some(r) = tasks.join_next() => match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(e.into()),
        },
    };
    // A leader hands over first, while its servers still answer peers and forwarded writes.
    member.step_down().await;
    stop.cancel();
    member.shutdown().await;
    // Graceful shutdown waits for open connections, and peers and watchers hold theirs open
    // for as long as they live: give requests in flight a moment, then close the rest.
    let drained = tokio::time::timeout(SHUTDOWN_DRAIN, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::info!("closing the connections still open after shutdown");
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
    result
}

/// Resolves when the member's Raft core stops on an error (a storage write that failed, such
/// as a full disk): the member can no longer take part, and what its keyspace holds may be
/// part way through a change. It exits, as etcd does, so whatever supervises it (systemd,
/// `skiff up`) starts it again, and the start repairs the keyspace from the log and the kept
/// snapshot.
async fn raft_failed(member: &StoreMember) -> String {
    // The core reports its error in its metrics and then ends, dropping their senders; the
    // server metrics change only with elections, so waiting on them costs nothing per write.
    let mut ended = member.raft.server_metrics();
    while ended.changed().await.is_ok() {}
    match &member.raft.metrics().borrow().running_state {
        Err(fatal) => fatal.to_string(),
        Ok(()) => "its metrics ended".into(),
    }
}

/// Listeners that serve no TLS (metrics).
fn plain(bound: Vec<(TcpListener, ServerTls)>) -> Vec<TcpListener> {
    bound.into_iter().map(|(l, _)| l).collect()
}

/// `/metrics`, `/health`, `/readyz` and `/livez` of one member, served on its metrics URLs
/// and beside gRPC on its client URLs.
fn http_routes(member: Arc<StoreMember>) -> axum::Router {
    let health_member = member.clone();
    let ready_member = member.clone();
    metrics::router(Arc::new(registry(member)))
        .route(
            "/health",
            axum::routing::get(move || {
                let m = health_member.clone();
                async move { health(&m) }
            }),
        )
        .route(
            "/readyz",
            axum::routing::get(
                move |q: axum::extract::Query<std::collections::HashMap<String, String>>| {
                    let m = ready_member.clone();
                    async move { readyz(&m, q.contains_key("verbose")) }
                },
            ),
        )
        // The process answers: it is live (etcd's `/livez` checks no more than that either,
        // bar a deadlock its own check would not see).
        .route("/livez", axum::routing::get(|| async { "ok" }))
}

/// The checks behind `/health` and `/readyz`: each one's name and, when it fails, why.
fn checks(m: &StoreMember) -> [(&'static str, Option<&'static str>); 4] {
    let alarms = m.shared.read().alarms();
    let alarm = if alarms.iter().any(|(_, a)| *a == Alarm::Corrupt) {
        Some("ALARM CORRUPT")
    } else if !alarms.is_empty() {
        Some("ALARM NOSPACE")
    } else {
        None
    };
    [
        ("leader", m.leader().is_none().then_some("RAFT NO LEADER")),
        ("alarm", alarm),
        (
            "watch_catch_up",
            (!m.shared.hub.catch_up_running()).then_some("WATCH CATCH-UP STOPPED"),
        ),
        (
            "compaction",
            m.compaction_backlog()
                .failing()
                .then_some("COMPACTION FAILING"),
        ),
    ]
}

/// etcd's `/readyz`: `ok`, or the failed checks; `?verbose` lists every check.
fn readyz(m: &StoreMember, verbose: bool) -> (axum::http::StatusCode, String) {
    let checks = checks(m);
    let ok = checks.iter().all(|(_, failed)| failed.is_none());
    let mut out = String::new();
    for (name, failed) in &checks {
        match failed {
            Some(why) => out.push_str(&format!("[-]{name} failed: {why}\n")),
            None if verbose => out.push_str(&format!("[+]{name} ok\n")),
            None => {}
        }
    }
    if ok {
        out.push_str(if verbose {
            "readyz check passed\n"
        } else {
            "ok"
        });
        (axum::http::StatusCode::OK, out)
    } else {
        out.push_str("readyz check failed\n");
        (axum::http::StatusCode::SERVICE_UNAVAILABLE, out)
    }
}

/// etcd's `/health`: healthy when a leader is known and no alarm is raised; and, Skiff's own,
/// when the watch catch-up task runs (without it, watches from a past revision stay silent) and
/// while deleting compacted versions does not fail (a member whose backend cannot be written
/// is not healthy, whatever Raft says).
fn health(m: &StoreMember) -> (axum::http::StatusCode, String) {
    let failed = checks(m).into_iter().find_map(|(_, failed)| failed);
    let (ok, reason) = (failed.is_none(), failed.unwrap_or_default());
    let code = if ok {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        format!("{{\"health\":\"{ok}\",\"reason\":\"{reason}\"}}\n"),
    )
}

/// The member's metrics: its state, read at each scrape, and the process's.
fn registry(member: Arc<StoreMember>) -> Registry {
    let mut r = metrics::registry();
    member.shared.metrics.register(&mut r);
    r.register_collector(Box::new(Scrape(move |s: &mut Sink<'_>| {
        scrape(s, &member)?;
        scrape_etcd(s, &member)
    })));
    r
}

/// What the member holds, under etcd's metric names (its gauges and counters; the histograms
/// are in [`skiff_store::metrics`](crate::metrics)).
fn scrape_etcd(s: &mut Sink<'_>, m: &StoreMember) -> std::fmt::Result {
    let flag = |b: bool| u64::from(b);
    let keys = m.shared.read().key_count() as u64;
    let size = m.db_size();
    s.gauge(
        "etcd_server_has_leader",
        "Whether or not a leader exists. 1 is existence, 0 is not.",
        flag(m.leader().is_some()),
    )?;
    s.gauge(
        "etcd_server_is_leader",
        "Whether or not this member is a leader. 1 if is, 0 otherwise.",
        flag(m.is_leader()),
    )?;
    s.counter(
        "etcd_server_leader_changes_seen",
        "The number of leader changes seen.",
        m.leader_history().changes(),
    )?;
    s.gauge(
        "etcd_server_proposals_committed_total",
        "The total number of consensus proposals committed.",
        m.shared.metrics.committed_index().max(m.applied_index()),
    )?;
    s.gauge(
        "etcd_server_proposals_applied_total",
        "The total number of consensus proposals applied.",
        m.applied_index(),
    )?;
    s.gauge(
        "etcd_server_proposals_pending",
        "The current number of pending proposals to commit.",
        m.pending_proposals() as u64,
    )?;
    s.gauge(
        "etcd_mvcc_db_total_size_in_bytes",
        "Total size of the underlying database physically allocated in bytes.",
        size,
    )?;
    s.gauge(
        "etcd_mvcc_db_total_size_in_use_in_bytes",
        "Total size of the underlying database logically in use in bytes.",
        size,
    )?;
    s.gauge(
        "etcd_debugging_mvcc_keys_total",
        "Total number of keys.",
        keys,
    )
}

fn scrape(s: &mut Sink<'_>, m: &StoreMember) -> std::fmt::Result {
    let (revision, compacted, keys, leases) = {
        let mvcc = m.shared.read();
        (
            mvcc.revision(),
            mvcc.compacted(),
            mvcc.key_count(),
            mvcc.leases().len(),
        )
    };
    let hub = &m.shared.hub;
    let backlog = m.compaction_backlog();
    let flag = |b: bool| u64::from(b);
    s.gauge(
        "skiff_store_has_leader",
        "Whether a leader is known (1) or not (0).",
        flag(m.leader().is_some()),
    )?;
    s.gauge(
        "skiff_store_is_leader",
        "Whether this member is the leader.",
        flag(m.is_leader()),
    )?;
    s.gauge(
        "skiff_store_active_voters",
        "On the leader: voters that answered within an election timeout, itself included \
         (what a membership change needs a quorum of); 0 on other members.",
        m.active_voters() as u64,
    )?;
    s.gauge("skiff_store_raft_term", "Current Raft term.", m.term())?;
    s.gauge(
        "skiff_store_raft_index",
        "Last Raft log index.",
        m.raft_index(),
    )?;
    s.gauge(
        "skiff_store_raft_applied_index",
        "Last applied Raft log index.",
        m.applied_index(),
    )?;
    s.gauge(
        "skiff_store_raft_purged_index",
        "Last Raft log index purged behind a snapshot: a member behind it is sent a snapshot.",
        m.purged_index(),
    )?;
    s.gauge(
        "skiff_store_mvcc_revision",
        "Current store revision.",
        revision,
    )?;
    s.gauge(
        "skiff_store_mvcc_compact_revision",
        "Revision of the last compaction.",
        compacted,
    )?;
    s.gauge(
        "skiff_store_mvcc_compaction_pending_versions",
        "Versions compacted from the index and not yet deleted from the backend.",
        backlog.pending() as u64,
    )?;
    s.gauge(
        "skiff_store_mvcc_compaction_last_duration_seconds",
        "How long the last compaction took to delete its versions from the backend.",
        backlog.last_duration().as_secs_f64(),
    )?;
    s.gauge(
        "skiff_store_mvcc_keys",
        "Keys with history in the index.",
        keys as u64,
    )?;
    s.gauge("skiff_store_leases", "Live leases.", leases as u64)?;
    s.gauge(
        "skiff_store_watchers",
        "Registered watchers.",
        hub.watcher_count() as u64,
    )?;
    s.gauge(
        "skiff_store_watchers_unsynced",
        "Watchers behind the current revision, caught up from history.",
        hub.unsynced_count() as u64,
    )?;
    s.gauge(
        "skiff_store_watch_catch_up_running",
        "Whether the watch catch-up task runs (0: watchers that fall behind get nothing).",
        flag(hub.catch_up_running()),
    )?;
    s.gauge(
        "skiff_store_db_size_bytes",
        "Backend size on disk and in memtables.",
        m.db_size(),
    )?;
    let backend_memory = crate::backend::memory(m.shared.read().db());
    s.gauges(
        "skiff_store_backend_memory_bytes",
        "What the backend (RocksDB) holds in memory, outside the heap figure, by part.",
        &backend_memory.map(|(part, bytes)| ([("part", part)], bytes)),
    )?;
    if let Some(bytes) = HEAP_PROBE.get().and_then(|probe| probe()) {
        // Exact, unlike the resident set: what a benchmark divides by watchers or keys.
        s.gauge(
            "skiff_heap_allocated_bytes",
            "Bytes allocated on the heap and not yet freed.",
            bytes,
        )?;
    }
    s.counter(
        "skiff_store_snapshots_installed",
        "Snapshots received from a leader and installed.",
        m.shared
            .snapshots_installed
            .load(std::sync::atomic::Ordering::Relaxed),
    )?;
    let stats = hub.catch_up_stats();
    s.counter(
        "skiff_store_watch_catch_up_passes",
        "Passes of the watch catch-up task.",
        stats.passes(),
    )?;
    s.counter(
        "skiff_store_watch_catch_up_reads",
        "History reads of the watch catch-up task, one per group of watchers near each other.",
        stats.reads(),
    )?;
    s.counter(
        "skiff_store_watch_catch_up_responses",
        "Responses sent to watchers that were behind.",
        stats.responses(),
    )?;
    s.counter(
        "skiff_store_watch_catch_up_events",
        "Events sent to watchers that were behind.",
        stats.events(),
    )?;
    s.counter(
        "skiff_store_watch_catch_up_failures",
        "Catch-up reads that failed or panicked (their watchers were cancelled).",
        stats.failures(),
    )
}

/// Reads the bytes this process has allocated on its heap, where the program's allocator can
/// tell (the `skiff` binary sets it: jemalloc's statistics).
type HeapProbe = fn() -> Option<u64>;

static HEAP_PROBE: std::sync::OnceLock<HeapProbe> = std::sync::OnceLock::new();

/// Lets `/metrics` export `skiff_heap_allocated_bytes`; call once, before serving.
pub fn set_heap_probe(probe: HeapProbe) {
    let _ = HEAP_PROBE.set(probe);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_urls() {
        assert_eq!(
            socket_addr("http://127.0.0.1:2379").expect("valid"),
            "127.0.0.1:2379".parse().expect("addr")
        );
        assert_eq!(
            socket_addr("https://127.0.0.1:2379").expect("valid"),
            "127.0.0.1:2379".parse().expect("addr")
        );
        assert!(socket_addr("unix:///run/skiff.sock").is_err());
        assert!(socket_addr("127.0.0.1:2379").is_err());
        assert!(socket_addr("http://127.0.0.1").is_err());
    }
}
