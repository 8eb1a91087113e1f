//! Manifests: Kubernetes YAML or JSON files (several documents separated by `---`, or a
//! `kind: List`) decoded into [`Object`]s, defaulted and validated.
//!
//! A manifest is all-or-nothing: [`decode`] returns every object or the full list of errors,
//! each naming the file, the document (1-based) and the field path, so a caller can refuse to
//! write anything when one document is wrong.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::api::schema::{self, SchemaError};
use crate::api::{Kind, Object, defaults, validation};

/// One decoded, defaulted and validated object with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub source: String,
    /// 1-based position of the document in its file.
    pub index: usize,
    pub object: Object,
}

/// Why one document of a manifest was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    pub source: String,
    pub index: usize,
    pub problem: Problem,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// Not YAML or JSON at all.
    Syntax(String),
    /// A field that cannot be decoded: wrong type, unknown field, bad quantity, missing field.
    Field {
        path: String,
        message: String,
    },
    MissingTypeMeta {
        missing: &'static str,
    },
    UnknownKind {
        api_version: String,
        kind: String,
    },
    WrongApiVersion {
        api_version: String,
        kind: Kind,
    },
    /// Decoded, but breaks validation rules.
    Invalid(validation::ValidationErrors),
    /// The file could not be read.
    Read(String),
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: document {}: ", self.source, self.index)?;
        if let Problem::Read(m) = &self.problem {
            return write!(f, "{}: {m}", self.source);
        }
        match &self.problem {
            Problem::Read(_) => unreachable!("handled above"),
            Problem::Syntax(m) => write!(f, "not valid YAML or JSON: {m}"),
            Problem::Field { path, message } if path.is_empty() || path == "." => {
                f.write_str(message)
            }
            Problem::Field { path, message } => write!(f, "{path}: {message}"),
            Problem::MissingTypeMeta { missing } => {
                write!(
                    f,
                    "{missing}: required value: every document needs apiVersion and kind"
                )
            }
            Problem::UnknownKind { api_version, kind } => {
                let known = Kind::all().map(Kind::name).collect::<Vec<_>>().join(", ");
                write!(
                    f,
                    "kind: unknown kind {kind:?} (apiVersion {api_version:?}): Skiff serves {known}"
                )
            }
            Problem::WrongApiVersion { api_version, kind } => write!(
                f,
                "apiVersion: unsupported value {api_version:?}: kind {kind} is served as apiVersion {:?}",
                kind.api_version()
            ),
            Problem::Invalid(errors) => {
                for (i, e) in errors.0.iter().enumerate() {
                    if i > 0 {
                        write!(f, "\n{}: document {}: ", self.source, self.index)?;
                    }
                    write!(f, "{e}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ManifestError {}

/// All the errors of a manifest (or of several files); never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestErrors(pub Vec<ManifestError>);

impl fmt::Display for ManifestErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ManifestErrors {}

impl ManifestErrors {
    /// How many errors are reported: every validation rule broken counts once.
    pub fn count(&self) -> usize {
        self.0
            .iter()
            .map(|e| {
                if let Problem::Invalid(v) = &e.problem {
                    v.0.len()
                } else {
                    1
                }
            })
            .sum()
    }
}

/// Decodes every document of `text` (read from `source`), applies defaults and validates.
pub fn decode(source: &str, text: &str) -> Result<Vec<Document>, ManifestErrors> {
    let mut docs = Vec::new();
    let mut errors = Vec::new();
    let err = |index, problem| ManifestError {
        source: source.to_owned(),
        index,
        problem,
    };

    // First pass: generic values, to read apiVersion and kind. Second pass: typed decoding from
    // the same documents, so that error messages keep their line and column.
    let mut values = Vec::new();
    for (i, de) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        match serde_yaml_ng::Value::deserialize(de) {
            Ok(v) => values.push(v),
            Err(e) => {
                errors.push(err(i + 1, Problem::Syntax(e.to_string())));
                // The parser cannot resynchronise after a syntax error.
                return Err(ManifestErrors(errors));
            }
        }
    }
    for ((i, de), value) in serde_yaml_ng::Deserializer::from_str(text)
        .enumerate()
        .zip(values)
    {
        let index = i + 1;
        if value.is_null() {
            continue; // an empty document, e.g. a trailing `---`
        }
        match type_meta(&value) {
            Err(problem) => errors.push(err(index, problem)),
            Ok(TypeMeta::List) => {
                let items = value
                    .get("items")
                    .and_then(|v| v.as_sequence())
                    .cloned()
                    .unwrap_or_default();
                for (j, item) in items.into_iter().enumerate() {
                    let prefix = format!("items[{j}]");
                    match type_meta(&item) {
                        Err(problem) => errors.push(err(index, prefix_problem(&prefix, problem))),
                        Ok(TypeMeta::List) => errors.push(err(
                            index,
                            Problem::Field {
                                path: prefix,
                                message: "a List may not contain another List".into(),
                            },
                        )),
                        Ok(TypeMeta::Object(kind)) => {
                            let unknown = schema_problems(kind, &item);
                            match decode_typed(kind, item) {
                                Ok(_) if !unknown.is_empty() => errors.extend(
                                    unknown
                                        .into_iter()
                                        .map(|p| err(index, prefix_problem(&prefix, p))),
                                ),
                                Ok(object) => finish(source, index, object, &mut docs, &mut errors),
                                Err(problem) => {
                                    errors.push(err(index, prefix_problem(&prefix, problem)))
                                }
                            }
                        }
                    }
                }
            }
            Ok(TypeMeta::Object(kind)) => match decode_typed(kind, de) {
                Ok(object) => {
                    let unknown = schema_problems(kind, &value);
                    if unknown.is_empty() {
                        finish(source, index, object, &mut docs, &mut errors);
                    } else {
                        errors.extend(unknown.into_iter().map(|p| err(index, p)));
                    }
                }
                Err(problem) => errors.push(err(index, problem)),
            },
        }
    }
    if errors.is_empty() {
        Ok(docs)
    } else {
        Err(ManifestErrors(errors))
    }
}

/// Reads and decodes manifests from files, directories (their `.yaml`, `.yml` and `.json` files,
/// recursively, in name order) and `-` for standard input. All-or-nothing across every source:
/// one bad document anywhere fails the whole load, and every error is reported.
pub fn load(paths: &[impl AsRef<Path>]) -> Result<Vec<Document>, ManifestErrors> {
    let mut sources = Vec::new();
    let mut errors = Vec::new();
    for p in paths {
        let p = p.as_ref();
        if p == Path::new("-") {
            let mut text = String::new();
            match std::io::stdin().read_to_string(&mut text) {
                Ok(_) => sources.push(("<stdin>".to_owned(), text)),
                Err(e) => errors.push(read_error("<stdin>", &e)),
            }
            continue;
        }
        let mut files = Vec::new();
        if let Err(e) = collect_files(p, &mut files) {
            errors.push(read_error(&p.display().to_string(), &e));
            continue;
        }
        if files.is_empty() {
            errors.push(ManifestError {
                source: p.display().to_string(),
                index: 0,
                problem: Problem::Read("no .yaml, .yml or .json files found".into()),
            });
        }
        for f in files {
            match std::fs::read_to_string(&f) {
                Ok(text) => sources.push((f.display().to_string(), text)),
                Err(e) => errors.push(read_error(&f.display().to_string(), &e)),
            }
        }
    }
    let mut docs = Vec::new();
    for (source, text) in &sources {
        match decode(source, text) {
            Ok(d) => docs.extend(d),
            Err(e) => errors.extend(e.0),
        }
    }
    if errors.is_empty() {
        Ok(docs)
    } else {
        Err(ManifestErrors(errors))
    }
}

fn read_error(source: &str, e: &std::io::Error) -> ManifestError {
    ManifestError {
        source: source.to_owned(),
        index: 0,
        problem: Problem::Read(format!("cannot read: {e}")),
    }
}

fn collect_files(p: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if !std::fs::metadata(p)?.is_dir() {
        out.push(p.to_owned());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(p)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for e in entries {
        if e.is_dir() {
            collect_files(&e, out)?;
        } else if matches!(
            e.extension().and_then(|x| x.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.push(e);
        }
    }
    Ok(())
}

/// Encodes objects as a multi-document YAML manifest that [`decode`] reads back.
pub fn encode_yaml<'a>(objects: impl IntoIterator<Item = &'a Object>) -> String {
    let mut out = String::new();
    for (i, o) in objects.into_iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&o.to_yaml());
    }
    out
}

enum TypeMeta {
    Object(Kind),
    List,
}

fn type_meta(value: &serde_yaml_ng::Value) -> Result<TypeMeta, Problem> {
    if !value.is_mapping() {
        return Err(Problem::Field {
            path: String::new(),
            message: "a document must be a mapping with apiVersion and kind".into(),
        });
    }
    let field = |name: &'static str| match value.get(name) {
        None => Err(Problem::MissingTypeMeta { missing: name }),
        Some(v) => v.as_str().map(str::to_owned).ok_or_else(|| Problem::Field {
            path: name.to_owned(),
            message: "invalid type: expected a string".into(),
        }),
    };
    let api_version = field("apiVersion")?;
    let kind = field("kind")?;
    if kind == "List" && api_version == "v1" {
        return Ok(TypeMeta::List);
    }
    match Kind::from_name(&kind) {
        None => Err(Problem::UnknownKind { api_version, kind }),
        Some(k) if api_version != k.api_version() => Err(Problem::WrongApiVersion {
            api_version,
            kind: k,
        }),
        Some(k) => Ok(TypeMeta::Object(k)),
    }
}

/// The fields of a document that Kubernetes' schema does not have (a typo, a field of another
/// kind), each at its path, or a value of the wrong type among the fields Skiff does not model.
/// A manifest is checked as a `Strict` write would be, so nothing is silently dropped.
fn schema_problems(kind: Kind, value: &serde_yaml_ng::Value) -> Vec<Problem> {
    let json = match serde_json::to_value(value) {
        Ok(json) => json,
        Err(e) => {
            return vec![Problem::Field {
                path: String::new(),
                message: e.to_string(),
            }];
        }
    };
    match schema::unknown_fields(kind, &json) {
        Ok(paths) => paths
            .into_iter()
            .map(|path| Problem::Field {
                path,
                message: "unknown field".into(),
            })
            .collect(),
        Err(SchemaError::Type { path, message }) => vec![Problem::Field { path, message }],
        Err(e @ SchemaError::Unknown { .. }) => vec![Problem::Field {
            path: String::new(),
            message: e.to_string(),
        }],
    }
}

fn decode_typed<'de, D: serde::Deserializer<'de>>(kind: Kind, de: D) -> Result<Object, Problem> {
    fn typed<'de, T: DeserializeOwned, D: serde::Deserializer<'de>>(de: D) -> Result<T, Problem> {
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let message = e.inner().to_string();
            field_problem(path, message)
        })
    }
    Ok(match kind {
        Kind::Pod => Object::Pod(typed(de)?),
        Kind::Node => Object::Node(typed(de)?),
        Kind::Namespace => Object::Namespace(typed(de)?),
        Kind::ResourceQuota => Object::ResourceQuota(typed(de)?),
        Kind::LimitRange => Object::LimitRange(typed(de)?),
        Kind::Binding => Object::Binding(typed(de)?),
        Kind::Event => Object::Event(typed(de)?),
        Kind::Deployment => Object::Deployment(typed(de)?),
        Kind::ReplicaSet => Object::ReplicaSet(typed(de)?),
        Kind::Role => Object::Role(typed(de)?),
        Kind::ClusterRole => Object::ClusterRole(typed(de)?),
        Kind::RoleBinding => Object::RoleBinding(typed(de)?),
        Kind::ClusterRoleBinding => Object::ClusterRoleBinding(typed(de)?),
        Kind::SubjectAccessReview => Object::SubjectAccessReview(typed(de)?),
        Kind::SelfSubjectAccessReview => Object::SelfSubjectAccessReview(typed(de)?),
        Kind::Secret => Object::Secret(typed(de)?),
        Kind::CertificateSigningRequest => Object::CertificateSigningRequest(typed(de)?),
        Kind::Service => Object::Service(typed(de)?),
        Kind::EndpointSlice => Object::EndpointSlice(typed(de)?),
        Kind::Generic(_) => {
            let value: serde_json::Value = typed(de)?;
            Object::from_value(kind, value)
                .map_err(|e| field_problem(e.path, e.source.to_string()))?
        }
    })
}

/// Normalises decoding errors from either deserializer into `path: message (line L, column C)`.
/// The YAML deserializer already prefixes its own path and appends the position; serde reports an
/// unknown field at its parent's path, so the field itself is appended: the path then points at
/// what to delete (`spec.volumes: unknown field, expected one of ...`).
fn field_problem(path: String, message: String) -> Problem {
    let mut path = if path == "." { String::new() } else { path };
    // The YAML deserializer's own prefix is the path, or its parent for an unknown field.
    let mut message = match message.split_once(": ") {
        Some((prefix, rest)) if !prefix.contains(' ') && path.starts_with(prefix) => {
            rest.to_owned()
        }
        _ => message,
    };
    if let Some((text, position)) = message.rsplit_once(" at line ")
        && let Some((line, column)) = position.split_once(" column ")
        && line.bytes().all(|b| b.is_ascii_digit())
        && column.bytes().all(|b| b.is_ascii_digit())
    {
        message = format!("{text} (line {line}, column {column})");
    }
    if let Some(rest) = message.strip_prefix("unknown field `")
        && let Some((name, tail)) = rest.split_once('`')
    {
        let already = path == name || path.ends_with(&format!(".{name}"));
        if !already {
            path = if path.is_empty() {
                name.to_owned()
            } else {
                format!("{path}.{name}")
            };
        }
        message = format!("unknown field{tail}");
    }
    Problem::Field { path, message }
}

fn prefix_problem(prefix: &str, problem: Problem) -> Problem {
    match problem {
        Problem::Field { path, message } if path.is_empty() => Problem::Field {
            path: prefix.to_owned(),
            message,
        },
        Problem::Field { path, message } => Problem::Field {
            path: format!("{prefix}.{path}"),
            message,
        },
        Problem::MissingTypeMeta { missing } => Problem::Field {
            path: format!("{prefix}.{missing}"),
            message: "required value: every item needs apiVersion and kind".into(),
        },
        other => other,
    }
}

fn finish(
    source: &str,
    index: usize,
    mut object: Object,
    docs: &mut Vec<Document>,
    errors: &mut Vec<ManifestError>,
) {
    defaults::apply(&mut object);
    match validation::validate(&object) {
        Ok(()) => docs.push(Document {
            source: source.to_owned(),
            index,
            object,
        }),
        Err(e) => errors.push(ManifestError {
            source: source.to_owned(),
            index,
            problem: Problem::Invalid(e),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_error(text: &str) -> String {
        let errs = decode("m.yaml", text).expect_err("should fail");
        assert_eq!(errs.0.len(), 1, "{errs}");
        errs.to_string()
    }

    #[test]
    fn decodes_several_documents() {
        let docs = decode(
            "m.yaml",
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: team}\nspec:\n  containers: [{name: c, image: 'localhost/skiff/busybox:1'}]\n---\n",
        )
        .unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1].index, 2);
        assert_eq!(docs[1].object.key(), "/registry/pods/team/web");
    }

    #[test]
    fn bad_quantity_names_its_field_path() {
        let e = one_error(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: i\n    resources:\n      limits: {cpu: abc}\n",
        );
        assert!(e.starts_with("m.yaml: document 1: spec.containers[0].resources.limits.cpu: invalid quantity \"abc\""), "{e}");
    }

    /// A value outside Kubernetes' fixed set is refused as the document decodes, at its path.
    #[test]
    fn unsupported_values_are_named() {
        let e = one_error(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  restartPolicy: Sometimes\n  containers: [{name: c, image: i}]\n",
        );
        assert!(
            e.starts_with(
                "m.yaml: document 1: spec.restartPolicy: unsupported value \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
            ),
            "{e}"
        );
        let e = one_error(
            "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec:\n  taints: [{key: k, effect: NoSchedul}]\n",
        );
        assert!(
            e.starts_with(
                "m.yaml: document 1: spec.taints[0].effect: unsupported value \"NoSchedul\""
            ),
            "{e}"
        );
    }

    /// A field Kubernetes' schema does not have is refused at its path, however deep.
    #[test]
    fn unknown_fields_are_named() {
        let e = one_error(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  volumez: []\n  containers: [{name: c, image: i}]\n",
        );
        assert_eq!(e, "m.yaml: document 1: spec.volumez: unknown field");
        let e = one_error(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: i, comand: [sh]}]\n",
        );
        assert_eq!(
            e,
            "m.yaml: document 1: spec.containers[0].comand: unknown field"
        );
    }

    /// What `kubectl run web --image=nginx --dry-run=client -o yaml` prints decodes, and every
    /// field Skiff does not act on comes back out unchanged.
    #[test]
    fn kubectl_generated_pod_round_trips() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  creationTimestamp: null\n  labels:\n    run: web\n  name: web\nspec:\n  containers:\n  - image: nginx\n    name: web\n    resources: {}\n    volumeMounts:\n    - {name: data, mountPath: /data}\n  dnsPolicy: ClusterFirst\n  restartPolicy: Always\n  volumes:\n  - {name: data, emptyDir: {}}\nstatus: {}\n";
        let docs = decode("m.yaml", text).expect("decodes");
        let json = docs[0].object.to_json_value();
        assert_eq!(json["spec"]["dnsPolicy"], "ClusterFirst");
        assert_eq!(
            json["spec"]["volumes"][0]["emptyDir"],
            serde_json::json!({})
        );
        assert_eq!(
            json["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
            "/data"
        );
    }

    #[test]
    fn unknown_kinds_and_versions() {
        let e = one_error("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: d}\n");
        assert!(
            e.contains(
                "kind: unknown kind \"Widget\" (apiVersion \"example.com/v1\"): Skiff serves Pod, Node"
            ),
            "{e}"
        );
        let e = one_error("apiVersion: v1\nkind: Deployment\nmetadata: {name: d}\n");
        assert!(
            e.contains(
                "apiVersion: unsupported value \"v1\": kind Deployment is served as apiVersion \"apps/v1\""
            ),
            "{e}"
        );
        let e = one_error("apiVersion: v2\nkind: Pod\nmetadata: {name: d}\n");
        assert!(
            e.contains(
                "apiVersion: unsupported value \"v2\": kind Pod is served as apiVersion \"v1\""
            ),
            "{e}"
        );
        let e = one_error("kind: Pod\nmetadata: {name: d}\n");
        assert!(e.contains("apiVersion: required value"), "{e}");
    }

    #[test]
    fn one_bad_document_fails_the_whole_manifest() {
        let errs = decode(
            "m.yaml",
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: ok}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: Not_OK}\n",
        )
        .unwrap_err();
        assert_eq!(errs.0.len(), 1);
        assert_eq!(errs.0[0].index, 2);
    }

    #[test]
    fn lists_are_unpacked() {
        let docs = decode(
            "l.json",
            r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}},{"apiVersion":"v1","kind":"Node","metadata":{"name":"n2"}}]}"#,
        )
        .unwrap();
        assert_eq!(docs.len(), 2);
        let e = one_error(
            r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","nmae":"x"}}]}"#,
        );
        assert!(e.contains("items[0].metadata.nmae: unknown field"), "{e}");
    }

    #[test]
    fn syntax_errors_say_so() {
        let e = one_error("apiVersion: v1\nkind: Pod\nmetadata: {name: p\n");
        assert!(
            e.starts_with("m.yaml: document 1: not valid YAML or JSON"),
            "{e}"
        );
    }
}
