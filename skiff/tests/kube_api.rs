//! The Kubernetes REST API through an unmodified Kubernetes client library (kube-rs with
//! k8s-openapi's types), against a real three-member store: what a Go, Python or Rust client
//! of any Kubernetes cluster does must work against Skiff.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Cluster, eventually};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, ReplicaSet};
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, LimitRange, LimitRangeItem, LimitRangeSpec,
    Namespace, Node, Pod, PodSpec, ResourceQuota, ResourceQuotaSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::{DynamicObject, Status as ErrorResponse};
use kube::runtime::watcher;
use kube::{Client, Config};
use serde_json::json;

async fn client(cluster: &Cluster, i: usize) -> Client {
    let config = Config::new(cluster.members[i].api_url.parse().expect("API URL"));
    Client::try_from(config).expect("kube client")
}

fn pod(name: &str) -> Pod {
    Pod {
        metadata: kube::core::ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                image: Some("busybox".into()),
                volume_mounts: Some(vec![VolumeMount {
                    name: "data".into(),
                    mount_path: "/data".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }],
            dns_policy: Some("ClusterFirst".into()),
            service_account_name: Some("builder".into()),
            volumes: Some(vec![Volume {
                name: "data".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn api_error(e: kube::Error) -> ErrorResponse {
    match e {
        kube::Error::Api(r) => *r,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Create, get, list, replace and delete of every kind, through the typed client; fields Skiff
/// does not act on (volumes, dnsPolicy, serviceAccountName) come back as written, and the
/// server fills in uid, creationTimestamp and resourceVersion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crud_on_every_kind() {
    let cluster = Cluster::start_with_api(3).await;
    let c = client(&cluster, 1).await;

    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let created = pods
        .create(&PostParams::default(), &pod("web"))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.as_deref().is_some_and(|u| !u.is_empty()));
    assert!(meta.creation_timestamp.is_some());
    assert!(meta.resource_version.is_some());
    let got = pods.get("web").await.unwrap();
    let spec = got.spec.as_ref().unwrap();
    assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(spec.service_account_name.as_deref(), Some("builder"));
    assert_eq!(spec.volumes.as_ref().unwrap()[0].name, "data");
    assert!(spec.volumes.as_ref().unwrap()[0].empty_dir.is_some());
    assert_eq!(
        spec.containers[0].volume_mounts.as_ref().unwrap()[0].mount_path,
        "/data"
    );
    assert_eq!(
        got.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );

    // Errors carry kube-apiserver's reasons and codes.
    let e = api_error(
        pods.create(&PostParams::default(), &pod("web"))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
    let e = api_error(pods.get("nope").await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
    assert_eq!(e.message, "pods \"nope\" not found");

    // Replace with a stale resourceVersion is a 409 Conflict; with the current one it lands.
    let mut stale = got.clone();
    stale.metadata.resource_version = Some("1".into());
    let e = api_error(
        pods.replace("web", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    let mut next = got.clone();
    next.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("note".into(), "hello".into());
    let replaced = pods
        .replace("web", &PostParams::default(), &next)
        .await
        .unwrap();
    assert_eq!(
        replaced.metadata.annotations.as_ref().unwrap()["note"],
        "hello"
    );

    let nodes: Api<Node> = Api::all(c.clone());
    let mut n = Node::default();
    n.metadata.name = Some("n1".into());
    nodes.create(&PostParams::default(), &n).await.unwrap();
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    let namespaces: Api<Namespace> = Api::all(c.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some("team".into());
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.contains(&"team".to_string()) && names.contains(&"default".to_string()));

    let quotas: Api<ResourceQuota> = Api::namespaced(c.clone(), "team");
    let mut q = ResourceQuota::default();
    q.metadata.name = Some("q".into());
    q.spec = Some(ResourceQuotaSpec {
        hard: Some(BTreeMap::from([(
            "pods".to_string(),
            Quantity("10".into()),
        )])),
        ..Default::default()
    });
    quotas.create(&PostParams::default(), &q).await.unwrap();
    let limits: Api<LimitRange> = Api::namespaced(c.clone(), "team");
    let mut l = LimitRange::default();
    l.metadata.name = Some("l".into());
    l.spec = Some(LimitRangeSpec {
        limits: vec![LimitRangeItem {
            type_: "Container".into(),
            default: Some(BTreeMap::from([(
                "cpu".to_string(),
                Quantity("100m".into()),
            )])),
            ..Default::default()
        }],
    });
    limits.create(&PostParams::default(), &l).await.unwrap();
    assert!(limits.get("l").await.is_ok() && quotas.get("q").await.is_ok());

    // An unbound pod is deleted at once; a second delete is NotFound.
    pods.delete("web", &DeleteParams::default()).await.unwrap();
    let e = api_error(pods.get("web").await.unwrap_err());
    assert_eq!(e.code, 404);
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
}

/// Pages of one list all read at the first page's resourceVersion: an object created between
/// pages is not in them, and every object present at the start is in exactly one page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_at_one_resource_version() {
    let cluster = Cluster::start_with_api(1).await;
    let c = client(&cluster, 0).await;
    let pods: Api<Pod> = Api::namespaced(c, "default");
    for i in 0..25 {
        pods.create(&PostParams::default(), &pod(&format!("p{i:02}")))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut params = ListParams::default().limit(10);
    let mut versions = Vec::new();
    loop {
        let page = pods.list(&params).await.unwrap();
        versions.push(page.metadata.resource_version.clone().unwrap());
        seen.extend(page.items.into_iter().filter_map(|p| p.metadata.name));
        if seen.len() == 10 {
            pods.create(&PostParams::default(), &pod("late"))
                .await
                .unwrap();
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    assert_eq!(seen.len(), 25, "{seen:?}");
    assert!(!seen.contains(&"late".to_string()));
    assert!(versions.windows(2).all(|w| w[0] == w[1]), "{versions:?}");
    // Label selectors filter server-side.
    let none = pods
        .list(&ListParams::default().labels("app=db"))
        .await
        .unwrap();
    assert!(none.items.is_empty());

    // A selective filter over more objects than the store reads at once: pages of matches
    // across the reads, at one revision.
    let mut db = pod("db");
    db.metadata.labels = Some(BTreeMap::from([("app".to_string(), "db".to_string())]));
    for i in 0..600 {
        let mut p = if i % 150 == 0 { db.clone() } else { pod("x") };
        p.metadata.name = Some(format!("q{i:03}"));
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    let mut matched = Vec::new();
    let mut params = ListParams::default().labels("app=db").limit(2);
    loop {
        let page = pods.list(&params).await.unwrap();
        assert!(page.items.len() <= 2);
        matched.extend(page.items.into_iter().filter_map(|p| p.metadata.name));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    assert_eq!(matched, ["q000", "q150", "q300", "q450"]);
}

/// A watch from a resourceVersion sees every later change in order; kube-runtime's watcher
/// (list, then watch) sees objects appear and go; a watch from a compacted version is answered
/// with 410 Expired, on which clients relist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resume_and_expired() {
    let cluster = Cluster::start_with_api(1).await;
    let c = client(&cluster, 0).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let first = pods
        .create(&PostParams::default(), &pod("a"))
        .await
        .unwrap();
    let from = first.metadata.resource_version.clone().unwrap();
    pods.create(&PostParams::default(), &pod("b"))
        .await
        .unwrap();
    pods.delete("a", &DeleteParams::default()).await.unwrap();

    let mut stream = pods
        .watch(&WatchParams::default().timeout(10), &from)
        .await
        .unwrap()
        .boxed();
    let mut got = Vec::new();
    while got.len() < 2 {
        match stream.try_next().await.unwrap().expect("stream open") {
            WatchEvent::Added(p) => got.push(format!("ADDED {}", p.metadata.name.unwrap())),
            WatchEvent::Deleted(p) => got.push(format!("DELETED {}", p.metadata.name.unwrap())),
            WatchEvent::Bookmark(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(got, ["ADDED b", "DELETED a"]);

    // kube-runtime's watcher: the initial list, then live changes.
    let mut events = watcher(pods.clone(), watcher::Config::default()).boxed();
    let added = tokio::spawn({
        let pods = pods.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            pods.create(&PostParams::default(), &pod("c"))
                .await
                .unwrap();
        }
    });
    let mut saw_init_b = false;
    loop {
        let e = tokio::time::timeout(Duration::from_secs(20), events.try_next())
            .await
            .expect("watcher event in time")
            .unwrap()
            .unwrap();
        match e {
            watcher::Event::InitApply(p) if p.metadata.name.as_deref() == Some("b") => {
                saw_init_b = true
            }
            watcher::Event::Apply(p) if p.metadata.name.as_deref() == Some("c") => break,
            _ => {}
        }
    }
    assert!(saw_init_b);
    added.await.unwrap();

    // Compact past `from`: a watch from there is 410 Expired.
    let mut etcd = cluster.client(0).await;
    let rev = etcd.status().await.unwrap().header().unwrap().revision();
    etcd.compact(rev, None).await.unwrap();
    let mut stream = pods
        .watch(&WatchParams::default().timeout(10), &from)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410 Expired, got {other:?}"),
    }
}

/// JSON merge patch, JSON patch and strategic merge patch each change what they say and keep
/// the rest; dry run writes nothing; Strict field validation names the unknown field, Warn
/// drops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patches_dry_run_and_field_validation() {
    let cluster = Cluster::start_with_api(1).await;
    let c = client(&cluster, 0).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    pods.create(&PostParams::default(), &pod("web"))
        .await
        .unwrap();

    let pp = PatchParams::default();
    let p = pods
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "front"}}})),
        )
        .await
        .unwrap();
    let labels = p.metadata.labels.clone().unwrap();
    assert_eq!(
        (labels["app"].as_str(), labels["tier"].as_str()),
        ("web", "front")
    );

    let p = pods
        .patch(
            "web",
            &pp,
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "test", "path": "/metadata/labels/tier", "value": "front"},
                    {"op": "remove", "path": "/metadata/labels/tier"}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert!(!p.metadata.labels.unwrap().contains_key("tier"));

    // Strategic merge: containers merge by name, so the image changes and the mounts stay.
    let p = pods
        .patch(
            "web",
            &pp,
            &Patch::Strategic(
                json!({"spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}),
            ),
        )
        .await
        .unwrap();
    let c0 = &p.spec.unwrap().containers[0];
    assert_eq!(c0.image.as_deref(), Some("busybox:1.36"));
    assert_eq!(c0.volume_mounts.as_ref().unwrap().len(), 1);

    // A failed JSON patch test is refused and changes nothing.
    let before = pods.get("web").await.unwrap().metadata.resource_version;
    let failing = Patch::Json::<()>(
        serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/name", "value": "other"}
        ]))
        .unwrap(),
    );
    let e = api_error(pods.patch("web", &pp, &failing).await.unwrap_err());
    assert_eq!(e.code, 400);
    assert_eq!(
        pods.get("web").await.unwrap().metadata.resource_version,
        before
    );

    // Dry run: answered as if created, nothing stored.
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    pods.create(&dry, &pod("ghost")).await.unwrap();
    assert_eq!(api_error(pods.get("ghost").await.unwrap_err()).code, 404);

    // Field validation: Strict names the misspelt field and writes nothing; Warn drops it
    // and says so in a Warning header; a patch under Strict is checked the same way.
    let typo = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "typo"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "comand": ["sh"]}]}
    });
    let create = |mode: &str| {
        http::Request::builder()
            .method("POST")
            .uri(format!(
                "/api/v1/namespaces/default/pods?fieldValidation={mode}"
            ))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&typo).unwrap())
            .unwrap()
    };
    let e = api_error(c.request::<Pod>(create("Strict")).await.unwrap_err());
    assert_eq!(e.code, 400);
    assert!(
        e.message
            .contains("unknown field \"spec.containers[0].comand\""),
        "{}",
        e.message
    );
    assert_eq!(api_error(pods.get("typo").await.unwrap_err()).code, 404);
    let created: DynamicObject = c.request(create("Warn")).await.unwrap();
    assert!(
        created.data["spec"]["containers"][0]
            .get("comand")
            .is_none()
    );
    let strict = PatchParams::default().validation_strict();
    let e = api_error(
        pods.patch("web", &strict, &Patch::Merge(json!({"spec": {"bogus": 1}})))
            .await
            .unwrap_err(),
    );
    assert!(
        e.message.contains("unknown field \"spec.bogus\""),
        "{}",
        e.message
    );
}

/// What a client library cannot send by mistake, sent on purpose: malformed JSON, a wrong
/// content type, a body over 3 MiB, an unknown resource. Each is a clear 4xx and nothing is
/// written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_and_write_nothing() {
    let cluster = Cluster::start_with_api(1).await;
    let c = client(&cluster, 0).await;
    let base = "/api/v1/namespaces/default/pods";
    let send = |method: &str, path: &str, ct: &str, body: Vec<u8>| {
        http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", ct)
            .body(body)
            .unwrap()
    };
    let cases: Vec<(http::Request<Vec<u8>>, u16)> = vec![
        (send("POST", base, "application/json", b"{\"metadata\":".to_vec()), 400),
        (send("POST", base, "application/json", b"[1,2]".to_vec()), 400),
        (send("POST", base, "text/plain", b"{}".to_vec()), 415),
        (
            send("POST", base, "application/json", vec![b' '; 4 * 1024 * 1024]),
            413,
        ),
        (
            send(
                "POST",
                base,
                "application/json",
                br#"{"metadata":{"name":"x"},"spec":{"containers":[{"name":"c","image":"i"}],"priority":"high"}}"#.to_vec(),
            ),
            400,
        ),
        (
            send(
                "POST",
                base,
                "application/json",
                br#"{"metadata":{"name":"Bad_Name"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#.to_vec(),
            ),
            422,
        ),
        (send("GET", "/api/v1/widgets", "application/json", vec![]), 404),
        (send("PUT", base, "application/json", b"{}".to_vec()), 405),
    ];
    for (req, code) in cases {
        let what = format!("{} {}", req.method(), req.uri());
        let e = match c.request_text(req).await {
            Err(kube::Error::Api(e)) => e,
            other => panic!("{what}: expected {code}, got {other:?}"),
        };
        assert_eq!(e.code, code, "{what}: {}", e.message);
        assert!(!e.message.is_empty(), "{what}");
    }
    let pods: Api<Pod> = Api::namespaced(c, "default");
    eventually(Duration::from_secs(5), "an empty namespace", || {
        let pods = pods.clone();
        async move {
            pods.list(&ListParams::default())
                .await
                .ok()
                .filter(|l| l.items.is_empty())
        }
    })
    .await;
}

/// Server-side apply: an apply creates the object and records its manager; a second manager
/// changing the first's field is refused with a 409 naming the field, unless it forces; a
/// manager's field left out of its next apply is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_conflicts_and_force() {
    let cluster = Cluster::start_with_api(1).await;
    let c = client(&cluster, 0).await;
    let pods: Api<Pod> = Api::namespaced(c, "default");
    let config = |image: &str, labels: serde_json::Value| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "ssa", "labels": labels},
            "spec": {"containers": [{"name": "c", "image": image}]}
        })
    };
    let alice = PatchParams::apply("alice");
    let created = pods
        .patch(
            "ssa",
            &alice,
            &Patch::Apply(config("busybox", json!({"app": "web", "tier": "front"}))),
        )
        .await
        .unwrap();
    let managers: Vec<String> = created
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, ["alice"]);

    let bob = PatchParams::apply("bob");
    let e = api_error(
        pods.patch("ssa", &bob, &Patch::Apply(config("busybox:2", json!({}))))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message.contains("conflict with \"alice\""),
        "{}",
        e.message
    );
    assert!(
        e.message.contains(".spec.containers[name=\"c\"].image"),
        "{}",
        e.message
    );

    let forced = pods
        .patch(
            "ssa",
            &bob.clone().force(),
            &Patch::Apply(config("busybox:2", json!({}))),
        )
        .await
        .unwrap();
    assert_eq!(
        forced.spec.unwrap().containers[0].image.as_deref(),
        Some("busybox:2")
    );

    // alice drops `tier` from her configuration: it goes; `app` stays hers.
    let image_now = "busybox:2";
    let after = pods
        .patch(
            "ssa",
            &alice,
            &Patch::Apply(config(image_now, json!({"app": "web"}))),
        )
        .await
        .unwrap();
    let labels = after.metadata.labels.unwrap();
    assert_eq!(labels.get("app").map(String::as_str), Some("web"));
    assert!(!labels.contains_key("tier"), "{labels:?}");

    // A write other than an apply takes the fields it changes: carol's merge patch is her
    // `Update`, and an applier changing that field again conflicts with her.
    let carol = PatchParams {
        field_manager: Some("carol".into()),
        ..PatchParams::default()
    };
    let relabelled = json!({"metadata": {"labels": {"app": "api"}}});
    let patched = pods
        .patch("ssa", &carol, &Patch::Merge(relabelled))
        .await
        .unwrap();
    let entries = patched.metadata.managed_fields.unwrap_or_default();
    let theirs = entries
        .iter()
        .find(|m| m.manager.as_deref() == Some("carol"))
        .expect("carol's entry");
    assert_eq!(theirs.operation.as_deref(), Some("Update"));
    let e = api_error(
        pods.patch(
            "ssa",
            &alice,
            &Patch::Apply(config(image_now, json!({"app": "web"}))),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 409);
    // kube-apiserver names the writer of an update with its version and time.
    assert!(
        e.message
            .starts_with("Apply failed with 1 conflict: conflict with \"carol\" using v1 at ")
            && e.message.ends_with(": .metadata.labels.app"),
        "{}",
        e.message
    );

    // A replace without managedFields keeps them, and records its own writer beside them;
    // one without a fieldManager is named after its User-Agent's product.
    let mut current = pods.get("ssa").await.unwrap();
    current.metadata.managed_fields = None;
    current.metadata.annotations = Some(BTreeMap::from([("note".into(), "x".into())]));
    let replaced = pods
        .replace("ssa", &PostParams::default(), &current)
        .await
        .unwrap();
    let managers: Vec<(String, String)> = replaced
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    for (manager, operation) in [("alice", "Apply"), ("carol", "Update")] {
        assert!(
            managers.contains(&(manager.into(), operation.into())),
            "{managers:?}"
        );
    }
    let writer = managers.last().expect("the replace's entry");
    assert_eq!(writer.1, "Update");
    assert!(
        !writer.0.is_empty() && !writer.0.contains('/'),
        "{managers:?}"
    );
}

/// `pods/exec`, `pods/attach` and `pods/portforward` through kube-rs's WebSocket client,
/// relayed by the API server to a simulated node agent: output, exit statuses, standard
/// input, forwarded connections, and refusals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_and_attach_through_the_agent() {
    use kube::api::AttachParams;
    use skiff_launch::{Launch, NodeCommand, RuntimeKind};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let cluster = Cluster::start_with_api(1).await;
    let node = NodeCommand {
        name: Some("n1".into()),
        logs_address: Some("127.0.0.1:0".into()),
        ..NodeCommand::new(RuntimeKind::Sim, cluster.endpoints())
    };
    let _agent = Launch::new(
        "agent n1",
        common::skiff_bin(),
        cluster.dir.path().join("agent.log"),
    )
    .args(node.args())
    .spawn()
    .expect("spawn skiff node");
    let pods: Api<Pod> = Api::default_namespaced(client(&cluster, 0).await);
    let mut p = pod("shell");
    let spec = p.spec.as_mut().expect("spec");
    spec.node_name = Some("n1".into());
    spec.containers[0].command = Some(vec!["sleep".into(), "3600".into()]);
    spec.containers[0].ports = Some(vec![ContainerPort {
        container_port: 8080,
        ..Default::default()
    }]);
    pods.create(&PostParams::default(), &p)
        .await
        .expect("create");
    eventually(Duration::from_secs(30), "the pod running", || async {
        let p = pods.get("shell").await.ok()?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;

    // A command's output and its exit status.
    let mut run = pods
        .exec(
            "shell",
            ["sh", "-c", "echo hi; exit 2"],
            &AttachParams::default(),
        )
        .await
        .expect("exec");
    let mut out = String::new();
    run.stdout()
        .expect("stdout")
        .read_to_string(&mut out)
        .await
        .expect("read stdout");
    let status = run.take_status().expect("status").await.expect("a status");
    assert_eq!(out, "hi\n");
    assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
    let causes = status.details.and_then(|d| d.causes).unwrap_or_default();
    assert_eq!(causes[0].message.as_deref(), Some("2"));
    run.join().await.expect("join");

    // Standard input reaches an interactive shell.
    let mut shell = pods
        .exec(
            "shell",
            ["sh"],
            &AttachParams::default().stdin(true).stderr(false),
        )
        .await
        .expect("exec sh");
    let mut stdin = shell.stdin().expect("stdin");
    stdin
        .write_all(b"echo from stdin\nexit 0\n")
        .await
        .expect("write");
    let mut out = String::new();
    shell
        .stdout()
        .expect("stdout")
        .read_to_string(&mut out)
        .await
        .expect("read");
    assert_eq!(out, "from stdin\n");
    let status = shell
        .take_status()
        .expect("status")
        .await
        .expect("a status");
    assert_eq!(status.status.as_deref(), Some("Success"));

    // Ports forwarded over WebSocket channels: the simulated pod's declared port echoes;
    // one it does not declare refuses, on the port's error channel.
    let mut forwarded = pods
        .portforward("shell", &[8080, 9090])
        .await
        .expect("portforward");
    let mut port = forwarded.take_stream(8080).expect("port 8080");
    port.write_all(b"through the agent").await.expect("write");
    let mut echoed = [0u8; 17];
    port.read_exact(&mut echoed).await.expect("read");
    assert_eq!(&echoed, b"through the agent");
    let refused = forwarded.take_error(9090).expect("port 9090's errors");
    let refused = tokio::time::timeout(Duration::from_secs(30), refused)
        .await
        .expect("the refusal within 30 s")
        .unwrap_or_default();
    assert!(refused.contains("connection refused"), "{refused:?}");
    drop(port);
    drop(forwarded.take_stream(9090));
    tokio::time::timeout(Duration::from_secs(30), forwarded.join())
        .await
        .expect("the forwarder ends once its ports are closed")
        .expect("join");

    // Attach ends when the container does: deleting the pod ends it.
    let mut attached = pods
        .attach("shell", &AttachParams::default().stderr(false))
        .await
        .expect("attach");
    let status = attached.take_status().expect("status");
    pods.delete("shell", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete");
    let status = tokio::time::timeout(Duration::from_secs(30), status)
        .await
        .expect("attach ends with the container")
        .expect("a status");
    assert_eq!(status.status.as_deref(), Some("Success"), "{status:?}");
    attached.join().await.expect("join");

    // Refusals come before the upgrade, with their HTTP status.
    let Err(missing) = pods
        .exec("nowhere", ["true"], &AttachParams::default())
        .await
    else {
        panic!("exec in a pod that does not exist succeeded");
    };
    assert!(format!("{missing:?}").contains("404"), "{missing:?}");
}

fn deployment(name: &str, template_app: &str) -> Deployment {
    let labels = |app: &str| Some(BTreeMap::from([("app".to_string(), app.to_string())]));
    Deployment {
        metadata: kube::core::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(2),
            selector: LabelSelector {
                match_labels: labels(name),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(kube::core::ObjectMeta {
                    labels: labels(template_app),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "c".into(),
                        image: Some("busybox".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn get_request(uri: &str, accept: &str) -> http::Request<Vec<u8>> {
    http::Request::builder()
        .uri(uri)
        .header("accept", accept)
        .body(Vec::new())
        .expect("a valid request")
}

/// The Table of `path`, as kubectl asks for it, and its columns' names.
async fn table_of(c: &Client, path: &str) -> (serde_json::Value, Vec<String>) {
    let table: serde_json::Value = c
        .request(get_request(
            path,
            "application/json;as=Table;v=v1;g=meta.k8s.io",
        ))
        .await
        .expect("a Table");
    let columns = table["columnDefinitions"]
        .as_array()
        .expect("column definitions")
        .iter()
        .map(|c| c["name"].as_str().expect("a column name").to_owned())
        .collect();
    (table, columns)
}

/// apps/v1 through kube-rs's typed API: create, get, list, list of metadata, patch and watch
/// of Deployments, each answer `apps/v1` (typed decoding checks it, and the raw list, watch
/// lines and Table are read as well); a selector that misses the template's labels is a 422
/// naming `spec.template.metadata.labels`, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_through_a_typed_client() {
    let cluster = Cluster::start_with_api(1).await;
    let c = client(&cluster, 0).await;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), "default");

    let created = deployments
        .create(&PostParams::default(), &deployment("web", "web"))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    let spec = created.spec.as_ref().unwrap();
    // Defaults apps/v1 gives.
    assert_eq!(spec.revision_history_limit, Some(10));
    assert_eq!(
        spec.strategy.as_ref().and_then(|s| s.type_.as_deref()),
        Some("RollingUpdate")
    );
    let got = deployments.get("web").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);
    let listed = deployments.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    let metadata = deployments
        .list_metadata(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(metadata.items[0].metadata.name.as_deref(), Some("web"));

    let patched = deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "front"}}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["tier"], "front");

    // The raw answers name apps/v1: the list, its items, and every watch event.
    let raw: serde_json::Value = c
        .request(get_request(
            "/apis/apps/v1/namespaces/default/deployments",
            "application/json",
        ))
        .await
        .unwrap();
    assert_eq!(
        (&raw["apiVersion"], &raw["kind"]),
        (&json!("apps/v1"), &json!("DeploymentList"))
    );
    assert_eq!(raw["items"][0]["apiVersion"], "apps/v1");
    let lines = c
        .request_text(get_request(
            "/apis/apps/v1/deployments?watch=1&timeoutSeconds=1",
            "application/json",
        ))
        .await
        .unwrap();
    let events: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 1);
    assert_eq!(
        (&events[0]["type"], &events[0]["object"]["apiVersion"]),
        (&json!("ADDED"), &json!("apps/v1"))
    );
    let mut watch = deployments
        .watch(
            &WatchParams::default(),
            raw["metadata"]["resourceVersion"].as_str().unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"note": "x"}}})),
        )
        .await
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(10), watch.try_next())
        .await
        .expect("an event")
        .unwrap()
    {
        Some(WatchEvent::Modified(d)) => assert_eq!(d.metadata.name.as_deref(), Some("web")),
        other => panic!("expected MODIFIED, got {other:?}"),
    }

    // kubectl's Table: the deployment printer's columns and a row.
    let (table, columns) = table_of(&c, "/apis/apps/v1/namespaces/default/deployments").await;
    assert_eq!(
        columns,
        [
            "Name",
            "Ready",
            "Up-to-date",
            "Available",
            "Age",
            "Containers",
            "Images",
            "Selector"
        ]
    );
    let cells = &table["rows"][0]["cells"];
    assert_eq!(
        (&cells[0], &cells[1], &cells[7]),
        (&json!("web"), &json!("0/2"), &json!("app=web"))
    );
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");

    // A selector that does not select the template: 422, the field named, nothing written.
    let e = api_error(
        deployments
            .create(&PostParams::default(), &deployment("bad", "other"))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    let causes = e.details.expect("details").causes;
    assert!(
        causes
            .iter()
            .any(|c| c.field == "spec.template.metadata.labels"),
        "{causes:?}"
    );
    assert_eq!(
        api_error(deployments.get("bad").await.unwrap_err()).code,
        404
    );

    let replica_sets: Api<ReplicaSet> = Api::namespaced(c.clone(), "default");
    assert!(
        replica_sets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        api_error(deployments.get("web").await.unwrap_err()).code,
        404
    );
}

/// The scale subresource as kube-rs reads and writes it: autoscaling/v1 Scale with the
/// deployment's identity, replicas and selector; a merge patch and a replace change the
/// deployment's `spec.replicas` (and bump its generation) and nothing else; a stale
/// resourceVersion is a 409 and a negative count a 422, each writing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_subresource() {
    let cluster = Cluster::start_with_api(1).await;
    let c = client(&cluster, 0).await;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), "default");
    let created = deployments
        .create(&PostParams::default(), &deployment("web", "web"))
        .await
        .unwrap();

    let scale = deployments.get_scale("web").await.unwrap();
    assert_eq!(scale.metadata.uid, created.metadata.uid);
    assert_eq!(
        scale.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(scale.spec.as_ref().and_then(|s| s.replicas), Some(2));
    let status = scale.status.as_ref().unwrap();
    assert_eq!(
        (status.replicas, status.selector.as_deref()),
        (0, Some("app=web"))
    );

    let scaled = deployments
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.spec.as_ref().and_then(|s| s.replicas), Some(5));
    let after = deployments.get("web").await.unwrap();
    assert_eq!(after.spec.as_ref().unwrap().replicas, Some(5));
    assert_eq!(after.metadata.generation, Some(2));
    assert_eq!(
        after.spec.as_ref().unwrap().template,
        created.spec.as_ref().unwrap().template
    );

    // Replace pinned to a version that moved on: 409, and the count stays.
    let stale = Scale {
        metadata: kube::core::ObjectMeta {
            name: Some("web".into()),
            resource_version: created.metadata.resource_version.clone(),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::autoscaling::v1::ScaleSpec { replicas: Some(1) }),
        status: None,
    };
    let e = api_error(
        deployments
            .replace_scale("web", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);
    let mut current = stale.clone();
    current.metadata.resource_version = after.metadata.resource_version.clone();
    let replaced = deployments
        .replace_scale("web", &PostParams::default(), &current)
        .await
        .unwrap();
    assert_eq!(replaced.spec.and_then(|s| s.replicas), Some(1));

    let e = api_error(
        deployments
            .patch_scale(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": -1}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert_eq!(
        deployments.get("web").await.unwrap().spec.unwrap().replicas,
        Some(1)
    );

    // A subresource that does not exist is 404.
    let e = api_error(
        c.request::<serde_json::Value>(get_request(
            "/apis/apps/v1/namespaces/default/deployments/web/rollback",
            "application/json",
        ))
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 404);
}

/// Deletion propagation over REST: `propagationPolicy=Orphan` (and the deprecated
/// `orphanDependents=true`) and `Foreground` leave the deployment marked, holding the garbage
/// collector's finalizer; Background and the default remove it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_propagation_over_rest() {
    let cluster = Cluster::start_with_api(1).await;
    let c = client(&cluster, 0).await;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), "default");
    for (name, params, finalizer) in [
        ("orphan", DeleteParams::orphan(), Some("orphan")),
        (
            "fore",
            DeleteParams::foreground(),
            Some("foregroundDeletion"),
        ),
        ("back", DeleteParams::background(), None),
        ("plain", DeleteParams::default(), None),
    ] {
        deployments
            .create(&PostParams::default(), &deployment(name, name))
            .await
            .unwrap();
        deployments.delete(name, &params).await.unwrap();
        match finalizer {
            Some(f) => {
                let held = deployments.get(name).await.unwrap();
                assert!(held.metadata.deletion_timestamp.is_some(), "{name}");
                assert_eq!(
                    held.metadata.finalizers,
                    Some(vec![f.to_string()]),
                    "{name}"
                );
            }
            None => assert_eq!(
                api_error(deployments.get(name).await.unwrap_err()).code,
                404
            ),
        }
    }
    deployments
        .create(&PostParams::default(), &deployment("legacy", "legacy"))
        .await
        .unwrap();
    let deleted: serde_json::Value = c
        .request(
            http::Request::builder()
                .method("DELETE")
                .uri("/apis/apps/v1/namespaces/default/deployments/legacy?orphanDependents=true")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(deleted["metadata"]["finalizers"], json!(["orphan"]));
    let e = api_error(
        c.request::<serde_json::Value>(
            http::Request::builder()
                .method("DELETE")
                .uri("/apis/apps/v1/namespaces/default/deployments/legacy?propagationPolicy=Sideways")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 400);
}

/// The declared kinds through kube-rs's typed `Api<K>`: a ConfigMap's life (create, watch,
/// merge patch, immutability), a Lease taken over compare-and-swap as client-go's and
/// kube-rs's leader election do, a Job with kube-apiserver's defaults and its generated
/// selector, a StatefulSet scaled through its `scale` subresource, the system namespaces and
/// priority classes, and the same objects read as `DynamicObject`s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_kinds_through_typed_clients() {
    use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
    use k8s_openapi::api::batch::v1::{Job, JobSpec};
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    use kube::discovery::ApiResource;

    let cluster = Cluster::start_with_api(1).await;
    let c = client(&cluster, 0).await;

    // ConfigMap: created, seen by a watch, patched; once immutable, its data stays.
    let config_maps: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let mut watch = config_maps
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let cm = ConfigMap {
        metadata: kube::core::ObjectMeta {
            name: Some("settings".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("mode".to_string(), "fast".to_string())])),
        ..Default::default()
    };
    config_maps
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    match watch.try_next().await.unwrap() {
        Some(WatchEvent::Added(seen)) => {
            assert_eq!(seen.metadata.name.as_deref(), Some("settings"))
        }
        other => panic!("expected the ConfigMap added, got {other:?}"),
    }
    let patched = config_maps
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"level": "3"}, "immutable": true})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap().len(), 2);
    let e = api_error(
        config_maps
            .patch(
                "settings",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"level": "4"}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422, "{e:?}");
    assert!(
        e.message.contains("data: field is immutable"),
        "{}",
        e.message
    );

    // Lease: two candidates race for it with the version each read; one wins, the other gets
    // 409 and reads again, as leader election does.
    let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-system");
    let lease = Lease {
        metadata: kube::core::ObjectMeta {
            name: Some("controller".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("a".into()),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }),
    };
    let held = leases.create(&PostParams::default(), &lease).await.unwrap();
    let take = |holder: &str| {
        let mut l = held.clone();
        l.spec.as_mut().unwrap().holder_identity = Some(holder.into());
        l
    };
    leases
        .replace("controller", &PostParams::default(), &take("b"))
        .await
        .unwrap();
    let e = api_error(
        leases
            .replace("controller", &PostParams::default(), &take("c"))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);
    let now = leases.get("controller").await.unwrap();
    assert_eq!(now.spec.unwrap().holder_identity.as_deref(), Some("b"));

    // Job: kube-apiserver's defaults, and a selector of its own uid on the pods' labels.
    let jobs: Api<Job> = Api::namespaced(c.clone(), "default");
    let mut template = deployment("unused", "pi").spec.unwrap().template;
    template.metadata = None;
    template.spec.as_mut().unwrap().restart_policy = Some("Never".into());
    let job = Job {
        metadata: kube::core::ObjectMeta {
            name: Some("pi".into()),
            ..Default::default()
        },
        spec: Some(JobSpec {
            template,
            ..Default::default()
        }),
        ..Default::default()
    };
    let job = jobs.create(&PostParams::default(), &job).await.unwrap();
    let spec = job.spec.unwrap();
    assert_eq!(
        (spec.completions, spec.parallelism, spec.backoff_limit),
        (Some(1), Some(1), Some(6))
    );
    let uid = job.metadata.uid.unwrap();
    let selector = spec.selector.unwrap().match_labels.unwrap();
    assert_eq!(selector["batch.kubernetes.io/controller-uid"], uid);
    let labels = spec.template.metadata.unwrap().labels.unwrap();
    assert_eq!(labels["job-name"], "pi");

    // StatefulSet: its scale subresource.
    let sets: Api<StatefulSet> = Api::namespaced(c.clone(), "default");
    let web = deployment("db", "db").spec.unwrap();
    let sts = StatefulSet {
        metadata: kube::core::ObjectMeta {
            name: Some("db".into()),
            ..Default::default()
        },
        spec: Some(StatefulSetSpec {
            service_name: Some("db".into()),
            selector: web.selector,
            template: web.template,
            ..Default::default()
        }),
        ..Default::default()
    };
    sets.create(&PostParams::default(), &sts).await.unwrap();
    let scale = sets.get_scale("db").await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(1));
    assert_eq!(
        scale.status.and_then(|s| s.selector).as_deref(),
        Some("app=db")
    );
    sets.patch_scale(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await
    .unwrap();
    assert_eq!(
        sets.get("db").await.unwrap().spec.unwrap().replicas,
        Some(3)
    );

    // What every cluster has, made when the member starts.
    let namespaces: Api<Namespace> = Api::all(c.clone());
    let classes: Api<PriorityClass> = Api::all(c.clone());
    eventually(Duration::from_secs(10), "the system objects", || {
        let (namespaces, classes) = (namespaces.clone(), classes.clone());
        async move {
            namespaces.get("kube-node-lease").await.ok()?;
            let critical = classes.get("system-node-critical").await.ok()?;
            (critical.value == 2_000_001_000).then_some(())
        }
    })
    .await;

    // The same objects, untyped.
    let resource = ApiResource::erase::<Job>(&());
    let dynamic: Api<DynamicObject> = Api::namespaced_with(c.clone(), "default", &resource);
    let listed = dynamic.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].data["spec"]["completionMode"], "NonIndexed");
}

/// A CustomResourceDefinition through kube-rs, as an operator uses one: applied, established,
/// discovered (its newest version preferred), its objects pruned, defaulted and validated by
/// its schema (a bad one is a 422 naming each field), read in either version, watched, their
/// status and scale subresources, their printer columns in a Table and their schema in the
/// OpenAPI document; deleted, it takes its objects with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_through_kube_rs() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::core::{ApiResource, GroupVersionKind};

    let cluster = Cluster::start_with_api(1).await;
    let c = client(&cluster, 0).await;
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "required": ["image"], "properties": {
                "image": {"type": "string"},
                "replicas": {"type": "integer", "minimum": 0, "maximum": 10, "default": 1},
                "mode": {"type": "string", "enum": ["fast", "safe"]}
            }},
            "status": {"type": "object", "properties": {
                "replicas": {"type": "integer"}, "selector": {"type": "string"}
            }}
        }
    });
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                      "shortNames": ["wd"]},
            "versions": [
                {"name": "v1", "served": true, "storage": true,
                 "schema": {"openAPIV3Schema": schema},
                 "subresources": {"status": {}, "scale": {
                     "specReplicasPath": ".spec.replicas",
                     "statusReplicasPath": ".status.replicas",
                     "labelSelectorPath": ".status.selector"}},
                 "additionalPrinterColumns": [
                     {"name": "Image", "type": "string", "jsonPath": ".spec.image"},
                     {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"}]},
                {"name": "v2", "served": true, "storage": false,
                 "schema": {"openAPIV3Schema": schema}}
            ]
        }
    }))
    .unwrap();
    let created = crds.create(&PostParams::default(), &crd).await.unwrap();
    assert_eq!(
        created.metadata.finalizers.as_deref(),
        Some(&["customresourcecleanup.apiextensions.k8s.io".to_string()][..])
    );
    eventually(Duration::from_secs(10), "the CRD established", || {
        let crds = crds.clone();
        async move {
            let status = crds.get("widgets.example.com").await.ok()?.status?;
            let established = status
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            (established && status.stored_versions == Some(vec!["v1".into()])).then_some(())
        }
    })
    .await;

    // Discovery: both versions, v2 preferred (Kubernetes' version priority).
    let discovery = kube::Discovery::new(c.clone()).run().await.unwrap();
    let group = discovery
        .groups()
        .find(|g| g.name() == "example.com")
        .expect("example.com discovered");
    assert_eq!(group.versions().collect::<Vec<_>>(), ["v2", "v1"]);
    assert_eq!(group.preferred_version(), Some("v2"));

    // Each served group version has its APIService, the CRD's among them, Available.
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
    let api_services: Api<APIService> = Api::all(c.clone());
    for name in ["v1.", "v1.apps", "v2.example.com", "v1.example.com"] {
        eventually(Duration::from_secs(15), name, || {
            let api_services = api_services.clone();
            async move {
                let s = api_services.get(name).await.ok()?;
                let available = s.status?.conditions?.iter().any(|c| {
                    c.type_ == "Available"
                        && c.status == "True"
                        && c.reason.as_deref() == Some("Local")
                });
                (available && s.spec?.service.is_none()).then_some(())
            }
        })
        .await;
    }

    let v1 = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let v2 = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v2", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(c.clone(), "default", &v1);
    let widget = |name: &str, spec: serde_json::Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap()
    };
    let mut watch = widgets
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();

    // Pruned and defaulted by the schema.
    let made = widgets
        .create(
            &PostParams::default(),
            &widget("w1", json!({"image": "busybox", "typo": true})),
        )
        .await
        .unwrap();
    assert_eq!(
        made.data["spec"],
        json!({"image": "busybox", "replicas": 1})
    );
    match watch.try_next().await.unwrap() {
        Some(WatchEvent::Added(seen)) => assert_eq!(seen.metadata.name.as_deref(), Some("w1")),
        other => panic!("expected the widget added, got {other:?}"),
    }

    // Validated by the schema: every violation named, nothing written.
    let e = api_error(
        widgets
            .create(
                &PostParams::default(),
                &widget("bad", json!({"replicas": 11, "mode": "slow"})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422, "{e:?}");
    for field in ["spec.image", "spec.replicas", "spec.mode"] {
        assert!(e.message.contains(field), "{field} in {}", e.message);
    }
    assert!(widgets.get_opt("bad").await.unwrap().is_none());

    // Read in the other version.
    let as_v2: Api<DynamicObject> = Api::namespaced_with(c.clone(), "default", &v2);
    let read = as_v2.get("w1").await.unwrap();
    assert_eq!(
        read.types.map(|t| t.api_version).as_deref(),
        Some("example.com/v2")
    );

    // Status: its own subresource, kept by writes of the object.
    widgets
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1, "selector": "app=w1"}})),
        )
        .await
        .unwrap();
    let updated = widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}, "status": {"replicas": 9}})),
        )
        .await
        .unwrap();
    assert_eq!(updated.data["status"]["replicas"], 1);

    // Scale, at the CRD's paths.
    let scale = widgets.get_scale("w1").await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));
    let status = scale.status.unwrap();
    assert_eq!(
        (status.replicas, status.selector.as_deref()),
        (1, Some("app=w1"))
    );
    widgets
        .patch_scale(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(widgets.get("w1").await.unwrap().data["spec"]["replicas"], 5);

    // The printer columns, as kubectl asks for them.
    let (table, columns) = table_of(&c, "/apis/example.com/v1/namespaces/default/widgets").await;
    assert_eq!(columns, ["Name", "Image", "Replicas"]);
    assert_eq!(table["rows"][0]["cells"], json!(["w1", "busybox", 5]));

    // The schema, in the group version's OpenAPI document.
    let index: serde_json::Value = c
        .request(get_request("/openapi/v3", "application/json"))
        .await
        .unwrap();
    let url = index["paths"]["apis/example.com/v1"]["serverRelativeURL"]
        .as_str()
        .expect("the custom group version in the OpenAPI index")
        .to_owned();
    let document: serde_json::Value = c
        .request(get_request(&url, "application/json"))
        .await
        .unwrap();
    let schema = &document["components"]["schemas"]["com.example.v1.Widget"];
    assert_eq!(
        schema["properties"]["spec"]["properties"]["replicas"]["maximum"].as_f64(),
        Some(10.0)
    );

    // Deleted, the CRD takes its objects; created again, it has none.
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "the CRD gone", || {
        let crds = crds.clone();
        async move { matches!(crds.get_opt("widgets.example.com").await, Ok(None)).then_some(()) }
    })
    .await;
    let e = api_error(widgets.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(e.code, 404);
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let listed = eventually(Duration::from_secs(10), "the CRD served again", || {
        let widgets = widgets.clone();
        async move { widgets.list(&ListParams::default()).await.ok() }
    })
    .await;
    assert!(listed.items.is_empty(), "{:?}", listed.items);
}

/// Leader election as kube-rs programs do it, with a library made for it
/// (`kube-lease-manager`, on server-side apply, strategic merge patches and its own field
/// managers): one candidate leads while it renews, the other takes over when the leader
/// lets go, and a leader that stops renewing without letting go loses the Lease once it
/// expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_based_leader_election_with_kube_rs() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};

    let cluster = Cluster::start_with_api(1).await;
    let c = client(&cluster, 0).await;
    let candidate = |identity: &str| {
        LeaseManagerBuilder::new(c.clone(), "skiff-election")
            .with_namespace("default")
            .with_parameters(LeaseParams::new(identity, 3, 1))
            .build()
    };
    let leases: Api<Lease> = Api::namespaced(c.clone(), "default");
    let holder = || async {
        let lease = leases.get("skiff-election").await.ok()?;
        lease.spec?.holder_identity
    };
    // A candidate lets go: its channel closes, and its manager releases the Lease and ends.
    async fn let_go(
        channel: tokio::sync::watch::Receiver<bool>,
        task: tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
    ) {
        drop(channel);
        task.await
            .expect("the candidate's task")
            .expect("the Lease released");
    }
    // Whether `channel` says its candidate leads within `within`.
    async fn leads(channel: &mut tokio::sync::watch::Receiver<bool>, within: Duration) -> bool {
        tokio::time::timeout(within, channel.wait_for(|leading| *leading))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    let (mut a, a_task) = candidate("a").await.expect("candidate a").watch().await;
    assert!(leads(&mut a, Duration::from_secs(10)).await, "a never led");
    let (mut b, b_task) = candidate("b").await.expect("candidate b").watch().await;
    // Three lease durations: a renews, b waits.
    assert!(
        !leads(&mut b, Duration::from_secs(9)).await,
        "b led while a renewed"
    );
    assert!(*a.borrow(), "a stopped leading while it renewed");
    assert_eq!(holder().await.as_deref(), Some("a"));

    // a lets go (its channel closes: the manager releases the Lease and ends).
    let_go(a, a_task).await;
    assert!(
        leads(&mut b, Duration::from_secs(10)).await,
        "b did not take over"
    );
    assert_eq!(holder().await.as_deref(), Some("b"));
    let transitions = leases
        .get("skiff-election")
        .await
        .unwrap()
        .spec
        .unwrap()
        .lease_transitions;
    assert!(transitions >= Some(1), "transitions: {transitions:?}");

    // b stops renewing without letting go, as a crashed leader does: a new candidate takes
    // the Lease once it expires, and not before.
    b_task.abort();
    let _ = b_task.await;
    let at = |t: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>| {
        let t = serde_json::to_value(t.expect("a time")).unwrap();
        chrono::DateTime::parse_from_rfc3339(t.as_str().unwrap()).unwrap()
    };
    let last = leases.get("skiff-election").await.unwrap().spec.unwrap();
    let expiry = at(last.renew_time)
        + chrono::Duration::seconds(last.lease_duration_seconds.unwrap().into());
    let (mut a, a_task) = candidate("a")
        .await
        .expect("candidate a again")
        .watch()
        .await;
    assert!(
        leads(&mut a, Duration::from_secs(15)).await,
        "a did not take over an expired Lease"
    );
    let taken = leases.get("skiff-election").await.unwrap().spec.unwrap();
    assert!(
        at(taken.acquire_time) >= expiry,
        "a took the Lease before b's expired at {expiry}"
    );
    assert_eq!(holder().await.as_deref(), Some("a"));
    let_go(a, a_task).await;
    drop(b);
}
