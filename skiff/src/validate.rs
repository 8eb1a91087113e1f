//! `skiff validate -f FILE|DIR|-`: the offline half of `apply`. Nothing is ever written.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use skiff_proto::api::Object;
use skiff_proto::manifest::{self, Document};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Manifest file, directory (its .yaml/.yml/.json files, recursively) or `-` for stdin.
    /// May be given several times.
    #[arg(short = 'f', long = "filename", required = true, value_name = "PATH")]
    files: Vec<PathBuf>,

    /// What to print for valid manifests: a table, or the defaulted objects.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    output: Output,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    Table,
    Yaml,
    Json,
}

/// Loads and validates manifests; on errors prints every one with "nothing `outcome`"
/// and returns `None`. Shared by `validate` and `apply`.
pub fn load_or_report(files: &[PathBuf], outcome: &str) -> Option<Vec<Document>> {
    match manifest::load(files) {
        Ok(docs) => Some(docs),
        Err(errors) => {
            eprintln!("{errors}");
            let n = errors.count();
            eprintln!(
                "{n} error{}: nothing {outcome}",
                if n == 1 { "" } else { "s" }
            );
            None
        }
    }
}

pub fn run(args: &Args) -> Result<ExitCode> {
    let Some(docs) = load_or_report(&args.files, "would be created") else {
        return Ok(ExitCode::FAILURE);
    };
    let mut out = std::io::stdout().lock();
    match args.output {
        Output::Yaml => write!(
            out,
            "{}",
            manifest::encode_yaml(docs.iter().map(|d| &d.object))
        )?,
        Output::Json => {
            let items: Vec<_> = docs.iter().map(|d| d.object.to_json_value()).collect();
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
            writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
        }
        Output::Table => {
            print_table(&mut out, &docs)?;
            writeln!(
                out,
                "{} object{} valid; validate writes nothing",
                docs.len(),
                if docs.len() == 1 { "" } else { "s" }
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(out: &mut impl Write, docs: &[Document]) -> std::io::Result<()> {
    let rows: Vec<[String; 4]> = docs
        .iter()
        .map(|d| {
            let m = d.object.metadata();
            [
                format!("{}#{}", d.source, d.index),
                d.object.display_name(),
                m.namespace.clone(),
                summary(&d.object),
            ]
        })
        .collect();
    let header = ["SOURCE", "OBJECT", "NAMESPACE", "WOULD CREATE"];
    let mut width = header.map(str::len);
    for r in &rows {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.len());
        }
    }
    for r in std::iter::once(header.map(str::to_owned)).chain(rows) {
        writeln!(
            out,
            "{:w0$}   {:w1$}   {:w2$}   {}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = width[0],
            w1 = width[1],
            w2 = width[2]
        )?;
    }
    Ok(())
}

/// One line on what the object asks for.
fn summary(o: &Object) -> String {
    match o {
        Object::Pod(p) => {
            let mut parts = vec![format!(
                "{} container{}{}",
                p.spec.containers.len(),
                if p.spec.containers.len() == 1 {
                    ""
                } else {
                    "s"
                },
                match p.spec.init_containers.len() {
                    0 => String::new(),
                    n => format!(" + {n} init"),
                }
            )];
            let cpu = p.effective_request("cpu");
            let mem = p.effective_request("memory");
            if !cpu.is_zero() || !mem.is_zero() {
                parts.push(format!("requests cpu={cpu} memory={mem}"));
            }
            if !p.spec.node_selector.is_empty() || p.spec.affinity.is_some() {
                parts.push("placement constraints".into());
            }
            if !p.spec.tolerations.is_empty() {
                parts.push(format!("{} toleration(s)", p.spec.tolerations.len()));
            }
            if let Some(policy) = p.spec.restart_policy {
                parts.push(format!("restart {policy}"));
            }
            parts.join(", ")
        }
        Object::Node(n) => {
            let mut parts = Vec::new();
            if let Some(s) = &n.status {
                for r in ["cpu", "memory", "pods"] {
                    if let Some(q) = s.allocatable.get(r).or_else(|| s.capacity.get(r)) {
                        parts.push(format!("{r}={q}"));
                    }
                }
            }
            if !n.spec.taints.is_empty() {
                let taints: Vec<_> = n
                    .spec
                    .taints
                    .iter()
                    .map(|t| format!("{}:{}", t.key, t.effect))
                    .collect();
                parts.push(format!("taints {}", taints.join(",")));
            }
            if parts.is_empty() {
                "node".into()
            } else {
                parts.join(", ")
            }
        }
        Object::Namespace(_) => "namespace".into(),
        Object::ResourceQuota(q) => {
            let hard: Vec<_> = q
                .spec
                .hard
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!("hard {}", hard.join(" "))
        }
        Object::LimitRange(l) => format!("{} limit item(s)", l.spec.limits.len()),
        Object::Binding(b) => format!("bind to node {}", b.target.name),
        Object::Event(e) => format!(
            "{} {} on {}/{}",
            e.type_, e.reason, e.involved_object.kind, e.involved_object.name
        ),
        Object::Deployment(d) => format!(
            "{} replica(s) of {}, {}",
            d.replicas(),
            images(&d.spec.template.spec),
            d.strategy_type()
        ),
        Object::ReplicaSet(rs) => format!(
            "{} replica(s) of {}",
            rs.replicas(),
            images(&rs.spec.template.spec)
        ),
        Object::Role(r) => format!("{} rule(s)", r.rules.len()),
        Object::ClusterRole(r) => format!("{} rule(s)", r.rules.len()),
        Object::RoleBinding(b) => grant(&b.role_ref, &b.subjects),
        Object::ClusterRoleBinding(b) => grant(&b.role_ref, &b.subjects),
        Object::SubjectAccessReview(_) | Object::SelfSubjectAccessReview(_) => {
            "access review".into()
        }
        Object::Service(s) => format!(
            "{} service, {} port(s)",
            if s.spec.type_.is_empty() {
                "ClusterIP"
            } else {
                &s.spec.type_
            },
            s.spec.ports.len()
        ),
        Object::EndpointSlice(s) => format!("{} endpoint(s)", s.endpoints.len()),
        // What its table shows, but its age.
        Object::Generic(g, _) => {
            let served = o.to_json_value();
            let now = chrono::Utc::now();
            g.info()
                .columns
                .iter()
                .filter(|c| c.name != "Age" && c.priority == 0)
                .map(|c| {
                    let cell = (c.cell)(&served, now);
                    let text = cell
                        .as_str()
                        .map_or_else(|| cell.to_string(), str::to_owned);
                    format!("{}={text}", c.name.to_ascii_lowercase())
                })
                .collect::<Vec<_>>()
                .join(", ")
        }
        Object::CertificateSigningRequest(c) => format!(
            "certificate request to {}",
            if c.spec.signer_name.is_empty() {
                "no signer"
            } else {
                &c.spec.signer_name
            }
        ),
        Object::Secret(s) => format!(
            "{} key(s) of type {}",
            s.data.len() + s.string_data.len(),
            if s.type_.is_empty() {
                "Opaque"
            } else {
                &s.type_
            }
        ),
    }
}

/// `ClusterRole/view to User alice, Group dev`.
fn grant(
    role: &skiff_proto::api::rbac::RoleRef,
    subjects: &[skiff_proto::api::rbac::Subject],
) -> String {
    let to: Vec<_> = subjects
        .iter()
        .map(|s| format!("{} {}", s.kind, s.name))
        .collect();
    format!("{}/{} to {}", role.kind, role.name, to.join(", "))
}

/// The images of a pod template's containers, comma-separated.
fn images(spec: &skiff_proto::api::pod::PodSpec) -> String {
    let images: Vec<&str> = spec.containers.iter().map(|c| c.image.as_str()).collect();
    images.join(",")
}
