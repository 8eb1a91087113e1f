//! What the agent counts, for `/metrics`, and the process's one `/metrics` + `/healthz`
//! server. A process may host thousands of simulated nodes: the figures are totals over all
//! of them (no per-node series), and there is one endpoint per process, never one per node.

use std::sync::Arc;

use skiff_proto::metrics::prometheus_client::metrics::counter::Counter;
use skiff_proto::metrics::prometheus_client::metrics::family::Family;
use skiff_proto::metrics::prometheus_client::metrics::gauge::Gauge;
use skiff_proto::metrics::{self, Registry};
use tokio_util::sync::CancellationToken;

/// A label set naming one runtime (CRI) call.
type CallLabel = [(&'static str, &'static str); 1];

/// The agent's counters and gauges. Cheap to clone: clones count into the same metrics.
#[derive(Debug, Clone, Default)]
pub struct AgentMetrics {
    /// Nodes registered and heartbeating.
    pub nodes: Gauge,
    /// Pods with a worker that have not finished (not Succeeded or Failed).
    pub pods_active: Gauge,
    pub container_starts: Counter,
    pub container_exits: Counter,
    /// Containers (or images) entering a back-off: `CrashLoopBackOff`, `ImagePullBackOff`.
    pub back_offs: Counter,
    pub probe_failures: Counter,
    runtime_errors: Family<CallLabel, Counter>,
    pub heartbeats: Counter,
    pub heartbeat_failures: Counter,
    /// The Service proxy's (when the process runs one).
    pub proxy: crate::proxy::ProxyMetrics,
}

impl AgentMetrics {
    /// Counts a failed runtime call (`RunPodSandbox`, `StartContainer`, …).
    pub fn runtime_error(&self, call: &'static str) {
        self.runtime_errors.get_or_create(&[("call", call)]).inc();
    }

    /// A registry with these metrics and the process's.
    pub fn registry(&self) -> Registry {
        let mut r = metrics::registry();
        r.register(
            "skiff_node_nodes",
            "Nodes this process hosts that are registered",
            self.nodes.clone(),
        );
        r.register(
            "skiff_node_pods_active",
            "Pods with a worker that have not finished (not Succeeded or Failed)",
            self.pods_active.clone(),
        );
        r.register(
            "skiff_node_container_starts",
            "Containers started",
            self.container_starts.clone(),
        );
        r.register(
            "skiff_node_container_exits",
            "Containers seen to exit",
            self.container_exits.clone(),
        );
        r.register(
            "skiff_node_back_offs",
            "Times a container entered CrashLoopBackOff or ImagePullBackOff",
            self.back_offs.clone(),
        );
        r.register(
            "skiff_node_probe_failures",
            "Liveness, readiness and startup probes that failed",
            self.probe_failures.clone(),
        );
        r.register(
            "skiff_node_runtime_errors",
            "Container runtime calls that failed, by call",
            self.runtime_errors.clone(),
        );
        r.register(
            "skiff_node_heartbeats",
            "Node heartbeats written",
            self.heartbeats.clone(),
        );
        r.register(
            "skiff_node_heartbeat_failures",
            "Node heartbeats the cluster API refused or did not answer",
            self.heartbeat_failures.clone(),
        );
        r.register(
            "skiff_node_network_programming_duration_seconds",
            "From the trigger time of an EndpointSlice change to the Service rules reflecting it",
            self.proxy.programming.clone(),
        );
        r.register(
            "skiff_node_proxy_sync_duration_seconds",
            "How long writing the Service rules took",
            self.proxy.sync.clone(),
        );
        r.register(
            "skiff_node_proxy_service_ports",
            "Service ports the node's rules program",
            self.proxy.service_ports.clone(),
        );
        r.register(
            "skiff_node_proxy_endpoints",
            "Ready endpoints the node's rules send Service connections to",
            self.proxy.endpoints.clone(),
        );
        r
    }
}

/// Serves `/metrics` and `/healthz` (`ok` while the agent runs) on `listener` until `cancel`
/// fires.
pub fn serve(listener: tokio::net::TcpListener, registry: Registry, cancel: CancellationToken) {
    let app = metrics::router(Arc::new(registry))
        .route("/healthz", axum::routing::get(|| async { "ok" }));
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(cancel.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
}
