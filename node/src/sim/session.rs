//! Interactive sessions in simulated containers: exec runs its script a statement at a time
//! (`sleep` takes real time on tokio's clock), `sh` reads its script from standard input,
//! `cat` copies standard input back, and an attached client waits for the container to end.

use tokio::sync::mpsc;

use super::SimRuntime;
use super::script::{Step, exec_statements, is_interactive_shell, step};
use crate::runtime::{Result, RuntimeError, Session, SessionInput, SessionOutput, SessionSpec};

type Output = mpsc::Sender<Result<SessionOutput>>;

/// Where a session's output goes, filtered by what the client asked for.
struct Sink<'a> {
    output: &'a Output,
    spec: &'a SessionSpec,
}

impl Sink<'_> {
    /// Sends what a statement printed; false once the client has gone.
    async fn print(&self, s: &Step) -> bool {
        let mut sends = Vec::new();
        if self.spec.stdout && !s.stdout.is_empty() {
            sends.push(SessionOutput::Stdout(s.stdout.clone().into_bytes()));
        }
        if !s.stderr.is_empty() {
            if self.spec.tty && self.spec.stdout {
                sends.push(SessionOutput::Stdout(s.stderr.clone().into_bytes()));
            } else if self.spec.stderr {
                sends.push(SessionOutput::Stderr(s.stderr.clone().into_bytes()));
            }
        }
        for out in sends {
            if self.output.send(Ok(out)).await.is_err() {
                return false;
            }
        }
        true
    }
}

impl SimRuntime {
    pub(super) fn open_session(&self, id: &str, spec: &SessionSpec) -> Result<Session> {
        let call = if spec.command.is_empty() {
            "Attach"
        } else {
            "Exec"
        };
        self.with_running(id, call, |_| ())?;
        let (input, input_rx) = mpsc::channel(16);
        let (output_tx, output) = mpsc::channel(16);
        let rt = self.clone();
        let id = id.to_string();
        let spec = spec.clone();
        // Bounded by the session: it ends when the script does, when standard input ends for
        // the readers of it, or when the client drops its output.
        tokio::spawn(async move {
            let ended = if spec.command.is_empty() {
                rt.attached(&id, &output_tx).await
            } else {
                rt.exec_session(&id, &spec, input_rx, &output_tx).await
            };
            if let Some(ended) = ended {
                let _ = output_tx.send(ended.map(SessionOutput::Exit)).await;
            }
        });
        Ok(Session { input, output })
    }

    /// Runs one statement against the container's files.
    fn step(&self, id: &str, stmt: &str) -> Result<Step> {
        let mut st = self.state();
        Ok(step(&mut st.container_mut(id)?.files, stmt))
    }

    /// The exit status of an exec session, or `None` when the client went away first.
    async fn exec_session(
        &self,
        id: &str,
        spec: &SessionSpec,
        mut input: mpsc::Receiver<SessionInput>,
        output: &Output,
    ) -> Option<Result<i32>> {
        let sink = Sink { output, spec };
        if spec.stdin && spec.command == ["cat"] {
            while let Some(SessionInput::Stdin(data)) = next_input(&mut input).await {
                if spec.stdout && output.send(Ok(SessionOutput::Stdout(data))).await.is_err() {
                    return None;
                }
            }
            return Some(Ok(0));
        }
        if spec.stdin && is_interactive_shell(&spec.command) {
            let mut status = 0;
            let mut pending = Vec::new();
            while let Some(SessionInput::Stdin(data)) = next_input(&mut input).await {
                pending.extend(data);
                while let Some(end) = pending.iter().position(|b| *b == b'\n' || *b == b'\r') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let line = String::from_utf8_lossy(&line[..end]).into_owned();
                    for stmt in exec_statements(&[line]) {
                        match self.run(id, &stmt, &sink).await? {
                            Ok(s) if s.exit => return Some(Ok(s.status)),
                            Ok(s) => status = s.status,
                            Err(e) => return Some(Err(e)),
                        }
                    }
                }
            }
            return Some(Ok(status));
        }
        let mut status = 0;
        for stmt in exec_statements(&spec.command) {
            match self.run(id, &stmt, &sink).await? {
                Ok(s) if s.exit => return Some(Ok(s.status)),
                Ok(s) => status = s.status,
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(status))
    }

    /// Runs a statement, prints what it printed and takes the time it takes; `None` when the
    /// client went away.
    async fn run(&self, id: &str, stmt: &str, sink: &Sink<'_>) -> Option<Result<Step>> {
        let s = match self.step(id, stmt) {
            Ok(s) => s,
            Err(e) => return Some(Err(e)),
        };
        if !sink.print(&s).await {
            return None;
        }
        if !s.pause.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(s.pause) => {}
                _ = sink.output.closed() => return None,
            }
        }
        Some(Ok(s))
    }

    /// An attached client sees the container to its end, however it ends (removed with its
    /// pod included); as with the kubelet, the session itself then succeeded.
    async fn attached(&self, id: &str, output: &Output) -> Option<Result<i32>> {
        tokio::select! {
            exit = crate::runtime::Runtime::wait_container(self, id) => match exit {
                Ok(_) | Err(RuntimeError::NotFound { .. }) => Some(Ok(0)),
                Err(e) => Some(Err(e)),
            },
            _ = output.closed() => None,
        }
    }
}

/// The next chunk of standard input, skipping resizes; `None` once it is closed.
async fn next_input(input: &mut mpsc::Receiver<SessionInput>) -> Option<SessionInput> {
    loop {
        match input.recv().await? {
            SessionInput::Resize { .. } => continue,
            SessionInput::CloseStdin => return None,
            data => return Some(data),
        }
    }
}
