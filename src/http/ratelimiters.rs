//! `/rate-limiters/{name}/...`: GCRA rate limiters (the book's "Rate
//! limiters" (docs/src/rate-limiters.md)). An acquire is an [`Acquisition`]
//! in [`WaitMode::Watch`] whose first try either admits, refuses at once (the
//! permits come later than `wait_ms`: [`Acquisition::may_wait`] says no), or
//! reserves the permits for their exact time; the wait engine then only has
//! to be there at that time (the try's `retry_after_ms`), and the limiter's
//! channel wakes it early when the limiter is deleted (404).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use utoipa::ToSchema;

use axum::http::{HeaderName, HeaderValue};

use crate::coord::ratelimiters::{
    Due, Limit, RateConfig, RateLimiters, RateState, Reservation, Taken, TakenAll,
};
use crate::coord::{Attempt, AttemptId, Blocked, Refusal};
use crate::error::{ApiError, LimitRef};
use crate::http::access::{Admin, Scope};
use crate::http::extract::{
    Amount, ApiJson, ApiPath, ApiQuery, LimitKey, Millis, Owner, check_name, idempotency_key,
    wait_from,
};
use crate::http::lock_family::NamePath;
use crate::http::longpoll::{self, Acquisition, Timing};
use crate::http::problems::rate_limited;
use crate::http::responses::{
    BodyErrors, ObjectErrors, RateAcquireErrors, RateLimitsErrors, RateReadErrors,
};
use crate::state::AppState;
use crate::store::StoreError;
use crate::wait::WaitError;
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
    /// The key whose bucket `available` is about (with `?key=`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub key: Option<String>,
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
            key: None,
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
    /// Draw from this key's own bucket (e.g. a user id): each key has the
    /// limiter's rate, period and burst. Without it, the limiter's one
    /// shared bucket.
    pub key: Option<LimitKey>,
}

/// One limit of an acquire of several.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "api-per-user", "key": "user-42", "permits": 1}))]
pub struct LimitRequest {
    /// The rate limiter (configured with PUT /rate-limiters/{name}): 1–256
    /// characters of `A-Z a-z 0-9 . _ ~ : -`.
    #[schema(example = "api-per-user", pattern = "^[A-Za-z0-9._~:-]{1,256}$")]
    pub name: String,
    /// Its key's bucket; without it, the limiter's shared bucket.
    pub key: Option<LimitKey>,
    /// Permits to take from it (default 1); at most its `burst`.
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 1000000, example = 1)]
    pub permits: Option<Amount>,
}

/// The most limits one acquire may take from.
pub const MAX_LIMITS: usize = 16;

/// Body of an acquire of several limits at once.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"limits": [
    {"name": "api-per-user", "key": "user-42"},
    {"name": "api-per-ip", "key": "203.0.113.7"},
    {"name": "api"}
], "wait_ms": 0}))]
pub struct LimitsRequest {
    /// 1 to 16 limits, each a limiter name and optionally a key; the same
    /// limiter and key at most once.
    #[schema(min_items = 1, max_items = 16)]
    pub limits: Vec<LimitRequest>,
    /// How long to wait for every limit to admit, in ms (default 0 = now
    /// or never), as for one limiter.
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 60000, example = 0)]
    pub wait_ms: Option<Millis>,
    /// Who acquires, in words: checked as on every acquire, kept nowhere.
    pub owner: Option<Owner>,
}

/// One limit of an acquire of several, admitted.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(example = json!({"name": "api-per-user", "key": "user-42", "permits": 1, "available": 19}))]
pub struct LimitGrant {
    pub name: String,
    /// The key's bucket it drew from; null: the limiter's shared bucket.
    pub key: Option<String>,
    /// The permits admitted.
    pub permits: u64,
    /// Permits another acquire could take from it right now.
    pub available: u64,
}

/// The answer to an acquire of several limits: each one's, in the order
/// they were asked for.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LimitsGrant {
    pub limits: Vec<LimitGrant>,
}

/// `GET /rate-limiters/{name}`'s query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct KeyQuery {
    /// Show this key's bucket (its `available`) rather than the shared one.
    #[param(value_type = Option<String>, min_length = 1, max_length = 256, example = "user-42",
        pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$")]
    pub key: Option<LimitKey>,
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

fn no_such_limiter() -> ApiError {
    ApiError::not_found("no such rate limiter: configure it first with PUT /rate-limiters/{name}")
}

/// Whole ms, rounded up: a hint never says "now" before the time.
fn ms_of(us: u64) -> u64 {
    us.div_ceil(1000)
}

/// The limits of one acquire and its reservation, shared by the clones of
/// its [`RateAcquisition`] (the SSE task's, a give-back's).
struct Held {
    limiters: RateLimiters,
    /// The limits as the store knows them (scoped names).
    limits: Vec<Limit>,
    /// The names as the client sent them, for the answer.
    names: Vec<String>,
    /// An acquire of several limits (`POST /rate-limiters/acquire`):
    /// answered as such, and never with an `Idempotency-Key`.
    several: bool,
    booked: Mutex<Option<Booked>>,
    /// Per limit: its configuration, as its scripts answered it.
    configs: Mutex<Vec<Option<RateConfig>>>,
}

struct Booked {
    /// One per limit.
    reservations: Vec<Reservation>,
    /// The permits reserved of a single limit (a retry with an
    /// `Idempotency-Key` gets the first request's).
    permits: u64,
    /// The acquire that reserved, where it may be given back; never with
    /// an `Idempotency-Key` (a retry with the key takes the reservation
    /// over, so it must stand).
    owner: Option<AttemptId>,
    /// Per limit: its time came (settled in Redis: it may have been
    /// delivered, and is never given back), or the limiter was found
    /// gone: nothing is left to give back.
    settled: Vec<bool>,
    /// Per limit, once settled: what it could admit next.
    available: Vec<u64>,
}

impl Drop for Held {
    /// The request ended with its reservation unused and not wholly
    /// settled (its client left, shutdown, an error, Redis stalled past
    /// the time, another limit refused): give back, in the background,
    /// what each unsettled limit reserved, if nothing was reserved after
    /// it. A check that did settle it in Redis though its answer was lost
    /// makes Redis refuse this give-back (`scripts/rl_slot.lua`).
    fn drop(&mut self) {
        let Some(booked) = self.booked.get_mut().take() else {
            return;
        };
        let Some(owner) = booked.owner else {
            return;
        };
        let limits: Vec<Limit> = (self.limits.iter().zip(&booked.settled))
            .filter(|(_, settled)| !**settled)
            .map(|(limit, _)| Limit {
                permits: match self.several {
                    true => limit.permits,
                    false => booked.permits,
                },
                ..limit.clone()
            })
            .collect();
        if limits.is_empty() {
            return;
        }
        let names = vec![String::new(); limits.len()];
        let acquisition = RateAcquisition::new(
            self.limiters.clone(),
            limits,
            names,
            self.several,
            None,
            Instant::now(),
        );
        longpoll::give_back(acquisition, owner);
    }
}

/// One acquire of permits, from one limit or several at once.
#[derive(Clone)]
struct RateAcquisition {
    held: Arc<Held>,
    idempotency_key: Option<Arc<str>>,
    /// The end of the request's `wait_ms`: a reservation must fall before.
    wait_until: Instant,
}

/// What an acquire admitted: per limit, its permits and what it could
/// admit next.
#[derive(Debug, Clone)]
struct Admitted {
    permits: Vec<u64>,
    available: Vec<u64>,
}

impl RateAcquisition {
    fn new(
        limiters: RateLimiters,
        limits: Vec<Limit>,
        names: Vec<String>,
        several: bool,
        idempotency_key: Option<Arc<str>>,
        wait_until: Instant,
    ) -> Self {
        RateAcquisition {
            held: Arc::new(Held {
                limiters,
                configs: Mutex::new(vec![None; limits.len()]),
                several,
                limits,
                names,
                booked: Mutex::new(None),
            }),
            idempotency_key,
            wait_until,
        }
    }

    fn book(&self, attempt: &AttemptId, reservations: Vec<Reservation>, permits: u64) {
        let n = reservations.len();
        *self.held.booked.lock() = Some(Booked {
            reservations,
            permits,
            owner: self.idempotency_key.is_none().then(|| attempt.clone()),
            settled: vec![false; n],
            available: vec![0; n],
        });
    }

    /// The first try of one limit: admit, reserve, or say when.
    async fn take_one(&self, attempt: &AttemptId) -> Result<Attempt<Admitted>, StoreError> {
        let held = &self.held;
        let limit = &held.limits[0];
        let left = self.wait_until.saturating_duration_since(Instant::now());
        let taken = (held.limiters)
            .acquire(
                &limit.name,
                limit.key.as_deref(),
                limit.permits,
                left.as_micros() as u64,
                attempt,
                self.idempotency_key.as_deref(),
            )
            .await?;
        Ok(match taken {
            Taken::Admitted {
                permits,
                available,
                config,
            } => {
                self.learned(0, config);
                Attempt::Granted(Admitted {
                    permits: vec![permits],
                    available: vec![available],
                })
            }
            Taken::Reserved {
                permits,
                wait_us,
                reservation,
                config,
            } => {
                self.learned(0, config);
                self.book(attempt, vec![reservation], permits);
                Attempt::Blocked(Blocked::after(ms_of(wait_us)))
            }
            Taken::Limited {
                wait_us,
                available,
                config,
            } => {
                self.learned(0, config);
                Attempt::Blocked(Blocked {
                    available: Some(available),
                    ..Blocked::after(ms_of(wait_us))
                })
            }
            Taken::NotFound => Attempt::Refused(Refusal::NotFound),
            Taken::OverBurst { burst } => Attempt::Refused(Refusal::OverBurst(burst)),
        })
    }

    /// The first try of several limits: all admit, all reserve, or none.
    async fn take_all(&self, attempt: &AttemptId) -> Result<Attempt<Admitted>, StoreError> {
        let held = &self.held;
        let left = self.wait_until.saturating_duration_since(Instant::now());
        let taken = (held.limiters)
            .acquire_all(&held.limits, left.as_micros() as u64, attempt)
            .await?;
        let permits = || held.limits.iter().map(|l| l.permits).collect();
        Ok(match taken {
            TakenAll::Admitted { available, configs } => {
                configs
                    .into_iter()
                    .enumerate()
                    .for_each(|(i, c)| self.learned(i, c));
                Attempt::Granted(Admitted {
                    permits: permits(),
                    available,
                })
            }
            TakenAll::Reserved {
                wait_us,
                reservations,
                configs,
            } => {
                configs
                    .into_iter()
                    .enumerate()
                    .for_each(|(i, c)| self.learned(i, c));
                self.book(attempt, reservations, 0);
                Attempt::Blocked(Blocked::after(ms_of(wait_us)))
            }
            TakenAll::Limited {
                wait_us,
                which,
                available,
                config,
            } => {
                if let Some(config) = config {
                    self.learned(which, config);
                }
                Attempt::Blocked(Blocked {
                    available: Some(available),
                    which: Some(which),
                    ..Blocked::after(ms_of(wait_us))
                })
            }
            TakenAll::NotFound { which } => Attempt::Refused(Refusal::NotFoundOf(which)),
            TakenAll::OverBurst { which, burst } => {
                Attempt::Refused(Refusal::OverBurstOf(which, burst))
            }
        })
    }

    /// A later try: has the reservation's time come in every limit? Each
    /// limit whose time has come is settled (never given back from then
    /// on); once all are, the request is granted.
    async fn at_slot(&self) -> Result<Attempt<Admitted>, StoreError> {
        let held = &self.held;
        let key = self.idempotency_key.as_deref();
        let mut later = 0;
        for (i, limit) in held.limits.iter().enumerate() {
            let (reservation, owner, settled) = {
                let booked = held.booked.lock();
                let Some(b) = booked.as_ref() else {
                    return Ok(Attempt::Refused(Refusal::NotFound));
                };
                (b.reservations[i].clone(), b.owner.clone(), b.settled[i])
            };
            if settled || reservation.slot_us == 0 {
                continue;
            }
            let due = (held.limiters)
                .settle(
                    &limit.name,
                    limit.key.as_deref(),
                    &reservation,
                    owner.as_ref(),
                    key,
                )
                .await?;
            if let Some(refusal) = self.settled(i, due, &mut later) {
                return Ok(Attempt::Refused(refusal));
            }
        }
        if later > 0 {
            return Ok(Attempt::Blocked(Blocked::after(ms_of(later))));
        }
        let mut booked = held.booked.lock();
        let Some(b) = booked.as_mut() else {
            return Ok(Attempt::Refused(Refusal::NotFound));
        };
        // Granted: every limit's permits are the waiter's now, also those
        // admitted at once (no reservation to settle) on a Cluster.
        b.settled.iter_mut().for_each(|s| *s = true);
        Ok(Attempt::Granted(Admitted {
            permits: match held.several {
                true => held.limits.iter().map(|l| l.permits).collect(),
                false => vec![b.permits],
            },
            available: b.available.clone(),
        }))
    }

    /// Keeps limit `i`'s configuration, as its script last answered it (what
    /// the answer's `RateLimit` header fields describe).
    fn learned(&self, i: usize, config: RateConfig) {
        if let Some(slot) = self.held.configs.lock().get_mut(i) {
            *slot = Some(config);
        }
    }

    /// Records what limit `i`'s settle found: its time came (settled), it
    /// comes later (`later`), or its limiter is gone (the refusal).
    fn settled(&self, i: usize, due: Due, later: &mut u64) -> Option<Refusal> {
        let mut booked = self.held.booked.lock();
        let b = booked.as_mut()?;
        match due {
            Due::Now { available, config } => {
                b.settled[i] = true;
                b.available[i] = available;
                drop(booked);
                self.learned(i, config);
                None
            }
            Due::In { wait_us } => {
                *later = (*later).max(wait_us);
                None
            }
            Due::Gone => {
                b.settled[i] = true;
                Some(match self.held.several {
                    true => Refusal::NotFoundOf(i),
                    false => Refusal::NotFound,
                })
            }
        }
    }

    /// The `RateLimit-Policy` and `RateLimit` header fields of an answer:
    /// every limit's policy (its configuration, as its script answered)
    /// and what it has left. `wait_ms`: when a refused request's
    /// permits come (their reset).
    fn rate_limit_headers(
        &self,
        available: &[Option<u64>],
        wait_ms: Option<u64>,
    ) -> Vec<(HeaderName, HeaderValue)> {
        let held = &self.held;
        let mut policies = Vec::new();
        let mut states = Vec::new();
        for (i, limit) in held.limits.iter().enumerate() {
            let Some(config) = held.configs.lock().get(i).copied().flatten() else {
                continue;
            };
            let item = policy_item(&held.names[i], limit.key.as_deref());
            let (quota, window) = quota_of(&config);
            policies.push(format!("{item};q={quota};w={window}"));
            if let Some(left) = available.get(i).copied().flatten() {
                let reset = match wait_ms {
                    Some(ms) => ms.div_ceil(1000),
                    None => refill_secs(&config, left),
                };
                states.push(format!("{item};r={left};t={reset}"));
            }
        }
        let mut headers = Vec::with_capacity(2);
        for (name, items) in [("ratelimit-policy", policies), ("ratelimit", states)] {
            if let (false, Ok(value)) = (items.is_empty(), HeaderValue::from_str(&items.join(", ")))
            {
                headers.push((HeaderName::from_static(name), value));
            }
        }
        headers
    }
}

/// A quota policy item: the limiter's name, and a key's as its partition
/// key (a structured-field string and byte sequence).
fn policy_item(name: &str, key: Option<&str>) -> String {
    use base64::Engine as _;
    match key {
        Some(key) => format!(
            "\"{name}\";pk=:{}:",
            base64::engine::general_purpose::STANDARD.encode(key)
        ),
        None => format!("\"{name}\""),
    }
}

/// A limiter as a quota per window of whole seconds (the header fields'
/// unit): its `burst`, over the time the burst takes to refill at its
/// rate (rounded up to whole seconds, so never more than it admits), so
/// that what is left (`r`, the `available`) is never more than the quota.
fn quota_of(config: &RateConfig) -> (u64, u64) {
    let refill_ms = config.burst as u128 * config.per_ms as u128 / config.rate as u128;
    let window = (refill_ms.div_ceil(1000) as u64).max(1);
    (config.burst, window)
}

/// Seconds until a limiter with `left` permits available is full again.
fn refill_secs(config: &RateConfig, left: u64) -> u64 {
    let missing = config.burst.saturating_sub(left) as u128;
    (missing * config.per_ms as u128).div_ceil(config.rate as u128 * 1000) as u64
}

impl Acquisition for RateAcquisition {
    type Grant = Admitted;

    fn primitive(&self) -> &'static str {
        "rate_limiter"
    }

    fn channel(&self) -> String {
        self.held.limiters.wake_channel(&self.held.limits[0].name)
    }

    /// Every limiter's: a deletion of any ends the wait (404).
    fn channels(&self) -> Vec<String> {
        let limiters = &self.held.limiters;
        (self.held.limits.iter())
            .map(|l| limiters.wake_channel(&l.name))
            .collect()
    }

    /// Each waiter waits for its own time; none waits for another.
    fn mode(&self) -> WaitMode {
        WaitMode::Watch
    }

    async fn attempt(&self, attempt: &AttemptId) -> Result<Attempt<Admitted>, StoreError> {
        if self.held.booked.lock().is_some() {
            return self.at_slot().await;
        }
        match self.held.several {
            true => self.take_all(attempt).await,
            false => self.take_one(attempt).await,
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

    /// Gives back what `attempt` took in each limit, if nothing was taken
    /// after it there (and it was not a settled reservation).
    async fn undo(&self, attempt: &AttemptId) -> Result<bool, StoreError> {
        let mut given = true;
        for limit in &self.held.limits {
            given &= (self.held.limiters)
                .give_back(&limit.name, limit.key.as_deref(), attempt, limit.permits)
                .await?;
        }
        Ok(given)
    }

    /// Only with a reservation: without one, the permits come too late.
    fn may_wait(&self, _blocked: &Blocked) -> bool {
        self.held.booked.lock().is_some()
    }

    fn blocked(&self, blocked: Blocked) -> ApiError {
        let which = blocked.which.unwrap_or(0);
        let mut available = vec![None; self.held.limits.len()];
        if let Some(slot) = available.get_mut(which) {
            *slot = blocked.available;
        }
        let headers = self.rate_limit_headers(&available, Some(blocked.retry_after_ms));
        let mut problem = rate_limited(blocked);
        if self.held.several {
            problem.problem.limit = Some(self.limit_ref(which));
        }
        problem.headers = headers;
        problem
    }

    /// A limiter that does not exist is named as such (and, of several,
    /// which one), as is a request beyond a limit's burst.
    fn failed(&self, e: WaitError) -> ApiError {
        let which = match e {
            WaitError::Refused(Refusal::NotFoundOf(which) | Refusal::OverBurstOf(which, _)) => {
                Some(which)
            }
            _ => None,
        };
        let mut problem = match e {
            WaitError::Refused(Refusal::NotFound | Refusal::NotFoundOf(_)) => no_such_limiter(),
            e => e.into(),
        };
        if let Some(which) = which {
            problem.problem.limit = Some(self.limit_ref(which));
        }
        problem
    }

    fn grant_body<'a>(&'a self, grant: &'a Admitted) -> impl Serialize + 'a {
        self.grant(grant)
    }

    /// 200, not 201: a rate limiter's grant makes no hold to point to.
    fn granted(&self, grant: Admitted) -> Response {
        let available: Vec<Option<u64>> = grant.available.iter().copied().map(Some).collect();
        let headers = self.rate_limit_headers(&available, None);
        let mut response = Json(self.grant(&grant)).into_response();
        response.headers_mut().extend(headers);
        response
    }
}

impl RateAcquisition {
    fn limit_ref(&self, which: usize) -> LimitRef {
        let held = &self.held;
        LimitRef {
            name: held.names.get(which).cloned().unwrap_or_default(),
            key: held.limits.get(which).and_then(|l| l.key.clone()),
        }
    }

    fn grant(&self, grant: &Admitted) -> RateAnswer {
        let held = &self.held;
        if !held.several {
            return RateAnswer::One(RateGrant {
                permits: grant.permits[0],
                available: grant.available[0],
            });
        }
        RateAnswer::Several(LimitsGrant {
            limits: (0..held.limits.len())
                .map(|i| LimitGrant {
                    name: held.names[i].clone(),
                    key: held.limits[i].key.clone(),
                    permits: grant.permits[i],
                    available: grant.available[i],
                })
                .collect(),
        })
    }
}

/// An acquire's answer body: one limit's, or several limits'.
#[derive(Serialize)]
#[serde(untagged)]
enum RateAnswer {
    One(RateGrant),
    Several(LimitsGrant),
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
    params(NamePath, KeyQuery),
    responses(
        (status = 200, description = "The configuration and the permits available now (in the \
            key's bucket with `?key=`; a key never used, or full again, has `burst`)", body = RateLimiterStatus),
        RateReadErrors,
    )
)]
pub async fn read(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<NamePath>,
    ApiQuery(query): ApiQuery<KeyQuery>,
) -> Result<Json<RateLimiterStatus>, ApiError> {
    let name = scope.name(path.name)?;
    let key = query.key.map(LimitKey::into_string);
    let RateState { config, available } = (state.rate_limiters)
        .state(&name.key, key.as_deref())
        .await?
        .ok_or_else(no_such_limiter)?;
    let mut status = RateLimiterStatus::new(name.name, config, available);
    status.key = key;
    Ok(Json(status))
}

/// A limiter's shared bucket, as [`read`] without a key (what listings
/// show).
pub async fn state(
    state: State<AppState>,
    scope: Scope,
    path: ApiPath<NamePath>,
) -> Result<Json<RateLimiterStatus>, ApiError> {
    read(state, scope, path, ApiQuery(KeyQuery { key: None })).await
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
    let limit = Limit {
        name: name.key,
        key: body.key.map(LimitKey::into_string),
        permits,
    };
    let wait_until = arrived + std::time::Duration::from_millis(wait_ms);
    let limiters = state.rate_limiters.clone();
    let acquisition = RateAcquisition::new(
        limiters,
        vec![limit],
        vec![name.name],
        false,
        key,
        wait_until,
    );
    longpoll::respond(&state, headers, timing(arrived, wait_ms), acquisition).await
}

/// A rate-limit acquire's long-poll: its `wait_ms`, and the moment it
/// takes to be there when reserved permits come due.
fn timing(arrived: Instant, wait_ms: u64) -> Timing {
    Timing {
        arrived,
        wait_ms: match wait_ms {
            0 => 0,
            ms => ms + SLOT_GRACE_MS,
        },
    }
}

const SSE_EXAMPLE_SEVERAL: &str = "event: waiting\ndata: {\"retry_after_ms\":250}\n\nevent: acquired\ndata: {\"limits\":[{\"name\":\"api-per-user\",\"key\":\"user-42\",\"permits\":1,\"available\":4},{\"name\":\"api\",\"key\":null,\"permits\":1,\"available\":90}]}\n\n";

/// Take permits from several rate limits at once: from all or from none.
///
/// Limiting by user *and* by IP *and* globally: each limit names a
/// limiter and optionally a key, and the acquire takes each one's permits
/// only if every limit admits them, at the same instant. Otherwise, when
/// every limit admits within `wait_ms`, they are reserved at once and the
/// request is answered at that instant (long-poll, or SSE with `Accept:
/// text/event-stream`). When that is later, 429 `rate-limited` at once,
/// nothing taken from any of them, with `retry_after_ms` (when every limit
/// will admit) and `limit` (one that refused). A limiter that does not
/// exist is 404 `not-found` naming it (`limit`), as is 400 `out-of-range`
/// for more permits than one's burst. No `Idempotency-Key`: a retry of an
/// answer lost takes again.
#[utoipa::path(
    post,
    path = "/rate-limiters/acquire",
    operation_id = "acquire_rate_limiters",
    tag = TAG,
    request_body(content = LimitsRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Admitted by every limit. With `Accept: text/event-stream`: \
            `waiting` events while the request waits, then one of `acquired` (data: this body), \
            `timeout` or `error` (data: a problem).",
            content((LimitsGrant = "application/json"), (String = "text/event-stream", example = json!(SSE_EXAMPLE_SEVERAL)))),
        RateLimitsErrors,
    )
)]
pub async fn acquire_all(
    State(state): State<AppState>,
    scope: Scope,
    headers: HeaderMap,
    ApiJson(body): ApiJson<LimitsRequest>,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    if headers.contains_key("idempotency-key") {
        return Err(ApiError::invalid_body(
            "an acquire of several limits takes no Idempotency-Key (a retry takes again)",
        ));
    }
    if !(1..=MAX_LIMITS).contains(&body.limits.len()) {
        return Err(ApiError::invalid_body(format!(
            "limits must list 1 to {MAX_LIMITS} limits, got {}",
            body.limits.len()
        )));
    }
    let wait_ms = wait_from(&state, body.wait_ms)?;
    drop(body.owner);
    let mut limits = Vec::with_capacity(body.limits.len());
    let mut names = Vec::with_capacity(body.limits.len());
    for limit in body.limits {
        check_name(&limit.name)?;
        let name = scope.name(limit.name)?;
        let permits = match limit.permits {
            None => 1,
            Some(permits) => permits.within("permits", 1, MAX_BURST)?,
        };
        let limit = Limit {
            name: name.key,
            key: limit.key.map(LimitKey::into_string),
            permits,
        };
        if limits
            .iter()
            .any(|l: &Limit| l.name == limit.name && l.key == limit.key)
        {
            return Err(ApiError::invalid_body(format!(
                "limits lists {:?} with the same key twice; list each limit once",
                name.name
            )));
        }
        limits.push(limit);
        names.push(name.name);
    }
    let limiters = state.rate_limiters.clone();
    let wait_until = arrived + std::time::Duration::from_millis(wait_ms);
    let acquisition = RateAcquisition::new(limiters, limits, names, true, None, wait_until);
    longpoll::respond(&state, headers, timing(arrived, wait_ms), acquisition).await
}
