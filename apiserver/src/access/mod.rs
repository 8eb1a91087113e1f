//! Who is asking, and whether they may: the Kubernetes API's authentication and
//! authorization, one implementation behind both faces (the REST API and the gRPC cluster
//! API), as kube-apiserver puts them in front of every request.
//!
//! ```text
//!  client certificate (CN, O) ─┐
//!  bearer token (token file)  ─┼─► authn ─► User { name, groups }
//!  neither: system:anonymous  ─┘                │
//!  the request: verb + resource or path ─► Attributes
//!                                               ▼
//!          system:masters ─► allowed; else each --authorization-mode in turn
//!          (AlwaysAllow; Node: an agent's own Node and pods; RBAC over the stored roles
//!          and bindings) ─► allowed, or 403
//! ```
//!
//! | module        | what                                                                 |
//! |---------------|----------------------------------------------------------------------|
//! | [`audit`]     | the audit log: kube-apiserver's events, JSON lines, a policy for levels |
//! | [`authn`]     | users from client certificates, the static token file, or anonymous  |
//! | [`node`]      | the node authorizer and NodeRestriction: an agent's own Node and pods only |
//! | [`graph`]     | what the pods bound to each node reference, for the node authorizer  |
//! | [`rbac`]      | what a set of roles and bindings allows (pure, the rules of Kubernetes' RBAC) |
//! | [`bootstrap`] | the ClusterRoles and ClusterRoleBindings every cluster starts with   |
//! | [`policy`]    | the store's roles and bindings, read again when the watch hub says they changed |

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use skiff_proto::api::rbac::{NonResourceAttributes, ResourceAttributes};

pub mod audit;
pub mod authn;
pub mod bootstrap;
pub mod graph;
pub mod node;
pub mod policy;
pub mod rbac;
pub mod serviceaccount;

pub use audit::AuditLog;
pub use authn::{Authenticator, User};
pub use policy::Policy;

/// The group whose members may do anything, whatever the roles say (kube-apiserver's
/// privileged group).
pub const MASTERS: &str = "system:masters";
/// The group of every node agent (`CN=system:node:<name>`).
pub const NODES: &str = skiff_proto::api::node::NODES_GROUP;
/// Every user who presented valid credentials.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group of the anonymous user.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// Who a request without credentials is, when anonymous requests are allowed.
pub const ANONYMOUS: &str = "system:anonymous";

/// What a request does, in the terms rules are written in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attributes {
    /// A verb on a resource (or one of its subresources), in a namespace or cluster-wide.
    Resource(ResourceAttributes),
    /// A verb (`get`, `post` ...) on a path that is no resource: `/healthz`, `/api`.
    NonResource(NonResourceAttributes),
}

impl Attributes {
    /// A verb on objects of a resource.
    pub fn resource(
        verb: &str,
        group: &str,
        resource: &str,
        subresource: Option<&str>,
        namespace: &str,
        name: &str,
    ) -> Attributes {
        Attributes::Resource(ResourceAttributes {
            namespace: namespace.to_owned(),
            verb: verb.to_owned(),
            group: group.to_owned(),
            version: String::new(),
            resource: resource.to_owned(),
            subresource: subresource.unwrap_or_default().to_owned(),
            name: name.to_owned(),
            field_selector: None,
        })
    }

    /// With the field selector of a list or watch (empty: none).
    pub fn with_fields(mut self, selector: &str) -> Attributes {
        if let Attributes::Resource(r) = &mut self
            && !selector.is_empty()
        {
            r.field_selector = Some(skiff_proto::api::rbac::FieldSelectorAttributes {
                raw_selector: selector.to_owned(),
            });
        }
        self
    }

    pub fn path(verb: &str, path: &str) -> Attributes {
        Attributes::NonResource(NonResourceAttributes {
            path: path.to_owned(),
            verb: verb.to_owned(),
        })
    }

    pub fn verb(&self) -> &str {
        match self {
            Attributes::Resource(r) => &r.verb,
            Attributes::NonResource(p) => &p.verb,
        }
    }
}

/// A request refused: kube-apiserver's 403, with its wording (`pods "web" is forbidden:
/// User "alice" cannot get resource "pods" in API group "" in the namespace "team"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forbidden {
    pub user: String,
    pub attributes: Attributes,
    /// Why the authorizers said no, when one said more than no.
    pub reason: String,
}

impl Forbidden {
    /// The resource a refusal concerns, qualified by its group (`deployments.apps`), as
    /// the Status details and message name it; empty for a path.
    pub fn qualified_resource(&self) -> String {
        match &self.attributes {
            Attributes::Resource(r) if r.group.is_empty() => r.resource.clone(),
            Attributes::Resource(r) => format!("{}.{}", r.resource, r.group),
            Attributes::NonResource(_) => String::new(),
        }
    }
}

impl fmt::Display for Forbidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let user = &self.user;
        match &self.attributes {
            Attributes::NonResource(p) => write!(
                f,
                "forbidden: User {user:?} cannot {} path {:?}",
                p.verb, p.path
            )?,
            Attributes::Resource(r) => {
                let qualified = self.qualified_resource();
                if r.name.is_empty() {
                    write!(f, "{qualified} is forbidden: ")?;
                } else {
                    write!(f, "{qualified} {:?} is forbidden: ", r.name)?;
                }
                let mut resource = r.resource.clone();
                if !r.subresource.is_empty() {
                    resource = format!("{resource}/{}", r.subresource);
                }
                write!(
                    f,
                    "User {user:?} cannot {} resource {resource:?} in API group {:?}",
                    r.verb, r.group
                )?;
                if r.namespace.is_empty() {
                    f.write_str(" at the cluster scope")?;
                } else {
                    write!(f, " in the namespace {:?}", r.namespace)?;
                }
            }
        }
        if !self.reason.is_empty() {
            write!(f, ": {}", self.reason)?;
        }
        Ok(())
    }
}

impl std::error::Error for Forbidden {}

/// No credentials that name a user (and anonymous requests are off), or credentials that
/// are wrong: kube-apiserver's 401, which says no more than `Unauthorized`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("Unauthorized")]
pub struct Unauthorized;

/// One authorizer of `--authorization-mode`; the modes are asked in order and the first
/// that allows a request lets it through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Everything is allowed: kube-apiserver's default, and a cluster without security.
    AlwaysAllow,
    /// Node agents reach their own Node and the pods bound to it ([`node`]).
    Node,
    /// Role-based access control over the stored roles and bindings.
    Rbac,
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "AlwaysAllow" => Ok(Mode::AlwaysAllow),
            "Node" => Ok(Mode::Node),
            "RBAC" => Ok(Mode::Rbac),
            other => Err(format!(
                "unknown authorization mode {other:?}: the modes are AlwaysAllow, Node and RBAC"
            )),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::AlwaysAllow => "AlwaysAllow",
            Mode::Node => "Node",
            Mode::Rbac => "RBAC",
        })
    }
}

/// A member's authentication and authorization settings (kube-apiserver's flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessConfig {
    /// `--authorization-mode`: asked in order.
    pub modes: Vec<Mode>,
    /// `--token-auth-file`: static bearer tokens (`token,user,uid,"group1,group2"`).
    pub token_auth_file: Option<PathBuf>,
    /// `--anonymous-auth`: a request without credentials is `system:anonymous` (else 401).
    pub anonymous: bool,
    /// Whether client certificates name users: `--client-ca-file` is given (certificates
    /// checked against another CA, etcd's, name no Kubernetes user).
    pub client_certs: bool,
    /// `--audit-log-path` and `--audit-policy-file`: the REST API's audit log.
    pub audit: Option<AuditConfig>,
    /// `--enable-bootstrap-token-auth`: bootstrap tokens (Secrets in `kube-system`)
    /// authenticate joining nodes.
    pub bootstrap_tokens: bool,
    /// `--kubelet-certificate-authority`, `--kubelet-client-certificate` and
    /// `--kubelet-client-key`: how this member reaches node agents that serve TLS (for
    /// `pods/log`, `pods/exec`, `pods/attach`).
    pub kubelet: Option<skiff_proto::tls::ClientTls>,
    /// `--service-account-signing-key-file`, `--service-account-key-file`,
    /// `--service-account-issuer`, `--api-audiences`: service account tokens.
    pub service_accounts: Option<serviceaccount::ServiceAccountConfig>,
}

/// Where the audit log goes, its policy (none: every request at `Metadata`) and its rotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    pub path: PathBuf,
    pub policy: Option<PathBuf>,
    pub rotation: audit::Rotation,
}

/// Settings that could not be used at start.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("--token-auth-file {0}")]
    Tokens(#[from] authn::TokenFileError),
    #[error("--audit-policy-file {0}")]
    Policy(#[from] audit::PolicyError),
    #[error("--audit-log-path {}: {source}", path.display())]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--kubelet-client-certificate and its CA: {0}")]
    Kubelet(#[from] skiff_proto::tls::TlsFileError),
    #[error("--service-account-signing-key-file / --service-account-key-file {0}")]
    ServiceAccountKey(#[from] serviceaccount::KeyError),
}

impl Default for AccessConfig {
    fn default() -> AccessConfig {
        AccessConfig {
            modes: vec![Mode::AlwaysAllow],
            token_auth_file: None,
            anonymous: true,
            client_certs: false,
            audit: None,
            bootstrap_tokens: false,
            kubelet: None,
            service_accounts: None,
        }
    }
}

impl AccessConfig {
    pub fn rbac(&self) -> bool {
        self.modes.contains(&Mode::Rbac)
    }
}

/// What the authorizers may ask of the store about a request.
pub trait Facts: node::Graph {
    /// RBAC's view of the stored roles and bindings.
    fn rules(&self) -> Arc<rbac::Rules>;

    /// The same read again, when what [`Facts::rules`] gave may be behind the store (for a
    /// request it denied); `None` when it is not.
    fn reread_rules(&self) -> Option<Arc<rbac::Rules>> {
        None
    }
}

/// The decision of the authorizers, with why (the answer of an access review).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
}

/// Authentication and authorization of one member, shared by both faces.
#[derive(Debug)]
pub struct Access {
    pub config: AccessConfig,
    authn: Authenticator,
    policy: Arc<Policy>,
    /// What the pods bound to each node reference (the node authorizer's).
    graph: Arc<graph::NodeGraph>,
    /// The audit log, when one is kept.
    pub audit: Option<AuditLog>,
    /// This member's TLS to node agents (read at start).
    pub kubelet: Option<tonic::transport::ClientTlsConfig>,
    /// Service account tokens' keys (read at start), when configured.
    pub service_account_tokens: Option<Arc<serviceaccount::Tokens>>,
}

impl Access {
    /// Reads the token file and the audit policy and opens the audit log (its writer runs on
    /// the current runtime), when configured; any that cannot be used fails the start.
    pub fn new(config: AccessConfig) -> Result<Access, AccessError> {
        let service_account_tokens = match &config.service_accounts {
            Some(c) => serviceaccount::Tokens::load(c)?.map(Arc::new),
            None => None,
        };
        let authn = Authenticator::new(
            config.token_auth_file.as_deref(),
            config.anonymous,
            config.bootstrap_tokens,
        )?
        .with_service_accounts(service_account_tokens.clone());
        let audit = match &config.audit {
            Some(a) => {
                let policy = match &a.policy {
                    Some(p) => audit::Policy::load(p)?,
                    None => audit::Policy::metadata_for_all(),
                };
                Some(
                    AuditLog::open(&a.path, policy, a.rotation).map_err(|source| {
                        AccessError::Log {
                            path: a.path.clone(),
                            source,
                        }
                    })?,
                )
            }
            None => None,
        };
        let kubelet = config.kubelet.as_ref().map(|k| k.config()).transpose()?;
        Ok(Access {
            config,
            authn,
            policy: Arc::new(Policy::default()),
            graph: Arc::default(),
            audit,
            kubelet,
            service_account_tokens,
        })
    }

    /// Everything allowed, no token file: a member without security.
    pub fn open() -> Access {
        Access::new(AccessConfig::default()).expect("invariant: no file to read")
    }

    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// The node authorizer's graph (kept current under the `Node` mode).
    pub fn graph(&self) -> &Arc<graph::NodeGraph> {
        &self.graph
    }

    /// Whether the node authorizer is one of the modes.
    pub fn node_mode(&self) -> bool {
        self.config.modes.contains(&Mode::Node)
    }

    /// Who a request comes from; `secrets` holds the bootstrap tokens.
    pub fn authenticate(
        &self,
        bearer: Option<&str>,
        cert: Option<&skiff_store::tls::Subject>,
        secrets: &dyn authn::Credentials,
    ) -> Result<User, Unauthorized> {
        self.authn
            .authenticate(bearer, cert.filter(|_| self.config.client_certs), secrets)
    }

    /// What the authorizers say of `user` doing `attributes`; `facts` gives what they read
    /// of the store (asked only by the modes that need it).
    pub fn decide(&self, user: &User, attributes: &Attributes, facts: &dyn Facts) -> Decision {
        if user.groups.iter().any(|g| g == MASTERS) {
            return Decision {
                allowed: true,
                reason: format!("allowed to the group {MASTERS:?}"),
            };
        }
        for mode in &self.config.modes {
            let reason = match mode {
                Mode::AlwaysAllow => Some(String::new()),
                Mode::Node => node::node_of(user).and_then(|n| node::allows(n, attributes, facts)),
                Mode::Rbac => facts
                    .rules()
                    .allows(user, attributes)
                    .map(|r| format!("RBAC: {r}")),
            };
            if let Some(reason) = reason {
                return Decision {
                    allowed: true,
                    reason,
                };
            }
        }
        // Denied by rules that may not hold a binding the store has applied already.
        if self.config.rbac()
            && let Some(rules) = facts.reread_rules()
            && let Some(r) = rules.allows(user, attributes)
        {
            return Decision {
                allowed: true,
                reason: format!("RBAC: {r}"),
            };
        }
        Decision {
            allowed: false,
            reason: String::new(),
        }
    }

    /// Whether every authorizer is `AlwaysAllow`: nothing to check, no user to find.
    pub fn allows_everything(&self) -> bool {
        self.config.modes.first() == Some(&Mode::AlwaysAllow)
    }

    /// `Ok` when allowed, else the 403 to answer.
    pub fn check(
        &self,
        user: &User,
        attributes: Attributes,
        facts: &dyn Facts,
    ) -> Result<(), Box<Forbidden>> {
        let d = self.decide(user, &attributes, facts);
        if d.allowed {
            Ok(())
        } else {
            Err(Box::new(Forbidden {
                user: user.name.clone(),
                attributes,
                reason: d.reason,
            }))
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header value.
pub fn bearer(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> User {
        User::named(name, groups)
    }

    /// Refusals read as kube-apiserver's, for every shape of request.
    #[test]
    fn forbidden_messages() {
        let f = |attributes| {
            Forbidden {
                user: "alice".into(),
                attributes,
                reason: String::new(),
            }
            .to_string()
        };
        assert_eq!(
            f(Attributes::resource("list", "", "pods", None, "team", "")),
            "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"team\""
        );
        assert_eq!(
            f(Attributes::resource(
                "get",
                "apps",
                "deployments",
                Some("scale"),
                "team",
                "web"
            )),
            "deployments.apps \"web\" is forbidden: User \"alice\" cannot get resource \"deployments/scale\" in API group \"apps\" in the namespace \"team\""
        );
        assert_eq!(
            f(Attributes::resource("list", "", "nodes", None, "", "")),
            "nodes is forbidden: User \"alice\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"
        );
        assert_eq!(
            f(Attributes::path("get", "/metrics")),
            "forbidden: User \"alice\" cannot get path \"/metrics\""
        );
    }

    /// No roles, no pods.
    struct Empty;

    impl node::Graph for Empty {
        fn pod_node(&self, _: &str, _: &str) -> Option<String> {
            None
        }

        fn references(&self, _: &str, _: &str, _: node::Referent, _: &str) -> bool {
            false
        }
    }

    impl Facts for Empty {
        fn rules(&self) -> Arc<rbac::Rules> {
            Arc::new(rbac::Rules::default())
        }
    }

    /// The privileged group needs no role; AlwaysAllow allows; RBAC alone allows nothing
    /// it does not grant; the node authorizer speaks for node agents only.
    #[test]
    fn modes_in_order() {
        let none = &Empty;
        let get = Attributes::resource("get", "", "pods", None, "team", "web");
        let rbac_only = Access::new(AccessConfig {
            modes: vec![Mode::Rbac],
            ..AccessConfig::default()
        })
        .unwrap();
        assert!(
            rbac_only
                .decide(&user("root", &[MASTERS]), &get, none)
                .allowed
        );
        assert!(
            !rbac_only
                .decide(&user("alice", &[AUTHENTICATED]), &get, none)
                .allowed
        );
        let open = Access::open();
        assert!(open.allows_everything());
        assert!(open.decide(&user("alice", &[]), &get, none).allowed);
        let e = rbac_only
            .check(&user("alice", &[]), get, none)
            .expect_err("no role");
        assert!(
            e.to_string().starts_with("pods \"web\" is forbidden"),
            "{e}"
        );
        assert_eq!(
            "Nodes".parse::<Mode>().map_err(|e| e.contains("RBAC")),
            Err(true)
        );
        let node_rbac = Access::new(AccessConfig {
            modes: vec![Mode::Node, Mode::Rbac],
            ..AccessConfig::default()
        })
        .unwrap();
        let n1 = user("system:node:n1", &[NODES]);
        let own = Attributes::resource("get", "", "nodes", None, "", "n1");
        assert!(node_rbac.decide(&n1, &own, none).allowed);
        assert!(
            !node_rbac
                .decide(&user("system:node:n1", &[]), &own, none)
                .allowed
        );
        assert!(
            !node_rbac
                .decide(&user("alice", &[NODES]), &own, none)
                .allowed
        );
    }

    /// Rules behind the store (their watch has not reported a new binding yet): a request
    /// they deny is decided again by the rules read afresh, and a request they allow costs
    /// no reread.
    struct Behind {
        fresh: Option<Arc<rbac::Rules>>,
        rereads: std::cell::Cell<usize>,
    }

    impl node::Graph for Behind {
        fn pod_node(&self, _: &str, _: &str) -> Option<String> {
            None
        }

        fn references(&self, _: &str, _: &str, _: node::Referent, _: &str) -> bool {
            false
        }
    }

    impl Facts for Behind {
        fn rules(&self) -> Arc<rbac::Rules> {
            Arc::new(rbac::Rules::default())
        }

        fn reread_rules(&self) -> Option<Arc<rbac::Rules>> {
            self.rereads.set(self.rereads.get() + 1);
            self.fresh.clone()
        }
    }

    #[test]
    fn a_denial_rereads_rules_that_may_be_behind_the_store() {
        use skiff_proto::api::ObjectMeta;
        use skiff_proto::api::rbac::{
            ClusterRole, ClusterRoleBinding, PolicyRule, RBAC_GROUP, RoleRef, Subject,
        };
        let scheduler = ClusterRoleBinding {
            metadata: ObjectMeta {
                name: "scheduler".into(),
                ..ObjectMeta::default()
            },
            subjects: vec![Subject {
                kind: "User".into(),
                api_group: RBAC_GROUP.into(),
                name: "system:kube-scheduler".into(),
                namespace: String::new(),
            }],
            role_ref: RoleRef {
                api_group: RBAC_GROUP.into(),
                kind: "ClusterRole".into(),
                name: "pods".into(),
            },
            ..ClusterRoleBinding::default()
        };
        let pods = ClusterRole {
            metadata: ObjectMeta {
                name: "pods".into(),
                ..ObjectMeta::default()
            },
            rules: vec![PolicyRule {
                verbs: vec!["list".into()],
                api_groups: vec![String::new()],
                resources: vec!["pods".into()],
                ..PolicyRule::default()
            }],
            ..ClusterRole::default()
        };
        let rbac = Access::new(AccessConfig {
            modes: vec![Mode::Rbac],
            ..AccessConfig::default()
        })
        .unwrap();
        let list = Attributes::resource("list", "", "pods", None, "", "");
        let who = user("system:kube-scheduler", &[AUTHENTICATED]);
        let behind = Behind {
            fresh: Some(Arc::new(rbac::Rules::new(&[], &[pods], &[], &[scheduler]))),
            rereads: Default::default(),
        };
        let d = rbac.decide(&who, &list, &behind);
        assert!(d.allowed, "denied by rules behind the store");
        assert!(d.reason.starts_with("RBAC: "), "{}", d.reason);
        assert_eq!(behind.rereads.get(), 1);
        // Rules that are current (nothing to reread) still deny.
        let current = Behind {
            fresh: None,
            rereads: Default::default(),
        };
        assert!(!rbac.decide(&who, &list, &current).allowed);
        // The privileged group is allowed without any rules, and without a reread.
        assert!(
            rbac.decide(&user("root", &[MASTERS]), &list, &current)
                .allowed
        );
        assert_eq!(current.rereads.get(), 1);
    }

    #[test]
    fn bearer_headers() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
    }
}
