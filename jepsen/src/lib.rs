//! Skiff's fault-injection harness: a real store cluster in network namespaces, nemeses
//! (partitions, kills, pauses, membership changes), workloads with their histories, and the
//! linearizability and watch checkers that judge them.
