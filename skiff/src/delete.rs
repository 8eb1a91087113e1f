//! `skiff delete KIND NAME…`: deletes objects, as kubectl does. A pod bound to a node is
//! deleted gracefully: it shows `Terminating` while its agent stops the containers (preStop,
//! SIGTERM, SIGKILL after the grace period) and is gone once they have stopped. By default
//! the command waits until every named object is gone.

use std::pin::pin;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt;
use skiff_proto::api::Kind;
use skiff_proto::client::{ClusterClient, Code, Event, ListParams, WatchParams};

use crate::apply::runtime;
use crate::config::Endpoints;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// pod, node, namespace, resourcequota, limitrange or event (kubectl's short names work).
    kind: String,
    /// The objects' names.
    #[arg(required = true)]
    names: Vec<String>,
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
    /// Seconds a pod's containers get to stop after SIGTERM (default: the pod's own
    /// terminationGracePeriodSeconds); 0 removes the object at once, without waiting for the
    /// containers.
    #[arg(long)]
    grace_period: Option<i64>,
    /// The same as `--grace-period 0`.
    #[arg(long, conflicts_with = "grace_period")]
    now: bool,
    /// Wait until the objects are gone (`--wait=false` returns once deletion has begun).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    wait: bool,
    /// Give up waiting after this long (`90s`, `5m`; 0: the grace period plus a minute).
    #[arg(long, default_value = "0s", value_parser = skiff_proto::duration::parse)]
    timeout: Duration,
    #[command(flatten)]
    endpoints: Endpoints,
}

pub fn run(args: &Args) -> Result<ExitCode> {
    let kind = Kind::from_cli(&args.kind)
        .filter(|k| k.is_stored())
        .with_context(|| format!("unknown kind {:?}: try pod, node or namespace", args.kind))?;
    let ns = if kind.is_namespaced() {
        args.namespace.as_str()
    } else {
        ""
    };
    let grace = if args.now { Some(0) } else { args.grace_period };
    if grace.is_some_and(|g| g < 0) {
        anyhow::bail!("--grace-period must be 0 or more");
    }
    let store = args.endpoints.resolve()?;
    runtime()?.block_on(async {
        let api = store.connect()?;
        let mut failed = false;
        let mut waiting = Vec::new();
        for name in &args.names {
            // In the background, as kubectl deletes: a Job takes its pods with it.
            let background = Some(skiff_proto::api::DeletionPropagation::Background);
            match api.delete_with(kind, ns, name, 0, grace, background).await {
                Ok(o) => {
                    let grace = o.metadata().deletion_grace_period_seconds.unwrap_or(0);
                    waiting.push((name, grace));
                }
                Err(e) if e.code() == Some(Code::NotFound) => {
                    eprintln!("Error from server (NotFound): {} \"{name}\" not found", kind.plural());
                    failed = true;
                }
                Err(e) => {
                    eprintln!("Error: deleting {} \"{name}\": {e}", kind.plural());
                    failed = true;
                }
            }
        }
        let singular = kind.name().to_ascii_lowercase();
        for (name, grace) in waiting {
            if args.wait {
                let limit = if !args.timeout.is_zero() {
                    args.timeout
                } else {
                    Duration::from_secs(u64::try_from(grace).unwrap_or(0) + 60)
                };
                match tokio::time::timeout(limit, gone(&api, kind, ns, name)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        eprintln!("Error: waiting for {singular} \"{name}\": {e:#}");
                        failed = true;
                        continue;
                    }
                    Err(_) => {
                        eprintln!(
                            "Error: {singular} \"{name}\" is still there after {}s (see `skiff describe {singular} {name}`)",
                            limit.as_secs()
                        );
                        failed = true;
                        continue;
                    }
                }
            }
            println!("{singular} \"{name}\" deleted");
        }
        Ok(if failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        })
    })
}

/// Returns once the object is gone: it is read, then watched from that revision until its
/// DELETED event (so no deletion between the read and the watch is missed).
async fn gone(api: &ClusterClient, kind: Kind, ns: &str, name: &str) -> Result<()> {
    let fields = format!("metadata.name={name}");
    loop {
        let (items, revision) = api
            .list(kind, &ListParams::default().namespace(ns).fields(&fields))
            .await?;
        if items.is_empty() {
            return Ok(());
        }
        let mut events = pin!(
            api.watch(
                kind,
                &WatchParams::default()
                    .namespace(ns)
                    .fields(&fields)
                    .resource_version(revision)
            )
            .await?
        );
        while let Some(e) = events.next().await {
            if let Event::Deleted(_) = e? {
                return Ok(());
            }
        }
        // The watch ended (a member went away): read again.
    }
}
