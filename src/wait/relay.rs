//! [`WaitMode::Relay`](super::WaitMode::Relay): right for objects whose
//! waiters are interchangeable (plain locks). Only the waiter holding the
//! group's baton talks to Redis; the others sleep until it is granted,
//! times out or goes away, and then the next one tries at once —
//! meanwhile they report the lead's latest observation, so their 409s and
//! SSE `waiting` events stay current. A release costs one re-check per
//! instance, not one per waiter: no thundering herd, and local waiters are
//! served in arrival order. When the lead is granted and its caller knows
//! what the grant holds the object for, the next lead does not ask at
//! once (it would be refused): it waits for the release's wake message, or
//! the grant's lease to end ([`super::Handover`]).

use std::future::Future;
use std::time::Duration;

use tokio::time::{Instant, sleep_until};

use super::{
    Backoff, Handover, MIN_RECHECK, Outcome, PROGRESS_EVERY, WaitError, Waiter, bounded, differs,
    last_look, observe,
};
use crate::coord::{Attempt, Blocked};
use crate::store::StoreError;

impl Waiter {
    /// [`WaitMode::Relay`](super::WaitMode::Relay): queue for the group's
    /// baton behind earlier local waiters, then ask Redis for the group
    /// until granted, the deadline, or shutdown. Granted, it leaves the
    /// next lead a [`Handover`] when `granted_blocks` says what its grant
    /// holds the object for.
    pub(super) async fn wait_relayed<T, F, Fut>(
        self,
        deadline: Instant,
        first: Blocked,
        mut attempt: F,
        mut progress: impl FnMut(Blocked),
        granted_blocks: Option<Blocked>,
    ) -> Result<Outcome<T>, WaitError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Attempt<T>, StoreError>>,
    {
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
        // The turn came from a lead of ours that was granted, and no wake
        // message came since its granted try began: the object is held by
        // that grant, so wait for the release's message (or the grant's
        // end) instead of asking now. Its receiver has not seen the
        // messages since that try, so none of them is missed.
        let mut held_until = None;
        let handover = self.group().handover.lock().take();
        if let Some(Handover {
            wake: theirs,
            until,
        }) = handover
            && matches!(theirs.has_changed(), Ok(false))
            && Instant::now() < until
        {
            wake = theirs;
            held_until = Some(until);
        }
        let mut backoff = Backoff::default();
        loop {
            let recheck = if let Some(until) = held_until.take() {
                // As if a try had found the grant's hold (+1 ms to land
                // after its end).
                self.engine
                    .heard(until + Duration::from_millis(1), Instant::now())
            } else {
                wake.borrow_and_update();
                let before = latest.borrow().blocked_now();
                let tried_at = Instant::now();
                let result = tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return Err(WaitError::ShuttingDown),
                    result = bounded(deadline, attempt()) => result,
                };
                match result {
                    Ok(Attempt::Granted(grant)) => {
                        if let Some(held) = granted_blocks {
                            // The grant holds no longer than its lease from
                            // the try's start; waiters of ours report its
                            // holder from now on.
                            let until = tried_at + Duration::from_millis(held.retry_after_ms);
                            observe(latest, held);
                            *self.group().handover.lock() = Some(Handover { wake, until });
                        }
                        return Ok(Outcome::Granted(grant));
                    }
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
                        let after =
                            Duration::from_millis(now_blocked.retry_after_ms.saturating_add(1));
                        let now = Instant::now();
                        self.engine.heard(now + after.max(MIN_RECHECK), now)
                    }
                    Err(e) if e.is_transient() => {
                        latest.send_if_modified(|l| l.failing.replace(e).is_none());
                        Instant::now() + backoff.next()
                    }
                    Err(e) => return Err(WaitError::Backend(e)),
                }
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
