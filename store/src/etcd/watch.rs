//! The Watch service: one bidirectional stream carries many watchers.
//!
//! The stream's watchers share one queue in the watch hub; control messages (created,
//! canceled) go through the same queue, so a watcher's `created` response always precedes its
//! first event, and events of every watcher leave in the order they were queued.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use skiff_proto::etcd::{PbWatchRequest, PbWatchRequestUnion, PbWatchResponse, PbWatchService};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::{convert, header};
use crate::member::StoreMember;
use crate::watch::{WatchMessage, WatchSpec};

/// Messages a stream's queue holds before its watchers are parked and caught up from disk.
const STREAM_QUEUE: usize = 1024;

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

type WatchStream = Pin<Box<dyn Stream<Item = Result<PbWatchResponse, Status>> + Send>>;

fn to_response(member: &StoreMember, msg: WatchMessage) -> PbWatchResponse {
    let mut r = PbWatchResponse::default();
    match msg {
        WatchMessage::Created { watch_id, revision } => {
            r.header = header(member, revision);
            r.watch_id = watch_id;
            r.created = true;
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
        } => {
            r.header = header(member, revision);
            r.watch_id = watch_id;
            r.events = events.into_iter().map(convert::event).collect();
        }
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
    r
}

#[tonic::async_trait]
impl PbWatchService for WatchService {
    type WatchStream = WatchStream;

    async fn watch(
        &self,
        req: Request<Streaming<PbWatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let mut input = req.into_inner();
        let member = self.member.clone();
        let hub = member.shared.hub.clone();
        let (stream_id, tx, rx) = hub.open_stream(STREAM_QUEUE);
        let progress_interval = self.progress_interval;
        let reader_member = member.clone();
        tokio::spawn(async move {
            let member = reader_member;
            let mut next_auto = 0i64;
            let mut progress_ids: HashSet<i64> = HashSet::new();
            let mut ticker = tokio::time::interval(progress_interval);
            ticker.tick().await;
            loop {
                let msg = tokio::select! {
                    m = input.next() => m,
                    _ = ticker.tick() => {
                        if !progress_ids.is_empty() {
                            let ids: Vec<i64> = progress_ids.iter().copied().collect();
                            hub.notify_progress(&member.shared.read(), stream_id, &ids);
                        }
                        continue;
                    }
                };
                let Some(Ok(msg)) = msg else { break };
                match msg.request_union {
                    Some(PbWatchRequestUnion::CreateRequest(c)) => {
                        let watch_id = if c.watch_id == 0 {
                            while hub.has(stream_id, next_auto) {
                                next_auto += 1;
                            }
                            next_auto += 1;
                            next_auto - 1
                        } else {
                            c.watch_id
                        };
                        let Ok(permit) = tx.reserve().await else {
                            break;
                        };
                        if c.key.is_empty() || hub.has(stream_id, watch_id) {
                            let reason = if c.key.is_empty() {
                                "etcdserver: key is not provided"
                            } else {
                                "etcdserver: mvcc: duplicate watch ID"
                            };
                            // etcd reports a refused create as created and canceled at once.
                            permit.send(WatchMessage::Created {
                                watch_id,
                                revision: member.shared.read().revision(),
                            });
                            let _ = tx
                                .send(WatchMessage::Canceled {
                                    watch_id,
                                    reason: reason.into(),
                                })
                                .await;
                            continue;
                        }
                        if c.progress_notify {
                            progress_ids.insert(watch_id);
                        }
                        let spec = WatchSpec {
                            key: c.key,
                            range_end: c.range_end,
                            start_revision: c.start_revision,
                            prev_kv: c.prev_kv,
                            no_put: c.filters.contains(&0),
                            no_delete: c.filters.contains(&1),
                            tag: None,
                        };
                        let mvcc = member.shared.read();
                        permit.send(WatchMessage::Created {
                            watch_id,
                            revision: mvcc.revision(),
                        });
                        hub.add(&mvcc, stream_id, watch_id, spec);
                    }
                    Some(PbWatchRequestUnion::CancelRequest(c)) => {
                        progress_ids.remove(&c.watch_id);
                        if hub.cancel(stream_id, c.watch_id) {
                            let msg = WatchMessage::Canceled {
                                watch_id: c.watch_id,
                                reason: String::new(),
                            };
                            if tx.send(msg).await.is_err() {
                                break;
                            }
                        }
                    }
                    Some(PbWatchRequestUnion::ProgressRequest(_)) => {
                        hub.request_progress(&member.shared.read(), stream_id);
                    }
                    None => {}
                }
            }
            hub.close_stream(stream_id);
        });
        let out = ReceiverStream::new(rx).map(move |msg| Ok(to_response(&member, msg)));
        Ok(Response::new(Box::pin(out)))
    }
}
