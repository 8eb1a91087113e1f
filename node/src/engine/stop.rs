//! Stopping: deletion and removal, stopping what runs, and the final clean-up.

use std::time::Duration;

use skiff_proto::api::PodPhase;
use tokio::time::Instant;

use super::{Action, Clock, Ending, PodEngine, Run, SandboxState, Slot, Stage};

impl PodEngine {
    /// The node ends a pod that runs (or is getting there): what runs stops within the
    /// ending's grace, and the pod fails with its reason. A pod already stopping, deleted or
    /// finished is left to that.
    pub(super) fn end(&mut self, clock: Clock, ending: Ending) {
        self.deadline_at = None;
        if self.ending.is_some()
            || self.deleting
            || self.removed
            || !matches!(self.stage, Stage::Sandbox | Stage::Init | Stage::Run)
        {
            return;
        }
        let grace = ending.grace;
        self.ending = Some((ending, clock.wall));
        self.begin_stop(clock, grace);
    }

    /// When `activeDeadlineSeconds` passes, counted from the pod's start time.
    pub(super) fn arm_deadline(&mut self, clock: Clock) {
        self.deadline_at = match (self.active_deadline, self.start_time) {
            (Some(limit), Some(start)) if self.ending.is_none() => {
                let ran = u64::try_from(clock.wall.unix() - start.unix()).unwrap_or(0);
                Some(clock.now + limit.saturating_sub(Duration::from_secs(ran)))
            }
            _ => None,
        };
    }

    pub(super) fn on_delete(&mut self, clock: Clock, grace: Duration, removed: bool) {
        self.removed |= removed;
        if !removed {
            self.deleting = true;
        }
        match self.stage {
            // Nothing was running; should something be, it has no grace left.
            Stage::New | Stage::Rejected | Stage::Stopped => self.finish(clock.now),
            Stage::Done => {}
            Stage::Stopping { deadline: old } => {
                // A shorter grace (or removal) shortens the stop of what still runs.
                let deadline = clock.now + grace;
                if deadline < old {
                    self.stage = Stage::Stopping { deadline };
                    self.stop_running(grace, true);
                }
            }
            Stage::Sandbox | Stage::Init | Stage::Run => self.begin_stop(clock, grace),
        }
    }

    /// Stops every running container (graceful with preStop unless `grace` is zero).
    pub(super) fn begin_stop(&mut self, clock: Clock, grace: Duration) {
        self.stage = Stage::Stopping {
            deadline: clock.now + grace,
        };
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

    /// A container is running or about to.
    fn containers_busy(&self) -> bool {
        self.init
            .iter()
            .chain(&self.app)
            .any(|s| matches!(s.run, Run::Running { .. } | Run::Starting))
    }

    /// While stopping: once no container runs, stop the sandbox (waiting for one still being
    /// created), then move to Stopped.
    pub(super) fn wind_down(&mut self, deadline: Instant) {
        if self.containers_busy() {
            return;
        }
        match &self.sandbox {
            SandboxState::Ready(sb) if sb.ready => {
                let sb = sb.clone();
                self.out.push(Action::StopSandbox { id: sb.id.clone() });
                self.sandbox = SandboxState::Stopping(sb);
            }
            // The runtime's answer comes first.
            SandboxState::Creating { .. } | SandboxState::Stopping(_) => {}
            SandboxState::NotCreated
            | SandboxState::Failed { .. }
            | SandboxState::Ready(_)
            | SandboxState::Stopped(_) => self.enter_stopped(deadline),
        }
    }

    pub(super) fn on_sandbox_stopped(&mut self) {
        if let SandboxState::Ready(sb) | SandboxState::Stopping(sb) | SandboxState::Stopped(sb) =
            &self.sandbox
        {
            let mut sb = sb.clone();
            sb.ready = false;
            self.sandbox = SandboxState::Stopped(sb);
        }
        if let Stage::Stopping { deadline } = self.stage {
            self.enter_stopped(deadline);
        }
    }

    /// Everything is stopped: the phase is final, and a deleted or removed pod is cleaned
    /// up at once (a completed one waits in Stopped to be deleted). `deadline` is the stop's.
    fn enter_stopped(&mut self, deadline: Instant) {
        self.stage = Stage::Stopped;
        self.settle_phase();
        if self.deleting || self.removed {
            self.finish(deadline);
        }
    }

    /// Fixes the phase (Succeeded or Failed) once nothing runs any more; a refused pod's
    /// phase comes from its rejection.
    fn settle_phase(&mut self) {
        if self.terminal.is_none() && self.rejection.is_none() {
            self.terminal = Some(if self.ending.is_some() {
                PodPhase::Failed
            } else {
                self.final_phase()
            });
        }
    }

    /// Removes every container and the sandbox, deletes the object unless it is gone already.
    /// Should something still run, the pod stops it first, by `deadline`.
    fn finish(&mut self, deadline: Instant) {
        if self.stage == Stage::Done {
            return;
        }
        if self.containers_busy() || self.sandbox().is_some_and(|s| s.ready) {
            // Still something to stop first.
            self.stage = Stage::Stopping { deadline };
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
        if let Some(sb) = self.sandbox() {
            self.out.push(Action::RemoveSandbox { id: sb.id.clone() });
        }
        self.settle_phase();
        if self.deleting && !self.removed {
            self.out.push(Action::DeletePod);
        }
        self.stage = Stage::Done;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use skiff_proto::api::PodPhase;
    use tokio::time::Instant;

    use skiff_proto::api::{PodConditionType, Time};

    use crate::engine::fixtures::{at, one_container, pod, sandbox};
    use crate::engine::{Action, Ending, EngineConfig, Input, PodEngine, Slot};
    use crate::runtime::Exit;

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
        assert_eq!(e.status("h", "sim").phase, Some(PodPhase::Failed));
    }

    /// Runs `pod` to its container running in sandbox `sb`, at second 1.
    fn running(pod: &skiff_proto::api::Pod, t0: Instant) -> PodEngine {
        let mut e = PodEngine::new(EngineConfig::default(), pod, Ok(()));
        e.step(at(t0, 0), Input::Start { adopted: None });
        e.step(at(t0, 0), Input::SandboxReady(sandbox()));
        e.step(
            at(t0, 1),
            Input::Started {
                slot: Slot::App(0),
                id: "c1".into(),
                image_id: String::new(),
            },
        );
        e
    }

    fn killed() -> Exit {
        Exit {
            exit_code: 137,
            reason: "Error".into(),
            ..Exit::default()
        }
    }

    /// An eviction stops the containers at once, restarts nothing (the pod's policy is
    /// Always), and the pod fails as `Evicted` with a DisruptionTarget condition; it stays
    /// until deleted.
    #[test]
    fn an_evicted_pod_stops_at_once_and_fails() {
        let t0 = Instant::now();
        let mut e = running(&one_container(), t0);
        let message = "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". ";
        let a = e.step(at(t0, 5), Input::End(Ending::evicted(message.into())));
        assert_eq!(
            a,
            vec![Action::StopContainer {
                slot: Slot::App(0),
                id: "c1".into(),
                grace: Duration::ZERO,
                pre_stop: None,
            }]
        );
        let st = e.status("h", "sim");
        assert_eq!(
            (st.reason.as_str(), st.message.as_str()),
            ("Evicted", message)
        );
        let a = e.step(
            at(t0, 6),
            Input::Exited {
                slot: Slot::App(0),
                id: "c1".into(),
                exit: killed(),
            },
        );
        assert_eq!(a, vec![Action::StopSandbox { id: "sb".into() }]);
        assert!(e.step(at(t0, 6), Input::SandboxStopped).is_empty());
        assert!(e.is_terminal() && !e.is_done());
        assert_eq!(e.next_deadline(), None);
        let st = e.status("h", "sim");
        assert_eq!(st.phase, Some(PodPhase::Failed));
        let target = st
            .condition(&PodConditionType::DisruptionTarget)
            .expect("DisruptionTarget");
        assert_eq!(
            (target.reason.as_str(), target.message.as_str()),
            ("TerminationByKubelet", message)
        );
        for c in [PodConditionType::Ready, PodConditionType::ContainersReady] {
            let reason = st.condition(&c).map(|c| c.reason.as_str());
            assert_eq!(reason, Some("PodFailed"), "{c:?}");
        }
        // A second eviction, or a deadline, changes nothing; the delete cleans up.
        assert!(
            e.step(at(t0, 7), Input::End(Ending::evicted("again".into())))
                .is_empty()
        );
        assert_eq!(e.status("h", "sim").message, message);
        let a = e.step(
            at(t0, 8),
            Input::Delete {
                grace: Duration::from_secs(30),
            },
        );
        assert!(a.contains(&Action::DeletePod), "{a:?}");
    }

    /// `activeDeadlineSeconds` counts from the start time: when it passes, the containers
    /// get the pod's grace, and the pod fails as `DeadlineExceeded` (no DisruptionTarget).
    /// Shortened while the pod runs, it passes sooner.
    #[test]
    fn the_active_deadline_stops_the_pod_within_its_grace() {
        let t0 = Instant::now();
        let pod = pod(serde_json::json!({
            "activeDeadlineSeconds": 60, "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "c", "image": "i"}]}));
        let mut e = running(&pod, t0);
        assert_eq!(e.next_deadline(), Some(t0 + Duration::from_secs(60)));
        e.step(
            at(t0, 10),
            Input::ActiveDeadline(Some(Duration::from_secs(30))),
        );
        assert_eq!(e.next_deadline(), Some(t0 + Duration::from_secs(30)));
        assert!(e.step(at(t0, 29), Input::Tick).is_empty());
        let a = e.step(at(t0, 30), Input::Tick);
        assert_eq!(
            a,
            vec![Action::StopContainer {
                slot: Slot::App(0),
                id: "c1".into(),
                grace: Duration::from_secs(5),
                pre_stop: None,
            }]
        );
        e.step(
            at(t0, 31),
            Input::Exited {
                slot: Slot::App(0),
                id: "c1".into(),
                exit: killed(),
            },
        );
        e.step(at(t0, 31), Input::SandboxStopped);
        let st = e.status("h", "sim");
        assert_eq!(st.phase, Some(PodPhase::Failed));
        assert_eq!(st.reason, "DeadlineExceeded");
        assert_eq!(
            st.message,
            "Pod was active on the node longer than the specified deadline"
        );
        assert!(st.condition(&PodConditionType::DisruptionTarget).is_none());
    }

    /// A pod that started before this engine (an agent restart) counts from its stored
    /// start time: past its deadline already, it stops at once.
    #[test]
    fn a_deadline_counts_from_the_stored_start_time() {
        let t0 = Instant::now();
        let mut p = pod(serde_json::json!({
            "activeDeadlineSeconds": 60, "containers": [{"name": "c", "image": "i"}]}));
        p.status = Some(skiff_proto::api::PodStatus {
            start_time: Some(Time::from_unix(1_800_000_000 - 100).expect("time")),
            ..Default::default()
        });
        let mut e = PodEngine::new(EngineConfig::default(), &p, Ok(()));
        let a = e.step(at(t0, 0), Input::Start { adopted: None });
        assert_eq!(a, vec![Action::RunSandbox { attempt: 0 }]);
        assert_eq!(e.next_deadline(), None, "it ended on its first step");
        assert_eq!(e.status("h", "sim").reason, "DeadlineExceeded");
    }
}
