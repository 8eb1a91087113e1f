//! Kubernetes' fixed values (restart policy, pod phase, condition types and statuses, taint
//! effects) as enums that serialize to exactly the Kubernetes strings, so stored JSON and the
//! wire are the same as with strings, while a bad value is refused when it is decoded, at its
//! field path (`spec.restartPolicy: unsupported value "Sometimes": supported values: ...`),
//! and code matches on variants instead of comparing strings.
//!
//! Two shapes:
//! - *closed* (`RestartPolicy`, `PodPhase`, `ConditionStatus`, `TaintEffect`): the API server
//!   accepts only these values;
//! - *open* (`PodConditionType`, `NodeConditionType`): Kubernetes names the well-known types
//!   but accepts any other (readiness gates, node-problem-detector's conditions), kept as
//!   `Other`.

use std::fmt;
use std::str::FromStr;

/// A value outside a closed vocabulary, worded as validation words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unsupported value {value:?}: supported values: {}",
    supported(allowed)
)]
pub struct UnsupportedValue {
    pub value: String,
    pub allowed: &'static [&'static str],
}

fn supported(allowed: &[&str]) -> String {
    allowed
        .iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Serde through `as_str` / `FromStr`; decoding asks for a string, so YAML's `True` (a
/// boolean to a YAML 1.1 reader) reads as the word.
macro_rules! string_serde {
    ($name:ident) => {
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Visitor;
                impl serde::de::Visitor<'_> for Visitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str(concat!("a ", stringify!($name), " string"))
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$name, E> {
                        v.parse().map_err(E::custom)
                    }
                }
                d.deserialize_str(Visitor)
            }
        }

        /// The Kubernetes string; honours width and alignment (`{:<8}`) for tables.
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(self.as_str())
            }
        }
    };
}

/// A closed vocabulary: each variant is spelled as its Kubernetes string.
macro_rules! closed {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[cfg_attr(test, derive(proptest_derive::Arbitrary))]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every value, in Kubernetes' order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            const NAMES: &'static [&'static str] = &[$(stringify!($variant)),+];

            pub fn as_str(&self) -> &'static str {
                match self {
                    $($name::$variant => stringify!($variant)),+
                }
            }
        }

        impl FromStr for $name {
            type Err = UnsupportedValue;
            fn from_str(s: &str) -> Result<Self, UnsupportedValue> {
                match s {
                    $(stringify!($variant) => Ok($name::$variant),)+
                    _ => Err(UnsupportedValue {
                        value: s.to_owned(),
                        allowed: $name::NAMES,
                    }),
                }
            }
        }

        string_serde!($name);
    };
}

/// An open vocabulary: the well-known variants, and `Other` for any other string.
macro_rules! open {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[cfg_attr(test, derive(proptest_derive::Arbitrary))]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
            /// A type Kubernetes does not define (a readiness gate, an add-on's condition).
            #[cfg_attr(test, proptest(skip))]
            Other(String),
        }

        impl $name {
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => stringify!($variant),)+
                    $name::Other(s) => s,
                }
            }
        }

        impl FromStr for $name {
            type Err = std::convert::Infallible;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Ok(match s {
                    $(stringify!($variant) => $name::$variant,)+
                    _ => $name::Other(s.to_owned()),
                })
            }
        }

        string_serde!($name);
    };
}

closed! {
    /// `spec.restartPolicy`: which exited containers the agent starts again.
    RestartPolicy {
        /// Every exited container (the default).
        Always,
        /// Containers that exited with a non-zero code.
        OnFailure,
        Never,
    }
}

closed! {
    /// `status.phase`: where a pod is in its life, summarised.
    PodPhase {
        /// Accepted, not yet running all its containers (unscheduled, pulling, initialising).
        Pending,
        /// Bound, and at least one container is running or restarting.
        Running,
        /// Every container exited 0 and none will restart.
        Succeeded,
        /// Every container ended and at least one failed, or the pod was refused.
        Failed,
        /// The pod's node stopped reporting.
        Unknown,
    }
}

impl PodPhase {
    /// A phase the pod never leaves.
    pub fn is_terminal(self) -> bool {
        matches!(self, PodPhase::Succeeded | PodPhase::Failed)
    }
}

closed! {
    /// The status of a pod or node condition.
    ConditionStatus {
        True,
        False,
        Unknown,
    }
}

impl From<bool> for ConditionStatus {
    fn from(b: bool) -> Self {
        if b {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

closed! {
    /// What a taint does to pods that do not tolerate it.
    TaintEffect {
        /// New pods are not scheduled onto the node.
        NoSchedule,
        /// The scheduler avoids the node, but may still use it.
        PreferNoSchedule,
        /// New pods are not scheduled, and running ones are evicted.
        NoExecute,
    }
}

open! {
    /// The type of a pod condition.
    PodConditionType {
        /// The pod is bound to a node (`False`/`Unschedulable` while no node fits).
        PodScheduled,
        /// Every init container has completed.
        Initialized,
        /// Every container is ready.
        ContainersReady,
        /// The pod can serve: its containers are ready (and its readiness gates pass).
        Ready,
        /// The pod is about to be terminated by a disruption: preempted by the scheduler,
        /// evicted through the Eviction API, or deleted by a controller (the reason says which).
        DisruptionTarget,
    }
}

open! {
    /// The type of a node condition.
    NodeConditionType {
        /// The agent is healthy and ready to run pods.
        Ready,
        MemoryPressure,
        DiskPressure,
        PIDPressure,
        NetworkUnavailable,
    }
}

open! {
    /// The type of a CertificateSigningRequest's condition.
    CertificateConditionType {
        /// An approver allowed the request (set through the `approval` subresource).
        Approved,
        /// An approver refused it; no certificate will be issued.
        Denied,
        /// The signer could not or would not sign it.
        Failed,
    }
}

closed! {
    /// `spec.strategy.type` of a Deployment: how pods of an old template give way to new ones.
    DeploymentStrategyType {
        /// New pods come up while old ones go, within `maxSurge` and `maxUnavailable`
        /// (the default).
        RollingUpdate,
        /// Every old pod is gone before the first new one is created.
        Recreate,
    }
}

open! {
    /// The type of a Deployment or ReplicaSet condition.
    WorkloadConditionType {
        /// At least `replicas - maxUnavailable` pods have been ready for `minReadySeconds`.
        Available,
        /// A rollout is under way and moving, or finished (`NewReplicaSetAvailable`), or stuck
        /// past `progressDeadlineSeconds` (`False`, `ProgressDeadlineExceeded`).
        Progressing,
        /// Pods could not be created or deleted (a quota, admission).
        ReplicaFailure,
    }
}

closed! {
    /// `status.phase` of a namespace.
    NamespacePhase {
        /// New objects may be created in it.
        Active,
        /// Deleted: nothing new may be created in it while the namespace controller removes
        /// what it holds.
        Terminating,
    }
}

open! {
    /// The type of a namespace condition: the namespace controller's account of a deletion.
    NamespaceConditionType {
        /// The kinds served could not all be found.
        NamespaceDeletionDiscoveryFailure,
        /// A served group version could not be parsed.
        NamespaceDeletionGroupVersionParsingFailure,
        /// Some objects could not be deleted.
        NamespaceDeletionContentFailure,
        /// Objects are left (deleting: pods stopping, finalizers pending).
        NamespaceContentRemaining,
        /// Objects left are held by finalizers.
        NamespaceFinalizersRemaining,
    }
}

closed! {
    /// `propagationPolicy` of a delete: what happens to the objects the deleted one owns.
    DeletionPropagation {
        /// They are left, their reference to the owner removed (`kubectl delete --cascade=orphan`).
        Orphan,
        /// The owner goes at once; the garbage collector deletes them after (the default).
        Background,
        /// They are deleted first; the owner stays, marked, until they are gone.
        Foreground,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_serialize_as_kubernetes_spells_them() {
        assert_eq!(
            serde_json::to_string(&RestartPolicy::OnFailure).unwrap(),
            "\"OnFailure\""
        );
        assert_eq!(
            serde_json::to_string(&ConditionStatus::True).unwrap(),
            "\"True\""
        );
        assert_eq!(
            serde_json::from_str::<PodConditionType>("\"example.com/gate\"").unwrap(),
            PodConditionType::Other("example.com/gate".into())
        );
        assert_eq!(
            serde_json::from_str::<NodeConditionType>("\"PIDPressure\"").unwrap(),
            NodeConditionType::PIDPressure
        );
    }

    #[test]
    fn a_bad_value_is_refused_with_the_supported_ones() {
        let e = serde_json::from_str::<RestartPolicy>("\"Sometimes\"").unwrap_err();
        assert!(
            e.to_string().starts_with(
                "unsupported value \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
            ),
            "{e}"
        );
        assert!(serde_json::from_str::<TaintEffect>("\"\"").is_err());
    }

    #[test]
    fn yaml_words_that_look_boolean_read_as_words() {
        let s: ConditionStatus = serde_yaml_ng::from_str("True").unwrap();
        assert_eq!(s, ConditionStatus::True);
    }

    proptest::proptest! {
        #[test]
        fn round_trips(p: RestartPolicy, ph: PodPhase, s: ConditionStatus, t: TaintEffect,
                       pc: PodConditionType, nc: NodeConditionType) {
            fn again<T: serde::Serialize + serde::de::DeserializeOwned>(v: &T) -> T {
                serde_json::from_str(&serde_json::to_string(v).unwrap()).unwrap()
            }
            proptest::prop_assert_eq!(again(&p), p);
            proptest::prop_assert_eq!(again(&ph), ph);
            proptest::prop_assert_eq!(again(&s), s);
            proptest::prop_assert_eq!(again(&t), t);
            proptest::prop_assert_eq!(again(&pc), pc.clone());
            proptest::prop_assert_eq!(again(&nc), nc.clone());
        }
    }
}
