//! The one blocking-wait engine every primitive uses.
//!
//! A wait is: try → subscribe → try again → wait for the first of
//! (notification, the `retry_after_ms` the script returned, the deadline,
//! shutdown) → repeat.
//!
//! Waiters for the same object on one instance form a *group*: they share
//! one pub/sub subscription and a FIFO "baton" (a fair async mutex). Only
//! the waiter holding the baton talks to Redis; the others sleep until it
//! is granted, times out or goes away, and then the next one tries at once.
//! So a release costs one re-check per instance, not one per waiter: no
//! thundering herd, and local waiters are served in arrival order.
//!
//! Cancellation: hyper drops the handler future when the client goes away.
//! Everything here is cancel-safe — the baton queue entry, the group
//! membership and the admission slot are released by Drop.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::store::pubsub::{Hub, Subscription};

/// How often an SSE stream reports progress when nothing changes.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(15);

/// Smallest pause between two re-checks driven by a timer, so a blocker
/// whose lease is just ending is not polled in a tight loop.
const MIN_RECHECK: Duration = Duration::from_millis(2);

/// Why a request could not be granted (yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    /// Remaining lease of what blocks the request, in ms.
    pub retry_after_ms: u64,
    /// Waiters ahead, where the resource queues fairly.
    pub position: Option<u64>,
}

impl Blocked {
    pub fn after(retry_after_ms: u64) -> Self {
        Blocked {
            retry_after_ms,
            position: None,
        }
    }

    /// The same hint, aged by the time since it was observed.
    fn aged(self, observed: Instant) -> Self {
        let elapsed = observed.elapsed().as_millis() as u64;
        Blocked {
            retry_after_ms: self.retry_after_ms.saturating_sub(elapsed),
            ..self
        }
    }
}

/// The result of one try.
#[derive(Debug)]
pub enum Attempt<T> {
    Granted(T),
    Blocked(Blocked),
}

/// How a wait ended (errors, including shutdown, are `Err`).
#[derive(Debug)]
pub enum Outcome<T> {
    Granted(T),
    /// The deadline passed; the last known blocker, aged to now.
    TimedOut(Blocked),
}

#[derive(Clone)]
pub struct WaitEngine {
    inner: Arc<Inner>,
}

struct Inner {
    hub: Hub,
    /// channel → live group; Weak so an idle object costs nothing.
    groups: Mutex<HashMap<String, Weak<Group>>>,
    /// Open waits on this instance (admission control).
    open: AtomicUsize,
    max_waiters: usize,
    shutdown: CancellationToken,
    metrics: Metrics,
}

struct Group {
    channel: String,
    /// Shared interest in the object's wake channel.
    subscription: Subscription,
    /// FIFO baton: only its holder talks to Redis for this object.
    baton: tokio::sync::Mutex<()>,
    /// Members currently waiting (for `waiters` in state reads).
    waiting: AtomicUsize,
    engine: Weak<Inner>,
}

impl Drop for Group {
    fn drop(&mut self) {
        let Some(engine) = self.engine.upgrade() else {
            return;
        };
        engine.metrics.waiting_objects.dec();
        let mut groups = engine.groups.lock().expect("group map poisoned");
        let ours = groups
            .get(&self.channel)
            .is_some_and(|weak| std::ptr::eq(weak.as_ptr(), self));
        if ours {
            groups.remove(&self.channel);
        }
    }
}

/// An admitted waiter: holds one of the instance's waiter slots and a
/// membership in its object's group until dropped.
pub struct Waiter {
    group: Arc<Group>,
    engine: Arc<Inner>,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.group.waiting.fetch_sub(1, Ordering::Relaxed);
        self.engine.open.fetch_sub(1, Ordering::Relaxed);
        self.engine.metrics.waiters.dec();
    }
}

impl WaitEngine {
    pub fn new(
        hub: Hub,
        max_waiters: usize,
        shutdown: CancellationToken,
        metrics: Metrics,
    ) -> Self {
        WaitEngine {
            inner: Arc::new(Inner {
                hub,
                groups: Mutex::new(HashMap::new()),
                open: AtomicUsize::new(0),
                max_waiters,
                shutdown,
                metrics,
            }),
        }
    }

    /// Takes a waiter slot for the object whose wake channel is `channel`:
    /// 429 `too-many-waiters` when the instance is full, 503 when shutting down.
    pub fn admit(&self, channel: &str) -> Result<Waiter, ApiError> {
        if self.inner.shutdown.is_cancelled() {
            return Err(ApiError::shutting_down());
        }
        let before = self.inner.open.fetch_add(1, Ordering::Relaxed);
        if before >= self.inner.max_waiters {
            self.inner.open.fetch_sub(1, Ordering::Relaxed);
            return Err(ApiError::too_many_waiters(self.inner.max_waiters));
        }
        self.inner.metrics.waiters.inc();
        let group = self.group(channel);
        group.waiting.fetch_add(1, Ordering::Relaxed);
        Ok(Waiter {
            group,
            engine: self.inner.clone(),
        })
    }

    fn group(&self, channel: &str) -> Arc<Group> {
        let mut groups = self.inner.groups.lock().expect("group map poisoned");
        if let Some(group) = groups.get(channel).and_then(Weak::upgrade) {
            return group;
        }
        let group = Arc::new(Group {
            channel: channel.to_string(),
            subscription: self.inner.hub.subscribe(channel),
            baton: tokio::sync::Mutex::new(()),
            waiting: AtomicUsize::new(0),
            engine: Arc::downgrade(&self.inner),
        });
        groups.insert(channel.to_string(), Arc::downgrade(&group));
        self.inner.metrics.waiting_objects.inc();
        group
    }

    /// Requests currently waiting on this instance for the object.
    pub fn waiters_on(&self, channel: &str) -> u64 {
        let groups = self.inner.groups.lock().expect("group map poisoned");
        groups
            .get(channel)
            .and_then(Weak::upgrade)
            .map(|g| g.waiting.load(Ordering::Relaxed) as u64)
            .unwrap_or(0)
    }
}

impl Waiter {
    /// Waits until `attempt` grants, `deadline` passes, or shutdown.
    ///
    /// `blocked` is what the caller's first, immediate try returned.
    /// `progress` is told the current blocker whenever it changes and at
    /// least every [`PROGRESS_EVERY`] (SSE `waiting` events).
    pub async fn wait<T, F, Fut>(
        self,
        deadline: Instant,
        blocked: Blocked,
        mut attempt: F,
        mut progress: impl FnMut(Blocked),
    ) -> Result<Outcome<T>, ApiError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Attempt<T>, ApiError>>,
    {
        let shutdown = self.engine.shutdown.clone();
        let mut last = blocked;
        let mut last_at = Instant::now();
        let mut tick = tokio::time::interval_at(Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);

        // Phase 1: queue for the baton behind earlier local waiters. The
        // lock future is created once so that progress ticks don't lose
        // our place in the FIFO.
        let baton = self.group.baton.lock();
        tokio::pin!(baton);
        let _baton = loop {
            tokio::select! {
                biased;
                // Cancel-safe arms: dropping `baton` leaves the queue.
                _ = shutdown.cancelled() => return Err(ApiError::shutting_down()),
                guard = &mut baton => break guard,
                _ = sleep_until(deadline) => return Ok(Outcome::TimedOut(last.aged(last_at))),
                _ = tick.tick() => progress(last.aged(last_at)),
            }
        };

        // Phase 2: we are this instance's active waiter for the object.
        // The receiver is created (and so marked seen) before each check:
        // a notification that lands between the check and the wait below
        // still completes `changed()`.
        let mut wake = self.group.subscription.receiver();
        loop {
            wake.borrow_and_update();
            match attempt().await? {
                Attempt::Granted(grant) => return Ok(Outcome::Granted(grant)),
                Attempt::Blocked(now_blocked) => {
                    let before = last.aged(last_at);
                    let changed = now_blocked.position != before.position
                        || now_blocked.retry_after_ms.abs_diff(before.retry_after_ms) > 100;
                    last = now_blocked;
                    last_at = Instant::now();
                    if changed {
                        progress(last);
                    }
                }
            }
            // Pub/sub is at-most-once: re-check by ourselves no later than
            // the blocker's remaining lease (+1 ms to land after expiry).
            let recheck = Instant::now()
                + Duration::from_millis(last.retry_after_ms.saturating_add(1)).max(MIN_RECHECK);
            loop {
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return Err(ApiError::shutting_down()),
                    // The sender lives as long as our subscription, so
                    // `changed` never reports a closed channel here.
                    _ = wake.changed() => break,
                    _ = sleep_until(recheck.min(deadline)) => {
                        if Instant::now() >= deadline {
                            return Ok(Outcome::TimedOut(last.aged(last_at)));
                        }
                        break;
                    }
                    _ = tick.tick() => progress(last.aged(last_at)),
                }
            }
        }
    }
}
