//! The ResourceQuota controller: each quota's `status.hard` (its spec's limits) and
//! `status.used` (what the objects of its namespace count toward each of them), as
//! kube-controller-manager's `resourcequota` controller keeps them, so `kubectl describe quota`
//! shows what is used. The API server refuses what would exceed a quota by the same rules
//! ([`skiff_proto::api::quota`]); this controller only reports.
//!
//! ```text
//!  a quota changes ─────────────────────────────┐
//!  a pod or Service changes (the caches) ───────┤
//!  an object of a kind a quota counts changes ──┼──► the namespace's quotas, after a pause that
//!    (a watch per such kind, started when a     │    gathers a burst ──► sync: count each kind
//!     quota first names it)                     │    the quota names, in its scope
//!  every quota, every [`RESYNC`] ───────────────┘    ──► status written where it differs
//! ```
//!
//! Pods and Services are counted from the shared caches; any other kind (ConfigMaps,
//! `count/jobs.batch`, PersistentVolumeClaims, custom resources) is listed in the quota's
//! namespace when a quota that counts it is synced.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use skiff_proto::api::quota::{self, PodScope};
use skiff_proto::api::{Kind, Object, ResourceList, ResourceQuota};
use skiff_proto::backoff::Backoff;
use skiff_proto::client::{ClientError, Event, ListParams};
use skiff_proto::quantity::Quantity;
use tokio::sync::Notify;

use crate::core::{Context, Controller, Requeue, gone_is_none, key_of, split_key};
use crate::queue::WorkQueue;

/// The controller's name in logs and metrics.
pub const NAME: &str = "resourcequota";
/// How often each quota is counted again whatever was seen
/// (kube-controller-manager's `--resource-quota-sync-period`).
pub const RESYNC: Duration = Duration::from_secs(300);
/// How long a change waits for the rest of its burst before its quotas are counted: a
/// ReplicaSet's burst of pods is one count, not one per pod.
const GATHER: Duration = Duration::from_millis(500);

#[derive(Debug)]
pub struct ResourceQuotas {
    ctx: Arc<Context>,
    queue: WorkQueue,
    /// Rung when a quota changes: the kinds to watch may have too.
    quotas_changed: Notify,
    /// The kinds watched for the quotas that count them.
    watched: Mutex<HashSet<Kind>>,
    /// Quotas whose burst is gathering: queued once it has.
    gathering: Arc<Mutex<HashSet<String>>>,
}

/// The kinds whose objects count toward `quota`.
fn kinds_counted(quota: &ResourceQuota) -> BTreeSet<Kind> {
    quota
        .spec
        .hard
        .keys()
        .filter_map(|r| quota::kind_counted(r))
        .collect()
}

/// `status.used` of `quota`, from the objects of each kind it counts (`objects` gives them, in
/// the quota's namespace): every resource it limits, 0 where nothing counts toward it.
pub fn used_by(quota: &ResourceQuota, objects: &[(Kind, Vec<Arc<Object>>)]) -> ResourceList {
    let mut used: ResourceList = quota
        .spec
        .hard
        .keys()
        .map(|r| (r.clone(), Quantity::ZERO))
        .collect();
    for (kind, objects) in objects {
        let resources: Vec<&String> = quota
            .spec
            .hard
            .keys()
            .filter(|r| quota::kind_counted(r) == Some(*kind))
            .collect();
        for o in objects {
            let scope = match &**o {
                Object::Pod(p) => Some(PodScope::of(p)),
                _ => None,
            };
            if !quota::in_scope(quota, scope.as_ref()) {
                continue;
            }
            let usage = quota::usage(o);
            for r in &resources {
                if let (Some(q), Some(sum)) = (usage.get(*r), used.get_mut(*r)) {
                    *sum = sum.checked_add(q).unwrap_or(*sum);
                }
            }
        }
    }
    used
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ResourceQuotas {
    pub fn new(ctx: Arc<Context>) -> Self {
        ResourceQuotas {
            ctx,
            queue: WorkQueue::new(),
            quotas_changed: Notify::new(),
            watched: Mutex::default(),
            gathering: Arc::default(),
        }
    }

    pub fn on_quota(&self, event: &Event) {
        if let Event::Added(o) | Event::Modified(o) | Event::Deleted(o) = event {
            self.queue.add(key_of(o.metadata()));
            self.quotas_changed.notify_one();
        }
    }

    /// An object of `kind` changed: the quotas of its namespace that count its kind, once the
    /// burst it may be part of has gathered.
    pub fn on_counted(&self, kind: Kind, event: &Event) {
        let (Event::Added(o) | Event::Modified(o) | Event::Deleted(o)) = event else {
            return;
        };
        self.requeue(kind, Some(&o.metadata().namespace), true);
    }

    /// Queues the quotas (of `namespace`, or everywhere) that count `kind`: after [`GATHER`]
    /// when `gather`, else now.
    fn requeue(&self, kind: Kind, namespace: Option<&str>, gather: bool) {
        for q in self.ctx.quotas.list(namespace) {
            if let Object::ResourceQuota(quota) = &*q
                && kinds_counted(quota).contains(&kind)
            {
                let key = key_of(&quota.metadata);
                if gather {
                    self.gather(key);
                } else {
                    self.queue.add(key);
                }
            }
        }
    }

    /// Queues `key` once [`GATHER`] has passed, however many changes ask for it meanwhile.
    fn gather(&self, key: String) {
        let gathering = self.gathering.clone();
        if !lock(&gathering).insert(key.clone()) {
            return;
        }
        let queue = self.queue.clone();
        tokio::spawn(async move {
            tokio::time::sleep(GATHER).await;
            lock(&gathering).remove(&key);
            queue.add(key);
        });
    }

    /// Watches each kind a quota counts that no cache holds, for as long as the controller
    /// runs: started as quotas first name kinds, restarted if one stops.
    pub async fn watch_counted(self: Arc<Self>) {
        let mut watchers = tokio::task::JoinSet::new();
        loop {
            let wanted: BTreeSet<Kind> = self
                .ctx
                .quotas
                .list(None)
                .iter()
                .filter_map(|q| match &**q {
                    Object::ResourceQuota(q) => Some(kinds_counted(q)),
                    _ => None,
                })
                .flatten()
                .filter(|k| !matches!(k, Kind::Pod | Kind::Service))
                .collect();
            for kind in wanted {
                if lock(&self.watched).insert(kind) {
                    watchers.spawn(self.clone().watch_kind(kind));
                }
            }
            tokio::select! {
                () = self.quotas_changed.notified() => {}
                Some(ended) = watchers.join_next() => {
                    // Only a panic ends a watcher: start it again at the next look.
                    tracing::warn!(controller = NAME, error = ?ended.err(), "a counted kind's watch ended");
                    lock(&self.watched).clear();
                    watchers.abort_all();
                }
            }
        }
    }

    /// Watches `kind` from now on, queueing the quotas of each changed object's namespace.
    /// After a break (an error, the store's compaction) everything may have changed unseen:
    /// every quota that counts the kind is queued, and the watch starts again from then.
    async fn watch_kind(self: Arc<Self>, kind: Kind) {
        let mut backoff = Backoff::for_store();
        loop {
            let params = ListParams::default().watch_after(0);
            match self.ctx.client.watch(kind, &params).await {
                Ok(stream) => {
                    let mut stream = std::pin::pin!(stream);
                    // Anything changed before the watch began went unseen.
                    self.requeue(kind, None, false);
                    backoff.reset();
                    while let Some(event) = stream.next().await {
                        match event {
                            Ok(e) => self.on_counted(kind, &e),
                            Err(e) => {
                                tracing::debug!(controller = NAME, %kind, error = %e, "watch broke");
                                break;
                            }
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(controller = NAME, %kind, error = %e, "cannot watch a counted kind");
                }
            }
            backoff.wait().await;
        }
    }

    /// The objects of `kind` in `namespace`: from a cache where one holds the kind.
    async fn objects(&self, kind: Kind, namespace: &str) -> Result<Vec<Arc<Object>>, ClientError> {
        Ok(match kind {
            Kind::Pod => self.ctx.pods.list(Some(namespace)),
            Kind::Service => self.ctx.services.list(Some(namespace)),
            _ => {
                let params = ListParams::default().namespace(namespace);
                let (items, _) = self.ctx.client.list(kind, &params).await?;
                items.into_iter().map(Arc::new).collect()
            }
        })
    }
}

impl Controller for ResourceQuotas {
    const NAME: &'static str = NAME;

    fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    async fn sync(&self, key: &str) -> Result<Requeue, ClientError> {
        let (namespace, name) = split_key(key);
        let Some(object) = self.ctx.quotas.get(namespace, name) else {
            return Ok(None);
        };
        let Object::ResourceQuota(q) = &*object else {
            return Ok(None);
        };
        let mut objects = Vec::new();
        for kind in kinds_counted(q) {
            objects.push((kind, self.objects(kind, namespace).await?));
        }
        let used = used_by(q, &objects);
        let status = q.status.clone().unwrap_or_default();
        if status.hard != q.spec.hard || status.used != used {
            let mut next = q.clone();
            let s = next.status.get_or_insert_default();
            s.hard = q.spec.hard.clone();
            s.used = used;
            gone_is_none(
                self.ctx
                    .client
                    .update_status(&Object::ResourceQuota(next))
                    .await,
            )?;
        }
        Ok(Some(RESYNC))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(kind: Kind, value: serde_json::Value) -> Arc<Object> {
        Arc::new(Object::from_value(kind, value).expect("object"))
    }

    fn pod(name: &str, cpu: &str, phase: &str) -> Arc<Object> {
        object(
            Kind::Pod,
            json!({"metadata": {"name": name, "namespace": "team"},
                   "spec": {"containers": [{"name": "c", "image": "i",
                            "resources": {"requests": {"cpu": cpu}}}]},
                   "status": {"phase": phase}}),
        )
    }

    fn quota(spec: serde_json::Value) -> ResourceQuota {
        serde_json::from_value(
            json!({"metadata": {"name": "q", "namespace": "team"}, "spec": spec}),
        )
        .expect("quota")
    }

    fn used(q: &ResourceQuota, objects: &[(Kind, Vec<Arc<Object>>)]) -> Vec<(String, String)> {
        used_by(q, objects)
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect()
    }

    #[test]
    fn used_counts_every_limit_and_only_what_counts() {
        let config_map = Kind::from_name("ConfigMap").expect("declared");
        let q = quota(
            json!({"hard": {"pods": "10", "requests.cpu": "2", "configmaps": "5",
                                      "count/jobs.batch": "1", "services.nodeports": "0"}}),
        );
        let kinds = kinds_counted(&q);
        assert!(kinds.contains(&Kind::Pod) && kinds.contains(&config_map));
        let pods = vec![
            pod("a", "500m", "Running"),
            pod("b", "250m", "Pending"),
            pod("done", "1", "Succeeded"),
        ];
        let maps = vec![object(
            config_map,
            json!({"metadata": {"name": "m", "namespace": "team"}}),
        )];
        assert_eq!(
            used(&q, &[(Kind::Pod, pods), (config_map, maps)]),
            [
                ("configmaps".to_owned(), "1".to_owned()),
                ("count/jobs.batch".to_owned(), "0".to_owned()),
                ("pods".to_owned(), "2".to_owned()),
                ("requests.cpu".to_owned(), "750m".to_owned()),
                ("services.nodeports".to_owned(), "0".to_owned()),
            ],
            "a finished pod uses nothing; a limit nothing counts toward shows 0"
        );
    }

    #[test]
    fn a_scoped_quota_counts_the_pods_in_its_scope() {
        let q = quota(json!({"hard": {"pods": "10"}, "scopes": ["BestEffort"]}));
        let best_effort = object(
            Kind::Pod,
            json!({"metadata": {"name": "be", "namespace": "team"},
                   "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        );
        let pods = vec![best_effort, pod("burstable", "100m", "Running")];
        assert_eq!(
            used(&q, &[(Kind::Pod, pods)]),
            [("pods".to_owned(), "1".to_owned())]
        );
    }
}
