//! The corruption check (etcd's `--experimental-corrupt-check-time`): every period the leader
//! hashes its keyspace at its current revision and asks every other member for the hash at the
//! same revision (`HashKv` on the peer service). Members that applied the same log hash alike;
//! a member whose hash differs while its compaction point is the leader's holds other data than
//! the log says, and the leader raises the CORRUPT alarm for it. Under CORRUPT the keyspace
//! takes no writes until an operator has looked and disarmed it (`etcdctl alarm disarm`).
//!
//! A member that has not applied the revision yet, or has compacted past it, is skipped this
//! round, as etcd skips it.

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use skiff_proto::raft::v1::RaftMessage;

use super::StoreMember;
use crate::backend;
use crate::command::{Alarm, Command, RangeRequest};
use crate::error::StoreError;

/// A member's answer: the hash, the revision hashed, the compaction revision.
type Hashed = Result<(u32, i64, i64), StoreError>;

/// Keys hashed per hold of the read lock, so the apply path waits for one chunk at most.
const HASH_CHUNK: i64 = 10_000;

/// The hash of the keyspace as a read at `revision` (0: the current one) sees it; the
/// revision hashed and the compaction revision then.
pub(crate) fn hash_keyspace(
    member: &StoreMember,
    revision: i64,
) -> Result<(u32, i64, i64), StoreError> {
    let (at, compacted) = {
        let mvcc = member.shared.read();
        let current = mvcc.revision();
        let at = if revision <= 0 { current } else { revision };
        if at > current {
            return Err(StoreError::FutureRevision);
        }
        if at < mvcc.compacted() {
            return Err(StoreError::Compacted {
                compacted: mvcc.compacted(),
            });
        }
        (at, mvcc.compacted())
    };
    let mut hasher = Sha256::new();
    let mut from = vec![0u8];
    loop {
        // Every key from `from` on (`range_end` "\0"), a chunk at a time, all at `at`.
        let chunk = member.shared.read().range(&RangeRequest {
            key: from.clone(),
            range_end: vec![0],
            limit: HASH_CHUNK,
            revision: at,
            ..RangeRequest::default()
        })?;
        for kv in &chunk.kvs {
            hasher.update((kv.key.len() as u64).to_le_bytes());
            hasher.update(&kv.key);
            for n in [kv.create_revision, kv.mod_revision, kv.version, kv.lease] {
                hasher.update(n.to_le_bytes());
            }
            hasher.update((kv.value.len() as u64).to_le_bytes());
            hasher.update(&kv.value);
        }
        match chunk.kvs.last() {
            Some(last) if chunk.more => {
                from = last.key.clone();
                from.push(0);
            }
            _ => break,
        }
    }
    let digest = hasher.finalize();
    let hash = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    Ok((hash, at, compacted))
}

impl StoreMember {
    /// Starts the check every `period` (nothing when `None`); it runs only while this member
    /// leads.
    pub(super) fn spawn_corruption_check(self: &Arc<Self>, period: Option<Duration>) {
        let Some(period) = period.filter(|p| !p.is_zero()) else {
            return;
        };
        let me = Arc::downgrade(self);
        let cancel = self.cancel.clone();
        self.tasks.spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let Some(member) = me.upgrade() else { return };
                if member.is_leader()
                    && let Err(e) = member.check_corruption().await
                {
                    tracing::warn!(error = %e, "corruption check");
                }
            }
        });
    }

    /// One round of the check: the members whose hash differs from this leader's.
    async fn check_corruption(self: &Arc<Self>) -> Result<Vec<u64>, StoreError> {
        let (hash, revision, compacted) = self.hash_kv(0).await?;
        let raised: std::collections::BTreeSet<u64> = self
            .shared
            .read()
            .alarms()
            .into_iter()
            .filter(|(_, a)| *a == Alarm::Corrupt)
            .map(|(m, _)| m)
            .collect();
        let mut corrupt = Vec::new();
        for peer in self.members() {
            if peer.id == self.id || raised.contains(&peer.id) {
                continue;
            }
            let Some(url) = peer.peer_urls.first() else {
                continue;
            };
            let answer = match self.peer_hash(url, revision).await {
                Ok(a) => a,
                Err(e) => {
                    tracing::debug!(peer = %format_args!("{:x}", peer.id), error = %e, "no hash from a member this round");
                    continue;
                }
            };
            match answer {
                Ok((theirs, at, their_compacted))
                    if at == revision && their_compacted == compacted && theirs != hash =>
                {
                    tracing::error!(
                        peer = %format_args!("{:x}", peer.id),
                        revision,
                        leader_hash = hash,
                        peer_hash = theirs,
                        "a member's keyspace differs from the leader's at the same revision: raising CORRUPT"
                    );
                    corrupt.push(peer.id);
                }
                // Another compaction point, or not there yet, or compacted past: next round.
                _ => {}
            }
        }
        for id in &corrupt {
            self.write_local(Command::AlarmActivate {
                member: *id,
                alarm: Alarm::Corrupt,
            })
            .await?;
        }
        self.shared.metrics.corruption_checks.inc();
        Ok(corrupt)
    }

    async fn peer_hash(&self, url: &str, revision: i64) -> Result<Hashed, StoreError> {
        let mut client = self
            .channels
            .peer_client(url)
            .map_err(StoreError::internal)?;
        let mut request = tonic::Request::new(RaftMessage {
            payload: backend::encode(&revision),
        });
        request.set_timeout(Duration::from_secs(30));
        let reply = client
            .hash_kv(request)
            .await
            .map_err(|s| StoreError::Internal(s.message().to_string()))?;
        backend::decode::<Hashed>(&reply.into_inner().payload).map_err(StoreError::internal)
    }
}
