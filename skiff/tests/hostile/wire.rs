//! Requests as raw bytes over gRPC. A hand-written protobuf writer builds each request field by
//! field, so a test can send what no generated client would: unknown enum values, wrong wire
//! types, truncated fields, unknown fields. A pass-through codec puts the bytes on a tonic
//! channel unchanged and hands back the answer's bytes, decoded by the caller with the prost
//! types etcd-client generates when a test needs to look inside.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder, Streaming};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

/// A protobuf message under construction, field by field in the order given.
///
/// ```text
///   tag = field << 3 | wire type      0: varint   2: length-delimited
///   varint field:  tag, value (7 bits a byte, high bit = more)
///   bytes field:   tag, length (varint), the bytes
/// ```
#[derive(Debug, Clone, Default)]
pub struct Pb(Vec<u8>);

impl Pb {
    pub fn new() -> Pb {
        Pb(Vec::new())
    }

    fn put_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn tag(&mut self, field: u32, wire: u8) {
        self.put_varint((u64::from(field) << 3) | u64::from(wire));
    }

    /// A varint field: int64, uint64, bool and enums alike (negative int64 takes ten bytes).
    pub fn varint(mut self, field: u32, v: u64) -> Pb {
        self.tag(field, 0);
        self.put_varint(v);
        self
    }

    pub fn int(self, field: u32, v: i64) -> Pb {
        self.varint(field, v as u64)
    }

    pub fn flag(self, field: u32, b: bool) -> Pb {
        self.varint(field, u64::from(b))
    }

    /// A length-delimited field: bytes, string or an embedded message.
    pub fn bytes(mut self, field: u32, b: &[u8]) -> Pb {
        self.tag(field, 2);
        self.put_varint(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }

    pub fn msg(self, field: u32, m: Pb) -> Pb {
        self.bytes(field, &m.0)
    }

    /// Bytes appended as they are: a malformed tail, or a field written by hand.
    pub fn raw(mut self, b: &[u8]) -> Pb {
        self.0.extend_from_slice(b);
        self
    }

    pub fn into_bytes(self) -> Bytes {
        Bytes::from(self.0)
    }
}

/// Bytes in, bytes out: the message is whatever the caller built.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// How a request was answered: the gRPC code (0 for OK) and message, or that the answer did
/// not come at all within the deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub code: tonic::Code,
    pub message: String,
    /// The first response message of an OK answer.
    pub body: Option<Bytes>,
    pub timed_out: bool,
}

impl Answer {
    pub fn ok(body: Bytes) -> Answer {
        Answer {
            code: tonic::Code::Ok,
            message: String::new(),
            body: Some(body),
            timed_out: false,
        }
    }

    pub fn status(s: &Status) -> Answer {
        Answer {
            code: s.code(),
            message: s.message().to_string(),
            body: None,
            timed_out: false,
        }
    }

    pub fn timeout() -> Answer {
        Answer {
            code: tonic::Code::DeadlineExceeded,
            message: "no answer within the client's deadline".into(),
            body: None,
            timed_out: true,
        }
    }

    /// The gRPC code name as etcd's and grpc-go's docs write it.
    pub fn code_name(&self) -> String {
        if self.timed_out {
            return "(no answer)".into();
        }
        format!("{:?}", self.code)
    }

    /// INTERNAL for a message that does not decode is what gRPC servers answer (grpc-go:
    /// `grpc: error unmarshalling request`, tonic: `failed to decode Protobuf message`).
    pub fn is_decode_error(&self) -> bool {
        self.code == tonic::Code::Internal
            && (self.message.contains("failed to decode Protobuf message")
                || self.message.contains("error unmarshalling request")
                || self.message.contains("failed to unmarshal"))
    }

    /// INTERNAL or UNKNOWN for anything but an undecodable message: the server broke.
    pub fn is_server_fault(&self) -> bool {
        matches!(self.code, tonic::Code::Internal | tonic::Code::Unknown) && !self.is_decode_error()
    }

    /// One line for tables: code and the first part of the message.
    pub fn summary(&self) -> String {
        let mut m: String = self.message.chars().take(90).collect();
        if m.len() < self.message.len() {
            m.push('…');
        }
        if m.is_empty() {
            self.code_name()
        } else {
            format!("{} `{}`", self.code_name(), m.replace('|', "\\|"))
        }
    }
}

/// The longest a test waits for one answer; a member that takes longer is as good as broken.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(10);

/// A raw gRPC client of one endpoint.
#[derive(Debug, Clone)]
pub struct Raw {
    grpc: tonic::client::Grpc<Channel>,
}

impl Raw {
    pub async fn connect(endpoint: &str) -> anyhow::Result<Raw> {
        let channel = Channel::from_shared(format!("http://{endpoint}"))?
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await?;
        Ok(Raw {
            grpc: tonic::client::Grpc::new(channel),
        })
    }

    /// One request, one answer.
    pub async fn unary(&mut self, method: &str, body: Bytes) -> Answer {
        let path: PathAndQuery = method.parse().expect("a method path");
        let call = async {
            self.grpc
                .ready()
                .await
                .map_err(|e| Status::unavailable(e.to_string()))?;
            self.grpc
                .unary(tonic::Request::new(body), path, RawCodec)
                .await
        };
        match tokio::time::timeout(ANSWER_DEADLINE, call).await {
            Ok(Ok(r)) => Answer::ok(r.into_inner()),
            Ok(Err(s)) => Answer::status(&s),
            Err(_) => Answer::timeout(),
        }
    }

    /// Opens a bidirectional stream (Watch, LeaseKeepAlive): requests go in through
    /// [`RawStream::send`], and [`RawStream::half_close`] ends the sending side.
    ///
    /// The call is opened in a task of its own: grpc-go (etcd) sends a stream's response
    /// headers only with its first response, so a server that has nothing to say yet would
    /// otherwise keep the opener waiting before it could send anything.
    pub fn bidi(&mut self, method: &str) -> RawStream {
        let path: PathAndQuery = method.parse().expect("a method path");
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
        let requests = tokio_stream::wrappers::ReceiverStream::new(rx);
        let mut grpc = self.grpc.clone();
        let opening = tokio::spawn(async move {
            grpc.ready()
                .await
                .map_err(|e| Status::unavailable(e.to_string()))?;
            let resp = grpc
                .streaming(tonic::Request::new(requests), path, RawCodec)
                .await?;
            Ok(resp.into_inner())
        });
        RawStream {
            tx: Some(tx),
            rx: Rx::Opening(opening),
        }
    }

    /// A server-streaming call (Snapshot): its first message or status.
    pub async fn first_of_stream(&mut self, method: &str, body: Bytes) -> Answer {
        let path: PathAndQuery = method.parse().expect("a method path");
        let call = async {
            self.grpc
                .ready()
                .await
                .map_err(|e| Status::unavailable(e.to_string()))?;
            let mut s = self
                .grpc
                .server_streaming(tonic::Request::new(body), path, RawCodec)
                .await?
                .into_inner();
            match s.message().await? {
                Some(b) => Ok(b),
                None => Ok(Bytes::new()),
            }
        };
        match tokio::time::timeout(ANSWER_DEADLINE, call).await {
            Ok(Ok(b)) => Answer::ok(b),
            Ok(Err(s)) => Answer::status(&s),
            Err(_) => Answer::timeout(),
        }
    }
}

/// A bidirectional stream, opening or open.
#[derive(Debug)]
pub struct RawStream {
    tx: Option<tokio::sync::mpsc::Sender<Bytes>>,
    rx: Rx,
}

#[derive(Debug)]
enum Rx {
    Opening(tokio::task::JoinHandle<Result<Streaming<Bytes>, Status>>),
    Open(Box<Streaming<Bytes>>),
    Ended,
}

impl Drop for RawStream {
    fn drop(&mut self) {
        if let Rx::Opening(h) = &self.rx {
            h.abort();
        }
    }
}

/// What reading a stream gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    Message(Bytes),
    /// The server ended the stream: OK (`Ok` with no message) or a status.
    Ended(Answer),
    /// Nothing within the wait.
    Quiet,
}

impl RawStream {
    pub async fn send(&mut self, body: Bytes) -> bool {
        match &self.tx {
            Some(tx) => tx.send(body).await.is_ok(),
            None => false,
        }
    }

    /// Closes the sending side; the server may go on answering.
    pub fn half_close(&mut self) {
        self.tx = None;
    }

    pub async fn next(&mut self, wait: Duration) -> Next {
        let deadline = tokio::time::Instant::now() + wait;
        if let Rx::Opening(h) = &mut self.rx {
            match tokio::time::timeout_at(deadline, h).await {
                Err(_) => return Next::Quiet,
                Ok(Ok(Ok(s))) => self.rx = Rx::Open(Box::new(s)),
                Ok(Ok(Err(status))) => {
                    self.rx = Rx::Ended;
                    return Next::Ended(Answer::status(&status));
                }
                Ok(Err(e)) => panic!("the task opening a stream failed: {e}"),
            }
        }
        let Rx::Open(rx) = &mut self.rx else {
            return Next::Ended(Answer::status(&Status::cancelled("already ended")));
        };
        match tokio::time::timeout_at(deadline, rx.message()).await {
            Ok(Ok(Some(b))) => Next::Message(b),
            Ok(Ok(None)) => Next::Ended(Answer {
                code: tonic::Code::Ok,
                message: "stream ended".into(),
                body: None,
                timed_out: false,
            }),
            Ok(Err(s)) => Next::Ended(Answer::status(&s)),
            Err(_) => Next::Quiet,
        }
    }
}
