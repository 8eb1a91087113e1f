//! The ClusterRoles and ClusterRoleBindings a cluster starts with, as kube-apiserver's
//! bootstrap policy has them (for the resources Skiff serves): `cluster-admin` for
//! `system:masters`; discovery and health for everyone; `kubectl auth can-i` for every
//! authenticated user; the user-facing `admin`, `edit` and `view`; and the roles of Skiff's
//! own components, bound to the users their certificates name.
//!
//! `system:node` is bound to no one: node agents are authorized by the node authorizer
//! ([`super::node`]), which confines each to its own Node and pods.
//!
//! Each member creates the ones that are missing when it starts with RBAC on, and adds to
//! existing ones the rules and subjects they lack (see `cluster::rbac_policy`); one
//! annotated `rbac.authorization.kubernetes.io/autoupdate: "false"` is left as it is.

use skiff_proto::api::ObjectMeta;
use skiff_proto::api::rbac::{
    ClusterRole, ClusterRoleBinding, PolicyRule, RBAC_GROUP, RoleRef, Subject,
};

use super::authn::BOOTSTRAPPERS;
use super::{AUTHENTICATED, MASTERS, UNAUTHENTICATED};

/// The user the scheduler's certificate names.
pub const SCHEDULER: &str = "system:kube-scheduler";
/// The user the controller manager's certificate names.
pub const CONTROLLER_MANAGER: &str = "system:kube-controller-manager";
pub use super::NODES;
/// The user of the certificate members present to node agents (kubeadm's name for
/// kube-apiserver's `--kubelet-client-certificate`).
pub const KUBELET_CLIENT: &str = "kube-apiserver-kubelet-client";

/// The label Kubernetes puts on its bootstrap objects.
const BOOTSTRAP_LABEL: (&str, &str) = ("kubernetes.io/bootstrapping", "rbac-defaults");

/// The annotation that keeps a bootstrap object from being reconciled when `"false"`.
pub const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";

const CERTIFICATES: &str = "certificates.k8s.io";
/// The role that lets joining nodes (bootstrap tokens) ask for certificates.
pub const NODE_BOOTSTRAPPER: &str = "system:node-bootstrapper";
/// The roles the controller manager's approver asks about (through a SubjectAccessReview of
/// `create certificatesigningrequests/nodeclient` or `/selfnodeclient`) before it approves a
/// node's client certificate: a new node's, asked with a bootstrap token, and a node's
/// renewal of its own.
pub const NODE_CLIENT: &str = "system:certificates.k8s.io:certificatesigningrequests:nodeclient";
pub const SELF_NODE_CLIENT: &str =
    "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient";

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const ALL_VERBS: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "delete",
    "deletecollection",
    "patch",
    "update",
];

fn strings(l: &[&str]) -> Vec<String> {
    l.iter().map(|s| s.to_string()).collect()
}

fn rule(verbs: &[&str], group: &str, resources: &[&str]) -> PolicyRule {
    PolicyRule {
        verbs: strings(verbs),
        api_groups: vec![group.to_owned()],
        resources: strings(resources),
        resource_names: vec![],
        non_resource_urls: vec![],
    }
}

fn paths(verbs: &[&str], urls: &[&str]) -> PolicyRule {
    PolicyRule {
        verbs: strings(verbs),
        non_resource_urls: strings(urls),
        ..PolicyRule::default()
    }
}

fn meta(name: &str) -> ObjectMeta {
    let mut m = ObjectMeta {
        name: name.to_owned(),
        ..ObjectMeta::default()
    };
    m.labels
        .insert(BOOTSTRAP_LABEL.0.to_owned(), BOOTSTRAP_LABEL.1.to_owned());
    m.annotations
        .insert(AUTOUPDATE.to_owned(), "true".to_owned());
    m
}

fn role(name: &str, rules: Vec<PolicyRule>) -> ClusterRole {
    ClusterRole {
        metadata: meta(name),
        rules,
        ..ClusterRole::default()
    }
}

/// A binding named as its role, to users or groups (`("Group", "system:masters")`).
fn binding(role: &str, subjects: &[(&str, &str)]) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(role),
        subjects: subjects
            .iter()
            .map(|(kind, name)| Subject {
                kind: (*kind).to_owned(),
                api_group: RBAC_GROUP.to_owned(),
                name: (*name).to_owned(),
                namespace: String::new(),
            })
            .collect(),
        role_ref: RoleRef {
            api_group: RBAC_GROUP.to_owned(),
            kind: "ClusterRole".to_owned(),
            name: role.to_owned(),
        },
        ..ClusterRoleBinding::default()
    }
}

/// What `view` reads: the namespaced objects, not Secrets nor access (roles, bindings), as
/// Kubernetes' `view` role.
fn view_rules() -> Vec<PolicyRule> {
    vec![
        rule(
            READ,
            "",
            &[
                "pods",
                "pods/log",
                "pods/status",
                "events",
                "limitranges",
                "resourcequotas",
                "resourcequotas/status",
                "namespaces",
                "namespaces/status",
                "bindings",
                "services",
                "services/status",
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "replicationcontrollers/status",
                "serviceaccounts",
            ],
        ),
        rule(READ, "discovery.k8s.io", &["endpointslices"]),
        rule(
            READ,
            "apps",
            &[
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
        ),
        rule(
            READ,
            "autoscaling",
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
        ),
        rule(
            READ,
            "batch",
            &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
        ),
        rule(
            READ,
            "policy",
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
        ),
        rule(
            READ,
            "networking.k8s.io",
            &["ingresses", "ingresses/status", "networkpolicies"],
        ),
    ]
}

/// What `edit` adds: writing the workloads and their pods, exec and attach, evictions, and
/// Secrets (which `view`, as in Kubernetes, does not read).
fn edit_rules() -> Vec<PolicyRule> {
    let mut rules = view_rules();
    rules.extend([
        rule(
            WRITE,
            "",
            &[
                "pods",
                "pods/eviction",
                "services",
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
            ],
        ),
        rule(WRITE, "discovery.k8s.io", &["endpointslices"]),
        rule(ALL_VERBS, "", &["secrets"]),
        rule(
            &["create", "get"],
            "",
            &["pods/exec", "pods/attach", "pods/portforward"],
        ),
        rule(&["create"], "", &["serviceaccounts/token"]),
        rule(
            WRITE,
            "apps",
            &[
                "deployments",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "daemonsets",
                "statefulsets",
                "statefulsets/scale",
            ],
        ),
        rule(WRITE, "autoscaling", &["horizontalpodautoscalers"]),
        rule(WRITE, "batch", &["cronjobs", "jobs"]),
        rule(WRITE, "policy", &["poddisruptionbudgets"]),
        rule(
            WRITE,
            "networking.k8s.io",
            &["ingresses", "networkpolicies"],
        ),
    ]);
    rules
}

/// What `admin` adds: granting access within the namespace.
fn admin_rules() -> Vec<PolicyRule> {
    let mut rules = edit_rules();
    rules.push(rule(ALL_VERBS, RBAC_GROUP, &["roles", "rolebindings"]));
    rules
}

/// The etcd services a leader-elected component holds its leadership key through (see
/// [`skiff_store::client_port`]).
fn leadership() -> PolicyRule {
    paths(
        &["post"],
        &[
            "/etcdserverpb.KV/*",
            "/etcdserverpb.Lease/*",
            "/etcdserverpb.Watch/*",
        ],
    )
}

fn scheduler_rules() -> Vec<PolicyRule> {
    vec![
        leadership(),
        rule(READ, "", &["pods", "nodes", "namespaces"]),
        // A pod of a claim bound to a local volume goes to that volume's node.
        rule(READ, "", &["persistentvolumeclaims", "persistentvolumes"]),
        rule(&["create"], "", &["pods/binding", "bindings"]),
        rule(&["patch", "update"], "", &["pods/status"]),
        // Preemption: victims are deleted; the budgets that protect pods are read.
        rule(&["delete"], "", &["pods"]),
        rule(READ, "policy", &["poddisruptionbudgets"]),
        rule(&["create", "patch", "update"], "", &["events"]),
    ]
}

fn controller_manager_rules() -> Vec<PolicyRule> {
    let signers = |verb: &str| PolicyRule {
        resource_names: strings(&[
            skiff_proto::api::certificates::KUBE_APISERVER_CLIENT_KUBELET,
            skiff_proto::api::certificates::KUBE_APISERVER_CLIENT,
        ]),
        ..rule(&[verb], CERTIFICATES, &["signers"])
    };
    vec![
        leadership(),
        rule(ALL_VERBS, "", &["pods", "events"]),
        rule(&["patch", "update"], "", &["pods/status"]),
        rule(
            &["get", "list", "watch", "update", "patch", "delete"],
            "",
            &["nodes"],
        ),
        rule(&["patch", "update"], "", &["nodes/status"]),
        rule(READ, "", &["namespaces", "resourcequotas", "limitranges"]),
        // The quota controller counts whatever kind a quota names; the namespace controller
        // deletes whatever a deleted namespace holds; the garbage collector watches every
        // kind, looks owners up, and deletes or releases dependents (kube-controller-manager's
        // `system:controller:generic-garbage-collector`).
        rule(
            &["get", "list", "watch", "update", "patch", "delete"],
            "*",
            &["*"],
        ),
        rule(
            &["update"],
            "",
            &["namespaces/finalize", "namespaces/status"],
        ),
        rule(&["update"], "", &["resourcequotas/status"]),
        rule(ALL_VERBS, "apps", &["deployments", "replicasets"]),
        // The DaemonSet controller.
        rule(&["get", "list", "watch"], "apps", &["daemonsets"]),
        rule(&["update", "patch"], "apps", &["daemonsets/status"]),
        rule(ALL_VERBS, "apps", &["controllerrevisions"]),
        // The StatefulSet controller: its pods' claims, which it may give to a pod to
        // collect.
        rule(&["get", "list", "watch"], "apps", &["statefulsets"]),
        rule(&["update", "patch"], "apps", &["statefulsets/status"]),
        rule(
            &[
                "get", "list", "watch", "create", "update", "patch", "delete",
            ],
            "",
            &["persistentvolumeclaims", "persistentvolumes"],
        ),
        // The local provisioner: its StorageClass, claims and volumes bound.
        rule(
            &["update", "patch"],
            "",
            &["persistentvolumeclaims/status", "persistentvolumes/status"],
        ),
        rule(
            &["get", "list", "watch", "create"],
            "storage.k8s.io",
            &["storageclasses"],
        ),
        // The Job and CronJob controllers.
        rule(ALL_VERBS, "batch", &["jobs"]),
        rule(
            &["get", "list", "watch", "update", "patch"],
            "batch",
            &["cronjobs"],
        ),
        rule(
            &["update", "patch"],
            "batch",
            &[
                "jobs/status",
                "jobs/finalizers",
                "cronjobs/status",
                "cronjobs/finalizers",
            ],
        ),
        rule(
            &["patch", "update"],
            "apps",
            &["deployments/status", "replicasets/status"],
        ),
        // The disruption controller: budgets' status, from the scale of their pods'
        // controllers.
        rule(
            &["get", "list", "watch"],
            "policy",
            &["poddisruptionbudgets"],
        ),
        rule(&["update"], "policy", &["poddisruptionbudgets/status"]),
        rule(&["get", "list", "watch"], "", &["replicationcontrollers"]),
        // The EndpointSlice controller.
        rule(READ, "", &["services"]),
        rule(ALL_VERBS, "discovery.k8s.io", &["endpointslices"]),
        rule(ALL_VERBS, "", &["endpoints"]),
        // The ServiceAccount controller: a `default` one in every namespace.
        rule(&["create"], "", &["serviceaccounts"]),
        // The root CA publisher: `kube-root-ca.crt` in every namespace.
        rule(&["create", "update"], "", &["configmaps"]),
        // The approver and the signer of certificate requests.
        rule(
            &["get", "list", "watch", "delete"],
            CERTIFICATES,
            &["certificatesigningrequests"],
        ),
        rule(
            &["update"],
            CERTIFICATES,
            &[
                "certificatesigningrequests/approval",
                "certificatesigningrequests/status",
            ],
        ),
        signers("approve"),
        signers("sign"),
        rule(
            &["create"],
            "authorization.k8s.io",
            &["subjectaccessreviews"],
        ),
    ]
}

/// What a node agent does, to every node and pod: bound to no one by default (see
/// [`cluster_role_bindings`]).
fn node_rules() -> Vec<PolicyRule> {
    vec![
        rule(
            &[
                "get", "list", "watch", "create", "update", "patch", "delete",
            ],
            "",
            &["nodes"],
        ),
        rule(&["patch", "update"], "", &["nodes/status"]),
        rule(&["get", "list", "watch", "delete"], "", &["pods"]),
        rule(&["patch", "update"], "", &["pods/status"]),
        rule(&["create", "patch", "update"], "", &["events"]),
        rule(READ, "", &["namespaces"]),
        // What pods' volumes and environment read, and their service accounts' tokens (the
        // node authorizer narrows a node agent to what its own pods name).
        rule(READ, "", &["configmaps", "secrets", "services"]),
        rule(READ, "discovery.k8s.io", &["endpointslices"]),
        rule(
            &["get"],
            "",
            &["persistentvolumeclaims", "persistentvolumes"],
        ),
        rule(&["create"], "", &["serviceaccounts/token"]),
        rule(
            &["create", "get", "list", "watch"],
            CERTIFICATES,
            &["certificatesigningrequests"],
        ),
        // The agent asks whether a caller of its port may read a pod's log or exec into it.
        rule(
            &["create"],
            "authorization.k8s.io",
            &["subjectaccessreviews"],
        ),
    ]
}

/// What the API server does through node agents on its clients' behalf (after authorizing
/// them): read pods' logs, exec, attach and forward ports.
fn kubelet_api_rules() -> Vec<PolicyRule> {
    vec![
        rule(&["get"], "", &["pods/log"]),
        rule(
            &["create", "get"],
            "",
            &["pods/exec", "pods/attach", "pods/portforward"],
        ),
    ]
}

/// The bootstrap ClusterRoles.
pub fn cluster_roles() -> Vec<ClusterRole> {
    vec![
        role(
            "cluster-admin",
            vec![rule(&["*"], "*", &["*"]), paths(&["*"], &["*"])],
        ),
        role(
            "system:discovery",
            vec![paths(
                &["get"],
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/openapi",
                    "/openapi/*",
                    "/version",
                    "/version/",
                ],
            )],
        ),
        role(
            "system:public-info-viewer",
            vec![paths(
                &["get"],
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
            )],
        ),
        role(
            "system:basic-user",
            vec![
                rule(
                    &["create"],
                    "authorization.k8s.io",
                    &["selfsubjectaccessreviews"],
                ),
                rule(
                    &["create"],
                    "authentication.k8s.io",
                    &["selfsubjectreviews"],
                ),
            ],
        ),
        role("view", view_rules()),
        role("edit", edit_rules()),
        role("admin", admin_rules()),
        role(SCHEDULER, scheduler_rules()),
        role(CONTROLLER_MANAGER, controller_manager_rules()),
        role("system:node", node_rules()),
        role("system:kubelet-api-admin", kubelet_api_rules()),
        role(
            NODE_BOOTSTRAPPER,
            vec![rule(
                &["create", "get", "list", "watch"],
                CERTIFICATES,
                &["certificatesigningrequests"],
            )],
        ),
        role(
            NODE_CLIENT,
            vec![rule(
                &["create"],
                CERTIFICATES,
                &["certificatesigningrequests/nodeclient"],
            )],
        ),
        role(
            SELF_NODE_CLIENT,
            vec![rule(
                &["create"],
                CERTIFICATES,
                &["certificatesigningrequests/selfnodeclient"],
            )],
        ),
    ]
}

/// The bootstrap ClusterRoleBindings.
pub fn cluster_role_bindings() -> Vec<ClusterRoleBinding> {
    vec![
        binding("cluster-admin", &[("Group", MASTERS)]),
        binding("system:discovery", &[("Group", AUTHENTICATED)]),
        binding(
            "system:public-info-viewer",
            &[("Group", AUTHENTICATED), ("Group", UNAUTHENTICATED)],
        ),
        binding("system:basic-user", &[("Group", AUTHENTICATED)]),
        binding(SCHEDULER, &[("User", SCHEDULER)]),
        binding(CONTROLLER_MANAGER, &[("User", CONTROLLER_MANAGER)]),
        // As in Kubernetes, nobody: the node authorizer confines each agent to its own
        // Node and pods. A binding of this role grants a process every node's (Skiff's
        // simulated nodes, many in one process, are given it by `skiff up`).
        binding("system:node", &[]),
        binding("system:kubelet-api-admin", &[("User", KUBELET_CLIENT)]),
        // Joining nodes ask for their certificates with bootstrap tokens, and those
        // requests are approved; so are nodes' renewals of their own (kubeadm's bindings).
        binding(NODE_BOOTSTRAPPER, &[("Group", BOOTSTRAPPERS)]),
        binding(NODE_CLIENT, &[("Group", BOOTSTRAPPERS)]),
        binding(SELF_NODE_CLIENT, &[("Group", NODES)]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_proto::api::{Object, validation};

    /// Every bootstrap object is valid, and every binding names a bootstrap role.
    #[test]
    fn bootstrap_objects_are_valid() {
        let roles = cluster_roles();
        for r in &roles {
            validation::validate(&Object::ClusterRole(r.clone()))
                .unwrap_or_else(|e| panic!("{}: {e}", r.metadata.name));
        }
        for b in cluster_role_bindings() {
            validation::validate(&Object::ClusterRoleBinding(b.clone()))
                .unwrap_or_else(|e| panic!("{}: {e}", b.metadata.name));
            assert!(
                roles.iter().any(|r| r.metadata.name == b.role_ref.name),
                "{}",
                b.role_ref.name
            );
        }
    }
}
