//! Reentrant locks (Redisson RLock) as a plain Rust API over the store.
//!
//! Redis layout of a lock named `n`:
//! - `{prefix}{n}:lock`        hash: holder, count, token, lease; TTL = lease
//! - `{prefix}{n}:lock:fence`  fencing counter, never expires
//! - `{prefix}{n}:lock:wake`   pub/sub channel, one message per "became free"
//! - `{prefix}{n}:lock:undone:<attempt id>`  short-lived marker: that
//!   attempt was given up, so it must grant nothing should it still arrive

use redis::Value;

use super::{Attempt, AttemptId, Blocked};
use crate::store::{Store, StoreError, reply_u64, scripts};

/// A successful acquisition or renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockGrant {
    pub fencing_token: u64,
    pub hold_count: u64,
    pub lease_ms: u64,
}

/// The answer to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// True when the lock became free.
    pub released: bool,
    /// Holds the holder still has.
    pub hold_count: u64,
}

/// Public state of a lock (never the holder id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockState {
    pub locked: bool,
    pub hold_count: u64,
    pub ttl_ms: u64,
    /// Last fencing token issued (0 if never locked).
    pub fencing_token: u64,
}

/// How long an undo's marker keeps a late copy of its attempt from
/// granting. Far longer than any reply can be late: a try is bounded by
/// the Redis response timeout.
const UNDO_MARKER_MS: &str = "60000";

/// Used when a blocker has no TTL at all (someone PERSISTed our key by
/// hand): waiters then re-check once a second instead of spinning.
const NO_TTL_RECHECK_MS: u64 = 1000;

#[derive(Clone, Debug)]
pub struct Locks {
    store: Store,
}

impl Locks {
    pub fn new(store: Store) -> Self {
        Locks { store }
    }

    fn lock_key(&self, name: &str) -> String {
        self.store.key(name, "lock")
    }

    fn fence_key(&self, name: &str) -> String {
        self.store.key(name, "lock:fence")
    }

    /// The pub/sub channel woken whenever the lock becomes free.
    pub fn wake_channel(&self, name: &str) -> String {
        self.store.key(name, "lock:wake")
    }

    fn undo_marker_key(&self, name: &str, attempt: &AttemptId) -> String {
        self.store
            .key(name, &format!("lock:undone:{}", attempt.as_str()))
    }

    /// One try: take the lock, re-enter it, or report what blocks. The
    /// attempt id makes the try safe to repeat and possible to undo.
    pub async fn try_acquire(
        &self,
        name: &str,
        holder: &str,
        lease_ms: u64,
        attempt: &AttemptId,
    ) -> Result<Attempt<LockGrant>, StoreError> {
        let reply: Vec<Value> = self
            .store
            .write_repeatable(
                &scripts::LOCK_ACQUIRE,
                &[
                    &self.lock_key(name),
                    &self.fence_key(name),
                    &self.undo_marker_key(name, attempt),
                ],
                &[holder, &lease_ms.to_string(), attempt.as_str()],
            )
            .await?;
        match reply.as_slice() {
            [Value::Int(1), token, count, lease] => Ok(Attempt::Granted(LockGrant {
                fencing_token: reply_u64(token, "token")?,
                hold_count: reply_u64(count, "count")?,
                lease_ms: reply_u64(lease, "lease")?,
            })),
            [Value::Int(0), Value::Int(ttl)] => Ok(Attempt::Blocked(Blocked::after(
                u64::try_from(*ttl).unwrap_or(NO_TTL_RECHECK_MS),
            ))),
            // Only possible for an attempt its caller already gave up on.
            [Value::Int(-1)] => Err(StoreError::timeout()),
            other => Err(StoreError::Unexpected(format!(
                "lock_acquire returned {other:?}"
            ))),
        }
    }

    /// Gives back what `attempt` granted, if anything; true when it held
    /// something. Never touches other holds, even of the same holder id,
    /// and makes a late copy of the attempt grant nothing.
    pub async fn undo(
        &self,
        name: &str,
        holder: &str,
        attempt: &AttemptId,
    ) -> Result<bool, StoreError> {
        let undone: i64 = self
            .store
            .write_repeatable(
                &scripts::LOCK_UNDO,
                &[&self.lock_key(name), &self.undo_marker_key(name, attempt)],
                &[
                    holder,
                    attempt.as_str(),
                    &self.wake_channel(name),
                    UNDO_MARKER_MS,
                ],
            )
            .await?;
        Ok(undone == 1)
    }

    /// Renews the holder's lease (`None` keeps the lease it has).
    /// `Ok(None)` when the holder does not hold the lock.
    pub async fn heartbeat(
        &self,
        name: &str,
        holder: &str,
        lease_ms: Option<u64>,
    ) -> Result<Option<LockGrant>, StoreError> {
        let lease = lease_ms.map(|l| l.to_string()).unwrap_or_default();
        let reply: Vec<Value> = self
            .store
            .write_repeatable(
                &scripts::LOCK_HEARTBEAT,
                &[&self.lock_key(name)],
                &[holder, &lease],
            )
            .await?;
        match reply.as_slice() {
            [Value::Int(1), token, count, lease] => Ok(Some(LockGrant {
                fencing_token: reply_u64(token, "token")?,
                hold_count: reply_u64(count, "count")?,
                lease_ms: reply_u64(lease, "lease")?,
            })),
            [Value::Int(0)] => Ok(None),
            other => Err(StoreError::Unexpected(format!(
                "lock_heartbeat returned {other:?}"
            ))),
        }
    }

    /// Drops one hold (or every hold with `all`). `Ok(None)` when the
    /// holder does not hold the lock.
    pub async fn release(
        &self,
        name: &str,
        holder: &str,
        all: bool,
    ) -> Result<Option<Released>, StoreError> {
        let reply: Vec<Value> = self
            .store
            .write(
                &scripts::LOCK_RELEASE,
                &[&self.lock_key(name)],
                &[
                    holder,
                    if all { "1" } else { "0" },
                    &self.wake_channel(name),
                ],
            )
            .await?;
        match reply.as_slice() {
            [Value::Int(-1)] => Ok(None),
            [Value::Int(freed), count] => Ok(Some(Released {
                released: *freed == 1,
                hold_count: reply_u64(count, "count")?,
            })),
            other => Err(StoreError::Unexpected(format!(
                "lock_release returned {other:?}"
            ))),
        }
    }

    /// Removes the lock whoever holds it; true when it was held.
    pub async fn force_unlock(&self, name: &str) -> Result<bool, StoreError> {
        let removed: i64 = self
            .store
            .write(
                &scripts::LOCK_FORCE_UNLOCK,
                &[&self.lock_key(name)],
                &[&self.wake_channel(name)],
            )
            .await?;
        Ok(removed == 1)
    }

    pub async fn state(&self, name: &str) -> Result<LockState, StoreError> {
        let reply: Vec<Value> = self
            .store
            .run(
                &scripts::LOCK_STATE,
                &[&self.lock_key(name), &self.fence_key(name)],
                &[],
            )
            .await?;
        match reply.as_slice() {
            [locked, count, ttl, fence] => Ok(LockState {
                locked: reply_u64(locked, "locked")? == 1,
                hold_count: reply_u64(count, "count")?,
                ttl_ms: reply_u64(ttl, "ttl")?,
                fencing_token: reply_u64(fence, "fence")?,
            }),
            other => Err(StoreError::Unexpected(format!(
                "lock_state returned {other:?}"
            ))),
        }
    }
}
