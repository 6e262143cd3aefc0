//! `/semaphores/{name}/...`: semaphores whose permits are all leased (the
//! book's "Semaphores" (docs/src/semaphores.md)). Heartbeats, releases, state
//! reads and deletion are the lock family's generic handlers over [`HoldApi`]
//! (`hold_routes!`); the configuration (PUT) and the acquire are here.

use axum::http::HeaderMap;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

use crate::coord::semaphores::{SemGrant, SemState, Semaphores};
use crate::coord::sessions::HoldKind;
use crate::coord::{Attempt, AttemptId, Blocked, SessionTerm, Wait};
use crate::http::access::ScopedName;
use crate::http::extract::{Millis, Owner};
use crate::http::lock_family::{self, AcquireRequest, Grant, HoldApi, Object};
use crate::http::problems::no_permits;
use crate::http::responses::{
    AcquireErrors, BodyErrors, Counted, HoldView, ObjectErrors, examples,
};
use crate::store::StoreError;
use crate::wait::WaitMode;

/// The most permits a semaphore may have.
const MAX_PERMITS: u64 = 1_000_000;

/// Body of a configuration.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"permits": 3}))]
pub struct SemaphoreConfig {
    /// The number of permits. Lowering it never revokes live holds: new
    /// acquires wait until enough holds end.
    #[schema(value_type = u64, minimum = 1, maximum = 1000000, example = 3)]
    pub permits: Option<Millis>,
}

/// A semaphore's public state (never a holder id or session id).
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "name": "exports", "permits": 3, "available": 0, "holders": 2, "waiters": 0, "queued": 1,
    "holds": [
        {"owner": "worker-1 pid 77 export.py", "expires_in_ms": 21000, "held_for_ms": 9000,
         "session": false, "permits": 2},
        {"owner": null, "expires_in_ms": 28000, "held_for_ms": 2000, "session": true,
         "permits": 1}
    ]
}))]
pub struct SemaphoreStatus {
    pub name: String,
    pub permits: u64,
    /// `permits` minus the permits held by live leases, never below 0.
    pub available: u64,
    /// Holders with a live lease.
    pub holders: u64,
    /// Requests waiting on the instance that answers.
    pub waiters: u64,
    /// Waiters in the semaphore's queue in Redis, on every instance.
    pub queued: u64,
    /// The live holds (at most 100), by the end of their lease: each
    /// holder's permits. Owner labels are visible to every client of the
    /// namespace.
    pub holds: Vec<HoldView>,
}

impl SemaphoreStatus {
    fn new(name: String, s: SemState, waiters: u64) -> Self {
        SemaphoreStatus {
            name,
            permits: s.permits,
            available: s.available,
            holders: s.holders,
            waiters,
            queued: s.queued,
            holds: HoldView::all(s.holds, Counted::Permits),
        }
    }
}

/// Body of an acquire. Every field is optional; the body may be omitted.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"permits": 1, "lease_ms": 30000, "wait_ms": 0, "owner": "worker-1 pid 77 export.py"}))]
pub struct SemaphoreAcquireRequest {
    /// Permits to take (default 1); at most the semaphore's `permits`.
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 1000000, example = 1)]
    pub permits: Option<Millis>,
    /// Who acquires. Omit it and the server generates one (128 random
    /// bits); reuse it to take more permits under the same lease, renew
    /// and release.
    #[schema(example = "worker-1", pattern = "^[A-Za-z0-9._~:-]{1,128}$")]
    pub holder: Option<String>,
    /// Lease in ms (default 30000) of the holder's whole hold. The
    /// accepted range is configuration (min_lease_ms/max_lease_ms); each
    /// server shows its own.
    #[schema(value_type = Option<u64>, minimum = 500, maximum = 86400000, example = 30000)]
    pub lease_ms: Option<Millis>,
    /// How long to wait for the permits, in ms (default 0 = try once). The
    /// maximum is configuration (max_wait_ms); each server shows its own.
    /// A try takes no place in the queue; a long-poll keeps its place for
    /// the queue grace after it ends.
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 60000, example = 0)]
    pub wait_ms: Option<Millis>,
    /// A session id (`POST /sessions`), in place of `lease_ms`: the permits
    /// are held as long as the session, renewed by its heartbeats and given
    /// back when it ends; the grant's `lease_ms` is what they have left of
    /// the session's TTL. 404 `not-found` when the session does not exist;
    /// 409 `session-mismatch` when this holder holds permits without a
    /// session or in another one (and, without `session`, when it holds
    /// them in one).
    #[schema(
        example = "7d3c0e1f9a2b4c5d8e6f0a1b2c3d4e5f",
        pattern = "^[A-Za-z0-9._~:-]{1,128}$"
    )]
    pub session: Option<String>,
    /// Who acquires, in words: a label shown in state reads and in the
    /// `held_by` of refused requests (1-200 bytes of UTF-8 without control
    /// characters; else 400 `invalid-body`). Not a secret: every client of
    /// the namespace sees it. A later acquire by the same holder that sends
    /// one replaces it; one that sends none keeps it.
    pub owner: Option<Owner>,
}

/// A grant or renewal: the lock family's grant for the holder's hold, and
/// its permits in total.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "name": "exports", "holder": "worker-1", "fencing_token": 12, "hold_count": 1,
    "lease_ms": 30000, "expires_in_ms": 30000, "heartbeat_interval_ms": 10000, "permits": 2
}))]
pub struct SemaphoreGrant {
    #[serde(flatten)]
    pub grant: Grant,
    /// The permits this holder holds in total (all under one lease).
    pub permits: u64,
}

impl SemaphoreGrant {
    fn new(name: &str, holder: &str, g: &SemGrant) -> Self {
        SemaphoreGrant {
            grant: Grant::of(name, holder, g.fencing_token, g.grants, g.lease_ms),
            permits: g.permits,
        }
    }
}

/// A release has no options: it gives back all the holder's permits.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SemaphoreReleaseQuery {}

/// The answer to a release (or to a waiter leaving the queue).
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"released_permits": 2, "left_queue": false}))]
pub struct SemaphoreRelease {
    /// The permits given back.
    pub released_permits: u64,
    /// True when the holder waited in the queue and this request took it
    /// out, at once, giving nothing back (`released_permits` 0; a holder
    /// that also held keeps its permits: a second DELETE gives them back).
    /// Always present.
    pub left_queue: bool,
}

/// The answer to a deletion.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"deleted": true}))]
pub struct SemaphoreDeleted {
    /// False when there was no such semaphore.
    pub deleted: bool,
}

/// Permits of a semaphore, as the object of an acquire.
#[derive(Clone)]
struct Permits {
    semaphores: Semaphores,
    permits: u64,
}

impl Object for Permits {
    type Grant = SemGrant;

    fn primitive(&self) -> &'static str {
        "semaphore"
    }

    fn resource(&self) -> &'static str {
        "/semaphores"
    }

    fn hold_kind(&self) -> HoldKind {
        HoldKind::Semaphore
    }

    fn channel(&self, key: &str) -> String {
        self.semaphores.wake_channel(key)
    }

    fn mode(&self) -> WaitMode {
        WaitMode::Queue
    }

    async fn attempt(
        &self,
        key: &str,
        (holder, owner): (&str, &str),
        lease_wait: (u64, Wait),
        attempt: &AttemptId,
        session: Option<SessionTerm<'_>>,
    ) -> Result<Attempt<SemGrant>, StoreError> {
        let holder_owner = (holder, Some(owner));
        (self.semaphores)
            .try_acquire_in(
                key,
                holder_owner,
                self.permits,
                lease_wait,
                attempt,
                session,
            )
            .await
    }

    async fn undo(
        &self,
        key: &str,
        holder: &str,
        attempt: &AttemptId,
        wait: Wait,
    ) -> Result<bool, StoreError> {
        self.semaphores.undo(key, holder, attempt, wait).await
    }

    async fn leave(&self, key: &str, holder: &str) -> Result<(), StoreError> {
        self.semaphores.leave(key, holder, self.permits).await
    }

    fn blocked(&self, blocked: Blocked) -> ApiError {
        no_permits(blocked)
    }

    fn waiting(&self, blocked: Blocked) -> Value {
        json!({
            "retry_after_ms": blocked.retry_after_ms,
            "position": blocked.position,
            "available": blocked.available,
            "held_by": blocked.held_by,
        })
    }

    fn grant_body<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        grant: &'a SemGrant,
    ) -> impl Serialize + 'a {
        SemaphoreGrant::new(name, holder, grant)
    }
}

/// Set the number of permits (creating the semaphore).
///
/// Live holds are never revoked: with fewer permits than are held,
/// `available` is 0 until enough holds end. Waiters look again at once.
#[utoipa::path(
    put,
    path = "/semaphores/{name}",
    operation_id = "configure_semaphore",
    tag = "semaphores",
    params(NamePath),
    request_body(content = SemaphoreConfig, content_type = "application/json"),
    responses(
        (status = 200, description = "Configured", body = SemaphoreStatus),
        BodyErrors,
    )
)]
pub async fn configure(
    State(state): State<AppState>,
    Admin(scope): Admin,
    ApiPath(path): ApiPath<NamePath>,
    ApiJson(body): ApiJson<SemaphoreConfig>,
) -> Result<Json<SemaphoreStatus>, ApiError> {
    let name = scope.name(path.name)?;
    let permits = body
        .permits
        .ok_or_else(|| {
            ApiError::invalid_body("the body must name the number of permits: {\"permits\": n}")
        })?
        .within("permits", 1, MAX_PERMITS)?;
    let s = state.semaphores.set(&name.key, permits).await?;
    let waiters = state
        .engine
        .waiters_on(&state.semaphores.wake_channel(&name.key));
    Ok(Json(SemaphoreStatus::new(name.name, s, waiters)))
}

const SSE_EXAMPLE: &str = "event: waiting\ndata: {\"retry_after_ms\":2500,\"position\":0,\"available\":1,\"held_by\":[\"worker-2 pid 81 export.py\",null]}\n\nevent: acquired\ndata: {\"name\":\"exports\",\"holder\":\"worker-1\",\"fencing_token\":12,\"hold_count\":1,\"lease_ms\":30000,\"expires_in_ms\":30000,\"heartbeat_interval_ms\":10000,\"permits\":2}\n\n";

/// Acquire permits (adding to the holder's, under one lease).
///
/// Long-polls up to `wait_ms`; `Accept: text/event-stream` streams events.
/// Waiters are served in arrival order; a request that fits may overtake
/// waiters that need more than is available, at most 16 times per waiter
/// at the head of the queue.
#[utoipa::path(
    post,
    path = "/semaphores/{name}/acquire",
    operation_id = "acquire_semaphore",
    tag = "semaphores",
    params(NamePath),
    request_body(content = Option<SemaphoreAcquireRequest>, content_type = "application/json"),
    responses(
        (status = 201, description = "Acquired. `permits` is the holder's total; `Location` is the holder's URL. \
            With `Accept: text/event-stream`: HTTP 200 and `waiting` events (`retry_after_ms`, \
            `position`, `available`), then one of `acquired`, `timeout` or `error`.",
            content((SemaphoreGrant = "application/json"), (String = "text/event-stream", example = json!(SSE_EXAMPLE))),
            headers(("Location" = String, description = "/semaphores/{name}/holders/{holder}"))),
        (status = 404, description = "No such semaphore (`not-found`): never configured, or deleted while waiting; \
            or no such session (`not-found`, with a detail naming the session): the body's `session` expired, \
            was deleted or never existed", body = Problem, content_type = "application/problem+json",
            examples(("not-found" = (value = json!(examples::not_found()))))),
        (status = 409, description = "Not enough permits, or waiters queued ahead (`no-permits`), with \
            `available`, `retry_after_ms` and `position` (a try, `wait_ms` 0, takes no place in the queue; \
            a long-poll keeps its place for the queue grace after it ends); or this holder holds permits in \
            another session, or without one while this request names one (or the reverse): \
            `session-mismatch`, nothing changed", body = Problem, content_type = "application/problem+json",
            examples(("no-permits" = (value = json!(examples::no_permits()))), ("session-mismatch" = (value = json!(examples::session_mismatch()))))),
        AcquireErrors,
    )
)]
pub async fn acquire(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<NamePath>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<SemaphoreAcquireRequest>,
) -> Result<Response, ApiError> {
    let name = scope.name(path.name)?;
    let permits = match body.permits {
        Some(p) => p.within("permits", 1, MAX_PERMITS)?,
        None => 1,
    };
    let rest = AcquireRequest {
        holder: body.holder,
        lease_ms: body.lease_ms,
        wait_ms: body.wait_ms,
        session: body.session,
        owner: body.owner,
    };
    let object = Permits {
        semaphores: state.semaphores.clone(),
        permits,
    };
    lock_family::acquire(&state, object, name, headers, rest).await
}

impl HoldApi for Semaphores {
    type Renewed = SemaphoreGrant;
    type ReleaseQuery = SemaphoreReleaseQuery;
    type Released = SemaphoreRelease;
    type Status = SemaphoreStatus;
    type Removed = SemaphoreDeleted;

    const NOT_HELD: &'static str =
        "this holder holds no permits (released, expired, or never acquired)";

    fn not_held_or_waiting(&self) -> &'static str {
        "this holder neither holds permits nor waits in the queue (released, expired, never \
         acquired, or its place lapsed)"
    }

    fn wake_channel(&self, name: &str) -> String {
        Semaphores::wake_channel(self, name)
    }

    async fn renew(
        &self,
        name: &ScopedName,
        holder: &str,
        lease_ms: Option<u64>,
    ) -> Result<Option<SemaphoreGrant>, StoreError> {
        let renewed = self.heartbeat(&name.key, holder, lease_ms).await?;
        Ok(renewed.map(|g| SemaphoreGrant::new(&name.name, holder, &g)))
    }

    async fn let_go(
        &self,
        name: &ScopedName,
        holder: &str,
        _query: SemaphoreReleaseQuery,
    ) -> Result<Option<SemaphoreRelease>, StoreError> {
        let released = self.leave_or_release(&name.key, holder).await?;
        Ok(released.map(|r| SemaphoreRelease {
            released_permits: r.released_permits,
            left_queue: r.left_queue,
        }))
    }

    async fn status(&self, name: ScopedName, waiters: u64) -> Result<SemaphoreStatus, ApiError> {
        match self.state(&name.key).await? {
            Some(s) => Ok(SemaphoreStatus::new(name.name, s, waiters)),
            None => Err(ApiError::not_found(
                "no such semaphore: configure it first with PUT /semaphores/{name}",
            )),
        }
    }

    async fn unlock(&self, name: &str) -> Result<SemaphoreDeleted, StoreError> {
        let deleted = self.delete(name).await?;
        Ok(SemaphoreDeleted { deleted })
    }
}

super::lock_family::hold_routes! {
    field: semaphores,
    resource: "semaphore",
    tag: "semaphores",
    heartbeat: "/semaphores/{name}/holders/{holder}/heartbeat",
    holder: "/semaphores/{name}/holders/{holder}",
    object: "/semaphores/{name}",
    renewed: SemaphoreGrant,
    query: SemaphoreReleaseQuery,
    release: [
        "Give back all the holder's permits, or leave the queue.",
        "",
        "A holder that waits in the queue leaves it at once: 200 with `left_queue: true` and \
        `released_permits: 0`; the waiters the permits now serve are woken. Leaving comes first: \
        a holder that holds permits and waits for more keeps them (a second DELETE gives them \
        back). 404 only for a holder that neither holds nor waits.",
    ],
    released: SemaphoreRelease,
    status: SemaphoreStatus,
    status_errors: ObjectErrors,
    removed: SemaphoreDeleted,
    remove: "Delete the semaphore: its configuration, every hold and the queue. Open waits end with 404 `not-found`.",
    remove_action: "delete_",
    removed_description: "Deleted (`deleted` is false if there was no such semaphore)",
}
