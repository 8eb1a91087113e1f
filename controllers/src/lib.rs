//! The controller manager: the loops that keep the cluster as its objects say.
//!
//! ```text
//!  informers (pods, replicasets, deployments, nodes, ...) ──► caches ──► event handlers
//!                                                              │ keys
//!          ┌───────────────────────────┬───────────────────────┘
//!          ▼                           ▼
//!   ReplicaSet queue ─► workers    Deployment queue ─► workers    GC queue ─► workers
//!   (pods: slow-start creates,     (ReplicaSets: rolling update,   (dependents of
//!    ranked deletes, status)        Recreate, history, status)      deleted owners)
//! ```
//!
//! Every controller is a queue of object keys and N workers that *sync* a key: read the
//! object and what it owns from the caches, write what differs to the store, and say
//! whether to look again later. A sync never trusts an event's payload, only the caches, so
//! a missed or repeated event costs a sync, never a wrong decision. Updates carry the
//! resourceVersion they were decided on, so a decision made on a stale cache fails with a
//! conflict and is made again on fresh data (pod deletes do not: a pod chosen to go goes
//! whatever changed in it). Every write is fenced by the leadership, so a deposed leader's
//! writes fail.
//!
//! The modules, from the one that starts the controllers down to what they all build on:
//!
//! | module         | what                                                               |
//! |----------------|--------------------------------------------------------------------|
//! | [`manager`]    | [`Config`], [`Error`](manager::Error), [`run`]: leadership, informers, workers |
//! | [`replicaset`] | the ReplicaSet controller and its pure plan                        |
//! | [`deployment`] | the Deployment controller and its pure rollout plan                |
//! | [`job`]        | Jobs: pods to their completions, indexed or not; back-off, failure policy, deadline, suspend, TTL |
//! | [`cronjob`]    | CronJobs: a Job each time the schedule fires, in its time zone; concurrency, deadline, history |
//! | [`daemonset`]  | DaemonSets: a pod on each node that should run one; rolling updates within maxUnavailable and maxSurge |
//! | [`gc`]         | the garbage collector: ownerless objects, foreground and orphan deletes |
//! | [`nodelifecycle`] | silent nodes: `Ready=Unknown`, taints, evictions per toleration |
//! | [`endpointslice`] | each selecting Service's pods' addresses, in EndpointSlices of 100 |
//! | [`resourcequota`] | each quota's `status.used`: what its namespace's objects count toward it |
//! | [`disruption`] | each PodDisruptionBudget's status: expected and healthy pods, disruptions allowed |
//! | [`namespace`] | a deleted namespace: its contents deleted, then the namespace finalized |
//! | [`serviceaccount`] | a `default` ServiceAccount in every namespace |
//! | [`rootca`]     | the CA of the API server in every namespace (`kube-root-ca.crt`) |
//! | [`certificates`] | certificate requests: nodes' approved, approved ones signed, old ones removed |
//! | [`discovery`] | the kinds served now, custom ones (from the CRDs stored) included |
//! | [`core`]       | what every controller shares: [`Context`](core::Context), the [`Controller`](core::Controller) trait, queue keys |
//! | [`queue`]      | the work queue: de-duplicated keys, per-key back-off, delayed adds |
//! | [`cache`]      | the shared caches, indexed by owner                                 |
//! | [`history`]    | a DaemonSet's or StatefulSet's templates as ControllerRevisions    |
//! | [`podcontrol`] | creating and deleting a workload's pods, with expectations and events; a declared kind's status |
//! | [`pods`]       | active, ready, available; the order pods are given up in           |
//! | `metrics`      | `/metrics`: queue depth, sync latency and errors per controller    |

pub mod cache;
pub mod certificates;
pub mod core;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod discovery;
pub mod disruption;
pub mod endpointslice;
pub mod gc;
pub mod history;
pub mod job;
pub mod manager;
mod metrics;
pub mod namespace;
pub mod nodelifecycle;
pub mod podcontrol;
pub mod pods;
pub mod provisioner;
pub mod queue;
pub mod replicaset;
pub mod resourcequota;
pub mod rootca;
pub mod serviceaccount;
pub mod statefulset;

pub use manager::{Config, run};
