//! The Raft state machine: committed entries applied to the MVCC keyspace, in order, with the
//! applied log id and membership written in the same RocksDB batch as the change.
//!
//! Snapshots are the whole keyspace (every stored version since the compaction point, leases,
//! alarms) read from a RocksDB snapshot and streamed to a file, never whole in memory; the
//! newest one is kept in `<data-dir>/snap` (see [`super::snapshot`]) and sent to members that
//! fall behind the purged log.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};
use rocksdb::DB;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::snapshot::{SnapshotData, SnapshotStore};
use super::{
    Entry, LogId, Snapshot, SnapshotMeta, StorageError, StoredMembership, TypeConfig, io_error,
};
use crate::backend::{self, CF_META};
use crate::backup;
use crate::command::Response;
use crate::error::StoreError;
use crate::mvcc::Mvcc;
use crate::proposals::Proposals;
use crate::watch::{Tagger, WatchHub};

const META_APPLIED: &[u8] = b"applied";
const META_MEMBERSHIP: &[u8] = b"membership";

/// What the API services share with the state machine.
#[derive(Debug)]
pub struct Shared {
    mvcc: RwLock<Mvcc>,
    pub hub: Arc<WatchHub>,
    /// Snapshots received from a leader and installed (a metric; raised under the keyspace
    /// write lock, as the keyspace is replaced).
    pub snapshots_installed: AtomicU64,
    /// What the member times and counts as it runs (etcd's metric names).
    pub metrics: crate::metrics::StoreMetrics,
    /// Whether etcd's auth is on, without the keyspace lock.
    pub auth_gate: Arc<crate::auth::AuthGate>,
}

impl Shared {
    /// The shared state over `mvcc`; `tagger` tags events for filtered watches and indexes
    /// the keys it tags (see [`Tagger`]), which reads every key under its prefix now.
    pub fn new(mvcc: Mvcc, tagger: Option<Tagger>) -> Result<Arc<Shared>, StoreError> {
        let hub = WatchHub::new(tagger);
        hub.index_keyspace(&mvcc)?;
        Ok(Arc::new(Shared {
            auth_gate: mvcc.auth().gate.clone(),
            mvcc: RwLock::new(mvcc),
            hub: Arc::new(hub),
            snapshots_installed: AtomicU64::new(0),
            metrics: crate::metrics::StoreMetrics::default(),
        }))
    }

    pub fn read(&self) -> RwLockReadGuard<'_, Mvcc> {
        self.mvcc.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Mvcc> {
        self.mvcc.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes the changes of another etcd's revision `revision` into a mirrored keyspace and
    /// publishes them to its watchers (see [`Mvcc::mirror`]), under the write lock as the
    /// apply path does.
    pub fn mirror(
        &self,
        revision: i64,
        changes: &[crate::mvcc::Mirrored],
    ) -> Result<(), StoreError> {
        let mut mvcc = self.write();
        let events = mvcc.mirror(revision, changes)?;
        self.hub.publish(revision, &events);
        Ok(())
    }

    /// Replaces a mirrored keyspace with what its other etcd held at `revision` (see
    /// [`Mvcc::mirror_all`]), as a snapshot install replaces a member's: watchers catch up
    /// from it, or learn their start is gone.
    pub fn mirror_all(
        &self,
        revision: i64,
        kvs: &[crate::request::KeyValue],
    ) -> Result<(), StoreError> {
        let mut mvcc = self.write();
        let before = mvcc.revision();
        mvcc.mirror_all(revision, kvs)?;
        self.hub.index_keyspace(&mvcc)?;
        self.hub.unsync_all(before);
        self.snapshots_installed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Compacts a mirrored keyspace's history up to `revision` (its backlog is deleted by
    /// the compactor task).
    pub fn compact_mirror(&self, revision: i64) -> Result<(), StoreError> {
        let mut mvcc = self.write();
        if revision <= mvcc.compacted() || revision > mvcc.revision() {
            return Ok(());
        }
        mvcc.apply(&crate::command::Command::Compact { revision }, &[])?
            .response
            .result
            .map(|_| ())
    }

    /// Starts the watch catch-up task on `tasks`; it ends when `cancel` fires or the member's
    /// shared state is dropped.
    pub fn spawn_watch_catch_up(self: &Arc<Self>, cancel: CancellationToken, tasks: &TaskTracker) {
        let weak = Arc::downgrade(self);
        let hub = self.hub.clone();
        tasks.spawn(async move {
            let catch_up = hub.run_catch_up(move || {
                let shared = weak.upgrade()?;
                Some(tokio::task::spawn_blocking(move || {
                    shared.hub.catch_up(|| shared.read())
                }))
            });
            tokio::select! {
                () = cancel.cancelled() => {}
                () = catch_up => {}
            }
        });
    }
}

#[derive(Debug)]
pub struct StateMachine {
    shared: Arc<Shared>,
    /// This process's waiting proposals, told of every applied entry and installed snapshot.
    proposals: Arc<Proposals>,
    applied: Option<LogId>,
    membership: StoredMembership,
    snapshots: Arc<SnapshotStore>,
    /// Where this member's snapshots say they come from (they are backups).
    source: Arc<backup::Source>,
}

fn sm_read_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::read_state_machine(&io_error(e)).into()
}

fn sm_write_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_state_machine(&io_error(e)).into()
}

impl StateMachine {
    /// Opens the state machine over `shared`'s keyspace; snapshots go to `snapshot_dir` and
    /// say they come from `source`. A snapshot on disk newer than the keyspace (a crash
    /// between keeping a received snapshot, which lets the log behind it be purged, and
    /// installing it) is installed now.
    pub fn open(
        shared: Arc<Shared>,
        proposals: Arc<Proposals>,
        snapshot_dir: &Path,
        source: backup::Source,
    ) -> Result<StateMachine, StorageError> {
        let (applied, membership) = read_raft_meta(&shared)?;
        let snapshots = Arc::new(SnapshotStore::open(snapshot_dir, applied)?);
        let mut sm = StateMachine {
            shared,
            proposals,
            applied,
            membership,
            snapshots,
            source: Arc::new(source),
        };
        if let Some((meta, path)) = sm.snapshots.current()
            && meta.last_log_id > sm.applied
        {
            tracing::warn!(snapshot = %meta.snapshot_id, "installing a kept snapshot newer than the keyspace");
            backup::verify(&path).map_err(|e| snapshot_err(&meta, e))?;
            install_into_keyspace(&sm.shared, &meta, &path)?;
            sm.applied = meta.last_log_id;
            sm.membership = meta.last_membership;
        }
        Ok(sm)
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The last log id applied to the keyspace.
    pub fn applied(&self) -> Option<LogId> {
        self.applied
    }

    /// The last log id the snapshot on disk covers.
    pub fn snapshot_last(&self) -> Option<LogId> {
        self.snapshots.last()
    }
}

/// The Raft metadata written with every change to the keyspace.
fn meta_entries(
    applied: &Option<LogId>,
    membership: &StoredMembership,
) -> [(&'static [u8], Vec<u8>); 2] {
    [
        (META_APPLIED, backend::encode(applied)),
        (META_MEMBERSHIP, backend::encode(membership)),
    ]
}

fn snapshot_err(meta: &SnapshotMeta, e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_snapshot(Some(meta.signature()), &io_error(e)).into()
}

/// Replaces `shared`'s keyspace with the snapshot at `path`, which has been verified.
fn install_into_keyspace(
    shared: &Shared,
    meta: &SnapshotMeta,
    path: &Path,
) -> Result<(), StorageError> {
    let entries = meta_entries(&meta.last_log_id, &meta.last_membership);
    let mut mvcc = shared.write();
    let before = mvcc.revision();
    backup::install(path, &mut mvcc, &entries).map_err(|e| snapshot_err(meta, e))?;
    shared
        .hub
        .index_keyspace(&mvcc)
        .map_err(|e| snapshot_err(meta, e))?;
    // Watchers may have missed revisions the snapshot jumped over: they catch up from the
    // installed keyspace (or learn that their start was compacted).
    shared.hub.unsync_all(before);
    // Under the lock: a reader that holds it sees the count of the keyspace it reads (quota
    // admission's usage cache starts over on a new one).
    shared.snapshots_installed.fetch_add(1, Ordering::Relaxed);
    drop(mvcc);
    Ok(())
}

/// A restored member's state-machine side (see [`crate::backup`]): the keyspace's head, applied
/// up to `applied` under `membership`.
pub(crate) fn write_restored_state(
    db: &DB,
    applied: LogId,
    membership: &StoredMembership,
    head: &crate::mvcc::SnapshotHead,
) -> Result<(), StoreError> {
    // A restored cluster starts with no alarms raised.
    let head = crate::mvcc::SnapshotHead {
        alarms: Vec::new(),
        ..head.clone()
    };
    Mvcc::restore_head(
        db,
        &head,
        &[
            (META_APPLIED, backend::encode(&Some(applied))),
            (META_MEMBERSHIP, backend::encode(membership)),
        ],
    )
}

fn read_raft_meta(shared: &Shared) -> Result<(Option<LogId>, StoredMembership), StorageError> {
    let mvcc = shared.read();
    let db = mvcc.db();
    let meta = backend::cf(db, CF_META);
    let applied = db.get_cf(meta, META_APPLIED).map_err(sm_read_err)?;
    let membership = db.get_cf(meta, META_MEMBERSHIP).map_err(sm_read_err)?;
    decode_raft_meta(applied.as_deref(), membership.as_deref())
}

/// The applied log id and membership as [`meta_entries`] wrote them; a keyspace that never
/// applied an entry has neither.
fn decode_raft_meta(
    applied: Option<&[u8]>,
    membership: Option<&[u8]>,
) -> Result<(Option<LogId>, StoredMembership), StorageError> {
    let applied = match applied {
        Some(b) => backend::decode(b).map_err(sm_read_err)?,
        None => None,
    };
    let membership = match membership {
        Some(b) => backend::decode(b).map_err(sm_read_err)?,
        None => StoredMembership::default(),
    };
    Ok((applied, membership))
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        // Reading the whole keyspace and writing the file with fsync blocks for as long as
        // the keyspace is large: off the async workers, so client requests and Raft traffic
        // go on meanwhile.
        let db = self.shared.read().db().clone();
        let snapshots = self.snapshots.clone();
        let source = self.source.clone();
        tokio::task::spawn_blocking(move || build(&db, &snapshots, &source))
            .await
            .map_err(sm_write_err)?
    }
}

/// Builds and keeps a snapshot of `db`, streamed to a file. Apply goes on meanwhile:
/// everything, the applied id and membership included, comes from one RocksDB snapshot, so
/// the metadata describes exactly the data.
fn build(
    db: &DB,
    snapshots: &SnapshotStore,
    source: &backup::Source,
) -> Result<Snapshot, StorageError> {
    // Everything applied so far must be durable before the log behind it is purged.
    db.flush_wal(true).map_err(sm_write_err)?;
    let path = snapshots.temp_path();
    let written = (|| -> Result<_, StoreError> {
        let file = std::fs::File::create(&path).map_err(StoreError::internal)?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        let (_, raw) = backup::write(
            db,
            source.clone(),
            &[META_APPLIED, META_MEMBERSHIP],
            &mut |bytes| out.write_all(&bytes).map_err(StoreError::internal),
        )?;
        let file = out
            .into_inner()
            .map_err(|e| StoreError::internal(e.error()))?;
        file.sync_all().map_err(StoreError::internal)?;
        Ok(raw)
    })();
    let raw = match written {
        Ok(raw) => raw,
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            return Err(sm_write_err(e));
        }
    };
    let (applied, membership) = decode_raft_meta(raw[0].as_deref(), raw[1].as_deref())?;
    let meta = SnapshotMeta {
        last_log_id: applied,
        last_membership: membership,
        snapshot_id: snapshot_id(applied),
    };
    let data = snapshots.keep(&meta, &path)?;
    Ok(Snapshot {
        meta,
        snapshot: Box::new(data),
    })
}

/// A snapshot id unique across restarts: term, index, time.
fn snapshot_id(applied: Option<LogId>) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    match applied {
        Some(id) => format!("{}-{}-{nanos:x}", id.leader_id.term, id.index),
        None => format!("0-0-{nanos:x}"),
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut out = Vec::new();
        let shared = self.shared.clone();
        for entry in entries {
            // The lock is taken per entry, not for the whole batch: reads (and the lease
            // keep-alives that read a lease's TTL) get in between a batch's entries, however
            // many openraft hands over at once.
            let mut mvcc = shared.write();
            let started = std::time::Instant::now();
            self.applied = Some(entry.log_id);
            let proposal = match entry.payload {
                EntryPayload::Normal(p) => Some(p),
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), m);
                    None
                }
                EntryPayload::Blank => None,
            };
            let meta = meta_entries(&self.applied, &self.membership);
            let index = entry.log_id.index;
            match proposal {
                Some(proposal) => {
                    let applied = mvcc
                        .apply(&proposal.command, &meta)
                        .map_err(|e| StorageIOError::apply(entry.log_id, &io_error(e)))?;
                    // Published under the write lock: see the ordering argument in `watch`.
                    if applied.batch.is_empty() {
                        shared
                            .hub
                            .publish(applied.response.revision, &applied.events);
                    }
                    for (revision, events) in &applied.batch {
                        shared.hub.publish(*revision, events);
                    }
                    shared
                        .metrics
                        .backend_commit
                        .observe(started.elapsed().as_secs_f64());
                    out.push(
                        self.proposals
                            .applied(index, Some(&proposal.id), applied.response),
                    );
                }
                None => {
                    mvcc.write_meta(&meta)
                        .map_err(|e| StorageIOError::apply(entry.log_id, &io_error(e)))?;
                    let response = Response {
                        revision: mvcc.revision(),
                        result: Ok(crate::command::Outcome::Nothing),
                    };
                    out.push(self.proposals.applied(index, None, response));
                }
            }
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        StateMachine {
            shared: self.shared.clone(),
            proposals: self.proposals.clone(),
            applied: self.applied,
            membership: self.membership.clone(),
            snapshots: self.snapshots.clone(),
            source: self.source.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotData>, StorageError> {
        Ok(Box::new(self.snapshots.receiving()?))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        mut snapshot: Box<SnapshotData>,
    ) -> Result<(), StorageError> {
        snapshot.sync().await.map_err(|e| snapshot_err(meta, e))?;
        let shared = self.shared.clone();
        let snapshots = self.snapshots.clone();
        let owned = meta.clone();
        // Checked, kept, then installed: openraft may purge the log behind it once it is kept,
        // before the install is durable; after a crash, `open` installs the kept snapshot.
        // A damaged file is refused before anything is kept or written.
        tokio::task::spawn_blocking(move || {
            backup::verify(snapshot.path()).map_err(|e| snapshot_err(&owned, e))?;
            let kept = snapshots.adopt(&owned, *snapshot)?;
            install_into_keyspace(&shared, &owned, kept.path())
        })
        .await
        .map_err(sm_write_err)??;
        self.applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        if let Some(last) = meta.last_log_id {
            self.proposals.snapshot_installed(last.index);
        }
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        Ok(self.snapshots.load()?.map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(data),
        }))
    }
}
