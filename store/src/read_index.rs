//! Shared ReadIndex rounds: concurrent linearizable reads (and lease keep-alives) share one
//! round of "which index must I have applied?" instead of paying for one each.
//!
//! A ReadIndex answer is valid for a read that *began before the round began*: the round
//! proves that the leader still led, and what it had committed, at some moment after the read
//! was invoked. So a caller joins the batch of waiters; one task runs rounds back to back,
//! and each round answers exactly the waiters that had joined before it started. A caller
//! that arrives while a round is under way waits for the next one, never takes the answer of
//! one already in flight. Under load that is one quorum heartbeat (and, on a follower, one
//! forwarded request) for every batch instead of every read, as etcd's read loop does.
//!
//! ```text
//!  read ─┐ join   ┌───── round k (started after its waiters joined) ────┐ ┌─ round k+1 ─┐
//!  read ─┼──────► │ waiters[k]: leader confirms its term with a quorum, │ │ waiters that│
//!  read ─┘        │ returns its commit index; all of them get it        │ │ joined in k │
//!                 └─────────────────────────────────────────────────────┘ └─────────────┘
//! ```

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use crate::error::StoreError;

type Waiter = oneshot::Sender<Result<u64, StoreError>>;

#[derive(Debug, Default)]
struct State {
    /// A task is running rounds.
    running: bool,
    /// Callers waiting for a round that has not started yet.
    waiting: Vec<Waiter>,
}

/// Batches callers into rounds; see the module documentation.
#[derive(Debug, Default)]
pub struct Rounds {
    state: Mutex<State>,
}

/// Resets the state if the round task ends in any way other than running out of waiters
/// (a panic in a round): the waiters it held are dropped (they see [`StoreError::Stopped`])
/// and the next caller starts a new task. A task that stops normally sets `finished` first:
/// by the time it is dropped a new caller may already have started the next task.
struct Running {
    rounds: Arc<Rounds>,
    finished: std::cell::Cell<bool>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.finished.get() {
            return;
        }
        let mut s = self.rounds.lock();
        s.running = false;
        s.waiting.clear();
    }
}

impl Rounds {
    pub fn new() -> Arc<Rounds> {
        Arc::new(Rounds::default())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The result of a round of `round` that began after this call did. `round` is what one
    /// round does (ask the leader for its read index); it runs on a task of its own, so a
    /// caller that gives up does not stall the others.
    pub async fn join<F, Fut>(self: &Arc<Self>, round: F) -> Result<u64, StoreError>
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = Result<u64, StoreError>> + Send,
    {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut s = self.lock();
            s.waiting.push(tx);
            !std::mem::replace(&mut s.running, true)
        };
        if start {
            let running = Running {
                rounds: self.clone(),
                finished: std::cell::Cell::new(false),
            };
            tokio::spawn(async move {
                loop {
                    let batch = {
                        let mut s = running.rounds.lock();
                        if s.waiting.is_empty() {
                            s.running = false;
                            drop(s);
                            running.finished.set(true);
                            return;
                        }
                        std::mem::take(&mut s.waiting)
                    };
                    let result = round().await;
                    for w in batch {
                        let _ = w.send(result.clone());
                    }
                }
            });
        }
        rx.await.unwrap_or(Err(StoreError::Stopped))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use tokio::sync::Notify;

    use super::*;

    /// A round that counts itself, returns its own number, and holds until released.
    struct Probe {
        started: AtomicU64,
        release: Notify,
    }

    fn probe() -> Arc<Probe> {
        Arc::new(Probe {
            started: AtomicU64::new(0),
            release: Notify::new(),
        })
    }

    fn round(
        p: &Arc<Probe>,
    ) -> impl Fn() -> futures::future::BoxFuture<'static, Result<u64, StoreError>> + Send + 'static
    {
        let p = p.clone();
        move || {
            let p = p.clone();
            Box::pin(async move {
                let n = p.started.fetch_add(1, Ordering::SeqCst) + 1;
                p.release.notified().await;
                Ok(n)
            })
        }
    }

    /// A caller joining the next round, on a task of its own.
    fn spawn_join(
        rounds: &Arc<Rounds>,
        p: &Arc<Probe>,
    ) -> tokio::task::JoinHandle<Result<u64, StoreError>> {
        let (rounds, f) = (rounds.clone(), round(p));
        tokio::spawn(async move { rounds.join(f).await })
    }

    async fn until(what: impl Fn() -> bool) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while !what() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("condition not reached in 5 s");
    }

    #[tokio::test]
    async fn callers_share_a_round_but_never_one_that_began_before_them() {
        let rounds = Rounds::new();
        let p = probe();
        // Two callers before any round: both in round 1.
        let a = spawn_join(&rounds, &p);
        until(|| p.started.load(Ordering::SeqCst) == 1).await;
        // These join while round 1 is in flight: they must get round 2, together.
        let later: Vec<_> = (0..3).map(|_| spawn_join(&rounds, &p)).collect();
        until(|| rounds.lock().waiting.len() == 3).await;
        p.release.notify_one();
        assert_eq!(a.await.unwrap(), Ok(1));
        until(|| p.started.load(Ordering::SeqCst) == 2).await;
        p.release.notify_one();
        for h in later {
            assert_eq!(h.await.unwrap(), Ok(2));
        }
        // Nobody waiting: the task has stopped, and the next caller starts round 3.
        until(|| !rounds.lock().running).await;
        let c = spawn_join(&rounds, &p);
        until(|| p.started.load(Ordering::SeqCst) == 3).await;
        p.release.notify_one();
        assert_eq!(c.await.unwrap(), Ok(3));
    }

    /// Callers arriving just as the round task finds nobody waiting and stops: each still
    /// gets an answer (a new task starts for it), never a dropped waiter.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn callers_racing_the_task_as_it_stops_are_all_answered() {
        let rounds = Rounds::new();
        let callers: Vec<_> = (0..8)
            .map(|_| {
                let rounds = rounds.clone();
                tokio::spawn(async move {
                    let mut failed = 0;
                    for _ in 0..2_000 {
                        if rounds.join(|| async { Ok(1) }).await.is_err() {
                            failed += 1;
                        }
                    }
                    failed
                })
            })
            .collect();
        for c in callers {
            assert_eq!(c.await.unwrap(), 0, "joins that got no answer");
        }
    }

    #[tokio::test]
    async fn a_failed_round_fails_its_waiters_only() {
        let rounds = Rounds::new();
        let calls = Arc::new(AtomicU64::new(0));
        let f = {
            let calls = calls.clone();
            move || {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n == 0 {
                        Err(StoreError::NoLeader)
                    } else {
                        Ok(7)
                    }
                }
            }
        };
        assert_eq!(rounds.join(f.clone()).await, Err(StoreError::NoLeader));
        assert_eq!(rounds.join(f).await, Ok(7));
    }

    #[tokio::test]
    async fn a_caller_that_gives_up_does_not_stall_the_others() {
        let rounds = Rounds::new();
        let p = probe();
        let quitter = spawn_join(&rounds, &p);
        until(|| p.started.load(Ordering::SeqCst) == 1).await;
        let stayer = spawn_join(&rounds, &p);
        until(|| rounds.lock().waiting.len() == 1).await;
        quitter.abort();
        p.release.notify_one();
        until(|| p.started.load(Ordering::SeqCst) == 2).await;
        p.release.notify_one();
        assert_eq!(stayer.await.unwrap(), Ok(2));
    }
}
