//! Any etcd v3 cluster as a [`Kv`]: Skiff's API server on an etcd that is not Skiff's (etcd
//! 3.4 or 3.5, or a Skiff store over the wire).
//!
//! Writes, leases and the revision a linearizable read must see go to etcd. Reads and watches
//! are served from a mirror of the client's keys in etcd (its [`KeyMap`]: every key, or the
//! prefixes it keeps in an etcd shared with others): a keyspace of this process (`mvcc`,
//! under a watch hub, as a member's), listed from etcd once and then kept current by one etcd
//! watch, at etcd's own revisions (see `Mvcc::mirror`). This is kube-apiserver's watch cache
//! with its consistent reads: a read after [`Kv::barrier`], and a write's answer, wait until
//! the mirror has reached etcd's revision, so the API server answers from the mirror what it
//! would answer from the store it runs in. The tag index and the keys changed since a
//! revision, the store's two extensions, come from the mirror's own keyspace.
//!
//! ```text
//!   txn, lease_grant ──── KeyMap ────────────► etcd ──┐ watch of every key from R+1
//!   barrier: etcd's revision X, then wait ◄──┐          ▼ (others' keys only raise the revision)
//!   keyspace(): read, watch ◄──────────── mirror (RocksDB in --data-dir, compacted to
//!                                          --history) ◄── follower task: list at R, watch,
//!                                                          list again when etcd compacted past it
//! ```

mod follow;
pub mod keys;
pub mod namespace;
pub mod wire;

pub use keys::KeyMap;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use skiff_proto::etcd::{
    PbLeaseGrantRequest, PbLeaseGrantResponse, PbRangeResponse, PbResponseHeader, PbTxnResponse,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::error::StoreError;
use crate::kv::{Header, Keyspace, Kv};
use crate::raft::state_machine::Shared;
use crate::request::{RangeRequest, TxnRequest, TxnResponse};
use crate::watch::Tagger;

/// How long a write's answer or a linearizable read waits for the mirror to reach etcd's
/// revision before it fails (the watch is down, or etcd is far ahead).
const CATCH_UP: Duration = Duration::from_secs(10);

/// How an API server reaches its etcd, and what it mirrors of it.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// etcd's client URLs (`http://host:port` or `https://host:port`), all of one cluster.
    pub endpoints: Vec<String>,
    /// The CA etcd's certificates chain to, and the client certificate to present, for
    /// `https://` endpoints (kube-apiserver's `--etcd-cafile`, `--etcd-certfile`,
    /// `--etcd-keyfile`).
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// Where the mirror keeps its keyspace; emptied at start (it is a cache).
    pub data_dir: PathBuf,
    /// How much history the mirror keeps for watches and lists at a past revision.
    pub history: Duration,
    /// The most operations etcd takes in one transaction (its `--max-txn-ops`, 128 by
    /// default): independent writes are sent in transactions of at most this many.
    pub max_txn_ops: usize,
    /// Where the client's keys are in etcd; the mirror holds those keys alone.
    pub keys: KeyMap,
}

/// An etcd cluster, reached over gRPC, as the API server's store.
#[derive(Debug)]
pub struct RemoteKv {
    channel: Channel,
    shared: Arc<Shared>,
    header: Mutex<Header>,
    /// The mirror's revision, raised by the follower as it applies.
    revision: watch::Receiver<i64>,
    max_txn_ops: usize,
    keys: KeyMap,
}

impl RemoteKv {
    /// Connects to etcd, lists the mirrored range and starts following it (the follower
    /// runs on `tasks` until `cancel`); fails when etcd cannot be reached or listed.
    pub async fn connect(
        config: RemoteConfig,
        tagger: Option<Tagger>,
        cancel: CancellationToken,
        tasks: &TaskTracker,
    ) -> anyhow::Result<Arc<RemoteKv>> {
        anyhow::ensure!(!config.endpoints.is_empty(), "no etcd endpoint given");
        let channel = channel(&config)?;
        let (shared, backlog) = follow::open_mirror(&config.data_dir, tagger)?;
        let (revision_tx, revision) = watch::channel(0);
        let follower = follow::Follower::new(channel.clone(), shared.clone(), &config, revision_tx);
        // etcd may start after its API servers (or restart under them): wait for it, as
        // kube-apiserver does, saying so, until it answers or the server is stopped.
        let mut backoff =
            skiff_proto::backoff::Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
        let header = loop {
            match follower.list().await {
                Ok(header) => break header,
                Err(e) => {
                    tracing::warn!(
                        error = format!("{e:#}"),
                        endpoints = ?config.endpoints,
                        "etcd does not answer; trying again"
                    );
                    tokio::select! {
                        () = backoff.wait() => {}
                        () = cancel.cancelled() => return Err(e.context("stopped while waiting for etcd")),
                    }
                }
            }
        };
        shared.spawn_watch_catch_up(cancel.clone(), tasks);
        crate::member::compactor::spawn(
            shared.clone(),
            backlog,
            crate::compaction::CompactorConfig::default(),
            cancel.clone(),
            tasks,
        );
        tasks.spawn(follower.run(cancel));
        Ok(Arc::new(RemoteKv {
            channel,
            shared,
            header: Mutex::new(header),
            revision,
            max_txn_ops: config.max_txn_ops.max(1),
            keys: config.keys,
        }))
    }

    fn note(&self, h: Option<&PbResponseHeader>) -> i64 {
        let Some(h) = h else {
            return 0;
        };
        *crate::lock(&self.header) = Header {
            cluster_id: h.cluster_id,
            member_id: h.member_id,
            raft_term: h.raft_term,
        };
        h.revision
    }

    /// Waits until the mirror holds etcd's revision `revision`. Every revision etcd makes
    /// changes some key, and the mirror follows every key, so an event brings it there; etcd's
    /// progress notifications are not relied on (before 3.4.25 and 3.5.8 etcd could send one
    /// ahead of events it had still to send, etcd issue 15220).
    async fn caught_up(&self, revision: i64) -> Result<(), StoreError> {
        let mut rx = self.revision.clone();
        let reached = tokio::time::timeout(CATCH_UP, rx.wait_for(|r| *r >= revision)).await;
        match reached {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(StoreError::Stopped),
            Err(_) => Err(StoreError::Unreachable(format!(
                "the watch of etcd did not reach revision {revision} within {CATCH_UP:?}"
            ))),
        }
    }

    /// A compaction of etcd at `revision` made through this API server: the mirror drops
    /// the same history once it has reached `revision`, so a watch from before it is told
    /// its start is gone, as etcd would tell it.
    pub async fn compacted(&self, revision: i64) -> Result<(), StoreError> {
        self.caught_up(revision).await?;
        self.shared.compact_mirror(revision)
    }

    /// Where the client's keys are in etcd.
    pub fn keys(&self) -> &KeyMap {
        &self.keys
    }

    /// The channel to etcd.
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    async fn txn_once(&self, txn: &TxnRequest) -> Result<(i64, TxnResponse), StoreError> {
        let mut req = wire::txn_request(txn);
        self.keys.txn_request_to_etcd(&mut req)?;
        let mut resp: PbTxnResponse = wire::unary(&self.channel, "/etcdserverpb.KV/Txn", req)
            .await
            .map_err(wire::status_error)?;
        self.keys.txn_response_from_etcd(&mut resp);
        let revision = self.note(resp.header.as_ref());
        let t = wire::txn_response(resp)?;
        self.caught_up(revision).await?;
        Ok((revision, t))
    }
}

/// One channel over every endpoint of `config`, with TLS for `https://` ones.
pub fn channel(config: &RemoteConfig) -> anyhow::Result<Channel> {
    use anyhow::Context as _;
    let tls = if config.endpoints.iter().any(|e| e.starts_with("https://")) {
        let mut tls = ClientTlsConfig::new();
        if let Some(ca) = &config.ca {
            let pem =
                std::fs::read(ca).with_context(|| format!("--etcd-cafile {}", ca.display()))?;
            tls = tls.ca_certificate(Certificate::from_pem(pem));
        }
        if let (Some(cert), Some(key)) = (&config.cert, &config.key) {
            let cert_pem = std::fs::read(cert)
                .with_context(|| format!("--etcd-certfile {}", cert.display()))?;
            let key_pem =
                std::fs::read(key).with_context(|| format!("--etcd-keyfile {}", key.display()))?;
            tls = tls.identity(Identity::from_pem(cert_pem, key_pem));
        }
        Some(tls)
    } else {
        None
    };
    let endpoints = config
        .endpoints
        .iter()
        .map(|url| {
            let url = if url.contains("://") {
                url.clone()
            } else {
                format!("http://{url}")
            };
            let mut e = Endpoint::from_shared(url.clone())
                .with_context(|| format!("--etcd-servers: {url} is not a URL"))?
                .connect_timeout(Duration::from_secs(5))
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(30))
                .keep_alive_timeout(Duration::from_secs(10));
            if let (true, Some(tls)) = (url.starts_with("https://"), &tls) {
                e = e
                    .tls_config(tls.clone())
                    .with_context(|| format!("TLS to {url}"))?;
            }
            Ok(e)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Channel::balance_list(endpoints.into_iter()))
}

impl Kv for RemoteKv {
    fn keyspace(&self) -> Keyspace {
        Keyspace::new(self.shared.clone())
    }

    fn header(&self) -> Header {
        *crate::lock(&self.header)
    }

    fn max_txn_ops(&self) -> usize {
        self.max_txn_ops
    }

    fn txn(&self, txn: TxnRequest) -> BoxFuture<'_, Result<(i64, TxnResponse), StoreError>> {
        Box::pin(async move { self.txn_once(&txn).await })
    }

    fn lease_grant(&self, ttl: i64) -> BoxFuture<'_, Result<i64, StoreError>> {
        Box::pin(async move {
            let resp: PbLeaseGrantResponse = wire::unary(
                &self.channel,
                "/etcdserverpb.Lease/LeaseGrant",
                PbLeaseGrantRequest { ttl, id: 0 },
            )
            .await
            .map_err(wire::status_error)?;
            self.note(resp.header.as_ref());
            if !resp.error.is_empty() {
                return Err(StoreError::Internal(resp.error));
            }
            Ok(resp.id)
        })
    }

    fn barrier(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            // etcd's revision now, read linearizably: counting one key costs nothing.
            let resp: PbRangeResponse = wire::unary(
                &self.channel,
                "/etcdserverpb.KV/Range",
                wire::range_request(&RangeRequest {
                    key: b"\0".to_vec(),
                    count_only: true,
                    ..RangeRequest::default()
                }),
            )
            .await
            .map_err(wire::status_error)?;
            let revision = self.note(resp.header.as_ref());
            self.caught_up(revision).await
        })
    }
}
