//! A pod's volumes on the node, as the kubelet's volume manager sets them up: each is a
//! directory under the node's root before the pod's sandbox starts, mounted into the
//! containers that name it, kept current while the pod runs, and removed with the pod.
//!
//! ```text
//! <root>/<pod uid>/volumes/kubernetes.io~empty-dir/<name>     a directory (a tmpfs for medium Memory)
//! <root>/<pod uid>/volumes/kubernetes.io~configmap/<name>     the ConfigMap's keys, as files
//! <root>/<pod uid>/volumes/kubernetes.io~secret/<name>        the Secret's keys (a tmpfs)
//! <root>/<pod uid>/volumes/kubernetes.io~downward-api/<name>  fields of the pod
//! <root>/<pod uid>/volumes/kubernetes.io~projected/<name>     all of these, and a token (a tmpfs)
//! hostPath                                                    the node's own path, checked by type
//! ```
//!
//! Files are written through [`atomic`] so an update is seen whole or not at all. The
//! ConfigMaps and Secrets come from the cluster API, each read at most once per resync
//! period for all the node's pods; a changed one reaches the files at the next resync. A
//! projected service account token is requested bound to the pod and requested again once
//! 80% of its life has passed, as the kubelet's token manager does.
//!
//! A `persistentVolumeClaim` is the local volume its claim is bound to: a directory
//! `<root>/local-volumes/<volume>` that outlives the pod (the local provisioner binds claims
//! to volumes on the node of their first pod; the scheduler keeps the pod there after). The
//! sources Skiff does not model (`nfs`, `csi`, …) fail with a `FailedMount` that says so: the
//! pod waits in `ContainerCreating` rather than start without its data.

pub mod atomic;
pub mod env;
pub mod usage;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use skiff_proto::api::meta::ResourceList;
use skiff_proto::api::pod::Container;
use skiff_proto::api::volume::{
    DEFAULT_MODE, DownwardApiVolumeFile, HostPathVolumeSource, KeyToPath, Volume,
};
use skiff_proto::api::{Kind, Object, Pod};
use skiff_proto::client::{ClusterClient, Code};
use tokio::time::Instant;

pub use env::{EnvInputs, env_of, expand, resource_value, service_env};

use atomic::{File, Payload};

/// How often a running pod's volumes are brought up to date by default.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(15);

/// The most volume file system jobs (one volume's files, one pod's hosts file, one pod's
/// directory removed) that run at once in the process: enough to keep a disk busy, few
/// enough that thousands of simulated pods starting together do not take a thread each.
const DISK_JOBS: usize = 8;

static DISK: std::sync::LazyLock<Arc<tokio::sync::Semaphore>> =
    std::sync::LazyLock::new(|| Arc::new(tokio::sync::Semaphore::new(DISK_JOBS)));

/// Runs `job`, file system work of the volumes, on the blocking pool. A slow disk (or a file
/// system slow to find free inodes) then holds up the pod it is for, never the runtime's
/// workers, which the node's heartbeats, watches and status writes run on.
async fn on_disk<T, F>(job: F) -> Result<T, String>
where
    F: FnOnce() -> Result<T, String> + Send + 'static,
    T: Send + 'static,
{
    // The permit goes with the job: a caller that stops waiting does not free it early.
    let permit = Arc::clone(&DISK)
        .acquire_owned()
        .await
        .expect("invariant: the DISK semaphore is never closed");
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        job()
    })
    .await
    .unwrap_or_else(|e| match e.try_into_panic() {
        Ok(panic) => std::panic::resume_unwind(panic),
        Err(e) => Err(format!("the file system work did not finish: {e}")),
    })
}

/// A volume mounted into a container.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mount {
    pub host_path: PathBuf,
    pub container_path: String,
    pub read_only: bool,
    pub propagation: Propagation,
}

/// How mounts under a volume travel between the node and the container (`mountPropagation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// `None`: neither way (a private mount).
    #[default]
    Private,
    /// `HostToContainer`: mounts the node makes under the volume later appear inside.
    HostToContainer,
    /// `Bidirectional`: both ways (privileged containers only).
    Bidirectional,
}

impl Propagation {
    fn of(value: Option<&str>) -> Propagation {
        match value {
            Some("HostToContainer") => Propagation::HostToContainer,
            Some("Bidirectional") => Propagation::Bidirectional,
            _ => Propagation::Private,
        }
    }
}

/// A volume that could not be set up, worded as the kubelet's `FailedMount` events are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MountVolume.SetUp failed for volume {volume:?} : {why}")]
pub struct MountError {
    pub volume: String,
    pub why: String,
}

/// The node's volumes: where they live, and what they are read from.
#[derive(Debug, Clone)]
pub struct Volumes {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    client: Option<ClusterClient>,
    /// Mount tmpfs for medium-Memory emptyDirs, Secrets and projected volumes (as root on a
    /// real node); off, they are plain directories (the simulated runtime).
    tmpfs: bool,
    resync: Duration,
    /// The node's allocatable resources: what a container's unset limit reads as, in `env`
    /// and in downward API files.
    allocatable: ResourceList,
    /// ConfigMaps and Secrets as last read: `None` when missing.
    objects: Mutex<ObjectCache>,
    /// Tokens by (pod uid, volume, path).
    tokens: Mutex<HashMap<(String, String, String), Token>>,
    /// The local volume directory of each claim volume set up, by (pod uid, volume).
    claims: Mutex<HashMap<(String, String), PathBuf>>,
}

/// Where the local provisioner's volumes live on a node whose root is `root`: beside the
/// pods' directories, outliving them.
pub fn local_volumes_dir(root: &Path) -> PathBuf {
    root.join("local-volumes")
}

/// Objects by (kind, namespace, name): when read, and what was there.
type ObjectCache = HashMap<(Kind, String, String), (Instant, Option<Object>)>;

#[derive(Debug, Clone)]
struct Token {
    token: String,
    issued: SystemTime,
    expires: SystemTime,
}

impl Token {
    /// Requested again once 80% of its life has passed, or after a day, as the kubelet's
    /// token manager does.
    fn fresh(&self, now: SystemTime) -> bool {
        let life = self.expires.duration_since(self.issued).unwrap_or_default();
        let renew = life.mul_f64(0.8).min(Duration::from_secs(24 * 3600));
        now.duration_since(self.issued).unwrap_or_default() < renew
    }
}

/// Where each kind of volume lives under the pod's directory.
fn plugin_of(v: &Volume) -> Option<&'static str> {
    if v.empty_dir.is_some() {
        Some("kubernetes.io~empty-dir")
    } else if v.config_map.is_some() {
        Some("kubernetes.io~configmap")
    } else if v.secret.is_some() {
        Some("kubernetes.io~secret")
    } else if v.downward_api.is_some() {
        Some("kubernetes.io~downward-api")
    } else if v.projected.is_some() {
        Some("kubernetes.io~projected")
    } else {
        None
    }
}

fn volume_kind() -> Kind {
    Kind::from_name("PersistentVolume").expect("invariant: PersistentVolume is declared")
}

fn config_map_kind() -> Kind {
    Kind::from_name("ConfigMap").expect("invariant: ConfigMap is declared")
}

impl Volumes {
    /// Volumes under `root` (one directory per pod), read through `client` (none: every
    /// ConfigMap and Secret is missing, and no token can be had).
    pub fn new(
        root: PathBuf,
        client: Option<ClusterClient>,
        tmpfs: bool,
        resync: Duration,
        allocatable: ResourceList,
    ) -> Self {
        Volumes {
            inner: Arc::new(Inner {
                root,
                client,
                tmpfs,
                resync,
                allocatable,
                objects: Mutex::new(HashMap::new()),
                tokens: Mutex::new(HashMap::new()),
                claims: Mutex::new(HashMap::new()),
            }),
        }
    }

    pub fn resync(&self) -> Duration {
        self.inner.resync
    }

    fn pod_dir(&self, uid: &str) -> PathBuf {
        self.inner.root.join(uid)
    }

    /// The directory of `v` of the pod `uid` (a hostPath is the node's own path, a claim's
    /// its local volume's once set up).
    pub fn volume_path(&self, uid: &str, v: &Volume) -> Option<PathBuf> {
        if let Some(h) = &v.host_path {
            return Some(PathBuf::from(&h.path));
        }
        if v.persistent_volume_claim.is_some() {
            return self
                .lock_claims()
                .get(&(uid.to_owned(), v.name.clone()))
                .cloned();
        }
        Some(
            self.pod_dir(uid)
                .join("volumes")
                .join(plugin_of(v)?)
                .join(&v.name),
        )
    }

    /// The first emptyDir of `pod` that holds more than its `sizeLimit`, worded as the
    /// kubelet's eviction manager words it; `None` when each is within its limit. It walks
    /// the directories: call it off the async runtime.
    pub fn over_size_limit(&self, pod: &Pod) -> Option<String> {
        pod.spec.volumes.iter().find_map(|v| {
            let limit = v.empty_dir.as_ref()?.size_limit.as_ref()?;
            let bytes = u64::try_from(limit.value()).ok().filter(|b| *b > 0)?;
            let dir = self.volume_path(&pod.metadata.uid, v)?;
            (usage::disk_usage(&dir) > bytes).then(|| {
                format!(
                    "Usage of EmptyDir volume {:?} exceeds the limit {:?}. ",
                    v.name,
                    limit.to_string()
                )
            })
        })
    }

    /// Whether any emptyDir of `pod` has a `sizeLimit` to watch.
    pub fn has_size_limits(pod: &Pod) -> bool {
        pod.spec.volumes.iter().any(|v| {
            v.empty_dir
                .as_ref()
                .and_then(|e| e.size_limit.as_ref())
                .is_some_and(|q| q.value() > 0)
        })
    }

    /// Sets up (or brings up to date) every volume of `pod`; the first that fails says why.
    pub async fn set_up(&self, pod: &Pod) -> Result<(), MountError> {
        for v in &pod.spec.volumes {
            self.set_up_one(pod, v).await.map_err(|why| MountError {
                volume: v.name.clone(),
                why,
            })?;
        }
        Ok(())
    }

    async fn set_up_one(&self, pod: &Pod, v: &Volume) -> Result<(), String> {
        let uid = &pod.metadata.uid;
        if let Some(h) = &v.host_path {
            let h = h.clone();
            return on_disk(move || host_path(&h)).await;
        }
        if let Some(c) = &v.persistent_volume_claim {
            let dir = self
                .claim_dir(&pod.metadata.namespace, &c.claim_name)
                .await?;
            let made = dir.clone();
            on_disk(move || {
                let io = |e: std::io::Error| format!("{}: {e}", made.display());
                std::fs::create_dir_all(&made).map_err(io)?;
                set_mode(&made, 0o777).map_err(io)
            })
            .await?;
            // Its data is the pod's group's once, when the pod first mounts it.
            let first = self
                .lock_claims()
                .insert((uid.clone(), v.name.clone()), dir.clone())
                .is_none();
            if first {
                if let Some(gid) = crate::security::fs_group(pod) {
                    let given = dir.clone();
                    on_disk(move || {
                        give_to_group(&given, gid, true)
                            .map_err(|e| format!("{}: {e}", given.display()))
                    })
                    .await?;
                }
                self.note_retained(&dir).await;
            }
            return Ok(());
        }
        let Some(dir) = self.volume_path(uid, v) else {
            let kinds = v.sources().join(", ");
            return Err(format!(
                "volume type {kinds} is not supported by Skiff's node agent"
            ));
        };
        let gid = crate::security::fs_group(pod);
        if let Some(e) = &v.empty_dir {
            let tmpfs = (e.medium == "Memory" && self.inner.tmpfs)
                .then(|| e.size_limit.as_ref().map(|q| q.value()));
            return on_disk(move || {
                let io = |e: std::io::Error| format!("{}: {e}", dir.display());
                let made = !dir.exists();
                std::fs::create_dir_all(&dir).map_err(io)?;
                if let Some(size) = tmpfs {
                    mount_tmpfs(&dir, size).map_err(io)?;
                }
                set_mode(&dir, 0o777).map_err(io)?;
                if made && let Some(gid) = gid {
                    give_to_group(&dir, gid, true).map_err(io)?;
                }
                Ok(())
            })
            .await;
        }
        let ns = &pod.metadata.namespace;
        let payload = if let Some(c) = &v.config_map {
            let data = self.config_map(ns, &c.name).await?;
            let optional = c.optional == Some(true);
            let Some(data) = data.or_else(|| optional.then(BTreeMap::new)) else {
                return Err(format!("configmap {:?} not found", c.name));
            };
            keys(&data, &c.items, c.default_mode, optional, "configmap")?
        } else if let Some(s) = &v.secret {
            let data = self.secret(ns, &s.secret_name).await?;
            let optional = s.optional == Some(true);
            let Some(data) = data.or_else(|| optional.then(BTreeMap::new)) else {
                return Err(format!("secret {:?} not found", s.secret_name));
            };
            keys(&data, &s.items, s.default_mode, optional, "secret")?
        } else if let Some(d) = &v.downward_api {
            downward(pod, &d.items, d.default_mode, &self.inner.allocatable)?
        } else if let Some(p) = &v.projected {
            let mut out = Payload::new();
            for src in &p.sources {
                let part = if let Some(c) = &src.config_map {
                    let optional = c.optional == Some(true);
                    match self.config_map(ns, &c.name).await? {
                        Some(data) => keys(&data, &c.items, p.default_mode, optional, "configmap")?,
                        None if optional => Payload::new(),
                        None => return Err(format!("configmap {:?} not found", c.name)),
                    }
                } else if let Some(s) = &src.secret {
                    let optional = s.optional == Some(true);
                    match self.secret(ns, &s.name).await? {
                        Some(data) => keys(&data, &s.items, p.default_mode, optional, "secret")?,
                        None if optional => Payload::new(),
                        None => return Err(format!("secret {:?} not found", s.name)),
                    }
                } else if let Some(d) = &src.downward_api {
                    downward(pod, &d.items, p.default_mode, &self.inner.allocatable)?
                } else if let Some(t) = &src.service_account_token {
                    let token = self.token(pod, &v.name, t).await?;
                    let mode = mode_of(None, p.default_mode);
                    Payload::from([(
                        t.path.clone(),
                        File {
                            content: token.into_bytes(),
                            mode,
                        },
                    )])
                } else {
                    let kinds: Vec<&String> = src.other.0.keys().collect();
                    return Err(format!(
                        "projection {kinds:?} is not supported by Skiff's node agent"
                    ));
                };
                out.extend(part);
            }
            out
        } else {
            unreachable!("plugin_of gave a directory for a volume of no known source");
        };
        let tmpfs = self.inner.tmpfs && (v.secret.is_some() || v.projected.is_some());
        on_disk(move || {
            let io = |e: std::io::Error| format!("{}: {e}", dir.display());
            std::fs::create_dir_all(&dir).map_err(io)?;
            if tmpfs {
                mount_tmpfs(&dir, None).map_err(io)?;
            }
            // A new version only (an unchanged one was given to the group when written).
            let wrote = atomic::write(&dir, &payload).map_err(io)?;
            if wrote && let Some(gid) = gid {
                give_to_group(&dir, gid, false).map_err(io)?;
            }
            Ok(())
        })
        .await
    }

    /// The mounts of container `c` of `pod`: each `volumeMounts` entry's directory (a
    /// `subPath` within it, made when it is missing in a directory the pod owns; a
    /// `subPathExpr` is expanded from `env`, the container's environment, first).
    pub fn mounts(
        &self,
        pod: &Pod,
        c: &Container,
        env: &[(String, String)],
    ) -> Result<Vec<Mount>, String> {
        let by_name: HashMap<&str, &Volume> = pod
            .spec
            .volumes
            .iter()
            .map(|v| (v.name.as_str(), v))
            .collect();
        let mut out = Vec::new();
        for m in &c.volume_mounts {
            let v = by_name
                .get(m.name.as_str())
                .ok_or_else(|| format!("volume {:?} not found in the pod", m.name))?;
            let Some(mut host_path) = self.volume_path(&pod.metadata.uid, v) else {
                return Err(format!(
                    "volume {:?} is of a type Skiff cannot mount",
                    m.name
                ));
            };
            let sub_path = if m.sub_path_expr.is_empty() {
                m.sub_path.clone()
            } else {
                let expanded = expand(&m.sub_path_expr, env);
                if let Some(why) = skiff_proto::api::validation::descending_path_error(&expanded) {
                    return Err(format!(
                        "subPathExpr {:?} of volume {:?} expands to {expanded:?}, which {why}",
                        m.sub_path_expr, m.name
                    ));
                }
                expanded
            };
            if !sub_path.is_empty() {
                host_path = host_path.join(&sub_path);
                if std::fs::symlink_metadata(&host_path).is_err() {
                    if v.empty_dir.is_none() && v.host_path.is_none() {
                        return Err(format!(
                            "subPath {sub_path:?} of volume {:?} does not exist",
                            m.name
                        ));
                    }
                    std::fs::create_dir_all(&host_path)
                        .map_err(|e| format!("subPath {}: {e}", host_path.display()))?;
                }
            }
            // The API's data (configMap, secret, downwardAPI, projected) is always mounted
            // read-only, as the kubelet mounts it: the agent writes those files, not the pod.
            let api_data = v.config_map.is_some()
                || v.secret.is_some()
                || v.downward_api.is_some()
                || v.projected.is_some();
            let read_only = m.read_only == Some(true)
                || api_data
                || v.persistent_volume_claim
                    .as_ref()
                    .is_some_and(|p| p.read_only == Some(true));
            out.push(Mount {
                host_path,
                container_path: m.mount_path.clone(),
                read_only,
                propagation: Propagation::of(m.mount_propagation.as_deref()),
            });
        }
        Ok(out)
    }

    /// Container `c`'s environment ([`env_of`]), with the ConfigMaps and Secrets it names
    /// read from the cluster API; an error is the kubelet's `CreateContainerConfigError`.
    pub async fn env(
        &self,
        pod: &Pod,
        c: &Container,
        services: &[(String, String)],
    ) -> Result<Vec<(String, String)>, String> {
        let ns = &pod.metadata.namespace;
        let (mut config_maps, mut secrets) = (env::Sources::new(), env::Sources::new());
        let mut named: Vec<(bool, String)> = Vec::new();
        for f in c.env.iter().filter_map(|e| e.value_from.as_ref()) {
            if let Some(k) = &f.config_map_key_ref {
                named.push((true, k.name.clone()));
            }
            if let Some(k) = &f.secret_key_ref {
                named.push((false, k.name.clone()));
            }
        }
        for f in &c.env_from {
            if let Some(r) = &f.config_map_ref {
                named.push((true, r.name.clone()));
            }
            if let Some(r) = &f.secret_ref {
                named.push((false, r.name.clone()));
            }
        }
        for (is_config_map, name) in named {
            let known = if is_config_map {
                &mut config_maps
            } else {
                &mut secrets
            };
            if let std::collections::btree_map::Entry::Vacant(slot) = known.entry(name) {
                let read = if is_config_map {
                    self.config_map(ns, slot.key()).await?
                } else {
                    self.secret(ns, slot.key()).await?
                };
                slot.insert(read);
            }
        }
        env_of(
            pod,
            c,
            EnvInputs {
                services,
                config_maps: &config_maps,
                secrets: &secrets,
                allocatable: &self.inner.allocatable,
            },
        )
    }

    /// The pod's `/etc/hosts`, as the kubelet writes it for a pod on the pod network: the
    /// loopback names, and the pod's address under its hostname (and, with a `subdomain`,
    /// its fully qualified name in `domain`). Written under the pod's directory; the mount
    /// that puts it at `/etc/hosts`.
    pub async fn hosts_file(&self, pod: &Pod, ip: &str, domain: &str) -> Result<Mount, String> {
        let hostname = crate::engine::hostname_of(pod);
        let subdomain = pod
            .spec
            .other
            .get("subdomain")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        let mut names = Vec::new();
        if !subdomain.is_empty() {
            names.push(format!(
                "{hostname}.{subdomain}.{}.svc.{domain}",
                pod.metadata.namespace
            ));
        }
        names.push(hostname);
        let mut text = String::from(
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
        );
        if !ip.is_empty() {
            text.push_str(&format!("{ip}\t{}\n", names.join("\t")));
        }
        let dir = self.pod_dir(&pod.metadata.uid);
        let path = dir.join("etc-hosts");
        let written = path.clone();
        on_disk(move || {
            let io = |e: std::io::Error| format!("{}: {e}", written.display());
            std::fs::create_dir_all(&dir).map_err(io)?;
            std::fs::write(&written, text).map_err(io)?;
            set_mode(&written, 0o644).map_err(io)
        })
        .await?;
        Ok(Mount {
            host_path: path,
            container_path: "/etc/hosts".into(),
            read_only: false,
            propagation: Propagation::Private,
        })
    }

    /// Removes the pod's volumes (unmounting its tmpfs) and forgets its tokens.
    pub async fn tear_down(&self, uid: &str) {
        let dir = self.pod_dir(uid);
        let removed = on_disk(move || {
            unmount_under(&dir);
            match std::fs::remove_dir_all(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.to_string()),
                _ => Ok(()),
            }
        })
        .await;
        if let Err(e) = removed {
            tracing::warn!(pod_uid = %uid, error = %e, "removing the pod's volumes");
        }
        self.inner
            .tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|(u, _, _), _| u != uid);
        self.lock_claims().retain(|(u, _), _| u != uid);
    }

    /// Removes the volumes of pods not in `live` (pods that went while the agent was down).
    pub async fn remove_orphans(&self, live: &HashSet<String>) {
        let root = self.inner.root.clone();
        // Every pod directory here (one that holds volumes or a hosts file), by UID.
        let found = on_disk(move || {
            let Ok(entries) = std::fs::read_dir(&root) else {
                return Ok(Vec::new());
            };
            Ok(entries
                .flatten()
                .filter(|e| {
                    e.path().join("volumes").is_dir() || e.path().join("etc-hosts").is_file()
                })
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect::<Vec<_>>())
        })
        .await
        .unwrap_or_default();
        for name in found.into_iter().filter(|n| !live.contains(n)) {
            tracing::info!(pod_uid = %name, "removing the volumes of a pod that is gone");
            self.tear_down(&name).await;
        }
    }

    /// The `data` and `binaryData` of ConfigMap `namespace/name`; `None` when it is missing.
    pub async fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        let Some(object) = self.read(config_map_kind(), namespace, name).await? else {
            return Ok(None);
        };
        let Object::Generic(_, cm) = object else {
            return Ok(None);
        };
        let mut out = BTreeMap::new();
        if let Some(data) = cm.at("/data").and_then(serde_json::Value::as_object) {
            for (k, v) in data {
                out.insert(
                    k.clone(),
                    v.as_str().unwrap_or_default().as_bytes().to_vec(),
                );
            }
        }
        if let Some(data) = cm.at("/binaryData").and_then(serde_json::Value::as_object) {
            for (k, v) in data {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(v.as_str().unwrap_or_default())
                    .map_err(|e| format!("configmap {name:?} binaryData {k:?}: {e}"))?;
                out.insert(k.clone(), bytes);
            }
        }
        Ok(Some(out))
    }

    /// The directory of the local volume claim `namespace/name` is bound to: on this node,
    /// `<root>/local-volumes/<volume>` (the local provisioner's PersistentVolume names it so).
    /// An error while it is missing or not bound yet.
    async fn claim_dir(&self, namespace: &str, name: &str) -> Result<PathBuf, String> {
        let kind = Kind::from_name("PersistentVolumeClaim").expect("invariant: declared");
        let Some(Object::Generic(_, claim)) = self.read(kind, namespace, name).await? else {
            return Err(format!("persistentvolumeclaim {name:?} not found"));
        };
        let volume = claim.text("/spec/volumeName");
        if volume.is_empty() || claim.text("/status/phase") != "Bound" {
            // Read again at once next time: the provisioner binds it any moment.
            self.lock_objects()
                .remove(&(kind, namespace.to_owned(), name.to_owned()));
            return Err(format!("persistentvolumeclaim {name:?} is not bound yet"));
        }
        if volume.contains('/') || volume.starts_with('.') {
            return Err(format!(
                "persistentvolumeclaim {name:?} names the volume {volume:?}"
            ));
        }
        Ok(local_volumes_dir(&self.inner.root).join(volume))
    }

    /// The marker beside local volume `dir` that says its PersistentVolume keeps its data
    /// (`persistentVolumeReclaimPolicy: Retain`): the directory outlives the object.
    fn retain_marker(dir: &Path) -> PathBuf {
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        dir.with_file_name(format!(".{name}.retain"))
    }

    /// Reads the PersistentVolume of local volume `dir` (when it can) and marks the
    /// directory kept when its policy is `Retain`; whether it exists (`None`: unknown).
    async fn note_retained(&self, dir: &Path) -> Option<bool> {
        let client = self.inner.client.as_ref()?;
        let name = dir.file_name()?.to_str()?;
        let found = match client.get(volume_kind(), "", name).await {
            Ok(found) => found,
            Err(e) if e.code() == Some(Code::NotFound) => None,
            Err(e) => {
                tracing::debug!(volume = %name, error = %e, "reading a local volume's object");
                return None;
            }
        };
        let Some(Object::Generic(_, pv)) = found else {
            return Some(false);
        };
        if pv.text("/spec/persistentVolumeReclaimPolicy") == "Retain" {
            let marker = Self::retain_marker(dir);
            if !marker.exists()
                && let Err(e) = std::fs::write(&marker, b"")
            {
                tracing::warn!(path = %marker.display(), error = %e, "marking a retained local volume");
            }
        }
        Some(true)
    }

    /// Removes the node's local volumes whose PersistentVolume is gone (deleted with its
    /// claim under reclaim policy `Delete`, or by hand) and that no pod here mounts, as a
    /// local-path provisioner removes a deleted volume's directory; a volume marked
    /// retained stays. Returns the names removed.
    pub async fn collect_local_volumes(&self) -> Vec<String> {
        let dir = local_volumes_dir(&self.inner.root);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let candidates: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .collect();
        let mut removed = Vec::new();
        for path in candidates {
            let in_use = |v: &Volumes| v.lock_claims().values().any(|p| *p == path);
            if in_use(self) || self.note_retained(&path).await != Some(false) {
                continue;
            }
            if in_use(self) || Self::retain_marker(&path).exists() {
                continue;
            }
            let doomed = path.clone();
            let gone = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&doomed)).await;
            match gone {
                Ok(Ok(())) => {
                    tracing::info!(path = %path.display(), "removed a deleted volume's directory");
                    removed.push(
                        path.file_name()
                            .unwrap_or_default()
                            .to_string_lossy()
                            .into_owned(),
                    );
                }
                Ok(Err(e)) => {
                    tracing::warn!(path = %path.display(), error = %e, "removing a deleted volume's directory")
                }
                Err(e) => tracing::warn!(error = %e, "removing a deleted volume's directory"),
            }
        }
        removed
    }

    fn lock_claims(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), PathBuf>> {
        self.inner
            .claims
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The `data` of Secret `namespace/name`; `None` when it is missing.
    pub async fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        match self.read(Kind::Secret, namespace, name).await? {
            Some(Object::Secret(s)) => Ok(Some(s.data)),
            _ => Ok(None),
        }
    }

    /// An object as read at most one resync period ago.
    async fn read(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Object>, String> {
        let key = (kind, namespace.to_owned(), name.to_owned());
        let now = Instant::now();
        if let Some((at, o)) = self.lock_objects().get(&key)
            && now.duration_since(*at) < self.inner.resync
        {
            return Ok(o.clone());
        }
        let Some(client) = &self.inner.client else {
            return Ok(None);
        };
        let found = match patiently(|| client.get(kind, namespace, name)).await {
            Ok(o) => o,
            Err(e) if e.code() == Some(Code::NotFound) => None,
            Err(e) => {
                return Err(format!(
                    "failed to read {} {namespace}/{name}: {e}",
                    kind.name()
                ));
            }
        };
        let mut objects = self.lock_objects();
        // Entries of objects no pod asked about for a while go, so the cache stays small.
        if objects.len() > 1024 {
            let stale = self.inner.resync * 4;
            objects.retain(|_, (at, _)| now.duration_since(*at) < stale);
        }
        objects.insert(key, (now, found.clone()));
        Ok(found)
    }

    fn lock_objects(&self) -> std::sync::MutexGuard<'_, ObjectCache> {
        self.inner
            .objects
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The pod's service account token for `projection`, requested anew when the one held is
    /// near its end.
    async fn token(
        &self,
        pod: &Pod,
        volume: &str,
        projection: &skiff_proto::api::volume::ServiceAccountTokenProjection,
    ) -> Result<String, String> {
        let key = (
            pod.metadata.uid.clone(),
            volume.to_owned(),
            projection.path.clone(),
        );
        let now = SystemTime::now();
        if let Some(t) = self
            .inner
            .tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
            .filter(|t| t.fresh(now))
        {
            return Ok(t.token.clone());
        }
        let client = self
            .inner
            .client
            .as_ref()
            .ok_or("no cluster API to request a service account token from")?;
        let account = &pod.spec.service_account_name;
        let audiences: Vec<String> = Some(projection.audience.clone())
            .filter(|a| !a.is_empty())
            .into_iter()
            .collect();
        let expiration = projection
            .expiration_seconds
            .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(3600)));
        let (token, expires) = patiently(|| {
            client.create_token(
                &pod.metadata.namespace,
                account,
                &audiences,
                expiration,
                Some((&pod.metadata.name, &pod.metadata.uid)),
            )
        })
        .await
        .map_err(|e| format!("failed to fetch token for service account {account:?}: {e}"))?;
        let expires = SystemTime::UNIX_EPOCH
            + Duration::from_secs(u64::try_from(expires.unix()).unwrap_or(0));
        self.inner
            .tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(
                key,
                Token {
                    token: token.clone(),
                    issued: now,
                    expires,
                },
            );
        Ok(token)
    }
}

/// `call`, asked again (up to three times, 300 ms apart) while it is refused: the node
/// authorizer learns of a pod's binding from its own watch, so a member that has not seen it
/// yet refuses the node for a moment, as kube-apiserver's graph does.
async fn patiently<T, F, Fut>(mut call: F) -> Result<T, skiff_proto::client::ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, skiff_proto::client::ClientError>>,
{
    let mut refusals = 0;
    loop {
        match call().await {
            Err(e) if e.code() == Some(Code::PermissionDenied) && refusals < 3 => {
                refusals += 1;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            other => return other,
        }
    }
}

/// A file's mode: its own, else the volume's default, else 0644.
fn mode_of(own: Option<i32>, default: Option<i32>) -> u32 {
    let m = own.or(default).unwrap_or(DEFAULT_MODE);
    u32::try_from(m).unwrap_or(0o644) & 0o777
}

/// The files of a ConfigMap's or Secret's keys: the listed `items`, else every key.
fn keys(
    data: &BTreeMap<String, Vec<u8>>,
    items: &[KeyToPath],
    default_mode: Option<i32>,
    optional: bool,
    what: &str,
) -> Result<Payload, String> {
    let mut out = Payload::new();
    if items.is_empty() {
        for (k, v) in data {
            out.insert(
                k.clone(),
                File {
                    content: v.clone(),
                    mode: mode_of(None, default_mode),
                },
            );
        }
        return Ok(out);
    }
    for item in items {
        match data.get(&item.key) {
            Some(v) => {
                out.insert(
                    item.path.clone(),
                    File {
                        content: v.clone(),
                        mode: mode_of(item.mode, default_mode),
                    },
                );
            }
            None if optional => {}
            None => {
                return Err(format!(
                    "{what} references non-existent {} key: {}",
                    if what == "secret" { "secret" } else { "config" },
                    item.key
                ));
            }
        }
    }
    Ok(out)
}

/// The downward API's files: fields of the pod, and containers' resources.
fn downward(
    pod: &Pod,
    items: &[DownwardApiVolumeFile],
    default_mode: Option<i32>,
    allocatable: &ResourceList,
) -> Result<Payload, String> {
    let mut out = Payload::new();
    for f in items {
        let content = if let Some(r) = &f.field_ref {
            let m = &pod.metadata;
            let pairs = |map: &BTreeMap<String, String>| {
                map.iter()
                    .map(|(k, v)| format!("{k}={v:?}\n"))
                    .collect::<String>()
            };
            match r.field_path.as_str() {
                "metadata.labels" => pairs(&m.labels),
                "metadata.annotations" => pairs(&m.annotations),
                path => env::field_value(pod, path),
            }
        } else if let Some(r) = &f.resource_field_ref {
            let c = pod
                .spec
                .containers
                .iter()
                .chain(&pod.spec.init_containers)
                .find(|c| c.name == r.container_name)
                .ok_or_else(|| format!("container {:?} not found in the pod", r.container_name))?;
            resource_value(c, r, allocatable)?
        } else {
            continue;
        };
        out.insert(
            f.path.clone(),
            File {
                content: content.into_bytes(),
                mode: mode_of(f.mode, default_mode),
            },
        );
    }
    Ok(out)
}

/// Checks (and for the `…OrCreate` types, makes) a hostPath volume's path.
fn host_path(h: &HostPathVolumeSource) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let path = Path::new(&h.path);
    let kind = h.type_.as_deref().unwrap_or("");
    let meta = std::fs::metadata(path);
    let wrong = |what: &str| {
        Err(format!(
            "hostPath type check failed: {} is not a {what}",
            h.path
        ))
    };
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" => match meta {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => wrong("directory"),
            Err(_) => {
                std::fs::create_dir_all(path).map_err(|e| format!("{}: {e}", h.path))?;
                set_mode(path, 0o755).map_err(|e| format!("{}: {e}", h.path))
            }
        },
        "FileOrCreate" => match meta {
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => wrong("file"),
            Err(_) => {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| format!("{}: {e}", h.path))?;
                set_mode(path, 0o644).map_err(|e| format!("{}: {e}", h.path))
            }
        },
        _ => {
            let Ok(m) = meta else {
                return Err(format!(
                    "hostPath type check failed: {} does not exist",
                    h.path
                ));
            };
            let t = m.file_type();
            let ok = match kind {
                "Directory" => t.is_dir(),
                "File" => t.is_file(),
                "Socket" => t.is_socket(),
                "CharDevice" => t.is_char_device(),
                "BlockDevice" => t.is_block_device(),
                _ => false,
            };
            if ok {
                Ok(())
            } else {
                wrong(&kind.to_lowercase())
            }
        }
    }
}

/// Gives what is under `dir` to group `gid` as the kubelet applies a pod's `fsGroup`: each
/// file and directory (not the links the atomic writer swings) is group-owned by it and
/// group-readable, writable too when `writable`; directories keep new files in the group
/// (set-group-ID). It stays on `dir`'s filesystem.
fn give_to_group(dir: &Path, gid: i64, writable: bool) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let gid = u32::try_from(gid).map_err(|_| std::io::Error::other("fsGroup out of range"))?;
    let (file_bits, dir_bits) = if writable {
        (0o660, 0o2770)
    } else {
        (0o440, 0o2550)
    };
    let device = std::fs::symlink_metadata(dir)?.dev();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.file_type().is_symlink() || meta.dev() != device {
            continue;
        }
        std::os::unix::fs::lchown(&path, None, Some(gid))?;
        let bits = if meta.is_dir() { dir_bits } else { file_bits };
        let mode = meta.permissions().mode() & 0o7777;
        if mode | bits != mode {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode | bits))?;
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                stack.push(entry?.path());
            }
        }
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Mounts a tmpfs on `dir` unless one already is (its device differs from its parent's).
fn mount_tmpfs(dir: &Path, size: Option<i64>) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let parent = dir.parent().unwrap_or(dir);
    if std::fs::metadata(dir)?.dev() != std::fs::metadata(parent)?.dev() {
        return Ok(());
    }
    let options = match size {
        Some(bytes) if bytes > 0 => format!("size={bytes}"),
        _ => String::new(),
    };
    nix::mount::mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .map_err(std::io::Error::from)
}

/// Unmounts every mount at or below `dir` (deepest first), as the pod's volumes go.
fn unmount_under(dir: &Path) {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return;
    };
    let mut points: Vec<PathBuf> = mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in points {
        if let Err(e) = nix::mount::umount2(&p, nix::mount::MntFlags::MNT_DETACH) {
            tracing::warn!(path = %p.display(), error = %e, "unmounting a pod volume");
        }
    }
}

#[cfg(test)]
mod tests;
