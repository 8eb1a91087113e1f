//! CustomResourceDefinitions put into service, as kube-apiserver's apiextensions controllers
//! do: every API server watches the CRDs and serves the kinds they define
//! ([`skiff_proto::api::custom`]); the CRD's status says so (`NamesAccepted`, `Established`,
//! the accepted names and the stored versions). A deleted CRD is `Terminating` while its
//! objects are deleted (each honouring its own finalizers); then its finalizer goes, and the
//! CRD with it.
//!
//! ```text
//!   list CRDs at R ─► define each ─► watch from R ─┬─ put    ─► define, status
//!                                                  ├─ delete ─► retire
//!                                                  └─ deletionTimestamp ─► delete objects,
//!                                                     then the finalizer (checked again each
//!                                                     second while objects remain)
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt as _;
use serde_json::{Value, json};
use skiff_proto::api::custom::{self, CLEANUP_FINALIZER, crd_kind};
use skiff_proto::api::{GenericKind, GenericObject, Kind, Object, Time};
use skiff_proto::backoff::Backoff;
use skiff_proto::cluster::v1 as pb;
use skiff_store::request::{DeleteRangeRequest, RequestOp, TxnRequest};
use tokio_stream::wrappers::ReceiverStream;

use super::{ClusterApi, ClusterError, Part, prefix_end};

/// How often a terminating CRD's remaining objects are looked at again.
const CLEANUP_EVERY: Duration = Duration::from_secs(1);

/// Serves the CRDs' kinds until `stop`: lists them, then follows a watch (watching again when
/// it ends), keeping each CRD's status current and finishing deleted ones.
pub async fn maintain(
    api: ClusterApi,
    stop: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    tokio::select! {
        () = run(&api) => {}
        () = stop.cancelled() => {}
    }
    Ok(())
}

async fn run(api: &ClusterApi) {
    let kind = crd_kind();
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    // terminating CRDs, by name, as last seen
    let mut terminating: BTreeMap<String, GenericObject> = BTreeMap::new();
    loop {
        let (key, end) = super::watch::key_range(kind, "");
        let listed = match api.range(kind, &key, &end, 0) {
            Ok(listed) => listed,
            Err(e) => {
                tracing::debug!(error = %e, "listing CustomResourceDefinitions; trying again");
                backoff.wait().await;
                continue;
            }
        };
        let (revision, items) = listed;
        let names: Vec<String> = items
            .iter()
            .map(|s| s.object.metadata().name.clone())
            .collect();
        // what went while no watch was open
        for name in served_crds() {
            if !names.contains(&name) {
                custom::retire(&name);
            }
        }
        terminating.clear();
        for stored in items {
            if let Object::Generic(_, crd) = stored.object {
                observe(api, crd, &mut terminating).await;
            }
        }
        let req = pb::WatchRequest {
            kind: kind.name().to_owned(),
            resource_version: revision,
            ..pb::WatchRequest::default()
        };
        let rx = match api.watch(req) {
            Ok(rx) => rx,
            Err(e) => {
                tracing::warn!(error = %e, "watching CustomResourceDefinitions");
                backoff.wait().await;
                continue;
            }
        };
        backoff.reset();
        let mut events = ReceiverStream::new(rx);
        let mut tick = tokio::time::interval(CLEANUP_EVERY);
        loop {
            tokio::select! {
                event = events.next() => {
                    let Some(Ok(event)) = event else {
                        tracing::info!("the CustomResourceDefinition watch ended; listing again");
                        break;
                    };
                    handle(api, event, &mut terminating).await;
                }
                _ = tick.tick(), if !terminating.is_empty() => {
                    let pending: Vec<GenericObject> = terminating.values().cloned().collect();
                    for crd in pending {
                        finish(api, &crd, &mut terminating).await;
                    }
                }
            }
        }
        backoff.wait().await;
    }
}

/// The names of the CRDs whose kinds are served now.
fn served_crds() -> Vec<String> {
    let mut names: Vec<String> = custom::served()
        .into_iter()
        .filter_map(|g| custom::live(g).map(|l| l.crd.clone()))
        .collect();
    names.dedup();
    names
}

async fn handle(
    api: &ClusterApi,
    event: pb::WatchEvent,
    terminating: &mut BTreeMap<String, GenericObject>,
) {
    let json = event.object.map(|o| o.json).unwrap_or_default();
    let object = match Object::from_json(crd_kind(), &json) {
        Ok(Object::Generic(_, crd)) => crd,
        Ok(_) => return,
        Err(e) => {
            tracing::warn!(error = %e, "a CustomResourceDefinition event that does not decode");
            return;
        }
    };
    if event.r#type == pb::watch_event::Type::Deleted as i32 {
        terminating.remove(&object.metadata.name);
        custom::retire(&object.metadata.name);
        tracing::info!(crd = %object.metadata.name, "no longer serving a custom resource");
        return;
    }
    observe(api, object, terminating).await;
}

/// Serves what `crd` defines and writes its status; a deleted one is finished.
async fn observe(
    api: &ClusterApi,
    crd: GenericObject,
    terminating: &mut BTreeMap<String, GenericObject>,
) {
    let kinds = custom::define(&crd);
    if crd.metadata.deletion_timestamp.is_some() {
        terminating.insert(crd.metadata.name.clone(), crd.clone());
        finish(api, &crd, terminating).await;
        return;
    }
    tracing::debug!(crd = %crd.metadata.name, versions = kinds.len(), "serving a custom resource");
    write_status(api, &crd, established(&crd)).await;
}

/// The status a served CRD has: its names accepted, established, its storage version among
/// the stored ones.
fn established(crd: &GenericObject) -> Value {
    let mut status = crd.at("/status").cloned().unwrap_or_else(|| json!({}));
    let names = crd.at("/spec/names").cloned().unwrap_or_else(|| json!({}));
    status["acceptedNames"] = names;
    set_condition(
        &mut status,
        "NamesAccepted",
        "True",
        "NoConflicts",
        "no conflicts found",
    );
    set_condition(
        &mut status,
        "Established",
        "True",
        "InitialNamesAccepted",
        "the initial names have been accepted",
    );
    let storage = crd
        .at("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        })
        .and_then(|v| v.get("name").and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned();
    let stored = status
        .as_object_mut()
        .expect("invariant: a status is an object")
        .entry("storedVersions")
        .or_insert_with(|| json!([]));
    if let Some(list) = stored.as_array_mut()
        && !storage.is_empty()
        && !list.iter().any(|v| v == storage.as_str())
    {
        list.push(json!(storage));
    }
    status
}

/// Sets the condition of `type_` in `status`, keeping its transition time when its status
/// does not change.
fn set_condition(status: &mut Value, type_: &str, value: &str, reason: &str, message: &str) {
    let conditions = status
        .as_object_mut()
        .expect("invariant: a status is an object")
        .entry("conditions")
        .or_insert_with(|| json!([]));
    let Some(list) = conditions.as_array_mut() else {
        return;
    };
    let now = Time::now();
    match list.iter_mut().find(|c| c["type"] == type_) {
        Some(c) => {
            if c["status"] != value {
                c["lastTransitionTime"] = json!(now);
            }
            c["status"] = json!(value);
            c["reason"] = json!(reason);
            c["message"] = json!(message);
        }
        None => list.push(json!({
            "type": type_, "status": value, "reason": reason, "message": message,
            "lastTransitionTime": now,
        })),
    }
}

/// Writes `status` to `crd` unless it has it already. A lost race is left to the event the
/// other write makes.
async fn write_status(api: &ClusterApi, crd: &GenericObject, status: Value) {
    if crd.at("/status") == Some(&status) {
        return;
    }
    let mut next = crd.clone();
    next.body.insert("status".into(), status);
    match api
        .update(Object::Generic(generic(), next), Part::Status, false)
        .await
    {
        Ok(_) | Err(ClusterError::Conflict { .. } | ClusterError::NotFound { .. }) => {}
        Err(e) => {
            tracing::warn!(error = %e, crd = %crd.metadata.name, "writing a CustomResourceDefinition's status");
        }
    }
}

fn generic() -> GenericKind {
    match crd_kind() {
        Kind::Generic(g) => g,
        _ => unreachable!("invariant: CustomResourceDefinition is declared"),
    }
}

/// Deletes a terminating CRD's objects; once none is left, removes the CRD's finalizer.
async fn finish(
    api: &ClusterApi,
    crd: &GenericObject,
    terminating: &mut BTreeMap<String, GenericObject>,
) {
    let name = crd.metadata.name.clone();
    if !crd
        .metadata
        .finalizers
        .iter()
        .any(|f| f == CLEANUP_FINALIZER)
    {
        terminating.remove(&name);
        return;
    }
    let mut status = crd.at("/status").cloned().unwrap_or_else(|| json!({}));
    set_condition(
        &mut status,
        "Terminating",
        "True",
        "InstanceDeletionInProgress",
        "CustomResource deletion is in progress",
    );
    write_status(api, crd, status).await;
    match delete_objects(api, crd).await {
        Ok(0) => {}
        Ok(left) => {
            tracing::debug!(crd = %name, left, "waiting for a CRD's objects to go");
            return;
        }
        Err(e) => {
            tracing::warn!(error = %e, crd = %name, "deleting a CRD's objects");
            return;
        }
    }
    // Read again: the status write above changed the version.
    let current = match api.get_local(crd_kind(), "", &name) {
        Ok((_, Some(stored))) => stored.object,
        Ok((_, None)) => {
            terminating.remove(&name);
            return;
        }
        Err(e) => {
            tracing::warn!(error = %e, crd = %name, "reading a terminating CRD");
            return;
        }
    };
    let mut next = current;
    next.metadata_mut()
        .finalizers
        .retain(|f| f != CLEANUP_FINALIZER);
    match api.update(next, Part::Main, false).await {
        Ok(_) => {
            terminating.remove(&name);
            tracing::info!(crd = %name, "a deleted CRD's objects are gone, and so is it");
        }
        Err(e) => {
            tracing::debug!(error = %e, crd = %name, "removing a CRD's finalizer; trying again")
        }
    }
}

/// Deletes the objects of `crd`'s kind; how many are left (deleted but held by their own
/// finalizers). With no version served, the objects cannot be read as any kind, so their keys
/// go at once.
async fn delete_objects(api: &ClusterApi, crd: &GenericObject) -> Result<usize, ClusterError> {
    let Some(kind) = custom::served()
        .into_iter()
        .find(|g| custom::live(*g).is_some_and(|l| l.crd == crd.metadata.name))
    else {
        let prefix = format!(
            "/registry/{}/{}/",
            crd.text("/spec/group"),
            crd.text("/spec/names/plural")
        );
        let delete = RequestOp::DeleteRange(DeleteRangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: prefix_end(prefix.as_bytes()),
            prev_kv: false,
        });
        api.txn(TxnRequest {
            success: vec![delete],
            ..TxnRequest::default()
        })
        .await?;
        return Ok(0);
    };
    let kind = Kind::Generic(kind);
    let (key, end) = super::watch::key_range(kind, "");
    let (_, items) = api.range(kind, &key, &end, 0)?;
    let left = items.len();
    for stored in items {
        let meta = stored.object.metadata();
        if meta.deletion_timestamp.is_some() {
            continue;
        }
        match api
            .delete(kind, &meta.namespace, &meta.name, 0, None, None)
            .await
        {
            Ok(_) | Err(ClusterError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    // Deleted now or held by a finalizer: looked at again next time.
    Ok(left)
}
