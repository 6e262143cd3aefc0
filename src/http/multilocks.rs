//! `/multilocks/...`: one holder takes a set of plain locks — the same
//! objects as `/locks/{name}` — all or nothing (the book's "Multi-locks"
//! (docs/src/multilocks.md)).
//! The names travel in the body, so these routes have no object in the
//! path and a grant has no `Location`.

use std::collections::HashSet;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::coord::locks::LockGrant;
use crate::coord::multilocks::MultiLocks;
use crate::coord::sessions::{Hold, HoldKind};
use crate::coord::{Attempt, AttemptId, Blocked, SessionTerm};
use crate::error::{ApiError, Problem};
use crate::http::access::Scope;
use crate::http::extract::{ApiJson, Millis, Owner, check_holder, check_name, renewal_lease};
use crate::http::lock_family::{AcquireRequest, Checked};
use crate::http::longpoll::Acquisition;
use crate::http::problems::set_held;
use crate::http::responses::{AcquireErrors, NoSessionErrors, SetHoldErrors, examples};
use crate::http::sessions::{self, Held};
use crate::state::AppState;
use crate::store::StoreError;
use crate::wait::WaitMode;

/// The most names one multi-lock may take.
const MAX_NAMES: usize = 64;

/// Body of an acquire.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"names": ["orders", "invoices"], "lease_ms": 30000, "wait_ms": 0}))]
pub struct MultiAcquireRequest {
    /// 1 to 64 distinct lock names (the locks of `/locks/{name}`).
    #[schema(value_type = Vec<LockName>, min_items = 1, max_items = 64, example = json!(["orders", "invoices"]))]
    pub names: Vec<String>,
    /// Who acquires. Omit it and the server generates one (128 random
    /// bits); reuse it to renew and release.
    #[schema(example = "worker-1", pattern = "^[A-Za-z0-9._~:-]{1,128}$")]
    pub holder: Option<String>,
    /// Lease in ms of every lock of the set (default 30000). The accepted
    /// range is configuration (min_lease_ms/max_lease_ms); each server
    /// shows its own.
    #[schema(value_type = Option<u64>, minimum = 500, maximum = 86400000, example = 30000)]
    pub lease_ms: Option<Millis>,
    /// How long to wait for the whole set, in ms (default 0 = try once).
    /// The maximum is configuration (max_wait_ms); each server shows
    /// its own.
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 60000, example = 0)]
    pub wait_ms: Option<Millis>,
    /// A session id (`POST /sessions`), in place of `lease_ms`: every lock
    /// of the set is held as long as the session (each lock counts as one
    /// of its holds); the grant's `lease_ms` is what they have left of the
    /// session's TTL. 404 `not-found` when the session does not exist; 409
    /// `session-mismatch` when this holder holds a lock of the set without
    /// a session or in another one (and, without `session`, when it holds
    /// one in a session).
    #[schema(
        example = "7d3c0e1f9a2b4c5d8e6f0a1b2c3d4e5f",
        pattern = "^[A-Za-z0-9._~:-]{1,128}$"
    )]
    pub session: Option<String>,
    /// Who holds, in words: every lock of the set shows it in its state
    /// (`GET /locks/{name}`) and to refused requests (`held_by`). Not a
    /// secret. In a session, an acquire without one takes the session's.
    pub owner: Option<Owner>,
}

/// Body of a heartbeat.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"names": ["orders", "invoices"], "holder": "worker-1"}))]
pub struct MultiHeartbeatRequest {
    #[schema(value_type = Vec<LockName>, min_items = 1, max_items = 64, example = json!(["orders", "invoices"]))]
    pub names: Vec<String>,
    #[schema(example = "worker-1", pattern = "^[A-Za-z0-9._~:-]{1,128}$")]
    pub holder: String,
    /// New lease in ms for every lock of the set. Omit it to renew each
    /// lock for the lease it has. A lock held in a session is renewed no
    /// further than the session's remaining TTL.
    #[schema(value_type = Option<u64>, minimum = 500, maximum = 86400000, example = 30000)]
    pub lease_ms: Option<Millis>,
}

/// Body of a release.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"names": ["orders", "invoices"], "holder": "worker-1"}))]
pub struct MultiReleaseRequest {
    #[schema(value_type = Vec<LockName>, min_items = 1, max_items = 64, example = json!(["orders", "invoices"]))]
    pub names: Vec<String>,
    #[schema(example = "worker-1", pattern = "^[A-Za-z0-9._~:-]{1,128}$")]
    pub holder: String,
}

/// A lock's name, as in `/locks/{name}` (documentation only).
#[derive(ToSchema)]
#[schema(pattern = "^[A-Za-z0-9._~:-]{1,256}$")]
#[allow(dead_code)] // documentation only: never built
pub struct LockName(String);

/// One lock of a multi-lock's grant.
#[derive(Debug, Serialize, ToSchema)]
pub struct MultiLockHold {
    pub name: String,
    /// This lock's fencing token (each name has its own counter).
    pub fencing_token: u64,
    /// This holder's holds on the lock (reentrant with `/locks`).
    pub hold_count: u64,
}

/// A multi-lock's grant or renewal.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "holder": "worker-1",
    "locks": [
        {"name": "orders", "fencing_token": 42, "hold_count": 1},
        {"name": "invoices", "fencing_token": 7, "hold_count": 1}
    ],
    "lease_ms": 30000, "expires_in_ms": 30000, "heartbeat_interval_ms": 10000
}))]
pub struct MultiGrant {
    /// The holder id: a capability to renew and release.
    pub holder: String,
    /// The locks, in the order of the request's names.
    pub locks: Vec<MultiLockHold>,
    /// The lease of the set: the shortest lease among its locks.
    pub lease_ms: u64,
    pub expires_in_ms: u64,
    /// How often to send a heartbeat (lease_ms / 3).
    pub heartbeat_interval_ms: u64,
}

impl MultiGrant {
    fn new(names: &[String], holder: &str, holds: &[LockGrant]) -> Self {
        let lease_ms = holds.iter().map(|h| h.lease_ms).min().unwrap_or(0);
        MultiGrant {
            holder: holder.to_string(),
            locks: names
                .iter()
                .zip(holds)
                .map(|(name, h)| MultiLockHold {
                    name: name.clone(),
                    fencing_token: h.fencing_token,
                    hold_count: h.hold_count,
                })
                .collect(),
            lease_ms,
            expires_in_ms: lease_ms,
            heartbeat_interval_ms: lease_ms / 3,
        }
    }
}

/// The answer to a release.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"released": ["orders", "invoices"]}))]
pub struct MultiReleased {
    /// The names whose lock became free (a lock this holder also holds
    /// reentrantly through `/locks` stays held).
    pub released: Vec<String>,
}

/// 1 to 64 distinct valid names.
fn check_names(names: &[String]) -> Result<(), ApiError> {
    if names.is_empty() {
        return Err(ApiError::invalid_body(
            "names must list 1 to 64 distinct lock names",
        ));
    }
    if names.len() > MAX_NAMES {
        return Err(ApiError::out_of_range(format!(
            "names lists {} names; a multi-lock takes at most {MAX_NAMES}",
            names.len()
        ))
        .with_field("names"));
    }
    for name in names {
        check_name(name)?;
    }
    let distinct: HashSet<&String> = names.iter().collect();
    if distinct.len() != names.len() {
        return Err(ApiError::invalid_body(
            "names must be distinct: each lock once",
        ));
    }
    Ok(())
}

/// The names at the indexes (or bits) given.
fn picked(names: &[String], indexes: impl IntoIterator<Item = usize>) -> Vec<String> {
    indexes.into_iter().map(|i| names[i].clone()).collect()
}

fn from_bits(names: &[String], bits: u64) -> Vec<String> {
    picked(names, (0..names.len()).filter(|i| bits & (1 << i) != 0))
}

fn not_held(names: Vec<String>) -> ApiError {
    let mut problem = ApiError::not_held(
        "this holder does not hold every lock of the set (released, expired, or never \
         acquired): see not_held",
    );
    problem.problem.not_held = Some(names);
    problem
}

/// One blocking acquire of a set.
#[derive(Clone)]
struct MultiAcquisition {
    multilocks: MultiLocks,
    /// The names as the client gave them (answers name these).
    names: Vec<String>,
    /// The same names in the request's namespace (what the locks are).
    keys: Vec<String>,
    holder: String,
    lease_ms: u64,
    /// The holds' owner label ('' for none).
    owner: String,
}

impl Acquisition for MultiAcquisition {
    type Grant = Vec<LockGrant>;

    fn primitive(&self) -> &'static str {
        "multilock"
    }

    fn channel(&self) -> String {
        self.channels().swap_remove(0)
    }

    fn channels(&self) -> Vec<String> {
        self.multilocks.wake_channels(&self.keys)
    }

    fn mode(&self) -> WaitMode {
        WaitMode::Watch
    }

    async fn attempt(&self, attempt: &AttemptId) -> Result<Attempt<Vec<LockGrant>>, StoreError> {
        let (keys, holder, owner) = (&self.keys, &self.holder, &self.owner);
        self.multilocks
            .try_acquire_in(keys, holder, self.lease_ms, attempt, None, owner)
            .await
    }

    async fn undo(&self, attempt: &AttemptId) -> Result<bool, StoreError> {
        self.multilocks
            .undo(&self.keys, &self.holder, attempt)
            .await
    }

    fn blocked(&self, blocked: Blocked) -> ApiError {
        set_held(
            from_bits(&self.names, blocked.blocked_by.unwrap_or(0)),
            blocked.retry_after_ms,
            blocked.held_by,
        )
    }

    fn waiting(&self, blocked: Blocked) -> Value {
        json!({
            "retry_after_ms": blocked.retry_after_ms,
            "blocked_by": from_bits(&self.names, blocked.blocked_by.unwrap_or(0)),
            "held_by": blocked.held_by,
        })
    }

    fn grant_body<'a>(&'a self, holds: &'a Vec<LockGrant>) -> impl Serialize + 'a {
        MultiGrant::new(&self.names, &self.holder, holds)
    }
}

impl Held for MultiAcquisition {
    /// One plain lock per name of the set.
    fn holds(&self) -> Vec<Hold> {
        self.keys
            .iter()
            .map(|key| Hold {
                kind: HoldKind::Lock,
                name: key.clone(),
                holder: self.holder.clone(),
            })
            .collect()
    }

    async fn attempt_in(
        &self,
        attempt: &AttemptId,
        lease_ms: u64,
        session: SessionTerm<'_>,
    ) -> Result<Attempt<Vec<LockGrant>>, StoreError> {
        let owner = SessionTerm::owner_of(&self.owner, Some(session));
        let (keys, holder) = (&self.keys, &self.holder);
        self.multilocks
            .try_acquire_in(keys, holder, lease_ms, attempt, Some(session), &owner)
            .await
    }
}

const SSE_EXAMPLE: &str = "event: waiting\ndata: {\"retry_after_ms\":2500,\"blocked_by\":[\"orders\"],\"held_by\":[\"web-7 pid 4242\"]}\n\nevent: acquired\ndata: {\"holder\":\"worker-1\",\"locks\":[{\"name\":\"orders\",\"fencing_token\":43,\"hold_count\":1},{\"name\":\"invoices\",\"fencing_token\":7,\"hold_count\":1}],\"lease_ms\":30000,\"expires_in_ms\":30000,\"heartbeat_interval_ms\":10000}\n\n";

/// Acquire a set of locks, all or nothing.
///
/// The locks are those of `/locks/{name}`: a set conflicts with single
/// locks on any of its names, and re-enters the locks its holder already
/// has. Long-polls up to `wait_ms` (woken by a release of any lock of the
/// set); `Accept: text/event-stream` streams events.
#[utoipa::path(
    post,
    path = "/multilocks/acquire",
    operation_id = "acquire_multilock",
    tag = "multilocks",
    request_body(content = MultiAcquireRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "Acquired: every lock of the set. With `Accept: text/event-stream`: \
            HTTP 200 and `waiting` events (`retry_after_ms`, `blocked_by`, `held_by`), then one of `acquired`, \
            `timeout` or `error`.",
            content((MultiGrant = "application/json"), (String = "text/event-stream", example = json!(SSE_EXAMPLE)))),
        (status = 409, description = "Some locks are held by others (`lock-held`): `blocked_by` names them, \
            `held_by` the owner labels of their holds (at most 10), \
            `retry_after_ms` is the longest of their remaining leases; nothing was taken. Or the holder \
            holds a lock of the set in another session, or without one while this request names one (or \
            the reverse): `session-mismatch`, nothing taken",
            body = Problem, content_type = "application/problem+json",
            examples(("lock-held" = (value = json!(examples::set_held()))), ("session-mismatch" = (value = json!(examples::session_mismatch()))))),
        NoSessionErrors,
        AcquireErrors,
    )
)]
pub async fn acquire(
    State(state): State<AppState>,
    scope: Scope,
    headers: HeaderMap,
    ApiJson(body): ApiJson<MultiAcquireRequest>,
) -> Result<Response, ApiError> {
    check_names(&body.names)?;
    let keys = scope.names(&body.names)?;
    let rest = AcquireRequest {
        holder: body.holder,
        lease_ms: body.lease_ms,
        wait_ms: body.wait_ms,
        session: body.session,
        owner: body.owner,
    };
    // The set's first name stands for it in the checked request (the
    // names were checked above).
    let checked = Checked::new(&state, scope.name(body.names[0].clone())?, rest).await?;
    let timing = checked.timing();
    let acquisition = MultiAcquisition {
        multilocks: state.multilocks.clone(),
        names: body.names,
        keys,
        holder: checked.holder,
        lease_ms: checked.lease_ms,
        owner: checked.owner,
    };
    sessions::respond(&state, headers, timing, checked.session, acquisition).await
}

/// Renew the holder's lease on every lock of the set (or on none).
#[utoipa::path(
    post,
    path = "/multilocks/heartbeat",
    operation_id = "heartbeat_multilock",
    tag = "multilocks",
    request_body(content = MultiHeartbeatRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Renewed", body = MultiGrant),
        SetHoldErrors,
    )
)]
pub async fn heartbeat(
    State(state): State<AppState>,
    scope: Scope,
    ApiJson(body): ApiJson<MultiHeartbeatRequest>,
) -> Result<Json<MultiGrant>, ApiError> {
    check_names(&body.names)?;
    check_holder(&body.holder)?;
    let keys = scope.names(&body.names)?;
    let lease = renewal_lease(&state, body.lease_ms)?;
    match state
        .multilocks
        .heartbeat(&keys, &body.holder, lease)
        .await?
    {
        Ok(holds) => Ok(Json(MultiGrant::new(&body.names, &body.holder, &holds))),
        Err(missing) => Err(not_held(picked(&body.names, missing))),
    }
}

/// Release one hold of the holder on every lock of the set (or none).
#[utoipa::path(
    post,
    path = "/multilocks/release",
    operation_id = "release_multilock",
    tag = "multilocks",
    request_body(content = MultiReleaseRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Released", body = MultiReleased),
        SetHoldErrors,
    )
)]
pub async fn release(
    State(state): State<AppState>,
    scope: Scope,
    ApiJson(body): ApiJson<MultiReleaseRequest>,
) -> Result<Json<MultiReleased>, ApiError> {
    check_names(&body.names)?;
    check_holder(&body.holder)?;
    let keys = scope.names(&body.names)?;
    match state.multilocks.release(&keys, &body.holder).await? {
        Ok(freed) => Ok(Json(MultiReleased {
            released: picked(&body.names, freed),
        })),
        Err(missing) => Err(not_held(picked(&body.names, missing))),
    }
}
