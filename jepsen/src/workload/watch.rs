//! Watch workload: writers put sequential values (sometimes two keys in one transaction, to
//! test atomic delivery); each watcher watches the whole prefix, disconnects at random and
//! resumes from the revision after the last one it saw (or was told of by a progress
//! notification). After healing, every watcher catches up to the final revision so the
//! checker can hold each one to every acknowledged write.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{EventType, Txn, TxnOp, WatchOptions, WatchResponse};
use rand::Rng;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Ctx, FINAL_READ_TIMEOUT, Worker, Workload, indeterminate, pace};
use crate::checker::watch::{Event, PREFIX, Response};
use crate::cluster;
use crate::history::{F, OpType};

const WRITERS: u64 = 3;
const WATCHERS: u64 = 3;
/// How often a watcher asks for a progress notification.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

pub async fn run(ctx: Arc<Ctx>) {
    let mut tasks = Vec::new();
    for t in 0..WRITERS {
        let ctx = ctx.clone();
        tasks.push(tokio::spawn(async move { writer(&ctx, t).await }));
    }
    for t in WRITERS..WRITERS + WATCHERS {
        let ctx = ctx.clone();
        tasks.push(tokio::spawn(async move { watcher(&ctx, t).await }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

async fn writer(ctx: &Ctx, t: u64) {
    let mut rng = ctx.rng(Workload::Watch, t);
    let mut w = Worker::new(Workload::Watch, t, t as usize);
    let mut n = 0u64;
    while pace(ctx, &mut rng, 20).await {
        n += 1;
        let value = format!("{t}.{n}");
        let mut puts = vec![(format!("{PREFIX}{t}"), value.clone())];
        if rng.random_bool(0.2) {
            puts.push((format!("{PREFIX}{t}-pair"), value));
        }
        let v = json!({"key": format!("{PREFIX}{t}"), "puts": puts});
        let done = v.clone();
        w.op(ctx, F::Write, v, false, |mut c| async move {
            let ops: Vec<TxnOp> = puts
                .iter()
                .map(|(k, v)| TxnOp::put(k.as_str(), v.as_str(), None))
                .collect();
            let r = c
                .txn(Txn::new().and_then(ops))
                .await
                .map_err(indeterminate)?;
            let mut done = done;
            done["rev"] = json!(r.header().map_or(0, |h| h.revision()));
            Ok(done)
        })
        .await;
    }
}

fn response(r: &WatchResponse) -> Response {
    Response {
        rev: r.header().map_or(0, |h| h.revision()),
        events: r
            .events()
            .iter()
            .filter_map(|e| {
                let kv = e.kv()?;
                Some(Event {
                    kind: match e.event_type() {
                        EventType::Put => "put".into(),
                        EventType::Delete => "delete".into(),
                    },
                    key: String::from_utf8_lossy(kv.key()).into_owned(),
                    value: String::from_utf8_lossy(kv.value()).into_owned(),
                    rev: kv.mod_revision(),
                })
            })
            .collect(),
        created: r.created(),
        canceled: r.canceled(),
        compacted: r.compact_revision(),
    }
}

/// One watch session from `start` until `end_at`, `stop`, `target` reached, or an error.
/// Returns the revision to resume from and whether the session ended in an error.
async fn session(
    ctx: &Ctx,
    w: &Worker,
    start: i64,
    end_at: Instant,
    stop: &CancellationToken,
    target: Option<i64>,
) -> (i64, bool) {
    let _in_flight = ctx.in_flight.read().await;
    let node = ctx.node_name(w.member).to_string();
    let endpoint = ctx.members[w.member % ctx.members.len()].0.clone();
    let invoke = json!({"key": PREFIX, "watcher": w.task, "start": start});
    ctx.recorder
        .invoke(w.process(), F::Watch, invoke.clone(), Some(&node));
    let mut responses: Vec<Response> = Vec::new();
    let mut next = start;
    let result = async {
        let mut c =
            cluster::connect_as(&[endpoint], super::OP_TIMEOUT, cluster::Who::Client).await?;
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(start)
            .with_progress_notify();
        let mut stream = tokio::time::timeout(super::OP_TIMEOUT, c.watch(PREFIX, Some(opts)))
            .await
            .map_err(|_| anyhow::anyhow!("watch create timed out"))??;
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(end_at) => return anyhow::Ok(()),
                _ = stop.cancelled() => return Ok(()),
                _ = tick.tick() => stream.request_progress().await?,
                m = stream.message() => {
                    let Some(m) = m? else { anyhow::bail!("watch stream closed") };
                    let r = response(&m);
                    for e in &r.events {
                        next = next.max(e.rev + 1);
                    }
                    if r.is_progress() {
                        next = next.max(r.rev + 1);
                    }
                    let compacted = r.compacted;
                    let canceled = r.canceled;
                    responses.push(r);
                    if compacted > 0 {
                        // Resume from the oldest revision still kept.
                        next = next.max(compacted);
                        return Ok(());
                    }
                    if canceled {
                        anyhow::bail!("watch canceled: {}", m.cancel_reason());
                    }
                    if target.is_some_and(|t| next > t) {
                        return Ok(());
                    }
                }
            }
        }
    }
    .await;
    let mut value: Value = invoke;
    value["responses"] = serde_json::to_value(&responses).unwrap_or(Value::Null);
    let (kind, error) = match &result {
        Ok(()) => (OpType::Ok, None),
        Err(e) => (OpType::Info, Some(format!("{e:#}"))),
    };
    ctx.recorder
        .record(w.process(), kind, F::Watch, value, Some(&node), error);
    (next, result.is_err())
}

async fn watcher(ctx: &Ctx, t: u64) {
    let mut rng = ctx.rng(Workload::Watch, t);
    let mut w = Worker::new(Workload::Watch, t, t as usize);
    let mut next = 1i64;
    while !ctx.traffic.is_cancelled() {
        let end_at = Instant::now() + Duration::from_millis(rng.random_range(500..4000));
        let (n, failed) = session(ctx, &w, next, end_at, &ctx.traffic, None).await;
        next = n;
        if failed {
            w.generation += 1;
            if !pace(ctx, &mut rng, 300).await {
                break;
            }
        }
    }
    if !ctx.wait_healed().await {
        return;
    }
    // Catch up to a revision read after healing: everything acknowledged is at or below it.
    let deadline = Instant::now() + FINAL_READ_TIMEOUT;
    let mut target = None;
    while target.is_none() && Instant::now() < deadline && !ctx.abort.is_cancelled() {
        if let Some(mut c) = ctx.client(w.member).await
            && let Ok(Ok(r)) = tokio::time::timeout(super::OP_TIMEOUT, c.get(PREFIX, None)).await
        {
            target = r.header().map(|h| h.revision());
        } else {
            w.member += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let Some(target) = target else { return };
    while next <= target && Instant::now() < deadline && !ctx.abort.is_cancelled() {
        let (n, failed) = session(
            ctx,
            &w,
            next,
            Instant::now() + Duration::from_secs(10),
            &ctx.abort,
            Some(target),
        )
        .await;
        next = n;
        if failed {
            w.generation += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
