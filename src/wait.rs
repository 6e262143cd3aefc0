//! The one blocking-wait engine every primitive uses.
//!
//! A wait is: try → subscribe → try again → wait for the first of
//! (notification, the `retry_after_ms` the script returned, the deadline,
//! shutdown) → repeat.
//!
//! Waiters for the same object on one instance form a *group*: they share
//! one pub/sub subscription, a FIFO "baton" (a fair async mutex) and the
//! latest answer Redis gave any of them. Only the waiter holding the baton
//! talks to Redis; the others sleep until it is granted, times out or goes
//! away, and then the next one tries at once — meanwhile they report the
//! lead's latest observation, so their 409s and SSE `waiting` events stay
//! current. A release costs one re-check per instance, not one per waiter:
//! no thundering herd, and local waiters are served in arrival order.
//!
//! That is the [`WaitMode::Relay`] mode, right for objects whose waiters
//! are interchangeable (plain locks). Where the order lives in Redis (fair
//! locks), a local FIFO would be wrong: a waiter that polls again keeps an
//! early place in Redis but would queue locally behind later arrivals. In
//! [`WaitMode::Queue`] every waiter waits on its own for the wake message
//! that names its ticket (see [`QueueNote`]): a release wakes only the
//! head, wherever it waits, and the other waiters update their position
//! from the same message without asking Redis. Locally, one task per
//! object reads each message and wakes only the waiters it concerns.
//!
//! A request that waits on several objects at once (a multi-lock) uses
//! [`WaitMode::Watch`]: it joins every object's group for the subscription
//! only, never takes a baton (so two waiters of overlapping sets cannot
//! wait for each other locally), and tries whenever any of its channels
//! announces a change or its blockers' leases end. So does a rate
//! limiter's waiter: its permits are reserved for a time of its own, which
//! its `retry_after_ms` names, so it waits for that time (or a message:
//! the limiter was deleted), never for another waiter.
//!
//! In [`WaitMode::Broadcast`] (count-down latches) a state change releases
//! every waiter at once, and its wake message carries the new state itself
//! (see [`BroadcastNote`]): every waiter answers from the message, with no
//! Redis read at all. Only a reconnect (messages may have been lost), a
//! message it cannot read, or its own re-check timer (pub/sub is
//! at-most-once; the object may expire silently) makes a waiter look, and
//! then one waiter of the group reads for all: it announces what it found
//! to the others ([`GroupRead`]), who take it instead of asking Redis.
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

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use crate::coord::{Attempt, Blocked, Place, Refusal};
use crate::counted::CountedMap;
use crate::metrics::Metrics;
use crate::store::StoreError;
use crate::store::pubsub::{Hub, Note, Subscription};

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

/// A broadcast's wake message: `<position>|<recheck_ms>`, the object's new
/// state as every waiter should see it.
///
/// - `position`: what still stands between the waiters and their release
///   (a latch's count); 0 releases every waiter. While a wait lasts it
///   only falls, so a read that finds it higher than a waiter last knew
///   means the object was released (and set again) in between.
/// - `recheck_ms`: when waiters should look by themselves at the latest
///   (the object's remaining life: it may expire without a message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BroadcastNote {
    pub position: u64,
    pub recheck_ms: u64,
}

impl BroadcastNote {
    pub fn parse(payload: &str) -> Option<BroadcastNote> {
        let (position, recheck) = payload.split_once('|')?;
        Some(BroadcastNote {
            position: position.parse().ok()?,
            recheck_ms: recheck.parse().ok()?,
        })
    }
}

/// A queue's wake message: `<limit>|<due>|<t1>,<t2>,...[|<s1>,<s2>,...]`.
///
/// - `limit`: waiters whose ticket is at most this may try now (0: none),
///   except those listed in `skip`.
/// - `due`: ms until the waiter allowed to go loses its place (its entry's
///   grace runs out), after which the next in line may go; 0 when none.
/// - `t1, t2, ...`: the first tickets of the queue in order, so a waiter
///   finds its position without asking Redis.
/// - `s1, s2, ...` (optional): tickets up to `limit` that stay put (a
///   semaphore's waiters passed over by later ones that fit).
#[derive(Debug, PartialEq, Eq)]
pub struct QueueNote {
    pub limit: u64,
    pub due: u64,
    pub tickets: Vec<u64>,
    pub skip: Vec<u64>,
}

fn ticket_list(list: &str) -> Option<Vec<u64>> {
    match list {
        "" => Some(Vec::new()),
        list => list.split(',').map(|t| t.parse().ok()).collect(),
    }
}

/// How many tickets a wake message lists at most (the scripts' `SHOWN`).
const QUEUE_SHOWN: usize = 100;

impl QueueNote {
    pub fn parse(payload: &str) -> Option<QueueNote> {
        let mut parts = payload.split('|');
        let limit = parts.next()?.parse().ok()?;
        let due = parts.next()?.parse().ok()?;
        let tickets = ticket_list(parts.next()?)?;
        let skip = ticket_list(parts.next().unwrap_or(""))?;
        if parts.next().is_some() {
            return None;
        }
        Some(QueueNote {
            limit,
            due,
            tickets,
            skip,
        })
    }
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
fn observe(latest: &watch::Sender<Latest>, blocked: Blocked) -> bool {
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
    latest: watch::Sender<Latest>,
    /// [`WaitMode::Queue`]: who waits for which ticket, and the latest
    /// wake message (see [`Desk`]).
    desk: Option<Arc<Desk>>,
    /// [`WaitMode::Broadcast`]: the latest read one waiter made for all.
    reads: watch::Sender<Option<GroupRead>>,
}

/// [`WaitMode::Broadcast`]: what one waiter's read found, announced to the
/// whole group so that the others need not ask Redis themselves.
#[derive(Debug, Clone)]
struct GroupRead {
    /// When the read started. A waiter takes only reads that started after
    /// its own first try had its answer (a read is never older than what
    /// the waiter already knows from Redis).
    started: Instant,
    /// The group's wake sequence number when the read started: a waiter
    /// that has since taken a newer message does not take the read (the
    /// message may be the newer news).
    seq: u64,
    /// `Ok(None)`: released; `Ok(Some(_))`: still blocked; `Err`: the read
    /// failed.
    found: Result<Option<Blocked>, StoreError>,
}

/// Holds the group's read for a broadcast waiter; dropped without an
/// announcement (its request went away mid-read) it still wakes the
/// others, so that one of them reads instead.
struct ReadTurn<'a> {
    reads: &'a watch::Sender<Option<GroupRead>>,
    _baton: tokio::sync::MutexGuard<'a, ()>,
    announced: bool,
}

impl ReadTurn<'_> {
    fn announce(mut self, read: GroupRead) {
        self.reads.send_replace(Some(read));
        self.announced = true;
    }
}

impl Drop for ReadTurn<'_> {
    fn drop(&mut self) {
        if !self.announced {
            self.reads.send_modify(|_| {});
        }
    }
}

/// The local side of a queue kept in Redis ([`WaitMode::Queue`]): one task
/// per object and instance reads each wake message once and wakes only
/// the waiters it concerns — those it lets go, those whose entry is gone,
/// the first two in line, and waiters that report their position (SSE)
/// when it changed. A handoff among many long-polls wakes one or two
/// tasks, not all of them.
#[derive(Default)]
struct Desk {
    /// seat id → the waiter sitting there.
    seats: parking_lot::Mutex<HashMap<u64, Seat>>,
    /// The latest wake message; `None` after a reconnect (look, all of you).
    note: parking_lot::Mutex<Option<Arc<QueueNote>>>,
    next_seat: AtomicU64,
}

struct Seat {
    ticket: u64,
    /// The position the waiter last knew.
    position: Option<u64>,
    /// Whether it reports positions (SSE `waiting` events).
    reports: bool,
    wake: Arc<tokio::sync::Notify>,
}

impl Desk {
    /// Reads the group's wake messages until the subscription or the
    /// group ends.
    async fn serve(desk: std::sync::Weak<Self>, mut messages: watch::Receiver<Note>) {
        while messages.changed().await.is_ok() {
            let Some(desk) = desk.upgrade() else { return };
            let note = messages.borrow_and_update().clone();
            let parsed = note
                .payload
                .as_deref()
                .and_then(QueueNote::parse)
                .map(Arc::new);
            *desk.note.lock() = parsed.clone();
            for seat in desk.seats.lock().values() {
                if concerns(parsed.as_deref(), seat) {
                    seat.wake.notify_one();
                }
            }
        }
    }

    fn sit(
        &self,
        ticket: u64,
        position: Option<u64>,
        reports: bool,
    ) -> (u64, Arc<tokio::sync::Notify>) {
        let id = self.next_seat.fetch_add(1, Ordering::Relaxed);
        let wake = Arc::new(tokio::sync::Notify::new());
        let seat = Seat {
            ticket,
            position,
            reports,
            wake: wake.clone(),
        };
        self.seats.lock().insert(id, seat);
        (id, wake)
    }

    fn update(&self, id: u64, ticket: u64, position: Option<u64>) {
        if let Some(seat) = self.seats.lock().get_mut(&id) {
            seat.ticket = ticket;
            seat.position = position;
        }
    }
}

/// What a wake message (`None`: a reconnect) says to the waiter holding
/// `ticket`. The desk and the waiter read it the same way.
enum Reading {
    /// Try now: let go, or after a reconnect, or its entry is gone (the
    /// message lists the whole queue and not its ticket: enter again).
    Go,
    /// Still queued at `position`; `due` as in [`QueueNote`].
    At { position: u64, due: u64 },
    /// Queued beyond the tickets the message lists.
    Behind,
}

fn reading(note: Option<&QueueNote>, ticket: u64) -> Reading {
    let Some(n) = note else { return Reading::Go };
    if ticket <= n.limit && !n.skip.contains(&ticket) {
        return Reading::Go;
    }
    match n.tickets.iter().position(|t| *t == ticket) {
        Some(i) => Reading::At {
            position: i as u64,
            due: n.due,
        },
        None if n.tickets.len() < QUEUE_SHOWN => Reading::Go,
        None => Reading::Behind,
    }
}

/// Whether a wake message concerns a seated waiter: it must try, it is
/// one of the first two in line, or it reports positions and its own moved.
fn concerns(note: Option<&QueueNote>, seat: &Seat) -> bool {
    match reading(note, seat.ticket) {
        Reading::Go => true,
        Reading::At { position, .. } => {
            position <= 1 || (seat.reports && seat.position != Some(position))
        }
        Reading::Behind => false,
    }
}

/// Leaves the desk when the wait ends, however it ends.
struct Seated<'a> {
    desk: &'a Desk,
    id: u64,
}

impl Drop for Seated<'_> {
    fn drop(&mut self) {
        self.desk.seats.lock().remove(&self.id);
    }
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
    wake: Option<watch::Receiver<Note>>,
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
                latest: watch::Sender::new(Latest::default()),
                desk,
                reads: watch::Sender::new(None),
            })
        })
    }

    /// Requests currently waiting on this instance for the object.
    pub fn waiters_on(&self, channel: &str) -> u64 {
        self.inner.groups.users(channel) as u64
    }

    /// The pub/sub hub's connection state (see [`Hub::connected`]).
    pub fn subscribed(&self) -> watch::Receiver<bool> {
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
    group: Option<&watch::Sender<Latest>>,
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
    pub async fn wait<T, F, Fut>(
        self,
        deadline: Instant,
        first: Blocked,
        mut attempt: F,
        mut progress: impl FnMut(Blocked),
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
        let shutdown = self.engine.shutdown.clone();
        let latest = &self.group().latest;
        let now = Instant::now();
        // Our own first answer is as fresh as anything the group has.
        observe(latest, first);
        let mut seen = latest.subscribe();
        seen.mark_unchanged();
        let mut tick = tokio::time::interval_at(now + PROGRESS_EVERY, PROGRESS_EVERY);
        let report = |progress: &mut dyn FnMut(Blocked)| {
            if let Some(b) = latest.borrow().blocked_now() {
                progress(b);
            }
        };

        // Phase 1: queue for the baton behind earlier local waiters. The
        // lock future is created once so that progress ticks don't lose
        // our place in the FIFO.
        let baton = self.group().baton.lock();
        tokio::pin!(baton);
        let _baton = loop {
            tokio::select! {
                biased;
                // Cancel-safe arms: dropping `baton` leaves the queue.
                _ = shutdown.cancelled() => return Err(WaitError::ShuttingDown),
                guard = &mut baton => break guard,
                _ = sleep_until(deadline) => {
                    let known = || latest.borrow().timed_out();
                    return last_look(&shutdown, deadline, attempt(), Some(latest), known).await;
                }
                _ = seen.changed() => report(&mut progress),
                _ = tick.tick() => report(&mut progress),
            }
        };

        // Phase 2: we are this instance's active waiter for the object.
        // The receiver is created (and so marked seen) before each check:
        // a notification that lands between the check and the wait below
        // still completes `changed()`.
        let mut wake = self.group().subscription.receiver();
        let mut backoff = Backoff::default();
        loop {
            wake.borrow_and_update();
            let before = latest.borrow().blocked_now();
            let result = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Err(WaitError::ShuttingDown),
                result = bounded(deadline, attempt()) => result,
            };
            let recheck = match result {
                Ok(Attempt::Granted(grant)) => return Ok(Outcome::Granted(grant)),
                Ok(Attempt::Refused(r)) => return Err(WaitError::Refused(r)),
                Ok(Attempt::Blocked(now_blocked)) => {
                    backoff = Backoff::default();
                    observe(latest, now_blocked.clone());
                    if differs(before.as_ref(), &now_blocked) {
                        progress(now_blocked.clone());
                    }
                    // Pub/sub is at-most-once: re-check by ourselves no
                    // later than the blocker's remaining lease (+1 ms to
                    // land after expiry).
                    let after = Duration::from_millis(now_blocked.retry_after_ms.saturating_add(1));
                    let now = Instant::now();
                    self.engine.heard(now + after.max(MIN_RECHECK), now)
                }
                Err(e) if e.is_transient() => {
                    latest.send_if_modified(|l| l.failing.replace(e).is_none());
                    Instant::now() + backoff.next()
                }
                Err(e) => return Err(WaitError::Backend(e)),
            };
            loop {
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return Err(WaitError::ShuttingDown),
                    // The sender lives as long as our subscription, so
                    // `changed` never reports a closed channel here.
                    _ = wake.changed() => break,
                    _ = sleep_until(recheck.min(deadline)) => {
                        if Instant::now() >= deadline {
                            let known = || latest.borrow().timed_out();
                            return last_look(&shutdown, deadline, attempt(), Some(latest), known)
                                .await;
                        }
                        break;
                    }
                    _ = tick.tick() => report(&mut progress),
                }
            }
        }
    }
}

impl Waiter {
    /// [`WaitMode::Queue`]: wait on our own for a wake message that lets
    /// our ticket go (or our own re-check time), then try.
    async fn wait_queued<T, F, Fut>(
        self,
        desk: &Desk,
        deadline: Instant,
        first: Blocked,
        mut place: Place,
        mut attempt: F,
        mut progress: impl FnMut(Blocked),
    ) -> Result<Outcome<T>, WaitError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Attempt<T>, StoreError>>,
    {
        let shutdown = self.engine.shutdown.clone();
        let (seat, wake) = desk.sit(place.ticket, first.position, self.reports);
        let _seated = Seated { desk, id: seat };
        let mut own = Own::new(first);
        // A wake message sent between our first try and the subscription
        // above is lost to us (it may have let us go: the head of a fair
        // lock, every reader before a writer), so we look once more at
        // once. One try per arrival, none per handoff.
        let mut recheck = Instant::now();
        let now = Instant::now();
        let mut tick = tokio::time::interval_at(now + PROGRESS_EVERY, PROGRESS_EVERY);
        loop {
            let try_now = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Err(WaitError::ShuttingDown),
                _ = sleep_until(deadline) => {
                    // Our last try's answer (Redis's) has our position now.
                    return own.last_look(&shutdown, deadline, attempt(), &mut progress).await;
                }
                _ = wake.notified() => {
                    let note = desk.note.lock().clone();
                    match reading(note.as_deref(), place.ticket) {
                        Reading::Go => true,
                        Reading::At { position, due } => {
                            if own.current.0.position != Some(position) {
                                own.current.0.position = Some(position);
                                desk.update(seat, place.ticket, Some(position));
                                progress(own.now());
                            }
                            if position == 1 && due > 0 {
                                recheck = recheck
                                    .min(Instant::now() + Duration::from_millis(due + 1));
                            }
                            // A new head asks once, to learn when the
                            // holder's lease ends.
                            position == 0
                        }
                        Reading::Behind => false,
                    }
                }
                _ = sleep_until(recheck) => true,
                _ = tick.tick() => {
                    progress(own.now());
                    false
                }
            };
            if !try_now {
                continue;
            }
            match own
                .try_once(&shutdown, deadline, attempt(), &mut progress)
                .await
            {
                Tried::Over(outcome) => return outcome,
                Tried::Blocked(blocked) => {
                    // A long-poll's try answers with its place in this
                    // mode; none means the holder left the queue while we
                    // waited (a DELETE): the wait ends, not acquired.
                    let Some(now_at) = blocked.place else {
                        return Ok(Outcome::TimedOut(blocked));
                    };
                    place = now_at;
                    desk.update(seat, place.ticket, blocked.position);
                    recheck = self.engine.heard(recheck_after(&place), Instant::now());
                }
                Tried::Failed(pause) => recheck = Instant::now() + pause,
            }
        }
    }
}

impl Waiter {
    /// [`WaitMode::Watch`]: wait for a change on any of our channels (or
    /// for our blockers' leases to end), then try; no baton, no queue.
    async fn wait_watching<T, F, Fut>(
        self,
        deadline: Instant,
        first: Blocked,
        mut attempt: F,
        mut progress: impl FnMut(Blocked),
    ) -> Result<Outcome<T>, WaitError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Attempt<T>, StoreError>>,
    {
        let shutdown = self.engine.shutdown.clone();
        let mut wakes: Vec<watch::Receiver<Note>> = self
            .groups
            .iter()
            .map(|(_, g)| g.subscription.receiver())
            .collect();
        let mut own = Own::new(first);
        // A release between our first try and the subscriptions above is
        // lost to us: look once more at once.
        let mut recheck = Instant::now();
        let now = Instant::now();
        let mut tick = tokio::time::interval_at(now + PROGRESS_EVERY, PROGRESS_EVERY);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Err(WaitError::ShuttingDown),
                _ = sleep_until(deadline) => {
                    return own.last_look(&shutdown, deadline, attempt(), &mut progress).await;
                }
                // The senders live as long as our groups' subscriptions,
                // so `changed` never reports a closed channel here.
                _ = futures_util::future::select_all(
                    wakes.iter_mut().map(|w| Box::pin(w.changed())),
                ) => {}
                _ = sleep_until(recheck) => {}
                _ = tick.tick() => {
                    progress(own.now());
                    continue;
                }
            }
            // Seen before the try: a change during it makes us look again.
            for wake in &mut wakes {
                wake.borrow_and_update();
            }
            match own
                .try_once(&shutdown, deadline, attempt(), &mut progress)
                .await
            {
                Tried::Over(outcome) => return outcome,
                Tried::Blocked(blocked) => {
                    // Pub/sub is at-most-once: look again by ourselves when
                    // the blockers' leases end (+1 ms to land after).
                    let after = Duration::from_millis(blocked.retry_after_ms.saturating_add(1));
                    let now = Instant::now();
                    recheck = self.engine.heard(now + after.max(MIN_RECHECK), now);
                }
                Tried::Failed(pause) => recheck = Instant::now() + pause,
            }
        }
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

/// Why a broadcast waiter wants a read.
#[derive(Debug, Clone, Copy)]
struct Need {
    /// Only a read that started once the group's wake sequence number was
    /// at least this will do (after a reconnect: a read made since).
    seq: u64,
    /// Only a read that started after this will do (a re-check timer:
    /// something newer than what scheduled it).
    after: Option<Instant>,
}

impl Need {
    fn met_by(&self, read: &GroupRead) -> bool {
        read.seq >= self.seq && self.after.is_none_or(|after| read.started > after)
    }
}

/// When a broadcast waiter that learned `blocked` at `at` looks again by
/// itself: at the blocker's remaining life (+1 ms to land after expiry),
/// and at least every [`PROGRESS_EVERY`] (pub/sub is at-most-once).
fn broadcast_recheck(blocked: &Blocked, at: Instant) -> Instant {
    at + Duration::from_millis(blocked.retry_after_ms.saturating_add(1))
        .clamp(MIN_RECHECK, PROGRESS_EVERY)
}

/// What a broadcast waiter knows.
struct Watching {
    /// The last state, and when it was learned.
    current: (Blocked, Instant),
    /// The sequence number of the last wake message taken.
    seen_seq: u64,
    /// When it looks again by itself.
    recheck: Instant,
    /// When what it knows was learned: only a read that started later
    /// can tell it more.
    basis: Instant,
    /// Set while reads fail; cleared by the next answer.
    failing: Option<StoreError>,
    backoff: Backoff,
}

/// What a state (from a message or a read) tells a broadcast waiter.
enum News {
    /// Released: every waiter goes.
    Released,
    /// Its position fell: report it.
    Fell(Blocked),
    /// Nothing to report.
    Nothing,
}

impl Watching {
    /// Takes what a group read found, unless the waiter knows something
    /// newer: a read that started before its last message or its last
    /// answer.
    fn read(&mut self, read: &GroupRead) -> News {
        if read.seq < self.seen_seq || read.started <= self.basis {
            return News::Nothing;
        }
        match &read.found {
            Err(e) => {
                self.basis = read.started;
                self.failing = Some(e.clone());
                self.recheck = Instant::now() + self.backoff.next();
                News::Nothing
            }
            Ok(None) => News::Released,
            Ok(Some(b)) => {
                // Reads only see what happened after what the waiter
                // knows, and a wait's position only falls: a higher one
                // means it was released and set again in between.
                if let (Some(now), Some(before)) = (b.position, self.current.0.position)
                    && now > before
                {
                    return News::Released;
                }
                self.failing = None;
                self.backoff = Backoff::default();
                self.learn(b.clone(), read.started)
            }
        }
    }

    /// Takes a wake message: `None` when it calls for a read.
    fn message(&mut self, note: &Note) -> Option<News> {
        self.seen_seq = note.seq;
        let n = note.payload.as_deref().and_then(BroadcastNote::parse)?;
        if n.position == 0 {
            return Some(News::Released);
        }
        // A higher position than known is an older message: no news.
        if self.current.0.position.is_some_and(|p| n.position >= p) {
            return Some(News::Nothing);
        }
        let blocked = Blocked {
            retry_after_ms: n.recheck_ms,
            position: Some(n.position),
            held_by: self.current.0.held_by.clone(),
            ..Blocked::default()
        };
        Some(self.learn(blocked, Instant::now()))
    }

    /// When it looks again by itself: [`Watching::recheck`], or sooner
    /// while the hub is not subscribed (unless its reads are failing:
    /// those keep their backoff).
    fn next_look(&self, engine: &Inner) -> Instant {
        match self.failing {
            Some(_) => self.recheck,
            None => engine.heard(self.recheck, self.basis),
        }
    }

    fn learn(&mut self, blocked: Blocked, at: Instant) -> News {
        let fell = blocked.position < self.current.0.position;
        self.recheck = broadcast_recheck(&blocked, at);
        self.current = (blocked.clone(), at);
        self.basis = at;
        if fell {
            News::Fell(blocked)
        } else {
            News::Nothing
        }
    }
}

impl Waiter {
    /// [`WaitMode::Broadcast`]: waits until a wake message (or a read)
    /// releases every waiter, `deadline` passes, or shutdown.
    ///
    /// `first` is what the caller's first try returned; the waiter must
    /// have been admitted before that try. `attempt` reads the object: it
    /// runs only to recover from lost messages and silent expiry, and then
    /// for the whole group. `released` makes what a release answers
    /// (`None`: the waiter tries for itself). `progress` is told the state
    /// whenever its `position` falls, and at least every
    /// [`PROGRESS_EVERY`].
    pub async fn wait_broadcast<T, F, Fut>(
        mut self,
        deadline: Instant,
        first: Blocked,
        mut attempt: F,
        mut released: impl FnMut() -> Option<T>,
        mut progress: impl FnMut(Blocked),
    ) -> Result<Outcome<T>, WaitError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Attempt<T>, StoreError>>,
    {
        let shutdown = self.engine.shutdown.clone();
        let group = self.group().clone();
        // Admitted in another mode: messages from now on only.
        let mut wake = (self.wake.take()).unwrap_or_else(|| group.subscription.receiver());
        let began = Instant::now();
        let mut w = Watching {
            recheck: broadcast_recheck(&first, began),
            current: (first, began),
            // The message it was admitted at, until it takes another.
            seen_seq: wake.borrow().seq,
            basis: began,
            failing: None,
            backoff: Backoff::default(),
        };
        let mut need: Option<Need> = None;
        let mut reads = group.reads.subscribe();
        let mut tick = tokio::time::interval_at(began + PROGRESS_EVERY, PROGRESS_EVERY);

        loop {
            let mut news = News::Nothing;
            if let Some(n) = need {
                let latest = group.reads.borrow().clone();
                if let Some(read) = latest.filter(|r| n.met_by(r)) {
                    // Another waiter read for us.
                    need = None;
                    news = w.read(&read);
                } else if let Ok(baton) = group.baton.try_lock() {
                    // Read for the group (if another waiter is reading
                    // right now, its announcement wakes us below).
                    let turn = ReadTurn {
                        reads: &group.reads,
                        _baton: baton,
                        announced: false,
                    };
                    need = None;
                    let seq = group.subscription.receiver().borrow().seq;
                    let started = Instant::now();
                    let result = tokio::select! {
                        biased;
                        _ = shutdown.cancelled() => return Err(WaitError::ShuttingDown),
                        result = bounded(deadline, attempt()) => result,
                    };
                    let found = match result {
                        Ok(Attempt::Granted(grant)) => {
                            let found = Ok(None);
                            turn.announce(GroupRead {
                                started,
                                seq,
                                found,
                            });
                            return Ok(Outcome::Granted(grant));
                        }
                        Ok(Attempt::Refused(r)) => return Err(WaitError::Refused(r)),
                        Ok(Attempt::Blocked(b)) => Ok(Some(b)),
                        Err(e) if e.is_transient() => Err(e),
                        Err(e) => return Err(WaitError::Backend(e)),
                    };
                    let read = GroupRead {
                        started,
                        seq,
                        found,
                    };
                    turn.announce(read.clone());
                    news = w.read(&read);
                }
            }
            match news {
                News::Released => match released() {
                    Some(t) => return Ok(Outcome::Granted(t)),
                    // Ask Redis for the answer (the next read that starts).
                    None => {
                        need = Some(Need {
                            seq: w.seen_seq,
                            after: Some(Instant::now()),
                        });
                        continue;
                    }
                },
                News::Fell(b) => progress(b),
                News::Nothing => {}
            }
            let news = tokio::select! {
                biased;
                // Cancel-safe arms: a waiter here holds no place anywhere.
                _ = shutdown.cancelled() => return Err(WaitError::ShuttingDown),
                _ = sleep_until(deadline) => {
                    return match w.failing {
                        Some(e) => Err(WaitError::Backend(e)),
                        None => Ok(Outcome::TimedOut(aged(&w.current.0, w.current.1))),
                    };
                }
                // The sender lives as long as our group's subscription.
                _ = wake.changed() => {
                    let note = wake.borrow_and_update().clone();
                    match w.message(&note) {
                        Some(news) => news,
                        // A reconnect (messages may be lost), or a message
                        // we cannot read: look, once for the group.
                        None => {
                            need = Some(Need { seq: note.seq, after: None });
                            News::Nothing
                        }
                    }
                }
                _ = reads.changed() => {
                    let latest = reads.borrow_and_update().clone();
                    latest.map_or(News::Nothing, |read| w.read(&read))
                }
                _ = sleep_until(w.next_look(&self.engine)), if need.is_none() => {
                    need = Some(Need { seq: w.seen_seq, after: Some(w.basis) });
                    News::Nothing
                }
                _ = tick.tick() => {
                    progress(aged(&w.current.0, w.current.1));
                    News::Nothing
                }
            };
            match news {
                News::Released => match released() {
                    Some(t) => return Ok(Outcome::Granted(t)),
                    None => {
                        need = Some(Need {
                            seq: w.seen_seq,
                            after: Some(Instant::now()),
                        })
                    }
                },
                News::Fell(b) => progress(b),
                News::Nothing => {}
            }
        }
    }
}

/// When a queued waiter looks again by itself: when its place says so, or
/// else at the safety re-check (pub/sub is at-most-once).
fn recheck_after(place: &Place) -> Instant {
    let after = place
        .recheck_ms
        .map(|ms| Duration::from_millis(ms.saturating_add(1)).max(MIN_RECHECK))
        .unwrap_or(PROGRESS_EVERY);
    Instant::now() + after
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::backend::Connector;

    fn engine() -> (WaitEngine, Hub) {
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

    /// A queued waiter that goes away leaves nothing subscribed: its
    /// group, the desk and the hub's channel entry all go with it.
    #[tokio::test]
    async fn a_departed_queued_waiter_leaves_nothing_subscribed() {
        let (engine, hub) = engine();
        let waiter = engine.admit("t:q", WaitMode::Queue).unwrap();
        let desk = Arc::downgrade(waiter.group().desk.as_ref().expect("a queue has a desk"));
        assert_eq!(hub.channels(), 1);
        drop(waiter);
        tokio::task::yield_now().await;
        assert!(desk.upgrade().is_none(), "the desk is gone");
        assert_eq!(hub.channels(), 0, "the channel entry is gone");
        assert_eq!(engine.waiters_on("t:q"), 0);
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

    #[test]
    fn broadcast_notes_parse_and_reject_garbage() {
        assert_eq!(
            BroadcastNote::parse("3|86399000"),
            Some(BroadcastNote {
                position: 3,
                recheck_ms: 86_399_000
            })
        );
        assert_eq!(
            BroadcastNote::parse("0|0"),
            Some(BroadcastNote {
                position: 0,
                recheck_ms: 0
            })
        );
        for garbage in ["open", "", "3", "3|", "|5", "-1|5", "1|2|3"] {
            assert_eq!(BroadcastNote::parse(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn queue_notes_parse_and_reject_garbage() {
        assert_eq!(
            QueueNote::parse("7|120|7,9,12"),
            Some(QueueNote {
                limit: 7,
                due: 120,
                tickets: vec![7, 9, 12],
                skip: vec![]
            })
        );
        assert_eq!(
            QueueNote::parse("12|0|7,9,12|7"),
            Some(QueueNote {
                limit: 12,
                due: 0,
                tickets: vec![7, 9, 12],
                skip: vec![7]
            })
        );
        assert_eq!(
            QueueNote::parse("0|0|"),
            Some(QueueNote {
                limit: 0,
                due: 0,
                tickets: vec![],
                skip: vec![]
            })
        );
        for garbage in [
            "free",
            "",
            "1|2",
            "1|x|3",
            "1|2|3,,4",
            "1|2|3|x",
            "1|2|3|4|5",
        ] {
            assert_eq!(QueueNote::parse(garbage), None, "{garbage:?}");
        }
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
