//! `pods/portforward`: connections to a pod's ports, relayed through the agent of its node
//! ([`skiff_proto::node::v1`]'s `Sessions.PortForward`, one gRPC stream per connection) as
//! kube-apiserver relays them through the kubelet. Three ways in, as clients open them:
//!
//! * **SPDY tunneled in a WebSocket** (subprotocol `SPDY/3.1+portforward.k8s.io`), kubectl
//!   1.32's first choice: the WebSocket's binary messages carry a SPDY/3.1 connection as a
//!   byte stream ([`super::spdy`]).
//! * **SPDY** on a `POST` upgraded to `SPDY/3.1`, kubectl's fallback.
//! * **WebSocket channels** (`v4.channel.k8s.io`, or no subprotocol), as kube-rs opens them:
//!   the ports are named in the query (`?ports=8080,9090`), each gets a data and an error
//!   channel (`2i`, `2i+1`), and every message starts with its channel's byte.
//!
//! Over SPDY, each local connection of kubectl opens two streams that share a `requestid`
//! header: `error`, then `data`, both naming the `port`. Once both are there, the connection
//! to the pod's port is made through the agent; when it ends, both streams are ended, the
//! error stream carrying the reason if it failed (kubectl prints it and stops).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::http::header;
use axum::response::Response;
use bytes::Bytes;
use futures::{Sink, SinkExt, StreamExt};
use skiff_proto::node::v1 as pb;
use tokio::io::AsyncRead;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::io::StreamReader;

use super::Connect;
use super::logs::node_agent;
use super::request::Params;
use super::spdy::{self, Frame, Reply, SpdyError};
use super::status::ApiError;
use crate::cluster::ClusterApi;
use pb::port_forward_input::Input;

/// The port-forward protocol kubectl negotiates (`X-Stream-Protocol-Version`).
pub const PROTOCOL: &str = "portforward.k8s.io";
/// The WebSocket subprotocol of SPDY tunneled in a WebSocket.
pub const SPDY_TUNNEL: &str = "SPDY/3.1+portforward.k8s.io";
/// The WebSocket subprotocol of the channel protocol.
const CHANNELS: &str = "v4.channel.k8s.io";

/// The largest piece of a pod's output sent in one frame or message.
const MAX_CHUNK: usize = 32 << 10;
/// The most streams open at once on one SPDY connection (two per forwarded connection).
const MAX_STREAMS: usize = 512;
/// Pieces queued towards a forwarded connection's pod (each at most a frame,
/// [`spdy::MAX_FRAME`], or a WebSocket message, [`MAX_MESSAGE`]): what a client can make a
/// member hold for a pod that does not read is this times its connections.
const QUEUED: usize = 4;
/// The largest WebSocket message taken (kubectl writes at most 32 KiB at a time).
const MAX_MESSAGE: usize = 256 << 10;
/// How long a forwarded connection's first stream waits for its second (the kubelet's
/// stream creation timeout).
const PAIRING: Duration = Duration::from_secs(30);
/// The most ports of one WebSocket (each takes two channels of one byte's range).
const MAX_PORTS: usize = 128;
/// How long what was queued for a client may take to go out once its connection ends.
const DRAIN: Duration = Duration::from_secs(5);

/// GET (WebSocket) or POST (SPDY) `pods/<name>/portforward`.
pub(super) async fn forward(api: &ClusterApi, c: Connect) -> Result<Response, ApiError> {
    let Connect {
        target,
        params,
        parts,
        websocket,
        upgrade,
    } = c;
    let (target, params, method, headers) = (&target, &params, &parts.method, &parts.headers);
    let (pod, agent) = node_agent(api, target).await?;
    let channel = agent.connect().await?;
    let forwarder = Arc::new(Forwarder {
        client: pb::sessions_client::SessionsClient::new(channel),
        start: pb::PortForwardStart {
            node: agent.node.clone(),
            namespace: target.namespace.clone(),
            pod: target.name.clone(),
            port: 0,
        },
        uid: pod.metadata.uid.clone(),
    });
    if let Some(websocket) = websocket {
        let offered = headers.contains_key(header::SEC_WEBSOCKET_PROTOCOL);
        let websocket = websocket
            .protocols([SPDY_TUNNEL, CHANNELS])
            .max_message_size(MAX_MESSAGE)
            .max_frame_size(MAX_MESSAGE);
        let chose = websocket
            .selected_protocol()
            .and_then(|p| p.to_str().ok())
            .map(str::to_string);
        return match chose.as_deref() {
            Some(SPDY_TUNNEL) => Ok(websocket.on_upgrade(move |socket| tunnel(socket, forwarder))),
            Some(_) => channels_upgrade(websocket, params, forwarder),
            None if !offered => channels_upgrade(websocket, params, forwarder),
            None => Err(ApiError::bad_request(format!(
                "no supported WebSocket subprotocol requested; supported: {SPDY_TUNNEL}, {CHANNELS}"
            ))),
        };
    }
    let Some(upgrade) = upgrade.filter(|_| spdy::asked(method, headers)) else {
        return Err(ApiError::bad_request(format!(
            "pods/portforward is served over WebSocket ({SPDY_TUNNEL}, {CHANNELS}) or a POST \
             upgraded to SPDY/3.1"
        )));
    };
    let protocol = spdy::negotiate(headers, &[PROTOCOL])?;
    Ok(spdy::switch(upgrade, protocol, move |read, write| {
        serve_spdy(read, write, forwarder)
    }))
}

/// The channel protocol's upgrade: its ports come from the query.
fn channels_upgrade(
    websocket: WebSocketUpgrade,
    params: &Params,
    forwarder: Arc<Forwarder>,
) -> Result<Response, ApiError> {
    let ports = params.ports.clone();
    if ports.is_empty() {
        return Err(ApiError::bad_request(
            "ports: Required value: a port-forward over WebSocket channels names its ports \
             (?ports=8080)",
        ));
    }
    if ports.len() > MAX_PORTS {
        return Err(ApiError::bad_request(format!(
            "ports: Too many: {}: must have at most {MAX_PORTS} items",
            ports.len()
        )));
    }
    Ok(websocket.on_upgrade(move |socket| channels(socket, forwarder, ports)))
}

/// Connections to one pod's ports, through the agent of its node.
struct Forwarder {
    client: pb::sessions_client::SessionsClient<tonic::transport::Channel>,
    /// The pod (its port left to each connection).
    start: pb::PortForwardStart,
    uid: String,
}

impl Forwarder {
    /// One connection to `port`: what `input` brings goes to the pod (its end closes the
    /// connection for writing), what the pod sends goes out on stream `data` of `out`. When
    /// it ends, both streams end, `error` with the reason if it failed.
    async fn connection(
        self: Arc<Self>,
        port: u16,
        (data, error): (u32, u32),
        mut input: mpsc::Receiver<Bytes>,
        out: mpsc::Sender<Reply>,
    ) {
        let ended = self.relay(port, data, &mut input, &out).await;
        let reason = match ended {
            Ok(()) => Bytes::new(),
            Err(e) => Bytes::from(format!(
                "error forwarding port {port} to pod {}/{}, uid {}: {e}",
                self.start.namespace, self.start.pod, self.uid
            )),
        };
        for (id, data) in [(data, Bytes::new()), (error, reason)] {
            if out
                .send(Reply::Data {
                    id,
                    data,
                    fin: true,
                })
                .await
                .is_err()
            {
                return;
            }
        }
    }

    /// Relays one connection, each direction on its own (a direction waiting for its reader
    /// never holds the other up: an echo of more than the buffers hold needs both). It ends
    /// when the pod's end does.
    async fn relay(
        &self,
        port: u16,
        data: u32,
        input: &mut mpsc::Receiver<Bytes>,
        out: &mpsc::Sender<Reply>,
    ) -> Result<(), String> {
        let (to_agent, requests) = mpsc::channel(QUEUED);
        let start = pb::PortForwardStart {
            port: u32::from(port),
            ..self.start.clone()
        };
        to_agent
            .try_send(pb::PortForwardInput {
                input: Some(Input::Start(start)),
            })
            .expect("invariant: a new channel has room");
        let mut output = self
            .client
            .clone()
            .port_forward(ReceiverStream::new(requests))
            .await
            .map_err(|s| s.message().to_string())?
            .into_inner();
        let upstream = async {
            while let Some(bytes) = input.recv().await {
                let message = pb::PortForwardInput {
                    input: Some(Input::Data(bytes.to_vec())),
                };
                if to_agent.send(message).await.is_err() {
                    return;
                }
            }
            // The client closed its end for writing.
            let _ = to_agent
                .send(pb::PortForwardInput {
                    input: Some(Input::CloseWrite(true)),
                })
                .await;
        };
        let downstream = async {
            loop {
                match output.message().await {
                    Ok(Some(pb::PortForwardOutput { data: bytes })) => {
                        let mut bytes = Bytes::from(bytes);
                        while !bytes.is_empty() {
                            let chunk = bytes.split_to(bytes.len().min(MAX_CHUNK));
                            let frame = Reply::Data {
                                id: data,
                                data: chunk,
                                fin: false,
                            };
                            if out.send(frame).await.is_err() {
                                return Ok(());
                            }
                        }
                    }
                    Ok(None) => return Ok(()),
                    Err(s) => return Err(s.message().to_string()),
                }
            }
        };
        tokio::pin!(upstream, downstream);
        let mut sent_all = false;
        loop {
            tokio::select! {
                ended = &mut downstream => return ended,
                () = &mut upstream, if !sent_all => sent_all = true,
            }
        }
    }
}

/// SPDY tunneled in a WebSocket: binary messages both ways, cut anywhere.
async fn tunnel(socket: WebSocket, forwarder: Arc<Forwarder>) {
    let (sink, stream) = socket.split();
    let sink =
        sink.with(|frame: Bytes| async move { Ok::<_, axum::Error>(Message::Binary(frame)) });
    let bytes = stream
        .take_while(|m| std::future::ready(!matches!(m, Ok(Message::Close(_)))))
        .filter_map(|m| {
            std::future::ready(match m {
                Ok(Message::Binary(b)) => Some(Ok(b)),
                Ok(Message::Text(_)) => Some(Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "a text message in a SPDY tunnel",
                ))),
                Ok(_) => None,
                Err(e) => Some(Err(std::io::Error::other(e))),
            })
        });
    serve_spdy(
        StreamReader::new(Box::pin(bytes)),
        Box::pin(sink),
        forwarder,
    )
    .await;
}

/// One SPDY connection: a reader of its frames, a router of them to forwarded connections,
/// and a writer of replies, all in this task.
async fn serve_spdy<R, S>(io: R, sink: S, forwarder: Arc<Forwarder>)
where
    R: AsyncRead + Unpin + Send,
    S: Sink<Bytes> + Unpin + Send,
{
    let (frames_tx, frames) = mpsc::channel(16);
    let (out, replies) = mpsc::channel(64);
    let reading = spdy::read_frames(io, frames_tx);
    let writing = spdy::write_frames(sink, replies);
    let mut routing = Box::pin(Router::new(forwarder, out).run(frames));
    tokio::pin!(reading, writing);
    // Once the client's side has ended, what it sent last is routed for a moment, then
    // everything ends, a router waiting on a pod included.
    let mut read_until = None;
    loop {
        tokio::select! {
            () = &mut reading, if read_until.is_none() => {
                read_until = Some(tokio::time::Instant::now() + DRAIN);
            }
            () = &mut routing => break,
            // The client's connection failed: nothing more can reach it.
            () = &mut writing => return,
            () = tokio::time::sleep_until(read_until.unwrap_or_else(tokio::time::Instant::now)),
                if read_until.is_some() => break,
        }
    }
    // The router and its connections are gone, so the writer ends once it has sent what
    // they queued.
    drop(routing);
    let _ = tokio::time::timeout(DRAIN, writing).await;
}

/// Which of a forwarded connection's two streams a stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamType {
    Error,
    Data,
}

/// One forwarded connection's streams, as they arrive.
#[derive(Debug)]
struct Request {
    /// When its first stream came.
    opened: tokio::time::Instant,
    port: u16,
    error: Option<u32>,
    data: Option<u32>,
    /// Towards the connection; dropped when the client ends the data stream.
    input: Option<mpsc::Sender<Bytes>>,
    /// The connection's end of `input`, until it starts.
    pending: Option<mpsc::Receiver<Bytes>>,
    task: Option<tokio::task::AbortHandle>,
}

/// Routes a SPDY connection's frames to its forwarded connections.
struct Router {
    forwarder: Arc<Forwarder>,
    out: mpsc::Sender<Reply>,
    /// Each open stream's request ID and type.
    streams: HashMap<u32, (String, StreamType)>,
    requests: HashMap<String, Request>,
    tasks: JoinSet<()>,
    /// The request each task serves.
    task_requests: HashMap<tokio::task::Id, String>,
    last_stream: u32,
}

impl Router {
    fn new(forwarder: Arc<Forwarder>, out: mpsc::Sender<Reply>) -> Router {
        Router {
            forwarder,
            out,
            streams: HashMap::new(),
            requests: HashMap::new(),
            tasks: JoinSet::new(),
            task_requests: HashMap::new(),
            last_stream: 0,
        }
    }

    async fn run(mut self, mut frames: mpsc::Receiver<Result<Frame, SpdyError>>) {
        let mut pairing = tokio::time::interval(PAIRING / 2);
        pairing.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = pairing.tick() => {
                    if self.reset_unpaired().await.is_err() {
                        return;
                    }
                }
                frame = frames.recv() => match frame {
                    Some(Ok(frame)) => {
                        if self.handle(frame).await.is_err() {
                            return;
                        }
                    }
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "port-forward: ending a SPDY connection");
                        if matches!(e, SpdyError::Protocol(_)) {
                            self.go_away(spdy::GOAWAY_PROTOCOL_ERROR).await;
                        }
                        return;
                    }
                    None => return,
                },
                Some(done) = self.tasks.join_next_with_id() => {
                    let id = match done {
                        Ok((id, ())) => id,
                        Err(e) => e.id(),
                    };
                    if let Some(request) = self.task_requests.remove(&id) {
                        self.forget(&request);
                    }
                }
            }
        }
    }

    /// Acts on one frame; an error ends the connection.
    async fn handle(&mut self, frame: Frame) -> Result<(), ()> {
        match frame {
            Frame::SynStream { id, headers, fin } => self.open(id, &headers, fin).await,
            Frame::Data { id, data, fin } => {
                let Some((request, StreamType::Data)) = self.streams.get(&id) else {
                    // The error stream's end, or a stream already ended.
                    return Ok(());
                };
                let request = request.clone();
                let Some(r) = self.requests.get_mut(&request) else {
                    return Ok(());
                };
                if r.task.is_none() {
                    // Data before the connection's error stream: kubectl never sends it.
                    return self.reset(&request).await;
                }
                if let Some(input) = &r.input
                    && !data.is_empty()
                    && input.send(data).await.is_err()
                {
                    r.input = None;
                }
                if fin {
                    r.input = None;
                }
                Ok(())
            }
            Frame::RstStream { id, .. } => {
                // The client gave the connection up (kubectl resets the data stream when the
                // pod's end closed before its own, or its local end failed). It then waits
                // for the error stream's end, which the connection's task may not have
                // sent yet.
                let Some((request, _)) = self.streams.get(&id).cloned() else {
                    return Ok(());
                };
                match self.forget(&request) {
                    Some(Request {
                        error: Some(error), ..
                    }) if error != id => {
                        self.send(Reply::Data {
                            id: error,
                            data: Bytes::new(),
                            fin: true,
                        })
                        .await
                    }
                    _ => Ok(()),
                }
            }
            Frame::Ping(id) => self.send(Reply::Ping(id)).await,
            Frame::GoAway => Err(()),
            Frame::Ignored => Ok(()),
        }
    }

    async fn send(&self, reply: Reply) -> Result<(), ()> {
        self.out.send(reply).await.map_err(|_| ())
    }

    async fn go_away(&self, status: u32) {
        let last = self.last_stream;
        let _ = self.send(Reply::GoAway { last, status }).await;
    }

    /// A new stream: accepted, or reset when its headers do not name a forwarded
    /// connection's stream.
    async fn open(&mut self, id: u32, headers: &[(String, String)], fin: bool) -> Result<(), ()> {
        if !spdy::next_client_stream(id, self.last_stream) {
            self.go_away(spdy::GOAWAY_PROTOCOL_ERROR).await;
            return Err(());
        }
        self.last_stream = id;
        let Some((request_id, kind, port)) = stream_headers(id, headers) else {
            let status = spdy::PROTOCOL_ERROR;
            return self.send(Reply::RstStream { id, status }).await;
        };
        if self.streams.len() >= MAX_STREAMS {
            let status = spdy::REFUSED_STREAM;
            return self.send(Reply::RstStream { id, status }).await;
        }
        let accepted = {
            let r = self
                .requests
                .entry(request_id.clone())
                .or_insert_with(|| Request {
                    opened: tokio::time::Instant::now(),
                    port: 0,
                    error: None,
                    data: None,
                    input: None,
                    pending: None,
                    task: None,
                });
            let taken = match kind {
                StreamType::Error => r.error.is_some(),
                StreamType::Data => r.data.is_some(),
            };
            if taken || (r.port != 0 && r.port != port) {
                None
            } else {
                r.port = port;
                match kind {
                    StreamType::Error => r.error = Some(id),
                    StreamType::Data => {
                        r.data = Some(id);
                        let (tx, rx) = mpsc::channel(QUEUED);
                        // A stream opened with FIN brings nothing: the pod's end sees that
                        // at once.
                        r.input = (!fin).then_some(tx);
                        r.pending = Some(rx);
                    }
                }
                Some(match (r.data, r.error) {
                    (Some(data), Some(error)) => r.pending.take().map(|i| (data, error, i)),
                    _ => None,
                })
            }
        };
        let Some(ready) = accepted else {
            let status = spdy::PROTOCOL_ERROR;
            return self.send(Reply::RstStream { id, status }).await;
        };
        self.streams.insert(id, (request_id.clone(), kind));
        self.send(Reply::SynReply(id)).await?;
        if let Some((data, error, input)) = ready {
            let connection = Arc::clone(&self.forwarder).connection(
                port,
                (data, error),
                input,
                self.out.clone(),
            );
            let task = self.tasks.spawn(connection);
            self.task_requests.insert(task.id(), request_id.clone());
            if let Some(r) = self.requests.get_mut(&request_id) {
                r.task = Some(task);
            }
        }
        Ok(())
    }

    /// Ends a request: its connection (when still running) and its streams; what it was.
    fn forget(&mut self, request: &str) -> Option<Request> {
        let r = self.requests.remove(request)?;
        if let Some(task) = &r.task {
            task.abort();
        }
        for id in [r.error, r.data].into_iter().flatten() {
            self.streams.remove(&id);
        }
        Some(r)
    }

    /// Resets a request's streams and forgets it.
    async fn reset(&mut self, request: &str) -> Result<(), ()> {
        let Some(r) = self.forget(request) else {
            return Ok(());
        };
        for id in [r.error, r.data].into_iter().flatten() {
            let status = spdy::PROTOCOL_ERROR;
            self.send(Reply::RstStream { id, status }).await?;
        }
        Ok(())
    }

    /// Resets the requests whose first stream has waited for its second longer than
    /// [`PAIRING`].
    async fn reset_unpaired(&mut self) -> Result<(), ()> {
        let stale: Vec<String> = self
            .requests
            .iter()
            .filter(|(_, r)| r.task.is_none() && r.opened.elapsed() > PAIRING)
            .map(|(id, _)| id.clone())
            .collect();
        for request in stale {
            self.reset(&request).await?;
        }
        Ok(())
    }
}

/// A stream's request ID, type and port, from its headers; `None` when they name none.
/// A client without `requestid` headers (from before Kubernetes 1.6) pairs a data stream
/// with the error stream just before it.
pub(crate) fn stream_headers(
    id: u32,
    headers: &[(String, String)],
) -> Option<(String, StreamType, u16)> {
    let kind = match spdy::header(headers, "streamtype")? {
        "error" => StreamType::Error,
        "data" => StreamType::Data,
        _ => return None,
    };
    let port = spdy::header(headers, "port")?
        .parse::<u16>()
        .ok()
        .filter(|p| *p > 0)?;
    let request = match spdy::header(headers, "requestid") {
        Some(r) => r.to_string(),
        None if kind == StreamType::Error => id.to_string(),
        None => id.checked_sub(2)?.to_string(),
    };
    Some((request, kind, port))
}

/// The channel protocol: one connection per port, made at once; the WebSocket closes once
/// all of them have ended.
async fn channels(socket: WebSocket, forwarder: Arc<Forwarder>, ports: Vec<u16>) {
    let (mut sink, mut stream) = socket.split();
    // Each channel opens with its port, two bytes little-endian.
    for (i, port) in ports.iter().enumerate() {
        let [lo, hi] = port.to_le_bytes();
        for channel in [2 * i, 2 * i + 1] {
            let opening = Bytes::from(vec![channel as u8, lo, hi]);
            if sink.send(Message::Binary(opening)).await.is_err() {
                return;
            }
        }
    }
    let (out, mut replies) = mpsc::channel::<Reply>(64);
    let mut inputs = Vec::with_capacity(ports.len());
    // Aborted when this returns.
    let mut tasks = JoinSet::new();
    for (i, port) in ports.into_iter().enumerate() {
        let (tx, rx) = mpsc::channel(QUEUED);
        inputs.push(Some(tx));
        let streams = (2 * i as u32, 2 * i as u32 + 1);
        tasks.spawn(Arc::clone(&forwarder).connection(port, streams, rx, out.clone()));
    }
    drop(out);
    // Each direction on its own: a pod that does not read holds up only what goes to it.
    let inbound = async {
        while let Some(Ok(received)) = stream.next().await {
            let b = match received {
                Message::Binary(b) => b,
                // The client closed: its close is answered below.
                Message::Close(_) => return,
                _ => continue,
            };
            let Some((&channel, body)) = b.split_first() else {
                continue;
            };
            if channel % 2 != 0 || body.is_empty() {
                continue;
            }
            if let Some(slot) = inputs.get_mut(usize::from(channel / 2))
                && let Some(tx) = slot
                && tx.send(b.slice(1..)).await.is_err()
            {
                *slot = None;
            }
        }
    };
    let outbound = async {
        // Until every connection has ended.
        while let Some(reply) = replies.recv().await {
            let Reply::Data { id, data, .. } = reply else {
                continue;
            };
            if data.is_empty() {
                continue;
            }
            if sink
                .send(super::exec::frame(id as u8, &data))
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    };
    let open = tokio::select! {
        () = inbound => true,
        open = outbound => open,
    };
    if !open {
        return;
    }
    tasks.shutdown().await;
    // Closes, or answers the client's close (queued when it was read).
    let _ = sink
        .send(Message::Close(Some(CloseFrame {
            code: close_code::NORMAL,
            reason: "".into(),
        })))
        .await;
    let _ = sink.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn streams_are_paired_by_request() {
        let h = headers(&[("streamtype", "data"), ("port", "8080"), ("requestid", "4")]);
        assert_eq!(
            stream_headers(9, &h),
            Some(("4".into(), StreamType::Data, 8080))
        );
        // Without request IDs, a data stream goes with the error stream before it.
        let h = headers(&[("streamtype", "error"), ("port", "80")]);
        assert_eq!(
            stream_headers(5, &h),
            Some(("5".into(), StreamType::Error, 80))
        );
        let h = headers(&[("streamtype", "data"), ("port", "80")]);
        assert_eq!(
            stream_headers(7, &h),
            Some(("5".into(), StreamType::Data, 80))
        );
        for bad in [
            &[("streamtype", "data")][..],
            &[("streamtype", "other"), ("port", "80")],
            &[("streamtype", "data"), ("port", "0")],
            &[("streamtype", "data"), ("port", "70000")],
        ] {
            assert_eq!(stream_headers(1, &headers(bad)), None, "{bad:?}");
        }
    }
}
