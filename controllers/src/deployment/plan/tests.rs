//! The rollout plan against a model of the cluster: ReplicaSets, their pods, a ReplicaSet
//! controller that creates and deletes one pod at a time (not-ready pods first; a create may
//! fail and simply not happen), pods that become ready in any order, and pods that fail, all
//! interleaved at random with the Deployment controller's steps.

use proptest::prelude::*;

use super::*;

/// A ReplicaSet of the model: its `replicas` and its pods (true: available).
#[derive(Debug, Clone, Default)]
struct ModelSet {
    replicas: i32,
    pods: Vec<bool>,
}

impl ModelSet {
    fn view(&self) -> Set {
        let available = self.pods.iter().filter(|&&a| a).count() as i32;
        Set {
            replicas: self.replicas,
            available: available.min(self.replicas),
            pods: self.pods.len() as i32,
        }
    }
}

#[derive(Debug, Clone)]
struct World {
    bounds: Bounds,
    new: ModelSet,
    /// Oldest first.
    old: Vec<ModelSet>,
}

impl World {
    fn pods(&self) -> usize {
        self.new.pods.len() + self.old.iter().map(|s| s.pods.len()).sum::<usize>()
    }

    fn available(&self) -> usize {
        std::iter::once(&self.new)
            .chain(&self.old)
            .map(|s| s.pods.iter().filter(|&&a| a).count())
            .sum()
    }

    /// The Deployment controller's step.
    fn step(&mut self) {
        let old: Vec<Set> = self.old.iter().map(ModelSet::view).collect();
        match rolling(&self.bounds, &self.new.view(), &old) {
            Step::ScaleNew(n) => self.new.replicas = n,
            Step::ScaleOld(changes) => {
                for (i, n) in changes {
                    self.old[i].replicas = n;
                }
            }
            Step::Wait => {}
        }
    }

    /// The ReplicaSet controller, one pod of one set.
    fn replica_set(&mut self, which: usize) {
        let sets = 1 + self.old.len();
        let set = if which.is_multiple_of(sets) {
            &mut self.new
        } else {
            &mut self.old[which % sets - 1]
        };
        let have = set.pods.len() as i32;
        if have < set.replicas {
            set.pods.push(false);
        } else if have > set.replicas {
            // Not-available pods go first.
            match set.pods.iter().position(|&a| !a) {
                Some(i) => {
                    set.pods.remove(i);
                }
                None => {
                    set.pods.pop();
                }
            }
        }
    }

    /// A pod becomes available.
    fn ready(&mut self, which: usize) {
        let all: Vec<&mut bool> = std::iter::once(&mut self.new)
            .chain(self.old.iter_mut())
            .flat_map(|s| s.pods.iter_mut())
            .filter(|a| !**a)
            .collect();
        let n = all.len();
        if n > 0
            && let Some(p) = all.into_iter().nth(which % n)
        {
            *p = true;
        }
    }

    /// A pod fails (and goes: its ReplicaSet will replace it).
    fn fail(&mut self, which: usize) {
        let sets = 1 + self.old.len();
        let set = if which.is_multiple_of(sets) {
            &mut self.new
        } else {
            &mut self.old[which % sets - 1]
        };
        if !set.pods.is_empty() {
            let i = which % set.pods.len();
            set.pods.remove(i);
        }
    }

    fn done(&self) -> bool {
        self.new.pods.len() as i32 == self.bounds.replicas
            && self.new.pods.iter().all(|&a| a)
            && self
                .old
                .iter()
                .all(|s| s.pods.is_empty() && s.replicas == 0)
    }
}

fn world() -> impl Strategy<Value = World> {
    (
        1i32..12,
        0i32..4,
        0i32..4,
        proptest::collection::vec(0i32..8, 1..3),
    )
        .prop_map(|(replicas, surge, unavailable, old)| {
            let (max_surge, max_unavailable) = if surge == 0 && unavailable == 0 {
                (0, 1)
            } else {
                (surge, unavailable.min(replicas))
            };
            // A steady state before the template changed: the old sets hold `replicas`
            // available pods between them (the oldest take the remainder).
            let mut left = replicas;
            let mut sets: Vec<ModelSet> = old
                .iter()
                .map(|&n| {
                    let n = n.min(left);
                    left -= n;
                    ModelSet {
                        replicas: n,
                        pods: vec![true; n as usize],
                    }
                })
                .collect();
            sets[0].replicas += left;
            sets[0].pods.extend(vec![true; left as usize]);
            World {
                bounds: Bounds {
                    replicas,
                    max_surge,
                    max_unavailable,
                },
                new: ModelSet::default(),
                old: sets,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Under any interleaving of controller steps, pod creates (which may fail) and
    /// deletes, pods becoming available and pods failing: pods never exceed replicas +
    /// maxSurge; available pods never drop below replicas - maxUnavailable through the
    /// controller's doing (checked until the first pod failure, which no controller can
    /// prevent); and a fair run afterwards finishes the rollout.
    #[test]
    fn a_rolling_update_stays_in_bounds_and_finishes(
        mut w in world(),
        events in proptest::collection::vec((0u8..4, any::<usize>()), 0..400),
    ) {
        let b = w.bounds;
        let ceiling = (b.replicas + b.max_surge) as usize;
        let floor = (b.replicas - b.max_unavailable).max(0) as usize;
        let mut failed = false;
        for (what, which) in events {
            match what {
                0 => w.step(),
                1 => w.replica_set(which),
                2 => w.ready(which),
                // Now and then (one event of this kind in 16) a pod fails.
                _ if which % 16 == 0 => {
                    w.fail(which / 16);
                    failed = true;
                }
                _ => {}
            }
            prop_assert!(w.pods() <= ceiling, "{} pods > {ceiling}: {w:?}", w.pods());
            if !failed {
                prop_assert!(w.available() >= floor, "{} available < {floor}: {w:?}", w.available());
            }
        }
        // Then a fair schedule: everything gets its turn until the rollout is done.
        for round in 0..1000 {
            if w.done() {
                break;
            }
            w.step();
            for i in 0..=w.old.len() {
                w.replica_set(i);
            }
            w.ready(round);
            prop_assert!(w.pods() <= ceiling);
        }
        prop_assert!(w.done(), "rollout did not finish: {w:?}");
    }
}

#[test]
fn the_first_step_surges_then_old_pods_give_way() {
    let b = Bounds {
        replicas: 4,
        max_surge: 1,
        max_unavailable: 1,
    };
    let old = [Set {
        replicas: 4,
        available: 4,
        pods: 4,
    }];
    assert_eq!(rolling(&b, &Set::default(), &old), Step::ScaleNew(1));
    let new = Set {
        replicas: 1,
        available: 0,
        pods: 1,
    };
    // 5 pods (the ceiling); one old one may go (4 available, 3 needed).
    assert_eq!(rolling(&b, &new, &old), Step::ScaleOld(vec![(0, 3)]));
}

#[test]
fn recreate_drains_before_it_creates() {
    let b = Bounds {
        replicas: 3,
        max_surge: 0,
        max_unavailable: 0,
    };
    let old = [Set {
        replicas: 3,
        available: 3,
        pods: 3,
    }];
    assert_eq!(
        recreate(&b, &Set::default(), &old, 3),
        Step::ScaleOld(vec![(0, 0)])
    );
    let drained = [Set::default()];
    assert_eq!(recreate(&b, &Set::default(), &drained, 1), Step::Wait);
    assert_eq!(
        recreate(&b, &Set::default(), &drained, 0),
        Step::ScaleNew(3)
    );
}

#[test]
fn scaling_mid_rollout_is_proportional_within_the_surge() {
    let b = Bounds {
        replicas: 20,
        max_surge: 3,
        max_unavailable: 2,
    };
    // 10 replicas rolling: new 5, old 7 (12 = 10 + surge 2 before the change).
    let sets = [
        Set {
            replicas: 5,
            available: 0,
            pods: 5,
        },
        Set {
            replicas: 7,
            available: 7,
            pods: 7,
        },
    ];
    let sizes = scale(&b, &sets, Some(0), true);
    assert_eq!(sizes.iter().sum::<i32>(), 23);
    assert_eq!(sizes, [9, 14]);
    let down = Bounds {
        replicas: 0,
        max_surge: 3,
        max_unavailable: 0,
    };
    assert_eq!(
        scale(&down, &sets, Some(0), true),
        [0, 0],
        "0 allows no surge"
    );
    assert_eq!(
        scale(&b, &sets, Some(0), false),
        [5, 7],
        "Recreate: left alone"
    );
    let one = [Set {
        replicas: 3,
        available: 3,
        pods: 3,
    }];
    assert_eq!(scale(&b, &one, None, true), [20]);
    let saturated = [
        Set {
            replicas: 20,
            available: 20,
            pods: 20,
        },
        Set {
            replicas: 2,
            available: 2,
            pods: 2,
        },
    ];
    assert_eq!(scale(&b, &saturated, Some(0), true), [20, 0]);
}

proptest! {
    /// Proportional scaling never makes a set negative, and lands on the surge budget
    /// exactly (or on 0 for 0 replicas) whenever two or more sets are active.
    #[test]
    fn scaling_hits_the_budget_without_negative_sets(
        replicas in 0i32..60,
        surge in 0i32..5,
        sizes in proptest::collection::vec(0i32..30, 2..5),
    ) {
        let b = Bounds { replicas, max_surge: surge, max_unavailable: 1 };
        let sets: Vec<Set> = sizes
            .iter()
            .map(|&n| Set { replicas: n, available: 0, pods: n })
            .collect();
        let out = scale(&b, &sets, None, true);
        prop_assert!(out.iter().all(|&n| n >= 0), "{out:?}");
        let active = sizes.iter().filter(|&&n| n > 0).count();
        if active >= 2 {
            let want = if replicas > 0 { replicas + surge } else { 0 };
            prop_assert_eq!(out.iter().sum::<i32>(), want, "{:?} -> {:?}", sizes, out);
        }
    }
}
