//! The nemesis: faults on a seeded schedule, one at a time. Each fault is planned (targets
//! chosen, the leader looked up), recorded as a `start` op with its description, applied,
//! held, then healed and recorded as a `stop` op, so every fault window is in the history.
//!
//! ```text
//!   quiet 2–5 s ─► start(fault) ─► hold 3–8 s ─► stop(fault) ─► quiet …   (until time limit)
//! ```

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::cluster::{self, Cluster};
use crate::history::{F, OpType, Process, Recorder};
use crate::network::{self, Grudge};

/// The kinds of fault a run may include.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Nemesis {
    /// iptables DROP grudges: isolate one, halves, isolate the leader, bridge, ring.
    Partition,
    /// Random loss of peer packets.
    Loss,
    /// kill -9, then restart on the same data directory.
    Kill,
    /// SIGSTOP, then SIGCONT.
    Pause,
    /// Remove a member from the membership (and wipe it), then add it back.
    Member,
    /// A burst of compactions close to the head revision.
    Compact,
}

impl FromStr for Nemesis {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "partition" => Ok(Nemesis::Partition),
            "loss" => Ok(Nemesis::Loss),
            "kill" => Ok(Nemesis::Kill),
            "pause" => Ok(Nemesis::Pause),
            "member" => Ok(Nemesis::Member),
            "compact" => Ok(Nemesis::Compact),
            _ => Err(format!(
                "unknown nemesis {s:?} (partition, loss, kill, pause, member, compact)"
            )),
        }
    }
}

impl std::fmt::Display for Nemesis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Nemesis::Partition => "partition",
            Nemesis::Loss => "loss",
            Nemesis::Kill => "kill",
            Nemesis::Pause => "pause",
            Nemesis::Member => "member",
            Nemesis::Compact => "compact",
        })
    }
}

/// A planned fault, with what it takes to heal it.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    Partition { kind: &'static str, grudge: Grudge },
    Loss { probability: f64 },
    Kill { node: usize, leader: bool },
    Pause { node: usize, leader: bool },
    Member { node: usize },
    Compact,
}

impl Fault {
    /// Short description recorded in the history (`value.fault`).
    pub fn describe(&self, cluster: &Cluster) -> String {
        let who = |node: usize, leader: bool| {
            format!(
                "{}{}",
                cluster.name(node),
                if leader { " (leader)" } else { "" }
            )
        };
        match self {
            Fault::Partition { kind, grudge } => {
                let cuts: Vec<String> = grudge
                    .iter()
                    .map(|(n, from)| {
                        let names: Vec<&str> = from.iter().map(|&f| cluster.name(f)).collect();
                        format!("{}✕{}", cluster.name(*n), names.join("+"))
                    })
                    .collect();
                format!("partition-{kind} {}", cuts.join(" "))
            }
            Fault::Loss { probability } => format!("loss {:.0}%", probability * 100.0),
            Fault::Kill { node, leader } => format!("kill {}", who(*node, *leader)),
            Fault::Pause { node, leader } => format!("pause {}", who(*node, *leader)),
            Fault::Member { node } => format!("member remove+add {}", cluster.name(*node)),
            Fault::Compact => "compaction storm".to_string(),
        }
    }
}

/// The grudge of a partition `kind` over members in shuffled `order`.
fn grudge(kind: &str, order: &[usize], leader: Option<usize>) -> Grudge {
    let n = order.len();
    match kind {
        "leader" => {
            let l = leader.unwrap_or(order[0]);
            let rest: Vec<usize> = order.iter().copied().filter(|&i| i != l).collect();
            network::cut(&[l], &rest)
        }
        "halves" => network::cut(&order[..n / 2], &order[n / 2..]),
        "bridge" => {
            // order[0] is the bridge: it hears both sides, which cannot hear each other.
            let rest = &order[1..];
            let half = rest.len() / 2;
            network::cut(&rest[..half], &rest[half..])
        }
        "ring" => {
            // Everyone hears only its two ring neighbours: each has a majority view, and no
            // two majorities coincide.
            let mut g = Grudge::new();
            for (pos, &node) in order.iter().enumerate() {
                let prev = order[(pos + n - 1) % n];
                let next = order[(pos + 1) % n];
                let drops = order
                    .iter()
                    .copied()
                    .filter(|&o| o != node && o != prev && o != next);
                g.entry(node).or_default().extend(drops);
            }
            g
        }
        _ => network::cut(&order[..1], &order[1..]),
    }
}

/// Chooses targets for a fault of this kind.
pub async fn plan(kind: Nemesis, cluster: &Cluster, rng: &mut StdRng) -> Fault {
    let n = cluster.len();
    let leader = cluster.leader(Duration::from_secs(1)).await;
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(rng);
    // Half the time aim at the leader (when one is known): that is where the bugs are.
    let target = |rng: &mut StdRng| match leader {
        Some(l) if rng.random_bool(0.5) => (l, true),
        _ => {
            let i = rng.random_range(0..n);
            (i, Some(i) == leader)
        }
    };
    match kind {
        Nemesis::Partition => {
            let kinds: &[&'static str] = if n >= 5 {
                &["one", "halves", "leader", "bridge", "ring"]
            } else {
                &["one", "halves", "leader", "bridge"]
            };
            let kind = *kinds.choose(rng).unwrap_or(&"one");
            let grudge = grudge(kind, &order, leader);
            Fault::Partition { kind, grudge }
        }
        Nemesis::Loss => Fault::Loss {
            probability: rng.random_range(0.2..0.5),
        },
        Nemesis::Kill => {
            let (node, leader) = target(rng);
            Fault::Kill { node, leader }
        }
        Nemesis::Pause => {
            let (node, leader) = target(rng);
            Fault::Pause { node, leader }
        }
        Nemesis::Member => Fault::Member {
            node: target(rng).0,
        },
        Nemesis::Compact => Fault::Compact,
    }
}

/// Applies a planned fault.
pub async fn apply(fault: &Fault, cluster: &mut Cluster) -> anyhow::Result<()> {
    match fault {
        Fault::Partition { grudge, .. } => network::partition(grudge).await,
        Fault::Loss { probability } => network::lose(cluster.len(), *probability).await,
        Fault::Kill { node, .. } => {
            cluster.kill(*node);
            Ok(())
        }
        Fault::Pause { node, .. } => cluster.pause(*node).await,
        Fault::Member { node } => cluster.remove_member(*node, Duration::from_secs(20)).await,
        Fault::Compact => compact(cluster).await,
    }
}

/// Heals a fault.
pub async fn heal(fault: &Fault, cluster: &mut Cluster) -> anyhow::Result<()> {
    match fault {
        Fault::Partition { .. } | Fault::Loss { .. } => network::heal(cluster.len()).await,
        Fault::Kill { node, .. } => cluster.restart(*node),
        Fault::Pause { node, .. } => cluster.resume(*node).await,
        Fault::Member { node } => cluster.add_member(*node, Duration::from_secs(30)).await,
        Fault::Compact => Ok(()),
    }
}

/// Heals everything that could still be broken: network, paused, killed, removed.
pub async fn heal_all(cluster: &mut Cluster) -> anyhow::Result<()> {
    network::heal(cluster.len()).await?;
    for i in 0..cluster.len() {
        if cluster.is_paused(i) {
            cluster.resume(i).await?;
        }
    }
    for i in 0..cluster.len() {
        if cluster.is_removed(i) {
            cluster.add_member(i, Duration::from_secs(30)).await?;
        } else if !cluster.is_running(i) {
            cluster.restart(i)?;
        }
    }
    Ok(())
}

/// A few compactions to a little behind the head revision, so watchers that resume from
/// older revisions meet the compacted error.
async fn compact(cluster: &Cluster) -> anyhow::Result<()> {
    let endpoints: Vec<String> = (0..cluster.len())
        .filter(|&i| cluster.is_running(i) && !cluster.is_paused(i))
        .map(|i| cluster.endpoint(i))
        .collect();
    let mut c = cluster::connect(&endpoints, Duration::from_secs(5)).await?;
    for _ in 0..3 {
        let rev = c
            .get("/", None)
            .await
            .context("reading the head revision")?
            .header()
            .map_or(0, |h| h.revision());
        if rev > 20 {
            c.compact(rev - 20, None).await.context("compacting")?;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Ok(())
}

/// Runs faults until `stop` is cancelled, then heals the active one. Returns the cluster.
pub async fn run(
    mut cluster: Cluster,
    kinds: Vec<Nemesis>,
    mut rng: StdRng,
    recorder: &Recorder,
    stop: CancellationToken,
) -> Cluster {
    let record = |f: F, kind: OpType, fault: &str, error: Option<String>| {
        recorder.record(
            Process::Nemesis,
            kind,
            f,
            json!({ "fault": fault }),
            None,
            error,
        );
    };
    if kinds.is_empty() {
        stop.cancelled().await;
        return cluster;
    }
    loop {
        let quiet = Duration::from_millis(rng.random_range(2000..5000));
        tokio::select! {
            _ = tokio::time::sleep(quiet) => {}
            _ = stop.cancelled() => return cluster,
        }
        let kind = *kinds.choose(&mut rng).unwrap_or(&kinds[0]);
        let fault = plan(kind, &cluster, &mut rng).await;
        let what = fault.describe(&cluster);
        tracing::info!(fault = %what, "nemesis start");
        record(F::Start, OpType::Invoke, &what, None);
        let applied = apply(&fault, &mut cluster).await;
        record(
            F::Start,
            OpType::Info,
            &what,
            applied.as_ref().err().map(|e| format!("{e:#}")),
        );
        let hold = Duration::from_millis(rng.random_range(3000..8000));
        tokio::select! {
            _ = tokio::time::sleep(hold) => {}
            _ = stop.cancelled() => {}
        }
        record(F::Stop, OpType::Invoke, &what, None);
        let healed = heal(&fault, &mut cluster).await;
        record(
            F::Stop,
            OpType::Info,
            &what,
            healed.as_ref().err().map(|e| format!("{e:#}")),
        );
        tracing::info!(fault = %what, "nemesis stop");
        if stop.is_cancelled() {
            return cluster;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nemeses_parse_and_print() {
        for s in ["partition", "loss", "kill", "pause", "member", "compact"] {
            assert_eq!(s.parse::<Nemesis>().expect("parses").to_string(), s);
        }
        assert!("flood".parse::<Nemesis>().is_err());
    }

    #[test]
    fn partition_shapes() {
        let order = [3, 1, 4, 0, 2];
        // ring of five: everyone hears exactly its two neighbours
        let ring = grudge("ring", &order, None);
        for node in 0..5 {
            assert_eq!(ring[&node].len(), 2, "{node}: {:?}", ring[&node]);
        }
        assert!(!ring[&3].contains(&1) && !ring[&3].contains(&2));
        // bridge: the bridge node (order[0]) hears everyone, the sides do not hear each other
        let bridge = grudge("bridge", &order, None);
        assert!(!bridge.contains_key(&3));
        assert!(bridge[&1].contains(&0) && bridge[&1].contains(&2));
        // isolating the leader cuts it from all others, both ways
        let leader = grudge("leader", &order, Some(4));
        assert_eq!(leader[&4].len(), 4);
        assert!(leader[&0].contains(&4));
        // halves: minority of two against majority of three
        let halves = grudge("halves", &order, None);
        assert_eq!(halves[&3].len(), 3);
        assert_eq!(halves[&0].len(), 2);
    }
}
