//! One error type for the whole HTTP surface, rendered as an RFC 9457
//! `application/problem+json` document (API.md §1, §9).
//!
//! Handlers return `Result<_, ApiError>`; the status mapping lives here and
//! nowhere else. Internal details (Redis errors, script failures) go to the
//! log; the client only ever sees a stable slug and a safe detail.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::store::StoreError;
use crate::wait::WaitError;

pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// A problem document (RFC 9457). `type` is `/problems/<slug>`; the slugs
/// are stable API. Some problems carry extra members, e.g. `retry_after_ms`.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(example = json!({
    "type": "/problems/lock-held",
    "title": "Lock is held",
    "status": 409,
    "detail": "the lock is held by another holder",
    "retry_after_ms": 2500
}))]
pub struct Problem {
    /// `/problems/<slug>`, e.g. `/problems/lock-held`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Short summary of the problem type; the same for every occurrence.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What happened in this occurrence, and what to do about it.
    pub detail: String,
    /// Present on "not acquired" answers: the remaining lease of what blocks
    /// the request, in milliseconds (a hint for when to retry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

/// An error answer: status, slug, detail and optional extra members.
/// Boxed, so that `Result<_, ApiError>` stays small on the happy path.
#[derive(Debug, Clone)]
pub struct ApiError(Box<ApiErrorBody>);

#[derive(Debug, Clone)]
pub struct ApiErrorBody {
    pub status: StatusCode,
    pub slug: &'static str,
    pub title: &'static str,
    pub detail: String,
    /// Extra members of the problem document (`retry_after_ms`, ...).
    pub extra: Map<String, Value>,
    /// `Retry-After` header in whole seconds, when the client should retry.
    pub retry_after_secs: Option<u64>,
}

impl std::ops::Deref for ApiError {
    type Target = ApiErrorBody;
    fn deref(&self) -> &ApiErrorBody {
        &self.0
    }
}

impl std::ops::DerefMut for ApiError {
    fn deref_mut(&mut self) -> &mut ApiErrorBody {
        &mut self.0
    }
}

impl ApiError {
    pub fn new(
        status: StatusCode,
        slug: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        ApiError(Box::new(ApiErrorBody {
            status,
            slug,
            title,
            detail: detail.into(),
            extra: Map::new(),
            retry_after_secs: None,
        }))
    }

    /// Adds an extra member to the problem document.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_string(), value.into());
        self
    }

    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }

    pub fn invalid_name(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid-name",
            "Invalid name",
            detail,
        )
    }

    pub fn invalid_body(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid-body",
            "Invalid request",
            detail,
        )
    }

    pub fn out_of_range(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "out-of-range",
            "Value out of range",
            detail,
        )
    }

    pub fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "Unsupported media type",
            "request bodies must be JSON: send -H 'Content-Type: application/json'",
        )
    }

    pub fn body_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "Request body too large",
            format!("request bodies are limited to {limit} bytes"),
        )
    }

    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not-found", "Not found", detail)
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "Method not allowed",
            "this route does not support that method; see the Allow header",
        )
    }

    pub fn not_held(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not-held", "Not held", detail)
    }

    /// 409 `lock-held` with the `retry_after_ms` hint and `Retry-After`.
    pub fn lock_held(retry_after_ms: u64) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "lock-held",
            "Lock is held",
            "the lock is held by another holder",
        )
        .with_retry_after_ms(retry_after_ms)
    }

    /// Sets `retry_after_ms` and the matching `Retry-After` header
    /// (`max(1, ceil(ms / 1000))` seconds).
    pub fn with_retry_after_ms(self, retry_after_ms: u64) -> Self {
        self.with("retry_after_ms", retry_after_ms)
            .retry_after(retry_after_ms.div_ceil(1000).max(1))
    }

    pub fn too_many_waiters(limit: usize) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too-many-waiters",
            "Too many waiters",
            format!("this instance already has {limit} open waits; retry later or elsewhere"),
        )
        .retry_after(1)
    }

    pub fn backend_unavailable(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "backend-unavailable",
            "Backend unavailable",
            detail,
        )
        .retry_after(1)
    }

    pub fn shutting_down() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting-down",
            "Shutting down",
            "this instance is shutting down; retry on another instance",
        )
        .retry_after(1)
    }

    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
            "an unexpected error occurred; it has been logged",
        )
    }

    /// The problem document as JSON (also used as SSE event data).
    pub fn to_json(&self) -> Value {
        let mut doc = json!({
            "type": format!("/problems/{}", self.slug),
            "title": self.title,
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        if let Value::Object(map) = &mut doc {
            for (k, v) in &self.extra {
                map.insert(k.clone(), v.clone());
            }
        }
        doc
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.to_json().to_string();
        let mut response = (self.status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(PROBLEM_CONTENT_TYPE),
        );
        if let Some(secs) = self.retry_after_secs {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Unavailable { condition, detail } => {
                tracing::warn!(error = %detail, "redis unavailable: {}", condition.describe());
                ApiError::backend_unavailable(format!("{}; retry shortly", condition.describe()))
            }
            StoreError::ReplicasLagging { acked, wanted } => {
                tracing::warn!(acked, wanted, "write not acknowledged by enough replicas");
                ApiError::backend_unavailable(format!(
                    "the write was not acknowledged by {wanted} replica(s) in time; retry shortly"
                ))
            }
            StoreError::Unexpected(detail) => {
                tracing::error!(error = %detail, "unexpected redis reply");
                ApiError::backend_unavailable(
                    "Redis returned data the service does not expect (were its keys changed by \
                     another client?); the event has been logged",
                )
            }
        }
    }
}

impl From<WaitError> for ApiError {
    fn from(err: WaitError) -> Self {
        match err {
            WaitError::ShuttingDown => ApiError::shutting_down(),
            WaitError::TooManyWaiters { limit } => ApiError::too_many_waiters(limit),
            WaitError::Backend(e) => e.into(),
        }
    }
}

/// The problem slug an HTTP status maps to when a response was produced by
/// a layer below us (axum rejections, method router, fallbacks).
pub fn for_status(status: StatusCode) -> ApiError {
    match status {
        StatusCode::NOT_FOUND => ApiError::not_found("no such route; see /docs"),
        StatusCode::METHOD_NOT_ALLOWED => ApiError::method_not_allowed(),
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            status,
            "body-too-large",
            "Request body too large",
            "the request body is too large",
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::unsupported_media_type(),
        StatusCode::SERVICE_UNAVAILABLE => {
            ApiError::backend_unavailable("the service cannot answer right now")
        }
        s if s.is_client_error() => ApiError::new(
            s,
            "invalid-body",
            "Invalid request",
            s.canonical_reason()
                .unwrap_or("invalid request")
                .to_string(),
        ),
        _ => ApiError::internal(),
    }
}
