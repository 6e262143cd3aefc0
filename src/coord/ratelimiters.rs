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
//! - `{prefix}{n|<h>}:rlk:<key>`  the bucket of the acquires that name
//!   `key` (`<h>`: a hash of the key, so that a limiter's keys spread
//!   over a Redis Cluster's slots; `|` is never in a name): a string of
//!   the same fields and the configuration it runs under (`scripts/rl.lua`'s
//!   `KEY_BUCKET` and `load_limiter`); it expires once full again, so an
//!   idle key takes no memory
//! - `{prefix}{n|<h>}:rli:<len>:<key>:<idem>`  a key's `Idempotency-Key`
//!   records (never a bucket's name: those are all `…:rlk:…`)
//!
//! A key's bucket cannot be read in the script of its limiter's hash (on
//! a Cluster they are on different slots), so its scripts are handed the
//! configuration by the caller: each instance keeps what it last read of
//! every limiter it serves for at most [`CONFIG_TTL`] (dropped at once
//! when it changes or deletes the limiter itself). A PUT reaches every key
//! within that time; a key never goes back to an older configuration.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::Value;

use super::{AttemptId, IDEMPOTENCY_MS, Idempotent};
use crate::store::{Script, Store, StoreError, reply_u64, scripts};

/// How long an instance uses the configuration it read of a limiter for
/// the limiter's keys before reading it again: what bounds the time a PUT
/// takes to reach every key.
pub const CONFIG_TTL: Duration = Duration::from_millis(500);

/// At most this many limiters' configurations are kept; beyond it, those
/// older than [`CONFIG_TTL`] are dropped first.
const CONFIG_CACHE: usize = 4096;

/// What a key's scripts are told of their limiter: its configuration, its
/// incarnation and the configuration's version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    pub config: RateConfig,
    pub incarnation: String,
    pub ver: u64,
}

impl Known {
    /// The five ARGV a key's script takes last (`scripts/rl_keyed.lua`).
    fn args(&self) -> [String; 5] {
        let c = self.config;
        [
            c.rate.to_string(),
            c.per_ms.to_string(),
            c.burst.to_string(),
            self.incarnation.clone(),
            self.ver.to_string(),
        ]
    }
}

/// One limit of an acquire: a limiter, and optionally which key's bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    pub name: String,
    pub key: Option<String>,
    pub permits: u64,
}

/// The answer to an acquire from several limits at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakenAll {
    /// Admitted now: what each limit could admit next, and its
    /// configuration.
    Admitted {
        available: Vec<u64>,
        configs: Vec<RateConfig>,
    },
    /// Reserved: each limit's permits are the waiter's in `wait_us`.
    Reserved {
        wait_us: u64,
        reservations: Vec<Reservation>,
        configs: Vec<RateConfig>,
    },
    /// Nothing taken: every limit admits in `wait_us`, later than the
    /// request may wait; limit `which` is one that refused (`config`: its
    /// configuration, when known).
    Limited {
        wait_us: u64,
        which: usize,
        available: u64,
        config: Option<RateConfig>,
    },
    /// Limit `which`'s limiter does not exist.
    NotFound { which: usize },
    /// More permits than limit `which`'s burst.
    OverBurst { which: usize, burst: u64 },
}

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

impl Reservation {
    /// No reservation: permits admitted at once.
    fn unused() -> Self {
        Reservation {
            incarnation: String::new(),
            slot_us: 0,
        }
    }
}

/// The answer to an acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// Admitted now (or, for a retry with the same key, admitted before:
    /// the first answer again).
    Admitted {
        permits: u64,
        available: u64,
        config: RateConfig,
    },
    /// Reserved: the permits are the waiter's in `wait_us`.
    Reserved {
        permits: u64,
        wait_us: u64,
        reservation: Reservation,
        config: RateConfig,
    },
    /// Not admitted, and nothing reserved: the permits come in `wait_us`,
    /// later than the request may wait.
    Limited {
        wait_us: u64,
        available: u64,
        config: RateConfig,
    },
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
    Now { available: u64, config: RateConfig },
    /// Not yet (Redis's clock and ours differ a little): in `wait_us`.
    In { wait_us: u64 },
    /// The limiter was deleted (and perhaps created again) meanwhile.
    Gone,
}

/// On a Redis Cluster, how many times an acquire from several limits
/// reserves them all again for a later instant before it gives up.
const MULTI_ROUNDS: usize = 3;

/// The longest wait of a probe (`rl_multi`'s ARGV[2]): none at all, so it
/// refuses whatever it finds and takes nothing, only saying when.
const PROBE: i64 = -1;

/// On a Redis Cluster, how much later than the others one limit may be
/// reserved for in the same round (the calls run one after another).
const MULTI_SLACK_US: u64 = 2_000;

/// Where one call about a bucket goes (see [`RateLimiters::target`]).
struct Target {
    script: &'static Script,
    /// `[bucket, record]`, and for a key's bucket on a single Redis its
    /// limiter's hash, which the script reads.
    keys: Vec<String>,
    /// For a key's bucket on a Redis Cluster: the configuration its
    /// script is told.
    known: Option<Known>,
}

impl Target {
    /// The script's own ARGV, then a key's configuration.
    fn args(&self, own: &[String]) -> Vec<String> {
        let mut args = own.to_vec();
        if let Some(known) = &self.known {
            args.extend(known.args());
        }
        args
    }
}

#[derive(Clone, Debug)]
pub struct RateLimiters {
    store: Store,
    /// What this instance last read of each limiter, and when.
    known: Arc<Mutex<HashMap<String, (Instant, Known)>>>,
}

/// A key's bucket within a limiter, and its `Idempotency-Key` records.
fn key_tag(name: &str, key: &str) -> String {
    let hash = crate::store::scan::order_of(key) as u32;
    format!("{name}|{hash:08x}")
}

/// The configuration a script appends to its answer (`with_config` in
/// `scripts/rl.lua`): the reply's last three values, and what precedes them.
fn with_config(reply: &[Value]) -> Option<(&[Value], [&Value; 3])> {
    match reply {
        [head @ .., rate, per_ms, burst] => Some((head, [rate, per_ms, burst])),
        [] | [_] | [_, _] => None,
    }
}

fn config_of([rate, per_ms, burst]: [&Value; 3]) -> Result<RateConfig, StoreError> {
    Ok(RateConfig {
        rate: reply_u64(rate, "rate")?,
        per_ms: reply_u64(per_ms, "per_ms")?,
        burst: reply_u64(burst, "burst")?,
    })
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
        RateLimiters {
            store,
            known: Arc::default(),
        }
    }

    fn key(&self, name: &str) -> String {
        self.store.key(name, "rl")
    }

    /// The bucket of `key` in limiter `name` (the book's "Rate limits per
    /// key" (docs/src/rate-limiters.md)).
    fn bucket_key(&self, name: &str, key: &str) -> String {
        self.store.key_of(&key_tag(name, key), &["rlk:", key])
    }

    /// `[bucket, record]` of a key's script (see [`Idempotent::keys`]).
    fn bucket_keys(&self, name: &str, key: &str, idempotency_key: Option<&str>) -> [String; 2] {
        let bucket = self.bucket_key(name, key);
        let record = match idempotency_key {
            Some(idem) => self.store.key_of(
                &key_tag(name, key),
                &["rli:", &key.len().to_string(), ":", key, ":", idem],
            ),
            None => bucket.clone(),
        };
        [bucket, record]
    }

    /// Reads the limiter's configuration from Redis (and keeps it); `None`
    /// when there is no such limiter.
    async fn read_known(&self, name: &str) -> Result<Option<Known>, StoreError> {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.key(name))
            .arg(&["rate", "per_ms", "burst", "gen", "ver"]);
        let reply: Vec<Value> = self.store.raw(&cmd).await?;
        let known = match reply.as_slice() {
            [Value::Nil, ..] => None,
            [rate, per_ms, burst, incarnation, ver] => Some(Known {
                config: RateConfig {
                    rate: reply_u64(rate, "rate")?,
                    per_ms: reply_u64(per_ms, "per_ms")?,
                    burst: reply_u64(burst, "burst")?,
                },
                incarnation: reply_u64(incarnation, "gen")?.to_string(),
                // A limiter configured before versions were counted.
                ver: match ver {
                    Value::Nil => 0,
                    ver => reply_u64(ver, "ver")?,
                },
            }),
            other => return Err(StoreError::reply("rl_config", other)),
        };
        let mut cache = self.known.lock();
        match &known {
            Some(known) => {
                if cache.len() >= CONFIG_CACHE {
                    cache.retain(|_, (at, _)| at.elapsed() < CONFIG_TTL);
                }
                cache.insert(name.to_string(), (Instant::now(), known.clone()));
            }
            None => {
                cache.remove(name);
            }
        }
        Ok(known)
    }

    /// The limiter's configuration as this instance knows it: read at most
    /// [`CONFIG_TTL`] ago, or now.
    async fn known(&self, name: &str) -> Result<Option<Known>, StoreError> {
        let cached = (self.known.lock().get(name))
            .filter(|(at, _)| at.elapsed() < CONFIG_TTL)
            .map(|(_, known)| known.clone());
        match cached {
            Some(known) => Ok(Some(known)),
            None => self.read_known(name).await,
        }
    }

    fn forget(&self, name: &str) {
        self.known.lock().remove(name);
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
        let reply: Result<Vec<Value>, _> = self
            .store
            .write_repeatable(&scripts::RL_SET, &[self.key(name)], &args)
            .await;
        self.forget(name);
        match reply?.as_slice() {
            [available, _gen, _ver] => reply_u64(available, "available"),
            other => Err(StoreError::reply("rl_set", other)),
        }
    }

    /// Where a call about the bucket `key` (or the shared one) goes: its
    /// script, its keys and the ARGV it takes last. On a Redis Cluster a
    /// key's script is told the configuration (`None` when the limiter
    /// does not exist); `fresh`: read now rather than what this instance
    /// knows.
    async fn target(
        &self,
        name: &str,
        key: Option<&str>,
        idempotency_key: Option<&str>,
        scripts: (&'static Script, &'static Script),
        fresh: bool,
    ) -> Result<Option<Target>, StoreError> {
        let Some(key) = key else {
            let idempotent = Idempotent {
                key: idempotency_key,
            };
            return Ok(Some(Target {
                script: scripts.0,
                keys: idempotent
                    .keys(&self.store, name, "rl", self.key(name))
                    .into(),
                known: None,
            }));
        };
        let [bucket, record] = self.bucket_keys(name, key, idempotency_key);
        if !self.store.spans_nodes() {
            // One Redis: the script reads the limiter's hash itself.
            return Ok(Some(Target {
                script: scripts.1,
                keys: vec![bucket, record, self.key(name)],
                known: None,
            }));
        }
        let known = match fresh {
            true => self.read_known(name).await?,
            false => self.known(name).await?,
        };
        Ok(known.map(|known| Target {
            script: scripts.1,
            keys: vec![bucket, record],
            known: Some(known),
        }))
    }

    /// The configuration and the permits available now (in `key`'s
    /// bucket, or the shared one); `None` when there is no such limiter.
    pub async fn state(
        &self,
        name: &str,
        key: Option<&str>,
    ) -> Result<Option<RateState>, StoreError> {
        let scripts = (&*scripts::RL_STATE, &*scripts::RL_KEY_STATE);
        let Some(target) = self.target(name, key, None, scripts, true).await? else {
            return Ok(None);
        };
        let reply: Vec<Value> = self
            .store
            .run(target.script, &target.keys, &target.args(&[]))
            .await?;
        state(&reply)
    }

    /// Takes `permits` now (from `key`'s bucket, or the shared one), or
    /// reserves them if they come within `max_wait_us`. With an
    /// idempotency key, the first acquire with that key within
    /// [`IDEMPOTENCY_MS`] is the only one: a retry gets what it got (the
    /// same reservation while it is pending), and once admitted, exactly
    /// the key's first answer, `available` included.
    pub async fn acquire(
        &self,
        name: &str,
        key: Option<&str>,
        permits: u64,
        max_wait_us: u64,
        attempt: &AttemptId,
        idempotency_key: Option<&str>,
    ) -> Result<Taken, StoreError> {
        let scripts = (&*scripts::RL_ACQUIRE, &*scripts::RL_KEY_ACQUIRE);
        let Some(target) = (self.target(name, key, idempotency_key, scripts, false)).await? else {
            return Ok(Taken::NotFound);
        };
        let args = [
            permits.to_string(),
            max_wait_us.to_string(),
            attempt.as_str().to_string(),
            IDEMPOTENCY_MS.to_string(),
        ];
        let idempotent = Idempotent {
            key: idempotency_key,
        };
        let reply: Vec<Value> = idempotent
            .write(
                &self.store,
                target.script,
                &target.keys,
                &target.args(&args),
            )
            .await?;
        let n = |v: &Value, what: &str| reply_u64(v, what);
        let (head, config) = match with_config(&reply) {
            Some((head, config)) if head.len() >= 3 => (head, Some(config)),
            _ => (reply.as_slice(), None),
        };
        Ok(match (head, config) {
            ([Value::Int(1), permits, available], Some(config)) => Taken::Admitted {
                permits: n(permits, "permits")?,
                available: n(available, "available")?,
                config: config_of(config)?,
            },
            ([Value::Int(2), permits, wait, incarnation, slot], Some(config)) => Taken::Reserved {
                permits: n(permits, "permits")?,
                wait_us: n(wait, "wait")?,
                reservation: Reservation {
                    incarnation: n(incarnation, "incarnation")?.to_string(),
                    slot_us: n(slot, "slot")?,
                },
                config: config_of(config)?,
            },
            ([Value::Int(0), wait, available], Some(config)) => Taken::Limited {
                wait_us: n(wait, "wait")?,
                available: n(available, "available")?,
                config: config_of(config)?,
            },
            (_, _) => match reply.as_slice() {
                [Value::Int(-1)] => Taken::NotFound,
                [Value::Int(-2), burst] => Taken::OverBurst {
                    burst: n(burst, "burst")?,
                },
                other => return Err(StoreError::reply("rl_acquire", other)),
            },
        })
    }

    /// Whether `reservation`'s time has come; if it has, settles it: from
    /// then on it is never given back, so the waiter may be admitted (see
    /// `scripts/rl_slot.lua`). `owner` is the acquire that reserved, where
    /// the reservation could be given back (none with an
    /// `Idempotency-Key`, which also makes the answer the key's first).
    /// Settling again answers the same. A key's bucket outlives its
    /// limiter, so its limiter is read first: deleted, or created again
    /// since, the reservation is gone.
    pub async fn settle(
        &self,
        name: &str,
        key: Option<&str>,
        reservation: &Reservation,
        owner: Option<&AttemptId>,
        idempotency_key: Option<&str>,
    ) -> Result<Due, StoreError> {
        let scripts = (&*scripts::RL_SLOT, &*scripts::RL_KEY_SLOT);
        let target = self
            .target(name, key, idempotency_key, scripts, true)
            .await?;
        let Some(target) = target.filter(|t| {
            (t.known.as_ref()).is_none_or(|known| known.incarnation == reservation.incarnation)
        }) else {
            return Ok(Due::Gone);
        };
        let args = [
            reservation.incarnation.clone(),
            reservation.slot_us.to_string(),
            owner.map(|a| a.as_str().to_string()).unwrap_or_default(),
        ];
        let reply: Vec<Value> = self
            .store
            .write_repeatable(target.script, &target.keys, &target.args(&args))
            .await?;
        Ok(match reply.as_slice() {
            [Value::Int(1), available, rate, per_ms, burst] => Due::Now {
                available: reply_u64(available, "available")?,
                config: config_of([rate, per_ms, burst])?,
            },
            [Value::Int(0), wait] => Due::In {
                wait_us: reply_u64(wait, "wait")?,
            },
            [Value::Int(-1)] => Due::Gone,
            other => return Err(StoreError::reply("rl_slot", other)),
        })
    }

    /// Gives back the `permits` that `attempt` took (from `key`'s bucket,
    /// or the shared one), if it is the last acquire of that bucket
    /// (nothing was reserved after it) and its reservation, if it made
    /// one, was not settled (see `scripts/rl_give_back.lua`). True when
    /// given back; a repeat gives nothing more.
    pub async fn give_back(
        &self,
        name: &str,
        key: Option<&str>,
        attempt: &AttemptId,
        permits: u64,
    ) -> Result<bool, StoreError> {
        let scripts = (&*scripts::RL_GIVE_BACK, &*scripts::RL_KEY_GIVE_BACK);
        let Some(target) = self.target(name, key, None, scripts, false).await? else {
            return Ok(false);
        };
        let args = [attempt.as_str().to_string(), permits.to_string()];
        let given: i64 = self
            .store
            .write_repeatable(target.script, &target.keys, &target.args(&args))
            .await?;
        Ok(given == 1)
    }

    /// Takes permits from several limits at once, from all or from none:
    /// admitted now, reserved for one instant at which every limit admits
    /// (when that comes within `max_wait_us`), or refused with when that
    /// will be (see `scripts/rl_multi.lua`). One script on a single Redis;
    /// on a Redis Cluster, whose limits live on several shards, the limits
    /// are reserved one by one for the same instant, and everything
    /// reserved is given back when one refuses or needs a later instant
    /// (then they are reserved again for that one, a few times at most).
    /// No limit ever admits beyond its bound: a reservation given back was
    /// never the caller's, and one that cannot be given back (reserved
    /// after by another request) stays spent.
    pub async fn acquire_all(
        &self,
        limits: &[Limit],
        max_wait_us: u64,
        attempt: &AttemptId,
    ) -> Result<TakenAll, StoreError> {
        let mut targets = Vec::with_capacity(limits.len());
        for (which, limit) in limits.iter().enumerate() {
            let scripts = (&*scripts::RL_MULTI, &*scripts::RL_MULTI);
            let target =
                (self.target(&limit.name, limit.key.as_deref(), None, scripts, false)).await?;
            match target {
                Some(target) => targets.push(target),
                None => return Ok(TakenAll::NotFound { which }),
            }
        }
        if !self.store.spans_nodes() {
            let all: Vec<usize> = (0..limits.len()).collect();
            return self
                .take(limits, &targets, &all, max_wait_us, 0, attempt)
                .await;
        }
        let start = Instant::now();
        let elapsed = || start.elapsed().as_micros() as u64;
        // The instant every limit is reserved for, in µs from `start`.
        let mut at: u64 = 0;
        // The limit that set `at` last (the one a refusal names).
        let mut latest = 0;
        'round: for _ in 0..MULTI_ROUNDS {
            let mut reserved: Vec<(usize, Reservation)> = Vec::with_capacity(limits.len());
            let mut available = Vec::with_capacity(limits.len());
            let mut configs = Vec::with_capacity(limits.len());
            for which in 0..limits.len() {
                let now = elapsed();
                let left = max_wait_us.saturating_sub(now);
                let taken = self
                    .take(
                        limits,
                        &targets,
                        &[which],
                        left,
                        at.saturating_sub(now),
                        attempt,
                    )
                    .await;
                let taken = match taken {
                    Ok(taken) => taken,
                    Err(e) => {
                        self.give_back_all(limits, &reserved, attempt).await;
                        return Err(e);
                    }
                };
                match taken {
                    TakenAll::Admitted {
                        available: a,
                        configs: c,
                    } => {
                        reserved.push((which, Reservation::unused()));
                        available.extend(a);
                        configs.extend(c);
                    }
                    TakenAll::Reserved {
                        wait_us,
                        mut reservations,
                        configs: c,
                    } => {
                        let due = now + wait_us;
                        reserved.push((which, reservations.remove(0)));
                        if due > at + MULTI_SLACK_US && reserved.len() > 1 {
                            // This limit admits later than those before it
                            // were reserved for: all again, for its instant.
                            at = due;
                            latest = which;
                            self.give_back_all(limits, &reserved, attempt).await;
                            continue 'round;
                        }
                        at = at.max(due);
                        available.push(0);
                        configs.extend(c);
                    }
                    TakenAll::Limited {
                        wait_us,
                        available,
                        config,
                        ..
                    } => {
                        self.give_back_all(limits, &reserved, attempt).await;
                        // When every limit admits: ask the ones not yet
                        // asked too (taking nothing).
                        let mut worst = (now + wait_us, which, available, config);
                        for rest in which + 1..limits.len() {
                            let now = elapsed();
                            let only = [rest];
                            let probe = self.take(limits, &targets, &only, PROBE, 0, attempt);
                            match probe.await? {
                                TakenAll::Limited {
                                    wait_us,
                                    available,
                                    config,
                                    ..
                                } if now + wait_us > worst.0 => {
                                    worst = (now + wait_us, rest, available, config);
                                }
                                TakenAll::NotFound { .. } => {
                                    return Ok(TakenAll::NotFound { which: rest });
                                }
                                TakenAll::OverBurst { burst, .. } => {
                                    return Ok(TakenAll::OverBurst { which: rest, burst });
                                }
                                _ => {}
                            }
                        }
                        let (due, which, available, config) = worst;
                        return Ok(TakenAll::Limited {
                            wait_us: due.max(at).saturating_sub(elapsed()),
                            which,
                            available,
                            config,
                        });
                    }
                    TakenAll::NotFound { .. } => {
                        self.give_back_all(limits, &reserved, attempt).await;
                        return Ok(TakenAll::NotFound { which });
                    }
                    TakenAll::OverBurst { burst, .. } => {
                        self.give_back_all(limits, &reserved, attempt).await;
                        return Ok(TakenAll::OverBurst { which, burst });
                    }
                }
            }
            // Admitted at once only when every limit admitted at once;
            // otherwise the waiter is answered once every reservation is
            // due (those admitted at once are its, and given back if it
            // leaves before).
            if reserved.iter().all(|(_, r)| r.slot_us == 0) {
                return Ok(TakenAll::Admitted { available, configs });
            }
            return Ok(TakenAll::Reserved {
                wait_us: at.saturating_sub(elapsed()),
                reservations: reserved.into_iter().map(|(_, r)| r).collect(),
                configs,
            });
        }
        // Every round found a limit that admits later still: busy limits.
        Ok(TakenAll::Limited {
            wait_us: at.saturating_sub(elapsed()),
            which: latest,
            available: 0,
            config: None,
        })
    }

    /// One `rl_multi` call over the limits `which` (all of them on a
    /// single Redis, one at a time on a Cluster).
    async fn take(
        &self,
        limits: &[Limit],
        targets: &[Target],
        which: &[usize],
        max_wait_us: impl ToString,
        not_before_us: u64,
        attempt: &AttemptId,
    ) -> Result<TakenAll, StoreError> {
        // Each bucket, then what its configuration is read from.
        let mut keys: Vec<&str> = which.iter().map(|&i| targets[i].keys[0].as_str()).collect();
        let mut args = vec![
            attempt.as_str().to_string(),
            max_wait_us.to_string(),
            not_before_us.to_string(),
        ];
        for &i in which {
            let target = &targets[i];
            args.push(limits[i].permits.to_string());
            match (&target.known, target.keys.get(2)) {
                (Some(known), _) => args.extend(known.args()),
                (None, Some(limiter)) => {
                    keys.push(limiter);
                    args.push("#".into());
                    args.extend(std::iter::repeat_n(String::new(), 4));
                    continue;
                }
                (None, None) => args.extend(std::iter::repeat_n(String::new(), 5)),
            }
            keys.push(&target.keys[0]);
        }
        let reply: Vec<Value> = self.store.write(&scripts::RL_MULTI, &keys, &args).await?;
        let n = |v: &Value, what: &str| reply_u64(v, what);
        let bad = || StoreError::reply("rl_multi", &reply);
        let which_of = |v: &Value| -> Result<usize, StoreError> {
            let i = n(v, "which")? as usize;
            which.get(i.wrapping_sub(1)).copied().ok_or_else(bad)
        };
        Ok(match reply.as_slice() {
            [Value::Int(code @ (1 | 2)), wait, slot, _, rest @ ..]
                if rest.len() == 5 * which.len() =>
            {
                let mut available = Vec::with_capacity(which.len());
                let mut reservations = Vec::with_capacity(which.len());
                let mut configs = Vec::with_capacity(which.len());
                for each in rest.chunks(5) {
                    available.push(n(&each[1], "available")?);
                    reservations.push(Reservation {
                        incarnation: n(&each[0], "incarnation")?.to_string(),
                        slot_us: n(slot, "slot")?,
                    });
                    configs.push(config_of([&each[2], &each[3], &each[4]])?);
                }
                match code {
                    1 => TakenAll::Admitted { available, configs },
                    _ => TakenAll::Reserved {
                        wait_us: n(wait, "wait")?,
                        reservations,
                        configs,
                    },
                }
            }
            [Value::Int(0), wait, _, i, available, rate, per_ms, burst] => TakenAll::Limited {
                wait_us: n(wait, "wait")?,
                which: which_of(i)?,
                available: n(available, "available")?,
                config: Some(config_of([rate, per_ms, burst])?),
            },
            [Value::Int(-1), _, _, i] => TakenAll::NotFound {
                which: which_of(i)?,
            },
            [Value::Int(-2), _, _, i, burst] => TakenAll::OverBurst {
                which: which_of(i)?,
                burst: n(burst, "burst")?,
            },
            _ => return Err(bad()),
        })
    }

    /// Gives back, as far as each still can be, what `attempt` reserved in
    /// the limits listed (failures leave the permits spent, never more).
    async fn give_back_all(
        &self,
        limits: &[Limit],
        reserved: &[(usize, Reservation)],
        attempt: &AttemptId,
    ) {
        for (which, _) in reserved.iter().rev() {
            let limit = &limits[*which];
            let given = self
                .give_back(&limit.name, limit.key.as_deref(), attempt, limit.permits)
                .await;
            if let Err(e) = given {
                tracing::debug!(limiter = %limit.name, error = %e, "could not give permits back");
            }
        }
    }

    /// Removes the limiter; its waiters on every instance end (404). True
    /// when it existed.
    pub async fn delete(&self, name: &str) -> Result<bool, StoreError> {
        self.forget(name);
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
