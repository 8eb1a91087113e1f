//! Write transactions: compares evaluated against the state before the transaction, the chosen
//! branches checked before anything is written, then puts and deletes numbered with sub revisions.

use std::collections::HashMap;

use rocksdb::WriteBatch;

use super::Mvcc;
use crate::backend::{self, CF_KV, Record};
use crate::command::{
    Command, Compare, CompareResult, CompareTarget, DeleteRangeRequest, DeleteRangeResponse, Event,
    EventKind, KeyValue, PutRequest, PutResponse, RequestOp, ResponseOp, TxnRequest, TxnResponse,
};
use crate::error::StoreError;
use crate::revision::{Revision, versioned_key};

impl Mvcc {
    /// Whether `c` holds now. `w` carries what earlier transactions of the same batch wrote
    /// (not yet in RocksDB); this transaction has written nothing when compares run.
    pub(super) fn compare(&self, c: &Compare, w: &TxnWrite) -> Result<bool, StoreError> {
        let (items, _) = if c.range_end.is_empty() {
            let items = self
                .index
                .get(&c.key, self.revision)
                .map(|s| vec![(c.key.clone(), s)])
                .unwrap_or_default();
            (items, 0)
        } else {
            self.index.range(&c.key, &c.range_end, self.revision, 0)
        };
        if items.is_empty() {
            // etcd: a missing key compares as zero values, except VALUE, which fails.
            return Ok(match &c.target {
                CompareTarget::Value(_) => false,
                _ => compare_one(c, &KeyValue::default()),
            });
        }
        for (key, state) in items {
            // The index holds the revisions and the version: only a value or a lease is read
            // from the backend (a quota's range compare over every pod of a namespace reads
            // none).
            let kv = match c.target {
                CompareTarget::Version(_) | CompareTarget::Create(_) | CompareTarget::Mod(_) => {
                    KeyValue {
                        create_revision: state.created.main,
                        mod_revision: state.modified.main,
                        version: state.version,
                        ..KeyValue::default()
                    }
                }
                CompareTarget::Value(_) | CompareTarget::Lease(_) => {
                    self.key_value(&key, state, Some(w))?
                }
            };
            if !compare_one(c, &kv) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Evaluates every compare of `t` and its nested transactions on the chosen branches,
    /// before anything is written; returns the choices in depth-first order.
    pub(super) fn choose_paths(
        &self,
        t: &TxnRequest,
        w: &TxnWrite,
        path: &mut Vec<bool>,
    ) -> Result<(), StoreError> {
        let mut ok = true;
        for c in &t.compare {
            if !self.compare(c, w)? {
                ok = false;
                break;
            }
        }
        path.push(ok);
        let ops = if ok { &t.success } else { &t.failure };
        for op in ops {
            if let RequestOp::Txn(inner) = op {
                self.choose_paths(inner, w, path)?;
            }
        }
        Ok(())
    }

    pub(super) fn check_ops(
        &self,
        t: &TxnRequest,
        path: &[bool],
        at: &mut usize,
    ) -> Result<(), StoreError> {
        let ops = if path[*at] { &t.success } else { &t.failure };
        *at += 1;
        for op in ops {
            match op {
                RequestOp::Range(r) => {
                    self.check_read_revision(r.revision)?;
                }
                RequestOp::Put(p) => {
                    if p.lease != 0 && !p.ignore_lease && !self.leases.contains_key(&p.lease) {
                        return Err(StoreError::LeaseNotFound);
                    }
                    if (p.ignore_value || p.ignore_lease)
                        && self.index.get(&p.key, self.revision).is_none()
                    {
                        return Err(StoreError::KeyNotFound);
                    }
                }
                RequestOp::DeleteRange(_) => {}
                RequestOp::Txn(inner) => self.check_ops(inner, path, at)?,
            }
        }
        Ok(())
    }

    pub(super) fn txn(
        &mut self,
        t: &TxnRequest,
        w: &mut TxnWrite,
    ) -> Result<TxnResponse, StoreError> {
        let mut path = Vec::new();
        self.choose_paths(t, w, &mut path)?;
        self.check_ops(t, &path, &mut 0)?;
        self.execute(t, &path, &mut 0, w)
    }

    pub(super) fn execute(
        &mut self,
        t: &TxnRequest,
        path: &[bool],
        at: &mut usize,
        w: &mut TxnWrite,
    ) -> Result<TxnResponse, StoreError> {
        let succeeded = path[*at];
        *at += 1;
        let ops = if succeeded { &t.success } else { &t.failure };
        let mut responses = Vec::with_capacity(ops.len());
        for op in ops {
            responses.push(match op {
                RequestOp::Range(r) => ResponseOp::Range(self.range_in(r, Some(w))?),
                RequestOp::Put(p) => ResponseOp::Put(self.put(p, w)?),
                RequestOp::DeleteRange(d) => ResponseOp::DeleteRange(self.delete_range(d, w)?),
                RequestOp::Txn(inner) => ResponseOp::Txn(self.execute(inner, path, at, w)?),
            });
        }
        Ok(TxnResponse {
            succeeded,
            responses,
        })
    }

    pub(super) fn view(&self, w: &TxnWrite) -> i64 {
        if w.sub > 0 { w.main } else { self.revision }
    }

    pub(super) fn put(
        &mut self,
        p: &PutRequest,
        w: &mut TxnWrite,
    ) -> Result<PutResponse, StoreError> {
        let prev = match self.index.get(&p.key, self.view(w)) {
            Some(s) => Some(self.key_value(&p.key, s, Some(w))?),
            None => None,
        };
        let value = match (&prev, p.ignore_value) {
            (Some(prev), true) => prev.value.clone(),
            _ => p.value.clone(),
        };
        let lease = match (&prev, p.ignore_lease) {
            (Some(prev), true) => prev.lease,
            _ => p.lease,
        };
        let rev = w.next_rev();
        self.index.put(&p.key, rev);
        let state = self
            .index
            .get(&p.key, rev.main)
            .expect("invariant: just written");
        let record = Record::Put {
            create_main: state.created.main,
            create_sub: state.created.sub,
            version: state.version,
            lease,
            value: value.clone(),
        };
        let vk = versioned_key(&p.key, rev);
        w.batch
            .put_cf(backend::cf(&self.db, CF_KV), &vk, record.encode());
        w.overlay.insert(vk, record);
        if let Some(prev) = &prev
            && prev.lease != 0
            && prev.lease != lease
            && let Some(l) = self.leases.get_mut(&prev.lease)
        {
            l.keys.remove(&p.key);
        }
        if lease != 0
            && let Some(l) = self.leases.get_mut(&lease)
        {
            l.keys.insert(p.key.clone());
        }
        w.events.push(Event {
            kind: EventKind::Put,
            kv: KeyValue {
                key: p.key.clone(),
                create_revision: state.created.main,
                mod_revision: rev.main,
                version: state.version,
                value,
                lease,
            },
            prev_kv: prev.clone(),
        });
        Ok(PutResponse {
            prev_kv: if p.prev_kv { prev } else { None },
        })
    }

    pub(super) fn delete_range(
        &mut self,
        d: &DeleteRangeRequest,
        w: &mut TxnWrite,
    ) -> Result<DeleteRangeResponse, StoreError> {
        let (items, _) = self.index.range(&d.key, &d.range_end, self.view(w), 0);
        let mut prev_kvs = Vec::new();
        let deleted = items.len() as i64;
        for (key, state) in items {
            let prev = self.key_value(&key, state, Some(w))?;
            let rev = w.next_rev();
            self.index
                .tombstone(&key, rev)
                .map_err(|_| StoreError::internal("tombstone of a key the index just listed"))?;
            let vk = versioned_key(&key, rev);
            w.batch.put_cf(
                backend::cf(&self.db, CF_KV),
                &vk,
                Record::Tombstone.encode(),
            );
            w.overlay.insert(vk, Record::Tombstone);
            if prev.lease != 0
                && let Some(l) = self.leases.get_mut(&prev.lease)
            {
                l.keys.remove(&key);
            }
            w.events.push(Event {
                kind: EventKind::Delete,
                kv: KeyValue {
                    key,
                    mod_revision: rev.main,
                    ..KeyValue::default()
                },
                prev_kv: Some(prev.clone()),
            });
            if d.prev_kv {
                prev_kvs.push(prev);
            }
        }
        Ok(DeleteRangeResponse { deleted, prev_kvs })
    }
}

/// The state of one write transaction while it executes.
pub(super) struct TxnWrite {
    pub(super) main: i64,
    pub(super) sub: i64,
    pub(super) batch: WriteBatch,
    /// Versions written by this transaction, for reads before the batch commits.
    pub(super) overlay: HashMap<Vec<u8>, Record>,
    pub(super) events: Vec<Event>,
    /// Versioned keys a compaction dropped from the index, for the background to delete once
    /// the entry is committed.
    pub(super) compacted: Vec<Vec<u8>>,
}

impl TxnWrite {
    pub(super) fn new(revision: i64) -> Self {
        TxnWrite {
            main: revision + 1,
            sub: 0,
            batch: WriteBatch::default(),
            overlay: HashMap::new(),
            events: Vec::new(),
            compacted: Vec::new(),
        }
    }

    pub(super) fn next_rev(&mut self) -> Revision {
        let r = Revision::new(self.main, self.sub);
        self.sub += 1;
        r
    }
}

pub(super) fn txn_has_put(t: &TxnRequest) -> bool {
    fn ops_have_put(ops: &[RequestOp]) -> bool {
        ops.iter().any(|op| match op {
            RequestOp::Put(_) => true,
            RequestOp::Txn(t) => txn_has_put(t),
            _ => false,
        })
    }
    ops_have_put(&t.success) || ops_have_put(&t.failure)
}

pub(super) fn cmd_has_put(cmd: &Command) -> bool {
    match cmd {
        Command::Txn(t) => txn_has_put(t),
        Command::Batch(ts) => ts.iter().any(txn_has_put),
        Command::LeaseGrant { .. } => true,
        _ => false,
    }
}

fn compare_one(c: &Compare, kv: &KeyValue) -> bool {
    use std::cmp::Ordering;
    let ord = match &c.target {
        CompareTarget::Version(v) => kv.version.cmp(v),
        CompareTarget::Create(v) => kv.create_revision.cmp(v),
        CompareTarget::Mod(v) => kv.mod_revision.cmp(v),
        CompareTarget::Lease(v) => kv.lease.cmp(v),
        CompareTarget::Value(v) => kv.value.as_slice().cmp(v.as_slice()),
    };
    match c.result {
        CompareResult::Equal => ord == Ordering::Equal,
        CompareResult::NotEqual => ord != Ordering::Equal,
        CompareResult::Greater => ord == Ordering::Greater,
        CompareResult::Less => ord == Ordering::Less,
    }
}
