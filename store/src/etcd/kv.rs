//! The KV service: Range, Put, DeleteRange, Txn and Compact.

use std::sync::Arc;

use prost::Message;
use skiff_proto::etcd::{
    PbCompactionRequest, PbCompactionResponse, PbDeleteRequest, PbDeleteResponse, PbKvService,
    PbPutRequest, PbPutResponse, PbRangeRequest, PbRangeResponse, PbRangeStreamResponse,
    PbTxnRequest, PbTxnResponse,
};
use tonic::{Request, Response, Status};

use super::{caller, convert, header};
use crate::auth::{Access, Caller};
use crate::command::{Command, Outcome, RequestOp, ResponseOp, TxnRequest, TxnResponse};
use crate::error::StoreError;
use crate::member::StoreMember;

#[derive(Debug, Clone)]
pub struct KvService {
    member: Arc<StoreMember>,
}

impl KvService {
    pub fn new(member: Arc<StoreMember>) -> Self {
        KvService { member }
    }

    fn check_size(&self, encoded_len: usize) -> Result<(), StoreError> {
        if encoded_len > self.member.config.max_request_bytes {
            return Err(StoreError::RequestTooLarge);
        }
        Ok(())
    }

    /// Runs `txn` for `who`, once it may (see [`StoreMember::authorize_txn`]).
    async fn txn(
        &self,
        who: &Caller,
        mut txn: TxnRequest,
    ) -> Result<(i64, TxnResponse), StoreError> {
        self.member.authorize_txn(who, &mut txn)?;
        let resp = self.member.propose(Command::Txn(txn)).await?;
        match resp.result? {
            Outcome::Txn(t) => Ok((resp.revision, t)),
            other => Err(StoreError::internal(format!(
                "unexpected outcome {other:?}"
            ))),
        }
    }

    async fn single(&self, who: &Caller, op: RequestOp) -> Result<(i64, ResponseOp), StoreError> {
        let (rev, mut t) = self.txn(who, TxnRequest::single(op)).await?;
        let op = t
            .responses
            .pop()
            .ok_or_else(|| StoreError::internal("empty txn response"))?;
        Ok((rev, op))
    }
}

/// Keys per message of a streamed range.
const RANGE_STREAM_CHUNK: usize = 1000;

type RangeStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<PbRangeStreamResponse, Status>> + Send>>;

impl KvService {
    async fn read(&self, req: Request<PbRangeRequest>) -> Result<PbRangeResponse, Status> {
        let who = caller(&self.member, &req).await?;
        let req = req.into_inner();
        let serializable = req.serializable;
        let range = convert::range_request(req)?;
        self.member
            .check_access(&who, Access::Read, &range.key, &range.range_end)?;
        if !serializable {
            self.member.linearizable_barrier().await?;
        }
        let (revision, resp) = {
            let mvcc = self.member.shared.read();
            (mvcc.revision(), mvcc.range(&range))
        };
        let mut out = convert::range_response(resp?);
        out.header = header(&self.member, revision);
        Ok(out)
    }
}

#[tonic::async_trait]
impl PbKvService for KvService {
    async fn range(
        &self,
        req: Request<PbRangeRequest>,
    ) -> Result<Response<PbRangeResponse>, Status> {
        self.read(req).await.map(Response::new)
    }

    type RangeStreamStream = RangeStream;

    /// The same read as Range, sent in pieces: the first carries the header and count, the
    /// last the `more` flag.
    async fn range_stream(
        &self,
        req: Request<PbRangeRequest>,
    ) -> Result<Response<Self::RangeStreamStream>, Status> {
        let full = self.read(req).await?;
        let mut parts = Vec::new();
        let mut kvs = full.kvs.into_iter().peekable();
        let mut first = true;
        loop {
            let chunk: Vec<_> = kvs.by_ref().take(RANGE_STREAM_CHUNK).collect();
            let last = kvs.peek().is_none();
            parts.push(Ok(PbRangeStreamResponse {
                range_response: Some(PbRangeResponse {
                    header: if first { full.header } else { None },
                    kvs: chunk,
                    more: last && full.more,
                    count: if first { full.count } else { 0 },
                }),
            }));
            first = false;
            if last {
                break;
            }
        }
        Ok(Response::new(Box::pin(futures::stream::iter(parts))))
    }

    async fn put(&self, req: Request<PbPutRequest>) -> Result<Response<PbPutResponse>, Status> {
        let who = caller(&self.member, &req).await?;
        let req = req.into_inner();
        self.check_size(req.encoded_len())?;
        let put = convert::put_request(req)?;
        let (rev, op) = self.single(&who, RequestOp::Put(put)).await?;
        let ResponseOp::Put(p) = op else {
            return Err(StoreError::internal("put answered with another op").into());
        };
        let mut out = convert::put_response(p);
        out.header = header(&self.member, rev);
        Ok(Response::new(out))
    }

    async fn delete_range(
        &self,
        req: Request<PbDeleteRequest>,
    ) -> Result<Response<PbDeleteResponse>, Status> {
        let who = caller(&self.member, &req).await?;
        let req = req.into_inner();
        self.check_size(req.encoded_len())?;
        let del = convert::delete_request(req)?;
        let (rev, op) = self.single(&who, RequestOp::DeleteRange(del)).await?;
        let ResponseOp::DeleteRange(d) = op else {
            return Err(StoreError::internal("delete answered with another op").into());
        };
        let mut out = convert::delete_response(d);
        out.header = header(&self.member, rev);
        Ok(Response::new(out))
    }

    async fn txn(&self, req: Request<PbTxnRequest>) -> Result<Response<PbTxnResponse>, Status> {
        let who = caller(&self.member, &req).await?;
        let req = req.into_inner();
        self.check_size(req.encoded_len())?;
        let txn = convert::txn_request(req, self.member.config.max_txn_ops)?;
        let (rev, t) = KvService::txn(self, &who, txn).await?;
        let mut out = convert::txn_response(t);
        out.header = header(&self.member, rev);
        Ok(Response::new(out))
    }

    async fn compact(
        &self,
        req: Request<PbCompactionRequest>,
    ) -> Result<Response<PbCompactionResponse>, Status> {
        // Any user may compact, as in etcd: kube-apiserver does, rarely as root.
        caller(&self.member, &req).await?;
        let req = req.into_inner();
        let resp = self
            .member
            .propose(Command::Compact {
                revision: req.revision,
            })
            .await?;
        resp.result?;
        if req.physical {
            // etcd's `physical`: answer once the compacted versions are gone from this
            // member's backend, not only from its index (the deletion runs in the background).
            let backlog = self.member.compaction_backlog();
            while backlog.pending() > 0 && !backlog.failing() {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
        Ok(Response::new(PbCompactionResponse {
            header: header(&self.member, resp.revision),
        }))
    }
}
