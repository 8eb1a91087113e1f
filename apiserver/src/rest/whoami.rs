//! POST `/apis/authentication.k8s.io/v1/selfsubjectreviews`: who the server takes the caller
//! for, as kube-apiserver's SelfSubjectReview answers it (`kubectl auth whoami`): the user's
//! name, uid and groups, after impersonation. A review is a question: answered, never
//! stored. Every authenticated user may ask (`system:basic-user`).

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};
use skiff_proto::api::Time;

use super::request::object_body;
use super::status::ApiError;
use super::verbs::json_response;
use crate::access::{Attributes, User};

const GROUP: &str = "authentication.k8s.io";
const VERSION: &str = "v1";
pub const RESOURCE: &str = "selfsubjectreviews";
const API_VERSION: &str = "authentication.k8s.io/v1";

/// Whether a request for `group`/`version`/`path` asks this question.
pub fn asks(group: &str, version: &str, path: &str) -> bool {
    group == GROUP && version == VERSION && path == RESOURCE
}

/// What asking is authorized and audited as.
pub fn attributes() -> Attributes {
    let mut a = Attributes::resource("create", GROUP, RESOURCE, None, "", "");
    if let Attributes::Resource(r) = &mut a {
        r.version = VERSION.to_owned();
    }
    a
}

/// The answer to `user`'s SelfSubjectReview in `body` (authorized by the caller).
pub fn create(user: &User, headers: &HeaderMap, body: &[u8]) -> Result<Response, ApiError> {
    let request = object_body(headers, body)?;
    let text = |field: &str, default: &'static str| {
        request
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or(default)
            .to_owned()
    };
    let (kind, version) = (
        text("kind", "SelfSubjectReview"),
        text("apiVersion", API_VERSION),
    );
    if kind != "SelfSubjectReview" || version != API_VERSION {
        return Err(ApiError::bad_request(format!(
            "the body is a {version} {kind}: {RESOURCE} takes an {API_VERSION} SelfSubjectReview"
        )));
    }
    Ok(json_response(StatusCode::CREATED, &answer(user), &[]))
}

fn answer(user: &User) -> Value {
    let mut info = json!({ "username": user.name, "groups": user.groups });
    if !user.uid.is_empty() {
        info["uid"] = json!(user.uid);
    }
    json!({
        "kind": "SelfSubjectReview",
        "apiVersion": API_VERSION,
        "metadata": { "creationTimestamp": Time::now() },
        "status": { "userInfo": info },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_names_the_user_as_kube_apiserver_does() {
        let user = User {
            name: "alice".into(),
            uid: String::new(),
            groups: vec!["dev".into(), "system:authenticated".into()],
        };
        let a = answer(&user);
        assert_eq!(a["kind"], "SelfSubjectReview");
        assert_eq!(
            a["status"],
            json!({"userInfo": {"username": "alice", "groups": ["dev", "system:authenticated"]}})
        );
        assert!(a["metadata"]["creationTimestamp"].is_string());
        let with_uid = answer(&User {
            uid: "42".into(),
            ..user
        });
        assert_eq!(with_uid["status"]["userInfo"]["uid"], "42");
    }
}
