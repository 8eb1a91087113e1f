//! The `authorization.k8s.io` group's served resources: the access reviews.

use skiff_proto::api::Kind;

use super::Resource;
use super::verb::CREATE;

/// The group's served resources, in discovery order.
pub(super) const RESOURCES: &[Resource] = &[
    // Reviews are questions: created, answered, never stored (`kubectl auth can-i`).
    Resource {
        kind: Kind::SelfSubjectAccessReview,
        verbs: &[CREATE],
        subresources: &[],
        categories: &[],
    },
    Resource {
        kind: Kind::SubjectAccessReview,
        verbs: &[CREATE],
        subresources: &[],
        categories: &[],
    },
];
