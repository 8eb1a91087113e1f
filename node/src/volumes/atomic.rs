//! Writing a volume's files so a reader never sees half of an update, as the kubelet's
//! atomic writer does for configMap, secret, downwardAPI and projected volumes:
//!
//! ```text
//! <volume>/..2026_12_06_21_40_12.123456789/   the files of one version
//! <volume>/..data -> ..2026_12_06_21_40_12.123456789
//! <volume>/<name> -> ..data/<name>            one link per top-level name
//! ```
//!
//! An update writes the new version beside the old, swings `..data` to it with one
//! `rename` (atomic), adds and removes the top-level links, then deletes the old version. A
//! payload equal to what is there writes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

/// A file's content and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub content: Vec<u8>,
    pub mode: u32,
}

/// Relative paths (`a`, `dir/b`) to files.
pub type Payload = BTreeMap<String, File>;

const DATA: &str = "..data";
const DATA_TMP: &str = "..data_tmp";

/// Makes `dir` hold exactly `payload`; `true` when anything was written.
pub fn write(dir: &Path, payload: &Payload) -> io::Result<bool> {
    std::fs::create_dir_all(dir)?;
    let current = std::fs::read_link(dir.join(DATA)).ok();
    if let Some(version) = &current
        && read_version(&dir.join(version)).ok().as_ref() == Some(payload)
    {
        return Ok(false);
    }
    let version = new_version_name();
    let version_dir = dir.join(&version);
    std::fs::create_dir(&version_dir)?;
    for (path, file) in payload {
        let target = version_dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&target, &file.content)?;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(file.mode))?;
    }
    let tmp = dir.join(DATA_TMP);
    let _ = std::fs::remove_file(&tmp);
    symlink(&version, &tmp)?;
    std::fs::rename(&tmp, dir.join(DATA))?;
    let top: BTreeSet<&str> = payload.keys().filter_map(|p| p.split('/').next()).collect();
    for name in &top {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(Path::new(DATA).join(name), &link)?;
        }
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("..") || top.contains(name) {
            continue;
        }
        // Only the links this writer made: a name that left the payload.
        if std::fs::read_link(entry.path()).is_ok_and(|t| t.starts_with(DATA)) {
            std::fs::remove_file(entry.path())?;
        }
    }
    if let Some(old) = current {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(true)
}

/// The files of one version, by relative path.
fn read_version(dir: &Path) -> io::Result<Payload> {
    let mut out = Payload::new();
    let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for entry in std::fs::read_dir(dir.join(&rel))? {
            let entry = entry?;
            let path = rel.join(entry.file_name());
            let meta = entry.metadata()?;
            if meta.is_dir() {
                stack.push(path);
            } else {
                let key = path.to_string_lossy().into_owned();
                out.insert(
                    key,
                    File {
                        content: std::fs::read(entry.path())?,
                        mode: meta.permissions().mode() & 0o7777,
                    },
                );
            }
        }
    }
    Ok(out)
}

/// `..<UTC time>.<nanoseconds>`: names sort by when they were written.
fn new_version_name() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let t = skiff_proto::api::Time::now();
    let stamp = t.to_string().replace(['-', ':', 'T'], "_").replace('Z', "");
    format!("..{stamp}.{:09}", now.subsec_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(entries: &[(&str, &str, u32)]) -> Payload {
        entries
            .iter()
            .map(|(p, c, m)| {
                (
                    p.to_string(),
                    File {
                        content: c.as_bytes().to_vec(),
                        mode: *m,
                    },
                )
            })
            .collect()
    }

    /// Readers see every file through the links; an update swaps the whole set, removes
    /// names that left, and the same payload again writes nothing.
    #[test]
    fn updates_swap_the_whole_version() {
        let dir = tempfile::tempdir().unwrap();
        let v = dir.path().join("vol");
        let first = payload(&[("a", "1", 0o644), ("conf/b", "2", 0o600)]);
        assert!(write(&v, &first).unwrap());
        assert_eq!(std::fs::read_to_string(v.join("a")).unwrap(), "1");
        assert_eq!(std::fs::read_to_string(v.join("conf/b")).unwrap(), "2");
        let mode = std::fs::metadata(v.join("conf/b"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(
            !write(&v, &first).unwrap(),
            "an equal payload writes nothing"
        );

        let second = payload(&[("a", "changed", 0o644), ("c", "3", 0o644)]);
        assert!(write(&v, &second).unwrap());
        assert_eq!(std::fs::read_to_string(v.join("a")).unwrap(), "changed");
        assert_eq!(std::fs::read_to_string(v.join("c")).unwrap(), "3");
        assert!(
            std::fs::symlink_metadata(v.join("conf")).is_err(),
            "a name that left goes"
        );
        let versions = std::fs::read_dir(&v)
            .unwrap()
            .filter(|e| {
                let n = e.as_ref().unwrap().file_name();
                let n = n.to_string_lossy();
                n.starts_with("..") && n != DATA
            })
            .count();
        assert_eq!(versions, 1, "the old version is removed");
    }
}
