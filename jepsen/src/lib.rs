//! Skiff's fault-injection harness: a real store cluster in network namespaces, nemeses
//! (partitions, kills, pauses, membership changes), workloads with their histories, and the
//! linearizability and watch checkers that judge them.
//!
//! | module | what lives there |
//! |---|---|
//! | [`history`] | operations (invoke / ok / fail / info) as JSON Lines; the recorder |
//! | [`checker`] | pure checkers: linearizability (WGL), set, watch, lease, revision order |
//! | [`sandbox`] | re-exec inside `unshare --net --mount --pid` so nothing leaks to the host |
//! | [`network`] | bridge, one namespace per member, iptables grudges and packet loss |
//! | [`cluster`] | the `skiff store` processes: start, kill -9, restart, pause, remove / add |
//! | [`nemesis`] | the seeded fault schedule |
//! | [`workload`] | register, set, watch, lease clients over the etcd v3 API |
//! | [`report`] | results.json, latency and throughput plots, HTML timeline |
//! | [`run`] | one run end to end, and campaigns of seeded runs |
//!
//! The checkers never touch the network: they are tested on hand-made and generated
//! histories with planted anomalies, so a green run means the checkers looked, not that
//! they could not see.

pub mod checker;
pub mod cluster;
pub mod history;
pub mod nemesis;
pub mod network;
pub mod report;
pub mod run;
pub mod sandbox;
pub mod workload;
