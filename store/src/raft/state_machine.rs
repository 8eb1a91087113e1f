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
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};
use serde::{Deserialize, Serialize};

use super::{
    Entry, LogId, Snapshot, SnapshotMeta, StorageError, StoredMembership, TypeConfig, io_error,
};
use crate::backend::{self, CF_META};
use crate::command::Response;
use crate::mvcc::{Mvcc, SnapshotPayload};
use crate::watch::WatchHub;

const META_APPLIED: &[u8] = b"applied";
const META_MEMBERSHIP: &[u8] = b"membership";

/// What the API services share with the state machine.
#[derive(Debug)]
pub struct Shared {
    mvcc: RwLock<Mvcc>,
    pub hub: Arc<WatchHub>,
    /// Snapshots received from a leader and installed (a metric).
    pub snapshots_installed: AtomicU64,
}

impl Shared {
    pub fn new(mvcc: Mvcc) -> Arc<Shared> {
        Arc::new(Shared {
            mvcc: RwLock::new(mvcc),
            hub: Arc::new(WatchHub::new(Some(crate::cluster::watch::tagger()))),
            snapshots_installed: AtomicU64::new(0),
        })
    }

    pub fn read(&self) -> RwLockReadGuard<'_, Mvcc> {
        self.mvcc.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Mvcc> {
        self.mvcc.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the watch catch-up task.
    pub fn spawn_watch_catch_up(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                let behind = me.hub.catch_up(&me.read());
                me.hub.wait_for_work(behind).await;
            }
        })
    }
}

#[derive(Debug)]
pub struct StateMachine {
    shared: Arc<Shared>,
    applied: Option<LogId>,
    membership: StoredMembership,
    snapshot_dir: PathBuf,
    snapshot_seq: Arc<AtomicU64>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredSnapshotMeta {
    meta: SnapshotMeta,
}

fn sm_read_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::read_state_machine(&io_error(e)).into()
}

fn sm_write_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_state_machine(&io_error(e)).into()
}

impl StateMachine {
    /// Opens the state machine over `shared`'s keyspace; snapshots go to `snapshot_dir`.
    pub fn open(shared: Arc<Shared>, snapshot_dir: &Path) -> Result<StateMachine, StorageError> {
        fs::create_dir_all(snapshot_dir).map_err(sm_write_err)?;
        let (applied, membership) = {
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
            (applied, membership)
        };
        Ok(StateMachine {
            shared,
            applied,
            membership,
            snapshot_dir: snapshot_dir.to_path_buf(),
            snapshot_seq: Arc::new(AtomicU64::new(0)),
        })
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    fn meta_entries(&self) -> [(&'static [u8], Vec<u8>); 2] {
        [
            (META_APPLIED, backend::encode(&self.applied)),
            (META_MEMBERSHIP, backend::encode(&self.membership)),
        ]
    }

    fn data_path(&self) -> PathBuf {
        self.snapshot_dir.join("snapshot.data")
    }

    fn meta_path(&self) -> PathBuf {
        self.snapshot_dir.join("snapshot.meta")
    }

    /// Writes a snapshot durably: data then metadata, each via a temporary file and rename, so
    /// the metadata only ever names complete data.
    fn save_snapshot(&self, meta: &SnapshotMeta, data: &[u8]) -> Result<(), StorageError> {
        let write = |path: &Path, bytes: &[u8]| -> std::io::Result<()> {
            let tmp = path.with_extension("tmp");
            let mut f = fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            fs::rename(&tmp, path)?;
            fs::File::open(&self.snapshot_dir)?.sync_all()
        };
        let sig = Some(meta.signature());
        write(&self.data_path(), data)
            .and_then(|_| {
                write(
                    &self.meta_path(),
                    &backend::encode(&StoredSnapshotMeta { meta: meta.clone() }),
                )
            })
            .map_err(|e| StorageIOError::write_snapshot(sig, &e).into())
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let (payload, applied, membership) = {
            let mvcc = self.shared.read();
            // Everything applied so far must be durable before the log behind it is purged.
            mvcc.db().flush_wal(true).map_err(sm_write_err)?;
            (
                mvcc.snapshot_payload().map_err(sm_read_err)?,
                self.applied,
                self.membership.clone(),
            )
        };
        let data = backend::encode(&payload);
        let seq = self.snapshot_seq.fetch_add(1, Ordering::Relaxed);
        let snapshot_id = match applied {
            Some(id) => format!("{}-{}-{seq}", id.leader_id.term, id.index),
            None => format!("0-0-{seq}"),
        };
        let meta = SnapshotMeta {
            last_log_id: applied,
            last_membership: membership,
            snapshot_id,
        };
        self.save_snapshot(&meta, &data)?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
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
        let mut mvcc = shared.write();
        for entry in entries {
            self.applied = Some(entry.log_id);
            let cmd = match entry.payload {
                EntryPayload::Normal(cmd) => Some(cmd),
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), m);
                    None
                }
                EntryPayload::Blank => None,
            };
            let meta = self.meta_entries();
            match cmd {
                Some(cmd) => {
                    let applied = mvcc
                        .apply(&cmd, &meta)
                        .map_err(|e| StorageIOError::apply(entry.log_id, &io_error(e)))?;
                    // Published under the write lock: see the ordering argument in `watch`.
                    shared
                        .hub
                        .publish(applied.response.revision, &applied.events);
                    out.push(applied.response);
                }
                None => {
                    mvcc.write_meta(&meta)
                        .map_err(|e| StorageIOError::apply(entry.log_id, &io_error(e)))?;
                    out.push(Response {
                        revision: mvcc.revision(),
                        result: Ok(crate::command::Outcome::Nothing),
                    });
                }
            }
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        StateMachine {
            shared: self.shared.clone(),
            applied: self.applied,
            membership: self.membership.clone(),
            snapshot_dir: self.snapshot_dir.clone(),
            snapshot_seq: self.snapshot_seq.clone(),
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
        let sig = Some(meta.signature());
        let payload: SnapshotPayload = backend::decode(&data).map_err(|e| {
            StorageError::from(StorageIOError::read_snapshot(sig.clone(), &io_error(e)))
        })?;
        self.applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        let entries = self.meta_entries();
        {
            let mut mvcc = self.shared.write();
            mvcc.install(&payload, &entries).map_err(|e| {
                StorageError::from(StorageIOError::write_snapshot(sig.clone(), &io_error(e)))
            })?;
            // Watchers may have missed revisions the snapshot jumped over: they catch up
            // from the installed keyspace (or learn that their start was compacted).
            self.shared.hub.unsync_all();
        }
        self.shared
            .snapshots_installed
            .fetch_add(1, Ordering::Relaxed);
        self.save_snapshot(meta, &data)
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        let meta = match fs::read(self.meta_path()) {
            Ok(b) => {
                backend::decode::<StoredSnapshotMeta>(&b)
                    .map_err(sm_read_err)?
                    .meta
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(sm_read_err(e)),
        };
        let data = fs::read(self.data_path()).map_err(sm_read_err)?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}
