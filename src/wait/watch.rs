//! [`WaitMode::Watch`](super::WaitMode::Watch): for a request that waits
//! on several objects at once (a multi-lock). It joins every object's
//! group for the subscription only, never takes a baton (so two waiters of
//! overlapping sets cannot wait for each other locally), and tries
//! whenever any of its channels announces a change or its blockers'
//! leases end. So does a rate limiter's waiter: its permits are reserved
//! for a time of its own, which its `retry_after_ms` names, so it waits
//! for that time (or a message: the limiter was deleted), never for
//! another waiter.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

use super::{MIN_RECHECK, Outcome, Own, PROGRESS_EVERY, Tried, WaitError, Waiter};
use crate::coord::{Attempt, Blocked};
use crate::store::StoreError;
use crate::store::pubsub::Note;

impl Waiter {
    /// [`WaitMode::Watch`]: wait for a change on any of our channels (or
    /// for our blockers' leases to end), then try; no baton, no queue.
    pub(super) async fn wait_watching<T, F, Fut>(
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
