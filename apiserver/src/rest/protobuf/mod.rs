//! Request bodies in Kubernetes' protobuf encoding, as client-go's typed clients send them
//! (kubectl's `create namespace` and `create quota` generators, `drain`'s evictions): the
//! `k8s\0` envelope around a `runtime.Unknown`, whose `raw` bytes are the object as
//! Kubernetes' generated messages (`k8s-pb`) encode it. Each is turned into the JSON the rest
//! of the API speaks, so decoding, validation and storage stay the JSON path's; answers are
//! JSON, which client-go accepts alongside protobuf.
//!
//! Only what a client can send here is read: Namespace, ResourceQuota, Secret (`kubectl
//! create secret`), ConfigMap and ServiceAccount, Deployment (`kubectl create deployment`,
//! see `apps`), Job and CronJob (`kubectl create job|cronjob`, see `batch`), Ingress
//! (`kubectl create ingress`, see `networking`), the policy/v1 Eviction,
//! the DeleteOptions of a delete, the RBAC kinds (`kubectl create role`, `create
//! rolebinding` ...), access reviews (`kubectl auth can-i`) and SelfSubjectReview (`kubectl
//! auth whoami`). Server-owned fields (timestamps, `managedFields`, `resourceVersion`)
//! are not carried over, as the server sets them.
//!
//! The encoders every kind uses (metadata, label selectors, the `put`s) are in `wire`, below
//! the kinds; Deployments, the one apps/v1 kind read, are in `apps`.

mod apps;
mod batch;
mod networking;
mod wire;

use k8s_pb::api::authentication::v1 as authn;
use k8s_pb::api::authorization::v1 as authz;
use k8s_pb::api::certificates::v1 as certificates;
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::policy::v1 as policy;
use k8s_pb::api::rbac::v1 as rbac;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde_json::{Map, Value, json};

use super::status::{ApiError, Reason};
use wire::{int_or_string, label_selector, object, put, put_str};

/// The media type of Kubernetes' protobuf encoding.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The 4 bytes every protobuf-encoded object starts with.
const MAGIC: &[u8] = b"k8s\0";

fn unsupported(message: String) -> ApiError {
    ApiError::new(Reason::UnsupportedMediaType, message)
}

fn bad(what: &str, e: prost::DecodeError) -> ApiError {
    ApiError::bad_request(format!(
        "the {what} in the protobuf body does not decode: {e}"
    ))
}

/// The JSON of a protobuf-encoded request body.
pub fn to_json(body: &[u8]) -> Result<Value, ApiError> {
    let rest = body.strip_prefix(MAGIC).ok_or_else(|| {
        ApiError::bad_request("the protobuf body does not start with Kubernetes' k8s\\0 prefix")
    })?;
    let unknown = Unknown::decode(rest).map_err(|e| bad("envelope", e))?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let raw = unknown.raw.unwrap_or_default();
    let mut object = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Secret") => {
            let sec = core::Secret::decode(raw.as_slice()).map_err(|e| bad("Secret", e))?;
            let mut o = object(sec.metadata);
            if !sec.data.is_empty() {
                o.insert("data".into(), base64_values(sec.data));
            }
            if !sec.string_data.is_empty() {
                o.insert("stringData".into(), json!(sec.string_data));
            }
            if let Some(t) = sec.r#type.filter(|t| !t.is_empty()) {
                o.insert("type".into(), json!(t));
            }
            if let Some(i) = sec.immutable {
                o.insert("immutable".into(), json!(i));
            }
            o
        }
        ("v1", "ConfigMap") => {
            let cm = core::ConfigMap::decode(raw.as_slice()).map_err(|e| bad("ConfigMap", e))?;
            let mut o = object(cm.metadata);
            if !cm.data.is_empty() {
                o.insert("data".into(), json!(cm.data));
            }
            if !cm.binary_data.is_empty() {
                o.insert("binaryData".into(), base64_values(cm.binary_data));
            }
            if let Some(i) = cm.immutable {
                o.insert("immutable".into(), json!(i));
            }
            o
        }
        ("v1", "ServiceAccount") => {
            let sa = core::ServiceAccount::decode(raw.as_slice())
                .map_err(|e| bad("ServiceAccount", e))?;
            let mut o = object(sa.metadata);
            let names = |refs: Vec<String>| -> Value {
                refs.into_iter()
                    .map(|name| json!({ "name": name }))
                    .collect()
            };
            if !sa.secrets.is_empty() {
                let secrets = sa
                    .secrets
                    .into_iter()
                    .filter_map(|r| r.name)
                    .collect::<Vec<_>>();
                o.insert("secrets".into(), names(secrets));
            }
            if !sa.image_pull_secrets.is_empty() {
                let secrets = sa
                    .image_pull_secrets
                    .into_iter()
                    .filter_map(|r| r.name)
                    .collect::<Vec<_>>();
                o.insert("imagePullSecrets".into(), names(secrets));
            }
            if let Some(a) = sa.automount_service_account_token {
                o.insert("automountServiceAccountToken".into(), json!(a));
            }
            o
        }
        ("certificates.k8s.io/v1", "CertificateSigningRequest") => {
            let c = certificates::CertificateSigningRequest::decode(raw.as_slice())
                .map_err(|e| bad("CertificateSigningRequest", e))?;
            certificate_signing_request(c)
        }
        ("v1", "Service") => {
            let svc = core::Service::decode(raw.as_slice()).map_err(|e| bad("Service", e))?;
            service(svc)?
        }
        ("apps/v1", "Deployment") => {
            let d = k8s_pb::api::apps::v1::Deployment::decode(raw.as_slice())
                .map_err(|e| bad("Deployment", e))?;
            apps::deployment(d)?
        }
        ("batch/v1", "Job") => {
            let j =
                k8s_pb::api::batch::v1::Job::decode(raw.as_slice()).map_err(|e| bad("Job", e))?;
            batch::job(j)?
        }
        ("batch/v1", "CronJob") => {
            let c = k8s_pb::api::batch::v1::CronJob::decode(raw.as_slice())
                .map_err(|e| bad("CronJob", e))?;
            batch::cron_job(c)?
        }
        ("networking.k8s.io/v1", "Ingress") => {
            let i = k8s_pb::api::networking::v1::Ingress::decode(raw.as_slice())
                .map_err(|e| bad("Ingress", e))?;
            networking::ingress(i)
        }
        ("scheduling.k8s.io/v1", "PriorityClass") => {
            let pc = k8s_pb::api::scheduling::v1::PriorityClass::decode(raw.as_slice())
                .map_err(|e| bad("PriorityClass", e))?;
            let mut o = object(pc.metadata);
            put(&mut o, "value", pc.value);
            put(&mut o, "globalDefault", pc.global_default);
            put_str(&mut o, "description", pc.description);
            put_str(&mut o, "preemptionPolicy", pc.preemption_policy);
            o
        }
        ("policy/v1", "PodDisruptionBudget") => {
            let pdb = policy::PodDisruptionBudget::decode(raw.as_slice())
                .map_err(|e| bad("PodDisruptionBudget", e))?;
            let mut o = object(pdb.metadata);
            if let Some(spec) = pdb.spec {
                let mut s = Map::new();
                put(
                    &mut s,
                    "minAvailable",
                    spec.min_available.map(int_or_string),
                );
                put(
                    &mut s,
                    "maxUnavailable",
                    spec.max_unavailable.map(int_or_string),
                );
                if let Some(sel) = spec.selector {
                    s.insert("selector".into(), label_selector(sel));
                }
                put_str(
                    &mut s,
                    "unhealthyPodEvictionPolicy",
                    spec.unhealthy_pod_eviction_policy,
                );
                o.insert("spec".into(), Value::Object(s));
            }
            o
        }
        ("v1", "Namespace") => {
            let ns = core::Namespace::decode(raw.as_slice()).map_err(|e| bad("Namespace", e))?;
            let mut o = object(ns.metadata);
            if let Some(spec) = ns.spec
                && !spec.finalizers.is_empty()
            {
                o.insert("spec".into(), json!({ "finalizers": spec.finalizers }));
            }
            o
        }
        ("v1", "ResourceQuota") => {
            let q =
                core::ResourceQuota::decode(raw.as_slice()).map_err(|e| bad("ResourceQuota", e))?;
            let mut o = object(q.metadata);
            if let Some(spec) = q.spec {
                let mut s = Map::new();
                if !spec.hard.is_empty() {
                    let hard: Map<String, Value> = spec
                        .hard
                        .into_iter()
                        .map(|(k, v)| (k, json!(v.string.unwrap_or_default())))
                        .collect();
                    s.insert("hard".into(), Value::Object(hard));
                }
                if !spec.scopes.is_empty() {
                    s.insert("scopes".into(), json!(spec.scopes));
                }
                if let Some(sel) = spec.scope_selector {
                    let exprs: Vec<Value> = sel
                        .match_expressions
                        .into_iter()
                        .map(|e| {
                            json!({
                                "scopeName": e.scope_name.unwrap_or_default(),
                                "operator": e.operator.unwrap_or_default(),
                                "values": e.values,
                            })
                        })
                        .collect();
                    s.insert("scopeSelector".into(), json!({ "matchExpressions": exprs }));
                }
                o.insert("spec".into(), Value::Object(s));
            }
            o
        }
        ("policy/v1", "Eviction") => {
            let e = policy::Eviction::decode(raw.as_slice()).map_err(|e| bad("Eviction", e))?;
            let mut o = object(e.metadata);
            if let Some(d) = e.delete_options {
                o.insert("deleteOptions".into(), delete_options(d));
            }
            o
        }
        ("v1" | "meta.k8s.io/v1", "DeleteOptions") => {
            let d =
                meta::DeleteOptions::decode(raw.as_slice()).map_err(|e| bad("DeleteOptions", e))?;
            match delete_options(d) {
                Value::Object(o) => o,
                _ => Map::new(),
            }
        }
        ("rbac.authorization.k8s.io/v1", "Role") => {
            let r = rbac::Role::decode(raw.as_slice()).map_err(|e| bad("Role", e))?;
            let mut o = object(r.metadata);
            o.insert("rules".into(), rules(r.rules));
            o
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
            let r = rbac::ClusterRole::decode(raw.as_slice()).map_err(|e| bad("ClusterRole", e))?;
            let mut o = object(r.metadata);
            o.insert("rules".into(), rules(r.rules));
            if let Some(a) = r.aggregation_rule {
                let selectors: Vec<Value> = a
                    .cluster_role_selectors
                    .into_iter()
                    .map(label_selector)
                    .collect();
                o.insert(
                    "aggregationRule".into(),
                    json!({ "clusterRoleSelectors": selectors }),
                );
            }
            o
        }
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
            let b = rbac::RoleBinding::decode(raw.as_slice()).map_err(|e| bad("RoleBinding", e))?;
            binding(b.metadata, b.subjects, b.role_ref)
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            let b = rbac::ClusterRoleBinding::decode(raw.as_slice())
                .map_err(|e| bad("ClusterRoleBinding", e))?;
            binding(b.metadata, b.subjects, b.role_ref)
        }
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => {
            let r = authz::SelfSubjectAccessReview::decode(raw.as_slice())
                .map_err(|e| bad("SelfSubjectAccessReview", e))?;
            let mut o = object(r.metadata);
            let spec = r.spec.unwrap_or_default();
            o.insert(
                "spec".into(),
                review_spec(spec.resource_attributes, spec.non_resource_attributes),
            );
            o
        }
        ("authorization.k8s.io/v1", "SubjectAccessReview") => {
            let r = authz::SubjectAccessReview::decode(raw.as_slice())
                .map_err(|e| bad("SubjectAccessReview", e))?;
            let mut o = object(r.metadata);
            let spec = r.spec.unwrap_or_default();
            let mut s = review_spec(spec.resource_attributes, spec.non_resource_attributes);
            if let Some(user) = spec.user.filter(|u| !u.is_empty()) {
                s["user"] = json!(user);
            }
            if !spec.groups.is_empty() {
                s["groups"] = json!(spec.groups);
            }
            if let Some(uid) = spec.uid.filter(|u| !u.is_empty()) {
                s["uid"] = json!(uid);
            }
            o.insert("spec".into(), s);
            o
        }
        ("authentication.k8s.io/v1", "SelfSubjectReview") => {
            // `kubectl auth whoami`: the question has nothing in it but its metadata.
            let r = authn::SelfSubjectReview::decode(raw.as_slice())
                .map_err(|e| bad("SelfSubjectReview", e))?;
            object(r.metadata)
        }
        ("authentication.k8s.io/v1", "TokenRequest") => {
            // `kubectl create token`.
            let t =
                authn::TokenRequest::decode(raw.as_slice()).map_err(|e| bad("TokenRequest", e))?;
            let mut o = object(t.metadata);
            let spec = t.spec.unwrap_or_default();
            let mut s = json!({});
            if !spec.audiences.is_empty() {
                s["audiences"] = json!(spec.audiences);
            }
            if let Some(secs) = spec.expiration_seconds {
                s["expirationSeconds"] = json!(secs);
            }
            if let Some(r) = spec.bound_object_ref {
                s["boundObjectRef"] = json!({
                    "kind": r.kind.unwrap_or_default(),
                    "apiVersion": r.api_version.unwrap_or_default(),
                    "name": r.name.unwrap_or_default(),
                    "uid": r.u_id.unwrap_or_default(),
                });
            }
            o.insert("spec".into(), s);
            o
        }
        _ => {
            return Err(unsupported(format!(
                "{MEDIA_TYPE} bodies are read for Namespace, ResourceQuota, Secret, ConfigMap, \
                 ServiceAccount (and its TokenRequest), SelfSubjectReview, Deployment, Job, CronJob, Ingress, PriorityClass, PodDisruptionBudget, Service, CertificateSigningRequest, Eviction, DeleteOptions, the RBAC kinds and access reviews; send \
                 {kind} ({api_version}) as application/json"
            )));
        }
    };
    object.insert("apiVersion".into(), json!(api_version));
    object.insert("kind".into(), json!(kind));
    Ok(Value::Object(object))
}

/// Bytes by key, as JSON writes them: base64 (a Secret's `data`, a ConfigMap's `binaryData`).
fn base64_values(values: std::collections::BTreeMap<String, Vec<u8>>) -> Value {
    use base64::Engine as _;
    values
        .into_iter()
        .map(|(k, v)| {
            (
                k,
                json!(base64::engine::general_purpose::STANDARD.encode(v)),
            )
        })
        .collect::<Map<String, Value>>()
        .into()
}

/// A Service as `kubectl create service` sends it: its type, selector, ports and cluster IP.
/// A body setting anything else is refused whole (send it as JSON), so nothing is dropped.
fn service(svc: core::Service) -> Result<Map<String, Value>, ApiError> {
    let mut o = object(svc.metadata);
    let Some(spec) = svc.spec else {
        return Ok(o);
    };
    let set = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
    let unread = [
        ("spec.externalIPs", !spec.external_ips.is_empty()),
        ("spec.loadBalancerIP", set(&spec.load_balancer_ip)),
        (
            "spec.loadBalancerSourceRanges",
            !spec.load_balancer_source_ranges.is_empty(),
        ),
        ("spec.externalName", set(&spec.external_name)),
        (
            "spec.externalTrafficPolicy",
            set(&spec.external_traffic_policy),
        ),
        (
            "spec.healthCheckNodePort",
            spec.health_check_node_port.is_some_and(|p| p != 0),
        ),
        (
            "spec.publishNotReadyAddresses",
            spec.publish_not_ready_addresses == Some(true),
        ),
        (
            "spec.sessionAffinityConfig",
            spec.session_affinity_config.is_some(),
        ),
        ("spec.ipFamilies", !spec.ip_families.is_empty()),
        ("spec.ipFamilyPolicy", set(&spec.ip_family_policy)),
        ("spec.loadBalancerClass", set(&spec.load_balancer_class)),
        (
            "spec.internalTrafficPolicy",
            set(&spec.internal_traffic_policy),
        ),
        ("spec.trafficDistribution", set(&spec.traffic_distribution)),
        (
            "spec.ports[].appProtocol",
            spec.ports.iter().any(|p| set(&p.app_protocol)),
        ),
    ];
    if let Some((field, _)) = unread.iter().find(|(_, is_set)| *is_set) {
        return Err(ApiError::new(
            Reason::UnsupportedMediaType,
            format!(
                "the protobuf Service sets {field}, which Skiff reads from JSON bodies only; \
                 send it as application/json"
            ),
        ));
    }
    let mut s = Map::new();
    put_str(&mut s, "type", spec.r#type);
    put_str(&mut s, "clusterIP", spec.cluster_ip);
    if !spec.cluster_ips.is_empty() {
        s.insert("clusterIPs".into(), json!(spec.cluster_ips));
    }
    put_str(&mut s, "sessionAffinity", spec.session_affinity);
    if !spec.selector.is_empty() {
        s.insert("selector".into(), json!(spec.selector));
    }
    let ports: Vec<Value> = spec
        .ports
        .into_iter()
        .map(|p| {
            let mut m = Map::new();
            put_str(&mut m, "name", p.name);
            put_str(&mut m, "protocol", p.protocol);
            put(&mut m, "port", p.port);
            put(&mut m, "targetPort", p.target_port.map(int_or_string));
            put(&mut m, "nodePort", p.node_port.filter(|n| *n != 0));
            Value::Object(m)
        })
        .collect();
    if !ports.is_empty() {
        s.insert("ports".into(), Value::Array(ports));
    }
    o.insert("spec".into(), Value::Object(s));
    Ok(o)
}

/// A CertificateSigningRequest as `kubectl certificate approve` and client-go's CSR clients
/// send it: the request, and its conditions for the approval and status subresources.
fn certificate_signing_request(c: certificates::CertificateSigningRequest) -> Map<String, Value> {
    use base64::Engine as _;
    let b64 = |b: Vec<u8>| json!(base64::engine::general_purpose::STANDARD.encode(b));
    let mut o = object(c.metadata);
    if let Some(spec) = c.spec {
        let mut s = Map::new();
        if let Some(r) = spec.request {
            s.insert("request".into(), b64(r));
        }
        if let Some(n) = spec.signer_name.filter(|n| !n.is_empty()) {
            s.insert("signerName".into(), json!(n));
        }
        if let Some(e) = spec.expiration_seconds {
            s.insert("expirationSeconds".into(), json!(e));
        }
        if !spec.usages.is_empty() {
            s.insert("usages".into(), json!(spec.usages));
        }
        // username, uid, groups and extra are the server's to set from the requester.
        o.insert("spec".into(), Value::Object(s));
    }
    if let Some(status) = c.status {
        let mut s = Map::new();
        let conditions: Vec<Value> = status
            .conditions
            .into_iter()
            .map(|c| {
                let mut m = Map::new();
                m.insert("type".into(), json!(c.r#type.unwrap_or_default()));
                m.insert("status".into(), json!(c.status.unwrap_or_default()));
                for (k, v) in [("reason", c.reason), ("message", c.message)] {
                    if let Some(v) = v.filter(|v| !v.is_empty()) {
                        m.insert(k.into(), json!(v));
                    }
                }
                for (k, t) in [
                    ("lastUpdateTime", c.last_update_time),
                    ("lastTransitionTime", c.last_transition_time),
                ] {
                    if let Some(t) = t.and_then(|t| {
                        chrono::DateTime::from_timestamp(t.seconds.unwrap_or_default(), 0)
                    }) {
                        m.insert(
                            k.into(),
                            json!(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                        );
                    }
                }
                Value::Object(m)
            })
            .collect();
        if !conditions.is_empty() {
            s.insert("conditions".into(), Value::Array(conditions));
        }
        if let Some(cert) = status.certificate.filter(|c| !c.is_empty()) {
            s.insert("certificate".into(), b64(cert));
        }
        o.insert("status".into(), Value::Object(s));
    }
    o
}

fn rules(rules: Vec<rbac::PolicyRule>) -> Value {
    let rules: Vec<Value> = rules
        .into_iter()
        .map(|r| {
            let mut o = Map::new();
            let mut put = |k: &str, v: Vec<String>| {
                if !v.is_empty() {
                    o.insert(k.into(), json!(v));
                }
            };
            put("verbs", r.verbs);
            put("apiGroups", r.api_groups);
            put("resources", r.resources);
            put("resourceNames", r.resource_names);
            put("nonResourceURLs", r.non_resource_ur_ls);
            Value::Object(o)
        })
        .collect();
    Value::Array(rules)
}

fn binding(
    metadata: Option<meta::ObjectMeta>,
    subjects: Vec<rbac::Subject>,
    role_ref: Option<rbac::RoleRef>,
) -> Map<String, Value> {
    let mut o = object(metadata);
    let subjects: Vec<Value> = subjects
        .into_iter()
        .map(|s| {
            let mut v = json!({
                "kind": s.kind.unwrap_or_default(),
                "name": s.name.unwrap_or_default(),
            });
            if let Some(g) = s.api_group.filter(|g| !g.is_empty()) {
                v["apiGroup"] = json!(g);
            }
            if let Some(ns) = s.namespace.filter(|n| !n.is_empty()) {
                v["namespace"] = json!(ns);
            }
            v
        })
        .collect();
    if !subjects.is_empty() {
        o.insert("subjects".into(), Value::Array(subjects));
    }
    if let Some(r) = role_ref {
        o.insert(
            "roleRef".into(),
            json!({
                "apiGroup": r.api_group.unwrap_or_default(),
                "kind": r.kind.unwrap_or_default(),
                "name": r.name.unwrap_or_default(),
            }),
        );
    }
    o
}

/// The request an access review asks about, as JSON.
fn review_spec(
    resource: Option<authz::ResourceAttributes>,
    path: Option<authz::NonResourceAttributes>,
) -> Value {
    let mut spec = Map::new();
    if let Some(r) = resource {
        let mut o = Map::new();
        let mut put = |k: &str, v: Option<String>| {
            if let Some(v) = v.filter(|v| !v.is_empty()) {
                o.insert(k.into(), json!(v));
            }
        };
        put("namespace", r.namespace);
        put("verb", r.verb);
        put("group", r.group);
        put("version", r.version);
        put("resource", r.resource);
        put("subresource", r.subresource);
        put("name", r.name);
        spec.insert("resourceAttributes".into(), Value::Object(o));
    }
    if let Some(p) = path {
        spec.insert(
            "nonResourceAttributes".into(),
            json!({ "path": p.path.unwrap_or_default(), "verb": p.verb.unwrap_or_default() }),
        );
    }
    Value::Object(spec)
}

fn delete_options(d: meta::DeleteOptions) -> Value {
    let mut o = Map::new();
    if let Some(g) = d.grace_period_seconds {
        o.insert("gracePeriodSeconds".into(), json!(g));
    }
    if let Some(p) = d.preconditions {
        let mut pre = Map::new();
        if let Some(uid) = p.uid {
            pre.insert("uid".into(), json!(uid));
        }
        if let Some(rv) = p.resource_version {
            pre.insert("resourceVersion".into(), json!(rv));
        }
        o.insert("preconditions".into(), Value::Object(pre));
    }
    if let Some(p) = d.propagation_policy {
        o.insert("propagationPolicy".into(), json!(p));
    }
    if !d.dry_run.is_empty() {
        o.insert("dryRun".into(), json!(d.dry_run));
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::apimachinery::pkg::runtime::TypeMeta;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let u = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut out = MAGIC.to_vec();
        out.extend(u.encode_to_vec());
        out
    }

    /// What `kubectl create service nodeport web --tcp=80:8080` sends; a field Skiff does not
    /// read refuses the body instead of being dropped.
    #[test]
    fn service() {
        use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
        let svc = |traffic: Option<&str>| core::Service {
            metadata: Some(meta::ObjectMeta {
                name: Some("web".into()),
                labels: [("app".to_string(), "web".to_string())].into(),
                ..Default::default()
            }),
            spec: Some(core::ServiceSpec {
                r#type: Some("NodePort".into()),
                selector: [("app".to_string(), "web".to_string())].into(),
                ports: vec![core::ServicePort {
                    name: Some("80-8080".into()),
                    protocol: Some("TCP".into()),
                    port: Some(80),
                    target_port: Some(IntOrString {
                        r#type: Some(0),
                        int_val: Some(8080),
                        str_val: Some(String::new()),
                    }),
                    node_port: Some(0),
                    app_protocol: None,
                }],
                external_name: Some(String::new()),
                external_traffic_policy: traffic.map(str::to_owned),
                ..Default::default()
            }),
            status: None,
        };
        let v = to_json(&envelope("v1", "Service", svc(None).encode_to_vec())).expect("decodes");
        assert_eq!(
            v["spec"],
            json!({"type": "NodePort", "selector": {"app": "web"},
                   "ports": [{"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080}]})
        );
        let e = to_json(&envelope(
            "v1",
            "Service",
            svc(Some("Local")).encode_to_vec(),
        ))
        .expect_err("unread field");
        assert!(
            e.message.contains("spec.externalTrafficPolicy"),
            "{}",
            e.message
        );
    }

    /// What `kubectl certificate approve` sends to the approval subresource: the request as
    /// read, with an Approved condition; the requester's fields are dropped (the server's).
    #[test]
    fn certificate_signing_request_approval() {
        let csr = certificates::CertificateSigningRequest {
            metadata: Some(meta::ObjectMeta {
                name: Some("carol".into()),
                resource_version: Some("42".into()),
                ..Default::default()
            }),
            spec: Some(certificates::CertificateSigningRequestSpec {
                request: Some(b"-----BEGIN CERTIFICATE REQUEST-----".to_vec()),
                signer_name: Some("kubernetes.io/kube-apiserver-client".into()),
                usages: vec!["client auth".into()],
                username: Some("mallory".into()),
                ..Default::default()
            }),
            status: Some(certificates::CertificateSigningRequestStatus {
                conditions: vec![certificates::CertificateSigningRequestCondition {
                    r#type: Some("Approved".into()),
                    status: Some("True".into()),
                    reason: Some("KubectlApprove".into()),
                    message: Some("This CSR was approved by kubectl certificate approve.".into()),
                    last_update_time: Some(meta::Time {
                        seconds: Some(1_700_000_000),
                        nanos: Some(0),
                    }),
                    last_transition_time: None,
                }],
                certificate: None,
            }),
        };
        let body = envelope(
            "certificates.k8s.io/v1",
            "CertificateSigningRequest",
            csr.encode_to_vec(),
        );
        let v = to_json(&body).expect("decodes");
        assert_eq!(v["metadata"]["resourceVersion"], "42");
        assert_eq!(
            v["spec"]["request"],
            "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0="
        );
        assert!(v["spec"].get("username").is_none(), "{v}");
        assert_eq!(
            v["status"]["conditions"][0],
            json!({
                "type": "Approved", "status": "True", "reason": "KubectlApprove",
                "message": "This CSR was approved by kubectl certificate approve.",
                "lastUpdateTime": "2023-11-14T22:13:20Z"
            })
        );
    }

    /// What `kubectl create namespace team` sends becomes the JSON a client would have sent.
    #[test]
    fn namespace() {
        let ns = core::Namespace {
            metadata: Some(meta::ObjectMeta {
                name: Some("team".into()),
                labels: [("a".to_string(), "b".to_string())].into(),
                ..Default::default()
            }),
            spec: Some(core::NamespaceSpec::default()),
            status: Some(core::NamespaceStatus::default()),
        };
        let v = to_json(&envelope("v1", "Namespace", ns.encode_to_vec())).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "labels": {"a": "b"}}})
        );
    }

    /// `kubectl create secret generic s --from-literal=user=alice`: data as base64 in JSON.
    #[test]
    fn secret() {
        let sec = core::Secret {
            metadata: Some(meta::ObjectMeta {
                name: Some("s".into()),
                namespace: Some("team".into()),
                ..Default::default()
            }),
            data: [("user".to_string(), b"alice".to_vec())].into(),
            r#type: Some("Opaque".into()),
            ..Default::default()
        };
        let v = to_json(&envelope("v1", "Secret", sec.encode_to_vec())).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "s", "namespace": "team"},
                   "data": {"user": "YWxpY2U="}, "type": "Opaque"})
        );
    }

    /// `kubectl create configmap c --from-literal=a=1 --from-file=bin`, and `kubectl create
    /// serviceaccount`.
    #[test]
    fn config_map_and_service_account() {
        let cm = core::ConfigMap {
            metadata: Some(meta::ObjectMeta {
                name: Some("c".into()),
                ..Default::default()
            }),
            data: [("a".to_string(), "1".to_string())].into(),
            binary_data: [("bin".to_string(), vec![0u8, 1])].into(),
            immutable: None,
        };
        let v = to_json(&envelope("v1", "ConfigMap", cm.encode_to_vec())).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                   "data": {"a": "1"}, "binaryData": {"bin": "AAE="}})
        );
        let sa = core::ServiceAccount {
            metadata: Some(meta::ObjectMeta {
                name: Some("robot".into()),
                ..Default::default()
            }),
            automount_service_account_token: Some(false),
            ..Default::default()
        };
        let v = to_json(&envelope("v1", "ServiceAccount", sa.encode_to_vec())).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"},
                   "automountServiceAccountToken": false})
        );
    }

    /// `kubectl create ingress web --class=nginx --rule="example.com/shop*=shop:80,tls=cert"
    /// --rule="/=web:http" --default-backend=fallback:8080`, as kubectl 1.33 encodes it.
    #[test]
    fn ingress() {
        use k8s_pb::api::networking::v1 as networking;
        let service = |name: &str, port: networking::ServiceBackendPort| {
            Some(networking::IngressBackend {
                service: Some(networking::IngressServiceBackend {
                    name: Some(name.into()),
                    port: Some(port),
                }),
                resource: None,
            })
        };
        let number = |n| networking::ServiceBackendPort {
            name: Some(String::new()),
            number: Some(n),
        };
        let path = |path: &str, path_type: &str, backend| networking::HttpIngressPath {
            path: Some(path.into()),
            path_type: Some(path_type.into()),
            backend,
        };
        let rule = |host: &str, paths| networking::IngressRule {
            host: Some(host.into()),
            ingress_rule_value: Some(networking::IngressRuleValue {
                http: Some(networking::HttpIngressRuleValue { paths }),
            }),
        };
        let ing = networking::Ingress {
            metadata: Some(meta::ObjectMeta {
                name: Some("web".into()),
                ..Default::default()
            }),
            spec: Some(networking::IngressSpec {
                ingress_class_name: Some("nginx".into()),
                default_backend: service("fallback", number(8080)),
                tls: vec![networking::IngressTls {
                    hosts: vec!["example.com".into()],
                    secret_name: Some("cert".into()),
                }],
                rules: vec![
                    rule(
                        "example.com",
                        vec![path("/shop", "Prefix", service("shop", number(80)))],
                    ),
                    rule(
                        "",
                        vec![path(
                            "/",
                            "Exact",
                            service(
                                "web",
                                networking::ServiceBackendPort {
                                    name: Some("http".into()),
                                    number: Some(0),
                                },
                            ),
                        )],
                    ),
                ],
            }),
            status: Some(Default::default()),
        };
        let v = to_json(&envelope(
            "networking.k8s.io/v1",
            "Ingress",
            ing.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": "web"},
                "spec": {
                    "ingressClassName": "nginx",
                    "defaultBackend": {"service": {"name": "fallback", "port": {"number": 8080}}},
                    "tls": [{"hosts": ["example.com"], "secretName": "cert"}],
                    "rules": [
                        {"host": "example.com", "http": {"paths": [{"path": "/shop",
                            "pathType": "Prefix",
                            "backend": {"service": {"name": "shop", "port": {"number": 80}}}}]}},
                        {"http": {"paths": [{"path": "/", "pathType": "Exact",
                            "backend": {"service": {"name": "web", "port": {"name": "http"}}}}]}}
                    ]
                }
            })
        );
    }

    /// `kubectl create quota q --hard=pods=10` and `kubectl drain`'s eviction.
    #[test]
    fn quota_and_eviction() {
        let q = core::ResourceQuota {
            metadata: Some(meta::ObjectMeta {
                name: Some("q".into()),
                namespace: Some("team".into()),
                ..Default::default()
            }),
            spec: Some(core::ResourceQuotaSpec {
                hard: [(
                    "pods".to_string(),
                    k8s_pb::apimachinery::pkg::api::resource::Quantity {
                        string: Some("10".into()),
                    },
                )]
                .into(),
                ..Default::default()
            }),
            status: None,
        };
        let v = to_json(&envelope("v1", "ResourceQuota", q.encode_to_vec())).unwrap();
        assert_eq!(v["spec"]["hard"]["pods"], "10");
        assert_eq!(v["metadata"]["namespace"], "team");
        let e = policy::Eviction {
            metadata: Some(meta::ObjectMeta {
                name: Some("web".into()),
                ..Default::default()
            }),
            delete_options: Some(meta::DeleteOptions {
                grace_period_seconds: Some(5),
                ..Default::default()
            }),
        };
        let v = to_json(&envelope("policy/v1", "Eviction", e.encode_to_vec())).unwrap();
        assert_eq!(v["deleteOptions"]["gracePeriodSeconds"], 5);
    }

    /// A body without the prefix, a kind not read, and bytes that do not decode are refused.
    /// `kubectl create rolebinding` and `kubectl auth can-i` send protobuf: read as the
    /// JSON they mean.
    #[test]
    fn rbac_and_reviews() {
        let b = rbac::RoleBinding {
            metadata: Some(meta::ObjectMeta {
                name: Some("bob-view".into()),
                namespace: Some("dev".into()),
                ..Default::default()
            }),
            subjects: vec![rbac::Subject {
                kind: Some("User".into()),
                api_group: Some("rbac.authorization.k8s.io".into()),
                name: Some("bob".into()),
                namespace: None,
            }],
            role_ref: Some(rbac::RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: Some("ClusterRole".into()),
                name: Some("view".into()),
            }),
        };
        let raw = envelope(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            b.encode_to_vec(),
        );
        assert_eq!(
            to_json(&raw).unwrap(),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "bob-view", "namespace": "dev"},
                "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "bob"}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}
            })
        );
        let r = authz::SelfSubjectAccessReview {
            metadata: None,
            spec: Some(authz::SelfSubjectAccessReviewSpec {
                resource_attributes: Some(authz::ResourceAttributes {
                    namespace: Some("dev".into()),
                    verb: Some("list".into()),
                    resource: Some("pods".into()),
                    ..Default::default()
                }),
                non_resource_attributes: None,
            }),
            status: None,
        };
        let raw = envelope(
            "authorization.k8s.io/v1",
            "SelfSubjectAccessReview",
            r.encode_to_vec(),
        );
        assert_eq!(
            to_json(&raw).unwrap()["spec"],
            json!({"resourceAttributes": {"namespace": "dev", "verb": "list", "resource": "pods"}})
        );
    }

    #[test]
    fn refused() {
        assert_eq!(to_json(b"{}").unwrap_err().reason, Reason::BadRequest);
        let pod = envelope("v1", "Pod", Vec::new());
        assert_eq!(
            to_json(&pod).unwrap_err().reason,
            Reason::UnsupportedMediaType
        );
        let mut garbage = MAGIC.to_vec();
        garbage.extend([0xff, 0xff, 0xff]);
        assert_eq!(to_json(&garbage).unwrap_err().reason, Reason::BadRequest);
    }
}
