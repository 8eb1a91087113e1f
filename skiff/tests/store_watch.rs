//! Watch streams against a real cluster: resumption, compaction, fan-out to many watchers.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::Cluster;
use etcd_client::{EventType, WatchOptions, WatchResponse, WatchStream};

async fn next(stream: &mut WatchStream) -> WatchResponse {
    tokio::time::timeout(Duration::from_secs(20), stream.message())
        .await
        .expect("a watch response within 20 s")
        .expect("watch stream error")
        .expect("watch stream ended")
}

/// The next `n` events of the stream, skipping created/progress responses.
async fn events(stream: &mut WatchStream, n: usize) -> Vec<(i64, String, EventType)> {
    let mut out = Vec::new();
    while out.len() < n {
        let r = next(stream).await;
        assert!(!r.canceled(), "watch canceled: {}", r.cancel_reason());
        for e in r.events() {
            let kv = e.kv().expect("kv");
            out.push((
                kv.mod_revision(),
                kv.key_str().expect("utf8").to_string(),
                e.event_type(),
            ));
        }
    }
    assert_eq!(out.len(), n, "more events than expected in one response");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_from_a_revision_gets_exactly_the_missed_events() {
    let cluster = Cluster::start(3).await;
    let mut c0 = cluster.client(0).await;
    let mut c1 = cluster.client(1).await;
    let mut w = c0
        .watch("/w/", Some(WatchOptions::new().with_prefix()))
        .await
        .expect("watch");
    assert!(next(&mut w).await.created());
    for i in 0..5 {
        c1.put(format!("/w/{i}"), "a", None).await.expect("put");
    }
    let seen = events(&mut w, 5).await;
    let last = seen.last().expect("events").0;
    drop(w);
    // Missed while disconnected: three puts and a delete.
    let mut missed = Vec::new();
    for i in 5..8 {
        let r = c1.put(format!("/w/{i}"), "b", None).await.expect("put");
        missed.push((
            r.header().expect("h").revision(),
            format!("/w/{i}"),
            EventType::Put,
        ));
    }
    let r = c1.delete("/w/0", None).await.expect("delete");
    missed.push((
        r.header().expect("h").revision(),
        "/w/0".into(),
        EventType::Delete,
    ));
    // Resume on another member; a sentinel written afterwards must come right after.
    let mut c2 = cluster.client(2).await;
    let mut w = c2
        .watch(
            "/w/",
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(last + 1)
                    .with_prev_key(),
            ),
        )
        .await
        .expect("watch");
    assert!(next(&mut w).await.created());
    let resumed = events(&mut w, 4).await;
    assert_eq!(resumed, missed);
    let r = c1.put("/w/sentinel", "s", None).await.expect("put");
    let after = events(&mut w, 1).await;
    assert_eq!(
        after,
        vec![(
            r.header().expect("h").revision(),
            "/w/sentinel".into(),
            EventType::Put
        )]
    );
    // Progress: everything up to the current revision has been delivered.
    w.request_progress().await.expect("progress request");
    let p = next(&mut w).await;
    assert!(p.events().is_empty());
    assert!(p.header().expect("h").revision() >= r.header().expect("h").revision());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_start_revision_reports_compact_revision() {
    let cluster = Cluster::start(3).await;
    let mut c = cluster.client(0).await;
    let mut rev = 0;
    for i in 0..5 {
        rev = c
            .put("/cw/k", i.to_string(), None)
            .await
            .expect("put")
            .header()
            .expect("h")
            .revision();
    }
    c.compact(rev - 1, None).await.expect("compact");
    // Watches are not linearizable (in etcd neither): make sure this member has applied the
    // compaction before watching through it, with a linearizable read.
    c.get("/cw/k", None).await.expect("read barrier");
    let mut w = c
        .watch("/cw/k", Some(WatchOptions::new().with_start_revision(1)))
        .await
        .expect("watch");
    let mut r = next(&mut w).await;
    if r.created() && !r.canceled() {
        r = next(&mut w).await;
    }
    assert!(r.canceled());
    assert_eq!(r.compact_revision(), rev - 1);
    // From the compaction revision on, the history is whole.
    let mut w = c
        .watch(
            "/cw/k",
            Some(WatchOptions::new().with_start_revision(rev - 1)),
        )
        .await
        .expect("watch");
    assert!(next(&mut w).await.created());
    let got: Vec<i64> = events(&mut w, 2).await.into_iter().map(|e| e.0).collect();
    assert_eq!(got, vec![rev - 1, rev]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_watchers_on_one_prefix_see_the_same_ordered_stream() {
    const STREAMS: usize = 10;
    const PER_STREAM: usize = 100;
    const PUTS: usize = 40;
    let cluster = Cluster::start(3).await;
    let mut streams = Vec::new();
    for s in 0..STREAMS {
        let mut c = cluster.client(s % 3).await;
        let opts = || Some(WatchOptions::new().with_prefix());
        let mut w = c.watch("/fan/", opts()).await.expect("watch");
        for _ in 1..PER_STREAM {
            w.watch("/fan/", opts())
                .await
                .expect("another watcher on the stream");
        }
        let mut created = 0;
        while created < PER_STREAM {
            if next(&mut w).await.created() {
                created += 1;
            }
        }
        streams.push((c, w));
    }
    let mut writer = cluster.client(1).await;
    let mut want = Vec::new();
    for i in 0..PUTS {
        let key = format!("/fan/{}", i % 7);
        let r = writer
            .put(key.clone(), i.to_string(), None)
            .await
            .expect("put");
        want.push((r.header().expect("h").revision(), key));
    }
    for (s, (_c, w)) in streams.iter_mut().enumerate() {
        let mut per_watcher: BTreeMap<i64, Vec<(i64, String)>> = BTreeMap::new();
        let total = PER_STREAM * PUTS;
        let mut n = 0;
        while n < total {
            let r = next(w).await;
            assert!(!r.canceled(), "stream {s}: {}", r.cancel_reason());
            for e in r.events() {
                let kv = e.kv().expect("kv");
                per_watcher
                    .entry(r.watch_id())
                    .or_default()
                    .push((kv.mod_revision(), kv.key_str().expect("utf8").to_string()));
                n += 1;
            }
        }
        assert_eq!(
            per_watcher.len(),
            PER_STREAM,
            "stream {s}: every watcher got events"
        );
        for (id, got) in per_watcher {
            assert_eq!(got, want, "stream {s} watcher {id}");
        }
    }
}

/// A watch whose range end sorts before (or at) its key is refused as etcd refuses it (one
/// response, created and canceled, "mvcc: watcher range is empty"), and the member's
/// history stays watchable: a watch from a past revision still replays every write made
/// before and after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_range_watch_is_refused_and_history_stays_watchable() {
    let cluster = Cluster::start(1).await;
    let mut c = cluster.client(0).await;
    let mut first = 0;
    for i in 0..20 {
        let r = c.put(format!("/s/{i:02}"), "v", None).await.expect("put");
        if i == 0 {
            first = r.header().expect("h").revision();
        }
    }
    for end in ["/s/a", "/s/z"] {
        let opts = WatchOptions::new()
            .with_range(end)
            .with_start_revision(first);
        let mut w = c.watch("/s/z", Some(opts)).await.expect("watch");
        let r = next(&mut w).await;
        assert!(r.created() && r.canceled(), "one refusal: {r:?}");
        assert_eq!(r.cancel_reason(), "mvcc: watcher range is empty");
    }
    for i in 20..40 {
        c.put(format!("/s/{i:02}"), "v", None).await.expect("put");
    }
    let opts = WatchOptions::new().with_prefix().with_start_revision(first);
    let mut w = c.watch("/s/", Some(opts)).await.expect("watch");
    assert!(next(&mut w).await.created());
    let mut n = 0;
    while n < 40 {
        let r = next(&mut w).await;
        assert!(!r.canceled(), "{}", r.cancel_reason());
        n += r.events().len();
    }
    assert_eq!(n, 40);
    assert_eq!(
        cluster
            .metric(0, "skiff_store_watch_catch_up_failures_total")
            .await,
        Some(0.0)
    );
}

/// A client that half-closes its side of the stream (as the `etcd-client` crate does when
/// its `Watcher` is dropped) keeps receiving events until it cancels the call, as from etcd.
/// An empty key with range end `\0` watches every key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_closed_watch_stream_keeps_delivering() {
    let cluster = Cluster::start(1).await;
    let mut c = cluster.client(0).await;
    let opts = WatchOptions::new().with_range(vec![0u8]);
    let w = c.watch(vec![], Some(opts)).await.expect("watch");
    let (sender, mut w) = w.split();
    drop(sender);
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(20), w.message())
            .await
            .expect("a watch response within 20 s")
            .expect("watch stream error")
            .expect("the stream goes on after the client half-closes it")
    };
    assert!(next().await.created());
    for key in ["/a", "/b", "zzz"] {
        c.put(key, "v", None).await.expect("put");
    }
    let mut got = Vec::new();
    while got.len() < 3 {
        for e in next().await.events() {
            got.push(e.kv().expect("kv").key_str().expect("utf8").to_string());
        }
    }
    assert_eq!(got, ["/a", "/b", "zzz"]);
}
