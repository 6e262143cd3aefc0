//! The error responses many operations share, described once for the
//! OpenAPI document (`responses(…, NameErrors)` in a route's annotation),
//! and the [`examples`] every documented error response shows.
//!
//! Every error is `application/problem+json` (see the README's "Errors").
//! Each documented error response carries its own examples, one per
//! problem type it can answer with, named after the slug: Swagger UI shows
//! them in place of the `Problem` schema's single example, so a reader of
//! a 404 sees a 404.

use utoipa::IntoResponses;

use crate::error::Problem;

/// Problem documents as the service sends them, for the OpenAPI document:
/// each is built by the constructor the service answers with, so the
/// examples show the real status, title and detail.
pub mod examples {
    use crate::coord::Blocked;
    use crate::error::{ApiError, Problem};
    use crate::http::extract::{Millis, check_name};
    use crate::http::lock_family::{HoldApi, lock_held as held};
    use crate::http::{latches, multilocks, redlocks, semaphores};
    use crate::store::Condition;

    fn problem(error: ApiError) -> Problem {
        error.problem.clone()
    }

    pub fn invalid_name() -> Problem {
        problem(check_name("orders/2026").expect_err("a slash is not allowed in names"))
    }

    pub fn invalid_body() -> Problem {
        problem(ApiError::invalid_body(
            "request body is not valid: unknown field `lease`, expected one of `holder`, \
             `lease_ms`, `wait_ms` at line 1 column 8",
        ))
    }

    pub fn out_of_range() -> Problem {
        problem(
            Millis(100)
                .within("lease_ms", 500, 86_400_000)
                .expect_err("below the minimum"),
        )
    }

    pub fn unsupported_media_type() -> Problem {
        problem(ApiError::unsupported_media_type())
    }

    pub fn not_held() -> Problem {
        problem(ApiError::not_held(
            <crate::coord::locks::Locks as HoldApi>::NOT_HELD,
        ))
    }

    pub fn not_held_set() -> Problem {
        let mut p = not_held();
        p.detail = "this holder does not hold every lock of the set (see not_held)".into();
        p.not_held = Some(vec!["invoices".into()]);
        p
    }

    pub fn not_found() -> Problem {
        problem(ApiError::no_such_object())
    }

    pub fn lock_held() -> Problem {
        problem(held(Blocked {
            retry_after_ms: 2500,
            ..Blocked::default()
        }))
    }

    pub fn fair_lock_held() -> Problem {
        problem(held(Blocked {
            retry_after_ms: 2500,
            position: Some(2),
            ..Blocked::default()
        }))
    }

    pub fn set_held() -> Problem {
        problem(multilocks::set_held(vec!["orders".into()], 2500))
    }

    pub fn held_on_quorum() -> Problem {
        problem(redlocks::held_on_quorum(2500))
    }

    pub fn no_permits() -> Problem {
        problem(semaphores::no_permits(Blocked {
            retry_after_ms: 2500,
            position: Some(1),
            available: Some(0),
            ..Blocked::default()
        }))
    }

    pub fn latch_exists() -> Problem {
        problem(latches::latch_exists(3))
    }

    pub fn upgrade_would_deadlock() -> Problem {
        problem(ApiError::upgrade_would_deadlock())
    }

    pub fn too_many_waiters() -> Problem {
        problem(ApiError::too_many_waiters(10_000))
    }

    pub fn backend_unavailable() -> Problem {
        problem(ApiError::backend(Condition::Timeout))
    }

    pub fn shutting_down() -> Problem {
        problem(ApiError::shutting_down())
    }

    pub fn quorum_unavailable() -> Problem {
        problem(ApiError::quorum_unavailable(
            "1 of 3 RedLock nodes answered within 100 ms; a quorum needs 2; retry shortly",
        ))
    }

    pub fn redlock_not_configured() -> Problem {
        problem(ApiError::redlock_not_configured())
    }
}

/// Errors of an operation on an object named in the path.
#[derive(IntoResponses)]
#[allow(dead_code)] // documentation only: never built
pub enum NameErrors {
    /// Invalid name
    #[response(status = 400, content_type = "application/problem+json", examples(
        ("invalid-name" = (value = json!(examples::invalid_name()))),
    ))]
    Invalid(Problem),
    /// Redis unavailable
    #[response(status = 503, content_type = "application/problem+json", examples(
        ("backend-unavailable" = (value = json!(examples::backend_unavailable()))),
    ))]
    Unavailable(Problem),
}

/// Errors of reading an object that must exist.
#[derive(IntoResponses)]
#[allow(dead_code)] // documentation only: never built
pub enum ObjectErrors {
    /// Invalid name
    #[response(status = 400, content_type = "application/problem+json", examples(
        ("invalid-name" = (value = json!(examples::invalid_name()))),
    ))]
    Invalid(Problem),
    /// No such object
    #[response(status = 404, content_type = "application/problem+json", examples(
        ("not-found" = (value = json!(examples::not_found()))),
    ))]
    NotFound(Problem),
    /// Redis unavailable
    #[response(status = 503, content_type = "application/problem+json", examples(
        ("backend-unavailable" = (value = json!(examples::backend_unavailable()))),
    ))]
    Unavailable(Problem),
}

/// Errors of an operation that takes a JSON body and never waits.
#[derive(IntoResponses)]
#[allow(dead_code)] // documentation only: never built
pub enum BodyErrors {
    /// Invalid name, body or out-of-range value
    #[response(status = 400, content_type = "application/problem+json", examples(
        ("invalid-name" = (value = json!(examples::invalid_name()))),
        ("invalid-body" = (value = json!(examples::invalid_body()))),
        ("out-of-range" = (value = json!(examples::out_of_range()))),
    ))]
    Invalid(Problem),
    /// Body is not JSON
    #[response(status = 415, content_type = "application/problem+json", examples(
        ("unsupported-media-type" = (value = json!(examples::unsupported_media_type()))),
    ))]
    NotJson(Problem),
    /// Redis unavailable
    #[response(status = 503, content_type = "application/problem+json", examples(
        ("backend-unavailable" = (value = json!(examples::backend_unavailable()))),
    ))]
    Unavailable(Problem),
}

/// Errors of an operation on a holder's holds (heartbeat, release).
#[derive(IntoResponses)]
#[allow(dead_code)] // documentation only: never built
pub enum HoldErrors {
    /// Invalid name, holder, body or query
    #[response(status = 400, content_type = "application/problem+json", examples(
        ("invalid-name" = (value = json!(examples::invalid_name()))),
        ("invalid-body" = (value = json!(examples::invalid_body()))),
        ("out-of-range" = (value = json!(examples::out_of_range()))),
    ))]
    Invalid(Problem),
    /// Not held by this holder (released, expired or never acquired)
    #[response(status = 404, content_type = "application/problem+json", examples(
        ("not-held" = (value = json!(examples::not_held()))),
    ))]
    NotHeld(Problem),
    /// Redis unavailable
    #[response(status = 503, content_type = "application/problem+json", examples(
        ("backend-unavailable" = (value = json!(examples::backend_unavailable()))),
    ))]
    Unavailable(Problem),
}

/// Errors of a multi-lock's heartbeat and release: [`HoldErrors`] whose
/// 404 names the locks not held.
#[derive(IntoResponses)]
#[allow(dead_code)] // documentation only: never built
pub enum SetHoldErrors {
    /// Invalid names, holder or body
    #[response(status = 400, content_type = "application/problem+json", examples(
        ("invalid-name" = (value = json!(examples::invalid_name()))),
        ("invalid-body" = (value = json!(examples::invalid_body()))),
        ("out-of-range" = (value = json!(examples::out_of_range()))),
    ))]
    Invalid(Problem),
    /// Body is not JSON
    #[response(status = 415, content_type = "application/problem+json", examples(
        ("unsupported-media-type" = (value = json!(examples::unsupported_media_type()))),
    ))]
    NotJson(Problem),
    /// Some locks of the set are not held by this holder (`not_held`
    /// names them); nothing was changed
    #[response(status = 404, content_type = "application/problem+json", examples(
        ("not-held" = (value = json!(examples::not_held_set()))),
    ))]
    NotHeld(Problem),
    /// Redis unavailable
    #[response(status = 503, content_type = "application/problem+json", examples(
        ("backend-unavailable" = (value = json!(examples::backend_unavailable()))),
    ))]
    Unavailable(Problem),
}

/// Errors of a RedLock heartbeat and release: [`HoldErrors`] whose 503
/// also says when too few nodes answer, or none are configured.
#[derive(IntoResponses)]
#[allow(dead_code)] // documentation only: never built
pub enum QuorumHoldErrors {
    /// Invalid name, holder or body
    #[response(status = 400, content_type = "application/problem+json", examples(
        ("invalid-name" = (value = json!(examples::invalid_name()))),
        ("invalid-body" = (value = json!(examples::invalid_body()))),
        ("out-of-range" = (value = json!(examples::out_of_range()))),
    ))]
    Invalid(Problem),
    /// Not held by this holder on a quorum of the nodes
    #[response(status = 404, content_type = "application/problem+json", examples(
        ("not-held" = (value = json!(examples::not_held()))),
    ))]
    NotHeld(Problem),
    /// Too few nodes answered to tell, or no RedLock nodes are configured
    #[response(status = 503, content_type = "application/problem+json", examples(
        ("quorum-unavailable" = (value = json!(examples::quorum_unavailable()))),
        ("redlock-not-configured" = (value = json!(examples::redlock_not_configured()))),
    ))]
    Unavailable(Problem),
}

/// Errors of a wait besides its answer (a latch's `/wait`).
#[derive(IntoResponses)]
#[allow(dead_code)] // documentation only: never built
pub enum WaitErrors {
    /// Invalid name or query, or `wait_ms` out of range
    #[response(status = 400, content_type = "application/problem+json", examples(
        ("invalid-name" = (value = json!(examples::invalid_name()))),
        ("invalid-body" = (value = json!(examples::invalid_body()))),
        ("out-of-range" = (value = json!(examples::out_of_range()))),
    ))]
    Invalid(Problem),
    /// Too many waiters on this instance
    #[response(status = 429, content_type = "application/problem+json", examples(
        ("too-many-waiters" = (value = json!(examples::too_many_waiters()))),
    ))]
    TooManyWaiters(Problem),
    /// Redis unavailable, or shutting down
    #[response(status = 503, content_type = "application/problem+json", examples(
        ("backend-unavailable" = (value = json!(examples::backend_unavailable()))),
        ("shutting-down" = (value = json!(examples::shutting_down()))),
    ))]
    Unavailable(Problem),
}

/// Errors of an acquire besides its "not acquired" answer.
#[derive(IntoResponses)]
#[allow(dead_code)] // documentation only: never built
pub enum AcquireErrors {
    /// Invalid name, body or out-of-range value
    #[response(status = 400, content_type = "application/problem+json", examples(
        ("invalid-name" = (value = json!(examples::invalid_name()))),
        ("invalid-body" = (value = json!(examples::invalid_body()))),
        ("out-of-range" = (value = json!(examples::out_of_range()))),
    ))]
    Invalid(Problem),
    /// Body is not JSON
    #[response(status = 415, content_type = "application/problem+json", examples(
        ("unsupported-media-type" = (value = json!(examples::unsupported_media_type()))),
    ))]
    NotJson(Problem),
    /// Too many waiters on this instance
    #[response(status = 429, content_type = "application/problem+json", examples(
        ("too-many-waiters" = (value = json!(examples::too_many_waiters()))),
    ))]
    TooManyWaiters(Problem),
    /// Redis unavailable, or shutting down
    #[response(status = 503, content_type = "application/problem+json", examples(
        ("backend-unavailable" = (value = json!(examples::backend_unavailable()))),
        ("shutting-down" = (value = json!(examples::shutting_down()))),
    ))]
    Unavailable(Problem),
}

/// Errors of a RedLock acquire besides its "not acquired" answer:
/// [`AcquireErrors`] whose 503 also says when too few nodes answer, or
/// none are configured.
#[derive(IntoResponses)]
#[allow(dead_code)] // documentation only: never built
pub enum QuorumAcquireErrors {
    /// Invalid name, body or out-of-range value
    #[response(status = 400, content_type = "application/problem+json", examples(
        ("invalid-name" = (value = json!(examples::invalid_name()))),
        ("invalid-body" = (value = json!(examples::invalid_body()))),
        ("out-of-range" = (value = json!(examples::out_of_range()))),
    ))]
    Invalid(Problem),
    /// Body is not JSON
    #[response(status = 415, content_type = "application/problem+json", examples(
        ("unsupported-media-type" = (value = json!(examples::unsupported_media_type()))),
    ))]
    NotJson(Problem),
    /// Too many waiters on this instance
    #[response(status = 429, content_type = "application/problem+json", examples(
        ("too-many-waiters" = (value = json!(examples::too_many_waiters()))),
    ))]
    TooManyWaiters(Problem),
    /// Too few nodes answered, no RedLock nodes are configured, Redis
    /// unavailable, or shutting down
    #[response(status = 503, content_type = "application/problem+json", examples(
        ("quorum-unavailable" = (value = json!(examples::quorum_unavailable()))),
        ("redlock-not-configured" = (value = json!(examples::redlock_not_configured()))),
        ("backend-unavailable" = (value = json!(examples::backend_unavailable()))),
        ("shutting-down" = (value = json!(examples::shutting_down()))),
    ))]
    Unavailable(Problem),
}
