//! Compaction on a timer, with etcd's `--auto-compaction-mode` and `--auto-compaction-retention`
//! (and what kube-apiserver does for its etcd): without it a cluster whose nodes heartbeat
//! grows until the NOSPACE alarm stops every write.
//!
//! * `periodic`: keeps `retention` of history. Every tenth of the retention the leader notes
//!   the current revision; it compacts to the newest revision it noted at least `retention`
//!   ago. A member that just became leader starts noting afresh, so it never compacts history
//!   younger than the retention.
//! * `revision`: keeps the last `retention` revisions, checked every five minutes as etcd
//!   checks them.
//!
//! Only the leader compacts; the compaction goes through Raft like a client's.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::StoreMember;
use crate::command::Command;

/// How history is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoCompaction {
    /// Keep this much time of history.
    Periodic(Duration),
    /// Keep this many revisions.
    Revision(i64),
}

/// How often the revision mode looks (etcd's revision compactor's period).
const REVISION_CHECK: Duration = Duration::from_secs(300);

impl AutoCompaction {
    /// How often the compactor wakes.
    fn interval(self) -> Duration {
        match self {
            AutoCompaction::Periodic(retention) => (retention / 10).max(Duration::from_millis(100)),
            AutoCompaction::Revision(_) => REVISION_CHECK,
        }
    }
}

/// The revisions noted while leading, oldest first.
#[derive(Debug, Default)]
struct Samples(VecDeque<(Instant, i64)>);

impl Samples {
    /// Notes `revision` at `now`; the newest noted revision at least `retention` old, which
    /// history may be compacted to.
    fn note(&mut self, now: Instant, revision: i64, retention: Duration) -> Option<i64> {
        self.0.push_back((now, revision));
        let mut target = None;
        while let Some(&(at, rev)) = self.0.front() {
            if now.saturating_duration_since(at) < retention {
                break;
            }
            target = Some(rev);
            self.0.pop_front();
        }
        target
    }
}

impl StoreMember {
    /// Starts the compactor when `auto` is set.
    pub(super) fn spawn_auto_compaction(self: &Arc<Self>, auto: Option<AutoCompaction>) {
        let Some(auto) = auto else { return };
        let me = Arc::downgrade(self);
        let cancel = self.cancel.clone();
        self.tasks.spawn(async move {
            let mut tick = tokio::time::interval(auto.interval());
            let mut samples = Samples::default();
            loop {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let Some(member) = me.upgrade() else { return };
                if !member.is_leader() {
                    samples = Samples::default();
                    continue;
                }
                let (current, compacted) = {
                    let mvcc = member.shared.read();
                    (mvcc.revision(), mvcc.compacted())
                };
                let target = match auto {
                    AutoCompaction::Periodic(retention) => {
                        samples.note(Instant::now(), current, retention)
                    }
                    AutoCompaction::Revision(keep) => Some(current - keep),
                };
                let Some(revision) = target.filter(|r| *r > compacted) else {
                    continue;
                };
                match member.propose(Command::Compact { revision }).await {
                    Ok(_) => tracing::info!(revision, "auto-compacted"),
                    Err(e) => tracing::warn!(revision, error = %e, "auto-compaction failed"),
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periodic_keeps_the_retention_of_history() {
        let t0 = Instant::now();
        let retention = Duration::from_secs(10);
        let mut s = Samples::default();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        assert_eq!(s.note(at(0), 100, retention), None);
        assert_eq!(s.note(at(1), 110, retention), None);
        assert_eq!(s.note(at(9), 190, retention), None);
        // Ten seconds after 100 was current, history before it may go.
        assert_eq!(s.note(at(10), 200, retention), Some(100));
        assert_eq!(s.note(at(11), 210, retention), Some(110));
        // Nothing newer is old enough yet.
        assert_eq!(s.note(at(12), 220, retention), None);
        assert_eq!(s.note(at(19), 290, retention), Some(190));
    }

    #[test]
    fn intervals_follow_etcd() {
        assert_eq!(
            AutoCompaction::Periodic(Duration::from_secs(300)).interval(),
            Duration::from_secs(30)
        );
        assert_eq!(AutoCompaction::Revision(1000).interval(), REVISION_CHECK);
    }
}
