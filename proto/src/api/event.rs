//! `Event`: what happened to an object and who said so (core/v1 Event, the shape `kubectl
//! describe` reads). The scheduler records `Scheduled` / `FailedScheduling`, node agents
//! `Pulled`, `Created`, `Started`, `Killing`, `BackOff`, `Unhealthy`; the store keeps each for
//! an hour after its last update (`skiff store --event-ttl`).

use serde::{Deserialize, Serialize};

use super::meta::{ObjectMeta, Time, Unmodelled};
use super::namespace::ObjectReference;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct Event {
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"v1\".to_string()"))]
    pub api_version: String,
    #[serde(default)]
    #[cfg_attr(test, proptest(value = "\"Event\".to_string()"))]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The object this event is about.
    pub involved_object: ObjectReference,
    /// A short UpperCamelCase cause: `Scheduled`, `BackOff`, …
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// `Normal` or `Warning`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "EventSource::is_empty")]
    pub source: EventSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_timestamp: Option<Time>,
    /// How many times it happened between the two timestamps (repeats are folded into one
    /// event, as the Kubernetes event recorder does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reporting_component: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reporting_instance: String,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(rename_all = "camelCase")]
pub struct EventSource {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub component: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
    /// Fields of Kubernetes' schema that Skiff keeps but does not act on.
    #[serde(flatten)]
    #[cfg_attr(test, proptest(value = "Default::default()"))]
    pub other: Unmodelled,
}

impl EventSource {
    pub fn is_empty(&self) -> bool {
        self.component.is_empty() && self.host.is_empty()
    }
}

impl Event {
    /// When it last happened: the last timestamp, else the first, else the creation time.
    pub fn last_seen(&self) -> Option<Time> {
        self.last_timestamp
            .or(self.first_timestamp)
            .or(self.metadata.creation_timestamp)
    }

    /// kubectl's FROM column: the component, and the host when there is one.
    pub fn from(&self) -> String {
        match (self.source.component.as_str(), self.source.host.as_str()) {
            ("", "") => self.reporting_component.clone(),
            (c, "") => c.to_string(),
            ("", h) => h.to_string(),
            (c, h) => format!("{c}, {h}"),
        }
    }
}
