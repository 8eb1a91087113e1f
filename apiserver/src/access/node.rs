//! The node authorizer and NodeRestriction: a node agent (`system:node:<name>` in
//! `system:nodes`) may touch its own Node and the pods bound to it, and nothing of its
//! neighbours', as kube-apiserver's Node mode and NodeRestriction admission confine kubelets.
//!
//! | request of node N | allowed when |
//! |---|---|
//! | update, patch, delete `nodes` (and `nodes/status`) | the node is N |
//! | create `nodes` | always here; NodeRestriction then requires the name N |
//! | get, list, watch `nodes` | always (it routes to every node's pod network, as kubelets may read every Node) |
//! | get, update, patch, delete `pods` (and `pods/status`) | the stored pod is bound to N |
//! | list, watch `pods` | the field selector pins `spec.nodeName=N` |
//! | create, update, patch `events` | always |
//! | create `subjectaccessreviews` | always (the agent asks about callers of its port) |
//! | create, get, list, watch `certificatesigningrequests` | always (renewing its certificate) |
//! | get, list, watch `services`, `endpointslices` | always (it programs every Service's rules) |
//! | get `configmaps`, `secrets` (list, watch: the field selector pins `metadata.name`) | a pod bound to N in the namespace references it |
//! | get `persistentvolumeclaims` | a pod bound to N in the namespace mounts it |
//! | get `persistentvolumes` | always, one at a time (the agent asks whether the volume of a local directory still exists, and its reclaim policy, before it removes the directory) |
//! | create `serviceaccounts/token` | a pod bound to N in the namespace runs as the account |
//!
//! What the pods bound to each node reference is the [`Graph`]'s to say (the cluster API's
//! answer is an index kept from a watch on pods, [`super::graph`]), as kube-apiserver's Node
//! authorizer walks its graph of pods, nodes and the objects pods name.
//!
//! Anything else gets no opinion here, and the next mode (RBAC) decides; a node user is
//! bound to no role by the bootstrap policy, so that is a refusal unless an administrator
//! grants more. NodeRestriction ([`restrict`]) then holds what a node writes to its own
//! Node: not another node's name, not labels under `node-restriction.kubernetes.io/`, not
//! taints; and the tokens a node asks for must be bound to a pod bound to it (checked where
//! the token's bound object is known, `cluster::token`, with [`TOKEN_NOT_BOUND`] and its
//! siblings).

use skiff_proto::api::{Kind, Object};
use skiff_proto::selector::FieldQuery;

use super::{Attributes, NODES, User};

/// The prefix of a node agent's user name.
const NODE_USER: &str = skiff_proto::api::node::NODE_USER_PREFIX;

/// Labels a node may not give itself (they are for administrators to steer workloads to
/// nodes that cannot claim them).
pub const RESTRICTED_LABELS: &str = "node-restriction.kubernetes.io/";

/// The node `user` is the agent of, when it is one.
pub fn node_of(user: &User) -> Option<&str> {
    let name = user.name.strip_prefix(NODE_USER)?;
    (!name.is_empty() && user.groups.iter().any(|g| g == NODES)).then_some(name)
}

/// NodeRestriction's refusal of a token a node asks for without a pod to bind it to.
pub const TOKEN_NOT_BOUND: &str = "node requested token not bound to a pod";
/// NodeRestriction's refusal of a token bound to a pod named without its uid.
pub const TOKEN_WITHOUT_UID: &str = "node requested token with a pod binding without a uid";
/// NodeRestriction's refusal of a token bound to another node's pod.
pub const TOKEN_OTHER_NODE: &str =
    "node requested token bound to a pod scheduled on a different node";

/// The kinds of object a pod references that its node may read (or, for a service account,
/// ask tokens of).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Referent {
    ConfigMap,
    Secret,
    /// A PersistentVolumeClaim.
    Claim,
    ServiceAccount,
}

impl Referent {
    pub const ALL: [Referent; 4] = [
        Referent::ConfigMap,
        Referent::Secret,
        Referent::Claim,
        Referent::ServiceAccount,
    ];
}

/// What the store knows that the decision needs.
pub trait Graph {
    /// The node a stored pod is bound to (empty when unbound); `None` when there is no
    /// such pod.
    fn pod_node(&self, namespace: &str, name: &str) -> Option<String>;

    /// Whether some pod bound to `node` in `namespace` references `referent` `name` (runs
    /// as it, for a service account).
    fn references(&self, node: &str, namespace: &str, referent: Referent, name: &str) -> bool;
}

/// `Some(reason)` when node `node` may make the request; `None`: no opinion.
pub fn allows(node: &str, attributes: &Attributes, graph: &dyn Graph) -> Option<String> {
    let Attributes::Resource(r) = attributes else {
        return None;
    };
    let asks_reviews = (r.group.as_str(), r.resource.as_str(), r.verb.as_str())
        == ("authorization.k8s.io", "subjectaccessreviews", "create");
    let asks_certificates = r.group == "certificates.k8s.io"
        && r.resource == "certificatesigningrequests"
        && r.subresource.is_empty()
        && matches!(r.verb.as_str(), "create" | "get" | "list" | "watch");
    // The agent programs every Service's rules (kube-proxy's part): it reads them all.
    let asks_services = matches!(
        (r.group.as_str(), r.resource.as_str()),
        ("", "services") | ("discovery.k8s.io", "endpointslices")
    ) && r.subresource.is_empty()
        && matches!(r.verb.as_str(), "get" | "list" | "watch");
    if asks_reviews || asks_certificates || asks_services {
        return Some(format!("allowed by the node authorizer to node {node:?}"));
    }
    if !r.group.is_empty() {
        return None;
    }
    let pinned = |field: &str| {
        let raw = r
            .field_selector
            .as_ref()
            .map(|f| f.raw_selector.as_str())
            .unwrap_or_default();
        let kind = Kind::from_plural(&r.resource).unwrap_or(Kind::Pod);
        FieldQuery::parse(kind, raw)
            .ok()
            .is_some_and(|q| q.equality(field) == Some(node))
    };
    // The one object a request names: a get's name, a list's or watch's pinned
    // `metadata.name` (kube-apiserver takes a list's name from that selector too).
    let named = || {
        match r.verb.as_str() {
            "list" | "watch" if r.name.is_empty() => {
                let raw = r
                    .field_selector
                    .as_ref()
                    .map(|f| f.raw_selector.as_str())
                    .unwrap_or_default();
                Kind::from_plural(&r.resource)
                    .and_then(|kind| FieldQuery::parse(kind, raw).ok())
                    .and_then(|q| q.equality("metadata.name").map(str::to_owned))
            }
            _ => Some(r.name.clone()),
        }
        .filter(|n| !n.is_empty())
    };
    let reaches = |referent: Referent| {
        !r.namespace.is_empty()
            && named().is_some_and(|n| graph.references(node, &r.namespace, referent, &n))
    };
    let sub = r.subresource.as_str();
    let allowed = match (r.resource.as_str(), sub, r.verb.as_str()) {
        ("nodes", "" | "status", "update" | "patch" | "delete") => r.name == node,
        // Reading: the agent routes to every node's pod CIDR through its address.
        ("nodes", "" | "status", "get" | "list" | "watch") => true,
        ("nodes", "", "create") => true,
        ("pods", "" | "status", "get" | "update" | "patch" | "delete") => {
            !r.name.is_empty() && graph.pod_node(&r.namespace, &r.name).as_deref() == Some(node)
        }
        ("pods", "", "list" | "watch") => pinned("spec.nodeName"),
        ("events", "", "create" | "update" | "patch") => true,
        ("configmaps", "", "get" | "list" | "watch") => reaches(Referent::ConfigMap),
        ("secrets", "", "get" | "list" | "watch") => reaches(Referent::Secret),
        // As kube-apiserver: a claim is read one at a time (the agent mounts each).
        ("persistentvolumeclaims", "", "get") => reaches(Referent::Claim),
        ("persistentvolumes", "", "get") => !r.name.is_empty(),
        ("serviceaccounts", "token", "create") => reaches(Referent::ServiceAccount),
        _ => false,
    };
    allowed.then(|| format!("allowed by the node authorizer to node {node:?}"))
}

/// NodeRestriction: what a node agent may write to a Node. `current` is the stored object
/// an update replaces (none for a create).
pub fn restrict(user: &User, current: Option<&Object>, next: &Object) -> Result<(), String> {
    let Some(node) = node_of(user) else {
        return Ok(());
    };
    let Object::Node(new) = next else {
        return Ok(());
    };
    if new.metadata.name != node {
        return Err(format!(
            "node {node:?} is not allowed to modify node {:?}",
            new.metadata.name
        ));
    }
    let restricted = |o: Option<&Object>| -> Vec<(String, String)> {
        o.map(|o| {
            o.metadata()
                .labels
                .iter()
                .filter(|(k, _)| k.starts_with(RESTRICTED_LABELS))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
    };
    if restricted(current) != restricted(Some(next)) {
        return Err(format!(
            "is not allowed to modify labels with the prefix {RESTRICTED_LABELS:?}"
        ));
    }
    let taints = |o: Option<&Object>| match o {
        Some(Object::Node(n)) => n.spec.taints.clone(),
        _ => Vec::new(),
    };
    if taints(current) != taints(Some(next)) {
        return Err("is not allowed to modify taints".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_proto::api::rbac::FieldSelectorAttributes;
    use std::collections::HashMap;

    /// Pods by namespace and name with their nodes, and what the pods of each node
    /// reference: `(node, namespace, referent, name)`.
    #[derive(Default)]
    struct Pods {
        nodes: HashMap<(&'static str, &'static str), &'static str>,
        references: Vec<(&'static str, &'static str, Referent, &'static str)>,
    }

    impl Pods {
        fn bound(nodes: &[((&'static str, &'static str), &'static str)]) -> Pods {
            Pods {
                nodes: nodes.iter().copied().collect(),
                references: Vec::new(),
            }
        }
    }

    impl Graph for Pods {
        fn pod_node(&self, namespace: &str, name: &str) -> Option<String> {
            self.nodes.get(&(namespace, name)).map(|n| n.to_string())
        }

        fn references(&self, node: &str, namespace: &str, referent: Referent, name: &str) -> bool {
            self.references.contains(&(node, namespace, referent, name))
        }
    }

    fn req(
        verb: &str,
        resource: &str,
        sub: &str,
        ns: &str,
        name: &str,
        fields: &str,
    ) -> Attributes {
        let mut a = Attributes::resource(
            verb,
            "",
            resource,
            Some(sub).filter(|s| !s.is_empty()),
            ns,
            name,
        );
        if let Attributes::Resource(r) = &mut a
            && !fields.is_empty()
        {
            r.field_selector = Some(FieldSelectorAttributes {
                raw_selector: fields.into(),
            });
        }
        a
    }

    /// Node n1 writes its own Node and reaches its own pods, never n2's, and lists pods only
    /// through the selector that names itself; it reads every Node.
    #[test]
    fn a_node_sees_only_its_own() {
        let graph = Pods::bound(&[
            (("default", "mine"), "n1"),
            (("default", "theirs"), "n2"),
            (("default", "pending"), ""),
        ]);
        #[rustfmt::skip]
        let table = [
            (req("get", "nodes", "", "", "n1", ""), true),
            (req("update", "nodes", "status", "", "n1", ""), true),
            (req("get", "nodes", "", "", "n2", ""), true),
            (req("patch", "nodes", "status", "", "n2", ""), false),
            (req("update", "nodes", "", "", "n2", ""), false),
            (req("delete", "nodes", "", "", "n2", ""), false),
            (req("list", "nodes", "", "", "", ""), true),
            (req("watch", "nodes", "", "", "", "metadata.name=n1"), true),
            (req("get", "pods", "", "default", "mine", ""), true),
            (req("update", "pods", "status", "default", "mine", ""), true),
            (req("delete", "pods", "", "default", "mine", ""), true),
            (req("get", "pods", "", "default", "theirs", ""), false),
            (req("update", "pods", "status", "default", "theirs", ""), false),
            (req("get", "pods", "", "default", "pending", ""), false),
            (req("get", "pods", "", "default", "missing", ""), false),
            (req("list", "pods", "", "", "", ""), false),
            (req("watch", "pods", "", "", "", "spec.nodeName=n1"), true),
            (req("list", "pods", "", "", "", "spec.nodeName=n2"), false),
            (req("watch", "pods", "", "", "", "spec.nodeName!=n1"), false),
            (req("create", "pods", "", "default", "", ""), false),
            (req("create", "events", "", "default", "", ""), true),
            (req("get", "pods", "log", "default", "mine", ""), false),
            (Attributes::path("get", "/healthz"), false),
        ];
        for (a, want) in table {
            assert_eq!(allows("n1", &a, &graph).is_some(), want, "{a:?}");
        }
    }

    /// Node n1 reads the ConfigMaps, Secrets and claims its pods reference, one at a time or
    /// through a watch pinned to the name, in their namespace only, and asks tokens of the
    /// accounts its pods run as; nothing its neighbour's pods reference, nothing it would
    /// have to read whole, and no other verb.
    #[test]
    fn a_node_reads_what_its_pods_reference() {
        use Referent::*;
        let graph = Pods {
            references: vec![
                ("n1", "team", ConfigMap, "web-config"),
                ("n1", "team", Secret, "web-tls"),
                ("n1", "team", Claim, "web-data"),
                ("n1", "team", ServiceAccount, "web"),
                ("n2", "team", ConfigMap, "db-config"),
                ("n2", "team", Secret, "db-tls"),
                ("n2", "team", ServiceAccount, "db"),
            ],
            ..Pods::default()
        };
        let pinned = "metadata.name=web-config";
        #[rustfmt::skip]
        let table = [
            (req("get", "configmaps", "", "team", "web-config", ""), true),
            (req("watch", "configmaps", "", "team", "", pinned), true),
            (req("list", "configmaps", "", "team", "", pinned), true),
            (req("list", "configmaps", "", "team", "", ""), false),
            (req("watch", "configmaps", "", "team", "", "metadata.name!=web-config"), false),
            (req("list", "configmaps", "", "", "", pinned), false),
            (req("get", "configmaps", "", "other", "web-config", ""), false),
            (req("get", "configmaps", "", "team", "db-config", ""), false),
            (req("update", "configmaps", "", "team", "web-config", ""), false),
            (req("delete", "configmaps", "", "team", "web-config", ""), false),
            (req("get", "secrets", "", "team", "web-tls", ""), true),
            (req("watch", "secrets", "", "team", "", "metadata.name=web-tls"), true),
            (req("get", "secrets", "", "team", "db-tls", ""), false),
            (req("get", "secrets", "", "team", "web-config", ""), false),
            (req("list", "secrets", "", "team", "", ""), false),
            (req("create", "secrets", "", "team", "", ""), false),
            (req("get", "persistentvolumeclaims", "", "team", "web-data", ""), true),
            (req("list", "persistentvolumeclaims", "", "team", "", "metadata.name=web-data"), false),
            (req("update", "persistentvolumeclaims", "", "team", "web-data", ""), false),
            (req("get", "persistentvolumes", "", "", "pvc-1", ""), true),
            (req("list", "persistentvolumes", "", "", "", ""), false),
            (req("delete", "persistentvolumes", "", "", "pvc-1", ""), false),
            (req("create", "serviceaccounts", "token", "team", "web", ""), true),
            (req("create", "serviceaccounts", "token", "team", "db", ""), false),
            (req("create", "serviceaccounts", "token", "team", "", ""), false),
            (req("create", "serviceaccounts", "token", "other", "web", ""), false),
            (req("get", "serviceaccounts", "", "team", "web", ""), false),
            (req("create", "serviceaccounts", "", "team", "", ""), false),
        ];
        for (a, want) in table {
            assert_eq!(allows("n1", &a, &graph).is_some(), want, "{a:?}");
        }
    }

    fn node(name: &str, labels: &[(&str, &str)], taint: bool) -> Object {
        let mut v = serde_json::json!({"metadata": {"name": name, "labels": {}}, "spec": {}});
        for (k, l) in labels {
            v["metadata"]["labels"][*k] = (*l).into();
        }
        if taint {
            v["spec"]["taints"] = serde_json::json!([{"key": "k", "effect": "NoSchedule"}]);
        }
        Object::from_value(Kind::Node, v).expect("node")
    }

    #[test]
    fn node_restriction() {
        let n1 = User::named("system:node:n1", &[NODES]);
        let plain = node("n1", &[("zone", "a")], false);
        assert_eq!(restrict(&n1, None, &plain), Ok(()));
        assert!(restrict(&n1, None, &node("n2", &[], false)).is_err());
        let fenced = node(
            "n1",
            &[("node-restriction.kubernetes.io/pci", "yes")],
            false,
        );
        assert!(restrict(&n1, Some(&plain), &fenced).is_err());
        assert!(restrict(&n1, None, &fenced).is_err());
        // Kept as the administrator set it: fine.
        assert_eq!(restrict(&n1, Some(&fenced), &fenced), Ok(()));
        assert!(restrict(&n1, Some(&plain), &node("n1", &[("zone", "a")], true)).is_err());
        let admin = User::named("admin", &[super::super::MASTERS]);
        assert_eq!(restrict(&admin, Some(&plain), &fenced), Ok(()));
        assert_eq!(node_of(&admin), None);
    }
}
