//! TLS on the store's client and peer URLs, with etcd's flags and their meaning:
//!
//! | flag | meaning |
//! |---|---|
//! | `--cert-file`, `--key-file` | the certificate (PEM, chain) and key the client URLs serve |
//! | `--trusted-ca-file` | the CA client certificates must chain to |
//! | `--client-cert-auth` | clients must present a certificate from that CA |
//! | `--peer-cert-file`, `--peer-key-file` | served on the peer URLs, and presented to peers when dialling them |
//! | `--peer-trusted-ca-file` | the CA peers' certificates (served and presented) must chain to |
//! | `--peer-client-cert-auth` | peers dialling in must present one |
//! | `--cipher-suites` | the TLS 1.2 suites allowed, by IANA name; TLS 1.3's are always on, as in Go |
//!
//! A process that serves an API of its own beside the member (Skiff's Kubernetes API server)
//! may add one more CA ([`TlsFiles::client_ca`]): a client certificate from it is asked for and
//! checked where none is required, and the connection's [`ConnInfo`] names its subject. Such
//! an API's own URLs serve the client URLs' certificate with client certificates optional
//! ([`ClientCerts::Optional`]).
//!
//! A URL is served with TLS when it is `https://`. A member's certificate and key (served, and
//! presented when it dials a peer) and the CA files it checks certificates against are read
//! again when they change (looked at no more than once a second, on a handshake), so a
//! certificate is rotated by replacing its files, without a restart; a CA too (first a file
//! with both CAs, then the new one alone: from then on the old CA's certificates are
//! refused). Files that do not load are reported and the previous ones kept. ALPN offers
//! `h2` (gRPC) and `http/1.1` (`/health` and the like).

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme, SupportedCipherSuite,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// A certificate, its key, and whom to trust, for one kind of URL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub trusted_ca: Option<PathBuf>,
    /// The other side must present a certificate from `trusted_ca`.
    pub client_cert_auth: bool,
    /// One more CA whose client certificates are accepted: when given, a client certificate
    /// is asked for (and checked) even where none is required. An API served beside the
    /// member names its users by them.
    pub client_ca: Option<PathBuf>,
}

/// Whether a listener asks its clients for a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCerts {
    /// As the files say: required under `client_cert_auth`, else asked for when there is a
    /// `client_ca`, else not asked for.
    AsConfigured,
    /// Asked for when there is a CA to check them against, never required (for an API where
    /// a bearer token may stand in for one).
    Optional,
}

/// A member's TLS settings (none: plain TCP only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    pub client: Option<TlsFiles>,
    pub peer: Option<TlsFiles>,
    /// TLS 1.2 cipher suites by IANA name; empty: rustls's defaults.
    pub cipher_suites: Vec<String>,
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{}: {error}", path.display())]
    Read { path: PathBuf, error: io::Error },
    #[error("{}: no PEM certificate in it", path.display())]
    NoCertificate { path: PathBuf },
    #[error("{}: no PEM private key in it ({why})", path.display())]
    NoKey { path: PathBuf, why: String },
    #[error("{}: {why}", path.display())]
    Invalid { path: PathBuf, why: String },
    #[error(
        "--cipher-suites: {name:?} is not a TLS 1.2 suite this build offers (it offers {})",
        offered().join(", ")
    )]
    UnknownSuite { name: String },
    #[error("{0}")]
    Config(String),
}

/// The TLS 1.2 suites rustls offers, by IANA name.
fn offered() -> Vec<String> {
    rustls::crypto::ring::ALL_CIPHER_SUITES
        .iter()
        .filter(|s| s.version() == &rustls::version::TLS12)
        .map(|s| format!("{:?}", s.suite()))
        .collect()
}

/// The crypto provider with only the TLS 1.2 suites named (TLS 1.3's all kept).
pub fn provider(cipher_suites: &[String]) -> Result<Arc<CryptoProvider>, TlsError> {
    let mut p = rustls::crypto::ring::default_provider();
    if !cipher_suites.is_empty() {
        let mut chosen: Vec<SupportedCipherSuite> = p
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS13)
            .copied()
            .collect();
        for name in cipher_suites {
            let suite = rustls::crypto::ring::ALL_CIPHER_SUITES
                .iter()
                .find(|s| {
                    s.version() == &rustls::version::TLS12
                        && format!("{:?}", s.suite()).eq_ignore_ascii_case(name.trim())
                })
                .ok_or_else(|| TlsError::UnknownSuite { name: name.clone() })?;
            chosen.push(*suite);
        }
        p.cipher_suites = chosen;
    }
    Ok(Arc::new(p))
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        path: path.to_path_buf(),
        error,
    })
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Invalid {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::NoKey {
        path: path.to_path_buf(),
        why: e.to_string(),
    })
}

fn certified_key(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = certificates(cert)?;
    let key_der = private_key(key)?;
    let ck = CertifiedKey::from_der(chain, key_der, provider).map_err(|e| TlsError::Invalid {
        path: key.to_path_buf(),
        why: format!("does not go with {}: {e}", cert.display()),
    })?;
    Ok(Arc::new(ck))
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// A value read from files, read again when they change (looked at no more than once a
/// second, when the value is asked for); a change that does not load (perhaps a file half
/// written) is reported and the previous value kept until the next look.
struct FromFiles<T> {
    what: &'static str,
    paths: Vec<PathBuf>,
    load: Box<dyn Fn() -> Result<T, TlsError> + Send + Sync>,
    state: Mutex<Loaded<T>>,
}

struct Loaded<T> {
    value: T,
    stamps: Vec<Option<SystemTime>>,
    checked: Instant,
}

impl<T> std::fmt::Debug for FromFiles<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FromFiles")
            .field("what", &self.what)
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

/// How often a handshake may look at the files.
const RELOAD_CHECK: Duration = Duration::from_secs(1);

impl<T: Clone> FromFiles<T> {
    fn new(
        what: &'static str,
        paths: Vec<PathBuf>,
        load: impl Fn() -> Result<T, TlsError> + Send + Sync + 'static,
    ) -> Result<FromFiles<T>, TlsError> {
        let stamps = paths.iter().map(|p| modified(p)).collect();
        let value = load()?;
        Ok(FromFiles {
            what,
            paths,
            load: Box::new(load),
            state: Mutex::new(Loaded {
                value,
                stamps,
                checked: Instant::now(),
            }),
        })
    }

    fn current(&self) -> T {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.checked.elapsed() >= RELOAD_CHECK {
            state.checked = Instant::now();
            let stamps: Vec<_> = self.paths.iter().map(|p| modified(p)).collect();
            if stamps != state.stamps {
                match (self.load)() {
                    Ok(value) => {
                        tracing::info!(what = self.what, files = ?self.paths, "read anew: the files changed");
                        state.value = value;
                        state.stamps = stamps;
                    }
                    Err(e) => {
                        tracing::warn!(what = self.what, error = %e, "the changed files do not load; keeping the previous ones")
                    }
                }
            }
        }
        state.value.clone()
    }
}

/// The served (and, dialling a peer, presented) certificate, read again when its files
/// change.
#[derive(Debug)]
struct Reloading(FromFiles<Arc<CertifiedKey>>);

impl Reloading {
    fn new(files: &TlsFiles, provider: Arc<CryptoProvider>) -> Result<Reloading, TlsError> {
        let (cert, key) = (files.cert.clone(), files.key.clone());
        Ok(Reloading(FromFiles::new(
            "certificate",
            vec![files.cert.clone(), files.key.clone()],
            move || certified_key(&cert, &key, &provider),
        )?))
    }

    fn current(&self) -> Arc<CertifiedKey> {
        self.0.current()
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl rustls::client::ResolvesClientCert for Reloading {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// The CAs in `paths`, as one root store.
fn root_store(paths: &[PathBuf]) -> Result<Arc<RootCertStore>, TlsError> {
    let mut store = RootCertStore::empty();
    for ca in paths {
        for cert in certificates(ca)? {
            store.add(cert).map_err(|e| TlsError::Invalid {
                path: ca.clone(),
                why: format!("not a usable CA certificate: {e}"),
            })?;
        }
    }
    Ok(Arc::new(store))
}

/// Checks client certificates against the CA files, read again when they change: a CA is
/// rotated by replacing its file (first with both CAs in it, then with the new one alone),
/// and from then on the certificates of the CA it replaced are refused.
#[derive(Debug)]
struct ClientVerifier {
    inner: FromFiles<Arc<dyn ClientCertVerifier>>,
    required: bool,
}

impl ClientVerifier {
    fn new(
        cas: Vec<PathBuf>,
        required: bool,
        provider: Arc<CryptoProvider>,
    ) -> Result<ClientVerifier, TlsError> {
        let paths = cas.clone();
        let inner = FromFiles::new("client CA", paths, move || {
            let builder =
                WebPkiClientVerifier::builder_with_provider(root_store(&cas)?, provider.clone());
            let builder = if required {
                builder
            } else {
                builder.allow_unauthenticated()
            };
            let verifier: Arc<dyn ClientCertVerifier> =
                builder.build().map_err(|e| TlsError::Invalid {
                    path: cas[0].clone(),
                    why: e.to_string(),
                })?;
            Ok(verifier)
        })?;
        Ok(ClientVerifier { inner, required })
    }
}

impl ClientCertVerifier for ClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.required
    }

    /// No hints: they would have to outlive a reload. Clients present the certificate they
    /// were given whatever the hints say.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner
            .current()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner
            .current()
            .verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner
            .current()
            .verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.current().supported_verify_schemes()
    }
}

/// Checks the certificates peers serve against the trusted CA file, read again when it
/// changes (as [`ClientVerifier`] does for those presented to this member).
#[derive(Debug)]
struct PeerVerifier(FromFiles<Arc<WebPkiServerVerifier>>);

impl PeerVerifier {
    fn new(ca: &Path, provider: Arc<CryptoProvider>) -> Result<PeerVerifier, TlsError> {
        let path = ca.to_path_buf();
        Ok(PeerVerifier(FromFiles::new(
            "peer CA",
            vec![path.clone()],
            move || {
                WebPkiServerVerifier::builder_with_provider(
                    root_store(std::slice::from_ref(&path))?,
                    provider.clone(),
                )
                .build()
                .map_err(|e| TlsError::Invalid {
                    path: path.clone(),
                    why: e.to_string(),
                })
            },
        )?))
    }
}

impl ServerCertVerifier for PeerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.0.current().verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.current().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.current().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.current().supported_verify_schemes()
    }
}

/// What `files` serves: its certificate (reloaded on change), and client certificates
/// required when `client_cert_auth` (unless `certs` makes them optional), asked for and
/// checked when there is a CA for them.
pub fn server_config(
    files: &TlsFiles,
    provider: Arc<CryptoProvider>,
    certs: ClientCerts,
) -> Result<Arc<ServerConfig>, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let required = files.client_cert_auth && certs == ClientCerts::AsConfigured;
    if required && files.trusted_ca.is_none() {
        return Err(TlsError::Config(
            "client certificate authentication needs the trusted CA file to check them against"
                .into(),
        ));
    }
    // Optional client certificates are checked against the extra CA alone; the client URLs'
    // against etcd's under --client-cert-auth, and the extra CA's when there is one (the
    // same file: `skiff store` refuses two different ones together).
    let cas: Vec<&PathBuf> = files
        .trusted_ca
        .iter()
        .filter(|_| files.client_cert_auth && certs == ClientCerts::AsConfigured)
        .chain(&files.client_ca)
        .collect();
    let builder = if cas.is_empty() {
        builder.with_no_client_auth()
    } else {
        let cas = cas.into_iter().cloned().collect();
        builder.with_client_cert_verifier(Arc::new(ClientVerifier::new(
            cas,
            required,
            provider.clone(),
        )?))
    };
    let mut config = builder.with_cert_resolver(Arc::new(Reloading::new(files, provider)?));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// How a member dials its peers over TLS: their certificates checked against `files`'
/// trusted CA, its own certificate presented (read again when its files change, as the served
/// one is; connections already open keep the one they began with).
pub fn client_config(
    files: &TlsFiles,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let ca = files.trusted_ca.as_ref().ok_or_else(|| {
        TlsError::Config("dialling peers over https needs --peer-trusted-ca-file".into())
    })?;
    let mut config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PeerVerifier::new(ca, provider.clone())?))
        .with_client_cert_resolver(Arc::new(Reloading::new(files, provider.clone())?));
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// A connection a listener accepted: plain TCP, or TLS over it (`https://` URLs).
#[derive(Debug)]
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl Conn {
    /// The TCP connection under it.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(c) => c,
            Conn::Tls(c) => c.get_ref().0,
        }
    }
}

/// What requests on a connection know of it (in their extensions): the TCP addresses, and
/// the subject of the client certificate it presented, if it presented one (checked against
/// the trusted CA by the handshake).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub tcp: tonic::transport::server::TcpConnectInfo,
    pub client: Option<Subject>,
}

pub use skiff_proto::tls::{Subject, subject};

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = ConnInfo;
    fn connect_info(&self) -> ConnInfo {
        match self {
            Conn::Plain(c) => ConnInfo {
                tcp: c.connect_info(),
                client: None,
            },
            Conn::Tls(c) => {
                let (tcp, session) = c.get_ref();
                ConnInfo {
                    tcp: tcp.connect_info(),
                    client: session
                        .peer_certificates()
                        .and_then(|chain| chain.first())
                        .and_then(|leaf| subject(leaf)),
                }
            }
        }
    }
}

macro_rules! both {
    ($self:ident, $c:ident => $e:expr) => {
        match $self.get_mut() {
            Conn::Plain($c) => {
                let $c = Pin::new($c);
                $e
            }
            Conn::Tls($c) => {
                let $c = Pin::new($c.as_mut());
                $e
            }
        }
    };
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        both!(self, c => c.poll_read(cx, buf))
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        both!(self, c => c.poll_write(cx, buf))
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        both!(self, c => c.poll_flush(cx))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        both!(self, c => c.poll_shutdown(cx))
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        both!(self, c => c.poll_write_vectored(cx, bufs))
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(c) => c.is_write_vectored(),
            Conn::Tls(c) => c.is_write_vectored(),
        }
    }
}

/// What a listener serves: its connections, with TLS when `tls` is given, Nagle off either
/// way (tonic's own `tcp_nodelay` covers only listeners it binds; without it small Raft
/// replies and responses waited out a 40 ms delayed-ACK round).
pub fn accept(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
) -> Pin<Box<dyn futures::Stream<Item = io::Result<Conn>> + Send>> {
    use futures::StreamExt as _;
    match tls {
        Some(config) => {
            Box::pin(incoming(listener, config).map(|c| c.map(|c| Conn::Tls(Box::new(c)))))
        }
        None => Box::pin(
            tonic::transport::server::TcpIncoming::from(listener)
                .with_nodelay(Some(true))
                .map(|c| c.map(Conn::Plain)),
        ),
    }
}

/// How long a client has to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS connections accepted on `listener`, handshakes done (each on its own task, so a
/// slow or silent client holds up no one). The accepting task ends when the stream is dropped.
fn incoming(
    listener: TcpListener,
    config: Arc<ServerConfig>,
) -> impl futures::Stream<Item = io::Result<tokio_rustls::server::TlsStream<TcpStream>>> + Send + 'static
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let accept = tokio::spawn(async move {
        let mut handshakes = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (tcp, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            // Out of file descriptors and the like: pause rather than spin.
                            tracing::warn!(error = %e, "accepting a connection");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = tcp.set_nodelay(true);
                    let acceptor = acceptor.clone();
                    let tx = tx.clone();
                    handshakes.spawn(async move {
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                            Ok(Ok(tls)) => {
                                let _ = tx.send(Ok(tls)).await;
                            }
                            Ok(Err(e)) => log_refused(peer, &e.to_string()),
                            Err(_) => log_refused(peer, "no handshake within 10 s"),
                        }
                    });
                }
                Some(_) = handshakes.join_next(), if !handshakes.is_empty() => {}
                () = tx.closed() => return,
            }
        }
    });
    let guard = AbortOnDrop(accept);
    futures::stream::unfold((rx, guard), |(mut rx, guard)| async move {
        rx.recv().await.map(|c| (c, (rx, guard)))
    })
}

fn log_refused(peer: SocketAddr, why: &str) {
    tracing::info!(%peer, reason = why, "TLS handshake refused");
}

/// Aborts its task when dropped: a background task that lives as long as what holds it.
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A TLS connection to a peer, as tonic's channels take it.
pub type PeerIo = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;

type Dialling = Pin<Box<dyn Future<Output = io::Result<PeerIo>> + Send>>;

/// Dials a channel's `http://host:port` over TLS with `config` (the channel is given the
/// plain-HTTP form of an `https://` URL; TLS is done here).
pub fn connector(
    config: Arc<ClientConfig>,
) -> impl tower::Service<
    tonic::codegen::http::Uri,
    Response = PeerIo,
    Error = io::Error,
    Future = Dialling,
> + Clone
+ Send
+ 'static {
    let connector = tokio_rustls::TlsConnector::from(config);
    tower::service_fn(move |uri: tonic::codegen::http::Uri| -> Dialling {
        let connector = connector.clone();
        Box::pin(async move {
            let (host, port) = host_port(&uri, 443)?;
            let tcp = dial_tcp(&host, port).await?;
            let tls = dial_tls(&connector, &host, tcp).await?;
            Ok(hyper_util::rt::TokioIo::new(tls))
        })
    })
}

/// A URL's host (without an IPv6 address's brackets) and port (`default` when it names none).
pub fn host_port(uri: &tonic::codegen::http::Uri, default: u16) -> io::Result<(String, u16)> {
    let host = uri
        .host()
        .ok_or_else(|| io::Error::other(format!("{uri}: no host")))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Ok((host, uri.port_u16().unwrap_or(default)))
}

/// A TCP connection to a peer, Nagle off (small Raft messages go out at once). A peer that
/// vanished without closing it (its host died, a partition that drops packets) is found out
/// as over HTTP/2 with keep-alive pings: after 5 s of silence it is probed each second, and
/// the connection fails after three unanswered probes, or when what was sent is 10 s
/// unacknowledged.
pub async fn dial_tcp(host: &str, port: u16) -> io::Result<TcpStream> {
    let tcp = TcpStream::connect((host, port)).await?;
    tcp.set_nodelay(true)?;
    keep_alive(&tcp)?;
    Ok(tcp)
}

/// TCP keep-alive probes and a timeout for unacknowledged data on a peer connection (see
/// [`dial_tcp`]); the peer listener sets them on the connections it serves itself.
pub fn keep_alive(tcp: &TcpStream) -> io::Result<()> {
    let sock = socket2::SockRef::from(tcp);
    sock.set_tcp_keepalive(
        &socket2::TcpKeepalive::new()
            .with_time(Duration::from_secs(5))
            .with_interval(Duration::from_secs(1))
            .with_retries(3),
    )?;
    sock.set_tcp_user_timeout(Some(Duration::from_secs(10)))
}

/// TLS over `tcp`, the peer's certificate checked for `host`.
pub async fn dial_tls(
    connector: &tokio_rustls::TlsConnector,
    host: &str,
    tcp: TcpStream,
) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| io::Error::other(format!("{host}: {e}")))?;
    connector.connect(name, tcp).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cipher_suites_are_named_as_iana_names_them() {
        let p = provider(&["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256".into()]).expect("known");
        let tls12: Vec<_> = p
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS12)
            .collect();
        assert_eq!(tls12.len(), 1);
        assert!(
            p.cipher_suites
                .iter()
                .any(|s| s.version() == &rustls::version::TLS13),
            "TLS 1.3's suites stay"
        );
        let e = provider(&["TLS_RSA_WITH_RC4_128_SHA".into()]).expect_err("unknown");
        let text = e.to_string();
        assert!(
            text.contains("TLS_RSA_WITH_RC4_128_SHA")
                && text.contains("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"),
            "{text}"
        );
        assert_eq!(
            provider(&[]).expect("defaults").cipher_suites.len(),
            rustls::crypto::ring::default_provider().cipher_suites.len()
        );
    }

    #[test]
    fn files_that_do_not_load_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = TlsFiles {
            cert: dir.path().join("nope.pem"),
            key: dir.path().join("nope-key.pem"),
            ..TlsFiles::default()
        };
        let e = server_config(
            &missing,
            provider(&[]).expect("provider"),
            ClientCerts::AsConfigured,
        )
        .expect_err("missing");
        assert!(e.to_string().contains("nope.pem"), "{e}");
        std::fs::write(dir.path().join("empty.pem"), "").expect("write");
        let empty = TlsFiles {
            cert: dir.path().join("empty.pem"),
            ..missing
        };
        let e = server_config(
            &empty,
            provider(&[]).expect("provider"),
            ClientCerts::AsConfigured,
        )
        .expect_err("empty");
        assert!(e.to_string().contains("no PEM certificate"), "{e}");
    }
}
