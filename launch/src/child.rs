//! A child process as every launcher needs it.
//!
//! - stdout and stderr go to one log file, appended to, so a restarted process continues the
//!   log of the one before it; stdin is closed;
//! - it runs in its own process group, so a terminal's Ctrl-C reaches only the parent, which
//!   stops its children in its own order;
//! - it dies with its parent, even when the parent is killed with SIGKILL
//!   (`PR_SET_PDEATHSIG`). The kernel ties this to the *thread* that spawned the child: spawn
//!   from a thread that lives as long as the child (the main thread, a test's thread, an
//!   async runtime's worker), never from `spawn_blocking`, whose threads end when idle;
//! - dropped, it is killed by PID (SIGKILL) and reaped; dropped while the thread panics (a
//!   failing test), it prints the tail of its log first, and the first panic in it, so the
//!   failure shows why.

use std::ffi::{OsStr, OsString};
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::{Error, Result};

/// Lines of the log printed when a child is dropped during a panic, unless
/// [`Child::tail_on_panic`] says otherwise.
pub const PANIC_TAIL_LINES: usize = 40;

/// What to run: a program, its arguments and environment, and the log its output goes to.
#[derive(Debug, Clone)]
pub struct Launch {
    name: String,
    program: OsString,
    args: Vec<OsString>,
    /// `None` removes the variable.
    env: Vec<(OsString, Option<OsString>)>,
    log: PathBuf,
}

impl Launch {
    /// `program` under `name` (used in messages), its output appended to `log`.
    pub fn new(
        name: impl Into<String>,
        program: impl AsRef<OsStr>,
        log: impl Into<PathBuf>,
    ) -> Launch {
        Launch {
            name: name.into(),
            program: program.as_ref().to_os_string(),
            args: Vec::new(),
            env: Vec::new(),
            log: log.into(),
        }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Launch {
        self.args.push(arg.as_ref().to_os_string());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Launch
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Launch {
        self.env.push((
            key.as_ref().to_os_string(),
            Some(value.as_ref().to_os_string()),
        ));
        self
    }

    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Launch {
        self.env.push((key.as_ref().to_os_string(), None));
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The command line, for messages.
    pub fn command_line(&self) -> String {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Starts it.
    pub fn spawn(self) -> Result<Child> {
        let process = self.start()?;
        Ok(Child {
            launch: self,
            process: Some(process),
            panic_tail: PANIC_TAIL_LINES,
        })
    }

    fn start(&self) -> Result<std::process::Child> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|source| Error::Log {
                path: self.log.clone(),
                source,
            })?;
        let out = log.try_clone().map_err(|source| Error::Log {
            path: self.log.clone(),
            source,
        })?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(log)
            .process_group(0);
        for (key, value) in &self.env {
            match value {
                Some(v) => cmd.env(key, v),
                None => cmd.env_remove(key),
            };
        }
        // SAFETY: the closure runs in the child between fork and exec; it only makes the
        // prctl(2) system call, which is async-signal-safe and touches no memory of the
        // parent.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        cmd.spawn().map_err(|source| Error::Spawn {
            name: self.name.clone(),
            command: self.command_line(),
            source,
        })
    }
}

/// A started process (see the module's documentation); killed by PID when dropped.
#[derive(Debug)]
pub struct Child {
    launch: Launch,
    /// `None` once it has been killed or seen to exit.
    process: Option<std::process::Child>,
    panic_tail: usize,
}

impl Child {
    /// Prints the last `lines` lines of the log (instead of [`PANIC_TAIL_LINES`]) when dropped
    /// during a panic.
    pub fn tail_on_panic(mut self, lines: usize) -> Child {
        self.panic_tail = lines;
        self
    }

    pub fn name(&self) -> &str {
        &self.launch.name
    }

    pub fn log(&self) -> &Path {
        &self.launch.log
    }

    /// The PID while it runs (or has exited unseen: see [`Child::exited`]).
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(std::process::Child::id)
    }

    /// Started, and neither killed nor seen to exit.
    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    /// The exit status, if it has exited since the last look (the process is reaped).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.process.as_mut()?.try_wait().ok()??;
        self.process = None;
        Some(status)
    }

    /// Sends `signal` to the process (nothing if it is not running).
    pub fn signal(&self, signal: Signal) -> Result<()> {
        let Some(pid) = self.pid() else {
            return Ok(());
        };
        // A PID of a child not yet reaped cannot be reused, so this reaches our own process.
        let raw = i32::try_from(pid).expect("invariant: Linux PIDs fit in an i32");
        kill(Pid::from_raw(raw), signal).map_err(|source| Error::Signal {
            name: self.launch.name.clone(),
            pid,
            signal,
            source,
        })
    }

    /// SIGSTOP.
    pub fn pause(&self) -> Result<()> {
        self.signal(Signal::SIGSTOP)
    }

    /// SIGCONT.
    pub fn resume(&self) -> Result<()> {
        self.signal(Signal::SIGCONT)
    }

    /// kill -9 (a stopped process dies too), and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            // It may have exited already; either way it is dead and reaped afterwards.
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    /// `signal`, then SIGKILL once `grace` has passed. The exit status, if it exited by
    /// itself in time.
    pub fn stop(&mut self, signal: Signal, grace: Duration) -> Option<ExitStatus> {
        let _ = self.signal(signal);
        self.wait_until(Instant::now() + grace)
    }

    /// Waits for the process to exit, SIGKILL at `deadline`. The exit status, if it exited
    /// by itself in time.
    pub fn wait_until(&mut self, deadline: Instant) -> Option<ExitStatus> {
        let mut process = self.process.take()?;
        loop {
            match process.try_wait() {
                Ok(Some(status)) => return Some(status),
                Err(_) => return None,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = process.kill();
                    let _ = process.wait();
                    return None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// Starts the same command again, its output appended to the same log; a process still
    /// running is killed first.
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        self.process = Some(self.launch.start()?);
        Ok(())
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.launch.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// What a failing test shows: the first panic in the log (Go's `panic:` or Rust's
    /// `panicked at`, whose message comes before a long stack) and the log's tail.
    fn report(&self) -> String {
        let text = std::fs::read_to_string(&self.launch.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail_from = lines.len().saturating_sub(self.panic_tail);
        let mut out = String::new();
        if let Some(at) = lines[..tail_from]
            .iter()
            .position(|l| l.starts_with("panic:") || l.contains("panicked at"))
        {
            out.push_str(&format!("--- first panic in {} ---\n", self.name()));
            for l in lines[at..].iter().take(8.min(tail_from - at)) {
                out.push_str(l);
                out.push('\n');
            }
        }
        out.push_str(&format!(
            "--- last lines of {} ({}) ---\n",
            self.name(),
            self.log().display()
        ));
        for l in &lines[tail_from..] {
            out.push_str(l);
            out.push('\n');
        }
        out
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprint!("{}", self.report());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_goes_to_the_log_and_a_restart_appends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("echo.log");
        let mut c = Launch::new("echo", "sh", &log)
            .args(["-c", "echo out; echo err >&2; echo $SKIFF_LAUNCH_TEST"])
            .env("SKIFF_LAUNCH_TEST", "env")
            .spawn()
            .expect("spawn");
        let status = c.wait_until(Instant::now() + Duration::from_secs(10));
        assert!(status.is_some_and(|s| s.success()));
        assert!(!c.is_running());
        c.restart().expect("restart");
        c.wait_until(Instant::now() + Duration::from_secs(10));
        let text = std::fs::read_to_string(&log).expect("log");
        assert_eq!(text, "out\nerr\nenv\nout\nerr\nenv\n");
        assert_eq!(c.log_tail(2), "err\nenv");
    }

    #[test]
    fn stop_kills_what_ignores_the_signal_and_drop_kills_by_pid() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut c = Launch::new("stubborn", "sh", dir.path().join("s.log"))
            .args([
                "-c",
                "trap '' TERM; echo ready; while :; do sleep 0.05; done",
            ])
            .spawn()
            .expect("spawn");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !c.log_tail(1).contains("ready") {
            assert!(Instant::now() < deadline, "never ready");
            std::thread::sleep(Duration::from_millis(10));
        }
        c.pause().expect("SIGSTOP");
        c.resume().expect("SIGCONT");
        assert_eq!(c.stop(Signal::SIGTERM, Duration::from_millis(200)), None);
        assert!(!c.is_running());

        let c = Launch::new("sleeper", "sleep", dir.path().join("z.log"))
            .arg("600")
            .spawn()
            .expect("spawn");
        let pid = Pid::from_raw(c.pid().expect("pid") as i32);
        drop(c);
        // Reaped: the PID is gone.
        assert!(kill(pid, None).is_err());
    }

    #[test]
    fn the_report_shows_the_first_panic_and_the_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = "echo start; echo 'panic: boom'; echo stack; for i in $(seq 1 50); do echo line$i; done";
        let mut c = Launch::new("go", "sh", dir.path().join("go.log"))
            .args(["-c", script])
            .spawn()
            .expect("spawn")
            .tail_on_panic(3);
        c.wait_until(Instant::now() + Duration::from_secs(10));
        let r = c.report();
        assert!(
            r.contains("--- first panic in go ---\npanic: boom\nstack\n"),
            "{r}"
        );
        assert!(r.ends_with("line48\nline49\nline50\n"), "{r}");
        assert!(!r.contains("start"), "{r}");
    }
}
