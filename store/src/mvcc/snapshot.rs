//! Snapshots: the whole keyspace read from a RocksDB snapshot, and installed in place of the
//! current one.

use std::collections::BTreeSet;

use rocksdb::{DB, IteratorMode, WriteBatch};
use serde::{Deserialize, Serialize};

use super::{
    META_ALARMS, META_AUTH, META_COMPACTED, META_LEASE_CHECKPOINTS, META_REVISION, Mvcc, io,
    restore,
};
use crate::auth::AuthState;
use crate::backend::{self, CF_KV, CF_LEASE, CF_META, Record};
use crate::command::Alarm;
use crate::error::StoreError;
use crate::key_index::TreeIndex;
use crate::revision::{Revision, split_versioned_key};

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
    /// The keyspace of one RocksDB snapshot of `db`, handed to `version` one stored version
    /// at a time in key order (the versions a compaction dropped left out), without holding
    /// it all: what a backup and a Raft snapshot stream to their file (see [`crate::backup`]).
    /// No lock is needed: every applied entry is one write batch, so the RocksDB snapshot sits
    /// between two entries. Returns the rest of the keyspace and the raw values of
    /// `extra_meta` keys (the Raft applied id and membership), all from the same snapshot, so
    /// data and metadata always agree.
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

    /// Writes stored versions read from a snapshot into `db` (a restore, or a snapshot being
    /// installed: see [`replace`](Self::replace)).
    pub fn restore_versions(db: &DB, versions: &[StoredVersion]) -> Result<(), StoreError> {
        let kv = backend::cf(db, CF_KV);
        let mut batch = WriteBatch::default();
        for StoredVersion(k, v) in versions {
            batch.put_cf(kv, k, v);
        }
        db.write(batch).map_err(io)
    }

    /// Writes the rest of a snapshot's keyspace into `db` (after its versions): the leases,
    /// the revision and compaction point, alarms, users and roles, and `meta` as in
    /// [`apply`](Self::apply); synced.
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
        // Checkpoints do not travel with a snapshot: its leases start a full TTL on a new
        // leader, as they did before checkpoints, and none is left from the keyspace replaced.
        batch.delete_cf(meta_cf, META_LEASE_CHECKPOINTS);
        batch.put_cf(meta_cf, META_REVISION, backend::encode(&head.revision));
        batch.put_cf(meta_cf, META_COMPACTED, backend::encode(&head.compacted));
        batch.put_cf(meta_cf, META_ALARMS, backend::encode(&head.alarms));
        batch.put_cf(meta_cf, META_AUTH, backend::encode(&head.auth));
        for (k, v) in meta {
            batch.put_cf(meta_cf, k, v);
        }
        let mut opts = rocksdb::WriteOptions::default();
        opts.set_sync(true);
        db.write_opt(batch, &opts).map_err(io)
    }

    /// Replaces the whole keyspace with a snapshot's, never holding it all: the stored
    /// versions and leases are deleted (two range deletions), `fill` writes the snapshot's
    /// versions (with [`restore_versions`](Self::restore_versions), a piece at a time) and
    /// returns the rest of it, which is written last with `meta`, synced, as in
    /// [`apply`](Self::apply).
    ///
    /// The pieces are separate writes: a crash part way leaves `meta` (the Raft applied id)
    /// as it was, and the member installs its saved snapshot again when it starts (see
    /// [`crate::raft::state_machine`]). Nobody reads the keyspace meanwhile: the caller holds
    /// it exclusively.
    pub fn replace<E: From<StoreError>>(
        &mut self,
        fill: impl FnOnce(&DB) -> Result<SnapshotHead, E>,
        meta: &[(&[u8], Vec<u8>)],
    ) -> Result<(), E> {
        let mut clear = WriteBatch::default();
        for name in [CF_KV, CF_LEASE] {
            let cf = backend::cf(&self.db, name);
            let first = self.db.iterator_cf(cf, IteratorMode::Start).next();
            let last = self.db.iterator_cf(cf, IteratorMode::End).next();
            if let (Some(first), Some(last)) = (first, last) {
                let (first, _) = first.map_err(io)?;
                let (last, _) = last.map_err(io)?;
                // The end of a range deletion is exclusive: the last key with a zero byte
                // added is the first key after it.
                let mut end = last.to_vec();
                end.push(0);
                clear.delete_range_cf(cf, &first[..], &end[..]);
            }
        }
        self.db.write(clear).map_err(io)?;
        let head = fill(&self.db)?;
        Mvcc::restore_head(&self.db, &head, meta)?;
        self.load()?;
        Ok(())
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
