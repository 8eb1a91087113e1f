//! Typed views of the batch/v1 kinds for the controllers that act on them. Jobs and CronJobs
//! are declared kinds ([`super::kinds`]), stored and served as JSON; a controller reads one
//! with [`typed`](super::GenericObject::typed) and writes its status back with
//! [`with_status`](super::GenericObject::with_status), so the JSON path (defaults, validation, fields Skiff does
//! not model) stays the one the API server uses.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::apps::PodTemplateSpec;
use super::meta::{LabelSelector, ObjectMeta, Time, Unmodelled};
use super::namespace::ObjectReference;
use super::vocabulary::ConditionStatus;

/// The finalizer the Job controller puts on the pods it creates, so that a finished pod is
/// counted in the Job's status before it can go.
pub const JOB_TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// The annotation and label of an Indexed Job's pod: its completion index.
pub const JOB_COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// The environment variable an Indexed Job's containers read their index from.
pub const JOB_COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Job {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: JobSpec,
    #[serde(default)]
    pub status: JobStatus,
}

/// What the Job controller reads of a Job's spec (defaulted by the API server).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    #[serde(default)]
    pub parallelism: Option<i32>,
    #[serde(default)]
    pub completions: Option<i32>,
    #[serde(default)]
    pub active_deadline_seconds: Option<i64>,
    #[serde(default)]
    pub backoff_limit: Option<i32>,
    #[serde(default)]
    pub completion_mode: Option<String>,
    #[serde(default)]
    pub suspend: Option<bool>,
    #[serde(default)]
    pub ttl_seconds_after_finished: Option<i32>,
    #[serde(default)]
    pub pod_failure_policy: Option<PodFailurePolicy>,
    #[serde(default)]
    pub pod_replacement_policy: Option<String>,
    #[serde(default)]
    pub selector: Option<LabelSelector>,
    #[serde(default)]
    pub template: PodTemplateSpec,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodFailurePolicy {
    #[serde(default)]
    pub rules: Vec<PodFailurePolicyRule>,
}

/// One rule of a pod failure policy: the first that matches a failed pod decides.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodFailurePolicyRule {
    /// `FailJob`, `FailIndex`, `Ignore` or `Count`.
    pub action: String,
    #[serde(default)]
    pub on_exit_codes: Option<OnExitCodes>,
    #[serde(default)]
    pub on_pod_conditions: Vec<OnPodCondition>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OnExitCodes {
    #[serde(default)]
    pub container_name: Option<String>,
    /// `In` or `NotIn`.
    pub operator: String,
    #[serde(default)]
    pub values: Vec<i32>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OnPodCondition {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub status: Option<String>,
}

/// A Job's status, all of it: the controller writes it whole.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminating: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_indexes: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_indexes: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncounted_terminated_pods: Option<UncountedTerminatedPods>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<JobCondition>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    pub other: Unmodelled,
}

/// Pods that finished and are not yet in the counts: written before their tracking
/// finalizers are removed, moved into the counts after, so each is counted exactly once.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UncountedTerminatedPods {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub succeeded: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
}

impl UncountedTerminatedPods {
    pub fn is_empty(&self) -> bool {
        self.succeeded.is_empty() && self.failed.is_empty()
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.succeeded.iter().chain(&self.failed).any(|u| u == uid)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobCondition {
    /// `Complete`, `Failed`, `Suspended`, `FailureTarget`, `SuccessCriteriaMet`.
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The condition types of a Job, as Kubernetes 1.32 spells them.
pub mod condition {
    pub const COMPLETE: &str = "Complete";
    pub const FAILED: &str = "Failed";
    pub const SUSPENDED: &str = "Suspended";
    pub const FAILURE_TARGET: &str = "FailureTarget";
    pub const SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";
}

impl Job {
    pub fn parallelism(&self) -> i32 {
        self.spec.parallelism.unwrap_or(1).max(0)
    }

    pub fn backoff_limit(&self) -> i32 {
        self.spec.backoff_limit.unwrap_or(6)
    }

    pub fn is_indexed(&self) -> bool {
        self.spec.completion_mode.as_deref() == Some("Indexed")
    }

    pub fn is_suspended(&self) -> bool {
        self.spec.suspend == Some(true)
    }

    /// The condition of `type_` that is True, if any.
    pub fn condition(&self, type_: &str) -> Option<&JobCondition> {
        self.status
            .conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == ConditionStatus::True)
    }

    /// Whether the Job is done: `Complete` or `Failed`.
    pub fn is_finished(&self) -> bool {
        self.condition(condition::COMPLETE).is_some() || self.condition(condition::FAILED).is_some()
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CronJob {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: CronJobSpec,
    #[serde(default)]
    pub status: CronJobStatus,
}

/// What the CronJob controller reads of a CronJob's spec (defaulted by the API server).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CronJobSpec {
    #[serde(default)]
    pub schedule: String,
    #[serde(default)]
    pub time_zone: Option<String>,
    #[serde(default)]
    pub starting_deadline_seconds: Option<i64>,
    /// `Allow`, `Forbid` or `Replace`.
    #[serde(default)]
    pub concurrency_policy: Option<String>,
    #[serde(default)]
    pub suspend: Option<bool>,
    #[serde(default)]
    pub job_template: JobTemplateSpec,
    #[serde(default)]
    pub successful_jobs_history_limit: Option<i32>,
    #[serde(default)]
    pub failed_jobs_history_limit: Option<i32>,
}

/// The Job a CronJob makes: its metadata, and its spec passed through as written.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobTemplateSpec {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Value,
}

/// A CronJob's status, all of it: the controller writes it whole.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CronJobStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub active: Vec<ObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<Time>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    pub other: Unmodelled,
}

/// The annotation of a CronJob's Job: the time it was scheduled for, in the CronJob's zone.
pub const CRON_JOB_SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// Indexes as Kubernetes writes `completedIndexes`: sorted ranges, `1,3-5,7`.
pub fn format_indexes(indexes: &std::collections::BTreeSet<i32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = indexes.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(",")
}

/// The indexes of a `completedIndexes` string; what does not parse is skipped.
pub fn parse_indexes(s: &str) -> std::collections::BTreeSet<i32> {
    let mut out = std::collections::BTreeSet::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
                    out.extend(a..=b);
                }
            }
            None => {
                if let Ok(i) = part.parse() {
                    out.insert(i);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_round_trip_as_ranges() {
        let set: std::collections::BTreeSet<i32> = [0, 1, 2, 4, 6, 7].into();
        assert_eq!(format_indexes(&set), "0-2,4,6-7");
        assert_eq!(parse_indexes("0-2,4,6-7"), set);
        assert_eq!(format_indexes(&Default::default()), "");
    }

    #[test]
    fn a_stored_job_reads_and_its_status_writes_back() {
        let o: super::super::registry::GenericObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "pi", "namespace": "default", "uid": "u"},
            "spec": {"parallelism": 2, "completions": 4, "completionMode": "Indexed",
                     "template": {"spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "c", "image": "i"}]}}},
            "status": {"active": 1, "someFutureField": true}
        }))
        .unwrap();
        let mut job: Job = o.typed().unwrap();
        assert_eq!(job.parallelism(), 2);
        assert!(job.is_indexed());
        assert_eq!(job.status.active, Some(1));
        job.status.succeeded = Some(3);
        let back = o.with_status(&job.status);
        assert_eq!(back.body["status"]["succeeded"], 3);
        assert_eq!(back.body["status"]["someFutureField"], true);
        assert_eq!(back.body["spec"], o.body["spec"]);
    }
}
