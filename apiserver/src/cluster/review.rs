//! Access reviews (authorization.k8s.io/v1), for both faces: `SelfSubjectAccessReview` asks
//! whether the requesting user may do something (`kubectl auth can-i`), `SubjectAccessReview`
//! whether a named user may (a node agent asking about a caller of its port). Both are
//! answered by the authorizers every request goes through, and stored nowhere.

use skiff_proto::api::rbac::{AccessReview, AccessReviewStatus};
use skiff_proto::api::{Object, defaults, validation};

use super::{ClusterApi, ClusterError, Result};
use crate::access::{Attributes, User};

impl ClusterApi {
    /// The review `object` with its status: what the authorizers decide for the user it names
    /// (a `SubjectAccessReview`) or for `requester` (a `SelfSubjectAccessReview`). The
    /// caller has authorized `requester` to create it.
    pub fn review(&self, requester: &User, mut object: Object) -> Result<Object> {
        defaults::apply(&mut object);
        validation::validate(&object).map_err(|source| ClusterError::Invalid {
            kind: object.kind(),
            name: String::new(),
            source,
        })?;
        let mut out = match object {
            Object::SelfSubjectAccessReview(r) => {
                Object::SelfSubjectAccessReview(self.answer(r, requester))
            }
            Object::SubjectAccessReview(r) => {
                let subject = User {
                    name: r.spec.user.clone(),
                    uid: r.spec.uid.clone(),
                    groups: r.spec.groups.clone(),
                };
                Object::SubjectAccessReview(self.answer(r, &subject))
            }
            other => {
                return Err(ClusterError::UnknownKind {
                    kind: other.kind().name().to_owned(),
                });
            }
        };
        out.set_type_meta();
        Ok(out)
    }

    fn answer(&self, mut review: AccessReview, subject: &User) -> AccessReview {
        let attributes = match (
            review.spec.resource_attributes.clone(),
            review.spec.non_resource_attributes.clone(),
        ) {
            (Some(r), _) => Attributes::Resource(r),
            (None, Some(p)) => Attributes::NonResource(p),
            (None, None) => unreachable!("invariant: validation requires one kind of attributes"),
        };
        let decision = self.access.decide(subject, &attributes, self);
        review.status = Some(AccessReviewStatus {
            allowed: decision.allowed,
            denied: false,
            reason: decision.reason,
            evaluation_error: String::new(),
        });
        review
    }
}
