//! One way to start Skiff's processes, shared by `skiff up`, the multi-process tests and the
//! Jepsen harness.
//!
//! | module | what lives there |
//! |---|---|
//! | [`command`] | typed `skiff store`, `skiff apiserver`, `skiff scheduler` and `skiff node` command lines (their argv is checked against the real clap definitions by the skiff crate's tests) and [`RuntimeKind`] |
//! | [`child`] | [`Launch`] (what to run, where its output goes) and [`Child`], the handle: logs to a file, dies with its parent, is killed by PID when dropped, prints its log's tail when dropped during a panic |
//! | [`containerd`] | a containerd of one's own (config, root, state and socket under one directory) with the busybox and pause images imported |
//! | [`network`] | the link the real nodes of one machine share: a bridge in a namespace of its own, each node's namespace joined by a veth pair |
//!
//! ```text
//!  StoreCommand { .. }.args() ─┐
//!                              ├─► Launch::new(name, program, log).args(..) ─► spawn() ─► Child
//!  "containerd" --config ..  ──┘      stdout + stderr ─► log (appended)          pid, signal, pause,
//!                                     own process group, PR_SET_PDEATHSIG        stop, kill, restart
//! ```

pub mod child;
pub mod command;
pub mod containerd;
pub mod network;

use std::path::PathBuf;

pub use child::{Child, Launch};
pub use command::{
    ApiServerCommand, ClientCert, ClusterState, ControllerManagerCommand, NodeBootstrap,
    NodeCommand, RuntimeKind, SchedulerCommand, ServingCert, SigningCa, StoreCommand, StoreTls,
};
pub use containerd::{Containerd, unmount_under};
pub use network::{Netns, NodeNetwork};

/// Why a process could not be started, signalled or set up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("opening the log {}: {source}", path.display())]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("starting {name} ({command}): {source}")]
    Spawn {
        name: String,
        command: String,
        source: std::io::Error,
    },
    #[error("sending {signal} to {name} (pid {pid}): {source}")]
    Signal {
        name: String,
        pid: u32,
        signal: nix::sys::signal::Signal,
        source: nix::Error,
    },
    #[error("{name} exited ({status}); see {}", log.display())]
    Exited {
        name: String,
        status: std::process::ExitStatus,
        log: PathBuf,
    },
    #[error("{name} did not listen on {} within {} s", socket.display(), limit.as_secs())]
    NotListening {
        name: String,
        socket: PathBuf,
        limit: std::time::Duration,
    },
    #[error("writing {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{command}: {reason}")]
    Setup { command: String, reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs a setup step to completion. `what` names it in the error, with its standard error
/// when it fails, or with why it could not start and `hint` (what installs it).
pub(crate) fn setup(mut command: std::process::Command, what: String, hint: &str) -> Result<()> {
    let out = command.output().map_err(|e| Error::Setup {
        command: what.clone(),
        reason: format!("{e}{hint}"),
    })?;
    if !out.status.success() {
        return Err(Error::Setup {
            command: what,
            reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}
