//! Defaulting, applied to every object before validation (as the apiserver does), so what is
//! stored and what the scheduler and agents read is explicit.

use super::apps::{
    Deployment, DeploymentStrategy, PodTemplateSpec, ReplicaSet, RollingUpdateDeployment,
};
use super::event::Event;
use super::meta::IntOrString;
use super::namespace::LimitRange;
use super::object::Object;
use super::pod::{Container, PodSpec, Probe};
use super::rbac::{RBAC_GROUP, RoleRef, Subject};
use super::vocabulary::{DeploymentStrategyType, RestartPolicy};

/// The namespace objects land in when none is given.
pub const DEFAULT_NAMESPACE: &str = "default";
/// The label every namespace carries, its own name (`kubernetes.io/metadata.name`).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// The scheduler name pods get when none is given; Skiff's scheduler answers to it.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";
/// Seconds between SIGTERM and SIGKILL when a pod does not say.
pub const DEFAULT_GRACE_PERIOD_SECONDS: i64 = 30;

/// Applies the defaults of `object`'s kind.
pub fn apply(object: &mut Object) {
    object.set_type_meta();
    let namespaced = object.kind().is_namespaced();
    let meta = object.metadata_mut();
    if namespaced && meta.namespace.is_empty() {
        meta.namespace = DEFAULT_NAMESPACE.to_owned();
    }
    match object {
        Object::Generic(g, o) => crate::api::registry::apply_defaults(*g, o),
        Object::Pod(pod) => pod_spec_defaults(&mut pod.spec),
        Object::Deployment(d) => deployment_defaults(d),
        Object::ReplicaSet(rs) => replica_set_defaults(rs),
        Object::LimitRange(l) => limit_range_defaults(l),
        Object::Event(e) => event_defaults(e),
        Object::Namespace(ns) => {
            // Selectable by name (network policies, webhooks' namespace selectors), as
            // kube-apiserver labels every namespace.
            if !ns.metadata.name.is_empty() {
                ns.metadata
                    .labels
                    .insert(NAMESPACE_NAME_LABEL.to_owned(), ns.metadata.name.clone());
            }
            // A namespace is Active until its deletion begins, as Kubernetes reports it.
            let status = ns.status.get_or_insert_with(Default::default);
            status
                .phase
                .get_or_insert(crate::api::NamespacePhase::Active);
        }
        Object::RoleBinding(b) => binding_defaults(&mut b.role_ref, &mut b.subjects),
        Object::ClusterRoleBinding(b) => binding_defaults(&mut b.role_ref, &mut b.subjects),
        Object::Secret(s) => {
            // stringData is write-only: merged into data, over what data has.
            for (k, v) in std::mem::take(&mut s.string_data) {
                s.data.insert(k, v.into_bytes());
            }
            if s.type_.is_empty() {
                s.type_ = crate::api::secret::OPAQUE.to_owned();
            }
        }
        Object::Node(_)
        | Object::ResourceQuota(_)
        | Object::Binding(_)
        | Object::Role(_)
        | Object::ClusterRole(_)
        | Object::SubjectAccessReview(_)
        | Object::SelfSubjectAccessReview(_)
        | Object::CertificateSigningRequest(_) => {}
        Object::Service(s) => {
            let spec = &mut s.spec;
            if spec.type_.is_empty() {
                spec.type_ = crate::api::service::CLUSTER_IP.to_owned();
            }
            if spec.session_affinity.is_empty() {
                spec.session_affinity = "None".to_owned();
            }
            for p in &mut spec.ports {
                if p.protocol.is_empty() {
                    p.protocol = "TCP".to_owned();
                }
                if p.target_port.is_none() {
                    p.target_port = Some(IntOrString::Int(p.port));
                }
            }
            if spec.cluster_ips.is_empty() && !spec.cluster_ip.is_empty() {
                spec.cluster_ips = vec![spec.cluster_ip.clone()];
            }
            // What Kubernetes reports of a single-stack IPv4 cluster.
            let node_port = spec.type_ == crate::api::service::NODE_PORT;
            let other = &mut spec.other.0;
            for (field, value) in [
                ("ipFamilies", serde_json::json!(["IPv4"])),
                ("ipFamilyPolicy", serde_json::json!("SingleStack")),
                ("internalTrafficPolicy", serde_json::json!("Cluster")),
            ] {
                other.entry(field).or_insert(value);
            }
            if node_port {
                other
                    .entry("externalTrafficPolicy")
                    .or_insert(serde_json::json!("Cluster"));
            }
        }
        Object::EndpointSlice(s) => {
            for p in &mut s.ports {
                if p.protocol.is_none() {
                    p.protocol = Some("TCP".to_owned());
                }
            }
        }
    }
}

/// A binding's role and its users and groups are RBAC's own unless they say otherwise, as
/// Kubernetes defaults them (service accounts belong to the core group).
fn binding_defaults(role_ref: &mut RoleRef, subjects: &mut [Subject]) {
    if role_ref.api_group.is_empty() {
        role_ref.api_group = RBAC_GROUP.to_owned();
    }
    for s in subjects {
        if s.api_group.is_empty() && matches!(s.kind.as_str(), "User" | "Group") {
            s.api_group = RBAC_GROUP.to_owned();
        }
    }
}

/// An event counts once and happened when first seen unless it says otherwise; its type is
/// `Normal` when not given.
fn event_defaults(e: &mut Event) {
    if e.type_.is_empty() {
        e.type_ = "Normal".to_owned();
    }
    if e.count.is_none() {
        e.count = Some(1);
    }
    if e.first_timestamp.is_none() {
        e.first_timestamp = e.last_timestamp.or(e.metadata.creation_timestamp);
    }
    if e.last_timestamp.is_none() {
        e.last_timestamp = e.first_timestamp;
    }
}

/// apps/v1's defaults: 1 replica, a RollingUpdate of 25 % surge and 25 % unavailable, 10
/// old ReplicaSets kept, 600 s to progress; the template as a pod.
fn deployment_defaults(d: &mut Deployment) {
    let spec = &mut d.spec;
    spec.replicas.get_or_insert(1);
    spec.revision_history_limit.get_or_insert(10);
    spec.progress_deadline_seconds.get_or_insert(600);
    let strategy = spec
        .strategy
        .get_or_insert_with(DeploymentStrategy::default);
    let type_ = *strategy
        .type_
        .get_or_insert(DeploymentStrategyType::RollingUpdate);
    if type_ == DeploymentStrategyType::RollingUpdate {
        let ru = strategy
            .rolling_update
            .get_or_insert_with(RollingUpdateDeployment::default);
        let quarter = || IntOrString::String("25%".to_owned());
        ru.max_surge.get_or_insert_with(quarter);
        ru.max_unavailable.get_or_insert_with(quarter);
    }
    template_defaults(&mut spec.template);
}

fn replica_set_defaults(rs: &mut ReplicaSet) {
    rs.spec.replicas.get_or_insert(1);
    template_defaults(&mut rs.spec.template);
}

pub(crate) fn template_defaults(t: &mut PodTemplateSpec) {
    pod_spec_defaults(&mut t.spec);
}

fn pod_spec_defaults(spec: &mut PodSpec) {
    spec.restart_policy.get_or_insert(RestartPolicy::Always);
    if spec.termination_grace_period_seconds.is_none() {
        spec.termination_grace_period_seconds = Some(DEFAULT_GRACE_PERIOD_SECONDS);
    }
    if spec.scheduler_name.is_empty() {
        spec.scheduler_name = DEFAULT_SCHEDULER.to_owned();
    }
    for c in spec
        .init_containers
        .iter_mut()
        .chain(spec.containers.iter_mut())
    {
        container_defaults(c);
    }
    for t in &mut spec.tolerations {
        if t.operator.is_empty() {
            t.operator = "Equal".to_owned();
        }
    }
    for v in &mut spec.volumes {
        volume_defaults(v);
    }
}

/// File modes 0644 unless given, and a hostPath's type `""`, as kube-apiserver defaults them.
fn volume_defaults(v: &mut crate::api::volume::Volume) {
    use crate::api::volume::DEFAULT_MODE;
    if let Some(c) = &mut v.config_map {
        c.default_mode.get_or_insert(DEFAULT_MODE);
    }
    if let Some(s) = &mut v.secret {
        s.default_mode.get_or_insert(DEFAULT_MODE);
    }
    if let Some(d) = &mut v.downward_api {
        d.default_mode.get_or_insert(DEFAULT_MODE);
        for f in &mut d.items {
            if let Some(r) = &mut f.field_ref
                && r.api_version.is_empty()
            {
                r.api_version = "v1".to_owned();
            }
        }
    }
    if let Some(p) = &mut v.projected {
        p.default_mode.get_or_insert(DEFAULT_MODE);
        for src in &mut p.sources {
            if let Some(t) = &mut src.service_account_token {
                t.expiration_seconds.get_or_insert(3600);
            }
            for f in src.downward_api.iter_mut().flat_map(|d| &mut d.items) {
                if let Some(r) = &mut f.field_ref
                    && r.api_version.is_empty()
                {
                    r.api_version = "v1".to_owned();
                }
            }
        }
    }
    if let Some(h) = &mut v.host_path {
        h.type_.get_or_insert_with(String::new);
    }
}

fn container_defaults(c: &mut Container) {
    if c.image_pull_policy.is_empty() {
        c.image_pull_policy = default_pull_policy(&c.image).to_owned();
    }
    for p in &mut c.ports {
        if p.protocol.is_empty() {
            p.protocol = "TCP".to_owned();
        }
    }
    // A container that sets a limit but no request requests its limit (Kubernetes does the same).
    let limits = c.resources.limits.clone();
    for (name, limit) in limits {
        c.resources.requests.entry(name).or_insert(limit);
    }
    for probe in [
        &mut c.liveness_probe,
        &mut c.readiness_probe,
        &mut c.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        probe_defaults(probe);
    }
}

fn probe_defaults(p: &mut Probe) {
    p.timeout_seconds.get_or_insert(1);
    p.period_seconds.get_or_insert(10);
    p.success_threshold.get_or_insert(1);
    p.failure_threshold.get_or_insert(3);
    if let Some(http) = &mut p.http_get {
        if http.path.is_empty() {
            http.path = "/".to_owned();
        }
        if http.scheme.is_empty() {
            http.scheme = "HTTP".to_owned();
        }
    }
}

/// `Always` for `:latest` or untagged images, else `IfNotPresent` (Kubernetes' rule).
pub fn default_pull_policy(image: &str) -> &'static str {
    // The tag follows the last ':' after the last '/' (a registry host may carry a port).
    let name = image.split('@').next().unwrap_or(image);
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.rsplit_once(':') {
        _ if image.contains('@') => "IfNotPresent",
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn limit_range_defaults(l: &mut LimitRange) {
    // A container item with a default limit but no default request requests the limit.
    for item in &mut l.spec.limits {
        if item.type_ == "Container" {
            let defaults = item.default.clone();
            for (name, q) in defaults {
                item.default_request.entry(name).or_insert(q);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy_follows_the_tag() {
        assert_eq!(default_pull_policy("busybox"), "Always");
        assert_eq!(default_pull_policy("busybox:latest"), "Always");
        assert_eq!(default_pull_policy("busybox:1.36"), "IfNotPresent");
        assert_eq!(default_pull_policy("localhost:5000/busybox"), "Always");
        assert_eq!(
            default_pull_policy("localhost:5000/busybox:1"),
            "IfNotPresent"
        );
        assert_eq!(default_pull_policy("busybox@sha256:abc"), "IfNotPresent");
    }

    #[test]
    fn pod_defaults_are_explicit() {
        let mut obj = Object::Pod(
            serde_yaml_ng::from_str(
                "metadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: localhost/skiff/busybox:1\n    ports: [{containerPort: 80}]\n    resources: {limits: {cpu: 500m}}\n    livenessProbe: {httpGet: {port: 80}}\n",
            )
            .unwrap(),
        );
        apply(&mut obj);
        let Object::Pod(pod) = obj else {
            unreachable!()
        };
        assert_eq!(pod.api_version, "v1");
        assert_eq!(pod.kind, "Pod");
        assert_eq!(pod.metadata.namespace, "default");
        assert_eq!(pod.spec.restart_policy, Some(RestartPolicy::Always));
        assert_eq!(pod.spec.termination_grace_period_seconds, Some(30));
        assert_eq!(pod.spec.scheduler_name, "default-scheduler");
        let c = &pod.spec.containers[0];
        assert_eq!(c.image_pull_policy, "IfNotPresent");
        assert_eq!(c.ports[0].protocol, "TCP");
        assert_eq!(c.resources.requests["cpu"].to_string(), "500m");
        let probe = c.liveness_probe.as_ref().unwrap();
        assert_eq!(
            (probe.period_seconds, probe.failure_threshold),
            (Some(10), Some(3))
        );
        assert_eq!(probe.http_get.as_ref().unwrap().path, "/");
    }

    #[test]
    fn deployment_defaults_are_apps_v1s() {
        let mut obj = Object::Deployment(
            serde_yaml_ng::from_str(
                "metadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: c, image: busybox}]}\n",
            )
            .unwrap(),
        );
        apply(&mut obj);
        let Object::Deployment(d) = obj else {
            unreachable!()
        };
        assert_eq!(d.api_version, "apps/v1");
        assert_eq!(d.spec.replicas, Some(1));
        assert_eq!(d.spec.revision_history_limit, Some(10));
        assert_eq!(d.spec.progress_deadline_seconds, Some(600));
        let strategy = d.spec.strategy.as_ref().unwrap();
        assert_eq!(strategy.type_, Some(DeploymentStrategyType::RollingUpdate));
        let ru = strategy.rolling_update.as_ref().unwrap();
        assert_eq!(ru.max_surge, Some(IntOrString::String("25%".into())));
        assert_eq!(
            d.spec.template.spec.restart_policy,
            Some(RestartPolicy::Always)
        );
        assert_eq!(
            d.spec.template.spec.containers[0].image_pull_policy,
            "Always"
        );
    }
}
