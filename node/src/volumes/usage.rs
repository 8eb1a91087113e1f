//! What a volume's directory holds on disk, as the kubelet's `du` measures it: the blocks
//! of every file and directory under it, each inode once, without following symbolic links
//! or crossing into other mounts.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Bytes allocated under `dir` (0 when it is missing); entries that vanish or cannot be
/// read while it walks are skipped, as `du` skips them.
pub fn disk_usage(dir: &Path) -> u64 {
    let Ok(top) = std::fs::symlink_metadata(dir) else {
        return 0;
    };
    let device = top.dev();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut total = top.blocks() * 512;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(m) = entry.metadata() else { continue };
            if m.dev() != device {
                continue;
            }
            if m.nlink() > 1 && !m.is_dir() && !seen.insert(m.ino()) {
                continue;
            }
            total += m.blocks() * 512;
            if m.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_files_under_nested_directories_and_hard_links_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let empty = disk_usage(dir.path());
        let nested = dir.path().join("a/b");
        std::fs::create_dir_all(&nested).expect("mkdir");
        std::fs::write(nested.join("f"), vec![7u8; 256 * 1024]).expect("write");
        let with_file = disk_usage(dir.path());
        assert!(with_file >= empty + 256 * 1024, "{empty} then {with_file}");
        std::fs::hard_link(nested.join("f"), dir.path().join("g")).expect("link");
        std::os::unix::fs::symlink(nested.join("f"), dir.path().join("s")).expect("symlink");
        let linked = disk_usage(dir.path());
        assert!(
            linked < with_file + 64 * 1024,
            "a hard link or a symlink counted the file again: {with_file} then {linked}"
        );
        assert_eq!(disk_usage(&dir.path().join("missing")), 0);
    }
}
