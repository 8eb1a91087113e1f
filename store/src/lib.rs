//! The Skiff store: a Raft-replicated (openraft + RocksDB) MVCC key-value store that speaks the
//! etcd v3 gRPC API, and the typed cluster API served from the same process.
//!
//! Data flow of a write: client → etcd or cluster API service → proposal to the Raft leader
//! (followers forward) → log entry fsynced on a quorum → applied to the MVCC keyspace at the
//! next revision → watchers fed from the apply path → response with that revision.
//!
//! | module        | what                                                                |
//! |---------------|---------------------------------------------------------------------|
//! | [`revision`]  | (main, sub) revisions and the byte layout of versioned keys         |
//! | [`key_index`] | key → generations of revisions: reads at any revision, compaction   |
//! | [`backend`]   | the RocksDB database: column families, record encoding              |
//! | [`backup`]    | backups: streamed from a member, restored into a new cluster's data |
//! | [`command`]   | what goes through the Raft log, and what applying it returns        |
//! | [`mvcc`]      | the keyspace: transactions, ranges, compaction, leases, snapshots   |
//! | [`compaction`]| deleting compacted versions from the backend in the background      |
//! | [`error`]     | store errors with etcd's gRPC codes and messages                    |
//! | [`watch`]     | watch fan-out: synced and parked watchers, catch-up from disk       |
//! | [`raft`]      | openraft type config, RocksDB log and state machine, peer transport |
//! | [`cluster`]   | the typed cluster API: Pods, Nodes, admission, batch Bind, watches  |
//! | [`access`]    | the Kubernetes API's authentication (certificates, tokens) and RBAC |
//! | [`etcd`]      | the etcd v3 services: KV, Watch, Lease, Cluster, Maintenance        |
//! | [`rest`]      | the Kubernetes REST API: a second face of the cluster API           |
//! | [`server`]    | serving a member: client, peer, API and metrics listeners           |
//! | [`tls`]       | TLS on client and peer URLs with etcd's flags, certificate reload   |
//! | [`client_port`]| HTTP health and metrics routes beside gRPC on the client URLs       |
//! | [`member`]    | a running member: proposals, ReadIndex reads, leases, membership    |
//! | [`metrics`]   | etcd's metric names: fsync, commit, peer RTT, gRPC codes            |
//! | [`proposer`]  | group commit: transactions arriving together become one log entry  |
//! | [`read_index`]| shared ReadIndex rounds for linearizable reads and keep-alives      |
//! | [`reconfig`]  | checks on membership changes: peer URLs, strict reconfiguration     |

pub mod access;
pub mod auth;
pub mod backend;
pub mod backup;
pub mod client_port;
pub mod cluster;
pub mod command;
pub mod compaction;
pub mod error;
pub mod etcd;
pub mod fuzz;
pub mod key_index;
pub mod member;
pub mod metrics;
pub mod mvcc;
pub mod proposer;
pub mod raft;
pub mod read_index;
pub mod reconfig;
pub mod rest;
pub mod revision;
pub mod server;
pub mod tls;
pub mod watch;

/// Locks `m`, taking over a lock that a panicking thread left poisoned: what it guards is
/// kept consistent between statements, and a panic elsewhere must not stop the member.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
