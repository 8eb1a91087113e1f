//! A container's environment, as the kubelet builds it: `envFrom` first (each ConfigMap's or
//! Secret's keys, with their prefix), then `env` in order, each value with `$(NAME)`
//! expanded from the variables before it, or read from its source: a field of the pod (the
//! downward API), a resource of a container, a key of a ConfigMap or Secret.

use std::collections::BTreeMap;

use skiff_proto::api::Pod;
use skiff_proto::api::meta::ResourceList;
use skiff_proto::api::pod::Container;
use skiff_proto::api::volume::{KeySelector, ResourceFieldSelector};
use skiff_proto::quantity::Quantity;

/// Data of ConfigMaps or Secrets by name; `None`: it does not exist.
pub type Sources = BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>;

/// What a container's environment is read from besides the pod.
#[derive(Debug, Clone, Copy)]
pub struct EnvInputs<'a> {
    /// The variables of the Services the pod sees ([`service_env`]), first of all.
    pub services: &'a [(String, String)],
    pub config_maps: &'a Sources,
    pub secrets: &'a Sources,
    /// The node's allocatable resources: a limit a container does not set.
    pub allocatable: &'a ResourceList,
}

/// The container's environment, or why it cannot be built (a missing ConfigMap, Secret or
/// key that is not optional): the kubelet's `CreateContainerConfigError`.
pub fn env_of(
    pod: &Pod,
    c: &Container,
    inputs: EnvInputs<'_>,
) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = inputs.services.to_vec();
    let set = |out: &mut Vec<(String, String)>, name: String, value: String| {
        out.retain(|(n, _)| *n != name);
        out.push((name, value));
    };
    for from in &c.env_from {
        let (what, r, sources) = match (&from.config_map_ref, &from.secret_ref) {
            (Some(r), _) => ("configmap", r, inputs.config_maps),
            (None, Some(r)) => ("secret", r, inputs.secrets),
            (None, None) => continue,
        };
        let data = match sources.get(&r.name).cloned().flatten() {
            Some(d) => d,
            None if r.optional == Some(true) => continue,
            None => return Err(format!("{what} {:?} not found", r.name)),
        };
        for (k, v) in data {
            let name = format!("{}{k}", from.prefix);
            // Keys that cannot be variable names are left out, as the kubelet leaves them.
            if is_env_var_name(&name) {
                set(&mut out, name, String::from_utf8_lossy(&v).into_owned());
            }
        }
    }
    for e in &c.env {
        let value = match &e.value_from {
            None => Some(expand(&e.value, &out)),
            Some(from) => {
                if let Some(r) = &from.field_ref {
                    Some(field_value(pod, &r.field_path))
                } else if let Some(r) = &from.resource_field_ref {
                    let of = if r.container_name.is_empty() {
                        c
                    } else {
                        pod.spec
                            .containers
                            .iter()
                            .chain(&pod.spec.init_containers)
                            .find(|x| x.name == r.container_name)
                            .ok_or_else(|| {
                                format!("container {:?} not found in the pod", r.container_name)
                            })?
                    };
                    Some(resource_value(of, r, inputs.allocatable)?)
                } else if let Some(k) = &from.config_map_key_ref {
                    key(k, inputs.config_maps, "configmap")?
                } else if let Some(k) = &from.secret_key_ref {
                    key(k, inputs.secrets, "secret")?
                } else {
                    Some(String::new())
                }
            }
        };
        if let Some(value) = value {
            set(&mut out, e.name.clone(), value);
        }
    }
    Ok(out)
}

/// The variables the kubelet sets for Services, as Docker links named them: for each
/// Service with a cluster IP, `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT` (and one per
/// named port), `<NAME>_PORT` and `<NAME>_PORT_<port>_<PROTO>[_PROTO|_PORT|_ADDR]`, the name
/// upper-cased with `-` as `_`. Services are taken in name order; the caller gives the
/// pod's namespace's (unless `enableServiceLinks: false`) and always `default/kubernetes`.
pub fn service_env<'a>(
    services: impl IntoIterator<Item = &'a skiff_proto::api::Service>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for svc in services {
        let ip = &svc.spec.cluster_ip;
        if ip.is_empty() || svc.is_headless() {
            continue;
        }
        let name = svc.metadata.name.to_uppercase().replace('-', "_");
        let Some(first) = svc.spec.ports.first() else {
            continue;
        };
        out.push((format!("{name}_SERVICE_HOST"), ip.clone()));
        out.push((format!("{name}_SERVICE_PORT"), first.port.to_string()));
        for p in svc.spec.ports.iter().filter(|p| !p.name.is_empty()) {
            let port_name = p.name.to_uppercase().replace('-', "_");
            out.push((
                format!("{name}_SERVICE_PORT_{port_name}"),
                p.port.to_string(),
            ));
        }
        let proto = |p: &skiff_proto::api::service::ServicePort| {
            if p.protocol.is_empty() {
                "tcp".to_owned()
            } else {
                p.protocol.to_lowercase()
            }
        };
        out.push((
            format!("{name}_PORT"),
            format!("{}://{ip}:{}", proto(first), first.port),
        ));
        for p in &svc.spec.ports {
            let (proto, port) = (proto(p), p.port);
            let prefix = format!("{name}_PORT_{port}_{}", proto.to_uppercase());
            out.push((prefix.clone(), format!("{proto}://{ip}:{port}")));
            out.push((format!("{prefix}_PROTO"), proto));
            out.push((format!("{prefix}_PORT"), port.to_string()));
            out.push((format!("{prefix}_ADDR"), ip.clone()));
        }
    }
    out
}

/// A key of a ConfigMap or Secret; `None` when it (or its object) is missing and optional.
fn key(k: &KeySelector, sources: &Sources, what: &str) -> Result<Option<String>, String> {
    let optional = k.optional == Some(true);
    let Some(data) = sources.get(&k.name).cloned().flatten() else {
        return if optional {
            Ok(None)
        } else {
            Err(format!("{what} {:?} not found", k.name))
        };
    };
    match data.get(&k.key) {
        Some(v) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
        None if optional => Ok(None),
        None => Err(format!(
            "couldn't find key {} in {} {}",
            k.key,
            if what == "secret" {
                "Secret"
            } else {
                "ConfigMap"
            },
            k.name
        )),
    }
}

/// A variable name the kubelet sets: letters, digits, `_`, `-`, `.`, not starting with a
/// digit.
fn is_env_var_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || matches!(c, '_' | '-' | '.'))
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// A container's resource in units of the divisor, rounded up, as the downward API gives it:
/// a limit the container does not set is the node's allocatable.
pub fn resource_value(
    c: &Container,
    r: &ResourceFieldSelector,
    allocatable: &ResourceList,
) -> Result<String, String> {
    let (side, name) = r
        .resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported container resource {:?}", r.resource))?;
    let from = match side {
        "limits" => &c.resources.limits,
        "requests" => &c.resources.requests,
        _ => return Err(format!("unsupported container resource {:?}", r.resource)),
    };
    let value = from
        .get(name)
        .or_else(|| (side == "limits").then(|| allocatable.get(name)).flatten())
        .cloned()
        .unwrap_or_else(|| Quantity::from_units(0));
    let divisor = r.divisor.unwrap_or_else(|| Quantity::from_units(1));
    let (v, d) = (value.milli_value(), divisor.milli_value());
    if d <= 0 {
        return Err(format!("the divisor of {:?} must be positive", r.resource));
    }
    let units = v / d + i64::from(v % d != 0);
    // A CPU limit or request is at least one unit, as the kubelet rounds it.
    let units = if name == "cpu" { units.max(1) } else { units };
    Ok(units.to_string())
}

/// The downward API's value of `path` for `pod`.
pub(crate) fn field_value(pod: &Pod, path: &str) -> String {
    let m = &pod.metadata;
    let status = pod.status.as_ref();
    let keyed = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix("']"))
            .map(str::to_owned)
    };
    if let Some(key) = keyed("metadata.labels['") {
        return m.labels.get(&key).cloned().unwrap_or_default();
    }
    if let Some(key) = keyed("metadata.annotations['") {
        return m.annotations.get(&key).cloned().unwrap_or_default();
    }
    match path {
        "metadata.name" => m.name.clone(),
        "metadata.namespace" => m.namespace.clone(),
        "metadata.uid" => m.uid.clone(),
        "spec.nodeName" => pod.spec.node_name.clone(),
        "spec.serviceAccountName" => pod.spec.service_account_name.clone(),
        "status.podIP" | "status.podIPs" => status.map(|s| s.pod_ip.clone()).unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" => status.map(|s| s.host_ip.clone()).unwrap_or_default(),
        _ => String::new(),
    }
}

/// `$(NAME)` replaced by the value of a variable defined before, as the kubelet expands
/// them: `$$` is a literal `$`, and a reference to an unknown name stays as written.
pub fn expand(value: &str, defined: &[(String, String)]) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(name) = after
            .strip_prefix('(')
            .and_then(|t| t.find(')').map(|end| &t[..end]))
        {
            match defined.iter().rev().find(|(n, _)| n == name) {
                Some((_, v)) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &after[name.len() + 2..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::fixtures::pod;

    /// Keys and values of one object.
    type Pairs<'a> = &'a [(&'a str, &'a str)];

    fn sources(entries: &[(&str, Option<Pairs<'_>>)]) -> Sources {
        entries
            .iter()
            .map(|(n, d)| {
                (
                    n.to_string(),
                    d.map(|kv| {
                        kv.iter()
                            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                            .collect()
                    }),
                )
            })
            .collect()
    }

    /// The downward API and `$(NAME)` references, as the kubelet resolves them.
    #[test]
    fn environment_from_the_pod_and_earlier_variables() {
        let mut p = pod(
            serde_json::json!({"nodeName": "n1", "containers": [{"name": "c", "image": "i", "env": [
                {"name": "INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "WHO", "value": "$(POD)@$(NODE) #$(INDEX) $(MISSING) $$(POD) 5$"}
            ]}]}),
        );
        p.metadata.name = "pi-3-x".into();
        p.metadata.annotations.insert(
            "batch.kubernetes.io/job-completion-index".into(),
            "3".into(),
        );
        let none = Sources::new();
        let inputs = EnvInputs {
            services: &[],
            config_maps: &none,
            secrets: &none,
            allocatable: &ResourceList::new(),
        };
        let env = env_of(&p, &p.spec.containers[0], inputs).unwrap();
        assert_eq!(
            env,
            [
                ("INDEX".to_string(), "3".to_string()),
                ("POD".into(), "pi-3-x".into()),
                ("NODE".into(), "n1".into()),
                ("WHO".into(), "pi-3-x@n1 #3 $(MISSING) $(POD) 5$".into()),
            ]
        );
    }

    /// envFrom's keys (prefixed, invalid names left out) come first and `env` overrides
    /// them; keys and resources resolve; a missing object or key that is not optional is the
    /// error the kubelet reports.
    #[test]
    fn config_maps_secrets_and_resources() {
        let p = pod(
            serde_json::json!({"containers": [{"name": "c", "image": "i",
            "resources": {"limits": {"memory": "64Mi"}, "requests": {"cpu": "250m"}},
            "envFrom": [{"configMapRef": {"name": "app"}, "prefix": "APP_"},
                        {"secretRef": {"name": "gone", "optional": true}}],
            "env": [
                {"name": "APP_MODE", "value": "override"},
                {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
                {"name": "MAYBE", "valueFrom": {"configMapKeyRef": {"name": "app", "key": "nope", "optional": true}}},
                {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu"}}},
                {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}
            ]}]}),
        );
        let cms = sources(&[(
            "app",
            Some(&[("MODE", "fast"), ("LEVEL", "3"), ("bad key", "x")]),
        )]);
        let secrets = sources(&[("db", Some(&[("password", "s3cret")])), ("gone", None)]);
        let allocatable = ResourceList::from([("cpu".to_string(), Quantity::from_units(4))]);
        let inputs = EnvInputs {
            services: &[],
            config_maps: &cms,
            secrets: &secrets,
            allocatable: &allocatable,
        };
        let env = env_of(&p, &p.spec.containers[0], inputs).unwrap();
        let get = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("APP_LEVEL"), Some("3"));
        assert_eq!(get("APP_MODE"), Some("override"));
        assert_eq!(get("APP_bad key"), None);
        assert_eq!(get("PASSWORD"), Some("s3cret"));
        assert_eq!(get("MAYBE"), None);
        assert_eq!(get("MEM_MI"), Some("64"));
        assert_eq!(get("CPU"), Some("1"));
        assert_eq!(get("CPU_LIMIT"), Some("4"));

        let none = Sources::new();
        let missing = EnvInputs {
            config_maps: &cms,
            secrets: &none,
            ..inputs
        };
        assert_eq!(
            env_of(&p, &p.spec.containers[0], missing).unwrap_err(),
            "secret \"db\" not found"
        );
        let no_key = sources(&[("db", Some(&[]))]);
        let missing_key = EnvInputs {
            secrets: &no_key,
            ..inputs
        };
        assert_eq!(
            env_of(&p, &p.spec.containers[0], missing_key).unwrap_err(),
            "couldn't find key password in Secret db"
        );
    }

    /// Services' variables as the kubelet names them; headless ones and those without an
    /// address give none.
    #[test]
    fn services_become_variables() {
        let svc = |v: serde_json::Value| match skiff_proto::api::Object::from_json(
            skiff_proto::api::Kind::Service,
            v.to_string().as_bytes(),
        )
        .unwrap()
        {
            skiff_proto::api::Object::Service(s) => s,
            _ => unreachable!(),
        };
        let api = svc(
            serde_json::json!({"metadata": {"name": "kubernetes", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}}),
        );
        let headless = svc(
            serde_json::json!({"metadata": {"name": "db", "namespace": "default"},
            "spec": {"clusterIP": "None", "ports": [{"port": 5432}]}}),
        );
        let env = service_env([&api, &headless]);
        let get = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("KUBERNETES_SERVICE_HOST"), Some("10.96.0.1"));
        assert_eq!(get("KUBERNETES_SERVICE_PORT"), Some("443"));
        assert_eq!(get("KUBERNETES_SERVICE_PORT_HTTPS"), Some("443"));
        assert_eq!(get("KUBERNETES_PORT"), Some("tcp://10.96.0.1:443"));
        assert_eq!(get("KUBERNETES_PORT_443_TCP_ADDR"), Some("10.96.0.1"));
        assert_eq!(get("KUBERNETES_PORT_443_TCP_PROTO"), Some("tcp"));
        assert!(env.iter().all(|(k, _)| !k.starts_with("DB_")), "{env:?}");
    }
}
