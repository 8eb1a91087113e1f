//! The Lease service: Grant, Revoke, KeepAlive (stream), TimeToLive and Leases.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use skiff_proto::etcd::{
    PbLeaseGrantRequest, PbLeaseGrantResponse, PbLeaseKeepAliveRequest, PbLeaseKeepAliveResponse,
    PbLeaseLeasesRequest, PbLeaseLeasesResponse, PbLeaseRevokeRequest, PbLeaseRevokeResponse,
    PbLeaseService, PbLeaseStatus, PbLeaseTimeToLiveRequest, PbLeaseTimeToLiveResponse,
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::{caller, header};
use crate::command::{Command, Outcome};
use crate::error::StoreError;
use crate::member::StoreMember;

/// etcd's largest TTL (`MaxLeaseTTL`).
pub const MAX_LEASE_TTL: i64 = 9_000_000_000;

#[derive(Debug, Clone)]
pub struct LeaseService {
    member: Arc<StoreMember>,
}

impl LeaseService {
    pub fn new(member: Arc<StoreMember>) -> Self {
        LeaseService { member }
    }

    /// The shortest TTL granted: one and a half election timeouts, so a lease cannot expire
    /// in the gap a leader election leaves (etcd's `minTTL`).
    fn min_ttl(&self) -> i64 {
        (self.member.config.election_timeout.as_secs_f64() * 1.5).ceil() as i64
    }
}

type KeepAliveStream = Pin<Box<dyn Stream<Item = Result<PbLeaseKeepAliveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl PbLeaseService for LeaseService {
    async fn lease_grant(
        &self,
        req: Request<PbLeaseGrantRequest>,
    ) -> Result<Response<PbLeaseGrantResponse>, Status> {
        caller(&self.member, &req).await?;
        let req = req.into_inner();
        if req.ttl > MAX_LEASE_TTL {
            return Err(StoreError::LeaseTtlTooLarge.into());
        }
        let id = if req.id == 0 {
            self.member.new_lease_id()
        } else {
            req.id
        };
        let ttl = req.ttl.max(self.min_ttl());
        let resp = self.member.propose(Command::LeaseGrant { id, ttl }).await?;
        let Outcome::LeaseGranted { id, ttl } = resp.result? else {
            return Err(StoreError::internal("grant answered with another outcome").into());
        };
        Ok(Response::new(PbLeaseGrantResponse {
            header: header(&self.member, resp.revision),
            id,
            ttl,
            error: String::new(),
        }))
    }

    async fn lease_revoke(
        &self,
        req: Request<PbLeaseRevokeRequest>,
    ) -> Result<Response<PbLeaseRevokeResponse>, Status> {
        // Revoking deletes the lease's keys: the caller must be able to write every one.
        let who = caller(&self.member, &req).await?;
        self.member.check_lease_revoke(&who, req.get_ref().id)?;
        let resp = self
            .member
            .propose(Command::LeaseRevoke {
                id: req.get_ref().id,
            })
            .await?;
        resp.result?;
        Ok(Response::new(PbLeaseRevokeResponse {
            header: header(&self.member, resp.revision),
        }))
    }

    type LeaseKeepAliveStream = KeepAliveStream;

    async fn lease_keep_alive(
        &self,
        req: Request<Streaming<PbLeaseKeepAliveRequest>>,
    ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
        caller(&self.member, &req).await?;
        let mut input = req.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let member = self.member.clone();
        tokio::spawn(async move {
            while let Some(msg) = input.next().await {
                // A request that does not decode ends the call with its status, as etcd's.
                let msg = match msg {
                    Ok(msg) => msg,
                    Err(status) => {
                        let status = super::as_grpc_go(&status).unwrap_or(status);
                        let _ = tx.send(Err(status)).await;
                        break;
                    }
                };
                // etcd answers a keep-alive of an unknown lease with TTL 0, not an error.
                let reply = match member.keep_alive(msg.id).await {
                    Ok(ttl) => Ok(ttl),
                    Err(StoreError::LeaseNotFound) => Ok(0),
                    Err(e) => Err(Status::from(e)),
                };
                let reply = reply.map(|ttl| PbLeaseKeepAliveResponse {
                    header: header(&member, member.shared.read().revision()),
                    id: msg.id,
                    ttl,
                });
                let fatal = reply.is_err();
                if tx.send(reply).await.is_err() || fatal {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn lease_time_to_live(
        &self,
        req: Request<PbLeaseTimeToLiveRequest>,
    ) -> Result<Response<PbLeaseTimeToLiveResponse>, Status> {
        caller(&self.member, &req).await?;
        let req = req.into_inner();
        let (ttl, granted) = match self.member.time_to_live(req.id).await {
            Ok(t) => t,
            // etcd: an unknown lease reports TTL -1.
            Err(StoreError::LeaseNotFound) => (-1, 0),
            Err(e) => return Err(e.into()),
        };
        // The attached keys are read here: wait until this member has applied everything the
        // leader had committed, or a put acknowledged a moment ago could be missing.
        if req.keys {
            self.member.linearizable_barrier().await?;
        }
        let (revision, keys) = {
            let mvcc = self.member.shared.read();
            let keys = if req.keys {
                mvcc.leases()
                    .get(&req.id)
                    .map(|l| l.keys.iter().cloned().collect())
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            (mvcc.revision(), keys)
        };
        Ok(Response::new(PbLeaseTimeToLiveResponse {
            header: header(&self.member, revision),
            id: req.id,
            ttl,
            granted_ttl: granted,
            keys,
        }))
    }

    async fn lease_leases(
        &self,
        req: Request<PbLeaseLeasesRequest>,
    ) -> Result<Response<PbLeaseLeasesResponse>, Status> {
        caller(&self.member, &req).await?;
        self.member.linearizable_barrier().await?;
        let mvcc = self.member.shared.read();
        Ok(Response::new(PbLeaseLeasesResponse {
            header: header(&self.member, mvcc.revision()),
            leases: mvcc
                .leases()
                .keys()
                .map(|id| PbLeaseStatus { id: *id })
                .collect(),
        }))
    }
}
