//! The store is an etcd: nothing in it knows Kubernetes, and its modules stand on floors.
//!
//! - Its dependency tree (`cargo tree`, normal dependencies) holds no Kubernetes crate, and
//!   `skiff-proto` comes without its `kubernetes` feature (the object model, the cluster API).
//! - No source file names Kubernetes' types or its key layout.
//! - Its top-level modules import each other without a circle: each can be read, tested and
//!   replaced with only the ones below it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Crates that are Kubernetes' and have no place under an etcd.
const KUBERNETES_CRATES: &[&str] = &["k8s-openapi", "k8s-pb", "kube", "json-patch", "schemars"];

/// What store code must not name: the API server's types, and its layout of the keyspace.
const KUBERNETES_NAMES: &[&str] = &[
    "skiff_proto::api",
    "skiff_proto::cluster",
    "skiff_proto::client",
    "skiff_apiserver",
    "k8s_openapi",
    "/registry/",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its comments (doc comments may name what the code does not).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("read source");
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_dependency_tree_holds_no_kubernetes_crate() {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--package",
            "skiff-store",
            "--edges",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p} {f}",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && tree.contains("skiff-proto"),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in tree.lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        assert!(
            !KUBERNETES_CRATES.contains(&name),
            "the store's dependency tree holds {line:?}: a Kubernetes crate under an etcd"
        );
        assert!(
            !(name == "skiff-proto" && line.contains("kubernetes")),
            "the store takes skiff-proto with its kubernetes feature: {line:?}"
        );
    }
}

#[test]
fn no_source_names_kubernetes() {
    let mut files = Vec::new();
    sources(&src(), &mut files);
    assert!(files.len() > 20, "found the sources in {}", src().display());
    for file in &files {
        let code = code(file);
        for name in KUBERNETES_NAMES {
            assert!(
                !code.contains(name),
                "{} names {name}: the store knows no Kubernetes",
                file.display()
            );
        }
    }
}

/// The top-level module a file belongs to (`member/forward.rs` → `member`); `None` for the
/// crate root.
fn module_of(file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src()).expect("under src");
    let first = rel.components().next()?.as_os_str().to_string_lossy();
    let name = first.trim_end_matches(".rs").to_string();
    (name != "lib").then_some(name)
}

#[test]
fn the_top_level_modules_form_no_circle() {
    let mut files = Vec::new();
    sources(&src(), &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(f)).collect();
    // module → the modules its code names (`crate::x`), tests left out: a test may reach
    // anywhere.
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(from) = module_of(file) else {
            continue;
        };
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let code = code(file);
        let code = code.split("#[cfg(test)]").next().unwrap_or_default();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            let to: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if to != from && modules.contains(&to) {
                uses.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    // Depth-first search for a back edge; the circle it closes is the failure.
    fn visit(
        m: &str,
        uses: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if done.contains(m) {
            return;
        }
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut circle = path[at..].to_vec();
            circle.push(m.to_string());
            panic!(
                "the store's modules import in a circle: {}",
                circle.join(" → ")
            );
        }
        path.push(m.to_string());
        for next in uses.get(m).into_iter().flatten() {
            visit(next, uses, path, done);
        }
        path.pop();
        done.insert(m.to_string());
    }
    let mut done = BTreeSet::new();
    for m in &modules {
        visit(m, &uses, &mut Vec::new(), &mut done);
    }
}
