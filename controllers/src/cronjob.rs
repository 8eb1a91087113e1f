//! The CronJob controller: a Job for each time a CronJob's schedule fires, as
//! kube-controller-manager's `cronjob` controller makes them (Kubernetes 1.32).
//!
//! ```text
//!  a CronJob changes, or one of its Jobs ──► sync: status.active (its unfinished Jobs),
//!  the next scheduled time comes ──────────┘       lastSuccessfulTime; history beyond the
//!                                                  limits deleted; then, unless suspended:
//!      the last time the schedule fired since lastScheduleTime (creation, or now minus
//!      startingDeadlineSeconds) ──► too late for the deadline: skipped
//!                               ──► Forbid with a Job running: skipped; Replace: it goes
//!                               ──► Job `<cronjob>-<minutes since the epoch>` created
//!      ──► look again at the next time the schedule fires
//! ```
//!
//! A Job's name is its scheduled time, so a Job made once is never made twice, whatever
//! fails between the create and the status write. A controller that was down starts only
//! the last time it missed, as Kubernetes does.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use skiff_proto::api::batch::{CRON_JOB_SCHEDULED_TIMESTAMP, CronJob, Job, condition};
use skiff_proto::api::cron::{Schedule, time_zone};
use skiff_proto::api::meta::Unmodelled;
use skiff_proto::api::{DeletionPropagation, GenericObject, Kind, Object, ObjectReference, Time};
use skiff_proto::client::{ClientError, Code, Event};
use skiff_proto::recorder::{EventRecorder, reference_to};

use crate::cache::controller_of;
use crate::core::{Context, Controller, Requeue, controller_ref, gone_is_none, key_of, split_key};
use crate::job;
use crate::podcontrol;
use crate::queue::WorkQueue;

/// The controller's name in logs and metrics.
pub const NAME: &str = "cronjob";
/// Missed times past which a CronJob is warned about (and still only the last one runs).
const TOO_MANY_MISSED: usize = 100;

/// The kind of CronJobs.
pub fn kind() -> Kind {
    Kind::from_name("CronJob").expect("invariant: CronJob is declared")
}

#[derive(Debug)]
pub struct CronJobs {
    ctx: Arc<Context>,
    queue: WorkQueue,
    /// Events from `cronjob-controller`, as Kubernetes names their source.
    events: EventRecorder,
}

/// A Job of the CronJob, as the controller sees it.
struct Owned {
    job: Job,
    /// `Complete` or `Failed`, once it finished.
    finished: Option<&'static str>,
}

fn to_utc(t: Time) -> DateTime<Utc> {
    t.datetime()
}

impl CronJobs {
    pub fn new(ctx: Arc<Context>) -> Self {
        CronJobs {
            events: ctx.events.with_component("cronjob-controller"),
            ctx,
            queue: WorkQueue::new(),
        }
    }

    pub fn on_cron_job(&self, event: &Event) {
        if let Event::Added(o) | Event::Modified(o) | Event::Deleted(o) = event {
            self.queue.add(key_of(o.metadata()));
        }
    }

    /// A Job changed: its CronJob's active list and history may have.
    pub fn on_job(&self, event: &Event) {
        if let Event::Added(o) | Event::Modified(o) | Event::Deleted(o) = event
            && let Some(owner) = controller_of(o).filter(|r| r.kind == "CronJob")
        {
            self.queue
                .add(format!("{}/{}", o.metadata().namespace, owner.name));
        }
    }

    /// The Jobs `cj` controls, oldest first.
    fn jobs_of(&self, cj: &CronJob) -> Vec<Owned> {
        let mut owned: Vec<Owned> = self
            .ctx
            .jobs
            .list(Some(&cj.metadata.namespace))
            .into_iter()
            .filter(|o| controller_of(o).is_some_and(|r| r.uid == cj.metadata.uid))
            .filter_map(|o| match &*o {
                Object::Generic(_, g) => g.typed::<Job>().ok(),
                _ => None,
            })
            .map(|job| {
                let finished = if job.condition(condition::COMPLETE).is_some() {
                    Some(condition::COMPLETE)
                } else if job.condition(condition::FAILED).is_some() {
                    Some(condition::FAILED)
                } else {
                    None
                };
                Owned { job, finished }
            })
            .collect();
        owned.sort_by_key(|o| {
            (
                o.job
                    .status
                    .start_time
                    .or(o.job.metadata.creation_timestamp)
                    .map(|t| t.unix()),
                o.job.metadata.name.clone(),
            )
        });
        owned
    }

    /// Deletes the finished Jobs beyond the history limits, oldest first.
    async fn trim_history(&self, cj: &CronJob, owned: &[Owned]) -> Result<(), ClientError> {
        let me = reference_to(kind(), &cj.metadata);
        for (state, limit) in [
            (
                condition::COMPLETE,
                cj.spec.successful_jobs_history_limit.unwrap_or(3),
            ),
            (
                condition::FAILED,
                cj.spec.failed_jobs_history_limit.unwrap_or(1),
            ),
        ] {
            let finished: Vec<&Owned> = owned
                .iter()
                .filter(|o| {
                    o.finished == Some(state) && o.job.metadata.deletion_timestamp.is_none()
                })
                .collect();
            let excess = finished
                .len()
                .saturating_sub(usize::try_from(limit.max(0)).unwrap_or(0));
            for o in &finished[..excess] {
                let m = &o.job.metadata;
                gone_is_none(
                    self.ctx
                        .client
                        .delete_propagating(
                            job::kind(),
                            &m.namespace,
                            &m.name,
                            0,
                            DeletionPropagation::Background,
                        )
                        .await,
                )?;
                self.events.normal(
                    me.clone(),
                    "SuccessfulDelete",
                    format!("Deleted job {}", m.name),
                );
            }
        }
        Ok(())
    }

    /// The Job of `cj` for the time `at`.
    fn job_for(cj: &CronJob, at: DateTime<chrono_tz::Tz>) -> Result<Object, ClientError> {
        let template = &cj.spec.job_template;
        let minutes = at.timestamp().div_euclid(60);
        let mut annotations = template.metadata.annotations.clone();
        annotations.insert(CRON_JOB_SCHEDULED_TIMESTAMP.to_owned(), at.to_rfc3339());
        let value = json!({
            "metadata": {
                "name": format!("{}-{minutes}", cj.metadata.name),
                "namespace": cj.metadata.namespace,
                "labels": template.metadata.labels,
                "annotations": annotations,
                "ownerReferences": [controller_ref(kind(), &cj.metadata)],
            },
            "spec": template.spec,
        });
        Object::from_value(job::kind(), value).map_err(|e| ClientError::Decode {
            kind: "Job".into(),
            source: e,
        })
    }
}

impl Controller for CronJobs {
    const NAME: &'static str = NAME;

    fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    async fn sync(&self, key: &str) -> Result<Requeue, ClientError> {
        let (namespace, name) = split_key(key);
        let Some(object) = self.ctx.cron_jobs.get(namespace, name) else {
            return Ok(None);
        };
        let Some((stored, mut cj)) = podcontrol::typed::<CronJob>(&object, key) else {
            return Ok(None);
        };
        if cj.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let me = reference_to(kind(), &cj.metadata);
        let before = cj.status.clone();
        let owned = self.jobs_of(&cj);

        // What runs, what finished.
        for o in owned.iter().filter(|o| o.finished.is_some()) {
            let was_active = before.active.iter().any(|r| r.uid == o.job.metadata.uid);
            if was_active {
                self.events.normal(
                    me.clone(),
                    "SawCompletedJob",
                    format!(
                        "Saw completed job: {}, condition: {}",
                        o.job.metadata.name,
                        o.finished.unwrap_or_default()
                    ),
                );
            }
        }
        cj.status.active = owned
            .iter()
            .filter(|o| o.finished.is_none())
            .map(|o| job_reference(&o.job))
            .collect();
        let last_success = owned
            .iter()
            .filter(|o| o.finished == Some(condition::COMPLETE))
            .filter_map(|o| o.job.status.completion_time)
            .max_by_key(Time::unix);
        if let Some(t) = last_success
            && cj
                .status
                .last_successful_time
                .is_none_or(|l| l.unix() < t.unix())
        {
            cj.status.last_successful_time = Some(t);
        }
        self.trim_history(&cj, &owned).await?;

        let requeue = if cj.spec.suspend == Some(true) {
            None
        } else {
            self.schedule(&mut cj, stored, &me).await?
        };
        if cj.status != before {
            podcontrol::write_status(&self.ctx, kind(), stored.with_status(&cj.status)).await?;
        }
        Ok(requeue)
    }
}

impl CronJobs {
    /// Starts the Job of the last time the schedule fired, if it should; returns when to
    /// look again (the next time it fires).
    async fn schedule(
        &self,
        cj: &mut CronJob,
        stored: &GenericObject,
        me: &ObjectReference,
    ) -> Result<Requeue, ClientError> {
        let zone = match time_zone(cj.spec.time_zone.as_deref()) {
            Ok(z) => z,
            Err(why) => {
                self.events.warning(me.clone(), "UnknownTimeZone", why);
                return Ok(None);
            }
        };
        let schedule = match Schedule::parse(&cj.spec.schedule) {
            Ok(s) => s,
            Err(why) => {
                self.events.warning(
                    me.clone(),
                    "InvalidSchedule",
                    format!("invalid schedule: {}: {why}", cj.spec.schedule),
                );
                return Ok(None);
            }
        };
        let now = Utc::now().with_timezone(&zone);
        let created = stored
            .metadata
            .creation_timestamp
            .map_or_else(Utc::now, to_utc);
        let mut since = cj
            .status
            .last_schedule_time
            .map_or(created, to_utc)
            .with_timezone(&zone);
        if let Some(deadline) = cj.spec.starting_deadline_seconds {
            let earliest = now - chrono::Duration::seconds(deadline);
            if earliest > since {
                since = earliest;
            }
        }
        let requeue = schedule.next_after(&now).map(|next| {
            (next - now)
                .to_std()
                .unwrap_or_default()
                .saturating_add(Duration::from_millis(100))
        });
        let (last, missed) = schedule.last_between(&since, &now, TOO_MANY_MISSED);
        if missed > TOO_MANY_MISSED {
            self.events.warning(
                me.clone(),
                "TooManyMissedTimes",
                format!("too many missed start times: {missed}. Set or decrease .spec.startingDeadlineSeconds or check clock skew"),
            );
        }
        let Some(at) = last else {
            return Ok(requeue);
        };
        if let Some(deadline) = cj.spec.starting_deadline_seconds
            && at + chrono::Duration::seconds(deadline) < now
        {
            self.events.warning(
                me.clone(),
                "MissSchedule",
                format!("Missed scheduled time to start a job: {}", at.to_rfc3339()),
            );
            return Ok(requeue);
        }
        match cj.spec.concurrency_policy.as_deref() {
            Some("Forbid") if !cj.status.active.is_empty() => {
                self.events.normal(
                    me.clone(),
                    "JobAlreadyActive",
                    "Not starting job because prior execution is running and concurrency policy is Forbid".into(),
                );
                return Ok(requeue);
            }
            Some("Replace") => {
                for r in std::mem::take(&mut cj.status.active) {
                    gone_is_none(
                        self.ctx
                            .client
                            .delete_propagating(
                                job::kind(),
                                &r.namespace,
                                &r.name,
                                0,
                                DeletionPropagation::Background,
                            )
                            .await,
                    )?;
                    self.events.normal(
                        me.clone(),
                        "SuccessfulDelete",
                        format!("Deleted job {}", r.name),
                    );
                }
            }
            _ => {}
        }
        let job = Self::job_for(cj, at)?;
        match self.ctx.client.create(&job).await {
            Ok(Object::Generic(_, made)) => {
                self.events.normal(
                    me.clone(),
                    "SuccessfulCreate",
                    format!("Created job {}", made.metadata.name),
                );
                if let Ok(made) = made.typed::<Job>() {
                    cj.status.active.push(job_reference(&made));
                }
            }
            Ok(_) => {}
            // Made already, by an earlier sync that did not get to write the status.
            Err(e) if e.code() == Some(Code::AlreadyExists) => {}
            Err(e) => {
                self.events.warning(
                    me.clone(),
                    "FailedCreate",
                    format!("Error creating job: {e}"),
                );
                return Err(e);
            }
        }
        cj.status.last_schedule_time = Time::from_unix(at.timestamp());
        Ok(requeue)
    }
}

fn job_reference(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: job::kind().api_version().to_owned(),
        kind: "Job".to_owned(),
        namespace: job.metadata.namespace.clone(),
        name: job.metadata.name.clone(),
        uid: job.metadata.uid.clone(),
        field_path: String::new(),
        other: Unmodelled(
            [(
                "resourceVersion".to_owned(),
                json!(job.metadata.resource_version),
            )]
            .into_iter()
            .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    /// A CronJob's Job is named for its scheduled minute, carries the template's metadata
    /// and the scheduled time, and is controlled by the CronJob.
    #[test]
    fn a_job_is_named_for_its_time_and_owned() {
        let cj: CronJob = serde_json::from_value(json!({
            "metadata": {"name": "backup", "namespace": "ops", "uid": "cj-uid"},
            "spec": {"schedule": "*/5 * * * *", "jobTemplate": {
                "metadata": {"labels": {"app": "backup"}},
                "spec": {"template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}]}}}}}
        }))
        .unwrap();
        let at = chrono_tz::Tz::UTC.timestamp_opt(1_800_000_000, 0).unwrap();
        let Object::Generic(_, job) = CronJobs::job_for(&cj, at).unwrap() else {
            panic!("not generic")
        };
        assert_eq!(job.metadata.name, "backup-30000000");
        assert_eq!(job.metadata.labels["app"], "backup");
        assert_eq!(
            job.metadata.annotations[CRON_JOB_SCHEDULED_TIMESTAMP],
            "2027-01-15T08:00:00+00:00"
        );
        assert_eq!(job.metadata.owner_references[0].kind, "CronJob");
        assert_eq!(job.metadata.owner_references[0].uid, "cj-uid");
    }
}
