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

/// The start of tonic's answer to a message over `max_decoding_message_size`.
const TONIC_TOO_LARGE: &str = "Error, decoded message length too large: found ";

/// grpc-go's answer where tonic refused a message over the receive limit (OUT_OF_RANGE):
/// RESOURCE_EXHAUSTED, "grpc: received message larger than max (N vs. M)"; `None` for any
/// other status. Streams (Watch, LeaseKeepAlive) end with it too.
pub(crate) fn as_grpc_go(status: &tonic::Status) -> Option<tonic::Status> {
    if status.code() != tonic::Code::OutOfRange || !status.message().starts_with(TONIC_TOO_LARGE) {
        return None;
    }
    // "… found {len} bytes, the limit is: {limit} bytes"
    let numbers: Vec<&str> = status
        .message()
        .split(|c: char| !c.is_ascii_digit())
        .filter(|n| !n.is_empty())
        .collect();
    let text = match numbers.as_slice() {
        [len, limit] => format!("grpc: received message larger than max ({len} vs. {limit})"),
        _ => "grpc: received message larger than max".to_string(),
    };
    Some(tonic::Status::resource_exhausted(text))
}

/// Rewrites tonic's answer to a request over the receive limit (OUT_OF_RANGE) as grpc-go's,
/// which etcd clients see from etcd: RESOURCE_EXHAUSTED, "grpc: received message larger than
/// max (N vs. M)". A request over `--max-request-bytes` but within the limit plus
/// [`GRPC_OVERHEAD`](crate::server::GRPC_OVERHEAD) reaches the service and gets etcd's own "request is too large"
/// (INVALID_ARGUMENT). Covers answers whose status is in the headers: every unary call (the
/// request is decoded before the service runs); a streaming call that fails later ends with
/// the status in its trailers, untouched here.
pub(crate) fn oversized_as_grpc_go<B>(
    mut resp: tonic::codegen::http::Response<B>,
) -> tonic::codegen::http::Response<B> {
    let headers = resp.headers_mut();
    // The message travels percent-encoded: read it (and write ours) through tonic's `Status`.
    let Some(status) = tonic::Status::from_header_map(headers).and_then(|s| as_grpc_go(&s)) else {
        return resp;
    };
    if status.add_header(headers).is_err() {
        tracing::debug!("could not rewrite an oversized request's status");
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tonic's OUT_OF_RANGE for an oversized request becomes grpc-go's RESOURCE_EXHAUSTED
    /// with grpc-go's text; every other answer passes unchanged.
    #[test]
    fn oversized_requests_are_answered_as_grpc_go_does() {
        // Headers as tonic writes them (the message percent-encoded), read back as a client
        // reads them.
        let answer = |status: &str, message: &str| {
            let mut r = tonic::codegen::http::Response::new(());
            let code = tonic::Code::from_i32(status.parse().expect("code"));
            tonic::Status::new(code, message)
                .add_header(r.headers_mut())
                .expect("header");
            let r = oversized_as_grpc_go(r);
            let s = tonic::Status::from_header_map(r.headers()).expect("status");
            ((s.code() as i32).to_string(), s.message().to_string())
        };
        assert_eq!(
            answer(
                "11",
                "Error, decoded message length too large: found 2097160 bytes, the limit is: 2097152 bytes"
            ),
            (
                "8".to_string(),
                "grpc: received message larger than max (2097160 vs. 2097152)".to_string()
            )
        );
        let compacted = "etcdserver: mvcc: required revision has been compacted";
        assert_eq!(
            answer("11", compacted),
            ("11".to_string(), compacted.to_string())
        );
    }
}
