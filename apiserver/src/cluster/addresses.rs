//! Service addresses: a cluster IP from `--service-cluster-ip-range` (10.96.0.0/12 by
//! default) and, for a `NodePort` Service, a port on every node from
//! `--service-node-port-range` (30000-32767) for each of its ports. Each is a claim key
//! (`/skiff/ipam/serviceips/<ip>`, `/skiff/ipam/nodeports/<port>`, its value the Service's
//! `namespace/name`) made in the very transaction that writes the Service, and removed in the
//! one that deletes it, so no address is given twice and none leaks, however many members
//! take writes at once (kube-apiserver's allocators keep a bitmap beside the objects and a
//! repair loop to mend the two; here they cannot drift apart).
//!
//! A Service naming its own cluster IP or node port gets it when it is in the range and free;
//! a cluster IP, once given, stays (Kubernetes' rule); an update keeps a port's node port
//! unless it names another, gives new ports new ones and frees those of ports it drops.

use std::net::Ipv4Addr;

use skiff_proto::api::service::Service;
use skiff_proto::api::validation::{FieldError, ValidationErrors};
use skiff_proto::api::{Kind, Object};

use super::ipam::{Claim, Pool, claim, release};
use super::{ClusterApi, ClusterError, Result};
use skiff_store::request::RequestOp;

/// Why a service range flag cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{flag} {value:?}: {why}")]
pub struct RangeError {
    flag: &'static str,
    value: String,
    why: String,
}

/// The cluster IPs: an IPv4 network, less its network and broadcast addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceIps {
    network: u32,
    prefix: u8,
}

impl ServiceIps {
    pub fn new(cidr: &str) -> std::result::Result<ServiceIps, RangeError> {
        let err = |why: &str| RangeError {
            flag: "--service-cluster-ip-range",
            value: cidr.to_owned(),
            why: why.to_owned(),
        };
        let (ip, len) = cidr
            .split_once('/')
            .and_then(|(ip, len)| Some((ip.parse::<Ipv4Addr>().ok()?, len.parse::<u8>().ok()?)))
            .ok_or_else(|| err("not an IPv4 CIDR (a.b.c.d/n)"))?;
        if !(8..=30).contains(&len) {
            return Err(err("the prefix must be between /8 and /30"));
        }
        let network = u32::from(ip);
        if network & !(u32::MAX << (32 - len)) != 0 {
            return Err(err("host bits are set; name the network address"));
        }
        Ok(ServiceIps {
            network,
            prefix: len,
        })
    }

    fn describe(&self) -> String {
        format!("{}/{}", Ipv4Addr::from(self.network), self.prefix)
    }

    /// The range's first usable address: the `kubernetes` Service's, never given to
    /// another that does not ask for it.
    pub fn first_usable(&self) -> String {
        Ipv4Addr::from(self.network + 1).to_string()
    }
}

impl Pool for ServiceIps {
    fn claims(&self) -> &'static str {
        "/skiff/ipam/serviceips/"
    }
    fn len(&self) -> u32 {
        1 << (32 - self.prefix)
    }
    fn slot(&self, i: u32) -> String {
        Ipv4Addr::from(self.network + i).to_string()
    }
    fn index_of(&self, slot: &str) -> Option<u32> {
        let ip = u32::from(slot.parse::<Ipv4Addr>().ok()?);
        let i = ip.checked_sub(self.network)?;
        (i < self.len()).then_some(i)
    }
    fn usable(&self, i: u32) -> bool {
        i != 0 && i != self.len() - 1
    }
    fn reserved(&self, i: u32) -> bool {
        i == 1
    }
    fn key_name(&self, slot: &str) -> String {
        slot.to_owned()
    }
    fn slot_of_key(&self, name: &str) -> String {
        name.to_owned()
    }
}

/// The node ports: `first-last`, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodePorts {
    first: u16,
    last: u16,
}

impl NodePorts {
    pub fn new(range: &str) -> std::result::Result<NodePorts, RangeError> {
        let err = |why: &str| RangeError {
            flag: "--service-node-port-range",
            value: range.to_owned(),
            why: why.to_owned(),
        };
        let (first, last) = range
            .split_once('-')
            .and_then(|(a, b)| Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?)))
            .ok_or_else(|| err("expected FIRST-LAST (30000-32767)"))?;
        if first == 0 || last < first {
            return Err(err("the range must be 1 or more and FIRST <= LAST"));
        }
        Ok(NodePorts { first, last })
    }
}

impl Pool for NodePorts {
    fn claims(&self) -> &'static str {
        "/skiff/ipam/nodeports/"
    }
    fn len(&self) -> u32 {
        u32::from(self.last - self.first) + 1
    }
    fn slot(&self, i: u32) -> String {
        (u32::from(self.first) + i).to_string()
    }
    fn index_of(&self, slot: &str) -> Option<u32> {
        let port = slot.parse::<u16>().ok()?;
        (self.first..=self.last)
            .contains(&port)
            .then(|| u32::from(port - self.first))
    }
    fn key_name(&self, slot: &str) -> String {
        slot.to_owned()
    }
    fn slot_of_key(&self, name: &str) -> String {
        name.to_owned()
    }
}

/// Both ranges of a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceRanges {
    pub ips: ServiceIps,
    pub node_ports: NodePorts,
}

impl Default for ServiceRanges {
    fn default() -> Self {
        ServiceRanges {
            ips: ServiceIps::new("10.96.0.0/12").expect("invariant: the default range parses"),
            node_ports: NodePorts::new("30000-32767").expect("invariant: the default range parses"),
        }
    }
}

/// What a Service's write adds to its transaction: claims to make, claims to give back.
#[derive(Debug, Default)]
pub struct Allocation {
    pub claims: Vec<Claim>,
    pub releases: Vec<RequestOp>,
}

fn invalid(svc: &Service, path: String, message: String) -> ClusterError {
    ClusterError::Invalid {
        kind: Kind::Service,
        name: svc.metadata.name.clone(),
        source: ValidationErrors(vec![FieldError { path, message }]),
    }
}

fn node_ports_of(svc: &Service) -> Vec<String> {
    svc.spec
        .ports
        .iter()
        .filter_map(|p| p.node_port)
        .map(|p| p.to_string())
        .collect()
}

impl ClusterApi {
    pub(crate) fn service_ranges(&self) -> &ServiceRanges {
        &self.config.services
    }

    /// The addresses of a Service being written (`current`: the one an update replaces),
    /// set in it, with the claims and releases its transaction makes.
    pub(super) fn service_addresses(
        &self,
        current: Option<&Object>,
        next: &mut Object,
    ) -> Result<Allocation> {
        let Object::Service(svc) = next else {
            return Ok(Allocation::default());
        };
        let current = match current {
            Some(Object::Service(c)) => Some(c),
            _ => None,
        };
        let ranges = *self.service_ranges();
        let holder = format!("{}/{}", svc.metadata.namespace, svc.metadata.name);
        let mut out = Allocation::default();

        let had_ip = current.is_some_and(|c| !c.spec.cluster_ip.is_empty());
        if !svc.is_headless() && !had_ip {
            let ip = if svc.spec.cluster_ip.is_empty() {
                self.free_slot(&ranges.ips, &[])?.ok_or_else(|| {
                    invalid(
                        svc,
                        "spec.clusterIP".into(),
                        format!(
                            "Internal error: failed to allocate a serviceIP: range is full ({})",
                            ranges.ips.describe()
                        ),
                    )
                })?
            } else {
                let ip = svc.spec.cluster_ip.clone();
                if !ranges
                    .ips
                    .index_of(&ip)
                    .is_some_and(|i| ranges.ips.usable(i))
                {
                    return Err(invalid(
                        svc,
                        "spec.clusterIP".into(),
                        format!(
                            "Invalid value: {ip:?}: provided IP is not in the valid range. \
                             The range of valid IPs is {}",
                            ranges.ips.describe()
                        ),
                    ));
                }
                if self.claim_holder(&ranges.ips, &ip)?.is_some() {
                    return Err(invalid(
                        svc,
                        "spec.clusterIP".into(),
                        format!("Invalid value: {ip:?}: provided IP is already allocated"),
                    ));
                }
                ip
            };
            out.claims.push(claim(&ranges.ips, &ip, &holder));
            svc.spec.cluster_ip = ip.clone();
            svc.spec.cluster_ips = vec![ip];
        }

        let held = current.map(node_ports_of).unwrap_or_default();
        let mut kept = Vec::new();
        if svc.is_node_port() {
            for i in 0..svc.spec.ports.len() {
                let port = &svc.spec.ports[i];
                let path = format!("spec.ports[{i}].nodePort");
                let same = |p: &&skiff_proto::api::service::ServicePort| {
                    p.port == port.port && p.protocol == port.protocol
                };
                let wanted = match port.node_port {
                    Some(n) => n.to_string(),
                    // An update that names none keeps the port's node port.
                    None => match current
                        .and_then(|c| c.spec.ports.iter().find(same))
                        .and_then(|p| p.node_port)
                    {
                        Some(n) => n.to_string(),
                        None => {
                            let taken: Vec<String> = held.iter().chain(&kept).cloned().collect();
                            let free = self.free_slot(&ranges.node_ports, &taken)?;
                            let port = free.ok_or_else(|| {
                                invalid(
                                    svc,
                                    path.clone(),
                                    "Internal error: failed to allocate a nodePort: range is full"
                                        .into(),
                                )
                            })?;
                            out.claims.push(claim(&ranges.node_ports, &port, &holder));
                            kept.push(port.clone());
                            svc.spec.ports[i].node_port = port.parse().ok();
                            continue;
                        }
                    },
                };
                if kept.contains(&wanted) {
                    return Err(invalid(svc, path, format!("Duplicate value: {wanted}")));
                }
                if !held.contains(&wanted) {
                    if ranges.node_ports.index_of(&wanted).is_none() {
                        return Err(invalid(
                            svc,
                            path,
                            format!(
                                "Invalid value: {wanted}: provided port is not in the valid \
                                 range. The range of valid ports is {}-{}",
                                ranges.node_ports.first, ranges.node_ports.last
                            ),
                        ));
                    }
                    if self.claim_holder(&ranges.node_ports, &wanted)?.is_some() {
                        return Err(invalid(
                            svc,
                            path,
                            format!("Invalid value: {wanted}: provided port is already allocated"),
                        ));
                    }
                    out.claims.push(claim(&ranges.node_ports, &wanted, &holder));
                }
                svc.spec.ports[i].node_port = wanted.parse().ok();
                kept.push(wanted);
            }
        }
        for port in held.iter().filter(|p| !kept.contains(p)) {
            out.releases.push(release(&ranges.node_ports, port));
        }
        Ok(out)
    }

    /// What deleting a Service gives back: its cluster IP and node ports.
    pub(super) fn release_service_addresses(&self, object: &Object) -> Vec<RequestOp> {
        let Object::Service(svc) = object else {
            return Vec::new();
        };
        let ranges = *self.service_ranges();
        let mut out = Vec::new();
        if ranges.ips.index_of(&svc.spec.cluster_ip).is_some() {
            out.push(release(&ranges.ips, &svc.spec.cluster_ip));
        }
        for port in node_ports_of(svc) {
            if ranges.node_ports.index_of(&port).is_some() {
                out.push(release(&ranges.node_ports, &port));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_name_their_slots() {
        let ips = ServiceIps::new("10.96.0.0/12").expect("range");
        assert_eq!(ips.len(), 1 << 20);
        assert_eq!(ips.slot(10), "10.96.0.10");
        assert_eq!(ips.index_of("10.96.0.10"), Some(10));
        assert_eq!(ips.index_of("10.112.0.0"), None);
        assert!(!ips.usable(0) && !ips.usable(ips.len() - 1) && ips.usable(1));
        for bad in ["10.96.0.1/12", "10.96.0.0", "fd00::/108", "10.0.0.0/31"] {
            assert!(ServiceIps::new(bad).is_err(), "{bad}");
        }
        let ports = NodePorts::new("30000-32767").expect("range");
        assert_eq!(ports.len(), 2768);
        assert_eq!(ports.slot(80), "30080");
        assert_eq!(ports.index_of("32767"), Some(2767));
        assert_eq!(ports.index_of("29999"), None);
        for bad in ["30000", "32767-30000", "0-10", "a-b"] {
            assert!(NodePorts::new(bad).is_err(), "{bad}");
        }
    }
}
