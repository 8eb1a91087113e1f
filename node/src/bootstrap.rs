//! TLS bootstrap: a node joins with a bootstrap token instead of a certificate made for it,
//! as the kubelet does with `--bootstrap-kubeconfig`. It makes a key, asks a member's
//! Kubernetes API (the URL where a bearer token may stand in for a certificate; the client
//! URLs may require one) for a client certificate (`CN=system:node:<name>`,
//! `O=system:nodes`) with a CertificateSigningRequest, waits for the controller manager to
//! approve and sign it, and keeps both in its certificate directory; from then on it is
//! `system:node:<name>` on the client URLs, and a restart uses the certificate it has while
//! it is valid.
//!
//! | file in `--cert-dir` | what |
//! |---|---|
//! | `kubelet-client.pem` | the node's client certificate, as the signer issued it |
//! | `kubelet-client-key.pem` | its key (0600), made here and never sent anywhere |

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use skiff_proto::api::certificates::{
    CertificateSigningRequest, CertificateSigningRequestSpec, KUBE_APISERVER_CLIENT_KUBELET,
};
use skiff_proto::api::node::{NODE_USER_PREFIX, NODES_GROUP};
use skiff_proto::api::{CertificateConditionType, Kind, Object, ObjectMeta};
use skiff_proto::tls::ClientTls;

/// The certificate file in the certificate directory.
pub const CERT_FILE: &str = "kubelet-client.pem";
/// Its key.
pub const KEY_FILE: &str = "kubelet-client-key.pem";
/// How often the request is looked at while it waits for approval and signature.
const POLL: Duration = Duration::from_millis(250);
/// How often waiting is logged.
const WAITING_LOG: Duration = Duration::from_secs(30);
/// A certificate this close to its end is asked for again at start.
const RENEW_BEFORE: Duration = Duration::from_secs(3600);

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("making the node's key or certificate request: {0}")]
    Key(String),
    #[error("{url}: {why}")]
    Url { url: String, why: String },
    #[error("{url}: {why}")]
    Connect { url: String, why: String },
    #[error("{method} {path}: {status}: {message}")]
    Refused {
        method: &'static str,
        path: String,
        status: u16,
        message: String,
    },
    #[error("the API sent a certificate request that does not decode: {0}")]
    Decode(String),
    #[error("the certificate request {name} was denied: {why}")]
    Denied { name: String, why: String },
    #[error("the certificate request {name} failed: {why}")]
    Failed { name: String, why: String },
    #[error("the certificate request {name} was deleted before it was signed")]
    Deleted { name: String },
}

/// How a node joins: the token it asks with, the member's Kubernetes API it asks, and
/// where it keeps the certificate it gets.
#[derive(Debug, Clone)]
pub struct Bootstrap {
    /// `<id>.<secret>`.
    pub token: String,
    /// `https://host:port` of a member's Kubernetes API.
    pub server: String,
    pub cert_dir: PathBuf,
}

/// The node's client TLS: the certificate in `cert_dir` when it is this node's and valid for
/// another hour, else a new one asked for with the bootstrap token.
pub async fn client_tls(
    ca: &Path,
    node: &str,
    bootstrap: &Bootstrap,
) -> Result<ClientTls, BootstrapError> {
    let dir = &bootstrap.cert_dir;
    let file = |e: std::io::Error, path: &Path| BootstrapError::File {
        path: path.to_owned(),
        source: e,
    };
    std::fs::create_dir_all(dir).map_err(|e| file(e, dir))?;
    let cert_path = dir.join(CERT_FILE);
    let key_path = dir.join(KEY_FILE);
    let tls = ClientTls {
        ca: ca.to_owned(),
        cert: Some(cert_path.clone()),
        key: Some(key_path.clone()),
    };
    let user = format!("{NODE_USER_PREFIX}{node}");
    if let Some(until) = usable(&cert_path, &key_path, &user) {
        tracing::info!(node, cert = %cert_path.display(), valid_for = ?until, "using the node's certificate");
        return Ok(tls);
    }
    let key = rcgen::KeyPair::generate().map_err(|e| BootstrapError::Key(e.to_string()))?;
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, user.as_str());
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, NODES_GROUP);
    let request = params
        .serialize_request(&key)
        .and_then(|r| r.pem())
        .map_err(|e| BootstrapError::Key(e.to_string()))?;
    let api = Api::new(&bootstrap.server, ca, &bootstrap.token)?;
    let mut csr = Object::CertificateSigningRequest(CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: "node-csr-".into(),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: request.into_bytes(),
            signer_name: KUBE_APISERVER_CLIENT_KUBELET.into(),
            usages: vec!["digital signature".into(), "client auth".into()],
            ..CertificateSigningRequestSpec::default()
        },
        ..CertificateSigningRequest::default()
    });
    csr.set_type_meta();
    let created = api
        .call("POST", &collection_path(), Some(csr.to_json()))
        .await?;
    let name = decode(&created)?.metadata.name;
    tracing::info!(node, csr = %name, "asked for a client certificate; waiting for approval");
    let pem = wait_for_certificate(&api, &name).await?;
    write(&key_path, key.serialize_pem().as_bytes(), true)?;
    write(&cert_path, &pem, false)?;
    tracing::info!(node, csr = %name, cert = %cert_path.display(), "client certificate issued");
    Ok(tls)
}

fn collection_path() -> String {
    let kind = Kind::CertificateSigningRequest;
    format!("/apis/{}/{}", kind.api_version(), kind.plural())
}

fn decode(body: &[u8]) -> Result<CertificateSigningRequest, BootstrapError> {
    serde_json::from_slice(body).map_err(|e| BootstrapError::Decode(e.to_string()))
}

/// A member's Kubernetes API over HTTPS, with the bootstrap token (a connection per call:
/// joining makes a handful, and a member that restarts meanwhile costs nothing).
struct Api {
    url: String,
    host: String,
    port: u16,
    server_name: rustls::pki_types::ServerName<'static>,
    tls: std::sync::Arc<rustls::ClientConfig>,
    token: String,
}

impl Api {
    fn new(url: &str, ca: &Path, token: &str) -> Result<Api, BootstrapError> {
        let bad = |why: String| BootstrapError::Url {
            url: url.to_owned(),
            why,
        };
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| bad("the Kubernetes API is reached over https://".into()))?;
        let authority = rest.trim_end_matches('/');
        let (host, port) = authority
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .ok_or_else(|| bad("expected https://HOST:PORT".into()))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let server_name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|e| bad(format!("{host:?} is not a host name: {e}")))?;
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject as _;
        let mut roots = rustls::RootCertStore::empty();
        let certs = CertificateDer::pem_file_iter(ca).map_err(|e| BootstrapError::File {
            path: ca.to_owned(),
            source: std::io::Error::other(e.to_string()),
        })?;
        for cert in certs {
            let cert = cert.map_err(|e| BootstrapError::File {
                path: ca.to_owned(),
                source: std::io::Error::other(e.to_string()),
            })?;
            roots.add(cert).map_err(|e| BootstrapError::File {
                path: ca.to_owned(),
                source: std::io::Error::other(e.to_string()),
            })?;
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Api {
            url: url.trim_end_matches('/').to_owned(),
            host,
            port,
            server_name,
            tls: std::sync::Arc::new(tls),
            token: token.to_owned(),
        })
    }

    /// `method path` with `body` (JSON); the answer's body when it is a success.
    async fn call(
        &self,
        method: &'static str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, BootstrapError> {
        use http_body_util::{BodyExt as _, Full};
        let connect = |why: String| BootstrapError::Connect {
            url: self.url.clone(),
            why,
        };
        let tcp = tokio::time::timeout(
            CALL_TIMEOUT,
            tokio::net::TcpStream::connect((self.host.as_str(), self.port)),
        )
        .await
        .map_err(|_| connect("no connection within 10s".into()))?
        .map_err(|e| connect(e.to_string()))?;
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|e| connect(format!("TLS: {e}")))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .map_err(|e| connect(e.to_string()))?;
        let driver = tokio::spawn(conn);
        let request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, format!("{}:{}", self.host, self.port))
            .header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", self.token),
            )
            .header(hyper::header::ACCEPT, "application/json")
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(hyper::body::Bytes::from(
                body.unwrap_or_default(),
            )))
            .map_err(|e| connect(e.to_string()))?;
        let answer = tokio::time::timeout(CALL_TIMEOUT, async {
            let response = sender.send_request(request).await?;
            let status = response.status().as_u16();
            let bytes = response.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>((status, bytes))
        })
        .await;
        driver.abort();
        let (status, bytes) = answer
            .map_err(|_| connect("no answer within 10s".into()))?
            .map_err(|e| connect(e.to_string()))?;
        if !(200..300).contains(&status) {
            // kube-apiserver's Status says why.
            let message = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
            return Err(BootstrapError::Refused {
                method,
                path: path.to_owned(),
                status,
                message,
            });
        }
        Ok(bytes.to_vec())
    }
}

/// How long one call to the API may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The issued certificate of request `name`, once it has one. A call that fails (a member
/// restarting) is tried again at the next look; a refusal ends the wait.
async fn wait_for_certificate(api: &Api, name: &str) -> Result<Vec<u8>, BootstrapError> {
    let started = std::time::Instant::now();
    let mut logged = started;
    let path = format!("{}/{name}", collection_path());
    loop {
        let csr = match api.call("GET", &path, None).await {
            Ok(body) => Some(decode(&body)?),
            Err(BootstrapError::Refused { status: 404, .. }) => {
                return Err(BootstrapError::Deleted {
                    name: name.to_owned(),
                });
            }
            Err(e @ BootstrapError::Refused { .. }) => return Err(e),
            Err(e) => {
                tracing::debug!(error = %e, "reading the certificate request; trying again");
                None
            }
        };
        if let Some(csr) = csr {
            let why = |t| {
                csr.condition(&t)
                    .map(|c| format!("{}: {}", c.reason, c.message))
                    .unwrap_or_default()
            };
            if csr.is_denied() {
                return Err(BootstrapError::Denied {
                    name: name.to_owned(),
                    why: why(CertificateConditionType::Denied),
                });
            }
            if csr.is_failed() {
                return Err(BootstrapError::Failed {
                    name: name.to_owned(),
                    why: why(CertificateConditionType::Failed),
                });
            }
            if let Some(cert) = csr.certificate() {
                return Ok(cert.to_vec());
            }
            if logged.elapsed() >= WAITING_LOG {
                logged = std::time::Instant::now();
                tracing::info!(
                    csr = name,
                    waited = ?started.elapsed(),
                    condition = %csr.condition_summary(),
                    "still waiting for the certificate (kubectl certificate approve {name})"
                );
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// How long the certificate at `cert` is still valid, when it names `user`, is the key at
/// `key`'s, and is valid for at least [`RENEW_BEFORE`] more.
fn usable(cert: &Path, key: &Path, user: &str) -> Option<Duration> {
    let key = rcgen::KeyPair::from_pem(&std::fs::read_to_string(key).ok()?).ok()?;
    let pem = std::fs::read(cert).ok()?;
    let (_, block) = x509_parser::pem::parse_x509_pem(&pem).ok()?;
    let (_, parsed) = x509_parser::parse_x509_certificate(&block.contents).ok()?;
    let subject = skiff_proto::tls::subject(&block.contents)?;
    // A key written without its certificate (a stop between the two) is not this one's.
    if subject.common_name != user || parsed.public_key().raw != key.public_key_der().as_slice() {
        return None;
    }
    let left = parsed.validity().time_to_expiration()?;
    let left = Duration::try_from(left).ok()?;
    (left > RENEW_BEFORE).then_some(left)
}

/// Writes `path` whole (through a temporary file and a rename); `secret`: owner-only.
fn write(path: &Path, data: &[u8], secret: bool) -> Result<(), BootstrapError> {
    let err = |source| BootstrapError::File {
        path: path.to_owned(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(&tmp)
        .map_err(err)?;
    f.write_all(data).map_err(err)?;
    f.sync_all().map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}
