//! `skiff bench deployment`: one Deployment of many replicas against a running cluster with
//! node agents and the controller manager (`skiff up --nodes 1000`): the time from the
//! create to every replica available, the rate at which the ReplicaSet controller created
//! pods, read off a watch of the pods (first to last pod seen), the CPU the cluster's
//! processes on this machine spent until every replica was available (per role, and per pod),
//! and the time the garbage collector takes to remove them all once the Deployment is
//! deleted.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use skiff_proto::api::{Kind, Object, PodPhase};
use skiff_proto::client::{Event, ListParams, WatchParams};

use super::fixtures;
use crate::config::Endpoints;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Replicas of the Deployment.
    #[arg(long, default_value_t = 1000)]
    replicas: i32,
    /// CPU request of each pod.
    #[arg(long, default_value = "10m")]
    cpu: String,
    /// Give up after this long.
    #[arg(long, default_value = "30m", value_parser = skiff_proto::duration::parse)]
    timeout: Duration,
    /// Leave the Deployment (and its namespace) in place; without it, the Deployment is
    /// deleted and the time until its pods are gone is measured.
    #[arg(long)]
    keep: bool,
    /// Put a ResourceQuota on the Deployment's namespace (pods and CPU requests, with room
    /// for every replica), so that each pod is created through quota admission, as in a
    /// namespace of a cluster shared by teams.
    #[arg(long)]
    quota: bool,
    #[command(flatten)]
    endpoints: Endpoints,
}

/// When each milestone was first seen, from the create.
#[derive(Debug, Default)]
struct Progress {
    first_pod: Option<Duration>,
    last_pod: Option<Duration>,
    pods: usize,
    running: usize,
    /// Pods seen per whole second since the create.
    per_second: Vec<usize>,
}

pub async fn run(a: Args) -> Result<ExitCode> {
    if a.replicas <= 0 {
        bail!("--replicas must be at least 1");
    }
    let api = a.endpoints.resolve()?.connect()?;
    let ready = fixtures::ready_nodes(&api).await?;
    let (ns, _) = fixtures::fresh_namespace(&api, "deploy").await?;
    if a.quota {
        let quota = Object::from_json(
            Kind::ResourceQuota,
            serde_json::json!({
                "metadata": {"name": "bench", "namespace": ns},
                "spec": {"hard": {"pods": (2 * a.replicas).to_string(), "requests.cpu": "100000"}}
            })
            .to_string()
            .as_bytes(),
        )?;
        api.create(&quota)
            .await
            .context("creating the ResourceQuota")?;
    }
    let (_, revision) = api.list(Kind::Pod, &ListParams::default()).await?;
    let mut pods = api
        .watch(
            Kind::Pod,
            &WatchParams::default()
                .namespace(&ns)
                .resource_version(revision),
        )
        .await?;
    let deployment = Object::from_json(
        Kind::Deployment,
        serde_json::json!({
            "metadata": {"name": "bench", "namespace": ns},
            "spec": {
                "replicas": a.replicas,
                "selector": {"matchLabels": {"app": "deployment-bench"}},
                "template": {
                    "metadata": {"labels": {"app": "deployment-bench"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "main", "image": "localhost/skiff/pause:1",
                            "resources": {"requests": {"cpu": a.cpu, "memory": "16Mi"}}}]
                    }
                }
            }
        })
        .to_string()
        .as_bytes(),
    )?;
    eprintln!(
        "a Deployment of {} replicas in namespace {ns}{} on {ready} Ready nodes …",
        a.replicas,
        if a.quota {
            " (under a ResourceQuota)"
        } else {
            ""
        }
    );
    let cpu_before = super::cpu::Sample::now();
    let start = Instant::now();
    api.create(&deployment)
        .await
        .context("creating the Deployment")?;
    let want = usize::try_from(a.replicas)?;
    let mut p = Progress::default();
    let mut names = std::collections::HashSet::new();
    let mut running = std::collections::HashSet::new();
    let deadline = start + a.timeout;
    let mut last_report = Instant::now();
    let mut available_at = None;
    while Instant::now() < deadline {
        let next = tokio::time::timeout(Duration::from_secs(1), pods.next()).await;
        let at = start.elapsed();
        if let Ok(Some(e)) = next
            && let Event::Added(Object::Pod(pod)) | Event::Modified(Object::Pod(pod)) = e?
        {
            if names.insert(pod.metadata.name.clone()) {
                p.pods += 1;
                p.first_pod.get_or_insert(at);
                p.last_pod = Some(at);
                let second = at.as_secs() as usize;
                if p.per_second.len() <= second {
                    p.per_second.resize(second + 1, 0);
                }
                p.per_second[second] += 1;
            }
            if pod.phase() == Some(PodPhase::Running) && running.insert(pod.metadata.name) {
                p.running = running.len();
            }
        }
        if p.running >= want {
            // Running everywhere: now wait for the Deployment to say so.
            if let Some(Object::Deployment(d)) = api.get(Kind::Deployment, &ns, "bench").await? {
                let s = d.status.unwrap_or_default();
                if s.available_replicas == a.replicas && s.updated_replicas == a.replicas {
                    available_at = Some(start.elapsed());
                    break;
                }
            }
        }
        if last_report.elapsed() >= Duration::from_secs(5) {
            eprintln!(
                "  {:.0} s: {} pods created, {} Running",
                at.as_secs_f64(),
                p.pods,
                p.running
            );
            last_report = Instant::now();
        }
    }
    let cpu = super::cpu::Sample::now().since(&cpu_before);
    let created_span = match (p.first_pod, p.last_pod) {
        (Some(a), Some(b)) if b > a => (b - a).as_secs_f64(),
        _ => f64::NAN,
    };
    println!("deployment of {} replicas on {ready} nodes", a.replicas);
    println!(
        "  pods created            {} in {:.1} s after the first: {:.0} pods/s (peak {} in one second)",
        p.pods,
        created_span,
        p.pods as f64 / created_span,
        p.per_second.iter().max().copied().unwrap_or(0)
    );
    match available_at {
        Some(t) => println!(
            "  all available           {:.1} s after the create",
            t.as_secs_f64()
        ),
        None => println!(
            "  all available           not within {:?} ({} Running)",
            a.timeout, p.running
        ),
    }
    // Per pod created: the work the pods made, whether or not all became available.
    super::cpu::print_per_pod(&cpu, p.pods);
    if !a.keep {
        // The garbage collector takes the ReplicaSet and the pods (each deleted gracefully,
        // and gone once its agent has stopped it); the namespace goes once they have.
        let deleted = Instant::now();
        api.delete(Kind::Deployment, &ns, "bench", 0, None).await?;
        let in_ns = ListParams::default().namespace(&ns);
        let gone_by = deleted + a.timeout;
        let mut left = usize::MAX;
        while Instant::now() < gone_by {
            left = api.list(Kind::Pod, &in_ns).await?.0.len();
            if left == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        if left == 0 {
            println!(
                "  all collected           {:.1} s after the Deployment's delete",
                deleted.elapsed().as_secs_f64()
            );
            api.delete(Kind::Namespace, "", &ns, 0, None).await.ok();
        } else {
            println!(
                "  all collected           not within {:?} ({left} pods left)",
                a.timeout
            );
        }
    }
    Ok(if available_at.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
