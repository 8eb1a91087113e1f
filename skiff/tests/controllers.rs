//! `skiff controller-manager` against a real three-member store, with the scheduler and
//! simulated node agents: Deployments roll out ReplicaSets that run pods.
//!
//! The bounds of a rolling update are checked on every pod watch event, not sampled: a
//! watcher that sees every change to the pods counts, after each one, the active pods (not
//! finished, not being deleted), which must never exceed `replicas + maxSurge`, and the
//! available ones, which must never drop below `replicas - maxUnavailable` once the rollout
//! began from a full set.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Cluster, eventually, free_port, skiff_bin};
use futures::StreamExt;
use serde_json::json;
use skiff_launch::{
    Child, ControllerManagerCommand, Launch, NodeCommand, RuntimeKind, SchedulerCommand,
};
use skiff_proto::api::apps::POD_TEMPLATE_HASH_LABEL;
use skiff_proto::api::{
    ConditionStatus, Deployment, Kind, NamespaceConditionType, NamespacePhase, Object, Pod,
    PodConditionType, ReplicaSet, WorkloadConditionType,
};
use skiff_proto::client::{ClusterClient, Event, ListParams};
use skiff_proto::http::HttpClient;

fn obj(kind: Kind, v: serde_json::Value) -> Object {
    Object::from_json(kind, v.to_string().as_bytes()).expect("test object decodes")
}

/// The Deployment the tests roll: `replicas` pods of `image`, surging by 1, never below
/// `replicas` available.
fn web(replicas: i32, image: &str) -> Object {
    obj(
        Kind::Deployment,
        json!({"metadata": {"name": "web", "namespace": "default"},
               "spec": {"replicas": replicas,
                        "selector": {"matchLabels": {"app": "web"}},
                        "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "web", "image": image}]}}}}),
    )
}

/// The node monitor grace period the tests run with (the figure is taken with 10 s
/// of grace and 10 s of toleration).
const NODE_GRACE: Duration = Duration::from_secs(10);

/// A child process of the test (killed by PID when dropped).
fn spawn(cluster: &Cluster, name: &str, args: Vec<std::ffi::OsString>) -> Child {
    Launch::new(
        name,
        skiff_bin(),
        cluster.dir.path().join(format!("{name}.log")),
    )
    .args(args)
    .spawn()
    .unwrap_or_else(|e| panic!("spawn {name}: {e}"))
    .tail_on_panic(200)
}

struct Control {
    _scheduler: Child,
    _agents: Child,
    managers: Vec<(Child, SocketAddr)>,
}

/// The scheduler, `nodes` simulated nodes and `managers` controller managers.
fn start_control(cluster: &Cluster, nodes: usize, managers: usize) -> Control {
    let scheduler = SchedulerCommand {
        endpoints: cluster.endpoints(),
        lease_ttl: Some(Duration::from_secs(2)),
        log: Some("info".into()),
        ..SchedulerCommand::default()
    };
    Control {
        _scheduler: spawn(cluster, "scheduler", scheduler.args()),
        _agents: agents(cluster, "n", nodes),
        managers: (0..managers)
            .map(|i| {
                let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
                let cm = ControllerManagerCommand {
                    endpoints: cluster.endpoints(),
                    metrics_addr: Some(metrics),
                    lease_ttl: Some(Duration::from_secs(2)),
                    node_monitor_grace_period: Some(NODE_GRACE),
                    node_eviction_rate: Some(100.0),
                    log: Some("info".into()),
                    ..ControllerManagerCommand::default()
                };
                (spawn(cluster, &format!("cm-{i}"), cm.args()), metrics)
            })
            .collect(),
    }
}

/// One agent process running `count` simulated nodes named `<prefix><i>`.
fn agents(cluster: &Cluster, prefix: &str, count: usize) -> Child {
    // One node is named by `name`; several by the prefix.
    let agents = NodeCommand {
        name: (count == 1).then(|| format!("{prefix}0")),
        count: (count > 1).then_some(count),
        name_prefix: Some(prefix.into()),
        heartbeat_interval: Some(Duration::from_secs(1)),
        logs_address: Some("127.0.0.1:0".into()),
        log: Some("info".into()),
        // Volumes brought up to date, and deleted local volumes collected, within seconds.
        volume_resync: Some(Duration::from_secs(1)),
        ..NodeCommand::new(RuntimeKind::Sim, cluster.endpoints())
    };
    spawn(cluster, &format!("agents-{prefix}"), agents.args())
}

fn leads(child: &Child) -> bool {
    std::fs::read_to_string(child.log())
        .unwrap_or_default()
        .contains("became the leader")
}

/// What the watcher checks, and what it found.
#[derive(Debug, Default)]
struct Watched {
    pods: BTreeMap<String, Pod>,
    /// (most active pods, fewest available pods) allowed now; `None`: not checked.
    ceiling: Option<usize>,
    floor: Option<usize>,
    violations: Vec<String>,
    events: u64,
    /// Why the watch ended, if it did: every check after that would be blind.
    broken: Option<String>,
}

fn active(p: &Pod) -> bool {
    !p.is_terminal() && p.metadata.deletion_timestamp.is_none()
}

fn ready(p: &Pod) -> bool {
    p.condition(&PodConditionType::Ready)
        .is_some_and(|c| c.status == ConditionStatus::True)
}

impl Watched {
    fn counts(&self) -> (usize, usize) {
        let active: Vec<&Pod> = self.pods.values().filter(|p| active(p)).collect();
        (active.len(), active.iter().filter(|p| ready(p)).count())
    }

    /// Fails the test if the watch ended: the bounds were not checked after that.
    fn assert_followed(&self) {
        assert!(
            self.broken.is_none(),
            "the pod watch broke: {:?}",
            self.broken
        );
    }

    fn check(&mut self) {
        let (n, available) = self.counts();
        if let Some(c) = self.ceiling
            && n > c
        {
            self.violations
                .push(format!("event {}: {n} active pods > {c}", self.events));
        }
        if let Some(f) = self.floor
            && available < f
        {
            self.violations.push(format!(
                "event {}: {available} available pods < {f}",
                self.events
            ));
        }
    }
}

/// Follows every change to the pods of `default` and checks the bounds after each.
fn watch_pods(api: ClusterClient) -> Arc<Mutex<Watched>> {
    let state = Arc::new(Mutex::new(Watched::default()));
    let s = state.clone();
    tokio::spawn(async move {
        let params = ListParams::default().namespace("default");
        let (items, rev) = api.list(Kind::Pod, &params).await.expect("list pods");
        {
            let mut w = s.lock().expect("lock");
            for o in items {
                if let Object::Pod(p) = o {
                    w.pods.insert(p.metadata.name.clone(), p);
                }
            }
        }
        let mut stream = Box::pin(
            api.watch(Kind::Pod, &params.watch_after(rev))
                .await
                .expect("watch pods"),
        );
        while let Some(e) = stream.next().await {
            let mut w = s.lock().expect("lock");
            let e = match e {
                Ok(e) => e,
                Err(e) => {
                    // The cluster going away at the end of a test ends it too.
                    w.broken = Some(e.to_string());
                    return;
                }
            };
            w.events += 1;
            match e {
                Event::Added(Object::Pod(p)) | Event::Modified(Object::Pod(p)) => {
                    w.pods.insert(p.metadata.name.clone(), p);
                }
                Event::Deleted(Object::Pod(p)) => {
                    w.pods.remove(&p.metadata.name);
                }
                _ => {}
            }
            w.check();
        }
    });
    state
}

async fn deployment(api: &ClusterClient) -> Deployment {
    match api.get(Kind::Deployment, "default", "web").await {
        Ok(Some(Object::Deployment(d))) => d,
        other => panic!("no deployment web: {other:?}"),
    }
}

async fn replica_sets(api: &ClusterClient) -> Vec<ReplicaSet> {
    api.list(
        Kind::ReplicaSet,
        &ListParams::default().namespace("default"),
    )
    .await
    .expect("list replica sets")
    .0
    .into_iter()
    .filter_map(|o| match o {
        Object::ReplicaSet(rs) => Some(rs),
        _ => None,
    })
    .collect()
}

/// Waits until the Deployment's rollout is complete as `kubectl rollout status` judges it
/// (observed generation, updated, total and available replicas all at `replicas`), and
/// every active pod runs `image`.
async fn rolled_out(api: &ClusterClient, watched: &Mutex<Watched>, replicas: i32, image: &str) {
    eventually(
        Duration::from_secs(120),
        &format!("{replicas} replicas of {image} rolled out"),
        || async {
            let d = deployment(api).await;
            let s = d.status.clone().unwrap_or_default();
            let done = s.observed_generation >= d.metadata.generation
                && s.updated_replicas == replicas
                && s.replicas == replicas
                && s.available_replicas == replicas;
            let w = watched.lock().expect("lock");
            let pods: Vec<&Pod> = w.pods.values().filter(|p| active(p)).collect();
            let all_new = pods.len() == replicas as usize
                && pods
                    .iter()
                    .all(|p| p.spec.containers[0].image == image && ready(p));
            (done && all_new).then_some(())
        },
    )
    .await;
}

/// Sets the bounds the watcher checks from now on.
fn bounds(watched: &Mutex<Watched>, ceiling: Option<usize>, floor: Option<usize>) {
    let mut w = watched.lock().expect("lock");
    w.ceiling = ceiling;
    w.floor = floor;
    w.check();
}

async fn update(api: &ClusterClient, replicas: i32, image: &str) {
    let mut next = deployment(api).await;
    let Object::Deployment(want) = web(replicas, image) else {
        unreachable!()
    };
    next.spec.replicas = want.spec.replicas;
    next.spec.template = want.spec.template;
    api.update(&Object::Deployment(next))
        .await
        .expect("update deployment");
}

/// The whole flow: a Deployment of 3 becomes one ReplicaSet and 3 running pods; an image
/// change rolls out within maxSurge 1 / maxUnavailable 0 on every event; rolling back
/// reuses the first ReplicaSet under a new revision; scaling to 0 and to 50 works; killing
/// the leading controller manager mid-rollout hands over to the standby and the rollout
/// still finishes within its bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_roll_out_within_their_bounds_and_survive_a_failover() {
    let cluster = Cluster::start(3).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let mut control = start_control(&cluster, 3, 2);
    let watched = watch_pods(api.clone());

    bounds(&watched, Some(4), None);
    api.create(&web(3, "localhost/skiff/busybox:1"))
        .await
        .expect("create deployment");
    rolled_out(&api, &watched, 3, "localhost/skiff/busybox:1").await;
    let sets = replica_sets(&api).await;
    assert_eq!(sets.len(), 1, "one ReplicaSet: {sets:?}");
    let first = sets[0].clone();
    let hash = &first.metadata.labels[POD_TEMPLATE_HASH_LABEL];
    assert_eq!(first.metadata.name, format!("web-{hash}"));
    assert_eq!(
        first.metadata.owner_references[0].kind, "Deployment",
        "owned by the Deployment"
    );

    // An image change: a rolling update that never leaves 3..=4.
    bounds(&watched, Some(4), Some(3));
    update(&api, 3, "localhost/skiff/busybox:2").await;
    rolled_out(&api, &watched, 3, "localhost/skiff/busybox:2").await;
    let d = deployment(&api).await;
    let progressing = d
        .condition(&WorkloadConditionType::Progressing)
        .expect("Progressing");
    assert_eq!(progressing.reason, "NewReplicaSetAvailable");
    assert_eq!(replica_sets(&api).await.len(), 2, "the old set is kept");

    // Roll back (as `kubectl rollout undo` does: the old template again).
    update(&api, 3, "localhost/skiff/busybox:1").await;
    rolled_out(&api, &watched, 3, "localhost/skiff/busybox:1").await;
    let sets = replica_sets(&api).await;
    assert_eq!(sets.len(), 2, "the first set is reused: {sets:?}");
    let reused = sets
        .iter()
        .find(|rs| rs.metadata.name == first.metadata.name)
        .expect("first set");
    assert_eq!(
        reused.metadata.annotations["deployment.kubernetes.io/revision"], "3",
        "a rollback is a new revision"
    );

    // Scale to 0, then to 50.
    bounds(&watched, Some(4), None);
    update(&api, 0, "localhost/skiff/busybox:1").await;
    rolled_out(&api, &watched, 0, "localhost/skiff/busybox:1").await;
    bounds(&watched, Some(51), None);
    update(&api, 50, "localhost/skiff/busybox:1").await;
    rolled_out(&api, &watched, 50, "localhost/skiff/busybox:1").await;

    // Kill -9 the leading controller manager mid-rollout: the standby finishes it.
    bounds(&watched, Some(51), Some(50));
    update(&api, 50, "localhost/skiff/busybox:3").await;
    eventually(Duration::from_secs(30), "the rollout under way", || async {
        let w = watched.lock().expect("lock");
        w.pods
            .values()
            .any(|p| p.spec.containers[0].image.ends_with(":3"))
            .then_some(())
    })
    .await;
    let leader = control
        .managers
        .iter()
        .position(|(c, _)| leads(c))
        .expect("a leader");
    control.managers[leader].0.kill();
    rolled_out(&api, &watched, 50, "localhost/skiff/busybox:3").await;
    let standby = &control.managers[1 - leader].0;
    assert!(leads(standby), "the standby took over");

    let w = watched.lock().expect("lock");
    w.assert_followed();
    assert!(
        w.violations.is_empty(),
        "bounds broken over {} events: {:?}",
        w.events,
        w.violations
    );
    assert!(w.events > 100, "the watcher saw the rollouts: {}", w.events);
}

/// A quota that admits 5 pods and a ReplicaSet of 100: 5 pods run, the ReplicaSet says
/// why the rest are missing, and the refused creates stay a handful per back-off period
/// (slow start stops at the first refused batch; the key backs off), not a storm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_costs_a_few_refused_creates_not_a_storm() {
    let cluster = Cluster::start(3).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let control = start_control(&cluster, 2, 1);
    api.create(&obj(
        Kind::ResourceQuota,
        json!({"metadata": {"name": "five", "namespace": "default"},
               "spec": {"hard": {"pods": "5"}}}),
    ))
    .await
    .expect("create quota");
    api.create(&obj(
        Kind::ReplicaSet,
        json!({"metadata": {"name": "many", "namespace": "default"},
               "spec": {"replicas": 100,
                        "selector": {"matchLabels": {"app": "many"}},
                        "template": {"metadata": {"labels": {"app": "many"}},
                                     "spec": {"containers": [{"name": "c", "image": "localhost/skiff/busybox:1"}]}}}}),
    ))
    .await
    .expect("create replica set");
    let rs = eventually(
        Duration::from_secs(60),
        "5 pods and ReplicaFailure",
        || async {
            let (pods, _) = api
                .list(Kind::Pod, &ListParams::default().namespace("default"))
                .await
                .ok()?;
            let rs = replica_sets(&api).await.into_iter().next()?;
            let failing = rs.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == WorkloadConditionType::ReplicaFailure)
            });
            (pods.len() == 5 && failing).then_some(rs)
        },
    )
    .await;
    let condition = &rs.status.as_ref().expect("status").conditions[0];
    assert_eq!(condition.reason, "FailedCreate");
    assert!(
        condition.message.contains("exceeded quota"),
        "{}",
        condition.message
    );
    // Over the next 10 s, count the creates the store refused.
    let refused = || async {
        let url = format!("http://{}/metrics", control.managers[0].1);
        let text = HttpClient::new()
            .get(&url, Duration::from_secs(5))
            .await
            .expect("scrape")
            .text();
        text.lines()
            .find(|l| {
                l.starts_with("skiff_controller_pod_writes_total")
                    && l.contains("verb=\"create\"")
                    && l.contains("outcome=\"error\"")
            })
            .and_then(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let before = refused().await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let during = refused().await - before;
    println!("refused creates in 10 s: {during}");
    assert!(
        during <= 20.0,
        "{during} refused creates in 10 s: a storm, not a back-off"
    );
    let (pods, _) = api
        .list(Kind::Pod, &ListParams::default().namespace("default"))
        .await
        .expect("list");
    assert_eq!(pods.len(), 5, "the quota holds");
    quota_reports(&api, "default", "five", &[("pods", "5")], &[("pods", "5")]).await;
}

/// Waits until the quota `namespace/name` reports `hard` and `used`.
async fn quota_reports(
    api: &ClusterClient,
    namespace: &str,
    name: &str,
    hard: &[(&str, &str)],
    used: &[(&str, &str)],
) {
    let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let want = (pairs(hard), pairs(used));
    let what = format!("quota {namespace}/{name} to report {want:?}");
    eventually(Duration::from_secs(30), &what, || async {
        let Ok(Some(Object::ResourceQuota(q))) =
            api.get(Kind::ResourceQuota, namespace, name).await
        else {
            return None;
        };
        let status = q.status.unwrap_or_default();
        let shown = |l: &skiff_proto::api::ResourceList| -> Vec<(String, String)> {
            l.iter().map(|(k, v)| (k.clone(), v.to_string())).collect()
        };
        ((shown(&status.hard), shown(&status.used)) == want).then_some(())
    })
    .await;
}

/// Waits until the quota `default/objects` of the test below reports `configmaps` and `jobs`
/// used (and no node port).
async fn objects_quota_reports(api: &ClusterClient, configmaps: &str, jobs: &str) {
    let hard = [
        ("configmaps", "2"),
        ("count/jobs.batch", "1"),
        ("services.nodeports", "1"),
    ];
    let used = [
        ("configmaps", configmaps),
        ("count/jobs.batch", jobs),
        ("services.nodeports", "0"),
    ];
    quota_reports(api, "default", "objects", &hard, &used).await;
}

/// Every namespace gets a `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap,
/// and gets them back when they are deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_namespace_has_a_default_service_account_and_the_root_ca() {
    let cluster = Cluster::start(1).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let ca_file = cluster.dir.path().join("root-ca.pem");
    std::fs::write(&ca_file, ca).expect("write");
    let _manager = spawn(
        &cluster,
        "cm",
        ControllerManagerCommand {
            endpoints: cluster.endpoints(),
            lease_ttl: Some(Duration::from_secs(2)),
            root_ca: Some(ca_file),
            log: Some("info".into()),
            ..ControllerManagerCommand::default()
        }
        .args(),
    );
    api.create(&obj(Kind::Namespace, json!({"metadata": {"name": "team"}})))
        .await
        .expect("namespace");
    let account = Kind::from_name("ServiceAccount").expect("declared");
    let uid_in = |ns: &'static str| {
        let api = api.clone();
        async move {
            match api.get(account, ns, "default").await {
                Ok(Some(o)) => Some(o.metadata().uid.clone()),
                _ => None,
            }
        }
    };
    // (This cluster serves no REST API, so it has no system namespaces: only `team`.)
    eventually(Duration::from_secs(30), "team's default", || uid_in("team")).await;
    let first = uid_in("team").await.expect("there");
    api.delete(account, "team", "default", 0, None)
        .await
        .expect("delete");
    eventually(Duration::from_secs(30), "a new default", || async {
        uid_in("team").await.filter(|uid| *uid != first)
    })
    .await;

    let config_map = Kind::from_name("ConfigMap").expect("declared");
    let published = |ns: &'static str| {
        let api = api.clone();
        async move {
            match api.get(config_map, ns, "kube-root-ca.crt").await {
                Ok(Some(Object::Generic(_, m))) => m.at("/data/ca.crt").cloned(),
                _ => None,
            }
        }
    };
    let found = eventually(Duration::from_secs(30), "team's root CA", || {
        published("team")
    })
    .await;
    assert_eq!(found, ca);
    // Changed by hand: made right again.
    let Ok(Some(Object::Generic(g, mut m))) = api.get(config_map, "team", "kube-root-ca.crt").await
    else {
        panic!("no ConfigMap")
    };
    m.body.insert("data".into(), json!({"ca.crt": "tampered"}));
    api.update(&Object::Generic(g, m)).await.expect("update");
    eventually(Duration::from_secs(30), "the CA again", || async {
        published("team").await.filter(|v| v == ca)
    })
    .await;
}

/// A quota on ConfigMaps, Jobs and Services: the API server refuses what would exceed it,
/// and the controller reports what is used, as objects come and go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_counts_any_kind_it_names_and_reports_its_use() {
    let cluster = Cluster::start(1).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let _control = start_control(&cluster, 0, 1);
    let config_map = Kind::from_name("ConfigMap").expect("declared");
    let job = Kind::from_name("Job").expect("declared");
    api.create(&obj(
        Kind::ResourceQuota,
        json!({"metadata": {"name": "objects", "namespace": "default"},
               "spec": {"hard": {"configmaps": "2", "count/jobs.batch": "1",
                                 "services.nodeports": "1"}}}),
    ))
    .await
    .expect("create quota");
    objects_quota_reports(&api, "0", "0").await;
    let map = |name: &str| {
        obj(
            config_map,
            json!({"metadata": {"name": name, "namespace": "default"}}),
        )
    };
    for name in ["a", "b"] {
        api.create(&map(name)).await.expect("under the quota");
    }
    let e = api.create(&map("c")).await.expect_err("over the quota");
    assert!(
        e.to_string()
            .contains("exceeded quota: objects, requested: configmaps=1, used: configmaps=2, limited: configmaps=2"),
        "{e}"
    );
    let batch = |name: &str| {
        obj(
            job,
            json!({"metadata": {"name": name, "namespace": "default"},
                   "spec": {"template": {"spec": {"restartPolicy": "Never",
                            "containers": [{"name": "c", "image": "localhost/skiff/busybox:1"}]}}}}),
        )
    };
    api.create(&batch("one")).await.expect("the first job");
    let e = api.create(&batch("two")).await.expect_err("a second job");
    assert!(e.to_string().contains("count/jobs.batch"), "{e}");
    let node_ports = json!({"metadata": {"name": "np", "namespace": "default"},
        "spec": {"type": "NodePort", "selector": {"app": "x"},
                 "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}});
    let e = api
        .create(&obj(Kind::Service, node_ports))
        .await
        .expect_err("two node ports");
    assert!(e.to_string().contains("services.nodeports=2"), "{e}");
    // Nor may an update take it there: a ClusterIP Service turned NodePort.
    let cluster_ip = json!({"metadata": {"name": "cip", "namespace": "default"},
        "spec": {"selector": {"app": "x"},
                 "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}});
    let Object::Service(mut svc) = api
        .create(&obj(Kind::Service, cluster_ip))
        .await
        .expect("no node ports")
    else {
        panic!("not a service")
    };
    svc.spec.type_ = "NodePort".into();
    let e = api
        .update(&Object::Service(svc))
        .await
        .expect_err("two node ports by update");
    assert!(
        e.to_string()
            .contains("exceeded quota: objects, requested: services.nodeports=2, used: services.nodeports=0, limited: services.nodeports=1"),
        "{e}"
    );
    objects_quota_reports(&api, "2", "1").await;
    api.delete(config_map, "default", "a", 0, None)
        .await
        .expect("delete");
    objects_quota_reports(&api, "1", "1").await;
    api.create(&map("c")).await.expect("room again");
}

/// A Deployment `name` of 2 pods labelled `app: name`.
fn workload(name: &str) -> Object {
    obj(
        Kind::Deployment,
        json!({"metadata": {"name": name, "namespace": "default"},
               "spec": {"replicas": 2,
                        "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}},
                                     "spec": {"containers": [{"name": "c", "image": "localhost/skiff/busybox:1"}]}}}}),
    )
}

/// Deletion revisions seen by a watch of `kind`, by object name.
fn deletions(api: ClusterClient, kind: Kind, from: i64) -> Arc<Mutex<BTreeMap<String, i64>>> {
    let seen = Arc::new(Mutex::new(BTreeMap::new()));
    let s = seen.clone();
    tokio::spawn(async move {
        let params = ListParams::default().namespace("default").watch_after(from);
        let mut stream = Box::pin(api.watch(kind, &params).await.expect("watch"));
        while let Some(e) = stream.next().await {
            let Ok(e) = e else {
                // The cluster going away at the end of the test ends the watch.
                return;
            };
            if let Event::Deleted(o) = e {
                let m = o.metadata();
                s.lock()
                    .expect("lock")
                    .insert(m.name.clone(), m.revision().unwrap_or(0));
            }
        }
    });
    seen
}

/// The garbage collector: a Deployment deleted in the background takes its ReplicaSet and
/// pods with it after it is gone; one deleted in the foreground goes only after all of
/// them; one deleted with `orphan` leaves them, no longer owned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_deployment_collects_waits_or_orphans_as_asked() {
    use skiff_proto::api::DeletionPropagation;

    let cluster = Cluster::start(3).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let _control = start_control(&cluster, 2, 1);
    for name in ["bg", "fg", "orphan"] {
        api.create(&workload(name))
            .await
            .expect("create deployment");
    }
    let running = |app: &'static str| {
        let api = api.clone();
        async move {
            let (pods, _) = api
                .list(
                    Kind::Pod,
                    &ListParams::default()
                        .namespace("default")
                        .labels(format!("app={app}")),
                )
                .await
                .expect("list pods");
            pods.into_iter()
                .filter(|o| matches!(o, Object::Pod(p) if ready(p) && active(p)))
                .count()
        }
    };
    for app in ["bg", "fg", "orphan"] {
        eventually(Duration::from_secs(60), "2 pods of each", || async {
            (running(app).await == 2).then_some(())
        })
        .await;
    }
    let (_, from) = api
        .list(Kind::Pod, &ListParams::default())
        .await
        .expect("list");
    let pod_deletions = deletions(api.clone(), Kind::Pod, from);
    let deployment_deletions = deletions(api.clone(), Kind::Deployment, from);
    let sets_of = |app: &'static str| {
        let api = api.clone();
        async move {
            replica_sets(&api)
                .await
                .into_iter()
                .filter(|rs| rs.metadata.labels.get("app").map(String::as_str) == Some(app))
                .collect::<Vec<_>>()
        }
    };

    // Background: the Deployment goes at once; its ReplicaSet and pods follow.
    api.delete_propagating(
        Kind::Deployment,
        "default",
        "bg",
        0,
        DeletionPropagation::Background,
    )
    .await
    .expect("delete bg");
    eventually(
        Duration::from_secs(60),
        "bg's set and pods collected",
        || async { (sets_of("bg").await.is_empty() && running("bg").await == 0).then_some(()) },
    )
    .await;

    // Foreground: the Deployment outlives every pod and its ReplicaSet.
    api.delete_propagating(
        Kind::Deployment,
        "default",
        "fg",
        0,
        DeletionPropagation::Foreground,
    )
    .await
    .expect("delete fg");
    let fg_gone = eventually(Duration::from_secs(60), "fg deleted", || async {
        deployment_deletions
            .lock()
            .expect("lock")
            .get("fg")
            .copied()
    })
    .await;
    assert!(sets_of("fg").await.is_empty(), "fg's set went first");
    let last_pod = pod_deletions
        .lock()
        .expect("lock")
        .iter()
        .filter(|(n, _)| n.starts_with("fg-"))
        .map(|(_, r)| *r)
        .max()
        .expect("fg's pods were deleted");
    assert!(
        last_pod < fg_gone,
        "the owner went (rev {fg_gone}) after its last pod (rev {last_pod})"
    );

    // Orphan: the ReplicaSet and pods stay, owned by nothing.
    api.delete_propagating(
        Kind::Deployment,
        "default",
        "orphan",
        0,
        DeletionPropagation::Orphan,
    )
    .await
    .expect("delete orphan");
    eventually(Duration::from_secs(60), "orphan deleted", || async {
        deployment_deletions
            .lock()
            .expect("lock")
            .contains_key("orphan")
            .then_some(())
    })
    .await;
    let sets = sets_of("orphan").await;
    assert_eq!(sets.len(), 1, "the set stays");
    assert!(
        sets[0].metadata.owner_references.is_empty(),
        "no longer owned: {:?}",
        sets[0].metadata.owner_references
    );
    assert_eq!(running("orphan").await, 2, "its pods keep running");
}

/// A kube-rs client of the first member's Kubernetes API.
fn kube_client(cluster: &Cluster) -> kube::Client {
    kube::Client::try_from(kube::Config::new(
        cluster.members[0].api_url.parse().expect("API URL"),
    ))
    .expect("kube client")
}

/// Creates the CRD of `widgets.example.com` (any fields kept) through `kube`; its API, and the
/// API of its widgets in `namespace`.
async fn widgets_crd(
    kube: &kube::Client,
    namespace: &str,
) -> (
    kube::Api<kube::core::DynamicObject>,
    kube::Api<kube::core::DynamicObject>,
) {
    use kube::api::{Api, PostParams};
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};

    let crds = Api::<DynamicObject>::all_with(
        kube.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let crd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                   "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .expect("CRD");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create CRD");
    let widgets = Api::namespaced_with(
        kube.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("example.com", "v1", "Widget"),
            "widgets",
        ),
    );
    (crds, widgets)
}

/// The garbage collector follows owner references to and from custom objects, as an
/// operator relies on: a custom object takes the ConfigMaps it owns with it (in the
/// background, in the foreground after them, or leaves them with `orphan`), a custom object
/// owned by a ConfigMap goes with it, and deleting the CRD takes what its objects owned.
/// The CRD is created after the controller manager started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_objects_own_and_are_owned() {
    use kube::api::{DeleteParams, PostParams};
    use kube::core::DynamicObject;

    let cluster = Cluster::start_with_api(1).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let _control = start_control(&cluster, 1, 1);
    let kube = kube_client(&cluster);
    let (crds, widgets) = widgets_crd(&kube, "default").await;
    let widget = |name: &str, owner: Option<&Object>| {
        let owners: Vec<serde_json::Value> = owner
            .map(|o| {
                let m = o.metadata();
                json!({"apiVersion": o.kind().api_version(), "kind": o.kind().name(),
                       "name": m.name, "uid": m.uid})
            })
            .into_iter()
            .collect();
        let w: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": name, "ownerReferences": owners}, "spec": {"size": 1}
        }))
        .expect("widget");
        w
    };
    let create_widget = |name: &'static str, owner: Option<Object>| {
        let widgets = widgets.clone();
        async move {
            let w = widget(name, owner.as_ref());
            eventually(Duration::from_secs(15), "the Widget kind served", || {
                let (widgets, w) = (widgets.clone(), w.clone());
                async move { widgets.create(&PostParams::default(), &w).await.ok() }
            })
            .await
        }
    };
    let config_map = Kind::from_name("ConfigMap").expect("declared");
    let owned_map = |name: &str, owner: &DynamicObject, finalizers: &[&str]| {
        obj(
            config_map,
            json!({"metadata": {"name": name, "namespace": "default", "finalizers": finalizers,
                                "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Widget",
                                                     "name": owner.metadata.name, "uid": owner.metadata.uid,
                                                     "blockOwnerDeletion": true}]}}),
        )
    };
    let exists = |kind: Kind, name: &'static str| {
        let api = api.clone();
        async move { api.get(kind, "default", name).await.expect("get").is_some() }
    };

    // Background: the widget goes, then the ConfigMap it owns.
    let bg = create_widget("bg", None).await;
    api.create(&owned_map("bg-data", &bg, &[]))
        .await
        .expect("configmap");
    widgets
        .delete("bg", &DeleteParams::background())
        .await
        .expect("delete bg");
    eventually(
        Duration::from_secs(30),
        "bg's ConfigMap collected",
        || async { (!exists(config_map, "bg-data").await).then_some(()) },
    )
    .await;

    // A custom dependent: a widget owned by a ConfigMap goes with it.
    let parent = api
        .create(&obj(
            config_map,
            json!({"metadata": {"name": "parent", "namespace": "default"}}),
        ))
        .await
        .expect("configmap");
    create_widget("child", Some(parent)).await;
    api.delete(config_map, "default", "parent", 0, None)
        .await
        .expect("delete parent");
    eventually(
        Duration::from_secs(30),
        "the child widget collected",
        || async {
            widgets
                .get_opt("child")
                .await
                .expect("get")
                .is_none()
                .then_some(())
        },
    )
    .await;

    // Foreground: the widget waits for its ConfigMap, which a finalizer holds.
    let fg = create_widget("fg", None).await;
    api.create(&owned_map("fg-data", &fg, &["example.com/hold"]))
        .await
        .expect("configmap");
    widgets
        .delete("fg", &DeleteParams::foreground())
        .await
        .expect("delete fg");
    let held = eventually(
        Duration::from_secs(30),
        "fg-data marked deleted",
        || async {
            let o = api.get(config_map, "default", "fg-data").await.ok()??;
            o.metadata().deletion_timestamp.is_some().then_some(o)
        },
    )
    .await;
    let waiting = widgets.get("fg").await.expect("fg waits for its dependent");
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert_eq!(
        waiting.metadata.finalizers.as_deref(),
        Some(&["foregroundDeletion".to_owned()][..])
    );
    let mut released = held;
    released.metadata_mut().finalizers.clear();
    api.update(&released).await.expect("release fg-data");
    eventually(Duration::from_secs(30), "fg gone after fg-data", || async {
        widgets
            .get_opt("fg")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    assert!(!exists(config_map, "fg-data").await);

    // Orphan: the widget goes, its ConfigMap stays, owned by nothing.
    let keep = create_widget("keep", None).await;
    api.create(&owned_map("kept", &keep, &[]))
        .await
        .expect("configmap");
    widgets
        .delete("keep", &DeleteParams::orphan())
        .await
        .expect("delete keep");
    let kept = eventually(
        Duration::from_secs(30),
        "keep gone, kept released",
        || async {
            if widgets.get_opt("keep").await.expect("get").is_some() {
                return None;
            }
            let o = api.get(config_map, "default", "kept").await.ok()??;
            o.metadata().owner_references.is_empty().then_some(o)
        },
    )
    .await;
    assert_eq!(kept.metadata().name, "kept");

    // The CRD deleted: its objects go, and what they owned follows.
    let last = create_widget("last", None).await;
    api.create(&owned_map("last-data", &last, &[]))
        .await
        .expect("configmap");
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .expect("delete CRD");
    eventually(
        Duration::from_secs(30),
        "last's ConfigMap collected",
        || async { (!exists(config_map, "last-data").await).then_some(()) },
    )
    .await;
    assert!(exists(config_map, "kept").await, "an orphan stays");
}

/// A node whose agent dies: after the grace period it is `Ready=Unknown` and tainted
/// `unreachable:NoExecute`; its pods are evicted when their 10 s toleration runs out, and
/// their ReplicaSet replaces them on the other nodes. No more pods than `replicas` are ever
/// active at once (checked on every pod event). When the agent comes back, so does the node,
/// untainted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_of_a_silent_node_are_evicted_and_replaced_elsewhere() {
    use skiff_proto::api::node::TAINT_UNREACHABLE;
    use skiff_proto::api::{NodeConditionType, TaintEffect};

    let cluster = Cluster::start(3).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let _control = start_control(&cluster, 2, 1);
    let mut far = agents(&cluster, "far-", 1);
    eventually(Duration::from_secs(30), "3 nodes Ready", || async {
        let (nodes, _) = api.list(Kind::Node, &ListParams::default()).await.ok()?;
        let ready = nodes
            .iter()
            .filter(|o| matches!(o, Object::Node(n) if n.is_ready()))
            .count();
        (ready == 3).then_some(())
    })
    .await;
    let watched = watch_pods(api.clone());
    bounds(&watched, Some(6), None);
    let mut d = web(6, "localhost/skiff/busybox:1");
    if let Object::Deployment(d) = &mut d {
        let tolerations = json!([
            {"key": TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10},
        ]);
        d.spec.template.spec.tolerations =
            serde_json::from_value(tolerations).expect("tolerations");
    }
    api.create(&d).await.expect("create deployment");
    rolled_out(&api, &watched, 6, "localhost/skiff/busybox:1").await;
    let on_far = |w: &Watched| {
        w.pods
            .values()
            .filter(|p| active(p) && p.spec.node_name == "far-0")
            .count()
    };
    let (stranded, placed) = {
        let w = watched.lock().expect("lock");
        let placed: Vec<String> = w.pods.values().map(|p| p.spec.node_name.clone()).collect();
        (on_far(&w), placed)
    };
    assert!(
        stranded > 0,
        "the scheduler spread the pods onto far-0 too: {placed:?}"
    );

    let killed = std::time::Instant::now();
    far.kill();
    eventually(
        NODE_GRACE + Duration::from_secs(30),
        "far-0 Unknown and tainted",
        || async {
            let Ok(Some(Object::Node(n))) = api.get(Kind::Node, "", "far-0").await else {
                return None;
            };
            let unknown = n
                .condition(&NodeConditionType::Ready)
                .is_some_and(|c| c.status == ConditionStatus::Unknown);
            let tainted = n
                .spec
                .taints
                .iter()
                .any(|t| t.key == TAINT_UNREACHABLE && t.effect == TaintEffect::NoExecute);
            (unknown && tainted).then_some(())
        },
    )
    .await;
    let tainted_after = killed.elapsed();
    eventually(
        Duration::from_secs(60),
        "6 pods running on the other nodes",
        || async {
            let w = watched.lock().expect("lock");
            let elsewhere = w
                .pods
                .values()
                .filter(|p| active(p) && ready(p) && p.spec.node_name != "far-0")
                .count();
            (elsewhere == 6 && on_far(&w) == 0).then_some(())
        },
    )
    .await;
    println!(
        "far-0 killed: tainted after {:.1} s, its {stranded} pod(s) running elsewhere after {:.1} s (grace {} s, toleration 10 s)",
        tainted_after.as_secs_f64(),
        killed.elapsed().as_secs_f64(),
        NODE_GRACE.as_secs()
    );
    {
        let w = watched.lock().expect("lock");
        w.assert_followed();
        assert!(
            w.violations.is_empty(),
            "more than 6 active pods at once: {:?}",
            w.violations
        );
    }

    // Its agent comes back: the node is Ready and untainted again.
    let _back = agents(&cluster, "far-", 1);
    eventually(
        Duration::from_secs(30),
        "far-0 Ready and untainted",
        || async {
            let Ok(Some(Object::Node(n))) = api.get(Kind::Node, "", "far-0").await else {
                return None;
            };
            let tainted = n.spec.taints.iter().any(|t| t.key == TAINT_UNREACHABLE);
            (n.is_ready() && !tainted).then_some(())
        },
    )
    .await;
}

/// The ready endpoints of Service `name`'s slices: (address, port) pairs, and how many slices.
async fn endpoints_of(api: &ClusterClient, name: &str) -> (Vec<(String, i32)>, usize) {
    let (slices, _) = api
        .list(
            Kind::EndpointSlice,
            &ListParams::default()
                .namespace("default")
                .labels(format!("kubernetes.io/service-name={name}")),
        )
        .await
        .expect("list slices");
    let mut out = Vec::new();
    for s in &slices {
        let Object::EndpointSlice(s) = s else {
            continue;
        };
        // When the change it reflects was seen, for the proxies' programming latency.
        let trigger = s
            .metadata
            .annotations
            .get(skiff_proto::api::service::TRIGGER_TIME_ANNOTATION);
        assert!(
            trigger
                .and_then(|t| skiff_proto::api::service::trigger_age(t))
                .is_some(),
            "a trigger time: {trigger:?}"
        );
        let port = s.ports.first().and_then(|p| p.port).unwrap_or_default();
        for e in &s.endpoints {
            if e.conditions.ready == Some(true) {
                out.extend(e.addresses.iter().map(|a| (a.clone(), port)));
            }
        }
    }
    out.sort();
    (out, slices.len())
}

/// A Service's EndpointSlices follow the ready pods it selects, through a scale-up and a
/// pod's deletion, with its named target port resolved; they go with the Service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_track_their_ready_pods_in_endpoint_slices() {
    let cluster = Cluster::start(3).await;
    let _control = start_control(&cluster, 3, 1);
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let deployment = |replicas: i32| {
        obj(
            Kind::Deployment,
            json!({"metadata": {"name": "web", "namespace": "default"},
                   "spec": {"replicas": replicas,
                            "selector": {"matchLabels": {"app": "web"}},
                            "template": {"metadata": {"labels": {"app": "web"}},
                                         "spec": {"containers": [{"name": "web", "image": "busybox",
                                                  "ports": [{"name": "http", "containerPort": 8080}]}]}}}}),
        )
    };
    api.create(&deployment(3)).await.expect("deployment");
    let service = obj(
        Kind::Service,
        json!({"metadata": {"name": "web", "namespace": "default"},
               "spec": {"selector": {"app": "web"},
                        "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}),
    );
    let created = api.create(&service).await.expect("service");
    let Object::Service(created) = created else {
        panic!("not a service")
    };
    assert!(created.spec.cluster_ip.starts_with("10."), "{created:?}");
    api.create(&obj(
        Kind::Service,
        json!({"metadata": {"name": "db", "namespace": "default"},
               "spec": {"selector": {"app": "db"}, "ports": [{"port": 5432}]}}),
    ))
    .await
    .expect("service");

    let three = eventually(Duration::from_secs(60), "3 ready endpoints", || async {
        let (endpoints, _) = endpoints_of(&api, "web").await;
        (endpoints.len() == 3).then_some(endpoints)
    })
    .await;
    for (address, port) in &three {
        assert!(address.starts_with("10.244."), "{address}");
        assert_eq!(*port, 8080, "the named target port, resolved");
    }
    let (none, slices) = endpoints_of(&api, "db").await;
    assert!(
        none.is_empty() && slices == 1,
        "{none:?} in {slices} slice(s)"
    );

    // Scaled up: five (again on a conflict: the controller writes the Deployment's status).
    eventually(Duration::from_secs(30), "the deployment scaled", || async {
        let Ok(Some(Object::Deployment(mut d))) = api.get(Kind::Deployment, "default", "web").await
        else {
            return None;
        };
        d.spec.replicas = Some(5);
        api.update(&Object::Deployment(d)).await.ok()
    })
    .await;
    eventually(Duration::from_secs(60), "5 ready endpoints", || async {
        (endpoints_of(&api, "web").await.0.len() == 5).then_some(())
    })
    .await;
    // The Endpoints of the Service say the same, for the clients that read those.
    eventually(
        Duration::from_secs(30),
        "5 addresses in Endpoints",
        || async {
            let ready = core_endpoints(&api, "web").await?;
            (ready.len() == 5
                && ready
                    .iter()
                    .all(|(a, p)| a.starts_with("10.244.") && *p == 8080))
            .then_some(())
        },
    )
    .await;

    // A Service without a selector: its Endpoints, written by hand, are mirrored into slices.
    api.create(&obj(
        Kind::Service,
        json!({"metadata": {"name": "ext", "namespace": "default"},
               "spec": {"ports": [{"name": "pg", "port": 5432}]}}),
    ))
    .await
    .expect("service");
    let endpoints = Kind::from_name("Endpoints").expect("declared");
    api.create(&obj(
        endpoints,
        json!({"metadata": {"name": "ext", "namespace": "default"},
               "subsets": [{"addresses": [{"ip": "192.0.2.10"}, {"ip": "192.0.2.11"}],
                            "ports": [{"name": "pg", "port": 5432}]}]}),
    ))
    .await
    .expect("endpoints");
    eventually(Duration::from_secs(30), "the mirrored slice", || async {
        let (ready, _) = endpoints_of(&api, "ext").await;
        (ready
            == [
                ("192.0.2.10".to_owned(), 5432),
                ("192.0.2.11".to_owned(), 5432),
            ])
        .then_some(())
    })
    .await;

    // A deleted pod's address leaves; its replacement's joins.
    let (pods, _) = api
        .list(
            Kind::Pod,
            &ListParams::default().namespace("default").labels("app=web"),
        )
        .await
        .expect("pods");
    let Some(Object::Pod(victim)) = pods.first() else {
        panic!("no pod")
    };
    let gone = victim.metadata.name.clone();
    api.delete(Kind::Pod, "default", &gone, 0, Some(0))
        .await
        .expect("delete a pod");
    eventually(
        Duration::from_secs(60),
        "the replacement's endpoint",
        || async {
            let (slices, _) = api
                .list(
                    Kind::EndpointSlice,
                    &ListParams::default()
                        .namespace("default")
                        .labels("kubernetes.io/service-name=web"),
                )
                .await
                .ok()?;
            let pods: Vec<String> = slices
                .iter()
                .filter_map(|s| match s {
                    Object::EndpointSlice(s) => Some(s),
                    _ => None,
                })
                .flat_map(|s| &s.endpoints)
                .filter(|e| e.conditions.ready == Some(true))
                .filter_map(|e| e.target_ref.as_ref().map(|r| r.name.clone()))
                .collect();
            (pods.len() == 5 && !pods.contains(&gone)).then_some(())
        },
    )
    .await;

    // The Service's slices go with it.
    api.delete(Kind::Service, "default", "web", 0, None)
        .await
        .expect("delete the service");
    eventually(Duration::from_secs(30), "the slices collected", || async {
        (endpoints_of(&api, "web").await.1 == 0).then_some(())
    })
    .await;
    eventually(Duration::from_secs(30), "the Endpoints removed", || async {
        core_endpoints(&api, "web").await.is_none().then_some(())
    })
    .await;
}

/// The ready addresses and ports in the Endpoints object `name`, if there is one.
async fn core_endpoints(api: &ClusterClient, name: &str) -> Option<Vec<(String, i64)>> {
    let kind = Kind::from_name("Endpoints").expect("declared");
    let Ok(Some(Object::Generic(_, e))) = api.get(kind, "default", name).await else {
        return None;
    };
    let mut out = Vec::new();
    for subset in e
        .at("/subsets")
        .and_then(|s| s.as_array())
        .into_iter()
        .flatten()
    {
        let port = subset["ports"][0]["port"].as_i64().unwrap_or_default();
        for a in subset["addresses"].as_array().into_iter().flatten() {
            out.push((a["ip"].as_str().unwrap_or_default().to_owned(), port));
        }
    }
    Some(out)
}

/// `kubectl delete namespace`: the namespace goes `Terminating` at once and takes nothing new;
/// the namespace controller deletes everything in it (a Deployment and its running pods,
/// stopped by their agent; a ConfigMap; a Service; a custom resource), waits for a finalizer
/// it does not own and says which in the namespace's conditions, and the namespace goes once
/// that finalizer is removed. The system namespaces may not be deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_namespace_deletes_what_it_holds_then_the_namespace() {
    use kube::api::{Patch, PatchParams, PostParams};
    use kube::core::DynamicObject;

    let cluster = Cluster::start_with_api(1).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let _control = start_control(&cluster, 1, 1);
    let kube = kube_client(&cluster);

    let Object::Namespace(team) = api
        .create(&obj(Kind::Namespace, json!({"metadata": {"name": "team"}})))
        .await
        .expect("namespace")
    else {
        panic!("not a namespace")
    };
    assert_eq!(team.finalizers(), ["kubernetes"]);
    assert_eq!(team.phase(), Some(NamespacePhase::Active));

    let Object::Deployment(mut web) = workload("web") else {
        panic!("not a deployment")
    };
    web.metadata.namespace = "team".into();
    api.create(&Object::Deployment(web))
        .await
        .expect("deployment");
    let config_map = Kind::from_name("ConfigMap").expect("declared");
    let settings = |ns: &str| {
        obj(
            config_map,
            json!({"metadata": {"name": "settings", "namespace": ns}}),
        )
    };
    api.create(&settings("team")).await.expect("configmap");
    api.create(&obj(
        Kind::Service,
        json!({"metadata": {"name": "web", "namespace": "team"},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    ))
    .await
    .expect("service");
    let (_, widgets) = widgets_crd(&kube, "team").await;
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "finalizers": ["example.com/keep"]}, "spec": {"size": 1}
    }))
    .expect("widget");
    eventually(Duration::from_secs(15), "the Widget kind served", || {
        let (widgets, widget) = (widgets.clone(), widget.clone());
        async move { widgets.create(&PostParams::default(), &widget).await.ok() }
    })
    .await;
    let team_pods = ListParams::default().namespace("team");
    eventually(Duration::from_secs(60), "web's pods running", || async {
        let (pods, _) = api.list(Kind::Pod, &team_pods).await.ok()?;
        let running = pods.iter().filter(|p| match p {
            Object::Pod(p) => active(p) && ready(p),
            _ => false,
        });
        (running.count() == 2).then_some(())
    })
    .await;

    let Object::Namespace(marked) = api
        .delete(Kind::Namespace, "", "team", 0, None)
        .await
        .expect("delete namespace")
    else {
        panic!("not a namespace")
    };
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.phase(), Some(NamespacePhase::Terminating));
    let e = api
        .create(&settings("team"))
        .await
        .expect_err("a create in a terminating namespace");
    assert!(
        e.to_string().contains(
            "unable to create new content in namespace team because it is being terminated"
        ),
        "{e}"
    );
    let e = api
        .delete(Kind::Namespace, "", "team", 0, None)
        .await
        .expect_err("a second delete");
    assert!(
        e.to_string()
            .contains("The system is ensuring all content is removed from this namespace"),
        "{e}"
    );

    // Everything goes but the widget, which the namespace's conditions name.
    let held = eventually(Duration::from_secs(60), "only the widget left", || async {
        let Ok(Some(Object::Namespace(ns))) = api.get(Kind::Namespace, "", "team").await else {
            return None;
        };
        let conditions = ns.status?.conditions;
        let remaining = conditions
            .iter()
            .find(|c| c.type_ == NamespaceConditionType::NamespaceContentRemaining)?;
        (remaining.message
            == "Some resources are remaining: widgets.example.com has 1 resource instances")
            .then_some(conditions)
    })
    .await;
    let finalizers = held
        .iter()
        .find(|c| c.type_ == NamespaceConditionType::NamespaceFinalizersRemaining)
        .expect("finalizers condition");
    assert_eq!(finalizers.status, ConditionStatus::True);
    assert_eq!(
        finalizers.message,
        "Some content in the namespace has finalizers remaining: example.com/keep in 1 resource instances"
    );
    for kind in [
        Kind::Pod,
        Kind::Deployment,
        Kind::ReplicaSet,
        Kind::Service,
        config_map,
    ] {
        let (left, _) = api.list(kind, &team_pods).await.expect("list");
        assert!(left.is_empty(), "{} left: {left:?}", kind.plural());
    }
    assert!(
        api.get(Kind::Namespace, "", "team")
            .await
            .expect("get")
            .is_some(),
        "the namespace waits for the widget's finalizer"
    );

    widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("release the widget");
    eventually(Duration::from_secs(30), "the namespace gone", || async {
        matches!(api.get(Kind::Namespace, "", "team").await, Ok(None)).then_some(())
    })
    .await;

    let e = api
        .delete(Kind::Namespace, "", "default", 0, None)
        .await
        .expect_err("default may not go");
    assert!(
        e.to_string().contains("this namespace may not be deleted"),
        "{e}"
    );
}

/// The status of Job `name` in `default`, as stored.
async fn job_status(api: &ClusterClient, name: &str) -> Option<serde_json::Value> {
    let job = Kind::from_name("Job").expect("declared");
    match api.get(job, "default", name).await {
        Ok(Some(Object::Generic(_, g))) => g.at("/status").cloned(),
        _ => None,
    }
}

fn job_condition(status: &serde_json::Value, type_: &str) -> Option<serde_json::Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_ && c["status"] == "True")
        .cloned()
}

/// Calls `check` after every event of the pods of `default` that `labels` selects, with
/// them all as they then are (by name), from the first event on, until the watch ends with
/// the cluster.
fn on_every_pod_event(
    api: ClusterClient,
    labels: &str,
    mut check: impl FnMut(&BTreeMap<String, Pod>) + Send + 'static,
) {
    let params = ListParams::default().namespace("default").labels(labels);
    tokio::spawn(async move {
        let mut pods = BTreeMap::new();
        let mut stream = Box::pin(
            api.watch(Kind::Pod, &params.watch_after(0))
                .await
                .expect("watch"),
        );
        while let Some(Ok(e)) = stream.next().await {
            match e {
                Event::Added(Object::Pod(p)) | Event::Modified(Object::Pod(p)) => {
                    pods.insert(p.metadata.name.clone(), p);
                }
                Event::Deleted(Object::Pod(p)) => {
                    pods.remove(&p.metadata.name);
                }
                _ => {}
            }
            check(&pods);
        }
    });
}

/// Jobs on simulated nodes: an Indexed Job runs each index to success with never more than
/// `parallelism` pods running (checked on every pod event) and completes with its indexes
/// listed; a pod failure policy's `FailJob` fails a Job at the first matching exit; a
/// suspended Job runs nothing until resumed; `ttlSecondsAfterFinished` deletes a finished
/// Job. No pod keeps the tracking finalizer once counted. A Job deleted without a policy
/// leaves its pods; in the background, it takes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_to_completion_fail_by_policy_suspend_and_expire() {
    use skiff_proto::api::DeletionPropagation;

    let cluster = Cluster::start(1).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let _control = start_control(&cluster, 2, 1);
    let job = Kind::from_name("Job").expect("declared");
    let make = |name: &str, spec: serde_json::Value, script: &str| {
        let mut spec = spec;
        spec["template"] = json!({"spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "image": "localhost/skiff/busybox:1", "command": ["sh", "-c", script]}]}});
        obj(
            job,
            json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
        )
    };

    // Every pod event: the Indexed Job's running pods never exceed its parallelism.
    let most = Arc::new(Mutex::new(0usize));
    let seen = most.clone();
    on_every_pod_event(
        api.clone(),
        "batch.kubernetes.io/job-name=indexed",
        move |pods| {
            let running = pods.values().filter(|p| active(p)).count();
            let mut m = seen.lock().expect("lock");
            *m = (*m).max(running);
        },
    );

    api.create(&make(
        "indexed",
        json!({"completions": 4, "parallelism": 2, "completionMode": "Indexed"}),
        "sleep 1",
    ))
    .await
    .expect("indexed job");
    api.create(&make(
        "fatal",
        json!({"completions": 1, "backoffLimit": 6, "podFailurePolicy": {"rules": [
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}]}}),
        "exit 3",
    ))
    .await
    .expect("fatal job");
    api.create(&make("later", json!({"suspend": true}), "true"))
        .await
        .expect("suspended job");
    api.create(&make(
        "brief",
        json!({"ttlSecondsAfterFinished": 0}),
        "true",
    ))
    .await
    .expect("brief job");

    let status = eventually(Duration::from_secs(60), "indexed complete", || async {
        let s = job_status(&api, "indexed").await?;
        job_condition(&s, "Complete").map(|_| s)
    })
    .await;
    assert_eq!(status["succeeded"], 4, "{status}");
    assert_eq!(status["completedIndexes"], "0-3", "{status}");
    assert_eq!(status["active"], 0, "{status}");
    assert!(
        job_condition(&status, "SuccessCriteriaMet").is_some(),
        "{status}"
    );
    assert!(status["completionTime"].is_string(), "{status}");
    let most = *most.lock().expect("lock");
    assert!(
        most <= 2 && most > 0,
        "{most} pods ran at once, parallelism 2"
    );
    let (pods, _) = api
        .list(
            Kind::Pod,
            &ListParams::default().labels("batch.kubernetes.io/job-name=indexed"),
        )
        .await
        .expect("pods");
    let mut indexes: Vec<String> = pods
        .iter()
        .map(|p| {
            let m = p.metadata();
            assert!(m.finalizers.is_empty(), "{} still tracked", m.name);
            m.annotations["batch.kubernetes.io/job-completion-index"].clone()
        })
        .collect();
    indexes.sort();
    assert_eq!(indexes, ["0", "1", "2", "3"]);

    let status = eventually(Duration::from_secs(60), "fatal failed", || async {
        let s = job_status(&api, "fatal").await?;
        job_condition(&s, "Failed").map(|_| s)
    })
    .await;
    let failed = job_condition(&status, "Failed").expect("failed");
    assert_eq!(failed["reason"], "PodFailurePolicy", "{status}");
    assert!(
        failed["message"]
            .as_str()
            .is_some_and(|m| m.contains("failed with exit code 3 matching FailJob rule at index 0")),
        "{status}"
    );
    assert_eq!(status["failed"], 1, "{status}");

    let status = eventually(Duration::from_secs(30), "later suspended", || async {
        let s = job_status(&api, "later").await?;
        job_condition(&s, "Suspended").map(|_| s)
    })
    .await;
    assert_eq!(status["active"], 0, "{status}");
    let Ok(Some(Object::Generic(g, mut later))) = api.get(job, "default", "later").await else {
        panic!("no job")
    };
    later.body["spec"]["suspend"] = json!(false);
    api.update(&Object::Generic(g, later))
        .await
        .expect("resume");
    eventually(Duration::from_secs(60), "later complete", || async {
        let s = job_status(&api, "later").await?;
        job_condition(&s, "Complete").map(|_| ())
    })
    .await;

    eventually(
        Duration::from_secs(60),
        "brief deleted after its TTL",
        || async { matches!(api.get(job, "default", "brief").await, Ok(None)).then_some(()) },
    )
    .await;

    // A Job deleted without a propagation policy leaves its pods, owned by nothing (batch/v1's
    // default, as in Kubernetes); one deleted in the background takes them.
    let pods_of = |name: &'static str| {
        let api = api.clone();
        async move {
            let params = ListParams::default()
                .namespace("default")
                .labels(format!("batch.kubernetes.io/job-name={name}"));
            api.list(Kind::Pod, &params).await.expect("pods").0
        }
    };
    assert_eq!(pods_of("indexed").await.len(), 4);
    api.delete(job, "default", "indexed", 0, None)
        .await
        .expect("delete indexed");
    eventually(
        Duration::from_secs(30),
        "indexed gone, its pods released",
        || async {
            if api.get(job, "default", "indexed").await.ok()?.is_some() {
                return None;
            }
            let pods = pods_of("indexed").await;
            (pods.len() == 4
                && pods
                    .iter()
                    .all(|p| p.metadata().owner_references.is_empty()))
            .then_some(())
        },
    )
    .await;
    api.delete_propagating(job, "default", "fatal", 0, DeletionPropagation::Background)
        .await
        .expect("delete fatal");
    eventually(
        Duration::from_secs(30),
        "fatal's pods collected",
        || async { pods_of("fatal").await.is_empty().then_some(()) },
    )
    .await;
}

/// A CronJob on simulated nodes: its schedule fires, a Job named for the scheduled minute
/// runs to completion, and the CronJob's status records when it was scheduled and when a
/// Job last succeeded; suspended, it schedules no later time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_job_fires_and_records_its_runs() {
    let cluster = Cluster::start(1).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let _control = start_control(&cluster, 1, 1);
    let cron_job = Kind::from_name("CronJob").expect("declared");
    let job = Kind::from_name("Job").expect("declared");
    api.create(&obj(
        cron_job,
        json!({"metadata": {"name": "tick", "namespace": "default"},
               "spec": {"schedule": "@every 2s", "concurrencyPolicy": "Forbid",
                        "jobTemplate": {"metadata": {"labels": {"app": "tick"}},
                                        "spec": {"template": {"spec": {"restartPolicy": "Never",
                                            "containers": [{"name": "c", "image": "localhost/skiff/busybox:1",
                                                            "command": ["true"]}]}}}}}}),
    ))
    .await
    .expect("cron job");
    let status = |api: ClusterClient| async move {
        match api.get(cron_job, "default", "tick").await {
            Ok(Some(Object::Generic(_, g))) => g.at("/status").cloned(),
            _ => None,
        }
    };
    let done = eventually(Duration::from_secs(60), "a run succeeded", || async {
        let s = status(api.clone()).await?;
        (s["lastSuccessfulTime"].is_string() && s["lastScheduleTime"].is_string()).then_some(s)
    })
    .await;
    assert!(done["lastScheduleTime"].is_string(), "{done}");
    let (jobs, _) = api
        .list(job, &ListParams::default().labels("app=tick"))
        .await
        .expect("jobs");
    let first = jobs.first().expect("a job").metadata().clone();
    assert!(first.name.starts_with("tick-"), "{}", first.name);
    assert!(
        first
            .annotations
            .contains_key("batch.kubernetes.io/cronjob-scheduled-timestamp")
    );
    assert_eq!(first.owner_references[0].kind, "CronJob");

    // Suspended: nothing new starts. A sync under way when the suspend lands (its cache a
    // few milliseconds behind the write) may still start the time it was deciding on, never
    // a later one.
    let Ok(Some(Object::Generic(g, mut cj))) = api.get(cron_job, "default", "tick").await else {
        panic!("no cron job")
    };
    cj.body["spec"]["suspend"] = json!(true);
    api.update(&Object::Generic(g, cj)).await.expect("suspend");
    let suspended_at = chrono::Utc::now() + chrono::Duration::seconds(1);
    // The window in which a Job would have started: the schedule fires every 2 s.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (jobs, _) = api
        .list(job, &ListParams::default().labels("app=tick"))
        .await
        .expect("jobs");
    for j in &jobs {
        let m = j.metadata();
        let at = chrono::DateTime::parse_from_rfc3339(
            &m.annotations["batch.kubernetes.io/cronjob-scheduled-timestamp"],
        )
        .expect("a scheduled time");
        assert!(
            at <= suspended_at,
            "{} was scheduled for {at}, after the suspend at {suspended_at}",
            m.name
        );
    }
}

/// The status of DaemonSet `name` in `default`, as stored.
async fn daemon_set_status(api: &ClusterClient, name: &str) -> Option<serde_json::Value> {
    let ds = Kind::from_name("DaemonSet").expect("declared");
    match api.get(ds, "default", name).await {
        Ok(Some(Object::Generic(_, g))) => g.at("/status").cloned(),
        _ => None,
    }
}

/// Sets (or, with `None`, removes) label `role` of node `name`.
async fn label_node(api: &ClusterClient, name: &str, role: Option<&str>) {
    loop {
        let Some(Object::Node(mut node)) = api.get(Kind::Node, "", name).await.expect("get node")
        else {
            panic!("no node {name}")
        };
        match role {
            Some(r) => node.metadata.labels.insert("role".into(), r.into()),
            None => node.metadata.labels.remove("role"),
        };
        match api.update(&Object::Node(node)).await {
            Ok(_) => return,
            // The agent's heartbeat wrote in between: read again.
            Err(e) if e.code() == Some(skiff_proto::client::Code::Aborted) => {}
            Err(e) => panic!("label {name}: {e}"),
        }
    }
}

/// DaemonSets on simulated nodes: a daemon pod on each node whose labels the DaemonSet
/// selects, placed by the scheduler; a node labelled later gets one, a node unlabelled loses
/// its; a new template rolls across the nodes. Checked on every pod event: a node never runs
/// two of the DaemonSet's pods at once (`maxSurge` 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_set_follows_its_nodes_and_rolls_one_at_a_time() {
    let cluster = Cluster::start(1).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let _control = start_control(&cluster, 3, 1);
    let daemon_set = Kind::from_name("DaemonSet").expect("declared");
    let nodes = eventually(Duration::from_secs(30), "three nodes", || async {
        let (nodes, _) = api.list(Kind::Node, &ListParams::default()).await.ok()?;
        let names: Vec<String> = nodes.iter().map(|n| n.metadata().name.clone()).collect();
        (names.len() == 3).then_some(names)
    })
    .await;

    // Every pod event: no node runs two active pods of the DaemonSet.
    let doubled = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = doubled.clone();
    on_every_pod_event(api.clone(), "app=agent", move |pods| {
        let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
        for p in pods
            .values()
            .filter(|p| active(p) && !p.spec.node_name.is_empty())
        {
            *per_node.entry(p.spec.node_name.as_str()).or_default() += 1;
        }
        for (node, n) in per_node {
            if n > 1 {
                seen.lock().expect("lock").push(node.to_owned());
            }
        }
    });

    for n in &nodes[..2] {
        label_node(&api, n, Some("worker")).await;
    }
    let make = |image: &str| {
        obj(
            daemon_set,
            json!({"metadata": {"name": "agent", "namespace": "default"},
                   "spec": {"selector": {"matchLabels": {"app": "agent"}},
                            "template": {"metadata": {"labels": {"app": "agent"}},
                                         "spec": {"nodeSelector": {"role": "worker"},
                                                  "containers": [{"name": "c", "image": image}]}}}}),
        )
    };
    api.create(&make("localhost/skiff/busybox:1"))
        .await
        .expect("daemon set");
    let ready_on = |want: i64| {
        let api = api.clone();
        async move {
            let s = daemon_set_status(&api, "agent").await?;
            (s["desiredNumberScheduled"] == want
                && s["numberReady"] == want
                && s["updatedNumberScheduled"] == want
                && s["numberAvailable"] == want)
                .then_some(s)
        }
    };
    eventually(Duration::from_secs(60), "two daemons ready", || ready_on(2)).await;
    let placed = |api: ClusterClient| async move {
        let (pods, _) = api
            .list(Kind::Pod, &ListParams::default().labels("app=agent"))
            .await
            .expect("pods");
        let mut on: Vec<String> = pods
            .iter()
            .filter_map(|p| match p {
                Object::Pod(p) if active(p) => Some(p.spec.node_name.clone()),
                _ => None,
            })
            .collect();
        on.sort();
        on
    };
    assert_eq!(placed(api.clone()).await, nodes[..2].to_vec());

    label_node(&api, &nodes[2], Some("worker")).await;
    eventually(
        Duration::from_secs(60),
        "a daemon on the third node",
        || ready_on(3),
    )
    .await;

    // A new template rolls across all three, one node at a time.
    let Ok(Some(Object::Generic(g, mut ds))) = api.get(daemon_set, "default", "agent").await else {
        panic!("no daemon set")
    };
    ds.body["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("localhost/skiff/busybox:2");
    api.update(&Object::Generic(g, ds))
        .await
        .expect("new template");
    eventually(
        Duration::from_secs(90),
        "the new template everywhere",
        || async {
            let s = ready_on(3).await?;
            let (pods, _) = api
                .list(Kind::Pod, &ListParams::default().labels("app=agent"))
                .await
                .ok()?;
            let new = pods.iter().all(|p| match p {
                Object::Pod(p) => p.spec.containers[0].image == "localhost/skiff/busybox:2",
                _ => false,
            });
            (new && pods.len() == 3).then_some(s)
        },
    )
    .await;

    label_node(&api, &nodes[0], None).await;
    eventually(
        Duration::from_secs(60),
        "the unlabelled node's daemon gone",
        || async {
            let on = placed(api.clone()).await;
            (on == nodes[1..].to_vec()).then_some(())
        },
    )
    .await;
    let doubled = doubled.lock().expect("lock").clone();
    assert!(doubled.is_empty(), "two daemons at once on {doubled:?}");
}

/// Edits the stored declared object `kind` `name` with `edit` until the write lands.
async fn edit_generic(
    api: &ClusterClient,
    kind: Kind,
    name: &str,
    edit: impl Fn(&mut serde_json::Map<String, serde_json::Value>),
) {
    loop {
        let Some(Object::Generic(g, mut o)) = api.get(kind, "default", name).await.expect("get")
        else {
            panic!("no {} {name}", kind.name())
        };
        edit(&mut o.body);
        match api.update(&Object::Generic(g, o)).await {
            Ok(_) => return,
            Err(e) if e.code() == Some(skiff_proto::client::Code::Aborted) => {}
            Err(e) => panic!("update {name}: {e}"),
        }
    }
}

/// StatefulSets on simulated nodes: pods `db-0`, `db-1`, `db-2` made in order, each only once
/// the ones before are running and ready (checked on every pod event), named in DNS through
/// their headless Service (hostname and subdomain, endpoints by hostname); scaled down from
/// the highest ordinal; a new template rolled from the top; a deleted pod made again under
/// its name. A set with claim templates makes a claim per pod, which the local provisioner
/// binds to a volume on the pod's node; the pod made again goes back to that node; a pod
/// scaled away takes its claim under `whenScaled: Delete`; the claims go with the set under
/// `whenDeleted: Delete`, and their volumes with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_set_keeps_its_order_and_names() {
    let cluster = Cluster::start(1).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let _control = start_control(&cluster, 2, 1);
    let sts = Kind::from_name("StatefulSet").expect("declared");

    // Every pod event: a pod appears only once every lower ordinal runs and is ready, and
    // one starts terminating only once every higher ordinal is gone.
    let violations = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = violations.clone();
    let mut known = std::collections::BTreeSet::new();
    let mut terminating = std::collections::BTreeSet::new();
    on_every_pod_event(api.clone(), "app=db", move |pods| {
        let ordinal = |n: &str| n.trim_start_matches("db-").parse::<usize>().unwrap_or(0);
        for (name, p) in pods {
            let i = ordinal(name);
            if known.insert(p.metadata.uid.clone()) {
                for (other, q) in pods {
                    if ordinal(other) < i && !(ready(q) && active(q)) {
                        seen.lock()
                            .expect("lock")
                            .push(format!("{name} made while {other} was not ready"));
                    }
                }
            }
            if p.metadata.deletion_timestamp.is_some() && terminating.insert(p.metadata.uid.clone())
            {
                for other in pods.keys() {
                    if ordinal(other) > i {
                        seen.lock()
                            .expect("lock")
                            .push(format!("{name} deleted while {other} was there"));
                    }
                }
            }
        }
    });

    api.create(&obj(
        Kind::Service,
        json!({"metadata": {"name": "db", "namespace": "default"},
               "spec": {"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"port": 5432}]}}),
    ))
    .await
    .expect("headless service");
    let template = |image: &str| {
        json!({"metadata": {"labels": {"app": "db"}},
               "spec": {"containers": [{"name": "db", "image": image}]}})
    };
    api.create(&obj(
        sts,
        json!({"metadata": {"name": "db", "namespace": "default"},
               "spec": {"replicas": 3, "serviceName": "db",
                        "selector": {"matchLabels": {"app": "db"}},
                        "template": template("localhost/skiff/busybox:1")}}),
    ))
    .await
    .expect("stateful set");
    let status = |api: ClusterClient| async move {
        match api.get(sts, "default", "db").await {
            Ok(Some(Object::Generic(_, g))) => g.at("/status").cloned(),
            _ => None,
        }
    };
    eventually(Duration::from_secs(60), "three ready pods", || async {
        let s = status(api.clone()).await?;
        (s["readyReplicas"] == 3 && s["replicas"] == 3).then_some(())
    })
    .await;
    let Some(Object::Pod(p1)) = api.get(Kind::Pod, "default", "db-1").await.expect("get") else {
        panic!("no db-1")
    };
    assert_eq!(p1.spec.other.get("hostname"), Some(&json!("db-1")));
    assert_eq!(p1.spec.other.get("subdomain"), Some(&json!("db")));
    assert_eq!(
        p1.metadata.labels["statefulset.kubernetes.io/pod-name"],
        "db-1"
    );
    let hostnames = eventually(Duration::from_secs(30), "named endpoints", || async {
        let (slices, _) = api
            .list(
                Kind::EndpointSlice,
                &ListParams::default()
                    .namespace("default")
                    .labels("kubernetes.io/service-name=db"),
            )
            .await
            .ok()?;
        let mut names: Vec<String> = slices
            .iter()
            .filter_map(|o| match o {
                Object::EndpointSlice(s) => Some(s),
                _ => None,
            })
            .flat_map(|s| s.endpoints.iter().map(|e| e.hostname.clone()))
            .collect();
        names.sort();
        (names.len() == 3).then_some(names)
    })
    .await;
    assert_eq!(hostnames, ["db-0", "db-1", "db-2"]);

    // Scaled down: db-2 goes, then db-1.
    edit_generic(&api, sts, "db", |o| o["spec"]["replicas"] = json!(1)).await;
    eventually(Duration::from_secs(60), "one pod left", || async {
        let (pods, _) = api
            .list(
                Kind::Pod,
                &ListParams::default().namespace("default").labels("app=db"),
            )
            .await
            .ok()?;
        (pods.len() == 1 && pods[0].metadata().name == "db-0").then_some(())
    })
    .await;

    // A new template: the pod is made again at the update revision, which becomes current.
    edit_generic(&api, sts, "db", |o| {
        o["spec"]["template"] = template("localhost/skiff/busybox:2");
    })
    .await;
    let s = eventually(Duration::from_secs(60), "the update rolled out", || async {
        let s = status(api.clone()).await?;
        let Ok(Some(Object::Pod(p))) = api.get(Kind::Pod, "default", "db-0").await else {
            return None;
        };
        (p.spec.containers[0].image == "localhost/skiff/busybox:2"
            && s["currentRevision"] == s["updateRevision"]
            && s["readyReplicas"] == 1)
            .then_some(s)
    })
    .await;
    assert_eq!(
        s["updateRevision"].as_str().map(|r| r.starts_with("db-")),
        Some(true),
        "{s}"
    );

    // A deleted pod comes back under its name.
    let Some(Object::Pod(before)) = api.get(Kind::Pod, "default", "db-0").await.expect("get")
    else {
        panic!("no db-0")
    };
    api.delete(Kind::Pod, "default", "db-0", 0, Some(0))
        .await
        .expect("delete db-0");
    eventually(Duration::from_secs(60), "db-0 made again", || async {
        let Ok(Some(Object::Pod(p))) = api.get(Kind::Pod, "default", "db-0").await else {
            return None;
        };
        (p.metadata.uid != before.metadata.uid && ready(&p)).then_some(())
    })
    .await;
    let v = violations.lock().expect("lock").clone();
    assert!(v.is_empty(), "{v:?}");

    // Claims: one per pod from each template, gone with the set under whenDeleted: Delete.
    api.create(&obj(
        sts,
        json!({"metadata": {"name": "vol", "namespace": "default"},
               "spec": {"replicas": 2, "serviceName": "vol", "podManagementPolicy": "Parallel",
                        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete"},
                        "selector": {"matchLabels": {"app": "vol"}},
                        "volumeClaimTemplates": [{"metadata": {"name": "data"},
                            "spec": {"accessModes": ["ReadWriteOnce"],
                                     "resources": {"requests": {"storage": "1Gi"}}}}],
                        "template": {"metadata": {"labels": {"app": "vol"}},
                                     "spec": {"containers": [{"name": "c",
                                         "image": "localhost/skiff/busybox:1",
                                         "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}}}),
    ))
    .await
    .expect("a set with claims");
    let pvc = Kind::from_name("PersistentVolumeClaim").expect("declared");
    let claims = |api: ClusterClient| async move {
        let (items, _) = api
            .list(pvc, &ListParams::default().namespace("default"))
            .await
            .ok()?;
        let mut names: Vec<String> = items.iter().map(|o| o.metadata().name.clone()).collect();
        names.sort();
        Some(names)
    };
    eventually(Duration::from_secs(30), "a claim per pod", || async {
        (claims(api.clone()).await? == ["data-vol-0", "data-vol-1"]).then_some(())
    })
    .await;
    let Some(Object::Pod(v0)) = api.get(Kind::Pod, "default", "vol-0").await.expect("get") else {
        panic!("no vol-0")
    };
    let volume = v0
        .spec
        .volumes
        .iter()
        .find(|v| v.name == "data")
        .expect("volume");
    assert_eq!(
        volume
            .persistent_volume_claim
            .as_ref()
            .map(|c| c.claim_name.as_str()),
        Some("data-vol-0")
    );
    // The local provisioner binds each claim to a volume on its pod's node (the default
    // StorageClass), and the pods run.
    let pv = Kind::from_name("PersistentVolume").expect("declared");
    let (node, local) = eventually(
        Duration::from_secs(60),
        "vol-0 running on its volume",
        || async {
            let Ok(Some(Object::Generic(_, c))) = api.get(pvc, "default", "data-vol-0").await
            else {
                return None;
            };
            (c.text("/status/phase") == "Bound").then_some(())?;
            assert_eq!(c.text("/spec/storageClassName"), "standard");
            let Ok(Some(v)) = api.get(pv, "", c.text("/spec/volumeName")).await else {
                return None;
            };
            let Ok(Some(Object::Pod(p))) = api.get(Kind::Pod, "default", "vol-0").await else {
                return None;
            };
            let v = v.to_json_value();
            let pinned = skiff_proto::api::volume::pinned_nodes(&v)?;
            let local = std::path::PathBuf::from(v["spec"]["local"]["path"].as_str()?);
            (ready(&p) && pinned == [p.spec.node_name.clone()]).then_some((p.spec.node_name, local))
        },
    )
    .await;
    assert!(
        local.is_dir(),
        "the volume's directory on its node: {local:?}"
    );
    // Made again, the pod goes back to its volume's node, whichever node is freer.
    for _ in 0..3 {
        let Some(Object::Pod(before)) = api.get(Kind::Pod, "default", "vol-0").await.expect("get")
        else {
            panic!("no vol-0")
        };
        api.delete(Kind::Pod, "default", "vol-0", 0, Some(0))
            .await
            .expect("delete vol-0");
        let again = eventually(Duration::from_secs(60), "vol-0 made again", || async {
            let Ok(Some(Object::Pod(p))) = api.get(Kind::Pod, "default", "vol-0").await else {
                return None;
            };
            (p.metadata.uid != before.metadata.uid && ready(&p)).then_some(p.spec.node_name)
        })
        .await;
        assert_eq!(again, node, "vol-0 left its volume's node");
    }
    // Scaled down under `whenScaled: Delete`: the pod scaled away takes its claim along.
    edit_generic(&api, sts, "vol", |o| {
        o["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] = json!("Delete");
    })
    .await;
    edit_generic(&api, sts, "vol", |o| o["spec"]["replicas"] = json!(1)).await;
    eventually(
        Duration::from_secs(60),
        "vol-1's claim gone with it",
        || async { (claims(api.clone()).await? == ["data-vol-0"]).then_some(()) },
    )
    .await;
    api.delete(sts, "default", "vol", 0, None)
        .await
        .expect("delete the set");
    eventually(
        Duration::from_secs(60),
        "the claims and volumes gone with the set",
        || async {
            let (volumes, _) = api.list(pv, &ListParams::default()).await.ok()?;
            (claims(api.clone()).await?.is_empty() && volumes.is_empty()).then_some(())
        },
    )
    .await;
    // Its node removes a deleted volume's directory once no pod mounts it.
    eventually(
        Duration::from_secs(30),
        "the volume's directory removed",
        || async { (!local.exists()).then_some(()) },
    )
    .await;
}

/// The status of PodDisruptionBudget `name` in `default`, as stored.
async fn budget_status(api: &ClusterClient, name: &str) -> Option<serde_json::Value> {
    let pdb = Kind::from_name("PodDisruptionBudget").expect("declared");
    match api.get(pdb, "default", name).await {
        Ok(Some(Object::Generic(_, g))) => g.at("/status").cloned(),
        _ => None,
    }
}

/// The disruption controller keeps a budget over a Deployment's pods: expected pods from the
/// Deployment's scale (reached through its ReplicaSet), the ready ones healthy, one
/// disruption allowed under `maxUnavailable: 1` with `DisruptionAllowed` True, the generation
/// observed; a percentage of `minAvailable` rounds up; scaling the Deployment moves the
/// figures. A percentage budget over pods whose controller is a Job fails safe: no
/// disruption, `SyncFailed` with kube-controller-manager's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disruption_budgets_count_a_deployments_pods() {
    let cluster = Cluster::start(1).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let _control = start_control(&cluster, 2, 1);
    let pdb = Kind::from_name("PodDisruptionBudget").expect("declared");
    let budget = |name: &str, spec: serde_json::Value| {
        obj(
            pdb,
            json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
        )
    };
    api.create(&web(3, "localhost/skiff/busybox:1"))
        .await
        .expect("deployment");
    api.create(&budget(
        "web",
        json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
    ))
    .await
    .expect("budget");
    api.create(&budget(
        "web-half",
        json!({"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}}),
    ))
    .await
    .expect("budget");
    let settled = |name: &'static str, expected: i64, healthy: i64| {
        let api = api.clone();
        async move {
            eventually(
                Duration::from_secs(60),
                &format!("{name}: {expected} expected, {healthy} healthy"),
                || async {
                    let s = budget_status(&api, name).await?;
                    (s["expectedPods"] == expected && s["currentHealthy"] == healthy).then_some(s)
                },
            )
            .await
        }
    };
    let s = settled("web", 3, 3).await;
    assert_eq!(
        (
            &s["desiredHealthy"],
            &s["disruptionsAllowed"],
            &s["observedGeneration"]
        ),
        (&json!(2), &json!(1), &json!(1)),
        "{s}"
    );
    let allowed = &s["conditions"][0];
    assert_eq!(
        (&allowed["type"], &allowed["status"], &allowed["reason"]),
        (
            &json!("DisruptionAllowed"),
            &json!("True"),
            &json!("SufficientPods")
        ),
        "{s}"
    );
    let s = settled("web-half", 3, 3).await;
    assert_eq!(
        (&s["desiredHealthy"], &s["disruptionsAllowed"]),
        (&json!(2), &json!(1)),
        "⌈50% of 3⌉ = 2: {s}"
    );

    // Scaled while its controller may still be writing its status: again on a conflict.
    eventually(
        Duration::from_secs(30),
        "the Deployment scaled to 1",
        || async {
            let mut d = deployment(&api).await;
            d.spec.replicas = Some(1);
            api.update(&Object::Deployment(d)).await.ok()
        },
    )
    .await;
    let s = settled("web", 1, 1).await;
    assert_eq!(
        (&s["desiredHealthy"], &s["disruptionsAllowed"]),
        (&json!(0), &json!(1)),
        "{s}"
    );

    let job = Kind::from_name("Job").expect("declared");
    api.create(&obj(
        job,
        json!({"metadata": {"name": "batch", "namespace": "default"},
               "spec": {"template": {"metadata": {"labels": {"app": "batch"}},
                                     "spec": {"restartPolicy": "Never", "containers": [
                   {"name": "c", "image": "localhost/skiff/busybox:1",
                    "command": ["sh", "-c", "sleep 600"]}]}}}}),
    ))
    .await
    .expect("job");
    api.create(&budget(
        "batch",
        json!({"minAvailable": "50%", "selector": {"matchLabels": {"app": "batch"}}}),
    ))
    .await
    .expect("budget");
    let failed = eventually(
        Duration::from_secs(60),
        "the batch budget fails safe",
        || async {
            let s = budget_status(&api, "batch").await?;
            let c = s["conditions"].as_array()?.first()?.clone();
            (c["reason"] == "SyncFailed").then_some((s, c))
        },
    )
    .await;
    let (s, c) = failed;
    assert_eq!(s["disruptionsAllowed"], 0, "{s}");
    assert_eq!(c["status"], "False");
    assert!(
        c["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("found no controllers for pod \"batch-")),
        "{c}"
    );
}
