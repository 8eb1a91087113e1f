//! What a set of roles and bindings allows: Kubernetes' RBAC rules, with no I/O.
//!
//! A binding grants its role's rules to its subjects: a ClusterRoleBinding in every
//! namespace and at the cluster scope, a RoleBinding in its own namespace only (whether it
//! names a Role of that namespace or a ClusterRole). A service account subject is the user
//! `system:serviceaccount:<namespace>:<name>`. A request is allowed when one rule granted to
//! the user, or to one of its groups, matches it; nothing is ever denied by a rule.
//!
//! A rule matches a resource request when its verbs, API groups and resources each hold the
//! request's (`*` holds anything; `pods/log` names a subresource, `*/scale` one subresource
//! of every resource) and, when it lists resource names, the request's name is among them. A
//! rule matches a path when one of its `nonResourceURLs` is the path, or a prefix of it that
//! ends in `*`.

use std::collections::HashMap;
use std::sync::Arc;

use skiff_proto::api::rbac::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};

use super::{Attributes, User};

const ALL: &str = "*";

/// Who a subject is, as the authenticator names users and groups.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Principal {
    User(String),
    Group(String),
}

/// One binding's grant to one principal.
#[derive(Debug, Clone)]
struct Grant {
    /// The binding's namespace (RoleBinding), or none for a ClusterRoleBinding.
    namespace: Option<String>,
    /// `RoleBinding "ops/dev"`, for the reason of an allowed request.
    binding: String,
    role: RoleKey,
    /// `User "alice"`, as reasons name the subject.
    subject: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum RoleKey {
    Cluster(String),
    Namespaced { namespace: String, name: String },
}

/// Every role and binding, indexed by who they grant to.
#[derive(Debug, Default)]
pub struct Rules {
    roles: HashMap<RoleKey, Arc<Vec<PolicyRule>>>,
    grants: HashMap<Principal, Vec<Grant>>,
}

impl Rules {
    pub fn new(
        roles: &[Role],
        cluster_roles: &[ClusterRole],
        role_bindings: &[RoleBinding],
        cluster_role_bindings: &[ClusterRoleBinding],
    ) -> Rules {
        let mut rules = Rules::default();
        for r in roles {
            rules.roles.insert(
                RoleKey::Namespaced {
                    namespace: r.metadata.namespace.clone(),
                    name: r.metadata.name.clone(),
                },
                Arc::new(r.rules.clone()),
            );
        }
        for r in cluster_roles {
            rules.roles.insert(
                RoleKey::Cluster(r.metadata.name.clone()),
                Arc::new(r.rules.clone()),
            );
        }
        for b in role_bindings {
            let ns = &b.metadata.namespace;
            let role = match b.role_ref.kind.as_str() {
                "ClusterRole" => RoleKey::Cluster(b.role_ref.name.clone()),
                _ => RoleKey::Namespaced {
                    namespace: ns.clone(),
                    name: b.role_ref.name.clone(),
                },
            };
            let binding = format!("RoleBinding \"{ns}/{}\"", b.metadata.name);
            rules.grant(&b.subjects, Some(ns), &binding, &role, &b.role_ref);
        }
        for b in cluster_role_bindings {
            let role = RoleKey::Cluster(b.role_ref.name.clone());
            let binding = format!("ClusterRoleBinding {:?}", b.metadata.name);
            rules.grant(&b.subjects, None, &binding, &role, &b.role_ref);
        }
        rules
    }

    fn grant(
        &mut self,
        subjects: &[Subject],
        namespace: Option<&String>,
        binding: &str,
        role: &RoleKey,
        role_ref: &RoleRef,
    ) {
        for s in subjects {
            let principal = match s.kind.as_str() {
                "User" => Principal::User(s.name.clone()),
                "Group" => Principal::Group(s.name.clone()),
                "ServiceAccount" => {
                    // A RoleBinding's service account defaults to the binding's namespace.
                    let ns = if s.namespace.is_empty() {
                        namespace.cloned().unwrap_or_default()
                    } else {
                        s.namespace.clone()
                    };
                    Principal::User(format!("system:serviceaccount:{ns}:{}", s.name))
                }
                _ => continue,
            };
            self.grants.entry(principal).or_default().push(Grant {
                namespace: namespace.cloned(),
                binding: format!("{binding} of {} {:?}", role_ref.kind, role_ref.name),
                role: role.clone(),
                subject: format!("{} {:?}", s.kind, s.name),
            });
        }
    }

    /// Why `user` may do `attributes` (`allowed by ClusterRoleBinding "x" of ClusterRole
    /// "y" to User "z"`), or `None` when no rule granted to it allows it.
    pub fn allows(&self, user: &User, attributes: &Attributes) -> Option<String> {
        let principals = std::iter::once(Principal::User(user.name.clone()))
            .chain(user.groups.iter().cloned().map(Principal::Group));
        for p in principals {
            for grant in self.grants.get(&p).into_iter().flatten() {
                if !in_scope(grant, attributes) {
                    continue;
                }
                // A binding to a role that does not exist (yet) grants nothing.
                let Some(rules) = self.roles.get(&grant.role) else {
                    continue;
                };
                if rules.iter().any(|r| rule_allows(r, attributes)) {
                    return Some(format!("allowed by {} to {}", grant.binding, grant.subject));
                }
            }
        }
        None
    }
}

/// A RoleBinding grants in its namespace only; paths and cluster-scoped requests are
/// granted by ClusterRoleBindings alone.
fn in_scope(grant: &Grant, attributes: &Attributes) -> bool {
    match (&grant.namespace, attributes) {
        (None, _) => true,
        (Some(ns), Attributes::Resource(r)) => *ns == r.namespace,
        (Some(_), Attributes::NonResource(_)) => false,
    }
}

fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == ALL || v == value)
}

/// Whether one rule allows the request.
pub fn rule_allows(rule: &PolicyRule, attributes: &Attributes) -> bool {
    match attributes {
        Attributes::Resource(r) => {
            if !has(&rule.verbs, &r.verb) || !has(&rule.api_groups, &r.group) {
                return false;
            }
            let resource_ok = if r.subresource.is_empty() {
                has(&rule.resources, &r.resource)
            } else {
                let combined = format!("{}/{}", r.resource, r.subresource);
                let any_parent = format!("*/{}", r.subresource);
                rule.resources
                    .iter()
                    .any(|x| x == ALL || *x == combined || *x == any_parent)
            };
            resource_ok && (rule.resource_names.is_empty() || rule.resource_names.contains(&r.name))
        }
        Attributes::NonResource(p) => {
            has(&rule.verbs, &p.verb)
                && rule.non_resource_urls.iter().any(|url| {
                    url == ALL
                        || *url == p.path
                        || url
                            .strip_suffix('*')
                            .is_some_and(|prefix| p.path.starts_with(prefix))
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_proto::api::ObjectMeta;
    use skiff_proto::api::rbac::RBAC_GROUP;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> PolicyRule {
        let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        PolicyRule {
            verbs: v(verbs),
            api_groups: v(groups),
            resources: v(resources),
            resource_names: v(names),
            non_resource_urls: vec![],
        }
    }

    fn meta(ns: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: ns.into(),
            name: name.into(),
            ..ObjectMeta::default()
        }
    }

    fn subject(kind: &str, name: &str, ns: &str) -> Subject {
        Subject {
            kind: kind.into(),
            api_group: if kind == "ServiceAccount" {
                ""
            } else {
                RBAC_GROUP
            }
            .into(),
            name: name.into(),
            namespace: ns.into(),
        }
    }

    fn role_ref(kind: &str, name: &str) -> RoleRef {
        RoleRef {
            api_group: RBAC_GROUP.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    fn user(name: &str, groups: &[&str]) -> User {
        User::named(name, groups)
    }

    fn res(verb: &str, group: &str, resource: &str, sub: &str, ns: &str, name: &str) -> Attributes {
        Attributes::resource(
            verb,
            group,
            resource,
            Some(sub).filter(|s| !s.is_empty()),
            ns,
            name,
        )
    }

    #[test]
    fn rules_match_as_kubernetes_matches_them() {
        let r = rule(&["get", "list"], &[""], &["pods", "pods/log"], &[]);
        assert!(rule_allows(&r, &res("get", "", "pods", "", "a", "web")));
        assert!(rule_allows(&r, &res("get", "", "pods", "log", "a", "web")));
        assert!(!rule_allows(
            &r,
            &res("get", "", "pods", "exec", "a", "web")
        ));
        assert!(!rule_allows(&r, &res("delete", "", "pods", "", "a", "web")));
        assert!(!rule_allows(
            &r,
            &res("get", "apps", "pods", "", "a", "web")
        ));
        let scale = rule(&["update"], &["*"], &["*/scale"], &[]);
        assert!(rule_allows(
            &scale,
            &res("update", "apps", "deployments", "scale", "a", "web")
        ));
        assert!(!rule_allows(
            &scale,
            &res("update", "apps", "deployments", "", "a", "web")
        ));
        let named = rule(&["get"], &[""], &["nodes"], &["n1"]);
        assert!(rule_allows(&named, &res("get", "", "nodes", "", "", "n1")));
        assert!(!rule_allows(&named, &res("get", "", "nodes", "", "", "n2")));
        assert!(
            !rule_allows(&named, &res("get", "", "nodes", "", "", "")),
            "a list has no name"
        );
        let all = rule(&["*"], &["*"], &["*"], &[]);
        assert!(rule_allows(
            &all,
            &res(
                "deletecollection",
                "rbac.authorization.k8s.io",
                "roles",
                "",
                "a",
                ""
            )
        ));
        assert!(
            !rule_allows(&all, &Attributes::path("get", "/healthz")),
            "resources are not paths"
        );
        let paths = PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: vec!["/healthz".into(), "/apis/*".into()],
            ..PolicyRule::default()
        };
        assert!(rule_allows(&paths, &Attributes::path("get", "/healthz")));
        assert!(rule_allows(
            &paths,
            &Attributes::path("get", "/apis/apps/v1")
        ));
        assert!(!rule_allows(
            &paths,
            &Attributes::path("get", "/healthz/etcd")
        ));
        assert!(!rule_allows(&paths, &Attributes::path("post", "/healthz")));
    }

    /// RoleBindings grant in their namespace only; ClusterRoleBindings everywhere; groups and
    /// service accounts are subjects; a binding to a missing role grants nothing.
    #[test]
    fn bindings_scope_their_grants() {
        let read_pods = rule(&["get", "list", "watch"], &[""], &["pods"], &[]);
        let rules = Rules::new(
            &[Role {
                metadata: meta("team", "reader"),
                rules: vec![read_pods.clone()],
                ..Role::default()
            }],
            &[ClusterRole {
                metadata: meta("", "nodes-reader"),
                rules: vec![rule(&["get"], &[""], &["nodes"], &[])],
                ..ClusterRole::default()
            }],
            &[
                RoleBinding {
                    metadata: meta("team", "alice-reads"),
                    subjects: vec![
                        subject("User", "alice", ""),
                        subject("ServiceAccount", "ci", ""),
                    ],
                    role_ref: role_ref("Role", "reader"),
                    ..RoleBinding::default()
                },
                RoleBinding {
                    metadata: meta("team", "dangling"),
                    subjects: vec![subject("User", "carol", "")],
                    role_ref: role_ref("Role", "missing"),
                    ..RoleBinding::default()
                },
            ],
            &[ClusterRoleBinding {
                metadata: meta("", "ops-nodes"),
                subjects: vec![subject("Group", "ops", "")],
                role_ref: role_ref("ClusterRole", "nodes-reader"),
                ..ClusterRoleBinding::default()
            }],
        );
        let alice = user("alice", &[]);
        let why = rules
            .allows(&alice, &res("list", "", "pods", "", "team", ""))
            .expect("alice lists pods in team");
        assert_eq!(
            why,
            "allowed by RoleBinding \"team/alice-reads\" of Role \"reader\" to User \"alice\""
        );
        assert_eq!(
            rules.allows(&alice, &res("list", "", "pods", "", "other", "")),
            None
        );
        assert_eq!(
            rules.allows(&alice, &res("get", "", "nodes", "", "", "n1")),
            None
        );
        let ci = user("system:serviceaccount:team:ci", &[]);
        assert!(
            rules
                .allows(&ci, &res("watch", "", "pods", "", "team", ""))
                .is_some()
        );
        let bob = user("bob", &["ops"]);
        assert!(
            rules
                .allows(&bob, &res("get", "", "nodes", "", "", "n1"))
                .is_some()
        );
        assert_eq!(
            rules.allows(&bob, &res("get", "", "pods", "", "team", "x")),
            None
        );
        let carol = user("carol", &[]);
        assert_eq!(
            rules.allows(&carol, &res("get", "", "pods", "", "team", "x")),
            None
        );
    }
}
