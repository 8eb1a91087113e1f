//! Container logs as agents keep them and clients print them: the CRI log format
//! (`<RFC 3339 time> <stdout|stderr> <F|P> <text>` per line, `P` for a partial line), and the
//! Node annotation through which the store and the CLI find a node's log service, and how
//! they connect to it.

use std::time::Duration;

use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

/// The Node annotation that holds the agent's log and session service address:
/// `https://host:port` when the agent serves TLS (it then requires a client certificate),
/// `host:port` for plain TCP on loopback.
pub const ENDPOINT_ANNOTATION: &str = "skiff.io/logs-endpoint";

/// A connection to the agent at `endpoint` (as [`ENDPOINT_ANNOTATION`] has it), over TLS
/// with `tls` (the CA the agents' serving certificates chain to, and the caller's client
/// certificate) when the agent serves TLS. The error says why, for the caller to name the
/// node.
pub async fn connect_agent(
    endpoint: &str,
    tls: Option<&ClientTlsConfig>,
    timeout: Duration,
) -> Result<Channel, String> {
    let secure = endpoint.starts_with("https://");
    let url = crate::tls::url(endpoint, secure);
    let mut e = Endpoint::from_shared(url)
        .map_err(|e| format!("not an address: {e}"))?
        .connect_timeout(timeout);
    if secure {
        let Some(tls) = tls else {
            return Err(
                "the agent serves TLS and requires a client certificate; none is configured \
                 for agents here (kube-apiserver's --kubelet-client-certificate)"
                    .into(),
            );
        };
        e = e.tls_config(tls.clone()).map_err(|e| e.to_string())?;
    }
    e.connect().await.map_err(|e| {
        // tonic's transport error says only "transport error"; the cause is in its source.
        let mut text = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            text = format!("{text}: {c}");
            cause = c.source();
        }
        text
    })
}

/// The text of CRI-format log lines, partial lines joined, as `kubectl logs` prints them;
/// lines not in that format pass through.
pub fn text_of(cri: &[u8]) -> String {
    render(cri, false)
}

/// As [`text_of`], each line prefixed with the time it was written (`kubectl logs
/// --timestamps`).
pub fn text_with_timestamps(cri: &[u8]) -> String {
    render(cri, true)
}

fn render(cri: &[u8], timestamps: bool) -> String {
    let mut out = String::new();
    let mut open = false;
    for line in String::from_utf8_lossy(cri).lines() {
        let mut parts = line.splitn(4, ' ');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(time), Some("stdout" | "stderr"), Some(tag @ ("F" | "P")), rest) => {
                if timestamps && !open {
                    out.push_str(time);
                    out.push(' ');
                }
                out.push_str(rest.unwrap_or(""));
                open = tag == "P";
                if !open {
                    out.push('\n');
                }
            }
            _ => {
                out.push_str(line);
                out.push('\n');
                open = false;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &[u8] = b"2026-01-01T00:00:00Z stdout F hello\n2026-01-01T00:00:00Z stderr P par\n2026-01-01T00:00:01Z stderr F tial\nplain\n";

    #[test]
    fn cri_lines_become_text() {
        assert_eq!(text_of(LOG), "hello\npartial\nplain\n");
    }

    /// A joined partial line carries the time of its first part, once.
    #[test]
    fn timestamps() {
        assert_eq!(
            text_with_timestamps(LOG),
            "2026-01-01T00:00:00Z hello\n2026-01-01T00:00:00Z partial\nplain\n"
        );
    }
}
