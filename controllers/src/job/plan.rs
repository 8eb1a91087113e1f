//! The Job controller's decisions, without I/O: which finished pods to record, which
//! tracking finalizers to release, what the counts become, whether the Job has succeeded or
//! failed, how many pods to create (and with which indexes) or delete, and when to look
//! again. Kubernetes 1.32's `job` controller is the model.
//!
//! ```text
//!  pods of the Job ──► record: finished pods still tracked ──► status.uncountedTerminatedPods
//!                      (a FailJob rule: FailureTarget)           (written before release)
//!                  ──► release: their finalizers ──► count: uncounted → succeeded / failed
//!                  ──► decide: FailureTarget / SuccessCriteriaMet, then Failed / Complete once
//!                      no pod is left running; suspend and resume; creates (after the
//!                      failure back-off) or deletes towards parallelism; the TTL after finish
//! ```

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use skiff_proto::api::batch::{
    JOB_COMPLETION_INDEX, JOB_TRACKING_FINALIZER, Job, JobCondition, UncountedTerminatedPods,
    condition, format_indexes, parse_indexes,
};
use skiff_proto::api::{ConditionStatus, Pod, PodPhase, Time};

use crate::pods;

/// The first pause before a failed pod is replaced; it doubles with each failure.
pub const BACKOFF_BASE: Duration = Duration::from_secs(10);
/// The longest pause before a failed pod is replaced.
pub const BACKOFF_MAX: Duration = Duration::from_secs(360);

/// The reasons of a Job's conditions and events, as Kubernetes spells them.
pub mod reason {
    pub const BACKOFF_LIMIT_EXCEEDED: &str = "BackoffLimitExceeded";
    pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
    pub const POD_FAILURE_POLICY: &str = "PodFailurePolicy";
    pub const COMPLETIONS_REACHED: &str = "CompletionsReached";
    pub const COMPLETED: &str = "Completed";
    pub const SUSPENDED: &str = "JobSuspended";
    pub const RESUMED: &str = "JobResumed";
}

/// How a pod ended, for the Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Succeeded,
    /// Counts toward the back-off limit.
    Failed,
    /// A failure a pod failure policy `Ignore`s.
    Ignored,
    /// A failure that fails the Job (`FailJob`), with the policy's message.
    FailsJob(String),
}

/// Whether `pod` has finished, and how, for `job`. A pod being deleted has finished once
/// its agent is done with it (a grace period of 0) or if it never ran on a node.
pub fn ending(job: &Job, pod: &Pod) -> Option<Ending> {
    let deleted_and_stopped = pod.metadata.deletion_timestamp.is_some()
        && (pod.spec.node_name.is_empty() || pod.metadata.deletion_grace_period_seconds == Some(0));
    match pod.phase() {
        Some(PodPhase::Succeeded) => Some(Ending::Succeeded),
        Some(PodPhase::Failed) => Some(failure(job, pod)),
        _ if deleted_and_stopped => Some(failure(job, pod)),
        _ => None,
    }
}

/// A failed pod through the Job's pod failure policy: the first rule that matches decides.
fn failure(job: &Job, pod: &Pod) -> Ending {
    let Some(policy) = &job.spec.pod_failure_policy else {
        return Ending::Failed;
    };
    let statuses = pod.status.as_ref();
    for (i, rule) in policy.rules.iter().enumerate() {
        let matched = if let Some(codes) = &rule.on_exit_codes {
            statuses
                .into_iter()
                .flat_map(|s| s.init_container_statuses.iter().chain(&s.container_statuses))
                .filter(|c| codes.container_name.as_ref().is_none_or(|n| *n == c.name))
                .find_map(|c| {
                    let code = c.state.as_ref()?.terminated.as_ref()?.exit_code;
                    let listed = codes.values.contains(&code);
                    let hit = code != 0 && if codes.operator == "In" { listed } else { !listed };
                    hit.then(|| format!("Container {} for pod {}/{} failed with exit code {code} matching {} rule at index {i}", c.name, pod.metadata.namespace, pod.metadata.name, rule.action))
                })
        } else {
            rule.on_pod_conditions.iter().find_map(|want| {
                let status = want.status.as_deref().unwrap_or("True");
                statuses?
                    .conditions
                    .iter()
                    .any(|c| c.type_.as_str() == want.type_ && c.status.as_str() == status)
                    .then(|| {
                        format!(
                            "Pod {}/{} has condition {} matching {} rule at index {i}",
                            pod.metadata.namespace, pod.metadata.name, want.type_, rule.action
                        )
                    })
            })
        };
        let Some(message) = matched else { continue };
        return match rule.action.as_str() {
            "FailJob" => Ending::FailsJob(message),
            "Ignore" => Ending::Ignored,
            _ => Ending::Failed,
        };
    }
    Ending::Failed
}

/// An Indexed Job's pod's index.
pub fn index_of(pod: &Pod) -> Option<i32> {
    pod.metadata
        .annotations
        .get(JOB_COMPLETION_INDEX)
        .or_else(|| pod.metadata.labels.get(JOB_COMPLETION_INDEX))?
        .parse()
        .ok()
}

fn tracked(pod: &Pod) -> bool {
    pod.metadata
        .finalizers
        .iter()
        .any(|f| f == JOB_TRACKING_FINALIZER)
}

fn condition_of(type_: &str, reason: &str, message: &str, now: Time) -> JobCondition {
    JobCondition {
        type_: type_.to_owned(),
        status: ConditionStatus::True,
        last_probe_time: Some(now),
        last_transition_time: Some(now),
        reason: reason.to_owned(),
        message: message.to_owned(),
    }
}

/// Sets condition `type_` True (once: one already True is kept as it is).
fn set_condition(job: &mut Job, type_: &str, reason: &str, message: &str, now: Time) -> bool {
    if job.condition(type_).is_some() {
        return false;
    }
    job.status.conditions.retain(|c| c.type_ != type_);
    job.status
        .conditions
        .push(condition_of(type_, reason, message, now));
    true
}

/// What recording the finished pods did.
#[derive(Debug, Default, PartialEq)]
pub struct Recorded {
    /// Whether the status changed: it must be written before any finalizer is released.
    pub changed: bool,
    /// Names of the pods whose tracking finalizer may go once the status is written.
    pub release: Vec<String>,
}

/// Records each finished pod still tracked and not yet recorded in
/// `uncountedTerminatedPods` (an Indexed Job's succeeded index in `completedIndexes` too);
/// a `FailJob` match sets `FailureTarget`. A finished Job's pods are all released uncounted.
/// `released` are the uids of pods whose finalizer was removed but whose change the cache
/// may not show yet: they are not tracked any more, whatever the cache says.
pub fn record(job: &mut Job, pods: &[&Pod], released: &HashSet<String>, now: Time) -> Recorded {
    let mut out = Recorded::default();
    let finished_job = job.is_finished();
    let mut uncounted = job
        .status
        .uncounted_terminated_pods
        .take()
        .unwrap_or_default();
    let mut completed = parse_indexes(job.status.completed_indexes.as_deref().unwrap_or(""));
    let completions = job.spec.completions.unwrap_or(0);
    for pod in pods
        .iter()
        .filter(|p| tracked(p) && !released.contains(&p.metadata.uid))
    {
        let uid = &pod.metadata.uid;
        let Some(end) = ending(job, pod) else {
            // Still running: released only once the Job is done and the pod stopped.
            continue;
        };
        if finished_job || uncounted.contains(uid) {
            out.release.push(pod.metadata.name.clone());
            continue;
        }
        match end {
            Ending::Succeeded => {
                if job.is_indexed() {
                    match index_of(pod) {
                        Some(i) if (0..completions).contains(&i) => {
                            completed.insert(i);
                        }
                        // An index out of range (completions lowered) counts for nothing.
                        _ => {
                            out.release.push(pod.metadata.name.clone());
                            continue;
                        }
                    }
                }
                uncounted.succeeded.push(uid.clone());
            }
            Ending::Failed => uncounted.failed.push(uid.clone()),
            Ending::Ignored => {
                out.release.push(pod.metadata.name.clone());
                continue;
            }
            Ending::FailsJob(message) => {
                uncounted.failed.push(uid.clone());
                set_condition(
                    job,
                    condition::FAILURE_TARGET,
                    reason::POD_FAILURE_POLICY,
                    &message,
                    now,
                );
            }
        }
        out.changed = true;
        out.release.push(pod.metadata.name.clone());
    }
    if job.is_indexed() {
        let formatted = format_indexes(&completed);
        if job.status.completed_indexes.as_deref().unwrap_or("") != formatted {
            job.status.completed_indexes = Some(formatted);
            out.changed = true;
        }
    }
    job.status.uncounted_terminated_pods = Some(uncounted);
    out
}

/// Moves the recorded pods that are no longer held (their finalizer released, or gone) into
/// `succeeded` and `failed`.
pub fn count(job: &mut Job, held: &HashSet<String>) {
    let mut uncounted = job
        .status
        .uncounted_terminated_pods
        .take()
        .unwrap_or_default();
    let before = (uncounted.succeeded.len(), uncounted.failed.len());
    uncounted.succeeded.retain(|u| held.contains(u));
    uncounted.failed.retain(|u| held.contains(u));
    let succeeded = before.0 - uncounted.succeeded.len();
    let failed = before.1 - uncounted.failed.len();
    let add =
        |n: Option<i32>, k: usize| Some(n.unwrap_or(0) + i32::try_from(k).unwrap_or(i32::MAX));
    job.status.succeeded = add(job.status.succeeded, succeeded);
    job.status.failed = add(job.status.failed, failed);
    job.status.uncounted_terminated_pods = Some(uncounted);
}

/// A Normal or Warning event about the Job.
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// What the sync does after counting.
#[derive(Debug, Default, PartialEq)]
pub struct Decision {
    /// Pods to create: each one's index (`None` for a NonIndexed Job).
    pub create: Vec<Option<i32>>,
    /// Names of running pods to delete.
    pub delete: Vec<String>,
    pub notes: Vec<Note>,
    /// Delete the Job itself: its TTL after finishing has passed.
    pub delete_job: bool,
    /// Look again after this long, whatever happens.
    pub requeue: Option<Duration>,
}

fn seconds(n: i64) -> Duration {
    Duration::from_secs(n.max(0).unsigned_abs())
}

fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The pause before failed pods are replaced: [`BACKOFF_BASE`] doubled per failure, from the
/// last failed pod's end, at most [`BACKOFF_MAX`]. `None` once it has passed.
fn backoff_left(job: &Job, pods: &[&Pod], now: i64) -> Option<Duration> {
    let failures = job.status.failed.unwrap_or(0);
    if failures <= 0 {
        return None;
    }
    let last = pods
        .iter()
        .filter(|p| p.phase() == Some(PodPhase::Failed))
        .filter_map(|p| {
            p.status
                .as_ref()?
                .container_statuses
                .iter()
                .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at)
                .map(|t| t.unix())
                .max()
        })
        .max()?;
    let shift = u32::try_from(failures - 1).unwrap_or(u32::MAX).min(16);
    let pause = BACKOFF_BASE
        .saturating_mul(1 << shift)
        .min(BACKOFF_MAX)
        .as_secs();
    let due = last + i64::try_from(pause).unwrap_or(i64::MAX);
    (due > now).then(|| seconds(due - now))
}

/// Decides the rest of a sync on the counted Job and its pods, updating its status (counts
/// of active, ready and terminating pods, start time, conditions).
pub fn decide(job: &mut Job, pods: &[&Pod], now: Time) -> Decision {
    let mut d = Decision::default();
    let t = now.unix();
    let active: Vec<&Pod> = pods
        .iter()
        .copied()
        .filter(|p| pods::is_active(p))
        .collect();
    let terminating = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some() && !p.is_terminal())
        .count();
    let uncounted = job
        .status
        .uncounted_terminated_pods
        .clone()
        .unwrap_or_default();
    let succeeded = job.status.succeeded.unwrap_or(0) + len(&uncounted.succeeded);
    let failed = job.status.failed.unwrap_or(0) + len(&uncounted.failed);
    let completions = job.spec.completions;

    // Suspended and resumed.
    let was_suspended = job.condition(condition::SUSPENDED).is_some();
    if !job.is_finished() {
        if job.is_suspended() && !was_suspended {
            job.status
                .conditions
                .retain(|c| c.type_ != condition::SUSPENDED);
            job.status.conditions.push(condition_of(
                condition::SUSPENDED,
                reason::SUSPENDED,
                "Job suspended",
                now,
            ));
            d.notes.push(Note {
                warning: false,
                reason: "Suspended",
                message: "Job suspended".into(),
            });
        } else if !job.is_suspended() && was_suspended {
            for c in &mut job.status.conditions {
                if c.type_ == condition::SUSPENDED {
                    c.status = ConditionStatus::False;
                    c.reason = reason::RESUMED.into();
                    c.message = "Job resumed".into();
                    c.last_transition_time = Some(now);
                    c.last_probe_time = Some(now);
                }
            }
            // The deadline counts from the resume.
            job.status.start_time = Some(now);
            d.notes.push(Note {
                warning: false,
                reason: "Resumed",
                message: "Job resumed".into(),
            });
        }
    }
    if !job.is_suspended() && job.status.start_time.is_none() && !job.is_finished() {
        job.status.start_time = Some(now);
    }

    // Failure: a FailJob rule (recorded already), the back-off limit, the deadline.
    if job.condition(condition::FAILURE_TARGET).is_none() && !job.is_finished() {
        let failure = if failed > job.backoff_limit() {
            Some((
                reason::BACKOFF_LIMIT_EXCEEDED,
                "Job has reached the specified backoff limit",
            ))
        } else {
            match (job.spec.active_deadline_seconds, job.status.start_time) {
                (Some(limit), Some(start)) if !job.is_suspended() => {
                    if t - start.unix() >= limit {
                        Some((
                            reason::DEADLINE_EXCEEDED,
                            "Job was active longer than specified deadline",
                        ))
                    } else {
                        d.requeue = Some(seconds(start.unix() + limit - t));
                        None
                    }
                }
                _ => None,
            }
        };
        if let Some((why, message)) = failure {
            set_condition(job, condition::FAILURE_TARGET, why, message, now);
        }
    }
    // Success.
    let done = match completions {
        _ if job.is_indexed() => {
            let completed = parse_indexes(job.status.completed_indexes.as_deref().unwrap_or(""));
            i32::try_from(completed.len()).unwrap_or(i32::MAX) >= completions.unwrap_or(0)
        }
        Some(c) => succeeded >= c,
        // A work queue: one success, and nothing left running.
        None => succeeded > 0 && active.is_empty(),
    };
    if done
        && job.condition(condition::FAILURE_TARGET).is_none()
        && job.condition(condition::SUCCESS_CRITERIA_MET).is_none()
        && !job.is_finished()
    {
        set_condition(
            job,
            condition::SUCCESS_CRITERIA_MET,
            reason::COMPLETIONS_REACHED,
            "Reached expected number of succeeded pods",
            now,
        );
    }

    let failing = job.condition(condition::FAILURE_TARGET).cloned();
    let succeeding = job.condition(condition::SUCCESS_CRITERIA_MET).is_some();
    if failing.is_some() || succeeding || job.is_finished() || job.is_suspended() {
        // Nothing more runs: what does goes.
        d.delete = active.iter().map(|p| p.metadata.name.clone()).collect();
        let left = active.len() + terminating;
        if left == 0 && !job.is_finished() {
            if let Some(f) = &failing {
                set_condition(job, condition::FAILED, &f.reason, &f.message, now);
                d.notes.push(Note {
                    warning: true,
                    reason: if f.reason == reason::POD_FAILURE_POLICY {
                        reason::POD_FAILURE_POLICY
                    } else if f.reason == reason::DEADLINE_EXCEEDED {
                        reason::DEADLINE_EXCEEDED
                    } else {
                        reason::BACKOFF_LIMIT_EXCEEDED
                    },
                    message: f.message.clone(),
                });
            } else if succeeding {
                set_condition(
                    job,
                    condition::COMPLETE,
                    reason::COMPLETIONS_REACHED,
                    "Reached expected number of succeeded pods",
                    now,
                );
                job.status.completion_time = Some(now);
                d.notes.push(Note {
                    warning: false,
                    reason: reason::COMPLETED,
                    message: "Job completed".into(),
                });
            }
        }
    } else {
        let want = wanted_active(job, succeeded, active.len());
        let have = i32::try_from(active.len()).unwrap_or(i32::MAX);
        if want > have {
            match backoff_left(job, pods, t) {
                Some(wait) => d.requeue = earliest(d.requeue, Some(wait)),
                None => d.create = to_create(job, pods, &active, want - have),
            }
        } else if want < have {
            let mut ranked = active.clone();
            ranked.sort_by(|a, b| pods::deletion_order(a, b));
            d.delete = ranked
                .iter()
                .take(usize::try_from(have - want).unwrap_or(0))
                .map(|p| p.metadata.name.clone())
                .collect();
        }
    }

    // The TTL after finishing.
    if let (Some(ttl), Some(finished)) = (job.spec.ttl_seconds_after_finished, finish_time(job)) {
        let due = finished.unix() + i64::from(ttl);
        if t >= due {
            d.delete_job = true;
        } else {
            d.requeue = earliest(d.requeue, Some(seconds(due - t)));
        }
    }

    let still_active = active.len() - d.delete.len().min(active.len());
    let ready = active
        .iter()
        .filter(|p| pods::is_ready(p) && !d.delete.contains(&p.metadata.name))
        .count();
    job.status.active = Some(len_of(still_active + d.create.len()));
    job.status.ready = Some(len_of(ready));
    job.status.terminating = Some(len_of(terminating + d.delete.len()));
    job.status.succeeded.get_or_insert(0);
    job.status.failed.get_or_insert(0);
    if job.is_indexed() {
        job.status.completed_indexes.get_or_insert_with(String::new);
    }
    d
}

fn len(v: &[String]) -> i32 {
    len_of(v.len())
}

fn len_of(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// When the Job finished: its completion time, or when it failed.
fn finish_time(job: &Job) -> Option<Time> {
    job.status.completion_time.or_else(|| {
        job.condition(condition::FAILED)
            .and_then(|c| c.last_transition_time)
    })
}

/// Pods that should be running: `parallelism`, no more than the completions left; a work
/// queue runs no new pod once one has succeeded.
fn wanted_active(job: &Job, succeeded: i32, active: usize) -> i32 {
    let parallelism = job.parallelism();
    match job.spec.completions {
        _ if job.is_indexed() => {
            let completed =
                parse_indexes(job.status.completed_indexes.as_deref().unwrap_or("")).len();
            (job.spec.completions.unwrap_or(0) - len_of(completed)).clamp(0, parallelism)
        }
        Some(c) => (c - succeeded).clamp(0, parallelism),
        None if succeeded > 0 => len_of(active),
        None => parallelism,
    }
}

/// The indexes of `n` new pods: for an Indexed Job the lowest not completed and not running
/// (nor, under `podReplacementPolicy: Failed`, still terminating); `None` each otherwise.
fn to_create(job: &Job, pods: &[&Pod], active: &[&Pod], n: i32) -> Vec<Option<i32>> {
    let n = usize::try_from(n).unwrap_or(0);
    if !job.is_indexed() {
        return vec![None; n];
    }
    let completed = parse_indexes(job.status.completed_indexes.as_deref().unwrap_or(""));
    let wait_for_terminating = job.spec.pod_replacement_policy.as_deref() == Some("Failed");
    let busy: BTreeSet<i32> = active
        .iter()
        .copied()
        .chain(pods.iter().copied().filter(|p| {
            wait_for_terminating && p.metadata.deletion_timestamp.is_some() && !p.is_terminal()
        }))
        .filter_map(index_of)
        .collect();
    (0..job.spec.completions.unwrap_or(0))
        .filter(|i| !completed.contains(i) && !busy.contains(i))
        .take(n)
        .map(Some)
        .collect()
}

/// Whether anything in `uncounted` is still waiting to be counted.
pub fn has_uncounted(job: &Job) -> bool {
    job.status
        .uncounted_terminated_pods
        .as_ref()
        .is_some_and(|u| !UncountedTerminatedPods::is_empty(u))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(spec: serde_json::Value) -> Job {
        let mut j: Job = serde_json::from_value(json!({
            "metadata": {"name": "pi", "namespace": "default", "uid": "job-uid"},
            "spec": spec
        }))
        .unwrap();
        j.spec.parallelism.get_or_insert(1);
        j.spec.backoff_limit.get_or_insert(6);
        j
    }

    fn pod(name: &str, phase: &str, index: Option<i32>) -> Pod {
        let mut annotations = serde_json::Map::new();
        if let Some(i) = index {
            annotations.insert(JOB_COMPLETION_INDEX.into(), json!(i.to_string()));
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                         "finalizers": [JOB_TRACKING_FINALIZER], "annotations": annotations},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": phase, "containerStatuses": [{"name": "c", "ready": false,
                "restartCount": 0, "image": "i", "imageID": "",
                "state": {"terminated": {"exitCode": if phase == "Failed" {42} else {0},
                                         "finishedAt": "2026-01-01T00:00:00Z"}}}]}
        }))
        .unwrap()
    }

    fn now() -> Time {
        Time::from_unix(1_800_000_000).unwrap()
    }

    /// A full round: record, release all, count, decide. Released pods stay in the cache
    /// with their finalizer (as a cache behind the store would show them).
    fn round(job: &mut Job, released: &mut HashSet<String>, pods: &[&Pod]) -> (Recorded, Decision) {
        let recorded = record(job, pods, released, now());
        for p in pods {
            if recorded.release.contains(&p.metadata.name) {
                released.insert(p.metadata.uid.clone());
            }
        }
        count(job, &HashSet::new());
        let d = decide(job, pods, now());
        (recorded, d)
    }

    #[test]
    fn a_job_runs_parallelism_pods_until_its_completions() {
        let mut j = job(json!({"completions": 3, "parallelism": 2}));
        let mut rel = HashSet::new();
        let (_, d) = round(&mut j, &mut rel, &[]);
        assert_eq!(d.create, vec![None, None]);
        assert_eq!(j.status.active, Some(2));
        let a = pod("a", "Succeeded", None);
        let b = pod("b", "Running", None);
        let (r, d) = round(&mut j, &mut rel, &[&a, &b]);
        assert!(r.changed);
        assert_eq!(r.release, vec!["a".to_string()]);
        assert_eq!(j.status.succeeded, Some(1));
        // 2 completions left, 1 running: one more.
        assert_eq!(d.create, vec![None]);
        // Recorded once: the same pod seen again is not counted again.
        let (r, _) = round(&mut j, &mut rel, &[&a, &b]);
        assert_eq!(j.status.succeeded, Some(1));
        assert!(!r.changed);
        let c = pod("c", "Succeeded", None);
        let b = pod("b", "Succeeded", None);
        let (_, d) = round(&mut j, &mut rel, &[&a, &b, &c]);
        assert_eq!(j.status.succeeded, Some(3));
        assert!(d.create.is_empty());
        assert!(j.condition(condition::SUCCESS_CRITERIA_MET).is_some());
        assert!(j.condition(condition::COMPLETE).is_some());
        assert!(j.status.completion_time.is_some());
        assert_eq!(d.notes[0].reason, reason::COMPLETED);
    }

    #[test]
    fn an_indexed_job_creates_each_missing_index_once() {
        let mut j = job(json!({"completions": 4, "parallelism": 2, "completionMode": "Indexed"}));
        let mut rel = HashSet::new();
        let done = pod("x", "Succeeded", Some(0));
        let running = pod("y", "Running", Some(2));
        let (_, d) = round(&mut j, &mut rel, &[&done, &running]);
        assert_eq!(j.status.completed_indexes.as_deref(), Some("0"));
        assert_eq!(d.create, vec![Some(1)]);
    }

    #[test]
    fn failures_back_off_and_past_the_limit_fail_the_job() {
        let mut j = job(json!({"completions": 1, "backoffLimit": 1}));
        let mut rel = HashSet::new();
        let f1 = pod("f1", "Failed", None);
        let (_, d) = round(&mut j, &mut rel, &[&f1]);
        assert_eq!(j.status.failed, Some(1));
        // Failed at 2026-01-01, long before `now`: the back-off has passed.
        assert_eq!(d.create, vec![None]);
        let f2 = pod("f2", "Failed", None);
        let (_, d) = round(&mut j, &mut rel, &[&f1, &f2]);
        assert_eq!(j.status.failed, Some(2));
        assert!(d.create.is_empty());
        let failed = j.condition(condition::FAILED).expect("failed");
        assert_eq!(failed.reason, reason::BACKOFF_LIMIT_EXCEEDED);
        assert!(j.condition(condition::FAILURE_TARGET).is_some());
    }

    #[test]
    fn a_fail_job_rule_fails_at_once_and_an_ignored_failure_does_not_count() {
        let mut j = job(
            json!({"completions": 2, "parallelism": 2, "podFailurePolicy": {"rules": [
                {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [7]}},
                {"action": "FailJob", "onExitCodes": {"containerName": "c", "operator": "In", "values": [42]}}
            ]}}),
        );
        let mut rel = HashSet::new();
        let mut ignored = pod("i", "Failed", None);
        ignored.status.as_mut().unwrap().container_statuses[0]
            .state
            .as_mut()
            .unwrap()
            .terminated
            .as_mut()
            .unwrap()
            .exit_code = 7;
        let (r, _) = round(&mut j, &mut rel, &[&ignored]);
        assert_eq!(r.release, vec!["i".to_string()]);
        assert_eq!(j.status.failed, Some(0));
        let fatal = pod("f", "Failed", None);
        let running = pod("r", "Running", None);
        let (_, d) = round(&mut j, &mut rel, &[&fatal, &running]);
        let target = j.condition(condition::FAILURE_TARGET).expect("target");
        assert_eq!(target.reason, reason::POD_FAILURE_POLICY);
        assert!(
            target
                .message
                .contains("exit code 42 matching FailJob rule at index 1")
        );
        // The running pod goes first; Failed once nothing runs.
        assert_eq!(d.delete, vec!["r".to_string()]);
        assert!(j.condition(condition::FAILED).is_none());
        let (_, _) = round(&mut j, &mut rel, &[&fatal]);
        assert!(j.condition(condition::FAILED).is_some());
    }

    #[test]
    fn the_deadline_fails_a_running_job_and_suspend_stops_it() {
        let mut j = job(json!({"completions": 1, "activeDeadlineSeconds": 30}));
        let mut rel = HashSet::new();
        j.status.start_time = Time::from_unix(now().unix() - 10);
        let running = pod("r", "Running", None);
        let (_, d) = round(&mut j, &mut rel, &[&running]);
        assert_eq!(d.requeue, Some(Duration::from_secs(20)));
        j.status.start_time = Time::from_unix(now().unix() - 31);
        let (_, d) = round(&mut j, &mut rel, &[&running]);
        assert_eq!(d.delete, vec!["r".to_string()]);
        assert_eq!(
            j.condition(condition::FAILURE_TARGET).unwrap().reason,
            reason::DEADLINE_EXCEEDED
        );

        let mut j = job(json!({"completions": 1, "suspend": true}));

        let mut rel = HashSet::new();
        let (_, d) = round(&mut j, &mut rel, &[&running]);
        assert_eq!(d.delete, vec!["r".to_string()]);
        assert!(j.condition(condition::SUSPENDED).is_some());
        assert!(j.status.start_time.is_none());
        j.spec.suspend = Some(false);
        let (_, d) = round(&mut j, &mut rel, &[]);
        assert_eq!(d.create, vec![None]);
        assert!(j.condition(condition::SUSPENDED).is_none());
        assert!(j.status.start_time.is_some());
    }

    #[test]
    fn a_finished_job_goes_after_its_ttl() {
        let mut j = job(json!({"completions": 1, "ttlSecondsAfterFinished": 100}));
        let mut rel = HashSet::new();
        let done = pod("a", "Succeeded", None);
        let (_, d) = round(&mut j, &mut rel, &[&done]);
        assert!(j.condition(condition::COMPLETE).is_some());
        assert_eq!(d.requeue, Some(Duration::from_secs(100)));
        j.status.completion_time = Time::from_unix(now().unix() - 100);
        let (_, d) = round(&mut j, &mut rel, &[&done]);
        assert!(d.delete_job);
    }
}
