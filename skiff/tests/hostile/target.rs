//! What the suite runs against: a Skiff cluster (the default), or Debian's etcd 3.4 started the
//! same way (`SKIFF_HOSTILE_TARGET=etcd`), so every assertion about etcd's behaviour can be
//! checked against etcd itself.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use skiff_launch::{Child, Launch};

use crate::common::{self, Cluster};

/// The system under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Skiff,
    Etcd,
}

impl Kind {
    /// `SKIFF_HOSTILE_TARGET=etcd` runs the suite against etcd; anything else, against Skiff.
    pub fn from_env() -> Kind {
        match std::env::var("SKIFF_HOSTILE_TARGET").as_deref() {
            Ok("etcd") => Kind::Etcd,
            _ => Kind::Skiff,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Skiff => "skiff",
            Kind::Etcd => "etcd",
        }
    }
}

/// A running cluster of either kind, stopped (by PID) when dropped.
#[derive(Debug)]
pub enum Target {
    Skiff(Box<Cluster>),
    Etcd(EtcdCluster),
}

impl Target {
    pub async fn start(kind: Kind, members: usize) -> Target {
        match kind {
            Kind::Skiff => Target::Skiff(Box::new(Cluster::start(members).await)),
            Kind::Etcd => Target::Etcd(EtcdCluster::start(members).await),
        }
    }

    /// Client endpoints (`host:port`), member 0 first.
    pub fn endpoints(&self) -> Vec<String> {
        match self {
            Target::Skiff(c) => c.endpoints(),
            Target::Etcd(e) => e.members.iter().map(|m| m.client.clone()).collect(),
        }
    }

    pub fn endpoint(&self, i: usize) -> String {
        self.endpoints()[i].clone()
    }

    pub async fn client(&self, i: usize) -> etcd_client::Client {
        common::connect(&[self.endpoint(i)]).await
    }

    /// Where the members' logs are.
    pub fn logs(&self) -> PathBuf {
        match self {
            Target::Skiff(c) => c.dir.path().to_path_buf(),
            Target::Etcd(e) => e.dir.path().to_path_buf(),
        }
    }

    /// Whether every member process is still alive.
    pub fn all_running(&mut self) -> bool {
        match self {
            Target::Skiff(c) => c.members.iter().all(common::Member::is_running),
            Target::Etcd(e) => e.members.iter_mut().all(|m| {
                m.child
                    .as_mut()
                    .is_some_and(|c| c.exited().is_none() && c.is_running())
            }),
        }
    }
}

/// Debian's etcd (`/usr/bin/etcd`, 3.4) on loopback with ephemeral ports and a temporary data
/// directory, one process per member (killed by PID when dropped; a failing test shows the
/// first panic in each log and its tail).
#[derive(Debug)]
pub struct EtcdCluster {
    pub dir: tempfile::TempDir,
    pub members: Vec<EtcdMember>,
}

#[derive(Debug)]
pub struct EtcdMember {
    pub name: String,
    pub client: String,
    pub peer: String,
    child: Option<Child>,
}

pub fn etcd_bin() -> String {
    std::env::var("SKIFF_ETCD_BIN").unwrap_or_else(|_| "/usr/bin/etcd".into())
}

impl EtcdCluster {
    pub async fn start(n: usize) -> EtcdCluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut members: Vec<EtcdMember> = (0..n)
            .map(|i| EtcdMember {
                name: format!("e{i}"),
                client: format!("127.0.0.1:{}", common::free_port()),
                peer: format!("127.0.0.1:{}", common::free_port()),
                child: None,
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        for m in &mut members {
            let log = dir.path().join(format!("{}.log", m.name));
            let child = Launch::new(format!("etcd member {}", m.name), etcd_bin(), log)
                .args(["--name", &m.name])
                .arg("--data-dir")
                .arg(dir.path().join(&m.name))
                .arg(format!("--listen-client-urls=http://{}", m.client))
                .arg(format!("--advertise-client-urls=http://{}", m.client))
                .arg(format!("--listen-peer-urls=http://{}", m.peer))
                .arg(format!("--initial-advertise-peer-urls=http://{}", m.peer))
                .arg(format!("--initial-cluster={initial}"))
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "hostile"])
                .spawn()
                .expect("etcd is installed (Debian package etcd-server) or SKIFF_ETCD_BIN names it")
                .tail_on_panic(30);
            m.child = Some(child);
        }
        let cluster = EtcdCluster { dir, members };
        cluster.wait_ready(Duration::from_secs(30)).await;
        cluster
    }

    /// Waits until every member answers Status and one of them leads.
    async fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        for m in &self.members {
            loop {
                let opts = etcd_client::ConnectOptions::new()
                    .with_connect_timeout(Duration::from_secs(1))
                    .with_timeout(Duration::from_secs(2));
                if let Ok(mut c) =
                    etcd_client::Client::connect([m.client.as_str()], Some(opts)).await
                    && let Ok(s) = c.status().await
                    && s.leader() != 0
                {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "etcd member {} not ready within {timeout:?}; logs in {}",
                    m.name,
                    self.dir.path().display()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

impl Drop for EtcdCluster {
    /// The members go first (killed, their logs reported if the test failed): their logs
    /// live in `dir`.
    fn drop(&mut self) {
        self.members.clear();
    }
}
