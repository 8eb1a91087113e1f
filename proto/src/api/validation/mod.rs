//! Validation of defaulted objects. Every rule reports the field path it concerns
//! (`spec.containers[0].resources.requests.cpu`), and all violations are reported together, so a
//! user fixes a manifest in one pass. The same rules run offline (`skiff validate`) and on every
//! write to the store. Fields with a fixed set of values (`restartPolicy`, `status.phase`,
//! condition statuses, taint effects) are typed ([`super::vocabulary`]): a bad value is
//! refused earlier, when the object decodes, with its field path.
//!
//! | module      | what                                                                   |
//! |-------------|------------------------------------------------------------------------|
//! | this one    | [`FieldError`], [`ValidationErrors`], field paths, [`validate`]        |
//! | `names`     | DNS names, qualified names, labels, object metadata, label selectors   |
//! | `resources` | resource names and quantities (container resources, node capacity)     |
//! | `pod`       | the pod spec: containers, ports, probes, affinity, tolerations, spread |
//! | `kinds`     | Node, Namespace, ResourceQuota, LimitRange, Binding, Event             |
//! | `apps`      | Deployment and ReplicaSet: selector, template, rollout strategy        |
//! | `rbac`      | roles' rules, bindings' role and subjects, access reviews               |

use std::fmt;

use super::object::{Kind, Object};

pub(crate) mod apps;
mod certificates;
pub(crate) mod kinds;
pub(crate) mod names;
pub(crate) mod pod;
mod rbac;
mod resources;
mod service;
mod volume;

pub use kinds::MAX_EVENT_MESSAGE;
pub use names::{is_dns1123_label, is_dns1123_subdomain, is_label_value, is_qualified_name};
pub use volume::descending_path_error;

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
pub(crate) struct Path(String);

impl Path {
    pub(crate) fn root(name: &str) -> Path {
        Path(name.to_owned())
    }
    pub(crate) fn field(&self, name: &str) -> Path {
        if self.0.is_empty() {
            Path(name.to_owned())
        } else {
            Path(format!("{}.{name}", self.0))
        }
    }
    pub(crate) fn index(&self, i: usize) -> Path {
        Path(format!("{}[{i}]", self.0))
    }
    /// A map key; keys that are not plain words are bracketed: `labels["app.kubernetes.io/name"]`.
    pub(crate) fn key(&self, k: &str) -> Path {
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
pub(crate) struct Errors(Vec<FieldError>);

impl Errors {
    pub(crate) fn add(&mut self, path: &Path, message: impl Into<String>) {
        self.0.push(FieldError {
            path: path.0.clone(),
            message: message.into(),
        });
    }

    pub(crate) fn one_of(&mut self, path: &Path, value: &str, allowed: &[&str]) {
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

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Takes every error of `other`.
    pub(crate) fn extend(&mut self, other: Errors) {
        self.0.extend(other.0);
    }

    pub(crate) fn into_vec(self) -> Vec<FieldError> {
        self.0
    }

    pub(crate) fn finish(self) -> Result<(), ValidationErrors> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors(self.0))
        }
    }
}

/// Validates a defaulted object of any kind, as created.
pub fn validate(object: &Object) -> Result<(), ValidationErrors> {
    validate_write(object, None)
}

/// Validates a write of a defaulted object: a create (`stored` `None`), or an update of
/// `stored`, which adds the rules that compare the two ([`validate_update`]) and lets a
/// custom object's unchanged parts stand (validation ratcheting: a CRD's schema or rules may
/// have tightened since they were written).
pub fn validate_write(object: &Object, stored: Option<&Object>) -> Result<(), ValidationErrors> {
    let mut errs = Errors::default();
    // A review is a question, not an object: it has no name.
    if object.kind().is_stored() || object.kind() == Kind::Binding {
        names::validate_meta(&mut errs, object.kind(), object.metadata());
    }
    match object {
        Object::Pod(p) => pod::validate_pod(&mut errs, p),
        Object::Node(n) => kinds::validate_node(&mut errs, n),
        Object::Namespace(n) => kinds::validate_namespace(&mut errs, n),
        Object::ResourceQuota(q) => kinds::validate_quota(&mut errs, q),
        Object::LimitRange(l) => kinds::validate_limit_range(&mut errs, l),
        Object::Binding(b) => kinds::validate_binding(&mut errs, b),
        Object::Event(e) => kinds::validate_event(&mut errs, e),
        Object::Deployment(d) => apps::validate_deployment(&mut errs, d),
        Object::ReplicaSet(rs) => apps::validate_replica_set(&mut errs, rs),
        Object::Role(r) => rbac::validate_rules(&mut errs, &r.rules, true),
        Object::ClusterRole(r) => rbac::validate_rules(&mut errs, &r.rules, false),
        Object::RoleBinding(b) => rbac::validate_binding(&mut errs, &b.role_ref, &b.subjects, true),
        Object::ClusterRoleBinding(b) => {
            rbac::validate_binding(&mut errs, &b.role_ref, &b.subjects, false)
        }
        Object::SubjectAccessReview(r) => rbac::validate_review(&mut errs, r, true),
        Object::SelfSubjectAccessReview(r) => rbac::validate_review(&mut errs, r, false),
        Object::Secret(s) => kinds::validate_secret(&mut errs, s),
        Object::CertificateSigningRequest(c) => certificates::validate_csr(&mut errs, c),
        Object::Service(s) => service::validate_service(&mut errs, s),
        Object::EndpointSlice(s) => service::validate_endpoint_slice(&mut errs, s),
        Object::Generic(g, o) => {
            let stored = match stored {
                Some(Object::Generic(_, s)) => Some(s),
                _ => None,
            };
            crate::api::registry::validate(&mut errs, *g, o, stored);
        }
    }
    if let Some(stored) = stored {
        update_rules(&mut errs, object, stored);
    }
    errs.finish()
}

/// Validates an update: the rules that compare the object with the stored one (fields fixed
/// at creation). The typed kinds' are in the API server's admission (`with_spec`); a declared
/// kind's are part of its declaration.
pub fn validate_update(object: &Object, stored: &Object) -> Result<(), ValidationErrors> {
    let mut errs = Errors::default();
    update_rules(&mut errs, object, stored);
    errs.finish()
}

fn update_rules(errs: &mut Errors, object: &Object, stored: &Object) {
    if let (Object::Generic(g, o), Object::Generic(_, s)) = (object, stored) {
        crate::api::registry::validate_update(errs, *g, o, s);
    }
}

/// What the rooms' tests share: a pod manifest decoded, defaulted and validated.
#[cfg(test)]
mod testing {
    use super::{ValidationErrors, validate};
    use crate::api::defaults;
    use crate::api::object::Object;
    use crate::api::pod::Pod;

    pub(super) fn check(yaml: &str) -> Result<(), ValidationErrors> {
        let pod: Pod = serde_yaml_ng::from_str(yaml).unwrap();
        let mut obj = Object::Pod(pod);
        defaults::apply(&mut obj);
        validate(&obj)
    }

    /// The violations of an invalid pod manifest, each as `path: message`.
    pub(super) fn errors(yaml: &str) -> Vec<String> {
        check(yaml)
            .expect_err("should be invalid")
            .0
            .iter()
            .map(ToString::to_string)
            .collect()
    }
}
