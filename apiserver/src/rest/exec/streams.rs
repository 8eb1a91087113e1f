//! `pods/exec` and `pods/attach` over SPDY, as client-go's SPDY executor speaks them
//! (kubectl's fallback when the API server does not take WebSocket, and every client-go
//! before 1.30): a POST upgraded to SPDY/3.1 with a protocol of `X-Stream-Protocol-Version`
//! (`v4.channel.k8s.io`, `v3.channel.k8s.io`, `v2.channel.k8s.io`, `channel.k8s.io`), on
//! which the client opens a stream per part of the session, named by its `streamType`
//! header: `error`, and `stdin`, `stdout`, `stderr` as the query asks, and `resize` for a
//! terminal (v3 and later).
//!
//! ```text
//!  client                                server                       agent
//!  SYN_STREAM error, stdin, stdout …  ─►  SYN_REPLY each
//!                   (every stream the query asks for is there) ─► output relayed
//!  DATA stdin … FIN                   ─►  stdin (its end closes it) ─► the container
//!  DATA resize {"Width":…,"Height":…} ─►  terminal size            ─►
//!                                     ◄─  DATA stdout / stderr     ◄─ output
//!                                     ◄─  DATA error (status); FIN stdout, stderr, error;
//!                                         GOAWAY, then the connection closes
//! ```
//!
//! The error stream carries the session's end: v4 a `metav1.Status` (`Success`, or
//! `NonZeroExitCode` with the code), older versions the failure's message alone (nothing
//! on success), as the kubelet writes them. Streams the query does not ask for are reset;
//! a client that has not opened every stream it asked for within 30 s is sent away.

use std::time::Duration;

use bytes::Bytes;
use futures::Sink;
use serde::Deserialize;
use skiff_proto::node::v1 as pb;
use tokio::io::AsyncRead;
use tokio::sync::{mpsc, oneshot};

use super::Relay;
use crate::rest::spdy::{self, Frame, Reply, SpdyError};
use pb::session_input::Input;
use pb::session_output::Output;

/// The SPDY protocols served, newest first.
pub const PROTOCOLS: [&str; 4] = [
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

/// How long a client has to open the streams it asked for (the kubelet's stream creation
/// timeout).
const STREAM_CREATION: Duration = Duration::from_secs(30);
/// The largest piece of output sent in one frame.
const MAX_CHUNK: usize = 32 << 10;
/// The most bytes of a resize that did not parse yet kept (a size is about 30).
const MAX_RESIZE: usize = 4 << 10;
/// How long what was queued for a client that left may take to go out.
const DRAIN: Duration = Duration::from_secs(5);
/// How long a finished session's queued output (at most the reply queue: 64 frames of
/// [`MAX_CHUNK`], 2 MiB) may take to reach its client.
const STALLED: Duration = Duration::from_secs(120);

/// A part of a session, as a stream's `streamType` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Error,
    Stdin,
    Stdout,
    Stderr,
    Resize,
}

impl Part {
    fn of(headers: &[(String, String)]) -> Option<Part> {
        Some(match spdy::header(headers, "streamtype")? {
            "error" => Part::Error,
            "stdin" => Part::Stdin,
            "stdout" => Part::Stdout,
            "stderr" => Part::Stderr,
            "resize" => Part::Resize,
            _ => return None,
        })
    }
}

/// The streams a session has, once all it asked for are open.
#[derive(Debug, Clone, Copy, Default)]
struct Streams {
    error: u32,
    stdout: Option<u32>,
    stderr: Option<u32>,
    /// The newest stream the client opened.
    last: u32,
}

/// What a session over SPDY needs beyond the relay: its protocol and the streams it asks
/// for.
pub(super) struct Session {
    pub(super) relay: Relay,
    /// The negotiated protocol, one of [`PROTOCOLS`].
    pub(super) protocol: &'static str,
    pub(super) stdout: bool,
    pub(super) stderr: bool,
    pub(super) tty: bool,
}

impl Session {
    /// The protocol's version: 4 for `v4.channel.k8s.io` … 1 for `channel.k8s.io`.
    fn version(&self) -> usize {
        PROTOCOLS.len()
            - PROTOCOLS
                .iter()
                .position(|p| *p == self.protocol)
                .unwrap_or(3)
    }

    /// The parts this session asks for, each a stream the client opens.
    fn parts(&self) -> Vec<Part> {
        let wants = |part: &Part| match part {
            Part::Error => true,
            Part::Stdin => self.relay.stdin.is_some(),
            Part::Stdout => self.stdout,
            Part::Stderr => self.stderr,
            // Terminal resizes came with v3.
            Part::Resize => self.tty && self.version() >= 3,
        };
        [
            Part::Error,
            Part::Stdin,
            Part::Stdout,
            Part::Stderr,
            Part::Resize,
        ]
        .into_iter()
        .filter(wants)
        .collect()
    }

    /// The error stream's message for a session that ended with `ended`: v4's status as
    /// JSON; before, a failure's message alone.
    fn ending(&self, ended: Result<i32, String>) -> Option<Bytes> {
        let status = self.relay.status(ended);
        if self.version() >= 4 {
            return Some(Bytes::from(status.to_string()));
        }
        (status["status"] != "Success")
            .then(|| Bytes::from(status["message"].as_str().unwrap_or_default().to_owned()))
    }
}

/// Serves one session on an upgraded connection: its frames read, routed and answered, the
/// agent's output written, all in this task.
pub(super) async fn serve<R, S>(
    io: R,
    sink: S,
    mut session: Session,
    output: tonic::Streaming<pb::SessionOutput>,
) where
    R: AsyncRead + Unpin + Send,
    S: Sink<Bytes> + Unpin + Send,
{
    let (frames_tx, frames) = mpsc::channel(16);
    let (out, replies) = mpsc::channel(64);
    let (opened, streams) = oneshot::channel();
    let reading = spdy::read_frames(io, frames_tx);
    let writing = spdy::write_frames(sink, replies);
    let parts = session.parts();
    // The inbound side holds the only sender of standard input: its end closes it.
    let stdin = session.relay.stdin.take();
    let mut inbound = Box::pin(Inbound::new(parts, stdin, out.clone()).run(frames, opened));
    let mut outbound = Box::pin(relay_output(output, streams, out.clone(), |ended| {
        session.ending(ended)
    }));
    tokio::pin!(reading, writing);
    let mut read_done = false;
    let finished = loop {
        tokio::select! {
            () = &mut reading, if !read_done => read_done = true,
            // The client went (or broke the protocol, or never opened its streams):
            // dropping the agent's stream ends the session.
            () = &mut inbound => break false,
            () = &mut outbound => break true,
            // Nothing more can reach the client.
            () = &mut writing => return,
        }
    };
    // With every sender gone, the writer sends what was queued, then closes the connection:
    // all of a finished session's output and its status, unless the client takes longer
    // than `STALLED` to read them.
    drop((inbound, outbound, out));
    let wait = if finished { STALLED } else { DRAIN };
    let _ = tokio::time::timeout(wait, writing).await;
}

/// Relays the agent's output to the client once its streams are open; then the session's
/// end on the error stream, the streams' ends and the connection's.
async fn relay_output(
    mut output: tonic::Streaming<pb::SessionOutput>,
    streams: oneshot::Receiver<Streams>,
    out: mpsc::Sender<Reply>,
    ending: impl FnOnce(Result<i32, String>) -> Option<Bytes>,
) {
    let Ok(streams) = streams.await else {
        return;
    };
    let send = |id: u32, data: Bytes, fin: bool| out.send(Reply::Data { id, data, fin });
    let ended = loop {
        let (id, bytes) = match output.message().await {
            Ok(Some(pb::SessionOutput { output: Some(o) })) => match o {
                Output::Stdout(d) => (streams.stdout, d),
                Output::Stderr(d) => (streams.stderr, d),
                Output::ExitCode(code) => break Ok(code),
            },
            Ok(Some(_)) => continue,
            Ok(None) => break Err("the agent ended the session without an exit status".to_string()),
            Err(s) => break Err(s.message().to_string()),
        };
        let Some(id) = id else { continue };
        let mut bytes = Bytes::from(bytes);
        while !bytes.is_empty() {
            let chunk = bytes.split_to(bytes.len().min(MAX_CHUNK));
            if send(id, chunk, false).await.is_err() {
                return;
            }
        }
    };
    // The status first, then every stream's end, as the kubelet writes them: a client of
    // the first protocol returns once its output streams end.
    if let Some(message) = ending(ended)
        && send(streams.error, message, false).await.is_err()
    {
        return;
    }
    for id in [streams.stdout, streams.stderr, Some(streams.error)]
        .into_iter()
        .flatten()
    {
        if send(id, Bytes::new(), true).await.is_err() {
            return;
        }
    }
    let _ = out
        .send(Reply::GoAway {
            last: streams.last,
            status: spdy::GOAWAY_OK,
        })
        .await;
}

/// A terminal size, as client-go writes it on the resize stream.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Size {
    width: u16,
    height: u16,
}

/// The client's side of a session: its streams opened and its frames routed.
struct Inbound {
    out: mpsc::Sender<Reply>,
    stdin: Option<mpsc::Sender<pb::SessionInput>>,
    /// The parts asked for and not opened yet.
    missing: Vec<Part>,
    /// Each open stream's part.
    parts: Vec<(u32, Part)>,
    streams: Streams,
    last_stream: u32,
    /// Bytes of the resize stream not parsed yet.
    resize: Vec<u8>,
}

impl Inbound {
    fn new(
        missing: Vec<Part>,
        stdin: Option<mpsc::Sender<pb::SessionInput>>,
        out: mpsc::Sender<Reply>,
    ) -> Inbound {
        Inbound {
            out,
            stdin,
            missing,
            parts: Vec::new(),
            streams: Streams::default(),
            last_stream: 0,
            resize: Vec::new(),
        }
    }

    async fn run(
        mut self,
        mut frames: mpsc::Receiver<Result<Frame, SpdyError>>,
        opened: oneshot::Sender<Streams>,
    ) {
        let mut opened = Some(opened);
        let deadline = tokio::time::sleep(STREAM_CREATION);
        tokio::pin!(deadline);
        loop {
            let frame = tokio::select! {
                frame = frames.recv() => frame,
                () = &mut deadline, if opened.is_some() => {
                    tracing::debug!("exec over SPDY: the client did not open its streams in time");
                    self.go_away(spdy::GOAWAY_OK).await;
                    return;
                }
            };
            match frame {
                Some(Ok(frame)) => {
                    if self.handle(frame).await.is_err() {
                        return;
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "exec over SPDY: ending the connection");
                    if matches!(e, SpdyError::Protocol(_)) {
                        self.go_away(spdy::GOAWAY_PROTOCOL_ERROR).await;
                    }
                    return;
                }
                None => return,
            }
            if self.missing.is_empty()
                && let Some(opened) = opened.take()
            {
                self.streams.last = self.last_stream;
                if opened.send(self.streams).is_err() {
                    return;
                }
            }
        }
    }

    async fn send(&self, reply: Reply) -> Result<(), ()> {
        self.out.send(reply).await.map_err(|_| ())
    }

    async fn go_away(&self, status: u32) {
        let last = self.last_stream;
        let _ = self.send(Reply::GoAway { last, status }).await;
    }

    fn part(&self, id: u32) -> Option<Part> {
        self.parts.iter().find(|(i, _)| *i == id).map(|(_, p)| *p)
    }

    /// Acts on one frame; an error ends the session.
    async fn handle(&mut self, frame: Frame) -> Result<(), ()> {
        match frame {
            Frame::SynStream { id, headers, fin } => {
                if !spdy::next_client_stream(id, self.last_stream) {
                    self.go_away(spdy::GOAWAY_PROTOCOL_ERROR).await;
                    return Err(());
                }
                self.last_stream = id;
                let Some(part) = Part::of(&headers).filter(|p| self.missing.contains(p)) else {
                    // Not asked for, or a second of its kind.
                    let status = spdy::PROTOCOL_ERROR;
                    return self.send(Reply::RstStream { id, status }).await;
                };
                self.missing.retain(|p| *p != part);
                self.parts.push((id, part));
                match part {
                    Part::Error => self.streams.error = id,
                    Part::Stdout => self.streams.stdout = Some(id),
                    Part::Stderr => self.streams.stderr = Some(id),
                    Part::Stdin if fin => self.stdin = None,
                    Part::Stdin | Part::Resize => {}
                }
                self.send(Reply::SynReply(id)).await
            }
            Frame::Data { id, data, fin } => {
                match self.part(id) {
                    Some(Part::Stdin) => {
                        if !data.is_empty() {
                            self.input(Input::Stdin(data.to_vec())).await;
                        }
                        if fin {
                            // Its end closes the container's standard input.
                            self.stdin = None;
                        }
                    }
                    Some(Part::Resize) => self.resized(&data).await,
                    // The client has nothing to say on the others.
                    _ => {}
                }
                Ok(())
            }
            Frame::RstStream { id, .. } => match self.part(id) {
                Some(Part::Stdin) => {
                    self.stdin = None;
                    Ok(())
                }
                Some(Part::Resize) | None => Ok(()),
                // The client gave up on the session's output.
                Some(_) => Err(()),
            },
            Frame::Ping(id) => self.send(Reply::Ping(id)).await,
            Frame::GoAway => Err(()),
            Frame::Ignored => Ok(()),
        }
    }

    /// Sends `input` to the container; a session whose input is gone takes no more.
    async fn input(&mut self, input: Input) {
        super::send_input(&mut self.stdin, input).await;
    }

    /// Bytes of the resize stream: every size they complete goes to the terminal.
    async fn resized(&mut self, data: &[u8]) {
        self.resize.extend_from_slice(data);
        let mut sizes = Vec::new();
        let mut parsed = 0;
        let mut stream = serde_json::Deserializer::from_slice(&self.resize).into_iter::<Size>();
        loop {
            match stream.next() {
                Some(Ok(size)) => {
                    sizes.push(size);
                    parsed = stream.byte_offset();
                }
                Some(Err(e)) if e.is_eof() => break,
                Some(Err(_)) => {
                    // Not a size: what came so far is dropped.
                    parsed = self.resize.len();
                    break;
                }
                None => break,
            }
        }
        self.resize.drain(..parsed);
        if self.resize.len() > MAX_RESIZE {
            self.resize.clear();
        }
        // Sizes go with standard input's sender (a terminal's session has one only while
        // its input is open; otherwise they are dropped, as there is no terminal to size).
        let resizes = sizes.into_iter().map(|s| {
            Input::Resize(pb::TerminalSize {
                width: u32::from(s.width),
                height: u32::from(s.height),
            })
        });
        for resize in resizes {
            self.input(resize).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(protocol: &'static str, stdin: bool, tty: bool) -> Session {
        let (tx, _rx) = mpsc::channel(1);
        Session {
            relay: Relay {
                v5: false,
                stdin: stdin.then_some(tx),
                command: vec!["sh".into()],
            },
            protocol,
            stdout: true,
            stderr: !tty,
            tty,
        }
    }

    #[test]
    fn the_streams_asked_for_follow_the_query_and_the_protocol() {
        use Part::*;
        assert_eq!(
            session(PROTOCOLS[0], true, true).parts(),
            [Error, Stdin, Stdout, Resize]
        );
        assert_eq!(
            session(PROTOCOLS[1], false, false).parts(),
            [Error, Stdout, Stderr]
        );
        // No terminal resizes before v3.
        assert_eq!(
            session(PROTOCOLS[2], true, true).parts(),
            [Error, Stdin, Stdout]
        );
        assert_eq!(session(PROTOCOLS[3], false, true).version(), 1);
    }

    #[test]
    fn the_end_is_a_status_in_v4_and_a_message_before() {
        let v4 = session(PROTOCOLS[0], false, false);
        let ok: serde_json::Value =
            serde_json::from_slice(&v4.ending(Ok(0)).expect("a status")).unwrap();
        assert_eq!(ok["status"], "Success");
        let failed: serde_json::Value =
            serde_json::from_slice(&v4.ending(Ok(3)).expect("a status")).unwrap();
        assert_eq!(failed["details"]["causes"][0]["message"], "3");
        let v3 = session(PROTOCOLS[1], false, false);
        assert_eq!(v3.ending(Ok(0)), None);
        let message = v3.ending(Ok(3)).expect("a message");
        assert!(
            String::from_utf8_lossy(&message).contains("exit code 3"),
            "{message:?}"
        );
    }

    fn syn(id: u32, stream_type: &str) -> Result<Frame, SpdyError> {
        Ok(Frame::SynStream {
            id,
            headers: vec![("streamtype".into(), stream_type.into())],
            fin: false,
        })
    }

    fn data(id: u32, bytes: &'static [u8], fin: bool) -> Result<Frame, SpdyError> {
        Ok(Frame::Data {
            id,
            data: Bytes::from_static(bytes),
            fin,
        })
    }

    /// The streams asked for are accepted, any other reset; once all are open the output
    /// side learns them; standard input and resizes split anywhere reach the agent, and the
    /// stream's end closes its input.
    #[tokio::test]
    async fn streams_open_and_input_and_resizes_reach_the_agent() {
        let (stdin_tx, mut stdin_rx) = mpsc::channel(16);
        let (out, mut replies) = mpsc::channel(16);
        let (frames_tx, frames) = mpsc::channel(16);
        let (opened, streams) = oneshot::channel();
        let parts = vec![Part::Error, Part::Stdin, Part::Stdout, Part::Resize];
        let inbound = tokio::spawn(Inbound::new(parts, Some(stdin_tx), out).run(frames, opened));
        for frame in [
            syn(1, "error"),
            syn(3, "stdin"),
            syn(5, "stderr"),
            syn(7, "stdout"),
            syn(9, "resize"),
            data(3, b"hello", false),
            data(9, b"{\"Width\":80,", false),
            data(9, b"\"Height\":24}{\"Width\":100,\"Height\":30}", false),
            data(3, b"", true),
        ] {
            frames_tx.send(frame).await.unwrap();
        }
        let streams = streams.await.expect("every stream asked for opened");
        assert_eq!(
            (streams.error, streams.stdout, streams.stderr, streams.last),
            (1, Some(7), None, 9)
        );
        let mut answered = Vec::new();
        for _ in 0..5 {
            answered.push(match replies.recv().await.unwrap() {
                Reply::SynReply(id) => format!("reply {id}"),
                Reply::RstStream { id, .. } => format!("reset {id}"),
                other => panic!("{other:?}"),
            });
        }
        assert_eq!(
            answered,
            ["reply 1", "reply 3", "reset 5", "reply 7", "reply 9"]
        );
        let mut inputs = Vec::new();
        while let Some(i) = stdin_rx.recv().await {
            inputs.push(i.input.expect("input"));
        }
        assert_eq!(
            inputs,
            [
                Input::Stdin(b"hello".to_vec()),
                Input::Resize(pb::TerminalSize {
                    width: 80,
                    height: 24
                }),
                Input::Resize(pb::TerminalSize {
                    width: 100,
                    height: 30
                }),
            ],
            "standard input ends with its stream"
        );
        drop(frames_tx);
        inbound.await.unwrap();
    }
}
