//! The `rbac.authorization.k8s.io` group's served resources: Roles, ClusterRoles and their
//! bindings.

use skiff_proto::api::Kind;

use super::{READ_WRITE, Resource};

/// The group's served resources, in discovery order.
pub(super) const RESOURCES: &[Resource] = &[
    Resource {
        kind: Kind::Role,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
    },
    Resource {
        kind: Kind::ClusterRole,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
    },
    Resource {
        kind: Kind::RoleBinding,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
    },
    Resource {
        kind: Kind::ClusterRoleBinding,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
    },
];
