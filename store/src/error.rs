//! Store errors, with the gRPC codes and messages etcd uses: clients (etcdctl, the Go and Rust
//! clients) match on them, so they are part of the wire API.

use serde::{Deserialize, Serialize};
use tonic::{Code, Status};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum StoreError {
    #[error("etcdserver: mvcc: required revision has been compacted")]
    Compacted { compacted: i64 },
    #[error("etcdserver: mvcc: required revision is a future revision")]
    FutureRevision,
    #[error("etcdserver: key is not provided")]
    EmptyKey,
    #[error("etcdserver: key not found")]
    KeyNotFound,
    #[error("etcdserver: value is provided")]
    ValueProvided,
    #[error("etcdserver: lease is provided")]
    LeaseProvided,
    #[error("etcdserver: too many operations in txn request")]
    TooManyOps,
    #[error("etcdserver: duplicate key given in txn request")]
    DuplicateKey,
    #[error("etcdserver: request is too large")]
    RequestTooLarge,
    #[error("etcdserver: mvcc: database space exceeded")]
    NoSpace,
    /// The CORRUPT alarm is raised: no writes until it is disarmed.
    #[error("etcdserver: corrupt cluster")]
    Corrupt,
    #[error("etcdserver: requested lease not found")]
    LeaseNotFound,
    #[error("etcdserver: lease already exists")]
    LeaseExists,
    #[error("etcdserver: too large lease TTL")]
    LeaseTtlTooLarge,
    #[error("etcdserver: member not found")]
    MemberNotFound,
    #[error("etcdserver: member ID already exist")]
    MemberExists,
    #[error("etcdserver: Peer URLs already exists")]
    PeerUrlExists,
    #[error("etcdserver: can only promote a learner member")]
    MemberNotLearner,
    #[error("etcdserver: re-configuration failed due to not enough started members")]
    NotEnoughStartedMembers,
    #[error("etcdserver: no leader")]
    NoLeader,
    /// MoveLeader to a member that is not a voter (or not a member).
    #[error("etcdserver: bad leader transferee")]
    BadLeaderTransferee,
    #[error("etcdserver: request timed out, leader transfer took too long")]
    LeaderTransferTimeout,
    #[error("etcdserver: request timed out")]
    Timeout,
    /// The leader changed while a write waited, and whether it was applied cannot be known.
    #[error("etcdserver: leader changed")]
    LeaderChanged,
    #[error("etcdserver: server stopped")]
    Stopped,
    #[error("etcdserver: {0}")]
    Invalid(String),
    #[error("etcdserver: {0}")]
    Internal(String),
    /// Another etcd this process is a client of (an API server's, see `crate::remote`) could
    /// not be reached, or did not answer in time.
    #[error("etcd unavailable: {0}")]
    Unreachable(String),
    /// A MemberAdd or MemberUpdate whose peer URLs are missing or not `http://host:port`.
    #[error("etcdserver: given member URLs are invalid")]
    MemberBadUrls,
    /// A membership change refused because too few members are reachable for it to be safe.
    #[error("etcdserver: unhealthy cluster")]
    Unhealthy,
    #[error("etcdserver: root user does not exist")]
    RootUserNotExist,
    #[error("etcdserver: root user does not have root role")]
    RootRoleNotExist,
    #[error("etcdserver: user name already exists")]
    UserAlreadyExist,
    #[error("etcdserver: user name is empty")]
    UserEmpty,
    #[error("etcdserver: user name not found")]
    UserNotFound,
    #[error("etcdserver: role name already exists")]
    RoleAlreadyExist,
    #[error("etcdserver: role name not found")]
    RoleNotFound,
    #[error("etcdserver: role name is empty")]
    RoleEmpty,
    #[error("etcdserver: authentication failed, invalid user ID or password")]
    AuthFailed,
    #[error("etcdserver: permission denied")]
    PermissionDenied,
    #[error("etcdserver: role is not granted to the user")]
    RoleNotGranted,
    #[error("etcdserver: permission is not granted to the role")]
    PermissionNotGranted,
    #[error("etcdserver: authentication is not enabled")]
    AuthNotEnabled,
    #[error("etcdserver: invalid auth token")]
    InvalidAuthToken,
    #[error("etcdserver: invalid auth management")]
    InvalidAuthMgmt,
    /// The auth state changed between checking a write and applying it: the client
    /// authenticates again (etcd's clients do) and retries.
    #[error("etcdserver: revision of auth store is old")]
    AuthOldRevision,
}

impl StoreError {
    pub fn code(&self) -> Code {
        use StoreError::*;
        match self {
            Compacted { .. } | FutureRevision | LeaseTtlTooLarge => Code::OutOfRange,
            EmptyKey | KeyNotFound | ValueProvided | LeaseProvided | TooManyOps | DuplicateKey
            | RequestTooLarge | MemberBadUrls | Invalid(_) | UserEmpty | RoleEmpty | AuthFailed
            | InvalidAuthMgmt | AuthOldRevision => Code::InvalidArgument,
            PermissionDenied => Code::PermissionDenied,
            InvalidAuthToken => Code::Unauthenticated,
            RootUserNotExist | RootRoleNotExist | UserAlreadyExist | UserNotFound
            | RoleAlreadyExist | RoleNotFound | RoleNotGranted | PermissionNotGranted
            | AuthNotEnabled => Code::FailedPrecondition,
            NoSpace => Code::ResourceExhausted,
            Corrupt => Code::DataLoss,
            LeaseNotFound | MemberNotFound => Code::NotFound,
            LeaseExists
            | MemberExists
            | PeerUrlExists
            | MemberNotLearner
            | BadLeaderTransferee
            | NotEnoughStartedMembers => Code::FailedPrecondition,
            NoLeader
            | Timeout
            | LeaderTransferTimeout
            | LeaderChanged
            | Stopped
            | Unhealthy
            | Unreachable(_) => Code::Unavailable,
            Internal(_) => Code::Internal,
        }
    }

    pub fn internal(e: impl std::fmt::Display) -> Self {
        StoreError::Internal(e.to_string())
    }
}

impl From<StoreError> for Status {
    fn from(e: StoreError) -> Status {
        Status::new(e.code(), e.to_string())
    }
}
