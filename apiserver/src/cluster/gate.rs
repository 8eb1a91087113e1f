//! The API server's gate over the client URLs' gRPC calls, when it runs in a store member's
//! process (see [`CallGate`]).
//!
//! Under Kubernetes RBAC the etcd services are the cluster's back end, as etcd is behind
//! kube-apiserver: a call to one is a request for the path that names it
//! (`/etcdserverpb.KV/Range`, verb `post`), made by the user its client certificate names,
//! and refused (PERMISSION_DENIED) unless a ClusterRole grants that path. `cluster-admin`
//! grants every path; the scheduler and the controller manager hold their leadership keys
//! through KV, Lease and Watch; node agents get none of it.
//!
//! Calls of the cluster API go to the audit log, when one is kept: the handler says who asked
//! what through a [`Slot`] left in the call's extensions, and the event is written when the
//! call has ended.

use tonic::codegen::http;

use super::ClusterApi;
use crate::access::Attributes;
use crate::access::audit::{AuditLog, Level, Record, Slot, http_code};
use skiff_store::client_port::{CallDone, CallGate};
use skiff_store::tls::ConnInfo;

/// RBAC over the etcd services, and the audit log of the cluster API's calls.
#[derive(Debug, Clone)]
pub struct ApiGate {
    api: ClusterApi,
}

impl ApiGate {
    /// The gate `api`'s access rules call for: none when they neither authorize the etcd
    /// services (no RBAC) nor keep an audit log.
    pub fn new(api: &ClusterApi) -> Option<ApiGate> {
        (api.access.config.rbac() || api.access.audit.is_some())
            .then(|| ApiGate { api: api.clone() })
    }
}

impl CallGate for ApiGate {
    fn admit(
        &self,
        path: &str,
        headers: &http::HeaderMap,
        extensions: &mut http::Extensions,
    ) -> Result<Option<CallDone>, tonic::Status> {
        if self.api.access.config.rbac() {
            etcd_gate(&self.api, path, extensions.get())?;
        }
        if self.api.access.audit.is_none() || !path.starts_with(CLUSTER_API) {
            return Ok(None);
        }
        let slot = Slot::default();
        extensions.insert(slot.clone());
        let conn = extensions.get::<ConnInfo>();
        let pending = Pending {
            api: self.api.clone(),
            slot,
            uri: path.to_owned(),
            source_ip: conn
                .and_then(|c| c.tcp.remote_addr())
                .map(|a| a.ip().to_string()),
            user_agent: headers
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned(),
            received: chrono::Utc::now(),
        };
        Ok(Some(Box::new(move |code| pending.done(code))))
    }
}

/// Whether the etcd service call at `path` may be made on `conn`; the status to answer if not.
fn etcd_gate(api: &ClusterApi, path: &str, conn: Option<&ConnInfo>) -> Result<(), tonic::Status> {
    if !path.starts_with("/etcdserverpb.") {
        return Ok(());
    }
    let user = api
        .access
        .authenticate(None, conn.and_then(|c| c.client.as_ref()), api)
        .map_err(|e| tonic::Status::unauthenticated(e.to_string()))?;
    api.authorize(&user, Attributes::path("post", path))
        .map_err(|e| tonic::Status::permission_denied(e.to_string()))
}

/// The path prefix of the cluster API's calls.
const CLUSTER_API: &str = "/skiff.cluster.v1.Cluster/";

/// A cluster API call on its way, for the audit log.
struct Pending {
    api: ClusterApi,
    slot: Slot,
    uri: String,
    source_ip: Option<String>,
    user_agent: String,
    received: chrono::DateTime<chrono::Utc>,
}

impl Pending {
    /// Writes the call's event, at the level the policy gives who asked what; a call that
    /// ended before its handler knew either (it did not decode, its credentials were
    /// wrong) is written as a path.
    fn done(self, code: tonic::Code) {
        let Some(log) = self.api.access.audit.as_ref() else {
            return;
        };
        let asked = self.slot.take();
        let (user, attributes, allowed) = match asked {
            Some(a) => (a.user, a.attributes, Some(a.allowed)),
            None => (
                crate::access::User {
                    name: String::new(),
                    uid: String::new(),
                    groups: Vec::new(),
                },
                Attributes::path("post", &self.uri),
                None,
            ),
        };
        let level = log.policy.level(&user, &attributes);
        if level == Level::None {
            return;
        }
        log.record(&Record {
            level,
            id: AuditLog::new_id(),
            uri: self.uri,
            user,
            impersonated: None,
            source_ip: self.source_ip,
            user_agent: self.user_agent,
            attributes,
            decision: allowed.map(|a| if a { "allow" } else { "forbid" }),
            code: http_code(code),
            received: self.received,
            done: chrono::Utc::now(),
            request_object: None,
            response_object: None,
        });
    }
}
