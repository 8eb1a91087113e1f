//! Checkers judge a finished history. Each is pure (history in, verdict out) so it can be
//! tested on hand-made and generated histories with planted anomalies, without a cluster.
//!
//! | module | property |
//! |---|---|
//! | [`wgl`] | generic Wing–Gong / Lowe linearizability search over a sequential model |
//! | [`register`] | versioned CAS register, partitioned per key, on top of `wgl` |
//! | [`set`] | every acknowledged add survives; no stale or unexpected elements |
//! | [`watch`] | etcd's watch guarantees against acknowledged writes |
//! | [`lease`] | kept-alive keys stay; revoked / expired keys go |
//! | [`revision`] | real-time order implies revision order, on every workload |
//! | [`convergence`] | after the run, every live member hashes its keyspace alike (HashKV) at one revision; reads the cluster, not the history |

pub mod convergence;
pub mod lease;
pub mod register;
pub mod revision;
pub mod set;
pub mod watch;
pub mod wgl;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A checker's answer. `Unknown` means the checker could not decide (its search budget ran
/// out, or the history lacks what it needs); it is not a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    True,
    False,
    Unknown,
}

impl Validity {
    /// Combines two answers: any `False` wins, then any `Unknown`.
    pub fn and(self, other: Validity) -> Validity {
        match (self, other) {
            (Validity::False, _) | (_, Validity::False) => Validity::False,
            (Validity::Unknown, _) | (_, Validity::Unknown) => Validity::Unknown,
            _ => Validity::True,
        }
    }

    pub fn from_ok(ok: bool) -> Validity {
        if ok { Validity::True } else { Validity::False }
    }
}

/// Serialized as Jepsen does: `true`, `false` or `"unknown"`.
impl Serialize for Validity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Validity::True => s.serialize_bool(true),
            Validity::False => s.serialize_bool(false),
            Validity::Unknown => s.serialize_str("unknown"),
        }
    }
}

impl<'de> Deserialize<'de> for Validity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Bool(true) => Ok(Validity::True),
            Value::Bool(false) => Ok(Validity::False),
            Value::String(s) if s == "unknown" => Ok(Validity::Unknown),
            other => Err(serde::de::Error::custom(format!(
                "valid: expected true, false or \"unknown\", got {other}"
            ))),
        }
    }
}

/// One checker's verdict on a history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub checker: String,
    pub valid: Validity,
    /// One line for people.
    pub summary: String,
    /// Everything the checker found (anomalies with the ops involved, counts).
    pub details: Value,
}

impl Verdict {
    pub fn new(checker: &str, valid: Validity, summary: String, details: Value) -> Verdict {
        Verdict {
            checker: checker.to_string(),
            valid,
            summary,
            details,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_combines_and_serializes_like_jepsen() {
        assert_eq!(Validity::True.and(Validity::Unknown), Validity::Unknown);
        assert_eq!(Validity::Unknown.and(Validity::False), Validity::False);
        assert_eq!(Validity::True.and(Validity::True), Validity::True);
        for v in [Validity::True, Validity::False, Validity::Unknown] {
            let s = serde_json::to_string(&v).expect("serialize");
            assert_eq!(serde_json::from_str::<Validity>(&s).expect("parse"), v);
        }
        assert_eq!(
            serde_json::to_string(&Validity::Unknown).expect("serialize"),
            "\"unknown\""
        );
    }
}
