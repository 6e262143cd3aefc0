//! [`WaitMode::Relay`](super::WaitMode::Relay): right for objects whose
//! waiters are interchangeable (plain locks). Only the waiter holding the
//! group's baton talks to Redis; the others sleep until it is granted,
//! times out or goes away, and then the next one tries at once —
//! meanwhile they report the lead's latest observation, so their 409s and
//! SSE `waiting` events stay current. A release costs one re-check per
//! instance, not one per waiter: no thundering herd, and local waiters are
//! served in arrival order.

use std::future::Future;
use std::time::Duration;

use tokio::time::{Instant, sleep_until};

use super::{
    Backoff, MIN_RECHECK, Outcome, PROGRESS_EVERY, WaitError, Waiter, bounded, differs, last_look,
    observe,
};
use crate::coord::{Attempt, Blocked};
use crate::store::StoreError;

impl Waiter {
    /// [`WaitMode::Relay`](super::WaitMode::Relay): queue for the group's
    /// baton behind earlier local waiters, then ask Redis for the group
    /// until granted, the deadline, or shutdown.
    pub(super) async fn wait_relayed<T, F, Fut>(
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
