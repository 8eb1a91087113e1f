//! Service and EndpointSlice: types and ports as Kubernetes accepts them, cluster IPs that are
//! addresses, port names unique, targets that are ports or port names.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};

use super::pod::{is_port_name, validate_port_number};
use super::{Errors, Path, names};
use crate::api::meta::IntOrString;
use crate::api::service::{CLUSTER_IP, EndpointSlice, HEADLESS, NODE_PORT, Service};

const PROTOCOLS: &[&str] = &["TCP", "UDP", "SCTP"];

pub(super) fn validate_service(errs: &mut Errors, svc: &Service) {
    let spec = Path::root("spec");
    let s = &svc.spec;
    errs.one_of(&spec.field("type"), &s.type_, &[CLUSTER_IP, NODE_PORT]);
    errs.one_of(
        &spec.field("sessionAffinity"),
        &s.session_affinity,
        &["None", "ClientIP"],
    );
    names::validate_labels(errs, &spec.field("selector"), &s.selector);
    let headless = s.cluster_ip == HEADLESS;
    if !headless && !s.cluster_ip.is_empty() && s.cluster_ip.parse::<Ipv4Addr>().is_err() {
        errs.add(
            &spec.field("clusterIP"),
            format!(
                "Invalid value: {:?}: must be empty, 'None', or a valid IPv4 address",
                s.cluster_ip
            ),
        );
    }
    if let Some(first) = s.cluster_ips.first()
        && !s.cluster_ip.is_empty()
        && *first != s.cluster_ip
    {
        errs.add(
            &spec.field("clusterIPs").index(0),
            format!(
                "Invalid value: {first:?}: must be the same as spec.clusterIP ({:?})",
                s.cluster_ip
            ),
        );
    }
    if headless && s.type_ == NODE_PORT {
        errs.add(
            &spec.field("clusterIP"),
            "Invalid value: \"None\": may not be set to 'None' for NodePort services",
        );
    }
    if s.ports.is_empty() && !headless {
        errs.add(&spec.field("ports"), "Required value");
    }
    let mut names = HashSet::new();
    let mut ports = HashSet::new();
    for (i, p) in s.ports.iter().enumerate() {
        let path = spec.field("ports").index(i);
        if s.ports.len() > 1 && p.name.is_empty() {
            errs.add(
                &path.field("name"),
                "Required value: a Service with several ports names each",
            );
        }
        if !p.name.is_empty() {
            if !names::is_dns1123_label(&p.name) {
                errs.add(&path.field("name"), names::dns1123_label_message(&p.name));
            }
            if !names.insert(p.name.as_str()) {
                errs.add(
                    &path.field("name"),
                    format!("Duplicate value: {:?}", p.name),
                );
            }
        }
        errs.one_of(&path.field("protocol"), &p.protocol, PROTOCOLS);
        validate_port_number(errs, &path.field("port"), p.port);
        if !ports.insert((p.port, p.protocol.as_str())) {
            errs.add(
                &path,
                format!("Duplicate value: port {} ({})", p.port, p.protocol),
            );
        }
        match &p.target_port {
            Some(IntOrString::Int(t)) => validate_port_number(errs, &path.field("targetPort"), *t),
            Some(IntOrString::String(name)) if !is_port_name(name) => errs.add(
                &path.field("targetPort"),
                format!(
                    "Invalid value: {name:?}: must be a port number or an IANA service name \
                     (at most 15 lower-case letters, digits and dashes, at least one letter)"
                ),
            ),
            _ => {}
        }
        if let Some(np) = p.node_port {
            if s.type_ != NODE_PORT {
                errs.add(
                    &path.field("nodePort"),
                    format!("Forbidden: may not be used when `type` is {:?}", s.type_),
                );
            } else {
                validate_port_number(errs, &path.field("nodePort"), np);
            }
        }
    }
}

pub(super) fn validate_endpoint_slice(errs: &mut Errors, slice: &EndpointSlice) {
    let address_type = Path::root("addressType");
    errs.one_of(
        &address_type,
        &slice.address_type,
        &["IPv4", "IPv6", "FQDN"],
    );
    if slice.endpoints.len() > 1000 {
        errs.add(
            &Path::root("endpoints"),
            format!(
                "Too many: {}: must have at most 1000 items",
                slice.endpoints.len()
            ),
        );
    }
    for (i, e) in slice.endpoints.iter().enumerate() {
        let path = Path::root("endpoints").index(i).field("addresses");
        if e.addresses.is_empty() || e.addresses.len() > 100 {
            errs.add(
                &path,
                "Invalid value: must have between 1 and 100 addresses",
            );
        }
        for (j, a) in e.addresses.iter().enumerate() {
            let ok = match slice.address_type.as_str() {
                "IPv4" => a.parse::<Ipv4Addr>().is_ok(),
                "IPv6" => matches!(a.parse::<IpAddr>(), Ok(IpAddr::V6(_))),
                _ => names::is_dns1123_subdomain(a),
            };
            if !ok {
                errs.add(
                    &path.index(j),
                    format!(
                        "Invalid value: {a:?}: must be a valid {} address",
                        slice.address_type
                    ),
                );
            }
        }
    }
    let mut names = HashSet::new();
    for (i, p) in slice.ports.iter().enumerate() {
        let path = Path::root("ports").index(i);
        let name = p.name.clone().unwrap_or_default();
        if !names.insert(name.clone()) {
            errs.add(&path.field("name"), format!("Duplicate value: {name:?}"));
        }
        if let Some(proto) = &p.protocol {
            errs.one_of(&path.field("protocol"), proto, PROTOCOLS);
        }
        if let Some(port) = p.port {
            validate_port_number(errs, &path.field("port"), port);
        }
    }
}
