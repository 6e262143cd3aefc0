//! Sessions (Consul sessions, etcd leases) as a plain Rust API over the
//! store: one TTL that many holds of every primitive attach to, renewed by
//! one heartbeat, whose end releases them all.
//!
//! A session's holds live in their own objects' hash slots, so on a Redis
//! Cluster no script can reach them all. Instead, every attached hold's own
//! lease ends when the session does: the session's scripts answer with its
//! end (an absolute time on Redis's clock), which the hold's script counts
//! its lease to when it runs (so a renewal delayed by a stall or a retry
//! adds nothing, and one that comes after the end ends the hold), and
//! every hold
//! records its session (so that a session renews and releases only the
//! holds taken in it, never another hold of the same holder id) and the
//! newest version of the session's state it applied (the session hash's
//! `v`, raised by every heartbeat and attach: a hold ignores a renewal
//! older than what it has, so a slow heartbeat never outruns a later one):
//!
//! - each try of an acquire in a session reads the session's end and
//!   version ([`Sessions::terms`]), takes its hold until that end in the
//!   session at that version, then
//!   [`Sessions::attach`]es it: records it in the session (the caller gives
//!   the hold back when the session is gone) and, only when a heartbeat or
//!   another attach ran since the read, renews it up to the session's end
//!   at the attach's version. Every step costs the same
//!   however many holds the session has;
//! - [`Sessions::heartbeat`] renews the session, then every attached hold
//!   up to the session's new end at its version, and forgets the holds
//!   that are gone
//!   (or are no longer this session's);
//! - when heartbeats stop, the session and its holds expire together (on a
//!   Cluster, give or take the nodes' clock difference), by the
//!   primitives' own expiry;
//! - [`Sessions::delete`] releases every hold still taken in the session
//!   with its primitive's release script (which wakes its waiters), then
//!   removes the session.
//!
//! Redis layout: one hash `{prefix}{id}:session` (see `scripts/session.lua`).

use std::collections::HashMap;

use futures_util::future::join_all;
use redis::Value;

use super::locks::Locks;
use super::redlock::RedLocks;
use super::rwlocks::{Mode, RwLocks};
use super::semaphores::Semaphores;
use super::{SessionTerm, reply_owner};
use crate::store::{Script, Store, StoreError, reply_u64, scripts};

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionState {
    pub ttl_ms: u64,
    pub expires_in_ms: u64,
    /// Its owner label, if it was created with one.
    pub owner: Option<String>,
    /// Holds attached (see [`Sessions::state`]).
    pub holds: u64,
}

/// What an acquire in a session reads of it before each try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    /// The session's owner label: what a hold taken in it by an acquire
    /// that sends none records.
    pub owner: Option<String>,
    /// The session's remaining TTL: the lease of a hold taken now.
    pub remaining_ms: u64,
    /// The version of the session's state that TTL comes from.
    pub version: u64,
    /// When the session ends by that version (ms since the Unix epoch,
    /// Redis's clock): what the hold's lease is counted to.
    pub end_ms: u64,
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

/// The session's state, version and (when asked for) attached holds.
struct Read {
    state: SessionState,
    version: u64,
    /// When the session ends (ms, Redis's clock).
    end_ms: u64,
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

    /// Runs `work`, a few calls (a try in a session, a heartbeat, a
    /// delete), within what one call to Redis may take (see
    /// [`Store::within_response_timeout`]).
    pub async fn within_response_timeout<T, E: From<StoreError>>(
        &self,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        self.store.within_response_timeout(work).await
    }

    /// Creates session `id` (namespaced like an object name) with its
    /// owner label ('' for none); false when one of that id exists.
    pub async fn create(&self, id: &str, ttl_ms: u64, owner: &str) -> Result<bool, StoreError> {
        let args = [ttl_ms.to_string(), owner.to_string()];
        let created: i64 = self.call(&scripts::SESSION_CREATE, id, &args).await?;
        Ok(created == 1)
    }

    /// Reads the session: O(1) of its holds, unless `holds` asks for them.
    async fn read(&self, id: &str, holds: bool) -> Result<Option<Read>, StoreError> {
        let key = [self.store.key(id, "session")];
        let args = [if holds { "holds" } else { "" }];
        let reply: Vec<Value> = self.store.run(&scripts::SESSION_STATE, &key, &args).await?;
        match reply.as_slice() {
            [] => Ok(None),
            [ttl, pttl, version, count, end, owner, pairs @ ..] => Ok(Some(Read {
                state: SessionState {
                    ttl_ms: reply_u64(ttl, "ttl")?,
                    expires_in_ms: reply_u64(pttl, "pttl")?,
                    owner: reply_owner(owner),
                    holds: reply_u64(count, "holds")?,
                },
                version: reply_u64(version, "version")?,
                end_ms: reply_u64(end, "end")?,
                holds: attached(pairs)?,
            })),
            other => Err(StoreError::reply("session_state", other)),
        }
    }

    /// The session's state; `Ok(None)` when it does not exist. `holds`
    /// counts the holds attached to it that were still held at its last
    /// heartbeat, and those attached since: a hold released by its holder
    /// directly is dropped from the count by the session's next heartbeat.
    /// Costs the same however many holds the session has.
    pub async fn state(&self, id: &str) -> Result<Option<SessionState>, StoreError> {
        Ok(self.read(id, false).await?.map(|read| read.state))
    }

    /// What a try of an acquire in session `id` takes its hold with (its
    /// remaining TTL, and the version that comes from); `Ok(None)` when the
    /// session does not exist. Costs the same however many holds the
    /// session has.
    pub async fn terms(&self, id: &str) -> Result<Option<Terms>, StoreError> {
        Ok(self.read(id, false).await?.map(|read| Terms {
            owner: read.state.owner,
            remaining_ms: read.state.expires_in_ms,
            version: read.version,
            end_ms: read.end_ms,
        }))
    }

    /// Renews `hold` for session `term` up to its end (`lease_ms`: about
    /// what is left, which bounds how long a RedLock node is waited for):
    /// what the hold has left now, or `Ok(None)` when it is gone or no
    /// longer this session's (released, expired, taken again without the
    /// session or in another one).
    async fn renew(
        &self,
        hold: &Hold,
        lease_ms: u64,
        term: SessionTerm<'_>,
    ) -> Result<Option<u64>, StoreError> {
        let (name, holder) = (hold.name.as_str(), hold.holder.as_str());
        match hold.kind {
            HoldKind::Lock => Ok(self
                .locks
                .renew(name, holder, Some(lease_ms), Some(term))
                .await?
                .map(|g| g.lease_ms)),
            HoldKind::FairLock => Ok(self
                .fair_locks
                .renew(name, holder, Some(lease_ms), Some(term))
                .await?
                .map(|g| g.lease_ms)),
            // An rwlock's renewal renews every hold of its holder; the
            // hold of this mode is gone when its count is 0.
            HoldKind::Read | HoldKind::Write => {
                let renewed = self
                    .rwlocks
                    .renew(name, holder, Some(lease_ms), Some(term))
                    .await?;
                Ok(renewed
                    .filter(|g| match hold.kind {
                        HoldKind::Read => g.read_hold_count > 0,
                        _ => g.write_hold_count > 0,
                    })
                    .map(|g| g.lease_ms))
            }
            HoldKind::Semaphore => Ok(self
                .semaphores
                .renew(name, holder, Some(lease_ms), Some(term))
                .await?
                .map(|g| g.lease_ms)),
            HoldKind::Redlock => match &self.redlocks {
                Some(redlocks) => Ok(redlocks
                    .renew(name, holder, Some(lease_ms), Some(term))
                    .await?
                    .map(|g| g.lease_ms)),
                None => Ok(None),
            },
        }
    }

    /// Releases every reentrant hold of `hold` taken in session `id` (each
    /// primitive's release wakes its waiters); false when there was none
    /// (released, expired, or not this session's).
    async fn release(&self, id: &str, hold: &Hold) -> Result<bool, StoreError> {
        let (name, holder) = (hold.name.as_str(), hold.holder.as_str());
        match hold.kind {
            HoldKind::Lock => self.locks.release_in(name, holder, id).await,
            HoldKind::FairLock => self.fair_locks.release_in(name, holder, id).await,
            HoldKind::Read => self.rwlocks.release_in(name, holder, Mode::Read, id).await,
            HoldKind::Write => self.rwlocks.release_in(name, holder, Mode::Write, id).await,
            HoldKind::Semaphore => self.semaphores.release_in(name, holder, id).await,
            HoldKind::Redlock => match &self.redlocks {
                Some(redlocks) => redlocks.release_in(name, holder, id).await,
                None => Ok(false),
            },
        }
    }

    /// Renews every hold for session `term` at once: the ones gone (or no
    /// longer its), and the least any renewed hold has left.
    async fn renew_all<'a>(
        &self,
        holds: impl Iterator<Item = &'a Hold>,
        lease_ms: u64,
        term: SessionTerm<'_>,
    ) -> Result<(Vec<&'a Hold>, Option<u64>), StoreError> {
        let renewed =
            join_all(holds.map(|h| async move { (h, self.renew(h, lease_ms, term).await) })).await;
        let mut gone = Vec::new();
        let mut least: Option<u64> = None;
        let mut failed = None;
        for (hold, result) in renewed {
            match result {
                Ok(Some(left)) => least = Some(least.map_or(left, |l| l.min(left))),
                Ok(None) => gone.push(hold),
                Err(e) => failed = Some(e),
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok((gone, least)),
        }
    }

    /// Attaches holds just granted in session `id` (each taken with the
    /// session's end at version `read`, see [`Self::terms`]). When a
    /// heartbeat or another attach ran since that read, it renews them up
    /// to the session's end at the attach's version (a
    /// heartbeat may have changed the TTL without knowing of them).
    /// Returns what the holds have left (the grant's lease), or `Ok(None)`
    /// when the session no longer exists: the caller then gives the holds
    /// back. Costs the same however many holds the session has.
    pub async fn attach(
        &self,
        id: &str,
        holds: &[Hold],
        read: u64,
    ) -> Result<Option<u64>, StoreError> {
        let fields: Vec<String> = holds.iter().map(Hold::field).collect();
        let reply: Vec<Value> = self.call(&scripts::SESSION_ATTACH, id, &fields).await?;
        let (remaining, version, end_ms) = match reply.as_slice() {
            [Value::Int(0)] => return Ok(None),
            [Value::Int(1), _ttl, pttl, version, end] => (
                reply_u64(pttl, "pttl")?,
                reply_u64(version, "version")?,
                reply_u64(end, "end")?,
            ),
            other => return Err(StoreError::reply("session_attach", other)),
        };
        if version == read + 1 {
            // Nothing ran since the read: the holds end with the session.
            return Ok(Some(remaining));
        }
        let term = SessionTerm {
            id,
            version,
            end_ms,
            owner: None,
        };
        let (gone, least) = self.renew_all(holds.iter(), remaining.max(1), term).await?;
        // A hold gone already: released by a DELETE of the session that
        // ran meanwhile (then the session is gone too), or by its holder
        // or a force unlock (the next heartbeat forgets it).
        if !gone.is_empty() && self.terms(id).await?.is_none() {
            return Ok(None);
        }
        Ok(Some(least.unwrap_or(remaining)))
    }

    /// Renews session `id` (for `ttl_ms`, or the ttl it has), then every
    /// hold attached to it up to the session's new end, and forgets the
    /// holds that
    /// are gone (or were taken again without the session, or in another).
    /// `Ok(None)` when the session does not exist. An error when some hold
    /// could not be renewed: the session was, and a retry renews the rest.
    pub async fn heartbeat(
        &self,
        id: &str,
        ttl_ms: Option<u64>,
    ) -> Result<Option<Renewed>, StoreError> {
        let ttl = ttl_ms.map(|t| t.to_string()).unwrap_or_default();
        let reply: Vec<Value> = self.call(&scripts::SESSION_HEARTBEAT, id, &[ttl]).await?;
        let (ttl_ms, version, end_ms, holds) = match reply.as_slice() {
            [Value::Int(0)] => return Ok(None),
            [Value::Int(1), ttl, version, end, pairs @ ..] => (
                reply_u64(ttl, "ttl")?,
                reply_u64(version, "version")?,
                reply_u64(end, "end")?,
                attached(pairs)?,
            ),
            other => return Err(StoreError::reply("session_heartbeat", other)),
        };
        let term = SessionTerm {
            id,
            version,
            end_ms,
            owner: None,
        };
        let (gone, _) = self
            .renew_all(holds.iter().map(|(h, _)| h), ttl_ms, term)
            .await?;
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
    /// of each) that was taken in it, then removes the session. Returns
    /// how many holds were released (held in it until then); `Ok(None)`
    /// when the session does not exist. An error leaves the session in
    /// place, so that a retry releases what is left.
    pub async fn delete(&self, id: &str) -> Result<Option<u64>, StoreError> {
        let Some(read) = self.read(id, true).await? else {
            return Ok(None);
        };
        let mut released = self
            .release_all(id, read.holds.iter().map(|(h, _)| h))
            .await?;
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
        match self.release_all(id, late).await {
            Ok(n) => released += n,
            Err(e) => tracing::warn!(
                error = %e,
                "could not release a hold attached to a session while it was deleted; it ends \
                 with its lease"
            ),
        }
        Ok(Some(released))
    }

    /// Releases every hold taken in session `id` at once; how many were
    /// held.
    async fn release_all<'a>(
        &self,
        id: &str,
        holds: impl Iterator<Item = &'a Hold>,
    ) -> Result<u64, StoreError> {
        let results = join_all(holds.map(|h| self.release(id, h))).await;
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
