//! One error type for the whole HTTP surface, rendered as an RFC 9457
//! `application/problem+json` document (see the book's "Errors"
//! (docs/src/errors.md)).
//!
//! Handlers return `Result<_, ApiError>`; the status mapping lives here and
//! nowhere else. An `ApiError` carries a typed [`Problem`] — the very
//! struct the OpenAPI document describes — so the document cannot drift
//! from the body. Internal details (Redis errors, script failures) go to
//! the log; the client only ever sees a stable slug and a safe detail.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::coord::Refusal;
use crate::store::{Condition, StoreError};
use crate::wait::WaitError;

pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// Every problem type of the API: `type` is `/problems/<slug>`. The slugs
/// are stable API; add one only when none fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub enum ProblemType {
    #[serde(rename = "/problems/invalid-name")]
    InvalidName,
    #[serde(rename = "/problems/invalid-body")]
    InvalidBody,
    #[serde(rename = "/problems/out-of-range")]
    OutOfRange,
    #[serde(rename = "/problems/unsupported-media-type")]
    UnsupportedMediaType,
    #[serde(rename = "/problems/body-too-large")]
    BodyTooLarge,
    #[serde(rename = "/problems/not-found")]
    NotFound,
    #[serde(rename = "/problems/method-not-allowed")]
    MethodNotAllowed,
    #[serde(rename = "/problems/not-held")]
    NotHeld,
    #[serde(rename = "/problems/lock-held")]
    LockHeld,
    #[serde(rename = "/problems/no-permits")]
    NoPermits,
    #[serde(rename = "/problems/latch-exists")]
    LatchExists,
    #[serde(rename = "/problems/upgrade-would-deadlock")]
    UpgradeWouldDeadlock,
    #[serde(rename = "/problems/quorum-unavailable")]
    QuorumUnavailable,
    #[serde(rename = "/problems/redlock-not-configured")]
    RedlockNotConfigured,
    #[serde(rename = "/problems/too-many-waiters")]
    TooManyWaiters,
    #[serde(rename = "/problems/unauthorized")]
    Unauthorized,
    #[serde(rename = "/problems/forbidden")]
    Forbidden,
    #[serde(rename = "/problems/rate-limited")]
    RateLimited,
    #[serde(rename = "/problems/session-mismatch")]
    SessionMismatch,
    #[serde(rename = "/problems/backend-unavailable")]
    BackendUnavailable,
    #[serde(rename = "/problems/shutting-down")]
    ShuttingDown,
    #[serde(rename = "/problems/internal")]
    Internal,
}

impl ProblemType {
    /// Short summary of the problem type; the same for every occurrence.
    pub fn title(self) -> &'static str {
        use ProblemType::*;
        match self {
            InvalidName => "Invalid name",
            InvalidBody => "Invalid request",
            OutOfRange => "Value out of range",
            UnsupportedMediaType => "Unsupported media type",
            BodyTooLarge => "Request body too large",
            NotFound => "Not found",
            MethodNotAllowed => "Method not allowed",
            NotHeld => "Not held",
            LockHeld => "Lock is held",
            NoPermits => "Not enough permits",
            LatchExists => "Latch already exists",
            UpgradeWouldDeadlock => "Upgrade would deadlock",
            QuorumUnavailable => "Quorum unavailable",
            RedlockNotConfigured => "RedLock not configured",
            TooManyWaiters => "Too many waiters",
            Unauthorized => "Unauthorized",
            Forbidden => "Forbidden",
            RateLimited => "Rate limited",
            SessionMismatch => "Session mismatch",
            BackendUnavailable => "Backend unavailable",
            ShuttingDown => "Shutting down",
            Internal => "Internal error",
        }
    }
}

/// A problem document (RFC 9457). Members other than the first four are
/// present only on the problems that carry them.
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
    pub type_: ProblemType,
    /// Short summary of the problem type; the same for every occurrence.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What happened in this occurrence, and what to do about it.
    pub detail: String,
    /// On "not acquired" answers: the remaining lease of what blocks the
    /// request, in milliseconds (a hint for when to retry).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub retry_after_ms: Option<u64>,
    /// On `out-of-range`: the request member that is out of range.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub field: Option<String>,
    /// On `out-of-range`: the smallest value the member accepts.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub minimum: Option<u64>,
    /// On `out-of-range`: the largest value the member accepts (for
    /// `wait_ms`, this server's longest long-poll: a client that wants to
    /// wait longer polls again).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub maximum: Option<u64>,
    /// Where waiters queue fairly: how many are ahead of this request.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub position: Option<u64>,
    /// On `no-permits` and `rate-limited`: permits available right now.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub available: Option<u64>,
    /// On a multi-object `lock-held`: the names that are held.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub blocked_by: Option<Vec<String>>,
    /// On a multi-object `not-held`: the names this holder does not hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub not_held: Option<Vec<String>>,
    /// On "not acquired" answers of what holders hold (`lock-held`,
    /// `no-permits`): the owner labels of the holds that block the request
    /// (at most 10; null for a hold without one; empty when only waiters
    /// queued ahead block it). Never holder ids (the book's "Who holds it"
    /// (docs/src/who-holds-it.md)).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<Vec<Option<String>>>, example = json!(["web-7 pid 4242 POST /orders/42"]))]
    pub held_by: Option<Vec<Option<String>>>,
    /// On an acquire of several rate limits (`rate-limited`, `not-found`,
    /// `out-of-range`): the limit the problem is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub limit: Option<LimitRef>,
}

/// One limit of an acquire of several: a rate limiter's name and the key
/// (null: its shared bucket).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(example = json!({"name": "api-per-user", "key": "user-42"}))]
pub struct LimitRef {
    pub name: String,
    pub key: Option<String>,
}

/// An error answer: the problem document and its `Retry-After` header.
/// Boxed, so that `Result<_, ApiError>` stays small on the happy path.
#[derive(Debug, Clone)]
pub struct ApiError(Box<ApiErrorBody>);

#[derive(Debug, Clone)]
pub struct ApiErrorBody {
    /// The body, serialized as is.
    pub problem: Problem,
    /// `Retry-After` header in whole seconds, when the client should retry.
    pub retry_after_secs: Option<u64>,
    /// Further header fields (a rate limiter's `RateLimit`).
    pub headers: Vec<(header::HeaderName, HeaderValue)>,
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
    pub fn new(status: StatusCode, type_: ProblemType, detail: impl Into<String>) -> Self {
        ApiError(Box::new(ApiErrorBody {
            problem: Problem {
                type_,
                title: type_.title().to_string(),
                status: status.as_u16(),
                detail: detail.into(),
                retry_after_ms: None,
                field: None,
                minimum: None,
                maximum: None,
                position: None,
                available: None,
                blocked_by: None,
                not_held: None,
                held_by: None,
                limit: None,
            },
            retry_after_secs: None,
            headers: Vec::new(),
        }))
    }

    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// Names the request member a problem is about.
    pub fn with_field(mut self, field: &str) -> Self {
        self.problem.field = Some(field.to_string());
        self
    }

    /// States the range the member accepts (on `out-of-range`).
    pub fn with_range(mut self, minimum: u64, maximum: u64) -> Self {
        self.problem.minimum = Some(minimum);
        self.problem.maximum = Some(maximum);
        self
    }

    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }

    pub fn invalid_name(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, ProblemType::InvalidName, detail)
    }

    pub fn invalid_body(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, ProblemType::InvalidBody, detail)
    }

    pub fn out_of_range(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, ProblemType::OutOfRange, detail)
    }

    pub fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ProblemType::UnsupportedMediaType,
            "request bodies must be JSON: send -H 'Content-Type: application/json'",
        )
    }

    pub fn body_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ProblemType::BodyTooLarge,
            format!("request bodies are limited to {limit} bytes"),
        )
    }

    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, ProblemType::NotFound, detail)
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            ProblemType::MethodNotAllowed,
            "this route does not support that method; see the Allow header",
        )
    }

    /// 401 `unauthorized`, with `WWW-Authenticate: Bearer`.
    pub fn unauthorized(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, ProblemType::Unauthorized, detail)
    }

    /// 403 `forbidden`: the key's role may not do this.
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, ProblemType::Forbidden, detail)
    }

    pub fn not_held(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, ProblemType::NotHeld, detail)
    }

    /// 409 `lock-held` with the `retry_after_ms` hint and `Retry-After`.
    pub fn lock_held(retry_after_ms: u64) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            ProblemType::LockHeld,
            "the lock is held by another holder",
        )
        .with_retry_after_ms(retry_after_ms)
    }

    /// Names the owners of the holds that block the request (`held_by`).
    pub fn with_held_by(mut self, held_by: Vec<Option<String>>) -> Self {
        self.problem.held_by = Some(held_by);
        self
    }

    /// Sets `retry_after_ms` and the matching `Retry-After` header
    /// (`max(1, ceil(ms / 1000))` seconds).
    pub fn with_retry_after_ms(mut self, retry_after_ms: u64) -> Self {
        self.problem.retry_after_ms = Some(retry_after_ms);
        self.retry_after(retry_after_ms.div_ceil(1000).max(1))
    }

    pub fn too_many_waiters(limit: usize) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            ProblemType::TooManyWaiters,
            format!("this instance already has {limit} open waits; retry later or elsewhere"),
        )
        .retry_after(1)
    }

    pub fn backend_unavailable(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ProblemType::BackendUnavailable,
            detail,
        )
        .retry_after(1)
    }

    /// 503 `backend-unavailable` naming the condition Redis is in.
    pub fn backend(condition: Condition) -> Self {
        ApiError::backend_unavailable(format!("{}; retry shortly", condition.describe()))
    }

    /// 404 `not-found`: an object that must be configured first is not
    /// (never configured, or deleted while the request waited or before).
    pub fn no_such_object() -> Self {
        ApiError::not_found(
            "no such object: it was never configured, or it was deleted (while this request \
             waited, or before)",
        )
    }

    /// 404 `not-found`: the session an acquire names does not exist (never
    /// the session id itself: it is a capability).
    pub fn no_such_session() -> Self {
        ApiError::not_found(
            "no such session: the session named in the request expired, was deleted (possibly \
             while this request waited), or never existed in this namespace; nothing was \
             acquired. Create one with POST /sessions",
        )
    }

    /// 409 `session-mismatch`: the holder already holds the object in
    /// another session, or in one while the request names none (or the
    /// reverse).
    pub fn session_mismatch() -> Self {
        ApiError::new(
            StatusCode::CONFLICT,
            ProblemType::SessionMismatch,
            "this holder already holds this object in another session, or without a session \
             while this request names one (or in a session while this request names none); \
             a session renews and releases only the holds acquired in it, so one hold cannot \
             be in two. Nothing was changed: release the other hold first, or use another \
             holder id",
        )
    }

    /// 409 `upgrade-would-deadlock`: a reader among others asked to write.
    pub fn upgrade_would_deadlock() -> Self {
        ApiError::new(
            StatusCode::CONFLICT,
            ProblemType::UpgradeWouldDeadlock,
            "this holder reads the rwlock together with other readers; a write would wait for \
             itself. Release the read hold first, then acquire the write lock",
        )
    }

    /// 503 `quorum-unavailable`: too few RedLock nodes answered in time
    /// (`detail` says how many).
    pub fn quorum_unavailable(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ProblemType::QuorumUnavailable,
            detail,
        )
        .retry_after(1)
    }

    /// 503 `redlock-not-configured`: no RedLock nodes are configured.
    pub fn redlock_not_configured() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ProblemType::RedlockNotConfigured,
            "no RedLock nodes are configured on this instance: set LATCHKEY_REDLOCK_NODES to \
             three or more independent Redis URLs",
        )
    }

    pub fn shutting_down() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ProblemType::ShuttingDown,
            "this instance is shutting down; retry on another instance",
        )
        .retry_after(1)
    }

    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ProblemType::Internal,
            "an unexpected error occurred; it has been logged",
        )
    }

    /// The problem document as JSON (also used as SSE event data).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(&self.problem).unwrap_or(Value::Null)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = serde_json::to_string(&self.problem).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(PROBLEM_CONTENT_TYPE),
        );
        if let Some(secs) = self.retry_after_secs {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        headers.extend(self.0.headers);
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"latchkey\""),
            );
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            // The detail is the RedLock module's own, written for clients.
            StoreError::Unavailable {
                condition: Condition::NoQuorum,
                detail,
            } => {
                tracing::info!(detail, "RedLock quorum unavailable");
                ApiError::quorum_unavailable(detail)
            }
            StoreError::Unavailable { condition, detail } => {
                tracing::warn!(error = %detail, "redis unavailable: {}", condition.describe());
                ApiError::backend(condition)
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
            WaitError::Refused(Refusal::UpgradeWouldDeadlock) => ApiError::upgrade_would_deadlock(),
            WaitError::Refused(Refusal::NotFound | Refusal::NotFoundOf(_)) => {
                ApiError::no_such_object()
            }
            WaitError::Refused(Refusal::NoSession) => ApiError::no_such_session(),
            WaitError::Refused(Refusal::SessionMismatch) => ApiError::session_mismatch(),
            WaitError::Refused(Refusal::MoreThan(permits)) => ApiError::out_of_range(format!(
                "permits must be at most the semaphore's {permits} permits; a request for \
                 more could never be granted"
            ))
            .with_field("permits")
            .with_range(1, permits),
            WaitError::Refused(Refusal::OverBurst(burst) | Refusal::OverBurstOf(_, burst)) => {
                ApiError::out_of_range(format!(
                    "permits must be at most the rate limiter's burst of {burst}; a request for \
                 more could never be admitted"
                ))
                .with_field("permits")
                .with_range(1, burst)
            }
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
            ProblemType::BodyTooLarge,
            "the request body is too large",
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::unsupported_media_type(),
        StatusCode::SERVICE_UNAVAILABLE => {
            ApiError::backend_unavailable("the service cannot answer right now")
        }
        s if s.is_client_error() => ApiError::new(
            s,
            ProblemType::InvalidBody,
            s.canonical_reason()
                .unwrap_or("invalid request")
                .to_string(),
        ),
        _ => ApiError::internal(),
    }
}
