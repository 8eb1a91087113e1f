//! apps/v1 Deployments in Kubernetes' protobuf, as client-go's typed clients send them
//! (`kubectl create deployment`), turned into their JSON. What is read is what a pod template
//! usually says: containers (name, image, command, args, working directory, ports, plain
//! environment values, resources, pull and termination-message policies), restart policy,
//! grace period, node selector and name, service account, host network, scheduler and
//! priority class; with the Deployment's replicas, selector, strategy and its limits. A body
//! that sets anything else is refused whole, naming what to send as JSON instead, so that
//! nothing a client asked for is dropped.

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::core::v1 as core;
use serde_json::{Map, Value, json};

use super::wire::{int_or_string, label_selector, object, put, put_flag, put_str};
use crate::rest::status::{ApiError, Reason};

/// A body that sets what is not read from protobuf: refused whole, so nothing is dropped.
pub(super) fn unread(kind: &str, what: &str) -> ApiError {
    ApiError::new(
        Reason::UnsupportedMediaType,
        format!(
            "the protobuf {kind} sets {what}, which Skiff reads from JSON bodies only; \
             send it as application/json"
        ),
    )
}

fn quantities(
    q: std::collections::BTreeMap<String, k8s_pb::apimachinery::pkg::api::resource::Quantity>,
) -> Value {
    Value::Object(
        q.into_iter()
            .map(|(k, v)| (k, json!(v.string.unwrap_or_default())))
            .collect(),
    )
}

fn container(mut c: core::Container) -> Result<Value, ApiError> {
    let mut o = Map::new();
    put_str(&mut o, "name", c.name.take());
    put_str(&mut o, "image", c.image.take());
    if !c.command.is_empty() {
        o.insert("command".into(), json!(std::mem::take(&mut c.command)));
    }
    if !c.args.is_empty() {
        o.insert("args".into(), json!(std::mem::take(&mut c.args)));
    }
    put_str(&mut o, "workingDir", c.working_dir.take());
    put_str(&mut o, "imagePullPolicy", c.image_pull_policy.take());
    put_str(
        &mut o,
        "terminationMessagePath",
        c.termination_message_path.take(),
    );
    put_str(
        &mut o,
        "terminationMessagePolicy",
        c.termination_message_policy.take(),
    );
    put_flag(&mut o, "stdin", c.stdin.take());
    put_flag(&mut o, "stdinOnce", c.stdin_once.take());
    put_flag(&mut o, "tty", c.tty.take());
    if !c.ports.is_empty() {
        let ports: Vec<Value> = std::mem::take(&mut c.ports)
            .into_iter()
            .map(|p| {
                let mut o = Map::new();
                put_str(&mut o, "name", p.name);
                put(&mut o, "containerPort", p.container_port);
                put(&mut o, "hostPort", p.host_port.filter(|p| *p != 0));
                put_str(&mut o, "protocol", p.protocol);
                put_str(&mut o, "hostIP", p.host_ip);
                Value::Object(o)
            })
            .collect();
        o.insert("ports".into(), json!(ports));
    }
    if !c.env.is_empty() {
        let mut env = Vec::new();
        for e in std::mem::take(&mut c.env) {
            if e.value_from.is_some() {
                return Err(unread("pod template", "an env valueFrom"));
            }
            env.push(
                json!({"name": e.name.unwrap_or_default(), "value": e.value.unwrap_or_default()}),
            );
        }
        o.insert("env".into(), json!(env));
    }
    if let Some(r) = c.resources.take() {
        if !r.claims.is_empty() {
            return Err(unread("pod template", "resources.claims"));
        }
        let mut res = Map::new();
        if !r.limits.is_empty() {
            res.insert("limits".into(), quantities(r.limits));
        }
        if !r.requests.is_empty() {
            res.insert("requests".into(), quantities(r.requests));
        }
        o.insert("resources".into(), Value::Object(res));
    }
    if c != core::Container::default() {
        return Err(unread(
            "pod template",
            &format!(
                "container fields beyond name, image, command, args, workingDir, ports, env, \
             resources and the pull and termination-message policies (container {:?})",
                o.get("name").and_then(Value::as_str).unwrap_or_default()
            ),
        ));
    }
    Ok(Value::Object(o))
}

fn pod_spec(mut s: core::PodSpec) -> Result<Value, ApiError> {
    let mut o = Map::new();
    let containers = std::mem::take(&mut s.containers)
        .into_iter()
        .map(container)
        .collect::<Result<Vec<_>, _>>()?;
    o.insert("containers".into(), json!(containers));
    if !s.init_containers.is_empty() {
        let init = std::mem::take(&mut s.init_containers)
            .into_iter()
            .map(container)
            .collect::<Result<Vec<_>, _>>()?;
        o.insert("initContainers".into(), json!(init));
    }
    put_str(&mut o, "restartPolicy", s.restart_policy.take());
    put(
        &mut o,
        "terminationGracePeriodSeconds",
        s.termination_grace_period_seconds.take(),
    );
    put_str(&mut o, "dnsPolicy", s.dns_policy.take());
    if !s.node_selector.is_empty() {
        o.insert(
            "nodeSelector".into(),
            json!(std::mem::take(&mut s.node_selector)),
        );
    }
    put_str(&mut o, "nodeName", s.node_name.take());
    put_str(&mut o, "serviceAccountName", s.service_account_name.take());
    put_str(&mut o, "serviceAccount", s.service_account.take());
    put_flag(&mut o, "hostNetwork", s.host_network.take());
    put_str(&mut o, "schedulerName", s.scheduler_name.take());
    put_str(&mut o, "priorityClassName", s.priority_class_name.take());
    // Go writes these whether set or not; unset, they say nothing.
    for flag in [&mut s.host_pid, &mut s.host_ipc] {
        if *flag == Some(false) {
            *flag = None;
        }
    }
    for text in [&mut s.hostname, &mut s.subdomain] {
        if text.as_deref() == Some("") {
            *text = None;
        }
    }
    // An empty pod security context is what a typed client sends when none is set.
    if s.security_context == Some(core::PodSecurityContext::default()) {
        s.security_context = None;
    }
    if s != core::PodSpec::default() {
        return Err(unread(
            "pod template",
            "pod spec fields beyond containers, initContainers, restartPolicy, \
             terminationGracePeriodSeconds, dnsPolicy, nodeSelector, nodeName, the service \
             account, hostNetwork, schedulerName and priorityClassName",
        ));
    }
    Ok(Value::Object(o))
}

/// The JSON of a protobuf pod template: its metadata and its pod spec.
pub(super) fn pod_template(t: core::PodTemplateSpec) -> Result<Value, ApiError> {
    let mut template = Map::new();
    // `object` answers `{"metadata": …}`, a whole object's start.
    if let Some(meta) = object(t.metadata)
        .remove("metadata")
        .filter(|m| m.as_object().is_some_and(|m| !m.is_empty()))
    {
        template.insert("metadata".into(), meta);
    }
    if let Some(p) = t.spec {
        template.insert("spec".into(), pod_spec(p)?);
    }
    Ok(Value::Object(template))
}

/// The JSON of a protobuf apps/v1 Deployment.
pub(super) fn deployment(d: apps::Deployment) -> Result<Map<String, Value>, ApiError> {
    let mut o = object(d.metadata);
    let Some(mut spec) = d.spec else {
        return Ok(o);
    };
    let mut s = Map::new();
    put(&mut s, "replicas", spec.replicas.take());
    if let Some(sel) = spec.selector.take() {
        s.insert("selector".into(), label_selector(sel));
    }
    if let Some(t) = spec.template.take() {
        s.insert("template".into(), pod_template(t)?);
    }
    if let Some(st) = spec.strategy.take() {
        let mut strategy = Map::new();
        put_str(&mut strategy, "type", st.r#type);
        if let Some(r) = st.rolling_update {
            let mut ru = Map::new();
            put(
                &mut ru,
                "maxUnavailable",
                r.max_unavailable.map(int_or_string),
            );
            put(&mut ru, "maxSurge", r.max_surge.map(int_or_string));
            strategy.insert("rollingUpdate".into(), Value::Object(ru));
        }
        if !strategy.is_empty() {
            s.insert("strategy".into(), Value::Object(strategy));
        }
    }
    put(&mut s, "minReadySeconds", spec.min_ready_seconds.take());
    put(
        &mut s,
        "revisionHistoryLimit",
        spec.revision_history_limit.take(),
    );
    put_flag(&mut s, "paused", spec.paused.take());
    put(
        &mut s,
        "progressDeadlineSeconds",
        spec.progress_deadline_seconds.take(),
    );
    if spec != apps::DeploymentSpec::default() {
        return Err(unread(
            "Deployment",
            "Deployment spec fields Skiff does not read from protobuf",
        ));
    }
    o.insert("spec".into(), Value::Object(s));
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;

    /// What `kubectl create deployment web --image=busybox --replicas=3 --port=80 -- sleep
    /// 3600` sends.
    #[test]
    fn kubectl_create_deployment() {
        let labels: std::collections::BTreeMap<String, String> =
            [("app".to_string(), "web".to_string())].into();
        let d = apps::Deployment {
            metadata: Some(meta::ObjectMeta {
                name: Some("web".into()),
                labels: labels.clone(),
                ..Default::default()
            }),
            spec: Some(apps::DeploymentSpec {
                replicas: Some(3),
                selector: Some(meta::LabelSelector {
                    match_labels: labels.clone(),
                    ..Default::default()
                }),
                template: Some(core::PodTemplateSpec {
                    metadata: Some(meta::ObjectMeta {
                        labels: labels.clone(),
                        ..Default::default()
                    }),
                    spec: Some(core::PodSpec {
                        containers: vec![core::Container {
                            name: Some("busybox".into()),
                            image: Some("busybox".into()),
                            command: vec!["sleep".into(), "3600".into()],
                            ports: vec![core::ContainerPort {
                                container_port: Some(80),
                                ..Default::default()
                            }],
                            resources: Some(core::ResourceRequirements::default()),
                            // Go writes its unset scalars as false and "".
                            stdin: Some(false),
                            stdin_once: Some(false),
                            tty: Some(false),
                            termination_message_path: Some(String::new()),
                            ..Default::default()
                        }],
                        host_pid: Some(false),
                        host_network: Some(false),
                        restart_policy: Some(String::new()),
                        ..Default::default()
                    }),
                }),
                strategy: Some(apps::DeploymentStrategy::default()),
                ..Default::default()
            }),
            status: Some(apps::DeploymentStatus::default()),
        };
        let o = Value::Object(deployment(d).expect("read"));
        assert_eq!(o["spec"]["replicas"], 3);
        assert_eq!(o["spec"]["selector"]["matchLabels"]["app"], "web");
        assert_eq!(o["spec"]["template"]["metadata"]["labels"]["app"], "web");
        let c = &o["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], "busybox");
        assert_eq!(c["command"], json!(["sleep", "3600"]));
        assert_eq!(c["ports"][0]["containerPort"], 80);
        assert!(c.get("stdin").is_none() && c.get("terminationMessagePath").is_none());
        let pod = &o["spec"]["template"]["spec"];
        assert!(pod.get("hostNetwork").is_none() && pod.get("restartPolicy").is_none());

        // A field not read is refused, not dropped.
        let with_volume = apps::Deployment {
            spec: Some(apps::DeploymentSpec {
                template: Some(core::PodTemplateSpec {
                    metadata: None,
                    spec: Some(core::PodSpec {
                        volumes: vec![core::Volume::default()],
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let err = deployment(with_volume).expect_err("volumes are not read");
        assert!(
            err.message.contains("send it as application/json"),
            "{err:?}"
        );
    }
}
