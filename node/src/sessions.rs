//! The agent's interactive sessions (`kubectl exec`, `kubectl attach`) and forwarded
//! connections (`kubectl port-forward`), as the kubelet serves /exec, /attach and
//! /portforward: the API server opens one gRPC stream per session or connection, the agent
//! finds the pod's running container (or sandbox) through the runtime, as the log service
//! does, and relays the stream to the runtime's session or connection. Served beside the log service, at the Node's
//! [`crate::logs::ENDPOINT_ANNOTATION`].

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use skiff_proto::tls::Subject;

use crate::guard::Guard;
use crate::logs::{find_container, status};
use crate::runtime::{
    ContainerState, PortInput, Runtime, SessionInput, SessionOutput, SessionSpec,
};

use pb::port_forward_input::Input as PortIn;
use pb::session_input::Input;
use pb::session_output::Output;
pub use skiff_proto::node::v1 as pb;

/// Serves sessions in the containers of `runtime`, to callers `guard` allows (to everyone
/// without one: plain TCP on loopback).
#[derive(Debug, Clone)]
pub struct SessionService {
    runtime: Arc<dyn Runtime>,
    guard: Option<Arc<Guard>>,
}

impl SessionService {
    pub fn new(runtime: Arc<dyn Runtime>, guard: Option<Arc<Guard>>) -> SessionService {
        SessionService { runtime, guard }
    }

    /// The gRPC server for this service.
    pub fn server(self) -> pb::sessions_server::SessionsServer<SessionService> {
        pb::sessions_server::SessionsServer::new(self)
    }

    /// Who calls, when the port has a guard (TLS with client certificates).
    fn caller<T>(&self, request: &Request<T>) -> Result<Option<Subject>, Status> {
        match &self.guard {
            Some(_) => Guard::caller(request).map(Some),
            None => Ok(None),
        }
    }
}

fn to_input(input: Input) -> Option<SessionInput> {
    Some(match input {
        Input::Start(_) => return None,
        Input::Stdin(data) => SessionInput::Stdin(data),
        Input::Resize(size) => SessionInput::Resize {
            width: u16::try_from(size.width).unwrap_or(u16::MAX),
            height: u16::try_from(size.height).unwrap_or(u16::MAX),
        },
        Input::CloseStdin(_) => SessionInput::CloseStdin,
    })
}

fn to_output(output: SessionOutput) -> pb::SessionOutput {
    pb::SessionOutput {
        output: Some(match output {
            SessionOutput::Stdout(data) => Output::Stdout(data),
            SessionOutput::Stderr(data) => Output::Stderr(data),
            SessionOutput::Exit(code) => Output::ExitCode(code),
        }),
    }
}

type OutputStream = Pin<Box<dyn Stream<Item = Result<pb::SessionOutput, Status>> + Send>>;
type PortStream = Pin<Box<dyn Stream<Item = Result<pb::PortForwardOutput, Status>> + Send>>;

#[tonic::async_trait]
impl pb::sessions_server::Sessions for SessionService {
    type SessionStream = OutputStream;

    async fn session(
        &self,
        request: Request<Streaming<pb::SessionInput>>,
    ) -> Result<Response<OutputStream>, Status> {
        let caller = self.caller(&request)?;
        let mut inbound = request.into_inner();
        let Some(pb::SessionInput {
            input: Some(Input::Start(start)),
        }) = inbound.message().await?
        else {
            return Err(Status::invalid_argument(
                "a session starts with its start message",
            ));
        };
        if !start.stdin && !start.stdout && !start.stderr {
            return Err(Status::invalid_argument(
                "a session needs at least one of stdin, stdout and stderr",
            ));
        }
        if let (Some(guard), Some(caller)) = (&self.guard, &caller) {
            // A session without a command attaches to the container's own process.
            let subresource = if start.command.is_empty() {
                "attach"
            } else {
                "exec"
            };
            guard
                .check(caller, "create", subresource, &start.namespace, &start.pod)
                .await?;
        }
        let container = find_container(
            &*self.runtime,
            &start.node,
            &start.namespace,
            &start.pod,
            &start.container,
            false,
        )
        .await?;
        if !matches!(container.state, ContainerState::Running { .. }) {
            return Err(Status::failed_precondition(format!(
                "container {} of pod {}/{} is not running",
                container.name, start.namespace, start.pod
            )));
        }
        let spec = SessionSpec {
            command: start.command,
            stdin: start.stdin,
            stdout: start.stdout,
            stderr: start.stderr,
            tty: start.tty,
        };
        let session = self
            .runtime
            .session(&container.id, &spec)
            .await
            .map_err(status)?;
        let input = session.input;
        // Bounded by the call: it ends when the caller's stream does (which closes standard
        // input) or when the session stops reading.
        tokio::spawn(async move {
            while let Ok(Some(msg)) = inbound.message().await {
                let Some(i) = msg.input.and_then(to_input) else {
                    continue;
                };
                if input.send(i).await.is_err() {
                    return;
                }
            }
        });
        let output = ReceiverStream::new(session.output)
            .map(|out| out.map(to_output).map_err(status))
            .boxed();
        Ok(Response::new(output))
    }

    type PortForwardStream = PortStream;

    async fn port_forward(
        &self,
        request: Request<Streaming<pb::PortForwardInput>>,
    ) -> Result<Response<PortStream>, Status> {
        let caller = self.caller(&request)?;
        let mut inbound = request.into_inner();
        let Some(pb::PortForwardInput {
            input: Some(PortIn::Start(start)),
        }) = inbound.message().await?
        else {
            return Err(Status::invalid_argument(
                "a forwarded connection starts with its start message",
            ));
        };
        let port = u16::try_from(start.port)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| {
                Status::invalid_argument(format!("port {} is not a TCP port", start.port))
            })?;
        if let (Some(guard), Some(caller)) = (&self.guard, &caller) {
            guard
                .check(
                    caller,
                    "create",
                    "portforward",
                    &start.namespace,
                    &start.pod,
                )
                .await?;
        }
        let sandbox = self
            .runtime
            .list_sandboxes(&start.node)
            .await
            .map_err(status)?
            .into_iter()
            .find(|s| s.ready && s.namespace == start.namespace && s.pod_name == start.pod)
            .ok_or_else(|| {
                Status::not_found(format!(
                    "pod {}/{} has no running sandbox on node {}",
                    start.namespace, start.pod, start.node
                ))
            })?;
        let connection = self
            .runtime
            .port_forward(&sandbox.id, port)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let input = connection.input;
        // Bounded by the call: it ends when the caller's stream does (which closes the
        // connection for writing) or when the connection stops reading.
        tokio::spawn(async move {
            while let Ok(Some(msg)) = inbound.message().await {
                let sent = match msg.input {
                    Some(PortIn::Data(data)) => input.send(PortInput::Data(data)).await,
                    Some(PortIn::CloseWrite(_)) => break,
                    Some(PortIn::Start(_)) | None => continue,
                };
                if sent.is_err() {
                    return;
                }
            }
            let _ = input.send(PortInput::CloseWrite).await;
        });
        let output = ReceiverStream::new(connection.output)
            .map(|out| {
                out.map(|data| pb::PortForwardOutput { data })
                    .map_err(|e| Status::unavailable(e.to_string()))
            })
            .boxed();
        Ok(Response::new(output))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{ContainerSpec, SandboxSpec};
    use crate::sim::{SimConfig, SimRuntime};

    fn start(command: &[&str], stdin: bool) -> pb::SessionInput {
        pb::SessionInput {
            input: Some(Input::Start(pb::SessionStart {
                node: "n1".into(),
                namespace: "default".into(),
                pod: "web".into(),
                command: command.iter().map(|s| s.to_string()).collect(),
                stdin,
                stdout: true,
                stderr: true,
                ..pb::SessionStart::default()
            })),
        }
    }

    async fn running_pod() -> SimRuntime {
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
        let spec = ContainerSpec {
            pod_uid: "u".into(),
            name: "c".into(),
            image: "b:1".into(),
            ports: vec![8080],
            ..ContainerSpec::default()
        };
        let id = rt.create_container(&sb, &spec).await.unwrap();
        rt.start_container(&id).await.unwrap();
        rt
    }

    /// Serves `rt`'s sessions on an ephemeral port and returns a client of them.
    async fn serve(
        rt: SimRuntime,
    ) -> pb::sessions_client::SessionsClient<tonic::transport::Channel> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = SessionService::new(Arc::new(rt), None).server();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(server)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        pb::sessions_client::SessionsClient::connect(format!("http://{addr}"))
            .await
            .unwrap()
    }

    /// Drives a session as the API server does: the start message, then `input`, then the end
    /// of input; returns stdout, stderr and the exit code.
    async fn session(
        client: &mut pb::sessions_client::SessionsClient<tonic::transport::Channel>,
        first: pb::SessionInput,
        input: Vec<Input>,
    ) -> Result<(String, String, i32), Status> {
        let messages = std::iter::once(first).chain(
            input
                .into_iter()
                .map(|i| pb::SessionInput { input: Some(i) }),
        );
        let mut out = client
            .session(tokio_stream::iter(messages.collect::<Vec<_>>()))
            .await?
            .into_inner();
        let (mut stdout, mut stderr) = (String::new(), String::new());
        while let Some(o) = out.message().await? {
            match o.output {
                Some(Output::Stdout(d)) => stdout.push_str(&String::from_utf8_lossy(&d)),
                Some(Output::Stderr(d)) => stderr.push_str(&String::from_utf8_lossy(&d)),
                Some(Output::ExitCode(c)) => return Ok((stdout, stderr, c)),
                None => {}
            }
        }
        panic!("the session ended without an exit code");
    }

    #[tokio::test]
    async fn exec_runs_commands_and_reports_their_status() {
        let mut svc = serve(running_pod().await).await;
        let (out, err, code) = session(
            &mut svc,
            start(&["sh", "-c", "echo hi; nope; exit 3"], false),
            vec![],
        )
        .await
        .unwrap();
        assert_eq!(
            (out.as_str(), err.as_str(), code),
            ("hi\n", "sh: nope: not found\n", 3)
        );
        // An interactive shell runs what it reads; `cat` copies its input back.
        let lines = vec![Input::Stdin(b"echo one\necho two\n".to_vec())];
        let (out, _, code) = session(&mut svc, start(&["sh"], true), lines)
            .await
            .unwrap();
        assert_eq!((out.as_str(), code), ("one\ntwo\n", 0));
        let text = vec![Input::Stdin(b"abc".to_vec()), Input::CloseStdin(true)];
        let (out, _, _) = session(&mut svc, start(&["cat"], true), text)
            .await
            .unwrap();
        assert_eq!(out, "abc");
    }

    #[tokio::test]
    async fn refusals_come_before_any_output() {
        let mut svc = serve(running_pod().await).await;
        let mut other = start(&["true"], false);
        if let Some(Input::Start(s)) = &mut other.input {
            s.pod = "nope".into();
        }
        let e = session(&mut svc, other, vec![]).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound);
        let e = session(
            &mut svc,
            pb::SessionInput {
                input: Some(Input::Stdin(vec![])),
            },
            vec![],
        )
        .await
        .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
    }

    /// Forwards one connection as the API server does: the start message, then `data`, then
    /// the end of input; returns what the pod sent back.
    async fn forward(
        client: &mut pb::sessions_client::SessionsClient<tonic::transport::Channel>,
        pod: &str,
        port: u32,
        data: &[&str],
    ) -> Result<String, Status> {
        let start = PortIn::Start(pb::PortForwardStart {
            node: "n1".into(),
            namespace: "default".into(),
            pod: pod.into(),
            port,
        });
        let messages: Vec<_> = std::iter::once(start)
            .chain(data.iter().map(|d| PortIn::Data(d.as_bytes().to_vec())))
            .chain(std::iter::once(PortIn::CloseWrite(true)))
            .map(|i| pb::PortForwardInput { input: Some(i) })
            .collect();
        let mut out = client
            .port_forward(tokio_stream::iter(messages))
            .await?
            .into_inner();
        let mut received = String::new();
        while let Some(o) = out.message().await? {
            received.push_str(&String::from_utf8_lossy(&o.data));
        }
        Ok(received)
    }

    #[tokio::test]
    async fn forwarded_connections_reach_declared_ports_only() {
        let mut svc = serve(running_pod().await).await;
        // The simulated port echoes, and ends once the client has closed its end.
        let echoed = forward(&mut svc, "web", 8080, &["GET / HTTP/1.0\r\n", "\r\n"]).await;
        assert_eq!(echoed.unwrap(), "GET / HTTP/1.0\r\n\r\n");
        let refused = forward(&mut svc, "web", 9090, &[]).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unavailable);
        assert!(
            refused.message().contains("connection refused"),
            "{}",
            refused.message()
        );
        let e = forward(&mut svc, "nope", 8080, &[]).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound);
        let e = forward(&mut svc, "web", 70000, &[]).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
    }
}
