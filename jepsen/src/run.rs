//! One test run and a campaign of runs.
//!
//! ```text
//!  start cluster ─► traffic + nemesis (time limit) ─► heal all ─► wait healthy
//!        ─► final phase (final reads, watchers catch up) ─► stop ─► check ─► report
//! ```
//!
//! Everything here runs inside the sandbox (see [`crate::sandbox`]); the network is set up
//! once per campaign and each run gets a fresh cluster and data directories.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::checker::{self, Validity, Verdict};
use crate::cluster::Cluster;
use crate::history::{History, Recorder};
use crate::nemesis::{self, Nemesis};
use crate::network;
use crate::report::{self, Results};
use crate::workload::{Ctx, Workload};

/// A campaign: `runs` runs with seeds `seed`, `seed + 1`, …
#[derive(Debug, Clone)]
pub struct Config {
    /// The `skiff` binary to run members with.
    pub skiff: PathBuf,
    pub workloads: Vec<Workload>,
    pub nemeses: Vec<Nemesis>,
    pub time_limit: Duration,
    pub seed: u64,
    pub runs: u64,
    pub nodes: usize,
    /// Report folder; each run writes to `<dir>/<workloads>-<nemeses>-seed<N>/`.
    pub dir: PathBuf,
    /// Per-key linearizability search budget.
    pub budget: u64,
    /// Self-test: serializable register reads, which the checkers must catch as stale.
    pub serializable_reads: bool,
    /// Members on `https://` client and peer URLs with certificates required on both, and
    /// clients presenting one (made by `skiff certs` in `<dir>/certs`).
    pub tls: bool,
    /// etcd's auth on: the workloads' clients authenticate as a user with read and write on
    /// every key (not root), the harness as root.
    pub auth: bool,
}

impl Config {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(!self.workloads.is_empty(), "no workload given");
        anyhow::ensure!(
            (3..=9).contains(&self.nodes),
            "--nodes must be between 3 and 9"
        );
        anyhow::ensure!(self.runs >= 1, "--runs must be at least 1");
        anyhow::ensure!(
            self.skiff.is_file(),
            "skiff binary {} not found",
            self.skiff.display()
        );
        Ok(())
    }

    fn run_dir(&self, seed: u64) -> PathBuf {
        let w: Vec<String> = self.workloads.iter().map(ToString::to_string).collect();
        let n: Vec<String> = self.nemeses.iter().map(ToString::to_string).collect();
        let n = if n.is_empty() {
            "none".to_string()
        } else {
            n.join("+")
        };
        self.dir.join(format!("{}-{}-seed{seed}", w.join("+"), n))
    }
}

/// The outcome of one run.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub dir: PathBuf,
    pub results: Results,
}

/// Longest wait for traffic operations still running when the traffic phase ends.
const IN_FLIGHT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the cluster gets to become healthy after healing.
const HEAL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long final phases may take before the run gives up on them.
const FINAL_PHASE_TIMEOUT: Duration = Duration::from_secs(90);

/// Runs the campaign; the network must not exist yet. Returns every run's outcome.
pub async fn campaign(config: &Config) -> anyhow::Result<Vec<RunOutcome>> {
    config.validate()?;
    network::setup(config.nodes)
        .await
        .context("setting up the test network (root and a private network namespace needed)")?;
    if config.tls {
        crate::cluster::use_tls(&config.skiff, &config.dir.join("certs"), config.nodes)
            .context("making the campaign's certificates")?;
    }
    let mut outcomes = Vec::new();
    for seed in config.seed..config.seed + config.runs {
        let outcome = run_once(config, seed).await?;
        println!("{}", summary_line(&outcome));
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// One table row: seed, ops, counts, each checker, result.
pub fn summary_line(o: &RunOutcome) -> String {
    let r = &o.results;
    let checkers: Vec<String> = r
        .checkers
        .iter()
        .map(|v| format!("{}={}", v.checker, validity_word(v.valid)))
        .collect();
    format!(
        "seed {:>4}  ops {:>6} (ok {:>6} info {:>4} fail {:>5})  {}  => {}  [{}]",
        r.seed,
        r.ops.ok + r.ops.info + r.ops.fail,
        r.ops.ok,
        r.ops.info,
        r.ops.fail,
        checkers.join(" "),
        validity_word(r.valid),
        o.dir.display()
    )
}

pub fn validity_word(v: Validity) -> &'static str {
    match v {
        Validity::True => "valid",
        Validity::False => "INVALID",
        Validity::Unknown => "unknown",
    }
}

/// Runs one test with `seed`.
pub async fn run_once(config: &Config, seed: u64) -> anyhow::Result<RunOutcome> {
    let dir = config.run_dir(seed);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    network::heal(config.nodes).await?;
    let mut cluster = Cluster::new(&config.skiff, &dir, config.nodes);
    cluster
        .start(Duration::from_secs(60))
        .await
        .context("starting the cluster")?;
    if config.auth {
        cluster
            .enable_auth()
            .await
            .context("turning etcd's auth on")?;
    }

    let recorder = Arc::new(Recorder::new());
    let traffic = CancellationToken::new();
    let abort = CancellationToken::new();
    let (healed_tx, healed_rx) = tokio::sync::watch::channel(false);
    let ctx = Arc::new(Ctx {
        recorder: recorder.clone(),
        members: (0..config.nodes)
            .map(|i| (cluster.endpoint(i), cluster.name(i).to_string()))
            .collect(),
        traffic: traffic.clone(),
        healed: healed_rx,
        abort: abort.clone(),
        in_flight: tokio::sync::RwLock::new(()),
        serializable_reads: config.serializable_reads,
        seed,
    });
    let workloads: Vec<_> = config
        .workloads
        .iter()
        .map(|&w| tokio::spawn(w.run(ctx.clone())))
        .collect();
    let nemesis = {
        let (recorder, traffic) = (recorder.clone(), traffic.clone());
        let kinds = config.nemeses.clone();
        let rng = StdRng::seed_from_u64(seed.wrapping_mul(0x2545_f491_4f6c_dd1d));
        tokio::spawn(async move { nemesis::run(cluster, kinds, rng, &recorder, traffic).await })
    };

    tokio::time::sleep(config.time_limit).await;
    traffic.cancel();
    // Let traffic operations finish (each is bounded by the client timeout) before anything
    // that judges the final state begins.
    let drained = tokio::time::timeout(IN_FLIGHT_TIMEOUT, ctx.in_flight.write()).await;
    drop(drained);
    let mut cluster = nemesis.await.context("nemesis task")?;
    let healed = async {
        nemesis::heal_all(&mut cluster).await?;
        cluster.wait_healthy(HEAL_TIMEOUT).await
    }
    .await;
    let mut notes = Vec::new();
    match healed {
        Ok(()) => {
            let _ = healed_tx.send(true);
        }
        Err(e) => {
            notes.push(format!("cluster did not recover after healing: {e:#}"));
            abort.cancel();
        }
    }
    let finals = futures::future::join_all(workloads);
    if tokio::time::timeout(FINAL_PHASE_TIMEOUT, finals)
        .await
        .is_err()
    {
        notes.push("final phase timed out".to_string());
        abort.cancel();
    }
    // Every member still in the cluster, compared while it runs.
    let convergence = if notes.is_empty() {
        let live: Vec<(String, String)> = (0..cluster.len())
            .filter(|&i| cluster.is_running(i) && !cluster.is_removed(i))
            .map(|i| (cluster.name(i).to_string(), cluster.endpoint(i)))
            .collect();
        Some(checker::convergence::check(&live).await)
    } else {
        None
    };
    cluster.stop_all();

    let history = recorder.history();
    let budget = config.budget;
    let kinds = config.workloads.clone();
    let checked = {
        let history = history.clone();
        tokio::task::spawn_blocking(move || check(&history, &kinds, budget))
            .await
            .context("checker task")?
    };
    let mut checkers = checked;
    checkers.extend(convergence);
    if !notes.is_empty() {
        // A cluster that never came back is a finding too: availability after heal.
        checkers.push(Verdict::new(
            "recovery",
            Validity::False,
            notes.join("; "),
            json!({ "notes": notes }),
        ));
    }
    let valid = checkers
        .iter()
        .fold(Validity::True, |acc, v| acc.and(v.valid));
    let results = Results {
        valid,
        workloads: config.workloads.iter().map(ToString::to_string).collect(),
        nemeses: config.nemeses.iter().map(ToString::to_string).collect(),
        seed,
        time_limit_s: config.time_limit.as_secs_f64(),
        nodes: config.nodes,
        ops: history.counts(),
        checkers,
        faults: history
            .fault_windows()
            .into_iter()
            .map(|(s, e, w)| (s as f64 / 1e9, e as f64 / 1e9, w))
            .collect(),
        leader_kill_unavailability_s: report::leader_kill_unavailability(&history),
    };
    report::write(&dir, &history, &results)?;
    if valid != Validity::False {
        // Data directories are large; logs, history and results stay.
        for i in 0..config.nodes {
            let data = dir.join(format!("{}.data", network::netns(i)));
            if data.exists() {
                std::fs::remove_dir_all(&data)
                    .with_context(|| format!("removing {}", data.display()))?;
            }
        }
    }
    Ok(RunOutcome { dir, results })
}

/// Every checker for these workloads, plus the revision-order check.
pub fn check(history: &History, workloads: &[Workload], budget: u64) -> Vec<Verdict> {
    let mut verdicts: Vec<Verdict> = workloads
        .iter()
        .flat_map(|w| w.check(history, budget))
        .collect();
    verdicts.push(checker::revision::check(history));
    verdicts
}
