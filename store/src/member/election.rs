//! When a member campaigns: PreVote, CheckQuorum, and a follower that notices its leader's
//! death at once.
//!
//! openraft 0.9 campaigns on a timer of its own and has neither PreVote nor CheckQuorum: a
//! member cut off from the others raises its term with every timeout, and when it comes back
//! its higher term makes the leader step down, an election nobody needed. So openraft's timer
//! is off (`enable_elect = false`) and this module decides when a member campaigns:
//!
//! ```text
//!            no word from the leader for a random E..4E/3,
//!            or the Follow stream to it reset or refused
//!  follower ─────────────────────────────────────────────► PreVote(term + 1, last log id)
//!     ▲                                                      to every other voter
//!     │  no majority: back off, try again                        │ a majority (itself
//!     └──────────────────────────────────────────────────────────┤ included) would vote
//!                                                                ▼
//!                                           wait out the voters' openraft lease, then
//!                                           trigger().elect(): an ordinary Raft election
//! ```
//!
//! - **PreVote** (Raft thesis §9.6). Before raising its term a member asks the voters whether
//!   they would vote for it. A voter says yes only if the term asked for is above its own, the
//!   candidate's log is at least as up to date as its own, and it has no live leader: it has
//!   not heard from one within an election timeout, or its own link to the leader has just
//!   failed. A member partitioned away never raises its term, and rejoins without disturbing
//!   anyone.
//! - **A leader's death is seen at once.** Every follower holds a `Follow` stream open to its
//!   leader. When the leader's process dies, its kernel closes the socket and the stream ends;
//!   the follower campaigns after a random delay under one heartbeat instead of waiting out an
//!   election timeout. A pause or a partition leaves the stream silent, and the timer serves.
//! - **openraft's lease.** openraft refuses votes for [`vote_lease`] after a follower last heard
//!   from its leader. A PreVote grant says how much of that is left, and the candidate waits
//!   it out first, so its real vote is not refused for a lease about to end.
//! - **CheckQuorum.** A leader that has not heard from a majority within an election timeout
//!   stops serving (requests fail with "no leader", as etcd's do when its leader steps down),
//!   so the clients of a leader cut off from the majority go to the others. Its term stays;
//!   the majority's next leader has a higher one and replaces it when the partition heals.
//!
//! None of this weakens Raft's safety: a member still becomes leader only by winning an
//! ordinary election; PreVote and the timers decide only when one is held.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use openraft::ServerState;
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use skiff_proto::raft::v1::RaftMessage;
use tokio::sync::Notify;

use super::StoreMember;
use crate::backend;
use crate::error::StoreError;
use crate::raft::LogId;
use crate::raft::log_store::LogTail;

/// How long a follower's Raft refuses to vote after it last heard from its leader (openraft's
/// leader lease, its `election_timeout_max`). Longer than a heartbeat, so a follower of a
/// healthy leader always refuses a vote that skipped PreVote; short, because after a leader's
/// death the candidate waits what is left of it.
pub(crate) fn vote_lease(heartbeat: Duration) -> Duration {
    heartbeat * 3 / 2
}

/// What a member asks the voters before it campaigns.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PreVote {
    /// The term it would campaign in: its own plus one.
    pub term: u64,
    pub candidate: u64,
    pub last_log_id: Option<LogId>,
}

/// A voter's answer to a [`PreVote`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum PreVoteReply {
    /// It would vote for the candidate once its Raft's lease has run out, in `lease_left_ms`.
    /// `defer`: it saw the leader's link fail too, and its own claim is better (a longer log,
    /// or as long and a higher id), so it will campaign itself: the candidate should let it go
    /// first.
    Granted {
        lease_left_ms: u64,
        defer: bool,
    },
    Refused(Refusal),
}

/// Why a voter would not vote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Refusal {
    /// Its own term is already at or past the one asked for.
    Term { term: u64 },
    /// Its log is ahead of the candidate's.
    LogBehind,
    /// It leads, or heard from its leader within an election timeout over a link that works.
    LeaderAlive { leader: u64 },
}

/// The voter's side of [`Elections`]: its last word from a leader.
#[derive(Debug, Clone, Copy)]
struct Contact {
    /// The leader this member last heard from (none yet: since it started).
    leader: Option<u64>,
    heard: Instant,
    /// The `Follow` stream to `leader` ended or could not be opened, and has not been opened
    /// again since.
    link_lost: bool,
}

/// What a voter knows when a [`PreVote`] arrives.
#[derive(Debug, Clone, Copy)]
struct Voter {
    id: u64,
    term: u64,
    last_log_id: Option<LogId>,
    leading: bool,
    contact: Contact,
}

/// The PreVote rule, alone: whether `me` would vote for `req`'s candidate at `now`.
fn decide(
    req: &PreVote,
    me: &Voter,
    now: Instant,
    election_timeout: Duration,
    lease: Duration,
) -> PreVoteReply {
    if me.leading {
        return PreVoteReply::Refused(Refusal::LeaderAlive { leader: me.id });
    }
    if req.term <= me.term {
        return PreVoteReply::Refused(Refusal::Term { term: me.term });
    }
    if req.last_log_id < me.last_log_id {
        return PreVoteReply::Refused(Refusal::LogBehind);
    }
    let Contact {
        leader,
        heard,
        link_lost,
    } = me.contact;
    let Some(leader) = leader else {
        return PreVoteReply::Granted {
            lease_left_ms: 0,
            defer: false,
        };
    };
    if leader != req.candidate
        && !link_lost
        && now.saturating_duration_since(heard) < election_timeout
    {
        return PreVoteReply::Refused(Refusal::LeaderAlive { leader });
    }
    let left = (heard + lease).saturating_duration_since(now);
    PreVoteReply::Granted {
        lease_left_ms: left.as_millis() as u64,
        defer: link_lost && (me.last_log_id, me.id) > (req.last_log_id, req.candidate),
    }
}

/// Whether a candidate that saw its link to `lost_leader` fail should ask a voter that refused
/// it once more: the voter still counts that leader alive (its own link has not failed yet).
fn ask_again(why: Refusal, lost_leader: Option<u64>) -> bool {
    matches!(why, Refusal::LeaderAlive { leader } if Some(leader) == lost_leader)
}

/// A member's election state, shared by the peer service (which records the leader's
/// messages and answers PreVotes) and the tasks in this module.
#[derive(Debug)]
pub(crate) struct Elections {
    contact: Mutex<Contact>,
    /// Woken when the link to the leader fails.
    link_failed: Notify,
    /// This member leads but has not heard from a majority within an election timeout.
    quorum_lost: AtomicBool,
    /// The log's last id, which PreVotes are answered by.
    log: LogTail,
    heartbeat: Duration,
    election_timeout: Duration,
}

impl Elections {
    pub(crate) fn new(log: LogTail, heartbeat: Duration, election_timeout: Duration) -> Elections {
        Elections {
            contact: Mutex::new(Contact {
                leader: None,
                heard: Instant::now(),
                link_lost: false,
            }),
            link_failed: Notify::new(),
            quorum_lost: AtomicBool::new(false),
            log,
            heartbeat,
            election_timeout,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Contact> {
        self.contact.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `leader`'s AppendEntries or snapshot was accepted: it leads, and was just heard from.
    pub(crate) fn heard_from(&self, leader: u64) {
        let mut c = self.lock();
        if c.leader != Some(leader) {
            c.link_lost = false;
        }
        c.leader = Some(leader);
        c.heard = Instant::now();
    }

    /// Whether this member has heard from a leader since it started (itself, leading,
    /// included).
    pub(crate) fn heard_any(&self) -> bool {
        self.lock().leader.is_some()
    }

    /// The `Follow` stream to `leader` ended or could not be opened.
    fn link_failed(&self, leader: u64) {
        let mut c = self.lock();
        if c.leader == Some(leader) && !c.link_lost {
            c.link_lost = true;
            self.link_failed.notify_one();
        }
    }

    /// The `Follow` stream to `leader` is open (again).
    fn link_up(&self, leader: u64) {
        let mut c = self.lock();
        if c.leader == Some(leader) {
            c.link_lost = false;
        }
    }

    /// While this member (`me`) leads, its own timer is held back: it hears from nobody. Once
    /// it steps down it counts as having heard from itself as leader until then.
    fn hold_timer(&self, me: u64) {
        let mut c = self.lock();
        c.leader = Some(me);
        c.heard = Instant::now();
        c.link_lost = false;
    }

    /// Whether this member leads without a majority that answered within an election timeout
    /// (CheckQuorum): it should serve nothing.
    pub(crate) fn quorum_lost(&self) -> bool {
        self.quorum_lost.load(Ordering::Relaxed)
    }

    /// A random election timeout in [E, 4E/3): long enough that a live leader's heartbeats
    /// (every E/10 by default) arrive many times over, spread enough that two followers rarely
    /// campaign together.
    fn timeout(&self) -> Duration {
        let e = self.election_timeout;
        e + rand::rng().random_range(Duration::ZERO..(e / 3).max(Duration::from_millis(1)))
    }

    /// A random delay under `d` (at least 1 ms wide).
    fn jitter(d: Duration) -> Duration {
        rand::rng().random_range(Duration::ZERO..d.max(Duration::from_millis(1)))
    }
}

/// Why the election task woke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    Timer,
    LinkFailed,
}

impl StoreMember {
    /// Answers a [`PreVote`] (the peer service's `PreVote`).
    pub(crate) async fn pre_vote(&self, req: PreVote) -> Result<PreVoteReply, StoreError> {
        let metrics = self.raft.metrics().borrow().clone();
        let me = Voter {
            id: self.id,
            term: metrics.current_term,
            last_log_id: self.elections.log.last_log_id(),
            leading: metrics.state == ServerState::Leader,
            contact: *self.elections.lock(),
        };
        let e = &self.elections;
        let reply = decide(
            &req,
            &me,
            Instant::now(),
            e.election_timeout,
            vote_lease(e.heartbeat),
        );
        tracing::debug!(candidate = %format_args!("{:x}", req.candidate), term = req.term, ?reply, "pre-vote");
        Ok(reply)
    }

    /// Starts the election timer, the `Follow` stream to the leader and the leader's quorum
    /// check; they stop with the member.
    pub(super) fn spawn_elections(self: &Arc<Self>) {
        self.spawn_election_timer();
        self.spawn_follow_leader();
    }

    fn spawn_election_timer(self: &Arc<Self>) {
        let me = Arc::downgrade(self);
        let e = self.elections.clone();
        let cancel = self.cancel.clone();
        let hb = e.heartbeat;
        self.tasks.spawn(async move {
            let mut not_before = Instant::now();
            loop {
                let timeout = e.timeout();
                let c = *e.lock();
                // A failed link campaigns as soon as the back-off allows; otherwise wake at
                // the timeout, and at least each heartbeat (the leader's quorum check).
                let wake_at = if c.link_lost {
                    not_before
                } else {
                    (c.heard + timeout).max(not_before).min(Instant::now() + hb)
                };
                let wake = tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep_until(wake_at.into()) => {
                        if c.link_lost { Wake::LinkFailed } else { Wake::Timer }
                    }
                    () = e.link_failed.notified() => Wake::LinkFailed,
                };
                let Some(member) = me.upgrade() else { return };
                if member.raft.metrics().borrow().state == ServerState::Leader {
                    e.hold_timer(member.id);
                    member.check_quorum();
                    continue;
                }
                e.quorum_lost.store(false, Ordering::Relaxed);
                let c = *e.lock();
                let now = Instant::now();
                match wake {
                    Wake::Timer if now < (c.heard + timeout).max(not_before) => continue,
                    Wake::LinkFailed if !c.link_lost => continue,
                    Wake::Timer | Wake::LinkFailed => {}
                }
                not_before = match member.campaign().await {
                    Ok(true) => Instant::now(),
                    // Lost, split or refused: ask again after one to three heartbeats.
                    Ok(false) => Instant::now() + hb + Elections::jitter(hb * 2),
                    Err(error) => {
                        tracing::warn!(%error, "election");
                        Instant::now() + hb
                    }
                };
            }
        });
    }

    /// PreVote, then (with a majority) an openraft election. True when a leader, this member
    /// or another, is known at a higher term afterwards.
    async fn campaign(self: &Arc<Self>) -> Result<bool, StoreError> {
        let started = Instant::now();
        let (state, term, membership) = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow();
            let membership = m.membership_config.membership().clone();
            (m.state, m.current_term, membership)
        };
        if state == ServerState::Leader || !membership.voter_ids().any(|v| v == self.id) {
            return Ok(false);
        }
        let req = PreVote {
            term: term + 1,
            candidate: self.id,
            last_log_id: self.elections.log.last_log_id(),
        };
        let others: Vec<(u64, String)> = membership
            .voter_ids()
            .filter(|v| *v != self.id)
            .filter_map(|v| {
                let url = membership.get_node(&v)?.peer_urls.first()?.clone();
                Some((v, url))
            })
            .collect();
        let voters = others.len() + 1;
        let needed = voters / 2; // grants from others: with its own, a majority
        let e = &self.elections;
        let lost_leader = {
            let c = *e.lock();
            c.leader.filter(|_| c.link_lost)
        };
        let ask = |id: u64, url: String, after: Duration| {
            let req = req.clone();
            let asked = self.ask_pre_vote(url, req, e.election_timeout / 2);
            Box::pin(async move {
                tokio::time::sleep(after).await;
                (id, asked.await)
            })
        };
        let mut asks: FuturesUnordered<_> = others
            .iter()
            .map(|(id, url)| ask(*id, url.clone(), Duration::ZERO))
            .collect();
        let mut asked_again = Vec::new();
        let mut granted = 0;
        let mut wait = Duration::ZERO;
        let mut deferred = false;
        while granted < needed {
            let Some((id, reply)) = asks.next().await else {
                break;
            };
            match reply {
                Ok(PreVoteReply::Granted {
                    lease_left_ms,
                    defer,
                }) => {
                    granted += 1;
                    wait = wait.max(Duration::from_millis(lease_left_ms));
                    deferred |= defer;
                }
                Ok(PreVoteReply::Refused(why))
                    if ask_again(why, lost_leader) && !asked_again.contains(&id) =>
                {
                    // It has not seen the death yet, and will in a moment: its own link to
                    // that leader fails as this member's did. Waiting for the other voters
                    // instead could mean waiting out a dead one's PreVote.
                    tracing::debug!(voter = %format_args!("{id:x}"), ?why, "pre-vote refused; asking again");
                    asked_again.push(id);
                    if let Some((_, url)) = others.iter().find(|(v, _)| *v == id) {
                        asks.push(ask(id, url.clone(), e.heartbeat / 4));
                    }
                }
                Ok(PreVoteReply::Refused(why)) => {
                    tracing::debug!(voter = %format_args!("{id:x}"), ?why, "pre-vote refused");
                }
                Err(e) => {
                    tracing::debug!(voter = %format_args!("{id:x}"), error = %e, "pre-vote unanswered");
                }
            }
        }
        drop(asks);
        if granted < needed {
            tracing::debug!(term = req.term, granted, voters, "pre-vote lost");
            return Ok(false);
        }
        // The voters' leases began at the dead leader's last heartbeat, so every follower that
        // saw the death would campaign at the same moment and split the vote. The one with the
        // best claim goes first; the others wait a heartbeat more, and give it their votes.
        let wait = wait.min(vote_lease(e.heartbeat))
            + if deferred {
                e.heartbeat
            } else {
                Duration::ZERO
            };
        tokio::time::sleep(wait).await;
        // Meanwhile a leader may have been heard from (this member's timer was wrong), or
        // another candidate may have had this member's vote: campaigning now would only
        // unseat it.
        let c = *e.lock();
        if (c.heard > started && !c.link_lost) || self.raft.metrics().borrow().current_term != term
        {
            return Ok(false);
        }
        tracing::info!(
            term = req.term,
            granted,
            voters,
            waited_ms = wait.as_millis() as u64,
            reason = if c.link_lost {
                "link to the leader failed"
            } else {
                "no word from a leader"
            },
            "pre-vote won; campaigning"
        );
        self.elect().await?;
        let outcome = self
            .raft
            .wait(Some(e.heartbeat * 3))
            .metrics(
                |m| m.current_term > term && m.current_leader.is_some(),
                "an elected leader",
            )
            .await;
        Ok(outcome.is_ok())
    }

    async fn ask_pre_vote(
        &self,
        url: String,
        req: PreVote,
        timeout: Duration,
    ) -> Result<PreVoteReply, String> {
        let mut client = self.channels.peer_client(&url).map_err(|e| e.to_string())?;
        let mut request = tonic::Request::new(RaftMessage {
            payload: backend::encode(&req),
        });
        request.set_timeout(timeout);
        let reply = client
            .pre_vote(request)
            .await
            .map_err(|s| s.message().to_string())?;
        backend::decode::<Result<PreVoteReply, StoreError>>(&reply.into_inner().payload)
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())
    }

    /// CheckQuorum, on the leader: whether a majority of voters (itself included) answered
    /// its Raft messages within an election timeout. A leader younger than that is given the
    /// benefit of the doubt.
    fn check_quorum(&self) {
        let e = &self.elections;
        if self
            .leader_history
            .leading_for()
            .is_none_or(|led| led < e.election_timeout)
        {
            e.quorum_lost.store(false, Ordering::Relaxed);
            return;
        }
        let voters: Vec<u64> = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow();
            m.membership_config.membership().voter_ids().collect()
        };
        let heard = voters
            .iter()
            .filter(|v| **v == self.id || self.activity.answered_within(**v, e.election_timeout))
            .count();
        let lost = heard * 2 <= voters.len();
        if e.quorum_lost.swap(lost, Ordering::Relaxed) != lost {
            if lost {
                tracing::warn!(
                    heard,
                    voters = voters.len(),
                    "lost contact with a majority: serving nothing until it answers again"
                );
            } else {
                tracing::info!("a majority answers again");
            }
        }
    }

    /// Holds a `Follow` stream open to whichever member leads, and tells [`Elections`] when it
    /// fails.
    fn spawn_follow_leader(self: &Arc<Self>) {
        let me = Arc::downgrade(self);
        let cancel = self.cancel.clone();
        // The server metrics change with the leader, not with every write.
        let mut metrics = self.raft.server_metrics();
        self.tasks.spawn(async move {
            loop {
                let leader = metrics.borrow_and_update().current_leader;
                let follow = async {
                    match (leader, me.upgrade()) {
                        (Some(l), Some(member)) if l != member.id => {
                            follow(&member, l).await;
                        }
                        _ => futures::future::pending::<()>().await,
                    }
                };
                let changed = async {
                    loop {
                        if metrics.changed().await.is_err() {
                            return false;
                        }
                        if metrics.borrow().current_leader != leader {
                            return true;
                        }
                    }
                };
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = follow => {}
                    going = changed => if !going { return },
                }
            }
        });
    }
}

/// Follows `leader` until the member stops: opens a `Follow` stream, waits for it to end,
/// reports the failure, and tries again each heartbeat (the link may come back). Returns only
/// if the leader does not serve `Follow` (an older member).
async fn follow(member: &Arc<StoreMember>, leader: u64) {
    let e = &member.elections;
    let url = {
        let metrics = member.raft.metrics().borrow().clone();
        metrics
            .membership_config
            .membership()
            .get_node(&leader)
            .and_then(|n| n.peer_urls.first().cloned())
    };
    let Some(url) = url else { return };
    let mut reported = false;
    loop {
        let stream = match member.channels.peer_client(&url) {
            Ok(mut client) => {
                client
                    .follow(RaftMessage {
                        payload: backend::encode(&member.id),
                    })
                    .await
            }
            Err(e) => Err(tonic::Status::unavailable(e.to_string())),
        };
        match stream {
            Ok(stream) => {
                e.link_up(leader);
                let mut stream = stream.into_inner();
                // The leader sends nothing: the stream ends only when its connection does.
                let end = loop {
                    match stream.message().await {
                        Ok(Some(_)) => continue,
                        Ok(None) => break "closed".to_string(),
                        Err(s) => break s.message().to_string(),
                    }
                };
                tracing::info!(leader = %format_args!("{leader:x}"), why = %end, "link to the leader failed");
                e.link_failed(leader);
                reported = true;
            }
            Err(s) if s.code() == tonic::Code::Unimplemented => return,
            Err(s) => {
                if !reported {
                    tracing::info!(leader = %format_args!("{leader:x}"), error = %s.message(), "no link to the leader");
                    reported = true;
                }
                e.link_failed(leader);
            }
        }
        tokio::time::sleep(e.heartbeat).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const E: Duration = Duration::from_millis(1000);
    const LEASE: Duration = Duration::from_millis(200);

    fn log(term: u64, index: u64) -> Option<LogId> {
        Some(LogId::new(openraft::CommittedLeaderId::new(term, 1), index))
    }

    fn voter(now: Instant) -> Voter {
        Voter {
            id: 2,
            term: 5,
            last_log_id: log(5, 100),
            leading: false,
            contact: Contact {
                leader: Some(9),
                heard: now,
                link_lost: false,
            },
        }
    }

    fn ask(term: u64, last: Option<LogId>) -> PreVote {
        PreVote {
            term,
            candidate: 3,
            last_log_id: last,
        }
    }

    /// A voter that still counts alive the leader whose link the candidate saw fail is asked
    /// again (it sees the death a moment later); any other refusal stands.
    #[test]
    fn a_voter_that_has_not_seen_the_leader_die_yet_is_asked_again() {
        let alive = |leader| Refusal::LeaderAlive { leader };
        assert!(ask_again(alive(9), Some(9)));
        assert!(
            !ask_again(alive(9), Some(7)),
            "another leader, alive to the voter"
        );
        assert!(!ask_again(alive(9), None), "the candidate's own link works");
        assert!(!ask_again(Refusal::LogBehind, Some(9)));
        assert!(!ask_again(Refusal::Term { term: 7 }, Some(9)));
        // Asked again once its own link to the dead leader has failed, the same voter grants.
        let now = Instant::now();
        let mut me = voter(now - Duration::from_millis(50));
        assert_eq!(
            decide(&ask(6, log(5, 100)), &me, now, E, LEASE),
            PreVoteReply::Refused(alive(9))
        );
        me.contact.link_lost = true;
        assert!(matches!(
            decide(&ask(6, log(5, 100)), &me, now, E, LEASE),
            PreVoteReply::Granted { .. }
        ));
    }

    #[test]
    fn a_follower_of_a_live_leader_refuses() {
        let now = Instant::now();
        let me = voter(now - Duration::from_millis(50));
        assert_eq!(
            decide(&ask(6, log(5, 100)), &me, now, E, LEASE),
            PreVoteReply::Refused(Refusal::LeaderAlive { leader: 9 })
        );
        let mut leader = voter(now);
        leader.leading = true;
        assert_eq!(
            decide(&ask(6, log(5, 100)), &leader, now, E, LEASE),
            PreVoteReply::Refused(Refusal::LeaderAlive { leader: 2 })
        );
    }

    #[test]
    fn silence_for_an_election_timeout_or_a_failed_link_frees_the_vote() {
        let now = Instant::now();
        let quiet = voter(now - E);
        assert_eq!(
            decide(&ask(6, log(5, 100)), &quiet, now, E, LEASE),
            PreVoteReply::Granted {
                lease_left_ms: 0,
                defer: false
            }
        );
        // Heard 50 ms ago, but the link to the leader just failed: grant, after the 150 ms of
        // openraft's lease that are left. This voter (id 2) saw the death too, but the
        // candidate's log is longer: it goes first.
        let mut cut = voter(now - Duration::from_millis(50));
        cut.contact.link_lost = true;
        assert_eq!(
            decide(&ask(6, log(5, 101)), &cut, now, E, LEASE),
            PreVoteReply::Granted {
                lease_left_ms: 150,
                defer: false
            }
        );
        // Logs as long: the higher id (the candidate's, 3) goes first, a lower one defers.
        assert_eq!(
            decide(&ask(6, log(5, 100)), &cut, now, E, LEASE),
            PreVoteReply::Granted {
                lease_left_ms: 150,
                defer: false
            }
        );
        let lower = PreVote {
            candidate: 1,
            ..ask(6, log(5, 100))
        };
        assert_eq!(
            decide(&lower, &cut, now, E, LEASE),
            PreVoteReply::Granted {
                lease_left_ms: 150,
                defer: true
            }
        );
        // Never heard from a leader (a cluster starting): only the log counts.
        let mut fresh = voter(now);
        fresh.contact.leader = None;
        assert_eq!(
            decide(&ask(6, log(5, 100)), &fresh, now, E, LEASE),
            PreVoteReply::Granted {
                lease_left_ms: 0,
                defer: false
            }
        );
        assert_eq!(
            decide(&ask(6, None), &fresh, now, E, LEASE),
            PreVoteReply::Refused(Refusal::LogBehind)
        );
    }

    #[test]
    fn a_shorter_log_or_a_stale_term_is_refused() {
        let now = Instant::now();
        let quiet = voter(now - E);
        assert_eq!(
            decide(&ask(6, log(5, 99)), &quiet, now, E, LEASE),
            PreVoteReply::Refused(Refusal::LogBehind)
        );
        // A longer log of an older term is still behind.
        assert_eq!(
            decide(&ask(6, log(4, 500)), &quiet, now, E, LEASE),
            PreVoteReply::Refused(Refusal::LogBehind)
        );
        assert_eq!(
            decide(&ask(5, log(5, 100)), &quiet, now, E, LEASE),
            PreVoteReply::Refused(Refusal::Term { term: 5 })
        );
        assert!(matches!(
            decide(&ask(6, log(5, 101)), &quiet, now, E, LEASE),
            PreVoteReply::Granted { .. }
        ));
    }
}
