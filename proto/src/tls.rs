//! How Skiff's components and CLI reach the store over TLS: the CA its members'
//! certificates chain to and, to be someone, a client certificate and its key (etcdctl's
//! `--cacert`, `--cert`, `--key`). The certificate's CN is the Kubernetes user and its O the
//! group (`system:kube-scheduler`; `system:node:n1` in `system:nodes`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClientTls {
    /// The CA the store's certificates chain to.
    pub ca: PathBuf,
    /// The client certificate presented (PEM), with `key`; none: no identity (anonymous).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
}

/// A file of the TLS settings that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct TlsFileError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

fn read(path: &Path) -> Result<Vec<u8>, TlsFileError> {
    std::fs::read(path).map_err(|source| TlsFileError {
        path: path.to_owned(),
        source,
    })
}

impl ClientTls {
    /// The CA and, when both are given, the certificate and key of a client in `dir` as
    /// `skiff certs` names them (`ca.pem`, `<name>.pem`, `<name>-key.pem`).
    pub fn in_dir(dir: &Path, name: &str) -> ClientTls {
        ClientTls {
            ca: dir.join("ca.pem"),
            cert: Some(dir.join(format!("{name}.pem"))),
            key: Some(dir.join(format!("{name}-key.pem"))),
        }
    }

    /// tonic's (and `etcd-client`'s) configuration: the CA as the only root, the identity
    /// when there is one. Files are read now, so a missing one is reported at start.
    pub fn config(&self) -> Result<ClientTlsConfig, TlsFileError> {
        let mut config =
            ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(&self.ca)?));
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        Ok(config)
    }
}

/// Who a client certificate names: its common name and organizations (a Kubernetes user
/// and groups; an etcd user, the CN alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub common_name: String,
    pub organizations: Vec<String>,
}

/// The common name and organizations of a DER certificate's subject; `None` without a CN.
pub fn subject(der: &[u8]) -> Option<Subject> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let name = cert.subject();
    let cn = name.iter_common_name().next()?.as_str().ok()?.to_owned();
    let organizations = name
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_owned))
        .collect();
    Some(Subject {
        common_name: cn,
        organizations,
    })
}

/// `https://host:port` for an endpoint given as `host:port` or with either scheme, when
/// `tls`; else `http://host:port`.
pub fn url(endpoint: &str, tls: bool) -> String {
    let bare = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .unwrap_or(endpoint);
    format!("{}://{bare}", if tls { "https" } else { "http" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_take_the_scheme_of_the_settings() {
        assert_eq!(url("127.0.0.1:2379", true), "https://127.0.0.1:2379");
        assert_eq!(url("http://127.0.0.1:2379", true), "https://127.0.0.1:2379");
        assert_eq!(url("https://h:1", false), "http://h:1");
    }

    #[test]
    fn missing_files_are_named() {
        let t = ClientTls::in_dir(Path::new("/nonexistent"), "admin");
        let e = t.config().expect_err("no such files");
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    }
}
