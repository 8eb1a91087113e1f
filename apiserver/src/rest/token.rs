//! POST `serviceaccounts/<name>/token`: a TokenRequest (authentication.k8s.io/v1) answered
//! with a service account token, as kube-apiserver's TokenRequest API answers it
//! (`kubectl create token`, the kubelet's projected tokens, client libraries).
//!
//! The request may name audiences (the API's own when none), a lifetime (an hour when none,
//! ten minutes at least) and the Pod or Secret the token is bound to: it authenticates only
//! while that object exists, with the uid it had. Only a server with a signing key serves
//! this subresource; the others answer 404, as kube-apiserver does.

use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};
use skiff_proto::api::{Kind, Time};

use super::request::{Target, object_body};
use super::status::{ApiError, Reason};
use super::verbs::json_response;
use crate::access::authn::Credentials;
use crate::access::serviceaccount::{BoundRef, DEFAULT_EXPIRATION, MIN_EXPIRATION, TokenSpec};
use crate::cluster::ClusterApi;

const API_VERSION: &str = "authentication.k8s.io/v1";

fn invalid(field: &str, why: String) -> ApiError {
    ApiError::new(
        Reason::Invalid,
        format!("TokenRequest.authentication.k8s.io is invalid: {field}: {why}"),
    )
}

/// The uid of `kind` `namespace/name` (as the authenticator checks it), or the error that
/// says it is not there.
fn uid_of(api: &ClusterApi, kind: Kind, namespace: &str, name: &str) -> Result<String, ApiError> {
    Credentials::uid_of(api, kind.name(), namespace, name).ok_or_else(|| {
        ApiError::new(
            Reason::NotFound,
            format!("{} {name:?} not found", kind.qualified_resource()),
        )
    })
}

/// The TokenRequest's spec, checked against what is stored.
fn token_spec(api: &ClusterApi, target: &Target, request: &Value) -> Result<TokenSpec, ApiError> {
    let kind = request
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("TokenRequest");
    let version = request
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or(API_VERSION);
    if kind != "TokenRequest" || version != API_VERSION {
        return Err(ApiError::bad_request(format!(
            "the body is a {version} {kind}: serviceaccounts/token takes an {API_VERSION} TokenRequest"
        )));
    }
    let spec = request.get("spec").cloned().unwrap_or(Value::Null);
    let audiences: Vec<String> = match spec.get("audiences") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| invalid("spec.audiences", "must be strings".into()))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(invalid("spec.audiences", "must be a list".into())),
    };
    let expiration = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION,
        Some(v) => {
            let secs = v.as_i64().ok_or_else(|| {
                invalid(
                    "spec.expirationSeconds",
                    format!("Invalid value: {v}: must be an integer"),
                )
            })?;
            if secs < 0 || (secs as u64) < MIN_EXPIRATION.as_secs() {
                return Err(invalid(
                    "spec.expirationSeconds",
                    format!(
                        "Invalid value: {secs}: may not specify a duration less than 10 minutes"
                    ),
                ));
            }
            if secs > i64::from(u32::MAX) {
                return Err(invalid(
                    "spec.expirationSeconds",
                    format!(
                        "Invalid value: {secs}: may not specify a duration longer than 2^32 seconds"
                    ),
                ));
            }
            Duration::from_secs(secs as u64)
        }
    };
    let ns = target.namespace.as_str();
    let service_account = BoundRef {
        name: target.name.clone(),
        uid: uid_of(api, service_account_kind(), ns, &target.name)?,
    };
    let (mut pod, mut secret) = (None, None);
    if let Some(r) = spec.get("boundObjectRef").filter(|r| !r.is_null()) {
        let text = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or("");
        let (bound_kind, slot) = match (text("apiVersion"), text("kind")) {
            ("v1" | "", "Pod") => (Kind::Pod, &mut pod),
            ("v1" | "", "Secret") => (Kind::Secret, &mut secret),
            (v, k) => {
                return Err(invalid(
                    "spec.boundObjectRef",
                    format!(
                        "Unsupported value: \"{v} {k}\": supported values: \"v1 Pod\", \"v1 Secret\""
                    ),
                ));
            }
        };
        let name = text("name");
        if name.is_empty() {
            return Err(invalid("spec.boundObjectRef.name", "Required value".into()));
        }
        let uid = uid_of(api, bound_kind, ns, name)?;
        let asked = text("uid");
        if !asked.is_empty() && asked != uid {
            return Err(ApiError::new(
                Reason::Conflict,
                format!(
                    "the UID in the bound object reference ({asked}) does not match the UID in record ({uid}); the object might have been deleted and then recreated"
                ),
            ));
        }
        *slot = Some(BoundRef {
            name: name.to_owned(),
            uid,
        });
    }
    Ok(TokenSpec {
        namespace: ns.to_owned(),
        service_account,
        audiences,
        expiration,
        pod,
        secret,
    })
}

fn service_account_kind() -> Kind {
    Kind::from_name("ServiceAccount").expect("invariant: ServiceAccount is declared")
}

/// POST `serviceaccounts/<name>/token`.
pub async fn create(
    api: &ClusterApi,
    target: &Target,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let keys = api
        .access
        .service_account_tokens
        .as_ref()
        .filter(|k| k.issues())
        .ok_or_else(|| {
            ApiError::new(
                Reason::NotFound,
                "the server could not find the requested resource (serviceaccounts/token): this API server issues no service account tokens (no --service-account-signing-key-file)",
            )
        })?;
    api.barrier(false).await?;
    let request = object_body(headers, body)?;
    let spec = token_spec(api, target, &request)?;
    let (token, expires) = keys
        .issue(&spec)
        .ok_or_else(|| ApiError::new(Reason::InternalError, "signing the token failed"))?;
    let expires = Time::from_unix(i64::try_from(expires).unwrap_or(i64::MAX));
    let audiences = if spec.audiences.is_empty() {
        keys.api_audiences().to_vec()
    } else {
        spec.audiences.clone()
    };
    let mut out_spec = json!({
        "audiences": audiences,
        "expirationSeconds": spec.expiration.as_secs(),
    });
    if let Some(r) = request
        .pointer("/spec/boundObjectRef")
        .filter(|r| !r.is_null())
    {
        let mut r = r.clone();
        let uid = spec
            .pod
            .as_ref()
            .or(spec.secret.as_ref())
            .map(|b| b.uid.clone());
        r["uid"] = json!(uid);
        out_spec["boundObjectRef"] = r;
    }
    let answer = json!({
        "kind": "TokenRequest",
        "apiVersion": API_VERSION,
        "metadata": {
            "name": target.name,
            "namespace": target.namespace,
            "creationTimestamp": Time::now(),
        },
        "spec": out_spec,
        "status": {"token": token, "expirationTimestamp": expires},
    });
    Ok(json_response(StatusCode::CREATED, &answer, &[]))
}
