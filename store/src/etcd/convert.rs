//! Between etcd's protobuf messages and the store's own command types, with etcd's request
//! checks (empty keys, `ignore_value` with a value, too many txn ops, duplicate keys).

use std::collections::HashSet;

use skiff_proto::etcd::{
    PbCompare, PbDeleteRequest, PbDeleteResponse, PbEvent, PbKeyValue, PbPutRequest, PbPutResponse,
    PbRangeRequest, PbRangeResponse, PbResponseOp, PbTargetUnion, PbTxnOpRequest, PbTxnOpResponse,
    PbTxnRequest, PbTxnRequestOp, PbTxnResponse, PbWatchRequestUnion,
};

use crate::command::{
    Compare, CompareResult, CompareTarget, DeleteRangeRequest, DeleteRangeResponse, Event,
    EventKind, KeyValue, PutRequest, PutResponse, RangeRequest, RangeResponse, RequestOp,
    ResponseOp, SortOrder, SortTarget, TxnRequest, TxnResponse,
};
use crate::error::StoreError;
use crate::watch::WatchSpec;

pub fn kv(kv: KeyValue) -> PbKeyValue {
    PbKeyValue {
        key: kv.key,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        value: kv.value,
        lease: kv.lease,
    }
}

pub fn event(e: Event) -> PbEvent {
    PbEvent {
        r#type: match e.kind {
            EventKind::Put => 0,
            EventKind::Delete => 1,
        },
        kv: Some(kv(e.kv)),
        prev_kv: e.prev_kv.map(kv),
    }
}

pub fn range_request(r: PbRangeRequest) -> Result<RangeRequest, StoreError> {
    if r.key.is_empty() {
        return Err(StoreError::EmptyKey);
    }
    let sort_order = match r.sort_order {
        0 => SortOrder::None,
        1 => SortOrder::Ascend,
        2 => SortOrder::Descend,
        n => return Err(StoreError::Invalid(format!("invalid sort order {n}"))),
    };
    let sort_target = match r.sort_target {
        0 => SortTarget::Key,
        1 => SortTarget::Version,
        2 => SortTarget::Create,
        3 => SortTarget::Mod,
        4 => SortTarget::Value,
        n => return Err(StoreError::Invalid(format!("invalid sort target {n}"))),
    };
    Ok(RangeRequest {
        key: r.key,
        range_end: r.range_end,
        limit: r.limit,
        revision: r.revision,
        sort_order,
        sort_target,
        keys_only: r.keys_only,
        count_only: r.count_only,
        min_mod_revision: r.min_mod_revision,
        max_mod_revision: r.max_mod_revision,
        min_create_revision: r.min_create_revision,
        max_create_revision: r.max_create_revision,
    })
}

pub fn put_request(p: PbPutRequest) -> Result<PutRequest, StoreError> {
    if p.key.is_empty() {
        return Err(StoreError::EmptyKey);
    }
    if p.ignore_value && !p.value.is_empty() {
        return Err(StoreError::ValueProvided);
    }
    if p.ignore_lease && p.lease != 0 {
        return Err(StoreError::LeaseProvided);
    }
    Ok(PutRequest {
        key: p.key,
        value: p.value,
        lease: p.lease,
        prev_kv: p.prev_kv,
        ignore_value: p.ignore_value,
        ignore_lease: p.ignore_lease,
    })
}

pub fn delete_request(d: PbDeleteRequest) -> Result<DeleteRangeRequest, StoreError> {
    if d.key.is_empty() {
        return Err(StoreError::EmptyKey);
    }
    Ok(DeleteRangeRequest {
        key: d.key,
        range_end: d.range_end,
        prev_kv: d.prev_kv,
    })
}

fn compare(c: PbCompare) -> Result<Compare, StoreError> {
    // etcd's checkRequestOps: a compare names a key like any other request.
    if c.key.is_empty() {
        return Err(StoreError::EmptyKey);
    }
    let result = match c.result {
        0 => CompareResult::Equal,
        1 => CompareResult::Greater,
        2 => CompareResult::Less,
        3 => CompareResult::NotEqual,
        n => return Err(StoreError::Invalid(format!("invalid compare result {n}"))),
    };
    // The target enum says which union member counts; an unset union compares with zero.
    let target = match (c.target, c.target_union) {
        (0, Some(PbTargetUnion::Version(v))) => CompareTarget::Version(v),
        (0, None) => CompareTarget::Version(0),
        (1, Some(PbTargetUnion::CreateRevision(v))) => CompareTarget::Create(v),
        (1, None) => CompareTarget::Create(0),
        (2, Some(PbTargetUnion::ModRevision(v))) => CompareTarget::Mod(v),
        (2, None) => CompareTarget::Mod(0),
        (3, Some(PbTargetUnion::Value(v))) => CompareTarget::Value(v),
        (3, None) => CompareTarget::Value(Vec::new()),
        (4, Some(PbTargetUnion::Lease(v))) => CompareTarget::Lease(v),
        (4, None) => CompareTarget::Lease(0),
        (t, _) => {
            return Err(StoreError::Invalid(format!(
                "compare target {t} does not match its value"
            )));
        }
    };
    Ok(Compare {
        key: c.key,
        range_end: c.range_end,
        result,
        target,
    })
}

fn request_op(op: PbTxnRequestOp, max_ops: usize) -> Result<RequestOp, StoreError> {
    match op.request {
        Some(PbTxnOpRequest::RequestRange(r)) => range_request(r).map(RequestOp::Range),
        Some(PbTxnOpRequest::RequestPut(p)) => put_request(p).map(RequestOp::Put),
        Some(PbTxnOpRequest::RequestDeleteRange(d)) => {
            delete_request(d).map(RequestOp::DeleteRange)
        }
        Some(PbTxnOpRequest::RequestTxn(t)) => txn_request(t, max_ops).map(RequestOp::Txn),
        None => Err(StoreError::Invalid("txn operation is empty".into())),
    }
}

/// Converts and checks a Txn the way etcd's API layer does, before anything is proposed.
pub fn txn_request(t: PbTxnRequest, max_ops: usize) -> Result<TxnRequest, StoreError> {
    if t.compare.len() > max_ops || t.success.len() > max_ops || t.failure.len() > max_ops {
        return Err(StoreError::TooManyOps);
    }
    let txn = TxnRequest {
        compare: t
            .compare
            .into_iter()
            .map(compare)
            .collect::<Result<_, _>>()?,
        success: t
            .success
            .into_iter()
            .map(|op| request_op(op, max_ops))
            .collect::<Result<_, _>>()?,
        failure: t
            .failure
            .into_iter()
            .map(|op| request_op(op, max_ops))
            .collect::<Result<_, _>>()?,
        auth_revision: None,
    };
    check_intervals(&txn.success)?;
    check_intervals(&txn.failure)?;
    Ok(txn)
}

type Writes = (Vec<(Vec<u8>, Vec<u8>)>, HashSet<Vec<u8>>);

/// etcd's rule for one branch: a key may be put at most once and must not fall in a range the
/// branch deletes. Nested transactions count towards their parent: a child's puts are checked
/// against the deletes gathered so far (this level's and earlier children's), then its deletes
/// join them; the two branches of one child never both run, so they may put the same key, and
/// one may delete what the other puts.
fn check_intervals(ops: &[RequestOp]) -> Result<Writes, StoreError> {
    let mut dels: Vec<(Vec<u8>, Vec<u8>)> = ops
        .iter()
        .filter_map(|op| match op {
            RequestOp::DeleteRange(d) => Some((d.key.clone(), d.range_end.clone())),
            _ => None,
        })
        .collect();
    let deleted =
        |dels: &[(Vec<u8>, Vec<u8>)], key: &[u8]| dels.iter().any(|(k, end)| in_range(key, k, end));
    let mut puts: HashSet<Vec<u8>> = HashSet::new();
    for op in ops {
        let RequestOp::Txn(t) = op else { continue };
        let (then_dels, then_puts) = check_intervals(&t.success)?;
        let (else_dels, else_puts) = check_intervals(&t.failure)?;
        for k in &then_puts {
            if puts.contains(k) || deleted(&dels, k) {
                return Err(StoreError::DuplicateKey);
            }
            puts.insert(k.clone());
        }
        for k in &else_puts {
            if (puts.contains(k) && !then_puts.contains(k)) || deleted(&dels, k) {
                return Err(StoreError::DuplicateKey);
            }
            puts.insert(k.clone());
        }
        dels.extend(then_dels);
        dels.extend(else_dels);
    }
    for op in ops {
        let RequestOp::Put(p) = op else { continue };
        if puts.contains(&p.key) || deleted(&dels, &p.key) {
            return Err(StoreError::DuplicateKey);
        }
        puts.insert(p.key.clone());
    }
    Ok((dels, puts))
}

fn in_range(key: &[u8], start: &[u8], end: &[u8]) -> bool {
    match end {
        [] => key == start,
        [0] => key >= start,
        end => key >= start && key < end,
    }
}

pub fn range_response(r: RangeResponse) -> PbRangeResponse {
    PbRangeResponse {
        header: None,
        kvs: r.kvs.into_iter().map(kv).collect(),
        more: r.more,
        count: r.count,
    }
}

pub fn put_response(p: PutResponse) -> PbPutResponse {
    PbPutResponse {
        header: None,
        prev_kv: p.prev_kv.map(kv),
    }
}

pub fn delete_response(d: DeleteRangeResponse) -> PbDeleteResponse {
    PbDeleteResponse {
        header: None,
        deleted: d.deleted,
        prev_kvs: d.prev_kvs.into_iter().map(kv).collect(),
    }
}

pub fn txn_response(t: TxnResponse) -> PbTxnResponse {
    PbTxnResponse {
        header: None,
        succeeded: t.succeeded,
        responses: t
            .responses
            .into_iter()
            .map(|r| PbResponseOp {
                response: Some(match r {
                    ResponseOp::Range(r) => PbTxnOpResponse::ResponseRange(range_response(r)),
                    ResponseOp::Put(p) => PbTxnOpResponse::ResponsePut(put_response(p)),
                    ResponseOp::DeleteRange(d) => {
                        PbTxnOpResponse::ResponseDeleteRange(delete_response(d))
                    }
                    ResponseOp::Txn(t) => PbTxnOpResponse::ResponseTxn(txn_response(t)),
                }),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str) -> RequestOp {
        RequestOp::Put(PutRequest {
            key: key.into(),
            ..PutRequest::default()
        })
    }

    fn del(key: &str, end: &str) -> RequestOp {
        RequestOp::DeleteRange(DeleteRangeRequest {
            key: key.into(),
            range_end: end.into(),
            prev_kv: false,
        })
    }

    #[test]
    fn duplicate_keys_in_a_branch_are_refused() {
        assert!(check_intervals(&[put("a"), put("b")]).is_ok());
        assert_eq!(
            check_intervals(&[put("a"), put("a")]).err(),
            Some(StoreError::DuplicateKey)
        );
        assert_eq!(
            check_intervals(&[put("b"), del("a", "c")]).err(),
            Some(StoreError::DuplicateKey)
        );
        assert!(check_intervals(&[put("c"), del("a", "c")]).is_ok());
        assert!(check_intervals(&[del("a", "c"), del("b", "d")]).is_ok());
        let nested = RequestOp::Txn(TxnRequest {
            compare: vec![],
            success: vec![put("x")],
            failure: vec![put("x")],
            auth_revision: None,
        });
        assert!(check_intervals(std::slice::from_ref(&nested)).is_ok());
        assert_eq!(
            check_intervals(&[nested, put("x")]).err(),
            Some(StoreError::DuplicateKey)
        );
        // One branch of a child may delete what the other puts.
        let either = RequestOp::Txn(TxnRequest {
            compare: vec![],
            success: vec![put("x")],
            failure: vec![del("x", "")],
            auth_revision: None,
        });
        assert!(check_intervals(std::slice::from_ref(&either)).is_ok());
        // A parent's delete covers a child's put.
        assert_eq!(
            check_intervals(&[del("a", "z"), either]).err(),
            Some(StoreError::DuplicateKey)
        );
    }

    /// A compare with an empty key is refused before anything is proposed, at any depth.
    #[test]
    fn a_compare_needs_a_key() {
        let cmp = |key: &str| PbCompare {
            key: key.into(),
            ..PbCompare::default()
        };
        let txn = |c: PbCompare| PbTxnRequest {
            compare: vec![c],
            ..PbTxnRequest::default()
        };
        assert!(txn_request(txn(cmp("k")), 8).is_ok());
        assert_eq!(
            txn_request(txn(cmp("")), 8).err(),
            Some(StoreError::EmptyKey)
        );
        let nested = PbTxnRequest {
            success: vec![PbTxnRequestOp {
                request: Some(PbTxnOpRequest::RequestTxn(txn(cmp("")))),
            }],
            ..PbTxnRequest::default()
        };
        assert_eq!(txn_request(nested, 8).err(), Some(StoreError::EmptyKey));
    }

    #[test]
    fn put_checks_follow_etcd() {
        let p = |ignore_value, value: &str, ignore_lease, lease| PbPutRequest {
            key: b"k".to_vec(),
            value: value.into(),
            lease,
            prev_kv: false,
            ignore_value,
            ignore_lease,
        };
        assert_eq!(
            put_request(p(true, "v", false, 0)).err(),
            Some(StoreError::ValueProvided)
        );
        assert_eq!(
            put_request(p(false, "", true, 5)).err(),
            Some(StoreError::LeaseProvided)
        );
        assert!(put_request(p(true, "", true, 0)).is_ok());
        let empty = PbPutRequest {
            key: vec![],
            ..p(false, "", false, 0)
        };
        assert_eq!(put_request(empty).err(), Some(StoreError::EmptyKey));
    }
}

/// `WatchCreateRequest.filters`: `NOPUT`.
const FILTER_NOPUT: i32 = 0;
/// `WatchCreateRequest.filters`: `NODELETE`.
const FILTER_NODELETE: i32 = 1;

/// What a client asks of a watch stream.
#[derive(Debug, Clone)]
pub enum WatchRequest {
    Create {
        /// 0: the hub picks one.
        watch_id: i64,
        progress_notify: bool,
        spec: WatchSpec,
    },
    Cancel {
        watch_id: i64,
    },
    Progress,
}

/// A watch request as the hub takes it, read as etcd's watch server reads it: an empty key
/// is `\0`, the smallest key (so `key: "", range_end: "\0"` watches everything), and a start
/// revision of 0 or less means from the next revision. Whether the range selects anything is
/// the hub's to decide, for every face.
pub fn watch_request(r: PbWatchRequestUnion) -> WatchRequest {
    match r {
        PbWatchRequestUnion::CreateRequest(c) => WatchRequest::Create {
            watch_id: c.watch_id,
            progress_notify: c.progress_notify,
            spec: WatchSpec {
                key: if c.key.is_empty() { vec![0] } else { c.key },
                range_end: c.range_end,
                start_revision: c.start_revision.max(0),
                prev_kv: c.prev_kv,
                needs_prev_kv: false,
                no_put: c.filters.contains(&FILTER_NOPUT),
                no_delete: c.filters.contains(&FILTER_NODELETE),
                tag: None,
            },
        },
        PbWatchRequestUnion::CancelRequest(c) => WatchRequest::Cancel {
            watch_id: c.watch_id,
        },
        PbWatchRequestUnion::ProgressRequest(_) => WatchRequest::Progress,
    }
}
