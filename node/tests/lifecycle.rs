//! Every transition of the pod worker, driven end to end (engine + worker loop + simulated
//! runtime) on tokio's paused clock, with statuses captured where the cluster API would
//! receive them. Each test's doc comment states the property it proves.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use skiff_node::engine::{Adopted, EngineConfig, Rejection};
use skiff_node::metrics::AgentMetrics;
use skiff_node::runtime::{ContainerState, Runtime};
use skiff_node::sim::{SimConfig, SimRuntime};
use skiff_node::status::{StatusSink, StatusWriter, Written};
use skiff_node::volumes::Volumes;
use skiff_node::worker::{self, WorkerContext, WorkerHandle};
use skiff_proto::api::pod::ContainerStatus;
use skiff_proto::api::{
    ConditionStatus, Kind, Object, Pod, PodConditionType, PodPhase, PodStatus, Time,
};
use skiff_proto::client::ClientError;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Default)]
struct Recorder {
    log: Mutex<Vec<(Instant, PodStatus)>>,
}

#[async_trait]
impl StatusSink for Recorder {
    async fn write(&self, object: &Object) -> Result<Written, ClientError> {
        let Object::Pod(pod) = object else {
            panic!("not a pod's status: {object:?}")
        };
        self.log
            .lock()
            .expect("recorder lock")
            .push((Instant::now(), pod.status.clone().unwrap_or_default()));
        Ok(Written::Stored)
    }
}

struct Harness {
    /// The volumes' root, removed with the harness.
    _root: tempfile::TempDir,
    rt: SimRuntime,
    rec: Arc<Recorder>,
    ctx: Arc<WorkerContext>,
    cancel: CancellationToken,
    t0: Instant,
}

fn harness() -> Harness {
    let rt = SimRuntime::new(SimConfig {
        sandbox_latency: Duration::ZERO,
        start_latency: Duration::ZERO,
    });
    let rec = Arc::new(Recorder::default());
    let cancel = CancellationToken::new();
    let status = StatusWriter::start(rec.clone(), 1, cancel.clone());
    let root = tempfile::tempdir().expect("a temporary directory");
    let ctx = Arc::new(WorkerContext {
        runtime: Arc::new(rt.clone()),
        status,
        client: None,
        node: "n1".into(),
        host_ip: "192.0.2.10".into(),
        pod_cidr: String::new(),
        cluster_dns: None,
        engine: EngineConfig::default(),
        events: None,
        metrics: AgentMetrics::default(),
        volumes: Volumes::new(
            root.path().to_owned(),
            None,
            false,
            skiff_node::volumes::DEFAULT_RESYNC,
            Default::default(),
        ),
        services: None,
    });
    Harness {
        _root: root,
        rt,
        rec,
        ctx,
        cancel,
        t0: Instant::now(),
    }
}

fn pod(name: &str, spec: serde_json::Value) -> Pod {
    let o = Object::from_json(
        Kind::Pod,
        json!({"metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
               "spec": spec})
        .to_string()
        .as_bytes(),
    )
    .expect("test pod decodes");
    match o {
        Object::Pod(mut p) => {
            p.spec.node_name = "n1".into();
            p
        }
        _ => unreachable!(),
    }
}

fn app(c: &ContainerStatus) -> (&str, Option<&str>, Option<i32>) {
    let s = c.state.as_ref().expect("state");
    let waiting = s.waiting.as_ref().map(|w| w.reason.as_str());
    let exit = s.terminated.as_ref().map(|t| t.exit_code);
    let what = if s.running.is_some() {
        "running"
    } else if s.terminated.is_some() {
        "terminated"
    } else {
        "waiting"
    };
    (what, waiting, exit)
}

fn cond(s: &PodStatus, t: PodConditionType) -> Option<ConditionStatus> {
    s.condition(&t).map(|c| c.status)
}

impl Harness {
    fn start(&self, pod: Pod) -> WorkerHandle {
        worker::spawn(self.ctx.clone(), pod, Ok(()), None, self.cancel.clone())
    }

    /// The first recorded status (from `from` on) that satisfies `f`, with its time since the
    /// harness started. Fails after `within` of (paused) time.
    async fn until(
        &self,
        what: &str,
        within: Duration,
        f: impl Fn(&PodStatus) -> bool,
    ) -> (Duration, PodStatus) {
        let deadline = Instant::now() + within;
        loop {
            if let Some((t, s)) = self
                .rec
                .log
                .lock()
                .expect("recorder lock")
                .iter()
                .find(|(_, s)| f(s))
                .cloned()
            {
                return (t - self.t0, s);
            }
            assert!(
                Instant::now() < deadline,
                "no status with {what} within {within:?}; last: {:#?}",
                self.rec.log.lock().expect("recorder lock").last()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn done(&self, h: &WorkerHandle, within: Duration) {
        let deadline = Instant::now() + within;
        while !h.done.load(std::sync::atomic::Ordering::Acquire) {
            assert!(Instant::now() < deadline, "worker still running");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn running_container(&self, uid: &str) -> String {
        self.rt
            .containers_of(uid)
            .into_iter()
            .find(|c| matches!(c.state, ContainerState::Running { .. }))
            .map(|c| c.id)
            .expect("a running container")
    }
}

fn deleting(mut p: Pod, grace: i64) -> Pod {
    p.metadata.deletion_timestamp = Time::from_unix(Time::now().unix() + grace);
    p.metadata.deletion_grace_period_seconds = Some(grace);
    p
}

const LONG: Duration = Duration::from_secs(3600);

/// Init containers run in order before the app container; a pod whose containers exit 0
/// ends Succeeded, with Initialized, podIP, hostIP, startTime and exit codes reported.
#[tokio::test(start_paused = true)]
async fn init_then_app_then_succeeded() {
    let h = harness();
    let p = pod(
        "ok",
        json!({"restartPolicy": "Never",
               "initContainers": [{"name": "i1", "image": "b:1", "command": ["sh", "-c", "sleep 1"]},
                                  {"name": "i2", "image": "b:1", "command": ["true"]}],
               "containers": [{"name": "a", "image": "b:1", "command": ["sh", "-c", "sleep 5; exit 0"]}]}),
    );
    let w = h.start(p);
    let (_, pending) = h
        .until("Pending while initialising", LONG, |s| {
            s.phase == Some(PodPhase::Pending)
                && s.container_statuses
                    .first()
                    .is_some_and(|c| app(c).1 == Some("PodInitializing"))
        })
        .await;
    assert_eq!(
        cond(&pending, PodConditionType::Initialized),
        Some(ConditionStatus::False)
    );
    let (t_run, running) = h
        .until("Running", LONG, |s| s.phase == Some(PodPhase::Running))
        .await;
    assert!(t_run >= Duration::from_secs(1), "init took its second");
    assert_eq!(
        cond(&running, PodConditionType::Initialized),
        Some(ConditionStatus::True)
    );
    assert_eq!(
        cond(&running, PodConditionType::Ready),
        Some(ConditionStatus::True)
    );
    assert_eq!(running.host_ip, "192.0.2.10");
    assert!(running.pod_ip.starts_with("10."), "{}", running.pod_ip);
    assert!(running.start_time.is_some());
    assert!(
        running
            .init_container_statuses
            .iter()
            .all(|c| app(c) == ("terminated", None, Some(0)))
    );
    let (t_done, done) = h
        .until("Succeeded", LONG, |s| s.phase == Some(PodPhase::Succeeded))
        .await;
    assert!(t_done >= Duration::from_secs(6));
    let c = &done.container_statuses[0];
    assert_eq!(app(c), ("terminated", None, Some(0)));
    let t = c.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(t.reason, "Completed");
    assert!(t.container_id.starts_with("sim://"));
    assert_eq!(
        cond(&done, PodConditionType::Ready),
        Some(ConditionStatus::False)
    );
    // The sandbox is stopped; the containers stay until the pod is deleted.
    w.pod.send_replace(Some(deleting(pod("ok", json!({})), 0)));
    h.done(&w, LONG).await;
    assert_eq!(h.rt.counts(), (0, 0));
}

/// A failing init container fails the pod under restartPolicy Never; app containers never
/// start.
#[tokio::test(start_paused = true)]
async fn init_failure_fails_the_pod_with_never() {
    let h = harness();
    let _w = h.start(pod(
        "initfail",
        json!({"restartPolicy": "Never",
               "initContainers": [{"name": "i", "image": "b:1", "command": ["sh", "-c", "exit 3"]}],
               "containers": [{"name": "a", "image": "b:1"}]}),
    ));
    let (_, s) = h
        .until("Failed", LONG, |s| s.phase == Some(PodPhase::Failed))
        .await;
    assert_eq!(
        app(&s.init_container_statuses[0]),
        ("terminated", None, Some(3))
    );
    assert_eq!(
        s.init_container_statuses[0]
            .state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .reason,
        "Error"
    );
    assert_eq!(app(&s.container_statuses[0]).0, "waiting");
    assert!(h.rt.containers_of("uid-initfail").len() == 1);
}

/// Under OnFailure a failing init container is restarted with back-off and the pod stays
/// Pending.
#[tokio::test(start_paused = true)]
async fn init_failure_restarts_with_on_failure() {
    let h = harness();
    let _w = h.start(pod(
        "initretry",
        json!({"restartPolicy": "OnFailure",
               "initContainers": [{"name": "i", "image": "b:1", "command": ["false"]}],
               "containers": [{"name": "a", "image": "b:1"}]}),
    ));
    let (t, s) = h
        .until("two init restarts", LONG, |s| {
            s.init_container_statuses
                .first()
                .is_some_and(|c| c.restart_count >= 2)
        })
        .await;
    assert_eq!(s.phase, Some(PodPhase::Pending));
    assert!(t >= Duration::from_secs(10), "second restart waited: {t:?}");
    let (_, s) = h
        .until("init back-off", LONG, |s| {
            s.init_container_statuses
                .first()
                .is_some_and(|c| app(c).1 == Some("CrashLoopBackOff"))
        })
        .await;
    assert_eq!(s.phase, Some(PodPhase::Pending));
}

/// CrashLoopBackOff: the first restart is immediate, then 10 s doubling to the 5 min cap;
/// the waiting reason and message say so and the pod stays Running (restartPolicy Always).
#[tokio::test(start_paused = true)]
async fn crash_loop_back_off_doubles_to_the_cap() {
    let h = harness();
    let _w = h.start(pod(
        "crash",
        json!({"containers": [{"name": "a", "image": "b:1", "command": ["sh", "-c", "exit 1"]}]}),
    ));
    let mut times = Vec::new();
    for n in 1..=8 {
        let (t, _) = h
            .until(&format!("restart {n}"), LONG, |s| {
                s.container_statuses
                    .first()
                    .is_some_and(|c| c.restart_count >= n)
            })
            .await;
        times.push(t.as_secs());
    }
    let gaps: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(times[0], 0, "first restart is immediate: {times:?}");
    assert_eq!(gaps, vec![10, 20, 40, 80, 160, 300, 300], "{times:?}");
    let (_, s) = h
        .until("CrashLoopBackOff", LONG, |s| {
            s.container_statuses.first().is_some_and(|c| {
                c.state
                    .as_ref()
                    .and_then(|s| s.waiting.as_ref())
                    .is_some_and(|w| w.message.starts_with("back-off 20s"))
            })
        })
        .await;
    let c = &s.container_statuses[0];
    assert_eq!(app(c).1, Some("CrashLoopBackOff"));
    assert_eq!(s.phase, Some(PodPhase::Running));
    let last = c.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((last.exit_code, last.reason.as_str()), (1, "Error"));
    // Only the newest dead container is kept (for `logs --previous`).
    assert!(h.rt.containers_of("uid-crash").len() <= 2);
    // What `/metrics` counts: every start and exit, the back-offs, the pod still active.
    let m = &h.ctx.metrics;
    assert!(
        m.container_starts.get() >= 9,
        "{}",
        m.container_starts.get()
    );
    assert!(m.container_exits.get() >= 8, "{}", m.container_exits.get());
    assert!(m.back_offs.get() >= 1);
    assert_eq!(m.pods_active.get(), 1);
}

/// A container that ran for the reset period (10 min) before crashing restarts without
/// back-off.
#[tokio::test(start_paused = true)]
async fn back_off_resets_after_a_long_run() {
    let h = harness();
    let _w = h.start(pod(
        "slowcrash",
        json!({"containers": [{"name": "a", "image": "b:1", "command": ["sh", "-c", "sleep 700; exit 1"]}]}),
    ));
    let (t2, _) = h
        .until("restart 2", Duration::from_secs(5000), |s| {
            s.container_statuses[0].restart_count >= 2
        })
        .await;
    assert_eq!(t2.as_secs(), 1400, "no back-off after 700 s runs");
}

/// OnFailure: exit 0 completes the pod (Succeeded); Never: a non-zero exit fails it.
#[tokio::test(start_paused = true)]
async fn restart_policies_on_failure_and_never() {
    let h = harness();
    let _a = h.start(pod(
        "onfail",
        json!({"restartPolicy": "OnFailure",
               "containers": [{"name": "a", "image": "b:1", "command": ["sh", "-c", "sleep 2; exit 0"]}]}),
    ));
    h.until("Succeeded", LONG, |s| s.phase == Some(PodPhase::Succeeded))
        .await;
    let h = harness();
    let _b = h.start(pod(
        "never",
        json!({"restartPolicy": "Never",
               "containers": [{"name": "a", "image": "b:1", "command": ["sh", "-c", "sleep 2; exit 2"]}]}),
    ));
    let (_, s) = h
        .until("Failed", LONG, |s| s.phase == Some(PodPhase::Failed))
        .await;
    assert_eq!(app(&s.container_statuses[0]), ("terminated", None, Some(2)));
    assert_eq!(s.container_statuses[0].restart_count, 0);
}

/// A missing image reports ErrImagePull, then ImagePullBackOff; the pod stays Pending.
#[tokio::test(start_paused = true)]
async fn missing_image_backs_off() {
    let h = harness();
    let _w = h.start(pod(
        "noimage",
        json!({"containers": [{"name": "a", "image": "localhost/skiff/none:absent"}]}),
    ));
    let (_, s) = h
        .until("ErrImagePull", LONG, |s| {
            app(&s.container_statuses[0]).1 == Some("ErrImagePull")
        })
        .await;
    assert_eq!(s.phase, Some(PodPhase::Pending));
    let (t, s) = h
        .until("ImagePullBackOff", LONG, |s| {
            app(&s.container_statuses[0]).1 == Some("ImagePullBackOff")
        })
        .await;
    assert!(t >= Duration::from_secs(10));
    assert_eq!(s.phase, Some(PodPhase::Pending));
    let text = skiff_proto::metrics::encode(&h.ctx.metrics.registry());
    let failed_pulls = skiff_proto::metrics::sample(&text, "skiff_node_back_offs_total");
    assert!(failed_pulls >= Some(1.0), "{text}");
    assert!(
        text.contains("skiff_node_runtime_errors_total{call=\"PullImage\"}"),
        "{text}"
    );
}

/// A failing postStart hook kills the container; the restart policy restarts it.
#[tokio::test(start_paused = true)]
async fn failed_post_start_kills_the_container() {
    let h = harness();
    let _w = h.start(pod(
        "hook",
        json!({"containers": [{"name": "a", "image": "b:1",
                "lifecycle": {"postStart": {"exec": {"command": ["false"]}}}}]}),
    ));
    h.until("a restart", LONG, |s| {
        s.container_statuses[0].restart_count >= 1
    })
    .await;
}

/// Liveness failing failureThreshold times in a row restarts the container.
#[tokio::test(start_paused = true)]
async fn failing_liveness_restarts() {
    let h = harness();
    let _w = h.start(pod(
        "live",
        json!({"containers": [{"name": "a", "image": "b:1",
                "livenessProbe": {"exec": {"command": ["cat", "/tmp/healthy"]},
                                  "periodSeconds": 2, "failureThreshold": 3}}]}),
    ));
    let (t, s) = h
        .until("a restart", LONG, |s| {
            s.container_statuses[0].restart_count >= 1
        })
        .await;
    assert!(
        (Duration::from_secs(4)..Duration::from_secs(7)).contains(&t),
        "killed after three failures 2 s apart: {t:?}"
    );
    let last = s.container_statuses[0].last_state.as_ref().unwrap();
    assert!(last.terminated.is_some());
}

/// Readiness follows the probe (with success and failure thresholds) and drives the Ready
/// and ContainersReady conditions; the container keeps running.
#[tokio::test(start_paused = true)]
async fn readiness_follows_the_probe() {
    let h = harness();
    let _w = h.start(pod(
        "ready",
        json!({"containers": [{"name": "a", "image": "b:1",
                "readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]},
                                   "periodSeconds": 1, "failureThreshold": 2}}]}),
    ));
    let (_, s) = h
        .until("Running", LONG, |s| s.phase == Some(PodPhase::Running))
        .await;
    assert_eq!(
        cond(&s, PodConditionType::Ready),
        Some(ConditionStatus::False)
    );
    let id = h.running_container("uid-ready");
    assert!(h.rt.touch(&id, "/tmp/ready"));
    let before = h.rec.log.lock().unwrap().len();
    h.until("Ready", LONG, |s| {
        cond(s, PodConditionType::Ready) == Some(ConditionStatus::True)
    })
    .await;
    assert!(h.rt.remove_file(&id, "/tmp/ready"));
    let deadline = Instant::now() + LONG;
    loop {
        let flipped = h.rec.log.lock().unwrap()[before..]
            .iter()
            .skip_while(|(_, s)| cond(s, PodConditionType::Ready) != Some(ConditionStatus::True))
            .any(|(_, s)| cond(s, PodConditionType::Ready) == Some(ConditionStatus::False));
        if flipped {
            break;
        }
        assert!(Instant::now() < deadline, "Ready never went back to False");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = h.rec.log.lock().unwrap();
    let after: Vec<&PodStatus> = log[before..].iter().map(|(_, s)| s).collect();
    let flipped = after
        .iter()
        .skip_while(|s| cond(s, PodConditionType::Ready) != Some(ConditionStatus::True))
        .any(|s| cond(s, PodConditionType::Ready) == Some(ConditionStatus::False));
    assert!(flipped, "Ready went back to False");
    assert!(
        after
            .iter()
            .all(|s| s.container_statuses[0].restart_count == 0)
    );
}

/// TCP probes succeed on a declared port and fail on others; a failing startup probe kills
/// the container before liveness or readiness ever run.
#[tokio::test(start_paused = true)]
async fn tcp_and_startup_probes() {
    let h = harness();
    let _ok = h.start(pod(
        "tcp",
        json!({"containers": [{"name": "a", "image": "b:1", "ports": [{"name": "web", "containerPort": 8080}],
                "readinessProbe": {"tcpSocket": {"port": "web"}, "periodSeconds": 1}}]}),
    ));
    h.until("Ready", LONG, |s| {
        cond(s, PodConditionType::Ready) == Some(ConditionStatus::True)
    })
    .await;
    let h = harness();
    let _bad = h.start(pod(
        "startup",
        json!({"containers": [{"name": "a", "image": "b:1",
                "startupProbe": {"tcpSocket": {"port": 9999}, "periodSeconds": 1, "failureThreshold": 2},
                "readinessProbe": {"exec": {"command": ["true"]}}}]}),
    ));
    let (_, s) = h
        .until("a restart", LONG, |s| {
            s.container_statuses[0].restart_count >= 1
        })
        .await;
    assert_eq!(s.container_statuses[0].started, Some(false));
    assert!(
        h.rec
            .log
            .lock()
            .unwrap()
            .iter()
            .all(|(_, s)| cond(s, PodConditionType::Ready) != Some(ConditionStatus::True)),
        "readiness never ran before startup passed"
    );
}

/// Deletion: preStop runs, then SIGTERM; a container that honours it exits 143 at once;
/// the final status is written, then everything is removed from the runtime.
#[tokio::test(start_paused = true)]
async fn graceful_stop_runs_pre_stop_and_sigterm() {
    let h = harness();
    let p = pod(
        "stop",
        json!({"containers": [{"name": "a", "image": "b:1",
                "lifecycle": {"preStop": {"exec": {"command": ["touch", "/tmp/stopping"]}}}}]}),
    );
    let w = h.start(p.clone());
    h.until("Running", LONG, |s| s.phase == Some(PodPhase::Running))
        .await;
    let t = Instant::now();
    w.pod.send_replace(Some(deleting(p, 30)));
    let (_, s) = h
        .until("final status", LONG, |s| s.phase == Some(PodPhase::Failed))
        .await;
    assert_eq!(
        app(&s.container_statuses[0]),
        ("terminated", None, Some(143))
    );
    h.done(&w, LONG).await;
    assert!(Instant::now() - t < Duration::from_secs(2));
    assert_eq!(h.rt.counts(), (0, 0));
}

/// A container that ignores SIGTERM is killed (137) when the grace period ends, not before.
#[tokio::test(start_paused = true)]
async fn sigkill_after_the_grace_period() {
    let h = harness();
    let p = pod(
        "stubborn",
        json!({"containers": [{"name": "a", "image": "b:1",
                "command": ["sh", "-c", "trap '' TERM; sleep 100000"]}]}),
    );
    let w = h.start(p.clone());
    let (t_run, _) = h
        .until("Running", LONG, |s| s.phase == Some(PodPhase::Running))
        .await;
    w.pod.send_replace(Some(deleting(p, 5)));
    let (t, s) = h
        .until("killed", LONG, |s| {
            app(&s.container_statuses[0]).2 == Some(137)
        })
        .await;
    let took = t - t_run;
    assert!(
        (Duration::from_secs(4)..=Duration::from_secs(6)).contains(&took),
        "{took:?}"
    );
    assert_eq!(s.phase, Some(PodPhase::Failed));
    h.done(&w, LONG).await;
}

/// A second delete with a shorter grace period shortens the stop, as `kubectl delete
/// --grace-period=1` after a plain delete does on Kubernetes.
#[tokio::test(start_paused = true)]
async fn a_shorter_second_delete_shortens_the_stop() {
    let h = harness();
    let p = pod(
        "stubborn",
        json!({"containers": [{"name": "a", "image": "b:1",
                "command": ["sh", "-c", "trap '' TERM; sleep 100000"]}]}),
    );
    let w = h.start(p.clone());
    h.until("Running", LONG, |s| s.phase == Some(PodPhase::Running))
        .await;
    w.pod.send_replace(Some(deleting(p.clone(), 300)));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let again = h.t0.elapsed();
    w.pod.send_replace(Some(deleting(p, 2)));
    let (t, _) = h
        .until("killed", LONG, |s| {
            app(&s.container_statuses[0]).2 == Some(137)
        })
        .await;
    let took = t - again;
    assert!(took <= Duration::from_secs(4), "{took:?}");
    h.done(&w, LONG).await;
}

/// Node-side admission's refusal ends the pod Failed with the reason; nothing runs.
#[tokio::test(start_paused = true)]
async fn rejected_pod_fails_with_the_reason() {
    let h = harness();
    let _w = worker::spawn(
        h.ctx.clone(),
        pod(
            "big",
            json!({"containers": [{"name": "a", "image": "b:1"}]}),
        ),
        Err(Rejection {
            reason: "OutOfcpu".into(),
            message: "Node didn't have enough resource: cpu".into(),
        }),
        None,
        h.cancel.clone(),
    );
    let (_, s) = h
        .until("Failed", LONG, |s| s.phase == Some(PodPhase::Failed))
        .await;
    assert_eq!(s.reason, "OutOfcpu");
    assert_eq!(h.rt.counts(), (0, 0));
}

/// An agent that restarts adopts a running pod: same container, no restart.
#[tokio::test(start_paused = true)]
async fn adoption_keeps_the_running_container() {
    let h = harness();
    let p = pod(
        "adopt",
        json!({"containers": [{"name": "a", "image": "b:1"}]}),
    );
    let first = CancellationToken::new();
    let _w = worker::spawn(h.ctx.clone(), p.clone(), Ok(()), None, first.clone());
    let (_, running) = h
        .until("Running", LONG, |s| s.phase == Some(PodPhase::Running))
        .await;
    first.cancel();
    let id = h.running_container("uid-adopt");
    let sandbox = h.rt.list_sandboxes("n1").await.unwrap().remove(0);
    let containers = h.rt.list_containers(&sandbox.id).await.unwrap();
    h.rec.log.lock().unwrap().clear();
    let mut p2 = p;
    p2.status = Some(running.clone());
    let _w2 = worker::spawn(
        h.ctx.clone(),
        p2,
        Ok(()),
        Some(Adopted {
            sandbox,
            containers,
        }),
        h.cancel.clone(),
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(h.running_container("uid-adopt"), id);
    assert_eq!(h.rt.containers_of("uid-adopt").len(), 1);
    for (_, s) in h.rec.log.lock().unwrap().iter() {
        assert_eq!(s.phase, Some(PodPhase::Running));
        assert_eq!(s.container_statuses[0].restart_count, 0);
    }
}

/// A pod removed from the API outright (no graceful delete) is stopped and cleaned up with
/// no further status writes.
#[tokio::test(start_paused = true)]
async fn removal_cleans_up_without_status() {
    let h = harness();
    let w = h.start(pod(
        "gone",
        json!({"containers": [{"name": "a", "image": "b:1"}]}),
    ));
    h.until("Running", LONG, |s| s.phase == Some(PodPhase::Running))
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes = h.rec.log.lock().unwrap().len();
    w.pod.send_replace(None);
    h.done(&w, LONG).await;
    assert_eq!(h.rt.counts(), (0, 0));
    assert_eq!(h.rec.log.lock().unwrap().len(), writes);
}
