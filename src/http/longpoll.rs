//! The long-poll/SSE adapter: turns the wait engine's outcome into an HTTP
//! answer — a long-poll response, or a Server-Sent Events stream (the
//! book's "Locks" (docs/src/locks.md) shows both; the book's "What the
//! guarantees are (and are not)" (docs/src/guarantees.md) says what
//! happens to give-backs and deadlines).
//!
//! Every blocking acquire route describes itself as an [`Acquisition`] and
//! calls [`respond`]. So does a latch's wait: an acquisition whose grant is
//! the latch opening, whose "not granted" answer is a 200 state rather
//! than a problem ([`NotGranted`]) and whose SSE events have their own
//! names ([`Vocabulary`]); the defaults are the lock family's. The first
//! try happens before any response is committed, so bad input, a full
//! instance (429) or an unreachable Redis (503) get real status codes even
//! for SSE; only what happens after the stream opened is reported as an
//! `error` event.
//!
//! Give-backs: every try carries a fresh [`AttemptId`]. When a try's
//! outcome is unknown (its client left while it ran, its reply was lost,
//! or replicas did not acknowledge it) or its grant cannot be delivered
//! (the SSE client is gone), the adapter undoes exactly that attempt in the
//! background, retrying for a bounded time — never another hold of the
//! same holder id. What it undoes is decided once, when the give-back
//! starts ([`Acquisition::undoing`]): the request's state may change while
//! it retries (a rate limiter's waiter admitted meanwhile), its target
//! does not.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use axum::Json;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::future::BoxFuture;
use futures_util::stream;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::coord::{Attempt, AttemptId, Blocked};
use crate::error::ApiError;
use crate::http::extract::wants_sse;
use crate::metrics::Metrics;
use crate::state::AppState;
use crate::store::StoreError;
use crate::wait::{Outcome, WaitError, WaitMode, Waiter};

/// How long the background give-back of one attempt keeps retrying.
const GIVE_BACK_FOR: Duration = Duration::from_secs(30);

/// The SSE event names and the metrics outcome of a kind of wait.
#[derive(Debug)]
pub struct Vocabulary {
    /// The event sent first when not granted at once, then on every change.
    pub waiting: &'static str,
    /// The final event of a grant.
    pub granted: &'static str,
    /// The final event when the wait ends without a grant.
    pub timeout: &'static str,
    /// The metrics outcome of a grant.
    pub granted_outcome: &'static str,
}

/// Acquires: `waiting`, then `acquired` or `timeout`.
pub const ACQUIRE: Vocabulary = Vocabulary {
    waiting: "waiting",
    granted: "acquired",
    timeout: "timeout",
    granted_outcome: "acquired",
};

/// What a request that was not granted answers.
pub enum NotGranted {
    /// An error (e.g. 409 `lock-held`); SSE: the `timeout` event's data.
    Problem(ApiError),
    /// A 200 with this body (e.g. a closed latch's state); SSE: the
    /// `timeout` event's data.
    State(Value),
}

impl NotGranted {
    fn response(self) -> Result<Response, ApiError> {
        match self {
            NotGranted::Problem(problem) => Err(problem),
            NotGranted::State(state) => Ok(axum::Json(state).into_response()),
        }
    }

    fn to_json(&self) -> Value {
        match self {
            NotGranted::Problem(problem) => problem.to_json(),
            NotGranted::State(state) => state.clone(),
        }
    }
}

/// One blocking acquire request of some primitive.
pub trait Acquisition: Clone + Send + Sync + 'static {
    type Grant: Send + 'static;

    /// Metrics label: `lock`, `fair_lock`, ...
    fn primitive(&self) -> &'static str;

    /// The pub/sub channel that announces "maybe grantable now".
    fn channel(&self) -> String;

    /// Every channel its waiter watches (several where the request names
    /// several objects: [`WaitMode::Watch`]); the first is [`Self::channel`].
    fn channels(&self) -> Vec<String> {
        vec![self.channel()]
    }

    /// How its waiters wait (see [`WaitMode`]).
    fn mode(&self) -> WaitMode {
        WaitMode::Relay
    }

    /// One atomic try, recorded under `attempt` if it grants.
    fn attempt(
        &self,
        attempt: &AttemptId,
    ) -> impl Future<Output = Result<Attempt<Self::Grant>, StoreError>> + Send;

    /// What a give-back of `attempt` is to undo, decided once when the
    /// give-back starts: every retry of it then undoes exactly that, so a
    /// later change of the request's state (a grant delivered meanwhile)
    /// cannot turn a retry into a give-back of something else. `None`:
    /// nothing. By default, what `attempt` itself granted.
    fn undoing(&self, attempt: AttemptId) -> Option<AttemptId> {
        Some(attempt)
    }

    /// Gives back what `attempt` granted, if anything (a no-op otherwise,
    /// and it keeps a late copy of the attempt from granting).
    fn undo(&self, attempt: &AttemptId) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The request stopped waiting before its deadline without a grant
    /// (its client left): shorten whatever it keeps in Redis for itself
    /// (a fair waiter's queue entry). Nothing by default.
    fn leave(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        async { Ok(()) }
    }

    /// What another holder's try would find while this request's grant
    /// holds its object, where the request knows it without asking Redis:
    /// a plain lock is held for the lease asked, by the request's owner
    /// label. When a [`WaitMode::Relay`] waiter of the object on this
    /// instance is granted, the next one waits for the release's wake
    /// message (or the lease's end) instead of asking at once and being
    /// refused. `None` (the default): the next one asks at once.
    fn granted_blocks(&self) -> Option<Blocked> {
        None
    }

    /// Whether waiting may still grant what the try found `blocked`. A
    /// primitive that knows the grant would come only after the request's
    /// wait (a rate limiter's permits) says no, and the request is
    /// answered "not acquired" at once. Yes by default.
    fn may_wait(&self, _blocked: &Blocked) -> bool {
        true
    }

    /// The "not acquired" problem for this blocker (e.g. 409 `lock-held`,
    /// the default).
    fn blocked(&self, blocked: Blocked) -> ApiError {
        ApiError::lock_held(blocked.retry_after_ms).with_held_by(blocked.held_by)
    }

    /// The problem a failed request answers (the default conversion; an
    /// acquisition may name what failed).
    fn failed(&self, e: WaitError) -> ApiError {
        e.into()
    }

    /// What a request that was not granted answers: [`Self::blocked`]'s
    /// problem by default.
    fn not_granted(&self, blocked: Blocked) -> NotGranted {
        NotGranted::Problem(self.blocked(blocked))
    }

    /// The SSE event names and the metrics outcome of a grant.
    fn vocabulary(&self) -> &'static Vocabulary {
        &ACQUIRE
    }

    /// [`WaitMode::Broadcast`]: what a wake message that releases every
    /// waiter grants each of them, without asking Redis (`None`: each
    /// tries for itself).
    fn released(&self) -> Option<Self::Grant> {
        None
    }

    /// The data of an SSE `waiting` event: the hint, the owners of the
    /// holds that block it (`held_by`), and whatever else the primitive
    /// reports while a request waits (a fair queue's `position`).
    fn waiting(&self, blocked: Blocked) -> Value {
        waiting_data(blocked)
    }

    /// The grant's body (201 body, SSE `acquired` data), serialized from
    /// its typed form where the answer is JSON.
    fn grant_body<'a>(&'a self, grant: &'a Self::Grant) -> impl Serialize + 'a;

    /// The grant as a JSON document (for the SSE `acquired` event, and for
    /// wrappers that add to it).
    fn grant_json(&self, grant: &Self::Grant) -> Value {
        serde_json::to_value(self.grant_body(grant)).unwrap_or(Value::Null)
    }

    /// The URL of the hold a grant makes (its `Location`), where it has one.
    fn location(&self) -> Option<String> {
        None
    }

    /// The response for a grant: 201 with the grant and its `Location`.
    fn granted(&self, grant: Self::Grant) -> Response {
        let grant = self.grant_body(&grant);
        match self.location() {
            Some(location) => created(&location, grant),
            None => (StatusCode::CREATED, axum::Json(grant)).into_response(),
        }
    }
}

/// The data of a `waiting` event by default: the hint, `held_by`, and a
/// queue's `position` where the blocker has one.
pub fn waiting_data(blocked: Blocked) -> Value {
    let mut data = json!({
        "retry_after_ms": blocked.retry_after_ms,
        "held_by": blocked.held_by,
    });
    if let Some(position) = blocked.position {
        data["position"] = json!(position);
    }
    data
}

/// The 201 response for a grant (with `Location`). The body is serialized
/// from its typed form directly: going through a JSON `Value` first cost
/// about a tenth of an acquire's instructions in the service.
pub fn created(location: &str, grant: impl Serialize) -> Response {
    let mut response = (StatusCode::CREATED, Json(grant)).into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

/// When a request arrived and how long it may wait.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub arrived: Instant,
    pub wait_ms: u64,
}

/// A grant and the attempt that made it.
type Made<G> = (AttemptId, G);

/// Handles an acquire that arrived at `arrived`: try, then long-poll or
/// stream until `wait_ms` after arrival.
pub async fn respond<A: Acquisition>(
    state: &AppState,
    headers: HeaderMap,
    Timing { arrived, wait_ms }: Timing,
    acquisition: A,
) -> Result<Response, ApiError> {
    let sse = wants_sse(&headers);
    // The request's header values share hyper's read buffer: holding them
    // through a wait kept that buffer alive, and hyper took a second one to
    // watch the idle connection (8 KiB more per parked request).
    drop(headers);
    let (engine, metrics) = (&state.engine, &state.metrics);
    let primitive = acquisition.primitive();
    let words = acquisition.vocabulary();
    let deadline = arrived + Duration::from_millis(wait_ms);
    // A broadcast's waiters subscribe before their first try, so that no
    // release between the try and the subscription goes unheard. If that
    // fails (a full instance, shutdown), the try still runs: only a
    // request that must wait is refused.
    let early = match acquisition.mode() {
        WaitMode::Broadcast if wait_ms > 0 => {
            Some(engine.admit(&acquisition.channel(), WaitMode::Broadcast))
        }
        _ => None,
    };
    let first = engine
        .first_try(deadline, wait_ms > 0, tried(&acquisition))
        .await;
    let blocked = match first {
        Ok(Attempt::Granted((_, grant))) => {
            metrics.acquisition(primitive, words.granted_outcome);
            if sse {
                let event = event(words.granted, &acquisition.grant_json(&grant));
                return Ok(sse_response(stream_of(vec![event])));
            }
            return Ok(acquisition.granted(grant));
        }
        Ok(Attempt::Blocked(blocked)) => blocked,
        Ok(Attempt::Refused(refusal)) => {
            metrics.acquisition(primitive, "refused");
            return Err(acquisition.failed(WaitError::Refused(refusal)));
        }
        Err(e) => {
            metrics.acquisition(primitive, "error");
            return Err(e.into());
        }
    };
    if wait_ms == 0 || Instant::now() >= deadline || !acquisition.may_wait(&blocked) {
        metrics.acquisition(primitive, "busy");
        if sse {
            let events = vec![
                event(words.waiting, &acquisition.waiting(blocked.clone())),
                event(words.timeout, &acquisition.not_granted(blocked).to_json()),
            ];
            return Ok(sse_response(stream_of(events)));
        }
        return acquisition.not_granted(blocked).response();
    }

    let admitted = match early {
        Some(admitted) => admitted,
        None => engine.admit_all(&acquisition.channels(), acquisition.mode()),
    };
    let waiter = admitted.inspect_err(|_| metrics.acquisition(primitive, "error"))?;

    if !sse {
        // hyper drops this future when the client goes away; the guard
        // records that as `abandoned`.
        let left = IfLeft {
            metrics,
            acquisition: &acquisition,
            armed: true,
        };
        let outcome = wait(
            waiter.reporting(false),
            &acquisition,
            deadline,
            blocked,
            |_| {},
        )
        .await;
        left.disarm();
        return match outcome {
            Ok(Outcome::Granted((_, grant))) => {
                metrics.acquisition(primitive, words.granted_outcome);
                Ok(acquisition.granted(grant))
            }
            Ok(Outcome::TimedOut(blocked)) => {
                metrics.acquisition(primitive, "timeout");
                acquisition.not_granted(blocked).response()
            }
            Err(e) => {
                metrics.acquisition(primitive, "error");
                Err(acquisition.failed(e))
            }
        };
    }

    // SSE: the wait runs in a task that feeds the response stream. When the
    // client goes away, hyper drops the stream (our receiver), `closed()`
    // fires and the wait future is dropped with all its guards.
    let (tx, rx) = mpsc::channel::<Event>(16);
    let _ = tx.try_send(event(words.waiting, &acquisition.waiting(blocked.clone())));
    let metrics = metrics.clone();
    tokio::spawn(async move {
        let progress_tx = tx.clone();
        let describe = acquisition.clone();
        let wait = wait(waiter, &acquisition, deadline, blocked, move |b| {
            // A full buffer means the client reads slowly; dropping a
            // progress event is fine, the next one supersedes it.
            let _ = progress_tx.try_send(event(words.waiting, &describe.waiting(b)));
        });
        let outcome = tokio::select! {
            _ = tx.closed() => {
                metrics.acquisition(primitive, "abandoned");
                leave(acquisition.clone());
                return;
            }
            outcome = wait => outcome,
        };
        let final_event = match outcome {
            Ok(Outcome::Granted((attempt, grant))) => {
                let event = event(words.granted, &acquisition.grant_json(&grant));
                if tx.send(event).await.is_err() {
                    // Granted, but the client left: give it back.
                    metrics.acquisition(primitive, "abandoned");
                    give_back(acquisition, attempt);
                } else {
                    metrics.acquisition(primitive, words.granted_outcome);
                }
                return;
            }
            Ok(Outcome::TimedOut(blocked)) => {
                metrics.acquisition(primitive, "timeout");
                event(words.timeout, &acquisition.not_granted(blocked).to_json())
            }
            Err(e) => {
                metrics.acquisition(primitive, "error");
                event("error", &acquisition.failed(e).to_json())
            }
        };
        let _ = tx.send(final_event).await;
    });
    Ok(sse_response(futures_util::stream::unfold(
        rx,
        |mut rx| async move { rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx)) },
    )))
}

/// Runs an admitted waiter's wait in its object's mode; every try is a
/// guarded one.
async fn wait<A: Acquisition>(
    waiter: Waiter,
    acquisition: &A,
    deadline: Instant,
    blocked: Blocked,
    progress: impl FnMut(Blocked),
) -> Result<Outcome<Made<A::Grant>>, WaitError> {
    let attempt = || tried(acquisition);
    match acquisition.mode() {
        WaitMode::Broadcast => {
            // A release granted without a try has no attempt to undo.
            let released = || acquisition.released().map(|g| (AttemptId::new(), g));
            (waiter.wait_broadcast(deadline, blocked, attempt, released, progress)).await
        }
        WaitMode::Relay | WaitMode::Queue | WaitMode::Watch => {
            let granted_blocks = acquisition.granted_blocks();
            (waiter.wait(deadline, blocked, attempt, progress, granted_blocks)).await
        }
    }
}

/// [`guarded_try`] on the heap. A try's future (the script call, its
/// connection and reply) is by far the largest state of a request; boxed,
/// it lives only while the try runs, and a request that waits for hours
/// holds a small future rather than room for one.
fn tried<A: Acquisition>(
    acquisition: &A,
) -> BoxFuture<'_, Result<Attempt<Made<A::Grant>>, StoreError>> {
    Box::pin(guarded_try(acquisition))
}

/// One try under a fresh attempt id. If its outcome is unknown — the
/// future is dropped mid-flight (client gone, deadline), the reply was lost,
/// or replicas did not acknowledge — the guard gives back whatever the
/// attempt may have granted.
async fn guarded_try<A: Acquisition>(
    acquisition: &A,
) -> Result<Attempt<Made<A::Grant>>, StoreError> {
    let attempt = AttemptId::new();
    let mut guard = UndoGuard {
        acquisition,
        attempt: &attempt,
        armed: true,
    };
    let result = acquisition.attempt(&attempt).await;
    guard.armed = result.as_ref().is_err_and(StoreError::outcome_unknown);
    drop(guard);
    result.map(|tried| match tried {
        Attempt::Granted(grant) => Attempt::Granted((attempt, grant)),
        Attempt::Blocked(blocked) => Attempt::Blocked(blocked),
        Attempt::Refused(refusal) => Attempt::Refused(refusal),
    })
}

/// Gives back `attempt` when dropped armed (the acquisition is only
/// cloned then, so a try that completes costs no clone).
struct UndoGuard<'a, A: Acquisition> {
    acquisition: &'a A,
    attempt: &'a AttemptId,
    armed: bool,
}

impl<A: Acquisition> Drop for UndoGuard<'_, A> {
    fn drop(&mut self) {
        if self.armed {
            give_back(self.acquisition.clone(), self.attempt.clone());
        }
    }
}

/// Undoes `attempt` in the background, retrying transient failures with
/// capped backoff for [`GIVE_BACK_FOR`]. What is undone is decided here,
/// once ([`Acquisition::undoing`]); the retries repeat exactly that. If it
/// never succeeds, the grant (if there was one) ends with its lease; that
/// is logged, without ids.
pub(crate) fn give_back<A: Acquisition>(acquisition: A, attempt: AttemptId) {
    let Some(attempt) = acquisition.undoing(attempt) else {
        return;
    };
    tokio::spawn(async move {
        let until = Instant::now() + GIVE_BACK_FOR;
        let mut delay = Duration::from_millis(100);
        loop {
            match acquisition.undo(&attempt).await {
                // Lagging replicas: the undo ran on the primary, which is
                // all a retry could achieve.
                Ok(_) | Err(StoreError::ReplicasLagging { .. }) => return,
                Err(e) if e.is_transient() && Instant::now() + delay < until => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                Err(e) => {
                    tracing::warn!(
                        primitive = acquisition.primitive(),
                        error = %e,
                        "could not give back a grant whose client is gone or was told it failed; \
                         it ends with its lease"
                    );
                    return;
                }
            }
        }
    });
}

/// Tells Redis in the background that a waiter left (one try: if it
/// fails, what the waiter kept lapses at its deadline plus the grace).
fn leave<A: Acquisition>(acquisition: A) {
    tokio::spawn(async move {
        if let Err(e) = acquisition.leave().await {
            tracing::debug!(primitive = acquisition.primitive(), error = %e, "could not record that a waiter left");
        }
    });
}

/// Counts a long-poll whose client left before it was answered, and
/// tells Redis it left.
struct IfLeft<'a, A: Acquisition> {
    metrics: &'a Metrics,
    acquisition: &'a A,
    armed: bool,
}

impl<A: Acquisition> IfLeft<'_, A> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl<A: Acquisition> Drop for IfLeft<'_, A> {
    fn drop(&mut self) {
        if self.armed {
            self.metrics
                .acquisition(self.acquisition.primitive(), "abandoned");
            leave(self.acquisition.clone());
        }
    }
}

fn event(name: &str, data: &Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

fn stream_of(events: Vec<Event>) -> impl futures_util::Stream<Item = Result<Event, Infallible>> {
    stream::iter(events.into_iter().map(Ok))
}

fn sse_response<S>(events: S) -> Response
where
    S: futures_util::Stream<Item = Result<Event, Infallible>> + Send + 'static,
{
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(crate::wait::PROGRESS_EVERY))
        .into_response();
    let headers = response.headers_mut();
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
