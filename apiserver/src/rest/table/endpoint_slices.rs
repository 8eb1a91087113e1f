//! The printer of the `discovery.k8s.io` EndpointSlices: address type, ports and the first
//! endpoints. (Named by its one kind: `discovery` names the REST API's discovery module.)

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{AGE, Column, NAME, age, column, items, name, number, text};

/// kubectl's for EndpointSlices.
pub(super) const ENDPOINT_SLICE_COLUMNS: &[Column] = &[
    NAME,
    column("AddressType", 0, "The type of the slice's addresses"),
    column("Ports", 0, "The ports of the slice"),
    column("Endpoints", 0, "The endpoints' addresses (the first three)"),
    AGE,
];

/// kubectl's ENDPOINTS: the first three addresses, `+ N more...`; `<unset>` for none.
pub(super) fn endpoint_slice_cells(slice: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let addresses: Vec<&str> = items(slice, "/endpoints")
        .iter()
        .flat_map(|e| items(e, "/addresses"))
        .filter_map(Value::as_str)
        .collect();
    let endpoints = match addresses.len() {
        0 => "<unset>".to_owned(),
        n if n <= 3 => addresses.join(","),
        n => format!("{} + {} more...", addresses[..3].join(","), n - 3),
    };
    let ports: Vec<String> = items(slice, "/ports")
        .iter()
        .map(|p| number(p, "/port").to_string())
        .collect();
    vec![
        name(slice).into(),
        text(slice, "/addressType").into(),
        if ports.is_empty() {
            "<unset>".to_owned()
        } else {
            ports.join(",")
        }
        .into(),
        endpoints.into(),
        age(slice, now).into(),
    ]
}
