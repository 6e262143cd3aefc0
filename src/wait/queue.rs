//! [`WaitMode::Queue`](super::WaitMode::Queue): for objects whose order
//! lives in Redis (fair locks, rwlocks, semaphores). A local FIFO would be
//! wrong there: a waiter that polls again keeps an early place in Redis
//! but would queue locally behind later arrivals. So every waiter waits on
//! its own for the wake message that names its ticket (see [`QueueNote`]):
//! a release wakes only the head, wherever it waits, and the other waiters
//! update their position from the same message without asking Redis.
//! Locally, one task per object (the [`Desk`]) reads each message and
//! wakes only the waiters it concerns.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

use super::{MIN_RECHECK, Outcome, Own, PROGRESS_EVERY, Tried, WaitError, Waiter};
use crate::coord::{Attempt, Blocked, Place};
use crate::store::StoreError;
use crate::store::pubsub::Note;

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

/// The local side of a queue kept in Redis ([`WaitMode::Queue`]): one task
/// per object and instance reads each wake message once and wakes only
/// the waiters it concerns — those it lets go, those whose entry is gone,
/// the first two in line, and waiters that report their position (SSE)
/// when it changed. A handoff among many long-polls wakes one or two
/// tasks, not all of them.
#[derive(Default)]
pub(super) struct Desk {
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
    pub(super) async fn serve(desk: std::sync::Weak<Self>, mut messages: watch::Receiver<Note>) {
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

impl Waiter {
    /// [`WaitMode::Queue`]: wait on our own for a wake message that lets
    /// our ticket go (or our own re-check time), then try.
    pub(super) async fn wait_queued<T, F, Fut>(
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
    use super::super::WaitMode;
    use super::super::tests::engine;
    use super::*;

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
}
