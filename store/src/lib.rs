//! The Skiff store: a Raft-replicated (openraft + RocksDB) MVCC key-value store that speaks the
//! etcd v3 gRPC API. It is an etcd, and knows nothing of Kubernetes: Skiff's API server
//! (`skiff-apiserver`) keeps its objects in it as kube-apiserver keeps them in etcd, and runs
//! in a member's process through one seam ([`server::Extension`]).
//!
//! Data flow of a write: client → etcd service (or an extension's) → proposal to the Raft leader
//! (followers forward) → log entry fsynced on a quorum → applied to the MVCC keyspace at the
//! next revision → watchers fed from the apply path → response with that revision.
//!
//! | module        | what                                                                |
//! |---------------|---------------------------------------------------------------------|
//! | [`revision`]  | (main, sub) revisions and the byte layout of versioned keys         |
//! | [`key_index`] | key → generations of revisions: reads at any revision, compaction   |
//! | [`backend`]   | the RocksDB database: column families, record encoding              |
//! | [`backup`]    | the backup format: written from a member's snapshot, read back      |
//! | [`restore`]   | a new member's data directory made from a backup                    |
//! | [`request`]   | etcd's requests and responses: ranges, puts, deletes, transactions  |
//! | [`command`]   | what goes through the Raft log, and what applying it returns        |
//! | [`mvcc`]      | the keyspace: transactions, ranges, compaction, leases, snapshots   |
//! | [`compaction`]| deleting compacted versions from the backend in the background      |
//! | [`error`]     | store errors with etcd's gRPC codes and messages                    |
//! | [`watch`]     | watch fan-out: synced and parked watchers, catch-up from disk       |
//! | [`raft`]      | openraft type config, RocksDB log and state machine, peer transport |
//! | [`etcd`]      | the etcd v3 services: KV, Watch, Lease, Cluster, Maintenance        |
//! | [`kv`]        | the one interface the API server uses: txn, range, watch, leases    |
//! | [`remote`]    | any etcd v3 cluster as that interface: writes to it, reads a mirror |
//! | [`server`]    | serving a member: client, peer and metrics listeners; extensions    |
//! | [`tls`]       | TLS on client and peer URLs with etcd's flags, certificate reload   |
//! | [`client_port`]| HTTP health and metrics routes beside gRPC on the client URLs; gates |
//! | [`member`]    | a running member: proposals, ReadIndex reads, leases, membership    |
//! | [`metrics`]   | etcd's metric names: fsync, commit, peer RTT, gRPC codes            |
//! | [`proposer`]  | group commit: transactions arriving together become one log entry  |
//! | [`proposals`] | what became of each proposal: applied, lost, or unknown             |
//! | [`read_index`]| shared ReadIndex rounds for linearizable reads and keep-alives      |
//! | [`reconfig`]  | checks on membership changes: peer URLs, strict reconfiguration     |

pub mod auth;
pub mod backend;
pub mod backup;
pub mod client_port;
pub mod command;
pub mod compaction;
pub mod error;
pub mod etcd;
pub mod key_index;
pub mod kv;
pub mod member;
pub mod metrics;
pub mod mvcc;
pub mod proposals;
pub mod proposer;
pub mod raft;
pub mod read_index;
pub mod reconfig;
pub mod remote;
pub mod request;
pub mod restore;
pub mod revision;
pub mod server;
pub mod tls;
pub mod watch;

/// Locks `m`, taking over a lock that a panicking thread left poisoned: what it guards is
/// kept consistent between statements, and a panic elsewhere must not stop the member.
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
