//! Label and field selectors in Kubernetes' string syntax, as `list`, `watch`, `get -l` and
//! `--field-selector` take them.
//!
//! ```text
//! labels: app=web, tier!=db, env in (prod,staging), env notin (dev), gpu, !legacy
//! fields: spec.nodeName=node-1, status.phase!=Succeeded, metadata.namespace=default
//! ```
//!
//! Requirements are ANDed; an empty selector matches everything.

use std::collections::BTreeMap;
use std::fmt;

use crate::api::validation::{is_label_value, is_qualified_name};
use crate::api::{Kind, LabelSelector, Object};

/// A selector string that does not parse, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} selector {input:?}: {reason}")]
pub struct SelectorError {
    pub what: &'static str,
    pub input: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

/// A parsed label selector.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelQuery {
    pub requirements: Vec<Requirement>,
}

impl LabelQuery {
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let err = |reason: String| SelectorError {
            what: "label",
            input: input.to_owned(),
            reason,
        };
        let mut requirements = Vec::new();
        for term in split_top_level(input).map_err(|r| err(r.to_owned()))? {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let req = parse_requirement(term).map_err(err)?;
            requirements.push(req);
        }
        Ok(LabelQuery { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

impl TryFrom<&LabelSelector> for LabelQuery {
    type Error = SelectorError;

    /// An object's `LabelSelector` in the string syntax, as Kubernetes' `LabelSelectorAsSelector`
    /// builds it: one requirement per `matchLabels` entry and per expression, ordered by key, the
    /// values of `in` and `notin` sorted. This is the `status.selector` of a Scale and the
    /// SELECTOR column of `kubectl get -o wide`; an empty selector is the empty string.
    fn try_from(selector: &LabelSelector) -> Result<Self, SelectorError> {
        let mut requirements: Vec<Requirement> = selector
            .match_labels
            .iter()
            .map(|(k, v)| Requirement::Equals(k.clone(), v.clone()))
            .collect();
        for r in &selector.match_expressions {
            let mut values = r.values.clone();
            values.sort();
            values.dedup();
            requirements.push(match r.operator.as_str() {
                "In" => Requirement::In(r.key.clone(), values),
                "NotIn" => Requirement::NotIn(r.key.clone(), values),
                "Exists" => Requirement::Exists(r.key.clone()),
                "DoesNotExist" => Requirement::DoesNotExist(r.key.clone()),
                other => {
                    return Err(SelectorError {
                        what: "label",
                        input: format!("{} {other}", r.key),
                        reason: format!("{other:?} is not a valid label selector operator"),
                    });
                }
            });
        }
        requirements.sort_by(|a, b| a.key().cmp(b.key()));
        Ok(LabelQuery { requirements })
    }
}

impl Requirement {
    /// The label the requirement is about.
    pub fn key(&self) -> &str {
        match self {
            Requirement::Equals(k, _)
            | Requirement::NotEquals(k, _)
            | Requirement::In(k, _)
            | Requirement::NotIn(k, _)
            | Requirement::Exists(k)
            | Requirement::DoesNotExist(k) => k,
        }
    }
}

/// Splits on commas outside parentheses.
fn split_top_level(input: &str) -> Result<Vec<&str>, &'static str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or("unbalanced ')'")?,
            ',' if depth == 0 => {
                parts.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('");
    }
    parts.push(&input[start..]);
    Ok(parts)
}

fn check_key(key: &str) -> Result<String, String> {
    if is_qualified_name(key) {
        Ok(key.to_owned())
    } else {
        Err(format!("{key:?} is not a valid label key"))
    }
}

fn check_value(value: &str) -> Result<String, String> {
    if is_label_value(value) {
        Ok(value.to_owned())
    } else {
        Err(format!("{value:?} is not a valid label value"))
    }
}

fn parse_requirement(term: &str) -> Result<Requirement, String> {
    if let Some(key) = term.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(check_key(key.trim())?));
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(Requirement::NotEquals(
            check_key(k.trim())?,
            check_value(v.trim())?,
        ));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(Requirement::Equals(
            check_key(k.trim())?,
            check_value(v.trim())?,
        ));
    }
    let words: Vec<&str> = term.splitn(2, char::is_whitespace).collect();
    if let [key, rest] = words[..] {
        let rest = rest.trim_start();
        let (op, set) = if let Some(s) = rest.strip_prefix("notin") {
            ("notin", s)
        } else if let Some(s) = rest.strip_prefix("in") {
            ("in", s)
        } else {
            return Err(format!("expected =, ==, !=, in or notin after {key:?}"));
        };
        let set = set.trim();
        let inner = set
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .ok_or_else(|| format!("expected a parenthesised value list after {op}"))?;
        let values = inner
            .split(',')
            .map(|v| check_value(v.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        let key = check_key(key)?;
        return Ok(if op == "in" {
            Requirement::In(key, values)
        } else {
            Requirement::NotIn(key, values)
        });
    }
    Ok(Requirement::Exists(check_key(term)?))
}

/// Fields a selector may name, per kind (as the apiserver's field label conversions).
fn field_value(object: &Object, field: &str) -> Option<String> {
    let m = object.metadata();
    match field {
        "metadata.name" => return Some(m.name.clone()),
        "metadata.namespace" => return Some(m.namespace.clone()),
        _ => {}
    }
    match object {
        Object::Pod(p) => match field {
            "spec.nodeName" => Some(p.spec.node_name.clone()),
            "spec.schedulerName" => Some(p.spec.scheduler_name.clone()),
            "spec.restartPolicy" => Some(
                p.spec
                    .restart_policy
                    .map(|r| r.as_str().to_owned())
                    .unwrap_or_default(),
            ),
            "status.phase" => Some(
                p.phase()
                    .map(|ph| ph.as_str().to_owned())
                    .unwrap_or_default(),
            ),
            "status.podIP" => Some(
                p.status
                    .as_ref()
                    .map(|s| s.pod_ip.clone())
                    .unwrap_or_default(),
            ),
            _ => None,
        },
        Object::Node(n) => match field {
            "spec.unschedulable" => Some(n.spec.unschedulable.unwrap_or(false).to_string()),
            _ => None,
        },
        Object::Namespace(n) => match field {
            "status.phase" => Some(n.phase().map(|p| p.as_str().to_owned()).unwrap_or_default()),
            _ => None,
        },
        Object::Event(e) => match field {
            "involvedObject.kind" => Some(e.involved_object.kind.clone()),
            "involvedObject.namespace" => Some(e.involved_object.namespace.clone()),
            "involvedObject.name" => Some(e.involved_object.name.clone()),
            "involvedObject.uid" => Some(e.involved_object.uid.clone()),
            "involvedObject.fieldPath" => Some(e.involved_object.field_path.clone()),
            "reason" => Some(e.reason.clone()),
            "type" => Some(e.type_.clone()),
            "source" => Some(e.source.component.clone()),
            _ => None,
        },
        _ => None,
    }
}

fn supported_fields(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Pod => &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.schedulerName",
            "spec.restartPolicy",
            "status.phase",
            "status.podIP",
        ],
        Kind::Node => &["metadata.name", "spec.unschedulable"],
        Kind::Namespace => &["metadata.name", "status.phase"],
        Kind::Event => &[
            "metadata.name",
            "metadata.namespace",
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.fieldPath",
            "reason",
            "type",
            "source",
        ],
        _ => &["metadata.name", "metadata.namespace"],
    }
}

/// A parsed field selector for one kind.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldQuery {
    /// (field, equal?, value)
    pub terms: Vec<(String, bool, String)>,
}

impl FieldQuery {
    /// Parses `input` for objects of `kind`; a field the kind does not support is an error that
    /// lists the ones it does.
    pub fn parse(kind: Kind, input: &str) -> Result<Self, SelectorError> {
        let err = |reason: String| SelectorError {
            what: "field",
            input: input.to_owned(),
            reason,
        };
        let mut terms = Vec::new();
        for term in input.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, eq, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (f, true, v)
            } else {
                return Err(err(format!("{term:?} needs =, == or !=")));
            };
            let field = field.trim();
            if !supported_fields(kind).contains(&field) {
                return Err(err(format!(
                    "field {field:?} is not supported for {}; supported: {}",
                    kind.plural(),
                    supported_fields(kind).join(", ")
                )));
            }
            terms.push((field.to_owned(), eq, value.trim().to_owned()));
        }
        Ok(FieldQuery { terms })
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    pub fn matches(&self, object: &Object) -> bool {
        self.terms.iter().all(|(field, eq, value)| {
            (field_value(object, field).as_deref() == Some(value.as_str())) == *eq
        })
    }

    /// The value this selector pins `field` to with an equality term, if any (lets a store
    /// narrow a scan or index a watcher, e.g. by `spec.nodeName`).
    pub fn equality(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|(f, eq, _)| f == field && *eq)
            .map(|(_, _, v)| v.as_str())
    }
}

impl fmt::Display for LabelQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .requirements
            .iter()
            .map(|r| match r {
                Requirement::Equals(k, v) => format!("{k}={v}"),
                Requirement::NotEquals(k, v) => format!("{k}!={v}"),
                Requirement::In(k, vs) => format!("{k} in ({})", vs.join(",")),
                Requirement::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
                Requirement::Exists(k) => k.clone(),
                Requirement::DoesNotExist(k) => format!("!{k}"),
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::labels;

    /// A LabelSelector prints as Kubernetes prints it: requirements by key, values sorted,
    /// and the text parses back to a query that selects the same labels.
    #[test]
    fn label_selector_as_string() {
        let selector: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"tier": "web", "app": "shop"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "canary"]},
                {"key": "legacy", "operator": "DoesNotExist"},
                {"key": "gpu", "operator": "Exists"},
                {"key": "zone", "operator": "NotIn", "values": ["z9"]},
            ],
        }))
        .unwrap();
        let q = LabelQuery::try_from(&selector).unwrap();
        let text = q.to_string();
        assert_eq!(
            text,
            "app=shop,env in (canary,prod),gpu,!legacy,tier=web,zone notin (z9)"
        );
        let back = LabelQuery::parse(&text).unwrap();
        for set in [
            labels(&[
                ("app", "shop"),
                ("tier", "web"),
                ("env", "prod"),
                ("gpu", ""),
            ]),
            labels(&[
                ("app", "shop"),
                ("tier", "web"),
                ("env", "dev"),
                ("gpu", ""),
            ]),
            labels(&[
                ("app", "shop"),
                ("tier", "web"),
                ("gpu", ""),
                ("legacy", "1"),
            ]),
        ] {
            assert_eq!(back.matches(&set), selector.matches(&set), "{set:?}");
        }
        assert_eq!(
            LabelQuery::try_from(&LabelSelector::default())
                .unwrap()
                .to_string(),
            ""
        );
        let bad: LabelSelector = serde_json::from_value(
            serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Near"}]}),
        )
        .unwrap();
        assert!(LabelQuery::try_from(&bad).is_err());
    }

    #[test]
    fn label_syntax() {
        let q = LabelQuery::parse(
            "app=web, tier!=db,env in (prod, staging),zone notin (z9),gpu,!legacy",
        )
        .unwrap();
        assert_eq!(q.requirements.len(), 6);
        assert!(q.matches(&labels(&[("app", "web"), ("env", "prod"), ("gpu", "")])));
        assert!(!q.matches(&labels(&[("app", "web"), ("env", "dev"), ("gpu", "")])));
        assert!(!q.matches(&labels(&[
            ("app", "web"),
            ("env", "prod"),
            ("gpu", ""),
            ("legacy", "1")
        ])));
        assert!(!q.matches(&labels(&[
            ("app", "web"),
            ("env", "prod"),
            ("gpu", ""),
            ("tier", "db")
        ])));
        assert!(LabelQuery::parse("").unwrap().matches(&labels(&[])));
        assert_eq!(
            q.to_string(),
            "app=web,tier!=db,env in (prod,staging),zone notin (z9),gpu,!legacy"
        );
        assert_eq!(LabelQuery::parse(&q.to_string()).unwrap(), q);
    }

    #[test]
    fn label_errors_name_the_problem() {
        for (input, reason) in [
            (
                "app in prod",
                "expected a parenthesised value list after in",
            ),
            ("env in (a,b", "unbalanced '('"),
            ("bad key!=x", "\"bad key\" is not a valid label key"),
            ("app ~ web", "expected =, ==, !=, in or notin after \"app\""),
            ("app=no spaces", "\"no spaces\" is not a valid label value"),
        ] {
            let e = LabelQuery::parse(input).unwrap_err().to_string();
            assert!(e.contains(reason), "{input}: {e}");
        }
    }

    #[test]
    fn field_selectors_per_kind() {
        let pod: crate::api::Pod = serde_yaml_ng::from_str(
            "metadata: {name: p, namespace: default}\nspec: {nodeName: n1, containers: []}\nstatus: {phase: Running}\n",
        )
        .unwrap();
        let pod = Object::Pod(pod);
        let q = FieldQuery::parse(Kind::Pod, "spec.nodeName=n1,status.phase!=Succeeded").unwrap();
        assert!(q.matches(&pod));
        assert_eq!(q.equality("spec.nodeName"), Some("n1"));
        assert!(
            !FieldQuery::parse(Kind::Pod, "spec.nodeName=n2")
                .unwrap()
                .matches(&pod)
        );
        assert!(
            FieldQuery::parse(Kind::Pod, "spec.nodeName=")
                .unwrap()
                .matches(&Object::Pod(Default::default()))
        );
        let e = FieldQuery::parse(Kind::Node, "spec.nodeName=n1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("field \"spec.nodeName\" is not supported for nodes; supported: metadata.name, spec.unschedulable"), "{e}");
    }
}
