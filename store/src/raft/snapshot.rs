//! Raft snapshots on disk, never whole in memory.
//!
//! A snapshot's data is a backup file (see [`crate::backup`]): the keyspace of one RocksDB
//! snapshot, written to the file as it is read, with a SHA-256 at its end. Building a
//! snapshot, sending it to a member that fell behind, receiving it and installing it each hold
//! about one frame (256 KiB) and one key's versions at a time, whatever the keyspace's size.
//! A snapshot on disk is also a backup `skiff store restore` takes.
//!
//! A member's snapshot directory:
//!
//! ```text
//! current      bincode(SnapshotMeta, name of the data file): the snapshot this member keeps
//! data.*       that snapshot's data (and, for a moment, the one it replaced)
//! *.tmp        a snapshot being built or received; removed when abandoned, and at start
//! ```
//!
//! `current` is replaced by write-to-temporary, fsync, rename, after the new data file is
//! synced: it is the commit point, so a crash leaves one snapshot or the other, whole. A
//! snapshot never replaces a newer one. A snapshot being sent to a follower is read through
//! its own open file, which a newer snapshot's arrival does not disturb.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll};

use openraft::StorageIOError;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

use super::{LogId, SnapshotMeta, StorageError, io_error};
use crate::backend;

const CURRENT: &str = "current";
/// Where the whole snapshot, metadata and data in one bincode value, was kept before.
const OLD_LAYOUT: &str = "snapshot";

/// A snapshot's data as openraft handles it: its file, open for reading (the snapshot this
/// member keeps, being sent) or for writing (one being received). A file still being built
/// or received is removed when this is dropped before the snapshot is kept.
#[derive(Debug)]
pub struct SnapshotData {
    file: tokio::fs::File,
    path: PathBuf,
    temporary: bool,
}

impl SnapshotData {
    /// The file's path (moved when a received snapshot is kept).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's length in bytes.
    pub async fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata().await?.len())
    }

    /// Writes out what was written through this handle and syncs it to disk.
    pub async fn sync(&mut self) -> io::Result<()> {
        tokio::io::AsyncWriteExt::flush(&mut self.file).await?;
        self.file.sync_all().await
    }
}

impl Drop for SnapshotData {
    fn drop(&mut self) {
        if self.temporary {
            let _ = fs::remove_file(&self.path);
        }
    }
}

impl AsyncRead for SnapshotData {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().file).poll_read(cx, buf)
    }
}

impl AsyncWrite for SnapshotData {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().file).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().file).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().file).poll_shutdown(cx)
    }
}

impl AsyncSeek for SnapshotData {
    fn start_seek(self: Pin<&mut Self>, position: io::SeekFrom) -> io::Result<()> {
        Pin::new(&mut self.get_mut().file).start_seek(position)
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Pin::new(&mut self.get_mut().file).poll_complete(cx)
    }
}

/// What `current` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Current {
    meta: SnapshotMeta,
    /// The data file's name in the directory.
    data: String,
}

/// A member's snapshot directory (see the module docs). Keeping and opening snapshots are
/// serialised.
#[derive(Debug)]
pub struct SnapshotStore {
    dir: PathBuf,
    current: Mutex<Option<Current>>,
    seq: AtomicU64,
}

fn read_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::read_snapshot(None, &io_error(e)).into()
}

fn write_err(meta: Option<&SnapshotMeta>, e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_snapshot(meta.map(|m| m.signature()), &io_error(e)).into()
}

impl SnapshotStore {
    /// Opens `dir` (created if missing), removing what a crash or an abandoned transfer left
    /// behind. `applied` is the keyspace's applied log id: a snapshot in the layout before
    /// this one is removed when the keyspace already holds it (the member builds a new one
    /// when it needs one), and refused otherwise.
    pub fn open(dir: &Path, applied: Option<LogId>) -> Result<SnapshotStore, StorageError> {
        fs::create_dir_all(dir).map_err(|e| write_err(None, e))?;
        let current: Option<Current> = match fs::read(dir.join(CURRENT)) {
            Ok(b) => Some(backend::decode(&b).map_err(read_err)?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(read_err(e)),
        };
        for entry in fs::read_dir(dir).map_err(read_err)? {
            let entry = entry.map_err(read_err)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let stale = name.ends_with(".tmp")
                || (name.starts_with("data.") && current.as_ref().is_none_or(|c| c.data != name));
            if stale {
                fs::remove_file(entry.path()).map_err(|e| write_err(None, e))?;
            }
        }
        remove_old_layout(dir, applied)?;
        Ok(SnapshotStore {
            dir: dir.to_path_buf(),
            current: Mutex::new(current),
            seq: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Option<Current>> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The last log id the kept snapshot covers.
    pub fn last(&self) -> Option<LogId> {
        self.lock().as_ref().and_then(|c| c.meta.last_log_id)
    }

    /// The kept snapshot's metadata and data file.
    pub fn current(&self) -> Option<(SnapshotMeta, PathBuf)> {
        self.lock()
            .as_ref()
            .map(|c| (c.meta.clone(), self.dir.join(&c.data)))
    }

    /// A new temporary file in the directory, for a snapshot being built; removed at the next
    /// start if it is never kept.
    pub fn temp_path(&self) -> PathBuf {
        self.dir.join(format!(
            "{}.{}.tmp",
            std::process::id(),
            self.seq.fetch_add(1, Ordering::Relaxed)
        ))
    }

    /// An empty temporary file to receive a snapshot into; removed when dropped unless kept.
    pub fn receiving(&self) -> Result<SnapshotData, StorageError> {
        let path = self.temp_path();
        let file = fs::File::create(&path).map_err(|e| write_err(None, e))?;
        Ok(SnapshotData {
            file: tokio::fs::File::from_std(file),
            path,
            temporary: true,
        })
    }

    /// Opens the file at `path` for reading; removed when dropped if `temporary`.
    fn open_data(path: PathBuf, temporary: bool) -> Result<SnapshotData, StorageError> {
        let file = fs::File::open(&path).map_err(read_err)?;
        Ok(SnapshotData {
            file: tokio::fs::File::from_std(file),
            path,
            temporary,
        })
    }

    /// The kept snapshot, its data open for reading.
    pub fn load(&self) -> Result<Option<(SnapshotMeta, SnapshotData)>, StorageError> {
        // Held while opening: keeping a newer snapshot removes this one's file.
        let current = self.lock();
        let Some(c) = current.as_ref() else {
            return Ok(None);
        };
        let data = Self::open_data(self.dir.join(&c.data), false)?;
        Ok(Some((c.meta.clone(), data)))
    }

    /// Keeps the synced snapshot file at `path` (a temporary file of this directory, moved)
    /// as the member's snapshot, unless the one kept is at least as new. Returns the data
    /// open for reading: the kept file, or the one passed, removed when its handle is dropped.
    pub fn keep(&self, meta: &SnapshotMeta, path: &Path) -> Result<SnapshotData, StorageError> {
        let mut current = self.lock();
        if let Some(c) = current.as_ref()
            && c.meta.last_log_id >= meta.last_log_id
        {
            return Self::open_data(path.to_path_buf(), true);
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let name = format!(
            "data.{nanos:x}.{}",
            self.seq.fetch_add(1, Ordering::Relaxed)
        );
        let kept = Current {
            meta: meta.clone(),
            data: name.clone(),
        };
        let tmp = self.temp_path();
        let commit = || -> io::Result<()> {
            fs::rename(path, self.dir.join(&name))?;
            fs::write(&tmp, backend::encode(&kept))?;
            fs::File::open(&tmp)?.sync_all()?;
            fs::rename(&tmp, self.dir.join(CURRENT))?;
            fs::File::open(&self.dir)?.sync_all()
        };
        commit().map_err(|e| write_err(Some(meta), e))?;
        if let Some(old) = current.replace(kept) {
            let _ = fs::remove_file(self.dir.join(old.data));
        }
        Self::open_data(self.dir.join(name), false)
    }

    /// Keeps a received snapshot (see [`keep`](Self::keep)). Its data is moved when it is a
    /// temporary file of this directory, and copied otherwise.
    pub fn adopt(
        &self,
        meta: &SnapshotMeta,
        mut data: SnapshotData,
    ) -> Result<SnapshotData, StorageError> {
        if data.temporary && data.path.parent() == Some(self.dir.as_path()) {
            // Moved by `keep`: nothing left to remove.
            data.temporary = false;
            return self.keep(meta, &data.path);
        }
        let copy = self.temp_path();
        let copied = (|| -> io::Result<()> {
            fs::copy(&data.path, &copy)?;
            fs::File::open(&copy)?.sync_all()
        })();
        if let Err(e) = copied {
            let _ = fs::remove_file(&copy);
            return Err(write_err(Some(meta), e));
        }
        self.keep(meta, &copy)
    }
}

/// Removes the snapshot file of the layout before this one when the keyspace, applied up to
/// `applied`, already holds what it does.
fn remove_old_layout(dir: &Path, applied: Option<LogId>) -> Result<(), StorageError> {
    let path = dir.join(OLD_LAYOUT);
    let mut file = match fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(read_err(e)),
    };
    // Its metadata comes first, and is small: the membership and two log ids.
    let mut head = Vec::new();
    (&mut file)
        .take(1 << 20)
        .read_to_end(&mut head)
        .map_err(read_err)?;
    let meta: SnapshotMeta = backend::decode(&head).map_err(read_err)?;
    if meta.last_log_id > applied {
        return Err(read_err(format!(
            "{} holds a snapshot ({}) saved by an earlier version of Skiff and never installed; \
             start that version once more to install it, or restore the member from a backup",
            path.display(),
            meta.snapshot_id
        )));
    }
    tracing::info!(snapshot = %meta.snapshot_id, "removing a snapshot of the earlier layout that the keyspace holds");
    fs::remove_file(&path).map_err(|e| write_err(Some(&meta), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(index: u64) -> SnapshotMeta {
        SnapshotMeta {
            last_log_id: Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), index)),
            last_membership: Default::default(),
            snapshot_id: format!("s{index}"),
        }
    }

    fn file_names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .expect("read dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn data_files(dir: &Path) -> usize {
        file_names(dir)
            .iter()
            .filter(|n| n.starts_with("data."))
            .count()
    }

    fn temp_with(store: &SnapshotStore, bytes: &[u8]) -> PathBuf {
        let path = store.temp_path();
        fs::write(&path, bytes).expect("write temp");
        path
    }

    #[tokio::test]
    async fn a_newer_snapshot_replaces_the_kept_one_and_an_older_never_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SnapshotStore::open(dir.path(), None).expect("open");
        assert!(store.load().expect("load").is_none());

        let kept = store
            .keep(&meta(5), &temp_with(&store, b"five"))
            .expect("keep");
        let mut reading = store.load().expect("load").expect("a snapshot").1;
        store
            .keep(&meta(9), &temp_with(&store, b"nine"))
            .expect("keep");
        assert_eq!(store.last().map(|l| l.index), Some(9));
        assert_eq!(data_files(dir.path()), 1, "the replaced file is removed");
        // A handle opened before the replacement still reads what it opened.
        let mut old = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut reading, &mut old)
            .await
            .expect("read");
        assert_eq!(old, "five");
        drop(kept);

        // An older one is handed back to read, and removed with its handle.
        let older = store
            .keep(&meta(7), &temp_with(&store, b"seven"))
            .expect("keep");
        assert_eq!(store.last().map(|l| l.index), Some(9));
        assert_eq!(fs::read(older.path()).expect("read"), b"seven");
        let path = older.path().to_path_buf();
        drop(older);
        assert!(!path.exists());

        // Reopened, the directory keeps the newest, and what a crash left is removed.
        fs::write(dir.path().join("123.4.tmp"), b"half").expect("write");
        fs::write(dir.path().join("data.dead.0"), b"replaced").expect("write");
        drop(store);
        let store = SnapshotStore::open(dir.path(), None).expect("reopen");
        assert_eq!(store.last().map(|l| l.index), Some(9));
        assert_eq!(
            file_names(dir.path()).len(),
            2,
            "{:?}",
            file_names(dir.path())
        );
        let (_, path) = store.current().expect("current");
        assert_eq!(fs::read(path).expect("read"), b"nine");
    }

    #[tokio::test]
    async fn a_received_snapshot_is_moved_from_this_directory_and_copied_from_elsewhere() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SnapshotStore::open(dir.path(), None).expect("open");
        let mut received = store.receiving().expect("receiving");
        tokio::io::AsyncWriteExt::write_all(&mut received, b"received")
            .await
            .expect("write");
        received.sync().await.expect("sync");
        let from = received.path().to_path_buf();
        store.adopt(&meta(3), received).expect("adopt");
        assert!(!from.exists(), "moved");
        assert_eq!(data_files(dir.path()), 1);
        assert_eq!(
            file_names(dir.path()).len(),
            2,
            "{:?}",
            file_names(dir.path())
        );

        // Another member's kept snapshot, handed over as it is (openraft's test suite does).
        let other_dir = tempfile::tempdir().expect("tempdir");
        let other = SnapshotStore::open(other_dir.path(), None).expect("open");
        other
            .keep(&meta(8), &temp_with(&other, b"other"))
            .expect("keep");
        let (m, data) = other.load().expect("load").expect("kept");
        store.adopt(&m, data).expect("adopt");
        assert_eq!(other.last().map(|l| l.index), Some(8), "left in place");
        assert_eq!(data_files(other_dir.path()), 1);
        let (_, path) = store.current().expect("current");
        assert_eq!(fs::read(path).expect("read"), b"other");

        // One abandoned part way is removed.
        let abandoned = store.receiving().expect("receiving");
        let path = abandoned.path().to_path_buf();
        drop(abandoned);
        assert!(!path.exists());
    }

    #[test]
    fn the_earlier_layout_is_removed_when_the_keyspace_holds_it_and_refused_otherwise() {
        #[derive(Serialize)]
        struct Old {
            meta: SnapshotMeta,
            #[serde(with = "serde_bytes")]
            data: Vec<u8>,
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let old = Old {
            meta: meta(20),
            data: vec![1; 4096],
        };
        fs::write(dir.path().join(OLD_LAYOUT), backend::encode(&old)).expect("write");
        let applied = |i| Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), i));
        let refused = SnapshotStore::open(dir.path(), applied(19)).expect_err("never installed");
        assert!(refused.to_string().contains("earlier version"), "{refused}");
        assert!(
            dir.path().join(OLD_LAYOUT).exists(),
            "kept for that version"
        );
        SnapshotStore::open(dir.path(), applied(20)).expect("held by the keyspace");
        assert!(!dir.path().join(OLD_LAYOUT).exists());
    }
}
