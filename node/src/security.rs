//! The security a container runs with, as the kubelet derives it: the container's
//! `securityContext` over the pod's (`runAsUser`, `runAsGroup`, `runAsNonRoot`,
//! `seccompProfile`), the pod's `supplementalGroups` and `fsGroup`, and the container's own
//! `privileged`, `readOnlyRootFilesystem`, `allowPrivilegeEscalation` and `capabilities`.
//! The runtime turns it into its own terms (CRI's `LinuxContainerSecurityContext`); the
//! `runAsNonRoot` check against the image's user is here, for every runtime.

use serde_json::Value;
use skiff_proto::api::Pod;
use skiff_proto::api::meta::strings_of as strings;
use skiff_proto::api::pod::Container;

/// The paths of `/proc` and `/sys` hidden from unprivileged containers, as the kubelet's
/// `DefaultProcMount` hides them.
pub const MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// The paths of `/proc` read-only to unprivileged containers.
pub const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The seccomp profile a container runs under.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Seccomp {
    /// No profile: the kubelet's default while `SeccompDefault` is off.
    #[default]
    Unconfined,
    RuntimeDefault,
    /// A profile file under the kubelet's seccomp directory.
    Localhost(String),
}

/// What a container runs as and may do.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Security {
    pub run_as_user: Option<i64>,
    pub run_as_group: Option<i64>,
    pub run_as_non_root: bool,
    /// The pod's `supplementalGroups`, then its `fsGroup`.
    pub supplemental_groups: Vec<i64>,
    pub privileged: bool,
    pub read_only_root: bool,
    /// `allowPrivilegeEscalation: false`: the process may not gain privileges (setuid).
    pub no_new_privs: bool,
    pub add_capabilities: Vec<String>,
    pub drop_capabilities: Vec<String>,
    pub seccomp: Seccomp,
    /// The pod, as the kubelet names it in messages: `name_namespace(uid)`.
    pub pod: String,
}

/// The user an image runs as when nothing overrides it: a numeric `uid`, else a `username`;
/// neither means root.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImageUser {
    pub uid: Option<i64>,
    pub username: String,
}

fn int(v: Option<&Value>, key: &str) -> Option<i64> {
    v?.get(key)?.as_i64()
}

fn flag(v: Option<&Value>, key: &str) -> Option<bool> {
    v?.get(key)?.as_bool()
}

fn seccomp(v: Option<&Value>) -> Option<Seccomp> {
    let profile = v?.get("seccompProfile")?;
    Some(match profile.get("type")?.as_str()? {
        "RuntimeDefault" => Seccomp::RuntimeDefault,
        "Localhost" => Seccomp::Localhost(
            profile
                .get("localhostProfile")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        ),
        _ => Seccomp::Unconfined,
    })
}

/// The security of container `c` of `pod`: its own settings over the pod's.
pub fn security_of(pod: &Pod, c: &Container) -> Security {
    let pod_sc = pod.spec.other.get("securityContext");
    let sc = c.other.get("securityContext");
    let mut supplemental_groups: Vec<i64> = pod_sc
        .and_then(|s| s.get("supplementalGroups"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default();
    if let Some(fs_group) = fs_group(pod)
        && !supplemental_groups.contains(&fs_group)
    {
        supplemental_groups.push(fs_group);
    }
    let capabilities = sc.and_then(|s| s.get("capabilities"));
    Security {
        run_as_user: int(sc, "runAsUser").or_else(|| int(pod_sc, "runAsUser")),
        run_as_group: int(sc, "runAsGroup").or_else(|| int(pod_sc, "runAsGroup")),
        run_as_non_root: flag(sc, "runAsNonRoot")
            .or_else(|| flag(pod_sc, "runAsNonRoot"))
            .unwrap_or(false),
        supplemental_groups,
        privileged: flag(sc, "privileged").unwrap_or(false),
        read_only_root: flag(sc, "readOnlyRootFilesystem").unwrap_or(false),
        no_new_privs: flag(sc, "allowPrivilegeEscalation") == Some(false),
        add_capabilities: strings(capabilities.and_then(|c| c.get("add"))),
        drop_capabilities: strings(capabilities.and_then(|c| c.get("drop"))),
        seccomp: seccomp(sc).or_else(|| seccomp(pod_sc)).unwrap_or_default(),
        pod: format!(
            "{}_{}({})",
            pod.metadata.name, pod.metadata.namespace, pod.metadata.uid
        ),
    }
}

/// The pod's `securityContext.fsGroup`: the group its volumes are given to.
pub fn fs_group(pod: &Pod) -> Option<i64> {
    int(pod.spec.other.get("securityContext"), "fsGroup")
}

impl Security {
    /// With `runAsNonRoot`, the user the container would run as must be known and not root,
    /// as the kubelet checks it before creating the container (its messages, less the pod
    /// and container the caller adds). `image` is the image's own user.
    pub fn verify_non_root(&self, image: &ImageUser, container: &str) -> Result<(), String> {
        if !self.run_as_non_root {
            return Ok(());
        }
        let why = match self.run_as_user {
            Some(0) => "container's runAsUser breaks non-root policy".to_owned(),
            Some(_) => return Ok(()),
            None => match (image.uid, image.username.as_str()) {
                (Some(0), _) | (None, "") => {
                    "container has runAsNonRoot and image will run as root".to_owned()
                }
                (Some(_), _) => return Ok(()),
                (None, name) => format!(
                    "container has runAsNonRoot and image has non-numeric user ({name}), cannot verify user is non-root"
                ),
            },
        };
        Err(format!(
            "{why} (pod: {:?}, container: {container})",
            self.pod
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::fixtures::pod;

    /// The container's settings win over the pod's; the fsGroup joins the supplemental
    /// groups once; capabilities, seccomp and the flags come through.
    #[test]
    fn the_container_overrides_the_pod() {
        let p = pod(serde_json::json!({
            "securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000,
                                "supplementalGroups": [4000, 2000], "runAsNonRoot": true,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {"name": "a", "image": "i"},
                {"name": "b", "image": "i", "securityContext": {
                    "runAsUser": 1001, "readOnlyRootFilesystem": true,
                    "allowPrivilegeEscalation": false,
                    "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                    "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}}]}));
        let a = security_of(&p, &p.spec.containers[0]);
        assert_eq!(
            (a.run_as_user, a.run_as_group, a.run_as_non_root),
            (Some(1000), Some(3000), true)
        );
        assert_eq!(a.supplemental_groups, [4000, 2000]);
        assert_eq!(a.seccomp, Seccomp::RuntimeDefault);
        assert!(!a.read_only_root && !a.no_new_privs && !a.privileged);
        let b = security_of(&p, &p.spec.containers[1]);
        assert_eq!((b.run_as_user, b.run_as_group), (Some(1001), Some(3000)));
        assert!(b.read_only_root && b.no_new_privs);
        assert_eq!(
            (
                b.add_capabilities.as_slice(),
                b.drop_capabilities.as_slice()
            ),
            (
                &["NET_BIND_SERVICE".to_owned()][..],
                &["ALL".to_owned()][..]
            )
        );
        assert_eq!(b.seccomp, Seccomp::Localhost("p.json".into()));
        let plain = pod(serde_json::json!({"containers": [{"name": "c", "image": "i"}]}));
        let s = security_of(&plain, &plain.spec.containers[0]);
        assert_eq!(
            s,
            Security {
                pod: "p_default(u)".into(),
                ..Security::default()
            }
        );
    }

    /// `runAsNonRoot` as the kubelet checks it: a non-root runAsUser passes; root, or an
    /// image that runs as root (or says nothing), or one whose user is a name, does not.
    #[test]
    fn run_as_non_root_is_checked_against_the_user() {
        let check = |user: Option<i64>, image: ImageUser| {
            Security {
                run_as_non_root: true,
                run_as_user: user,
                pod: "p_default(u)".into(),
                ..Security::default()
            }
            .verify_non_root(&image, "c")
        };
        let root = ImageUser::default();
        assert_eq!(check(Some(1000), root.clone()), Ok(()));
        assert_eq!(
            check(Some(0), root.clone()).unwrap_err(),
            "container's runAsUser breaks non-root policy (pod: \"p_default(u)\", container: c)"
        );
        assert_eq!(
            check(None, root).unwrap_err(),
            "container has runAsNonRoot and image will run as root (pod: \"p_default(u)\", container: c)"
        );
        let numeric = ImageUser {
            uid: Some(65532),
            username: String::new(),
        };
        assert_eq!(check(None, numeric), Ok(()));
        let named = ImageUser {
            uid: None,
            username: "nginx".into(),
        };
        assert!(
            check(None, named)
                .unwrap_err()
                .starts_with("container has runAsNonRoot and image has non-numeric user (nginx)")
        );
        assert_eq!(
            Security::default().verify_non_root(&ImageUser::default(), "c"),
            Ok(())
        );
    }
}
