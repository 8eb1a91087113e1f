//! PodSecurity admission: the Pod Security Standards (`privileged`, `baseline`, `restricted`)
//! enforced per namespace by its `pod-security.kubernetes.io/enforce` label, as
//! kube-apiserver's PodSecurity admission enforces them on pod creation (covering what the
//! old SecurityContextDeny plugin did, and more).
//!
//! | level | refuses |
//! |---|---|
//! | `privileged` | nothing |
//! | `baseline` | host namespaces, privileged containers, capabilities beyond the default set, hostPath volumes, host ports, `Unconfined` seccomp, a non-default `/proc` mount, unsafe sysctls, custom SELinux users, roles and types |
//! | `restricted` | all of baseline's, and: volume types other than configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected and secret; privilege escalation not turned off; running as root (`runAsNonRoot` not true, or `runAsUser: 0`); seccomp not `RuntimeDefault` or `Localhost`; capabilities not dropped to none (`NET_BIND_SERVICE` may be added back) |
//!
//! The checks read the pod's JSON, so fields Skiff keeps without modelling
//! (`securityContext`, `volumes`) are judged as written. A refusal lists every check the
//! pod fails, in kube-apiserver's words.

use std::collections::BTreeMap;

use serde_json::Value;

/// The label that sets a namespace's enforced level.
pub const ENFORCE: &str = "pod-security.kubernetes.io/enforce";

/// A Pod Security Standard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }

    /// The level a namespace's labels enforce: `privileged` when unset, `restricted` for a
    /// value that names no level (validation refuses those; one stored before it did is
    /// read as the strictest).
    pub fn of_namespace(labels: &BTreeMap<String, String>) -> Level {
        labels.get(ENFORCE).map_or(Level::Privileged, |v| {
            Level::parse(v).unwrap_or(Level::Restricted)
        })
    }
}

/// The capabilities a container may add under `baseline`: the container runtimes' default set.
const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Sysctls every pod may set (they are namespaced and cannot reach the node).
const SAFE_SYSCTLS: [&str; 9] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
];

const SELINUX_TYPES: [&str; 4] = [
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

const RESTRICTED_VOLUMES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// Every container of the pod (init, app and ephemeral), with its name.
fn containers(pod: &Value) -> Vec<(&str, &Value)> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .filter_map(|k| pod.pointer(&format!("/spec/{k}")).and_then(Value::as_array))
        .flatten()
        .map(|c| (c.get("name").and_then(Value::as_str).unwrap_or(""), c))
        .collect()
}

fn text<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn flag(v: &Value, pointer: &str) -> Option<bool> {
    v.pointer(pointer).and_then(Value::as_bool)
}

fn strings<'a>(v: &'a Value, pointer: &str) -> Vec<&'a str> {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `container "a"` or `containers "a", "b"`.
fn containers_named(names: &[&str]) -> String {
    if names.len() == 1 {
        format!("container {:?}", names[0])
    } else {
        format!("containers {}", quoted(names))
    }
}

/// What `pod` (its JSON) violates at `level`: one entry per failed check, as kube-apiserver
/// words them; empty when it passes.
pub fn violations(level: Level, pod: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if level == Level::Privileged {
        return out;
    }
    let cs = containers(pod);
    // baseline
    let host: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .iter()
        .filter(|k| flag(pod, &format!("/spec/{k}")) == Some(true))
        .map(|k| format!("{k}=true"))
        .collect();
    if !host.is_empty() {
        out.push(format!("host namespaces ({})", host.join(", ")));
    }
    let privileged: Vec<&str> = cs
        .iter()
        .filter(|(_, c)| flag(c, "/securityContext/privileged") == Some(true))
        .map(|(n, _)| *n)
        .collect();
    if !privileged.is_empty() {
        out.push(format!(
            "privileged ({} must not set securityContext.privileged=true)",
            containers_named(&privileged)
        ));
    }
    let added: Vec<String> = cs
        .iter()
        .flat_map(|(n, c)| {
            strings(c, "/securityContext/capabilities/add")
                .into_iter()
                .filter(|cap| !BASELINE_CAPABILITIES.contains(cap))
                .map(move |cap| format!("container {n:?} must not include {cap:?} in securityContext.capabilities.add"))
        })
        .collect();
    if !added.is_empty() {
        out.push(format!("non-default capabilities ({})", added.join(", ")));
    }
    let volumes: Vec<&Value> = pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let host_paths: Vec<&str> = volumes
        .iter()
        .filter(|v| v.get("hostPath").is_some())
        .filter_map(|v| text(v, "/name"))
        .collect();
    if !host_paths.is_empty() {
        out.push(format!(
            "hostPath volumes ({} {})",
            if host_paths.len() == 1 {
                "volume"
            } else {
                "volumes"
            },
            quoted(&host_paths)
        ));
    }
    let host_ports: Vec<String> = cs
        .iter()
        .flat_map(|(n, c)| {
            c.get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|p| p.get("hostPort").and_then(Value::as_i64))
                .filter(|p| *p != 0)
                .map(move |p| format!("container {n:?} uses hostPort {p}"))
        })
        .collect();
    if !host_ports.is_empty() {
        out.push(format!("hostPort ({})", host_ports.join(", ")));
    }
    let unconfined_pod =
        text(pod, "/spec/securityContext/seccompProfile/type") == Some("Unconfined");
    let unconfined: Vec<&str> = cs
        .iter()
        .filter(|(_, c)| text(c, "/securityContext/seccompProfile/type") == Some("Unconfined"))
        .map(|(n, _)| *n)
        .collect();
    if unconfined_pod || !unconfined.is_empty() {
        let who = match (unconfined_pod, unconfined.is_empty()) {
            (true, true) => "pod".to_owned(),
            (true, false) => format!("pod and {}", containers_named(&unconfined)),
            _ => containers_named(&unconfined),
        };
        out.push(format!(
            "seccompProfile ({who} must not set securityContext.seccompProfile.type to \"Unconfined\")"
        ));
    }
    let proc_mount: Vec<&str> = cs
        .iter()
        .filter(|(_, c)| text(c, "/securityContext/procMount").is_some_and(|m| m != "Default"))
        .map(|(n, _)| *n)
        .collect();
    if !proc_mount.is_empty() {
        out.push(format!(
            "procMount ({} must not set securityContext.procMount to a value other than \"Default\")",
            containers_named(&proc_mount)
        ));
    }
    let sysctls: Vec<&str> = pod
        .pointer("/spec/securityContext/sysctls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| text(s, "/name"))
        .filter(|s| !SAFE_SYSCTLS.contains(s))
        .collect();
    if !sysctls.is_empty() {
        out.push(format!("forbidden sysctls ({})", sysctls.join(", ")));
    }
    let selinux_bad = |ctx: &Value| {
        let Some(o) = ctx.pointer("/seLinuxOptions") else {
            return false;
        };
        text(o, "/user").is_some_and(|u| !u.is_empty())
            || text(o, "/role").is_some_and(|r| !r.is_empty())
            || text(o, "/type").is_some_and(|t| !t.is_empty() && !SELINUX_TYPES.contains(&t))
    };
    let pod_ctx = pod
        .pointer("/spec/securityContext")
        .cloned()
        .unwrap_or(Value::Null);
    if selinux_bad(&pod_ctx)
        || cs
            .iter()
            .any(|(_, c)| c.get("securityContext").is_some_and(selinux_bad))
    {
        out.push(
            "seLinuxOptions (the pod or a container sets a forbidden SELinux user, role or type)"
                .to_owned(),
        );
    }
    if level == Level::Baseline {
        return out;
    }
    // restricted
    let restricted: Vec<String> = volumes
        .iter()
        .filter_map(|v| {
            let name = text(v, "/name").unwrap_or("");
            let kind = v
                .as_object()?
                .keys()
                .find(|k| *k != "name")
                .cloned()
                .unwrap_or_default();
            (!RESTRICTED_VOLUMES.contains(&kind.as_str()))
                .then(|| format!("volume {name:?} uses restricted volume type {kind:?}"))
        })
        .collect();
    if !restricted.is_empty() {
        out.push(format!(
            "restricted volume types ({})",
            restricted.join(", ")
        ));
    }
    let escalating: Vec<&str> = cs
        .iter()
        .filter(|(_, c)| flag(c, "/securityContext/allowPrivilegeEscalation") != Some(false))
        .map(|(n, _)| *n)
        .collect();
    if !escalating.is_empty() {
        out.push(format!(
            "allowPrivilegeEscalation != false ({} must set securityContext.allowPrivilegeEscalation=false)",
            containers_named(&escalating)
        ));
    }
    let capabilities: Vec<String> = cs
        .iter()
        .flat_map(|(n, c)| {
            let mut v = Vec::new();
            if !strings(c, "/securityContext/capabilities/drop").contains(&"ALL") {
                v.push(format!(
                    "container {n:?} must set securityContext.capabilities.drop=[\"ALL\"]"
                ));
            }
            for cap in strings(c, "/securityContext/capabilities/add") {
                if cap != "NET_BIND_SERVICE" {
                    v.push(format!(
                        "container {n:?} must not include {cap:?} in securityContext.capabilities.add"
                    ));
                }
            }
            v
        })
        .collect();
    if !capabilities.is_empty() {
        out.push(format!(
            "unrestricted capabilities ({})",
            capabilities.join("; ")
        ));
    }
    let pod_non_root = flag(pod, "/spec/securityContext/runAsNonRoot");
    let root: Vec<&str> = cs
        .iter()
        .filter(|(_, c)| flag(c, "/securityContext/runAsNonRoot").or(pod_non_root) != Some(true))
        .map(|(n, _)| *n)
        .collect();
    if pod_non_root == Some(false) || !root.is_empty() {
        out.push(format!(
            "runAsNonRoot != true (pod or {} must set securityContext.runAsNonRoot=true)",
            containers_named(&root)
        ));
    }
    let uid_zero = |ctx: Option<&Value>| {
        ctx.and_then(|c| c.get("runAsUser")).and_then(Value::as_i64) == Some(0)
    };
    let zero: Vec<&str> = cs
        .iter()
        .filter(|(_, c)| uid_zero(c.get("securityContext")))
        .map(|(n, _)| *n)
        .collect();
    if uid_zero(pod.pointer("/spec/securityContext")) || !zero.is_empty() {
        out.push("runAsUser=0 (pod and containers must not set runAsUser=0)".to_owned());
    }
    let pod_seccomp = text(pod, "/spec/securityContext/seccompProfile/type");
    let unset: Vec<&str> = cs
        .iter()
        .filter(|(_, c)| {
            let t = text(c, "/securityContext/seccompProfile/type").or(pod_seccomp);
            !matches!(t, Some("RuntimeDefault" | "Localhost"))
        })
        .map(|(n, _)| *n)
        .collect();
    if !unset.is_empty() {
        out.push(format!(
            "seccompProfile (pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")",
            containers_named(&unset)
        ));
    }
    out
}

/// The refusal of a pod that fails `level`'s checks.
pub fn refusal(level: Level, violations: &[String]) -> String {
    format!(
        "violates PodSecurity \"{}:latest\": {}",
        level.as_str(),
        violations.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": spec})
    }

    /// A pod as `kubectl run` makes it passes baseline and fails restricted with every
    /// reason named; one written for restricted passes both.
    #[test]
    fn the_standards_as_kubernetes_words_them() {
        let plain = pod(json!({"containers": [{"name": "c", "image": "busybox"}]}));
        assert!(violations(Level::Baseline, &plain).is_empty());
        assert_eq!(
            violations(Level::Restricted, &plain),
            [
                "allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false)",
                "unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"])",
                "runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true)",
                "seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")",
            ]
        );
        let hardened = pod(json!({
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "image": "busybox", "securityContext": {
                "allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
            }}],
            "volumes": [{"name": "tmp", "emptyDir": {}}]
        }));
        assert!(violations(Level::Restricted, &hardened).is_empty());
        assert!(violations(Level::Privileged, &plain).is_empty());
    }

    #[test]
    fn baseline_refuses_the_host() {
        let risky = pod(json!({
            "hostNetwork": true,
            "hostPID": true,
            "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]},
            "containers": [{"name": "c", "image": "busybox",
                "ports": [{"containerPort": 80, "hostPort": 8080}],
                "securityContext": {"privileged": true, "capabilities": {"add": ["NET_ADMIN", "CHOWN"]},
                    "seccompProfile": {"type": "Unconfined"}}}],
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}]
        }));
        assert_eq!(
            violations(Level::Baseline, &risky),
            [
                "host namespaces (hostNetwork=true, hostPID=true)",
                "privileged (container \"c\" must not set securityContext.privileged=true)",
                "non-default capabilities (container \"c\" must not include \"NET_ADMIN\" in securityContext.capabilities.add)",
                "hostPath volumes (volume \"root\")",
                "hostPort (container \"c\" uses hostPort 8080)",
                "seccompProfile (container \"c\" must not set securityContext.seccompProfile.type to \"Unconfined\")",
                "forbidden sysctls (kernel.msgmax)",
            ]
        );
        let restricted = violations(Level::Restricted, &risky);
        assert!(
            restricted.contains(&"restricted volume types (volume \"root\" uses restricted volume type \"hostPath\")".to_owned()),
            "{restricted:?}"
        );
        assert_eq!(
            refusal(Level::Baseline, &violations(Level::Baseline, &risky)[..1]),
            "violates PodSecurity \"baseline:latest\": host namespaces (hostNetwork=true, hostPID=true)"
        );
    }

    #[test]
    fn namespace_labels_set_the_level() {
        let mut labels = BTreeMap::new();
        assert_eq!(Level::of_namespace(&labels), Level::Privileged);
        labels.insert(ENFORCE.to_owned(), "baseline".to_owned());
        assert_eq!(Level::of_namespace(&labels), Level::Baseline);
        labels.insert(ENFORCE.to_owned(), "strict".to_owned());
        assert_eq!(Level::of_namespace(&labels), Level::Restricted);
    }
}
