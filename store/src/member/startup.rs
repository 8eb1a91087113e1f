//! Starting a member: its data directory, its cluster id (bootstrapped or asked of the
//! cluster it joins), the keyspace, Raft, and the tasks that run beside them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::Config;
use skiff_proto::raft::v1::HelloRequest;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::lessor::Lessor;
use super::{LeaderHistory, MemberConfig, PROPOSAL_TIMEOUT, RaftGate, StoreMember};
use crate::backend;
use crate::mvcc::Mvcc;
use crate::proposer::{Proposals, Proposer};
use crate::raft::log_store::LogStore;
use crate::raft::network::{Channels, Network, PeerActivity};
use crate::raft::state_machine::{Shared, StateMachine};
use crate::raft::{Member, Raft, cluster_id, member_id};
use crate::read_index::Rounds;
use crate::watch::Tagger;

const META_CLUSTER_ID: &[u8] = b"cluster_id";

/// Records the cluster ID in a member's database (a restored member's, before it starts).
pub(crate) fn write_cluster_id(db: &rocksdb::DB, id: u64) -> Result<(), crate::error::StoreError> {
    let mut synced = rocksdb::WriteOptions::default();
    synced.set_sync(true);
    db.put_cf_opt(
        backend::cf(db, backend::CF_META),
        META_CLUSTER_ID,
        backend::encode(&id),
        &synced,
    )
    .map_err(crate::error::StoreError::internal)
}

impl StoreMember {
    /// Opens the data directory and starts Raft. A new member of a new cluster bootstraps the
    /// initial membership; a restarted member resumes from its log and snapshot.
    pub async fn start(
        config: MemberConfig,
        tagger: Option<Tagger>,
    ) -> anyhow::Result<Arc<StoreMember>> {
        std::fs::create_dir_all(&config.data_dir)?;
        let db = backend::open(&config.data_dir.join("db"))?;
        let token = config.initial_cluster_token.clone();
        let id = member_id(&config.initial_advertise_peer_urls, &token);
        let peer_tls = match &config.tls.peer {
            Some(files) => Some(crate::tls::client_config(
                files,
                crate::tls::provider(&config.tls.cipher_suites)?,
            )?),
            None => None,
        };
        let channels = Channels::new(peer_tls);
        let activity = PeerActivity::default();
        let meta = backend::cf(&db, backend::CF_META);
        let cluster = match db.get_cf(meta, META_CLUSTER_ID)? {
            Some(b) => backend::decode::<u64>(&b)?,
            None => {
                let cid = if config.initial_cluster_state_new {
                    let ids: Vec<u64> = config
                        .initial_cluster
                        .iter()
                        .map(|(_, url)| member_id(std::slice::from_ref(url), &token))
                        .collect();
                    cluster_id(&ids)
                } else {
                    hello_any(&channels, &config, id).await?
                };
                write_cluster_id(&db, cid)?;
                cid
            }
        };
        let mut mvcc = Mvcc::open(db.clone()).map_err(anyhow::Error::new)?;
        mvcc.set_token_ttl(config.auth_token_ttl);
        let backlog = mvcc.backlog().clone();
        let shared = Shared::new(mvcc, tagger).map_err(anyhow::Error::new)?;
        // Every task of the member runs on `tasks` and stops with `cancel` (see `shutdown`).
        let cancel = CancellationToken::new();
        let tasks = TaskTracker::new();
        shared.spawn_watch_catch_up(cancel.clone(), &tasks);
        let proposals = Proposals::new(id);
        let sm = StateMachine::open(
            shared.clone(),
            proposals.clone(),
            &config.data_dir.join("snap"),
            crate::backup::Source {
                cluster_id: cluster,
                member_id: id,
                member_name: config.name.clone(),
            },
        )?;
        let metrics = shared.metrics.clone();
        let log = LogStore::open(
            db.clone(),
            &config.data_dir.join(crate::raft::log_store::LOG_DIR),
            proposals.clone(),
            metrics.clone(),
        )?;
        let log_tail = log.tail();
        // The log purged past what the snapshot on disk holds (a restored member), or ending
        // before what the keyspace applied (its last entries lost with the power, after a
        // later synced write made the keyspace durable; openraft purges up to the applied id
        // as it starts): a member that falls behind could be sent nothing, so a snapshot is
        // built at once.
        let lacks_snapshot = crate::raft::log_store::read_purged(&db)? > sm.snapshot_last()
            || sm.applied() > log_tail.last_log_id();
        let hb = config.heartbeat_interval.as_millis() as u64;
        let el = config.election_timeout.as_millis() as u64;
        let lease = super::election::vote_lease(config.heartbeat_interval).as_millis() as u64;
        let raft_config = Config {
            cluster_name: token.clone(),
            heartbeat_interval: hb,
            // Members campaign when `election` says so (PreVote first), never on openraft's
            // own timer. What openraft still takes from these two: its lease, `max` (a
            // follower refuses votes for that long after hearing from its leader), and how
            // long a vote request may take, `min`.
            enable_elect: false,
            election_timeout_min: (lease * 3 / 4).max(hb + 1),
            election_timeout_max: lease.max(hb + 2),
            install_snapshot_timeout: el.max(1000) * 2,
            max_payload_entries: 512,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(config.snapshot_count),
            max_in_snapshot_log_to_keep: config.snapshot_catchup_entries,
            purge_batch_size: 256,
            ..Config::default()
        }
        .validate()?;
        let raft = Raft::new(
            id,
            Arc::new(raft_config),
            Network {
                encodings: log.held_encodings(),
                channels: channels.clone(),
                activity: activity.clone(),
                metrics: metrics.clone(),
            },
            log,
            sm,
        )
        .await?;
        if config.initial_cluster_state_new && !raft.is_initialized().await? {
            let mut members = BTreeMap::new();
            for (name, url) in &config.initial_cluster {
                // Identical on every member: initialize writes it as log entry 0 everywhere,
                // so it must not depend on who writes it. Client URLs are added later.
                members.insert(
                    member_id(std::slice::from_ref(url), &token),
                    Member {
                        name: name.clone(),
                        peer_urls: vec![url.clone()],
                        client_urls: Vec::new(),
                    },
                );
            }
            if !members.contains_key(&id) {
                anyhow::bail!(
                    "--initial-cluster does not list this member's --initial-advertise-peer-urls ({})",
                    config.initial_advertise_peer_urls.join(",")
                );
            }
            // Every initial member proposes the same membership; whichever wins the first
            // election commits it, and the others' attempts are harmless.
            if let Err(e) = raft.initialize(members).await {
                tracing::debug!(error = %e, "initialize");
            }
        }
        if lacks_snapshot {
            // A restored member: its log starts past entries no snapshot holds yet.
            tracing::info!("building a snapshot of the restored keyspace");
            raft.trigger().snapshot().await?;
        }
        let raft_gate = Arc::new(RaftGate::default());
        let proposer = Proposer::start(
            raft.clone(),
            raft_gate.clone(),
            proposals,
            metrics.proposals_failed.clone(),
            PROPOSAL_TIMEOUT,
            cancel.clone(),
            &tasks,
        );
        super::compactor::spawn(
            shared.clone(),
            backlog.clone(),
            config.compactor,
            cancel.clone(),
            &tasks,
        );
        let elections = Arc::new(super::election::Elections::new(
            log_tail,
            config.heartbeat_interval,
            config.election_timeout,
        ));
        let member = Arc::new(StoreMember {
            id,
            cluster_id: cluster,
            config,
            raft,
            shared,
            channels,
            lessor: Mutex::new(Lessor::default()),
            lease_checkpoints: tokio::sync::Mutex::new(()),
            proposer,
            read_rounds: Rounds::new(),
            leader_rounds: Rounds::new(),
            activity,
            leader_history: LeaderHistory::default(),
            elections,
            backlog,
            membership_changes: tokio::sync::Mutex::new(()),
            raft_gate,
            cancel,
            tasks,
        });
        member.spawn_housekeeping();
        member.spawn_leader_history();
        member.spawn_elections();
        member.spawn_corruption_check(member.config.corrupt_check);
        member.spawn_auto_compaction(member.config.auto_compaction);
        Ok(member)
    }
}

/// A status's message and the chain of errors under it (a TLS refusal is three levels down a
/// "transport error").
fn with_causes(status: &tonic::Status) -> String {
    use std::error::Error as _;
    let mut text = status.message().to_string();
    let mut source = status.source();
    while let Some(e) = source {
        let part = e.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = e.source();
    }
    text
}

/// Asks the initial cluster's members for the cluster id (a member joining an existing
/// cluster).
async fn hello_any(channels: &Channels, config: &MemberConfig, me: u64) -> anyhow::Result<u64> {
    let mut last_err = None;
    for _ in 0..50 {
        for (_, url) in &config.initial_cluster {
            if member_id(std::slice::from_ref(url), &config.initial_cluster_token) == me {
                continue;
            }
            let mut client = channels.peer_client(url)?;
            match client
                .hello(HelloRequest {
                    cluster_token: config.initial_cluster_token.clone(),
                })
                .await
            {
                Ok(r) => return Ok(r.into_inner().cluster_id),
                Err(e) => last_err = Some(e),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::bail!(
        "no member of --initial-cluster answered (joining an existing cluster): {}",
        last_err.map(|e| with_causes(&e)).unwrap_or_default()
    )
}
