//! Multi-locks (Redisson's RedissonMultiLock, but atomic) as a plain Rust
//! API over the store: one holder takes a set of plain locks — the same
//! objects as `/locks/{name}` — all or nothing.
//!
//! Where every name's keys live on one Redis node (standalone, Sentinel),
//! each operation is one Lua script over all the names (`scripts/multi*.lua`
//! running the lock family's own functions): no other client ever sees a
//! part of the set held. On Redis Cluster different names live in
//! different slots, so the set is taken one lock at a time in one global
//! order (the names sorted), and a lock that blocks makes the attempt give
//! back what it took (its undo). That is all or nothing for holders, but
//! not atomic to observers: a state read may see a part of the set held
//! for a moment (the book's "Multi-locks" (docs/src/multilocks.md)).
//! Each of those requests of one call per lock is bounded by one response
//! timeout as a whole ([`Store::within_response_timeout`]), as a request
//! that does not wait must answer: an acquire cut short is given back by
//! its caller's guard, a heartbeat or release cut short is safe to repeat.

use redis::Value;

use super::locks::{LockGrant, LockKind, Locks};
use super::{Attempt, AttemptId, Blocked, Layout, Refusal, SessionTerm, Wait, reply_held_by};
use crate::store::{Script, Store, StoreError, reply_u64, scripts};

/// Used when a blocker has no TTL at all (someone PERSISTed a key by
/// hand): waiters then re-check once a second.
const NO_TTL_RECHECK_MS: u64 = 1000;

/// How long an undo's marker keeps a late copy of its attempt from
/// granting (as for single locks).
const UNDO_MARKER_MS: &str = "60000";

/// Each lock of a set, in the order of the request's names.
pub type Holds = Vec<LockGrant>;

/// Some of the request's names, by index in its list.
pub type Indexes = Vec<usize>;

#[derive(Clone, Debug)]
pub struct MultiLocks {
    /// The plain locks' key layout.
    layout: Layout,
    /// The plain locks themselves: one at a time on Redis Cluster.
    locks: Locks,
}

/// The bit set of `Blocked::blocked_by` for these indexes.
fn bits(indexes: impl IntoIterator<Item = usize>) -> u64 {
    indexes.into_iter().fold(0, |set, i| set | (1 << i))
}

/// Reads `1-based` indexes from a script's reply.
fn indexes(values: &[Value]) -> Result<Indexes, StoreError> {
    values
        .iter()
        .map(|v| reply_u64(v, "index").map(|i| i as usize - 1))
        .collect()
}

impl MultiLocks {
    pub fn new(store: Store) -> Self {
        MultiLocks {
            layout: Layout {
                store: store.clone(),
                base: "lock",
                queue_grace_ms: None,
            },
            locks: Locks::new(store, LockKind::Plain),
        }
    }

    /// The wake channels of the names' locks (a waiter watches them all).
    pub fn wake_channels(&self, names: &[String]) -> Vec<String> {
        names.iter().map(|n| self.locks.wake_channel(n)).collect()
    }

    fn one_node(&self) -> bool {
        !self.layout.store.spans_nodes()
    }

    /// The keys and arguments of a multi-lock script (`scripts/multi.lua`):
    /// every name's keys, the script's seven own arguments, every name's
    /// wake channel.
    fn invocation(
        &self,
        names: &[String],
        attempt: Option<&AttemptId>,
        own: [&str; 7],
    ) -> (Vec<String>, Vec<String>) {
        let keys = names
            .iter()
            .flat_map(|n| self.layout.keys(n, attempt, &[]))
            .collect();
        let mut args: Vec<String> = own.iter().map(|a| a.to_string()).collect();
        args.extend(self.wake_channels(names));
        (keys, args)
    }

    /// Runs a multi-lock script that is safe to repeat.
    async fn call<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        names: &[String],
        attempt: Option<&AttemptId>,
        own: [&str; 7],
    ) -> Result<T, StoreError> {
        let (keys, args) = self.invocation(names, attempt, own);
        self.layout
            .store
            .write_repeatable(script, &keys, &args)
            .await
    }

    /// One try for every lock of the set. Blocked names come back in
    /// `Blocked::blocked_by`, with the longest remaining lease among them.
    /// Refused with `SessionMismatch` when the holder holds a lock of the
    /// set in a session.
    pub async fn try_acquire(
        &self,
        names: &[String],
        holder: &str,
        lease_ms: u64,
        attempt: &AttemptId,
    ) -> Result<Attempt<Holds>, StoreError> {
        self.try_acquire_in(names, holder, lease_ms, attempt, None, "")
            .await
    }

    /// [`Self::try_acquire`], or with `session` in a session (see
    /// [`Locks::try_acquire_in`]); every lock of the set records `owner`
    /// ('' for none) as its hold's owner label.
    pub async fn try_acquire_in(
        &self,
        names: &[String],
        holder: &str,
        lease_ms: u64,
        attempt: &AttemptId,
        session: Option<SessionTerm<'_>>,
        owner: &str,
    ) -> Result<Attempt<Holds>, StoreError> {
        if !self.one_node() {
            let in_order = self.acquire_in_order(names, holder, lease_ms, attempt, session, owner);
            return self.layout.store.within_response_timeout(in_order).await;
        }
        let [lease, id, version] = SessionTerm::args(Some(lease_ms), session);
        let own = [holder, &lease, attempt.as_str(), "", &id, &version, owner];
        let reply: Vec<Value> = self
            .call(&scripts::MULTI_ACQUIRE, names, Some(attempt), own)
            .await?;
        match reply.as_slice() {
            [Value::Int(1), pairs @ ..] if pairs.len() == 2 * names.len() => {
                let holds = pairs
                    .chunks(2)
                    .map(|p| {
                        Ok(LockGrant {
                            fencing_token: reply_u64(&p[0], "token")?,
                            hold_count: reply_u64(&p[1], "count")?,
                            lease_ms,
                        })
                    })
                    .collect::<Result<_, StoreError>>()?;
                Ok(Attempt::Granted(holds))
            }
            [Value::Int(0), Value::Int(longest), owners, blocking @ ..] if !blocking.is_empty() => {
                Ok(Attempt::Blocked(Blocked {
                    blocked_by: Some(bits(indexes(blocking)?)),
                    held_by: reply_held_by(owners)?,
                    ..Blocked::after(u64::try_from(*longest).unwrap_or(NO_TTL_RECHECK_MS))
                }))
            }
            [Value::Int(-1)] => Err(StoreError::timeout()),
            [Value::Int(-5)] => Ok(Attempt::Refused(Refusal::SessionMismatch)),
            other => Err(StoreError::reply("multi_acquire", other)),
        }
    }

    /// Redis Cluster: the locks one at a time in the names' sorted order
    /// (so two sets never take each other's locks in opposite orders), all
    /// under the one attempt id; the first lock that blocks makes the
    /// attempt give back what it took so far (as does a refusal).
    async fn acquire_in_order(
        &self,
        names: &[String],
        holder: &str,
        lease_ms: u64,
        attempt: &AttemptId,
        session: Option<SessionTerm<'_>>,
        owner: &str,
    ) -> Result<Attempt<Holds>, StoreError> {
        let mut order: Vec<usize> = (0..names.len()).collect();
        order.sort_by(|a, b| names[*a].cmp(&names[*b]));
        let mut holds: Vec<Option<LockGrant>> = vec![None; names.len()];
        for (done, &i) in order.iter().enumerate() {
            let tried = self
                .locks
                .try_acquire_in(
                    &names[i],
                    holder,
                    lease_ms,
                    Wait::default(),
                    attempt,
                    session,
                    owner,
                )
                .await;
            let outcome = match tried {
                Ok(Attempt::Granted(grant)) => {
                    holds[i] = Some(grant);
                    continue;
                }
                Ok(Attempt::Blocked(blocked)) => Ok(Attempt::Blocked(Blocked {
                    blocked_by: Some(bits([i])),
                    ..blocked
                })),
                Ok(Attempt::Refused(refusal)) => Ok(Attempt::Refused(refusal)),
                Err(e) => Err(e),
            };
            // Give back what this attempt took (and, after an error, the
            // lock whose outcome is unknown); a failed give-back ends with
            // the lease.
            let taken: Vec<String> = order[..done + usize::from(outcome.is_err())]
                .iter()
                .map(|&j| names[j].clone())
                .collect();
            self.undo_each(&taken, holder, attempt).await;
            return outcome;
        }
        Ok(Attempt::Granted(holds.into_iter().flatten().collect()))
    }

    /// Redis Cluster: the undo of an attempt on each name, one at a time.
    async fn undo_each(&self, names: &[String], holder: &str, attempt: &AttemptId) -> bool {
        let mut any = false;
        for name in names.iter().rev() {
            match self.locks.undo(name, holder, attempt).await {
                Ok(given) => any |= given,
                Err(e) => {
                    tracing::warn!(error = %e, "could not give back a multi-lock's part; it ends with its lease")
                }
            }
        }
        any
    }

    /// Gives back exactly what `attempt` granted on each lock, if anything.
    pub async fn undo(
        &self,
        names: &[String],
        holder: &str,
        attempt: &AttemptId,
    ) -> Result<bool, StoreError> {
        if !self.one_node() {
            return Ok(self.undo_each(names, holder, attempt).await);
        }
        let own = [holder, "", attempt.as_str(), UNDO_MARKER_MS, "", "", ""];
        let given: i64 = self
            .call(&scripts::MULTI_UNDO, names, Some(attempt), own)
            .await?;
        Ok(given > 0)
    }

    /// Renews the holder's lease on every lock of the set (`None` keeps
    /// each lock's lease). `Err` lists the names it does not hold; then
    /// nothing was renewed (on Redis Cluster, the others were).
    pub async fn heartbeat(
        &self,
        names: &[String],
        holder: &str,
        lease_ms: Option<u64>,
    ) -> Result<Result<Holds, Indexes>, StoreError> {
        if !self.one_node() {
            let each = async {
                let mut holds = Vec::new();
                let mut missing = Vec::new();
                for (i, name) in names.iter().enumerate() {
                    match self.locks.heartbeat(name, holder, lease_ms).await? {
                        Some(grant) => holds.push(grant),
                        None => missing.push(i),
                    }
                }
                Ok(if missing.is_empty() {
                    Ok(holds)
                } else {
                    Err(missing)
                })
            };
            return self.layout.store.within_response_timeout(each).await;
        }
        let lease = lease_ms.map(|l| l.to_string()).unwrap_or_default();
        let reply: Vec<Value> = self
            .call(
                &scripts::MULTI_HEARTBEAT,
                names,
                None,
                [holder, &lease, "", "", "", "", ""],
            )
            .await?;
        match reply.as_slice() {
            [Value::Int(1), renewed @ ..] if renewed.len() == 3 * names.len() => {
                let holds = renewed
                    .chunks(3)
                    .map(|r| {
                        Ok(LockGrant {
                            fencing_token: reply_u64(&r[0], "token")?,
                            hold_count: reply_u64(&r[1], "count")?,
                            lease_ms: reply_u64(&r[2], "lease")?,
                        })
                    })
                    .collect::<Result<_, StoreError>>()?;
                Ok(Ok(holds))
            }
            [Value::Int(0), missing @ ..] => Ok(Err(indexes(missing)?)),
            other => Err(StoreError::reply("multi_heartbeat", other)),
        }
    }

    /// Drops one hold of the holder on every lock of the set: `Ok` lists
    /// the names whose lock became free, `Err` the names it does not hold
    /// (then nothing was released; on Redis Cluster, the others were).
    pub async fn release(
        &self,
        names: &[String],
        holder: &str,
    ) -> Result<Result<Indexes, Indexes>, StoreError> {
        if !self.one_node() {
            let each = async {
                let (mut freed, mut missing) = (Vec::new(), Vec::new());
                for (i, name) in names.iter().enumerate() {
                    match self.locks.release(name, holder, false).await? {
                        Some(r) if r.released => freed.push(i),
                        Some(_) => {}
                        None => missing.push(i),
                    }
                }
                Ok(if missing.is_empty() {
                    Ok(freed)
                } else {
                    Err(missing)
                })
            };
            return self.layout.store.within_response_timeout(each).await;
        }
        // A release must run at most once: not repeated on a dead connection.
        let (keys, args) = self.invocation(names, None, [holder, "", "", "", "", "", ""]);
        let reply: Vec<Value> = self
            .layout
            .store
            .write(&scripts::MULTI_RELEASE, &keys, &args)
            .await?;
        match reply.as_slice() {
            [Value::Int(1), freed @ ..] => Ok(Ok(indexes(freed)?)),
            [Value::Int(0), missing @ ..] => Ok(Err(indexes(missing)?)),
            other => Err(StoreError::reply("multi_release", other)),
        }
    }
}
