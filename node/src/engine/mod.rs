//! The pod worker's engine: one pod's lifecycle as a pure state machine. Inputs (runtime
//! results, timer ticks, the pod being deleted) go in through [`PodEngine::step`]; the actions
//! to perform come out; nothing here does I/O or reads a clock, so every transition is tested
//! with made-up times. [`crate::worker`] is the thin async loop that performs the actions.
//!
//! The pod's stages (`Stage`):
//!
//! ```text
//!            admission refused
//!   ┌────────────────────────────────────────────────────────────► Rejected (Failed)
//!   │                      adopted sandbox that runs: Init, or Run once an app container ran
//! Start ──RunSandbox──► Sandbox ──ready──► Init ──all init exit 0──► Run
//!                                          │ init fails, restartPolicy Never   │ every app container
//!                                          └──────────────┬────────────────────┘ exited for good
//!                                                         ▼
//!   Delete (deletionTimestamp) / Removed ─────────► Stopping { deadline } ──containers gone──►
//!       from any stage: preStop, SIGTERM, grace, SIGKILL       StopSandbox ──► Stopped
//!                                                                               │ deleted
//!                                                                               ▼
//!                                                      remove containers, sandbox; DeletePod ──► Done
//! ```
//!
//! The sandbox beside them (`SandboxState`); a retry is due only while the pod waits in
//! `Sandbox`, and a stop waits for a sandbox still being created:
//!
//! ```text
//!                                SandboxFailed                retry_at reached
//! NotCreated ──RunSandbox──► Creating { attempt } ──► Failed { attempt, retry_at } ──► Creating { attempt + 1 }
//!     │                          │ SandboxReady                  (a stop leaves it there)
//!     │ adopted, running         ▼
//!     └────────────────────► Ready(sb) ──StopSandbox──► Stopping(sb) ──SandboxStopped──► Stopped(sb)
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
//!
//! | room        | what                                                                   |
//! |-------------|------------------------------------------------------------------------|
//! | `mod.rs`    | inputs, actions, [`PodEngine::step`], the stages and the sandbox       |
//! | `spec`      | what the spec says: each container's first state, probes, hooks, QoS   |
//! | `container` | starting containers, back-off, postStart, probes, exits, adoption      |
//! | `stop`      | delete and removal, stopping what runs, the final clean-up             |
//! | `status`    | the pod status: phase, conditions, container statuses                  |

use std::time::Duration;

use skiff_proto::api::{Pod, PodCondition, PodConditionType, PodPhase, RestartPolicy, Time};
use tokio::time::Instant;

use crate::runtime::{self, Exit, RuntimeError, Sandbox};

mod container;
mod spec;
mod status;
mod stop;

use container::ran_before;
pub use spec::{
    Handler, ProbeKind, active_deadline_of, container_of, container_spec, hostname_of, qos_class,
};
use spec::{Run, SlotState, grace_of, policy_of, slot_state};
use status::Cond;

/// Timing of restarts, shared by every pod of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// The first back-off after an immediate restart (kubelet: 10 s).
    pub backoff_initial: Duration,
    /// The cap of the doubling back-off (kubelet: 5 min).
    pub backoff_max: Duration,
    /// A container that ran this long before exiting restarts without back-off (10 min).
    pub backoff_reset: Duration,
    /// Wait before trying a failed sandbox again the first time; it doubles with each
    /// failure after that, up to `sandbox_retry_max`.
    pub sandbox_retry: Duration,
    pub sandbox_retry_max: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            backoff_initial: Duration::from_secs(10),
            backoff_max: Duration::from_secs(300),
            backoff_reset: Duration::from_secs(600),
            sandbox_retry: Duration::from_secs(2),
            sandbox_retry_max: Duration::from_secs(60),
        }
    }
}

/// Which container of the pod: an index into `initContainers` or `containers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Slot {
    Init(usize),
    App(usize),
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

/// Why the node's side ends a pod that would otherwise run on: an eviction (a volume over its
/// size limit) or the pod's `activeDeadlineSeconds`. What runs stops within `grace`, nothing
/// starts again, and the pod fails with `reason` and `message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    pub reason: String,
    pub message: String,
    pub grace: Duration,
    /// Marked with a `DisruptionTarget` condition (`TerminationByKubelet`), as the kubelet
    /// marks the pods it evicts.
    pub disruption: bool,
}

impl Ending {
    /// The kubelet's eviction: at once, as `Evicted`.
    pub fn evicted(message: String) -> Ending {
        Ending {
            reason: "Evicted".into(),
            message,
            grace: Duration::ZERO,
            disruption: true,
        }
    }

    /// `activeDeadlineSeconds` passed: stopped within the pod's own grace.
    fn deadline_exceeded(grace: Duration) -> Ending {
        Ending {
            reason: "DeadlineExceeded".into(),
            message: "Pod was active on the node longer than the specified deadline".into(),
            grace,
            disruption: false,
        }
    }
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
    /// A volume could not be set up before the sandbox: waited for and tried again as a
    /// failed sandbox is.
    MountFailed {
        message: String,
    },
    Started {
        slot: Slot,
        id: String,
        /// The image it runs, by digest ([`runtime::Container::image_ref`]).
        image_id: String,
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
    /// The node ends the pod (an eviction): it stops and fails, and stays until deleted.
    End(Ending),
    /// The pod's `activeDeadlineSeconds` now reads so (it may be set or shortened while the
    /// pod runs).
    ActiveDeadline(Option<Duration>),
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

/// Where the pod is in its lifecycle (diagram in the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Constructed; waiting for `Start`.
    New,
    Rejected,
    Sandbox,
    Init,
    Run,
    /// Stopping what runs; containers that start now get what is left until `deadline`.
    Stopping {
        deadline: Instant,
    },
    /// Sandbox stopped; terminal status is final (completed pods wait here to be deleted).
    Stopped,
    Done,
}

/// The pod's sandbox, as far as the engine knows it (diagram in the module docs). One value
/// instead of a flag per step, so that no stop can be asked of a sandbox still being created,
/// and no retry can be due for one that runs.
#[derive(Debug, Clone, PartialEq)]
enum SandboxState {
    /// Nothing asked of the runtime yet (before `Start`, or the pod was refused).
    NotCreated,
    /// `RunSandbox { attempt }` is in flight. `message` is the previous attempt's error,
    /// still shown in the pod status.
    Creating { attempt: u32, message: String },
    /// Attempt `attempt` failed with `message`; the next one is due at `retry_at` unless the
    /// pod stops first.
    Failed {
        attempt: u32,
        retry_at: Instant,
        message: String,
    },
    /// Created by the last attempt, or adopted from the runtime.
    Ready(Sandbox),
    /// `StopSandbox` is in flight.
    Stopping(Sandbox),
    /// Stopped (its `ready` is false); kept for its IP in status and its id for removal.
    Stopped(Sandbox),
}

impl SandboxState {
    /// The sandbox the runtime gave, once there is one.
    fn get(&self) -> Option<&Sandbox> {
        match self {
            SandboxState::Ready(sb) | SandboxState::Stopping(sb) | SandboxState::Stopped(sb) => {
                Some(sb)
            }
            SandboxState::NotCreated
            | SandboxState::Creating { .. }
            | SandboxState::Failed { .. } => None,
        }
    }

    /// Why the last attempt to create the sandbox failed, while it has not been created.
    fn error(&self) -> Option<&str> {
        match self {
            SandboxState::Creating { message, .. } | SandboxState::Failed { message, .. }
                if !message.is_empty() =>
            {
                Some(message)
            }
            _ => None,
        }
    }
}

/// One pod's lifecycle. See the module docs for the diagram.
#[derive(Debug)]
pub struct PodEngine {
    cfg: EngineConfig,
    name: String,
    namespace: String,
    uid: String,
    policy: RestartPolicy,
    grace: Duration,
    stage: Stage,
    rejection: Option<Rejection>,
    sandbox: SandboxState,
    init: Vec<SlotState>,
    app: Vec<SlotState>,
    start_time: Option<Time>,
    deleting: bool,
    removed: bool,
    /// Set when the pod reached Succeeded or Failed.
    terminal: Option<PodPhase>,
    /// Why the node ended the pod, and when.
    ending: Option<(Ending, Time)>,
    /// `activeDeadlineSeconds`, and the moment it passes once the pod has a start time.
    active_deadline: Option<Duration>,
    deadline_at: Option<Instant>,
    failure_reason: String,
    /// Containers the stored status says ran before this worker (an agent restart, a node
    /// reboot): by name, with their end when it is known.
    ran_before: Vec<(String, Option<Exit>)>,
    conditions: Vec<(Cond, bool, Time)>,
    /// The pod's `PodScheduled` condition as the binding wrote it, reported unchanged.
    scheduled: Option<PodCondition>,
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

impl PodEngine {
    /// An engine for `pod`; `admission` is the node-side admission verdict.
    pub fn new(cfg: EngineConfig, pod: &Pod, admission: Result<(), Rejection>) -> PodEngine {
        let scheduled = pod.condition(&PodConditionType::PodScheduled).cloned();
        PodEngine {
            cfg,
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            policy: policy_of(pod),
            grace: grace_of(pod),
            stage: Stage::New,
            rejection: admission.err(),
            sandbox: SandboxState::NotCreated,
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
            ran_before: ran_before(pod),
            deleting: false,
            removed: false,
            terminal: None,
            ending: None,
            active_deadline: active_deadline_of(pod),
            deadline_at: None,
            failure_reason: String::new(),
            conditions: Vec::new(),
            scheduled,
            qos: qos_class(pod),
            out: Vec::new(),
        }
    }

    /// Feeds one input; returns the actions it calls for, in order.
    pub fn step(&mut self, clock: Clock, input: Input) -> Vec<Action> {
        match input {
            Input::Start { adopted } => self.on_start(clock, adopted),
            Input::SandboxReady(sb) => self.on_sandbox_ready(sb),
            Input::SandboxFailed { message } | Input::MountFailed { message } => {
                self.on_sandbox_failed(clock, message)
            }
            Input::Started { slot, id, image_id } => self.on_started(clock, slot, id, image_id),
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
            Input::End(ending) => self.end(clock, ending),
            Input::ActiveDeadline(d) => {
                self.active_deadline = d;
                self.arm_deadline(clock);
            }
            Input::Tick => {}
        }
        self.advance(clock);
        self.track_conditions(clock.wall);
        std::mem::take(&mut self.out)
    }

    /// The earliest moment a `Tick` has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        if matches!(
            self.stage,
            Stage::Stopping { .. } | Stage::Stopped | Stage::Done
        ) {
            return None;
        }
        let mut best = match &self.sandbox {
            SandboxState::Failed { retry_at, .. } => Some(*retry_at),
            _ => None,
        };
        if let Some(at) = self.deadline_at {
            best = Some(best.map_or(at, |b| b.min(at)));
        }
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
        self.sandbox.get()
    }

    /// The pod object is gone or deleted and everything is cleaned up: the worker may exit.
    pub fn is_done(&self) -> bool {
        self.stage == Stage::Done
    }

    /// The object vanished from the API: status must not be written any more.
    pub fn is_removed(&self) -> bool {
        self.removed
    }

    /// The pod's `activeDeadlineSeconds`, as the engine last heard it.
    pub fn active_deadline(&self) -> Option<Duration> {
        self.active_deadline
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
            self.terminal = Some(PodPhase::Failed);
            return;
        }
        self.start_time.get_or_insert(clock.wall);
        self.arm_deadline(clock);
        match adopted {
            Some(a) if a.sandbox.ready => self.adopt(clock, a),
            // The sandbox died (a reboot, a containerd restart) after containers ran.
            Some(a)
                if self.policy == RestartPolicy::Never
                    && (!a.containers.is_empty() || !self.ran_before.is_empty()) =>
            {
                self.settle_lost(Some(a));
            }
            None if self.policy == RestartPolicy::Never && !self.ran_before.is_empty() => {
                self.settle_lost(None);
            }
            Some(a) => {
                // A stopped sandbox cannot be reused: clear it away and start afresh, keeping
                // what already succeeded under OnFailure.
                for c in &a.containers {
                    if let runtime::ContainerState::Exited(exit) = &c.state
                        && !c.init
                    {
                        self.ran_before.push((c.name.clone(), Some(exit.clone())));
                    }
                    self.out.push(Action::RemoveContainer { id: c.id.clone() });
                }
                self.out.push(Action::RemoveSandbox { id: a.sandbox.id });
                self.keep_succeeded();
                self.run_sandbox(1, String::new());
            }
            None => {
                self.keep_succeeded();
                self.run_sandbox(0, String::new());
            }
        }
    }

    /// Asks the runtime for the sandbox; `message` is the previous attempt's error.
    fn run_sandbox(&mut self, attempt: u32, message: String) {
        self.stage = Stage::Sandbox;
        self.sandbox = SandboxState::Creating { attempt, message };
        self.out.push(Action::RunSandbox { attempt });
    }

    fn on_sandbox_ready(&mut self, sb: Sandbox) {
        self.sandbox = SandboxState::Ready(sb);
        if self.stage == Stage::Sandbox {
            self.stage = Stage::Init;
        }
    }

    fn on_sandbox_failed(&mut self, clock: Clock, message: String) {
        if let SandboxState::Creating { attempt, .. } = self.sandbox {
            // 2 s, 4 s, 8 s … up to the cap: a network that stays broken costs a retry (and
            // a FailedCreatePodSandBox, folded into one event) per back-off period.
            let wait = self
                .cfg
                .sandbox_retry
                .saturating_mul(1 << attempt.min(16))
                .min(self.cfg.sandbox_retry_max);
            self.sandbox = SandboxState::Failed {
                attempt,
                retry_at: clock.now + wait,
                message,
            };
        }
    }
    /// Starts what is due, runs due probes, and notices when the pod is finished.
    fn advance(&mut self, clock: Clock) {
        let now = clock.now;
        if self.deadline_at.is_some_and(|at| at <= now) {
            self.end(clock, Ending::deadline_exceeded(self.grace));
        }
        if self.stage == Stage::Sandbox
            && let SandboxState::Failed {
                attempt,
                retry_at,
                message,
            } = &mut self.sandbox
            && *retry_at <= now
        {
            let (attempt, message) = (*attempt + 1, std::mem::take(message));
            self.run_sandbox(attempt, message);
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
        if let Stage::Stopping { deadline } = self.stage {
            self.wind_down(deadline);
        }
    }
}

/// Pods, clocks and a sandbox for the rooms' unit tests.
#[cfg(test)]
pub(crate) mod fixtures {
    use std::time::Duration;

    use skiff_proto::api::{Kind, Object, Pod, Time};
    use tokio::time::Instant;

    use super::Clock;
    use crate::runtime::Sandbox;

    pub(crate) fn pod(spec: serde_json::Value) -> Pod {
        let json = serde_json::json!({"metadata": {"name": "p", "namespace": "default", "uid": "u"},
                                      "spec": spec});
        match Object::from_json(Kind::Pod, json.to_string().as_bytes()).expect("decodes") {
            Object::Pod(p) => p,
            _ => unreachable!(),
        }
    }

    pub(super) fn at(t0: Instant, secs: u64) -> Clock {
        Clock {
            now: t0 + Duration::from_secs(secs),
            wall: Time::from_unix(1_800_000_000 + secs as i64).expect("time"),
        }
    }

    pub(super) fn sandbox() -> Sandbox {
        Sandbox {
            id: "sb".into(),
            ip: "10.0.0.2".into(),
            ready: true,
            ..Sandbox::default()
        }
    }

    pub(super) fn one_container() -> Pod {
        pod(serde_json::json!({"containers": [{"name": "c", "image": "i"}]}))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::fixtures::{at, one_container, sandbox};
    use super::{Action, EngineConfig, Input, PodEngine, Slot};

    /// A failed sandbox is tried again after `sandbox_retry`, doubling with each failure; its
    /// error shows in the status until a sandbox runs.
    #[test]
    fn a_failed_sandbox_is_retried_and_its_error_shown() {
        let t0 = Instant::now();
        let mut e = PodEngine::new(EngineConfig::default(), &one_container(), Ok(()));
        e.step(at(t0, 0), Input::Start { adopted: None });
        let failed = Input::SandboxFailed {
            message: "no network".into(),
        };
        assert!(e.step(at(t0, 0), failed).is_empty());
        assert_eq!(e.next_deadline(), Some(t0 + Duration::from_secs(2)));
        assert_eq!(e.status("h", "sim").message, "sandbox: no network");
        assert!(e.step(at(t0, 1), Input::Tick).is_empty());
        let a = e.step(at(t0, 2), Input::Tick);
        assert_eq!(a, vec![Action::RunSandbox { attempt: 1 }]);
        assert_eq!(e.next_deadline(), None);
        assert_eq!(e.status("h", "sim").message, "sandbox: no network");
        let failed = Input::SandboxFailed {
            message: "no network".into(),
        };
        assert!(e.step(at(t0, 3), failed).is_empty());
        assert_eq!(e.next_deadline(), Some(t0 + Duration::from_secs(3 + 4)));
        let a = e.step(at(t0, 7), Input::Tick);
        assert_eq!(a, vec![Action::RunSandbox { attempt: 2 }]);
        let a = e.step(at(t0, 8), Input::SandboxReady(sandbox()));
        assert_eq!(
            a,
            vec![Action::StartContainer {
                slot: Slot::App(0),
                attempt: 0
            }]
        );
        assert_eq!(e.status("h", "sim").message, "");
    }

    /// Deleting a pod whose sandbox failed stops nothing and retries nothing: the object is
    /// deleted at once.
    #[test]
    fn deleting_while_the_sandbox_failed_retries_nothing() {
        let t0 = Instant::now();
        let mut e = PodEngine::new(EngineConfig::default(), &one_container(), Ok(()));
        e.step(at(t0, 0), Input::Start { adopted: None });
        e.step(
            at(t0, 0),
            Input::SandboxFailed {
                message: "no network".into(),
            },
        );
        let a = e.step(
            at(t0, 1),
            Input::Delete {
                grace: Duration::from_secs(30),
            },
        );
        assert_eq!(a, vec![Action::DeletePod]);
        assert!(e.is_done());
        assert_eq!(e.next_deadline(), None);
        assert!(e.step(at(t0, 5), Input::Tick).is_empty());
    }
}
