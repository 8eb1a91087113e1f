//! The pod worker: the thin async loop around one pod's [`PodEngine`]. It turns the engine's
//! actions into runtime calls (each a future whose result is the engine's next input), wakes
//! the engine when its next timer is due, follows the pod object through a `watch` channel
//! (latest wins: the agent never waits for a busy worker), and submits status whenever the
//! engine's view of it changes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use skiff_proto::api::{Kind, Object, Pod, PodStatus, Time};
use skiff_proto::backoff::Backoff;
use skiff_proto::client::{ClusterClient, Code};
use skiff_proto::recorder::{self, EventRecorder, EventType};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::admission::{depends_on_node, node_allows};
use crate::engine::{
    Action, Adopted, Clock, Ending, EngineConfig, Handler, Input, PodEngine, Rejection,
    active_deadline_of, container_of, container_spec,
};
use crate::events::{self, PodEvent};
use crate::metrics::AgentMetrics;
use crate::runtime::{Exit, Runtime, RuntimeError, SandboxSpec};
use crate::status::{PodKey, StatusWriter};
use crate::volumes::Volumes;

/// What every worker of a node shares.
#[derive(Debug, Clone)]
pub struct WorkerContext {
    pub runtime: Arc<dyn Runtime>,
    pub status: StatusWriter,
    /// `None` in unit tests: the final delete is then skipped.
    pub client: Option<ClusterClient>,
    pub node: String,
    pub host_ip: String,
    /// The node's block of the pod network (`spec.podCIDR`; empty: none).
    pub pod_cidr: String,
    /// The cluster DNS server pods on the pod network use, and the cluster domain.
    pub cluster_dns: Option<(String, String)>,
    pub engine: EngineConfig,
    /// Where the pod's events go (`None`: not recorded).
    pub events: Option<EventRecorder>,
    pub metrics: AgentMetrics,
    /// The pods' volumes on this node.
    pub volumes: Volumes,
    /// The Services the process follows, for containers' variables (none in unit tests).
    pub services: Option<crate::services::Followed>,
}

/// The pod's resolver when it uses the cluster's DNS: on the pod network, with dnsPolicy
/// `ClusterFirst` (the default); host-network pods and `Default`/`None` keep the runtime's.
fn cluster_first(ctx: &WorkerContext, pod: &Pod) -> Option<crate::runtime::PodDns> {
    let (server, domain) = ctx.cluster_dns.as_ref()?;
    let policy = pod
        .spec
        .other
        .get("dnsPolicy")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("ClusterFirst");
    let on_pod_network = !pod.spec.host_network.unwrap_or(false);
    let wanted = match policy {
        "ClusterFirst" => on_pod_network,
        "ClusterFirstWithHostNet" => true,
        _ => false,
    };
    wanted.then(|| crate::runtime::PodDns::cluster_first(server, &pod.metadata.namespace, domain))
}

impl WorkerContext {
    fn report(&self, pod: &Pod, events: Vec<PodEvent>) {
        // The `BackOff` event is emitted once per entry into a back-off.
        if events.iter().any(|e| e.reason == "BackOff") {
            self.metrics.back_offs.inc();
        }
        let Some(recorder) = &self.events else {
            return;
        };
        for e in events {
            let mut object = recorder::reference_to(Kind::Pod, &pod.metadata);
            object.field_path = e.field_path;
            let type_ = if e.warning {
                EventType::Warning
            } else {
                EventType::Normal
            };
            recorder.record(object, type_, &e.reason, e.message);
        }
    }
}

/// What the agent keeps of a running worker.
#[derive(Debug)]
pub struct WorkerHandle {
    /// The newest pod object; `None` once it is gone from the API.
    pub pod: watch::Sender<Option<Pod>>,
    pub uid: String,
    /// Set once the pod is Succeeded/Failed: it no longer counts against the node.
    pub terminal: Arc<AtomicBool>,
    /// Set when the worker has ended.
    pub done: Arc<AtomicBool>,
}

fn clock() -> Clock {
    Clock {
        now: Instant::now(),
        wall: Time::now(),
    }
}

/// Starts a worker for `pod`.
pub fn spawn(
    ctx: Arc<WorkerContext>,
    pod: Pod,
    admission: Result<(), Rejection>,
    adopted: Option<Adopted>,
    cancel: CancellationToken,
) -> WorkerHandle {
    let (tx, rx) = watch::channel(Some(pod.clone()));
    let terminal = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let handle = WorkerHandle {
        pod: tx,
        uid: pod.metadata.uid.clone(),
        terminal: terminal.clone(),
        done: done.clone(),
    };
    let span = tracing::info_span!("node.pod", node = %ctx.node, pod = %pod.metadata.name);
    tokio::spawn(
        async move {
            run(ctx, pod, rx, admission, adopted, terminal, cancel).await;
            done.store(true, Ordering::Release);
        }
        .instrument(span),
    );
    handle
}

type Pending = FuturesUnordered<BoxFuture<'static, Option<Input>>>;

/// A refusal that a newer Node could lift (labels, taints) is checked again against the Node
/// as the store has it now: the agent's copy comes from a watch that may not yet have seen
/// the label the scheduler bound the pod by.
async fn recheck_with_stored_node(
    ctx: &WorkerContext,
    pod: &Pod,
    admission: Result<(), Rejection>,
) -> Result<(), Rejection> {
    let Err(r) = &admission else {
        return admission;
    };
    let Some(client) = ctx.client.as_ref().filter(|_| depends_on_node(r)) else {
        return admission;
    };
    match client.get(Kind::Node, "", &ctx.node).await {
        Ok(Some(Object::Node(node))) => node_allows(&node, pod),
        _ => admission,
    }
}

/// Runs one pod until it is finished and gone, or `cancel` fires (agent shutdown: the
/// containers keep running and the next agent adopts them).
pub async fn run(
    ctx: Arc<WorkerContext>,
    pod: Pod,
    mut rx: watch::Receiver<Option<Pod>>,
    admission: Result<(), Rejection>,
    adopted: Option<Adopted>,
    terminal: Arc<AtomicBool>,
    cancel: CancellationToken,
) {
    let key = PodKey {
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
    };
    let uid = pod.metadata.uid.clone();
    // A refusal is reported with the status that carries it (`events::on_status`).
    let admission = recheck_with_stored_node(&ctx, &pod, admission).await;
    let mut engine = PodEngine::new(ctx.engine, &pod, admission);
    let mut current = pod;
    let mut pending: Pending = FuturesUnordered::new();
    let mut last_status: Option<PodStatus> = current.status.clone();
    let mut last_seq = 0;
    let mut rx_open = true;
    // The deletion time the engine was last told of: a second delete with a shorter grace
    // moves it earlier, and the engine shortens the stop.
    let mut deleting_at: Option<Time> = None;
    let mut active = ActivePod::new(&ctx.metrics);
    // Volumes are brought up to date (a changed ConfigMap or Secret, a token near its end)
    // every resync period while the pod runs.
    let mut resync_at = Instant::now() + ctx.volumes.resync();
    let resyncing = Arc::new(AtomicBool::new(false));
    let mut actions = engine.step(clock(), Input::Start { adopted });
    // A pod that is already being deleted when the worker starts.
    if let Some(grace) = deletion_grace(&current) {
        deleting_at = current.metadata.deletion_timestamp;
        actions.extend(engine.step(clock(), Input::Delete { grace }));
    }
    loop {
        if !engine.is_removed() {
            let status = engine.status(&ctx.host_ip, ctx.runtime.id_scheme());
            if last_status.as_ref() != Some(&status) {
                ctx.report(
                    &current,
                    events::on_status(&current, last_status.as_ref(), &status),
                );
                last_seq = ctx.status.submit(&key, &uid, status.clone());
                last_status = Some(status);
            }
        }
        terminal.store(engine.is_terminal(), Ordering::Release);
        active.set(!engine.is_terminal());
        for a in actions.drain(..) {
            ctx.report(&current, events::on_action(&current, &a));
            if let Some(f) = perform(&ctx, &engine, &current, &key, &uid, last_seq, a) {
                pending.push(f);
            }
        }
        if engine.is_done() && pending.is_empty() {
            break;
        }
        let deadline = engine.next_deadline();
        let input = tokio::select! {
            _ = cancel.cancelled() => return,
            Some(i) = pending.next(), if !pending.is_empty() => match i {
                Some(i) => i,
                None => continue,
            },
            changed = rx.changed(), if rx_open => {
                let latest = if changed.is_ok() { rx.borrow_and_update().clone() } else { None };
                rx_open &= changed.is_ok();
                match latest {
                    None => Input::Removed,
                    Some(p) => {
                        current = p;
                        let at = current.metadata.deletion_timestamp;
                        let deadline = active_deadline_of(&current);
                        match deletion_grace(&current) {
                            Some(grace) if deleting_at.is_none_or(|known| at < Some(known)) => {
                                deleting_at = at;
                                Input::Delete { grace }
                            }
                            _ if deadline != engine.active_deadline() => {
                                Input::ActiveDeadline(deadline)
                            }
                            _ => continue,
                        }
                    }
                }
            }
            _ = sleep_until(deadline), if deadline.is_some() => Input::Tick,
            _ = tokio::time::sleep_until(resync_at), if !resyncing.load(Ordering::Acquire) => {
                resync_at = Instant::now() + ctx.volumes.resync();
                let running = engine.sandbox().is_some()
                    && !engine.is_terminal()
                    && current.metadata.deletion_timestamp.is_none();
                if running && !current.spec.volumes.is_empty() {
                    resyncing.store(true, Ordering::Release);
                    pending.push(resync(ctx.clone(), current.clone(), resyncing.clone()));
                }
                continue;
            }
        };
        ctx.report(&current, events::on_input(&current, &input));
        count(&ctx.metrics, &input);
        actions = engine.step(clock(), input);
    }
    ctx.status.forget(&key, &uid);
    ctx.volumes.tear_down(&uid).await;
}

/// Brings the running pod's volumes up to date; a volume that cannot be is a `FailedMount`
/// (the files it had stay as they were). Then measures its emptyDirs that have a
/// `sizeLimit`: one over its limit evicts the pod, as the kubelet's eviction manager does.
fn resync(
    ctx: Arc<WorkerContext>,
    pod: Pod,
    busy: Arc<AtomicBool>,
) -> BoxFuture<'static, Option<Input>> {
    Box::pin(async move {
        if let Err(e) = ctx.volumes.set_up(&pod).await {
            ctx.report(
                &pod,
                events::on_input(
                    &pod,
                    &Input::MountFailed {
                        message: e.to_string(),
                    },
                ),
            );
        }
        let over = if Volumes::has_size_limits(&pod) {
            let volumes = ctx.volumes.clone();
            tokio::task::spawn_blocking(move || volumes.over_size_limit(&pod))
                .await
                .ok()
                .flatten()
        } else {
            None
        };
        busy.store(false, Ordering::Release);
        over.map(|message| Input::End(Ending::evicted(message)))
    })
}

/// Counts what an input tells: a container started or exited, a probe failed, a runtime
/// call that failed.
fn count(m: &AgentMetrics, input: &Input) {
    match input {
        Input::Started { .. } => {
            m.container_starts.inc();
        }
        Input::Exited { .. } => {
            m.container_exits.inc();
        }
        Input::ProbeDone { success: false, .. } => {
            m.probe_failures.inc();
        }
        Input::SandboxFailed { .. } => m.runtime_error("RunPodSandbox"),
        Input::StartFailed { error, .. } => m.runtime_error(call_of(error)),
        _ => {}
    }
}

fn call_of(e: &RuntimeError) -> &'static str {
    match e {
        RuntimeError::Call { call, .. } | RuntimeError::Timeout { call, .. } => call,
        RuntimeError::ImageNotFound { .. } => "PullImage",
        RuntimeError::NotFound { .. } | RuntimeError::Config { .. } => "CreateContainer",
    }
}

/// Holds one count in `skiff_node_pods_active` while the pod has not finished, and gives it
/// back when the worker ends, however it ends.
struct ActivePod<'a> {
    metrics: &'a AgentMetrics,
    counted: bool,
}

impl<'a> ActivePod<'a> {
    fn new(metrics: &'a AgentMetrics) -> Self {
        ActivePod {
            metrics,
            counted: false,
        }
    }

    fn set(&mut self, active: bool) {
        if active != self.counted {
            if active {
                self.metrics.pods_active.inc();
            } else {
                self.metrics.pods_active.dec();
            }
            self.counted = active;
        }
    }
}

impl Drop for ActivePod<'_> {
    fn drop(&mut self) {
        self.set(false);
    }
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

/// The grace period left for a pod with a deletionTimestamp.
fn deletion_grace(pod: &Pod) -> Option<Duration> {
    let at = pod.metadata.deletion_timestamp?;
    let left = at.unix() - Time::now().unix();
    Some(Duration::from_secs(u64::try_from(left.max(0)).unwrap_or(0)))
}

/// Starts the runtime work of one action; its result is the engine's next input.
fn perform(
    ctx: &Arc<WorkerContext>,
    engine: &PodEngine,
    pod: &Pod,
    key: &PodKey,
    uid: &str,
    status_seq: u64,
    action: Action,
) -> Option<BoxFuture<'static, Option<Input>>> {
    let rt = ctx.runtime.clone();
    let pod_ip = engine.sandbox().map(|s| s.ip.clone()).unwrap_or_default();
    Some(match action {
        Action::RunSandbox { attempt } => {
            let spec = SandboxSpec {
                node: ctx.node.clone(),
                pod_uid: uid.to_string(),
                pod_name: key.name.clone(),
                namespace: key.namespace.clone(),
                hostname: crate::engine::hostname_of(pod),
                host_network: pod.spec.host_network.unwrap_or(false),
                host_ip: ctx.host_ip.clone(),
                pod_cidr: ctx.pod_cidr.clone(),
                attempt,
                host_ports: crate::runtime::HostPort::of(pod),
                dns: cluster_first(ctx, pod),
            };
            let (volumes, pod) = (ctx.volumes.clone(), pod.clone());
            Box::pin(async move {
                if let Err(e) = volumes.set_up(&pod).await {
                    return Some(Input::MountFailed {
                        message: e.to_string(),
                    });
                }
                Some(match rt.run_sandbox(&spec).await {
                    Ok(sb) => Input::SandboxReady(sb),
                    Err(e) => Input::SandboxFailed {
                        message: e.to_string(),
                    },
                })
            })
        }
        Action::StartContainer { slot, attempt } => {
            let sandbox = engine.sandbox().cloned();
            let (volumes, pod) = (ctx.volumes.clone(), pod.clone());
            let links = pod
                .spec
                .other
                .get("enableServiceLinks")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(true);
            let followed = ctx.services.clone();
            // A pod on the pod network gets the kubelet's /etc/hosts, with its own names.
            let hosts = (!pod.spec.host_network.unwrap_or(false)).then(|| {
                let domain = ctx
                    .cluster_dns
                    .as_ref()
                    .map_or(crate::dns::DEFAULT_DOMAIN.to_owned(), |(_, d)| d.clone());
                (pod_ip.clone(), domain)
            });
            Box::pin(async move {
                let services = match followed {
                    Some(f) => {
                        f.synced().await;
                        f.service_env(&pod.metadata.namespace, links)
                    }
                    None => Vec::new(),
                };
                let parts = container_parts(&volumes, &pod, slot, &services).await;
                let parts = match (parts, &hosts) {
                    (Ok(Some((env, mut mounts))), Some((ip, domain))) => {
                        volumes.hosts_file(&pod, ip, domain).await.map(|hosts| {
                            mounts.push(hosts);
                            Some((env, mounts))
                        })
                    }
                    (parts, _) => parts,
                };
                let spec = match parts {
                    Ok(Some((env, mounts))) => container_spec(&pod, slot, attempt, env, mounts),
                    Ok(None) => None,
                    Err(message) => {
                        let error = RuntimeError::Config { message };
                        return Some(Input::StartFailed { slot, error });
                    }
                };
                let (Some(sandbox), Some(spec)) = (sandbox, spec) else {
                    return Some(Input::StartFailed {
                        slot,
                        error: RuntimeError::Call {
                            call: "CreateContainer",
                            message: "no sandbox or no such container".into(),
                        },
                    });
                };
                let id = match rt.create_container(&sandbox, &spec).await {
                    Ok(id) => id,
                    Err(error) => return Some(Input::StartFailed { slot, error }),
                };
                Some(match rt.start_container(&id).await {
                    Ok(()) => {
                        // Reported as unknown (empty) if the runtime cannot say.
                        let image_id = rt.image_ref(&id).await.unwrap_or_else(|e| {
                            tracing::debug!(container = %id, error = %e, "no image digest");
                            String::new()
                        });
                        Input::Started { slot, id, image_id }
                    }
                    Err(error) => {
                        if let Err(e) = rt.remove_container(&id).await {
                            tracing::warn!(container = %id, error = %e, "removing a container that failed to start");
                        }
                        Input::StartFailed { slot, error }
                    }
                })
            })
        }
        Action::Watch { slot, id } => Box::pin(async move {
            let exit = rt.wait_container(&id).await.unwrap_or_else(|e| Exit {
                exit_code: 128,
                reason: "Error".into(),
                message: format!("lost track of the container: {e}"),
                started_at: None,
                finished_at: Some(Time::now()),
            });
            Some(Input::Exited { slot, id, exit })
        }),
        Action::PostStart { slot, id, command } => Box::pin(async move {
            let timeout = Duration::from_secs(30);
            let error = match rt.exec(&id, &command, timeout).await {
                Ok(o) if o.exit_code == 0 => None,
                Ok(o) => Some(format!("postStart hook exited with {}", o.exit_code)),
                Err(e) => Some(format!("postStart hook: {e}")),
            };
            Some(Input::PostStartDone { slot, id, error })
        }),
        Action::Probe {
            slot,
            id,
            kind,
            handler,
            timeout,
        } => Box::pin(async move {
            let success = match &handler {
                Handler::Exec(cmd) => {
                    matches!(rt.exec(&id, cmd, timeout).await, Ok(o) if o.exit_code == 0)
                }
                Handler::Tcp { port } => {
                    matches!(rt.tcp_probe(&pod_ip, *port, timeout).await, Ok(true))
                }
                Handler::Http { port, path } => {
                    matches!(rt.http_probe(&pod_ip, *port, path, timeout).await, Ok(true))
                }
                Handler::Invalid(_) => false,
            };
            Some(Input::ProbeDone {
                slot,
                id,
                kind,
                success,
            })
        }),
        Action::StopContainer {
            id,
            grace,
            pre_stop,
            ..
        } => {
            let m = ctx.metrics.clone();
            Box::pin(async move {
                let begun = Instant::now();
                if let Some(cmd) = pre_stop {
                    // preStop counts against the grace period, as in Kubernetes.
                    let _ = tokio::time::timeout(grace, rt.exec(&id, &cmd, grace)).await;
                }
                let left = grace.saturating_sub(begun.elapsed());
                if let Err(e) = rt.stop_container(&id, left).await {
                    m.runtime_error("StopContainer");
                    tracing::warn!(container = %id, error = %e, "stop failed");
                }
                None
            })
        }
        Action::RemoveContainer { id } => Box::pin(async move {
            if let Err(e) = rt.remove_container(&id).await {
                tracing::debug!(container = %id, error = %e, "remove failed");
            }
            None
        }),
        Action::StopSandbox { id } => {
            let m = ctx.metrics.clone();
            Box::pin(async move {
                if let Err(e) = rt.stop_sandbox(&id).await {
                    m.runtime_error("StopPodSandbox");
                    tracing::warn!(sandbox = %id, error = %e, "stop sandbox failed");
                }
                Some(Input::SandboxStopped)
            })
        }
        Action::RemoveSandbox { id } => Box::pin(async move {
            if let Err(e) = rt.remove_sandbox(&id).await {
                tracing::debug!(sandbox = %id, error = %e, "remove sandbox failed");
            }
            None
        }),
        Action::DeletePod => {
            let client = ctx.client.clone()?;
            let writer = ctx.status.clone();
            let (key, uid) = (key.clone(), uid.to_string());
            Box::pin(async move {
                writer.flush(&key, &uid, status_seq).await;
                delete_pod(&client, &key, &uid).await;
                None
            })
        }
    })
}

/// The environment and mounts of the container of `slot`; `None` when the pod has no such
/// container.
async fn container_parts(
    volumes: &Volumes,
    pod: &Pod,
    slot: crate::engine::Slot,
    services: &[(String, String)],
) -> Result<Option<(Vec<(String, String)>, Vec<crate::volumes::Mount>)>, String> {
    let Some(c) = container_of(pod, slot) else {
        return Ok(None);
    };
    let env = volumes.env(pod, c, services).await?;
    let mounts = volumes.mounts(pod, c, &env)?;
    Ok(Some((env, mounts)))
}

/// Deletes the pod object with grace 0, pinned to the version read, so a new pod that
/// reuses the name is never deleted. Retries until the pod is gone.
pub(crate) async fn delete_pod(client: &ClusterClient, key: &PodKey, uid: &str) {
    let mut backoff = Backoff::for_store();
    loop {
        let result = match client.get(Kind::Pod, &key.namespace, &key.name).await {
            Ok(Some(Object::Pod(p))) if p.metadata.uid == uid => {
                let rv = p.metadata.revision().unwrap_or(0);
                client
                    .delete(Kind::Pod, &key.namespace, &key.name, rv, Some(0))
                    .await
                    .map(|_| ())
            }
            Ok(_) => return,
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => return,
            Err(e) if e.code() == Some(Code::NotFound) => return,
            Err(e) if e.code() == Some(Code::Aborted) => continue,
            Err(e) => {
                tracing::warn!(pod = %key, error = %e, "deleting the pod failed; retrying");
                backoff.wait().await;
            }
        }
    }
}
