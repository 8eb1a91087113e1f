//! Lists: one page of a kind's objects at one revision, for both faces of the API.
//!
//! Every page of one list reads at the first page's revision, so a paged list is a consistent
//! snapshot however long the client takes between pages (until compaction passes that
//! revision). The continue token carries that revision and the last key returned.

use super::watch::{Filter, index_tag, key_range};
use super::{ClusterApi, ClusterError, Result, Stored, decode};
use skiff_proto::api::Kind;
use skiff_store::error::StoreError;
use skiff_store::request::RangeRequest;

/// The fewest objects one read of a list takes from the store (a selective filter skips most).
const MIN_CHUNK: usize = 256;

/// Most objects one page returns when the client sets no limit.
pub const MAX_PAGE: i64 = 10_000;

/// Which state a read sees: Kubernetes' `resourceVersion` and `resourceVersionMatch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadAt {
    /// The newest committed state (a ReadIndex round first): `resourceVersion` unset.
    Latest,
    /// This member's applied state, however recent: `resourceVersion=0`.
    Any,
    /// Exactly this revision: `resourceVersionMatch=Exact`.
    Exact(i64),
    /// This member's state once it has applied at least this revision:
    /// `resourceVersionMatch=NotOlderThan`, the default for a non-zero `resourceVersion`.
    NotOlderThan(i64),
}

/// One page of a list.
#[derive(Debug, Clone)]
pub struct ListPage {
    /// The revision the whole list reads at: its `resourceVersion`.
    pub revision: i64,
    pub items: Vec<Stored>,
    /// Empty on the last page.
    pub continue_token: String,
}

/// A continue token: the revision of the first page and the key to resume after.
fn parse_continue(token: &str) -> Result<Option<(i64, Vec<u8>)>> {
    if token.is_empty() {
        return Ok(None);
    }
    let bad = || ClusterError::BadContinue {
        token: token.to_string(),
    };
    let (rev, hex) = token.split_once(':').ok_or_else(bad)?;
    let rev: i64 = rev.parse().map_err(|_| bad())?;
    if hex.len() % 2 != 0 {
        return Err(bad());
    }
    let key = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| bad())?;
    Ok(Some((rev, key)))
}

fn make_continue(rev: i64, last_key: &[u8]) -> String {
    let hex: String = last_key.iter().map(|b| format!("{b:02x}")).collect();
    format!("{rev}:{hex}")
}

impl ClusterApi {
    /// One page of the objects of `kind` in `namespace` (every namespace when empty) that
    /// `filter` selects: at most `limit` (capped at [`MAX_PAGE`]), resuming after
    /// `continue_token` when one is given.
    pub async fn list(
        &self,
        kind: Kind,
        namespace: &str,
        filter: &Filter,
        limit: i64,
        continue_token: &str,
        read: ReadAt,
    ) -> Result<ListPage> {
        let (prefix, end) = key_range(kind, namespace);
        let limit = if limit > 0 {
            limit.min(MAX_PAGE)
        } else {
            MAX_PAGE
        } as usize;
        let resume = parse_continue(continue_token)?;
        // Every page of one list reads at the first page's revision.
        let (at, from) = match resume {
            Some((rev, last)) => {
                let mut next = last;
                next.push(0);
                (rev, next)
            }
            None => {
                let at = match read {
                    ReadAt::Latest => {
                        self.barrier(false).await?;
                        0
                    }
                    ReadAt::Any => 0,
                    ReadAt::Exact(rev) => rev,
                    ReadAt::NotOlderThan(rev) => {
                        if self.revision() < rev {
                            self.barrier(false).await?;
                        }
                        let now = self.revision();
                        if now < rev {
                            return Err(ClusterError::FutureRevision {
                                resource_version: rev,
                                current: now,
                            });
                        }
                        0
                    }
                };
                (at, prefix.clone())
            }
        };
        let too_old = |at: i64| {
            move |e| match e {
                ClusterError::Store(StoreError::Compacted { compacted }) => ClusterError::TooOld {
                    resource_version: at,
                    compacted,
                },
                ClusterError::Store(StoreError::FutureRevision) => ClusterError::FutureRevision {
                    resource_version: at,
                    current: self.revision(),
                },
                e => e,
            }
        };
        // The pods of one node: the hub's tag index names them, so the list reads those
        // instead of decoding every pod (a thousand agents listing at start would otherwise
        // decode the whole collection a thousand times).
        if let Some(tag) = index_tag(kind, filter)
            && let Some(page) = self.list_tagged(kind, &tag, filter, at, &from, &end, limit)?
        {
            return Ok(page);
        }
        // Read in chunks, so a page costs what it returns (and what the filter skips), not
        // the rest of the collection: the first chunk fixes the revision every later one, and
        // every later page, reads at.
        let chunk = (limit + 1).max(MIN_CHUNK);
        let (mut at, mut from) = (at, from);
        let mut items = Vec::new();
        let mut last_key = String::new();
        let mut continue_token = String::new();
        'scan: loop {
            let (read_at, page, more) = self
                .range_chunk(kind, &from, &end, at, chunk)
                .map_err(too_old(at))?;
            at = read_at;
            let Some(last) = page.last().map(|s| s.object.key()) else {
                break;
            };
            for s in page {
                if !filter.matches(&s.object) {
                    continue;
                }
                if items.len() == limit {
                    // Resume after the last object returned.
                    continue_token = make_continue(at, last_key.as_bytes());
                    break 'scan;
                }
                last_key = s.object.key();
                items.push(s);
            }
            if !more {
                break;
            }
            from = last.into_bytes();
            from.push(0);
            // A long scan lets the member's other tasks (heartbeats among them) run between
            // its chunks.
            tokio::task::yield_now().await;
        }
        Ok(ListPage {
            revision: at,
            items,
            continue_token,
        })
    }
}

impl ClusterApi {
    /// A page of the objects whose present state carries `tag` (see [`index_tag`]), read
    /// through the hub's tag index at the keyspace's current revision; `None` when the list
    /// reads at an older revision (a later page after writes), which the index does not know,
    /// and which a scan then serves.
    #[allow(clippy::too_many_arguments)]
    fn list_tagged(
        &self,
        kind: Kind,
        tag: &str,
        filter: &Filter,
        at: i64,
        from: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Option<ListPage>> {
        let keyspace = self.keyspace();
        let mvcc = keyspace.read();
        let now = mvcc.revision();
        if at != 0 && at != now {
            return Ok(None);
        }
        // Under the keyspace read lock, the index is the keyspace's at `now`.
        let Some(keys) = mvcc.tagged_keys(tag, from, end) else {
            return Ok(None);
        };
        let mut kvs = Vec::with_capacity(keys.len());
        for key in keys {
            let resp = mvcc.range(&RangeRequest {
                key,
                ..RangeRequest::default()
            })?;
            kvs.extend(resp.kvs);
        }
        drop(mvcc);
        let mut items = Vec::new();
        let mut continue_token = String::new();
        for kv in &kvs {
            let s = decode(kind, kv)?;
            if !filter.matches(&s.object) {
                continue;
            }
            if items.len() == limit {
                let last: &Stored = items.last().expect("limit is at least 1");
                continue_token = make_continue(now, last.object.key().as_bytes());
                break;
            }
            items.push(s);
        }
        Ok(Some(ListPage {
            revision: now,
            items,
            continue_token,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token round-trips, and one this server did not issue is refused, not misread.
    #[test]
    fn continue_tokens() {
        let t = make_continue(42, b"/registry/pods/default/web");
        assert_eq!(
            parse_continue(&t).unwrap(),
            Some((42, b"/registry/pods/default/web".to_vec()))
        );
        assert_eq!(parse_continue("").unwrap(), None);
        for bad in ["x", "1:abc", "x:00", "1:zz"] {
            assert!(parse_continue(bad).is_err(), "{bad}");
        }
    }
}
