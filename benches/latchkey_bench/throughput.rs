//! Uncontended throughput and latency. `c` workers, each on its own lock
//! name (so nothing ever waits), run one kind of operation in a loop:
//!
//! - **latchkey**: `POST /locks/{name}/acquire` (201) then
//!   `DELETE /locks/{name}/holders/{holder}` (200) on the service;
//! - **direct**: the same two Lua scripts, EVALSHA on one multiplexed
//!   redis connection shared by all workers (their commands pipeline on
//!   it) — the floor no HTTP front-end can beat;
//! - **bare** / **healthz**: `GET /` on the bare axum server and
//!   `GET /healthz` on latchkey — the HTTP ceiling, and latchkey's own
//!   routing and layers without Redis.
//!
//! The kinds' rounds are interleaved (L D B H L D B H …) and each figure
//! is the median over rounds, so all columns of a row see the same noise.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use reqwest::StatusCode;
use tokio::task::JoinSet;

use crate::client::{self, LEASE_MS, expect_status};
use crate::redisinfo::Redis;
use crate::stats::{median, percentile_us};

/// The lock scripts, exactly as the service embeds them.
const ACQUIRE_LUA: &str = include_str!("../../src/store/scripts/lock_acquire.lua");
const RELEASE_LUA: &str = include_str!("../../src/store/scripts/lock_release.lua");

/// Warm-up and measured length of one round.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub warm_up: Duration,
    pub measure: Duration,
}

/// One operation of a worker; returns the latency of each of its steps.
pub trait Op: Send + 'static {
    fn run(&mut self) -> impl Future<Output = Result<Vec<Duration>, String>> + Send;
}

/// What one round of one kind measured.
struct Round {
    per_s: f64,
    /// p50 of each step of the operation, µs.
    step_p50_us: Vec<f64>,
    errors: Vec<String>,
}

#[derive(Default)]
struct Shared {
    measuring: AtomicBool,
    stop: AtomicBool,
    ops: AtomicU64,
}

/// Runs one worker per op: warm-up, then counts operations and keeps step
/// latencies during the measured window.
async fn drive<O: Op>(ops: Vec<O>, timing: Timing) -> Round {
    let shared = Arc::new(Shared::default());
    let mut tasks = JoinSet::new();
    for mut op in ops {
        let shared = shared.clone();
        tasks.spawn(async move {
            let mut steps: Vec<Vec<Duration>> = Vec::new();
            while !shared.stop.load(Ordering::Relaxed) {
                let took = op.run().await?;
                if shared.measuring.load(Ordering::Relaxed) {
                    shared.ops.fetch_add(1, Ordering::Relaxed);
                    steps.resize_with(took.len(), Vec::new);
                    steps.iter_mut().zip(took).for_each(|(s, d)| s.push(d));
                }
            }
            Ok::<_, String>(steps)
        });
    }
    tokio::time::sleep(timing.warm_up).await;
    shared.measuring.store(true, Ordering::Relaxed);
    let start = Instant::now();
    tokio::time::sleep(timing.measure).await;
    shared.measuring.store(false, Ordering::Relaxed);
    let elapsed = start.elapsed();
    shared.stop.store(true, Ordering::Relaxed);
    let (mut steps, mut errors) = (Vec::<Vec<Duration>>::new(), Vec::new());
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok(worker)) => {
                steps.resize_with(steps.len().max(worker.len()), Vec::new);
                steps.iter_mut().zip(worker).for_each(|(s, w)| s.extend(w));
            }
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(format!("worker panicked: {e}")),
        }
    }
    Round {
        per_s: shared.ops.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64(),
        step_p50_us: steps.iter_mut().map(|s| percentile_us(s, 50.0)).collect(),
        errors,
    }
}

/// latchkey: acquire then release over HTTP.
struct HttpPair {
    client: reqwest::Client,
    base: Arc<str>,
    name: String,
    holder: String,
}

impl Op for HttpPair {
    async fn run(&mut self) -> Result<Vec<Duration>, String> {
        let t0 = Instant::now();
        let response = client::acquire(&self.client, &self.base, &self.name, &self.holder, 0)
            .send()
            .await;
        expect_status(response, StatusCode::CREATED, "acquire").await?;
        let t1 = Instant::now();
        client::release(&self.client, &self.base, &self.name, &self.holder).await?;
        Ok(vec![t1 - t0, t1.elapsed()])
    }
}

/// bare / healthz: one GET.
struct Get {
    client: reqwest::Client,
    url: Arc<str>,
}

impl Op for Get {
    async fn run(&mut self) -> Result<Vec<Duration>, String> {
        let t0 = Instant::now();
        let response = self.client.get(&*self.url).send().await;
        expect_status(response, StatusCode::OK, "GET").await?;
        Ok(vec![t0.elapsed()])
    }
}

/// direct: the two scripts on the shared multiplexed connection.
struct DirectPair {
    conn: MultiplexedConnection,
    scripts: Arc<(redis::Script, redis::Script)>,
    keys: [String; 3],
    holder: String,
}

impl Op for DirectPair {
    async fn run(&mut self) -> Result<Vec<Duration>, String> {
        let [lock, fence, channel] = &self.keys;
        let t0 = Instant::now();
        let acquired: Vec<i64> = (self.scripts.0.key(lock).key(fence))
            .arg(&self.holder)
            .arg(LEASE_MS)
            .invoke_async(&mut self.conn)
            .await
            .map_err(|e| format!("direct acquire: {e}"))?;
        let t1 = Instant::now();
        let released: Vec<i64> = (self.scripts.1.key(lock).arg(&self.holder))
            .arg("0")
            .arg(channel)
            .invoke_async(&mut self.conn)
            .await
            .map_err(|e| format!("direct release: {e}"))?;
        match (acquired.first(), released.first()) {
            (Some(1), Some(1)) => Ok(vec![t1 - t0, t1.elapsed()]),
            _ => Err(format!(
                "direct: acquire {acquired:?}, release {released:?}"
            )),
        }
    }
}

/// Everything a throughput round needs.
pub struct Targets {
    pub client: reqwest::Client,
    pub latchkey: String,
    pub bare: String,
    /// The direct floor's one connection.
    pub direct: MultiplexedConnection,
    /// Statistics connection.
    pub admin: Redis,
}

/// One row of results at concurrency `c` (medians over rounds).
#[derive(Debug, Default)]
pub struct Row {
    pub c: usize,
    pub latchkey_pairs: f64,
    pub direct_pairs: f64,
    pub bare_rps: f64,
    pub healthz_rps: f64,
    pub acquire_p50_us: f64,
    pub release_p50_us: f64,
    pub direct_acquire_p50_us: f64,
    pub direct_release_p50_us: f64,
    pub bare_p50_us: f64,
    pub healthz_p50_us: f64,
    pub redis_us_latchkey: f64,
    pub redis_us_direct: f64,
    pub errors: Vec<String>,
}

impl Targets {
    fn http_pairs(&self, c: usize) -> Vec<HttpPair> {
        let base: Arc<str> = self.latchkey.as_str().into();
        (0..c)
            .map(|i| HttpPair {
                client: self.client.clone(),
                base: base.clone(),
                name: format!("bench-c{c}-{i}"),
                holder: format!("h{i}"),
            })
            .collect()
    }

    fn direct_pairs(&self, c: usize) -> Vec<DirectPair> {
        let scripts = Arc::new((
            redis::Script::new(ACQUIRE_LUA),
            redis::Script::new(RELEASE_LUA),
        ));
        (0..c)
            .map(|i| {
                // The service's key layout, under a prefix of our own.
                let key = |part: &str| format!("bench-direct:{{bench-c{c}-{i}}}:{part}");
                DirectPair {
                    conn: self.direct.clone(),
                    scripts: scripts.clone(),
                    keys: [key("lock"), key("lock:fence"), key("lock:wake")],
                    holder: format!("h{i}"),
                }
            })
            .collect()
    }

    fn gets(&self, url: String, c: usize) -> Vec<Get> {
        let url: Arc<str> = url.into();
        (0..c)
            .map(|_| Get {
                client: self.client.clone(),
                url: url.clone(),
            })
            .collect()
    }

    /// Runs `round` between a stats reset and a read of Redis's CPU time
    /// per EVALSHA (NaN if that failed; the error is kept).
    async fn with_redis_cpu(&self, round: impl Future<Output = Round>) -> (Round, f64) {
        let reset = self.admin.reset_stats().await;
        let mut round = round.await;
        match reset.and(self.admin.evalsha().await) {
            Ok(stats) => (round, stats.usec_per_call),
            Err(e) => {
                round.errors.push(e);
                (round, f64::NAN)
            }
        }
    }
}

/// Interleaved rounds of the four kinds at concurrency `c`; medians.
pub async fn measure(t: &Targets, c: usize, rounds: usize, timing: Timing) -> Row {
    let mut cols: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    let mut errors = Vec::new();
    let mut put = |round: &Round, names: &[&'static str], extra: Option<(&'static str, f64)>| {
        cols.entry(names[0]).or_default().push(round.per_s);
        for (name, p50) in names[1..].iter().zip(&round.step_p50_us) {
            cols.entry(name).or_default().push(*p50);
        }
        if let Some((name, value)) = extra {
            cols.entry(name).or_default().push(value);
        }
        errors.extend(round.errors.iter().map(|e| format!("c={c}: {e}")));
    };
    for _ in 0..rounds {
        let (l, l_us) = t.with_redis_cpu(drive(t.http_pairs(c), timing)).await;
        put(&l, &["l", "acq", "rel"], Some(("l_us", l_us)));
        let (d, d_us) = t.with_redis_cpu(drive(t.direct_pairs(c), timing)).await;
        put(&d, &["d", "d_acq", "d_rel"], Some(("d_us", d_us)));
        let b = drive(t.gets(format!("{}/", t.bare), c), timing).await;
        put(&b, &["b", "b_p50"], None);
        let h = drive(t.gets(format!("{}/healthz", t.latchkey), c), timing).await;
        put(&h, &["h", "h_p50"], None);
    }
    let mut m = |name: &str| median(cols.remove(name).unwrap_or_default());
    Row {
        c,
        latchkey_pairs: m("l"),
        direct_pairs: m("d"),
        bare_rps: m("b"),
        healthz_rps: m("h"),
        acquire_p50_us: m("acq"),
        release_p50_us: m("rel"),
        direct_acquire_p50_us: m("d_acq"),
        direct_release_p50_us: m("d_rel"),
        bare_p50_us: m("b_p50"),
        healthz_p50_us: m("h_p50"),
        redis_us_latchkey: m("l_us"),
        redis_us_direct: m("d_us"),
        errors,
    }
}
