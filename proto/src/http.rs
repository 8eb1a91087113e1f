//! A plain-HTTP client for probes, metric scrapes and the Kubernetes API's benchmark: hyper's
//! client, so chunked bodies, split reads and keep-alive are handled as HTTP says, not as one
//! `read` happens to return them.

use std::time::Duration;

use futures::{Stream, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::Method;
use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{url}: not an http:// URL: {reason}")]
    Url { url: String, reason: String },
    #[error("{method} {url}: {source}")]
    Request {
        method: Method,
        url: String,
        source: hyper_util::client::legacy::Error,
    },
    #[error("{method} {url}: reading the body: {source}")]
    Body {
        method: Method,
        url: String,
        source: hyper::Error,
    },
    #[error("{method} {url}: no answer within {timeout:?}")]
    Timeout {
        method: Method,
        url: String,
        timeout: Duration,
    },
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

/// A request body and its media type (`application/json`).
#[derive(Debug, Clone)]
pub struct Body {
    pub content_type: &'static str,
    pub bytes: Bytes,
}

/// A client for `http://` URLs. Cheap to clone; clones share their connection pool.
#[derive(Debug, Clone)]
pub struct HttpClient {
    inner: Client<HttpConnector, Full<Bytes>>,
}

impl Default for HttpClient {
    fn default() -> Self {
        HttpClient::new()
    }
}

impl HttpClient {
    /// A client that keeps connections open between requests (one per request in flight to
    /// a host, reused once it is answered).
    pub fn new() -> HttpClient {
        // Nagle off: a request's headers and body may leave in two writes, and the second
        // would otherwise wait for the server's delayed ACK.
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        HttpClient {
            inner: Client::builder(TokioExecutor::new()).build(connector),
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
        self.send(Method::GET, url, None, timeout).await
    }

    /// `POST url` with `body`, its whole answer within `timeout`.
    pub async fn post(
        &self,
        url: &str,
        body: Body,
        timeout: Duration,
    ) -> Result<Response, HttpError> {
        self.send(Method::POST, url, Some(body), timeout).await
    }

    /// `DELETE url`, its whole answer within `timeout`.
    pub async fn delete(&self, url: &str, timeout: Duration) -> Result<Response, HttpError> {
        self.send(Method::DELETE, url, None, timeout).await
    }

    /// Any request, its whole answer within `timeout` (connecting included).
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<Body>,
        timeout: Duration,
    ) -> Result<Response, HttpError> {
        let attempt = async {
            let resp = self.head(method.clone(), url, body).await?;
            let status = resp.status().as_u16();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|source| HttpError::Body {
                    method: method.clone(),
                    url: url.to_string(),
                    source,
                })?
                .to_bytes();
            Ok(Response { status, body })
        };
        tokio::time::timeout(timeout, attempt)
            .await
            .map_err(|_| HttpError::Timeout {
                method: method.clone(),
                url: url.to_string(),
                timeout,
            })?
    }

    /// `GET url` whose body is read as it arrives (a watch): the status once the headers
    /// came (within `timeout`), then the body's chunks, for as long as the server sends them.
    pub async fn get_streaming(
        &self,
        url: &str,
        timeout: Duration,
    ) -> Result<
        (
            u16,
            impl Stream<Item = Result<Bytes, HttpError>> + Send + 'static,
        ),
        HttpError,
    > {
        let resp = tokio::time::timeout(timeout, self.head(Method::GET, url, None))
            .await
            .map_err(|_| HttpError::Timeout {
                method: Method::GET,
                url: url.to_string(),
                timeout,
            })??;
        let status = resp.status().as_u16();
        let url = url.to_string();
        let chunks = resp.into_body().into_data_stream().map(move |r| {
            r.map_err(|source| HttpError::Body {
                method: Method::GET,
                url: url.clone(),
                source,
            })
        });
        Ok((status, chunks))
    }

    /// Sends the request; answers once the response's headers arrived.
    async fn head(
        &self,
        method: Method,
        url: &str,
        body: Option<Body>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, HttpError> {
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
        let mut request = hyper::Request::builder().method(method.clone()).uri(uri);
        let bytes = match body {
            Some(b) => {
                request = request.header(CONTENT_TYPE, HeaderValue::from_static(b.content_type));
                b.bytes
            }
            None => Bytes::new(),
        };
        let request = request.body(Full::new(bytes)).map_err(|e| HttpError::Url {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
        self.inner
            .request(request)
            .await
            .map_err(|source| HttpError::Request {
                method,
                url: url.to_string(),
                source,
            })
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

    /// A POST carries its body and media type; the answer's body comes back whole.
    #[tokio::test]
    async fn post_sends_body_and_content_type() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/api/v1/pods", l.local_addr().expect("addr"));
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.expect("accept");
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            // Headers, then the 7-byte body the Content-Length announces.
            while !got.ends_with(b"\r\n\r\n{\"a\":1}") {
                let n = s.read(&mut buf).await.expect("read");
                assert!(n > 0, "request ended early: {got:?}");
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
                .await
                .expect("write");
            String::from_utf8(got).expect("ASCII request")
        });
        let body = Body {
            content_type: "application/json",
            bytes: Bytes::from_static(br#"{"a":1}"#),
        };
        let r = HttpClient::new()
            .post(&url, body, Duration::from_secs(5))
            .await
            .expect("post");
        assert_eq!((r.status, r.text().as_str()), (201, "ok"));
        let request = server.await.expect("server").to_ascii_lowercase();
        assert!(
            request.starts_with("post /api/v1/pods http/1.1\r\n"),
            "{request}"
        );
        assert!(
            request.contains("content-type: application/json\r\n"),
            "{request}"
        );
        assert!(request.contains("content-length: 7\r\n"), "{request}");
    }

    /// A streamed body yields each chunk when it arrives, before the server has finished.
    #[tokio::test]
    async fn streamed_body_yields_chunks_as_they_come() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/watch", l.local_addr().expect("addr"));
        let (more_tx, more_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.expect("accept");
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nfoo 1\n\r\n")
                .await;
            // The rest only once the client has seen the first chunk.
            let _ = more_rx.await;
            let _ = s.write_all(b"6\r\nbar 2\n\r\n0\r\n\r\n").await;
        });
        let (status, chunks) = HttpClient::new()
            .get_streaming(&url, Duration::from_secs(5))
            .await
            .expect("get");
        assert_eq!(status, 200);
        let mut chunks = Box::pin(chunks);
        let first = chunks.next().await.expect("a chunk").expect("read");
        assert_eq!(&first[..], b"foo 1\n");
        more_tx.send(()).expect("server waits");
        let rest: Vec<Bytes> = chunks.map(|c| c.expect("read")).collect().await;
        assert_eq!(rest.concat(), b"bar 2\n");
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
