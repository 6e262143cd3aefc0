//! `/rwlocks/{name}/...`: read-write locks (the book's "Read-write locks"
//! (docs/src/rwlocks.md)).
//! Acquire bodies, heartbeats and force unlock are the lock family's
//! ([`HoldApi`] and `hold_routes!`); the grant adds the mode and both hold
//! counts.

use axum::http::HeaderMap;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

use crate::coord::rwlocks::{Mode, RwGrant, RwLocks};
use crate::coord::sessions::HoldKind;
use crate::coord::{Attempt, AttemptId, Blocked, SessionTerm, Wait};
use crate::http::access::ScopedName;
use crate::http::lock_family::{self, AcquireRequest, ForceUnlock, Grant, HoldApi, Object};
use crate::http::problems::QUEUED;
use crate::http::responses::{AcquireErrors, Counted, HoldView, NoSessionErrors, examples};
use crate::store::StoreError;
use crate::wait::WaitMode;

pub const TAG: &str = "rwlocks";

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RwMode {
    Read,
    Write,
}

impl From<Mode> for RwMode {
    fn from(m: Mode) -> Self {
        match m {
            Mode::Read => RwMode::Read,
            Mode::Write => RwMode::Write,
        }
    }
}

impl From<RwMode> for Mode {
    fn from(m: RwMode) -> Self {
        match m {
            RwMode::Read => Mode::Read,
            RwMode::Write => Mode::Write,
        }
    }
}

/// A grant or renewal of an rwlock hold: the lock family's grant for the
/// hold in `mode`, and both hold counts.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "name": "catalog", "holder": "reader-1", "fencing_token": 7, "hold_count": 1,
    "lease_ms": 30000, "expires_in_ms": 30000, "heartbeat_interval_ms": 10000,
    "mode": "read", "read_hold_count": 1, "write_hold_count": 0
}))]
pub struct RwGrantBody {
    #[serde(flatten)]
    pub grant: Grant,
    /// The mode of the hold this grant is about (`write` when the holder
    /// writes).
    pub mode: RwMode,
    /// Read holds this holder has.
    pub read_hold_count: u64,
    /// Write holds this holder has.
    pub write_hold_count: u64,
}

impl RwGrantBody {
    fn new(name: &str, holder: &str, g: &RwGrant) -> Self {
        RwGrantBody {
            grant: Grant::of(name, holder, g.fencing_token, g.hold_count, g.lease_ms),
            mode: g.mode.into(),
            read_hold_count: g.read_hold_count,
            write_hold_count: g.write_hold_count,
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RwReleaseQuery {
    /// Which hold to release. Omitted: the write hold if the holder has
    /// one, else a read hold.
    pub mode: Option<RwMode>,
    /// Release every hold of that mode at once.
    pub all: Option<bool>,
}

/// The answer to a release (or to a waiter leaving the queue).
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"released": true, "hold_count": 0, "mode": "write", "left_queue": false}))]
pub struct RwRelease {
    /// True when the rwlock became free.
    pub released: bool,
    /// Holds of this mode the holder still has.
    pub hold_count: u64,
    /// The mode released (when it left the queue: the mode it waited for,
    /// `write` if it waited for both).
    pub mode: RwMode,
    /// True when the holder waited in the queue and this request took it
    /// out, at once, releasing nothing (`released` false; a holder that
    /// also held keeps its holds: a second DELETE releases). Always present.
    pub left_queue: bool,
}

/// An rwlock's public state (never a holder id or session id).
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "name": "catalog", "mode": "read", "readers": 2, "writer_hold_count": 0,
    "ttl_ms": 24500, "fencing_token": 42, "waiters": 1, "queued": 1,
    "holds": [
        {"owner": "web-7 pid 4242 GET /catalog", "expires_in_ms": 24500, "held_for_ms": 5500,
         "session": false, "hold_count": 1, "mode": "read"},
        {"owner": null, "expires_in_ms": 12000, "held_for_ms": 800, "session": true,
         "hold_count": 2, "mode": "read"}
    ]
}))]
pub struct RwLockStatus {
    pub name: String,
    /// `read`, `write`, or null when free.
    pub mode: Option<RwMode>,
    /// Distinct reader holders.
    pub readers: u64,
    pub writer_hold_count: u64,
    /// Remaining ms of the longest hold (0 when free).
    pub ttl_ms: u64,
    /// Last fencing token issued (0 if never locked).
    pub fencing_token: u64,
    /// Requests waiting on the instance that answers.
    pub waiters: u64,
    /// Waiters in the rwlock's queue in Redis, on every instance.
    pub queued: u64,
    /// The live holds (at most 100): the write hold first, then the
    /// readers'. A holder that writes and reads has one of each. Owner
    /// labels are visible to every client of the namespace.
    pub holds: Vec<HoldView>,
}

/// A read or a write hold of a rwlock, as the object of an acquire.
#[derive(Clone)]
struct RwHold {
    rwlocks: RwLocks,
    mode: Mode,
}

impl Object for RwHold {
    type Grant = RwGrant;

    fn primitive(&self) -> &'static str {
        "rwlock"
    }

    fn resource(&self) -> &'static str {
        "/rwlocks"
    }

    fn hold_kind(&self) -> HoldKind {
        match self.mode {
            Mode::Read => HoldKind::Read,
            Mode::Write => HoldKind::Write,
        }
    }

    fn channel(&self, key: &str) -> String {
        self.rwlocks.wake_channel(key)
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
    ) -> Result<Attempt<RwGrant>, StoreError> {
        let holder_owner = (holder, Some(owner));
        (self.rwlocks)
            .try_acquire_in(key, holder_owner, self.mode, lease_wait, attempt, session)
            .await
    }

    async fn undo(
        &self,
        key: &str,
        holder: &str,
        attempt: &AttemptId,
        wait: Wait,
    ) -> Result<bool, StoreError> {
        self.rwlocks.undo(key, holder, attempt, wait).await
    }

    async fn leave(&self, key: &str, holder: &str) -> Result<(), StoreError> {
        self.rwlocks.leave(key, holder, self.mode).await
    }

    fn blocked(&self, blocked: Blocked) -> ApiError {
        let mut problem = ApiError::lock_held(blocked.retry_after_ms);
        problem.problem.detail =
            format!("the rwlock is held, or waiters are queued ahead. {QUEUED}");
        problem.with_held_by(blocked.held_by)
    }

    /// Read-write locks report the hint and the owners of the blocking
    /// holds, no `position`: their queue orders readers and writers, but a
    /// reader's place among readers means little.
    fn waiting(&self, blocked: Blocked) -> Value {
        json!({ "retry_after_ms": blocked.retry_after_ms, "held_by": blocked.held_by })
    }

    fn grant_body<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        grant: &'a RwGrant,
    ) -> impl Serialize + 'a {
        RwGrantBody::new(name, holder, grant)
    }
}

async fn acquire(
    state: AppState,
    name: ScopedName,
    mode: Mode,
    headers: HeaderMap,
    body: AcquireRequest,
) -> Result<Response, ApiError> {
    let hold = RwHold {
        rwlocks: state.rwlocks.clone(),
        mode,
    };
    lock_family::acquire(&state, hold, name, headers, body).await
}

const SSE_EXAMPLE: &str = "event: waiting\ndata: {\"retry_after_ms\":2500,\"held_by\":[\"cron nightly-export\"]}\n\nevent: acquired\ndata: {\"name\":\"catalog\",\"holder\":\"reader-1\",\"fencing_token\":8,\"hold_count\":1,\"lease_ms\":30000,\"expires_in_ms\":30000,\"heartbeat_interval_ms\":10000,\"mode\":\"read\",\"read_hold_count\":1,\"write_hold_count\":0}\n\n";

/// Acquire a read hold (shared with other readers).
///
/// Granted while no writer holds the rwlock and no writer is queued ahead;
/// re-entered by a reader, and taken by the writer itself (downgrade).
/// Long-polls up to `wait_ms`; `Accept: text/event-stream` streams events.
#[utoipa::path(
    post,
    path = "/rwlocks/{name}/read/acquire",
    operation_id = "acquire_rwlock_read",
    tag = TAG,
    params(NamePath),
    request_body(content = Option<AcquireRequest>, content_type = "application/json"),
    responses(
        (status = 201, description = "Acquired (or re-entered). `Location` is the holder's URL. \
            With `Accept: text/event-stream`: HTTP 200 and `waiting` events, then one of \
            `acquired`, `timeout` or `error`.",
            content((RwGrantBody = "application/json"), (String = "text/event-stream", example = json!(SSE_EXAMPLE))),
            headers(("Location" = String, description = "/rwlocks/{name}/holders/{holder}"))),
        (status = 409, description = "A writer holds the rwlock or is queued ahead (`lock-held`), with `retry_after_ms`; \
            or this holder holds the rwlock in another session, or without one while this request names one \
            (or the reverse): `session-mismatch`, nothing changed", body = Problem, content_type = "application/problem+json",
            examples(("lock-held" = (value = json!(examples::lock_held()))), ("session-mismatch" = (value = json!(examples::session_mismatch()))))),
        NoSessionErrors,
        AcquireErrors,
    )
)]
pub async fn acquire_read(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<NamePath>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<AcquireRequest>,
) -> Result<Response, ApiError> {
    let name = scope.name(path.name)?;
    acquire(state, name, Mode::Read, headers, body).await
}

/// Acquire the write hold (exclusive).
///
/// Granted when nothing is held and nobody is queued ahead; re-entered by
/// the writer. The only reader may upgrade (it keeps its read hold); a
/// reader among several gets 409 `upgrade-would-deadlock` at once.
#[utoipa::path(
    post,
    path = "/rwlocks/{name}/write/acquire",
    operation_id = "acquire_rwlock_write",
    tag = TAG,
    params(NamePath),
    request_body(content = Option<AcquireRequest>, content_type = "application/json"),
    responses(
        (status = 201, description = "Acquired (or re-entered, or upgraded). `Location` is the holder's URL. \
            With `Accept: text/event-stream`: HTTP 200 and `waiting` events, then one of \
            `acquired`, `timeout` or `error`.",
            content((RwGrantBody = "application/json"), (String = "text/event-stream", example = json!(SSE_EXAMPLE))),
            headers(("Location" = String, description = "/rwlocks/{name}/holders/{holder}"))),
        (status = 409, description = "Held by others or others queued ahead (`lock-held`, with `retry_after_ms`), \
            or this holder reads together with other readers (`upgrade-would-deadlock`), or holds the rwlock \
            in another session, or without one while this request names one (or the reverse): \
            `session-mismatch`, nothing changed", body = Problem, content_type = "application/problem+json",
            examples(("lock-held" = (value = json!(examples::lock_held()))), ("upgrade-would-deadlock" = (value = json!(examples::upgrade_would_deadlock()))), ("session-mismatch" = (value = json!(examples::session_mismatch()))))),
        NoSessionErrors,
        AcquireErrors,
    )
)]
pub async fn acquire_write(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<NamePath>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<AcquireRequest>,
) -> Result<Response, ApiError> {
    let name = scope.name(path.name)?;
    acquire(state, name, Mode::Write, headers, body).await
}

impl HoldApi for RwLocks {
    type Renewed = RwGrantBody;
    type ReleaseQuery = RwReleaseQuery;
    type Released = RwRelease;
    type Status = RwLockStatus;
    type Removed = ForceUnlock;

    fn wake_channel(&self, name: &str) -> String {
        RwLocks::wake_channel(self, name)
    }

    /// Renews every hold the holder has; `mode` is `write` when it writes.
    async fn renew(
        &self,
        name: &ScopedName,
        holder: &str,
        lease_ms: Option<u64>,
    ) -> Result<Option<RwGrantBody>, StoreError> {
        let renewed = self.heartbeat(&name.key, holder, lease_ms).await?;
        Ok(renewed.map(|g| RwGrantBody::new(&name.name, holder, &g)))
    }

    async fn let_go(
        &self,
        name: &ScopedName,
        holder: &str,
        query: RwReleaseQuery,
    ) -> Result<Option<RwRelease>, StoreError> {
        let mode = query.mode.map(Mode::from);
        let released = self
            .leave_or_release(&name.key, holder, mode, query.all.unwrap_or(false))
            .await?;
        Ok(released.map(|r| RwRelease {
            released: r.released,
            hold_count: r.hold_count,
            mode: r.mode.into(),
            left_queue: r.left_queue,
        }))
    }

    fn not_held_or_waiting(&self) -> &'static str {
        "this holder neither holds the rwlock (in that mode) nor waits in its queue (released, \
         expired, never acquired, or its place lapsed)"
    }

    async fn status(&self, name: ScopedName, waiters: u64) -> Result<RwLockStatus, ApiError> {
        let s = self.state(&name.key).await?;
        Ok(RwLockStatus {
            name: name.name,
            mode: s.mode.map(RwMode::from),
            readers: s.readers,
            writer_hold_count: s.writer_hold_count,
            ttl_ms: s.ttl_ms,
            fencing_token: s.fencing_token,
            waiters,
            queued: s.queued,
            holds: HoldView::all(s.holds, Counted::HoldCount),
        })
    }

    async fn unlock(&self, name: &str) -> Result<ForceUnlock, StoreError> {
        let released = self.force_unlock(name).await?;
        Ok(ForceUnlock { released })
    }
}

super::lock_family::hold_routes! {
    field: rwlocks,
    resource: "rwlock",
    tag: "rwlocks",
    heartbeat: "/rwlocks/{name}/holders/{holder}/heartbeat",
    holder: "/rwlocks/{name}/holders/{holder}",
    object: "/rwlocks/{name}",
    renewed: RwGrantBody,
    query: RwReleaseQuery,
    release: [
        "Release one hold (or every hold of the mode, with `?all=true`), or leave the queue.",
        "",
        "A holder that waits in the queue (for `?mode`, or for either mode without it) leaves it \
        at once: 200 with `left_queue: true`, `released: false`, the `mode` it waited for and \
        nothing released; whoever can now be granted is woken. Leaving comes first: a holder \
        that both holds and waits (one whose earlier long-poll still keeps a place) keeps its holds (a second DELETE \
        releases). 404 only for a holder that neither holds nor waits.",
    ],
    released: RwRelease,
    status: RwLockStatus,
    status_errors: NameErrors,
    removed: ForceUnlock,
    remove: "Force unlock: remove every hold, whoever holds it, and wake waiters.",
    remove_action: "force_unlock_",
    removed_description: "Unlocked (`released` is false if it was free)",
}
