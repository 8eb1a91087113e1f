//! A keyspace that follows another etcd: its keys and revisions are the other's, written
//! here as the other's watch reports them (see `crate::remote`). Nothing here goes through
//! Raft: the mirror is a cache of what the other etcd has committed.
//!
//! The revisions are the other etcd's own. A change at revision R is written at R (the
//! revisions between, writes outside the mirrored range, are skipped), each of its keys at
//! the sub-revision of its place among the revision's events, so every key's create
//! revision, mod revision and version come out as the other etcd gave them: the mirror
//! holds the same state before each change, and applies it by the same rules.

use rocksdb::DB;

use super::{Mvcc, SnapshotHead, StoredVersion};
use crate::backend::Record;
use crate::command::Event;
use crate::error::StoreError;
use crate::request::{DeleteRangeRequest, KeyValue, PutRequest};
use crate::revision::{Revision, versioned_key};

/// One change the other etcd reported, in the order of its revision's events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mirrored {
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        lease: i64,
    },
    Delete {
        key: Vec<u8>,
    },
}

impl Mvcc {
    /// Writes the changes of the other etcd's revision `revision` (past this keyspace's):
    /// the events they make, as a watcher of this keyspace sees them.
    pub fn mirror(
        &mut self,
        revision: i64,
        changes: &[Mirrored],
    ) -> Result<Vec<Event>, StoreError> {
        if revision <= self.revision {
            return Err(StoreError::internal(format!(
                "mirrored revision {revision} is not past {}",
                self.revision
            )));
        }
        let mut w = super::TxnWrite::new(revision - 1);
        for change in changes {
            match change {
                Mirrored::Put { key, value, lease } => {
                    self.put(
                        &PutRequest {
                            key: key.clone(),
                            value: value.clone(),
                            lease: *lease,
                            ..PutRequest::default()
                        },
                        &mut w,
                    )?;
                }
                Mirrored::Delete { key } => {
                    self.delete_range(
                        &DeleteRangeRequest {
                            key: key.clone(),
                            ..DeleteRangeRequest::default()
                        },
                        &mut w,
                    )?;
                }
            }
        }
        self.revision = revision;
        self.commit(std::mem::take(&mut w.batch), &[])?;
        Ok(w.events)
    }

    /// Replaces the whole keyspace with `kvs`, what the other etcd held at `revision`
    /// (every key present then, with its own create revision, mod revision and version): the
    /// history before `revision` is not kept, so reads and watches start there.
    pub fn mirror_all(&mut self, revision: i64, kvs: &[KeyValue]) -> Result<(), StoreError> {
        let head = SnapshotHead {
            revision,
            compacted: revision,
            leases: Vec::new(),
            alarms: Vec::new(),
            auth: Default::default(),
        };
        self.replace(
            |db: &DB| {
                let versions: Vec<StoredVersion> = kvs.iter().map(stored_version).collect();
                Mvcc::restore_versions(db, &versions)?;
                Ok::<_, StoreError>(head)
            },
            &[],
        )?;
        Ok(())
    }
}

/// How a key the other etcd holds is stored: at its mod revision (the sub-revision is not
/// told; keys differ, so none is needed), with its create revision and version.
fn stored_version(kv: &KeyValue) -> StoredVersion {
    let record = Record::Put {
        create_main: kv.create_revision,
        create_sub: 0,
        version: kv.version,
        lease: kv.lease,
        value: kv.value.clone(),
    };
    StoredVersion(
        versioned_key(&kv.key, Revision::new(kv.mod_revision, 0)),
        record.encode(),
    )
}
