//! Service rules, as kube-proxy's iptables mode programs them: each Service port's cluster
//! IP (and node port) is DNATed to one of its ready endpoints, chosen at random, in the
//! node's network namespace; a Service without ready endpoints refuses connections at once.
//!
//! ```text
//!  informers (Services, EndpointSlices) ─► desired rules (pure: `rules`) ─► iptables-restore
//!  nat  PREROUTING, OUTPUT ─► SKIFF-SERVICES ─► -d clusterIP -p tcp --dport P ─► SKIFF-SVC-…
//!                                └─ dst-type LOCAL ─► SKIFF-NODEPORTS ─► --dport N ─► SKIFF-SVC-…
//!       SKIFF-SVC-… ─► statistic random 1/n, 1/(n-1) … ─► SKIFF-SEP-… ─► mark, DNAT ip:port
//!       POSTROUTING ─► SKIFF-POSTROUTING: marked ─► MASQUERADE
//!  filter OUTPUT, FORWARD ─► SKIFF-FILTER ─► no ready endpoint ─► REJECT
//! ```
//!
//! Every Service connection is masqueraded (kube-proxy's `--masquerade-all`): a reply from a
//! pod on the same bridge then comes back through the node, where the DNAT is undone,
//! whatever the bridge's netfilter settings. Rules are written whole, in one
//! `iptables-restore --noflush` of Skiff's own chains (the built-in chains only jump to
//! them), at most every [`MIN_SYNC`], and only when they change. When an endpoint leaves,
//! the UDP conntrack entries that still point at it are deleted (`conntrack -D`), so
//! datagrams stop going to it; TCP connections to it end with it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use skiff_proto::api::Object;
use skiff_proto::api::service::{
    EndpointSlice, SERVICE_NAME_LABEL, TRIGGER_TIME_ANNOTATION, trigger_age,
};
use skiff_proto::client::ClusterClient;
use skiff_proto::metrics::prometheus_client::metrics::gauge::Gauge;
use skiff_proto::metrics::prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use tokio_util::sync::CancellationToken;

/// The shortest time between two syncs (kube-proxy's `--iptables-min-sync-period`).
pub const MIN_SYNC: Duration = Duration::from_millis(100);
/// The mark of connections to masquerade.
const MASQ_MARK: &str = "0x4000/0x4000";

/// Where and how the rules are written.
#[derive(Debug, Clone, Default)]
pub struct ProxyConfig {
    /// The node's network namespace, when it is not this process's.
    pub netns: Option<PathBuf>,
    /// Where the proxy counts (the agent's `/metrics`).
    pub metrics: ProxyMetrics,
    /// Told of every sync and every programming latency as they are counted (benchmarks read
    /// exact percentiles from it).
    pub observer: Option<tokio::sync::mpsc::UnboundedSender<ProxyEvent>>,
}

/// What the proxy counts.
#[derive(Debug, Clone)]
pub struct ProxyMetrics {
    /// Network programming latency, as kube-proxy's: from the trigger time an EndpointSlice
    /// carries (when the change it reflects was seen) to rules reflecting it in place.
    pub programming: Histogram,
    /// How long writing the rules took (`iptables-restore`).
    pub sync: Histogram,
    /// Service ports and ready endpoints the rules program.
    pub service_ports: Gauge,
    pub endpoints: Gauge,
}

impl Default for ProxyMetrics {
    fn default() -> Self {
        // 1 ms to about a minute.
        let buckets = || exponential_buckets(0.001, 2.0, 17);
        ProxyMetrics {
            programming: Histogram::new(buckets()),
            sync: Histogram::new(buckets()),
            service_ports: Gauge::default(),
            endpoints: Gauge::default(),
        }
    }
}

/// What the proxy tells its observer.
#[derive(Debug, Clone, PartialEq)]
pub enum ProxyEvent {
    /// The rules are in place for `ports` Service ports with `endpoints` ready endpoints:
    /// written (`wrote`), which took `took`, or found unchanged.
    Synced {
        took: Duration,
        wrote: bool,
        ports: usize,
        endpoints: usize,
    },
    /// One EndpointSlice change is reflected in the rules, this long after its trigger time.
    Programmed(Duration),
}

/// One Service port as the rules need it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServicePort {
    /// `namespace/name:port-name`, for comments and chain names.
    pub id: String,
    pub cluster_ip: String,
    pub protocol: String,
    pub port: i32,
    pub node_port: Option<i32>,
    /// Ready endpoints: (address, port).
    pub endpoints: Vec<(String, i32)>,
}

/// The Service ports to program, from the Services and their EndpointSlices: ready
/// endpoints only, matched to the Service port by name (and protocol).
pub fn service_ports(
    services: &BTreeMap<String, Object>,
    slices: &BTreeMap<String, Object>,
) -> Vec<ServicePort> {
    let mut by_service: BTreeMap<(String, String), Vec<&EndpointSlice>> = BTreeMap::new();
    for o in slices.values() {
        if let Object::EndpointSlice(s) = o
            && let Some(svc) = s.metadata.labels.get(SERVICE_NAME_LABEL)
            && s.address_type == "IPv4"
        {
            by_service
                .entry((s.metadata.namespace.clone(), svc.clone()))
                .or_default()
                .push(s);
        }
    }
    let mut out = Vec::new();
    for o in services.values() {
        let Object::Service(svc) = o else { continue };
        if svc.is_headless() || svc.spec.cluster_ip.is_empty() {
            continue;
        }
        let key = (svc.metadata.namespace.clone(), svc.metadata.name.clone());
        let slices = by_service.get(&key).map(Vec::as_slice).unwrap_or_default();
        for p in &svc.spec.ports {
            out.push(ServicePort {
                id: format!("{}/{}:{}", key.0, key.1, p.name),
                cluster_ip: svc.spec.cluster_ip.clone(),
                protocol: if p.protocol.is_empty() {
                    "TCP".into()
                } else {
                    p.protocol.clone()
                },
                port: p.port,
                node_port: p.node_port.filter(|_| svc.is_node_port()),
                endpoints: endpoints_of(p, slices),
            });
        }
    }
    out
}

fn endpoints_of(
    port: &skiff_proto::api::service::ServicePort,
    slices: &[&EndpointSlice],
) -> Vec<(String, i32)> {
    let mut out = BTreeSet::new();
    for s in slices {
        let Some(p) = s.ports.iter().find(|sp| {
            sp.name.as_deref().unwrap_or_default() == port.name
                && sp.protocol.as_deref().unwrap_or("TCP")
                    == if port.protocol.is_empty() {
                        "TCP"
                    } else {
                        &port.protocol
                    }
        }) else {
            continue;
        };
        let Some(target) = p.port else { continue };
        for e in &s.endpoints {
            // Ready: serving and not terminating (an unset condition counts as ready, as
            // Kubernetes reads it).
            if e.conditions.ready.unwrap_or(true) {
                out.extend(e.addresses.iter().map(|a| (a.clone(), target)));
            }
        }
    }
    out.into_iter().collect()
}

/// A chain name from `what`: a prefix and 16 hex digits of its hash (iptables allows 28
/// characters).
fn chain(prefix: &str, what: &str) -> String {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    what.hash(&mut h);
    format!("{prefix}{:016X}", h.finish())
}

/// What the last successful sync wrote: the top-level rules, and each per-Service chain's
/// rules by chain name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    top: String,
    chains: BTreeMap<String, String>,
}

impl Written {
    /// Per-Service chains found in the node's rules (an earlier agent's), their rules
    /// unknown: rewritten if still wanted, removed if not.
    pub fn found(names: impl IntoIterator<Item = String>) -> Written {
        Written {
            top: String::new(),
            chains: names.into_iter().map(|n| (n, "\0unknown".into())).collect(),
        }
    }

    /// The per-Service chains written.
    pub fn chains(&self) -> impl Iterator<Item = &str> {
        self.chains.keys().map(String::as_str)
    }
}

/// The rules for `ports` as `iptables-restore` input (nat and filter tables), given what
/// the last sync `written`: the top-level chains whole, and only the per-Service chains that
/// are new or changed; those no longer wanted are emptied and removed. Unchanged chains are
/// left as they are (kube-proxy's minimized restores), so an endpoint that changes costs its
/// Service's chains, not every Service's. `None` when nothing differs.
pub fn rules(ports: &[ServicePort], written: &Written) -> (Option<String>, Written) {
    let mut chains: BTreeMap<String, String> = BTreeMap::new();
    let mut nat = String::new();
    let mut filter = String::new();
    for p in ports {
        let proto = p.protocol.to_ascii_lowercase();
        if p.endpoints.is_empty() {
            let _ = writeln!(
                filter,
                "-A SKIFF-FILTER -d {}/32 -p {proto} -m {proto} --dport {} -m comment --comment \"{} has no endpoints\" -j REJECT",
                p.cluster_ip, p.port, p.id
            );
            continue;
        }
        let svc = chain("SKIFF-SVC-", &p.id);
        let _ = writeln!(
            nat,
            "-A SKIFF-SERVICES -d {}/32 -p {proto} -m {proto} --dport {} -m comment --comment \"{}\" -j {svc}",
            p.cluster_ip, p.port, p.id
        );
        if let Some(np) = p.node_port {
            let _ = writeln!(
                nat,
                "-A SKIFF-NODEPORTS -p {proto} -m {proto} --dport {np} -m comment --comment \"{}\" -j {svc}",
                p.id
            );
        }
        let n = p.endpoints.len();
        let mut body = String::new();
        for (i, (ip, port)) in p.endpoints.iter().enumerate() {
            let sep = chain("SKIFF-SEP-", &format!("{}/{ip}:{port}", p.id));
            let left = n - i;
            if left > 1 {
                let _ = writeln!(
                    body,
                    "-A {svc} -m statistic --mode random --probability {:.10} -j {sep}",
                    1.0 / left as f64
                );
            } else {
                let _ = writeln!(body, "-A {svc} -j {sep}");
            }
            chains.insert(
                sep.clone(),
                format!(
                    "-A {sep} -j SKIFF-MARK-MASQ\n-A {sep} -p {proto} -m {proto} -j DNAT --to-destination {ip}:{port}\n"
                ),
            );
        }
        chains.insert(svc, body);
    }
    nat.push_str("-A SKIFF-SERVICES -m addrtype --dst-type LOCAL -j SKIFF-NODEPORTS\n");
    let _ = writeln!(
        nat,
        "-A SKIFF-MARK-MASQ -j MARK --set-xmark {MASQ_MARK}\n\
         -A SKIFF-POSTROUTING -m mark --mark {MASQ_MARK} -j MASQUERADE"
    );
    let top = format!("{nat}\0{filter}");
    let changed: Vec<(&String, &String)> = chains
        .iter()
        .filter(|(name, body)| written.chains.get(*name) != Some(*body))
        .collect();
    let gone: Vec<&String> = written
        .chains
        .keys()
        .filter(|name| !chains.contains_key(*name))
        .collect();
    if changed.is_empty() && gone.is_empty() && written.top == top {
        return (None, written.clone());
    }
    // Declaring a chain (`:NAME`) empties it: the top-level chains are always rewritten, a
    // per-Service chain only when it changed (or goes).
    let mut text = String::from("*nat\n");
    for base in [
        "SKIFF-SERVICES",
        "SKIFF-NODEPORTS",
        "SKIFF-POSTROUTING",
        "SKIFF-MARK-MASQ",
    ] {
        let _ = writeln!(text, ":{base} - [0:0]");
    }
    for name in changed.iter().map(|(n, _)| *n).chain(gone.iter().copied()) {
        let _ = writeln!(text, ":{name} - [0:0]");
    }
    for (_, body) in &changed {
        text.push_str(body);
    }
    text.push_str(&nat);
    for name in &gone {
        let _ = writeln!(text, "-X {name}");
    }
    text.push_str("COMMIT\n*filter\n:SKIFF-FILTER - [0:0]\n");
    text.push_str(&filter);
    text.push_str("COMMIT\n");
    (Some(text), Written { top, chains })
}

/// The jumps from the built-in chains to Skiff's, added once (the syncs only rewrite
/// Skiff's chains).
const JUMPS: [(&str, &str, &str); 5] = [
    ("nat", "PREROUTING", "SKIFF-SERVICES"),
    ("nat", "OUTPUT", "SKIFF-SERVICES"),
    ("nat", "POSTROUTING", "SKIFF-POSTROUTING"),
    ("filter", "OUTPUT", "SKIFF-FILTER"),
    ("filter", "FORWARD", "SKIFF-FILTER"),
];

/// `program args` in the node's network namespace (through `nsenter`), with `input` on its
/// standard input.
pub(crate) async fn run_in(
    netns: Option<&Path>,
    program: &str,
    args: &[&str],
    input: Option<&str>,
) -> std::io::Result<std::process::Output> {
    use tokio::io::AsyncWriteExt as _;
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = tokio::process::Command::new("nsenter");
            c.arg(format!("--net={}", ns.display()))
                .arg("--")
                .arg(program);
            c
        }
        None => tokio::process::Command::new(program),
    };
    cmd.args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    if let Some(text) = input
        && let Some(mut stdin) = child.stdin.take()
    {
        stdin.write_all(text.as_bytes()).await?;
    }
    drop(child.stdin.take());
    child.wait_with_output().await
}

/// Creates Skiff's chains (`chains`: `iptables-restore` input that declares them) and adds
/// each of `jumps` (table, built-in chain, Skiff's chain) unless it is there.
pub(crate) async fn ensure_jumps(
    netns: Option<&Path>,
    chains: &str,
    jumps: &[(&str, &str, &str)],
) -> std::io::Result<()> {
    // The chains must exist before a jump to them.
    restore(netns, chains).await?;
    for &(table, from, to) in jumps {
        let check = run_in(
            netns,
            "iptables",
            &["-w", "-t", table, "-C", from, "-j", to],
            None,
        )
        .await?;
        if !check.status.success() {
            let add = run_in(
                netns,
                "iptables",
                &["-w", "-t", table, "-I", from, "-j", to],
                None,
            )
            .await?;
            if !add.status.success() {
                return Err(std::io::Error::other(format!(
                    "iptables -t {table} -I {from} -j {to}: {}",
                    String::from_utf8_lossy(&add.stderr).trim()
                )));
            }
        }
    }
    Ok(())
}

pub(crate) async fn restore(netns: Option<&Path>, text: &str) -> std::io::Result<()> {
    let out = run_in(netns, "iptables-restore", &["-w", "--noflush"], Some(text)).await?;
    if out.status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "iptables-restore: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// The per-Service chains (`SKIFF-SVC-…`, `SKIFF-SEP-…`) in the node's nat table now.
async fn existing_chains(netns: Option<&Path>) -> Vec<String> {
    match run_in(netns, "iptables", &["-w", "-t", "nat", "-S"], None).await {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix("-N "))
            .filter(|c| c.starts_with("SKIFF-SVC-") || c.starts_with("SKIFF-SEP-"))
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// Runs the proxy until `cancel`: follows Services and EndpointSlices and keeps the rules
/// as they say. Returns an error when the rules cannot be written at all (no iptables, no
/// permission), so the agent reports it.
pub async fn run(
    client: ClusterClient,
    config: ProxyConfig,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    let netns = config.netns.clone();
    let (empty, _) = rules(&[], &Written::default());
    let empty = empty.expect("invariant: a first sync writes the top-level chains");
    ensure_jumps(netns.as_deref(), &empty, &JUMPS).await?;
    let started = Instant::now();
    let (followed, mut followers) = crate::services::follow(&client);
    let changed = followed.changed.clone();
    // A first sync even when there is nothing to follow yet (no Service, no change to wait
    // for).
    changed.notify_one();
    // The per-Service chains already there (an earlier agent's) are replaced or removed.
    let mut written = Written::found(existing_chains(netns.as_deref()).await);
    let mut before: BTreeMap<String, Vec<(String, i32)>> = BTreeMap::new();
    // Each slice's trigger time as last reflected in the rules.
    let mut triggers: HashMap<String, String> = HashMap::new();
    let mut last = Instant::now() - MIN_SYNC;
    let tell = |event: ProxyEvent| {
        if let Some(o) = &config.observer {
            let _ = o.send(event);
        }
    };
    loop {
        tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            () = changed.notified() => {}
            Some(done) = followers.join_next() => {
                let (kind, r) = done.map_err(std::io::Error::other)?;
                return Err(std::io::Error::other(format!("the {kind} informer stopped: {r:?}")));
            }
        }
        let wait = MIN_SYNC.saturating_sub(last.elapsed());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        last = Instant::now();
        let (services, slices) = followed.snapshot();
        let ports = service_ports(&services, &slices);
        let (text, next) = rules(&ports, &written);
        let endpoints: usize = ports.iter().map(|p| p.endpoints.len()).sum();
        let began = Instant::now();
        let wrote = text.is_some();
        if let Some(text) = text {
            // Failed, nothing of a table was changed (each is one commit), and `written`
            // still says what is there.
            if let Err(e) = restore(netns.as_deref(), &text).await {
                tracing::warn!(error = %e, "writing the Service rules failed; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
                changed.notify_one();
                continue;
            }
            let took = began.elapsed();
            config.metrics.sync.observe(took.as_secs_f64());
            tracing::debug!(
                ports = ports.len(),
                endpoints,
                ?took,
                "Service rules written"
            );
            written = next;
        }
        let took = began.elapsed();
        config.metrics.service_ports.set(ports.len() as i64);
        config.metrics.endpoints.set(endpoints as i64);
        // Changes made before this proxy started are not its latency.
        let uptime = started.elapsed();
        let mut reflected = HashMap::with_capacity(slices.len());
        for (key, o) in &slices {
            let Some(t) = o.metadata().annotations.get(TRIGGER_TIME_ANNOTATION) else {
                continue;
            };
            if triggers.get(key) != Some(t)
                && let Some(age) = trigger_age(t).filter(|a| *a <= uptime)
            {
                config.metrics.programming.observe(age.as_secs_f64());
                tell(ProxyEvent::Programmed(age));
            }
            reflected.insert(key.clone(), t.clone());
        }
        triggers = reflected;
        // Last: the sync's latencies are all told when it is.
        tell(ProxyEvent::Synced {
            took,
            wrote,
            ports: ports.len(),
            endpoints,
        });
        let after: BTreeMap<String, Vec<(String, i32)>> = ports
            .iter()
            .filter(|p| p.protocol == "UDP")
            .map(|p| (p.id.clone(), p.endpoints.clone()))
            .collect();
        for (id, old) in &before {
            let kept = after.get(id).cloned().unwrap_or_default();
            for (ip, _) in old.iter().filter(|e| !kept.contains(e)) {
                // Datagrams of a flow already DNATed to the endpoint would keep going there.
                let _ = run_in(
                    netns.as_deref(),
                    "conntrack",
                    &["-D", "-p", "udp", "--reply-src", ip],
                    None,
                )
                .await;
            }
        }
        before = after;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(id: &str, endpoints: &[(&str, i32)]) -> ServicePort {
        ServicePort {
            id: id.into(),
            cluster_ip: "10.96.0.10".into(),
            protocol: "TCP".into(),
            port: 80,
            node_port: Some(30080),
            endpoints: endpoints.iter().map(|(a, p)| (a.to_string(), *p)).collect(),
        }
    }

    #[test]
    fn each_endpoint_is_chosen_with_equal_chance_and_gone_chains_are_removed() {
        let three = port(
            "default/web:http",
            &[
                ("10.244.0.2", 8080),
                ("10.244.0.3", 8080),
                ("10.244.0.4", 8080),
            ],
        );
        let (text, written) = rules(std::slice::from_ref(&three), &Written::default());
        let text = text.expect("a first write");
        assert_eq!(
            written.chains().count(),
            4,
            "one service chain, three endpoint chains"
        );
        assert!(text.contains("--probability 0.3333333333"), "{text}");
        assert!(text.contains("--probability 0.5000000000"), "{text}");
        assert_eq!(text.matches("-j DNAT --to-destination").count(), 3);
        assert!(text.contains("--dport 30080"), "{text}");
        assert_eq!(
            rules(&[three], &written).0,
            None,
            "unchanged: nothing to write"
        );
        // The Service loses its endpoints: a REJECT, and its chains emptied and removed.
        let (text, left) = rules(&[port("default/web:http", &[])], &written);
        let text = text.expect("changed");
        assert_eq!(left.chains().count(), 0);
        assert!(text.contains("-j REJECT"), "{text}");
        for c in written.chains() {
            assert!(
                text.contains(&format!(":{c} - [0:0]")),
                "{c} emptied in {text}"
            );
            assert!(text.contains(&format!("-X {c}")), "{c} removed in {text}");
        }
    }

    /// An endpoint change rewrites its Service's chains and the top-level ones, and leaves
    /// every other Service's chains as they are (still jumped to).
    #[test]
    fn an_endpoint_change_rewrites_only_its_services_chains() {
        let a = port("default/a:http", &[("10.244.0.2", 8080)]);
        let b = port(
            "default/b:http",
            &[("10.244.0.3", 8080), ("10.244.0.4", 8080)],
        );
        let (_, written) = rules(&[a.clone(), b], &Written::default());
        let b = port(
            "default/b:http",
            &[("10.244.0.3", 8080), ("10.244.0.5", 8080)],
        );
        let text = rules(&[a, b], &written).0.expect("changed");
        let svc_a = chain("SKIFF-SVC-", "default/a:http");
        assert!(!text.contains(&format!(":{svc_a} ")), "{text}");
        assert!(text.contains(&format!("-j {svc_a}")), "{text}");
        let svc_b = chain("SKIFF-SVC-", "default/b:http");
        assert!(text.contains(&format!(":{svc_b} ")), "{text}");
        let kept = chain("SKIFF-SEP-", "default/b:http/10.244.0.3:8080");
        assert!(!text.contains(&format!(":{kept} ")), "{text}");
        let added = chain("SKIFF-SEP-", "default/b:http/10.244.0.5:8080");
        assert!(text.contains(&format!(":{added} ")), "{text}");
        let gone = chain("SKIFF-SEP-", "default/b:http/10.244.0.4:8080");
        assert!(text.contains(&format!("-X {gone}")), "{text}");
        // Found chains of an earlier agent go unless wanted.
        let stale = Written::found(["SKIFF-SEP-0000000000000000".to_string()]);
        let text = rules(&[], &stale).0.expect("a first write");
        assert!(text.contains("-X SKIFF-SEP-0000000000000000"), "{text}");
    }
}
