//! The printer of the `certificates.k8s.io` CertificateSigningRequests: signer, requestor,
//! requested duration and where the request stands.

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;
use skiff_proto::api::CertificateSigningRequest;

use super::{AGE, Column, NAME, age, column, human_duration, name, text};

/// kubectl's for CertificateSigningRequests: who asked which signer, and where it stands.
pub(super) const CSR_COLUMNS: &[Column] = &[
    NAME,
    AGE,
    column("SignerName", 0, "The name of the signer"),
    column("Requestor", 0, "The user who made the request"),
    column(
        "RequestedDuration",
        0,
        "How long the certificate is asked to be valid",
    ),
    column(
        "Condition",
        0,
        "Approved, Denied, Failed, Issued or Pending",
    ),
];

pub(super) fn csr_cells(csr: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let duration = match csr
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
    {
        Some(secs) => human_duration(TimeDelta::seconds(secs)),
        None => "<none>".to_owned(),
    };
    let condition = serde_json::from_value::<CertificateSigningRequest>(csr.clone())
        .map(|c| c.condition_summary())
        .unwrap_or_default();
    vec![
        name(csr).into(),
        age(csr, now).into(),
        text(csr, "/spec/signerName").into(),
        text(csr, "/spec/username").into(),
        duration.into(),
        condition.into(),
    ]
}
