//! `/locks/{name}/...`: reentrant locks (README: "Using locks with curl").

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::time::Instant;
use utoipa::{IntoParams, ToSchema};

use crate::coord::locks::{LockGrant, Locks};
use crate::coord::{Attempt, AttemptId, Blocked};
use crate::error::{ApiError, Problem};
use crate::http::extract::{
    ApiJson, ApiPath, ApiQuery, Millis, check_holder, check_holder_in_path, check_name, new_holder,
    wants_sse,
};
use crate::http::longpoll::{self, Acquisition};
use crate::state::AppState;
use crate::store::StoreError;

pub const TAG: &str = "locks";

/// The object name in the path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct NamePath {
    /// 1–256 characters of `A-Z a-z 0-9 . _ ~ : -`.
    #[param(example = "orders", pattern = "^[A-Za-z0-9._~:-]{1,256}$")]
    pub name: String,
}

/// The object name and a holder id in the path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct HolderPath {
    /// 1–256 characters of `A-Z a-z 0-9 . _ ~ : -`.
    #[param(example = "orders", pattern = "^[A-Za-z0-9._~:-]{1,256}$")]
    pub name: String,
    /// The holder id from the grant (a capability: keep it secret).
    #[param(example = "worker-1", pattern = "^[A-Za-z0-9._~:-]{1,128}$")]
    pub holder: String,
}

/// Body of an acquire. Every field is optional; the body may be omitted.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"lease_ms": 30000, "wait_ms": 0}))]
pub struct AcquireRequest {
    /// Who acquires. Omit it and the server generates one (128 random
    /// bits); reuse it to re-enter, renew and release.
    #[schema(example = "worker-1", pattern = "^[A-Za-z0-9._~:-]{1,128}$")]
    pub holder: Option<String>,
    /// Lease in ms (default 30000). The accepted range is configuration
    /// (min_lease_ms/max_lease_ms); the bounds shown are the defaults. The
    /// hold ends when it lapses without a heartbeat.
    #[schema(value_type = Option<u64>, minimum = 500, maximum = 86400000, example = 30000)]
    pub lease_ms: Option<Millis>,
    /// How long to wait for the lock, in ms (default 0 = try once). The
    /// maximum is configuration (max_wait_ms); the bound shown is the default.
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 60000, example = 0)]
    pub wait_ms: Option<Millis>,
}

/// Body of a heartbeat; may be omitted.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({}))]
pub struct HeartbeatRequest {
    /// New lease in ms. Omit it to renew for the lease the hold already
    /// has. Range as for acquire (defaults shown).
    #[schema(value_type = Option<u64>, minimum = 500, maximum = 86400000, example = 30000)]
    pub lease_ms: Option<Millis>,
}

/// A successful acquisition or renewal.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(example = json!({
    "name": "orders",
    "holder": "3f9c0f3e6c1b4a0e9d2b7a51c2e4f8aa",
    "fencing_token": 42,
    "hold_count": 1,
    "lease_ms": 30000,
    "expires_in_ms": 30000,
    "heartbeat_interval_ms": 10000
}))]
pub struct Grant {
    pub name: String,
    /// The holder id: a capability to renew and release. Only ever shown
    /// to the request that supplied or received it.
    pub holder: String,
    /// Strictly increasing per lock name over the deployment's life; hand
    /// it to downstream resources so they can reject stale holders.
    pub fencing_token: u64,
    /// Reentrant holds by this holder; the lock is free at 0.
    pub hold_count: u64,
    pub lease_ms: u64,
    pub expires_in_ms: u64,
    /// How often to send a heartbeat (lease_ms / 3).
    pub heartbeat_interval_ms: u64,
}

impl Grant {
    fn new(name: &str, holder: &str, g: &LockGrant) -> Self {
        Grant {
            name: name.to_string(),
            holder: holder.to_string(),
            fencing_token: g.fencing_token,
            hold_count: g.hold_count,
            lease_ms: g.lease_ms,
            expires_in_ms: g.lease_ms,
            heartbeat_interval_ms: g.lease_ms / 3,
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReleaseQuery {
    /// Release every reentrant hold at once.
    pub all: Option<bool>,
}

/// The answer to a release.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"released": true, "hold_count": 0}))]
pub struct Release {
    /// True when the lock became free.
    pub released: bool,
    /// Holds this holder still has.
    pub hold_count: u64,
}

/// A lock's public state (never the holder id).
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "name": "orders", "locked": true, "hold_count": 1, "ttl_ms": 24500,
    "fencing_token": 42, "waiters": 3
}))]
pub struct LockStatus {
    pub name: String,
    pub locked: bool,
    pub hold_count: u64,
    /// Remaining lease in ms (0 when free).
    pub ttl_ms: u64,
    /// Last fencing token issued (0 if never locked).
    pub fencing_token: u64,
    /// Requests waiting on the instance that answers.
    pub waiters: u64,
}

/// The answer to a force unlock.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"released": true}))]
pub struct ForceUnlock {
    /// True when the lock was held and is now free.
    pub released: bool,
}

/// Shared request checks: lease and wait ranges from the configuration.
pub fn lease_from(state: &AppState, lease: Option<Millis>) -> Result<u64, ApiError> {
    let c = &state.config;
    match lease {
        None => Ok(c.default_lease_ms),
        Some(m) => m.within("lease_ms", c.min_lease_ms, c.max_lease_ms),
    }
}

pub fn wait_from(state: &AppState, wait: Option<Millis>) -> Result<u64, ApiError> {
    match wait {
        None => Ok(0),
        Some(m) => m.within("wait_ms", 0, state.config.max_wait_ms),
    }
}

#[derive(Clone)]
struct LockAcquisition {
    locks: Locks,
    name: String,
    holder: String,
    lease_ms: u64,
}

impl Acquisition for LockAcquisition {
    type Grant = LockGrant;

    fn primitive(&self) -> &'static str {
        "lock"
    }

    fn channel(&self) -> String {
        self.locks.wake_channel(&self.name)
    }

    async fn attempt(&self, attempt: &AttemptId) -> Result<Attempt<LockGrant>, StoreError> {
        self.locks
            .try_acquire(&self.name, &self.holder, self.lease_ms, attempt)
            .await
    }

    async fn undo(&self, attempt: &AttemptId) -> Result<bool, StoreError> {
        self.locks.undo(&self.name, &self.holder, attempt).await
    }

    fn blocked(&self, blocked: Blocked) -> ApiError {
        ApiError::lock_held(blocked.retry_after_ms)
    }

    fn grant_json(&self, grant: &LockGrant) -> Value {
        json!(Grant::new(&self.name, &self.holder, grant))
    }

    fn granted(&self, grant: LockGrant) -> Response {
        let location = format!("/locks/{}/holders/{}", self.name, self.holder);
        let mut response = (
            StatusCode::CREATED,
            Json(Grant::new(&self.name, &self.holder, &grant)),
        )
            .into_response();
        if let Ok(value) = HeaderValue::from_str(&location) {
            response.headers_mut().insert(header::LOCATION, value);
        }
        response
    }
}

/// Acquire the lock (or re-enter it as its holder).
///
/// Long-polls up to `wait_ms`. With `Accept: text/event-stream` the answer
/// is a stream: `waiting` events, then one `acquired`, `timeout` or `error`.
#[utoipa::path(
    post,
    path = "/locks/{name}/acquire",
    tag = TAG,
    params(NamePath),
    request_body(content = Option<AcquireRequest>, content_type = "application/json"),
    responses(
        (status = 201, description = "Acquired (or re-entered). `Location` is the hold's URL. \
            The `text/event-stream` variant is what a request with `Accept: text/event-stream` \
            gets, with HTTP status 200: `event: waiting` (data `{\"retry_after_ms\"}`, at least \
            every 15 s), then exactly one of `event: acquired` (data: the Grant), \
            `event: timeout` (data: the 409 problem) or `event: error` (data: a problem).",
            content(
                (Grant = "application/json"),
                (String = "text/event-stream", example = "event: waiting\ndata: {\"retry_after_ms\":2500}\n\nevent: acquired\ndata: {\"name\":\"orders\",\"holder\":\"worker-1\",\"fencing_token\":43,\"hold_count\":1,\"lease_ms\":30000,\"expires_in_ms\":30000,\"heartbeat_interval_ms\":10000}\n\n"),
            ),
            headers(("Location" = String, description = "/locks/{name}/holders/{holder}"))),
        (status = 400, description = "Invalid name, body or out-of-range value", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Held by another holder (`lock-held`), with `retry_after_ms` and `Retry-After`", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Too many waiters on this instance", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Redis unavailable, or shutting down", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn acquire(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<NamePath>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<AcquireRequest>,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    check_name(&path.name)?;
    let holder = match body.holder {
        Some(holder) => {
            check_holder(&holder)?;
            holder
        }
        None => new_holder(),
    };
    let lease_ms = lease_from(&state, body.lease_ms)?;
    let wait_ms = wait_from(&state, body.wait_ms)?;
    let acquisition = LockAcquisition {
        locks: state.locks.clone(),
        name: path.name,
        holder,
        lease_ms,
    };
    longpoll::respond(
        &state.engine,
        &state.metrics,
        wants_sse(&headers),
        arrived,
        wait_ms,
        acquisition,
    )
    .await
}

/// Renew a hold's lease.
#[utoipa::path(
    post,
    path = "/locks/{name}/holders/{holder}/heartbeat",
    tag = TAG,
    params(HolderPath),
    request_body(content = Option<HeartbeatRequest>, content_type = "application/json"),
    responses(
        (status = 200, description = "Renewed", body = Grant),
        (status = 400, description = "Invalid name, holder or lease", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Not held by this holder (released or expired)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Redis unavailable", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn heartbeat(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<HolderPath>,
    ApiJson(body): ApiJson<HeartbeatRequest>,
) -> Result<Json<Grant>, ApiError> {
    check_name(&path.name)?;
    check_holder_in_path(&path.holder)?;
    let lease = match body.lease_ms {
        None => None,
        Some(m) => Some(lease_from(&state, Some(m))?),
    };
    match state
        .locks
        .heartbeat(&path.name, &path.holder, lease)
        .await?
    {
        Some(grant) => Ok(Json(Grant::new(&path.name, &path.holder, &grant))),
        None => Err(not_held()),
    }
}

fn not_held() -> ApiError {
    ApiError::not_held("this holder does not hold the lock (released, expired, or never acquired)")
}

/// Release one hold (or all holds with `?all=true`).
#[utoipa::path(
    delete,
    path = "/locks/{name}/holders/{holder}",
    tag = TAG,
    params(HolderPath, ReleaseQuery),
    responses(
        (status = 200, description = "Released", body = Release),
        (status = 400, description = "Invalid name or holder", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Not held by this holder", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Redis unavailable", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn release(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<HolderPath>,
    ApiQuery(query): ApiQuery<ReleaseQuery>,
) -> Result<Json<Release>, ApiError> {
    check_name(&path.name)?;
    check_holder_in_path(&path.holder)?;
    match state
        .locks
        .release(&path.name, &path.holder, query.all.unwrap_or(false))
        .await?
    {
        Some(r) => Ok(Json(Release {
            released: r.released,
            hold_count: r.hold_count,
        })),
        None => Err(not_held()),
    }
}

/// Read a lock's state. Never reveals the holder id.
#[utoipa::path(
    get,
    path = "/locks/{name}",
    tag = TAG,
    params(NamePath),
    responses(
        (status = 200, description = "The lock's state", body = LockStatus),
        (status = 400, description = "Invalid name", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Redis unavailable", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn state(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<NamePath>,
) -> Result<Json<LockStatus>, ApiError> {
    check_name(&path.name)?;
    let s = state.locks.state(&path.name).await?;
    Ok(Json(LockStatus {
        waiters: state
            .engine
            .waiters_on(&state.locks.wake_channel(&path.name)),
        name: path.name,
        locked: s.locked,
        hold_count: s.hold_count,
        ttl_ms: s.ttl_ms,
        fencing_token: s.fencing_token,
    }))
}

/// Force unlock: remove the lock whoever holds it, and wake waiters.
#[utoipa::path(
    delete,
    path = "/locks/{name}",
    tag = TAG,
    params(NamePath),
    responses(
        (status = 200, description = "Unlocked (`released` is false if it was free)", body = ForceUnlock),
        (status = 400, description = "Invalid name", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Redis unavailable", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn force_unlock(
    State(state): State<AppState>,
    ApiPath(path): ApiPath<NamePath>,
) -> Result<Json<ForceUnlock>, ApiError> {
    check_name(&path.name)?;
    let released = state.locks.force_unlock(&path.name).await?;
    Ok(Json(ForceUnlock { released }))
}
