//! Leader election, so that of several scheduler (or controller manager) processes exactly
//! one acts, and fencing, so that a deposed leader cannot write after another took over.
//!
//! The leader holds one key in the store's etcd keyspace, attached to a lease it keeps
//! alive. Taking the lead is a transaction "create the key if it does not exist"; the key's
//! create revision is the leadership's fencing token: every fenced write (a scheduler's Bind)
//! carries it, and the store commits it only while the key still has that create revision.
//! A standby watches the key and tries again when it is deleted (released, or its lease
//! expired).
//!
//! Losing the lease (keep-alives failing for a whole TTL, or the store saying the lease is
//! gone) ends the leadership; the process then stops, as kube-scheduler and
//! kube-controller-manager do, and its supervisor starts it again as a standby.

use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, PutOptions, Txn, TxnOp, TxnOpResponse,
    WatchOptions,
};
use tokio::sync::watch;

use crate::backoff::Backoff;
use crate::tls::ClientTls;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("leader election: {0}")]
    Etcd(#[from] etcd_client::Error),
    #[error("leader election: the store answered without a header")]
    NoHeader,
    #[error("leader election: {0}")]
    Tls(#[from] crate::tls::TlsFileError),
}

/// A held leadership: the fencing token and a signal that turns true when it is lost.
pub struct Leadership {
    pub key: String,
    /// The key's create revision: the fencing token Bind carries.
    pub revision: i64,
    pub lease: i64,
    lost: watch::Receiver<bool>,
    keeper: tokio::task::JoinHandle<()>,
    client: Client,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("key", &self.key)
            .field("revision", &self.revision)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl Leadership {
    /// Resolves when the leadership is lost.
    pub async fn lost(&mut self) {
        while !*self.lost.borrow() {
            if self.lost.changed().await.is_err() {
                return;
            }
        }
    }

    /// Gives the lead up (deletes the key with its lease) so a standby takes over at once.
    pub async fn release(mut self) {
        self.keeper.abort();
        let _ = self.client.lease_revoke(self.lease).await;
    }
}

/// Waits until this process leads on `key`; `identity` is stored as the key's value.
/// Over TLS with `tls` (the certificate naming a user the store lets hold the key). The
/// store failing or refusing (not reachable yet, no permission yet while the cluster's
/// roles are being created) is logged and tried again with back-off, as kube-scheduler's
/// leader election does; only unreadable TLS files end it.
pub async fn acquire(
    endpoints: &[String],
    tls: Option<&ClientTls>,
    key: &str,
    identity: &str,
    ttl: Duration,
) -> Result<Leadership, Error> {
    let endpoints: Vec<String> = endpoints
        .iter()
        .map(|e| crate::tls::url(e, tls.is_some()))
        .collect();
    let mut opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5))
        .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2));
    if let Some(t) = tls {
        opts = opts.with_tls(t.config()?);
    }
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        let round = async {
            let mut client = Client::connect(&endpoints, Some(opts.clone())).await?;
            loop {
                if let Some(l) = attempt(&mut client, key, identity, ttl).await? {
                    return Ok::<_, Error>(l);
                }
            }
        };
        match round.await {
            Ok(l) => return Ok(l),
            Err(e) => {
                tracing::warn!(error = %e, key, "leader election failed; trying again");
                backoff.wait().await;
            }
        }
    }
}

/// One round: the leadership when this process took it, else `None` once the holder's key
/// is gone (after standing by for it).
async fn attempt(
    client: &mut Client,
    key: &str,
    identity: &str,
    ttl: Duration,
) -> Result<Option<Leadership>, Error> {
    let ttl_s = ttl.as_secs().max(2) as i64;
    {
        let lease = client.lease_grant(ttl_s, None).await?.id();
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key,
                identity,
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else([TxnOp::get(key, None)]);
        let resp = client.txn(txn).await?;
        let revision = resp.header().ok_or(Error::NoHeader)?.revision();
        if resp.succeeded() {
            let (tx, rx) = watch::channel(false);
            let keeper = tokio::spawn(keep_alive(client.clone(), lease, ttl, tx));
            tracing::info!(key, identity, revision, "became the leader");
            return Ok(Some(Leadership {
                key: key.to_string(),
                revision,
                lease,
                lost: rx,
                keeper,
                client: client.clone(),
            }));
        }
        let _ = client.lease_revoke(lease).await;
        let holder = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g
                .kvs()
                .first()
                .map(|kv| (kv.value_str().unwrap_or("?").to_string(), kv.mod_revision())),
            _ => None,
        });
        let Some((holder, mod_revision)) = holder else {
            return Ok(None); // deleted in between: try again
        };
        tracing::info!(leader = holder, "standing by");
        // Wait for the key to go away, from just after the version we saw.
        let mut stream = client
            .watch(
                key,
                Some(WatchOptions::new().with_start_revision(mod_revision + 1)),
            )
            .await?;
        while let Some(r) = stream.message().await? {
            if r.events()
                .iter()
                .any(|e| e.event_type() == EventType::Delete)
            {
                return Ok(None);
            }
        }
        Ok(None)
    }
}

/// Renews the lease every third of its TTL; flags the leadership lost when the store says
/// the lease is gone or no renewal succeeded for a whole TTL.
async fn keep_alive(mut client: Client, lease: i64, ttl: Duration, lost: watch::Sender<bool>) {
    let mut last_ok = Instant::now();
    let period = ttl / 3;
    // A broken keep-alive stream is reopened quickly (the lease must be renewed within its
    // TTL), but not in a tight loop while no member answers.
    let mut backoff = Backoff::new(
        Duration::from_millis(100),
        period.min(Duration::from_secs(1)),
    );
    loop {
        let renewed = async {
            let (mut keeper, mut stream) = client.lease_keep_alive(lease).await?;
            loop {
                keeper.keep_alive().await?;
                match stream.message().await? {
                    Some(r) if r.ttl() > 0 => {
                        last_ok = Instant::now();
                        backoff.reset();
                    }
                    // The store no longer knows the lease: the key is gone.
                    Some(_) => return Ok::<bool, etcd_client::Error>(false),
                    // The stream closed (the member went away): open a new one.
                    None => return Ok(true),
                }
                if last_ok.elapsed() >= ttl {
                    return Ok(false);
                }
                tokio::time::sleep(period).await;
            }
        }
        .await;
        match renewed {
            Ok(false) => break,
            Ok(true) if last_ok.elapsed() >= ttl => break,
            Ok(true) => backoff.wait().await,
            Err(e) => {
                tracing::warn!(error = %e, "lease keep-alive failed");
                if last_ok.elapsed() >= ttl {
                    break;
                }
                backoff.wait().await;
            }
        }
    }
    tracing::error!("leadership lost");
    let _ = lost.send(true);
}
