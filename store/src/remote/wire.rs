//! etcd's v3 messages as a client sends and reads them: the store's requests into etcd's, and
//! etcd's responses into the store's (the other direction of [`crate::etcd::convert`]), and
//! unary and streaming calls over one channel, named by their gRPC paths.

use skiff_proto::etcd::{
    PbCompare, PbDeleteRequest, PbKeyValue, PbPutRequest, PbRangeRequest, PbResponseOp,
    PbTargetUnion, PbTxnOpRequest, PbTxnOpResponse, PbTxnRequest, PbTxnRequestOp, PbTxnResponse,
};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

use crate::error::StoreError;
use crate::request::{
    Compare, CompareResult, CompareTarget, DeleteRangeRequest, DeleteRangeResponse, KeyValue,
    PutRequest, PutResponse, RangeRequest, RangeResponse, RequestOp, ResponseOp, SortOrder,
    SortTarget, TxnRequest, TxnResponse,
};

/// A gRPC client over `channel`, once the channel can take a call.
async fn ready(channel: &Channel) -> Result<tonic::client::Grpc<Channel>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("etcd: {e}")))?;
    Ok(grpc)
}

/// A unary call of etcd's at `path` (`/etcdserverpb.KV/Txn`).
pub async fn unary<Req, Resp>(
    channel: &Channel,
    path: &'static str,
    req: Req,
) -> Result<Resp, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    unary_as(channel, path, tonic::metadata::MetadataMap::new(), req).await
}

/// A unary call made for a client of this process, with the client's credentials (see
/// [`credentials`]).
pub async fn unary_as<Req, Resp>(
    channel: &Channel,
    path: &'static str,
    metadata: tonic::metadata::MetadataMap,
    req: Req,
) -> Result<Resp, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
    let resp = ready(channel)
        .await?
        .unary(
            tonic::Request::from_parts(metadata, Default::default(), req),
            PathAndQuery::from_static(path),
            codec,
        )
        .await?;
    Ok(resp.into_inner())
}

/// A bidirectional stream of etcd's at `path` (`/etcdserverpb.Watch/Watch`).
pub async fn streaming<Req, Resp>(
    channel: &Channel,
    path: &'static str,
    requests: impl futures::Stream<Item = Req> + Send + 'static,
) -> Result<tonic::Streaming<Resp>, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    streaming_as(channel, path, tonic::metadata::MetadataMap::new(), requests).await
}

/// A bidirectional stream opened for a client of this process, with its credentials.
pub async fn streaming_as<Req, Resp>(
    channel: &Channel,
    path: &'static str,
    metadata: tonic::metadata::MetadataMap,
    requests: impl futures::Stream<Item = Req> + Send + 'static,
) -> Result<tonic::Streaming<Resp>, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
    let resp = ready(channel)
        .await?
        .streaming(
            tonic::Request::from_parts(metadata, Default::default(), requests),
            PathAndQuery::from_static(path),
            codec,
        )
        .await?;
    Ok(resp.into_inner())
}

/// What of a client's call metadata goes on to etcd: its etcd token (`token`, from etcd's
/// Authenticate) and an `authorization` header, nothing else.
pub fn credentials(from: &tonic::metadata::MetadataMap) -> tonic::metadata::MetadataMap {
    let mut out = tonic::metadata::MetadataMap::new();
    for name in ["token", "authorization"] {
        if let Some(v) = from.get(name) {
            out.insert(name, v.clone());
        }
    }
    out
}

/// What etcd answered, as the store's error: the one its message names (etcd's messages are
/// the store's own), else by its code.
pub fn status_error(s: tonic::Status) -> StoreError {
    use StoreError::*;
    let known = [
        Compacted { compacted: 0 },
        FutureRevision,
        EmptyKey,
        KeyNotFound,
        TooManyOps,
        DuplicateKey,
        RequestTooLarge,
        NoSpace,
        Corrupt,
        LeaseNotFound,
        LeaseExists,
        LeaseTtlTooLarge,
        NoLeader,
        Timeout,
        LeaderChanged,
        Stopped,
        PermissionDenied,
        InvalidAuthToken,
        AuthOldRevision,
    ];
    if let Some(e) = known.into_iter().find(|e| e.to_string() == s.message()) {
        return e;
    }
    match s.code() {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
            Unreachable(s.message().to_string())
        }
        tonic::Code::InvalidArgument => Invalid(s.message().to_string()),
        code => Internal(format!("etcd answered {code:?}: {}", s.message())),
    }
}

pub fn kv(kv: PbKeyValue) -> KeyValue {
    KeyValue {
        key: kv.key,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        value: kv.value,
        lease: kv.lease,
    }
}

pub fn range_request(r: &RangeRequest) -> PbRangeRequest {
    PbRangeRequest {
        key: r.key.clone(),
        range_end: r.range_end.clone(),
        limit: r.limit,
        revision: r.revision,
        sort_order: match r.sort_order {
            SortOrder::None => 0,
            SortOrder::Ascend => 1,
            SortOrder::Descend => 2,
        },
        sort_target: match r.sort_target {
            SortTarget::Key => 0,
            SortTarget::Version => 1,
            SortTarget::Create => 2,
            SortTarget::Mod => 3,
            SortTarget::Value => 4,
        },
        serializable: false,
        keys_only: r.keys_only,
        count_only: r.count_only,
        min_mod_revision: r.min_mod_revision,
        max_mod_revision: r.max_mod_revision,
        min_create_revision: r.min_create_revision,
        max_create_revision: r.max_create_revision,
    }
}

fn put_request(p: &PutRequest) -> PbPutRequest {
    PbPutRequest {
        key: p.key.clone(),
        value: p.value.clone(),
        lease: p.lease,
        prev_kv: p.prev_kv,
        ignore_value: p.ignore_value,
        ignore_lease: p.ignore_lease,
    }
}

fn delete_request(d: &DeleteRangeRequest) -> PbDeleteRequest {
    PbDeleteRequest {
        key: d.key.clone(),
        range_end: d.range_end.clone(),
        prev_kv: d.prev_kv,
    }
}

fn compare(c: &Compare) -> PbCompare {
    let (target, union) = match &c.target {
        CompareTarget::Version(v) => (0, PbTargetUnion::Version(*v)),
        CompareTarget::Create(v) => (1, PbTargetUnion::CreateRevision(*v)),
        CompareTarget::Mod(v) => (2, PbTargetUnion::ModRevision(*v)),
        CompareTarget::Value(v) => (3, PbTargetUnion::Value(v.clone())),
        CompareTarget::Lease(v) => (4, PbTargetUnion::Lease(*v)),
    };
    PbCompare {
        result: match c.result {
            CompareResult::Equal => 0,
            CompareResult::Greater => 1,
            CompareResult::Less => 2,
            CompareResult::NotEqual => 3,
        },
        target,
        key: c.key.clone(),
        range_end: c.range_end.clone(),
        target_union: Some(union),
    }
}

fn request_op(op: &RequestOp) -> PbTxnRequestOp {
    PbTxnRequestOp {
        request: Some(match op {
            RequestOp::Range(r) => PbTxnOpRequest::RequestRange(range_request(r)),
            RequestOp::Put(p) => PbTxnOpRequest::RequestPut(put_request(p)),
            RequestOp::DeleteRange(d) => PbTxnOpRequest::RequestDeleteRange(delete_request(d)),
            RequestOp::Txn(t) => PbTxnOpRequest::RequestTxn(txn_request(t)),
        }),
    }
}

pub fn txn_request(t: &TxnRequest) -> PbTxnRequest {
    PbTxnRequest {
        compare: t.compare.iter().map(compare).collect(),
        success: t.success.iter().map(request_op).collect(),
        failure: t.failure.iter().map(request_op).collect(),
    }
}

fn response_op(op: PbResponseOp) -> Result<ResponseOp, StoreError> {
    Ok(match op.response {
        Some(PbTxnOpResponse::ResponseRange(r)) => ResponseOp::Range(RangeResponse {
            kvs: r.kvs.into_iter().map(kv).collect(),
            more: r.more,
            count: r.count,
        }),
        Some(PbTxnOpResponse::ResponsePut(p)) => ResponseOp::Put(PutResponse {
            prev_kv: p.prev_kv.map(kv),
        }),
        Some(PbTxnOpResponse::ResponseDeleteRange(d)) => {
            ResponseOp::DeleteRange(DeleteRangeResponse {
                deleted: d.deleted,
                prev_kvs: d.prev_kvs.into_iter().map(kv).collect(),
            })
        }
        Some(PbTxnOpResponse::ResponseTxn(t)) => ResponseOp::Txn(txn_response(t)?),
        None => return Err(StoreError::internal("etcd answered an empty operation")),
    })
}

pub fn txn_response(t: PbTxnResponse) -> Result<TxnResponse, StoreError> {
    Ok(TxnResponse {
        succeeded: t.succeeded,
        responses: t
            .responses
            .into_iter()
            .map(response_op)
            .collect::<Result<_, _>>()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the server side reads of a request this side wrote is the request.
    #[test]
    fn a_transaction_goes_over_the_wire_and_back_unchanged() {
        let txn = TxnRequest {
            compare: vec![
                Compare {
                    key: b"/a".to_vec(),
                    range_end: Vec::new(),
                    result: CompareResult::Equal,
                    target: CompareTarget::Mod(7),
                },
                Compare {
                    key: b"/b".to_vec(),
                    range_end: b"/c".to_vec(),
                    result: CompareResult::Less,
                    target: CompareTarget::Value(b"v".to_vec()),
                },
            ],
            success: vec![
                RequestOp::Put(PutRequest {
                    key: b"/a".to_vec(),
                    value: b"1".to_vec(),
                    lease: 5,
                    prev_kv: true,
                    ..PutRequest::default()
                }),
                RequestOp::Txn(TxnRequest::single(RequestOp::DeleteRange(
                    DeleteRangeRequest {
                        key: b"/d".to_vec(),
                        range_end: b"/e".to_vec(),
                        prev_kv: true,
                    },
                ))),
            ],
            failure: vec![RequestOp::Range(RangeRequest {
                key: b"/a".to_vec(),
                limit: 3,
                revision: 9,
                sort_order: SortOrder::Descend,
                sort_target: SortTarget::Mod,
                ..RangeRequest::default()
            })],
            auth_revision: None,
        };
        let back = crate::etcd::convert::txn_request(txn_request(&txn), 128).expect("valid");
        assert_eq!(back, txn);
    }
}
