//! batch/v1 Jobs and CronJobs in Kubernetes' protobuf, as `kubectl create job` and `kubectl
//! create cronjob` send them, turned into their JSON: the pod template as a Deployment's is
//! read (see `apps`), with the Job's counts, limits, selector and modes, and the CronJob's
//! schedule and policies. A body that sets anything else is refused whole.

use k8s_pb::api::batch::v1 as batch;
use serde_json::{Map, Value};

use super::apps::{pod_template, unread};
use super::wire::{label_selector, object, put, put_flag, put_str};
use crate::rest::status::ApiError;

/// The JSON of a Job's spec.
fn job_spec(mut spec: batch::JobSpec) -> Result<Value, ApiError> {
    let mut s = Map::new();
    put(&mut s, "parallelism", spec.parallelism.take());
    put(&mut s, "completions", spec.completions.take());
    put(
        &mut s,
        "activeDeadlineSeconds",
        spec.active_deadline_seconds.take(),
    );
    put(&mut s, "backoffLimit", spec.backoff_limit.take());
    put(
        &mut s,
        "backoffLimitPerIndex",
        spec.backoff_limit_per_index.take(),
    );
    put(&mut s, "maxFailedIndexes", spec.max_failed_indexes.take());
    if let Some(sel) = spec.selector.take() {
        s.insert("selector".into(), label_selector(sel));
    }
    put_flag(&mut s, "manualSelector", spec.manual_selector.take());
    if let Some(t) = spec.template.take() {
        s.insert("template".into(), pod_template(t)?);
    }
    put(
        &mut s,
        "ttlSecondsAfterFinished",
        spec.ttl_seconds_after_finished.take(),
    );
    put_str(&mut s, "completionMode", spec.completion_mode.take());
    put_flag(&mut s, "suspend", spec.suspend.take());
    put_str(
        &mut s,
        "podReplacementPolicy",
        spec.pod_replacement_policy.take(),
    );
    put_str(&mut s, "managedBy", spec.managed_by.take());
    if spec != batch::JobSpec::default() {
        return Err(unread("Job", "a pod failure policy or a success policy"));
    }
    Ok(Value::Object(s))
}

/// The JSON of a protobuf batch/v1 Job.
pub(super) fn job(j: batch::Job) -> Result<Map<String, Value>, ApiError> {
    let mut o = object(j.metadata);
    if let Some(spec) = j.spec {
        o.insert("spec".into(), job_spec(spec)?);
    }
    Ok(o)
}

/// The JSON of a protobuf batch/v1 CronJob.
pub(super) fn cron_job(c: batch::CronJob) -> Result<Map<String, Value>, ApiError> {
    let mut o = object(c.metadata);
    let Some(mut spec) = c.spec else {
        return Ok(o);
    };
    let mut s = Map::new();
    put_str(&mut s, "schedule", spec.schedule.take());
    put_str(&mut s, "timeZone", spec.time_zone.take());
    put(
        &mut s,
        "startingDeadlineSeconds",
        spec.starting_deadline_seconds.take(),
    );
    put_str(&mut s, "concurrencyPolicy", spec.concurrency_policy.take());
    put_flag(&mut s, "suspend", spec.suspend.take());
    if let Some(t) = spec.job_template.take() {
        let mut template = object(t.metadata);
        if template
            .get("metadata")
            .is_some_and(|m| m.as_object().is_some_and(Map::is_empty))
        {
            template.remove("metadata");
        }
        if let Some(js) = t.spec {
            template.insert("spec".into(), job_spec(js)?);
        }
        s.insert("jobTemplate".into(), Value::Object(template));
    }
    put(
        &mut s,
        "successfulJobsHistoryLimit",
        spec.successful_jobs_history_limit.take(),
    );
    put(
        &mut s,
        "failedJobsHistoryLimit",
        spec.failed_jobs_history_limit.take(),
    );
    o.insert("spec".into(), Value::Object(s));
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use serde_json::json;

    fn template() -> core::PodTemplateSpec {
        core::PodTemplateSpec {
            metadata: None,
            spec: Some(core::PodSpec {
                containers: vec![core::Container {
                    name: Some("pi".into()),
                    image: Some("busybox".into()),
                    command: vec!["true".into()],
                    ..Default::default()
                }],
                restart_policy: Some("Never".into()),
                ..Default::default()
            }),
        }
    }

    /// What `kubectl create job pi --image=busybox -- true` sends.
    #[test]
    fn kubectl_create_job() {
        let j = batch::Job {
            metadata: Some(meta::ObjectMeta {
                name: Some("pi".into()),
                ..Default::default()
            }),
            spec: Some(batch::JobSpec {
                template: Some(template()),
                ..Default::default()
            }),
            status: None,
        };
        assert_eq!(
            Value::Object(job(j).unwrap()),
            json!({"metadata": {"name": "pi"}, "spec": {"template": {"spec": {
                "containers": [{"name": "pi", "image": "busybox", "command": ["true"]}],
                "restartPolicy": "Never"
            }}}})
        );
    }

    /// What `kubectl create cronjob tick --image=busybox --schedule='*/5 * * * *'` sends; a
    /// pod failure policy is not read from protobuf, and says so.
    #[test]
    fn kubectl_create_cronjob() {
        let c = batch::CronJob {
            metadata: Some(meta::ObjectMeta {
                name: Some("tick".into()),
                ..Default::default()
            }),
            spec: Some(batch::CronJobSpec {
                schedule: Some("*/5 * * * *".into()),
                job_template: Some(batch::JobTemplateSpec {
                    metadata: Some(meta::ObjectMeta {
                        name: Some("tick".into()),
                        ..Default::default()
                    }),
                    spec: Some(batch::JobSpec {
                        template: Some(template()),
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            }),
            status: None,
        };
        let v = Value::Object(cron_job(c).unwrap());
        assert_eq!(v["spec"]["schedule"], "*/5 * * * *");
        assert_eq!(
            v["spec"]["jobTemplate"]["metadata"],
            json!({"name": "tick"})
        );
        assert_eq!(
            v["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"],
            "Never"
        );
        let j = batch::Job {
            metadata: None,
            spec: Some(batch::JobSpec {
                pod_failure_policy: Some(batch::PodFailurePolicy::default()),
                ..Default::default()
            }),
            status: None,
        };
        assert!(job(j).is_err());
    }
}
