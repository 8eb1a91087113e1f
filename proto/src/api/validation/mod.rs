//! Validation of defaulted objects. Every rule reports the field path it concerns
//! (`spec.containers[0].resources.requests.cpu`), and all violations are reported together, so a
//! user fixes a manifest in one pass. The same rules run offline (`skiff validate`) and on every
//! write to the store.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use super::event::Event;
use super::meta::{IntOrString, LabelSelector, ObjectMeta, ResourceList};
use super::namespace::{Binding, LimitRange, Namespace, ResourceQuota};
use super::node::Node;
use super::object::{Kind, Object};
use super::pod::{Container, NodeSelectorTerm, Pod, PodAffinityTerm, Probe};
use crate::quantity::Quantity;

/// One violated rule at one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every rule an object violates; never empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// A JSON path under construction: `spec`, `.containers`, `[0]`, `.name`.
#[derive(Debug, Clone)]
struct Path(String);

impl Path {
    fn root(name: &str) -> Path {
        Path(name.to_owned())
    }
    fn field(&self, name: &str) -> Path {
        if self.0.is_empty() {
            Path(name.to_owned())
        } else {
            Path(format!("{}.{name}", self.0))
        }
    }
    fn index(&self, i: usize) -> Path {
        Path(format!("{}[{i}]", self.0))
    }
    /// A map key; keys that are not plain words are bracketed: `labels["app.kubernetes.io/name"]`.
    fn key(&self, k: &str) -> Path {
        if !k.is_empty()
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            self.field(k)
        } else {
            Path(format!("{}[{k:?}]", self.0))
        }
    }
}

#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn add(&mut self, path: &Path, message: impl Into<String>) {
        self.0.push(FieldError {
            path: path.0.clone(),
            message: message.into(),
        });
    }

    fn one_of(&mut self, path: &Path, value: &str, allowed: &[&str]) {
        if !allowed.contains(&value) {
            let list = allowed
                .iter()
                .map(|a| format!("{a:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            self.add(
                path,
                format!("unsupported value {value:?}: supported values: {list}"),
            );
        }
    }

    fn finish(self) -> Result<(), ValidationErrors> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors(self.0))
        }
    }
}

/// Validates a defaulted object of any kind.
pub fn validate(object: &Object) -> Result<(), ValidationErrors> {
    let mut errs = Errors::default();
    validate_meta(&mut errs, object.kind(), object.metadata());
    match object {
        Object::Pod(p) => validate_pod(&mut errs, p),
        Object::Node(n) => validate_node(&mut errs, n),
        Object::Namespace(n) => validate_namespace(&mut errs, n),
        Object::ResourceQuota(q) => validate_quota(&mut errs, q),
        Object::LimitRange(l) => validate_limit_range(&mut errs, l),
        Object::Binding(b) => validate_binding(&mut errs, b),
        Object::Event(e) => validate_event(&mut errs, e),
    }
    errs.finish()
}

// ---- names and labels -------------------------------------------------------------------

/// RFC 1123 label: at most 63 lowercase alphanumerics or '-', starting and ending alphanumeric.
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

fn dns1123_label_message(s: &str) -> String {
    format!(
        "invalid value {s:?}: must be a lowercase RFC 1123 label (at most 63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit)"
    )
}

fn dns1123_subdomain_message(s: &str) -> String {
    format!(
        "invalid value {s:?}: must be a lowercase RFC 1123 subdomain (at most 253 characters of a-z, 0-9, '-' and '.', each part starting and ending with a letter or digit)"
    )
}

/// The name part of a label key, or a label value: at most 63 of [A-Za-z0-9_.-], starting and
/// ending alphanumeric (values may be empty).
fn is_label_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

/// A qualified name: `[prefix/]name`, prefix a DNS subdomain.
pub fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => is_dns1123_subdomain(prefix) && is_label_name(name),
        None => is_label_name(s),
    }
}

pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_label_name(s)
}

fn validate_labels(errs: &mut Errors, path: &Path, labels: &BTreeMap<String, String>) {
    for (k, v) in labels {
        if !is_qualified_name(k) {
            errs.add(&path.key(k), format!("invalid label key {k:?}: must be a qualified name ([prefix/]name, name at most 63 characters of [A-Za-z0-9_.-] starting and ending alphanumeric)"));
        }
        if !is_label_value(v) {
            errs.add(&path.key(k), format!("invalid label value {v:?}: must be empty or at most 63 characters of [A-Za-z0-9_.-] starting and ending alphanumeric"));
        }
    }
}

fn validate_meta(errs: &mut Errors, kind: Kind, m: &ObjectMeta) {
    let path = Path::root("metadata");
    if m.name.is_empty() {
        errs.add(
            &path.field("name"),
            "required value: every object needs a name",
        );
    } else if matches!(kind, Kind::Namespace) {
        if !is_dns1123_label(&m.name) {
            errs.add(&path.field("name"), dns1123_label_message(&m.name));
        }
    } else if !is_dns1123_subdomain(&m.name) {
        errs.add(&path.field("name"), dns1123_subdomain_message(&m.name));
    }
    if kind.is_namespaced() {
        if !is_dns1123_label(&m.namespace) {
            errs.add(
                &path.field("namespace"),
                dns1123_label_message(&m.namespace),
            );
        }
    } else if !m.namespace.is_empty() {
        errs.add(
            &path.field("namespace"),
            format!(
                "not allowed: {} objects are cluster-scoped and have no namespace",
                kind.name()
            ),
        );
    }
    validate_labels(errs, &path.field("labels"), &m.labels);
    for k in m.annotations.keys() {
        if !is_qualified_name(k) {
            errs.add(
                &path.field("annotations").key(k),
                format!("invalid annotation key {k:?}: must be a qualified name"),
            );
        }
    }
    let annotation_bytes: usize = m.annotations.iter().map(|(k, v)| k.len() + v.len()).sum();
    if annotation_bytes > 256 * 1024 {
        errs.add(
            &path.field("annotations"),
            format!("too long: {annotation_bytes} bytes, the limit is 262144"),
        );
    }
    if let Some(g) = m.deletion_grace_period_seconds
        && g < 0
    {
        errs.add(
            &path.field("deletionGracePeriodSeconds"),
            format!("invalid value {g}: must be at least 0"),
        );
    }
}

fn validate_selector(errs: &mut Errors, path: &Path, sel: &LabelSelector) {
    validate_labels(errs, &path.field("matchLabels"), &sel.match_labels);
    for (i, r) in sel.match_expressions.iter().enumerate() {
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
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            op => errs.one_of(
                &p.field("operator"),
                op,
                &["In", "NotIn", "Exists", "DoesNotExist"],
            ),
        }
    }
}

// ---- quantities ---------------------------------------------------------------------------

/// Standard resource names, plus extended resources named `<domain>/<name>` and hugepages.
fn is_resource_name(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage" | "pods")
        || name.starts_with("hugepages-") && Quantity::parse(&name["hugepages-".len()..]).is_ok()
        || name.contains('/') && is_qualified_name(name)
}

fn validate_resource_list(errs: &mut Errors, path: &Path, list: &ResourceList, container: bool) {
    for (name, q) in list {
        let p = path.key(name);
        let known = if container {
            is_resource_name(name) && name != "pods"
        } else {
            is_resource_name(name)
        };
        if !known {
            errs.add(&p, format!("unsupported resource name {name:?}: use cpu, memory, ephemeral-storage, hugepages-<size> or an extended resource <domain>/<name>"));
        }
        if q.is_negative() {
            errs.add(
                &p,
                format!("invalid value {q}: must be greater than or equal to 0"),
            );
        }
        if name.contains('/')
            && !name.starts_with("hugepages-")
            && q.nano_value() % 1_000_000_000 != 0
        {
            errs.add(
                &p,
                format!("invalid value {q}: extended resources must be whole numbers"),
            );
        }
    }
}

// ---- Pod ----------------------------------------------------------------------------------

fn validate_pod(errs: &mut Errors, pod: &Pod) {
    let spec = Path::root("spec");
    let s = &pod.spec;
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
    errs.one_of(
        &spec.field("restartPolicy"),
        &s.restart_policy,
        &["Always", "OnFailure", "Never"],
    );
    if let Some(g) = s.termination_grace_period_seconds
        && g < 0
    {
        errs.add(
            &spec.field("terminationGracePeriodSeconds"),
            format!("invalid value {g}: must be at least 0"),
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
    if let Some(a) = &s.affinity {
        let p = spec.field("affinity");
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
        if !t.effect.is_empty() {
            errs.one_of(
                &p.field("effect"),
                &t.effect,
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            );
        }
        if t.toleration_seconds.is_some() && t.effect != "NoExecute" {
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
    if let Some(status) = &pod.status {
        let p = Path::root("status");
        if !status.phase.is_empty() {
            errs.one_of(
                &p.field("phase"),
                &status.phase,
                &["Pending", "Running", "Succeeded", "Failed", "Unknown"],
            );
        }
        for (i, c) in status.conditions.iter().enumerate() {
            errs.one_of(
                &p.field("conditions").index(i).field("status"),
                &c.status,
                &["True", "False", "Unknown"],
            );
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
fn is_port_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.bytes().any(|b| b.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--")
}

fn validate_port_number(errs: &mut Errors, path: &Path, port: i32) {
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

// ---- other kinds --------------------------------------------------------------------------

fn validate_node(errs: &mut Errors, node: &Node) {
    let spec = Path::root("spec");
    let mut seen = HashSet::new();
    for (i, t) in node.spec.taints.iter().enumerate() {
        let p = spec.field("taints").index(i);
        if !is_qualified_name(&t.key) {
            errs.add(
                &p.field("key"),
                format!("invalid value {:?}: must be a qualified name", t.key),
            );
        }
        if !is_label_value(&t.value) {
            errs.add(
                &p.field("value"),
                format!("invalid value {:?}: must be a valid label value", t.value),
            );
        }
        errs.one_of(
            &p.field("effect"),
            &t.effect,
            &["NoSchedule", "PreferNoSchedule", "NoExecute"],
        );
        if !seen.insert((t.key.as_str(), t.effect.as_str())) {
            errs.add(&p, format!("duplicate taint {}:{}", t.key, t.effect));
        }
    }
    if let Some(status) = &node.status {
        let p = Path::root("status");
        validate_resource_list(errs, &p.field("capacity"), &status.capacity, false);
        validate_resource_list(errs, &p.field("allocatable"), &status.allocatable, false);
        for (i, c) in status.conditions.iter().enumerate() {
            errs.one_of(
                &p.field("conditions").index(i).field("status"),
                &c.status,
                &["True", "False", "Unknown"],
            );
        }
    }
}

fn validate_namespace(errs: &mut Errors, ns: &Namespace) {
    if let Some(status) = &ns.status
        && !status.phase.is_empty()
    {
        errs.one_of(
            &Path::root("status").field("phase"),
            &status.phase,
            &["Active", "Terminating"],
        );
    }
}

/// Names a quota may cap: object counts and request/limit totals.
fn is_quota_resource(name: &str) -> bool {
    matches!(
        name,
        "pods"
            | "cpu"
            | "memory"
            | "ephemeral-storage"
            | "requests.cpu"
            | "requests.memory"
            | "requests.ephemeral-storage"
            | "limits.cpu"
            | "limits.memory"
            | "limits.ephemeral-storage"
            | "count/pods"
    )
}

fn validate_quota(errs: &mut Errors, q: &ResourceQuota) {
    let p = Path::root("spec").field("hard");
    for (name, v) in &q.spec.hard {
        if !is_quota_resource(name) {
            errs.add(&p.key(name), format!("unsupported resource name {name:?}: use pods, cpu, memory, requests.cpu, requests.memory, limits.cpu or limits.memory"));
        }
        if v.is_negative() {
            errs.add(
                &p.key(name),
                format!("invalid value {v}: must be greater than or equal to 0"),
            );
        }
    }
}

fn validate_limit_range(errs: &mut Errors, l: &LimitRange) {
    for (i, item) in l.spec.limits.iter().enumerate() {
        let p = Path::root("spec").field("limits").index(i);
        errs.one_of(&p.field("type"), &item.type_, &["Container", "Pod"]);
        for (field, list) in [
            ("max", &item.max),
            ("min", &item.min),
            ("default", &item.default),
            ("defaultRequest", &item.default_request),
            ("maxLimitRequestRatio", &item.max_limit_request_ratio),
        ] {
            validate_resource_list(errs, &p.field(field), list, false);
        }
        if item.type_ == "Pod" && !(item.default.is_empty() && item.default_request.is_empty()) {
            errs.add(
                &p,
                "default and defaultRequest apply to containers only (type Container)",
            );
        }
        // min <= defaultRequest <= default <= max, per resource.
        let chain = [
            ("min", &item.min),
            ("defaultRequest", &item.default_request),
            ("default", &item.default),
            ("max", &item.max),
        ];
        for (a, (a_name, a_list)) in chain.iter().enumerate() {
            for (b_name, b_list) in &chain[a + 1..] {
                for (res, lo) in a_list.iter() {
                    if let Some(hi) = b_list.get(res)
                        && lo > hi
                    {
                        errs.add(&p.field(a_name).key(res), format!("{a_name} value {lo} must be less than or equal to {b_name} value {hi}"));
                    }
                }
            }
        }
    }
}

fn validate_binding(errs: &mut Errors, b: &Binding) {
    let p = Path::root("target");
    if b.target.name.is_empty() {
        errs.add(&p.field("name"), "required value: the node to bind to");
    } else if !is_dns1123_subdomain(&b.target.name) {
        errs.add(&p.field("name"), dns1123_subdomain_message(&b.target.name));
    }
    if !b.target.kind.is_empty() && b.target.kind != "Node" {
        errs.one_of(&p.field("kind"), &b.target.kind, &["Node"]);
    }
}

/// The longest event message stored (the Kubernetes API server's limit for `note`).
pub const MAX_EVENT_MESSAGE: usize = 1024;

fn validate_event(errs: &mut Errors, e: &Event) {
    let p = Path::root("involvedObject");
    if e.involved_object.name.is_empty() {
        errs.add(
            &p.field("name"),
            "required value: the object the event is about",
        );
    }
    if e.involved_object.kind.is_empty() {
        errs.add(&p.field("kind"), "required value");
    }
    // An event lives in the namespace of its object; events about cluster-scoped objects
    // (nodes) go to `default`, as the kubelet puts them.
    let ns = &e.metadata.namespace;
    if !e.involved_object.namespace.is_empty() && &e.involved_object.namespace != ns {
        errs.add(
            &p.field("namespace"),
            format!(
                "does not match event.namespace: {:?} is not {ns:?}",
                e.involved_object.namespace
            ),
        );
    }
    if e.reason.is_empty() {
        errs.add(&Path::root("reason"), "required value");
    } else if e.reason.len() > 128 {
        errs.add(&Path::root("reason"), "must be no more than 128 characters");
    }
    if e.message.len() > MAX_EVENT_MESSAGE {
        errs.add(
            &Path::root("message"),
            format!("must be no more than {MAX_EVENT_MESSAGE} bytes"),
        );
    }
    if !e.type_.is_empty() && e.type_ != "Normal" && e.type_ != "Warning" {
        errs.one_of(&Path::root("type"), &e.type_, &["Normal", "Warning"]);
    }
    if e.count.is_some_and(|c| c < 0) {
        errs.add(&Path::root("count"), "must be greater than or equal to 0");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::defaults;

    fn check(yaml: &str) -> Result<(), ValidationErrors> {
        let pod: Pod = serde_yaml_ng::from_str(yaml).unwrap();
        let mut obj = Object::Pod(pod);
        defaults::apply(&mut obj);
        validate(&obj)
    }

    fn errors(yaml: &str) -> Vec<String> {
        check(yaml)
            .expect_err("should be invalid")
            .0
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    const OK: &str = "metadata: {name: web}\nspec:\n  containers:\n  - {name: c, image: localhost/skiff/busybox:1}\n";

    #[test]
    fn a_minimal_pod_is_valid() {
        check(OK).unwrap();
    }

    #[test]
    fn names() {
        assert!(is_dns1123_label("web-1"));
        assert!(!is_dns1123_label("Web"));
        assert!(!is_dns1123_label("-web"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_subdomain("a.b-c.d"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(is_qualified_name("app.kubernetes.io/name"));
        assert!(is_qualified_name("Tier_1"));
        assert!(!is_qualified_name("a/b/c"));
        assert!(!is_qualified_name("-x"));
        let e = errors("metadata: {name: Web_1}\nspec: {containers: [{name: c, image: i}]}\n");
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with("metadata.name: invalid value \"Web_1\""),
            "{e:?}"
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
            "  restartPolicy: Sometimes\n",
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
            "spec.restartPolicy: unsupported value \"Sometimes\"",
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

    #[test]
    fn cluster_scoped_kinds_have_no_namespace() {
        let mut obj = Object::Node(serde_yaml_ng::from_str("metadata: {name: n1, namespace: default}\nspec: {taints: [{key: a, effect: Sometimes}]}\n").unwrap());
        defaults::apply(&mut obj);
        let e: Vec<String> = validate(&obj)
            .unwrap_err()
            .0
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            e[0].starts_with("metadata.namespace: not allowed: Node objects are cluster-scoped"),
            "{e:?}"
        );
        assert!(
            e[1].starts_with("spec.taints[0].effect: unsupported value \"Sometimes\""),
            "{e:?}"
        );
    }

    #[test]
    fn limit_range_order() {
        let mut obj = Object::LimitRange(serde_yaml_ng::from_str("metadata: {name: l}\nspec: {limits: [{type: Container, min: {cpu: 200m}, default: {cpu: 100m}}]}\n").unwrap());
        defaults::apply(&mut obj);
        let e = validate(&obj).unwrap_err().to_string();
        assert!(e.contains("spec.limits[0].min.cpu: min value 200m must be less than or equal to defaultRequest value 100m"), "{e}");
    }
}
