//! `/sessions/...`: sessions (Consul sessions, etcd leases) that holds of
//! every primitive attach to (the book's "Sessions" (docs/src/sessions.md)),
//! and what an acquire in a session adds to any primitive's acquire:
//! [`respond`] wraps its [`Acquisition`] in [`InSession`], whose try takes
//! the hold in the session and attaches it to the session before the grant is
//! answered.
//!
//! A session id is a capability like a holder id: server-made (128 random
//! bits), shown only to the request that created it, never logged (routes
//! are logged by template) and never in metrics.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

use crate::coord::sessions::{Hold, Renewed, Sessions};
use crate::coord::{Attempt, AttemptId, Blocked, Refusal, SessionTerm};
use crate::error::ApiError;
use crate::http::access::{Scope, ScopedName};
use crate::http::extract::{
    ApiJson, ApiPath, Millis, Owner, check_session, check_session_in_path, new_holder, ttl_from,
};
use crate::http::longpoll::{self, Acquisition, NotGranted, Timing, Vocabulary};
use crate::http::problems::NO_SUCH_SESSION;
use crate::http::responses::{SessionCreateErrors, SessionErrors, SessionRenewErrors};
use crate::state::AppState;
use crate::store::StoreError;
use crate::wait::WaitMode;

pub const TAG: &str = "sessions";

/// A session id in the path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SessionPath {
    /// The session id from `POST /sessions` (a capability: keep it secret).
    #[param(
        example = "7d3c0e1f9a2b4c5d8e6f0a1b2c3d4e5f",
        pattern = "^[A-Za-z0-9._~:-]{1,128}$"
    )]
    pub id: String,
}

impl SessionPath {
    /// Checks the id and scopes it to the request's namespace.
    fn scoped(self, scope: &Scope) -> Result<ScopedName, ApiError> {
        check_session_in_path(&self.id)?;
        scope.name(self.id)
    }
}

/// Body of a creation or heartbeat; may be omitted.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"ttl_ms": 30000}))]
pub struct SessionRequest {
    /// The session's TTL in ms: its holds end with it when no heartbeat
    /// renews it in time. Default and range are those of `lease_ms`
    /// (configuration: default_lease_ms, min_lease_ms/max_lease_ms); each
    /// server shows its own. A heartbeat without it renews for the TTL the
    /// session has.
    #[schema(value_type = Option<u64>, minimum = 500, maximum = 86400000, example = 30000)]
    pub ttl_ms: Option<Millis>,
}

/// Body of a creation; may be omitted.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"ttl_ms": 30000, "owner": "web-7 pid 4242"}))]
pub struct SessionCreateRequest {
    /// The session's TTL in ms: its holds end with it when no heartbeat
    /// renews it in time. Default and range are those of `lease_ms`
    /// (configuration: default_lease_ms, min_lease_ms/max_lease_ms); each
    /// server shows its own.
    #[schema(value_type = Option<u64>, minimum = 500, maximum = 86400000, example = 30000)]
    pub ttl_ms: Option<Millis>,
    /// Who holds, in words: shown by `GET /sessions/{id}`, and the owner
    /// label of every hold taken in the session by an acquire that sends
    /// no `owner` of its own. Not a secret.
    pub owner: Option<Owner>,
}

/// A session created or renewed.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "session": "7d3c0e1f9a2b4c5d8e6f0a1b2c3d4e5f", "ttl_ms": 30000, "heartbeat_interval_ms": 10000,
    "holds": 5
}))]
pub struct SessionGrant {
    /// The session id: a capability to acquire in the session, renew it
    /// and end it. Only ever shown to the request that created it.
    pub session: String,
    pub ttl_ms: u64,
    /// How often to send a heartbeat (ttl_ms / 3).
    pub heartbeat_interval_ms: u64,
    /// The holds attached and renewed (0 at creation; a multi-lock counts
    /// one per lock). Holds released by their holders (or taken again
    /// outside the session) are no longer counted; a client that counts
    /// its holds sees here whether one was lost (after a heartbeat that
    /// failed, for instance).
    pub holds: u64,
}

impl SessionGrant {
    fn new(session: String, renewed: Renewed) -> Self {
        SessionGrant {
            session,
            ttl_ms: renewed.ttl_ms,
            heartbeat_interval_ms: renewed.ttl_ms / 3,
            holds: renewed.holds,
        }
    }
}

/// A session's state (never its holds' names or holder ids).
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "session": "7d3c0e1f9a2b4c5d8e6f0a1b2c3d4e5f", "ttl_ms": 30000, "expires_in_ms": 24500, "holds": 5,
    "owner": "web-7 pid 4242"
}))]
pub struct SessionStatus {
    pub session: String,
    pub ttl_ms: u64,
    /// The owner label it was created with; null when none.
    #[schema(required = true)]
    pub owner: Option<String>,
    /// When the session (and every hold attached to it) ends without a
    /// heartbeat, in ms.
    pub expires_in_ms: u64,
    /// Holds attached (a multi-lock counts one per lock). A hold released
    /// by its holder directly counts until the session's next heartbeat.
    pub holds: u64,
}

/// The answer to ending a session.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"released": 5}))]
pub struct SessionReleased {
    /// Holds released (each with all its reentrant holds; a multi-lock
    /// counts one per lock); holds already released or expired, or taken
    /// again outside the session, are not counted (nor released).
    pub released: u64,
}

/// The session named in an acquire's body, checked and scoped to the
/// namespace of the object acquired.
pub fn scoped(name: &ScopedName, id: String) -> Result<ScopedName, ApiError> {
    check_session(&id)?;
    Ok(name.sibling(id))
}

/// An acquire's [`Acquisition`] that can also take its hold in a session,
/// and knows the holds its grant makes, so that they can be attached to
/// the session.
pub trait Held: Acquisition {
    /// The holds a grant of this request makes (a multi-lock: one per lock).
    fn holds(&self) -> Vec<Hold>;

    /// One try, as [`Acquisition::attempt`], in `session`: with
    /// `lease_ms` (the session's remaining TTL; the hold's script counts
    /// its lease to the session's end, `session.end_ms`), recording
    /// the session (at the version that TTL comes from) in the hold.
    fn attempt_in(
        &self,
        attempt: &AttemptId,
        lease_ms: u64,
        session: SessionTerm<'_>,
    ) -> impl Future<Output = Result<Attempt<Self::Grant>, StoreError>> + Send;
}

/// Answers an acquire (`longpoll::respond`), in `session` when it names one.
pub async fn respond<A: Held>(
    state: &AppState,
    headers: HeaderMap,
    timing: Timing,
    session: Option<ScopedName>,
    acquisition: A,
) -> Result<Response, ApiError> {
    match session {
        None => longpoll::respond(state, headers, timing, acquisition).await,
        Some(session) => {
            let in_session = InSession {
                inner: acquisition,
                sessions: state.sessions.clone(),
                session,
            };
            longpoll::respond(state, headers, timing, in_session).await
        }
    }
}

/// An acquire in a session: each try reads the session's remaining TTL,
/// end and version (`Sessions::terms`, 404 when there is no such session),
/// takes the hold in the session with that TTL as its lease, then attaches
/// it to the session (see `Sessions::attach`). A session that ended
/// meanwhile gets the grant given back and the request refused (404). All
/// of it is one try, bounded by the request's deadline as every try is.
#[derive(Clone)]
pub struct InSession<A> {
    inner: A,
    sessions: Sessions,
    session: ScopedName,
}

impl<A: Held> InSession<A> {
    /// Gives back what `attempt` granted, now, or in the background when
    /// Redis does not answer.
    async fn give_back(&self, attempt: &AttemptId) {
        if self.inner.undo(attempt).await.is_err() {
            longpoll::give_back(self.inner.clone(), attempt.clone());
        }
    }

    /// Reads the session's end and version, takes the hold in the session
    /// until that end, and attaches it.
    async fn try_in_session(
        &self,
        attempt: &AttemptId,
    ) -> Result<Attempt<(A::Grant, u64)>, StoreError> {
        let id = self.session.key.as_str();
        let Some(terms) = self.sessions.terms(id).await? else {
            return Ok(Attempt::Refused(Refusal::NoSession));
        };
        let term = SessionTerm {
            id,
            version: terms.version,
            end_ms: terms.end_ms,
            owner: terms.owner.as_deref(),
        };
        let lease = terms.remaining_ms.max(1);
        let grant = match self.inner.attempt_in(attempt, lease, term).await? {
            Attempt::Granted(grant) => grant,
            Attempt::Blocked(blocked) => return Ok(Attempt::Blocked(blocked)),
            Attempt::Refused(refusal) => return Ok(Attempt::Refused(refusal)),
        };
        let holds = self.inner.holds();
        match self.sessions.attach(id, &holds, terms.version).await {
            Ok(Some(left_ms)) => Ok(Attempt::Granted((grant, left_ms))),
            Ok(None) => {
                self.give_back(attempt).await;
                Ok(Attempt::Refused(Refusal::NoSession))
            }
            Err(e) => {
                self.give_back(attempt).await;
                Err(e)
            }
        }
    }
}

impl<A: Held> Acquisition for InSession<A> {
    /// The inner grant, and when its holds now expire (with the session).
    type Grant = (A::Grant, u64);

    fn primitive(&self) -> &'static str {
        self.inner.primitive()
    }

    fn channel(&self) -> String {
        self.inner.channel()
    }

    fn channels(&self) -> Vec<String> {
        self.inner.channels()
    }

    fn mode(&self) -> WaitMode {
        self.inner.mode()
    }

    /// The try in the session: a few Redis calls, bounded as a whole by
    /// what one call may take (as a try without a session is), whatever
    /// the request's deadline; a try cut short is given back.
    async fn attempt(&self, attempt: &AttemptId) -> Result<Attempt<Self::Grant>, StoreError> {
        (self.sessions)
            .within_response_timeout(self.try_in_session(attempt))
            .await
    }

    async fn undo(&self, attempt: &AttemptId) -> Result<bool, StoreError> {
        self.inner.undo(attempt).await
    }

    async fn leave(&self) -> Result<(), StoreError> {
        self.inner.leave().await
    }

    fn blocked(&self, blocked: Blocked) -> ApiError {
        self.inner.blocked(blocked)
    }

    fn not_granted(&self, blocked: Blocked) -> NotGranted {
        self.inner.not_granted(blocked)
    }

    fn vocabulary(&self) -> &'static Vocabulary {
        self.inner.vocabulary()
    }

    fn waiting(&self, blocked: Blocked) -> Value {
        self.inner.waiting(blocked)
    }

    /// The inner grant, with what the hold really has left (it ends with
    /// the session) as its lease.
    fn grant_body<'a>(&'a self, grant: &'a Self::Grant) -> impl Serialize + 'a {
        self.grant_json(grant)
    }

    fn grant_json(&self, (grant, left_ms): &Self::Grant) -> Value {
        let mut json = self.inner.grant_json(grant);
        json["lease_ms"] = json!(left_ms);
        json["expires_in_ms"] = json!(left_ms);
        json["heartbeat_interval_ms"] = json!(left_ms / 3);
        if let Some(validity) = json["validity_ms"].as_u64() {
            json["validity_ms"] = json!(validity.min(*left_ms));
        }
        json
    }

    fn location(&self) -> Option<String> {
        self.inner.location()
    }
}

/// Create a session.
///
/// Acquire in it by naming it as `session` (in place of `lease_ms`) in the
/// body of any acquire: the hold then lives as long as the session. One
/// heartbeat of the session renews every hold attached to it; when it
/// expires or is deleted, every hold is released and its waiters woken. A
/// session renews and releases only the holds acquired in it: a holder id
/// may hold an object in a session or outside it, not both at once (409
/// `session-mismatch`).
#[utoipa::path(
    post,
    path = "/sessions",
    operation_id = "create_session",
    tag = TAG,
    request_body(content = Option<SessionCreateRequest>, content_type = "application/json"),
    responses(
        (status = 201, description = "Created. `Location` is the session's URL.", body = SessionGrant,
            headers(("Location" = String, description = "/sessions/{id}"))),
        SessionCreateErrors,
    )
)]
pub async fn create(
    State(state): State<AppState>,
    scope: Scope,
    ApiJson(body): ApiJson<SessionCreateRequest>,
) -> Result<Response, ApiError> {
    let ttl_ms = ttl_from(&state, body.ttl_ms)?;
    let owner = Owner::arg(body.owner.as_ref());
    loop {
        // The same 128 random bits as a generated holder id.
        let session = scope.name(new_holder())?;
        if state.sessions.create(&session.key, ttl_ms, &owner).await? {
            let location = format!("/sessions/{}", session.name);
            let created = Renewed { ttl_ms, holds: 0 };
            let grant = json!(SessionGrant::new(session.name, created));
            return Ok(longpoll::created(&location, grant));
        }
    }
}

/// Renew the session and every hold attached to it.
///
/// The session's TTL becomes `ttl_ms` when given; every attached hold's
/// lease becomes the session's TTL (a shorter one wakes the holds'
/// waiters). Holds released or expired meanwhile, or taken again without
/// the session, are forgotten: `holds` counts the ones renewed. A 503 (or
/// no answer) means some hold may not have been renewed although the
/// session was: send the heartbeat again at once.
#[utoipa::path(
    post,
    path = "/sessions/{id}/heartbeat",
    operation_id = "heartbeat_session",
    tag = TAG,
    params(SessionPath),
    request_body(content = Option<SessionRequest>, content_type = "application/json"),
    responses(
        (status = 200, description = "Renewed, with every hold attached to it", body = SessionGrant),
        SessionRenewErrors,
    )
)]
pub async fn heartbeat(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<SessionPath>,
    ApiJson(body): ApiJson<SessionRequest>,
) -> Result<Json<SessionGrant>, ApiError> {
    let session = path.scoped(&scope)?;
    let ttl = body.ttl_ms.map(|t| ttl_from(&state, Some(t))).transpose()?;
    let sessions = &state.sessions;
    let heartbeat = sessions.heartbeat(&session.key, ttl);
    match sessions.within_response_timeout(heartbeat).await? {
        Some(renewed) => Ok(Json(SessionGrant::new(session.name, renewed))),
        None => Err(ApiError::not_held(NO_SUCH_SESSION)),
    }
}

/// Read a session's state. Never reveals its holds' names or holder ids.
#[utoipa::path(
    get,
    path = "/sessions/{id}",
    operation_id = "get_session",
    tag = TAG,
    params(SessionPath),
    responses(
        (status = 200, description = "The state", body = SessionStatus),
        SessionErrors,
    )
)]
pub async fn state(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<SessionPath>,
) -> Result<Json<SessionStatus>, ApiError> {
    let session = path.scoped(&scope)?;
    match state.sessions.state(&session.key).await? {
        Some(s) => Ok(Json(SessionStatus {
            session: session.name,
            ttl_ms: s.ttl_ms,
            owner: s.owner,
            expires_in_ms: s.expires_in_ms,
            holds: s.holds,
        })),
        None => Err(ApiError::not_found(NO_SUCH_SESSION)),
    }
}

/// End the session: release every hold attached to it and wake their
/// waiters.
///
/// Each hold is released with all its reentrant holds. A 503 leaves the
/// session (and what it still holds) in place: send the DELETE again.
#[utoipa::path(
    delete,
    path = "/sessions/{id}",
    operation_id = "delete_session",
    tag = TAG,
    params(SessionPath),
    responses(
        (status = 200, description = "Ended; `released` counts the holds released", body = SessionReleased),
        SessionErrors,
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<SessionPath>,
) -> Result<Json<SessionReleased>, ApiError> {
    let session = path.scoped(&scope)?;
    let sessions = &state.sessions;
    match (sessions.within_response_timeout(sessions.delete(&session.key))).await? {
        Some(released) => Ok(Json(SessionReleased { released })),
        None => Err(ApiError::not_found(NO_SUCH_SESSION)),
    }
}
