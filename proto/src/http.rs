//! Plain-HTTP GETs, for probes and metric scrapes: hyper's client, so chunked bodies, split
//! reads and keep-alive are handled as HTTP says, not as one `read` happens to return them.

use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{url}: not an http:// URL: {reason}")]
    Url { url: String, reason: String },
    #[error("GET {url}: {source}")]
    Request {
        url: String,
        source: hyper_util::client::legacy::Error,
    },
    #[error("GET {url}: reading the body: {source}")]
    Body { url: String, source: hyper::Error },
    #[error("GET {url}: no answer within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
}

/// An answer: its status code and whole body.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub body: Bytes,
}

impl Response {
    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A client for `http://` URLs. Cheap to clone; clones share their connection pool.
#[derive(Debug, Clone)]
pub struct HttpClient {
    inner: Client<HttpConnector, Empty<Bytes>>,
}

impl Default for HttpClient {
    fn default() -> Self {
        HttpClient::new()
    }
}

impl HttpClient {
    /// A client that keeps connections open between requests.
    pub fn new() -> HttpClient {
        HttpClient {
            inner: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// A client that opens a connection per request, as the kubelet's probes do (a probe
    /// checks that the server accepts one; a pooled connection would hide that it no longer
    /// does).
    pub fn without_keep_alive() -> HttpClient {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        HttpClient {
            inner: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build(connector),
        }
    }

    /// `GET url`, its whole answer within `timeout` (connecting included).
    pub async fn get(&self, url: &str, timeout: Duration) -> Result<Response, HttpError> {
        let uri: hyper::Uri =
            url.parse()
                .map_err(|e: hyper::http::uri::InvalidUri| HttpError::Url {
                    url: url.to_string(),
                    reason: e.to_string(),
                })?;
        if uri.scheme_str() != Some("http") {
            return Err(HttpError::Url {
                url: url.to_string(),
                reason: "only http:// is supported".into(),
            });
        }
        let attempt = async {
            let resp = self
                .inner
                .get(uri)
                .await
                .map_err(|source| HttpError::Request {
                    url: url.to_string(),
                    source,
                })?;
            let status = resp.status().as_u16();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|source| HttpError::Body {
                    url: url.to_string(),
                    source,
                })?
                .to_bytes();
            Ok(Response { status, body })
        };
        tokio::time::timeout(timeout, attempt)
            .await
            .map_err(|_| HttpError::Timeout {
                url: url.to_string(),
                timeout,
            })?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers once with `answer`, written in pieces.
    async fn serve_once(answer: &'static [&'static [u8]]) -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.expect("accept");
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            for piece in answer {
                let _ = s.write_all(piece).await;
                let _ = s.flush().await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        format!("http://{addr}/metrics")
    }

    /// A chunked body arriving in several reads is read whole.
    #[tokio::test]
    async fn chunked_body_in_pieces() {
        let url = serve_once(&[
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
            b"6\r\nfoo 1\n\r\n",
            b"6\r\nbar 2\n\r\n0\r\n\r\n",
        ])
        .await;
        let r = HttpClient::new()
            .get(&url, Duration::from_secs(5))
            .await
            .expect("get");
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), "foo 1\nbar 2\n");
    }

    #[tokio::test]
    async fn timeout_and_bad_urls() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/", l.local_addr().expect("addr"));
        // Accepted by the kernel, never answered.
        let e = HttpClient::without_keep_alive()
            .get(&url, Duration::from_millis(100))
            .await
            .expect_err("no answer");
        assert!(matches!(e, HttpError::Timeout { .. }), "{e}");
        for bad in ["https://127.0.0.1:1/", "127.0.0.1:1", "http://"] {
            let r = HttpClient::new().get(bad, Duration::from_secs(1)).await;
            assert!(matches!(r, Err(HttpError::Url { .. })), "{bad}: {r:?}");
        }
    }
}
