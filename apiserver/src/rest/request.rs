//! What a REST request asks for: the resource its path names, its query parameters, the
//! representation it accepts, and its body, each parsed once with kube-apiserver's rules and
//! errors.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, header};
use serde_json::Value;
use skiff_proto::api::{FieldValidation, Kind};

use super::status::{ApiError, Reason};
use crate::cluster::list::ReadAt;

/// Largest request body kube-apiserver accepts (3 MiB), and so Skiff.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// The object or collection a path under `/api/v1/` or `/apis/<group>/<version>/` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub kind: Kind,
    /// The namespace in the path; empty for cluster-scoped kinds and for namespaced
    /// collections across every namespace (`/api/v1/pods`).
    pub namespace: String,
    /// Empty for a collection.
    pub name: String,
    /// `status`, `binding`, `eviction`, `log` ...
    pub subresource: Option<String>,
}

impl Target {
    /// Parses the path segments after the prefix of the group version `api_version` (`v1`
    /// under `/api/v1/`, `apps/v1` under `/apis/apps/v1/`): `pods`, `nodes/n1`,
    /// `nodes/n1/status`, `namespaces/ns1`, `namespaces/ns1/pods`,
    /// `namespaces/ns1/pods/web/status`. Only the kinds of that group version are found there.
    pub fn parse(api_version: &str, rest: &str) -> Result<Target, ApiError> {
        let segments: Vec<&str> = rest.trim_matches('/').split('/').collect();
        let unknown = || {
            let prefix = if api_version.contains('/') {
                "apis"
            } else {
                "api"
            };
            ApiError::new(
                Reason::NotFound,
                format!(
                    "the server could not find the requested resource (/{prefix}/{api_version}/{rest})"
                ),
            )
        };
        let served = |plural: &str| {
            Kind::all().find(|k| k.plural() == plural && k.api_version() == api_version)
        };
        let kind_of = |plural: &str| served(plural).ok_or_else(unknown);
        let namespaced_collection = segments.len() >= 3
            && segments[0] == "namespaces"
            && served(segments[2]).is_some_and(Kind::is_namespaced);
        let (kind, namespace, name, sub) = if namespaced_collection {
            let kind = kind_of(segments[2])?;
            match &segments[3..] {
                [] => (kind, segments[1], "", None),
                [name] => (kind, segments[1], *name, None),
                [name, sub] => (kind, segments[1], *name, Some(*sub)),
                _ => return Err(unknown()),
            }
        } else {
            let kind = kind_of(segments[0])?;
            match &segments[1..] {
                [] => (kind, "", "", None),
                [name] => (kind, "", *name, None),
                [name, sub] => (kind, "", *name, Some(*sub)),
                _ => return Err(unknown()),
            }
        };
        if namespace.is_empty() && !name.is_empty() && kind.is_namespaced() {
            return Err(unknown());
        }
        if segments.iter().any(|s| s.is_empty()) {
            return Err(unknown());
        }
        Ok(Target {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
            subresource: sub.map(str::to_string),
        })
    }

    pub fn is_collection(&self) -> bool {
        self.name.is_empty()
    }
}

/// The query parameters of kube-apiserver that Skiff honours; others are ignored, as
/// kube-apiserver ignores unknown ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params {
    pub watch: bool,
    pub label_selector: String,
    pub field_selector: String,
    pub limit: i64,
    pub continue_token: String,
    pub resource_version: String,
    pub resource_version_match: String,
    pub timeout_seconds: Option<u64>,
    pub allow_watch_bookmarks: bool,
    pub send_initial_events: Option<bool>,
    pub dry_run: bool,
    pub field_validation: Option<FieldValidation>,
    pub field_manager: String,
    pub grace_period_seconds: Option<i64>,
    pub propagation_policy: String,
    /// The deprecated `orphanDependents` of a delete: true is `propagationPolicy=Orphan`,
    /// false is Background.
    pub orphan_dependents: Option<bool>,
    pub include_object: String,
    pub force: bool,
    /// pods/log
    pub container: String,
    pub follow: bool,
    pub previous: bool,
    pub tail_lines: Option<i64>,
    pub timestamps: bool,
    pub since_seconds: Option<i64>,
    pub limit_bytes: Option<i64>,
    /// pods/exec and pods/attach (`stdout` and `stderr` default to true, as in
    /// `PodExecOptions`)
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: Option<bool>,
    pub stderr: Option<bool>,
    pub tty: bool,
    /// pods/portforward: the pod's ports, repeated or comma-separated (`PodPortForwardOptions`)
    pub ports: Vec<u16>,
}

fn boolean(name: &str, value: &str) -> Result<bool, ApiError> {
    match value {
        "true" | "1" | "True" | "TRUE" | "" => Ok(true),
        "false" | "0" | "False" | "FALSE" => Ok(false),
        _ => Err(ApiError::bad_request(format!(
            "{name}: invalid value {value:?}: expected true or false"
        ))),
    }
}

fn integer(name: &str, value: &str) -> Result<i64, ApiError> {
    value.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "{name}: invalid value {value:?}: expected an integer"
        ))
    })
}

impl Params {
    pub fn parse(query: Option<&str>) -> Result<Params, ApiError> {
        let mut p = Params::default();
        let Some(query) = query else { return Ok(p) };
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            let v = value.as_ref();
            match name.as_ref() {
                "watch" => p.watch = boolean("watch", v)?,
                "labelSelector" => p.label_selector = v.to_string(),
                "fieldSelector" => p.field_selector = v.to_string(),
                "limit" => p.limit = integer("limit", v)?,
                "continue" => p.continue_token = v.to_string(),
                "resourceVersion" => p.resource_version = v.to_string(),
                "resourceVersionMatch" => p.resource_version_match = v.to_string(),
                "timeoutSeconds" => {
                    p.timeout_seconds = Some(integer("timeoutSeconds", v)?.max(0) as u64)
                }
                "allowWatchBookmarks" => {
                    p.allow_watch_bookmarks = boolean("allowWatchBookmarks", v)?
                }
                "sendInitialEvents" => {
                    p.send_initial_events = Some(boolean("sendInitialEvents", v)?)
                }
                "dryRun" => match v {
                    "All" => p.dry_run = true,
                    "" => {}
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "dryRun: unsupported value {v:?}: supported values: \"All\""
                        )));
                    }
                },
                "fieldValidation" => {
                    p.field_validation = Some(FieldValidation::parse(v).ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "fieldValidation: invalid value {v:?}: expected Ignore, Warn or Strict"
                        ))
                    })?)
                }
                "fieldManager" => p.field_manager = v.to_string(),
                "gracePeriodSeconds" => {
                    p.grace_period_seconds = Some(integer("gracePeriodSeconds", v)?)
                }
                "propagationPolicy" => p.propagation_policy = v.to_string(),
                "orphanDependents" => p.orphan_dependents = Some(boolean("orphanDependents", v)?),
                "includeObject" => p.include_object = v.to_string(),
                "force" => p.force = boolean("force", v)?,
                "container" => p.container = v.to_string(),
                "follow" => p.follow = boolean("follow", v)?,
                "previous" => p.previous = boolean("previous", v)?,
                "tailLines" => p.tail_lines = Some(integer("tailLines", v)?),
                "timestamps" => p.timestamps = boolean("timestamps", v)?,
                "sinceSeconds" => p.since_seconds = Some(integer("sinceSeconds", v)?),
                "limitBytes" => p.limit_bytes = Some(integer("limitBytes", v)?),
                "command" => p.command.push(v.to_string()),
                "stdin" => p.stdin = boolean("stdin", v)?,
                "stdout" => p.stdout = Some(boolean("stdout", v)?),
                "stderr" => p.stderr = Some(boolean("stderr", v)?),
                "tty" => p.tty = boolean("tty", v)?,
                "ports" => {
                    for port in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                        let parsed = port.parse::<u16>().ok().filter(|p| *p > 0);
                        p.ports.push(parsed.ok_or_else(|| {
                            ApiError::bad_request(format!(
                                "ports: Invalid value: {port:?}: must be a port between 1 and 65535"
                            ))
                        })?);
                    }
                }
                _ => {}
            }
        }
        Ok(p)
    }

    /// Which state a list or get reads, from `resourceVersion` and `resourceVersionMatch`.
    pub fn read_at(&self) -> Result<ReadAt, ApiError> {
        let rv = match self.resource_version.as_str() {
            "" => {
                if !self.resource_version_match.is_empty() {
                    return Err(ApiError::bad_request(
                        "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden \
                         unless resourceVersion is provided",
                    ));
                }
                return Ok(ReadAt::Latest);
            }
            "0" if self.resource_version_match != "Exact" => return Ok(ReadAt::Any),
            rv => rv.parse::<i64>().map_err(|_| {
                ApiError::bad_request(format!("resourceVersion: invalid value {rv:?}"))
            })?,
        };
        match self.resource_version_match.as_str() {
            "" | "NotOlderThan" => Ok(ReadAt::NotOlderThan(rv)),
            "Exact" if rv > 0 => Ok(ReadAt::Exact(rv)),
            "Exact" => Err(ApiError::bad_request(
                "resourceVersionMatch: Forbidden: resourceVersionMatch \"Exact\" is forbidden \
                 for resourceVersion \"0\"",
            )),
            other => Err(ApiError::bad_request(format!(
                "resourceVersionMatch: Unsupported value: {other:?}: supported values: \
                 \"Exact\", \"NotOlderThan\""
            ))),
        }
    }
}

/// The representation a client accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    /// The object or list itself, as JSON.
    Json,
    /// A `meta.k8s.io/v1` Table (kubectl get).
    Table,
    /// `PartialObjectMetadata` / `PartialObjectMetadataList`: metadata only.
    Metadata,
}

impl Accept {
    /// The first media type of the `Accept` header that Skiff can produce. JSON is the answer
    /// to no header, `*/*` and `application/*`; protobuf alone is refused.
    pub fn negotiate(headers: &HeaderMap) -> Result<Accept, ApiError> {
        let Some(accept) = headers.get(header::ACCEPT) else {
            return Ok(Accept::Json);
        };
        let accept = accept
            .to_str()
            .map_err(|_| ApiError::new(Reason::NotAcceptable, "Accept: not ASCII"))?;
        if accept.trim().is_empty() {
            return Ok(Accept::Json);
        }
        for media in accept.split(',') {
            let mut parts = media.split(';').map(str::trim);
            let essence = parts.next().unwrap_or_default();
            if !matches!(essence, "application/json" | "application/*" | "*/*") {
                continue;
            }
            let mut as_ = "";
            let mut group = "";
            for p in parts {
                match p.split_once('=') {
                    Some(("as", v)) => as_ = v,
                    Some(("g", v)) => group = v,
                    _ => {}
                }
            }
            match (as_, group) {
                ("", _) => return Ok(Accept::Json),
                ("Table", "meta.k8s.io") => return Ok(Accept::Table),
                ("PartialObjectMetadata" | "PartialObjectMetadataList", "meta.k8s.io") => {
                    return Ok(Accept::Metadata);
                }
                _ => continue,
            }
        }
        Err(ApiError::new(
            Reason::NotAcceptable,
            format!(
                "only the following media types are accepted: application/json (asked for {accept})"
            ),
        ))
    }
}

/// How much of an oversized body is read and dropped before the 413 answer, so a client still
/// sending it reads the answer instead of a reset connection; past this the connection closes.
const DRAIN_LIMIT: usize = 4 * MAX_BODY;

/// Reads a request body of at most [`MAX_BODY`] bytes.
pub async fn read_body(body: Body) -> Result<Bytes, ApiError> {
    use http_body_util::BodyExt as _;
    let mut body = body;
    let mut buf = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total += data.len();
        if total > DRAIN_LIMIT {
            break;
        }
        if total <= MAX_BODY {
            buf.extend_from_slice(&data);
        }
    }
    if total > MAX_BODY {
        return Err(ApiError::new(
            Reason::RequestEntityTooLarge,
            format!("the request body is larger than {MAX_BODY} bytes"),
        ));
    }
    Ok(Bytes::from(buf))
}

/// The `Content-Type` of a request, without parameters.
pub fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// The body of a create or update as a JSON value: JSON, YAML, or the protobuf client-go's
/// typed clients send.
pub fn object_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let value: Value = match content_type(headers).as_str() {
        "" | "application/json" => serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the request body is not valid JSON: {e}"))
        })?,
        super::protobuf::MEDIA_TYPE => super::protobuf::to_json(body)?,
        "application/yaml" | "application/x-yaml" | "text/yaml" => serde_yaml_ng::from_slice(body)
            .map_err(|e| {
                ApiError::bad_request(format!("the request body is not valid YAML: {e}"))
            })?,
        other => {
            return Err(ApiError::new(
                Reason::UnsupportedMediaType,
                format!(
                    "the body of the request was in an unknown format - accepted media types \
                     include: application/json, application/yaml, \
                     application/vnd.kubernetes.protobuf (got {other})"
                ),
            ));
        }
    };
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(kind: Kind, ns: &str, name: &str, sub: Option<&str>) -> Target {
        Target {
            kind,
            namespace: ns.into(),
            name: name.into(),
            subresource: sub.map(Into::into),
        }
    }

    /// Every path form kube-apiserver serves under /api/v1 parses to its target; the
    /// namespace object and a namespaced collection are told apart.
    #[test]
    fn paths() {
        assert_eq!(
            Target::parse("v1", "pods").unwrap(),
            t(Kind::Pod, "", "", None)
        );
        assert_eq!(
            Target::parse("v1", "namespaces/a/pods").unwrap(),
            t(Kind::Pod, "a", "", None)
        );
        assert_eq!(
            Target::parse("v1", "namespaces/a/pods/web/status").unwrap(),
            t(Kind::Pod, "a", "web", Some("status"))
        );
        assert_eq!(
            Target::parse("v1", "namespaces/a").unwrap(),
            t(Kind::Namespace, "", "a", None)
        );
        assert_eq!(
            Target::parse("v1", "namespaces/a/status").unwrap(),
            t(Kind::Namespace, "", "a", Some("status"))
        );
        assert_eq!(
            Target::parse("v1", "nodes/n1/status").unwrap(),
            t(Kind::Node, "", "n1", Some("status"))
        );
        for bad in [
            "widgets",
            "pods/web",
            "namespaces/a/pods/web/status/x",
            "nodes//x",
        ] {
            let e = Target::parse("v1", bad).unwrap_err();
            assert_eq!(e.reason, Reason::NotFound, "{bad}");
        }
        assert_eq!(
            Target::parse("apps/v1", "namespaces/a/deployments/web/scale").unwrap(),
            t(Kind::Deployment, "a", "web", Some("scale"))
        );
        assert_eq!(
            Target::parse("apps/v1", "replicasets").unwrap(),
            t(Kind::ReplicaSet, "", "", None)
        );
        // Each kind is found only under its own group version.
        for (gv, path) in [
            ("v1", "namespaces/a/deployments/web"),
            ("apps/v1", "namespaces/a/pods"),
            ("apps/v1", "namespaces/a"),
        ] {
            let e = Target::parse(gv, path).unwrap_err();
            assert_eq!(e.reason, Reason::NotFound, "{gv} {path}");
        }
    }

    /// resourceVersion and resourceVersionMatch as kube-apiserver reads them for a list.
    #[test]
    fn resource_versions() {
        let p = |rv: &str, m: &str| Params {
            resource_version: rv.into(),
            resource_version_match: m.into(),
            ..Params::default()
        };
        assert_eq!(p("", "").read_at().unwrap(), ReadAt::Latest);
        assert_eq!(p("0", "").read_at().unwrap(), ReadAt::Any);
        assert_eq!(p("7", "").read_at().unwrap(), ReadAt::NotOlderThan(7));
        assert_eq!(p("7", "Exact").read_at().unwrap(), ReadAt::Exact(7));
        assert!(p("", "Exact").read_at().is_err());
        assert!(p("x", "").read_at().is_err());
    }

    /// kubectl's Accept header for `get` asks for a Table first.
    #[test]
    fn negotiation() {
        let mut h = HeaderMap::new();
        assert_eq!(Accept::negotiate(&h).unwrap(), Accept::Json);
        h.insert(
            header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
                .parse()
                .unwrap(),
        );
        assert_eq!(Accept::negotiate(&h).unwrap(), Accept::Table);
        h.insert(
            header::ACCEPT,
            "application/vnd.kubernetes.protobuf".parse().unwrap(),
        );
        assert_eq!(
            Accept::negotiate(&h).unwrap_err().reason,
            Reason::NotAcceptable
        );
        h.insert(
            header::ACCEPT,
            "application/vnd.kubernetes.protobuf, application/json"
                .parse()
                .unwrap(),
        );
        assert_eq!(Accept::negotiate(&h).unwrap(), Accept::Json);
    }

    #[test]
    fn params() {
        let p = Params::parse(Some(
            "watch=1&labelSelector=app%3Dweb&limit=5&dryRun=All&fieldValidation=Strict",
        ))
        .unwrap();
        assert!(p.watch && p.dry_run);
        assert_eq!(p.label_selector, "app=web");
        assert_eq!(p.limit, 5);
        assert_eq!(p.field_validation, Some(FieldValidation::Strict));
        assert!(Params::parse(Some("fieldValidation=Loose")).is_err());
        assert!(Params::parse(Some("limit=x")).is_err());
    }
}
