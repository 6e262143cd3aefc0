//! Reentrant locks, plain (Redisson RLock) and fair (RFairLock), as a plain
//! Rust API over the store. Both kinds run the same Lua bodies; a kind's
//! hooks say who may take a free lock (see `scripts/lock_plain.lua` and
//! `scripts/lock_fair.lua`).
//!
//! Redis layout of a lock named `n` (`lock` below is `fair` for fair locks):
//! - `{prefix}{n}:lock`        hash: holder, count, token, lease; TTL = lease
//! - `{prefix}{n}:lock:fence`  fencing counter, never expires
//! - `{prefix}{n}:lock:wake`   pub/sub channel: "became free" (plain), or
//!   the queue's order and who may go now (fair)
//! - `{prefix}{n}:lock:undone:<attempt id>`  short-lived marker: that
//!   attempt was given up, so it must grant nothing should it still arrive
//! - fair only: `:fair:queue` (holder → ticket), `:fair:deadlines` (holder
//!   → when its entry lapses, on Redis's clock), `:fair:tickets`; all three
//!   expire with the last entry

use redis::Value;

use super::{
    Attempt, AttemptId, Blocked, HoldInfo, Layout, Refusal, SessionTerm, Wait, queued,
    reply_held_by, reply_owner,
};
use crate::store::{Script, Store, StoreError, reply_u64, scripts};

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
    /// True when the holder waited in a fair lock's queue and left it
    /// instead of releasing (see [`Locks::leave_or_release`]).
    pub left_queue: bool,
}

/// Public state of a lock (never the holder id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockState {
    pub locked: bool,
    pub hold_count: u64,
    pub ttl_ms: u64,
    /// Last fencing token issued (0 if never locked).
    pub fencing_token: u64,
    /// The hold, when locked (one: a reentrant lock's holds are one
    /// holder's).
    pub holds: Vec<HoldInfo>,
    /// Fair locks: the waiters queued in Redis (every instance's).
    pub queued: Option<u64>,
}

/// Reads `[token, hold_count, lease_ms]` (after the leading 1).
fn grant(reply: &[Value]) -> Result<LockGrant, StoreError> {
    match reply {
        [token, count, lease] => Ok(LockGrant {
            fencing_token: reply_u64(token, "token")?,
            hold_count: reply_u64(count, "count")?,
            lease_ms: reply_u64(lease, "lease")?,
        }),
        other => Err(StoreError::Unexpected(format!("lock grant {other:?}"))),
    }
}

/// Used when a blocker has no TTL at all (someone PERSISTed our key by
/// hand): waiters then re-check once a second instead of spinning.
const NO_TTL_RECHECK_MS: u64 = 1000;

/// Which kind of lock a [`Locks`] serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    /// Whoever tries first when it is free takes it.
    Plain,
    /// Granted in order of arrival; a waiter's entry outlives its last poll
    /// by `grace_ms`.
    Fair { grace_ms: u64 },
}

/// The scripts of one kind.
struct KindScripts {
    acquire: &'static Script,
    undo: &'static Script,
    release: &'static Script,
    /// A holder's DELETE: leave the queue if it waits, else release.
    leave: &'static Script,
    force_unlock: &'static Script,
    heartbeat: &'static Script,
}

#[derive(Clone, Debug)]
pub struct Locks {
    layout: Layout,
    kind: LockKind,
}

impl Locks {
    pub fn new(store: Store, kind: LockKind) -> Self {
        let layout = match kind {
            LockKind::Plain => Layout {
                store,
                base: "lock",
                queue_grace_ms: None,
            },
            LockKind::Fair { grace_ms } => Layout {
                store,
                base: "fair",
                queue_grace_ms: Some(grace_ms),
            },
        };
        Locks { layout, kind }
    }

    pub fn kind(&self) -> LockKind {
        self.kind
    }

    fn scripts(&self) -> KindScripts {
        match self.kind {
            LockKind::Plain => KindScripts {
                acquire: &scripts::LOCK_ACQUIRE,
                undo: &scripts::LOCK_UNDO,
                release: &scripts::LOCK_RELEASE,
                leave: &scripts::LOCK_RELEASE,
                force_unlock: &scripts::LOCK_FORCE_UNLOCK,
                heartbeat: &scripts::LOCK_HEARTBEAT,
            },
            LockKind::Fair { .. } => KindScripts {
                acquire: &scripts::FAIR_ACQUIRE,
                undo: &scripts::FAIR_UNDO,
                release: &scripts::FAIR_RELEASE,
                leave: &scripts::FAIR_LEAVE,
                force_unlock: &scripts::FAIR_FORCE_UNLOCK,
                heartbeat: &scripts::FAIR_HEARTBEAT,
            },
        }
    }

    /// The pub/sub channel of the lock's wake messages.
    pub fn wake_channel(&self, name: &str) -> String {
        self.layout.wake_channel(name)
    }

    /// One try: take the lock, re-enter it, or report what blocks. The
    /// attempt id makes the try safe to repeat and possible to undo;
    /// `wait_left_ms` (fair locks) keeps a long-poll's queue entry for the
    /// rest of its wait plus the grace, and is `None` for a try
    /// (`wait_ms: 0`), which takes no place. Refused with `SessionMismatch`
    /// when the holder holds the lock in a session.
    pub async fn try_acquire(
        &self,
        name: &str,
        holder: &str,
        lease_ms: u64,
        wait_left_ms: Option<u64>,
        attempt: &AttemptId,
    ) -> Result<Attempt<LockGrant>, StoreError> {
        let wait = Wait::from(wait_left_ms);
        self.try_acquire_in(name, holder, lease_ms, wait, attempt, None, "")
            .await
    }

    /// [`Self::try_acquire`], or with `session` in a session: the hold
    /// records it and the version its end comes from, and its lease is
    /// what is left until that end when the script runs (`lease_ms` is
    /// unused then). Refused with `SessionMismatch` when the holder holds
    /// the lock in no session or another one. `wait` is the request's
    /// [`Wait`]: the time it may still wait and the ticket its earlier
    /// tries were given. `owner` is the hold's owner label ('' for none: a
    /// re-entry then keeps the label the hold has).
    #[allow(clippy::too_many_arguments)]
    pub async fn try_acquire_in(
        &self,
        name: &str,
        holder: &str,
        lease_ms: u64,
        wait: Wait,
        attempt: &AttemptId,
        session: Option<SessionTerm<'_>>,
        owner: &str,
    ) -> Result<Attempt<LockGrant>, StoreError> {
        let (script, who, lease) = (self.scripts().acquire, (holder, owner), (lease_ms, wait));
        let reply = (self.layout)
            .acquire(script, name, who, None, lease, attempt, session, &[])
            .await?;
        match reply.as_slice() {
            [Value::Int(1), rest @ ..] => Ok(Attempt::Granted(grant(rest)?)),
            [Value::Int(0), Value::Int(ttl), owner] => Ok(Attempt::Blocked(Blocked {
                held_by: vec![reply_owner(owner)],
                ..Blocked::after(u64::try_from(*ttl).unwrap_or(NO_TTL_RECHECK_MS))
            })),
            [Value::Int(0), rest @ ..] if rest.len() == 5 => Ok(Attempt::Blocked(Blocked {
                held_by: reply_held_by(&rest[4])?,
                ..queued(&rest[..4])?
            })),
            // Only possible for an attempt its caller already gave up on.
            [Value::Int(-1)] => Err(StoreError::timeout()),
            [Value::Int(-5)] => Ok(Attempt::Refused(Refusal::SessionMismatch)),
            other => Err(StoreError::reply("lock_acquire", other)),
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
        self.undo_waiting(name, holder, attempt, Wait::default())
            .await
    }

    /// [`Self::undo`] of a try of a long-poll that keeps a place (`wait`,
    /// see [`super::Ticket::kept`]): a fair waiter whose grant is given back
    /// keeps its place (its ticket), as if the try had found the lock held.
    pub async fn undo_waiting(
        &self,
        name: &str,
        holder: &str,
        attempt: &AttemptId,
        wait: Wait,
    ) -> Result<bool, StoreError> {
        let script = self.scripts().undo;
        (self.layout)
            .undo(script, name, (holder, wait), attempt, &[])
            .await
    }

    /// A waiter's request ended without a grant before its deadline (its
    /// client left): its queue entry now lapses one grace from now. A
    /// no-op for plain locks, which keep no queue.
    pub async fn leave(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        match self.kind {
            LockKind::Plain => Ok(()),
            LockKind::Fair { .. } => self.layout.leave(name, holder).await,
        }
    }

    /// Renews the holder's lease (`None` keeps the lease it has); a hold
    /// taken in a session no further than the session's end (the grant's
    /// `lease_ms` says what it got). `Ok(None)` when the holder does not
    /// hold the lock.
    pub async fn heartbeat(
        &self,
        name: &str,
        holder: &str,
        lease_ms: Option<u64>,
    ) -> Result<Option<LockGrant>, StoreError> {
        self.renew(name, holder, lease_ms, None).await
    }

    /// [`Self::heartbeat`], or with `session` that session's renewal of
    /// the holder's hold up to the session's end (`lease_ms` is unused
    /// then): only a hold taken in it counts (`Ok(None)` otherwise, also
    /// when the renewal came after the end, which ends the hold), and a
    /// hold that applied a newer version keeps its end. The grant's
    /// `lease_ms` is what the hold has left.
    pub async fn renew(
        &self,
        name: &str,
        holder: &str,
        lease_ms: Option<u64>,
        session: Option<SessionTerm<'_>>,
    ) -> Result<Option<LockGrant>, StoreError> {
        let own = SessionTerm::renewal(lease_ms, session);
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        let keys = self.layout.keys(name, None, &[]);
        let args = self.layout.args(name, holder, &own);
        let reply: Vec<Value> = self
            .layout
            .store
            .write_repeatable(self.scripts().heartbeat, &keys, &args)
            .await?;
        match reply.as_slice() {
            [Value::Int(1), rest @ ..] => Ok(Some(grant(rest)?)),
            [Value::Int(0)] => Ok(None),
            other => Err(StoreError::reply("lock_heartbeat", other)),
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
        self.run_release(
            self.scripts().release,
            name,
            holder,
            &[if all { "1" } else { "0" }],
        )
        .await
    }

    /// A holder's `DELETE`: on a fair lock, a holder that waits in the
    /// queue leaves it at once and releases nothing (`left_queue`; leaving
    /// comes first, see `scripts/fair_leave.lua`); otherwise, and always on
    /// a plain lock, a [`Locks::release`]. `Ok(None)` when the holder
    /// neither holds nor waits.
    pub async fn leave_or_release(
        &self,
        name: &str,
        holder: &str,
        all: bool,
    ) -> Result<Option<Released>, StoreError> {
        self.run_release(
            self.scripts().leave,
            name,
            holder,
            &[if all { "1" } else { "0" }],
        )
        .await
    }

    /// Session `session` ends: drops every hold of the holder taken in
    /// it (a hold in another session, or in none, is not touched); true
    /// when there was one.
    pub async fn release_in(
        &self,
        name: &str,
        holder: &str,
        session: &str,
    ) -> Result<bool, StoreError> {
        let script = self.scripts().release;
        let released = self
            .run_release(script, name, holder, &["1", session])
            .await?;
        Ok(released.is_some())
    }

    /// Runs a release script (`lock_release`, or a `*_leave` before it)
    /// with the script's own arguments `own`.
    async fn run_release(
        &self,
        script: &Script,
        name: &str,
        holder: &str,
        own: &[&str],
    ) -> Result<Option<Released>, StoreError> {
        let keys = self.layout.keys(name, None, &[]);
        let args = self.layout.args(name, holder, own);
        let reply: Vec<Value> = self.layout.store.write(script, &keys, &args).await?;
        match reply.as_slice() {
            [Value::Int(-1)] => Ok(None),
            [Value::Int(code @ 0..=2), count] => Ok(Some(Released {
                released: *code == 1,
                hold_count: reply_u64(count, "count")?,
                left_queue: *code == 2,
            })),
            other => Err(StoreError::reply(script.name(), other)),
        }
    }

    /// Removes the lock whoever holds it; true when it was held.
    pub async fn force_unlock(&self, name: &str) -> Result<bool, StoreError> {
        let keys = self.layout.keys(name, None, &[]);
        let args = self.layout.args(name, "", &[]);
        let removed: i64 = self
            .layout
            .store
            .write(self.scripts().force_unlock, &keys, &args)
            .await?;
        Ok(removed == 1)
    }

    /// The lock's state: its hold (with its owner label, never its holder
    /// id) and, on a fair lock, how many wait in its queue.
    pub async fn state(&self, name: &str) -> Result<LockState, StoreError> {
        let mut keys = vec![self.layout.key(name, ""), self.layout.key(name, "fence")];
        if let LockKind::Fair { .. } = self.kind {
            keys.extend(["queue", "deadlines"].map(|p| self.layout.key(name, p)));
        }
        let reply: Vec<Value> = self
            .layout
            .store
            .run(&scripts::LOCK_STATE, &keys, &[] as &[&str])
            .await?;
        match reply.as_slice() {
            [locked, count, ttl, fence, holds, queued] => Ok(LockState {
                locked: reply_u64(locked, "locked")? == 1,
                hold_count: reply_u64(count, "count")?,
                ttl_ms: reply_u64(ttl, "ttl")?,
                fencing_token: reply_u64(fence, "fence")?,
                holds: HoldInfo::list(holds)?,
                queued: match queued {
                    Value::Int(n) if *n < 0 => None,
                    other => Some(reply_u64(other, "queued")?),
                },
            }),
            other => Err(StoreError::reply("lock_state", other)),
        }
    }
}
