//! `skiff bench services`: the Service proxy's network programming latency at scale, against
//! a running cluster. The node agent's own proxy (`skiff_node::proxy`) runs in this process,
//! writing real iptables rules in a network namespace of its own, while the benchmark keeps
//! the EndpointSlices of many selector-less Services, as any controller may:
//!
//! ```text
//!  N Services × M endpoints (one of each not ready) ─► the proxy programs them all
//!  then, every --interval, one Service's last endpoint flips ready ⇄ not ready, its slice
//!  stamped endpoints.kubernetes.io/last-change-trigger-time ─► the proxy writes the rules
//!  ─► it counts now − trigger time (its skiff_node_network_programming_duration_seconds)
//! ```
//!
//! It prints the latency's percentiles (exact, from the proxy's observer) and how long a whole
//! write of the rules took. Needs root (iptables in a network namespace).

use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use skiff_node::proxy::{ProxyConfig, ProxyEvent};
use skiff_proto::api::service::{
    MANAGED_BY_LABEL, SERVICE_NAME_LABEL, TRIGGER_TIME_ANNOTATION, trigger_time_now,
};
use skiff_proto::api::{Kind, Object};
use skiff_scheduler::bench::Latencies;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use super::fixtures;
use crate::config::Endpoints;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Services to program.
    #[arg(long, default_value_t = 1000)]
    services: usize,
    /// Endpoints of each Service (the last one starts not ready).
    #[arg(long, default_value_t = 10)]
    endpoints_per_service: usize,
    /// Endpoint changes to measure, one Service at a time.
    #[arg(long, default_value_t = 300)]
    changes: usize,
    /// Time between two changes.
    #[arg(long, default_value = "50ms", value_parser = skiff_proto::duration::parse)]
    interval: Duration,
    /// Writes in flight while the Services and slices are made.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Leave the Services and their namespace in place.
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    cluster: Endpoints,
}

/// Who keeps the benchmark's slices (the EndpointSlice controller leaves them alone).
const MANAGER: &str = "skiff-bench";

/// The address of endpoint `j` of Service `i`: from 10.128.0.0 on, 16 per Service.
fn address(i: usize, j: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 128, 0, 0)) + (i * 16 + j) as u32)
}

/// Service `i`'s slice, its last endpoint `last_ready`.
fn slice(ns: &str, i: usize, endpoints: usize, last_ready: bool) -> serde_json::Value {
    let eps: Vec<serde_json::Value> = (0..endpoints)
        .map(|j| {
            let ready = j + 1 < endpoints || last_ready;
            serde_json::json!({"addresses": [address(i, j).to_string()],
                               "conditions": {"ready": ready, "serving": ready, "terminating": false}})
        })
        .collect();
    serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("svc-{i}-bench"), "namespace": ns,
                     "labels": {SERVICE_NAME_LABEL: format!("svc-{i}"), MANAGED_BY_LABEL: MANAGER},
                     "annotations": {TRIGGER_TIME_ANNOTATION: trigger_time_now()}},
        "addressType": "IPv4",
        "ports": [{"name": "", "port": 8080, "protocol": "TCP"}],
        "endpoints": eps,
    })
}

/// Waits for a sync that programs at least `ports` Service ports and `endpoints` endpoints.
async fn synced(
    events: &mut UnboundedReceiver<ProxyEvent>,
    ports: usize,
    endpoints: usize,
    limit: Duration,
) -> Result<(usize, usize)> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(ProxyEvent::Synced {
                ports: p,
                endpoints: e,
                ..
            })) if p >= ports && e >= endpoints => return Ok((p, e)),
            Ok(Some(_)) => {}
            Ok(None) => bail!("the proxy stopped (see its log above)"),
            Err(_) => bail!(
                "the proxy did not program {ports} Service ports and {endpoints} endpoints within {limit:?}"
            ),
        }
    }
}

pub async fn run(a: Args) -> Result<ExitCode> {
    if a.services == 0
        || a.endpoints_per_service < 2
        || a.concurrency == 0
        || a.services * 16 > 1 << 20
    {
        bail!("--services between 1 and 65536, --endpoints at least 2, --concurrency at least 1");
    }
    if a.endpoints_per_service > 16 {
        bail!("--endpoints at most 16");
    }
    let api = a.cluster.resolve()?.connect()?;
    let work = tempfile::tempdir().context("a temporary directory")?;
    let netns = skiff_launch::Netns::start(
        "the proxy's network namespace",
        &work.path().join("netns.log"),
    )
    .context("a network namespace for the rules (needs root, util-linux, iproute2)")?;
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let proxy = tokio::spawn(skiff_node::proxy::run(
        api.clone(),
        ProxyConfig {
            netns: Some(netns.path()),
            observer: Some(tx),
            ..ProxyConfig::default()
        },
        cancel.clone(),
    ));
    // What the cluster has before (the proxy programs every Service): the last sync of the
    // proxy's first second, once its informers have listed.
    let (mut base_ports, mut base_endpoints) =
        synced(&mut events, 0, 0, Duration::from_secs(30)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    while let Ok(e) = events.try_recv() {
        if let ProxyEvent::Synced {
            ports, endpoints, ..
        } = e
        {
            (base_ports, base_endpoints) = (ports, endpoints);
        }
    }
    let (ns, _) = fixtures::fresh_namespace(&api, "svcbench").await?;
    println!(
        "programming {} Services × {} endpoints ({} ready each) in namespace {ns}",
        a.services,
        a.endpoints_per_service,
        a.endpoints_per_service - 1
    );
    let made = Instant::now();
    futures::stream::iter(0..a.services)
        .map(|i| {
            let (api, ns) = (api.clone(), ns.clone());
            async move {
                let svc = Object::from_json(
                    Kind::Service,
                    serde_json::json!({"metadata": {"name": format!("svc-{i}"), "namespace": ns},
                                       "spec": {"ports": [{"port": 80, "targetPort": 8080}]}})
                    .to_string()
                    .as_bytes(),
                )?;
                api.create(&svc).await.context("creating a Service")?;
                let slice = Object::from_json(
                    Kind::EndpointSlice,
                    slice(&ns, i, a.endpoints_per_service, false)
                        .to_string()
                        .as_bytes(),
                )?;
                api.create(&slice)
                    .await
                    .context("creating an EndpointSlice")?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(a.concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    let written = made.elapsed();
    let want_endpoints = base_endpoints + a.services * (a.endpoints_per_service - 1);
    synced(
        &mut events,
        base_ports + a.services,
        want_endpoints,
        Duration::from_secs(300),
    )
    .await?;
    println!(
        "  made in {:.1} s, all programmed {:.1} s after the first write",
        written.as_secs_f64(),
        made.elapsed().as_secs_f64()
    );

    // Only the changes from here on count.
    while events.try_recv().is_ok() {}
    let mut latencies = Latencies::new();
    let mut syncs = Latencies::new();
    let mut ready = vec![false; a.services];
    let mut tick = tokio::time::interval(a.interval);
    let started = Instant::now();
    for k in 0..a.changes {
        tick.tick().await;
        let i = k % a.services;
        ready[i] = !ready[i];
        let next = Object::from_json(
            Kind::EndpointSlice,
            slice(&ns, i, a.endpoints_per_service, ready[i])
                .to_string()
                .as_bytes(),
        )?;
        // Unconditional (no resourceVersion): the benchmark is the slice's only writer.
        api.update(&next)
            .await
            .context("updating an EndpointSlice")?;
        while let Ok(e) = events.try_recv() {
            count(e, &mut latencies, &mut syncs);
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while (latencies.len() as usize) < a.changes {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(e)) => count(e, &mut latencies, &mut syncs),
            _ => break,
        }
    }
    let elapsed = started.elapsed();
    cancel.cancel();
    let _ = proxy.await;
    let p = latencies.percentiles();
    let s = syncs.percentiles();
    println!(
        "  {} changes in {:.1} s ({:.0}/s): {} seen programmed",
        a.changes,
        elapsed.as_secs_f64(),
        a.changes as f64 / elapsed.as_secs_f64(),
        latencies.len()
    );
    println!(
        "  network programming latency (trigger → rules in place): p50 {:.0} ms  p90 {:.0} ms  p99 {:.0} ms  max {:.0} ms",
        p.p50, p.p90, p.p99, p.max
    );
    println!(
        "  one write of every rule ({} syncs): p50 {:.0} ms  p99 {:.0} ms  max {:.0} ms",
        syncs.len(),
        s.p50,
        s.p99,
        s.max
    );
    if !a.keep {
        // The Services and their slices first: a namespace goes only once it is empty.
        futures::stream::iter(0..a.services)
            .map(|i| {
                let (api, ns) = (api.clone(), ns.clone());
                async move {
                    let name = format!("svc-{i}");
                    api.delete(Kind::EndpointSlice, &ns, &format!("{name}-bench"), 0, None)
                        .await?;
                    api.delete(Kind::Service, &ns, &name, 0, None).await?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(a.concurrency)
            .try_collect::<Vec<()>>()
            .await
            .context("deleting the benchmark's Services")?;
        api.delete(Kind::Namespace, "", &ns, 0, None)
            .await
            .context("deleting the benchmark's namespace")?;
    }
    drop(netns);
    Ok(if (latencies.len() as usize) < a.changes {
        eprintln!("not every change was seen programmed within 60 s");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn count(e: ProxyEvent, latencies: &mut Latencies, syncs: &mut Latencies) {
    match e {
        ProxyEvent::Programmed(d) => latencies.record(d),
        ProxyEvent::Synced { took, wrote, .. } if wrote => syncs.record(took),
        ProxyEvent::Synced { .. } => {}
    }
}
