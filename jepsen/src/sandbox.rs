//! The private sandbox a test runs in: the harness re-executes itself under
//! `unshare --net --mount --pid --fork --mount-proc`, so bridges, namespaces and iptables rules
//! it creates never touch the host network, mounts stay private, and when the harness exits
//! the kernel kills every process left in its PID namespace — cleanup that survives a crash.

use std::ffi::OsString;
use std::process::{Command, ExitStatus};

use anyhow::{Context, bail};

/// Set in the re-executed harness so it knows it is inside.
pub const ENV_INSIDE: &str = "SKIFF_JEPSEN_SANDBOX";

/// Where this process stands after [`enter`].
#[derive(Debug)]
pub enum Entered {
    /// We are the outer process: the sandboxed copy ran and ended with this status.
    Ran(ExitStatus),
    /// We are the sandboxed copy: run the test.
    Inside,
}

/// Whether the tools the sandbox needs are installed; `Err` names what is missing.
pub fn check_tools() -> anyhow::Result<()> {
    let mut missing = Vec::new();
    for tool in ["unshare", "ip", "iptables"] {
        let found = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
            .unwrap_or(false);
        if !found {
            missing.push(tool);
        }
    }
    if !missing.is_empty() {
        bail!(
            "{} not found on PATH (Debian: apt-get install util-linux iproute2 iptables)",
            missing.join(", ")
        );
    }
    Ok(())
}

/// Re-executes the current program with the same arguments inside a new network, mount and
/// PID namespace, unless already inside.
pub fn enter() -> anyhow::Result<Entered> {
    if std::env::var_os(ENV_INSIDE).is_some() {
        return Ok(Entered::Inside);
    }
    check_tools()?;
    let exe = std::env::current_exe().context("finding the current executable")?;
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let status = Command::new("unshare")
        .args([
            "--net",
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
            "--",
        ])
        .arg(&exe)
        .args(&args)
        .env(ENV_INSIDE, "1")
        .status()
        .context("running unshare (the harness needs root for network namespaces)")?;
    Ok(Entered::Ran(status))
}
