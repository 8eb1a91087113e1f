//! `skiff bench kinds`: what a kind's path through the Kubernetes REST API costs, for a Pod
//! (a typed kind), a ConfigMap (a declared kind) and a custom resource (a kind a CRD defines
//! while the cluster runs), the last with and without CEL validation rules, side by side in
//! one run. Each kind's objects are created with the same concurrency, then its whole
//! collection is listed again and again.
//!
//! ```text
//!  CRDs benchwidgets and benchgadgets (.bench.skiff.dev; made if missing, and waited for):
//!  one schema, the gadgets' with CEL rules
//!  namespace kinds-<run>:  N pods ─► N configmaps ─► N benchwidgets ─► N benchgadgets
//!                          (C clients each), then L lists of each whole collection
//!  kind row: creates/s, create latency p50 / p99 / max, list latency p50 / p99 / max
//! ```
//!
//! Pods name a scheduler nobody runs, so nothing binds or runs them: the figures are the
//! API's alone.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::{Value, json};
use skiff_proto::http::{Body, HttpClient};
use skiff_scheduler::bench::{Latencies, Percentiles};

use super::api::plain_api_url;
use super::fixtures;
use crate::config::Endpoints;

/// How long one request may take before the benchmark calls it failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The benchmark's custom kinds: plural and kind; the second's CRD gives it CEL rules.
const CUSTOM: [(&str, &str); 2] = [
    ("benchwidgets", "BenchWidget"),
    ("benchgadgets", "BenchGadget"),
];

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Objects of each kind to create.
    #[arg(long, default_value_t = 2000)]
    objects: usize,
    /// Concurrent creating tasks.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Lists of each whole collection, one after another.
    #[arg(long, default_value_t = 20)]
    lists: usize,
    /// The Kubernetes REST API (`http://host:port`) [default: the first member's, when the
    /// endpoints are those of the cluster `skiff up` wrote the client configuration for].
    #[arg(long, env = "SKIFF_API_URL")]
    api_url: Option<String>,
    /// Leave the objects, their namespace and the CRD in place.
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    endpoints: Endpoints,
}

/// One kind of the run: its collection's path and an object of it.
struct Subject {
    label: &'static str,
    /// The collection, after `/api/v1/namespaces/<ns>/` or `/apis/<gv>/namespaces/<ns>/`.
    collection: &'static str,
    /// The group version's path (`api/v1`, `apis/bench.skiff.dev/v1`).
    prefix: &'static str,
    object: fn(&str) -> Value,
}

const SUBJECTS: [Subject; 4] = [
    Subject {
        label: "Pod",
        collection: "pods",
        prefix: "api/v1",
        object: |name| {
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": {"app": "kinds-bench"}},
                "spec": {
                    "schedulerName": "kinds-bench-nobody",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": "localhost/skiff/pause:1",
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]
                }
            })
        },
    },
    Subject {
        label: "ConfigMap",
        collection: "configmaps",
        prefix: "api/v1",
        object: |name| {
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "labels": {"app": "kinds-bench"}},
                "data": {"mode": "fast", "level": "3", "endpoint": "https://example.com/api/v1"}
            })
        },
    },
    Subject {
        label: "custom (CRD)",
        collection: "benchwidgets",
        prefix: "apis/bench.skiff.dev/v1",
        object: |name| {
            json!({
                "apiVersion": "bench.skiff.dev/v1", "kind": "BenchWidget",
                "metadata": {"name": name, "labels": {"app": "kinds-bench"}},
                "spec": {"image": "localhost/skiff/pause:1", "size": 3, "mode": "fast"}
            })
        },
    },
    Subject {
        label: "custom + CEL",
        collection: "benchgadgets",
        prefix: "apis/bench.skiff.dev/v1",
        object: |name| {
            json!({
                "apiVersion": "bench.skiff.dev/v1", "kind": "BenchGadget",
                "metadata": {"name": name, "labels": {"app": "kinds-bench"}},
                "spec": {"image": "localhost/skiff/pause:1", "size": 3, "mode": "fast"}
            })
        },
    },
];

/// The name of the CRD of custom kind `plural`.
fn crd_name(plural: &str) -> String {
    format!("{plural}.bench.skiff.dev")
}

/// The CRD of a custom kind of the benchmark: a structural schema, and for `BenchGadget`
/// three CEL rules of the kinds operators write (a relation between fields, a string check,
/// an immutable field).
fn crd(plural: &str, kind: &str) -> Value {
    let mut spec = json!({"type": "object", "required": ["image"], "properties": {
        "image": {"type": "string", "minLength": 1},
        "size": {"type": "integer", "minimum": 1, "maximum": 100, "default": 1},
        "mode": {"type": "string", "enum": ["fast", "safe"]}
    }});
    if kind == "BenchGadget" {
        spec["x-kubernetes-validations"] = json!([
            {"rule": "self.mode != 'safe' || self.size <= 10", "message": "safe gadgets have at most 10"},
            {"rule": "self.image.startsWith('localhost/') || self.image.contains('.')",
             "message": "the image names its registry"}
        ]);
        spec["properties"]["mode"]["x-kubernetes-validations"] =
            json!([{"rule": "self == oldSelf", "message": "mode is immutable"}]);
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name(plural)},
        "spec": {
            "group": "bench.skiff.dev",
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_ascii_lowercase(), "kind": kind},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}}
            }]
        }
    })
}

fn json_body(value: &Value) -> Body {
    Body {
        content_type: "application/json",
        bytes: serde_json::to_vec(value)
            .expect("invariant: JSON values always encode")
            .into(),
    }
}

/// Creates the CRD of custom kind `plural` unless it exists, and waits until its collection
/// answers in `ns`.
async fn ensure_crd(
    http: &HttpClient,
    base: &str,
    ns: &str,
    plural: &str,
    kind: &str,
) -> Result<()> {
    let url = format!("{base}/apis/apiextensions.k8s.io/v1/customresourcedefinitions");
    let r = http
        .post(&url, json_body(&crd(plural, kind)), REQUEST_TIMEOUT)
        .await?;
    if r.status != 201 && r.status != 409 {
        bail!("POST {url}: {} {}", r.status, r.text());
    }
    let collection = format!("{base}/apis/bench.skiff.dev/v1/namespaces/{ns}/{plural}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = http.get(&collection, REQUEST_TIMEOUT).await?;
        if r.status == 200 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "{} was not served within 30 s: GET {collection}: {}",
                crd_name(plural),
                r.status
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One kind's figures.
struct Row {
    created: usize,
    failed: usize,
    first_error: Option<String>,
    elapsed: Duration,
    create: Latencies,
    list: Latencies,
    listed: usize,
}

async fn measure(
    http: &HttpClient,
    url: &str,
    subject: &Subject,
    objects: usize,
    clients: usize,
    lists: usize,
) -> Row {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (http, next, url) = (http.clone(), next.clone(), url.to_owned());
            let object = subject.object;
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut errors = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= objects {
                        break;
                    }
                    let body = json_body(&object(&format!("b{i:06}")));
                    let sent = Instant::now();
                    match http.post(&url, body, REQUEST_TIMEOUT).await {
                        Ok(r) if r.status == 201 => latencies.push(sent.elapsed()),
                        Ok(r) => errors.push(format!("POST {url}: {} {}", r.status, r.text())),
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                (latencies, errors)
            })
        })
        .collect();
    let mut row = Row {
        created: 0,
        failed: 0,
        first_error: None,
        elapsed: Duration::ZERO,
        create: Latencies::new(),
        list: Latencies::new(),
        listed: 0,
    };
    for t in tasks {
        match t.await {
            Ok((latencies, errors)) => {
                row.created += latencies.len();
                latencies.iter().for_each(|l| row.create.record(*l));
                row.failed += errors.len();
                if row.first_error.is_none() {
                    row.first_error = errors.into_iter().next();
                }
            }
            Err(e) => {
                row.failed += 1;
                row.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    row.elapsed = start.elapsed();
    for _ in 0..lists {
        let sent = Instant::now();
        match http.get(url, REQUEST_TIMEOUT).await {
            Ok(r) if r.status == 200 => {
                row.list.record(sent.elapsed());
                row.listed = serde_json::from_slice::<Value>(&r.body)
                    .ok()
                    .and_then(|v| v["items"].as_array().map(Vec::len))
                    .unwrap_or(0);
            }
            Ok(r) => {
                row.failed += 1;
                row.first_error
                    .get_or_insert_with(|| format!("GET {url}: {} {}", r.status, r.text()));
            }
            Err(e) => {
                row.failed += 1;
                row.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    row
}

pub async fn run(a: Args) -> Result<ExitCode> {
    if a.objects == 0 || a.clients == 0 {
        bail!("--objects and --clients must be at least 1");
    }
    let store = a.endpoints.resolve()?;
    let base = plain_api_url(a.api_url.as_deref(), &store.endpoints)?;
    let api = store.connect()?;
    let http = HttpClient::new();
    let (ns, _) = fixtures::fresh_namespace(&api, "kinds").await?;
    for (plural, kind) in CUSTOM {
        ensure_crd(&http, &base, &ns, plural, kind).await?;
    }
    eprintln!(
        "{} objects of each kind into namespace {ns}, {} clients, then {} lists of each; REST {base} …",
        a.objects, a.clients, a.lists
    );
    let mut rows = Vec::new();
    for subject in &SUBJECTS {
        let url = format!(
            "{base}/{}/namespaces/{ns}/{}",
            subject.prefix, subject.collection
        );
        let row = measure(&http, &url, subject, a.objects, a.clients, a.lists).await;
        eprintln!(
            "  {}: {} created in {:.2} s",
            subject.label,
            row.created,
            row.elapsed.as_secs_f64()
        );
        rows.push((subject, row));
    }

    println!(
        "kinds: {} objects per kind, {} clients, {} lists of each collection, namespace {ns}",
        a.objects, a.clients, a.lists
    );
    println!(
        "  {:<14} {:>9}   {:>33}   {:>33}",
        "", "creates/s", "create latency p50 / p99 / max", "list latency p50 / p99 / max"
    );
    let ms = |p: Percentiles| format!("{:>8.1} {:>8.1} {:>8.1} ms", p.p50, p.p99, p.max);
    let mut complete = true;
    for (subject, row) in &rows {
        println!(
            "  {:<14} {:>9.0}   {:>33}   {:>33}",
            subject.label,
            row.created as f64 / row.elapsed.as_secs_f64(),
            ms(row.create.percentiles()),
            ms(row.list.percentiles()),
        );
        if row.failed > 0 || row.listed != a.objects {
            complete = false;
            println!(
                "  FAILED: {} requests for {}, {} of {} listed; the first error: {}",
                row.failed,
                subject.label,
                row.listed,
                a.objects,
                row.first_error.as_deref().unwrap_or("(none)")
            );
        }
    }

    if a.keep {
        eprintln!("objects kept in namespace {ns}, and the CRDs");
    } else {
        eprintln!("deleting the benchmark's objects, namespace {ns} and the CRDs …");
        for subject in &SUBJECTS {
            let url = format!(
                "{base}/{}/namespaces/{ns}/{}",
                subject.prefix, subject.collection
            );
            if let Err(e) = http.delete(&url, Duration::from_secs(600)).await {
                eprintln!("DELETE {url}: {e}");
            }
        }
        for (plural, _) in CUSTOM {
            let crd = format!(
                "{base}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{}",
                crd_name(plural)
            );
            if let Err(e) = http.delete(&crd, REQUEST_TIMEOUT).await {
                eprintln!("DELETE {crd}: {e}");
            }
        }
        fixtures::remove_namespace(&api, &ns, a.clients).await;
    }
    Ok(if complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
