//! Set workload: adders insert unique integers into one key holding a comma-separated set,
//! with a read / compare-mod-revision-and-put loop; a reader reads the set throughout, and a
//! final read after healing decides what survived.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use serde_json::{Value, json};

use super::{Ctx, FINAL_READ_TIMEOUT, Outcome, Worker, Workload, indeterminate, pace};
use crate::checker::set::PREFIX;
use crate::history::F;

const ADDERS: u64 = 5;
/// CAS attempts before an add gives up (certainly without effect: every attempt failed).
const ATTEMPTS: usize = 8;

fn key() -> String {
    format!("{PREFIX}set")
}

fn parse(v: &[u8]) -> Vec<i64> {
    String::from_utf8_lossy(v)
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect()
}

pub async fn run(ctx: Arc<Ctx>) {
    let next = Arc::new(AtomicI64::new(0));
    let mut tasks: Vec<_> = (0..ADDERS)
        .map(|t| {
            let (ctx, next) = (ctx.clone(), next.clone());
            tokio::spawn(async move { adder(&ctx, t, &next).await })
        })
        .collect();
    let reader_ctx = ctx.clone();
    tasks.push(tokio::spawn(async move { reader(&reader_ctx).await }));
    for t in tasks {
        let _ = t.await;
    }
}

async fn adder(ctx: &Ctx, t: u64, next: &AtomicI64) {
    let mut rng = ctx.rng(Workload::Set, t);
    let mut w = Worker::new(Workload::Set, t, t as usize);
    while pace(ctx, &mut rng, 20).await {
        let element = next.fetch_add(1, Ordering::Relaxed);
        w.op(
            ctx,
            F::Add,
            json!({"key": key(), "element": element}),
            false,
            |c| add(c, element),
        )
        .await;
    }
}

async fn add(mut c: Client, element: i64) -> Result<Value, Outcome> {
    let k = key();
    for _ in 0..ATTEMPTS {
        let r = c.get(k.as_str(), None).await.map_err(indeterminate)?;
        let (mut set, cmp) = match r.kvs().first() {
            Some(kv) => (
                parse(kv.value()),
                Compare::mod_revision(k.as_str(), CompareOp::Equal, kv.mod_revision()),
            ),
            None => (
                Vec::new(),
                Compare::create_revision(k.as_str(), CompareOp::Equal, 0),
            ),
        };
        set.push(element);
        let text = set.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        let txn = Txn::new()
            .when([cmp])
            .and_then([TxnOp::put(k.as_str(), text, None)]);
        let r = c.txn(txn).await.map_err(indeterminate)?;
        if r.succeeded() {
            let rev = r.header().map_or(0, |h| h.revision());
            return Ok(json!({"key": k, "element": element, "rev": rev}));
        }
    }
    Err(Outcome::Fail("compare failed on every attempt".into()))
}

async fn read(mut c: Client, is_final: bool) -> Result<Value, Outcome> {
    let k = key();
    let r = c.get(k.as_str(), None).await.map_err(indeterminate)?;
    let rev = r.header().map_or(0, |h| h.revision());
    let elements = r
        .kvs()
        .first()
        .map(|kv| parse(kv.value()))
        .unwrap_or_default();
    Ok(json!({"key": k, "elements": elements, "final": is_final, "rev": rev}))
}

async fn reader(ctx: &Ctx) {
    let t = ADDERS;
    let mut rng = ctx.rng(Workload::Set, t);
    let mut w = Worker::new(Workload::Set, t, t as usize);
    while pace(ctx, &mut rng, 300).await {
        w.op(ctx, F::Read, json!({"key": key()}), true, |c| {
            read(c, false)
        })
        .await;
        // Move between members so reads come from leaders and followers alike.
        w.next_member();
    }
    if !ctx.wait_healed().await {
        return;
    }
    let deadline = Instant::now() + FINAL_READ_TIMEOUT;
    while Instant::now() < deadline && !ctx.abort.is_cancelled() {
        w.next_member();
        let out = w
            .op(ctx, F::Read, json!({"key": key()}), true, |c| read(c, true))
            .await;
        if matches!(out, Outcome::Ok(_)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
