//! The typed cluster API on a real three-member cluster: validation and admission with their
//! messages, compare-and-swap, the status path, graceful deletion, batch Bind, and watches
//! filtered by node.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{Cluster, eventually};
use futures::StreamExt;
use serde_json::json;
use skiff_proto::api::meta::{FOREGROUND_DELETION_FINALIZER, ORPHAN_FINALIZER};
use skiff_proto::api::{
    ConditionStatus, DeletionPropagation, Kind, NamespacePhase, Object, PodConditionType, PodPhase,
};
use skiff_proto::client::Code;
use skiff_proto::client::{ClusterClient, Event, ListParams, WatchParams};
use skiff_proto::cluster::v1::Binding;
use skiff_proto::cluster::v1::bind_result::Outcome;

async fn next_event<S>(s: &mut S) -> Event
where
    S: futures::Stream<Item = skiff_proto::client::Result<Event>> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .expect("an event within 10 s")
        .expect("stream open")
        .expect("event")
}

fn obj(kind: Kind, v: serde_json::Value) -> Object {
    Object::from_json(kind, v.to_string().as_bytes()).expect("test object decodes")
}

fn pod(ns: &str, name: &str, cpu: Option<&str>) -> Object {
    let resources = match cpu {
        Some(c) => {
            json!({"requests": {"cpu": c, "memory": "16Mi"}, "limits": {"cpu": c, "memory": "16Mi"}})
        }
        None => json!({}),
    };
    obj(
        Kind::Pod,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "localhost/skiff/busybox:1", "resources": resources}]}
        }),
    )
}

fn node(name: &str) -> Object {
    obj(
        Kind::Node,
        json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
        }),
    )
}

fn namespace(name: &str) -> Object {
    obj(
        Kind::Namespace,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
}

/// A binding of `namespace/pod` to `node`, whatever the pod's version.
fn binding(namespace: &str, pod: &str, node: &str) -> Binding {
    Binding {
        namespace: namespace.into(),
        pod: pod.into(),
        node: node.into(),
        pod_resource_version: 0,
    }
}

fn expect_err(r: skiff_proto::client::Result<Object>, code: Code, msg: &str) {
    match r {
        Err(e) => {
            assert_eq!(e.code(), Some(code), "{e}");
            assert!(e.to_string().contains(msg), "{e:?} does not say {msg:?}");
        }
        Ok(o) => panic!("expected {code:?} {msg:?}, got {o:?}"),
    }
}

/// Namespace `ns` with a ResourceQuota `q` of `pods` pods and one CPU of requests.
async fn namespace_with_quota(api: &ClusterClient, ns: &str, pods: &str) {
    api.create(&namespace(ns)).await.expect("namespace");
    let q = obj(
        Kind::ResourceQuota,
        json!({"metadata": {"name": "q", "namespace": ns},
               "spec": {"hard": {"pods": pods, "requests.cpu": "1"}}}),
    );
    api.create(&q).await.expect("quota");
}

/// Creating pod `name` (requesting `cpu`) in namespace `quota` is refused by quota
/// admission, saying `msg`.
async fn refused_by_quota(api: &ClusterClient, name: &str, cpu: &str, msg: &str) {
    expect_err(
        api.create(&pod("quota", name, Some(cpu))).await,
        Code::FailedPrecondition,
        msg,
    );
}

async fn client(c: &Cluster) -> ClusterClient {
    ClusterClient::connect(&c.endpoints()).expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_and_admission_refuse_with_reasons_and_write_nothing() {
    let cluster = Cluster::start(3).await;
    let api = client(&cluster).await;
    expect_err(
        api.create(&pod("nope", "p", None)).await,
        Code::NotFound,
        "namespaces \"nope\" not found",
    );
    api.create(&namespace("team")).await.expect("namespace");
    // Validation names the field.
    expect_err(
        api.create(&pod("team", "Bad_Name", None)).await,
        Code::InvalidArgument,
        "metadata.name",
    );
    let over = obj(
        Kind::Pod,
        json!({"metadata": {"name": "over", "namespace": "team"},
               "spec": {"containers": [{"name": "c", "image": "i",
                 "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]}}),
    );
    expect_err(
        api.create(&over).await,
        Code::InvalidArgument,
        "spec.containers[0].resources.requests",
    );
    // LimitRange: defaults filled in, minimum enforced.
    let lr = obj(
        Kind::LimitRange,
        json!({"metadata": {"name": "limits", "namespace": "team"},
               "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m"},
                                    "defaultRequest": {"cpu": "100m"}, "min": {"cpu": "50m"}}]}}),
    );
    api.create(&lr).await.expect("limit range");
    let created = api
        .create(&pod("team", "defaulted", None))
        .await
        .expect("pod");
    let Object::Pod(p) = &created else {
        panic!("not a pod")
    };
    let res = &p.spec.containers[0].resources;
    assert_eq!(res.requests["cpu"].to_string(), "100m");
    assert_eq!(res.limits["cpu"].to_string(), "500m");
    // ServiceAccount admission: a pod that names no service account runs as `default`; one
    // named by the deprecated field is kept, in both fields.
    assert_eq!(
        (
            p.spec.service_account_name.as_str(),
            p.spec.service_account.as_str()
        ),
        ("default", "default")
    );
    let mut builder = pod("team", "robot", Some("200m"));
    if let Object::Pod(p) = &mut builder {
        p.spec.service_account = "builder".into();
    }
    let Object::Pod(p) = api.create(&builder).await.expect("pod") else {
        panic!("not a pod")
    };
    assert_eq!(
        (
            p.spec.service_account_name.as_str(),
            p.spec.service_account.as_str()
        ),
        ("builder", "builder")
    );
    expect_err(
        api.create(&pod("team", "tiny", Some("10m"))).await,
        Code::FailedPrecondition,
        "minimum cpu usage per Container is 50m, but request is 10m",
    );
    // LimitRange maximum and limit/request ratio.
    api.create(&namespace("capped")).await.expect("namespace");
    let lr = obj(
        Kind::LimitRange,
        json!({"metadata": {"name": "caps", "namespace": "capped"},
               "spec": {"limits": [{"type": "Container", "max": {"cpu": "1"},
                                    "maxLimitRequestRatio": {"cpu": "2"}}]}}),
    );
    api.create(&lr).await.expect("limit range");
    expect_err(
        api.create(&pod("capped", "big", Some("2"))).await,
        Code::FailedPrecondition,
        "maximum cpu usage per Container is 1, but limit is 2",
    );
    let skewed = obj(
        Kind::Pod,
        json!({"metadata": {"name": "skewed", "namespace": "capped"},
               "spec": {"containers": [{"name": "c", "image": "i",
                 "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}}}]}}),
    );
    expect_err(
        api.create(&skewed).await,
        Code::FailedPrecondition,
        "cpu max limit to request ratio per Container is 2, but provided ratio is 10.000000",
    );
    api.create(&pod("capped", "fits", Some("500m")))
        .await
        .expect("within the range");
    // Enumerations are refused as the body decodes, at their path (a typed client cannot
    // even send one, so the request is written by hand).
    let mut bad_policy = pod("capped", "policy", Some("500m")).to_json_value();
    bad_policy["spec"]["restartPolicy"] = json!("Sometimes");
    let mut raw = skiff_proto::cluster::v1::cluster_client::ClusterClient::connect(
        cluster.members[0].client_url.clone(),
    )
    .await
    .expect("connect");
    let refused = raw
        .create(skiff_proto::cluster::v1::CreateRequest {
            object: Some(skiff_proto::cluster::v1::Object {
                kind: "Pod".into(),
                json: bad_policy.to_string().into_bytes(),
            }),
            ..Default::default()
        })
        .await
        .map(|_| Object::Pod(Default::default()))
        .map_err(Into::into);
    expect_err(
        refused,
        Code::InvalidArgument,
        "spec.restartPolicy: unsupported value \"Sometimes\"",
    );
    // ResourceQuota: count and request totals.
    namespace_with_quota(&api, "quota", "2").await;
    api.create(&pod("quota", "a", Some("400m")))
        .await
        .expect("first pod fits");
    refused_by_quota(
        &api,
        "b",
        "700m",
        "exceeded quota: q, requested: requests.cpu=700m, used: requests.cpu=400m, limited: requests.cpu=1",
    )
    .await;
    expect_err(
        api.create(&pod("quota", "c", None)).await,
        Code::FailedPrecondition,
        "failed quota: q: must specify requests.cpu",
    );
    api.create(&pod("quota", "b", Some("500m")))
        .await
        .expect("second pod fits");
    refused_by_quota(
        &api,
        "d",
        "10m",
        "exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2",
    )
    .await;
    let (pods, _) = api
        .list(Kind::Pod, &ListParams::default().namespace("quota"))
        .await
        .expect("list");
    assert_eq!(pods.len(), 2, "refused pods were not written");
    // Duplicates.
    expect_err(
        api.create(&namespace("team")).await,
        Code::AlreadyExists,
        "namespaces \"team\" already exists",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_and_swap_status_path_and_graceful_deletion() {
    let cluster = Cluster::start(3).await;
    let api = client(&cluster).await;
    api.create(&node("n1")).await.expect("node");
    let created = api
        .create(&pod("default", "web", Some("100m")))
        .await
        .expect("pod in default");
    let rv = created.metadata().resource_version.clone();
    // Update: labels change, status stays as stored even if the request carries one.
    let mut changed = created.clone();
    changed
        .metadata_mut()
        .labels
        .insert("tier".into(), "front".into());
    if let Object::Pod(p) = &mut changed {
        p.status.get_or_insert_with(Default::default).phase = Some(PodPhase::Running);
    }
    let updated = api.update(&changed).await.expect("update");
    assert_eq!(updated.metadata().labels["tier"], "front");
    let Object::Pod(up) = &updated else { panic!() };
    assert_eq!(up.phase(), Some(PodPhase::Pending));
    // The old resourceVersion now conflicts.
    let mut stale = changed.clone();
    stale.metadata_mut().resource_version = rv.clone();
    expect_err(
        api.update(&stale).await,
        Code::Aborted,
        "the object has been modified",
    );
    // Spec changes outside the allowed set are refused.
    let mut bad = updated.clone();
    if let Object::Pod(p) = &mut bad {
        p.spec.containers[0].command = vec!["sh".into()];
    }
    expect_err(
        api.update(&bad).await,
        Code::InvalidArgument,
        "pod updates may not change fields",
    );
    // UpdateStatus: status changes, spec does not.
    let mut st = updated.clone();
    if let Object::Pod(p) = &mut st {
        p.status.get_or_insert_with(Default::default).phase = Some(PodPhase::Running);
        p.spec.containers[0].image = "ignored".into();
    }
    let after = api.update_status(&st).await.expect("status");
    let Object::Pod(ap) = &after else { panic!() };
    assert_eq!(ap.phase(), Some(PodPhase::Running));
    assert_eq!(ap.spec.containers[0].image, "localhost/skiff/busybox:1");
    // Delete with a stale resourceVersion conflicts.
    let r = api
        .delete(Kind::Pod, "default", "web", rv.parse().expect("rv"), None)
        .await;
    expect_err(r, Code::Aborted, "the object has been modified");
    // An unbound pod goes at once.
    api.delete(Kind::Pod, "default", "web", 0, None)
        .await
        .expect("delete");
    assert!(
        api.get(Kind::Pod, "default", "web")
            .await
            .expect("get")
            .is_none()
    );
    // A bound pod is deleted gracefully: it stays, terminating, until its agent removes it.
    api.create(&pod("default", "bound", Some("100m")))
        .await
        .expect("pod");
    let results = api
        .bind(vec![binding("default", "bound", "n1")])
        .await
        .expect("bind");
    assert_eq!(results[0].outcome, Outcome::Bound as i32);
    let terminating = api
        .delete(Kind::Pod, "default", "bound", 0, Some(30))
        .await
        .expect("graceful delete");
    assert!(terminating.metadata().deletion_timestamp.is_some());
    assert_eq!(
        terminating.metadata().deletion_grace_period_seconds,
        Some(30)
    );
    assert!(
        api.get(Kind::Pod, "default", "bound")
            .await
            .expect("get")
            .is_some()
    );
    // Grace 0 removes it (what the agent does once the containers stopped).
    api.delete(Kind::Pod, "default", "bound", 0, Some(0))
        .await
        .expect("final delete");
    assert!(
        api.get(Kind::Pod, "default", "bound")
            .await
            .expect("get")
            .is_none()
    );
}

fn deployment(name: &str, finalizers: &[&str]) -> Object {
    obj(
        Kind::Deployment,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default", "finalizers": finalizers},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "image": "localhost/skiff/busybox:1"}]}
                }
            }
        }),
    )
}

/// The same object without its finalizers: what the garbage collector writes when it is done.
async fn release(api: &ClusterClient, held: &Object) {
    let mut released = held.clone();
    released.metadata_mut().finalizers.clear();
    api.update(&released).await.expect("finalizers removed");
}

/// Deletion propagation, kube-apiserver's way: Orphan and Foreground leave the object marked
/// (a deletionTimestamp) and held by the garbage collector's finalizer, beside any other
/// finalizer, until an update removes it; Background, and a delete naming no policy, remove
/// it at once. A repeated delete changes nothing unless it changes the policy; kinds that own
/// nothing (a bound pod) are deleted as in the background, with their grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_propagation_marks_with_the_collectors_finalizers() {
    let cluster = Cluster::start(3).await;
    let api = client(&cluster).await;
    let gone = |name: &'static str| {
        let api = api.clone();
        async move {
            api.get(Kind::Deployment, "default", name)
                .await
                .expect("get")
                .is_none()
        }
    };

    api.create(&deployment("orphaned", &[]))
        .await
        .expect("create");
    let marked = api
        .delete_propagating(
            Kind::Deployment,
            "default",
            "orphaned",
            0,
            DeletionPropagation::Orphan,
        )
        .await
        .expect("orphaning delete");
    assert!(marked.metadata().deletion_timestamp.is_some());
    assert_eq!(marked.metadata().finalizers, [ORPHAN_FINALIZER]);
    // Deleted again without a policy: the finalizer on the object decides; nothing changes.
    let again = api
        .delete(Kind::Deployment, "default", "orphaned", 0, None)
        .await
        .expect("second delete");
    assert_eq!(
        again.metadata().resource_version,
        marked.metadata().resource_version
    );
    assert!(!gone("orphaned").await);
    release(&api, &again).await;
    assert!(gone("orphaned").await);

    // Foreground, then a change of mind to Orphan: one collector finalizer, never both.
    api.create(&deployment("fore", &["example.com/keep"]))
        .await
        .expect("create");
    let fore = api
        .delete_propagating(
            Kind::Deployment,
            "default",
            "fore",
            0,
            DeletionPropagation::Foreground,
        )
        .await
        .expect("foreground delete");
    assert_eq!(
        fore.metadata().finalizers,
        ["example.com/keep", FOREGROUND_DELETION_FINALIZER]
    );
    let orphan = api
        .delete_propagating(
            Kind::Deployment,
            "default",
            "fore",
            0,
            DeletionPropagation::Orphan,
        )
        .await
        .expect("orphaning delete");
    assert_eq!(
        orphan.metadata().finalizers,
        ["example.com/keep", ORPHAN_FINALIZER]
    );
    assert_eq!(
        orphan.metadata().deletion_timestamp,
        fore.metadata().deletion_timestamp
    );
    // Background drops the collector's finalizer; the other still holds the object.
    let background = api
        .delete_propagating(
            Kind::Deployment,
            "default",
            "fore",
            0,
            DeletionPropagation::Background,
        )
        .await
        .expect("background delete");
    assert_eq!(background.metadata().finalizers, ["example.com/keep"]);
    release(&api, &background).await;
    assert!(gone("fore").await);

    // Background and the default remove at once.
    api.create(&deployment("back", &[])).await.expect("create");
    api.delete_propagating(
        Kind::Deployment,
        "default",
        "back",
        0,
        DeletionPropagation::Background,
    )
    .await
    .expect("background delete");
    assert!(gone("back").await);
    api.create(&deployment("plain", &[])).await.expect("create");
    api.delete(Kind::Deployment, "default", "plain", 0, None)
        .await
        .expect("delete");
    assert!(gone("plain").await);

    // A bound pod under a foreground delete: pods own nothing the collector would wait for,
    // so it is deleted as in the background, gracefully, with no collector finalizer that
    // could release it before its agent has stopped it.
    api.create(&node("n1")).await.expect("node");
    api.create(&pod("default", "bound", None))
        .await
        .expect("pod");
    api.bind(vec![binding("default", "bound", "n1")])
        .await
        .expect("bind");
    let terminating = api
        .delete_propagating(
            Kind::Pod,
            "default",
            "bound",
            0,
            DeletionPropagation::Foreground,
        )
        .await
        .expect("foreground delete of a pod");
    assert_eq!(
        terminating.metadata().deletion_grace_period_seconds,
        Some(30)
    );
    assert!(terminating.metadata().finalizers.is_empty());
    api.delete(Kind::Pod, "default", "bound", 0, Some(0))
        .await
        .expect("final delete");
    assert!(
        api.get(Kind::Pod, "default", "bound")
            .await
            .expect("get")
            .is_none()
    );

    // Whatever the policy, what is not there is not found.
    let raw = api
        .delete_propagating(Kind::Pod, "default", "nope", 0, DeletionPropagation::Orphan)
        .await;
    expect_err(raw, Code::NotFound, "pods \"nope\" not found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_bind_commits_the_good_bindings_and_reports_the_bad_ones() {
    let cluster = Cluster::start(3).await;
    let api = client(&cluster).await;
    api.create(&node("n1")).await.expect("node");
    let mut rvs = BTreeMap::new();
    for name in ["a", "b", "c", "d", "e"] {
        let p = api
            .create(&pod("default", name, Some("100m")))
            .await
            .expect("pod");
        rvs.insert(name, p.metadata().revision().expect("rv"));
    }
    let bind1 = |pod: &str, node: &str, rv: i64| Binding {
        pod_resource_version: rv,
        ..binding("default", pod, node)
    };
    // d is bound beforehand; e is terminating.
    api.bind(vec![bind1("d", "n1", 0)]).await.expect("bind d");
    let results = api.bind(vec![bind1("e", "n1", 0)]).await.expect("bind e");
    assert_eq!(results[0].outcome, Outcome::Bound as i32);
    api.create(&pod("default", "f", Some("100m")))
        .await
        .expect("pod");
    let results = api
        .bind(vec![
            bind1("a", "n1", rvs["a"]),
            bind1("b", "n1", rvs["b"] - 1),
            bind1("missing", "n1", 0),
            bind1("d", "n1", 0),
            bind1("c", "no-such-node", 0),
            bind1("a", "n1", 0),
            bind1("f", "n1", 0),
        ])
        .await
        .expect("bind");
    let outcomes: Vec<Outcome> = results
        .iter()
        .map(|r| Outcome::try_from(r.outcome).expect("outcome"))
        .collect();
    assert_eq!(
        outcomes,
        [
            Outcome::Bound,
            Outcome::Conflict,
            Outcome::PodNotFound,
            Outcome::AlreadyBound,
            Outcome::NodeNotFound,
            Outcome::Invalid,
            Outcome::Bound,
        ],
        "{results:?}"
    );
    // Both good bindings landed in one revision; nothing else changed.
    assert_eq!(results[0].resource_version, results[6].resource_version);
    for (name, bound) in [("a", true), ("b", false), ("c", false), ("f", true)] {
        let Some(Object::Pod(p)) = api.get(Kind::Pod, "default", name).await.expect("get") else {
            panic!("pod {name} missing")
        };
        assert_eq!(!p.spec.node_name.is_empty(), bound, "pod {name}");
        if bound {
            let cond = p.condition(&PodConditionType::PodScheduled);
            assert_eq!(cond.map(|c| c.status), Some(ConditionStatus::True));
        }
    }
}

/// CreateMany, the batch of the event recorder and the ReplicaSet controller: the good
/// objects land in one revision (one with `generateName` too, named in the batch), each bad
/// one is refused with the answer Create gives it (a taken name, a validation error with its
/// field path, a bad generated name under its prefix), and a refused one writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_many_writes_the_good_objects_in_one_revision_and_refuses_the_bad_alone() {
    let cluster = Cluster::start(3).await;
    let api = client(&cluster).await;
    api.create(&pod("default", "taken", None))
        .await
        .expect("pod");
    let event = |name: &str, reason: &str| {
        obj(
            Kind::Event,
            json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": "default"},
                "involvedObject": {"kind": "Pod", "namespace": "default", "name": "taken"},
                "reason": reason, "message": "m", "type": "Normal"
            }),
        )
    };
    let mut generated = pod("default", "", None);
    generated.metadata_mut().generate_name = "gen-".into();
    let mut bad_prefix = pod("default", "", None);
    bad_prefix.metadata_mut().generate_name = "Bad-".into();
    let results = api
        .create_many(&[
            event("e1", "Started"),
            pod("default", "taken", None),
            pod("default", "Bad_Name", None),
            event("e2", "Pulled"),
            generated,
            bad_prefix,
            pod("default", "twice", None),
            pod("default", "twice", None),
        ])
        .await
        .expect("create many");
    assert_eq!(results.len(), 8);
    let e1 = results[0].as_ref().expect("e1 created");
    let e2 = results[3].as_ref().expect("e2 created");
    assert_eq!(
        e1.metadata().resource_version,
        e2.metadata().resource_version,
        "one revision for the batch"
    );
    let batch_revision = e1.metadata().resource_version.clone();
    let mut results = results.into_iter();
    let _ = results.next();
    expect_err(
        results.next().expect("second"),
        Code::AlreadyExists,
        "already exists",
    );
    expect_err(
        results.next().expect("third"),
        Code::InvalidArgument,
        "metadata.name",
    );
    let _ = results.next();
    let made = results
        .next()
        .expect("fifth")
        .expect("a generated name is made");
    assert!(made.metadata().name.starts_with("gen-"), "{made:?}");
    assert_eq!(
        made.metadata().resource_version,
        batch_revision,
        "a generated name is made in the batch"
    );
    expect_err(
        results.next().expect("sixth"),
        Code::InvalidArgument,
        "Pod \"Bad-\" is invalid",
    );
    // The same name twice: the first is created, the second finds it there (two creates of
    // one key in one transaction would both pass its compares).
    let twice = results
        .next()
        .expect("seventh")
        .expect("the first is created");
    expect_err(
        results.next().expect("eighth"),
        Code::AlreadyExists,
        "already exists",
    );
    let stored = api
        .get(Kind::Pod, "default", "twice")
        .await
        .expect("get")
        .expect("stored");
    assert_eq!(stored.metadata().uid, twice.metadata().uid);
    assert!(
        api.get(Kind::Pod, "default", "Bad_Name")
            .await
            .expect("get")
            .is_none(),
        "a refused object is not written"
    );
    for name in ["e1", "e2"] {
        assert!(
            api.get(Kind::Event, "default", name)
                .await
                .expect("get")
                .is_some(),
            "event {name} stored"
        );
    }
}

/// Pods under a ResourceQuota created in one CreateMany (a ReplicaSet's burst): admission
/// counts the namespace's pods once and each pod of the batch against the ones before it, so
/// the pods that fit land together in one revision, and each that does not is refused with
/// the usage its batch left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_many_under_a_quota_counts_the_batch_and_writes_it_in_one_revision() {
    let cluster = Cluster::start(3).await;
    let api = client(&cluster).await;
    namespace_with_quota(&api, "quota", "4").await;
    api.create(&pod("quota", "a", Some("300m")))
        .await
        .expect("first pod");
    let results = api
        .create_many(&[
            pod("quota", "b", Some("300m")),
            pod("quota", "c", Some("300m")),
            pod("quota", "d", Some("300m")),
            pod("quota", "e", Some("10m")),
            pod("quota", "f", Some("10m")),
        ])
        .await
        .expect("create many");
    let mut results = results.into_iter();
    let mut created = Vec::new();
    for name in ["b", "c"] {
        created.push(results.next().expect("result").expect(name));
    }
    expect_err(
        results.next().expect("d"),
        Code::FailedPrecondition,
        "exceeded quota: q, requested: requests.cpu=300m, used: requests.cpu=900m, limited: requests.cpu=1",
    );
    created.push(results.next().expect("result").expect("e"));
    expect_err(
        results.next().expect("f"),
        Code::FailedPrecondition,
        "exceeded quota: q, requested: pods=1, used: pods=4, limited: pods=4",
    );
    let revisions: Vec<&str> = created
        .iter()
        .map(|p| p.metadata().resource_version.as_str())
        .collect();
    assert!(
        revisions.iter().all(|r| *r == revisions[0]),
        "the pods that fit are written together: {revisions:?}"
    );
    let (pods, _) = api
        .list(Kind::Pod, &ListParams::default().namespace("quota"))
        .await
        .expect("list");
    let mut names: Vec<&str> = pods.iter().map(|p| p.metadata().name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["a", "b", "c", "e"], "refused pods were not written");
    // The member keeps each namespace's count and reads only what changed since: a deleted
    // pod and a pod that ended free what they used, a new one adds to it.
    api.delete(Kind::Pod, "quota", "b", 0, Some(0))
        .await
        .expect("delete b");
    api.create(&pod("quota", "g", Some("300m")))
        .await
        .expect("g fits where b was");
    refused_by_quota(
        &api,
        "h",
        "10m",
        "exceeded quota: q, requested: pods=1, used: pods=4, limited: pods=4",
    )
    .await;
    let mut ended = api
        .get(Kind::Pod, "quota", "g")
        .await
        .expect("get")
        .expect("g");
    if let Object::Pod(p) = &mut ended {
        p.status.get_or_insert_with(Default::default).phase = Some(PodPhase::Failed);
    }
    api.update_status(&ended).await.expect("g failed");
    api.create(&pod("quota", "h", Some("10m")))
        .await
        .expect("h fits once g ended");
    api.delete(Kind::Pod, "quota", "a", 0, Some(0))
        .await
        .expect("delete a");
    // c, e and h: 320m.
    refused_by_quota(
        &api,
        "i",
        "700m",
        "exceeded quota: q, requested: requests.cpu=700m, used: requests.cpu=320m, limited: requests.cpu=1",
    )
    .await;
}

/// UpdateStatusMany, the node agent's batch: the statuses that change something land in one
/// revision, conditions others wrote stay, a status already stored writes nothing, and each
/// refusal (another pod under the name, a stale pinned version, no such pod) is its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_status_many_patches_in_one_revision_and_refuses_alone() {
    let cluster = Cluster::start(1).await;
    let api = client(&cluster).await;
    let mut made = BTreeMap::new();
    for name in ["a", "b", "c", "d"] {
        made.insert(
            name,
            api.create(&pod("default", name, None)).await.expect("pod"),
        );
    }
    api.create(&node("n1")).await.expect("node");
    let with_status = |o: &Object, status: serde_json::Value| {
        let mut v = o.to_json_value();
        v["status"] = status;
        obj(o.kind(), v)
    };
    // Conditions the agent does not own: a readiness gate's on "a", the network's on "n1".
    let gated = with_status(
        &made["a"],
        json!({"phase": "Pending", "conditions": [{"type": "example.com/gate", "status": "True"}]}),
    );
    api.update_status(&gated).await.expect("gate");
    let mut n1 = api
        .get(Kind::Node, "", "n1")
        .await
        .expect("get")
        .expect("n1");
    let Object::Node(n) = &mut n1 else { panic!() };
    n.status.get_or_insert_default().conditions =
        vec![obj_condition("NetworkUnavailable", "False")];
    api.update_status(&n1).await.expect("network");
    let d = api
        .get(Kind::Pod, "default", "d")
        .await
        .expect("get")
        .expect("d");

    let running = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
    let mut other_uid = with_status(&made["b"], running.clone());
    other_uid.metadata_mut().uid = "not-b".into();
    let mut stale = with_status(&made["c"], running.clone());
    stale.metadata_mut().resource_version = "1".into();
    let mut heartbeat = api
        .get(Kind::Node, "", "n1")
        .await
        .expect("get")
        .expect("n1");
    let Object::Node(n) = &mut heartbeat else {
        panic!()
    };
    n.status.get_or_insert_default().conditions = vec![obj_condition("Ready", "True")];
    heartbeat.metadata_mut().resource_version.clear();
    let mut missing = with_status(&made["a"], running.clone());
    missing.metadata_mut().name = "nope".into();
    // Unpinned, as the agent writes: only the UID names the pod.
    let mut a = with_status(&made["a"], running.clone());
    a.metadata_mut().resource_version.clear();
    // A second status of "a" in the same batch is written after the first, not over it: its
    // condition joins the first's.
    let mut a_again = with_status(
        &made["a"],
        json!({"phase": "Running", "conditions": [{"type": "example.com/second", "status": "True"}]}),
    );
    a_again.metadata_mut().resource_version.clear();

    let results = api
        .update_status_many(&[a, other_uid, stale, d.clone(), heartbeat, missing, a_again])
        .await
        .expect("update status many");
    assert_eq!(results.len(), 7);
    let mut results = results.into_iter();
    let a = results.next().expect("a").expect("a written");
    expect_err(results.next().expect("b"), Code::NotFound, "UID not-b");
    expect_err(results.next().expect("c"), Code::Aborted, "modified");
    let d_after = results.next().expect("d").expect("d unchanged");
    let n1_after = results.next().expect("n1").expect("n1 written");
    expect_err(results.next().expect("nope"), Code::NotFound, "not found");
    let a_again = results.next().expect("a again").expect("a written again");
    let revision = |o: &Object| -> i64 { o.metadata().resource_version.parse().expect("rv") };
    assert!(revision(&a_again) > revision(&a), "{a_again:?}");

    assert_eq!(
        a.metadata().resource_version,
        n1_after.metadata().resource_version,
        "one revision for the batch"
    );
    assert_eq!(
        d_after.metadata().resource_version,
        d.metadata().resource_version
    );
    // The condition types of a stored object's status, in order.
    let types = |o: Option<Object>| -> Vec<String> {
        let v = o.expect("stored").to_json_value();
        v["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["type"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let a = api.get(Kind::Pod, "default", "a").await.expect("get");
    let mut a_types = types(a);
    a_types.sort();
    assert_eq!(a_types, ["Ready", "example.com/gate", "example.com/second"]);
    let n1 = api.get(Kind::Node, "", "n1").await.expect("get");
    assert_eq!(types(n1), ["Ready", "NetworkUnavailable"]);
    for name in ["b", "c"] {
        let Some(Object::Pod(p)) = api.get(Kind::Pod, "default", name).await.expect("get") else {
            panic!("{name} missing")
        };
        assert_ne!(
            p.status.and_then(|s| s.phase),
            Some(PodPhase::Running),
            "a refused status is not written ({name})"
        );
    }
}

fn obj_condition(type_: &str, status: &str) -> skiff_proto::api::NodeCondition {
    serde_json::from_value(json!({"type": type_, "status": status})).expect("condition")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_filtered_watches_see_pods_arrive_and_leave() {
    let cluster = Cluster::start(3).await;
    let api = client(&cluster).await;
    for n in ["n1", "n2"] {
        api.create(&node(n)).await.expect("node");
    }
    let mut n1 = Box::pin(
        api.watch(
            Kind::Pod,
            &WatchParams::default().fields("spec.nodeName=n1"),
        )
        .await
        .expect("watch"),
    );
    let mut labelled = Box::pin(
        api.watch(
            Kind::Pod,
            &WatchParams::default()
                .namespace("default")
                .labels("app=web"),
        )
        .await
        .expect("watch"),
    );
    api.create(&pod("default", "p1", Some("100m")))
        .await
        .expect("pod");
    api.create(&pod("default", "p2", Some("100m")))
        .await
        .expect("pod");
    api.bind(vec![
        binding("default", "p1", "n1"),
        binding("default", "p2", "n2"),
    ])
    .await
    .expect("bind");
    api.delete(Kind::Pod, "default", "p1", 0, Some(0))
        .await
        .expect("delete");
    match next_event(&mut n1).await {
        Event::Added(Object::Pod(p)) => assert_eq!(p.metadata.name, "p1"),
        other => panic!("expected p1 ADDED, got {other:?}"),
    }
    match next_event(&mut n1).await {
        Event::Deleted(Object::Pod(p)) => assert_eq!(p.metadata.name, "p1"),
        other => panic!("expected p1 DELETED, got {other:?}"),
    }
    // The label watch saw both creations, both bindings and the delete, in revision order.
    let mut seen = Vec::new();
    for _ in 0..5 {
        let e = next_event(&mut labelled).await;
        let (t, o) = match &e {
            Event::Added(o) => ("ADDED", o),
            Event::Modified(o) => ("MODIFIED", o),
            Event::Deleted(o) => ("DELETED", o),
            Event::Bookmark(_) => continue,
        };
        seen.push((
            t,
            o.metadata().name.clone(),
            o.metadata().revision().expect("rv"),
        ));
    }
    let revs: Vec<i64> = seen.iter().map(|s| s.2).collect();
    let mut sorted = revs.clone();
    sorted.sort();
    assert_eq!(revs, sorted, "{seen:?}");
    let kinds: Vec<(&str, &str)> = seen.iter().map(|(t, n, _)| (*t, n.as_str())).collect();
    assert_eq!(
        kinds,
        [
            ("ADDED", "p1"),
            ("ADDED", "p2"),
            ("MODIFIED", "p1"),
            ("MODIFIED", "p2"),
            ("DELETED", "p1")
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_agents_each_get_exactly_their_pods() {
    const NODES: usize = 1000;
    const PODS: usize = 10_000;
    let cluster = Cluster::start(3).await;
    let api = client(&cluster).await;
    // Nodes, in parallel batches.
    let names: Vec<String> = (0..NODES).map(|i| format!("sim-{i:04}")).collect();
    futures::stream::iter(names.iter().cloned())
        .for_each_concurrent(32, |n| {
            let api = api.clone();
            async move {
                api.create(&node(&n)).await.expect("node");
            }
        })
        .await;
    // One watch per agent, each on its own node.
    let mut agents = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let c = ClusterClient::connect(&[cluster.members[i % 3].endpoint()]).expect("client");
        let w = c
            .watch(
                Kind::Pod,
                &WatchParams::default().fields(format!("spec.nodeName={n}")),
            )
            .await
            .expect("watch");
        agents.push((c, Box::pin(w)));
    }
    futures::stream::iter(0..PODS)
        .for_each_concurrent(32, |i| {
            let api = api.clone();
            async move {
                api.create(&pod("default", &format!("p-{i:05}"), Some("10m")))
                    .await
                    .expect("pod");
            }
        })
        .await;
    // Bind in batches of 1,000: pod i → node i % NODES.
    for chunk in (0..PODS).collect::<Vec<_>>().chunks(1000) {
        let bindings = chunk
            .iter()
            .map(|i| binding("default", &format!("p-{i:05}"), &names[i % NODES]))
            .collect();
        let results = api.bind(bindings).await.expect("bind");
        assert!(results.iter().all(|r| r.outcome == Outcome::Bound as i32));
    }
    // Every agent: exactly its ten pods, once each, in revision order, nothing else.
    for (i, (_c, w)) in agents.iter_mut().enumerate() {
        let mut got = Vec::new();
        while got.len() < PODS / NODES {
            let e = tokio::time::timeout(Duration::from_secs(30), w.next())
                .await
                .expect("events within 30 s")
                .expect("stream open")
                .expect("event");
            match e {
                Event::Added(o) => got.push((
                    o.metadata().revision().expect("rv"),
                    o.metadata().name.clone(),
                )),
                other => panic!("agent {i}: unexpected {other:?}"),
            }
        }
        let want: BTreeSet<String> = (0..PODS)
            .filter(|p| p % NODES == i)
            .map(|p| format!("p-{p:05}"))
            .collect();
        let names_got: BTreeSet<String> = got.iter().map(|g| g.1.clone()).collect();
        assert_eq!(names_got, want, "agent {i}");
        assert!(
            got.windows(2).all(|w| w[0].0 <= w[1].0),
            "agent {i}: out of order"
        );
        // Nothing extra is queued for this agent.
        let extra = tokio::time::timeout(Duration::from_millis(1), w.next()).await;
        assert!(extra.is_err(), "agent {i}: unexpected extra event");
    }
}

/// Names of the pods `fields` selects, as one member lists them.
async fn pod_names(api: &ClusterClient, fields: &str) -> BTreeSet<String> {
    let (items, _) = api
        .list(Kind::Pod, &ListParams::default().fields(fields))
        .await
        .expect("list");
    items.iter().map(id).collect()
}

/// `namespace/name`.
fn id(o: &Object) -> String {
    format!("{}/{}", o.metadata().namespace, o.metadata().name)
}

/// Every page of `first` (a list of pods) through the raw API, each page read with its
/// continue token, and `between` run after the first page; the pods' `namespace/name` in
/// order and the revisions the pages read at.
async fn pod_pages(
    url: &str,
    first: skiff_proto::cluster::v1::ListRequest,
    between: impl Future<Output = ()>,
) -> (Vec<String>, BTreeSet<i64>) {
    use skiff_proto::cluster::v1::cluster_client::ClusterClient as Raw;
    let mut raw = Raw::connect(url.to_string()).await.expect("connect");
    let (mut names, mut revisions, mut token) = (Vec::new(), BTreeSet::new(), String::new());
    let mut between = Some(between);
    loop {
        let r = raw
            .list(skiff_proto::cluster::v1::ListRequest {
                continue_token: token,
                ..first.clone()
            })
            .await
            .expect("list")
            .into_inner();
        revisions.insert(r.resource_version);
        for o in &r.items {
            names.push(id(&Object::from_json(Kind::Pod, &o.json).expect("pod")));
        }
        if let Some(b) = between.take() {
            b.await;
        }
        if r.continue_token.is_empty() {
            return (names, revisions);
        }
        token = r.continue_token;
    }
}

/// A list of pods in `namespace` (every one: empty) selected by `labels` and `fields`,
/// `limit` a page.
fn pods_request(
    namespace: &str,
    labels: &str,
    fields: &str,
    limit: i64,
) -> skiff_proto::cluster::v1::ListRequest {
    skiff_proto::cluster::v1::ListRequest {
        kind: "Pod".into(),
        namespace: namespace.into(),
        selectors: Some(skiff_proto::cluster::v1::Selectors {
            label_selector: labels.into(),
            field_selector: fields.into(),
        }),
        limit,
        continue_token: String::new(),
        serializable: false,
    }
}

/// A list of one node's pods is read through the members' tag index: on every member, after
/// binds, a move (delete and create again elsewhere) and deletes, and after a member's restart
/// (the index rebuilt from disk), it names exactly the pods a full scan finds; pages hold at
/// one revision, and a write between pages sends the later ones to a scan at that revision.
/// Unbound pods (`spec.nodeName=`) carry no tag, and are listed and watched by scan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_of_one_nodes_pods_read_the_index_and_agree_with_a_scan() {
    let mut cluster = Cluster::start(3).await;
    let api = client(&cluster).await;
    for n in ["n1", "n2", "n3"] {
        api.create(&node(n)).await.expect("node");
    }
    let mut unbound_watch = Box::pin(
        api.watch(Kind::Pod, &WatchParams::default().fields("spec.nodeName="))
            .await
            .expect("watch"),
    );
    api.create(&namespace("other")).await.expect("namespace");
    for ns in ["default", "other"] {
        for i in 0..12 {
            api.create(&pod(ns, &format!("p{i:02}"), Some("10m")))
                .await
                .expect("pod");
        }
    }
    match next_event(&mut unbound_watch).await {
        Event::Added(o) => assert_eq!(o.metadata().name, "p00"),
        other => panic!("expected p00 ADDED to the unbound pods' watch, got {other:?}"),
    }
    // Pod i of each namespace → n1, n2, n3 in turn; the last two of each stay unbound.
    let bindings = ["default", "other"]
        .iter()
        .flat_map(|ns| {
            (0..10).map(move |i| binding(ns, &format!("p{i:02}"), &format!("n{}", i % 3 + 1)))
        })
        .collect();
    let results = api.bind(bindings).await.expect("bind");
    assert!(results.iter().all(|r| r.outcome == Outcome::Bound as i32));
    // p00 moves: gone from n1, created again and bound to n2. p03 and p06 are deleted.
    api.delete(Kind::Pod, "default", "p00", 0, Some(0))
        .await
        .expect("delete");
    api.create(&pod("default", "p00", Some("10m")))
        .await
        .expect("pod");
    api.bind(vec![binding("default", "p00", "n2")])
        .await
        .expect("bind");
    for name in ["p03", "p06"] {
        api.delete(Kind::Pod, "other", name, 0, Some(0))
            .await
            .expect("delete");
    }
    let all = scan(&api).await;
    assert_eq!(on(&all, "n1").len(), 5, "{all:?}");
    for (i, m) in cluster.members.iter().enumerate() {
        let c = ClusterClient::connect(&[m.endpoint()]).expect("client");
        agrees_with_scan(&c, &all, &format!("member {i}")).await;
    }
    // Pages of two at one revision; then a write after the first page: the rest is read at
    // the first page's revision, by scan, and agrees.
    let url = cluster.members[0].client_url.clone();
    let n2 = pods_request("", "", "spec.nodeName=n2", 2);
    let (names, revisions) = pod_pages(&url, n2.clone(), async {}).await;
    assert_eq!(
        names.iter().cloned().collect::<BTreeSet<_>>(),
        on(&all, "n2")
    );
    assert_eq!(revisions.len(), 1);
    let writer = api.clone();
    let (names, revisions) = pod_pages(&url, n2, async move {
        writer
            .delete(Kind::Pod, "other", "p01", 0, Some(0))
            .await
            .expect("delete");
    })
    .await;
    assert_eq!(
        names.iter().cloned().collect::<BTreeSet<_>>(),
        on(&all, "n2")
    );
    assert_eq!(
        revisions.len(),
        1,
        "every page at the first page's revision"
    );
    let keys: Vec<String> = names
        .iter()
        .map(|n| all.iter().find(|o| id(o) == *n).expect("listed pod").key())
        .collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "key order: {keys:?}");
    // A restarted member builds its index from what it holds.
    let all = scan(&api).await;
    assert!(!on(&all, "n2").contains("other/p01"));
    cluster.kill(2);
    cluster.restart(2);
    let c = ClusterClient::connect(&[cluster.members[2].endpoint()]).expect("client");
    eventually(Duration::from_secs(30), "the member to serve again", || {
        let c = c.clone();
        async move { c.list(Kind::Node, &ListParams::default()).await.ok() }
    })
    .await;
    agrees_with_scan(&c, &all, "member 2, restarted").await;
}

/// Every pod, listed without a selector.
async fn scan(api: &ClusterClient) -> Vec<Object> {
    api.list(Kind::Pod, &ListParams::default())
        .await
        .expect("list")
        .0
}

/// The names of the pods of `all` bound to `node` (unbound: "").
fn on(all: &[Object], node: &str) -> BTreeSet<String> {
    all.iter()
        .filter_map(|o| match o {
            Object::Pod(p) if p.spec.node_name == node => Some(id(o)),
            _ => None,
        })
        .collect()
}

/// `api`'s lists of each node's pods (and the unbound ones) name what `all` holds, once
/// the member has applied it.
async fn agrees_with_scan(api: &ClusterClient, all: &[Object], who: &str) {
    for n in ["n1", "n2", "n3", ""] {
        let want = on(all, n);
        let fields = format!("spec.nodeName={n}");
        let got = eventually(Duration::from_secs(30), "the member lists", || {
            let (api, want, fields) = (api.clone(), want.clone(), fields.clone());
            async move {
                let got = pod_names(&api, &fields).await;
                (got == want).then_some(got)
            }
        })
        .await;
        assert_eq!(got, want, "{who}: {fields}");
    }
    // The index narrows; the rest of the selector still applies.
    let some = pod_names(api, "spec.nodeName=n2,metadata.namespace=other").await;
    assert!(
        !some.is_empty()
            && some
                .iter()
                .all(|n| n.starts_with("other/") && on(all, "n2").contains(n)),
        "{who}: {some:?}"
    );
    assert!(
        pod_names(api, "spec.nodeName=n9").await.is_empty(),
        "{who}: no such node"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_page_at_one_revision_with_selectors() {
    use skiff_proto::cluster::v1::cluster_client::ClusterClient as Raw;
    let cluster = Cluster::start(1).await;
    let api = client(&cluster).await;
    for i in 0..7 {
        let mut p = pod("default", &format!("p{i}"), Some("10m"));
        if i % 2 == 1 {
            p.metadata_mut().labels.insert("odd".into(), "yes".into());
        }
        api.create(&p).await.expect("pod");
    }
    // A write between pages does not show up in later pages.
    let writer = api.clone();
    let (names, revisions) = pod_pages(
        &cluster.members[0].client_url,
        pods_request("default", "!odd", "", 2),
        async move {
            writer
                .create(&pod("default", "p9", Some("10m")))
                .await
                .expect("pod");
        },
    )
    .await;
    assert_eq!(
        names,
        ["default/p0", "default/p2", "default/p4", "default/p6"]
    );
    assert_eq!(
        revisions.len(),
        1,
        "every page at the first page's revision"
    );
    let mut raw = Raw::connect(cluster.members[0].client_url.clone())
        .await
        .expect("connect");
    let bad = raw
        .list(pods_request("", "", "spec.bogus=x", 0))
        .await
        .expect_err("unknown field");
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().contains("spec.bogus"), "{}", bad.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_informer_lists_then_follows_changes() {
    use skiff_proto::client::Informer;
    let cluster = Cluster::start(1).await;
    let api = client(&cluster).await;
    api.create(&pod("default", "before", Some("10m")))
        .await
        .expect("pod");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut informer = Informer::new(
        api.clone(),
        Kind::Pod,
        ListParams::default().namespace("default"),
    );
    let task = tokio::spawn(async move {
        informer
            .run(|e, cache| {
                if !matches!(e, Event::Bookmark(_)) {
                    let _ = tx.send(cache.keys().cloned().collect::<Vec<_>>());
                }
            })
            .await
    });
    let mut wait_for = async |want: &[&str]| {
        let want: Vec<String> = want
            .iter()
            .map(|n| format!("/registry/pods/default/{n}"))
            .collect();
        loop {
            let cache = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .expect("an informer event within 10 s")
                .expect("informer running");
            if cache == want {
                return;
            }
        }
    };
    wait_for(&["before"]).await;
    api.create(&pod("default", "after", Some("10m")))
        .await
        .expect("pod");
    wait_for(&["after", "before"]).await;
    api.delete(Kind::Pod, "default", "before", 0, None)
        .await
        .expect("delete");
    wait_for(&["after"]).await;
    task.abort();
}

/// Events: stored under a lease so they expire `--event-ttl` after their last write; an
/// update (a repeat folded into `count`) moves them to a fresh lease; field selectors on the
/// involved object find them; a malformed event is refused with its field path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_kept_for_their_ttl_and_found_by_object() {
    let cluster = Cluster::start_with(1, |s| s.event_ttl = Some(Duration::from_secs(3))).await;
    let api = client(&cluster).await;
    let event = |name: &str, reason: &str, count: i32| {
        let about = name.split('.').next().unwrap_or(name);
        obj(
            Kind::Event,
            json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": "default"},
                "involvedObject": {"kind": "Pod", "namespace": "default", "name": about, "uid": "u1"},
                "reason": reason, "message": format!("{reason} happened"), "type": "Normal",
                "source": {"component": "kubelet", "host": "n1"}, "count": count
            }),
        )
    };
    api.create(&event("web.1", "Started", 1))
        .await
        .expect("event");
    api.create(&event("other.1", "Pulled", 1))
        .await
        .expect("event");
    let (found, _) = api
        .list(
            Kind::Event,
            &ListParams::default()
                .namespace("default")
                .fields("involvedObject.kind=Pod,involvedObject.name=web"),
        )
        .await
        .expect("list");
    assert_eq!(found.len(), 1, "{found:?}");
    let mut etcd = cluster.client(0).await;
    let kv = etcd
        .get("/registry/events/default/web.1", None)
        .await
        .expect("get");
    let lease = kv.kvs()[0].lease();
    assert_ne!(lease, 0, "an event is written under a lease");
    let ttl = etcd.lease_time_to_live(lease, None).await.expect("ttl");
    assert!(
        ttl.granted_ttl() <= 4,
        "TTL + reuse window: {}",
        ttl.granted_ttl()
    );

    let bad = api
        .create(&obj(
            Kind::Event,
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "x.1"},
                   "involvedObject": {"kind": "Pod", "name": "web"},
                   "reason": "Started", "type": "Sometimes"}),
        ))
        .await;
    expect_err(
        bad,
        Code::InvalidArgument,
        "type: unsupported value \"Sometimes\"",
    );

    // Repeated: folded into count, kept alive by the write.
    api.update(&event("web.1", "Started", 2))
        .await
        .expect("update");
    eventually(Duration::from_secs(30), "the events to expire", || async {
        let (left, _) = api
            .list(Kind::Event, &ListParams::default().namespace("default"))
            .await
            .ok()?;
        left.is_empty().then_some(())
    })
    .await;
}

/// Writes fenced by a leadership key commit only while that key has the create revision
/// they carry: before it is taken, after it is taken again by another, and once it is gone,
/// creates, updates and deletes fail with FAILED_PRECONDITION and write nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_commit_only_under_their_leadership() {
    let c = Cluster::start(1).await;
    let api = client(&c).await;
    let mut etcd = c.client(0).await;
    let key = "/skiff/leader/test";
    let held = etcd.put(key, "me", None).await.expect("take the lead");
    let revision = held.header().expect("header").revision();
    let leader = api.fenced(key, revision);
    let ns = |name: &str| {
        Object::from_json(
            Kind::Namespace,
            json!({"metadata": {"name": name}}).to_string().as_bytes(),
        )
        .expect("namespace")
    };
    let created = leader
        .create(&ns("while-held"))
        .await
        .expect("fenced create");
    let stale = api.fenced(key, revision - 1);
    let e = stale.create(&ns("stale")).await.expect_err("wrong token");
    assert_eq!(e.code(), Some(Code::FailedPrecondition), "{e}");
    assert!(e.to_string().contains("leadership"), "{e}");

    // Another leader takes the key: the first one's writes fail.
    etcd.delete(key, None).await.expect("release");
    etcd.put(key, "other", None).await.expect("another leader");
    let e = leader.create(&ns("deposed")).await.expect_err("deposed");
    assert_eq!(e.code(), Some(Code::FailedPrecondition), "{e}");
    let e = leader
        .delete(Kind::Namespace, "", "while-held", 0, None)
        .await
        .expect_err("deposed delete");
    assert_eq!(e.code(), Some(Code::FailedPrecondition), "{e}");
    let mut changed = created.clone();
    changed
        .metadata_mut()
        .labels
        .insert("by".into(), "deposed".into());
    let e = leader.update(&changed).await.expect_err("deposed update");
    assert_eq!(e.code(), Some(Code::FailedPrecondition), "{e}");
    // Nothing the deposed leader tried was written.
    for name in ["stale", "deposed"] {
        assert!(
            api.get(Kind::Namespace, "", name)
                .await
                .expect("get")
                .is_none()
        );
    }
    let kept = api
        .get(Kind::Namespace, "", "while-held")
        .await
        .expect("get")
        .expect("still there");
    assert!(!kept.metadata().labels.contains_key("by"));
}

/// Node IPAM: 300 Nodes registered at once through all three members share the 256 /24
/// blocks of the default 10.244.0.0/16 without a block given twice, the other 44 register
/// without one; a deleted Node's block is given to the next Node, and a Node may not change
/// its block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_cidrs_are_given_once_and_freed_with_their_node() {
    let cluster = Cluster::start(3).await;
    let clients: Vec<ClusterClient> = cluster
        .endpoints()
        .iter()
        .map(|e| ClusterClient::connect(std::slice::from_ref(e)).expect("client"))
        .collect();
    let registrations = (0..300).map(|i| {
        let api = clients[i % clients.len()].clone();
        async move { api.create(&node(&format!("ipam-{i}"))).await }
    });
    let created = futures::future::join_all(registrations).await;
    let mut blocks: BTreeMap<String, String> = BTreeMap::new();
    let mut without = 0;
    for r in created {
        let Object::Node(n) = r.expect("every registration succeeds") else {
            panic!("not a node")
        };
        if n.spec.pod_cidr.is_empty() {
            without += 1;
            continue;
        }
        assert_eq!(n.spec.pod_cidrs, vec![n.spec.pod_cidr.clone()]);
        if let Some(other) = blocks.insert(n.spec.pod_cidr.clone(), n.metadata.name.clone()) {
            panic!(
                "{} given to {other} and {}",
                n.spec.pod_cidr, n.metadata.name
            );
        }
    }
    assert_eq!((blocks.len(), without), (256, 44));
    assert!(
        blocks
            .keys()
            .all(|b| b.starts_with("10.244.") && b.ends_with(".0/24"))
    );

    // A deleted node's block goes to the next node that registers.
    let api = client(&cluster).await;
    let (freed, holder) = blocks
        .iter()
        .nth(17)
        .map(|(b, n)| (b.clone(), n.clone()))
        .unwrap();
    api.delete(Kind::Node, "", &holder, 0, None)
        .await
        .expect("delete a node");
    let Object::Node(next) = api.create(&node("ipam-next")).await.expect("register") else {
        panic!("not a node")
    };
    assert_eq!(next.spec.pod_cidr, freed);

    // Once given, a block stays.
    let mut moved = next.clone();
    moved.spec.pod_cidr = "10.244.250.0/24".into();
    moved.spec.pod_cidrs = vec![moved.spec.pod_cidr.clone()];
    expect_err(
        api.update(&Object::Node(moved)).await,
        Code::InvalidArgument,
        "may not change podCIDR",
    );
    // A node naming a block another holds is refused.
    let mut taken = node("ipam-taken");
    if let Object::Node(n) = &mut taken {
        n.spec.pod_cidr = freed.clone();
    }
    expect_err(
        api.create(&taken).await,
        Code::FailedPrecondition,
        &format!("spec.podCIDR {freed} is allocated to node \"ipam-next\""),
    );
}

fn service(name: &str, spec: serde_json::Value) -> Object {
    obj(
        Kind::Service,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec
        }),
    )
}

/// A namespace's delete through the cluster API: it goes `Terminating` at once, held by its
/// `kubernetes` finalizer, and takes nothing new; a second delete is refused; once what it
/// held is gone and `finalize` removes the finalizer (the namespace controller's part, done
/// here by hand), the namespace goes, and the address of the Service it held was given
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_goes_once_emptied_and_finalized() {
    let cluster = Cluster::start(1).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    api.create(&obj(Kind::Namespace, json!({"metadata": {"name": "held"}})))
        .await
        .expect("namespace");
    let mut held = json!({"apiVersion": "v1", "kind": "Service",
                          "metadata": {"name": "web", "namespace": "held"},
                          "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}});
    let first = svc(api
        .create(&obj(Kind::Service, held.clone()))
        .await
        .expect("service"));
    let Object::Namespace(marked) = api
        .delete(Kind::Namespace, "", "held", 0, None)
        .await
        .expect("delete marks it")
    else {
        panic!("not a namespace")
    };
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.phase(), Some(NamespacePhase::Terminating));
    assert_eq!(marked.finalizers(), ["kubernetes"]);
    let e = api
        .delete(Kind::Namespace, "", "held", 0, None)
        .await
        .expect_err("already terminating");
    assert_eq!(e.code(), Some(Code::FailedPrecondition), "{e}");
    assert!(
        e.to_string().contains("ensuring all content is removed"),
        "{e}"
    );
    let mut other = held.clone();
    other["metadata"]["name"] = json!("late");
    let e = api
        .create(&obj(Kind::Service, other))
        .await
        .expect_err("nothing new in a terminating namespace");
    assert!(
        e.to_string().contains("because it is being terminated"),
        "{e}"
    );
    api.delete(Kind::Service, "held", "web", 0, None)
        .await
        .expect("delete the Service");
    // Finalizers are written only through `finalize`: an update keeps them.
    let Some(Object::Namespace(mut ns)) = api.get(Kind::Namespace, "", "held").await.expect("get")
    else {
        panic!("no namespace")
    };
    ns.spec.as_mut().expect("spec").finalizers.clear();
    let Object::Namespace(kept) = api
        .update(&Object::Namespace(ns.clone()))
        .await
        .expect("update")
    else {
        panic!("not a namespace")
    };
    assert_eq!(kept.finalizers(), ["kubernetes"]);
    ns.metadata.resource_version = kept.metadata.resource_version.clone();
    api.update_finalize(&Object::Namespace(ns))
        .await
        .expect("finalize");
    assert!(
        api.get(Kind::Namespace, "", "held")
            .await
            .expect("get")
            .is_none(),
        "finalized, so gone"
    );
    held["metadata"]["namespace"] = json!("default");
    held["spec"]["clusterIP"] = json!(first.spec.cluster_ip);
    api.create(&obj(Kind::Service, held))
        .await
        .expect("its address was given back with it");
}

fn svc(o: Object) -> skiff_proto::api::Service {
    match o {
        Object::Service(s) => s,
        other => panic!("not a service: {other:?}"),
    }
}

/// Cluster IPs and node ports, given in the write that creates a Service: never twice,
/// however many members take creates at once; a named one when free; kept by updates that
/// name none; freed by deletes and by updates that drop them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_get_addresses_once_and_give_them_back() {
    let cluster = Cluster::start(3).await;
    let clients: Vec<ClusterClient> = cluster
        .endpoints()
        .iter()
        .map(|e| ClusterClient::connect(std::slice::from_ref(e)).expect("client"))
        .collect();
    let creates = (0..150).map(|i| {
        let api = clients[i % clients.len()].clone();
        async move {
            api.create(&service(
                &format!("s{i}"),
                json!({"type": "NodePort", "selector": {"app": "x"},
                       "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 443}]}),
            ))
            .await
        }
    });
    let mut ips = BTreeMap::new();
    let mut ports = BTreeMap::new();
    for r in futures::future::join_all(creates).await {
        let s = svc(r.expect("every create succeeds"));
        let ip: std::net::Ipv4Addr = s.spec.cluster_ip.parse().expect("an IP");
        assert!(
            ip.octets()[0] == 10 && (96..112).contains(&ip.octets()[1]),
            "{ip}"
        );
        assert_eq!(s.spec.cluster_ips, vec![s.spec.cluster_ip.clone()]);
        if let Some(other) = ips.insert(s.spec.cluster_ip.clone(), s.metadata.name.clone()) {
            panic!("{ip} given to {other} and {}", s.metadata.name);
        }
        for p in &s.spec.ports {
            let np = p.node_port.expect("a node port");
            assert!((30000..=32767).contains(&np), "{np}");
            if let Some(other) = ports.insert(np, s.metadata.name.clone()) {
                panic!("node port {np} given to {other} and {}", s.metadata.name);
            }
        }
    }
    assert_eq!((ips.len(), ports.len()), (150, 300));

    let api = client(&cluster).await;
    let s0 = svc(api
        .get(Kind::Service, "default", "s0")
        .await
        .unwrap()
        .unwrap());
    let (ip0, np0) = (
        s0.spec.cluster_ip.clone(),
        s0.spec.ports[0].node_port.unwrap(),
    );
    // Taken addresses are refused by name; addresses outside the ranges too.
    expect_err(
        api.create(&service(
            "dup",
            json!({"clusterIP": ip0, "ports": [{"port": 80}]}),
        ))
        .await,
        Code::InvalidArgument,
        "provided IP is already allocated",
    );
    expect_err(
        api.create(&service(
            "dup",
            json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": np0}]}),
        ))
        .await,
        Code::InvalidArgument,
        "provided port is already allocated",
    );
    expect_err(
        api.create(&service(
            "far",
            json!({"clusterIP": "192.168.0.1", "ports": [{"port": 80}]}),
        ))
        .await,
        Code::InvalidArgument,
        "provided IP is not in the valid range. The range of valid IPs is 10.96.0.0/12",
    );
    expect_err(
        api.create(&service(
            "far",
            json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 8080}]}),
        ))
        .await,
        Code::InvalidArgument,
        "The range of valid ports is 30000-32767",
    );
    // A headless Service has no address.
    let headless = svc(api
        .create(&service(
            "headless",
            json!({"clusterIP": "None", "selector": {"app": "x"}}),
        ))
        .await
        .expect("headless"));
    assert_eq!(headless.spec.cluster_ip, "None");

    // An update naming no cluster IP nor node ports keeps them; one changing the IP is refused.
    let mut same = s0.clone();
    same.spec.cluster_ip.clear();
    same.spec.cluster_ips.clear();
    for p in &mut same.spec.ports {
        p.node_port = None;
    }
    same.metadata.labels.insert("touched".into(), "yes".into());
    let kept = svc(api.update(&Object::Service(same)).await.expect("update"));
    assert_eq!(kept.spec.cluster_ip, ip0);
    assert_eq!(kept.spec.ports[0].node_port, Some(np0));
    let mut moved = kept.clone();
    moved.spec.cluster_ip = "10.96.7.7".into();
    moved.spec.cluster_ips = vec!["10.96.7.7".into()];
    expect_err(
        api.update(&Object::Service(moved)).await,
        Code::InvalidArgument,
        "spec.clusterIP",
    );
    // Dropping a port frees its node port; NodePort → ClusterIP frees the rest.
    let np1 = kept.spec.ports[1].node_port.unwrap();
    let mut fewer = kept.clone();
    fewer.spec.ports.truncate(1);
    let fewer = svc(api
        .update(&Object::Service(fewer))
        .await
        .expect("drop a port"));
    assert_eq!(fewer.spec.ports[0].node_port, Some(np0));
    api.create(&service(
        "takes-np1",
        json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": np1}]}),
    ))
    .await
    .expect("a dropped port's node port is free");
    let mut plain = fewer.clone();
    plain.spec.type_ = "ClusterIP".into();
    plain.spec.ports[0].node_port = None;
    api.update(&Object::Service(plain))
        .await
        .expect("to ClusterIP");
    api.create(&service(
        "takes-np0",
        json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": np0}]}),
    ))
    .await
    .expect("a ClusterIP Service holds no node port");

    // A delete gives the cluster IP back.
    api.delete(Kind::Service, "default", "s0", 0, None)
        .await
        .expect("delete");
    let again = svc(api
        .create(&service(
            "again",
            json!({"clusterIP": ip0, "ports": [{"port": 80}]}),
        ))
        .await
        .expect("a deleted Service's IP is free"));
    assert_eq!(again.spec.cluster_ip, ip0);
}
