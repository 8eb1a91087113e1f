//! The StatefulSet controller's decisions, without I/O, as Kubernetes 1.32's
//! `defaultStatefulSetControl` makes them:
//!
//! ```text
//!  ordinals start..start+replicas, lowest first:
//!     missing                 ──► create it (OrderedReady: and wait for it)
//!     Failed or Succeeded     ──► delete it, to be made again (OrderedReady: and wait)
//!     terminating, not ready  ──► OrderedReady: wait
//!  the others (condemned), highest first:
//!     OrderedReady: once every pod above is running and ready, delete the highest, and wait
//!     Parallel: delete them all
//!  RollingUpdate, once all of that holds: highest ordinal first, down to the partition, the
//!     first pod of another revision is deleted (made again at the update revision); one
//!     at a time, each waiting for the one before to be running and ready
//! ```

use skiff_proto::api::apps::{StatefulSet, StatefulSetStatus};
use skiff_proto::api::{Pod, PodPhase};

use crate::history::REVISION_HASH_LABEL;
use crate::pods;

/// The label a StatefulSet's pod carries: its own name (for a Service per pod).
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The label a StatefulSet's pod carries: its ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// The ordinal of a pod of `set` named `name` (`<set>-<ordinal>`), if it is one.
pub fn ordinal_of(set: &str, name: &str) -> Option<i32> {
    let rest = name.strip_prefix(set)?.strip_prefix('-')?;
    if rest.is_empty() || (rest.len() > 1 && rest.starts_with('0')) {
        return None;
    }
    rest.parse().ok().filter(|n: &i32| *n >= 0)
}

/// The revision a pod was made from.
pub fn revision_of(pod: &Pod) -> &str {
    pod.metadata
        .labels
        .get(REVISION_HASH_LABEL)
        .map_or("", String::as_str)
}

/// What the sync does now.
#[derive(Debug, Default, PartialEq)]
pub struct Decision {
    /// Ordinals to make pods for, each at the revision given (current or update).
    pub create: Vec<(i32, String)>,
    /// Pods to delete (names), and whether each is condemned (scaled away, so its claims go
    /// with it under `whenScaled: Delete`).
    pub delete: Vec<(String, bool)>,
    pub status: StatefulSetStatus,
}

fn running_and_ready(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase) == Some(PodPhase::Running) && pods::is_ready(p)
}

fn terminating(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

/// The decision for `set` with its pods `owned`, at revisions `current` and `update` (their
/// names), `now` in Unix seconds.
pub fn decide(
    set: &StatefulSet,
    owned: &[&Pod],
    current: &str,
    update: &str,
    now: i64,
) -> Decision {
    let name = &set.metadata.name;
    let (start, replicas) = (set.start(), set.replicas());
    let end = start.saturating_add(replicas);
    let mut slots: Vec<Option<&Pod>> = vec![None; usize::try_from(replicas).unwrap_or(0)];
    let mut condemned: Vec<(i32, &Pod)> = Vec::new();
    for p in owned {
        let Some(ord) = ordinal_of(name, &p.metadata.name) else {
            continue;
        };
        if (start..end).contains(&ord) {
            slots[usize::try_from(ord - start).unwrap_or(0)] = Some(p);
        } else {
            condemned.push((ord, p));
        }
    }
    condemned.sort_by_key(|(ord, _)| std::cmp::Reverse(*ord));
    let mut out = Decision {
        status: status(set, owned, current, update, now),
        ..Decision::default()
    };
    let ordered = set.ordered();
    // The revision a pod made now gets: below the partition (or, with none, among the pods
    // the rolling update has not reached), the current one.
    let partition = if set.partition() > 0 {
        set.partition()
    } else {
        start + set.status.current_replicas
    };
    let revision_for = |ord: i32| {
        if set.rolls() && ord < partition && !current.is_empty() {
            current.to_owned()
        } else {
            update.to_owned()
        }
    };
    let mut blocked = false;
    for (i, slot) in slots.iter().enumerate() {
        let ord = start + i32::try_from(i).unwrap_or(0);
        match slot {
            None => {
                out.create.push((ord, revision_for(ord)));
                if ordered {
                    blocked = true;
                    break;
                }
            }
            Some(p) if p.is_terminal() && !terminating(p) => {
                out.delete.push((p.metadata.name.clone(), false));
                if ordered {
                    blocked = true;
                    break;
                }
            }
            Some(p) if ordered && (terminating(p) || !running_and_ready(p)) => {
                blocked = true;
                break;
            }
            Some(_) => {}
        }
    }
    if blocked {
        return out;
    }
    for (_, p) in &condemned {
        if terminating(p) {
            if ordered {
                return out;
            }
            continue;
        }
        out.delete.push((p.metadata.name.clone(), true));
        if ordered {
            return out;
        }
    }
    if !condemned.is_empty() && ordered {
        return out;
    }
    if !set.rolls() {
        return out;
    }
    let floor = set.partition().max(start);
    for (i, slot) in slots.iter().enumerate().rev() {
        let ord = start + i32::try_from(i).unwrap_or(0);
        if ord < floor {
            break;
        }
        let Some(p) = slot else {
            return out;
        };
        if revision_of(p) != update && !terminating(p) {
            out.delete.push((p.metadata.name.clone(), false));
            return out;
        }
        if terminating(p) || !running_and_ready(p) {
            return out;
        }
    }
    out
}

/// The status Kubernetes writes: counts of the pods made, ready, available, at the current
/// and at the update revision; once every pod is updated and ready, the update revision is
/// the current one.
fn status(
    set: &StatefulSet,
    owned: &[&Pod],
    current: &str,
    update: &str,
    now: i64,
) -> StatefulSetStatus {
    let min_ready = set.spec.min_ready_seconds.unwrap_or(0);
    let mut s = StatefulSetStatus {
        observed_generation: set.metadata.generation,
        current_revision: current.to_owned(),
        update_revision: update.to_owned(),
        collision_count: set.status.collision_count,
        other: set.status.other.clone(),
        ..StatefulSetStatus::default()
    };
    for p in owned {
        let created = p.status.as_ref().and_then(|s| s.phase).is_some();
        if created {
            s.replicas += 1;
        }
        if running_and_ready(p) {
            s.ready_replicas += 1;
            if pods::is_available(p, min_ready, now) {
                s.available_replicas += 1;
            }
        }
        if created && !terminating(p) {
            if revision_of(p) == current {
                s.current_replicas += 1;
            }
            if revision_of(p) == update {
                s.updated_replicas += 1;
            }
        }
    }
    let replicas = set.replicas();
    if set.rolls() && s.updated_replicas == replicas && s.ready_replicas == replicas {
        s.current_replicas = s.updated_replicas;
        s.current_revision = update.to_owned();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(spec: serde_json::Value) -> StatefulSet {
        let mut v = json!({"metadata": {"name": "db", "namespace": "default", "uid": "s", "generation": 1},
                           "spec": {"selector": {"matchLabels": {"app": "db"}},
                                    "serviceName": "db",
                                    "template": {"metadata": {"labels": {"app": "db"}},
                                                 "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        if let (Some(base), Some(extra)) = (v["spec"].as_object_mut(), spec.as_object()) {
            for (k, e) in extra {
                base.insert(k.clone(), e.clone());
            }
        }
        serde_json::from_value(v).unwrap()
    }

    fn pod(ord: i32, revision: &str, state: &str) -> Pod {
        let (phase, ready) = match state {
            "ready" => ("Running", "True"),
            "running" => ("Running", "False"),
            "pending" => ("Pending", "False"),
            "failed" => ("Failed", "False"),
            _ => unreachable!(),
        };
        serde_json::from_value(json!({
            "metadata": {"name": format!("db-{ord}"), "namespace": "default",
                         "labels": {REVISION_HASH_LABEL: revision}},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}
        }))
        .unwrap()
    }

    fn names(d: &Decision) -> Vec<&str> {
        d.delete.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn ordinals_are_read_off_names() {
        assert_eq!(ordinal_of("db", "db-0"), Some(0));
        assert_eq!(ordinal_of("db", "db-12"), Some(12));
        assert_eq!(ordinal_of("db", "db-012"), None);
        assert_eq!(ordinal_of("db", "dbx-1"), None);
        assert_eq!(ordinal_of("db", "db-"), None);
        assert_eq!(ordinal_of("db-1", "db-1-0"), Some(0));
    }

    /// OrderedReady: one pod at a time, each after the one before is ready; Parallel: all.
    #[test]
    fn ordered_pods_come_one_at_a_time() {
        let s = set(json!({"replicas": 3}));
        let d = decide(&s, &[], "r1", "r1", 0);
        assert_eq!(d.create, [(0, "r1".to_string())]);
        let p0 = pod(0, "r1", "running");
        let d = decide(&s, &[&p0], "r1", "r1", 0);
        assert!(d.create.is_empty(), "web-0 is not ready yet");
        let p0 = pod(0, "r1", "ready");
        let d = decide(&s, &[&p0], "r1", "r1", 0);
        assert_eq!(d.create, [(1, "r1".to_string())]);
        let parallel = set(json!({"replicas": 3, "podManagementPolicy": "Parallel"}));
        let d = decide(&parallel, &[], "r1", "r1", 0);
        assert_eq!(d.create.len(), 3);
    }

    /// Scaling down takes the highest ordinal first, one at a time; a failed pod is
    /// replaced.
    #[test]
    fn scale_down_from_the_top_and_replace_the_failed() {
        let s = set(json!({"replicas": 1}));
        let (p0, p1, p2) = (
            pod(0, "r1", "ready"),
            pod(1, "r1", "ready"),
            pod(2, "r1", "ready"),
        );
        let d = decide(&s, &[&p0, &p1, &p2], "r1", "r1", 0);
        assert_eq!(d.delete, [("db-2".to_string(), true)]);
        let failed = pod(0, "r1", "failed");
        let d = decide(&s, &[&failed], "r1", "r1", 0);
        assert_eq!(names(&d), ["db-0"]);
    }

    /// A rolling update replaces the highest pod of the old revision first, waits for it,
    /// and stops at the partition.
    #[test]
    fn rolling_update_from_the_top_down_to_the_partition() {
        let s = set(json!({"replicas": 3,
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}}));
        let old: Vec<Pod> = (0..3).map(|i| pod(i, "r1", "ready")).collect();
        let refs: Vec<&Pod> = old.iter().collect();
        let d = decide(&s, &refs, "r1", "r2", 0);
        assert_eq!(names(&d), ["db-2"]);
        let new2 = pod(2, "r2", "running");
        let d = decide(&s, &[&old[0], &old[1], &new2], "r1", "r2", 0);
        assert!(d.delete.is_empty(), "waits for db-2 to be ready");
        let new2 = pod(2, "r2", "ready");
        let d = decide(&s, &[&old[0], &old[1], &new2], "r1", "r2", 0);
        assert_eq!(names(&d), ["db-1"]);
        let new1 = pod(1, "r2", "ready");
        let d = decide(&s, &[&old[0], &new1, &new2], "r1", "r2", 0);
        assert!(d.delete.is_empty(), "db-0 is below the partition");
        assert_eq!(d.status.updated_replicas, 2);
        assert_eq!(d.status.current_replicas, 1);
        // A pod below the partition made again keeps the current revision.
        let d = decide(&s, &[&new1, &new2], "r1", "r2", 0);
        assert_eq!(d.create, [(0, "r1".to_string())]);
    }

    /// Once every pod runs the update revision and is ready, it is the current one.
    #[test]
    fn a_finished_update_becomes_current() {
        let s = set(json!({"replicas": 2}));
        let (p0, p1) = (pod(0, "r2", "ready"), pod(1, "r2", "ready"));
        let d = decide(&s, &[&p0, &p1], "r1", "r2", 0);
        assert_eq!(d.status.current_revision, "r2");
        assert_eq!(d.status.current_replicas, 2);
        assert_eq!(d.status.ready_replicas, 2);
        assert_eq!(d.status.replicas, 2);
    }
}
