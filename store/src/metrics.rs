//! The etcd metric names that dashboards and alerts use, kept beside Skiff's own: what a
//! member measures as it happens (fsyncs of the log, backend commits, peer round trips, gRPC
//! calls by code, failed proposals). Figures the member already holds (leader, indexes, sizes)
//! are read when scraped, in `server`.
//!
//! | metric | what it measures here |
//! |---|---|
//! | `etcd_disk_wal_fsync_duration_seconds` | a sync of the Raft log's newest segment under appended entries |
//! | `etcd_disk_backend_commit_duration_seconds` | applying one committed entry to the keyspace, its RocksDB write included |
//! | `etcd_network_peer_round_trip_time_seconds{To}` | an AppendEntries without entries (a heartbeat) to a peer and its answer |
//! | `etcd_server_proposals_failed_total` | proposals on this member that timed out, lost their leader or were dropped |
//! | `grpc_server_handled_total{grpc_type,grpc_service,grpc_method,grpc_code}` | gRPC calls on the client URLs, by how they ended |

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// etcd's label: the peer's member id in hex, under the name `To`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
#[allow(non_snake_case)]
pub struct PeerLabel {
    pub To: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GrpcLabels {
    pub grpc_type: &'static str,
    pub grpc_service: String,
    pub grpc_method: String,
    pub grpc_code: &'static str,
}

type RttFamily = Family<PeerLabel, Histogram, fn() -> Histogram>;

/// What a member counts and times as it runs. Cheap to share: every part is shared.
#[derive(Debug, Clone)]
pub struct StoreMetrics {
    pub wal_fsync: Histogram,
    pub backend_commit: Histogram,
    pub peer_rtt: RttFamily,
    pub proposals_failed: Counter,
    pub grpc_handled: Family<GrpcLabels, Counter>,
    /// Rounds of the corruption check this member completed as leader.
    pub corruption_checks: Counter,
    /// The last committed log index this member knows of (etcd's
    /// `proposals_committed_total`, a gauge despite its name).
    pub committed_index: Arc<AtomicU64>,
}

fn disk_buckets() -> Histogram {
    // etcd's: 1 ms to about 8 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 14))
}

fn rtt_buckets() -> Histogram {
    // etcd's: 0.1 ms to about 3 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

impl Default for StoreMetrics {
    fn default() -> Self {
        StoreMetrics {
            wal_fsync: disk_buckets(),
            backend_commit: disk_buckets(),
            peer_rtt: Family::new_with_constructor(rtt_buckets as fn() -> Histogram),
            proposals_failed: Counter::default(),
            grpc_handled: Family::default(),
            corruption_checks: Counter::default(),
            committed_index: Arc::default(),
        }
    }
}

impl StoreMetrics {
    pub fn committed(&self, index: u64) {
        self.committed_index.fetch_max(index, Ordering::Relaxed);
    }

    pub fn committed_index(&self) -> u64 {
        self.committed_index.load(Ordering::Relaxed)
    }

    /// Registers the metrics kept here in `r`, under etcd's names.
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "etcd_disk_wal_fsync_duration_seconds",
            "The latency distributions of fsync called by WAL",
            self.wal_fsync.clone(),
        );
        r.register(
            "etcd_disk_backend_commit_duration_seconds",
            "The latency distributions of commit called by backend",
            self.backend_commit.clone(),
        );
        r.register(
            "etcd_network_peer_round_trip_time_seconds",
            "Round-Trip-Time histogram between peers",
            self.peer_rtt.clone(),
        );
        r.register(
            "etcd_server_proposals_failed",
            "The total number of failed proposals seen",
            self.proposals_failed.clone(),
        );
        r.register(
            "skiff_store_corruption_checks",
            "Rounds of the corruption check completed by this member as leader",
            self.corruption_checks.clone(),
        );
        r.register(
            "grpc_server_handled",
            "Total number of RPCs completed on the server, regardless of success or failure",
            self.grpc_handled.clone(),
        );
    }
}
