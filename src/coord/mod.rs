//! The coordination primitives as plain Rust APIs over the [`Store`]:
//! each operation is one atomic Lua script; blocking is the wait engine's
//! business ([`crate::wait`]), and HTTP the adapter's.
//!
//! The types every primitive's "try" shares live here: an [`AttemptId`]
//! names one try so that exactly what it granted can be given back, and a
//! try either grants or reports what [`Blocked`] it.
//!
//! [`Store`]: crate::store::Store

pub mod latches;
pub mod locks;
pub mod multilocks;
pub mod ratelimiters;
pub mod redlock;
pub mod rwlocks;
pub mod semaphores;
pub mod sessions;

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use redis::{FromRedisValue, Value};

use crate::store::{Script, Store, StoreError, reply_u64, scripts};

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

/// How long an `Idempotency-Key` is remembered: 10 minutes.
pub const IDEMPOTENCY_MS: u64 = 600_000;

/// A request's `Idempotency-Key` on one object, for the scripts that
/// honour one (`scripts/idempotency.lua`): they get the object's main key
/// first and the key's record second (the main key again without one).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Idempotent<'a> {
    pub key: Option<&'a str>,
}

impl Idempotent<'_> {
    /// `[state, record]`: the record is `{prefix}{name}:<base>:idem:<key>`.
    pub fn keys(&self, store: &Store, name: &str, base: &str, state: String) -> [String; 2] {
        let record = match self.key {
            Some(key) => store.key_of(name, &[base, ":idem:", key]),
            None => state.clone(),
        };
        [state, record]
    }

    /// Runs the script: with a key, a repeat only replays the first answer,
    /// so the call is repeated once on a dead connection; without one it
    /// runs at most once.
    pub async fn write<T: FromRedisValue>(
        &self,
        store: &Store,
        script: &Script,
        keys: &[String],
        args: &[String],
    ) -> Result<T, StoreError> {
        match self.key {
            Some(_) => store.write_repeatable(script, keys, args).await,
            None => store.write(script, keys, args).await,
        }
    }
}

/// Why a request could not be granted (yet): what its "not acquired"
/// answer and its SSE `waiting` events report.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Blocked {
    /// The hint for clients: when trying again may succeed, in ms.
    pub retry_after_ms: u64,
    /// Waiters ahead, where the resource queues fairly.
    pub position: Option<u64>,
    /// The waiter's place in a queue kept in Redis, where there is one.
    pub place: Option<Place>,
    /// Permits available right now, where the resource counts permits.
    pub available: Option<u64>,
    /// Which of the request's objects block it, where it names several
    /// (at most 64): bit `i` stands for its `i`-th object.
    pub blocked_by: Option<u64>,
    /// The owner labels of the holds that block the request (at most
    /// [`MAX_HELD_BY`]; `None` for a hold without one). Empty when no hold
    /// blocks it (only waiters queued ahead). Never holder ids.
    pub held_by: Vec<Option<String>>,
    /// Of an acquire of several rate limits: the one that refused.
    pub which: Option<usize>,
}

/// The most owners a refusal names in `held_by`.
pub const MAX_HELD_BY: usize = 10;

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
    /// Waiting could never succeed: the request is refused at once.
    Refused(Refusal),
}

/// Why a request is refused rather than made to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A reader asked to write while other readers hold the rwlock: it
    /// would wait for itself.
    UpgradeWouldDeadlock,
    /// The object does not exist (a semaphore never configured, or
    /// deleted while the request waited).
    NotFound,
    /// The request asks for more than the object has (`permits` of a
    /// semaphore that has only this many).
    MoreThan(u64),
    /// The session the request acquires in does not exist (expired or
    /// deleted, possibly while the request waited).
    NoSession,
    /// The request asks for more than the object ever admits at once
    /// (`permits` beyond a rate limiter's burst).
    OverBurst(u64),
    /// [`Refusal::NotFound`] of limit `0` of an acquire of several.
    NotFoundOf(usize),
    /// [`Refusal::OverBurst`] of limit `0` of an acquire of several.
    OverBurstOf(usize, u64),
    /// The holder already holds the object in another session, or in one
    /// while the request names none (or the reverse): one hold cannot be
    /// in two sessions, since a session renews and releases only its own.
    SessionMismatch,
}

/// A session acting on a hold (the book's "Sessions"
/// (docs/src/sessions.md)): an acquire in it, or its renewal of a hold.
/// The primitive records the session in the hold (so that only this
/// session renews and releases it on its behalf) and the version of the
/// session's state the lease comes from: a hold keeps the newest version
/// it applied and ignores older renewals, so a slow heartbeat never
/// outruns a later one. The hold's script takes as its lease the session's
/// end (`end_ms`) less its own now, so a try or a renewal that reaches
/// Redis late (a stall, a retry) never makes the hold outlive the session;
/// one that arrives after the end ends the hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionTerm<'a> {
    /// The session's id, namespaced like an object name.
    pub id: &'a str,
    /// The version of the session's state the lease comes from.
    pub version: u64,
    /// When the session ends by that version: ms since the Unix epoch on
    /// the session's Redis clock.
    pub end_ms: u64,
    /// The session's owner label: the label of a hold taken in it by an
    /// acquire that sends none (the book's "Who holds it"
    /// (docs/src/who-holds-it.md)).
    pub owner: Option<&'a str>,
}

/// Marks an owner argument as a session's label lent to a hold whose
/// acquire sent none (see [`SessionTerm::owner_of`]).
pub const LENT_OWNER: char = '\u{1}';

impl<'a> SessionTerm<'a> {
    /// The owner argument of an acquire sent with `owner` ('' for none):
    /// its own label, or else its session's lent (marked by a leading
    /// [`LENT_OWNER`]: a label never holds a control character), which
    /// labels a new hold only: a re-entry that sends none keeps the label
    /// the hold has (the scripts' holds.lua).
    pub fn owner_of(owner: &'a str, term: Option<SessionTerm<'a>>) -> Cow<'a, str> {
        match (owner, term.and_then(|t| t.owner)) {
            ("", Some(session)) => Cow::Owned(format!("{LENT_OWNER}{session}")),
            (own, _) => Cow::Borrowed(own),
        }
    }
}

impl SessionTerm<'_> {
    /// The lease argument of an acquire or heartbeat script and the two
    /// arguments it takes for the session: in a session, the session's end
    /// (ms, Redis clock: the script counts the lease from its own now),
    /// the session and its version; else `lease_ms` and '' twice.
    pub(crate) fn args(lease_ms: Option<u64>, term: Option<SessionTerm<'_>>) -> [String; 3] {
        match term {
            Some(t) => [
                t.end_ms.to_string(),
                t.id.to_string(),
                t.version.to_string(),
            ],
            None => [
                lease_ms.map(|l| l.to_string()).unwrap_or_default(),
                String::new(),
                String::new(),
            ],
        }
    }

    /// The own arguments of a primitive's heartbeat script: the lease (''
    /// to renew for the lease the hold has), then for a session's renewal
    /// (whose lease is the session's end, see [`Self::args`]) the session
    /// and the version its end comes from.
    pub(crate) fn renewal(lease_ms: Option<u64>, term: Option<SessionTerm<'_>>) -> Vec<String> {
        let [lease, id, version] = Self::args(lease_ms, term);
        match term {
            Some(_) => vec![lease, id, version],
            None => vec![lease],
        }
    }
}

/// How one object's keys are named and what its scripts get first: the
/// layout every lock-like primitive shares (see `scripts/lock_plain.lua`,
/// `scripts/queue.lua`, `scripts/rw.lua`).
///
/// Keys of an object `n` of a primitive whose base is `b`: `{prefix}{n}:b`
/// (its state), `…:b:fence` (fencing counter, never expires), `…:b:wake`
/// (pub/sub channel), `…:b:undone:<attempt id>` (marker: that attempt was
/// given up), and where waiters queue in Redis `…:b:queue`, `…:b:deadlines`,
/// `…:b:tickets`.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub store: Store,
    /// `lock`, `fair`, `rw`.
    pub base: &'static str,
    /// Set where waiters queue in Redis: how long an entry outlives its
    /// request's wait.
    pub queue_grace_ms: Option<u64>,
}

impl Layout {
    /// The layout of a primitive whose waiters queue in Redis.
    pub fn queued(store: Store, base: &'static str, queue_grace_ms: u64) -> Self {
        Layout {
            store,
            base,
            queue_grace_ms: Some(queue_grace_ms),
        }
    }

    pub fn key(&self, name: &str, part: &str) -> String {
        if part.is_empty() {
            self.store.key(name, self.base)
        } else {
            self.store.key_of(name, &[self.base, ":", part])
        }
    }

    /// The pub/sub channel of the object's wake messages.
    pub fn wake_channel(&self, name: &str) -> String {
        self.key(name, "wake")
    }

    /// The keys every script gets: state, fence, the attempt's marker (the
    /// state key again when there is none), the queue's three keys where
    /// there is a queue, then `extra` parts. Every key but the state is
    /// the state key's name, a colon and a part: the name is read once.
    pub fn keys(&self, name: &str, attempt: Option<&AttemptId>, extra: &[&str]) -> Vec<String> {
        self.keys_under(&self.store.key(name, self.base), attempt, extra)
    }

    /// [`Self::keys`] of the object whose state key is `state`.
    fn keys_under(&self, state: &str, attempt: Option<&AttemptId>, extra: &[&str]) -> Vec<String> {
        let queued = if self.queue_grace_ms.is_some() { 3 } else { 0 };
        let mut keys = Vec::with_capacity(3 + queued + extra.len());
        keys.push(state.to_string());
        keys.push(under(state, &["fence"]));
        keys.push(match attempt {
            Some(a) => under(state, &["undone:", a.as_str()]),
            None => state.to_string(),
        });
        if queued > 0 {
            keys.extend(["queue", "deadlines", "tickets"].map(|p| under(state, &[p])));
        }
        keys.extend(extra.iter().map(|p| under(state, &[p])));
        keys
    }

    /// The common arguments (wake channel, holder, queue grace, and an
    /// empty wait: the script is no acquire), then the script's own.
    pub fn args(&self, name: &str, holder: &str, own: &[&str]) -> Vec<String> {
        self.acquire_args(name, holder, Wait::default(), own)
    }

    /// An acquire's arguments: the common ones with its [`Wait`], then the
    /// script's own. The grace sent is what is left of it since the
    /// request's wait ended (only an undo's wait may have ended: see
    /// [`Wait::ended_ms_ago`]); a wait whose grace has passed sends no
    /// place.
    pub fn acquire_args(&self, name: &str, holder: &str, wait: Wait, own: &[&str]) -> Vec<String> {
        let grace = (self.queue_grace_ms).map(|g| g.saturating_sub(wait.ended_ms_ago));
        let wait = match grace {
            Some(0) => Wait::default(),
            _ => wait,
        };
        let mut args = vec![
            self.wake_channel(name),
            holder.to_string(),
            grace.map(|g| g.to_string()).unwrap_or_default(),
            wait.arg(),
        ];
        args.extend(own.iter().map(|a| a.to_string()));
        args
    }
}

/// What an acquire's try tells a queue kept in Redis about its request
/// (`scripts/queue.lua`, ARGV[4]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wait {
    /// The time the request may still wait, in ms: `None` for a try
    /// (`wait_ms: 0`), which takes no place; a long-poll's try keeps its
    /// place for the time left plus the grace.
    pub left_ms: Option<u64>,
    /// The ticket (place) the request's latest blocked reply gave; 0 for
    /// none yet. When a DELETE of the holder removed that entry while the
    /// request was open, the try takes no place again, is granted nothing,
    /// and answers with no place, which ends the wait (see [`Ticket`]).
    pub ticket: u64,
    /// An undo's: how long ago its request's wait ended (0 while it
    /// waits). A long-poll that ended without a grant keeps its place for
    /// the grace after its end, so the place an undo gives back lasts what
    /// is left of the grace, and none once the grace has passed.
    pub ended_ms_ago: u64,
}

impl Wait {
    /// ARGV[4]: '' (none), '<left>', or '<left>|<ticket>'.
    fn arg(&self) -> String {
        match (self.left_ms, self.ticket) {
            (None, _) => String::new(),
            (Some(left), 0) => left.to_string(),
            (Some(left), ticket) => format!("{left}|{ticket}"),
        }
    }
}

impl From<Option<u64>> for Wait {
    fn from(left_ms: Option<u64>) -> Self {
        Wait {
            left_ms,
            ticket: 0,
            ended_ms_ago: 0,
        }
    }
}

/// The ticket of one acquisition's place, as its latest blocked reply gave
/// it (it changes only when Redis lost the queue), shared by its clones:
/// every later try of the request sends it (see [`Wait`]).
#[derive(Debug, Clone, Default)]
pub struct Ticket(Arc<AtomicU64>);

impl Ticket {
    /// The [`Wait`] of a request with `left_ms` to wait and the ticket
    /// known so far.
    pub fn wait(&self, left_ms: Option<u64>) -> Wait {
        Wait {
            left_ms,
            ticket: self.0.load(Ordering::Relaxed),
            ended_ms_ago: 0,
        }
    }

    /// The [`Wait`] an undo of one of the request's tries sends, now: the
    /// time left until `deadline` (`None`: a try, which has no place), or
    /// how long ago it passed. A long-poll keeps its place after its wait
    /// ended as long as the grace lasts, even when the try given back was
    /// its last look at the deadline, cut short by a stalled Redis and
    /// answered "not acquired".
    pub fn kept(&self, deadline: Option<tokio::time::Instant>) -> Wait {
        let now = tokio::time::Instant::now();
        let ended = deadline.map_or(0, |d| now.saturating_duration_since(d).as_millis());
        Wait {
            ended_ms_ago: u64::try_from(ended).unwrap_or(u64::MAX),
            ..self.wait(deadline.map(|d| d.saturating_duration_since(now).as_millis() as u64))
        }
    }

    /// Runs one try with the [`Wait`] for `left_ms` and the ticket known so
    /// far, and remembers the ticket its reply gives.
    pub async fn tried<T, Fut>(
        &self,
        left_ms: Option<u64>,
        attempt: impl FnOnce(Wait) -> Fut,
    ) -> Result<Attempt<T>, StoreError>
    where
        Fut: Future<Output = Result<Attempt<T>, StoreError>>,
    {
        let tried = attempt(self.wait(left_ms)).await;
        if let Ok(Attempt::Blocked(Blocked {
            place: Some(place), ..
        })) = &tried
        {
            self.0.store(place.ticket, Ordering::Relaxed);
        }
        tried
    }
}

/// How long an undo's marker keeps a late copy of its attempt from
/// granting. Far longer than any reply can be late: a try is bounded by
/// the Redis response timeout.
const UNDO_MARKER_MS: &str = "60000";

impl Layout {
    /// Runs an undo script (`scripts/lock_undo.lua`, `scripts/rw_undo.lua`)
    /// for `attempt`: gives back exactly what it granted, if anything (true
    /// then), and leaves a marker so that a late copy grants nothing. `wait`
    /// is the attempt's long-poll's ([`Ticket::kept`]: its place is given
    /// back while the long-poll keeps one; see `restore_place` in
    /// `scripts/queue.lua`), else the default.
    pub async fn undo(
        &self,
        script: &Script,
        name: &str,
        (holder, wait): (&str, Wait),
        attempt: &AttemptId,
        extra: &[&str],
    ) -> Result<bool, StoreError> {
        let keys = self.keys(name, Some(attempt), extra);
        let own = [attempt.as_str(), UNDO_MARKER_MS];
        let args = self.acquire_args(name, holder, wait, &own);
        let undone: i64 = self.store.write_repeatable(script, &keys, &args).await?;
        Ok(undone == 1)
    }

    /// Runs an acquire script (`scripts/lock_acquire.lua`,
    /// `scripts/rw_acquire.lua`, `scripts/sem_acquire.lua`) for `attempt`:
    /// the common arguments with the request's `wait`, then the
    /// primitive's own `first` argument where it has one (a mode, a number
    /// of permits), the lease (or the session's end), the attempt, the
    /// session and its version, and `owner`. Its reply is the script's.
    #[allow(clippy::too_many_arguments)]
    pub async fn acquire(
        &self,
        script: &Script,
        name: &str,
        (holder, owner): (&str, &str),
        first: Option<&str>,
        (lease_ms, wait): (u64, Wait),
        attempt: &AttemptId,
        session: Option<SessionTerm<'_>>,
        extra: &[&str],
    ) -> Result<Vec<Value>, StoreError> {
        let keys = self.keys(name, Some(attempt), extra);
        let [lease, session, version] = SessionTerm::args(Some(lease_ms), session);
        let own = [
            first.unwrap_or(""),
            &lease,
            attempt.as_str(),
            &session,
            &version,
            owner,
        ];
        let own = &own[usize::from(first.is_none())..];
        let args = self.acquire_args(name, holder, wait, own);
        self.store.write_repeatable(script, &keys, &args).await
    }

    /// A waiter's request ended before its deadline without a grant: its
    /// queue entry (`member`) now lapses one grace from now, so a client
    /// that polls again in time keeps its place.
    pub async fn leave(&self, name: &str, member: &str) -> Result<(), StoreError> {
        let args = self.args(name, member, &[]);
        let keys = self.keys(name, None, &[]);
        let _: i64 = self
            .store
            .write_repeatable(&scripts::QUEUE_LEAVE, &keys, &args)
            .await?;
        Ok(())
    }
}

/// `{state}:{parts…}`: a key of the object whose state key is `state`.
fn under(state: &str, parts: &[&str]) -> String {
    let mut key =
        String::with_capacity(state.len() + 1 + parts.iter().map(|p| p.len()).sum::<usize>());
    key.push_str(state);
    key.push(':');
    parts.iter().for_each(|p| key.push_str(p));
    key
}

/// Reads a queued waiter's reply `[hint, position, ticket, recheck_ms]`
/// (after the leading 0), as `scripts/queue.lua` builds it. A try has no
/// place (ticket 0): it never waits.
pub(crate) fn queued(reply: &[Value]) -> Result<Blocked, StoreError> {
    match reply {
        [hint, position, ticket, recheck] => {
            let recheck = reply_u64(recheck, "recheck")?;
            let ticket = reply_u64(ticket, "ticket")?;
            Ok(Blocked {
                which: None,
                retry_after_ms: reply_u64(hint, "hint")?,
                position: Some(reply_u64(position, "position")?),
                place: (ticket > 0).then_some(Place {
                    ticket,
                    recheck_ms: (recheck > 0).then_some(recheck),
                }),
                available: None,
                blocked_by: None,
                held_by: Vec::new(),
            })
        }
        other => Err(StoreError::Unexpected(format!(
            "a waiting reply of {other:?}"
        ))),
    }
}

/// An owner label as a script replies it: '' (or nil) for none.
pub(crate) fn reply_owner(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) if !bytes.is_empty() => {
            Some(String::from_utf8_lossy(bytes).into_owned())
        }
        Value::SimpleString(s) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

/// A script's list of the owners of blocking holds (`scripts/holds.lua`),
/// at most [`MAX_HELD_BY`] of them.
pub(crate) fn reply_held_by(value: &Value) -> Result<Vec<Option<String>>, StoreError> {
    match value {
        Value::Array(owners) => Ok(owners.iter().take(MAX_HELD_BY).map(reply_owner).collect()),
        Value::Nil => Ok(Vec::new()),
        other => Err(StoreError::Unexpected(format!("held_by: {other:?}"))),
    }
}

/// One hold as a state read reports it (`hold_entry` in
/// `scripts/holds.lua`): never its holder id or session id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldInfo {
    /// The owner label the acquire (or its session) sent, if any.
    pub owner: Option<String>,
    /// Remaining lease, in ms.
    pub expires_in_ms: u64,
    /// Since the grant that made the hold, in ms (a re-entry keeps it).
    pub held_for_ms: u64,
    /// Whether the hold was taken in a session.
    pub session: bool,
    /// What it holds: its hold count, or permits (semaphores).
    pub count: u64,
    /// `read` or `write` (rwlocks); `None` elsewhere.
    pub mode: Option<String>,
}

impl HoldInfo {
    /// Reads one `{owner, expires_in_ms, held_for_ms, in_session, count,
    /// mode}` entry.
    pub(crate) fn from_reply(value: &Value) -> Result<Self, StoreError> {
        match value {
            Value::Array(fields) => match fields.as_slice() {
                [owner, expires, held_for, session, count, mode] => Ok(HoldInfo {
                    owner: reply_owner(owner),
                    expires_in_ms: reply_u64(expires, "expires_in_ms")?,
                    held_for_ms: reply_u64(held_for, "held_for_ms")?,
                    session: reply_u64(session, "session")? == 1,
                    count: reply_u64(count, "count")?,
                    mode: reply_owner(mode),
                }),
                other => Err(StoreError::Unexpected(format!("a hold of {other:?}"))),
            },
            other => Err(StoreError::Unexpected(format!("a hold of {other:?}"))),
        }
    }

    /// Reads a list of holds.
    pub(crate) fn list(value: &Value) -> Result<Vec<Self>, StoreError> {
        match value {
            Value::Array(holds) => holds.iter().map(Self::from_reply).collect(),
            Value::Nil => Ok(Vec::new()),
            other => Err(StoreError::Unexpected(format!("holds: {other:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn holds_and_owners_are_read_from_script_replies() {
        let hold = Value::Array(vec![
            bulk("web-7"),
            Value::Int(2500),
            Value::Int(700),
            Value::Int(1),
            Value::Int(2),
            bulk("read"),
        ]);
        let info = HoldInfo::from_reply(&hold).unwrap();
        assert_eq!(info.owner.as_deref(), Some("web-7"));
        assert_eq!(
            (info.expires_in_ms, info.held_for_ms, info.count),
            (2500, 700, 2)
        );
        assert!(info.session);
        assert_eq!(info.mode.as_deref(), Some("read"));
        let none = Value::Array(vec![
            bulk(""),
            Value::Int(1),
            Value::Int(0),
            Value::Int(0),
            Value::Int(1),
            bulk(""),
        ]);
        let info = HoldInfo::from_reply(&none).unwrap();
        assert_eq!((info.owner, info.mode, info.session), (None, None, false));
        let many = Value::Array((0..12).map(|i| bulk(&format!("o{i}"))).collect());
        assert_eq!(reply_held_by(&many).unwrap().len(), MAX_HELD_BY);
        let mixed = Value::Array(vec![bulk(""), bulk("a")]);
        assert_eq!(reply_held_by(&mixed).unwrap(), vec![None, Some("a".into())]);
    }
}
