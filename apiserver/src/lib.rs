//! Skiff's Kubernetes API server: the typed cluster API (gRPC, for Skiff's own components) and
//! the Kubernetes REST API (kubectl and every client library), with authentication, RBAC and
//! the node authorizer, admission, pod security, audit, and the allocation of pod networks,
//! Service IPs and node ports. It keeps its objects in a store under
//! `/registry/<plural>/<namespace>/<name>`, as kube-apiserver keeps them in etcd; the store
//! knows nothing of them.
//!
//! | module       | what                                                                  |
//! |--------------|-----------------------------------------------------------------------|
//! | [`cluster`]  | the typed cluster API: objects, admission, batch Bind, watches       |
//! | [`access`]   | authentication (certificates, tokens), RBAC, the node authorizer, audit |
//! | [`rest`]     | the Kubernetes REST API: a second face of the cluster API             |
//! | [`listener`] | the REST API's listeners: connections with what they know of their client |
//! | [`server`]   | serving the API server in a store member's process                    |
//! | [`standalone`] | serving it on its own, over any etcd (`skiff apiserver`)            |
//! | [`fuzz`]     | fuzz targets of the decoders that face the network                    |

pub mod access;
pub mod cluster;
pub mod fuzz;
pub mod listener;
pub mod rest;
pub mod server;
pub mod standalone;
