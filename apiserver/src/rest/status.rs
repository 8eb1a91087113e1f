//! Errors as Kubernetes clients expect them: a `metav1.Status` body with kube-apiserver's HTTP
//! code, `reason` and `details` (the field causes of an Invalid object), so kubectl prints its
//! familiar messages and client libraries branch on the reason (client-go's
//! `IsNotFound`, `IsConflict`, a reflector's relist on `Expired`).
//!
//! Every cluster API error reaches REST clients through [`ApiError::from`], one mapping beside
//! the gRPC face's `From<ClusterError> for Status`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use skiff_proto::api::Kind;
use tonic::Code;

use crate::cluster::ClusterError;

/// kube-apiserver's `StatusReason`s that Skiff answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    BadRequest,
    NotFound,
    AlreadyExists,
    Conflict,
    Invalid,
    Forbidden,
    Unauthorized,
    MethodNotAllowed,
    NotAcceptable,
    UnsupportedMediaType,
    RequestEntityTooLarge,
    Expired,
    TooManyRequests,
    Timeout,
    ServiceUnavailable,
    InternalError,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::BadRequest => "BadRequest",
            Reason::NotFound => "NotFound",
            Reason::AlreadyExists => "AlreadyExists",
            Reason::Conflict => "Conflict",
            Reason::Invalid => "Invalid",
            Reason::Forbidden => "Forbidden",
            Reason::Unauthorized => "Unauthorized",
            Reason::MethodNotAllowed => "MethodNotAllowed",
            Reason::NotAcceptable => "NotAcceptable",
            Reason::UnsupportedMediaType => "UnsupportedMediaType",
            Reason::RequestEntityTooLarge => "RequestEntityTooLarge",
            Reason::Expired => "Expired",
            Reason::TooManyRequests => "TooManyRequests",
            Reason::Timeout => "Timeout",
            Reason::ServiceUnavailable => "ServiceUnavailable",
            Reason::InternalError => "InternalError",
        }
    }

    pub fn code(self) -> StatusCode {
        match self {
            Reason::BadRequest => StatusCode::BAD_REQUEST,
            Reason::NotFound => StatusCode::NOT_FOUND,
            Reason::AlreadyExists | Reason::Conflict => StatusCode::CONFLICT,
            Reason::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
            Reason::Forbidden => StatusCode::FORBIDDEN,
            Reason::Unauthorized => StatusCode::UNAUTHORIZED,
            Reason::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Reason::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
            Reason::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Reason::RequestEntityTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Reason::Expired => StatusCode::GONE,
            Reason::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            Reason::Timeout => StatusCode::GATEWAY_TIMEOUT,
            Reason::ServiceUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Reason::InternalError => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// One cause of a failure (`metav1.StatusCause`): a field at fault in an Invalid object, or
/// the budget that refused an eviction (no field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub reason: &'static str,
    pub message: String,
    pub field: String,
}

/// A failed request, answered as a `metav1.Status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub reason: Reason,
    pub message: String,
    /// `details.name` and `details.kind` (kube-apiserver puts the resource, `pods`, there for
    /// most reasons and the kind, `Pod`, for Invalid).
    pub name: String,
    pub kind: String,
    pub causes: Vec<Cause>,
    /// `details.retryAfterSeconds` and the `Retry-After` header: when a refusal that may
    /// pass later (429) is worth asking again.
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn new(reason: Reason, message: impl Into<String>) -> ApiError {
        ApiError {
            reason,
            message: message.into(),
            name: String::new(),
            kind: String::new(),
            causes: Vec::new(),
            retry_after: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(Reason::BadRequest, message)
    }

    fn about(mut self, kind: impl Into<String>, name: impl Into<String>) -> ApiError {
        self.kind = kind.into();
        self.name = name.into();
        self
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        let mut details = serde_json::Map::new();
        if !self.name.is_empty() {
            details.insert("name".into(), json!(self.name));
        }
        if !self.kind.is_empty() {
            details.insert("kind".into(), json!(self.kind));
        }
        if !self.causes.is_empty() {
            let causes: Vec<Value> = self
                .causes
                .iter()
                .map(|c| {
                    let mut cause = json!({"reason": c.reason, "message": c.message});
                    if !c.field.is_empty() {
                        cause["field"] = json!(c.field);
                    }
                    cause
                })
                .collect();
            details.insert("causes".into(), Value::Array(causes));
        }
        if let Some(seconds) = self.retry_after.filter(|s| *s > 0) {
            details.insert("retryAfterSeconds".into(), json!(seconds));
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason.as_str(),
            "code": self.reason.code().as_u16(),
        });
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.to_status())
            .expect("invariant: a Status always encodes as JSON");
        let mut response = (
            self.reason.code(),
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response();
        if let Some(seconds) = self.retry_after.filter(|s| *s > 0) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// `FieldValueRequired` and its siblings, from the wording of Skiff's validation messages.
fn cause_reason(message: &str) -> &'static str {
    let m = message.to_ascii_lowercase();
    if m.starts_with("required") {
        "FieldValueRequired"
    } else if m.starts_with("unsupported value") {
        "FieldValueNotSupported"
    } else if m.starts_with("duplicate") {
        "FieldValueDuplicate"
    } else if m.starts_with("forbidden") {
        "FieldValueForbidden"
    } else if m.starts_with("too long") || m.starts_with("must have at most") {
        "FieldValueTooLong"
    } else {
        "FieldValueInvalid"
    }
}

fn resource(kind: Kind) -> &'static str {
    kind.plural()
}

/// An eviction refused by a disruption budget, as kube-apiserver answers it: 429 with the
/// budget's reason as a `DisruptionBudget` cause.
fn disruption_budget(message: String, cause: String, retry_after: Option<u32>) -> ApiError {
    let mut err = ApiError::new(Reason::TooManyRequests, message);
    err.causes = vec![Cause {
        reason: "DisruptionBudget",
        message: cause,
        field: String::new(),
    }];
    err.retry_after = retry_after;
    err
}

impl From<ClusterError> for ApiError {
    fn from(e: ClusterError) -> ApiError {
        use ClusterError::*;
        let message = e.to_string();
        match e {
            Missing { .. }
            | NamespaceRequired { .. }
            | UnknownKind { .. }
            | Selector(_)
            | BadContinue { .. }
            | BadResourceVersion { .. }
            | NegativeGrace
            | BadPropagation { .. }
            | CreateBinding
            | NoStatus { .. }
            | NoApproval { .. }
            | NoFinalize { .. } => ApiError::bad_request(message),
            Decode { kind, .. } | Schema { kind, .. } => {
                ApiError::bad_request(message).about(kind.name(), "")
            }
            Invalid { kind, name, source } => {
                let mut err = ApiError::new(Reason::Invalid, message).about(kind.name(), name);
                err.causes = source
                    .0
                    .iter()
                    .map(|f| Cause {
                        reason: cause_reason(&f.message),
                        message: f.message.clone(),
                        field: f.path.clone(),
                    })
                    .collect();
                err
            }
            Immutable {
                kind,
                name,
                field,
                why,
            } => {
                let mut err = ApiError::new(Reason::Invalid, message).about(kind.name(), name);
                err.causes = vec![Cause {
                    reason: "FieldValueForbidden",
                    message: format!("Forbidden: {why}"),
                    field: field.to_string(),
                }];
                err
            }
            NotFound { kind, name } | OtherUid { kind, name, .. } => {
                ApiError::new(Reason::NotFound, message).about(resource(kind), name)
            }
            AlreadyExists { kind, name } => {
                ApiError::new(Reason::AlreadyExists, message).about(resource(kind), name)
            }
            Conflict { kind, name } | Contended { kind, name } => {
                ApiError::new(Reason::Conflict, message).about(resource(kind), name)
            }
            UidPrecondition { kind, name, .. } => {
                ApiError::new(Reason::Conflict, message).about(resource(kind), name)
            }
            BudgetExhausted {
                budget,
                desired_healthy,
                current_healthy,
            } => disruption_budget(
                message,
                format!(
                    "The disruption budget {budget} needs {desired_healthy} healthy pods and has \
                     {current_healthy} currently"
                ),
                None,
            ),
            BudgetUnobserved { budget } => disruption_budget(
                message,
                format!("The disruption budget {budget} is still being processed by the server."),
                Some(10),
            ),
            MultipleBudgets { .. } => ApiError::new(Reason::InternalError, message),
            Forbidden { kind, name, .. } | NodeRestricted { kind, name, .. } => {
                ApiError::new(Reason::Forbidden, message).about(resource(kind), name)
            }
            // kube-apiserver serves no `token` subresource without a signing key.
            NoTokenIssuer => ApiError::new(
                Reason::NotFound,
                format!(
                    "the server could not find the requested resource (serviceaccounts/token): \
                     {message}"
                ),
            ),
            InvalidTokenRequest { .. } => ApiError::new(Reason::Invalid, message),
            BoundUidMismatch { .. } => ApiError::new(Reason::Conflict, message),
            TokenAccountMismatch { .. } => ApiError::bad_request(message),
            TokenSigning => ApiError::new(Reason::InternalError, message),
            Unauthorized(_) => ApiError::new(Reason::Unauthorized, message),
            Denied(f) => match &f.attributes {
                crate::access::Attributes::Resource(r) => ApiError::new(Reason::Forbidden, message)
                    .about(r.resource.clone(), r.name.clone()),
                crate::access::Attributes::NonResource(_) => {
                    ApiError::new(Reason::Forbidden, message)
                }
            },
            NamespaceTerminating { name } => {
                ApiError::new(Reason::Conflict, message).about("namespaces", name)
            }
            TooOld { .. } | WatchCanceled { .. } => ApiError::new(Reason::Expired, message),
            Fenced { .. } => ApiError::new(Reason::Conflict, message),
            FutureRevision { .. } => ApiError::new(Reason::Timeout, message),
            WatchRefused { .. } | DeleteWithoutPrevious { .. } | Stored { .. } => {
                ApiError::new(Reason::InternalError, message)
            }
            Store(e) => {
                let reason = match e.code() {
                    Code::InvalidArgument | Code::OutOfRange | Code::FailedPrecondition => {
                        Reason::BadRequest
                    }
                    Code::Unavailable => Reason::ServiceUnavailable,
                    Code::DeadlineExceeded => Reason::Timeout,
                    Code::ResourceExhausted => Reason::TooManyRequests,
                    _ => Reason::InternalError,
                };
                ApiError::new(reason, message)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_proto::api::validation::{FieldError, ValidationErrors};

    /// kubectl matches on reason and code; the message is kube-apiserver's wording.
    #[test]
    fn not_found_as_kube_apiserver_says_it() {
        let s = ApiError::from(ClusterError::NotFound {
            kind: Kind::Pod,
            name: "web".into(),
        })
        .to_status();
        assert_eq!(
            s,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "pods \"web\" not found", "reason": "NotFound",
                "details": {"name": "web", "kind": "pods"}, "code": 404
            })
        );
    }

    /// An Invalid object lists each field at fault as a cause, with its path.
    #[test]
    fn invalid_names_the_fields() {
        let e = ApiError::from(ClusterError::Invalid {
            kind: Kind::Pod,
            name: "web".into(),
            source: ValidationErrors(vec![FieldError {
                path: "spec.containers[0].image".into(),
                message: "required value".into(),
            }]),
        });
        assert_eq!(e.reason.code(), StatusCode::UNPROCESSABLE_ENTITY);
        let s = e.to_status();
        assert_eq!(
            s["details"]["causes"][0]["field"],
            "spec.containers[0].image"
        );
        assert_eq!(s["details"]["causes"][0]["reason"], "FieldValueRequired");
        assert_eq!(s["details"]["kind"], "Pod");
    }

    /// An eviction a budget refuses is 429 with the budget's figures as a `DisruptionBudget`
    /// cause (no field); one the controller has not caught up with says to retry in 10 s.
    #[test]
    fn a_budget_refuses_with_429_and_its_cause() {
        let s = ApiError::from(ClusterError::BudgetExhausted {
            budget: "web".into(),
            desired_healthy: 3,
            current_healthy: 3,
        })
        .to_status();
        assert_eq!(
            s,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                "reason": "TooManyRequests", "code": 429,
                "details": {"causes": [{"reason": "DisruptionBudget",
                    "message": "The disruption budget web needs 3 healthy pods and has 3 currently"}]}
            })
        );
        let e = ApiError::from(ClusterError::BudgetUnobserved {
            budget: "web".into(),
        });
        assert_eq!(e.to_status()["details"]["retryAfterSeconds"], 10);
        let response = e.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "10");
    }

    /// A watch or list below the compaction is 410 Expired: client-go's reflector relists.
    #[test]
    fn too_old_is_gone() {
        let e = ApiError::from(ClusterError::TooOld {
            resource_version: 3,
            compacted: 9,
        });
        assert_eq!(e.reason.code(), StatusCode::GONE);
        assert_eq!(e.to_status()["reason"], "Expired");
    }
}
