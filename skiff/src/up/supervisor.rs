//! The children of `up`: each one logs to its own file, runs in its own process group and
//! dies with `up`; store members are started again when they exit; shutdown goes in order
//! (agents, scheduler, then the members together).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::MEMBERS;
use super::containerd::Containerd;
use super::layout::Layout;

/// One supervised child process.
pub(super) struct Proc {
    name: String,
    log: PathBuf,
    command: Vec<String>,
    child: Option<Child>,
    /// Started again when it exits (store members).
    restart: bool,
    restarts: u32,
}

impl Proc {
    pub(super) fn new(name: &str, log: PathBuf, command: Vec<String>, restart: bool) -> Proc {
        Proc {
            name: name.to_string(),
            log,
            command,
            child: None,
            restart,
            restarts: 0,
        }
    }

    pub(super) fn start(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let mut cmd = Command::new(&self.command[0]);
        cmd.args(&self.command[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("log file")?)
            .stderr(log)
            // Its own process group: Ctrl-C reaches only `up`, which stops the children in
            // order.
            .process_group(0);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                // Die with `up`, even when it is killed with SIGKILL.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}: {}", self.name, self.command.join(" ")))?;
        self.child = Some(child);
        Ok(())
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The exit status, if it has exited since the last look.
    pub(super) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status)
    }

    fn signal(&self, sig: i32) {
        if let Some(pid) = self.pid() {
            // SAFETY: kill(2) on a child we spawned and have not reaped.
            unsafe {
                libc::kill(pid as i32, sig);
            }
        }
    }

    /// SIGTERM, then SIGKILL once `grace` has passed.
    pub(super) fn stop(&mut self, grace: Duration) {
        self.signal(libc::SIGTERM);
        self.reap(Instant::now() + grace);
    }

    /// Waits for the child to exit, SIGKILL at `deadline`.
    fn reap(&mut self, deadline: Instant) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

/// The running cluster: every child, in start order.
pub struct Cluster {
    pub(super) dir: PathBuf,
    pub(super) layout: Layout,
    pub(super) procs: Vec<Proc>,
    pub(super) containerd: Option<Containerd>,
}

impl Cluster {
    /// A cluster in `dir` on `layout`'s ports; nothing runs yet.
    pub(super) fn new(dir: PathBuf, layout: Layout) -> Cluster {
        Cluster {
            dir,
            layout,
            procs: Vec::new(),
            containerd: None,
        }
    }

    /// Where every child's log goes.
    pub(super) fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }

    /// Starts `p` and keeps it (children stop in the reverse order of their start).
    pub(super) fn start(&mut self, mut p: Proc) -> Result<()> {
        p.start()?;
        self.procs.push(p);
        Ok(())
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.layout.endpoints()
    }

    /// kill -9 of store member `i` (the supervisor starts it again).
    pub fn kill_member(&mut self, i: usize) {
        let name = format!("store-{}", MEMBERS[i]);
        if let Some(p) = self.procs.iter().find(|p| p.name == name) {
            p.signal(libc::SIGKILL);
        }
    }

    /// Restarts members that died; reports other children that died. Returns false when
    /// a child that is not restarted has exited.
    pub fn supervise(&mut self) -> bool {
        let mut healthy = true;
        for p in &mut self.procs {
            if let Some(status) = p.exited() {
                if p.restart {
                    p.restarts += 1;
                    eprintln!(
                        "skiff up: {} exited ({status}); starting it again on its data directory",
                        p.name
                    );
                    if let Err(e) = p.start() {
                        eprintln!("skiff up: {e:#}");
                        healthy = false;
                    }
                } else {
                    eprintln!(
                        "skiff up: {} exited ({status}); its log: {}",
                        p.name,
                        p.log.display()
                    );
                    healthy = false;
                }
            }
        }
        healthy
    }

    /// Stops everything: the agents, then the scheduler, then the members, all three at
    /// once (one by one, the first would wait out its peers' connections).
    pub(super) fn stop(&mut self) {
        let grace = Duration::from_secs(10);
        for p in self.procs.iter_mut().rev().filter(|p| !p.restart) {
            p.stop(grace);
        }
        for p in self.procs.iter().filter(|p| p.restart) {
            p.signal(libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        for p in self.procs.iter_mut().filter(|p| p.restart) {
            p.reap(deadline);
        }
        if let Some(c) = self.containerd.take() {
            c.stop();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Polls `ready` until it holds, supervising the children meanwhile.
pub async fn wait_for<F, Fut>(
    cluster: &mut Cluster,
    limit: Duration,
    what: &str,
    mut ready: F,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if ready().await {
            return Ok(());
        }
        if !cluster.supervise() {
            bail!(
                "a process exited while waiting for {what}; logs in {}",
                cluster.dir.join("logs").display()
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "{what} not ready after {} s; logs in {}",
                limit.as_secs(),
                cluster.dir.join("logs").display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
