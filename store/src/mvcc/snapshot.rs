//! Snapshots: the whole keyspace read from a RocksDB snapshot, and installed in place of the
//! current one.

use std::collections::BTreeSet;

use rocksdb::{DB, IteratorMode, WriteBatch};
use serde::{Deserialize, Serialize};

use super::{META_ALARMS, META_AUTH, META_COMPACTED, META_REVISION, Mvcc, io, restore};
use crate::auth::AuthState;
use crate::backend::{self, CF_KV, CF_LEASE, CF_META, Record};
use crate::command::Alarm;
use crate::error::StoreError;
use crate::key_index::TreeIndex;
use crate::revision::{Revision, split_versioned_key};

/// The whole keyspace as a snapshot carries it.
#[derive(Debug, Serialize, Deserialize)]
pub struct SnapshotPayload {
    pub revision: i64,
    pub compacted: i64,
    pub leases: Vec<(i64, i64)>,
    pub alarms: Vec<(u64, Alarm)>,
    pub auth: AuthState,
    /// (versioned key, encoded record) in key order.
    pub kv: Vec<StoredVersion>,
}

/// What a snapshot holds besides its stored versions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotHead {
    pub revision: i64,
    pub compacted: i64,
    pub leases: Vec<(i64, i64)>,
    pub alarms: Vec<(u64, Alarm)>,
    pub auth: AuthState,
}

/// Raw values of metadata keys read alongside a snapshot (absent keys are `None`).
pub type RawMeta = Vec<Option<Vec<u8>>>;

/// One stored version in a snapshot: versioned key and encoded record.
#[derive(Debug, Serialize, Deserialize)]
pub struct StoredVersion(
    #[serde(with = "serde_bytes")] pub Vec<u8>,
    #[serde(with = "serde_bytes")] pub Vec<u8>,
);

impl Mvcc {
    /// The keyspace as a snapshot payload, read entirely from one RocksDB snapshot of `db`
    /// (no lock needed: every applied entry is one write batch, so the snapshot sits between
    /// two entries), together with the raw values of `extra_meta` keys from the same snapshot
    /// (the Raft applied id and membership), so data and metadata always agree. Versions that
    /// compaction dropped but the background has not deleted yet are left out.
    pub fn snapshot_from(
        db: &DB,
        extra_meta: &[&[u8]],
    ) -> Result<(SnapshotPayload, RawMeta), StoreError> {
        let mut kv = Vec::new();
        let (head, extra) = Mvcc::visit_snapshot(db, extra_meta, |v| {
            kv.push(v);
            Ok(())
        })?;
        Ok((
            SnapshotPayload {
                revision: head.revision,
                compacted: head.compacted,
                leases: head.leases,
                alarms: head.alarms,
                auth: head.auth,
                kv,
            },
            extra,
        ))
    }

    /// The keyspace of one RocksDB snapshot of `db`, handed to `version` one stored version
    /// at a time in key order (the versions a compaction dropped left out), without holding
    /// it all: what [`snapshot_from`](Self::snapshot_from) collects and a backup streams.
    /// Returns the rest of the keyspace and the raw values of `extra_meta` keys, all from the
    /// same snapshot.
    pub fn visit_snapshot(
        db: &DB,
        extra_meta: &[&[u8]],
        mut version: impl FnMut(StoredVersion) -> Result<(), StoreError>,
    ) -> Result<(SnapshotHead, RawMeta), StoreError> {
        let snap = db.snapshot();
        let meta_cf = backend::cf(db, CF_META);
        let read_i64 = |k: &[u8]| -> Result<i64, StoreError> {
            match snap.get_cf(meta_cf, k).map_err(io)? {
                Some(b) => backend::decode(&b).map_err(StoreError::internal),
                None => Ok(0),
            }
        };
        let alarms = match snap.get_cf(meta_cf, META_ALARMS).map_err(io)? {
            Some(b) => backend::decode(&b).map_err(StoreError::internal)?,
            None => Vec::new(),
        };
        let auth = match snap.get_cf(meta_cf, META_AUTH).map_err(io)? {
            Some(b) => backend::decode(&b).map_err(StoreError::internal)?,
            None => AuthState::default(),
        };
        let mut leases = Vec::new();
        for item in snap.iterator_cf(backend::cf(db, CF_LEASE), IteratorMode::Start) {
            let (k, v) = item.map_err(io)?;
            let id = i64::from_be_bytes(k.as_ref().try_into().map_err(StoreError::internal)?);
            let ttl = i64::from_be_bytes(v.as_ref().try_into().map_err(StoreError::internal)?);
            leases.push((id, ttl));
        }
        let compacted = read_i64(META_COMPACTED)?;
        // One key's versions at a time: which of them compaction dropped depends on its
        // whole history.
        let mut key_versions: Vec<(Revision, StoredVersion)> = Vec::new();
        let mut current: Option<Vec<u8>> = None;
        for item in snap.iterator_cf(backend::cf(db, CF_KV), IteratorMode::Start) {
            let (k, v) = item.map_err(io)?;
            let (key, rev) = split_versioned_key(&k)
                .ok_or_else(|| StoreError::internal("malformed versioned key in backend"))?;
            if let Some(done) = current.as_ref().filter(|c| **c != key) {
                keep_compacted(done, &mut key_versions, compacted, &mut version)?;
            }
            current = Some(key);
            key_versions.push((rev, StoredVersion(k.to_vec(), v.to_vec())));
        }
        if let Some(last) = &current {
            keep_compacted(last, &mut key_versions, compacted, &mut version)?;
        }
        let extra = extra_meta
            .iter()
            .map(|k| snap.get_cf(meta_cf, k).map_err(io))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((
            SnapshotHead {
                revision: read_i64(META_REVISION)?,
                compacted,
                leases,
                alarms,
                auth,
            },
            extra,
        ))
    }

    /// Writes stored versions read from a snapshot into an empty `db` (a restore).
    pub fn restore_versions(db: &DB, versions: &[StoredVersion]) -> Result<(), StoreError> {
        let kv = backend::cf(db, CF_KV);
        let mut batch = WriteBatch::default();
        for StoredVersion(k, v) in versions {
            batch.put_cf(kv, k, v);
        }
        db.write(batch).map_err(io)
    }

    /// Writes the rest of a snapshot's keyspace into `db` (a restore, after its versions):
    /// the leases, the revision and compaction point, users and roles, no alarms, and `meta`
    /// as in [`apply`](Self::apply); synced.
    pub fn restore_head(
        db: &DB,
        head: &SnapshotHead,
        meta: &[(&[u8], Vec<u8>)],
    ) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        let lease = backend::cf(db, CF_LEASE);
        for (id, ttl) in &head.leases {
            batch.put_cf(lease, id.to_be_bytes(), ttl.to_be_bytes());
        }
        let meta_cf = backend::cf(db, CF_META);
        batch.put_cf(meta_cf, META_REVISION, backend::encode(&head.revision));
        batch.put_cf(meta_cf, META_COMPACTED, backend::encode(&head.compacted));
        batch.put_cf(
            meta_cf,
            META_ALARMS,
            backend::encode(&Vec::<(u64, Alarm)>::new()),
        );
        batch.put_cf(meta_cf, META_AUTH, backend::encode(&head.auth));
        for (k, v) in meta {
            batch.put_cf(meta_cf, k, v);
        }
        let mut opts = rocksdb::WriteOptions::default();
        opts.set_sync(true);
        db.write_opt(batch, &opts).map_err(io)
    }

    /// Replaces the whole keyspace with a snapshot's; `meta` as in [`apply`](Self::apply).
    pub fn install(
        &mut self,
        payload: &SnapshotPayload,
        meta: &[(&[u8], Vec<u8>)],
    ) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        for name in [CF_KV, CF_LEASE] {
            let cf = backend::cf(&self.db, name);
            for item in self.db.iterator_cf(cf, IteratorMode::Start) {
                let (k, _) = item.map_err(io)?;
                batch.delete_cf(cf, k);
            }
        }
        let kv = backend::cf(&self.db, CF_KV);
        for StoredVersion(k, v) in &payload.kv {
            batch.put_cf(kv, k, v);
        }
        let lease = backend::cf(&self.db, CF_LEASE);
        for (id, ttl) in &payload.leases {
            batch.put_cf(lease, id.to_be_bytes(), ttl.to_be_bytes());
        }
        let meta_cf = backend::cf(&self.db, CF_META);
        batch.put_cf(meta_cf, META_REVISION, backend::encode(&payload.revision));
        batch.put_cf(meta_cf, META_COMPACTED, backend::encode(&payload.compacted));
        batch.put_cf(meta_cf, META_ALARMS, backend::encode(&payload.alarms));
        batch.put_cf(meta_cf, META_AUTH, backend::encode(&payload.auth));
        for (k, v) in meta {
            batch.put_cf(meta_cf, k, v);
        }
        self.db.write(batch).map_err(io)?;
        self.load()
    }
}

/// Hands the stored versions of `key` (`versions`, oldest first) to `out`, leaving out
/// those a compaction at `compacted` drops: the same rule as rebuilding the index on start-up.
fn keep_compacted(
    key: &[u8],
    versions: &mut Vec<(Revision, StoredVersion)>,
    compacted: i64,
    out: &mut impl FnMut(StoredVersion) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    if compacted <= 0 {
        return versions.drain(..).try_for_each(|(_, v)| out(v));
    }
    let mut index = TreeIndex::default();
    for (rev, StoredVersion(_, v)) in versions.iter() {
        let record =
            Record::decode(v).ok_or_else(|| StoreError::internal("malformed record in backend"))?;
        restore(&mut index, key, *rev, &record);
    }
    let dropped: BTreeSet<Revision> = index
        .compact(compacted)
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    versions
        .drain(..)
        .filter(|(rev, _)| !dropped.contains(rev))
        .try_for_each(|(_, v)| out(v))
}
