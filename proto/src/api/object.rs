//! One enum over every kind, with the conversions every layer needs: JSON (wire and storage),
//! storage keys, and metadata access.

use std::fmt;

use super::apps::{Deployment, ReplicaSet};
use super::certificates::CertificateSigningRequest;
use super::event::Event;
use super::meta::ObjectMeta;
use super::namespace::{Binding, LimitRange, Namespace, ResourceQuota};
use super::node::Node;
use super::pod::Pod;
use super::rbac::{AccessReview, ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use super::registry::{GenericKind, GenericObject};
use super::secret::Secret;
use super::service::{EndpointSlice, Service};

/// The kinds the cluster API serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Pod,
    Node,
    Namespace,
    ResourceQuota,
    LimitRange,
    Binding,
    Event,
    Deployment,
    ReplicaSet,
    Role,
    ClusterRole,
    RoleBinding,
    ClusterRoleBinding,
    /// Asked, answered, never stored.
    SubjectAccessReview,
    /// Asked, answered, never stored.
    SelfSubjectAccessReview,
    Secret,
    CertificateSigningRequest,
    Service,
    EndpointSlice,
    /// A kind served from its declaration ([`super::registry`]).
    Generic(GenericKind),
}

impl Kind {
    /// The kinds with types of their own; [`Kind::all`] adds the declared ones.
    pub const ALL: [Kind; 19] = [
        Kind::Pod,
        Kind::Node,
        Kind::Namespace,
        Kind::ResourceQuota,
        Kind::LimitRange,
        Kind::Binding,
        Kind::Event,
        Kind::Deployment,
        Kind::ReplicaSet,
        Kind::Role,
        Kind::ClusterRole,
        Kind::RoleBinding,
        Kind::ClusterRoleBinding,
        Kind::SubjectAccessReview,
        Kind::SelfSubjectAccessReview,
        Kind::Secret,
        Kind::CertificateSigningRequest,
        Kind::Service,
        Kind::EndpointSlice,
    ];

    /// Every kind served.
    pub fn all() -> impl Iterator<Item = Kind> {
        Kind::ALL
            .into_iter()
            .chain(GenericKind::all().map(Kind::Generic))
    }

    /// The declaration of a declared kind.
    pub fn declared(self) -> Option<&'static super::registry::KindInfo> {
        match self {
            Kind::Generic(g) => Some(g.info()),
            _ => None,
        }
    }

    /// The `kind:` of a manifest.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Generic(g) => g.info().kind,
            Kind::Pod => "Pod",
            Kind::Node => "Node",
            Kind::Namespace => "Namespace",
            Kind::ResourceQuota => "ResourceQuota",
            Kind::LimitRange => "LimitRange",
            Kind::Binding => "Binding",
            Kind::Event => "Event",
            Kind::Deployment => "Deployment",
            Kind::ReplicaSet => "ReplicaSet",
            Kind::Role => "Role",
            Kind::ClusterRole => "ClusterRole",
            Kind::RoleBinding => "RoleBinding",
            Kind::ClusterRoleBinding => "ClusterRoleBinding",
            Kind::SubjectAccessReview => "SubjectAccessReview",
            Kind::SelfSubjectAccessReview => "SelfSubjectAccessReview",
            Kind::Secret => "Secret",
            Kind::CertificateSigningRequest => "CertificateSigningRequest",
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
        }
    }

    /// The resource name: the storage path segment and what the CLI prints (`pod/web`).
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Generic(g) => g.info().plural,
            Kind::Pod => "pods",
            Kind::Node => "nodes",
            Kind::Namespace => "namespaces",
            Kind::ResourceQuota => "resourcequotas",
            Kind::LimitRange => "limitranges",
            Kind::Binding => "bindings",
            Kind::Event => "events",
            Kind::Deployment => "deployments",
            Kind::ReplicaSet => "replicasets",
            Kind::Role => "roles",
            Kind::ClusterRole => "clusterroles",
            Kind::RoleBinding => "rolebindings",
            Kind::ClusterRoleBinding => "clusterrolebindings",
            Kind::SubjectAccessReview => "subjectaccessreviews",
            Kind::SelfSubjectAccessReview => "selfsubjectaccessreviews",
            Kind::Secret => "secrets",
            Kind::CertificateSigningRequest => "certificatesigningrequests",
            Kind::Service => "services",
            Kind::EndpointSlice => "endpointslices",
        }
    }

    /// The group and version (`v1` for the core group, `apps/v1`), as `apiVersion:` says.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Generic(g) => g.info().api_version,
            Kind::Deployment | Kind::ReplicaSet => "apps/v1",
            Kind::Role | Kind::ClusterRole | Kind::RoleBinding | Kind::ClusterRoleBinding => {
                "rbac.authorization.k8s.io/v1"
            }
            Kind::SubjectAccessReview | Kind::SelfSubjectAccessReview => "authorization.k8s.io/v1",
            Kind::CertificateSigningRequest => "certificates.k8s.io/v1",
            Kind::EndpointSlice => "discovery.k8s.io/v1",
            _ => "v1",
        }
    }

    /// The API group: empty for the core group, `apps` for the workloads.
    pub fn group(self) -> &'static str {
        self.api_version().split_once('/').map_or("", |(g, _)| g)
    }

    /// The resource qualified by its group, as Kubernetes' messages name it
    /// (`pods "web" not found`, `deployments.apps "web" not found`).
    pub fn qualified_resource(self) -> String {
        match self.group() {
            "" => self.plural().to_owned(),
            group => format!("{}.{group}", self.plural()),
        }
    }

    pub fn is_namespaced(self) -> bool {
        if let Kind::Generic(g) = self {
            return g.info().namespaced;
        }
        !matches!(
            self,
            Kind::Node
                | Kind::Namespace
                | Kind::ClusterRole
                | Kind::ClusterRoleBinding
                | Kind::SubjectAccessReview
                | Kind::SelfSubjectAccessReview
                | Kind::CertificateSigningRequest
        )
    }

    /// Whether objects of the kind are stored: a `Binding` is an instruction to bind a pod,
    /// an access review a question; both are answered and kept nowhere.
    pub fn is_stored(self) -> bool {
        !matches!(
            self,
            Kind::Binding | Kind::SubjectAccessReview | Kind::SelfSubjectAccessReview
        )
    }

    /// Whether the kind is an access review (a question to the authorizers).
    pub fn is_review(self) -> bool {
        matches!(
            self,
            Kind::SubjectAccessReview | Kind::SelfSubjectAccessReview
        )
    }

    /// The manifest `kind:` (exact, as Kubernetes). Custom kinds may share a name with
    /// another kind or have several versions: this is the first kind served by that name;
    /// [`Kind::from_type`] and [`Kind::from_wire`] are exact.
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::all().find(|k| k.name() == name)
    }

    /// The kind an `apiVersion` and `kind` pair names (an owner reference's, a manifest's):
    /// that exact version when it is served, else the kind of that group and name in the
    /// version served first (every version of a kind shares its objects).
    pub fn from_type(api_version: &str, name: &str) -> Option<Kind> {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        Kind::all()
            .find(|k| k.name() == name && k.api_version() == api_version)
            .or_else(|| Kind::all().find(|k| k.name() == name && k.group() == group))
    }

    /// How the cluster API names the kind: its name (`Pod`, `ConfigMap`), and for a custom
    /// kind its name, version and group (`Widget.v1.example.com`), since a CRD's kind may
    /// share its name with another kind and is served in several versions.
    pub fn wire_name(self) -> std::borrow::Cow<'static, str> {
        match self {
            Kind::Generic(g) if g.custom_index().is_some() => {
                let (group, version) = self
                    .api_version()
                    .split_once('/')
                    .unwrap_or(("", self.api_version()));
                format!("{}.{version}.{group}", self.name()).into()
            }
            _ => self.name().into(),
        }
    }

    /// The kind of a [`Kind::wire_name`]; a bare name is read as [`Kind::from_name`] does.
    pub fn from_wire(wire: &str) -> Option<Kind> {
        match wire.split_once('.') {
            None => Kind::from_name(wire),
            Some((name, version_group)) => {
                let (version, group) = version_group.split_once('.')?;
                Kind::all().find(|k| {
                    k.name() == name && k.api_version().split_once('/') == Some((group, version))
                })
            }
        }
    }

    /// The singular resource name (`pod`), as discovery documents it.
    pub fn singular(self) -> String {
        self.name().to_ascii_lowercase()
    }

    /// Kubernetes' short names of the resource (`po`, `no`, `ns` ...), as discovery documents
    /// them and kubectl accepts them.
    pub fn short_names(self) -> &'static [&'static str] {
        match self {
            Kind::Generic(g) => g.info().short_names,
            Kind::Pod => &["po"],
            Kind::Node => &["no"],
            Kind::Namespace => &["ns"],
            Kind::ResourceQuota => &["quota"],
            Kind::LimitRange => &["limits"],
            Kind::Event => &["ev"],
            Kind::Deployment => &["deploy"],
            Kind::ReplicaSet => &["rs"],
            Kind::CertificateSigningRequest => &["csr"],
            Kind::Service => &["svc"],
            Kind::EndpointSlice => &[],
            Kind::Binding
            | Kind::Role
            | Kind::ClusterRole
            | Kind::RoleBinding
            | Kind::ClusterRoleBinding
            | Kind::SubjectAccessReview
            | Kind::SelfSubjectAccessReview
            | Kind::Secret => &[],
        }
    }

    /// What a user types on the command line: `pod`, `pods`, `po`, `Pod`, `nodes`, `no`, `ns`, ...
    pub fn from_cli(word: &str) -> Option<Kind> {
        let w = word.to_ascii_lowercase();
        Kind::all()
            .find(|k| w == k.singular() || w == k.plural() || k.short_names().contains(&w.as_str()))
    }

    /// The resource of a REST path segment (`pods`), as the Kubernetes API names it.
    pub fn from_plural(plural: &str) -> Option<Kind> {
        Kind::all().find(|k| k.plural() == plural)
    }

    /// Storage key of one object: `/registry/pods/<namespace>/<name>` or
    /// `/registry/nodes/<name>` for cluster-scoped kinds.
    pub fn key(self, namespace: &str, name: &str) -> String {
        if self.is_namespaced() {
            format!("{}{namespace}/{name}", self.collection())
        } else {
            format!("{}{name}", self.collection())
        }
    }

    /// `/registry/<plural>/`; a custom kind's, `/registry/<group>/<plural>/` (every version of
    /// it shares one), as kube-apiserver keeps them.
    fn collection(self) -> String {
        match self {
            Kind::Generic(g) if g.custom_index().is_some() => {
                format!("/registry/{}/{}/", self.group(), self.plural())
            }
            _ => format!("/registry/{}/", self.plural()),
        }
    }

    /// Prefix under which all objects of this kind (in `namespace`, if given) are stored.
    pub fn prefix(self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) if self.is_namespaced() => format!("{}{ns}/", self.collection()),
            _ => self.collection(),
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An object of any kind.
// Pods are the largest and by far the most common variant, so boxing them would add an
// allocation to nearly every object for no saving.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    Pod(Pod),
    Node(Node),
    Namespace(Namespace),
    ResourceQuota(ResourceQuota),
    LimitRange(LimitRange),
    Binding(Binding),
    Event(Event),
    Deployment(Deployment),
    ReplicaSet(ReplicaSet),
    Role(Role),
    ClusterRole(ClusterRole),
    RoleBinding(RoleBinding),
    ClusterRoleBinding(ClusterRoleBinding),
    SubjectAccessReview(AccessReview),
    SelfSubjectAccessReview(AccessReview),
    Secret(Secret),
    CertificateSigningRequest(CertificateSigningRequest),
    Service(Service),
    EndpointSlice(EndpointSlice),
    /// An object of a declared kind.
    Generic(GenericKind, GenericObject),
}

macro_rules! each_kind {
    ($self:expr, $o:ident => $e:expr) => {
        match $self {
            Object::Pod($o) => $e,
            Object::Node($o) => $e,
            Object::Namespace($o) => $e,
            Object::ResourceQuota($o) => $e,
            Object::LimitRange($o) => $e,
            Object::Binding($o) => $e,
            Object::Event($o) => $e,
            Object::Deployment($o) => $e,
            Object::ReplicaSet($o) => $e,
            Object::Role($o) => $e,
            Object::ClusterRole($o) => $e,
            Object::RoleBinding($o) => $e,
            Object::ClusterRoleBinding($o) => $e,
            Object::SubjectAccessReview($o) => $e,
            Object::SelfSubjectAccessReview($o) => $e,
            Object::Secret($o) => $e,
            Object::CertificateSigningRequest($o) => $e,
            Object::Service($o) => $e,
            Object::EndpointSlice($o) => $e,
            Object::Generic(_, $o) => $e,
        }
    };
}

/// JSON that does not decode as its kind: the path of the field at fault
/// (`spec.restartPolicy`; empty when the JSON itself is malformed) and serde's error.
#[derive(Debug, thiserror::Error)]
pub struct DecodeError {
    pub path: String,
    pub source: serde_json::Error,
}

impl DecodeError {
    /// An error about the body as a whole.
    pub fn whole(message: impl fmt::Display) -> DecodeError {
        DecodeError {
            path: String::new(),
            source: serde::de::Error::custom(message),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        write!(f, "{}", self.source)
    }
}

/// Decodes at full speed; only a failure is decoded again, tracking the path to the field at
/// fault (objects are decoded on every watch event, so the tracking is not paid there).
fn decode<T: serde::de::DeserializeOwned>(json: &[u8]) -> Result<T, DecodeError> {
    let first = match serde_json::from_slice(json) {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    let mut de = serde_json::Deserializer::from_slice(json);
    match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Err(e) => Err(DecodeError {
            path: Some(e.path().to_string())
                .filter(|p| p != ".")
                .unwrap_or_default(),
            source: e.into_inner(),
        }),
        // Only what follows the object was wrong.
        Ok(_) => Err(DecodeError {
            path: String::new(),
            source: first,
        }),
    }
}

impl Object {
    pub fn kind(&self) -> Kind {
        match self {
            Object::Pod(_) => Kind::Pod,
            Object::Node(_) => Kind::Node,
            Object::Namespace(_) => Kind::Namespace,
            Object::ResourceQuota(_) => Kind::ResourceQuota,
            Object::LimitRange(_) => Kind::LimitRange,
            Object::Binding(_) => Kind::Binding,
            Object::Event(_) => Kind::Event,
            Object::Deployment(_) => Kind::Deployment,
            Object::ReplicaSet(_) => Kind::ReplicaSet,
            Object::Role(_) => Kind::Role,
            Object::ClusterRole(_) => Kind::ClusterRole,
            Object::RoleBinding(_) => Kind::RoleBinding,
            Object::ClusterRoleBinding(_) => Kind::ClusterRoleBinding,
            Object::SubjectAccessReview(_) => Kind::SubjectAccessReview,
            Object::SelfSubjectAccessReview(_) => Kind::SelfSubjectAccessReview,
            Object::Secret(_) => Kind::Secret,
            Object::CertificateSigningRequest(_) => Kind::CertificateSigningRequest,
            Object::Service(_) => Kind::Service,
            Object::EndpointSlice(_) => Kind::EndpointSlice,
            Object::Generic(g, _) => Kind::Generic(*g),
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        each_kind!(self, o => &o.metadata)
    }

    pub fn metadata_mut(&mut self) -> &mut ObjectMeta {
        each_kind!(self, o => &mut o.metadata)
    }

    /// Storage key of this object.
    pub fn key(&self) -> String {
        let m = self.metadata();
        self.kind().key(&m.namespace, &m.name)
    }

    /// `pod/web`, as kubectl names objects.
    pub fn display_name(&self) -> String {
        format!(
            "{}/{}",
            self.kind().name().to_ascii_lowercase(),
            self.metadata().name
        )
    }

    /// Keeps the status conditions of `stored` whose type this object's status does not
    /// carry, as a strategic merge patch of the status merges `conditions` by type: a writer
    /// of a status owns only the condition types it reports (a node agent its pod's Ready,
    /// not a readiness gate's condition or a controller's `DisruptionTarget`). Kinds without
    /// typed conditions are left as they are.
    pub fn keep_stored_conditions(&mut self, stored: &Object) {
        fn keep<C: Clone, T: PartialEq>(ours: &mut Vec<C>, stored: &[C], type_of: fn(&C) -> &T) {
            let others: Vec<C> = stored
                .iter()
                .filter(|c| !ours.iter().any(|o| type_of(o) == type_of(c)))
                .cloned()
                .collect();
            ours.extend(others);
        }
        match (self, stored) {
            (Object::Pod(ours), Object::Pod(stored)) => {
                if let (Some(ours), Some(stored)) = (&mut ours.status, &stored.status) {
                    keep(&mut ours.conditions, &stored.conditions, |c| &c.type_);
                }
            }
            (Object::Node(ours), Object::Node(stored)) => {
                if let (Some(ours), Some(stored)) = (&mut ours.status, &stored.status) {
                    keep(&mut ours.conditions, &stored.conditions, |c| &c.type_);
                }
            }
            _ => {}
        }
    }

    /// Sets `apiVersion` and `kind` to this object's own.
    pub fn set_type_meta(&mut self) {
        let kind = self.kind();
        each_kind!(self, o => {
            o.api_version = kind.api_version().to_owned();
            o.kind = kind.name().to_owned();
        })
    }

    /// The canonical JSON encoding: the bytes stored under [`Object::key`] and sent on the wire.
    pub fn to_json(&self) -> Vec<u8> {
        let encoded = each_kind!(self, o => serde_json::to_vec(o));
        encoded.expect("invariant: the object model always serialises to JSON")
    }

    /// Decodes the JSON of an object of `kind`; an error names the field at fault.
    pub fn from_json(kind: Kind, json: &[u8]) -> Result<Object, DecodeError> {
        Ok(match kind {
            Kind::Pod => Object::Pod(decode(json)?),
            Kind::Node => Object::Node(decode(json)?),
            Kind::Namespace => Object::Namespace(decode(json)?),
            Kind::ResourceQuota => Object::ResourceQuota(decode(json)?),
            Kind::LimitRange => Object::LimitRange(decode(json)?),
            Kind::Binding => Object::Binding(decode(json)?),
            Kind::Event => Object::Event(decode(json)?),
            Kind::Deployment => Object::Deployment(decode(json)?),
            Kind::ReplicaSet => Object::ReplicaSet(decode(json)?),
            Kind::Role => Object::Role(decode(json)?),
            Kind::ClusterRole => Object::ClusterRole(decode(json)?),
            Kind::RoleBinding => Object::RoleBinding(decode(json)?),
            Kind::ClusterRoleBinding => Object::ClusterRoleBinding(decode(json)?),
            Kind::SubjectAccessReview => Object::SubjectAccessReview(decode(json)?),
            Kind::SelfSubjectAccessReview => Object::SelfSubjectAccessReview(decode(json)?),
            Kind::Secret => Object::Secret(decode(json)?),
            Kind::CertificateSigningRequest => Object::CertificateSigningRequest(decode(json)?),
            Kind::Service => Object::Service(decode(json)?),
            Kind::EndpointSlice => Object::EndpointSlice(decode(json)?),
            Kind::Generic(g) => {
                let mut object: GenericObject = decode(json)?;
                // A custom kind's objects are stored in one version and read in any: only
                // `apiVersion` differs (`None` conversion).
                if g.custom_index().is_some() {
                    g.info().api_version.clone_into(&mut object.api_version);
                }
                Object::Generic(g, object)
            }
        })
    }

    /// Decodes an object of `kind` from a JSON value (a request body already parsed, patched or
    /// checked against the schema); an error names the field at fault.
    pub fn from_value(kind: Kind, value: serde_json::Value) -> Result<Object, DecodeError> {
        fn typed<T: serde::de::DeserializeOwned>(
            value: serde_json::Value,
        ) -> Result<T, DecodeError> {
            serde_path_to_error::deserialize(value).map_err(|e| DecodeError {
                path: Some(e.path().to_string())
                    .filter(|p| p != ".")
                    .unwrap_or_default(),
                source: e.into_inner(),
            })
        }
        Ok(match kind {
            Kind::Pod => Object::Pod(typed(value)?),
            Kind::Node => Object::Node(typed(value)?),
            Kind::Namespace => Object::Namespace(typed(value)?),
            Kind::ResourceQuota => Object::ResourceQuota(typed(value)?),
            Kind::LimitRange => Object::LimitRange(typed(value)?),
            Kind::Binding => Object::Binding(typed(value)?),
            Kind::Event => Object::Event(typed(value)?),
            Kind::Deployment => Object::Deployment(typed(value)?),
            Kind::ReplicaSet => Object::ReplicaSet(typed(value)?),
            Kind::Role => Object::Role(typed(value)?),
            Kind::ClusterRole => Object::ClusterRole(typed(value)?),
            Kind::RoleBinding => Object::RoleBinding(typed(value)?),
            Kind::ClusterRoleBinding => Object::ClusterRoleBinding(typed(value)?),
            Kind::SubjectAccessReview => Object::SubjectAccessReview(typed(value)?),
            Kind::SelfSubjectAccessReview => Object::SelfSubjectAccessReview(typed(value)?),
            Kind::Secret => Object::Secret(typed(value)?),
            Kind::CertificateSigningRequest => Object::CertificateSigningRequest(typed(value)?),
            Kind::Service => Object::Service(typed(value)?),
            Kind::EndpointSlice => Object::EndpointSlice(typed(value)?),
            // Through Kubernetes' type: every field its Go type always writes is there.
            Kind::Generic(g) => {
                let value = g.info().schema.round_trip(&value).map_err(|e| match e {
                    super::schema::SchemaError::Type { path, message } => DecodeError {
                        path,
                        source: serde::de::Error::custom(message),
                    },
                    other => DecodeError::whole(other),
                })?;
                Object::Generic(g, typed(value)?)
            }
        })
    }

    /// Serialises to a YAML document.
    pub fn to_yaml(&self) -> String {
        let encoded = each_kind!(self, o => serde_yaml_ng::to_string(o));
        encoded.expect("invariant: the object model always serialises to YAML")
    }

    /// A JSON value of the object, for printing.
    pub fn to_json_value(&self) -> serde_json::Value {
        let encoded = each_kind!(self, o => serde_json::to_value(o));
        encoded.expect("invariant: the object model always serialises to JSON")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A status writer owns the condition types it reports; the others' stay, a pod's and a
    /// node's alike, and other kinds are left alone.
    #[test]
    fn stored_conditions_of_other_types_are_kept() {
        let pod = |conds: serde_json::Value| {
            let json =
                serde_json::json!({"metadata": {"name": "p"}, "status": {"conditions": conds}});
            Object::from_json(Kind::Pod, json.to_string().as_bytes()).expect("pod")
        };
        let stored = pod(serde_json::json!([
            {"type": "Ready", "status": "False"},
            {"type": "example.com/gate", "status": "True"}
        ]));
        let mut ours = pod(serde_json::json!([{"type": "Ready", "status": "True"}]));
        ours.keep_stored_conditions(&stored);
        assert_eq!(
            ours,
            pod(serde_json::json!([
                {"type": "Ready", "status": "True"},
                {"type": "example.com/gate", "status": "True"}
            ]))
        );

        let node = |conds: serde_json::Value| {
            let json =
                serde_json::json!({"metadata": {"name": "n"}, "status": {"conditions": conds}});
            Object::from_json(Kind::Node, json.to_string().as_bytes()).expect("node")
        };
        let stored = node(serde_json::json!([
            {"type": "Ready", "status": "Unknown"},
            {"type": "NetworkUnavailable", "status": "False"}
        ]));
        let mut ours = node(serde_json::json!([{"type": "Ready", "status": "True"}]));
        ours.keep_stored_conditions(&stored);
        assert_eq!(
            ours,
            node(serde_json::json!([
                {"type": "Ready", "status": "True"},
                {"type": "NetworkUnavailable", "status": "False"}
            ]))
        );
    }

    fn any_object() -> impl Strategy<Value = Object> {
        prop_oneof![
            any::<Pod>().prop_map(Object::Pod).boxed(),
            any::<Node>().prop_map(Object::Node).boxed(),
            any::<Namespace>().prop_map(Object::Namespace).boxed(),
            any::<ResourceQuota>()
                .prop_map(Object::ResourceQuota)
                .boxed(),
            any::<LimitRange>().prop_map(Object::LimitRange).boxed(),
            any::<Binding>().prop_map(Object::Binding).boxed(),
            any::<Event>().prop_map(Object::Event).boxed(),
            any::<Deployment>().prop_map(Object::Deployment).boxed(),
            any::<ReplicaSet>().prop_map(Object::ReplicaSet).boxed(),
            any::<Role>().prop_map(Object::Role).boxed(),
            any::<ClusterRole>().prop_map(Object::ClusterRole).boxed(),
            any::<RoleBinding>().prop_map(Object::RoleBinding).boxed(),
            any::<ClusterRoleBinding>()
                .prop_map(Object::ClusterRoleBinding)
                .boxed(),
            any::<AccessReview>()
                .prop_map(Object::SubjectAccessReview)
                .boxed(),
            any::<Secret>().prop_map(Object::Secret).boxed(),
            any::<CertificateSigningRequest>()
                .prop_map(Object::CertificateSigningRequest)
                .boxed(),
            any::<Service>().prop_map(Object::Service).boxed(),
            any::<EndpointSlice>()
                .prop_map(Object::EndpointSlice)
                .boxed(),
        ]
    }

    fn from_yaml(kind: Kind, text: &str) -> Object {
        // YAML is a superset of what serde_json reads back here; go through a generic value.
        let value: serde_json::Value = serde_yaml_ng::from_str(text).expect("YAML decodes");
        Object::from_json(kind, &serde_json::to_vec(&value).expect("to JSON"))
            .expect("object decodes")
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// decode(encode(x)) == x for both encodings, and encoding is stable.
        #[test]
        fn every_kind_round_trips(obj in any_object()) {
            let json = obj.to_json();
            let back = Object::from_json(obj.kind(), &json).unwrap();
            prop_assert_eq!(&back, &obj);
            prop_assert_eq!(back.to_json(), json);

            let yaml = obj.to_yaml();
            let back = from_yaml(obj.kind(), &yaml);
            prop_assert_eq!(&back, &obj);
            prop_assert_eq!(back.to_yaml(), yaml);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Every object, of every kind and whatever its values, is served with what
        /// Kubernetes' OpenAPI schema requires of it: strict clients generated from that
        /// schema decode it.
        #[test]
        fn every_kind_serves_what_kubernetes_requires(mut obj in any_object()) {
            obj.set_type_meta();
            let served = obj.to_json_value();
            let found = super::super::schema::violations(obj.kind(), &served);
            prop_assert!(found.is_empty(), "{}: {:?}\n{:#}", obj.kind(), found, served);
        }
    }

    /// Every field of Kubernetes' schema for `kind`, at its zero value: `""`, `0`, `false`,
    /// one element per list, one entry per map (recursive types to a depth). The object Skiff's
    /// types most often leave fields out of.
    fn zero_object(kind: Kind) -> serde_json::Value {
        let (root, definitions) = super::super::schema::openapi(kind);
        return zero(&root, &definitions, &mut Vec::new());

        fn zero(
            schema: &serde_json::Value,
            definitions: &serde_json::Map<String, serde_json::Value>,
            seen: &mut Vec<String>,
        ) -> serde_json::Value {
            use serde_json::{Value, json};
            if let Some(name) = super::super::schema::reference(schema) {
                let name = name.to_owned();
                if seen.contains(&name) || seen.len() > 12 {
                    return Value::Null;
                }
                seen.push(name.clone());
                let v = zero(&definitions[&name], definitions, seen);
                seen.pop();
                return v;
            }
            match schema.get("type").and_then(Value::as_str) {
                Some("string") => match schema.get("format").and_then(Value::as_str) {
                    Some("date-time") => json!("1970-01-01T00:00:00Z"),
                    _ => json!(""),
                },
                Some("integer") | Some("number") => json!(0),
                Some("boolean") => json!(false),
                Some("array") => match schema.get("items") {
                    Some(items) => match zero(items, definitions, seen) {
                        Value::Null => json!([]),
                        v => json!([v]),
                    },
                    None => json!([]),
                },
                _ if schema.get("x-kubernetes-int-or-string").is_some() => json!(0),
                _ => {
                    let mut out = serde_json::Map::new();
                    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                        for (name, s) in props {
                            let v = zero(s, definitions, seen);
                            if !v.is_null() {
                                out.insert(name.clone(), v);
                            }
                        }
                    } else if let Some(a) =
                        schema.get("additionalProperties").filter(|a| a.is_object())
                    {
                        let v = zero(a, definitions, seen);
                        if !v.is_null() {
                            out.insert("k".to_owned(), v);
                        }
                    }
                    Value::Object(out)
                }
            }
        }
    }

    /// Every kind, with every field of Kubernetes' schema at its zero value, is served with
    /// every field Kubernetes always writes: what Skiff's types leave out when empty is what
    /// Kubernetes' Go types leave out (`omitempty`), and no more.
    #[test]
    fn zero_values_are_served_as_kubernetes_serves_them() {
        let mut failures = Vec::new();
        for kind in Kind::all() {
            let mut json = zero_object(kind);
            json["apiVersion"] = kind.api_version().into();
            json["kind"] = kind.name().into();
            // A closed vocabulary (`restartPolicy`) refuses `""`: take its first value.
            let decoded = loop {
                match Object::from_json(kind, &serde_json::to_vec(&json).unwrap()) {
                    Ok(o) => break Ok(o),
                    Err(e) => {
                        let message = e.source.to_string();
                        let first = message
                            .split_once("supported values: \"")
                            .and_then(|(_, rest)| rest.split_once('"'))
                            .map(|(value, _)| value.to_owned());
                        let field = e
                            .path
                            .split(['.', '[', ']'])
                            .filter(|s| !s.is_empty())
                            .try_fold(&mut json, |v, step| match step.parse::<usize>() {
                                Ok(i) => v.get_mut(i),
                                Err(_) => v.get_mut(step),
                            });
                        match (first, field) {
                            (Some(value), Some(field)) if field != &serde_json::json!(value) => {
                                *field = value.into();
                            }
                            _ => break Err(e),
                        }
                    }
                }
            };
            let obj = match decoded {
                Ok(o) => o,
                Err(e) => {
                    failures.push(format!("{kind}: does not decode: {e}"));
                    continue;
                }
            };
            let found = super::super::schema::violations(kind, &obj.to_json_value());
            if !found.is_empty() {
                failures.push(format!("{kind}: {found:?}"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn storage_keys() {
        assert_eq!(
            Kind::Pod.key("default", "web"),
            "/registry/pods/default/web"
        );
        assert_eq!(Kind::Node.key("", "n1"), "/registry/nodes/n1");
        assert_eq!(Kind::Node.prefix(Some("default")), "/registry/nodes/");
        assert_eq!(Kind::Pod.prefix(Some("kube")), "/registry/pods/kube/");
        assert_eq!(Kind::Pod.prefix(None), "/registry/pods/");
        assert_eq!(
            Kind::Deployment.key("team", "web"),
            "/registry/deployments/team/web"
        );
    }

    #[test]
    fn cli_names() {
        for (w, k) in [
            ("po", Kind::Pod),
            ("pods", Kind::Pod),
            ("Pod", Kind::Pod),
            ("no", Kind::Node),
            ("ns", Kind::Namespace),
            ("namespaces", Kind::Namespace),
            ("quota", Kind::ResourceQuota),
        ] {
            assert_eq!(Kind::from_cli(w), Some(k), "{w}");
        }
        assert_eq!(Kind::from_cli("deploy"), Some(Kind::Deployment));
        assert_eq!(Kind::from_cli("rs"), Some(Kind::ReplicaSet));
        assert_eq!(Kind::from_cli("sts").map(Kind::name), Some("StatefulSet"));
        assert_eq!(Kind::from_cli("widgets"), None);
    }
}
