//! The agent's log service: container logs read through the runtime where they are written,
//! as `kubectl logs` reads them through the kubelet. The service finds a container by asking
//! the runtime (sandbox by pod, container by name, newest attempt first), so it needs nothing
//! from the pod workers and works for every node a process hosts.
//!
//! Each Node carries the service's address in its [`ENDPOINT_ANNOTATION`], which is how
//! `skiff node logs` finds the agent of a pod's node.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::guard::Guard;
use crate::runtime::{Container, ContainerState, Runtime, RuntimeError};

/// The generated service (`proto/skiff/node/v1/logs.proto` in skiff-proto).
pub use skiff_proto::node::v1 as pb;

pub use skiff_proto::logs::{ENDPOINT_ANNOTATION, text_of};

/// Serves container logs from `runtime`, to callers `guard` allows (to everyone without
/// one: plain TCP on loopback).
#[derive(Debug, Clone)]
pub struct LogService {
    runtime: Arc<dyn Runtime>,
    guard: Option<Arc<Guard>>,
}

impl LogService {
    pub fn new(runtime: Arc<dyn Runtime>, guard: Option<Arc<Guard>>) -> LogService {
        LogService { runtime, guard }
    }

    /// The gRPC server for this service.
    pub fn server(self) -> pb::logs_server::LogsServer<LogService> {
        pb::logs_server::LogsServer::new(self)
    }
}

pub(crate) fn status(e: RuntimeError) -> Status {
    match e {
        RuntimeError::NotFound { .. } => Status::not_found(e.to_string()),
        RuntimeError::Timeout { .. } => Status::deadline_exceeded(e.to_string()),
        _ => Status::internal(e.to_string()),
    }
}

/// The container of a pod on `node` that a log read or a session names: `container`, or the
/// pod's only app container when empty; its current instance, or with `previous` the last one
/// that ended.
pub(crate) async fn find_container(
    runtime: &dyn Runtime,
    node: &str,
    namespace: &str,
    pod_name: &str,
    container: &str,
    previous: bool,
) -> Result<Container, Status> {
    let pod = format!("{namespace}/{pod_name}");
    let mut sandboxes: Vec<_> = runtime
        .list_sandboxes(node)
        .await
        .map_err(status)?
        .into_iter()
        .filter(|s| s.namespace == namespace && s.pod_name == pod_name)
        .collect();
    // The ready sandbox first: a pod's older, stopped sandboxes hold older containers.
    sandboxes.sort_by_key(|s| !s.ready);
    let mut containers = Vec::new();
    for sb in &sandboxes {
        containers.extend(
            runtime
                .list_containers(&sb.id)
                .await
                .map_err(status)?
                .into_iter()
                .filter(|c| !c.init || !container.is_empty()),
        );
    }
    let name = if container.is_empty() {
        let mut names: Vec<&str> = containers.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        match names.as_slice() {
            [one] => one.to_string(),
            [] => {
                return Err(Status::not_found(format!(
                    "pod {pod} has no containers on node {node}"
                )));
            }
            many => {
                return Err(Status::invalid_argument(format!(
                    "pod {pod} has several containers, choose one of: {}",
                    many.join(", ")
                )));
            }
        }
    } else {
        container.to_string()
    };
    let mut attempts: Vec<Container> = containers.into_iter().filter(|c| c.name == name).collect();
    attempts.sort_by_key(|c| std::cmp::Reverse(c.attempt));
    // `previous` is the last instance that ended: the newest one while it waits to be
    // restarted (as the kubelet answers during CrashLoopBackOff), else the one before.
    let newest_ended = attempts
        .first()
        .is_some_and(|c| matches!(c.state, ContainerState::Exited(_)));
    let index = usize::from(previous && !newest_ended);
    if index >= attempts.len() {
        return Err(Status::not_found(if previous {
            format!("container {name} of pod {pod} has no previous instance")
        } else {
            format!("container {name} of pod {pod} not found")
        }));
    }
    Ok(attempts.swap_remove(index))
}

#[tonic::async_trait]
impl pb::logs_server::Logs for LogService {
    async fn container_log(
        &self,
        request: Request<pb::ContainerLogRequest>,
    ) -> Result<Response<pb::ContainerLogResponse>, Status> {
        if let Some(guard) = &self.guard {
            let caller = Guard::caller(&request)?;
            let r = request.get_ref();
            guard
                .check(&caller, "get", "log", &r.namespace, &r.pod)
                .await?;
        }
        let r = request.into_inner();
        let chosen = find_container(
            &*self.runtime,
            &r.node,
            &r.namespace,
            &r.pod,
            &r.container,
            r.previous,
        )
        .await?;
        let tail = (r.tail_lines > 0).then(|| usize::try_from(r.tail_lines).unwrap_or(usize::MAX));
        let data = self.runtime.logs(&chosen.id, tail).await.map_err(status)?;
        Ok(Response::new(pb::ContainerLogResponse { data }))
    }
}

#[cfg(test)]
mod tests {
    use super::pb::logs_server::Logs;
    use super::*;
    use crate::runtime::{ContainerSpec, SandboxSpec};
    use crate::sim::{SimConfig, SimRuntime};

    #[tokio::test(start_paused = true)]
    async fn finds_current_and_previous_containers() {
        let rt = SimRuntime::new(SimConfig::default());
        let sb = rt
            .run_sandbox(&SandboxSpec {
                node: "n1".into(),
                pod_uid: "u".into(),
                pod_name: "web".into(),
                namespace: "default".into(),
                ..SandboxSpec::default()
            })
            .await
            .unwrap();
        for (attempt, word) in [(0, "first"), (1, "second")] {
            let id = rt
                .create_container(
                    &sb,
                    &ContainerSpec {
                        pod_uid: "u".into(),
                        name: "c".into(),
                        image: "b:1".into(),
                        command: vec!["sh".into(), "-c".into(), format!("echo {word}; sleep 100")],
                        attempt,
                        ..ContainerSpec::default()
                    },
                )
                .await
                .unwrap();
            rt.start_container(&id).await.unwrap();
        }
        let svc = LogService::new(Arc::new(rt), None);
        let ask = |previous| pb::ContainerLogRequest {
            node: "n1".into(),
            namespace: "default".into(),
            pod: "web".into(),
            previous,
            ..pb::ContainerLogRequest::default()
        };
        let now = svc.container_log(Request::new(ask(false))).await.unwrap();
        assert_eq!(text_of(&now.into_inner().data), "second\n");
        let before = svc.container_log(Request::new(ask(true))).await.unwrap();
        assert_eq!(text_of(&before.into_inner().data), "first\n");
        let mut other = ask(false);
        other.pod = "nope".into();
        let err = svc.container_log(Request::new(other)).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::NotFound);
    }
}
