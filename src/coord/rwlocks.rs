//! Read-write locks (Redisson RReadWriteLock, improved) as a plain Rust API
//! over the store: shared reentrant readers each with its own lease, one
//! reentrant writer, downgrade and sole-reader upgrade, and waiters queued
//! in arrival order across both modes (the policy is in
//! `scripts/rw_acquire.lua` and the book's "Read-write locks"
//! (docs/src/rwlocks.md)).
//!
//! Redis layout of an rwlock named `n` (see `scripts/rw.lua`):
//! `{prefix}{n}:rw` (holds), `:rw:readers` (reader → lease deadline),
//! `:rw:fence`, `:rw:wake`, `:rw:undone:<attempt id>`, and the waiters'
//! queue `:rw:queue`, `:rw:deadlines`, `:rw:tickets`.

use redis::Value;

use super::{
    Attempt, AttemptId, HoldInfo, Layout, Refusal, SessionTerm, Wait, queued, reply_held_by,
};
use crate::store::{Script, Store, StoreError, reply_u64, scripts};

/// The key every rwlock script gets after the common ones: the readers'
/// hash.
const READERS: &[&str] = &["readers"];

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Read,
    Write,
}

impl Mode {
    fn code(self) -> &'static str {
        match self {
            Mode::Read => "r",
            Mode::Write => "w",
        }
    }

    fn from_reply(value: &Value) -> Result<Mode, StoreError> {
        match value {
            Value::BulkString(b) if b == b"r" => Ok(Mode::Read),
            Value::BulkString(b) if b == b"w" => Ok(Mode::Write),
            other => Err(StoreError::Unexpected(format!("mode {other:?}"))),
        }
    }
}

/// A grant or renewal: the hold in `mode` and both hold counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RwGrant {
    pub mode: Mode,
    pub fencing_token: u64,
    /// Holds in `mode`.
    pub hold_count: u64,
    pub lease_ms: u64,
    pub read_hold_count: u64,
    pub write_hold_count: u64,
}

/// The answer to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RwReleased {
    /// True when the rwlock became free.
    pub released: bool,
    /// Holds the holder keeps in `mode`.
    pub hold_count: u64,
    /// The mode released, or waited for when it left the queue.
    pub mode: Mode,
    /// True when the holder waited in the queue and left it instead of
    /// releasing (see [`RwLocks::leave_or_release`]).
    pub left_queue: bool,
}

/// Public state (never a holder id or session id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RwState {
    pub mode: Option<Mode>,
    /// Distinct reader holders.
    pub readers: u64,
    pub writer_hold_count: u64,
    /// Remaining ms of the longest hold.
    pub ttl_ms: u64,
    pub fencing_token: u64,
    /// Waiters in the queue in Redis (every instance's).
    pub queued: u64,
    /// The live holds (at most 100): the write hold first, then the
    /// readers' by the end of their lease; `mode` is `read` or `write`.
    pub holds: Vec<HoldInfo>,
}

#[derive(Clone, Debug)]
pub struct RwLocks {
    layout: Layout,
}

fn grant(reply: &[Value]) -> Result<RwGrant, StoreError> {
    match reply {
        [token, count, lease, mode, reads, writes] => Ok(RwGrant {
            mode: Mode::from_reply(mode)?,
            fencing_token: reply_u64(token, "token")?,
            hold_count: reply_u64(count, "count")?,
            lease_ms: reply_u64(lease, "lease")?,
            read_hold_count: reply_u64(reads, "reads")?,
            write_hold_count: reply_u64(writes, "writes")?,
        }),
        other => Err(StoreError::Unexpected(format!("rw grant {other:?}"))),
    }
}

impl RwLocks {
    pub fn new(store: Store, queue_grace_ms: u64) -> Self {
        RwLocks {
            layout: Layout::queued(store, "rw", queue_grace_ms),
        }
    }

    /// The pub/sub channel of the rwlock's wake messages.
    pub fn wake_channel(&self, name: &str) -> String {
        self.layout.wake_channel(name)
    }

    fn keys(&self, name: &str, attempt: Option<&AttemptId>) -> Vec<String> {
        self.layout.keys(name, attempt, READERS)
    }

    /// One try for a hold in `mode`; see [`crate::coord::locks::Locks::try_acquire`].
    pub async fn try_acquire(
        &self,
        name: &str,
        holder: &str,
        mode: Mode,
        lease_ms: u64,
        wait_left_ms: Option<u64>,
        attempt: &AttemptId,
    ) -> Result<Attempt<RwGrant>, StoreError> {
        let lease = (lease_ms, Wait::from(wait_left_ms));
        self.try_acquire_in(name, (holder, None), mode, lease, attempt, None)
            .await
    }

    /// [`Self::try_acquire`], or with `session` in a session; see
    /// [`crate::coord::locks::Locks::try_acquire_in`]. All the holder's
    /// holds on the rwlock are in one session or none. `owner` labels the
    /// hold (the book's "Who holds it" (docs/src/who-holds-it.md)); `None`
    /// keeps the label it has (a new hold takes the label of the holder's
    /// hold in the other mode).
    pub async fn try_acquire_in(
        &self,
        name: &str,
        (holder, owner): (&str, Option<&str>),
        mode: Mode,
        lease: (u64, Wait),
        attempt: &AttemptId,
        session: Option<SessionTerm<'_>>,
    ) -> Result<Attempt<RwGrant>, StoreError> {
        let (script, who) = (&scripts::RW_ACQUIRE, (holder, owner.unwrap_or("")));
        let reply = (self.layout)
            .acquire(
                script,
                name,
                who,
                Some(mode.code()),
                lease,
                attempt,
                session,
                READERS,
            )
            .await?;
        match reply.as_slice() {
            [Value::Int(1), rest @ ..] => Ok(Attempt::Granted(grant(rest)?)),
            [Value::Int(0), place @ .., held_by] => {
                let mut blocked = queued(place)?;
                blocked.held_by = reply_held_by(held_by)?;
                Ok(Attempt::Blocked(blocked))
            }
            [Value::Int(-1)] => Err(StoreError::timeout()),
            [Value::Int(-2)] => Ok(Attempt::Refused(Refusal::UpgradeWouldDeadlock)),
            [Value::Int(-5)] => Ok(Attempt::Refused(Refusal::SessionMismatch)),
            other => Err(StoreError::reply("rw_acquire", other)),
        }
    }

    /// Gives back exactly what `attempt` granted, if anything. `wait` is
    /// the attempt's long-poll's ([`super::Ticket::kept`]): a waiter keeps
    /// its place while its long-poll does (the default for none).
    pub async fn undo(
        &self,
        name: &str,
        holder: &str,
        attempt: &AttemptId,
        wait: Wait,
    ) -> Result<bool, StoreError> {
        let script = &scripts::RW_UNDO;
        (self.layout)
            .undo(script, name, (holder, wait), attempt, READERS)
            .await
    }

    /// A waiter for `mode` left before its deadline: its queue entry now
    /// lapses one grace from now.
    pub async fn leave(&self, name: &str, holder: &str, mode: Mode) -> Result<(), StoreError> {
        let member = format!("{}|{holder}", mode.code());
        self.layout.leave(name, &member).await
    }

    /// Renews every hold of the holder (holds taken in a session no
    /// further than the session's end). `Ok(None)` when it holds nothing.
    pub async fn heartbeat(
        &self,
        name: &str,
        holder: &str,
        lease_ms: Option<u64>,
    ) -> Result<Option<RwGrant>, StoreError> {
        self.renew(name, holder, lease_ms, None).await
    }

    /// [`Self::heartbeat`], or a session's renewal of every hold of the
    /// holder; see [`crate::coord::locks::Locks::renew`].
    pub async fn renew(
        &self,
        name: &str,
        holder: &str,
        lease_ms: Option<u64>,
        session: Option<SessionTerm<'_>>,
    ) -> Result<Option<RwGrant>, StoreError> {
        let own = SessionTerm::renewal(lease_ms, session);
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        let args = self.layout.args(name, holder, &own);
        let reply: Vec<Value> = self
            .layout
            .store
            .write_repeatable(&scripts::RW_HEARTBEAT, &self.keys(name, None), &args)
            .await?;
        match reply.as_slice() {
            [Value::Int(1), rest @ ..] => Ok(Some(grant(rest)?)),
            [Value::Int(0)] => Ok(None),
            other => Err(StoreError::reply("rw_heartbeat", other)),
        }
    }

    /// Drops one hold (every hold with `all`) in `mode`; `None` releases the
    /// write hold if the holder has one, else a read hold. `Ok(None)` when
    /// the holder has no hold of that mode.
    pub async fn release(
        &self,
        name: &str,
        holder: &str,
        mode: Option<Mode>,
        all: bool,
    ) -> Result<Option<RwReleased>, StoreError> {
        self.run_release(&scripts::RW_RELEASE, name, holder, mode, all)
            .await
    }

    /// A holder's `DELETE`: a holder that waits in the queue (for `mode`,
    /// or for either mode with `None`) leaves it at once and releases
    /// nothing (`left_queue`; leaving comes first, see
    /// `scripts/rw_leave.lua`); otherwise a [`RwLocks::release`].
    /// `Ok(None)` when the holder neither holds nor waits.
    pub async fn leave_or_release(
        &self,
        name: &str,
        holder: &str,
        mode: Option<Mode>,
        all: bool,
    ) -> Result<Option<RwReleased>, StoreError> {
        self.run_release(&scripts::RW_LEAVE, name, holder, mode, all)
            .await
    }

    async fn run_release(
        &self,
        script: &Script,
        name: &str,
        holder: &str,
        mode: Option<Mode>,
        all: bool,
    ) -> Result<Option<RwReleased>, StoreError> {
        let mode = mode.map(Mode::code).unwrap_or("");
        self.drop_holds(script, name, holder, &[mode, if all { "1" } else { "0" }])
            .await
    }

    /// Session `session` ends: drops every hold of the holder in `mode`
    /// if its holds were taken in it; true when there was one.
    pub async fn release_in(
        &self,
        name: &str,
        holder: &str,
        mode: Mode,
        session: &str,
    ) -> Result<bool, StoreError> {
        let own = [mode.code(), "1", session];
        let script = &scripts::RW_RELEASE;
        Ok(self.drop_holds(script, name, holder, &own).await?.is_some())
    }

    /// Runs a release script (`rw_release`, or `rw_leave` before it) with
    /// the script's own arguments `own`.
    async fn drop_holds(
        &self,
        script: &Script,
        name: &str,
        holder: &str,
        own: &[&str],
    ) -> Result<Option<RwReleased>, StoreError> {
        let args = self.layout.args(name, holder, own);
        let reply: Vec<Value> = self
            .layout
            .store
            .write(script, &self.keys(name, None), &args)
            .await?;
        match reply.as_slice() {
            [Value::Int(-1)] => Ok(None),
            [freed, count, mode] => {
                let code = reply_u64(freed, "released")?;
                Ok(Some(RwReleased {
                    released: code == 1,
                    hold_count: reply_u64(count, "count")?,
                    mode: Mode::from_reply(mode)?,
                    left_queue: code == 2,
                }))
            }
            other => Err(StoreError::reply(script.name(), other)),
        }
    }

    /// Removes every hold; true when something was held.
    pub async fn force_unlock(&self, name: &str) -> Result<bool, StoreError> {
        let args = self.layout.args(name, "", &[]);
        let removed: i64 = self
            .layout
            .store
            .write(&scripts::RW_FORCE_UNLOCK, &self.keys(name, None), &args)
            .await?;
        Ok(removed == 1)
    }

    pub async fn state(&self, name: &str) -> Result<RwState, StoreError> {
        let args = self.layout.args(name, "", &[]);
        let reply: Vec<Value> = self
            .layout
            .store
            .run(&scripts::RW_STATE, &self.keys(name, None), &args)
            .await?;
        match reply.as_slice() {
            [mode, readers, writes, ttl, fence, queued, holds] => Ok(RwState {
                mode: match mode {
                    Value::BulkString(b) if b.is_empty() => None,
                    m => Some(Mode::from_reply(m)?),
                },
                readers: reply_u64(readers, "readers")?,
                writer_hold_count: reply_u64(writes, "writes")?,
                ttl_ms: reply_u64(ttl, "ttl")?,
                fencing_token: reply_u64(fence, "fence")?,
                queued: reply_u64(queued, "queued")?,
                holds: HoldInfo::list(holds)?,
            }),
            other => Err(StoreError::reply("rw_state", other)),
        }
    }
}
