//! The RocksDB database of one member: one DB, one write-ahead log, column families for the
//! Raft log and the state machine.
//!
//! | column family | key                              | value                               |
//! |---------------|----------------------------------|-------------------------------------|
//! | `log`         | log index (u64 BE)               | Raft entry (bincode)                |
//! | `raft`        | `vote`, `committed`, `purged`    | bincode                             |
//! | `kv`          | versioned key (see [`revision`]) | [`Record`]                          |
//! | `lease`       | lease id (i64 BE)                | granted TTL (i64 BE)                |
//! | `meta`        | `applied`, `membership`, `revision`, `compacted`, `alarms` | bincode   |
//!
//! Because every column family shares the WAL, a synced write (log appends, votes) also makes
//! every earlier state-machine write durable; state-machine writes themselves are not synced,
//! the log replays them.
//!
//! [`revision`]: crate::revision

use std::path::Path;
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

/// Opens (creating if needed) the member database under `dir`.
pub fn open(dir: &Path) -> Result<Arc<DB>, rocksdb::Error> {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    opts.set_max_background_jobs(2);
    opts.set_bytes_per_sync(1 << 20);
    let cfs = FAMILIES.iter().map(|name| {
        let mut o = Options::default();
        if *name == CF_LOG {
            // Appended in order and deleted from the front.
            o.set_write_buffer_size(32 << 20);
        }
        ColumnFamilyDescriptor::new(*name, o)
    });
    Ok(Arc::new(DB::open_cf_descriptors(&opts, dir, cfs)?))
}

/// The handle of a column family that [`open`] always creates.
pub fn cf<'a>(db: &'a DB, name: &str) -> &'a rocksdb::ColumnFamily {
    db.cf_handle(name)
        .expect("invariant: backend::open creates every column family")
}

/// Approximate bytes on disk and in memtables: what the backend quota is checked against.
pub fn size(db: &DB) -> u64 {
    FAMILIES
        .iter()
        .map(|name| {
            let h = cf(db, name);
            let sst = db
                .property_int_value_cf(h, "rocksdb.total-sst-files-size")
                .ok()
                .flatten()
                .unwrap_or(0);
            let mem = db
                .property_int_value_cf(h, "rocksdb.cur-size-all-mem-tables")
                .ok()
                .flatten()
                .unwrap_or(0);
            sst + mem
        })
        .sum()
}

pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(v, bincode::config::standard())
        .expect("invariant: in-memory values always encode")
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
}
