//! The `kubernetes` Service in `default`, through which pods reach the API server, kept as
//! kube-apiserver's bootstrap controller and lease endpoint reconciler keep it:
//!
//! ```text
//! every 10 s, each member:
//!   the Service default/kubernetes: made when missing (cluster IP: the range's first,
//!     port 443 "https" to the advertised port), its target port put right
//!   /skiff/apiservers/<ip:port> written under a fresh 15 s lease (the member is alive)
//!   the Endpoints and EndpointSlice `kubernetes`: the addresses of the live leases
//! ```
//!
//! A member that stops stops renewing its key; within 15 s the others drop its address. The
//! Endpoints carry `endpointslice.kubernetes.io/skip-mirror`, as kube-apiserver's do: the
//! member writes the slice itself, so the Service works without a controller manager. A
//! member with no advertised address (`--advertise-address`) keeps the Service but lists
//! nothing: pods reach the API only at addresses they can route to.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use skiff_proto::api::{Kind, Object};
use skiff_proto::backoff::Backoff;
use skiff_store::request::{PutRequest, RangeRequest, RequestOp, TxnRequest};

use super::{ClusterApi, ClusterError, Result, prefix_end};

/// The Service's name, in `default`.
pub const NAME: &str = "kubernetes";
/// Where members say they are alive: `<prefix><ip:port>`, under a lease.
const LEASES: &str = "/skiff/apiservers/";
/// How long a member's key outlives its last renewal (kube-apiserver's master lease TTL).
const LEASE_TTL: i64 = 15;
/// How often a member renews its key and puts the Service and its endpoints right.
const INTERVAL: Duration = Duration::from_secs(10);
/// The port the Service serves on (kube-apiserver's).
const SERVICE_PORT: i32 = 443;
/// The API's port when no member advertises one (kube-apiserver's `--secure-port`).
const DEFAULT_TARGET_PORT: u16 = 6443;

/// Keeps the Service and, with `advertise`, this member's place among its endpoints, until
/// `stop` fires. A failed round is tried again at the next.
pub async fn maintain(
    api: ClusterApi,
    advertise: Option<SocketAddr>,
    stop: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    if advertise.is_none() {
        tracing::info!(
            "no --advertise-address: the kubernetes Service lists no endpoints from this member"
        );
    }
    // A round that fails (the store still electing, `default` not made yet) is tried again
    // soon; one that succeeds, after the interval.
    let mut backoff = Backoff::new(Duration::from_millis(100), INTERVAL);
    loop {
        let wait = match round(&api, advertise).await {
            Ok(()) => {
                backoff.reset();
                INTERVAL
            }
            Err(e) => {
                tracing::debug!(error = %e, "keeping the kubernetes Service; trying again");
                backoff.next_delay()
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// One round: the Service, this member's lease, the endpoints.
async fn round(api: &ClusterApi, advertise: Option<SocketAddr>) -> Result<()> {
    let port = advertise.map_or(DEFAULT_TARGET_PORT, |a| a.port());
    ensure_service(api, port).await?;
    let Some(address) = advertise else {
        return Ok(());
    };
    let lease = api.kv.lease_grant(LEASE_TTL).await?;
    api.kv
        .txn(TxnRequest {
            compare: Vec::new(),
            success: vec![RequestOp::Put(PutRequest {
                key: format!("{LEASES}{address}").into_bytes(),
                value: Vec::new(),
                lease,
                ..PutRequest::default()
            })],
            failure: Vec::new(),
            auth_revision: None,
        })
        .await?;
    let live = live_addresses(api)?;
    ensure_endpoints(api, &live).await
}

/// The addresses whose keys have not expired, each `ip:port`.
fn live_addresses(api: &ClusterApi) -> Result<BTreeSet<SocketAddr>> {
    let resp = api.keyspace().read().range(&RangeRequest {
        key: LEASES.as_bytes().to_vec(),
        range_end: prefix_end(LEASES.as_bytes()),
        keys_only: true,
        ..RangeRequest::default()
    })?;
    Ok(resp
        .kvs
        .iter()
        .filter_map(|kv| {
            std::str::from_utf8(&kv.key)
                .ok()?
                .strip_prefix(LEASES)?
                .parse()
                .ok()
        })
        .collect())
}

/// The first usable address of the Service range: the `kubernetes` Service's.
pub fn cluster_ip(api: &ClusterApi) -> String {
    api.service_ranges().ips.first_usable()
}

fn object(kind: Kind, value: serde_json::Value) -> Object {
    Object::from_json(kind, value.to_string().as_bytes())
        .expect("invariant: the kubernetes Service's objects decode")
}

/// The Service as kube-apiserver makes it, its port to `target_port`.
fn service(cluster_ip: &str, target_port: u16) -> Object {
    object(
        Kind::Service,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": NAME, "namespace": "default",
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"type": "ClusterIP", "clusterIP": cluster_ip, "clusterIPs": [cluster_ip],
                     "sessionAffinity": "None",
                     "ports": [{"name": "https", "protocol": "TCP", "port": SERVICE_PORT,
                                "targetPort": target_port}]},
        }),
    )
}

async fn ensure_service(api: &ClusterApi, target_port: u16) -> Result<()> {
    let (_, stored) = api.get_local(Kind::Service, "default", NAME)?;
    let Some(stored) = stored else {
        let want = service(&cluster_ip(api), target_port);
        return match api.create(want, false).await {
            Ok(_) | Err(ClusterError::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(e),
        };
    };
    let Object::Service(mut svc) = stored.object else {
        return Ok(());
    };
    let want = Some(skiff_proto::api::IntOrString::Int(i32::from(target_port)));
    let Some(port) = svc.spec.ports.iter_mut().find(|p| p.name == "https") else {
        return Ok(());
    };
    if port.target_port == want {
        return Ok(());
    }
    port.target_port = want;
    api.update(Object::Service(svc), super::Part::Main, false)
        .await
        .map(|_| ())
}

/// The Endpoints and EndpointSlice `kubernetes` listing `live` (those on the most common
/// port: the Service has one target port).
async fn ensure_endpoints(api: &ClusterApi, live: &BTreeSet<SocketAddr>) -> Result<()> {
    let port = most_common_port(live);
    let ips: Vec<String> = live
        .iter()
        .filter(|a| Some(a.port()) == port)
        .map(|a| a.ip().to_string())
        .collect();
    let port = i32::from(port.unwrap_or(DEFAULT_TARGET_PORT));
    let endpoints_kind = Kind::from_name("Endpoints").expect("invariant: Endpoints is declared");
    let subsets = if ips.is_empty() {
        json!([])
    } else {
        json!([{
            "addresses": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>(),
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        }])
    };
    let endpoints = object(
        endpoints_kind,
        json!({
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": NAME, "namespace": "default",
                         "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": subsets,
        }),
    );
    let slice = object(
        Kind::EndpointSlice,
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": NAME, "namespace": "default",
                         "labels": {"kubernetes.io/service-name": NAME}},
            "addressType": "IPv4",
            "endpoints": ips.iter().map(|ip| json!({"addresses": [ip],
                "conditions": {"ready": true, "serving": true, "terminating": false}}))
                .collect::<Vec<_>>(),
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        }),
    );
    put(api, endpoints, |o| o.pointer("/subsets").cloned()).await?;
    put(api, slice, |o| {
        Some(json!([
            o.pointer("/endpoints").cloned(),
            o.pointer("/ports").cloned()
        ]))
    })
    .await
}

/// Creates `want`, or replaces what is stored when `content` differs.
async fn put(
    api: &ClusterApi,
    want: Object,
    content: impl Fn(&serde_json::Value) -> Option<serde_json::Value>,
) -> Result<()> {
    let kind = want.kind();
    let (_, stored) = api.get_local(kind, "default", NAME)?;
    let Some(stored) = stored else {
        return match api.create(want, false).await {
            Ok(_) | Err(ClusterError::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(e),
        };
    };
    let json = |o: &Object| o.to_json_value();
    if content(&json(&stored.object)) == content(&json(&want)) {
        return Ok(());
    }
    let mut want = want;
    want.metadata_mut().resource_version = stored.object.metadata().resource_version.clone();
    api.update(want, super::Part::Main, false).await.map(|_| ())
}

/// The port most of `live` share (the lowest of a tie).
fn most_common_port(live: &BTreeSet<SocketAddr>) -> Option<u16> {
    let mut counts = std::collections::BTreeMap::<u16, usize>::new();
    for a in live {
        *counts.entry(a.port()).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by(|(pa, a), (pb, b)| a.cmp(b).then(pb.cmp(pa)))
        .map(|(p, _)| p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::testing::TestApi;

    /// The first round makes the Service (the range's first address, 443 to the advertised
    /// port) and lists the member; a second member's round adds its address; a Service
    /// asked for without an address never gets the reserved first one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn members_list_themselves_behind_the_service() {
        let t = TestApi::start(|_| crate::access::AccessConfig::default()).await;
        let a: SocketAddr = "10.78.0.1:6443".parse().unwrap();
        round(&t.api, Some(a)).await.expect("a round");
        let (_, svc) = t.api.get_local(Kind::Service, "default", NAME).unwrap();
        let Some(Object::Service(svc)) = svc.map(|s| s.object) else {
            panic!("no Service");
        };
        assert_eq!(svc.spec.cluster_ip, "10.96.0.1");
        assert_eq!(svc.spec.ports[0].port, 443);
        assert_eq!(
            svc.spec.ports[0].target_port,
            Some(skiff_proto::api::IntOrString::Int(6443))
        );
        let b: SocketAddr = "10.78.0.2:6443".parse().unwrap();
        round(&t.api, Some(b))
            .await
            .expect("another member's round");
        let (_, slice) = t
            .api
            .get_local(Kind::EndpointSlice, "default", NAME)
            .unwrap();
        let Some(Object::EndpointSlice(slice)) = slice.map(|s| s.object) else {
            panic!("no EndpointSlice");
        };
        let ips: Vec<&str> = slice
            .endpoints
            .iter()
            .flat_map(|e| e.addresses.iter().map(String::as_str))
            .collect();
        assert_eq!(ips, ["10.78.0.1", "10.78.0.2"]);
        assert_eq!(slice.ports[0].port, Some(6443));
        let endpoints = Kind::from_name("Endpoints").unwrap();
        let (_, ep) = t.api.get_local(endpoints, "default", NAME).unwrap();
        let ep = ep.expect("Endpoints").object.to_json_value();
        assert_eq!(ep["subsets"][0]["addresses"][1]["ip"], "10.78.0.2");
        assert_eq!(
            ep["metadata"]["labels"]["endpointslice.kubernetes.io/skip-mirror"],
            "true"
        );
        let other = Object::from_value(
            Kind::Service,
            json!({"metadata": {"name": "web", "namespace": "default"},
                   "spec": {"ports": [{"port": 80}]}}),
        )
        .unwrap();
        let (_, other) = t.api.create(other, false).await.expect("a Service");
        let Object::Service(other) = other else {
            unreachable!()
        };
        assert_ne!(other.spec.cluster_ip, "10.96.0.1");
        t.stop().await;
    }

    #[test]
    fn the_most_common_port_wins() {
        let set = |a: &[&str]| {
            a.iter()
                .map(|s| s.parse().unwrap())
                .collect::<BTreeSet<_>>()
        };
        assert_eq!(most_common_port(&set(&[])), None);
        assert_eq!(
            most_common_port(&set(&["10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:7443"])),
            Some(6443)
        );
        assert_eq!(
            most_common_port(&set(&["10.0.0.1:7443", "10.0.0.2:6443"])),
            Some(6443)
        );
    }
}
