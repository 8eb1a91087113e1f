//! The Cluster service: MemberList, MemberAdd (also as learner), MemberRemove, MemberPromote,
//! MemberUpdate. Membership changes go through Raft on the leader.

use std::sync::Arc;

use skiff_proto::etcd::{
    PbClusterService, PbMember, PbMemberAddRequest, PbMemberAddResponse, PbMemberListRequest,
    PbMemberListResponse, PbMemberPromoteRequest, PbMemberPromoteResponse, PbMemberRemoveRequest,
    PbMemberRemoveResponse, PbMemberUpdateRequest, PbMemberUpdateResponse,
};
use tonic::{Request, Response, Status};

use super::{admin, header};
use crate::member::{MemberInfo, StoreMember};

#[derive(Debug, Clone)]
pub struct ClusterService {
    member: Arc<StoreMember>,
}

impl ClusterService {
    pub fn new(member: Arc<StoreMember>) -> Self {
        ClusterService { member }
    }

    fn list(&self) -> Vec<PbMember> {
        self.member.members().into_iter().map(pb_member).collect()
    }

    fn revision(&self) -> i64 {
        self.member.shared.read().revision()
    }

    /// Waits (briefly) until this member's view of the membership satisfies `done`, so a
    /// response reflects the change it reports.
    async fn settle(&self, done: impl Fn(&[MemberInfo]) -> bool) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while !done(&self.member.members()) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

fn pb_member(m: MemberInfo) -> PbMember {
    PbMember {
        id: m.id,
        name: m.name,
        peer_ur_ls: m.peer_urls,
        client_ur_ls: m.client_urls,
        is_learner: m.is_learner,
    }
}

#[tonic::async_trait]
impl PbClusterService for ClusterService {
    async fn member_add(
        &self,
        req: Request<PbMemberAddRequest>,
    ) -> Result<Response<PbMemberAddResponse>, Status> {
        admin(&self.member, &req).await?;
        let req = req.into_inner();
        let id = self
            .member
            .add_member(req.peer_ur_ls.clone(), req.is_learner)
            .await?;
        self.settle(|ms| ms.iter().any(|m| m.id == id)).await;
        Ok(Response::new(PbMemberAddResponse {
            header: header(&self.member, self.revision()),
            member: Some(PbMember {
                id,
                name: String::new(),
                peer_ur_ls: req.peer_ur_ls,
                client_ur_ls: Vec::new(),
                is_learner: req.is_learner,
            }),
            members: self.list(),
        }))
    }

    async fn member_remove(
        &self,
        req: Request<PbMemberRemoveRequest>,
    ) -> Result<Response<PbMemberRemoveResponse>, Status> {
        admin(&self.member, &req).await?;
        let id = req.get_ref().id;
        self.member.remove_member(id).await?;
        self.settle(|ms| ms.iter().all(|m| m.id != id)).await;
        Ok(Response::new(PbMemberRemoveResponse {
            header: header(&self.member, self.revision()),
            members: self.list(),
        }))
    }

    async fn member_update(
        &self,
        req: Request<PbMemberUpdateRequest>,
    ) -> Result<Response<PbMemberUpdateResponse>, Status> {
        admin(&self.member, &req).await?;
        let req = req.into_inner();
        self.member.update_member(req.id, req.peer_ur_ls).await?;
        Ok(Response::new(PbMemberUpdateResponse {
            header: header(&self.member, self.revision()),
            members: self.list(),
        }))
    }

    async fn member_list(
        &self,
        req: Request<PbMemberListRequest>,
    ) -> Result<Response<PbMemberListResponse>, Status> {
        if req.get_ref().linearizable {
            self.member.linearizable_barrier().await?;
        }
        Ok(Response::new(PbMemberListResponse {
            header: header(&self.member, self.revision()),
            members: self.list(),
        }))
    }

    async fn member_promote(
        &self,
        req: Request<PbMemberPromoteRequest>,
    ) -> Result<Response<PbMemberPromoteResponse>, Status> {
        admin(&self.member, &req).await?;
        let id = req.get_ref().id;
        self.member.promote_member(id).await?;
        self.settle(|ms| ms.iter().any(|m| m.id == id && !m.is_learner))
            .await;
        Ok(Response::new(PbMemberPromoteResponse {
            header: header(&self.member, self.revision()),
            members: self.list(),
        }))
    }
}
