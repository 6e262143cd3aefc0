//! Sessions (Consul sessions, etcd leases) as a plain Rust API over the
//! store: one TTL that many holds of every primitive attach to, renewed by
//! one heartbeat, whose end releases them all.
//!
//! A session's holds live in their own objects' hash slots, so on a Redis
//! Cluster no script can reach them all. Instead, every attached hold's own
//! lease is kept equal to the session's remaining TTL:
//!
//! - an acquire in a session takes its hold with the session's TTL as the
//!   lease, then [`Sessions::attach`]es it: records it in the session,
//!   renews it (its primitive's own heartbeat script) for the session's
//!   remaining TTL, and checks that no session heartbeat ran meanwhile
//!   (else it renews it again) and that the session still exists (else the
//!   caller gives the hold back);
//! - [`Sessions::heartbeat`] renews the session, then every attached hold
//!   for the same TTL, and forgets the holds that are gone;
//! - when heartbeats stop, the session and its holds expire together (the
//!   holds a few ms later: the time their renewal took), by the primitives'
//!   own expiry;
//! - [`Sessions::delete`] releases every attached hold with its
//!   primitive's release script (which wakes its waiters), then removes
//!   the session.
//!
//! Redis layout: one hash `{prefix}{id}:session` (see `scripts/session.lua`).

use std::collections::HashMap;

use futures_util::future::join_all;
use redis::Value;

use super::locks::Locks;
use super::redlock::RedLocks;
use super::rwlocks::{Mode, RwLocks};
use super::semaphores::Semaphores;
use crate::store::{Script, Store, StoreError, reply_u64, scripts};

/// How many times an attach renews its holds again when session
/// heartbeats keep running while it aligns them (each heartbeat renews
/// them itself, so one more round is almost always the last).
const ALIGN_ROUNDS: usize = 3;

/// What kind of hold is attached to a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldKind {
    Lock,
    FairLock,
    Read,
    Write,
    Semaphore,
    Redlock,
}

impl HoldKind {
    const ALL: [HoldKind; 6] = [
        HoldKind::Lock,
        HoldKind::FairLock,
        HoldKind::Read,
        HoldKind::Write,
        HoldKind::Semaphore,
        HoldKind::Redlock,
    ];

    fn code(self) -> &'static str {
        match self {
            HoldKind::Lock => "lock",
            HoldKind::FairLock => "fair",
            HoldKind::Read => "read",
            HoldKind::Write => "write",
            HoldKind::Semaphore => "sem",
            HoldKind::Redlock => "redlock",
        }
    }
}

/// One hold attached to a session: enough to renew and release it. A
/// multi-lock attaches one hold per lock of its set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub kind: HoldKind,
    /// The object's name as the store keys it (namespaced).
    pub name: String,
    pub holder: String,
}

impl Hold {
    /// Its field in the session hash: `<kind>|<holder>|<name>` (neither a
    /// holder id nor a name contains `|`).
    fn field(&self) -> String {
        format!("{}|{}|{}", self.kind.code(), self.holder, self.name)
    }

    fn from_field(field: &str) -> Option<Hold> {
        let mut parts = field.splitn(3, '|');
        let (code, holder, name) = (parts.next()?, parts.next()?, parts.next()?);
        let kind = HoldKind::ALL.into_iter().find(|k| k.code() == code)?;
        Some(Hold {
            kind,
            name: name.to_string(),
            holder: holder.to_string(),
        })
    }
}

/// A session's public state (never its holds' holder ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionState {
    pub ttl_ms: u64,
    pub expires_in_ms: u64,
    /// Holds attached (see [`Sessions::state`]).
    pub holds: u64,
}

/// A session renewed with every hold still attached to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renewed {
    pub ttl_ms: u64,
    /// The holds renewed: every hold attached but those found gone (a
    /// client that counts its holds sees here whether one was lost).
    pub holds: u64,
}

/// Attached holds as the session hash has them: (hold, the version that
/// attached it).
type Attached = Vec<(Hold, String)>;

/// Reads `field, value, ...` pairs of attached holds; a field no hold
/// reads as (someone else wrote the hash) is skipped.
fn attached(pairs: &[Value]) -> Result<Attached, StoreError> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        Value::Int(i) => Ok(i.to_string()),
        other => Err(StoreError::Unexpected(format!("session field {other:?}"))),
    };
    let mut holds = Vec::new();
    for pair in pairs.chunks(2) {
        if let [field, value] = pair
            && let Some(hold) = Hold::from_field(&text(field)?)
        {
            holds.push((hold, text(value)?));
        }
    }
    Ok(holds)
}

/// The session's state and its attached holds.
struct Read {
    state: SessionState,
    version: u64,
    holds: Attached,
}

/// Cheap to clone: handles only.
#[derive(Clone, Debug)]
pub struct Sessions {
    store: Store,
    locks: Locks,
    fair_locks: Locks,
    rwlocks: RwLocks,
    semaphores: Semaphores,
    redlocks: Option<RedLocks>,
}

impl Sessions {
    /// Sessions over these primitives (the very handles the service
    /// serves them with).
    pub fn new(
        store: Store,
        (locks, fair_locks): (Locks, Locks),
        rwlocks: RwLocks,
        semaphores: Semaphores,
        redlocks: Option<RedLocks>,
    ) -> Self {
        Sessions {
            store,
            locks,
            fair_locks,
            rwlocks,
            semaphores,
            redlocks,
        }
    }

    /// Runs a session script that is safe to repeat (releases happen
    /// outside, by each hold's own script).
    async fn call<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        id: &str,
        args: &[impl AsRef<str> + Sync],
    ) -> Result<T, StoreError> {
        let key = [self.store.key(id, "session")];
        self.store.write_repeatable(script, &key, args).await
    }

    /// Creates session `id` (namespaced like an object name); false when
    /// one of that id exists.
    pub async fn create(&self, id: &str, ttl_ms: u64) -> Result<bool, StoreError> {
        let created: i64 = self
            .call(&scripts::SESSION_CREATE, id, &[ttl_ms.to_string()])
            .await?;
        Ok(created == 1)
    }

    async fn read(&self, id: &str) -> Result<Option<Read>, StoreError> {
        let key = [self.store.key(id, "session")];
        let reply: Vec<Value> = self
            .store
            .run(&scripts::SESSION_STATE, &key, &[] as &[&str])
            .await?;
        match reply.as_slice() {
            [] => Ok(None),
            [ttl, pttl, version, pairs @ ..] => {
                let holds = attached(pairs)?;
                Ok(Some(Read {
                    state: SessionState {
                        ttl_ms: reply_u64(ttl, "ttl")?,
                        expires_in_ms: reply_u64(pttl, "pttl")?,
                        holds: holds.len() as u64,
                    },
                    version: reply_u64(version, "version")?,
                    holds,
                }))
            }
            other => Err(StoreError::reply("session_state", other)),
        }
    }

    /// The session's state; `Ok(None)` when it does not exist. `holds`
    /// counts the holds attached to it that were still held at its last
    /// heartbeat, and those attached since: a hold released by its holder
    /// directly is dropped from the count by the session's next heartbeat.
    pub async fn state(&self, id: &str) -> Result<Option<SessionState>, StoreError> {
        Ok(self.read(id).await?.map(|read| read.state))
    }

    /// Renews `hold` for `lease_ms`; false when it is no longer held.
    async fn renew(&self, hold: &Hold, lease_ms: u64) -> Result<bool, StoreError> {
        let (name, holder, lease) = (hold.name.as_str(), hold.holder.as_str(), Some(lease_ms));
        match hold.kind {
            HoldKind::Lock => Ok(self.locks.heartbeat(name, holder, lease).await?.is_some()),
            HoldKind::FairLock => Ok(self
                .fair_locks
                .heartbeat(name, holder, lease)
                .await?
                .is_some()),
            // An rwlock's heartbeat renews every hold of its holder; the
            // hold of this mode is gone when its count is 0.
            HoldKind::Read | HoldKind::Write => {
                let renewed = self.rwlocks.heartbeat(name, holder, lease).await?;
                Ok(renewed.is_some_and(|g| match hold.kind {
                    HoldKind::Read => g.read_hold_count > 0,
                    _ => g.write_hold_count > 0,
                }))
            }
            HoldKind::Semaphore => Ok(self
                .semaphores
                .heartbeat(name, holder, lease)
                .await?
                .is_some()),
            HoldKind::Redlock => match &self.redlocks {
                Some(redlocks) => Ok(redlocks.heartbeat(name, holder, lease).await?.is_some()),
                None => Ok(false),
            },
        }
    }

    /// Releases every reentrant hold of `hold` (each primitive's release
    /// wakes its waiters); false when it was no longer held.
    async fn release(&self, hold: &Hold) -> Result<bool, StoreError> {
        let (name, holder) = (hold.name.as_str(), hold.holder.as_str());
        match hold.kind {
            HoldKind::Lock => Ok(self.locks.release(name, holder, true).await?.is_some()),
            HoldKind::FairLock => Ok(self.fair_locks.release(name, holder, true).await?.is_some()),
            HoldKind::Read | HoldKind::Write => {
                let mode = match hold.kind {
                    HoldKind::Read => Mode::Read,
                    _ => Mode::Write,
                };
                let released = self.rwlocks.release(name, holder, Some(mode), true).await?;
                Ok(released.is_some())
            }
            HoldKind::Semaphore => Ok(self.semaphores.release(name, holder).await?.is_some()),
            HoldKind::Redlock => match &self.redlocks {
                Some(redlocks) => Ok(redlocks.release(name, holder).await?.is_some()),
                None => Ok(false),
            },
        }
    }

    /// Renews every hold for `lease_ms` at once; the ones no longer held.
    async fn renew_all<'a>(
        &self,
        holds: impl Iterator<Item = &'a Hold>,
        lease_ms: u64,
    ) -> Result<Vec<&'a Hold>, StoreError> {
        let renewed =
            join_all(holds.map(|h| async move { (h, self.renew(h, lease_ms).await) })).await;
        let mut gone = Vec::new();
        let mut failed = None;
        for (hold, result) in renewed {
            match result {
                Ok(true) => {}
                Ok(false) => gone.push(hold),
                Err(e) => failed = Some(e),
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(gone),
        }
    }

    /// The ttl of session `id`, to acquire in it with; `Ok(None)` when it
    /// does not exist.
    pub async fn ttl(&self, id: &str) -> Result<Option<u64>, StoreError> {
        Ok(self.read(id).await?.map(|read| read.state.ttl_ms))
    }

    /// Attaches freshly granted holds to session `id` and sets their leases
    /// to the session's remaining TTL. Returns that TTL (when the holds
    /// now expire), or `Ok(None)` when the session no longer exists: the
    /// caller then gives the holds back.
    pub async fn attach(&self, id: &str, holds: &[Hold]) -> Result<Option<u64>, StoreError> {
        let fields: Vec<String> = holds.iter().map(Hold::field).collect();
        let reply: Vec<Value> = self.call(&scripts::SESSION_ATTACH, id, &fields).await?;
        let (mut remaining, mut version) = match reply.as_slice() {
            [Value::Int(0)] => return Ok(None),
            [Value::Int(1), pttl, version] => {
                (reply_u64(pttl, "pttl")?, reply_u64(version, "version")?)
            }
            other => return Err(StoreError::reply("session_attach", other)),
        };
        for _ in 0..ALIGN_ROUNDS {
            // A hold that is already gone again (released, or force
            // unlocked) is the next heartbeat's to forget.
            self.renew_all(holds.iter(), remaining.max(1)).await?;
            let Some(now) = self.read(id).await? else {
                return Ok(None);
            };
            // No heartbeat or attach ran since: the leases are aligned.
            // Otherwise a heartbeat may have renewed these holds before
            // this renewal shortened them again: once more.
            if now.version == version {
                return Ok(Some(now.state.expires_in_ms));
            }
            (remaining, version) = (now.state.expires_in_ms, now.version);
        }
        Ok(Some(remaining))
    }

    /// Renews session `id` (for `ttl_ms`, or the ttl it has), then every
    /// hold attached to it for the same TTL, and forgets the holds that
    /// are gone. `Ok(None)` when the session does not exist. An error when
    /// some hold could not be renewed: the session was, and a retry renews
    /// the rest.
    pub async fn heartbeat(
        &self,
        id: &str,
        ttl_ms: Option<u64>,
    ) -> Result<Option<Renewed>, StoreError> {
        let ttl = ttl_ms.map(|t| t.to_string()).unwrap_or_default();
        let reply: Vec<Value> = self.call(&scripts::SESSION_HEARTBEAT, id, &[ttl]).await?;
        let (ttl_ms, holds) = match reply.as_slice() {
            [Value::Int(0)] => return Ok(None),
            [Value::Int(1), ttl, pairs @ ..] => (reply_u64(ttl, "ttl")?, attached(pairs)?),
            other => return Err(StoreError::reply("session_heartbeat", other)),
        };
        let gone = self.renew_all(holds.iter().map(|(h, _)| h), ttl_ms).await?;
        if !gone.is_empty() {
            let mut pairs = Vec::with_capacity(2 * gone.len());
            for (hold, version) in holds.iter().filter(|(h, _)| gone.contains(&h)) {
                pairs.extend([hold.field(), version.clone()]);
            }
            let _: i64 = self.call(&scripts::SESSION_DETACH, id, &pairs).await?;
        }
        Ok(Some(Renewed {
            ttl_ms,
            holds: (holds.len() - gone.len()) as u64,
        }))
    }

    /// Releases every hold attached to session `id` (every reentrant hold
    /// of each), then removes the session. Returns how many holds were
    /// released (held until then); `Ok(None)` when the session does not
    /// exist. An error leaves the session in place, so that a retry
    /// releases what is left.
    pub async fn delete(&self, id: &str) -> Result<Option<u64>, StoreError> {
        let Some(read) = self.read(id).await? else {
            return Ok(None);
        };
        let mut released = self.release_all(read.holds.iter().map(|(h, _)| h)).await?;
        let reply: Vec<Value> = self
            .call(&scripts::SESSION_DELETE, id, &[] as &[&str])
            .await?;
        let late = match reply.as_slice() {
            // Deleted meanwhile by another request, which released the rest.
            [Value::Int(0)] => return Ok(Some(released)),
            [Value::Int(1), pairs @ ..] => attached(pairs)?,
            other => return Err(StoreError::reply("session_delete", other)),
        };
        // Holds attached (or attached again) while the first ones were
        // released. The session is gone: what cannot be released now ends
        // with its lease, which is the session's.
        let seen: HashMap<String, &String> = read
            .holds
            .iter()
            .map(|(h, version)| (h.field(), version))
            .collect();
        let late = late
            .iter()
            .filter(|(h, version)| seen.get(&h.field()) != Some(&version))
            .map(|(h, _)| h);
        match self.release_all(late).await {
            Ok(n) => released += n,
            Err(e) => tracing::warn!(
                error = %e,
                "could not release a hold attached to a session while it was deleted; it ends \
                 with its lease"
            ),
        }
        Ok(Some(released))
    }

    /// Releases every hold at once; how many were held.
    async fn release_all<'a>(
        &self,
        holds: impl Iterator<Item = &'a Hold>,
    ) -> Result<u64, StoreError> {
        let results = join_all(holds.map(|h| self.release(h))).await;
        let mut released = 0;
        for result in results {
            released += u64::from(result?);
        }
        Ok(released)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_reads_back_from_its_field() {
        for kind in HoldKind::ALL {
            let hold = Hold {
                kind,
                name: "team-a/orders:2026".into(),
                holder: "worker:1".into(),
            };
            assert_eq!(Hold::from_field(&hold.field()), Some(hold));
        }
        assert_eq!(Hold::from_field("ttl"), None);
        assert_eq!(Hold::from_field("nope|h|n"), None);
    }
}
