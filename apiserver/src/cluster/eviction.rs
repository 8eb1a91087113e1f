//! Eviction (`pods/<name>/eviction`): a delete that the pod's PodDisruptionBudget may
//! refuse, as kube-apiserver's eviction REST decides it (Kubernetes 1.32).
//!
//! ```text
//!  pod Succeeded, Failed or Pending, or being deleted ──► delete (pinned to the pod read,
//!                                                         unless finished or deleting)
//!  else the budgets of its namespace that select it:
//!    none ─────────────────────────────────────────────► delete
//!    more than one ────────────────────────────────────► 500, nothing done
//!    one, pod not Ready and (AlwaysAllow, or the budget ─► delete pinned to the pod read
//!      healthy enough: currentHealthy ≥ desiredHealthy > 0)
//!    one, observedGeneration behind ───────────────────► 429 (retry after 10 s)
//!    one, disruptionsAllowed 0 ────────────────────────► 429, the budget's figures as cause
//!    one, else ── disruptionsAllowed − 1, pod into disruptedPods (compare-and-swap on the
//!                 budget, read again on a conflict) ───► delete
//!  delete = the pod's DisruptionTarget condition (True, EvictionByEvictionAPI), then the
//!           delete with the request's options
//! ```
//!
//! The budget is spent before the pod goes, and the pod stays out of the budget's healthy
//! count (`disruptedPods`) until the disruption controller sees it deleted, so two evictions
//! racing for the last disruption cannot both win: one of the two budget writes conflicts and
//! reads the budget again. `dryRun` decides everything and writes nothing.

use std::time::Duration;

use skiff_proto::api::policy::{
    MAX_DISRUPTED_PODS, PodDisruptionBudget, pod_disruption_budget_kind,
};
use skiff_proto::api::{ConditionStatus, Kind, Object, Pod, PodCondition, PodConditionType, Time};

use super::{
    ClusterApi, ClusterError, DeleteOptions, Part, Result, Stored, conflict, not_found, prefix_end,
};

/// Attempts at an eviction's writes that conflict with another writer (the pod changed under
/// the check, another eviction spent the budget first).
const ATTEMPTS: usize = 5;
/// The pause between them.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// The reason of the pod condition an eviction sets.
pub const EVICTION_REASON: &str = "EvictionByEvictionAPI";

/// Whether the pod's budgets need not be asked: it is finished, not yet running, or
/// already going (kube-apiserver's `canIgnorePDB`).
fn budgets_ignored(pod: &Pod) -> bool {
    use skiff_proto::api::PodPhase::{Failed, Pending, Succeeded};
    matches!(pod.phase(), Some(Succeeded | Failed | Pending))
        || pod.metadata.deletion_timestamp.is_some()
}

/// Whether the delete must be pinned to the pod as read, so a pod that became ready
/// meanwhile is not deleted on a decision made while it was not (all but finished pods and
/// pods already being deleted).
fn pin_to_read(pod: &Pod) -> bool {
    !(pod.is_terminal() || pod.metadata.deletion_timestamp.is_some())
}

fn is_ready(pod: &Pod) -> bool {
    pod.condition(&PodConditionType::Ready)
        .is_some_and(|c| c.status == ConditionStatus::True)
}

/// What the budget says of an eviction of a pod it covers.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The pod is not ready and the budget lets it go without spending a disruption: delete
    /// it, pinned to the pod as read.
    Unhealthy,
    /// A disruption may be spent: the budget's status with it spent (and `pod` named in
    /// `disruptedPods`, at `now`, unless a dry run).
    Spend(Box<PodDisruptionBudget>),
}

/// The budget's answer to evicting `pod` at `now` (kube-apiserver's unhealthy-pod rule,
/// then `checkAndDecrement`).
pub fn judge(pdb: &PodDisruptionBudget, pod: &Pod, now: Time, dry_run: bool) -> Result<Verdict> {
    let s = &pdb.status;
    let name = &pdb.metadata.name;
    if !is_ready(pod)
        && (pdb.always_allows_unhealthy()
            || (s.current_healthy >= s.desired_healthy && s.desired_healthy > 0))
    {
        return Ok(Verdict::Unhealthy);
    }
    let forbidden = |why: &str| ClusterError::Forbidden {
        kind: pod_disruption_budget_kind(),
        name: name.clone(),
        why: why.to_owned(),
    };
    if s.observed_generation < pdb.metadata.generation.unwrap_or(0) {
        return Err(ClusterError::BudgetUnobserved {
            budget: name.clone(),
        });
    }
    if s.disruptions_allowed < 0 {
        return Err(forbidden("pdb disruptions allowed is negative"));
    }
    if s.disrupted_pods.len() > MAX_DISRUPTED_PODS {
        return Err(forbidden(
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if s.disruptions_allowed == 0 {
        return Err(ClusterError::BudgetExhausted {
            budget: name.clone(),
            desired_healthy: s.desired_healthy,
            current_healthy: s.current_healthy,
        });
    }
    let mut next = pdb.clone();
    next.status.disruptions_allowed -= 1;
    if next.status.disruptions_allowed == 0 {
        next.status.set_allowed_condition();
    }
    if !dry_run {
        next.status
            .disrupted_pods
            .insert(pod.metadata.name.clone(), now);
    }
    Ok(Verdict::Spend(Box::new(next)))
}

impl ClusterApi {
    /// Evicts pod `namespace/name` if its disruption budget allows, deleting it with
    /// `options` (see the module's diagram). The faces call this one implementation.
    pub async fn evict(&self, namespace: &str, name: &str, options: &DeleteOptions) -> Result<()> {
        if options.grace.is_some_and(|g| g < 0) {
            return Err(ClusterError::NegativeGrace);
        }
        // A client's own resourceVersion precondition is not retried past.
        let retry = options.resource_version == 0;
        let mut attempt = 0;
        let pod = loop {
            attempt += 1;
            self.barrier(false).await?;
            let (_, current) = self.get_local(Kind::Pod, namespace, name)?;
            let current = current.ok_or_else(|| not_found(Kind::Pod, name))?;
            let Object::Pod(pod) = &current.object else {
                return Err(not_found(Kind::Pod, name));
            };
            if !budgets_ignored(pod) {
                break current;
            }
            let mut opts = options.clone();
            if retry && pin_to_read(pod) {
                opts.resource_version = current.mod_revision;
            }
            match self.mark_and_delete(namespace, name, &opts).await {
                Err(ClusterError::Conflict { .. }) if retry && attempt < ATTEMPTS => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                done => return done,
            }
        };
        let Object::Pod(p) = &pod.object else {
            unreachable!("read as a pod above")
        };
        let mut opts = options.clone();
        let budgets = self.budgets_of(p)?;
        match budgets.as_slice() {
            [] => {}
            [_, _, ..] => {
                return Err(ClusterError::MultipleBudgets {
                    pod: name.to_owned(),
                });
            }
            [stored] => {
                if self.spend(stored.clone(), p, options.dry_run).await? == Spent::Unhealthy {
                    opts.resource_version = pod.mod_revision;
                }
            }
        }
        self.mark_and_delete(namespace, name, &opts).await
    }

    /// The budgets of `pod`'s namespace that select it.
    fn budgets_of(&self, pod: &Pod) -> Result<Vec<Stored>> {
        let kind = pod_disruption_budget_kind();
        let prefix = kind.prefix(Some(&pod.metadata.namespace));
        let (_, stored) = self.range(kind, prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0)?;
        Ok(stored
            .into_iter()
            .filter(|s| read_budget(s).is_some_and(|b| b.selects(&pod.metadata.labels)))
            .collect())
    }

    /// Asks budget `stored` for a disruption of `pod`, spending it by compare-and-swap of the
    /// budget's status (unless `dry_run`); on a conflict the budget is read again and asked
    /// again.
    async fn spend(&self, mut stored: Stored, pod: &Pod, dry_run: bool) -> Result<Spent> {
        let kind = pod_disruption_budget_kind();
        for attempt in 1..=ATTEMPTS {
            let Some(pdb) = read_budget(&stored) else {
                // Not a budget Skiff can read: as kube-apiserver skips a bad selector.
                return Ok(Spent::Spent);
            };
            let next = match judge(&pdb, pod, Time::now(), dry_run)? {
                Verdict::Unhealthy => return Ok(Spent::Unhealthy),
                Verdict::Spend(next) => next,
            };
            if dry_run {
                return Ok(Spent::Spent);
            }
            let Object::Generic(g, generic) = &stored.object else {
                return Ok(Spent::Spent);
            };
            let mut written = generic.with_status(&next.status);
            written.metadata.resource_version = stored.mod_revision.to_string();
            match self
                .update(Object::Generic(*g, written), Part::Status, false)
                .await
            {
                Ok(_) => return Ok(Spent::Spent),
                Err(ClusterError::Conflict { .. }) if attempt < ATTEMPTS => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                    self.barrier(false).await?;
                    let name = &pdb.metadata.name;
                    let (_, again) = self.get_local(kind, &pdb.metadata.namespace, name)?;
                    stored = again.ok_or_else(|| not_found(kind, name))?;
                }
                Err(e) => return Err(e),
            }
        }
        Err(conflict(kind, &stored.object.metadata().name))
    }

    /// Marks the pod as a disruption's target (its `DisruptionTarget` condition), then
    /// deletes it with `options`, as kube-apiserver 1.32 does; a dry run checks the
    /// preconditions and writes nothing.
    async fn mark_and_delete(
        &self,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<()> {
        let mut options = options.clone();
        for attempt in 1..=ATTEMPTS {
            self.barrier(false).await?;
            let (_, current) = self.get_local(Kind::Pod, namespace, name)?;
            let current = current.ok_or_else(|| not_found(Kind::Pod, name))?;
            let Object::Pod(pod) = &current.object else {
                return Err(not_found(Kind::Pod, name));
            };
            if !options.uid.is_empty() && pod.metadata.uid != options.uid {
                return Err(ClusterError::UidPrecondition {
                    kind: Kind::Pod,
                    name: name.to_owned(),
                    given: options.uid.clone(),
                    stored: pod.metadata.uid.clone(),
                });
            }
            if options.resource_version > 0 && options.resource_version != current.mod_revision {
                return Err(conflict(Kind::Pod, name));
            }
            if options.dry_run {
                return Ok(());
            }
            let mut marked = pod.clone();
            marked
                .status
                .get_or_insert_with(Default::default)
                .set_condition(PodCondition {
                    reason: EVICTION_REASON.to_owned(),
                    message: "Eviction API: evicting".to_owned(),
                    ..PodCondition::new(PodConditionType::DisruptionTarget, ConditionStatus::True)
                });
            marked.metadata.resource_version = current.mod_revision.to_string();
            match self.update(Object::Pod(marked), Part::Status, false).await {
                Ok((revision, _)) => {
                    if options.resource_version > 0 {
                        // The condition's write moved the pod on: the delete is pinned to it.
                        options.resource_version = revision;
                    }
                    break;
                }
                Err(ClusterError::Conflict { .. }) if attempt < ATTEMPTS => {
                    // Only a write after the read: the preconditions are checked again.
                    if options.resource_version > 0 {
                        return Err(conflict(Kind::Pod, name));
                    }
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(e) => return Err(e),
            }
        }
        self.delete(
            Kind::Pod,
            namespace,
            name,
            options.resource_version,
            options.grace,
            options.propagation,
        )
        .await
        .map(|_| ())
    }
}

/// What a budget said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spent {
    /// A disruption was spent (or no budget Skiff reads applied).
    Spent,
    /// The pod is unhealthy and goes without spending one.
    Unhealthy,
}

/// A stored budget, read as its typed view; `None` for one that does not read.
fn read_budget(stored: &Stored) -> Option<PodDisruptionBudget> {
    match &stored.object {
        Object::Generic(_, g) => g.typed().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use skiff_proto::api::PodPhase;
    use skiff_proto::api::policy::{
        ALWAYS_ALLOW, DISRUPTION_ALLOWED, INSUFFICIENT_PODS, PodDisruptionBudgetStatus,
    };

    use crate::cluster::testing::TestApi;

    fn budget(allowed: i32, current: i32, desired: i32) -> PodDisruptionBudget {
        let mut pdb = PodDisruptionBudget::default();
        pdb.metadata.name = "web".into();
        pdb.metadata.generation = Some(1);
        pdb.status = PodDisruptionBudgetStatus {
            observed_generation: 1,
            disruptions_allowed: allowed,
            current_healthy: current,
            desired_healthy: desired,
            expected_pods: current,
            ..PodDisruptionBudgetStatus::default()
        };
        pdb
    }

    fn running(name: &str, ready: bool) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = name.into();
        let status = pod.status.get_or_insert_with(Default::default);
        status.phase = Some(PodPhase::Running);
        status.set_condition(PodCondition::new(PodConditionType::Ready, ready.into()));
        pod
    }

    const NOW: i64 = 1_000_000;

    fn spent(v: Verdict) -> PodDisruptionBudget {
        match v {
            Verdict::Spend(next) => *next,
            Verdict::Unhealthy => panic!("expected a disruption spent"),
        }
    }

    /// A ready pod spends a disruption: one fewer allowed, the pod named with the time (not
    /// in a dry run), the condition False once none is left; with none left, 429 with the
    /// budget's figures; a budget not yet worked out for its generation, 429 too.
    #[test]
    fn a_ready_pod_spends_a_disruption() {
        let now = Time::from_unix(NOW).unwrap();
        let next = spent(judge(&budget(2, 3, 1), &running("a", true), now, false).unwrap());
        assert_eq!(next.status.disruptions_allowed, 1);
        assert_eq!(next.status.disrupted_pods.get("a"), Some(&now));
        assert!(
            next.status.condition(DISRUPTION_ALLOWED).is_none(),
            "still allowed"
        );
        let next = spent(judge(&budget(1, 3, 2), &running("a", true), now, false).unwrap());
        let c = next
            .status
            .condition(DISRUPTION_ALLOWED)
            .expect("condition");
        assert_eq!(
            (next.status.disruptions_allowed, c.reason.as_str()),
            (0, INSUFFICIENT_PODS)
        );
        let dry = spent(judge(&budget(1, 3, 2), &running("a", true), now, true).unwrap());
        assert!(dry.status.disrupted_pods.is_empty());

        let e = judge(&budget(0, 2, 2), &running("a", true), now, false).unwrap_err();
        assert!(
            matches!(
                e,
                ClusterError::BudgetExhausted {
                    desired_healthy: 2,
                    current_healthy: 2,
                    ..
                }
            ),
            "{e:?}"
        );
        let mut behind = budget(1, 3, 2);
        behind.metadata.generation = Some(2);
        let e = judge(&behind, &running("a", true), now, false).unwrap_err();
        assert!(matches!(e, ClusterError::BudgetUnobserved { .. }), "{e:?}");
        let e = judge(&budget(-1, 3, 2), &running("a", true), now, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "poddisruptionbudgets.policy \"web\" is forbidden: pdb disruptions allowed is negative"
        );
    }

    /// A pod that is not ready goes without spending a disruption when the budget always
    /// allows it, or (the default) while the budget's healthy pods are enough; otherwise it
    /// is judged as a ready one.
    #[test]
    fn an_unready_pod_by_the_policy() {
        let now = Time::from_unix(NOW).unwrap();
        let unready = running("a", false);
        assert_eq!(
            judge(&budget(0, 2, 2), &unready, now, false).unwrap(),
            Verdict::Unhealthy
        );
        assert!(judge(&budget(0, 1, 2), &unready, now, false).is_err());
        assert!(
            judge(&budget(0, 0, 0), &unready, now, false).is_err(),
            "a budget that wants nothing healthy is no healthy budget"
        );
        let mut always = budget(0, 1, 2);
        always.spec.unhealthy_pod_eviction_policy = Some(ALWAYS_ALLOW.into());
        assert_eq!(
            judge(&always, &unready, now, false).unwrap(),
            Verdict::Unhealthy
        );
    }

    async fn set_pod(t: &TestApi, name: &str, phase: PodPhase, ready: bool) {
        let (_, stored) = t.api.get_local(Kind::Pod, "team", name).unwrap();
        let Some(Stored {
            object: Object::Pod(mut pod),
            ..
        }) = stored
        else {
            panic!("no pod {name}")
        };
        let status = pod.status.get_or_insert_with(Default::default);
        status.phase = Some(phase);
        status.set_condition(PodCondition::new(PodConditionType::Ready, ready.into()));
        t.api
            .update(Object::Pod(pod), Part::Status, false)
            .await
            .expect("pod status");
    }

    fn stored_budget(t: &TestApi, name: &str) -> (Object, PodDisruptionBudget) {
        let (_, stored) = t
            .api
            .get_local(pod_disruption_budget_kind(), "team", name)
            .unwrap();
        let stored = stored.expect("a budget");
        let pdb = read_budget(&stored).expect("reads");
        (stored.object, pdb)
    }

    /// The disruption controller's part, played by the test: the budget's figures.
    async fn set_budget(t: &TestApi, name: &str, allowed: i32, current: i32, desired: i32) {
        let (object, pdb) = stored_budget(t, name);
        let Object::Generic(g, o) = object else {
            unreachable!("a declared kind")
        };
        let status = PodDisruptionBudgetStatus {
            observed_generation: pdb.metadata.generation.unwrap_or(0),
            disruptions_allowed: allowed,
            current_healthy: current,
            desired_healthy: desired,
            expected_pods: current,
            ..pdb.status
        };
        t.api
            .update(
                Object::Generic(g, o.with_status(&status)),
                Part::Status,
                false,
            )
            .await
            .expect("budget status");
    }

    fn pod_of(t: &TestApi, name: &str) -> Option<Pod> {
        match t.api.get_local(Kind::Pod, "team", name).unwrap().1 {
            Some(Stored {
                object: Object::Pod(p),
                ..
            }) => Some(p),
            _ => None,
        }
    }

    /// Through the cluster API: an eviction spends the budget (compare-and-swap on its
    /// status) and marks and deletes the pod; the next is refused with 429 and changes
    /// nothing; a dry run writes nothing; a pending pod goes whatever the budget says; a
    /// pod two budgets select is refused; a budget whose spec moved on refuses until the
    /// controller catches up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn evictions_spend_the_budget() {
        let t = TestApi::start(|_| crate::access::AccessConfig::default()).await;
        t.create(Kind::Namespace, json!({"metadata": {"name": "team"}}))
            .await;
        for name in ["web-1", "web-2", "web-3", "web-4"] {
            t.create(
                Kind::Pod,
                json!({"metadata": {"name": name, "namespace": "team", "labels": {"app": "web"}},
                       "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}}),
            )
            .await;
        }
        for name in ["web-1", "web-2", "web-3"] {
            set_pod(&t, name, PodPhase::Running, true).await;
        }
        t.create(
            pod_disruption_budget_kind(),
            json!({"metadata": {"name": "web", "namespace": "team"},
                   "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}),
        )
        .await;
        set_budget(&t, "web", 1, 3, 2).await;
        let evict = |name: &'static str, dry_run: bool| {
            let options = DeleteOptions {
                dry_run,
                ..DeleteOptions::default()
            };
            let api = t.api.clone();
            async move { api.evict("team", name, &options).await }
        };

        evict("web-1", true).await.expect("a dry run");
        assert_eq!(stored_budget(&t, "web").1.status.disruptions_allowed, 1);
        let untouched = pod_of(&t, "web-1").expect("still there");
        assert!(untouched.metadata.deletion_timestamp.is_none());
        assert!(
            untouched
                .condition(&PodConditionType::DisruptionTarget)
                .is_none()
        );

        evict("web-1", false).await.expect("evicted");
        let (_, pdb) = stored_budget(&t, "web");
        assert_eq!(pdb.status.disruptions_allowed, 0);
        assert!(pdb.status.disrupted_pods.contains_key("web-1"));
        let evicted = pod_of(&t, "web-1").expect("going gracefully");
        assert!(evicted.metadata.deletion_timestamp.is_some());
        let c = evicted
            .condition(&PodConditionType::DisruptionTarget)
            .expect("marked");
        assert_eq!(
            (c.status, c.reason.as_str(), c.message.as_str()),
            (
                ConditionStatus::True,
                EVICTION_REASON,
                "Eviction API: evicting"
            )
        );

        let e = evict("web-2", false).await.unwrap_err();
        assert!(
            matches!(
                &e,
                ClusterError::BudgetExhausted { budget, desired_healthy: 2, current_healthy: 3 }
                    if budget == "web"
            ),
            "{e:?}"
        );
        let kept = pod_of(&t, "web-2").expect("kept");
        assert!(kept.metadata.deletion_timestamp.is_none());
        assert!(
            kept.condition(&PodConditionType::DisruptionTarget)
                .is_none()
        );

        // Pending: not running yet, so no disruption; unbound pods go at once.
        evict("web-4", false).await.expect("a pending pod goes");
        assert!(
            pod_of(&t, "web-4").is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
            "web-4 deleted"
        );

        // Not ready, with the budget healthy enough (3 ≥ 2): goes without spending.
        set_pod(&t, "web-3", PodPhase::Running, false).await;
        evict("web-3", false).await.expect("an unhealthy pod goes");
        assert_eq!(stored_budget(&t, "web").1.status.disruptions_allowed, 0);

        // A spec the controller has not seen yet.
        let (object, _) = stored_budget(&t, "web");
        let Object::Generic(g, mut o) = object else {
            unreachable!("a declared kind")
        };
        o.body["spec"]["minAvailable"] = json!(1);
        t.api
            .update(Object::Generic(g, o), Part::Main, false)
            .await
            .expect("spec");
        set_pod(&t, "web-2", PodPhase::Running, true).await;
        let e = evict("web-2", false).await.unwrap_err();
        assert!(matches!(e, ClusterError::BudgetUnobserved { .. }), "{e:?}");

        t.create(
            pod_disruption_budget_kind(),
            json!({"metadata": {"name": "all", "namespace": "team"},
                   "spec": {"maxUnavailable": 1, "selector": {}}}),
        )
        .await;
        let e = evict("web-2", false).await.unwrap_err();
        assert!(matches!(e, ClusterError::MultipleBudgets { .. }), "{e:?}");

        let e = api_uid_mismatch(&t).await;
        assert!(matches!(e, ClusterError::UidPrecondition { .. }), "{e:?}");
        t.stop().await;
    }

    /// An eviction whose `preconditions.uid` names another pod is refused before anything
    /// is written (here, a pod no budget covers).
    async fn api_uid_mismatch(t: &TestApi) -> ClusterError {
        t.create(
            Kind::Pod,
            json!({"metadata": {"name": "lone", "namespace": "team"},
                   "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        )
        .await;
        let options = DeleteOptions {
            uid: "someone-else".into(),
            ..DeleteOptions::default()
        };
        let e = t.api.evict("team", "lone", &options).await.unwrap_err();
        assert!(pod_of(t, "lone").is_some());
        e
    }
}
