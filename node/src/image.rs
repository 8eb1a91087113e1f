//! The small images Skiff's tests and demos run, built locally from Debian's `busybox-static`
//! because no registry is reachable: an OCI image layout in a tar archive, which
//! `ctr images import` (or any OCI tool) takes as it is.
//!
//! ```text
//! archive.tar
//! ├── oci-layout                 {"imageLayoutVersion":"1.0.0"}
//! ├── index.json                 → manifest, annotated with the full image name
//! └── blobs/sha256/
//!     ├── <manifest>             → config + one layer
//!     ├── <config>               entrypoint, cmd, rootfs diff_id = layer digest
//!     └── <layer>                uncompressed tar: bin/busybox, bin/<applet> → busybox, tmp/
//! ```
//!
//! Both images share the one layer: `busybox` (entrypoint `sh`) for workloads, and `pause`,
//! the sandbox's placeholder process, which sleeps until SIGTERM. A third, `kubectl`, adds
//! a layer with a static `kubectl` (the host's, when it has one) over the busybox layer: a
//! real Kubernetes client for pods, which reaches the API server from inside the cluster
//! with its service account (busybox's own `wget` speaks a TLS 1.2 without the
//! `signature_algorithms` extension, which rustls, and OpenSSL 3 with an ECDSA key, refuse).

use sha2::{Digest, Sha256};

/// The workload image.
pub const BUSYBOX: &str = "localhost/skiff/busybox:1";
/// The sandbox ("pause") image.
pub const PAUSE: &str = "localhost/skiff/pause:1";
/// The in-cluster client image: `kubectl` (its entrypoint) beside busybox.
pub const KUBECTL: &str = "localhost/skiff/kubectl:1";

/// Applets linked into `bin/`: what the tests, probes and hooks run.
const APPLETS: &[&str] = &[
    "sh", "ash", "sleep", "echo", "cat", "true", "false", "ls", "test", "[", "touch", "rm", "tail",
    "head", "printf", "env", "id", "ps", "kill", "mkdir", "yes", "dd", "nc", "httpd", "wget",
    "date", "hostname", "grep", "seq", "ln", "cp", "mv", "wc", "free", "timeout",
];

/// A tar archive built in memory. Entries are owned by root, dated at the epoch (so the same
/// input gives the same archive, and the same digests), and written in GNU format, which takes
/// names and link targets of any length.
struct Archive(tar::Builder<Vec<u8>>);

impl Archive {
    fn new() -> Self {
        Archive(tar::Builder::new(Vec::new()))
    }

    fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_size(size);
        h
    }

    fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        let mut h = Self::header(tar::EntryType::Regular, mode, data.len() as u64);
        self.push(|b| b.append_data(&mut h, path, data));
    }

    fn dir(&mut self, path: &str, mode: u32) {
        let mut h = Self::header(tar::EntryType::Directory, mode, 0);
        self.push(|b| b.append_data(&mut h, path, std::io::empty()));
    }

    fn symlink(&mut self, path: &str, target: &str) {
        let mut h = Self::header(tar::EntryType::Symlink, 0o777, 0);
        self.push(|b| b.append_link(&mut h, path, target));
    }

    /// Writing into a `Vec` cannot fail; a path the format cannot hold (absolute, or with
    /// `..`) is a bug in the fixed layout above.
    fn push(&mut self, add: impl FnOnce(&mut tar::Builder<Vec<u8>>) -> std::io::Result<()>) {
        if let Err(e) = add(&mut self.0) {
            panic!("image archive entry: {e}");
        }
    }

    fn finish(self) -> Vec<u8> {
        match self.0.into_inner() {
            Ok(bytes) => bytes,
            Err(e) => panic!("image archive: {e}"),
        }
    }
}

fn sha256(data: &[u8]) -> String {
    let d = Sha256::digest(data);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The root filesystem layer: `busybox` and its applet links.
fn layer(busybox: &[u8]) -> Vec<u8> {
    let mut t = Archive::new();
    t.dir("bin/", 0o755);
    t.file("bin/busybox", 0o755, busybox);
    for a in APPLETS {
        t.symlink(&format!("bin/{a}"), "busybox");
    }
    t.dir("tmp/", 0o1777);
    t.dir("etc/", 0o755);
    t.finish()
}

/// A layer of one executable, `bin/<name>`.
fn binary_layer(name: &str, data: &[u8]) -> Vec<u8> {
    let mut t = Archive::new();
    t.dir("bin/", 0o755);
    t.file(&format!("bin/{name}"), 0o755, data);
    t.finish()
}

/// Whether `elf` is an executable that needs no dynamic loader (no `PT_INTERP`): one that
/// runs in an image holding nothing else. Only 64-bit little-endian ELF is looked at.
pub fn is_static_executable(elf: &[u8]) -> bool {
    let u16_at = |at: usize| {
        elf.get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        elf.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |at: usize| {
        elf.get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
    };
    const PT_INTERP: u32 = 3;
    if !elf.starts_with(b"\x7fELF\x02\x01") {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    let Ok(phoff) = usize::try_from(phoff) else {
        return false;
    };
    (0..usize::from(phnum)).all(|i| {
        let at = phoff + i * usize::from(phentsize);
        u32_at(at).is_some_and(|kind| kind != PT_INTERP)
    })
}

/// An OCI image layout archive of one image named `name` over the busybox layer.
pub fn archive(name: &str, busybox: &[u8], entrypoint: &[&str], cmd: &[&str]) -> Vec<u8> {
    layered(name, &[layer(busybox)], entrypoint, cmd)
}

/// An OCI image layout archive of one image named `name` of `layers`, the lowest first.
fn layered(name: &str, layers: &[Vec<u8>], entrypoint: &[&str], cmd: &[&str]) -> Vec<u8> {
    let digests: Vec<String> = layers.iter().map(|l| sha256(l)).collect();
    let config = serde_json::json!({
        "architecture": oci_arch(),
        "os": "linux",
        "config": {
            "Entrypoint": entrypoint,
            "Cmd": cmd,
            "Env": ["PATH=/bin"],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers",
                   "diff_ids": digests.iter().map(|d| format!("sha256:{d}")).collect::<Vec<_>>()},
    })
    .to_string()
    .into_bytes();
    let config_digest = sha256(&config);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": format!("sha256:{config_digest}"), "size": config.len()},
        "layers": layers.iter().zip(&digests).map(|(l, d)| serde_json::json!(
            {"mediaType": "application/vnd.oci.image.layer.v1.tar",
             "digest": format!("sha256:{d}"), "size": l.len()})).collect::<Vec<_>>(),
    })
    .to_string()
    .into_bytes();
    let manifest_digest = sha256(&manifest);
    let tag = name.rsplit_once(':').map_or("latest", |(_, t)| t);
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_digest}"),
            "size": manifest.len(),
            "annotations": {
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": tag,
            },
        }],
    })
    .to_string()
    .into_bytes();
    let mut t = Archive::new();
    t.file("oci-layout", 0o644, br#"{"imageLayoutVersion":"1.0.0"}"#);
    t.file("index.json", 0o644, &index);
    t.dir("blobs/", 0o755);
    t.dir("blobs/sha256/", 0o755);
    let blobs = layers
        .iter()
        .zip(&digests)
        .chain([(&config, &config_digest), (&manifest, &manifest_digest)]);
    for (blob, digest) in blobs {
        t.file(&format!("blobs/sha256/{digest}"), 0o644, blob);
    }
    t.finish()
}

fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The workload image archive.
pub fn busybox_archive(busybox: &[u8]) -> Vec<u8> {
    archive(BUSYBOX, busybox, &[], &["sh"])
}

/// The in-cluster client image archive: `kubectl` (a static build) over busybox, with
/// `kubectl` as its entrypoint (`args: [get, pods]`; `command: [sh, -c, …]` scripts it).
pub fn kubectl_archive(busybox: &[u8], kubectl: &[u8]) -> Vec<u8> {
    layered(
        KUBECTL,
        &[layer(busybox), binary_layer("kubectl", kubectl)],
        &["kubectl"],
        &["version"],
    )
}

/// The sandbox image archive: a process that sleeps until SIGTERM (as PID 1 it needs the
/// trap to die from it at all).
pub fn pause_archive(busybox: &[u8]) -> Vec<u8> {
    archive(
        PAUSE,
        busybox,
        &[
            "/bin/sh",
            "-c",
            "trap 'exit 0' TERM INT; while true; do sleep 3600 & wait $!; done",
        ],
        &[],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every entry reads back with its name, kind, mode and contents, whatever the length of
    /// its name.
    #[test]
    fn entries_read_back() {
        let long = format!("blobs/sha256/{}", "a".repeat(120));
        let mut t = Archive::new();
        t.dir("bin/", 0o755);
        t.file("bin/x", 0o755, b"hello");
        t.symlink("bin/sh", "x");
        t.file(&long, 0o644, b"blob");
        let bytes = t.finish();
        let mut read = tar::Archive::new(bytes.as_slice());
        let mut seen = Vec::new();
        for entry in read.entries().expect("entries") {
            let mut entry = entry.expect("entry");
            let path = entry.path().expect("path").to_string_lossy().into_owned();
            let kind = entry.header().entry_type();
            let mode = entry.header().mode().expect("mode");
            let link = entry
                .link_name()
                .expect("link")
                .map(|l| l.to_string_lossy().into_owned());
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut data).expect("data");
            seen.push((path, kind, mode, link, data));
        }
        assert_eq!(seen.len(), 4);
        assert_eq!(seen[0].0, "bin/");
        assert!(seen[0].1.is_dir());
        assert_eq!((seen[1].2, seen[1].4.as_slice()), (0o755, &b"hello"[..]));
        assert_eq!(seen[2].3.as_deref(), Some("x"));
        assert_eq!(seen[3].0, long);
        assert_eq!(seen[3].4, b"blob");
    }

    /// The kubectl image has both layers, in order, each a blob of the archive.
    #[test]
    fn the_kubectl_image_stacks_its_layer_over_busybox() {
        let a = kubectl_archive(b"bb", b"kk");
        let text = String::from_utf8_lossy(&a);
        assert!(text.contains("\"io.containerd.image.name\":\"localhost/skiff/kubectl:1\""));
        let (busybox, kubectl) = (
            sha256(&layer(b"bb")),
            sha256(&binary_layer("kubectl", b"kk")),
        );
        let order = format!("\"diff_ids\":[\"sha256:{busybox}\",\"sha256:{kubectl}\"]");
        assert!(text.contains(&order), "{text}");
        assert!(text.contains(&format!("blobs/sha256/{kubectl}")));
        assert!(text.contains("\"Entrypoint\":[\"kubectl\"]"));
    }

    /// A static executable has no program interpreter; this test's own binary (linked
    /// against glibc) has one; anything else is not an executable at all.
    #[test]
    fn static_executables_are_told_from_dynamic_ones() {
        let me = std::fs::read(std::env::current_exe().expect("exe")).expect("read");
        assert!(!is_static_executable(&me));
        assert!(!is_static_executable(b"#!/bin/sh\n"));
        // A minimal ELF64 header with no program headers needs no loader.
        let mut elf = vec![0u8; 64];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        assert!(is_static_executable(&elf));
        // One PT_INTERP program header makes it dynamic.
        elf[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        elf[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        elf.extend_from_slice(&[0u8; 56]);
        elf[64..68].copy_from_slice(&3u32.to_le_bytes());
        assert!(!is_static_executable(&elf));
        if let Ok(bb) = std::fs::read("/bin/busybox") {
            assert!(is_static_executable(&bb), "Debian's busybox-static");
        }
    }

    #[test]
    fn archives_are_reproducible() {
        assert_eq!(busybox_archive(b"bb"), busybox_archive(b"bb"));
    }

    #[test]
    fn archive_names_the_image_and_its_blobs() {
        let a = busybox_archive(b"\x7fELF fake busybox");
        let text = String::from_utf8_lossy(&a);
        assert!(text.contains("\"io.containerd.image.name\":\"localhost/skiff/busybox:1\""));
        assert!(text.contains("oci-layout"));
        assert_eq!(a.len() % 512, 0);
    }
}
