//! The error responses many operations share, described once for the
//! OpenAPI document (`responses(…, NameErrors)` in a route's annotation),
//! and the [`examples`] every documented error response shows.
//!
//! Every error is `application/problem+json` (see the book's "Errors"
//! (docs/src/errors.md)).
//! Each documented error response carries its own examples, one per
//! problem type it can answer with, named after the slug: Swagger UI shows
//! them in place of the `Problem` schema's single example, so a reader of
//! a 404 sees a 404.

use serde::Serialize;
use utoipa::{IntoResponses, ToSchema};

use crate::coord::HoldInfo;
use crate::error::Problem;

/// What a hold's count stands for in a [`HoldView`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// Reentrant holds (locks, fair locks, RedLock, rwlocks).
    HoldCount,
    /// Permits (semaphores).
    Permits,
}

/// A read-write lock hold's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HoldMode {
    Read,
    Write,
}

/// One current hold, as a state read shows it (the book's "Who holds it"
/// (docs/src/who-holds-it.md)): who holds (the owner label, never the
/// holder id), until when, since when, whether in a session (never its
/// id), and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(example = json!({
    "owner": "web-7 pid 4242 POST /orders/42",
    "expires_in_ms": 24500,
    "held_for_ms": 5500,
    "session": false,
    "hold_count": 1
}))]
pub struct HoldView {
    /// The owner label the acquire sent (or, for a hold taken in a session
    /// by an acquire that sent none, the session's); null when none.
    /// Visible to every client of the namespace: not a secret.
    #[schema(required = true)]
    pub owner: Option<String>,
    /// Remaining lease, in ms.
    pub expires_in_ms: u64,
    /// How long ago the grant that made this hold happened, in ms (a
    /// re-entry or renewal keeps it).
    pub held_for_ms: u64,
    /// True when the hold was taken in a session (it lives as long as the
    /// session).
    pub session: bool,
    /// Reentrant holds of this holder (locks, fair locks, RedLock,
    /// read-write locks).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub hold_count: Option<u64>,
    /// Read-write locks: `read` or `write`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub mode: Option<HoldMode>,
    /// Semaphores: the permits this hold has.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub permits: Option<u64>,
}

impl HoldView {
    /// The view of a hold a script reported; `counted` says what its count
    /// is. A mode other than `read`/`write` is left out.
    pub fn new(info: HoldInfo, counted: Counted) -> Self {
        let mode = match info.mode.as_deref() {
            Some("read") => Some(HoldMode::Read),
            Some("write") => Some(HoldMode::Write),
            _ => None,
        };
        HoldView {
            owner: info.owner,
            expires_in_ms: info.expires_in_ms,
            held_for_ms: info.held_for_ms,
            session: info.session,
            hold_count: (counted == Counted::HoldCount).then_some(info.count),
            mode,
            permits: (counted == Counted::Permits).then_some(info.count),
        }
    }

    /// [`Self::new`] for every hold of a list.
    pub fn all(holds: Vec<HoldInfo>, counted: Counted) -> Vec<Self> {
        holds.into_iter().map(|h| Self::new(h, counted)).collect()
    }
}

/// Problem documents as the service sends them, for the OpenAPI document:
/// each is built by the constructor the service answers with, so the
/// examples show the real status, title and detail.
pub mod examples {
    use crate::coord::Blocked;
    use crate::error::{ApiError, Problem};
    use crate::http::extract::{Millis, check_name, check_prefix};
    use crate::http::problems::{self, lock_held as held};
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
        problem(ApiError::not_held(problems::NOT_HELD))
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

    /// The owners a refusal names in the examples.
    fn owners() -> Vec<Option<String>> {
        vec![Some("web-7 pid 4242 POST /orders/42".into())]
    }

    pub fn lock_held() -> Problem {
        problem(held(Blocked {
            retry_after_ms: 2500,
            held_by: owners(),
            ..Blocked::default()
        }))
    }

    pub fn fair_lock_held() -> Problem {
        problem(held(Blocked {
            retry_after_ms: 2500,
            position: Some(2),
            held_by: owners(),
            ..Blocked::default()
        }))
    }

    pub fn set_held() -> Problem {
        problem(problems::set_held(vec!["orders".into()], 2500, owners()))
    }

    pub fn held_on_quorum() -> Problem {
        problem(problems::held_on_quorum(2500, owners()))
    }

    pub fn no_permits() -> Problem {
        problem(problems::no_permits(Blocked {
            retry_after_ms: 2500,
            position: Some(1),
            available: Some(0),
            ..Blocked::default()
        }))
    }

    pub fn rate_limited() -> Problem {
        problem(problems::rate_limited(Blocked {
            retry_after_ms: 250,
            available: Some(0),
            ..Blocked::default()
        }))
    }

    /// The problems of an acquire of several rate limits name the limit
    /// they are about.
    fn of_limit(mut problem: ApiError, name: &str, key: Option<&str>) -> Problem {
        problem.problem.limit = Some(crate::error::LimitRef {
            name: name.into(),
            key: key.map(Into::into),
        });
        problem.problem.clone()
    }

    pub fn limits_rate_limited() -> Problem {
        let blocked = Blocked {
            retry_after_ms: 1250,
            available: Some(0),
            ..Blocked::default()
        };
        of_limit(
            problems::rate_limited(blocked),
            "api-per-user",
            Some("user-42"),
        )
    }

    pub fn limits_not_found() -> Problem {
        let problem = ApiError::not_found(
            "no such rate limiter: configure it first with PUT /rate-limiters/{name}",
        );
        of_limit(problem, "api-per-ip", Some("203.0.113.7"))
    }

    pub fn limits_out_of_range() -> Problem {
        let refusal = crate::wait::WaitError::Refused(crate::coord::Refusal::OverBurst(10));
        let problem = ApiError::from(refusal);
        of_limit(problem, "api", None)
    }

    pub fn latch_exists() -> Problem {
        problem(problems::latch_exists(3))
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

    pub fn unauthorized() -> Problem {
        problem(crate::http::access::no_key())
    }

    pub fn forbidden() -> Problem {
        problem(crate::http::access::admin_only())
    }

    pub fn redlock_not_configured() -> Problem {
        problem(ApiError::redlock_not_configured())
    }

    pub fn no_such_session() -> Problem {
        problem(ApiError::no_such_session())
    }

    pub fn session_mismatch() -> Problem {
        problem(ApiError::session_mismatch())
    }

    pub fn session_not_found() -> Problem {
        problem(ApiError::not_found(problems::NO_SUCH_SESSION))
    }

    pub fn session_not_held() -> Problem {
        problem(ApiError::not_held(problems::NO_SUCH_SESSION))
    }

    pub fn invalid_prefix() -> Problem {
        problem(check_prefix("orders/*").expect_err("a slash is not allowed in prefixes"))
    }

    pub fn invalid_key() -> Problem {
        problem(ApiError::invalid_body(
            "invalid query string: key: key must have no control characters (newlines, tabs, ...)",
        ))
    }

    pub fn invalid_cursor() -> Problem {
        problem(ApiError::invalid_body(
            "invalid cursor: pass the cursor of the previous page back unchanged",
        ))
    }

    pub fn limit_out_of_range() -> Problem {
        problem(
            ApiError::out_of_range("limit must be 1-1000, got 5000")
                .with_field("limit")
                .with_range(1, 1000),
        )
    }

    pub fn invalid_ttl() -> Problem {
        problem(
            Millis(100)
                .within("ttl_ms", 500, 86_400_000)
                .expect_err("below the minimum"),
        )
    }
}

/// An `IntoResponses` enum of problem documents, for the OpenAPI document
/// only (never built): each variant is one status, with its description
/// and its examples, `("<slug>", <function in [`examples`]>)`.
macro_rules! problem_responses {
    (
        $(#[doc = $doc:tt])*
        $name:ident {
            $(
                $(#[doc = $variant_doc:tt])*
                $variant:ident = $status:tt [$(($slug:tt, $example:ident)),+ $(,)?],
            )+
        }
    ) => {
        $(#[doc = $doc])*
        #[derive(IntoResponses)]
        #[allow(dead_code)] // documentation only: never built
        pub enum $name {
            $(
                $(#[doc = $variant_doc])*
                #[response(status = $status, content_type = "application/problem+json", examples(
                    $(($slug = (value = json!(examples::$example())))),+
                ))]
                $variant(Problem),
            )+
        }
    };
}

problem_responses! {
    /// Errors of an operation on an object named in the path.
    NameErrors {
        /// Invalid name
        Invalid = 400 [("invalid-name", invalid_name)],
        /// Redis unavailable
        Unavailable = 503 [("backend-unavailable", backend_unavailable)],
    }
}

problem_responses! {
    /// Errors of reading an object that must exist.
    ObjectErrors {
        /// Invalid name
        Invalid = 400 [("invalid-name", invalid_name)],
        /// No such object
        NotFound = 404 [("not-found", not_found)],
        /// Redis unavailable
        Unavailable = 503 [("backend-unavailable", backend_unavailable)],
    }
}

problem_responses! {
    /// Errors of reading a rate limiter, or one key's bucket of it.
    RateReadErrors {
        /// Invalid name, or an invalid `key` (`invalid-body`)
        Invalid = 400 [("invalid-name", invalid_name), ("invalid-body", invalid_key)],
        /// No such rate limiter
        NotFound = 404 [("not-found", not_found)],
        /// Redis unavailable
        Unavailable = 503 [("backend-unavailable", backend_unavailable)],
    }
}

problem_responses! {
    /// Errors of a listing (`GET /{kind}`).
    ListErrors {
        /// Invalid prefix, cursor or query, or `limit` out of range
        Invalid = 400 [("invalid-name", invalid_prefix), ("invalid-body", invalid_cursor), ("out-of-range", limit_out_of_range)],
        /// Redis unavailable
        Unavailable = 503 [("backend-unavailable", backend_unavailable)],
    }
}

problem_responses! {
    /// Errors of listing RedLocks: [`ListErrors`] whose 503 also says when
    /// no RedLock nodes are configured or one does not answer.
    QuorumListErrors {
        /// Invalid prefix, cursor or query, or `limit` out of range
        Invalid = 400 [("invalid-name", invalid_prefix), ("invalid-body", invalid_cursor), ("out-of-range", limit_out_of_range)],
        /// A node is unavailable, or no RedLock nodes are configured
        Unavailable = 503 [("backend-unavailable", backend_unavailable), ("redlock-not-configured", redlock_not_configured)],
    }
}

problem_responses! {
    /// Errors of an operation that takes a JSON body and never waits.
    BodyErrors {
        /// Invalid name, body or out-of-range value
        Invalid = 400 [("invalid-name", invalid_name), ("invalid-body", invalid_body), ("out-of-range", out_of_range)],
        /// Body is not JSON
        NotJson = 415 [("unsupported-media-type", unsupported_media_type)],
        /// Redis unavailable
        Unavailable = 503 [("backend-unavailable", backend_unavailable)],
    }
}

problem_responses! {
    /// Errors of an operation on a holder's holds (heartbeat, release).
    HoldErrors {
        /// Invalid name, holder, body or query
        Invalid = 400 [("invalid-name", invalid_name), ("invalid-body", invalid_body), ("out-of-range", out_of_range)],
        /// Not held by this holder (released, expired or never acquired)
        NotHeld = 404 [("not-held", not_held)],
        /// Redis unavailable
        Unavailable = 503 [("backend-unavailable", backend_unavailable)],
    }
}

problem_responses! {
    /// Errors of a heartbeat: [`HoldErrors`], and 415 for a body that is
    /// not JSON.
    RenewErrors {
        /// Invalid name, holder or body, or a lease out of range
        Invalid = 400 [("invalid-name", invalid_name), ("invalid-body", invalid_body), ("out-of-range", out_of_range)],
        /// Body is not JSON
        NotJson = 415 [("unsupported-media-type", unsupported_media_type)],
        /// Not held by this holder (released, expired or never acquired)
        NotHeld = 404 [("not-held", not_held)],
        /// Redis unavailable
        Unavailable = 503 [("backend-unavailable", backend_unavailable)],
    }
}

problem_responses! {
    /// Errors of a multi-lock's heartbeat and release: [`HoldErrors`] whose
    /// 404 names the locks not held.
    SetHoldErrors {
        /// Invalid names, holder or body
        Invalid = 400 [("invalid-name", invalid_name), ("invalid-body", invalid_body), ("out-of-range", out_of_range)],
        /// Body is not JSON
        NotJson = 415 [("unsupported-media-type", unsupported_media_type)],
        /// Some locks of the set are not held by this holder (`not_held`
        /// names them); nothing was changed
        NotHeld = 404 [("not-held", not_held_set)],
        /// Redis unavailable
        Unavailable = 503 [("backend-unavailable", backend_unavailable)],
    }
}

problem_responses! {
    /// Errors of a RedLock heartbeat and release: [`HoldErrors`] whose 503
    /// also says when too few nodes answer, or none are configured.
    QuorumHoldErrors {
        /// Invalid name, holder or body
        Invalid = 400 [("invalid-name", invalid_name), ("invalid-body", invalid_body), ("out-of-range", out_of_range)],
        /// Not held by this holder on a quorum of the nodes
        NotHeld = 404 [("not-held", not_held)],
        /// Too few nodes answered to tell, or no RedLock nodes are configured
        Unavailable = 503 [("quorum-unavailable", quorum_unavailable), ("redlock-not-configured", redlock_not_configured)],
    }
}

problem_responses! {
    /// Errors of a RedLock heartbeat: [`QuorumHoldErrors`], and 415 for a
    /// body that is not JSON.
    QuorumRenewErrors {
        /// Invalid name, holder or body, or a lease out of range
        Invalid = 400 [("invalid-name", invalid_name), ("invalid-body", invalid_body), ("out-of-range", out_of_range)],
        /// Body is not JSON
        NotJson = 415 [("unsupported-media-type", unsupported_media_type)],
        /// Not held by this holder on a quorum of the nodes
        NotHeld = 404 [("not-held", not_held)],
        /// Too few nodes answered to tell, or no RedLock nodes are configured
        Unavailable = 503 [("quorum-unavailable", quorum_unavailable), ("redlock-not-configured", redlock_not_configured)],
    }
}

problem_responses! {
    /// Errors of a wait besides its answer (a latch's `/wait`).
    WaitErrors {
        /// Invalid name or query, or `wait_ms` out of range
        Invalid = 400 [("invalid-name", invalid_name), ("invalid-body", invalid_body), ("out-of-range", out_of_range)],
        /// Too many waiters on this instance
        TooManyWaiters = 429 [("too-many-waiters", too_many_waiters)],
        /// Redis unavailable, or shutting down
        Unavailable = 503 [("backend-unavailable", backend_unavailable), ("shutting-down", shutting_down)],
    }
}

problem_responses! {
    /// Errors of an acquire besides its "not acquired" answer.
    AcquireErrors {
        /// Invalid name, body or out-of-range value
        Invalid = 400 [("invalid-name", invalid_name), ("invalid-body", invalid_body), ("out-of-range", out_of_range)],
        /// Body is not JSON
        NotJson = 415 [("unsupported-media-type", unsupported_media_type)],
        /// Too many waiters on this instance
        TooManyWaiters = 429 [("too-many-waiters", too_many_waiters)],
        /// Redis unavailable, or shutting down
        Unavailable = 503 [("backend-unavailable", backend_unavailable), ("shutting-down", shutting_down)],
    }
}

problem_responses! {
    /// Every error of a rate limiter's acquire: [`AcquireErrors`], the
    /// limiter's 404, and its "not admitted" 429 besides the instance's.
    RateAcquireErrors {
        /// Invalid name or body, an out-of-range value, or more permits than the burst
        Invalid = 400 [("invalid-name", invalid_name), ("invalid-body", invalid_body), ("out-of-range", out_of_range)],
        /// No such rate limiter (`not-found`): never configured, or deleted (while the request waited, or before)
        NotFound = 404 [("not-found", not_found)],
        /// Body is not JSON
        NotJson = 415 [("unsupported-media-type", unsupported_media_type)],
        /// Not admitted (`rate-limited`): the permits come later than `wait_ms`; `retry_after_ms` says when, and `available` how many there are now. Or too many waiters on this instance
        Limited = 429 [("rate-limited", rate_limited), ("too-many-waiters", too_many_waiters)],
        /// Redis unavailable, or shutting down
        Unavailable = 503 [("backend-unavailable", backend_unavailable), ("shutting-down", shutting_down)],
    }
}

problem_responses! {
    /// Every error of an acquire of several rate limits: as one limiter's,
    /// each naming the limit it is about (`limit`).
    RateLimitsErrors {
        /// Invalid body (no limits, more than 16, one listed twice, an
        /// Idempotency-Key), an invalid name, or more permits than a
        /// limit's burst (`out-of-range`, naming the limit)
        Invalid = 400 [("invalid-name", invalid_name), ("invalid-body", invalid_body), ("out-of-range", limits_out_of_range)],
        /// A limiter that does not exist (`not-found`, naming the limit)
        NotFound = 404 [("not-found", limits_not_found)],
        /// Body is not JSON
        NotJson = 415 [("unsupported-media-type", unsupported_media_type)],
        /// Not admitted (`rate-limited`): every limit admits only after `wait_ms`; `retry_after_ms` says when all of them will, `limit` names one that refused. Or too many waiters on this instance
        Limited = 429 [("rate-limited", limits_rate_limited), ("too-many-waiters", too_many_waiters)],
        /// Redis unavailable, or shutting down
        Unavailable = 503 [("backend-unavailable", backend_unavailable), ("shutting-down", shutting_down)],
    }
}

problem_responses! {
    /// Errors of a RedLock acquire besides its "not acquired" answer:
    /// [`AcquireErrors`] whose 503 also says when too few nodes answer, or
    /// none are configured.
    QuorumAcquireErrors {
        /// Invalid name, body or out-of-range value
        Invalid = 400 [("invalid-name", invalid_name), ("invalid-body", invalid_body), ("out-of-range", out_of_range)],
        /// Body is not JSON
        NotJson = 415 [("unsupported-media-type", unsupported_media_type)],
        /// Too many waiters on this instance
        TooManyWaiters = 429 [("too-many-waiters", too_many_waiters)],
        /// Too few nodes answered, no RedLock nodes are configured, Redis
        /// unavailable, or shutting down
        Unavailable = 503 [("quorum-unavailable", quorum_unavailable), ("redlock-not-configured", redlock_not_configured), ("backend-unavailable", backend_unavailable), ("shutting-down", shutting_down)],
    }
}

problem_responses! {
    /// The 404 of an acquire that names a session (`session` in its body)
    /// that does not exist.
    NoSessionErrors {
        /// No such session (`not-found`): it expired, was deleted (possibly
        /// while the request waited) or never existed; nothing was acquired
        NoSession = 404 [("not-found", no_such_session)],
    }
}

problem_responses! {
    /// Errors of creating a session.
    SessionCreateErrors {
        /// Invalid body, or `ttl_ms` out of range
        Invalid = 400 [("invalid-body", invalid_body), ("out-of-range", invalid_ttl)],
        /// Body is not JSON
        NotJson = 415 [("unsupported-media-type", unsupported_media_type)],
        /// Redis unavailable
        Unavailable = 503 [("backend-unavailable", backend_unavailable)],
    }
}

problem_responses! {
    /// Errors of reading or ending a session.
    SessionErrors {
        /// Invalid session id
        Invalid = 400 [("invalid-name", invalid_name)],
        /// No such session (expired, deleted, or never created)
        NotFound = 404 [("not-found", session_not_found)],
        /// Redis unavailable (ending it: the session is kept; retry)
        Unavailable = 503 [("backend-unavailable", backend_unavailable), ("quorum-unavailable", quorum_unavailable)],
    }
}

problem_responses! {
    /// Errors of a session's heartbeat.
    SessionRenewErrors {
        /// Invalid session id or body, or `ttl_ms` out of range
        Invalid = 400 [("invalid-name", invalid_name), ("invalid-body", invalid_body), ("out-of-range", invalid_ttl)],
        /// Body is not JSON
        NotJson = 415 [("unsupported-media-type", unsupported_media_type)],
        /// No such session (expired, deleted, or never created)
        NotHeld = 404 [("not-held", session_not_held)],
        /// Redis unavailable, or some attached hold could not be renewed
        /// (the session was): retry
        Unavailable = 503 [("backend-unavailable", backend_unavailable), ("quorum-unavailable", quorum_unavailable)],
    }
}
