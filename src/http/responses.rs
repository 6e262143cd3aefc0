//! The error responses many operations share, described once for the
//! OpenAPI document (`responses(…, NameErrors)` in a route's annotation).
//! Every one is `application/problem+json` (see the README's "Errors").

use utoipa::IntoResponses;

use crate::error::Problem;

/// Errors of an operation on an object named in the path.
#[derive(IntoResponses)]
#[allow(dead_code)] // documentation only: never built
pub enum NameErrors {
    /// Invalid name
    #[response(status = 400, content_type = "application/problem+json")]
    Invalid(Problem),
    /// Redis unavailable
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}

/// Errors of reading an object that must exist.
#[derive(IntoResponses)]
#[allow(dead_code)] // documentation only: never built
pub enum ObjectErrors {
    /// Invalid name
    #[response(status = 400, content_type = "application/problem+json")]
    Invalid(Problem),
    /// No such object
    #[response(status = 404, content_type = "application/problem+json")]
    NotFound(Problem),
    /// Redis unavailable
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}

/// Errors of an operation that takes a JSON body and never waits.
#[derive(IntoResponses)]
#[allow(dead_code)] // documentation only: never built
pub enum BodyErrors {
    /// Invalid name, body or out-of-range value
    #[response(status = 400, content_type = "application/problem+json")]
    Invalid(Problem),
    /// Body is not JSON
    #[response(status = 415, content_type = "application/problem+json")]
    NotJson(Problem),
    /// Redis unavailable
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}

/// Errors of an operation on a holder's holds (heartbeat, release).
#[derive(IntoResponses)]
#[allow(dead_code)] // documentation only: never built
pub enum HoldErrors {
    /// Invalid name, holder, body or query
    #[response(status = 400, content_type = "application/problem+json")]
    Invalid(Problem),
    /// Not held by this holder (released, expired or never acquired)
    #[response(status = 404, content_type = "application/problem+json")]
    NotHeld(Problem),
    /// Redis unavailable
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}

/// Errors of a wait besides its answer (a latch's `/wait`).
#[derive(IntoResponses)]
#[allow(dead_code)] // documentation only: never built
pub enum WaitErrors {
    /// Invalid name or query, or `wait_ms` out of range
    #[response(status = 400, content_type = "application/problem+json")]
    Invalid(Problem),
    /// Too many waiters on this instance
    #[response(status = 429, content_type = "application/problem+json")]
    TooManyWaiters(Problem),
    /// Redis unavailable, or shutting down
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}

/// Errors of an acquire besides its "not acquired" answer.
#[derive(IntoResponses)]
#[allow(dead_code)] // documentation only: never built
pub enum AcquireErrors {
    /// Invalid name, body or out-of-range value
    #[response(status = 400, content_type = "application/problem+json")]
    Invalid(Problem),
    /// Body is not JSON
    #[response(status = 415, content_type = "application/problem+json")]
    NotJson(Problem),
    /// Too many waiters on this instance
    #[response(status = 429, content_type = "application/problem+json")]
    TooManyWaiters(Problem),
    /// Redis unavailable, or shutting down
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}
