//! Fuzz targets: the decoders that face the network, each a function of raw bytes that must
//! return, whatever the bytes, without panicking (a panic, an integer overflow in a debug
//! build, or a stack overflow is a finding). `apiserver/tests/fuzz.rs` drives them over the
//! corpus in `fuzz/corpus/<target>/` and its mutations, for a bounded time in the default
//! test suite and as long as asked (`SKIFF_FUZZ_SECS`) outside it.
//!
//! The first byte or two of an input choose what the rest is (a content type, a kind, a
//! message type), so one target covers a family of decoders.

use axum::http::{HeaderMap, HeaderValue, header};
use prost::Message as _;
use skiff_proto::api::schema::FieldValidation;
use skiff_proto::api::{Kind, defaults, validation};
use skiff_proto::cluster::v1 as pb;
use skiff_proto::etcd::{
    PbDeleteRequest, PbPutRequest, PbRangeRequest, PbTxnRequest, PbWatchRequest,
};

use crate::cluster::{decode_request, from_pb};
use crate::rest::patch::{self, PatchType};
use crate::rest::request::{Params, Target, object_body};

/// A fuzz target: its name (its corpus directory) and its function.
#[derive(Debug, Clone, Copy)]
pub struct FuzzTarget {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

/// Every target.
pub const TARGETS: &[FuzzTarget] = &[
    FuzzTarget {
        name: "rest_body",
        run: rest_body,
    },
    FuzzTarget {
        name: "rest_patch",
        run: rest_patch,
    },
    FuzzTarget {
        name: "rest_request",
        run: rest_request,
    },
    FuzzTarget {
        name: "manifest",
        run: manifest,
    },
    FuzzTarget {
        name: "tokens",
        run: tokens,
    },
    FuzzTarget {
        name: "grpc",
        run: grpc,
    },
    FuzzTarget {
        name: "spdy",
        run: spdy,
    },
];

/// The target named `name`.
pub fn target(name: &str) -> Option<FuzzTarget> {
    TARGETS.iter().copied().find(|t| t.name == name)
}

/// The kind a selector byte names.
fn kind_of(b: u8) -> Kind {
    Kind::ALL[usize::from(b) % Kind::ALL.len()]
}

/// A create or update body of the REST API: byte 0 picks the content type (JSON, YAML,
/// Kubernetes protobuf), byte 1 the kind; then decoding, schema checks, defaulting and
/// validation, as a create runs them.
pub fn rest_body(data: &[u8]) {
    let [ct, kind, body @ ..] = data else { return };
    let content_type = match ct % 3 {
        0 => "application/json",
        1 => "application/yaml",
        _ => crate::rest::protobuf::MEDIA_TYPE,
    };
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    let Ok(value) = object_body(&headers, body) else {
        return;
    };
    let json = serde_json::to_vec(&value).expect("invariant: JSON values always encode");
    if let Ok((mut object, _)) = decode_request(kind_of(*kind), &json, FieldValidation::Strict) {
        defaults::apply(&mut object);
        let _ = validation::validate(&object);
        let _ = object.to_json();
    }
}

/// A PATCH body: byte 0 picks the patch type, byte 1 the kind; applied to a small object of
/// that kind, the result decoded and validated as an update would be.
pub fn rest_patch(data: &[u8]) {
    let [pt, kind, body @ ..] = data else { return };
    let patch_type = match pt % 4 {
        0 => PatchType::Json,
        1 => PatchType::Merge,
        2 => PatchType::StrategicMerge,
        _ => PatchType::Apply,
    };
    let kind = kind_of(*kind);
    let original = serde_json::json!({
        "apiVersion": kind.api_version(),
        "kind": kind.name(),
        "metadata": {"name": "x", "namespace": "default", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    });
    if let Ok(patched) = patch::apply(kind, patch_type, &original, body) {
        let json = serde_json::to_vec(&patched).expect("invariant: JSON values always encode");
        if let Ok((object, _)) = decode_request(kind, &json, FieldValidation::Strict) {
            let _ = validation::validate(&object);
        }
    }
}

/// A request line: a path under `/api/v1` or `/apis/…` on the first line, a query string on
/// the second, an `Authorization` header on the third; the path parsed into a target, the
/// query into parameters (label and field selectors against the target's kind), the header
/// into a bearer token.
pub fn rest_request(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.splitn(3, '\n');
    let path = lines.next().unwrap_or_default();
    let query = lines.next();
    let authorization = lines.next().unwrap_or_default();
    // `/api/v1/REST` or `/apis/GROUP/VERSION/REST`, as the router splits them.
    let parts: Vec<&str> = path.trim_start_matches('/').splitn(4, '/').collect();
    let (api_version, rest) = match parts.as_slice() {
        ["apis", group, version, rest] => (format!("{group}/{version}"), rest.to_string()),
        ["api", version, rest @ ..] => (version.to_string(), rest.join("/")),
        _ => ("v1".to_owned(), path.to_owned()),
    };
    let target = Target::parse(&api_version, &rest);
    if let Ok(params) = Params::parse(query) {
        let kind = target.as_ref().map_or(Kind::Pod, |t| t.kind);
        let _ = skiff_proto::selector::LabelQuery::parse(&params.label_selector);
        let _ = skiff_proto::selector::FieldQuery::parse(kind, &params.field_selector);
    }
    let _ = crate::access::bearer(authorization);
}

/// A manifest file (`skiff apply -f`, `kubectl apply -f` through the REST API): YAML or
/// JSON documents, each decoded and validated.
pub fn manifest(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(docs) = skiff_proto::manifest::decode("fuzz.yaml", &text) {
        for d in docs {
            let _ = validation::validate(&d.object);
        }
    }
}

/// The files a member reads at start that name who is who: byte 0 picks the static token
/// file (kube-apiserver's CSV) or the audit policy (YAML).
pub fn tokens(data: &[u8]) {
    let [which, text @ ..] = data else { return };
    let text = String::from_utf8_lossy(text);
    if which % 2 == 0 {
        let _ = crate::access::authn::parse_tokens(&text);
    } else {
        let _ = crate::access::audit::Policy::parse(&text);
    }
}

/// A gRPC request message: byte 0 picks the message (the cluster API's create, update,
/// list and watch; etcd's range, put, delete range, txn and watch), the rest is its
/// protobuf; decoded, then converted and checked as the service does.
pub fn grpc(data: &[u8]) {
    let [which, bytes @ ..] = data else { return };
    match which % 9 {
        0 => {
            if let Ok(r) = pb::CreateRequest::decode(bytes)
                && let Ok(o) = from_pb(r.object)
            {
                let _ = validation::validate(&o);
            }
        }
        1 => {
            if let Ok(r) = pb::UpdateRequest::decode(bytes)
                && let Ok(o) = from_pb(r.object)
            {
                let _ = validation::validate(&o);
            }
        }
        2 => {
            if let Ok(r) = pb::ListRequest::decode(bytes)
                && let Some(s) = r.selectors
            {
                let kind = crate::cluster::parse_kind(&r.kind).unwrap_or(Kind::Pod);
                let _ = skiff_proto::selector::LabelQuery::parse(&s.label_selector);
                let _ = skiff_proto::selector::FieldQuery::parse(kind, &s.field_selector);
            }
        }
        3 => {
            if let Ok(r) = pb::WatchRequest::decode(bytes)
                && let Some(s) = r.selectors
            {
                let kind = crate::cluster::parse_kind(&r.kind).unwrap_or(Kind::Pod);
                let _ = skiff_proto::selector::FieldQuery::parse(kind, &s.field_selector);
            }
        }
        4 => {
            if let Ok(r) = PbRangeRequest::decode(bytes) {
                let _ = skiff_store::etcd::convert::range_request(r);
            }
        }
        5 => {
            if let Ok(r) = PbPutRequest::decode(bytes) {
                let _ = skiff_store::etcd::convert::put_request(r);
            }
        }
        6 => {
            if let Ok(r) = PbDeleteRequest::decode(bytes) {
                let _ = skiff_store::etcd::convert::delete_request(r);
            }
        }
        7 => {
            if let Ok(r) = PbTxnRequest::decode(bytes) {
                let _ = skiff_store::etcd::convert::txn_request(r, 128);
            }
        }
        _ => {
            if let Ok(r) = PbWatchRequest::decode(bytes)
                && let Some(u) = r.request_union
            {
                let _ = skiff_store::etcd::convert::watch_request(u);
            }
        }
    }
}

/// A SPDY/3.1 connection's bytes (`kubectl port-forward`): its frames read one after another,
/// header blocks inflated on one zlib stream, and each new stream's headers read as the
/// port-forward router reads them, until the bytes end or a frame is refused.
pub fn spdy(data: &[u8]) {
    let mut reader = crate::rest::spdy::FrameReader::new(data);
    while let Ok(Some(frame)) = futures::executor::block_on(reader.next()) {
        if let crate::rest::spdy::Frame::SynStream { id, headers, .. } = frame {
            let _ = crate::rest::portforward::stream_headers(id, &headers);
        }
    }
}
