//! Leadership transfer: etcd's MoveLeader, and a leader that is stopped gracefully hands over
//! to a caught-up follower first, so a rolling restart costs no election timeout.
//!
//! openraft 0.9 has no transfer of its own; this one is built from what it has:
//!
//! 1. The leader holds new proposals back (they wait at the proposer, see
//!    [`crate::proposer::Proposer::hold`]), so its log stops growing. Proposals already on
//!    their way into Raft get there first: an entry appended after step 2 would give the
//!    leader a longer log than the transferee's, and it would refuse its vote.
//! 2. It waits until the transferee has every entry it has (replication metrics).
//! 3. It tells the transferee to campaign at once (`TimeoutNow` on the peer service). The
//!    transferee asks for votes in the next term with a log as long as the leader's.
//! 4. The old leader grants that vote: openraft counts a leader's own lease from when it was
//!    elected, so a leader of more than one maximum election timeout votes like anyone else,
//!    and on granting a higher term it steps down. With the transferee's own vote that is two:
//!    a majority of three. Other followers refuse while they still hear the old leader (their
//!    lease); in a cluster of five the transferee campaigns again when its election timer
//!    runs out (see [`super::election`]), with PreVote, and wins then.
//! 5. When the transferee leads, the held proposals are released; this member no longer leads,
//!    so Raft refuses them and they are forwarded to the new leader like any follower's.
//!
//! Nothing here weakens Raft's safety: the transferee wins an ordinary election, which it can
//! only win with a log at least as long as a majority's.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::ServerState;
use serde::{Deserialize, Serialize};
use skiff_proto::raft::v1::RaftMessage;

use super::StoreMember;
use super::forward::OnLeader;
use crate::backend;
use crate::error::StoreError;

/// etcd's MoveLeader: leadership to `0`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct MoveLeader(pub u64);

impl OnLeader for MoveLeader {
    type Reply = ();
    async fn serve(self, member: &Arc<StoreMember>) -> Result<(), StoreError> {
        member
            .transfer_leadership(self.0, member.transfer_deadline())
            .await
    }
}

/// What a leader sends the member it hands over to.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct TimeoutNow {
    /// The leader's term: a request from an older term is stale and ignored.
    pub term: u64,
    pub from: u64,
}

/// Leadership as this member has seen it: who led, since when this member leads, and how often
/// the leader changed (etcd's `leader_changes_seen_total`).
#[derive(Debug, Default)]
pub struct LeaderHistory {
    inner: Mutex<Seen>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    leader: Option<u64>,
    /// The term in which this member leads and when it began to, while it leads.
    leading_since: Option<(u64, Instant)>,
    changes: u64,
}

impl LeaderHistory {
    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records what the Raft metrics say now.
    fn observe(&self, leader: Option<u64>, leading_term: Option<u64>, now: Instant) {
        let mut seen = self.lock();
        if leader.is_some() && leader != seen.leader {
            seen.changes += 1;
            seen.leader = leader;
        }
        seen.leading_since = match (leading_term, seen.leading_since) {
            (Some(term), Some((t, since))) if t == term => Some((t, since)),
            (Some(term), _) => Some((term, now)),
            (None, _) => None,
        };
    }

    /// How many times a new leader was seen since this process started.
    pub fn changes(&self) -> u64 {
        self.lock().changes
    }

    /// How long this member has led, in its current term; `None` when it does not lead.
    pub fn leading_for(&self) -> Option<Duration> {
        self.lock().leading_since.map(|(_, since)| since.elapsed())
    }
}

impl StoreMember {
    /// Follows the Raft server metrics (vote, state, leader: they change with an election,
    /// not with every write) into [`LeaderHistory`] until the member stops.
    pub(super) fn spawn_leader_history(self: &Arc<Self>) {
        let mut metrics = self.raft.server_metrics();
        let me = Arc::downgrade(self);
        let cancel = self.cancel.clone();
        self.tasks.spawn(async move {
            loop {
                {
                    let Some(member) = me.upgrade() else { return };
                    let m = metrics.borrow_and_update();
                    let leading =
                        (m.state == ServerState::Leader).then_some(m.vote.leader_id().get_term());
                    member
                        .leader_history
                        .observe(m.current_leader, leading, Instant::now());
                }
                tokio::select! {
                    () = cancel.cancelled() => return,
                    changed = metrics.changed() => if changed.is_err() { return },
                }
            }
        });
    }

    pub fn leader_history(&self) -> &LeaderHistory {
        &self.leader_history
    }

    /// How long a transfer may take before it is abandoned: a few election timeouts.
    pub fn transfer_deadline(&self) -> Duration {
        self.config.election_timeout * 3
    }

    /// etcd's MoveLeader, from any member: the leader hands leadership to `target`.
    pub async fn move_leader(self: &Arc<Self>, target: u64) -> Result<(), StoreError> {
        self.on_leader(MoveLeader(target)).await
    }

    /// On the leader: hands leadership to `target`, a voter, within `deadline`. Proposals are
    /// held meanwhile. Answers once `target` leads; on a timeout this member may still lead or
    /// an election may be under way, as after any failed transfer.
    pub(crate) async fn transfer_leadership(
        self: &Arc<Self>,
        target: u64,
        deadline: Duration,
    ) -> Result<(), StoreError> {
        if !self.is_leader() {
            return Err(StoreError::NoLeader);
        }
        if target == self.id {
            return Ok(());
        }
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        if !membership.voter_ids().any(|id| id == target) {
            return Err(StoreError::BadLeaderTransferee);
        }
        let node = membership
            .get_node(&target)
            .cloned()
            .ok_or(StoreError::BadLeaderTransferee)?;
        let term = metrics.current_term;
        let started = Instant::now();
        let until = started + deadline;
        let _held = self.proposer.hold().await;
        tracing::info!(
            to = %format_args!("{target:x}"),
            term,
            "transferring leadership"
        );
        // The old leader grants the transferee's vote only once its own lease, counted from
        // its election, is over.
        let lease = super::election::vote_lease(self.config.heartbeat_interval);
        if let Some(led) = self.leader_history.leading_for()
            && led < lease
        {
            tokio::time::sleep(lease - led).await;
        }
        self.wait_caught_up(target, until).await?;
        let url = node
            .peer_urls
            .first()
            .ok_or(StoreError::BadLeaderTransferee)?;
        let mut client = self
            .channels
            .peer_client(url)
            .map_err(|_| StoreError::LeaderTransferTimeout)?;
        let mut request = tonic::Request::new(RaftMessage {
            payload: backend::encode(&TimeoutNow {
                term,
                from: self.id,
            }),
        });
        request.set_timeout(until.saturating_duration_since(Instant::now()));
        client
            .timeout_now(request)
            .await
            .map_err(|s| {
                tracing::info!(to = %format_args!("{target:x}"), error = %s.message(), "the transferee did not campaign");
                match s.code() {
                    tonic::Code::FailedPrecondition => StoreError::BadLeaderTransferee,
                    _ => StoreError::LeaderTransferTimeout,
                }
            })?;
        let led = self
            .raft
            .wait(Some(until.saturating_duration_since(Instant::now())))
            .metrics(
                |m| m.current_leader == Some(target) && m.current_term > term,
                "leadership transfer",
            )
            .await;
        match led {
            Ok(_) => {
                tracing::info!(
                    to = %format_args!("{target:x}"),
                    took_ms = started.elapsed().as_millis() as u64,
                    "leadership transferred"
                );
                Ok(())
            }
            Err(_) => Err(StoreError::LeaderTransferTimeout),
        }
    }

    /// Waits until `target`'s log matches this leader's last entry, after
    /// [`crate::proposer::Proposer::hold`]. One round trip through Raft's core first: it
    /// handles messages in order and gives each one's entries to the log store before the
    /// next, so entries handed to it just before are counted (its metrics may not show them
    /// yet), and with proposals held nothing follows them.
    async fn wait_caught_up(&self, target: u64, until: Instant) -> Result<(), StoreError> {
        self.raft
            .with_raft_state(|_| ())
            .await
            .map_err(|_| StoreError::Stopped)?;
        let last = Some(self.proposer.log_end());
        let left = until.saturating_duration_since(Instant::now());
        self.raft
            .wait(Some(left))
            .metrics(
                |m| {
                    m.state != ServerState::Leader
                        || m.replication
                            .as_ref()
                            .and_then(|r| r.get(&target))
                            .is_some_and(|matched| matched.map(|l| l.index) >= last)
                },
                "transferee caught up",
            )
            .await
            .map_err(|_| StoreError::LeaderTransferTimeout)?;
        if self.is_leader() {
            Ok(())
        } else {
            Err(StoreError::LeaderChanged)
        }
    }

    /// On the transferee: campaigns at once, as the leader that sent `req` asked.
    pub(crate) async fn timeout_now(&self, req: TimeoutNow) -> Result<(), StoreError> {
        let metrics = self.raft.metrics().borrow().clone();
        if !metrics
            .membership_config
            .membership()
            .voter_ids()
            .any(|id| id == self.id)
        {
            return Err(StoreError::BadLeaderTransferee);
        }
        if metrics.current_term != req.term || metrics.current_leader != Some(req.from) {
            // Stale: another election already moved on.
            return Err(StoreError::LeaderChanged);
        }
        tracing::info!(from = %format_args!("{:x}", req.from), term = req.term, "campaigning at the leader's request");
        self.elect().await
    }

    /// Before this member stops: if it leads, hands leadership to the most caught-up voter, so
    /// the cluster does not wait an election timeout for a new leader. Failure is logged, not
    /// fatal: the member stops anyway and the others elect a leader as after a crash.
    pub async fn step_down(self: &Arc<Self>) {
        if !self.is_leader() {
            return;
        }
        let metrics = self.raft.metrics().borrow().clone();
        // Voters that answered within a heartbeat or two: one that stopped (a cluster stopped
        // as a whole) cannot take over.
        let window = self.config.heartbeat_interval * 2;
        let voters: Vec<u64> = metrics
            .membership_config
            .membership()
            .voter_ids()
            .filter(|id| *id != self.id && self.activity.answered_within(*id, window))
            .collect();
        let Some(target) = voters.iter().copied().max_by_key(|id| {
            metrics
                .replication
                .as_ref()
                .and_then(|r| r.get(id).copied().flatten())
                .map(|l| l.index)
        }) else {
            return;
        };
        // One election timeout: a caught-up follower takes milliseconds, and a cluster stopped
        // as a whole (every member at once) should not wait long for a transferee that is
        // stopping too.
        if let Err(e) = self
            .transfer_leadership(target, self.config.election_timeout)
            .await
        {
            tracing::warn!(error = %e, to = %format_args!("{target:x}"), "leadership transfer before stopping failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_counts_new_leaders_and_times_leadership() {
        let h = LeaderHistory::default();
        let t0 = Instant::now();
        h.observe(None, None, t0);
        assert_eq!(h.changes(), 0);
        h.observe(Some(1), None, t0);
        h.observe(Some(1), None, t0);
        assert_eq!(h.changes(), 1);
        assert!(h.leading_for().is_none());
        // No leader for a while (an election) and then this member, in term 3.
        h.observe(None, None, t0);
        h.observe(Some(2), Some(3), t0);
        assert_eq!(h.changes(), 2);
        let first = h.lock().leading_since;
        h.observe(Some(2), Some(3), t0 + Duration::from_secs(1));
        assert_eq!(h.lock().leading_since, first, "same term: same start");
        h.observe(Some(2), Some(4), t0 + Duration::from_secs(2));
        assert_eq!(
            h.lock().leading_since.map(|(t, _)| t),
            Some(4),
            "a new term starts afresh"
        );
        h.observe(Some(1), None, t0);
        assert!(h.leading_for().is_none());
        assert_eq!(h.changes(), 3);
    }
}
