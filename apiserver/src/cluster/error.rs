//! The cluster API's errors, mapped to gRPC status in one place (`From<ClusterError> for
//! Status`). Codes and messages are part of the wire API: they follow kube-apiserver's
//! wording (`pods "web-1" not found`, `... is forbidden: ...`), and clients match on the
//! codes (the informer relists on `FailedPrecondition`, the agent retries on `Aborted`).

use skiff_proto::api::object::DecodeError;
use skiff_proto::api::vocabulary::UnsupportedValue;
use skiff_proto::api::{Kind, SchemaError, ValidationErrors};
use skiff_proto::selector::SelectorError;
use tonic::{Code, Status};

use skiff_store::error::StoreError;

pub type Result<T, E = ClusterError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A request field that must be set is not.
    #[error("{field}: required")]
    Missing { field: &'static str },
    #[error("key.namespace: required for {}", kind.qualified_resource())]
    NamespaceRequired { kind: Kind },
    #[error("unknown kind {kind:?}: expected one of {}", stored_kinds())]
    UnknownKind { kind: String },
    /// A request body that does not decode as its kind (a bad enumerated value included).
    #[error("{} body: {source}", kind.name())]
    Decode {
        kind: Kind,
        #[source]
        source: DecodeError,
    },
    /// A body that Kubernetes' schema refuses: a value of the wrong type, or (under `Strict`
    /// field validation) fields Kubernetes does not have.
    #[error("{} in version \"v1\" cannot be handled as a {}: {source}", kind.name(), kind.name())]
    Schema {
        kind: Kind,
        #[source]
        source: SchemaError,
    },
    #[error("{} \"{name}\" is invalid: {source}", kind.name())]
    Invalid {
        kind: Kind,
        name: String,
        #[source]
        source: ValidationErrors,
    },
    #[error(transparent)]
    Selector(#[from] SelectorError),
    #[error("continue token {token:?} is not one this server issued")]
    BadContinue { token: String },
    #[error("metadata.resourceVersion: invalid value {value:?}")]
    BadResourceVersion { value: String },
    #[error("grace_period_seconds: must not be negative")]
    NegativeGrace,
    #[error("propagationPolicy: {source}")]
    BadPropagation {
        #[source]
        source: UnsupportedValue,
    },
    #[error("Binding objects are created through Bind")]
    CreateBinding,
    /// A fenced write whose leadership key is gone or was taken again.
    #[error("the writer's leadership ({key}) was lost: another leader took over")]
    Fenced { key: String },
    /// An update that changes what may not change.
    #[error("{} \"{name}\" is invalid: {field}: Forbidden: {why}", kind.name())]
    Immutable {
        kind: Kind,
        name: String,
        field: &'static str,
        why: &'static str,
    },
    #[error("{} has no status to update", kind.qualified_resource())]
    NoStatus { kind: Kind },
    #[error("{} has no approval to update", kind.qualified_resource())]
    NoApproval { kind: Kind },
    #[error("{} has no finalize subresource (only namespaces do)", kind.qualified_resource())]
    NoFinalize { kind: Kind },
    #[error("{} \"{name}\" not found", kind.qualified_resource())]
    NotFound { kind: Kind, name: String },
    /// A write pinned to an object's UID found another object under its name.
    #[error(
        "{} \"{name}\" with UID {uid} not found: the name now belongs to UID {stored}",
        kind.qualified_resource()
    )]
    OtherUid {
        kind: Kind,
        name: String,
        uid: String,
        stored: String,
    },
    #[error("{} \"{name}\" already exists", kind.qualified_resource())]
    AlreadyExists { kind: Kind, name: String },
    #[error(
        "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
         please apply your changes to the latest version and try again",
        kind.qualified_resource()
    )]
    Conflict { kind: Kind, name: String },
    /// Refused by admission (a terminating namespace, a LimitRange, a ResourceQuota).
    #[error("{} \"{name}\" is forbidden: {why}", kind.qualified_resource())]
    Forbidden {
        kind: Kind,
        name: String,
        why: String,
    },
    /// An eviction the pod's disruption budget does not allow now: it wants more healthy
    /// pods than it would have (429, to be tried again).
    #[error("Cannot evict pod as it would violate the pod's disruption budget.")]
    BudgetExhausted {
        budget: String,
        desired_healthy: i32,
        current_healthy: i32,
    },
    /// An eviction under a disruption budget whose status is older than its spec: the
    /// disruption controller has not worked it out yet (429, to be tried again).
    #[error("Cannot evict pod as it would violate the pod's disruption budget.")]
    BudgetUnobserved { budget: String },
    /// An eviction of a pod that more than one disruption budget selects.
    #[error(
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does \
         not support."
    )]
    MultipleBudgets { pod: String },
    /// A delete (an eviction's) whose `preconditions.uid` is not the object's.
    #[error(
        "Operation cannot be fulfilled on {} \"{name}\": the UID in the precondition ({given}) \
         does not match the UID in record ({stored}). The object might have been deleted and \
         then recreated",
        kind.qualified_resource()
    )]
    UidPrecondition {
        kind: Kind,
        name: String,
        given: String,
        stored: String,
    },
    /// A delete of a namespace whose deletion is already under way.
    #[error(
        "Operation cannot be fulfilled on namespaces \"{name}\": The system is ensuring all \
         content is removed from this namespace.  Upon completion, this namespace will \
         automatically be purged by the system."
    )]
    NamespaceTerminating { name: String },
    /// Quota guards kept losing races with other writers.
    #[error(
        "{} \"{name}\": too many concurrent changes in its namespace, try again",
        kind.qualified_resource()
    )]
    Contended { kind: Kind, name: String },
    #[error(
        "too old resource version: {resource_version} (compacted at {compacted}); relist and \
         watch from the list's resourceVersion"
    )]
    TooOld {
        resource_version: i64,
        compacted: i64,
    },
    #[error("Too large resource version: {resource_version}, current: {current}")]
    FutureRevision { resource_version: i64, current: i64 },
    /// The watch hub could not serve a watcher (its catch-up read failed): relist and watch
    /// again.
    #[error("{reason}")]
    WatchCanceled { reason: String },
    #[error("watch refused: {reason}")]
    WatchRefused { reason: String },
    #[error("delete of {key} at revision {revision} without its previous state")]
    DeleteWithoutPrevious { key: String, revision: i64 },
    #[error("stored {} at {key} does not decode: {source}", kind.name())]
    Stored {
        kind: Kind,
        key: String,
        #[source]
        source: DecodeError,
    },
    /// NodeRestriction's refusal of a token a node asks for (not bound to a pod of its
    /// own): PERMISSION_DENIED, as kube-apiserver's 403, so an agent tries again as it does
    /// after any refusal an administrator (or a binding on its way) may lift.
    #[error("{} \"{name}\" is forbidden: {why}", kind.qualified_resource())]
    NodeRestricted {
        kind: Kind,
        name: String,
        why: &'static str,
    },
    /// A token asked of a server without a signing key (`--service-account-signing-key-file`).
    #[error(
        "this API server issues no service account tokens (no --service-account-signing-key-file)"
    )]
    NoTokenIssuer,
    /// A TokenRequest that asks for what may not be issued (a lifetime out of bounds).
    #[error("TokenRequest.authentication.k8s.io is invalid: {field}: {why}")]
    InvalidTokenRequest { field: &'static str, why: String },
    /// A token's bound object named by a uid that is not the stored object's.
    #[error(
        "the UID in the bound object reference ({asked}) does not match the UID in record \
         ({stored}); the object might have been deleted and then recreated"
    )]
    BoundUidMismatch { asked: String, stored: String },
    /// A token bound to a pod that runs as another service account.
    #[error(
        "cannot bind token for serviceaccount {service_account:?} to pod running with different \
         serviceaccount name."
    )]
    TokenAccountMismatch { service_account: String },
    #[error("signing the token failed")]
    TokenSigning,
    /// No user: credentials that are wrong, or none where anonymous requests are off.
    #[error(transparent)]
    Unauthorized(#[from] crate::access::Unauthorized),
    /// The user may not do this (authorization; [`ClusterError::Forbidden`] is admission's).
    #[error(transparent)]
    Denied(Box<crate::access::Forbidden>),
    /// The keyspace, Raft or leases below: etcd's codes and messages.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ClusterError {
    /// The error about an object created with `generateName`, naming the prefix the client
    /// sent rather than the name tried (as kube-apiserver does), so the same refusal reads
    /// the same every time.
    pub fn naming(self, requested: &str) -> ClusterError {
        let requested = requested.to_owned();
        match self {
            ClusterError::Invalid { kind, source, .. } => ClusterError::Invalid {
                kind,
                name: requested,
                source,
            },
            ClusterError::Forbidden { kind, why, .. } => ClusterError::Forbidden {
                kind,
                name: requested,
                why,
            },
            other => other,
        }
    }

    pub fn code(&self) -> Code {
        use ClusterError::*;
        match self {
            Missing { .. }
            | NamespaceRequired { .. }
            | UnknownKind { .. }
            | Decode { .. }
            | Schema { .. }
            | Invalid { .. }
            | Selector(_)
            | BadContinue { .. }
            | BadResourceVersion { .. }
            | NegativeGrace
            | BadPropagation { .. }
            | CreateBinding
            | Immutable { .. }
            | NoStatus { .. }
            | NoApproval { .. }
            | NoFinalize { .. }
            | InvalidTokenRequest { .. }
            | TokenAccountMismatch { .. } => Code::InvalidArgument,
            NotFound { .. } | OtherUid { .. } => Code::NotFound,
            AlreadyExists { .. } => Code::AlreadyExists,
            Conflict { .. } | BoundUidMismatch { .. } => Code::Aborted,
            BudgetExhausted { .. } | BudgetUnobserved { .. } => Code::ResourceExhausted,
            MultipleBudgets { .. } | UidPrecondition { .. } => Code::FailedPrecondition,
            Forbidden { .. }
            | NamespaceTerminating { .. }
            | TooOld { .. }
            | Fenced { .. }
            | NoTokenIssuer => Code::FailedPrecondition,
            Contended { .. } | WatchCanceled { .. } | FutureRevision { .. } => Code::Unavailable,
            WatchRefused { .. } | DeleteWithoutPrevious { .. } | Stored { .. } | TokenSigning => {
                Code::Internal
            }
            Unauthorized(_) => Code::Unauthenticated,
            Denied(_) | NodeRestricted { .. } => Code::PermissionDenied,
            Store(e) => e.code(),
        }
    }
}

impl From<ClusterError> for Status {
    fn from(e: ClusterError) -> Status {
        match e {
            ClusterError::Store(e) => e.into(),
            e => Status::new(e.code(), e.to_string()),
        }
    }
}

/// The kinds the cluster API stores, by name.
fn stored_kinds() -> String {
    Kind::all()
        .filter(|k| k.is_stored())
        .map(Kind::name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Clients see the codes and words they saw when these were built inline.
    #[test]
    fn codes_and_messages() {
        let s = Status::from(ClusterError::NotFound {
            kind: Kind::Pod,
            name: "web-1".into(),
        });
        assert_eq!(
            (s.code(), s.message()),
            (Code::NotFound, "pods \"web-1\" not found")
        );
        let s = Status::from(ClusterError::TooOld {
            resource_version: 3,
            compacted: 9,
        });
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert_eq!(
            s.message(),
            "too old resource version: 3 (compacted at 9); relist and watch from the list's resourceVersion"
        );
        let s = Status::from(ClusterError::Store(StoreError::NoLeader));
        assert_eq!(
            (s.code(), s.message()),
            (Code::Unavailable, "etcdserver: no leader")
        );
    }
}
