//! What a node agent tells `skiff describe pod`: the kubelet's events, read off a pod
//! worker's traffic with its engine. Pure functions of the pod, the engine's inputs and
//! actions, and two successive statuses, so the engine itself stays free of reporting.
//!
//! | seen                                   | event                                   |
//! |----------------------------------------|-----------------------------------------|
//! | action `StartContainer`                | Normal `Pulled` (the image is local)    |
//! | input `Started`                        | Normal `Created`, Normal `Started`      |
//! | input `StartFailed`                    | Warning `Failed`                        |
//! | input `SandboxFailed`                  | Warning `FailedCreatePodSandBox`        |
//! | input `MountFailed`                    | Warning `FailedMount`                   |
//! | input `ProbeDone` that failed          | Warning `Unhealthy`                     |
//! | action `StopContainer`                 | Normal `Killing`                        |
//! | status enters `CrashLoopBackOff`, `ImagePullBackOff` | Warning `BackOff`         |
//! | admission refused the pod              | Warning with the refusal's reason       |

use skiff_proto::api::pod::ContainerStatus;
use skiff_proto::api::{Container, Pod, PodStatus};

use crate::engine::{Action, Input, ProbeKind, Slot};

/// One event about a pod (or one of its containers, named by `field_path`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEvent {
    pub warning: bool,
    pub reason: String,
    pub message: String,
    /// `spec.containers{web}`; empty for the pod as a whole.
    pub field_path: String,
}

fn normal(reason: &str, message: String, field_path: String) -> PodEvent {
    PodEvent {
        warning: false,
        reason: reason.to_string(),
        message,
        field_path,
    }
}

fn warning(reason: &str, message: String, field_path: String) -> PodEvent {
    PodEvent {
        warning: true,
        reason: reason.to_string(),
        message,
        field_path,
    }
}

fn container(pod: &Pod, slot: Slot) -> Option<(&Container, String)> {
    match slot {
        Slot::Init(i) => pod
            .spec
            .init_containers
            .get(i)
            .map(|c| (c, format!("spec.initContainers{{{}}}", c.name))),
        Slot::App(i) => pod
            .spec
            .containers
            .get(i)
            .map(|c| (c, format!("spec.containers{{{}}}", c.name))),
    }
}

/// Events of an action the worker is about to perform.
pub fn on_action(pod: &Pod, action: &Action) -> Vec<PodEvent> {
    match action {
        Action::StartContainer { slot, .. } => container(pod, *slot)
            .map(|(c, path)| {
                normal(
                    "Pulled",
                    format!("Container image \"{}\" already present on machine", c.image),
                    path,
                )
            })
            .into_iter()
            .collect(),
        Action::StopContainer { slot, .. } => container(pod, *slot)
            .map(|(c, path)| normal("Killing", format!("Stopping container {}", c.name), path))
            .into_iter()
            .collect(),
        _ => Vec::new(),
    }
}

/// Events of an input the engine is about to be given.
pub fn on_input(pod: &Pod, input: &Input) -> Vec<PodEvent> {
    match input {
        Input::Started { slot, .. } => container(pod, *slot)
            .map(|(c, path)| {
                vec![
                    normal(
                        "Created",
                        format!("Created container {}", c.name),
                        path.clone(),
                    ),
                    normal("Started", format!("Started container {}", c.name), path),
                ]
            })
            .unwrap_or_default(),
        Input::StartFailed { slot, error } => container(pod, *slot)
            .map(|(_, path)| vec![warning("Failed", format!("Error: {error}"), path)])
            .unwrap_or_default(),
        Input::SandboxFailed { message } => vec![warning(
            "FailedCreatePodSandBox",
            format!("Failed to create pod sandbox: {message}"),
            String::new(),
        )],
        Input::MountFailed { message } => {
            vec![warning("FailedMount", message.clone(), String::new())]
        }
        Input::ProbeDone {
            slot,
            success: false,
            kind,
            ..
        } => container(pod, *slot)
            .map(|(_, path)| {
                let which = match kind {
                    ProbeKind::Startup => "Startup",
                    ProbeKind::Liveness => "Liveness",
                    ProbeKind::Readiness => "Readiness",
                };
                vec![warning("Unhealthy", format!("{which} probe failed"), path)]
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// `BackOff` when a container enters a back-off its previous status did not show.
pub fn on_status(pod: &Pod, before: Option<&PodStatus>, after: &PodStatus) -> Vec<PodEvent> {
    let waiting = |c: &ContainerStatus| {
        c.state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .map(|w| w.reason.clone())
    };
    let mut out = Vec::new();
    // The node refused the pod (`OutOfcpu`, `NodeAffinity`, `Taint`, …) or ended it
    // (`Evicted`, `DeadlineExceeded`): said once, when the status first carries it.
    if !after.reason.is_empty() && before.is_none_or(|b| b.reason != after.reason) {
        out.push(warning(&after.reason, after.message.clone(), String::new()));
    }
    let lists = [
        (
            &after.init_container_statuses,
            before.map(|b| &b.init_container_statuses),
            "spec.initContainers",
        ),
        (
            &after.container_statuses,
            before.map(|b| &b.container_statuses),
            "spec.containers",
        ),
    ];
    for (now, then, path) in lists {
        for c in now {
            let Some(reason) = waiting(c) else { continue };
            let was = then
                .and_then(|l| l.iter().find(|p| p.name == c.name))
                .and_then(waiting);
            if was.as_deref() == Some(reason.as_str()) {
                continue;
            }
            let field_path = format!("{path}{{{}}}", c.name);
            match reason.as_str() {
                "CrashLoopBackOff" => out.push(warning(
                    "BackOff",
                    format!(
                        "Back-off restarting failed container {} in pod {}_{}({})",
                        c.name, pod.metadata.name, pod.metadata.namespace, pod.metadata.uid
                    ),
                    field_path,
                )),
                "ImagePullBackOff" => out.push(normal(
                    "BackOff",
                    format!("Back-off pulling image \"{}\"", c.image),
                    field_path,
                )),
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::RuntimeError;
    use skiff_proto::api::pod::{ContainerState, ContainerStateWaiting};

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
            "spec": {
                "initContainers": [{"name": "setup", "image": "localhost/skiff/busybox:1"}],
                "containers": [{"name": "app", "image": "localhost/skiff/busybox:1"}]
            }
        }))
        .expect("pod")
    }

    fn waiting(name: &str, reason: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            image: "localhost/skiff/busybox:1".into(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: reason.into(),
                    message: String::new(),
                    other: Default::default(),
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }
    }

    #[test]
    fn a_start_reports_pulled_created_started_on_the_container() {
        let p = pod();
        let pulled = on_action(
            &p,
            &Action::StartContainer {
                slot: Slot::App(0),
                attempt: 0,
            },
        );
        assert_eq!(pulled.len(), 1);
        assert_eq!(pulled[0].reason, "Pulled");
        assert_eq!(pulled[0].field_path, "spec.containers{app}");
        let started = on_input(
            &p,
            &Input::Started {
                slot: Slot::Init(0),
                id: "c1".into(),
                image_id: String::new(),
            },
        );
        let reasons: Vec<_> = started.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(reasons, ["Created", "Started"]);
        assert_eq!(started[1].message, "Started container setup");
        assert_eq!(started[1].field_path, "spec.initContainers{setup}");
    }

    #[test]
    fn failures_are_warnings() {
        let p = pod();
        let e = on_input(
            &p,
            &Input::StartFailed {
                slot: Slot::App(0),
                error: RuntimeError::ImageNotFound {
                    image: "localhost/nope:1".into(),
                    message: "not present on this node".into(),
                },
            },
        );
        assert!(e[0].warning && e[0].reason == "Failed", "{e:?}");
        let e = on_input(
            &p,
            &Input::ProbeDone {
                slot: Slot::App(0),
                id: "c1".into(),
                kind: ProbeKind::Liveness,
                success: false,
            },
        );
        assert_eq!(e[0].message, "Liveness probe failed");
        let ok = on_input(
            &p,
            &Input::ProbeDone {
                slot: Slot::App(0),
                id: "c1".into(),
                kind: ProbeKind::Liveness,
                success: true,
            },
        );
        assert!(ok.is_empty());
    }

    #[test]
    fn back_off_is_reported_once_per_entry() {
        let p = pod();
        let running = PodStatus::default();
        let looping = PodStatus {
            container_statuses: vec![waiting("app", "CrashLoopBackOff")],
            ..PodStatus::default()
        };
        let e = on_status(&p, Some(&running), &looping);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].reason, "BackOff");
        assert!(
            e[0].message
                .contains("container app in pod web_default(u1)")
        );
        // Still backing off: nothing new.
        assert!(on_status(&p, Some(&looping), &looping).is_empty());
        // ContainerCreating is no back-off.
        let creating = PodStatus {
            container_statuses: vec![waiting("app", "ContainerCreating")],
            ..PodStatus::default()
        };
        assert!(on_status(&p, None, &creating).is_empty());
    }
}
