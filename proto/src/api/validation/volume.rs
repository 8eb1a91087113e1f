//! A pod's volumes, its containers' mounts and the sources of their environment, as
//! kube-apiserver checks them: one source per volume and per `valueFrom`, unique volume names
//! and mount paths, mounts of volumes that exist, relative file paths that stay inside the
//! volume, file modes within 0777.

use std::collections::HashSet;

use super::names::{dns1123_label_message, is_dns1123_label, is_dns1123_subdomain};
use super::{Errors, Path};
use crate::api::pod::{Container, PodSpec};
use crate::api::volume::{
    DownwardApiVolumeFile, HOST_PATH_TYPES, KeyToPath, ServiceAccountTokenProjection, Volume,
};

/// The volumes of `s`, at `spec.volumes`.
pub(super) fn validate_volumes(errs: &mut Errors, spec: &Path, s: &PodSpec) {
    let mut names = HashSet::new();
    for (i, v) in s.volumes.iter().enumerate() {
        let p = spec.field("volumes").index(i);
        if v.name.is_empty() {
            errs.add(&p.field("name"), "required value");
        } else if !is_dns1123_label(&v.name) {
            errs.add(&p.field("name"), dns1123_label_message(&v.name));
        } else if !names.insert(v.name.as_str()) {
            errs.add(&p.field("name"), format!("duplicate value {:?}", v.name));
        }
        validate_source(errs, &p, v);
    }
}

fn validate_source(errs: &mut Errors, p: &Path, v: &Volume) {
    match v.sources().as_slice() {
        [] => errs.add(p, "must specify a volume type"),
        [_] => {}
        [first, rest @ ..] => errs.add(
            &p.field(rest[0]),
            format!("forbidden: may not specify more than 1 volume type (already has {first})"),
        ),
    }
    if let Some(e) = &v.empty_dir {
        errs.one_of(
            &p.field("emptyDir").field("medium"),
            &e.medium,
            &["", "Memory"],
        );
        if e.size_limit.as_ref().is_some_and(|q| q.is_negative()) {
            errs.add(
                &p.field("emptyDir").field("sizeLimit"),
                "invalid value: must be greater than or equal to 0",
            );
        }
    }
    if let Some(c) = &v.config_map {
        let cp = p.field("configMap");
        if c.name.is_empty() {
            errs.add(&cp.field("name"), "required value");
        }
        validate_mode(errs, &cp.field("defaultMode"), c.default_mode);
        validate_items(errs, &cp.field("items"), &c.items);
    }
    if let Some(s) = &v.secret {
        let sp = p.field("secret");
        if s.secret_name.is_empty() {
            errs.add(&sp.field("secretName"), "required value");
        }
        validate_mode(errs, &sp.field("defaultMode"), s.default_mode);
        validate_items(errs, &sp.field("items"), &s.items);
    }
    if let Some(d) = &v.downward_api {
        let dp = p.field("downwardAPI");
        validate_mode(errs, &dp.field("defaultMode"), d.default_mode);
        validate_downward(errs, &dp.field("items"), &d.items);
    }
    if let Some(pr) = &v.projected {
        let pp = p.field("projected");
        validate_mode(errs, &pp.field("defaultMode"), pr.default_mode);
        let mut paths = HashSet::new();
        for (i, src) in pr.sources.iter().enumerate() {
            let sp = pp.field("sources").index(i);
            let mut set = Vec::new();
            if let Some(c) = &src.config_map {
                set.push("configMap");
                if c.name.is_empty() {
                    errs.add(&sp.field("configMap").field("name"), "required value");
                }
                validate_items(errs, &sp.field("configMap").field("items"), &c.items);
                paths.extend(c.items.iter().map(|k| k.path.clone()));
            }
            if let Some(s) = &src.secret {
                set.push("secret");
                if s.name.is_empty() {
                    errs.add(&sp.field("secret").field("name"), "required value");
                }
                validate_items(errs, &sp.field("secret").field("items"), &s.items);
                paths.extend(s.items.iter().map(|k| k.path.clone()));
            }
            if let Some(d) = &src.downward_api {
                set.push("downwardAPI");
                validate_downward(errs, &sp.field("downwardAPI").field("items"), &d.items);
            }
            if let Some(t) = &src.service_account_token {
                set.push("serviceAccountToken");
                validate_token(errs, &sp.field("serviceAccountToken"), t);
                if !paths.insert(t.path.clone()) {
                    errs.add(
                        &sp.field("serviceAccountToken").field("path"),
                        format!("conflicting duplicate paths {:?}", t.path),
                    );
                }
            }
            set.extend(src.other.0.keys().map(String::as_str));
            match set.as_slice() {
                [] => errs.add(&sp, "must specify a projection source"),
                [_] => {}
                [first, rest @ ..] => errs.add(
                    &sp.field(rest[0]),
                    format!("forbidden: may not specify more than 1 projection source (already has {first})"),
                ),
            }
        }
    }
    if let Some(h) = &v.host_path {
        let hp = p.field("hostPath");
        if h.path.is_empty() {
            errs.add(&hp.field("path"), "required value");
        } else if !h.path.starts_with('/') {
            errs.add(
                &hp.field("path"),
                format!("invalid value {:?}: must be an absolute path", h.path),
            );
        } else if h.path.split('/').any(|s| s == "..") {
            errs.add(
                &hp.field("path"),
                format!("invalid value {:?}: must not contain '..'", h.path),
            );
        }
        if let Some(t) = &h.type_ {
            errs.one_of(&hp.field("type"), t, &HOST_PATH_TYPES);
        }
    }
    if let Some(c) = &v.persistent_volume_claim
        && c.claim_name.is_empty()
    {
        errs.add(
            &p.field("persistentVolumeClaim").field("claimName"),
            "required value",
        );
    }
}

/// A file path inside a volume: relative, no `..` element.
fn validate_file_path(errs: &mut Errors, p: &Path, path: &str) {
    if path.is_empty() {
        errs.add(p, "required value");
    } else if path.starts_with('/') {
        errs.add(
            p,
            format!("invalid value {path:?}: must be a relative path"),
        );
    } else if path.split('/').any(|s| s == "..") {
        errs.add(p, format!("invalid value {path:?}: must not contain '..'"));
    } else if path.starts_with("..") {
        errs.add(
            p,
            format!("invalid value {path:?}: must not start with '..'"),
        );
    }
}

fn validate_mode(errs: &mut Errors, p: &Path, mode: Option<i32>) {
    if let Some(m) = mode
        && !(0..=0o777).contains(&m)
    {
        errs.add(
            p,
            format!(
                "invalid value {m}: must be a number between 0 and 0777 (octal), both inclusive"
            ),
        );
    }
}

fn validate_items(errs: &mut Errors, p: &Path, items: &[KeyToPath]) {
    for (i, k) in items.iter().enumerate() {
        let ip = p.index(i);
        if k.key.is_empty() {
            errs.add(&ip.field("key"), "required value");
        }
        validate_file_path(errs, &ip.field("path"), &k.path);
        validate_mode(errs, &ip.field("mode"), k.mode);
    }
}

fn validate_downward(errs: &mut Errors, p: &Path, items: &[DownwardApiVolumeFile]) {
    for (i, f) in items.iter().enumerate() {
        let ip = p.index(i);
        validate_file_path(errs, &ip.field("path"), &f.path);
        validate_mode(errs, &ip.field("mode"), f.mode);
        match (&f.field_ref, &f.resource_field_ref) {
            (Some(r), None) => validate_field_path(
                errs,
                &ip.field("fieldRef").field("fieldPath"),
                &r.field_path,
                true,
            ),
            (None, Some(r)) => {
                if r.container_name.is_empty() {
                    errs.add(
                        &ip.field("resourceFieldRef").field("containerName"),
                        "required value",
                    );
                }
                validate_resource_name(
                    errs,
                    &ip.field("resourceFieldRef").field("resource"),
                    &r.resource,
                );
            }
            (Some(_), Some(_)) => errs.add(
                &ip,
                "fieldRef and resourceFieldRef can not be specified simultaneously",
            ),
            (None, None) => errs.add(&ip, "must specify one of fieldRef or resourceFieldRef"),
        }
    }
}

fn validate_token(errs: &mut Errors, p: &Path, t: &ServiceAccountTokenProjection) {
    validate_file_path(errs, &p.field("path"), &t.path);
    if let Some(s) = t.expiration_seconds {
        if s < 600 {
            errs.add(
                &p.field("expirationSeconds"),
                format!("invalid value {s}: may not specify a duration less than 10 minutes"),
            );
        } else if s > 1 << 32 {
            errs.add(
                &p.field("expirationSeconds"),
                format!("invalid value {s}: may not specify a duration larger than 2^32 seconds"),
            );
        }
    }
}

/// The pod fields the downward API reads: `volume` for a file (labels and annotations whole
/// too), else for an environment variable (status addresses too).
pub(super) fn validate_field_path(errs: &mut Errors, p: &Path, path: &str, volume: bool) {
    let keyed = ["metadata.labels['", "metadata.annotations['"]
        .iter()
        .any(|prefix| path.starts_with(prefix) && path.ends_with("']"));
    let whole = matches!(
        path,
        "metadata.name" | "metadata.namespace" | "metadata.uid"
    ) || (volume && matches!(path, "metadata.labels" | "metadata.annotations"))
        || (!volume
            && matches!(
                path,
                "spec.nodeName"
                    | "spec.serviceAccountName"
                    | "status.hostIP"
                    | "status.hostIPs"
                    | "status.podIP"
                    | "status.podIPs"
            ));
    if !(keyed || whole) {
        errs.add(
            p,
            format!(
                "unsupported value {path:?}: not a field the downward API {} reads",
                if volume { "volume" } else { "environment" }
            ),
        );
    }
}

/// `limits.cpu`, `requests.memory`, …: the resources the downward API reads.
fn validate_resource_name(errs: &mut Errors, p: &Path, resource: &str) {
    errs.one_of(
        p,
        resource,
        &[
            "limits.cpu",
            "limits.memory",
            "limits.ephemeral-storage",
            "requests.cpu",
            "requests.memory",
            "requests.ephemeral-storage",
        ],
    );
}

/// Why `path` cannot name a place inside a volume (absolute, or climbing out with `..`);
/// `None` for an empty or descending one. The node checks an expanded `subPathExpr` with it.
pub fn descending_path_error(path: &str) -> Option<&'static str> {
    if path.starts_with('/') {
        Some("must be a relative path")
    } else if path.split('/').any(|s| s == "..") {
        Some("must not contain '..'")
    } else {
        None
    }
}

/// A container's `volumeMounts`, `env[].valueFrom` and `envFrom`, against the pod's volumes.
pub(super) fn validate_container_refs(errs: &mut Errors, p: &Path, c: &Container, s: &PodSpec) {
    let volumes: HashSet<&str> = s.volumes.iter().map(|v| v.name.as_str()).collect();
    let mut paths = HashSet::new();
    for (i, m) in c.volume_mounts.iter().enumerate() {
        let mp = p.field("volumeMounts").index(i);
        if m.name.is_empty() {
            errs.add(&mp.field("name"), "required value");
        } else if !volumes.contains(m.name.as_str()) {
            errs.add(
                &mp.field("name"),
                format!("not found {:?}: no volume of that name", m.name),
            );
        }
        if m.mount_path.is_empty() {
            errs.add(&mp.field("mountPath"), "required value");
        } else if !paths.insert(m.mount_path.trim_end_matches('/')) {
            errs.add(
                &mp.field("mountPath"),
                format!("invalid value {:?}: must be unique", m.mount_path),
            );
        }
        for (field, path) in [("subPath", &m.sub_path), ("subPathExpr", &m.sub_path_expr)] {
            if let Some(why) = descending_path_error(path) {
                errs.add(&mp.field(field), format!("invalid value {path:?}: {why}"));
            }
        }
        if !m.sub_path.is_empty() && !m.sub_path_expr.is_empty() {
            errs.add(
                &mp.field("subPathExpr"),
                format!(
                    "invalid value {:?}: subPathExpr and subPath are mutually exclusive",
                    m.sub_path_expr
                ),
            );
        }
        match m.mount_propagation.as_deref() {
            None | Some("None" | "HostToContainer") => {}
            Some("Bidirectional") => {
                let privileged = c
                    .other
                    .get("securityContext")
                    .and_then(|s| s.get("privileged"))
                    .and_then(serde_json::Value::as_bool)
                    == Some(true);
                if !privileged {
                    errs.add(
                        &mp.field("mountPropagation"),
                        "forbidden: Bidirectional mount propagation is available only to privileged containers",
                    );
                }
            }
            Some(other) => errs.add(
                &mp.field("mountPropagation"),
                format!(
                    "unsupported value {other:?}: supported values: \"Bidirectional\", \"HostToContainer\", \"None\""
                ),
            ),
        }
    }
    for (i, e) in c.env.iter().enumerate() {
        let Some(from) = &e.value_from else { continue };
        let ep = p.field("env").index(i).field("valueFrom");
        if !e.value.is_empty() {
            errs.add(
                &p.field("env").index(i).field("value"),
                "may not be specified when `valueFrom` is not empty",
            );
        }
        match from.count() {
            0 => errs.add(&ep, "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"),
            1 => {}
            _ => errs.add(&ep, "may not have more than one field specified at a time"),
        }
        if let Some(f) = &from.field_ref {
            validate_field_path(
                errs,
                &ep.field("fieldRef").field("fieldPath"),
                &f.field_path,
                false,
            );
        }
        if let Some(r) = &from.resource_field_ref {
            validate_resource_name(
                errs,
                &ep.field("resourceFieldRef").field("resource"),
                &r.resource,
            );
        }
        for (field, k) in [
            ("configMapKeyRef", &from.config_map_key_ref),
            ("secretKeyRef", &from.secret_key_ref),
        ] {
            let Some(k) = k else { continue };
            if k.name.is_empty() {
                errs.add(&ep.field(field).field("name"), "required value");
            }
            if k.key.is_empty() {
                errs.add(&ep.field(field).field("key"), "required value");
            }
        }
    }
    for (i, f) in c.env_from.iter().enumerate() {
        let fp = p.field("envFrom").index(i);
        match (&f.config_map_ref, &f.secret_ref) {
            (Some(_), Some(_)) => {
                errs.add(&fp, "may not have more than one field specified at a time")
            }
            (None, None) => errs.add(&fp, "must specify one of: `configMapRef` or `secretRef`"),
            _ => {}
        }
        for (field, r) in [
            ("configMapRef", &f.config_map_ref),
            ("secretRef", &f.secret_ref),
        ] {
            if let Some(r) = r
                && !is_dns1123_subdomain(&r.name)
            {
                errs.add(
                    &fp.field(field).field("name"),
                    format!("invalid value {:?}: must be the name of an object", r.name),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::api::Object;
    use crate::api::validation::validate;

    fn pod(spec: serde_json::Value) -> Object {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": spec,
        });
        Object::from_json(crate::api::Kind::Pod, json.to_string().as_bytes()).unwrap()
    }

    fn errors(spec: serde_json::Value) -> Vec<String> {
        match validate(&pod(spec)) {
            Ok(()) => Vec::new(),
            Err(e) => {
                e.0.iter()
                    .map(|f| format!("{}: {}", f.path, f.message))
                    .collect()
            }
        }
    }

    /// `subPathExpr` is a descending path like `subPath`, and not both; propagation is one
    /// of three, `Bidirectional` for privileged containers only.
    #[test]
    fn sub_path_expressions_and_propagation_are_checked() {
        let mounts = |mounts: serde_json::Value, privileged: bool| {
            errors(serde_json::json!({
                "containers": [{"name": "c", "image": "i", "imagePullPolicy": "Always",
                                "volumeMounts": mounts,
                                "securityContext": {"privileged": privileged}}],
                "volumes": [{"name": "v", "emptyDir": {}}]}))
        };
        let ok = serde_json::json!([
            {"name": "v", "mountPath": "/a", "subPathExpr": "$(POD_NAME)/x",
             "mountPropagation": "HostToContainer"}]);
        assert_eq!(mounts(ok, false), Vec::<String>::new());
        let both = serde_json::json!([
            {"name": "v", "mountPath": "/a", "subPath": "x", "subPathExpr": "$(POD_NAME)"},
            {"name": "v", "mountPath": "/b", "subPathExpr": "../$(POD_NAME)"},
            {"name": "v", "mountPath": "/c", "mountPropagation": "Sideways"},
            {"name": "v", "mountPath": "/d", "mountPropagation": "Bidirectional"}]);
        assert_eq!(
            mounts(both.clone(), false),
            [
                "spec.containers[0].volumeMounts[0].subPathExpr: invalid value \"$(POD_NAME)\": subPathExpr and subPath are mutually exclusive",
                "spec.containers[0].volumeMounts[1].subPathExpr: invalid value \"../$(POD_NAME)\": must not contain '..'",
                "spec.containers[0].volumeMounts[2].mountPropagation: unsupported value \"Sideways\": supported values: \"Bidirectional\", \"HostToContainer\", \"None\"",
                "spec.containers[0].volumeMounts[3].mountPropagation: forbidden: Bidirectional mount propagation is available only to privileged containers",
            ]
        );
        assert_eq!(
            mounts(both, true).len(),
            3,
            "privileged may propagate both ways"
        );
    }

    #[test]
    fn volumes_and_mounts_that_hold_together_are_valid() {
        let e = errors(serde_json::json!({
            "containers": [{"name": "c", "image": "i", "imagePullPolicy": "Always",
                "volumeMounts": [{"name": "conf", "mountPath": "/etc/app"},
                                 {"name": "scratch", "mountPath": "/tmp", "subPath": "a/b"}],
                "env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
                "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "APP_"}]}],
            "volumes": [
                {"name": "conf", "configMap": {"name": "cm", "items": [{"key": "a", "path": "dir/a"}]}},
                {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
                {"name": "api", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                    {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}],
        }));
        assert_eq!(e, Vec::<String>::new());
    }

    #[test]
    fn each_mistake_is_named_by_its_path() {
        let e = errors(serde_json::json!({
            "containers": [{"name": "c", "image": "i",
                "volumeMounts": [{"name": "nope", "mountPath": "/a"}, {"name": "v", "mountPath": "/a"}],
                "env": [{"name": "K", "valueFrom": {}}]}],
            "volumes": [
                {"name": "v", "emptyDir": {}, "hostPath": {"path": "/x"}},
                {"name": "v", "configMap": {"name": "cm", "items": [{"key": "k", "path": "../up"}], "defaultMode": 1024}},
                {"name": "none"}],
        }));
        let has = |needle: &str| e.iter().any(|m| m.contains(needle));
        assert!(
            has("spec.containers[0].volumeMounts[0].name: not found \"nope\""),
            "{e:?}"
        );
        assert!(has("spec.containers[0].volumeMounts[1].mountPath"), "{e:?}");
        assert!(
            has("spec.containers[0].env[0].valueFrom: must specify one of"),
            "{e:?}"
        );
        assert!(
            has("spec.volumes[0].hostPath: forbidden: may not specify more than 1 volume type"),
            "{e:?}"
        );
        assert!(has("spec.volumes[1].name: duplicate value"), "{e:?}");
        assert!(has("spec.volumes[1].configMap.items[0].path"), "{e:?}");
        assert!(has("spec.volumes[1].configMap.defaultMode"), "{e:?}");
        assert!(has("spec.volumes[2]: must specify a volume type"), "{e:?}");
    }
}
