//! The Maintenance service: Status, Alarm and Defragment. Snapshot, Hash, HashKV, MoveLeader
//! and Downgrade answer `Unimplemented` with the reason.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use skiff_proto::etcd::{
    PbAlarmMember, PbAlarmRequest, PbAlarmResponse, PbDefragmentRequest, PbDefragmentResponse,
    PbDowngradeRequest, PbDowngradeResponse, PbHashKvRequest, PbHashKvResponse, PbHashRequest,
    PbHashResponse, PbMaintenanceService, PbMoveLeaderRequest, PbMoveLeaderResponse,
    PbSnapshotRequest, PbSnapshotResponse, PbStatusRequest, PbStatusResponse,
};
use tonic::{Request, Response, Status};

use super::{API_VERSION, header};
use crate::command::{Alarm, Command, Outcome};
use crate::error::StoreError;
use crate::member::StoreMember;

#[derive(Debug, Clone)]
pub struct MaintenanceService {
    member: Arc<StoreMember>,
}

impl MaintenanceService {
    pub fn new(member: Arc<StoreMember>) -> Self {
        MaintenanceService { member }
    }
}

fn alarm_members(alarms: &[(u64, Alarm)]) -> Vec<PbAlarmMember> {
    alarms
        .iter()
        .map(|(member, alarm)| PbAlarmMember {
            member_id: *member,
            alarm: match alarm {
                Alarm::NoSpace => 1,
            },
        })
        .collect()
}

type SnapshotStream = Pin<Box<dyn Stream<Item = Result<PbSnapshotResponse, Status>> + Send>>;

#[tonic::async_trait]
impl PbMaintenanceService for MaintenanceService {
    async fn alarm(
        &self,
        req: Request<PbAlarmRequest>,
    ) -> Result<Response<PbAlarmResponse>, Status> {
        let req = req.into_inner();
        let alarm = match req.alarm {
            0 | 1 => Alarm::NoSpace,
            n => return Err(StoreError::Invalid(format!("unsupported alarm type {n}")).into()),
        };
        let (revision, alarms) = match req.action {
            // GET
            0 => {
                let mvcc = self.member.shared.read();
                (mvcc.revision(), mvcc.alarms())
            }
            1 | 2 => {
                let cmd = if req.action == 1 {
                    Command::AlarmActivate {
                        member: req.member_id,
                        alarm,
                    }
                } else {
                    Command::AlarmDeactivate {
                        member: req.member_id,
                        alarm,
                    }
                };
                let resp = self.member.propose(cmd).await?;
                match resp.result? {
                    Outcome::Alarms(a) => (resp.revision, a),
                    _ => {
                        return Err(
                            StoreError::internal("alarm answered with another outcome").into()
                        );
                    }
                }
            }
            n => return Err(StoreError::Invalid(format!("unknown alarm action {n}")).into()),
        };
        Ok(Response::new(PbAlarmResponse {
            header: header(&self.member, revision),
            alarms: alarm_members(&alarms),
        }))
    }

    async fn status(
        &self,
        _req: Request<PbStatusRequest>,
    ) -> Result<Response<PbStatusResponse>, Status> {
        let m = &self.member;
        let (revision, alarms) = {
            let mvcc = m.shared.read();
            (mvcc.revision(), mvcc.alarms())
        };
        let size = m.db_size() as i64;
        let is_learner = m.members().iter().any(|x| x.id == m.id && x.is_learner);
        Ok(Response::new(PbStatusResponse {
            header: header(m, revision),
            version: API_VERSION.into(),
            db_size: size,
            leader: m.leader().unwrap_or(0),
            raft_index: m.raft_index(),
            raft_term: m.term(),
            raft_applied_index: m.applied_index(),
            errors: alarms
                .iter()
                .map(|(id, a)| {
                    format!(
                        "memberID:{id} alarm:{}",
                        match a {
                            Alarm::NoSpace => "NOSPACE",
                        }
                    )
                })
                .collect(),
            db_size_in_use: size,
            is_learner,
            db_size_quota: m.config.quota_backend_bytes as i64,
            ..PbStatusResponse::default()
        }))
    }

    async fn defragment(
        &self,
        _req: Request<PbDefragmentRequest>,
    ) -> Result<Response<PbDefragmentResponse>, Status> {
        let member = self.member.clone();
        tokio::task::spawn_blocking(move || {
            let mvcc = member.shared.read();
            let db = mvcc.db().clone();
            drop(mvcc);
            for name in [crate::backend::CF_KV, crate::backend::CF_LOG] {
                db.compact_range_cf(crate::backend::cf(&db, name), None::<&[u8]>, None::<&[u8]>);
            }
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(PbDefragmentResponse {
            header: header(&self.member, self.member.shared.read().revision()),
        }))
    }

    async fn hash(&self, _req: Request<PbHashRequest>) -> Result<Response<PbHashResponse>, Status> {
        Err(Status::unimplemented(
            "Hash is not supported by Skiff; use HashKV semantics via range",
        ))
    }

    async fn hash_kv(
        &self,
        _req: Request<PbHashKvRequest>,
    ) -> Result<Response<PbHashKvResponse>, Status> {
        Err(Status::unimplemented(
            "HashKV is not supported by Skiff yet",
        ))
    }

    type SnapshotStream = SnapshotStream;

    async fn snapshot(
        &self,
        _req: Request<PbSnapshotRequest>,
    ) -> Result<Response<Self::SnapshotStream>, Status> {
        Err(Status::unimplemented(
            "Snapshot (etcd's bbolt file) has no equivalent: Skiff members snapshot through Raft",
        ))
    }

    async fn move_leader(
        &self,
        _req: Request<PbMoveLeaderRequest>,
    ) -> Result<Response<PbMoveLeaderResponse>, Status> {
        Err(Status::unimplemented(
            "MoveLeader is not supported by Skiff yet",
        ))
    }

    async fn downgrade(
        &self,
        _req: Request<PbDowngradeRequest>,
    ) -> Result<Response<PbDowngradeResponse>, Status> {
        Err(Status::unimplemented("Downgrade does not apply to Skiff"))
    }
}
