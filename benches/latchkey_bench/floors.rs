//! The floors: acquire+release pairs done by Lua scripts called straight on
//! Redis (on ONE multiplexed connection shared by all workers, so their
//! commands pipeline on it), with no HTTP front-end in between.
//!
//! - [`Floor::Own`]: latchkey's own scripts of a primitive
//!   (`latchkey::store::scripts`), with the keys and arguments the service
//!   passes them (`src/coord/{locks,rwlocks,semaphores}.rs` and the
//!   headers of `src/store/scripts/*.lua`), under a key prefix of our own,
//!   called as the service calls them: `FCALL` of their function
//!   libraries;
//! - [`Floor::Redisson`]: what a Java Redisson user runs — a reentrant lock
//!   (RLock) and a semaphore of expiring permits
//!   (RPermitExpirableSemaphore), written here in the same style.
//!
//! Every reply is checked: an acquire must be granted and a release must
//! give the hold back, or the pair fails the run.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::Value;
use redis::aio::MultiplexedConnection;

use latchkey::store::scripts::{
    FAIR_ACQUIRE, FAIR_RELEASE, LOCK_ACQUIRE, LOCK_RELEASE, Publish, RW_ACQUIRE, RW_RELEASE,
    SEM_ACQUIRE, SEM_RELEASE, SEM_SET,
};

use crate::client::LEASE_MS;
use crate::ops::{Op, Primitive, SEM_PERMITS};

/// Key prefix of every floor's keys (the service's is `latchkey:`).
const PREFIX: &str = "bench-direct:";

/// A Redisson client's id: a holder there is `<client id>:<thread id>`.
const REDISSON_CLIENT: &str = "5c0c8e52-6a3c-4f0e-9d1b-2f5e0a7c9b41";

/// The service's default queue grace (`queue_grace_ms`), which the
/// benchmark's service runs with: the third common argument of queued
/// primitives.
const QUEUE_GRACE_MS: &str = "5000";

/// What an acquire without `wait_ms` passes as the time it may still wait
/// (every kind, plain locks too, whose hooks ignore it).
const NO_WAIT_LEFT: &str = "0";

/// A Redisson-style object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Redisson {
    /// RLock: a hash of holder → hold count, a lease, a channel.
    Lock,
    /// RPermitExpirableSemaphore: a counter of free permits, a zset of
    /// permit ids → expiry, a channel.
    Semaphore,
}

/// Which scripts a floor pair runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Floor {
    /// latchkey's own scripts of that primitive.
    Own(Primitive),
    /// The Redisson-style scripts below.
    Redisson(Redisson),
}

/// Redisson-style RLock acquire, in our words. A hold is a hash field
/// holder → hold count; the hash carries the lease.
///
/// KEYS[1] lock hash; ARGV[1] lease ms; ARGV[2] holder id.
/// Returns nil when the caller holds it now (first hold or re-entry), else
/// the current holder's remaining lease in ms.
const REDISSON_LOCK_ACQUIRE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return nil
end
return redis.call('PTTL', KEYS[1])
";

/// Redisson-style RLock release, in our words.
///
/// KEYS[1] lock hash, KEYS[2] its channel; ARGV[1] the message, ARGV[2]
/// lease ms, ARGV[3] holder id. Returns nil when the caller does not hold
/// it, 0 when it still holds it (re-entered), 1 when the lock became free
/// (and the message was published).
const REDISSON_LOCK_RELEASE: &str = r"
if redis.call('HEXISTS', KEYS[1], ARGV[3]) == 0 then
  return nil
end
if redis.call('HINCRBY', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], ARGV[1])
return 1
";

/// Redisson-style permit-expirable semaphore acquire, in our words. Each
/// permit id stands for one permit (the benchmark takes one at a time).
///
/// KEYS[1] counter of free permits, KEYS[2] zset permit id → expiry (ms);
/// ARGV[1] permits k, ARGV[2] the new permit's id, ARGV[3] its expiry
/// (ms), ARGV[4] now (ms). Returns the id when granted, else nil.
const REDISSON_SEM_ACQUIRE: &str = r"
local lapsed = redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[4])
if lapsed > 0 then
  redis.call('INCRBY', KEYS[1], lapsed)
end
if tonumber(redis.call('GET', KEYS[1]) or '0') >= tonumber(ARGV[1]) then
  redis.call('DECRBY', KEYS[1], ARGV[1])
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
  return ARGV[2]
end
return nil
";

/// Redisson-style permit-expirable semaphore release, in our words.
///
/// KEYS[1] counter, KEYS[2] zset of permits, KEYS[3] channel; ARGV[1]
/// permits k, ARGV[2] permit id. Returns 1 when the permit was live (given
/// back and announced), else 0.
const REDISSON_SEM_RELEASE: &str = r"
if redis.call('ZREM', KEYS[2], ARGV[2]) == 0 then
  return 0
end
redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('PUBLISH', KEYS[3], ARGV[1])
return 1
";

/// How a primitive's keys are named and what its scripts get first, as
/// `coord::Layout` does it (not public, so mirrored here): keys of object
/// `n` are `{PREFIX}{n}:base`, `…:base:fence`, `…:base:undone:<attempt>`
/// (the state key again where there is no attempt), then the queue's
/// `…:base:queue`, `…:base:deadlines`, `…:base:tickets` where there is
/// one, then the primitive's own parts; the common arguments are the wake
/// channel `…:base:wake`, the holder, the queue grace ('' without a queue)
/// and the time left to wait ('' where none).
struct Layout {
    base: &'static str,
    queued: bool,
    extra: &'static [&'static str],
}

impl Layout {
    fn of(primitive: Primitive) -> Layout {
        let (base, queued, extra): (_, _, &'static [&'static str]) = match primitive {
            Primitive::Lock => ("lock", false, &[]),
            Primitive::FairLock => ("fair", true, &[]),
            Primitive::ReadLock => ("rw", true, &["readers"]),
            Primitive::Semaphore => ("sem", true, &["holds", "leases"]),
        };
        Layout {
            base,
            queued,
            extra,
        }
    }

    fn key(&self, name: &str, part: &str) -> String {
        match part {
            "" => format!("{PREFIX}{{{name}}}:{}", self.base),
            part => format!("{PREFIX}{{{name}}}:{}:{part}", self.base),
        }
    }

    fn keys(&self, name: &str, attempt: Option<&str>) -> Vec<String> {
        let state = self.key(name, "");
        let marker =
            attempt.map_or_else(|| state.clone(), |a| self.key(name, &format!("undone:{a}")));
        let mut keys = vec![state, self.key(name, "fence"), marker];
        if self.queued {
            keys.extend(["queue", "deadlines", "tickets"].map(|p| self.key(name, p)));
        }
        keys.extend(self.extra.iter().map(|p| self.key(name, p)));
        keys
    }

    fn args(&self, name: &str, holder: &str, wait_left: &str, own: &[&str]) -> Vec<String> {
        let grace = if self.queued { QUEUE_GRACE_MS } else { "" };
        let mut args = vec![
            self.key(name, "wake"),
            holder.into(),
            grace.into(),
            wait_left.into(),
        ];
        args.extend(own.iter().map(|a| a.to_string()));
        args
    }
}

/// One script call: the script, its keys and its arguments.
struct Call {
    script: usize,
    keys: Vec<String>,
    args: Vec<String>,
}

/// A key (or channel) of the Redisson-style object `name`: its name as a
/// hash tag under our prefix, then `suffix`.
fn redisson_key(name: &str, suffix: &str) -> String {
    format!("{PREFIX}{{{name}}}{suffix}")
}

/// Milliseconds since the epoch (Redisson passes the client's clock).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

fn text(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// `[1, token, …]` with a positive token and the other fields `rest`
/// (None: any value).
fn granted(v: &Value, rest: &[Option<i64>]) -> bool {
    let Value::Array(items) = v else {
        return false;
    };
    items.len() == 2 + rest.len()
        && int(&items[0]) == Some(1)
        && int(&items[1]).is_some_and(|token| token > 0)
        && (rest.iter().zip(&items[2..]))
            .all(|(want, got)| want.is_none_or(|w| int(got) == Some(w)))
}

/// Item `i` of an array reply is the string `want`.
fn item_is(v: &Value, i: usize, want: &[u8]) -> bool {
    matches!(v, Value::Array(items) if items.get(i).and_then(text) == Some(want))
}

/// The floors the bare server's stack floor also serves over HTTP
/// ([`crate::bare`]): the plain lock's own scripts and Redisson's lock.
pub const STACK_FLOORS: [Floor; 2] = [Floor::Own(Primitive::Lock), Floor::Redisson(Redisson::Lock)];

impl Floor {
    /// The route prefix of a [`STACK_FLOORS`] floor on the bare server.
    pub fn stack_route(self) -> &'static str {
        match self {
            Floor::Redisson(_) => "/redisson-locks",
            Floor::Own(_) => "/locks",
        }
    }

    /// Every floor, in the order its rounds run: each primitive's own,
    /// then Redisson's.
    pub fn all() -> impl Iterator<Item = Floor> {
        let redisson = [Redisson::Lock, Redisson::Semaphore];
        (Primitive::ALL.into_iter().map(Floor::Own)).chain(redisson.map(Floor::Redisson))
    }

    /// A short name (columns, errors, CPU notes).
    pub fn name(self) -> &'static str {
        match self {
            Floor::Own(Primitive::Lock) => "direct",
            Floor::Own(Primitive::ReadLock) => "direct read-lock",
            Floor::Own(Primitive::Semaphore) => "direct semaphore",
            Floor::Own(Primitive::FairLock) => "direct fair-lock",
            Floor::Redisson(Redisson::Lock) => "Redisson lock",
            Floor::Redisson(Redisson::Semaphore) => "Redisson semaphore",
        }
    }

    /// The (acquire, release) scripts.
    fn scripts(self) -> [Callable; 2] {
        let own = |a: &latchkey::store::scripts::Script, r: &latchkey::store::scripts::Script| {
            [a, r].map(|s| {
                let library = s.library(Publish::Classic);
                Callable::Function {
                    name: library.name.clone(),
                    code: library.code.clone(),
                }
            })
        };
        match self {
            Floor::Own(Primitive::Lock) => own(&LOCK_ACQUIRE, &LOCK_RELEASE),
            Floor::Own(Primitive::FairLock) => own(&FAIR_ACQUIRE, &FAIR_RELEASE),
            Floor::Own(Primitive::ReadLock) => own(&RW_ACQUIRE, &RW_RELEASE),
            Floor::Own(Primitive::Semaphore) => own(&SEM_ACQUIRE, &SEM_RELEASE),
            Floor::Redisson(Redisson::Lock) => [
                Callable::Script(redis::Script::new(REDISSON_LOCK_ACQUIRE)),
                Callable::Script(redis::Script::new(REDISSON_LOCK_RELEASE)),
            ],
            Floor::Redisson(Redisson::Semaphore) => [
                Callable::Script(redis::Script::new(REDISSON_SEM_ACQUIRE)),
                Callable::Script(redis::Script::new(REDISSON_SEM_RELEASE)),
            ],
        }
    }

    /// Does every worker share one object (the semaphores), or has each
    /// its own?
    fn shared(self) -> bool {
        matches!(
            self,
            Floor::Own(Primitive::Semaphore) | Floor::Redisson(Redisson::Semaphore)
        )
    }

    /// The object's name (a hash tag) for worker `i` at concurrency `c`.
    fn object(self, c: usize, i: usize) -> String {
        let tag = self.name().replace(' ', "-").to_lowercase();
        if self.shared() {
            format!("{tag}-c{c}")
        } else {
            format!("{tag}-c{c}-{i}")
        }
    }

    /// The acquire call of attempt `attempt` by `holder` on `name`.
    fn acquire(self, name: &str, holder: &str, attempt: &str) -> Call {
        let lease = LEASE_MS.to_string();
        let (keys, args) = match self {
            Floor::Own(p) => {
                let layout = Layout::of(p);
                let own: Vec<&str> = match p {
                    Primitive::Lock | Primitive::FairLock => vec![&lease, attempt],
                    Primitive::ReadLock => vec!["r", &lease, attempt],
                    Primitive::Semaphore => vec!["1", &lease, attempt],
                };
                (
                    layout.keys(name, Some(attempt)),
                    layout.args(name, holder, NO_WAIT_LEFT, &own),
                )
            }
            Floor::Redisson(Redisson::Lock) => {
                (vec![redisson_key(name, "")], vec![lease, holder.into()])
            }
            Floor::Redisson(Redisson::Semaphore) => {
                let now = now_ms();
                let keys = vec![redisson_key(name, ""), redisson_key(name, ":timeout")];
                let expiry = (now + LEASE_MS).to_string();
                let args = vec!["1".into(), attempt.into(), expiry, now.to_string()];
                (keys, args)
            }
        };
        Call {
            script: 0,
            keys,
            args,
        }
    }

    /// The release call of what `acquire` got.
    fn release(self, name: &str, holder: &str, attempt: &str) -> Call {
        let (keys, args) = match self {
            Floor::Own(p) => {
                let layout = Layout::of(p);
                let own: &[&str] = match p {
                    // One hold, not all of them.
                    Primitive::Lock | Primitive::FairLock => &["0"],
                    // The mode the holder has, one hold.
                    Primitive::ReadLock => &["", "0"],
                    Primitive::Semaphore => &[],
                };
                (layout.keys(name, None), layout.args(name, holder, "", own))
            }
            Floor::Redisson(Redisson::Lock) => {
                let channel = redisson_key(name, ":channel");
                let keys = vec![redisson_key(name, ""), channel];
                (keys, vec!["0".into(), LEASE_MS.to_string(), holder.into()])
            }
            Floor::Redisson(Redisson::Semaphore) => {
                let keys = vec![
                    redisson_key(name, ""),
                    redisson_key(name, ":timeout"),
                    redisson_key(name, ":channel"),
                ];
                (keys, vec!["1".into(), attempt.into()])
            }
        };
        Call {
            script: 1,
            keys,
            args,
        }
    }

    /// Is `reply` the grant of a first hold (of one permit) by `attempt`?
    pub fn granted(self, reply: &Value, attempt: &str) -> bool {
        match self {
            // {1, token, hold_count 1, lease}
            Floor::Own(Primitive::Lock | Primitive::FairLock) => {
                granted(reply, &[Some(1), Some(LEASE_MS as i64)])
            }
            // {1, token, 1, lease, 'r', read count 1, write count 0}
            Floor::Own(Primitive::ReadLock) => {
                granted(
                    reply,
                    &[Some(1), Some(LEASE_MS as i64), None, Some(1), Some(0)],
                ) && item_is(reply, 4, b"r")
            }
            // {1, token, permits 1, lease, grants 1}
            Floor::Own(Primitive::Semaphore) => {
                granted(reply, &[Some(1), Some(LEASE_MS as i64), Some(1)])
            }
            Floor::Redisson(Redisson::Lock) => matches!(reply, Value::Nil),
            Floor::Redisson(Redisson::Semaphore) => text(reply) == Some(attempt.as_bytes()),
        }
    }

    /// Did `reply` give the only hold back (and free the object)?
    fn released(self, reply: &Value) -> bool {
        let array = |want: &[i64]| match reply {
            Value::Array(items) => {
                items.len() >= want.len()
                    && want.iter().zip(items).all(|(w, got)| int(got) == Some(*w))
            }
            _ => false,
        };
        match self {
            // {1, 0}: the lock became free.
            Floor::Own(Primitive::Lock | Primitive::FairLock) => array(&[1, 0]),
            // {1, 0, 'r'}: free, no read hold left.
            Floor::Own(Primitive::ReadLock) => array(&[1, 0]) && item_is(reply, 2, b"r"),
            // The one permit given back.
            Floor::Own(Primitive::Semaphore) => int(reply) == Some(1),
            Floor::Redisson(_) => int(reply) == Some(1),
        }
    }

    /// Prepares the shared object, once per concurrency (the pairs give
    /// everything back, so every round reuses it): [`SEM_PERMITS`] permits.
    pub async fn set_up(self, conn: &mut MultiplexedConnection, c: usize) -> Result<(), String> {
        let name = self.object(c, 0);
        match self {
            Floor::Own(Primitive::Semaphore) => {
                let layout = Layout::of(Primitive::Semaphore);
                let permits = SEM_PERMITS.to_string();
                let reply: Value = (SEM_SET.redis(Publish::Classic))
                    .key(layout.keys(&name, None))
                    .arg(layout.args(&name, "", "", &[&permits]))
                    .invoke_async(conn)
                    .await
                    .map_err(|e| format!("sem_set: {e}"))?;
                // permits, available, queued first (then what state
                // reads add: the holds).
                let want = [SEM_PERMITS as i64, SEM_PERMITS as i64, 0];
                match &reply {
                    Value::Array(v) if v.iter().take(3).map(int).eq(want.map(Some)) => Ok(()),
                    other => Err(format!("sem_set replied {other:?}, want {want:?}")),
                }
            }
            Floor::Redisson(Redisson::Semaphore) => redis::pipe()
                .atomic()
                .set(redisson_key(&name, ""), SEM_PERMITS)
                .del(redisson_key(&name, ":timeout"))
                .query_async::<()>(conn)
                .await
                .map_err(|e| format!("setting up the Redisson semaphore: {e}")),
            _ => Ok(()),
        }
    }

    /// One pair per worker, all on the connection `conn`.
    pub fn pairs(self, conn: &MultiplexedConnection, c: usize) -> Vec<ScriptPair> {
        let scripts = Scripts::of(self);
        (0..c)
            .map(|i| ScriptPair {
                scripts: scripts.clone(),
                conn: conn.clone(),
                name: self.object(c, i),
                holder: match self {
                    Floor::Own(_) => format!("h{i}"),
                    Floor::Redisson(_) => format!("{REDISSON_CLIENT}:{i}"),
                },
                attempts: 0,
            })
            .collect()
    }
}

/// The wake channel of latchkey's lock `name` (the floors' key prefix).
pub fn lock_channel(name: &str) -> String {
    Layout::of(Primitive::Lock).key(name, "wake")
}

/// The fencing token of a grant of latchkey's own scripts.
pub fn token(reply: &Value) -> Option<u64> {
    match reply {
        Value::Array(items) if items.first().and_then(int) == Some(1) => items
            .get(1)
            .and_then(int)
            .and_then(|t| u64::try_from(t).ok()),
        _ => None,
    }
}

/// A script the way a floor calls it: by `EVALSHA` (a Redisson-style
/// script, as a Redisson client sends it) or by `FCALL` of its function
/// library (latchkey's own, as the service calls them).
pub enum Callable {
    Script(redis::Script),
    Function { name: String, code: String },
}

/// A floor's two scripts, ready to call.
#[derive(Clone)]
pub struct Scripts {
    floor: Floor,
    scripts: Arc<[Callable; 2]>,
}

impl Scripts {
    pub fn of(floor: Floor) -> Scripts {
        Scripts {
            floor,
            scripts: Arc::new(floor.scripts()),
        }
    }

    async fn invoke(&self, conn: &mut MultiplexedConnection, call: Call) -> Result<Value, String> {
        let failed = |e: redis::RedisError| format!("{}: {e}", self.floor.name());
        let (name, code) = match &self.scripts[call.script] {
            Callable::Script(script) => {
                let mut invocation = script.prepare_invoke();
                invocation.key(call.keys).arg(call.args);
                return invocation.invoke_async(conn).await.map_err(failed);
            }
            Callable::Function { name, code } => (name, code),
        };
        let mut fcall = redis::cmd("FCALL");
        fcall
            .arg(name)
            .arg(call.keys.len())
            .arg(call.keys)
            .arg(call.args);
        match fcall.query_async(conn).await {
            Err(e) if e.detail().is_some_and(|d| d.contains("Function not found")) => {
                let mut load = redis::cmd("FUNCTION");
                load.arg("LOAD").arg("REPLACE").arg(code);
                load.query_async::<Value>(conn).await.map_err(failed)?;
                fcall.query_async(conn).await.map_err(failed)
            }
            other => other.map_err(failed),
        }
    }

    /// One acquire (attempt `attempt`); returns the reply: a grant, or
    /// whatever said it must wait ([`Floor::granted`] tells).
    pub async fn acquire(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        holder: &str,
        attempt: &str,
    ) -> Result<Value, String> {
        let call = self.floor.acquire(name, holder, attempt);
        self.invoke(conn, call).await
    }

    /// The release of what `attempt` got; an error unless it gave the hold
    /// back.
    pub async fn release(
        &self,
        conn: &mut MultiplexedConnection,
        name: &str,
        holder: &str,
        attempt: &str,
    ) -> Result<(), String> {
        let call = self.floor.release(name, holder, attempt);
        let reply = self.invoke(conn, call).await?;
        if self.floor.released(&reply) {
            return Ok(());
        }
        Err(format!("{}: release replied {reply:?}", self.floor.name()))
    }

    pub fn floor(&self) -> Floor {
        self.floor
    }
}

/// A worker of a floor: acquire then release with one script each.
pub struct ScriptPair {
    scripts: Scripts,
    conn: MultiplexedConnection,
    name: String,
    holder: String,
    /// Attempt ids (permit ids of the Redisson semaphore), one per acquire.
    attempts: u64,
}

impl Op for ScriptPair {
    async fn run(&mut self) -> Result<Vec<Duration>, String> {
        self.attempts += 1;
        let attempt = format!("{}.{:x}", self.holder, self.attempts);
        let (scripts, conn) = (&self.scripts, &mut self.conn);
        let t0 = Instant::now();
        let acquired = (scripts.acquire(conn, &self.name, &self.holder, &attempt)).await?;
        let t1 = Instant::now();
        let floor = scripts.floor();
        if !floor.granted(&acquired, &attempt) {
            return Err(format!("{}: acquire replied {acquired:?}", floor.name()));
        }
        scripts
            .release(conn, &self.name, &self.holder, &attempt)
            .await?;
        Ok(vec![t1 - t0, t1.elapsed()])
    }
}
