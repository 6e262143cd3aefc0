//! Throughput and latency where nothing ever waits. `c` workers run one
//! kind of operation in a loop, each on its own lock name but for the
//! semaphore kind, where all of them share one semaphore:
//!
//! - **latchkey**: `POST /locks/{name}/acquire` (201) then
//!   `DELETE /locks/{name}/holders/{holder}` (200) on the service;
//! - **read-lock**: the same pair on a read-write lock's read side,
//!   `POST /rwlocks/{name}/read/acquire` (201) then
//!   `DELETE /rwlocks/{name}/holders/{holder}` (200);
//! - **semaphore**: `POST /semaphores/{name}/acquire` (201, one permit)
//!   then `DELETE /semaphores/{name}/holders/{holder}` (200), every worker
//!   on the SAME semaphore, configured once per row with
//!   [`SEM_PERMITS`] (64) permits: with at most 64 workers no acquire
//!   waits (a 409 would fail the run), but all of them contend on that
//!   one semaphore's keys. It runs at every concurrency like the others;
//!   the figure it is meant for is c = 64;
//! - **direct**: the plain lock's two Lua scripts, EVALSHA on one
//!   multiplexed redis connection shared by all workers (their commands
//!   pipeline on it) — the floor no HTTP front-end can beat;
//! - **bare** / **healthz**: `GET /` on the bare axum server and
//!   `GET /healthz` on latchkey — the HTTP ceiling, and latchkey's own
//!   routing and layers without Redis.
//!
//! The kinds' rounds are interleaved (L R S D B H L R S D B H …) and each
//! figure is the median over rounds, so all columns of a row see the same
//! noise.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hyper::body::Bytes;
use hyper::{Method, StatusCode};
use redis::aio::MultiplexedConnection;
use tokio::task::JoinSet;

use crate::client::{Conn, LEASE_MS};
use crate::cpu::Watch;
use crate::redisinfo::Redis;
use crate::stats::{median, percentile_us};
use crate::tasks::join_all;

/// Permits of the semaphore kind's one semaphore: as many as the most
/// workers, so that none of them ever waits.
pub const SEM_PERMITS: usize = 64;

/// Workers must stop within this after a round ends.
const STOP_DEADLINE: Duration = Duration::from_secs(30);

/// The lock scripts, exactly as the service embeds them.
use latchkey::store::scripts::{LOCK_ACQUIRE, LOCK_RELEASE, Publish};

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
pub struct Round {
    pub per_s: f64,
    /// p50 of each step of the operation, µs.
    pub step_p50_us: Vec<f64>,
    /// Percent of a core used by each of [`Watch::labels`] while measuring.
    pub busy: Vec<f64>,
    pub errors: Vec<String>,
}

#[derive(Default)]
struct Shared {
    measuring: AtomicBool,
    stop: AtomicBool,
    ops: AtomicU64,
}

/// Runs one worker per op: warm-up, then counts operations and keeps step
/// latencies during the measured window.
pub async fn drive<O: Op>(ops: Vec<O>, timing: Timing, watch: &Watch) -> Round {
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
    let (start, cpu_start) = (Instant::now(), watch.sample());
    tokio::time::sleep(timing.measure).await;
    shared.measuring.store(false, Ordering::Relaxed);
    let (elapsed, cpu_end) = (start.elapsed(), watch.sample());
    shared.stop.store(true, Ordering::Relaxed);
    let (mut steps, mut errors) = (Vec::<Vec<Duration>>::new(), Vec::new());
    for worker in join_all(&mut tasks, STOP_DEADLINE, &mut errors).await {
        steps.resize_with(steps.len().max(worker.len()), Vec::new);
        steps.iter_mut().zip(worker).for_each(|(s, w)| s.extend(w));
    }
    Round {
        per_s: shared.ops.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64(),
        step_p50_us: steps.iter_mut().map(|s| percentile_us(s, 50.0)).collect(),
        busy: watch.between(&cpu_start, &cpu_end),
        errors,
    }
}

/// A connection opened on first use (in the warm-up).
struct Lazy {
    base: Arc<str>,
    conn: Option<Conn>,
}

impl Lazy {
    fn new(base: &Arc<str>) -> Lazy {
        Lazy {
            base: base.clone(),
            conn: None,
        }
    }

    async fn get(&mut self) -> Result<&mut Conn, String> {
        if self.conn.is_none() {
            self.conn = Some(Conn::open(&self.base).await?);
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }
}

/// latchkey: acquire (a POST) then release over HTTP (a DELETE of the
/// holder, or a POST with a body where the names travel in bodies).
pub struct HttpPair {
    conn: Lazy,
    acquire: String,
    body: Bytes,
    release: String,
    release_body: Option<Bytes>,
}

impl Op for HttpPair {
    async fn run(&mut self) -> Result<Vec<Duration>, String> {
        let conn = self.conn.get().await?;
        let t0 = Instant::now();
        conn.call(
            Method::POST,
            &self.acquire,
            Some(&self.body),
            StatusCode::CREATED,
        )
        .await?;
        let t1 = Instant::now();
        let method = match self.release_body {
            Some(_) => Method::POST,
            None => Method::DELETE,
        };
        conn.call(
            method,
            &self.release,
            self.release_body.as_ref(),
            StatusCode::OK,
        )
        .await?;
        Ok(vec![t1 - t0, t1.elapsed()])
    }
}

/// bare / healthz: one GET.
struct Get {
    conn: Lazy,
    path: &'static str,
}

impl Op for Get {
    async fn run(&mut self) -> Result<Vec<Duration>, String> {
        let conn = self.conn.get().await?;
        let t0 = Instant::now();
        conn.call(Method::GET, self.path, None, StatusCode::OK)
            .await?;
        Ok(vec![t0.elapsed()])
    }
}

/// direct: the two scripts on the shared multiplexed connection.
struct DirectPair {
    conn: MultiplexedConnection,
    scripts: Arc<(redis::Script, redis::Script)>,
    keys: [String; 3],
    holder: String,
    /// Attempt ids, one per acquire, as the service sends them.
    attempts: u64,
}

impl Op for DirectPair {
    async fn run(&mut self) -> Result<Vec<Duration>, String> {
        let [lock, fence, channel] = &self.keys;
        self.attempts += 1;
        let attempt = format!("{}.{}", self.holder, self.attempts);
        let t0 = Instant::now();
        let undone = format!("{lock}:undone:{attempt}");
        // The lock family's common arguments, then the script's own.
        let acquired: Vec<i64> = (self.scripts.0.key(lock).key(fence).key(undone))
            .arg(channel)
            .arg(&self.holder)
            .arg("")
            .arg("")
            .arg(LEASE_MS)
            .arg(attempt)
            .invoke_async(&mut self.conn)
            .await
            .map_err(|e| format!("direct acquire: {e}"))?;
        let t1 = Instant::now();
        let released: Vec<i64> = (self.scripts.1.key(lock).arg(channel))
            .arg(&self.holder)
            .arg("")
            .arg("")
            .arg("0")
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
    pub latchkey: String,
    /// Another build of the service, when one is compared (`LATCHKEY_BENCH_BASELINE`).
    pub baseline: Option<String>,
    pub bare: String,
    /// The direct floor's one connection.
    pub direct: MultiplexedConnection,
    /// Statistics connection.
    pub admin: Redis,
    /// The cores and processes whose CPU use is reported.
    pub watch: Watch,
}

/// One row of results at concurrency `c` (medians over rounds).
#[derive(Debug, Default)]
pub struct Row {
    pub c: usize,
    pub latchkey_pairs: f64,
    /// Read-lock acquire+release pairs per second.
    pub read_pairs: f64,
    /// Semaphore acquire+release pairs per second, all workers on one
    /// semaphore of [`SEM_PERMITS`] permits.
    pub sem_pairs: f64,
    pub direct_pairs: f64,
    pub bare_rps: f64,
    pub healthz_rps: f64,
    pub acquire_p50_us: f64,
    pub release_p50_us: f64,
    pub read_acquire_p50_us: f64,
    pub read_release_p50_us: f64,
    pub sem_acquire_p50_us: f64,
    pub sem_release_p50_us: f64,
    pub direct_acquire_p50_us: f64,
    pub direct_release_p50_us: f64,
    pub bare_p50_us: f64,
    pub healthz_p50_us: f64,
    pub redis_us_latchkey: f64,
    pub redis_us_read: f64,
    pub redis_us_sem: f64,
    pub redis_us_direct: f64,
    /// Busy % of (server core, client core) per kind, medians.
    pub busy: Vec<(&'static str, Vec<f64>)>,
    pub errors: Vec<String>,
}

impl HttpPair {
    /// `POST {route}/{name}/{acquire}` and
    /// `DELETE {route}/{name}/holders/{holder}`.
    fn new(base: &Arc<str>, route: &str, name: &str, acquire: &str, holder: &str) -> HttpPair {
        let body = serde_json::json!({ "holder": holder, "lease_ms": LEASE_MS });
        HttpPair {
            conn: Lazy::new(base),
            acquire: format!("{route}/{name}/{acquire}"),
            body: Bytes::from(body.to_string()),
            release: format!("{route}/{name}/holders/{holder}"),
            release_body: None,
        }
    }
}

/// Route prefix of semaphores.
const SEMAPHORES: &str = "/semaphores";

impl Targets {
    /// Acquire+release pairs on `route`, each worker on its own name.
    pub fn http_pairs(&self, c: usize, route: &str, acquire: &str) -> Vec<HttpPair> {
        self.http_pairs_on(&self.latchkey, c, route, acquire)
    }

    /// [`Targets::http_pairs`] on the service at `base`.
    pub fn http_pairs_on(&self, base: &str, c: usize, route: &str, acquire: &str) -> Vec<HttpPair> {
        let base: Arc<str> = base.into();
        let tag = route.trim_start_matches('/');
        (0..c)
            .map(|i| {
                let name = format!("bench-{tag}-c{c}-{i}");
                HttpPair::new(&base, route, &name, acquire, &format!("h{i}"))
            })
            .collect()
    }

    /// Acquire+release pairs of one permit each, every worker (its own
    /// holder) on the one semaphore `name`.
    fn sem_pairs(&self, c: usize, name: &str) -> Vec<HttpPair> {
        let base: Arc<str> = self.latchkey.as_str().into();
        (0..c)
            .map(|i| HttpPair::new(&base, SEMAPHORES, name, "acquire", &format!("h{i}")))
            .collect()
    }

    /// Multi-lock pairs (`POST /multilocks/acquire`, `POST
    /// /multilocks/release`), each worker on its own set of `size` names.
    pub fn multi_pairs(&self, c: usize, size: usize) -> Vec<HttpPair> {
        let base: Arc<str> = self.latchkey.as_str().into();
        (0..c)
            .map(|i| {
                let names: Vec<String> = (0..size)
                    .map(|n| format!("bench-multi-c{c}-{i}-{n}"))
                    .collect();
                let holder = format!("h{i}");
                let acquire =
                    serde_json::json!({ "names": names, "holder": holder, "lease_ms": LEASE_MS });
                let release = serde_json::json!({ "names": names, "holder": holder });
                HttpPair {
                    conn: Lazy::new(&base),
                    acquire: "/multilocks/acquire".into(),
                    body: Bytes::from(acquire.to_string()),
                    release: "/multilocks/release".into(),
                    release_body: Some(Bytes::from(release.to_string())),
                }
            })
            .collect()
    }

    /// `PUT /semaphores/{name}` with [`SEM_PERMITS`] permits (200).
    async fn configure_semaphore(&self, name: &str) -> Result<(), String> {
        let body = serde_json::json!({ "permits": SEM_PERMITS });
        let mut conn = Conn::open(&self.latchkey).await?;
        conn.call(
            Method::PUT,
            &format!("{SEMAPHORES}/{name}"),
            Some(&Bytes::from(body.to_string())),
            StatusCode::OK,
        )
        .await
        .map(drop)
        .map_err(|e| format!("configuring the semaphore: {e}"))
    }

    fn direct_pairs(&self, c: usize) -> Vec<DirectPair> {
        let scripts = Arc::new((
            LOCK_ACQUIRE.redis(Publish::Classic).clone(),
            LOCK_RELEASE.redis(Publish::Classic).clone(),
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
                    attempts: 0,
                }
            })
            .collect()
    }

    fn gets(&self, base: &str, path: &'static str, c: usize) -> Vec<Get> {
        let base: Arc<str> = base.into();
        (0..c)
            .map(|_| Get {
                conn: Lazy::new(&base),
                path,
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

/// The six kinds: their names, and the column names of their steps.
const KINDS: [(&str, &[&str]); 6] = [
    ("latchkey", &["acq", "rel"]),
    ("read-lock", &["acq", "rel"]),
    ("semaphore", &["acq", "rel"]),
    ("direct", &["acq", "rel"]),
    ("bare", &["p50"]),
    ("healthz", &["p50"]),
];

/// Interleaved rounds of the six kinds at concurrency `c` (at most
/// [`SEM_PERMITS`]); medians.
pub async fn measure(t: &Targets, c: usize, rounds: usize, timing: Timing) -> Row {
    let mut cols: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut errors = Vec::new();
    // A fresh semaphore per row, configured once; every round reuses it
    // (each pair gives its permit back).
    let semaphore = format!("bench-semaphore-c{c}");
    if let Err(e) = t.configure_semaphore(&semaphore).await {
        errors.push(format!("semaphore c={c}: {e}"));
    }
    for _ in 0..rounds {
        let (l, l_us) = t
            .with_redis_cpu(drive(
                t.http_pairs(c, "/locks", "acquire"),
                timing,
                &t.watch,
            ))
            .await;
        let read_pairs = t.http_pairs(c, "/rwlocks", "read/acquire");
        let (r, r_us) = t.with_redis_cpu(drive(read_pairs, timing, &t.watch)).await;
        let sem_pairs = t.sem_pairs(c, &semaphore);
        let (s, s_us) = t.with_redis_cpu(drive(sem_pairs, timing, &t.watch)).await;
        let (d, d_us) = t
            .with_redis_cpu(drive(t.direct_pairs(c), timing, &t.watch))
            .await;
        let b = drive(t.gets(&t.bare, "/", c), timing, &t.watch).await;
        let h = drive(t.gets(&t.latchkey, "/healthz", c), timing, &t.watch).await;
        let redis_us = [l_us, r_us, s_us, d_us, f64::NAN, f64::NAN];
        for (((kind, steps), round), us) in KINDS.iter().zip([l, r, s, d, b, h]).zip(redis_us) {
            let mut put =
                |name: &str, v: f64| cols.entry(format!("{kind}_{name}")).or_default().push(v);
            put("per_s", round.per_s);
            put("redis_us", us);
            (round.busy.iter().enumerate()).for_each(|(i, v)| put(&format!("busy{i}"), *v));
            steps
                .iter()
                .zip(&round.step_p50_us)
                .for_each(|(s, v)| put(s, *v));
            errors.extend(round.errors.iter().map(|e| format!("{kind} c={c}: {e}")));
        }
    }
    let mut m = |name: &str| median(cols.remove(name).unwrap_or_default());
    let labels = t.watch.labels().len();
    let busy = KINDS.map(|(kind, _)| {
        (
            kind,
            (0..labels).map(|i| m(&format!("{kind}_busy{i}"))).collect(),
        )
    });
    Row {
        c,
        latchkey_pairs: m("latchkey_per_s"),
        read_pairs: m("read-lock_per_s"),
        sem_pairs: m("semaphore_per_s"),
        direct_pairs: m("direct_per_s"),
        bare_rps: m("bare_per_s"),
        healthz_rps: m("healthz_per_s"),
        acquire_p50_us: m("latchkey_acq"),
        release_p50_us: m("latchkey_rel"),
        read_acquire_p50_us: m("read-lock_acq"),
        read_release_p50_us: m("read-lock_rel"),
        sem_acquire_p50_us: m("semaphore_acq"),
        sem_release_p50_us: m("semaphore_rel"),
        direct_acquire_p50_us: m("direct_acq"),
        direct_release_p50_us: m("direct_rel"),
        bare_p50_us: m("bare_p50"),
        healthz_p50_us: m("healthz_p50"),
        redis_us_latchkey: m("latchkey_redis_us"),
        redis_us_read: m("read-lock_redis_us"),
        redis_us_sem: m("semaphore_redis_us"),
        redis_us_direct: m("direct_redis_us"),
        busy: busy.to_vec(),
        errors,
    }
}
