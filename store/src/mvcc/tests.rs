//! The keyspace against a model that keeps a full copy of every revision.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::command::{
    Alarm, Compare, CompareResult, CompareTarget, DeleteRangeResponse, KeyValue, PutRequest,
    RangeRequest, RangeResponse, RequestOp, ResponseOp, SortOrder, SortTarget,
};

fn open_temp() -> (tempfile::TempDir, Mvcc) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = backend::open(dir.path()).expect("open backend");
    (dir, Mvcc::open(db).expect("open mvcc"))
}

/// `from`'s keyspace carried into `to` as a Raft snapshot carries it: streamed to a backup
/// file and installed from the file. How many stored versions it carried.
fn carry_snapshot(from: &Mvcc, to: &mut Mvcc) -> usize {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("snapshot");
    let mut file = std::fs::File::create(&path).expect("create snapshot file");
    let source = crate::backup::Source {
        cluster_id: 1,
        member_id: 1,
        member_name: "m".into(),
    };
    let (summary, _) = crate::backup::write(from.db(), source, &[], &mut |b| {
        file.write_all(&b).map_err(StoreError::internal)
    })
    .expect("write snapshot");
    crate::backup::verify(&path).expect("verify snapshot");
    crate::backup::install(&path, to, &[]).expect("install snapshot");
    summary.versions as usize
}

fn put(key: &str, value: &str) -> Command {
    Command::Txn(TxnRequest::single(RequestOp::Put(PutRequest {
        key: key.into(),
        value: value.into(),
        prev_kv: true,
        ..PutRequest::default()
    })))
}

fn range_all(at: i64) -> RangeRequest {
    RangeRequest {
        key: vec![0],
        range_end: vec![0],
        revision: at,
        ..RangeRequest::default()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Put {
        key: u8,
        value: u8,
        lease: bool,
    },
    Delete {
        key: u8,
        end: Option<u8>,
    },
    CasPut {
        key: u8,
        version: i64,
        value: u8,
    },
    Compact {
        back: i64,
    },
    /// One batch of the background deletion of compacted versions.
    Purge {
        batch: usize,
    },
    Grant,
    Revoke {
        pick: usize,
    },
    Reopen,
    Read {
        back: i64,
        key: u8,
        end: Option<u8>,
        limit: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..6;
    prop_oneof![
        4 => (key.clone(), any::<u8>(), any::<bool>()).prop_map(|(key, value, lease)| Op::Put { key, value, lease }),
        2 => (key.clone(), proptest::option::of(0u8..7)).prop_map(|(key, end)| Op::Delete { key, end }),
        2 => (key.clone(), 0i64..4, any::<u8>()).prop_map(|(key, version, value)| Op::CasPut { key, version, value }),
        1 => (0i64..6).prop_map(|back| Op::Compact { back }),
        2 => (1usize..4).prop_map(|batch| Op::Purge { batch }),
        1 => Just(Op::Grant),
        1 => (0usize..4).prop_map(|pick| Op::Revoke { pick }),
        1 => Just(Op::Reopen),
        4 => (0i64..8, key, proptest::option::of(0u8..7), 0i64..3)
            .prop_map(|(back, key, end, limit)| Op::Read { back, key, end, limit }),
    ]
}

fn k(b: u8) -> Vec<u8> {
    vec![b'k', b'0' + b]
}

/// The model: the whole keyspace after every revision.
struct Model {
    states: Vec<BTreeMap<Vec<u8>, KeyValue>>,
    compacted: i64,
    leases: Vec<i64>,
}

impl Model {
    fn current(&self) -> &BTreeMap<Vec<u8>, KeyValue> {
        self.states.last().expect("revision 0 exists")
    }

    fn revision(&self) -> i64 {
        self.states.len() as i64 - 1
    }

    /// One transaction: puts and deletes at the next revision.
    fn write(&mut self, puts: &[(Vec<u8>, Vec<u8>, i64)], deletes: &[Vec<u8>]) {
        if puts.is_empty() && deletes.iter().all(|d| !self.current().contains_key(d)) {
            return;
        }
        let rev = self.revision() + 1;
        let mut next = self.current().clone();
        for d in deletes {
            next.remove(d);
        }
        for (key, value, lease) in puts {
            let (create, version) = match next.get(key) {
                Some(p) => (p.create_revision, p.version + 1),
                None => (rev, 1),
            };
            next.insert(
                key.clone(),
                KeyValue {
                    key: key.clone(),
                    create_revision: create,
                    mod_revision: rev,
                    version,
                    value: value.clone(),
                    lease: *lease,
                },
            );
        }
        self.states.push(next);
    }
}

fn run(ops: Vec<Op>) {
    let (dir, mut m) = open_temp();
    let mut model = Model {
        states: vec![BTreeMap::new()],
        compacted: 0,
        leases: Vec::new(),
    };
    let mut next_lease = 100;
    for op in ops {
        match op {
            Op::Put { key, value, lease } => {
                let lease = if lease {
                    model.leases.last().copied().unwrap_or(0)
                } else {
                    0
                };
                let cmd = Command::Txn(TxnRequest::single(RequestOp::Put(PutRequest {
                    key: k(key),
                    value: vec![value],
                    lease,
                    ..PutRequest::default()
                })));
                let a = m.apply(&cmd, &[]).expect("apply");
                assert!(a.response.result.is_ok());
                model.write(&[(k(key), vec![value], lease)], &[]);
                assert_eq!(a.response.revision, model.revision());
                assert_eq!(a.events.len(), 1);
            }
            Op::Delete { key, end } => {
                let range_end = end.map(k).unwrap_or_default();
                let cmd = Command::Txn(TxnRequest::single(RequestOp::DeleteRange(
                    DeleteRangeRequest {
                        key: k(key),
                        range_end: range_end.clone(),
                        prev_kv: true,
                    },
                )));
                let a = m.apply(&cmd, &[]).expect("apply");
                let victims: Vec<Vec<u8>> = model
                    .current()
                    .keys()
                    .filter(|x| {
                        if range_end.is_empty() {
                            **x == k(key)
                        } else {
                            **x >= k(key) && **x < range_end
                        }
                    })
                    .cloned()
                    .collect();
                let Ok(Outcome::Txn(t)) = a.response.result else {
                    panic!("delete failed: {:?}", a.response.result)
                };
                let ResponseOp::DeleteRange(d) = &t.responses[0] else {
                    panic!("wrong response")
                };
                assert_eq!(d.deleted as usize, victims.len());
                assert_eq!(a.events.len(), victims.len());
                model.write(&[], &victims);
                assert_eq!(a.response.revision, model.revision());
            }
            Op::CasPut {
                key,
                version,
                value,
            } => {
                let cmd = Command::Txn(TxnRequest {
                    compare: vec![Compare {
                        key: k(key),
                        range_end: Vec::new(),
                        result: CompareResult::Equal,
                        target: CompareTarget::Version(version),
                    }],
                    success: vec![RequestOp::Put(PutRequest {
                        key: k(key),
                        value: vec![value],
                        ..PutRequest::default()
                    })],
                    failure: vec![RequestOp::Range(RangeRequest {
                        key: k(key),
                        ..RangeRequest::default()
                    })],
                    auth_revision: None,
                });
                let a = m.apply(&cmd, &[]).expect("apply");
                let current = model.current().get(&k(key)).map_or(0, |kv| kv.version);
                let Ok(Outcome::Txn(t)) = a.response.result else {
                    panic!("txn failed")
                };
                assert_eq!(t.succeeded, current == version);
                if t.succeeded {
                    model.write(&[(k(key), vec![value], 0)], &[]);
                } else {
                    let ResponseOp::Range(r) = &t.responses[0] else {
                        panic!("wrong response")
                    };
                    assert_eq!(r.kvs.first(), model.current().get(&k(key)));
                }
                assert_eq!(a.response.revision, model.revision());
            }
            Op::Compact { back } => {
                let at = model.revision() - back;
                let a = m
                    .apply(&Command::Compact { revision: at }, &[])
                    .expect("apply");
                if at <= model.compacted {
                    assert!(matches!(
                        a.response.result,
                        Err(StoreError::Compacted { .. })
                    ));
                } else {
                    assert_eq!(a.response.result, Ok(Outcome::Compacted));
                    model.compacted = at;
                }
            }
            Op::Purge { batch } => {
                let before = m.backlog().pending();
                let left = m.delete_compacted(batch).expect("delete compacted");
                assert_eq!(left, before.saturating_sub(batch));
            }
            Op::Grant => {
                next_lease += 1;
                let a = m
                    .apply(
                        &Command::LeaseGrant {
                            id: next_lease,
                            ttl: 5,
                        },
                        &[],
                    )
                    .expect("apply");
                assert!(a.response.result.is_ok());
                model.leases.push(next_lease);
            }
            Op::Revoke { pick } => {
                if model.leases.is_empty() {
                    continue;
                }
                let id = model.leases.remove(pick % model.leases.len());
                let a = m.apply(&Command::LeaseRevoke { id }, &[]).expect("apply");
                assert_eq!(a.response.result, Ok(Outcome::LeaseRevoked));
                let victims: Vec<Vec<u8>> = model
                    .current()
                    .values()
                    .filter(|kv| kv.lease == id)
                    .map(|kv| kv.key.clone())
                    .collect();
                model.write(&[], &victims);
                assert_eq!(a.response.revision, model.revision());
            }
            Op::Reopen => {
                let db = m.db().clone();
                drop(m);
                m = Mvcc::open(db).expect("reopen");
                assert_eq!(m.revision(), model.revision());
                assert_eq!(m.compacted(), model.compacted);
            }
            Op::Read {
                back,
                key,
                end,
                limit,
            } => {
                let at = (model.revision() - back).max(1);
                let range_end = end.map(k).unwrap_or_default();
                let req = RangeRequest {
                    key: k(key),
                    range_end: range_end.clone(),
                    revision: at,
                    limit,
                    ..RangeRequest::default()
                };
                let got = m.range(&req);
                if at > model.revision() {
                    assert_eq!(got, Err(StoreError::FutureRevision));
                    continue;
                }
                if at < model.compacted {
                    assert!(matches!(got, Err(StoreError::Compacted { .. })));
                    continue;
                }
                let want: Vec<KeyValue> = model.states[at as usize]
                    .values()
                    .filter(|kv| {
                        if range_end.is_empty() {
                            kv.key == k(key)
                        } else {
                            kv.key >= k(key) && kv.key < range_end
                        }
                    })
                    .cloned()
                    .collect();
                let got = got.expect("range");
                assert_eq!(got.count as usize, want.len());
                let shown = if limit > 0 {
                    want.len().min(limit as usize)
                } else {
                    want.len()
                };
                assert_eq!(got.kvs, want[..shown]);
                assert_eq!(got.more, shown < want.len());
            }
        }
        // Lease attachments always match the live keys.
        for (id, lease) in m.leases() {
            let live: BTreeSet<Vec<u8>> = model
                .current()
                .values()
                .filter(|kv| kv.lease == *id)
                .map(|kv| kv.key.clone())
                .collect();
            assert_eq!(lease.keys, live, "keys of lease {id}");
        }
    }
    // The backend holds exactly the versions the index has, plus the backlog.
    assert_eq!(
        stored_versions(&m),
        indexed_versions(&m) + m.backlog().pending()
    );
    // A snapshot taken with part of the backlog left carries only what the index has.
    let (_fresh_dir, mut fresh) = open_temp();
    assert_eq!(carry_snapshot(&m, &mut fresh), indexed_versions(&m));
    assert_eq!(fresh.backlog().pending(), 0);
    // Everything at and after the compaction point reads back, also after a reopen (with
    // whatever backlog was left) and from the snapshot.
    let db = m.db().clone();
    drop(m);
    let m = Mvcc::open(db).expect("reopen");
    for at in model.compacted.max(1)..=model.revision() {
        let want: Vec<KeyValue> = model.states[at as usize].values().cloned().collect();
        let got = m.range(&range_all(at)).expect("range");
        assert_eq!(got.kvs, want, "at revision {at}");
        let got = fresh.range(&range_all(at)).expect("range");
        assert_eq!(got.kvs, want, "from the snapshot, at revision {at}");
    }
    assert_eq!(
        history(&fresh, model.compacted),
        history(&m, model.compacted)
    );
    // Draining the backlog leaves exactly the indexed versions.
    while m.delete_compacted(2).expect("delete compacted") > 0 {}
    assert_eq!(stored_versions(&m), indexed_versions(&m));
    drop(dir);
}

/// Rows in the backend's `kv` column family.
fn stored_versions(m: &Mvcc) -> usize {
    m.db()
        .iterator_cf(backend::cf(m.db(), CF_KV), IteratorMode::Start)
        .count()
}

/// Versions the index knows, over every key.
fn indexed_versions(m: &Mvcc) -> usize {
    m.index
        .changes(&[0], &[0], 0, m.revision(), usize::MAX)
        .changes
        .len()
}

/// Every change from revision `from` on, with previous versions: what a watcher from there
/// reads.
fn history(m: &Mvcc, from: i64) -> Vec<(i64, Vec<Event>)> {
    m.read_history(&[0], &[0], from, usize::MAX, true, usize::MAX)
        .expect("history")
        .revisions
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn keyspace_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops);
    }
}

#[test]
fn txn_reads_see_its_own_writes_and_nested_compares_use_the_old_state() {
    let (_dir, mut m) = open_temp();
    m.apply(&put("a", "1"), &[]).expect("apply");
    let cmd = Command::Txn(TxnRequest {
        compare: vec![],
        success: vec![
            RequestOp::Put(PutRequest {
                key: "a".into(),
                value: "2".into(),
                ..PutRequest::default()
            }),
            RequestOp::Range(RangeRequest {
                key: "a".into(),
                ..RangeRequest::default()
            }),
            RequestOp::Txn(TxnRequest {
                // Evaluated before the transaction: "a" is still "1".
                compare: vec![Compare {
                    key: "a".into(),
                    range_end: vec![],
                    result: CompareResult::Equal,
                    target: CompareTarget::Value("1".into()),
                }],
                success: vec![RequestOp::Put(PutRequest {
                    key: "b".into(),
                    value: "x".into(),
                    ..PutRequest::default()
                })],
                failure: vec![],
                auth_revision: None,
            }),
        ],
        failure: vec![],
        auth_revision: None,
    });
    let a = m.apply(&cmd, &[]).expect("apply");
    assert_eq!(a.response.revision, 2);
    let Ok(Outcome::Txn(t)) = a.response.result else {
        panic!("txn failed")
    };
    let ResponseOp::Range(r) = &t.responses[1] else {
        panic!("wrong response")
    };
    assert_eq!(r.kvs[0].value, b"2");
    assert_eq!(r.kvs[0].mod_revision, 2);
    assert_eq!(r.kvs[0].version, 2);
    let ResponseOp::Txn(inner) = &t.responses[2] else {
        panic!("wrong response")
    };
    assert!(inner.succeeded);
    // Both writes share revision 2, with sub revisions 0 and 1.
    assert_eq!(a.events.len(), 2);
    assert!(a.events.iter().all(|e| e.kv.mod_revision == 2));
}

#[test]
fn compare_on_missing_keys_uses_zero_values_except_value() {
    let (_dir, mut m) = open_temp();
    let cas = |target| {
        Command::Txn(TxnRequest {
            compare: vec![Compare {
                key: "missing".into(),
                range_end: vec![],
                result: CompareResult::Equal,
                target,
            }],
            success: vec![],
            failure: vec![],
            auth_revision: None,
        })
    };
    let succeeded =
        |m: &mut Mvcc, target| match m.apply(&cas(target), &[]).expect("apply").response.result {
            Ok(Outcome::Txn(t)) => t.succeeded,
            other => panic!("{other:?}"),
        };
    assert!(succeeded(&mut m, CompareTarget::Version(0)));
    assert!(succeeded(&mut m, CompareTarget::Create(0)));
    assert!(succeeded(&mut m, CompareTarget::Mod(0)));
    assert!(succeeded(&mut m, CompareTarget::Lease(0)));
    assert!(!succeeded(&mut m, CompareTarget::Value(Vec::new())));
    // A read-only transaction does not take a revision.
    assert_eq!(m.revision(), 0);
}

#[test]
fn failed_checks_write_nothing() {
    let (_dir, mut m) = open_temp();
    m.apply(&put("a", "1"), &[]).expect("apply");
    let cmd = Command::Txn(TxnRequest {
        compare: vec![],
        success: vec![
            RequestOp::Put(PutRequest {
                key: "b".into(),
                value: "1".into(),
                ..PutRequest::default()
            }),
            RequestOp::Put(PutRequest {
                key: "c".into(),
                lease: 42,
                ..PutRequest::default()
            }),
        ],
        failure: vec![],
        auth_revision: None,
    });
    let a = m.apply(&cmd, &[]).expect("apply");
    assert_eq!(a.response.result, Err(StoreError::LeaseNotFound));
    assert_eq!(a.response.revision, 1);
    assert!(a.events.is_empty());
    assert_eq!(m.range(&range_all(0)).expect("range").count, 1);
    let ignore = Command::Txn(TxnRequest::single(RequestOp::Put(PutRequest {
        key: "nope".into(),
        ignore_value: true,
        ..PutRequest::default()
    })));
    let a = m.apply(&ignore, &[]).expect("apply");
    assert_eq!(a.response.result, Err(StoreError::KeyNotFound));
}

#[test]
fn no_space_alarm_refuses_puts_but_not_deletes_or_reads() {
    let (_dir, mut m) = open_temp();
    m.apply(&put("a", "1"), &[]).expect("apply");
    m.apply(
        &Command::AlarmActivate {
            member: 1,
            alarm: Alarm::NoSpace,
        },
        &[],
    )
    .expect("apply");
    let a = m.apply(&put("b", "1"), &[]).expect("apply");
    assert_eq!(a.response.result, Err(StoreError::NoSpace));
    let del = Command::Txn(TxnRequest::single(RequestOp::DeleteRange(
        DeleteRangeRequest {
            key: "a".into(),
            ..DeleteRangeRequest::default()
        },
    )));
    assert!(m.apply(&del, &[]).expect("apply").response.result.is_ok());
    assert_eq!(m.range(&range_all(1)).expect("range").count, 1);
    m.apply(
        &Command::AlarmDeactivate {
            member: 1,
            alarm: Alarm::NoSpace,
        },
        &[],
    )
    .expect("apply");
    assert!(
        m.apply(&put("b", "1"), &[])
            .expect("apply")
            .response
            .result
            .is_ok()
    );
}

#[test]
fn sorted_and_filtered_ranges() {
    let (_dir, mut m) = open_temp();
    for (key, value) in [("a", "3"), ("b", "1"), ("c", "2")] {
        m.apply(&put(key, value), &[]).expect("apply");
    }
    m.apply(&put("a", "4"), &[]).expect("apply");
    let req = RangeRequest {
        key: vec![0],
        range_end: vec![0],
        sort_target: SortTarget::Value,
        sort_order: SortOrder::Descend,
        limit: 2,
        ..RangeRequest::default()
    };
    let r = m.range(&req).expect("range");
    let keys: Vec<&[u8]> = r.kvs.iter().map(|kv| kv.key.as_slice()).collect();
    assert_eq!(keys, [b"a".as_slice(), b"c"]);
    assert!(r.more);
    assert_eq!(r.count, 3);
    let req = RangeRequest {
        key: vec![0],
        range_end: vec![0],
        min_mod_revision: 3,
        keys_only: true,
        ..RangeRequest::default()
    };
    let r = m.range(&req).expect("range");
    assert_eq!(r.kvs.len(), 2);
    assert!(r.kvs.iter().all(|kv| kv.value.is_empty()));
    let r = m
        .range(&RangeRequest {
            count_only: true,
            ..range_all(0)
        })
        .expect("range");
    assert!(r.kvs.is_empty());
    assert_eq!(r.count, 3);
}

/// Compaction answers at once and leaves the deletions to batches; whether a restart comes
/// before, between or after them, every read at or after the compaction revision (ranges and
/// watch catch-up) sees the same as before the compaction, and the backlog is what is left.
#[test]
fn compaction_deletes_in_batches_and_a_restart_mid_way_changes_nothing_visible() {
    let (_dir, mut m) = open_temp();
    for i in 0..60 {
        m.apply(&put(&format!("k{}", i % 7), &i.to_string()), &[])
            .expect("apply");
        if i % 11 == 0 {
            let del = Command::Txn(TxnRequest::single(RequestOp::DeleteRange(
                DeleteRangeRequest {
                    key: format!("k{}", i % 5).into(),
                    range_end: Vec::new(),
                    prev_kv: false,
                },
            )));
            m.apply(&del, &[]).expect("apply");
        }
    }
    let at = 40;
    let top = m.revision();
    let visible = |m: &Mvcc| {
        let ranges: Vec<RangeResponse> = (at..=top)
            .map(|r| m.range(&range_all(r)).expect("range"))
            .collect();
        // From just after the compaction revision: the previous versions of changes at the
        // compaction revision itself are what compaction drops.
        (ranges, history(m, at + 1))
    };
    let before = visible(&m);
    let stored = stored_versions(&m);
    let a = m
        .apply(&Command::Compact { revision: at }, &[])
        .expect("apply");
    assert_eq!(a.response.result, Ok(Outcome::Compacted));
    // Nothing deleted yet: the backend still has every version.
    let backlog = m.backlog().pending();
    assert!(backlog > 6, "backlog of {backlog}");
    assert_eq!(stored_versions(&m), stored);
    assert_eq!(visible(&m), before);
    // One batch, then a restart.
    assert_eq!(m.delete_compacted(4).expect("batch"), backlog - 4);
    let db = m.db().clone();
    drop(m);
    let m = Mvcc::open(db).expect("reopen");
    assert_eq!(m.compacted(), at);
    assert_eq!(m.backlog().pending(), backlog - 4);
    assert_eq!(visible(&m), before);
    // The rest, and a restart after it.
    while m.delete_compacted(4).expect("batch") > 0 {}
    assert_eq!(stored_versions(&m), stored - backlog);
    assert_eq!(visible(&m), before);
    let db = m.db().clone();
    drop(m);
    let m = Mvcc::open(db).expect("reopen");
    assert_eq!(m.backlog().pending(), 0);
    assert_eq!(visible(&m), before);
    assert!(matches!(
        m.range(&range_all(at - 1)),
        Err(StoreError::Compacted { .. })
    ));
}

/// A range whose end sorts before its key (or equals it) is empty: a Range, a DeleteRange
/// and a compare over it read nothing, delete nothing and never panic.
#[test]
fn reversed_ranges_are_empty() {
    let (_dir, mut m) = open_temp();
    for key in ["a", "b", "c"] {
        m.apply(&put(key, "v"), &[]).expect("apply");
    }
    for (key, end) in [("c", "a"), ("b", "b")] {
        let r = m
            .range(&RangeRequest {
                key: key.into(),
                range_end: end.into(),
                ..RangeRequest::default()
            })
            .expect("range");
        assert_eq!((r.kvs.len(), r.count), (0, 0));
        let del = Command::Txn(TxnRequest {
            compare: vec![Compare {
                key: key.into(),
                range_end: end.into(),
                result: CompareResult::Equal,
                target: CompareTarget::Version(0),
            }],
            success: vec![RequestOp::DeleteRange(DeleteRangeRequest {
                key: key.into(),
                range_end: end.into(),
                prev_kv: true,
            })],
            failure: Vec::new(),
            auth_revision: None,
        });
        let a = m.apply(&del, &[]).expect("apply");
        let Ok(Outcome::Txn(t)) = a.response.result else {
            panic!("txn failed: {:?}", a.response.result)
        };
        assert!(t.succeeded, "an empty range compares as zero values");
        assert_eq!(
            t.responses,
            [ResponseOp::DeleteRange(DeleteRangeResponse::default())]
        );
        assert!(a.events.is_empty());
    }
    assert_eq!(m.range(&range_all(0)).expect("range").count, 3);
}

/// `keys_only` blanks values after sorting and limiting: a sort by value with a limit picks
/// the same keys with or without it.
#[test]
fn keys_only_sorts_by_the_real_values() {
    let (_dir, mut m) = open_temp();
    for (key, value) in [("a", "1"), ("b", "3"), ("c", "2")] {
        m.apply(&put(key, value), &[]).expect("apply");
    }
    let by_value = |keys_only| RangeRequest {
        sort_target: SortTarget::Value,
        sort_order: SortOrder::Descend,
        limit: 2,
        keys_only,
        ..range_all(0)
    };
    let full = m.range(&by_value(false)).expect("range");
    let keys = m.range(&by_value(true)).expect("range");
    let names = |r: &RangeResponse| r.kvs.iter().map(|kv| kv.key.clone()).collect::<Vec<_>>();
    assert_eq!(names(&full), [b"b".to_vec(), b"c".to_vec()]);
    assert_eq!(names(&keys), names(&full));
    assert!(keys.more);
    assert!(keys.kvs.iter().all(|kv| kv.value.is_empty()));
}

#[test]
fn snapshot_installs_into_a_fresh_member() {
    let (_a, mut m) = open_temp();
    for i in 0..20 {
        m.apply(&put(&format!("k{}", i % 7), &i.to_string()), &[])
            .expect("apply");
    }
    m.apply(&Command::LeaseGrant { id: 9, ttl: 30 }, &[])
        .expect("apply");
    m.apply(&Command::Compact { revision: 10 }, &[])
        .expect("apply");
    m.apply(
        &Command::AlarmActivate {
            member: 3,
            alarm: Alarm::NoSpace,
        },
        &[],
    )
    .expect("apply");
    let (_b, mut fresh) = open_temp();
    fresh.apply(&put("stale", "x"), &[]).expect("apply");
    fresh
        .apply(&Command::LeaseGrant { id: 4, ttl: 30 }, &[])
        .expect("apply");
    carry_snapshot(&m, &mut fresh);
    assert_eq!(fresh.revision(), m.revision());
    assert_eq!(fresh.compacted(), 10);
    assert_eq!(fresh.leases().keys().copied().collect::<Vec<_>>(), [9]);
    assert_eq!(
        fresh.alarms(),
        [(3, Alarm::NoSpace)],
        "alarms travel with it"
    );
    for at in 10..=m.revision() {
        assert_eq!(fresh.range(&range_all(at)), m.range(&range_all(at)));
    }
    let history = |m: &Mvcc| {
        m.read_history(&[0], &[0], 10, 100, true, usize::MAX)
            .expect("history")
            .revisions
    };
    assert_eq!(history(&fresh), history(&m));
}

fn txn_of(cmd: Command) -> TxnRequest {
    match cmd {
        Command::Txn(t) => t,
        other => panic!("not a txn: {other:?}"),
    }
}

/// A CAS on `key`'s version, putting `value`.
fn cas(key: &str, version: i64, value: &str) -> TxnRequest {
    TxnRequest {
        compare: vec![Compare {
            key: key.into(),
            range_end: Vec::new(),
            result: CompareResult::Equal,
            target: CompareTarget::Version(version),
        }],
        success: vec![RequestOp::Put(PutRequest {
            key: key.into(),
            value: value.into(),
            ..PutRequest::default()
        })],
        failure: vec![RequestOp::Range(RangeRequest {
            key: key.into(),
            ..RangeRequest::default()
        })],
        auth_revision: None,
    }
}

/// A batch (group commit) is the same as its transactions applied one by one: the same
/// responses at the same revisions, the same events per revision, the same keyspace; a later
/// transaction sees what an earlier one in the batch wrote; one that fails leaves the others
/// alone.
#[test]
fn a_batch_is_its_transactions_one_by_one() {
    let txns = vec![
        txn_of(put("a", "1")),
        cas("a", 1, "2"), // sees the put above: version 1
        cas("a", 1, "x"), // version is 2 now: fails, reads a
        txn_of(put("b", "1")),
        TxnRequest::single(RequestOp::Put(PutRequest {
            key: "c".into(),
            value: "1".into(),
            lease: 42, // no such lease: refused, nothing written
            ..PutRequest::default()
        })),
        TxnRequest::single(RequestOp::DeleteRange(DeleteRangeRequest {
            key: "b".into(),
            range_end: Vec::new(),
            prev_kv: true,
        })),
        TxnRequest::single(RequestOp::Range(RangeRequest {
            key: "a".into(),
            ..RangeRequest::default()
        })),
    ];
    let (_d1, mut alone) = open_temp();
    let mut expected = Vec::new();
    for t in &txns {
        let a = alone.apply(&Command::Txn(t.clone()), &[]).expect("apply");
        expected.push((a.response, a.events));
    }
    let (_d2, mut batched) = open_temp();
    let a = batched
        .apply(&Command::Batch(txns.clone()), &[])
        .expect("apply batch");
    let Ok(Outcome::Batch(responses)) = a.response.result else {
        panic!(
            "a batch answers with one response per transaction: {:?}",
            a.response
        );
    };
    assert_eq!(a.response.revision, alone.revision());
    assert_eq!(responses.len(), txns.len());
    for (i, ((want, want_events), got)) in expected.iter().zip(&responses).enumerate() {
        assert_eq!(want, got, "transaction {i}");
        let (rev, events) = &a.batch[i];
        assert_eq!(*rev, got.revision, "transaction {i}");
        assert_eq!(want_events, events, "events of transaction {i}");
    }
    assert!(matches!(
        responses[4].result,
        Err(StoreError::LeaseNotFound)
    ));
    for at in 1..=alone.revision() {
        assert_eq!(
            alone.range(&range_all(at)).expect("range").kvs,
            batched.range(&range_all(at)).expect("range").kvs,
            "revision {at}"
        );
    }
    // Reopened from disk, the batch is all there.
    let db = batched.db().clone();
    drop(batched);
    let reopened = Mvcc::open(db).expect("reopen");
    assert_eq!(reopened.revision(), alone.revision());
}

/// Auth changes are applied, persisted and carried by snapshots; a write checked at an older
/// auth revision than the one in force when it is applied is refused, and nothing of it is
/// written.
#[test]
fn auth_state_is_durable_travels_in_snapshots_and_fences_stale_writes() {
    use crate::auth::{AuthCommand, PermKind, Permission};
    let (dir, mut m) = open_temp();
    for cmd in [
        AuthCommand::UserAdd {
            name: "root".into(),
            password: None,
        },
        AuthCommand::UserGrantRole {
            user: "root".into(),
            role: "root".into(),
        },
        AuthCommand::RoleAdd { name: "r".into() },
        AuthCommand::RoleGrantPermission {
            name: "r".into(),
            perm: Permission {
                kind: PermKind::Write,
                key: b"a".to_vec(),
                range_end: Vec::new(),
            },
        },
        AuthCommand::Enable,
    ] {
        let a = m.apply(&Command::Auth(cmd), &[]).expect("apply");
        assert_eq!(a.response.result, Ok(Outcome::Auth));
    }
    let checked_at = m.auth().state.revision;
    let stamped = |rev: u64| {
        let Command::Txn(mut t) = put("a", "1") else {
            unreachable!("put is a txn")
        };
        t.auth_revision = Some(rev);
        Command::Txn(t)
    };
    let ok = m.apply(&stamped(checked_at), &[]).expect("apply");
    assert!(ok.response.result.is_ok());
    m.apply(
        &Command::Auth(AuthCommand::RoleRevokePermission {
            name: "r".into(),
            key: b"a".to_vec(),
            range_end: Vec::new(),
        }),
        &[],
    )
    .expect("revoke");
    let before = m.revision();
    let stale = m.apply(&stamped(checked_at), &[]).expect("apply");
    assert_eq!(stale.response.result, Err(StoreError::AuthOldRevision));
    assert_eq!(m.revision(), before, "nothing written");
    // Refused changes leave the state alone; tokens are not part of it.
    let refused = m
        .apply(
            &Command::Auth(AuthCommand::RoleAdd { name: "r".into() }),
            &[],
        )
        .expect("apply");
    assert_eq!(refused.response.result, Err(StoreError::RoleAlreadyExist));

    let state = m.auth().state.clone();
    drop(m);
    let reopened = Mvcc::open(backend::open(dir.path()).expect("reopen")).expect("open");
    assert_eq!(reopened.auth().state, state, "persisted with the keyspace");
    let (_fresh_dir, mut fresh) = open_temp();
    carry_snapshot(&reopened, &mut fresh);
    assert_eq!(fresh.auth().state, state, "carried by a snapshot");
}

/// A lease's checkpoint survives a restart, is cleared by a checkpoint of `None`, goes with
/// the lease, and changes no revision.
#[test]
fn lease_checkpoints_are_kept_cleared_and_revoked_with_the_lease() {
    let dir = tempfile::tempdir().expect("tempdir");
    let open = || Mvcc::open(backend::open(dir.path()).expect("open backend")).expect("open");
    let mut m = open();
    for id in [1, 2] {
        m.apply(&Command::LeaseGrant { id, ttl: 60 }, &[])
            .expect("grant");
    }
    let before = m.revision();
    let a = m
        .apply(
            &Command::LeaseCheckpoint {
                leases: vec![(1, Some(20)), (2, Some(5)), (3, Some(1))],
            },
            &[],
        )
        .expect("checkpoint");
    assert_eq!(a.response.result, Ok(Outcome::Nothing));
    assert_eq!(m.revision(), before);
    let checkpoints = |m: &Mvcc| -> Vec<(i64, Option<i64>)> {
        m.leases()
            .iter()
            .map(|(id, l)| (*id, l.checkpoint))
            .collect()
    };
    drop(m);
    let mut m = open();
    assert_eq!(checkpoints(&m), [(1, Some(20)), (2, Some(5))]);
    m.apply(
        &Command::LeaseCheckpoint {
            leases: vec![(2, None)],
        },
        &[],
    )
    .expect("clear");
    m.apply(&Command::LeaseRevoke { id: 1 }, &[])
        .expect("revoke");
    drop(m);
    let m = open();
    assert_eq!(checkpoints(&m), [(2, None)]);
}
