//! Reading the keyspace's history for watchers that are behind: planned from the index under
//! the keyspace lock, loaded from a RocksDB snapshot without it.
//!
//! ```text
//!   catch-up task     ── keyspace read lock ──────────────────┐   ── no lock ───────────
//!   plan(range, from)   index.changes(from..=current, max)    │   plan.load(snapshot)
//!                       + the state before each change        │     versions by (key, rev)
//!                       + a RocksDB snapshot                  ┘     → events, oldest first
//! ```
//!
//! The plan names exact versions (key, revision) and, for `prev_kv`, the version live just
//! before each change. The RocksDB snapshot taken under the same lock holds every one of them
//! even if the apply path writes or compacts meanwhile (versions are immutable and the apply
//! path commits its batch before it releases the lock). So a catch-up read costs the apply
//! path only the index walk; the part that touches the disk runs beside it.

use rocksdb::{DB, Snapshot};

use super::{Mvcc, io};
use crate::backend::{self, CF_KV, Record};
use crate::command::{Event, EventKind, KeyValue};
use crate::error::StoreError;
use crate::key_index::KeyState;
use crate::revision::{Revision, versioned_key};

/// The versions a catch-up read will load, chosen from the index alone.
#[derive(Debug, Clone, Default)]
pub struct HistoryPlan {
    changes: Vec<PlannedChange>,
    /// Every change in the range at main revisions `[from, covered]` is planned.
    pub covered: i64,
}

#[derive(Debug, Clone)]
struct PlannedChange {
    key: Vec<u8>,
    rev: Revision,
    /// The key's state just before the change, when the watcher wants previous versions and
    /// the key existed then (and compaction kept it).
    prev: Option<KeyState>,
}

/// Loaded history: each revision's events in sub-revision order, oldest revision first.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub revisions: Vec<(i64, Vec<Event>)>,
    /// Every change in the range at main revisions `[from, covered]` is in `revisions`.
    pub covered: i64,
}

impl Mvcc {
    /// Plans a read of the changes to `[key, range_end)` from main revision `from` up to the
    /// current revision: at most `max_changes` (whole revisions; see
    /// [`TreeIndex::changes`](crate::key_index::TreeIndex::changes)). Call under the keyspace
    /// lock and take the snapshot to load from under the same hold.
    pub fn plan_history(
        &self,
        key: &[u8],
        range_end: &[u8],
        from: i64,
        max_changes: usize,
        prev_kv: bool,
    ) -> HistoryPlan {
        let found = self
            .index
            .changes(key, range_end, from, self.revision, max_changes.max(1));
        let changes = found
            .changes
            .into_iter()
            .map(|(key, rev)| {
                let prev = if prev_kv {
                    self.index.get(&key, rev.main - 1)
                } else {
                    None
                };
                PlannedChange { key, rev, prev }
            })
            .collect();
        HistoryPlan {
            changes,
            covered: found.covered,
        }
    }

    /// Plans and loads in one go, for a caller that holds the keyspace lock throughout (a
    /// small read, where a snapshot of its own buys nothing).
    pub fn read_history(
        &self,
        key: &[u8],
        range_end: &[u8],
        from: i64,
        max_changes: usize,
        prev_kv: bool,
        max_bytes: usize,
    ) -> Result<History, StoreError> {
        let plan = self.plan_history(key, range_end, from, max_changes, prev_kv);
        let snapshot = self.db.snapshot();
        plan.load(&self.db, &snapshot, max_bytes)
    }
}

impl HistoryPlan {
    /// Number of changes planned.
    pub fn len(&self) -> usize {
        self.changes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Loads the planned versions from `snapshot` (of `db`, taken under the lock the plan
    /// was made under). Stops at the end of the revision during which the loaded keys and
    /// values pass `max_bytes`, so one watch response stays a sensible size; `covered` says
    /// how far the result reaches.
    pub fn load(
        self,
        db: &DB,
        snapshot: &Snapshot<'_>,
        max_bytes: usize,
    ) -> Result<History, StoreError> {
        let cf = backend::cf(db, CF_KV);
        let read = |key: &[u8], rev: Revision| -> Result<Record, StoreError> {
            let raw = snapshot
                .get_pinned_cf(cf, versioned_key(key, rev))
                .map_err(io)?
                .ok_or_else(|| {
                    StoreError::internal(format!("version {rev} of an indexed key is missing"))
                })?;
            Record::decode(&raw).ok_or_else(|| StoreError::internal("malformed record in backend"))
        };
        let mut out = History {
            revisions: Vec::new(),
            covered: self.covered,
        };
        let mut bytes = 0usize;
        for c in self.changes {
            match out.revisions.last() {
                Some((last, _)) if *last == c.rev.main => {}
                Some((last, _)) if bytes >= max_bytes => {
                    out.covered = c.rev.main - 1;
                    debug_assert!(out.covered >= *last);
                    break;
                }
                _ => out.revisions.push((c.rev.main, Vec::new())),
            }
            let prev_kv = match c.prev {
                Some(state) => match read(&c.key, state.modified)? {
                    Record::Put { lease, value, .. } => Some(KeyValue {
                        key: c.key.clone(),
                        create_revision: state.created.main,
                        mod_revision: state.modified.main,
                        version: state.version,
                        value,
                        lease,
                    }),
                    Record::Tombstone => {
                        return Err(StoreError::internal("index points at a tombstone"));
                    }
                },
                None => None,
            };
            bytes += c.key.len() + prev_kv.as_ref().map_or(0, |p| p.value.len());
            let event = match read(&c.key, c.rev)? {
                Record::Put {
                    create_main,
                    version,
                    lease,
                    value,
                    ..
                } => {
                    bytes += value.len();
                    Event {
                        kind: EventKind::Put,
                        kv: KeyValue {
                            key: c.key,
                            create_revision: create_main,
                            mod_revision: c.rev.main,
                            version,
                            value,
                            lease,
                        },
                        prev_kv,
                    }
                }
                Record::Tombstone => Event {
                    kind: EventKind::Delete,
                    kv: KeyValue {
                        key: c.key,
                        mod_revision: c.rev.main,
                        ..KeyValue::default()
                    },
                    prev_kv,
                },
            };
            out.revisions
                .last_mut()
                .expect("invariant: a revision was pushed above")
                .1
                .push(event);
        }
        Ok(out)
    }
}
