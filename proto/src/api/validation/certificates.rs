//! CertificateSigningRequest: the request parses and is signed by its key, the signer is
//! named, the usages are Kubernetes' words, and the conditions make sense together.

use std::collections::HashSet;

use super::{Errors, Path};
use crate::api::certificates::{
    CertificateSigningRequest, KEY_USAGES, MIN_EXPIRATION_SECONDS, check_certificates,
    parse_request,
};
use crate::api::vocabulary::{CertificateConditionType, ConditionStatus};

pub(super) fn validate_csr(errs: &mut Errors, csr: &CertificateSigningRequest) {
    let spec = Path::root("spec");
    if csr.spec.request.is_empty() {
        errs.add(&spec.field("request"), "Required value");
    } else if let Err(why) = parse_request(&csr.spec.request) {
        errs.add(&spec.field("request"), format!("Invalid value: {why}"));
    }
    let signer = &csr.spec.signer_name;
    if signer.is_empty() {
        errs.add(&spec.field("signerName"), "Required value");
    } else if let Some(why) = signer_name_problem(signer) {
        errs.add(
            &spec.field("signerName"),
            format!("Invalid value: {signer:?}: {why}"),
        );
    }
    if let Some(s) = csr.spec.expiration_seconds
        && s < MIN_EXPIRATION_SECONDS
    {
        errs.add(
            &spec.field("expirationSeconds"),
            format!(
                "Invalid value: {s}: may not specify a duration less than 600 seconds (10 minutes)"
            ),
        );
    }
    if csr.spec.usages.is_empty() {
        errs.add(&spec.field("usages"), "Required value");
    }
    let mut seen = HashSet::new();
    for (i, u) in csr.spec.usages.iter().enumerate() {
        let path = spec.field("usages").index(i);
        if !seen.insert(u) {
            errs.add(&path, format!("Duplicate value: {u:?}"));
        }
        errs.one_of(&path, u, KEY_USAGES);
    }
    let Some(status) = &csr.status else {
        return;
    };
    let conditions = Path::root("status").field("conditions");
    let mut types = HashSet::new();
    for (i, c) in status.conditions.iter().enumerate() {
        let path = conditions.index(i);
        if c.type_.as_str().is_empty() {
            errs.add(&path.field("type"), "Required value");
        }
        if !types.insert(c.type_.clone()) {
            errs.add(
                &path.field("type"),
                format!("Duplicate value: {:?}", c.type_.as_str()),
            );
        }
        if matches!(
            c.type_,
            CertificateConditionType::Approved | CertificateConditionType::Denied
        ) && c.status != ConditionStatus::True
        {
            errs.add(
                &path.field("status"),
                format!(
                    "Unsupported value: {:?}: supported values: \"True\"",
                    c.status.as_str()
                ),
            );
        }
    }
    if csr.is_approved() && csr.is_denied() {
        errs.add(
            &conditions,
            "Invalid value: Approved and Denied conditions are mutually exclusive",
        );
    }
    if !status.certificate.is_empty() {
        let path = Path::root("status").field("certificate");
        if let Err(why) = check_certificates(&status.certificate) {
            errs.add(&path, format!("Invalid value: {why}"));
        }
        if !csr.is_approved() {
            errs.add(
                &path,
                "Forbidden: a certificate is issued only for an approved request",
            );
        }
        if csr.is_failed() {
            errs.add(&path, "Forbidden: a failed request gets no certificate");
        }
    }
}

/// Kubernetes' rule for signer names: `<domain>/<path>`, the domain a DNS subdomain, the path
/// a DNS subdomain's characters, 571 characters at most in all.
fn signer_name_problem(name: &str) -> Option<String> {
    let Some((domain, path)) = name.split_once('/') else {
        return Some(
            "must be a fully qualified domain and path of the form 'example.com/signer-name'"
                .into(),
        );
    };
    if name.len() > 571 {
        return Some("must be no more than 571 characters".into());
    }
    if !super::names::is_dns1123_subdomain(domain) || !domain.contains('.') {
        return Some(format!(
            "the domain {domain:?} must be a fully qualified DNS subdomain"
        ));
    }
    if path.is_empty()
        || path.contains('/')
        || !path
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.'))
    {
        return Some(format!(
            "the path {path:?} must be one lower-case DNS-style segment"
        ));
    }
    None
}
