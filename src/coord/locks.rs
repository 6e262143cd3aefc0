//! Reentrant locks (Redisson RLock) as a plain Rust API over the store.
//!
//! Redis layout of a lock named `n`:
//! - `{prefix}{n}:lock`        hash: holder, count, token, lease; TTL = lease
//! - `{prefix}{n}:lock:fence`  fencing counter, never expires
//! - `{prefix}{n}:lock:wake`   pub/sub channel, one message per "became free"

use redis::Value;

use crate::store::{Store, StoreError, reply_u64, scripts};
use crate::wait::{Attempt, Blocked};

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

    /// One try: take the lock, re-enter it, or report what blocks.
    pub async fn try_acquire(
        &self,
        name: &str,
        holder: &str,
        lease_ms: u64,
    ) -> Result<Attempt<LockGrant>, StoreError> {
        let reply: Vec<Value> = self
            .store
            .write(
                &scripts::LOCK_ACQUIRE,
                &[&self.lock_key(name), &self.fence_key(name)],
                &[holder, &lease_ms.to_string()],
            )
            .await
            .map_err(|e| self.undo_on_lagging(e, name, holder))?;
        match reply.as_slice() {
            [Value::Int(1), token, count, lease] => Ok(Attempt::Granted(LockGrant {
                fencing_token: reply_u64(token, "token")?,
                hold_count: reply_u64(count, "count")?,
                lease_ms: reply_u64(lease, "lease")?,
            })),
            [Value::Int(0), Value::Int(ttl)] => Ok(Attempt::Blocked(Blocked::after(
                u64::try_from(*ttl).unwrap_or(NO_TTL_RECHECK_MS),
            ))),
            other => Err(StoreError::Unexpected(format!(
                "lock_acquire returned {other:?}"
            ))),
        }
    }

    /// When `WAIT` says too few replicas have the grant, the grant must not
    /// outlive the error the client gets: drop the hold we just added.
    fn undo_on_lagging(&self, err: StoreError, name: &str, holder: &str) -> StoreError {
        if matches!(err, StoreError::ReplicasLagging { .. }) {
            let this = self.clone();
            let (name, holder) = (name.to_string(), holder.to_string());
            tokio::spawn(async move {
                if let Err(e) = this.release(&name, &holder, false).await {
                    tracing::warn!(error = %e, "could not undo a grant the replicas did not acknowledge");
                }
            });
        }
        err
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
            .write(
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
