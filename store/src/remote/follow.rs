//! The follower: keeps the mirror of the client's keys in etcd current. It lists the client's
//! ranges at one revision, then watches every key from the next, writing each revision's
//! events on the client's keys into the mirror at that revision. Every revision etcd makes
//! changes some key, so the watch of every key brings the mirror to etcd's revision once the
//! events have come, even where the revision's keys are another client's (they only raise
//! the mirror's revision): progress notifications are not used, see `RemoteKv::caught_up`. A
//! watch that breaks is opened again from the mirror's revision; one whose start etcd has
//! compacted away lists again, replacing the mirror (its watchers then catch up or are told
//! their start is gone, as after a snapshot install).

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use skiff_proto::backoff::Backoff;
use skiff_proto::etcd::{
    PbRangeResponse, PbWatchCreateRequest, PbWatchRequest, PbWatchRequestUnion, PbWatchResponse,
};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::{KeyMap, RemoteConfig, wire};
use crate::compaction::Backlog;
use crate::error::StoreError;
use crate::kv::Header;
use crate::mvcc::{Mirrored, Mvcc};
use crate::raft::state_machine::Shared;
use crate::request::{KeyValue, RangeRequest};
use crate::watch::Tagger;

/// Keys listed per request.
const PAGE: i64 = 1000;
/// How often the mirror's history is compacted to what it keeps.
const COMPACT_EVERY: Duration = Duration::from_secs(30);

/// Opens the mirror's keyspace in `dir`, emptied first: the keyspace and its compaction
/// backlog.
pub(super) fn open_mirror(
    dir: &Path,
    tagger: Option<Tagger>,
) -> anyhow::Result<(Arc<Shared>, Arc<Backlog>)> {
    use anyhow::Context as _;
    if dir.exists() {
        std::fs::remove_dir_all(dir)
            .with_context(|| format!("emptying the mirror's directory {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the mirror's directory {}", dir.display()))?;
    let db = crate::backend::open(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    let mvcc = Mvcc::open(db)?;
    let backlog = mvcc.backlog().clone();
    Ok((Shared::new(mvcc, tagger)?, backlog))
}

pub(super) struct Follower {
    channel: Channel,
    shared: Arc<Shared>,
    keys: KeyMap,
    history: Duration,
    revision: watch::Sender<i64>,
    /// The mirror's revision at past moments, oldest first, for compacting to `history`.
    marks: VecDeque<(Instant, i64)>,
}

impl Follower {
    pub(super) fn new(
        channel: Channel,
        shared: Arc<Shared>,
        config: &RemoteConfig,
        revision: watch::Sender<i64>,
    ) -> Follower {
        Follower {
            channel,
            shared,
            keys: config.keys.clone(),
            history: config.history,
            revision,
            marks: VecDeque::new(),
        }
    }

    /// Lists the client's keys into the mirror, replacing what it held, all at one revision:
    /// the header of the list.
    pub(super) async fn list(&self) -> anyhow::Result<Header> {
        let mut kvs: Vec<KeyValue> = Vec::new();
        let mut at = 0;
        let mut header = None;
        for (key, range_end) in self.keys.etcd_ranges() {
            at = self
                .list_range(key, range_end, at, &mut header, &mut kvs)
                .await?;
        }
        self.shared.mirror_all(at, &kvs)?;
        self.revision.send_replace(at);
        tracing::info!(revision = at, keys = kvs.len(), "mirror of etcd listed");
        header.ok_or_else(|| anyhow::anyhow!("etcd answered no range"))
    }

    /// Lists `[key, range_end)` of etcd at revision `at` (0: now, then set in `header`) into
    /// `kvs`, in the client's names: the revision listed at.
    async fn list_range(
        &self,
        key: Vec<u8>,
        range_end: Vec<u8>,
        mut at: i64,
        header: &mut Option<Header>,
        kvs: &mut Vec<KeyValue>,
    ) -> anyhow::Result<i64> {
        let mut from = key;
        loop {
            let resp: PbRangeResponse = wire::unary(
                &self.channel,
                "/etcdserverpb.KV/Range",
                wire::range_request(&RangeRequest {
                    key: from.clone(),
                    range_end: range_end.clone(),
                    limit: PAGE,
                    revision: at,
                    ..RangeRequest::default()
                }),
            )
            .await
            .map_err(|s| anyhow::anyhow!("listing etcd's keys: {}", s.message()))?;
            if at == 0 {
                let h = resp
                    .header
                    .ok_or_else(|| anyhow::anyhow!("etcd answered a range without a header"))?;
                at = h.revision;
                *header = Some(Header {
                    cluster_id: h.cluster_id,
                    member_id: h.member_id,
                    raft_term: h.raft_term,
                });
            }
            let more = resp.more;
            let next = resp.kvs.last().map(|kv| {
                let mut next = kv.key.clone();
                next.push(0);
                next
            });
            kvs.extend(
                resp.kvs
                    .into_iter()
                    .filter_map(|kv| self.keys.kv_from_etcd(kv))
                    .map(wire::kv),
            );
            match next {
                Some(next) if more => from = next,
                _ => return Ok(at),
            }
        }
    }

    /// Follows etcd until `cancel`: watches, watches again when a watch breaks, lists again
    /// when etcd compacted past the mirror. Never gives up while the process runs.
    pub(super) async fn run(mut self, cancel: CancellationToken) {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let mut compact = tokio::time::interval(COMPACT_EVERY);
        loop {
            let outcome = tokio::select! {
                () = cancel.cancelled() => return,
                o = self.watch(&mut compact) => o,
            };
            match outcome {
                Ok(Ended::Compacted(compacted)) => {
                    tracing::warn!(
                        mirror = *self.revision.borrow(),
                        compacted,
                        "etcd compacted past the mirror's revision: listing again"
                    );
                    if let Err(e) = self.list().await {
                        tracing::warn!(error = %e, "listing etcd again failed");
                        tokio::select! {
                            () = cancel.cancelled() => return,
                            () = backoff.wait() => {}
                        }
                    }
                }
                Ok(Ended::Closed) => backoff.reset(),
                Err(e) => {
                    tracing::warn!(error = %e, "the watch of etcd broke: watching again");
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = backoff.wait() => {}
                    }
                }
            }
        }
    }

    /// One watch of the range, from the mirror's revision on, until it ends.
    async fn watch(&mut self, compact: &mut tokio::time::Interval) -> Result<Ended, tonic::Status> {
        let start = *self.revision.borrow() + 1;
        let (requests, rx) = mpsc::channel::<PbWatchRequest>(4);
        let create = PbWatchRequest {
            // Every key, for its revisions (see the module's comment): from the empty key's
            // successor to the end of the keyspace.
            request_union: Some(PbWatchRequestUnion::CreateRequest(PbWatchCreateRequest {
                key: vec![0],
                range_end: vec![0],
                start_revision: start,
                ..PbWatchCreateRequest::default()
            })),
        };
        requests
            .send(create)
            .await
            .map_err(|_| tonic::Status::internal("watch request queue closed"))?;
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        let mut responses = wire::streaming::<PbWatchRequest, PbWatchResponse>(
            &self.channel,
            "/etcdserverpb.Watch/Watch",
            stream,
        )
        .await?;
        loop {
            tokio::select! {
                msg = responses.message() => {
                    let Some(resp) = msg? else { return Ok(Ended::Closed) };
                    if resp.compact_revision > 0 {
                        return Ok(Ended::Compacted(resp.compact_revision));
                    }
                    if resp.canceled {
                        return Err(tonic::Status::aborted(format!(
                            "etcd cancelled the watch: {}", resp.cancel_reason
                        )));
                    }
                    if resp.created {
                        continue;
                    }
                    self.apply(resp).map_err(|e| tonic::Status::internal(e.to_string()))?;
                }
                _ = compact.tick() => self.compact(),
            }
        }
    }

    /// Writes a watch response into the mirror: each revision's events on the client's keys
    /// at that revision, and its last revision, if only others' keys changed then.
    fn apply(&mut self, resp: PbWatchResponse) -> Result<(), StoreError> {
        let mut changes: Vec<Mirrored> = Vec::new();
        let mut at = 0;
        let mut last = 0;
        for e in resp.events {
            let Some(kv) = e.kv else { continue };
            last = last.max(kv.mod_revision);
            let Some(kv) = self.keys.kv_from_etcd(kv) else {
                continue;
            };
            if kv.mod_revision != at && !changes.is_empty() {
                self.shared.mirror(at, &std::mem::take(&mut changes))?;
            }
            at = kv.mod_revision;
            // mvccpb.Event.EventType: PUT 0, DELETE 1.
            changes.push(if e.r#type == 1 {
                Mirrored::Delete { key: kv.key }
            } else {
                Mirrored::Put {
                    key: kv.key,
                    value: kv.value,
                    lease: kv.lease,
                }
            });
        }
        if !changes.is_empty() {
            self.shared.mirror(at, &changes)?;
        }
        if last > self.shared.read().revision() {
            self.shared.mirror(last, &[])?;
        }
        self.revision.send_replace(self.shared.read().revision());
        Ok(())
    }

    /// Compacts the mirror to the revision it had `history` ago.
    fn compact(&mut self) {
        let now = Instant::now();
        self.marks.push_back((now, *self.revision.borrow()));
        let mut to = None;
        while let Some(&(at, rev)) = self.marks.front() {
            if now.duration_since(at) < self.history {
                break;
            }
            to = Some(rev);
            self.marks.pop_front();
        }
        if let Some(rev) = to
            && let Err(e) = self.shared.compact_mirror(rev)
        {
            tracing::warn!(error = %e, revision = rev, "compacting the mirror failed");
        }
    }
}

/// How a watch of etcd ended without an error.
enum Ended {
    /// etcd compacted past where it would start, to this revision.
    Compacted(i64),
    /// The stream closed.
    Closed,
}
