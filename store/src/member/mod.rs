//! A running store member: the Raft node, the keyspace it applies to, and the operations the
//! API services need — proposals, linearizable reads, lease keep-alive and membership changes —
//! each of which a follower forwards to the leader, so any member can be used as an endpoint.
//!
//! | module           | what it holds                                                        |
//! |------------------|----------------------------------------------------------------------|
//! | this one         | the member, its status, linearizable reads                           |
//! | [`startup`]      | opening the data directory, bootstrapping or joining, starting Raft   |
//! | [`forward`]      | requests only the leader serves, each typed with its reply           |
//! | [`lessor`]       | lease deadlines, the lease clock, keep-alives                        |
//! | [`membership`]   | MemberAdd, MemberRemove, MemberPromote, MemberUpdate                 |
//! | [`housekeeping`] | the member's timers: lease clock, client URLs, backend quota          |
//! | [`transfer`]     | leadership transfer: MoveLeader, and handing over before stopping    |
//! | [`corruption`]   | the leader's corruption check: members' hashes at one revision       |
//! | [`election`]     | when a member campaigns: PreVote, CheckQuorum, its leader's death     |

mod auth;
mod auto_compaction;
pub(crate) mod compactor;
mod corruption;
mod election;
mod forward;
mod housekeeping;
mod lessor;
mod membership;
pub mod peer;
mod startup;
mod transfer;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::ServerState;
use openraft::error::RaftError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub(crate) use self::forward::Forwarded;
use self::forward::ReadIndex;
use self::lessor::Lessor;
use crate::backend;
use crate::compaction::{Backlog, CompactorConfig};
use crate::error::StoreError;
use crate::proposer::Proposer;
use crate::raft::network::{Channels, PeerActivity};
use crate::raft::state_machine::Shared;
use crate::raft::{Member, Raft, RaftGate};
use crate::read_index::Rounds;
pub use auto_compaction::AutoCompaction;
pub(crate) use election::PreVote;
pub(crate) use startup::write_cluster_id;
pub use transfer::LeaderHistory;
pub(crate) use transfer::TimeoutNow;

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
    /// How often the leader checkpoints the leases past half their TTL
    /// (`--lease-checkpoint-interval`; see `lessor`).
    pub lease_checkpoint_interval: Duration,
    /// How compacted versions are deleted from the backend.
    pub compactor: CompactorConfig,
    /// Compaction on a timer (`--auto-compaction-mode/-retention`); none when `None`.
    pub auto_compaction: Option<AutoCompaction>,
    /// Certificates for `https://` client and peer URLs.
    pub tls: crate::tls::TlsSettings,
    /// How often the leader compares every member's keyspace hash with its own
    /// (`--experimental-corrupt-check-time`); never when `None`.
    pub corrupt_check: Option<Duration>,
    /// How long an auth token may go unused before it expires (`--auth-token-ttl`).
    pub auth_token_ttl: Duration,
    /// bcrypt's cost for new passwords (`--bcrypt-cost`).
    pub bcrypt_cost: u32,
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
            lease_checkpoint_interval: lessor::CHECKPOINT_INTERVAL,
            compactor: CompactorConfig::default(),
            auto_compaction: None,
            tls: crate::tls::TlsSettings::default(),
            corrupt_check: None,
            auth_token_ttl: crate::mvcc::DEFAULT_TOKEN_TTL,
            bcrypt_cost: crate::auth::DEFAULT_BCRYPT_COST,
        }
    }
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

pub struct StoreMember {
    pub id: u64,
    pub cluster_id: u64,
    pub config: MemberConfig,
    pub raft: Raft,
    pub shared: Arc<Shared>,
    channels: Channels,
    lessor: Mutex<Lessor>,
    /// Held across each lease checkpoint this member proposes as leader, and by a keep-alive
    /// that clears one: a clear is never overtaken in the log by the checkpoint it clears.
    lease_checkpoints: tokio::sync::Mutex<()>,
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
    /// Who led and since when, as this member saw it.
    leader_history: LeaderHistory,
    /// When this member campaigns, and whether it still has a quorum while it leads.
    elections: Arc<election::Elections>,
    /// The compaction backlog, also held by the keyspace (for `/metrics` and `/health`
    /// without the keyspace lock).
    backlog: Arc<Backlog>,
    /// Held across each membership change this member makes as leader: openraft runs one
    /// at a time and refuses (logging an error) one that arrives during another.
    membership_changes: tokio::sync::Mutex<()>,
    /// Passed by every call into the Raft core from outside it; closed as the member begins
    /// to stop, before its Raft core stops.
    raft_gate: Arc<RaftGate>,
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

/// What [`StoreMember::backup`] yields.
#[derive(Debug)]
pub enum BackupPiece {
    /// The next bytes of the file.
    Bytes(Vec<u8>),
    /// The backup is complete.
    Done(crate::backup::Summary),
}

/// How long a request waits for a leader before failing with "no leader".
const LEADER_WAIT: Duration = Duration::from_secs(5);

/// How long a proposal may take to commit and apply before the client is told it timed out.
const PROPOSAL_TIMEOUT: Duration = Duration::from_secs(7);

impl StoreMember {
    pub async fn shutdown(&self) {
        self.raft_gate.close().await;
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

    /// The member's election state (the peer service records the leader's messages there).
    pub(crate) fn elections(&self) -> &election::Elections {
        &self.elections
    }

    /// Starts a Raft election at once (a won pre-vote, a leader handing over), unless the
    /// member is stopping.
    pub(crate) async fn elect(&self) -> Result<(), StoreError> {
        self.raft_call(self.raft.trigger().elect())
            .await?
            .map_err(|_| StoreError::Stopped)
    }

    /// Runs `call`, one call into the Raft core, through the member's [`RaftGate`].
    pub(crate) async fn raft_call<T>(
        &self,
        call: impl Future<Output = T>,
    ) -> Result<T, StoreError> {
        self.raft_gate.pass(call).await
    }

    /// Resolves when the member stops.
    pub(crate) fn stopped(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
        self.cancel.clone().cancelled_owned()
    }

    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().state == ServerState::Leader
    }

    /// The leader this member knows of: itself when it leads, else the one it has heard from
    /// since it started. (openraft names the leader of the vote it stored as soon as it starts,
    /// alive or not; `endpoint status`, the health check and the metrics would report a dead
    /// leader until the election that replaced it was heard of.)
    pub fn leader(&self) -> Option<u64> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        if m.state == ServerState::Leader || self.elections.heard_any() {
            m.current_leader
        } else {
            None
        }
    }

    /// Waits up to `bound` until this member leads or has heard from its leader since it
    /// started; whether it has. (openraft's own view can name a leader as soon as it starts:
    /// the one of the vote it stored, alive or not.)
    pub async fn wait_for_leader(&self, bound: Duration) -> bool {
        let deadline = Instant::now() + bound;
        loop {
            if self.is_leader() || self.elections.heard_any() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
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

    /// The last index purged from the log (behind a snapshot): a member that lags behind it
    /// catches up from a snapshot, not from entries.
    pub fn purged_index(&self) -> u64 {
        self.raft.metrics().borrow().purged.map_or(0, |l| l.index)
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

    /// Waits until this member has applied everything committed before the call (ReadIndex):
    /// a read served afterwards is linearizable.
    /// Concurrent callers share rounds (see [`crate::read_index`]).
    pub async fn linearizable_barrier(self: &Arc<Self>) -> Result<(), StoreError> {
        let member = self.clone();
        let index = self
            .read_rounds
            .join(move || {
                let member = member.clone();
                async move { member.on_leader(ReadIndex).await }
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
    pub(super) async fn leader_read_index(&self) -> Result<u64, StoreError> {
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

    /// Confirms that this member still leads (a heartbeat round to a quorum) and has applied
    /// everything committed before: a deposed leader must not renew leases, and a new one must
    /// not answer from before the grants it has not applied yet.
    async fn confirm_leadership(&self) -> Result<(), StoreError> {
        let index = self.leader_read_index().await?;
        self.applied_at_least(index, "leadership confirmation")
            .await
    }

    /// A backup of this member's keyspace as it is now (see [`crate::backup`]), in pieces of
    /// about [`crate::backup::FRAME_BYTES`] as it is read; the last item is the backup's
    /// summary, or the error that ended it. Read on a blocking task of the member's that ends
    /// when the receiver is dropped (the client went away) or the member stops; a slow
    /// reader holds a RocksDB snapshot open, and no lock.
    pub fn backup(&self) -> mpsc::Receiver<Result<BackupPiece, StoreError>> {
        let (tx, rx) = mpsc::channel(4);
        let db = self.shared.read().db().clone();
        let source = crate::backup::Source {
            cluster_id: self.cluster_id,
            member_id: self.id,
            member_name: self.config.name.clone(),
        };
        let cancel = self.cancel.clone();
        self.tasks.spawn_blocking(move || {
            let mut send = |bytes: Vec<u8>| {
                if cancel.is_cancelled() {
                    return Err(StoreError::Stopped);
                }
                tx.blocking_send(Ok(BackupPiece::Bytes(bytes)))
                    .map_err(|_| StoreError::Stopped)
            };
            let end = crate::backup::write(&db, source, &[], &mut send)
                .map(|(summary, _)| BackupPiece::Done(summary));
            let _ = tx.blocking_send(end);
        });
        rx
    }

    /// The hash of the keyspace at `revision` (0: the current one), read on a blocking task:
    /// the hash, the revision hashed and the compaction revision (see
    /// [`corruption`] for what is hashed).
    pub async fn hash_kv(self: &Arc<Self>, revision: i64) -> Result<(u32, i64, i64), StoreError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || corruption::hash_keyspace(&me, revision))
            .await
            .map_err(StoreError::internal)?
    }

    /// Proposals of this member waiting to be applied or dropped.
    pub fn pending_proposals(&self) -> usize {
        self.proposer.pending()
    }

    /// The backend size the quota is checked against.
    pub fn db_size(&self) -> u64 {
        backend::size(self.shared.read().db())
    }
}
