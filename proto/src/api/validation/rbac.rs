//! The RBAC kinds (rules, role references, subjects) and access reviews, as kube-apiserver's
//! `rbac/validation` and `authorization/validation` check them.

use super::{Errors, Path};
use crate::api::rbac::{AccessReview, PolicyRule, RBAC_GROUP, RoleRef, Subject};

/// A name that is one path segment: what Kubernetes asks of RBAC names, which may hold colons
/// (`system:node`) but not `/` or `%`, and may not be `.` or `..`.
pub(super) fn path_segment_problem(name: &str) -> Option<String> {
    if name == "." || name == ".." {
        return Some(format!("{name:?}: may not be '.' or '..'"));
    }
    ["/", "%"]
        .into_iter()
        .find(|c| name.contains(c))
        .map(|c| format!("{name:?}: may not contain '{c}'"))
}

pub(super) fn validate_rules(errs: &mut Errors, rules: &[PolicyRule], namespaced: bool) {
    let p = Path::root("rules");
    for (i, rule) in rules.iter().enumerate() {
        let p = p.index(i);
        if rule.verbs.is_empty() {
            errs.add(
                &p.field("verbs"),
                "required value: verbs must contain at least one value",
            );
        }
        if !rule.non_resource_urls.is_empty() {
            if namespaced {
                errs.add(
                    &p.field("nonResourceURLs"),
                    "invalid value: namespaced rules cannot apply to non-resource URLs",
                );
            }
            if !rule.api_groups.is_empty() || !rule.resources.is_empty() {
                errs.add(
                    &p.field("nonResourceURLs"),
                    "invalid value: rules cannot apply to both regular resources and non-resource URLs",
                );
            }
            continue;
        }
        if rule.api_groups.is_empty() {
            errs.add(
                &p.field("apiGroups"),
                "required value: resource rules must supply at least one api group",
            );
        }
        if rule.resources.is_empty() {
            errs.add(
                &p.field("resources"),
                "required value: resource rules must supply at least one resource",
            );
        }
    }
}

/// `roleRef` and `subjects` of a binding; a RoleBinding may name a Role or a ClusterRole, a
/// ClusterRoleBinding only a ClusterRole.
pub(super) fn validate_binding(
    errs: &mut Errors,
    role_ref: &RoleRef,
    subjects: &[Subject],
    namespaced: bool,
) {
    let p = Path::root("roleRef");
    if role_ref.api_group != RBAC_GROUP {
        errs.one_of(&p.field("apiGroup"), &role_ref.api_group, &[RBAC_GROUP]);
    }
    if namespaced {
        errs.one_of(&p.field("kind"), &role_ref.kind, &["Role", "ClusterRole"]);
    } else {
        errs.one_of(&p.field("kind"), &role_ref.kind, &["ClusterRole"]);
    }
    if role_ref.name.is_empty() {
        errs.add(&p.field("name"), "required value: the role to grant");
    } else if let Some(problem) = path_segment_problem(&role_ref.name) {
        errs.add(&p.field("name"), format!("invalid value: {problem}"));
    }
    let p = Path::root("subjects");
    for (i, s) in subjects.iter().enumerate() {
        let p = p.index(i);
        if s.name.is_empty() {
            errs.add(&p.field("name"), "required value");
        }
        match s.kind.as_str() {
            "ServiceAccount" => {
                if !s.api_group.is_empty() {
                    errs.one_of(&p.field("apiGroup"), &s.api_group, &[""]);
                }
                if !namespaced && s.namespace.is_empty() {
                    errs.add(
                        &p.field("namespace"),
                        "required value: a service account's namespace",
                    );
                }
            }
            "User" | "Group" => {
                if s.api_group != RBAC_GROUP {
                    errs.one_of(&p.field("apiGroup"), &s.api_group, &[RBAC_GROUP]);
                }
            }
            other => errs.one_of(
                &p.field("kind"),
                other,
                &["ServiceAccount", "User", "Group"],
            ),
        }
    }
}

/// A review asks about exactly one request, and a `SubjectAccessReview` names who makes it.
pub(super) fn validate_review(errs: &mut Errors, review: &AccessReview, names_subject: bool) {
    let p = Path::root("spec");
    let spec = &review.spec;
    match (&spec.resource_attributes, &spec.non_resource_attributes) {
        (None, None) => errs.add(
            &p.field("resourceAttributes"),
            "required value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ),
        (Some(_), Some(_)) => errs.add(
            &p.field("nonResourceAttributes"),
            "invalid value: cannot be specified in combination with resourceAttributes",
        ),
        _ => {}
    }
    if names_subject && spec.user.is_empty() && spec.groups.is_empty() {
        errs.add(
            &p.field("user"),
            "required value: at least one of user or group must be specified",
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::api::object::{Kind, Object};
    use crate::api::{defaults, validation};

    fn errors(kind: Kind, yaml: &str) -> Vec<String> {
        let value: serde_json::Value = serde_yaml_ng::from_str(yaml).unwrap();
        let mut o = Object::from_value(kind, value).unwrap();
        defaults::apply(&mut o);
        match validation::validate(&o) {
            Ok(()) => vec![],
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn roles() {
        let ok = "metadata: {name: 'system:reader', namespace: team}\nrules:\n- {verbs: [get], apiGroups: [''], resources: [pods]}\n";
        assert_eq!(errors(Kind::Role, ok), Vec::<String>::new());
        let bad = "metadata: {name: 'a/b', namespace: team}\nrules:\n- {verbs: [], apiGroups: [''], resources: [pods]}\n- {verbs: [get], nonResourceURLs: ['/healthz']}\n- {verbs: [get]}\n";
        assert_eq!(
            errors(Kind::Role, bad),
            [
                "metadata.name: invalid value: \"a/b\": may not contain '/'",
                "rules[0].verbs: required value: verbs must contain at least one value",
                "rules[1].nonResourceURLs: invalid value: namespaced rules cannot apply to non-resource URLs",
                "rules[2].apiGroups: required value: resource rules must supply at least one api group",
                "rules[2].resources: required value: resource rules must supply at least one resource",
            ]
        );
        let cluster =
            "metadata: {name: health}\nrules:\n- {verbs: [get], nonResourceURLs: ['/healthz']}\n";
        assert_eq!(errors(Kind::ClusterRole, cluster), Vec::<String>::new());
    }

    #[test]
    fn bindings() {
        let ok = "metadata: {name: b, namespace: team}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}\nsubjects:\n- {kind: User, apiGroup: rbac.authorization.k8s.io, name: alice}\n- {kind: ServiceAccount, name: default}\n";
        assert_eq!(errors(Kind::RoleBinding, ok), Vec::<String>::new());
        let bad = "metadata: {name: b}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: view}\nsubjects:\n- {kind: User, apiGroup: apps, name: alice}\n- {kind: ServiceAccount, name: default}\n- {kind: Robot, name: r2}\n";
        assert_eq!(
            errors(Kind::ClusterRoleBinding, bad),
            [
                "roleRef.kind: unsupported value \"Role\": supported values: \"ClusterRole\"",
                "subjects[0].apiGroup: unsupported value \"apps\": supported values: \"rbac.authorization.k8s.io\"",
                "subjects[1].namespace: required value: a service account's namespace",
                "subjects[2].kind: unsupported value \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
            ]
        );
    }

    #[test]
    fn reviews() {
        let ok = "spec: {resourceAttributes: {verb: get, resource: pods}}\n";
        assert_eq!(
            errors(Kind::SelfSubjectAccessReview, ok),
            Vec::<String>::new()
        );
        assert_eq!(
            errors(Kind::SubjectAccessReview, ok),
            ["spec.user: required value: at least one of user or group must be specified"]
        );
        assert_eq!(
            errors(Kind::SelfSubjectAccessReview, "spec: {}\n"),
            [
                "spec.resourceAttributes: required value: exactly one of nonResourceAttributes or resourceAttributes must be specified"
            ]
        );
    }
}
