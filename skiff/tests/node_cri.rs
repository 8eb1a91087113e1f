//! The node agent against a real containerd (Debian's containerd + runc), started by the test
//! with its own config, root, state and socket, and images built from busybox-static and
//! imported from OCI archives. containerd runs in a network namespace of its own, so the
//! bridge and rules CNI makes for pods on the pod network never touch the host's.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Cluster, eventually, skiff_bin};
use serde_json::json;
use skiff_launch::{Child, Launch, NodeCommand, RuntimeKind};
use skiff_proto::api::pod::ContainerStateTerminated;
use skiff_proto::api::{Kind, Object, Pod, PodPhase};
use skiff_proto::client::{ClusterClient, ListParams, WatchParams};
use skiff_proto::cluster::v1::Binding;

/// The tests of this file take turns: each runs a containerd of its own, and under the load
/// of another's (dozens of pods at once on two cores) containerd 1.6's shim can miss the OOM
/// event of a container killed within milliseconds of its start, reporting `Error` for
/// `OOMKilled`.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A containerd of the test's own (`skiff-launch`'s, images imported), stopped with its
/// shims when dropped; the mounts it leaves go with it.
struct Containerd {
    containerd: Option<skiff_launch::Containerd>,
    home: PathBuf,
}

impl Containerd {
    fn start(dir: &Path) -> Containerd {
        Containerd::start_in(&dir.join("containerd"))
    }

    fn start_in(home: &Path) -> Containerd {
        let home = home.to_path_buf();
        let containerd = skiff_launch::Containerd::start(
            &home,
            &home.join("containerd.log"),
            Path::new(skiff_bin()),
            skiff_node::image::PAUSE,
        )
        .expect("containerd (Debian package containerd; scripts/common.sh installs it)");
        Containerd {
            containerd: Some(containerd),
            home,
        }
    }

    fn inner(&self) -> &skiff_launch::Containerd {
        self.containerd
            .as_ref()
            .expect("invariant: taken only when dropped")
    }

    fn socket(&self) -> &Path {
        self.inner().socket()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        drop(self.containerd.take());
        // Mounts of the overlay snapshotter and the shims' state go with the directory.
        common::unmount_under(&self.home);
    }
}

/// A `skiff node --runtime cri` process (killed by PID when dropped).
struct Agent {
    child: Child,
}

impl Agent {
    /// Node c1's agent, on its containerd.
    fn start(dir: &Path, endpoints: &[String], ctr: &Containerd) -> Agent {
        Agent::start_node(
            dir,
            endpoints,
            ctr,
            "c1",
            NodeCommand::new(RuntimeKind::Cri, vec![]),
        )
    }

    /// Node `name`'s agent on `ctr`, with `extra`'s settings where it has them (its
    /// address, the cluster's pod network).
    fn start_node(
        dir: &Path,
        endpoints: &[String],
        ctr: &Containerd,
        name: &str,
        extra: NodeCommand,
    ) -> Agent {
        let node = NodeCommand {
            name: Some(name.into()),
            containerd_socket: Some(ctr.socket().to_path_buf()),
            pod_log_dir: Some(dir.join("pods")),
            heartbeat_interval: Some(Duration::from_secs(2)),
            backoff_initial: Some(Duration::from_secs(1)),
            logs_address: Some("127.0.0.1:0".into()),
            log: Some("info".into()),
            cni: Some(ctr.inner().cni_dirs()),
            runtime_netns: Some(ctr.inner().netns()),
            host_ip: extra.host_ip,
            cluster_cidr: extra.cluster_cidr,
            ..NodeCommand::new(RuntimeKind::Cri, endpoints.to_vec())
        };
        let log = dir.join(format!("agent-{name}.log"));
        let child = Launch::new(format!("the agent of {name}"), skiff_bin(), log)
            .args(node.args())
            .spawn()
            .expect("spawn skiff node");
        Agent { child }
    }

    fn kill(&mut self) {
        self.child.kill();
    }
}

fn pod(name: &str, spec: serde_json::Value) -> Object {
    let mut spec = spec;
    spec["hostNetwork"] = json!(true);
    Object::from_json(
        Kind::Pod,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "default"}, "spec": spec})
        .to_string()
        .as_bytes(),
    )
    .expect("test pod decodes")
}

fn container(command: &str) -> serde_json::Value {
    json!({"name": "main", "image": "localhost/skiff/busybox:1", "command": ["sh", "-c", command]})
}

async fn get_pod(api: &ClusterClient, name: &str) -> Option<Pod> {
    match api.get(Kind::Pod, "default", name).await.ok()? {
        Some(Object::Pod(p)) => Some(p),
        _ => None,
    }
}

fn terminated(p: &Pod) -> Option<ContainerStateTerminated> {
    p.status
        .as_ref()?
        .container_statuses
        .first()?
        .state
        .as_ref()?
        .terminated
        .clone()
}

fn phase(p: &Pod) -> Option<PodPhase> {
    p.phase()
}

async fn create_and_bind(api: &ClusterClient, name: &str, spec: serde_json::Value) {
    api.create(&pod(name, spec)).await.expect("create");
    bind_to_c1(api, name).await;
}

/// Node c1, once its agent has registered it Ready.
async fn node_c1_ready(api: &ClusterClient) -> skiff_proto::api::Node {
    eventually(Duration::from_secs(60), "node c1 Ready", || async {
        match api.get(Kind::Node, "", "c1").await.ok()? {
            Some(Object::Node(n)) if n.is_ready() => Some(n),
            _ => None,
        }
    })
    .await
}

async fn bind_to_c1(api: &ClusterClient, name: &str) {
    api.bind(vec![Binding {
        namespace: "default".into(),
        pod: name.into(),
        node: "c1".into(),
        pod_resource_version: 0,
    }])
    .await
    .expect("bind");
}

/// Real containers through containerd's CRI: a pod runs, logs in CRI format and exits 0 →
/// Succeeded; a crashing pod restarts with back-off; a pod over its memory limit is
/// OOMKilled; deletion stops a container that ignores SIGTERM within the grace period; an
/// agent that restarts adopts the running pod without restarting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_in_containerd() {
    let _turn = TURN.lock().await;
    let cluster = Cluster::start(3).await;
    let ctr = Containerd::start(cluster.dir.path());
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let mut agent = Agent::start(cluster.dir.path(), &cluster.endpoints(), &ctr);
    let long = Duration::from_secs(60);
    node_c1_ready(&api).await;

    create_and_bind(
        &api,
        "hello",
        json!({"restartPolicy": "Never", "containers": [container("echo hello from skiff; exit 0")]}),
    )
    .await;
    create_and_bind(
        &api,
        "crash",
        json!({"containers": [container("echo crashing; exit 1")]}),
    )
    .await;
    // A moment before it fills its memory: containerd can miss an OOM kill that comes in the
    // first instant after start, and report it as 137 "Error" (containerd issue 8180;
    // Kubernetes' own OOM test waits the same way).
    let mut oom = container("sleep 1; tail /dev/zero");
    oom["resources"] = json!({"limits": {"memory": "16Mi"}});
    create_and_bind(
        &api,
        "oom",
        json!({"restartPolicy": "Never", "containers": [oom]}),
    )
    .await;
    create_and_bind(
        &api,
        "stubborn",
        json!({"terminationGracePeriodSeconds": 3,
               "containers": [container("trap '' TERM; while true; do sleep 1; done")]}),
    )
    .await;
    create_and_bind(
        &api,
        "steady",
        json!({"containers": [container("sleep 3600")]}),
    )
    .await;

    let hello = eventually(long, "hello Succeeded", || async {
        get_pod(&api, "hello")
            .await
            .filter(|p| phase(p) == Some(PodPhase::Succeeded))
    })
    .await;
    let t = terminated(&hello).expect("terminated");
    assert_eq!((t.exit_code, t.reason.as_str()), (0, "Completed"));
    assert!(t.container_id.starts_with("containerd://"));
    let image_id = &hello.status.as_ref().expect("status").container_statuses[0].image_id;
    assert!(
        image_id.contains("sha256:"),
        "imageID names the image by digest, as containerd reports it: {image_id:?}"
    );
    let uid = &hello.metadata.uid;
    let log_path = cluster
        .dir
        .path()
        .join("pods")
        .join(format!("default_hello_{uid}"))
        .join("main/0.log");
    let log = std::fs::read_to_string(&log_path).expect("container log");
    assert!(
        log.lines()
            .any(|l| l.ends_with(" stdout F hello from skiff")),
        "{log}"
    );

    let out = Command::new(skiff_bin())
        .args([
            "node",
            "logs",
            "hello",
            "--endpoints",
            &cluster.endpoints().join(","),
        ])
        .output()
        .expect("skiff node logs");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello from skiff\n");

    let crash = eventually(long, "crash restarted twice", || async {
        get_pod(&api, "crash").await.filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.first())
                .is_some_and(|c| c.restart_count >= 2)
        })
    })
    .await;
    assert_eq!(phase(&crash), Some(PodPhase::Running));
    let last = crash.status.as_ref().expect("status").container_statuses[0]
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .expect("last state");
    assert_eq!(last.exit_code, 1);
    let out = Command::new(skiff_bin())
        .args(["node", "logs", "crash", "--previous", "--endpoints"])
        .arg(cluster.endpoints().join(","))
        .output()
        .expect("skiff node logs --previous");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "crashing\n");

    let oomed = eventually(long, "oom Failed", || async {
        get_pod(&api, "oom")
            .await
            .filter(|p| phase(p) == Some(PodPhase::Failed))
    })
    .await;
    let t = terminated(&oomed).expect("terminated");
    assert_eq!(
        (t.exit_code, t.reason.as_str()),
        (137, "OOMKilled"),
        "{t:?}"
    );

    // Adoption: the agent dies and comes back; the steady pod keeps its container.
    let steady = eventually(long, "steady Running", || async {
        get_pod(&api, "steady")
            .await
            .filter(|p| phase(p) == Some(PodPhase::Running))
    })
    .await;
    let id = steady.status.as_ref().expect("status").container_statuses[0]
        .container_id
        .clone();
    agent.kill();
    let _agent = Agent::start(cluster.dir.path(), &cluster.endpoints(), &ctr);
    eventually(long, "stubborn Running", || async {
        get_pod(&api, "stubborn")
            .await
            .filter(|p| phase(p) == Some(PodPhase::Running))
    })
    .await;
    // Give the new agent time to (wrongly) restart it, then check it did not.
    let settle = Instant::now() + Duration::from_secs(5);
    eventually(long, "steady still on its container", || async {
        let p = get_pod(&api, "steady").await?;
        let c = p.status.as_ref()?.container_statuses.first()?.clone();
        assert_eq!(c.container_id, id, "the container was replaced");
        assert_eq!(c.restart_count, 0);
        (Instant::now() > settle).then_some(())
    })
    .await;

    // Graceful delete: SIGTERM is ignored, SIGKILL lands when the 3 s grace ends.
    let begun = Instant::now();
    api.delete(Kind::Pod, "default", "stubborn", 0, None)
        .await
        .expect("delete");
    eventually(long, "stubborn removed", || async {
        get_pod(&api, "stubborn").await.is_none().then_some(())
    })
    .await;
    let took = begun.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(20),
        "stop took {took:?}"
    );
}

/// Bound → Running latency through containerd, printed as p50/p99 for host-network pods and
/// for pods on the pod network (CNI) in the same run (`SKIFF_CRI_LATENCY_PODS=50` of each for
/// the figure, within the node's 110 pods; 10 by default to keep CI short;
/// `SKIFF_CRI_BIND_INTERVAL_MS` paces the binds, 0 binds them all at once). The agent runs
/// as `skiff up` runs it, with the cluster's pod network (`SKIFF_CRI_CLUSTER_CIDR`, empty for
/// none: then the bridge plugin masquerades each pod itself, an iptables chain per sandbox).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_to_running_latency_with_containerd() {
    let _turn = TURN.lock().await;
    use futures::StreamExt;
    use skiff_proto::client::Event;
    let n: usize = std::env::var("SKIFF_CRI_LATENCY_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let pace = Duration::from_millis(
        std::env::var("SKIFF_CRI_BIND_INTERVAL_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    );
    let cluster_cidr =
        std::env::var("SKIFF_CRI_CLUSTER_CIDR").unwrap_or_else(|_| "10.244.0.0/16".into());
    let cluster = Cluster::start(3).await;
    let ctr = Containerd::start(cluster.dir.path());
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let _agent = Agent::start_node(
        cluster.dir.path(),
        &cluster.endpoints(),
        &ctr,
        "c1",
        NodeCommand {
            cluster_cidr: (!cluster_cidr.is_empty()).then_some(cluster_cidr),
            ..NodeCommand::new(RuntimeKind::Cri, vec![])
        },
    );
    eventually(Duration::from_secs(60), "node c1", || async {
        api.get(Kind::Node, "", "c1").await.ok().flatten()
    })
    .await;
    // Host-network pods (`h…`) and pod-network pods (`c…`, through CNI) alternate, so both
    // meet the same load.
    let spec = json!({"terminationGracePeriodSeconds": 0, "containers": [container("sleep 3600")]});
    let names: Vec<String> = (0..n)
        .flat_map(|i| [format!("h{i}"), format!("c{i}")])
        .collect();
    for name in &names {
        let mut p = pod(name, spec.clone());
        if name.starts_with('c')
            && let Object::Pod(p) = &mut p
        {
            p.spec.host_network = None;
        }
        api.create(&p).await.expect("create");
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
                .fields("spec.nodeName=c1")
                .resource_version(rev),
        )
        .await
        .expect("watch"),
    );
    let bound_at = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
    let binder = {
        let (api, bound_at) = (api.clone(), bound_at.clone());
        let names = names.clone();
        tokio::spawn(async move {
            for name in names {
                bound_at
                    .lock()
                    .expect("lock")
                    .insert(name.clone(), Instant::now());
                api.bind(vec![Binding {
                    namespace: "default".into(),
                    pod: name,
                    node: "c1".into(),
                    pod_resource_version: 0,
                }])
                .await
                .expect("bind");
                tokio::time::sleep(pace).await;
            }
        })
    };
    let mut latencies: std::collections::BTreeMap<char, Vec<Duration>> = Default::default();
    let deadline = Instant::now() + Duration::from_secs(300);
    while latencies.values().map(Vec::len).sum::<usize>() < names.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(next) = tokio::time::timeout(left, watch.next()).await else {
            // Say which pods never ran, and why, before failing.
            let mut stuck = Vec::new();
            for name in &names {
                if let Some(p) = get_pod(&api, name).await
                    && phase(&p) != Some(PodPhase::Running)
                {
                    stuck.push(format!("{name}: {:?}", p.status));
                }
            }
            panic!(
                "{} of {} pods Running within 300 s; the others:\n{}",
                latencies.values().map(Vec::len).sum::<usize>(),
                names.len(),
                stuck.join("\n")
            );
        };
        let e = next.expect("watch open").expect("event");
        if let Event::Modified(Object::Pod(p)) = e
            && phase(&p) == Some(PodPhase::Running)
            && let Some(t) = bound_at.lock().expect("lock").remove(&p.metadata.name)
        {
            let class = p.metadata.name.chars().next().unwrap_or('?');
            latencies.entry(class).or_default().push(t.elapsed());
        }
    }
    binder.await.expect("binder");
    for (class, what) in [('h', "hostNetwork"), ('c', "pod network (CNI)")] {
        let mut l = latencies.remove(&class).unwrap_or_default();
        l.sort();
        let q = |f: f64| l[((l.len() as f64 * f) as usize).min(l.len() - 1)];
        eprintln!(
            "bound→Running over {} {what} pods (containerd CRI, binds {pace:?} apart): p50 {:?}, p99 {:?}, max {:?}",
            l.len(),
            q(0.50),
            q(0.99),
            l[l.len() - 1]
        );
    }
}

/// A pod on the pod network (no `hostNetwork`), bound to c1.
async fn create_and_bind_networked(api: &ClusterClient, name: &str, spec: serde_json::Value) {
    let pod = Object::from_json(
        Kind::Pod,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "default"}, "spec": spec})
        .to_string()
        .as_bytes(),
    )
    .expect("test pod decodes");
    api.create(&pod).await.expect("create");
    bind_to_c1(api, name).await;
}

/// How many pods the address churn creates and deletes, 100 at a time (`SKIFF_CNI_CHURN`;
/// 500 for the figure, fewer in the default suite).
fn churn_pods() -> usize {
    std::env::var("SKIFF_CNI_CHURN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40)
}

/// A pod whose network cannot be made (a broken CNI configuration put before the agent's:
/// containerd uses the first) reports `FailedCreatePodSandBox` naming the cause, retried with
/// a doubling back-off and folded into one event whose count grows, though each try names a
/// new sandbox; once the configuration is fixed, the pod runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_without_a_network_reports_one_folded_event_and_runs_once_it_has_one() {
    let _turn = TURN.lock().await;
    let cluster = Cluster::start(3).await;
    let ctr = Containerd::start(cluster.dir.path());
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let _agent = Agent::start(cluster.dir.path(), &cluster.endpoints(), &ctr);
    node_c1_ready(&api).await;
    let (conf_dir, _) = ctr.inner().cni_dirs();
    eventually(
        Duration::from_secs(30),
        "the agent's CNI configuration",
        || async {
            conf_dir
                .join(skiff_node::cni::CONF_FILE)
                .exists()
                .then_some(())
        },
    )
    .await;
    let broken = conf_dir.join("00-broken.conflist");
    std::fs::write(
        &broken,
        r#"{"cniVersion": "1.0.0", "name": "broken", "plugins": [{"type": "skiff-no-such-plugin"}]}"#,
    )
    .expect("broken configuration");
    create_and_bind_networked(
        &api,
        "offline",
        json!({"containers": [container("sleep 3600")]}),
    )
    .await;
    let events = |min: i32| {
        let api = api.clone();
        async move {
            let (events, _) = api
                .list(
                    Kind::Event,
                    &ListParams::default()
                        .fields("involvedObject.kind=Pod,involvedObject.name=offline"),
                )
                .await
                .ok()?;
            let failed: Vec<skiff_proto::api::Event> = events
                .into_iter()
                .filter_map(|o| match o {
                    Object::Event(e) if e.reason == "FailedCreatePodSandBox" => Some(e),
                    _ => None,
                })
                .collect();
            let count = failed.iter().map(|e| e.count.unwrap_or(1)).sum::<i32>();
            (count >= min).then_some(failed)
        }
    };
    // Tries at 0, 2 and 6 s: three failures, one event.
    let failed = eventually(Duration::from_secs(60), "3 failed sandboxes", || events(3)).await;
    assert_eq!(failed.len(), 1, "one event, folded: {failed:#?}");
    assert_eq!(failed[0].type_, "Warning");
    assert!(
        failed[0].message.contains("skiff-no-such-plugin"),
        "the message names the cause: {}",
        failed[0].message
    );
    let pod = get_pod(&api, "offline").await.expect("pod");
    assert_eq!(phase(&pod), Some(PodPhase::Pending));

    std::fs::remove_file(&broken).expect("fix the configuration");
    let pod = eventually(Duration::from_secs(60), "offline Running", || async {
        get_pod(&api, "offline")
            .await
            .filter(|p| phase(p) == Some(PodPhase::Running))
    })
    .await;
    let ip = pod.status.map(|s| s.pod_ip).unwrap_or_default();
    assert!(ip.starts_with("10.244."), "{ip}");
    // Still one event: the retries folded into it, none after the pod ran.
    let failed = events(3).await.expect("events");
    assert_eq!(failed.len(), 1, "{failed:#?}");
}

/// Pods without `hostNetwork` get an address from their node's pod CIDR through CNI (the
/// agent writes the configuration, containerd calls bridge and host-local in its own network
/// namespace): a server pod passes an HTTP readiness probe made there, a client pod fetches
/// a page from it by its address and through its `hostPort` on the node, and pods created
/// and deleted leave no address leased.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_get_addresses_from_their_node_and_reach_each_other() {
    let _turn = TURN.lock().await;
    let cluster = Cluster::start(3).await;
    let ctr = Containerd::start(cluster.dir.path());
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let _agent = Agent::start(cluster.dir.path(), &cluster.endpoints(), &ctr);
    let long = Duration::from_secs(60);
    let node = node_c1_ready(&api).await;
    let cidr = node.spec.pod_cidr.clone();
    let prefix = cidr
        .rsplit_once(".0/24")
        .map(|(p, _)| format!("{p}."))
        .unwrap_or_else(|| panic!("a /24 pod CIDR: {cidr:?}"));
    // The node's address on its pods' bridge (the block's first).
    let gateway = format!("{prefix}1");

    let mut server = container(
        "mkdir -p /www && echo served-by-server > /www/index.html && exec httpd -f -p 8080 -h /www",
    );
    server["readinessProbe"] = json!({"httpGet": {"path": "/index.html", "port": 8080},
                                      "periodSeconds": 1});
    server["ports"] = json!([{"containerPort": 8080, "hostPort": 18080}]);
    create_and_bind_networked(&api, "server", json!({"containers": [server]})).await;
    let server = eventually(long, "server Ready with an address", || async {
        get_pod(&api, "server").await.filter(|p| {
            p.status.as_ref().is_some_and(|s| {
                !s.pod_ip.is_empty()
                    && s.conditions.iter().any(|c| {
                        c.type_ == skiff_proto::api::PodConditionType::Ready
                            && c.status == skiff_proto::api::ConditionStatus::True
                    })
            })
        })
    })
    .await;
    let ip = server
        .status
        .as_ref()
        .map(|s| s.pod_ip.clone())
        .unwrap_or_default();
    assert!(ip.starts_with(&prefix), "{ip} in {cidr}");

    create_and_bind_networked(
        &api,
        "client",
        json!({"restartPolicy": "Never",
        "containers": [container(&format!(
            "wget -qO- http://{ip}:8080/index.html && wget -qO- http://{gateway}:18080/index.html"
        ))]}),
    )
    .await;
    let client = eventually(long, "client Succeeded", || async {
        get_pod(&api, "client")
            .await
            .filter(|p| matches!(phase(p), Some(PodPhase::Succeeded | PodPhase::Failed)))
    })
    .await;
    let uid = &client.metadata.uid;
    let log = std::fs::read_to_string(
        cluster
            .dir
            .path()
            .join("pods")
            .join(format!("default_client_{uid}"))
            .join("main/0.log"),
    )
    .unwrap_or_default();
    assert_eq!(phase(&client), Some(PodPhase::Succeeded), "{log}");
    // By its address, and through its node's hostPort.
    assert_eq!(log.matches("served-by-server").count(), 2, "{log}");
    let client_ip = client
        .status
        .as_ref()
        .map(|s| s.pod_ip.clone())
        .unwrap_or_default();
    assert!(
        client_ip.starts_with(&prefix) && client_ip != ip,
        "{client_ip}"
    );

    // Pods made and deleted, in rounds the node has room for (it takes 110): their
    // sandboxes' addresses are given back.
    let n = churn_pods();
    let mut made = 0;
    while made < n {
        let round: Vec<String> = (made..n.min(made + 100))
            .map(|i| format!("churn-{i}"))
            .collect();
        made += round.len();
        for name in &round {
            create_and_bind_networked(
                &api,
                name,
                json!({"terminationGracePeriodSeconds": 0,
                       "containers": [container("sleep 3600")]}),
            )
            .await;
        }
        eventually(Duration::from_secs(120), "a round of churn pods Running", || async {
            let (pods, _) = api.list(Kind::Pod, &ListParams::default()).await.ok()?;
            let running = pods
                .iter()
                .filter(|o| matches!(o, Object::Pod(p) if round.contains(&p.metadata.name) && phase(p) == Some(PodPhase::Running)))
                .count();
            (running == round.len()).then_some(())
        })
        .await;
        for name in &round {
            api.delete(Kind::Pod, "default", name, 0, Some(0))
                .await
                .expect("delete");
        }
        eventually(
            Duration::from_secs(120),
            "the round's pods gone",
            || async {
                let (pods, _) = api.list(Kind::Pod, &ListParams::default()).await.ok()?;
                let left = pods
                    .iter()
                    .filter(|o| round.contains(&o.metadata().name))
                    .count();
                (left == 0).then_some(())
            },
        )
        .await;
    }
    api.delete(Kind::Pod, "default", "client", 0, Some(0))
        .await
        .expect("delete");
    let (_, ipam) = ctr.inner().cni_dirs();
    let leases = eventually(
        Duration::from_secs(120),
        "only the server's address leased",
        || async {
            let (pods, _) = api.list(Kind::Pod, &ListParams::default()).await.ok()?;
            let leases = skiff_node::cni::leases(&ipam).ok()?;
            (pods.len() == 1 && leases.len() == 1).then_some(leases)
        },
    )
    .await;
    assert_eq!(leases, vec![ip]);
}

/// The log of `pod`'s container `main` (its first run).
fn container_log(cluster: &Cluster, pod: &Pod) -> String {
    std::fs::read_to_string(
        cluster
            .dir
            .path()
            .join("pods")
            .join(format!(
                "default_{}_{}",
                pod.metadata.name, pod.metadata.uid
            ))
            .join("main/0.log"),
    )
    .unwrap_or_default()
}

/// Runs a client pod on `node` that makes `requests` HTTP requests to `url` and returns what
/// each answered.
async fn ask(
    cluster: &Cluster,
    api: &ClusterClient,
    (name, node): (&str, &str),
    url: &str,
    requests: usize,
) -> Vec<String> {
    let pod = Object::from_json(
        Kind::Pod,
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"restartPolicy": "Never", "containers": [container(&format!(
            "for i in $(seq {requests}); do wget -qO- {url} || echo failed; done"
        ))]}})
        .to_string()
        .as_bytes(),
    )
    .expect("client pod");
    api.create(&pod).await.expect("create");
    bind(api, name, node).await;
    let pod = eventually(Duration::from_secs(60), &format!("{name} done"), || async {
        get_pod(api, name)
            .await
            .filter(|p| matches!(phase(p), Some(PodPhase::Succeeded | PodPhase::Failed)))
    })
    .await;
    container_log(cluster, &pod)
        .lines()
        .filter_map(|l| l.split(" stdout F ").nth(1).map(str::to_owned))
        .collect()
}

async fn bind(api: &ClusterClient, pod: &str, node: &str) {
    api.bind(vec![Binding {
        namespace: "default".into(),
        pod: pod.into(),
        node: node.into(),
        pod_resource_version: 0,
    }])
    .await
    .expect("bind");
}

/// An HTTP server pod `echo-<i>` on `node`: `/` answers its name, `/cgi-bin/ip` the address
/// the request came from.
async fn echo_server(api: &ClusterClient, i: usize, node: &str) {
    let mut server = container(&format!(
        "mkdir -p /www/cgi-bin && echo echo-{i} > /www/index.html && \
         printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\necho $REMOTE_ADDR\\n' > /www/cgi-bin/ip && \
         chmod +x /www/cgi-bin/ip && exec httpd -f -p 8080 -h /www"
    ));
    server["readinessProbe"] = json!({"httpGet": {"path": "/index.html", "port": 8080},
                                      "periodSeconds": 1});
    let pod = Object::from_json(
        Kind::Pod,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": format!("echo-{i}"), "namespace": "default",
                            "labels": {"app": "echo"}},
               "spec": {"terminationGracePeriodSeconds": 0, "containers": [server]}})
        .to_string()
        .as_bytes(),
    )
    .expect("pod");
    api.create(&pod).await.expect("create");
    bind(api, &format!("echo-{i}"), node).await;
}

/// Two real nodes, each a containerd in a network namespace of its own joined to one link
/// (`skiff_launch::NodeNetwork`, as `skiff up --runtime cri --nodes 2` runs them): a client
/// pod on one node reaches a server pod on the other by its address (arriving with its own
/// address: pod traffic is routed between nodes, not masqueraded) and by its Service's name
/// through the node's cluster DNS. With three servers on both nodes, a cluster IP's
/// connections go to all of them at random, a node port on the other node's address reaches
/// them too, and once a server pod is deleted and its endpoint removed, no request goes to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_and_services_reach_across_two_nodes() {
    let _turn = TURN.lock().await;
    let cluster = Cluster::start(3).await;
    let dir = cluster.dir.path();
    let link = skiff_launch::NodeNetwork::start(&dir.join("node-network.log")).expect("the link");
    let mut agents = Vec::new();
    let mut containerds = Vec::new();
    for (i, name) in ["c1", "c2"].into_iter().enumerate() {
        let ctr = Containerd::start_in(&dir.join(name));
        let address = link.attach(&ctr.inner().netns(), i).expect("attach");
        let extra = NodeCommand {
            host_ip: Some(address.to_string()),
            cluster_cidr: Some("10.244.0.0/16".into()),
            ..NodeCommand::new(RuntimeKind::Cri, vec![])
        };
        agents.push(Agent::start_node(
            dir,
            &cluster.endpoints(),
            &ctr,
            name,
            extra,
        ));
        containerds.push(ctr);
    }
    let api = ClusterClient::connect(&cluster.endpoints()).expect("client");
    let manager = skiff_launch::ControllerManagerCommand {
        endpoints: cluster.endpoints(),
        lease_ttl: Some(Duration::from_secs(2)),
        log: Some("info".into()),
        ..skiff_launch::ControllerManagerCommand::default()
    };
    let _manager = Launch::new(
        "controller manager",
        skiff_bin(),
        dir.join("controller-manager.log"),
    )
    .args(manager.args())
    .spawn()
    .expect("spawn skiff controller-manager")
    .tail_on_panic(40);
    let long = Duration::from_secs(60);
    for name in ["c1", "c2"] {
        eventually(long, &format!("node {name} Ready"), || async {
            match api.get(Kind::Node, "", name).await.ok()? {
                Some(Object::Node(n)) if n.is_ready() => Some(()),
                _ => None,
            }
        })
        .await;
    }

    echo_server(&api, 0, "c1").await;
    let service = Object::from_json(
        Kind::Service,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "echo", "namespace": "default"},
               "spec": {"type": "NodePort", "selector": {"app": "echo"},
                        "ports": [{"port": 80, "targetPort": 8080}]}})
        .to_string()
        .as_bytes(),
    )
    .expect("service");
    let Object::Service(svc) = api.create(&service).await.expect("service") else {
        panic!("not a service")
    };
    let ready = |n: usize| {
        let api = api.clone();
        async move {
            let (slices, _) = api
                .list(
                    Kind::EndpointSlice,
                    &ListParams::default().labels("kubernetes.io/service-name=echo"),
                )
                .await
                .ok()?;
            let count: usize = slices
                .iter()
                .filter_map(|s| match s {
                    Object::EndpointSlice(s) => Some(s),
                    _ => None,
                })
                .flat_map(|s| &s.endpoints)
                .filter(|e| e.conditions.ready == Some(true))
                .count();
            (count == n).then_some(())
        }
    };
    eventually(long, "1 ready endpoint", || ready(1)).await;
    let server_ip = get_pod(&api, "echo-0")
        .await
        .and_then(|p| p.status.map(|s| s.pod_ip))
        .unwrap_or_default();

    // From node c2: by the server's address (the server sees the client's own address), and
    // by the Service's name.
    let across = ask(
        &cluster,
        &api,
        ("ask-ip", "c2"),
        &format!("http://{server_ip}:8080/index.html http://{server_ip}:8080/cgi-bin/ip"),
        1,
    )
    .await;
    let client = get_pod(&api, "ask-ip").await.expect("ask-ip");
    let client_ip = client.status.map(|s| s.pod_ip).unwrap_or_default();
    assert_eq!(across.len(), 2, "{across:?}");
    assert_eq!(across[0], "echo-0", "{across:?}");
    assert!(
        across[1].trim_end_matches(']').ends_with(&client_ip),
        "the server saw {:?}, not the client's address {client_ip}",
        across[1]
    );
    let by_name = ask(&cluster, &api, ("ask-dns", "c2"), "http://echo/", 3).await;
    assert_eq!(by_name, ["echo-0"; 3], "{by_name:?}");

    // Three servers on both nodes.
    echo_server(&api, 1, "c2").await;
    echo_server(&api, 2, "c1").await;
    eventually(long, "3 ready endpoints", || ready(3)).await;
    let cluster_ip = &svc.spec.cluster_ip;
    let answers = ask(
        &cluster,
        &api,
        ("ask-1", "c2"),
        &format!("http://{cluster_ip}/"),
        40,
    )
    .await;
    assert_eq!(answers.len(), 40, "{answers:?}");
    for i in 0..3 {
        assert!(
            answers.iter().any(|a| *a == format!("echo-{i}")),
            "echo-{i} never answered: {answers:?}"
        );
    }
    // A node port, on the other node's address.
    let node_port = svc.spec.ports[0].node_port.expect("a node port");
    let c1 = skiff_launch::network::node_ip(0);
    let through_node = ask(
        &cluster,
        &api,
        ("ask-np", "c2"),
        &format!("http://{c1}:{node_port}/"),
        5,
    )
    .await;
    assert!(
        through_node.len() == 5 && through_node.iter().all(|a| a.starts_with("echo-")),
        "{through_node:?}"
    );
    let fqdn = ask(
        &cluster,
        &api,
        ("ask-fqdn", "c1"),
        "http://echo.default.svc.cluster.local/",
        2,
    )
    .await;
    assert!(
        fqdn.len() == 2 && fqdn.iter().all(|a| a.starts_with("echo-")),
        "{fqdn:?}"
    );

    api.delete(Kind::Pod, "default", "echo-0", 0, Some(0))
        .await
        .expect("delete echo-0");
    eventually(long, "2 ready endpoints", || ready(2)).await;
    let answers = ask(
        &cluster,
        &api,
        ("ask-2", "c2"),
        &format!("http://{cluster_ip}/"),
        40,
    )
    .await;
    assert_eq!(answers.len(), 40, "{answers:?}");
    assert!(
        answers.iter().all(|a| a == "echo-1" || a == "echo-2"),
        "{answers:?}"
    );
    drop(agents);
    drop(containerds);
}
