//! networking.k8s.io/v1 Ingresses in Kubernetes' protobuf, as `kubectl create ingress` sends
//! them, turned into their JSON: the class, the default backend, TLS and the rules with their
//! HTTP paths, each backend a Service (by port number or name) or a typed resource. The
//! status is the server's and is not read.

use k8s_pb::api::core::v1 as core;
use k8s_pb::api::networking::v1 as networking;
use serde_json::{Map, Value, json};

use super::wire::{object, put, put_str};

/// The JSON of an Ingress backend.
fn backend(b: networking::IngressBackend) -> Value {
    let mut o = Map::new();
    if let Some(svc) = b.service {
        let mut s = Map::new();
        put_str(&mut s, "name", svc.name);
        if let Some(port) = svc.port {
            let mut p = Map::new();
            put_str(&mut p, "name", port.name);
            put(&mut p, "number", port.number.filter(|n| *n != 0));
            s.insert("port".into(), Value::Object(p));
        }
        o.insert("service".into(), Value::Object(s));
    }
    if let Some(r) = b.resource {
        o.insert("resource".into(), typed_local_reference(r));
    }
    Value::Object(o)
}

fn typed_local_reference(r: core::TypedLocalObjectReference) -> Value {
    let mut o = Map::new();
    put(&mut o, "apiGroup", r.api_group);
    put_str(&mut o, "kind", r.kind);
    put_str(&mut o, "name", r.name);
    Value::Object(o)
}

/// The JSON of an Ingress rule: the host, and the HTTP paths inline beside it (Go embeds the
/// rule's value).
fn rule(r: networking::IngressRule) -> Value {
    let mut o = Map::new();
    put_str(&mut o, "host", r.host);
    if let Some(http) = r.ingress_rule_value.and_then(|v| v.http) {
        let paths: Vec<Value> = http
            .paths
            .into_iter()
            .map(|p| {
                let mut path = Map::new();
                put_str(&mut path, "path", p.path);
                put_str(&mut path, "pathType", p.path_type);
                if let Some(b) = p.backend {
                    path.insert("backend".into(), backend(b));
                }
                Value::Object(path)
            })
            .collect();
        o.insert("http".into(), json!({ "paths": paths }));
    }
    Value::Object(o)
}

/// The JSON of a protobuf networking.k8s.io/v1 Ingress.
pub(super) fn ingress(i: networking::Ingress) -> Map<String, Value> {
    let mut o = object(i.metadata);
    if let Some(spec) = i.spec {
        let mut s = Map::new();
        // A pointer in Go: an empty class is sent, and refused, as kube-apiserver does.
        put(&mut s, "ingressClassName", spec.ingress_class_name);
        if let Some(b) = spec.default_backend {
            s.insert("defaultBackend".into(), backend(b));
        }
        if !spec.tls.is_empty() {
            let tls: Vec<Value> = spec
                .tls
                .into_iter()
                .map(|t| {
                    let mut o = Map::new();
                    if !t.hosts.is_empty() {
                        o.insert("hosts".into(), json!(t.hosts));
                    }
                    put_str(&mut o, "secretName", t.secret_name);
                    Value::Object(o)
                })
                .collect();
            s.insert("tls".into(), Value::Array(tls));
        }
        if !spec.rules.is_empty() {
            s.insert(
                "rules".into(),
                Value::Array(spec.rules.into_iter().map(rule).collect()),
            );
        }
        o.insert("spec".into(), Value::Object(s));
    }
    o
}
