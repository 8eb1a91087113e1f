//! Every etcd v3 method a client can call, how each is called with raw bytes, and how its
//! answer is summed up in a verdict that can be compared between servers: the gRPC code for
//! calls with one answer, and for streams what the first responses said (created, canceled and
//! why, how many events, the lease's TTL).

use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use skiff_proto::etcd::{PbLeaseKeepAliveResponse, PbWatchResponse};

use crate::wire::{Answer, Next, Raw};

/// How a method is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Unary,
    /// One request, a stream of answers (Snapshot): the first answer counts.
    ServerStream,
    /// Watch: requests and answers both streamed.
    Watch,
    /// LeaseKeepAlive: requests and answers both streamed.
    KeepAlive,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Method {
    pub service: &'static str,
    pub name: &'static str,
    pub call: Call,
}

impl Method {
    pub fn path(&self) -> String {
        format!("/etcdserverpb.{}/{}", self.service, self.name)
    }

    pub fn label(&self) -> String {
        format!("{}.{}", self.service, self.name)
    }
}

const fn m(service: &'static str, name: &'static str, call: Call) -> Method {
    Method {
        service,
        name,
        call,
    }
}

pub const RANGE: Method = m("KV", "Range", Call::Unary);
pub const PUT: Method = m("KV", "Put", Call::Unary);
pub const DELETE_RANGE: Method = m("KV", "DeleteRange", Call::Unary);
pub const TXN: Method = m("KV", "Txn", Call::Unary);
pub const COMPACT: Method = m("KV", "Compact", Call::Unary);
pub const WATCH: Method = m("Watch", "Watch", Call::Watch);
pub const LEASE_GRANT: Method = m("Lease", "LeaseGrant", Call::Unary);
pub const LEASE_REVOKE: Method = m("Lease", "LeaseRevoke", Call::Unary);
pub const LEASE_KEEP_ALIVE: Method = m("Lease", "LeaseKeepAlive", Call::KeepAlive);
pub const LEASE_TIME_TO_LIVE: Method = m("Lease", "LeaseTimeToLive", Call::Unary);
pub const LEASE_LEASES: Method = m("Lease", "LeaseLeases", Call::Unary);
pub const MEMBER_ADD: Method = m("Cluster", "MemberAdd", Call::Unary);
pub const MEMBER_REMOVE: Method = m("Cluster", "MemberRemove", Call::Unary);
pub const MEMBER_UPDATE: Method = m("Cluster", "MemberUpdate", Call::Unary);
pub const MEMBER_LIST: Method = m("Cluster", "MemberList", Call::Unary);
pub const MEMBER_PROMOTE: Method = m("Cluster", "MemberPromote", Call::Unary);
pub const ALARM: Method = m("Maintenance", "Alarm", Call::Unary);
pub const STATUS: Method = m("Maintenance", "Status", Call::Unary);
pub const DEFRAGMENT: Method = m("Maintenance", "Defragment", Call::Unary);
pub const HASH: Method = m("Maintenance", "Hash", Call::Unary);
pub const HASH_KV: Method = m("Maintenance", "HashKV", Call::Unary);
pub const SNAPSHOT: Method = m("Maintenance", "Snapshot", Call::ServerStream);
pub const MOVE_LEADER: Method = m("Maintenance", "MoveLeader", Call::Unary);
pub const AUTH_ENABLE: Method = m("Auth", "AuthEnable", Call::Unary);
pub const AUTH_DISABLE: Method = m("Auth", "AuthDisable", Call::Unary);
pub const AUTHENTICATE: Method = m("Auth", "Authenticate", Call::Unary);
pub const USER_ADD: Method = m("Auth", "UserAdd", Call::Unary);
pub const USER_GET: Method = m("Auth", "UserGet", Call::Unary);
pub const USER_LIST: Method = m("Auth", "UserList", Call::Unary);
pub const USER_DELETE: Method = m("Auth", "UserDelete", Call::Unary);
pub const USER_CHANGE_PASSWORD: Method = m("Auth", "UserChangePassword", Call::Unary);
pub const USER_GRANT_ROLE: Method = m("Auth", "UserGrantRole", Call::Unary);
pub const USER_REVOKE_ROLE: Method = m("Auth", "UserRevokeRole", Call::Unary);
pub const ROLE_ADD: Method = m("Auth", "RoleAdd", Call::Unary);
pub const ROLE_GET: Method = m("Auth", "RoleGet", Call::Unary);
pub const ROLE_LIST: Method = m("Auth", "RoleList", Call::Unary);
pub const ROLE_DELETE: Method = m("Auth", "RoleDelete", Call::Unary);
pub const ROLE_GRANT_PERMISSION: Method = m("Auth", "RoleGrantPermission", Call::Unary);
pub const ROLE_REVOKE_PERMISSION: Method = m("Auth", "RoleRevokePermission", Call::Unary);

/// Every method of etcd 3.4's v3 API except RangeStream and Downgrade (not in 3.4).
pub const ALL: &[Method] = &[
    RANGE,
    PUT,
    DELETE_RANGE,
    TXN,
    COMPACT,
    WATCH,
    LEASE_GRANT,
    LEASE_REVOKE,
    LEASE_KEEP_ALIVE,
    LEASE_TIME_TO_LIVE,
    LEASE_LEASES,
    MEMBER_ADD,
    MEMBER_REMOVE,
    MEMBER_UPDATE,
    MEMBER_LIST,
    MEMBER_PROMOTE,
    ALARM,
    STATUS,
    DEFRAGMENT,
    HASH,
    HASH_KV,
    SNAPSHOT,
    MOVE_LEADER,
    AUTH_ENABLE,
    AUTH_DISABLE,
    AUTHENTICATE,
    USER_ADD,
    USER_GET,
    USER_LIST,
    USER_DELETE,
    USER_CHANGE_PASSWORD,
    USER_GRANT_ROLE,
    USER_REVOKE_ROLE,
    ROLE_ADD,
    ROLE_GET,
    ROLE_LIST,
    ROLE_DELETE,
    ROLE_GRANT_PERMISSION,
    ROLE_REVOKE_PERMISSION,
];

/// A stream is read until it stays quiet this long (or ends, or `STREAM_READS` responses came).
const QUIET: Duration = Duration::from_millis(400);
const STREAM_READS: usize = 6;

/// What a server answered to one request.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The status of the call (for streams: how the stream ended, or OK while it stayed open).
    pub answer: Answer,
    /// The comparable summary: the code name for unary calls, the responses for streams.
    pub verdict: String,
    /// Whether any response on a stream was a server fault (INTERNAL/UNKNOWN).
    pub server_fault: bool,
}

/// Sends `bodies` to `method` (a unary call, the first) and sums up the answer.
pub async fn ask_all(raw: &mut Raw, method: Method, bodies: &[Bytes]) -> Outcome {
    let first = bodies.first().cloned().unwrap_or_default();
    match method.call {
        Call::Unary => unary(raw.unary(&method.path(), first).await),
        Call::ServerStream => unary(raw.first_of_stream(&method.path(), first).await),
        Call::Watch | Call::KeepAlive => stream(raw, method, bodies).await,
    }
}

fn unary(answer: Answer) -> Outcome {
    Outcome {
        verdict: answer.code_name(),
        server_fault: answer.is_server_fault() || answer.timed_out,
        answer,
    }
}

async fn stream(raw: &mut Raw, method: Method, bodies: &[Bytes]) -> Outcome {
    let mut s = raw.bidi(&method.path());
    for b in bodies {
        s.send(b.clone()).await;
    }
    let mut parts = Vec::new();
    let mut answer = Answer::ok(Bytes::new());
    for _ in 0..STREAM_READS {
        match s.next(QUIET).await {
            Next::Message(b) => parts.push(describe(method, &b)),
            Next::Ended(a) => {
                parts.push(format!("ended {}", a.code_name()));
                answer = a;
                break;
            }
            Next::Quiet => break,
        }
    }
    if parts.is_empty() {
        parts.push("no response".into());
    }
    Outcome {
        verdict: parts.join(" | "),
        server_fault: answer.is_server_fault(),
        answer,
    }
}

/// One stream response in words.
pub fn describe(method: Method, b: &[u8]) -> String {
    if method.call == Call::KeepAlive {
        return match PbLeaseKeepAliveResponse::decode(b) {
            Ok(r) if r.ttl > 0 => "ttl>0".into(),
            Ok(r) => format!("ttl={}", r.ttl),
            Err(e) => format!("undecodable response: {e}"),
        };
    }
    match PbWatchResponse::decode(b) {
        Ok(r) => watch_response(&r),
        Err(e) => format!("undecodable response: {e}"),
    }
}

pub fn watch_response(r: &PbWatchResponse) -> String {
    let mut words = Vec::new();
    match (r.created, r.canceled) {
        (true, true) => words.push("created+canceled".to_string()),
        (true, false) => words.push("created".into()),
        (false, true) => words.push("canceled".into()),
        (false, false) if r.events.is_empty() => words.push("progress".into()),
        (false, false) => {}
    }
    if !r.cancel_reason.is_empty() {
        words.push(format!("`{}`", r.cancel_reason));
    }
    if r.compact_revision > 0 {
        words.push("compact_revision set".into());
    }
    if !r.events.is_empty() {
        words.push(format!("{} events", r.events.len()));
    }
    words.join(" ")
}
