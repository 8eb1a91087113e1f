//! The pod worker's engine: one pod's lifecycle as a pure state machine. Inputs (runtime
//! results, timer ticks, the pod being deleted) go in through [`PodEngine::step`]; the actions
//! to perform come out; nothing here does I/O or reads a clock, so every transition is tested
//! with made-up times. [`crate::worker`] is the thin async loop that performs the actions.
//!
//! ```text
//!            admission refused
//!   ┌────────────────────────────────────────────────────────────► Rejected (Failed)
//!   │
//! Start ──RunSandbox──► Sandbox ──ready──► Init ──all init exit 0──► Run
//!                                          │ init fails, restartPolicy Never   │ every app container
//!                                          └──────────────┬────────────────────┘ exited for good
//!                                                         ▼
//!   Delete (deletionTimestamp) / Removed ─────────────► Stopping ──containers gone──►
//!       from any stage: preStop, SIGTERM, grace, SIGKILL       StopSandbox ──► Stopped
//!                                                                               │ deleted
//!                                                                               ▼
//!                                                      remove containers, sandbox; DeletePod ──► Done
//! ```
//!
//! Per container (init containers one at a time, app containers side by side):
//!
//! ```text
//! Waiting ─(retry_at reached)─► Starting ─Started─► Running ─Exited─┬─ restart ─► Waiting(CrashLoopBackOff)
//!    ▲ ErrImagePull / ImagePullBackOff   │ postStart, probes        └─ no restart ─► Exited
//!    └───────────── StartFailed ◄────────┘ liveness/startup failure or failed postStart: stop, then Exited
//! ```
//!
//! Restart back-off follows the kubelet: the first restart is immediate, then 10 s, doubling to
//! 5 min; a container that ran for 10 min before exiting starts again from no back-off. All
//! three durations come from [`EngineConfig`] so tests can shorten them.

use std::fmt;
use std::time::Duration;

use skiff_proto::api::pod::{
    ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, PodCondition, Probe,
};
use skiff_proto::api::{Container, IntOrString, Pod, PodStatus, Time};
use tokio::time::Instant;

use crate::runtime::{self, ContainerSpec, ContainerState, Exit, Resources, RuntimeError, Sandbox};

/// Timing of restarts, shared by every pod of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// The first back-off after an immediate restart (kubelet: 10 s).
    pub backoff_initial: Duration,
    /// The cap of the doubling back-off (kubelet: 5 min).
    pub backoff_max: Duration,
    /// A container that ran this long before exiting restarts without back-off (10 min).
    pub backoff_reset: Duration,
    /// Wait before trying a failed sandbox again.
    pub sandbox_retry: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            backoff_initial: Duration::from_secs(10),
            backoff_max: Duration::from_secs(300),
            backoff_reset: Duration::from_secs(600),
            sandbox_retry: Duration::from_secs(2),
        }
    }
}

/// Which container of the pod: an index into `initContainers` or `containers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Slot {
    Init(usize),
    App(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    Startup,
    Liveness,
    Readiness,
}

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProbeKind::Startup => "Startup",
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
        })
    }
}

/// How a probe checks: in the container, or over the pod's network address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handler {
    Exec(Vec<String>),
    Tcp {
        port: u16,
    },
    Http {
        port: u16,
        path: String,
    },
    /// A probe that cannot run (a named port the container does not declare): always fails.
    Invalid(String),
}

/// The two clocks an input happens at: tokio's (for timers and durations) and the wall
/// clock (for the timestamps written into status).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clock {
    pub now: Instant,
    pub wall: Time,
}

/// Why node-side admission refused the pod (`OutOfcpu`, `NodeAffinity`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

/// What the runtime already holds for this pod when the agent (re)starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Adopted {
    pub sandbox: Sandbox,
    pub containers: Vec<runtime::Container>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// Begin: after admission, with whatever the runtime already runs for the pod.
    Start {
        adopted: Option<Adopted>,
    },
    SandboxReady(Sandbox),
    SandboxFailed {
        message: String,
    },
    Started {
        slot: Slot,
        id: String,
    },
    StartFailed {
        slot: Slot,
        error: RuntimeError,
    },
    PostStartDone {
        slot: Slot,
        id: String,
        error: Option<String>,
    },
    Exited {
        slot: Slot,
        id: String,
        exit: Exit,
    },
    ProbeDone {
        slot: Slot,
        id: String,
        kind: ProbeKind,
        success: bool,
    },
    SandboxStopped,
    /// The pod got a deletionTimestamp: stop gracefully, then remove the object.
    Delete {
        grace: Duration,
    },
    /// The object is gone from the API: stop at once and clean up, no more status.
    Removed,
    /// Time passed; timers may be due.
    Tick,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    RunSandbox {
        attempt: u32,
    },
    /// Create and start the container of `slot` (`attempt` previous starts).
    StartContainer {
        slot: Slot,
        attempt: u32,
    },
    /// Report when the container exits.
    Watch {
        slot: Slot,
        id: String,
    },
    PostStart {
        slot: Slot,
        id: String,
        command: Vec<String>,
    },
    Probe {
        slot: Slot,
        id: String,
        kind: ProbeKind,
        handler: Handler,
        timeout: Duration,
    },
    /// preStop (when given, within the grace), SIGTERM, SIGKILL after the grace.
    StopContainer {
        slot: Slot,
        id: String,
        grace: Duration,
        pre_stop: Option<Vec<String>>,
    },
    RemoveContainer {
        id: String,
    },
    StopSandbox {
        id: String,
    },
    RemoveSandbox {
        id: String,
    },
    /// Write the final status, then delete the pod object with grace 0.
    DeletePod,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Always,
    OnFailure,
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Constructed; waiting for `Start`.
    New,
    Rejected,
    Sandbox,
    Init,
    Run,
    Stopping,
    /// Sandbox stopped; terminal status is final (completed pods wait here to be deleted).
    Stopped,
    Done,
}

#[derive(Debug, Clone, PartialEq)]
enum Run {
    /// Not running. `retry_at: None` means "start when the stage allows".
    Waiting {
        reason: String,
        message: String,
        retry_at: Option<Instant>,
    },
    Starting,
    Running {
        id: String,
        started: Instant,
        started_wall: Option<Time>,
        post_start_pending: bool,
        stopping: bool,
    },
    /// Exited and will not run again.
    Exited {
        id: String,
        exit: Exit,
    },
}

#[derive(Debug, Clone, PartialEq)]
struct ProbeState {
    kind: ProbeKind,
    handler: Handler,
    initial_delay: Duration,
    period: Duration,
    timeout: Duration,
    success_threshold: u32,
    failure_threshold: u32,
    next_at: Option<Instant>,
    in_flight: bool,
    successes: u32,
    failures: u32,
}

#[derive(Debug, Clone, PartialEq)]
struct SlotState {
    name: String,
    image: String,
    run: Run,
    /// The previous container's end (status `lastState`), kept in the runtime for logs.
    last: Option<(String, Exit)>,
    /// Containers created so far.
    starts: u32,
    /// The delay the next restart will wait (`None`: restart at once).
    backoff: Option<Duration>,
    pull_failures: u32,
    /// The startup probe has passed (or there is none).
    started: bool,
    ready: bool,
    probes: Vec<ProbeState>,
    post_start: Option<Vec<String>>,
    pre_stop: Option<Vec<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cond {
    Initialized,
    ContainersReady,
    Ready,
}

/// One pod's lifecycle. See the module docs for the diagram.
#[derive(Debug)]
pub struct PodEngine {
    cfg: EngineConfig,
    name: String,
    namespace: String,
    uid: String,
    policy: Policy,
    grace: Duration,
    stage: Stage,
    rejection: Option<Rejection>,
    sandbox: Option<Sandbox>,
    sandbox_attempt: u32,
    sandbox_retry_at: Option<Instant>,
    sandbox_message: String,
    sandbox_stopping: bool,
    sandbox_in_flight: bool,
    init: Vec<SlotState>,
    app: Vec<SlotState>,
    start_time: Option<Time>,
    deleting: bool,
    removed: bool,
    stop_deadline: Option<Instant>,
    /// Set when the pod reached Succeeded or Failed.
    terminal: Option<&'static str>,
    failure_reason: String,
    conditions: Vec<(Cond, bool, Time)>,
    scheduled_at: Option<Time>,
    qos: &'static str,
    out: Vec<Action>,
}

fn slot_of<'a>(
    init: &'a mut [SlotState],
    app: &'a mut [SlotState],
    slot: Slot,
) -> Option<&'a mut SlotState> {
    match slot {
        Slot::Init(i) => init.get_mut(i),
        Slot::App(i) => app.get_mut(i),
    }
}

fn secs(v: Option<i32>, default: i32) -> Duration {
    Duration::from_secs(u64::try_from(v.unwrap_or(default).max(0)).unwrap_or(0))
}

fn resolve_port(c: &Container, port: &IntOrString) -> Result<u16, String> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p).map_err(|_| format!("port {p} out of range")),
        IntOrString::String(name) => c
            .ports
            .iter()
            .find(|p| &p.name == name)
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| format!("container has no port named {name:?}")),
    }
}

fn probe_state(c: &Container, kind: ProbeKind, p: &Probe) -> ProbeState {
    let handler = if let Some(e) = &p.exec {
        Handler::Exec(e.command.clone())
    } else if let Some(t) = &p.tcp_socket {
        match resolve_port(c, &t.port) {
            Ok(port) => Handler::Tcp { port },
            Err(e) => Handler::Invalid(e),
        }
    } else if let Some(h) = &p.http_get {
        match resolve_port(c, &h.port) {
            Ok(port) => Handler::Http {
                port,
                path: if h.path.is_empty() {
                    "/".into()
                } else {
                    h.path.clone()
                },
            },
            Err(e) => Handler::Invalid(e),
        }
    } else {
        Handler::Invalid("probe has no handler".into())
    };
    let threshold = |v: Option<i32>, d: i32| u32::try_from(v.unwrap_or(d).max(1)).unwrap_or(1);
    ProbeState {
        kind,
        handler,
        initial_delay: secs(p.initial_delay_seconds, 0),
        period: secs(p.period_seconds, 10).max(Duration::from_secs(1)),
        timeout: secs(p.timeout_seconds, 1).max(Duration::from_secs(1)),
        success_threshold: threshold(p.success_threshold, 1),
        failure_threshold: threshold(p.failure_threshold, 3),
        next_at: None,
        in_flight: false,
        successes: 0,
        failures: 0,
    }
}

fn slot_state(c: &Container, init: bool) -> SlotState {
    let mut probes = Vec::new();
    if !init {
        for (kind, p) in [
            (ProbeKind::Startup, &c.startup_probe),
            (ProbeKind::Liveness, &c.liveness_probe),
            (ProbeKind::Readiness, &c.readiness_probe),
        ] {
            if let Some(p) = p {
                probes.push(probe_state(c, kind, p));
            }
        }
    }
    let hook = |h: Option<&skiff_proto::api::pod::LifecycleHandler>| {
        h.and_then(|h| h.exec.as_ref()).map(|e| e.command.clone())
    };
    let lifecycle = c.lifecycle.as_ref();
    SlotState {
        name: c.name.clone(),
        image: c.image.clone(),
        run: Run::Waiting {
            reason: if init {
                "PodInitializing".into()
            } else {
                "ContainerCreating".into()
            },
            message: String::new(),
            retry_at: None,
        },
        last: None,
        starts: 0,
        backoff: None,
        pull_failures: 0,
        started: false,
        ready: false,
        probes,
        post_start: hook(lifecycle.and_then(|l| l.post_start.as_ref())),
        pre_stop: hook(lifecycle.and_then(|l| l.pre_stop.as_ref())),
    }
}

/// The pod's QoS class, as the kubelet computes it: `Guaranteed` when every container limits
/// cpu and memory and requests the same (requests default to limits), `BestEffort` when no
/// container requests or limits anything, `Burstable` otherwise.
pub fn qos_class(pod: &Pod) -> &'static str {
    let all = || pod.spec.init_containers.iter().chain(&pod.spec.containers);
    let best_effort =
        all().all(|c| c.resources.requests.is_empty() && c.resources.limits.is_empty());
    if best_effort {
        return "BestEffort";
    }
    let guaranteed = all().all(|c| {
        ["cpu", "memory"].iter().all(|r| {
            let limit = c.resources.limits.get(*r);
            let request = c.resources.requests.get(*r).or(limit);
            limit.is_some() && request == limit
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// The runtime's container spec for one of the pod's containers.
pub fn container_spec(pod: &Pod, slot: Slot, attempt: u32) -> Option<ContainerSpec> {
    let (c, init) = match slot {
        Slot::Init(i) => (pod.spec.init_containers.get(i)?, true),
        Slot::App(i) => (pod.spec.containers.get(i)?, false),
    };
    let req = |r: &str| c.resources.requests.get(r).map(|q| q.milli_value());
    let lim = |r: &str| c.resources.limits.get(r);
    Some(ContainerSpec {
        pod_uid: pod.metadata.uid.clone(),
        name: c.name.clone(),
        image: c.image.clone(),
        command: c.command.clone(),
        args: c.args.clone(),
        env: c
            .env
            .iter()
            .map(|e| (e.name.clone(), e.value.clone()))
            .collect(),
        working_dir: c.working_dir.clone(),
        ports: c.ports.iter().map(|p| p.container_port).collect(),
        resources: Resources {
            // Requests default to limits, as the API server defaults them.
            cpu_request_milli: req("cpu")
                .or_else(|| lim("cpu").map(|q| q.milli_value()))
                .unwrap_or(0),
            cpu_limit_milli: lim("cpu").map(|q| q.milli_value()),
            memory_limit_bytes: lim("memory").map(|q| q.value()),
        },
        init,
        attempt,
    })
}

impl PodEngine {
    /// An engine for `pod`; `admission` is the node-side admission verdict.
    pub fn new(cfg: EngineConfig, pod: &Pod, admission: Result<(), Rejection>) -> PodEngine {
        let policy = match pod.spec.restart_policy.as_str() {
            "OnFailure" => Policy::OnFailure,
            "Never" => Policy::Never,
            _ => Policy::Always,
        };
        let grace = Duration::from_secs(
            u64::try_from(
                pod.spec
                    .termination_grace_period_seconds
                    .unwrap_or(30)
                    .max(0),
            )
            .unwrap_or(30),
        );
        let scheduled_at = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "PodScheduled"))
            .and_then(|c| c.last_transition_time);
        PodEngine {
            cfg,
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            policy,
            grace,
            stage: Stage::New,
            rejection: admission.err(),
            sandbox: None,
            sandbox_attempt: 0,
            sandbox_retry_at: None,
            sandbox_message: String::new(),
            sandbox_stopping: false,
            sandbox_in_flight: false,
            init: pod
                .spec
                .init_containers
                .iter()
                .map(|c| slot_state(c, true))
                .collect(),
            app: pod
                .spec
                .containers
                .iter()
                .map(|c| slot_state(c, false))
                .collect(),
            start_time: pod.status.as_ref().and_then(|s| s.start_time),
            deleting: false,
            removed: false,
            stop_deadline: None,
            terminal: None,
            failure_reason: String::new(),
            conditions: Vec::new(),
            scheduled_at,
            qos: qos_class(pod),
            out: Vec::new(),
        }
    }

    /// Feeds one input; returns the actions it calls for, in order.
    pub fn step(&mut self, clock: Clock, input: Input) -> Vec<Action> {
        match input {
            Input::Start { adopted } => self.on_start(clock, adopted),
            Input::SandboxReady(sb) => self.on_sandbox_ready(sb),
            Input::SandboxFailed { message } => {
                self.sandbox_in_flight = false;
                self.sandbox_message = message;
                if self.stage == Stage::Sandbox {
                    self.sandbox_retry_at = Some(clock.now + self.cfg.sandbox_retry);
                }
            }
            Input::Started { slot, id } => self.on_started(clock, slot, id),
            Input::StartFailed { slot, error } => self.on_start_failed(clock, slot, error),
            Input::PostStartDone { slot, id, error } => self.on_post_start(slot, &id, error),
            Input::Exited { slot, id, exit } => self.on_exited(clock, slot, &id, exit),
            Input::ProbeDone {
                slot,
                id,
                kind,
                success,
            } => self.on_probe(clock, slot, &id, kind, success),
            Input::SandboxStopped => self.on_sandbox_stopped(),
            Input::Delete { grace } => self.on_delete(clock, grace, false),
            Input::Removed => self.on_delete(clock, Duration::ZERO, true),
            Input::Tick => {}
        }
        self.advance(clock);
        self.track_conditions(clock.wall);
        std::mem::take(&mut self.out)
    }

    /// The earliest moment a `Tick` has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        if matches!(self.stage, Stage::Stopping | Stage::Stopped | Stage::Done) {
            return None;
        }
        let mut best = self.sandbox_retry_at;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                best = Some(best.map_or(t, |b| b.min(t)));
            }
        };
        for s in self.init.iter().chain(&self.app) {
            match &s.run {
                Run::Waiting { retry_at, .. } => consider(*retry_at),
                Run::Running {
                    post_start_pending: false,
                    stopping: false,
                    ..
                } => {
                    for p in s.probes.iter().filter(|p| !p.in_flight) {
                        consider(p.next_at);
                    }
                }
                _ => {}
            }
        }
        best
    }

    /// The pod's sandbox, once it runs.
    pub fn sandbox(&self) -> Option<&Sandbox> {
        self.sandbox.as_ref()
    }

    /// The pod object is gone or deleted and everything is cleaned up: the worker may exit.
    pub fn is_done(&self) -> bool {
        self.stage == Stage::Done
    }

    /// The object vanished from the API: status must not be written any more.
    pub fn is_removed(&self) -> bool {
        self.removed
    }

    /// Succeeded or Failed: the pod's resources no longer count against the node.
    pub fn is_terminal(&self) -> bool {
        self.terminal.is_some() || self.stage == Stage::Rejected
    }

    fn slot(&mut self, slot: Slot) -> Option<&mut SlotState> {
        slot_of(&mut self.init, &mut self.app, slot)
    }

    fn on_start(&mut self, clock: Clock, adopted: Option<Adopted>) {
        if self.stage != Stage::New {
            return;
        }
        if self.rejection.is_some() {
            self.stage = Stage::Rejected;
            self.terminal = Some("Failed");
            return;
        }
        self.start_time.get_or_insert(clock.wall);
        match adopted {
            Some(a) if a.sandbox.ready => self.adopt(clock, a),
            Some(a) => {
                // A stopped sandbox cannot be reused: clear it away and start afresh.
                for c in &a.containers {
                    self.out.push(Action::RemoveContainer { id: c.id.clone() });
                }
                self.out.push(Action::RemoveSandbox { id: a.sandbox.id });
                self.sandbox_attempt = 1;
                self.sandbox_in_flight = true;
                self.stage = Stage::Sandbox;
                self.out.push(Action::RunSandbox { attempt: 1 });
            }
            None => {
                self.stage = Stage::Sandbox;
                self.sandbox_in_flight = true;
                self.out.push(Action::RunSandbox { attempt: 0 });
            }
        }
    }

    /// Takes over what the runtime runs for the pod: the newest container of each slot is
    /// followed (running) or judged by its exit; older ones are removed.
    fn adopt(&mut self, clock: Clock, a: Adopted) {
        self.sandbox = Some(a.sandbox);
        let mut containers = a.containers;
        containers.sort_by_key(|c| std::cmp::Reverse(c.attempt));
        let mut exits = Vec::new();
        for c in containers {
            let found = if c.init {
                self.init
                    .iter()
                    .position(|s| s.name == c.name)
                    .map(Slot::Init)
            } else {
                self.app
                    .iter()
                    .position(|s| s.name == c.name)
                    .map(Slot::App)
            };
            let Some(slot) = found else {
                self.out.push(Action::RemoveContainer { id: c.id });
                continue;
            };
            let Some(s) = slot_of(&mut self.init, &mut self.app, slot) else {
                continue;
            };
            if s.starts > 0 {
                // An older attempt: the newest was taken already.
                self.out.push(Action::RemoveContainer { id: c.id });
                continue;
            }
            s.starts = c.attempt + 1;
            match c.state {
                ContainerState::Running { started_at } => {
                    s.run = Run::Running {
                        id: c.id.clone(),
                        started: clock.now,
                        started_wall: started_at,
                        post_start_pending: false,
                        stopping: false,
                    };
                    Self::arm_probes(s, clock.now, clock.now);
                    self.out.push(Action::Watch { slot, id: c.id });
                }
                ContainerState::Exited(exit) => {
                    s.run = Run::Running {
                        id: c.id.clone(),
                        started: clock.now,
                        started_wall: exit.started_at,
                        post_start_pending: false,
                        stopping: false,
                    };
                    exits.push((slot, c.id, exit));
                }
                ContainerState::Created => {
                    s.starts = c.attempt;
                    self.out.push(Action::RemoveContainer { id: c.id });
                }
            }
        }
        let app_seen = self.app.iter().any(|s| s.starts > 0);
        self.stage = if app_seen { Stage::Run } else { Stage::Init };
        for (slot, id, exit) in exits {
            self.on_exited(clock, slot, &id, exit);
        }
    }

    fn on_sandbox_ready(&mut self, sb: Sandbox) {
        self.sandbox_in_flight = false;
        self.sandbox_message.clear();
        self.sandbox = Some(sb);
        if self.stage == Stage::Sandbox {
            self.stage = Stage::Init;
        }
    }

    fn on_started(&mut self, clock: Clock, slot: Slot, id: String) {
        let stopping = self.stage == Stage::Stopping;
        let remaining = self
            .stop_deadline
            .map_or(Duration::ZERO, |d| d.saturating_duration_since(clock.now));
        let Some(s) = slot_of(&mut self.init, &mut self.app, slot) else {
            return;
        };
        if s.run != Run::Starting {
            return;
        }
        s.starts += 1;
        s.pull_failures = 0;
        let post_start = s.post_start.clone().filter(|_| !stopping);
        s.run = Run::Running {
            id: id.clone(),
            started: clock.now,
            started_wall: Some(clock.wall),
            post_start_pending: post_start.is_some(),
            stopping,
        };
        s.started = false;
        s.ready = false;
        if post_start.is_none() {
            Self::arm_probes(s, clock.now, clock.now);
        }
        self.out.push(Action::Watch {
            slot,
            id: id.clone(),
        });
        if stopping {
            self.out.push(Action::StopContainer {
                slot,
                id,
                grace: remaining,
                pre_stop: None,
            });
        } else if let Some(command) = post_start {
            self.out.push(Action::PostStart { slot, id, command });
        }
    }

    fn next_backoff(cfg: &EngineConfig, s: &mut SlotState) -> Duration {
        let delay = s.backoff.unwrap_or(Duration::ZERO);
        s.backoff = Some(if delay.is_zero() {
            cfg.backoff_initial
        } else {
            (delay * 2).min(cfg.backoff_max)
        });
        delay
    }

    fn on_start_failed(&mut self, clock: Clock, slot: Slot, error: RuntimeError) {
        let stopping = self.stage == Stage::Stopping;
        let cfg = self.cfg;
        let Some(s) = self.slot(slot) else { return };
        if s.run != Run::Starting {
            return;
        }
        let (reason, message) = match &error {
            RuntimeError::ImageNotFound { .. } => {
                s.pull_failures += 1;
                let reason = if s.pull_failures == 1 {
                    "ErrImagePull"
                } else {
                    "ImagePullBackOff"
                };
                (reason, error.to_string())
            }
            _ => ("CreateContainerError", error.to_string()),
        };
        // Failed starts back off from the first retry on: a missing image does not appear
        // by itself within milliseconds.
        if s.backoff.is_none() {
            s.backoff = Some(cfg.backoff_initial);
        }
        let delay = Self::next_backoff(&cfg, s);
        s.run = Run::Waiting {
            reason: reason.into(),
            message,
            retry_at: (!stopping).then_some(clock.now + delay),
        };
    }

    fn on_post_start(&mut self, slot: Slot, id: &str, error: Option<String>) {
        let grace = self.grace;
        let Some(s) = slot_of(&mut self.init, &mut self.app, slot) else {
            return;
        };
        let Run::Running {
            id: cur,
            started,
            post_start_pending,
            stopping,
            ..
        } = &mut s.run
        else {
            return;
        };
        if cur != id || !*post_start_pending {
            return;
        }
        *post_start_pending = false;
        let started = *started;
        if error.is_some() && !*stopping {
            *stopping = true;
            self.out.push(Action::StopContainer {
                slot,
                id: id.to_string(),
                grace,
                pre_stop: None,
            });
        } else if !*stopping {
            Self::arm_probes(s, started, started);
        }
    }

    /// Schedules the probes of a container that has started: the startup probe first; liveness
    /// and readiness once it passed (at once when there is none).
    fn arm_probes(s: &mut SlotState, started: Instant, now: Instant) {
        let has_startup = s.probes.iter().any(|p| p.kind == ProbeKind::Startup);
        s.started = !has_startup;
        let no_readiness = !s.probes.iter().any(|p| p.kind == ProbeKind::Readiness);
        s.ready = s.started && no_readiness;
        for p in &mut s.probes {
            p.in_flight = false;
            p.successes = 0;
            p.failures = 0;
            let active = p.kind == ProbeKind::Startup || !has_startup;
            p.next_at = active.then(|| (started + p.initial_delay).max(now));
        }
    }

    fn should_restart(&self, slot: Slot, exit_code: i32) -> bool {
        match (self.policy, slot) {
            (Policy::Never, _) => false,
            (Policy::OnFailure, _) | (_, Slot::Init(_)) => exit_code != 0,
            (Policy::Always, Slot::App(_)) => true,
        }
    }

    fn on_exited(&mut self, clock: Clock, slot: Slot, id: &str, mut exit: Exit) {
        if exit.reason.is_empty() {
            exit.reason = if exit.exit_code == 0 {
                "Completed".into()
            } else {
                "Error".into()
            };
        }
        let restart = self.stage != Stage::Stopping && self.should_restart(slot, exit.exit_code);
        let cfg = self.cfg;
        let (name, pod) = (self.name.clone(), self.display());
        let Some(s) = slot_of(&mut self.init, &mut self.app, slot) else {
            return;
        };
        let Run::Running {
            id: cur, started, ..
        } = &s.run
        else {
            return;
        };
        if cur != id {
            return;
        }
        let ran = clock.now.saturating_duration_since(*started);
        s.ready = false;
        s.started = false;
        for p in &mut s.probes {
            p.next_at = None;
            p.in_flight = false;
        }
        if restart {
            if ran >= cfg.backoff_reset {
                s.backoff = None;
            }
            let delay = Self::next_backoff(&cfg, s);
            // One dead container per slot stays for `logs --previous`; older ones go.
            if let Some((old, _)) = s.last.replace((id.to_string(), exit)) {
                self.out.push(Action::RemoveContainer { id: old });
            }
            s.run = Run::Waiting {
                reason: if delay.is_zero() {
                    "ContainerCreating".into()
                } else {
                    "CrashLoopBackOff".into()
                },
                message: if delay.is_zero() {
                    String::new()
                } else {
                    format!(
                        "back-off {} restarting failed container={name} pod={pod}",
                        human(delay)
                    )
                },
                retry_at: Some(clock.now + delay),
            };
            return;
        }
        let failed = exit.exit_code != 0;
        s.run = Run::Exited {
            id: id.to_string(),
            exit,
        };
        if let Slot::Init(_) = slot
            && failed
            && self.stage != Stage::Stopping
        {
            // restartPolicy Never: a failed init container fails the pod.
            self.failure_reason = "Init:Error".into();
            self.begin_stop(clock, Duration::ZERO);
        }
    }

    fn display(&self) -> String {
        format!("{}_{}({})", self.name, self.namespace, self.uid)
    }

    fn on_probe(&mut self, clock: Clock, slot: Slot, id: &str, kind: ProbeKind, success: bool) {
        let grace = self.grace;
        let Some(s) = slot_of(&mut self.init, &mut self.app, slot) else {
            return;
        };
        let Run::Running {
            id: cur,
            stopping,
            started,
            ..
        } = &mut s.run
        else {
            return;
        };
        if cur != id || *stopping {
            return;
        }
        let started = *started;
        let Some(i) = s.probes.iter().position(|p| p.kind == kind) else {
            return;
        };
        let p = &mut s.probes[i];
        p.in_flight = false;
        if success {
            p.successes += 1;
            p.failures = 0;
        } else {
            p.failures += 1;
            p.successes = 0;
        }
        let (passed, failed) = (
            p.successes >= p.success_threshold,
            p.failures >= p.failure_threshold,
        );
        match kind {
            ProbeKind::Startup if passed => {
                s.started = true;
                let no_readiness = !s.probes.iter().any(|p| p.kind == ProbeKind::Readiness);
                s.ready = no_readiness;
                for p in &mut s.probes {
                    if p.kind == ProbeKind::Startup {
                        p.next_at = None;
                    } else {
                        p.next_at = Some((started + p.initial_delay).max(clock.now));
                    }
                }
            }
            ProbeKind::Readiness if passed => s.ready = true,
            ProbeKind::Readiness if failed => s.ready = false,
            ProbeKind::Startup | ProbeKind::Liveness if failed => {
                // The kubelet kills the container and lets the restart policy decide.
                if let Run::Running { stopping, .. } = &mut s.run {
                    *stopping = true;
                }
                s.ready = false;
                for p in &mut s.probes {
                    p.next_at = None;
                }
                self.out.push(Action::StopContainer {
                    slot,
                    id: id.to_string(),
                    grace,
                    pre_stop: None,
                });
            }
            _ => {}
        }
    }

    fn on_delete(&mut self, clock: Clock, grace: Duration, removed: bool) {
        self.removed |= removed;
        if !removed {
            self.deleting = true;
        }
        match self.stage {
            Stage::New | Stage::Rejected => self.finish(),
            Stage::Stopped => self.finish(),
            Stage::Done => {}
            Stage::Stopping => {
                // A shorter grace (or removal) shortens the stop of what still runs.
                let deadline = clock.now + grace;
                if self.stop_deadline.is_none_or(|d| deadline < d) {
                    self.stop_deadline = Some(deadline);
                    self.stop_running(grace, true);
                }
            }
            Stage::Sandbox | Stage::Init | Stage::Run => self.begin_stop(clock, grace),
        }
    }

    /// Stops every running container (graceful with preStop unless `grace` is zero).
    fn begin_stop(&mut self, clock: Clock, grace: Duration) {
        self.stage = Stage::Stopping;
        self.stop_deadline = Some(clock.now + grace);
        self.sandbox_retry_at = None;
        self.stop_running(grace, false);
    }

    fn stop_running(&mut self, grace: Duration, again: bool) {
        let mut stops = Vec::new();
        for (slot, s) in self
            .init
            .iter_mut()
            .enumerate()
            .map(|(i, s)| (Slot::Init(i), s))
            .chain(
                self.app
                    .iter_mut()
                    .enumerate()
                    .map(|(i, s)| (Slot::App(i), s)),
            )
        {
            match &mut s.run {
                Run::Waiting { retry_at, .. } => *retry_at = None,
                Run::Running { id, stopping, .. } if !*stopping || again => {
                    let pre_stop = if *stopping || grace.is_zero() {
                        None
                    } else {
                        s.pre_stop.clone()
                    };
                    *stopping = true;
                    stops.push(Action::StopContainer {
                        slot,
                        id: id.clone(),
                        grace,
                        pre_stop,
                    });
                }
                _ => {}
            }
            s.ready = false;
        }
        self.out.extend(stops);
    }

    fn on_sandbox_stopped(&mut self) {
        if let Some(sb) = &mut self.sandbox {
            sb.ready = false;
        }
        self.sandbox_stopping = false;
        if self.stage == Stage::Stopping {
            self.stage = Stage::Stopped;
            if self.terminal.is_none() {
                self.terminal = Some(self.final_phase());
            }
            if self.deleting || self.removed {
                self.finish();
            }
        }
    }

    /// Removes every container and the sandbox, deletes the object unless it is gone already.
    fn finish(&mut self) {
        if self.stage == Stage::Done {
            return;
        }
        let running = self
            .init
            .iter()
            .chain(&self.app)
            .any(|s| matches!(s.run, Run::Running { .. } | Run::Starting));
        if running || self.sandbox.as_ref().is_some_and(|s| s.ready) {
            // Still something to stop first (a completed pod whose sandbox is up).
            self.stage = Stage::Stopping;
            return;
        }
        for s in self.init.iter_mut().chain(self.app.iter_mut()) {
            if let Some((id, _)) = s.last.take() {
                self.out.push(Action::RemoveContainer { id });
            }
            if let Run::Exited { id, .. } = &s.run {
                self.out.push(Action::RemoveContainer { id: id.clone() });
            }
        }
        if let Some(sb) = &self.sandbox {
            self.out.push(Action::RemoveSandbox { id: sb.id.clone() });
        }
        if self.terminal.is_none() && self.rejection.is_none() {
            self.terminal = Some(self.final_phase());
        }
        if self.deleting && !self.removed {
            self.out.push(Action::DeletePod);
        }
        self.stage = Stage::Done;
    }

    /// Starts what is due, runs due probes, and notices when the pod is finished.
    fn advance(&mut self, clock: Clock) {
        let now = clock.now;
        if self.stage == Stage::Sandbox
            && self.sandbox.is_none()
            && self.sandbox_retry_at.is_some_and(|t| t <= now)
        {
            self.sandbox_retry_at = None;
            self.sandbox_attempt += 1;
            self.sandbox_in_flight = true;
            self.out.push(Action::RunSandbox {
                attempt: self.sandbox_attempt,
            });
        }
        if self.stage == Stage::Init {
            let next = self
                .init
                .iter()
                .position(|s| !matches!(&s.run, Run::Exited { exit, .. } if exit.exit_code == 0));
            match next {
                None => self.stage = Stage::Run,
                Some(i) => self.start_if_due(Slot::Init(i), now),
            }
        }
        if self.stage == Stage::Run {
            for i in 0..self.app.len() {
                self.start_if_due(Slot::App(i), now);
            }
            if !self.app.is_empty() && self.app.iter().all(|s| matches!(s.run, Run::Exited { .. }))
            {
                self.begin_stop(clock, Duration::ZERO);
            }
        }
        if matches!(self.stage, Stage::Init | Stage::Run) {
            self.run_due_probes(now);
        }
        if self.stage == Stage::Stopping {
            let busy = self
                .init
                .iter()
                .chain(&self.app)
                .any(|s| matches!(s.run, Run::Running { .. } | Run::Starting));
            let sandbox_pending = self.sandbox_in_flight;
            if !busy && !sandbox_pending && !self.sandbox_stopping {
                match &self.sandbox {
                    Some(sb) if sb.ready => {
                        self.sandbox_stopping = true;
                        self.out.push(Action::StopSandbox { id: sb.id.clone() });
                    }
                    _ => {
                        self.stage = Stage::Stopped;
                        if self.terminal.is_none() {
                            self.terminal = Some(self.final_phase());
                        }
                        if self.deleting || self.removed {
                            self.finish();
                        }
                    }
                }
            }
        }
    }

    fn start_if_due(&mut self, slot: Slot, now: Instant) {
        let Some(s) = self.slot(slot) else { return };
        if let Run::Waiting { retry_at, .. } = &s.run
            && retry_at.is_none_or(|t| t <= now)
        {
            let attempt = s.starts;
            s.run = Run::Starting;
            self.out.push(Action::StartContainer { slot, attempt });
        }
    }

    fn run_due_probes(&mut self, now: Instant) {
        let mut due = Vec::new();
        for (i, s) in self.app.iter_mut().enumerate() {
            let Run::Running {
                id,
                post_start_pending: false,
                stopping: false,
                ..
            } = &s.run
            else {
                continue;
            };
            for p in &mut s.probes {
                if !p.in_flight && p.next_at.is_some_and(|t| t <= now) {
                    p.in_flight = true;
                    p.next_at = Some(now + p.period);
                    due.push(Action::Probe {
                        slot: Slot::App(i),
                        id: id.clone(),
                        kind: p.kind,
                        handler: p.handler.clone(),
                        timeout: p.timeout,
                    });
                }
            }
        }
        self.out.extend(due);
    }

    /// The phase of a pod whose containers have all stopped.
    fn final_phase(&self) -> &'static str {
        let exits_ok = self.app.iter().all(|s| match &s.run {
            Run::Exited { exit, .. } => exit.exit_code == 0,
            Run::Waiting { .. } => s.last.as_ref().is_some_and(|(_, e)| e.exit_code == 0),
            _ => false,
        });
        let init_ok = self.failure_reason.is_empty();
        if exits_ok && init_ok && !self.app.is_empty() {
            "Succeeded"
        } else {
            "Failed"
        }
    }

    /// The phase as the kubelet computes it from the containers' states.
    fn phase(&self) -> &'static str {
        if self.rejection.is_some() {
            return "Failed";
        }
        if let Some(p) = self.terminal {
            return p;
        }
        if matches!(self.stage, Stage::New | Stage::Sandbox | Stage::Init) {
            return "Pending";
        }
        let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
        for s in &self.app {
            match &s.run {
                Run::Running { .. } => running += 1,
                Run::Exited { exit, .. } => {
                    stopped += 1;
                    if exit.exit_code == 0 {
                        succeeded += 1;
                    }
                }
                Run::Waiting { .. } | Run::Starting if s.last.is_some() => stopped += 1,
                Run::Waiting { .. } | Run::Starting => waiting += 1,
            }
        }
        if waiting > 0 {
            "Pending"
        } else if running > 0 || (stopped > 0 && self.policy == Policy::Always) {
            // Restarting under Always still counts as Running (CrashLoopBackOff shows there).
            "Running"
        } else if stopped == succeeded && stopped > 0 {
            "Succeeded"
        } else if self.policy == Policy::Never {
            "Failed"
        } else {
            "Running"
        }
    }

    fn condition_values(&self) -> [(Cond, bool); 3] {
        let initialized = matches!(self.stage, Stage::Run)
            || (matches!(self.stage, Stage::Stopping | Stage::Stopped | Stage::Done)
                && self
                    .init
                    .iter()
                    .all(|s| matches!(&s.run, Run::Exited { exit, .. } if exit.exit_code == 0)));
        let ready = !self.app.is_empty()
            && self.app.iter().all(|s| s.ready)
            && matches!(self.stage, Stage::Run);
        [
            (Cond::Initialized, initialized),
            (Cond::ContainersReady, ready),
            (Cond::Ready, ready),
        ]
    }

    fn track_conditions(&mut self, wall: Time) {
        for (c, v) in self.condition_values() {
            match self.conditions.iter_mut().find(|(k, _, _)| *k == c) {
                Some((_, old, since)) if *old != v => {
                    *old = v;
                    *since = wall;
                }
                Some(_) => {}
                None => self.conditions.push((c, v, wall)),
            }
        }
    }

    fn container_status(&self, s: &SlotState, scheme: &str, init: bool) -> ContainerStatus {
        let terminated = |id: &str, e: &Exit| ContainerStateTerminated {
            exit_code: e.exit_code,
            signal: None,
            reason: e.reason.clone(),
            message: e.message.clone(),
            started_at: e.started_at,
            finished_at: e.finished_at,
            container_id: format!("{scheme}://{id}"),
        };
        let initializing = !init
            && !self.init.is_empty()
            && matches!(self.stage, Stage::New | Stage::Sandbox | Stage::Init);
        let (state, container_id) = match &s.run {
            Run::Waiting {
                reason, message, ..
            } => (
                ApiState {
                    waiting: Some(ContainerStateWaiting {
                        // App containers wait for the init containers, as the kubelet says.
                        reason: if initializing {
                            "PodInitializing".into()
                        } else {
                            reason.clone()
                        },
                        message: message.clone(),
                    }),
                    ..ApiState::default()
                },
                s.last.as_ref().map(|(id, _)| id.clone()),
            ),
            Run::Starting => (
                ApiState {
                    waiting: Some(ContainerStateWaiting {
                        reason: if init {
                            "PodInitializing".into()
                        } else {
                            "ContainerCreating".into()
                        },
                        message: String::new(),
                    }),
                    ..ApiState::default()
                },
                s.last.as_ref().map(|(id, _)| id.clone()),
            ),
            Run::Running {
                id, started_wall, ..
            } => (
                ApiState {
                    running: Some(ContainerStateRunning {
                        started_at: *started_wall,
                    }),
                    ..ApiState::default()
                },
                Some(id.clone()),
            ),
            Run::Exited { id, exit } => (
                ApiState {
                    terminated: Some(terminated(id, exit)),
                    ..ApiState::default()
                },
                Some(id.clone()),
            ),
        };
        ContainerStatus {
            name: s.name.clone(),
            state: Some(state),
            last_state: s.last.as_ref().map(|(id, e)| ApiState {
                terminated: Some(terminated(id, e)),
                ..ApiState::default()
            }),
            ready: s.ready,
            restart_count: i32::try_from(s.starts.saturating_sub(1)).unwrap_or(i32::MAX),
            image: s.image.clone(),
            image_id: String::new(),
            container_id: container_id.map_or_else(String::new, |id| format!("{scheme}://{id}")),
            started: (!init).then_some(s.started && matches!(s.run, Run::Running { .. })),
        }
    }

    /// The pod status to report, from the engine's view. `scheme` prefixes container IDs.
    pub fn status(&self, host_ip: &str, scheme: &str) -> PodStatus {
        let mut status = PodStatus {
            phase: self.phase().into(),
            host_ip: host_ip.into(),
            start_time: self.start_time,
            qos_class: self.qos.into(),
            ..PodStatus::default()
        };
        status.conditions.push(PodCondition {
            type_: "PodScheduled".into(),
            status: "True".into(),
            last_transition_time: self.scheduled_at.or(self.start_time),
            ..PodCondition::default()
        });
        if let Some(r) = &self.rejection {
            status.reason = r.reason.clone();
            status.message = r.message.clone();
            return status;
        }
        for (c, v, since) in &self.conditions {
            let (type_, reason) = match c {
                Cond::Initialized => ("Initialized", "ContainersNotInitialized"),
                Cond::ContainersReady => ("ContainersReady", "ContainersNotReady"),
                Cond::Ready => ("Ready", "ContainersNotReady"),
            };
            let reason = if *v {
                String::new()
            } else if *c == Cond::Ready && self.terminal.is_some() {
                "PodCompleted".into()
            } else {
                reason.into()
            };
            status.conditions.push(PodCondition {
                type_: type_.into(),
                status: if *v { "True" } else { "False" }.into(),
                last_transition_time: Some(*since),
                reason,
                ..PodCondition::default()
            });
        }
        if !self.sandbox_message.is_empty() {
            status.message = format!("sandbox: {}", self.sandbox_message);
        }
        if let Some(sb) = &self.sandbox {
            status.pod_ip = sb.ip.clone();
        }
        status.init_container_statuses = self
            .init
            .iter()
            .map(|s| self.container_status(s, scheme, true))
            .collect();
        status.container_statuses = self
            .app
            .iter()
            .map(|s| self.container_status(s, scheme, false))
            .collect();
        status
    }
}

/// `10s`, `1m20s`, `5m0s`: durations as the kubelet prints them in back-off messages.
fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else {
        format!("{}m{}s", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_proto::api::{Kind, Object};

    fn pod(spec: serde_json::Value) -> Pod {
        let json = serde_json::json!({"metadata": {"name": "p", "namespace": "default", "uid": "u"},
                                      "spec": spec});
        match Object::from_json(Kind::Pod, json.to_string().as_bytes()).expect("decodes") {
            Object::Pod(p) => p,
            _ => unreachable!(),
        }
    }

    fn at(t0: Instant, secs: u64) -> Clock {
        Clock {
            now: t0 + Duration::from_secs(secs),
            wall: Time::from_unix(1_800_000_000 + secs as i64).expect("time"),
        }
    }

    fn sandbox() -> Sandbox {
        Sandbox {
            id: "sb".into(),
            ip: "10.0.0.2".into(),
            ready: true,
            ..Sandbox::default()
        }
    }

    fn one_container() -> Pod {
        pod(serde_json::json!({"containers": [{"name": "c", "image": "i"}]}))
    }

    /// Deleting a pod while its sandbox is still being created waits for the sandbox, starts
    /// nothing in it, stops and removes it, then deletes the object.
    #[test]
    fn delete_during_sandbox_creation() {
        let t0 = Instant::now();
        let mut e = PodEngine::new(EngineConfig::default(), &one_container(), Ok(()));
        assert_eq!(
            e.step(at(t0, 0), Input::Start { adopted: None }),
            vec![Action::RunSandbox { attempt: 0 }]
        );
        let a = e.step(
            at(t0, 1),
            Input::Delete {
                grace: Duration::from_secs(30),
            },
        );
        assert!(a.is_empty(), "{a:?}");
        let a = e.step(at(t0, 2), Input::SandboxReady(sandbox()));
        assert_eq!(a, vec![Action::StopSandbox { id: "sb".into() }]);
        let a = e.step(at(t0, 3), Input::SandboxStopped);
        assert_eq!(
            a,
            vec![Action::RemoveSandbox { id: "sb".into() }, Action::DeletePod]
        );
        assert!(e.is_done());
        assert_eq!(e.status("h", "sim").phase, "Failed");
    }

    /// A container that starts while the pod is being deleted is stopped at once with what is
    /// left of the grace period, and without preStop.
    #[test]
    fn a_late_start_is_stopped_with_the_remaining_grace() {
        let t0 = Instant::now();
        let mut e = PodEngine::new(EngineConfig::default(), &one_container(), Ok(()));
        e.step(at(t0, 0), Input::Start { adopted: None });
        let a = e.step(at(t0, 0), Input::SandboxReady(sandbox()));
        assert_eq!(
            a,
            vec![Action::StartContainer {
                slot: Slot::App(0),
                attempt: 0
            }]
        );
        e.step(
            at(t0, 1),
            Input::Delete {
                grace: Duration::from_secs(10),
            },
        );
        let a = e.step(
            at(t0, 4),
            Input::Started {
                slot: Slot::App(0),
                id: "c1".into(),
            },
        );
        assert!(a.contains(&Action::StopContainer {
            slot: Slot::App(0),
            id: "c1".into(),
            grace: Duration::from_secs(7),
            pre_stop: None,
        }));
    }

    /// Probe timers: the earliest due probe is the next deadline; a Tick at that time runs
    /// it once (not again while it is in flight).
    #[test]
    fn probes_are_scheduled_by_their_period() {
        let t0 = Instant::now();
        let p = pod(
            serde_json::json!({"containers": [{"name": "c", "image": "i",
            "readinessProbe": {"exec": {"command": ["true"]}, "initialDelaySeconds": 5, "periodSeconds": 3}}]}),
        );
        let mut e = PodEngine::new(EngineConfig::default(), &p, Ok(()));
        e.step(at(t0, 0), Input::Start { adopted: None });
        e.step(at(t0, 0), Input::SandboxReady(sandbox()));
        e.step(
            at(t0, 0),
            Input::Started {
                slot: Slot::App(0),
                id: "c1".into(),
            },
        );
        assert_eq!(e.next_deadline(), Some(t0 + Duration::from_secs(5)));
        let a = e.step(at(t0, 5), Input::Tick);
        assert!(matches!(
            a.as_slice(),
            [Action::Probe {
                kind: ProbeKind::Readiness,
                ..
            }]
        ));
        assert!(e.step(at(t0, 5), Input::Tick).is_empty());
        assert_eq!(
            e.status("h", "sim")
                .conditions
                .iter()
                .find(|c| c.type_ == "Ready")
                .map(|c| c.status.as_str()),
            Some("False")
        );
        e.step(
            at(t0, 5),
            Input::ProbeDone {
                slot: Slot::App(0),
                id: "c1".into(),
                kind: ProbeKind::Readiness,
                success: true,
            },
        );
        assert_eq!(e.next_deadline(), Some(t0 + Duration::from_secs(8)));
        let s = e.status("h", "sim");
        assert_eq!(
            s.conditions
                .iter()
                .find(|c| c.type_ == "Ready")
                .map(|c| c.status.as_str()),
            Some("True")
        );
        assert_eq!(s.pod_ip, "10.0.0.2");
    }

    #[test]
    fn qos_classes() {
        assert_eq!(qos_class(&one_container()), "BestEffort");
        let g = pod(
            serde_json::json!({"containers": [{"name": "c", "image": "i",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}),
        );
        assert_eq!(qos_class(&g), "Guaranteed");
        let b = pod(
            serde_json::json!({"containers": [{"name": "c", "image": "i",
            "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1", "memory": "1Gi"}}}]}),
        );
        assert_eq!(qos_class(&b), "Burstable");
    }
}
