//! The hub against a real keyspace: sharing, catch-up, compaction, progress, refusals, a
//! stuck client, a panicking read, and a model of etcd's watch semantics.

use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

use prost::bytes::{Bytes, BytesMut};
use tokio::sync::mpsc::error::TryRecvError;

use super::*;
use crate::backend;
use crate::command::{Command, DeleteRangeRequest, PutRequest, RequestOp, TxnRequest};

fn open() -> (tempfile::TempDir, RwLock<Mvcc>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Mvcc::open(backend::open(dir.path()).expect("db")).expect("mvcc");
    (dir, RwLock::new(m))
}

fn apply(ks: &RwLock<Mvcc>, hub: &WatchHub, cmd: Command) -> i64 {
    let mut m = ks.write().expect("lock");
    let a = m.apply(&cmd, &[]).expect("apply");
    hub.publish(a.response.revision, &a.events);
    a.response.revision
}

fn put(ks: &RwLock<Mvcc>, hub: &WatchHub, key: &str, value: &str) -> i64 {
    apply(
        ks,
        hub,
        Command::Txn(TxnRequest::single(RequestOp::Put(PutRequest {
            key: key.into(),
            value: value.into(),
            ..PutRequest::default()
        }))),
    )
}

fn delete(ks: &RwLock<Mvcc>, hub: &WatchHub, key: &[u8]) -> i64 {
    apply(
        ks,
        hub,
        Command::Txn(TxnRequest::single(RequestOp::DeleteRange(
            DeleteRangeRequest {
                key: key.to_vec(),
                range_end: Vec::new(),
                prev_kv: false,
            },
        ))),
    )
}

fn spec(key: &str, range_end: &str, start_revision: i64) -> WatchSpec {
    WatchSpec {
        key: key.into(),
        range_end: range_end.into(),
        start_revision,
        ..WatchSpec::default()
    }
}

fn add(ks: &RwLock<Mvcc>, hub: &WatchHub, stream: u64, id: i64, spec: WatchSpec) -> i64 {
    hub.add(&ks.read().expect("lock"), stream, id, spec, None)
        .expect("added")
}

/// Runs catch-up passes until none has work left that it can do now.
fn settle(ks: &RwLock<Mvcc>, hub: &WatchHub) {
    for _ in 0..10_000 {
        if !hub.catch_up(|| ks.read().expect("lock")) {
            return;
        }
    }
    panic!("catch-up never settles");
}

fn drain(rx: &mut WatchReceiver) -> Vec<WatchMessage> {
    let mut out = Vec::new();
    while let Ok(msg) = rx.try_recv() {
        out.push(msg);
    }
    out
}

/// (revision, value) of every event in `msgs`.
fn values(msgs: &[WatchMessage]) -> Vec<(i64, Vec<u8>)> {
    msgs.iter()
        .filter_map(|m| match m {
            WatchMessage::Events { events, .. } => Some(events.iter()),
            _ => None,
        })
        .flatten()
        .map(|e| (e.kv.mod_revision, e.kv.value))
        .collect()
}

/// Watchers of one revision share its events; each gets only those in its range, and
/// the shared encoding is sliced to them.
#[test]
fn watchers_share_a_revision_and_each_gets_its_own_events() {
    let (_dir, ks) = open();
    let hub = WatchHub::default();
    let (sid, _tx, mut rx) = hub.open_stream(16);
    let range = |k: &str, e: &str, prev_kv| WatchSpec {
        prev_kv,
        ..spec(k, e, 0)
    };
    add(&ks, &hub, sid, 1, range("a", "z", false)); // all three keys
    add(&ks, &hub, sid, 2, range("b", "c", false)); // only b
    add(&ks, &hub, sid, 3, range("a", "z", true)); // all three, with previous versions
    put(&ks, &hub, "b", "old");
    drain(&mut rx);
    let ops = ["a", "b", "c"]
        .map(|k| {
            RequestOp::Put(PutRequest {
                key: k.into(),
                value: format!("{k}1").into(),
                prev_kv: true,
                ..PutRequest::default()
            })
        })
        .to_vec();
    apply(
        &ks,
        &hub,
        Command::Txn(TxnRequest {
            success: ops,
            ..TxnRequest::default()
        }),
    );
    // A stand-in encoding: each event as its key and, when present, its previous value.
    let encode = |events: &[Event], prev_kv: bool| {
        let mut buf = BytesMut::new();
        let mut ends = Vec::new();
        for e in events {
            buf.extend_from_slice(&e.kv.key);
            if prev_kv && let Some(p) = &e.prev_kv {
                buf.extend_from_slice(b"<");
                buf.extend_from_slice(&p.value);
            }
            ends.push(buf.len());
        }
        Encoded {
            buf: buf.freeze(),
            ends,
        }
    };
    let mut got = Vec::new();
    for msg in drain(&mut rx) {
        if let WatchMessage::Events {
            watch_id, events, ..
        } = msg
        {
            let keys: Vec<_> = events.iter().map(|e| e.kv.key).collect();
            let prevs = events.iter().filter(|e| e.prev_kv.is_some()).count();
            got.push((watch_id, keys, prevs, events.encoded(encode)));
        }
    }
    got.sort_by_key(|g| g.0);
    let abc = vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()];
    assert_eq!(
        got,
        vec![
            (1, abc.clone(), 0, Bytes::from_static(b"abc")),
            (2, vec![b"b".to_vec()], 0, Bytes::from_static(b"b")),
            (3, abc, 1, Bytes::from_static(b"ab<oldc")),
        ]
    );
}

#[test]
fn a_parked_watcher_catches_up_without_gaps_or_repeats() {
    let (_dir, ks) = open();
    let hub = WatchHub::default();
    let (sid, _tx, mut rx) = hub.open_stream(2);
    add(&ks, &hub, sid, 7, spec("k", "l", 0));
    let mut seen = Vec::new();
    for i in 0..50 {
        put(&ks, &hub, &format!("k{}", i % 5), &i.to_string());
        put(&ks, &hub, "other", "x");
        if i % 7 == 0 {
            seen.extend(values(&drain(&mut rx)));
            hub.catch_up(|| ks.read().expect("lock"));
        }
    }
    loop {
        seen.extend(values(&drain(&mut rx)));
        settle(&ks, &hub);
        if hub.unsynced_count() == 0 {
            seen.extend(values(&drain(&mut rx)));
            break;
        }
    }
    let want: Vec<(i64, Vec<u8>)> = (0..50)
        .map(|i| (2 * i + 1, i.to_string().into_bytes()))
        .collect();
    assert_eq!(seen, want);
}

/// A backlog goes out in as few responses as fit, as etcd sends an unsynced watcher's: two
/// puts, then a watch from the first one's revision, get both events in the first response.
#[test]
fn a_watch_from_a_past_revision_gets_its_backlog_in_one_response() {
    let (_dir, ks) = open();
    let hub = WatchHub::default();
    let first = put(&ks, &hub, "a", "1");
    put(&ks, &hub, "a", "2");
    let (sid, _tx, mut rx) = hub.open_stream(16);
    add(&ks, &hub, sid, 1, spec("a", "", first));
    settle(&ks, &hub);
    let msgs = drain(&mut rx);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(
        values(&msgs),
        vec![(first, b"1".to_vec()), (first + 1, b"2".to_vec())]
    );
    assert_eq!(hub.unsynced_count(), 0);
}

/// Watchers of one range resuming at nearby revisions (the agents that move to a member
/// after another's kill) share one history read, each given the events from its own
/// revision on; one much further behind is read for on its own until it comes near.
#[test]
fn watchers_near_each_other_share_a_read_and_each_starts_where_it_asked() {
    let (_dir, ks) = open();
    let hub = WatchHub::default();
    let mut last = 0;
    for i in 0..1200 {
        last = put(&ks, &hub, &format!("/p/{}", i % 7), &i.to_string());
    }
    assert_eq!(last, 1200);
    let (sid, _tx, mut rx) = hub.open_stream(64);
    let near: Vec<i64> = (0..10).map(|i| 1100 + 5 * i).collect();
    for (id, start) in near.iter().enumerate() {
        add(&ks, &hub, sid, id as i64, spec("/p/", "/p0", *start));
    }
    add(&ks, &hub, sid, 99, spec("/p/", "/p0", 1));
    settle(&ks, &hub);
    assert_eq!(hub.unsynced_count(), 0);
    // The ten near ones in one read; the far one in two (a thousand changes at most each),
    // its second shared with no one, since the others were synced by then.
    assert_eq!(hub.catch_up_stats().reads(), 3);
    let mut got: std::collections::BTreeMap<i64, Vec<i64>> = Default::default();
    for msg in drain(&mut rx) {
        if let WatchMessage::Events {
            watch_id, events, ..
        } = msg
        {
            got.entry(watch_id)
                .or_default()
                .extend(events.iter().map(|e| e.kv.mod_revision));
        }
    }
    for (id, start) in near.iter().enumerate() {
        let want: Vec<i64> = (*start..=last).collect();
        assert_eq!(got[&(id as i64)], want, "watcher {id} from {start}");
    }
    assert_eq!(got[&99], (1..=last).collect::<Vec<i64>>());
}

/// A range whose end sorts at or before its key is refused as etcd refuses it, in one
/// message, and the member's history stays readable for every later watch (such a request
/// used to panic the catch-up task and silence every historical watch on the member).
#[test]
fn an_empty_range_is_refused_and_history_stays_watchable() {
    let (_dir, ks) = open();
    let hub = WatchHub::default();
    for i in 0..20 {
        put(&ks, &hub, &format!("/s/{i:02}"), &i.to_string());
    }
    let (sid, tx, mut rx) = hub.open_stream(64);
    for (key, end) in [("/s/z", "/s/a"), ("/s/a", "/s/a")] {
        let permit = tx.try_reserve().expect("room");
        let refused = hub.add(
            &ks.read().expect("lock"),
            sid,
            0,
            spec(key, end, 1),
            Some(permit),
        );
        assert_eq!(refused, Err(Refusal::EmptyRange));
        assert_eq!(
            drain(&mut rx),
            vec![WatchMessage::Refused {
                watch_id: -1,
                revision: 20,
                reason: "mvcc: watcher range is empty".into(),
            }]
        );
    }
    settle(&ks, &hub);
    add(&ks, &hub, sid, 5, spec("/s/", "/s0", 1));
    settle(&ks, &hub);
    assert_eq!(values(&drain(&mut rx)).len(), 20);
    assert_eq!(hub.watcher_count(), 1);
}

#[test]
fn a_duplicate_watch_id_is_refused_and_ids_are_assigned_lowest_first() {
    let (_dir, ks) = open();
    let hub = WatchHub::default();
    let (sid, _tx, _rx) = hub.open_stream(8);
    assert_eq!(add(&ks, &hub, sid, 0, spec("a", "", 0)), 0);
    assert_eq!(add(&ks, &hub, sid, 2, spec("a", "", 0)), 2);
    assert_eq!(add(&ks, &hub, sid, 0, spec("a", "", 0)), 1);
    assert_eq!(add(&ks, &hub, sid, 0, spec("a", "", 0)), 3);
    let dup = hub.add(&ks.read().expect("lock"), sid, 2, spec("a", "", 0), None);
    assert_eq!(dup, Err(Refusal::DuplicateId));
}

#[test]
fn a_watch_from_a_compacted_revision_is_told_so() {
    let (_dir, ks) = open();
    let hub = WatchHub::default();
    for i in 0..5 {
        put(&ks, &hub, "a", &i.to_string());
    }
    apply(&ks, &hub, Command::Compact { revision: 4 });
    let (sid, _tx, mut rx) = hub.open_stream(8);
    add(&ks, &hub, sid, 1, spec("a", "", 2));
    settle(&ks, &hub);
    assert_eq!(
        drain(&mut rx),
        vec![WatchMessage::Compacted {
            watch_id: 1,
            compact_revision: 4
        }]
    );
    assert_eq!(hub.watcher_count(), 0);
}

/// A watcher that converts deletes from previous versions (the cluster API's) cannot start
/// at the compaction revision itself, whose previous versions are gone: it is compacted
/// there, while an etcd watcher is served from it.
#[test]
fn a_watcher_that_needs_previous_versions_is_compacted_at_the_compaction_revision() {
    let (_dir, ks) = open();
    let hub = WatchHub::default();
    put(&ks, &hub, "a", "1");
    let deleted = delete(&ks, &hub, b"a");
    apply(&ks, &hub, Command::Compact { revision: deleted });
    let (sid, _tx, mut rx) = hub.open_stream(8);
    let strict = WatchSpec {
        prev_kv: true,
        needs_prev_kv: true,
        ..spec("a", "", deleted)
    };
    add(&ks, &hub, sid, 1, strict);
    add(&ks, &hub, sid, 2, spec("a", "", deleted));
    settle(&ks, &hub);
    let msgs = drain(&mut rx);
    assert!(msgs.contains(&WatchMessage::Compacted {
        watch_id: 1,
        compact_revision: deleted
    }));
    assert_eq!(values(&msgs), vec![(deleted, Vec::new())]);
}

#[test]
fn a_progress_request_is_answered_once_no_watcher_is_behind() {
    let (_dir, ks) = open();
    let hub = WatchHub::default();
    for i in 0..5 {
        put(&ks, &hub, "a", &i.to_string());
    }
    apply(&ks, &hub, Command::Compact { revision: 4 });
    let (sid, _tx, mut rx) = hub.open_stream(8);
    add(&ks, &hub, sid, 1, spec("a", "", 2));
    // Not answered while the watcher is behind …
    hub.request_progress(&ks.read().expect("lock"), sid);
    assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
    // … and answered when catch-up removes it as compacted.
    settle(&ks, &hub);
    assert!(matches!(rx.try_recv(), Ok(WatchMessage::Compacted { .. })));
    assert_eq!(
        rx.try_recv().expect("progress"),
        WatchMessage::Progress {
            watch_id: -1,
            revision: 5
        }
    );
}

/// A deferred progress request is answered when the last watcher it waited for is
/// cancelled, and when its queue, full at the time, drains.
#[test]
fn a_deferred_progress_request_is_never_lost() {
    let (_dir, ks) = open();
    let hub = WatchHub::default();
    for i in 0..5 {
        put(&ks, &hub, "a", &i.to_string());
    }
    let (sid, _tx, mut rx) = hub.open_stream(8);
    add(&ks, &hub, sid, 1, spec("a", "", 1));
    hub.request_progress(&ks.read().expect("lock"), sid);
    assert!(hub.cancel(sid, 1));
    settle(&ks, &hub);
    assert_eq!(
        drain(&mut rx),
        vec![WatchMessage::Progress {
            watch_id: -1,
            revision: 5
        }]
    );

    // A full queue: the request waits for room.
    let (sid, tx, mut rx) = hub.open_stream(1);
    tx.try_send(WatchMessage::Progress {
        watch_id: 9,
        revision: 0,
    })
    .expect("room");
    hub.request_progress(&ks.read().expect("lock"), sid);
    settle(&ks, &hub);
    assert_eq!(drain(&mut rx).len(), 1);
    settle(&ks, &hub);
    assert_eq!(
        drain(&mut rx),
        vec![WatchMessage::Progress {
            watch_id: -1,
            revision: 5
        }]
    );
}

/// A client that stops reading costs nothing: once its queue is full, passes read nothing
/// for it, and when it reads again it gets every event once, in order.
#[test]
fn a_stuck_stream_is_left_alone_until_it_reads() {
    let (_dir, ks) = open();
    let hub = WatchHub::default();
    for i in 0..3000 {
        put(&ks, &hub, &format!("k{}", i % 100), &i.to_string());
    }
    let (sid, _tx, mut rx) = hub.open_stream(2);
    add(&ks, &hub, sid, 1, spec("k", "l", 1));
    settle(&ks, &hub);
    let responses = hub.catch_up_stats().responses();
    assert_eq!(responses, 2, "two batches fill the queue");
    for _ in 0..100 {
        assert!(!hub.catch_up(|| ks.read().expect("lock")));
    }
    assert_eq!(hub.catch_up_stats().responses(), responses);
    let mut seen = Vec::new();
    while hub.unsynced_count() > 0 {
        seen.extend(values(&drain(&mut rx)));
        settle(&ks, &hub);
    }
    seen.extend(values(&drain(&mut rx)));
    let want: Vec<(i64, Vec<u8>)> = (0..3000)
        .map(|i| (i + 1, i.to_string().into_bytes()))
        .collect();
    assert_eq!(seen, want);
}

/// A read that panics cancels its own watchers with the reason, and every other watcher
/// goes on being served.
#[test]
fn a_panicking_read_cancels_its_watchers_and_spares_the_rest() {
    let (_dir, ks) = open();
    // Reads the values as they are applied; once armed, panics on reading "x" again, as
    // the catch-up does when it tags the history it reads.
    let armed = Arc::new(AtomicBool::new(false));
    let tripwire = armed.clone();
    let tagger = Tagger {
        prefix: Vec::new(),
        tags: Arc::new(move |v: &[u8]| {
            assert!(
                !(tripwire.load(Ordering::Relaxed) && v == b"x"),
                "tagger cannot read this event"
            );
            vec![String::from("t")]
        }),
    };
    let hub = WatchHub::new(Some(tagger));
    put(&ks, &hub, "boom", "x");
    put(&ks, &hub, "fine", "y");
    armed.store(true, Ordering::Relaxed);
    let (sid, _tx, mut rx) = hub.open_stream(8);
    let tagged = WatchSpec {
        tag: Some("t".into()),
        ..spec("a", "z", 1)
    };
    add(&ks, &hub, sid, 1, tagged);
    add(&ks, &hub, sid, 2, spec("fine", "", 1));
    settle(&ks, &hub);
    let msgs = drain(&mut rx);
    assert!(
        msgs.iter().any(|m| matches!(m, WatchMessage::Canceled { watch_id: 1, reason } if reason.contains("tagger cannot read"))),
        "{msgs:?}"
    );
    assert_eq!(values(&msgs), vec![(2, b"y".to_vec())]);
    assert_eq!(hub.catch_up_stats().failures(), 1);
    assert_eq!(hub.watcher_count(), 1);
}

/// What a watcher costs is mostly its entry in the hub's map: a [`Watcher`] of 56 bytes (and
/// its key range, tag included, in one allocation), so 100,000 watchers stay under etcd's
/// published 350 bytes each by half. A field added here shows in this test first.
#[test]
fn a_watcher_stays_small() {
    assert_eq!(size_of::<Watcher>(), 56);
    let spec = WatchSpec {
        key: b"/things/".to_vec(),
        range_end: b"/things0".to_vec(),
        prev_kv: true,
        tag: Some("spec.nodeName=n1".into()),
        ..WatchSpec::default()
    };
    let (interest, options) = (Interest::new(&spec), Options::of(&spec));
    assert_eq!(interest.key(), b"/things/");
    assert_eq!(interest.range_end(), b"/things0");
    assert_eq!(interest.tag(options), Some("spec.nodeName=n1"));
    assert!(options.prev_kv() && !options.needs_prev_kv());
    let bare = interest.without_tag();
    assert_eq!(
        (bare.key(), bare.range_end()),
        (interest.key(), interest.range_end())
    );
    assert_eq!(bare.tag(options.for_history()), None);
    let untagged = Interest::new(&WatchSpec {
        key: b"k".to_vec(),
        ..WatchSpec::default()
    });
    assert_eq!(untagged.range_end(), b"");
    assert_eq!(untagged.tag(Options::default()), None);
}

mod model {
    //! Random watch create/cancel/progress sequences with writes and compactions
    //! interleaved, against etcd's watch semantics: each watcher receives exactly the
    //! changes in its range from its start, in order, once (a prefix of them when compacted
    //! or cancelled); a refused create gets one answer; a progress response follows every
    //! event at or below its revision of every watcher on the stream.

    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::command::EventKind;
    use crate::key_index::is_empty_range;

    #[derive(Debug, Clone)]
    enum Op {
        Put(u8),
        Delete(u8),
        Compact,
        /// key, range end (0: single key, 1: to the end, 2..: an exclusive end), start
        /// (0: now, n: n revisions back), prev_kv, stream
        Create(u8, u8, u8, bool, usize),
        Cancel(usize),
        Progress(usize),
        /// Read up to n messages from a stream.
        Read(usize, u8),
        Pass,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (0u8..6).prop_map(Op::Put),
            3 => (0u8..6).prop_map(Op::Delete),
            1 => Just(Op::Compact),
            4 => (0u8..6, 0u8..8, 0u8..12, any::<bool>(), 0usize..2)
                .prop_map(|(k, e, s, p, st)| Op::Create(k, e, s, p, st)),
            1 => (0usize..16).prop_map(Op::Cancel),
            1 => (0usize..2).prop_map(Op::Progress),
            4 => (0usize..2, 0u8..4).prop_map(|(s, n)| Op::Read(s, n)),
            3 => Just(Op::Pass),
        ]
    }

    fn key(k: u8) -> Vec<u8> {
        vec![b'a' + k]
    }

    struct Watch {
        stream: usize,
        watch_id: i64,
        spec: WatchSpec,
        /// First revision it must receive.
        from: i64,
        cancelled: bool,
    }

    #[derive(Default)]
    struct Seen {
        events: Vec<Event>,
        done: bool,
    }

    fn in_range(spec: &WatchSpec, k: &[u8]) -> bool {
        use std::ops::RangeBounds;
        RangeBounds::<&[u8]>::contains(
            &crate::key_index::range_bounds(&spec.key, &spec.range_end),
            &k,
        )
    }

    /// One stream's client.
    struct Client {
        rx: WatchReceiver,
        /// Watchers that existed at each progress request, oldest first. The k-th response
        /// answers the k-th request or a later one (each answers at least one, in order), so
        /// it was queued after the k-th request: its watchers all existed then.
        requests: std::collections::VecDeque<usize>,
        last: usize,
    }

    type Log = Vec<(i64, Vec<u8>, Option<Vec<u8>>)>;

    impl Client {
        /// Reads up to `max` messages, checking progress responses as they come.
        fn read(
            &mut self,
            s: usize,
            max: usize,
            watches: &[Watch],
            seen: &mut BTreeMap<(usize, i64), Seen>,
            log: &Log,
        ) -> Result<(), TestCaseError> {
            for _ in 0..max {
                let Ok(msg) = self.rx.try_recv() else { break };
                match msg {
                    WatchMessage::Events {
                        watch_id, events, ..
                    } => {
                        let e = seen.entry((s, watch_id)).or_default();
                        prop_assert!(!e.done, "events after the end");
                        e.events.extend(events.iter());
                    }
                    WatchMessage::Compacted { watch_id, .. } => {
                        seen.entry((s, watch_id)).or_default().done = true;
                    }
                    WatchMessage::Progress {
                        watch_id: -1,
                        revision,
                    } => {
                        let n = self.requests.pop_front().unwrap_or(self.last);
                        self.last = n;
                        for w in watches[..n]
                            .iter()
                            .filter(|w| w.stream == s && !w.cancelled)
                        {
                            let got = seen.get(&(s, w.watch_id));
                            if got.is_some_and(|g| g.done) {
                                continue;
                            }
                            let want = log
                                .iter()
                                .filter(|(r, k, _)| {
                                    *r >= w.from && *r <= revision && in_range(&w.spec, k)
                                })
                                .count();
                            let have = got.map_or(0, |g| {
                                g.events
                                    .iter()
                                    .filter(|e| e.kv.mod_revision <= revision)
                                    .count()
                            });
                            prop_assert_eq!(
                                have,
                                want,
                                "progress {} before watcher {}'s events",
                                revision,
                                w.watch_id
                            );
                        }
                    }
                    other => prop_assert!(false, "unexpected {:?}", other),
                }
            }
            Ok(())
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        #[test]
        fn watches_follow_etcd_semantics(ops in proptest::collection::vec(op(), 1..80)) {
            let (_dir, ks) = open();
            let hub = WatchHub::default();
            let mut sids = Vec::new();
            let mut txs = Vec::new();
            let mut clients = Vec::new();
            for _ in 0..2 {
                let (sid, tx, rx) = hub.open_stream(3);
                sids.push(sid);
                txs.push(tx);
                clients.push(Client { rx, requests: Default::default(), last: 0 });
            }
            let mut log: Log = Vec::new();
            let mut live: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            let mut watches: Vec<Watch> = Vec::new();
            let mut seen: BTreeMap<(usize, i64), Seen> = BTreeMap::new();
            let mut rev = 0i64;
            let mut n = 0u32;
            for op in ops {
                match op {
                    Op::Put(k) => {
                        n += 1;
                        let v = n.to_string();
                        rev = put(&ks, &hub, std::str::from_utf8(&key(k)).expect("ascii"), &v);
                        live.insert(key(k), v.clone().into_bytes());
                        log.push((rev, key(k), Some(v.into_bytes())));
                    }
                    Op::Delete(k) => {
                        if live.remove(&key(k)).is_some() {
                            rev = delete(&ks, &hub, &key(k));
                            log.push((rev, key(k), None));
                        }
                    }
                    Op::Compact => {
                        if rev > 0 {
                            apply(&ks, &hub, Command::Compact { revision: rev });
                        }
                    }
                    Op::Create(k, e, back, prev_kv, s) => {
                        let range_end = match e {
                            0 => Vec::new(),
                            1 => vec![0],
                            e => key(e - 2),
                        };
                        let start = if back == 0 { 0 } else { (rev + 1 - i64::from(back)).max(1) };
                        let spec = WatchSpec { key: key(k), range_end, start_revision: start, prev_kv, ..WatchSpec::default() };
                        let empty = is_empty_range(&spec.key, &spec.range_end);
                        match hub.add(&ks.read().expect("lock"), sids[s], 0, spec.clone(), None) {
                            Ok(watch_id) => {
                                prop_assert!(!empty);
                                let from = if start == 0 { rev + 1 } else { start };
                                watches.push(Watch { stream: s, watch_id, spec, from, cancelled: false });
                            }
                            Err(why) => prop_assert!(empty && why == Refusal::EmptyRange),
                        }
                    }
                    Op::Cancel(i) => {
                        if let Some(w) = watches.get_mut(i) && !w.cancelled {
                            w.cancelled = hub.cancel(sids[w.stream], w.watch_id);
                        }
                    }
                    Op::Progress(s) => {
                        clients[s].requests.push_back(watches.len());
                        hub.request_progress(&ks.read().expect("lock"), sids[s]);
                    }
                    Op::Read(s, max) => clients[s].read(s, usize::from(max), &watches, &mut seen, &log)?,
                    Op::Pass => { hub.catch_up(|| ks.read().expect("lock")); }
                }
            }
            // The clients read everything; catch-up finishes.
            for _ in 0..10_000 {
                for (s, c) in clients.iter_mut().enumerate() {
                    c.read(s, usize::MAX, &watches, &mut seen, &log)?;
                }
                let more = hub.catch_up(|| ks.read().expect("lock"));
                if !more && hub.unsynced_count() == 0 && clients.iter().all(|c| c.rx.is_empty()) {
                    break;
                }
            }
            prop_assert_eq!(hub.unsynced_count(), 0);
            for w in &watches {
                let got = seen.remove(&(w.stream, w.watch_id)).unwrap_or_default();
                let want: Log = log
                    .iter()
                    .filter(|(r, k, _)| *r >= w.from && in_range(&w.spec, k))
                    .cloned()
                    .collect();
                let got_log: Log = got
                    .events
                    .iter()
                    .map(|e| {
                        let value = (e.kind == EventKind::Put).then(|| e.kv.value.clone());
                        (e.kv.mod_revision, e.kv.key.clone(), value)
                    })
                    .collect();
                if got.done || w.cancelled {
                    prop_assert!(want.starts_with(&got_log), "watcher {} got {:?}, not a prefix of {:?}", w.watch_id, got_log, want);
                } else {
                    prop_assert_eq!(&got_log, &want, "watcher {}", w.watch_id);
                }
                // Previous versions, where sent, are the key's state just before.
                for e in got.events.iter().filter(|e| e.prev_kv.is_some()) {
                    prop_assert!(w.spec.prev_kv);
                    let before = log.iter().rev().find(|(r, k, _)| *r < e.kv.mod_revision && *k == e.kv.key);
                    let prev = e.prev_kv.as_ref().expect("filtered");
                    prop_assert_eq!(before.and_then(|b| b.2.clone()), Some(prev.value.clone()));
                }
            }
            drop(txs);
        }
    }
}
