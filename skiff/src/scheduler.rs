//! `skiff scheduler`: the scheduler against a running store.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;
use skiff_scheduler::service::{self, Config};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Store members' client endpoints (host:port), comma-separated.
    #[arg(long, env = "SKIFF_ENDPOINTS", value_delimiter = ',', required = true)]
    endpoints: Vec<String>,
    #[command(flatten)]
    tls: crate::config::TlsArgs,
    /// Worker threads placing batches in parallel (default: one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// Most pods of one scheduling signature placed per batch.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Most bindings per Bind call.
    #[arg(long, default_value_t = 1000)]
    bind_batch: usize,
    /// Bind calls in flight at once.
    #[arg(long, default_value_t = 4)]
    bind_concurrency: usize,
    /// Seed of the tie-break among equally good nodes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A `spec.schedulerName` this scheduler serves besides `default-scheduler`.
    #[arg(long, default_value = "default-scheduler")]
    scheduler_name: String,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    #[command(flatten)]
    leadership: crate::leadership::LeaderElection,
    /// Do not record Scheduled / FailedScheduling events.
    #[arg(long)]
    no_events: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let defaults = Config::default();
    let config = Config {
        endpoints: args.endpoints,
        tls: args.tls.client_tls(),
        workers: args.workers.unwrap_or(defaults.workers).max(1),
        batch: args.batch.max(1),
        bind_batch: args.bind_batch.max(1),
        bind_concurrency: args.bind_concurrency.max(1),
        seed: args.seed,
        scheduler_name: args.scheduler_name,
        metrics_addr: args.metrics_addr,
        leader_elect: args.leadership.leader_elect(),
        events: !args.no_events,
        lease_ttl: args.leadership.lease_ttl(),
        identity: crate::leadership::identity(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(service::run(config, crate::signals::terminated()))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    /// What `skiff-launch` starts is what this command reads.
    #[test]
    fn the_launch_crates_command_line_parses_as_set() {
        use clap::Parser as _;
        use skiff_launch::SchedulerCommand;

        let cmd = SchedulerCommand {
            endpoints: vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()],
            tls: Some(skiff_launch::ClientCert {
                ca: "/c/ca.pem".into(),
                cert: "/c/x.pem".into(),
                key: "/c/x-key.pem".into(),
            }),
            metrics_addr: Some("127.0.0.1:3".parse().expect("address")),
            lease_ttl: Some(std::time::Duration::from_secs(2)),
            log: Some("info".into()),
        };
        let cli = crate::Cli::try_parse_from(std::iter::once("skiff".into()).chain(cmd.args()))
            .expect("the launch crate's argv parses");
        assert_eq!(cli.log.as_deref(), Some("info"));
        let a = match cli.command {
            crate::Command::Scheduler(a) => a,
            other => panic!("not `skiff scheduler`: {other:?}"),
        };
        assert_eq!(a.endpoints, cmd.endpoints);
        let tls = a.tls.client_tls().expect("tls");
        assert_eq!(tls.cert, cmd.tls.as_ref().map(|t| t.cert.clone()));
        assert_eq!(a.metrics_addr, cmd.metrics_addr);
        assert_eq!(Some(a.leadership.lease_ttl), cmd.lease_ttl);
    }
}
