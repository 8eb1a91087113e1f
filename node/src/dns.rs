//! Cluster DNS, served by each node's agent on its node (as CoreDNS's `kubernetes` plugin
//! answers, from the node's own informers, like NodeLocal DNSCache sits on each node):
//!
//! | question | answer |
//! |---|---|
//! | `A <service>.<namespace>.svc.<domain>` | the Service's cluster IP; a headless one's ready endpoints |
//! | `A <endpoint-ip-dashed>.<service>.<namespace>.svc.<domain>` ... | not served (NXDOMAIN) |
//! | any other name in `<domain>` | NXDOMAIN |
//! | names outside `<domain>` | REFUSED (no upstream is reached from here) |
//! | `AAAA` and other types of a known name | no records (NOERROR) |
//!
//! Pods on the pod network get it in their `/etc/resolv.conf` (CRI's DNS config, dnsPolicy
//! `ClusterFirst`): `nameserver <the node's bridge address>`, `search <namespace>.svc.<domain>
//! svc.<domain> <domain>`, `options ndots:5`, so `wget http://web` reaches Service `web`.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use skiff_proto::api::Object;
use skiff_proto::client::ClusterClient;
use tokio_util::sync::CancellationToken;

/// The TTL of answers, in seconds (CoreDNS's default for the kubernetes plugin).
pub const TTL: u32 = 5;
/// The cluster domain Kubernetes uses unless told otherwise.
pub const DEFAULT_DOMAIN: &str = "cluster.local";

/// Where a node serves DNS and for which domain.
#[derive(Debug, Clone)]
pub struct DnsConfig {
    /// The node's network namespace, when it is not this process's.
    pub netns: Option<PathBuf>,
    pub listen: SocketAddr,
    pub domain: String,
}

/// Every name the cluster answers, lower-case with the trailing dot, and its addresses.
pub type Records = HashMap<String, Vec<Ipv4Addr>>;

/// The names of `services`: `<name>.<namespace>.svc.<domain>.` → cluster IP, or for a
/// headless Service its ready endpoints' addresses.
pub fn records(
    services: &std::collections::BTreeMap<String, Object>,
    slices: &std::collections::BTreeMap<String, Object>,
    domain: &str,
) -> Records {
    let mut out = Records::new();
    for o in services.values() {
        let Object::Service(svc) = o else { continue };
        let name = format!(
            "{}.{}.svc.{domain}.",
            svc.metadata.name, svc.metadata.namespace
        )
        .to_ascii_lowercase();
        let addresses: Vec<Ipv4Addr> = if svc.is_headless() {
            let ready: Vec<&skiff_proto::api::service::Endpoint> = slices
                .values()
                .filter_map(|s| match s {
                    Object::EndpointSlice(s)
                        if s.metadata.namespace == svc.metadata.namespace
                            && s.metadata
                                .labels
                                .get(skiff_proto::api::service::SERVICE_NAME_LABEL)
                                == Some(&svc.metadata.name) =>
                    {
                        Some(s)
                    }
                    _ => None,
                })
                .flat_map(|s| &s.endpoints)
                .filter(|e| e.conditions.ready.unwrap_or(true))
                .collect();
            // A named endpoint (a StatefulSet's pod) answers under its own name too:
            // `<hostname>.<service>.<namespace>.svc.<domain>`.
            for e in ready.iter().filter(|e| !e.hostname.is_empty()) {
                let own: Vec<Ipv4Addr> =
                    e.addresses.iter().filter_map(|a| a.parse().ok()).collect();
                out.insert(format!("{}.{name}", e.hostname).to_ascii_lowercase(), own);
            }
            let mut ips: Vec<Ipv4Addr> = ready
                .iter()
                .flat_map(|e| &e.addresses)
                .filter_map(|a| a.parse().ok())
                .collect();
            ips.sort();
            ips.dedup();
            ips
        } else {
            svc.spec.cluster_ip.parse().into_iter().collect()
        };
        out.insert(name, addresses);
    }
    out
}

/// The answer to one query (`None`: not a query worth answering).
pub fn answer(query: &[u8], records: &Records, domain: &str) -> Option<Vec<u8>> {
    let request = Message::from_vec(query).ok()?;
    if request.message_type() != MessageType::Query {
        return None;
    }
    let mut response = Message::new();
    response
        .set_id(request.id())
        .set_message_type(MessageType::Response)
        .set_op_code(request.op_code())
        .set_recursion_desired(request.recursion_desired())
        .set_recursion_available(false)
        .set_authoritative(true);
    let Some(question) = request.queries().first() else {
        response.set_response_code(ResponseCode::FormErr);
        return response.to_vec().ok();
    };
    response.add_query(question.clone());
    if request.op_code() != OpCode::Query {
        response.set_response_code(ResponseCode::NotImp);
        return response.to_vec().ok();
    }
    let name = question.name().to_ascii().to_ascii_lowercase();
    let name = if name.ends_with('.') {
        name
    } else {
        format!("{name}.")
    };
    let suffix = format!(".{domain}.").to_ascii_lowercase();
    if !name.ends_with(&suffix) && name != suffix[1..] {
        response.set_response_code(ResponseCode::Refused);
        return response.to_vec().ok();
    }
    match records.get(&name) {
        None => {
            response.set_response_code(ResponseCode::NXDomain);
        }
        Some(addresses) => {
            response.set_response_code(ResponseCode::NoError);
            if matches!(question.query_type(), RecordType::A | RecordType::ANY) {
                for ip in addresses {
                    response.add_answer(Record::from_rdata(
                        question.name().clone(),
                        TTL,
                        RData::A(A::from(*ip)),
                    ));
                }
            }
        }
    }
    response.to_vec().ok()
}

/// Serves DNS until `cancel`: answers from the Services and EndpointSlices the node follows.
pub async fn run(
    client: ClusterClient,
    config: DnsConfig,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    let socket = crate::netns::bind_udp(config.netns.as_deref(), config.listen).await?;
    tracing::info!(listen = %config.listen, domain = %config.domain, "cluster DNS serving");
    let (followed, mut informers) = crate::services::follow(&client);
    let current: Arc<RwLock<Records>> = Arc::default();
    let mut buf = vec![0u8; 4096];
    loop {
        tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            () = followed.changed.notified() => {
                let (services, slices) = followed.snapshot();
                let fresh = records(&services, &slices, &config.domain);
                *current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
            }
            Some(done) = informers.join_next() => {
                let (kind, r) = done.map_err(std::io::Error::other)?;
                return Err(std::io::Error::other(format!("the {kind} informer stopped: {r:?}")));
            }
            received = socket.recv_from(&mut buf) => {
                let (n, from) = received?;
                let reply = {
                    let records = current.read().unwrap_or_else(std::sync::PoisonError::into_inner);
                    answer(&buf[..n], &records, &config.domain)
                };
                if let Some(reply) = reply {
                    // A client that went away is not this server's failure.
                    let _ = socket.send_to(&reply, from).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Query;

    fn ask(name: &str, records: &Records) -> Message {
        let mut q = Message::new();
        q.set_id(7)
            .add_query(Query::query(name.parse().expect("name"), RecordType::A));
        let reply = answer(&q.to_vec().expect("query"), records, "cluster.local").expect("reply");
        Message::from_vec(&reply).expect("decodes")
    }

    #[test]
    fn services_resolve_and_other_names_do_not() {
        let mut services = std::collections::BTreeMap::new();
        let svc: skiff_proto::api::Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}
        }))
        .expect("service");
        services.insert("web".to_string(), Object::Service(svc));
        let records = records(&services, &Default::default(), "cluster.local");
        let r = ask("Web.shop.svc.cluster.local.", &records);
        assert_eq!(r.id(), 7);
        assert_eq!(r.response_code(), ResponseCode::NoError);
        let a: Vec<String> = r.answers().iter().map(|a| a.data().to_string()).collect();
        assert_eq!(a, ["10.96.0.10"]);
        assert_eq!(
            ask("db.shop.svc.cluster.local.", &records).response_code(),
            ResponseCode::NXDomain
        );
        assert_eq!(
            ask("example.com.", &records).response_code(),
            ResponseCode::Refused
        );
    }

    /// A headless Service answers with its ready endpoints, and a named endpoint (a
    /// StatefulSet's pod) under its own name.
    #[test]
    fn headless_services_name_their_pods() {
        let svc: skiff_proto::api::Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db", "namespace": "shop"},
            "spec": {"clusterIP": "None", "ports": [{"port": 5432}]}
        }))
        .expect("service");
        let slice: skiff_proto::api::EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-x", "namespace": "shop",
                         "labels": {"kubernetes.io/service-name": "db"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.244.1.5"], "hostname": "db-0", "conditions": {"ready": true}},
                {"addresses": ["10.244.2.7"], "hostname": "db-1", "conditions": {"ready": true}},
                {"addresses": ["10.244.2.9"], "hostname": "db-2", "conditions": {"ready": false}}
            ]
        }))
        .expect("slice");
        let services = std::collections::BTreeMap::from([("db".to_string(), Object::Service(svc))]);
        let slices =
            std::collections::BTreeMap::from([("db-x".to_string(), Object::EndpointSlice(slice))]);
        let records = records(&services, &slices, "cluster.local");
        let answers = |name: &str| -> Vec<String> {
            ask(name, &records)
                .answers()
                .iter()
                .map(|a| a.data().to_string())
                .collect()
        };
        assert_eq!(
            answers("db.shop.svc.cluster.local."),
            ["10.244.1.5", "10.244.2.7"]
        );
        assert_eq!(answers("db-1.db.shop.svc.cluster.local."), ["10.244.2.7"]);
        assert_eq!(
            ask("db-2.db.shop.svc.cluster.local.", &records).response_code(),
            ResponseCode::NXDomain,
            "not ready"
        );
    }
}
