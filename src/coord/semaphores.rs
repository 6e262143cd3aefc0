//! Semaphores whose permits are all leased (Redisson
//! RPermitExpirableSemaphore) as a plain Rust API over the store: a holder
//! takes k permits under one lease, renews them with heartbeats and gives
//! them back on release or when its lease lapses, so permits never leak.
//! Waiters queue in arrival order; a request that fits may overtake
//! waiters that do not, a bounded number of times (the policy is in
//! `scripts/sem.lua` and the book's "Semaphores" (docs/src/semaphores.md)).
//!
//! Redis layout of a semaphore named `n` (see `scripts/sem.lua`):
//! `{prefix}{n}:sem` (configuration; kept until deleted), `:sem:holds`,
//! `:sem:leases` (holder → lease deadline), `:sem:fence`, `:sem:wake`,
//! `:sem:undone:<attempt id>`, and the waiters' queue `:sem:queue`,
//! `:sem:deadlines`, `:sem:tickets`.

use redis::Value;

use super::{
    Attempt, AttemptId, HoldInfo, Layout, Refusal, SessionTerm, Wait, queued, reply_held_by,
};
use crate::store::{Script, Store, StoreError, reply_u64, scripts};

/// A holder's hold: all its permits under one lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemGrant {
    /// Taken by the holder's first grant; later grants keep it.
    pub fencing_token: u64,
    /// The holder's permits in total.
    pub permits: u64,
    pub lease_ms: u64,
    /// Grants that make up the hold.
    pub grants: u64,
}

/// Public state (never a holder id or session id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemState {
    pub permits: u64,
    /// `permits` minus the permits of live leases, never below 0.
    pub available: u64,
    /// Holders with a live lease.
    pub holders: u64,
    /// Waiters in the queue in Redis (every instance's).
    pub queued: u64,
    /// The live holds (at most 100), by the end of their lease; `count`
    /// is the hold's permits.
    pub holds: Vec<HoldInfo>,
}

/// The answer to a holder's `DELETE` ([`Semaphores::leave_or_release`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SemReleased {
    /// The permits given back (0 when it left the queue).
    pub released_permits: u64,
    /// True when the holder waited in the queue and left it instead of
    /// giving its permits back.
    pub left_queue: bool,
}

#[derive(Clone, Debug)]
pub struct Semaphores {
    layout: Layout,
}

/// The semaphore's own keys after the layout's (`scripts/sem.lua`).
const EXTRA: &[&str] = &["holds", "leases"];

fn grant(reply: &[Value]) -> Result<SemGrant, StoreError> {
    match reply {
        [token, permits, lease, grants] => Ok(SemGrant {
            fencing_token: reply_u64(token, "token")?,
            permits: reply_u64(permits, "permits")?,
            lease_ms: reply_u64(lease, "lease")?,
            grants: reply_u64(grants, "grants")?,
        }),
        other => Err(StoreError::Unexpected(format!("semaphore grant {other:?}"))),
    }
}

fn state(reply: &[Value]) -> Result<SemState, StoreError> {
    match reply {
        [permits, available, holders, queued, holds] => Ok(SemState {
            permits: reply_u64(permits, "permits")?,
            available: reply_u64(available, "available")?,
            holders: reply_u64(holders, "holders")?,
            queued: reply_u64(queued, "queued")?,
            holds: HoldInfo::list(holds)?,
        }),
        other => Err(StoreError::Unexpected(format!("semaphore state {other:?}"))),
    }
}

impl Semaphores {
    pub fn new(store: Store, queue_grace_ms: u64) -> Self {
        Semaphores {
            layout: Layout::queued(store, "sem", queue_grace_ms),
        }
    }

    /// The pub/sub channel of the semaphore's wake messages.
    pub fn wake_channel(&self, name: &str) -> String {
        self.layout.wake_channel(name)
    }

    async fn call(
        &self,
        script: &Script,
        name: &str,
        holder: &str,
        own: &[&str],
    ) -> Result<Vec<Value>, StoreError> {
        let keys = self.layout.keys(name, None, EXTRA);
        let args = self.layout.args(name, holder, own);
        self.layout
            .store
            .write_repeatable(script, &keys, &args)
            .await
    }

    /// Sets the number of permits (live holds are never revoked).
    pub async fn set(&self, name: &str, permits: u64) -> Result<SemState, StoreError> {
        let reply = self
            .call(&scripts::SEM_SET, name, "", &[&permits.to_string()])
            .await?;
        state(&reply)
    }

    /// One try for `permits` more permits; see
    /// [`crate::coord::locks::Locks::try_acquire`]. Refused when the
    /// semaphore is not configured, or has fewer permits than asked for.
    pub async fn try_acquire(
        &self,
        name: &str,
        holder: &str,
        permits: u64,
        lease_ms: u64,
        wait_left_ms: Option<u64>,
        attempt: &AttemptId,
    ) -> Result<Attempt<SemGrant>, StoreError> {
        let lease = (lease_ms, Wait::from(wait_left_ms));
        self.try_acquire_in(name, (holder, None), permits, lease, attempt, None)
            .await
    }

    /// [`Self::try_acquire`], or with `session` in a session; see
    /// [`crate::coord::locks::Locks::try_acquire_in`]. `owner` labels the
    /// hold (the book's "Who holds it" (docs/src/who-holds-it.md)); `None`
    /// keeps the label it has.
    pub async fn try_acquire_in(
        &self,
        name: &str,
        (holder, owner): (&str, Option<&str>),
        permits: u64,
        lease: (u64, Wait),
        attempt: &AttemptId,
        session: Option<SessionTerm<'_>>,
    ) -> Result<Attempt<SemGrant>, StoreError> {
        let (script, who) = (&scripts::SEM_ACQUIRE, (holder, owner.unwrap_or("")));
        let permits = permits.to_string();
        let reply = (self.layout)
            .acquire(
                script,
                name,
                who,
                Some(&permits),
                lease,
                attempt,
                session,
                EXTRA,
            )
            .await?;
        match reply.as_slice() {
            [Value::Int(1), rest @ ..] => Ok(Attempt::Granted(grant(rest)?)),
            [Value::Int(0), place @ .., available, held_by] => {
                let mut blocked = queued(place)?;
                blocked.available = Some(reply_u64(available, "available")?);
                blocked.held_by = reply_held_by(held_by)?;
                Ok(Attempt::Blocked(blocked))
            }
            [Value::Int(-1)] => Err(StoreError::timeout()),
            [Value::Int(-3), permits] => Ok(Attempt::Refused(Refusal::MoreThan(reply_u64(
                permits, "permits",
            )?))),
            [Value::Int(-4)] => Ok(Attempt::Refused(Refusal::NotFound)),
            [Value::Int(-5)] => Ok(Attempt::Refused(Refusal::SessionMismatch)),
            other => Err(StoreError::reply("sem_acquire", other)),
        }
    }

    /// Gives back exactly the permits `attempt` was granted, if any.
    /// `wait` as in [`super::rwlocks::RwLocks::undo`].
    pub async fn undo(
        &self,
        name: &str,
        holder: &str,
        attempt: &AttemptId,
        wait: Wait,
    ) -> Result<bool, StoreError> {
        let script = &scripts::SEM_UNDO;
        (self.layout)
            .undo(script, name, (holder, wait), attempt, EXTRA)
            .await
    }

    /// A waiter for `permits` left before its deadline: its queue entry
    /// now lapses one grace from now.
    pub async fn leave(&self, name: &str, holder: &str, permits: u64) -> Result<(), StoreError> {
        self.layout
            .leave(name, &format!("{permits}|{holder}"))
            .await
    }

    /// Renews the holder's lease (a hold taken in a session no further
    /// than the session's end). `Ok(None)` when it holds nothing.
    pub async fn heartbeat(
        &self,
        name: &str,
        holder: &str,
        lease_ms: Option<u64>,
    ) -> Result<Option<SemGrant>, StoreError> {
        self.renew(name, holder, lease_ms, None).await
    }

    /// [`Self::heartbeat`], or a session's renewal of the holder's hold;
    /// see [`crate::coord::locks::Locks::renew`].
    pub async fn renew(
        &self,
        name: &str,
        holder: &str,
        lease_ms: Option<u64>,
        session: Option<SessionTerm<'_>>,
    ) -> Result<Option<SemGrant>, StoreError> {
        let own = SessionTerm::renewal(lease_ms, session);
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        let reply = self
            .call(&scripts::SEM_HEARTBEAT, name, holder, &own)
            .await?;
        match reply.as_slice() {
            [Value::Int(1), rest @ ..] => Ok(Some(grant(rest)?)),
            [Value::Int(0)] => Ok(None),
            other => Err(StoreError::reply("sem_heartbeat", other)),
        }
    }

    /// Gives back all the holder's permits; how many. `Ok(None)` when it
    /// holds nothing.
    pub async fn release(&self, name: &str, holder: &str) -> Result<Option<u64>, StoreError> {
        let released = self
            .run_release(&scripts::SEM_RELEASE, name, holder, &[])
            .await?;
        Ok(u64::try_from(released).ok())
    }

    /// Session `session` ends: gives back the holder's permits if they
    /// were taken in it; true when there were some.
    pub async fn release_in(
        &self,
        name: &str,
        holder: &str,
        session: &str,
    ) -> Result<bool, StoreError> {
        let released = self
            .run_release(&scripts::SEM_RELEASE, name, holder, &[session])
            .await?;
        Ok(released >= 0)
    }

    /// A holder's `DELETE`: a holder that waits in the queue (for any
    /// number of permits) leaves it at once and gives nothing back
    /// (`left_queue`; leaving comes first, see `scripts/sem_leave.lua`);
    /// otherwise a [`Semaphores::release`]. `Ok(None)` when the holder
    /// neither holds nor waits.
    pub async fn leave_or_release(
        &self,
        name: &str,
        holder: &str,
    ) -> Result<Option<SemReleased>, StoreError> {
        let code = self
            .run_release(&scripts::SEM_LEAVE, name, holder, &[])
            .await?;
        Ok(match code {
            -2 => Some(SemReleased {
                released_permits: 0,
                left_queue: true,
            }),
            n => u64::try_from(n).ok().map(|released_permits| SemReleased {
                released_permits,
                left_queue: false,
            }),
        })
    }

    /// Runs a release script (`sem_release`, or `sem_leave` before it)
    /// with the script's own arguments `own`.
    async fn run_release(
        &self,
        script: &Script,
        name: &str,
        holder: &str,
        own: &[&str],
    ) -> Result<i64, StoreError> {
        let keys = self.layout.keys(name, None, EXTRA);
        let args = self.layout.args(name, holder, own);
        self.layout.store.write(script, &keys, &args).await
    }

    /// The state; `Ok(None)` when the semaphore is not configured.
    pub async fn state(&self, name: &str) -> Result<Option<SemState>, StoreError> {
        let reply = self.call(&scripts::SEM_STATE, name, "", &[]).await?;
        if reply.is_empty() {
            return Ok(None);
        }
        state(&reply).map(Some)
    }

    /// Removes the semaphore, its holds and its queue; waiters find it
    /// gone. True when it was configured.
    pub async fn delete(&self, name: &str) -> Result<bool, StoreError> {
        let keys = self.layout.keys(name, None, EXTRA);
        let args = self.layout.args(name, "", &[]);
        let existed: i64 = self
            .layout
            .store
            .write(&scripts::SEM_DELETE, &keys, &args)
            .await?;
        Ok(existed == 1)
    }
}
