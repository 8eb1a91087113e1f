//! The Skiff scheduler: an informer-fed cache of nodes and pods, a structure-of-arrays node
//! table, vectorised filter and score kernels over all nodes, parallel optimistic workers and a
//! batch binder that commits placements through the cluster API's batch Bind.
