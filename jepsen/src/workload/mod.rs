//! Workloads: client tasks that drive the cluster through the `etcd-client` crate and record
//! every operation. Each workload has its own key prefix (so several can share one run and
//! one history) and its own checker.
//!
//! A workload runs in two phases: traffic until the nemesis phase ends, then — after the
//! harness has healed every fault and the cluster serves reads again — a final phase
//! (final reads, watchers catching up) that gives the checker its ground truth.

pub mod lease;
pub mod register;
pub mod set;
pub mod watch;

use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::Client;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::Value;
use tokio::sync::watch as signal;
use tokio_util::sync::CancellationToken;

use crate::checker::{self, Verdict};
use crate::cluster;
use crate::history::{F, History, OpType, Process, Recorder};

/// The workloads a run can include.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Workload {
    Register,
    Set,
    Watch,
    Lease,
}

impl FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "register" => Ok(Workload::Register),
            "set" => Ok(Workload::Set),
            "watch" => Ok(Workload::Watch),
            "lease" => Ok(Workload::Lease),
            _ => Err(format!(
                "unknown workload {s:?} (register, set, watch, lease)"
            )),
        }
    }
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Workload::Register => "register",
            Workload::Set => "set",
            Workload::Watch => "watch",
            Workload::Lease => "lease",
        })
    }
}

/// Lease TTL used by the lease workload, in seconds: several election timeouts, so that an
/// election alone does not expire a kept-alive lease.
pub const LEASE_TTL_S: u64 = 4;

impl Workload {
    /// Process numbers of this workload start here; see [`Ctx::process`].
    fn process_base(self) -> u64 {
        match self {
            Workload::Register => 0,
            Workload::Set => 20,
            Workload::Watch => 40,
            Workload::Lease => 60,
        }
    }

    /// Runs the workload's traffic and final phase.
    pub async fn run(self, ctx: Arc<Ctx>) {
        match self {
            Workload::Register => register::run(ctx).await,
            Workload::Set => set::run(ctx).await,
            Workload::Watch => watch::run(ctx).await,
            Workload::Lease => lease::run(ctx).await,
        }
    }

    /// The workload's own checkers (the revision-order check runs on every history anyway).
    pub fn check(self, history: &History, budget: u64) -> Vec<Verdict> {
        match self {
            Workload::Register => vec![checker::register::check(history, budget)],
            Workload::Set => vec![checker::set::check(history)],
            Workload::Watch => vec![checker::watch::check(history)],
            Workload::Lease => {
                // An election, plus the client's timeout for an uncertain keep-alive.
                let slack = Duration::from_millis(3 * cluster::ELECTION_TIMEOUT_MS) + OP_TIMEOUT;
                vec![checker::lease::check(history, slack.as_nanos() as u64)]
            }
        }
    }
}

/// Client timeout per operation; past it the operation is indeterminate.
pub const OP_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a final-phase read keeps retrying after healing.
pub const FINAL_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// What every client task shares.
#[derive(Debug)]
pub struct Ctx {
    pub recorder: Arc<Recorder>,
    /// Client endpoint and name of each member.
    pub members: Vec<(String, String)>,
    /// Cancelled when the traffic phase ends.
    pub traffic: CancellationToken,
    /// Becomes true once faults are healed and the cluster serves reads.
    pub healed: signal::Receiver<bool>,
    /// Cancelled if the run is abandoned: final phases give up.
    pub abort: CancellationToken,
    /// Every traffic operation holds a read guard while it runs; the harness takes the
    /// write side after the traffic phase, so no operation from it is still in flight when
    /// final reads begin (an add acknowledged after the final read would look lost).
    pub in_flight: tokio::sync::RwLock<()>,
    /// Register reads are serializable (served locally, possibly stale) instead of
    /// linearizable: a self-test of the harness, whose checkers must then object.
    pub serializable_reads: bool,
    pub seed: u64,
}

impl Ctx {
    /// A seeded random source for one task.
    pub fn rng(&self, workload: Workload, task: u64) -> StdRng {
        StdRng::seed_from_u64(
            self.seed ^ (workload.process_base() + task).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        )
    }

    /// Process number of a task's `generation`-th incarnation (a new one after each `info`).
    pub fn process(workload: Workload, task: u64, generation: u64) -> Process {
        Process::Client(workload.process_base() + task + generation * 100)
    }

    /// A client of member `i` (tasks stick to one member, like clients of a load balancer
    /// that does not fail over), or `None` if it cannot connect now.
    pub async fn client(&self, i: usize) -> Option<Client> {
        let (endpoint, _) = &self.members[i % self.members.len()];
        cluster::connect_as(
            std::slice::from_ref(endpoint),
            OP_TIMEOUT,
            cluster::Who::Client,
        )
        .await
        .ok()
    }

    pub fn node_name(&self, i: usize) -> &str {
        &self.members[i % self.members.len()].1
    }

    /// Waits for the heal signal; false if the run was abandoned first.
    pub async fn wait_healed(&self) -> bool {
        let mut rx = self.healed.clone();
        tokio::select! {
            r = rx.wait_for(|h| *h) => r.is_ok(),
            _ = self.abort.cancelled() => false,
        }
    }
}

/// One client task's view: its process number, member and recorder.
pub struct Worker {
    pub workload: Workload,
    pub task: u64,
    pub generation: u64,
    pub member: usize,
    client: Option<Client>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("workload", &self.workload)
            .field("task", &self.task)
            .field("generation", &self.generation)
            .field("member", &self.member)
            .field("connected", &self.client.is_some())
            .finish()
    }
}

/// How a client call ended.
#[derive(Debug)]
pub enum Outcome {
    Ok(Value),
    /// Certainly had no effect.
    Fail(String),
    /// May have had an effect.
    Info(String),
}

impl Worker {
    pub fn new(workload: Workload, task: u64, member: usize) -> Worker {
        Worker {
            workload,
            task,
            generation: 0,
            member,
            client: None,
        }
    }

    pub fn process(&self) -> Process {
        Ctx::process(self.workload, self.task, self.generation)
    }

    /// Switches to the next member (with a new connection).
    pub fn next_member(&mut self) {
        self.member += 1;
        self.client = None;
    }

    /// Records the invocation, runs `call` with the operation timeout, records the
    /// completion. `idempotent` calls (reads) that error are `fail`: they had no effect. An
    /// `info` retires the process.
    pub async fn op<Fut>(
        &mut self,
        ctx: &Ctx,
        f: F,
        value: Value,
        idempotent: bool,
        call: impl FnOnce(Client) -> Fut,
    ) -> Outcome
    where
        Fut: Future<Output = Result<Value, Outcome>>,
    {
        let _in_flight = ctx.in_flight.read().await;
        let node = ctx.node_name(self.member).to_string();
        let process = self.process();
        if self.client.is_none() {
            self.client = ctx.client(self.member).await;
        }
        ctx.recorder.invoke(process, f, value.clone(), Some(&node));
        let result = match self.client.clone() {
            None => Err(Outcome::Fail("cannot connect".into())),
            Some(c) => match tokio::time::timeout(OP_TIMEOUT, call(c)).await {
                Ok(r) => r,
                Err(_) => Err(Outcome::Info("timed out".into())),
            },
        };
        let outcome = match result {
            Ok(v) => Outcome::Ok(v),
            Err(Outcome::Info(e)) if idempotent => Outcome::Fail(e),
            Err(o) => o,
        };
        let (kind, v, err) = match &outcome {
            Outcome::Ok(v) => (OpType::Ok, v.clone(), None),
            Outcome::Fail(e) => (OpType::Fail, value, Some(e.clone())),
            Outcome::Info(e) => (OpType::Info, value, Some(e.clone())),
        };
        let refused = matches!(&outcome, Outcome::Fail(e) if e.contains("connect"));
        ctx.recorder.record(process, kind, f, v, Some(&node), err);
        if refused {
            tokio::select! {
                _ = tokio::time::sleep(CONNECT_BACKOFF) => {}
                _ = ctx.abort.cancelled() => {}
            }
        }
        if kind == OpType::Info {
            self.generation += 1;
            // A fresh connection for the new process, as a restarted client would have.
            self.client = None;
        }
        outcome
    }
}

/// An etcd client error as an outcome. A refused or failed TCP connect means the request
/// never left the client, so it certainly had no effect (`fail`); anything else — a reset
/// connection, a timeout, a leader change — may have been applied (`info`).
pub fn indeterminate(e: etcd_client::Error) -> Outcome {
    let text = e.to_string();
    if text.contains("tcp connect error") {
        Outcome::Fail(text)
    } else {
        Outcome::Info(text)
    }
}

/// Pause after a refused connection, as a real client backs off, instead of spinning
/// against a dead member.
const CONNECT_BACKOFF: Duration = Duration::from_millis(100);

/// Sleeps a little between operations, or returns false when the traffic phase is over.
pub async fn pace(ctx: &Ctx, rng: &mut StdRng, max_ms: u64) -> bool {
    use rand::Rng;
    let d = Duration::from_millis(rng.random_range(0..=max_ms));
    tokio::select! {
        _ = tokio::time::sleep(d) => !ctx.traffic.is_cancelled(),
        _ = ctx.traffic.cancelled() => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_parse_and_print() {
        for w in ["register", "set", "watch", "lease"] {
            assert_eq!(w.parse::<Workload>().expect("parses").to_string(), w);
        }
        assert!("queue".parse::<Workload>().is_err());
    }

    #[test]
    fn processes_do_not_collide_across_workloads_and_generations() {
        let mut seen = std::collections::HashSet::new();
        for w in [
            Workload::Register,
            Workload::Set,
            Workload::Watch,
            Workload::Lease,
        ] {
            for task in 0..20 {
                for g in 0..50 {
                    assert!(seen.insert(Ctx::process(w, task, g)));
                }
            }
        }
    }
}
