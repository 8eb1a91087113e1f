//! Resource names and quantities: container requests and limits, node capacity, and the
//! lists a LimitRange holds.

use super::names::is_qualified_name;
use super::{Errors, Path};
use crate::api::meta::ResourceList;
use crate::quantity::Quantity;

/// Standard resource names, plus extended resources named `<domain>/<name>` and hugepages.
fn is_resource_name(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage" | "pods")
        || name.starts_with("hugepages-") && Quantity::parse(&name["hugepages-".len()..]).is_ok()
        || name.contains('/') && is_qualified_name(name)
}

pub(super) fn validate_resource_list(
    errs: &mut Errors,
    path: &Path,
    list: &ResourceList,
    container: bool,
) {
    for (name, q) in list {
        let p = path.key(name);
        let known = if container {
            is_resource_name(name) && name != "pods"
        } else {
            is_resource_name(name)
        };
        if !known {
            errs.add(&p, format!("unsupported resource name {name:?}: use cpu, memory, ephemeral-storage, hugepages-<size> or an extended resource <domain>/<name>"));
        }
        if q.is_negative() {
            errs.add(
                &p,
                format!("invalid value {q}: must be greater than or equal to 0"),
            );
        }
        if name.contains('/')
            && !name.starts_with("hugepages-")
            && q.nano_value() % 1_000_000_000 != 0
        {
            errs.add(
                &p,
                format!("invalid value {q}: extended resources must be whole numbers"),
            );
        }
    }
}
