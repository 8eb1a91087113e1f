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
