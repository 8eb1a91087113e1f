//! openraft's storage conformance suite against the RocksDB log store and state machine.

use openraft::testing::{StoreBuilder, Suite};
use skiff_store::backend;
use skiff_store::mvcc::Mvcc;
use skiff_store::raft::log_store::LogStore;
use skiff_store::raft::state_machine::{Shared, StateMachine};
use skiff_store::raft::{StorageError, TypeConfig};
use tempfile::TempDir;

struct RocksBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for RocksBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = backend::open(&dir.path().join("db")).expect("open backend");
        let shared = Shared::new(Mvcc::open(db.clone()).expect("open keyspace"));
        let sm = StateMachine::open(shared, &dir.path().join("snap"))?;
        Ok((dir, LogStore::new(db), sm))
    }
}

#[test]
fn openraft_storage_suite() {
    if let Err(e) = Suite::test_all(RocksBuilder) {
        panic!("storage conformance: {e}");
    }
}
