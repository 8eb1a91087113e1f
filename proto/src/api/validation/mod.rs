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

mod apps;
mod certificates;
mod kinds;
mod names;
mod pod;
mod rbac;
mod resources;
mod service;

pub use kinds::MAX_EVENT_MESSAGE;
pub use names::{is_dns1123_label, is_dns1123_subdomain, is_label_value, is_qualified_name};

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
    }
    errs.finish()
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
