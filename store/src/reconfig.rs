//! The checks a membership change passes before the leader proposes it, as etcd makes them:
//! peer URLs that parse, and etcd's strict reconfiguration check (`--strict-reconfig-check`,
//! on by default), which refuses a change that would leave the cluster short of a quorum of
//! members that can actually vote.
//!
//! Two facts about each voter feed the check; the leader knows both:
//!
//! * **started** — the member process has run and recorded its client URLs in the membership
//!   (members are added knowing only peer URLs; each records its name and client URLs when it
//!   starts, see `StoreMember::client_urls_tick`). This is etcd's `Member.IsStarted` (a
//!   published name). A member added but never started counts towards the quorum and can
//!   never vote, so adding voters faster than they start would stop the cluster.
//! * **active** — the leader has had an answer to a Raft message from it (every heartbeat is
//!   one) within the last election timeout, or it is the leader itself. etcd asks its peer
//!   transport whether the connection has been up for the last 5 s; Skiff asks openraft's
//!   replication streams when the member last answered (see `PeerActivity`), so a member
//!   counts as active as soon as it answers again after a partition.
//!
//! Learners vote in nothing, so adding or removing one is never refused for health.
//!
//! The rules are pure functions over those facts; `StoreMember` gathers them on the leader.

use crate::error::StoreError;

/// What the leader knows of one voting member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Voter {
    pub id: u64,
    pub started: bool,
    pub active: bool,
}

fn quorum(voters: usize) -> usize {
    voters / 2 + 1
}

/// A new voter may join: once it is in, the started voters (not counting it) still make a
/// quorum, and so do the active ones.
pub fn may_add_voter(voters: &[Voter]) -> Result<(), StoreError> {
    let after = voters.len() + 1;
    let started = voters.iter().filter(|v| v.started).count();
    // etcd's exception: a second member joins a cluster of one (restoring from a backup
    // starts with one member and grows it).
    let growing_from_one = started == 1 && after == 2;
    if !growing_from_one && started < quorum(after) {
        return Err(StoreError::NotEnoughStartedMembers);
    }
    let active = voters.iter().filter(|v| v.active).count();
    if voters.len() > 1 && active < quorum(after) {
        return Err(StoreError::Unhealthy);
    }
    Ok(())
}

/// A voter may leave: the started voters that stay make a quorum of what stays, and so do
/// the active ones, unless the one leaving is not active anyway (removing a member that is
/// down is how a cluster heals). `leader` is the member deciding.
pub fn may_remove_voter(voters: &[Voter], id: u64, leader: u64) -> Result<(), StoreError> {
    let staying: Vec<&Voter> = voters.iter().filter(|v| v.id != id).collect();
    let started = staying.iter().filter(|v| v.started).count();
    if started < quorum(staying.len()) {
        return Err(StoreError::NotEnoughStartedMembers);
    }
    let leaving_active = voters.iter().any(|v| v.id == id && v.active);
    if id != leader && !leaving_active {
        return Ok(());
    }
    let active = staying.iter().filter(|v| v.active).count();
    if active < quorum(staying.len()) {
        return Err(StoreError::Unhealthy);
    }
    Ok(())
}

/// A learner may become a voter: counting it as started, the started voters make a quorum
/// of the grown cluster.
pub fn may_promote(voters: &[Voter]) -> Result<(), StoreError> {
    let after = voters.len() + 1;
    let started = voters.iter().filter(|v| v.started).count() + 1;
    if started < quorum(after) {
        return Err(StoreError::NotEnoughStartedMembers);
    }
    Ok(())
}

/// Peer URLs as etcd accepts them in MemberAdd: at least one, each `http://host:port` or
/// `https://host:port` with no path, query or user; surrounding spaces are ignored, as etcd's
/// parser trims them. Unlike etcd, `unix://` is refused: Skiff's peer transport is TCP only,
/// and a voter no member can reach would only raise the quorum.
pub fn check_peer_urls(urls: &[String]) -> Result<(), StoreError> {
    if urls.is_empty() || !urls.iter().all(|u| is_peer_url(u.trim())) {
        return Err(StoreError::MemberBadUrls);
    }
    Ok(())
}

fn is_peer_url(url: &str) -> bool {
    let Some(authority) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return false;
    };
    if authority.contains(['/', '?', '#', '@']) {
        return false;
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        // [IPv6]:port
        let Some((addr, port)) = rest.split_once("]:") else {
            return false;
        };
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return false;
        }
        (addr, port)
    } else {
        let Some((host, port)) = authority.rsplit_once(':') else {
            return false;
        };
        let name_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
        if !host.chars().all(name_char) {
            return false;
        }
        (host, port)
    };
    !host.is_empty()
        && !port.is_empty()
        && port.chars().all(|c| c.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voters(spec: &[(bool, bool)]) -> Vec<Voter> {
        spec.iter()
            .enumerate()
            .map(|(i, &(started, active))| Voter {
                id: i as u64 + 1,
                started,
                active,
            })
            .collect()
    }

    /// Only `http://host:port` peer URLs pass, and an empty list does not.
    #[test]
    fn peer_urls_must_be_http_host_port() {
        let ok = |u: &str| check_peer_urls(&[u.to_string()]).is_ok();
        assert!(ok("http://127.0.0.1:2380"));
        assert!(ok("http://node-1.example_x:2380"));
        assert!(ok("http://[::1]:2380"));
        assert!(ok(" http://10.0.0.1:2380 "));
        assert!(ok("https://127.0.0.1:2380"));
        for bad in [
            "not a url",
            "",
            "127.0.0.1:2380",
            "http://127.0.0.1",
            "http://127.0.0.1:",
            "http://:2380",
            "http://127.0.0.1:2380/",
            "http://127.0.0.1:2380/path",
            "http://127.0.0.1:99999",
            "http://127.0.0.1:0",
            "http://user@127.0.0.1:2380",
            "http://[::1:2380",
            "unix://sock",
            "http://a b:2380",
        ] {
            assert!(!ok(bad), "{bad:?} passed");
        }
        assert_eq!(check_peer_urls(&[]), Err(StoreError::MemberBadUrls));
        assert_eq!(
            check_peer_urls(&["http://127.0.0.1:1".into(), "nope".into()]),
            Err(StoreError::MemberBadUrls)
        );
    }

    /// A voter is added only while the started and the active voters would still make a
    /// quorum of the grown cluster.
    #[test]
    fn adding_a_voter_keeps_a_quorum() {
        assert_eq!(may_add_voter(&voters(&[(true, true); 3])), Ok(()));
        // 3 → 4 needs 3 started: two are not enough.
        assert_eq!(
            may_add_voter(&voters(&[(true, true), (true, true), (false, false)])),
            Err(StoreError::NotEnoughStartedMembers)
        );
        // ... nor two active.
        assert_eq!(
            may_add_voter(&voters(&[(true, true), (true, true), (true, false)])),
            Err(StoreError::Unhealthy)
        );
        // A cluster of one may always grow to two.
        assert_eq!(may_add_voter(&voters(&[(true, true)])), Ok(()));
        // Two members, one never started: 2 → 3 needs 2 started.
        assert_eq!(
            may_add_voter(&voters(&[(true, true), (false, false)])),
            Err(StoreError::NotEnoughStartedMembers)
        );
    }

    /// A voter is removed only while what stays has a started and an active quorum, except
    /// that removing a member that is down is always allowed.
    #[test]
    fn removing_a_voter_keeps_a_quorum() {
        let healthy = voters(&[(true, true); 3]);
        assert_eq!(may_remove_voter(&healthy, 2, 1), Ok(()));
        // Member 3 is down: removing the healthy member 2 would leave 1 active of 2.
        let one_down = voters(&[(true, true), (true, true), (true, false)]);
        assert_eq!(
            may_remove_voter(&one_down, 2, 1),
            Err(StoreError::Unhealthy)
        );
        // Removing the member that is down is fine.
        assert_eq!(may_remove_voter(&one_down, 3, 1), Ok(()));
        // So is removing the leader's peer when the leader alone stays... of two.
        assert_eq!(
            may_remove_voter(&voters(&[(true, true), (true, true)]), 2, 1),
            Ok(())
        );
        // What stays must have started.
        let never_started = voters(&[(true, true), (true, true), (false, false)]);
        assert_eq!(
            may_remove_voter(&never_started, 2, 1),
            Err(StoreError::NotEnoughStartedMembers)
        );
        // Removing the leader itself counts it as active.
        assert_eq!(
            may_remove_voter(&one_down, 1, 1),
            Err(StoreError::Unhealthy)
        );
    }

    /// A learner is promoted only while the started voters and it make a quorum.
    #[test]
    fn promoting_counts_the_learner_as_started() {
        assert_eq!(may_promote(&voters(&[(true, true); 3])), Ok(()));
        assert_eq!(
            may_promote(&voters(&[(true, true), (false, false), (false, false)])),
            Err(StoreError::NotEnoughStartedMembers)
        );
    }
}
