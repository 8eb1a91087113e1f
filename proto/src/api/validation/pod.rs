//! The pod: its containers (names, images, env, ports, resources, probes, lifecycle hooks),
//! restart policy, node selection and affinity, tolerations, topology spread, and status.

use std::collections::HashSet;

use super::names::{
    dns1123_label_message, dns1123_subdomain_message, is_dns1123_label, is_dns1123_subdomain,
    is_qualified_name, validate_labels, validate_selector,
};
use super::resources::validate_resource_list;
use super::{Errors, Path};
use crate::api::meta::IntOrString;
use crate::api::pod::{
    Affinity, Container, NodeSelectorTerm, PREEMPTION_POLICIES, Pod, PodAffinityTerm, PodSpec,
    Probe,
};
use crate::api::vocabulary::TaintEffect;

pub(super) fn validate_pod(errs: &mut Errors, pod: &Pod) {
    validate_pod_spec(errs, &Path::root("spec"), &pod.spec);
}

/// A pod spec, of a pod (`spec`) or of a workload's template (`spec.template.spec`).
pub(crate) fn validate_pod_spec(errs: &mut Errors, spec: &Path, s: &PodSpec) {
    if s.containers.is_empty() {
        errs.add(
            &spec.field("containers"),
            "required value: a pod needs at least one container",
        );
    }
    let mut names = HashSet::new();
    let mut host_ports = HashSet::new();
    for (field, list, init) in [
        ("initContainers", &s.init_containers, true),
        ("containers", &s.containers, false),
    ] {
        for (i, c) in list.iter().enumerate() {
            let p = spec.field(field).index(i);
            if !c.name.is_empty() && !names.insert(c.name.as_str()) {
                errs.add(
                    &p.field("name"),
                    format!(
                        "duplicate value {:?}: container names must be unique within a pod",
                        c.name
                    ),
                );
            }
            validate_container(errs, &p, c, init);
            super::volume::validate_container_refs(errs, &p, c, s);
            for (j, port) in c.ports.iter().enumerate() {
                if let Some(hp) = port.host_port
                    && !host_ports.insert((hp, port.protocol.as_str()))
                {
                    errs.add(
                        &p.field("ports").index(j).field("hostPort"),
                        format!(
                            "duplicate value {hp}/{}: another container of this pod uses it",
                            port.protocol
                        ),
                    );
                }
            }
        }
    }
    super::volume::validate_volumes(errs, spec, s);
    if let Some(g) = s.termination_grace_period_seconds
        && g < 0
    {
        errs.add(
            &spec.field("terminationGracePeriodSeconds"),
            format!("invalid value {g}: must be at least 0"),
        );
    }
    if let Some(d) = s.active_deadline_seconds
        && !(1..=i64::from(i32::MAX)).contains(&d)
    {
        errs.add(
            &spec.field("activeDeadlineSeconds"),
            format!("invalid value {d}: must be between 1 and 2147483647, inclusive"),
        );
    }
    if !s.node_name.is_empty() && !is_dns1123_subdomain(&s.node_name) {
        errs.add(
            &spec.field("nodeName"),
            dns1123_subdomain_message(&s.node_name),
        );
    }
    validate_labels(errs, &spec.field("nodeSelector"), &s.node_selector);
    if !s.scheduler_name.is_empty()
        && !is_qualified_name(&s.scheduler_name)
        && !is_dns1123_subdomain(&s.scheduler_name)
    {
        errs.add(
            &spec.field("schedulerName"),
            format!(
                "invalid value {:?}: must be a DNS subdomain",
                s.scheduler_name
            ),
        );
    }
    if !s.priority_class_name.is_empty() && !is_dns1123_subdomain(&s.priority_class_name) {
        errs.add(
            &spec.field("priorityClassName"),
            dns1123_subdomain_message(&s.priority_class_name),
        );
    }
    if let Some(policy) = &s.preemption_policy {
        errs.one_of(
            &spec.field("preemptionPolicy"),
            policy,
            &PREEMPTION_POLICIES,
        );
    }
    if let Some(a) = &s.affinity {
        validate_affinity(errs, &spec.field("affinity"), a);
    }
    for (i, t) in s.tolerations.iter().enumerate() {
        let p = spec.field("tolerations").index(i);
        if !t.key.is_empty() && !is_qualified_name(&t.key) {
            errs.add(
                &p.field("key"),
                format!("invalid value {:?}: must be a qualified name", t.key),
            );
        }
        match t.operator.as_str() {
            "Exists" if !t.value.is_empty() => {
                errs.add(&p.field("value"), "must be empty when operator is Exists")
            }
            "Equal" if t.key.is_empty() => errs.add(
                &p.field("operator"),
                "must be Exists when key is empty (an empty key with Exists tolerates every taint)",
            ),
            "Exists" | "Equal" => {}
            op => errs.one_of(&p.field("operator"), op, &["Equal", "Exists"]),
        }
        if t.toleration_seconds.is_some() && t.effect != Some(TaintEffect::NoExecute) {
            errs.add(
                &p.field("tolerationSeconds"),
                "must be empty unless effect is NoExecute",
            );
        }
    }
    let mut spread = HashSet::new();
    for (i, c) in s.topology_spread_constraints.iter().enumerate() {
        let p = spec.field("topologySpreadConstraints").index(i);
        if c.max_skew <= 0 {
            errs.add(
                &p.field("maxSkew"),
                format!("invalid value {}: must be greater than 0", c.max_skew),
            );
        }
        if c.topology_key.is_empty() {
            errs.add(&p.field("topologyKey"), "required value");
        } else if !is_qualified_name(&c.topology_key) {
            errs.add(
                &p.field("topologyKey"),
                format!(
                    "invalid value {:?}: must be a qualified name",
                    c.topology_key
                ),
            );
        }
        errs.one_of(
            &p.field("whenUnsatisfiable"),
            &c.when_unsatisfiable,
            &["DoNotSchedule", "ScheduleAnyway"],
        );
        if let Some(m) = c.min_domains {
            if m <= 0 {
                errs.add(
                    &p.field("minDomains"),
                    format!("invalid value {m}: must be greater than 0"),
                );
            } else if c.when_unsatisfiable != "DoNotSchedule" {
                errs.add(
                    &p.field("minDomains"),
                    "can only be set when whenUnsatisfiable is DoNotSchedule",
                );
            }
        }
        if let Some(sel) = &c.label_selector {
            validate_selector(errs, &p.field("labelSelector"), sel);
        }
        if !spread.insert((c.topology_key.as_str(), c.when_unsatisfiable.as_str())) {
            errs.add(
                &p,
                format!(
                    "duplicate constraint for {{{}, {}}}",
                    c.topology_key, c.when_unsatisfiable
                ),
            );
        }
    }
}

/// Node affinity (required terms ORed, preferred terms weighted) and pod (anti-)affinity.
fn validate_affinity(errs: &mut Errors, p: &Path, a: &Affinity) {
    if let Some(na) = &a.node_affinity {
        let p = p.field("nodeAffinity");
        if let Some(req) = &na.required {
            let p = p
                .field("requiredDuringSchedulingIgnoredDuringExecution")
                .field("nodeSelectorTerms");
            if req.node_selector_terms.is_empty() {
                errs.add(&p, "required value: at least one term (terms are ORed)");
            }
            for (i, t) in req.node_selector_terms.iter().enumerate() {
                validate_node_selector_term(errs, &p.index(i), t);
            }
        }
        for (i, t) in na.preferred.iter().enumerate() {
            let p = p
                .field("preferredDuringSchedulingIgnoredDuringExecution")
                .index(i);
            validate_weight(errs, &p.field("weight"), t.weight);
            validate_node_selector_term(errs, &p.field("preference"), &t.preference);
        }
    }
    for (field, pa) in [
        ("podAffinity", &a.pod_affinity),
        ("podAntiAffinity", &a.pod_anti_affinity),
    ] {
        let Some(pa) = pa else { continue };
        let p = p.field(field);
        for (i, t) in pa.required.iter().enumerate() {
            validate_pod_affinity_term(
                errs,
                &p.field("requiredDuringSchedulingIgnoredDuringExecution")
                    .index(i),
                t,
            );
        }
        for (i, t) in pa.preferred.iter().enumerate() {
            let p = p
                .field("preferredDuringSchedulingIgnoredDuringExecution")
                .index(i);
            validate_weight(errs, &p.field("weight"), t.weight);
            validate_pod_affinity_term(errs, &p.field("podAffinityTerm"), &t.pod_affinity_term);
        }
    }
}

fn validate_weight(errs: &mut Errors, path: &Path, weight: i32) {
    if !(1..=100).contains(&weight) {
        errs.add(
            path,
            format!("invalid value {weight}: must be between 1 and 100"),
        );
    }
}

fn validate_node_selector_term(errs: &mut Errors, path: &Path, term: &NodeSelectorTerm) {
    if term.match_expressions.is_empty() && term.match_fields.is_empty() {
        errs.add(
            path,
            "required value: a term needs matchExpressions or matchFields",
        );
    }
    for (i, r) in term.match_expressions.iter().enumerate() {
        let p = path.field("matchExpressions").index(i);
        if !is_qualified_name(&r.key) {
            errs.add(
                &p.field("key"),
                format!("invalid label key {:?}: must be a qualified name", r.key),
            );
        }
        match r.operator.as_str() {
            "In" | "NotIn" if r.values.is_empty() => errs.add(
                &p.field("values"),
                format!(
                    "required value: operator {} needs at least one value",
                    r.operator
                ),
            ),
            "Exists" | "DoesNotExist" if !r.values.is_empty() => errs.add(
                &p.field("values"),
                format!("must be empty for operator {}", r.operator),
            ),
            "Gt" | "Lt" => {
                if r.values.len() != 1 || r.values[0].parse::<i64>().is_err() {
                    errs.add(
                        &p.field("values"),
                        format!("operator {} needs exactly one integer value", r.operator),
                    )
                }
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            op => errs.one_of(
                &p.field("operator"),
                op,
                &["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"],
            ),
        }
    }
    for (i, r) in term.match_fields.iter().enumerate() {
        let p = path.field("matchFields").index(i);
        if r.key != "metadata.name" {
            errs.add(
                &p.field("key"),
                format!(
                    "unsupported value {:?}: only metadata.name is supported",
                    r.key
                ),
            );
        }
        if !matches!(r.operator.as_str(), "In" | "NotIn") {
            errs.one_of(&p.field("operator"), &r.operator, &["In", "NotIn"]);
        } else if r.values.len() != 1 {
            errs.add(&p.field("values"), "must have exactly one node name");
        }
    }
}

fn validate_pod_affinity_term(errs: &mut Errors, path: &Path, t: &PodAffinityTerm) {
    if t.topology_key.is_empty() {
        errs.add(
            &path.field("topologyKey"),
            "required value: pod affinity needs a topology key (e.g. kubernetes.io/hostname)",
        );
    } else if !is_qualified_name(&t.topology_key) {
        errs.add(
            &path.field("topologyKey"),
            format!(
                "invalid value {:?}: must be a qualified name",
                t.topology_key
            ),
        );
    }
    if let Some(sel) = &t.label_selector {
        validate_selector(errs, &path.field("labelSelector"), sel);
    }
    for (i, ns) in t.namespaces.iter().enumerate() {
        if !is_dns1123_label(ns) {
            errs.add(
                &path.field("namespaces").index(i),
                dns1123_label_message(ns),
            );
        }
    }
}

/// An IANA service name: at most 15 of [a-z0-9-], at least one letter, no leading, trailing or
/// double '-'.
pub(super) fn is_port_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.bytes().any(|b| b.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--")
}

pub(super) fn validate_port_number(errs: &mut Errors, path: &Path, port: i32) {
    if !(1..=65535).contains(&port) {
        errs.add(
            path,
            format!("invalid value {port}: must be between 1 and 65535"),
        );
    }
}

fn validate_container(errs: &mut Errors, p: &Path, c: &Container, init: bool) {
    if c.name.is_empty() {
        errs.add(&p.field("name"), "required value");
    } else if !is_dns1123_label(&c.name) {
        errs.add(&p.field("name"), dns1123_label_message(&c.name));
    }
    if c.image.trim().is_empty() {
        errs.add(
            &p.field("image"),
            "required value: the image to run, e.g. localhost/skiff/busybox:1",
        );
    } else if c.image.chars().any(char::is_whitespace) {
        errs.add(
            &p.field("image"),
            format!("invalid value {:?}: must not contain whitespace", c.image),
        );
    }
    errs.one_of(
        &p.field("imagePullPolicy"),
        &c.image_pull_policy,
        &["Always", "IfNotPresent", "Never"],
    );
    for (i, e) in c.env.iter().enumerate() {
        if e.name.is_empty() {
            errs.add(&p.field("env").index(i).field("name"), "required value");
        } else if e.name.contains('=') || e.name.chars().any(|ch| ch.is_control()) {
            errs.add(
                &p.field("env").index(i).field("name"),
                format!(
                    "invalid value {:?}: must not contain '=' or control characters",
                    e.name
                ),
            );
        }
    }
    let mut port_names = HashSet::new();
    for (i, port) in c.ports.iter().enumerate() {
        let pp = p.field("ports").index(i);
        validate_port_number(errs, &pp.field("containerPort"), port.container_port);
        if let Some(hp) = port.host_port {
            validate_port_number(errs, &pp.field("hostPort"), hp);
        }
        errs.one_of(
            &pp.field("protocol"),
            &port.protocol,
            &["TCP", "UDP", "SCTP"],
        );
        if !port.name.is_empty() {
            if !is_port_name(&port.name) {
                errs.add(&pp.field("name"), format!("invalid value {:?}: must be an IANA service name (at most 15 of a-z, 0-9 and '-', with at least one letter)", port.name));
            } else if !port_names.insert(port.name.as_str()) {
                errs.add(
                    &pp.field("name"),
                    format!("duplicate value {:?}", port.name),
                );
            }
        }
    }
    let res = p.field("resources");
    validate_resource_list(errs, &res.field("requests"), &c.resources.requests, true);
    validate_resource_list(errs, &res.field("limits"), &c.resources.limits, true);
    for (name, request) in &c.resources.requests {
        if let Some(limit) = c.resources.limits.get(name)
            && request > limit
        {
            errs.add(
                &res.field("requests").key(name),
                format!(
                    "invalid value {request}: must be less than or equal to {name} limit of {limit}"
                ),
            );
        }
    }
    for (field, probe) in [
        ("livenessProbe", &c.liveness_probe),
        ("readinessProbe", &c.readiness_probe),
        ("startupProbe", &c.startup_probe),
    ] {
        let Some(probe) = probe else { continue };
        if init {
            errs.add(
                &p.field(field),
                "not allowed: init containers run to completion and take no probes",
            );
            continue;
        }
        validate_probe(errs, &p.field(field), probe, field != "readinessProbe", c);
    }
    if let Some(lc) = &c.lifecycle {
        if init {
            errs.add(
                &p.field("lifecycle"),
                "not allowed: init containers take no lifecycle hooks",
            );
        }
        for (field, h) in [("postStart", &lc.post_start), ("preStop", &lc.pre_stop)] {
            let Some(h) = h else { continue };
            match &h.exec {
                Some(e) if e.command.is_empty() => errs.add(
                    &p.field("lifecycle")
                        .field(field)
                        .field("exec")
                        .field("command"),
                    "required value",
                ),
                Some(_) => {}
                None => errs.add(
                    &p.field("lifecycle").field(field),
                    "required value: a handler needs exec",
                ),
            }
        }
    }
}

fn validate_probe(
    errs: &mut Errors,
    p: &Path,
    probe: &Probe,
    success_must_be_one: bool,
    c: &Container,
) {
    let handlers = usize::from(probe.exec.is_some())
        + usize::from(probe.tcp_socket.is_some())
        + usize::from(probe.http_get.is_some());
    if handlers != 1 {
        errs.add(
            p,
            format!(
                "must have exactly one handler of exec, tcpSocket or httpGet (found {handlers})"
            ),
        );
    }
    if let Some(e) = &probe.exec
        && e.command.is_empty()
    {
        errs.add(&p.field("exec").field("command"), "required value");
    }
    let mut check_port = |path: Path, port: &IntOrString| match port {
        IntOrString::Int(n) => validate_port_number(errs, &path, *n),
        IntOrString::String(name) => {
            if !c.ports.iter().any(|cp| &cp.name == name) {
                errs.add(
                    &path,
                    format!("invalid value {name:?}: no container port has this name"),
                );
            }
        }
    };
    if let Some(t) = &probe.tcp_socket {
        check_port(p.field("tcpSocket").field("port"), &t.port);
    }
    if let Some(h) = &probe.http_get {
        check_port(p.field("httpGet").field("port"), &h.port);
        errs.one_of(&p.field("httpGet").field("scheme"), &h.scheme, &["HTTP"]);
        if !h.path.starts_with('/') {
            errs.add(
                &p.field("httpGet").field("path"),
                format!("invalid value {:?}: must start with '/'", h.path),
            );
        }
    }
    for (field, value, min) in [
        ("initialDelaySeconds", probe.initial_delay_seconds, 0),
        ("timeoutSeconds", probe.timeout_seconds, 1),
        ("periodSeconds", probe.period_seconds, 1),
        ("successThreshold", probe.success_threshold, 1),
        ("failureThreshold", probe.failure_threshold, 1),
    ] {
        if let Some(v) = value
            && v < min
        {
            errs.add(
                &p.field(field),
                format!("invalid value {v}: must be at least {min}"),
            );
        }
    }
    if success_must_be_one && probe.success_threshold.is_some_and(|v| v != 1) {
        errs.add(
            &p.field("successThreshold"),
            "must be 1 for liveness and startup probes",
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::api::validation::testing::{check, errors};

    const OK: &str = "metadata: {name: web}\nspec:\n  containers:\n  - {name: c, image: localhost/skiff/busybox:1}\n";

    #[test]
    fn a_minimal_pod_is_valid() {
        check(OK).unwrap();
    }

    /// A pod preempts lower priorities or never does; anything else is refused at its path.
    #[test]
    fn preemption_policy_is_one_of_two() {
        for policy in ["PreemptLowerPriority", "Never"] {
            check(&format!("{OK}  preemptionPolicy: {policy}\n")).unwrap();
        }
        assert_eq!(
            errors(&format!("{OK}  preemptionPolicy: Sometimes\n")),
            [
                "spec.preemptionPolicy: unsupported value \"Sometimes\": supported values: \"PreemptLowerPriority\", \"Never\""
            ]
        );
    }

    #[test]
    fn the_active_deadline_is_positive() {
        check(&format!("{OK}  activeDeadlineSeconds: 30\n")).unwrap();
        assert_eq!(
            errors(&format!("{OK}  activeDeadlineSeconds: 0\n")),
            [
                "spec.activeDeadlineSeconds: invalid value 0: must be between 1 and 2147483647, inclusive"
            ]
        );
    }

    #[test]
    fn requests_must_not_exceed_limits() {
        let e = errors(
            "metadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: i\n    resources: {requests: {cpu: '2'}, limits: {cpu: 500m}}\n",
        );
        assert_eq!(
            e,
            [
                "spec.containers[0].resources.requests.cpu: invalid value 2: must be less than or equal to cpu limit of 500m"
            ]
        );
    }

    #[test]
    fn reports_every_violation_with_its_path() {
        let e = errors(concat!(
            "metadata: {name: p, labels: {'bad key!': v}}\n",
            "spec:\n",
            "  containers:\n",
            "  - name: c\n    image: i\n    ports: [{containerPort: 70000}]\n",
            "  - name: c\n    image: ''\n    resources: {requests: {memory: -1Gi}}\n",
            "    livenessProbe: {exec: {command: [true]}, tcpSocket: {port: 80}}\n",
            "  tolerations: [{key: k, operator: Exists, value: v}]\n",
            "  topologySpreadConstraints: [{maxSkew: 0, topologyKey: zone, whenUnsatisfiable: Maybe}]\n",
        ));
        let want = [
            "metadata.labels[\"bad key!\"]: invalid label key",
            "spec.containers[0].ports[0].containerPort: invalid value 70000",
            "spec.containers[1].name: duplicate value \"c\"",
            "spec.containers[1].image: required value",
            "spec.containers[1].resources.requests.memory: invalid value -1Gi",
            "spec.containers[1].livenessProbe: must have exactly one handler",
            "spec.tolerations[0].value: must be empty when operator is Exists",
            "spec.topologySpreadConstraints[0].maxSkew: invalid value 0",
            "spec.topologySpreadConstraints[0].whenUnsatisfiable: unsupported value \"Maybe\"",
        ];
        for w in want {
            assert!(
                e.iter().any(|got| got.starts_with(w)),
                "missing {w:?} in {e:#?}"
            );
        }
        assert_eq!(e.len(), want.len(), "{e:#?}");
    }

    #[test]
    fn affinity_rules() {
        let e = errors(concat!(
            "metadata: {name: p}\n",
            "spec:\n  containers: [{name: c, image: i}]\n",
            "  affinity:\n",
            "    nodeAffinity:\n",
            "      requiredDuringSchedulingIgnoredDuringExecution:\n",
            "        nodeSelectorTerms:\n",
            "        - matchExpressions: [{key: zone, operator: In}, {key: cpus, operator: Gt, values: [many]}]\n",
            "      preferredDuringSchedulingIgnoredDuringExecution:\n",
            "      - {weight: 0, preference: {matchExpressions: [{key: a, operator: Exists}]}}\n",
            "    podAntiAffinity:\n",
            "      requiredDuringSchedulingIgnoredDuringExecution:\n",
            "      - labelSelector: {matchLabels: {app: web}}\n",
        ));
        let base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]";
        let want = [
            format!("{base}.matchExpressions[0].values: required value"),
            format!("{base}.matchExpressions[1].values: operator Gt needs exactly one integer value"),
            "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: invalid value 0".to_string(),
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: required value".to_string(),
        ];
        for w in &want {
            assert!(
                e.iter().any(|got| got.starts_with(w.as_str())),
                "missing {w:?} in {e:#?}"
            );
        }
        assert_eq!(e.len(), want.len(), "{e:#?}");
    }

    #[test]
    fn probes_on_init_containers_and_named_ports() {
        let e = errors(concat!(
            "metadata: {name: p}\n",
            "spec:\n",
            "  initContainers: [{name: init, image: i, readinessProbe: {exec: {command: [true]}}}]\n",
            "  containers:\n",
            "  - name: c\n    image: i\n    ports: [{name: http, containerPort: 8080}]\n",
            "    readinessProbe: {httpGet: {port: http}}\n",
            "    livenessProbe: {tcpSocket: {port: metrics}, successThreshold: 2}\n",
        ));
        let want = [
            "spec.initContainers[0].readinessProbe: not allowed",
            "spec.containers[0].livenessProbe.tcpSocket.port: invalid value \"metrics\": no container port has this name",
            "spec.containers[0].livenessProbe.successThreshold: must be 1",
        ];
        for w in want {
            assert!(
                e.iter().any(|got| got.starts_with(w)),
                "missing {w:?} in {e:#?}"
            );
        }
        assert_eq!(e.len(), want.len(), "{e:#?}");
    }
}
