//! Node IPAM: the cluster's pod network (`--cluster-cidr`, 10.244.0.0/16 by default) cut into
//! one block per node (`--node-cidr-mask-size`, /24). A Node gets a free block, at random, in
//! the transaction that registers it (`spec.podCIDR`, `spec.podCIDRs`), and the one that
//! deletes it frees the block, as kube-controller-manager's range allocator does, but
//! atomically: each block given out is a claim key (`/skiff/ipam/podcidrs/<block>`, its value
//! the node's name) that the registration creates only if it does not exist, so no block is
//! given twice, however many members take registrations at once. A Node that names its block
//! itself gets it if no other node holds it; one outside the cluster's network is its own
//! business. When every block is taken a Node registers without one
//! (kube-controller-manager's `CIDRNotAvailable`), which the member logs.

use std::net::Ipv4Addr;

use skiff_proto::api::{Node, Object};

use super::{ClusterApi, ClusterError, Result, compare, prefix_end};
use skiff_store::request::{
    Compare, CompareResult, CompareTarget, DeleteRangeRequest, PutRequest, RangeRequest,
    RangeResponse, RequestOp,
};

/// Where the claims are kept.
const CLAIMS: &str = "/skiff/ipam/podcidrs/";

/// The cluster's pod network and the size of each node's block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodCidrs {
    network: u32,
    prefix: u8,
    node_prefix: u8,
}

/// Why `--cluster-cidr` or `--node-cidr-mask-size` cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--cluster-cidr {cidr:?} with --node-cidr-mask-size {node_prefix}: {why}")]
pub struct CidrError {
    cidr: String,
    node_prefix: u8,
    why: String,
}

/// `a.b.c.d/n` as (address, prefix length).
fn parse_cidr(s: &str) -> Option<(u32, u8)> {
    let (ip, len) = s.split_once('/')?;
    let ip: Ipv4Addr = ip.parse().ok()?;
    let len: u8 = len.parse().ok().filter(|l| *l <= 32)?;
    Some((u32::from(ip), len))
}

fn mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    }
}

impl PodCidrs {
    pub fn new(cidr: &str, node_prefix: u8) -> std::result::Result<PodCidrs, CidrError> {
        let err = |why: &str| CidrError {
            cidr: cidr.to_owned(),
            node_prefix,
            why: why.to_owned(),
        };
        let (ip, prefix) = parse_cidr(cidr).ok_or_else(|| err("not an IPv4 CIDR (a.b.c.d/n)"))?;
        if ip & !mask(prefix) != 0 {
            return Err(err("host bits are set; name the network address"));
        }
        if node_prefix < prefix || node_prefix > 30 {
            return Err(err(
                "a node's block must lie inside the network and hold at least 4 addresses",
            ));
        }
        if node_prefix - prefix > 20 {
            return Err(err("more than 2^20 node blocks"));
        }
        Ok(PodCidrs {
            network: ip,
            prefix,
            node_prefix,
        })
    }

    /// How many node blocks the network holds.
    pub fn blocks(&self) -> u32 {
        1 << (self.node_prefix - self.prefix)
    }

    /// Block `i` as `a.b.c.d/n`.
    pub fn block(&self, i: u32) -> String {
        let ip = self.network + (i << (32 - self.node_prefix));
        format!("{}/{}", Ipv4Addr::from(ip), self.node_prefix)
    }

    /// The index of `cidr` when it is one of this network's node blocks.
    pub fn index_of(&self, cidr: &str) -> Option<u32> {
        let (ip, len) = parse_cidr(cidr)?;
        (len == self.node_prefix && ip & mask(self.prefix) == self.network && ip & !mask(len) == 0)
            .then(|| (ip - self.network) >> (32 - self.node_prefix))
    }
}

/// A pool of numbered slots (node blocks, service IPs, node ports), each given out by a claim
/// key under the pool's prefix, created only if absent, so no slot is ever given twice.
pub(super) trait Pool {
    /// Where the claims are kept (`/skiff/ipam/<what>/`).
    fn claims(&self) -> &'static str;
    fn len(&self) -> u32;
    /// Slot `i` as objects name it (`10.244.3.0/24`, `10.96.0.10`, `30080`).
    fn slot(&self, i: u32) -> String;
    fn index_of(&self, slot: &str) -> Option<u32>;
    /// Whether slot `i` may be given out (a range's network and broadcast addresses may not).
    fn usable(&self, _i: u32) -> bool {
        true
    }
    /// Whether slot `i` is kept for one who names it (never given out unasked).
    fn reserved(&self, _i: u32) -> bool {
        false
    }
    /// The claim key's last segment for `slot` (a `/` is a `-`).
    fn key_name(&self, slot: &str) -> String {
        slot.replace('/', "-")
    }
    /// The slot a claim key's last segment names.
    fn slot_of_key(&self, name: &str) -> String {
        name.replacen('-', "/", 1)
    }
}

impl Pool for PodCidrs {
    fn claims(&self) -> &'static str {
        CLAIMS
    }
    fn len(&self) -> u32 {
        self.blocks()
    }
    fn slot(&self, i: u32) -> String {
        self.block(i)
    }
    fn index_of(&self, slot: &str) -> Option<u32> {
        PodCidrs::index_of(self, slot)
    }
}

/// The claim key of `slot` in `pool` (`10.244.3.0/24` → `/skiff/ipam/podcidrs/10.244.3.0-24`).
pub(super) fn claim_key(pool: &dyn Pool, slot: &str) -> String {
    format!("{}{}", pool.claims(), pool.key_name(slot))
}

/// What a write adds to its transaction to take `slot` for `holder`: the claim must not exist
/// yet, and is made.
pub(super) fn claim(pool: &dyn Pool, slot: &str, holder: &str) -> Claim {
    let key = claim_key(pool, slot);
    Claim {
        compare: compare(&key, CompareTarget::Create(0), CompareResult::Equal),
        put: RequestOp::Put(PutRequest {
            key: key.into_bytes(),
            value: holder.as_bytes().to_vec(),
            ..PutRequest::default()
        }),
    }
}

/// The operation that gives `slot` of `pool` back.
pub(super) fn release(pool: &dyn Pool, slot: &str) -> RequestOp {
    RequestOp::DeleteRange(DeleteRangeRequest {
        key: claim_key(pool, slot).into_bytes(),
        range_end: Vec::new(),
        prev_kv: false,
    })
}

/// What a write adds to its transaction to take a slot: the claim must not exist yet, and is
/// made.
#[derive(Debug)]
pub struct Claim {
    pub compare: Compare,
    pub put: RequestOp,
}

impl ClusterApi {
    fn pod_cidrs(&self) -> Option<&PodCidrs> {
        self.config.pod_cidrs.as_ref()
    }

    /// The block for a Node being created: the one it names (when it is one of the network's
    /// and no node holds it), else a free one, set in its spec; with the claim its
    /// transaction makes. `None`: IPAM is off, the node names a block outside the network, or
    /// none is free.
    pub(super) fn claim_pod_cidr(&self, object: &mut Object) -> Result<Option<Claim>> {
        let (Some(cidrs), Object::Node(node)) = (self.pod_cidrs(), object) else {
            return Ok(None);
        };
        let named = node_cidr(node);
        let cidr = match named {
            Some(cidr) => {
                if cidrs.index_of(&cidr).is_none() {
                    return Ok(None);
                }
                if let Some(holder) = self.claim_holder(cidrs, &cidr)? {
                    return Err(ClusterError::Forbidden {
                        kind: skiff_proto::api::Kind::Node,
                        name: node.metadata.name.clone(),
                        why: format!("spec.podCIDR {cidr} is allocated to node {holder:?}"),
                    });
                }
                cidr
            }
            None => {
                let Some(cidr) = self.free_slot(cidrs, &[])? else {
                    tracing::warn!(
                        node = %node.metadata.name,
                        blocks = cidrs.blocks(),
                        "CIDRNotAvailable: every pod CIDR block is taken; the node registers without one"
                    );
                    return Ok(None);
                };
                cidr
            }
        };
        node.spec.pod_cidr = cidr.clone();
        node.spec.pod_cidrs = vec![cidr.clone()];
        Ok(Some(claim(cidrs, &cidr, &node.metadata.name)))
    }

    /// The operation that frees the block of a Node being deleted, if it holds one.
    pub(super) fn release_pod_cidr(&self, object: &Object) -> Option<RequestOp> {
        let (Some(cidrs), Object::Node(node)) = (self.pod_cidrs(), object) else {
            return None;
        };
        let cidr = node_cidr(node).filter(|c| cidrs.index_of(c).is_some())?;
        Some(release(cidrs, &cidr))
    }

    /// A range of this member's keyspace as it is now.
    fn read_raw(&self, request: RangeRequest) -> Result<RangeResponse> {
        Ok(self.keyspace().read().range(&request)?)
    }

    /// Who holds `slot` of `pool`, if anyone.
    pub(super) fn claim_holder(&self, pool: &dyn Pool, slot: &str) -> Result<Option<String>> {
        let key = claim_key(pool, slot);
        let resp = self.read_raw(RangeRequest {
            key: key.into_bytes(),
            ..RangeRequest::default()
        })?;
        Ok(resp
            .kvs
            .first()
            .map(|kv| String::from_utf8_lossy(&kv.value).into_owned()))
    }

    /// A usable slot no claim holds (nor `also_taken`, slots this write takes already), read
    /// from this member's keyspace, chosen uniformly among the free ones, so that writes at
    /// once seldom want the same one (a slot taken meanwhile fails the write's comparison,
    /// and it is tried again). A mostly free pool is probed at random; a fuller one is counted.
    pub(super) fn free_slot(
        &self,
        pool: &dyn Pool,
        also_taken: &[String],
    ) -> Result<Option<String>> {
        use rand::Rng as _;
        let prefix = pool.claims();
        let resp = self.read_raw(RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: prefix_end(prefix.as_bytes()),
            keys_only: true,
            ..RangeRequest::default()
        })?;
        let mut taken: std::collections::HashSet<u32> = resp
            .kvs
            .iter()
            .filter_map(|kv| {
                let name = std::str::from_utf8(&kv.key).ok()?.strip_prefix(prefix)?;
                pool.index_of(&pool.slot_of_key(name))
            })
            .collect();
        taken.extend(also_taken.iter().filter_map(|s| pool.index_of(s)));
        let len = pool.len();
        let free = |i: &u32| pool.usable(*i) && !pool.reserved(*i) && !taken.contains(i);
        let mut rng = rand::rng();
        for _ in 0..64 {
            let i = rng.random_range(0..len.max(1));
            if i < len && free(&i) {
                return Ok(Some(pool.slot(i)));
            }
        }
        let count = (0..len).filter(free).count();
        if count == 0 {
            return Ok(None);
        }
        let n = rng.random_range(0..count);
        Ok((0..len).filter(free).nth(n).map(|i| pool.slot(i)))
    }
}

/// The block a Node names (`spec.podCIDR`, else the first of `spec.podCIDRs`).
fn node_cidr(node: &Node) -> Option<String> {
    Some(node.spec.pod_cidr.clone())
        .filter(|c| !c.is_empty())
        .or_else(|| node.spec.pod_cidrs.first().cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_cut_from_the_network() {
        let c = PodCidrs::new("10.244.0.0/16", 24).expect("cidrs");
        assert_eq!(c.blocks(), 256);
        assert_eq!(c.block(0), "10.244.0.0/24");
        assert_eq!(c.block(255), "10.244.255.0/24");
        assert_eq!(c.index_of("10.244.7.0/24"), Some(7));
        assert_eq!(c.index_of("10.245.0.0/24"), None);
        assert_eq!(c.index_of("10.244.7.0/25"), None);
        assert_eq!(c.index_of("10.244.7.1/24"), None);
        let wide = PodCidrs::new("10.0.0.0/8", 24).expect("cidrs");
        assert_eq!(wide.blocks(), 65536);
        assert_eq!(wide.block(65535), "10.255.255.0/24");
        assert_eq!(
            claim_key(&c, "10.244.3.0/24"),
            "/skiff/ipam/podcidrs/10.244.3.0-24"
        );
        for (cidr, size) in [
            ("10.244.0.1/16", 24),
            ("10.244.0.0/24", 16),
            ("fd00::/64", 80),
            ("10.244.0.0", 24),
            ("10.244.0.0/16", 31),
        ] {
            assert!(PodCidrs::new(cidr, size).is_err(), "{cidr} {size}");
        }
    }
}
