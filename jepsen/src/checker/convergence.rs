//! Convergence: once the run is over and the cluster healed, every live member's keyspace
//! hashes alike at one revision (`HashKV`). Members that applied the same log hold the same
//! keys, values, revisions and leases; one that differs lost or invented data, whatever the
//! histories say. Unlike the other checkers this one reads the cluster, not the history, so it
//! runs before the members stop.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{Validity, Verdict};
use crate::cluster::connect;

/// How long members get to apply the revision compared at.
const CATCH_UP: Duration = Duration::from_secs(30);

/// Compares the members at `endpoints` (name, client endpoint): the revision is the one a
/// linearizable read sees now, and each member is asked once it has applied it.
pub async fn check(endpoints: &[(String, String)]) -> Verdict {
    let all: Vec<String> = endpoints.iter().map(|(_, e)| e.clone()).collect();
    let revision = match async {
        let mut c = connect(&all, Duration::from_secs(10)).await?;
        let r = c.get("/jepsen/convergence", None).await?;
        anyhow::Ok(r.header().map_or(0, |h| h.revision()))
    }
    .await
    {
        Ok(r) => r,
        Err(e) => {
            return Verdict::new(
                "convergence",
                Validity::Unknown,
                format!("no revision to compare at: {e:#}"),
                json!({}),
            );
        }
    };
    let mut hashes = Vec::new();
    let mut missing = Vec::new();
    for (name, endpoint) in endpoints {
        let deadline = Instant::now() + CATCH_UP;
        let hash = loop {
            let answer = async {
                let mut c = connect(std::slice::from_ref(endpoint), Duration::from_secs(5)).await?;
                anyhow::Ok(c.hash_kv(revision).await?)
            }
            .await;
            match answer {
                Ok(h) => break Some((h.hash(), h.compact_version())),
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => {
                    missing.push(json!({ "member": name, "error": format!("{e:#}") }));
                    break None;
                }
            }
        };
        if let Some((hash, compacted)) = hash {
            hashes.push(json!({ "member": name, "hash": hash, "compact_revision": compacted }));
        }
    }
    let distinct: std::collections::BTreeSet<u64> =
        hashes.iter().filter_map(|h| h["hash"].as_u64()).collect();
    let details = json!({ "revision": revision, "members": hashes, "unanswered": missing });
    if distinct.len() > 1 {
        return Verdict::new(
            "convergence",
            Validity::False,
            format!("members hash the keyspace differently at revision {revision}"),
            details,
        );
    }
    if !missing.is_empty() {
        return Verdict::new(
            "convergence",
            Validity::Unknown,
            format!(
                "{} member(s) gave no hash at revision {revision}",
                missing.len()
            ),
            details,
        );
    }
    Verdict::new(
        "convergence",
        Validity::True,
        format!("{} members hash alike at revision {revision}", hashes.len()),
        details,
    )
}
