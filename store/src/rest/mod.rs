//! The Kubernetes REST API: what kubectl, client-go, kube-rs and the Python client speak,
//! served by every member beside the etcd and cluster APIs. It is a second face of the
//! cluster API ([`crate::cluster::ClusterApi`]): the same decoding, defaulting, validation,
//! admission, compare-and-swap writes and watch hub, with Kubernetes' paths, verbs, query
//! parameters, content types and `metav1.Status` errors on top.
//!
//! | module        | what                                                              |
//! |---------------|-------------------------------------------------------------------|
//! | [`discovery`] | the served resources, their verbs and subresources; `/api`, `/apis` |
//! | [`openapi`]   | `/openapi/v3` documents generated from Kubernetes' schema         |
//! | [`patch`]     | JSON patch, JSON merge patch and strategic merge patch            |
//! | [`table`]     | server-side printing: `meta.k8s.io/v1` Tables with kubectl's columns |

pub mod discovery;
pub mod openapi;
pub mod patch;
pub mod table;
