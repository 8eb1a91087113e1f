//! `?watch=1`: a chunked stream of `{"type": ..., "object": ...}` lines, as client-go's
//! reflector, kube-runtime's watcher and `kubectl get -w` read it.
//!
//! A watch from `resourceVersion=N` sends what changed after N. One without a version (or with
//! `0`) first sends the objects that exist as synthetic ADDED events, then the changes after
//! them, as kube-apiserver does; `sendInitialEvents=true` does the same and marks the end of the
//! initial events with a bookmark annotated `k8s.io/initial-events-end`. A version older than
//! the compaction ends the stream with an ERROR event holding a 410 Expired Status, on which
//! clients relist. The stream ends after `timeoutSeconds` (30 minutes when unset), and when the
//! client goes away; the watch hub never waits for a slow reader (it parks it and catches it up
//! from the store).

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde_json::{Value, json};
use skiff_proto::cluster::v1 as pb;
use skiff_proto::cluster::v1::watch_event::Type;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::request::{Accept, Params, Target};
use super::status::ApiError;
use super::table::{self, IncludeObject};
use super::verbs::{filter, include_object, served};
use crate::cluster::list::ReadAt;
use crate::cluster::{ClusterApi, ClusterError};

/// How long a watch lasts when the client names no `timeoutSeconds` (kube-apiserver's
/// `--min-request-timeout` is 30 minutes).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// Events queued for one REST watcher before the sender waits on the client.
const QUEUE: usize = 256;

/// How one event's object is written for this watcher.
#[derive(Debug, Clone, Copy)]
struct Encoding {
    kind: skiff_proto::api::Kind,
    accept: Accept,
    include: IncludeObject,
}

impl Encoding {
    /// One watch event line. A Table watcher gets each object as a one-row Table, with the
    /// column definitions only in the first, as kube-apiserver sends them.
    fn line(&self, ty: &str, object: Value, first: &mut bool) -> Bytes {
        let object = match self.accept {
            Accept::Json => object,
            Accept::Metadata => json!({
                "apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata",
                "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
            }),
            Accept::Table if ty == "BOOKMARK" || ty == "ERROR" => object,
            Accept::Table => {
                let rv = object["metadata"]["resourceVersion"].clone();
                let t = table::table(
                    self.kind,
                    &[object],
                    json!({ "resourceVersion": rv }),
                    self.include,
                    *first,
                    Utc::now(),
                );
                *first = false;
                t
            }
        };
        let mut bytes = serde_json::to_vec(&json!({ "type": ty, "object": object }))
            .expect("invariant: JSON values always encode");
        bytes.push(b'\n');
        Bytes::from(bytes)
    }

    fn bookmark(&self, revision: i64, initial_end: bool, first: &mut bool) -> Bytes {
        let mut metadata = json!({ "resourceVersion": revision.to_string() });
        if initial_end {
            metadata["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
        }
        let object = json!({
            "apiVersion": self.kind.api_version(),
            "kind": self.kind.name(),
            "metadata": metadata,
        });
        self.line("BOOKMARK", object, first)
    }
}

/// Starts a watch and answers with its stream.
pub async fn watch(
    api: &ClusterApi,
    target: &Target,
    params: &Params,
    accept: Accept,
) -> Result<Response, ApiError> {
    if target.subresource.is_some() {
        return Err(ApiError::bad_request(
            "watch is not supported on subresources",
        ));
    }
    // A watch of one object is a watch of its collection with its name selected.
    let mut params = params.clone();
    if !target.name.is_empty() {
        let by_name = format!("metadata.name={}", target.name);
        params.field_selector = if params.field_selector.is_empty() {
            by_name
        } else {
            format!("{},{by_name}", params.field_selector)
        };
    }
    let filter = filter(target.kind, &params)?;
    let encoding = Encoding {
        kind: target.kind,
        accept,
        include: include_object(&params)?,
    };
    let initial = match params.send_initial_events {
        Some(true) => {
            if params.resource_version_match != "NotOlderThan" {
                return Err(ApiError::bad_request(
                    "sendInitialEvents: Forbidden: sendInitialEvents is forbidden unless \
                     resourceVersionMatch is NotOlderThan",
                ));
            }
            true
        }
        Some(false) => false,
        None => matches!(params.resource_version.as_str(), "" | "0"),
    };
    let bookmark_end = params.send_initial_events == Some(true);
    let mut first = true;
    let mut lines = Vec::new();
    let from = if initial {
        // The objects that exist, then everything after the revision they were read at.
        let read = match params.resource_version.as_str() {
            "" => ReadAt::Latest,
            "0" => ReadAt::Any,
            _ => params.read_at()?,
        };
        let mut token = String::new();
        let mut revision;
        loop {
            let page = api
                .list(target.kind, &target.namespace, &filter, 0, &token, read)
                .await?;
            revision = page.revision;
            for s in &page.items {
                lines.push(encoding.line("ADDED", served(&s.object), &mut first));
            }
            if page.continue_token.is_empty() {
                break;
            }
            token = page.continue_token;
        }
        if bookmark_end {
            lines.push(encoding.bookmark(revision, true, &mut first));
        }
        revision
    } else {
        params.resource_version.parse::<i64>().map_err(|_| {
            ApiError::bad_request(format!(
                "resourceVersion: invalid value {:?}",
                params.resource_version
            ))
        })?
    };
    let request = pb::WatchRequest {
        kind: target.kind.wire_name().into_owned(),
        namespace: target.namespace.clone(),
        selectors: Some(pb::Selectors {
            label_selector: params.label_selector.clone(),
            field_selector: params.field_selector.clone(),
        }),
        resource_version: from,
        allow_bookmarks: params.allow_watch_bookmarks,
    };
    let events = match api.watch(request) {
        Ok(rx) => Some(rx),
        // Too old to watch from: the stream is one ERROR event, as kube-apiserver sends it.
        Err(e @ ClusterError::TooOld { .. }) => {
            lines.push(encoding.line("ERROR", ApiError::from(e).to_status(), &mut first));
            None
        }
        Err(e) => return Err(e.into()),
    };
    let timeout = params
        .timeout_seconds
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_TIMEOUT);
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(QUEUE);
    tokio::spawn(async move {
        for line in lines {
            if tx.send(Ok(line)).await.is_err() {
                return;
            }
        }
        let Some(mut events) = events else { return };
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            let event = tokio::select! {
                e = events.recv() => e,
                _ = &mut deadline => None,
                _ = tx.closed() => None,
            };
            let Some(event) = event else { break };
            let line = match event {
                Ok(e) => match to_line(&encoding, e, &mut first) {
                    Some(line) => line,
                    None => continue,
                },
                Err(e) => {
                    let _ = tx
                        .send(Ok(encoding.line(
                            "ERROR",
                            ApiError::from(e).to_status(),
                            &mut first,
                        )))
                        .await;
                    break;
                }
            };
            if tx.send(Ok(line)).await.is_err() {
                break;
            }
        }
    });
    let mut response = Body::from_stream(ReceiverStream::new(rx)).into_response();
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

fn to_line(encoding: &Encoding, e: pb::WatchEvent, first: &mut bool) -> Option<Bytes> {
    let ty = match Type::try_from(e.r#type).ok()? {
        Type::Added => "ADDED",
        Type::Modified => "MODIFIED",
        Type::Deleted => "DELETED",
        Type::Bookmark => return Some(encoding.bookmark(e.revision, false, first)),
    };
    let object: Value = serde_json::from_slice(&e.object?.json).ok()?;
    Some(encoding.line(ty, object, first))
}
