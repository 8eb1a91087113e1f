//! Access reviews on the REST face: the body decoded as any object is, then answered by
//! [`ClusterApi::review`], the same answer the gRPC face gives.

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::request::{Params, Target, object_body};
use super::status::ApiError;
use super::verbs::{encode, json_response, validation};
use crate::access::User;
use crate::cluster::{ClusterApi, decode_request};

pub async fn create(
    api: &ClusterApi,
    user: &User,
    target: &Target,
    params: &Params,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let value = object_body(headers, body)?;
    let (object, warnings) = decode_request(target.kind, &encode(&value), validation(params))?;
    let answered = api.review(user, object)?;
    Ok(json_response(
        StatusCode::CREATED,
        &answered.to_json_value(),
        &warnings,
    ))
}
