//! The Skiff node agent: registers its Node, heartbeats, watches the pods bound to it and runs
//! each through a per-pod state machine against a container runtime — containerd's CRI for
//! real workloads, or a simulated runtime that lets one process host thousands of nodes.
//!
//! | module        | what                                                                   |
//! |---------------|------------------------------------------------------------------------|
//! | [`runtime`]   | the `Runtime` trait (CRI-shaped: sandbox, containers, stop, logs, exec, sessions)|
//! | [`sim`]       | the simulated runtime: in-memory containers on tokio's clock           |
//! | [`cri`]       | the CRI runtime: containerd's CRI plugin over its unix socket          |
//! | [`image`]     | the busybox and pause images as OCI archives, built from busybox-static|
//! | [`admission`] | node-side admission: resources, pod count, node selector, taints       |
//! | [`engine`]    | one pod's lifecycle as a pure state machine (inputs in, actions out); its rooms: `spec`, `container`, `stop`, `status` |
//! | [`worker`]    | the async loop that performs an engine's actions                       |
//! | [`events`]    | the kubelet's events (Pulled, Started, Killing, BackOff, …) from a worker |
//! | [`status`]    | the coalescing, retrying pod status writer                             |
//! | [`agent`]     | Node registration, heartbeat, the pod watch, reconcile on restart      |
//! | [`cni`]       | the node's pod network: the CNI configuration containerd runs pods with |
//! | [`dns`]       | cluster DNS on each node: Services' names to their cluster IPs (or endpoints) |
//! | [`services`]  | the Services and EndpointSlices a node follows, for rules and DNS        |
//! | [`proxy`]     | Service rules (kube-proxy's iptables mode): cluster IPs and node ports to ready endpoints |
//! | [`routes`]    | routes between the nodes' pod networks (host-gw) and pod masquerade    |
//! | [`netns`]     | connections into the node's network namespace (probes, sessions)      |
//! | [`bootstrap`] | joining with a bootstrap token: a key, a CSR, the certificate it gets  |
//! | [`logs`]      | the agent's gRPC log service (`skiff node logs`, `pods/log`)           |
//! | [`sessions`]  | the agent's exec and attach sessions (`pods/exec`, `pods/attach`)      |
//! | [`metrics`]   | what the agent counts, and the process's `/metrics` and `/healthz`      |

pub mod admission;
pub mod agent;
pub mod bootstrap;
pub mod cni;
pub mod cri;
pub mod dns;
pub mod engine;
pub mod events;
pub mod guard;
pub mod image;
pub mod logs;
pub mod metrics;
pub mod netns;
pub mod proxy;
pub mod routes;
pub mod runtime;
pub mod security;
pub mod services;
pub mod sessions;
pub mod sim;
pub mod status;
pub mod volumes;
pub mod worker;

/// Runs `task` until `cancel`, as a supervisor would: when it fails, the error is logged
/// naming `what`, and it starts again 5 s later. For the node's background services (cluster
/// DNS, Service rules, pod network routes), which no single failure may end for good.
pub fn supervise<F, Fut, E>(
    what: &'static str,
    cancel: tokio_util::sync::CancellationToken,
    mut task: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: std::fmt::Display + Send,
{
    tokio::spawn(async move {
        loop {
            match task().await {
                Ok(()) => break,
                Err(e) => {
                    tracing::error!(error = %e, "{what} stopped; starting again in 5s");
                    tokio::select! {
                        () = cancel.cancelled() => break,
                        () = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
                    }
                }
            }
        }
    })
}
