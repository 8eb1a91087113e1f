//! Containers: starting them, the restart back-off, postStart, probes, and their exits.

use std::time::Duration;

use skiff_proto::api::{Pod, RestartPolicy};
use tokio::time::Instant;

use super::{
    Action, Adopted, Clock, EngineConfig, PodEngine, ProbeKind, Run, SandboxState, Slot, SlotState,
    Stage, slot_of,
};
use crate::runtime::{ContainerState, Exit, RuntimeError};

/// The exit code a container that never started ends with (the kubelet's StartError).
const START_ERROR_EXIT_CODE: i32 = 128;

/// The exit code and reason of a container whose end is unknown (its sandbox and record are
/// gone), as the kubelet reports it.
const LOST_EXIT_CODE: i32 = 137;
const LOST_REASON: &str = "ContainerStatusUnknown";

/// The containers the stored status says ran: by name, with their end when it is known.
pub(super) fn ran_before(pod: &Pod) -> Vec<(String, Option<Exit>)> {
    let Some(status) = &pod.status else {
        return Vec::new();
    };
    status
        .init_container_statuses
        .iter()
        .chain(&status.container_statuses)
        .filter_map(|c| {
            let state = c.state.as_ref();
            if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
                return Some((
                    c.name.clone(),
                    Some(Exit {
                        exit_code: t.exit_code,
                        reason: t.reason.clone(),
                        message: t.message.clone(),
                        started_at: t.started_at,
                        finished_at: t.finished_at,
                    }),
                ));
            }
            let ran = state.is_some_and(|s| s.running.is_some())
                || c.restart_count > 0
                || !c.container_id.is_empty();
            ran.then(|| (c.name.clone(), None))
        })
        .collect()
}

impl PodEngine {
    /// Takes over what the runtime runs for the pod: the newest container of each slot is
    /// followed (running) or judged by its exit; older ones are removed.
    pub(super) fn adopt(&mut self, clock: Clock, a: Adopted) {
        self.sandbox = SandboxState::Ready(a.sandbox);
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
            s.image_id = c.image_ref;
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

    /// A Never pod whose sandbox is gone after its containers ran is not run again (the
    /// kubelet does not recreate it): each container ends as the runtime or the stored status
    /// last saw it, or as ContainerStatusUnknown when neither knows, and the pod finishes.
    pub(super) fn settle_lost(&mut self, adopted: Option<Adopted>) {
        let mut seen: Vec<(String, bool, String, Option<Exit>)> = Vec::new();
        if let Some(a) = adopted {
            let mut containers = a.containers;
            containers.sort_by_key(|c| std::cmp::Reverse(c.attempt));
            for c in containers {
                if seen
                    .iter()
                    .any(|(n, init, ..)| *n == c.name && *init == c.init)
                {
                    continue;
                }
                let exit = match c.state {
                    ContainerState::Exited(exit) => Some(exit),
                    _ => None,
                };
                seen.push((c.name, c.init, c.id, exit));
            }
            self.sandbox = SandboxState::Ready(a.sandbox);
        }
        let lost = || Exit {
            exit_code: LOST_EXIT_CODE,
            reason: LOST_REASON.into(),
            message: "The container could not be located when the pod was terminated".into(),
            started_at: None,
            finished_at: None,
        };
        let before = std::mem::take(&mut self.ran_before);
        for (init, s) in self
            .init
            .iter_mut()
            .map(|s| (true, s))
            .chain(self.app.iter_mut().map(|s| (false, s)))
        {
            let from_runtime = seen
                .iter()
                .find(|(n, i, ..)| *n == s.name && *i == init)
                .map(|(_, _, id, exit)| (id.clone(), exit.clone()));
            let stored = before
                .iter()
                .find(|(n, _)| *n == s.name)
                .and_then(|(_, e)| e.clone());
            let (id, exit) = match from_runtime {
                Some((id, Some(exit))) => (id, exit),
                Some((id, None)) => (id, stored.unwrap_or_else(lost)),
                None => (String::new(), stored.unwrap_or_else(lost)),
            };
            s.run = Run::Exited { id, exit };
        }
        self.stage = Stage::Run;
    }

    /// OnFailure: app containers that already succeeded are not run again in a new sandbox.
    pub(super) fn keep_succeeded(&mut self) {
        if self.policy != RestartPolicy::OnFailure {
            return;
        }
        for s in &mut self.app {
            if let Some((_, Some(exit))) = self
                .ran_before
                .iter()
                .find(|(n, e)| *n == s.name && e.as_ref().is_some_and(|e| e.exit_code == 0))
            {
                s.run = Run::Exited {
                    id: String::new(),
                    exit: exit.clone(),
                };
            }
        }
    }

    pub(super) fn on_started(&mut self, clock: Clock, slot: Slot, id: String, image_id: String) {
        // A container that starts while the pod stops gets what is left of the grace.
        let (stopping, remaining) = match self.stage {
            Stage::Stopping { deadline } => (true, deadline.saturating_duration_since(clock.now)),
            _ => (false, Duration::ZERO),
        };
        let Some(s) = slot_of(&mut self.init, &mut self.app, slot) else {
            return;
        };
        if s.run != Run::Starting {
            return;
        }
        s.starts += 1;
        s.pull_failures = 0;
        s.image_id = image_id;
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

    pub(super) fn on_start_failed(&mut self, clock: Clock, slot: Slot, error: RuntimeError) {
        let stopping = matches!(self.stage, Stage::Stopping { .. });
        let cfg = self.cfg;
        // A container the runtime could not create or start is not tried again when its
        // policy would not restart a failed one (Never): as the kubelet records it, it ended
        // with StartError (128), so a Job's pod fails instead of waiting forever. A missing
        // image is waited for under every policy.
        let final_failure = !matches!(
            error,
            RuntimeError::ImageNotFound { .. } | RuntimeError::Config { .. }
        ) && !self.should_restart(slot, START_ERROR_EXIT_CODE);
        let Some(s) = self.slot(slot) else { return };
        if s.run != Run::Starting {
            return;
        }
        if final_failure && !stopping {
            s.run = Run::Exited {
                id: String::new(),
                exit: Exit {
                    exit_code: START_ERROR_EXIT_CODE,
                    reason: "StartError".into(),
                    message: error.to_string(),
                    started_at: None,
                    finished_at: Some(clock.wall),
                },
            };
            if let Slot::Init(_) = slot {
                self.failure_reason = "Init:StartError".into();
                self.begin_stop(clock, Duration::ZERO);
            }
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
            RuntimeError::Config { .. } => ("CreateContainerConfigError", error.to_string()),
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

    pub(super) fn on_post_start(&mut self, slot: Slot, id: &str, error: Option<String>) {
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
            (RestartPolicy::Never, _) => false,
            (RestartPolicy::OnFailure, _) | (_, Slot::Init(_)) => exit_code != 0,
            (RestartPolicy::Always, Slot::App(_)) => true,
        }
    }

    pub(super) fn on_exited(&mut self, clock: Clock, slot: Slot, id: &str, mut exit: Exit) {
        if exit.reason.is_empty() {
            exit.reason = if exit.exit_code == 0 {
                "Completed".into()
            } else {
                "Error".into()
            };
        }
        let restart = !matches!(self.stage, Stage::Stopping { .. })
            && self.should_restart(slot, exit.exit_code);
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
            && !matches!(self.stage, Stage::Stopping { .. })
        {
            // restartPolicy Never: a failed init container fails the pod.
            self.failure_reason = "Init:Error".into();
            self.begin_stop(clock, Duration::ZERO);
        }
    }

    fn display(&self) -> String {
        format!("{}_{}({})", self.name, self.namespace, self.uid)
    }

    pub(super) fn on_probe(
        &mut self,
        clock: Clock,
        slot: Slot,
        id: &str,
        kind: ProbeKind,
        success: bool,
    ) {
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

    pub(super) fn start_if_due(&mut self, slot: Slot, now: Instant) {
        let Some(s) = self.slot(slot) else { return };
        if let Run::Waiting { retry_at, .. } = &s.run
            && retry_at.is_none_or(|t| t <= now)
        {
            let attempt = s.starts;
            s.run = Run::Starting;
            self.out.push(Action::StartContainer { slot, attempt });
        }
    }

    pub(super) fn run_due_probes(&mut self, now: Instant) {
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
    use std::time::Duration;

    use skiff_proto::api::{ConditionStatus, PodConditionType};
    use tokio::time::Instant;

    use crate::engine::fixtures::{at, one_container, pod, sandbox};
    use crate::engine::{Action, EngineConfig, Input, PodEngine, ProbeKind, Slot};

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
                image_id: String::new(),
            },
        );
        assert!(a.contains(&Action::StopContainer {
            slot: Slot::App(0),
            id: "c1".into(),
            grace: Duration::from_secs(7),
            pre_stop: None,
        }));
    }

    /// A container the runtime cannot start is tried again under Always, and under Never ends
    /// with StartError, failing the pod instead of leaving it Pending forever.
    #[test]
    fn start_failures_end_a_never_pod() {
        let t0 = Instant::now();
        let failure = || crate::runtime::RuntimeError::Call {
            call: "CreateContainer",
            message: "exec: \"nope\": executable file not found".into(),
        };
        let run = |policy: &str| {
            let p = pod(serde_json::json!({"restartPolicy": policy,
                "containers": [{"name": "c", "image": "i"}]}));
            let mut e = PodEngine::new(EngineConfig::default(), &p, Ok(()));
            e.step(at(t0, 0), Input::Start { adopted: None });
            e.step(at(t0, 0), Input::SandboxReady(sandbox()));
            e.step(
                at(t0, 0),
                Input::StartFailed {
                    slot: Slot::App(0),
                    error: failure(),
                },
            );
            e
        };
        let always = run("Always");
        let st = always.status("10.0.0.1", "sim");
        let waiting = st.container_statuses[0]
            .state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .expect("waiting to be tried again");
        assert_eq!(waiting.reason, "CreateContainerError");
        assert!(!always.is_terminal());

        let never = run("Never");
        let st = never.status("10.0.0.1", "sim");
        assert_eq!(st.phase, Some(skiff_proto::api::PodPhase::Failed), "{st:?}");
        let t = st.container_statuses[0]
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .expect("terminated");
        assert_eq!((t.exit_code, t.reason.as_str()), (128, "StartError"));
        assert!(t.message.contains("executable file not found"), "{t:?}");
    }

    /// The pod as the store has it after its containers ran: `statuses` per container.
    fn ran(spec: serde_json::Value, statuses: serde_json::Value) -> skiff_proto::api::Pod {
        let mut p = pod(spec);
        let status = serde_json::json!({"phase": "Running", "containerStatuses": statuses});
        p.status = Some(serde_json::from_value(status).expect("status"));
        p
    }

    fn starts(actions: &[Action]) -> Vec<Slot> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::StartContainer { slot, .. } => Some(*slot),
                _ => None,
            })
            .collect()
    }

    /// A Never pod whose sandbox is gone after its container ran (a node reboot: the runtime
    /// holds nothing) is not run again: it fails with ContainerStatusUnknown.
    #[test]
    fn a_never_pod_is_not_run_again_after_its_sandbox_is_lost() {
        let t0 = Instant::now();
        let p = ran(
            serde_json::json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}),
            serde_json::json!([{"name": "c", "containerID": "sim://c1", "ready": true,
                                "state": {"running": {"startedAt": "2026-11-26T10:00:00Z"}}}]),
        );
        let mut e = PodEngine::new(EngineConfig::default(), &p, Ok(()));
        let a = e.step(at(t0, 0), Input::Start { adopted: None });
        assert!(
            !a.iter().any(|a| matches!(a, Action::RunSandbox { .. })),
            "{a:?}"
        );
        let st = e.status("10.0.0.1", "sim");
        assert_eq!(st.phase, Some(skiff_proto::api::PodPhase::Failed), "{st:?}");
        let t = st.container_statuses[0]
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .expect("terminated");
        assert_eq!(
            (t.exit_code, t.reason.as_str()),
            (137, "ContainerStatusUnknown")
        );
        // Nothing names the lost container: no bare `sim://`.
        assert_eq!(t.container_id, "", "{t:?}");
        assert_eq!(st.container_statuses[0].container_id, "", "{st:?}");

        // A dead sandbox whose container had finished: its exit stands, nothing reruns.
        let mut e = PodEngine::new(EngineConfig::default(), &p, Ok(()));
        let dead = crate::engine::Adopted {
            sandbox: crate::runtime::Sandbox {
                ready: false,
                ..sandbox()
            },
            containers: vec![crate::runtime::Container {
                id: "c1".into(),
                sandbox_id: "sb".into(),
                pod_uid: "u".into(),
                name: "c".into(),
                init: false,
                attempt: 0,
                image_ref: String::new(),
                state: crate::runtime::ContainerState::Exited(crate::runtime::Exit {
                    exit_code: 0,
                    reason: "Completed".into(),
                    ..crate::runtime::Exit::default()
                }),
            }],
        };
        let a = e.step(
            at(t0, 0),
            Input::Start {
                adopted: Some(dead),
            },
        );
        assert!(starts(&a).is_empty() && !a.iter().any(|a| matches!(a, Action::RunSandbox { .. })));
        let st = e.status("10.0.0.1", "sim");
        assert_eq!(
            st.phase,
            Some(skiff_proto::api::PodPhase::Succeeded),
            "{st:?}"
        );
    }

    /// OnFailure in a new sandbox runs again only what has not succeeded.
    #[test]
    fn on_failure_does_not_rerun_what_succeeded() {
        let t0 = Instant::now();
        let p = ran(
            serde_json::json!({"restartPolicy": "OnFailure", "containers": [
                {"name": "done", "image": "i"}, {"name": "busy", "image": "i"}]}),
            serde_json::json!([
                {"name": "done", "containerID": "sim://c1",
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "busy", "containerID": "sim://c2",
                 "state": {"running": {"startedAt": "2026-11-26T10:00:00Z"}}}]),
        );
        let mut e = PodEngine::new(EngineConfig::default(), &p, Ok(()));
        let a = e.step(at(t0, 0), Input::Start { adopted: None });
        assert!(
            a.iter().any(|a| matches!(a, Action::RunSandbox { .. })),
            "{a:?}"
        );
        let a = e.step(at(t0, 0), Input::SandboxReady(sandbox()));
        assert_eq!(starts(&a), vec![Slot::App(1)]);
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
                image_id: "docker.io/library/busybox@sha256:ab12".into(),
            },
        );
        let status = e.status("10.0.0.1", "containerd");
        assert_eq!(
            status.container_statuses[0].image_id, "docker.io/library/busybox@sha256:ab12",
            "the runtime's digest of the image"
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
                .find(|c| c.type_ == PodConditionType::Ready)
                .map(|c| c.status),
            Some(ConditionStatus::False)
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
                .find(|c| c.type_ == PodConditionType::Ready)
                .map(|c| c.status),
            Some(ConditionStatus::True)
        );
        assert_eq!(s.pod_ip, "10.0.0.2");
    }
}
