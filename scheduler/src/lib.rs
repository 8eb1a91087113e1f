//! The Skiff scheduler: an informer-fed cache of nodes and pods, a structure-of-arrays node
//! table, vectorised filter and score kernels over all nodes, parallel optimistic workers and a
//! batch binder that commits placements through the cluster API's batch Bind.
//!
//! | module      | what                                                                      |
//! |-------------|---------------------------------------------------------------------------|
//! | [`bench`]   | the in-process benchmark: synthetic workload through the whole pipeline  |
//! | [`model`]   | the scheduling-relevant view of a Pod / Node, and a pod's signature       |
//! | [`table`]   | the node table (structure of arrays), pod accounting, term counts         |
//! | [`kernels`] | the vectorised loops, dispatched at run time (AVX-512 / AVX2 / baseline)  |
//! | [`filter`]  | feasibility bitmaps, the per-node check, FailedScheduling diagnoses       |
//! | [`engine`]  | one batch of same-signature pods: filter once, score, place one by one    |
//! | [`queue`]   | the pending pods, one owner: signature batches, back-off, retries         |
//! | [`parallel`]| workers scheduling batches optimistically, one committer re-checking them |
//! | [`preemption`]| victims of lower priority for a pod that fits nowhere, as kube-scheduler picks them |
//! | [`service`] | the scheduler against a store: informers, binder, status, `/metrics`     |
//! | [`synth`]   | synthetic clusters and workloads (the benchmark's profiles)               |
//! | [`reference`]| the plain, slow scheduler the property tests hold the engine to          |

pub mod bench;
pub mod engine;
pub mod filter;
pub mod kernels;
pub mod model;
pub mod parallel;
pub mod preemption;
pub mod queue;
pub mod reference;
pub mod service;
pub mod synth;
pub mod table;
