//! Where a client's keys live in an etcd it may share with others: each of the client's key
//! prefixes has a place in etcd's keyspace (etcd's `--namespace` proxy does this for one
//! prefix; here there may be several, each moved on its own). A key outside every prefix is
//! not the client's, and a request naming one is refused, so a client kept to its prefixes
//! cannot read or write another's keys through them.
//!
//! Keys, range ends, compares and watches go to etcd through [`KeyMap`]'s `*_to_etcd`
//! methods, and what etcd answers comes back through its `*_from_etcd` ones, on etcd's own
//! messages, so the API server's writes, its mirror and the etcd services it passes through
//! move keys by one rule.

use skiff_proto::etcd::{
    PbDeleteRequest, PbDeleteResponse, PbKeyValue, PbPutRequest, PbPutResponse, PbRangeRequest,
    PbRangeResponse, PbTxnOpRequest, PbTxnOpResponse, PbTxnRequest, PbTxnResponse,
    PbWatchCreateRequest, PbWatchRequest, PbWatchRequestUnion, PbWatchResponse,
};

use crate::error::StoreError;
use crate::key_index::prefix_end;

/// The client's key prefixes and their places in etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyMap {
    rules: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    /// A prefix of the client's keys.
    client: Vec<u8>,
    /// Where keys with that prefix are in etcd: the prefix replaced by this.
    etcd: Vec<u8>,
}

impl Default for KeyMap {
    fn default() -> Self {
        KeyMap::everything()
    }
}

impl KeyMap {
    /// Every key of etcd, where it is.
    pub fn everything() -> KeyMap {
        KeyMap {
            rules: vec![Rule {
                client: Vec::new(),
                etcd: Vec::new(),
            }],
        }
    }

    /// A map of `(client prefix, etcd prefix)` pairs. No prefix may start another on the same
    /// side (a key would have two places), and the empty prefix, every key, only stands alone.
    pub fn new(pairs: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<KeyMap, String> {
        let rules: Vec<Rule> = pairs
            .into_iter()
            .map(|(client, etcd)| Rule { client, etcd })
            .collect();
        if rules.is_empty() {
            return Err("no key prefix given".into());
        }
        let show = |p: &[u8]| String::from_utf8_lossy(p).into_owned();
        for (i, a) in rules.iter().enumerate() {
            for b in &rules[i + 1..] {
                for (x, y) in [(&a.client, &b.client), (&a.etcd, &b.etcd)] {
                    if x.starts_with(y) || y.starts_with(x) {
                        return Err(format!(
                            "key prefixes {:?} and {:?} overlap",
                            show(x),
                            show(y)
                        ));
                    }
                }
            }
        }
        Ok(KeyMap { rules })
    }

    /// Whether every key is where the client names it (nothing to move).
    pub fn is_identity(&self) -> bool {
        self.rules.iter().all(|r| r.client == r.etcd)
    }

    /// The ranges of etcd's keyspace the client's keys are in, as `(key, range_end)`.
    pub fn etcd_ranges(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.rules
            .iter()
            .map(|r| (etcd_start(&r.etcd), prefix_end(&r.etcd)))
            .collect()
    }

    fn client_rule(&self, key: &[u8]) -> Result<&Rule, StoreError> {
        self.rules
            .iter()
            .find(|r| key.starts_with(&r.client))
            .ok_or_else(|| {
                StoreError::Invalid(format!(
                    "key {:?} is outside this client's keys ({})",
                    String::from_utf8_lossy(key),
                    self.describe()
                ))
            })
    }

    fn describe(&self) -> String {
        self.rules
            .iter()
            .map(|r| format!("{:?}", String::from_utf8_lossy(&r.client)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A client's key in etcd.
    pub fn key_to_etcd(&self, key: &[u8]) -> Result<Vec<u8>, StoreError> {
        let rule = self.client_rule(key)?;
        Ok(moved(key, &rule.client, &rule.etcd))
    }

    /// A client's range `[key, range_end)` in etcd (an empty end: the key alone; `\0`: every
    /// key from `key`, which here means every key of its prefix from `key`). A range that
    /// runs past its key's prefix is refused.
    pub fn range_to_etcd(
        &self,
        key: &[u8],
        range_end: &[u8],
    ) -> Result<(Vec<u8>, Vec<u8>), StoreError> {
        let rule = self.client_rule(key)?;
        let etcd_key = moved(key, &rule.client, &rule.etcd);
        let etcd_end = if range_end.is_empty() {
            Vec::new()
        } else if range_end == [0] || range_end == prefix_end(&rule.client) {
            prefix_end(&rule.etcd)
        } else if range_end.starts_with(&rule.client) {
            moved(range_end, &rule.client, &rule.etcd)
        } else {
            return Err(StoreError::Invalid(format!(
                "range [{:?}, {:?}) runs past the key prefix {:?}",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(range_end),
                String::from_utf8_lossy(&rule.client)
            )));
        };
        Ok((etcd_key, etcd_end))
    }

    /// The client's name for a key of etcd, if the key is one of the client's.
    pub fn key_from_etcd(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.rules
            .iter()
            .find(|r| key.starts_with(&r.etcd))
            .map(|r| moved(key, &r.etcd, &r.client))
    }

    pub fn range_request_to_etcd(&self, r: &mut PbRangeRequest) -> Result<(), StoreError> {
        (r.key, r.range_end) = self.range_to_etcd(&r.key, &r.range_end)?;
        Ok(())
    }

    pub fn put_request_to_etcd(&self, p: &mut PbPutRequest) -> Result<(), StoreError> {
        p.key = self.key_to_etcd(&p.key)?;
        Ok(())
    }

    pub fn delete_request_to_etcd(&self, d: &mut PbDeleteRequest) -> Result<(), StoreError> {
        (d.key, d.range_end) = self.range_to_etcd(&d.key, &d.range_end)?;
        Ok(())
    }

    pub fn txn_request_to_etcd(&self, t: &mut PbTxnRequest) -> Result<(), StoreError> {
        for c in &mut t.compare {
            (c.key, c.range_end) = self.range_to_etcd(&c.key, &c.range_end)?;
        }
        for op in t.success.iter_mut().chain(t.failure.iter_mut()) {
            match &mut op.request {
                Some(PbTxnOpRequest::RequestRange(r)) => self.range_request_to_etcd(r)?,
                Some(PbTxnOpRequest::RequestPut(p)) => self.put_request_to_etcd(p)?,
                Some(PbTxnOpRequest::RequestDeleteRange(d)) => self.delete_request_to_etcd(d)?,
                Some(PbTxnOpRequest::RequestTxn(t)) => self.txn_request_to_etcd(t)?,
                None => {}
            }
        }
        Ok(())
    }

    pub fn watch_create_to_etcd(&self, w: &mut PbWatchCreateRequest) -> Result<(), StoreError> {
        (w.key, w.range_end) = self.range_to_etcd(&w.key, &w.range_end)?;
        Ok(())
    }

    pub fn watch_request_to_etcd(&self, w: &mut PbWatchRequest) -> Result<(), StoreError> {
        if let Some(PbWatchRequestUnion::CreateRequest(c)) = &mut w.request_union {
            self.watch_create_to_etcd(c)?;
        }
        Ok(())
    }

    /// A key-value etcd sent, in the client's names; `None` when its key is not the
    /// client's (etcd does not send those for a request that was moved here).
    pub fn kv_from_etcd(&self, mut kv: PbKeyValue) -> Option<PbKeyValue> {
        kv.key = self.key_from_etcd(&kv.key)?;
        Some(kv)
    }

    fn kvs_from_etcd(&self, kvs: &mut Vec<PbKeyValue>) {
        *kvs = std::mem::take(kvs)
            .into_iter()
            .filter_map(|kv| self.kv_from_etcd(kv))
            .collect();
    }

    pub fn range_response_from_etcd(&self, r: &mut PbRangeResponse) {
        self.kvs_from_etcd(&mut r.kvs);
    }

    pub fn put_response_from_etcd(&self, p: &mut PbPutResponse) {
        p.prev_kv = p.prev_kv.take().and_then(|kv| self.kv_from_etcd(kv));
    }

    pub fn delete_response_from_etcd(&self, d: &mut PbDeleteResponse) {
        self.kvs_from_etcd(&mut d.prev_kvs);
    }

    pub fn txn_response_from_etcd(&self, t: &mut PbTxnResponse) {
        for op in &mut t.responses {
            match &mut op.response {
                Some(PbTxnOpResponse::ResponseRange(r)) => self.range_response_from_etcd(r),
                Some(PbTxnOpResponse::ResponsePut(p)) => self.put_response_from_etcd(p),
                Some(PbTxnOpResponse::ResponseDeleteRange(d)) => self.delete_response_from_etcd(d),
                Some(PbTxnOpResponse::ResponseTxn(t)) => self.txn_response_from_etcd(t),
                None => {}
            }
        }
    }

    pub fn watch_response_from_etcd(&self, w: &mut PbWatchResponse) {
        for e in &mut w.events {
            e.kv = e.kv.take().and_then(|kv| self.kv_from_etcd(kv));
            e.prev_kv = e.prev_kv.take().and_then(|kv| self.kv_from_etcd(kv));
        }
        w.events.retain(|e| e.kv.is_some());
    }
}

/// `key` with its prefix `from` replaced by `to`.
fn moved(key: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(to.len() + key.len() - from.len());
    out.extend_from_slice(to);
    out.extend_from_slice(&key[from.len()..]);
    out
}

/// The first key with `prefix`: the prefix itself, or for the empty prefix the least key
/// etcd takes.
fn etcd_start(prefix: &[u8]) -> Vec<u8> {
    if prefix.is_empty() {
        vec![0]
    } else {
        prefix.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use skiff_proto::etcd::{PbCompare, PbEvent, PbResponseOp, PbTxnRequestOp};

    use super::*;

    fn tenant() -> KeyMap {
        KeyMap::new([
            (b"/app/".to_vec(), b"/tenant-a/".to_vec()),
            (b"/meta/".to_vec(), b"/tenant-a-meta/".to_vec()),
        ])
        .expect("valid")
    }

    #[test]
    fn keys_move_to_their_prefix_and_back() {
        let m = tenant();
        assert!(!m.is_identity());
        assert_eq!(
            m.key_to_etcd(b"/app/pods/ns/a").unwrap(),
            b"/tenant-a/pods/ns/a"
        );
        assert_eq!(
            m.key_to_etcd(b"/meta/leader/scheduler").unwrap(),
            b"/tenant-a-meta/leader/scheduler"
        );
        assert_eq!(
            m.key_from_etcd(b"/tenant-a/pods/ns/a").unwrap(),
            b"/app/pods/ns/a"
        );
        assert_eq!(
            m.key_from_etcd(b"/tenant-a-meta/ipam/x").unwrap(),
            b"/meta/ipam/x"
        );
        assert_eq!(m.key_from_etcd(b"/tenant-b/pods/ns/a"), None);
        let e = m.key_to_etcd(b"/other").unwrap_err().to_string();
        assert!(e.contains("\"/other\" is outside"), "{e}");
    }

    #[test]
    fn ranges_stay_inside_their_prefix() {
        let m = tenant();
        // A prefix's range.
        assert_eq!(
            m.range_to_etcd(b"/app/pods/", b"/app/pods0").unwrap(),
            (b"/tenant-a/pods/".to_vec(), b"/tenant-a/pods0".to_vec())
        );
        // Every key from here: every key of the prefix from here.
        assert_eq!(
            m.range_to_etcd(b"/app/pods/x", &[0]).unwrap(),
            (b"/tenant-a/pods/x".to_vec(), b"/tenant-a0".to_vec())
        );
        // The whole prefix.
        assert_eq!(
            m.range_to_etcd(b"/app/", b"/app0").unwrap(),
            (b"/tenant-a/".to_vec(), b"/tenant-a0".to_vec())
        );
        // One key.
        assert_eq!(
            m.range_to_etcd(b"/app/a", b"").unwrap(),
            (b"/tenant-a/a".to_vec(), Vec::new())
        );
        // Past the prefix: refused.
        assert!(m.range_to_etcd(b"/app/a", b"/meta/z").is_err());
        assert_eq!(
            m.etcd_ranges(),
            [
                (b"/tenant-a/".to_vec(), b"/tenant-a0".to_vec()),
                (b"/tenant-a-meta/".to_vec(), b"/tenant-a-meta0".to_vec())
            ]
        );
    }

    #[test]
    fn overlapping_prefixes_are_refused() {
        assert!(KeyMap::new([(b"/a/".to_vec(), b"/x/".to_vec())]).is_ok());
        assert!(
            KeyMap::new([
                (b"/a/".to_vec(), b"/x/".to_vec()),
                (b"/a/b/".to_vec(), b"/y/".to_vec())
            ])
            .is_err()
        );
        assert!(
            KeyMap::new([
                (b"/a/".to_vec(), b"/x/".to_vec()),
                (b"/b/".to_vec(), b"/x/y/".to_vec())
            ])
            .is_err()
        );
        assert!(KeyMap::new([]).is_err());
    }

    #[test]
    fn everything_moves_nothing() {
        let m = KeyMap::everything();
        assert!(m.is_identity());
        assert_eq!(m.key_to_etcd(b"/any").unwrap(), b"/any");
        assert_eq!(
            m.range_to_etcd(b"\0", &[0]).unwrap(),
            (b"\0".to_vec(), vec![0])
        );
        assert_eq!(m.etcd_ranges(), [(vec![0], vec![0])]);
    }

    /// A transaction's compares and operations, nested ones too, move; its answers come
    /// back in the client's names.
    #[test]
    fn a_transaction_moves_there_and_its_answer_back() {
        let m = tenant();
        let mut txn = PbTxnRequest {
            compare: vec![PbCompare {
                key: b"/app/a".to_vec(),
                ..PbCompare::default()
            }],
            success: vec![PbTxnRequestOp {
                request: Some(PbTxnOpRequest::RequestTxn(PbTxnRequest {
                    success: vec![PbTxnRequestOp {
                        request: Some(PbTxnOpRequest::RequestPut(PbPutRequest {
                            key: b"/meta/ipam/x".to_vec(),
                            ..PbPutRequest::default()
                        })),
                    }],
                    ..PbTxnRequest::default()
                })),
            }],
            failure: vec![PbTxnRequestOp {
                request: Some(PbTxnOpRequest::RequestDeleteRange(PbDeleteRequest {
                    key: b"/app/b/".to_vec(),
                    range_end: b"/app/b0".to_vec(),
                    ..PbDeleteRequest::default()
                })),
            }],
        };
        m.txn_request_to_etcd(&mut txn).unwrap();
        assert_eq!(txn.compare[0].key, b"/tenant-a/a");
        let Some(PbTxnOpRequest::RequestTxn(inner)) = &txn.success[0].request else {
            panic!("nested txn")
        };
        let Some(PbTxnOpRequest::RequestPut(p)) = &inner.success[0].request else {
            panic!("put")
        };
        assert_eq!(p.key, b"/tenant-a-meta/ipam/x");
        let Some(PbTxnOpRequest::RequestDeleteRange(d)) = &txn.failure[0].request else {
            panic!("delete")
        };
        assert_eq!(
            (d.key.as_slice(), d.range_end.as_slice()),
            (&b"/tenant-a/b/"[..], &b"/tenant-a/b0"[..])
        );

        let kv = |k: &[u8]| PbKeyValue {
            key: k.to_vec(),
            ..PbKeyValue::default()
        };
        let mut resp = PbTxnResponse {
            responses: vec![PbResponseOp {
                response: Some(PbTxnOpResponse::ResponseRange(PbRangeResponse {
                    kvs: vec![kv(b"/tenant-a/a"), kv(b"/tenant-a-meta/y")],
                    ..PbRangeResponse::default()
                })),
            }],
            ..PbTxnResponse::default()
        };
        m.txn_response_from_etcd(&mut resp);
        let Some(PbTxnOpResponse::ResponseRange(r)) = &resp.responses[0].response else {
            panic!("range")
        };
        let keys: Vec<&[u8]> = r.kvs.iter().map(|kv| kv.key.as_slice()).collect();
        assert_eq!(keys, [&b"/app/a"[..], &b"/meta/y"[..]]);

        let mut watch = PbWatchResponse {
            events: vec![
                PbEvent {
                    kv: Some(kv(b"/tenant-a/p")),
                    prev_kv: Some(kv(b"/tenant-a/p")),
                    ..PbEvent::default()
                },
                PbEvent {
                    kv: Some(kv(b"/tenant-b/p")),
                    ..PbEvent::default()
                },
            ],
            ..PbWatchResponse::default()
        };
        m.watch_response_from_etcd(&mut watch);
        assert_eq!(watch.events.len(), 1);
        assert_eq!(watch.events[0].kv.as_ref().unwrap().key, b"/app/p");
        assert_eq!(watch.events[0].prev_kv.as_ref().unwrap().key, b"/app/p");
    }
}
