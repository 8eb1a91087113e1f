//! The kinds other than Pod: Node (taints, capacity, conditions), Namespace, ResourceQuota,
//! LimitRange, Binding, Event and Secret.

use std::collections::HashSet;

use super::names::{
    dns1123_subdomain_message, is_dns1123_subdomain, is_label_value, is_qualified_name,
};
use super::resources::validate_resource_list;
use super::{Errors, Path};
use crate::api::event::Event;
use crate::api::namespace::{Binding, LimitRange, Namespace, ResourceQuota};
use crate::api::node::Node;
use crate::api::secret::{BOOTSTRAP_TOKEN_TYPE, Secret};

pub(super) fn validate_node(errs: &mut Errors, node: &Node) {
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
        if !seen.insert((t.key.as_str(), t.effect)) {
            errs.add(&p, format!("duplicate taint {}:{}", t.key, t.effect));
        }
    }
    if let Some(status) = &node.status {
        let p = Path::root("status");
        validate_resource_list(errs, &p.field("capacity"), &status.capacity, false);
        validate_resource_list(errs, &p.field("allocatable"), &status.allocatable, false);
    }
}

pub(super) fn validate_namespace(errs: &mut Errors, ns: &Namespace) {
    // PodSecurity's labels name a level, as kube-apiserver checks them.
    for mode in ["enforce", "audit", "warn"] {
        let key = format!("pod-security.kubernetes.io/{mode}");
        if let Some(v) = ns.metadata.labels.get(&key) {
            errs.one_of(
                &Path::root("metadata").field("labels").key(&key),
                v,
                &["privileged", "baseline", "restricted"],
            );
        }
    }
    if let Some(spec) = &ns.spec {
        let p = Path::root("spec").field("finalizers");
        for (i, f) in spec.finalizers.iter().enumerate() {
            validate_finalizer_name(errs, &p.index(i), f);
        }
    }
}

/// A finalizer's name: qualified (`example.com/cleanup`), or one of the standard ones
/// (`kubernetes`, `orphan`, `foregroundDeletion`), as kube-apiserver checks a namespace's.
fn validate_finalizer_name(errs: &mut Errors, path: &Path, name: &str) {
    const STANDARD: [&str; 3] = [
        crate::api::FINALIZER_KUBERNETES,
        crate::api::meta::ORPHAN_FINALIZER,
        crate::api::meta::FOREGROUND_DELETION_FINALIZER,
    ];
    if !is_qualified_name(name) {
        errs.add(
            path,
            format!("{name:?}: a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character, with an optional DNS subdomain prefix and '/'"),
        );
    } else if !name.contains('/') && !STANDARD.contains(&name) {
        errs.add(
            path,
            format!(
                "{name:?}: name is neither a standard finalizer name nor is it fully qualified"
            ),
        );
    }
}

pub(super) fn validate_quota(errs: &mut Errors, q: &ResourceQuota) {
    let p = Path::root("spec").field("hard");
    let scopes = crate::api::quota::scopes(q);
    for (name, v) in &q.spec.hard {
        if !crate::api::quota::is_resource_name(name) {
            errs.add(&p.key(name), format!("unsupported resource name {name:?}: use an object count (pods, services, configmaps, count/<resource>[.<group>]), a pod total (cpu, memory, requests.<resource>, limits.<resource>), services.nodeports, services.loadbalancers or requests.storage"));
        } else if !scopes.is_empty()
            && crate::api::quota::kind_counted(name).is_some_and(|k| k != crate::api::Kind::Pod)
        {
            errs.add(
                &p.key(name),
                format!("unsupported scope applied to resource {name:?}: a scoped quota counts only pods and their resources"),
            );
        }
        if v.is_negative() {
            errs.add(
                &p.key(name),
                format!("invalid value {v}: must be greater than or equal to 0"),
            );
        }
    }
    let known = [
        "Terminating",
        "NotTerminating",
        "BestEffort",
        "NotBestEffort",
        "PriorityClass",
    ];
    for (i, scope) in scopes.iter().enumerate() {
        if !known.contains(scope) {
            errs.add(
                &Path::root("spec").field("scopes").index(i),
                format!(
                    "unsupported scope {scope:?}: use one of {}",
                    known.join(", ")
                ),
            );
        }
    }
}

pub(super) fn validate_limit_range(errs: &mut Errors, l: &LimitRange) {
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

pub(super) fn validate_binding(errs: &mut Errors, b: &Binding) {
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

pub(super) fn validate_event(errs: &mut Errors, e: &Event) {
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

/// Kubernetes' limit on a Secret's data, all values together.
pub const SECRET_MAX_BYTES: usize = 1024 * 1024;

/// A Secret's keys are config keys (`[-._a-zA-Z0-9]+`, not `.` or `..`), its data at most
/// 1 MiB; a bootstrap token's Secret is named after its token id.
/// A key of a Secret's or a ConfigMap's data: what can be a file name in a volume.
pub(crate) fn config_key(errs: &mut Errors, path: &Path, key: &str) {
    let ok = !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !ok {
        errs.add(
            path,
            format!(
                "Invalid value: {key:?}: a valid config key must consist of alphanumeric \
                 characters, '-', '_' or '.' (e.g. 'key.name')"
            ),
        );
    }
}

pub(super) fn validate_secret(errs: &mut Errors, s: &Secret) {
    let data = Path::root("data");
    for key in s.data.keys() {
        config_key(errs, &data.key(key), key);
    }
    let total: usize = s.data.values().map(Vec::len).sum();
    if total > SECRET_MAX_BYTES {
        errs.add(
            &data,
            format!("Too long: may not be more than {SECRET_MAX_BYTES} bytes"),
        );
    }
    if s.type_ == BOOTSTRAP_TOKEN_TYPE {
        let id = s.text("token-id").unwrap_or_default();
        if s.metadata.name != format!("bootstrap-token-{id}") {
            errs.add(
                &Path::root("metadata").field("name"),
                format!(
                    "Invalid value: {:?}: a bootstrap token's Secret is named \
                     bootstrap-token-<token-id> (data[token-id] is {id:?})",
                    s.metadata.name
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::api::defaults;
    use crate::api::object::Object;
    use crate::api::validation::validate;

    #[test]
    fn limit_range_order() {
        let mut obj = Object::LimitRange(serde_yaml_ng::from_str("metadata: {name: l}\nspec: {limits: [{type: Container, min: {cpu: 200m}, default: {cpu: 100m}}]}\n").unwrap());
        defaults::apply(&mut obj);
        let e = validate(&obj).unwrap_err().to_string();
        assert!(e.contains("spec.limits[0].min.cpu: min value 200m must be less than or equal to defaultRequest value 100m"), "{e}");
    }
}
