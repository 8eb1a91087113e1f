//! Metadata shared by every object: `ObjectMeta`, timestamps, label selectors.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Datelike, NaiveDate, SubsecRound, Timelike, Utc};
use serde::{Deserialize, Serialize};

#[cfg(test)]
use super::testing::{small_map, small_vec};

/// Fields of Kubernetes' schema that Skiff's types do not model (volumes, `dnsPolicy`,
/// `securityContext`, `finalizers`, `managedFields` ...). Every type keeps them beside its own
/// fields (`#[serde(flatten)]`), so an object read, changed and written back by any Skiff
/// component (an agent writing status, the store binding a pod) returns them unchanged.
/// Whether a name is a Kubernetes field at all is checked against Kubernetes' schema when a
/// client writes an object (the store's `cluster::schema`), not by these types.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Unmodelled(pub serde_json::Map<String, serde_json::Value>);

impl Unmodelled {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, field: &str) -> Option<&serde_json::Value> {
        self.0.get(field)
    }
}

/// The strings of a JSON array (what is not a string skipped); none when `value` is no array.
pub fn strings_of(value: Option<&serde_json::Value>) -> Vec<String> {
    value
        .and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(serde_json::Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// `metadata` of every object, with Kubernetes' field names and meaning.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// A prefix the server completes into a unique `name` when the client gives none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub generate_name: String,
    /// Empty for cluster-scoped kinds; defaulted to `default` for namespaced ones.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Set by the store on create; immutable.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub annotations: BTreeMap<String, String>,
    /// The store revision that last modified the object, as a decimal string (Kubernetes keeps
    /// it opaque; Skiff documents it as the mod revision so clients may compare them).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// Incremented on every spec change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Time>,
    /// Set when a graceful delete has begun; the object goes away when its owner finishes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_grace_period_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub owner_references: Vec<OwnerReference>,
    /// What must happen before a deleted object goes: a delete only sets
    /// `deletionTimestamp` while any remain, and the update that removes the last one removes
    /// the object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub finalizers: Vec<String>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

impl ObjectMeta {
    /// The revision in `resourceVersion`, or `None` when unset or not a number.
    pub fn revision(&self) -> Option<i64> {
        self.resource_version.parse().ok()
    }
}

/// The characters kube-apiserver appends to `generateName` and spells template hashes with
/// (no vowels, so no words; no look-alikes such as 0/o, 1/l).
pub const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `prefix` and five random characters of [`NAME_ALPHABET`]: the name the store gives an
/// object created with `generateName: prefix`.
pub fn generated_name(prefix: &str) -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| NAME_ALPHABET[rng.random_range(0..NAME_ALPHABET.len())] as char)
        .collect();
    format!("{prefix}{suffix}")
}

/// The finalizer a foreground delete puts on an owner: the garbage collector deletes the
/// owner's dependents first, then removes it, and with it the owner.
pub const FOREGROUND_DELETION_FINALIZER: &str = "foregroundDeletion";
/// The finalizer an orphaning delete puts on an owner: the garbage collector removes the
/// owner's reference from every dependent first, then removes it, and with it the owner.
pub const ORPHAN_FINALIZER: &str = "orphan";

/// An object's owner: when every owner is gone, the garbage collector deletes the object.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

/// A timestamp with one-second resolution, written as RFC 3339 in UTC (`2026-01-02T15:04:05Z`),
/// as Kubernetes' `metav1.Time`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(DateTime<Utc>);

impl Time {
    pub fn now() -> Self {
        Time(Utc::now().trunc_subsecs(0))
    }

    pub fn from_unix(seconds: i64) -> Option<Self> {
        DateTime::from_timestamp(seconds, 0).map(Time)
    }

    pub fn unix(&self) -> i64 {
        self.0.timestamp()
    }

    pub fn datetime(&self) -> DateTime<Utc> {
        self.0
    }

    /// The time as written (`2026-01-02T15:04:05Z`), digit by digit, for the years 0 to 9999
    /// and whole seconds; `None` otherwise (chrono's formatter writes those). Every stored
    /// object carries several times, and chrono reads its format string at every call.
    fn rfc3339(&self) -> Option<[u8; 20]> {
        let t = &self.0;
        let year = u32::try_from(t.year()).ok().filter(|y| *y <= 9999)?;
        if t.nanosecond() != 0 {
            return None;
        }
        let mut out = *b"0000-00-00T00:00:00Z";
        let fields = [
            (0, 4, year),
            (5, 2, t.month()),
            (8, 2, t.day()),
            (11, 2, t.hour()),
            (14, 2, t.minute()),
            (17, 2, t.second()),
        ];
        for (at, width, mut value) in fields {
            for digit in out[at..at + width].iter_mut().rev() {
                *digit = b'0' + (value % 10) as u8;
                value /= 10;
            }
        }
        Some(out)
    }

    /// `2026-01-02T15:04:05Z` exactly (what Kubernetes writes), read without chrono's RFC 3339
    /// parser; `None` for any other form, which that parser reads.
    fn parse_utc_seconds(text: &str) -> Option<Time> {
        let b = text.as_bytes();
        if b.len() != 20 || b[19] != b'Z' {
            return None;
        }
        let number = |at: usize, width: usize| -> Option<u32> {
            b[at..at + width].iter().try_fold(0u32, |n, c| {
                c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
            })
        };
        let separators = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')];
        if separators.iter().any(|(at, c)| b[*at] != *c) {
            return None;
        }
        let date = NaiveDate::from_ymd_opt(
            i32::try_from(number(0, 4)?).ok()?,
            number(5, 2)?,
            number(8, 2)?,
        )?;
        let time = date.and_hms_opt(number(11, 2)?, number(14, 2)?, number(17, 2)?)?;
        Some(Time(time.and_utc()))
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rfc3339() {
            Some(text) => f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?),
            None => write!(f, "{}", self.0.format("%Y-%m-%dT%H:%M:%SZ")),
        }
    }
}

impl Serialize for Time {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.rfc3339() {
            Some(text) => s.serialize_str(
                std::str::from_utf8(&text).expect("invariant: rfc3339 writes ASCII digits"),
            ),
            None => s.collect_str(self),
        }
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(d)?;
        if let Some(t) = Time::parse_utc_seconds(&text) {
            return Ok(t);
        }
        DateTime::parse_from_rfc3339(&text)
            .map(|t| Time(t.with_timezone(&Utc).trunc_subsecs(0)))
            .map_err(|e| {
                serde::de::Error::custom(format!(
                    "invalid timestamp {text:?}: {e} (expected RFC 3339, e.g. 2026-01-02T15:04:05Z)"
                ))
            })
    }
}

#[cfg(test)]
impl proptest::arbitrary::Arbitrary for Time {
    type Parameters = ();
    type Strategy = proptest::strategy::BoxedStrategy<Time>;
    fn arbitrary_with(_: ()) -> Self::Strategy {
        use proptest::strategy::Strategy;
        (0i64..4_102_444_800)
            .prop_map(|s| Time::from_unix(s).expect("in range"))
            .boxed()
    }
}

/// A label query: every `matchLabels` pair and every expression must hold.
/// An empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_map()"))]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub match_expressions: Vec<LabelSelectorRequirement>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(test, proptest(strategy = "small_vec()"))]
    pub values: Vec<String>,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

impl LabelSelector {
    /// Whether `labels` satisfy this selector. Unknown operators match nothing (validation
    /// rejects them before an object is stored).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => value.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !r.values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }
}

/// A condition of the newer kinds' status (`metav1.Condition`: a PodDisruptionBudget's
/// `DisruptionAllowed`): every field but `observedGeneration` is always written, as
/// Kubernetes requires them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: super::vocabulary::ConditionStatus,
    /// The `metadata.generation` the condition was set from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Set when the condition is set (see [`set_condition`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

/// A condition in an object's status (`Condition`, `PodCondition`): what [`set_condition`]
/// needs of it.
pub trait StatusCondition: PartialEq {
    type Type: PartialEq;
    fn condition_type(&self) -> &Self::Type;
    fn condition_status(&self) -> &super::vocabulary::ConditionStatus;
    fn transition_time(&mut self) -> &mut Option<Time>;
}

impl StatusCondition for Condition {
    type Type = String;
    fn condition_type(&self) -> &String {
        &self.type_
    }
    fn condition_status(&self) -> &super::vocabulary::ConditionStatus {
        &self.status
    }
    fn transition_time(&mut self) -> &mut Option<Time> {
        &mut self.last_transition_time
    }
}

/// Sets `condition` in place of the one of its type in `conditions`, or appends it, as
/// Kubernetes' `meta.SetStatusCondition` and `UpdatePodCondition`: `lastTransitionTime`
/// moves (to the condition's own time, else now) only when the status changes; everything
/// else is the new condition's. Returns whether anything changed.
pub fn set_condition<C: StatusCondition>(conditions: &mut Vec<C>, mut condition: C) -> bool {
    let Some(old) = conditions
        .iter_mut()
        .find(|c| c.condition_type() == condition.condition_type())
    else {
        condition.transition_time().get_or_insert_with(Time::now);
        conditions.push(condition);
        return true;
    };
    if old.condition_status() == condition.condition_status() {
        *condition.transition_time() = *old.transition_time();
    } else {
        condition.transition_time().get_or_insert_with(Time::now);
    }
    let changed = *old != condition;
    *old = condition;
    changed
}

/// A port given by number or by name (`port: 8080` or `port: http`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub enum IntOrString {
    Int(i32),
    String(String),
}

impl Default for IntOrString {
    fn default() -> Self {
        IntOrString::Int(0)
    }
}

impl Serialize for IntOrString {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            IntOrString::Int(i) => s.serialize_i32(*i),
            IntOrString::String(v) => s.serialize_str(v),
        }
    }
}

impl<'de> Deserialize<'de> for IntOrString {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = IntOrString;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a port number or a port name")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<IntOrString, E> {
                i32::try_from(v)
                    .map(IntOrString::Int)
                    .map_err(|_| E::custom(format!("{v} is out of range for a 32-bit integer")))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<IntOrString, E> {
                i32::try_from(v)
                    .map(IntOrString::Int)
                    .map_err(|_| E::custom(format!("{v} is out of range for a 32-bit integer")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<IntOrString, E> {
                Ok(IntOrString::String(v.to_owned()))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl IntOrString {
    /// The value for a total of `total`: an integer as it is, `N%` as N percent of `total`,
    /// rounded up or down (Kubernetes' `GetScaledValueFromIntOrPercent`). An error names a
    /// string that is not a percentage.
    pub fn scaled(&self, total: i32, round_up: bool) -> Result<i32, String> {
        match self {
            IntOrString::Int(i) => Ok(*i),
            IntOrString::String(s) => {
                let percent: i64 = s
                    .strip_suffix('%')
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| {
                        format!("invalid value {s:?}: must be an integer or a percentage (\"25%\")")
                    })?;
                let scaled = i64::from(total) * percent;
                let value = if round_up {
                    (scaled + 99).div_euclid(100)
                } else {
                    scaled.div_euclid(100)
                };
                i32::try_from(value).map_err(|_| format!("invalid value {s:?}: out of range"))
            }
        }
    }
}

impl fmt::Display for IntOrString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrString::Int(i) => write!(f, "{i}"),
            IntOrString::String(s) => f.write_str(s),
        }
    }
}

/// A resource name → amount map (`cpu: 100m`, `memory: 64Mi`), as `ResourceList`.
pub type ResourceList = BTreeMap<String, crate::quantity::Quantity>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::labels;

    #[test]
    fn selector_semantics() {
        let sel: LabelSelector = serde_yaml_ng::from_str(
            "matchLabels: {app: web}\nmatchExpressions:\n- {key: tier, operator: In, values: [a, b]}\n- {key: legacy, operator: DoesNotExist}\n",
        )
        .unwrap();
        assert!(sel.matches(&labels(&[("app", "web"), ("tier", "a")])));
        assert!(!sel.matches(&labels(&[("app", "web"), ("tier", "c")])));
        assert!(!sel.matches(&labels(&[("app", "web"), ("tier", "a"), ("legacy", "")])));
        assert!(!sel.matches(&labels(&[("tier", "a")])));
        assert!(LabelSelector::default().matches(&labels(&[])));
    }

    proptest::proptest! {
        /// The digit-by-digit writer and reader agree with chrono's, from year 0 to 9999.
        #[test]
        fn time_text_is_chronos(seconds in -62_167_219_200i64..253_402_300_800) {
            let t = Time::from_unix(seconds).expect("in range");
            let chrono = t.0.format("%Y-%m-%dT%H:%M:%SZ").to_string();
            proptest::prop_assert_eq!(t.to_string(), chrono.clone());
            proptest::prop_assert_eq!(serde_json::to_string(&t).unwrap(), format!("{chrono:?}"));
            proptest::prop_assert_eq!(Time::parse_utc_seconds(&chrono), Some(t));
            let read: Time = serde_json::from_str(&format!("{chrono:?}")).unwrap();
            proptest::prop_assert_eq!(read, t);
        }
    }

    /// What the fast reader does not take goes to chrono's parser, which names the cause.
    #[test]
    fn odd_times_go_to_chronos_parser() {
        for text in [
            "2026-02-30T00:00:00Z",
            "2026-01-02T24:00:00Z",
            "2026-01-02 15:04:05Z",
        ] {
            assert_eq!(Time::parse_utc_seconds(text), None, "{text}");
        }
        assert!(serde_json::from_str::<Time>("\"2026-02-30T00:00:00Z\"").is_err());
        let t: Time = serde_json::from_str("\"2026-01-02T15:04:05.5Z\"").unwrap();
        assert_eq!(t.to_string(), "2026-01-02T15:04:05Z");
    }

    #[test]
    fn time_is_rfc3339_seconds() {
        let t: Time = serde_json::from_str("\"2026-01-02T15:04:05.123+01:00\"").unwrap();
        assert_eq!(t.to_string(), "2026-01-02T14:04:05Z");
        let err = serde_json::from_str::<Time>("\"yesterday\"").unwrap_err();
        assert!(
            err.to_string().contains("invalid timestamp \"yesterday\""),
            "{err}"
        );
    }
}
