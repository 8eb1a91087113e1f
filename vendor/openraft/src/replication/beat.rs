//! Skiff patch: a replication stream's heartbeats, on a task of their own.
//!
//! openraft 0.9 sends a heartbeat (an AppendEntries without entries) on the stream itself,
//! and after every commit it sends one to tell the follower the new commit index. The stream
//! has one RPC in flight at a time, so the entries of the next write waited behind that
//! heartbeat's round trip: with one client, about a third of each write's latency. Here the
//! stream hands heartbeats to this task, which sends them over a network client of its own,
//! beside the stream's AppendEntries.
//!
//! A heartbeat that only carries a new commit index waits [`COMMIT_BEAT_DELAY`] first and is
//! dropped if an AppendEntries carrying that commit index (or a later one) went out meanwhile:
//! under a steady stream of writes the followers learn commits from the entries themselves,
//! as etcd's followers do, and only the last write of a burst costs a heartbeat.
//!
//! The follower treats these as it treats every heartbeat: it checks the leader's vote and
//! that `prev_log_id` (the leader's last known match on it) is in its log, and moves its
//! commit index forward, never back. Responses go to the core as the stream's heartbeat
//! responses did: the leader's clock (its lease), a higher vote, and a conflict (a follower
//! whose log went back) are reported; an RPC that fails is left to the stream, whose own
//! AppendEntries meet the same follower, and this task backs off as the stream would.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::core::notify::Notify;
use crate::network::Backoff;
use crate::network::RPCOption;
use crate::network::RaftNetwork;
use crate::network::RaftNetworkFactory;
use crate::raft::AppendEntriesRequest;
use crate::raft::AppendEntriesResponse;
use crate::replication::request_id::RequestId;
use crate::replication::response::ReplicationResult;
use crate::replication::ReplicationSessionId;
use crate::replication::Response;
use crate::type_config::alias::LogIdOf;
use crate::type_config::TypeConfigExt;
use crate::AsyncRuntime;
use crate::LogIdOptionExt;
use crate::RaftTypeConfig;

/// How long a heartbeat that only carries a commit index waits for an AppendEntries to carry
/// it instead. With one client on a 2-vCPU machine the next write's entries leave about
/// 0.3 ms after a commit, so under any steady load the wait ends in an AppendEntries; the cost
/// is that followers learn the last commit of a burst up to this much later (a follower's
/// linearizable read or watch right after it waits as long).
pub(crate) const COMMIT_BEAT_DELAY: Duration = Duration::from_millis(1);

/// A heartbeat the stream asks for.
pub(crate) struct Beat<C: RaftTypeConfig> {
    /// The commit index to tell the follower.
    pub(crate) committed: Option<LogIdOf<C>>,
    /// The stream's last known match on the follower: the heartbeat's `prev_log_id`.
    pub(crate) matching: Option<LogIdOf<C>>,
    /// A heartbeat the core asked for (its timer, or a new leader's first round), not only a
    /// new commit index: sent without the delay and whatever went out meanwhile.
    pub(crate) urgent: bool,
}

impl<C: RaftTypeConfig> Beat<C> {
    /// This beat, brought up to date by a later one.
    fn merge(self, later: Beat<C>) -> Beat<C> {
        Beat {
            committed: std::cmp::max(self.committed, later.committed),
            matching: std::cmp::max(self.matching, later.matching),
            urgent: self.urgent || later.urgent,
        }
    }
}

/// What a stream keeps of its heartbeat task.
pub(crate) struct Beats<C: RaftTypeConfig> {
    tx: mpsc::UnboundedSender<Beat<C>>,
    /// `next_index()` of the commit index the stream's last AppendEntries carried.
    sent_commit: Arc<AtomicU64>,
}

impl<C: RaftTypeConfig> Beats<C> {
    /// Starts the heartbeat task of a stream to `target`; it ends when the returned handle is
    /// dropped (with the stream) and the heartbeat in flight, if any, is answered.
    pub(crate) fn spawn<N>(
        target: C::NodeId,
        session_id: ReplicationSessionId<C::NodeId>,
        heartbeat_interval: Duration,
        network: N::Network,
        tx_raft_core: mpsc::UnboundedSender<Notify<C>>,
    ) -> Beats<C>
    where
        N: RaftNetworkFactory<C>,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let sent_commit = Arc::new(AtomicU64::new(0));
        let task = BeatTask::<C, N> {
            target,
            session_id,
            heartbeat_interval,
            network,
            tx_raft_core,
            rx,
            sent_commit: sent_commit.clone(),
            backoff: None,
        };
        let _ = C::AsyncRuntime::spawn(task.run());
        Beats { tx, sent_commit }
    }

    /// Asks for a heartbeat.
    pub(crate) fn beat(&self, beat: Beat<C>) {
        let _ = self.tx.send(beat);
    }

    /// Notes that an AppendEntries carrying `committed` is being sent.
    pub(crate) fn carried(&self, committed: &Option<LogIdOf<C>>) {
        self.sent_commit.fetch_max(committed.next_index(), Ordering::Relaxed);
    }
}

struct BeatTask<C: RaftTypeConfig, N: RaftNetworkFactory<C>> {
    target: C::NodeId,
    session_id: ReplicationSessionId<C::NodeId>,
    heartbeat_interval: Duration,
    network: N::Network,
    tx_raft_core: mpsc::UnboundedSender<Notify<C>>,
    rx: mpsc::UnboundedReceiver<Beat<C>>,
    sent_commit: Arc<AtomicU64>,
    /// Set while the follower does not answer.
    backoff: Option<Backoff>,
}

impl<C: RaftTypeConfig, N: RaftNetworkFactory<C>> BeatTask<C, N> {
    async fn run(mut self) {
        while let Some(mut beat) = self.rx.recv().await {
            beat = self.drain(beat);
            if !beat.urgent {
                C::sleep(COMMIT_BEAT_DELAY).await;
                beat = self.drain(beat);
                if !beat.urgent && self.sent_commit.load(Ordering::Relaxed) >= beat.committed.next_index() {
                    continue;
                }
            }
            if self.send(beat).await {
                self.backoff = None;
            } else {
                let backoff = self.backoff.get_or_insert_with(|| self.network.backoff());
                let pause = backoff.next().unwrap_or(Duration::from_millis(500));
                C::sleep(pause).await;
            }
        }
    }

    /// `beat` merged with every beat asked for since.
    fn drain(&mut self, mut beat: Beat<C>) -> Beat<C> {
        while let Ok(later) = self.rx.try_recv() {
            beat = beat.merge(later);
        }
        beat
    }

    /// Sends one heartbeat and reports its answer; false if the RPC failed.
    async fn send(&mut self, beat: Beat<C>) -> bool {
        let sending_time = C::now();
        let payload = AppendEntriesRequest {
            vote: self.session_id.vote_ref().clone(),
            prev_log_id: beat.matching.clone(),
            leader_commit: beat.committed,
            entries: vec![],
        };
        let option = RPCOption::new(self.heartbeat_interval);
        let res = C::timeout(self.heartbeat_interval, self.network.append_entries(payload, option)).await;
        let result = match res {
            Ok(Ok(AppendEntriesResponse::Success)) | Ok(Ok(AppendEntriesResponse::PartialSuccess(_))) => {
                Ok(beat.matching)
            }
            Ok(Ok(AppendEntriesResponse::Conflict)) => match beat.matching {
                Some(prev) => Err(prev),
                // Nothing precedes an empty log: no conflict to report.
                None => return true,
            },
            Ok(Ok(AppendEntriesResponse::HigherVote(higher))) => {
                let _ = self.tx_raft_core.send(Notify::Network {
                    response: Response::HigherVote {
                        target: self.target.clone(),
                        higher,
                        sender_vote: self.session_id.vote_ref().clone(),
                    },
                });
                return true;
            }
            Ok(Err(_)) | Err(_) => return false,
        };
        let _ = self.tx_raft_core.send(Notify::Network {
            response: Response::Progress {
                target: self.target.clone(),
                request_id: RequestId::new_heartbeat(),
                result: Ok(ReplicationResult::new(sending_time, result)),
                session_id: self.session_id.clone(),
            },
        });
        true
    }
}
