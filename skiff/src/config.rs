//! The client configuration: where the CLI finds the cluster, like a kubeconfig.
//!
//! Endpoints come from, in order: `--endpoints`, `SKIFF_ENDPOINTS`, then the file named by
//! `SKIFF_CONFIG`, else `~/.skiff/config`, which `skiff up` writes:
//!
//! ```yaml
//! # written by skiff up
//! endpoints: [127.0.0.1:2379, 127.0.0.1:2389, 127.0.0.1:2399]
//! dataDir: /root/.skiff/up
//! tls: {ca: /root/.skiff/up/certs/ca.pem, cert: /root/.skiff/up/certs/admin.pem, key: /root/.skiff/up/certs/admin-key.pem}
//! ```
//!
//! TLS comes from `--cacert`, `--cert` and `--key` (etcdctl's flags) when given, else from
//! the file when the endpoints come from it too.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use skiff_proto::client::ClusterClient;
use skiff_proto::tls::ClientTls;

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientConfig {
    /// Store members' client addresses (`host:port`).
    pub endpoints: Vec<String>,
    /// The `skiff up` directory the cluster runs from (logs, data), when it was started so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// TLS to the members, and the certificate the CLI presents (an admin's, from `up`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ClientTls>,
}

/// The configuration file: `$SKIFF_CONFIG`, else `~/.skiff/config`.
pub fn path() -> PathBuf {
    if let Some(p) = std::env::var_os("SKIFF_CONFIG").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".skiff").join("config")
}

impl ClientConfig {
    /// Reads `path`; `None` when there is no such file.
    pub fn load(path: &Path) -> Result<Option<ClientConfig>> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let config: ClientConfig = serde_yaml_ng::from_str(&text)
            .with_context(|| format!("{}: not a skiff client configuration", path.display()))?;
        Ok(Some(config))
    }

    /// Writes the file (and its directory), replacing it atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let text = format!(
            "# written by skiff up; the CLI reads it when neither --endpoints nor SKIFF_ENDPOINTS is given\n{}",
            serde_yaml_ng::to_string(self).context("encoding the client configuration")?
        );
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }
}

/// TLS to the store: etcdctl's `--cacert`, `--cert` and `--key`, for every command that
/// talks to it.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// CA the store's certificates chain to; the endpoints are then `https`.
    #[arg(long, env = "SKIFF_CACERT")]
    cacert: Option<PathBuf>,
    /// Client certificate (PEM) naming who this is: its CN the user, its O the group.
    #[arg(long, env = "SKIFF_CERT", requires = "cacert", requires = "key")]
    cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(long, env = "SKIFF_KEY", requires = "cert")]
    key: Option<PathBuf>,
}

impl TlsArgs {
    pub fn client_tls(&self) -> Option<ClientTls> {
        self.cacert.as_ref().map(|ca| ClientTls {
            ca: ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
        })
    }
}

/// `--endpoints` / `SKIFF_ENDPOINTS` for every client command, falling back to the file.
#[derive(Debug, Clone, clap::Args)]
pub struct Endpoints {
    /// Store members' client endpoints (host:port), comma-separated [default: from
    /// $SKIFF_CONFIG or ~/.skiff/config, which `skiff up` writes].
    #[arg(long = "endpoints", env = "SKIFF_ENDPOINTS", value_delimiter = ',')]
    endpoints: Vec<String>,
    #[command(flatten)]
    tls: TlsArgs,
}

/// Where the store is and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    pub endpoints: Vec<String>,
    pub tls: Option<ClientTls>,
}

impl Store {
    /// A cluster API client (made inside the runtime that will drive it).
    pub fn connect(&self) -> Result<ClusterClient> {
        ClusterClient::connect_with(&self.endpoints, self.tls.as_ref())
            .context("cluster API endpoints")
    }

    /// `endpoint` as a URL with this store's scheme.
    pub fn url(&self, endpoint: &str) -> String {
        skiff_proto::tls::url(endpoint, self.tls.is_some())
    }

    /// An etcd client of `endpoints` (some or all of this store's), with this store's TLS
    /// and `options`.
    pub async fn etcd(
        &self,
        endpoints: &[String],
        options: etcd_client::ConnectOptions,
    ) -> Result<etcd_client::Client> {
        let urls: Vec<String> = endpoints.iter().map(|e| self.url(e)).collect();
        let options = match &self.tls {
            Some(t) => options.with_tls(t.config()?),
            None => options,
        };
        Ok(etcd_client::Client::connect(&urls, Some(options)).await?)
    }

    /// The environment that points a `skiff` or `etcdctl` child at this store: `prefix`
    /// `SKIFF` gives `SKIFF_CACERT` and the like, `ETCDCTL` etcdctl's own.
    pub fn tls_env(&self, prefix: &str) -> Vec<(String, PathBuf)> {
        let Some(t) = &self.tls else {
            return Vec::new();
        };
        let mut env = vec![(format!("{prefix}_CACERT"), t.ca.clone())];
        if let (Some(cert), Some(key)) = (&t.cert, &t.key) {
            env.push((format!("{prefix}_CERT"), cert.clone()));
            env.push((format!("{prefix}_KEY"), key.clone()));
        }
        env
    }
}

impl Endpoints {
    pub fn resolve(&self) -> Result<Store> {
        let given: Vec<String> = self
            .endpoints
            .iter()
            .map(|e| e.trim().to_string())
            .filter(|e| !e.is_empty())
            .collect();
        let flags = self.tls.client_tls();
        if !given.is_empty() {
            return Ok(Store {
                endpoints: given,
                tls: flags,
            });
        }
        let file = path();
        match ClientConfig::load(&file)? {
            Some(c) if !c.endpoints.is_empty() => Ok(Store {
                endpoints: c.endpoints,
                tls: flags.or(c.tls),
            }),
            Some(_) => bail!("{} lists no endpoints", file.display()),
            None => bail!(
                "no cluster to talk to: pass --endpoints, set SKIFF_ENDPOINTS, or start one with `skiff up` (which writes {})",
                file.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_and_loads() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("sub").join("config");
        assert_eq!(ClientConfig::load(&path).expect("no file is fine"), None);
        let c = ClientConfig {
            endpoints: vec!["127.0.0.1:2379".into(), "127.0.0.1:2389".into()],
            data_dir: Some(PathBuf::from("/tmp/x")),
            tls: Some(ClientTls {
                ca: "/c/ca.pem".into(),
                cert: Some("/c/admin.pem".into()),
                key: Some("/c/admin-key.pem".into()),
            }),
        };
        c.save(&path).expect("save");
        assert_eq!(ClientConfig::load(&path).expect("load"), Some(c));
        std::fs::write(&path, "endpoint: [a]\n").expect("write");
        let e = ClientConfig::load(&path).expect_err("a typo is an error");
        assert!(
            format!("{e:#}").contains("unknown field `endpoint`"),
            "{e:#}"
        );
    }
}
