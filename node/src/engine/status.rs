//! The pod status as the kubelet reports it: phase, conditions, container statuses.

use skiff_proto::api::pod::{
    ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, PodCondition,
};
use skiff_proto::api::{PodConditionType, PodPhase, PodStatus, RestartPolicy, Time};

use super::{PodEngine, Run, SlotState, Stage};
use crate::runtime::Exit;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cond {
    Initialized,
    ContainersReady,
    Ready,
}

/// `<scheme>://<id>` as the kubelet reports a container, or nothing when the ID is unknown (a
/// container lost with its sandbox): a bare `sim://` names no container.
fn container_url(scheme: &str, id: &str) -> String {
    if id.is_empty() {
        String::new()
    } else {
        format!("{scheme}://{id}")
    }
}

impl PodEngine {
    /// The phase of a pod whose containers have all stopped.
    pub(super) fn final_phase(&self) -> PodPhase {
        let exits_ok = self.app.iter().all(|s| match &s.run {
            Run::Exited { exit, .. } => exit.exit_code == 0,
            Run::Waiting { .. } => s.last.as_ref().is_some_and(|(_, e)| e.exit_code == 0),
            _ => false,
        });
        let init_ok = self.failure_reason.is_empty();
        if exits_ok && init_ok && !self.app.is_empty() {
            PodPhase::Succeeded
        } else {
            PodPhase::Failed
        }
    }

    /// The phase as the kubelet computes it from the containers' states.
    fn phase(&self) -> PodPhase {
        if self.rejection.is_some() {
            return PodPhase::Failed;
        }
        if let Some(p) = self.terminal {
            return p;
        }
        if matches!(self.stage, Stage::New | Stage::Sandbox | Stage::Init) {
            return PodPhase::Pending;
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
            PodPhase::Pending
        } else if running > 0 || (stopped > 0 && self.policy == RestartPolicy::Always) {
            // Restarting under Always still counts as Running (CrashLoopBackOff shows there).
            PodPhase::Running
        } else if stopped == succeeded && stopped > 0 {
            PodPhase::Succeeded
        } else if self.policy == RestartPolicy::Never {
            PodPhase::Failed
        } else {
            PodPhase::Running
        }
    }

    fn condition_values(&self) -> [(Cond, bool); 3] {
        let initialized = matches!(self.stage, Stage::Run)
            || (matches!(
                self.stage,
                Stage::Stopping { .. } | Stage::Stopped | Stage::Done
            ) && self
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

    pub(super) fn track_conditions(&mut self, wall: Time) {
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
            container_id: container_url(scheme, id),
            other: Default::default(),
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
                        other: Default::default(),
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
                        other: Default::default(),
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
                        other: Default::default(),
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
            image_id: s.image_id.clone(),
            container_id: container_id.map_or_else(String::new, |id| container_url(scheme, &id)),
            started: (!init).then_some(s.started && matches!(s.run, Run::Running { .. })),
            other: Default::default(),
        }
    }

    /// The pod status to report, from the engine's view. `scheme` prefixes container IDs.
    pub fn status(&self, host_ip: &str, scheme: &str) -> PodStatus {
        let mut status = PodStatus {
            phase: Some(self.phase()),
            host_ip: host_ip.into(),
            start_time: self.start_time,
            qos_class: self.qos.into(),
            ..PodStatus::default()
        };
        // Not the agent's to write (the binding owns it): reported as the pod carried it, as
        // an UpdateStatus replaces the whole status.
        if let Some(scheduled) = &self.scheduled {
            status.set_condition(scheduled.clone());
        }
        if let Some(r) = &self.rejection {
            status.reason = r.reason.clone();
            status.message = r.message.clone();
            return status;
        }
        for (c, v, since) in &self.conditions {
            let (type_, reason) = match c {
                Cond::Initialized => (PodConditionType::Initialized, "ContainersNotInitialized"),
                Cond::ContainersReady => (PodConditionType::ContainersReady, "ContainersNotReady"),
                Cond::Ready => (PodConditionType::Ready, "ContainersNotReady"),
            };
            // A finished pod's readiness says how it finished, as the kubelet words it.
            let finished = match self.terminal {
                Some(PodPhase::Failed) => Some("PodFailed"),
                Some(_) => Some("PodCompleted"),
                None => None,
            };
            let reason = match finished {
                _ if *v => String::new(),
                Some(f) if *c != Cond::Initialized => f.into(),
                _ => reason.into(),
            };
            status.set_condition(PodCondition {
                last_transition_time: Some(*since),
                reason,
                ..PodCondition::new(type_, (*v).into())
            });
        }
        if let Some(error) = self.sandbox.error() {
            status.message = format!("sandbox: {error}");
        }
        if let Some(sb) = self.sandbox.get() {
            status.pod_ip = sb.ip.clone();
        }
        if let Some((e, at)) = &self.ending {
            status.reason = e.reason.clone();
            status.message = e.message.clone();
            if e.disruption {
                status.set_condition(PodCondition {
                    last_transition_time: Some(*at),
                    reason: "TerminationByKubelet".into(),
                    message: e.message.clone(),
                    ..PodCondition::new(PodConditionType::DisruptionTarget, true.into())
                });
            }
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
