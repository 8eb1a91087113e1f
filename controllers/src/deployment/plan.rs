//! The Deployment controller's rollout arithmetic, without I/O: how far to scale the new
//! ReplicaSet up and the old ones down, one step at a time, so that a rolling update never
//! has more than `replicas + maxSurge` pods nor fewer than `replicas - maxUnavailable`
//! available ones (Kubernetes' `rolloutRolling`, `rolloutRecreate` and proportional scaling).
//!
//! Counts are ReplicaSets' `spec.replicas` (what the ReplicaSet controller will make true),
//! their active pods (not finished, not being deleted; with the creates the ReplicaSet
//! controller has sent and not yet seen), and their available pods. A set just scaled down
//! still has the pods it is about to delete, so the surge is counted over the larger of
//! `replicas` and the pods (no new pod comes up beside an old one its set has not yet
//! deleted), and the caller caps a set's available count at its `replicas` (the pods about
//! to go must not be counted as staying, or a second step would delete more than the budget
//! allows). Pods that are terminating count towards neither, as in Kubernetes: a new pod may
//! start while an old one is still stopping.

/// A Deployment's rollout bounds, resolved to pod counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub replicas: i32,
    pub max_surge: i32,
    pub max_unavailable: i32,
}

/// One ReplicaSet as the plan sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Set {
    /// `spec.replicas`.
    pub replicas: i32,
    /// Available pods, at most `replicas`.
    pub available: i32,
    /// Active pods (not finished, not being deleted), whatever `replicas` says.
    pub pods: i32,
}

impl Set {
    /// The pods this set has or is about to have.
    fn footprint(&self) -> i32 {
        self.replicas.max(self.pods)
    }
}

/// What one step of a rollout does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Scale the new ReplicaSet to this many.
    ScaleNew(i32),
    /// Scale these old ReplicaSets (index into the old sets given) to these counts.
    ScaleOld(Vec<(usize, i32)>),
    /// Nothing to do until pods become available (or the rollout is done).
    Wait,
}

/// The new ReplicaSet's size when it is created or scaled up: as many as fit under
/// `replicas + maxSurge` counting every set, and no more than `replicas`.
pub fn new_set_size(b: &Bounds, new: &Set, old: &[Set]) -> i32 {
    if new.replicas >= b.replicas {
        return b.replicas;
    }
    let current = new.footprint() + old.iter().map(Set::footprint).sum::<i32>();
    let max_total = b.replicas + b.max_surge;
    if current >= max_total {
        return new.replicas;
    }
    new.replicas + (max_total - current).min(b.replicas - new.replicas)
}

/// One step of a RollingUpdate. `old` is ordered oldest first: old sets are drained in
/// that order.
pub fn rolling(b: &Bounds, new: &Set, old: &[Set]) -> Step {
    // Scale the new set (down too, when replicas shrank).
    let size = new_set_size(b, new, old);
    if size != new.replicas {
        return Step::ScaleNew(size);
    }
    let old_total: i32 = old.iter().map(|s| s.replicas).sum();
    if old_total == 0 {
        return Step::Wait;
    }
    let all = new.replicas + old_total;
    let min_available = b.replicas - b.max_unavailable;
    let new_unavailable = new.replicas - new.available;
    let max_scaled_down = all - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return Step::Wait;
    }
    let mut sizes: Vec<i32> = old.iter().map(|s| s.replicas).collect();
    // First the old pods that are not available: deleting them costs no availability.
    let mut cleaned = 0;
    for (i, s) in old.iter().enumerate() {
        if cleaned >= max_scaled_down {
            break;
        }
        let unhealthy = s.replicas - s.available;
        if s.replicas == 0 || unhealthy <= 0 {
            continue;
        }
        let n = unhealthy.min(max_scaled_down - cleaned);
        sizes[i] -= n;
        cleaned += n;
    }
    // Then available ones, down to the minimum availability.
    let available = new.available
        + old
            .iter()
            .zip(&sizes)
            .map(|(s, &n)| s.available.min(n))
            .sum::<i32>();
    if available > min_available {
        let budget = available - min_available;
        let mut done = 0;
        for size in &mut sizes {
            if done >= budget {
                break;
            }
            if *size == 0 {
                continue;
            }
            let n = (*size).min(budget - done);
            *size -= n;
            done += n;
        }
    }
    let changed: Vec<(usize, i32)> = sizes
        .iter()
        .enumerate()
        .filter(|&(i, &n)| n != old[i].replicas)
        .map(|(i, &n)| (i, n))
        .collect();
    if changed.is_empty() {
        Step::Wait
    } else {
        Step::ScaleOld(changed)
    }
}

/// One step of a Recreate rollout: every old set to 0; once no old pod is left
/// (`old_pods_left` counts those still running or terminating), the new set to `replicas`.
pub fn recreate(b: &Bounds, new: &Set, old: &[Set], old_pods_left: usize) -> Step {
    let scale_down: Vec<(usize, i32)> = old
        .iter()
        .enumerate()
        .filter(|(_, s)| s.replicas > 0)
        .map(|(i, _)| (i, 0))
        .collect();
    if !scale_down.is_empty() {
        return Step::ScaleOld(scale_down);
    }
    if old_pods_left > 0 {
        return Step::Wait;
    }
    if new.replicas != b.replicas {
        Step::ScaleNew(b.replicas)
    } else {
        Step::Wait
    }
}

/// New sizes for the sets (`sets[new]` the new one, when there is one; the others old,
/// newest first) after `replicas` changed mid-rollout (Kubernetes' `scale`):
/// - one active set (or none: the new one, else the first) takes the whole count;
/// - a saturated new set (all `replicas` available) leaves the old ones nothing;
/// - a RollingUpdate spreads the difference to `replicas + maxSurge` (0 when `replicas` is 0)
///   in proportion to the sets' sizes, the remainder to the largest, so the surge budget
///   holds; a Recreate in progress is left to its own steps.
pub fn scale(b: &Bounds, sets: &[Set], new: Option<usize>, rolling: bool) -> Vec<i32> {
    let mut sizes: Vec<i32> = sets.iter().map(|s| s.replicas).collect();
    if sets.is_empty() {
        return sizes;
    }
    let active: Vec<usize> = (0..sets.len()).filter(|&i| sets[i].replicas > 0).collect();
    if active.len() <= 1 {
        let i = active.first().copied().or(new).unwrap_or(0);
        sizes[i] = b.replicas;
        return sizes;
    }
    if let Some(n) = new
        && sets[n].replicas == b.replicas
        && sets[n].available >= b.replicas
    {
        for (i, size) in sizes.iter_mut().enumerate() {
            if i != n {
                *size = 0;
            }
        }
        return sizes;
    }
    if !rolling {
        return sizes;
    }
    let total: i32 = sizes.iter().sum();
    let allowed = if b.replicas > 0 {
        b.replicas + b.max_surge
    } else {
        0
    };
    let to_add = allowed - total;
    if to_add == 0 || total == 0 {
        return sizes;
    }
    let mut added = 0;
    for (size, s) in sizes.iter_mut().zip(sets) {
        let share = i32::try_from(i64::from(to_add) * i64::from(s.replicas) / i64::from(total))
            .unwrap_or(0);
        let share = share.max(-*size);
        *size += share;
        added += share;
    }
    // The rounding remainder goes to the largest set (the first of equals).
    let mut rest = to_add - added;
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(sets[i].replicas));
    for i in order {
        if rest == 0 {
            break;
        }
        let change = if rest > 0 { rest } else { rest.max(-sizes[i]) };
        sizes[i] += change;
        rest -= change;
    }
    sizes
}

#[cfg(test)]
mod tests;
