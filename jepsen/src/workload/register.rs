//! Register workload: reads, writes and version-CAS on a rolling window of keys. Each key
//! serves a bounded number of operations and then retires, so that every per-key
//! linearizability search stays small (Jepsen's "independent" keys).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use rand::Rng;
use serde_json::json;

use super::{Ctx, Outcome, Worker, Workload, indeterminate, pace};
use crate::checker::register::PREFIX;
use crate::history::F;

/// Client tasks (spread over the members).
const TASKS: u64 = 9;
/// Keys in use at once.
const KEYS: u64 = 3;
/// Operations per key before it retires.
const OPS_PER_KEY: u64 = 100;

pub async fn run(ctx: Arc<Ctx>) {
    let counter = Arc::new(AtomicU64::new(0));
    let values = Arc::new(AtomicU64::new(1));
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (ctx, counter, values) = (ctx.clone(), counter.clone(), values.clone());
            tokio::spawn(async move { task(&ctx, t, &counter, &values).await })
        })
        .collect();
    for t in tasks {
        // A panicking task loses only its own operations; the others carry on.
        let _ = t.await;
    }
}

async fn task(ctx: &Ctx, t: u64, counter: &AtomicU64, values: &AtomicU64) {
    let mut rng = ctx.rng(Workload::Register, t);
    let mut w = Worker::new(Workload::Register, t, t as usize);
    // The last version this task saw per key: CAS guesses near it, so some succeed.
    let mut versions: HashMap<String, i64> = HashMap::new();
    while pace(ctx, &mut rng, 10).await {
        let n = counter.fetch_add(1, Ordering::Relaxed);
        let group = n / (KEYS * OPS_PER_KEY);
        let key = format!("{PREFIX}{}", group * KEYS + rng.random_range(0..KEYS));
        let seen = versions.get(&key).copied().unwrap_or(0);
        match rng.random_range(0..10) {
            0..4 => {
                let k = key.clone();
                let opts = ctx
                    .serializable_reads
                    .then(|| GetOptions::new().with_serializable());
                let out = w
                    .op(
                        ctx,
                        F::Read,
                        json!({ "key": key }),
                        true,
                        |mut c| async move {
                            let r = c.get(k.as_str(), opts).await.map_err(indeterminate)?;
                            let rev = r.header().map_or(0, |h| h.revision());
                            let (value, version) = match r.kvs().first() {
                                Some(kv) => (
                                    kv.value_str().ok().and_then(|s| s.parse::<i64>().ok()),
                                    kv.version(),
                                ),
                                None => (None, 0),
                            };
                            Ok(json!({"key": k, "value": value, "version": version, "rev": rev}))
                        },
                    )
                    .await;
                if let Outcome::Ok(v) = out
                    && let Some(version) = v["version"].as_i64()
                {
                    versions.insert(key, version);
                }
            }
            4..7 => {
                let value = values.fetch_add(1, Ordering::Relaxed) as i64;
                let k = key.clone();
                w.op(
                    ctx,
                    F::Write,
                    json!({ "key": key, "value": value }),
                    false,
                    |mut c| async move {
                        let r = c
                            .put(k.as_str(), value.to_string(), None)
                            .await
                            .map_err(indeterminate)?;
                        let rev = r.header().map_or(0, |h| h.revision());
                        Ok(json!({"key": k, "value": value, "rev": rev}))
                    },
                )
                .await;
            }
            _ => {
                let value = values.fetch_add(1, Ordering::Relaxed) as i64;
                let expect = seen + rng.random_range(0..2);
                let k = key.clone();
                let out = w
                    .op(
                        ctx,
                        F::Cas,
                        json!({ "key": key, "expect": expect, "value": value }),
                        false,
                        |mut c| async move {
                            let txn = Txn::new()
                                .when([Compare::version(k.as_str(), CompareOp::Equal, expect)])
                                .and_then([TxnOp::put(k.as_str(), value.to_string(), None)]);
                            let r = c.txn(txn).await.map_err(indeterminate)?;
                            let rev = r.header().map_or(0, |h| h.revision());
                            Ok(json!({"key": k, "expect": expect, "value": value,
                                      "succeeded": r.succeeded(), "rev": rev}))
                        },
                    )
                    .await;
                if let Outcome::Ok(v) = out
                    && v["succeeded"] == json!(true)
                {
                    versions.insert(key, expect + 1);
                }
            }
        }
    }
}
