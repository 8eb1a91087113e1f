//! Membership changes, in etcd's terms (MemberAdd, MemberRemove, MemberPromote, MemberUpdate),
//! checked on the leader, where every request arrives, and committed as openraft membership
//! changes one at a time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::ChangeMembers;
use openraft::error::{ClientWriteError, RaftError};

use super::forward::{AddMember, PromoteMember, RemoveMember, UpdatePeerUrls};
use super::{LEADER_WAIT, MemberInfo, StoreMember};
use crate::error::StoreError;
use crate::raft::{Member, member_id};
use crate::reconfig::{self, Voter};

impl StoreMember {
    pub async fn add_member(
        self: &Arc<Self>,
        peer_urls: Vec<String>,
        learner: bool,
    ) -> Result<u64, StoreError> {
        self.on_leader(AddMember { peer_urls, learner }).await
    }

    pub async fn remove_member(self: &Arc<Self>, id: u64) -> Result<(), StoreError> {
        self.on_leader(RemoveMember(id)).await
    }

    pub async fn promote_member(self: &Arc<Self>, id: u64) -> Result<(), StoreError> {
        self.on_leader(PromoteMember(id)).await
    }

    /// etcd's MemberUpdate: replaces a member's peer URLs.
    pub async fn update_member(
        self: &Arc<Self>,
        id: u64,
        peer_urls: Vec<String>,
    ) -> Result<(), StoreError> {
        self.on_leader(UpdatePeerUrls { id, peer_urls }).await
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

    pub(super) async fn add_member_local(
        &self,
        peer_urls: Vec<String>,
        learner: bool,
    ) -> Result<u64, StoreError> {
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
        let one_at_a_time = self.one_membership_change().await?;
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
        drop(one_at_a_time);
        if !learner {
            self.change_membership(ChangeMembers::AddVoterIds([id].into()))
                .await?;
        }
        Ok(id)
    }

    pub(super) async fn remove_member_local(&self, id: u64) -> Result<(), StoreError> {
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
        Ok(())
    }

    pub(super) async fn promote_member_local(&self, id: u64) -> Result<(), StoreError> {
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
        Ok(())
    }

    /// MemberUpdate on the leader: the new peer URLs must parse and belong to no other member.
    pub(super) async fn update_peer_urls_local(
        &self,
        id: u64,
        peer_urls: &[String],
    ) -> Result<(), StoreError> {
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
    pub(super) async fn update_member_local(
        &self,
        id: u64,
        change: impl FnOnce(&mut Member),
    ) -> Result<(), StoreError> {
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
            return Ok(());
        }
        self.change_membership(ChangeMembers::SetNodes(BTreeMap::from([(id, updated)])))
            .await?;
        Ok(())
    }

    /// This member's turn to change the membership (see `membership_changes`).
    async fn one_membership_change(&self) -> Result<tokio::sync::MutexGuard<'_, ()>, StoreError> {
        tokio::time::timeout(LEADER_WAIT, self.membership_changes.lock())
            .await
            .map_err(|_| StoreError::Timeout)
    }

    /// A membership change. openraft runs one change at a time: this member's own changes
    /// (such as every member recording its client URLs at start) wait for one another, and a
    /// change still in progress from before (a previous leader's, or the initial membership
    /// of a new cluster before its first commit) is waited out for a while.
    async fn change_membership(
        &self,
        change: ChangeMembers<u64, Member>,
    ) -> Result<(), StoreError> {
        let deadline = Instant::now() + LEADER_WAIT;
        let _one_at_a_time = self.one_membership_change().await?;
        // openraft refuses a change while the last one is uncommitted, and logs the refusal
        // as an error of its own: wait until this member has applied the membership in
        // force. (On the leader, applied means committed.) A refusal still possible after
        // this, when leadership moves meanwhile, is retried below.
        let mut metrics = self.raft.metrics();
        let settled = metrics.wait_for(|m| m.last_applied >= *m.membership_config.log_id());
        if tokio::time::timeout_at(deadline.into(), settled)
            .await
            .is_err()
        {
            return Err(StoreError::Timeout);
        }
        drop(metrics);
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

fn membership_err(e: RaftError<u64, ClientWriteError<u64, Member>>) -> StoreError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => StoreError::NoLeader,
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            StoreError::Invalid(e.to_string())
        }
        RaftError::Fatal(_) => StoreError::Stopped,
    }
}
