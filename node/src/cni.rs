//! The node's pod network, as the kubelet has containerd's CRI set it up through CNI: the
//! agent writes one network configuration for its containerd once its Node has a pod CIDR
//! (`spec.podCIDR`, given at registration), and containerd calls the plugins (Debian's
//! `containernetworking-plugins`) for every pod sandbox that does not use the host network.
//!
//! ```text
//!  bridge skiff0 (the block's first address, the pods' gateway; masquerade out of the block
//!    unless the cluster's pod network is known: then the agent's routes module masquerades
//!    only what leaves that, and pods on other nodes see their callers' addresses)
//!    └─ host-local IPAM over the node's pod CIDR (the lowest free address; its leases in
//!       --cni-ipam-dir, one file per address, removed when the sandbox goes)
//!  portmap (hostPort), loopback (containerd adds it)
//! ```

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// The configuration file the agent writes in containerd's CNI directory.
pub const CONF_FILE: &str = "10-skiff.conflist";
/// The network's name (host-local keeps its leases under it).
pub const NETWORK: &str = "skiff";
/// The bridge the pods of the node hang off.
pub const BRIDGE: &str = "skiff0";

/// Where the agent writes the network configuration, and where host-local keeps its leases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniConfig {
    /// containerd's `conf_dir` (the kubelet's `--cni-conf-dir`).
    pub conf_dir: PathBuf,
    /// host-local's `dataDir`.
    pub ipam_dir: PathBuf,
    /// The cluster's pod network (every node's pod CIDR is in it), when known.
    pub cluster_cidr: Option<String>,
    /// The node's network namespace (where the bridge, routes and rules live), when it is
    /// not the agent's own.
    pub netns: Option<PathBuf>,
}

/// The network configuration for pod CIDR `pod_cidr`; `masquerade`: the bridge masquerades
/// everything that leaves the block.
pub fn conflist(pod_cidr: &str, ipam_dir: &Path, masquerade: bool) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": true,
                "ipMasq": masquerade,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": ipam_dir,
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
}

/// Writes the configuration for `pod_cidr` (through a temporary file and a rename, so
/// containerd never reads half of it) unless it is there already; whether it wrote.
pub fn write(config: &CniConfig, pod_cidr: &str) -> std::io::Result<bool> {
    let masquerade = config.cluster_cidr.is_none();
    let text = serde_json::to_string_pretty(&conflist(pod_cidr, &config.ipam_dir, masquerade))
        .map_err(std::io::Error::other)?;
    let path = config.conf_dir.join(CONF_FILE);
    if std::fs::read_to_string(&path).is_ok_and(|have| have == text) {
        return Ok(false);
    }
    std::fs::create_dir_all(&config.conf_dir)?;
    std::fs::create_dir_all(&config.ipam_dir)?;
    let tmp = config.conf_dir.join(format!(".{CONF_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    Ok(true)
}

/// The addresses host-local has leased on the network (one file per address in its
/// directory), for checking that none leaks.
pub fn leases(ipam_dir: &Path) -> std::io::Result<Vec<String>> {
    let dir = ipam_dir.join(NETWORK);
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.parse::<std::net::IpAddr>().is_ok() {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_is_written_once_and_names_the_block() {
        let dir = tempfile::tempdir().expect("dir");
        let config = CniConfig {
            conf_dir: dir.path().join("net.d"),
            ipam_dir: dir.path().join("ipam"),
            cluster_cidr: None,
            netns: None,
        };
        assert!(write(&config, "10.244.3.0/24").expect("write"));
        assert!(
            !write(&config, "10.244.3.0/24").expect("again"),
            "unchanged"
        );
        let written: Value = serde_json::from_str(
            &std::fs::read_to_string(config.conf_dir.join(CONF_FILE)).expect("read"),
        )
        .expect("json");
        assert_eq!(
            written["plugins"][0]["ipam"]["ranges"][0][0]["subnet"],
            "10.244.3.0/24"
        );
        assert_eq!(
            leases(&config.ipam_dir).expect("leases"),
            Vec::<String>::new()
        );
        std::fs::create_dir_all(config.ipam_dir.join(NETWORK)).expect("dir");
        for f in ["10.244.3.2", "last_reserved_ip.0", "lock"] {
            std::fs::write(config.ipam_dir.join(NETWORK).join(f), "x").expect("lease");
        }
        assert_eq!(leases(&config.ipam_dir).expect("leases"), ["10.244.3.2"]);
    }
}
