//! `skiff store restore`: the data directory of one member of a new cluster, made from a
//! backup (etcdutl's `snapshot restore`).
//!
//! A restore writes what a member that had applied the backup would hold, with a Raft state
//! that every member restored from the same file with the same flags agrees on: the log purged
//! up to a first entry (term 1, index 1) that the keyspace includes, and the membership of
//! `--initial-cluster`, all voters. The members elect a leader when they start, as a new
//! cluster does; the cluster ID is derived from the members and from the backup, so it is not
//! the source cluster's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::backend;
use crate::backup::{BackupError, Summary, read};
use crate::error::StoreError;
use crate::mvcc::Mvcc;
use crate::raft::{LogId, Member, StoredMembership, cluster_id, member_id};

/// etcd's `snapshot restore` flags.
#[derive(Debug, Clone)]
pub struct RestoreConfig {
    pub name: String,
    pub data_dir: PathBuf,
    /// (name, peer URL) of every member of the new cluster.
    pub initial_cluster: Vec<(String, String)>,
    pub initial_cluster_token: String,
    pub initial_advertise_peer_urls: Vec<String>,
}

/// The Raft log id the restored keyspace counts as applied up to.
fn restored_log_id() -> LogId {
    LogId::new(openraft::CommittedLeaderId::new(1, 0), 1)
}

/// Creates `config.data_dir` from the backup at `file` (see the module docs); the backup's
/// summary and the new cluster's ID. Nothing is left behind on failure.
pub fn restore(file: &Path, config: &RestoreConfig) -> Result<(Summary, u64), BackupError> {
    let dir = &config.data_dir;
    if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
        return Err(BackupError::DataDir {
            dir: dir.clone(),
            why: "exists and is not empty: restore makes a new member's data directory".into(),
        });
    }
    let token = &config.initial_cluster_token;
    let me = member_id(&config.initial_advertise_peer_urls, token);
    let mut nodes = BTreeMap::new();
    for (name, url) in &config.initial_cluster {
        nodes.insert(
            member_id(std::slice::from_ref(url), token),
            Member {
                name: name.clone(),
                peer_urls: vec![url.clone()],
                client_urls: Vec::new(),
            },
        );
    }
    if !nodes.contains_key(&me) {
        return Err(BackupError::Flags(format!(
            "--initial-cluster does not list this member's --initial-advertise-peer-urls ({})",
            config.initial_advertise_peer_urls.join(",")
        )));
    }
    let created = !dir.exists();
    let result = (|| {
        std::fs::create_dir_all(dir).map_err(|error| BackupError::Io {
            path: dir.clone(),
            error,
        })?;
        let db = backend::open(&dir.join("db"))?;
        let summary = read(file, |versions| {
            Mvcc::restore_versions(&db, versions).map_err(BackupError::from)
        })?;
        let log_id = restored_log_id();
        let voters: BTreeSet<u64> = nodes.keys().copied().collect();
        let membership = StoredMembership::new(
            Some(log_id),
            openraft::Membership::new(vec![voters], nodes.clone()),
        );
        let ids: Vec<u64> = nodes.keys().copied().collect();
        // The new members, then where the backup came from: not the source cluster's ID.
        let cluster = cluster_id(&ids)
            ^ cluster_id(&[
                summary.source.cluster_id,
                summary.head.revision as u64,
                summary.taken_at,
            ]);
        crate::raft::state_machine::write_restored_state(&db, log_id, &membership, &summary.head)?;
        crate::raft::log_store::write_purged(&db, log_id)?;
        // The log, empty: purged up to the backup's id.
        std::fs::create_dir_all(dir.join(crate::raft::log_store::LOG_DIR))
            .map_err(|e| StoreError::internal(e.to_string()))?;
        crate::member::write_cluster_id(&db, cluster)?;
        db.flush()
            .map_err(|e| StoreError::internal(e.to_string()))?;
        Ok((summary, cluster))
    })();
    if result.is_err() {
        if created {
            let _ = std::fs::remove_dir_all(dir);
        } else if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::tests::backup_of_empty;

    #[test]
    fn restore_refuses_a_data_dir_in_use_and_flags_that_leave_the_member_out() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("b");
        std::fs::write(&file, backup_of_empty(&dir.path().join("src"))).expect("write");
        let config = RestoreConfig {
            name: "a".into(),
            data_dir: dir.path().join("src"),
            initial_cluster: vec![("a".into(), "http://127.0.0.1:2380".into())],
            initial_cluster_token: "t".into(),
            initial_advertise_peer_urls: vec!["http://127.0.0.1:2380".into()],
        };
        let e = restore(&file, &config).expect_err("in use");
        assert!(e.to_string().contains("not empty"), "{e}");
        let elsewhere = RestoreConfig {
            data_dir: dir.path().join("new"),
            initial_advertise_peer_urls: vec!["http://127.0.0.1:9999".into()],
            ..config.clone()
        };
        let e = restore(&file, &elsewhere).expect_err("not listed");
        assert!(e.to_string().contains("does not list"), "{e}");
        let ok = RestoreConfig {
            data_dir: dir.path().join("new"),
            ..config
        };
        restore(&file, &ok).expect("restore");
        assert!(ok.data_dir.join("db").exists());
    }
}
