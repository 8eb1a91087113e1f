//! How the workload controllers that make pods one by one (Jobs, DaemonSets) create and
//! delete them, count them off their owner's expectations, record the events Kubernetes
//! records (`SuccessfulCreate`, `FailedCreate`, `SuccessfulDelete`), and write a declared
//! kind's status: kube-controller-manager's `PodControl`, in one place.

use std::sync::Arc;

use skiff_proto::api::apps::PodTemplateSpec;
use skiff_proto::api::{GenericObject, Kind, Object, ObjectMeta, ObjectReference, Pod};
use skiff_proto::client::{ClientError, Code, Event};
use skiff_proto::recorder::EventRecorder;

use crate::cache::controller_of;
use crate::core::{Context, controller_ref, gone_is_none, owner_key};
use crate::replicaset::plan::slow_start;

/// A pod of `template` for the owner of `kind` described by `owner`: in its namespace,
/// controlled by it, named by the store from `generate_name`, with nothing of an object that
/// existed (name, uid, version, creation time) carried over.
pub fn pod_of_template(
    template: &PodTemplateSpec,
    kind: Kind,
    owner: &ObjectMeta,
    generate_name: String,
) -> Pod {
    let mut meta = template.metadata.clone();
    meta.name.clear();
    meta.uid.clear();
    meta.resource_version.clear();
    meta.creation_timestamp = None;
    meta.generate_name = generate_name;
    meta.namespace = owner.namespace.clone();
    meta.owner_references = vec![controller_ref(kind, owner)];
    Pod {
        metadata: meta,
        spec: template.spec.clone(),
        ..Pod::default()
    }
}

/// A declared object (`key` in its controller's queue) as stored, and read as the
/// controller's typed view `T`; `None` when it is not a declared kind's or does not read
/// (logged: the controller skips it).
pub fn typed<'a, T: serde::de::DeserializeOwned>(
    object: &'a Object,
    key: &str,
) -> Option<(&'a GenericObject, T)> {
    let Object::Generic(_, stored) = object else {
        return None;
    };
    match stored.typed() {
        Ok(t) => Some((stored, t)),
        Err(e) => {
            tracing::warn!(kind = %object.kind().name(), object = key, error = %e, "skipping an object that does not read");
            None
        }
    }
}

/// When a workload's sync looks again: when the first of its `pods` that is ready becomes
/// available (`minReadySeconds`), or when the expectations it waits on (`waiting`) give up,
/// whichever is sooner.
pub fn next_look(
    pods: &[&Pod],
    min_ready: i32,
    now: i64,
    waiting: Option<std::time::Duration>,
) -> crate::core::Requeue {
    let due = pods
        .iter()
        .filter_map(|p| crate::pods::seconds_to_available(p, min_ready, now))
        .min()
        .map(|s| std::time::Duration::from_secs(s.unsigned_abs()));
    match (due, waiting) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The pods controlled by the owner with `uid`, as the cache has them.
pub fn controlled(ctx: &Context, uid: &str) -> Vec<Arc<Object>> {
    ctx.pods
        .owned_by(uid)
        .into_iter()
        .filter(|o| controller_of(o).is_some_and(|r| r.uid == uid))
        .collect()
}

/// The pods among `objects`.
pub fn pods(objects: &[Arc<Object>]) -> Vec<&Pod> {
    objects
        .iter()
        .filter_map(|o| match &**o {
            Object::Pod(p) => Some(p),
            _ => None,
        })
        .collect()
}

/// A pod event, counted off the expectations of its controller of `kind`; the controller's
/// queue key, if the pod has one of that kind.
pub fn observe(ctx: &Context, event: &Event, kind: Kind) -> Option<String> {
    let (object, deleted) = match event {
        Event::Added(o) | Event::Modified(o) => (o, false),
        Event::Deleted(o) => (o, true),
        Event::Bookmark(_) => return None,
    };
    let key = owner_key(object, kind)?;
    let uid = controller_of(object).map_or("", |r| r.uid.as_str());
    if deleted || object.metadata().deletion_timestamp.is_some() {
        ctx.expectations.deleted(uid, &object.key());
    } else if matches!(event, Event::Added(_)) {
        ctx.expectations.created(uid, 1);
    }
    Some(key)
}

/// Creates `pods` for the owner `me` (uid `uid`), in slow-start batches; `expected` more
/// creates were counted in the owner's expectations than there are pods (templates that did
/// not decode), and are given back. Returns the first error.
pub async fn create(
    ctx: &Context,
    events: &EventRecorder,
    me: &ObjectReference,
    uid: &str,
    pods: Vec<Object>,
    expected: usize,
) -> Option<ClientError> {
    let client = &ctx.client;
    let short = expected.saturating_sub(pods.len());
    let (created, skipped, error) = slow_start(pods.len(), |batch| {
        let batch = pods[batch].to_vec();
        async move { client.create_many(&batch).await }
    })
    .await;
    let failed = pods.len() - created.len() - skipped;
    ctx.expectations.created(
        uid,
        short + skipped + if error.is_some() { failed } else { 0 },
    );
    ctx.metrics.pod_writes("create", "ok", created.len());
    for o in &created {
        events.normal(
            me.clone(),
            "SuccessfulCreate",
            format!("Created pod: {}", o.metadata().name),
        );
    }
    if let Some(e) = &error {
        ctx.metrics.pod_writes("create", "error", failed);
        events.warning(me.clone(), "FailedCreate", format!("Error creating: {e}"));
    }
    error
}

/// Deletes the pods `names` of `namespace` for the owner `me` (uid `uid`); a pod already
/// gone is no error. Returns the first error.
pub async fn delete(
    ctx: &Context,
    events: &EventRecorder,
    me: &ObjectReference,
    uid: &str,
    namespace: &str,
    names: &[String],
) -> Option<ClientError> {
    let client = &ctx.client;
    let results = futures::future::join_all(
        names
            .iter()
            .map(|n| client.delete(Kind::Pod, namespace, n, 0, None)),
    )
    .await;
    let mut first_error = None;
    for (name, r) in names.iter().zip(results) {
        match r {
            Ok(_) => {
                ctx.metrics.pod_writes("delete", "ok", 1);
                events.normal(
                    me.clone(),
                    "SuccessfulDelete",
                    format!("Deleted pod: {name}"),
                );
            }
            Err(e) => {
                ctx.expectations
                    .deleted(uid, &Kind::Pod.key(namespace, name));
                if e.code() != Some(Code::NotFound) {
                    ctx.metrics.pod_writes("delete", "error", 1);
                    first_error.get_or_insert(e);
                }
            }
        }
    }
    first_error
}

/// Writes the status of `next`, an object of the declared `kind`; the object as written,
/// or `None` if it is gone.
pub async fn write_status(
    ctx: &Context,
    kind: Kind,
    next: GenericObject,
) -> Result<Option<GenericObject>, ClientError> {
    let Kind::Generic(g) = kind else {
        unreachable!("invariant: {} is a declared kind", kind.name())
    };
    let written = gone_is_none(ctx.client.update_status(&Object::Generic(g, next)).await)?;
    Ok(written.and_then(|o| match o {
        Object::Generic(_, g) => Some(g),
        _ => None,
    }))
}
