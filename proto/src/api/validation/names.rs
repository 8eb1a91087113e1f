//! Names and labels: RFC 1123 names, qualified names and label values, the rules of
//! `metadata` every kind shares, and label selectors.

use std::collections::BTreeMap;

use super::{Errors, Path};
use crate::api::meta::{LabelSelector, ObjectMeta};
use crate::api::object::Kind;

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

pub(super) fn dns1123_label_message(s: &str) -> String {
    format!(
        "invalid value {s:?}: must be a lowercase RFC 1123 label (at most 63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit)"
    )
}

pub(super) fn dns1123_subdomain_message(s: &str) -> String {
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

pub(crate) fn validate_labels(errs: &mut Errors, path: &Path, labels: &BTreeMap<String, String>) {
    for (k, v) in labels {
        if !is_qualified_name(k) {
            errs.add(&path.key(k), format!("invalid label key {k:?}: must be a qualified name ([prefix/]name, name at most 63 characters of [A-Za-z0-9_.-] starting and ending alphanumeric)"));
        }
        if !is_label_value(v) {
            errs.add(&path.key(k), format!("invalid label value {v:?}: must be empty or at most 63 characters of [A-Za-z0-9_.-] starting and ending alphanumeric"));
        }
    }
}

pub(super) fn validate_meta(errs: &mut Errors, kind: Kind, m: &ObjectMeta) {
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
    } else if matches!(
        kind,
        Kind::Role
            | Kind::ClusterRole
            | Kind::RoleBinding
            | Kind::ClusterRoleBinding
            | Kind::CertificateSigningRequest
    ) || kind.name() == "APIService"
    {
        // Path segments: an APIService of the core group is `v1.`.
        if let Some(problem) = super::rbac::path_segment_problem(&m.name) {
            errs.add(&path.field("name"), format!("invalid value: {problem}"));
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

pub(crate) fn validate_selector(errs: &mut Errors, path: &Path, sel: &LabelSelector) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::defaults;
    use crate::api::object::Object;
    use crate::api::validation::testing::errors;
    use crate::api::validation::validate;

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
    fn cluster_scoped_kinds_have_no_namespace() {
        let mut obj = Object::Node(serde_yaml_ng::from_str("metadata: {name: n1, namespace: default}\nspec: {taints: [{key: 'a b', effect: NoSchedule}]}\n").unwrap());
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
            e[1].starts_with("spec.taints[0].key: invalid value \"a b\""),
            "{e:?}"
        );
    }
}
