//! Below gRPC: garbage bytes on the client port, and connections that open and then idle.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::fuzz::Rng;

/// The HTTP/2 client preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// An empty SETTINGS frame: length 0, type 4, no flags, stream 0.
pub const SETTINGS: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];

/// One connection's worth of garbage, chosen by `r`.
pub fn garbage(r: &mut Rng) -> Vec<u8> {
    match r.below(8) {
        0 => r.bytes(512),
        1 => [PREFACE, &r.bytes(256)].concat(),
        2 => [PREFACE, SETTINGS, &r.bytes(256)].concat(),
        // A HEADERS frame on stream 1 whose HPACK block is noise.
        3 => [
            PREFACE,
            SETTINGS,
            &[0, 0, 16, 1, 4, 0, 0, 0, 1],
            &r.bytes(16)[..],
        ]
        .concat(),
        // A frame header announcing 16 MiB, then little.
        4 => [
            PREFACE,
            SETTINGS,
            &[0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 1],
            &r.bytes(64)[..],
        ]
        .concat(),
        5 => b"GET /etcdserverpb.KV/Range HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        6 => PREFACE[..r.below(PREFACE.len() as u64) as usize].to_vec(),
        _ => Vec::new(),
    }
}

/// Sends garbage over `n` connections, `parallel` at a time; each reads what comes back for a
/// moment, then closes. Returns how many connections could be opened.
pub async fn spray(endpoint: &str, seed: u64, n: usize, parallel: usize) -> usize {
    let mut opened = 0;
    let mut i = 0;
    while i < n {
        let batch: Vec<_> = (i..(i + parallel).min(n))
            .map(|j| {
                let endpoint = endpoint.to_string();
                tokio::spawn(async move {
                    let mut r = Rng::for_case(seed ^ 0x7cb, j as u64);
                    let Ok(mut s) = TcpStream::connect(&endpoint).await else {
                        return false;
                    };
                    let _ = s.write_all(&garbage(&mut r)).await;
                    let mut buf = [0u8; 1024];
                    let _ =
                        tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await;
                    true
                })
            })
            .collect();
        for t in batch {
            if t.await.unwrap_or(false) {
                opened += 1;
            }
        }
        i += parallel;
    }
    opened
}

/// Opens `n` connections that then send nothing more: every other one says the HTTP/2
/// preface and SETTINGS first. They stay open until the returned streams are dropped.
pub async fn idle(endpoint: &str, n: usize) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        let Ok(mut s) = TcpStream::connect(endpoint).await else {
            continue;
        };
        if i % 2 == 0 {
            let _ = s.write_all(&[PREFACE, SETTINGS].concat()).await;
        }
        held.push(s);
    }
    held
}

/// One HTTP/2 frame: its 9-byte header (length, type, flags, stream) and payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK literal (without indexing) whose name is static-table entry `index`.
fn literal(index: u8, value: &str) -> Vec<u8> {
    assert!(index < 16 && value.len() < 127);
    [&[index, value.len() as u8][..], value.as_bytes()].concat()
}

/// How a burst of cancelled requests ended the connection it came on.
#[derive(Debug, PartialEq, Eq)]
pub enum AfterBurst {
    /// The server answered a PING after the burst: the connection lives.
    Alive,
    /// The server sent GOAWAY with this error code (11 is ENHANCE_YOUR_CALM).
    GoAway(u32),
    /// The connection closed, or nothing came back in time.
    Gone,
}

/// What a gRPC client whose deadlines expire in a burst sends: on one connection, `n`
/// requests (`path`, POST, HEADERS without END_STREAM), each followed at once by
/// RST_STREAM(CANCEL), written together so the server reads each reset before it has handed
/// the stream to a handler. Then a PING; reports how the server answered.
pub async fn cancelled_burst(endpoint: &str, path: &str, n: u32) -> AfterBurst {
    let mut s = TcpStream::connect(endpoint).await.expect("connect");
    let mut out = [PREFACE, SETTINGS].concat();
    for i in 0..n {
        let stream = 2 * i + 1;
        // :method POST, :scheme http (static 3 and 6), then :path, :authority, content-type.
        let block = [
            &[0x83, 0x86][..],
            &literal(4, path),
            &literal(1, endpoint),
            &[0x0f, 0x10, 0x10][..],
            b"application/grpc",
        ]
        .concat();
        out.extend(frame(1, 0x4, stream, &block));
        out.extend(frame(3, 0, stream, &8u32.to_be_bytes()));
    }
    out.extend(frame(6, 0, 0, b"burst!!!"));
    s.write_all(&out).await.expect("write the burst");
    let mut buf = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        // Complete frames so far: GOAWAY (7) or PING with ACK (6, flag 1).
        let mut at = 0;
        while buf.len() >= at + 9 {
            let len = u32::from_be_bytes([0, buf[at], buf[at + 1], buf[at + 2]]) as usize;
            if buf.len() < at + 9 + len {
                break;
            }
            let payload = &buf[at + 9..at + 9 + len];
            match (buf[at + 3], buf[at + 4] & 1) {
                (7, _) if len >= 8 => {
                    return AfterBurst::GoAway(u32::from_be_bytes([
                        payload[4], payload[5], payload[6], payload[7],
                    ]));
                }
                (6, 1) => return AfterBurst::Alive,
                _ => {}
            }
            at += 9 + len;
        }
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout_at(deadline, s.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return AfterBurst::Gone,
        }
    }
}
