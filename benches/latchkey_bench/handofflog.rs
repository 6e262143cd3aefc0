//! What the waiters of a handoff run share, over HTTP ([`crate::handoff`])
//! and straight on Redis ([`crate::wakeone`]) alike: the log of grants and
//! releases, the stop signal, the count of waits that ended without a
//! grant.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

/// One entry of the shared log.
#[derive(Clone, Copy)]
pub enum Event {
    /// A 201 with `token` reached waiter `task`.
    Granted { token: u64, task: usize },
    /// The release of token `t` is about to be sent.
    ReleaseSent(u64),
    /// The 200 of the release of token `t` reached the releaser.
    Released(u64),
}

/// Time-ordered log: each instant is taken under the mutex.
#[derive(Default)]
pub struct Log(pub Mutex<Vec<(Event, Instant)>>);

impl Log {
    pub fn record(&self, event: Event) {
        let mut log = self.0.lock().expect("handoff log poisoned");
        log.push((event, Instant::now()));
    }
}

/// What every waiter of a run shares.
#[derive(Default)]
pub struct Shared {
    pub log: Log,
    pub stop: CancellationToken,
    /// Waits that ended without a grant: long-polls answered 409 (must
    /// stay 0: WAIT_MS ≫ the run), or floor waiters that looked again by
    /// themselves and found the lock free (a lost wake-up).
    pub timeouts: AtomicU64,
}
