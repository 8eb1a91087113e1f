//! `skiff bench startup`: pod startup latency end to end, the figure of Kubernetes' pod
//! startup SLO (p99 ≤ 5 s from creation to running, observed through a watch). Creates pods
//! through the cluster API against a cluster with node agents (`skiff up --nodes 1000` for
//! simulated ones), and times each pod from the moment its create was sent to the watch
//! event that shows it bound, and the one that shows it Running. Prints the CPU time of
//! every `skiff` process on the machine by role over the same window, per pod.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::StreamExt;
use parking_lot::Mutex;
use skiff_proto::api::{Kind, Object, PodPhase};
use skiff_proto::client::{Event, ListParams, WatchParams};

use super::fixtures;
use crate::config::Endpoints;
use skiff_scheduler::bench::Latencies;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Pods to create.
    #[arg(long, default_value_t = 1000)]
    pods: usize,
    /// Creations per second (0: as fast as the store takes them).
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Creations in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// CPU request of each pod.
    #[arg(long, default_value = "10m")]
    cpu: String,
    /// Give up on pods not Running after this long.
    #[arg(long, default_value = "10m", value_parser = skiff_proto::duration::parse)]
    timeout: Duration,
    /// Leave the pods (and their namespace) in place.
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    endpoints: Endpoints,
}

#[derive(Debug, Default)]
struct Seen {
    created: HashMap<String, Instant>,
    bound: HashMap<String, (Instant, String)>,
    running: HashMap<String, Instant>,
}

fn line(what: &str, d: Vec<Duration>) -> String {
    let p = d.iter().collect::<Latencies>().percentiles();
    format!(
        "  {what:<28} p50 {:>7.0} ms   p90 {:>7.0} ms   p99 {:>7.0} ms   max {:>7.0} ms",
        p.p50, p.p90, p.p99, p.max
    )
}

pub async fn run(a: Args) -> Result<ExitCode> {
    if a.pods == 0 || a.concurrency == 0 {
        bail!("--pods and --concurrency must be at least 1");
    }
    let api = a.endpoints.resolve()?.connect()?;
    let ready = fixtures::ready_nodes(&api).await?;
    let (_, revision) = api.list(Kind::Pod, &ListParams::default()).await?;
    let (ns, _) = fixtures::fresh_namespace(&api, "startup").await?;
    eprintln!(
        "{} pods into namespace {ns} on {ready} Ready nodes, {} …",
        a.pods,
        if a.rate > 0.0 {
            format!("{} per second", a.rate)
        } else {
            "as fast as they are taken".into()
        }
    );

    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut events = api
        .watch(
            Kind::Pod,
            &WatchParams::default()
                .namespace(&ns)
                .resource_version(revision),
        )
        .await?;
    let (done_tx, mut done_rx) = tokio::sync::watch::channel(0usize);
    let watcher = {
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Some(e) = events.next().await {
                let (Event::Added(Object::Pod(p)) | Event::Modified(Object::Pod(p))) = e? else {
                    continue;
                };
                let now = Instant::now();
                let mut s = seen.lock();
                let name = p.metadata.name.clone();
                if !p.spec.node_name.is_empty() && !s.bound.contains_key(&name) {
                    s.bound
                        .insert(name.clone(), (now, p.spec.node_name.clone()));
                }
                let running = p.phase() == Some(PodPhase::Running);
                if running && !s.running.contains_key(&name) {
                    s.running.insert(name, now);
                    let n = s.running.len();
                    drop(s);
                    let _ = done_tx.send(n);
                }
            }
            Ok::<_, anyhow::Error>(())
        })
    };

    let cpu_before = super::cpu::Sample::now();
    let start = Instant::now();
    let interval = (a.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / a.rate));
    let results = futures::stream::iter(0..a.pods)
        .map(|i| {
            let (api, seen, ns, cpu) = (api.clone(), seen.clone(), ns.clone(), a.cpu.clone());
            async move {
                if let Some(step) = interval {
                    tokio::time::sleep_until((start + step * i as u32).into()).await;
                }
                let name = format!("p-{i:06}");
                let object = fixtures::pod(&ns, &name, "startup-bench", &cpu, 0)?;
                seen.lock().created.insert(name, Instant::now());
                api.create(&object).await.map_err(anyhow::Error::from)
            }
        })
        .buffer_unordered(a.concurrency)
        .collect::<Vec<_>>()
        .await;
    let created_in = start.elapsed();
    let failed = results.iter().filter(|r| r.is_err()).count();
    if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
        eprintln!("{failed} creates failed, the first: {e:#}");
    }
    let want = a.pods - failed;
    eprintln!(
        "created {want} pods in {:.1} s ({:.0}/s); waiting for them to run …",
        created_in.as_secs_f64(),
        want as f64 / created_in.as_secs_f64()
    );
    let deadline = Instant::now() + a.timeout;
    let mut last_report = Instant::now();
    loop {
        let n = *done_rx.borrow_and_update();
        if n >= want {
            break;
        }
        if Instant::now() >= deadline {
            eprintln!("timed out with {n} of {want} Running");
            break;
        }
        if last_report.elapsed() >= Duration::from_secs(5) {
            eprintln!(
                "  {n} of {want} Running after {:.0} s",
                start.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), done_rx.changed()).await;
    }
    let all_in = start.elapsed();
    let cpu = super::cpu::Sample::now().since(&cpu_before);
    watcher.abort();
    // The writes the pods cost: store revisions (one per write request that changed
    // something) from before the first create to the last pod Running, and over the next
    // 2 s, when the last events and statuses land. Nodes' heartbeats count too.
    let at_running = api.list(Kind::Namespace, &ListParams::default()).await?.1;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = api.list(Kind::Namespace, &ListParams::default()).await?.1;

    let complete = {
        let s = seen.lock();
        let mut to_bound = Vec::new();
        let mut to_running = Vec::new();
        let mut per_node: HashMap<&str, usize> = HashMap::new();
        for (name, created) in &s.created {
            if let Some((t, node)) = s.bound.get(name) {
                to_bound.push(t.saturating_duration_since(*created));
                *per_node.entry(node.as_str()).or_default() += 1;
            }
            if let Some(t) = s.running.get(name) {
                to_running.push(t.saturating_duration_since(*created));
            }
        }
        let running = to_running.len();
        println!(
            "startup: {running} of {} pods Running in {:.1} s ({:.0} pods/s end to end); created in {:.1} s ({:.0}/s), concurrency {}",
            a.pods,
            all_in.as_secs_f64(),
            running as f64 / all_in.as_secs_f64(),
            created_in.as_secs_f64(),
            want as f64 / created_in.as_secs_f64(),
            a.concurrency
        );
        println!(
            "  store revisions: {:.1} per pod to the last Running, {:.1} with the next 2 s",
            (at_running - revision) as f64 / want.max(1) as f64,
            (settled - revision) as f64 / want.max(1) as f64
        );
        println!("{}", line("create sent → bound", to_bound));
        println!("{}", line("create sent → Running", to_running));
        let (min, max) = per_node
            .values()
            .fold((usize::MAX, 0), |(lo, hi), n| (lo.min(*n), hi.max(*n)));
        println!(
            "  spread: {} nodes used of {ready}, {}..{max} pods per node",
            per_node.len(),
            if per_node.is_empty() { 0 } else { min }
        );
        // From the first create to the last pod Running, per pod created.
        super::cpu::print_per_pod(&cpu, want);
        running == a.pods
    };

    if !a.keep {
        eprintln!("deleting the benchmark's pods …");
        fixtures::remove_namespace(&api, &ns, a.concurrency).await;
    }
    Ok(if complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
