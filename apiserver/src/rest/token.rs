//! POST `serviceaccounts/<name>/token`: a TokenRequest (authentication.k8s.io/v1) answered
//! with a service account token, as kube-apiserver's TokenRequest API answers it
//! (`kubectl create token`, the kubelet's projected tokens, client libraries).
//!
//! The request may name audiences (the API's own when none), a lifetime (an hour when none,
//! ten minutes at least) and the Pod or Secret the token is bound to: it authenticates only
//! while that object exists, with the uid it had. Only a server with a signing key serves
//! this subresource; the others answer 404, as kube-apiserver does. This face parses the
//! TokenRequest; the checks and the token are `cluster::token`'s, shared with the gRPC
//! face.

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};
use skiff_proto::api::Time;

use super::request::{Target, object_body};
use super::status::ApiError;
use super::verbs::json_response;
use crate::cluster::ClusterApi;
use crate::cluster::ClusterError;
use crate::cluster::token::{self, BoundKind, BoundObject, TokenRequest};

const API_VERSION: &str = "authentication.k8s.io/v1";

fn invalid(field: &'static str, why: String) -> ApiError {
    ClusterError::InvalidTokenRequest { field, why }.into()
}

/// The TokenRequest's spec, typed (the checks against what is stored are
/// [`ClusterApi::issue_token`]'s).
fn token_request(target: &Target, request: &Value) -> Result<TokenRequest, ApiError> {
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
    let expiration_seconds = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_i64().ok_or_else(|| {
            invalid(
                "spec.expirationSeconds",
                format!("Invalid value: {v}: must be an integer"),
            )
        })?),
    };
    // Refused before the account is looked up, as this face always has.
    token::expiration(expiration_seconds)?;
    let mut bound = None;
    if let Some(r) = spec.get("boundObjectRef").filter(|r| !r.is_null()) {
        let text = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or("");
        let kind = match (text("apiVersion"), text("kind")) {
            ("v1" | "", "Pod") => BoundKind::Pod,
            ("v1" | "", "Secret") => BoundKind::Secret,
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
        bound = Some(BoundObject {
            kind,
            name: name.to_owned(),
            uid: text("uid").to_owned(),
        });
    }
    Ok(TokenRequest {
        namespace: target.namespace.clone(),
        service_account: target.name.clone(),
        audiences,
        expiration_seconds,
        bound,
    })
}

/// POST `serviceaccounts/<name>/token`.
pub async fn create(
    api: &ClusterApi,
    target: &Target,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    api.token_issuer()?;
    let request = object_body(headers, body)?;
    let issued = api.issue_token(&token_request(target, &request)?).await?;
    let mut out_spec = json!({
        "audiences": issued.audiences,
        "expirationSeconds": issued.expiration.as_secs(),
    });
    if let Some(r) = request
        .pointer("/spec/boundObjectRef")
        .filter(|r| !r.is_null())
    {
        let mut r = r.clone();
        r["uid"] = json!(issued.bound_uid);
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
        "status": {"token": issued.token, "expirationTimestamp": Time::from_unix(issued.expires_unix)},
    });
    Ok(json_response(StatusCode::CREATED, &answer, &[]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::testing::{TestApi, secured_access, team};
    use crate::rest::status::Reason;
    use axum::body::to_bytes;

    fn target(account: &str) -> Target {
        Target {
            kind: token::service_account_kind(),
            namespace: "team".into(),
            name: account.into(),
            subresource: Some("token".into()),
        }
    }

    fn parsed(spec: Value) -> Result<TokenRequest, ApiError> {
        let body = json!({"apiVersion": API_VERSION, "kind": "TokenRequest", "spec": spec});
        token_request(&target("web"), &body)
    }

    /// The body's spec, typed; what this face refuses before anything is read, in the words
    /// it always had.
    #[test]
    fn token_requests_parse() {
        assert_eq!(
            parsed(json!({
                "audiences": ["vault"],
                "expirationSeconds": 700,
                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web-1", "uid": "u"},
            }))
            .unwrap(),
            TokenRequest {
                namespace: "team".into(),
                service_account: "web".into(),
                audiences: vec!["vault".into()],
                expiration_seconds: Some(700),
                bound: Some(BoundObject {
                    kind: BoundKind::Pod,
                    name: "web-1".into(),
                    uid: "u".into(),
                }),
            }
        );
        for (spec, reason, message) in [
            (
                json!({"expirationSeconds": 60}),
                Reason::Invalid,
                "TokenRequest.authentication.k8s.io is invalid: spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes",
            ),
            (
                json!({"expirationSeconds": "soon"}),
                Reason::Invalid,
                "TokenRequest.authentication.k8s.io is invalid: spec.expirationSeconds: Invalid value: \"soon\": must be an integer",
            ),
            (
                json!({"audiences": "vault"}),
                Reason::Invalid,
                "TokenRequest.authentication.k8s.io is invalid: spec.audiences: must be a list",
            ),
            (
                json!({"boundObjectRef": {"kind": "Node", "apiVersion": "v1", "name": "n1"}}),
                Reason::Invalid,
                "TokenRequest.authentication.k8s.io is invalid: spec.boundObjectRef: Unsupported value: \"v1 Node\": supported values: \"v1 Pod\", \"v1 Secret\"",
            ),
            (
                json!({"boundObjectRef": {"kind": "Pod"}}),
                Reason::Invalid,
                "TokenRequest.authentication.k8s.io is invalid: spec.boundObjectRef.name: Required value",
            ),
        ] {
            let e = parsed(spec.clone()).unwrap_err();
            assert_eq!((e.reason, e.message.as_str()), (reason, message), "{spec}");
        }
        let e =
            token_request(&target("web"), &json!({"kind": "Pod", "apiVersion": "v1"})).unwrap_err();
        assert_eq!(e.reason, Reason::BadRequest);
    }

    /// The answer: the audiences and lifetime the token got, the bound object with its uid.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_answer_echoes_the_request_resolved() {
        let t = TestApi::start(secured_access).await;
        let (web, _) = team(&t).await;
        let body = json!({
            "apiVersion": API_VERSION,
            "kind": "TokenRequest",
            "spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web-1"}},
        });
        let answer = create(
            &t.api,
            &target("web"),
            &HeaderMap::new(),
            &serde_json::to_vec(&body).unwrap(),
        )
        .await
        .expect("created");
        assert_eq!(answer.status(), StatusCode::CREATED);
        let answer: Value =
            serde_json::from_slice(&to_bytes(answer.into_body(), 1 << 20).await.unwrap()).unwrap();
        assert_eq!(answer["spec"]["boundObjectRef"]["uid"], json!(web));
        assert_eq!(answer["spec"]["expirationSeconds"], 3600);
        assert_eq!(
            answer["spec"]["audiences"],
            json!([crate::access::serviceaccount::DEFAULT_ISSUER])
        );
        assert!(answer["status"]["token"].is_string(), "{answer}");
        let e = create(&t.api, &target("nobody"), &HeaderMap::new(), b"{}")
            .await
            .expect_err("no such account");
        assert_eq!(
            (e.reason, e.message.as_str()),
            (Reason::NotFound, "serviceaccounts \"nobody\" not found")
        );
        t.stop().await;

        let t = TestApi::start(|_| crate::access::AccessConfig::default()).await;
        let e = create(&t.api, &target("web"), &HeaderMap::new(), b"not json")
            .await
            .expect_err("no key");
        assert_eq!(e.reason, Reason::NotFound);
        assert_eq!(
            e.message,
            "the server could not find the requested resource (serviceaccounts/token): this API server issues no service account tokens (no --service-account-signing-key-file)"
        );
        t.stop().await;
    }
}
