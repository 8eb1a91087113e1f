//! openraft's storage conformance suite against the log store (segment files and RocksDB) and
//! the state machine.

use openraft::testing::{StoreBuilder, Suite};
use skiff_store::backend;
use skiff_store::mvcc::Mvcc;
use skiff_store::proposer::Proposals;
use skiff_store::raft::log_store::LogStore;
use skiff_store::raft::state_machine::{Shared, StateMachine};
use skiff_store::raft::{StorageError, TypeConfig};
use tempfile::TempDir;

struct RocksBuilder;

fn source() -> skiff_store::backup::Source {
    skiff_store::backup::Source {
        cluster_id: 1,
        member_id: 1,
        member_name: "m".into(),
    }
}

/// Log entry `i` of term 1: a put of `k<i>` with a value of `size` bytes.
fn put_entry(i: u64, size: usize) -> openraft::Entry<TypeConfig> {
    use skiff_store::command::{Command, Proposal, ProposalId, PutRequest, RequestOp, TxnRequest};
    openraft::Entry {
        log_id: openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), i),
        payload: openraft::EntryPayload::Normal(Proposal {
            id: ProposalId::default(),
            command: std::sync::Arc::new(Command::Txn(TxnRequest::single(RequestOp::Put(
                PutRequest {
                    key: format!("k{i}").into_bytes(),
                    value: vec![b'v'; size],
                    ..PutRequest::default()
                },
            )))),
        }),
    }
}

/// A member in `dir` that applied `n` puts of `size` bytes, and the snapshot it built of them.
async fn member_with_snapshot(
    dir: &std::path::Path,
    n: u64,
    size: usize,
) -> (std::sync::Arc<Shared>, skiff_store::raft::Snapshot) {
    use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
    let (shared, mut sm) = open_member(dir, 1);
    sm.apply((1..=n).map(|i| put_entry(i, size)))
        .await
        .expect("apply");
    let snap = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .expect("snapshot");
    assert_eq!(snap.meta.last_log_id.map(|l| l.index), Some(n));
    (shared, snap)
}

/// Copies the snapshot directory of the member in `from` into the member in `to`: a member
/// that kept a snapshot and stopped before installing it.
fn copy_snapshots(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to.join("snap")).expect("mkdir");
    for file in std::fs::read_dir(from.join("snap")).expect("read snap dir") {
        let file = file.expect("snap dir entry");
        std::fs::copy(file.path(), to.join("snap").join(file.file_name())).expect("copy");
    }
}

/// A member's state machine over the data directory `dir` (its keyspace and snapshots).
fn open_member(dir: &std::path::Path, id: u64) -> (std::sync::Arc<Shared>, StateMachine) {
    let db = backend::open(&dir.join("db")).expect("open backend");
    let shared = Shared::new(Mvcc::open(db).expect("keyspace"), None).expect("shared state");
    let sm = StateMachine::open(
        shared.clone(),
        Proposals::new(id),
        &dir.join("snap"),
        source(),
    )
    .expect("state machine");
    (shared, sm)
}

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for RocksBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = backend::open(&dir.path().join("db")).expect("open backend");
        let shared = Shared::new(Mvcc::open(db.clone()).expect("open keyspace"), None)
            .expect("shared state");
        let proposals = Proposals::new(1);
        let sm = StateMachine::open(
            shared,
            proposals.clone(),
            &dir.path().join("snap"),
            source(),
        )?;
        let log = LogStore::open(
            db,
            &dir.path().join(skiff_store::raft::log_store::LOG_DIR),
            proposals,
            Default::default(),
        )
        .expect("open log");
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite() {
    if let Err(e) = Suite::test_all(RocksBuilder) {
        panic!("storage conformance: {e}");
    }
}

/// A member that saved a received snapshot (which lets openraft purge the log behind it) but
/// crashed before installing it into the keyspace installs it when it starts again.
#[tokio::test]
async fn a_saved_snapshot_newer_than_the_keyspace_is_installed_on_open() {
    use openraft::storage::RaftStateMachine;

    let leader_dir = tempfile::tempdir().expect("tempdir");
    member_with_snapshot(leader_dir.path(), 5, 1).await;

    // A fresh member whose snapshot directory holds that snapshot, its keyspace still empty.
    let follower_dir = tempfile::tempdir().expect("tempdir");
    copy_snapshots(leader_dir.path(), follower_dir.path());
    let (shared, mut follower) = open_member(follower_dir.path(), 2);
    let (applied, _) = follower.applied_state().await.expect("applied state");
    assert_eq!(applied.map(|l| l.index), Some(5));
    assert_eq!(shared.read().revision(), 5);
    assert_eq!(
        shared
            .snapshots_installed
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

/// The WAL stays near its cap when one family takes nearly every write and another took one
/// early on: that one write would otherwise keep every WAL file after it until RocksDB's own
/// limit (2.3 GiB with these families). 640 MiB go through the `kv` family here.
#[test]
fn the_wal_stays_under_its_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let db = backend::open(&path).expect("open backend");
    db.put_cf(backend::cf(&db, backend::CF_META), b"early", b"write")
        .expect("put meta");
    let kv = backend::cf(&db, backend::CF_KV);
    let value = vec![7u8; 1 << 20];
    let wal = || -> u64 {
        std::fs::read_dir(&path)
            .expect("read db dir")
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
            .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
            .sum()
    };
    let mut most = 0;
    for i in 0..640u32 {
        db.put_cf(kv, i.to_be_bytes(), &value).expect("put kv");
        most = most.max(wal());
    }
    // The cap, plus the memtables being flushed when it is reached.
    let bound = backend::MAX_WAL_BYTES + (128 << 20);
    assert!(
        most <= bound,
        "WAL reached {} MiB (bound {} MiB)",
        most >> 20,
        bound >> 20
    );
}

/// A received snapshot whose bytes were damaged on the way is refused before anything is
/// kept or written: the keyspace, the applied id and the kept snapshot stay as they were, and
/// the received file is gone.
#[tokio::test]
async fn a_damaged_snapshot_is_refused_and_changes_nothing() {
    use openraft::storage::RaftStateMachine;
    use tokio::io::AsyncWriteExt;

    let leader_dir = tempfile::tempdir().expect("tempdir");
    let (_, snap) = member_with_snapshot(leader_dir.path(), 50, 1000).await;

    let follower_dir = tempfile::tempdir().expect("tempdir");
    let (shared, mut follower) = open_member(follower_dir.path(), 2);
    follower
        .apply((1..=3).map(|i| put_entry(i, 1000)))
        .await
        .expect("apply");
    let mut bytes = std::fs::read(snap.snapshot.path()).expect("read snapshot");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    let mut received = follower.begin_receiving_snapshot().await.expect("receive");
    received.write_all(&bytes).await.expect("write");
    let err = follower
        .install_snapshot(&snap.meta, received)
        .await
        .expect_err("a damaged snapshot is refused");
    assert!(err.to_string().contains("SHA-256"), "{err}");
    let (applied, _) = follower.applied_state().await.expect("applied state");
    assert_eq!(applied.map(|l| l.index), Some(3));
    assert_eq!(shared.read().revision(), 3);
    assert!(
        follower
            .get_current_snapshot()
            .await
            .expect("current")
            .is_none()
    );
    let left: Vec<_> = std::fs::read_dir(follower_dir.path().join("snap"))
        .expect("snap dir")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A crash part way through installing a snapshot (the old keyspace deleted, some of the new
/// one written, the applied id not yet) is repaired when the member starts: the kept snapshot
/// is newer than the applied id, so it is installed again, whole.
#[tokio::test]
async fn a_crash_part_way_through_an_install_is_repaired_at_start() {
    use openraft::storage::RaftStateMachine;
    use skiff_store::backup::{BackupError, read_verified};
    use skiff_store::command::RangeRequest;
    use skiff_store::error::StoreError;

    let leader_dir = tempfile::tempdir().expect("tempdir");
    let (leader_shared, snap) = member_with_snapshot(leader_dir.path(), 300, 2000).await;

    // The follower had applied 3 entries of its own when it kept the leader's snapshot.
    let follower_dir = tempfile::tempdir().expect("tempdir");
    {
        let (_, mut follower) = open_member(follower_dir.path(), 2);
        follower
            .apply((1..=3).map(|i| put_entry(i, 10)))
            .await
            .expect("apply");
    }
    copy_snapshots(leader_dir.path(), follower_dir.path());
    // The install began and stopped after its first frame.
    {
        let db = backend::open(&follower_dir.path().join("db")).expect("open backend");
        let mut mvcc = Mvcc::open(db.clone()).expect("keyspace");
        let crashed = mvcc.replace(
            |db| -> Result<_, BackupError> {
                read_verified(snap.snapshot.path(), |versions| {
                    Mvcc::restore_versions(db, versions)?;
                    Err(StoreError::internal("the process died here").into())
                })
                .map(|summary| summary.head)
            },
            &[],
        );
        assert!(crashed.is_err());
        // What the backend holds now: the first frame of the snapshot's versions (the
        // follower's own three are gone), under the follower's old revision.
        drop(mvcc);
        let kv = backend::cf(&db, backend::CF_KV);
        let stored = db.iterator_cf(kv, rocksdb::IteratorMode::Start).count();
        assert!(stored > 3 && stored < 300, "{stored} versions");
        let partial = Mvcc::open(db).expect("keyspace");
        assert_eq!(partial.revision(), 3);
    }

    let (shared, mut follower) = open_member(follower_dir.path(), 2);
    let (applied, _) = follower.applied_state().await.expect("applied state");
    assert_eq!(applied, snap.meta.last_log_id);
    let read = |shared: &Shared| {
        let all = shared
            .read()
            .range(&RangeRequest {
                key: b"k".to_vec(),
                range_end: b"l".to_vec(),
                ..RangeRequest::default()
            })
            .expect("range");
        (shared.read().revision(), all.count, all.kvs)
    };
    assert_eq!(
        read(&shared),
        read(&leader_shared),
        "the leader's keyspace, whole"
    );
}
