//! `skiff apply -f` and `skiff get`: manifests into the cluster, and what is there, as
//! kubectl shows it.
//!
//! `apply` validates every document first (the same checks as `skiff validate`) and writes
//! nothing if any is refused; then it creates each object, or replaces its spec when it
//! exists (keeping what the cluster owns: status, and a pod's binding).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use skiff_proto::api::{Kind, Object};
use skiff_proto::client::{ClusterClient, Code};
use skiff_proto::manifest;

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// Manifest file, directory (its .yaml/.yml/.json files, recursively) or `-` for stdin.
    #[arg(short = 'f', long = "filename", required = true, value_name = "PATH")]
    files: Vec<PathBuf>,
    /// Store members' client endpoints (host:port), comma-separated.
    #[arg(long, env = "SKIFF_ENDPOINTS", value_delimiter = ',', required = true)]
    endpoints: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// pods, nodes or namespaces (kubectl's short names work: po, no, ns).
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
    /// Store members' client endpoints (host:port), comma-separated.
    #[arg(long, env = "SKIFF_ENDPOINTS", value_delimiter = ',', required = true)]
    endpoints: Vec<String>,
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

pub fn apply(args: &ApplyArgs) -> Result<ExitCode> {
    let Some(docs) = crate::validate::load_or_report(&args.files, "was created") else {
        return Ok(ExitCode::FAILURE);
    };
    runtime()?.block_on(async {
        let api = ClusterClient::connect(&args.endpoints)?;
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
                }
                (Object::Node(n), Object::Node(c)) => n.status = c.status.clone(),
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
    let kind = Kind::from_cli(&args.kind).with_context(|| {
        format!(
            "unknown kind {:?}: try pods, nodes or namespaces",
            args.kind
        )
    })?;
    let ns = if args.all_namespaces || !kind.is_namespaced() {
        ""
    } else {
        args.namespace.as_str()
    };
    runtime()?.block_on(async {
        let api = ClusterClient::connect(&args.endpoints)?;
        let items = match &args.name {
            Some(name) => match api.get(kind, ns, name).await? {
                Some(o) => vec![o],
                None => {
                    eprintln!("Error: {} \"{name}\" not found", kind.plural());
                    return Ok(ExitCode::FAILURE);
                }
            },
            None => {
                api.list(kind, ns, &args.selector, &args.field_selector)
                    .await?
                    .0
            }
        };
        let mut out = std::io::stdout().lock();
        match args.output.as_deref() {
            Some("yaml") => write!(out, "{}", manifest::encode_yaml(items.iter()))?,
            Some("json") => {
                let items: Vec<_> = items.iter().map(|o| o.to_json_value()).collect();
                let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
                writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
            }
            Some("wide") | None => {
                let wide = args.output.is_some();
                table(&mut out, kind, &items, wide, args.all_namespaces)?;
            }
            Some(other) => anyhow::bail!("unknown output {other:?}: expected wide, yaml or json"),
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn age(o: &Object) -> String {
    let Some(t) = o.metadata().creation_timestamp else {
        return "<unknown>".into();
    };
    let s = (chrono::Utc::now() - t.datetime()).num_seconds().max(0);
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        7200..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

fn table(
    out: &mut impl Write,
    kind: Kind,
    items: &[Object],
    wide: bool,
    namespaces: bool,
) -> Result<()> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header: Vec<&str> = Vec::new();
    if namespaces && kind.is_namespaced() {
        header.push("NAMESPACE");
    }
    match kind {
        Kind::Pod => header.extend(["NAME", "READY", "STATUS", "RESTARTS", "AGE"]),
        Kind::Node => header.extend(["NAME", "STATUS", "AGE"]),
        _ => header.extend(["NAME", "AGE"]),
    }
    if wide && kind == Kind::Pod {
        header.extend(["IP", "NODE"]);
    }
    for o in items {
        let mut row = Vec::new();
        if namespaces && kind.is_namespaced() {
            row.push(o.metadata().namespace.clone());
        }
        row.push(o.metadata().name.clone());
        match o {
            Object::Pod(p) => {
                let status = p.status.clone().unwrap_or_default();
                let ready = status.container_statuses.iter().filter(|c| c.ready).count();
                let restarts: i32 = status
                    .container_statuses
                    .iter()
                    .map(|c| c.restart_count)
                    .sum();
                let waiting = status
                    .container_statuses
                    .iter()
                    .find_map(|c| c.state.as_ref()?.waiting.as_ref().map(|w| w.reason.clone()))
                    .filter(|r| !r.is_empty());
                // As kubectl: a finished pod shows its container's reason (Completed, Error).
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
                let phase = if p.metadata.deletion_timestamp.is_some() {
                    "Terminating".to_string()
                } else if let (Some(t), true) = (terminated, p.is_terminal()) {
                    t
                } else if let Some(w) = waiting {
                    w
                } else if status.phase.is_empty() {
                    "Pending".to_string()
                } else {
                    status.phase.clone()
                };
                row.push(format!("{ready}/{}", p.spec.containers.len()));
                row.push(phase);
                row.push(restarts.to_string());
                row.push(age(o));
                if wide {
                    row.push(if status.pod_ip.is_empty() {
                        "<none>".into()
                    } else {
                        status.pod_ip
                    });
                    row.push(if p.spec.node_name.is_empty() {
                        "<none>".into()
                    } else {
                        p.spec.node_name.clone()
                    });
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
            _ => row.push(age(o)),
        }
        rows.push(row);
    }
    if rows.is_empty() {
        writeln!(out, "No resources found.")?;
        return Ok(());
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("   ")
            .trim_end()
            .to_string()
    };
    writeln!(out, "{}", line(header.clone()))?;
    for r in &rows {
        writeln!(out, "{}", line(r.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}
