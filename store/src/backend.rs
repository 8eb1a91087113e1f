//! The RocksDB database of one member: one DB, one write-ahead log, column families for the
//! state machine and the Raft log's metadata. The log's entries are in segment files beside it
//! ([`crate::raft::wal`]).
//!
//! | column family | key                              | value                               |
//! |---------------|----------------------------------|-------------------------------------|
//! | `log`         | log index (u64 BE)               | format 2's Raft entries, moved out at open |
//! | `raft`        | `vote`, `committed`, `purged`    | bincode                             |
//! | `kv`          | versioned key (see [`revision`]) | [`Record`]                          |
//! | `lease`       | lease id (i64 BE)                | granted TTL (i64 BE)                |
//! | `meta`        | `applied`, `membership`, `revision`, `compacted`, `alarms`, `auth` | bincode |
//! | `meta`        | `format`                         | [`FORMAT_VERSION`] (u32 BE)         |
//!
//! The `format` key versions everything in this table: a member refuses a data directory
//! written in another format rather than misread it.
//!
//! Because every column family shares the WAL, a synced write (votes, purges of the log) also
//! makes every earlier state-machine write durable; state-machine writes themselves are not
//! synced, the log replays them (a purge is synced before the log behind it goes). The WAL is capped ([`MAX_WAL_BYTES`]): a WAL file goes only once
//! every family's writes in it are flushed, and the small families (`raft`, `lease`, `meta`)
//! fill their memtables slowly, so without the cap the WAL grows to RocksDB's default limit
//! (four times the families' memtables, 2.3 GiB here) before anything forces them out: disk
//! and replay time after a kill -9 that buy nothing.
//!
//! [`revision`]: crate::revision

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{ColumnFamilyDescriptor, DB, Options};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub const CF_LOG: &str = "log";
pub const CF_RAFT: &str = "raft";
pub const CF_KV: &str = "kv";
pub const CF_LEASE: &str = "lease";
pub const CF_META: &str = "meta";

const FAMILIES: [&str; 5] = [CF_LOG, CF_RAFT, CF_KV, CF_LEASE, CF_META];

/// The most WAL a member keeps: past it, RocksDB flushes the families that hold the oldest
/// WAL file so that it can go.
pub const MAX_WAL_BYTES: u64 = 256 << 20;

/// The on-disk format this build reads and writes: the column families, keys and encodings
/// in the table above. Raised whenever any of them changes meaning. 2: etcd's auth (a
/// transaction in the log carries the auth revision it was checked at; `meta` holds `auth`).
/// 3: the Raft log's entries in segment files, not in the `log` family.
pub const FORMAT_VERSION: u32 = 3;

/// The format with the Raft log's entries in the `log` family: opened, and its entries moved
/// into segment files when the log opens (which stamps [`FORMAT_VERSION`]).
pub const LOG_IN_FAMILY: u32 = 2;

/// The oldest format whose `kv` records this build reads: they have not changed since, so a
/// backup's stored versions from any format from here to [`FORMAT_VERSION`] restore as they
/// are.
pub const RECORDS_SINCE: u32 = 1;

const META_FORMAT: &[u8] = b"format";

/// Why a member database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("opening the database in {}: {source}", dir.display())]
    Rocks {
        dir: PathBuf,
        #[source]
        source: rocksdb::Error,
    },
    #[error(
        "{} holds data in format version {found}, and this build of skiff reads format version \
         {FORMAT_VERSION} only: run the skiff release that wrote it, or start this member in an \
         empty --data-dir and let it catch up from the cluster",
        dir.display()
    )]
    Format { dir: PathBuf, found: u32 },
    #[error("{}: unreadable format marker {found:?}", dir.display())]
    Marker { dir: PathBuf, found: Vec<u8> },
}

/// Opens (creating if needed) the member database under `dir`. A new database is stamped with
/// [`FORMAT_VERSION`]; one stamped with another version, but [`LOG_IN_FAMILY`], is refused.
pub fn open(dir: &Path) -> Result<Arc<DB>, OpenError> {
    let rocks = |source| OpenError::Rocks {
        dir: dir.to_path_buf(),
        source,
    };
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    opts.set_max_background_jobs(2);
    opts.set_bytes_per_sync(1 << 20);
    opts.set_max_total_wal_size(MAX_WAL_BYTES);
    let cfs = FAMILIES
        .iter()
        .map(|name| ColumnFamilyDescriptor::new(*name, Options::default()));
    let db = DB::open_cf_descriptors(&opts, dir, cfs).map_err(rocks)?;
    let meta = cf(&db, CF_META);
    match db.get_cf(meta, META_FORMAT).map_err(rocks)? {
        // New, or written before the marker existed (format 1 is the first format).
        None => {
            let mut sync = rocksdb::WriteOptions::default();
            sync.set_sync(true);
            db.put_cf_opt(meta, META_FORMAT, FORMAT_VERSION.to_be_bytes(), &sync)
                .map_err(rocks)?;
        }
        Some(found) => match <[u8; 4]>::try_from(found.as_slice()) {
            Ok(b) if [FORMAT_VERSION, LOG_IN_FAMILY].contains(&u32::from_be_bytes(b)) => {}
            Ok(b) => {
                return Err(OpenError::Format {
                    dir: dir.to_path_buf(),
                    found: u32::from_be_bytes(b),
                });
            }
            Err(_) => {
                return Err(OpenError::Marker {
                    dir: dir.to_path_buf(),
                    found,
                });
            }
        },
    }
    Ok(Arc::new(db))
}

/// The format `db` is stamped with (see [`open`]).
pub fn format(db: &DB) -> Result<u32, rocksdb::Error> {
    let stamp = db.get_cf(cf(db, CF_META), META_FORMAT)?;
    Ok(stamp
        .and_then(|b| <[u8; 4]>::try_from(b.as_slice()).ok())
        .map_or(FORMAT_VERSION, u32::from_be_bytes))
}

/// Stamps [`FORMAT_VERSION`] in `batch`.
pub fn stamp_format(db: &DB, batch: &mut rocksdb::WriteBatch) {
    batch.put_cf(cf(db, CF_META), META_FORMAT, FORMAT_VERSION.to_be_bytes());
}

/// The handle of a column family that [`open`] always creates.
pub fn cf<'a>(db: &'a DB, name: &str) -> &'a rocksdb::ColumnFamily {
    db.cf_handle(name)
        .expect("invariant: backend::open creates every column family")
}

/// Approximate bytes on disk and in memtables of the state machine's families (all but the
/// Raft log): what the backend quota is checked against and what `etcd_mvcc_db_total_size_in_bytes`
/// reports. etcd's quota, too, counts its bolt database and not its WAL; the log is bounded
/// by snapshots (`--snapshot-count`), and it would make a member refuse writes for entries
/// that are about to be purged.
pub fn size(db: &DB) -> u64 {
    let families: Vec<&str> = FAMILIES.into_iter().filter(|n| *n != CF_LOG).collect();
    property_sum(db, &families, "rocksdb.total-sst-files-size")
        + property_sum(db, &families, "rocksdb.cur-size-all-mem-tables")
}

/// RocksDB's integer `property` summed over `families` (0 where it has none).
fn property_sum(db: &DB, families: &[&str], property: &str) -> u64 {
    families
        .iter()
        .map(|name| {
            db.property_int_value_cf(cf(db, name), property)
                .ok()
                .flatten()
                .unwrap_or(0)
        })
        .sum()
}

/// What RocksDB holds in memory, summed over every column family (its own allocations, not
/// in the Rust heap's figure): memtables, the index and filter blocks of open table files,
/// and the block cache.
pub fn memory(db: &DB) -> [(&'static str, u64); 3] {
    let sum = |property| property_sum(db, &FAMILIES, property);
    [
        ("memtables", sum("rocksdb.cur-size-all-mem-tables")),
        ("table_readers", sum("rocksdb.estimate-table-readers-mem")),
        ("block_cache", sum("rocksdb.block-cache-usage")),
    ]
}

pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(v, bincode::config::standard())
        .expect("invariant: in-memory values always encode")
}

/// [`encode`], appended to `out`.
pub fn encode_into<T: Serialize>(v: &T, out: &mut Vec<u8>) {
    bincode::serde::encode_into_std_write(v, out, bincode::config::standard())
        .expect("invariant: in-memory values always encode into a Vec");
}

pub fn decode<T: DeserializeOwned>(b: &[u8]) -> Result<T, bincode::error::DecodeError> {
    bincode::serde::decode_from_slice(b, bincode::config::standard()).map(|(v, _)| v)
}

/// A stored version of a key: a put (with the fields etcd keeps per version, so the index can be
/// rebuilt after compaction dropped the older versions) or a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Put {
        create_main: i64,
        create_sub: i64,
        version: i64,
        lease: i64,
        value: Vec<u8>,
    },
    Tombstone,
}

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Record::Tombstone => vec![1],
            Record::Put {
                create_main,
                create_sub,
                version,
                lease,
                value,
            } => {
                let mut out = Vec::with_capacity(33 + value.len());
                out.push(0);
                out.extend_from_slice(&create_main.to_be_bytes());
                out.extend_from_slice(&create_sub.to_be_bytes());
                out.extend_from_slice(&version.to_be_bytes());
                out.extend_from_slice(&lease.to_be_bytes());
                out.extend_from_slice(value);
                out
            }
        }
    }

    pub fn decode(b: &[u8]) -> Option<Record> {
        match b.first()? {
            1 => Some(Record::Tombstone),
            0 if b.len() >= 33 => {
                let int = |at: usize| {
                    i64::from_be_bytes(b[at..at + 8].try_into().expect("invariant: 8 bytes"))
                };
                Some(Record::Put {
                    create_main: int(1),
                    create_sub: int(9),
                    version: int(17),
                    lease: int(25),
                    value: b[33..].to_vec(),
                })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let put = Record::Put {
            create_main: 3,
            create_sub: 1,
            version: 7,
            lease: 0x1234,
            value: b"v".to_vec(),
        };
        assert_eq!(Record::decode(&put.encode()), Some(put));
        assert_eq!(
            Record::decode(&Record::Tombstone.encode()),
            Some(Record::Tombstone)
        );
        assert_eq!(Record::decode(&[0, 1, 2]), None);
        assert_eq!(Record::decode(&[]), None);
    }

    #[test]
    fn a_database_of_another_format_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let db = open(dir.path()).expect("new database");
            // As a later release would have left it.
            db.put_cf(cf(&db, CF_META), META_FORMAT, 7u32.to_be_bytes())
                .expect("stamp another version");
        }
        let e = open(dir.path()).expect_err("format 7 must be refused");
        let text = e.to_string();
        assert!(matches!(e, OpenError::Format { found: 7, .. }), "{text}");
        assert!(text.contains("format version 7"), "{text}");
        assert!(
            text.contains(&format!("format version {FORMAT_VERSION} only")),
            "{text}"
        );
    }

    #[test]
    fn a_new_database_is_stamped_and_reopens() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(open(dir.path()).expect("new database"));
        let db = open(dir.path()).expect("reopen");
        let stamp = db.get_cf(cf(&db, CF_META), META_FORMAT).expect("read");
        assert_eq!(stamp, Some(FORMAT_VERSION.to_be_bytes().to_vec()));
    }
}
