//! Logging: tracing to stderr, as text or JSON, through the `--log` filter.
//!
//! openraft 0.9 logs at ERROR what a cluster meets in its normal life: one RPC to one peer
//! that timed out or failed (a member killed or restarting, or a heartbeat round on a loaded
//! machine that took longer than the heartbeat interval), and a membership change it refused
//! because this member no longer leads or another change is under way (the refusal also goes
//! back to the caller, which retries or answers the client). A quorum carries on meanwhile,
//! so nothing is wrong with the cluster, and etcd logs the same at WARN. Those events (and
//! only those: openraft's storage and fatal errors stay ERROR) are written at WARN, with
//! their fields and the module they came from. ERROR in a member's log means something needs
//! a person.

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Filter, Layer, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

/// openraft's everyday events at ERROR: (module, message).
const EVERYDAY_ERRORS: &[(&str, &str)] = &[
    // A heartbeat round of a linearizable read: one follower did not answer in time.
    (
        "openraft::core::raft_core",
        "timeout while confirming leadership for read request",
    ),
    // A vote request that timed out or failed.
    ("openraft::core::raft_core", "timeout"),
    ("openraft::core::raft_core", "while requesting vote"),
    // AppendEntries or a snapshot to one follower: timed out, unreachable, or the network.
    ("openraft::replication", "RPCError"),
];

/// openraft's everyday events at ERROR whose message goes on with the error: (module, the
/// message's start).
const EVERYDAY_ERROR_STARTS: &[(&str, &str)] = &[
    // A membership change refused at its first or second step: this member stepped down
    // between deciding to make it and making it (a leadership transfer, an election), or
    // another change is still under way. `change_membership` returns the refusal too.
    (
        "openraft::raft::impl_raft_blocking_write",
        "the first step error: ",
    ),
    (
        "openraft::raft::impl_raft_blocking_write",
        "the second step error: ",
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The log filter in force: `--log` (or `SKIFF_LOG`), else `RUST_LOG`, else the default.
pub fn filter(flag: Option<&str>, rust_log: Option<&str>) -> anyhow::Result<EnvFilter> {
    let (text, from) = match (flag, rust_log) {
        (Some(f), _) => (f, "--log"),
        (None, Some(r)) if !r.trim().is_empty() => (r, "RUST_LOG"),
        _ => ("warn,openraft=error", "the default"),
    };
    EnvFilter::builder()
        .parse(text)
        .map_err(|e| anyhow::anyhow!("invalid log filter {text:?} (from {from}): {e}"))
}

/// Installs the process's logger.
pub fn init(flag: Option<&str>, format: LogFormat) -> anyhow::Result<()> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = filter(flag, rust_log.as_deref())?;
    // Colour only for a person at a terminal: `up`'s children log to files, which tools read.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let out = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let out = match format {
        LogFormat::Text => out.boxed(),
        LogFormat::Json => out
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(out.with_filter(NotEverydayError))
        .with(AsWarning)
        .try_init()
        .map_err(|e| anyhow::anyhow!("installing the logger: {e}"))
}

/// The text of an event's `message` field.
#[derive(Default)]
struct Message(String);

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_string();
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

/// Every field but the message, as `name=value`.
#[derive(Default)]
struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() != "message" {
            use std::fmt::Write as _;
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() != "message" {
            use std::fmt::Write as _;
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

/// Whether `event` is one of openraft's everyday errors (see the module's comment).
fn is_everyday_error(event: &Event<'_>) -> bool {
    let meta = event.metadata();
    if *meta.level() != Level::ERROR || !meta.target().starts_with("openraft") {
        return false;
    }
    let mut message = Message::default();
    event.record(&mut message);
    EVERYDAY_ERRORS
        .iter()
        .any(|(module, text)| meta.target() == *module && message.0 == *text)
        || EVERYDAY_ERROR_STARTS
            .iter()
            .any(|(module, start)| meta.target() == *module && message.0.starts_with(start))
}

/// Keeps openraft's everyday errors out of the log as they are.
struct NotEverydayError;

impl<S> Filter<S> for NotEverydayError {
    fn enabled(&self, _: &tracing::Metadata<'_>, _: &Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &Event<'_>, _: &Context<'_, S>) -> bool {
        !is_everyday_error(event)
    }
}

/// Writes openraft's everyday errors again as warnings (under the target `openraft`, so
/// the filter's `openraft=…` directive governs them).
struct AsWarning;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for AsWarning {
    /// It acts on errors only. Without a hint tracing takes a layer to want every level, and
    /// the process's filter no longer sets the level below which a `debug!` or `trace!` costs
    /// one load: each of openraft's many on a write's path was checked against the filters
    /// one event at a time (2.6 % of a leader's CPU under ten clients' puts, by `perf`).
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::ERROR)
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if !is_everyday_error(event) {
            return;
        }
        let mut message = Message::default();
        let mut fields = Fields::default();
        event.record(&mut message);
        event.record(&mut fields);
        tracing::warn!(
            target: "openraft",
            from = event.metadata().target(),
            "{}:{}",
            message.0,
            fields.0
        );
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("capture").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// openraft's everyday errors (one peer's RPC, a refused membership change) come out as
    /// warnings with their fields; its other errors, and everyone else's, stay errors.
    #[test]
    fn everyday_openraft_errors_are_warnings_and_other_errors_stay() {
        let capture = Capture::default();
        let writer = capture.clone();
        let out = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || writer.clone());
        // The global default: a nested event from inside a layer reaches a global
        // subscriber (a scoped one would drop it).
        tracing_subscriber::registry()
            .with(filter(Some("info"), None).expect("filter"))
            .with(out.with_filter(NotEverydayError))
            .with(AsWarning)
            .try_init()
            .expect("the only logger of this test binary");
        tracing::error!(target: "openraft::replication", err = "timeout after 100ms", "RPCError");
        tracing::error!(target: "openraft::replication", error = "disk", "error replication to target=2");
        tracing::error!(target: "skiff_store", "RPCError");
        tracing::error!(
            target: "openraft::raft::impl_raft_blocking_write",
            "the first step error: has to forward request to: Some(7)"
        );
        let text = String::from_utf8(capture.0.lock().expect("capture").clone()).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(
            lines[0].contains("WARN")
                && lines[0].contains("RPCError: err=timeout after 100ms")
                && lines[0].contains("from=\"openraft::replication\""),
            "{text}"
        );
        assert!(
            lines[1].contains("ERROR") && lines[1].contains("target=2"),
            "{text}"
        );
        assert!(
            lines[2].contains("ERROR") && lines[2].contains("skiff_store"),
            "{text}"
        );
        assert!(
            lines[3].contains("WARN")
                && lines[3].contains("the first step error: has to forward request to")
                && lines[3].contains("from=\"openraft::raft::impl_raft_blocking_write\""),
            "{text}"
        );
    }

    #[test]
    fn the_flag_wins_over_rust_log_and_bad_filters_are_errors() {
        assert_eq!(
            filter(Some("debug"), Some("trace"))
                .expect("valid")
                .to_string(),
            "debug"
        );
        assert_eq!(
            filter(None, Some("skiff_store=debug"))
                .expect("valid")
                .to_string(),
            "skiff_store=debug"
        );
        assert!(filter(None, None).is_ok());
        let e = filter(Some("info,skiff=loud"), None).expect_err("bad level");
        assert!(
            e.to_string().contains("\"info,skiff=loud\" (from --log)"),
            "{e}"
        );
        let e = filter(None, Some("=[")).expect_err("bad RUST_LOG");
        assert!(e.to_string().contains("from RUST_LOG"), "{e}");
    }
}
