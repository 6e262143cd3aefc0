//! Throughput and latency where nothing ever waits. `c` workers run one
//! kind of operation in a loop, each on its own object but for the
//! semaphore kinds, where all of them share one semaphore:
//!
//! - **latchkey** (plain locks): `POST /locks/{name}/acquire` (201) then
//!   `DELETE /locks/{name}/holders/{holder}` (200) on the service;
//! - **read-lock**: the same pair on a read-write lock's read side,
//!   `POST /rwlocks/{name}/read/acquire` (201) then
//!   `DELETE /rwlocks/{name}/holders/{holder}` (200);
//! - **fair-lock**: `POST /fair-locks/{name}/acquire` (201) then
//!   `DELETE /fair-locks/{name}/holders/{holder}` (200);
//! - **semaphore**: `POST /semaphores/{name}/acquire` (201, one permit)
//!   then `DELETE /semaphores/{name}/holders/{holder}` (200), every worker
//!   on the SAME semaphore, configured once per row with
//!   [`SEM_PERMITS`] (64) permits: with at most 64 workers no acquire
//!   waits (a 409 would fail the run), but all of them contend on that
//!   one semaphore's keys. It runs at every concurrency like the others;
//!   the figure it is meant for is c = 64;
//! - **floors** ([`floors`]): each primitive's own two Lua scripts, and
//!   Redisson-style lock and semaphore scripts (`FCALL` of latchkey's
//!   function libraries, `EVALSHA` of Redisson's), on one multiplexed
//!   redis connection shared by all workers (their commands pipeline on
//!   it) — what no HTTP front-end can beat, and what a Java Redisson user
//!   runs;
//! - **bare** / **healthz**: `GET /` on the bare axum server and
//!   `GET /healthz` on latchkey — the HTTP ceiling, and latchkey's own
//!   routing and layers without Redis;
//! - **stack**: the plain-lock pair on the bare axum server's stack floor
//!   ([`crate::bare`]): one call of the lock's own scripts (or of the
//!   Redisson-style RLock scripts) per request through redis-rs, and
//!   nothing else — what axum and redis-rs cost together, without
//!   latchkey's code.
//!
//! The kinds' rounds are interleaved and each figure is the median over
//! rounds, so all columns of a row see the same noise; each round's own
//! figures are kept too ([`Row::each_round`]), and the goals are judged
//! round by round. Within a round every kind runs twice, for half the
//! round's length each: [`Kind::all`] in order, then in reverse (A B … B
//! A), and its figures are those of both halves together. So two kinds
//! compared in a round, however far apart in the order, ran at the same
//! mean time: a machine that speeds up or slows down over the round
//! moves both alike, where one pass in order gave the first kind the
//! round's start and the last its end. Redis's CPU per script call is
//! read after every half (`CONFIG RESETSTAT` before it).
//!
//! [`floors`]: crate::floors

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hyper::body::Bytes;
use hyper::{Method, StatusCode};
use redis::aio::MultiplexedConnection;
use tokio::task::JoinSet;

use crate::client::{self, Conn, LEASE_MS};
use crate::cpu::Watch;
use crate::floors::{Floor, Redisson};
use crate::ops::{Op, Primitive, SEM_PERMITS};
use crate::redisinfo::Redis;
use crate::stats::{median, percentile_us};
use crate::tasks::join_all;

/// Workers must stop within this after a round ends.
const STOP_DEADLINE: Duration = Duration::from_secs(30);

/// Warm-up and measured length of one round.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub warm_up: Duration,
    pub measure: Duration,
}

/// What one round of one kind measured.
pub struct Round {
    pub per_s: f64,
    /// p50 of each step of the operation, µs.
    pub step_p50_us: Vec<f64>,
    /// Percent of a core used by each of [`Watch::labels`] while measuring.
    pub busy: Vec<f64>,
    pub errors: Vec<String>,
    /// Operations counted, over `elapsed`.
    pub ops: u64,
    pub elapsed: Duration,
    /// Each step's latencies (what `step_p50_us` was taken from).
    pub steps: Vec<Vec<Duration>>,
}

impl Round {
    /// Two measurements of the same kind as one: their operations over
    /// their time together, the p50s of their latencies together, the
    /// busy % weighted by their time.
    pub fn merge(self, other: Round) -> Round {
        let elapsed = self.elapsed + other.elapsed;
        let (a, b) = (
            self.elapsed.as_secs_f64() / elapsed.as_secs_f64(),
            other.elapsed.as_secs_f64() / elapsed.as_secs_f64(),
        );
        let mut steps = self.steps;
        steps.resize_with(steps.len().max(other.steps.len()), Vec::new);
        steps
            .iter_mut()
            .zip(other.steps)
            .for_each(|(s, o)| s.extend(o));
        let busy = (0..self.busy.len().max(other.busy.len()))
            .map(|i| {
                let x = |v: &Vec<f64>| v.get(i).copied().unwrap_or(f64::NAN);
                x(&self.busy) * a + x(&other.busy) * b
            })
            .collect();
        let mut errors = self.errors;
        errors.extend(other.errors);
        let ops = self.ops + other.ops;
        Round {
            per_s: ops as f64 / elapsed.as_secs_f64(),
            step_p50_us: steps.iter_mut().map(|s| percentile_us(s, 50.0)).collect(),
            busy,
            errors,
            ops,
            elapsed,
            steps,
        }
    }
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
    let ops = shared.ops.load(Ordering::Relaxed);
    Round {
        per_s: ops as f64 / elapsed.as_secs_f64(),
        step_p50_us: steps.iter_mut().map(|s| percentile_us(s, 50.0)).collect(),
        busy: watch.between(&cpu_start, &cpu_end),
        errors,
        ops,
        elapsed,
        steps,
    }
}

/// A connection opened on first use (in the warm-up).
pub struct Lazy {
    base: Arc<str>,
    conn: Option<Conn>,
}

impl Lazy {
    pub fn new(base: &Arc<str>) -> Lazy {
        Lazy {
            base: base.clone(),
            conn: None,
        }
    }

    pub async fn get(&mut self) -> Result<&mut Conn, String> {
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

impl Primitive {
    /// Route prefix and acquire path of its pairs.
    fn route(self) -> (&'static str, &'static str) {
        match self {
            Primitive::Lock => (client::LOCKS, "acquire"),
            Primitive::ReadLock => ("/rwlocks", "read/acquire"),
            Primitive::Semaphore => (SEMAPHORES, "acquire"),
            Primitive::FairLock => (client::FAIR_LOCKS, "acquire"),
        }
    }
}

/// What one round runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Acquire+release pairs over HTTP on the service.
    Http(Primitive),
    /// Script pairs straight on Redis ([`floors`]).
    Floor(Floor),
    /// `GET /` on the bare axum server.
    Bare,
    /// Plain-lock pairs on the bare server's stack floor, over one of
    /// [`STACK_FLOORS`](crate::floors::STACK_FLOORS)'s scripts.
    Stack(Floor),
    /// `GET /healthz` on the service.
    Healthz,
    /// `GET /healthz` on an instance at `LATCHKEY_LOG=warn` (no request
    /// span): not the default, an extra row.
    HealthzWarn,
}

impl Kind {
    /// Every kind, in the order their rounds interleave: the service's
    /// pairs, the floors, the stack floor's pairs, the GETs.
    pub fn all() -> Vec<Kind> {
        (Primitive::ALL.map(Kind::Http).into_iter())
            .chain(Floor::all().map(Kind::Floor))
            .chain(crate::floors::STACK_FLOORS.map(Kind::Stack))
            .chain([Kind::Bare, Kind::Healthz, Kind::HealthzWarn])
            .collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Http(p) => p.name(),
            Kind::Floor(f) => f.name(),
            Kind::Bare => "bare",
            Kind::Stack(Floor::Own(_)) => "axum + redis-rs",
            Kind::Stack(Floor::Redisson(_)) => "axum + redis-rs, Redisson's scripts",
            Kind::Healthz => "healthz",
            Kind::HealthzWarn => "healthz at warn",
        }
    }
}

/// Plain-lock pairs on bare axum + redis-rs with the lock's own scripts.
pub const STACK: Kind = Kind::Stack(Floor::Own(Primitive::Lock));
/// The same with the Redisson-style RLock scripts.
pub const STACK_REDISSON: Kind = Kind::Stack(Floor::Redisson(Redisson::Lock));

/// The floor of a primitive: its own scripts called directly.
pub const fn own(p: Primitive) -> Kind {
    Kind::Floor(Floor::Own(p))
}

/// The acquire's bound at c=1: one bare round trip plus one script call
/// (of the medians, or of one round's figures: [`Row::each_round`]).
pub fn bound_us(r: &Row) -> f64 {
    r.of(Kind::Bare).acquire_p50_us() + r.of(own(Primitive::Lock)).acquire_p50_us()
}

/// Everything a throughput round needs.
pub struct Targets {
    pub latchkey: String,
    /// The same build at `LATCHKEY_LOG=warn` ([`Kind::HealthzWarn`]).
    pub warn: String,
    /// Another build of the service, when one is compared (`LATCHKEY_BENCH_BASELINE`).
    pub baseline: Option<String>,
    pub bare: String,
    /// The floors' one connection.
    pub direct: MultiplexedConnection,
    /// Statistics connection.
    pub admin: Redis,
    /// The cores and processes whose CPU use is reported.
    pub watch: Watch,
}

/// The figures of one kind at one concurrency: the medians over rounds, or
/// one round's.
#[derive(Clone, Debug)]
pub struct Figures {
    /// Operations (pairs, or GETs) per second.
    pub per_s: f64,
    /// p50 µs of the acquire (or the GET) and of the release (NaN for a
    /// GET).
    pub step_p50_us: [f64; 2],
    /// Redis CPU µs per script call (NaN where there was none).
    pub redis_us: f64,
    /// Busy % of each of [`Watch::labels`].
    pub busy: Vec<f64>,
}

/// The figures of a kind that did not run.
static NO_FIGURES: Figures = Figures {
    per_s: f64::NAN,
    step_p50_us: [f64::NAN; 2],
    redis_us: f64::NAN,
    busy: Vec::new(),
};

impl Figures {
    pub fn acquire_p50_us(&self) -> f64 {
        self.step_p50_us[0]
    }

    pub fn release_p50_us(&self) -> f64 {
        self.step_p50_us[1]
    }

    /// Field-wise medians over rounds.
    fn median(rounds: &[Figures]) -> Figures {
        let m = |f: &dyn Fn(&Figures) -> f64| median(rounds.iter().map(f).collect());
        let busy_len = rounds.iter().map(|r| r.busy.len()).max().unwrap_or(0);
        Figures {
            per_s: m(&|r| r.per_s),
            step_p50_us: [0, 1].map(|i| m(&|r| r.step_p50_us[i])),
            redis_us: m(&|r| r.redis_us),
            busy: (0..busy_len)
                .map(|i| m(&|r| r.busy.get(i).copied().unwrap_or(f64::NAN)))
                .collect(),
        }
    }
}

/// One row of results at concurrency `c` (medians over rounds, and each
/// round's figures).
#[derive(Debug)]
pub struct Row {
    pub c: usize,
    /// Every kind of [`Kind::all`], in that order: the medians over rounds.
    pub kinds: Vec<(Kind, Figures)>,
    /// Each round's figures of every kind (as in `kinds`), in round order.
    pub per_round: Vec<Vec<(Kind, Figures)>>,
    pub errors: Vec<String>,
}

impl Row {
    pub fn of(&self, kind: Kind) -> &Figures {
        (self.kinds.iter())
            .find(|(k, _)| *k == kind)
            .map_or(&NO_FIGURES, |(_, f)| f)
    }

    /// Operations per second of `kind`.
    pub fn per_s(&self, kind: Kind) -> f64 {
        self.of(kind).per_s
    }

    /// Each round by itself, in round order: a row at the same concurrency
    /// whose figures are that round's alone (no rounds of its own, no
    /// errors), so that whatever is computed from a row's medians can be
    /// computed from each round's figures the same way.
    pub fn each_round(&self) -> impl Iterator<Item = Row> + '_ {
        self.per_round.iter().map(|kinds| Row {
            c: self.c,
            kinds: kinds.clone(),
            per_round: Vec::new(),
            errors: Vec::new(),
        })
    }
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

/// The one semaphore of the semaphore pairs at concurrency `c`.
fn semaphore_name(c: usize) -> String {
    format!("bench-semaphore-c{c}")
}

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

    /// Acquire+release pairs of `p`: each worker on its own name, but for
    /// semaphores, where every worker (its own holder) takes one permit of
    /// the one semaphore of this concurrency.
    fn primitive_pairs(&self, p: Primitive, c: usize) -> Vec<HttpPair> {
        let (route, acquire) = p.route();
        if p != Primitive::Semaphore {
            return self.http_pairs(c, route, acquire);
        }
        let base: Arc<str> = self.latchkey.as_str().into();
        let name = semaphore_name(c);
        (0..c)
            .map(|i| HttpPair::new(&base, route, &name, acquire, &format!("h{i}")))
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

    fn gets(&self, base: &str, path: &'static str, c: usize) -> Vec<Get> {
        let base: Arc<str> = base.into();
        (0..c)
            .map(|_| Get {
                conn: Lazy::new(&base),
                path,
            })
            .collect()
    }

    /// The semaphores of concurrency `c` (the service's and the floors'),
    /// configured once; every round reuses them (each pair gives its
    /// permit back).
    async fn set_up(&self, c: usize) -> Result<(), String> {
        self.configure_semaphore(&semaphore_name(c)).await?;
        for floor in Floor::all() {
            floor.set_up(&mut self.direct.clone(), c).await?;
        }
        Ok(())
    }

    /// One round of `kind` at concurrency `c`.
    async fn round(&self, kind: Kind, c: usize, timing: Timing) -> Round {
        let watch = &self.watch;
        match kind {
            Kind::Http(p) => drive(self.primitive_pairs(p, c), timing, watch).await,
            Kind::Floor(f) => drive(f.pairs(&self.direct, c), timing, watch).await,
            Kind::Bare => drive(self.gets(&self.bare, "/", c), timing, watch).await,
            Kind::Stack(f) => {
                let pairs = self.http_pairs_on(&self.bare, c, f.stack_route(), "acquire");
                drive(pairs, timing, watch).await
            }
            Kind::Healthz => drive(self.gets(&self.latchkey, "/healthz", c), timing, watch).await,
            Kind::HealthzWarn => drive(self.gets(&self.warn, "/healthz", c), timing, watch).await,
        }
    }

    /// Runs `round` between a stats reset and a read of Redis's CPU time
    /// per script call and the calls it is over (NaN and 0 when there was
    /// none, or the read failed: then the error is kept).
    pub async fn with_redis_cpu(&self, round: impl Future<Output = Round>) -> (Round, RedisCpu) {
        let reset = self.admin.reset_stats().await;
        let mut round = round.await;
        match reset.and(self.admin.scripts().await) {
            Ok(stats) if stats.calls == 0 => (round, RedisCpu::NONE),
            Ok(stats) => (
                round,
                RedisCpu {
                    usec_per_call: stats.usec_per_call,
                    calls: stats.calls,
                },
            ),
            Err(e) => {
                round.errors.push(e);
                (round, RedisCpu::NONE)
            }
        }
    }
}

/// Redis's CPU µs per script call over a measurement, and the calls.
#[derive(Clone, Copy, Debug)]
pub struct RedisCpu {
    pub usec_per_call: f64,
    pub calls: u64,
}

impl RedisCpu {
    const NONE: RedisCpu = RedisCpu {
        usec_per_call: f64::NAN,
        calls: 0,
    };

    /// Over two measurements together.
    fn merge(self, other: RedisCpu) -> RedisCpu {
        match (self.calls, other.calls) {
            (0, _) => other,
            (_, 0) => self,
            (a, b) => RedisCpu {
                usec_per_call: (self.usec_per_call * a as f64 + other.usec_per_call * b as f64)
                    / (a + b) as f64,
                calls: a + b,
            },
        }
    }
}

/// Interleaved rounds of every kind at concurrency `c` (at most
/// [`SEM_PERMITS`]); medians, and each round's figures. A round runs
/// every kind in order, then in reverse, each for half of
/// `timing.measure` (after its own warm-up), and a kind's figures in the
/// round are those of its two halves together.
pub async fn measure(t: &Targets, c: usize, rounds: usize, timing: Timing) -> Row {
    let mut per_kind: BTreeMap<Kind, Vec<Figures>> = BTreeMap::new();
    let mut per_round = Vec::new();
    let mut errors = Vec::new();
    if let Err(e) = t.set_up(c).await {
        errors.push(format!("setting up c={c}: {e}"));
    }
    let kinds = Kind::all();
    let half = Timing {
        warm_up: timing.warm_up,
        measure: timing.measure / 2,
    };
    for _ in 0..rounds {
        let mut halves: BTreeMap<Kind, (Round, RedisCpu)> = BTreeMap::new();
        for &kind in kinds.iter().chain(kinds.iter().rev()) {
            let (round, cpu) = t.with_redis_cpu(t.round(kind, c, half)).await;
            let both = match halves.remove(&kind) {
                Some((first, first_cpu)) => (first.merge(round), first_cpu.merge(cpu)),
                None => (round, cpu),
            };
            halves.insert(kind, both);
        }
        let mut this_round = Vec::new();
        for &kind in &kinds {
            let Some((round, cpu)) = halves.remove(&kind) else {
                continue;
            };
            let step = |i: usize| round.step_p50_us.get(i).copied().unwrap_or(f64::NAN);
            let figures = Figures {
                per_s: round.per_s,
                step_p50_us: [step(0), step(1)],
                redis_us: cpu.usec_per_call,
                busy: round.busy.clone(),
            };
            this_round.push((kind, figures.clone()));
            per_kind.entry(kind).or_default().push(figures);
            let name = kind.name();
            errors.extend(round.errors.iter().map(|e| format!("{name} c={c}: {e}")));
        }
        per_round.push(this_round);
    }
    Row {
        c,
        kinds: (kinds.iter())
            .map(|k| {
                (
                    *k,
                    Figures::median(per_kind.get(k).map_or(&[], Vec::as_slice)),
                )
            })
            .collect(),
        per_round,
        errors,
    }
}
