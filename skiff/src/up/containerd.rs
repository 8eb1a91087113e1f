//! The containerd of a `--runtime cri` cluster.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::supervisor::Proc;

/// A containerd of the cluster's own (`--runtime cri`): its config, root, state and socket
/// under `<data-dir>/containerd`, the CRI plugin set up for this machine (full image names,
/// `restrict_oom_score_adj`), and the busybox and pause images imported from busybox-static.
pub(super) struct Containerd {
    proc: Proc,
    pub(super) socket: PathBuf,
}

impl Containerd {
    pub(super) fn start(dir: &Path, exe: &str) -> Result<Containerd> {
        let home = dir.join("containerd");
        std::fs::create_dir_all(home.join("cni"))
            .with_context(|| format!("creating {}", home.display()))?;
        let socket = home.join("containerd.sock");
        let config = skiff_node::cri::containerd_config(&home);
        std::fs::write(home.join("config.toml"), config).context("containerd config")?;
        let mut proc = Proc::new(
            "containerd",
            dir.join("logs").join("containerd.log"),
            vec![
                "containerd".into(),
                "--config".into(),
                home.join("config.toml").to_string_lossy().into(),
            ],
            false,
        );
        proc.start()
            .context("containerd (Debian: apt-get install containerd runc)")?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            if let Some(s) = proc.exited() {
                bail!(
                    "containerd exited ({s}); see {}",
                    dir.join("logs").join("containerd.log").display()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "containerd did not listen on {} within 20 s",
                    socket.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let images = home.join("images");
        let run = |args: &[&str]| -> Result<()> {
            let out = Command::new(exe)
                .args(args)
                .output()
                .with_context(|| format!("skiff {}", args.join(" ")))?;
            if !out.status.success() {
                bail!(
                    "skiff {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            Ok(())
        };
        let images_s = images.to_string_lossy().to_string();
        run(&["image", "build", "--out", &images_s])?;
        run(&[
            "image",
            "import",
            "--containerd-socket",
            &socket.to_string_lossy(),
            &format!("{images_s}/busybox.tar"),
            &format!("{images_s}/pause.tar"),
        ])?;
        Ok(Containerd { proc, socket })
    }

    /// Stops what containerd runs (its shims outlive it by design), then containerd.
    pub(super) fn stop(mut self) {
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
        self.proc.stop(Duration::from_secs(10));
        if let Ok(o) = shims {
            for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                if let Ok(pid) = pid.parse::<i32>() {
                    // SAFETY: kill(2) of a shim of the containerd this cluster started.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
            }
        }
    }
}
