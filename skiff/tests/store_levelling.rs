//! A long run, outside the default suite: under steady churn with compaction on a timer (as
//! `skiff up` and kube-apiserver keep it), the backend stops growing, and a watcher that keeps
//! reading sees every revision, none skipped, none twice.
//!
//! `cargo test --release -p skiff --test store_levelling -- --ignored --nocapture` (10 minutes:
//! in three the peaks still rise; `SKIFF_LEVELLING_SECS` sets another length). It prints the
//! backend size every 10 s.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::Cluster;
use etcd_client::WatchOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a long run: cargo test -p skiff --test store_levelling -- --ignored"]
async fn the_backend_levels_off_under_churn_and_a_reading_watcher_misses_nothing() {
    let secs: u64 = std::env::var("SKIFF_LEVELLING_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let cluster = Cluster::start_with(3, |s| {
        s.auto_compaction_retention = Some(Duration::from_secs(10));
        s.snapshot_count = Some(10_000);
    })
    .await;
    let leader = cluster.wait_leader(Duration::from_secs(10)).await;
    let mut client = cluster.client_all().await;
    let start = client
        .put("/churn/start", "", None)
        .await
        .expect("put")
        .header()
        .expect("header")
        .revision();
    let mut events = client
        .watch(
            "/churn/",
            Some(WatchOptions::new().with_prefix().with_start_revision(start)),
        )
        .await
        .expect("watch");
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let mut c = cluster.client(w % 3).await;
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let value = vec![b'x'; 1024];
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // 400 keys overwritten again and again: the live keyspace stays the same size.
                let _ = c
                    .put(format!("/churn/{w}/{:03}", n % 100), value.clone(), None)
                    .await;
                n += 1;
            }
        }));
    }
    let reader = tokio::spawn(async move {
        let mut seen = BTreeSet::new();
        let mut last = start - 1;
        let mut repeated = 0u64;
        'stream: while let Ok(Some(resp)) = events.message().await {
            for e in resp.events() {
                let kv = e.kv().expect("kv");
                let rev = kv.mod_revision();
                if rev <= last {
                    repeated += 1;
                }
                last = last.max(rev);
                seen.insert(rev);
                if kv.key() == b"/churn/end" {
                    break 'stream;
                }
            }
            if resp.canceled() {
                break;
            }
        }
        (seen, repeated)
    });
    let mut sizes = Vec::new();
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let size = cluster
            .metric(leader, "skiff_store_db_size_bytes")
            .await
            .unwrap_or_default();
        eprintln!(
            "{:>4} s: backend {:.1} MiB",
            began.elapsed().as_secs(),
            size / 1048576.0
        );
        sizes.push(size);
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.expect("writer");
    }
    let end = client
        .put("/churn/end", "", None)
        .await
        .expect("put")
        .header()
        .expect("header")
        .revision();
    let (seen, repeated) = tokio::time::timeout(Duration::from_secs(120), reader)
        .await
        .expect("the watcher reaches the end within 2 minutes")
        .expect("reader");
    let missing: Vec<i64> = (start..=end)
        .filter(|r| !seen.contains(r))
        .take(10)
        .collect();
    assert_eq!(repeated, 0, "events delivered twice or out of order");
    assert!(
        missing.is_empty(),
        "revisions the watcher never saw (first ten): {missing:?} of {start}..={end}"
    );
    // Level: the largest size in the last third is within half again of the middle third's.
    let third = sizes.len() / 3;
    assert!(third >= 1, "too short a run to judge the size");
    let middle = sizes[third..2 * third].iter().copied().fold(0.0, f64::max);
    let last = sizes[2 * third..].iter().copied().fold(0.0, f64::max);
    eprintln!(
        "revisions {start}..={end}, all seen; backend max {:.1} MiB in the middle third, {:.1} MiB in the last",
        middle / 1048576.0,
        last / 1048576.0
    );
    assert!(
        last <= middle * 1.5,
        "the backend kept growing: {:.1} MiB → {:.1} MiB",
        middle / 1048576.0,
        last / 1048576.0
    );
}
