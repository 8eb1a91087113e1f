//! The Kubernetes API's listeners: axum serving connections accepted (and their TLS
//! handshakes done) by the store's own acceptor, each request knowing its connection.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use skiff_store::tls::{Conn, ConnInfo, accept};
use tokio::net::TcpListener;

/// The Kubernetes API's listener for axum: its connections (TLS handshakes done off the
/// accepting task), each with what its requests know of it ([`ConnInfo`]).
pub struct ApiListener {
    incoming: Pin<Box<dyn futures::Stream<Item = io::Result<Conn>> + Send>>,
}

impl std::fmt::Debug for ApiListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiListener").finish_non_exhaustive()
    }
}

impl ApiListener {
    pub fn new(listener: TcpListener, tls: Option<Arc<ServerConfig>>) -> ApiListener {
        ApiListener {
            incoming: accept(listener, tls),
        }
    }
}

impl axum::serve::Listener for ApiListener {
    type Io = Conn;
    type Addr = Option<ConnInfo>;

    async fn accept(&mut self) -> (Conn, Option<ConnInfo>) {
        use futures::StreamExt as _;
        use tonic::transport::server::Connected as _;
        loop {
            match self.incoming.next().await {
                Some(Ok(conn)) => {
                    let info = conn.connect_info();
                    return (conn, Some(info));
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "accepting a Kubernetes API connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                // The accepting task is gone (it never ends while the stream lives).
                None => std::future::pending::<()>().await,
            }
        }
    }

    /// Not known per connection: the server's own address has no client.
    fn local_addr(&self) -> io::Result<Option<ConnInfo>> {
        Ok(None)
    }
}

/// What a Kubernetes API request knows of its connection (axum's `ConnectInfo`).
#[derive(Debug, Clone)]
pub struct ApiPeer(pub Option<ConnInfo>);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, ApiListener>>
    for ApiPeer
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, ApiListener>) -> ApiPeer {
        ApiPeer(stream.remote_addr().clone())
    }
}
