//! Adapters from the wait engine to HTTP (API.md §2): a long-poll answer,
//! or a Server-Sent Events stream.
//!
//! Every blocking acquire route describes itself as an [`Acquisition`] and
//! calls [`respond`]. The first try happens before any response is
//! committed, so bad input, a full instance (429) or an unreachable Redis
//! (503) get real status codes even for SSE; only what happens after the
//! stream opened is reported as an `error` event.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use axum::http::{HeaderValue, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::wait::{Attempt, Blocked, Outcome, WaitEngine};

/// One blocking acquire request of some primitive.
pub trait Acquisition: Clone + Send + Sync + 'static {
    type Grant: Send + 'static;

    /// Metrics label: `lock`, `fair_lock`, ...
    fn primitive(&self) -> &'static str;

    /// The pub/sub channel that announces "maybe grantable now".
    fn channel(&self) -> String;

    /// One atomic try.
    fn attempt(&self) -> impl Future<Output = Result<Attempt<Self::Grant>, ApiError>> + Send;

    /// The "not acquired" problem for this blocker (e.g. 409 `lock-held`).
    fn blocked(&self, blocked: Blocked) -> ApiError;

    /// The grant as a JSON document (201 body, SSE `acquired` data).
    fn grant_json(&self, grant: &Self::Grant) -> Value;

    /// The 201 response for a grant (with `Location`).
    fn granted(&self, grant: Self::Grant) -> Response;

    /// Gives back one grant made for a client that is gone (or may have
    /// been made: it is also called when the client left mid-attempt, in
    /// which case "not held" is the expected, harmless answer).
    fn abandon(&self) -> impl Future<Output = ()> + Send;
}

/// Handles an acquire: try once, then long-poll or stream until `wait_ms`.
pub async fn respond<A: Acquisition>(
    engine: &WaitEngine,
    metrics: &Metrics,
    sse: bool,
    wait_ms: u64,
    acquisition: A,
) -> Result<Response, ApiError> {
    let primitive = acquisition.primitive();
    let first = match acquisition.attempt().await {
        Ok(first) => first,
        Err(e) => {
            metrics.acquisition(primitive, "error");
            return Err(e);
        }
    };
    let blocked = match first {
        Attempt::Granted(grant) => {
            metrics.acquisition(primitive, "acquired");
            if sse {
                let event = event("acquired", &acquisition.grant_json(&grant));
                return Ok(sse_response(stream_of(vec![event])));
            }
            return Ok(acquisition.granted(grant));
        }
        Attempt::Blocked(blocked) => blocked,
    };
    if wait_ms == 0 {
        metrics.acquisition(primitive, "busy");
        let problem = acquisition.blocked(blocked);
        if sse {
            let events = vec![waiting_event(blocked), event("timeout", &problem.to_json())];
            return Ok(sse_response(stream_of(events)));
        }
        return Err(problem);
    }

    let waiter = engine.admit(&acquisition.channel()).inspect_err(|_| {
        metrics.acquisition(primitive, "error");
    })?;
    let deadline = Instant::now() + Duration::from_millis(wait_ms);

    if !sse {
        // hyper drops this future when the client goes away; the guard
        // records that as `abandoned`.
        let left = CountIfLeft {
            metrics,
            primitive,
            armed: true,
        };
        let outcome = waiter
            .wait(deadline, blocked, || guarded_attempt(&acquisition), |_| {})
            .await;
        left.disarm();
        return match outcome {
            Ok(Outcome::Granted(grant)) => {
                metrics.acquisition(primitive, "acquired");
                Ok(acquisition.granted(grant))
            }
            Ok(Outcome::TimedOut(blocked)) => {
                metrics.acquisition(primitive, "timeout");
                Err(acquisition.blocked(blocked))
            }
            Err(e) => {
                metrics.acquisition(primitive, "error");
                Err(e)
            }
        };
    }

    // SSE: the wait runs in a task that feeds the response stream. When the
    // client goes away, hyper drops the stream (our receiver), `closed()`
    // fires and the wait future is dropped with all its guards.
    let (tx, rx) = mpsc::channel::<Event>(16);
    let _ = tx.try_send(waiting_event(blocked));
    let metrics = metrics.clone();
    tokio::spawn(async move {
        let progress_tx = tx.clone();
        let wait = waiter.wait(
            deadline,
            blocked,
            || guarded_attempt(&acquisition),
            move |b| {
                // A full buffer means the client reads slowly; dropping a
                // progress event is fine, the next one supersedes it.
                let _ = progress_tx.try_send(waiting_event(b));
            },
        );
        let outcome = tokio::select! {
            _ = tx.closed() => {
                metrics.acquisition(primitive, "abandoned");
                return;
            }
            outcome = wait => outcome,
        };
        let final_event = match outcome {
            Ok(Outcome::Granted(grant)) => {
                let event = event("acquired", &acquisition.grant_json(&grant));
                if tx.send(event).await.is_err() {
                    // Granted, but the client left: give it back.
                    metrics.acquisition(primitive, "abandoned");
                    acquisition.abandon().await;
                } else {
                    metrics.acquisition(primitive, "acquired");
                }
                return;
            }
            Ok(Outcome::TimedOut(blocked)) => {
                metrics.acquisition(primitive, "timeout");
                event("timeout", &acquisition.blocked(blocked).to_json())
            }
            Err(e) => {
                metrics.acquisition(primitive, "error");
                event("error", &e.to_json())
            }
        };
        let _ = tx.send(final_event).await;
    });
    Ok(sse_response(futures_util::stream::unfold(
        rx,
        |mut rx| async move { rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx)) },
    )))
}

/// One try made while waiting. If the client disconnects while the script
/// is in flight, the future is dropped and we can't know whether Redis
/// granted: the guard then gives the (possible) grant back.
async fn guarded_attempt<A: Acquisition>(acquisition: &A) -> Result<Attempt<A::Grant>, ApiError> {
    let mut guard = AbandonGuard {
        acquisition: Some(acquisition.clone()),
    };
    let result = acquisition.attempt().await;
    guard.acquisition = None;
    result
}

/// Counts a long-poll whose client left before it was answered.
struct CountIfLeft<'a> {
    metrics: &'a Metrics,
    primitive: &'static str,
    armed: bool,
}

impl CountIfLeft<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for CountIfLeft<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.metrics.acquisition(self.primitive, "abandoned");
        }
    }
}

struct AbandonGuard<A: Acquisition> {
    acquisition: Option<A>,
}

impl<A: Acquisition> Drop for AbandonGuard<A> {
    fn drop(&mut self) {
        if let Some(acquisition) = self.acquisition.take() {
            tokio::spawn(async move { acquisition.abandon().await });
        }
    }
}

fn event(name: &str, data: &Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

fn waiting_event(blocked: Blocked) -> Event {
    let mut data = json!({ "retry_after_ms": blocked.retry_after_ms });
    if let Some(position) = blocked.position {
        data["position"] = json!(position);
    }
    event("waiting", &data)
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
