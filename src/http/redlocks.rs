//! `/redlocks/{name}/...`: RedLock over independent Redis nodes (the book's
//! "RedLock" (docs/src/redlock.md)). The acquire is a blocking
//! [`Acquisition`] like every other; its waiters wait in [`WaitMode::Relay`]
//! (one local lead asks the nodes) and are woken by the wake messages a
//! release publishes on the main Redis, or by their own timer when the
//! blocking holds' leases end.
//!
//! Without configured nodes every route answers 503
//! `redlock-not-configured`. The routes are not the lock family's
//! `hold_routes!`: RedLock has no force unlock, and its state reads are
//! per node, without a local waiter count.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Serialize;
use utoipa::ToSchema;

use crate::coord::redlock::{RedGrant, RedLocks, RedState};
use crate::coord::sessions::{Hold, HoldKind};
use crate::coord::{Attempt, AttemptId, Blocked, SessionTerm};
use crate::error::{ApiError, Problem};
use crate::http::access::{Scope, ScopedName};
use crate::http::extract::{ApiJson, ApiPath, renewal_lease};
use crate::http::lock_family::{
    AcquireRequest, Checked, Grant, HeartbeatRequest, HolderPath, NamePath,
};
use crate::http::longpoll::Acquisition;
use crate::http::problems::held_on_quorum;
use crate::http::responses::{
    Counted, HoldView, NoSessionErrors, QuorumAcquireErrors, QuorumHoldErrors, QuorumRenewErrors,
    examples,
};
use crate::http::sessions::{self, Held};
use crate::state::AppState;
use crate::store::StoreError;

pub const TAG: &str = "redlocks";

/// How many nodes granted (or renewed) the hold.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeCount {
    /// Nodes that granted (at least a quorum, N/2+1).
    pub acquired: usize,
    /// Nodes configured.
    pub total: usize,
}

/// A RedLock grant or renewal: the lock family's grant, how long it can be
/// relied on, and how many nodes agreed. `hold_count` is always 1 (a
/// re-acquire renews the hold and keeps its token; one release frees it),
/// and `expires_in_ms` is `validity_ms`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "name": "nightly-report", "holder": "worker-1", "fencing_token": 12, "hold_count": 1,
    "lease_ms": 30000, "expires_in_ms": 29695, "heartbeat_interval_ms": 10000,
    "validity_ms": 29695, "nodes": {"acquired": 3, "total": 3}
}))]
pub struct RedlockGrant {
    #[serde(flatten)]
    pub grant: Grant,
    /// `lease_ms − elapsed − drift` (drift = lease_ms/100 + 2): how long
    /// the hold can be relied on from when the request was served. Finish
    /// (or renew) within it.
    pub validity_ms: u64,
    pub nodes: NodeCount,
}

impl RedlockGrant {
    fn new(name: &str, holder: &str, g: &RedGrant) -> Self {
        let mut grant = Grant::of(name, holder, g.fencing_token, 1, g.lease_ms);
        grant.expires_in_ms = g.validity_ms;
        RedlockGrant {
            grant,
            validity_ms: g.validity_ms,
            nodes: NodeCount {
                acquired: g.acquired,
                total: g.total,
            },
        }
    }
}

/// The answer to a release.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"released": true}))]
pub struct RedlockRelease {
    /// True when the holder held a quorum of the nodes that answered (its
    /// hold was whole); false when only fewer still had it (the hold had
    /// already been lost; what was left is removed).
    pub released: bool,
}

/// One node's view of the lock.
#[derive(Debug, Serialize, ToSchema)]
pub struct RedlockNode {
    /// Index in the configured node list, from 0.
    pub node: usize,
    /// Whether the node answered within the per-node timeout.
    pub reachable: bool,
    pub locked: bool,
    /// Remaining lease on this node in ms (0 when free or unreachable).
    pub ttl_ms: u64,
}

/// A RedLock's state on every node (never a holder id).
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "name": "nightly-report", "locked_on": 2, "total": 3,
    "nodes": [
        {"node": 0, "reachable": true, "locked": true, "ttl_ms": 24500},
        {"node": 1, "reachable": true, "locked": true, "ttl_ms": 24498},
        {"node": 2, "reachable": false, "locked": false, "ttl_ms": 0}
    ],
    "holds": [{"owner": "cron nightly-export", "expires_in_ms": 24498, "held_for_ms": 5500,
        "session": false, "hold_count": 1}]
}))]
pub struct RedlockStatus {
    pub name: String,
    /// Nodes on which the lock is held (by anyone).
    pub locked_on: usize,
    /// Nodes configured.
    pub total: usize,
    pub nodes: Vec<RedlockNode>,
    /// The hold as a quorum of the nodes has it (the nodes' parts of one
    /// acquire): its owner, and the remaining lease and time held that a
    /// quorum of them reaches. Empty when free, and when no quorum of the
    /// nodes that answered has one same hold (the nodes disagree: see
    /// `nodes`). Never the holder id.
    pub holds: Vec<HoldView>,
}

impl RedlockStatus {
    fn new(name: String, s: RedState) -> Self {
        RedlockStatus {
            name,
            locked_on: s.locked_on,
            total: s.total,
            nodes: s
                .nodes
                .into_iter()
                .map(|n| RedlockNode {
                    node: n.node,
                    reachable: n.reachable,
                    locked: n.locked,
                    ttl_ms: n.ttl_ms,
                })
                .collect(),
            holds: s
                .hold
                .map(|h| HoldView::new(h, Counted::HoldCount))
                .into_iter()
                .collect(),
        }
    }
}

/// The RedLock nodes, or 503 `redlock-not-configured`.
fn configured(state: &AppState) -> Result<&RedLocks, ApiError> {
    state
        .redlocks
        .as_ref()
        .ok_or_else(ApiError::redlock_not_configured)
}

/// One blocking RedLock acquire.
#[derive(Clone)]
struct RedlockAcquisition {
    redlocks: RedLocks,
    name: ScopedName,
    holder: String,
    lease_ms: u64,
    /// The hold's owner label ('' for none).
    owner: String,
}

impl Acquisition for RedlockAcquisition {
    type Grant = RedGrant;

    fn primitive(&self) -> &'static str {
        "redlock"
    }

    fn channel(&self) -> String {
        self.redlocks.wake_channel(&self.name.key)
    }

    async fn attempt(&self, attempt: &AttemptId) -> Result<Attempt<RedGrant>, StoreError> {
        let (name, holder) = (&self.name.key, &self.holder);
        self.redlocks
            .try_acquire_in(name, holder, self.lease_ms, attempt, None, &self.owner)
            .await
    }

    async fn undo(&self, attempt: &AttemptId) -> Result<bool, StoreError> {
        self.redlocks
            .undo(&self.name.key, &self.holder, attempt, self.lease_ms)
            .await
    }

    fn blocked(&self, blocked: Blocked) -> ApiError {
        held_on_quorum(blocked.retry_after_ms, blocked.held_by)
    }

    fn grant_body<'a>(&'a self, grant: &'a RedGrant) -> impl Serialize + 'a {
        RedlockGrant::new(&self.name.name, &self.holder, grant)
    }

    fn location(&self) -> Option<String> {
        Some(format!(
            "/redlocks/{}/holders/{}",
            self.name.name, self.holder
        ))
    }
}

impl Held for RedlockAcquisition {
    fn holds(&self) -> Vec<Hold> {
        vec![Hold {
            kind: HoldKind::Redlock,
            name: self.name.key.clone(),
            holder: self.holder.clone(),
        }]
    }

    async fn attempt_in(
        &self,
        attempt: &AttemptId,
        lease_ms: u64,
        session: SessionTerm<'_>,
    ) -> Result<Attempt<RedGrant>, StoreError> {
        self.redlocks
            .try_acquire_in(
                &self.name.key,
                &self.holder,
                lease_ms,
                attempt,
                Some(session),
                &SessionTerm::owner_of(&self.owner, Some(session)),
            )
            .await
    }
}

const SSE_EXAMPLE: &str = "event: waiting\ndata: {\"retry_after_ms\":2500,\"held_by\":[\"cron nightly-export\"]}\n\nevent: acquired\ndata: {\"name\":\"nightly-report\",\"holder\":\"worker-1\",\"fencing_token\":13,\"hold_count\":1,\"lease_ms\":30000,\"expires_in_ms\":29696,\"heartbeat_interval_ms\":10000,\"validity_ms\":29696,\"nodes\":{\"acquired\":3,\"total\":3}}\n\n";

/// Acquire on a quorum of the RedLock nodes (or renew as its holder).
///
/// Asks every node at once, each bounded by the per-node timeout (a tenth
/// of the lease, at most 100 ms); granted when N/2+1 nodes grant and
/// `validity_ms` is left; otherwise what was taken is given back on every
/// node. Long-polls up to `wait_ms`; `Accept: text/event-stream` streams
/// events.
#[utoipa::path(
    post,
    path = "/redlocks/{name}/acquire",
    operation_id = "acquire_redlock",
    tag = TAG,
    params(NamePath),
    request_body(content = Option<AcquireRequest>, content_type = "application/json"),
    responses(
        (status = 201, description = "Acquired on a quorum of the nodes (or renewed by its holder). \
            `Location` is the holder's URL. With `Accept: text/event-stream`: HTTP 200 and \
            `waiting` events, then one of `acquired`, `timeout` or `error`.",
            content((RedlockGrant = "application/json"), (String = "text/event-stream", example = json!(SSE_EXAMPLE))),
            headers(("Location" = String, description = "/redlocks/{name}/holders/{holder}"))),
        (status = 409, description = "Held by another holder on enough nodes that no quorum is free \
            (`lock-held`), with `retry_after_ms`: when enough of those holds end for a quorum, and \
            `held_by`: the owner labels the refusing nodes' holds have (each once). Or the \
            holder holds it in another session, or without one while this request names one (or the \
            reverse): `session-mismatch`, nothing taken",
            body = Problem, content_type = "application/problem+json",
            examples(("lock-held" = (value = json!(examples::held_on_quorum()))), ("session-mismatch" = (value = json!(examples::session_mismatch()))))),
        NoSessionErrors,
        QuorumAcquireErrors,
    )
)]
pub async fn acquire(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<NamePath>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<AcquireRequest>,
) -> Result<Response, ApiError> {
    let redlocks = configured(&state)?.clone();
    let checked = Checked::new(&state, scope.name(path.name)?, body).await?;
    let timing = checked.timing();
    let acquisition = RedlockAcquisition {
        redlocks,
        name: checked.name,
        holder: checked.holder,
        lease_ms: checked.lease_ms,
        owner: checked.owner,
    };
    sessions::respond(&state, headers, timing, checked.session, acquisition).await
}

/// Renew the hold on every node.
///
/// Succeeds only when a quorum renews within the validity; the lease is
/// the body's `lease_ms`, or the one the hold has.
#[utoipa::path(
    post,
    path = "/redlocks/{name}/holders/{holder}/heartbeat",
    operation_id = "heartbeat_redlock",
    tag = TAG,
    params(HolderPath),
    request_body(content = Option<HeartbeatRequest>, content_type = "application/json"),
    responses(
        (status = 200, description = "Renewed on a quorum", body = RedlockGrant),
        QuorumRenewErrors,
    )
)]
pub async fn heartbeat(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<HolderPath>,
    ApiJson(body): ApiJson<HeartbeatRequest>,
) -> Result<Json<RedlockGrant>, ApiError> {
    let redlocks = configured(&state)?;
    let (name, holder) = path.scoped(&scope)?;
    let lease = renewal_lease(&state, body.lease_ms)?;
    match redlocks.heartbeat(&name.key, &holder, lease).await? {
        Some(g) => Ok(Json(RedlockGrant::new(&name.name, &holder, &g))),
        None => Err(ApiError::not_held(
            "this holder does not hold the RedLock on a quorum of the nodes (released, expired, \
             lost with a node's data, or never acquired)",
        )),
    }
}

/// Release the hold on every node.
#[utoipa::path(
    delete,
    path = "/redlocks/{name}/holders/{holder}",
    operation_id = "release_redlock",
    tag = TAG,
    params(HolderPath),
    responses(
        (status = 200, description = "Released", body = RedlockRelease),
        QuorumHoldErrors,
    )
)]
pub async fn release(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<HolderPath>,
) -> Result<Json<RedlockRelease>, ApiError> {
    let redlocks = configured(&state)?;
    let (name, holder) = path.scoped(&scope)?;
    match redlocks.release(&name.key, &holder).await? {
        Some(released) => Ok(Json(RedlockRelease { released })),
        None => Err(ApiError::not_held(
            "this holder does not hold the RedLock on any node that answered (released, \
             expired, or never acquired)",
        )),
    }
}

/// Read the state on every node. Never reveals a holder id.
///
/// A node that does not answer within 100 ms is reported unreachable.
#[utoipa::path(
    get,
    path = "/redlocks/{name}",
    operation_id = "get_redlock",
    tag = TAG,
    params(NamePath),
    responses(
        (status = 200, description = "The state on every node", body = RedlockStatus),
        (status = 400, description = "Invalid name", body = Problem, content_type = "application/problem+json",
            examples(("invalid-name" = (value = json!(examples::invalid_name()))))),
        (status = 503, description = "No RedLock nodes configured (`redlock-not-configured`)", body = Problem, content_type = "application/problem+json",
            examples(("redlock-not-configured" = (value = json!(examples::redlock_not_configured()))))),
    )
)]
pub async fn state(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<NamePath>,
) -> Result<Json<RedlockStatus>, ApiError> {
    let redlocks = configured(&state)?;
    let name = scope.name(path.name)?;
    let s = redlocks.state(&name.key).await;
    Ok(Json(RedlockStatus::new(name.name, s)))
}
