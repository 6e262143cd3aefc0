//! Rate limiters (Redisson RRateLimiter) as a plain Rust API over the
//! store: GCRA on Redis's clock, one script per operation, a few hash
//! fields per limiter whatever its rate (the algorithm and its exact
//! arithmetic are in `scripts/rl.lua`).
//!
//! A request that may wait does not poll: when its permits come within
//! its wait, the acquire *reserves* them (moves the limiter's theoretical
//! arrival time like an admission) and says when they are due; the waiter
//! then only has to be there at that instant ([`RateLimiters::settle`]
//! checks that the limiter, the same incarnation, still exists, and
//! settles the reservation). Since a reservation takes its place in the
//! limiter's one timeline, waiters are admitted in the order they arrived,
//! and no later request (small or large) can take permits promised to an
//! earlier one. A waiter that goes away unanswered gives its reservation
//! back when nothing was reserved after it ([`RateLimiters::give_back`]);
//! a settled reservation is never given back.
//!
//! Redis layout of a limiter named `n`:
//! - `{prefix}{n}:rl`             hash: rate, per_ms, burst, tat, frac, gen,
//!   last (see `scripts/rl.lua`); kept until deleted
//! - `{prefix}{n}:rl:wake`        pub/sub channel: `deleted` when it is
//! - `{prefix}{n}:rl:idem:<key>`  what the first acquire with that
//!   `Idempotency-Key` got, and its first answer "admitted"
//!   (`scripts/rl_record.lua`); expires after [`IDEMPOTENCY_MS`]

use redis::Value;

use super::{AttemptId, IDEMPOTENCY_MS, Idempotent};
use crate::store::{Store, StoreError, reply_u64, scripts};

/// A limiter's configuration: `rate` permits per `per_ms` milliseconds,
/// and at most `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateConfig {
    pub rate: u64,
    pub per_ms: u64,
    pub burst: u64,
}

/// A limiter's configuration and the permits it could admit right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateState {
    pub config: RateConfig,
    pub available: u64,
}

/// Permits reserved for a waiter: due at `slot_us` on Redis's clock, in
/// one `incarnation` of the limiter (its `gen`: a limiter deleted and
/// created again is another one, and does not honour it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub incarnation: String,
    pub slot_us: u64,
}

/// The answer to an acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// Admitted now (or, for a retry with the same key, admitted before:
    /// the first answer again).
    Admitted { permits: u64, available: u64 },
    /// Reserved: the permits are the waiter's in `wait_us`.
    Reserved {
        permits: u64,
        wait_us: u64,
        reservation: Reservation,
    },
    /// Not admitted, and nothing reserved: the permits come in `wait_us`,
    /// later than the request may wait.
    Limited { wait_us: u64, available: u64 },
    /// No such limiter (for a retry with the same key: not the one the key
    /// counted in).
    NotFound,
    /// More permits than the limiter's burst: never admissible.
    OverBurst { burst: u64 },
}

/// Whether a reservation's time has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// It has, and the reservation is settled (never given back from now
    /// on); `available` is what the limiter could admit now (with an
    /// `Idempotency-Key`: what the key's first answer said).
    Now { available: u64 },
    /// Not yet (Redis's clock and ours differ a little): in `wait_us`.
    In { wait_us: u64 },
    /// The limiter was deleted (and perhaps created again) meanwhile.
    Gone,
}

#[derive(Clone, Debug)]
pub struct RateLimiters {
    store: Store,
}

fn state(reply: &[Value]) -> Result<Option<RateState>, StoreError> {
    match reply {
        [Value::Int(-1)] => Ok(None),
        [rate, per_ms, burst, available] => Ok(Some(RateState {
            config: RateConfig {
                rate: reply_u64(rate, "rate")?,
                per_ms: reply_u64(per_ms, "per_ms")?,
                burst: reply_u64(burst, "burst")?,
            },
            available: reply_u64(available, "available")?,
        })),
        other => Err(StoreError::reply("rl_state", other)),
    }
}

impl RateLimiters {
    pub fn new(store: Store) -> Self {
        RateLimiters { store }
    }

    fn key(&self, name: &str) -> String {
        self.store.key(name, "rl")
    }

    /// The pub/sub channel that tells waiters the limiter was deleted.
    pub fn wake_channel(&self, name: &str) -> String {
        self.store.key(name, "rl:wake")
    }

    /// Creates the limiter (full: `burst` permits available), or changes
    /// it at once, keeping the permits available now (see
    /// `scripts/rl_set.lua`). Returns the permits available now.
    pub async fn configure(&self, name: &str, config: RateConfig) -> Result<u64, StoreError> {
        let args = [config.rate, config.per_ms, config.burst].map(|n| n.to_string());
        let reply: Vec<Value> = self
            .store
            .write_repeatable(&scripts::RL_SET, &[self.key(name)], &args)
            .await?;
        match reply.as_slice() {
            [available] => reply_u64(available, "available"),
            other => Err(StoreError::reply("rl_set", other)),
        }
    }

    /// The configuration and the permits available now; `None` when there
    /// is no such limiter.
    pub async fn state(&self, name: &str) -> Result<Option<RateState>, StoreError> {
        let no_args: [&str; 0] = [];
        let reply: Vec<Value> = self
            .store
            .run(&scripts::RL_STATE, &[self.key(name)], &no_args)
            .await?;
        state(&reply)
    }

    /// Takes `permits` now, or reserves them if they come within
    /// `max_wait_us`. With an idempotency key, the first acquire with that
    /// key within [`IDEMPOTENCY_MS`] is the only one: a retry gets what it
    /// got (the same reservation while it is pending), and once admitted,
    /// exactly the key's first answer, `available` included.
    pub async fn acquire(
        &self,
        name: &str,
        permits: u64,
        max_wait_us: u64,
        attempt: &AttemptId,
        idempotency_key: Option<&str>,
    ) -> Result<Taken, StoreError> {
        let idempotent = Idempotent {
            key: idempotency_key,
        };
        let keys = idempotent.keys(&self.store, name, "rl", self.key(name));
        let args = [
            permits.to_string(),
            max_wait_us.to_string(),
            attempt.as_str().to_string(),
            IDEMPOTENCY_MS.to_string(),
        ];
        let reply: Vec<Value> = idempotent
            .write(&self.store, &scripts::RL_ACQUIRE, &keys, &args)
            .await?;
        let n = |v: &Value, what: &str| reply_u64(v, what);
        Ok(match reply.as_slice() {
            [Value::Int(1), permits, available] => Taken::Admitted {
                permits: n(permits, "permits")?,
                available: n(available, "available")?,
            },
            [Value::Int(2), permits, wait, incarnation, slot] => Taken::Reserved {
                permits: n(permits, "permits")?,
                wait_us: n(wait, "wait")?,
                reservation: Reservation {
                    incarnation: n(incarnation, "incarnation")?.to_string(),
                    slot_us: n(slot, "slot")?,
                },
            },
            [Value::Int(0), wait, available] => Taken::Limited {
                wait_us: n(wait, "wait")?,
                available: n(available, "available")?,
            },
            [Value::Int(-1)] => Taken::NotFound,
            [Value::Int(-2), burst] => Taken::OverBurst {
                burst: n(burst, "burst")?,
            },
            other => return Err(StoreError::reply("rl_acquire", other)),
        })
    }

    /// Whether `reservation`'s time has come; if it has, settles it: from
    /// then on it is never given back, so the waiter may be admitted (see
    /// `scripts/rl_slot.lua`). `owner` is the acquire that reserved, where
    /// the reservation could be given back (none with an
    /// `Idempotency-Key`, which also makes the answer the key's first).
    /// Settling again answers the same.
    pub async fn settle(
        &self,
        name: &str,
        reservation: &Reservation,
        owner: Option<&AttemptId>,
        idempotency_key: Option<&str>,
    ) -> Result<Due, StoreError> {
        let idempotent = Idempotent {
            key: idempotency_key,
        };
        let keys = idempotent.keys(&self.store, name, "rl", self.key(name));
        let args = [
            reservation.incarnation.clone(),
            reservation.slot_us.to_string(),
            owner.map(|a| a.as_str().to_string()).unwrap_or_default(),
        ];
        let reply: Vec<Value> = self
            .store
            .write_repeatable(&scripts::RL_SLOT, &keys, &args)
            .await?;
        Ok(match reply.as_slice() {
            [Value::Int(1), available] => Due::Now {
                available: reply_u64(available, "available")?,
            },
            [Value::Int(0), wait] => Due::In {
                wait_us: reply_u64(wait, "wait")?,
            },
            [Value::Int(-1)] => Due::Gone,
            other => return Err(StoreError::reply("rl_slot", other)),
        })
    }

    /// Gives back the `permits` that `attempt` took, if it is the last
    /// acquire of the limiter (nothing was reserved after it) and its
    /// reservation, if it made one, was not settled (see
    /// `scripts/rl_give_back.lua`). True when given back; a repeat gives
    /// nothing more.
    pub async fn give_back(
        &self,
        name: &str,
        attempt: &AttemptId,
        permits: u64,
    ) -> Result<bool, StoreError> {
        let args = [attempt.as_str().to_string(), permits.to_string()];
        let given: i64 = self
            .store
            .write_repeatable(&scripts::RL_GIVE_BACK, &[self.key(name)], &args)
            .await?;
        Ok(given == 1)
    }

    /// Removes the limiter; its waiters on every instance end (404). True
    /// when it existed.
    pub async fn delete(&self, name: &str) -> Result<bool, StoreError> {
        let removed: i64 = self
            .store
            .write(
                &scripts::RL_DELETE,
                &[self.key(name)],
                &[self.wake_channel(name)],
            )
            .await?;
        Ok(removed == 1)
    }
}
