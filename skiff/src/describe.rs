//! `skiff describe pod|node|deployment|replicaset NAME`: one object in full, as
//! `kubectl describe` prints it, with the events recorded about it (Scheduled, Pulled,
//! Created, Started, Killing, BackOff, FailedScheduling, ScalingReplicaSet, …).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use skiff_proto::api::pod::{ContainerState, ContainerStatus};
use skiff_proto::api::{
    ConditionStatus, Container, Deployment, Event, Kind, Node, Object, Pod, PodPhase,
    PodTemplateSpec, ReplicaSet, Time, WorkloadCondition,
};
use skiff_proto::client::ListParams;
use skiff_proto::quantity::Quantity;

use crate::apply::{pod_status, runtime, selector_text, since};
use crate::config::Endpoints;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// `pod`, `node`, `deployment` or `replicaset` (po, no, deploy, rs); `KIND/NAME` also
    /// names the object.
    kind: String,
    /// The object's name (unless given as `KIND/NAME`).
    name: Option<String>,
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
    #[command(flatten)]
    endpoints: Endpoints,
}

pub fn run(args: &Args) -> Result<ExitCode> {
    let (kind_word, name) = match (args.kind.split_once('/'), &args.name) {
        (Some((kind, name)), None) => (kind, name.to_owned()),
        (None, Some(name)) => (args.kind.as_str(), name.clone()),
        _ => bail!("describe takes KIND NAME or KIND/NAME"),
    };
    let kind = Kind::from_cli(kind_word)
        .filter(|k| {
            matches!(
                k,
                Kind::Pod | Kind::Node | Kind::Deployment | Kind::ReplicaSet
            )
        })
        .with_context(|| {
            format!("cannot describe {kind_word:?}: try pod, node, deployment or replicaset")
        })?;
    let store = args.endpoints.resolve()?;
    runtime()?.block_on(async {
        let api = store.connect()?;
        let ns = if kind.is_namespaced() {
            args.namespace.as_str()
        } else {
            ""
        };
        let Some(object) = api.get(kind, ns, &name).await? else {
            eprintln!("Error: {} \"{name}\" not found", kind.qualified_resource());
            return Ok(ExitCode::FAILURE);
        };
        // Events about a node live in `default`, as the kubelet writes them.
        let events_ns = if kind.is_namespaced() { ns } else { "default" };
        let fields = format!(
            "involvedObject.kind={},involvedObject.name={name}",
            kind.name(),
        );
        let (events, _) = api
            .list(
                Kind::Event,
                &ListParams::default().namespace(events_ns).fields(&fields),
            )
            .await?;
        let uid = &object.metadata().uid;
        // Events of an earlier object of the same name are not this one's.
        let mut events: Vec<Event> = events
            .into_iter()
            .filter_map(|o| match o {
                Object::Event(e)
                    if e.involved_object.uid.is_empty() || &e.involved_object.uid == uid =>
                {
                    Some(e)
                }
                _ => None,
            })
            .collect();
        events.sort_by_key(Event::last_seen);
        let text = match &object {
            Object::Pod(p) => describe_pod(p, &events),
            Object::Deployment(d) => describe_deployment(d, &events),
            Object::ReplicaSet(rs) => {
                let (pods, _) = api
                    .list(Kind::Pod, &ListParams::default().namespace(ns))
                    .await?;
                let owned: Vec<Pod> = pods
                    .into_iter()
                    .filter_map(|o| match o {
                        Object::Pod(p)
                            if p.metadata.owner_references.iter().any(|r| {
                                r.controller == Some(true) && r.uid == rs.metadata.uid
                            }) =>
                        {
                            Some(p)
                        }
                        _ => None,
                    })
                    .collect();
                describe_replica_set(rs, &owned, &events)
            }
            Object::Node(n) => {
                let fields = format!("spec.nodeName={name}");
                let (pods, _) = api
                    .list(Kind::Pod, &ListParams::default().fields(&fields))
                    .await?;
                let pods: Vec<Pod> = pods
                    .into_iter()
                    .filter_map(|o| match o {
                        Object::Pod(p) if !p.is_terminal() => Some(p),
                        _ => None,
                    })
                    .collect();
                describe_node(n, &pods, &events)
            }
            _ => bail!("cannot describe {}", kind.plural()),
        };
        std::io::stdout().lock().write_all(text.as_bytes())?;
        Ok(ExitCode::SUCCESS)
    })
}

/// `key=value` lines under a label, `<none>` when empty.
fn map_lines(out: &mut String, label: &str, width: usize, m: &BTreeMap<String, String>) {
    if m.is_empty() {
        let _ = writeln!(out, "{label:<width$}<none>");
        return;
    }
    for (i, (k, v)) in m.iter().enumerate() {
        let l = if i == 0 { label } else { "" };
        let _ = writeln!(out, "{l:<width$}{k}={v}");
    }
}

fn time(t: Option<Time>) -> String {
    t.map_or_else(
        || "<unknown>".into(),
        |t| t.datetime().format("%a, %d %b %Y %H:%M:%S %z").to_string(),
    )
}

fn state_lines(out: &mut String, label: &str, s: Option<&ContainerState>) {
    let Some(s) = s else {
        if label == "State" {
            let _ = writeln!(out, "    {label:<16}Waiting");
        }
        return;
    };
    if let Some(w) = &s.waiting {
        let _ = writeln!(out, "    {label:<16}Waiting");
        if !w.reason.is_empty() {
            let _ = writeln!(out, "      Reason:       {}", w.reason);
        }
        if !w.message.is_empty() {
            let _ = writeln!(out, "      Message:      {}", w.message);
        }
    } else if let Some(r) = &s.running {
        let _ = writeln!(out, "    {label:<16}Running");
        let _ = writeln!(out, "      Started:      {}", time(r.started_at));
    } else if let Some(t) = &s.terminated {
        let _ = writeln!(out, "    {label:<16}Terminated");
        let _ = writeln!(out, "      Reason:       {}", t.reason);
        if !t.message.is_empty() {
            let _ = writeln!(out, "      Message:      {}", t.message);
        }
        let _ = writeln!(out, "      Exit Code:    {}", t.exit_code);
        let _ = writeln!(out, "      Started:      {}", time(t.started_at));
        let _ = writeln!(out, "      Finished:     {}", time(t.finished_at));
    }
}

fn container_section(out: &mut String, c: &Container, status: Option<&ContainerStatus>) {
    let _ = writeln!(out, "  {}:", c.name);
    let id = status.map(|s| s.container_id.as_str()).unwrap_or_default();
    let _ = writeln!(out, "    Container ID:   {id}");
    let _ = writeln!(out, "    Image:          {}", c.image);
    for p in &c.ports {
        let proto = if p.protocol.is_empty() {
            "TCP"
        } else {
            &p.protocol
        };
        let _ = writeln!(out, "    Port:           {}/{proto}", p.container_port);
    }
    if !c.command.is_empty() {
        let _ = writeln!(out, "    Command:");
        for a in &c.command {
            let _ = writeln!(out, "      {a}");
        }
    }
    if !c.args.is_empty() {
        let _ = writeln!(out, "    Args:");
        for a in &c.args {
            let _ = writeln!(out, "      {a}");
        }
    }
    state_lines(out, "State:", status.and_then(|s| s.state.as_ref()));
    state_lines(
        out,
        "Last State:",
        status.and_then(|s| s.last_state.as_ref()),
    );
    let ready = status.is_some_and(|s| s.ready);
    let _ = writeln!(out, "    Ready:          {}", ConditionStatus::from(ready));
    let _ = writeln!(
        out,
        "    Restart Count:  {}",
        status.map_or(0, |s| s.restart_count)
    );
    for (label, list) in [
        ("Limits", &c.resources.limits),
        ("Requests", &c.resources.requests),
    ] {
        if !list.is_empty() {
            let _ = writeln!(out, "    {label}:");
            for (k, v) in list {
                let _ = writeln!(out, "      {k}:  {v}");
            }
        }
    }
    for (label, probe) in [
        ("Liveness", &c.liveness_probe),
        ("Readiness", &c.readiness_probe),
        ("Startup", &c.startup_probe),
    ] {
        if let Some(p) = probe {
            let how = if let Some(e) = &p.exec {
                format!("exec [{}]", e.command.join(" "))
            } else if let Some(t) = &p.tcp_socket {
                format!("tcp-socket :{}", t.port)
            } else if let Some(h) = &p.http_get {
                format!("http-get :{}{}", h.port, h.path)
            } else {
                "<none>".into()
            };
            let _ = writeln!(
                out,
                "    {label}:{:pad$}{how} delay={}s timeout={}s period={}s #success={} #failure={}",
                "",
                p.initial_delay_seconds.unwrap_or(0),
                p.timeout_seconds.unwrap_or(1),
                p.period_seconds.unwrap_or(10),
                p.success_threshold.unwrap_or(1),
                p.failure_threshold.unwrap_or(3),
                pad = 15usize.saturating_sub(label.len() + 1),
            );
        }
    }
    if c.env.is_empty() {
        let _ = writeln!(out, "    Environment:    <none>");
    } else {
        let _ = writeln!(out, "    Environment:");
        for e in &c.env {
            let _ = writeln!(out, "      {}:  {}", e.name, e.value);
        }
    }
}

fn events_section(out: &mut String, events: &[Event]) {
    if events.is_empty() {
        let _ = writeln!(out, "Events:                      <none>");
        return;
    }
    let _ = writeln!(out, "Events:");
    let rows: Vec<[String; 5]> = events
        .iter()
        .map(|e| {
            let age = match (e.count.unwrap_or(1), e.first_timestamp, e.last_seen()) {
                (n, Some(first), Some(last)) if n > 1 => {
                    format!("{} (x{n} over {})", since(last), since(first))
                }
                (_, _, Some(last)) => since(last),
                _ => "<unknown>".into(),
            };
            [
                e.type_.clone(),
                e.reason.clone(),
                age,
                e.from(),
                e.message.clone(),
            ]
        })
        .collect();
    let header = ["Type", "Reason", "Age", "From", "Message"];
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: [&str; 5]| {
        let mut l = String::from("  ");
        for (i, c) in cells.iter().enumerate() {
            if i == 4 {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ", w = widths[i]);
            }
        }
        l.trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(header));
    let rule = header.map(|h| "-".repeat(h.len()));
    let _ = writeln!(out, "{}", line(rule.each_ref().map(String::as_str)));
    for r in &rows {
        let _ = writeln!(
            out,
            "{}",
            line([&r[0], &r[1], &r[2], &r[3], &r[4]].map(String::as_str))
        );
    }
}

pub fn describe_pod(p: &Pod, events: &[Event]) -> String {
    let mut out = String::new();
    let m = &p.metadata;
    let status = p.status.clone().unwrap_or_default();
    let w = 18;
    let _ = writeln!(out, "{:<w$}{}", "Name:", m.name);
    let _ = writeln!(out, "{:<w$}{}", "Namespace:", m.namespace);
    let _ = writeln!(out, "{:<w$}{}", "Priority:", p.spec.priority.unwrap_or(0));
    let node = if p.spec.node_name.is_empty() {
        "<none>".to_string()
    } else if status.host_ip.is_empty() {
        p.spec.node_name.clone()
    } else {
        format!("{}/{}", p.spec.node_name, status.host_ip)
    };
    let _ = writeln!(out, "{:<w$}{node}", "Node:");
    if let Some(t) = status.start_time {
        let _ = writeln!(out, "{:<w$}{}", "Start Time:", time(Some(t)));
    }
    map_lines(&mut out, "Labels:", w, &m.labels);
    map_lines(&mut out, "Annotations:", w, &m.annotations);
    let mut shown = pod_status(p);
    if let Some(t) = m.deletion_timestamp {
        shown = format!("Terminating (lasts {})", since(t));
        if let Some(g) = m.deletion_grace_period_seconds {
            shown = format!(
                "Terminating (grace period {g}s, deadline {})",
                time(Some(t))
            );
        }
    }
    let _ = writeln!(out, "{:<w$}{shown}", "Status:");
    if !status.reason.is_empty() {
        let _ = writeln!(out, "{:<w$}{}", "Reason:", status.reason);
    }
    if !status.message.is_empty() {
        let _ = writeln!(out, "{:<w$}{}", "Message:", status.message);
    }
    let ip = if status.pod_ip.is_empty() {
        "<none>"
    } else {
        &status.pod_ip
    };
    let _ = writeln!(out, "{:<w$}{ip}", "IP:");
    for (title, containers, statuses) in [
        (
            "Init Containers:",
            &p.spec.init_containers,
            &status.init_container_statuses,
        ),
        (
            "Containers:",
            &p.spec.containers,
            &status.container_statuses,
        ),
    ] {
        if containers.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{title}");
        for c in containers {
            container_section(&mut out, c, statuses.iter().find(|s| s.name == c.name));
        }
    }
    if !status.conditions.is_empty() {
        let _ = writeln!(out, "Conditions:");
        let _ = writeln!(out, "  {:<18}Status", "Type");
        for c in &status.conditions {
            let _ = writeln!(out, "  {:<18}{}", c.type_, c.status);
        }
    }
    let w = 29;
    let qos = if status.qos_class.is_empty() {
        "<none>"
    } else {
        &status.qos_class
    };
    let _ = writeln!(out, "{:<w$}{qos}", "QoS Class:");
    map_lines(&mut out, "Node-Selectors:", w, &p.spec.node_selector);
    if p.spec.tolerations.is_empty() {
        let _ = writeln!(out, "{:<w$}<none>", "Tolerations:");
    }
    for (i, t) in p.spec.tolerations.iter().enumerate() {
        let l = if i == 0 { "Tolerations:" } else { "" };
        let mut s = t.key.clone();
        if t.operator == "Exists" && t.key.is_empty() {
            s = "op=Exists".into();
        } else if !t.value.is_empty() {
            let _ = write!(s, "={}", t.value);
        }
        if let Some(effect) = t.effect {
            let _ = write!(s, ":{effect}");
        }
        if let Some(secs) = t.toleration_seconds {
            let _ = write!(s, " for {secs}s");
        }
        let _ = writeln!(out, "{l:<w$}{s}");
    }
    events_section(&mut out, events);
    out
}

/// A workload's `Pod Template:` section: labels, then each container's image, ports and
/// environment.
fn template_section(out: &mut String, t: &PodTemplateSpec) {
    let _ = writeln!(out, "Pod Template:");
    map_lines(out, "  Labels:", 13, &t.metadata.labels);
    if !t.metadata.annotations.is_empty() {
        map_lines(out, "  Annotations:", 15, &t.metadata.annotations);
    }
    let _ = writeln!(out, "  Containers:");
    for c in &t.spec.containers {
        let _ = writeln!(out, "   {}:", c.name);
        let _ = writeln!(out, "    Image:        {}", c.image);
        if c.ports.is_empty() {
            let _ = writeln!(out, "    Port:         <none>");
        }
        for p in &c.ports {
            let proto = if p.protocol.is_empty() {
                "TCP"
            } else {
                &p.protocol
            };
            let _ = writeln!(out, "    Port:         {}/{proto}", p.container_port);
        }
        if !c.command.is_empty() {
            let _ = writeln!(out, "    Command:");
            for part in &c.command {
                let _ = writeln!(out, "      {part}");
            }
        }
        if c.env.is_empty() {
            let _ = writeln!(out, "    Environment:  <none>");
        } else {
            let _ = writeln!(out, "    Environment:");
            for e in &c.env {
                let _ = writeln!(out, "      {}:  {}", e.name, e.value);
            }
        }
    }
}

/// A workload's `Conditions:` table: type, status and reason.
fn workload_conditions(out: &mut String, conditions: &[WorkloadCondition]) {
    if conditions.is_empty() {
        return;
    }
    let _ = writeln!(out, "Conditions:");
    let width = conditions
        .iter()
        .map(|c| c.type_.as_str().len())
        .max()
        .unwrap_or(0)
        .max(4);
    let _ = writeln!(out, "  {:<width$}  Status  Reason", "Type");
    let _ = writeln!(out, "  {:<width$}  ------  ------", "----");
    for c in conditions {
        let _ = writeln!(
            out,
            "  {:<width$}  {:<6}  {}",
            c.type_.as_str(),
            c.status.as_str(),
            c.reason
        );
    }
}

/// kubectl's deployment description: replica counts (desired, updated, total, available,
/// unavailable), strategy, selector, pod template, conditions and events.
pub fn describe_deployment(d: &Deployment, events: &[Event]) -> String {
    let mut out = String::new();
    let m = &d.metadata;
    let status = d.status.clone().unwrap_or_default();
    let w = 24;
    let _ = writeln!(out, "{:<w$}{}", "Name:", m.name);
    let _ = writeln!(out, "{:<w$}{}", "Namespace:", m.namespace);
    let _ = writeln!(
        out,
        "{:<w$}{}",
        "CreationTimestamp:",
        time(m.creation_timestamp)
    );
    map_lines(&mut out, "Labels:", w, &m.labels);
    map_lines(&mut out, "Annotations:", w, &m.annotations);
    let _ = writeln!(
        out,
        "{:<w$}{}",
        "Selector:",
        selector_text(&d.spec.selector)
    );
    let _ = writeln!(
        out,
        "{:<w$}{} desired | {} updated | {} total | {} available | {} unavailable",
        "Replicas:",
        d.replicas(),
        status.updated_replicas,
        status.replicas,
        status.available_replicas,
        status.unavailable_replicas
    );
    let strategy = d.strategy_type();
    let _ = writeln!(out, "{:<w$}{}", "StrategyType:", strategy.as_str());
    let _ = writeln!(
        out,
        "{:<w$}{}",
        "MinReadySeconds:",
        d.spec.min_ready_seconds.unwrap_or(0)
    );
    if let Some(ru) = d
        .spec
        .strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref())
    {
        let show = |v: &Option<skiff_proto::api::IntOrString>| {
            v.as_ref()
                .map_or_else(|| "25%".to_owned(), ToString::to_string)
        };
        let _ = writeln!(
            out,
            "{:<w$}{} max unavailable, {} max surge",
            "RollingUpdateStrategy:",
            show(&ru.max_unavailable),
            show(&ru.max_surge)
        );
    }
    template_section(&mut out, &d.spec.template);
    workload_conditions(&mut out, &status.conditions);
    events_section(&mut out, events);
    out
}

/// kubectl's replica set description: selector, owner, replica counts, the phases of the
/// pods it owns, pod template, conditions and events.
pub fn describe_replica_set(rs: &ReplicaSet, pods: &[Pod], events: &[Event]) -> String {
    let mut out = String::new();
    let m = &rs.metadata;
    let status = rs.status.clone().unwrap_or_default();
    let w = 16;
    let _ = writeln!(out, "{:<w$}{}", "Name:", m.name);
    let _ = writeln!(out, "{:<w$}{}", "Namespace:", m.namespace);
    let _ = writeln!(
        out,
        "{:<w$}{}",
        "Selector:",
        selector_text(&rs.spec.selector)
    );
    map_lines(&mut out, "Labels:", w, &m.labels);
    map_lines(&mut out, "Annotations:", w, &m.annotations);
    if let Some(owner) = m
        .owner_references
        .iter()
        .find(|r| r.controller == Some(true))
    {
        let _ = writeln!(out, "{:<w$}{}/{}", "Controlled By:", owner.kind, owner.name);
    }
    let _ = writeln!(
        out,
        "{:<w$}{} current / {} desired",
        "Replicas:",
        status.replicas,
        rs.replicas()
    );
    let count = |phases: &[PodPhase]| {
        pods.iter()
            .filter(|p| p.phase().is_some_and(|ph| phases.contains(&ph)))
            .count()
    };
    let _ = writeln!(
        out,
        "{:<w$}{} Running / {} Waiting / {} Succeeded / {} Failed",
        "Pods Status:",
        count(&[PodPhase::Running]),
        count(&[PodPhase::Pending]),
        count(&[PodPhase::Succeeded]),
        count(&[PodPhase::Failed])
    );
    template_section(&mut out, &rs.spec.template);
    workload_conditions(&mut out, &status.conditions);
    events_section(&mut out, events);
    out
}

fn sum(pods: &[Pod], resource: &str, limits: bool) -> Quantity {
    pods.iter()
        .flat_map(|p| &p.spec.containers)
        .filter_map(|c| {
            if limits {
                c.resources.limits.get(resource)
            } else {
                c.resources
                    .requests
                    .get(resource)
                    .or_else(|| c.resources.limits.get(resource))
            }
        })
        .fold(Quantity::from_units(0), |a, q| {
            a.checked_add(q).unwrap_or(a)
        })
}

fn percent(q: &Quantity, of: Option<&Quantity>) -> String {
    let Some(of) = of.filter(|o| !o.is_zero()) else {
        return "0%".into();
    };
    format!("{}%", q.milli_value() * 100 / of.milli_value().max(1))
}

pub fn describe_node(n: &Node, pods: &[Pod], events: &[Event]) -> String {
    let mut out = String::new();
    let m = &n.metadata;
    let status = n.status.clone().unwrap_or_default();
    let w = 20;
    let _ = writeln!(out, "{:<w$}{}", "Name:", m.name);
    map_lines(&mut out, "Labels:", w, &m.labels);
    map_lines(&mut out, "Annotations:", w, &m.annotations);
    let _ = writeln!(
        out,
        "{:<w$}{}",
        "CreationTimestamp:",
        time(m.creation_timestamp)
    );
    if n.spec.taints.is_empty() {
        let _ = writeln!(out, "{:<w$}<none>", "Taints:");
    }
    for (i, t) in n.spec.taints.iter().enumerate() {
        let l = if i == 0 { "Taints:" } else { "" };
        let v = if t.value.is_empty() {
            String::new()
        } else {
            format!("={}", t.value)
        };
        let _ = writeln!(out, "{l:<w$}{}{v}:{}", t.key, t.effect);
    }
    let _ = writeln!(
        out,
        "{:<w$}{}",
        "Unschedulable:",
        n.spec.unschedulable.unwrap_or(false)
    );
    let _ = writeln!(out, "Conditions:");
    let _ = writeln!(
        out,
        "  {:<16}{:<8}{:<34}{:<34}{:<28}Message",
        "Type", "Status", "LastHeartbeatTime", "LastTransitionTime", "Reason"
    );
    for c in &status.conditions {
        let _ = writeln!(
            out,
            "  {:<16}{:<8}{:<34}{:<34}{:<28}{}",
            c.type_,
            c.status,
            time(c.last_heartbeat_time),
            time(c.last_transition_time),
            c.reason,
            c.message
        );
    }
    let _ = writeln!(out, "Addresses:");
    for a in &status.addresses {
        let _ = writeln!(out, "  {}:  {}", a.type_, a.address);
    }
    for (label, list) in [
        ("Capacity:", &status.capacity),
        ("Allocatable:", &status.allocatable),
    ] {
        let _ = writeln!(out, "{label}");
        for (k, v) in list {
            let _ = writeln!(out, "  {k}:  {v}");
        }
    }
    if let Some(i) = &status.node_info {
        let _ = writeln!(out, "System Info:");
        for (k, v) in [
            ("Kernel Version", &i.kernel_version),
            ("OS Image", &i.os_image),
            ("Operating System", &i.operating_system),
            ("Architecture", &i.architecture),
            ("Container Runtime Version", &i.container_runtime_version),
            ("Kubelet Version", &i.kubelet_version),
        ] {
            let _ = writeln!(out, "  {:<27}{v}", format!("{k}:"));
        }
    }
    let _ = writeln!(
        out,
        "Non-terminated Pods:          ({} in total)",
        pods.len()
    );
    if !pods.is_empty() {
        let _ = writeln!(
            out,
            "  {:<16}{:<32}{:<14}{:<12}{:<17}{:<15}Age",
            "Namespace", "Name", "CPU Requests", "CPU Limits", "Memory Requests", "Memory Limits"
        );
        for p in pods {
            let one = std::slice::from_ref(p);
            let _ = writeln!(
                out,
                "  {:<16}{:<32}{:<14}{:<12}{:<17}{:<15}{}",
                p.metadata.namespace,
                p.metadata.name,
                sum(one, "cpu", false).to_string(),
                sum(one, "cpu", true).to_string(),
                sum(one, "memory", false).to_string(),
                sum(one, "memory", true).to_string(),
                p.metadata
                    .creation_timestamp
                    .map_or_else(|| "<unknown>".into(), since)
            );
        }
    }
    let _ = writeln!(out, "Allocated resources:");
    let _ = writeln!(out, "  {:<10}{:<20}Limits", "Resource", "Requests");
    for r in ["cpu", "memory"] {
        let (req, lim) = (sum(pods, r, false), sum(pods, r, true));
        let of = status.allocatable.get(r);
        let _ = writeln!(
            out,
            "  {r:<10}{:<20}{} ({})",
            format!("{req} ({})", percent(&req, of)),
            lim,
            percent(&lim, of)
        );
    }
    events_section(&mut out, events);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(reason: &str, count: i32) -> Event {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web.1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"},
            "reason": reason,
            "message": format!("{reason} happened"),
            "type": "Normal",
            "source": {"component": "kubelet", "host": "node-1"},
            "firstTimestamp": "2026-01-01T00:00:00Z",
            "lastTimestamp": "2026-01-01T00:01:00Z",
            "count": count
        }))
        .expect("event")
    }

    #[test]
    fn a_pod_with_its_events() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": {
                "nodeName": "node-1",
                "containers": [{"name": "app", "image": "localhost/skiff/busybox:1",
                    "resources": {"requests": {"cpu": "100m"}}}]
            },
            "status": {"phase": "Running", "hostIP": "127.0.0.1", "qosClass": "Burstable",
                "containerStatuses": [{"name": "app", "ready": true, "restartCount": 2,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}
        }))
        .expect("pod");
        let text = describe_pod(&pod, &[event("Scheduled", 1), event("BackOff", 3)]);
        for want in [
            "Name:             web",
            "Node:             node-1/127.0.0.1",
            "Labels:           app=web",
            "Status:           Running",
            "  app:",
            "    State:          Running",
            "    Restart Count:  2",
            "      cpu:  100m",
            "QoS Class:                   Burstable",
            "Type    Reason     Age",
            "Normal  Scheduled",
            "kubelet, node-1  Scheduled happened",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
        assert!(text.contains("(x3 over "), "{text}");
    }

    #[test]
    fn a_node_sums_its_pods() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "node-1"},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi"}}
        }))
        .expect("node");
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": "x",
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}
        }))
        .expect("pod");
        let text = describe_node(&node, &[pod.clone(), pod], &[]);
        assert!(
            text.contains("Non-terminated Pods:          (2 in total)"),
            "{text}"
        );
        assert!(text.contains("cpu       1 (50%)"), "{text}");
        assert!(text.contains("memory    2Gi (50%)"), "{text}");
        assert!(
            text.contains("Events:                      <none>"),
            "{text}"
        );
    }

    /// A deployment prints its replica counts in kubectl's one line, its strategy, selector,
    /// template and conditions.
    #[test]
    fn a_deployment_with_its_rollout() {
        let d: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "25%"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}
            },
            "status": {"replicas": 3, "updatedReplicas": 2, "availableReplicas": 1, "unavailableReplicas": 2,
                       "conditions": [{"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"}]}
        }))
        .unwrap();
        let text = describe_deployment(&d, &[event("ScalingReplicaSet", 1)]);
        for line in [
            "Selector:               app=web",
            "Replicas:               3 desired | 2 updated | 3 total | 1 available | 2 unavailable",
            "StrategyType:           RollingUpdate",
            "RollingUpdateStrategy:  25% max unavailable, 1 max surge",
            "   nginx:",
            "    Image:        nginx:1.27",
            "  Available  False   MinimumReplicasUnavailable",
        ] {
            assert!(text.contains(line), "{line:?} in\n{text}");
        }
        assert!(text.contains("ScalingReplicaSet"), "{text}");
    }

    /// A replica set names its controller and counts the phases of the pods it owns.
    #[test]
    fn a_replica_set_counts_its_pods() {
        let rs: ReplicaSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-abc", "namespace": "default",
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u", "controller": true}]},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
            "status": {"replicas": 2}
        }))
        .unwrap();
        let pod = |phase: &str| -> Pod {
            serde_json::from_value(
                serde_json::json!({"metadata": {"name": "p"}, "status": {"phase": phase}}),
            )
            .unwrap()
        };
        let text = describe_replica_set(&rs, &[pod("Running"), pod("Pending")], &[]);
        for line in [
            "Controlled By:  Deployment/web",
            "Replicas:       2 current / 2 desired",
            "Pods Status:    1 Running / 1 Waiting / 0 Succeeded / 0 Failed",
        ] {
            assert!(text.contains(line), "{line:?} in\n{text}");
        }
    }
}
