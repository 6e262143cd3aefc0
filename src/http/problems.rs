//! The problems a resource answers with when it refuses (409 `lock-held`
//! of each kind of lock, `no-permits`, `rate-limited`, `latch-exists`) and
//! the details of its 404s. The handlers answer with these constructors, and
//! the OpenAPI document's examples of error responses are built by them, so
//! the examples show what the service sends (see the book's "Errors"
//! (docs/src/errors.md)).

use axum::http::StatusCode;

use crate::coord::Blocked;
use crate::error::{ApiError, ProblemType};

/// The detail of a 404 `not-held` of a lock (a resource may say it in its
/// own words).
pub const NOT_HELD: &str =
    "this holder does not hold the lock (released, expired, or never acquired)";

/// What a "not acquired" answer of a queued primitive says about places.
pub const QUEUED: &str = "A try (wait_ms 0) takes no place in the queue; a long-poll keeps its \
    place for the queue grace after it ends, so poll again with the same holder within it";

/// 409 `lock-held` of a lock of either kind: the hint, the owners of the
/// holds that block (`held_by`), and on fair locks the waiter's position.
pub fn lock_held(blocked: Blocked) -> ApiError {
    let mut problem = ApiError::lock_held(blocked.retry_after_ms).with_held_by(blocked.held_by);
    if let Some(position) = blocked.position {
        problem.problem.detail = format!(
            "the lock is held, or waiters are queued ahead: {position} ahead of this holder. {QUEUED}"
        );
        problem.problem.position = Some(position);
    }
    problem
}

/// 409 `lock-held` of a set: which of its locks are held by others, and
/// the owner labels of their holds.
pub fn set_held(
    blocked_by: Vec<String>,
    retry_after_ms: u64,
    held_by: Vec<Option<String>>,
) -> ApiError {
    let mut problem = ApiError::lock_held(retry_after_ms).with_held_by(held_by);
    problem.problem.detail =
        "some locks of the set are held by other holders (see blocked_by); nothing was taken"
            .into();
    problem.problem.blocked_by = Some(blocked_by);
    problem
}

/// 409 `lock-held` of a RedLock: no quorum of the nodes is free; the
/// owner labels the refusing nodes report.
pub fn held_on_quorum(retry_after_ms: u64, held_by: Vec<Option<String>>) -> ApiError {
    let mut problem = ApiError::lock_held(retry_after_ms).with_held_by(held_by);
    problem.problem.detail =
        "the lock is held by another holder on enough nodes that no quorum is free".into();
    problem
}

/// 409 `no-permits`: the hint, the permits available now and the waiters
/// ahead.
pub fn no_permits(blocked: Blocked) -> ApiError {
    let mut problem = ApiError::new(
        StatusCode::CONFLICT,
        ProblemType::NoPermits,
        format!("not enough permits are available, or waiters are queued ahead. {QUEUED}"),
    )
    .with_retry_after_ms(blocked.retry_after_ms)
    .with_held_by(blocked.held_by);
    problem.problem.available = blocked.available;
    problem.problem.position = blocked.position;
    problem
}

/// 429 `rate-limited`: when the permits will be available, and how many
/// are now.
pub fn rate_limited(blocked: Blocked) -> ApiError {
    let mut problem = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        ProblemType::RateLimited,
        "not enough permits now; retry_after_ms says when they will be (an acquire with \
         wait_ms at least that long reserves them and is answered then)",
    )
    .with_retry_after_ms(blocked.retry_after_ms);
    problem.problem.available = blocked.available;
    problem
}

/// 409 `latch-exists`: the latch is closed with `count`.
pub fn latch_exists(count: u64) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        ProblemType::LatchExists,
        format!(
            "the latch is closed with count {count}; it can be set again once it opens (counted \
             down to 0, deleted, or its ttl_ms passed)"
        ),
    )
}

/// The detail of a 404 on a session's own routes.
pub const NO_SUCH_SESSION: &str =
    "no such session: it expired, was deleted, or never existed in this namespace";
