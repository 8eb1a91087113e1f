//! The node agent against a real three-member store: `skiff node --runtime sim` registers its
//! Node and keeps its heartbeat; pods created and bound through the cluster API run to
//! Running / Succeeded / Failed with the status the kubelet would write; deleting a running
//! pod stops it and removes the object; a restarted agent adopts nothing it cannot see (the
//! simulated runtime lives in the agent process) and cleans up.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Cluster, eventually, skiff_bin};
use futures::StreamExt;
use serde_json::json;
use skiff_launch::{Child, Launch, NodeCommand, RuntimeKind};
use skiff_proto::api::{
    ConditionStatus, Kind, NodeConditionType, Object, Pod, PodConditionType, PodPhase,
};
use skiff_proto::client::{ClusterClient, Event, ListParams, WatchParams};
use skiff_proto::cluster::v1::Binding;
use skiff_proto::cluster::v1::bind_result::Outcome;

/// A `skiff node --runtime sim` process (killed by PID when dropped).
struct Agent {
    child: Child,
}

impl Agent {
    /// An agent of the nodes `tune` describes, heartbeat every second.
    fn start(dir: &Path, endpoints: &[String], tune: impl FnOnce(&mut NodeCommand)) -> Agent {
        Agent::start_beating(dir, endpoints, Duration::from_secs(1), tune)
    }

    /// An agent whose nodes heartbeat every `heartbeat`; its log is `agent-<name>.log`.
    fn start_beating(
        dir: &Path,
        endpoints: &[String],
        heartbeat: Duration,
        tune: impl FnOnce(&mut NodeCommand),
    ) -> Agent {
        let mut node = NodeCommand {
            heartbeat_interval: Some(heartbeat),
            backoff_initial: Some(Duration::from_secs(1)),
            logs_address: Some("127.0.0.1:0".into()),
            log: Some("info".into()),
            ..NodeCommand::new(RuntimeKind::Sim, endpoints.to_vec())
        };
        tune(&mut node);
        let name = node
            .name
            .clone()
            .or_else(|| node.name_prefix.clone())
            .unwrap_or_default();
        let log = dir.join(format!("agent-{name}.log"));
        let child = Launch::new(format!("agent {name}"), skiff_bin(), log)
            .args(node.args())
            .spawn()
            .expect("spawn skiff node");
        Agent { child }
    }

    fn pid(&self) -> u32 {
        self.child.pid().expect("the agent runs")
    }
}

fn pod(name: &str, spec: serde_json::Value) -> Object {
    Object::from_json(
        Kind::Pod,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "default"}, "spec": spec})
        .to_string()
        .as_bytes(),
    )
    .expect("test pod decodes")
}

fn bind(name: &str, node: &str) -> Binding {
    Binding {
        namespace: "default".into(),
        pod: name.into(),
        node: node.into(),
        pod_resource_version: 0,
    }
}

async fn get_pod(api: &ClusterClient, name: &str) -> Option<Pod> {
    match api.get(Kind::Pod, "default", name).await.ok()? {
        Some(Object::Pod(p)) => Some(p),
        _ => None,
    }
}

async fn phase_is(api: &ClusterClient, name: &str, phase: PodPhase) -> Option<Pod> {
    get_pod(api, name)
        .await
        .filter(|p| p.phase() == Some(phase))
}

fn condition(p: &Pod, t: PodConditionType) -> Option<ConditionStatus> {
    p.condition(&t).map(|c| c.status)
}

/// Pods bound to a simulated node run, finish and are deleted with the statuses the kubelet
/// reports; the Node registers with its capacity and keeps its heartbeat fresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_finish_and_are_removed() {
    let cluster = Cluster::start(3).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], common::free_port()));
    let _agent = Agent::start(cluster.dir.path(), &cluster.endpoints(), |n| {
        n.name = Some("n1".into());
        n.cpu = Some("4".into());
        n.memory = Some("8Gi".into());
        n.labels = vec!["zone=a".into()];
        n.metrics_addr = Some(metrics);
    });
    let long = Duration::from_secs(30);
    let node = eventually(long, "node n1 registered and Ready", || async {
        match api.get(Kind::Node, "", "n1").await.ok()? {
            Some(Object::Node(n)) if n.is_ready() => Some(n),
            _ => None,
        }
    })
    .await;
    let status = node.status.clone().expect("node status");
    assert_eq!(status.allocatable["cpu"].to_string(), "4");
    assert_eq!(status.allocatable["memory"].to_string(), "8Gi");
    // The root filesystem's size, so pods that request ephemeral storage fit somewhere.
    let disk = status
        .allocatable
        .get("ephemeral-storage")
        .expect("ephemeral-storage reported");
    assert!(disk.value() > 0, "{disk}");
    assert_eq!(node.metadata.labels["zone"], "a");
    let beat = |n: &skiff_proto::api::Node| {
        n.condition(&NodeConditionType::Ready)
            .and_then(|c| c.last_heartbeat_time)
            .expect("heartbeat time")
    };
    let first = beat(&node);
    eventually(long, "a newer heartbeat", || async {
        match api.get(Kind::Node, "", "n1").await.ok()? {
            Some(Object::Node(n)) if beat(&n) > first => Some(()),
            _ => None,
        }
    })
    .await;

    let specs = [
        (
            "server",
            json!({"containers": [{"name": "web", "image": "localhost/skiff/busybox:1",
                                          "ports": [{"containerPort": 8080}],
                                          "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]}),
        ),
        (
            "job",
            json!({"restartPolicy": "Never",
                       "initContainers": [{"name": "setup", "image": "localhost/skiff/busybox:1", "command": ["true"]}],
                       "containers": [{"name": "main", "image": "localhost/skiff/busybox:1",
                                       "command": ["sh", "-c", "echo done; sleep 1; exit 0"]}]}),
        ),
        (
            "broken",
            json!({"restartPolicy": "Never",
                          "containers": [{"name": "main", "image": "localhost/skiff/busybox:1",
                                          "command": ["sh", "-c", "exit 3"]}]}),
        ),
        (
            "scratch",
            json!({"containers": [{"name": "main", "image": "localhost/skiff/busybox:1",
                                   "resources": {"requests": {"ephemeral-storage": "1Mi"}}}]}),
        ),
        (
            "picky",
            json!({"nodeSelector": {"zone": "b"},
                         "containers": [{"name": "main", "image": "localhost/skiff/busybox:1"}]}),
        ),
    ];
    for (name, spec) in &specs {
        api.create(&pod(name, spec.clone())).await.expect("create");
    }
    let results = api
        .bind(specs.iter().map(|(n, _)| bind(n, "n1")).collect())
        .await
        .expect("bind");
    assert!(results.iter().all(|r| r.outcome == Outcome::Bound as i32));

    let server = eventually(long, "server Running and Ready", || async {
        phase_is(&api, "server", PodPhase::Running)
            .await
            .filter(|p| condition(p, PodConditionType::Ready) == Some(ConditionStatus::True))
    })
    .await;
    let s = server.status.as_ref().expect("status");
    assert_eq!(s.host_ip, "127.0.0.1");
    assert!(!s.pod_ip.is_empty());
    assert!(s.start_time.is_some());
    assert_eq!(
        condition(&server, PodConditionType::PodScheduled),
        Some(ConditionStatus::True)
    );
    assert_eq!(
        condition(&server, PodConditionType::Initialized),
        Some(ConditionStatus::True)
    );
    let c = &s.container_statuses[0];
    assert!(c.ready && c.restart_count == 0);
    assert!(c.state.as_ref().is_some_and(|st| st.running.is_some()));
    assert!(c.container_id.starts_with("sim://"));

    eventually(
        long,
        "scratch (ephemeral storage requested) Running",
        || phase_is(&api, "scratch", PodPhase::Running),
    )
    .await;
    let job = eventually(long, "job Succeeded", || {
        phase_is(&api, "job", PodPhase::Succeeded)
    })
    .await;
    let s = job.status.as_ref().expect("status");
    let t = s.container_statuses[0]
        .state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .expect("terminated");
    assert_eq!((t.exit_code, t.reason.as_str()), (0, "Completed"));
    assert_eq!(s.init_container_statuses[0].name, "setup");
    // The agent process's /healthz and /metrics count what it did.
    let http = skiff_proto::http::HttpClient::new();
    let healthz = http
        .get(&format!("http://{metrics}/healthz"), long)
        .await
        .expect("healthz");
    assert_eq!((healthz.status, healthz.text().as_str()), (200, "ok"));
    let text = http
        .get(&format!("http://{metrics}/metrics"), long)
        .await
        .expect("metrics")
        .text();
    let sample = |name| skiff_proto::metrics::sample(&text, name).unwrap_or(0.0);
    assert_eq!(sample("skiff_node_nodes"), 1.0, "{text}");
    // setup, main of the job, web of the server, main of broken
    assert!(sample("skiff_node_container_starts_total") >= 3.0, "{text}");
    assert!(sample("skiff_node_heartbeats_total") >= 1.0, "{text}");
    assert!(sample("process_resident_memory_bytes") > 0.0, "{text}");
    let out = Command::new(skiff_bin())
        .args([
            "node",
            "logs",
            "job",
            "--endpoints",
            &cluster.endpoints().join(","),
        ])
        .output()
        .expect("skiff node logs");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");

    let broken = eventually(long, "broken Failed", || {
        phase_is(&api, "broken", PodPhase::Failed)
    })
    .await;
    let t = broken.status.as_ref().expect("status").container_statuses[0]
        .state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .cloned()
        .expect("terminated");
    assert_eq!((t.exit_code, t.reason.as_str()), (3, "Error"));

    let picky = eventually(long, "picky rejected", || {
        phase_is(&api, "picky", PodPhase::Failed)
    })
    .await;
    assert_eq!(
        picky.status.as_ref().expect("status").reason,
        "NodeAffinity"
    );

    // Graceful delete of the running pod: the agent stops it and removes the object.
    let terminating = api
        .delete(Kind::Pod, "default", "server", 0, Some(30))
        .await
        .expect("delete");
    assert!(terminating.metadata().deletion_timestamp.is_some());
    eventually(long, "server removed", || async {
        get_pod(&api, "server").await.is_none().then_some(())
    })
    .await;
    // Finished pods are deleted at once by the store.
    api.delete(Kind::Pod, "default", "job", 0, None)
        .await
        .expect("delete job");
    assert!(get_pod(&api, "job").await.is_none());
}

/// Bound → Running latency over 100 pods through one simulated node, printed as p50/p99
/// (the figure in the closing note); every pod gets there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_to_running_latency_over_100_pods() {
    let cluster = Cluster::start(3).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let _agent = Agent::start(cluster.dir.path(), &cluster.endpoints(), |n| {
        n.name = Some("lat".into());
        n.max_pods = Some(200);
    });
    eventually(Duration::from_secs(30), "node registered", || async {
        api.get(Kind::Node, "", "lat").await.ok().flatten()
    })
    .await;
    let n = 100;
    for i in 0..n {
        api.create(&pod(
            &format!("p{i}"),
            json!({"containers": [{"name": "c", "image": "localhost/skiff/busybox:1"}]}),
        ))
        .await
        .expect("create");
    }
    let (_, rev) = api
        .list(Kind::Pod, &ListParams::default().namespace("default"))
        .await
        .expect("list");
    let mut watch = Box::pin(
        api.watch(
            Kind::Pod,
            &WatchParams::default()
                .namespace("default")
                .fields("spec.nodeName=lat")
                .resource_version(rev),
        )
        .await
        .expect("watch"),
    );
    // Bind in the background while the watch is read, so each latency is measured when the
    // Running status arrives (from just before the pod's Bind call).
    let bound_at = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::new()));
    let binder = {
        let (api, bound_at) = (api.clone(), bound_at.clone());
        tokio::spawn(async move {
            for i in 0..n {
                let name = format!("p{i}");
                bound_at
                    .lock()
                    .expect("lock")
                    .insert(name.clone(), Instant::now());
                let r = api.bind(vec![bind(&name, "lat")]).await.expect("bind");
                assert_eq!(r[0].outcome, Outcome::Bound as i32);
            }
        })
    };
    let mut latencies = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while latencies.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = tokio::time::timeout(left, watch.next())
            .await
            .expect("all pods Running within 60 s")
            .expect("watch open")
            .expect("event");
        if let Event::Modified(Object::Pod(p)) = e
            && p.phase() == Some(PodPhase::Running)
            && let Some(t) = bound_at.lock().expect("lock").remove(&p.metadata.name)
        {
            latencies.push(t.elapsed());
        }
    }
    binder.await.expect("binder");
    latencies.sort();
    let p = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    eprintln!(
        "bound→Running over {n} pods (sim runtime, 5 ms sandbox + 5 ms start): p50 {:?}, p99 {:?}, max {:?}",
        p(0.50),
        p(0.99),
        latencies[latencies.len() - 1]
    );
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Scale figures, run on demand (`cargo test -p skiff --test node_agent -- --ignored
/// --nocapture`): one process hosting `SKIFF_SIM_NODES` (1000) simulated nodes registers them
/// all, runs `SKIFF_SIM_PODS_PER_NODE` (5) pods on each, and prints its memory per node (idle
/// and with pods) and the bound→Running latency of batch-bound pods. `SKIFF_SIM_HEARTBEAT`
/// (a duration, `10s` by default) sets the heartbeat: every beat is a replicated Node write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: prints figures, takes minutes"]
async fn sim_nodes_at_scale() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (nodes, per_node) = (
        env("SKIFF_SIM_NODES", 1000),
        env("SKIFF_SIM_PODS_PER_NODE", 5),
    );
    let cluster = Cluster::start(3).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    // The kubelet's 10 s heartbeat is 100 Node writes/s for 1000 nodes.
    let beat = std::env::var("SKIFF_SIM_HEARTBEAT").map_or(Duration::from_secs(10), |v| {
        skiff_proto::duration::parse(&v).expect("SKIFF_SIM_HEARTBEAT")
    });
    let one = Agent::start_beating(cluster.dir.path(), &cluster.endpoints(), beat, |n| {
        n.name = Some("solo".into());
    });
    let many = Agent::start_beating(cluster.dir.path(), &cluster.endpoints(), beat, |n| {
        n.count = Some(nodes);
        n.name_prefix = Some("sim-".into());
    });
    let begun = Instant::now();
    eventually(
        Duration::from_secs(300),
        "every node registered",
        || async {
            let (all, _) = api.list(Kind::Node, &ListParams::default()).await.ok()?;
            (all.len() > nodes).then_some(())
        },
    )
    .await;
    eprintln!("{nodes} nodes registered in {:?}", begun.elapsed());
    // Let the registrations settle (and heartbeats start) before measuring.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let (base, idle) = (rss_kib(one.pid()), rss_kib(many.pid()));
    eprintln!(
        "RSS: 1 node {base} KiB, {nodes} nodes {idle} KiB → {:.1} KiB per idle node",
        (idle.saturating_sub(base)) as f64 / (nodes - 1) as f64
    );
    let total = nodes * per_node;
    for i in 0..total {
        api.create(&pod(
            &format!("s{i}"),
            json!({"containers": [{"name": "c", "image": "localhost/skiff/busybox:1"}]}),
        ))
        .await
        .expect("create");
    }
    let (_, rev) = api
        .list(Kind::Pod, &ListParams::default().namespace("default"))
        .await
        .expect("list");
    let mut watch = Box::pin(
        api.watch(
            Kind::Pod,
            &WatchParams::default()
                .namespace("default")
                .resource_version(rev),
        )
        .await
        .expect("watch"),
    );
    let bound_at = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::new()));
    let binder = {
        let (api, bound_at) = (api.clone(), bound_at.clone());
        tokio::spawn(async move {
            for chunk in (0..total).collect::<Vec<_>>().chunks(500) {
                let batch: Vec<Binding> = chunk
                    .iter()
                    .map(|i| bind(&format!("s{i}"), &format!("sim-{}", i % nodes)))
                    .collect();
                let now = Instant::now();
                for b in &batch {
                    bound_at.lock().expect("lock").insert(b.pod.clone(), now);
                }
                let r = api.bind(batch).await.expect("bind");
                assert!(r.iter().all(|r| r.outcome == Outcome::Bound as i32));
            }
        })
    };
    let mut latencies = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(600);
    while latencies.len() < total {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = tokio::time::timeout(left, watch.next())
            .await
            .expect("all pods Running in time")
            .expect("watch open")
            .expect("event");
        if let Event::Modified(Object::Pod(p)) = e
            && p.phase() == Some(PodPhase::Running)
            && let Some(t) = bound_at.lock().expect("lock").remove(&p.metadata.name)
        {
            latencies.push(t.elapsed());
        }
    }
    binder.await.expect("binder");
    latencies.sort();
    let q = |f: f64| latencies[((latencies.len() as f64 * f) as usize).min(latencies.len() - 1)];
    let busy = rss_kib(many.pid());
    eprintln!(
        "{total} pods on {nodes} nodes, bound (batches of 500) → Running: p50 {:?}, p99 {:?}; \
         RSS {busy} KiB → {:.1} KiB per node with {per_node} pods",
        q(0.5),
        q(0.99),
        (busy.saturating_sub(base)) as f64 / (nodes - 1) as f64
    );
}

/// The agent admits pods against its Node as stored now, not as it was at registration: a
/// label added later lets a nodeSelector pod run, and a NoExecute taint added later refuses
/// a pod that does not tolerate it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_follows_the_stored_node() {
    let cluster = Cluster::start(1).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let _agent = Agent::start(cluster.dir.path(), &cluster.endpoints(), |n| {
        n.name = Some("n1".into());
    });
    let long = Duration::from_secs(30);
    n1_ready(&api, long).await;
    // Labelled after registration, then a pod that selects the label is bound at once.
    edit_node(&api, "n1", |n| {
        n.metadata.labels.insert("disk".into(), "ssd".into());
    })
    .await;
    let picky = json!({"nodeSelector": {"disk": "ssd"},
                       "containers": [{"name": "main", "image": "localhost/skiff/busybox:1"}]});
    api.create(&pod("picky", picky)).await.expect("create");
    api.bind(vec![bind("picky", "n1")]).await.expect("bind");
    eventually(long, "picky Running", || {
        phase_is(&api, "picky", PodPhase::Running)
    })
    .await;

    // A NoExecute taint added later refuses a pod that does not tolerate it.
    edit_node(&api, "n1", |n| {
        n.spec.taints.push(
            serde_json::from_value(json!({"key": "drain", "effect": "NoExecute"})).expect("taint"),
        );
    })
    .await;
    let plain = json!({"containers": [{"name": "main", "image": "localhost/skiff/busybox:1"}]});
    api.create(&pod("plain", plain)).await.expect("create");
    api.bind(vec![bind("plain", "n1")]).await.expect("bind");
    let refused = eventually(long, "plain Failed", || {
        phase_is(&api, "plain", PodPhase::Failed)
    })
    .await;
    assert_eq!(
        refused.status.as_ref().map(|s| s.reason.as_str()),
        Some("Taint"),
        "{refused:?}"
    );
}

/// Waits for node n1 to register and be Ready.
async fn n1_ready(api: &ClusterClient, within: Duration) {
    eventually(within, "node n1 registered and Ready", || async {
        match api.get(Kind::Node, "", "n1").await.ok()? {
            Some(Object::Node(n)) if n.is_ready() => Some(()),
            _ => None,
        }
    })
    .await;
}

/// Changes a Node with `edit`, again on a conflict with the agent's heartbeat.
async fn edit_node(api: &ClusterClient, name: &str, edit: impl Fn(&mut skiff_proto::api::Node)) {
    eventually(Duration::from_secs(30), "the node edited", || async {
        let Some(Object::Node(mut n)) = api.get(Kind::Node, "", name).await.ok()? else {
            return None;
        };
        edit(&mut n);
        api.update(&Object::Node(n)).await.ok().map(|_| ())
    })
    .await;
}

/// The node ends pods as the kubelet does: one whose emptyDir holds more than its
/// `sizeLimit` is evicted (Failed, `Evicted`, the kubelet's message, a DisruptionTarget
/// condition and an `Evicted` event), one past its `activeDeadlineSeconds` fails as
/// `DeadlineExceeded`; a pod within its limit runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_over_their_size_limit_or_deadline_are_ended_by_the_node() {
    let cluster = Cluster::start(1).await;
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let root = cluster.dir.path().join("node-root");
    let _agent = Agent::start(cluster.dir.path(), &cluster.endpoints(), |n| {
        n.name = Some("n1".into());
        n.root_dir = Some(root.clone());
        n.volume_resync = Some(Duration::from_millis(300));
    });
    let long = Duration::from_secs(30);
    n1_ready(&api, long).await;
    let scratch = |limit: &str| {
        json!({"containers": [{"name": "main", "image": "localhost/skiff/busybox:1",
                               "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
               "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": limit}}]})
    };
    let brief = json!({"activeDeadlineSeconds": 3, "terminationGracePeriodSeconds": 1,
                       "containers": [{"name": "main", "image": "localhost/skiff/busybox:1"}]});
    for (name, spec) in [
        ("hog", scratch("1Mi")),
        ("within", scratch("10Mi")),
        ("brief", brief),
    ] {
        api.create(&pod(name, spec)).await.expect("create");
        api.bind(vec![bind(name, "n1")]).await.expect("bind");
    }
    let mut uids = BTreeMap::new();
    for name in ["hog", "within"] {
        let p = eventually(long, "Running", || phase_is(&api, name, PodPhase::Running)).await;
        uids.insert(name, p.metadata.uid.clone());
    }
    // What the container would write: 2 MiB in each emptyDir.
    for (name, uid) in &uids {
        let dir = root
            .join(uid)
            .join("volumes/kubernetes.io~empty-dir/scratch");
        assert!(dir.is_dir(), "{name}: {}", dir.display());
        std::fs::write(dir.join("fill"), vec![1u8; 2 << 20]).expect("fill");
    }
    let evicted = eventually(long, "hog Failed", || {
        phase_is(&api, "hog", PodPhase::Failed)
    })
    .await;
    let status = evicted.status.clone().expect("status");
    let message = "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". ";
    assert_eq!(
        (status.reason.as_str(), status.message.as_str()),
        ("Evicted", message),
        "{status:?}"
    );
    let target = evicted
        .condition(&PodConditionType::DisruptionTarget)
        .expect("DisruptionTarget");
    assert_eq!(target.reason, "TerminationByKubelet", "{target:?}");
    assert!(
        status
            .container_statuses
            .iter()
            .all(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some())),
        "its containers stopped: {status:?}"
    );
    eventually(long, "an Evicted event", || async {
        let (events, _) = api
            .list(
                Kind::Event,
                &ListParams::default()
                    .namespace("default")
                    .fields("involvedObject.kind=Pod,involvedObject.name=hog"),
            )
            .await
            .ok()?;
        events.into_iter().find_map(|e| match e {
            Object::Event(e) if e.reason == "Evicted" && e.message == message => Some(()),
            _ => None,
        })
    })
    .await;

    let ended = eventually(long, "brief Failed", || {
        phase_is(&api, "brief", PodPhase::Failed)
    })
    .await;
    let status = ended.status.clone().expect("status");
    assert_eq!(status.reason, "DeadlineExceeded", "{status:?}");
    assert!(
        ended
            .condition(&PodConditionType::DisruptionTarget)
            .is_none(),
        "{ended:?}"
    );
    // Measured on every resync since it was filled, well within its limit: still running.
    let within = get_pod(&api, "within").await.expect("within");
    assert_eq!(within.phase(), Some(PodPhase::Running), "{within:?}");
}
