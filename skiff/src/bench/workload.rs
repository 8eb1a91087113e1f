//! `skiff bench workload`: the workload controllers at scale against a running cluster with
//! node agents and the controller manager (`skiff up --nodes 1000`), each run in a namespace
//! of its own:
//! - `job`: a Job of many completions, many at once, each pod exiting at once: the time to
//!   `Complete` and completions per second;
//! - `daemonset`: a DaemonSet on every node (time to a pod available on each), then a new
//!   template rolled across them all within `maxUnavailable`;
//! - `namespace`: a namespace holding a Deployment of many pods, deleted: the time until the
//!   namespace controller has emptied it and it is gone.
//!
//! Each polls the objects' status (every 250 ms), so times are to that resolution.

use std::future::Future;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use skiff_proto::api::Kind;
use skiff_proto::client::{ClusterClient, ListParams};

use super::fixtures;
use crate::config::Endpoints;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
    /// Give up on a phase after this long.
    #[arg(long, default_value = "30m", value_parser = skiff_proto::duration::parse, global = true)]
    timeout: Duration,
    #[command(flatten)]
    endpoints: Endpoints,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// A Job whose pods exit 0 at once: create → `Complete`.
    Job {
        #[arg(long, default_value_t = 10_000)]
        completions: i64,
        #[arg(long, default_value_t = 1_000)]
        parallelism: i64,
    },
    /// A DaemonSet: create → a pod available on every node; then a template change rolled
    /// across every node.
    Daemonset {
        /// The rolling update's `maxUnavailable` (a count or a percentage).
        #[arg(long, default_value = "10%")]
        max_unavailable: String,
    },
    /// A namespace with a Deployment of `--pods` pods: delete → the namespace gone.
    Namespace {
        #[arg(long, default_value_t = 1_000)]
        pods: i64,
    },
}

const POLL: Duration = Duration::from_millis(250);

/// Polls `check` until it gives a value, printing `what` and the progress it reports every
/// 5 s; `None` when `timeout` passes first.
async fn until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(Option<T>, String)>>,
{
    let start = Instant::now();
    let mut said = Instant::now();
    while start.elapsed() < timeout {
        let (done, progress) = check().await?;
        if done.is_some() {
            return Ok(done);
        }
        if said.elapsed() >= Duration::from_secs(5) {
            eprintln!(
                "  {what}: {:.0} s, {progress}",
                start.elapsed().as_secs_f64()
            );
            said = Instant::now();
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(None)
}

fn kind(name: &str) -> Kind {
    Kind::from_name(name).expect("invariant: workload kinds are declared")
}

/// `path` of the object `name` of `kind` in `ns`, as an integer (0 when absent).
async fn status_number(api: &ClusterClient, k: Kind, ns: &str, name: &str, path: &str) -> i64 {
    match api.get(k, ns, name).await {
        Ok(Some(o)) => o
            .to_json_value()
            .pointer(path)
            .and_then(serde_json::Value::as_i64)
            .unwrap_or(0),
        _ => 0,
    }
}

pub async fn run(a: Args) -> Result<ExitCode> {
    let api = a.endpoints.resolve()?.connect()?;
    let ready = fixtures::ready_nodes(&api).await?;
    let done = match a.what {
        What::Job {
            completions,
            parallelism,
        } => job(&api, ready, completions, parallelism, a.timeout).await?,
        What::Daemonset { max_unavailable } => {
            daemonset(&api, ready, &max_unavailable, a.timeout).await?
        }
        What::Namespace { pods } => namespace(&api, ready, pods, a.timeout).await?,
    };
    Ok(if done {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn job(
    api: &ClusterClient,
    ready: usize,
    completions: i64,
    parallelism: i64,
    timeout: Duration,
) -> Result<bool> {
    if completions < 1 || parallelism < 1 {
        bail!("--completions and --parallelism must be at least 1");
    }
    let (ns, _) = fixtures::fresh_namespace(api, "job").await?;
    let job = fixtures::object(
        kind("Job"),
        serde_json::json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "bench", "namespace": ns},
            "spec": {
                "completions": completions, "parallelism": parallelism, "backoffLimit": 0,
                "template": {"spec": {
                    "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": "localhost/skiff/busybox:1",
                        "command": ["sh", "-c", "exit 0"],
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}
            }
        }),
    )?;
    eprintln!(
        "a Job of {completions} completions, {parallelism} at once, in {ns} on {ready} nodes …"
    );
    let start = Instant::now();
    api.create(&job).await.context("creating the Job")?;
    let complete = until("job", timeout, || async {
        let o = api.get(kind("Job"), &ns, "bench").await?;
        let v = o.map(|o| o.to_json_value()).unwrap_or_default();
        let succeeded = v
            .pointer("/status/succeeded")
            .and_then(serde_json::Value::as_i64)
            .unwrap_or(0);
        let finished = v
            .pointer("/status/conditions")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c["status"] == "True" && (c["type"] == "Complete" || c["type"] == "Failed"))
            .map(|c| c["type"].as_str().unwrap_or_default().to_owned());
        Ok((finished, format!("{succeeded} succeeded")))
    })
    .await?;
    let took = start.elapsed().as_secs_f64();
    println!("job of {completions} completions, parallelism {parallelism}, on {ready} nodes");
    let ok = complete.as_deref() == Some("Complete");
    match complete {
        Some(c) => println!(
            "  {c:<22}{took:.1} s after the create: {:.0} completions/s",
            completions as f64 / took
        ),
        None => println!("  Complete              not within {timeout:?}"),
    }
    fixtures::remove_namespace(api, &ns, 256).await;
    Ok(ok)
}

async fn daemonset(
    api: &ClusterClient,
    ready: usize,
    max_unavailable: &str,
    timeout: Duration,
) -> Result<bool> {
    let (ns, _) = fixtures::fresh_namespace(api, "daemonset").await?;
    let unavailable: serde_json::Value = match max_unavailable.parse::<i64>() {
        Ok(n) => n.into(),
        Err(_) => max_unavailable.into(),
    };
    let spec = |version: &str| {
        serde_json::json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "bench", "namespace": ns},
            "spec": {
                "selector": {"matchLabels": {"app": "daemonset-bench"}},
                "updateStrategy": {"type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": unavailable}},
                "template": {
                    "metadata": {"labels": {"app": "daemonset-bench"},
                                 "annotations": {"bench/version": version}},
                    "spec": {"terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "main", "image": "localhost/skiff/pause:1",
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}
            }
        })
    };
    eprintln!("a DaemonSet in {ns} on {ready} nodes …");
    let ds = kind("DaemonSet");
    let start = Instant::now();
    let created = api
        .create(&fixtures::object(ds, spec("1"))?)
        .await
        .context("creating the DaemonSet")?;
    // Every node scheduled, every pod available, as the controller counts them.
    let settled = |generation: i64| {
        let ns = ns.clone();
        move || {
            let ns = ns.clone();
            async move {
                let o = api.get(ds, &ns, "bench").await?;
                let v = o.map(|o| o.to_json_value()).unwrap_or_default();
                let n = |p: &str| {
                    v.pointer(p)
                        .and_then(serde_json::Value::as_i64)
                        .unwrap_or(-1)
                };
                let desired = n("/status/desiredNumberScheduled");
                let done = n("/status/observedGeneration") >= generation
                    && desired > 0
                    && n("/status/updatedNumberScheduled") == desired
                    && n("/status/numberAvailable") == desired
                    && n("/status/numberUnavailable") <= 0;
                let progress = format!(
                    "{} updated, {} available of {desired}",
                    n("/status/updatedNumberScheduled"),
                    n("/status/numberAvailable")
                );
                Ok((done.then_some(desired), progress))
            }
        }
    };
    let first = created.metadata().generation.unwrap_or(1);
    let on_all = until("daemonset", timeout, settled(first)).await?;
    let rolled_out = start.elapsed().as_secs_f64();
    println!("daemonset on {ready} nodes, maxUnavailable {max_unavailable}");
    let Some(desired) = on_all else {
        println!("  available everywhere  not within {timeout:?}");
        fixtures::remove_namespace(api, &ns, 256).await;
        return Ok(false);
    };
    println!("  available on {desired:<5}   {rolled_out:.1} s after the create");
    let mut current = api
        .get(ds, &ns, "bench")
        .await?
        .context("the DaemonSet is gone")?
        .to_json_value();
    current["spec"]["template"]["metadata"]["annotations"]["bench/version"] = "2".into();
    let updated = api
        .update(&fixtures::object(ds, current)?)
        .await
        .context("updating the DaemonSet's template")?;
    let start = Instant::now();
    let rolled = until(
        "rollout",
        timeout,
        settled(updated.metadata().generation.unwrap_or(2)),
    )
    .await?;
    let took = start.elapsed().as_secs_f64();
    let ok = rolled.is_some();
    if ok {
        println!(
            "  rolled across {desired:<5}  {took:.1} s after the update: {:.0} pods replaced/s",
            desired as f64 / took
        );
    } else {
        println!("  rolled across         not within {timeout:?}");
    }
    fixtures::remove_namespace(api, &ns, 256).await;
    Ok(ok)
}

async fn namespace(
    api: &ClusterClient,
    ready: usize,
    pods: i64,
    timeout: Duration,
) -> Result<bool> {
    if pods < 1 {
        bail!("--pods must be at least 1");
    }
    let (ns, _) = fixtures::fresh_namespace(api, "ns").await?;
    let deployment = fixtures::object(
        Kind::Deployment,
        serde_json::json!({
            "metadata": {"name": "bench", "namespace": ns},
            "spec": {
                "replicas": pods,
                "selector": {"matchLabels": {"app": "namespace-bench"}},
                "template": {
                    "metadata": {"labels": {"app": "namespace-bench"}},
                    "spec": {"terminationGracePeriodSeconds": 30,
                        "containers": [{"name": "main", "image": "localhost/skiff/pause:1",
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}
            }
        }),
    )?;
    eprintln!("a Deployment of {pods} pods in {ns} on {ready} nodes …");
    api.create(&deployment)
        .await
        .context("creating the Deployment")?;
    let available = until("deployment", timeout, || async {
        let n = status_number(
            api,
            Kind::Deployment,
            &ns,
            "bench",
            "/status/availableReplicas",
        )
        .await;
        Ok(((n >= pods).then_some(()), format!("{n} available")))
    })
    .await?;
    println!("namespace of {pods} pods on {ready} nodes");
    if available.is_none() {
        println!("  available             not within {timeout:?}");
        fixtures::remove_namespace(api, &ns, 256).await;
        return Ok(false);
    }
    let start = Instant::now();
    api.delete(Kind::Namespace, "", &ns, 0, None)
        .await
        .context("deleting the namespace")?;
    let in_ns = ListParams::default().namespace(&ns);
    let emptied = std::cell::Cell::new(None);
    let gone = until("namespace", timeout, || async {
        let left = api.list(Kind::Pod, &in_ns).await?.0.len();
        if left == 0 && emptied.get().is_none() {
            emptied.set(Some(start.elapsed()));
        }
        let exists = api.get(Kind::Namespace, "", &ns).await?.is_some();
        Ok(((!exists).then_some(()), format!("{left} pods left")))
    })
    .await?;
    let took = start.elapsed().as_secs_f64();
    if let Some(t) = emptied.get() {
        println!(
            "  pods gone             {:.1} s after the delete (each stopped by its agent)",
            t.as_secs_f64()
        );
    }
    match gone {
        Some(()) => println!("  namespace gone        {took:.1} s after the delete"),
        None => println!("  namespace gone        not within {timeout:?}"),
    }
    Ok(gone.is_some())
}
