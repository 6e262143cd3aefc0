//! The coordination primitives as plain Rust APIs over the [`Store`]:
//! each operation is one atomic Lua script; blocking is the wait engine's
//! business ([`crate::wait`]), and HTTP the adapter's.
//!
//! The types every primitive's "try" shares live here: an [`AttemptId`]
//! names one try so that exactly what it granted can be given back, and a
//! try either grants or reports what [`Blocked`] it.
//!
//! [`Store`]: crate::store::Store

pub mod locks;

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Names one grant attempt, unique across instances and restarts: a random
/// per-process prefix and a counter. The acquire script records the id of
/// the try that granted, so a give-back (undo) removes that grant and
/// nothing else — not another request's hold under the same holder id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptId(String);

impl AttemptId {
    pub fn new() -> Self {
        static PROCESS: LazyLock<String> = LazyLock::new(|| {
            let mut bytes = [0u8; 8];
            getrandom::fill(&mut bytes).expect("the OS random source works");
            bytes.iter().map(|b| format!("{b:02x}")).collect()
        });
        static NEXT: AtomicU64 = AtomicU64::new(0);
        AttemptId(format!(
            "{}.{:x}",
            *PROCESS,
            NEXT.fetch_add(1, Ordering::Relaxed)
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for AttemptId {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a request could not be granted (yet): what its "not acquired"
/// answer and its SSE `waiting` events report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Blocked {
    /// The hint for clients: when trying again may succeed, in ms.
    pub retry_after_ms: u64,
    /// Waiters ahead, where the resource queues fairly.
    pub position: Option<u64>,
    /// The waiter's place in a queue kept in Redis, where there is one.
    pub place: Option<Place>,
}

/// A waiter's entry in a queue kept in Redis (fair locks): the engine
/// wakes it when the queue's wake message names its ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// Arrival order in the queue; kept across polls while the entry lives.
    pub ticket: u64,
    /// When the waiter should look again by itself, in ms; `None` when
    /// only a wake message (or the safety re-check) should make it look.
    pub recheck_ms: Option<u64>,
}

impl Blocked {
    pub fn after(retry_after_ms: u64) -> Self {
        Blocked {
            retry_after_ms,
            ..Blocked::default()
        }
    }
}

/// The result of one try.
#[derive(Debug)]
pub enum Attempt<T> {
    Granted(T),
    Blocked(Blocked),
}
