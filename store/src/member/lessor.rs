//! Lease deadlines and their clock, as etcd's `lease/lessor.go` keeps them.
//!
//! Leases themselves (id, TTL, attached keys) are replicated state in the keyspace; their
//! deadlines are not. Only the leader keeps them: a new leader gives every lease a full TTL from
//! the moment it takes over (as etcd does), so a leader change can only lengthen a lease, never
//! cut one short. Expired leases are revoked through the log ([`Command::LeaseExpire`]).
//!
//! A lease nobody keeps alive (kube-apiserver's event leases: a minute of events each) would
//! then outlive its TTL by a full TTL at every takeover, and never expire under leaders that
//! change more often than its TTL. So, as etcd's lease checkpoints do, the leader records in
//! the log ([`Command::LeaseCheckpoint`]) the seconds left of every lease not renewed for a
//! whole `--lease-checkpoint-interval` ([`CHECKPOINT_INTERVAL`]), once an interval; a new leader starts such a lease's clock from what was
//! left. A keep-alive of a checkpointed lease clears the checkpoint through the log before it
//! answers, so a lease that is renewed never starts a new term short.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::StoreMember;
use super::forward::{KeepAlive, TimeToLive, Ttl};
use crate::command::Command;
use crate::error::StoreError;

/// The leader's lease deadlines.
#[derive(Debug, Default)]
pub(super) struct Lessor {
    deadlines: HashMap<i64, Instant>,
    /// The term whose leadership set these deadlines. A member that loses and wins again
    /// between two ticks must not carry the old term's deadlines over.
    term: Option<u64>,
    /// Leases this leader has proposed a checkpoint for, not renewed since.
    checkpointed: HashSet<i64>,
    /// When this leader last proposed checkpoints.
    last_checkpoint: Option<Instant>,
}

/// How often the leader checkpoints the leases nobody renewed meanwhile, by default.
pub(super) const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(60);

/// One lease as the clock sees it: id, granted TTL and checkpoint (seconds left), from the
/// keyspace.
pub(super) type LeaseClock = (i64, i64, Option<i64>);

impl Lessor {
    /// Forgets every deadline: this member no longer leads.
    pub(super) fn step_down(&mut self) {
        self.deadlines.clear();
        self.term = None;
        self.checkpointed.clear();
        self.last_checkpoint = None;
    }

    /// Renews lease `id` (of `ttl` seconds; `checkpointed` if the keyspace holds a
    /// checkpoint of it) from `now`; whether a checkpoint must be cleared before the renewal
    /// is answered. A lease whose deadline has passed is being revoked (or about to be):
    /// renewing it would tell the client it lives while the revocation is already on its way.
    /// etcd answers such a keep-alive as if the lease were gone, and so does Skiff.
    pub(super) fn renew(
        &mut self,
        id: i64,
        ttl: i64,
        checkpointed: bool,
        now: Instant,
    ) -> Result<bool, StoreError> {
        if self.deadlines.get(&id).is_some_and(|d| *d <= now) {
            return Err(StoreError::LeaseNotFound);
        }
        self.deadlines
            .insert(id, now + Duration::from_secs(ttl.max(0) as u64));
        Ok(self.checkpointed.remove(&id) || checkpointed)
    }

    /// Seconds left of lease `id` (granted `granted` seconds), rounded up; a lease this leader
    /// has not started the clock of yet has its full TTL.
    pub(super) fn remaining(&self, id: i64, granted: i64, now: Instant) -> i64 {
        self.deadlines.get(&id).map_or(granted, |d| {
            d.saturating_duration_since(now).as_secs_f64().ceil() as i64
        })
    }

    /// One tick of the clock in `term` over the current leases (sorted by id): starts the
    /// clock of leases not seen yet (new grants, or every lease right after this member
    /// became leader) at their checkpoint or else a full TTL, drops deadlines of leases that
    /// are gone, and returns the expired.
    pub(super) fn tick(&mut self, term: u64, leases: &[LeaseClock], now: Instant) -> Vec<i64> {
        if self.term != Some(term) {
            // Logged so that a lease outliving its TTL can be matched to the takeovers that
            // restarted it (each one gives every lease a full TTL).
            tracing::info!(
                term,
                leases = leases.len(),
                "leading: every lease gets a full TTL"
            );
            self.deadlines.clear();
            self.term = Some(term);
        }
        let known = |id: &i64| leases.binary_search_by_key(id, |(i, ..)| *i).is_ok();
        self.deadlines.retain(|id, _| known(id));
        self.checkpointed.retain(known);
        for (id, ttl, checkpoint) in leases {
            let start = checkpoint.map_or(*ttl, |left| left.min(*ttl));
            self.deadlines
                .entry(*id)
                .or_insert_with(|| now + Duration::from_secs(start.max(1) as u64));
        }
        let mut expired: Vec<i64> = self
            .deadlines
            .iter()
            .filter(|(_, d)| **d <= now)
            .map(|(id, _)| *id)
            .collect();
        expired.sort_unstable();
        expired
    }

    /// The checkpoints to propose at `now`, once an `interval`: the seconds left
    /// of every lease not renewed for a whole interval (rounded up), and a clear for a
    /// checkpoint in the keyspace of a lease renewed since (under an earlier leader). A lease
    /// kept alive more often than the interval is never checkpointed, nor one whose TTL is
    /// shorter (a takeover adds less than an interval to it). Each lease checkpointed is
    /// remembered until it is renewed.
    pub(super) fn checkpoints_due(
        &mut self,
        leases: &[LeaseClock],
        interval: Duration,
        now: Instant,
    ) -> Vec<(i64, Option<i64>)> {
        if self
            .last_checkpoint
            .is_some_and(|at| now.duration_since(at) < interval)
        {
            return Vec::new();
        }
        self.last_checkpoint = Some(now);
        let mut due = Vec::new();
        for (id, ttl, stored) in leases {
            let Some(deadline) = self.deadlines.get(id) else {
                continue;
            };
            let left = deadline.saturating_duration_since(now).as_secs_f64().ceil() as i64;
            if left.saturating_add(interval.as_secs_f64().ceil() as i64) <= *ttl {
                self.checkpointed.insert(*id);
                due.push((*id, Some(left)));
            } else if stored.is_some() && !self.checkpointed.contains(id) {
                due.push((*id, None));
            }
        }
        due
    }

    /// Forgets the deadlines of leases whose revocation was committed.
    pub(super) fn revoked(&mut self, ids: &[i64]) {
        for id in ids {
            self.deadlines.remove(id);
        }
    }
}

impl StoreMember {
    /// A lease id for a grant that did not name one: time-based, unique in practice, positive.
    pub fn new_lease_id(&self) -> i64 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        ((nanos ^ self.id.rotate_left(17)) >> 1) as i64 | 1
    }

    /// Renews a lease on the leader; the lease's remaining TTL in seconds.
    pub async fn keep_alive(self: &Arc<Self>, id: i64) -> Result<i64, StoreError> {
        Ok(self.on_leader(KeepAlive(id)).await?.remaining)
    }

    /// A lease's remaining and granted TTL in seconds, as the leader has them.
    pub async fn time_to_live(self: &Arc<Self>, id: i64) -> Result<(i64, i64), StoreError> {
        let ttl = self.on_leader(TimeToLive(id)).await?;
        Ok((ttl.remaining, ttl.granted))
    }

    fn lessor(&self) -> std::sync::MutexGuard<'_, Lessor> {
        self.lessor.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The granted TTL of lease `id` and whether it is checkpointed, from the keyspace.
    fn granted_ttl(&self, id: i64) -> Result<(i64, bool), StoreError> {
        self.shared
            .read()
            .leases()
            .get(&id)
            .map(|l| (l.ttl, l.checkpoint.is_some()))
            .ok_or(StoreError::LeaseNotFound)
    }

    pub(super) async fn keep_alive_local(&self, id: i64) -> Result<Ttl, StoreError> {
        if !self.is_leader() {
            return Err(StoreError::NoLeader);
        }
        self.confirm_leadership().await?;
        let (ttl, checkpointed) = self.granted_ttl(id)?;
        let clear = self.lessor().renew(id, ttl, checkpointed, Instant::now())?;
        if clear {
            // After any checkpoint of this lease in flight: the clear must come later in the
            // log, or a new leader would start the renewed lease from the stale checkpoint.
            let _turn = self.lease_checkpoints.lock().await;
            self.write_local(Command::LeaseCheckpoint {
                leases: vec![(id, None)],
            })
            .await?;
        }
        Ok(Ttl {
            remaining: ttl,
            granted: ttl,
        })
    }

    pub(super) async fn ttl_local(&self, id: i64) -> Result<Ttl, StoreError> {
        if !self.is_leader() {
            return Err(StoreError::NoLeader);
        }
        self.confirm_leadership().await?;
        let (granted, _) = self.granted_ttl(id)?;
        let remaining = self.lessor().remaining(id, granted, Instant::now());
        Ok(Ttl { remaining, granted })
    }

    /// The leader's lease clock: one [`Lessor::tick`], then the expired leases are revoked
    /// through the log, in entries of a bounded number of keys ([`expiry_entries`]), one after
    /// another. A failed proposal leaves the rest for the next tick.
    pub(super) async fn lease_tick(&self) {
        if !self.is_leader() {
            self.lessor().step_down();
            return;
        }
        let term = self.term();
        let (leases, keys): (Vec<LeaseClock>, HashMap<i64, usize>) = {
            let mvcc = self.shared.read();
            mvcc.leases()
                .iter()
                .map(|(id, l)| ((*id, l.ttl, l.checkpoint), (*id, l.keys.len())))
                .unzip()
        };
        let expired = self.lessor().tick(term, &leases, Instant::now());
        let expired: Vec<(i64, usize)> = expired
            .into_iter()
            .map(|id| (id, keys.get(&id).copied().unwrap_or(0)))
            .collect();
        for ids in expiry_entries(&expired, MAX_EXPIRY_KEYS) {
            if let Err(e) = self
                .write_local(Command::LeaseExpire { ids: ids.clone() })
                .await
            {
                tracing::warn!(error = %e, "lease expiry proposal failed");
                return;
            }
            self.lessor().revoked(&ids);
        }
        let _turn = self.lease_checkpoints.lock().await;
        let interval = self.config.lease_checkpoint_interval;
        let due = self
            .lessor()
            .checkpoints_due(&leases, interval, Instant::now());
        if !due.is_empty()
            && let Err(e) = self
                .write_local(Command::LeaseCheckpoint { leases: due })
                .await
        {
            tracing::warn!(error = %e, "lease checkpoint proposal failed");
        }
    }
}

/// The most keys one lease-expiry entry deletes, unless a single lease holds more.
///
/// Every member applies an entry under the keyspace's write lock, and a lease's keys all go
/// in one revision (as etcd revokes a lease in one transaction). kube-apiserver puts a
/// minute's events under one lease, so a busy cluster's event leases hold tens of thousands
/// of keys each; and a new leader gives every lease a full TTL at once, so leases granted
/// over many minutes can expire in the same tick. Deleting them all in one entry held every
/// member's lock (and memory for every deletion's event) for seconds; one entry per bounded
/// group lets reads, keep-alives and the watch fan-out run between them.
const MAX_EXPIRY_KEYS: usize = 10_000;

/// Splits expired leases (`(id, keys attached)`, in order) into the id lists of successive
/// [`Command::LeaseExpire`] entries: each holds leases while their keys total at most
/// `max_keys`, and a lease with more keys than that goes alone (a lease is never split).
fn expiry_entries(expired: &[(i64, usize)], max_keys: usize) -> Vec<Vec<i64>> {
    let mut entries: Vec<Vec<i64>> = Vec::new();
    let mut keys_in_last = 0;
    for &(id, keys) in expired {
        match entries.last_mut() {
            Some(last) if keys_in_last + keys <= max_keys => {
                last.push(id);
                keys_in_last += keys;
            }
            _ => {
                entries.push(vec![id]);
                keys_in_last = keys;
            }
        }
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_term_gives_every_lease_a_full_ttl() {
        let t0 = Instant::now();
        let mut lessor = Lessor::default();
        assert!(lessor.tick(1, &[(7, 2, None)], t0).is_empty());
        assert!(
            lessor
                .tick(1, &[(7, 2, None)], t0 + Duration::from_secs(1))
                .is_empty()
        );
        // A takeover (or losing and winning again) restarts the clock.
        assert!(
            lessor
                .tick(2, &[(7, 2, None)], t0 + Duration::from_secs(2))
                .is_empty()
        );
        assert_eq!(lessor.remaining(7, 2, t0 + Duration::from_secs(2)), 2);
        assert_eq!(
            lessor.tick(2, &[(7, 2, None)], t0 + Duration::from_secs(4)),
            [7]
        );
    }

    #[test]
    fn expired_leases_come_back_until_revoked() {
        let t0 = Instant::now();
        let mut lessor = Lessor::default();
        lessor.tick(1, &[(1, 1, None), (2, 5, None)], t0);
        let later = t0 + Duration::from_secs(2);
        assert_eq!(lessor.tick(1, &[(1, 1, None), (2, 5, None)], later), [1]);
        // The revocation failed to commit: the next tick proposes it again.
        assert_eq!(lessor.tick(1, &[(1, 1, None), (2, 5, None)], later), [1]);
        lessor.revoked(&[1]);
        assert!(lessor.tick(1, &[(2, 5, None)], later).is_empty());
    }

    #[test]
    fn expiries_are_split_by_keys_and_a_lease_is_never_split() {
        assert!(expiry_entries(&[], 10).is_empty());
        // Small leases share an entry up to the bound, keys-less ones included.
        assert_eq!(
            expiry_entries(&[(1, 4), (2, 0), (3, 6), (4, 1)], 10),
            [vec![1, 2, 3], vec![4]]
        );
        // A lease larger than the bound goes alone, and the next starts a new entry.
        assert_eq!(
            expiry_entries(&[(1, 3), (2, 60_000), (3, 2), (4, 9)], 10),
            [vec![1], vec![2], vec![3], vec![4]]
        );
        assert_eq!(expiry_entries(&[(7, 25)], 10), [vec![7]]);
    }

    #[test]
    fn a_new_leader_starts_a_checkpointed_lease_from_what_was_left() {
        let t0 = Instant::now();
        let mut old = Lessor::default();
        old.tick(1, &[(1, 100, None), (2, 100, None)], t0);
        assert!(
            old.renew(2, 100, false, t0 + Duration::from_secs(30))
                .is_ok()
        );
        // Lease 1 has gone an interval without a renewal at 60 s and is checkpointed; lease 2
        // was renewed at 30 s.
        let at = t0 + Duration::from_secs(60);
        assert_eq!(
            old.checkpoints_due(&[(1, 100, None), (2, 100, None)], CHECKPOINT_INTERVAL, at),
            [(1, Some(40))]
        );
        // Not again within the interval.
        assert!(
            old.checkpoints_due(&[(1, 100, None)], CHECKPOINT_INTERVAL, at)
                .is_empty()
        );
        // A new leader: lease 1 runs out 40 s after it takes over, lease 2 gets a full TTL.
        let t1 = at + Duration::from_secs(5);
        let mut new = Lessor::default();
        let leases = [(1, 100, Some(40)), (2, 100, None)];
        assert!(new.tick(2, &leases, t1).is_empty());
        assert!(
            new.tick(2, &leases, t1 + Duration::from_secs(39))
                .is_empty()
        );
        assert_eq!(new.tick(2, &leases, t1 + Duration::from_secs(41)), [1]);
    }

    #[test]
    fn a_renewed_lease_has_its_checkpoint_cleared() {
        let t0 = Instant::now();
        let interval = Duration::from_secs(2);
        let mut lessor = Lessor::default();
        lessor.tick(1, &[(1, 10, None)], t0);
        // Not renewed for 6 s, three intervals: checkpointed. With the default interval,
        // longer than the TTL, it never is.
        let at = t0 + Duration::from_secs(6);
        assert!(
            Lessor::default()
                .checkpoints_due(&[(1, 10, None)], CHECKPOINT_INTERVAL, at)
                .is_empty()
        );
        assert_eq!(
            lessor.checkpoints_due(&[(1, 10, None)], interval, at),
            [(1, Some(4))]
        );
        // The renewal after a checkpoint this leader proposed clears it, once.
        assert_eq!(lessor.renew(1, 10, false, at).ok(), Some(true));
        assert_eq!(lessor.renew(1, 10, false, at).ok(), Some(false));
        // A checkpoint in the keyspace (an earlier leader's) is cleared too.
        assert_eq!(lessor.renew(1, 10, true, at).ok(), Some(true));
        // A new leader clears, at its first checkpoints, the keyspace's checkpoint of a lease
        // renewed since (within the interval).
        let mut next = Lessor::default();
        let leases = [(1, 10, Some(4))];
        next.tick(2, &leases, t0);
        assert!(next.renew(1, 10, true, t0 + Duration::from_secs(1)).is_ok());
        assert_eq!(
            next.checkpoints_due(&leases, interval, t0 + Duration::from_secs(2)),
            [(1, None)]
        );
    }

    #[test]
    fn an_expired_lease_is_not_renewed() {
        let t0 = Instant::now();
        let mut lessor = Lessor::default();
        lessor.tick(1, &[(1, 1, None)], t0);
        assert!(lessor.renew(1, 1, false, t0).is_ok());
        let late = t0 + Duration::from_secs(2);
        assert!(matches!(
            lessor.renew(1, 1, false, late),
            Err(StoreError::LeaseNotFound)
        ));
    }

    #[test]
    fn remaining_rounds_up_and_gone_leases_are_dropped() {
        let t0 = Instant::now();
        let mut lessor = Lessor::default();
        lessor.tick(1, &[(1, 10, None)], t0);
        assert_eq!(lessor.remaining(1, 10, t0 + Duration::from_millis(500)), 10);
        assert_eq!(lessor.remaining(1, 10, t0 + Duration::from_millis(9500)), 1);
        lessor.tick(1, &[], t0);
        // Not tracked any more: a full TTL until the clock starts again.
        assert_eq!(lessor.remaining(1, 10, t0 + Duration::from_secs(9)), 10);
        lessor.step_down();
        assert!(lessor.tick(3, &[], t0).is_empty());
    }
}
