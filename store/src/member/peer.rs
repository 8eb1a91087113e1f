//! The member's side of the peer transport: the `RaftPeer` service a member serves on its peer
//! URL, handing Raft RPCs to openraft and forwarded client requests to the member, and the
//! [`PeerHandler`] the peer stream and the relay hand their frames to.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use openraft::error::RaftError;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};
use skiff_proto::raft::v1::raft_peer_server::RaftPeer;
use skiff_proto::raft::v1::{HelloRequest, HelloResponse, RaftMessage, SnapshotChunk};
use tokio::io::AsyncWriteExt;
use tonic::{Request, Response, Status, Streaming};

use super::{Forwarded, PreVote, StoreMember, TimeoutNow};
use crate::backend;
use crate::error::StoreError;
use crate::raft::handler::PeerHandler;
use crate::raft::network::SnapshotHeader;
use crate::raft::{Snapshot, TypeConfig};

#[derive(Debug, Clone)]
pub struct PeerService {
    member: Arc<StoreMember>,
}

impl PeerService {
    pub fn new(member: Arc<StoreMember>) -> Self {
        PeerService { member }
    }

    /// A message from `from` that Raft accepted (not refused for a higher vote): `from` leads.
    fn heard_from(&self, from: Option<u64>, accepted: bool) {
        if let (Some(leader), true) = (from, accepted) {
            self.member.elections().heard_from(leader);
        }
    }
}

impl PeerHandler for PeerService {
    async fn take_append_entries(
        &self,
        rpc: AppendEntriesRequest<TypeConfig>,
    ) -> Result<Result<AppendEntriesResponse<u64>, RaftError<u64>>, StoreError> {
        let from = rpc.vote.leader_id().voted_for();
        let res = self
            .member
            .raft_call(self.member.raft.append_entries(rpc))
            .await?;
        let accepted = res
            .as_ref()
            .is_ok_and(|r| !matches!(r, AppendEntriesResponse::HigherVote(_)));
        self.heard_from(from, accepted);
        Ok(res)
    }

    async fn take_forwarded(&self, payload: &[u8]) -> Result<Vec<u8>, String> {
        let fwd: Forwarded =
            backend::decode(payload).map_err(|e| format!("malformed peer message: {e}"))?;
        Ok(self.member.serve_forwarded(fwd).await)
    }
}

/// A `Follow` stream: it yields nothing and ends when the member stops (or the connection
/// does).
type FollowStream = Pin<Box<dyn Stream<Item = Result<RaftMessage, Status>> + Send>>;

fn decode<T: serde::de::DeserializeOwned>(msg: &RaftMessage) -> Result<T, Status> {
    backend::decode(&msg.payload)
        .map_err(|e| Status::invalid_argument(format!("malformed peer message: {e}")))
}

fn reply<T: serde::Serialize>(v: &T) -> Result<Response<RaftMessage>, Status> {
    Ok(Response::new(RaftMessage {
        payload: backend::encode(v),
    }))
}

#[tonic::async_trait]
impl RaftPeer for PeerService {
    async fn vote(&self, req: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let rpc = decode(req.get_ref())?;
        reply(&self.member.raft_call(self.member.raft.vote(rpc)).await?)
    }

    async fn append_entries(
        &self,
        req: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let rpc: AppendEntriesRequest<TypeConfig> = decode(req.get_ref())?;
        reply(&self.take_append_entries(rpc).await?)
    }

    async fn install_snapshot(
        &self,
        req: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<RaftMessage>, Status> {
        let mut stream = req.into_inner();
        let first = stream
            .next()
            .await
            .ok_or_else(|| Status::invalid_argument("empty snapshot stream"))??;
        let header: SnapshotHeader = backend::decode(&first.header)
            .map_err(|e| Status::invalid_argument(format!("malformed snapshot header: {e}")))?;
        match header {
            SnapshotHeader::Chunk(rpc) => {
                let leader = *rpc.vote.leader_id();
                let res = self
                    .member
                    .raft_call(self.member.raft.install_snapshot(rpc))
                    .await?;
                let accepted = res.as_ref().is_ok_and(|r| *r.vote.leader_id() == leader);
                self.heard_from(leader.voted_for(), accepted);
                reply(&res)
            }
            SnapshotHeader::Full { vote, meta } => {
                // Written to a file as it arrives (removed if the stream breaks off).
                let mut data = self
                    .member
                    .raft
                    .begin_receiving_snapshot()
                    .await
                    .map_err(|e| Status::unavailable(format!("cannot receive a snapshot: {e}")))?;
                let write_err = |e: std::io::Error| {
                    Status::internal(format!("writing a received snapshot: {e}"))
                };
                let mut received = 0u64;
                let mut chunk = first;
                loop {
                    if chunk.offset != received {
                        return Err(Status::invalid_argument(format!(
                            "snapshot chunk at offset {} after {received} bytes",
                            chunk.offset
                        )));
                    }
                    data.write_all(&chunk.data).await.map_err(write_err)?;
                    received += chunk.data.len() as u64;
                    if chunk.done {
                        break;
                    }
                    chunk = stream
                        .next()
                        .await
                        .ok_or_else(|| Status::invalid_argument("snapshot stream ended early"))??;
                }
                let snapshot = Snapshot {
                    meta,
                    snapshot: data,
                };
                let leader = *vote.leader_id();
                let res = self
                    .member
                    .raft_call(self.member.raft.install_full_snapshot(vote, snapshot))
                    .await?;
                let accepted = res.as_ref().is_ok_and(|r| *r.vote.leader_id() == leader);
                self.heard_from(leader.voted_for(), accepted);
                reply(&res)
            }
        }
    }

    async fn forward(&self, req: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let payload = self
            .take_forwarded(&req.get_ref().payload)
            .await
            .map_err(Status::invalid_argument)?;
        Ok(Response::new(RaftMessage { payload }))
    }

    async fn timeout_now(
        &self,
        req: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let req: TimeoutNow = decode(req.get_ref())?;
        self.member.timeout_now(req).await?;
        reply(&())
    }

    async fn pre_vote(&self, req: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let req: PreVote = decode(req.get_ref())?;
        reply(&self.member.pre_vote(req).await)
    }

    type FollowStream = FollowStream;

    async fn follow(
        &self,
        _req: Request<RaftMessage>,
    ) -> Result<Response<Self::FollowStream>, Status> {
        let stopped = self.member.stopped();
        let stream = futures::stream::once(stopped).filter_map(|()| async { None });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn hash_kv(&self, req: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let revision: i64 = decode(req.get_ref())?;
        reply(&self.member.hash_kv(revision).await)
    }

    async fn hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloResponse>, Status> {
        if req.get_ref().cluster_token != self.member.config.initial_cluster_token {
            return Err(Status::failed_precondition(format!(
                "cluster token mismatch: this cluster is {:?}",
                self.member.config.initial_cluster_token
            )));
        }
        Ok(Response::new(HelloResponse {
            cluster_id: self.member.cluster_id,
            member_id: self.member.id,
            name: self.member.config.name.clone(),
        }))
    }
}
