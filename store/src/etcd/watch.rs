//! The Watch service: one bidirectional stream carries many watchers.
//!
//! The stream's watchers share one queue in the watch hub; control messages (created,
//! canceled) go through the same queue, so a watcher's `created` response always precedes its
//! first event, and events of every watcher leave in the order they were queued.
//!
//! Fan-out is where watch costs add up: a put under a prefix that 10,000 watchers watch is
//! 10,000 responses. Each response differs only in its header and watch id, so the events are
//! encoded to protobuf once per revision ([`WatchEvents::encoded`]) and every response
//! carries those bytes as they are ([`WatchOut`]). That needs a response type of our own, so
//! the service is served by [`WatchServer`] here rather than the generated one; the bytes on
//! the wire are exactly etcd's `WatchResponse`.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use prost::Message;
use prost::bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::encoding::{DecodeContext, WireType};
use skiff_proto::etcd::{PbResponseHeader, PbWatchRequest, PbWatchResponse};
use tokio::sync::oneshot;
use tonic::codegen::{BoxFuture, Context, Poll, Service, StdError, http};
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::{Request, Response, Status, Streaming};

use super::convert::{self, WatchRequest};
use super::header;
use crate::auth::Access;
use crate::command::Event;
use crate::member::StoreMember;
use crate::tls::ConnInfo;
use crate::watch::{Encoded, WatchEvents, WatchMessage};

/// Messages a stream's queue holds before its watchers are parked and caught up from disk.
/// One revision under a prefix that a stream's watchers share is one message per watcher, so
/// the queue holds several revisions for a stream carrying thousands of watchers; a parked
/// watcher costs a read from the backend to catch up, far more than a queued message. The
/// queue's blocks are allocated as it fills, so an idle stream costs no more for it.
const STREAM_QUEUE: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct WatchService {
    member: Arc<StoreMember>,
    progress_interval: Duration,
}

impl WatchService {
    pub fn new(member: Arc<StoreMember>, progress_interval: Duration) -> Self {
        WatchService {
            member,
            progress_interval,
        }
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchOut, Status>> + Send>>;

/// etcd's `WatchResponse` on the wire: either a message built field by field, or a watcher's
/// events with their encoding shared across watchers (field 11, `repeated mvccpb.Event`,
/// already encoded, tags included).
#[derive(Debug, Clone, PartialEq)]
pub enum WatchOut {
    Message(PbWatchResponse),
    Events {
        header: PbResponseHeader,
        watch_id: i64,
        events: Bytes,
    },
}

impl Default for WatchOut {
    fn default() -> Self {
        WatchOut::Message(PbWatchResponse::default())
    }
}

/// `WatchResponse.events`.
const EVENTS_FIELD: u32 = 11;

/// Encodes `events` as `WatchResponse.events` entries, one after another.
pub fn encode_events(events: &[Event], prev_kv: bool) -> Encoded {
    let mut buf = BytesMut::new();
    let mut ends = Vec::with_capacity(events.len());
    for e in events {
        let mut e = e.clone();
        if !prev_kv {
            e.prev_kv = None;
        }
        prost::encoding::message::encode(EVENTS_FIELD, &convert::event(e), &mut buf);
        ends.push(buf.len());
    }
    Encoded {
        buf: buf.freeze(),
        ends,
    }
}

impl WatchOut {
    /// The same response as a plain message (decodes the shared event bytes).
    pub fn into_message(self) -> Result<PbWatchResponse, prost::DecodeError> {
        match self {
            WatchOut::Message(m) => Ok(m),
            WatchOut::Events {
                header,
                watch_id,
                events,
            } => {
                let mut m = PbWatchResponse::decode(events)?;
                m.header = Some(header);
                m.watch_id = watch_id;
                Ok(m)
            }
        }
    }
}

impl Message for WatchOut {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        match self {
            WatchOut::Message(m) => m.encode_raw(buf),
            WatchOut::Events {
                header,
                watch_id,
                events,
            } => {
                // Field order as prost writes a WatchResponse: 1, 2, then 11.
                prost::encoding::message::encode(1, header, buf);
                if *watch_id != 0 {
                    prost::encoding::int64::encode(2, watch_id, buf);
                }
                buf.put_slice(events);
            }
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        if let WatchOut::Events { .. } = self {
            let m = std::mem::take(self).into_message()?;
            *self = WatchOut::Message(m);
        }
        match self {
            WatchOut::Message(m) => m.merge_field(tag, wire_type, buf, ctx),
            WatchOut::Events { .. } => unreachable!("converted to a message above"),
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            WatchOut::Message(m) => m.encoded_len(),
            WatchOut::Events {
                header,
                watch_id,
                events,
            } => {
                prost::encoding::message::encoded_len(1, header)
                    + if *watch_id != 0 {
                        prost::encoding::int64::encoded_len(2, watch_id)
                    } else {
                        0
                    }
                    + events.len()
            }
        }
    }

    fn clear(&mut self) {
        *self = WatchOut::default();
    }
}

fn events_out(
    member: &StoreMember,
    watch_id: i64,
    revision: i64,
    events: &WatchEvents,
) -> WatchOut {
    WatchOut::Events {
        header: header(member, revision).unwrap_or_default(),
        watch_id,
        events: events.encoded(encode_events),
    }
}

fn to_response(member: &StoreMember, msg: WatchMessage) -> WatchOut {
    let mut r = PbWatchResponse::default();
    match msg {
        WatchMessage::Created { watch_id, revision } => {
            r.header = header(member, revision);
            r.watch_id = watch_id;
            r.created = true;
        }
        WatchMessage::Refused {
            watch_id,
            revision,
            reason,
        } => {
            r.header = header(member, revision);
            r.watch_id = watch_id;
            r.created = true;
            r.canceled = true;
            r.cancel_reason = reason;
        }
        WatchMessage::Canceled { watch_id, reason } => {
            r.header = header(member, member.shared.read().revision());
            r.watch_id = watch_id;
            r.canceled = true;
            r.cancel_reason = reason;
        }
        WatchMessage::Events {
            watch_id,
            revision,
            events,
        } => return events_out(member, watch_id, revision, &events),
        WatchMessage::Compacted {
            watch_id,
            compact_revision,
        } => {
            r.header = header(member, member.shared.read().revision());
            r.watch_id = watch_id;
            r.compact_revision = compact_revision;
            r.canceled = true;
            r.cancel_reason = "etcdserver: mvcc: required revision has been compacted".into();
        }
        WatchMessage::Progress { watch_id, revision } => {
            r.header = header(member, revision);
            r.watch_id = watch_id;
        }
    }
    WatchOut::Message(r)
}

/// Serves `etcdserverpb.Watch` with [`WatchOut`] responses.
#[derive(Debug, Clone)]
pub struct WatchServer {
    service: WatchService,
    max_decoding_message_size: usize,
}

impl WatchServer {
    pub fn new(service: WatchService, max_decoding_message_size: usize) -> Self {
        WatchServer {
            service,
            max_decoding_message_size,
        }
    }
}

impl NamedService for WatchServer {
    const NAME: &'static str = "etcdserverpb.Watch";
}

impl StreamingService<PbWatchRequest> for WatchService {
    type Response = WatchOut;
    type ResponseStream = WatchStream;
    type Future = BoxFuture<Response<WatchStream>, Status>;

    fn call(&mut self, request: Request<Streaming<PbWatchRequest>>) -> Self::Future {
        let service = self.clone();
        Box::pin(async move { service.watch(request).await })
    }
}

impl<B> Service<http::Request<B>> for WatchServer
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let service = self.service.clone();
        let limit = self.max_decoding_message_size;
        Box::pin(async move {
            if req.uri().path() != "/etcdserverpb.Watch/Watch" {
                return Ok(Status::unimplemented("unknown method").into_http());
            }
            let codec = tonic_prost::ProstCodec::<WatchOut, PbWatchRequest>::default();
            let mut grpc = Grpc::new(codec).apply_max_message_size_config(Some(limit), None);
            Ok(grpc.streaming(service, req).await)
        })
    }
}

impl WatchService {
    async fn watch(
        &self,
        req: Request<Streaming<PbWatchRequest>>,
    ) -> Result<Response<WatchStream>, Status> {
        // Each watch is checked when it is created, against who opened the stream then (a
        // token may expire, or a permission go, while the stream stays open).
        let metadata = req.metadata().clone();
        let conn = req.extensions().get::<ConnInfo>().cloned();
        let mut input = req.into_inner();
        let member = self.member.clone();
        let hub = member.shared.hub.clone();
        let (stream_id, tx, rx) = hub.open_stream(STREAM_QUEUE);
        let progress_interval = self.progress_interval;
        let reader_member = member.clone();
        // A request stream that fails (a message that does not decode) ends the call with
        // its status, after what was already queued.
        let (failed_tx, failed_rx) = oneshot::channel::<Status>();
        tokio::spawn(async move {
            let member = reader_member;
            let mut progress_ids: HashSet<i64> = HashSet::new();
            let mut ticker = tokio::time::interval(progress_interval);
            ticker.tick().await;
            let mut reading = true;
            loop {
                let msg = tokio::select! {
                    m = input.next(), if reading => m,
                    _ = ticker.tick() => {
                        if !progress_ids.is_empty() {
                            let ids: Vec<i64> = progress_ids.iter().copied().collect();
                            hub.notify_progress(&member.shared.read(), stream_id, &ids);
                        }
                        continue;
                    }
                    // The client is gone: the response stream was dropped.
                    _ = tx.closed() => break,
                };
                let msg = match msg {
                    Some(Ok(msg)) => msg,
                    // Half-closed: the client sends nothing more, but its watches go on until
                    // it cancels the call, as etcd's do.
                    None => {
                        reading = false;
                        continue;
                    }
                    Some(Err(status)) => {
                        let status = super::as_grpc_go(&status).unwrap_or(status);
                        let _ = failed_tx.send(status);
                        break;
                    }
                };
                let Some(request) = msg.request_union else {
                    continue;
                };
                match convert::watch_request(request) {
                    WatchRequest::Create {
                        watch_id,
                        progress_notify,
                        spec,
                    } => {
                        let allowed = match member.caller(&metadata, conn.as_ref()).await {
                            Ok(who) => {
                                member.check_access(&who, Access::Read, &spec.key, &spec.range_end)
                            }
                            Err(e) => Err(e),
                        };
                        let Ok(permit) = tx.reserve().await else {
                            break;
                        };
                        if let Err(e) = allowed {
                            // etcd's answer: created and canceled at once, with no watch ID.
                            permit.send(WatchMessage::Refused {
                                watch_id: -1,
                                revision: member.shared.read().revision(),
                                reason: e.to_string(),
                            });
                            continue;
                        }
                        let mvcc = member.shared.read();
                        // The hub queues `created`, or the refusal (created and canceled in
                        // one response, as etcd answers it), before any event.
                        if let Ok(watch_id) =
                            hub.add(&mvcc, stream_id, watch_id, spec, Some(permit))
                            && progress_notify
                        {
                            progress_ids.insert(watch_id);
                        }
                    }
                    WatchRequest::Cancel { watch_id } => {
                        progress_ids.remove(&watch_id);
                        if hub.cancel(stream_id, watch_id) {
                            let msg = WatchMessage::Canceled {
                                watch_id,
                                reason: String::new(),
                            };
                            if tx.send(msg).await.is_err() {
                                break;
                            }
                        }
                    }
                    WatchRequest::Progress => {
                        hub.request_progress(&member.shared.read(), stream_id);
                    }
                }
            }
            hub.close_stream(stream_id);
        });
        let failed =
            futures::stream::once(failed_rx).filter_map(|r| async move { r.ok().map(Err) });
        let out = rx
            .map(move |msg| Ok(to_response(&member, msg)))
            .chain(failed);
        Ok(Response::new(Box::pin(out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{EventKind, KeyValue};

    fn kv(key: &str, value: &str, rev: i64) -> KeyValue {
        KeyValue {
            key: key.into(),
            create_revision: 2,
            mod_revision: rev,
            version: rev - 1,
            value: value.into(),
            lease: 0,
        }
    }

    /// The shared-bytes response is byte for byte the response prost writes for the same
    /// fields, and decodes back to it.
    #[test]
    fn shared_event_bytes_are_exactly_a_watch_response() {
        let events = vec![
            Event {
                kind: EventKind::Put,
                kv: kv("a", "1", 7),
                prev_kv: Some(kv("a", "0", 6)),
            },
            Event {
                kind: EventKind::Delete,
                kv: kv("b", "", 7),
                prev_kv: Some(kv("b", "x", 5)),
            },
            Event {
                kind: EventKind::Put,
                kv: kv("c", &"v".repeat(300), 7),
                prev_kv: None,
            },
        ];
        let header = PbResponseHeader {
            cluster_id: 11,
            member_id: 12,
            revision: 7,
            raft_term: 3,
        };
        for prev_kv in [false, true] {
            for watch_id in [0, 1, 1 << 40] {
                let out = WatchOut::Events {
                    header,
                    watch_id,
                    events: WatchEvents::new(events.clone(), prev_kv).encoded(encode_events),
                };
                let plain = PbWatchResponse {
                    header: Some(header),
                    watch_id,
                    events: events
                        .iter()
                        .cloned()
                        .map(|mut e| {
                            if !prev_kv {
                                e.prev_kv = None;
                            }
                            convert::event(e)
                        })
                        .collect(),
                    ..PbWatchResponse::default()
                };
                let bytes = out.encode_to_vec();
                assert_eq!(
                    bytes,
                    plain.encode_to_vec(),
                    "prev_kv {prev_kv} id {watch_id}"
                );
                assert_eq!(out.encoded_len(), bytes.len());
                assert_eq!(PbWatchResponse::decode(&bytes[..]).unwrap(), plain);
                assert_eq!(
                    WatchOut::decode(&bytes[..]).unwrap(),
                    WatchOut::Message(plain.clone())
                );
                assert_eq!(out.into_message().unwrap(), plain);
            }
        }
    }
}
