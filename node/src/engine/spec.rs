//! What the engine reads from the pod spec: each container's starting state, its probes and
//! hooks, the restart policy, the QoS class, and the runtime's container spec.

use std::fmt;
use std::time::Duration;

use skiff_proto::api::pod::Probe;
use skiff_proto::api::{Container, IntOrString, Pod, RestartPolicy, Time};
use tokio::time::Instant;

use super::Slot;
use crate::runtime::{ContainerSpec, Exit, Resources};
use crate::volumes::expand;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    Startup,
    Liveness,
    Readiness,
}

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProbeKind::Startup => "Startup",
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
        })
    }
}

/// How a probe checks: in the container, or over the pod's network address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handler {
    Exec(Vec<String>),
    Tcp {
        port: u16,
    },
    Http {
        port: u16,
        path: String,
    },
    /// A probe that cannot run (a named port the container does not declare): always fails.
    Invalid(String),
}

/// The pod's `restartPolicy` (`Always` when unset, as defaulting sets it).
pub(super) fn policy_of(pod: &Pod) -> RestartPolicy {
    pod.spec.restart_policy.unwrap_or(RestartPolicy::Always)
}

/// The pod's `terminationGracePeriodSeconds` (30 s when unset).
/// `spec.activeDeadlineSeconds` (validation keeps it positive).
pub fn active_deadline_of(pod: &Pod) -> Option<Duration> {
    pod.spec
        .active_deadline_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map(Duration::from_secs)
}

pub(super) fn grace_of(pod: &Pod) -> Duration {
    Duration::from_secs(
        u64::try_from(
            pod.spec
                .termination_grace_period_seconds
                .unwrap_or(30)
                .max(0),
        )
        .unwrap_or(30),
    )
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Run {
    /// Not running. `retry_at: None` means "start when the stage allows".
    Waiting {
        reason: String,
        message: String,
        retry_at: Option<Instant>,
    },
    Starting,
    Running {
        id: String,
        started: Instant,
        started_wall: Option<Time>,
        post_start_pending: bool,
        stopping: bool,
    },
    /// Exited and will not run again.
    Exited {
        id: String,
        exit: Exit,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct ProbeState {
    pub(super) kind: ProbeKind,
    pub(super) handler: Handler,
    pub(super) initial_delay: Duration,
    pub(super) period: Duration,
    pub(super) timeout: Duration,
    pub(super) success_threshold: u32,
    pub(super) failure_threshold: u32,
    pub(super) next_at: Option<Instant>,
    pub(super) in_flight: bool,
    pub(super) successes: u32,
    pub(super) failures: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct SlotState {
    pub(super) name: String,
    pub(super) image: String,
    /// The image the current (or last) container runs, by digest, when the runtime said.
    pub(super) image_id: String,
    pub(super) run: Run,
    /// The previous container's end (status `lastState`), kept in the runtime for logs.
    pub(super) last: Option<(String, Exit)>,
    /// Containers created so far.
    pub(super) starts: u32,
    /// The delay the next restart will wait (`None`: restart at once).
    pub(super) backoff: Option<Duration>,
    pub(super) pull_failures: u32,
    /// The startup probe has passed (or there is none).
    pub(super) started: bool,
    pub(super) ready: bool,
    pub(super) probes: Vec<ProbeState>,
    pub(super) post_start: Option<Vec<String>>,
    pub(super) pre_stop: Option<Vec<String>>,
}

fn secs(v: Option<i32>, default: i32) -> Duration {
    Duration::from_secs(u64::try_from(v.unwrap_or(default).max(0)).unwrap_or(0))
}

fn resolve_port(c: &Container, port: &IntOrString) -> Result<u16, String> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p).map_err(|_| format!("port {p} out of range")),
        IntOrString::String(name) => c
            .ports
            .iter()
            .find(|p| &p.name == name)
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| format!("container has no port named {name:?}")),
    }
}

fn probe_state(c: &Container, kind: ProbeKind, p: &Probe) -> ProbeState {
    let handler = if let Some(e) = &p.exec {
        Handler::Exec(e.command.clone())
    } else if let Some(t) = &p.tcp_socket {
        match resolve_port(c, &t.port) {
            Ok(port) => Handler::Tcp { port },
            Err(e) => Handler::Invalid(e),
        }
    } else if let Some(h) = &p.http_get {
        match resolve_port(c, &h.port) {
            Ok(port) => Handler::Http {
                port,
                path: if h.path.is_empty() {
                    "/".into()
                } else {
                    h.path.clone()
                },
            },
            Err(e) => Handler::Invalid(e),
        }
    } else {
        Handler::Invalid("probe has no handler".into())
    };
    let threshold = |v: Option<i32>, d: i32| u32::try_from(v.unwrap_or(d).max(1)).unwrap_or(1);
    ProbeState {
        kind,
        handler,
        initial_delay: secs(p.initial_delay_seconds, 0),
        period: secs(p.period_seconds, 10).max(Duration::from_secs(1)),
        timeout: secs(p.timeout_seconds, 1).max(Duration::from_secs(1)),
        success_threshold: threshold(p.success_threshold, 1),
        failure_threshold: threshold(p.failure_threshold, 3),
        next_at: None,
        in_flight: false,
        successes: 0,
        failures: 0,
    }
}

pub(super) fn slot_state(c: &Container, init: bool) -> SlotState {
    let mut probes = Vec::new();
    if !init {
        for (kind, p) in [
            (ProbeKind::Startup, &c.startup_probe),
            (ProbeKind::Liveness, &c.liveness_probe),
            (ProbeKind::Readiness, &c.readiness_probe),
        ] {
            if let Some(p) = p {
                probes.push(probe_state(c, kind, p));
            }
        }
    }
    let hook = |h: Option<&skiff_proto::api::pod::LifecycleHandler>| {
        h.and_then(|h| h.exec.as_ref()).map(|e| e.command.clone())
    };
    let lifecycle = c.lifecycle.as_ref();
    SlotState {
        name: c.name.clone(),
        image: c.image.clone(),
        image_id: String::new(),
        run: Run::Waiting {
            reason: if init {
                "PodInitializing".into()
            } else {
                "ContainerCreating".into()
            },
            message: String::new(),
            retry_at: None,
        },
        last: None,
        starts: 0,
        backoff: None,
        pull_failures: 0,
        started: false,
        ready: false,
        probes,
        post_start: hook(lifecycle.and_then(|l| l.post_start.as_ref())),
        pre_stop: hook(lifecycle.and_then(|l| l.pre_stop.as_ref())),
    }
}

/// The pod's QoS class, as the kubelet computes it: `Guaranteed` when every container limits
/// cpu and memory and requests the same (requests default to limits), `BestEffort` when no
/// container requests or limits anything, `Burstable` otherwise.
pub fn qos_class(pod: &Pod) -> &'static str {
    let all = || pod.spec.init_containers.iter().chain(&pod.spec.containers);
    let best_effort =
        all().all(|c| c.resources.requests.is_empty() && c.resources.limits.is_empty());
    if best_effort {
        return "BestEffort";
    }
    let guaranteed = all().all(|c| {
        ["cpu", "memory"].iter().all(|r| {
            let limit = c.resources.limits.get(*r);
            let request = c.resources.requests.get(*r).or(limit);
            limit.is_some() && request == limit
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// The pod's hostname, as the kubelet chooses it: `spec.hostname` when set, else the pod's
/// name, cut to 63 characters (a DNS label) without a trailing `-` or `.`.
pub fn hostname_of(pod: &Pod) -> String {
    let chosen = pod
        .spec
        .other
        .get("hostname")
        .and_then(serde_json::Value::as_str)
        .filter(|h| !h.is_empty())
        .unwrap_or(&pod.metadata.name);
    let cut: String = chosen.chars().take(63).collect();
    cut.trim_end_matches(['-', '.']).to_owned()
}

/// The container of `slot`.
pub fn container_of(pod: &Pod, slot: Slot) -> Option<&Container> {
    match slot {
        Slot::Init(i) => pod.spec.init_containers.get(i),
        Slot::App(i) => pod.spec.containers.get(i),
    }
}

/// The runtime's container spec for one of the pod's containers, with its environment and
/// mounts as the agent resolved them.
pub fn container_spec(
    pod: &Pod,
    slot: Slot,
    attempt: u32,
    env: Vec<(String, String)>,
    mounts: Vec<crate::volumes::Mount>,
) -> Option<ContainerSpec> {
    let c = container_of(pod, slot)?;
    let init = matches!(slot, Slot::Init(_));
    let req = |r: &str| c.resources.requests.get(r).map(|q| q.milli_value());
    let lim = |r: &str| c.resources.limits.get(r);
    Some(ContainerSpec {
        pod_uid: pod.metadata.uid.clone(),
        name: c.name.clone(),
        image: c.image.clone(),
        // `$(NAME)` in the command and its arguments reads the container's environment, as
        // the kubelet expands them.
        command: c.command.iter().map(|w| expand(w, &env)).collect(),
        args: c.args.iter().map(|w| expand(w, &env)).collect(),
        env,
        mounts,
        security: crate::security::security_of(pod, c),
        working_dir: c.working_dir.clone(),
        ports: c.ports.iter().map(|p| p.container_port).collect(),
        resources: Resources {
            // Requests default to limits, as the API server defaults them.
            cpu_request_milli: req("cpu")
                .or_else(|| lim("cpu").map(|q| q.milli_value()))
                .unwrap_or(0),
            cpu_limit_milli: lim("cpu").map(|q| q.milli_value()),
            memory_limit_bytes: lim("memory").map(|q| q.value()),
        },
        init,
        attempt,
    })
}

#[cfg(test)]
mod tests {
    use super::{hostname_of, qos_class};
    use crate::engine::fixtures::{one_container, pod};

    #[test]
    fn qos_classes() {
        assert_eq!(qos_class(&one_container()), "BestEffort");
        let g = pod(
            serde_json::json!({"containers": [{"name": "c", "image": "i",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}),
        );
        assert_eq!(qos_class(&g), "Guaranteed");
        let b = pod(
            serde_json::json!({"containers": [{"name": "c", "image": "i",
            "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1", "memory": "1Gi"}}}]}),
        );
        assert_eq!(qos_class(&b), "Burstable");
    }

    /// `spec.hostname` names the pod's host; else its name, cut to a DNS label.
    #[test]
    fn hostnames() {
        let mut p = pod(
            serde_json::json!({"hostname": "pi-3", "containers": [{"name": "c", "image": "i"}]}),
        );
        p.metadata.name = "pi-3-x7k2p".into();
        assert_eq!(hostname_of(&p), "pi-3");
        let mut q = one_container();
        q.metadata.name = format!("{}-b", "a".repeat(62));
        assert_eq!(hostname_of(&q), "a".repeat(62));
    }
}
