//! A pod's volumes, the mounts of its containers, and the sources of their environment
//! (core/v1): what the node agent materializes on the node and hands to the runtime.
//!
//! Each [`Volume`] names exactly one source. The sources the agent knows are typed here;
//! any other (`nfs`, `csi`, …) is kept in `other`, and the agent reports it as unsupported
//! with a `FailedMount` event rather than starting the pod without it.

use serde::{Deserialize, Serialize};

use super::meta::Unmodelled;
#[cfg(test)]
use super::testing::small_vec;
use crate::quantity::Quantity;

/// The mode files of configMap, secret, downwardAPI and projected volumes get when none is
/// given (0644, as Kubernetes defaults `defaultMode`).
pub const DEFAULT_MODE: i32 = 0o644;
/// Where ServiceAccount admission mounts the service account's token, CA and namespace.
pub const SERVICE_ACCOUNT_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The lifetime ServiceAccount admission asks for a projected token (as kube-apiserver's
/// admission does: an hour, and seven seconds so it can be told apart).
pub const SERVICE_ACCOUNT_TOKEN_SECONDS: i64 = 3607;
/// The ConfigMap that holds the cluster's CA in every namespace.
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";
/// The annotation a node publishes: the directory its local volumes live in (each
/// PersistentVolume of the local provisioner is `<dir>/<volume name>` on its node).
pub const LOCAL_VOLUMES_ANNOTATION: &str = "skiff.dev/local-volumes";
/// The provisioner of volumes that are directories on a node (local-path style).
pub const LOCAL_PROVISIONER: &str = "skiff.dev/local-path";
/// The StorageClass of the local provisioner, the cluster's default.
pub const DEFAULT_STORAGE_CLASS: &str = "standard";
/// The prefix of the projected volume ServiceAccount admission adds.
pub const SERVICE_ACCOUNT_VOLUME_PREFIX: &str = "kube-api-access-";

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_dir: Option<EmptyDirVolumeSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapVolumeSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretVolumeSource>,
    #[serde(
        default,
        rename = "downwardAPI",
        skip_serializing_if = "Option::is_none"
    )]
    pub downward_api: Option<DownwardApiVolumeSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projected: Option<ProjectedVolumeSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<HostPathVolumeSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
    /// Sources Skiff keeps but does not mount (`nfs`, `csi`, …).
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

impl Volume {
    /// The names of the sources this volume sets (exactly one when valid).
    pub fn sources(&self) -> Vec<&str> {
        let mut out = Vec::new();
        let typed = [
            ("emptyDir", self.empty_dir.is_some()),
            ("configMap", self.config_map.is_some()),
            ("secret", self.secret.is_some()),
            ("downwardAPI", self.downward_api.is_some()),
            ("projected", self.projected.is_some()),
            ("hostPath", self.host_path.is_some()),
            (
                "persistentVolumeClaim",
                self.persistent_volume_claim.is_some(),
            ),
        ];
        out.extend(typed.iter().filter(|(_, set)| *set).map(|(n, _)| *n));
        out.extend(self.other.0.keys().map(String::as_str));
        out
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct EmptyDirVolumeSource {
    /// `""` (the node's disk) or `Memory` (a tmpfs).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub medium: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_limit: Option<Quantity>,
}

/// A key of a ConfigMap or Secret projected to a file at `path`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct KeyToPath {
    pub key: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapVolumeSource {
    #[serde(default)]
    pub name: String,
    /// The keys to project; none: every key, each to a file of its name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub items: Vec<KeyToPath>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_mode: Option<i32>,
    /// A missing ConfigMap (or key) is then an empty volume rather than an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct SecretVolumeSource {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub secret_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub items: Vec<KeyToPath>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_mode: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// A field of the pod (`metadata.name`, `metadata.labels['app']`, `status.podIP`, …).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ObjectFieldSelector {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    pub field_path: String,
}

/// A container's resource request or limit (`limits.memory`, `requests.cpu`), in units of
/// `divisor` (1 when none).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ResourceFieldSelector {
    /// Required in a volume; a container's own in `env`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub container_name: String,
    pub resource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divisor: Option<Quantity>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct DownwardApiVolumeFile {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<ObjectFieldSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_field_ref: Option<ResourceFieldSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct DownwardApiVolumeSource {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub items: Vec<DownwardApiVolumeFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_mode: Option<i32>,
}

/// The keys of a ConfigMap or Secret in a projected volume.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct KeysProjection {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub items: Vec<KeyToPath>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct DownwardApiProjection {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub items: Vec<DownwardApiVolumeFile>,
}

/// A token of the pod's service account, bound to the pod, written to `path` and
/// refreshed before it expires.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountTokenProjection {
    /// The audience the token is for; none: the API server's own.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub audience: String,
    /// 3600 when defaulted; at least 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_seconds: Option<i64>,
    pub path: String,
}

/// One source of a projected volume: exactly one of its fields is set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct VolumeProjection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<KeysProjection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<KeysProjection>,
    #[serde(
        default,
        rename = "downwardAPI",
        skip_serializing_if = "Option::is_none"
    )]
    pub downward_api: Option<DownwardApiProjection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_token: Option<ServiceAccountTokenProjection>,
    /// Sources Skiff keeps but does not project (`clusterTrustBundle`).
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ProjectedVolumeSource {
    #[serde(default)]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub sources: Vec<VolumeProjection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_mode: Option<i32>,
}

/// The kinds of host path a `hostPath` volume may require.
pub const HOST_PATH_TYPES: [&str; 8] = [
    "",
    "DirectoryOrCreate",
    "Directory",
    "FileOrCreate",
    "File",
    "Socket",
    "CharDevice",
    "BlockDevice",
];

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct HostPathVolumeSource {
    pub path: String,
    /// One of [`HOST_PATH_TYPES`]; `""` checks nothing.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct PersistentVolumeClaimVolumeSource {
    pub claim_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
}

/// A volume mounted into a container.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct VolumeMount {
    pub name: String,
    pub mount_path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// A path inside the volume to mount instead of its root.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sub_path: String,
    /// `subPath` with `$(VAR)` references to the container's environment, expanded by the
    /// node (exclusive with `subPath`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sub_path_expr: String,
    /// `None` (the default), `HostToContainer` or `Bidirectional` (privileged containers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_propagation: Option<String>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

/// A key of a ConfigMap or Secret, for one environment variable.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct KeySelector {
    #[serde(default)]
    pub name: String,
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// Where an environment variable's value comes from: exactly one field is set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct EnvVarSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<ObjectFieldSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_field_ref: Option<ResourceFieldSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<KeySelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<KeySelector>,
}

impl EnvVarSource {
    /// How many sources are set (exactly one when valid).
    pub fn count(&self) -> usize {
        usize::from(self.field_ref.is_some())
            + usize::from(self.resource_field_ref.is_some())
            + usize::from(self.config_map_key_ref.is_some())
            + usize::from(self.secret_key_ref.is_some())
    }
}

/// A ConfigMap or Secret whose every key becomes an environment variable.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct EnvFromSource {
    /// Put before each key's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<NameRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<NameRef>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct NameRef {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// The objects of its namespace a pod spec names: the ConfigMaps, Secrets and
/// PersistentVolumeClaims its volumes and environment read, and whether it projects a service
/// account token. What a node may read for the pods bound to it, and what its agent reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct References {
    pub config_maps: std::collections::BTreeSet<String>,
    pub secrets: std::collections::BTreeSet<String>,
    pub claims: std::collections::BTreeSet<String>,
    pub token: bool,
}

impl References {
    pub fn of(spec: &super::PodSpec) -> References {
        let mut r = References::default();
        for v in &spec.volumes {
            if let Some(c) = &v.config_map {
                r.config_maps.insert(c.name.clone());
            }
            if let Some(s) = &v.secret {
                r.secrets.insert(s.secret_name.clone());
            }
            if let Some(c) = &v.persistent_volume_claim {
                r.claims.insert(c.claim_name.clone());
            }
            for p in v.projected.iter().flat_map(|p| &p.sources) {
                if let Some(c) = &p.config_map {
                    r.config_maps.insert(c.name.clone());
                }
                if let Some(s) = &p.secret {
                    r.secrets.insert(s.name.clone());
                }
                r.token |= p.service_account_token.is_some();
            }
        }
        for c in spec.init_containers.iter().chain(&spec.containers) {
            for e in c.env.iter().filter_map(|e| e.value_from.as_ref()) {
                if let Some(k) = &e.config_map_key_ref {
                    r.config_maps.insert(k.name.clone());
                }
                if let Some(k) = &e.secret_key_ref {
                    r.secrets.insert(k.name.clone());
                }
            }
            for f in &c.env_from {
                if let Some(n) = &f.config_map_ref {
                    r.config_maps.insert(n.name.clone());
                }
                if let Some(n) = &f.secret_ref {
                    r.secrets.insert(n.name.clone());
                }
            }
        }
        for set in [&mut r.config_maps, &mut r.secrets, &mut r.claims] {
            set.remove("");
        }
        r
    }
}

/// The node names a PersistentVolume's required node affinity allows (`kubernetes.io/hostname`
/// or `metadata.name` In …, over all its terms); `None` when it does not pin the volume to
/// named nodes. The scheduler keeps a pod of a claim bound to it on those nodes.
pub fn pinned_nodes(pv: &serde_json::Value) -> Option<Vec<String>> {
    use serde_json::Value;
    let terms = pv
        .pointer("/spec/nodeAffinity/required/nodeSelectorTerms")?
        .as_array()?;
    let mut out = Vec::new();
    for t in terms {
        for r in t
            .get("matchExpressions")
            .into_iter()
            .chain(t.get("matchFields"))
            .filter_map(Value::as_array)
            .flatten()
        {
            let key = r.get("key").and_then(Value::as_str).unwrap_or("");
            if matches!(key, "kubernetes.io/hostname" | "metadata.name")
                && r.get("operator").and_then(Value::as_str) == Some("In")
            {
                out.extend(
                    r.get("values")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(str::to_owned),
                );
            }
        }
    }
    (!out.is_empty()).then_some(out)
}
