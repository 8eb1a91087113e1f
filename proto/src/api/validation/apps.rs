//! Deployment and ReplicaSet: replica counts, the selector (non-empty, matching the template's
//! labels), the template as a pod that restarts always, and the rollout strategy.

use super::names::{validate_labels, validate_selector};
use super::pod::validate_pod_spec;
use super::{Errors, Path};
use crate::api::apps::{Deployment, PodTemplateSpec, ReplicaSet};
use crate::api::meta::{IntOrString, LabelSelector};
use crate::api::vocabulary::{DeploymentStrategyType, RestartPolicy};

pub(super) fn validate_deployment(errs: &mut Errors, d: &Deployment) {
    let spec = Path::root("spec");
    let s = &d.spec;
    non_negative(errs, &spec.field("replicas"), s.replicas);
    non_negative(errs, &spec.field("minReadySeconds"), s.min_ready_seconds);
    non_negative(
        errs,
        &spec.field("revisionHistoryLimit"),
        s.revision_history_limit,
    );
    if let Some(deadline) = s.progress_deadline_seconds
        && deadline <= s.min_ready_seconds.unwrap_or(0)
    {
        errs.add(
            &spec.field("progressDeadlineSeconds"),
            format!("invalid value {deadline}: must be greater than minReadySeconds"),
        );
    }
    selector_and_template(errs, "Deployment", &spec, &s.selector, &s.template);
    let Some(strategy) = &s.strategy else {
        return;
    };
    let p = spec.field("strategy");
    match strategy.type_ {
        Some(DeploymentStrategyType::Recreate) if strategy.rolling_update.is_some() => errs.add(
            &p.field("rollingUpdate"),
            "forbidden: may not be specified when strategy `type` is 'Recreate'",
        ),
        _ => {}
    }
    if let Some(ru) = &strategy.rolling_update {
        let p = p.field("rollingUpdate");
        let surge = ru
            .max_surge
            .as_ref()
            .and_then(|v| int_or_percent(errs, &p.field("maxSurge"), v, false));
        let unavailable = ru
            .max_unavailable
            .as_ref()
            .and_then(|v| int_or_percent(errs, &p.field("maxUnavailable"), v, true));
        if surge == Some(0) && unavailable == Some(0) {
            errs.add(
                &p.field("maxUnavailable"),
                "invalid value 0: may not be 0 when `maxSurge` is 0",
            );
        }
    }
}

pub(super) fn validate_replica_set(errs: &mut Errors, rs: &ReplicaSet) {
    let spec = Path::root("spec");
    non_negative(errs, &spec.field("replicas"), rs.spec.replicas);
    non_negative(
        errs,
        &spec.field("minReadySeconds"),
        rs.spec.min_ready_seconds,
    );
    selector_and_template(
        errs,
        "ReplicaSet",
        &spec,
        &rs.spec.selector,
        &rs.spec.template,
    );
    if let Some(status) = &rs.status {
        let p = Path::root("status");
        for (field, v) in [
            ("replicas", status.replicas),
            ("fullyLabeledReplicas", status.fully_labeled_replicas),
            ("readyReplicas", status.ready_replicas),
            ("availableReplicas", status.available_replicas),
        ] {
            non_negative(errs, &p.field(field), Some(v));
        }
    }
}

pub(crate) fn non_negative(errs: &mut Errors, path: &Path, value: Option<i32>) {
    if let Some(v) = value
        && v < 0
    {
        errs.add(path, format!("invalid value {v}: must be at least 0"));
    }
}

/// A count or a percentage (`25%`) that is at least 0, and at most 100 % when it bounds
/// unavailability; its value when it is a plain count.
pub(crate) fn int_or_percent(
    errs: &mut Errors,
    path: &Path,
    value: &IntOrString,
    at_most_all: bool,
) -> Option<i32> {
    match value.scaled(100, false) {
        Err(message) => {
            errs.add(path, message);
            None
        }
        Ok(v) if v < 0 => {
            errs.add(path, format!("invalid value {value}: must be at least 0"));
            None
        }
        Ok(v) if at_most_all && matches!(value, IntOrString::String(_)) && v > 100 => {
            errs.add(
                path,
                format!("invalid value {value}: must not be greater than 100%"),
            );
            None
        }
        Ok(v) => Some(v),
    }
}

/// The selector selects something and selects the template's pods; the template is a valid
/// pod that always restarts (a workload's pods are replaced, never left finished).
pub(crate) fn selector_and_template(
    errs: &mut Errors,
    kind: &str,
    spec: &Path,
    selector: &LabelSelector,
    template: &PodTemplateSpec,
) {
    let sel = spec.field("selector");
    if selector.match_labels.is_empty() && selector.match_expressions.is_empty() {
        errs.add(
            &sel,
            format!(
                "invalid value: empty selector is invalid for {}",
                kind.to_ascii_lowercase()
            ),
        );
    } else {
        validate_selector(errs, &sel, selector);
    }
    let t = spec.field("template");
    let labels = t.field("metadata").field("labels");
    validate_labels(errs, &labels, &template.metadata.labels);
    if !selector.matches(&template.metadata.labels) {
        errs.add(
            &labels,
            "invalid value: `selector` does not match template `labels`",
        );
    }
    let pod = t.field("spec");
    validate_pod_spec(errs, &pod, &template.spec);
    if let Some(policy) = template.spec.restart_policy
        && policy != RestartPolicy::Always
    {
        errs.one_of(
            &pod.field("restartPolicy"),
            policy.as_str(),
            &[RestartPolicy::Always.as_str()],
        );
    }
    if !template.spec.node_name.is_empty() {
        errs.add(
            &pod.field("nodeName"),
            "forbidden: a workload's pods are placed by the scheduler",
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::api::defaults;
    use crate::api::object::{Kind, Object};
    use crate::api::validation::validate;

    fn errors(kind: Kind, yaml: &str) -> Vec<String> {
        let value: serde_json::Value = serde_yaml_ng::from_str(yaml).expect("YAML");
        let mut obj = Object::from_value(kind, value).expect("decodes");
        defaults::apply(&mut obj);
        match validate(&obj) {
            Ok(()) => vec![],
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    const WEB: &str = "metadata: {name: web}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: busybox}]}
";

    #[test]
    fn a_minimal_deployment_and_replica_set_are_valid() {
        assert_eq!(errors(Kind::Deployment, WEB), Vec::<String>::new());
        assert_eq!(errors(Kind::ReplicaSet, WEB), Vec::<String>::new());
    }

    #[test]
    fn the_selector_must_select_the_template() {
        let yaml = WEB.replace("labels: {app: web}", "labels: {app: api}");
        assert_eq!(
            errors(Kind::Deployment, &yaml),
            [
                "spec.template.metadata.labels: invalid value: `selector` does not match template `labels`"
            ]
        );
        let yaml = WEB.replace("selector: {matchLabels: {app: web}}", "selector: {}");
        assert_eq!(
            errors(Kind::ReplicaSet, &yaml),
            ["spec.selector: invalid value: empty selector is invalid for replicaset"]
        );
    }

    #[test]
    fn every_violation_is_reported_with_its_path() {
        let yaml = format!(
            "{WEB}  replicas: -1\n  strategy: {{rollingUpdate: {{maxSurge: 0, maxUnavailable: '0%'}}}}\n  progressDeadlineSeconds: 5\n  minReadySeconds: 10\n"
        )
        .replace("spec: {containers", "spec: {restartPolicy: Never, containers");
        let errs = errors(Kind::Deployment, &yaml);
        assert_eq!(
            errs,
            [
                "spec.replicas: invalid value -1: must be at least 0",
                "spec.progressDeadlineSeconds: invalid value 5: must be greater than minReadySeconds",
                "spec.template.spec.restartPolicy: unsupported value \"Never\": supported values: \"Always\"",
                "spec.strategy.rollingUpdate.maxUnavailable: invalid value 0: may not be 0 when `maxSurge` is 0",
            ],
        );
        let yaml = format!("{WEB}  strategy: {{rollingUpdate: {{maxUnavailable: 'half'}}}}\n");
        assert_eq!(
            errors(Kind::Deployment, &yaml),
            [
                "spec.strategy.rollingUpdate.maxUnavailable: invalid value \"half\": must be an integer or a percentage (\"25%\")"
            ]
        );
        let yaml = format!("{WEB}  strategy: {{type: Recreate, rollingUpdate: {{maxSurge: 1}}}}\n");
        assert_eq!(
            errors(Kind::Deployment, &yaml),
            [
                "spec.strategy.rollingUpdate: forbidden: may not be specified when strategy `type` is 'Recreate'"
            ]
        );
    }
}
