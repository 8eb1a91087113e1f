//! The audit log: one JSON line per request to the Kubernetes REST API, as kube-apiserver
//! writes its log (`audit.k8s.io/v1` `Event`s at stage `ResponseComplete`): who
//! (`user`, `sourceIPs`, `userAgent`), what (`verb`, `requestURI`, `objectRef`), the answer
//! (`responseStatus.code`, the `authorization.k8s.io/decision` annotation) and when
//! (`requestReceivedTimestamp`, `stageTimestamp`: the latency).
//!
//! How much of a request is written is the policy's (`--audit-policy-file`, kube-apiserver's
//! `audit.k8s.io/v1` `Policy`): the first rule that matches a request gives its level,
//! `None` (nothing), `Metadata`, `Request` (and the request's body) or `RequestResponse`
//! (and the response's, for answers that are not streams). A request no rule matches is not
//! written. Without a policy file every request is written at `Metadata`.
//!
//! Lines are written by a task of their own through a bounded queue: a request never waits
//! for the disk. When the queue is full the event is dropped and counted, and the count is
//! reported in the log.
//!
//! The file is rotated as kube-apiserver rotates its own (`--audit-log-maxsize`,
//! `--audit-log-maxbackup`, `--audit-log-maxage`): when the next line would take it past the
//! size, it is renamed with the time in its name (`audit-2026-11-28T16-40-05.123.log`, UTC)
//! and a new one is started; then the oldest of those beyond the count, and those older than
//! the age, are removed.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{Attributes, User};

/// How much of a request is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub enum Level {
    None,
    Metadata,
    Request,
    RequestResponse,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroupResources {
    #[serde(default)]
    group: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    resource_names: Vec<String>,
}

/// One rule of a policy: every list it gives must hold the request.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    level: Level,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResources>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
}

/// kube-apiserver's audit policy (`apiVersion: audit.k8s.io/v1`, `kind: Policy`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    rules: Vec<Rule>,
}

/// A policy file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not an audit policy: {why}", path.display())]
    Parse { path: PathBuf, why: String },
}

impl Policy {
    /// Every request at `Metadata`: the policy without a policy file.
    pub fn metadata_for_all() -> Policy {
        Policy {
            api_version: "audit.k8s.io/v1".into(),
            kind: "Policy".into(),
            rules: vec![Rule {
                level: Level::Metadata,
                users: vec![],
                user_groups: vec![],
                verbs: vec![],
                resources: vec![],
                namespaces: vec![],
                non_resource_urls: vec![],
            }],
        }
    }

    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_owned(),
            source,
        })?;
        Policy::parse(&text).map_err(|why| PolicyError::Parse {
            path: path.to_owned(),
            why,
        })
    }

    pub(crate) fn parse(text: &str) -> Result<Policy, String> {
        let p: Policy = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        if p.kind != "Policy" || !p.api_version.starts_with("audit.k8s.io/") {
            return Err(format!(
                "expected apiVersion audit.k8s.io/v1 and kind Policy, found {:?} {:?}",
                p.api_version, p.kind
            ));
        }
        Ok(p)
    }

    /// The level of `user` making the request: the first matching rule's, else `None`.
    pub fn level(&self, user: &User, attributes: &Attributes) -> Level {
        self.rules
            .iter()
            .find(|r| r.matches(user, attributes))
            .map_or(Level::None, |r| r.level)
    }
}

fn listed(list: &[String], value: &str) -> bool {
    list.is_empty() || list.iter().any(|v| v == value)
}

impl Rule {
    fn matches(&self, user: &User, attributes: &Attributes) -> bool {
        if !listed(&self.users, &user.name) {
            return false;
        }
        if !self.user_groups.is_empty() && !user.groups.iter().any(|g| self.user_groups.contains(g))
        {
            return false;
        }
        if !listed(&self.verbs, attributes.verb()) {
            return false;
        }
        match attributes {
            Attributes::Resource(r) => {
                if !self.non_resource_urls.is_empty() {
                    return false;
                }
                if !self.namespaces.is_empty() && !self.namespaces.contains(&r.namespace) {
                    return false;
                }
                let full = if r.subresource.is_empty() {
                    r.resource.clone()
                } else {
                    format!("{}/{}", r.resource, r.subresource)
                };
                self.resources.is_empty()
                    || self.resources.iter().any(|g| {
                        g.group == r.group
                            && (g.resources.is_empty()
                                || g.resources.iter().any(|x| *x == full || *x == r.resource))
                            && (g.resource_names.is_empty() || g.resource_names.contains(&r.name))
                    })
            }
            Attributes::NonResource(p) => {
                if !self.resources.is_empty() || !self.namespaces.is_empty() {
                    return false;
                }
                self.non_resource_urls.is_empty()
                    || self.non_resource_urls.iter().any(|u| {
                        *u == p.path
                            || u.strip_suffix('*')
                                .is_some_and(|prefix| p.path.starts_with(prefix))
                    })
            }
        }
    }
}

/// What one request's event says.
#[derive(Debug, Clone)]
pub struct Record {
    pub level: Level,
    pub id: String,
    pub uri: String,
    /// Who sent the request.
    pub user: User,
    /// Who it acted as, when it impersonated another user.
    pub impersonated: Option<User>,
    pub source_ip: Option<String>,
    pub user_agent: String,
    pub attributes: Attributes,
    /// `allow` or `forbid`; none when the request had no user (401).
    pub decision: Option<&'static str>,
    pub code: u16,
    pub received: DateTime<Utc>,
    pub done: DateTime<Utc>,
    /// The request's body (level `Request` and up) and the response's (`RequestResponse`).
    pub request_object: Option<Value>,
    pub response_object: Option<Value>,
}

impl Record {
    /// The `audit.k8s.io/v1` `Event`.
    pub fn event(&self) -> Value {
        let ts = |t: &DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Micros, true);
        let verb = self.attributes.verb();
        let mut e = json!({
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": self.level.as_str(),
            "auditID": self.id,
            "stage": "ResponseComplete",
            "requestURI": self.uri,
            "verb": verb,
            "user": {"username": self.user.name, "groups": self.user.groups},
            "sourceIPs": self.source_ip.iter().collect::<Vec<_>>(),
            "userAgent": self.user_agent,
            "responseStatus": {"metadata": {}, "code": self.code},
            "requestReceivedTimestamp": ts(&self.received),
            "stageTimestamp": ts(&self.done),
        });
        if !self.user.uid.is_empty() {
            e["user"]["uid"] = json!(self.user.uid);
        }
        if let Some(i) = &self.impersonated {
            e["impersonatedUser"] = json!({"username": i.name, "groups": i.groups});
        }
        if let Attributes::Resource(r) = &self.attributes {
            let mut o = serde_json::Map::new();
            let mut put = |k: &str, v: &str| {
                if !v.is_empty() {
                    o.insert(k.into(), json!(v));
                }
            };
            put("resource", &r.resource);
            put("namespace", &r.namespace);
            put("name", &r.name);
            put("apiGroup", &r.group);
            put("apiVersion", &r.version);
            put("subresource", &r.subresource);
            e["objectRef"] = Value::Object(o);
        }
        if let Some(d) = self.decision {
            e["annotations"] = json!({"authorization.k8s.io/decision": d});
        }
        if let Some(o) = &self.request_object {
            e["requestObject"] = o.clone();
        }
        if let Some(o) = &self.response_object {
            e["responseObject"] = o.clone();
        }
        e
    }
}

/// What a gRPC call's handler tells the audit log of it, once it knows: who, and what the
/// call asked (the client port writes the event when the call has ended). Shared between
/// the two through the request's extensions.
#[derive(Debug, Clone, Default)]
pub struct Slot(Arc<Mutex<Option<Asked>>>);

#[derive(Debug, Clone)]
pub struct Asked {
    pub user: User,
    pub attributes: Attributes,
    pub allowed: bool,
}

impl Slot {
    pub fn fill(&self, asked: Asked) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(asked);
    }

    pub fn take(&self) -> Option<Asked> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// The HTTP status kube-apiserver would answer where a gRPC call ended with `code` (the
/// audit event's `responseStatus.code`).
pub fn http_code(code: tonic::Code) -> u16 {
    use tonic::Code::*;
    match code {
        Ok => 200,
        InvalidArgument | OutOfRange | FailedPrecondition => 400,
        Unauthenticated => 401,
        PermissionDenied => 403,
        NotFound => 404,
        AlreadyExists | Aborted => 409,
        ResourceExhausted => 429,
        Cancelled => 499,
        Unimplemented => 501,
        Unavailable => 503,
        DeadlineExceeded => 504,
        Unknown | Internal | DataLoss => 500,
    }
}

/// Events waiting for the writer.
const QUEUE: usize = 8192;

/// The log a member writes its events to.
#[derive(Debug)]
pub struct AuditLog {
    pub policy: Policy,
    tx: mpsc::Sender<Vec<u8>>,
    dropped: AtomicU64,
}

impl AuditLog {
    /// Opens (appends to) `path`, readable by its owner only, rotated as `rotation` says, and
    /// starts its writer on the current runtime; the writer ends when the log is dropped.
    pub fn open(path: &Path, policy: Policy, rotation: Rotation) -> std::io::Result<AuditLog> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = LogFile::open(path, rotation)?;
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::task::spawn_blocking(move || write_lines(file, rx));
        Ok(AuditLog {
            policy,
            tx,
            dropped: AtomicU64::new(0),
        })
    }

    /// A fresh id for an event, in a UUID's shape.
    pub fn new_id() -> String {
        let b: [u8; 16] = rand::random();
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        )
    }

    /// Queues one event; a full queue drops it (counted, and said in the log).
    pub fn record(&self, record: &Record) {
        let mut line = serde_json::to_vec(&record.event())
            .expect("invariant: an audit event always encodes as JSON");
        line.push(b'\n');
        if self.tx.try_send(line).is_err() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(
                    dropped = n,
                    "audit events dropped: the audit log's writer is behind"
                );
            }
        }
    }
}

/// The writer: lines as they come, flushed whenever the queue runs dry.
fn write_lines(mut out: LogFile, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(line) = rx.blocking_recv() {
        let mut result = out.write_line(&line);
        while let Ok(more) = rx.try_recv() {
            result = result.and_then(|()| out.write_line(&more));
        }
        if let Err(e) = result.and_then(|()| out.flush()) {
            tracing::error!(error = %e, path = %out.path.display(), "writing the audit log");
        }
    }
}

/// When the audit log is rotated and how many rotated files are kept (kube-apiserver's
/// `--audit-log-maxsize`, `--audit-log-maxbackup`, `--audit-log-maxage`). Zero turns each
/// off, as there: the default never rotates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rotation {
    /// Bytes past which the file is rotated.
    pub max_bytes: u64,
    /// Rotated files kept, the newest.
    pub max_backups: usize,
    /// Rotated files older than this are removed.
    pub max_age: std::time::Duration,
}

/// How the time is written in a rotated file's name (lumberjack's, which kube-apiserver
/// uses): it sorts as the time does.
const ROTATED_TIME: &str = "%Y-%m-%dT%H-%M-%S%.3f";

/// The audit log's file, rotated as it grows.
struct LogFile {
    path: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
    /// Bytes in the file, flushed or not.
    size: u64,
    rotation: Rotation,
}

impl LogFile {
    fn open(path: &Path, rotation: Rotation) -> std::io::Result<LogFile> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        Ok(LogFile {
            size: file.metadata()?.len(),
            out: std::io::BufWriter::new(file),
            path: path.to_owned(),
            rotation,
        })
    }

    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        let len = line.len() as u64;
        if self.rotation.max_bytes > 0 && self.size > 0 && self.size + len > self.rotation.max_bytes
        {
            self.rotate(Utc::now())?;
        }
        self.out.write_all(line)?;
        self.size += len;
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    /// `audit.log` → `audit-<now>.log`, a new `audit.log`, and the rotated files pruned.
    fn rotate(&mut self, now: DateTime<Utc>) -> std::io::Result<()> {
        self.out.flush()?;
        let (stem, ext) = self.name_parts();
        let rotated = self
            .path
            .with_file_name(format!("{stem}-{}{ext}", now.format(ROTATED_TIME)));
        std::fs::rename(&self.path, rotated)?;
        *self = LogFile::open(&self.path, self.rotation)?;
        self.prune(now)
    }

    /// The file name's stem and its extension with the dot (`audit`, `.log`).
    fn name_parts(&self) -> (String, String) {
        let stem = self
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let ext = self
            .path
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()))
            .unwrap_or_default();
        (stem, ext)
    }

    /// Removes the rotated files beyond the count kept and those older than the age kept.
    fn prune(&self, now: DateTime<Utc>) -> std::io::Result<()> {
        let Rotation {
            max_backups,
            max_age,
            ..
        } = self.rotation;
        if max_backups == 0 && max_age.is_zero() {
            return Ok(());
        }
        let (stem, ext) = self.name_parts();
        let dir = match self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(d) => d.to_path_buf(),
            None => PathBuf::from("."),
        };
        let mut rotated: Vec<(DateTime<Utc>, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let at = name
                .strip_prefix(&format!("{stem}-"))
                .and_then(|rest| rest.strip_suffix(&ext))
                .and_then(|t| chrono::NaiveDateTime::parse_from_str(t, ROTATED_TIME).ok());
            if let Some(at) = at {
                rotated.push((at.and_utc(), entry.path()));
            }
        }
        rotated.sort_by_key(|r| std::cmp::Reverse(r.0));
        let too_old = chrono::Duration::from_std(max_age).unwrap_or(chrono::Duration::MAX);
        for (i, (at, path)) in rotated.iter().enumerate() {
            let beyond = max_backups > 0 && i >= max_backups;
            let old = !max_age.is_zero() && now - *at > too_old;
            if beyond || old {
                std::fs::remove_file(path)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> User {
        User::named(name, groups)
    }

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  users: ["system:kube-scheduler"]
  verbs: ["watch"]
- level: None
  nonResourceURLs: ["/healthz*", "/version"]
- level: RequestResponse
  resources:
  - group: ""
    resources: ["pods/exec"]
- level: Request
  userGroups: ["dev"]
  namespaces: ["team"]
- level: Metadata
"#;

    /// The first matching rule decides, as kube-apiserver's policy checker does.
    #[test]
    fn the_first_matching_rule_gives_the_level() {
        let p = Policy::parse(POLICY).expect("a policy");
        let pods = |verb: &str, ns: &str| Attributes::resource(verb, "", "pods", None, ns, "");
        let sched = user("system:kube-scheduler", &[]);
        assert_eq!(p.level(&sched, &pods("watch", "")), Level::None);
        assert_eq!(p.level(&sched, &pods("list", "")), Level::Metadata);
        let alice = user("alice", &["dev"]);
        assert_eq!(
            p.level(&alice, &Attributes::path("get", "/healthz/ping")),
            Level::None
        );
        assert_eq!(p.level(&alice, &pods("create", "team")), Level::Request);
        assert_eq!(p.level(&alice, &pods("create", "other")), Level::Metadata);
        let exec = Attributes::resource("create", "", "pods", Some("exec"), "team", "web");
        assert_eq!(p.level(&alice, &exec), Level::RequestResponse);
        assert!(Policy::parse("kind: Pod\n").is_err());
        let none = Policy::parse("apiVersion: audit.k8s.io/v1\nkind: Policy\n").expect("empty");
        assert_eq!(none.level(&alice, &pods("get", "team")), Level::None);
    }

    /// The event reads as kube-apiserver's.
    #[test]
    fn events_in_kube_apiservers_shape() {
        let at = DateTime::parse_from_rfc3339("2026-11-27T00:00:00Z")
            .expect("time")
            .with_timezone(&Utc);
        let r = Record {
            level: Level::Metadata,
            id: "id-1".into(),
            uri: "/api/v1/namespaces/team/pods/web".into(),
            user: user("alice", &["system:authenticated"]),
            impersonated: None,
            source_ip: Some("127.0.0.1".into()),
            user_agent: "kubectl/v1.33.1".into(),
            attributes: Attributes::resource("get", "", "pods", None, "team", "web"),
            decision: Some("forbid"),
            code: 403,
            received: at,
            done: at + chrono::Duration::microseconds(1500),
            request_object: None,
            response_object: None,
        };
        let e = r.event();
        assert_eq!(e["kind"], "Event");
        assert_eq!(e["stage"], "ResponseComplete");
        assert_eq!(
            e["objectRef"],
            json!({"resource": "pods", "namespace": "team", "name": "web"})
        );
        assert_eq!(e["responseStatus"]["code"], 403);
        assert_eq!(e["annotations"]["authorization.k8s.io/decision"], "forbid");
        assert_eq!(e["requestReceivedTimestamp"], "2026-11-27T00:00:00.000000Z");
        assert_eq!(e["stageTimestamp"], "2026-11-27T00:00:00.001500Z");
        assert_eq!(e["user"]["username"], "alice");
        assert!(e.get("requestObject").is_none());
    }

    /// The log is rotated when the next line would take it past the size, into a file named
    /// by the time; the newest rotated files are kept up to the count, and none older than
    /// the age.
    #[test]
    fn the_log_is_rotated_at_its_size_and_old_files_are_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.log");
        let rotation = Rotation {
            max_bytes: 100,
            max_backups: 2,
            max_age: std::time::Duration::from_secs(3600),
        };
        let line = [b'x'; 39];
        let mut log = LogFile::open(&path, rotation).expect("open");
        let at = |s: &str| {
            DateTime::parse_from_rfc3339(s)
                .expect("time")
                .with_timezone(&Utc)
        };
        // A rotated file from long ago, and a file that is not one.
        std::fs::write(dir.path().join("audit-2026-01-01T00-00-00.000.log"), "old").expect("w");
        std::fs::write(dir.path().join("audit-notes.log"), "mine").expect("w");
        for minute in 0..4 {
            log.write_line(&line).expect("write");
            log.write_line(&line).expect("write");
            log.rotate(at(&format!("2026-11-28T16:0{minute}:00.5Z")))
                .expect("rotate");
        }
        let names = || -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(dir.path())
                .expect("dir")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(
            names(),
            [
                "audit-2026-11-28T16-02-00.500.log",
                "audit-2026-11-28T16-03-00.500.log",
                "audit-notes.log",
                "audit.log"
            ]
        );
        // Rotation at the size: two lines fit in 100 bytes, a third does not (nothing pruned
        // now: the files above are of a fixed time).
        log.rotation.max_backups = 0;
        log.rotation.max_age = std::time::Duration::ZERO;
        for _ in 0..3 {
            log.write_line(&line).expect("write");
        }
        log.flush().expect("flush");
        assert_eq!(names().len(), 5, "{:?}", names());
        assert_eq!(
            std::fs::read(&path).expect("read").len(),
            39,
            "the third line"
        );
    }
}
