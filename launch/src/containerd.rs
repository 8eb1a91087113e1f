//! A containerd of one's own, for `skiff up --runtime cri` and the CRI tests: its config,
//! root, state and socket under one directory, the CRI plugin set up for this kind of
//! machine, and the busybox and pause images (built from busybox-static) imported.
//!
//! It runs in a network namespace of its own (`unshare --net`, loopback up), the node's: the
//! bridge, addresses and rules CNI makes for its pods live there and never touch the host's
//! network. Its socket is a file, reached from anywhere; its pods and its streaming server
//! are reached through [`Containerd::netns`].
//!
//! ```text
//!  home/config.toml   home/containerd.sock   home/root   home/state   home/images
//!  home/cni (network configurations)   home/cni-ipam (host-local's address leases)
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::{Child, Error, Launch, Result};

/// How long containerd may take to create its socket.
const LISTEN_LIMIT: Duration = Duration::from_secs(20);
/// How long containerd may take to stop after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A containerd configuration with everything under `home` (root, state, the socket
/// `home/containerd.sock`, CNI configs in `home/cni`), with the CRI plugin set up as this kind
/// of machine needs: the sandbox image fully named (no registry is reached) and
/// `restrict_oom_score_adj` (VMs without CAP_SYS_RESOURCE).
pub fn config(home: &Path, sandbox_image: &str) -> String {
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  # exec and attach: the streaming server listens on loopback, on a port of its choosing
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni"
"#,
        d = home.display(),
    )
}

/// A running containerd (see the module's documentation). Dropped, it stops what it runs
/// (its shims outlive it by design), then itself: SIGTERM, SIGKILL after 10 s.
#[derive(Debug)]
pub struct Containerd {
    child: Child,
    socket: PathBuf,
    home: PathBuf,
}

impl Containerd {
    /// Starts containerd on `home` with its output in `log`, waits for its socket, and
    /// imports the images `skiff image build` makes (`skiff` is the binary), the sandbox
    /// image among them under the name `sandbox_image`.
    pub fn start(home: &Path, log: &Path, skiff: &Path, sandbox_image: &str) -> Result<Containerd> {
        let cni = home.join("cni");
        std::fs::create_dir_all(&cni).map_err(|source| Error::Write { path: cni, source })?;
        let socket = home.join("containerd.sock");
        let config_path = home.join("config.toml");
        std::fs::write(&config_path, config(home, sandbox_image)).map_err(|source| {
            Error::Write {
                path: config_path.clone(),
                source,
            }
        })?;
        // The namespace's loopback is up (the streaming server listens there); `exec` keeps
        // containerd's PID the one launched, so its namespace is `/proc/<pid>/ns/net`.
        let mut child = Launch::new("containerd", "unshare", log)
            .args([
                "--net",
                "--",
                "sh",
                "-c",
                "ip link set lo up && exec containerd --config \"$1\"",
                "containerd",
            ])
            .arg(&config_path)
            .spawn()?;
        let deadline = Instant::now() + LISTEN_LIMIT;
        while !socket.exists() {
            if let Some(status) = child.exited() {
                return Err(Error::Exited {
                    name: "containerd".into(),
                    status,
                    log: log.to_path_buf(),
                });
            }
            if Instant::now() >= deadline {
                return Err(Error::NotListening {
                    name: "containerd".into(),
                    socket,
                    limit: LISTEN_LIMIT,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let containerd = Containerd {
            child,
            socket,
            home: home.to_path_buf(),
        };
        let images = home.join("images");
        run(
            skiff,
            &[
                "image".as_ref(),
                "build".as_ref(),
                "--out".as_ref(),
                images.as_os_str(),
            ],
        )?;
        // The kubectl image is built when the host has a static kubectl.
        let kubectl = images.join("kubectl.tar");
        let mut import = vec![
            "image".as_ref(),
            "import".as_ref(),
            "--containerd-socket".as_ref(),
            containerd.socket.as_os_str(),
        ];
        let archives = [images.join("busybox.tar"), images.join("pause.tar")];
        import.extend(archives.iter().map(|p| p.as_os_str()));
        if kubectl.exists() {
            import.push(kubectl.as_os_str());
        }
        run(skiff, &import)?;
        Ok(containerd)
    }

    /// Its socket (`home/containerd.sock`).
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Its network namespace (`/proc/<pid>/ns/net`), the node's.
    pub fn netns(&self) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/ns/net",
            self.child.pid().unwrap_or_default()
        ))
    }

    /// Its CNI configuration directory and host-local's lease directory (`home/cni`,
    /// `home/cni-ipam`).
    pub fn cni_dirs(&self) -> (PathBuf, PathBuf) {
        (self.home.join("cni"), self.home.join("cni-ipam"))
    }

    pub fn log(&self) -> &Path {
        self.child.log()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let ctr = |args: &[&str]| {
            Command::new("ctr")
                .arg("--address")
                .arg(&self.socket)
                .args(["-n", "k8s.io"])
                .args(args)
                .output()
        };
        if let Ok(o) = ctr(&["tasks", "ls", "-q"]) {
            for id in String::from_utf8_lossy(&o.stdout).lines() {
                let _ = ctr(&["tasks", "kill", "-s", "SIGKILL", id]);
            }
        }
        let shims = Command::new("pgrep")
            .args([
                "-f",
                &format!("containerd-shim.*-address {}", self.socket.display()),
            ])
            .output();
        self.child.stop(Signal::SIGTERM, STOP_GRACE);
        if let Ok(o) = shims {
            for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                if let Ok(pid) = pid.parse::<i32>() {
                    // A shim of this containerd (matched by its socket).
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
        }
        // The sandboxes' shm mounts and the snapshots stay mounted after their containerd:
        // unmounted, the directory can be removed (or a cluster resumed on it).
        unmount_under(&self.home);
    }
}

/// Unmounts whatever is mounted under `dir` (a containerd leaves its sandboxes' shm and its
/// overlay snapshots mounted), deepest first; lazily, so a mount still in use goes when it
/// is no longer used.
pub fn unmount_under(dir: &Path) {
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return;
    };
    let mut points: Vec<&str> = mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .filter(|p| Path::new(p).starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let _ = Command::new("umount").arg("-l").arg(p).output();
    }
}

/// Runs `skiff ARGS` to completion.
fn run(skiff: &Path, args: &[&std::ffi::OsStr]) -> Result<()> {
    let command = format!(
        "skiff {}",
        args.iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut run = Command::new(skiff);
    run.args(args);
    crate::setup(run, command, "")
}
