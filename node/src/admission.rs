//! Node-side admission: the kubelet's last check before it runs a pod. The scheduler already
//! checked the same things, but a pod can be bound by hand, or two schedulers can race, so the
//! node refuses what does not fit rather than overcommit. A refused pod ends `Failed` with the
//! kubelet's reasons: `OutOfcpu`, `OutOfmemory`, `OutOfephemeral-storage`, `OutOfpods`,
//! `NodePorts` (a host port in use), `NodeAffinity`, `Taint`.
//!
//! Like the kubelet, only `NoExecute` taints refuse a pod here: `NoSchedule` keeps the
//! scheduler away but lets a pod bound directly to the node run.

use skiff_proto::api::{Node, Pod, TaintEffect};

use crate::engine::Rejection;

/// What the node can give, in milli-CPU, bytes and pod slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocatable {
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    pub ephemeral_storage_bytes: i64,
    pub pods: i64,
}

impl Allocatable {
    /// From the Node's `status.allocatable` (zero where absent).
    pub fn of(node: &Node) -> Allocatable {
        let get = |r: &str| {
            node.status
                .as_ref()
                .and_then(|s| s.allocatable.get(r))
                .copied()
        };
        Allocatable {
            cpu_milli: get("cpu").map_or(0, |q| q.milli_value()),
            memory_bytes: get("memory").map_or(0, |q| q.value()),
            ephemeral_storage_bytes: get("ephemeral-storage").map_or(0, |q| q.value()),
            pods: get("pods").map_or(0, |q| q.value()),
        }
    }
}

/// Whether a refusal may be lifted by a newer version of the Node.
pub fn depends_on_node(r: &Rejection) -> bool {
    r.reason == "NodeAffinity" || r.reason == "Taint"
}

/// Decides whether `pod` may run on `node` next to the pods already admitted (and not
/// finished).
pub fn admit<'a>(
    node: &Node,
    admitted: impl IntoIterator<Item = &'a Pod>,
    pod: &Pod,
) -> Result<(), Rejection> {
    let alloc = Allocatable::of(node);
    let (mut cpu, mut mem, mut eph, mut count) = (0i64, 0i64, 0i64, 0i64);
    let mut admitted_ports = Vec::new();
    for p in admitted {
        admitted_ports.extend(host_ports(p));
        cpu += p.effective_request("cpu").milli_value();
        mem += p.effective_request("memory").value();
        eph += p.effective_request("ephemeral-storage").value();
        count += 1;
    }
    if count + 1 > alloc.pods {
        return Err(out_of("pods", 1, count, alloc.pods));
    }
    let want_cpu = pod.effective_request("cpu").milli_value();
    if want_cpu > 0 && cpu + want_cpu > alloc.cpu_milli {
        return Err(out_of("cpu", want_cpu, cpu, alloc.cpu_milli));
    }
    let want_mem = pod.effective_request("memory").value();
    if want_mem > 0 && mem + want_mem > alloc.memory_bytes {
        return Err(out_of("memory", want_mem, mem, alloc.memory_bytes));
    }
    let want_eph = pod.effective_request("ephemeral-storage").value();
    if want_eph > 0 && eph + want_eph > alloc.ephemeral_storage_bytes {
        return Err(out_of(
            "ephemeral-storage",
            want_eph,
            eph,
            alloc.ephemeral_storage_bytes,
        ));
    }
    if let Some((protocol, port)) = host_port_conflict(admitted_ports, pod) {
        return Err(Rejection {
            reason: "NodePorts".into(),
            message: format!(
                "Predicate NodePorts failed: node(s) didn't have free ports for the requested \
                 pod ports ({protocol} {port} is in use)"
            ),
        });
    }
    node_allows(node, pod)
}

/// One host port a pod holds: protocol, host IP (empty: every address) and port.
type HostPort = (String, String, i32);

/// The host ports `pod` holds (a host-network pod holds its container ports), with an
/// every-address host IP as empty.
fn host_ports(pod: &Pod) -> Vec<HostPort> {
    crate::runtime::HostPort::held_by(pod)
        .into_iter()
        .map(|p| {
            let ip = if p.host_ip == "0.0.0.0" || p.host_ip == "::" {
                String::new()
            } else {
                p.host_ip
            };
            (p.protocol, ip, p.host_port)
        })
        .collect()
}

/// A host port of `pod` that an admitted pod holds already (the same protocol and port, on
/// the same address or where either means every address).
fn host_port_conflict(held: Vec<HostPort>, pod: &Pod) -> Option<(String, i32)> {
    host_ports(pod)
        .into_iter()
        .find_map(|(protocol, ip, port)| {
            held.iter()
                .any(|(p, i, n)| {
                    *p == protocol && *n == port && (i.is_empty() || ip.is_empty() || *i == ip)
                })
                .then_some((protocol, port))
        })
}

/// The checks that depend only on the Node's labels and taints (`NodeAffinity`, `Taint`):
/// what a newer version of the Node can change.
pub fn node_allows(node: &Node, pod: &Pod) -> Result<(), Rejection> {
    if !pod.selects_node(node) {
        return Err(Rejection {
            reason: "NodeAffinity".into(),
            message:
                "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
                    .into(),
        });
    }
    if let Some(t) = node
        .spec
        .taints
        .iter()
        .filter(|t| t.effect == TaintEffect::NoExecute)
        .find(|t| !pod.spec.tolerations.iter().any(|tol| tol.tolerates(t)))
    {
        return Err(Rejection {
            reason: "Taint".into(),
            message: format!(
                "Predicate TaintToleration failed: node has an untolerated taint {{{}: {}}}",
                t.key, t.value
            ),
        });
    }
    Ok(())
}

fn out_of(resource: &str, requested: i64, used: i64, capacity: i64) -> Rejection {
    Rejection {
        reason: format!("OutOf{resource}"),
        message: format!(
            "Pod was rejected: Node didn't have enough resource: {resource}, requested: \
             {requested}, used: {used}, capacity: {capacity}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_proto::api::{Kind, Object};

    fn node(json: serde_json::Value) -> Node {
        match Object::from_json(Kind::Node, json.to_string().as_bytes()).unwrap() {
            Object::Node(n) => n,
            _ => unreachable!(),
        }
    }

    fn pod(json: serde_json::Value) -> Pod {
        match Object::from_json(Kind::Pod, json.to_string().as_bytes()).unwrap() {
            Object::Pod(p) => p,
            _ => unreachable!(),
        }
    }

    fn small_node() -> Node {
        node(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"disk": "ssd", "zone": "a"}},
            "spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoExecute"},
                                {"key": "soft", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "2", "memory": "1Gi", "ephemeral-storage": "10Gi", "pods": "3"}}
        }))
    }

    fn cpu_pod(cpu: &str, extra: serde_json::Value) -> Pod {
        let mut spec = serde_json::json!({
            "containers": [{"name": "c", "image": "i",
                            "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}],
            "tolerations": [{"key": "dedicated", "operator": "Exists"}]
        });
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        pod(serde_json::json!({"metadata": {"name": "p"}, "spec": spec}))
    }

    #[test]
    fn resources_are_counted_against_allocatable() {
        let n = small_node();
        let a = cpu_pod("1500m", serde_json::json!({}));
        assert_eq!(admit(&n, [], &a), Ok(()));
        let r = admit(&n, [&a], &cpu_pod("600m", serde_json::json!({}))).unwrap_err();
        assert_eq!(r.reason, "OutOfcpu");
        assert!(
            r.message
                .contains("requested: 600, used: 1500, capacity: 2000"),
            "{}",
            r.message
        );
        let big = cpu_pod("100m", serde_json::json!({}));
        let mut big = big;
        big.spec.containers[0]
            .resources
            .requests
            .insert("memory".into(), "2Gi".parse().unwrap());
        assert_eq!(admit(&n, [], &big).unwrap_err().reason, "OutOfmemory");
        let disk = |q: &str| {
            let mut p = cpu_pod("1m", serde_json::json!({}));
            p.spec.containers[0]
                .resources
                .requests
                .insert("ephemeral-storage".into(), q.parse().unwrap());
            p
        };
        let six = disk("6Gi");
        assert_eq!(admit(&n, [], &six), Ok(()));
        let r = admit(&n, [&six], &disk("5Gi")).unwrap_err();
        assert_eq!(r.reason, "OutOfephemeral-storage");
    }

    /// A host port is held by one pod at a time, per protocol and address; a host-network pod
    /// holds its container ports.
    #[test]
    fn host_ports_are_held_once() {
        let n = small_node();
        let port = |p: serde_json::Value| {
            cpu_pod(
                "1m",
                serde_json::json!({"containers": [{"name": "c", "image": "i", "ports": [p]}],
                                   "tolerations": [{"key": "dedicated", "operator": "Exists"}]}),
            )
        };
        let web = port(serde_json::json!({"containerPort": 80, "hostPort": 8080}));
        let r = admit(
            &n,
            [&web],
            &port(serde_json::json!({"containerPort": 81, "hostPort": 8080})),
        )
        .unwrap_err();
        assert_eq!(r.reason, "NodePorts");
        let udp =
            port(serde_json::json!({"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}));
        assert_eq!(admit(&n, [&web], &udp), Ok(()));
        let a =
            port(serde_json::json!({"containerPort": 80, "hostPort": 9090, "hostIP": "10.0.0.1"}));
        let b =
            port(serde_json::json!({"containerPort": 80, "hostPort": 9090, "hostIP": "10.0.0.2"}));
        let any = port(serde_json::json!({"containerPort": 80, "hostPort": 9090}));
        assert_eq!(admit(&n, [&a], &b), Ok(()));
        assert_eq!(admit(&n, [&a], &any).unwrap_err().reason, "NodePorts");
        let mut host = port(serde_json::json!({"containerPort": 8080}));
        host.spec.host_network = Some(true);
        assert_eq!(admit(&n, [&web], &host).unwrap_err().reason, "NodePorts");
        let small = cpu_pod("1m", serde_json::json!({}));
        let r = admit(&n, [&small, &small, &small], &small).unwrap_err();
        assert_eq!(r.reason, "OutOfpods");
    }

    #[test]
    fn selectors_affinity_and_noexecute_taints() {
        let n = small_node();
        let sel = cpu_pod("1m", serde_json::json!({"nodeSelector": {"disk": "hdd"}}));
        assert_eq!(admit(&n, [], &sel).unwrap_err().reason, "NodeAffinity");
        let aff = cpu_pod(
            "1m",
            serde_json::json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                                       {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}}),
        );
        assert_eq!(admit(&n, [], &aff), Ok(()));
        let mut untolerant = cpu_pod("1m", serde_json::json!({}));
        untolerant.spec.tolerations.clear();
        let r = admit(&n, [], &untolerant).unwrap_err();
        assert_eq!(r.reason, "Taint");
        assert!(r.message.contains("dedicated"), "{}", r.message);
    }
}
