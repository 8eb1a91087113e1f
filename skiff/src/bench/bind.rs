//! `skiff bench bind`: pods bound per second through a running cluster's batch Bind. Creates
//! the nodes and the pods through the cluster API, then binds the pods in calls of `--batch`
//! bindings, `--concurrency` calls in flight, and times each call.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use futures::StreamExt;
use skiff_proto::api::Kind;
use skiff_proto::client::ClusterClient;
use skiff_proto::cluster::v1::Binding;
use skiff_proto::cluster::v1::bind_result::Outcome;
use skiff_scheduler::bench::Latencies;

use super::fixtures::object;

#[derive(Debug, clap::Args)]
pub struct Args {
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

pub async fn run(a: Args) -> anyhow::Result<ExitCode> {
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
