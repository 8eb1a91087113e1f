//! What must still hold after hostile traffic: every member alive and answering Status, the
//! seeded keys intact, the membership unchanged, writes accepted, and on every member a watch
//! from a past revision replays every write since.

use std::time::{Duration, Instant};

use prost::Message;
use skiff_proto::etcd::PbWatchResponse;

use crate::shapes::{SEED_PREFIX, SEEDS, SORT_KEYS};
use crate::target::Target;
use crate::wire::{Next, Pb, Raw};

/// The membership before the traffic, to compare with after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Members(pub Vec<u64>);

pub async fn members(c: &mut etcd_client::Client) -> Members {
    let list = c.member_list().await.expect("member list");
    let mut ids: Vec<u64> = list.members().iter().map(|m| m.id()).collect();
    ids.sort_unstable();
    Members(ids)
}

/// Checks everything; returns what does not hold.
pub async fn check(target: &mut Target, before: &Members, tag: &str) -> Vec<String> {
    let mut broken = Vec::new();
    if !target.all_running() {
        broken.push("a member process exited".to_string());
        return broken;
    }
    let n = target.endpoints().len();
    for i in 0..n {
        let mut c = target.client(i).await;
        if let Err(e) = tokio::time::timeout(Duration::from_secs(10), c.status())
            .await
            .map_err(|_| "timed out".to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
        {
            broken.push(format!("member {i}: Status failed: {e}"));
        }
    }
    let mut c = target.client(0).await;
    // The seeded keys and the sort keys, in one read.
    let mut want: Vec<(String, String)> = (0..SEEDS)
        .map(|i| (format!("{SEED_PREFIX}{i}"), format!("v{i}")))
        .chain(
            SORT_KEYS
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        )
        .collect();
    want.sort();
    match c
        .get("/a-", Some(etcd_client::GetOptions::new().with_prefix()))
        .await
    {
        Ok(r) => {
            let got: Vec<(String, String)> = r
                .kvs()
                .iter()
                .map(|kv| {
                    (
                        String::from_utf8_lossy(kv.key()).into_owned(),
                        String::from_utf8_lossy(kv.value()).into_owned(),
                    )
                })
                .collect();
            if got != want {
                broken.push(format!("seeded keys changed: {got:?}"));
            }
        }
        Err(e) => broken.push(format!("reading the seeded keys failed: {e}")),
    }
    let after = members(&mut c).await;
    if &after != before {
        broken.push(format!(
            "membership changed: {} members before, {} after ({:x?} → {:x?})",
            before.0.len(),
            after.0.len(),
            before.0,
            after.0
        ));
    }
    // Writes go through, then every member replays them from the first one's revision.
    const WRITES: usize = 20;
    let prefix = format!("/after/{tag}/");
    let mut first = 0;
    for i in 0..WRITES {
        match tokio::time::timeout(
            Duration::from_secs(10),
            c.put(format!("{prefix}{i:02}"), "x", None),
        )
        .await
        {
            Ok(Ok(r)) => {
                if i == 0 {
                    first = r.header().map_or(0, |h| h.revision());
                }
            }
            other => {
                broken.push(format!("a put after the traffic failed: {other:?}"));
                return broken;
            }
        }
    }
    for i in 0..n {
        let got = replay(&target.endpoint(i), &prefix, first, WRITES).await;
        if got != WRITES {
            broken.push(format!(
                "member {i}: a watch from revision {first} replayed {got} of {WRITES} writes"
            ));
        }
    }
    broken
}

/// Events a watch on `prefix` from `from` delivers within a deadline, up to `want`.
pub async fn replay(endpoint: &str, prefix: &str, from: i64, want: usize) -> usize {
    let Ok(mut raw) = Raw::connect(endpoint).await else {
        return 0;
    };
    let mut s = raw.bidi(&crate::methods::WATCH.path());
    let mut end = prefix.as_bytes().to_vec();
    *end.last_mut().expect("a prefix") += 1;
    let create = Pb::new().msg(
        1,
        Pb::new()
            .bytes(1, prefix.as_bytes())
            .bytes(2, &end)
            .int(3, from),
    );
    s.send(create.into_bytes()).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = 0;
    while got < want && Instant::now() < deadline {
        match s.next(Duration::from_millis(500)).await {
            Next::Message(b) => match PbWatchResponse::decode(b) {
                Ok(r) if r.canceled => return got,
                Ok(r) => got += r.events.len(),
                Err(_) => return got,
            },
            Next::Ended(_) => return got,
            Next::Quiet => {}
        }
    }
    got
}
