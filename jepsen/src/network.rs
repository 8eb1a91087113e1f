//! The test network, built inside the sandbox: one bridge in the harness namespace and one
//! network namespace per member, joined by veth pairs.
//!
//! ```text
//!   harness netns (clients)          n1 netns           n2 netns
//!   skiffbr0 10.77.0.1/24 ──veth──► eth0 10.77.0.11
//!                         ──veth──────────────────────► eth0 10.77.0.12   …
//! ```
//!
//! Faults are iptables rules in the members' INPUT chains: a partition is a set of grudges
//! (member X drops packets from the addresses of members it must not hear), packet loss is a
//! random-drop rule for peer traffic. Client traffic from the bridge address is never
//! partitioned, so clients see members exactly as a real client on the far side of a
//! partition would: reachable, but cut off from their peers.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use anyhow::{Context, bail};

/// The bridge's (and so the clients') address.
pub const HARNESS_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const BRIDGE: &str = "skiffbr0";

/// Address of member `i` (0-based).
pub fn member_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, 0, 11 + i as u8)
}

/// Namespace name of member `i`.
pub fn netns(i: usize) -> String {
    format!("n{}", i + 1)
}

/// Runs a command to completion; fails with its stderr if it exits non-zero.
pub async fn run(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a command inside member `i`'s namespace.
async fn in_netns(i: usize, program: &str, args: &[&str]) -> anyhow::Result<String> {
    let ns = netns(i);
    let mut full = vec!["netns", "exec", ns.as_str(), program];
    full.extend_from_slice(args);
    run("ip", &full).await
}

/// Creates the bridge and `n` member namespaces. Must run inside the sandbox.
pub async fn setup(n: usize) -> anyhow::Result<()> {
    run("ip", &["link", "set", "lo", "up"]).await?;
    // `ip netns add` keeps its handles under /run/netns: a tmpfs there keeps them private.
    std::fs::create_dir_all("/run/netns").context("creating /run/netns")?;
    run("mount", &["-t", "tmpfs", "skiff-netns", "/run/netns"]).await?;
    run("ip", &["link", "add", BRIDGE, "type", "bridge"]).await?;
    let cidr = format!("{HARNESS_IP}/24");
    run("ip", &["addr", "add", &cidr, "dev", BRIDGE]).await?;
    run("ip", &["link", "set", BRIDGE, "up"]).await?;
    for i in 0..n {
        let ns = netns(i);
        let veth = format!("veth{}", i + 1);
        run("ip", &["netns", "add", &ns]).await?;
        run(
            "ip",
            &[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ],
        )
        .await?;
        run("ip", &["link", "set", &veth, "master", BRIDGE]).await?;
        run("ip", &["link", "set", &veth, "up"]).await?;
        let addr = format!("{}/24", member_ip(i));
        run("ip", &["-n", &ns, "addr", "add", &addr, "dev", "eth0"]).await?;
        run("ip", &["-n", &ns, "link", "set", "eth0", "up"]).await?;
        run("ip", &["-n", &ns, "link", "set", "lo", "up"]).await?;
    }
    Ok(())
}

/// Who refuses to hear whom: member → members whose packets it drops.
pub type Grudge = BTreeMap<usize, BTreeSet<usize>>;

/// Cuts every link between the two groups, in both directions.
pub fn cut(a: &[usize], b: &[usize]) -> Grudge {
    let mut g = Grudge::new();
    for &x in a {
        for &y in b {
            g.entry(x).or_default().insert(y);
            g.entry(y).or_default().insert(x);
        }
    }
    g
}

/// Applies a grudge with iptables DROP rules.
pub async fn partition(grudge: &Grudge) -> anyhow::Result<()> {
    for (&node, drops) in grudge {
        for &from in drops {
            let src = member_ip(from).to_string();
            in_netns(node, "iptables", &["-A", "INPUT", "-s", &src, "-j", "DROP"]).await?;
        }
    }
    Ok(())
}

/// Drops a random `probability` of the peer packets each member receives.
pub async fn lose(n: usize, probability: f64) -> anyhow::Result<()> {
    let p = format!("{probability:.2}");
    let harness = HARNESS_IP.to_string();
    for i in 0..n {
        in_netns(
            i,
            "iptables",
            &["-A", "INPUT", "-s", &harness, "-j", "ACCEPT"],
        )
        .await?;
        in_netns(
            i,
            "iptables",
            &[
                "-A",
                "INPUT",
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                &p,
                "-j",
                "DROP",
            ],
        )
        .await?;
    }
    Ok(())
}

/// Removes every rule: the network is whole again.
pub async fn heal(n: usize) -> anyhow::Result<()> {
    for i in 0..n {
        in_netns(i, "iptables", &["-F", "INPUT"]).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_is_symmetric() {
        let g = cut(&[0], &[1, 2]);
        assert_eq!(g[&0], BTreeSet::from([1, 2]));
        assert_eq!(g[&1], BTreeSet::from([0]));
        assert_eq!(g[&2], BTreeSet::from([0]));
        assert_eq!(member_ip(2), Ipv4Addr::new(10, 77, 0, 13));
    }
}
