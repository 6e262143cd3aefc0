//! What the lock family's routes share (`/locks`, `/fair-locks`,
//! `/rwlocks`, and for `/semaphores` all but the configuration): path and
//! body types, the grant, a checked acquire request, the blocking acquire
//! of one named object (a lock, a rwlock's read or write hold, a
//! semaphore's permits) as an [`Acquisition`] over what each says of
//! itself ([`Object`]), the handlers of holds and objects generic over
//! [`HoldApi`], and the macros that give each resource its routes with
//! their OpenAPI operations (`lock_routes!`, `hold_routes!`; utoipa needs
//! literal paths and concrete types).

use axum::Json;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::time::Instant;
use utoipa::{IntoParams, ToSchema};

use crate::coord::locks::{LockGrant, LockKind, Locks};
use crate::coord::sessions::{Hold, HoldKind};
use crate::coord::{Attempt, AttemptId, Blocked, SessionTerm, Ticket, Wait};
use crate::error::ApiError;
use crate::http::access::{Scope, ScopedName};
use crate::http::extract::{
    Millis, Owner, check_holder, check_holder_in_path, lease_from, new_holder, renewal_lease,
    wait_from,
};
use crate::http::longpoll::{Acquisition, Timing, waiting_data};
use crate::http::problems::{self, lock_held};
use crate::http::responses::{Counted, HoldView};
use crate::http::sessions::{self, Held};
use crate::state::AppState;
use crate::store::StoreError;
use crate::wait::WaitMode;

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

impl HolderPath {
    /// Checks the name and the holder id (both reported as path problems)
    /// and scopes the name to the request's namespace.
    pub fn scoped(self, scope: &Scope) -> Result<(ScopedName, String), ApiError> {
        let name = scope.name(self.name)?;
        check_holder_in_path(&self.holder)?;
        Ok((name, self.holder))
    }
}

/// Body of an acquire. Every field is optional; the body may be omitted.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"lease_ms": 30000, "wait_ms": 0, "owner": "web-7 pid 4242 POST /orders/42"}))]
pub struct AcquireRequest {
    /// Who acquires. Omit it and the server generates one (128 random
    /// bits); reuse it to re-enter, renew and release.
    #[schema(example = "worker-1", pattern = "^[A-Za-z0-9._~:-]{1,128}$")]
    pub holder: Option<String>,
    /// Lease in ms (default 30000). The accepted range is configuration
    /// (min_lease_ms/max_lease_ms); each server shows its own. The
    /// hold ends when it lapses without a heartbeat.
    #[schema(value_type = Option<u64>, minimum = 500, maximum = 86400000, example = 30000)]
    pub lease_ms: Option<Millis>,
    /// How long to wait for the lock, in ms (default 0 = try once). The
    /// maximum is configuration (max_wait_ms); each server shows its own.
    /// Where waiters queue (fair locks, read-write locks), a try takes no
    /// place in the queue; a long-poll keeps its place for the queue grace
    /// after it ends.
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 60000, example = 0)]
    pub wait_ms: Option<Millis>,
    /// A session id (`POST /sessions`), in place of `lease_ms`: the hold
    /// lives as long as the session, renewed by its heartbeats and released
    /// when it ends; the grant's `lease_ms` is what it has left of the
    /// session's TTL. 404 `not-found` when the session does not exist; 409
    /// `session-mismatch` when this holder holds the object without a
    /// session or in another one (and, without `session`, when it holds the
    /// object in one).
    #[schema(
        example = "7d3c0e1f9a2b4c5d8e6f0a1b2c3d4e5f",
        pattern = "^[A-Za-z0-9._~:-]{1,128}$"
    )]
    pub session: Option<String>,
    /// Who holds, in words: shown in state reads (`holds[].owner`) and to
    /// refused requests (`held_by`) so that people can tell who holds what.
    /// Not a secret: every client of the namespace can read it. A re-entry
    /// with an owner replaces the label, one without keeps it. In a
    /// session, an acquire without one takes the session's owner.
    pub owner: Option<Owner>,
}

/// Body of a heartbeat; may be omitted.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({}))]
pub struct HeartbeatRequest {
    /// New lease in ms. Omit it to renew for the lease the hold already
    /// has. Range as for acquire. A hold taken in a session is renewed no
    /// further than the session's remaining TTL (the answer's `lease_ms`
    /// and `expires_in_ms` say what it got).
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
    /// Strictly increasing per object name over the deployment's life; hand
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
    pub fn new(name: &str, holder: &str, g: &LockGrant) -> Self {
        Grant::of(name, holder, g.fencing_token, g.hold_count, g.lease_ms)
    }

    /// A grant just made or renewed (so it expires in a full lease).
    pub fn of(
        name: &str,
        holder: &str,
        fencing_token: u64,
        hold_count: u64,
        lease_ms: u64,
    ) -> Self {
        Grant {
            name: name.to_string(),
            holder: holder.to_string(),
            fencing_token,
            hold_count,
            lease_ms,
            expires_in_ms: lease_ms,
            heartbeat_interval_ms: lease_ms / 3,
        }
    }
}

/// An acquire request, checked: the object, who acquires (generated when
/// omitted), the lease, how long it may wait, and the session it acquires
/// in, if any.
pub struct Checked {
    pub arrived: Instant,
    pub name: ScopedName,
    pub holder: String,
    /// The body's (the default in a session, whose tries take the
    /// session's remaining TTL as the lease instead).
    pub lease_ms: u64,
    pub wait_ms: u64,
    /// The session the hold attaches to (in the object's namespace).
    pub session: Option<ScopedName>,
    /// The hold's owner label ('' for none).
    pub owner: String,
}

impl Checked {
    /// `arrived` is taken first, so the wait counts from the request's
    /// arrival. Nothing is read from Redis here: a request in a session
    /// reads the session in each try, within the request's deadline (404
    /// `not-found` when there is no such session).
    pub async fn new(
        state: &AppState,
        name: ScopedName,
        body: AcquireRequest,
    ) -> Result<Self, ApiError> {
        let arrived = Instant::now();
        let holder = match body.holder {
            Some(holder) => {
                check_holder(&holder)?;
                holder
            }
            None => new_holder(),
        };
        let wait_ms = wait_from(state, body.wait_ms)?;
        let (lease_ms, session) = match (body.session, body.lease_ms) {
            (None, lease) => (lease_from(state, lease)?, None),
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid_body(
                    "send either lease_ms or session, not both: a hold in a session has the \
                     session's TTL as its lease",
                ));
            }
            (Some(id), None) => (lease_from(state, None)?, Some(sessions::scoped(&name, id)?)),
        };
        Ok(Checked {
            arrived,
            name,
            holder,
            lease_ms,
            wait_ms,
            session,
            owner: Owner::arg(body.owner.as_ref()),
        })
    }

    /// When it arrived and how long it may wait.
    pub fn timing(&self) -> Timing {
        Timing {
            arrived: self.arrived,
            wait_ms: self.wait_ms,
        }
    }

    /// When a long-poll stops waiting; `None` for a try (`wait_ms: 0`),
    /// which takes no place where waiters queue (the book's "Fair locks"
    /// (docs/src/fair-locks.md)).
    pub fn deadline(&self) -> Option<Instant> {
        (self.wait_ms > 0).then(|| self.arrived + std::time::Duration::from_millis(self.wait_ms))
    }

    /// What a try of the request tells a queue: the milliseconds left until
    /// its [`Self::deadline`] (a long-poll's entry lasts that long plus the
    /// grace, so even its last try, at the deadline, keeps its place), or
    /// `None` for a try, which takes no place. Whether a try queues comes
    /// from the request's `wait_ms`, never from the time left.
    pub fn wait_left_ms(deadline: Option<Instant>) -> Option<u64> {
        deadline.map(|d| d.saturating_duration_since(Instant::now()).as_millis() as u64)
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReleaseQuery {
    /// Release every reentrant hold at once.
    pub all: Option<bool>,
}

/// The answer to a release (or, on a fair lock, to a waiter leaving the
/// queue).
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"released": true, "hold_count": 0}))]
pub struct Release {
    /// True when the lock became free.
    pub released: bool,
    /// Holds this holder still has.
    pub hold_count: u64,
    /// Fair locks only, and there always: true when the holder waited in
    /// the queue and this request took it out, at once, releasing nothing
    /// (`released` false; a holder that also held keeps its holds: a
    /// second DELETE releases). Absent on plain locks, which keep no queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub left_queue: Option<bool>,
}

/// A lock's (or fair lock's) public state (never the holder id).
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "name": "orders", "locked": true, "hold_count": 1, "ttl_ms": 24500,
    "fencing_token": 42, "waiters": 3,
    "holds": [{"owner": "web-7 pid 4242 POST /orders/42", "expires_in_ms": 24500,
        "held_for_ms": 5500, "session": false, "hold_count": 1}]
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
    /// The current hold: none when free, else one (a reentrant lock's
    /// holds are one holder's), with its owner label and `hold_count`.
    /// Never the holder id or session id.
    pub holds: Vec<HoldView>,
    /// Fair locks only: the waiters queued in Redis, whichever instance
    /// they wait on (places that have not lapsed).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub queued: Option<u64>,
}

/// The answer to a force unlock.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"released": true}))]
pub struct ForceUnlock {
    /// True when the lock was held and is now free.
    pub released: bool,
}

/// How routes and metrics name a lock kind: (route prefix, metrics label).
fn naming(kind: LockKind) -> (&'static str, &'static str) {
    match kind {
        LockKind::Plain => ("/locks", "lock"),
        LockKind::Fair { .. } => ("/fair-locks", "fair_lock"),
    }
}

/// What the blocking acquire of one named object asks of its primitive: a
/// lock of either kind, a read or a write hold of a rwlock, permits of a
/// semaphore. The rest of such an acquire ([`OneAcquisition`]: the queue
/// ticket, the wait left, sessions) is the same for all of them.
pub trait Object: Clone + Send + Sync + 'static {
    type Grant: Send + 'static;

    /// The metrics label (see [`Acquisition::primitive`]).
    fn primitive(&self) -> &'static str;

    /// The routes' prefix (`/locks`, ...), for a hold's `Location`.
    fn resource(&self) -> &'static str;

    /// The kind of hold a grant makes (for a session's holds).
    fn hold_kind(&self) -> HoldKind;

    /// The pub/sub channel that announces "maybe grantable now".
    fn channel(&self, key: &str) -> String;

    /// How its waiters wait.
    fn mode(&self) -> WaitMode;

    /// One try for `holder`, recording `owner`, under `attempt`.
    fn attempt(
        &self,
        key: &str,
        holder_owner: (&str, &str),
        lease_wait: (u64, Wait),
        attempt: &AttemptId,
        session: Option<SessionTerm<'_>>,
    ) -> impl Future<Output = Result<Attempt<Self::Grant>, StoreError>> + Send;

    /// Gives back what `attempt` granted; `wait` is the request's long-poll's
    /// while it keeps a place ([`Ticket::kept`]: its place is given back).
    fn undo(
        &self,
        key: &str,
        holder: &str,
        attempt: &AttemptId,
        wait: Wait,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The request stopped waiting: its place goes.
    fn leave(&self, key: &str, holder: &str)
    -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The "not acquired" problem.
    fn blocked(&self, blocked: Blocked) -> ApiError;

    /// The data of an SSE `waiting` event.
    fn waiting(&self, blocked: Blocked) -> Value {
        waiting_data(blocked)
    }

    /// The grant's body.
    fn grant_body<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        grant: &'a Self::Grant,
    ) -> impl Serialize + 'a;
}

impl Object for Locks {
    type Grant = LockGrant;

    fn primitive(&self) -> &'static str {
        naming(self.kind()).1
    }

    fn resource(&self) -> &'static str {
        naming(self.kind()).0
    }

    fn hold_kind(&self) -> HoldKind {
        match self.kind() {
            LockKind::Plain => HoldKind::Lock,
            LockKind::Fair { .. } => HoldKind::FairLock,
        }
    }

    fn channel(&self, key: &str) -> String {
        self.wake_channel(key)
    }

    fn mode(&self) -> WaitMode {
        match self.kind() {
            LockKind::Plain => WaitMode::Relay,
            LockKind::Fair { .. } => WaitMode::Queue,
        }
    }

    async fn attempt(
        &self,
        key: &str,
        (holder, owner): (&str, &str),
        (lease_ms, wait): (u64, Wait),
        attempt: &AttemptId,
        session: Option<SessionTerm<'_>>,
    ) -> Result<Attempt<LockGrant>, StoreError> {
        self.try_acquire_in(key, holder, lease_ms, wait, attempt, session, owner)
            .await
    }

    /// A fair waiter keeps its place while its long-poll does.
    async fn undo(
        &self,
        key: &str,
        holder: &str,
        attempt: &AttemptId,
        wait: Wait,
    ) -> Result<bool, StoreError> {
        self.undo_waiting(key, holder, attempt, wait).await
    }

    async fn leave(&self, key: &str, holder: &str) -> Result<(), StoreError> {
        Locks::leave(self, key, holder).await
    }

    fn blocked(&self, blocked: Blocked) -> ApiError {
        lock_held(blocked)
    }

    fn grant_body<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        grant: &'a LockGrant,
    ) -> impl Serialize + 'a {
        Grant::new(name, holder, grant)
    }
}

/// One blocking acquire of one named object (see [`Object`]).
#[derive(Clone)]
pub struct OneAcquisition<O: Object> {
    object: O,
    name: ScopedName,
    holder: String,
    /// The hold's owner label ('' for none; in a session, none takes the
    /// session's).
    owner: String,
    lease_ms: u64,
    /// When the request stops waiting (a queued waiter's place lasts
    /// until then plus the grace); `None` for a try, which takes no place.
    deadline: Option<Instant>,
    /// The ticket of the request's place in the queue, once it has one.
    ticket: Ticket,
}

impl<O: Object> OneAcquisition<O> {
    /// One try, in `session` or none.
    async fn try_in(
        &self,
        attempt: &AttemptId,
        lease_ms: u64,
        session: Option<SessionTerm<'_>>,
    ) -> Result<Attempt<O::Grant>, StoreError> {
        let left = Checked::wait_left_ms(self.deadline);
        let owner = SessionTerm::owner_of(&self.owner, session);
        self.ticket
            .tried(left, |wait| {
                let holder_owner = (self.holder.as_str(), owner.as_ref());
                let key = &self.name.key;
                (self.object).attempt(key, holder_owner, (lease_ms, wait), attempt, session)
            })
            .await
    }
}

impl<O: Object> Acquisition for OneAcquisition<O> {
    type Grant = O::Grant;

    fn primitive(&self) -> &'static str {
        self.object.primitive()
    }

    fn channel(&self) -> String {
        self.object.channel(&self.name.key)
    }

    fn mode(&self) -> WaitMode {
        self.object.mode()
    }

    async fn attempt(&self, attempt: &AttemptId) -> Result<Attempt<O::Grant>, StoreError> {
        self.try_in(attempt, self.lease_ms, None).await
    }

    /// A queued waiter keeps its place while its long-poll does: while it
    /// waits, and for the grace after (see [`Ticket::kept`]).
    async fn undo(&self, attempt: &AttemptId) -> Result<bool, StoreError> {
        let wait = self.ticket.kept(self.deadline);
        (self.object)
            .undo(&self.name.key, &self.holder, attempt, wait)
            .await
    }

    async fn leave(&self) -> Result<(), StoreError> {
        self.object.leave(&self.name.key, &self.holder).await
    }

    /// A plain lock (the only object of this family that relays): the
    /// lease asked and the owner label given. An empty label is none.
    fn granted_blocks(&self) -> Option<Blocked> {
        (self.mode() == WaitMode::Relay).then(|| Blocked {
            retry_after_ms: self.lease_ms,
            held_by: vec![(!self.owner.is_empty()).then(|| self.owner.clone())],
            ..Blocked::default()
        })
    }

    fn blocked(&self, blocked: Blocked) -> ApiError {
        self.object.blocked(blocked)
    }

    fn waiting(&self, blocked: Blocked) -> Value {
        self.object.waiting(blocked)
    }

    fn grant_body<'a>(&'a self, grant: &'a O::Grant) -> impl Serialize + 'a {
        (self.object).grant_body(&self.name.name, &self.holder, grant)
    }

    fn location(&self) -> Option<String> {
        Some(format!(
            "{}/{}/holders/{}",
            self.object.resource(),
            self.name.name,
            self.holder
        ))
    }
}

impl<O: Object> Held for OneAcquisition<O> {
    fn holds(&self) -> Vec<Hold> {
        vec![Hold {
            kind: self.object.hold_kind(),
            name: self.name.key.clone(),
            holder: self.holder.clone(),
        }]
    }

    async fn attempt_in(
        &self,
        attempt: &AttemptId,
        lease_ms: u64,
        session: SessionTerm<'_>,
    ) -> Result<Attempt<O::Grant>, StoreError> {
        self.try_in(attempt, lease_ms, Some(session)).await
    }
}

/// `POST …/{name}/acquire` (and a rwlock's `read/acquire` and
/// `write/acquire`, a semaphore's `acquire`): the request checked, then
/// answered by long-poll, stream or try, in a session where it names one.
pub async fn acquire<O: Object>(
    state: &AppState,
    object: O,
    name: ScopedName,
    headers: HeaderMap,
    body: AcquireRequest,
) -> Result<Response, ApiError> {
    let checked = Checked::new(state, name, body).await?;
    let timing = checked.timing();
    let acquisition = OneAcquisition {
        object,
        deadline: checked.deadline(),
        ticket: Ticket::default(),
        name: checked.name,
        holder: checked.holder,
        owner: checked.owner,
        lease_ms: checked.lease_ms,
    };
    sessions::respond(state, headers, timing, checked.session, acquisition).await
}

/// What a lock-like resource answers to the operations on holds and on
/// the object: the handlers below are generic over it, and
/// `hold_routes!` gives each resource these four routes.
pub trait HoldApi: Sync {
    /// The 200 body of a heartbeat.
    type Renewed: Serialize;
    /// The query of a release.
    type ReleaseQuery: Send;
    /// The 200 body of a release.
    type Released: Serialize;
    /// The 200 body of a state read.
    type Status: Serialize;
    /// The 200 body of removing the object's holds (force unlock, delete).
    type Removed: Serialize;

    /// The detail of a 404 `not-held`.
    const NOT_HELD: &'static str = problems::NOT_HELD;

    /// The detail of a release's 404 `not-held` (where waiters queue, the
    /// holder neither holds nor waits).
    fn not_held_or_waiting(&self) -> &'static str {
        Self::NOT_HELD
    }

    /// The pub/sub channel its waiters wait on (to count them).
    fn wake_channel(&self, name: &str) -> String;

    fn renew(
        &self,
        name: &ScopedName,
        holder: &str,
        lease_ms: Option<u64>,
    ) -> impl Future<Output = Result<Option<Self::Renewed>, StoreError>> + Send;

    /// A holder's `DELETE`: a release or, where waiters queue, a waiter
    /// leaving the queue (leaving comes first). `None` when the holder
    /// neither holds nor waits.
    fn let_go(
        &self,
        name: &ScopedName,
        holder: &str,
        query: Self::ReleaseQuery,
    ) -> impl Future<Output = Result<Option<Self::Released>, StoreError>> + Send;

    /// The state, with `waiters` waiting on this instance.
    fn status(
        &self,
        name: ScopedName,
        waiters: u64,
    ) -> impl Future<Output = Result<Self::Status, ApiError>> + Send;

    /// Removes every hold (and whatever else the object has).
    fn unlock(&self, name: &str) -> impl Future<Output = Result<Self::Removed, StoreError>> + Send;
}

impl HoldApi for Locks {
    type Renewed = Grant;
    type ReleaseQuery = ReleaseQuery;
    type Released = Release;
    type Status = LockStatus;
    type Removed = ForceUnlock;

    fn wake_channel(&self, name: &str) -> String {
        Locks::wake_channel(self, name)
    }

    async fn renew(
        &self,
        name: &ScopedName,
        holder: &str,
        lease_ms: Option<u64>,
    ) -> Result<Option<Grant>, StoreError> {
        let renewed = self.heartbeat(&name.key, holder, lease_ms).await?;
        Ok(renewed.map(|g| Grant::new(&name.name, holder, &g)))
    }

    async fn let_go(
        &self,
        name: &ScopedName,
        holder: &str,
        query: ReleaseQuery,
    ) -> Result<Option<Release>, StoreError> {
        let released = self
            .leave_or_release(&name.key, holder, query.all.unwrap_or(false))
            .await?;
        let queued = matches!(self.kind(), LockKind::Fair { .. });
        Ok(released.map(|r| Release {
            released: r.released,
            hold_count: r.hold_count,
            left_queue: queued.then_some(r.left_queue),
        }))
    }

    fn not_held_or_waiting(&self) -> &'static str {
        match self.kind() {
            LockKind::Plain => Self::NOT_HELD,
            LockKind::Fair { .. } => {
                "this holder neither holds the lock nor waits in its queue (released, expired, \
                 never acquired, or its place lapsed)"
            }
        }
    }

    async fn status(&self, name: ScopedName, waiters: u64) -> Result<LockStatus, ApiError> {
        let s = self.state(&name.key).await?;
        Ok(LockStatus {
            name: name.name,
            locked: s.locked,
            hold_count: s.hold_count,
            ttl_ms: s.ttl_ms,
            fencing_token: s.fencing_token,
            waiters,
            holds: HoldView::all(s.holds, Counted::HoldCount),
            queued: s.queued,
        })
    }

    async fn unlock(&self, name: &str) -> Result<ForceUnlock, StoreError> {
        let released = self.force_unlock(name).await?;
        Ok(ForceUnlock { released })
    }
}

/// `POST …/{name}/holders/{holder}/heartbeat`.
pub async fn heartbeat<H: HoldApi>(
    state: &AppState,
    holds: &H,
    scope: Scope,
    path: HolderPath,
    body: HeartbeatRequest,
) -> Result<Json<H::Renewed>, ApiError> {
    let (name, holder) = path.scoped(&scope)?;
    let lease = renewal_lease(state, body.lease_ms)?;
    match holds.renew(&name, &holder, lease).await? {
        Some(renewed) => Ok(Json(renewed)),
        None => Err(ApiError::not_held(H::NOT_HELD)),
    }
}

/// `DELETE …/{name}/holders/{holder}`.
pub async fn release<H: HoldApi>(
    holds: &H,
    scope: Scope,
    path: HolderPath,
    query: H::ReleaseQuery,
) -> Result<Json<H::Released>, ApiError> {
    let (name, holder) = path.scoped(&scope)?;
    match holds.let_go(&name, &holder, query).await? {
        Some(released) => Ok(Json(released)),
        None => Err(ApiError::not_held(holds.not_held_or_waiting())),
    }
}

/// `GET …/{name}`.
pub async fn state<H: HoldApi>(
    state: &AppState,
    holds: &H,
    scope: Scope,
    name: String,
) -> Result<Json<H::Status>, ApiError> {
    let name = scope.name(name)?;
    let waiters = state.engine.waiters_on(&holds.wake_channel(&name.key));
    Ok(Json(holds.status(name, waiters).await?))
}

/// `DELETE …/{name}`.
pub async fn force_unlock<H: HoldApi>(
    holds: &H,
    scope: Scope,
    name: String,
) -> Result<Json<H::Removed>, ApiError> {
    let name = scope.name(name)?;
    Ok(Json(holds.unlock(&name.key).await?))
}

/// The five routes of one lock kind: its acquire, and `hold_routes!`
/// for the rest. Arguments: the `AppState` field of the kind, the tag, the
/// four paths, what a 409 means for it, and an SSE example.
macro_rules! lock_routes {
    (
        field: $field:ident,
        resource: $resource:literal,
        tag: $tag:tt,
        acquire: $acquire:tt,
        heartbeat: $heartbeat:tt,
        holder: $holder:tt,
        object: $object:tt,
        conflict: $conflict:tt,
        conflict_example: $conflict_example:ident,
        release: [$($release:literal),+ $(,)?],
        stream_example: $stream:tt $(,)?
    ) => {
        use axum::http::HeaderMap;
        use axum::response::Response;

        use $crate::http::lock_family::{
            AcquireRequest, ForceUnlock, Grant, LockStatus, Release, ReleaseQuery,
        };
        use $crate::http::responses::{AcquireErrors, NoSessionErrors, examples};

        /// Acquire (or re-enter as its holder).
        ///
        /// Long-polls up to `wait_ms`. With `Accept: text/event-stream` the
        /// answer is a stream: `waiting` events, then one `acquired`,
        /// `timeout` or `error`.
        #[utoipa::path(
            post,
            path = $acquire,
            operation_id = concat!("acquire_", $resource),
            tag = $tag,
            params(NamePath),
            request_body(content = Option<AcquireRequest>, content_type = "application/json"),
            responses(
                (status = 201, description = "Acquired (or re-entered). `Location` is the hold's URL. \
                    The `text/event-stream` variant is what a request with `Accept: text/event-stream` \
                    gets, with HTTP status 200: `event: waiting` (data: `retry_after_ms`, and \
                    `position` where waiters queue fairly; at least every 15 s and on every change), \
                    then exactly one of `event: acquired` (data: the Grant), `event: timeout` \
                    (data: the 409 problem) or `event: error` (data: a problem).",
                    content(
                        (Grant = "application/json"),
                        (String = "text/event-stream", example = $stream),
                    ),
                    headers(("Location" = String, description = "…/{name}/holders/{holder}"))),
                (status = 409, description = concat!($conflict, " Or the holder holds this lock in another \
                    session, or without one while this request names one (or the reverse): \
                    `session-mismatch`, nothing changed."), body = Problem, content_type = "application/problem+json",
                    examples(("lock-held" = (value = json!(examples::$conflict_example()))), ("session-mismatch" = (value = json!(examples::session_mismatch()))))),
                NoSessionErrors,
                AcquireErrors,
            )
        )]
        pub async fn acquire(
            State(state): State<AppState>,
            scope: Scope,
            ApiPath(path): ApiPath<NamePath>,
            headers: HeaderMap,
            ApiJson(body): ApiJson<AcquireRequest>,
        ) -> Result<Response, ApiError> {
            let name = scope.name(path.name)?;
            family::acquire(&state, state.$field.clone(), name, headers, body).await
        }

        $crate::http::lock_family::hold_routes! {
            field: $field,
            resource: $resource,
            tag: $tag,
            heartbeat: $heartbeat,
            holder: $holder,
            object: $object,
            renewed: Grant,
            query: ReleaseQuery,
            release: [$($release),+],
            released: Release,
            status: LockStatus,
            status_errors: NameErrors,
            removed: ForceUnlock,
            remove: "Force unlock: remove every hold, whoever holds it, and wake waiters.",
            remove_action: "force_unlock_",
            removed_description: "Unlocked (`released` is false if it was free)",
        }
    };
}
pub(crate) use lock_routes;

/// Heartbeat, release, state and force unlock of a resource whose
/// `AppState` field implements [`HoldApi`], each a thin handler over the
/// generic ones above with its OpenAPI operation (utoipa needs literal
/// paths and concrete types).
macro_rules! hold_routes {
    (
        field: $field:ident,
        resource: $resource:literal,
        tag: $tag:tt,
        heartbeat: $heartbeat:tt,
        holder: $holder:tt,
        object: $object:tt,
        renewed: $renewed:ty,
        query: $query:ty,
        release: [$($release:literal),+ $(,)?],
        released: $released:ty,
        status: $status:ty,
        status_errors: $status_errors:ty,
        removed: $removed:ty,
        remove: $remove:literal,
        remove_action: $remove_action:literal,
        removed_description: $removed_description:literal $(,)?
    ) => {
        use axum::Json;
        use axum::extract::State;

        use $crate::error::{ApiError, Problem};
        use $crate::http::access::{Admin, Scope};
        use $crate::http::extract::{ApiJson, ApiPath, ApiQuery};
        use $crate::http::lock_family::{self as family, HeartbeatRequest, HolderPath, NamePath};
        use $crate::http::responses::{HoldErrors, NameErrors, RenewErrors};
        use $crate::state::AppState;

        /// Renew the holder's leases (every hold it has on the object).
        #[utoipa::path(
            post,
            path = $heartbeat,
            operation_id = concat!("heartbeat_", $resource),
            tag = $tag,
            params(HolderPath),
            request_body(content = Option<HeartbeatRequest>, content_type = "application/json"),
            responses(
                (status = 200, description = "Renewed", body = $renewed),
                RenewErrors,
            )
        )]
        pub async fn heartbeat(
            State(state): State<AppState>,
            scope: Scope,
            ApiPath(path): ApiPath<HolderPath>,
            ApiJson(body): ApiJson<HeartbeatRequest>,
        ) -> Result<Json<$renewed>, ApiError> {
            family::heartbeat(&state, &state.$field, scope, path, body).await
        }

        $(#[doc = $release])+
        #[utoipa::path(
            delete,
            path = $holder,
            operation_id = concat!("release_", $resource),
            tag = $tag,
            params(HolderPath, $query),
            responses(
                (status = 200, description = "Released", body = $released),
                HoldErrors,
            )
        )]
        pub async fn release(
            State(state): State<AppState>,
            scope: Scope,
            ApiPath(path): ApiPath<HolderPath>,
            ApiQuery(query): ApiQuery<$query>,
        ) -> Result<Json<$released>, ApiError> {
            family::release(&state.$field, scope, path, query).await
        }

        /// Read the state. Never reveals a holder id.
        #[utoipa::path(
            get,
            path = $object,
            operation_id = concat!("get_", $resource),
            tag = $tag,
            params(NamePath),
            responses(
                (status = 200, description = "The state", body = $status),
                $status_errors,
            )
        )]
        pub async fn state(
            State(state): State<AppState>,
            scope: Scope,
            ApiPath(path): ApiPath<NamePath>,
        ) -> Result<Json<$status>, ApiError> {
            family::state(&state, &state.$field, scope, path.name).await
        }

        #[doc = $remove]
        #[utoipa::path(
            delete,
            path = $object,
            operation_id = concat!($remove_action, $resource),
            tag = $tag,
            params(NamePath),
            responses(
                (status = 200, description = $removed_description, body = $removed),
                NameErrors,
            )
        )]
        pub async fn force_unlock(
            State(state): State<AppState>,
            Admin(scope): Admin,
            ApiPath(path): ApiPath<NamePath>,
        ) -> Result<Json<$removed>, ApiError> {
            family::force_unlock(&state.$field, scope, path.name).await
        }
    };
}
pub(crate) use hold_routes;
