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

use skiff_proto::raft::v1::RaftMessage;

use super::StoreMember;
use crate::backend;
use crate::command::{Alarm, Command};
use crate::error::StoreError;

/// A member's answer: the hash, the revision hashed, the compaction revision.
type Hashed = Result<(u32, i64, i64), StoreError>;

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
