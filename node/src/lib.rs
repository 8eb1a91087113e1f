//! The Skiff node agent: registers its Node, heartbeats with a lease, watches the pods bound to
//! it and runs each through a per-pod state machine against a container runtime — containerd's
//! CRI for real workloads, or a simulated runtime that lets one process host thousands of nodes.
