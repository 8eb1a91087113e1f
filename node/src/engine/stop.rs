//! Stopping: deletion and removal, stopping what runs, and the final clean-up.

use std::time::Duration;

use super::{Action, Clock, PodEngine, Run, Slot, Stage};

impl PodEngine {
    pub(super) fn on_delete(&mut self, clock: Clock, grace: Duration, removed: bool) {
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
    pub(super) fn begin_stop(&mut self, clock: Clock, grace: Duration) {
        self.stage = Stage::Stopping;
        self.stop_deadline = Some(clock.now + grace);
        self.sandbox_retry_at = None;
        self.stop_running(grace, false);
    }

    pub(super) fn stop_running(&mut self, grace: Duration, again: bool) {
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

    pub(super) fn on_sandbox_stopped(&mut self) {
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
    pub(super) fn finish(&mut self) {
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
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
        assert_eq!(e.status("h", "sim").phase, "Failed");
    }
}
