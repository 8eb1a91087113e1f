//! The requests and responses of etcd's key-value model as the store takes them: ranges,
//! puts, deletes and transactions with compares, and the keys and events they return. The
//! types mirror etcd's `etcdserverpb` and `mvccpb` messages but are our own (serde, no
//! protobuf presence quirks); the etcd service converts at the edge. Byte fields go through
//! `serde_bytes`, so the log encoding copies them whole instead of element by element.
//!
//! They sit below everything that reads or checks a request (the log's [`Command`]s, the
//! auth checks, the keyspace), so none of those needs another to name one.
//!
//! [`Command`]: crate::command::Command

use serde::{Deserialize, Serialize};

/// A key as etcd's `mvccpb.KeyValue` describes it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KeyValue {
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
    pub lease: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change, as a watcher sees it. A delete's `kv` carries the key and the deleting
/// revision only (as in etcd).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub kind: EventKind,
    pub kv: KeyValue,
    pub prev_kv: Option<KeyValue>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum SortOrder {
    #[default]
    None,
    Ascend,
    Descend,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum SortTarget {
    #[default]
    Key,
    Version,
    Create,
    Mod,
    Value,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RangeRequest {
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub range_end: Vec<u8>,
    pub limit: i64,
    /// 0 or negative: the current revision.
    pub revision: i64,
    pub sort_order: SortOrder,
    pub sort_target: SortTarget,
    pub keys_only: bool,
    pub count_only: bool,
    pub min_mod_revision: i64,
    pub max_mod_revision: i64,
    pub min_create_revision: i64,
    pub max_create_revision: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PutRequest {
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
    pub lease: i64,
    pub prev_kv: bool,
    pub ignore_value: bool,
    pub ignore_lease: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DeleteRangeRequest {
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub range_end: Vec<u8>,
    pub prev_kv: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestOp {
    Range(RangeRequest),
    Put(PutRequest),
    DeleteRange(DeleteRangeRequest),
    Txn(TxnRequest),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareResult {
    Equal,
    Greater,
    Less,
    NotEqual,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareTarget {
    Version(i64),
    Create(i64),
    Mod(i64),
    Value(#[serde(with = "serde_bytes")] Vec<u8>),
    Lease(i64),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compare {
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub range_end: Vec<u8>,
    pub result: CompareResult,
    pub target: CompareTarget,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TxnRequest {
    pub compare: Vec<Compare>,
    pub success: Vec<RequestOp>,
    pub failure: Vec<RequestOp>,
    /// For a request through the etcd API: the auth revision its permissions were checked
    /// at. Applied under a newer one, it is refused ([`StoreError::AuthOldRevision`](crate::error::StoreError::AuthOldRevision)). None
    /// for Skiff's own APIs, which etcd's auth does not govern.
    pub auth_revision: Option<u64>,
}

impl TxnRequest {
    /// A transaction of one unconditional operation.
    pub fn single(op: RequestOp) -> Self {
        TxnRequest {
            compare: Vec::new(),
            success: vec![op],
            failure: Vec::new(),
            auth_revision: None,
        }
    }

    /// Whether any branch writes (a read-only transaction can be served without the log).
    pub fn is_read_only(&self) -> bool {
        self.success
            .iter()
            .chain(&self.failure)
            .all(RequestOp::is_read_only)
    }

    /// Operations in the larger branch, counting nested transactions' branches, as etcd's
    /// `--max-txn-ops` counts them (per level).
    pub fn op_count(&self) -> usize {
        self.success.len().max(self.failure.len())
    }
}

impl RequestOp {
    pub fn is_read_only(&self) -> bool {
        match self {
            RequestOp::Range(_) => true,
            RequestOp::Put(_) | RequestOp::DeleteRange(_) => false,
            RequestOp::Txn(t) => t.is_read_only(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RangeResponse {
    pub kvs: Vec<KeyValue>,
    pub more: bool,
    pub count: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PutResponse {
    pub prev_kv: Option<KeyValue>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DeleteRangeResponse {
    pub deleted: i64,
    pub prev_kvs: Vec<KeyValue>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResponseOp {
    Range(RangeResponse),
    Put(PutResponse),
    DeleteRange(DeleteRangeResponse),
    Txn(TxnResponse),
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TxnResponse {
    pub succeeded: bool,
    pub responses: Vec<ResponseOp>,
}
