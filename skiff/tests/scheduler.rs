//! `skiff scheduler` processes against a real three-member store: two schedulers run at
//! once (one leads, one stands by); pending pods are bound through batch Bind without
//! overcommitting any node or binding a pod twice; pods that fit nowhere carry a
//! kube-scheduler style `PodScheduled=False` message; a new node and deleted pods make room
//! for them; when the leader is killed the standby takes over. A pod of a higher
//! PriorityClass preempts lower ones where no PodDisruptionBudget protects them.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use common::{Cluster, eventually, free_port, skiff_bin};
use serde_json::json;
use skiff_launch::{Child, Launch, SchedulerCommand};
use skiff_proto::api::{ConditionStatus, Kind, Object, Pod, PodConditionType};
use skiff_proto::client::{ClusterClient, ListParams};

fn obj(kind: Kind, v: serde_json::Value) -> Object {
    Object::from_json(kind, v.to_string().as_bytes()).expect("test object decodes")
}

fn node(name: &str) -> Object {
    obj(
        Kind::Node,
        json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
               "status": {"capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                          "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                          "conditions": [{"type": "Ready", "status": "True"}]}}),
    )
}

fn pod(name: &str) -> Object {
    obj(
        Kind::Pod,
        json!({"metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
               "spec": {"containers": [{"name": "c", "image": "localhost/skiff/busybox:1",
                   "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}}),
    )
}

/// A `skiff scheduler` child process (killed by PID when dropped).
struct Scheduler {
    child: Child,
    metrics: String,
}

impl Scheduler {
    fn start(cluster: &Cluster, name: &str) -> Scheduler {
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let scheduler = SchedulerCommand {
            endpoints: cluster.endpoints(),
            metrics_addr: Some(metrics),
            lease_ttl: Some(Duration::from_secs(2)),
            log: Some("info".into()),
            ..SchedulerCommand::default()
        };
        let log = cluster.dir.path().join(format!("{name}.log"));
        let child = Launch::new(name, skiff_bin(), log)
            .args(scheduler.args())
            .spawn()
            .expect("spawn skiff scheduler")
            .tail_on_panic(usize::MAX);
        Scheduler {
            child,
            metrics: metrics.to_string(),
        }
    }

    fn kill(&mut self) {
        self.child.kill();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.child.log()).unwrap_or_default()
    }
}

async fn pods(api: &ClusterClient) -> Vec<Pod> {
    api.list(Kind::Pod, &ListParams::default().namespace("default"))
        .await
        .expect("list pods")
        .0
        .into_iter()
        .filter_map(|o| match o {
            Object::Pod(p) => Some(p),
            _ => None,
        })
        .collect()
}

/// Per node, the pods bound there; panics if any node's CPU requests exceed 2 cores.
fn placements(pods: &[Pod]) -> BTreeMap<String, usize> {
    let mut per = BTreeMap::new();
    for p in pods.iter().filter(|p| !p.spec.node_name.is_empty()) {
        *per.entry(p.spec.node_name.clone()).or_insert(0) += 1;
    }
    for (n, count) in &per {
        assert!(
            *count <= 4,
            "node {n} overcommitted: {count} pods of 500m on 2 cores"
        );
    }
    per
}

fn bound(pods: &[Pod]) -> usize {
    pods.iter().filter(|p| !p.spec.node_name.is_empty()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedulers_bind_pending_pods_without_overcommit_and_fail_over() {
    let cluster = Cluster::start(3).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    for n in ["n1", "n2", "n3"] {
        api.create(&node(n)).await.expect("create node");
    }
    let mut a = Scheduler::start(&cluster, "sched-a");
    let mut b = Scheduler::start(&cluster, "sched-b");
    for i in 0..20 {
        api.create(&pod(&format!("p{i:02}")))
            .await
            .expect("create pod");
    }
    // 3 nodes × 2 cores hold 12 pods of 500m; the other 8 fit nowhere.
    let all = eventually(Duration::from_secs(30), "12 pods bound", || async {
        let ps = pods(&api).await;
        (bound(&ps) == 12).then_some(ps)
    })
    .await;
    placements(&all);
    let unschedulable = eventually(
        Duration::from_secs(30),
        "FailedScheduling conditions",
        || async {
            let ps = pods(&api).await;
            let msgs: Vec<String> = ps
                .iter()
                .filter(|p| p.spec.node_name.is_empty())
                .filter_map(|p| {
                    p.condition(&PodConditionType::PodScheduled)
                        .filter(|c| {
                            c.status == ConditionStatus::False && c.reason == "Unschedulable"
                        })
                        .map(|c| c.message.clone())
                })
                .collect();
            (msgs.len() == 8).then_some(msgs)
        },
    )
    .await;
    assert!(
        unschedulable.iter().all(|m| m
            == "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes \
                           are available: 3 No preemption victims found for incoming pod."),
        "{unschedulable:?}"
    );
    // Exactly one scheduler leads.
    let leaders = [&a, &b]
        .iter()
        .filter(|s| s.log().contains("became the leader"))
        .count();
    assert_eq!(leaders, 1, "one leader:\n{}\n{}", a.log(), b.log());

    // A new node makes room for four more.
    api.create(&node("n4")).await.expect("create node");
    let ps = eventually(Duration::from_secs(30), "16 pods bound", || async {
        let ps = pods(&api).await;
        (bound(&ps) == 16).then_some(ps)
    })
    .await;
    assert_eq!(placements(&ps).get("n4"), Some(&4));

    // Kill the leader; the standby takes over and places what deleting two pods frees.
    let (leader, standby) = if a.log().contains("became the leader") {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    leader.kill();
    let victims: Vec<Pod> = ps
        .iter()
        .filter(|p| !p.spec.node_name.is_empty())
        .take(2)
        .cloned()
        .collect();
    for v in &victims {
        api.delete(Kind::Pod, "default", &v.metadata.name, 0, Some(0))
            .await
            .expect("delete pod");
    }
    let ps = eventually(
        Duration::from_secs(40),
        "16 bound after fail-over",
        || async {
            let ps = pods(&api).await;
            (ps.len() == 18 && bound(&ps) == 16).then_some(ps)
        },
    )
    .await;
    placements(&ps);
    assert!(
        standby.log().contains("became the leader"),
        "{}",
        standby.log()
    );
    // The metrics endpoint reports what the new leader did.
    let body = eventually(Duration::from_secs(10), "metrics", || async {
        let url = format!("http://{}/metrics", standby.metrics);
        let answer = skiff_proto::http::HttpClient::new()
            .get(&url, Duration::from_secs(5))
            .await
            .ok()?;
        let out = answer.text();
        out.contains("skiff_scheduler_binds_total").then_some(out)
    })
    .await;
    assert!(
        body.contains("skiff_scheduler_queue_pods{state=\"unschedulable\"}"),
        "{body}"
    );
    assert!(
        body.contains("skiff_scheduler_attempt_duration_seconds_bucket"),
        "{body}"
    );
}

fn generic(kind: &str, v: serde_json::Value) -> Object {
    obj(Kind::from_name(kind).expect("a declared kind"), v)
}

fn prioritized(name: &str, class: &str, app: &str, cpu: &str) -> Object {
    obj(
        Kind::Pod,
        json!({"metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
               "spec": {"priorityClassName": class,
                        "containers": [{"name": "c", "image": "localhost/skiff/busybox:1",
                            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}}),
    )
}

async fn get_pod(api: &ClusterClient, name: &str) -> Option<Pod> {
    match api.get(Kind::Pod, "default", name).await.expect("get pod") {
        Some(Object::Pod(p)) => Some(p),
        _ => None,
    }
}

/// Two full nodes of low-priority pods; the one on `n1` is protected by a budget that allows
/// no disruption. A high-priority pod preempts the unprotected one on `n2` (it gets the
/// DisruptionTarget condition and a graceful deletion), is nominated there, and is bound
/// there once the victim is gone (the test confirms the deletion as a node agent would).
/// A pod with `preemptionPolicy: Never` preempts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_pod_preempts_where_no_budget_protects() {
    let cluster = Cluster::start(1).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    for n in ["n1", "n2"] {
        api.create(&node(n)).await.expect("create node");
    }
    for (name, value, never) in [
        ("low", 10, false),
        ("high", 1000, false),
        ("polite", 2000, true),
    ] {
        let mut class = json!({"metadata": {"name": name}, "value": value});
        if never {
            class["preemptionPolicy"] = json!("Never");
        }
        api.create(&generic("PriorityClass", class))
            .await
            .expect("create class");
    }
    let _scheduler = Scheduler::start(&cluster, "sched");
    // Each node's 2 cores hold one pod of 1500m.
    api.create(&prioritized("db", "low", "db", "1500m"))
        .await
        .expect("create pod");
    let db_node = eventually(Duration::from_secs(30), "db bound", || async {
        let p = get_pod(&api, "db").await?;
        (!p.spec.node_name.is_empty()).then_some(p.spec.node_name)
    })
    .await;
    let other = if db_node == "n1" { "n2" } else { "n1" };
    api.create(&prioritized("batch", "low", "batch", "1500m"))
        .await
        .expect("create pod");
    eventually(Duration::from_secs(30), "batch bound", || async {
        let p = get_pod(&api, "batch").await?;
        (p.spec.node_name == other).then_some(())
    })
    .await;
    // The budget over db allows no disruption (its status as the disruption controller
    // would write it).
    let budget = api
        .create(&generic(
            "PodDisruptionBudget",
            json!({"metadata": {"name": "db", "namespace": "default"},
                   "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}}),
        ))
        .await
        .expect("create budget");
    let mut status = budget.to_json_value();
    status["status"] = json!({"observedGeneration": 1, "disruptionsAllowed": 0,
                              "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1});
    api.update_status(&generic("PodDisruptionBudget", status))
        .await
        .expect("budget status");

    // Never preempts: it stays pending and says why.
    api.create(&prioritized("polite", "polite", "polite", "1"))
        .await
        .expect("create pod");
    let message = eventually(Duration::from_secs(30), "polite unschedulable", || async {
        let p = get_pod(&api, "polite").await?;
        let c = p.condition(&PodConditionType::PodScheduled)?;
        (c.reason == "Unschedulable").then(|| c.message.clone())
    })
    .await;
    assert_eq!(
        message,
        "0/2 nodes are available: 2 Insufficient cpu. preemption: not eligible due to \
         preemptionPolicy=Never."
    );
    api.delete(Kind::Pod, "default", "polite", 0, Some(0))
        .await
        .expect("delete polite");

    api.create(&prioritized("urgent", "high", "urgent", "1"))
        .await
        .expect("create pod");
    let victim = eventually(Duration::from_secs(30), "batch preempted", || async {
        let p = get_pod(&api, "batch").await?;
        p.metadata.deletion_timestamp.is_some().then_some(p)
    })
    .await;
    let c = victim
        .condition(&PodConditionType::DisruptionTarget)
        .expect("DisruptionTarget condition");
    assert_eq!(
        (c.status, c.reason.as_str(), c.message.as_str()),
        (
            ConditionStatus::True,
            "PreemptionByScheduler",
            "default-scheduler: preempting to accommodate a higher priority pod"
        )
    );
    let urgent = eventually(Duration::from_secs(30), "urgent nominated", || async {
        let p = get_pod(&api, "urgent").await?;
        let nominated = p.status.as_ref()?.nominated_node_name.clone();
        (!nominated.is_empty()).then_some(p)
    })
    .await;
    assert_eq!(urgent.status.as_ref().unwrap().nominated_node_name, other);
    assert!(
        urgent.spec.node_name.is_empty(),
        "not bound while batch is terminating"
    );
    let db = get_pod(&api, "db").await.expect("db stays");
    assert!(
        db.metadata.deletion_timestamp.is_none(),
        "the budget protects db"
    );

    // The node agent confirms the victim's termination; the preemptor takes its room.
    api.delete(Kind::Pod, "default", "batch", 0, Some(0))
        .await
        .expect("confirm deletion");
    eventually(Duration::from_secs(30), "urgent bound", || async {
        let p = get_pod(&api, "urgent").await?;
        (p.spec.node_name == other).then_some(())
    })
    .await;
}
