//! The link the real nodes of one machine share, for `skiff up --runtime cri --nodes N` and
//! the multi-node CRI tests: a bridge in a network namespace of its own (held by a process
//! that does nothing else), and each node's namespace (its containerd's) joined to it by a
//! veth pair, with an address on the link. Nothing of it is in the host's network: it all
//! goes when its processes do.
//!
//! ```text
//!  switch namespace: bridge skiffnodes0 10.78.0.1/24
//!     ├─ veth skn0 ═══ eth0 10.78.0.11/24   node 0's namespace (containerd, its pods' bridge)
//!     └─ veth skn1 ═══ eth0 10.78.0.12/24   node 1's namespace
//! ```
//!
//! Each node's agent routes the other nodes' pod CIDRs through their addresses on this link
//! (`skiff_node::routes`), so pods reach pods on other nodes by their addresses.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{Child, Error, Launch, Result};

/// The bridge in the switch namespace.
const BRIDGE: &str = "skiffnodes0";
/// The link's network: the switch is `.1`, node `i` is `.11 + i`.
const NETWORK: [u8; 3] = [10, 78, 0];
/// The most nodes on the link.
pub const MAX_NODES: usize = 200;
/// How long the switch's process may take to be in its own namespace.
const SETUP_LIMIT: Duration = Duration::from_secs(10);

/// The address of node `i` on the link.
pub fn node_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(NETWORK[0], NETWORK[1], NETWORK[2], 11 + i as u8)
}

/// A network namespace of its own, held by a process that does nothing else (`unshare --net
/// sleep infinity`), loopback up. Dropped, the process is killed, and the namespace goes
/// once nothing else holds it.
#[derive(Debug)]
pub struct Netns {
    child: Child,
}

impl Netns {
    /// Starts the namespace's process (`name`, logging to `log`) and waits until it is in a
    /// namespace of its own: before that, its `/proc/<pid>/ns/net` is still this process's,
    /// and nothing may be made there.
    pub fn start(name: &str, log: &Path) -> Result<Netns> {
        let mut child = Launch::new(name, "unshare", log)
            .args(["--net", "--", "sleep", "infinity"])
            .spawn()?;
        let host = namespace_id(Path::new("/proc/self/ns/net"));
        let deadline = Instant::now() + SETUP_LIMIT;
        loop {
            let path = PathBuf::from(format!("/proc/{}/ns/net", child.pid().unwrap_or(0)));
            if namespace_id(&path).is_some_and(|id| Some(&id) != host.as_ref()) {
                break;
            }
            if let Some(status) = child.exited() {
                return Err(Error::Exited {
                    name: name.into(),
                    status,
                    log: log.to_path_buf(),
                });
            }
            if Instant::now() >= deadline {
                return Err(Error::Setup {
                    command: "unshare --net".into(),
                    reason: format!("no namespace of its own within {SETUP_LIMIT:?}"),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let netns = Netns { child };
        ip(&netns.path(), &["link", "set", "lo", "up"])?;
        Ok(netns)
    }

    /// The namespace (`/proc/<pid>/ns/net`).
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/net", self.pid()))
    }

    fn pid(&self) -> u32 {
        self.child.pid().unwrap_or(0)
    }
}

/// The running link (see the module's documentation). Dropped, its namespace's process is
/// killed, and with it the bridge and every veth pair.
#[derive(Debug)]
pub struct NodeNetwork {
    switch: Netns,
}

/// The network namespace a path names, as the kernel identifies it (`net:[4026531840]`).
fn namespace_id(path: &Path) -> Option<PathBuf> {
    std::fs::read_link(path).ok()
}

/// Runs `ip ARGS` in the namespace at `netns` (through `nsenter`).
fn ip(netns: &Path, args: &[&str]) -> Result<()> {
    let mut command = Command::new("nsenter");
    command
        .arg(format!("--net={}", netns.display()))
        .arg("--")
        .arg("ip")
        .args(args);
    crate::setup(
        command,
        format!("ip {}", args.join(" ")),
        " (Debian: apt-get install util-linux iproute2)",
    )
}

impl NodeNetwork {
    /// Starts the switch's namespace (its process logs to `log`) and makes the bridge there.
    pub fn start(log: &Path) -> Result<NodeNetwork> {
        let switch = Netns::start("the nodes' link", log)?;
        let netns = switch.path();
        let address = format!(
            "{}/24",
            Ipv4Addr::new(NETWORK[0], NETWORK[1], NETWORK[2], 1)
        );
        ip(&netns, &["link", "add", BRIDGE, "type", "bridge"])?;
        ip(&netns, &["addr", "add", &address, "dev", BRIDGE])?;
        ip(&netns, &["link", "set", BRIDGE, "up"])?;
        Ok(NodeNetwork { switch })
    }

    fn pid(&self) -> u32 {
        self.switch.pid()
    }

    /// Joins the namespace at `node_netns` (a node's: `/proc/<pid>/ns/net`) to the link as
    /// node `i`: its `eth0` gets [`node_ip`]`(i)`. Refuses this process's own namespace, so
    /// the host's network is never changed.
    pub fn attach(&self, node_netns: &Path, i: usize) -> Result<Ipv4Addr> {
        if i >= MAX_NODES {
            return Err(Error::Setup {
                command: "attaching a node".into(),
                reason: format!("the link takes at most {MAX_NODES} nodes"),
            });
        }
        let own = namespace_id(Path::new("/proc/self/ns/net"));
        if namespace_id(node_netns).is_none() || namespace_id(node_netns) == own {
            return Err(Error::Setup {
                command: format!("attaching {}", node_netns.display()),
                reason: "not a network namespace of its own (the host's is never changed)".into(),
            });
        }
        let switch = self.switch.path();
        let port = format!("skn{i}");
        let pid = self.pid().to_string();
        // Made in the node's namespace, its peer moved to the switch's at once.
        ip(
            node_netns,
            &[
                "link", "add", "eth0", "type", "veth", "peer", "name", &port, "netns", &pid,
            ],
        )?;
        ip(&switch, &["link", "set", &port, "master", BRIDGE])?;
        ip(&switch, &["link", "set", &port, "up"])?;
        let address = node_ip(i);
        ip(
            node_netns,
            &["addr", "add", &format!("{address}/24"), "dev", "eth0"],
        )?;
        ip(node_netns, &["link", "set", "eth0", "up"])?;
        Ok(address)
    }

    /// The switch's own address on the link, where the nodes reach what runs on the host
    /// through [`NodeNetwork::relay`].
    pub fn switch_ip() -> Ipv4Addr {
        Ipv4Addr::new(NETWORK[0], NETWORK[1], NETWORK[2], 1)
    }

    /// Relays TCP from `port` on the switch's address (in its namespace) to the first of
    /// `targets` (on the host's loopback) that takes the connection: how pods on the nodes
    /// reach the host's API servers (the `kubernetes` Service's endpoint). The listener is
    /// made in the switch's namespace and the connections out in this process's; it runs on
    /// threads of this process for as long as the process does.
    pub fn relay(&self, port: u16, targets: Vec<SocketAddr>) -> Result<SocketAddr> {
        let address = SocketAddr::from((Self::switch_ip(), port));
        let listener =
            in_namespace(&self.switch.path(), || TcpListener::bind(address)).map_err(|e| {
                Error::Setup {
                    command: format!("relay on {address}"),
                    reason: e.to_string(),
                }
            })?;
        std::thread::Builder::new()
            .name("api-relay".into())
            .spawn(move || {
                for inbound in listener.incoming().flatten() {
                    let targets = targets.clone();
                    let _ = std::thread::Builder::new()
                        .name("api-relay-conn".into())
                        .spawn(move || relay_one(inbound, &targets));
                }
            })
            .map_err(|e| Error::Setup {
                command: format!("relay on {address}"),
                reason: e.to_string(),
            })?;
        Ok(address)
    }
}

/// Runs `f` with the calling thread in the network namespace at `netns`, then puts the
/// thread back in its own: sockets made by `f` stay in `netns`.
fn in_namespace<T>(netns: &Path, f: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
    use nix::sched::{CloneFlags, setns};
    let own = std::fs::File::open("/proc/thread-self/ns/net")?;
    let target = std::fs::File::open(netns)?;
    setns(&target, CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
    let out = f();
    setns(&own, CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
    out
}

/// Copies one connection both ways to the first target that answers.
fn relay_one(inbound: TcpStream, targets: &[SocketAddr]) {
    let Some(outbound) = targets
        .iter()
        .find_map(|t| TcpStream::connect_timeout(t, Duration::from_secs(2)).ok())
    else {
        return;
    };
    let (Ok(mut in_read), Ok(mut out_write)) = (inbound.try_clone(), outbound.try_clone()) else {
        return;
    };
    let upstream = std::thread::spawn(move || {
        let _ = std::io::copy(&mut in_read, &mut out_write);
        let _ = out_write.shutdown(std::net::Shutdown::Write);
    });
    let (mut out_read, mut in_write) = (outbound, inbound);
    let _ = std::io::copy(&mut out_read, &mut in_write);
    let _ = in_write.shutdown(std::net::Shutdown::Write);
    let _ = upstream.join();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_get_addresses_after_the_switch() {
        assert_eq!(node_ip(0), Ipv4Addr::new(10, 78, 0, 11));
        assert_eq!(node_ip(MAX_NODES - 1), Ipv4Addr::new(10, 78, 0, 210));
    }
}
