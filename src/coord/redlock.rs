//! RedLock (Redisson RedissonRedLock, the Redis "distlock" algorithm) over
//! N ≥ 3 independent Redis nodes, as a plain Rust API. The book's
//! "RedLock" (docs/src/redlock.md) shows it in use; the book's "RedLock:
//! what it does and does not promise" (docs/src/guarantees.md) says what
//! it does and does not promise.
//!
//! An acquire runs `scripts/redlock_acquire.lua` on every node at once,
//! each call bounded by the per-node timeout ([`node_timeout`]: a tenth of
//! the lease, at most [`NODE_TIMEOUT_MAX`]), so a node that is down or
//! stalled costs at most that long and simply does not count. The grant
//! stands when a quorum (N/2+1) granted and time is left:
//! `validity_ms = lease_ms − elapsed − drift`, drift = lease_ms/100 + 2 ms.
//! Otherwise what the attempt took is given back on every node that
//! granted or did not answer (`scripts/redlock_undo.lua`, which also leaves
//! a tombstone so that a late copy of the attempt grants nothing).
//!
//! Fencing tokens: each granting node increments its own counter, which
//! never expires; the grant's token is the largest, and before the grant is
//! returned the counters of the granting nodes that were behind are raised
//! to it (`scripts/redlock_fence.lua`). A grant stands only once a quorum
//! of nodes has a counter at least that high, so every later quorum shares
//! a node with it and issues a larger token — as long as no node loses its
//! data (a node restarted without persistence forgets its counter).
//!
//! Re-entry: an acquire by the holder that holds the lock renews its lease
//! on the nodes and keeps the token; holds are not counted (one release
//! frees the lock), so `hold_count` is always 1.
//!
//! Each node is a [`Store`] of its own (one multiplexed connection, made on
//! first use and again after a failure), so a node that is down at start
//! or restarts is used again as soon as it answers. The main Redis carries
//! only the wake messages (`scripts/redlock_wake.lua`), which its pub/sub
//! hub delivers to waiters on every instance.
//!
//! Keys on every node, for a lock named `n`:
//! - `{prefix}{n}:redlock`        hash: holder, token, lease, attempt; TTL = lease
//! - `{prefix}{n}:redlock:fence`  this node's fencing counter, never expires
//! - `{prefix}{n}:redlock:undone:<attempt id>`  short-lived tombstone
//!
//! and on the main Redis the channel `{prefix}{n}:redlock:wake`.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::Value;

use super::{
    Attempt, AttemptId, Blocked, HoldInfo, MAX_HELD_BY, Refusal, SessionTerm, reply_owner,
};
use crate::metrics::Metrics;
use crate::store::{Condition, Store, StoreConfig, StoreError, reply_u64, scripts};

/// The most one call to one node may take, whatever the lease.
pub const NODE_TIMEOUT_MAX: Duration = Duration::from_millis(100);

/// The least one call to one node gets, however short the lease.
pub const NODE_TIMEOUT_MIN: Duration = Duration::from_millis(5);

/// How long a give-back that failed keeps being retried in the background
/// (the hold, if there was one, ends with its lease anyway).
const GIVE_BACK_FOR: Duration = Duration::from_secs(30);

/// How long a tombstone keeps a late copy of a given-up attempt from
/// granting: far longer than a call can be late.
const TOMBSTONE_MS: &str = "60000";

/// Used as the hint when a refusing node's hold has no TTL (someone
/// PERSISTed the key by hand).
const NO_TTL_RECHECK_MS: u64 = 1000;

/// The per-node timeout for a lease: a tenth of it, between
/// [`NODE_TIMEOUT_MIN`] and [`NODE_TIMEOUT_MAX`]. Much smaller than the
/// lease, so that waiting for a dead node never eats the validity.
pub fn node_timeout(lease_ms: u64) -> Duration {
    Duration::from_millis(lease_ms / 10).clamp(NODE_TIMEOUT_MIN, NODE_TIMEOUT_MAX)
}

/// The clock drift allowed for: 1 % of the lease plus 2 ms.
pub fn drift_ms(lease_ms: u64) -> u64 {
    lease_ms / 100 + 2
}

/// A grant or renewal that a quorum of nodes agreed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedGrant {
    pub fencing_token: u64,
    pub lease_ms: u64,
    /// How long the hold can be relied on, measured from when the request
    /// started: the lease less the time the nodes took and the drift.
    pub validity_ms: u64,
    /// Nodes that granted (or renewed).
    pub acquired: usize,
    /// Nodes configured.
    pub total: usize,
}

/// One node's view of a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeState {
    /// Its index in the configured node list, from 0.
    pub node: usize,
    /// Whether it answered within the per-node timeout.
    pub reachable: bool,
    pub locked: bool,
    /// Remaining lease there (0 when free or unreachable).
    pub ttl_ms: u64,
}

/// A lock's state across the nodes (never a holder id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedState {
    pub locked_on: usize,
    pub total: usize,
    pub nodes: Vec<NodeState>,
    /// The hold as a quorum of the nodes sees it (see [`agreed_hold`]);
    /// `None` when no quorum of nodes has one same hold.
    pub hold: Option<HoldInfo>,
}

/// The hold a quorum of nodes agrees on: the nodes' parts of one acquire
/// share the id of the try that created them (never shown), so the hold
/// of the attempt that at least `quorum` nodes have is the lock's. Its
/// remaining lease and time held are what a quorum of those nodes reaches
/// at least (the `quorum`-th largest): until then it holds on a quorum;
/// its owner and session are those of the first of those nodes in the
/// configured order (a label changed by a re-entry that reached only
/// some nodes may differ between them).
pub fn agreed_hold(holds: Vec<(String, HoldInfo)>, quorum: usize) -> Option<HoldInfo> {
    let mut attempts: Vec<&String> = holds.iter().map(|(a, _)| a).collect();
    attempts.sort();
    attempts.dedup();
    let attempt = attempts
        .into_iter()
        .find(|a| holds.iter().filter(|(b, _)| b == *a).count() >= quorum.max(1))?
        .clone();
    let same: Vec<HoldInfo> = holds
        .into_iter()
        .filter(|(a, _)| *a == attempt)
        .map(|(_, h)| h)
        .collect();
    let nth = |mut values: Vec<u64>| {
        values.sort_unstable_by(|a, b| b.cmp(a));
        values[quorum.max(1) - 1]
    };
    let expires = nth(same.iter().map(|h| h.expires_in_ms).collect());
    let held_for = nth(same.iter().map(|h| h.held_for_ms).collect());
    Some(HoldInfo {
        expires_in_ms: expires,
        held_for_ms: held_for,
        ..same[0].clone()
    })
}

/// Cheap to clone: one `Arc` inside.
#[derive(Clone)]
pub struct RedLocks {
    inner: Arc<Inner>,
}

struct Inner {
    /// One store per node, in configuration order.
    nodes: Vec<Store>,
    /// N/2 + 1.
    quorum: usize,
    /// The main Redis: where wake messages are published.
    main: Store,
    /// Per-node failure counters.
    metrics: Metrics,
}

impl std::fmt::Debug for RedLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedLocks")
            .field("nodes", &self.inner.nodes.len())
            .field("quorum", &self.inner.quorum)
            .finish()
    }
}

/// What one node answered to an acquire.
enum NodeAcquire {
    /// Granted here (new or re-entered) with this node's token.
    Granted(u64),
    /// Another holder holds it here for this many more ms, under this
    /// owner label.
    Held(u64, Option<String>),
    /// This holder holds it here in another session, or in none (or the
    /// reverse).
    Mismatch,
}

/// Why a call got no quorum, as the client is told it.
fn no_quorum(detail: String) -> StoreError {
    StoreError::Unavailable {
        condition: Condition::NoQuorum,
        detail,
    }
}

impl RedLocks {
    /// Prepares one store per node in `nodes` (with the main Redis's
    /// prefix, timeouts and TLS files, from `main_config`). A node that is
    /// down now is not an error: it is tried again on every call.
    pub async fn open(
        nodes: &[String],
        main_config: &StoreConfig,
        main: Store,
        metrics: Metrics,
    ) -> Result<Self, String> {
        let opened = join_all(nodes.iter().map(|url| {
            let node = StoreConfig {
                mode: crate::config::RedisMode::Standalone,
                urls: vec![url.clone()],
                pool_size: 1,
                min_replicas: 0,
                ..main_config.clone()
            };
            // A registry of their own: a RedLock node that is down is
            // counted per node (`latchkey_redlock_node_errors_total`),
            // not as a failure of the main Redis.
            async move { Store::open(&node, Metrics::new()).await }
        }))
        .await;
        let nodes = opened.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(RedLocks {
            inner: Arc::new(Inner {
                quorum: nodes.len() / 2 + 1,
                nodes,
                main,
                metrics,
            }),
        })
    }

    /// The nodes' stores, in configuration order (listings scan each).
    pub fn nodes(&self) -> &[Store] {
        &self.inner.nodes
    }

    /// Nodes configured.
    pub fn total(&self) -> usize {
        self.inner.nodes.len()
    }

    /// Nodes that must agree.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// The pub/sub channel (on the main Redis) of the lock's wake messages.
    pub fn wake_channel(&self, name: &str) -> String {
        self.inner.main.key(name, "redlock:wake")
    }

    /// A key of the lock on the nodes (every node has the same prefix).
    fn key(&self, name: &str, part: &str) -> String {
        if part.is_empty() {
            self.inner.main.key(name, "redlock")
        } else {
            self.inner.main.key(name, &format!("redlock:{part}"))
        }
    }

    /// Runs `call` on every node at once, each bounded by `timeout`;
    /// failures are counted per node.
    async fn on_every_node<T, F, Fut>(
        &self,
        nodes: impl Iterator<Item = usize>,
        timeout: Duration,
        call: F,
    ) -> Vec<(usize, Result<T, StoreError>)>
    where
        F: Fn(Store) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let calls = nodes.map(|i| {
            let call = call(self.inner.nodes[i].clone());
            async move {
                let result = tokio::time::timeout(timeout, call)
                    .await
                    .unwrap_or_else(|_| Err(StoreError::timeout()));
                if result.is_err() {
                    self.inner
                        .metrics
                        .redlock_node_errors
                        .with_label_values(&[&i.to_string()])
                        .inc();
                }
                (i, result)
            }
        });
        join_all(calls).await
    }

    fn all(&self) -> std::ops::Range<usize> {
        0..self.inner.nodes.len()
    }

    /// One try: ask every node, and grant with a quorum and time left;
    /// otherwise give back what the try took and report the hold that
    /// blocks it (or that too few nodes answered). Refused with
    /// `SessionMismatch` (and given back) when some node has the holder's
    /// hold in a session.
    pub async fn try_acquire(
        &self,
        name: &str,
        holder: &str,
        lease_ms: u64,
        attempt: &AttemptId,
    ) -> Result<Attempt<RedGrant>, StoreError> {
        self.try_acquire_in(name, holder, lease_ms, attempt, None, "")
            .await
    }

    /// [`Self::try_acquire`], or with `session` in a session (see
    /// [`crate::coord::locks::Locks::try_acquire_in`]): every node records
    /// the session in its hold, and `owner` ('' for none) as its owner
    /// label. A blocked try names the owners the refusing nodes report.
    pub async fn try_acquire_in(
        &self,
        name: &str,
        holder: &str,
        lease_ms: u64,
        attempt: &AttemptId,
        session: Option<SessionTerm<'_>>,
        owner: &str,
    ) -> Result<Attempt<RedGrant>, StoreError> {
        let started = Instant::now();
        let timeout = node_timeout(lease_ms);
        let keys = [
            self.key(name, ""),
            self.key(name, "fence"),
            self.key(name, &format!("undone:{}", attempt.as_str())),
        ];
        let [lease, id, version] = SessionTerm::args(Some(lease_ms), session);
        let args = [holder, &lease, attempt.as_str(), &id, &version, owner];
        let (keys, args) = (&keys, &args);
        let answers = self
            .on_every_node(self.all(), timeout, |node| async move {
                let reply: Vec<Value> = node
                    .write_repeatable(&scripts::REDLOCK_ACQUIRE, keys, args)
                    .await?;
                match reply.as_slice() {
                    [Value::Int(1 | 2), token] => {
                        Ok(NodeAcquire::Granted(reply_u64(token, "token")?))
                    }
                    [Value::Int(0), Value::Int(ttl), owner] => Ok(NodeAcquire::Held(
                        u64::try_from(*ttl).unwrap_or(NO_TTL_RECHECK_MS),
                        reply_owner(owner),
                    )),
                    // Only possible for an attempt already given up.
                    [Value::Int(-1)] => Err(StoreError::timeout()),
                    [Value::Int(-5)] => Ok(NodeAcquire::Mismatch),
                    other => Err(StoreError::reply("redlock_acquire", other)),
                }
            })
            .await;

        let mut granted: Vec<(usize, u64)> = Vec::new();
        let mut held: Vec<u64> = Vec::new();
        // The owners the refusing nodes name, each once, in node order.
        let mut held_by: Vec<Option<String>> = Vec::new();
        let mut unknown: Vec<usize> = Vec::new();
        let mut mismatch = false;
        for (i, answer) in answers {
            match answer {
                Ok(NodeAcquire::Granted(token)) => granted.push((i, token)),
                Ok(NodeAcquire::Held(ttl, owner)) => {
                    held.push(ttl);
                    if !held_by.contains(&owner) && held_by.len() < MAX_HELD_BY {
                        held_by.push(owner);
                    }
                }
                Ok(NodeAcquire::Mismatch) => mismatch = true,
                Err(_) => unknown.push(i),
            }
        }
        let quorum = self.inner.quorum;
        let total = self.total();
        if mismatch {
            self.give_back_nodes(name, holder, attempt, &granted, &unknown, lease_ms)
                .await;
            return Ok(Attempt::Refused(Refusal::SessionMismatch));
        }

        let failure = if granted.len() >= quorum {
            let token = granted.iter().map(|(_, t)| *t).max().unwrap_or(0);
            let fenced = self
                .raise_fences(name, holder, token, &granted, timeout)
                .await;
            let validity = validity_ms(lease_ms, started);
            if fenced < quorum {
                no_quorum(format!(
                    "{fenced} of {total} RedLock nodes confirmed the fencing token in time; \
                     a quorum needs {quorum}; retry shortly"
                ))
            } else if validity <= 0 {
                no_quorum(format!(
                    "the RedLock nodes answered too slowly: the {lease_ms} ms lease was used up \
                     before a quorum granted it; retry shortly, or ask for a longer lease"
                ))
            } else {
                return Ok(Attempt::Granted(RedGrant {
                    fencing_token: token,
                    lease_ms,
                    validity_ms: validity as u64,
                    acquired: granted.len(),
                    total,
                }));
            }
        } else if granted.len() + held.len() >= quorum {
            // Enough nodes answered: the lock is held. It can be had once
            // enough of the refusing nodes' holds end for a quorum.
            held.sort_unstable();
            let wanted = quorum - granted.len();
            let hint = held
                .get(wanted.saturating_sub(1))
                .copied()
                .unwrap_or(NO_TTL_RECHECK_MS);
            self.give_back_nodes(name, holder, attempt, &granted, &unknown, lease_ms)
                .await;
            return Ok(Attempt::Blocked(Blocked {
                held_by,
                ..Blocked::after(hint)
            }));
        } else {
            no_quorum(format!(
                "{} of {total} RedLock nodes answered within {} ms; a quorum needs {quorum}; \
                 retry shortly",
                granted.len() + held.len(),
                timeout.as_millis()
            ))
        };
        self.give_back_nodes(name, holder, attempt, &granted, &unknown, lease_ms)
            .await;
        Err(failure)
    }

    /// Raises the fences of the granting nodes that are behind `token`;
    /// returns how many granting nodes now have a counter of at least
    /// `token`.
    async fn raise_fences(
        &self,
        name: &str,
        holder: &str,
        token: u64,
        granted: &[(usize, u64)],
        timeout: Duration,
    ) -> usize {
        let level = granted.iter().filter(|(_, t)| *t >= token).count();
        let behind = granted.iter().filter(|(_, t)| *t < token).map(|(i, _)| *i);
        let keys = [self.key(name, ""), self.key(name, "fence")];
        let token = token.to_string();
        let args = [holder, token.as_str()];
        let (keys, args) = (&keys, &args);
        let raised = self
            .on_every_node(behind, timeout, |node| async move {
                node.write_repeatable::<i64>(&scripts::REDLOCK_FENCE, keys, args)
                    .await
            })
            .await;
        level + raised.iter().filter(|(_, r)| r.is_ok()).count()
    }

    /// Gives back what `attempt` took on the nodes that granted it or did
    /// not answer, then wakes waiters if anything was taken.
    async fn give_back_nodes(
        &self,
        name: &str,
        holder: &str,
        attempt: &AttemptId,
        granted: &[(usize, u64)],
        unknown: &[usize],
        lease_ms: u64,
    ) {
        let nodes: Vec<usize> = granted
            .iter()
            .map(|(i, _)| *i)
            .chain(unknown.iter().copied())
            .collect();
        if nodes.is_empty() {
            return;
        }
        let failed = self
            .undo_on(
                name,
                holder,
                attempt,
                nodes.into_iter(),
                node_timeout(lease_ms),
            )
            .await;
        if !failed.is_empty() {
            self.keep_giving_back(name, holder, attempt, failed);
        }
        if !granted.is_empty() {
            self.wake(name);
        }
    }

    /// Runs the undo on `nodes`; returns the nodes where it failed.
    async fn undo_on(
        &self,
        name: &str,
        holder: &str,
        attempt: &AttemptId,
        nodes: impl Iterator<Item = usize>,
        timeout: Duration,
    ) -> Vec<usize> {
        let keys = [
            self.key(name, ""),
            self.key(name, &format!("undone:{}", attempt.as_str())),
        ];
        let args = [holder, attempt.as_str(), TOMBSTONE_MS];
        let (keys, args) = (&keys, &args);
        self.on_every_node(nodes, timeout, |node| async move {
            node.write_repeatable::<i64>(&scripts::REDLOCK_UNDO, keys, args)
                .await
        })
        .await
        .into_iter()
        .filter_map(|(i, r)| r.is_err().then_some(i))
        .collect()
    }

    /// Retries a give-back on the nodes where it failed, in the background,
    /// with capped backoff for [`GIVE_BACK_FOR`].
    fn keep_giving_back(&self, name: &str, holder: &str, attempt: &AttemptId, nodes: Vec<usize>) {
        let (this, name, holder, attempt) = (
            self.clone(),
            name.to_string(),
            holder.to_string(),
            attempt.clone(),
        );
        tokio::spawn(async move {
            let until = Instant::now() + GIVE_BACK_FOR;
            let mut delay = Duration::from_millis(100);
            let mut nodes = nodes;
            while !nodes.is_empty() && Instant::now() + delay < until {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
                nodes = this
                    .undo_on(
                        &name,
                        &holder,
                        &attempt,
                        nodes.into_iter(),
                        NODE_TIMEOUT_MAX,
                    )
                    .await;
            }
            if !nodes.is_empty() {
                tracing::warn!(
                    nodes = nodes.len(),
                    "could not give back a RedLock attempt on every node; what it took there \
                     ends with its lease"
                );
            }
        });
    }

    /// Gives back what `attempt` granted, on every node (the long-poll
    /// adapter's undo: the client left, or the reply was lost). True when
    /// some node held something for it. An error when some node could not
    /// be reached, so that the caller tries again.
    pub async fn undo(
        &self,
        name: &str,
        holder: &str,
        attempt: &AttemptId,
        lease_ms: u64,
    ) -> Result<bool, StoreError> {
        let keys = [
            self.key(name, ""),
            self.key(name, &format!("undone:{}", attempt.as_str())),
        ];
        let args = [holder, attempt.as_str(), TOMBSTONE_MS];
        let (keys, args) = (&keys, &args);
        let answers = self
            .on_every_node(self.all(), node_timeout(lease_ms), |node| async move {
                node.write_repeatable::<i64>(&scripts::REDLOCK_UNDO, keys, args)
                    .await
            })
            .await;
        let undone = answers.iter().any(|(_, r)| matches!(r, Ok(1)));
        if undone {
            self.wake(name);
        }
        match answers.into_iter().find_map(|(_, r)| r.err()) {
            Some(e) => Err(e),
            None => Ok(undone),
        }
    }

    /// Renews the holder's hold on every node (`None` keeps the lease it
    /// has; a hold taken in a session no further than the session's end
    /// on each node). `Ok(None)` when it no longer holds a quorum: what is
    /// left of its hold is then removed, so that it does not block others.
    pub async fn heartbeat(
        &self,
        name: &str,
        holder: &str,
        lease_ms: Option<u64>,
    ) -> Result<Option<RedGrant>, StoreError> {
        self.renew(name, holder, lease_ms, None).await
    }

    /// [`Self::heartbeat`], or a session's renewal of the holder's hold on
    /// every node; see [`crate::coord::locks::Locks::renew`].
    pub async fn renew(
        &self,
        name: &str,
        holder: &str,
        lease_ms: Option<u64>,
        session: Option<SessionTerm<'_>>,
    ) -> Result<Option<RedGrant>, StoreError> {
        let timeout = lease_ms.map_or(NODE_TIMEOUT_MAX, node_timeout);
        let own = SessionTerm::renewal(lease_ms, session);
        let args: Vec<&str> = std::iter::once(holder)
            .chain(own.iter().map(String::as_str))
            .collect();
        let session = session.map(|t| t.id);
        self.renew_on_nodes(name, holder, timeout, &args, session)
            .await
    }

    /// Runs the heartbeat script with `args` on every node; a renewal by
    /// `session` removes only holds taken in it when too few are left.
    async fn renew_on_nodes(
        &self,
        name: &str,
        holder: &str,
        timeout: Duration,
        args: &[&str],
        session: Option<&str>,
    ) -> Result<Option<RedGrant>, StoreError> {
        let started = Instant::now();
        let keys = [self.key(name, "")];
        let keys = &keys;
        // A session's renewal that came after the session's end ended the
        // hold on some node.
        let ended = &std::sync::atomic::AtomicBool::new(false);
        let answers = self
            .on_every_node(self.all(), timeout, |node| async move {
                let reply: Vec<Value> = node
                    .write_repeatable(&scripts::REDLOCK_HEARTBEAT, keys, args)
                    .await?;
                match reply.as_slice() {
                    [Value::Int(1), token, lease, shortened] => Ok(Some((
                        reply_u64(token, "token")?,
                        reply_u64(lease, "lease")?,
                        matches!(shortened, Value::Int(1)),
                    ))),
                    [Value::Int(0)] => Ok(None),
                    [Value::Int(0), Value::Int(1)] => {
                        ended.store(true, std::sync::atomic::Ordering::Relaxed);
                        Ok(None)
                    }
                    other => Err(StoreError::reply("redlock_heartbeat", other)),
                }
            })
            .await;
        let renewed: Vec<(usize, (u64, u64))> = answers
            .iter()
            .filter_map(|(i, r)| match r {
                Ok(Some((token, lease, _))) => Some((*i, (*token, *lease))),
                _ => None,
            })
            .collect();
        if ended.load(std::sync::atomic::Ordering::Relaxed)
            || answers
                .iter()
                .any(|(_, r)| matches!(r, Ok(Some((_, _, true)))))
        {
            // It now ends earlier than it did: waiters look again.
            self.wake(name);
        }
        let unanswered = answers.iter().filter(|(_, r)| r.is_err()).count();
        let (quorum, total) = (self.inner.quorum, self.total());
        if renewed.len() >= quorum {
            // The nodes agree on the lease unless a renewal with a new
            // lease reached only some of them: rely on the shortest.
            let lease_ms = renewed.iter().map(|(_, (_, l))| *l).min().unwrap_or(0);
            let validity = validity_ms(lease_ms, started);
            if validity <= 0 {
                return Err(no_quorum(format!(
                    "the RedLock nodes answered too slowly: the {lease_ms} ms lease was used up \
                     before a quorum renewed it; renew again at once"
                )));
            }
            return Ok(Some(RedGrant {
                fencing_token: renewed.iter().map(|(_, (t, _))| *t).max().unwrap_or(0),
                lease_ms,
                validity_ms: validity as u64,
                acquired: renewed.len(),
                total,
            }));
        }
        if renewed.len() + unanswered >= quorum {
            // The nodes that did not answer may still hold it for us.
            return Err(no_quorum(format!(
                "{} of {total} RedLock nodes answered within {} ms; a quorum needs {quorum}; \
                 renew again shortly",
                total - unanswered,
                timeout.as_millis()
            )));
        }
        if !renewed.is_empty() {
            let nodes = renewed.iter().map(|(i, _)| *i);
            self.release_on(name, holder, nodes, timeout, session).await;
            self.wake(name);
        }
        Ok(None)
    }

    /// Removes the holder's hold from every node. `Ok(Some(true))` when it
    /// held a quorum of the nodes that answered, `Ok(Some(false))` when it
    /// held only fewer (its hold had already been lost; the rest is
    /// cleaned up), `Ok(None)` when no node held it and enough answered to
    /// tell.
    pub async fn release(&self, name: &str, holder: &str) -> Result<Option<bool>, StoreError> {
        self.remove(name, holder, None).await
    }

    /// Session `session` ends: removes the holder's hold from every node
    /// where it was taken in that session; true when one was removed.
    pub async fn release_in(
        &self,
        name: &str,
        holder: &str,
        session: &str,
    ) -> Result<bool, StoreError> {
        Ok(self.remove(name, holder, Some(session)).await?.is_some())
    }

    async fn remove(
        &self,
        name: &str,
        holder: &str,
        session: Option<&str>,
    ) -> Result<Option<bool>, StoreError> {
        let answers = self
            .release_on(name, holder, self.all(), NODE_TIMEOUT_MAX, session)
            .await;
        let removed = answers.iter().filter(|(_, r)| matches!(r, Ok(1))).count();
        let answered = answers.iter().filter(|(_, r)| r.is_ok()).count();
        let (quorum, total) = (self.inner.quorum, self.total());
        if removed > 0 {
            self.wake(name);
            return Ok(Some(removed >= quorum));
        }
        if answered >= quorum {
            return Ok(None);
        }
        Err(no_quorum(format!(
            "{answered} of {total} RedLock nodes answered within {} ms and none held the lock \
             for this holder; a quorum needs {quorum} to tell; retry shortly",
            NODE_TIMEOUT_MAX.as_millis()
        )))
    }

    /// Runs the release on `nodes` (with `session`: only a hold taken in
    /// it).
    async fn release_on(
        &self,
        name: &str,
        holder: &str,
        nodes: impl Iterator<Item = usize>,
        timeout: Duration,
        session: Option<&str>,
    ) -> Vec<(usize, Result<i64, StoreError>)> {
        let keys = [self.key(name, "")];
        let args: Vec<&str> = std::iter::once(holder).chain(session).collect();
        let (keys, args) = (&keys, &args);
        self.on_every_node(nodes, timeout, |node| async move {
            node.write_repeatable::<i64>(&scripts::REDLOCK_RELEASE, keys, args)
                .await
        })
        .await
    }

    /// Every node's view of the lock; a node that does not answer within
    /// [`NODE_TIMEOUT_MAX`] is reported unreachable.
    pub async fn state(&self, name: &str) -> RedState {
        let keys = [self.key(name, "")];
        let keys = &keys;
        let answers = self
            .on_every_node(self.all(), NODE_TIMEOUT_MAX, |node| async move {
                let reply: Vec<Value> = node
                    .run(&scripts::REDLOCK_STATE, keys, &[] as &[&str])
                    .await?;
                match reply.as_slice() {
                    [locked, ttl, holds, attempt] => {
                        let hold = HoldInfo::list(holds)?.into_iter().next();
                        let attempt = reply_owner(attempt).unwrap_or_default();
                        let locked = reply_u64(locked, "locked")? == 1;
                        Ok((locked, reply_u64(ttl, "ttl")?, hold.map(|h| (attempt, h))))
                    }
                    other => Err(StoreError::reply("redlock_state", other)),
                }
            })
            .await;
        let mut holds = Vec::new();
        let nodes: Vec<NodeState> = answers
            .into_iter()
            .map(|(node, answer)| match answer {
                Ok((locked, ttl_ms, hold)) => {
                    holds.extend(hold);
                    NodeState {
                        node,
                        reachable: true,
                        locked,
                        ttl_ms,
                    }
                }
                Err(_) => NodeState {
                    node,
                    reachable: false,
                    locked: false,
                    ttl_ms: 0,
                },
            })
            .collect();
        RedState {
            locked_on: nodes.iter().filter(|n| n.locked).count(),
            total: nodes.len(),
            nodes,
            hold: agreed_hold(holds, self.inner.quorum),
        }
    }

    /// Publishes "maybe free" on the main Redis, in the background: waiters
    /// on every instance look again (they also look by themselves when the
    /// blocking hold's lease ends, so a lost message only delays them).
    fn wake(&self, name: &str) {
        let main = self.inner.main.clone();
        let channel = self.wake_channel(name);
        tokio::spawn(async move {
            // A notification, not a state change: no replica needs to
            // acknowledge it, and sending it twice is harmless.
            let sent: Result<i64, _> = main
                .run(&scripts::REDLOCK_WAKE, &[&channel], &[] as &[&str])
                .await;
            if let Err(e) = sent {
                tracing::debug!(error = %e, "could not publish a RedLock wake message");
            }
        });
    }
}

/// `lease − elapsed − drift`, in ms (≤ 0: nothing left to rely on).
fn validity_ms(lease_ms: u64, started: Instant) -> i64 {
    let elapsed = started.elapsed().as_millis() as i64;
    lease_ms as i64 - elapsed - drift_ms(lease_ms) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_timeout_is_a_tenth_of_the_lease_within_bounds() {
        assert_eq!(node_timeout(500), Duration::from_millis(50));
        assert_eq!(node_timeout(30_000), NODE_TIMEOUT_MAX);
        assert_eq!(node_timeout(10), NODE_TIMEOUT_MIN);
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift_ms(30_000), 302);
        assert_eq!(drift_ms(500), 7);
    }

    fn hold(owner: &str, expires_in_ms: u64, held_for_ms: u64) -> HoldInfo {
        HoldInfo {
            owner: Some(owner.into()),
            expires_in_ms,
            held_for_ms,
            session: false,
            count: 1,
            mode: None,
        }
    }

    #[test]
    fn the_hold_a_quorum_of_nodes_shares_is_the_locks() {
        let holds = vec![
            ("t1".to_string(), hold("a", 900, 100)),
            ("t2".to_string(), hold("b", 5000, 10)),
            ("t1".to_string(), hold("a", 800, 120)),
            ("t1".to_string(), hold("a", 1000, 90)),
        ];
        let agreed = agreed_hold(holds.clone(), 3).expect("three nodes share t1");
        assert_eq!(agreed.owner.as_deref(), Some("a"));
        // What a quorum (3) of the nodes reaches at least.
        assert_eq!((agreed.expires_in_ms, agreed.held_for_ms), (800, 90));
        let two = agreed_hold(holds[..3].to_vec(), 2).expect("two share t1");
        assert_eq!((two.expires_in_ms, two.held_for_ms), (800, 100));
        assert_eq!(
            agreed_hold(holds[..2].to_vec(), 2),
            None,
            "the nodes disagree"
        );
        assert_eq!(agreed_hold(Vec::new(), 2), None, "free");
    }
}
