//! `skiff bench`: benchmarks that print figures. `bind` measures batch Bind through a running
//! cluster's API, `api` its gRPC and Kubernetes REST faces side by side, `put` the etcd API,
//! `scheduler` the scheduler, `startup` pods end to end, `deployment` a Deployment
//! through the controller manager, `services` the Service proxy's programming latency,
//! `restart` a store's write pause across restarts and `soak` a cluster under hours of churn.
//!
//! | module       | what                                                                     |
//! |--------------|--------------------------------------------------------------------------|
//! | this one     | [`Args`], [`run`]: the subcommands, each on the runtime it needs          |
//! | `api`        | the cluster's gRPC and Kubernetes REST faces side by side                |
//! | `bind`       | batch Bind through the cluster API                                        |
//! | `deployment` | one Deployment of many replicas through the controller manager            |
//! | `kv`         | etcd v3 API load (`kv`, `put`), against Skiff and etcd alike              |
//! | `restart`    | a store's longest write pause across rolling restarts                     |
//! | `scheduler`  | scheduling throughput, in process or end to end                          |
//! | `services`   | the Service proxy's network programming latency                          |
//! | `soak`       | a cluster of `skiff up`'s under hours of churn                            |
//! | `startup`    | pod startup latency end to end                                            |
//! | `race`       | `plot`: the chart of a `scripts/race.sh` run                              |
//! | `fixtures`   | what the benchmarks against a cluster share: Ready nodes, a namespace of a run's own, its pods |

use std::process::ExitCode;

use anyhow::Context;

mod api;
mod bind;
mod cpu;
mod deployment;
mod fixtures;
mod kinds;
mod kv;
mod race;
mod restart;
mod scheduler;
mod services;
mod soak;
mod startup;
mod workload;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Pods bound per second through the cluster API's batch Bind.
    Bind(bind::Args),
    /// Pod creates and watch delivery through the gRPC cluster API and the Kubernetes REST
    /// API, side by side in one run.
    Api(api::Args),
    /// REST creates and lists of a Pod, a ConfigMap and a custom resource (a CRD's), side
    /// by side in one run.
    Kinds(kinds::Args),
    /// etcd v3 API load (put, range, txn-put, watch, lease-keepalive), against Skiff and
    /// etcd alike.
    Kv(kv::Args),
    /// Puts through the etcd v3 API (the same as `bench kv put`).
    Put(PutArgs),
    /// Scheduling throughput, in process or end to end through a store (`--e2e`).
    Scheduler(scheduler::Args),
    /// Pod startup latency: create → bound → Running, against a cluster with node agents.
    Startup(startup::Args),
    /// One Deployment of many replicas: create → every replica available, and the pods the
    /// controller manager created per second.
    Deployment(deployment::Args),
    /// The workload controllers at scale: a Job of many completions, a DaemonSet created
    /// and rolled across every node, a namespace of many pods deleted.
    Workload(workload::Args),
    /// The Service proxy's network programming latency: many Services' endpoints changing,
    /// real iptables rules written in a network namespace of the benchmark's own.
    Services(services::Args),
    /// A rolling restart of a store cluster under puts, with SIGTERM and with kill -9: the
    /// longest write pause each restart causes.
    Restart(restart::Args),
    /// Plot ops/s against clients from `scripts/race.sh` results (one line per system).
    Plot(race::Args),
    /// Hours of churn on a cluster of `skiff up`'s: pods created and deleted at a steady
    /// rate, a store member killed every few minutes; memory and database size charted.
    Soak(soak::Args),
}

#[derive(Debug, clap::Args)]
struct PutArgs {
    /// Client endpoints (host:port), comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    endpoints: Vec<String>,
    /// gRPC connections, spread over the endpoints.
    #[arg(long, default_value_t = 1)]
    conns: usize,
    /// Concurrent clients, spread over the connections.
    #[arg(long, default_value_t = 1)]
    clients: usize,
    #[command(flatten)]
    put: kv::PutArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let args = match args.what {
        // It starts its own cluster, with `up`'s runtime.
        What::Soak(a) => return soak::run(a),
        what => Args { what },
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match args.what {
        What::Bind(a) => rt.block_on(bind::run(a)),
        What::Api(a) => rt.block_on(api::run(a)),
        What::Kinds(a) => rt.block_on(kinds::run(a)),
        What::Kv(a) => rt.block_on(kv::run(a)),
        What::Put(a) => rt.block_on(kv::put_with(a.endpoints, a.conns, a.clients, a.put)),
        What::Scheduler(a) => rt.block_on(scheduler::run(a)),
        What::Startup(a) => rt.block_on(startup::run(a)),
        What::Deployment(a) => rt.block_on(deployment::run(a)),
        What::Workload(a) => rt.block_on(workload::run(a)),
        What::Restart(a) => rt.block_on(restart::run(a)),
        What::Services(a) => rt.block_on(services::run(a)),
        What::Plot(a) => race::run(&a),
        What::Soak(_) => unreachable!("run above"),
    }
}
