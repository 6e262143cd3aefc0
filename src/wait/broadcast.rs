//! [`WaitMode::Broadcast`](super::WaitMode::Broadcast) (count-down
//! latches): a state change releases every waiter at once, and its wake
//! message carries the new state itself (see [`BroadcastNote`]): every
//! waiter answers from the message, with no Redis read at all. Only a
//! reconnect (messages may have been lost), a message it cannot read, or
//! its own re-check timer (pub/sub is at-most-once; the object may expire
//! silently) makes a waiter look, and then one waiter of the group reads
//! for all: it announces what it found to the others ([`GroupRead`]), who
//! take it instead of asking Redis. It does not look once more at the
//! deadline (see [`last_look`](super::last_look)).

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

use super::{
    Backoff, Inner, MIN_RECHECK, Outcome, PROGRESS_EVERY, WaitError, Waiter, aged, bounded,
};
use crate::coord::{Attempt, Blocked};
use crate::store::StoreError;
use crate::store::pubsub::Note;

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

/// [`WaitMode::Broadcast`]: what one waiter's read found, announced to the
/// whole group so that the others need not ask Redis themselves.
#[derive(Debug, Clone)]
pub(super) struct GroupRead {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
