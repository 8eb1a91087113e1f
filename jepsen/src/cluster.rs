//! The cluster under test: real `skiff store` processes, member `i` in network namespace
//! `n{i+1}` at `10.77.0.{11+i}`, client port 2379, peer port 2380. Processes are started
//! through `ip netns exec`, which execs the store in place, so the PID we hold is the
//! store's own and kill -9 / SIGSTOP reach it directly. They are started through
//! `skiff-launch`: logs appended to `<dir>/n{i+1}.log`, killed by PID when the cluster is
//! dropped, dead with the harness if it dies.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use etcd_client::{Client, ConnectOptions};
use skiff_launch::{Child, ClusterState, Launch, StoreCommand, StoreTls};

use crate::network;

/// Raft timing given to every member (etcd's defaults).
pub const HEARTBEAT_MS: u64 = 100;
pub const ELECTION_TIMEOUT_MS: u64 = 1000;
/// Snapshots far more often than the default (100,000 entries), so runs exercise snapshot
/// builds, log purges and snapshot installs on lagging or re-added members under faults.
pub const SNAPSHOT_COUNT: u64 = 2000;
pub const SNAPSHOT_CATCHUP_ENTRIES: u64 = 500;

#[derive(Debug)]
struct Member {
    name: String,
    data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    paused: bool,
    /// Removed from the Raft membership by the nemesis.
    removed: bool,
}

#[derive(Debug)]
pub struct Cluster {
    skiff: PathBuf,
    members: Vec<Member>,
}

/// The certificates of a `--tls` campaign (`skiff certs` output: a certificate per member
/// name, `root` for the clients); unset: plain HTTP.
static TLS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Makes the certificates of a `--tls` campaign in `dir` with `skiff` and has every member and
/// client of the campaign use them.
pub fn use_tls(skiff: &Path, dir: &Path, nodes: usize) -> anyhow::Result<()> {
    let mut cmd = std::process::Command::new(skiff);
    cmd.arg("certs").arg("--dir").arg(dir);
    for i in 0..nodes {
        cmd.arg("--member").arg(network::netns(i));
    }
    let hosts: Vec<String> = (0..nodes)
        .map(|i| network::member_ip(i).to_string())
        .chain(["127.0.0.1".to_string()])
        .collect();
    cmd.arg("--client")
        .arg("root")
        .arg("--hosts")
        .arg(hosts.join(","));
    if dir.join("ca.pem").exists() {
        cmd.arg("--force");
    }
    let out = cmd.output().context("running skiff certs")?;
    anyhow::ensure!(
        out.status.success(),
        "skiff certs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let set = TLS.get_or_init(|| dir.to_path_buf());
    anyhow::ensure!(set == dir, "one certificate directory per process");
    Ok(())
}

fn tls_options(dir: &Path) -> anyhow::Result<etcd_client::TlsOptions> {
    let read = |f: &str| std::fs::read(dir.join(f)).with_context(|| format!("reading {f}"));
    Ok(etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(read("ca.pem")?))
        .identity(etcd_client::Identity::from_pem(
            read("root.pem")?,
            read("root-key.pem")?,
        )))
}

/// `http` or, in a `--tls` campaign, `https`.
fn scheme() -> &'static str {
    if TLS.get().is_some() { "https" } else { "http" }
}

/// Whether the cluster of the run under way has etcd's auth on (an `--auth` campaign, once
/// [`Cluster::enable_auth`] ran): clients then authenticate.
static AUTH_ON: AtomicBool = AtomicBool::new(false);

/// The users of an `--auth` campaign: root for the harness's own calls (membership changes,
/// compaction, hashes), and a user with read and write on every key but not root for the
/// workloads' clients, so every request goes through the permission checks.
const ROOT_PASSWORD: &str = "jepsen-root";
const CLIENT_USER: &str = "jepsen";
const CLIENT_PASSWORD: &str = "jepsen-client";

/// Who a connection is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    Harness,
    Client,
}

/// Connects the harness to some endpoints, with its timeouts.
pub async fn connect(endpoints: &[String], timeout: Duration) -> anyhow::Result<Client> {
    connect_as(endpoints, timeout, Who::Harness).await
}

/// Connects `who` to some endpoints, with the harness's timeouts; as a user when auth is on
/// (its token renewed when a member that restarted no longer knows it).
pub async fn connect_as(
    endpoints: &[String],
    timeout: Duration,
    who: Who,
) -> anyhow::Result<Client> {
    let mut opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(timeout);
    if let Some(dir) = TLS.get() {
        opts = opts.with_tls(tls_options(dir)?);
    }
    if AUTH_ON.load(Ordering::Acquire) {
        opts = match who {
            Who::Harness => opts.with_user("root", ROOT_PASSWORD),
            Who::Client => opts.with_user(CLIENT_USER, CLIENT_PASSWORD),
        }
        .with_auto_token_refresh(true);
    }
    tokio::time::timeout(timeout, Client::connect(endpoints, Some(opts)))
        .await
        .map_err(|_| anyhow!("connecting to {endpoints:?} timed out"))?
        .with_context(|| format!("connecting to {endpoints:?}"))
}

impl Cluster {
    /// Describes `n` members with data and logs under `dir`; nothing runs yet.
    pub fn new(skiff: &Path, dir: &Path, n: usize) -> Cluster {
        let members = (0..n)
            .map(|i| Member {
                name: network::netns(i),
                data_dir: dir.join(format!("{}.data", network::netns(i))),
                log: dir.join(format!("{}.log", network::netns(i))),
                child: None,
                paused: false,
                removed: false,
            })
            .collect();
        Cluster {
            skiff: skiff.to_path_buf(),
            members,
        }
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn name(&self, i: usize) -> &str {
        &self.members[i].name
    }

    /// Client endpoint of member `i` (`host:port`; `https://host:port` in a `--tls` campaign).
    pub fn endpoint(&self, i: usize) -> String {
        match TLS.get() {
            Some(_) => format!("https://{}:2379", network::member_ip(i)),
            None => format!("{}:2379", network::member_ip(i)),
        }
    }

    fn peer_url(i: usize) -> String {
        format!("{}://{}:2380", scheme(), network::member_ip(i))
    }

    pub fn is_running(&self, i: usize) -> bool {
        self.members[i]
            .child
            .as_ref()
            .is_some_and(Child::is_running)
    }

    pub fn is_paused(&self, i: usize) -> bool {
        self.members[i].paused
    }

    pub fn is_removed(&self, i: usize) -> bool {
        self.members[i].removed
    }

    /// The members in the membership: name and peer URL.
    fn initial_cluster(&self) -> Vec<(String, String)> {
        (0..self.len())
            .filter(|&i| !self.members[i].removed)
            .map(|i| (self.members[i].name.clone(), Self::peer_url(i)))
            .collect()
    }

    /// Starts member `i` on its data directory.
    fn spawn(&mut self, i: usize, state: ClusterState) -> anyhow::Result<()> {
        let ip = network::member_ip(i);
        let initial_cluster = self.initial_cluster();
        let m = &mut self.members[i];
        let store = StoreCommand {
            name: m.name.clone(),
            data_dir: m.data_dir.clone(),
            listen_client_url: format!("{}://{ip}:2379", scheme()),
            listen_peer_url: format!("{}://{ip}:2380", scheme()),
            listen_metrics_url: Some(format!("http://{ip}:2381")),
            initial_cluster,
            initial_cluster_state: state,
            heartbeat_interval: Some(HEARTBEAT_MS),
            election_timeout: Some(ELECTION_TIMEOUT_MS),
            snapshot_count: Some(SNAPSHOT_COUNT),
            snapshot_catchup_entries: Some(SNAPSHOT_CATCHUP_ENTRIES),
            log: Some("info,openraft=warn".into()),
            tls: TLS.get().map(|d| StoreTls {
                cert: d.join(format!("{}.pem", m.name)),
                key: d.join(format!("{}-key.pem", m.name)),
                ca: d.join("ca.pem"),
            }),
            ..StoreCommand::default()
        };
        let child = Launch::new(&m.name, "ip", &m.log)
            .args(["netns", "exec", &network::netns(i)])
            .arg(&self.skiff)
            .args(store.args())
            .spawn()
            .context("spawning skiff store")?;
        m.child = Some(child);
        m.paused = false;
        Ok(())
    }

    /// Starts every member and waits until they agree on a leader.
    pub async fn start(&mut self, timeout: Duration) -> anyhow::Result<()> {
        AUTH_ON.store(false, Ordering::Release);
        for i in 0..self.len() {
            self.spawn(i, ClusterState::New)?;
        }
        self.wait_healthy(timeout).await
    }

    /// Turns etcd's auth on (an `--auth` campaign): root, and the workloads' user with read
    /// and write on every key; from then on every connection authenticates.
    pub async fn enable_auth(&self) -> anyhow::Result<()> {
        let endpoints: Vec<String> = (0..self.len()).map(|i| self.endpoint(i)).collect();
        let c = connect(&endpoints, Duration::from_secs(10)).await?;
        let mut auth = c.auth_client();
        auth.user_add("root", ROOT_PASSWORD, None).await?;
        auth.user_grant_role("root", "root").await?;
        auth.role_add(CLIENT_USER).await?;
        auth.role_grant_permission(
            CLIENT_USER,
            etcd_client::Permission::read_write("").with_all_keys(),
        )
        .await?;
        auth.user_add(CLIENT_USER, CLIENT_PASSWORD, None).await?;
        auth.user_grant_role(CLIENT_USER, CLIENT_USER).await?;
        auth.auth_enable().await.context("enabling auth")?;
        AUTH_ON.store(true, Ordering::Release);
        Ok(())
    }

    /// kill -9 member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(child) = self.members[i].child.as_mut() {
            child.kill();
        }
        self.members[i].paused = false;
    }

    /// Restarts a killed member on its data directory.
    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        if self.is_running(i) {
            return Ok(());
        }
        self.spawn(i, ClusterState::New)
    }

    fn signal(&mut self, i: usize, stop: bool) -> anyhow::Result<()> {
        let Some(child) = self.members[i].child.as_ref().filter(|c| c.is_running()) else {
            return Ok(());
        };
        if stop {
            child.pause()?;
        } else {
            child.resume()?;
        }
        self.members[i].paused = stop;
        Ok(())
    }

    /// SIGSTOP member `i`.
    pub async fn pause(&mut self, i: usize) -> anyhow::Result<()> {
        self.signal(i, true)
    }

    /// SIGCONT member `i`.
    pub async fn resume(&mut self, i: usize) -> anyhow::Result<()> {
        self.signal(i, false)
    }

    /// The member that says it is leader, if one answers within `timeout`.
    pub async fn leader(&self, timeout: Duration) -> Option<usize> {
        for i in 0..self.len() {
            if !self.is_running(i) || self.is_paused(i) || self.is_removed(i) {
                continue;
            }
            let probe = async {
                let mut c = connect(&[self.endpoint(i)], timeout).await.ok()?;
                let s = c.status().await.ok()?;
                let me = s.header().map(|h| h.member_id())?;
                (s.leader() != 0 && s.leader() == me).then_some(i)
            };
            if let Ok(Some(i)) = tokio::time::timeout(timeout, probe).await {
                return Some(i);
            }
        }
        None
    }

    /// Waits until every running member serves a linearizable read and a leader exists.
    pub async fn wait_healthy(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut pending: Vec<usize> = (0..self.len())
            .filter(|&i| self.is_running(i) && !self.is_removed(i))
            .collect();
        while !pending.is_empty() {
            for i in 0..self.len() {
                if let Some(child) = self.members[i].child.as_mut()
                    && let Some(status) = child.exited()
                {
                    bail!(
                        "{} exited with {status}; log: {}",
                        self.members[i].name,
                        self.members[i].log.display()
                    );
                }
            }
            let mut still = Vec::new();
            for &i in &pending {
                let probe = async {
                    let mut c = connect(&[self.endpoint(i)], Duration::from_secs(2)).await?;
                    c.get("/skiff-jepsen/health", None).await?;
                    anyhow::Ok(())
                };
                if !matches!(
                    tokio::time::timeout(Duration::from_secs(3), probe).await,
                    Ok(Ok(()))
                ) {
                    still.push(i);
                }
            }
            pending = still;
            if pending.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                let names: Vec<&str> = pending.iter().map(|&i| self.name(i)).collect();
                bail!("members {names:?} not serving reads after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// A running member other than `i` that is in the membership.
    fn other(&self, i: usize) -> Option<usize> {
        (0..self.len())
            .find(|&j| j != i && self.is_running(j) && !self.is_paused(j) && !self.is_removed(j))
    }

    /// Removes member `i` from the Raft membership, stops it and wipes its data.
    pub async fn remove_member(&mut self, i: usize, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let peer = Self::peer_url(i);
        loop {
            let j = self.other(i).context("no other member to ask")?;
            let attempt = async {
                let mut c = connect(&[self.endpoint(j)], Duration::from_secs(5)).await?;
                let list = c.member_list().await?;
                let Some(id) = list
                    .members()
                    .iter()
                    .find(|m| m.peer_urls().contains(&peer))
                    .map(|m| m.id())
                else {
                    return anyhow::Ok(());
                };
                c.member_remove(id).await?;
                anyhow::Ok(())
            };
            match attempt.await {
                Ok(()) => break,
                Err(e) if Instant::now() > deadline => {
                    return Err(e.context(format!("removing {}", self.name(i))));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        self.kill(i);
        let dir = self.members[i].data_dir.clone();
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("wiping {}", dir.display()))?;
        }
        self.members[i].removed = true;
        Ok(())
    }

    /// Adds member `i` back (fresh data directory) and starts it to join.
    pub async fn add_member(&mut self, i: usize, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let peer = Self::peer_url(i);
        let j = self.other(i).context("no other member to ask")?;
        let endpoint = self.endpoint(j);
        let add = {
            let peer = peer.clone();
            tokio::spawn(async move {
                loop {
                    let attempt = async {
                        let mut c =
                            connect(std::slice::from_ref(&endpoint), Duration::from_secs(10))
                                .await?;
                        match c.member_add([peer.clone()], None).await {
                            Ok(_) => anyhow::Ok(()),
                            Err(e) if e.to_string().contains("exist") => anyhow::Ok(()),
                            Err(e) => Err(e.into()),
                        }
                    };
                    match attempt.await {
                        Ok(()) => return anyhow::Ok(()),
                        Err(e) if Instant::now() > deadline => return Err(e),
                        Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                }
            })
        };
        // Start the process once the membership lists it: the joiner asks the others for
        // the cluster id, and they must know it by then.
        loop {
            let listed = async {
                let mut c = connect(&[self.endpoint(j)], Duration::from_secs(2)).await?;
                let list = c.member_list().await?;
                anyhow::Ok(list.members().iter().any(|m| m.peer_urls().contains(&peer)))
            };
            if matches!(listed.await, Ok(true)) {
                break;
            }
            if Instant::now() > deadline || add.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.members[i].removed = false;
        self.spawn(i, ClusterState::Existing)?;
        let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(1);
        match tokio::time::timeout(left, add).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(e.context(format!("adding {}", self.name(i)))),
            Ok(Err(e)) => Err(anyhow!("member add task: {e}")),
            Err(_) => Err(anyhow!("adding {} timed out", self.name(i))),
        }
    }

    /// Stops every member (kill -9, which a paused one dies of too).
    pub fn stop_all(&mut self) {
        for i in 0..self.len() {
            self.kill(i);
        }
    }

    /// The last lines of member `i`'s log, for failure reports.
    pub fn log_tail(&self, i: usize, lines: usize) -> String {
        self.members[i]
            .child
            .as_ref()
            .map(|c| c.log_tail(lines))
            .unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}
