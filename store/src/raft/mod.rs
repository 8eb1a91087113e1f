//! Raft with openraft: the type configuration, the RocksDB log and state-machine stores, and
//! the transport between members (gRPC, and the peer stream for AppendEntries).
//!
//! | module            | what                                                            |
//! |-------------------|-----------------------------------------------------------------|
//! | [`log_store`]     | the Raft log: synced appends; vote and committed id in RocksDB   |
//! | [`wal`]           | the log's entries in segment files, as etcd's WAL keeps them    |
//! | [`state_machine`] | applies entries to the MVCC keyspace, snapshots, watch publish  |
//! | [`snapshot`]      | snapshot files, built, kept, sent and received a frame at a time |
//! | [`network`]       | the `RaftPeer` client: one cached channel per peer, streamed snapshots |
//! | [`handler`]       | what the transport hands up: the member implements it           |
//! | [`stream`]        | the peer stream: AppendEntries on framed connections, pooled    |
//! | [`relay`]         | forwarded requests, multiplexed on one connection per leader    |

// openraft's error types (StorageError, RPCError) are large by design; the traits fix them.
#![allow(clippy::result_large_err)]

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::command::{Proposal, Response};

pub mod handler;
pub mod log_store;
pub mod network;
pub mod relay;
pub mod snapshot;
pub mod state_machine;
pub mod stream;
pub mod wal;

/// A member as the Raft membership records it: its name and URLs. Raft's own node id is the
/// etcd-style member id (see [`member_id`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.name, self.peer_urls.join(","))
    }
}

impl Member {
    /// The first client URL, where clients of this member connect.
    pub fn client_url(&self) -> Option<&str> {
        self.client_urls.first().map(String::as_str)
    }
}

openraft::declare_raft_types!(
    /// Skiff's Raft types: commands in, responses out, etcd-style u64 member ids.
    pub TypeConfig:
        D = Proposal,
        R = Response,
        NodeId = u64,
        Node = Member,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = snapshot::SnapshotData,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<u64>;
pub type StorageError = openraft::StorageError<u64>;
pub type StoredMembership = openraft::StoredMembership<u64, Member>;
pub type Snapshot = openraft::Snapshot<TypeConfig>;
pub type SnapshotMeta = openraft::SnapshotMeta<u64, Member>;
pub type Entry = openraft::Entry<TypeConfig>;

/// A member id from the member's peer URLs and the cluster token, as etcd derives it (a stable
/// 64-bit hash; never 0). Every member computes every other member's id from
/// `--initial-cluster`, so they agree without talking.
pub fn member_id(peer_urls: &[String], cluster_token: &str) -> u64 {
    let mut urls = peer_urls.to_vec();
    urls.sort();
    let id = fnv1a(
        urls.join("").as_bytes(),
        fnv1a(cluster_token.as_bytes(), FNV_OFFSET),
    );
    if id == 0 { 1 } else { id }
}

/// The cluster id: a hash of the sorted initial member ids.
pub fn cluster_id(member_ids: &[u64]) -> u64 {
    let mut ids = member_ids.to_vec();
    ids.sort_unstable();
    ids.iter()
        .fold(FNV_OFFSET, |h, id| fnv1a(&id.to_be_bytes(), h))
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv1a(bytes: &[u8], mut h: u64) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn io_error(e: impl fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_ids_are_stable_and_depend_on_url_and_token() {
        let a = member_id(&["http://127.0.0.1:2380".into()], "t");
        assert_eq!(a, member_id(&["http://127.0.0.1:2380".into()], "t"));
        assert_ne!(a, member_id(&["http://127.0.0.1:2381".into()], "t"));
        assert_ne!(a, member_id(&["http://127.0.0.1:2380".into()], "u"));
        assert_eq!(cluster_id(&[1, 2, 3]), cluster_id(&[3, 1, 2]));
    }
}

/// The gate every call into a member's Raft core from outside it passes (proposals, the peer
/// service's votes, AppendEntries and snapshots, elections). Closing it refuses what comes
/// after and waits for the calls under way; the member closes it before it stops the core, so
/// no call reaches a stopped core: it would fail, and openraft logs that as an error.
#[derive(Debug, Default)]
pub struct RaftGate {
    closed: std::sync::atomic::AtomicBool,
    calls: tokio::sync::RwLock<()>,
}

impl RaftGate {
    /// Runs `call` unless the gate is closed ([`crate::error::StoreError::Stopped`]). A call
    /// must not pass the gate again inside (a closing gate would hold the second back for
    /// good).
    pub async fn pass<T>(
        &self,
        call: impl Future<Output = T>,
    ) -> Result<T, crate::error::StoreError> {
        let _open = self.calls.read().await;
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(crate::error::StoreError::Stopped);
        }
        Ok(call.await)
    }

    /// Refuses every later call and returns once none is under way.
    pub async fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        drop(self.calls.write().await);
    }
}
