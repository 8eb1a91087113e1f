//! `skiff up --demo`: a short tour of a running cluster, printed as the commands a user would
//! type and what they answer. Applies the example manifests, waits for the pods (and the
//! Deployment's) to run, describes one (its events), rolls the Deployment to a new image,
//! kills the store leader with SIGKILL and measures how long writes are refused, then
//! deletes the pods gracefully and the Deployment with its ReplicaSets and pods.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use skiff_proto::api::{Kind, Object, PodPhase};
use skiff_proto::client::{ClusterClient, ListParams};

use crate::config::Store;
use crate::up::{Cluster, Workload, wait_for};

/// The example manifests the demo applies (`node.yaml` is a node without an agent, for
/// scheduler experiments: left out).
const MANIFESTS: [&str; 5] = [
    "namespace-policy.yaml",
    "pod.yaml",
    "pod-web.yaml",
    "pod-placement.yaml",
    "deployment.yaml",
];

/// The example Deployment.
const DEPLOYMENT: &str = "hello-app";

/// Whether the example Deployment's current template runs on all its replicas, as `kubectl
/// rollout status` judges it.
async fn rolled_out(api: &ClusterClient) -> bool {
    let Ok(Some(Object::Deployment(d))) = api.get(Kind::Deployment, "default", DEPLOYMENT).await
    else {
        return false;
    };
    let s = d.status.clone().unwrap_or_default();
    let want = d.replicas();
    s.observed_generation >= d.metadata.generation
        && s.updated_replicas == want
        && s.replicas == want
        && s.available_replicas == want
}

/// Runs `skiff ARGS` as a user would, echoing the command and its output.
fn skiff(exe: &str, store: &Store, args: &[&str]) -> Result<()> {
    println!("$ skiff {}", args.join(" "));
    let out = Command::new(exe)
        .args(args)
        .env("SKIFF_ENDPOINTS", store.endpoints.join(","))
        .envs(store.tls_env("SKIFF"))
        .output()
        .with_context(|| format!("skiff {}", args.join(" ")))?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    println!();
    if !out.status.success() {
        bail!("skiff {} failed ({})", args.join(" "), out.status);
    }
    Ok(())
}

/// The demo as `up`'s workload: the tour of `dir`'s manifests, on the cluster once it is
/// ready; the cluster stops after it.
pub fn workload<'a>(dir: PathBuf) -> Workload<'a> {
    Box::new(move |rt, cluster| {
        let exe = std::env::current_exe().context("finding the skiff binary")?;
        let exe = exe.to_string_lossy().to_string();
        run(rt, cluster, &exe, &dir).map(|()| ExitCode::SUCCESS)
    })
}

fn run(rt: &tokio::runtime::Runtime, cluster: &mut Cluster, exe: &str, dir: &Path) -> Result<()> {
    let store = Store {
        endpoints: cluster.endpoints(),
        tls: cluster.client_tls(),
    };
    let endpoints = store.endpoints.clone();
    let api = store.connect()?;
    println!("==> the example workload");
    let mut apply = vec!["apply"];
    let files: Vec<String> = MANIFESTS
        .iter()
        .map(|m| dir.join(m).to_string_lossy().into_owned())
        .collect();
    for f in &files {
        apply.extend(["-f", f.as_str()]);
    }
    skiff(exe, &store, &apply)?;
    let started = Instant::now();
    rt.block_on(wait_for(
        cluster,
        Duration::from_secs(90),
        "the example pods to run",
        || async {
            match api.list(Kind::Pod, &ListParams::default()).await {
                Ok((pods, _)) => pods.iter().all(|o| match o {
                    Object::Pod(p) => {
                        matches!(p.phase(), Some(PodPhase::Running | PodPhase::Succeeded))
                            && p.status.as_ref().is_some_and(|s| {
                                s.container_statuses.iter().all(|c| {
                                    c.ready
                                        || c.state.as_ref().is_some_and(|s| s.terminated.is_some())
                                })
                            })
                    }
                    _ => true,
                }),
                Err(_) => false,
            }
        },
    ))?;
    rt.block_on(wait_for(
        cluster,
        Duration::from_secs(60),
        "the example Deployment to be available",
        || rolled_out(&api),
    ))?;
    println!(
        "every pod is running (or finished) {:.1} s after apply\n",
        started.elapsed().as_secs_f64()
    );
    skiff(exe, &store, &["get", "pods", "-A", "-o", "wide"])?;
    skiff(exe, &store, &["get", "deployments"])?;
    skiff(exe, &store, &["get", "nodes"])?;
    skiff(exe, &store, &["describe", "pod", "web"])?;
    // The same objects through the etcd v3 API, with etcd's own client.
    etcdctl(&store, &["endpoint", "status", "-w", "table"]);
    etcdctl(
        &store,
        &["get", "--prefix", "--keys-only", "/registry/pods/"],
    );

    println!("==> a rolling update: the Deployment's pod template changes");
    let rolling = Instant::now();
    rt.block_on(async {
        let Some(Object::Deployment(mut d)) =
            api.get(Kind::Deployment, "default", DEPLOYMENT).await?
        else {
            bail!("the example Deployment is gone");
        };
        // A new environment variable, as `kubectl set env deployment/hello-app VERSION=2`.
        let env: Vec<skiff_proto::api::pod::EnvVar> =
            serde_json::from_value(serde_json::json!([{"name": "VERSION", "value": "2"}]))?;
        d.spec.template.spec.containers[0].env = env;
        api.update(&Object::Deployment(d)).await?;
        Ok(())
    })?;
    rt.block_on(wait_for(
        cluster,
        Duration::from_secs(90),
        "the rolling update",
        || rolled_out(&api),
    ))?;
    println!(
        "rolled out one pod at a time (never fewer than 3 available) in {:.1} s\n",
        rolling.elapsed().as_secs_f64()
    );
    skiff(exe, &store, &["get", "replicasets", "-o", "wide"])?;

    println!("==> kill -9 of the store leader");
    let leader = rt.block_on(leader(&store))?;
    let killed_at = Instant::now();
    cluster.kill_member(leader);
    let others: Vec<String> = endpoints
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader)
        .map(|(_, e)| e.clone())
        .collect();
    let unavailable = rt.block_on(async {
        let mut client = store
            .etcd(
                &others,
                etcd_client::ConnectOptions::new().with_timeout(Duration::from_secs(2)),
            )
            .await?;
        loop {
            if client.put("/demo/after-kill", "ok", None).await.is_ok() {
                return Ok::<_, anyhow::Error>(killed_at.elapsed());
            }
            if killed_at.elapsed() > Duration::from_secs(30) {
                bail!("no write was accepted within 30 s of the leader's kill");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })?;
    println!(
        "member {} (the leader) killed; writes accepted again after {} ms",
        endpoints[leader],
        unavailable.as_millis()
    );
    // The supervisor starts the member again on its data directory; it catches up.
    let back = rt.block_on(wait_for(
        cluster,
        Duration::from_secs(30),
        "the killed member to serve again",
        || async {
            let one = [endpoints[leader].clone()];
            let Ok(mut c) = store.etcd(&one, etcd_client::ConnectOptions::new()).await else {
                return false;
            };
            let opts = etcd_client::GetOptions::new().with_serializable();
            matches!(c.get("/demo/after-kill", Some(opts)).await, Ok(r) if !r.kvs().is_empty())
        },
    ));
    back?;
    println!(
        "member {} restarted on its data directory and caught up ({:.1} s after the kill)\n",
        endpoints[leader],
        killed_at.elapsed().as_secs_f64()
    );

    println!("==> graceful deletion");
    skiff(exe, &store, &["delete", "pod", "web", "hello"])?;
    // The garbage collector takes the Deployment's ReplicaSets and pods after it.
    skiff(exe, &store, &["delete", "deployment", DEPLOYMENT])?;
    rt.block_on(wait_for(
        cluster,
        Duration::from_secs(60),
        "the garbage collector to take the Deployment's pods",
        || async {
            let selected = ListParams::default().labels(format!("app={DEPLOYMENT}"));
            matches!(api.list(Kind::Pod, &selected).await, Ok((pods, _)) if pods.is_empty())
        },
    ))?;
    skiff(exe, &store, &["get", "pods", "-A"])?;
    Ok(())
}

/// Runs Debian's `etcdctl` against the cluster when it is installed.
fn etcdctl(store: &Store, args: &[&str]) {
    let urls: Vec<String> = store.endpoints.iter().map(|e| store.url(e)).collect();
    let ep = format!("--endpoints={}", urls.join(","));
    let tls = if store.tls.is_some() {
        " (ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY: the admin's)"
    } else {
        ""
    };
    println!("$ ETCDCTL_API=3 etcdctl {ep} {}{tls}", args.join(" "));
    match Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .envs(store.tls_env("ETCDCTL"))
        .arg(&ep)
        .args(args)
        .output()
    {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            // Keys-only output separates keys with blank lines.
            for l in text.lines().filter(|l| !l.is_empty()) {
                println!("{l}");
            }
            eprint!("{}", String::from_utf8_lossy(&out.stderr));
        }
        Err(_) => println!("(etcdctl is not installed: apt-get install etcd-client)"),
    }
    println!();
}

/// The index (in `endpoints`) of the member that leads.
async fn leader(store: &Store) -> Result<usize> {
    for (i, e) in store.endpoints.iter().enumerate() {
        let mut c = store
            .etcd(std::slice::from_ref(e), etcd_client::ConnectOptions::new())
            .await?;
        let s = c.status().await?;
        let me = s.header().map_or(0, |h| h.member_id());
        if s.leader() == me {
            return Ok(i);
        }
    }
    bail!("no member says it leads")
}
