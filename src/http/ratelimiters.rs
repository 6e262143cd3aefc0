//! `/rate-limiters/{name}/...`: GCRA rate limiters (README: "Rate
//! limiters"). An acquire is an [`Acquisition`] in [`WaitMode::Watch`]
//! whose first try either admits, refuses at once (the permits come later
//! than `wait_ms`: [`Acquisition::may_wait`] says no), or reserves the
//! permits for their exact time; the wait engine then only has to be there
//! at that time (the try's `retry_after_ms`), and the limiter's channel
//! wakes it early when the limiter is deleted (404).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use utoipa::ToSchema;

use crate::coord::ratelimiters::{Due, RateConfig, RateLimiters, RateState, Reservation, Taken};
use crate::coord::{Attempt, AttemptId, Blocked, Refusal};
use crate::error::{ApiError, ProblemType};
use crate::http::access::{Admin, Scope, ScopedName};
use crate::http::extract::{Amount, ApiJson, ApiPath, Millis, Owner, idempotency_key, wait_from};
use crate::http::lock_family::NamePath;
use crate::http::longpoll::{self, Acquisition, Timing};
use crate::http::responses::{BodyErrors, ObjectErrors, RateAcquireErrors};
use crate::state::AppState;
use crate::store::StoreError;
use crate::wait::WaitMode;

pub const TAG: &str = "rate-limiters";

/// The largest `rate` and `burst` (and so `permits`): with [`MAX_PER_MS`],
/// they keep every time the scripts compute exact in Lua's doubles
/// (`scripts/rl.lua`).
pub const MAX_RATE: u64 = 1_000_000;
pub const MAX_BURST: u64 = 1_000_000;
/// The longest period: one hour.
pub const MAX_PER_MS: u64 = 3_600_000;

/// How much longer than `wait_ms` a request with a reservation may stay
/// open: its permits are due within `wait_ms` by Redis's clock, and being
/// there to take them costs a timer tick and a Redis round trip more (a
/// few ms; a stalled Redis is what makes it run out, and then the request
/// ends like any wait, its reservation given back).
const SLOT_GRACE_MS: u64 = 100;

/// Body of a configuration. `rate` and `per_ms` are required.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"rate": 10, "per_ms": 1000, "burst": 10}))]
pub struct RateLimiterConfig {
    /// Permits per `per_ms`: 1 to 1000000.
    #[schema(value_type = u64, minimum = 1, maximum = 1000000, example = 10)]
    pub rate: Option<Amount>,
    /// The period of `rate`, in ms: 1 to 3600000 (one hour).
    #[schema(value_type = u64, minimum = 1, maximum = 3600000, example = 1000)]
    pub per_ms: Option<Millis>,
    /// The most permits admitted at once, after a quiet spell (default
    /// `rate`; 1 to 1000000).
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 1000000, example = 10)]
    pub burst: Option<Amount>,
}

/// A limiter's configuration and the permits it could admit right now.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"name": "api-calls", "rate": 10, "per_ms": 1000, "burst": 10, "available": 7}))]
pub struct RateLimiterStatus {
    pub name: String,
    /// Permits per `per_ms`.
    pub rate: u64,
    /// The period of `rate`, in ms.
    pub per_ms: u64,
    /// The most permits admitted at once.
    pub burst: u64,
    /// Permits an acquire could take right now (0 while waiters have
    /// reserved what comes next).
    pub available: u64,
}

impl RateLimiterStatus {
    fn new(name: String, config: RateConfig, available: u64) -> Self {
        RateLimiterStatus {
            name,
            rate: config.rate,
            per_ms: config.per_ms,
            burst: config.burst,
            available,
        }
    }
}

/// Body of an acquire. Every field is optional; the body may be omitted.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"permits": 1, "wait_ms": 0}))]
pub struct RateAcquireRequest {
    /// Permits to take (default 1); at most the limiter's `burst`.
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 1000000, example = 1)]
    pub permits: Option<Amount>,
    /// How long to wait for the permits, in ms (default 0 = now or
    /// never). When they come within it, they are reserved at once and
    /// the answer comes when they are due. The maximum is configuration
    /// (max_wait_ms); each server shows its own.
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 60000, example = 0)]
    pub wait_ms: Option<Millis>,
    /// Who acquires, in words (1-200 bytes of UTF-8 without control
    /// characters; else 400 `invalid-body`), as on every acquire. Checked
    /// and then dropped: a rate limiter keeps no holds, so there is no
    /// holder to show it for.
    pub owner: Option<Owner>,
}

/// The answer to an acquire.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[schema(example = json!({"permits": 1, "available": 9}))]
pub struct RateGrant {
    /// The permits admitted.
    pub permits: u64,
    /// Permits another acquire could take right now.
    pub available: u64,
}

/// The answer to a deletion.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"deleted": true}))]
pub struct RateLimiterDeleted {
    pub deleted: bool,
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

fn no_such_limiter() -> ApiError {
    ApiError::not_found("no such rate limiter: configure it first with PUT /rate-limiters/{name}")
}

/// Whole ms, rounded up: a hint never says "now" before the time.
fn ms_of(us: u64) -> u64 {
    us.div_ceil(1000)
}

/// The reservation of one acquire, shared by the clones of its
/// [`RateAcquisition`] (the SSE task's, a give-back's).
struct Held {
    limiters: RateLimiters,
    name: ScopedName,
    permits: u64,
    booked: Mutex<Option<Booked>>,
}

struct Booked {
    reservation: Reservation,
    /// The permits reserved (a retry with an `Idempotency-Key` gets the
    /// first request's).
    permits: u64,
    /// The acquire that reserved, where it may be given back; never with
    /// an `Idempotency-Key` (a retry with the key takes the reservation
    /// over, so it must stand).
    owner: Option<AttemptId>,
    /// Its time came (settled in Redis: it may have been delivered, and
    /// is never given back), or the limiter was found gone: nothing is
    /// left to give back.
    settled: bool,
}

impl Drop for Held {
    /// The request ended with its reservation unused and unsettled (its
    /// client left, shutdown, an error, Redis stalled past the time): give
    /// it back, in the background, if nothing was reserved after it. A
    /// check that did settle it in Redis though its answer was lost makes
    /// Redis refuse this give-back (`scripts/rl_slot.lua`).
    fn drop(&mut self) {
        let Some(booked) = self.booked.get_mut().take() else {
            return;
        };
        if let (false, Some(owner)) = (booked.settled, booked.owner) {
            let acquisition = RateAcquisition::new(
                self.limiters.clone(),
                self.name.clone(),
                self.permits,
                None,
                Instant::now(),
            );
            longpoll::give_back(acquisition, owner);
        }
    }
}

/// One acquire of permits.
#[derive(Clone)]
struct RateAcquisition {
    held: Arc<Held>,
    idempotency_key: Option<Arc<str>>,
    /// The end of the request's `wait_ms`: a reservation must fall before.
    wait_until: Instant,
}

impl RateAcquisition {
    fn new(
        limiters: RateLimiters,
        name: ScopedName,
        permits: u64,
        idempotency_key: Option<Arc<str>>,
        wait_until: Instant,
    ) -> Self {
        RateAcquisition {
            held: Arc::new(Held {
                limiters,
                name,
                permits,
                booked: Mutex::new(None),
            }),
            idempotency_key,
            wait_until,
        }
    }

    /// The first try: admit, reserve, or say when.
    async fn take(&self, attempt: &AttemptId) -> Result<Attempt<RateGrant>, StoreError> {
        let held = &self.held;
        let left = self.wait_until.saturating_duration_since(Instant::now());
        let taken = (held.limiters)
            .acquire(
                &held.name.key,
                held.permits,
                left.as_micros() as u64,
                attempt,
                self.idempotency_key.as_deref(),
            )
            .await?;
        Ok(match taken {
            Taken::Admitted { permits, available } => {
                Attempt::Granted(RateGrant { permits, available })
            }
            Taken::Reserved {
                permits,
                wait_us,
                reservation,
            } => {
                *held.booked.lock() = Some(Booked {
                    reservation,
                    permits,
                    owner: self.idempotency_key.is_none().then(|| attempt.clone()),
                    settled: false,
                });
                Attempt::Blocked(Blocked::after(ms_of(wait_us)))
            }
            Taken::Limited { wait_us, available } => Attempt::Blocked(Blocked {
                available: Some(available),
                ..Blocked::after(ms_of(wait_us))
            }),
            Taken::NotFound => Attempt::Refused(Refusal::NotFound),
            Taken::OverBurst { burst } => Attempt::Refused(Refusal::OverBurst(burst)),
        })
    }

    /// A later try: has the reservation's time come? If so, it is
    /// settled (never given back from then on) and granted.
    async fn at_slot(
        &self,
        reservation: &Reservation,
        permits: u64,
        owner: Option<&AttemptId>,
    ) -> Result<Attempt<RateGrant>, StoreError> {
        let held = &self.held;
        let key = self.idempotency_key.as_deref();
        let due = (held.limiters)
            .settle(&held.name.key, reservation, owner, key)
            .await?;
        let settle = || {
            if let Some(booked) = held.booked.lock().as_mut() {
                booked.settled = true;
            }
        };
        Ok(match due {
            Due::Now { available } => {
                settle();
                Attempt::Granted(RateGrant { permits, available })
            }
            Due::In { wait_us } => Attempt::Blocked(Blocked::after(ms_of(wait_us))),
            Due::Gone => {
                settle();
                Attempt::Refused(Refusal::NotFound)
            }
        })
    }
}

impl Acquisition for RateAcquisition {
    type Grant = RateGrant;

    fn primitive(&self) -> &'static str {
        "rate_limiter"
    }

    fn channel(&self) -> String {
        self.held.limiters.wake_channel(&self.held.name.key)
    }

    /// Each waiter waits for its own time; none waits for another.
    fn mode(&self) -> WaitMode {
        WaitMode::Watch
    }

    async fn attempt(&self, attempt: &AttemptId) -> Result<Attempt<RateGrant>, StoreError> {
        let booked = (self.held.booked.lock().as_ref())
            .map(|b| (b.reservation.clone(), b.permits, b.owner.clone()));
        match booked {
            Some((reservation, permits, owner)) => {
                self.at_slot(&reservation, permits, owner.as_ref()).await
            }
            None => self.take(attempt).await,
        }
    }

    /// What a give-back of `attempt` may take back, decided once when it
    /// starts. With an `Idempotency-Key`, nothing: a retry with the key
    /// takes the reservation over, so it must stand. Once the request has
    /// a reservation, nothing either: every later try only settles it and
    /// takes nothing of its own — a check at the reserved time that failed
    /// on a stalled Redis must not become, on a later retry, a give-back
    /// of permits the waiter was admitted with meanwhile. The reservation
    /// itself is given back only when the request ends without it
    /// (dropping [`Held`]), and never once settled. Before that, what the
    /// first try `attempt` may have taken (its outcome is unknown: the
    /// request fails).
    fn undoing(&self, attempt: AttemptId) -> Option<AttemptId> {
        let reserved = self.held.booked.lock().is_some();
        (self.idempotency_key.is_none() && !reserved).then_some(attempt)
    }

    /// Gives back what `attempt` took, if nothing was taken after it (and
    /// it was not a settled reservation).
    async fn undo(&self, attempt: &AttemptId) -> Result<bool, StoreError> {
        let held = &self.held;
        (held.limiters)
            .give_back(&held.name.key, attempt, held.permits)
            .await
    }

    /// Only with a reservation: without one, the permits come too late.
    fn may_wait(&self, _blocked: &Blocked) -> bool {
        self.held.booked.lock().is_some()
    }

    fn blocked(&self, blocked: Blocked) -> ApiError {
        rate_limited(blocked)
    }

    fn grant_body<'a>(&'a self, grant: &'a RateGrant) -> impl Serialize + 'a {
        grant
    }

    /// 200, not 201: a rate limiter's grant makes no hold to point to.
    fn granted(&self, grant: RateGrant) -> Response {
        Json(grant).into_response()
    }
}

/// Configure a rate limiter (creating it, or changing it at once).
///
/// A new limiter starts full: `burst` permits available. A change applies
/// at once and keeps the permits available now (at most the new `burst`,
/// rounded down, never up); permits already reserved by waiting requests
/// stay theirs, at the time they were promised, and requests that arrive
/// after the change queue behind them at the new rate. A PUT of the
/// configuration the limiter already has changes nothing.
#[utoipa::path(
    put,
    path = "/rate-limiters/{name}",
    operation_id = "configure_rate_limiter",
    tag = TAG,
    params(NamePath),
    request_body(content = RateLimiterConfig, content_type = "application/json"),
    responses(
        (status = 200, description = "Configured: the configuration and the permits available now", body = RateLimiterStatus),
        BodyErrors,
    )
)]
pub async fn configure(
    State(state): State<AppState>,
    Admin(scope): Admin,
    ApiPath(path): ApiPath<NamePath>,
    ApiJson(body): ApiJson<RateLimiterConfig>,
) -> Result<Json<RateLimiterStatus>, ApiError> {
    let name = scope.name(path.name)?;
    let required = || {
        ApiError::invalid_body(
            "rate and per_ms are required, e.g. {\"rate\": 10, \"per_ms\": 1000} (10 permits a \
             second)",
        )
    };
    let rate = body
        .rate
        .ok_or_else(required)?
        .within("rate", 1, MAX_RATE)?;
    let per_ms = (body.per_ms.ok_or_else(required)?).within("per_ms", 1, MAX_PER_MS)?;
    let burst = match body.burst {
        None => rate,
        Some(burst) => burst.within("burst", 1, MAX_BURST)?,
    };
    let config = RateConfig {
        rate,
        per_ms,
        burst,
    };
    let available = state.rate_limiters.configure(&name.key, config).await?;
    Ok(Json(RateLimiterStatus::new(name.name, config, available)))
}

/// Read a rate limiter's configuration and the permits available now.
#[utoipa::path(
    get,
    path = "/rate-limiters/{name}",
    operation_id = "get_rate_limiter",
    tag = TAG,
    params(NamePath),
    responses(
        (status = 200, description = "The configuration and the permits available now", body = RateLimiterStatus),
        ObjectErrors,
    )
)]
pub async fn state(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<NamePath>,
) -> Result<Json<RateLimiterStatus>, ApiError> {
    let name = scope.name(path.name)?;
    let RateState { config, available } =
        (state.rate_limiters.state(&name.key).await?).ok_or_else(no_such_limiter)?;
    Ok(Json(RateLimiterStatus::new(name.name, config, available)))
}

/// Delete a rate limiter. Requests waiting for its permits end with 404
/// `not-found`, on every instance.
#[utoipa::path(
    delete,
    path = "/rate-limiters/{name}",
    operation_id = "delete_rate_limiter",
    tag = TAG,
    params(NamePath),
    responses(
        (status = 200, description = "Deleted", body = RateLimiterDeleted),
        ObjectErrors,
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    Admin(scope): Admin,
    ApiPath(path): ApiPath<NamePath>,
) -> Result<Json<RateLimiterDeleted>, ApiError> {
    let name = scope.name(path.name)?;
    match state.rate_limiters.delete(&name.key).await? {
        true => Ok(Json(RateLimiterDeleted { deleted: true })),
        false => Err(no_such_limiter()),
    }
}

const SSE_EXAMPLE: &str = "event: waiting\ndata: {\"retry_after_ms\":250}\n\nevent: acquired\ndata: {\"permits\":1,\"available\":0}\n\n";

/// Take permits.
///
/// Admitted at once when the limiter allows it. Otherwise, when the
/// permits come within `wait_ms`, they are reserved at once and the
/// request is answered at the exact time they are due (long-poll, or SSE
/// with `Accept: text/event-stream`): waiters are admitted in arrival
/// order, so a large request is never overtaken by small ones. When they
/// come later, 429 `rate-limited` at once, nothing reserved, with
/// `retry_after_ms`: when `permits` will be available. Reserved permits
/// whose time has come are the request's for good: they are never given
/// back, even when the answer cannot be delivered. An `owner` label is
/// checked as on every acquire but kept nowhere: a rate limiter keeps no
/// holds, so no state read or refusal names owners.
#[utoipa::path(
    post,
    path = "/rate-limiters/{name}/acquire",
    operation_id = "acquire_rate_limiter",
    tag = TAG,
    params(
        NamePath,
        ("Idempotency-Key" = Option<String>, Header,
            description = "Makes retries safe: the same key on the same limiter within 10 minutes \
                counts once and replays the first answer exactly, its `available` too (or, while \
                the first request's reservation is pending, waits for the same time and gets the \
                answer given then). 1-255 visible ASCII characters, e.g. a UUID. An acquire that was refused (404, 400 beyond the burst, 429) is not \
                remembered; a retry after the limiter was deleted is 404.",
            example = "0b6f0d3c-5c2e-4a57-9d43-3b1b7f7a2e10",
            pattern = "^[!-~]{1,255}$"),
    ),
    request_body(content = Option<RateAcquireRequest>, content_type = "application/json"),
    responses(
        (status = 200, description = "Admitted. With `Accept: text/event-stream`: a `waiting` \
            event (`retry_after_ms`: when the reserved permits are due) while the request waits, \
            then one of `acquired` (data: this body), `timeout` or `error` (data: a problem).",
            content((RateGrant = "application/json"), (String = "text/event-stream", example = json!(SSE_EXAMPLE)))),
        RateAcquireErrors,
    )
)]
pub async fn acquire(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<NamePath>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<RateAcquireRequest>,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let name = scope.name(path.name)?;
    let key = idempotency_key(&headers)?.map(Arc::from);
    let permits = match body.permits {
        None => 1,
        Some(permits) => permits.within("permits", 1, MAX_BURST)?,
    };
    let wait_ms = wait_from(&state, body.wait_ms)?;
    // Validated by the body's parsing; nothing holds, so nothing keeps it.
    drop(body.owner);
    let wait_until = arrived + std::time::Duration::from_millis(wait_ms);
    let limiters = state.rate_limiters.clone();
    let acquisition = RateAcquisition::new(limiters, name, permits, key, wait_until);
    let timing = Timing {
        arrived,
        wait_ms: match wait_ms {
            0 => 0,
            ms => ms + SLOT_GRACE_MS,
        },
    };
    longpoll::respond(&state, headers, timing, acquisition).await
}
