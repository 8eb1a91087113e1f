//! `pods/exec` and `pods/attach` over WebSocket, as kubectl 1.32 speaks them by default
//! (`v5.channel.k8s.io`; `v4.channel.k8s.io` and `channel.k8s.io` for older clients and
//! kube-rs). Each binary message starts with its channel: 0 stdin, 1 stdout, 2 stderr, 3 the
//! final `metav1.Status`, 4 terminal resizes, and (v5) 255 to close a stream. The session runs
//! in the agent of the pod's node ([`skiff_proto::node::v1`]'s `Sessions`), which this relays
//! to; everything that can be refused (no such pod or container, not running, agent
//! unreachable) is refused before the upgrade, with a `metav1.Status`.
//!
//! SPDY, kubectl's fallback and the protocol of client-go before 1.30, is served on a POST
//! upgraded to SPDY/3.1 ([`streams`]).

mod streams;

use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use hyper::upgrade::OnUpgrade;
use serde_json::json;
use skiff_proto::node::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::logs::pod_agent;
use super::request::Params;
use super::status::{ApiError, Reason};
use super::{Connect, spdy};
use crate::cluster::ClusterApi;
use pb::session_input::Input;
use pb::session_output::Output;

/// The subprotocols served, in order of preference.
pub const PROTOCOLS: [&str; 3] = ["v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io"];

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
/// v5: `[CLOSE, channel]` closes that stream (the client's end of stdin).
const CLOSE: u8 = 255;

/// How long after the upgrade the first frame waits (see [`Relay::run`]).
const STREAMS_GRACE: std::time::Duration = std::time::Duration::from_millis(50);

/// The session a request asks for, checked as kube-apiserver checks `PodExecOptions` and
/// `PodAttachOptions`.
fn start_of(attach: bool, params: &Params) -> Result<pb::SessionStart, ApiError> {
    let stdout = params.stdout.unwrap_or(true);
    let stderr = params.stderr.unwrap_or(true) && !params.tty;
    if !attach && params.command.is_empty() {
        return Err(ApiError::new(
            Reason::BadRequest,
            "you must specify at least one command for the container",
        ));
    }
    if attach && !params.command.is_empty() {
        return Err(ApiError::bad_request(
            "command: Forbidden: attach runs no command",
        ));
    }
    if !params.stdin && !stdout && !stderr {
        return Err(ApiError::bad_request(
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    Ok(pb::SessionStart {
        command: params.command.clone(),
        stdin: params.stdin,
        stdout,
        stderr,
        tty: params.tty,
        ..pb::SessionStart::default()
    })
}

/// How a session's client is reached.
enum Transport {
    /// A WebSocket of one of [`PROTOCOLS`].
    WebSocket(WebSocketUpgrade, String),
    /// SPDY, with one of [`streams::PROTOCOLS`].
    Spdy(OnUpgrade, &'static str),
}

/// GET (WebSocket) or POST (WebSocket or SPDY) `pods/<name>/exec` and `pods/<name>/attach`.
pub(super) async fn session(api: &ClusterApi, c: Connect) -> Result<Response, ApiError> {
    let Connect {
        target,
        params,
        parts,
        websocket,
        upgrade,
    } = c;
    let (target, params, method, headers) = (&target, &params, &parts.method, &parts.headers);
    let attach = target.subresource.as_deref() == Some("attach");
    let mut start = start_of(attach, params)?;
    let agent = pod_agent(api, target, &params.container).await?;
    let transport = if let Some(websocket) = websocket {
        let websocket = websocket.protocols(PROTOCOLS);
        let Some(protocol) = websocket
            .selected_protocol()
            .and_then(|p| p.to_str().ok())
            .map(str::to_string)
        else {
            return Err(ApiError::bad_request(format!(
                "no supported WebSocket subprotocol requested; supported: {}",
                PROTOCOLS.join(", ")
            )));
        };
        Transport::WebSocket(websocket, protocol)
    } else if let Some(upgrade) = upgrade.filter(|_| spdy::asked(method, headers)) {
        Transport::Spdy(upgrade, spdy::negotiate(headers, &streams::PROTOCOLS)?)
    } else {
        return Err(ApiError::bad_request(format!(
            "pods/{} is served over WebSocket ({}) or a POST upgraded to SPDY/3.1",
            if attach { "attach" } else { "exec" },
            PROTOCOLS.join(", ")
        )));
    };
    start.node = agent.node.clone();
    start.namespace = target.namespace.clone();
    start.pod = target.name.clone();
    start.container = agent.container.clone();
    let channel = agent.connect().await?;
    let mut client = pb::sessions_client::SessionsClient::new(channel);
    let (input, input_rx) = mpsc::channel::<pb::SessionInput>(16);
    let first = pb::SessionInput {
        input: Some(Input::Start(start.clone())),
    };
    let requests = tokio_stream::once(first).chain(ReceiverStream::new(input_rx));
    let output = client
        .session(requests)
        .await
        .map_err(|s| agent.refused(&s))?
        .into_inner();
    let relay = |v5| Relay {
        v5,
        stdin: start.stdin.then_some(input),
        command: start.command.clone(),
    };
    Ok(match transport {
        Transport::WebSocket(websocket, protocol) => {
            let relay = relay(protocol == PROTOCOLS[0]);
            websocket.on_upgrade(move |socket| relay.run(socket, output))
        }
        Transport::Spdy(upgrade, protocol) => {
            let session = streams::Session {
                relay: relay(false),
                protocol,
                stdout: start.stdout,
                stderr: start.stderr,
                tty: start.tty,
            };
            spdy::switch(upgrade, protocol, move |read, write| {
                streams::serve(read, write, session, output)
            })
        }
    })
}

/// One session's WebSocket, relayed to and from the agent's stream.
struct Relay {
    v5: bool,
    /// Standard input towards the agent; dropped when the client closes it.
    stdin: Option<mpsc::Sender<pb::SessionInput>>,
    command: Vec<String>,
}

/// Sends `input` towards the container; a session whose input is gone (the agent's stream
/// ended) takes no more.
async fn send_input(stdin: &mut Option<mpsc::Sender<pb::SessionInput>>, input: Input) {
    if let Some(tx) = stdin
        && tx
            .send(pb::SessionInput { input: Some(input) })
            .await
            .is_err()
    {
        *stdin = None;
    }
}

/// A binary message of the channel protocols: `channel`'s byte, then `data` (also
/// port-forward's, [`super::portforward`]).
pub(super) fn frame(channel: u8, data: &[u8]) -> Message {
    let mut b = Vec::with_capacity(data.len() + 1);
    b.push(channel);
    b.extend_from_slice(data);
    Message::Binary(Bytes::from(b))
}

impl Relay {
    /// The `metav1.Status` of the error channel for a session that ended with `ended`.
    fn status(&self, ended: Result<i32, String>) -> serde_json::Value {
        match ended {
            Ok(0) => json!({ "metadata": {}, "status": "Success" }),
            Ok(code) => json!({
                "metadata": {},
                "status": "Failure",
                "message": format!(
                    "command terminated with non-zero exit code: error executing command {:?}, exit code {code}",
                    self.command
                ),
                "reason": "NonZeroExitCode",
                "details": { "causes": [{ "reason": "ExitCode", "message": code.to_string() }] },
            }),
            Err(message) => json!({
                "metadata": {},
                "status": "Failure",
                "message": message,
                "reason": "InternalError",
                "code": 500,
            }),
        }
    }

    /// Forwards a client's message towards the agent.
    async fn forward(&mut self, data: &[u8]) {
        let Some((&channel, body)) = data.split_first() else {
            return;
        };
        let input = match channel {
            STDIN if !body.is_empty() => Input::Stdin(body.to_vec()),
            RESIZE => {
                let size: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
                let dim = |k: &str| u32::try_from(size[k].as_u64().unwrap_or(0)).unwrap_or(0);
                Input::Resize(pb::TerminalSize {
                    width: dim("Width"),
                    height: dim("Height"),
                })
            }
            CLOSE if self.v5 && body.first() == Some(&STDIN) => {
                // Ending the request stream closes standard input in the container.
                self.stdin = None;
                return;
            }
            _ => return,
        };
        send_input(&mut self.stdin, input).await;
    }

    async fn run(mut self, socket: WebSocket, mut output: tonic::Streaming<pb::SessionOutput>) {
        // client-go's executor (kubectl's) starts reading the socket before it has created
        // its streams, and drops a frame of a stream it has not created yet ("Unknown stream
        // id 1, discarding message"), the final status's included. The session started before
        // the upgrade, so its first output is ready at once, and over TLS it can arrive in the
        // same read as the upgrade's answer. kube-apiserver's first frame comes a few round
        // trips later (it dials the kubelet after the upgrade); this waits as long.
        tokio::time::sleep(STREAMS_GRACE).await;
        let (mut sink, mut stream) = socket.split();
        // Each direction on its own: a command that does not read its input (or a client
        // that does not read the output) holds up only that direction (`exec -i … cat` of
        // more than the buffers hold needs both).
        let inbound = async {
            loop {
                match stream.next().await {
                    Some(Ok(Message::Binary(data))) => self.forward(&data).await,
                    Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                    Some(Ok(_)) => {}
                }
            }
        };
        let outbound = async {
            loop {
                let msg = match output.message().await {
                    Ok(Some(pb::SessionOutput { output: Some(o) })) => o,
                    Ok(Some(_)) => continue,
                    Ok(None) => {
                        return Some(Err(
                            "the agent ended the session without an exit status".to_string()
                        ));
                    }
                    Err(s) => return Some(Err(s.message().to_string())),
                };
                let sent = match msg {
                    Output::Stdout(d) => sink.send(frame(STDOUT, &d)).await,
                    Output::Stderr(d) => sink.send(frame(STDERR, &d)).await,
                    Output::ExitCode(code) => return Some(Ok(code)),
                };
                if sent.is_err() {
                    return None;
                }
            }
        };
        // Err(true): the client went away; Err(false): it can no longer be written to.
        let ended = tokio::select! {
            () = inbound => Err(true),
            ended = outbound => ended.ok_or(false),
        };
        let ended = match ended {
            Ok(ended) => ended,
            Err(client_left) => {
                // Dropping the agent's stream ends the session. The client's close, when it
                // sent one, is answered.
                if client_left {
                    let _ = sink.close().await;
                }
                return;
            }
        };
        let status = self.status(ended).to_string();
        if sink.send(frame(ERROR, status.as_bytes())).await.is_ok() {
            let _ = sink
                .send(Message::Close(Some(CloseFrame {
                    code: axum::extract::ws::close_code::NORMAL,
                    reason: "".into(),
                })))
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(query: &str) -> Params {
        Params::parse(Some(query)).unwrap()
    }

    #[test]
    fn options_are_checked_as_kube_apiserver_checks_them() {
        let s = start_of(false, &params("command=sh&command=-c&command=echo%20hi")).unwrap();
        assert_eq!(s.command, ["sh", "-c", "echo hi"]);
        assert!(s.stdout && s.stderr && !s.stdin && !s.tty);
        // A terminal has no separate standard error.
        let s = start_of(false, &params("command=sh&stdin=true&tty=true")).unwrap();
        assert!(s.stdin && s.stdout && !s.stderr && s.tty);
        let e = start_of(false, &params("stdin=true")).unwrap_err();
        assert!(e.message.contains("at least one command"), "{}", e.message);
        let e = start_of(false, &params("command=ls&stdout=false&stderr=false")).unwrap_err();
        assert!(e.message.contains("at least 1 of stdin"), "{}", e.message);
        assert!(start_of(true, &params("stdout=true")).is_ok());
        assert!(start_of(true, &params("command=ls")).is_err());
    }

    #[test]
    fn exit_codes_become_kubectl_statuses() {
        let relay = Relay {
            v5: true,
            stdin: None,
            command: vec!["false".into()],
        };
        assert_eq!(relay.status(Ok(0))["status"], "Success");
        let failed = relay.status(Ok(3));
        assert_eq!(failed["reason"], "NonZeroExitCode");
        assert_eq!(failed["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(failed["details"]["causes"][0]["message"], "3");
        assert_eq!(relay.status(Err("gone".into()))["message"], "gone");
    }
}
