//! Stopping: deletion and removal, stopping what runs, and the final clean-up.

use std::time::Duration;

use tokio::time::Instant;

use super::{Action, Clock, PodEngine, Run, SandboxState, Slot, Stage};

impl PodEngine {
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
            self.terminal = Some(self.final_phase());
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

    use crate::engine::fixtures::{at, one_container, sandbox};
    use crate::engine::{Action, EngineConfig, Input, PodEngine};

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
}
