//! `skiff bench`: benchmarks that print figures. `bind` measures batch Bind through a running
//! cluster's API, `api` its gRPC and Kubernetes REST faces side by side, `put` the etcd API,
//! `scheduler` the scheduler, `startup` pods end to end, `deployment` a Deployment
//! through the controller manager, `services` the Service proxy's programming latency,
//! `restart` a store's write pause across restarts and `soak` a cluster under hours of churn.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use futures::StreamExt;
use skiff_proto::api::{Kind, Object};
use skiff_proto::client::ClusterClient;
use skiff_proto::cluster::v1::Binding;
use skiff_proto::cluster::v1::bind_result::Outcome;
use skiff_scheduler::bench::Latencies;

/// The Ready nodes of the cluster the benchmark runs against; none is an error that says how
/// to start some.
pub(crate) async fn ready_nodes(api: &ClusterClient) -> anyhow::Result<usize> {
    let (nodes, _) = api
        .list(Kind::Node, &skiff_proto::client::ListParams::default())
        .await?;
    let ready = nodes
        .iter()
        .filter(|o| matches!(o, Object::Node(n) if n.is_ready()))
        .count();
    if ready == 0 {
        bail!("no Ready node: start agents first (`skiff up --nodes 1000`)");
    }
    Ok(ready)
}

/// A namespace of its own for one benchmark run, `<prefix>-<time>-<pid>`, created; returns
/// its name and the object as created.
pub(crate) async fn fresh_namespace(
    api: &ClusterClient,
    prefix: &str,
) -> anyhow::Result<(String, Object)> {
    let ns = format!(
        "{prefix}-{:x}-{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs(),
        std::process::id()
    );
    let created = api
        .create(&Object::from_json(
            Kind::Namespace,
            serde_json::json!({"metadata": {"name": ns}})
                .to_string()
                .as_bytes(),
        )?)
        .await
        .context("creating the benchmark namespace")?;
    Ok((ns, created))
}

/// A benchmark's pod: one pause container requesting `cpu` and 16Mi, labelled `app: <app>`,
/// with `grace` seconds to stop.
pub(crate) fn pod(
    ns: &str,
    name: &str,
    app: &str,
    cpu: &str,
    grace: i64,
) -> anyhow::Result<Object> {
    object(
        Kind::Pod,
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
            "spec": {
                "terminationGracePeriodSeconds": grace,
                "containers": [{"name": "main", "image": "localhost/skiff/pause:1",
                    "resources": {"requests": {"cpu": cpu, "memory": "16Mi"}}}]
            }
        }),
    )
}

/// Deletes a benchmark's namespace: its pods first, at once (`concurrency` deletes in
/// flight), since a namespace goes only once it is empty. What fails is said, not fatal.
pub(crate) async fn remove_namespace(api: &ClusterClient, ns: &str, concurrency: usize) {
    let pods = match api
        .list(
            Kind::Pod,
            &skiff_proto::client::ListParams::default().namespace(ns),
        )
        .await
    {
        Ok((pods, _)) => pods,
        Err(e) => {
            eprintln!("namespace {ns} left in place: listing its pods: {e}");
            return;
        }
    };
    futures::stream::iter(pods)
        .map(|p| async move {
            let _ = api
                .delete(Kind::Pod, ns, &p.metadata().name, 0, Some(0))
                .await;
        })
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<_>>()
        .await;
    if let Err(e) = api.delete(Kind::Namespace, "", ns, 0, None).await {
        eprintln!("namespace {ns} left in place: {e}");
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Pods bound per second through the cluster API's batch Bind.
    Bind(BindArgs),
    /// Pod creates and watch delivery through the gRPC cluster API and the Kubernetes REST
    /// API, side by side in one run.
    Api(crate::bench_api::Args),
    /// etcd v3 API load (put, range, txn-put, watch, lease-keepalive), against Skiff and
    /// etcd alike.
    Kv(crate::bench_kv::Args),
    /// Puts through the etcd v3 API (the same as `bench kv put`).
    Put(PutArgs),
    /// Scheduling throughput, in process or end to end through a store (`--e2e`).
    Scheduler(crate::bench_scheduler::Args),
    /// Pod startup latency: create → bound → Running, against a cluster with node agents.
    Startup(crate::bench_startup::Args),
    /// One Deployment of many replicas: create → every replica available, and the pods the
    /// controller manager created per second.
    Deployment(crate::bench_deployment::Args),
    /// The Service proxy's network programming latency: many Services' endpoints changing,
    /// real iptables rules written in a network namespace of the benchmark's own.
    Services(crate::bench_services::Args),
    /// A rolling restart of a store cluster under puts, with SIGTERM and with kill -9: the
    /// longest write pause each restart causes.
    Restart(crate::bench_restart::Args),
    /// Plot ops/s against clients from `scripts/race.sh` results (one line per system).
    Plot(PlotArgs),
    /// Hours of churn on a cluster of `skiff up`'s: pods created and deleted at a steady
    /// rate, a store member killed every few minutes; memory and database size charted.
    Soak(crate::bench_soak::Args),
}

#[derive(Debug, clap::Args)]
struct PlotArgs {
    /// The race's `results.jsonl`.
    #[arg(long)]
    results: std::path::PathBuf,
    /// Tests whose name starts with this make the points (x: clients, y: mean ops/s).
    #[arg(long, default_value = "sweep-put")]
    prefix: String,
    #[arg(long)]
    out: std::path::PathBuf,
    #[arg(
        long,
        default_value = "puts/s against concurrent clients (three members, fsync)"
    )]
    title: String,
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
    put: crate::bench_kv::PutArgs,
}

#[derive(Debug, clap::Args)]
struct BindArgs {
    /// Store members' client endpoints (host:port), comma-separated.
    #[arg(long, env = "SKIFF_ENDPOINTS", value_delimiter = ',', required = true)]
    endpoints: Vec<String>,
    /// Pods to create and bind.
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Nodes to spread them over.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Bindings per Bind call.
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Bind calls in flight at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let args = match args.what {
        // It starts its own cluster, with `up`'s runtime.
        What::Soak(a) => return crate::bench_soak::run(a),
        what => Args { what },
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match args.what {
        What::Bind(a) => rt.block_on(bind(a)),
        What::Api(a) => rt.block_on(crate::bench_api::run(a)),
        What::Kv(a) => rt.block_on(crate::bench_kv::run(a)),
        What::Put(a) => rt.block_on(crate::bench_kv::put_with(
            a.endpoints,
            a.conns,
            a.clients,
            a.put,
        )),
        What::Scheduler(a) => rt.block_on(crate::bench_scheduler::run(a)),
        What::Startup(a) => rt.block_on(crate::bench_startup::run(a)),
        What::Deployment(a) => rt.block_on(crate::bench_deployment::run(a)),
        What::Restart(a) => rt.block_on(crate::bench_restart::run(a)),
        What::Services(a) => rt.block_on(crate::bench_services::run(a)),
        What::Plot(a) => plot(&a),
        What::Soak(_) => unreachable!("run above"),
    }
}

fn object(kind: Kind, json: serde_json::Value) -> anyhow::Result<Object> {
    Ok(Object::from_json(kind, json.to_string().as_bytes())?)
}

async fn bind(a: BindArgs) -> anyhow::Result<ExitCode> {
    if a.batch == 0 || a.nodes == 0 || a.concurrency == 0 {
        bail!("--batch, --nodes and --concurrency must be at least 1");
    }
    let api = ClusterClient::connect(&a.endpoints)?;
    let run = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs()
    );
    let ns = format!("bench-{run}");
    api.create(&object(
        Kind::Namespace,
        serde_json::json!({"metadata": {"name": ns}}),
    )?)
    .await
    .context("creating the benchmark namespace")?;
    eprintln!(
        "creating {} nodes and {} pods in namespace {ns} …",
        a.nodes, a.pods
    );
    let nodes: Vec<String> = (0..a.nodes)
        .map(|i| format!("bench-{run}-{i:05}"))
        .collect();
    let created = futures::stream::iter(nodes.iter().cloned())
        .map(|n| {
            let api = api.clone();
            async move {
                api.create(&object(
                    Kind::Node,
                    serde_json::json!({"metadata": {"name": n},
                        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "100000"}}}),
                )?)
                .await
                .map_err(anyhow::Error::from)
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    created.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    let created = futures::stream::iter(0..a.pods)
        .map(|i| {
            let api = api.clone();
            let ns = ns.clone();
            async move {
                api.create(&object(
                    Kind::Pod,
                    serde_json::json!({"metadata": {"name": format!("p-{i:07}"), "namespace": ns},
                        "spec": {"containers": [{"name": "c", "image": "localhost/skiff/pause:1",
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}),
                )?)
                .await
                .map_err(anyhow::Error::from)
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    created.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    let batches: Vec<Vec<Binding>> = (0..a.pods)
        .collect::<Vec<_>>()
        .chunks(a.batch)
        .map(|c| {
            c.iter()
                .map(|i| Binding {
                    namespace: ns.clone(),
                    pod: format!("p-{i:07}"),
                    node: nodes[i % a.nodes].clone(),
                    pod_resource_version: 0,
                })
                .collect()
        })
        .collect();
    eprintln!("binding in {} calls of up to {} …", batches.len(), a.batch);
    let start = Instant::now();
    let results = futures::stream::iter(batches)
        .map(|b| {
            let api = api.clone();
            async move {
                let t = Instant::now();
                let r = api.bind(b).await;
                (t.elapsed(), r)
            }
        })
        .buffer_unordered(a.concurrency)
        .collect::<Vec<_>>()
        .await;
    let elapsed = start.elapsed();
    let mut latencies = Latencies::new();
    let mut bound = 0usize;
    let mut refused = 0usize;
    for (lat, r) in results {
        latencies.record(lat);
        for res in r? {
            if res.outcome == Outcome::Bound as i32 {
                bound += 1;
            } else {
                refused += 1;
            }
        }
    }
    let lat = latencies.percentiles();
    println!(
        "bind: {bound} pods bound ({refused} refused) in {:.2} s: {:.0} bindings/s; batch {}, concurrency {}; \
         Bind call latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        elapsed.as_secs_f64(),
        bound as f64 / elapsed.as_secs_f64(),
        a.batch,
        a.concurrency,
        lat.p50,
        lat.p99,
        lat.max,
    );
    Ok(if refused == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// One line per system: mean ops/s of the rounds at each client count.
fn plot(a: &PlotArgs) -> anyhow::Result<ExitCode> {
    use std::collections::BTreeMap;
    let text = std::fs::read_to_string(&a.results)
        .with_context(|| format!("reading {}", a.results.display()))?;
    let mut by_system: BTreeMap<String, BTreeMap<u64, Vec<f64>>> = BTreeMap::new();
    for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("{} line {}", a.results.display(), i + 1))?;
        let name = v["name"].as_str().unwrap_or_default();
        let (Some(system), Some(clients), Some(rate)) = (
            v["system"].as_str(),
            v["report"]["clients"].as_u64(),
            v["report"]["per_second"].as_f64(),
        ) else {
            continue;
        };
        if name.starts_with(&a.prefix) {
            by_system
                .entry(system.to_string())
                .or_default()
                .entry(clients)
                .or_default()
                .push(rate);
        }
    }
    if by_system.is_empty() {
        bail!("no results named {}* in {}", a.prefix, a.results.display());
    }
    let series: Vec<crate::plot::Series> = by_system
        .into_iter()
        .map(|(system, points)| crate::plot::Series {
            label: system,
            points: points
                .into_iter()
                .map(|(c, r)| (c as f64, r.iter().sum::<f64>() / r.len() as f64))
                .collect(),
        })
        .collect();
    crate::plot::lines(
        &a.out,
        &a.title,
        "concurrent clients",
        "operations per second",
        crate::plot::XAxis::Log,
        &series,
    )?;
    println!("wrote {}", a.out.display());
    Ok(ExitCode::SUCCESS)
}
