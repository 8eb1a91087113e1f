//! Access reviews (authorization.k8s.io/v1): `SelfSubjectAccessReview` asks whether the
//! requesting user may do something (`kubectl auth can-i`), `SubjectAccessReview` whether
//! a named user may (a node agent asking on behalf of a caller). Both are answered by the
//! same authorizers every request goes through, and stored nowhere.

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use skiff_proto::api::rbac::{AccessReview, AccessReviewStatus};
use skiff_proto::api::{Kind, Object, validation};

use super::request::{Params, Target, object_body};
use super::status::ApiError;
use super::verbs::json_response;
use crate::access::{Attributes, User};
use crate::cluster::{ClusterApi, ClusterError, decode_request};

pub async fn create(
    api: &ClusterApi,
    user: &User,
    target: &Target,
    params: &Params,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let value = object_body(headers, body)?;
    let json = serde_json::to_vec(&value).expect("invariant: JSON values always encode");
    let (object, warnings) = decode_request(
        target.kind,
        &json,
        params.field_validation.unwrap_or_default(),
    )?;
    let mut object = object;
    skiff_proto::api::defaults::apply(&mut object);
    validation::validate(&object).map_err(|source| ClusterError::Invalid {
        kind: target.kind,
        name: String::new(),
        source,
    })?;
    let (review, subject) = match object {
        Object::SelfSubjectAccessReview(r) => (r, user.clone()),
        Object::SubjectAccessReview(r) => {
            let subject = User {
                name: r.spec.user.clone(),
                uid: r.spec.uid.clone(),
                groups: r.spec.groups.clone(),
            };
            (r, subject)
        }
        other => {
            return Err(ApiError::bad_request(format!(
                "{} is not an access review",
                other.kind()
            )));
        }
    };
    let answered = answer(api, review, &subject)?;
    let mut out = match target.kind {
        Kind::SelfSubjectAccessReview => Object::SelfSubjectAccessReview(answered),
        _ => Object::SubjectAccessReview(answered),
    };
    out.set_type_meta();
    Ok(json_response(
        StatusCode::CREATED,
        &out.to_json_value(),
        &warnings,
    ))
}

/// The review with its status: what the authorizers decide for `subject`.
fn answer(
    api: &ClusterApi,
    mut review: AccessReview,
    subject: &User,
) -> Result<AccessReview, ApiError> {
    let attributes = match (
        review.spec.resource_attributes.clone(),
        review.spec.non_resource_attributes.clone(),
    ) {
        (Some(r), _) => Attributes::Resource(r),
        (None, Some(p)) => Attributes::NonResource(p),
        (None, None) => {
            return Err(ApiError::bad_request(
                "spec.resourceAttributes: required value: exactly one of nonResourceAttributes \
                 or resourceAttributes must be specified",
            ));
        }
    };
    let decision = api.access.decide(subject, &attributes, api);
    review.status = Some(AccessReviewStatus {
        allowed: decision.allowed,
        denied: false,
        reason: decision.reason,
        evaluation_error: String::new(),
    });
    Ok(review)
}
