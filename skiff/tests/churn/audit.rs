//! The churn test's auditor: a mirror of the stored Pods and Nodes rebuilt revision by
//! revision from two watches, and the invariants checked on it.
//!
//! ```text
//!   pod watch  ──┐  (events, bookmarks)        replay in revision order, up to the revision
//!                ├─► Feed ──► Audit::catch_up ─►  both streams have passed; after each
//!   node watch ──┘                                revision: resources, Never pods, binds
//! ```
//!
//! **Why two streams are merged by revision.** A check "at bind time" must see the cluster as
//! it was stored when the Bind committed, not as it is when the test looks: a pod relabelled
//! after it was bound, a node relabelled or tainted after, must not count. Every event carries
//! its revision (a deleted object's is the delete's), and bookmarks say how far a quiet stream
//! has come, so everything up to the lower of the two positions can be replayed in order.
//!
//! **Why a bind is checked against a window of states.** The scheduler decides on its informer
//! cache, which trails the store; its Bind compares only the pod's own resource version. A
//! pod relabelled, a node relabelled or a pod finishing a few milliseconds before a Bind can
//! make the placement wrong at the Bind's revision through no fault of the scheduler
//! (kube-scheduler has the same window). So a bind passes when it satisfies the rules against
//! some state stored within [`WINDOW`] before it arrived, with every bind the scheduler made
//! since that state added (it knows its own binds). A spread that fails even so is checked
//! again once [`WINDOW`] has passed after it, counting the binds that landed meanwhile: the
//! scheduler counts pods it has placed before their Binds land (kube-scheduler's assumed
//! pods), and Binds in flight together may land in any order. Resources are not racy this way: the
//! scheduler only frees what it has seen freed, so no node is ever over its allocatable at any
//! revision.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use skiff_proto::api::{Kind, Object, Pod, PodPhase, TaintEffect};
use skiff_proto::client::{ClusterClient, Event, ListParams, WatchParams};

/// How long before a Bind a state may have been stored and still justify it (the scheduler's
/// informer lag plus one scheduling cycle, with room for a loaded two-core machine).
pub const WINDOW: Duration = Duration::from_secs(3);

/// The taint the churn adds and removes.
pub const MAINTENANCE: &str = "churn/maintenance";

/// What a container of a churn pod does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// Runs until stopped; SIGTERM ends it at once.
    Serve,
    /// Runs until stopped; ignores SIGTERM, so only the grace period's end stops it.
    Stubborn,
    /// `restartPolicy: Never`: sleeps, then exits with the code.
    Job { secs: u32, exit: i32 },
}

/// A churn pod's spec as the test made it (its labels live in the store and change).
#[derive(Debug, Clone)]
pub struct Intent {
    pub milli_cpu: i64,
    pub memory_mi: i64,
    pub run: Run,
    /// Required anti-affinity to pods labelled `app=<value>`, over the topology key.
    pub anti: Option<(String, String)>,
    /// DoNotSchedule spread of pods labelled `app=<value>` over the topology key, max skew.
    pub spread: Option<(String, String, i32)>,
    /// `nodeSelector: {disk: ssd}`.
    pub wants_ssd: bool,
    /// Tolerates the [`MAINTENANCE`] taint.
    pub tolerates: bool,
}

impl Intent {
    pub fn exit(&self) -> Option<i32> {
        match self.run {
            Run::Job { exit, .. } => Some(exit),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct PodView {
    uid: String,
    labels: BTreeMap<String, String>,
    node: String,
    /// Not Succeeded or Failed: counts against its node and in the pod terms.
    live: bool,
}

#[derive(Debug, Clone, PartialEq)]
struct NodeView {
    labels: BTreeMap<String, String>,
    /// NoSchedule and NoExecute taints, by key.
    taints: Vec<String>,
    milli_cpu: i64,
    memory: i64,
    pods: i64,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct State {
    pods: BTreeMap<String, Arc<PodView>>,
    nodes: BTreeMap<String, Arc<NodeView>>,
}

/// A bind whose hard rules held but whose spread did not, against every state of its window.
struct Deferred {
    node: String,
    arrived: Instant,
    pod: Arc<PodView>,
    intent: Intent,
    /// The states whose hard rules held, with their revisions.
    bases: Vec<(i64, State)>,
    why: String,
}

/// What the two watch tasks deliver.
#[derive(Debug, Default)]
struct Feed {
    events: Vec<(i64, Instant, Event)>,
    pods_at: i64,
    nodes_at: i64,
    broken: Option<String>,
}

/// A Never pod's starts, as its statuses show them.
#[derive(Debug, Default)]
struct NeverTrack {
    starts: BTreeSet<String>,
    ended: Option<PodPhase>,
}

pub struct Audit {
    feed: Arc<Mutex<Feed>>,
    intents: HashMap<String, Intent>,
    state: State,
    /// The state after each revision that changed it, newest last, as far back as the window.
    history: VecDeque<(i64, Instant, State)>,
    /// Revision of each pod's bind, by UID.
    bound_at: HashMap<String, i64>,
    /// Binds whose spread failed against every state: checked again a window later.
    deferred: Vec<Deferred>,
    never: HashMap<String, NeverTrack>,
    pub done_to: i64,
    pub binds_checked: usize,
    pub failures: Vec<String>,
}

impl Audit {
    /// Starts following the cluster's Pods (namespace `default`) and Nodes from now.
    pub async fn start(api: &ClusterClient) -> Audit {
        let feed = Arc::new(Mutex::new(Feed::default()));
        let (_, rev) = api
            .list(Kind::Node, &ListParams::default())
            .await
            .expect("list nodes");
        for kind in [Kind::Pod, Kind::Node] {
            let params = WatchParams::default()
                .namespace(if kind == Kind::Pod { "default" } else { "" })
                .resource_version(rev)
                .bookmarks();
            let mut stream = Box::pin(api.watch(kind, &params).await.expect("watch"));
            let feed = feed.clone();
            tokio::spawn(async move {
                while let Some(item) = stream.next().await {
                    let mut f = feed.lock().expect("feed");
                    let e = match item {
                        Ok(e) => e,
                        Err(e) => {
                            f.broken = Some(format!("{kind:?} watch failed: {e}"));
                            return;
                        }
                    };
                    let at = match &e {
                        Event::Bookmark(r) => *r,
                        Event::Added(o) | Event::Modified(o) | Event::Deleted(o) => {
                            o.metadata().revision().expect("an event's revision")
                        }
                    };
                    if kind == Kind::Pod {
                        f.pods_at = f.pods_at.max(at);
                    } else {
                        f.nodes_at = f.nodes_at.max(at);
                    }
                    if !matches!(e, Event::Bookmark(_)) {
                        f.events.push((at, Instant::now(), e));
                    }
                }
                feed.lock().expect("feed").broken = Some(format!("{kind:?} watch ended"));
            });
        }
        Audit {
            feed,
            intents: HashMap::new(),
            state: State::default(),
            history: VecDeque::new(),
            bound_at: HashMap::new(),
            deferred: Vec::new(),
            never: HashMap::new(),
            done_to: rev,
            binds_checked: 0,
            failures: Vec::new(),
        }
    }

    /// Records what the test made a pod (by UID) to be.
    pub fn intend(&mut self, uid: &str, intent: Intent) {
        self.intents.insert(uid.to_string(), intent);
    }

    pub fn intent(&self, uid: &str) -> Option<&Intent> {
        self.intents.get(uid)
    }

    /// Node names and labels as last seen.
    pub fn nodes(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.state
            .nodes
            .iter()
            .map(|(n, v)| (n.clone(), v.labels.clone()))
            .collect()
    }

    /// Replays every event both streams have passed; fails the test on a broken watch.
    pub fn catch_up(&mut self) {
        let (events, upto) = {
            let mut f = self.feed.lock().expect("feed");
            if let Some(why) = &f.broken {
                panic!("audit: {why}");
            }
            let upto = f.pods_at.min(f.nodes_at);
            let mut ready = Vec::new();
            let mut rest = Vec::new();
            for e in f.events.drain(..) {
                if e.0 <= upto {
                    ready.push(e);
                } else {
                    rest.push(e);
                }
            }
            f.events = rest;
            (ready, upto)
        };
        let mut events = events;
        events.sort_by_key(|e| e.0);
        let mut i = 0;
        while i < events.len() {
            let rev = events[i].0;
            let mut j = i;
            let mut arrived = events[i].1;
            let mut newly_bound = Vec::new();
            while j < events.len() && events[j].0 == rev {
                arrived = arrived.max(events[j].1);
                if let Some(b) = self.apply(rev, &events[j].2) {
                    newly_bound.push(b);
                }
                j += 1;
            }
            self.check_resources(rev);
            for (name, node) in newly_bound {
                self.check_bind(&name, &node, rev, arrived);
            }
            self.recheck(rev, |d| d.arrived + WINDOW <= arrived);
            if self.history.back().is_none_or(|(_, _, s)| *s != self.state) {
                self.history.push_back((rev, arrived, self.state.clone()));
            }
            // Keep the newest state older than the window: it was current at its start.
            while self.history.len() > 2 && self.history[1].1 + WINDOW * 2 < arrived {
                self.history.pop_front();
            }
            i = j;
        }
        self.done_to = self.done_to.max(upto);
    }

    /// Waits (with a deadline) until everything up to `revision` is replayed.
    pub async fn reach(&mut self, revision: i64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.catch_up();
            if self.done_to >= revision {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "audit: watches did not reach revision {revision} in 30 s (at {})",
                self.done_to
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn fail(&mut self, what: String) {
        eprintln!("VIOLATION: {what}");
        self.failures.push(what);
    }

    /// Applies one event; returns the pod's name and node when it is a pod's first bind.
    fn apply(&mut self, rev: i64, e: &Event) -> Option<(String, String)> {
        match e {
            Event::Added(Object::Node(n)) | Event::Modified(Object::Node(n)) => {
                let alloc = n
                    .status
                    .as_ref()
                    .map(|s| s.allocatable.clone())
                    .unwrap_or_default();
                let q = |k: &str| alloc.get(k);
                let view = NodeView {
                    labels: n.metadata.labels.clone(),
                    taints: n
                        .spec
                        .taints
                        .iter()
                        .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
                        .map(|t| t.key.clone())
                        .collect(),
                    milli_cpu: q("cpu").map_or(0, |q| q.milli_value()),
                    memory: q("memory").map_or(0, |q| q.value()),
                    pods: q("pods").map_or(0, |q| q.value()),
                };
                self.state
                    .nodes
                    .insert(n.metadata.name.clone(), Arc::new(view));
                None
            }
            Event::Deleted(Object::Node(n)) => {
                self.state.nodes.remove(&n.metadata.name);
                None
            }
            Event::Added(Object::Pod(p)) | Event::Modified(Object::Pod(p)) => {
                let name = p.metadata.name.clone();
                let uid = p.metadata.uid.clone();
                self.track_never(p);
                let was = self.state.pods.get(&name).cloned();
                let view = PodView {
                    uid: uid.clone(),
                    labels: p.metadata.labels.clone(),
                    node: p.spec.node_name.clone(),
                    live: !p.is_terminal(),
                };
                self.state.pods.insert(name.clone(), Arc::new(view));
                let before = was.filter(|w| w.uid == uid).map(|w| w.node.clone());
                match before.as_deref() {
                    _ if p.spec.node_name.is_empty() => None,
                    Some(n) if n == p.spec.node_name => None,
                    Some(n) if !n.is_empty() => {
                        self.fail(format!(
                            "rev {rev}: pod {name} ({uid}) moved from {n} to {}",
                            p.spec.node_name
                        ));
                        None
                    }
                    _ => {
                        self.bound_at.insert(uid, rev);
                        Some((name, p.spec.node_name.clone()))
                    }
                }
            }
            Event::Deleted(Object::Pod(p)) => {
                self.state.pods.remove(&p.metadata.name);
                None
            }
            _ => None,
        }
    }

    /// A Never pod's container is started once: its restart count stays 0, one start time
    /// and container ID are ever reported, and a finished pod stays finished.
    fn track_never(&mut self, p: &Pod) {
        let uid = &p.metadata.uid;
        if self.intents.get(uid).is_none_or(|i| i.exit().is_none()) {
            return;
        }
        let name = &p.metadata.name;
        let mut found = Vec::new();
        let t = self.never.entry(uid.clone()).or_default();
        for c in p.status.iter().flat_map(|s| &s.container_statuses) {
            if c.restart_count > 0 {
                found.push(format!(
                    "Never pod {name} ({uid}): container {} has restartCount {}",
                    c.name, c.restart_count
                ));
            }
            let started = c.state.as_ref().and_then(|s| {
                s.running
                    .as_ref()
                    .and_then(|r| r.started_at)
                    .or_else(|| s.terminated.as_ref().and_then(|t| t.started_at))
            });
            if let Some(at) = started {
                t.starts.insert(format!("started at {at:?}"));
            }
            if c.container_id.ends_with("://") {
                found.push(format!(
                    "Never pod {name} ({uid}): container {} reports the ID {:?}, which names \
                     no container",
                    c.name, c.container_id
                ));
            } else if !c.container_id.is_empty() {
                t.starts.insert(format!("container {}", c.container_id));
            }
        }
        // One start time and one container ID.
        if t.starts.len() > 2 {
            found.push(format!(
                "Never pod {name} ({uid}) started more than once: {:?}",
                t.starts
            ));
        }
        let phase = p.phase();
        match (t.ended, phase) {
            (Some(was), Some(now)) if was != now => found.push(format!(
                "Never pod {name} ({uid}) went from {was:?} to {now:?}"
            )),
            (None, Some(now)) if now.is_terminal() => t.ended = Some(now),
            _ => {}
        }
        for f in found {
            self.fail(f);
        }
    }

    /// No node is over its allocatable cpu, memory or pod count at any revision.
    fn check_resources(&mut self, rev: i64) {
        let mut found = Vec::new();
        for (name, node) in &self.state.nodes {
            let on: Vec<&PodView> = self
                .state
                .pods
                .values()
                .filter(|p| p.live && p.node == *name)
                .map(|p| p.as_ref())
                .collect();
            let (mut cpu, mut mem) = (0, 0);
            for p in &on {
                if let Some(i) = self.intents.get(&p.uid) {
                    cpu += i.milli_cpu;
                    mem += i.memory_mi << 20;
                }
            }
            if cpu > node.milli_cpu || mem > node.memory || on.len() as i64 > node.pods {
                found.push(format!(
                    "rev {rev}: node {name} over its allocatable: {cpu}m of {}m cpu, {mem} of {} \
                     bytes, {} of {} pods",
                    node.milli_cpu,
                    node.memory,
                    on.len(),
                    node.pods
                ));
            }
        }
        for f in found {
            self.fail(f);
        }
    }

    /// The pod just bound satisfies its node selector, the taints, required anti-affinity
    /// (its own and every placed pod's) and its DoNotSchedule spread against some state
    /// within the window before the bind.
    fn check_bind(&mut self, name: &str, node: &str, rev: i64, arrived: Instant) {
        self.binds_checked += 1;
        let Some(pod) = self.state.pods.get(name).cloned() else {
            return;
        };
        let Some(intent) = self.intents.get(&pod.uid).cloned() else {
            self.fail(format!(
                "rev {rev}: pod {name} bound, but the test never made it"
            ));
            return;
        };
        let mut bases: Vec<(i64, &State)> = vec![(rev, &self.state)];
        bases.extend(
            self.history
                .iter()
                .filter(|(r, at, _)| *r < rev && *at + WINDOW >= arrived)
                .map(|(r, _, s)| (*r, s)),
        );
        // The newest state before the window was current when the window began.
        if let Some((r, _, s)) = self
            .history
            .iter()
            .rev()
            .find(|(r, at, _)| *r < rev && *at + WINDOW < arrived)
        {
            bases.push((*r, s));
        }
        let mut why = Vec::new();
        let mut spread_only = Vec::new();
        for (base_rev, base) in bases {
            let with_peers = self.overlay(base, base_rev, rev, &pod.uid, true);
            let without_peers = self.overlay(base, base_rev, rev, &pod.uid, false);
            let verdict = self
                .rules(&pod, &intent, node, &with_peers, true)
                .and_then(|()| {
                    let spread = self
                        .rules(&pod, &intent, node, &with_peers, false)
                        .or_else(|_| self.rules(&pod, &intent, node, &without_peers, false));
                    if spread.is_err() {
                        spread_only.push((base_rev, base.clone()));
                    }
                    spread
                });
            match verdict {
                Ok(()) => return,
                Err(e) => why.push(e),
            }
        }
        let why = format!(
            "rev {rev}: pod {name} bound to {node} against every state within {WINDOW:?}: {}",
            why.first().cloned().unwrap_or_default()
        );
        if spread_only.is_empty() {
            self.fail(why);
        } else {
            self.deferred.push(Deferred {
                node: node.to_string(),
                arrived,
                pod,
                intent,
                bases: spread_only,
                why,
            });
        }
    }

    /// Checks again the deferred binds `due` says are due, against their states with every
    /// bind up to `now` (a revision) added: one that still breaks its spread fails.
    fn recheck(&mut self, now: i64, due: impl Fn(&Deferred) -> bool) {
        let (ready, waiting): (Vec<Deferred>, Vec<Deferred>) = std::mem::take(&mut self.deferred)
            .into_iter()
            .partition(|d| due(d));
        self.deferred = waiting;
        for d in ready {
            let held = d.bases.iter().any(|(base_rev, base)| {
                let later = self.overlay(base, *base_rev, now, &d.pod.uid, true);
                self.rules(&d.pod, &d.intent, &d.node, &later, false)
                    .is_ok()
            });
            if !held {
                self.fail(format!(
                    "{} (and with the binds of the {WINDOW:?} after)",
                    d.why
                ));
            }
        }
    }

    /// Settles every deferred bind against everything replayed so far (the end of a run).
    pub fn finish(&mut self) {
        let now = self.done_to;
        self.recheck(now, |_| true);
    }

    /// `base` with every pod bound after it (up to `rev`, the pod itself aside) placed as it is
    /// now; without `peers`, the pods bound by the same Bind as the pod are left out.
    fn overlay(&self, base: &State, base_rev: i64, rev: i64, uid: &str, peers: bool) -> State {
        let mut s = base.clone();
        for (n, p) in &self.state.pods {
            let at = self.bound_at.get(&p.uid).copied().unwrap_or(0);
            if p.uid != uid && at > base_rev && at <= rev {
                s.pods.insert(n.clone(), p.clone());
            }
        }
        s.pods
            .retain(|_, p| p.uid != uid && (peers || self.bound_at.get(&p.uid) != Some(&rev)));
        s
    }

    /// The filters: node selector and taints, anti-affinity both ways (`hard`), or the
    /// DoNotSchedule spread (`!hard`).
    fn rules(
        &self,
        pod: &PodView,
        intent: &Intent,
        node: &str,
        s: &State,
        hard: bool,
    ) -> Result<(), String> {
        let Some(n) = s.nodes.get(node) else {
            return Err(format!("node {node} does not exist"));
        };
        let domain = |node: &str, key: &str| s.nodes.get(node).and_then(|n| n.labels.get(key));
        let placed = || s.pods.values().filter(|p| p.live && !p.node.is_empty());
        let has_app = |labels: &BTreeMap<String, String>, app: &str| {
            labels.get("app").is_some_and(|v| v == app)
        };
        if hard {
            if intent.wants_ssd && n.labels.get("disk").is_none_or(|v| v != "ssd") {
                return Err(format!("node {node} has no disk=ssd"));
            }
            if n.taints
                .iter()
                .any(|t| !(intent.tolerates && t == MAINTENANCE))
            {
                return Err(format!("node {node} is tainted {:?}", n.taints));
            }
            if let Some((app, key)) = &intent.anti
                && let Some(d) = domain(node, key)
                && let Some(q) =
                    placed().find(|q| has_app(&q.labels, app) && domain(&q.node, key) == Some(d))
            {
                return Err(format!(
                    "anti-affinity to app={app} over {key}: a pod ({}) on {}",
                    q.uid, q.node
                ));
            }
            for q in placed() {
                if let Some((app, key)) = self.intents.get(&q.uid).and_then(|i| i.anti.as_ref())
                    && has_app(&pod.labels, app)
                    && let Some(d) = domain(node, key)
                    && domain(&q.node, key) == Some(d)
                {
                    return Err(format!(
                        "pod {} on {} is anti-affine to app={app} over {key}",
                        q.uid, q.node
                    ));
                }
            }
            return Ok(());
        }
        let Some((app, key, skew)) = &intent.spread else {
            return Ok(());
        };
        let Some(here) = domain(node, key) else {
            return Err(format!("node {node} has no {key}"));
        };
        let mut counts: BTreeMap<&String, i64> = BTreeMap::new();
        for (name, n) in &s.nodes {
            let Some(d) = n.labels.get(key) else { continue };
            if intent.wants_ssd && n.labels.get("disk").is_none_or(|v| v != "ssd") {
                continue;
            }
            let c = placed()
                .filter(|q| q.node == *name && has_app(&q.labels, app))
                .count() as i64;
            *counts.entry(d).or_insert(0) += c;
        }
        let min = counts.values().copied().min().unwrap_or(0);
        let at = counts.get(here).copied().unwrap_or(0) + i64::from(has_app(&pod.labels, app));
        if at > min + i64::from(*skew) {
            return Err(format!(
                "spread of app={app} over {key} (max skew {skew}): {at} in {here}, min {min}, \
                 counts {counts:?}"
            ));
        }
        Ok(())
    }
}
