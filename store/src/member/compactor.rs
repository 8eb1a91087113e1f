//! The member's background deletion of compacted versions: it works through the keyspace's
//! [`Backlog`] a batch at a time (see [`crate::compaction`] for why this is safe).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::compaction::{Backlog, CompactorConfig};
use crate::raft::state_machine::Shared;

/// How long the task waits after a failed batch before trying again.
const RETRY: Duration = Duration::from_secs(1);

/// Starts the background deletion of `shared`'s backlog on `tracker`, until `cancel`.
///
/// Supervised: a failed batch (a RocksDB error) or a panic in one is logged, flags the
/// backlog as failing (so `/health` fails) and is retried after [`RETRY`]; the flag clears
/// with the next batch that succeeds. The loop itself holds no lock across an `.await`.
pub fn spawn(
    shared: Arc<Shared>,
    backlog: Arc<Backlog>,
    config: CompactorConfig,
    cancel: CancellationToken,
    tracker: &TaskTracker,
) {
    tracker.spawn(async move {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = backlog.work() => {}
            }
            if backlog.pending() == 0 {
                continue;
            }
            // Drain the backlog, one batch per blocking call.
            loop {
                let step = {
                    let shared = shared.clone();
                    tokio::task::spawn_blocking(move || {
                        shared.read().delete_compacted(config.batch_limit)
                    })
                    .await
                };
                let pause = match step {
                    Ok(Ok(0)) => {
                        backlog.set_failing(false);
                        tracing::info!(
                            took_ms = backlog.last_duration().as_millis() as u64,
                            "compaction: stale versions deleted"
                        );
                        break;
                    }
                    Ok(Ok(_)) => {
                        backlog.set_failing(false);
                        config.pause
                    }
                    Ok(Err(e)) => {
                        backlog.set_failing(true);
                        tracing::error!(error = %e, "compaction: deleting stale versions failed");
                        RETRY
                    }
                    Err(e) => {
                        backlog.set_failing(true);
                        tracing::error!(error = %e, "compaction: a deletion batch panicked");
                        RETRY
                    }
                };
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        }
    });
}
