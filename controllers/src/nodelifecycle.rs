//! The node lifecycle controller: a node whose agent stops renewing its heartbeat becomes
//! `Ready=Unknown` after the grace period and is tainted `unreachable` (`not-ready` when its
//! agent reports NotReady), and the pods there are evicted once their toleration of the
//! taint runs out; a node that comes back is untainted.
//!
//! ```text
//!  heartbeat seen ──► (grace) ──► Ready=Unknown ──► taints ─┬─ NoSchedule: at once
//!  (by this process's clock:                                └─ NoExecute: at most
//!   the agent's clock is not trusted)                          --node-eviction-rate nodes/s
//!                                                              per zone
//!  NoExecute taint on a node ──► each pod there: not tolerated → evicted now;
//!                                tolerated for N s → evicted N s after the taint was added;
//!                                tolerated forever → stays
//! ```
//!
//! An evicted pod is deleted as any other (gracefully); its ReplicaSet sees one pod fewer and
//! creates a replacement, which the scheduler places on a node without the taint. When no
//! node at all is ready, nothing is tainted for eviction: that looks more like this process
//! being cut off than like every machine dying at once, and evicting everything would only
//! make it worse.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use skiff_proto::api::node::{TAINT_NOT_READY, TAINT_UNREACHABLE};
use skiff_proto::api::{
    ConditionStatus, Kind, Node, NodeConditionType, Object, Pod, Taint, TaintEffect, Time,
};
use skiff_proto::client::{ClientError, Code, Event};
use skiff_proto::recorder::{EventRecorder, reference};

use crate::core::{Context, Controller, Requeue};
use crate::queue::WorkQueue;

/// The controller's name in logs and metrics.
pub const NAME: &str = "nodelifecycle";
/// The label that names a node's zone; evictions are rate-limited per zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The node lifecycle controller.
#[derive(Debug)]
pub struct NodeLifecycle {
    ctx: Arc<Context>,
    queue: WorkQueue,
    /// Events from `node-controller`, as Kubernetes names their source.
    events: EventRecorder,
    grace: Duration,
    /// NoExecute taints added per second per zone; 0 adds none.
    eviction_rate: f64,
    // Never held across an await.
    heard: Mutex<HashMap<String, Heard>>,
    zones: Mutex<HashMap<String, Bucket>>,
}

/// The last heartbeat seen of a node, and when this process saw it change.
#[derive(Debug, Clone, Copy)]
struct Heard {
    beat: Option<Time>,
    at: Instant,
}

/// A token bucket of one token: one NoExecute taint, then one per `1/rate` seconds.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

fn heartbeat(node: &Node) -> Option<Time> {
    node.condition(&NodeConditionType::Ready)
        .and_then(|c| c.last_heartbeat_time)
}

/// The condition taints a node's Ready status calls for: none when Ready (or never
/// reported: a node made by hand is judged by its conditions alone), `not-ready` when
/// False, `unreachable` when Unknown.
pub fn wanted_taints(ready: Option<ConditionStatus>) -> Vec<(&'static str, TaintEffect)> {
    let key = match ready {
        None | Some(ConditionStatus::True) => return Vec::new(),
        Some(ConditionStatus::False) => TAINT_NOT_READY,
        Some(ConditionStatus::Unknown) => TAINT_UNREACHABLE,
    };
    vec![
        (key, TaintEffect::NoSchedule),
        (key, TaintEffect::NoExecute),
    ]
}

/// When (unix seconds) `pod` is to be evicted from a node with the NoExecute `taints`, as of
/// `now`: `None` when it tolerates them all for ever. A taint it does not tolerate evicts it
/// now; one it tolerates for N seconds, N seconds after the taint was added.
pub fn eviction_due(pod: &Pod, taints: &[&Taint], now: i64) -> Option<i64> {
    taints
        .iter()
        .filter_map(|taint| {
            let matching: Vec<Option<i64>> = pod
                .spec
                .tolerations
                .iter()
                .filter(|t| t.tolerates(taint))
                .map(|t| t.toleration_seconds)
                .collect();
            if matching.is_empty() {
                return Some(now);
            }
            if matching.iter().any(Option::is_none) {
                return None; // tolerated for ever
            }
            let seconds = matching.into_iter().flatten().min().unwrap_or(0).max(0);
            let added = taint.time_added.map_or(now, |t| t.unix());
            Some(added + seconds)
        })
        .min()
}

impl NodeLifecycle {
    pub fn new(ctx: Arc<Context>, grace: Duration, eviction_rate: f64) -> Self {
        NodeLifecycle {
            events: ctx.events.with_component("node-controller"),
            ctx,
            queue: WorkQueue::new(),
            grace,
            eviction_rate,
            heard: Mutex::new(HashMap::new()),
            zones: Mutex::new(HashMap::new()),
        }
    }

    fn heard(&self) -> std::sync::MutexGuard<'_, HashMap<String, Heard>> {
        self.heard
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A node changed: note when its heartbeat moved, and look at it.
    pub fn on_node(&self, event: &Event) {
        match event {
            Event::Added(Object::Node(n)) | Event::Modified(Object::Node(n)) => {
                let beat = heartbeat(n);
                let now = Instant::now();
                self.heard()
                    .entry(n.metadata.name.clone())
                    .and_modify(|h| {
                        if h.beat != beat {
                            *h = Heard { beat, at: now };
                        }
                    })
                    .or_insert(Heard { beat, at: now });
                self.queue.add(n.metadata.name.clone());
            }
            Event::Deleted(Object::Node(n)) => {
                self.heard().remove(&n.metadata.name);
            }
            _ => {}
        }
    }

    /// A pod was bound somewhere: a NoExecute taint there may evict it.
    pub fn on_pod(&self, event: &Event) {
        let (Event::Added(Object::Pod(p)) | Event::Modified(Object::Pod(p))) = event else {
            return;
        };
        if p.spec.node_name.is_empty() {
            return;
        }
        if let Some(node) = self.ctx.nodes.get("", &p.spec.node_name)
            && let Object::Node(n) = &*node
            && n.spec
                .taints
                .iter()
                .any(|t| t.effect == TaintEffect::NoExecute)
        {
            self.queue.add(n.metadata.name.clone());
        }
    }

    /// Takes a NoExecute token of `zone`, or says how long until there is one.
    fn take_token(&self, zone: &str) -> Result<(), Duration> {
        if self.eviction_rate <= 0.0 {
            return Err(Duration::from_secs(60));
        }
        let mut zones = self
            .zones
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let b = zones.entry(zone.to_owned()).or_insert(Bucket {
            tokens: 1.0,
            at: now,
        });
        b.tokens =
            (b.tokens + now.duration_since(b.at).as_secs_f64() * self.eviction_rate).min(1.0);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - b.tokens) / self.eviction_rate,
            ))
        }
    }

    /// Whether any node is Ready (see the module's note on disruption).
    fn any_ready(&self) -> bool {
        self.ctx
            .nodes
            .list(None)
            .iter()
            .any(|o| matches!(&**o, Object::Node(n) if n.is_ready()))
    }

    /// Writes `Ready=Unknown` (and every other condition Unknown) for a silent node.
    async fn mark_unknown(&self, node: &Node) -> Result<(), ClientError> {
        let now = Time::now();
        let mut next = node.clone();
        let status = next.status.get_or_insert_with(Default::default);
        if !status
            .conditions
            .iter()
            .any(|c| c.type_ == NodeConditionType::Ready)
        {
            status.conditions.push(skiff_proto::api::NodeCondition {
                type_: NodeConditionType::Ready,
                status: ConditionStatus::Unknown,
                last_heartbeat_time: None,
                last_transition_time: None,
                reason: String::new(),
                message: String::new(),
                other: Default::default(),
            });
        }
        for c in &mut status.conditions {
            if c.status != ConditionStatus::Unknown {
                c.status = ConditionStatus::Unknown;
                c.last_transition_time = Some(now);
            }
            c.reason = "NodeStatusUnknown".into();
            c.message = "Kubelet stopped posting node status.".into();
        }
        self.ctx.client.update_status(&Object::Node(next)).await?;
        self.events.normal(
            reference(&Object::Node(node.clone())),
            "NodeNotReady",
            format!("Node {} status is now: NodeNotReady", node.metadata.name),
        );
        Ok(())
    }

    /// Deletes the pods of `node` whose toleration of its NoExecute taints ran out; returns
    /// when the next one is due.
    async fn evict(&self, node: &Node) -> Result<Requeue, ClientError> {
        let taints: Vec<&Taint> = node
            .spec
            .taints
            .iter()
            .filter(|t| t.effect == TaintEffect::NoExecute)
            .collect();
        if taints.is_empty() {
            return Ok(None);
        }
        let now = Time::now().unix();
        let mut next: Option<i64> = None;
        for object in self.ctx.pods.on_node(&node.metadata.name) {
            let Object::Pod(pod) = &*object else { continue };
            if pod.is_terminal() || pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(due) = eviction_due(pod, &taints, now) else {
                continue;
            };
            if due > now {
                next = Some(next.map_or(due, |n| n.min(due)));
                continue;
            }
            let m = &pod.metadata;
            match self
                .ctx
                .client
                .delete(Kind::Pod, &m.namespace, &m.name, 0, None)
                .await
            {
                Ok(_) => self.events.normal(
                    reference(&object),
                    "TaintManagerEviction",
                    format!("Marking for deletion Pod {}/{}", m.namespace, m.name),
                ),
                Err(e) if e.code() == Some(Code::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(next.map(|due| Duration::from_secs((due - now).unsigned_abs())))
    }
}

impl Controller for NodeLifecycle {
    const NAME: &'static str = NAME;

    fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    async fn sync(&self, name: &str) -> Result<Requeue, ClientError> {
        let Some(object) = self.ctx.nodes.get("", name) else {
            self.heard().remove(name);
            return Ok(None);
        };
        let Object::Node(node) = &*object else {
            return Ok(None);
        };
        let heard = *self.heard().entry(name.to_owned()).or_insert(Heard {
            beat: heartbeat(node),
            at: Instant::now(),
        });
        let silent_for = heard.at.elapsed();
        let ready = node.condition(&NodeConditionType::Ready).map(|c| c.status);
        // A node that never sent a heartbeat is judged by its conditions alone.
        let silent = heard.beat.is_some() && silent_for > self.grace;
        if silent && ready != Some(ConditionStatus::Unknown) {
            // The write comes back as an event, and the taints follow from it.
            self.mark_unknown(node).await?;
            return Ok(None);
        }
        let mut requeue = (heard.beat.is_some() && !silent)
            .then(|| self.grace.saturating_sub(silent_for) + Duration::from_secs(1));

        // Taints follow the Ready condition.
        let wanted = wanted_taints(ready);
        let managed = |t: &Taint| t.key == TAINT_NOT_READY || t.key == TAINT_UNREACHABLE;
        let mut taints: Vec<Taint> = node
            .spec
            .taints
            .iter()
            .filter(|t| !managed(t) || wanted.contains(&(t.key.as_str(), t.effect)))
            .cloned()
            .collect();
        let now = Time::now();
        for (key, effect) in &wanted {
            if taints.iter().any(|t| t.key == *key && t.effect == *effect) {
                continue;
            }
            if *effect == TaintEffect::NoExecute {
                if !self.any_ready() {
                    requeue = Some(Duration::from_secs(10));
                    continue;
                }
                let zone = node
                    .metadata
                    .labels
                    .get(ZONE_LABEL)
                    .map_or("", String::as_str);
                if let Err(wait) = self.take_token(zone) {
                    requeue = Some(requeue.map_or(wait, |r| r.min(wait)));
                    continue;
                }
            }
            taints.push(Taint {
                key: (*key).to_owned(),
                value: String::new(),
                effect: *effect,
                time_added: Some(now),
                other: Default::default(),
            });
        }
        if taints != node.spec.taints {
            let mut next = node.clone();
            next.spec.taints = taints;
            match self.ctx.client.update(&Object::Node(next)).await {
                Ok(_) => {}
                Err(e) if e.code() == Some(Code::NotFound) => return Ok(None),
                Err(e) => return Err(e),
            }
            // The write comes back as an event; evictions follow from the new taints.
            return Ok(requeue);
        }
        let due = self.evict(node).await?;
        Ok(match (requeue, due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }
}

#[cfg(test)]
mod tests {
    use skiff_proto::api::Toleration;

    use super::*;

    fn taint(key: &str, added: i64) -> Taint {
        Taint {
            key: key.into(),
            value: String::new(),
            effect: TaintEffect::NoExecute,
            time_added: Time::from_unix(added),
            other: Default::default(),
        }
    }

    fn tolerating(key: &str, seconds: Option<i64>) -> Pod {
        let mut p = Pod::default();
        p.spec.tolerations.push(Toleration {
            key: key.into(),
            operator: "Exists".into(),
            value: String::new(),
            effect: Some(TaintEffect::NoExecute),
            toleration_seconds: seconds,
            other: Default::default(),
        });
        p
    }

    #[test]
    fn eviction_waits_out_the_toleration() {
        let unreachable = taint(TAINT_UNREACHABLE, 1000);
        let other = taint("example.com/broken", 1000);
        let p = tolerating(TAINT_UNREACHABLE, Some(300));
        assert_eq!(eviction_due(&p, &[&unreachable], 1010), Some(1300));
        assert_eq!(
            eviction_due(&p, &[&unreachable, &other], 1010),
            Some(1010),
            "a taint it does not tolerate evicts it now"
        );
        let forever = tolerating(TAINT_UNREACHABLE, None);
        assert_eq!(eviction_due(&forever, &[&unreachable], 1010), None);
        assert_eq!(
            eviction_due(&Pod::default(), &[&unreachable], 1010),
            Some(1010)
        );
    }

    #[test]
    fn taints_follow_the_ready_condition() {
        assert!(wanted_taints(Some(ConditionStatus::True)).is_empty());
        assert!(wanted_taints(None).is_empty());
        assert_eq!(
            wanted_taints(Some(ConditionStatus::Unknown)),
            [
                (TAINT_UNREACHABLE, TaintEffect::NoSchedule),
                (TAINT_UNREACHABLE, TaintEffect::NoExecute)
            ]
        );
        assert_eq!(
            wanted_taints(Some(ConditionStatus::False))[1],
            (TAINT_NOT_READY, TaintEffect::NoExecute)
        );
    }
}
