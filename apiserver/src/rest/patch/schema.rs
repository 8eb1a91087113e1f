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

use skiff_proto::api::Kind;

/// How a list field takes a strategic merge patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListMerge {
    /// Elements are objects identified by the value of this field (`patchMergeKey`); a patch's
    /// elements merge into the element with the same value or are added.
    ByKey(&'static str),
    /// Elements are primitives (`patchStrategy:"merge"` without a key); a patch's values are
    /// added to the set.
    Union,
}

/// The fields of one Go struct that matter to a strategic merge patch.
#[derive(Debug)]
pub(super) struct Schema {
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
    pub(super) const EMPTY: Schema = Schema { fields: &[] };

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
    fields: &[by_key("ownerReferences", "uid"), union("finalizers")],
};

/// core/v1 Container, and EphemeralContainerCommon, which repeats its tags.
static CONTAINER: Schema = Schema {
    fields: &[
        by_key("ports", "containerPort"),
        by_key("env", "name"),
        by_key("volumeMounts", "mountPath"),
        by_key("volumeDevices", "devicePath"),
    ],
};

/// core/v1 PodSpec.
static POD_SPEC: Schema = Schema {
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
    fields: &[union("podCIDRs")],
};

/// core/v1 NodeStatus.
static NODE_STATUS: Schema = Schema {
    fields: &[by_key("conditions", "type"), by_key("addresses", "type")],
};

/// core/v1 NamespaceStatus. (NamespaceSpec's `finalizers` is atomic, unlike ObjectMeta's.)
static NAMESPACE_STATUS: Schema = Schema {
    fields: &[by_key("conditions", "type")],
};

static POD: Schema = Schema {
    fields: &[
        nested("metadata", &OBJECT_META),
        nested("spec", &POD_SPEC),
        nested("status", &POD_STATUS),
    ],
};

static NODE: Schema = Schema {
    fields: &[
        nested("metadata", &OBJECT_META),
        nested("spec", &NODE_SPEC),
        nested("status", &NODE_STATUS),
    ],
};

/// core/v1 ServiceSpec: ports merge by port number (`patchMergeKey:"port"`).
static SERVICE_SPEC: Schema = Schema {
    fields: &[by_key("ports", "port")],
};

static SERVICE: Schema = Schema {
    fields: &[
        nested("metadata", &OBJECT_META),
        nested("spec", &SERVICE_SPEC),
    ],
};

static NAMESPACE: Schema = Schema {
    fields: &[
        nested("metadata", &OBJECT_META),
        nested("status", &NAMESPACE_STATUS),
    ],
};

/// core/v1 PodTemplateSpec.
static POD_TEMPLATE_SPEC: Schema = Schema {
    fields: &[nested("metadata", &OBJECT_META), nested("spec", &POD_SPEC)],
};

/// apps/v1 DeploymentSpec and ReplicaSetSpec: only their template has merging lists.
static WORKLOAD_SPEC: Schema = Schema {
    fields: &[nested("template", &POD_TEMPLATE_SPEC)],
};

/// apps/v1 DeploymentStatus and ReplicaSetStatus.
static WORKLOAD_STATUS: Schema = Schema {
    fields: &[by_key("conditions", "type")],
};

/// apps/v1 Deployment and ReplicaSet, which tag the same fields.
static WORKLOAD: Schema = Schema {
    fields: &[
        nested("metadata", &OBJECT_META),
        nested("spec", &WORKLOAD_SPEC),
        nested("status", &WORKLOAD_STATUS),
    ],
};

/// core/v1 ServiceAccount: its secrets merge by name.
static SERVICE_ACCOUNT: Schema = Schema {
    fields: &[nested("metadata", &OBJECT_META), by_key("secrets", "name")],
};

/// core/v1 PodTemplate: the template at the top.
static POD_TEMPLATE: Schema = Schema {
    fields: &[
        nested("metadata", &OBJECT_META),
        nested("template", &POD_TEMPLATE_SPEC),
    ],
};

/// batch/v1 CronJob: a Job's template in `spec.jobTemplate`.
static CRON_JOB: Schema = Schema {
    fields: &[
        nested("metadata", &OBJECT_META),
        nested("spec", &CRON_JOB_SPEC),
    ],
};

static CRON_JOB_SPEC: Schema = Schema {
    fields: &[nested("jobTemplate", &JOB_TEMPLATE)],
};

static JOB_TEMPLATE: Schema = Schema {
    fields: &[
        nested("metadata", &OBJECT_META),
        nested("spec", &WORKLOAD_SPEC),
    ],
};

static METADATA_ONLY: Schema = Schema {
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
