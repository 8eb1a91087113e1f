//! etcd's KV and Watch services passed on to the etcd of a [`RemoteKv`], each key moved by its
//! [`KeyMap`] on the way there and back, as etcd's `grpc-proxy --namespace` does for one
//! prefix: a client of the process (the API server's components, holding their leader leases;
//! `etcdctl`) sees the process's keys where the process itself sees them, and no others.
//! Compact is passed on too, and the mirror compacted with it. The calls carry the client's
//! etcd credentials ([`wire::credentials`]), so etcd's own authentication decides.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use skiff_proto::etcd::{
    PbCompactionRequest, PbCompactionResponse, PbDeleteRequest, PbDeleteResponse, PbKvService,
    PbPutRequest, PbPutResponse, PbRangeRequest, PbRangeResponse, PbRangeStreamResponse,
    PbTxnRequest, PbTxnResponse, PbWatchRequest, PbWatchResponse, PbWatchService,
};
use tonic::{Request, Response, Status, Streaming};

use super::{KeyMap, RemoteKv, wire};
use crate::error::StoreError;

/// etcd's KV service, over a [`RemoteKv`]'s etcd.
#[derive(Debug, Clone)]
pub struct NamespacedKv {
    kv: Arc<RemoteKv>,
}

impl NamespacedKv {
    pub fn new(kv: Arc<RemoteKv>) -> NamespacedKv {
        NamespacedKv { kv }
    }

    /// One unary call passed on to etcd at `path`, with the caller's credentials: the
    /// request's keys moved there by `to`, the answer's moved back by `from`.
    async fn pass<Req, Resp>(
        &self,
        path: &'static str,
        req: Request<Req>,
        to: impl FnOnce(&KeyMap, &mut Req) -> Result<(), StoreError>,
        from: impl FnOnce(&KeyMap, &mut Resp),
    ) -> Result<Resp, Status>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let metadata = wire::credentials(req.metadata());
        let mut r = req.into_inner();
        to(self.kv.keys(), &mut r)?;
        let mut resp: Resp = wire::unary_as(self.kv.channel(), path, metadata, r).await?;
        from(self.kv.keys(), &mut resp);
        Ok(resp)
    }

    async fn read(&self, req: Request<PbRangeRequest>) -> Result<PbRangeResponse, Status> {
        self.pass(
            "/etcdserverpb.KV/Range",
            req,
            KeyMap::range_request_to_etcd,
            KeyMap::range_response_from_etcd,
        )
        .await
    }
}

type RangeStream = Pin<Box<dyn Stream<Item = Result<PbRangeStreamResponse, Status>> + Send>>;

#[tonic::async_trait]
impl PbKvService for NamespacedKv {
    async fn range(
        &self,
        req: Request<PbRangeRequest>,
    ) -> Result<Response<PbRangeResponse>, Status> {
        self.read(req).await.map(Response::new)
    }

    type RangeStreamStream = RangeStream;

    /// Range, answered in one piece (etcd 3.4 and 3.5 have no RangeStream to pass it to).
    async fn range_stream(
        &self,
        req: Request<PbRangeRequest>,
    ) -> Result<Response<Self::RangeStreamStream>, Status> {
        let full = self.read(req).await?;
        let one = PbRangeStreamResponse {
            range_response: Some(full),
        };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(one)]))))
    }

    async fn put(&self, req: Request<PbPutRequest>) -> Result<Response<PbPutResponse>, Status> {
        self.pass(
            "/etcdserverpb.KV/Put",
            req,
            KeyMap::put_request_to_etcd,
            KeyMap::put_response_from_etcd,
        )
        .await
        .map(Response::new)
    }

    async fn delete_range(
        &self,
        req: Request<PbDeleteRequest>,
    ) -> Result<Response<PbDeleteResponse>, Status> {
        self.pass(
            "/etcdserverpb.KV/DeleteRange",
            req,
            KeyMap::delete_request_to_etcd,
            KeyMap::delete_response_from_etcd,
        )
        .await
        .map(Response::new)
    }

    async fn txn(&self, req: Request<PbTxnRequest>) -> Result<Response<PbTxnResponse>, Status> {
        self.pass(
            "/etcdserverpb.KV/Txn",
            req,
            KeyMap::txn_request_to_etcd,
            KeyMap::txn_response_from_etcd,
        )
        .await
        .map(Response::new)
    }

    /// Compacts etcd (every client's history: etcd has one), then the mirror to the same
    /// revision, so a watch from before it is told its start is gone, as etcd would tell it.
    async fn compact(
        &self,
        req: Request<PbCompactionRequest>,
    ) -> Result<Response<PbCompactionResponse>, Status> {
        let metadata = wire::credentials(req.metadata());
        let c = req.into_inner();
        let revision = c.revision;
        let resp: PbCompactionResponse =
            wire::unary_as(self.kv.channel(), "/etcdserverpb.KV/Compact", metadata, c).await?;
        self.kv.compacted(revision).await?;
        Ok(Response::new(resp))
    }
}

/// etcd's Watch service, over a [`RemoteKv`]'s etcd: each watch created moves to etcd's
/// keys, each event comes back in the client's. A watch of keys outside the map ends the
/// stream with the error that names them.
#[derive(Debug, Clone)]
pub struct NamespacedWatch {
    kv: Arc<RemoteKv>,
}

impl NamespacedWatch {
    pub fn new(kv: Arc<RemoteKv>) -> NamespacedWatch {
        NamespacedWatch { kv }
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<PbWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl PbWatchService for NamespacedWatch {
    type WatchStream = WatchStream;

    async fn watch(
        &self,
        req: Request<Streaming<PbWatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let metadata = wire::credentials(req.metadata());
        let inbound = req.into_inner();
        let (refused_tx, refused_rx) = tokio::sync::oneshot::channel::<Status>();
        let keys = self.kv.keys().clone();
        // The client's requests, moved, until one cannot be (then the refusal ends the
        // answers) or the client stops sending.
        let requests = inbound.scan(Some(refused_tx), move |refused, r| {
            let next = match r {
                Ok(mut r) => match keys.watch_request_to_etcd(&mut r) {
                    Ok(()) => Some(r),
                    Err(e) => {
                        if let Some(tx) = refused.take() {
                            let _ = tx.send(Status::from(e));
                        }
                        None
                    }
                },
                Err(_) => None,
            };
            futures::future::ready(next)
        });
        let responses: Streaming<PbWatchResponse> = wire::streaming_as(
            self.kv.channel(),
            "/etcdserverpb.Watch/Watch",
            metadata,
            requests,
        )
        .await?;
        let keys = self.kv.keys().clone();
        let answers = responses.map(move |r| {
            r.map(|mut w| {
                keys.watch_response_from_etcd(&mut w);
                w
            })
        });
        let refusal = futures::stream::once(refused_rx)
            .filter_map(|r| futures::future::ready(r.ok().map(Err)));
        Ok(Response::new(Box::pin(futures::stream::select(
            answers, refusal,
        ))))
    }
}
