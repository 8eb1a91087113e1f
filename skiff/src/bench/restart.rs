//! `skiff bench restart`: a rolling restart of a three-member store under a put load, member
//! by member, first stopping each one as an operator does (SIGTERM, so a leader hands over
//! first) and then with kill -9, and for each restart the longest pause between acknowledged
//! puts and when it began, from the stop signal (`--down`: how long each member stays
//! stopped, so a pause that began about `--down` in came from the start again). The members
//! are `skiff store` processes of this binary on loopback (or, with `--etcd`, etcd's, for the
//! same figures side by side), in a temporary directory, started and stopped here.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use etcd_client::Client;
use nix::sys::signal::Signal;
use skiff_launch::{Child, ClusterState, Launch, StoreCommand};
use skiff_scheduler::bench::Latencies;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Store members.
    #[arg(long, default_value_t = 3)]
    members: usize,
    /// Concurrent putting clients (each its own connection to every member).
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Rounds of restarting every member, per way of stopping.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// How long a stopped member stays down before it is started again (an upgrade's binary
    /// swap; a member back within an election timeout may find it still leads).
    #[arg(long, default_value = "2s", value_parser = skiff_proto::duration::parse)]
    down: Duration,
    /// How long the load runs between two restarts (and before the first).
    #[arg(long, default_value = "2s", value_parser = skiff_proto::duration::parse)]
    settle: Duration,
    /// Where the members' data and logs go (default: a temporary directory, removed after).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Restart members of etcd (this binary, e.g. /usr/bin/etcd) instead of Skiff's, under
    /// the same load: the figures to compare with.
    #[arg(long)]
    etcd: Option<std::path::PathBuf>,
}

/// How a member is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Graceful,
    Kill,
}

impl Stop {
    fn label(self) -> &'static str {
        match self {
            Stop::Graceful => "SIGTERM",
            Stop::Kill => "kill -9",
        }
    }
}

struct Member {
    command: StoreCommand,
    log: std::path::PathBuf,
    child: Option<Child>,
    /// An etcd member (its own flags), not `skiff store`.
    etcd: bool,
}

impl Member {
    fn spawn(&mut self, exe: &Path) -> Result<()> {
        let args = if self.etcd {
            self.command.etcd_args()
        } else {
            self.command.args()
        };
        let launch = Launch::new(self.command.name.clone(), exe, self.log.clone()).args(args);
        self.child = Some(launch.spawn()?);
        Ok(())
    }

    fn endpoint(&self) -> String {
        self.command
            .listen_client_url
            .trim_start_matches("http://")
            .to_string()
    }
}

/// When each acknowledged put was acknowledged, and how many puts failed.
#[derive(Default)]
struct Acks {
    at: Mutex<Vec<Instant>>,
    failed: AtomicU64,
}

impl Acks {
    /// The longest gap between acknowledgements from `from` on (the last one before `from`
    /// counts as the start), up to now, and the acknowledgement that began it.
    fn longest_pause_since(&self, from: Instant) -> (Duration, Instant) {
        let at = self.at.lock().unwrap_or_else(|p| p.into_inner());
        let start = at.partition_point(|t| *t < from);
        let mut prev = if start > 0 { at[start - 1] } else { from };
        let mut longest = (Duration::ZERO, prev);
        for t in at[start..].iter().chain([&Instant::now()]) {
            let gap = t.saturating_duration_since(prev);
            if gap > longest.0 {
                longest = (gap, prev);
            }
            prev = *t;
        }
        longest
    }
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?.port())
}

/// The index of the member that says it leads, waiting up to `limit`.
async fn leader(members: &[Member], limit: Duration) -> Result<usize> {
    let deadline = Instant::now() + limit;
    loop {
        for (i, m) in members.iter().enumerate() {
            if let Ok(mut c) = Client::connect([m.endpoint()], None).await
                && let Ok(s) = c.status().await
                && s.leader() != 0
                && s.leader() == s.header().map_or(0, |h| h.member_id())
            {
                return Ok(i);
            }
        }
        if Instant::now() > deadline {
            bail!("no leader within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until member `i` answers a linearizable read (it has a leader and has caught up).
async fn caught_up(member: &Member, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(mut c) = Client::connect([member.endpoint()], None).await
            && c.get("/bench/restart/probe", None).await.is_ok()
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{} did not catch up within {limit:?}", member.command.name);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn run(a: Args) -> Result<ExitCode> {
    if a.members < 3 {
        bail!("--members must be at least 3: a rolling restart of fewer loses the quorum");
    }
    let exe = match &a.etcd {
        Some(etcd) => etcd.clone(),
        None => std::env::current_exe().context("finding this skiff binary")?,
    };
    let temp = match &a.dir {
        Some(_) => None,
        None => Some(tempfile::tempdir().context("creating a temporary directory")?),
    };
    let dir = a
        .dir
        .clone()
        .or_else(|| temp.as_ref().map(|t| t.path().to_path_buf()))
        .context("a directory")?;
    if std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some()) {
        bail!(
            "{} is not empty: the bench starts a new cluster there",
            dir.display()
        );
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let names: Vec<String> = (0..a.members).map(|i| format!("m{i}")).collect();
    let peers: Vec<String> = (0..a.members)
        .map(|_| free_port().map(|p| format!("http://127.0.0.1:{p}")))
        .collect::<Result<_>>()?;
    let initial: Vec<(String, String)> = names.iter().cloned().zip(peers.clone()).collect();
    let mut members = Vec::new();
    for (name, peer) in names.iter().zip(&peers) {
        let command = StoreCommand {
            name: name.clone(),
            data_dir: dir.join(name),
            listen_client_url: format!("http://127.0.0.1:{}", free_port()?),
            listen_peer_url: peer.clone(),
            initial_cluster: initial.clone(),
            initial_cluster_state: ClusterState::New,
            log: Some("info,openraft=error".into()),
            ..StoreCommand::default()
        };
        members.push(Member {
            log: dir.join(format!("{name}.log")),
            command,
            child: None,
            etcd: a.etcd.is_some(),
        });
    }
    for m in &mut members {
        m.spawn(&exe)?;
    }
    leader(&members, Duration::from_secs(20)).await?;
    let endpoints: Vec<String> = members.iter().map(Member::endpoint).collect();
    let acks = Arc::new(Acks::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for c in 0..a.clients {
        let mut client = Client::connect(endpoints.clone(), None)
            .await
            .context("connecting a putting client")?;
        let (acks, stop) = (acks.clone(), stop.clone());
        load.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("/bench/restart/{c}/{}", n % 1000);
                match client.put(key, n.to_string(), None).await {
                    Ok(_) => {
                        let now = Instant::now();
                        let mut at = acks.at.lock().unwrap_or_else(|p| p.into_inner());
                        // Kept in order: one lock, the time taken under it.
                        let last = at.last().copied().unwrap_or(now);
                        at.push(now.max(last));
                    }
                    Err(_) => {
                        acks.failed.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
                n += 1;
            }
        }));
    }
    println!(
        "rolling restart of {} {} members under puts from {} clients, {} round(s) per way of stopping",
        a.members,
        if a.etcd.is_some() { "etcd" } else { "Skiff" },
        a.clients,
        a.rounds
    );
    println!(
        "{:<8} {:>5} {:>7} {:>7} {:>16} {:>14} {:>13}",
        "stop", "round", "member", "leader", "longest pause", "began at", "failed puts"
    );
    let mut worst = Vec::new();
    for way in [Stop::Graceful, Stop::Kill] {
        let mut pauses = Vec::new();
        for round in 1..=a.rounds {
            for i in 0..members.len() {
                tokio::time::sleep(a.settle).await;
                let was_leader = leader(&members, Duration::from_secs(20)).await? == i;
                let failed_before = acks.failed.load(Ordering::Relaxed);
                let from = Instant::now();
                let child = members[i].child.as_mut().context("member running")?;
                match way {
                    Stop::Graceful => {
                        if child
                            .stop(Signal::SIGTERM, Duration::from_secs(20))
                            .is_none()
                        {
                            bail!("{} did not exit within 20 s of SIGTERM", names[i]);
                        }
                    }
                    Stop::Kill => child.kill(),
                }
                members[i].child = None;
                tokio::time::sleep(a.down).await;
                members[i].spawn(&exe)?;
                caught_up(&members[i], Duration::from_secs(60)).await?;
                // Writes must have resumed before the pause is read.
                let resumed = Instant::now();
                while acks
                    .at
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .last()
                    .is_none_or(|t| *t < resumed)
                {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                let (pause, began) = acks.longest_pause_since(from);
                pauses.push((was_leader, pause));
                // When the pause began: at the stop (about 0) or at the start again (about
                // `--down` later).
                let at_ms = if began >= from {
                    began.duration_since(from).as_secs_f64() * 1000.0
                } else {
                    -(from.duration_since(began).as_secs_f64() * 1000.0)
                };
                println!(
                    "{:<8} {:>5} {:>7} {:>7} {:>13.0} ms {:>+11.0} ms {:>13}",
                    way.label(),
                    round,
                    names[i],
                    if was_leader { "yes" } else { "no" },
                    pause.as_secs_f64() * 1000.0,
                    at_ms,
                    acks.failed.load(Ordering::Relaxed) - failed_before
                );
            }
        }
        worst.push((way, pauses));
    }
    stop.store(true, Ordering::Relaxed);
    for l in load {
        let _ = l.await;
    }
    println!();
    for (way, pauses) in &worst {
        let leader: Latencies = pauses.iter().filter(|(l, _)| *l).map(|(_, p)| *p).collect();
        let leader_times = pauses.iter().filter(|(l, _)| *l).count();
        let p = leader.percentiles();
        let follower_max = pauses.iter().filter(|(l, _)| !*l).map(|(_, p)| *p).max();
        let ms = |d: Option<Duration>| {
            d.map_or("-".to_string(), |d| {
                format!("{:.0} ms", d.as_secs_f64() * 1000.0)
            })
        };
        println!(
            "{:<8} pause restarting the leader ({leader_times} times): median {:.0} ms, p90 {:.0} ms, max {:.0} ms; a follower: max {}",
            way.label(),
            p.p50,
            p.p90,
            p.max,
            ms(follower_max)
        );
    }
    for m in &mut members {
        if let Some(c) = m.child.as_mut() {
            c.stop(Signal::SIGTERM, Duration::from_secs(10));
        }
    }
    Ok(ExitCode::SUCCESS)
}
