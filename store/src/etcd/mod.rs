//! The etcd v3 gRPC API on the client port: KV, Watch, Lease, Cluster and Maintenance, served
//! with the server traits generated from etcd's own `.proto` files, so `etcdctl` and the etcd
//! client libraries work unmodified.

use std::sync::Arc;

use skiff_proto::etcd::PbResponseHeader;

use crate::auth::Caller;
use crate::error::StoreError;
use crate::member::StoreMember;
use crate::tls::ConnInfo;

pub mod auth;
pub mod cluster;
pub mod convert;
pub mod kv;
pub mod lease;
pub mod maintenance;
pub mod watch;

/// The version Maintenance.Status reports: the etcd API level this store implements.
pub const API_VERSION: &str = "3.4.0";

/// What every response header carries: cluster id, member id, revision and Raft term.
pub fn header(member: &StoreMember, revision: i64) -> Option<PbResponseHeader> {
    Some(PbResponseHeader {
        cluster_id: member.cluster_id,
        member_id: member.id,
        revision,
        raft_term: member.term(),
    })
}

/// Who sent `req` (see [`StoreMember::caller`]).
pub async fn caller<T>(
    member: &StoreMember,
    req: &tonic::Request<T>,
) -> Result<Caller, StoreError> {
    member
        .caller(req.metadata(), req.extensions().get::<ConnInfo>())
        .await
}

/// Refuses `req` unless auth is off or it comes from root.
pub async fn admin<T>(member: &StoreMember, req: &tonic::Request<T>) -> Result<(), StoreError> {
    let who = caller(member, req).await?;
    member.check_admin(&who)
}

/// The services, ready to add to a tonic router.
#[derive(Debug, Clone)]
pub struct EtcdServices {
    pub member: Arc<StoreMember>,
}
