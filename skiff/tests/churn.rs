//! Randomized churn of pods and nodes through real processes: one `skiff store`, one
//! `skiff scheduler` and three `skiff node --runtime sim` agents hosting five small nodes
//! (2 cpu, 2Gi, 8 pods) in three zones. A seeded driver creates pods (with requests, required
//! anti-affinity or DoNotSchedule spread over hostname or zone, a `disk=ssd` node selector, a
//! toleration, `restartPolicy: Never` jobs that exit 0 or 1, servers that ignore SIGTERM),
//! relabels them, labels, relabels and taints nodes, kills agents and restarts them later,
//! deletes pods with random grace periods (sometimes a second, shorter delete) and re-creates
//! deleted pods under the same name.
//!
//! Proved, after every step (on every revision up to the step's write, see `churn/audit.rs`):
//! - no node is over its allocatable cpu, memory or pod count;
//! - every bind satisfies the pod's node selector, the node's NoSchedule taints, required
//!   anti-affinity both ways and DoNotSchedule spread, against the cluster as stored within a
//!   few seconds before the Bind (so later relabels do not count, nor races the scheduler
//!   cannot see);
//! - no pod is bound twice; no `Never` pod's container restarts or starts twice, and a
//!   finished Never pod stays finished.
//!
//! And once the churn stops and every agent is back: every deleted pod is gone (a second,
//! shorter delete cut a long grace short), every Never pod on a node ended Succeeded or Failed
//! as its container's exit code says (the script's own code, or 137 ContainerStatusUnknown
//! when its node died under it), every server runs, and no pod is bound to a missing node.
//!
//! Beside the pods, a controller manager runs three workloads in namespace `work` through the
//! churn: a DaemonSet (its template changed now and then, rolled across the nodes), a
//! StatefulSet (scaled between one and three) and a Job of 6 completions, 2 at a time. On
//! every event of their pods: a node never runs two active pods of the DaemonSet, an ordinal
//! never has two pods of the StatefulSet, and the Job never has more than 2 active pods. Once
//! the churn stops and the churn's pods are gone: the Job completes, the StatefulSet and the
//! DaemonSet have every pod ready on the template they have now.
//!
//! The seed is printed; `SKIFF_CHURN_SEED=<n>` replays the driver's choices (the processes'
//! timing still varies). `SKIFF_CHURN_STEPS` sets the number of steps (120).

#[path = "churn/audit.rs"]
mod audit;
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use audit::{Audit, Intent, MAINTENANCE, Run};
use common::{Cluster, eventually, free_port, skiff_bin};
use serde_json::json;
use skiff_launch::{
    Child, ControllerManagerCommand, Launch, NodeCommand, RuntimeKind, SchedulerCommand,
};
use skiff_proto::api::{Kind, Node, Object, Pod, PodPhase, RestartPolicy};
use skiff_proto::client::{ClusterClient, Code};

/// xorshift64*: the driver's choices, replayable from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// One `skiff node --runtime sim` process and the nodes it hosts (killed by PID when dropped).
struct Agent {
    command: NodeCommand,
    nodes: Vec<String>,
    child: Option<Child>,
    lives: usize,
}

impl Agent {
    fn new(endpoints: &[String], prefix: &str, count: usize, zone: &str) -> Agent {
        // One node is named by `--name`; `--count` names `<prefix><i>`.
        let command = NodeCommand {
            name: (count == 1).then(|| format!("{prefix}-0")),
            count: (count > 1).then_some(count),
            name_prefix: Some(format!("{prefix}-")),
            cpu: Some("2".into()),
            memory: Some("2Gi".into()),
            max_pods: Some(8),
            labels: vec![format!("zone={zone}")],
            heartbeat_interval: Some(Duration::from_secs(1)),
            backoff_initial: Some(Duration::from_secs(1)),
            logs_address: Some("127.0.0.1:0".into()),
            log: Some("info".into()),
            ..NodeCommand::new(RuntimeKind::Sim, endpoints.to_vec())
        };
        let nodes = (0..count).map(|i| format!("{prefix}-{i}")).collect();
        Agent {
            command,
            nodes,
            child: None,
            lives: 0,
        }
    }

    fn start(&mut self, dir: &Path) {
        self.lives += 1;
        let name = self.command.name_prefix.clone().unwrap_or_default();
        let log = dir.join(format!("agent-{name}{}.log", self.lives));
        let child = Launch::new(format!("agent {name}"), skiff_bin(), log)
            .args(self.command.args())
            .spawn()
            .expect("spawn skiff node")
            .tail_on_panic(20);
        self.child = Some(child);
    }

    /// kill -9: its simulated containers die with it.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill();
        }
    }

    fn is_up(&self) -> bool {
        self.child.is_some()
    }
}

fn scheduler(cluster: &Cluster) -> Child {
    let scheduler = SchedulerCommand {
        endpoints: cluster.endpoints(),
        metrics_addr: Some(SocketAddr::from(([127, 0, 0, 1], free_port()))),
        lease_ttl: Some(Duration::from_secs(2)),
        log: Some("info".into()),
        ..SchedulerCommand::default()
    };
    Launch::new(
        "scheduler",
        skiff_bin(),
        cluster.dir.path().join("scheduler.log"),
    )
    .args(scheduler.args())
    .spawn()
    .expect("spawn skiff scheduler")
    .tail_on_panic(20)
}

const APPS: [&str; 3] = ["web", "db", "spread"];
const KEYS: [&str; 2] = ["kubernetes.io/hostname", "zone"];

fn random_intent(rng: &mut Rng) -> Intent {
    let run = match rng.below(10) {
        0..=3 => Run::Job {
            secs: 1 + rng.below(3) as u32,
            exit: i32::from(rng.chance(40)),
        },
        4 => Run::Stubborn,
        _ => Run::Serve,
    };
    Intent {
        milli_cpu: *rng.pick(&[0, 100, 250, 500, 700]),
        memory_mi: *rng.pick(&[0, 64, 256, 512]),
        run,
        anti: rng
            .chance(25)
            .then(|| ("db".to_string(), rng.pick(&KEYS).to_string())),
        spread: rng.chance(25).then(|| {
            (
                "spread".to_string(),
                rng.pick(&KEYS).to_string(),
                1 + i32::from(rng.chance(30)),
            )
        }),
        wants_ssd: rng.chance(20),
        tolerates: rng.chance(30),
    }
}

/// The labels a new pod starts with: what its own terms select, mostly.
fn random_labels(rng: &mut Rng, intent: &Intent) -> BTreeMap<String, String> {
    let app = match (&intent.anti, &intent.spread) {
        (Some((a, _)), _) if rng.chance(70) => a.clone(),
        (_, Some((a, ..))) if rng.chance(80) => a.clone(),
        _ => rng.pick(&APPS).to_string(),
    };
    BTreeMap::from([("app".to_string(), app)])
}

fn manifest(name: &str, labels: &BTreeMap<String, String>, it: &Intent) -> Object {
    let mut requests = serde_json::Map::new();
    if it.milli_cpu > 0 {
        requests.insert("cpu".into(), json!(format!("{}m", it.milli_cpu)));
    }
    if it.memory_mi > 0 {
        requests.insert("memory".into(), json!(format!("{}Mi", it.memory_mi)));
    }
    let mut c = json!({"name": "main", "image": "localhost/skiff/busybox:1",
                       "resources": {"requests": requests}});
    let mut spec = json!({});
    match it.run {
        Run::Serve => {}
        Run::Stubborn => c["command"] = json!(["sh", "-c", "trap '' TERM; sleep infinity"]),
        Run::Job { secs, exit } => {
            c["command"] = json!(["sh", "-c", format!("sleep {secs}; exit {exit}")]);
            spec["restartPolicy"] = json!("Never");
        }
    }
    spec["containers"] = json!([c]);
    if let Some((app, key)) = &it.anti {
        spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}});
    }
    if let Some((app, key, skew)) = &it.spread {
        spec["topologySpreadConstraints"] = json!([{"maxSkew": skew, "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": app}}}]);
    }
    if it.wants_ssd {
        spec["nodeSelector"] = json!({"disk": "ssd"});
    }
    if it.tolerates {
        spec["tolerations"] =
            json!([{"key": MAINTENANCE, "operator": "Exists", "effect": "NoSchedule"}]);
    }
    Object::from_json(
        Kind::Pod,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "default", "labels": labels},
               "spec": spec})
        .to_string()
        .as_bytes(),
    )
    .expect("churn pod decodes")
}

/// Changes an object with `edit` and writes it back; on a conflict (an agent's status write,
/// say) reads it again. Returns the written revision, or None when the object is gone.
async fn edit(
    api: &ClusterClient,
    kind: Kind,
    name: &str,
    edit: impl Fn(&mut Object),
) -> Option<i64> {
    let namespace = if kind == Kind::Pod { "default" } else { "" };
    for _ in 0..20 {
        let mut o = api.get(kind, namespace, name).await.ok()??;
        edit(&mut o);
        match api.update(&o).await {
            Ok(o) => return o.metadata().revision(),
            Err(e) if e.code() == Some(Code::NotFound) => return None,
            Err(_) => continue,
        }
    }
    panic!("{kind:?} {name}: 20 conflicting writes in a row");
}

/// The driver's own record: which pods it made, which it deleted.
#[derive(Default)]
struct Record {
    /// Names that exist (as far as the driver knows: it made them and has not deleted them).
    live: BTreeSet<String>,
    /// Names deleted, with the intent they had (for same-name recreation).
    deleted: BTreeMap<String, Intent>,
    /// Deleted with a long grace, to be cut short by a second delete.
    lingering: BTreeSet<String>,
    made: usize,
    /// Step counts by kind, for the summary.
    did: BTreeMap<&'static str, usize>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_churn_keeps_the_scheduler_and_kubelet_invariants() {
    let seed = std::env::var("SKIFF_CHURN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
        | 1;
    let steps: usize = std::env::var("SKIFF_CHURN_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    eprintln!("churn: seed {seed} (SKIFF_CHURN_SEED={seed} replays it), {steps} steps");
    let mut rng = Rng(seed);
    let begun = Instant::now();

    let cluster = Cluster::start(1).await;
    let endpoints = cluster.endpoints();
    let api = ClusterClient::connect(&endpoints).expect("client");
    let mut audit = Audit::start(&api).await;
    let mut agents = vec![
        Agent::new(&endpoints, "a", 2, "a"),
        Agent::new(&endpoints, "b", 2, "b"),
        Agent::new(&endpoints, "c", 1, "c"),
    ];
    for a in &mut agents {
        a.start(cluster.dir.path());
    }
    let all_nodes: Vec<String> = agents.iter().flat_map(|a| a.nodes.clone()).collect();
    eventually(Duration::from_secs(30), "every node registered", || async {
        let mut ready = 0;
        for n in &all_nodes {
            if let Ok(Some(Object::Node(n))) = api.get(Kind::Node, "", n).await
                && n.is_ready()
            {
                ready += 1;
            }
        }
        (ready == all_nodes.len()).then_some(())
    })
    .await;
    let _scheduler = scheduler(&cluster);
    let _manager = controller_manager(&cluster);
    let workload_violations = start_workloads(&api).await;
    // Nodes that died, and the step each agent comes back at.
    let mut died: BTreeSet<String> = BTreeSet::new();
    let mut back_at: BTreeMap<usize, usize> = BTreeMap::new();
    let mut rec = Record::default();

    for step in 0..steps {
        for (i, at) in back_at.clone() {
            if at <= step {
                agents[i].start(cluster.dir.path());
                back_at.remove(&i);
                eprintln!("step {step}: agent {i} back");
            }
        }
        let written = match rng.below(100) {
            // Create a pod (the most common step, so the cluster fills up).
            0..=34 => {
                let name = format!("p{:03}", rec.made);
                rec.made += 1;
                let intent = random_intent(&mut rng);
                let labels = random_labels(&mut rng, &intent);
                let made = api
                    .create(&manifest(&name, &labels, &intent))
                    .await
                    .expect("create pod");
                audit.intend(&made.metadata().uid, intent);
                rec.live.insert(name);
                *rec.did.entry("create").or_default() += 1;
                made.metadata().revision()
            }
            // Relabel a pod (bound or not, with terms or not).
            35..=46 if !rec.live.is_empty() => {
                let names: Vec<String> = rec.live.iter().cloned().collect();
                let name = rng.pick(&names).clone();
                let app = rng.pick(&APPS).to_string();
                *rec.did.entry("relabel pod").or_default() += 1;
                edit(&api, Kind::Pod, &name, |o| {
                    o.metadata_mut().labels.insert("app".into(), app.clone());
                })
                .await
            }
            // Label a node disk=ssd or take it away; now and then move it to another zone.
            47..=56 => {
                let node = rng.pick(&all_nodes).clone();
                let (ssd, zone) = (
                    rng.chance(50),
                    rng.chance(15)
                        .then(|| rng.pick(&["a", "b", "c"]).to_string()),
                );
                *rec.did.entry("label node").or_default() += 1;
                edit(&api, Kind::Node, &node, |o| {
                    let labels = &mut o.metadata_mut().labels;
                    if ssd {
                        labels.insert("disk".into(), "ssd".into());
                    } else {
                        labels.remove("disk");
                    }
                    if let Some(z) = &zone {
                        labels.insert("zone".into(), z.clone());
                    }
                })
                .await
            }
            // Taint a node for maintenance, or lift the taint.
            57..=63 => {
                let node = rng.pick(&all_nodes).clone();
                let add = rng.chance(50);
                *rec.did.entry("taint node").or_default() += 1;
                edit(&api, Kind::Node, &node, |o| {
                    if let Object::Node(n) = o {
                        taint(n, add);
                    }
                })
                .await
            }
            // Kill an agent: its nodes die with their containers; it comes back later.
            64..=68 if agents.iter().filter(|a| a.is_up()).count() > 1 => {
                let up: Vec<usize> = (0..agents.len()).filter(|i| agents[*i].is_up()).collect();
                let i = *rng.pick(&up);
                agents[i].kill();
                died.extend(agents[i].nodes.iter().cloned());
                back_at.insert(i, step + 3 + rng.below(8));
                eprintln!("step {step}: agent {i} killed ({:?})", agents[i].nodes);
                *rec.did.entry("kill agent").or_default() += 1;
                None
            }
            // Delete a pod with a random grace period; sometimes a long one, cut short later.
            69..=86 if !rec.live.is_empty() => {
                let names: Vec<String> = rec.live.iter().cloned().collect();
                let name = rng.pick(&names).clone();
                let long = rng.chance(30);
                let grace = if long { 120 } else { *rng.pick(&[0, 1, 2, 5]) };
                *rec.did.entry("delete").or_default() += 1;
                let gone = api
                    .delete(Kind::Pod, "default", &name, 0, Some(grace))
                    .await;
                rec.live.remove(&name);
                match gone {
                    Ok(o) => {
                        if let Some(i) = audit.intent(&o.metadata().uid) {
                            rec.deleted.insert(name.clone(), i.clone());
                        }
                        if long {
                            rec.lingering.insert(name);
                        }
                        o.metadata().revision()
                    }
                    Err(e) if e.code() == Some(Code::NotFound) => None,
                    Err(e) => panic!("delete {name}: {e}"),
                }
            }
            // Cut a long grace short with a second delete.
            87..=91 if !rec.lingering.is_empty() => {
                let names: Vec<String> = rec.lingering.iter().cloned().collect();
                let name = rng.pick(&names).clone();
                rec.lingering.remove(&name);
                *rec.did.entry("second delete").or_default() += 1;
                second_delete(&api, &name).await
            }
            // Re-create a deleted pod under its name (once the old one is gone).
            _ if !rec.deleted.is_empty() => {
                let names: Vec<String> = rec.deleted.keys().cloned().collect();
                let name = rng.pick(&names).clone();
                let intent = if rng.chance(50) {
                    rec.deleted[&name].clone()
                } else {
                    random_intent(&mut rng)
                };
                let labels = random_labels(&mut rng, &intent);
                match api.create(&manifest(&name, &labels, &intent)).await {
                    Ok(made) => {
                        audit.intend(&made.metadata().uid, intent);
                        rec.deleted.remove(&name);
                        rec.lingering.remove(&name);
                        rec.live.insert(name);
                        *rec.did.entry("recreate").or_default() += 1;
                        made.metadata().revision()
                    }
                    // Still terminating.
                    Err(e) if e.code() == Some(Code::AlreadyExists) => None,
                    Err(e) => panic!("re-create {name}: {e}"),
                }
            }
            _ => None,
        };
        // Now and then, a workload changes: the StatefulSet scales, the DaemonSet rolls.
        if rng.chance(8) {
            let replicas = 1 + rng.below(3);
            edit_workload(&api, "StatefulSet", "db", |o| {
                o["spec"]["replicas"] = json!(replicas);
            })
            .await;
            *rec.did.entry("scale stateful set").or_default() += 1;
        } else if rng.chance(4) {
            let generation = rec.did.get("roll daemon set").copied().unwrap_or(0) + 1;
            edit_workload(&api, "DaemonSet", "agent", |o| {
                o["spec"]["template"]["metadata"]["annotations"] =
                    json!({"churn/generation": generation.to_string()});
            })
            .await;
            *rec.did.entry("roll daemon set").or_default() += 1;
        }
        {
            let v = workload_violations.lock().expect("lock");
            assert!(v.is_empty(), "seed {seed}, step {step}: {v:#?}");
        }
        // Check every revision up to this step's write (the next steps follow at the pace the
        // watches deliver it: about one heartbeat).
        match written {
            Some(rev) => audit.reach(rev).await,
            None => audit.catch_up(),
        }
        assert!(
            audit.failures.is_empty(),
            "seed {seed}, step {step}: {:#?}",
            audit.failures
        );
    }
    eprintln!(
        "churn: {steps} steps in {:?}: {:?}; {} binds checked",
        begun.elapsed(),
        rec.did,
        audit.binds_checked
    );

    // Settle: every agent back, every long grace cut short, then everything done.
    for (i, _) in std::mem::take(&mut back_at) {
        agents[i].start(cluster.dir.path());
    }
    for name in std::mem::take(&mut rec.lingering) {
        second_delete(&api, &name).await;
    }
    let settled = Instant::now();
    let deadline = settled + Duration::from_secs(60);
    let pods = loop {
        let (all, rev) = api
            .list(
                Kind::Pod,
                &skiff_proto::client::ListParams::default().namespace("default"),
            )
            .await
            .expect("list pods");
        let pods: Vec<Pod> = all
            .into_iter()
            .filter_map(|o| match o {
                Object::Pod(p) => Some(p),
                _ => None,
            })
            .collect();
        let busy: Vec<&Pod> = pods
            .iter()
            .filter(|p| {
                let bound = !p.spec.node_name.is_empty();
                p.metadata.deletion_timestamp.is_some()
                    || (bound && p.phase() == Some(PodPhase::Pending))
                    || (bound
                        && p.spec.restart_policy == Some(RestartPolicy::Never)
                        && p.phase() == Some(PodPhase::Running))
            })
            .collect();
        if busy.is_empty() {
            break (pods, rev);
        }
        assert!(
            Instant::now() < deadline,
            "seed {seed}: not settled after 60 s: {:#?}",
            busy.iter()
                .map(|p| (&p.metadata.name, &p.spec.node_name, &p.metadata, &p.status))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("churn: settled in {:?}", settled.elapsed());
    let (pods, rev) = pods;
    audit.reach(rev).await;
    let nodes = audit.nodes();
    for p in &pods {
        let name = &p.metadata.name;
        let Some(intent) = audit.intent(&p.metadata.uid).cloned() else {
            panic!("pod {name} was not made by the test");
        };
        if p.spec.node_name.is_empty() {
            continue;
        }
        assert!(
            nodes.contains_key(&p.spec.node_name),
            "pod {name} bound to {}, which does not exist",
            p.spec.node_name
        );
        let status = p.status.clone().unwrap_or_default();
        let phase = p.phase();
        let rejected = !status.reason.is_empty()
            && status.container_statuses.iter().all(|c| {
                c.state
                    .as_ref()
                    .is_none_or(|s| s.terminated.is_none() && s.running.is_none())
            });
        if rejected {
            // Admission refused it (a label or taint changed after the scheduler's decision).
            assert_eq!(phase, Some(PodPhase::Failed), "{name}: {status:?}");
            continue;
        }
        match intent.exit() {
            Some(exit) => {
                let ends: Vec<(i32, String)> = status
                    .container_statuses
                    .iter()
                    .filter_map(|c| c.state.as_ref()?.terminated.as_ref())
                    .map(|t| (t.exit_code, t.reason.clone()))
                    .collect();
                assert_eq!(
                    ends.len(),
                    1,
                    "Never pod {name} has one ended container: {status:?}"
                );
                let (code, reason) = &ends[0];
                let lost = *code == 137
                    && reason == "ContainerStatusUnknown"
                    && died.contains(&p.spec.node_name);
                assert!(
                    *code == exit || lost,
                    "seed {seed}: Never pod {name} on {} exited {code} ({reason}), its script \
                     exits {exit}: {status:?}",
                    p.spec.node_name
                );
                let want = if *code == 0 {
                    PodPhase::Succeeded
                } else {
                    PodPhase::Failed
                };
                assert_eq!(
                    phase,
                    Some(want),
                    "seed {seed}: Never pod {name}: {status:?}"
                );
            }
            None => assert_eq!(
                phase,
                Some(PodPhase::Running),
                "seed {seed}: pod {name} on {}: {status:?}",
                p.spec.node_name
            ),
        }
    }
    audit.finish();
    assert!(
        audit.failures.is_empty(),
        "seed {seed}, after settling: {:#?}",
        audit.failures
    );
    let bound = pods.iter().filter(|p| !p.spec.node_name.is_empty()).count();
    // The workloads finish once the churn's pods make room, and once the maintenance is
    // over: the DaemonSet does not tolerate the taint, so a churn that left every node
    // tainted leaves it nowhere to run.
    for p in &pods {
        let _ = api
            .delete(Kind::Pod, "default", &p.metadata.name, 0, Some(0))
            .await;
    }
    for node in &all_nodes {
        edit(&api, Kind::Node, node, |o| {
            if let Object::Node(n) = o {
                taint(n, false);
            }
        })
        .await;
    }
    settle_workloads(&api, seed).await;
    let v = workload_violations.lock().expect("lock").clone();
    assert!(v.is_empty(), "seed {seed}, after settling: {v:#?}");
    eprintln!(
        "churn: seed {seed} passed in {:?}: {} pods left ({bound} bound), {} binds checked",
        begun.elapsed(),
        pods.len(),
        audit.binds_checked
    );
}

/// The controller manager; its node lifecycle is slow enough never to act within the churn
/// (the agents' deaths are the test's to make, and short).
fn controller_manager(cluster: &Cluster) -> Child {
    let cm = ControllerManagerCommand {
        endpoints: cluster.endpoints(),
        lease_ttl: Some(Duration::from_secs(2)),
        node_monitor_grace_period: Some(Duration::from_secs(600)),
        log: Some("info".into()),
        ..ControllerManagerCommand::default()
    };
    Launch::new(
        "controller manager",
        skiff_bin(),
        cluster.dir.path().join("controller-manager.log"),
    )
    .args(cm.args())
    .spawn()
    .expect("spawn skiff controller-manager")
    .tail_on_panic(20)
}

const WORK: &str = "work";

fn workload_kind(name: &str) -> Kind {
    Kind::from_name(name).expect("a declared kind")
}

/// Makes namespace `work` and its DaemonSet, StatefulSet and Job, and follows their pods,
/// checking on every event what each workload must never do; the violations found.
async fn start_workloads(api: &ClusterClient) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    let make = |kind: &str, v: serde_json::Value| {
        Object::from_json(workload_kind(kind), v.to_string().as_bytes()).expect("decodes")
    };
    let container = |script: &str| {
        json!([{"name": "c", "image": "localhost/skiff/busybox:1",
                "command": ["sh", "-c", script]}])
    };
    api.create(
        &Object::from_json(
            Kind::Namespace,
            json!({"metadata": {"name": WORK}}).to_string().as_bytes(),
        )
        .expect("namespace"),
    )
    .await
    .expect("namespace work");
    for o in [
        make(
            "DaemonSet",
            json!({"metadata": {"name": "agent", "namespace": WORK},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "template": {"metadata": {"labels": {"app": "agent"}},
                                  "spec": {"containers": container("sleep infinity")}}}}),
        ),
        make(
            "StatefulSet",
            json!({"metadata": {"name": "db", "namespace": WORK},
            "spec": {"replicas": 2, "serviceName": "db",
                     "selector": {"matchLabels": {"app": "db"}},
                     "template": {"metadata": {"labels": {"app": "db"}},
                                  "spec": {"containers": container("sleep infinity")}}}}),
        ),
        make(
            "Job",
            json!({"metadata": {"name": "batch", "namespace": WORK},
            "spec": {"completions": 6, "parallelism": 2, "backoffLimit": 1000,
                     "template": {"spec": {"restartPolicy": "Never",
                                           "containers": container("sleep 1; exit 0")}}}}),
        ),
    ] {
        api.create(&o).await.expect("workload");
    }
    let violations = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let found = violations.clone();
    let api = api.clone();
    tokio::spawn(async move {
        use futures::StreamExt as _;
        use skiff_proto::client::{Event, ListParams};
        let params = ListParams::default().namespace(WORK);
        let mut stream = Box::pin(
            api.watch(Kind::Pod, &params.watch_after(0))
                .await
                .expect("watch work pods"),
        );
        let mut pods: BTreeMap<String, Pod> = BTreeMap::new();
        // Each pod's last events, told with a violation that names it.
        let mut history: BTreeMap<String, Vec<String>> = BTreeMap::new();
        while let Some(Ok(e)) = stream.next().await {
            let (what, p) = match e {
                Event::Added(Object::Pod(p)) => ("added", p),
                Event::Modified(Object::Pod(p)) => ("modified", p),
                Event::Deleted(Object::Pod(p)) => ("deleted", p),
                _ => continue,
            };
            let seen = history.entry(p.metadata.name.clone()).or_default();
            seen.push(format!(
                "{what} at {} on {:?}: {:?}{}",
                p.metadata.resource_version,
                p.spec.node_name,
                p.phase(),
                if p.metadata.deletion_timestamp.is_some() {
                    ", deleting"
                } else {
                    ""
                }
            ));
            if seen.len() > 12 {
                seen.remove(0);
            }
            if what == "deleted" {
                pods.remove(&p.metadata.name);
            } else {
                pods.insert(p.metadata.name.clone(), p);
            }
            let found_now = workload_rules(&pods);
            if !found_now.is_empty() {
                let told: Vec<String> = found_now
                    .into_iter()
                    .map(|v| {
                        let named = history
                            .iter()
                            .filter(|(name, _)| v.contains(&format!("{name:?}")))
                            .map(|(name, h)| format!("\n    {name}: {}", h.join("; ")));
                        format!("{v}{}", named.collect::<String>())
                    })
                    .collect();
                found.lock().expect("lock").extend(told);
            }
        }
    });
    violations
}

/// What the workloads' pods must never show at once.
fn workload_rules(pods: &BTreeMap<String, Pod>) -> Vec<String> {
    let active = |p: &&Pod| !p.is_terminal() && p.metadata.deletion_timestamp.is_none();
    let owned_by = |p: &Pod, kind: &str, name: &str| {
        p.metadata
            .owner_references
            .iter()
            .any(|r| r.controller == Some(true) && r.kind == kind && r.name == name)
    };
    let mut out = Vec::new();
    let mut per_node: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for p in pods.values().filter(active) {
        if owned_by(p, "DaemonSet", "agent") && !p.spec.node_name.is_empty() {
            per_node
                .entry(&p.spec.node_name)
                .or_default()
                .push(&p.metadata.name);
        }
    }
    for (node, names) in per_node.iter().filter(|(_, n)| n.len() > 1) {
        out.push(format!(
            "node {node} runs two of the DaemonSet's pods: {names:?}"
        ));
    }
    let mut ordinals: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for p in pods.values().filter(|p| owned_by(p, "StatefulSet", "db")) {
        if let Some(i) = p.metadata.labels.get("apps.kubernetes.io/pod-index") {
            ordinals.entry(i).or_default().push(&p.metadata.name);
        }
    }
    for (i, names) in ordinals.iter().filter(|(_, n)| n.len() > 1) {
        out.push(format!(
            "ordinal {i} of the StatefulSet has two pods: {names:?}"
        ));
    }
    let running = pods
        .values()
        .filter(active)
        .filter(|p| owned_by(p, "Job", "batch"))
        .count();
    if running > 2 {
        out.push(format!(
            "the Job has {running} active pods, its parallelism is 2"
        ));
    }
    out
}

/// Edits workload `kind` `name` in `work` until the write lands.
async fn edit_workload(
    api: &ClusterClient,
    kind: &str,
    name: &str,
    edit: impl Fn(&mut serde_json::Value),
) {
    let kind = workload_kind(kind);
    for _ in 0..20 {
        let Ok(Some(o)) = api.get(kind, WORK, name).await else {
            continue;
        };
        let mut v = o.to_json_value();
        edit(&mut v);
        let next = Object::from_json(kind, v.to_string().as_bytes()).expect("decodes");
        if api.update(&next).await.is_ok() {
            return;
        }
    }
    panic!("{name}: 20 failed writes in a row");
}

/// Once the cluster has room: the Job completes, every StatefulSet and DaemonSet pod is ready
/// on the current template.
async fn settle_workloads(api: &ClusterClient, seed: u64) {
    let status = |kind: &'static str, name: &'static str| {
        let api = api.clone();
        async move {
            match api.get(workload_kind(kind), WORK, name).await {
                Ok(Some(o)) => Some(o.to_json_value()),
                _ => None,
            }
        }
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let job = status("Job", "batch").await.unwrap_or_default();
        let sts = status("StatefulSet", "db").await.unwrap_or_default();
        let ds = status("DaemonSet", "agent").await.unwrap_or_default();
        let complete = job["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Complete" && c["status"] == "True")
        });
        let sts_done = sts["status"]["readyReplicas"] == sts["spec"]["replicas"]
            && sts["status"]["updatedReplicas"] == sts["spec"]["replicas"];
        let want = &ds["status"]["desiredNumberScheduled"];
        let ds_done = want.as_i64().is_some_and(|n| n > 0)
            && ds["status"]["numberReady"] == *want
            && ds["status"]["updatedNumberScheduled"] == *want;
        if complete && sts_done && ds_done {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "seed {seed}: workloads not settled after 90 s: job {}, statefulset {}, daemonset {}",
            job["status"],
            sts["status"],
            ds["status"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Adds the maintenance taint (`add`) or lifts it.
fn taint(n: &mut Node, add: bool) {
    n.spec.taints.retain(|t| t.key != MAINTENANCE);
    if add {
        n.spec.taints.push(
            serde_json::from_value(json!({"key": MAINTENANCE, "effect": "NoSchedule"}))
                .expect("taint"),
        );
    }
}

/// A second delete with a 1 s grace: the agent must stop the pod within it, not the first.
async fn second_delete(api: &ClusterClient, name: &str) -> Option<i64> {
    match api.delete(Kind::Pod, "default", name, 0, Some(1)).await {
        Ok(o) => o.metadata().revision(),
        Err(e) if e.code() == Some(Code::NotFound) => None,
        Err(e) => panic!("second delete of {name}: {e}"),
    }
}
