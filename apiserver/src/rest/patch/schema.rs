//! Which lists of an object merge under a strategic merge patch, and by what.
//!
//! Kubernetes keeps this knowledge in Go struct tags (`patchStrategy:"merge"
//! patchMergeKey:"name"`), which JSON does not carry, so it is restated here. The entries are
//! those of k8s.io/api `core/v1/types.go` at v0.33 (Kubernetes 1.33, the schema version Skiff
//! serves) for the structs reachable from the kinds Skiff serves, and of apimachinery's
//! `metav1.ObjectMeta`. Every list not named here is atomic: a patch replaces it wholesale
//! (`tolerations`, `args`, `command`, `containerStatuses`, ...).
//!
//! The table is a tree of [`Schema`]s, one per Go struct, each naming only the fields that
//! either merge or lead to a struct with a field that does. A struct used in several places is
//! written once and referenced: the three container lists of [`POD_SPEC`] share [`CONTAINER`],
//! and the workload kinds (apps/v1 Deployment, ReplicaSet) reuse [`POD_SPEC`] through their
//! `spec.template` ([`POD_TEMPLATE_SPEC`]).
//!
//! Only what applying a patch needs is recorded. The `retainKeys` strategy some lists carry
//! (`volumes`, `resourceClaims`, `status.resourceClaimStatuses`) tells a client when to *send*
//! `$retainKeys`; a server obeys the directive wherever it appears, as apimachinery does, so it
//! has no entry of its own here.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use serde_json::Value;
use skiff_proto::api::custom::{self, Live};
use skiff_proto::api::{GenericKind, Kind};

/// How a list field takes a strategic merge patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListMerge {
    /// Elements are objects identified by the value of this field (`patchMergeKey`); a patch's
    /// elements merge into the element with the same value or are added.
    ByKey(&'static str),
    /// Elements are objects identified by these fields together: a custom kind's
    /// `x-kubernetes-list-type: map` list with several `x-kubernetes-list-map-keys`. Server-side
    /// apply merges by them; a strategic merge patch (Kubernetes takes none for custom
    /// objects) replaces such a list.
    ByKeys(&'static [&'static str]),
    /// Elements are primitives (`patchStrategy:"merge"` without a key); a patch's values are
    /// added to the set.
    Union,
}

/// The fields of one Go struct that matter to a strategic merge patch.
#[derive(Debug)]
pub(super) struct Schema {
    /// Whether the value is one whole (a custom kind's `x-kubernetes-map-type: atomic`):
    /// server-side apply owns it as one field and replaces it.
    pub(super) atomic: bool,
    fields: &'static [Field],
}

/// One field of a [`Schema`].
#[derive(Debug)]
pub(super) struct Field {
    name: &'static str,
    /// How the field merges when it is a list; `None` for atomic lists and non-lists.
    pub(super) list: Option<ListMerge>,
    /// The struct the field holds, or each element holds when it is a list.
    pub(super) schema: Option<&'static Schema>,
}

impl Schema {
    /// A struct none of whose fields merge: every list in it is atomic.
    pub(super) const EMPTY: Schema = Schema {
        atomic: false,
        fields: &[],
    };

    /// The entry for the field `name`, if it has one.
    pub(super) fn field(&self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|field| field.name == name)
    }
}

/// The schema of a whole object of `kind`.
pub(super) fn for_kind(kind: Kind) -> &'static Schema {
    match kind {
        Kind::Pod => &POD,
        Kind::Node => &NODE,
        Kind::Namespace => &NAMESPACE,
        Kind::Deployment | Kind::ReplicaSet => &WORKLOAD,
        Kind::Service => &SERVICE,
        // No list of these kinds has a merge strategy beyond those of their metadata.
        Kind::ResourceQuota
        | Kind::LimitRange
        | Kind::Binding
        | Kind::Event
        | Kind::Role
        | Kind::ClusterRole
        | Kind::RoleBinding
        | Kind::ClusterRoleBinding
        | Kind::SubjectAccessReview
        | Kind::SelfSubjectAccessReview
        | Kind::Secret
        | Kind::CertificateSigningRequest
        | Kind::EndpointSlice => &METADATA_ONLY,
        Kind::Generic(g) if g.custom_index().is_some() => custom_kind(g),
        Kind::Generic(g) => {
            let info = g.info();
            match (info.group(), info.kind) {
                ("", "ServiceAccount") => &SERVICE_ACCOUNT,
                ("", "PodTemplate") => &POD_TEMPLATE,
                ("batch", "CronJob") => &CRON_JOB,
                // Jobs, DaemonSets, StatefulSets and ReplicationControllers tag their
                // template and their status conditions as Deployments do.
                _ if info.template == Some("/spec/template") => &WORKLOAD,
                _ => &METADATA_ONLY,
            }
        }
    }
}

/// A custom kind's schema, from its CRD's structural schema, as Kubernetes reads it for
/// server-side apply: a list merges as its `x-kubernetes-list-type` says (`map` by its
/// `x-kubernetes-list-map-keys`, `set` as a union; `atomic`, or none, is replaced), and an
/// object with `x-kubernetes-map-type: atomic` is one value. Built
/// once per schema the CRD serves (kept while the kind is current), so a CRD's changes cost a
/// new table, not every apply a walk of its schema.
fn custom_kind(kind: GenericKind) -> &'static Schema {
    type Built = HashMap<GenericKind, (Arc<Live>, &'static Schema)>;
    static BUILT: LazyLock<Mutex<Built>> = LazyLock::new(Mutex::default);
    let Some(live) = custom::live(kind) else {
        return &METADATA_ONLY;
    };
    let mut built = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((l, schema)) = built.get_mut(&kind) {
        if Arc::ptr_eq(l, &live) {
            return schema;
        }
        // A change of the CRD's columns or scale (or a CRD deleted and made again alike)
        // keeps its table: only a new schema costs a new one (tables live as long as the
        // process, a few kilobytes per schema a CRD ever had).
        if l.schema == live.schema {
            *l = live;
            return schema;
        }
    }
    let schema: &'static Schema = Box::leak(Box::new(
        from_structural(&live.schema, true).unwrap_or(Schema::EMPTY),
    ));
    built.insert(kind, (live, schema));
    schema
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

/// The merging lists under a structural schema node; `None` when nothing under it merges (at
/// the root, the object's metadata always does).
fn from_structural(schema: &Value, root: bool) -> Option<Schema> {
    if !root && schema.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic") {
        return Some(Schema {
            atomic: true,
            fields: &[],
        });
    }
    let mut fields = Vec::new();
    if root {
        fields.push(nested("metadata", &OBJECT_META));
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    for (name, property) in properties.into_iter().flatten() {
        if root && name == "metadata" {
            continue;
        }
        let field = match property.get("type").and_then(Value::as_str) {
            Some("array") => {
                let Some(list) = list_merge(property) else {
                    // An atomic list is replaced whole: what its elements hold does not merge.
                    continue;
                };
                let element = property
                    .get("items")
                    .and_then(|items| from_structural(items, false))
                    .map(|s| &*Box::leak(Box::new(s)));
                Field {
                    name: leak(name),
                    list: Some(list),
                    schema: element,
                }
            }
            Some("object") => match from_structural(property, false) {
                Some(s) => nested(leak(name), Box::leak(Box::new(s))),
                None => continue,
            },
            _ => continue,
        };
        fields.push(field);
    }
    (root || !fields.is_empty()).then(|| Schema {
        atomic: false,
        fields: Box::leak(fields.into_boxed_slice()),
    })
}

/// How a structural schema's list merges, from its `x-kubernetes-list-type`.
fn list_merge(list: &Value) -> Option<ListMerge> {
    match list.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => Some(ListMerge::Union),
        Some("map") => {
            let keys: Vec<&'static str> = list
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(leak)
                .collect();
            match keys.as_slice() {
                [] => None,
                [key] => Some(ListMerge::ByKey(key)),
                _ => Some(ListMerge::ByKeys(Box::leak(keys.into_boxed_slice()))),
            }
        }
        _ => None,
    }
}

/// autoscaling/v1 Scale: only its metadata has merging lists.
pub(super) fn scale() -> &'static Schema {
    &METADATA_ONLY
}

/// A list of objects merged by `key`, whose elements have no merging lists of their own.
const fn by_key(name: &'static str, key: &'static str) -> Field {
    Field {
        name,
        list: Some(ListMerge::ByKey(key)),
        schema: None,
    }
}

/// A list of objects merged by `key`, each element a struct described by `schema`.
const fn by_key_of(name: &'static str, key: &'static str, schema: &'static Schema) -> Field {
    Field {
        name,
        list: Some(ListMerge::ByKey(key)),
        schema: Some(schema),
    }
}

/// A list of primitives merged as a set.
const fn union(name: &'static str) -> Field {
    Field {
        name,
        list: Some(ListMerge::Union),
        schema: None,
    }
}

/// A struct-valued field.
const fn nested(name: &'static str, schema: &'static Schema) -> Field {
    Field {
        name,
        list: None,
        schema: Some(schema),
    }
}

/// metav1.ObjectMeta.
static OBJECT_META: Schema = Schema {
    atomic: false,
    fields: &[by_key("ownerReferences", "uid"), union("finalizers")],
};

/// core/v1 Container, and EphemeralContainerCommon, which repeats its tags.
static CONTAINER: Schema = Schema {
    atomic: false,
    fields: &[
        by_key("ports", "containerPort"),
        by_key("env", "name"),
        by_key("volumeMounts", "mountPath"),
        by_key("volumeDevices", "devicePath"),
    ],
};

/// core/v1 PodSpec.
static POD_SPEC: Schema = Schema {
    atomic: false,
    fields: &[
        by_key_of("containers", "name", &CONTAINER),
        by_key_of("initContainers", "name", &CONTAINER),
        by_key_of("ephemeralContainers", "name", &CONTAINER),
        // patchStrategy "merge,retainKeys"
        by_key("volumes", "name"),
        by_key("imagePullSecrets", "name"),
        by_key("hostAliases", "ip"),
        by_key("topologySpreadConstraints", "topologyKey"),
        by_key("schedulingGates", "name"),
        // patchStrategy "merge,retainKeys"
        by_key("resourceClaims", "name"),
    ],
};

/// core/v1 PodStatus.
static POD_STATUS: Schema = Schema {
    atomic: false,
    fields: &[
        by_key("conditions", "type"),
        by_key("podIPs", "ip"),
        by_key("hostIPs", "ip"),
        // patchStrategy "merge,retainKeys"
        by_key("resourceClaimStatuses", "name"),
    ],
};

/// core/v1 NodeSpec.
static NODE_SPEC: Schema = Schema {
    atomic: false,
    fields: &[union("podCIDRs")],
};

/// core/v1 NodeStatus.
static NODE_STATUS: Schema = Schema {
    atomic: false,
    fields: &[by_key("conditions", "type"), by_key("addresses", "type")],
};

/// core/v1 NamespaceStatus. (NamespaceSpec's `finalizers` is atomic, unlike ObjectMeta's.)
static NAMESPACE_STATUS: Schema = Schema {
    atomic: false,
    fields: &[by_key("conditions", "type")],
};

static POD: Schema = Schema {
    atomic: false,
    fields: &[
        nested("metadata", &OBJECT_META),
        nested("spec", &POD_SPEC),
        nested("status", &POD_STATUS),
    ],
};

static NODE: Schema = Schema {
    atomic: false,
    fields: &[
        nested("metadata", &OBJECT_META),
        nested("spec", &NODE_SPEC),
        nested("status", &NODE_STATUS),
    ],
};

/// core/v1 ServiceSpec: ports merge by port number (`patchMergeKey:"port"`).
static SERVICE_SPEC: Schema = Schema {
    atomic: false,
    fields: &[by_key("ports", "port")],
};

static SERVICE: Schema = Schema {
    atomic: false,
    fields: &[
        nested("metadata", &OBJECT_META),
        nested("spec", &SERVICE_SPEC),
    ],
};

static NAMESPACE: Schema = Schema {
    atomic: false,
    fields: &[
        nested("metadata", &OBJECT_META),
        nested("status", &NAMESPACE_STATUS),
    ],
};

/// core/v1 PodTemplateSpec.
static POD_TEMPLATE_SPEC: Schema = Schema {
    atomic: false,
    fields: &[nested("metadata", &OBJECT_META), nested("spec", &POD_SPEC)],
};

/// apps/v1 DeploymentSpec and ReplicaSetSpec: only their template has merging lists.
static WORKLOAD_SPEC: Schema = Schema {
    atomic: false,
    fields: &[nested("template", &POD_TEMPLATE_SPEC)],
};

/// apps/v1 DeploymentStatus and ReplicaSetStatus.
static WORKLOAD_STATUS: Schema = Schema {
    atomic: false,
    fields: &[by_key("conditions", "type")],
};

/// apps/v1 Deployment and ReplicaSet, which tag the same fields.
static WORKLOAD: Schema = Schema {
    atomic: false,
    fields: &[
        nested("metadata", &OBJECT_META),
        nested("spec", &WORKLOAD_SPEC),
        nested("status", &WORKLOAD_STATUS),
    ],
};

/// core/v1 ServiceAccount: its secrets merge by name.
static SERVICE_ACCOUNT: Schema = Schema {
    atomic: false,
    fields: &[nested("metadata", &OBJECT_META), by_key("secrets", "name")],
};

/// core/v1 PodTemplate: the template at the top.
static POD_TEMPLATE: Schema = Schema {
    atomic: false,
    fields: &[
        nested("metadata", &OBJECT_META),
        nested("template", &POD_TEMPLATE_SPEC),
    ],
};

/// batch/v1 CronJob: a Job's template in `spec.jobTemplate`.
static CRON_JOB: Schema = Schema {
    atomic: false,
    fields: &[
        nested("metadata", &OBJECT_META),
        nested("spec", &CRON_JOB_SPEC),
    ],
};

static CRON_JOB_SPEC: Schema = Schema {
    atomic: false,
    fields: &[nested("jobTemplate", &JOB_TEMPLATE)],
};

static JOB_TEMPLATE: Schema = Schema {
    atomic: false,
    fields: &[
        nested("metadata", &OBJECT_META),
        nested("spec", &WORKLOAD_SPEC),
    ],
};

static METADATA_ONLY: Schema = Schema {
    atomic: false,
    fields: &[nested("metadata", &OBJECT_META)],
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The strategy of the field at `path` (list elements add no step) of `kind`.
    fn strategy(kind: Kind, path: &str) -> Option<ListMerge> {
        let mut schema = Some(for_kind(kind));
        let mut list = None;
        for name in path.split('.') {
            let field = schema?.field(name)?;
            list = field.list;
            schema = field.schema;
        }
        list
    }

    /// The table gives the merge keys Kubernetes tags, including through a shared struct
    /// (Container under all three container lists), and leaves untagged lists atomic.
    #[test]
    fn table_matches_kubernetes_tags() {
        use ListMerge::{ByKey, Union};
        let pod = [
            ("metadata.ownerReferences", Some(ByKey("uid"))),
            ("metadata.finalizers", Some(Union)),
            ("spec.containers", Some(ByKey("name"))),
            ("spec.initContainers.env", Some(ByKey("name"))),
            (
                "spec.ephemeralContainers.volumeMounts",
                Some(ByKey("mountPath")),
            ),
            ("spec.containers.ports", Some(ByKey("containerPort"))),
            ("spec.containers.volumeDevices", Some(ByKey("devicePath"))),
            ("spec.volumes", Some(ByKey("name"))),
            ("spec.hostAliases", Some(ByKey("ip"))),
            ("spec.topologySpreadConstraints", Some(ByKey("topologyKey"))),
            ("status.conditions", Some(ByKey("type"))),
            ("status.podIPs", Some(ByKey("ip"))),
            ("spec.tolerations", None),
            ("spec.containers.args", None),
            ("spec.containers.command", None),
            ("status.containerStatuses", None),
        ];
        for (path, expected) in pod {
            assert_eq!(strategy(Kind::Pod, path), expected, "Pod {path}");
        }
        assert_eq!(strategy(Kind::Node, "spec.podCIDRs"), Some(Union));
        assert_eq!(
            strategy(Kind::Deployment, "spec.template.spec.containers.env"),
            Some(ByKey("name"))
        );
        assert_eq!(
            strategy(Kind::ReplicaSet, "status.conditions"),
            Some(ByKey("type"))
        );
        assert_eq!(
            strategy(Kind::Node, "status.addresses"),
            Some(ByKey("type"))
        );
        assert_eq!(
            strategy(Kind::Namespace, "status.conditions"),
            Some(ByKey("type"))
        );
        assert_eq!(strategy(Kind::Namespace, "spec.finalizers"), None);
        assert_eq!(strategy(Kind::Event, "metadata.finalizers"), Some(Union));
        assert_eq!(strategy(Kind::LimitRange, "spec.limits"), None);
    }
}
