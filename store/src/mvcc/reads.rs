//! Reads: one key at a revision, and ranges (etcd's Range) with their limits, counts and sorting.

use super::txn::TxnWrite;
use super::{Mvcc, io};
use crate::backend::{self, CF_KV, Record};
use crate::command::{KeyValue, RangeRequest, RangeResponse, SortOrder, SortTarget};
use crate::error::StoreError;
use crate::key_index::KeyState;
use crate::revision::{Revision, versioned_key};

/// A key that changed, and its value now (none: deleted).
pub type Changed = (Vec<u8>, Option<KeyValue>);

impl Mvcc {
    pub(super) fn load_record(
        &self,
        key: &[u8],
        rev: Revision,
        w: Option<&TxnWrite>,
    ) -> Result<Record, StoreError> {
        let vk = versioned_key(key, rev);
        if let Some(r) = w.and_then(|w| w.overlay.get(&vk)) {
            return Ok(r.clone());
        }
        let raw = self
            .db
            .get_pinned_cf(backend::cf(&self.db, CF_KV), &vk)
            .map_err(io)?
            .ok_or_else(|| {
                StoreError::internal(format!("version {rev} of an indexed key is missing"))
            })?;
        Record::decode(&raw).ok_or_else(|| StoreError::internal("malformed record in backend"))
    }

    pub(super) fn key_value(
        &self,
        key: &[u8],
        state: KeyState,
        w: Option<&TxnWrite>,
    ) -> Result<KeyValue, StoreError> {
        match self.load_record(key, state.modified, w)? {
            Record::Put { lease, value, .. } => Ok(KeyValue {
                key: key.to_vec(),
                create_revision: state.created.main,
                mod_revision: state.modified.main,
                version: state.version,
                value,
                lease,
            }),
            Record::Tombstone => Err(StoreError::internal("index points at a tombstone")),
        }
    }

    /// The keys in `[key, range_end)` changed (put or deleted) at main revisions after
    /// `since`, each once, in key order, with its value now (none: deleted). `None` when the
    /// index cannot tell, `since` being behind the compaction: read the range whole instead.
    pub fn changed_since(
        &self,
        key: &[u8],
        range_end: &[u8],
        since: i64,
    ) -> Result<Option<Vec<Changed>>, StoreError> {
        if since < self.compacted {
            return Ok(None);
        }
        let found = self
            .index
            .changes(key, range_end, since + 1, self.revision, usize::MAX);
        let keys: std::collections::BTreeSet<Vec<u8>> =
            found.changes.into_iter().map(|(k, _)| k).collect();
        keys.into_iter()
            .map(|k| {
                let now = self.get(&k, self.revision)?;
                Ok((k, now))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// The key as of main revision `at`, if it existed.
    pub fn get(&self, key: &[u8], at: i64) -> Result<Option<KeyValue>, StoreError> {
        match self.index.get(key, at) {
            Some(state) => self.key_value(key, state, None).map(Some),
            None => Ok(None),
        }
    }

    pub(super) fn check_read_revision(&self, revision: i64) -> Result<i64, StoreError> {
        if revision <= 0 {
            return Ok(self.revision);
        }
        if revision > self.revision {
            return Err(StoreError::FutureRevision);
        }
        if revision < self.compacted {
            return Err(StoreError::Compacted {
                compacted: self.compacted,
            });
        }
        Ok(revision)
    }

    /// A Range outside any transaction.
    pub fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StoreError> {
        self.range_in(req, None)
    }

    pub(super) fn range_in(
        &self,
        req: &RangeRequest,
        w: Option<&TxnWrite>,
    ) -> Result<RangeResponse, StoreError> {
        let at = match w {
            // Inside a write transaction the current view includes its own writes.
            Some(w) if req.revision <= 0 && w.sub > 0 => w.main,
            _ => self.check_read_revision(req.revision)?,
        };
        let filtered = req.min_mod_revision > 0
            || req.max_mod_revision > 0
            || req.min_create_revision > 0
            || req.max_create_revision > 0;
        let mut order = req.sort_order;
        if order == SortOrder::None && req.sort_target != SortTarget::Key {
            order = SortOrder::Ascend;
        }
        let needs_all = filtered
            || !matches!(
                (order, req.sort_target),
                (SortOrder::None, _) | (SortOrder::Ascend, SortTarget::Key)
            );
        let limit = if needs_all || req.count_only || req.limit <= 0 {
            0
        } else {
            req.limit as usize + 1
        };
        let (mut items, total) = self.index.range(&req.key, &req.range_end, at, limit);
        let count = total as i64;
        if req.count_only {
            return Ok(RangeResponse {
                kvs: Vec::new(),
                more: false,
                count,
            });
        }
        if filtered {
            items.retain(|(_, s)| {
                (req.min_mod_revision <= 0 || s.modified.main >= req.min_mod_revision)
                    && (req.max_mod_revision <= 0 || s.modified.main <= req.max_mod_revision)
                    && (req.min_create_revision <= 0 || s.created.main >= req.min_create_revision)
                    && (req.max_create_revision <= 0 || s.created.main <= req.max_create_revision)
            });
        }
        let mut kvs = Vec::with_capacity(items.len());
        for (key, state) in items {
            kvs.push(self.key_value(&key, state, w)?);
        }
        if order != SortOrder::None {
            sort_kvs(&mut kvs, req.sort_target, order == SortOrder::Descend);
        }
        let mut more = false;
        if req.limit > 0 && kvs.len() > req.limit as usize {
            kvs.truncate(req.limit as usize);
            more = true;
        }
        // Values are blanked only now: a sort by value, and the limit after it, must see them
        // (etcd sorts and truncates first too).
        if req.keys_only {
            for kv in &mut kvs {
                kv.value = Vec::new();
            }
        }
        Ok(RangeResponse { kvs, more, count })
    }
}

fn sort_kvs(kvs: &mut [KeyValue], target: SortTarget, descend: bool) {
    // Stable, so equal sort keys stay in key order as etcd's do.
    match target {
        SortTarget::Key => kvs.sort_by(|a, b| a.key.cmp(&b.key)),
        SortTarget::Version => kvs.sort_by_key(|kv| kv.version),
        SortTarget::Create => kvs.sort_by_key(|kv| kv.create_revision),
        SortTarget::Mod => kvs.sort_by_key(|kv| kv.mod_revision),
        SortTarget::Value => kvs.sort_by(|a, b| a.value.cmp(&b.value)),
    }
    if descend {
        kvs.reverse();
    }
}
