//! Priority admission, as kube-apiserver's `Priority` plugin does it (Kubernetes 1.32).
//!
//! ```text
//!  pod created ──► priorityClassName set? ── yes ──► that PriorityClass (none: 403 Forbidden)
//!                        │ no
//!                        ▼
//!                  a class with globalDefault? ── yes ──► it (the lowest value, if several);
//!                        │ no                              its name becomes the pod's
//!                        ▼
//!                  priority 0, PreemptLowerPriority, no class name
//!
//!  spec.priority := the class's value          (a different value given: refused)
//!  spec.preemptionPolicy := the class's policy (a different policy given: refused)
//! ```
//!
//! The scheduler orders and preempts by what lands in the spec; a pod's priority never
//! changes after creation (the update rules keep the spec). Also the plugin's rule for the
//! classes themselves: only one may be the global default.

use skiff_proto::api::pod::PREEMPT_LOWER_PRIORITY;
use skiff_proto::api::{Kind, Object, Pod};

use super::{ClusterApi, ClusterError, Result, prefix_end};

/// The kind of PriorityClasses (declared, cluster-scoped).
pub fn priority_class_kind() -> Kind {
    Kind::from_name("PriorityClass").expect("invariant: PriorityClass is declared")
}

/// A PriorityClass, as admission reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Class {
    pub name: String,
    pub value: i32,
    pub global_default: bool,
    pub preemption_policy: String,
}

impl Class {
    /// The class a stored object is; `None` for another kind's, or a value out of the
    /// 32-bit range Kubernetes' type has (validation keeps such values out).
    fn of(object: &Object) -> Option<Class> {
        let Object::Generic(_, o) = object else {
            return None;
        };
        let value = i32::try_from(o.int("/value")?).ok()?;
        let policy = o.text("/preemptionPolicy");
        Some(Class {
            name: o.metadata.name.clone(),
            value,
            global_default: o
                .at("/globalDefault")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
            preemption_policy: if policy.is_empty() {
                PREEMPT_LOWER_PRIORITY.to_owned()
            } else {
                policy.to_owned()
            },
        })
    }
}

/// The class pods without a name get: of the classes marked `globalDefault`, the one of the
/// lowest value (more than one can exist only through a race between two creates; the
/// plugin then errs towards the lower priority, as Kubernetes' does).
pub fn default_class(classes: impl IntoIterator<Item = Class>) -> Option<Class> {
    classes
        .into_iter()
        .filter(|c| c.global_default)
        .min_by_key(|c| c.value)
}

/// What the pod's priority resolved to: its class (none: no class applies) and the class's
/// value and preemption policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub class: Option<String>,
    pub value: i32,
    pub preemption_policy: String,
}

impl Resolved {
    /// Priority 0, preempting lower priorities: a pod without a class where no class is the
    /// default.
    pub fn none() -> Resolved {
        Resolved {
            class: None,
            value: 0,
            preemption_policy: PREEMPT_LOWER_PRIORITY.to_owned(),
        }
    }

    pub fn of(class: Class) -> Resolved {
        Resolved {
            class: Some(class.name),
            value: class.value,
            preemption_policy: class.preemption_policy,
        }
    }
}

/// Writes `resolved` into `pod`'s spec; a value or policy the pod gave that differs from it
/// is refused, with kube-apiserver's words.
pub fn apply(pod: &mut Pod, resolved: Resolved) -> Result<(), String> {
    let spec = &mut pod.spec;
    if let Some(given) = spec.priority
        && given != resolved.value
    {
        return Err(format!(
            "the integer value of priority ({given}) must not be provided in pod spec; \
             priority admission controller computed {} from the given PriorityClass name",
            resolved.value
        ));
    }
    if let Some(given) = &spec.preemption_policy
        && *given != resolved.preemption_policy
    {
        return Err(format!(
            "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; \
             priority admission controller computed {} from the given PriorityClass name",
            resolved.preemption_policy
        ));
    }
    if spec.priority_class_name.is_empty()
        && let Some(class) = resolved.class
    {
        spec.priority_class_name = class;
    }
    spec.priority = Some(resolved.value);
    spec.preemption_policy = Some(resolved.preemption_policy);
    Ok(())
}

/// Every PriorityClass stored.
fn classes(api: &ClusterApi) -> Result<Vec<Class>> {
    let kind = priority_class_kind();
    let prefix = kind.prefix(None);
    let (_, stored) = api.range(kind, prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0)?;
    Ok(stored.iter().filter_map(|s| Class::of(&s.object)).collect())
}

fn forbidden(object: &Object, why: String) -> ClusterError {
    ClusterError::Forbidden {
        kind: object.kind(),
        name: object.metadata().name.clone(),
        why,
    }
}

/// Priority admission of a pod being created (both faces' creates come here, through
/// [`super::admission::admit_create`]).
pub fn admit_pod(api: &ClusterApi, pod: &mut Pod) -> Result<()> {
    let named = pod.spec.priority_class_name.clone();
    let resolved = if named.is_empty() {
        default_class(classes(api)?).map_or_else(Resolved::none, Resolved::of)
    } else {
        let (_, stored) = api.get_local(priority_class_kind(), "", &named)?;
        match stored.and_then(|s| Class::of(&s.object)) {
            Some(class) => Resolved::of(class),
            None => {
                return Err(ClusterError::Forbidden {
                    kind: Kind::Pod,
                    name: pod.metadata.name.clone(),
                    why: format!("no PriorityClass with name {named} was found"),
                });
            }
        }
    };
    apply(pod, resolved).map_err(|why| ClusterError::Forbidden {
        kind: Kind::Pod,
        name: pod.metadata.name.clone(),
        why,
    })
}

/// A PriorityClass created or updated as the global default, while another class is: refused,
/// as only one may be.
pub fn admit_class(api: &ClusterApi, object: &Object) -> Result<()> {
    let Some(class) = Class::of(object).filter(|c| c.global_default) else {
        return Ok(());
    };
    let others = classes(api)?.into_iter().filter(|c| c.name != class.name);
    match default_class(others) {
        Some(current) => Err(forbidden(
            object,
            format!(
                "PriorityClass {} is already marked as default. Only one default can exist",
                current.name
            ),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_proto::api::pod::PREEMPT_NEVER;

    fn class(name: &str, value: i32, global_default: bool, policy: &str) -> Class {
        Class {
            name: name.into(),
            value,
            global_default,
            preemption_policy: policy.into(),
        }
    }

    /// Of several defaults (a race let two in) the lowest value wins; no default, none.
    #[test]
    fn the_lowest_default_is_the_default() {
        let classes = [
            class("high", 1000, true, PREEMPT_LOWER_PRIORITY),
            class("low", 10, true, PREEMPT_NEVER),
            class("lowest", -5, false, PREEMPT_LOWER_PRIORITY),
        ];
        assert_eq!(
            default_class(classes.clone()).map(|c| c.name),
            Some("low".into())
        );
        assert_eq!(default_class([classes[2].clone()]), None);
    }

    /// A pod takes its class's value and policy, and the default class's name when it named
    /// none; a value or a policy of its own that differs is refused in kube-apiserver's
    /// words, one that agrees is accepted.
    #[test]
    fn a_pod_takes_what_its_class_says() {
        let mut pod = Pod::default();
        apply(
            &mut pod,
            Resolved::of(class("batch", 7, true, PREEMPT_NEVER)),
        )
        .unwrap();
        assert_eq!(pod.spec.priority_class_name, "batch");
        assert_eq!(pod.spec.priority, Some(7));
        assert_eq!(pod.spec.preemption_policy.as_deref(), Some(PREEMPT_NEVER));

        let mut pod = Pod::default();
        apply(&mut pod, Resolved::none()).unwrap();
        assert_eq!(pod.spec.priority_class_name, "");
        assert_eq!(pod.spec.priority, Some(0));
        assert_eq!(
            pod.spec.preemption_policy.as_deref(),
            Some(PREEMPT_LOWER_PRIORITY)
        );

        let mut pod = Pod::default();
        pod.spec.priority = Some(100);
        assert_eq!(
            apply(&mut pod, Resolved::none()).unwrap_err(),
            "the integer value of priority (100) must not be provided in pod spec; priority \
             admission controller computed 0 from the given PriorityClass name"
        );
        let mut pod = Pod::default();
        pod.spec.preemption_policy = Some(PREEMPT_NEVER.into());
        assert_eq!(
            apply(&mut pod, Resolved::none()).unwrap_err(),
            "the string value of PreemptionPolicy (Never) must not be provided in pod spec; \
             priority admission controller computed PreemptLowerPriority from the given \
             PriorityClass name"
        );
        let mut pod = Pod::default();
        pod.spec.priority = Some(7);
        pod.spec.preemption_policy = Some(PREEMPT_NEVER.into());
        apply(
            &mut pod,
            Resolved::of(class("batch", 7, false, PREEMPT_NEVER)),
        )
        .unwrap();
    }

    /// Through the API: a pod naming a class gets its value and policy; one naming a class
    /// that does not exist is refused as kube-apiserver refuses it; one naming none gets the
    /// default class once there is one; a second default class is refused; an update that
    /// leaves the priority out keeps it, one that changes it is refused.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pods_get_their_class_priority_through_the_api() {
        use crate::cluster::Part;
        use crate::cluster::testing::{TestApi, pod};
        use serde_json::json;
        let t = TestApi::start(|_| crate::access::AccessConfig::default()).await;
        t.create(Kind::Namespace, json!({"metadata": {"name": "team"}}))
            .await;
        let spec = |o: &Object| match o {
            Object::Pod(p) => (
                p.spec.priority_class_name.clone(),
                p.spec.priority,
                p.spec.preemption_policy.clone(),
            ),
            _ => unreachable!("a pod"),
        };
        let create = |name: &str, class: Option<&str>| {
            let mut p = pod(name, "", "default", "cfg");
            if let Some(class) = class {
                p["spec"]["priorityClassName"] = class.into();
            }
            t.api
                .create(Object::from_value(Kind::Pod, p).expect("a pod"), false)
        };

        let plain = create("plain", None).await.expect("created").1;
        assert_eq!(
            spec(&plain),
            (String::new(), Some(0), Some(PREEMPT_LOWER_PRIORITY.into()))
        );
        assert_eq!(
            create("missing", Some("gold"))
                .await
                .unwrap_err()
                .to_string(),
            "pods \"missing\" is forbidden: no PriorityClass with name gold was found"
        );

        t.create(
            priority_class_kind(),
            json!({"metadata": {"name": "gold"}, "value": 1000, "preemptionPolicy": "Never"}),
        )
        .await;
        let gold = create("gold", Some("gold")).await.expect("created").1;
        assert_eq!(
            spec(&gold),
            ("gold".into(), Some(1000), Some(PREEMPT_NEVER.into()))
        );
        t.create(
            priority_class_kind(),
            json!({"metadata": {"name": "bronze"}, "value": 10, "globalDefault": true}),
        )
        .await;
        let defaulted = create("defaulted", None).await.expect("created").1;
        assert_eq!(
            spec(&defaulted),
            (
                "bronze".into(),
                Some(10),
                Some(PREEMPT_LOWER_PRIORITY.into())
            )
        );
        let second = Object::from_value(
            priority_class_kind(),
            json!({"metadata": {"name": "silver"}, "value": 100, "globalDefault": true}),
        )
        .expect("a class");
        assert_eq!(
            t.api.create(second, false).await.unwrap_err().to_string(),
            "priorityclasses.scheduling.k8s.io \"silver\" is forbidden: PriorityClass bronze \
             is already marked as default. Only one default can exist"
        );
        let mut given = pod("given", "", "default", "cfg");
        given["spec"]["priority"] = 10.into();
        t.api
            .create(Object::from_value(Kind::Pod, given).expect("a pod"), false)
            .await
            .expect("the value the class gives may be given");

        // An update without the admitted fields keeps them; one that changes them is refused.
        let Object::Pod(mut p) = gold else {
            unreachable!("a pod")
        };
        p.spec.priority = None;
        p.spec.preemption_policy = None;
        p.metadata.labels.insert("tier".into(), "gold".into());
        let (_, updated) = t
            .api
            .update(Object::Pod(p.clone()), Part::Main, false)
            .await
            .expect("updated");
        assert_eq!(
            spec(&updated),
            ("gold".into(), Some(1000), Some(PREEMPT_NEVER.into()))
        );
        p.spec.priority = Some(5);
        p.metadata.resource_version.clear();
        let e = t
            .api
            .update(Object::Pod(p), Part::Main, false)
            .await
            .unwrap_err();
        assert!(
            matches!(e, ClusterError::Immutable { field: "spec", .. }),
            "{e}"
        );
        t.stop().await;
    }
}
