//! `/latches/{name}/...`: count-down latches (the book's "Count-down latches"
//! (docs/src/latches.md)). A wait is an [`Acquisition`] whose grant is the
//! latch opening: it answers 200 with the latch's state whether or not it
//! opened, and its SSE events are `count`, then `open` or `timeout`. Its
//! waiters wait in [`WaitMode::Broadcast`]: one message per count-down
//! answers all of them.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::time::Instant;
use utoipa::{IntoParams, ToSchema};

use crate::coord::latches::{CountedDown, LatchState, Latches};
use crate::coord::{Attempt, AttemptId, Blocked};
use crate::error::{ApiError, Problem};
use crate::http::access::{Admin, Scope};
use crate::http::extract::{
    Amount, ApiJson, ApiPath, ApiQuery, Millis, idempotency_key, wait_from,
};
use crate::http::lock_family::NamePath;
use crate::http::longpoll::{self, Acquisition, NotGranted, Timing, Vocabulary};
use crate::http::problems::latch_exists;
use crate::http::responses::{BodyErrors, NameErrors, WaitErrors, examples};
use crate::state::AppState;
use crate::store::StoreError;
use crate::wait::WaitMode;

pub const TAG: &str = "latches";

/// The largest count a latch can be set to, and the largest `by`.
pub const MAX_COUNT: u64 = 1_000_000_000;
/// A latch's life when `ttl_ms` is omitted: one day.
pub const DEFAULT_TTL_MS: u64 = 86_400_000;
pub const MIN_TTL_MS: u64 = 1000;
pub const MAX_TTL_MS: u64 = 604_800_000;
/// Checks `1..=MAX_COUNT` and names the field in the problem.
fn checked_count(amount: Amount, field: &str) -> Result<u64, ApiError> {
    amount.within(field, 1, MAX_COUNT)
}

/// Body of a set. `count` is required.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"count": 3, "ttl_ms": 86400000}))]
pub struct SetRequest {
    /// Count-downs needed to open the latch: 1 to 1000000000.
    #[schema(value_type = u64, minimum = 1, maximum = 1000000000, example = 3)]
    pub count: Option<Amount>,
    /// The latch's life in ms (default 86400000, one day; 1000 to
    /// 604800000): when it ends, the latch opens by itself, so an
    /// abandoned latch never lingers.
    #[schema(value_type = Option<u64>, minimum = 1000, maximum = 604800000, example = 86400000)]
    pub ttl_ms: Option<Millis>,
}

/// Body of a count-down; may be omitted.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"by": 1}))]
pub struct CountDownRequest {
    /// How much to count down (default 1; 1 to 1000000000). The count
    /// never goes below 0.
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 1000000000, example = 1)]
    pub by: Option<Amount>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// How long to wait for the latch to open, in ms (default 0 = look
    /// once). The maximum is configuration (max_wait_ms); each server
    /// shows its own.
    #[param(value_type = Option<u64>, minimum = 0, maximum = 60000, example = 10000)]
    pub wait_ms: Option<String>,
}

/// A latch's state, with its name.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"name": "batch-42", "count": 2, "open": false}))]
pub struct LatchStatus {
    pub name: String,
    /// Count-downs left (0 when open).
    pub count: u64,
    /// True when the latch is open: counted down to 0, deleted, expired,
    /// or never set.
    pub open: bool,
}

/// A latch's state: the answer to a count-down and to a wait.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"count": 0, "open": true}))]
pub struct LatchCount {
    /// Count-downs left (0 when open).
    pub count: u64,
    /// True when the latch is open.
    pub open: bool,
}

impl LatchCount {
    fn of(count: u64) -> Self {
        LatchCount {
            count,
            open: count == 0,
        }
    }
}

/// The answer to a delete.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"deleted": true}))]
pub struct LatchDeleted {
    /// True when the latch was closed (its waiters were released).
    pub deleted: bool,
}

/// A latch wait: `count` events, then `open` (granted) or `timeout`.
const LATCH: Vocabulary = Vocabulary {
    waiting: "count",
    granted: "open",
    timeout: "timeout",
    granted_outcome: "opened",
};

/// One wait for a latch to open.
#[derive(Clone)]
struct LatchWait {
    latches: Latches,
    /// The latch, in the request's namespace.
    name: String,
}

fn state_json(blocked: Blocked) -> Value {
    json!(LatchCount::of(blocked.position.unwrap_or(0)))
}

impl Acquisition for LatchWait {
    /// The latch opened (nothing is held: there is nothing to give back).
    type Grant = ();

    fn primitive(&self) -> &'static str {
        "latch"
    }

    fn channel(&self) -> String {
        self.latches.wake_channel(&self.name)
    }

    fn mode(&self) -> WaitMode {
        WaitMode::Broadcast
    }

    async fn attempt(&self, _attempt: &AttemptId) -> Result<Attempt<()>, StoreError> {
        let state = self.latches.state(&self.name).await?;
        Ok(match state.open() {
            true => Attempt::Granted(()),
            false => Attempt::Blocked(state.blocked()),
        })
    }

    /// A wait holds nothing.
    async fn undo(&self, _attempt: &AttemptId) -> Result<bool, StoreError> {
        Ok(false)
    }

    fn not_granted(&self, blocked: Blocked) -> NotGranted {
        NotGranted::State(state_json(blocked))
    }

    fn waiting(&self, blocked: Blocked) -> Value {
        state_json(blocked)
    }

    fn vocabulary(&self) -> &'static Vocabulary {
        &LATCH
    }

    fn released(&self) -> Option<()> {
        Some(())
    }

    fn grant_body<'a>(&'a self, _grant: &'a ()) -> impl Serialize + 'a {
        LatchCount::of(0)
    }

    fn granted(&self, _grant: ()) -> Response {
        Json(LatchCount::of(0)).into_response()
    }
}

const SSE_EXAMPLE: &str = "event: count\ndata: {\"count\":2,\"open\":false}\n\nevent: count\ndata: {\"count\":1,\"open\":false}\n\nevent: open\ndata: {\"count\":0,\"open\":true}\n\n";

/// Set a latch's count (close it).
///
/// Succeeds when the latch is open (never set, counted down to 0, deleted
/// or expired); while it is closed, 409 `latch-exists` and the count is
/// left alone. The latch opens by itself when `ttl_ms` passes.
#[utoipa::path(
    put,
    path = "/latches/{name}",
    operation_id = "set_latch",
    tag = TAG,
    params(NamePath),
    request_body(content = SetRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "Set: the latch is closed with this count", body = LatchStatus),
        (status = 409, description = "The latch is closed (`latch-exists`); the detail gives its count", body = Problem, content_type = "application/problem+json",
            examples(("latch-exists" = (value = json!(examples::latch_exists()))))),
        BodyErrors,
    )
)]
pub async fn set(
    State(state): State<AppState>,
    Admin(scope): Admin,
    ApiPath(path): ApiPath<NamePath>,
    ApiJson(body): ApiJson<SetRequest>,
) -> Result<Response, ApiError> {
    let name = scope.name(path.name)?;
    let count = body
        .count
        .ok_or_else(|| ApiError::invalid_body("count is required, e.g. {\"count\": 3}"))?;
    let count = checked_count(count, "count")?;
    let ttl_ms = match body.ttl_ms {
        None => DEFAULT_TTL_MS,
        Some(ttl) => ttl.within("ttl_ms", MIN_TTL_MS, MAX_TTL_MS)?,
    };
    match state.latches.set(&name.key, count, ttl_ms).await? {
        Ok(count) => {
            let body = LatchStatus {
                name: name.name,
                count,
                open: false,
            };
            Ok((StatusCode::CREATED, Json(body)).into_response())
        }
        Err(count) => Err(latch_exists(count)),
    }
}

/// Count the latch down.
///
/// The count never goes below 0; at 0 the latch opens: every waiter on
/// every instance is released and the name can be set again. With an
/// `Idempotency-Key` header, the same key on the same latch within 10
/// minutes counts once and replays the first answer, even when retries
/// race.
#[utoipa::path(
    post,
    path = "/latches/{name}/count-down",
    operation_id = "count_down_latch",
    tag = TAG,
    params(
        NamePath,
        ("Idempotency-Key" = Option<String>, Header,
            description = "Makes retries safe: the same key on the same latch within 10 minutes \
                counts down once and replays the first answer (even after the latch opened and \
                was set again). 1-255 visible ASCII characters, e.g. a UUID. A count-down that \
                found no latch (404) is not remembered.",
            example = "0b6f0d3c-5c2e-4a57-9d43-3b1b7f7a2e10",
            pattern = "^[!-~]{1,255}$"),
    ),
    request_body(content = Option<CountDownRequest>, content_type = "application/json"),
    responses(
        (status = 200, description = "Counted down (or replayed): what is left, and whether it opened", body = LatchCount),
        (status = 404, description = "No such latch (`not-found`): never set, already opened, expired or deleted", body = Problem, content_type = "application/problem+json",
            examples(("not-found" = (value = json!(examples::not_found()))))),
        BodyErrors,
    )
)]
pub async fn count_down(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<NamePath>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<CountDownRequest>,
) -> Result<Json<LatchCount>, ApiError> {
    let name = scope.name(path.name)?;
    let key = idempotency_key(&headers)?;
    let by = match body.by {
        None => 1,
        Some(by) => checked_count(by, "by")?,
    };
    match state.latches.count_down(&name.key, by, key).await? {
        CountedDown::Counted { count } | CountedDown::Replayed { count } => {
            Ok(Json(LatchCount::of(count)))
        }
        CountedDown::NotFound => Err(ApiError::not_found(
            "no such latch: never set, already opened (counted down to 0 or deleted), or its \
             ttl_ms passed",
        )),
    }
}

/// Read a latch's state. A missing latch is open, count 0.
#[utoipa::path(
    get,
    path = "/latches/{name}",
    operation_id = "get_latch",
    tag = TAG,
    params(NamePath),
    responses(
        (status = 200, description = "The state", body = LatchStatus),
        NameErrors,
    )
)]
pub async fn state(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<NamePath>,
) -> Result<Json<LatchStatus>, ApiError> {
    let name = scope.name(path.name)?;
    let LatchState { count, .. } = state.latches.state(&name.key).await?;
    Ok(Json(LatchStatus {
        name: name.name,
        count,
        open: count == 0,
    }))
}

/// Delete a latch whatever its count: its waiters see it open.
#[utoipa::path(
    delete,
    path = "/latches/{name}",
    operation_id = "delete_latch",
    tag = TAG,
    params(NamePath),
    responses(
        (status = 200, description = "Deleted (`deleted` is false if it was already open)", body = LatchDeleted),
        NameErrors,
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    Admin(scope): Admin,
    ApiPath(path): ApiPath<NamePath>,
) -> Result<Json<LatchDeleted>, ApiError> {
    let name = scope.name(path.name)?;
    let deleted = state.latches.delete(&name.key).await?;
    Ok(Json(LatchDeleted { deleted }))
}

/// Wait for a latch to open.
///
/// Long-polls up to `wait_ms` and answers 200 with the state either way:
/// `open: true` as soon as it opens, else `open: false` and the count when
/// `wait_ms` passes. With `Accept: text/event-stream` the answer is a
/// stream: a `count` event with the state at once and on every change,
/// then `open`, `timeout` (data: the state) or `error` (data: a problem).
#[utoipa::path(
    get,
    path = "/latches/{name}/wait",
    operation_id = "wait_latch",
    tag = TAG,
    params(NamePath, WaitQuery),
    responses(
        (status = 200, description = "Open, or still closed when `wait_ms` passed. The \
            `text/event-stream` variant is what a request with `Accept: text/event-stream` gets: \
            `event: count` (data: `{\"count\", \"open\": false}`; at once, on every change and at \
            least every 15 s), then exactly one of `event: open` (data: `{\"count\": 0, \"open\": \
            true}`), `event: timeout` (data: the state) or `event: error` (data: a problem).",
            content(
                (LatchCount = "application/json"),
                (String = "text/event-stream", example = json!(SSE_EXAMPLE)),
            )),
        WaitErrors,
    )
)]
pub async fn wait(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<NamePath>,
    ApiQuery(query): ApiQuery<WaitQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let name = scope.name(path.name)?;
    let wait_ms = match query.wait_ms {
        None => None,
        Some(raw) => Some(Millis(raw.trim().parse().map_err(|_| {
            ApiError::invalid_body(format!("wait_ms must be a whole number of ms, got {raw:?}"))
        })?)),
    };
    let wait_ms = wait_from(&state, wait_ms)?;
    let acquisition = LatchWait {
        latches: state.latches.clone(),
        name: name.key,
    };
    let timing = Timing { arrived, wait_ms };
    longpoll::respond(&state, headers, timing, acquisition).await
}
