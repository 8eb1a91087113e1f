//! Backups: `etcdctl snapshot save FILE` streams one from a member (the Maintenance
//! `Snapshot` call), and `skiff store restore FILE` makes the data directory of one member of
//! a new cluster from it.
//!
//! A backup is the keyspace of one RocksDB snapshot of the member: a consistent point in time,
//! read while the member goes on applying, never whole in memory. The file:
//!
//! ```text
//! "SKIFFBAK" | file version (u32 BE) | frame* | zeros | SHA-256 of everything before it
//! frame = length (u32 BE) | bytes (u32 BE) | zstd(bincode(Frame))
//! ```
//!
//! `length` counts the compressed bytes that follow the two lengths, `bytes` what they
//! decompress to. Pods, events and the like compress several times over, and a member keeps
//! its newest Raft snapshot, a file of this format, beside its database. Versions 1 and 2
//! (still read) had `length | bincode(Frame)`.
//!
//! The zeros pad what comes before the SHA-256 to a multiple of 512 bytes: `etcdctl snapshot
//! save` refuses a file whose size is not 32 past a multiple of 512 (bbolt's page size), as
//! its test for the trailing checksum.
//!
//! The frames are the stored versions in key order, about [`FRAME_BYTES`] at a time, then one
//! `Head` frame with the revision, compaction point, leases, where the backup came from and
//! how many versions it holds. The trailing SHA-256 is etcd's convention: a truncated or
//! damaged file is refused before anything is written.
//!
//! Restoring a backup into a new member's data directory is [`crate::restore`]'s: it sits above
//! the Raft state and the member, which this format knows nothing of.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use rocksdb::DB;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::backend;
use crate::error::StoreError;
use crate::mvcc::{Mvcc, RawMeta, SnapshotHead, StoredVersion};

pub const MAGIC: &[u8; 8] = b"SKIFFBAK";
/// Version 2 added users and roles (etcd's auth state) to the head; version 1 files are
/// still read, as having none. Version 3 compresses the frames.
const FILE_VERSION: u32 = 3;
/// zstd's level for frames: its fastest standard level. A Raft snapshot is written while the
/// member serves, and most of what it saves over higher levels is had at this one.
const COMPRESSION_LEVEL: i32 = 1;
/// Bytes of stored versions per frame.
pub const FRAME_BYTES: usize = 256 * 1024;
/// What comes before the trailing SHA-256 is padded to a multiple of this.
const ALIGN: u64 = 512;
/// Largest frame a reader accepts (one version over the frame size at most, and versions are
/// bounded by the request limit).
const MAX_FRAME: usize = 256 << 20;

/// Where a backup came from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Source {
    pub cluster_id: u64,
    pub member_id: u64,
    pub member_name: String,
}

/// What a backup's last frame says about it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// The backend format the stored versions are in ([`backend::FORMAT_VERSION`]).
    pub format: u32,
    pub source: Source,
    /// Seconds since the Unix epoch when the backup was taken.
    pub taken_at: u64,
    pub head: SnapshotHead,
    pub versions: u64,
    /// Keys with a live value at the backup's revision.
    pub keys: u64,
}

#[derive(Debug, Serialize, Deserialize)]
enum Frame {
    Versions(Vec<StoredVersion>),
    Head(Summary),
}

/// Version 1 of the file, whose head had no auth state.
mod v1 {
    use serde::Deserialize;

    use crate::command::Alarm;
    use crate::mvcc::{SnapshotHead, StoredVersion};

    #[derive(Deserialize)]
    pub(super) enum Frame {
        Versions(Vec<StoredVersion>),
        Head(Summary),
    }

    #[derive(Deserialize)]
    pub(super) struct Summary {
        format: u32,
        source: super::Source,
        taken_at: u64,
        head: Head,
        versions: u64,
        keys: u64,
    }

    #[derive(Deserialize)]
    struct Head {
        revision: i64,
        compacted: i64,
        leases: Vec<(i64, i64)>,
        alarms: Vec<(u64, Alarm)>,
    }

    impl From<Frame> for super::Frame {
        fn from(f: Frame) -> super::Frame {
            match f {
                Frame::Versions(v) => super::Frame::Versions(v),
                Frame::Head(s) => super::Frame::Head(super::Summary {
                    format: s.format,
                    source: s.source,
                    taken_at: s.taken_at,
                    head: SnapshotHead {
                        revision: s.head.revision,
                        compacted: s.head.compacted,
                        leases: s.head.leases,
                        alarms: s.head.alarms,
                        auth: Default::default(),
                    },
                    versions: s.versions,
                    keys: s.keys,
                }),
            }
        }
    }
}

/// Writes a backup of `db` to `out` piece by piece: each call gets the next bytes of the file.
/// An error from `out` (the client went away) stops the backup. Returns the summary and the
/// raw values of the `extra_meta` keys read from the same RocksDB snapshot (a Raft snapshot's
/// applied id and membership; see [`Mvcc::visit_snapshot`]).
pub fn write(
    db: &DB,
    source: Source,
    extra_meta: &[&[u8]],
    out: &mut impl FnMut(Vec<u8>) -> Result<(), StoreError>,
) -> Result<(Summary, RawMeta), StoreError> {
    let mut hasher = Sha256::new();
    let mut written = 0u64;
    let mut emit = |bytes: Vec<u8>| -> Result<(), StoreError> {
        hasher.update(&bytes);
        written += bytes.len() as u64;
        out(bytes)
    };
    let mut start = MAGIC.to_vec();
    start.extend_from_slice(&FILE_VERSION.to_be_bytes());
    emit(start)?;
    let frame = |f: &Frame| -> Result<Vec<u8>, StoreError> {
        let raw = backend::encode(f);
        let body = zstd::bulk::compress(&raw, COMPRESSION_LEVEL).map_err(StoreError::internal)?;
        let mut bytes = Vec::with_capacity(body.len() + 8);
        bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&(raw.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&body);
        Ok(bytes)
    };
    let mut batch = Vec::new();
    let mut batch_bytes = 0;
    let mut versions = 0u64;
    let mut keys = 0u64;
    let mut last_key: Option<Vec<u8>> = None;
    let mut last_live = false;
    let (head, extra) = Mvcc::visit_snapshot(db, extra_meta, |v| {
        versions += 1;
        // Live keys: the newest version of each key is not a deletion.
        let key = crate::revision::split_versioned_key(&v.0).map(|(k, _)| k);
        if key != last_key {
            keys += u64::from(last_live);
            last_key = key;
        }
        // A put's record starts with 0, a tombstone's with 1 (see `backend::Record`).
        last_live = v.1.first() == Some(&0);
        batch_bytes += v.0.len() + v.1.len();
        batch.push(v);
        if batch_bytes >= FRAME_BYTES {
            batch_bytes = 0;
            emit(frame(&Frame::Versions(std::mem::take(&mut batch)))?)?;
        }
        Ok(())
    })?;
    keys += u64::from(last_live);
    if !batch.is_empty() {
        emit(frame(&Frame::Versions(batch))?)?;
    }
    let summary = Summary {
        format: backend::FORMAT_VERSION,
        source,
        taken_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        head,
        versions,
        keys,
    };
    emit(frame(&Frame::Head(summary.clone()))?)?;
    let pad = (ALIGN - written % ALIGN) % ALIGN;
    let pad = vec![0u8; pad as usize];
    hasher.update(&pad);
    out(pad)?;
    out(hasher.finalize().to_vec())?;
    Ok((summary, extra))
}

/// Why a backup file could not be read or restored.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: not a Skiff backup (it does not start with {MAGIC:?}); etcd's own snapshot files are restored with etcdctl", path.display())]
    NotABackup { path: PathBuf },
    #[error("{}: backup file version {found}; this build reads versions 1 to {FILE_VERSION}", path.display())]
    Version { path: PathBuf, found: u32 },
    #[error("{}: the SHA-256 at its end does not match its contents: the file is truncated or damaged", path.display())]
    Checksum { path: PathBuf },
    #[error("{}: {why}", path.display())]
    Malformed { path: PathBuf, why: String },
    #[error("{}: the stored versions are in backend format {found}; this build reads formats {} to {}", path.display(), backend::RECORDS_SINCE, backend::FORMAT_VERSION)]
    Format { path: PathBuf, found: u32 },
    #[error("{}: {why}", dir.display())]
    DataDir { dir: PathBuf, why: String },
    #[error("{0}")]
    Flags(String),
    #[error("writing the restored member: {0}")]
    Store(#[from] StoreError),
    #[error(transparent)]
    Open(#[from] backend::OpenError),
}

/// Checks `path`'s SHA-256 and reads it through, handing each frame of stored versions to
/// `versions`; the backup's summary.
pub fn read(
    path: &Path,
    versions: impl FnMut(&[StoredVersion]) -> Result<(), BackupError>,
) -> Result<Summary, BackupError> {
    // First the checksum, so that nothing is written from a damaged file.
    verify(path)?;
    read_verified(path, versions)
}

/// Replaces `mvcc`'s keyspace with the one in the backup at `path`, which [`verify`] has
/// accepted, a frame at a time (see [`Mvcc::replace`]): how a member installs a Raft snapshot,
/// which is a backup file (see [`crate::raft::snapshot`]). Unlike a restore, it keeps the
/// alarms the snapshot carries. `meta` as in [`Mvcc::apply`].
pub fn install(path: &Path, mvcc: &mut Mvcc, meta: &[(&[u8], Vec<u8>)]) -> Result<(), BackupError> {
    mvcc.replace(
        |db| {
            read_verified(path, |versions| {
                Mvcc::restore_versions(db, versions).map_err(BackupError::from)
            })
            .map(|summary| summary.head)
        },
        meta,
    )
}

/// Checks that `path` is a backup whose SHA-256 matches its contents, reading it through.
pub fn verify(path: &Path) -> Result<(), BackupError> {
    let io = |error| BackupError::Io {
        path: path.to_path_buf(),
        error,
    };
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len < (MAGIC.len() + 4 + 32) as u64 {
        return Err(BackupError::NotABackup {
            path: path.to_path_buf(),
        });
    }
    let body = len - 32;
    let mut file = BufReader::with_capacity(1 << 20, File::open(path).map_err(io)?);
    let mut magic = [0u8; 8];
    file.read_exact(&mut magic).map_err(io)?;
    if &magic != MAGIC {
        return Err(BackupError::NotABackup {
            path: path.to_path_buf(),
        });
    }
    let mut hasher = Sha256::new();
    hasher.update(magic);
    let mut rest = (&mut file).take(body - 8);
    std::io::copy(&mut rest, &mut HashWriter(&mut hasher)).map_err(io)?;
    let mut trailer = [0u8; 32];
    file.read_exact(&mut trailer).map_err(io)?;
    if hasher.finalize().as_slice() != trailer {
        return Err(BackupError::Checksum {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// Reads a backup that [`verify`] accepted, handing each frame of stored versions to
/// `versions`; the backup's summary.
pub fn read_verified(
    path: &Path,
    mut versions: impl FnMut(&[StoredVersion]) -> Result<(), BackupError>,
) -> Result<Summary, BackupError> {
    let io = |error| BackupError::Io {
        path: path.to_path_buf(),
        error,
    };
    let malformed = |why: String| BackupError::Malformed {
        path: path.to_path_buf(),
        why,
    };
    let body = std::fs::metadata(path)
        .map_err(io)?
        .len()
        .saturating_sub(32);
    let mut file = BufReader::with_capacity(1 << 20, File::open(path).map_err(io)?).take(body);
    let mut head = [0u8; 12];
    file.read_exact(&mut head).map_err(io)?;
    let found = u32::from_be_bytes([head[8], head[9], head[10], head[11]]);
    if !(1..=FILE_VERSION).contains(&found) {
        return Err(BackupError::Version {
            path: path.to_path_buf(),
            found,
        });
    }
    let mut seen = 0u64;
    loop {
        let mut len = [0u8; 4];
        match file.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(malformed("it ends before its summary frame".into()));
            }
            Err(e) => return Err(io(e)),
        }
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_FRAME {
            return Err(malformed(format!("a frame of {len} bytes")));
        }
        let raw_len = if found >= 3 {
            let mut raw_len = [0u8; 4];
            file.read_exact(&mut raw_len).map_err(io)?;
            let raw_len = u32::from_be_bytes(raw_len) as usize;
            if raw_len > MAX_FRAME {
                return Err(malformed(format!(
                    "a frame of {raw_len} bytes decompressed"
                )));
            }
            Some(raw_len)
        } else {
            None
        };
        let mut buf = vec![0u8; len];
        file.read_exact(&mut buf).map_err(io)?;
        if let Some(raw_len) = raw_len {
            buf = zstd::bulk::decompress(&buf, raw_len)
                .map_err(|e| malformed(format!("a frame does not decompress: {e}")))?;
            if buf.len() != raw_len {
                return Err(malformed(format!(
                    "a frame of {raw_len} bytes decompressed to {}",
                    buf.len()
                )));
            }
        }
        let frame = if found == 1 {
            backend::decode::<v1::Frame>(&buf).map(Frame::from)
        } else {
            backend::decode::<Frame>(&buf)
        };
        match frame.map_err(|e| malformed(e.to_string()))? {
            Frame::Versions(v) => {
                seen += v.len() as u64;
                versions(&v)?;
            }
            Frame::Head(summary) => {
                if !(backend::RECORDS_SINCE..=backend::FORMAT_VERSION).contains(&summary.format) {
                    return Err(BackupError::Format {
                        path: path.to_path_buf(),
                        found: summary.format,
                    });
                }
                if summary.versions != seen {
                    return Err(malformed(format!(
                        "its summary counts {} versions and it holds {seen}",
                        summary.versions
                    )));
                }
                let mut pad = Vec::new();
                file.read_to_end(&mut pad).map_err(io)?;
                if pad.len() as u64 >= ALIGN || pad.iter().any(|b| *b != 0) {
                    return Err(malformed("bytes after the summary frame".into()));
                }
                return Ok(summary);
            }
        }
    }
}

struct HashWriter<'a>(&'a mut Sha256);

impl Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A backup of an empty keyspace, taken from a database made in `dir`.
    pub(crate) fn backup_of_empty(dir: &Path) -> Vec<u8> {
        let db = backend::open(&dir.join("db")).expect("open");
        let mut bytes = Vec::new();
        let source = Source {
            cluster_id: 1,
            member_id: 2,
            member_name: "a".into(),
        };
        write(&db, source, &[], &mut |b| {
            bytes.extend_from_slice(&b);
            Ok(())
        })
        .expect("backup");
        bytes
    }

    #[test]
    fn a_backup_is_aligned_for_etcdctl_and_any_damage_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bytes = backup_of_empty(dir.path());
        assert_eq!(
            bytes.len() % 512,
            32,
            "etcdctl's test for a trailing checksum"
        );
        let file = dir.path().join("b");
        std::fs::write(&file, &bytes).expect("write");
        let summary = read(&file, |_| Ok(())).expect("read");
        assert_eq!((summary.versions, summary.keys), (0, 0));
        assert_eq!(summary.source.member_name, "a");

        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        std::fs::write(&file, &flipped).expect("write");
        assert!(matches!(
            read(&file, |_| Ok(())),
            Err(BackupError::Checksum { .. })
        ));

        std::fs::write(&file, &bytes[..bytes.len() - 1]).expect("write");
        assert!(matches!(
            read(&file, |_| Ok(())),
            Err(BackupError::Checksum { .. })
        ));

        let mut bbolt = bytes.clone();
        bbolt[..8].copy_from_slice(b"\0\0\0\0\0\0\0\0");
        std::fs::write(&file, &bbolt).expect("write");
        let e = read(&file, |_| Ok(())).expect_err("not ours");
        assert!(e.to_string().contains("not a Skiff backup"), "{e}");
    }

    /// A file of `version` holding `frames` (each with its lengths), padded and hashed as
    /// [`write`] does.
    fn file_of(version: u32, frames: &[Vec<u8>]) -> Vec<u8> {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&version.to_be_bytes());
        for f in frames {
            bytes.extend_from_slice(f);
        }
        let pad = (ALIGN - bytes.len() as u64 % ALIGN) % ALIGN;
        bytes.resize(bytes.len() + pad as usize, 0);
        let sha = Sha256::digest(&bytes);
        bytes.extend_from_slice(&sha);
        bytes
    }

    /// A version 2 frame: its length, then the bincode, uncompressed.
    fn uncompressed(f: &Frame) -> Vec<u8> {
        let body = backend::encode(f);
        [&(body.len() as u32).to_be_bytes()[..], &body].concat()
    }

    #[test]
    fn version_2_files_without_compression_are_still_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("b");
        std::fs::write(&file, backup_of_empty(dir.path())).expect("write");
        let mut summary = read(&file, |_| Ok(())).expect("read");
        summary.versions = 1;
        let (key, record) = (b"k\0\0\0\0\0\0\0\x02".to_vec(), vec![0, 1]);
        let old = file_of(
            2,
            &[
                uncompressed(&Frame::Versions(vec![StoredVersion(
                    key.clone(),
                    record.clone(),
                )])),
                uncompressed(&Frame::Head(summary)),
            ],
        );
        std::fs::write(&file, &old).expect("write");
        let mut seen = Vec::new();
        let summary = read(&file, |v| {
            seen.extend(v.iter().map(|v| (v.0.clone(), v.1.clone())));
            Ok(())
        })
        .expect("read a version 2 file");
        assert_eq!((summary.versions, seen), (1, vec![(key, record)]));
    }

    #[test]
    fn a_frame_that_does_not_decompress_to_its_size_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("b");
        let raw = backend::encode(&Frame::Versions(Vec::new()));
        let body = zstd::bulk::compress(&raw, COMPRESSION_LEVEL).expect("compress");
        for (bytes, body, why) in [
            (raw.len() + 1, body.clone(), "decompressed to"),
            (raw.len(), b"not zstd".to_vec(), "does not decompress"),
            (MAX_FRAME + 1, body, "decompressed"),
        ] {
            let frame = [
                &(body.len() as u32).to_be_bytes()[..],
                &(bytes as u32).to_be_bytes(),
                &body,
            ]
            .concat();
            // The SHA-256 matches: the frame itself is what is wrong.
            std::fs::write(&file, file_of(FILE_VERSION, &[frame])).expect("write");
            let e = read(&file, |_| Ok(())).expect_err("a bad frame");
            assert!(
                matches!(e, BackupError::Malformed { .. }) && e.to_string().contains(why),
                "{why}: {e}"
            );
        }
    }
}
