//! `skiff bench scheduler`: scheduling throughput in process (synthetic nodes and pods
//! straight into the scheduler's queue) or end to end through a running store (`--e2e`:
//! Node and Pod objects created through the cluster API, the scheduler binding them).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use skiff_proto::api::{Kind, Object};
use skiff_proto::client::{ClusterClient, Event, ListParams, WatchParams};
use skiff_scheduler::bench::{self, Latencies, Report};
use skiff_scheduler::service;
use skiff_scheduler::synth::{self, Profile};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Nodes; several (comma-separated) run one after another and make a sweep.
    #[arg(long, value_delimiter = ',', default_value = "5000")]
    nodes: Vec<usize>,
    /// Pods to schedule.
    #[arg(long, default_value_t = 100_000)]
    pods: usize,
    /// Worker threads (default: one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// Most pods of one signature per batch.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// basic, affinity, anti-affinity, spread, taints or mixed.
    #[arg(long, default_value = "basic")]
    profile: Profile,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run the kernels' baseline (scalar) build instead of the best for this CPU.
    #[arg(long)]
    scalar: bool,
    /// Print JSON, one object per run.
    #[arg(long)]
    json: bool,
    /// Write an SVG plot of pods/s against nodes (for a sweep).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Through a running store: create the nodes and pods with the cluster API and let an
    /// in-process scheduler bind them.
    #[arg(long, requires = "endpoints")]
    e2e: bool,
    /// Store members' client endpoints, for `--e2e`.
    #[arg(long, env = "SKIFF_ENDPOINTS", value_delimiter = ',')]
    endpoints: Vec<String>,
    /// Pod creations in flight at once, for `--e2e`.
    #[arg(long, default_value_t = 256)]
    create_concurrency: usize,
    /// For `--e2e`: create every pod first, then start the scheduler, and time from its
    /// start to the last binding (scheduling and Bind throughput, without the creation rate
    /// as the limit).
    #[arg(long)]
    precreate: bool,
    /// Preemption instead: the nodes full of `--per-node` pods of priority 0, then `--pods`
    /// pods of priority 1000 that each need the room of `--victims-each` of them.
    #[arg(long, conflicts_with = "e2e")]
    preemption: bool,
    /// Pods of priority 0 on each node, for `--preemption`.
    #[arg(long, default_value_t = 30)]
    per_node: usize,
    /// Victims each preemptor needs, for `--preemption`.
    #[arg(long, default_value_t = 2)]
    victims_each: usize,
}

/// `--preemption`: one run per `--nodes` value, each printed as it ends.
async fn preemption(a: &Args, workers: usize) -> anyhow::Result<ExitCode> {
    if a.victims_each > a.per_node {
        bail!("--victims-each must be at most --per-node: a preemptor must fit on a node");
    }
    let mut failed = false;
    for &nodes in &a.nodes {
        let config = bench::PreemptionConfig {
            nodes,
            per_node: a.per_node,
            pods: a.pods.min(nodes * a.per_node / a.victims_each.max(1)),
            victims_each: a.victims_each,
            workers,
            seed: a.seed,
        };
        let r = tokio::task::spawn_blocking(move || bench::preemption(&config)).await?;
        if a.json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            println!(
                "preemption: {} preemptors on {} nodes holding {} pods of lower priority, {} workers",
                r.preemptors, r.nodes, r.pods_on_nodes, r.workers
            );
            println!(
                "  {:.0} nominations/s ({:.3} s); nominated {}, victims {}, wrong {}",
                r.nominations_per_second, r.seconds, r.nominated, r.victims, r.wrong
            );
            let l = &r.attempt_ms;
            println!(
                "  attempt latency ms (filters + dry run over every node): p50 {:.3} p90 {:.3} p99 {:.3} max {:.3}",
                l.p50, l.p90, l.p99, l.max
            );
        }
        failed |= r.wrong > 0 || r.nominated < r.preemptors;
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn progress_bar(total: usize, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(total as u64);
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "{what} {{bar:40}} {{pos}}/{{len}} pods {{per_sec}} eta {{eta}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

fn print_report(r: &Report, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(r)?);
        return Ok(());
    }
    println!(
        "scheduler {} profile: {} pods on {} nodes, {} workers, batch {}, kernels {}",
        r.profile, r.pods, r.nodes, r.workers, r.batch, r.kernels
    );
    println!(
        "  {:.0} pods/s ({:.3} s); placed {}, unschedulable {}, conflicts re-queued {}, batches {}",
        r.pods_per_second, r.seconds, r.placed, r.unschedulable, r.conflicts, r.batches
    );
    let a = &r.attempt_ms;
    println!(
        "  attempt latency ms: p50 {:.3} p90 {:.3} p99 {:.3} p99.9 {:.3} max {:.3}",
        a.p50, a.p90, a.p99, a.p999, a.max
    );
    let u = r.cpu_utilisation;
    println!(
        "  cpu requested/allocatable per node: min {:.3} mean {:.3} max {:.3} stddev {:.3}; overcommitted nodes {}",
        u[0], u[1], u[2], u[3], r.overcommitted_nodes
    );
    Ok(())
}

pub async fn run(a: Args) -> anyhow::Result<ExitCode> {
    if a.pods == 0 || a.nodes.contains(&0) {
        bail!("--pods and --nodes must be at least 1");
    }
    let workers = a
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    if a.e2e {
        return e2e(&a, workers).await;
    }
    if a.preemption {
        return preemption(&a, workers).await;
    }
    let mut points = Vec::new();
    let mut failed = false;
    for &nodes in &a.nodes {
        let config = bench::Config {
            nodes,
            pods: a.pods,
            workers,
            batch: a.batch.max(1),
            profile: a.profile,
            seed: a.seed,
            scalar: a.scalar,
        };
        let pb = progress_bar(a.pods, &format!("{nodes} nodes"));
        let p = pb.clone();
        let report = tokio::task::spawn_blocking(move || {
            bench::run(&config, move |n| p.set_position(n as u64))
        })
        .await?;
        pb.finish_and_clear();
        print_report(&report, a.json)?;
        failed |= report.overcommitted_nodes > 0;
        points.push((nodes, report.pods_per_second));
    }
    if let Some(path) = &a.plot {
        plot(
            path,
            &format!(
                "skiff scheduler, {} profile, {} pods, {workers} workers",
                a.profile.name(),
                a.pods
            ),
            &points,
        )?;
        eprintln!("plot written to {}", path.display());
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Pods/s against nodes, log-scaled nodes axis.
fn plot(path: &std::path::Path, title: &str, points: &[(usize, f64)]) -> anyhow::Result<()> {
    crate::plot::lines(
        path,
        title,
        "nodes",
        "pods scheduled per second",
        crate::plot::XAxis::Log,
        &[crate::plot::Series {
            label: "pods/s".into(),
            points: points.iter().map(|(n, p)| (*n as f64, *p)).collect(),
        }],
    )
}

/// Through the store: nodes and pods created with the cluster API, an in-process scheduler
/// binding them; pods/s from the first creation to the last binding seen by a watch.
async fn e2e(a: &Args, workers: usize) -> anyhow::Result<ExitCode> {
    let nodes = *a.nodes.first().unwrap_or(&1000);
    let api = ClusterClient::connect(&a.endpoints)?;
    let run = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs()
    );
    let ns = format!("sched-{run}");
    let namespace = Object::from_json(
        Kind::Namespace,
        serde_json::json!({"metadata": {"name": ns}})
            .to_string()
            .as_bytes(),
    )?;
    api.create(&namespace)
        .await
        .context("creating the benchmark namespace")?;
    let (mut node_objs, pod_objs) = synth::workload(nodes, a.pods, a.profile, a.seed);
    for n in &mut node_objs {
        n.metadata.name = format!("{}-{run}", n.metadata.name);
        if let Some(h) = n.metadata.labels.get_mut("kubernetes.io/hostname") {
            *h = n.metadata.name.clone();
        }
    }
    let node_names: Vec<String> = node_objs.iter().map(|n| n.metadata.name.clone()).collect();
    eprintln!("creating {nodes} nodes …");
    let results: Vec<_> = futures::stream::iter(node_objs)
        .map(|n| {
            let api = api.clone();
            async move { api.create(&Object::Node(n)).await }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    for r in results {
        r.context("creating a node")?;
    }
    // The scheduler, in this process, against the store (started after the pods are
    // created with --precreate).
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let config = service::Config {
        endpoints: a.endpoints.clone(),
        workers,
        batch: a.batch.max(1),
        ..service::Config::default()
    };
    let mut pending_start = Some(move || {
        tokio::spawn(service::run(config, async {
            let _ = stop_rx.await;
        }))
    });
    let mut scheduler = None;
    if !a.precreate {
        scheduler = pending_start.take().map(|f| f());
    }
    // Watch the namespace's pods for their bindings, from now.
    let (_, rev) = api
        .list(Kind::Pod, &ListParams::default().namespace(&ns))
        .await?;
    let mut watch = Box::pin(
        api.watch(
            Kind::Pod,
            &WatchParams::default().namespace(&ns).resource_version(rev),
        )
        .await?,
    );
    let created_at: Arc<parking_lot::Mutex<HashMap<String, Instant>>> = Arc::default();
    let total = a.pods;
    let pb = progress_bar(total, "bound");
    let watcher = {
        let created_at = created_at.clone();
        let pb = pb.clone();
        tokio::spawn(async move {
            let mut bound: HashMap<String, Duration> = HashMap::new();
            let mut last = Instant::now();
            while bound.len() < total {
                let Some(e) = watch.next().await else { break };
                let Ok(Event::Modified(Object::Pod(p))) = e else {
                    continue;
                };
                if p.spec.node_name.is_empty() || bound.contains_key(&p.metadata.name) {
                    continue;
                }
                let now = Instant::now();
                let since = created_at
                    .lock()
                    .get(&p.metadata.name)
                    .map_or(Duration::ZERO, |t| now.duration_since(*t));
                bound.insert(p.metadata.name.clone(), since);
                last = now;
                pb.set_position(bound.len() as u64);
            }
            (bound, last)
        })
    };
    let start = Instant::now();
    let results: Vec<_> = futures::stream::iter(pod_objs)
        .map(|mut p| {
            let api = api.clone();
            let ns = ns.clone();
            let created_at = created_at.clone();
            async move {
                p.metadata.namespace = ns;
                p.metadata.uid.clear();
                let name = p.metadata.name.clone();
                let t = Instant::now();
                let r = api.create(&Object::Pod(p)).await;
                created_at.lock().insert(name, t);
                r
            }
        })
        .buffer_unordered(a.create_concurrency.max(1))
        .collect()
        .await;
    let created_in = start.elapsed();
    let start = if a.precreate {
        scheduler = pending_start.take().map(|f| f());
        Instant::now()
    } else {
        start
    };
    let mut create_errors = 0;
    for r in results {
        if let Err(e) = r {
            create_errors += 1;
            tracing::warn!(error = %e, "creating a pod");
        }
    }
    let expected = total - create_errors;
    let (bound, last) = tokio::time::timeout(Duration::from_secs(600), watcher)
        .await
        .context("pods not all bound within 10 minutes")??;
    pb.finish_and_clear();
    let _ = stop_tx.send(());
    if let Some(s) = scheduler {
        let _ = s.await;
    }
    let seconds = last.duration_since(start).as_secs_f64();
    let latency = bound.values().collect::<Latencies>().percentiles();
    println!(
        "scheduler e2e {} profile through the store: {} pods on {nodes} nodes, {workers} workers",
        a.profile.name(),
        total
    );
    println!(
        "  created {} pods in {:.2} s ({:.0}/s, {create_errors} errors); bound {} in {:.2} s from {}: {:.0} pods/s",
        expected,
        created_in.as_secs_f64(),
        expected as f64 / created_in.as_secs_f64(),
        bound.len(),
        seconds,
        if a.precreate {
            "the scheduler's start"
        } else {
            "the first creation"
        },
        bound.len() as f64 / seconds.max(1e-9)
    );
    println!(
        "  created → bound latency ms: p50 {:.1} p90 {:.1} p99 {:.1} p99.9 {:.1} max {:.1}",
        latency.p50, latency.p90, latency.p99, latency.p999, latency.max
    );
    eprintln!("deleting the benchmark's pods …");
    let names: Vec<String> = bound.keys().cloned().collect();
    futures::stream::iter(names)
        .map(|n| {
            let api = api.clone();
            let ns = ns.clone();
            async move { api.delete(Kind::Pod, &ns, &n, 0, Some(0)).await }
        })
        .buffer_unordered(256)
        .for_each(|_| async {})
        .await;
    futures::stream::iter(node_names)
        .map(|n| {
            let api = api.clone();
            async move { api.delete(Kind::Node, "", &n, 0, None).await }
        })
        .buffer_unordered(64)
        .for_each(|_| async {})
        .await;
    Ok(if bound.len() == expected {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
