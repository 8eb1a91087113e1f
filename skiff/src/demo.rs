//! `skiff up --demo`: a short tour of a running cluster, printed as the commands a user would
//! type and what they answer. Applies the example manifests, waits for the pods to run,
//! describes one (its events), kills the store leader with SIGKILL and measures how long
//! writes are refused, then deletes the pods gracefully.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use skiff_proto::api::{Kind, Object, PodPhase};
use skiff_proto::client::{ClusterClient, ListParams};

use crate::up::{Cluster, wait_for};

/// The example manifests the demo applies (`node.yaml` is a node without an agent, for
/// scheduler experiments: left out).
const MANIFESTS: [&str; 4] = [
    "namespace-policy.yaml",
    "pod.yaml",
    "pod-web.yaml",
    "pod-placement.yaml",
];

/// Runs `skiff ARGS` as a user would, echoing the command and its output.
fn skiff(exe: &str, endpoints: &[String], args: &[&str]) -> Result<()> {
    println!("$ skiff {}", args.join(" "));
    let out = Command::new(exe)
        .args(args)
        .env("SKIFF_ENDPOINTS", endpoints.join(","))
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

pub fn run(
    rt: &tokio::runtime::Runtime,
    cluster: &mut Cluster,
    exe: &str,
    dir: &Path,
) -> Result<()> {
    let endpoints = cluster.endpoints();
    let api = ClusterClient::connect(&endpoints)?;
    println!("==> the example workload");
    let mut apply = vec!["apply"];
    let files: Vec<String> = MANIFESTS
        .iter()
        .map(|m| dir.join(m).to_string_lossy().into_owned())
        .collect();
    for f in &files {
        apply.extend(["-f", f.as_str()]);
    }
    skiff(exe, &endpoints, &apply)?;
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
    println!(
        "every pod is running (or finished) {:.1} s after apply\n",
        started.elapsed().as_secs_f64()
    );
    skiff(exe, &endpoints, &["get", "pods", "-A", "-o", "wide"])?;
    skiff(exe, &endpoints, &["get", "nodes"])?;
    skiff(exe, &endpoints, &["describe", "pod", "web"])?;
    // The same objects through the etcd v3 API, with etcd's own client.
    etcdctl(&endpoints, &["endpoint", "status", "-w", "table"]);
    etcdctl(
        &endpoints,
        &["get", "--prefix", "--keys-only", "/registry/pods/"],
    );

    println!("==> kill -9 of the store leader");
    let leader = rt.block_on(leader(&endpoints))?;
    let killed_at = Instant::now();
    cluster.kill_member(leader);
    let others: Vec<String> = endpoints
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader)
        .map(|(_, e)| e.clone())
        .collect();
    let unavailable = rt.block_on(async {
        let mut client = etcd_client::Client::connect(
            &others,
            Some(etcd_client::ConnectOptions::new().with_timeout(Duration::from_secs(2))),
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
            let Ok(mut c) = etcd_client::Client::connect([endpoints[leader].as_str()], None).await
            else {
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
    skiff(exe, &endpoints, &["delete", "pod", "web", "hello"])?;
    skiff(exe, &endpoints, &["get", "pods", "-A"])?;
    Ok(())
}

/// Runs Debian's `etcdctl` against the cluster when it is installed.
fn etcdctl(endpoints: &[String], args: &[&str]) {
    let ep = format!("--endpoints={}", endpoints.join(","));
    println!("$ ETCDCTL_API=3 etcdctl {ep} {}", args.join(" "));
    match Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
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
async fn leader(endpoints: &[String]) -> Result<usize> {
    for (i, e) in endpoints.iter().enumerate() {
        let mut c = etcd_client::Client::connect([e.as_str()], None).await?;
        let s = c.status().await?;
        let me = s.header().map_or(0, |h| h.member_id());
        if s.leader() == me {
            return Ok(i);
        }
    }
    bail!("no member says it leads")
}
