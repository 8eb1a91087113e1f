//! etcd's watch guarantees, checked against the acknowledged writes:
//!
//! - **ordered**: within a watcher, revisions never go backwards;
//! - **unique**: no (revision, key) event is delivered twice to a watcher, across resumes;
//! - **atomic**: all events of one revision arrive in one response, and exactly the puts of
//!   the transaction that made that revision;
//! - **reliable**: inside the revision range a session covered (from its start to the highest
//!   revision it saw or was told of by a progress notification), every revision that exists
//!   (acknowledged, or delivered to any watcher) was delivered — no gaps;
//! - **resumable**: a session resumed at revision `s` gets nothing below `s`;
//! - **bookmarkable**: a progress notification at revision `R` comes only after every event
//!   up to `R`, and nothing at or below `R` follows it;
//! - **agreement**: all watchers deliver the same events for a revision; every event comes
//!   from an invoked write, at the revision that write was acknowledged with (no time travel).
//!
//! Op values: `write` `{key, puts: [[key, value], ..], rev}`; `watch` invoke `{key, watcher,
//! start}`, completion adds `responses: [{rev, events: [{type, key, value, rev}], created,
//! canceled, compacted, progress}]`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Validity, Verdict};
use crate::history::{F, History, OpType};

/// Keys of the watch workload start with this.
pub const PREFIX: &str = "w/";

/// An event as the watcher received it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, serde::Serialize)]
pub struct Event {
    #[serde(rename = "type")]
    pub kind: String,
    pub key: String,
    pub value: String,
    pub rev: i64,
}

/// One watch response.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
pub struct Response {
    /// Header revision.
    pub rev: i64,
    #[serde(default)]
    pub events: Vec<Event>,
    #[serde(default)]
    pub created: bool,
    #[serde(default)]
    pub canceled: bool,
    #[serde(default)]
    pub compacted: i64,
}

impl Response {
    /// A progress notification: no events and nothing else to say.
    pub fn is_progress(&self) -> bool {
        self.events.is_empty() && !self.created && !self.canceled && self.compacted == 0
    }
}

#[derive(Debug, Deserialize)]
struct Session {
    watcher: u64,
    start: i64,
    #[serde(default)]
    responses: Vec<Response>,
}

type Put = (String, String);

pub fn check(history: &History) -> Verdict {
    let in_workload = |v: &Value| {
        v.get("key")
            .and_then(Value::as_str)
            .is_some_and(|k| k.starts_with(PREFIX))
    };
    // What was written: acknowledged revisions and every invoked put.
    let mut acked: BTreeMap<i64, BTreeSet<Put>> = BTreeMap::new();
    let mut invoked: HashMap<Put, Option<i64>> = HashMap::new();
    let mut sessions: Vec<(u64, Session)> = Vec::new();
    for p in history.pairs() {
        if !in_workload(&p.invoke.value) {
            continue;
        }
        match p.invoke.f {
            F::Write => {
                let puts: Vec<Put> = serde_json::from_value(
                    p.invoke.value.get("puts").cloned().unwrap_or(Value::Null),
                )
                .unwrap_or_default();
                let rev = p
                    .completion
                    .filter(|c| c.kind == OpType::Ok)
                    .and_then(|c| c.rev());
                if let Some(r) = rev {
                    acked.entry(r).or_default().extend(puts.iter().cloned());
                }
                if p.outcome() != OpType::Fail {
                    for put in puts {
                        invoked.insert(put, rev);
                    }
                }
            }
            F::Watch => {
                if let Ok(s) = serde_json::from_value::<Session>(p.value().clone()) {
                    sessions.push((p.invoke.time, s));
                }
            }
            _ => {}
        }
    }
    sessions.sort_by_key(|(t, _)| *t);

    let mut anomalies: BTreeMap<&'static str, Vec<Value>> = BTreeMap::new();
    let mut note = |kind: &'static str, v: Value| {
        let list = anomalies.entry(kind).or_default();
        if list.len() < 20 {
            list.push(v);
        }
    };

    // Agreement: the union of what watchers saw, per revision.
    let mut truth: BTreeMap<i64, BTreeSet<Put>> = BTreeMap::new();
    let mut truth_from: HashMap<i64, u64> = HashMap::new();
    for (_, s) in &sessions {
        let mut per_rev: BTreeMap<i64, BTreeSet<Put>> = BTreeMap::new();
        for r in &s.responses {
            for e in &r.events {
                per_rev
                    .entry(e.rev)
                    .or_default()
                    .insert((e.key.clone(), e.value.clone()));
            }
        }
        for (rev, puts) in per_rev {
            match truth.get(&rev) {
                Some(existing) if *existing != puts => note(
                    "disagree",
                    json!({"rev": rev, "watcher": s.watcher, "saw": puts, "other_watcher": truth_from.get(&rev), "other_saw": existing}),
                ),
                Some(_) => {}
                None => {
                    truth.insert(rev, puts);
                    truth_from.insert(rev, s.watcher);
                }
            }
        }
    }
    // Every delivered put comes from an invoked write, at its acknowledged revision; every
    // delivered revision has exactly its transaction's puts.
    for (rev, puts) in &truth {
        for put in puts {
            match invoked.get(put) {
                None => note(
                    "unexpected",
                    json!({"rev": rev, "key": put.0, "value": put.1}),
                ),
                Some(Some(r)) if r != rev => note(
                    "wrong-revision",
                    json!({"key": put.0, "value": put.1, "delivered_at": rev, "acknowledged_at": r}),
                ),
                _ => {}
            }
        }
        if let Some(expected) = acked.get(rev)
            && expected != puts
        {
            note(
                "not-atomic",
                json!({"rev": rev, "delivered": puts, "written": expected}),
            );
        }
    }
    let mut existing: BTreeSet<i64> = truth.keys().copied().collect();
    existing.extend(acked.keys().copied());

    let mut delivered_events = 0u64;
    let mut covered: BTreeSet<i64> = BTreeSet::new();
    let mut seen_by: HashMap<u64, HashSet<(i64, String)>> = HashMap::new();
    for (_, s) in &sessions {
        let seen = seen_by.entry(s.watcher).or_default();
        let mut delivered: BTreeSet<i64> = BTreeSet::new();
        let mut last_rev = s.start - 1;
        let mut prev_response_max = s.start - 1;
        let mut progress_floor = i64::MIN;
        let mut hi = s.start - 1;
        for r in &s.responses {
            if r.compacted > 0 || r.canceled {
                break;
            }
            if r.is_progress() {
                let missing: Vec<i64> = existing
                    .range(s.start..=r.rev.max(s.start))
                    .filter(|&&rev| rev <= r.rev)
                    .filter(|rev| !delivered.contains(rev))
                    .copied()
                    .collect();
                if !missing.is_empty() {
                    note(
                        "progress-before-events",
                        json!({"watcher": s.watcher, "start": s.start, "progress_rev": r.rev, "missing": &missing[..missing.len().min(10)]}),
                    );
                }
                progress_floor = progress_floor.max(r.rev);
                hi = hi.max(r.rev);
                continue;
            }
            let mut in_response: HashSet<(i64, &str)> = HashSet::new();
            for e in &r.events {
                delivered_events += 1;
                if e.rev < s.start {
                    note(
                        "before-start",
                        json!({"watcher": s.watcher, "start": s.start, "event": e}),
                    );
                }
                if e.rev < last_rev {
                    note(
                        "reordered",
                        json!({"watcher": s.watcher, "after_rev": last_rev, "event": e}),
                    );
                } else if e.rev <= prev_response_max && e.rev == last_rev {
                    note("split-revision", json!({"watcher": s.watcher, "event": e}));
                }
                if e.rev <= progress_floor {
                    note(
                        "event-after-progress",
                        json!({"watcher": s.watcher, "progress_rev": progress_floor, "event": e}),
                    );
                }
                let fresh_in_response = in_response.insert((e.rev, e.key.as_str()));
                let fresh_for_watcher = seen.insert((e.rev, e.key.clone()));
                if !fresh_in_response || !fresh_for_watcher {
                    note("duplicate", json!({"watcher": s.watcher, "event": e}));
                }
                last_rev = last_rev.max(e.rev);
                delivered.insert(e.rev);
                hi = hi.max(e.rev);
            }
            prev_response_max = prev_response_max.max(last_rev);
        }
        let gaps: Vec<i64> = existing
            .range(s.start..=hi.max(s.start))
            .filter(|&&rev| rev <= hi && !delivered.contains(&rev))
            .copied()
            .collect();
        if !gaps.is_empty() {
            note(
                "gap",
                json!({"watcher": s.watcher, "start": s.start, "covered_to": hi, "missing": &gaps[..gaps.len().min(10)], "missing_count": gaps.len()}),
            );
        }
        if hi >= s.start {
            covered.extend(existing.range(s.start..=hi).copied());
        }
    }
    let unchecked = acked.keys().filter(|r| !covered.contains(r)).count();
    let found: usize = anomalies.values().map(Vec::len).sum();
    let valid = if found > 0 {
        Validity::False
    } else if sessions.is_empty() || (unchecked > 0 && unchecked * 10 > acked.len()) {
        // Most acknowledged writes were never inside any watcher's covered range: the run
        // did not test the property.
        Validity::Unknown
    } else {
        Validity::True
    };
    let summary = format!(
        "{} watch sessions, {} events delivered, {} acknowledged writes ({} not covered by any session){}",
        sessions.len(),
        delivered_events,
        acked.len(),
        unchecked,
        if found > 0 {
            format!(
                "; anomalies: {}",
                anomalies
                    .iter()
                    .map(|(k, v)| format!("{k} ×{}", v.len()))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            String::new()
        }
    );
    Verdict::new(
        "watch",
        valid,
        summary,
        json!({
            "sessions": sessions.len(),
            "events": delivered_events,
            "acknowledged_writes": acked.len(),
            "unchecked_writes": unchecked,
            "anomalies": anomalies,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Builder;

    struct Hist {
        b: Builder,
        next_value: u64,
    }

    impl Hist {
        fn new() -> Hist {
            Hist {
                b: Builder::new(),
                next_value: 0,
            }
        }

        /// An acknowledged write of `keys` at `rev`; returns the events it should produce.
        fn write(&mut self, keys: &[&str], rev: i64) -> Vec<Event> {
            self.next_value += 1;
            let puts: Vec<(String, String)> = keys
                .iter()
                .map(|k| (k.to_string(), self.next_value.to_string()))
                .collect();
            let v = json!({"key": "w/0", "puts": puts});
            let mut done = v.clone();
            done["rev"] = json!(rev);
            self.b.invoke(100, F::Write, v).ok(100, F::Write, done);
            puts.into_iter()
                .map(|(key, value)| Event {
                    kind: "put".into(),
                    key,
                    value,
                    rev,
                })
                .collect()
        }

        fn session(&mut self, watcher: u64, start: i64, responses: Vec<Response>) {
            let v = json!({"key": "w/", "watcher": watcher, "start": start});
            let mut done = v.clone();
            done["responses"] = serde_json::to_value(responses).expect("serialize");
            self.b
                .invoke(watcher, F::Watch, v)
                .ok(watcher, F::Watch, done);
        }
    }

    fn events(e: Vec<Event>) -> Response {
        Response {
            rev: e.last().map_or(0, |e| e.rev),
            events: e,
            ..Response::default()
        }
    }

    fn progress(rev: i64) -> Response {
        Response {
            rev,
            ..Response::default()
        }
    }

    fn anomaly_kinds(v: &Verdict) -> Vec<String> {
        v.details["anomalies"]
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Two watchers, one resuming midway, both see everything: valid.
    fn clean() -> (Hist, Vec<Vec<Event>>) {
        let mut h = Hist::new();
        let w: Vec<Vec<Event>> = vec![
            h.write(&["w/a"], 2),
            h.write(&["w/a", "w/b"], 3),
            h.write(&["w/b"], 4),
            h.write(&["w/a"], 5),
        ];
        (h, w)
    }

    #[test]
    fn clean_history_with_resume_is_valid() {
        let (mut h, w) = clean();
        h.session(1, 2, vec![events(w[0].clone()), events(w[1].clone())]);
        h.session(
            1,
            4,
            vec![events(w[2].clone()), events(w[3].clone()), progress(5)],
        );
        h.session(2, 1, vec![events(w.concat()), progress(6)]);
        let v = check(&h.b.build());
        assert_eq!(v.valid, Validity::True, "{v:?}");
    }

    #[test]
    fn gap_is_caught() {
        let (mut h, w) = clean();
        h.session(1, 2, vec![events(w[0].clone()), events(w[3].clone())]);
        let v = check(&h.b.build());
        assert_eq!(v.valid, Validity::False);
        assert_eq!(anomaly_kinds(&v), vec!["gap"]);
        assert_eq!(v.details["anomalies"]["gap"][0]["missing"], json!([3, 4]));
    }

    #[test]
    fn duplicate_across_resume_is_caught() {
        let (mut h, w) = clean();
        h.session(1, 2, vec![events(w[0].clone()), events(w[1].clone())]);
        // resumed at 3 instead of 4: revision 3 delivered again
        h.session(1, 3, vec![events(w[1].clone()), events(w[2].clone())]);
        let v = check(&h.b.build());
        assert!(
            anomaly_kinds(&v).contains(&"duplicate".to_string()),
            "{v:?}"
        );
    }

    #[test]
    fn reorder_is_caught() {
        let (mut h, w) = clean();
        h.session(
            1,
            2,
            vec![
                events(w[0].clone()),
                events(w[2].clone()),
                events(w[1].clone()),
            ],
        );
        let v = check(&h.b.build());
        assert!(
            anomaly_kinds(&v).contains(&"reordered".to_string()),
            "{v:?}"
        );
    }

    #[test]
    fn time_travel_and_inventions_are_caught() {
        let (mut h, w) = clean();
        let mut moved = w[0].clone();
        moved[0].rev = 6; // the write acknowledged at 2 shows up at 6
        let invented = Event {
            kind: "put".into(),
            key: "w/zz".into(),
            value: "999".into(),
            rev: 7,
        };
        h.session(1, 6, vec![events(moved), events(vec![invented])]);
        let kinds = anomaly_kinds(&check(&h.b.build()));
        assert!(kinds.contains(&"wrong-revision".to_string()), "{kinds:?}");
        assert!(kinds.contains(&"unexpected".to_string()), "{kinds:?}");
    }

    #[test]
    fn split_transaction_is_caught() {
        let (mut h, w) = clean();
        h.session(
            1,
            3,
            vec![events(vec![w[1][0].clone()]), events(vec![w[1][1].clone()])],
        );
        let v = check(&h.b.build());
        assert!(
            anomaly_kinds(&v).contains(&"split-revision".to_string()),
            "{v:?}"
        );
    }

    #[test]
    fn missing_half_of_a_transaction_is_caught() {
        let (mut h, w) = clean();
        h.session(1, 3, vec![events(vec![w[1][0].clone()])]);
        let v = check(&h.b.build());
        assert!(
            anomaly_kinds(&v).contains(&"not-atomic".to_string()),
            "{v:?}"
        );
    }

    #[test]
    fn early_progress_notification_is_caught() {
        let (mut h, w) = clean();
        h.session(
            1,
            2,
            vec![events(w[0].clone()), progress(4), events(w[1].clone())],
        );
        let kinds = anomaly_kinds(&check(&h.b.build()));
        assert!(
            kinds.contains(&"progress-before-events".to_string()),
            "{kinds:?}"
        );
        assert!(
            kinds.contains(&"event-after-progress".to_string()),
            "{kinds:?}"
        );
    }

    #[test]
    fn watchers_that_disagree_are_caught() {
        let (mut h, w) = clean();
        h.session(1, 2, vec![events(w[0].clone())]);
        let mut other = w[0].clone();
        other[0].value = "4".into(); // a real value, written at another revision
        h.session(2, 2, vec![events(other)]);
        let kinds = anomaly_kinds(&check(&h.b.build()));
        assert!(kinds.contains(&"disagree".to_string()), "{kinds:?}");
    }

    #[test]
    fn event_below_resume_point_is_caught() {
        let (mut h, w) = clean();
        h.session(1, 4, vec![events(w[1].clone()), events(w[2].clone())]);
        let kinds = anomaly_kinds(&check(&h.b.build()));
        assert!(kinds.contains(&"before-start".to_string()), "{kinds:?}");
    }
}
