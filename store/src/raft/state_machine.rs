//! The Raft state machine: committed entries applied to the MVCC keyspace, in order, with the
//! applied log id and membership written in the same RocksDB batch as the change.
//!
//! Snapshots are the whole keyspace (every stored version since the compaction point, leases,
//! alarms) read from a RocksDB snapshot; the newest one is kept in `<data-dir>/snapshot` and
//! streamed to members that fall behind the purged log.

use std::fs;
use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};
use rocksdb::DB;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{
    Entry, LogId, Snapshot, SnapshotMeta, StorageError, StoredMembership, TypeConfig, io_error,
};
use crate::backend::{self, CF_META};
use crate::command::Response;
use crate::mvcc::{Mvcc, SnapshotPayload};
use crate::proposer::Proposals;
use crate::watch::{Tagger, WatchHub};

const META_APPLIED: &[u8] = b"applied";
const META_MEMBERSHIP: &[u8] = b"membership";

/// What the API services share with the state machine.
#[derive(Debug)]
pub struct Shared {
    mvcc: RwLock<Mvcc>,
    pub hub: Arc<WatchHub>,
    /// Snapshots received from a leader and installed (a metric).
    pub snapshots_installed: AtomicU64,
    /// What the member times and counts as it runs (etcd's metric names).
    pub metrics: crate::metrics::StoreMetrics,
    /// Whether etcd's auth is on, without the keyspace lock.
    pub auth_gate: Arc<crate::auth::AuthGate>,
}

impl Shared {
    /// The shared state over `mvcc`; `tagger` tags events for filtered watches (see
    /// [`WatchHub::new`]).
    pub fn new(mvcc: Mvcc, tagger: Option<Tagger>) -> Arc<Shared> {
        Arc::new(Shared {
            auth_gate: mvcc.auth().gate.clone(),
            mvcc: RwLock::new(mvcc),
            hub: Arc::new(WatchHub::new(tagger)),
            snapshots_installed: AtomicU64::new(0),
            metrics: crate::metrics::StoreMetrics::default(),
        })
    }

    pub fn read(&self) -> RwLockReadGuard<'_, Mvcc> {
        self.mvcc.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Mvcc> {
        self.mvcc.write().unwrap_or_else(|p| p.into_inner())
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
    snapshots: Arc<SnapshotFile>,
}

/// The newest snapshot, on disk as one file (metadata and data together), replaced by
/// write-to-temporary, fsync, rename. Saving and reading are serialised, and an older
/// snapshot never replaces a newer one.
#[derive(Debug)]
struct SnapshotFile {
    dir: PathBuf,
    /// The last log id of the snapshot on disk.
    current: Mutex<Option<LogId>>,
    seq: AtomicU64,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta,
    #[serde(with = "serde_bytes")]
    data: Vec<u8>,
}

impl SnapshotFile {
    fn open(dir: &Path) -> Result<SnapshotFile, StorageError> {
        fs::create_dir_all(dir).map_err(sm_write_err)?;
        let file = SnapshotFile {
            dir: dir.to_path_buf(),
            current: Mutex::new(None),
            seq: AtomicU64::new(0),
        };
        let current = file.read()?.and_then(|s| s.meta.last_log_id);
        *file.lock() = current;
        Ok(file)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<LogId>> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn path(&self) -> PathBuf {
        self.dir.join("snapshot")
    }

    fn read(&self) -> Result<Option<StoredSnapshot>, StorageError> {
        match fs::read(self.path()) {
            Ok(b) => backend::decode(&b).map(Some).map_err(sm_read_err),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(sm_read_err(e)),
        }
    }

    /// Saves `meta` and `data` unless the file already holds a snapshot at least as new.
    fn save(&self, meta: &SnapshotMeta, data: Vec<u8>) -> Result<(), StorageError> {
        let mut current = self.lock();
        if current.is_some() && *current >= meta.last_log_id {
            return Ok(());
        }
        let sig = Some(meta.signature());
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        let tmp = self.dir.join(format!(
            "snapshot.{}.{}.tmp",
            std::process::id(),
            self.seq.fetch_add(1, Ordering::Relaxed)
        ));
        let write = || -> std::io::Result<()> {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(&backend::encode(&stored))?;
            f.sync_all()?;
            fs::rename(&tmp, self.path())?;
            fs::File::open(&self.dir)?.sync_all()
        };
        write().map_err(|e| StorageError::from(StorageIOError::write_snapshot(sig, &e)))?;
        *current = meta.last_log_id;
        Ok(())
    }

    fn load(&self) -> Result<Option<Snapshot>, StorageError> {
        let _guard = self.lock();
        Ok(self.read()?.map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }

    /// A snapshot id unique across restarts: term, index, time, sequence.
    fn new_id(&self, applied: Option<LogId>) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        match applied {
            Some(id) => format!("{}-{}-{nanos:x}-{seq}", id.leader_id.term, id.index),
            None => format!("0-0-{nanos:x}-{seq}"),
        }
    }
}

fn sm_read_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::read_state_machine(&io_error(e)).into()
}

fn sm_write_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_state_machine(&io_error(e)).into()
}

impl StateMachine {
    /// Opens the state machine over `shared`'s keyspace; snapshots go to `snapshot_dir`. A
    /// snapshot on disk newer than the keyspace (a crash between saving a received snapshot,
    /// which lets the log behind it be purged, and installing it) is installed now.
    pub fn open(
        shared: Arc<Shared>,
        proposals: Arc<Proposals>,
        snapshot_dir: &Path,
    ) -> Result<StateMachine, StorageError> {
        let snapshots = Arc::new(SnapshotFile::open(snapshot_dir)?);
        let (applied, membership) = read_raft_meta(&shared)?;
        let mut sm = StateMachine {
            shared,
            proposals,
            applied,
            membership,
            snapshots,
        };
        if let Some(stored) = sm.snapshots.read()?
            && stored.meta.last_log_id > sm.applied
        {
            tracing::warn!(snapshot = %stored.meta.snapshot_id, "installing a saved snapshot newer than the keyspace");
            sm.install_into_keyspace(&stored.meta, &stored.data)?;
        }
        Ok(sm)
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The last log id the snapshot on disk covers.
    pub fn snapshot_last(&self) -> Option<LogId> {
        *self.snapshots.lock()
    }

    fn meta_entries(&self) -> [(&'static [u8], Vec<u8>); 2] {
        [
            (META_APPLIED, backend::encode(&self.applied)),
            (META_MEMBERSHIP, backend::encode(&self.membership)),
        ]
    }

    fn install_into_keyspace(
        &mut self,
        meta: &SnapshotMeta,
        data: &[u8],
    ) -> Result<(), StorageError> {
        let sig = Some(meta.signature());
        let payload: SnapshotPayload = backend::decode(data).map_err(|e| {
            StorageError::from(StorageIOError::read_snapshot(sig.clone(), &io_error(e)))
        })?;
        self.applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        let entries = self.meta_entries();
        let mut mvcc = self.shared.write();
        let before = mvcc.revision();
        mvcc.install(&payload, &entries).map_err(|e| {
            StorageError::from(StorageIOError::write_snapshot(sig.clone(), &io_error(e)))
        })?;
        // Watchers may have missed revisions the snapshot jumped over: they catch up from the
        // installed keyspace (or learn that their start was compacted).
        self.shared.hub.unsync_all(before);
        drop(mvcc);
        self.shared
            .snapshots_installed
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// A restored member's state-machine side (see [`crate::backup`]): the keyspace's head, applied
/// up to `applied` under `membership`.
pub(crate) fn write_restored_state(
    db: &DB,
    applied: LogId,
    membership: &StoredMembership,
    head: &crate::mvcc::SnapshotHead,
) -> Result<(), crate::error::StoreError> {
    Mvcc::restore_head(
        db,
        head,
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
    let applied = match db.get_cf(meta, META_APPLIED).map_err(sm_read_err)? {
        Some(b) => backend::decode(&b).map_err(sm_read_err)?,
        None => None,
    };
    let membership = match db.get_cf(meta, META_MEMBERSHIP).map_err(sm_read_err)? {
        Some(b) => backend::decode(&b).map_err(sm_read_err)?,
        None => StoredMembership::default(),
    };
    Ok((applied, membership))
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        // Reading the whole keyspace, encoding it and writing the file with fsync blocks for
        // as long as the keyspace is large: off the async workers, so client requests and
        // Raft traffic go on meanwhile.
        let db = self.shared.read().db().clone();
        let snapshots = self.snapshots.clone();
        tokio::task::spawn_blocking(move || build(&db, &snapshots))
            .await
            .map_err(sm_write_err)?
    }
}

/// Builds and saves a snapshot of `db`. Apply goes on meanwhile: everything, the applied id
/// and membership included, comes from one RocksDB snapshot, so the metadata describes
/// exactly the data.
fn build(db: &DB, snapshots: &SnapshotFile) -> Result<Snapshot, StorageError> {
    // Everything applied so far must be durable before the log behind it is purged.
    db.flush_wal(true).map_err(sm_write_err)?;
    let (payload, meta) =
        Mvcc::snapshot_from(db, &[META_APPLIED, META_MEMBERSHIP]).map_err(sm_read_err)?;
    let applied: Option<LogId> = match &meta[0] {
        Some(b) => backend::decode(b).map_err(sm_read_err)?,
        None => None,
    };
    let membership: StoredMembership = match &meta[1] {
        Some(b) => backend::decode(b).map_err(sm_read_err)?,
        None => StoredMembership::default(),
    };
    let data = backend::encode(&payload);
    let meta = SnapshotMeta {
        last_log_id: applied,
        last_membership: membership,
        snapshot_id: snapshots.new_id(applied),
    };
    snapshots.save(&meta, data.clone())?;
    Ok(Snapshot {
        meta,
        snapshot: Box::new(Cursor::new(data)),
    })
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
        let mut mvcc = shared.write();
        for entry in entries {
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
            let meta = self.meta_entries();
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
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        // Saved first: openraft may purge the log behind it before the install below is
        // durable; after a crash, `open` installs the saved snapshot.
        self.snapshots.save(meta, data.clone())?;
        self.install_into_keyspace(meta, &data)?;
        if let Some(last) = meta.last_log_id {
            self.proposals.snapshot_installed(last.index);
        }
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        self.snapshots.load()
    }
}
