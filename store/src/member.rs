//! A running store member: the Raft node, the keyspace it applies to, and the operations the
//! API services need — proposals, linearizable reads, lease keep-alive and membership changes —
//! each of which a follower forwards to the leader, so any member can be used as an endpoint.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::error::{ClientWriteError, RaftError};
use openraft::{ChangeMembers, Config, ServerState};
use serde::{Deserialize, Serialize};
use skiff_proto::raft::v1::{HelloRequest, RaftMessage};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend;
use crate::command::{Command, Response};
use crate::compaction::{self, Backlog, CompactorConfig};
use crate::error::StoreError;
use crate::mvcc::Mvcc;
use crate::proposer::{Proposals, Proposer};
use crate::raft::log_store::LogStore;
use crate::raft::network::{Channels, Network, PeerActivity};
use crate::raft::state_machine::{Shared, StateMachine};
use crate::raft::{Member, Raft, cluster_id, member_id};
use crate::read_index::Rounds;
use crate::reconfig::{self, Voter};

/// How a member starts, in etcd's terms.
#[derive(Debug, Clone)]
pub struct MemberConfig {
    pub name: String,
    pub data_dir: PathBuf,
    pub advertise_client_urls: Vec<String>,
    pub initial_advertise_peer_urls: Vec<String>,
    /// (name, peer URL) of every initial member, this one included.
    pub initial_cluster: Vec<(String, String)>,
    pub initial_cluster_state_new: bool,
    pub initial_cluster_token: String,
    pub heartbeat_interval: Duration,
    pub election_timeout: Duration,
    /// Applied entries between snapshots.
    pub snapshot_count: u64,
    /// Log entries kept behind a snapshot for slow followers; one further behind gets the
    /// snapshot instead.
    pub snapshot_catchup_entries: u64,
    pub max_request_bytes: usize,
    pub max_txn_ops: usize,
    pub quota_backend_bytes: u64,
    /// How long an Event object lives after its last write (under a lease).
    pub event_ttl: Duration,
    /// How compacted versions are deleted from the backend.
    pub compactor: CompactorConfig,
}

impl Default for MemberConfig {
    fn default() -> Self {
        MemberConfig {
            name: "default".into(),
            data_dir: PathBuf::from("default.skiff"),
            advertise_client_urls: vec!["http://127.0.0.1:2379".into()],
            initial_advertise_peer_urls: vec!["http://127.0.0.1:2380".into()],
            initial_cluster: vec![("default".into(), "http://127.0.0.1:2380".into())],
            initial_cluster_state_new: true,
            initial_cluster_token: "skiff-cluster".into(),
            heartbeat_interval: Duration::from_millis(100),
            election_timeout: Duration::from_millis(1000),
            snapshot_count: 100_000,
            snapshot_catchup_entries: 5_000,
            max_request_bytes: 1536 * 1024,
            max_txn_ops: 128,
            quota_backend_bytes: 2 << 30,
            event_ttl: Duration::from_secs(3600),
            compactor: CompactorConfig::default(),
        }
    }
}

/// A request a follower hands to the leader over the peer `Forward` call.
#[derive(Debug, Serialize, Deserialize)]
pub enum Forwarded {
    Write(Command),
    ReadIndex,
    KeepAlive(i64),
    TimeToLive(i64),
    AddMember {
        peer_urls: Vec<String>,
        learner: bool,
    },
    RemoveMember(u64),
    PromoteMember(u64),
    /// etcd's MemberUpdate: new peer URLs for a member.
    UpdatePeerUrls(u64, Vec<String>),
    /// A member records its own name and client URLs.
    Introduce {
        id: u64,
        name: String,
        client_urls: Vec<String>,
    },
}

#[derive(Debug, Serialize, Deserialize)]
pub enum ForwardedReply {
    Write(Response),
    ReadIndex(u64),
    /// Remaining TTL in seconds (0 or less: the lease is gone).
    Ttl {
        remaining: i64,
        granted: i64,
    },
    Member(u64),
    Done,
}

/// A member of the cluster as the Cluster API lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    pub id: u64,
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
    pub is_learner: bool,
}

/// Lease deadlines, kept by the leader only. They are not replicated: a new leader gives every
/// lease a full TTL from the moment it takes over (as etcd does), so a leader change can only
/// lengthen a lease, never cut one short.
#[derive(Debug, Default)]
struct Lessor {
    deadlines: HashMap<i64, Instant>,
    /// The term whose leadership set these deadlines. A member that loses and wins again
    /// between two ticks must not carry the old term's deadlines over.
    term: Option<u64>,
}

pub struct StoreMember {
    pub id: u64,
    pub cluster_id: u64,
    pub config: MemberConfig,
    pub raft: Raft,
    pub shared: Arc<Shared>,
    channels: Channels,
    lessor: Mutex<Lessor>,
    /// Group commit of transactions while this member leads.
    proposer: Proposer,
    /// Shared ReadIndex rounds of this member's linearizable reads (forwarded to the leader
    /// when it is not the leader).
    read_rounds: Arc<Rounds>,
    /// Shared leadership confirmations while this member leads: ReadIndex requests from every
    /// member, and lease keep-alives.
    leader_rounds: Arc<Rounds>,
    /// When each peer last answered this member's Raft messages (while it leads).
    activity: PeerActivity,
    /// The compaction backlog, also held by the keyspace (for `/metrics` and `/health`
    /// without the keyspace lock).
    backlog: Arc<Backlog>,
    /// Stops the member's background tasks, tracked by `tasks`.
    cancel: CancellationToken,
    tasks: TaskTracker,
}

impl std::fmt::Debug for StoreMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreMember")
            .field("id", &format_args!("{:x}", self.id))
            .field("cluster_id", &format_args!("{:x}", self.cluster_id))
            .field("name", &self.config.name)
            .finish_non_exhaustive()
    }
}

/// How long a request waits for a leader before failing with "no leader".
const LEADER_WAIT: Duration = Duration::from_secs(5);

/// How long a proposal may take to commit and apply before the client is told it timed out.
const PROPOSAL_TIMEOUT: Duration = Duration::from_secs(7);

const META_CLUSTER_ID: &[u8] = b"cluster_id";

impl StoreMember {
    /// Opens the data directory and starts Raft. A new member of a new cluster bootstraps the
    /// initial membership; a restarted member resumes from its log and snapshot.
    pub async fn start(config: MemberConfig) -> anyhow::Result<Arc<StoreMember>> {
        std::fs::create_dir_all(&config.data_dir)?;
        let db = backend::open(&config.data_dir.join("db"))?;
        let token = config.initial_cluster_token.clone();
        let id = member_id(&config.initial_advertise_peer_urls, &token);
        let channels = Channels::default();
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
                db.put_cf(meta, META_CLUSTER_ID, backend::encode(&cid))?;
                cid
            }
        };
        let mvcc = Mvcc::open(db.clone()).map_err(anyhow::Error::new)?;
        let backlog = mvcc.backlog().clone();
        let shared = Shared::new(mvcc);
        shared.spawn_watch_catch_up();
        let proposals = Proposals::new(id);
        let sm = StateMachine::open(
            shared.clone(),
            proposals.clone(),
            &config.data_dir.join("snap"),
        )?;
        let log = LogStore::new(db.clone(), proposals.clone());
        let hb = config.heartbeat_interval.as_millis() as u64;
        let el = config.election_timeout.as_millis() as u64;
        let raft_config = Config {
            cluster_name: token.clone(),
            heartbeat_interval: hb,
            // openraft's follower campaigns after leader lease + a random timeout in
            // [min, max) without hearing from a leader, and the lease is `max` (during it,
            // followers also refuse to vote for anyone else). With min = E/3 and max = 2E/3
            // that is [E, 4E/3) for `--election-timeout E`, inside etcd's [E, 2E). With
            // min = E and max = 1.5E, a leader's death cost 2.5–3 s of writes at E = 1 s.
            election_timeout_min: el / 3,
            election_timeout_max: el * 2 / 3,
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
                channels: channels.clone(),
                activity: activity.clone(),
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
        let proposer = Proposer::start(raft.clone(), proposals, PROPOSAL_TIMEOUT);
        let cancel = CancellationToken::new();
        let tasks = TaskTracker::new();
        compaction::spawn(
            shared.clone(),
            backlog.clone(),
            config.compactor,
            cancel.clone(),
            &tasks,
        );
        let member = Arc::new(StoreMember {
            id,
            cluster_id: cluster,
            config,
            raft,
            shared,
            channels,
            lessor: Mutex::new(Lessor::default()),
            proposer,
            read_rounds: Rounds::new(),
            leader_rounds: Rounds::new(),
            activity,
            backlog,
            cancel,
            tasks,
        });
        member.clone().spawn_background();
        Ok(member)
    }

    fn spawn_background(self: Arc<Self>) {
        let me = Arc::downgrade(&self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                let Some(member) = me.upgrade() else { return };
                member.lease_tick().await;
                member.client_urls_tick().await;
                member.quota_tick().await;
            }
        });
    }

    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
        self.cancel.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// The compaction backlog: versions left to delete, how long the last one took, and
    /// whether deleting them is failing.
    pub fn compaction_backlog(&self) -> &Backlog {
        &self.backlog
    }

    // ---- status ----

    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().state == ServerState::Leader
    }

    pub fn leader(&self) -> Option<u64> {
        self.raft.metrics().borrow().current_leader
    }

    pub fn term(&self) -> u64 {
        self.raft.metrics().borrow().current_term
    }

    pub fn raft_index(&self) -> u64 {
        self.raft
            .metrics()
            .borrow()
            .last_log_index
            .unwrap_or_default()
    }

    pub fn applied_index(&self) -> u64 {
        self.raft
            .metrics()
            .borrow()
            .last_applied
            .map_or(0, |l| l.index)
    }

    pub fn members(&self) -> Vec<MemberInfo> {
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership().clone();
        let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
        membership
            .nodes()
            .map(|(id, m)| MemberInfo {
                id: *id,
                name: m.name.clone(),
                peer_urls: m.peer_urls.clone(),
                client_urls: m.client_urls.clone(),
                is_learner: !voters.contains(id),
            })
            .collect()
    }

    fn leader_member(&self) -> Option<(u64, Member)> {
        let metrics = self.raft.metrics().borrow().clone();
        let leader = metrics.current_leader?;
        let node = metrics
            .membership_config
            .membership()
            .get_node(&leader)?
            .clone();
        Some((leader, node))
    }

    // ---- forwarding ----

    /// Runs `req` on the leader: here if this member leads, else over the peer `Forward` call.
    /// Waits up to [`LEADER_WAIT`] for a leader to be known.
    pub async fn on_leader(self: &Arc<Self>, req: Forwarded) -> Result<ForwardedReply, StoreError> {
        let deadline = Instant::now() + LEADER_WAIT;
        loop {
            if self.is_leader() {
                match self.local(&req).await {
                    Err(StoreError::NoLeader) if Instant::now() < deadline => {}
                    other => return other,
                }
            } else if let Some((leader, node)) = self.leader_member()
                && leader != self.id
            {
                match self.forward(&node, &req).await {
                    Err(StoreError::NoLeader) if Instant::now() < deadline => {}
                    other => return other,
                }
            }
            if Instant::now() >= deadline {
                return Err(StoreError::NoLeader);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn forward(
        &self,
        leader: &Member,
        req: &Forwarded,
    ) -> Result<ForwardedReply, StoreError> {
        let url = leader.peer_urls.first().ok_or(StoreError::NoLeader)?;
        let mut client = self
            .channels
            .peer_client(url)
            .map_err(|_| StoreError::NoLeader)?;
        let mut request = tonic::Request::new(RaftMessage {
            payload: backend::encode(req),
        });
        request.set_timeout(Duration::from_secs(10));
        match client.forward(request).await {
            Ok(reply) => {
                backend::decode::<Result<ForwardedReply, StoreError>>(&reply.into_inner().payload)
                    .map_err(StoreError::internal)?
            }
            // Only a request that provably never left is safe to send again (to whichever
            // member leads next): a write that reached the leader may have been committed,
            // and proposing it twice would apply it twice.
            Err(s) if s.code() == tonic::Code::Unavailable && never_sent(&s) => {
                Err(StoreError::NoLeader)
            }
            Err(s)
                if s.code() == tonic::Code::Unavailable
                    || s.code() == tonic::Code::DeadlineExceeded =>
            {
                Err(StoreError::Timeout)
            }
            Err(s) => Err(StoreError::Internal(s.message().to_string())),
        }
    }

    /// Serves a forwarded request on this member, which should be the leader; if it is not
    /// (any more), the caller gets NoLeader and retries against the new one.
    pub async fn local(self: &Arc<Self>, req: &Forwarded) -> Result<ForwardedReply, StoreError> {
        match req {
            Forwarded::Write(cmd) => self
                .write_local(cmd.clone())
                .await
                .map(ForwardedReply::Write),
            Forwarded::ReadIndex => self
                .leader_read_index()
                .await
                .map(ForwardedReply::ReadIndex),
            Forwarded::KeepAlive(id) => self.keep_alive_local(*id).await,
            Forwarded::TimeToLive(id) => self.ttl_local(*id).await,
            Forwarded::AddMember { peer_urls, learner } => {
                self.add_member_local(peer_urls.clone(), *learner).await
            }
            Forwarded::RemoveMember(id) => self.remove_member_local(*id).await,
            Forwarded::PromoteMember(id) => self.promote_member_local(*id).await,
            Forwarded::UpdatePeerUrls(id, peer_urls) => {
                self.update_peer_urls_local(*id, peer_urls).await
            }
            Forwarded::Introduce {
                id,
                name,
                client_urls,
            } => {
                self.update_member_local(*id, |m| {
                    m.name.clone_from(name);
                    m.client_urls.clone_from(client_urls);
                })
                .await
            }
        }
    }

    async fn write_local(&self, cmd: Command) -> Result<Response, StoreError> {
        if !self.is_leader() {
            return Err(StoreError::NoLeader);
        }
        match cmd {
            // Transactions are group-committed; the rest (leases, compaction, alarms) are rare
            // and go alone.
            Command::Txn(t) => self.proposer.propose(t).await,
            other => self.proposer.propose_alone(other).await,
        }
    }

    // ---- the API services' entry points ----

    /// Proposes a command through the log and returns what applying it produced.
    pub async fn propose(self: &Arc<Self>, cmd: Command) -> Result<Response, StoreError> {
        match self.on_leader(Forwarded::Write(cmd)).await? {
            ForwardedReply::Write(r) => Ok(r),
            _ => Err(StoreError::internal("unexpected forward reply")),
        }
    }

    /// Waits until this member has applied everything committed before the call (ReadIndex):
    /// a read served afterwards is linearizable.
    /// Concurrent callers share rounds (see [`crate::read_index`]).
    pub async fn linearizable_barrier(self: &Arc<Self>) -> Result<(), StoreError> {
        let member = self.clone();
        let index = self
            .read_rounds
            .join(move || {
                let member = member.clone();
                async move {
                    match member.on_leader(Forwarded::ReadIndex).await? {
                        ForwardedReply::ReadIndex(i) => Ok(i),
                        _ => Err(StoreError::internal("unexpected forward reply")),
                    }
                }
            })
            .await?;
        self.applied_at_least(index, "linearizable read").await
    }

    /// Waits until this member has applied `index`.
    async fn applied_at_least(&self, index: u64, why: &str) -> Result<(), StoreError> {
        if self.applied_index() >= index {
            return Ok(());
        }
        self.raft
            .wait(Some(LEADER_WAIT))
            .applied_index_at_least(Some(index), why)
            .await
            .map(|_| ())
            .map_err(|_| StoreError::Timeout)
    }

    /// On the leader: its commit index, after a heartbeat round in which a quorum
    /// acknowledged its term (openraft's ReadIndex), in a round shared with every request
    /// that arrived before it began.
    async fn leader_read_index(&self) -> Result<u64, StoreError> {
        if !self.is_leader() {
            return Err(StoreError::NoLeader);
        }
        let raft = self.raft.clone();
        self.leader_rounds
            .join(move || {
                let raft = raft.clone();
                async move {
                    match tokio::time::timeout(PROPOSAL_TIMEOUT, raft.get_read_log_id()).await {
                        Ok(Ok((read, _))) => Ok(read.map_or(0, |l| l.index)),
                        Ok(Err(RaftError::APIError(_))) => Err(StoreError::NoLeader),
                        Ok(Err(RaftError::Fatal(_))) => Err(StoreError::Stopped),
                        Err(_) => Err(StoreError::Timeout),
                    }
                }
            })
            .await
    }

    // ---- leases ----

    /// A lease id for a grant that did not name one: time-based, unique in practice, positive.
    pub fn new_lease_id(&self) -> i64 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        ((nanos ^ self.id.rotate_left(17)) >> 1) as i64 | 1
    }

    fn lessor(&self) -> std::sync::MutexGuard<'_, Lessor> {
        self.lessor.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Confirms that this member still leads (a heartbeat round to a quorum) and has applied
    /// everything committed before: a deposed leader must not renew leases, and a new one must
    /// not answer from before the grants it has not applied yet.
    async fn confirm_leadership(&self) -> Result<(), StoreError> {
        let index = self.leader_read_index().await?;
        self.applied_at_least(index, "leadership confirmation")
            .await
    }

    async fn keep_alive_local(&self, id: i64) -> Result<ForwardedReply, StoreError> {
        if !self.is_leader() {
            return Err(StoreError::NoLeader);
        }
        self.confirm_leadership().await?;
        let ttl = self
            .shared
            .read()
            .leases()
            .get(&id)
            .map(|l| l.ttl)
            .ok_or(StoreError::LeaseNotFound)?;
        let now = Instant::now();
        let mut lessor = self.lessor();
        // A lease whose deadline has passed is being revoked (or about to be): renewing it now
        // would tell the client it lives while the revocation is already on its way. etcd
        // answers such a keep-alive as if the lease were gone, and so does Skiff.
        if lessor.deadlines.get(&id).is_some_and(|d| *d <= now) {
            return Err(StoreError::LeaseNotFound);
        }
        lessor
            .deadlines
            .insert(id, now + Duration::from_secs(ttl.max(0) as u64));
        Ok(ForwardedReply::Ttl {
            remaining: ttl,
            granted: ttl,
        })
    }

    async fn ttl_local(&self, id: i64) -> Result<ForwardedReply, StoreError> {
        if !self.is_leader() {
            return Err(StoreError::NoLeader);
        }
        self.confirm_leadership().await?;
        let granted = self
            .shared
            .read()
            .leases()
            .get(&id)
            .map(|l| l.ttl)
            .ok_or(StoreError::LeaseNotFound)?;
        let remaining = self.lessor().deadlines.get(&id).map_or(granted, |d| {
            d.saturating_duration_since(Instant::now())
                .as_secs_f64()
                .ceil() as i64
        });
        Ok(ForwardedReply::Ttl { remaining, granted })
    }

    pub async fn keep_alive(self: &Arc<Self>, id: i64) -> Result<i64, StoreError> {
        match self.on_leader(Forwarded::KeepAlive(id)).await? {
            ForwardedReply::Ttl { remaining, .. } => Ok(remaining),
            _ => Err(StoreError::internal("unexpected forward reply")),
        }
    }

    pub async fn time_to_live(self: &Arc<Self>, id: i64) -> Result<(i64, i64), StoreError> {
        match self.on_leader(Forwarded::TimeToLive(id)).await? {
            ForwardedReply::Ttl { remaining, granted } => Ok((remaining, granted)),
            _ => Err(StoreError::internal("unexpected forward reply")),
        }
    }

    /// The leader's lease clock: starts a full TTL for leases it has not seen yet (new grants,
    /// or every lease right after it became leader) and revokes expired ones through the log.
    async fn lease_tick(self: &Arc<Self>) {
        if !self.is_leader() {
            let mut lessor = self.lessor();
            lessor.deadlines.clear();
            lessor.term = None;
            return;
        }
        let term = self.term();
        let leases: Vec<(i64, i64)> = self
            .shared
            .read()
            .leases()
            .iter()
            .map(|(id, l)| (*id, l.ttl))
            .collect();
        let now = Instant::now();
        let expired: Vec<i64> = {
            let mut lessor = self.lessor();
            if lessor.term != Some(term) {
                // Logged so that a lease outliving its TTL can be matched to the takeovers
                // that restarted it (each one gives every lease a full TTL).
                tracing::info!(
                    term,
                    leases = leases.len(),
                    "leading: every lease gets a full TTL"
                );
                lessor.deadlines.clear();
                lessor.term = Some(term);
            }
            lessor
                .deadlines
                .retain(|id, _| leases.binary_search_by_key(id, |(i, _)| *i).is_ok());
            for (id, ttl) in &leases {
                lessor
                    .deadlines
                    .entry(*id)
                    .or_insert_with(|| now + Duration::from_secs((*ttl).max(1) as u64));
            }
            lessor
                .deadlines
                .iter()
                .filter(|(_, d)| **d <= now)
                .map(|(id, _)| *id)
                .collect()
        };
        if expired.is_empty() {
            return;
        }
        match self
            .write_local(Command::LeaseExpire {
                ids: expired.clone(),
            })
            .await
        {
            Ok(_) => {
                let mut lessor = self.lessor();
                for id in expired {
                    lessor.deadlines.remove(&id);
                }
            }
            Err(e) => tracing::warn!(error = %e, "lease expiry proposal failed"),
        }
    }

    /// Records this member's name and client URLs in the membership: members are bootstrapped
    /// (or added) knowing only peer URLs, and clients discover endpoints from MemberList.
    async fn client_urls_tick(self: &Arc<Self>) {
        let membership = self
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .clone();
        let Some(me) = membership.get_node(&self.id) else {
            return;
        };
        if me.client_urls == self.config.advertise_client_urls && me.name == self.config.name {
            return;
        }
        let introduce = Forwarded::Introduce {
            id: self.id,
            name: self.config.name.clone(),
            client_urls: self.config.advertise_client_urls.clone(),
        };
        if let Err(e) = self.on_leader(introduce).await {
            tracing::debug!(error = %e, "recording client URLs");
        }
    }

    /// Raises the NOSPACE alarm when the backend outgrows its quota (leader only; the alarm is
    /// replicated, so every member then refuses puts).
    async fn quota_tick(self: &Arc<Self>) {
        if !self.is_leader() {
            return;
        }
        let (size, raised) = {
            let mvcc = self.shared.read();
            let raised = mvcc
                .alarms()
                .iter()
                .any(|(_, a)| *a == crate::command::Alarm::NoSpace);
            (backend::size(mvcc.db()), raised)
        };
        if size > self.config.quota_backend_bytes && !raised {
            tracing::warn!(
                size,
                quota = self.config.quota_backend_bytes,
                "backend quota exceeded: raising NOSPACE"
            );
            let cmd = Command::AlarmActivate {
                member: self.id,
                alarm: crate::command::Alarm::NoSpace,
            };
            if let Err(e) = self.write_local(cmd).await {
                tracing::warn!(error = %e, "raising NOSPACE");
            }
        }
    }

    /// The backend size the quota is checked against.
    pub fn db_size(&self) -> u64 {
        backend::size(self.shared.read().db())
    }

    // ---- membership ----

    pub async fn add_member(
        self: &Arc<Self>,
        peer_urls: Vec<String>,
        learner: bool,
    ) -> Result<u64, StoreError> {
        match self
            .on_leader(Forwarded::AddMember { peer_urls, learner })
            .await?
        {
            ForwardedReply::Member(id) => Ok(id),
            _ => Err(StoreError::internal("unexpected forward reply")),
        }
    }

    pub async fn remove_member(self: &Arc<Self>, id: u64) -> Result<(), StoreError> {
        self.on_leader(Forwarded::RemoveMember(id))
            .await
            .map(|_| ())
    }

    pub async fn promote_member(self: &Arc<Self>, id: u64) -> Result<(), StoreError> {
        self.on_leader(Forwarded::PromoteMember(id))
            .await
            .map(|_| ())
    }

    /// etcd's MemberUpdate: replaces a member's peer URLs.
    pub async fn update_member(
        self: &Arc<Self>,
        id: u64,
        peer_urls: Vec<String>,
    ) -> Result<(), StoreError> {
        self.on_leader(Forwarded::UpdatePeerUrls(id, peer_urls))
            .await
            .map(|_| ())
    }

    /// What the leader knows of each voter for the strict reconfiguration check (see
    /// [`reconfig`]): started (it recorded its client URLs) and active (it answered within an
    /// election timeout). The leader counts itself as both: it is running, even if its own
    /// record is not committed yet.
    fn voters(&self) -> Vec<Voter> {
        let window = self.config.election_timeout;
        self.members()
            .into_iter()
            .filter(|m| !m.is_learner)
            .map(|m| {
                let me = m.id == self.id;
                Voter {
                    id: m.id,
                    started: me || !m.client_urls.is_empty(),
                    active: me || self.activity.answered_within(m.id, window),
                }
            })
            .collect()
    }

    /// Voters the strict reconfiguration check counts as active, on the leader (0 elsewhere:
    /// only the leader hears from every member).
    pub fn active_voters(&self) -> usize {
        if !self.is_leader() {
            return 0;
        }
        self.voters().iter().filter(|v| v.active).count()
    }

    /// etcd refuses peer URLs another member already has (the member's own are fine).
    fn check_peer_urls_free(
        members: &[MemberInfo],
        except: Option<u64>,
        peer_urls: &[String],
    ) -> Result<(), StoreError> {
        if members
            .iter()
            .filter(|m| Some(m.id) != except)
            .any(|m| m.peer_urls.iter().any(|u| peer_urls.contains(u)))
        {
            return Err(StoreError::PeerUrlExists);
        }
        Ok(())
    }

    async fn add_member_local(
        &self,
        peer_urls: Vec<String>,
        learner: bool,
    ) -> Result<ForwardedReply, StoreError> {
        if !self.is_leader() {
            return Err(StoreError::NoLeader);
        }
        // Checked here, where every MemberAdd arrives (from this member or forwarded), so that
        // no face can skip it.
        reconfig::check_peer_urls(&peer_urls)?;
        let id = member_id(&peer_urls, &self.config.initial_cluster_token);
        let members = self.members();
        if members.iter().any(|m| m.id == id) {
            return Err(StoreError::MemberExists);
        }
        Self::check_peer_urls_free(&members, None, &peer_urls)?;
        if !learner {
            reconfig::may_add_voter(&self.voters())?;
        }
        let node = Member {
            name: String::new(),
            peer_urls,
            client_urls: Vec::new(),
        };
        // The new member is not running yet: do not wait for it to catch up.
        let deadline = Instant::now() + LEADER_WAIT;
        loop {
            match self.raft.add_learner(id, node.clone(), false).await {
                Ok(_) => break,
                Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(
                    openraft::error::ChangeMembershipError::InProgress(_),
                ))) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(membership_err(e)),
            }
        }
        if !learner {
            self.change_membership(ChangeMembers::AddVoterIds([id].into()))
                .await?;
        }
        Ok(ForwardedReply::Member(id))
    }

    async fn remove_member_local(&self, id: u64) -> Result<ForwardedReply, StoreError> {
        if !self.is_leader() {
            return Err(StoreError::NoLeader);
        }
        let members = self.members();
        let Some(m) = members.iter().find(|m| m.id == id) else {
            return Err(StoreError::MemberNotFound);
        };
        let change = if m.is_learner {
            ChangeMembers::RemoveNodes([id].into())
        } else {
            reconfig::may_remove_voter(&self.voters(), id, self.id)?;
            ChangeMembers::RemoveVoters([id].into())
        };
        self.change_membership(change).await?;
        Ok(ForwardedReply::Done)
    }

    async fn promote_member_local(&self, id: u64) -> Result<ForwardedReply, StoreError> {
        if !self.is_leader() {
            return Err(StoreError::NoLeader);
        }
        let members = self.members();
        let Some(m) = members.iter().find(|m| m.id == id) else {
            return Err(StoreError::MemberNotFound);
        };
        if !m.is_learner {
            return Err(StoreError::MemberNotLearner);
        }
        reconfig::may_promote(&self.voters())?;
        self.change_membership(ChangeMembers::AddVoterIds([id].into()))
            .await?;
        Ok(ForwardedReply::Done)
    }

    /// MemberUpdate on the leader: the new peer URLs must parse and belong to no other member.
    async fn update_peer_urls_local(
        &self,
        id: u64,
        peer_urls: &[String],
    ) -> Result<ForwardedReply, StoreError> {
        // etcd answers an unknown member before it looks at the URLs.
        let members = self.members();
        if !members.iter().any(|m| m.id == id) {
            return Err(StoreError::MemberNotFound);
        }
        reconfig::check_peer_urls(peer_urls)?;
        Self::check_peer_urls_free(&members, Some(id), peer_urls)?;
        self.update_member_local(id, |m| m.peer_urls = peer_urls.to_vec())
            .await
    }

    /// Changes one member's record as the leader has it now (so that updates decided on
    /// different views do not undo each other).
    async fn update_member_local(
        &self,
        id: u64,
        change: impl FnOnce(&mut Member),
    ) -> Result<ForwardedReply, StoreError> {
        if !self.is_leader() {
            return Err(StoreError::NoLeader);
        }
        let metrics = self.raft.metrics().borrow().clone();
        // Only a current member is updated: an update decided on a stale view must not bring
        // back a member that was removed meanwhile.
        let Some(current) = metrics.membership_config.membership().get_node(&id) else {
            return Err(StoreError::MemberNotFound);
        };
        let mut updated = current.clone();
        change(&mut updated);
        // What is already recorded is not proposed again. A member that lags behind its own
        // update keeps asking for it (see `client_urls_tick`), and every membership change
        // restarts replication, including the snapshot that would let the member catch up:
        // a Jepsen run saw a re-added member that never did.
        if updated == *current {
            return Ok(ForwardedReply::Done);
        }
        self.change_membership(ChangeMembers::SetNodes(BTreeMap::from([(id, updated)])))
            .await?;
        Ok(ForwardedReply::Done)
    }

    /// A membership change, retried for a while when another one (such as a member recording
    /// its client URLs) is still in progress: openraft runs one change at a time.
    async fn change_membership(
        &self,
        change: ChangeMembers<u64, Member>,
    ) -> Result<(), StoreError> {
        let deadline = Instant::now() + LEADER_WAIT;
        loop {
            match self.raft.change_membership(change.clone(), false).await {
                Ok(_) => return Ok(()),
                Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e)))
                    if matches!(e, openraft::error::ChangeMembershipError::InProgress(_))
                        && Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(membership_err(e)),
            }
        }
    }
}

/// Whether a failed peer call failed before its request was sent (no connection could be made).
fn never_sent(s: &tonic::Status) -> bool {
    use std::error::Error as _;
    let mut text = s.message().to_ascii_lowercase();
    let mut source = s.source();
    while let Some(e) = source {
        text.push(' ');
        text.push_str(&e.to_string().to_ascii_lowercase());
        source = e.source();
    }
    text.contains("connect") || text.contains("dns error")
}

fn membership_err(e: RaftError<u64, ClientWriteError<u64, Member>>) -> StoreError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => StoreError::NoLeader,
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            StoreError::Invalid(e.to_string())
        }
        RaftError::Fatal(_) => StoreError::Stopped,
    }
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
        last_err
            .map(|e| e.message().to_string())
            .unwrap_or_default()
    )
}
