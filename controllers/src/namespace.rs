//! The namespace controller: a deleted namespace's contents are deleted, then the namespace
//! goes, as kube-controller-manager's `namespace` controller does it.
//!
//! ```text
//!  kubectl delete namespace team
//!    └► API server: deletionTimestamp, phase Terminating; creates in it refused from now on
//!  namespace event (deleting) ──────┐
//!  a pod of a deleting namespace ───┼──► sync: every namespaced kind (custom ones too):
//!    goes (the last may be the one  │      list; delete what is not yet deleting
//!    holding it)                    │      (graceful for bound pods, as a user's delete)
//!  look again after a pause ────────┘    ──► status.conditions: what remains, which
//!                                            finalizers hold it, what failed
//!                                        ──► nothing left: `finalize` without `kubernetes`
//!                                            ──► the API server removes the namespace
//! ```
//!
//! Objects held by finalizers stay until whoever owns the finalizer lets them go; the
//! namespace waits for them and says so in `NamespaceFinalizersRemaining`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use skiff_proto::api::meta::Time;
use skiff_proto::api::{
    ConditionStatus, DeletionPropagation, FINALIZER_KUBERNETES, Kind, Namespace,
    NamespaceCondition, NamespaceConditionType, NamespacePhase, Object,
};
use skiff_proto::client::{ClientError, Code, Event, ListParams};

use crate::core::{Context, Controller, Requeue, gone_is_none};
use crate::discovery;
use crate::queue::WorkQueue;

/// The controller's name in logs and metrics.
pub const NAME: &str = "namespace";
/// Deletes in flight at once per namespace.
const CONCURRENT_DELETES: usize = 32;
/// How soon a namespace whose contents are still going is looked at again when no pod event
/// wakes it sooner (objects held by others' finalizers, pods stopping).
const RECHECK: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct Namespaces {
    ctx: Arc<Context>,
    queue: WorkQueue,
}

/// What one pass over a namespace's contents found.
#[derive(Debug, Default, PartialEq)]
pub struct Tally {
    /// Objects left, per resource (`pods.`, `widgets.example.com`, as Kubernetes names them).
    pub remaining: BTreeMap<String, usize>,
    /// Finalizers on the objects left, and on how many.
    pub finalizers: BTreeMap<String, usize>,
    /// What could not be listed or deleted.
    pub failures: Vec<String>,
    /// Whether the custom kinds could not be found.
    pub discovery_failed: Option<String>,
}

impl Tally {
    fn count(&mut self, kind: Kind, object: &Object) {
        let resource = format!("{}.{}", kind.plural(), kind.group());
        *self.remaining.entry(resource).or_default() += 1;
        for f in &object.metadata().finalizers {
            *self.finalizers.entry(f.clone()).or_default() += 1;
        }
    }

    /// Whether the namespace is empty and nothing failed: it may go.
    pub fn done(&self) -> bool {
        self.remaining.is_empty() && self.failures.is_empty()
    }

    /// The namespace's conditions, worded as kube-controller-manager words them.
    pub fn conditions(&self) -> Vec<NamespaceCondition> {
        use NamespaceConditionType as T;
        let condition = |type_, failing: bool, bad: (&str, String), good: (&str, &str)| {
            let (reason, message) = if failing {
                bad
            } else {
                (good.0, good.1.to_owned())
            };
            NamespaceCondition {
                type_,
                status: ConditionStatus::from(failing),
                last_transition_time: Some(Time::now()),
                reason: reason.to_owned(),
                message,
                other: Default::default(),
            }
        };
        let listed = |m: &BTreeMap<String, usize>, what: &str| {
            m.iter()
                .map(|(k, n)| format!("{k} {what} {n} resource instances"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        vec![
            condition(
                T::NamespaceDeletionDiscoveryFailure,
                self.discovery_failed.is_some(),
                (
                    "DiscoveryFailed",
                    format!(
                        "Discovery failed for some groups: {}",
                        self.discovery_failed.as_deref().unwrap_or_default()
                    ),
                ),
                (
                    "ResourcesDiscovered",
                    "All resources successfully discovered",
                ),
            ),
            condition(
                T::NamespaceDeletionGroupVersionParsingFailure,
                false,
                ("GroupVersionParsingFailed", String::new()),
                (
                    "ParsedGroupVersions",
                    "All legacy kube types successfully parsed",
                ),
            ),
            condition(
                T::NamespaceDeletionContentFailure,
                !self.failures.is_empty(),
                (
                    "ContentDeletionFailed",
                    format!(
                        "Failed to delete all resource types, {} remaining: {}",
                        self.failures.len(),
                        self.failures.join(", ")
                    ),
                ),
                (
                    "ContentDeleted",
                    "All content successfully deleted, may be waiting on finalization",
                ),
            ),
            condition(
                T::NamespaceContentRemaining,
                !self.remaining.is_empty(),
                (
                    "SomeResourcesRemain",
                    format!(
                        "Some resources are remaining: {}",
                        listed(&self.remaining, "has")
                    ),
                ),
                ("ContentRemoved", "All content successfully removed"),
            ),
            condition(
                T::NamespaceFinalizersRemaining,
                !self.finalizers.is_empty(),
                (
                    "SomeFinalizersRemain",
                    format!(
                        "Some content in the namespace has finalizers remaining: {}",
                        listed(&self.finalizers, "in")
                    ),
                ),
                (
                    "ContentHasNoFinalizers",
                    "All content-preserving finalizers finished",
                ),
            ),
        ]
    }
}

/// `conditions` over the stored ones: a condition whose status, reason and message are the
/// same keeps its transition time. Returns whether anything changed.
fn merge_conditions(
    stored: &mut Vec<NamespaceCondition>,
    conditions: Vec<NamespaceCondition>,
) -> bool {
    let mut changed = false;
    for mut c in conditions {
        match stored.iter_mut().find(|s| s.type_ == c.type_) {
            Some(s) if s.status == c.status && s.reason == c.reason && s.message == c.message => {}
            Some(s) => {
                if s.status == c.status {
                    c.last_transition_time = s.last_transition_time;
                }
                *s = c;
                changed = true;
            }
            None => {
                stored.push(c);
                changed = true;
            }
        }
    }
    changed
}

impl Namespaces {
    pub fn new(ctx: Arc<Context>) -> Self {
        Namespaces {
            ctx,
            queue: WorkQueue::new(),
        }
    }

    pub fn on_namespace(&self, event: &Event) {
        if let Event::Added(o) | Event::Modified(o) = event
            && o.metadata().deletion_timestamp.is_some()
        {
            self.queue.add(o.metadata().name.clone());
        }
    }

    /// A pod of a deleting namespace went: it may have been the last thing holding it.
    pub fn on_pod(&self, event: &Event) {
        if let Event::Deleted(o) = event {
            let ns = &o.metadata().namespace;
            if !self.ctx.namespace_active(ns) && self.ctx.namespaces.get("", ns).is_some() {
                self.queue.add(ns.clone());
            }
        }
    }

    /// Deletes what namespace `name` holds; returns what is left.
    async fn delete_contents(&self, name: &str) -> Tally {
        let mut tally = Tally::default();
        if let Err(e) = discovery::refresh_custom_kinds(&self.ctx.client).await {
            tally.discovery_failed = Some(e.to_string());
        }
        for kind in discovery::namespaced_kinds() {
            let params = ListParams::default().namespace(name);
            let objects = match self.ctx.client.list(kind, &params).await {
                Ok((objects, _)) => objects,
                // A custom kind whose CRD went since it was looked up.
                Err(e) if matches!(e.code(), Some(Code::InvalidArgument)) && is_custom(kind) => {
                    continue;
                }
                Err(e) => {
                    tally.failures.push(format!("{}: {e}", kind.plural()));
                    continue;
                }
            };
            let deletes = objects.into_iter().map(|o| async move {
                if o.metadata().deletion_timestamp.is_some() {
                    return (o, Ok(None));
                }
                let m = o.metadata();
                // In the background, as kube-controller-manager's namespace deleter: a Job's
                // pods go with it rather than by the namespace's next pass.
                let r = self
                    .ctx
                    .client
                    .delete_propagating(kind, name, &m.name, 0, DeletionPropagation::Background)
                    .await;
                (o, gone_is_none(r))
            });
            let mut results = futures::stream::iter(deletes).buffer_unordered(CONCURRENT_DELETES);
            while let Some((object, result)) = results.next().await {
                match result {
                    // Already going: it stays until its grace period or finalizers end.
                    Ok(None) if object.metadata().deletion_timestamp.is_some() => {
                        tally.count(kind, &object);
                    }
                    // Gone (by this delete or another).
                    Ok(None) => {}
                    // Deleted, and still there: a pod stopping, or finalizers holding it.
                    Ok(Some(after)) if after.metadata().deletion_timestamp.is_some() => {
                        tally.count(kind, &after);
                    }
                    Ok(Some(_)) => {}
                    Err(e) => {
                        tally.count(kind, &object);
                        tally.failures.push(format!(
                            "{} {}: {e}",
                            kind.plural(),
                            object.metadata().name
                        ));
                    }
                }
            }
        }
        tally
    }

    /// Writes the conditions of `tally` into the namespace's status, where they differ.
    async fn report(
        &self,
        ns: &Namespace,
        tally: &Tally,
    ) -> Result<Option<Namespace>, ClientError> {
        let mut next = ns.clone();
        let status = next.status.get_or_insert_with(Default::default);
        let phase_changed = status.phase != Some(NamespacePhase::Terminating);
        status.phase = Some(NamespacePhase::Terminating);
        if !merge_conditions(&mut status.conditions, tally.conditions()) && !phase_changed {
            return Ok(Some(next));
        }
        let written = gone_is_none(
            self.ctx
                .client
                .update_status(&Object::Namespace(next))
                .await,
        )?;
        Ok(written.and_then(|o| match o {
            Object::Namespace(n) => Some(n),
            _ => None,
        }))
    }
}

fn is_custom(kind: Kind) -> bool {
    matches!(kind, Kind::Generic(g) if g.custom_index().is_some())
}

impl Controller for Namespaces {
    const NAME: &'static str = NAME;

    fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    async fn sync(&self, name: &str) -> Result<Requeue, ClientError> {
        let Some(Object::Namespace(ns)) = self.ctx.client.get(Kind::Namespace, "", name).await?
        else {
            return Ok(None);
        };
        if ns.metadata.deletion_timestamp.is_none()
            || !ns.finalizers().iter().any(|f| f == FINALIZER_KUBERNETES)
        {
            return Ok(None);
        }
        let tally = self.delete_contents(name).await;
        let Some(mut ns) = self.report(&ns, &tally).await? else {
            return Ok(None);
        };
        if !tally.done() {
            tracing::debug!(namespace = name, remaining = ?tally.remaining, failures = ?tally.failures, "namespace still holds objects");
            return Ok(Some(RECHECK));
        }
        // Empty: the namespace's own finalizer goes, and with it (unless another holds it)
        // the namespace.
        if let Some(spec) = ns.spec.as_mut() {
            spec.finalizers.retain(|f| f != FINALIZER_KUBERNETES);
        }
        gone_is_none(
            self.ctx
                .client
                .update_finalize(&Object::Namespace(ns))
                .await,
        )?;
        tracing::info!(namespace = name, "namespace emptied and finalized");
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(conditions: &[NamespaceCondition]) -> Vec<(String, String, String)> {
        conditions
            .iter()
            .map(|c| {
                (
                    c.type_.as_str().to_owned(),
                    c.status.as_str().to_owned(),
                    c.message.clone(),
                )
            })
            .collect()
    }

    /// What remains is reported per resource and per finalizer, in kube-controller-manager's
    /// words; an empty namespace reports every condition False.
    #[test]
    fn conditions_say_what_remains_and_what_holds_it() {
        let pod = Object::from_value(
            Kind::Pod,
            serde_json::json!({"metadata": {"name": "a", "namespace": "t", "finalizers": ["example.com/keep"]}}),
        )
        .unwrap();
        let mut tally = Tally::default();
        tally.count(Kind::Pod, &pod);
        tally.count(Kind::Pod, &pod);
        assert!(!tally.done());
        let c = texts(&tally.conditions());
        assert_eq!(
            c[3],
            (
                "NamespaceContentRemaining".into(),
                "True".into(),
                "Some resources are remaining: pods. has 2 resource instances".into()
            )
        );
        assert_eq!(
            c[4],
            (
                "NamespaceFinalizersRemaining".into(),
                "True".into(),
                "Some content in the namespace has finalizers remaining: example.com/keep in 2 resource instances".into()
            )
        );
        let empty = Tally::default();
        assert!(empty.done());
        assert!(
            empty
                .conditions()
                .iter()
                .all(|c| c.status == ConditionStatus::False)
        );
    }

    /// A condition that says the same keeps its transition time and is not a change; one
    /// that says something new is.
    #[test]
    fn unchanged_conditions_are_not_rewritten() {
        let mut stored = Tally::default().conditions();
        for c in &mut stored {
            c.last_transition_time = Time::from_unix(1);
        }
        assert!(!merge_conditions(
            &mut stored,
            Tally::default().conditions()
        ));
        assert_eq!(stored[0].last_transition_time, Time::from_unix(1));
        let mut tally = Tally::default();
        tally.failures.push("pods: refused".into());
        assert!(merge_conditions(&mut stored, tally.conditions()));
        assert_eq!(stored[2].status, ConditionStatus::True);
    }
}
