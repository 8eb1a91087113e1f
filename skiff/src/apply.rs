//! `skiff apply -f` and `skiff get [-w]`: manifests into the cluster, and what is there, as
//! kubectl shows it.
//!
//! `apply` validates every document first (the same checks as `skiff validate`) and writes
//! nothing if any is refused; then it creates each object, or replaces its spec when it
//! exists (keeping what the cluster owns: status, and a pod's binding).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use futures::StreamExt;
use skiff_proto::api::{Kind, LabelSelector, Object, Pod, PodPhase, PodTemplateSpec, Time};
use skiff_proto::client::{ClusterClient, Code, Event, ListParams, WatchParams};
use skiff_proto::manifest;
use skiff_proto::selector::LabelQuery;

use crate::config::Endpoints;

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// Manifest file, directory (its .yaml/.yml/.json files, recursively) or `-` for stdin.
    #[arg(short = 'f', long = "filename", required = true, value_name = "PATH")]
    files: Vec<PathBuf>,
    #[command(flatten)]
    endpoints: Endpoints,
}

#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// pods, nodes, namespaces, events, resourcequotas or limitranges (kubectl's short names
    /// work: po, no, ns, ev, quota, limits).
    kind: String,
    /// One object by name.
    name: Option<String>,
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
    /// Every namespace.
    #[arg(short = 'A', long)]
    all_namespaces: bool,
    /// Label selector, e.g. `app=web,tier!=db`.
    #[arg(short = 'l', long, default_value = "")]
    selector: String,
    /// Field selector, e.g. `spec.nodeName=node-1`.
    #[arg(long, default_value = "")]
    field_selector: String,
    /// `wide`, `yaml` or `json`.
    #[arg(short = 'o', long)]
    output: Option<String>,
    /// After listing, watch for changes and print each changed object as a row (Ctrl-C
    /// stops).
    #[arg(short = 'w', long)]
    watch: bool,
    #[command(flatten)]
    endpoints: Endpoints,
}

pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

pub fn apply(args: &ApplyArgs) -> Result<ExitCode> {
    let Some(docs) = crate::validate::load_or_report(&args.files, "was created") else {
        return Ok(ExitCode::FAILURE);
    };
    let store = args.endpoints.resolve()?;
    runtime()?.block_on(async {
        let api = store.connect()?;
        let mut failed = 0;
        for d in docs {
            let name = d.object.display_name();
            match apply_one(&api, d.object).await {
                Ok(verb) => println!("{name} {verb}"),
                Err(e) => {
                    failed += 1;
                    eprintln!("{}: document {}: {name}: {e}", d.source, d.index);
                }
            }
        }
        Ok(if failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    })
}

async fn apply_one(api: &ClusterClient, object: Object) -> Result<&'static str> {
    match api.create(&object).await {
        Ok(_) => Ok("created"),
        Err(e) if e.code() == Some(Code::AlreadyExists) => {
            let meta = object.metadata();
            let current = api
                .get(object.kind(), &meta.namespace, &meta.name)
                .await?
                .context("deleted while being applied")?;
            let mut next = object.clone();
            next.metadata_mut().resource_version = current.metadata().resource_version.clone();
            match (&mut next, &current) {
                (Object::Pod(n), Object::Pod(c)) => {
                    n.spec.node_name = c.spec.node_name.clone();
                    n.status = c.status.clone();
                    n.spec.keep_service_account(&c.spec);
                    n.spec.keep_priority(&c.spec);
                    // What admission added (DefaultTolerationSeconds' tolerations) stays: a
                    // pod's tolerations may only grow.
                    for t in &c.spec.tolerations {
                        if !n.spec.tolerations.contains(t) {
                            n.spec.tolerations.push(t.clone());
                        }
                    }
                }
                (Object::Node(n), Object::Node(c)) => {
                    n.status = c.status.clone();
                    n.spec.keep_pod_cidr(&c.spec);
                }
                // A workload's status, and the notes its controller keeps on it (revisions),
                // are the controller's.
                (Object::Deployment(n), Object::Deployment(c)) => {
                    n.status = c.status.clone();
                    keep_controller_notes(&mut n.metadata, &c.metadata);
                }
                (Object::ReplicaSet(n), Object::ReplicaSet(c)) => {
                    n.status = c.status.clone();
                    keep_controller_notes(&mut n.metadata, &c.metadata);
                }
                _ => {}
            }
            if strip(&next) == strip(&current) {
                return Ok("unchanged");
            }
            api.update(&next).await?;
            Ok("configured")
        }
        Err(e) => Err(e.into()),
    }
}

/// Keeps the Deployment controller's annotations (`deployment.kubernetes.io/…`) that the
/// manifest does not set.
fn keep_controller_notes(
    next: &mut skiff_proto::api::ObjectMeta,
    current: &skiff_proto::api::ObjectMeta,
) {
    for (k, v) in &current.annotations {
        if k.starts_with("deployment.kubernetes.io/") {
            next.annotations
                .entry(k.clone())
                .or_insert_with(|| v.clone());
        }
    }
}

/// An object without what the server sets, for "unchanged" comparisons.
fn strip(o: &Object) -> serde_json::Value {
    let mut o = o.clone();
    let m = o.metadata_mut();
    m.resource_version.clear();
    m.uid.clear();
    m.creation_timestamp = None;
    m.generation = None;
    o.to_json_value()
}

pub fn get(args: &GetArgs) -> Result<ExitCode> {
    let kind = Kind::from_cli(&args.kind)
        .filter(|k| k.is_stored())
        .with_context(|| {
            format!(
                "unknown kind {:?}: try pods, nodes, namespaces, events, resourcequotas, \
                 limitranges, deployments or replicasets",
                args.kind
            )
        })?;
    let ns = if args.all_namespaces || !kind.is_namespaced() {
        ""
    } else {
        args.namespace.as_str()
    };
    let store = args.endpoints.resolve()?;
    let fields = match &args.name {
        // A watch of one object follows its name.
        Some(name) if args.watch => {
            let by_name = format!("metadata.name={name}");
            if args.field_selector.is_empty() {
                by_name
            } else {
                format!("{},{by_name}", args.field_selector)
            }
        }
        _ => args.field_selector.clone(),
    };
    runtime()?.block_on(async {
        let api = store.connect()?;
        let (items, revision) = match &args.name {
            Some(name) if !args.watch => match api.get(kind, ns, name).await? {
                Some(o) => (vec![o], 0),
                None => {
                    eprintln!("Error: {} \"{name}\" not found", kind.plural());
                    return Ok(ExitCode::FAILURE);
                }
            },
            _ => {
                api.list(
                    kind,
                    &ListParams::default()
                        .namespace(ns)
                        .labels(&args.selector)
                        .fields(&fields),
                )
                .await?
            }
        };
        let mut items = items;
        if kind == Kind::Event {
            // Oldest first, as kubectl sorts events by time.
            items.sort_by_key(|o| match o {
                Object::Event(e) => e.last_seen(),
                _ => None,
            });
        }
        let mut out = std::io::stdout().lock();
        let wide = match args.output.as_deref() {
            Some("yaml") => {
                write!(out, "{}", manifest::encode_yaml(items.iter()))?;
                None
            }
            Some("json") => {
                let items: Vec<_> = items.iter().map(|o| o.to_json_value()).collect();
                let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
                writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
                None
            }
            Some("wide") => Some(true),
            None => Some(false),
            Some(other) => anyhow::bail!("unknown output {other:?}: expected wide, yaml or json"),
        };
        let mut table = Table::new(kind, wide.unwrap_or(false), args.all_namespaces);
        if wide.is_some() {
            let rows: Vec<_> = items.iter().map(|o| table.row(o)).collect();
            if rows.is_empty() && !args.watch {
                writeln!(out, "No resources found.")?;
            } else {
                table.print(&mut out, &rows, true)?;
            }
        }
        out.flush()?;
        if !args.watch {
            return Ok(ExitCode::SUCCESS);
        }
        drop(out);
        let mut stream = std::pin::pin!(
            api.watch(
                kind,
                &WatchParams::default()
                    .namespace(ns)
                    .labels(&args.selector)
                    .fields(&fields)
                    .resource_version(revision)
            )
            .await?
        );
        while let Some(event) = stream.next().await {
            let object = match event? {
                Event::Added(o) | Event::Modified(o) | Event::Deleted(o) => o,
                Event::Bookmark(_) => continue,
            };
            let mut out = std::io::stdout().lock();
            match args.output.as_deref() {
                Some("yaml") => write!(out, "---\n{}", object.to_yaml())?,
                Some("json") => writeln!(
                    out,
                    "{}",
                    serde_json::to_string_pretty(&object.to_json_value())?
                )?,
                _ => {
                    // The header went out with the list above.
                    let row = table.row(&object);
                    table.print(&mut out, &[row], false)?;
                }
            }
            out.flush()?;
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn age(o: &Object) -> String {
    o.metadata()
        .creation_timestamp
        .map_or_else(|| "<unknown>".into(), since)
}

/// How long ago `t` was, as kubectl prints ages: `42s`, `5m`, `3h`, `2d`.
pub fn since(t: Time) -> String {
    let s = (chrono::Utc::now() - t.datetime()).num_seconds().max(0);
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        7200..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// kubectl's table for one kind. Column widths grow to fit and are kept, so the rows a
/// watch adds line up with the ones above them.
pub struct Table {
    kind: Kind,
    wide: bool,
    namespaces: bool,
    widths: Vec<usize>,
}

impl Table {
    pub fn new(kind: Kind, wide: bool, namespaces: bool) -> Table {
        let mut t = Table {
            kind,
            wide,
            namespaces: namespaces && kind.is_namespaced(),
            widths: Vec::new(),
        };
        t.widths = t.header().iter().map(|h| h.len()).collect();
        t
    }

    fn header(&self) -> Vec<&'static str> {
        let mut header = Vec::new();
        if self.namespaces {
            header.push("NAMESPACE");
        }
        match self.kind {
            Kind::Pod => header.extend(["NAME", "READY", "STATUS", "RESTARTS", "AGE"]),
            Kind::Node => header.extend(["NAME", "STATUS", "AGE"]),
            Kind::Event => header.extend(["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]),
            Kind::Deployment => header.extend(["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]),
            Kind::ReplicaSet => header.extend(["NAME", "DESIRED", "CURRENT", "READY", "AGE"]),
            _ => header.extend(["NAME", "AGE"]),
        }
        if self.wide && self.kind == Kind::Pod {
            header.extend(["IP", "NODE"]);
        }
        if self.wide && matches!(self.kind, Kind::Deployment | Kind::ReplicaSet) {
            header.extend(["CONTAINERS", "IMAGES", "SELECTOR"]);
        }
        if self.wide && self.kind == Kind::Event {
            header.extend(["SOURCE", "COUNT", "NAME"]);
        }
        header
    }

    /// The cells of one object.
    pub fn row(&self, o: &Object) -> Vec<String> {
        let mut row = Vec::new();
        if self.namespaces {
            row.push(o.metadata().namespace.clone());
        }
        if self.kind != Kind::Event {
            row.push(o.metadata().name.clone());
        }
        match o {
            Object::Pod(p) => {
                let status = p.status.clone().unwrap_or_default();
                let ready = status.container_statuses.iter().filter(|c| c.ready).count();
                let restarts: i32 = status
                    .container_statuses
                    .iter()
                    .map(|c| c.restart_count)
                    .sum();
                row.push(format!("{ready}/{}", p.spec.containers.len()));
                row.push(pod_status(p));
                row.push(restarts.to_string());
                row.push(age(o));
                if self.wide {
                    row.push(none_if_empty(&status.pod_ip));
                    row.push(none_if_empty(&p.spec.node_name));
                }
            }
            Object::Node(n) => {
                let mut s = if n.is_ready() { "Ready" } else { "NotReady" }.to_string();
                if n.spec.unschedulable == Some(true) {
                    s.push_str(",SchedulingDisabled");
                }
                row.push(s);
                row.push(age(o));
            }
            Object::Event(e) => {
                row.push(e.last_seen().map_or_else(|| "<unknown>".into(), since));
                row.push(e.type_.clone());
                row.push(e.reason.clone());
                row.push(format!(
                    "{}/{}",
                    e.involved_object.kind.to_ascii_lowercase(),
                    e.involved_object.name
                ));
                row.push(e.message.clone());
                if self.wide {
                    row.push(e.from());
                    row.push(e.count.unwrap_or(1).to_string());
                    row.push(e.metadata.name.clone());
                }
            }
            Object::Deployment(d) => {
                let status = d.status.clone().unwrap_or_default();
                row.push(format!("{}/{}", status.ready_replicas, d.replicas()));
                row.push(status.updated_replicas.to_string());
                row.push(status.available_replicas.to_string());
                row.push(age(o));
                if self.wide {
                    row.extend(workload_wide_cells(&d.spec.template, &d.spec.selector));
                }
            }
            Object::ReplicaSet(rs) => {
                let status = rs.status.clone().unwrap_or_default();
                row.push(rs.replicas().to_string());
                row.push(status.replicas.to_string());
                row.push(status.ready_replicas.to_string());
                row.push(age(o));
                if self.wide {
                    row.extend(workload_wide_cells(&rs.spec.template, &rs.spec.selector));
                }
            }
            _ => row.push(age(o)),
        }
        row
    }

    /// Prints `rows` (and the header first when asked), widening columns to fit.
    pub fn print(
        &mut self,
        out: &mut impl Write,
        rows: &[Vec<String>],
        header: bool,
    ) -> Result<()> {
        for r in rows {
            for (w, c) in self.widths.iter_mut().zip(r) {
                *w = (*w).max(c.len());
            }
        }
        let last = self.widths.len().saturating_sub(1);
        let line = |cells: &[&str], widths: &[usize]| {
            cells
                .iter()
                .zip(widths)
                .enumerate()
                .map(|(i, (c, w))| {
                    if i == last {
                        (*c).to_string()
                    } else {
                        format!("{c:<w$}")
                    }
                })
                .collect::<Vec<_>>()
                .join("   ")
                .trim_end()
                .to_string()
        };
        if header {
            writeln!(out, "{}", line(&self.header(), &self.widths))?;
        }
        for r in rows {
            let cells: Vec<&str> = r.iter().map(String::as_str).collect();
            writeln!(out, "{}", line(&cells, &self.widths))?;
        }
        Ok(())
    }
}

/// A workload's CONTAINERS, IMAGES and SELECTOR cells: the template's container names and
/// images joined with commas, the selector in the label selector syntax.
fn workload_wide_cells(template: &PodTemplateSpec, selector: &LabelSelector) -> [String; 3] {
    let names: Vec<&str> = template
        .spec
        .containers
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    let images: Vec<&str> = template
        .spec
        .containers
        .iter()
        .map(|c| c.image.as_str())
        .collect();
    [names.join(","), images.join(","), selector_text(selector)]
}

/// A label selector as kubectl prints it (`app=web,tier in (a,b)`), `<invalid>` when it does
/// not convert.
pub fn selector_text(selector: &LabelSelector) -> String {
    LabelQuery::try_from(selector).map_or_else(|_| "<invalid>".into(), |q| q.to_string())
}

fn none_if_empty(s: &str) -> String {
    if s.is_empty() {
        "<none>".into()
    } else {
        s.to_string()
    }
}

/// kubectl's STATUS column: Terminating, a finished pod's reason (Completed, Error), a
/// waiting container's reason (ContainerCreating, CrashLoopBackOff), else the phase.
pub fn pod_status(p: &Pod) -> String {
    let status = p.status.clone().unwrap_or_default();
    let waiting = status
        .container_statuses
        .iter()
        .find_map(|c| c.state.as_ref()?.waiting.as_ref().map(|w| w.reason.clone()))
        .filter(|r| !r.is_empty());
    let terminated = status
        .container_statuses
        .iter()
        .find_map(|c| {
            c.state
                .as_ref()?
                .terminated
                .as_ref()
                .map(|t| t.reason.clone())
        })
        .filter(|r| !r.is_empty());
    if p.metadata.deletion_timestamp.is_some() {
        "Terminating".to_string()
    } else if let (Some(t), true) = (terminated, p.is_terminal()) {
        t
    } else if let Some(w) = waiting {
        w
    } else {
        status.phase.unwrap_or(PodPhase::Pending).to_string()
    }
}
