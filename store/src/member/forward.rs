//! Requests that only the leader can serve, and how any member gets them served: here when it
//! leads, else relayed to the member that does (the relay, `crate::raft::relay`; the peer
//! `Forward` gRPC call to a leader of an older release).
//!
//! Each request is its own type, paired with the type of its reply by [`OnLeader::Reply`], so a
//! caller cannot get back a reply of the wrong kind: the pairing is checked when the code
//! compiles, and the wire carries the one reply type the caller decodes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use skiff_proto::raft::v1::RaftMessage;

use super::transfer::MoveLeader;
use super::{LEADER_WAIT, StoreMember};
use crate::backend;
use crate::command::{Command, Response};
use crate::error::StoreError;
use crate::raft::Member;
use crate::raft::relay::RelayError;

/// How long a follower waits for the leader's answer to a request it forwarded.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// A request served by the leader, and the reply it gives.
pub(crate) trait OnLeader: Clone + Send + Sync + Into<Forwarded> + 'static {
    type Reply: Serialize + DeserializeOwned + Send + 'static;

    /// Serves the request on this member, which should be the leader; if it is not (any more),
    /// the caller gets [`StoreError::NoLeader`] and retries against the new one.
    fn serve(
        self,
        member: &Arc<StoreMember>,
    ) -> impl Future<Output = Result<Self::Reply, StoreError>> + Send;
}

/// A proposal through the log: what applying the command produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Write(pub Command);

/// The leader's commit index after it confirmed its leadership (ReadIndex).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct ReadIndex;

/// A lease keep-alive: the lease's remaining TTL.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct KeepAlive(pub i64);

/// A lease's remaining and granted TTL.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct TimeToLive(pub i64);

/// Remaining and granted TTL of a lease, in seconds (remaining 0 or less: the lease is gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ttl {
    pub remaining: i64,
    pub granted: i64,
}

/// etcd's MemberAdd: the new member's id.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct AddMember {
    pub peer_urls: Vec<String>,
    pub learner: bool,
}

/// etcd's MemberRemove.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct RemoveMember(pub u64);

/// etcd's MemberPromote: a learner becomes a voter.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct PromoteMember(pub u64);

/// etcd's MemberUpdate: new peer URLs for a member.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct UpdatePeerUrls {
    pub id: u64,
    pub peer_urls: Vec<String>,
}

/// A member records its own name and client URLs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Introduce {
    pub id: u64,
    pub name: String,
    pub client_urls: Vec<String>,
}

/// What travels in the peer `Forward` call: one of the requests above.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Forwarded {
    Write(Write),
    ReadIndex(ReadIndex),
    KeepAlive(KeepAlive),
    TimeToLive(TimeToLive),
    AddMember(AddMember),
    RemoveMember(RemoveMember),
    PromoteMember(PromoteMember),
    UpdatePeerUrls(UpdatePeerUrls),
    Introduce(Introduce),
    MoveLeader(MoveLeader),
}

macro_rules! forwarded_from {
    ($($variant:ident),* $(,)?) => {
        $(impl From<$variant> for Forwarded {
            fn from(r: $variant) -> Self {
                Forwarded::$variant(r)
            }
        })*
    };
}
forwarded_from!(
    Write,
    ReadIndex,
    KeepAlive,
    TimeToLive,
    AddMember,
    RemoveMember,
    PromoteMember,
    UpdatePeerUrls,
    Introduce,
    MoveLeader,
);

impl OnLeader for Write {
    type Reply = Response;
    async fn serve(self, member: &Arc<StoreMember>) -> Result<Response, StoreError> {
        member.write_local(self.0).await
    }
}

impl OnLeader for ReadIndex {
    type Reply = u64;
    async fn serve(self, member: &Arc<StoreMember>) -> Result<u64, StoreError> {
        member.leader_read_index().await
    }
}

impl OnLeader for KeepAlive {
    type Reply = Ttl;
    async fn serve(self, member: &Arc<StoreMember>) -> Result<Ttl, StoreError> {
        member.keep_alive_local(self.0).await
    }
}

impl OnLeader for TimeToLive {
    type Reply = Ttl;
    async fn serve(self, member: &Arc<StoreMember>) -> Result<Ttl, StoreError> {
        member.ttl_local(self.0).await
    }
}

impl OnLeader for AddMember {
    type Reply = u64;
    async fn serve(self, member: &Arc<StoreMember>) -> Result<u64, StoreError> {
        member.add_member_local(self.peer_urls, self.learner).await
    }
}

impl OnLeader for RemoveMember {
    type Reply = ();
    async fn serve(self, member: &Arc<StoreMember>) -> Result<(), StoreError> {
        member.remove_member_local(self.0).await
    }
}

impl OnLeader for PromoteMember {
    type Reply = ();
    async fn serve(self, member: &Arc<StoreMember>) -> Result<(), StoreError> {
        member.promote_member_local(self.0).await
    }
}

impl OnLeader for UpdatePeerUrls {
    type Reply = ();
    async fn serve(self, member: &Arc<StoreMember>) -> Result<(), StoreError> {
        member
            .update_peer_urls_local(self.id, &self.peer_urls)
            .await
    }
}

impl OnLeader for Introduce {
    type Reply = ();
    async fn serve(self, member: &Arc<StoreMember>) -> Result<(), StoreError> {
        let Introduce {
            id,
            name,
            client_urls,
        } = self;
        member
            .update_member_local(id, move |m| {
                m.name = name;
                m.client_urls = client_urls;
            })
            .await
    }
}

impl StoreMember {
    /// Runs `req` on the leader: here if this member leads, else over the peer `Forward` call.
    /// Waits up to [`LEADER_WAIT`] for a leader to be known. A leader that has lost its
    /// majority (CheckQuorum, see [`super::election`]) counts as none.
    pub(crate) async fn on_leader<R: OnLeader>(
        self: &Arc<Self>,
        req: R,
    ) -> Result<R::Reply, StoreError> {
        let deadline = Instant::now() + LEADER_WAIT;
        loop {
            if self.is_leader() {
                // A leader that lost its majority serves nothing, as etcd's steps down: the
                // request waits for the majority to answer again or for a new leader.
                if !self.elections.quorum_lost() {
                    match req.clone().serve(self).await {
                        Err(StoreError::NoLeader) if Instant::now() < deadline => {}
                        other => return other,
                    }
                }
            } else if let Some((leader, node)) = self.leader_member()
                && leader != self.id
            {
                match self.forward::<R>(&node, req.clone().into()).await {
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

    /// Sends `req` to the leader and decodes the reply as `R`'s reply.
    async fn forward<R: OnLeader>(
        &self,
        leader: &Member,
        req: Forwarded,
    ) -> Result<R::Reply, StoreError> {
        let url = leader.peer_urls.first().ok_or(StoreError::NoLeader)?;
        let payload = backend::encode(&req);
        let reply = match self
            .channels
            .relays()
            .call(url, payload.clone(), FORWARD_TIMEOUT)
            .await
        {
            Ok(Some(reply)) => reply,
            // A leader of a release from before the relay.
            Ok(None) => self.forward_over_grpc(url, payload).await?,
            // Only a request that provably never left is safe to send again (to whichever
            // member leads next): a write that reached the leader may have been committed,
            // and proposing it twice would apply it twice.
            Err(RelayError::NotSent(_)) => return Err(StoreError::NoLeader),
            Err(RelayError::Ambiguous(_)) => return Err(StoreError::Timeout),
            Err(RelayError::Refused(why)) => return Err(StoreError::Internal(why)),
        };
        backend::decode::<Result<R::Reply, StoreError>>(&reply).map_err(StoreError::internal)?
    }

    /// The peer `Forward` gRPC call: the encoded reply (the same rules of what may be sent
    /// again as the relay's).
    async fn forward_over_grpc(&self, url: &str, payload: Vec<u8>) -> Result<Vec<u8>, StoreError> {
        let mut client = self
            .channels
            .peer_client(url)
            .map_err(|_| StoreError::NoLeader)?;
        let mut request = tonic::Request::new(RaftMessage { payload });
        request.set_timeout(FORWARD_TIMEOUT);
        match client.forward(request).await {
            Ok(reply) => Ok(reply.into_inner().payload),
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

    /// Serves a request another member forwarded, and encodes its reply for the wire.
    pub(crate) async fn serve_forwarded(self: &Arc<Self>, req: Forwarded) -> Vec<u8> {
        async fn reply<R: OnLeader>(member: &Arc<StoreMember>, req: R) -> Vec<u8> {
            backend::encode(&req.serve(member).await)
        }
        match req {
            Forwarded::Write(r) => reply(self, r).await,
            Forwarded::ReadIndex(r) => reply(self, r).await,
            Forwarded::KeepAlive(r) => reply(self, r).await,
            Forwarded::TimeToLive(r) => reply(self, r).await,
            Forwarded::AddMember(r) => reply(self, r).await,
            Forwarded::RemoveMember(r) => reply(self, r).await,
            Forwarded::PromoteMember(r) => reply(self, r).await,
            Forwarded::UpdatePeerUrls(r) => reply(self, r).await,
            Forwarded::Introduce(r) => reply(self, r).await,
            Forwarded::MoveLeader(r) => reply(self, r).await,
        }
    }

    pub(super) async fn write_local(&self, cmd: Command) -> Result<Response, StoreError> {
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

    /// Proposes a command through the log and returns what applying it produced.
    pub async fn propose(self: &Arc<Self>, cmd: Command) -> Result<Response, StoreError> {
        self.on_leader(Write(cmd)).await
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
