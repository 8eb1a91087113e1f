//! The printer of the `rbac.authorization.k8s.io` bindings: RoleBindings and
//! ClusterRoleBindings, with the role and (wide) who it is granted to.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{AGE, Column, NAME, age, column, items, name, text};

/// RoleBindings and ClusterRoleBindings: the role, and (wide) who it is granted to.
pub(super) const ROLE_BINDING_COLUMNS: &[Column] = &[
    NAME,
    column("Role", 0, "Role is the role this binding grants."),
    AGE,
    column("Users", 1, "Users are the users the role is granted to."),
    column("Groups", 1, "Groups are the groups the role is granted to."),
    column(
        "ServiceAccounts",
        1,
        "ServiceAccounts are the service accounts the role is granted to.",
    ),
];

/// kubectl's cells of a binding: `ClusterRole/view`, and its subjects by kind (service
/// accounts as `namespace/name`).
pub(super) fn role_binding_cells(binding: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let role = format!(
        "{}/{}",
        text(binding, "/roleRef/kind"),
        text(binding, "/roleRef/name")
    );
    let of_kind = |kind: &str| {
        items(binding, "/subjects")
            .iter()
            .filter(|s| text(s, "/kind") == kind)
            .map(|s| match text(s, "/namespace") {
                ns if kind == "ServiceAccount" => format!("{ns}/{}", text(s, "/name")),
                _ => text(s, "/name").to_owned(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    vec![
        name(binding).into(),
        role.into(),
        age(binding, now).into(),
        of_kind("User").into(),
        of_kind("Group").into(),
        of_kind("ServiceAccount").into(),
    ]
}
