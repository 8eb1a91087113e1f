//! Where a cluster lives and which ports it takes: `<data-dir>/cluster.json` holds the base
//! port it was created with and whether it is secured (TLS, certificates in
//! `<data-dir>/certs`, RBAC), `<data-dir>/up.lock` keeps a second `up` away.
//!
//! ```text
//!  member i:  client base+10i   peer base+10i+1   metrics base+10i+2   Kubernetes API base+10i+3
//!             (i = 0, 1, 2)
//!  scheduler metrics base+30    node agents' log service base+31    their metrics base+32
//!  controller manager metrics base+33
//! ```

use std::fs::File;
use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::MEMBERS;

/// What a directory's cluster was created with, so a second `up` resumes it as it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Layout {
    base_port: u16,
    /// TLS on every store URL, certificates for every component, RBAC. Layouts written
    /// before clusters were secured have none, and resume as they were.
    #[serde(default)]
    pub(super) tls: bool,
    /// The etcd the cluster's API servers keep its objects in (`up --etcd-servers`), instead
    /// of three store members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) etcd: Option<Etcd>,
}

/// An etcd `up` runs the API servers on: its client URLs, and the files of a TLS client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Etcd {
    pub(crate) servers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ca: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cert: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) key: Option<PathBuf>,
    /// Where in the etcd the cluster's objects are (`--etcd-prefix`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) prefix: Option<String>,
}

impl Layout {
    pub(super) fn client(&self, i: usize) -> u16 {
        self.base_port + 10 * i as u16
    }
    pub(super) fn peer(&self, i: usize) -> u16 {
        self.client(i) + 1
    }
    pub(super) fn metrics(&self, i: usize) -> u16 {
        self.client(i) + 2
    }
    /// The member's Kubernetes REST API (kubectl, client libraries).
    pub(super) fn api(&self, i: usize) -> u16 {
        self.client(i) + 3
    }
    /// `https` for a secured cluster, else `http`.
    pub(super) fn scheme(&self) -> &'static str {
        if self.tls { "https" } else { "http" }
    }
    pub(super) fn api_url(&self, i: usize) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), self.api(i))
    }
    pub(super) fn scheduler_metrics(&self) -> u16 {
        self.base_port + 30
    }
    pub(super) fn node_logs(&self) -> u16 {
        self.base_port + 31
    }
    pub(super) fn node_metrics(&self) -> u16 {
        self.base_port + 32
    }
    pub(super) fn controller_metrics(&self) -> u16 {
        self.base_port + 33
    }
    /// The log and session port of real node `i`'s agent (`--runtime cri` runs one agent
    /// per node): the agents' port for the first, base+40+2(i-1) for the others.
    pub(super) fn agent_logs(&self, i: usize) -> u16 {
        match i {
            0 => self.node_logs(),
            _ => self.base_port + 40 + 2 * (i as u16 - 1),
        }
    }
    /// The metrics port of real node `i`'s agent (next to its log port).
    pub(super) fn agent_metrics(&self, i: usize) -> u16 {
        match i {
            0 => self.node_metrics(),
            _ => self.agent_logs(i) + 1,
        }
    }
    pub(super) fn ports(&self) -> Vec<u16> {
        let mut p: Vec<u16> = (0..MEMBERS.len())
            .flat_map(|i| [self.client(i), self.peer(i), self.metrics(i), self.api(i)])
            .collect();
        p.extend([
            self.scheduler_metrics(),
            self.node_logs(),
            self.node_metrics(),
            self.controller_metrics(),
        ]);
        p
    }
    pub(super) fn endpoints(&self) -> Vec<String> {
        (0..MEMBERS.len())
            .map(|i| format!("127.0.0.1:{}", self.client(i)))
            .collect()
    }
    /// Every member's name and peer URL.
    pub(super) fn initial_cluster(&self) -> Vec<(String, String)> {
        MEMBERS
            .iter()
            .enumerate()
            .map(|(i, m)| {
                (
                    (*m).to_string(),
                    format!("{}://127.0.0.1:{}", self.scheme(), self.peer(i)),
                )
            })
            .collect()
    }
}

pub(super) fn default_dir() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".skiff").join("up")
}

/// Holds an exclusive lock on `<dir>/up.lock` while the cluster runs.
pub(super) fn lock(dir: &Path) -> Result<File> {
    let path = dir.join("up.lock");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            bail!(
                "another `skiff up` runs from {} (pid {}); stop it first, or pass another --data-dir",
                dir.display(),
                holder.trim()
            );
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("locking {}", path.display()));
        }
    }
    file.set_len(0).context("lock file")?;
    write!(file, "{}", std::process::id()).context("lock file")?;
    Ok(file)
}

pub(super) fn free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// The layout of the cluster created in `dir`, when one was.
fn read(dir: &Path) -> Result<Option<Layout>> {
    let path = dir.join("cluster.json");
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .with_context(|| format!("{}: not a cluster layout", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// The Kubernetes API URL of the first member of the cluster created in `dir` (the one the
/// kubeconfig names), when `dir` holds a cluster.
pub(crate) fn kubernetes_api(dir: &Path) -> Result<Option<String>> {
    Ok(read(dir)?.map(|l| l.api_url(0)))
}

/// The layout of the cluster in `dir`, and whether it exists already; a new one is not
/// recorded yet (see [`save`]).
pub(super) fn load_layout(
    dir: &Path,
    base_port: Option<u16>,
    tls: bool,
    etcd: Option<Etcd>,
) -> Result<(Layout, bool)> {
    match read(dir)? {
        Some(layout) => {
            if etcd.is_some() && etcd != layout.etcd {
                bail!(
                    "{} holds a cluster created {}; it keeps its store (drop --etcd-servers, or use another --data-dir)",
                    dir.display(),
                    match &layout.etcd {
                        Some(e) => format!(
                            "on etcd {}{}",
                            e.servers.join(","),
                            e.prefix
                                .as_ref()
                                .map(|p| format!(" under --etcd-prefix {p}"))
                                .unwrap_or_default()
                        ),
                        None => "with its own store members".to_string(),
                    }
                );
            }
            if layout.tls != tls {
                bail!(
                    "{} holds a cluster created {}; it stays so ({}, or use another --data-dir)",
                    dir.display(),
                    if layout.tls {
                        "with TLS and RBAC"
                    } else {
                        "without TLS (--insecure)"
                    },
                    if layout.tls {
                        "drop --insecure"
                    } else {
                        "pass --insecure"
                    }
                );
            }
            if let Some(p) = base_port
                && p != layout.base_port
            {
                bail!(
                    "{} holds a cluster on base port {}; it keeps its ports (drop --base-port, or use another --data-dir)",
                    dir.display(),
                    layout.base_port
                );
            }
            Ok((layout, true))
        }
        None => {
            // A new cluster without --base-port takes etcd's ports, or the next free range
            // (a running etcd or another cluster may hold 2379).
            let base_port = base_port.unwrap_or_else(|| {
                (0..50)
                    .map(|i| 2379 + 100 * i)
                    .find(|b| {
                        let probe = Layout {
                            base_port: *b,
                            tls,
                            etcd: None,
                        };
                        probe.ports().into_iter().all(free)
                    })
                    .unwrap_or(2379)
            });
            let layout = Layout {
                base_port,
                tls,
                etcd,
            };
            if u32::from(layout.base_port) + 40 > u32::from(u16::MAX) {
                bail!(
                    "--base-port {} leaves no room for the cluster's ports",
                    layout.base_port
                );
            }
            Ok((layout, false))
        }
    }
}

/// Records a new cluster's layout in `dir`, once its ports were found free: a start refused
/// for busy ports leaves nothing behind, so the next may take another range.
pub(super) fn save(dir: &Path, layout: &Layout) -> Result<()> {
    let path = dir.join("cluster.json");
    std::fs::write(&path, serde_json::to_vec_pretty(layout)?)
        .with_context(|| format!("writing {}", path.display()))
}
