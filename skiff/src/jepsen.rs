//! `skiff jepsen`: fault-injection runs against real `skiff store` processes (see the
//! `skiff-jepsen` crate). The command re-executes itself inside a private network, mount and
//! PID namespace, runs the campaign there and exits 0 only when every checker of every run
//! says valid. `--check history.jsonl` re-checks a recorded history without a cluster.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use skiff_jepsen::checker::{Validity, register};
use skiff_jepsen::history::History;
use skiff_jepsen::nemesis::Nemesis;
use skiff_jepsen::run::{self, Config};
use skiff_jepsen::sandbox::{self, Entered};
use skiff_jepsen::workload::Workload;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workloads, run together in each run (comma-separated): register, set, watch, lease.
    #[arg(long, value_delimiter = ',', default_value = "register")]
    workload: Vec<Workload>,
    /// Faults (comma-separated): partition, loss, kill, pause, member, compact; or `none`.
    #[arg(long, value_delimiter = ',', default_value = "partition,kill")]
    nemesis: Vec<String>,
    /// Traffic per run (`60s`, `5m`; a bare number is seconds).
    #[arg(long, default_value = "60s", value_parser = skiff_proto::duration::parse)]
    time_limit: Duration,
    /// Seed of the first run; run k uses seed + k.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runs in the campaign, each on a fresh cluster.
    #[arg(long, default_value_t = 1)]
    runs: u64,
    /// Store members (3 or 5 usual).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Where run folders (history, results, plots, member logs) go.
    #[arg(long, default_value = "jepsen-reports")]
    report_dir: PathBuf,
    /// Linearizability search budget per key (steps); past it a key is `unknown`.
    #[arg(long, default_value_t = register::DEFAULT_BUDGET)]
    budget: u64,
    /// Check this recorded history.jsonl instead of running a test.
    #[arg(long)]
    check: Option<PathBuf>,
    /// Self-test of the harness: register reads become serializable (local, possibly
    /// stale), so under partitions the checkers should report stale reads and the run fail.
    #[arg(long)]
    serializable_reads: bool,
    /// TLS everywhere: members on https:// client and peer URLs with client certificates
    /// required, clients presenting one (certificates made by `skiff certs` in
    /// `<report-dir>/certs`).
    #[arg(long)]
    tls: bool,
    /// etcd's auth on: workload clients authenticate as a user with read and write on every
    /// key (every request goes through the permission checks), the harness as root; tokens
    /// are renewed when a restarted member no longer knows them.
    #[arg(long)]
    auth: bool,
}

fn nemeses(names: &[String]) -> anyhow::Result<Vec<Nemesis>> {
    let mut out = Vec::new();
    for n in names {
        if n == "none" || n.is_empty() {
            continue;
        }
        out.push(n.parse::<Nemesis>().map_err(anyhow::Error::msg)?);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let nemeses = nemeses(&args.nemesis)?;
    if let Some(path) = &args.check {
        return check_file(path, &args.workload, args.budget);
    }
    match sandbox::enter()? {
        Entered::Ran(status) => {
            return Ok(status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .map_or(ExitCode::FAILURE, ExitCode::from));
        }
        Entered::Inside => {}
    }
    let config = Config {
        skiff: std::env::current_exe().context("finding the skiff binary")?,
        workloads: args.workload,
        nemeses,
        time_limit: args.time_limit,
        seed: args.seed,
        runs: args.runs,
        nodes: args.nodes,
        dir: args.report_dir,
        budget: args.budget,
        serializable_reads: args.serializable_reads,
        tls: args.tls,
        auth: args.auth,
    };
    config.validate()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let outcomes = rt.block_on(async {
        tokio::select! {
            r = run::campaign(&config) => r,
            // Inside the sandbox this process is PID 1, which ignores signals it does not
            // handle: without this, Ctrl-C would not stop a run.
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        }
    })?;
    let mut all = Validity::True;
    for o in &outcomes {
        all = all.and(o.results.valid);
        for v in &o.results.checkers {
            if v.valid != Validity::True {
                println!(
                    "  seed {} {}: {}: {}",
                    o.results.seed,
                    v.checker,
                    run::validity_word(v.valid),
                    v.summary
                );
            }
        }
    }
    let ops: u64 = outcomes
        .iter()
        .map(|o| o.results.ops.ok + o.results.ops.info + o.results.ops.fail)
        .sum();
    let unavailable: Vec<f64> = outcomes
        .iter()
        .flat_map(|o| o.results.leader_kill_unavailability_s.iter().copied())
        .collect();
    println!(
        "{} runs, {} ops: {}{}",
        outcomes.len(),
        ops,
        run::validity_word(all),
        if unavailable.is_empty() {
            String::new()
        } else {
            format!(
                "; write unavailability after leader kill: max {:.2}s, mean {:.2}s over {} kills",
                unavailable.iter().copied().fold(0.0, f64::max),
                unavailable.iter().sum::<f64>() / unavailable.len() as f64,
                unavailable.len()
            )
        }
    );
    Ok(if all == Validity::True {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn check_file(
    path: &std::path::Path,
    workloads: &[Workload],
    budget: u64,
) -> anyhow::Result<ExitCode> {
    let history = History::read_jsonl(path)?;
    let verdicts = run::check(&history, workloads, budget);
    let mut all = Validity::True;
    for v in &verdicts {
        all = all.and(v.valid);
        println!(
            "{}: {}: {}",
            v.checker,
            run::validity_word(v.valid),
            v.summary
        );
    }
    Ok(if all == Validity::True {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
