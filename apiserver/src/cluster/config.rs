//! The API server's settings that are not access rules: what kube-apiserver and
//! kube-controller-manager take as flags and Skiff's API server applies as it writes.

use std::time::Duration;

use super::addresses::ServiceRanges;
use super::ipam::PodCidrs;

/// How the API server writes what it allocates and what expires.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// How long an Event object lives after its last write, under a lease (`--event-ttl`).
    pub event_ttl: Duration,
    /// The pod network cut into node blocks given at registration (`--cluster-cidr`,
    /// `--node-cidr-mask-size`); none: Nodes get no block.
    pub pod_cidrs: Option<PodCidrs>,
    /// Where Services' cluster IPs and node ports come from (`--service-cluster-ip-range`,
    /// `--service-node-port-range`).
    pub services: ServiceRanges,
    /// Where pods reach this member's Kubernetes API (`--advertise-address`): its address
    /// among the `kubernetes` Service's endpoints; none: it lists none.
    pub advertise: Option<std::net::SocketAddr>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            event_ttl: Duration::from_secs(3600),
            pod_cidrs: None,
            services: ServiceRanges::default(),
            advertise: None,
        }
    }
}
