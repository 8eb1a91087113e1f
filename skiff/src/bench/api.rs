//! `skiff bench api`: the cluster's two faces side by side in one run. The same pods are
//! created through the gRPC cluster API and through the Kubernetes REST API (HTTP/1.1 JSON,
//! as kubectl and client-go send them), while one watch of each face times every pod from the
//! moment its create was acknowledged to the moment the watch delivered it.
//!
//! ```text
//!  namespace api-<run>  ──  gRPC watch ─┐ arrival of each pod, per watch
//!                       └─  REST watch ─┘
//!  phase 1: N pods grpc-* through ClusterClient::create, C tasks
//!  phase 2: N pods rest-* through POST /api/v1/namespaces/<ns>/pods, C tasks
//!  face row: its creates/s and create latency; its watch's delay for its own pods
//! ```
//!
//! Both watches see every pod of both phases; each face's delivery figure is the delay its
//! own watch showed for the pods created through it, so the row compares a face with itself
//! end to end. An event that beats its create's answer (the server commits, then answers and
//! notifies in parallel) counts as a delay of zero; the report says how many did.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use parking_lot::Mutex;
use serde::Deserialize;
use skiff_proto::api::{Kind, Object};
use skiff_proto::client::{ClusterClient, Event, WatchParams};
use skiff_proto::http::{Body, HttpClient};
use skiff_scheduler::bench::{Latencies, Percentiles};

use super::fixtures;
use crate::config::{self, ClientConfig, Endpoints};

/// How long one REST request may take before the benchmark calls it failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Pods to create through each face (twice this many in all).
    #[arg(long, default_value_t = 2000)]
    pods: usize,
    /// Concurrent creating tasks per face.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// The Kubernetes REST API (`http://host:port`) [default: the first member's, when the
    /// endpoints are those of the cluster `skiff up` wrote the client configuration for].
    #[arg(long, env = "SKIFF_API_URL")]
    api_url: Option<String>,
    /// The pods' `spec.schedulerName`. The default lets the cluster's scheduler bind them
    /// (and its nodes run them), which adds binds and status updates to the load; a name no
    /// scheduler serves measures the API alone.
    #[arg(long, default_value = "default-scheduler")]
    scheduler_name: String,
    /// Give up waiting for the watches' events this long after the last create.
    #[arg(long, default_value = "60s", value_parser = skiff_proto::duration::parse)]
    timeout: Duration,
    /// Leave the pods (and their namespace) in place.
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    endpoints: Endpoints,
}

/// The two faces of the cluster's API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Face {
    /// The gRPC cluster API (`skiff.cluster.v1`).
    Grpc,
    /// The Kubernetes REST API (`/api/v1`).
    Rest,
}

impl Face {
    fn label(self) -> &'static str {
        match self {
            Face::Grpc => "gRPC cluster API",
            Face::Rest => "Kubernetes REST",
        }
    }

    /// The prefix of the names of the pods created through this face.
    fn prefix(self) -> &'static str {
        match self {
            Face::Grpc => "grpc-",
            Face::Rest => "rest-",
        }
    }
}

/// Each pod's first ADDED event as one watch received it.
#[derive(Debug, Default)]
struct Seen {
    at: HashMap<String, Instant>,
    /// How many of `at` each face created, so waiting for them needs no scan.
    grpc: usize,
    rest: usize,
}

impl Seen {
    fn add(&mut self, name: String, now: Instant) {
        if let std::collections::hash_map::Entry::Vacant(e) = self.at.entry(name) {
            if e.key().starts_with(Face::Grpc.prefix()) {
                self.grpc += 1;
            } else if e.key().starts_with(Face::Rest.prefix()) {
                self.rest += 1;
            }
            e.insert(now);
        }
    }

    fn count(&self, face: Face) -> usize {
        match face {
            Face::Grpc => self.grpc,
            Face::Rest => self.rest,
        }
    }
}

type Arrivals = Arc<Mutex<Seen>>;

/// One acknowledged create.
#[derive(Debug)]
struct Created {
    name: String,
    latency: Duration,
    acked: Instant,
}

/// What one face's creates did.
#[derive(Debug)]
struct Phase {
    created: Vec<Created>,
    failed: usize,
    first_error: Option<String>,
    elapsed: Duration,
}

/// A creating client of one face.
#[derive(Debug, Clone)]
enum Creator {
    Grpc(ClusterClient),
    Rest { http: HttpClient, url: String },
}

impl Creator {
    /// Creates the pod whose manifest is `pod`, decoding the answer as a client would.
    async fn create(&self, pod: &serde_json::Value) -> Result<()> {
        match self {
            Creator::Grpc(api) => {
                let object = Object::from_json(Kind::Pod, pod.to_string().as_bytes())?;
                api.create(&object).await?;
            }
            Creator::Rest { http, url } => {
                let body = Body {
                    content_type: "application/json",
                    bytes: serde_json::to_vec(pod)?.into(),
                };
                let r = http.post(url, body, REQUEST_TIMEOUT).await?;
                if r.status != 201 {
                    bail!("POST {url}: {} {}", r.status, r.text());
                }
                Object::from_json(Kind::Pod, &r.body)?;
            }
        }
        Ok(())
    }
}

/// A pod of the benchmark, the same manifest through either face.
fn pod(ns: &str, name: &str, scheduler: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "api-bench"}},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "localhost/skiff/pause:1",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]
        }
    })
}

/// [`api_url`], refused unless it is plain HTTP, which the REST benchmarks speak.
pub(super) fn plain_api_url(given: Option<&str>, endpoints: &[String]) -> Result<String> {
    let base = api_url(given, endpoints)?;
    if base.starts_with("https://") {
        bail!(
            "{base}: the REST benchmark speaks plain HTTP; run it against a cluster started with `skiff up --insecure`"
        );
    }
    Ok(base)
}

/// The REST API's base URL: the flag, else the first member of the `skiff up` cluster whose
/// endpoints these are. Other endpoints say nothing of where their REST API listens.
fn api_url(given: Option<&str>, endpoints: &[String]) -> Result<String> {
    if let Some(url) = given {
        return Ok(url.trim_end_matches('/').to_string());
    }
    let file = config::path();
    if let Some(ClientConfig {
        endpoints: configured,
        data_dir: Some(dir),
        ..
    }) = ClientConfig::load(&file)?
        && configured == endpoints
        && let Some(url) = crate::up::kubernetes_api(&dir)?
    {
        return Ok(url);
    }
    bail!(
        "pass --api-url (the Kubernetes API, http://host:port): it follows from the endpoints only for the cluster `skiff up` recorded in {}",
        file.display()
    )
}

pub async fn run(a: Args) -> Result<ExitCode> {
    if a.pods == 0 || a.clients == 0 {
        bail!("--pods and --clients must be at least 1");
    }
    let store = a.endpoints.resolve()?;
    let base = plain_api_url(a.api_url.as_deref(), &store.endpoints)?;
    let api = store.connect()?;
    let http = HttpClient::new();
    let (ns, namespace) = fixtures::fresh_namespace(&api, "api").await?;
    let revision = namespace
        .metadata()
        .revision()
        .context("the created namespace has no resourceVersion")?;
    let pods_url = format!("{base}/api/v1/namespaces/{ns}/pods");
    eprintln!(
        "{} pods through each face into namespace {ns}, {} clients each; gRPC {}, REST {base} …",
        a.pods,
        a.clients,
        store.endpoints.join(",")
    );

    let grpc_seen = Arrivals::default();
    let rest_seen = Arrivals::default();
    let (grpc_ready, grpc_up) = tokio::sync::oneshot::channel();
    let (rest_ready, rest_up) = tokio::sync::oneshot::channel();
    let grpc_watch = tokio::spawn(watch_grpc(
        api.clone(),
        ns.clone(),
        revision,
        grpc_seen.clone(),
        grpc_ready,
    ));
    let rest_watch = tokio::spawn(watch_rest(
        http.clone(),
        format!("{pods_url}?watch=1&resourceVersion={revision}"),
        rest_seen.clone(),
        rest_ready,
    ));
    // Events are never lost (both watches start at the namespace's revision), but a watch
    // still being set up when the creates begin would show its first events late.
    for (face, up) in [(Face::Grpc, grpc_up), (Face::Rest, rest_up)] {
        if tokio::time::timeout(Duration::from_secs(10), up)
            .await
            .is_err()
        {
            eprintln!(
                "the {} watch was not answered within 10 s; going on",
                face.label()
            );
        }
    }

    let grpc = create_all(
        Creator::Grpc(api.clone()),
        Face::Grpc,
        &ns,
        &a.scheduler_name,
        a.pods,
        a.clients,
    )
    .await;
    let rest = create_all(
        Creator::Rest {
            http: http.clone(),
            url: pods_url.clone(),
        },
        Face::Rest,
        &ns,
        &a.scheduler_name,
        a.pods,
        a.clients,
    )
    .await;

    // Until both watches have every pod of both faces, one's stream ends, or the deadline.
    let deadline = Instant::now() + a.timeout;
    loop {
        let waiting = [&grpc_seen, &rest_seen].iter().any(|seen| {
            let seen = seen.lock();
            seen.count(Face::Grpc) < grpc.created.len()
                || seen.count(Face::Rest) < rest.created.len()
        });
        if !waiting {
            break;
        }
        if Instant::now() >= deadline || grpc_watch.is_finished() || rest_watch.is_finished() {
            eprintln!("stopped waiting for the watches' events");
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    grpc_watch.abort();
    rest_watch.abort();
    report_watch_end(Face::Grpc, grpc_watch.await);
    report_watch_end(Face::Rest, rest_watch.await);

    println!(
        "api: {} pods per face, {} clients per face, namespace {ns}, schedulerName {}",
        a.pods, a.clients, a.scheduler_name
    );
    println!(
        "  {:<18} {:>9}   {:>33}   {:>33}   events",
        "", "creates/s", "create latency p50 / p99 / max", "watch delivery p50 / p99 / max"
    );
    let mut complete = true;
    for (face, phase, seen) in [
        (Face::Grpc, &grpc, &grpc_seen),
        (Face::Rest, &rest, &rest_seen),
    ] {
        complete &= report(face, phase, &seen.lock().at);
    }
    for (face, phase, seen) in [
        (Face::Grpc, &grpc, &rest_seen),
        (Face::Rest, &rest, &grpc_seen),
    ] {
        let other = seen.lock().count(face);
        println!(
            "  the other face's watch saw {other} of the {} pods created through the {}",
            phase.created.len(),
            face.label()
        );
    }

    if a.keep {
        eprintln!("pods kept in namespace {ns}");
    } else {
        clean_up(&http, &base, &ns).await;
    }
    Ok(if complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Creates `pods` pods named after `face` with `clients` tasks, each taking the next index.
async fn create_all(
    creator: Creator,
    face: Face,
    ns: &str,
    scheduler: &str,
    pods: usize,
    clients: usize,
) -> Phase {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (creator, next) = (creator.clone(), next.clone());
            let (ns, scheduler) = (ns.to_string(), scheduler.to_string());
            tokio::spawn(async move {
                let mut done = Vec::new();
                let mut errors = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= pods {
                        break;
                    }
                    let name = format!("{}{i:06}", face.prefix());
                    let manifest = pod(&ns, &name, &scheduler);
                    let sent = Instant::now();
                    match creator.create(&manifest).await {
                        Ok(()) => {
                            let acked = Instant::now();
                            done.push(Created {
                                name,
                                latency: acked - sent,
                                acked,
                            });
                        }
                        Err(e) => errors.push(format!("{name}: {e:#}")),
                    }
                }
                (done, errors)
            })
        })
        .collect();
    let mut phase = Phase {
        created: Vec::with_capacity(pods),
        failed: 0,
        first_error: None,
        elapsed: Duration::ZERO,
    };
    for t in tasks {
        match t.await {
            Ok((done, errors)) => {
                phase.created.extend(done);
                phase.failed += errors.len();
                if phase.first_error.is_none() {
                    phase.first_error = errors.into_iter().next();
                }
            }
            Err(e) => {
                phase.failed += 1;
                phase.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    phase.elapsed = start.elapsed();
    eprintln!(
        "  {}: {} created in {:.2} s{}",
        face.label(),
        phase.created.len(),
        phase.elapsed.as_secs_f64(),
        if phase.failed > 0 {
            format!(", {} failed", phase.failed)
        } else {
            String::new()
        }
    );
    phase
}

/// Prints one face's row; true when its watch delivered every pod created through it.
fn report(face: Face, phase: &Phase, seen: &HashMap<String, Instant>) -> bool {
    let created = phase.created.len();
    let latency: Latencies = phase.created.iter().map(|c| c.latency).collect();
    let mut delivery = Latencies::new();
    let mut early = 0usize;
    for c in &phase.created {
        if let Some(at) = seen.get(&c.name) {
            if *at < c.acked {
                early += 1;
            }
            delivery.record(at.saturating_duration_since(c.acked));
        }
    }
    let received = delivery.len() as usize;
    let ms = |p: Percentiles| format!("{:>8.1} {:>8.1} {:>8.1} ms", p.p50, p.p99, p.max);
    println!(
        "  {:<18} {:>9.0}   {:>33}   {:>33}   {received} of {created}{}",
        face.label(),
        created as f64 / phase.elapsed.as_secs_f64(),
        ms(latency.percentiles()),
        ms(delivery.percentiles()),
        if early > 0 {
            format!(" ({early} before the create's answer)")
        } else {
            String::new()
        }
    );
    if received != created {
        println!(
            "  MISSING: the {} watch delivered {received} of the {created} pods created through it",
            face.label()
        );
    }
    if phase.failed > 0 {
        println!(
            "  FAILED: {} creates through the {}; the first: {}",
            phase.failed,
            face.label(),
            phase.first_error.as_deref().unwrap_or("(no message)")
        );
    }
    received == created && phase.failed == 0
}

fn report_watch_end(face: Face, end: std::result::Result<Result<()>, tokio::task::JoinError>) {
    match end {
        Ok(Ok(())) => eprintln!("the {} watch's stream ended", face.label()),
        Ok(Err(e)) => eprintln!("the {} watch failed: {e:#}", face.label()),
        // Aborted once every event was in: how a watch normally ends here.
        Err(e) if e.is_cancelled() => {}
        Err(e) => eprintln!("the {} watch panicked: {e}", face.label()),
    }
}

async fn watch_grpc(
    api: ClusterClient,
    ns: String,
    revision: i64,
    seen: Arrivals,
    ready: tokio::sync::oneshot::Sender<()>,
) -> Result<()> {
    let mut events = Box::pin(
        api.watch(
            Kind::Pod,
            &WatchParams::default()
                .namespace(&ns)
                .resource_version(revision),
        )
        .await?,
    );
    let _ = ready.send(());
    while let Some(e) = events.next().await {
        let now = Instant::now();
        if let Event::Added(o) = e? {
            seen.lock().add(o.metadata().name.clone(), now);
        }
    }
    Ok(())
}

async fn watch_rest(
    http: HttpClient,
    url: String,
    seen: Arrivals,
    ready: tokio::sync::oneshot::Sender<()>,
) -> Result<()> {
    let (status, chunks) = http.get_streaming(&url, REQUEST_TIMEOUT).await?;
    if status != 200 {
        bail!("GET {url}: status {status}");
    }
    let _ = ready.send(());
    let mut chunks = Box::pin(chunks);
    let mut lines = LineSplitter::default();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        let now = Instant::now();
        for line in lines.push(&chunk) {
            match WatchLine::parse(&line).with_context(|| {
                format!(
                    "a watch line that is not an event: {}",
                    String::from_utf8_lossy(&line)
                )
            })? {
                WatchLine::Added(name) => {
                    seen.lock().add(name, now);
                }
                WatchLine::Other => {}
                WatchLine::Error(message) => bail!("the watch ended with an error: {message}"),
            }
        }
    }
    Ok(())
}

/// Deletes the namespace's pods (one deletecollection, no grace) and the namespace.
async fn clean_up(http: &HttpClient, base: &str, ns: &str) {
    eprintln!("deleting the benchmark's pods and namespace {ns} …");
    let pods = format!("{base}/api/v1/namespaces/{ns}/pods?gracePeriodSeconds=0");
    let namespace = format!("{base}/api/v1/namespaces/{ns}");
    for url in [pods, namespace] {
        match http.delete(&url, Duration::from_secs(600)).await {
            Ok(r) if r.status == 200 || r.status == 202 => {}
            Ok(r) => eprintln!("DELETE {url}: {} {}", r.status, r.text()),
            Err(e) => eprintln!("{e}"),
        }
    }
}

/// Splits a watch stream into its lines (one JSON event each), however its chunks cut them.
#[derive(Debug, Default)]
struct LineSplitter {
    /// The start of a line whose end has not arrived.
    partial: Vec<u8>,
}

impl LineSplitter {
    /// The lines that `chunk` completes, without their `\n`; empty lines are skipped.
    fn push(&mut self, chunk: &[u8]) -> Vec<Vec<u8>> {
        let mut lines = Vec::new();
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            let mut line = std::mem::take(&mut self.partial);
            line.extend_from_slice(&rest[..end]);
            if !line.iter().all(u8::is_ascii_whitespace) {
                lines.push(line);
            }
            rest = &rest[end + 1..];
        }
        self.partial.extend_from_slice(rest);
        lines
    }
}

/// What the benchmark reads of one watch event line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum WatchLine {
    /// An ADDED event, with the object's name.
    Added(String),
    /// MODIFIED, DELETED or BOOKMARK.
    Other,
    /// An ERROR event (a `Status`), with its message.
    Error(String),
}

impl WatchLine {
    fn parse(line: &[u8]) -> Result<WatchLine, serde_json::Error> {
        #[derive(Deserialize)]
        struct Line {
            #[serde(rename = "type")]
            ty: String,
            object: Inner,
        }
        #[derive(Deserialize)]
        struct Inner {
            #[serde(default)]
            metadata: Meta,
            #[serde(default)]
            message: String,
        }
        #[derive(Deserialize, Default)]
        struct Meta {
            #[serde(default)]
            name: String,
        }
        let l: Line = serde_json::from_slice(line)?;
        Ok(match l.ty.as_str() {
            "ADDED" => WatchLine::Added(l.object.metadata.name),
            "ERROR" => WatchLine::Error(l.object.message),
            _ => WatchLine::Other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines come out whole and in order however the stream is cut: every split of a
    /// three-line stream into three chunks gives the same lines.
    #[test]
    fn lines_survive_any_chunking() {
        let stream = b"{\"a\":1}\n\n{\"b\":22}\n{\"c\":333}\n";
        let want: Vec<Vec<u8>> = vec![
            b"{\"a\":1}".to_vec(),
            b"{\"b\":22}".to_vec(),
            b"{\"c\":333}".to_vec(),
        ];
        for i in 0..=stream.len() {
            for j in i..=stream.len() {
                let mut s = LineSplitter::default();
                let mut got = s.push(&stream[..i]);
                got.extend(s.push(&stream[i..j]));
                got.extend(s.push(&stream[j..]));
                assert_eq!(got, want, "cut at {i} and {j}");
                assert!(s.partial.is_empty());
            }
        }
    }

    /// A line without its newline yet is held back until the newline comes.
    #[test]
    fn an_unfinished_line_waits() {
        let mut s = LineSplitter::default();
        assert!(s.push(b"{\"type\":\"ADD").is_empty());
        assert_eq!(s.push(b"ED\"}\n{"), vec![b"{\"type\":\"ADDED\"}".to_vec()]);
        assert_eq!(s.partial, b"{");
    }

    /// Events are told apart by type; ADDED carries the name, ERROR the Status's message,
    /// and fields the benchmark does not read are ignored.
    #[test]
    fn event_lines_parse() {
        let added = br#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"rest-000001","namespace":"n","resourceVersion":"9"},"spec":{"containers":[]}}}"#;
        assert_eq!(
            WatchLine::parse(added).expect("parses"),
            WatchLine::Added("rest-000001".into())
        );
        let modified = br#"{"type":"MODIFIED","object":{"metadata":{"name":"p"}}}"#;
        assert_eq!(
            WatchLine::parse(modified).expect("parses"),
            WatchLine::Other
        );
        let bookmark =
            br#"{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"12"}}}"#;
        assert_eq!(
            WatchLine::parse(bookmark).expect("parses"),
            WatchLine::Other
        );
        let error = br#"{"type":"ERROR","object":{"kind":"Status","status":"Failure","message":"too old resource version: 3 (7)","reason":"Expired","code":410}}"#;
        assert_eq!(
            WatchLine::parse(error).expect("parses"),
            WatchLine::Error("too old resource version: 3 (7)".into())
        );
        assert!(WatchLine::parse(b"{\"object\":{}}").is_err());
        assert!(WatchLine::parse(b"not json").is_err());
    }
}
