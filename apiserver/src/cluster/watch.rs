//! Watches of the cluster API: the keyspace's watch hub underneath, objects and selectors on
//! top.
//!
//! Selectors are applied to both the new and the previous state of an object, so a watcher
//! sees an object *enter* its view as ADDED and *leave* it as DELETED: an agent watching
//! `spec.nodeName=n1` gets ADDED when a pod is bound to n1 and DELETED when it is removed. A
//! watch on `spec.nodeName` is indexed in the hub (a tag), so thousands of such watchers cost
//! the apply path one cheap comparison each, not one queued event each.
//!
//! Every watch of a member decodes an event's objects from the same [`Decoded`]: the first
//! stream to reach the event decodes it (and encodes the object it sends), the others share
//! that work, so an event costs one decode however many components watch its kind.

use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::Duration;

use serde::Deserialize;
use skiff_proto::api::{Kind, Object};
use skiff_proto::cluster::v1 as pb;
use skiff_proto::cluster::v1::watch_event::Type;
use skiff_proto::selector::{FieldQuery, LabelQuery};
use tokio::sync::mpsc;

use super::error::{ClusterError, Result};

use super::{ClusterApi, decode, prefix_end, to_pb};
use skiff_store::request::{Event, EventKind, KeyValue};
use skiff_store::watch::{Tagger, WatchMessage, WatchSpec};

/// Queue of one watch stream before it is parked and caught up from disk.
const QUEUE: usize = 1024;

#[derive(Deserialize)]
struct NodeNameOnly {
    #[serde(default)]
    spec: Option<SpecNodeName>,
}

#[derive(Deserialize)]
struct SpecNodeName {
    #[serde(default, rename = "nodeName")]
    node_name: String,
}

fn node_name(json: &[u8]) -> Option<String> {
    let n: NodeNameOnly = serde_json::from_slice(json).ok()?;
    n.spec.map(|s| s.node_name).filter(|n| !n.is_empty())
}

fn node_tag(node: &str) -> String {
    format!("spec.nodeName={node}")
}

/// Tags each pod with the node it is bound to (`spec.nodeName=N`; an unbound pod has no
/// tag), for watches and lists of the pods of one node. The server registers it with the
/// member's watch hub; the apply path knows nothing of pods.
pub fn tagger() -> Tagger {
    Tagger {
        prefix: Kind::Pod.prefix(None).into_bytes(),
        tags: std::sync::Arc::new(|value: &[u8]| {
            node_name(value).map(|n| node_tag(&n)).into_iter().collect()
        }),
    }
}

/// The tag that names every object a `kind` selected by `filter` can be: the node of a list
/// or watch of the pods bound to one node (not of unbound pods, `spec.nodeName=`, which carry
/// no tag).
pub(super) fn index_tag(kind: Kind, filter: &Filter) -> Option<String> {
    (kind == Kind::Pod)
        .then(|| filter.fields.equality("spec.nodeName"))
        .flatten()
        .filter(|n| !n.is_empty())
        .map(node_tag)
}

/// The selectors of a list or watch, parsed.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub labels: LabelQuery,
    pub fields: FieldQuery,
}

impl Filter {
    pub fn parse(kind: Kind, selectors: Option<&pb::Selectors>) -> Result<Filter> {
        let Some(s) = selectors else {
            return Ok(Filter::default());
        };
        Ok(Filter {
            labels: LabelQuery::parse(&s.label_selector)?,
            fields: FieldQuery::parse(kind, &s.field_selector)?,
        })
    }

    pub fn matches(&self, o: &Object) -> bool {
        self.labels.matches(&o.metadata().labels) && self.fields.matches(o)
    }
}

/// The key range of a kind in a namespace (all namespaces when empty).
pub fn key_range(kind: Kind, namespace: &str) -> (Vec<u8>, Vec<u8>) {
    let ns = (kind.is_namespaced() && !namespace.is_empty()).then_some(namespace);
    let prefix = kind.prefix(ns).into_bytes();
    let end = prefix_end(&prefix);
    (prefix, end)
}

impl ClusterApi {
    /// Starts a watch; events arrive on the returned channel until the client goes away.
    pub fn watch(&self, req: pb::WatchRequest) -> Result<mpsc::Receiver<Result<pb::WatchEvent>>> {
        let kind = super::parse_kind(&req.kind)?;
        let filter = Filter::parse(kind, req.selectors.as_ref())?;
        let (key, range_end) = key_range(kind, &req.namespace);
        let tag = index_tag(kind, &filter);
        let keyspace = self.keyspace();
        let (stream, mut rx) = keyspace.open(QUEUE);
        let spec = WatchSpec {
            key,
            range_end,
            start_revision: if req.resource_version > 0 {
                req.resource_version + 1
            } else {
                0
            },
            prev_kv: true,
            needs_prev_kv: true,
            no_put: false,
            no_delete: false,
            tag,
        };
        {
            let view = keyspace.read();
            if req.resource_version > 0 && spec.is_compacted(spec.start_revision, view.compacted())
            {
                keyspace.close(stream);
                return Err(too_old(req.resource_version, view.compacted()));
            }
            if let Err(why) = view.watch(stream, spec) {
                drop(view);
                keyspace.close(stream);
                return Err(ClusterError::WatchRefused {
                    reason: why.to_string(),
                });
            }
        }
        let (tx, out) = mpsc::channel(QUEUE);
        tokio::spawn(async move {
            let mut bookmarks = tokio::time::interval(Duration::from_secs(1));
            bookmarks.tick().await;
            loop {
                let msg = tokio::select! {
                    m = rx.recv() => m,
                    _ = bookmarks.tick(), if req.allow_bookmarks => {
                        keyspace.read().notify_progress(stream);
                        continue;
                    }
                    _ = tx.closed() => None,
                };
                let Some(msg) = msg else { break };
                let sent = match msg {
                    WatchMessage::Events { events, .. } => {
                        let mut ok = true;
                        for (e, decoded) in events.shared(|e| Decoded::of(kind, e)) {
                            match convert(kind, &filter, e, &decoded) {
                                Ok(Some(ev)) => {
                                    if tx.send(Ok(ev)).await.is_err() {
                                        ok = false;
                                        break;
                                    }
                                }
                                Ok(None) => {}
                                Err(e) => {
                                    let _ = tx.send(Err(e)).await;
                                    ok = false;
                                    break;
                                }
                            }
                        }
                        ok
                    }
                    WatchMessage::Compacted {
                        compact_revision, ..
                    } => {
                        let _ = tx
                            .send(Err(too_old(req.resource_version, compact_revision)))
                            .await;
                        false
                    }
                    WatchMessage::Progress { revision, .. } => tx
                        .send(Ok(pb::WatchEvent {
                            r#type: Type::Bookmark as i32,
                            object: None,
                            revision,
                        }))
                        .await
                        .is_ok(),
                    // A watcher the hub could not serve (its catch-up read failed): the client
                    // relists and watches again.
                    WatchMessage::Canceled { reason, .. } => {
                        let _ = tx.send(Err(ClusterError::WatchCanceled { reason })).await;
                        false
                    }
                    WatchMessage::Created { .. } | WatchMessage::Refused { .. } => true,
                };
                if !sent {
                    break;
                }
            }
            keyspace.close(stream);
        });
        Ok(out)
    }
}

fn too_old(resource_version: i64, compacted: i64) -> ClusterError {
    ClusterError::TooOld {
        resource_version,
        compacted,
    }
}

/// One keyspace event's objects, decoded once for every watch of the member (see
/// `WatchEvents::shared`), and the object each watcher that gets the event is sent, encoded
/// when the first one needs it.
struct Decoded {
    /// The kind decoded as: a watcher of another kind (none watches a key range of two)
    /// decodes for itself.
    kind: Kind,
    /// The object before the event, when the store kept it; `None` also when it does not
    /// decode (a watcher then decodes it again, for the error).
    prev: Option<Object>,
    /// The object a put wrote; as `prev` when it does not decode.
    now: Option<Object>,
    /// The object sent for the event: what a put wrote, or what a delete removed, at the
    /// delete's revision.
    sent: OnceLock<pb::Object>,
}

impl Decoded {
    fn of(kind: Kind, e: &Event) -> Decoded {
        let object = |kv| decode(kind, kv).ok().map(|s| s.object);
        Decoded {
            kind,
            prev: e.prev_kv.as_ref().and_then(object),
            now: (e.kind == EventKind::Put).then(|| object(&e.kv)).flatten(),
            sent: OnceLock::new(),
        }
    }
}

/// The object `kv` holds: decoded already (`shared`), else decoded now (which, for an object
/// that did not decode before either, is the error).
fn object_of<'a>(kind: Kind, kv: &KeyValue, shared: Option<&'a Object>) -> Result<Cow<'a, Object>> {
    match shared {
        Some(o) => Ok(Cow::Borrowed(o)),
        None => Ok(Cow::Owned(decode(kind, kv)?.object)),
    }
}

/// One keyspace event as the watcher sees it, or nothing when the object is outside its view
/// before and after. `decoded` is the event's objects as every watch shares them.
fn convert(
    kind: Kind,
    filter: &Filter,
    e: &Event,
    decoded: &Decoded,
) -> Result<Option<pb::WatchEvent>> {
    let ours = decoded.kind == kind;
    let revision = e.kv.mod_revision;
    let prev = match &e.prev_kv {
        Some(kv) => Some(object_of(kind, kv, decoded.prev.as_ref().filter(|_| ours))?),
        None => None,
    };
    let was = prev.as_ref().is_some_and(|o| filter.matches(o));
    let (ty, object) = match e.kind {
        EventKind::Put => {
            let now = object_of(kind, &e.kv, decoded.now.as_ref().filter(|_| ours))?;
            match (was, filter.matches(&now)) {
                (false, false) => return Ok(None),
                (false, true) => (Type::Added, now),
                (true, true) => (Type::Modified, now),
                (true, false) => (Type::Deleted, now),
            }
        }
        EventKind::Delete => {
            // Every delete carries the object's last state: the hub refuses this watcher a
            // position whose previous versions compaction dropped.
            if prev.is_none() {
                return Err(ClusterError::DeleteWithoutPrevious {
                    key: String::from_utf8_lossy(&e.kv.key).into_owned(),
                    revision,
                });
            }
            let Some(mut last) = prev.filter(|_| was) else {
                return Ok(None);
            };
            last.to_mut().metadata_mut().resource_version = revision.to_string();
            (Type::Deleted, last)
        }
    };
    let sent = if ours {
        decoded.sent.get_or_init(|| to_pb(&object)).clone()
    } else {
        to_pb(&object)
    };
    Ok(Some(pb::WatchEvent {
        r#type: ty as i32,
        object: Some(sent),
        revision,
    }))
}
