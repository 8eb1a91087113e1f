//! `skiff`: one binary for the whole control plane. `main` parses flags, sets up tracing and
//! hands off to the libraries; each subcommand lives in its own module.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use logging::LogFormat;

mod apiserver;
mod apply;
mod bench;
mod certs;
mod config;
mod controller_manager;
mod delete;
mod demo;
mod describe;
mod jepsen;
mod leadership;
mod logging;
mod node;
mod plot;
mod scheduler;
mod signals;
mod store;
mod token;
mod up;
mod validate;

/// Skiff: a compact Kubernetes control-plane core (store, scheduler, node agent) in one binary.
#[derive(Debug, Parser)]
#[command(name = "skiff", version = skiff_proto::VERSION, propagate_version = true)]
struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. `info` or `skiff_store=debug`; without it,
    /// `RUST_LOG`, else `warn,openraft=error`. A filter that does not parse is an error.
    #[arg(long, global = true, env = "SKIFF_LOG")]
    log: Option<String>,

    /// Log lines as text or as one JSON object per line (with the fields of every span).
    #[arg(long, global = true, env = "SKIFF_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start a local cluster: three store members, the scheduler, the controller manager and
    /// node agents (simulated, or containerd with `--runtime cri`), until Ctrl-C.
    Up(up::Args),
    /// Print the version of this binary and of the APIs it speaks.
    Version,
    /// Check manifests offline: decode, default and validate them, print what they would create.
    Validate(validate::Args),
    /// Run one member of the replicated store (etcd v3 API on the client URLs).
    Store(Box<store::Args>),
    /// Run Skiff's Kubernetes API server on its own, over any etcd v3 cluster
    /// (`--etcd-servers`).
    Apiserver(Box<apiserver::Args>),
    /// Make a CA and certificates for store members and clients (`https://` URLs).
    Certs(certs::Args),
    /// Bootstrap tokens for nodes joining the cluster (`skiff token create`).
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// Create (or update) the objects of manifests; all are validated first, and nothing is
    /// written if any is refused.
    Apply(apply::ApplyArgs),
    /// List objects (pods, nodes, namespaces, events) as a table, or one as YAML/JSON;
    /// `-w` follows changes.
    Get(apply::GetArgs),
    /// Show one pod or node in full, with its events.
    Describe(describe::Args),
    /// Delete objects; bound pods stop gracefully, and the command waits until they are gone.
    Delete(delete::Args),
    /// Run the scheduler against a store: place pending pods, bind them in batches.
    Scheduler(scheduler::Args),
    /// Run the controllers against a store: Deployments roll out ReplicaSets, ReplicaSets
    /// keep their pods.
    ControllerManager(controller_manager::Args),
    /// Benchmarks against a running cluster; each prints its figures.
    Bench(bench::Args),
    /// Fault-injection runs (partitions, kills, pauses, membership) with checked histories.
    Jepsen(jepsen::Args),
    /// Run the node agent: one node against containerd's CRI, or many simulated nodes.
    Node(Box<node::Args>),
    /// Print a container's log, read through the agent of the pod's node (like kubectl logs).
    Logs(node::LogsArgs),
    /// Build the busybox and pause images from busybox-static, or import image archives
    /// into containerd (no registry is reached).
    #[command(subcommand)]
    Image(node::ImageCommand),
}

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Bytes the program has allocated and not freed (jemalloc's `stats.allocated`).
fn heap_allocated_bytes() -> Option<u64> {
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    tikv_jemalloc_ctl::stats::allocated::read()
        .ok()
        .map(|b| b as u64)
}

fn main() -> ExitCode {
    skiff_store::server::set_heap_probe(heap_allocated_bytes);
    let cli = Cli::parse();
    if let Err(e) = logging::init(cli.log.as_deref(), cli.log_format) {
        eprintln!("error: {e:#}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Version => {
            // Written, not printed: `skiff version | head -1` closes the pipe early, which is
            // no error of ours.
            use std::io::Write as _;
            let _ = write!(
                std::io::stdout().lock(),
                "skiff {}\ncluster API: skiff.cluster.v1 (objects: core/v1)\n\
                 etcd API: v3 (etcdserverpb, mvccpb)\n",
                skiff_proto::VERSION
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Validate(args) => validate::run(&args),
        Command::Store(args) => store::run(*args),
        Command::Apiserver(args) => apiserver::run(*args),
        Command::Certs(args) => certs::run(&args),
        Command::Token(cmd) => token::run(cmd),
        Command::Apply(args) => apply::apply(&args),
        Command::Get(args) => apply::get(&args),
        Command::Describe(args) => describe::run(&args),
        Command::Delete(args) => delete::run(&args),
        // `up` runs the demo as it runs any workload, so it need not know the demo.
        Command::Up(args) => match args.demo_dir() {
            Some(dir) => {
                let demo = demo::workload(dir.to_path_buf());
                up::run_then(args, Some(demo))
            }
            None => up::run(args),
        },
        Command::Scheduler(args) => scheduler::run(args),
        Command::ControllerManager(args) => controller_manager::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Jepsen(args) => jepsen::run(args),
        Command::Node(args) => node::run(*args),
        Command::Logs(args) => node::logs_command(args),
        Command::Image(cmd) => node::image_command(cmd),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
