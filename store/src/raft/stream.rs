//! The peer stream: AppendEntries (heartbeats included) on plain framed connections between
//! members, beside the gRPC `RaftPeer` service on the same peer URL.
//!
//! A write waits for one AppendEntries round trip to a follower. Over gRPC that round trip
//! crossed a tower buffer, an HTTP/2 stream's headers, data and trailers, and a task spawned
//! per request on the follower: about 0.12 ms on this project's 2-vCPU machine, beside 0.03 ms
//! for a framed message over a bare loopback connection. etcd sends its Raft messages on long
//! streams for the same reason.
//!
//! - A connection opens with [`PREAMBLE`], which the member's peer listener tells apart from
//!   HTTP/2's preface by its first byte ([`split`]), and the member answers with it too.
//!   A member that answers anything else (a release from before the stream, whose gRPC server
//!   closes the connection) is sent its AppendEntries over gRPC for [`GRPC_ONLY_FOR`].
//! - Then requests and answers alternate, one at a time: `[u32 length][u8 kind][payload]` in,
//!   `[u32 length][u8 status][payload]` back, the payloads bincode like the gRPC messages'.
//! - Each call in flight has a connection of its own, taken from a pool per peer
//!   ([`Streams`]) and put back after its answer: a replication stream, its heartbeat task
//!   and openraft's ReadIndex rounds each find one ready. A call that fails or times out
//!   drops its connection, so no late answer is ever read as another call's.
//! - A pooled connection the peer has since closed (it restarted) fails at once; the call is
//!   made again once on a new connection. AppendEntries may be delivered twice: Raft takes a
//!   repeated message as it takes a late one.
//!
//! Votes, snapshots, forwarded requests and the rest stay on gRPC: they are rare, and a new
//! member dials every peer through them first.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, ReadBuf};
use tokio::time::timeout_at;

use super::TypeConfig;
use super::handler::PeerHandler;
use crate::backend;
use crate::tls::Conn;

/// What a peer-stream connection opens with, both ways. Its first byte is not that of
/// HTTP/2's preface (`PRI`) or of any HTTP/1.1 method.
pub const PREAMBLE: &[u8; 16] = b"~skiff-raft/1\r\n\n";

/// A request's kind: an AppendEntries (a heartbeat when it carries no entries).
const KIND_APPEND_ENTRIES: u8 = 1;

/// An answer's status: the payload is the bincode of the Raft call's result.
const ANSWERED: u8 = 0;
/// An answer's status: the member could not take the request (it is stopping, or the
/// request was malformed); the payload is the reason, as text.
const REFUSED: u8 = 1;

/// How long a peer that did not answer [`PREAMBLE`] is sent AppendEntries over gRPC only.
pub const GRPC_ONLY_FOR: Duration = Duration::from_secs(30);

/// Idle connections kept per peer: a replication stream, its heartbeat task and a few
/// ReadIndex rounds in flight at once.
const IDLE_PER_PEER: usize = 8;

/// The most a connection's dial (TCP and TLS handshakes, the preamble's exchange) may take.
pub(super) const DIAL_TIMEOUT: Duration = Duration::from_secs(1);

/// The largest answer a member reads: AppendEntries answers are a few dozen bytes.
const MAX_ANSWER: usize = 1 << 20;

/// The largest request a member reads beyond its `--max-request-bytes`: far above what one
/// AppendEntries carries (at most 1 MiB of entries, or a single larger entry, which holds a
/// request or a 1 MiB batch of them), and bounded so that a garbled length does not ask for
/// gigabytes. Bytes are read as they arrive, not reserved up front.
const REQUEST_SLACK: usize = 64 << 20;

/// How long a new connection has to send its first bytes before the listener drops it.
const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// A connection to a peer, plain or TLS.
pub(super) type PeerIo = Box<dyn Io>;

/// A peer-stream connection as the pool keeps it: reads buffered, so that a frame's length,
/// tag and payload, which arrive together, take one read from the socket and not three.
type Pooled = BufReader<PeerIo>;

/// How this member dials its peers' peer URLs for the stream and the relay: TCP, and TLS for
/// `https://` ones.
#[derive(Clone)]
pub struct Dialer {
    tls: Option<tokio_rustls::TlsConnector>,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Dialer {
    /// A dialer for `https://` peers with `tls` (none: they cannot be dialled).
    pub fn new(tls: Option<Arc<rustls::ClientConfig>>) -> Dialer {
        Dialer {
            tls: tls.map(tokio_rustls::TlsConnector::from),
        }
    }

    /// A new connection to `url` that opened with `preamble`, both ways; `None` if the peer
    /// answered something else.
    pub(super) async fn open(&self, url: &str, preamble: &[u8; 16]) -> io::Result<Option<PeerIo>> {
        let uri: tonic::codegen::http::Uri = url
            .parse()
            .map_err(|e| io::Error::other(format!("{url}: {e}")))?;
        let tls = uri.scheme_str() == Some("https");
        let (host, port) = crate::tls::host_port(&uri, if tls { 443 } else { 80 })?;
        let tcp = crate::tls::dial_tcp(&host, port).await?;
        let mut io: PeerIo = if tls {
            let connector = self.tls.as_ref().ok_or_else(|| {
                io::Error::other("an https:// peer URL, and no --peer-cert-file to dial it with")
            })?;
            Box::new(crate::tls::dial_tls(connector, &host, tcp).await?)
        } else {
            Box::new(tcp)
        };
        send(&mut io, preamble).await?;
        let mut answer = [0u8; 16];
        match io.read_exact(&mut answer).await {
            Ok(_) if answer == *preamble => Ok(Some(io)),
            // An older member's gRPC server closes the connection (or says why in HTTP/2).
            Ok(_) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Why a call on the peer stream failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No connection could be made (refused, unresolvable, no handshake in time), or the
    /// member refused the request: openraft backs off before the next.
    #[error("{0}")]
    Unreachable(String),
    /// The connection broke or timed out part way through the call.
    #[error("{0}")]
    Network(String),
}

/// The peer-stream connections of this member to its peers, idle ones pooled per peer URL.
#[derive(Clone)]
pub struct Streams {
    idle: Arc<Mutex<HashMap<String, Vec<Pooled>>>>,
    grpc_only: GrpcOnly,
    dial: Dialer,
}

/// Peers that did not answer a preamble (older releases), and until when they are sent over
/// gRPC only; then they are asked again.
#[derive(Clone, Default)]
pub(super) struct GrpcOnly(Arc<Mutex<HashMap<String, Instant>>>);

impl GrpcOnly {
    pub(super) fn contains(&self, url: &str) -> bool {
        let mut only = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match only.get(url) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                only.remove(url);
                false
            }
            None => false,
        }
    }

    /// `url` did not answer the preamble of `protocol`: `what` goes over gRPC for
    /// [`GRPC_ONLY_FOR`].
    pub(super) fn insert(&self, url: &str, protocol: &str, what: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(url.to_string(), Instant::now() + GRPC_ONLY_FOR);
        tracing::warn!(
            peer = url,
            "the peer does not speak {protocol} (an older release?); {what} go over gRPC"
        );
    }
}

impl std::fmt::Debug for Streams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streams").finish_non_exhaustive()
    }
}

impl Streams {
    pub fn new(dial: Dialer) -> Streams {
        Streams {
            idle: Arc::default(),
            grpc_only: GrpcOnly::default(),
            dial,
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Pooled>>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends an AppendEntries (its bincode, `payload`) to the peer at `url` and returns the
    /// answer's bincode, within `ttl`. `Ok(None)`: the peer does not speak the stream, and
    /// the call is to go over gRPC.
    pub async fn append_entries(
        &self,
        url: &str,
        payload: &[u8],
        ttl: Duration,
    ) -> Result<Option<Vec<u8>>, CallError> {
        let deadline = tokio::time::Instant::now() + ttl;
        let frame = frame(KIND_APPEND_ENTRIES, payload);
        if self.grpc_only.contains(url) {
            return Ok(None);
        }
        let pooled = self.idle().get_mut(url).and_then(Vec::pop);
        if let Some(mut io) = pooled {
            match timeout_at(deadline, exchange(&mut io, &frame)).await {
                Ok(Ok(answer)) => return self.answered(url, io, answer).map(Some),
                Err(_) => return Err(timed_out(ttl)),
                // Closed by the peer while it idled (the peer restarted, say): once more on a
                // new connection.
                Ok(Err(_)) => {}
            }
        }
        let dial = tokio::time::Instant::now() + DIAL_TIMEOUT;
        let mut io = match timeout_at(deadline.min(dial), self.dial.open(url, PREAMBLE)).await {
            Ok(Ok(Some(io))) => BufReader::new(io),
            Ok(Ok(None)) => {
                self.grpc_only
                    .insert(url, "the Raft stream", "AppendEntries");
                return Ok(None);
            }
            Ok(Err(e)) => return Err(CallError::Unreachable(format!("dialling {url}: {e}"))),
            Err(_) => {
                return Err(CallError::Unreachable(format!(
                    "dialling {url}: no connection within {:?}",
                    ttl.min(DIAL_TIMEOUT)
                )));
            }
        };
        match timeout_at(deadline, exchange(&mut io, &frame)).await {
            Ok(Ok(answer)) => self.answered(url, io, answer).map(Some),
            Ok(Err(e)) => Err(CallError::Network(format!("{url}: {e}"))),
            Err(_) => Err(timed_out(ttl)),
        }
    }

    /// An answer read whole: the connection goes back to the pool.
    fn answered(
        &self,
        url: &str,
        io: Pooled,
        (status, body): (u8, Vec<u8>),
    ) -> Result<Vec<u8>, CallError> {
        let mut pool = self.idle();
        let idle = pool.entry(url.to_string()).or_default();
        if idle.len() < IDLE_PER_PEER {
            idle.push(io);
        }
        drop(pool);
        match status {
            ANSWERED => Ok(body),
            _ => Err(CallError::Unreachable(format!(
                "{url} refused the request: {}",
                String::from_utf8_lossy(&body)
            ))),
        }
    }
}

fn timed_out(ttl: Duration) -> CallError {
    CallError::Network(format!("no answer within {ttl:?}"))
}

/// `[u32 length][u8 tag][payload]`, the length counting the tag (a request's kind, an
/// answer's status) and the payload.
fn frame(tag: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(5 + payload.len());
    frame.extend_from_slice(&(payload.len() as u32 + 1).to_be_bytes());
    frame.push(tag);
    frame.extend_from_slice(payload);
    frame
}

/// Writes `frame` and reads the answer: its status and payload.
async fn exchange(io: &mut Pooled, frame: &[u8]) -> io::Result<(u8, Vec<u8>)> {
    send(io, frame).await?;
    read_frame(io, MAX_ANSWER)
        .await?
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "closed before answering"))
}

/// One frame: its first byte and the rest. `None`: the connection ended between frames.
async fn read_frame<R: AsyncRead + Unpin>(
    io: &mut R,
    limit: usize,
) -> io::Result<Option<(u8, Vec<u8>)>> {
    Ok(read_frame_with(io, limit, 1)
        .await?
        .map(|(head, body)| (head[0], body)))
}

/// One frame, `[u32 length][head][rest]`: its first `head` bytes and the rest, the length
/// from `head` to `limit`. `None`: the connection ended between frames. Bytes are read as
/// they arrive, not reserved for the length up front.
pub(super) async fn read_frame_with<R: AsyncRead + Unpin>(
    io: &mut R,
    limit: usize,
    head: usize,
) -> io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut len = [0u8; 4];
    match io.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len < head.max(1) || len > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes (from {head} to {limit} are read)"),
        ));
    }
    let mut first = vec![0u8; head];
    io.read_exact(&mut first).await?;
    let mut body = Vec::with_capacity((len - head).min(64 << 10));
    let read = (&mut *io)
        .take((len - head) as u64)
        .read_to_end(&mut body)
        .await?;
    if read != len - head {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "a frame cut short",
        ));
    }
    Ok(Some((first, body)))
}

/// Writes `bytes` and flushes them (through TLS too).
pub(super) async fn send<W: AsyncWrite + Unpin>(io: &mut W, bytes: &[u8]) -> io::Result<()> {
    io.write_all(bytes).await?;
    io.flush().await
}

/// A connection accepted on a peer listener, with the bytes read to tell its protocol put
/// back in front of the rest: what the gRPC server is given.
pub struct Sniffed {
    head: Vec<u8>,
    at: usize,
    conn: Conn,
}

impl std::fmt::Debug for Sniffed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sniffed")
            .field("head", &self.head.len())
            .field("at", &self.at)
            .finish_non_exhaustive()
    }
}

impl AsyncRead for Sniffed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.at < this.head.len() {
            let n = (this.head.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.head[this.at..this.at + n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.conn).poll_read(cx, buf)
    }
}

impl AsyncWrite for Sniffed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.conn).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.conn).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.conn).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.conn).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.conn.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for Sniffed {
    type ConnectInfo = crate::tls::ConnInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.conn.connect_info()
    }
}

/// What a new connection opened with.
enum Opening {
    Stream(Conn),
    Relay(Conn),
    Other(Sniffed),
}

/// Reads just enough of a new connection to tell the peer stream and the relay from anything
/// else: one byte settles it for HTTP/2 and HTTP/1.1.
async fn sniff(mut conn: Conn) -> io::Result<Opening> {
    let mut head = Vec::with_capacity(PREAMBLE.len());
    loop {
        if head.as_slice() == PREAMBLE {
            return Ok(Opening::Stream(conn));
        }
        if head.as_slice() == super::relay::PREAMBLE {
            return Ok(Opening::Relay(conn));
        }
        if !PREAMBLE.starts_with(&head) && !super::relay::PREAMBLE.starts_with(&head) {
            return Ok(Opening::Other(Sniffed { head, at: 0, conn }));
        }
        let mut buf = [0u8; PREAMBLE.len()];
        let n = conn.read(&mut buf[..PREAMBLE.len() - head.len()]).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed at once",
            ));
        }
        head.extend_from_slice(&buf[..n]);
    }
}

/// Splits a peer listener's connections: those that open with [`PREAMBLE`] (or the relay's)
/// are served here,
/// on tasks of their own; every other one goes on, its first bytes put back, to the gRPC
/// server that polls the returned stream. Dropping that stream (the gRPC server stops)
/// closes the peer-stream connections too.
pub fn split<H: PeerHandler>(
    mut incoming: Pin<Box<dyn Stream<Item = io::Result<Conn>> + Send>>,
    service: H,
    max_request_bytes: usize,
) -> Pin<Box<dyn Stream<Item = io::Result<Sniffed>> + Send>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<Sniffed>>(64);
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                next = incoming.next() => match next {
                    Some(Ok(conn)) => {
                        let tx = tx.clone();
                        let service = service.clone();
                        conns.spawn(async move {
                            match tokio::time::timeout(FIRST_BYTES_TIMEOUT, sniff(conn)).await {
                                Ok(Ok(Opening::Other(conn))) => {
                                    let _ = tx.send(Ok(conn)).await;
                                }
                                Ok(Ok(Opening::Stream(conn))) => {
                                    let _ = crate::tls::keep_alive(conn.tcp());
                                    serve(conn, service, max_request_bytes + REQUEST_SLACK).await;
                                }
                                Ok(Ok(Opening::Relay(conn))) => {
                                    let _ = crate::tls::keep_alive(conn.tcp());
                                    super::relay::serve(conn, service, max_request_bytes + REQUEST_SLACK)
                                        .await;
                                }
                                Ok(Err(_)) | Err(_) => {}
                            }
                        });
                    }
                    Some(Err(e)) => {
                        if tx.send(Err(e)).await.is_err() {
                            return;
                        }
                    }
                    None => return,
                },
                Some(done) = conns.join_next(), if !conns.is_empty() => {
                    if let Err(e) = done
                        && e.is_panic()
                    {
                        tracing::error!(error = %e, "a peer-stream connection's task panicked");
                    }
                }
                () = tx.closed() => return,
            }
        }
    });
    let guard = crate::tls::AbortOnDrop(task);
    Box::pin(futures::stream::unfold(
        (rx, guard),
        |(mut rx, guard)| async move { rx.recv().await.map(|c| (c, (rx, guard))) },
    ))
}

/// Whether `e` is the other end going away (killed, stopped, its call timed out) rather than
/// something it sent.
pub(super) fn is_hang_up(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
    )
}

/// Serves one peer-stream connection: the preamble back, then each request in turn.
async fn serve<H: PeerHandler>(mut conn: Conn, service: H, limit: usize) {
    let peer = tonic::transport::server::Connected::connect_info(&conn)
        .tcp
        .remote_addr();
    if send(&mut conn, PREAMBLE).await.is_err() {
        return;
    }
    let mut conn = BufReader::new(conn);
    loop {
        let (kind, payload) = match read_frame(&mut conn, limit).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            // The leader died or stopped mid-frame: its life, not a fault of the stream.
            Err(e) if is_hang_up(&e) => {
                tracing::debug!(?peer, error = %e, "a peer-stream connection ended");
                return;
            }
            Err(e) => {
                tracing::warn!(?peer, error = %e, "closing a peer-stream connection");
                return;
            }
        };
        let (status, body) = match kind {
            KIND_APPEND_ENTRIES => {
                match backend::decode::<openraft::raft::AppendEntriesRequest<TypeConfig>>(&payload)
                {
                    Ok(rpc) => match service.take_append_entries(rpc).await {
                        Ok(res) => (ANSWERED, backend::encode(&res)),
                        Err(e) => (REFUSED, e.to_string().into_bytes()),
                    },
                    Err(e) => (
                        REFUSED,
                        format!("malformed AppendEntries: {e}").into_bytes(),
                    ),
                }
            }
            other => (
                REFUSED,
                format!("unknown request kind {other}").into_bytes(),
            ),
        };
        if send(&mut conn, &frame(status, &body)).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// A listener on a free loopback port, and its `http://` URL.
    pub(in crate::raft) async fn listener() -> (TcpListener, String) {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", l.local_addr().expect("addr"));
        (l, url)
    }

    /// A peer that speaks the stream and answers `answers` requests on each connection
    /// (each answer the request's payload reversed), then closes it.
    fn echo_peer(l: TcpListener, answers: usize) -> tokio::task::JoinHandle<usize> {
        tokio::spawn(async move {
            let mut connections = 0;
            loop {
                let Ok(Ok((mut c, _))) =
                    tokio::time::timeout(Duration::from_secs(2), l.accept()).await
                else {
                    return connections;
                };
                connections += 1;
                let mut preamble = [0u8; PREAMBLE.len()];
                c.read_exact(&mut preamble).await.expect("preamble");
                assert_eq!(&preamble, PREAMBLE);
                send(&mut c, PREAMBLE).await.expect("preamble back");
                for _ in 0..answers {
                    let Ok(Some((kind, mut body))) = read_frame(&mut c, 1 << 20).await else {
                        break;
                    };
                    assert_eq!(kind, KIND_APPEND_ENTRIES);
                    body.reverse();
                    send(&mut c, &frame(ANSWERED, &body)).await.expect("answer");
                }
            }
        })
    }

    #[tokio::test]
    async fn a_connection_is_kept_for_the_next_call_and_made_again_when_the_peer_closed_it() {
        let (l, url) = listener().await;
        // Two answers per connection: the third call finds its pooled connection closed.
        let peer = echo_peer(l, 2);
        let streams = Streams::new(Dialer::new(None));
        for i in 0..5u8 {
            let answer = streams
                .append_entries(&url, &[i, 1, 2], Duration::from_secs(1))
                .await
                .expect("answered");
            assert_eq!(answer, Some(vec![2, 1, i]), "call {i}");
        }
        drop(streams);
        assert_eq!(
            peer.await.expect("peer"),
            3,
            "five calls on three connections"
        );
    }

    #[tokio::test]
    async fn a_peer_that_does_not_answer_the_preamble_is_sent_grpc() {
        let (l, url) = listener().await;
        // As a gRPC server does with a preface it does not know: it closes the connection.
        let peer = tokio::spawn(async move {
            let (mut c, _) = l.accept().await.expect("accept");
            let mut buf = [0u8; 64];
            let _ = c.read(&mut buf).await;
            drop(c);
            l
        });
        let streams = Streams::new(Dialer::new(None));
        let first = streams
            .append_entries(&url, b"x", Duration::from_secs(1))
            .await
            .expect("no error");
        assert_eq!(first, None);
        // The listener is closed now: a dial would fail, but none is made.
        drop(peer.await.expect("peer"));
        let second = streams
            .append_entries(&url, b"x", Duration::from_secs(1))
            .await
            .expect("no error");
        assert_eq!(second, None);
    }

    #[tokio::test]
    async fn refusals_and_dead_peers_are_errors_that_say_why() {
        let (l, url) = listener().await;
        tokio::spawn(async move {
            let (mut c, _) = l.accept().await.expect("accept");
            let mut preamble = [0u8; PREAMBLE.len()];
            c.read_exact(&mut preamble).await.expect("preamble");
            send(&mut c, PREAMBLE).await.expect("preamble back");
            let _ = read_frame(&mut c, 1 << 20).await;
            send(&mut c, &frame(REFUSED, b"stopped"))
                .await
                .expect("refusal");
            // Then nothing: the next call times out.
            let _ = read_frame(&mut c, 1 << 20).await;
            std::future::pending::<()>().await;
        });
        let streams = Streams::new(Dialer::new(None));
        let refused = streams
            .append_entries(&url, b"x", Duration::from_secs(1))
            .await
            .expect_err("refused");
        assert!(
            matches!(&refused, CallError::Unreachable(m) if m.contains("stopped")),
            "{refused:?}"
        );
        let silent = streams
            .append_entries(&url, b"x", Duration::from_millis(100))
            .await
            .expect_err("times out");
        assert!(
            matches!(&silent, CallError::Network(m) if m.contains("no answer within")),
            "{silent:?}"
        );
        let (l, url) = listener().await;
        drop(l);
        let dead = streams
            .append_entries(&url, b"x", Duration::from_secs(1))
            .await
            .expect_err("nobody listens");
        assert!(matches!(dead, CallError::Unreachable(_)), "{dead:?}");
    }

    /// An HTTP/2 connection reaches the gRPC server with every byte it sent, the preamble's
    /// first byte included in a different place; the stream's preamble is taken whole.
    #[tokio::test]
    async fn the_listener_tells_the_stream_from_http2_and_hands_http2_on_whole() {
        let (l, url) = listener().await;
        let addr = url.trim_start_matches("http://").to_string();
        let client = tokio::spawn(async move {
            let mut h2 = TcpStream::connect(&addr).await.expect("connect");
            h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                .await
                .expect("preface");
            let mut raft = TcpStream::connect(&addr).await.expect("connect");
            // The preamble in two pieces, as TCP may deliver it.
            raft.write_all(&PREAMBLE[..3]).await.expect("write");
            tokio::time::sleep(Duration::from_millis(20)).await;
            raft.write_all(&PREAMBLE[3..]).await.expect("write");
            raft.write_all(b"next").await.expect("write");
            (h2, raft)
        });
        let (h2, _) = l.accept().await.expect("accept");
        let (raft, _) = l.accept().await.expect("accept");
        let _clients = client.await.expect("client");
        match sniff(Conn::Plain(h2)).await.expect("sniffed") {
            Opening::Other(mut s) => {
                let mut all = vec![0u8; 24];
                s.read_exact(&mut all).await.expect("read");
                assert_eq!(&all, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
            }
            Opening::Stream(_) | Opening::Relay(_) => panic!("HTTP/2 taken for the stream"),
        }
        match sniff(Conn::Plain(raft)).await.expect("sniffed") {
            Opening::Stream(mut c) => {
                let mut next = [0u8; 4];
                c.read_exact(&mut next).await.expect("read");
                assert_eq!(&next, b"next", "nothing past the preamble was taken");
            }
            Opening::Other(_) | Opening::Relay(_) => panic!("the stream taken for HTTP"),
        }
    }

    #[tokio::test]
    async fn frames_longer_than_the_limit_or_cut_short_are_refused() {
        let mut long = io::Cursor::new([&100u32.to_be_bytes()[..], &[1u8; 100]].concat());
        let err = read_frame(&mut long, 50).await.expect_err("over the limit");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        let mut cut = io::Cursor::new([&100u32.to_be_bytes()[..], &[1u8; 40]].concat());
        let err = read_frame(&mut cut, 1000).await.expect_err("cut short");
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        let mut empty = io::Cursor::new(0u32.to_be_bytes().to_vec());
        assert!(
            read_frame(&mut empty, 1000).await.is_err(),
            "a frame without a tag"
        );
        let mut none = io::Cursor::new(Vec::new());
        assert!(
            read_frame(&mut none, 1000)
                .await
                .expect("clean end")
                .is_none()
        );
        let mut whole = io::Cursor::new(frame(7, b"abc"));
        assert_eq!(
            read_frame(&mut whole, 1000).await.expect("read"),
            Some((7, b"abc".to_vec()))
        );
    }
}
