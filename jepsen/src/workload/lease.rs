//! Lease workload: each holder grants a lease, puts a key under it, keeps it alive for a
//! while, then revokes it or walks away and lets it expire. A reader lists the keys
//! throughout, and again after healing once every abandoned lease must have expired.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, GetOptions, PutOptions};
use rand::Rng;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Ctx, FINAL_READ_TIMEOUT, LEASE_TTL_S, Outcome, Worker, Workload, indeterminate, pace};
use crate::checker::lease::PREFIX;
use crate::history::F;

const HOLDERS: u64 = 3;

pub async fn run(ctx: Arc<Ctx>) {
    let mut tasks = Vec::new();
    for t in 0..HOLDERS {
        let ctx = ctx.clone();
        tasks.push(tokio::spawn(async move { holder(&ctx, t).await }));
    }
    let reader_ctx = ctx.clone();
    tasks.push(tokio::spawn(async move { reader(&reader_ctx).await }));
    for t in tasks {
        let _ = t.await;
    }
}

/// Sleeps `d`, or returns false when the traffic phase ends first.
async fn wait(ctx: &Ctx, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = ctx.traffic.cancelled() => false,
    }
}

async fn holder(ctx: &Ctx, t: u64) {
    let mut rng = ctx.rng(Workload::Lease, t);
    let mut w = Worker::new(Workload::Lease, t, t as usize);
    let mut n = 0u64;
    while pace(ctx, &mut rng, 200).await {
        n += 1;
        let key = format!("{PREFIX}{t}-{n}");
        let k = key.clone();
        let granted = w
            .op(
                ctx,
                F::Grant,
                json!({"key": key, "ttl": LEASE_TTL_S}),
                false,
                |mut c| async move {
                    let g = c
                        .lease_grant(LEASE_TTL_S as i64, None)
                        .await
                        .map_err(indeterminate)?;
                    let r = c
                        .put(
                            k.as_str(),
                            "held",
                            Some(PutOptions::new().with_lease(g.id())),
                        )
                        .await
                        // The lease exists now; whether the key does is unknown.
                        .map_err(|e| Outcome::Info(format!("put under lease {}: {e}", g.id())))?;
                    Ok(json!({"key": k, "ttl": LEASE_TTL_S, "lease": g.id(),
                              "rev": r.header().map_or(0, |h| h.revision())}))
                },
            )
            .await;
        let Outcome::Ok(v) = granted else { continue };
        let Some(lease) = v["lease"].as_i64() else {
            continue;
        };
        let rounds = rng.random_range(1..5);
        let mut alive = true;
        for _ in 0..rounds {
            if !wait(ctx, Duration::from_millis(1000)).await {
                break;
            }
            let k = key.clone();
            let out = w
                .op(
                    ctx,
                    F::KeepAlive,
                    json!({"key": key, "lease": lease}),
                    false,
                    |c| keep_alive(c, k, lease),
                )
                .await;
            if let Outcome::Ok(v) = out
                && v["ttl"].as_i64().unwrap_or(0) <= 0
            {
                alive = false;
                break;
            }
        }
        if alive && rng.random_bool(0.5) {
            let k = key.clone();
            w.op(
                ctx,
                F::Revoke,
                json!({"key": key, "lease": lease}),
                false,
                |mut c| async move {
                    match c.lease_revoke(lease).await {
                        Ok(r) => Ok(json!({"key": k, "lease": lease,
                                           "rev": r.header().map_or(0, |h| h.revision())})),
                        // Already expired: the key is gone either way.
                        Err(e) if e.to_string().contains("not found") => {
                            Ok(json!({"key": k, "lease": lease, "not_found": true}))
                        }
                        Err(e) => Err(indeterminate(e)),
                    }
                },
            )
            .await;
        }
    }
}

async fn keep_alive(mut c: Client, key: String, lease: i64) -> Result<Value, Outcome> {
    let (mut keeper, mut stream) = c.lease_keep_alive(lease).await.map_err(indeterminate)?;
    keeper.keep_alive().await.map_err(indeterminate)?;
    match stream.message().await.map_err(indeterminate)? {
        Some(r) => Ok(json!({"key": key, "lease": lease, "ttl": r.ttl()})),
        None => Err(Outcome::Info("keep-alive stream closed".into())),
    }
}

async fn read(mut c: Client, is_final: bool) -> Result<Value, Outcome> {
    let r = c
        .get(
            PREFIX,
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await
        .map_err(indeterminate)?;
    let keys: Vec<String> = r
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect();
    Ok(json!({"key": PREFIX, "keys": keys, "final": is_final,
              "rev": r.header().map_or(0, |h| h.revision())}))
}

async fn reader(ctx: &Ctx) {
    let t = HOLDERS;
    let mut rng = ctx.rng(Workload::Lease, t);
    let mut w = Worker::new(Workload::Lease, t, t as usize);
    while pace(ctx, &mut rng, 200).await {
        w.op(ctx, F::Read, json!({"key": PREFIX}), true, |c| {
            read(c, false)
        })
        .await;
        w.next_member();
    }
    if !ctx.wait_healed().await {
        return;
    }
    // Every abandoned lease must be gone by TTL plus an election after the heal; read past
    // that point.
    let settle = Duration::from_secs(LEASE_TTL_S) + Duration::from_secs(6);
    tokio::select! {
        _ = tokio::time::sleep(settle) => {}
        _ = ctx.abort.cancelled() => return,
    }
    let deadline = Instant::now() + FINAL_READ_TIMEOUT;
    while Instant::now() < deadline && !ctx.abort.is_cancelled() {
        let out = w
            .op(ctx, F::Read, json!({"key": PREFIX}), true, |c| {
                read(c, true)
            })
            .await;
        if matches!(out, Outcome::Ok(_)) {
            break;
        }
        w.next_member();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
