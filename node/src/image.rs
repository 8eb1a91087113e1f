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
//! the sandbox's placeholder process, which sleeps until SIGTERM.

use sha2::{Digest, Sha256};

/// The workload image.
pub const BUSYBOX: &str = "localhost/skiff/busybox:1";
/// The sandbox ("pause") image.
pub const PAUSE: &str = "localhost/skiff/pause:1";

/// Applets linked into `bin/`: what the tests, probes and hooks run.
const APPLETS: &[&str] = &[
    "sh", "ash", "sleep", "echo", "cat", "true", "false", "ls", "test", "[", "touch", "rm", "tail",
    "head", "printf", "env", "id", "ps", "kill", "mkdir", "yes", "dd", "nc", "httpd", "wget",
    "date", "hostname", "grep", "seq", "ln", "cp", "mv", "wc", "free", "timeout",
];

fn octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let text = format!("{value:0width$o}");
    field[..width].copy_from_slice(&text.as_bytes()[text.len() - width..]);
    field[width] = 0;
}

/// Appends one ustar entry (`kind`: b'0' file, b'2' symlink, b'5' directory).
fn tar_entry(out: &mut Vec<u8>, path: &str, kind: u8, mode: u64, data: &[u8], link: &str) {
    let mut h = [0u8; 512];
    h[..path.len().min(100)].copy_from_slice(&path.as_bytes()[..path.len().min(100)]);
    octal(&mut h[100..108], mode);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], data.len() as u64);
    octal(&mut h[136..148], 0);
    h[148..156].fill(b' ');
    h[156] = kind;
    h[157..157 + link.len().min(100)].copy_from_slice(&link.as_bytes()[..link.len().min(100)]);
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    let sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
    let text = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(text.as_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out.resize(out.len().next_multiple_of(512), 0);
}

fn tar_end(out: &mut Vec<u8>) {
    out.resize(out.len() + 1024, 0);
}

fn sha256(data: &[u8]) -> String {
    let d = Sha256::digest(data);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The root filesystem layer: `busybox` and its applet links.
fn layer(busybox: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    tar_entry(&mut t, "bin/", b'5', 0o755, &[], "");
    tar_entry(&mut t, "bin/busybox", b'0', 0o755, busybox, "");
    for a in APPLETS {
        tar_entry(&mut t, &format!("bin/{a}"), b'2', 0o777, &[], "busybox");
    }
    tar_entry(&mut t, "tmp/", b'5', 0o1777, &[], "");
    tar_entry(&mut t, "etc/", b'5', 0o755, &[], "");
    tar_end(&mut t);
    t
}

/// An OCI image layout archive of one image named `name`.
pub fn archive(name: &str, busybox: &[u8], entrypoint: &[&str], cmd: &[&str]) -> Vec<u8> {
    let layer = layer(busybox);
    let layer_digest = sha256(&layer);
    let config = serde_json::json!({
        "architecture": oci_arch(),
        "os": "linux",
        "config": {
            "Entrypoint": entrypoint,
            "Cmd": cmd,
            "Env": ["PATH=/bin"],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_digest}")]},
    })
    .to_string()
    .into_bytes();
    let config_digest = sha256(&config);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": format!("sha256:{config_digest}"), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": format!("sha256:{layer_digest}"), "size": layer.len()}],
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
    let mut t = Vec::new();
    tar_entry(
        &mut t,
        "oci-layout",
        b'0',
        0o644,
        br#"{"imageLayoutVersion":"1.0.0"}"#,
        "",
    );
    tar_entry(&mut t, "index.json", b'0', 0o644, &index, "");
    tar_entry(&mut t, "blobs/", b'5', 0o755, &[], "");
    tar_entry(&mut t, "blobs/sha256/", b'5', 0o755, &[], "");
    for (digest, blob) in [
        (&layer_digest, &layer),
        (&config_digest, &config),
        (&manifest_digest, &manifest),
    ] {
        tar_entry(
            &mut t,
            &format!("blobs/sha256/{digest}"),
            b'0',
            0o644,
            blob,
            "",
        );
    }
    tar_end(&mut t);
    t
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

    #[test]
    fn tar_headers_are_valid_ustar() {
        let mut t = Vec::new();
        tar_entry(&mut t, "bin/x", b'0', 0o755, b"hello", "");
        assert_eq!(t.len(), 1024);
        assert_eq!(&t[257..263], b"ustar\0");
        // The checksum is the sum of the header with the checksum field read as spaces.
        let mut h = t[..512].to_vec();
        let stored = u64::from_str_radix(std::str::from_utf8(&h[148..154]).unwrap(), 8).unwrap();
        h[148..156].fill(b' ');
        assert_eq!(stored, h.iter().map(|b| u64::from(*b)).sum::<u64>());
        assert_eq!(&t[124..135], b"00000000005");
        assert_eq!(&t[512..517], b"hello");
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
