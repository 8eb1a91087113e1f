//! The history of a test: every operation's invocation and completion, in the order the
//! harness observed them, stored as JSON Lines so a history can be checked again later, or
//! by another tool, without rerunning the test.
//!
//! ```text
//! {"index":0,"time":1200,"process":3,"type":"invoke","f":"write","value":{"key":"r/0","value":7},"node":"n1"}
//! {"index":1,"time":9100,"process":3,"type":"ok","f":"write","value":{"key":"r/0","value":7,"rev":12},"node":"n1"}
//! ```
//!
//! A process runs one operation at a time, so an invocation is paired with the next
//! completion of the same process. An `info` completion (or none at all) means the outcome is
//! unknown: the operation may take effect at any time after its invocation, or never. After
//! an `info` the harness retires the process and continues under a fresh process number, as
//! Jepsen does, so that pairing stays unambiguous.

use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// Errors reading or writing a history file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading or writing {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} line {line}: {source}")]
    Parse {
        path: String,
        line: usize,
        source: serde_json::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What an entry records: the start of an operation or how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpType {
    /// The operation was sent.
    Invoke,
    /// It took effect (and its result is in `value`).
    Ok,
    /// It certainly did not take effect.
    Fail,
    /// Unknown: it may have taken effect, now or later.
    Info,
}

/// Who performed an operation: a numbered client process or the nemesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Process {
    Client(u64),
    Nemesis,
}

impl Serialize for Process {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Process::Client(n) => s.serialize_u64(*n),
            Process::Nemesis => s.serialize_str("nemesis"),
        }
    }
}

impl<'de> Deserialize<'de> for Process {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Num(u64),
            Name(String),
        }
        match Repr::deserialize(d)? {
            Repr::Num(n) => Ok(Process::Client(n)),
            Repr::Name(s) if s == "nemesis" => Ok(Process::Nemesis),
            Repr::Name(s) => Err(serde::de::Error::custom(format!(
                "process {s:?}: expected a number or \"nemesis\""
            ))),
        }
    }
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Process::Client(n) => write!(f, "{n}"),
            Process::Nemesis => f.write_str("nemesis"),
        }
    }
}

/// The function an operation performs. One enum for every workload so that a history file is
/// self-describing; the shape of `value` depends on it (see each workload module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum F {
    /// Linearizable read of one key (register, lease) or of the whole set.
    Read,
    /// Unconditional put (register) or a batch of puts in one transaction (watch).
    Write,
    /// Compare-and-set on a key's version (register).
    Cas,
    /// Add a unique element to the set.
    Add,
    /// One watch session, from its start revision to disconnect; the completion carries every
    /// response received.
    Watch,
    /// Grant a lease and put a key under it.
    Grant,
    /// One keep-alive round trip of a lease.
    KeepAlive,
    /// Revoke a lease.
    Revoke,
    /// The nemesis begins a fault.
    Start,
    /// The nemesis heals a fault.
    Stop,
}

impl fmt::Display for F {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        f.write_str(&s)
    }
}

/// One history entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// Position in the history, from 0.
    pub index: u64,
    /// Nanoseconds since the test began (monotonic clock).
    pub time: u64,
    pub process: Process,
    #[serde(rename = "type")]
    pub kind: OpType,
    pub f: F,
    /// Arguments at invocation; arguments and results at completion.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub value: Value,
    /// The member the client talked to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Why an operation failed or is indeterminate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Op {
    /// The header revision a completed operation observed (`value.rev`), if it recorded one.
    pub fn rev(&self) -> Option<i64> {
        self.value.get("rev").and_then(Value::as_i64)
    }
}

/// An invocation with its completion, if one was recorded.
#[derive(Debug, Clone, Copy)]
pub struct Pair<'a> {
    pub invoke: &'a Op,
    pub completion: Option<&'a Op>,
}

impl Pair<'_> {
    /// How the operation ended; a missing completion is `info`.
    pub fn outcome(&self) -> OpType {
        self.completion.map_or(OpType::Info, |c| c.kind)
    }

    /// When it certainly ended: the completion time of an `ok` or `fail`, `None` for `info`
    /// (an indeterminate operation may still take effect at any later time).
    pub fn end(&self) -> Option<u64> {
        match self.completion {
            Some(c) if c.kind != OpType::Info => Some(c.time),
            _ => None,
        }
    }

    /// The completion's value if there is one, else the invocation's.
    pub fn value(&self) -> &Value {
        self.completion.map_or(&self.invoke.value, |c| &c.value)
    }

    /// One line for people: process, function, value, times (ms since start), outcome, node.
    pub fn describe(&self) -> String {
        let ms = |t: u64| t as f64 / 1e6;
        let end = self
            .completion
            .map_or("…".to_string(), |c| format!("{:.3}", ms(c.time)));
        format!(
            "p{} {} {} [{:.3}ms..{}ms] {:?}{}",
            self.invoke.process,
            self.invoke.f,
            self.value(),
            ms(self.invoke.time),
            end,
            self.outcome(),
            self.invoke
                .node
                .as_deref()
                .map_or(String::new(), |n| format!(" on {n}"))
        )
    }
}

/// A whole history.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    pub ops: Vec<Op>,
}

impl History {
    pub fn new(ops: Vec<Op>) -> Self {
        History { ops }
    }

    /// Invocations paired with their completions, in invocation order.
    pub fn pairs(&self) -> Vec<Pair<'_>> {
        let mut open: HashMap<Process, usize> = HashMap::new();
        let mut pairs: Vec<Pair<'_>> = Vec::new();
        for op in &self.ops {
            if op.kind == OpType::Invoke {
                open.insert(op.process, pairs.len());
                pairs.push(Pair {
                    invoke: op,
                    completion: None,
                });
            } else if let Some(i) = open.remove(&op.process) {
                pairs[i].completion = Some(op);
            }
        }
        pairs
    }

    /// Pairs of client operations with function `f`.
    pub fn client_pairs(&self, f: F) -> Vec<Pair<'_>> {
        self.pairs()
            .into_iter()
            .filter(|p| p.invoke.f == f && p.invoke.process != Process::Nemesis)
            .collect()
    }

    /// Nemesis fault windows: (start invocation time, stop completion time or end of
    /// history, description of the fault).
    pub fn fault_windows(&self) -> Vec<(u64, u64, String)> {
        let last = self.ops.last().map_or(0, |o| o.time);
        let mut windows = Vec::new();
        let mut open: Option<(u64, String)> = None;
        for op in self.ops.iter().filter(|o| o.process == Process::Nemesis) {
            match (op.f, op.kind) {
                (F::Start, OpType::Invoke) => {
                    let what = op
                        .value
                        .get("fault")
                        .and_then(Value::as_str)
                        .unwrap_or("fault")
                        .to_string();
                    open = Some((op.time, what));
                }
                (F::Stop, kind) if kind != OpType::Invoke => {
                    if let Some((t, what)) = open.take() {
                        windows.push((t, op.time, what));
                    }
                }
                _ => {}
            }
        }
        if let Some((t, what)) = open {
            windows.push((t, last, what));
        }
        windows
    }

    /// Counts of completions by type, and invocations left without one.
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for p in self.pairs() {
            if p.invoke.process == Process::Nemesis {
                continue;
            }
            match p.completion.map(|c| c.kind) {
                Some(OpType::Ok) => c.ok += 1,
                Some(OpType::Fail) => c.fail += 1,
                Some(OpType::Info) | None => c.info += 1,
                Some(OpType::Invoke) => {}
            }
        }
        c
    }

    pub fn write_jsonl(&self, path: &Path) -> Result<()> {
        let io = |source| Error::Io {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::File::create(path).map_err(io)?;
        let mut w = std::io::BufWriter::new(file);
        for op in &self.ops {
            let line = serde_json::to_string(op).map_err(|source| Error::Parse {
                path: path.display().to_string(),
                line: op.index as usize + 1,
                source,
            })?;
            writeln!(w, "{line}").map_err(io)?;
        }
        w.flush().map_err(io)
    }

    pub fn read_jsonl(path: &Path) -> Result<History> {
        let io = |source| Error::Io {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let mut ops = Vec::new();
        for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line = line.map_err(io)?;
            if line.trim().is_empty() {
                continue;
            }
            let op = serde_json::from_str(&line).map_err(|source| Error::Parse {
                path: path.display().to_string(),
                line: i + 1,
                source,
            })?;
            ops.push(op);
        }
        Ok(History { ops })
    }
}

/// Completions by type (client operations only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub ok: u64,
    pub fail: u64,
    pub info: u64,
}

/// Appends entries as a test runs. Shared by every client task; the lock is held only to
/// push one entry, never across an await.
#[derive(Debug)]
pub struct Recorder {
    start: Instant,
    ops: Mutex<Vec<Op>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    pub fn new() -> Self {
        Recorder {
            start: Instant::now(),
            ops: Mutex::new(Vec::new()),
        }
    }

    /// Nanoseconds since the recorder was created.
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Appends one entry stamped with the current time; returns its time.
    pub fn record(
        &self,
        process: Process,
        kind: OpType,
        f: F,
        value: Value,
        node: Option<&str>,
        error: Option<String>,
    ) -> u64 {
        let mut ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        // Stamp under the lock so that times are nondecreasing in index order.
        let time = self.now();
        let index = ops.len() as u64;
        ops.push(Op {
            index,
            time,
            process,
            kind,
            f,
            value,
            node: node.map(str::to_string),
            error,
        });
        time
    }

    pub fn invoke(&self, process: Process, f: F, value: Value, node: Option<&str>) -> u64 {
        self.record(process, OpType::Invoke, f, value, node, None)
    }

    /// A snapshot of the history so far.
    pub fn history(&self) -> History {
        History::new(self.ops.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }
}

/// Builds histories by hand for checker tests: `b.invoke(p, f, v)` then `b.ok(p, f, v)` etc.,
/// each entry one time unit after the previous.
#[derive(Debug, Default)]
pub struct Builder {
    ops: Vec<Op>,
}

impl Builder {
    pub fn new() -> Self {
        Self::default()
    }

    fn push(&mut self, process: u64, kind: OpType, f: F, value: Value) -> &mut Self {
        let index = self.ops.len() as u64;
        self.ops.push(Op {
            index,
            time: index,
            process: Process::Client(process),
            kind,
            f,
            value,
            node: None,
            error: None,
        });
        self
    }

    pub fn invoke(&mut self, process: u64, f: F, value: Value) -> &mut Self {
        self.push(process, OpType::Invoke, f, value)
    }

    pub fn ok(&mut self, process: u64, f: F, value: Value) -> &mut Self {
        self.push(process, OpType::Ok, f, value)
    }

    pub fn fail(&mut self, process: u64, f: F, value: Value) -> &mut Self {
        self.push(process, OpType::Fail, f, value)
    }

    pub fn info(&mut self, process: u64, f: F, value: Value) -> &mut Self {
        self.push(process, OpType::Info, f, value)
    }

    /// A nemesis fault window around the entries added between the two calls.
    pub fn nemesis(&mut self, f: F, fault: &str) -> &mut Self {
        for kind in [OpType::Invoke, OpType::Info] {
            let index = self.ops.len() as u64;
            self.ops.push(Op {
                index,
                time: index,
                process: Process::Nemesis,
                kind,
                f,
                value: serde_json::json!({ "fault": fault }),
                node: None,
                error: None,
            });
        }
        self
    }

    pub fn build(&self) -> History {
        History::new(self.ops.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn jsonl_round_trip_keeps_every_field() {
        let mut b = Builder::new();
        b.invoke(1, F::Write, json!({"key": "a", "value": 1})).ok(
            1,
            F::Write,
            json!({"key": "a", "value": 1, "rev": 5}),
        );
        let mut h = b.build();
        h.ops[0].node = Some("n1".into());
        h.ops[1].error = Some("none".into());
        h.ops.push(Op {
            index: 2,
            time: 9,
            process: Process::Nemesis,
            kind: OpType::Info,
            f: F::Start,
            value: json!({"fault": "kill"}),
            node: None,
            error: None,
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("h.jsonl");
        h.write_jsonl(&path).expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(
            text.lines()
                .next()
                .expect("line")
                .contains(r#""type":"invoke""#)
        );
        assert!(text.contains(r#""process":"nemesis""#));
        assert_eq!(History::read_jsonl(&path).expect("parse"), h);
    }

    #[test]
    fn pairs_match_invocations_to_the_same_process() {
        let mut b = Builder::new();
        b.invoke(1, F::Read, json!({}))
            .invoke(2, F::Write, json!({}))
            .info(2, F::Write, json!({}))
            .ok(1, F::Read, json!({"rev": 3}))
            .invoke(3, F::Cas, json!({}));
        let h = b.build();
        let pairs = h.pairs();
        assert_eq!(pairs.len(), 3);
        assert_eq!(pairs[0].outcome(), OpType::Ok);
        assert_eq!(pairs[0].end(), Some(3));
        assert_eq!(pairs[0].completion.and_then(Op::rev), Some(3));
        assert_eq!(pairs[1].outcome(), OpType::Info);
        assert_eq!(pairs[1].end(), None);
        assert!(pairs[2].completion.is_none());
        assert_eq!(
            h.counts(),
            Counts {
                ok: 1,
                fail: 0,
                info: 2
            }
        );
    }

    #[test]
    fn bad_process_names_are_refused() {
        let line = r#"{"index":0,"time":0,"process":"bob","type":"invoke","f":"read"}"#;
        assert!(serde_json::from_str::<Op>(line).is_err());
    }

    #[test]
    fn fault_windows_span_start_to_stop() {
        let mut b = Builder::new();
        b.nemesis(F::Start, "kill n1")
            .invoke(1, F::Read, json!({}))
            .nemesis(F::Stop, "kill n1");
        let w = b.build().fault_windows();
        assert_eq!(w, vec![(0, 4, "kill n1".to_string())]);
    }
}
