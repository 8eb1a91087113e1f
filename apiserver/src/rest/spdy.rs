//! SPDY/3.1 framing, as much of it as a server of kubectl's port-forward, exec and attach
//! needs: kubectl speaks SPDY to `pods/portforward`, on a connection upgraded to it or
//! tunneled in a WebSocket's binary messages (see [`super::portforward`]), and to
//! `pods/exec` and `pods/attach` on an upgraded connection when it does not use WebSocket
//! (see [`super::exec`]). Below the frames: the upgrade's negotiation and answer, and the
//! tasks that read and write a connection's frames.
//!
//! A frame is 8 bytes of header and a payload. A control frame's header holds its version (3)
//! and type, a data frame's its stream ID; both end with 8 bits of flags and a 24-bit length.
//! Header blocks (the name/value pairs of SYN_STREAM and SYN_REPLY) are compressed with zlib,
//! one stream per direction for the whole connection, primed with SPDY/3's dictionary and
//! flushed at the end of every block. Flow control (SETTINGS, WINDOW_UPDATE) is read and
//! ignored, as client-go's SPDY library (spdystream) ignores it: it never opens a window, so
//! a sender that waited for one would stall after 64 KiB.

use std::sync::LazyLock;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use bytes::{BufMut, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use futures::{Sink, SinkExt};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, ReadHalf, WriteHalf};
use tokio::sync::mpsc;
use tokio_util::codec::{BytesCodec, FramedWrite};

use super::status::{ApiError, Reason};

/// The largest frame payload read; spdystream sends what one write gave it (client-go copies
/// with 32 KiB buffers).
pub const MAX_FRAME: usize = 128 << 10;
/// The largest header block, once inflated.
const MAX_HEADER_BLOCK: usize = 64 << 10;
/// The most name/value pairs in one header block.
const MAX_HEADERS: usize = 100;

const VERSION: u16 = 3;
const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const NOOP: u16 = 5;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// FLAG_FIN: the sender's last frame on the stream.
const FIN: u8 = 0x01;

/// RST_STREAM's status codes.
pub const PROTOCOL_ERROR: u32 = 1;
pub const REFUSED_STREAM: u32 = 3;
/// GOAWAY's status codes.
pub const GOAWAY_OK: u32 = 0;
pub const GOAWAY_PROTOCOL_ERROR: u32 = 1;

/// The words of SPDY/3's header compression dictionary (draft-mbelshe-httpbis-spdy-00,
/// 2.6.10.1), each preceded in it by its length.
const DICTIONARY_WORDS: [&str; 65] = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];

/// What follows the words in the dictionary, as it is.
const DICTIONARY_TAIL: &str = concat!(
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request",
    "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented",
    "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 ",
    "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,",
    "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=",
    "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
);

/// SPDY/3's header compression dictionary (1,423 bytes).
static DICTIONARY: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let mut d = Vec::with_capacity(1423);
    for word in DICTIONARY_WORDS {
        let len = u32::try_from(word.len()).expect("invariant: a short word");
        d.extend_from_slice(&len.to_be_bytes());
        d.extend_from_slice(word.as_bytes());
    }
    d.extend_from_slice(DICTIONARY_TAIL.as_bytes());
    d
});

/// Why a connection cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    #[error("SPDY connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("SPDY protocol error: {0}")]
    Protocol(String),
}

fn protocol(message: impl Into<String>) -> SpdyError {
    SpdyError::Protocol(message.into())
}

/// A frame a client sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A new stream, with its headers (names lowercase; several values joined by NUL).
    SynStream {
        id: u32,
        headers: Vec<(String, String)>,
        fin: bool,
    },
    /// The client ended the stream abnormally.
    RstStream {
        id: u32,
        status: u32,
    },
    Ping(u32),
    /// The client is going away.
    GoAway,
    Data {
        id: u32,
        data: Bytes,
        fin: bool,
    },
    /// SETTINGS, NOOP, WINDOW_UPDATE, SYN_REPLY and HEADERS: nothing a server of port-forward
    /// acts on.
    Ignored,
}

/// Reads a client's frames.
#[derive(Debug)]
pub struct FrameReader<R> {
    io: R,
    inflate: Decompress,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(io: R) -> FrameReader<R> {
        FrameReader {
            io,
            inflate: Decompress::new(true),
        }
    }

    /// The next frame, or `None` when the connection ended between frames.
    pub async fn next(&mut self) -> Result<Option<Frame>, SpdyError> {
        let mut head = [0u8; 8];
        match self.io.read_exact(&mut head[..1]).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        self.io.read_exact(&mut head[1..]).await?;
        let word = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let flags = head[4];
        let len = usize::from(head[5]) << 16 | usize::from(head[6]) << 8 | usize::from(head[7]);
        if len > MAX_FRAME {
            return Err(protocol(format!(
                "a frame of {len} bytes (the most is {MAX_FRAME})"
            )));
        }
        let mut payload = BytesMut::zeroed(len);
        self.io.read_exact(&mut payload).await?;
        let payload = payload.freeze();
        if word & 0x8000_0000 == 0 {
            return Ok(Some(Frame::Data {
                id: word,
                data: payload,
                fin: flags & FIN != 0,
            }));
        }
        let version = (word >> 16) as u16 & 0x7fff;
        if version != VERSION {
            return Err(protocol(format!("version {version}, not 3")));
        }
        let stream_id = |p: &[u8]| -> Result<u32, SpdyError> {
            let b = p
                .get(..4)
                .ok_or_else(|| protocol("a control frame too short for its stream ID"))?;
            Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff)
        };
        let frame = match word as u16 {
            SYN_STREAM => {
                if payload.len() < 10 {
                    return Err(protocol("SYN_STREAM shorter than 10 bytes"));
                }
                let id = stream_id(&payload)?;
                if id == 0 {
                    return Err(protocol("SYN_STREAM for stream 0"));
                }
                let block = self.inflate(&payload[10..])?;
                Frame::SynStream {
                    id,
                    headers: header_pairs(&block)?,
                    fin: flags & FIN != 0,
                }
            }
            RST_STREAM => {
                let id = stream_id(&payload)?;
                let status = stream_id(payload.get(4..).unwrap_or_default())?;
                Frame::RstStream { id, status }
            }
            PING => Frame::Ping(u32::from_be_bytes(
                payload
                    .get(..4)
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(|| protocol("PING shorter than 4 bytes"))?,
            )),
            GOAWAY => Frame::GoAway,
            SYN_REPLY | HEADERS => {
                // Their header blocks (after the stream ID) still move the connection's zlib
                // stream on.
                if let Some(block) = payload.get(4..) {
                    self.inflate(block)?;
                }
                Frame::Ignored
            }
            SETTINGS | NOOP | WINDOW_UPDATE => Frame::Ignored,
            other => return Err(protocol(format!("unknown control frame type {other}"))),
        };
        Ok(Some(frame))
    }

    /// Inflates one header block; the connection's zlib stream goes on past it.
    fn inflate(&mut self, block: &[u8]) -> Result<Vec<u8>, SpdyError> {
        let mut out = Vec::with_capacity(256);
        let mut at = 0;
        loop {
            if out.len() == out.capacity() {
                if out.len() >= MAX_HEADER_BLOCK {
                    return Err(protocol(format!(
                        "a header block larger than {MAX_HEADER_BLOCK} bytes"
                    )));
                }
                out.reserve(out.len());
            }
            let (before, made) = (self.inflate.total_in(), out.len());
            let step = self
                .inflate
                .decompress_vec(&block[at..], &mut out, FlushDecompress::Sync);
            let took = usize::try_from(self.inflate.total_in() - before)
                .expect("invariant: no more than the block");
            at += took;
            if took == 0 && out.len() == made && step.is_ok() && at < block.len() {
                return Err(protocol("a header block that does not inflate"));
            }
            match step {
                Ok(Status::StreamEnd) => {
                    return Err(protocol("the header compression stream ended"));
                }
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate.set_dictionary(&DICTIONARY).map_err(|e| {
                        protocol(format!("header block primed with another dictionary: {e}"))
                    })?;
                    continue;
                }
                Err(e) => return Err(protocol(format!("header block: {e}"))),
            }
            // Done once all of the block is in and zlib left room it did not need.
            if at == block.len() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

/// The name/value pairs of an inflated header block: a 32-bit count, then each name and
/// value preceded by its 32-bit length.
fn header_pairs(block: &[u8]) -> Result<Vec<(String, String)>, SpdyError> {
    let mut rest = block;
    let mut take = |n: usize| -> Result<&[u8], SpdyError> {
        if rest.len() < n {
            return Err(protocol("a header block shorter than it says"));
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let word = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
    let count = word(take(4)?);
    if count > MAX_HEADERS {
        return Err(protocol(format!(
            "{count} headers (the most is {MAX_HEADERS})"
        )));
    }
    let mut pairs = Vec::with_capacity(count);
    for _ in 0..count {
        let len = word(take(4)?);
        let name = String::from_utf8_lossy(take(len)?).to_ascii_lowercase();
        let len = word(take(4)?);
        let value = String::from_utf8_lossy(take(len)?).into_owned();
        pairs.push((name, value));
    }
    Ok(pairs)
}

/// A frame the server sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Accepts a stream (with no headers: port-forward's streams need none).
    SynReply(u32),
    RstStream {
        id: u32,
        status: u32,
    },
    Ping(u32),
    GoAway {
        last: u32,
        status: u32,
    },
    Data {
        id: u32,
        data: Bytes,
        fin: bool,
    },
}

/// Encodes the server's frames.
#[derive(Debug)]
pub struct FrameWriter {
    deflate: Compress,
}

impl Default for FrameWriter {
    fn default() -> Self {
        let mut deflate = Compress::new(Compression::default(), true);
        deflate
            .set_dictionary(&DICTIONARY)
            .expect("invariant: a new stream takes a dictionary");
        FrameWriter { deflate }
    }
}

fn control(out: &mut BytesMut, kind: u16, flags: u8, len: usize) {
    out.put_u16(0x8000 | VERSION);
    out.put_u16(kind);
    out.put_u32(u32::from(flags) << 24 | len as u32);
}

impl FrameWriter {
    pub fn encode(&mut self, reply: &Reply) -> Bytes {
        let mut out = BytesMut::new();
        match reply {
            Reply::SynReply(id) => {
                let block = self.deflate_block(&0u32.to_be_bytes());
                control(&mut out, SYN_REPLY, 0, 4 + block.len());
                out.put_u32(id & 0x7fff_ffff);
                out.put_slice(&block);
            }
            Reply::RstStream { id, status } => {
                control(&mut out, RST_STREAM, 0, 8);
                out.put_u32(id & 0x7fff_ffff);
                out.put_u32(*status);
            }
            Reply::Ping(id) => {
                control(&mut out, PING, 0, 4);
                out.put_u32(*id);
            }
            Reply::GoAway { last, status } => {
                control(&mut out, GOAWAY, 0, 8);
                out.put_u32(last & 0x7fff_ffff);
                out.put_u32(*status);
            }
            Reply::Data { id, data, fin } => {
                debug_assert!(data.len() <= MAX_FRAME);
                out.reserve(8 + data.len());
                out.put_u32(id & 0x7fff_ffff);
                out.put_u32(u32::from(if *fin { FIN } else { 0 }) << 24 | data.len() as u32);
                out.put_slice(data);
            }
        }
        out.freeze()
    }

    /// Deflates one header block, flushed so that the client can inflate it whole.
    fn deflate_block(&mut self, block: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(block.len() + 64);
        let mut at = 0;
        loop {
            let before = self.deflate.total_in();
            self.deflate
                .compress_vec(&block[at..], &mut out, FlushCompress::Sync)
                .expect("invariant: deflate takes any input");
            at += usize::try_from(self.deflate.total_in() - before)
                .expect("invariant: no more than the block");
            if at == block.len() && out.len() < out.capacity() {
                return out;
            }
            out.reserve(64);
        }
    }
}

/// The value of header `name` (lowercase) in a SYN_STREAM's headers.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Whether a new stream's ID is one a client may open after `last`: client streams are odd
/// and rise; anything else is a connection error.
pub fn next_client_stream(id: u32, last: u32) -> bool {
    !id.is_multiple_of(2) && id > last
}

/// The header that names the protocols of a SPDY upgrade, the client's in its order of
/// preference, then the one the server chose.
pub const STREAM_PROTOCOL_VERSION: &str = "x-stream-protocol-version";

/// Whether a request asks to be upgraded to SPDY/3.1, as client-go asks: a POST with
/// `Upgrade: SPDY/3.1`.
pub fn asked(method: &Method, headers: &HeaderMap) -> bool {
    *method == Method::POST
        && headers
            .get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().contains("spdy/3.1"))
}

/// The protocol of an upgrade: the first the client offers that `served` holds (`served`
/// newest first); the oldest served when the client names none; refused as the kubelet
/// refuses it when none fits.
pub fn negotiate(headers: &HeaderMap, served: &[&'static str]) -> Result<&'static str, ApiError> {
    let offered: Vec<&str> = headers
        .get_all(STREAM_PROTOCOL_VERSION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    let oldest = *served
        .last()
        .expect("invariant: a server serves at least one protocol");
    if offered.is_empty() {
        return Ok(oldest);
    }
    offered
        .iter()
        .find_map(|o| served.iter().find(|s| *s == o).copied())
        .ok_or_else(|| {
            ApiError::new(
                Reason::Forbidden,
                format!(
                    "unable to upgrade: unable to negotiate protocol: client supports \
                     {offered:?}, server supports {served:?}"
                ),
            )
        })
}

/// An upgraded connection's read half.
pub type Reading = ReadHalf<TokioIo<Upgraded>>;
/// An upgraded connection's write half, written a frame at a time.
pub type Writing = FramedWrite<WriteHalf<TokioIo<Upgraded>>, BytesCodec>;

/// Answers a request asking for SPDY with `101 Switching Protocols` and `protocol`, and
/// serves the connection with `serve` once it is upgraded, in a task bounded by it.
pub fn switch<F, Fut>(upgrade: OnUpgrade, protocol: &'static str, serve: F) -> Response
where
    F: FnOnce(Reading, Writing) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                let (read, write) = tokio::io::split(TokioIo::new(upgraded));
                serve(read, FramedWrite::new(write, BytesCodec::new())).await;
            }
            Err(e) => tracing::debug!(error = %e, "the SPDY upgrade failed"),
        }
    });
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = response.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    h.insert(STREAM_PROTOCOL_VERSION, HeaderValue::from_static(protocol));
    response
}

/// Reads a connection's frames into `frames` until it ends or breaks (the error, then
/// nothing more).
pub async fn read_frames<R: AsyncRead + Unpin>(
    io: R,
    frames: mpsc::Sender<Result<Frame, SpdyError>>,
) {
    let mut reader = FrameReader::new(io);
    loop {
        let (item, last) = match reader.next().await {
            Ok(Some(frame)) => (Ok(frame), false),
            Ok(None) => return,
            Err(e) => (Err(e), true),
        };
        if frames.send(item).await.is_err() || last {
            return;
        }
    }
}

/// Writes `replies` to a connection, flushing whenever none waits, until every sender is
/// gone (then the connection is closed) or it cannot be written.
pub async fn write_frames<S: Sink<Bytes> + Unpin>(mut sink: S, mut replies: mpsc::Receiver<Reply>) {
    let mut writer = FrameWriter::default();
    while let Some(reply) = replies.recv().await {
        if sink.feed(writer.encode(&reply)).await.is_err() {
            return;
        }
        if replies.is_empty() && sink.flush().await.is_err() {
            return;
        }
    }
    let _ = sink.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adler-32, as zlib records a dictionary's.
    fn adler32(data: &[u8]) -> u32 {
        let (mut a, mut b) = (1u32, 0u32);
        for &byte in data {
            a = (a + u32::from(byte)) % 65521;
            b = (b + a) % 65521;
        }
        b << 16 | a
    }

    #[test]
    fn the_dictionary_is_spdy3s() {
        assert_eq!(DICTIONARY.len(), 1423);
        assert_eq!(adler32(&DICTIONARY), 0xe3c6_a7c2);
    }

    /// A client's side of the connection: its own zlib stream, primed with the dictionary.
    struct Client {
        deflate: Compress,
        inflate: Decompress,
    }

    impl Client {
        fn new() -> Client {
            let mut deflate = Compress::new(Compression::best(), true);
            deflate.set_dictionary(&DICTIONARY).unwrap();
            Client {
                deflate,
                inflate: Decompress::new(true),
            }
        }

        fn block(&mut self, headers: &[(&str, &str)]) -> Vec<u8> {
            let mut raw = Vec::new();
            raw.extend_from_slice(&(headers.len() as u32).to_be_bytes());
            for (n, v) in headers {
                for s in [n, v] {
                    raw.extend_from_slice(&(s.len() as u32).to_be_bytes());
                    raw.extend_from_slice(s.as_bytes());
                }
            }
            let mut out = Vec::with_capacity(raw.len() + 128);
            self.deflate
                .compress_vec(&raw, &mut out, FlushCompress::Sync)
                .unwrap();
            out
        }

        fn syn_stream(&mut self, id: u32, headers: &[(&str, &str)]) -> Vec<u8> {
            let block = self.block(headers);
            let mut f = BytesMut::new();
            control(&mut f, SYN_STREAM, 0, 10 + block.len());
            f.put_u32(id);
            f.put_u32(0);
            f.put_u16(0);
            f.put_slice(&block);
            f.to_vec()
        }

        /// The headers of a server's SYN_REPLY.
        fn reply_headers(&mut self, frame: &[u8]) -> (u32, Vec<(String, String)>) {
            assert_eq!(&frame[..4], &[0x80, 0x03, 0x00, 0x02]);
            let id = u32::from_be_bytes(frame[8..12].try_into().unwrap());
            let mut out = Vec::with_capacity(4096);
            match self
                .inflate
                .decompress_vec(&frame[12..], &mut out, FlushDecompress::Sync)
            {
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate.set_dictionary(&DICTIONARY).unwrap();
                    let at = self.inflate.total_in() as usize;
                    self.inflate
                        .decompress_vec(&frame[12 + at..], &mut out, FlushDecompress::Sync)
                        .unwrap();
                }
                other => {
                    other.unwrap();
                }
            }
            (id, header_pairs(&out).unwrap())
        }
    }

    async fn read_all(bytes: Vec<u8>) -> Result<Vec<Frame>, SpdyError> {
        let mut reader = FrameReader::new(&bytes[..]);
        let mut frames = Vec::new();
        while let Some(f) = reader.next().await? {
            frames.push(f);
        }
        Ok(frames)
    }

    #[tokio::test]
    async fn frames_read_as_a_client_writes_them() {
        let mut client = Client::new();
        let mut wire = client.syn_stream(
            1,
            &[
                ("streamtype", "error"),
                ("port", "8080"),
                ("requestid", "0"),
            ],
        );
        // The second block goes on in the same zlib stream.
        wire.extend(client.syn_stream(3, &[("streamtype", "data"), ("port", "8080")]));
        wire.extend([0, 0, 0, 3, FIN, 0, 0, 2, b'h', b'i']);
        wire.extend([0x80, 3, 0, PING as u8, 0, 0, 0, 4, 0, 0, 0, 5]);
        wire.extend([
            0x80,
            3,
            0,
            WINDOW_UPDATE as u8,
            0,
            0,
            0,
            8,
            0,
            0,
            0,
            1,
            0,
            0,
            1,
            0,
        ]);
        wire.extend([
            0x80,
            3,
            0,
            RST_STREAM as u8,
            0,
            0,
            0,
            8,
            0,
            0,
            0,
            3,
            0,
            0,
            0,
            5,
        ]);
        let frames = read_all(wire).await.unwrap();
        let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
            p.iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            frames,
            [
                Frame::SynStream {
                    id: 1,
                    headers: pairs(&[
                        ("streamtype", "error"),
                        ("port", "8080"),
                        ("requestid", "0")
                    ]),
                    fin: false,
                },
                Frame::SynStream {
                    id: 3,
                    headers: pairs(&[("streamtype", "data"), ("port", "8080")]),
                    fin: false,
                },
                Frame::Data {
                    id: 3,
                    data: Bytes::from_static(b"hi"),
                    fin: true
                },
                Frame::Ping(5),
                Frame::Ignored,
                Frame::RstStream { id: 3, status: 5 },
            ]
        );
    }

    #[tokio::test]
    async fn a_connection_compressed_elsewhere_reads_whole() {
        // The fuzz corpus's kubectl-like connection, its header blocks deflated by Python's
        // zlib with the dictionary: three streams, data, a ping, a reset and a goaway.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus/spdy/kubectl");
        let frames = read_all(std::fs::read(path).expect("corpus"))
            .await
            .unwrap();
        assert_eq!(frames.len(), 9, "{frames:?}");
        let Frame::SynStream { id: 5, headers, .. } = &frames[6] else {
            panic!("{:?}", frames[6]);
        };
        assert_eq!(header(headers, "requestid"), Some("1"));
        assert_eq!(frames[8], Frame::GoAway);
    }

    #[tokio::test]
    async fn a_frame_split_anywhere_reads_the_same() {
        // The WebSocket tunnel carries the connection as a byte stream, cut anywhere.
        let mut client = Client::new();
        let wire = client.syn_stream(1, &[("streamtype", "data"), ("port", "80")]);
        let (a, b) = wire.split_at(5);
        let mut reader = FrameReader::new(a.chain(b));
        assert!(matches!(
            reader.next().await.unwrap(),
            Some(Frame::SynStream { id: 1, .. })
        ));
        assert!(reader.next().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn bad_frames_are_refused_with_their_cause() {
        let oversized = vec![0, 0, 0, 1, 0, 0x7f, 0xff, 0xff];
        let e = read_all(oversized).await.unwrap_err().to_string();
        assert!(e.contains("a frame of 8388607 bytes"), "{e}");
        let version2 = vec![0x80, 2, 0, 1, 0, 0, 0, 0];
        let e = read_all(version2).await.unwrap_err().to_string();
        assert!(e.contains("version 2"), "{e}");
        let unknown = vec![0x80, 3, 0, 42, 0, 0, 0, 0];
        let e = read_all(unknown).await.unwrap_err().to_string();
        assert!(e.contains("unknown control frame type 42"), "{e}");
        let not_zlib = {
            let mut f = BytesMut::new();
            control(&mut f, SYN_STREAM, 0, 14);
            f.put_u32(1);
            f.put_u32(0);
            f.put_u16(0);
            f.put_u32(0xdead_beef);
            f.to_vec()
        };
        let e = read_all(not_zlib).await.unwrap_err().to_string();
        assert!(e.contains("header block"), "{e}");
        // A frame cut short is an error; a connection that ends between frames is not.
        let mut client = Client::new();
        let mut cut = client.syn_stream(1, &[("port", "80")]);
        cut.truncate(cut.len() - 1);
        assert!(matches!(read_all(cut).await, Err(SpdyError::Io(_))));
        assert_eq!(read_all(vec![]).await.unwrap(), []);
    }

    #[test]
    fn replies_are_what_a_client_reads() {
        let mut writer = FrameWriter::default();
        let mut client = Client::new();
        for id in [1, 3] {
            let frame = writer.encode(&Reply::SynReply(id));
            assert_eq!(client.reply_headers(&frame), (id, vec![]));
        }
        let data = writer.encode(&Reply::Data {
            id: 3,
            data: Bytes::from_static(b"ok"),
            fin: true,
        });
        assert_eq!(&data[..], &[0, 0, 0, 3, FIN, 0, 0, 2, b'o', b'k']);
        let rst = writer.encode(&Reply::RstStream { id: 5, status: 3 });
        assert_eq!(
            &rst[..],
            &[0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 5, 0, 0, 0, 3]
        );
        let ping = writer.encode(&Reply::Ping(7));
        assert_eq!(&ping[..], &[0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 7]);
        let away = writer.encode(&Reply::GoAway { last: 9, status: 0 });
        assert_eq!(
            &away[..],
            &[0x80, 3, 0, 7, 0, 0, 0, 8, 0, 0, 0, 9, 0, 0, 0, 0]
        );
    }
}
