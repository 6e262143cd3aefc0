//! The one blocking-wait engine every primitive uses.
//!
//! A wait is: try → subscribe → try again → wait for the first of
//! (notification, the `retry_after_ms` the script returned, the deadline,
//! shutdown) → repeat.
//!
//! Waiters for the same object on one instance form a *group*: they share
//! one pub/sub subscription, a FIFO "baton" (a fair async mutex) and the
//! latest answer Redis gave any of them. How a group's members wait is
//! the object's [`WaitMode`]; each mode lives in a file of its own, which
//! uses only the shared engine here, never another mode:
//!
//! - `relay`: [`WaitMode::Relay`] (plain locks, RedLocks): only the waiter
//!   holding the baton asks Redis; the others report its answers and go
//!   next, in arrival order.
//! - `queue`: [`WaitMode::Queue`] (fair locks, rwlocks, semaphores): the
//!   order lives in Redis, and a wake message ([`QueueNote`]) wakes only
//!   the waiters it concerns.
//! - `watch`: [`WaitMode::Watch`] (multi-locks, rate limiters): a waiter
//!   watches its channels and tries on its own, with no baton.
//! - `broadcast`: [`WaitMode::Broadcast`] (count-down latches): a change
//!   releases every waiter, and its wake message ([`BroadcastNote`])
//!   carries the new state.
//!
//! Time: every wait has a deadline fixed when its request arrived. Each try
//! is bounded by the time left (at least [`MIN_TRY`]). When the deadline
//! comes, a waiter of any mode but [`WaitMode::Broadcast`] looks once more
//! ([`last_look`]) before it answers "not acquired": a change may have gone
//! unheard (pub/sub is at-most-once; a lease can end early without a
//! message, and its re-check may not be due yet), and a queue's positions
//! are current only in Redis. Once a wait has its
//! first answer, a try that fails on a transient backend error (Redis
//! restarting, a connection killed, a failover) is retried after a capped,
//! jittered backoff until the deadline; the wait ends with that error only
//! if it is still failing then.
//!
//! Cancellation: hyper drops the handler future when the client goes away.
//! Everything here is cancel-safe — the baton queue entry, the group
//! membership and the admission slot are released by Drop.

mod broadcast;
mod queue;
mod relay;
mod watch;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch::{Receiver, Sender};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::coord::{Attempt, Blocked, Refusal};
use crate::counted::CountedMap;
use crate::metrics::Metrics;
use crate::store::StoreError;
use crate::store::pubsub::{Hub, Note, Subscription};

pub use broadcast::BroadcastNote;
use broadcast::GroupRead;
use queue::Desk;
pub use queue::QueueNote;

/// How often an SSE stream reports progress when nothing changes.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(15);

/// Smallest pause between two re-checks driven by a timer, so a blocker
/// whose lease is just ending is not polled in a tight loop.
const MIN_RECHECK: Duration = Duration::from_millis(2);

/// How often a waiter looks by itself while the hub is not subscribed
/// (wake messages published meanwhile are lost, and a blocker without a
/// lease, such as a latch, would otherwise be looked at only every
/// [`PROGRESS_EVERY`]).
const UNHEARD_RECHECK: Duration = Duration::from_millis(250);

/// The least time a try gets, even right before the deadline, so that a
/// healthy Redis can still answer the last re-check.
pub const MIN_TRY: Duration = Duration::from_millis(100);

/// Backoff between tries that failed on a transient backend error.
const BACKOFF_START: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How the waiters of one object wait (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitMode {
    /// One local waiter at a time asks Redis; the rest queue locally.
    Relay,
    /// Each waiter has a ticket in a queue kept in Redis and tries when a
    /// wake message lets its ticket go.
    Queue,
    /// A waiter watches several objects' channels at once (a multi-lock)
    /// and tries on its own whenever any of them announces a change, or
    /// when its blockers' leases end. It takes no local baton, so two
    /// waiters of overlapping sets can never wait for each other locally.
    Watch,
    /// Every waiter is released by the same change, and the wake message
    /// carries the object's new state ([`BroadcastNote`]): waiters answer
    /// from it, and read Redis only to recover from lost messages, one
    /// read per group. Its waiters subscribe before their first try
    /// ([`WaitEngine::admit`] comes first), so no change between the try
    /// and the subscription can be missed.
    Broadcast,
}

/// Why a wait could not even start, or ended without an answer.
#[derive(Debug, Clone)]
pub enum WaitError {
    /// The instance is shutting down.
    ShuttingDown,
    /// The instance already has `limit` open waits.
    TooManyWaiters { limit: usize },
    /// Redis failed, and was still failing at the deadline (or the error
    /// is not one that retrying can fix).
    Backend(StoreError),
    /// A try found that waiting could never succeed.
    Refused(Refusal),
}

impl From<StoreError> for WaitError {
    fn from(e: StoreError) -> Self {
        WaitError::Backend(e)
    }
}

/// How a wait ended (errors, including shutdown, are `Err`).
#[derive(Debug)]
pub enum Outcome<T> {
    Granted(T),
    /// The deadline passed; the last known blocker, aged to now.
    TimedOut(Blocked),
}

/// The latest answer a group's lead got from Redis.
#[derive(Debug, Clone, Default)]
struct Latest {
    /// The last blocker seen, and when.
    blocked: Option<(Blocked, Instant)>,
    /// Set while tries fail; cleared by the next answer.
    failing: Option<StoreError>,
}

impl Latest {
    fn blocked_now(&self) -> Option<Blocked> {
        self.blocked.as_ref().map(|(b, at)| aged(b, *at))
    }

    /// What a wait that ends now answers.
    fn timed_out<T>(&self) -> Result<Outcome<T>, WaitError> {
        match (&self.failing, self.blocked_now()) {
            (Some(e), _) => Err(WaitError::Backend(e.clone())),
            (None, Some(b)) => Ok(Outcome::TimedOut(b)),
            (None, None) => Err(WaitError::Backend(StoreError::timeout())),
        }
    }
}

/// Whether `now` tells a waiter something `before` (aged) did not: another
/// queue position, or a remaining lease that moved by more than 100 ms.
/// Only such changes wake queued waiters and make SSE `waiting` events, so
/// a handoff among thousands of waiters does not wake every one of them.
fn differs(before: Option<&Blocked>, now: &Blocked) -> bool {
    before.is_none_or(|b| {
        now.position != b.position
            || now.held_by != b.held_by
            || now.retry_after_ms.abs_diff(b.retry_after_ms) > 100
    })
}

/// Records `blocked` as the group's latest observation; wakes the queued
/// members only if it differs from what they last saw (or tries had been
/// failing).
fn observe(latest: &Sender<Latest>, blocked: Blocked) -> bool {
    let at = Instant::now();
    latest.send_if_modified(|l| {
        let news = l.failing.is_some() || differs(l.blocked_now().as_ref(), &blocked);
        *l = Latest {
            blocked: Some((blocked, at)),
            failing: None,
        };
        news
    })
}

/// The same hint, aged by the time since it was observed.
fn aged(blocked: &Blocked, observed: Instant) -> Blocked {
    let elapsed = observed.elapsed().as_millis() as u64;
    Blocked {
        retry_after_ms: blocked.retry_after_ms.saturating_sub(elapsed),
        ..blocked.clone()
    }
}

/// Cheap to clone: one `Arc` inside.
#[derive(Clone)]
pub struct WaitEngine {
    inner: Arc<Inner>,
}

struct Inner {
    /// Where wake-ups come from.
    hub: Hub,
    /// channel → the live group, counted by its members ([`Waiter`]s).
    groups: CountedMap<Arc<Group>>,
    /// Open waits on this instance (admission control).
    open: AtomicUsize,
    /// Open waits allowed before 429 `too-many-waiters`.
    max_waiters: usize,
    /// Cancelled at shutdown: every wait ends with `ShuttingDown`.
    shutdown: CancellationToken,
    /// Gauges for waiters and waiting objects.
    metrics: Metrics,
}

struct Group {
    /// Shared interest in the object's wake channel.
    subscription: Subscription,
    /// FIFO baton: only its holder talks to Redis for this object.
    baton: tokio::sync::Mutex<()>,
    /// The lead's latest observation, shared with the queued members.
    latest: Sender<Latest>,
    /// [`WaitMode::Queue`]: who waits for which ticket, and the latest
    /// wake message (see [`Desk`]).
    desk: Option<Arc<Desk>>,
    /// [`WaitMode::Broadcast`]: the latest read one waiter made for all.
    reads: Sender<Option<GroupRead>>,
    /// [`WaitMode::Relay`]: left by a lead that was granted, for the next
    /// lead (see [`Handover`]).
    handover: parking_lot::Mutex<Option<Handover>>,
}

/// What a [`WaitMode::Relay`] lead that was granted tells the next lead:
/// the object is held by its grant until `until` at the latest, unless a
/// wake message came after `wake` last looked (just before the granted
/// try). The next lead then waits for that message, or looks at `until`,
/// instead of asking Redis at once and being refused (one script call
/// fewer per handoff between the waiters of one instance).
struct Handover {
    wake: Receiver<Note>,
    until: Instant,
}

/// An admitted waiter: holds one of the instance's waiter slots and a
/// membership in its object's group until dropped.
pub struct Waiter {
    /// Channel and group of each object it waits on (the primary first).
    groups: Vec<(String, Arc<Group>)>,
    engine: Arc<Inner>,
    /// Whether its caller reports progress (SSE); a long-poll does not, so
    /// a queue's position changes need not wake it.
    reports: bool,
    mode: WaitMode,
    /// [`WaitMode::Broadcast`]: the wake messages since admission (taken
    /// before the first try, so none can be missed).
    wake: Option<Receiver<Note>>,
}

impl Waiter {
    /// The group of the primary object.
    fn group(&self) -> &Arc<Group> {
        &self.groups[0].1
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        for (channel, group) in std::mem::take(&mut self.groups) {
            // Our reference goes first, so that a group the map hands back
            // (we were its last member) is dropped, with its subscription,
            // outside the map's lock.
            drop(group);
            if let Some(group) = self.engine.groups.leave(&channel) {
                self.engine.metrics.waiting_objects.dec();
                drop(group);
            }
        }
        self.engine.open.fetch_sub(1, Ordering::Relaxed);
        self.engine.metrics.waiters.dec();
    }
}

impl Inner {
    /// A re-check due at `recheck` after what was learned at `learned`,
    /// brought forward while the hub is not subscribed.
    fn heard(&self, recheck: Instant, learned: Instant) -> Instant {
        if self.hub.is_connected() {
            recheck
        } else {
            recheck.min(learned + UNHEARD_RECHECK)
        }
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
                groups: CountedMap::default(),
                open: AtomicUsize::new(0),
                max_waiters,
                shutdown,
                metrics,
            }),
        }
    }

    /// Takes a waiter slot for the object whose wake channel is `channel`.
    /// Every waiter of one channel must use the same mode (a
    /// [`WaitMode::Watch`] waiter may join a [`WaitMode::Relay`] group:
    /// it uses only the subscription). A [`WaitMode::Broadcast`] waiter is
    /// admitted before its first try and keeps every wake message from
    /// here on.
    pub fn admit(&self, channel: &str, mode: WaitMode) -> Result<Waiter, WaitError> {
        self.admit_all(std::slice::from_ref(&channel), mode)
    }

    /// Takes one waiter slot for a request that waits on several objects
    /// (their wake channels; the first is the primary one, and only
    /// [`WaitMode::Watch`] uses the others). The waiter counts as one of
    /// each object's waiters.
    pub fn admit_all(
        &self,
        channels: &[impl AsRef<str>],
        mode: WaitMode,
    ) -> Result<Waiter, WaitError> {
        if self.inner.shutdown.is_cancelled() {
            return Err(WaitError::ShuttingDown);
        }
        let before = self.inner.open.fetch_add(1, Ordering::Relaxed);
        if before >= self.inner.max_waiters {
            self.inner.open.fetch_sub(1, Ordering::Relaxed);
            return Err(WaitError::TooManyWaiters {
                limit: self.inner.max_waiters,
            });
        }
        self.inner.metrics.waiters.inc();
        let groups: Vec<(String, Arc<Group>)> = channels
            .iter()
            .map(|c| (c.as_ref().to_string(), self.join(c.as_ref(), mode)))
            .collect();
        let wake = (mode == WaitMode::Broadcast).then(|| groups[0].1.subscription.receiver());
        Ok(Waiter {
            groups,
            engine: self.inner.clone(),
            reports: true,
            mode,
            wake,
        })
    }

    /// Joins (or forms) the group of waiters of one channel.
    fn join(&self, channel: &str, mode: WaitMode) -> Arc<Group> {
        self.inner.groups.join(channel, || {
            self.inner.metrics.waiting_objects.inc();
            let subscription = self.inner.hub.subscribe(channel);
            let desk = (mode == WaitMode::Queue).then(|| {
                let desk = Arc::new(Desk::default());
                tokio::spawn(Desk::serve(Arc::downgrade(&desk), subscription.receiver()));
                desk
            });
            Arc::new(Group {
                subscription,
                baton: tokio::sync::Mutex::new(()),
                latest: Sender::new(Latest::default()),
                desk,
                reads: Sender::new(None),
                handover: parking_lot::Mutex::new(None),
            })
        })
    }

    /// Requests currently waiting on this instance for the object.
    pub fn waiters_on(&self, channel: &str) -> u64 {
        self.inner.groups.users(channel) as u64
    }

    /// The pub/sub hub's connection state (see [`Hub::connected`]).
    pub fn subscribed(&self) -> Receiver<bool> {
        self.inner.hub.connected()
    }

    /// A request's first try. When the request may wait (`patient`), the
    /// try is bounded by its deadline (the deadline counts from the
    /// request's arrival, so a stalled Redis cannot stretch it). A failure
    /// here ends the request at once: a wait that never got a first answer
    /// has nothing to wait for.
    pub async fn first_try<T, F>(
        &self,
        deadline: Instant,
        patient: bool,
        attempt: F,
    ) -> Result<Attempt<T>, WaitError>
    where
        F: Future<Output = Result<Attempt<T>, StoreError>>,
    {
        let result = if patient {
            bounded(deadline, attempt).await
        } else {
            attempt.await
        };
        result.map_err(WaitError::Backend)
    }
}

/// Runs one try, giving it the time left before `deadline` (at least
/// [`MIN_TRY`]); a try cut short is a timeout (its future is dropped, so a
/// caller that must give back a possible grant does so from a guard).
async fn bounded<T>(
    deadline: Instant,
    attempt: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let budget = deadline
        .saturating_duration_since(Instant::now())
        .max(MIN_TRY);
    tokio::time::timeout(budget, attempt)
        .await
        .unwrap_or_else(|_| Err(StoreError::timeout()))
}

/// The deadline came: one more try before the wait answers "not acquired"
/// — a change may have gone unheard (a lost wake message, a lease that
/// ended early, a re-check not yet due), and only Redis knows a queue's
/// positions now. The try is bounded as every try is: it must answer
/// within [`MIN_TRY`] of the deadline (none is made once that has passed).
/// It grants, refuses, or reports the blocker it found (recorded as the
/// group's latest observation where there is a `group`); if it fails on a
/// transient error, the wait answers what it knew (`known`).
async fn last_look<T>(
    shutdown: &CancellationToken,
    deadline: Instant,
    attempt: impl Future<Output = Result<Attempt<T>, StoreError>>,
    group: Option<&Sender<Latest>>,
    known: impl FnOnce() -> Result<Outcome<T>, WaitError>,
) -> Result<Outcome<T>, WaitError> {
    let budget = (deadline + MIN_TRY).saturating_duration_since(Instant::now());
    if budget.is_zero() {
        return known();
    }
    let result = tokio::select! {
        biased;
        _ = shutdown.cancelled() => return Err(WaitError::ShuttingDown),
        result = tokio::time::timeout(budget, attempt) => {
            result.unwrap_or_else(|_| Err(StoreError::timeout()))
        }
    };
    match result {
        Ok(Attempt::Granted(grant)) => Ok(Outcome::Granted(grant)),
        Ok(Attempt::Refused(r)) => Err(WaitError::Refused(r)),
        Ok(Attempt::Blocked(blocked)) => {
            if let Some(latest) = group {
                observe(latest, blocked.clone());
            }
            Ok(Outcome::TimedOut(blocked))
        }
        Err(e) if e.is_transient() => known(),
        Err(e) => Err(WaitError::Backend(e)),
    }
}

/// Capped exponential backoff with jitter (between half and all of the
/// current step), so waiters don't retry in lockstep.
struct Backoff {
    step: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            step: BACKOFF_START,
        }
    }
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let step = self.step;
        self.step = (self.step * 2).min(BACKOFF_MAX);
        let jitter = getrandom::u32().unwrap_or(0) as f64 / u32::MAX as f64;
        step.mul_f64(0.5 + jitter / 2.0)
    }
}

impl Waiter {
    /// Says whether the caller reports progress (SSE); a long-poll says no,
    /// so that a queue's position changes do not wake it for nothing.
    pub fn reporting(mut self, reports: bool) -> Self {
        self.reports = reports;
        self
    }

    /// Waits until `attempt` grants, `deadline` passes, or shutdown.
    ///
    /// `first` is what the caller's first try returned.
    /// `progress` is told the current blocker whenever it changes and at
    /// least every [`PROGRESS_EVERY`] (SSE `waiting` events).
    /// `granted_blocks`: what others' tries would find while this waiter's
    /// grant holds the object, where the caller knows it without asking
    /// Redis (a plain lock's lease and owner label): a [`WaitMode::Relay`]
    /// waiter that is granted leaves it to the next lead (see
    /// [`Handover`]). `None`: the next lead asks Redis at once.
    pub async fn wait<T, F, Fut>(
        self,
        deadline: Instant,
        first: Blocked,
        attempt: F,
        progress: impl FnMut(Blocked),
        granted_blocks: Option<Blocked>,
    ) -> Result<Outcome<T>, WaitError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Attempt<T>, StoreError>>,
    {
        if self.mode == WaitMode::Watch {
            return self.wait_watching(deadline, first, attempt, progress).await;
        }
        if let (Some(desk), Some(place)) = (self.group().desk.clone(), first.place) {
            return self
                .wait_queued(&desk, deadline, first, place, attempt, progress)
                .await;
        }
        (self.wait_relayed(deadline, first, attempt, progress, granted_blocks)).await
    }
}

/// What a waiter that asks Redis on its own ([`WaitMode::Queue`],
/// [`WaitMode::Watch`]) knows between its tries.
struct Own {
    /// The last blocker seen, and when.
    current: (Blocked, Instant),
    /// Set while tries fail; cleared by the next answer.
    failing: Option<StoreError>,
    backoff: Backoff,
}

/// What one try inside a wait leads to.
enum Tried<T> {
    /// The wait is over (granted, refused, or a lasting error).
    Over(Result<Outcome<T>, WaitError>),
    /// Still blocked, by this.
    Blocked(Blocked),
    /// A transient failure: look again after this pause.
    Failed(Duration),
}

impl Own {
    fn new(first: Blocked) -> Self {
        Own {
            current: (first, Instant::now()),
            failing: None,
            backoff: Backoff::default(),
        }
    }

    /// The last blocker, aged to now.
    fn now(&self) -> Blocked {
        aged(&self.current.0, self.current.1)
    }

    /// What a wait that reaches its deadline answers.
    fn timed_out<T>(self) -> Result<Outcome<T>, WaitError> {
        match self.failing {
            Some(e) => Err(WaitError::Backend(e)),
            None => Ok(Outcome::TimedOut(self.now())),
        }
    }

    /// The deadline came: [`last_look`], reporting a changed blocker; a
    /// look that fails on a transient error answers what the waiter knew.
    async fn last_look<T>(
        self,
        shutdown: &CancellationToken,
        deadline: Instant,
        attempt: impl Future<Output = Result<Attempt<T>, StoreError>>,
        progress: &mut impl FnMut(Blocked),
    ) -> Result<Outcome<T>, WaitError> {
        let now = self.now();
        let looked = last_look(shutdown, deadline, attempt, None, || self.timed_out()).await;
        if let Ok(Outcome::TimedOut(blocked)) = &looked
            && differs(Some(&now), blocked)
        {
            progress(blocked.clone());
        }
        looked
    }

    /// One try, bounded by the deadline; reports a changed blocker.
    async fn try_once<T>(
        &mut self,
        shutdown: &CancellationToken,
        deadline: Instant,
        attempt: impl Future<Output = Result<Attempt<T>, StoreError>>,
        progress: &mut impl FnMut(Blocked),
    ) -> Tried<T> {
        let result = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return Tried::Over(Err(WaitError::ShuttingDown)),
            result = bounded(deadline, attempt) => result,
        };
        match result {
            Ok(Attempt::Granted(grant)) => Tried::Over(Ok(Outcome::Granted(grant))),
            Ok(Attempt::Refused(r)) => Tried::Over(Err(WaitError::Refused(r))),
            Ok(Attempt::Blocked(blocked)) => {
                self.backoff = Backoff::default();
                self.failing = None;
                if differs(Some(&self.now()), &blocked) {
                    progress(blocked.clone());
                }
                self.current = (blocked.clone(), Instant::now());
                Tried::Blocked(blocked)
            }
            Err(e) if e.is_transient() => {
                self.failing = Some(e);
                Tried::Failed(self.backoff.next())
            }
            Err(e) => Tried::Over(Err(WaitError::Backend(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::connector::Connector;

    pub(super) fn engine() -> (WaitEngine, Hub) {
        // Nothing listens on port 1: the hub just keeps retrying, which is
        // all these tests need (no notification is ever delivered).
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        let shutdown = CancellationToken::new();
        let metrics = Metrics::new();
        let hub = Hub::start(
            Connector::Direct(Box::new(client)),
            "t:*".into(),
            shutdown.clone(),
            metrics.clone(),
            Duration::from_millis(50),
        );
        (WaitEngine::new(hub.clone(), 10_000, shutdown, metrics), hub)
    }

    /// A waiter of several objects counts as one open wait, and as one
    /// waiter of each object; it shares a Relay group's subscription
    /// without its baton, and leaves nothing subscribed when it goes.
    #[tokio::test]
    async fn a_waiter_of_several_objects_joins_and_leaves_every_group() {
        let (engine, hub) = engine();
        let single = engine.admit("t:a", WaitMode::Relay).unwrap();
        let several = engine
            .admit_all(&["t:a", "t:b", "t:c"], WaitMode::Watch)
            .unwrap();
        assert_eq!(engine.inner.open.load(Ordering::Relaxed), 2);
        assert_eq!(engine.waiters_on("t:a"), 2);
        assert_eq!(engine.waiters_on("t:c"), 1);
        assert_eq!(hub.channels(), 3);
        let baton = single.group().baton.try_lock();
        assert!(baton.is_ok(), "the Watch waiter took no baton");
        drop(baton);
        drop(several);
        tokio::task::yield_now().await;
        assert_eq!(engine.waiters_on("t:b"), 0);
        assert_eq!(engine.waiters_on("t:a"), 1);
        assert_eq!(
            hub.channels(),
            1,
            "only the single waiter's channel is left"
        );
        assert_eq!(engine.inner.open.load(Ordering::Relaxed), 1);
    }

    /// State reads racing the last waiter of an object leaving: the read
    /// must never be the one that tears the group down under the map's
    /// lock (that deadlocked or poisoned the map).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn state_reads_racing_departing_waiters_never_hang() {
        let (engine, _hub) = engine();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut threads = Vec::new();
        for t in 0..2 {
            let engine = engine.clone();
            let done = done.clone();
            threads.push(std::thread::spawn(move || {
                let channel = format!("t:{t}");
                let mut seen = 0u64;
                for _ in 0..200_000 {
                    if t == 0 {
                        drop(engine.admit(&channel, WaitMode::Relay).unwrap());
                    }
                    seen += engine.waiters_on("t:0");
                }
                done.store(true, Ordering::Relaxed);
                seen
            }));
        }
        let watchdog = Instant::now() + Duration::from_secs(60);
        while !threads.iter().all(|t| t.is_finished()) {
            assert!(
                Instant::now() < watchdog,
                "admit/waiters_on deadlocked (a group was dropped under the map's lock)"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for t in threads {
            t.join().expect("no thread panicked (no poisoned map)");
        }
        assert_eq!(engine.waiters_on("t:0"), 0);
        assert!(engine.inner.groups.is_empty(), "no group left behind");
    }
}
