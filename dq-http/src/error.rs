//! Errors as the API answers them: an HTTP status and `{"error": {"code", "message"}}`, the
//! code one of [`Code`]'s stable names (docs/HTTP.md has the table).

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// Every error code the API answers with, and its HTTP status. The names are stable: clients
/// may match on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    /// 401: no `Authorization: Bearer` token, or not one the server knows.
    Unauthorized,
    /// 403: a read-only token asked for a change.
    Forbidden,
    /// 400: the body is not JSON, or not the shape the endpoint takes (a field missing or of
    /// the wrong type, an unknown field).
    InvalidJson,
    /// 400: a value is not acceptable: a topic or key name, a batch id, a time, a delay, an
    /// expiry, a cursor, a rate, an `Idempotency-Key`.
    InvalidRequest,
    /// 413: the request body is over the server's limit.
    BodyTooLarge,
    /// 413: the encoded payload is over the client's payload limit.
    PayloadTooLarge,
    /// 422: the payload does not fit the topic's payload type (the message names the field).
    PayloadMismatch,
    /// 422: the job's due time is further from now than the topic's `max_delay` allows.
    DelayTooLong,
    /// 404: no such topic in the namespace (no producer or worker has used it), or, with a
    /// typed-only server, not a topic it knows the type of.
    UnknownTopic,
    /// 404: no such job, batch, schedule or route.
    NotFound,
    /// 409: the job's state does not allow it (running, or dead), or the batch is closed.
    Conflict,
    /// 409: the topic's recorded partition count differs from this server's, or the
    /// namespace writes a format that cannot hold what was asked.
    TopicMismatch,
    /// 405: the route does not take this method.
    MethodNotAllowed,
    /// 503: Redis could not be reached or timed out, or refused (out of memory, no
    /// permission); nothing is known to be written, and the request may be retried.
    Unavailable,
    /// 500: anything else (the message says what).
    Internal,
}

impl Code {
    /// The HTTP status this code is answered with.
    pub fn status(self) -> StatusCode {
        match self {
            Code::Unauthorized => StatusCode::UNAUTHORIZED,
            Code::Forbidden => StatusCode::FORBIDDEN,
            Code::InvalidJson | Code::InvalidRequest => StatusCode::BAD_REQUEST,
            Code::BodyTooLarge | Code::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Code::PayloadMismatch | Code::DelayTooLong => StatusCode::UNPROCESSABLE_ENTITY,
            Code::UnknownTopic | Code::NotFound => StatusCode::NOT_FOUND,
            Code::Conflict | Code::TopicMismatch => StatusCode::CONFLICT,
            Code::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Every code, in the order of the documented table.
    pub const ALL: [Code; 15] = [
        Code::Unauthorized,
        Code::Forbidden,
        Code::InvalidJson,
        Code::InvalidRequest,
        Code::BodyTooLarge,
        Code::PayloadTooLarge,
        Code::PayloadMismatch,
        Code::DelayTooLong,
        Code::UnknownTopic,
        Code::NotFound,
        Code::Conflict,
        Code::TopicMismatch,
        Code::MethodNotAllowed,
        Code::Unavailable,
        Code::Internal,
    ];

    /// Its stable name, as in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Unauthorized => "unauthorized",
            Code::Forbidden => "forbidden",
            Code::InvalidJson => "invalid_json",
            Code::InvalidRequest => "invalid_request",
            Code::BodyTooLarge => "body_too_large",
            Code::PayloadTooLarge => "payload_too_large",
            Code::PayloadMismatch => "payload_mismatch",
            Code::DelayTooLong => "delay_too_long",
            Code::UnknownTopic => "unknown_topic",
            Code::NotFound => "not_found",
            Code::Conflict => "conflict",
            Code::TopicMismatch => "topic_mismatch",
            Code::MethodNotAllowed => "method_not_allowed",
            Code::Unavailable => "unavailable",
            Code::Internal => "internal",
        }
    }
}

/// An error answer: `{"error": {"code": "…", "message": "…"}}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable code (docs/HTTP.md): match on it.
    pub code: Code,
    /// What went wrong, for people.
    pub message: String,
}

/// An error the API answers with.
#[derive(Debug)]
pub struct ApiError {
    /// Its code (and so its status).
    pub code: Code,
    /// Its message.
    pub message: String,
}

impl ApiError {
    /// An error with `code` and `message`.
    pub fn new(code: Code, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn payload_mismatch(message: String) -> ApiError {
        ApiError::new(Code::PayloadMismatch, message)
    }

    pub(crate) fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(Code::InvalidRequest, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(Code::NotFound, message)
    }

    pub(crate) fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(Code::Conflict, message)
    }
}

impl From<dq_core::Error> for ApiError {
    fn from(e: dq_core::Error) -> ApiError {
        use dq_core::Error as E;
        let code = match &e {
            E::InvalidTopic { .. }
            | E::InvalidKey { .. }
            | E::InvalidExpiry(_)
            | E::InvalidPriority(_)
            | E::InvalidGroup { .. }
            | E::InvalidWindow(_)
            | E::InvalidSchedule(_)
            | E::DueOutOfRange { .. }
            | E::InvalidPartition { .. }
            | E::InvalidConfig(_)
            | E::InvalidBatch { .. }
            | E::EnqueueRefused { .. }
            | E::Encode(_) => Code::InvalidRequest,
            E::BulkItem { source, .. } => ApiError::from_ref(source),
            E::PayloadTooLarge { .. } => Code::PayloadTooLarge,
            E::DelayTooLong { .. } => Code::DelayTooLong,
            E::TopicMismatch { .. } | E::TopicNotEmpty { .. } | E::NeedsFormat { .. } => {
                Code::TopicMismatch
            }
            E::WrongState { .. } | E::BatchClosed(_) => Code::Conflict,
            E::BatchNotFound(_) => Code::NotFound,
            E::OutOfMemory | E::NoPermission(_) | E::Timeout(_) => Code::Unavailable,
            other if other.is_retryable() => Code::Unavailable,
            _ => Code::Internal,
        };
        ApiError::new(code, e.to_string())
    }
}

impl ApiError {
    /// The code a bulk item's own error maps to.
    fn from_ref(e: &dq_core::Error) -> Code {
        use dq_core::Error as E;
        match e {
            E::PayloadTooLarge { .. } => Code::PayloadTooLarge,
            E::DelayTooLong { .. } => Code::DelayTooLong,
            _ => Code::InvalidRequest,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.code.status();
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
            },
        };
        let mut response = (status, axum::Json(body)).into_response();
        if self.code == Code::Unauthorized {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer realm=\"dq\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_enqueue_hooks_refusal_is_an_invalid_request() {
        let refused = dq_core::Error::EnqueueRefused {
            topic: "t".into(),
            key: "k".into(),
            source: std::sync::Arc::new(std::io::Error::other("no")),
        };
        assert_eq!(ApiError::from(refused.clone()).code, Code::InvalidRequest);
        let in_bulk = dq_core::Error::BulkItem {
            index: 0,
            key: None,
            source: Box::new(refused),
        };
        assert_eq!(ApiError::from(in_bulk).code, Code::InvalidRequest);
    }

    #[test]
    fn every_code_serialises_as_its_name() {
        for code in Code::ALL {
            let json = serde_json::to_value(code).unwrap_or_default();
            assert_eq!(json, serde_json::json!(code.as_str()));
        }
    }
}
