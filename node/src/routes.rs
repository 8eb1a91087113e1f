//! Routes between the nodes' pod networks, as flannel's `host-gw` backend makes them: every
//! other Node's pod CIDR is routed through that node's InternalIP, in this node's network
//! namespace, so a pod reaches a pod on another node by its address and the packet arrives
//! with its sender's address. The nodes must share a link (one L2 segment), as `host-gw`
//! needs; a Node whose address is not reachable on one gets no route, and the agent says why.
//!
//! ```text
//!  informer (every Node) ─► desired: { podCIDR via InternalIP } for the others (pure: `desired`)
//!  ip -4 route show proto 165 ─► what is installed ─► ip -force -batch -: replace / del
//!  nat POSTROUTING ─► SKIFF-POD-MASQ: from the pod CIDR to the cluster CIDR ─► RETURN
//!                                     from the pod CIDR elsewhere          ─► MASQUERADE
//! ```
//!
//! The routes carry their own protocol number ([`PROTO`]), so the agent finds exactly its
//! own after a restart and never touches a route it did not make. With the cluster's pod
//! network known (`--cluster-cidr`), traffic within it keeps its pods' addresses and only
//! traffic leaving it is masqueraded; CNI's bridge then masquerades nothing itself.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use skiff_proto::api::{Kind, Node, Object};
use skiff_proto::client::{ClusterClient, Event, Informer, ListParams};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The routing protocol number the agent's routes carry (`ip route … proto 165`).
pub const PROTO: &str = "165";
/// The nat chain that masquerades pod traffic leaving the cluster's pod network.
const MASQ_CHAIN: &str = "SKIFF-POD-MASQ";
/// How often the routes are checked against the Nodes even when nothing changed (a route
/// someone deleted comes back).
const RESYNC: Duration = Duration::from_secs(30);

/// What the routes are made from.
#[derive(Debug, Clone)]
pub struct RoutesConfig {
    /// This node's name (its own pod CIDR is on its bridge, not routed).
    pub node: String,
    /// This node's address: Nodes at the same address are this machine's.
    pub host_ip: String,
    /// This node's pod CIDR.
    pub pod_cidr: String,
    /// The cluster's pod network, when known: pod traffic within it is not masqueraded.
    pub cluster_cidr: Option<String>,
    /// The node's network namespace, when it is not this process's.
    pub netns: Option<PathBuf>,
}

/// A usable IPv4 address: not loopback, unspecified or multicast.
fn routable(ip: &str) -> Option<Ipv4Addr> {
    let ip: Ipv4Addr = ip.parse().ok()?;
    (!ip.is_loopback() && !ip.is_unspecified() && !ip.is_multicast()).then_some(ip)
}

/// The routes this node needs: pod CIDR → gateway, for every other Node that has a pod CIDR
/// and a routable InternalIP other than this node's own.
pub fn desired<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    config: &RoutesConfig,
) -> BTreeMap<String, Ipv4Addr> {
    let own = routable(&config.host_ip);
    let mut out = BTreeMap::new();
    for n in nodes {
        if n.metadata.name == config.node
            || n.spec.pod_cidr.is_empty()
            || n.spec.pod_cidr == config.pod_cidr
        {
            continue;
        }
        let gateway = n.status.as_ref().and_then(|s| {
            s.addresses
                .iter()
                .filter(|a| a.type_ == "InternalIP")
                .find_map(|a| routable(&a.address))
        });
        if let Some(gw) = gateway.filter(|gw| Some(*gw) != own) {
            out.insert(n.spec.pod_cidr.clone(), gw);
        }
    }
    out
}

/// The routes `ip -4 route show proto 165` lists (destination → gateway).
pub fn parse_installed(text: &str) -> BTreeMap<String, Ipv4Addr> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let dst = words.next()?;
            let mut via = None;
            while let Some(w) = words.next() {
                if w == "via" {
                    via = words.next().and_then(|g| g.parse().ok());
                }
            }
            Some((dst.to_string(), via?))
        })
        .collect()
}

/// `ip -batch` input that turns `installed` into `desired`.
pub fn batch(
    installed: &BTreeMap<String, Ipv4Addr>,
    desired: &BTreeMap<String, Ipv4Addr>,
) -> String {
    let mut out = String::new();
    for (dst, gw) in desired {
        if installed.get(dst) != Some(gw) {
            out.push_str(&format!("route replace {dst} via {gw} proto {PROTO}\n"));
        }
    }
    for dst in installed.keys().filter(|d| !desired.contains_key(*d)) {
        out.push_str(&format!("route del {dst} proto {PROTO}\n"));
    }
    out
}

/// The masquerade chain for pod traffic leaving the cluster's pod network.
fn masquerade(pod_cidr: &str, cluster_cidr: &str) -> String {
    format!(
        "*nat\n:{MASQ_CHAIN} - [0:0]\n\
         -A {MASQ_CHAIN} -s {pod_cidr} -d {cluster_cidr} -j RETURN\n\
         -A {MASQ_CHAIN} -s {pod_cidr} ! -d 224.0.0.0/4 -m comment --comment \"pods to outside the cluster\" -j MASQUERADE\n\
         COMMIT\n"
    )
}

async fn ip(netns: Option<&Path>, args: &[&str], input: Option<&str>) -> std::io::Result<String> {
    let out = crate::proxy::run_in(netns, "ip", args, input).await?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Makes the installed routes the desired ones; a route the kernel refuses (a gateway on no
/// link of this node) is reported, the others are made.
async fn sync(netns: Option<&Path>, desired: &BTreeMap<String, Ipv4Addr>) -> std::io::Result<()> {
    let installed =
        parse_installed(&ip(netns, &["-4", "route", "show", "proto", PROTO], None).await?);
    let changes = batch(&installed, desired);
    if changes.is_empty() {
        return Ok(());
    }
    // `-force` goes on past a refused line: one unreachable node must not cost the others.
    if let Err(e) = ip(netns, &["-force", "-batch", "-"], Some(&changes)).await {
        tracing::warn!(error = %e, "some pod network routes were refused (is every node on one link?)");
    }
    tracing::info!(routes = desired.len(), changes = %changes.trim(), "pod network routes updated");
    Ok(())
}

/// Runs until `cancel`: follows every Node and keeps this node's routes to the others' pod
/// networks (and, with a cluster CIDR, the masquerade rule for pod traffic leaving it).
/// Returns an error when the routes cannot be read or written at all.
pub async fn run(
    client: ClusterClient,
    config: RoutesConfig,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    let netns = config.netns.clone();
    if let Some(cluster) = &config.cluster_cidr {
        crate::proxy::ensure_jumps(
            netns.as_deref(),
            &masquerade(&config.pod_cidr, cluster),
            &[("nat", "POSTROUTING", MASQ_CHAIN)],
        )
        .await?;
    }
    let nodes: Arc<Mutex<BTreeMap<String, Node>>> = Arc::default();
    let changed = Arc::new(Notify::new());
    // A set: dropped (this returns, an error included), the informer is stopped with it.
    let mut informer = tokio::task::JoinSet::new();
    {
        let (nodes, changed) = (nodes.clone(), changed.clone());
        let client = client.clone();
        informer.spawn(async move {
            let mut informer = Informer::new(client, Kind::Node, ListParams::default());
            informer
                .run(|e: &Event, _| {
                    {
                        let mut nodes = nodes
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        match e {
                            Event::Added(Object::Node(n)) | Event::Modified(Object::Node(n)) => {
                                nodes.insert(n.metadata.name.clone(), n.clone());
                            }
                            Event::Deleted(o) => {
                                nodes.remove(&o.metadata().name);
                            }
                            _ => return,
                        }
                    }
                    changed.notify_one();
                })
                .await
        });
    }
    let mut last: Option<BTreeMap<String, Ipv4Addr>> = None;
    // Its own timer: Node heartbeats wake the loop far more often than this.
    let mut resync = tokio::time::interval(RESYNC);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            () = changed.notified() => {}
            _ = resync.tick() => last = None,
            Some(done) = informer.join_next() => {
                return Err(std::io::Error::other(format!("the Node informer stopped: {done:?}")));
            }
        }
        // Coalesce a burst of Node updates (heartbeats of many nodes) into one sync.
        tokio::time::sleep(crate::proxy::MIN_SYNC).await;
        let want = {
            let nodes = nodes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            desired(nodes.values(), &config)
        };
        if last.as_ref() == Some(&want) {
            continue;
        }
        sync(netns.as_deref(), &want).await?;
        last = Some(want);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cidr: &str, ip: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"podCIDR": cidr},
            "status": {"addresses": [{"type": "Hostname", "address": name},
                                     {"type": "InternalIP", "address": ip}]},
        }))
        .expect("node")
    }

    fn config() -> RoutesConfig {
        RoutesConfig {
            node: "n1".into(),
            host_ip: "10.78.0.11".into(),
            pod_cidr: "10.244.1.0/24".into(),
            cluster_cidr: Some("10.244.0.0/16".into()),
            netns: None,
        }
    }

    #[test]
    fn every_other_node_with_an_address_and_a_block_gets_a_route() {
        let nodes = [
            node("n1", "10.244.1.0/24", "10.78.0.11"),
            node("n2", "10.244.2.0/24", "10.78.0.12"),
            node("n3", "", "10.78.0.13"),
            node("n4", "10.244.4.0/24", "127.0.0.1"),
            node("n5", "10.244.5.0/24", "10.78.0.11"),
            node("n6", "10.244.6.0/24", "not an address"),
        ];
        let want = desired(&nodes, &config());
        assert_eq!(
            want,
            BTreeMap::from([("10.244.2.0/24".to_string(), Ipv4Addr::new(10, 78, 0, 12))])
        );
    }

    #[test]
    fn the_batch_adds_what_is_missing_and_removes_what_is_gone() {
        let installed = parse_installed(
            "10.244.2.0/24 via 10.78.0.12 dev eth0 proto 165\n\
             10.244.3.0/24 via 10.78.0.13 dev eth0 proto 165\n\
             10.244.7.0/24 via 10.78.0.17 dev eth0 proto 165\n",
        );
        assert_eq!(installed.len(), 3);
        let desired = BTreeMap::from([
            ("10.244.2.0/24".to_string(), Ipv4Addr::new(10, 78, 0, 12)),
            ("10.244.3.0/24".to_string(), Ipv4Addr::new(10, 78, 0, 23)),
            ("10.244.4.0/24".to_string(), Ipv4Addr::new(10, 78, 0, 14)),
        ]);
        assert_eq!(
            batch(&installed, &desired),
            "route replace 10.244.3.0/24 via 10.78.0.23 proto 165\n\
             route replace 10.244.4.0/24 via 10.78.0.14 proto 165\n\
             route del 10.244.7.0/24 proto 165\n"
        );
        assert_eq!(batch(&desired, &desired), "");
    }

    #[test]
    fn pod_traffic_within_the_cluster_keeps_its_address() {
        let text = masquerade("10.244.1.0/24", "10.244.0.0/16");
        assert!(text.contains("-A SKIFF-POD-MASQ -s 10.244.1.0/24 -d 10.244.0.0/16 -j RETURN\n"));
        assert!(text.ends_with("-j MASQUERADE\nCOMMIT\n"), "{text}");
    }
}
