//! The Maintenance service: Status, Alarm, Defragment, HashKV, Hash and MoveLeader (any
//! member takes it and the leader carries it out, see [`crate::member`]'s transfer) and
//! Snapshot, which streams a backup of the member's keyspace in Skiff's format (see
//! [`crate::backup`]; restored with `skiff store restore`). Downgrade answers `Unimplemented`.
//!
//! **HashKV and Hash** hash the keyspace as a read at one revision sees it: every key in byte
//! order with its value, create and mod revisions, version and lease, through SHA-256 (the
//! first four bytes are the answer). Members that applied the same log agree on the hash of
//! any revision they both still serve, and differ as soon as one of them holds another
//! value, which is what `etcdctl endpoint hashkv` and a corruption check compare. etcd hashes
//! its bbolt versions from the compaction to the revision instead, so the numbers of the two
//! systems are not comparable with each other, only among members of one cluster. `Hash` is
//! HashKV at the member's current revision.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use skiff_proto::etcd::{
    PbAlarmMember, PbAlarmRequest, PbAlarmResponse, PbDefragmentRequest, PbDefragmentResponse,
    PbDowngradeRequest, PbDowngradeResponse, PbHashKvRequest, PbHashKvResponse, PbHashRequest,
    PbHashResponse, PbMaintenanceService, PbMoveLeaderRequest, PbMoveLeaderResponse,
    PbResponseHeader, PbSnapshotRequest, PbSnapshotResponse, PbStatusRequest, PbStatusResponse,
};
use tonic::{Request, Response, Status};

use super::{API_VERSION, admin, caller, header};
use crate::command::{Alarm, Command, Outcome};
use crate::error::StoreError;
use crate::member::{BackupPiece, StoreMember};

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
            alarm: alarm.number(),
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
        // Listing needs a user, raising or disarming root.
        let who = caller(&self.member, &req).await?;
        if req.get_ref().action != 0 {
            self.member.check_admin(&who)?;
        }
        let req = req.into_inner();
        // GET reads every alarm whatever the type; etcd's NONE (0) raises or disarms NOSPACE.
        let alarm = match req.alarm {
            0 => Alarm::NoSpace,
            n => Alarm::from_number(n)
                .ok_or_else(|| StoreError::Invalid(format!("unsupported alarm type {n}")))?,
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
                .map(|(id, a)| format!("memberID:{id} alarm:{}", a.name()))
                .collect(),
            db_size_in_use: size,
            is_learner,
            db_size_quota: m.config.quota_backend_bytes as i64,
            ..PbStatusResponse::default()
        }))
    }

    async fn defragment(
        &self,
        req: Request<PbDefragmentRequest>,
    ) -> Result<Response<PbDefragmentResponse>, Status> {
        admin(&self.member, &req).await?;
        let member = self.member.clone();
        tokio::task::spawn_blocking(move || {
            let mvcc = member.shared.read();
            let db = mvcc.db().clone();
            drop(mvcc);
            db.compact_range_cf(
                crate::backend::cf(&db, crate::backend::CF_KV),
                None::<&[u8]>,
                None::<&[u8]>,
            );
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(PbDefragmentResponse {
            header: header(&self.member, self.member.shared.read().revision()),
        }))
    }

    async fn hash(&self, req: Request<PbHashRequest>) -> Result<Response<PbHashResponse>, Status> {
        admin(&self.member, &req).await?;
        let (hash, at, _) = self.member.hash_kv(0).await?;
        Ok(Response::new(PbHashResponse {
            header: header(&self.member, at),
            hash,
        }))
    }

    async fn hash_kv(
        &self,
        req: Request<PbHashKvRequest>,
    ) -> Result<Response<PbHashKvResponse>, Status> {
        admin(&self.member, &req).await?;
        let revision = req.into_inner().revision;
        let (hash, at, compacted) = self.member.hash_kv(revision).await?;
        Ok(Response::new(PbHashKvResponse {
            header: header(&self.member, self.member.shared.read().revision()),
            hash,
            compact_revision: compacted,
            hash_revision: at,
        }))
    }

    type SnapshotStream = SnapshotStream;

    async fn snapshot(
        &self,
        req: Request<PbSnapshotRequest>,
    ) -> Result<Response<Self::SnapshotStream>, Status> {
        admin(&self.member, &req).await?;
        let pieces = self.member.backup();
        let header = header(&self.member, self.member.shared.read().revision());
        // One piece is held back, so the message that carries the last bytes says that
        // nothing remains; before it, `remaining_bytes` is what is known to follow (the size
        // of the whole is not known until the keyspace has been read).
        struct State {
            pieces: tokio::sync::mpsc::Receiver<Result<BackupPiece, StoreError>>,
            header: Option<PbResponseHeader>,
            held: Option<Vec<u8>>,
            done: bool,
        }
        let state = State {
            pieces,
            header,
            held: None,
            done: false,
        };
        let stream = futures::stream::unfold(state, |mut st| async move {
            if st.done {
                return None;
            }
            loop {
                let piece = match st.pieces.recv().await {
                    Some(Ok(piece)) => piece,
                    Some(Err(e)) => {
                        st.done = true;
                        return Some((Err(Status::from(e)), st));
                    }
                    None => {
                        st.done = true;
                        return Some((Err(Status::from(StoreError::Stopped)), st));
                    }
                };
                match piece {
                    BackupPiece::Bytes(bytes) => {
                        if let Some(blob) = st.held.replace(bytes) {
                            let remaining = st.held.as_ref().map_or(0, Vec::len) as u64;
                            let msg = PbSnapshotResponse {
                                header: st.header.take(),
                                remaining_bytes: remaining,
                                blob,
                                ..PbSnapshotResponse::default()
                            };
                            return Some((Ok(msg), st));
                        }
                    }
                    BackupPiece::Done(summary) => {
                        tracing::info!(
                            revision = summary.head.revision,
                            versions = summary.versions,
                            keys = summary.keys,
                            "backup sent"
                        );
                        st.done = true;
                        let msg = PbSnapshotResponse {
                            header: st.header.take(),
                            remaining_bytes: 0,
                            blob: st.held.take().unwrap_or_default(),
                            ..PbSnapshotResponse::default()
                        };
                        return Some((Ok(msg), st));
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn move_leader(
        &self,
        req: Request<PbMoveLeaderRequest>,
    ) -> Result<Response<PbMoveLeaderResponse>, Status> {
        admin(&self.member, &req).await?;
        let target = req.into_inner().target_id;
        self.member.move_leader(target).await?;
        Ok(Response::new(PbMoveLeaderResponse {
            header: header(&self.member, self.member.shared.read().revision()),
        }))
    }

    async fn downgrade(
        &self,
        _req: Request<PbDowngradeRequest>,
    ) -> Result<Response<PbDowngradeResponse>, Status> {
        Err(Status::unimplemented("Downgrade does not apply to Skiff"))
    }
}
