//! Interactive sessions through containerd's CRI streaming server. CRI's `Exec` and `Attach`
//! answer with a URL on that server; the agent connects to it over WebSocket with the
//! `v4.channel.k8s.io` subprotocol (each binary message starts with its channel: 0 stdin,
//! 1 stdout, 2 stderr, 3 the final `metav1.Status`, 4 terminal resizes) and relays it.
//!
//! v4 has no way to close standard input on its own (v5's close signal is newer than
//! containerd 1.6's streaming server), so standard input that the client closes stays open in
//! the container until the command ends or the client goes away.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

use crate::runtime::{
    PortConnection, PortInput, Result, RuntimeError, Session, SessionInput, SessionOutput,
};

/// The subprotocol spoken with the streaming server.
const PROTOCOL: &str = "v4.channel.k8s.io";

/// How long the streaming server has to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;

/// The exit code a v4 status message reports: 0 for `Success`, the `ExitCode` cause of a
/// `NonZeroExitCode` failure; any other failure is the session's error.
pub(crate) fn exit_code_of(status: &[u8], call: &'static str) -> Result<i32> {
    let failed = |message: String| RuntimeError::Call { call, message };
    let v: serde_json::Value = serde_json::from_slice(status)
        .map_err(|e| failed(format!("unreadable status from the streaming server: {e}")))?;
    if v["status"] == "Success" {
        return Ok(0);
    }
    if v["reason"] == "NonZeroExitCode"
        && let Some(code) = v["details"]["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["reason"] == "ExitCode")
            .and_then(|c| c["message"].as_str())
            .and_then(|m| m.parse().ok())
    {
        return Ok(code);
    }
    Err(failed(
        v["message"]
            .as_str()
            .unwrap_or("the streaming server reported a failure")
            .to_string(),
    ))
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut b = Vec::with_capacity(data.len() + 1);
    b.push(channel);
    b.extend_from_slice(data);
    Message::Binary(b.into())
}

type Socket = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// A WebSocket to the streaming server at `url` (as CRI returned it, with `query` added),
/// speaking [`PROTOCOL`].
async fn connect(
    url: &str,
    query: &str,
    netns: Option<&std::path::Path>,
    call: &'static str,
) -> Result<Socket> {
    let failed = |message: String| RuntimeError::Call { call, message };
    let ws_url = match url.split_once("://") {
        Some(("https", rest)) => format!("wss://{rest}{query}"),
        Some((_, rest)) => format!("ws://{rest}{query}"),
        None => return Err(failed(format!("streaming URL {url:?} has no scheme"))),
    };
    let mut request = ws_url
        .into_client_request()
        .map_err(|e| failed(format!("streaming URL {url:?}: {e}")))?;
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", HeaderValue::from_static(PROTOCOL));
    // containerd's streaming server listens in containerd's network namespace.
    let addr = request
        .uri()
        .authority()
        .and_then(|a| a.as_str().parse::<std::net::SocketAddr>().ok())
        .ok_or_else(|| {
            failed(format!(
                "streaming URL {url:?} names no IP address and port"
            ))
        })?;
    let stream = crate::netns::connect(netns, addr, CONNECT_TIMEOUT)
        .await
        .map_err(|e| failed(format!("streaming server at {url}: {e}")))?;
    let (ws, _) = tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio_tungstenite::client_async(request, stream),
    )
    .await
    .map_err(|_| RuntimeError::Timeout {
        call,
        timeout: CONNECT_TIMEOUT,
    })?
    .map_err(|e| failed(format!("streaming server at {url}: {e}")))?;
    Ok(ws)
}

/// Connects to the streaming server at `url` (as CRI returned it) and relays the session.
pub(super) async fn open(
    url: &str,
    netns: Option<&std::path::Path>,
    call: &'static str,
) -> Result<Session> {
    let failed = |message: String| RuntimeError::Call { call, message };
    let ws = connect(url, "", netns, call).await?;
    let (input, mut input_rx) = mpsc::channel::<SessionInput>(16);
    let (output_tx, output) = mpsc::channel(16);
    // Bounded by the connection: it ends with the streaming server's status, when the server
    // closes, or when the client drops its output.
    tokio::spawn(async move {
        let (mut sink, mut stream) = ws.split();
        // Each direction on its own: a command that does not read its input (or whose output
        // the client does not read) holds up only that direction (`exec -i … cat` of more
        // than the buffers hold needs both).
        let ended: Result<i32> = tokio::select! {
            sent = async {
                loop {
                    let sent = match input_rx.recv().await {
                        Some(SessionInput::Stdin(data)) => sink.send(frame(STDIN, &data)).await,
                        Some(SessionInput::Resize { width, height }) => {
                            let size = serde_json::json!({ "Width": width, "Height": height });
                            sink.send(frame(RESIZE, size.to_string().as_bytes())).await
                        }
                        // Standard input stays open until the command ends (see above).
                        Some(SessionInput::CloseStdin) | None => {
                            return std::future::pending::<Result<i32>>().await;
                        }
                    };
                    if let Err(e) = sent {
                        return Err(failed(format!("streaming server: {e}")));
                    }
                }
            } => sent,
            ended = async {
                loop {
                    let data = match stream.next().await {
                        Some(Ok(Message::Binary(data))) => data,
                        Some(Ok(Message::Close(_))) | None => {
                            return Err(failed(
                                "the streaming server closed the session without an exit status"
                                    .into(),
                            ));
                        }
                        Some(Ok(_)) => continue,
                        Some(Err(e)) => return Err(failed(format!("streaming server: {e}"))),
                    };
                    let Some((&channel, body)) = data.split_first() else {
                        continue;
                    };
                    let out = match channel {
                        // The server opens each stream with an empty message.
                        _ if body.is_empty() => continue,
                        STDOUT => SessionOutput::Stdout(body.to_vec()),
                        STDERR => SessionOutput::Stderr(body.to_vec()),
                        ERROR => return exit_code_of(body, call),
                        _ => continue,
                    };
                    if output_tx.send(Ok(out)).await.is_err() {
                        // The client is gone.
                        return std::future::pending::<Result<i32>>().await;
                    }
                }
            } => ended,
            () = output_tx.closed() => return,
        };
        let _ = output_tx.send(ended.map(SessionOutput::Exit)).await;
        let _ = sink.close().await;
    });
    Ok(Session { input, output })
}

/// The data and error channels of the one port a forwarded connection asks for.
const PORT_DATA: u8 = 0;
const PORT_ERROR: u8 = 1;

/// How long the pod's end of a forwarded connection has once the client has closed its
/// end for writing (containerd gives the same over SPDY).
const HALF_CLOSED: Duration = Duration::from_secs(1);

/// Connects to `port` through the streaming server at `url` (CRI's `PortForward`), over its
/// WebSocket protocol: two channels per port, data then error, each opened by the server
/// with a message that holds the port (two bytes, little-endian). v4 cannot close a channel
/// on its own, so once the client has closed its end for writing, the connection ends
/// [`HALF_CLOSED`] later.
pub(super) async fn forward(
    url: &str,
    port: u16,
    netns: Option<&std::path::Path>,
) -> Result<PortConnection> {
    const CALL: &str = "PortForward";
    let failed = |message: String| RuntimeError::Call {
        call: CALL,
        message,
    };
    let ws = connect(url, &format!("?port={port}"), netns, CALL).await?;
    let (input, mut input_rx) = mpsc::channel::<PortInput>(4);
    let (output_tx, output) = mpsc::channel(4);
    // Bounded by the connection: it ends when the streaming server closes it or reports an
    // error, after the client's end closed, or when the client drops its output.
    tokio::spawn(async move {
        let (mut sink, mut stream) = ws.split();
        // Each direction on its own, so that one waiting for its reader never holds the
        // other up (an echo of more than the buffers hold needs both).
        let upstream = async {
            while let Some(PortInput::Data(data)) = input_rx.recv().await {
                if let Err(e) = sink.send(frame(PORT_DATA, &data)).await {
                    return Err(failed(format!("streaming server: {e}")));
                }
            }
            tokio::time::sleep(HALF_CLOSED).await;
            Ok(())
        };
        let downstream = async {
            let mut opened = [false; 2];
            loop {
                let data = match stream.next().await {
                    Some(Ok(Message::Binary(data))) => data,
                    Some(Ok(Message::Close(_))) | None => return Ok(()),
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(failed(format!("streaming server: {e}"))),
                };
                let Some((&channel, body)) = data.split_first() else {
                    continue;
                };
                let Some(opened) = opened.get_mut(usize::from(channel)) else {
                    continue;
                };
                if !*opened {
                    *opened = true;
                    continue;
                }
                match channel {
                    PORT_DATA if output_tx.send(Ok(body.to_vec())).await.is_err() => {
                        return Ok(());
                    }
                    PORT_ERROR if !body.is_empty() => {
                        return Err(failed(String::from_utf8_lossy(body).into_owned()));
                    }
                    _ => {}
                }
            }
        };
        let ended = tokio::select! {
            ended = upstream => ended,
            ended = downstream => ended,
            () = output_tx.closed() => Ok(()),
        };
        if let Err(e) = ended {
            let _ = output_tx.send(Err(e)).await;
        }
        let _ = sink.close().await;
    });
    Ok(PortConnection { input, output })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_give_exit_codes() {
        assert_eq!(
            exit_code_of(br#"{"metadata":{},"status":"Success"}"#, "Exec"),
            Ok(0)
        );
        let failed = br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
        assert_eq!(exit_code_of(failed, "Exec"), Ok(3));
        let other = br#"{"status":"Failure","message":"executable file not found in $PATH"}"#;
        assert_eq!(
            exit_code_of(other, "Exec"),
            Err(RuntimeError::Call {
                call: "Exec",
                message: "executable file not found in $PATH".into()
            })
        );
        assert!(exit_code_of(b"not json", "Exec").is_err());
    }
}
