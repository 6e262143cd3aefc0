//! Count-down latches (Redisson RCountDownLatch) as a plain Rust API over
//! the store: set a count, count it down, read it, delete it. Waiting is
//! the wait engine's business ([`crate::wait::WaitMode::Broadcast`]): the
//! scripts publish every change with the new state, so that waiters
//! answer from the message without reading.
//!
//! Redis layout of a latch named `n`:
//! - `{prefix}{n}:latch`             string: the count; TTL = the latch's
//!   life. It exists exactly while the latch is closed: a missing latch is
//!   open, count 0.
//! - `{prefix}{n}:latch:wake`        pub/sub channel: the new state after
//!   every change, `<count>|<remaining life in ms>`, `0|0` when it opened
//!   (the engine's [`BroadcastNote`](crate::wait::BroadcastNote))
//! - `{prefix}{n}:latch:idem:<key>`  the count left by the first
//!   count-down with that `Idempotency-Key`; expires after
//!   [`IDEMPOTENCY_MS`]

use redis::Value;

use super::{Blocked, IDEMPOTENCY_MS, Idempotent};
use crate::store::{Store, StoreError, reply_u64, scripts};

/// Used as the re-check hint when a latch has no TTL at all (someone
/// PERSISTed our key by hand): waiters then rely on the safety re-check.
const NO_TTL_RECHECK_MS: u64 = 15_000;

/// A latch's public state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatchState {
    /// Count-downs left before it opens (0 when open).
    pub count: u64,
    /// Remaining life in ms while closed (`None` when open, or when the
    /// key has no TTL).
    pub ttl_ms: Option<u64>,
}

impl LatchState {
    pub const OPEN: LatchState = LatchState {
        count: 0,
        ttl_ms: None,
    };

    pub fn open(&self) -> bool {
        self.count == 0
    }

    /// What blocks a waiter of a closed latch: its count as the position
    /// (it only falls) and its remaining life as the re-check hint (it
    /// may expire, and so open, without a message).
    pub fn blocked(&self) -> Blocked {
        Blocked {
            retry_after_ms: self.ttl_ms.unwrap_or(NO_TTL_RECHECK_MS),
            position: Some(self.count),
            ..Blocked::default()
        }
    }
}

/// The answer to a count-down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountedDown {
    /// Counted down now; `count` is what is left (0: it opened).
    Counted { count: u64 },
    /// The idempotency key already counted down: its first reply's count.
    Replayed { count: u64 },
    /// No such latch (never set, opened, expired or deleted).
    NotFound,
}

#[derive(Clone, Debug)]
pub struct Latches {
    store: Store,
}

impl Latches {
    pub fn new(store: Store) -> Self {
        Latches { store }
    }

    fn key(&self, name: &str) -> String {
        self.store.key(name, "latch")
    }

    /// The pub/sub channel of the latch's wake messages.
    pub fn wake_channel(&self, name: &str) -> String {
        self.store.key(name, "latch:wake")
    }

    /// Sets the count of an open latch, closing it for `ttl_ms` at most.
    /// `Err(count)` when it is closed (its count is left alone).
    pub async fn set(
        &self,
        name: &str,
        count: u64,
        ttl_ms: u64,
    ) -> Result<Result<u64, u64>, StoreError> {
        let reply: Vec<Value> = self
            .store
            .write(
                &scripts::LATCH_SET,
                &[self.key(name)],
                &[count.to_string(), ttl_ms.to_string()],
            )
            .await?;
        match reply.as_slice() {
            [Value::Int(1), count] => Ok(Ok(reply_u64(count, "count")?)),
            [Value::Int(0), count] => Ok(Err(reply_u64(count, "count")?)),
            other => Err(StoreError::reply("latch_set", other)),
        }
    }

    /// Counts the latch down by `by` (never below 0). With an idempotency
    /// key, the first count-down with that key within [`IDEMPOTENCY_MS`]
    /// is the only one: later ones replay its count (and, being
    /// harmless to repeat, are retried on a dead connection).
    pub async fn count_down(
        &self,
        name: &str,
        by: u64,
        idempotency_key: Option<&str>,
    ) -> Result<CountedDown, StoreError> {
        let idempotent = Idempotent {
            key: idempotency_key,
        };
        let keys = idempotent.keys(&self.store, name, "latch", self.key(name));
        let args = [
            self.wake_channel(name),
            by.to_string(),
            IDEMPOTENCY_MS.to_string(),
        ];
        let reply: Vec<Value> = idempotent
            .write(&self.store, &scripts::LATCH_COUNT_DOWN, &keys, &args)
            .await?;
        match reply.as_slice() {
            [Value::Int(1), count] => Ok(CountedDown::Counted {
                count: reply_u64(count, "count")?,
            }),
            [Value::Int(2), count] => Ok(CountedDown::Replayed {
                count: reply_u64(count, "count")?,
            }),
            [Value::Int(-1)] => Ok(CountedDown::NotFound),
            other => Err(StoreError::reply("latch_count_down", other)),
        }
    }

    pub async fn state(&self, name: &str) -> Result<LatchState, StoreError> {
        let reply: Vec<Value> = self
            .store
            .run(&scripts::LATCH_STATE, &[self.key(name)], &[] as &[&str])
            .await?;
        match reply.as_slice() {
            [Value::Int(0)] => Ok(LatchState::OPEN),
            [count, Value::Int(ttl)] => Ok(LatchState {
                count: reply_u64(count, "count")?,
                ttl_ms: u64::try_from(*ttl).ok(),
            }),
            other => Err(StoreError::reply("latch_state", other)),
        }
    }

    /// Removes the latch whatever its count; its waiters see it open.
    /// True when it was closed.
    pub async fn delete(&self, name: &str) -> Result<bool, StoreError> {
        let removed: i64 = self
            .store
            .write(
                &scripts::LATCH_DELETE,
                &[self.key(name)],
                &[self.wake_channel(name)],
            )
            .await?;
        Ok(removed == 1)
    }
}
