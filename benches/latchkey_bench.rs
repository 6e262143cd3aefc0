//! latchkey's benchmark: `cargo bench --bench latchkey-bench`.
//!
//! It starts everything itself (one private redis-server, the service
//! in-process on a free port, an HTTP client in the same process) and
//! prints one markdown section with two tables to stdout:
//!
//! 1. **Uncontended throughput.** Acquire+release pairs per second at
//!    concurrency 1, 16 and 64, each task on its own lock name (so no
//!    request ever waits). "HTTP" goes through the full service (`POST
//!    /locks/{name}/acquire` → 201, `DELETE /locks/{name}/holders/{holder}`
//!    → 200); "direct" calls the very same Lua scripts through the library's
//!    plain Rust API ([`Locks`]) on the same Redis, with the same pool size.
//!    Direct is the physical limit of this machine + Redis; HTTP ÷ direct
//!    is what the HTTP layer costs. Target (from the issue): ≥ 0.30 at
//!    concurrency 64.
//! 2. **Handoff latency.** W waiters (8, then 64) fight over one lock with
//!    long-polls; whoever is granted releases at once and polls again. A
//!    handoff is "release reply received by the releaser → next grant
//!    received by its client"; we report p50/p99 of that, and the Redis
//!    commands (all of them, and EVALSHA alone) spent per handoff, read
//!    from `INFO commandstats`. The release reply and the waiter's wake-up
//!    travel in parallel (Redis answers the release and publishes the wake
//!    message in the same script), so that latency can be tiny or even
//!    "negative"; the p99 from the moment the release request was *sent*
//!    is printed next to it as an upper bound. Targets: p99 ≤ 5 ms at 64
//!    waiters, and commands per handoff must not grow with the number of
//!    waiters (no thundering herd): we require the 64/8 ratio to be
//!    ≤ 1.25. (The count per handoff depends on who wins each race of
//!    this non-fair lock, the releaser's next acquire or the woken
//!    waiter, which moves it by up to ~10% between runs; a herd would
//!    scale it ~8×.)
//!
//! Every HTTP status and every library reply is checked. Errors are
//! counted and printed, and any error makes the process exit non-zero
//! (after the tables are printed), so a broken service cannot produce a
//! good-looking number.
//!
//! Caveat printed with the results: the client, the service and Redis
//! all share the machine's cores, so absolute numbers are a lower bound of
//! what a dedicated service host would do; the ratios are the point.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use latchkey::app::Application;
use latchkey::config::Config;
use latchkey::coord::locks::Locks;
use latchkey::coord::{Attempt, AttemptId};
use latchkey::devredis::RedisServer;
use latchkey::metrics::Metrics;
use latchkey::store::{Store, StoreConfig};
use reqwest::StatusCode;
use serde_json::json;
use tokio::task::JoinSet;

/// Redis connections in the pool, for the service and for the direct
/// runs alike (≥ the highest concurrency, so neither is pool-starved).
const POOL_SIZE: usize = 64;
/// Concurrency levels of the uncontended throughput runs.
const CONCURRENCY: [usize; 3] = [1, 16, 64];
/// Waiter counts of the handoff runs.
const WAITERS: [usize; 2] = [8, 64];
/// Discarded start of every handoff run: TCP connects happen here.
const WARM_UP: Duration = Duration::from_millis(500);
/// Each throughput figure is the median of this many rounds, and the
/// rounds of HTTP, direct and the ceiling are interleaved (H D C H D C
/// ...): on a small shared VM the same figure was seen to vary by 2× or
/// more from run to run, and interleaving keeps the three columns of a
/// row measured under the same conditions.
const ROUNDS: usize = 3;
/// Discarded start of every round (connections stay pooled between
/// rounds, so this only lets the tasks get going).
const ROUND_WARM_UP: Duration = Duration::from_millis(300);
/// Measured part of every round.
const MEASURE: Duration = Duration::from_secs(1);
/// How long waiters keep re-acquiring in a handoff run (then they drain).
const HANDOFF_RUN: Duration = Duration::from_secs(4);
/// Lease of every grant: long enough that no lease ever expires mid-run,
/// so every handoff is a release followed by a grant.
const LEASE_MS: u64 = 30_000;
/// Long-poll budget of a handoff waiter: far longer than a run.
const WAIT_MS: u64 = 30_000;
/// A whole handoff run (including the drain) must finish within this.
const HANDOFF_DEADLINE: Duration = Duration::from_secs(60);
/// Targets stated in the issue.
const TARGET_RATIO_AT_64: f64 = 0.30;
const TARGET_P99_MS_AT_64: f64 = 5.0;
/// See the module docs: run-to-run noise is ~10%, a herd would be ~8×.
const TARGET_CMD_GROWTH: f64 = 1.25;

fn main() -> ExitCode {
    // The Redis child must be spawned from the main thread: devredis ties
    // its PR_SET_PDEATHSIG to the spawning thread, and a runtime worker
    // thread may exit mid-run. The handle lives until the very end.
    let redis = match RedisServer::start() {
        Ok(redis) => redis,
        Err(e) => {
            eprintln!("benchmark: cannot start redis-server: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("cannot build the tokio runtime");
    let result = runtime.block_on(bench(redis.url()));
    runtime.shutdown_timeout(Duration::from_secs(2));
    // Dropped last: every task that talked to it is gone.
    drop(redis);
    match result {
        Ok(errors) if errors.is_empty() => ExitCode::SUCCESS,
        Ok(errors) => {
            eprintln!("benchmark FAILED: {} error(s):", errors.len());
            for e in errors {
                eprintln!("  - {e}");
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("benchmark FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs every measurement, prints the tables, and returns the errors seen
/// (empty = clean run). `Err` is for set-up failures.
async fn bench(redis_url: String) -> Result<Vec<String>, String> {
    // Anything else running on the machine skews every number: say so.
    let load_before = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    let config = Config {
        listen: "127.0.0.1:0".parse().expect("an address"),
        redis_urls: vec![redis_url],
        log: "warn".into(),
        max_waiters: 100_000,
        redis_pool_size: POOL_SIZE,
        ..Config::default()
    };
    config.validate().map_err(|e| e.to_string())?;

    // The direct path: the same scripts through the plain Rust API, over a
    // store built exactly as the service builds its own.
    let store = Store::open(&StoreConfig::from_config(&config), Metrics::new()).await?;
    let locks = Locks::new(store.clone());

    let app = Application::build(config).await?;
    let base = format!("http://127.0.0.1:{}", app.port());
    let shutdown = app.shutdown_token();
    let server = tokio::spawn(app.run());

    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .tcp_nodelay(true)
        // Longer than any long-poll: a hung request fails, not the bench.
        .timeout(Duration::from_secs(45))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;

    let redis_version = info_field(&store, "server", "redis_version")
        .await
        .unwrap_or_else(|| "unknown".into());

    let mut errors = Vec::new();

    let mut throughput = Vec::new();
    for c in CONCURRENCY {
        let (mut http, mut direct, mut ceiling) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            http.push(http_pairs(&client, &base, c).await);
            direct.push(direct_pairs(&locks, c).await);
            ceiling.push(healthz_pairs(&client, &base, c).await);
        }
        let (http, direct, ceiling) = (median(http), median(direct), median(ceiling));
        errors.extend(http.errors.iter().map(|e| format!("HTTP c={c}: {e}")));
        errors.extend(direct.errors.iter().map(|e| format!("direct c={c}: {e}")));
        errors.extend(ceiling.errors.iter().map(|e| format!("healthz c={c}: {e}")));
        throughput.push((c, http, direct, ceiling));
    }

    let mut handoffs = Vec::new();
    for w in WAITERS {
        let run = handoff(&client, &base, &store, w).await;
        errors.extend(run.errors.iter().map(|e| format!("handoff W={w}: {e}")));
        if run.timeouts > 0 {
            errors.push(format!(
                "handoff W={w}: {} long-poll(s) timed out with 409",
                run.timeouts
            ));
        }
        handoffs.push((w, run));
    }

    // Clean shutdown: cancel, then wait for the server to drain.
    shutdown.cancel();
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => errors.push(format!("server ended with an error: {e}")),
        Err(e) => errors.push(format!("server task failed: {e}")),
    }

    print_report(
        &load_before,
        &redis_version,
        &throughput,
        &handoffs,
        errors.len(),
    );
    Ok(errors)
}

// ---------------------------------------------------------------------------
// 1. Uncontended throughput
// ---------------------------------------------------------------------------

/// One throughput run: completed pairs per second over [`MEASURE`], and
/// every error (each task stops at its first one).
struct Rate {
    pairs_per_s: f64,
    errors: Vec<String>,
}

/// Shared by the tasks of one throughput run.
#[derive(Default)]
struct Counters {
    pairs: AtomicU64,
    stop: AtomicBool,
}

/// The median rate of some rounds, with every round's errors.
fn median(mut rounds: Vec<Rate>) -> Rate {
    rounds.sort_by(|a, b| a.pairs_per_s.total_cmp(&b.pairs_per_s));
    let errors = rounds.iter().flat_map(|r| r.errors.clone()).collect();
    Rate {
        pairs_per_s: rounds[rounds.len() / 2].pairs_per_s,
        errors,
    }
}

/// Lets `tasks` warm up, counts the pairs they complete during
/// [`MEASURE`], stops them and collects their errors.
async fn timed(counters: &Counters, mut tasks: JoinSet<Result<(), String>>) -> Rate {
    tokio::time::sleep(ROUND_WARM_UP).await;
    let (start, before) = (Instant::now(), counters.pairs.load(Ordering::Relaxed));
    tokio::time::sleep(MEASURE).await;
    let (elapsed, after) = (start.elapsed(), counters.pairs.load(Ordering::Relaxed));
    counters.stop.store(true, Ordering::Relaxed);
    let mut errors = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(format!("task panicked: {e}")),
        }
    }
    Rate {
        pairs_per_s: (after - before) as f64 / elapsed.as_secs_f64(),
        errors,
    }
}

/// HTTP: `c` tasks, each on its own lock, loop acquire (expect 201) and
/// release (expect 200) through the service.
async fn http_pairs(client: &reqwest::Client, base: &str, c: usize) -> Rate {
    let counters = Arc::new(Counters::default());
    let mut tasks = JoinSet::new();
    for i in 0..c {
        let (client, counters) = (client.clone(), counters.clone());
        let name = format!("bench-http-c{c}-{i}");
        let holder = format!("h{i}");
        let acquire_url = format!("{base}/locks/{name}/acquire");
        let release_url = format!("{base}/locks/{name}/holders/{holder}");
        let body = json!({ "holder": holder, "lease_ms": LEASE_MS });
        tasks.spawn(async move {
            while !counters.stop.load(Ordering::Relaxed) {
                let acquired = client.post(&acquire_url).json(&body).send().await;
                expect_status(acquired, StatusCode::CREATED, "acquire").await?;
                let released = client.delete(&release_url).send().await;
                expect_status(released, StatusCode::OK, "release").await?;
                counters.pairs.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        });
    }
    timed(&counters, tasks).await
}

/// The HTTP stack's ceiling on this machine: the same client and server
/// answering two `GET /healthz` per "pair", which touch no Redis. HTTP lock
/// pairs can't be faster than this; the gap to it is latchkey's own work.
async fn healthz_pairs(client: &reqwest::Client, base: &str, c: usize) -> Rate {
    let counters = Arc::new(Counters::default());
    let mut tasks = JoinSet::new();
    for _ in 0..c {
        let (client, counters) = (client.clone(), counters.clone());
        let url = format!("{base}/healthz");
        tasks.spawn(async move {
            while !counters.stop.load(Ordering::Relaxed) {
                expect_status(client.get(&url).send().await, StatusCode::OK, "healthz").await?;
                expect_status(client.get(&url).send().await, StatusCode::OK, "healthz").await?;
                counters.pairs.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        });
    }
    timed(&counters, tasks).await
}

/// Direct: `c` tasks, each on its own lock, loop `try_acquire` (expect a
/// grant) and `release` (expect "freed") on the library API.
async fn direct_pairs(locks: &Locks, c: usize) -> Rate {
    let counters = Arc::new(Counters::default());
    let mut tasks = JoinSet::new();
    for i in 0..c {
        let (locks, counters) = (locks.clone(), counters.clone());
        let name = format!("bench-direct-c{c}-{i}");
        let holder = format!("h{i}");
        tasks.spawn(async move {
            while !counters.stop.load(Ordering::Relaxed) {
                match locks
                    .try_acquire(&name, &holder, LEASE_MS, &AttemptId::new())
                    .await
                {
                    Ok(Attempt::Granted(_)) => {}
                    Ok(Attempt::Blocked(b)) => return Err(format!("acquire blocked: {b:?}")),
                    Err(e) => return Err(format!("acquire: {e}")),
                }
                match locks.release(&name, &holder, false).await {
                    Ok(Some(r)) if r.released => {}
                    other => return Err(format!("release: {other:?}")),
                }
                counters.pairs.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        });
    }
    timed(&counters, tasks).await
}

/// Reads the whole body (so the connection goes back to the pool) and
/// checks the status; the error names the call, status and body.
async fn expect_status(
    response: reqwest::Result<reqwest::Response>,
    want: StatusCode,
    what: &str,
) -> Result<(), String> {
    let response = response.map_err(|e| format!("{what}: request failed: {e}"))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("{what}: reading the body failed: {e}"))?;
    if status != want {
        return Err(format!(
            "{what}: expected {want}, got {status}: {}",
            String::from_utf8_lossy(&body)
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// 2. Handoff latency and Redis commands per handoff
// ---------------------------------------------------------------------------

/// What one handoff run measured.
struct HandoffRun {
    /// Handoffs whose latency is in the percentiles (after the warm-up).
    measured: usize,
    /// Every handoff of the run (the divisor of commands per handoff).
    total: usize,
    /// Handoffs per second over the whole run.
    per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// p99 measured from when the release request was *sent*: an upper
    /// bound that includes the release's own round trip.
    p99_from_sent_ms: f64,
    /// Share of handoffs in which the releaser itself won the lock again
    /// (the lock is not fair: its next acquire races the woken waiter).
    rewon: f64,
    /// Handoffs whose grant reached its client before the previous
    /// holder's release reply reached the releaser (counted as 0 ms).
    reordered: usize,
    commands_per: f64,
    evalsha_per: f64,
    /// Long-polls that ended in 409 (must be 0: wait_ms ≫ the run).
    timeouts: u64,
    errors: Vec<String>,
}

/// One entry of the shared log, keyed by fencing token: tokens strictly
/// increase per lock, so grant `t + 1` is exactly the handoff from the
/// holder of grant `t`, whatever order the replies reached the client in.
#[derive(Clone, Copy)]
enum Event {
    /// A 201 with `token` reached waiter `task`.
    Granted { token: u64, task: usize },
    /// The release of token `t` is about to be sent.
    ReleaseSent(u64),
    /// The 200 of the release of token `t` reached the releaser.
    Released(u64),
}

/// The shared, mutex-protected, time-ordered log: each instant is taken
/// under the lock, so the vector's order is the instants' order.
#[derive(Default)]
struct Log(Mutex<Vec<(Event, Instant)>>);

impl Log {
    fn record(&self, event: Event) {
        let mut log = self.0.lock().expect("handoff log poisoned");
        log.push((event, Instant::now()));
    }
}

/// W waiters on one lock: each long-polls an acquire, logs the grant,
/// releases at once, logs the release reply, and polls again, until
/// [`HANDOFF_RUN`] has passed. Then each waiter finishes its current
/// round (so nobody is left waiting) and stops.
async fn handoff(client: &reqwest::Client, base: &str, store: &Store, w: usize) -> HandoffRun {
    let log = Arc::new(Log::default());
    let stop = Arc::new(AtomicBool::new(false));
    let timeouts = Arc::new(AtomicU64::new(0));
    let name = format!("bench-handoff-w{w}");
    let acquire_url = format!("{base}/locks/{name}/acquire");
    let mut errors = Vec::new();

    let before = match command_stats(store).await {
        Ok(stats) => stats,
        Err(e) => return HandoffRun::failed(e),
    };
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for i in 0..w {
        let (client, log, stop, timeouts) =
            (client.clone(), log.clone(), stop.clone(), timeouts.clone());
        let acquire_url = acquire_url.clone();
        let holder = format!("w{w}-t{i}");
        let release_url = format!("{base}/locks/{name}/holders/{holder}");
        let body = json!({ "holder": holder, "wait_ms": WAIT_MS, "lease_ms": LEASE_MS });
        tasks.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let response = client
                    .post(&acquire_url)
                    .json(&body)
                    .send()
                    .await
                    .map_err(|e| format!("acquire: request failed: {e}"))?;
                let status = response.status();
                let text = response
                    .text()
                    .await
                    .map_err(|e| format!("acquire: reading the body failed: {e}"))?;
                if status == StatusCode::CONFLICT {
                    // The long-poll ran out: not expected, counted, retried.
                    timeouts.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                if status != StatusCode::CREATED {
                    return Err(format!("acquire: expected 201, got {status}: {text}"));
                }
                let token = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|grant| grant["fencing_token"].as_u64())
                    .ok_or_else(|| format!("acquire: no fencing_token in {text}"))?;
                log.record(Event::Granted { token, task: i });
                log.record(Event::ReleaseSent(token));
                let released = client.delete(&release_url).send().await;
                expect_status(released, StatusCode::OK, "release").await?;
                log.record(Event::Released(token));
            }
            Ok::<(), String>(())
        });
    }

    tokio::time::sleep(HANDOFF_RUN).await;
    stop.store(true, Ordering::Relaxed);
    let drained = tokio::time::timeout(HANDOFF_DEADLINE, async {
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(e),
                Err(e) => errors.push(format!("task panicked: {e}")),
            }
        }
    })
    .await;
    if drained.is_err() {
        errors.push(format!(
            "waiters still running {HANDOFF_DEADLINE:?} after the stop"
        ));
        tasks.abort_all();
    }
    let elapsed = started.elapsed();
    let after = match command_stats(store).await {
        Ok(stats) => stats,
        Err(e) => return HandoffRun::failed(e),
    };

    // Pair release of token t with grant of token t + 1.
    let log = std::mem::take(&mut *log.0.lock().expect("handoff log poisoned"));
    let mut grants = HashMap::new();
    let mut sent = HashMap::new();
    let mut releases = HashMap::new();
    for (event, at) in &log {
        match *event {
            Event::Granted { token, task } => {
                grants.insert(token, (*at, task));
            }
            Event::ReleaseSent(t) => {
                sent.insert(t, *at);
            }
            Event::Released(t) => {
                releases.insert(t, *at);
            }
        }
    }
    let measured_from = started + WARM_UP;
    let (mut latencies, mut from_sent) = (Vec::new(), Vec::new());
    let (mut total, mut reordered, mut rewon) = (0, 0, 0);
    for (token, released) in &releases {
        let Some(&(granted, next_task)) = grants.get(&(token + 1)) else {
            continue; // the last release of the run: nobody was waiting
        };
        total += 1;
        if grants
            .get(token)
            .is_some_and(|&(_, task)| task == next_task)
        {
            rewon += 1;
        }
        let latency = granted
            .checked_duration_since(*released)
            .unwrap_or_else(|| {
                reordered += 1;
                Duration::ZERO
            });
        if *released >= measured_from {
            latencies.push(latency);
            let sent = sent.get(token).copied().unwrap_or(*released);
            from_sent.push(granted.saturating_duration_since(sent));
        }
    }
    latencies.sort_unstable();
    from_sent.sort_unstable();

    // Every command Redis executed during the run (scripts' inner calls,
    // the hub's PING and the PUBLISHes included), minus our own INFOs.
    let delta = |name: &str| {
        after
            .get(name)
            .copied()
            .unwrap_or(0)
            .saturating_sub(before.get(name).copied().unwrap_or(0))
    };
    let commands: u64 = after
        .keys()
        .filter(|name| name.as_str() != "info")
        .map(|name| delta(name))
        .sum();
    let per = |n: u64| {
        if total == 0 {
            f64::NAN
        } else {
            n as f64 / total as f64
        }
    };
    if total == 0 {
        errors.push("no handoff happened".into());
    }
    HandoffRun {
        measured: latencies.len(),
        total,
        per_s: total as f64 / elapsed.as_secs_f64(),
        p50_ms: percentile_ms(&latencies, 50.0),
        p99_ms: percentile_ms(&latencies, 99.0),
        p99_from_sent_ms: percentile_ms(&from_sent, 99.0),
        rewon: rewon as f64 / total.max(1) as f64,
        reordered,
        commands_per: per(commands),
        evalsha_per: per(delta("evalsha")),
        timeouts: timeouts.load(Ordering::Relaxed),
        errors,
    }
}

impl HandoffRun {
    fn failed(error: String) -> Self {
        HandoffRun {
            measured: 0,
            total: 0,
            per_s: 0.0,
            p50_ms: f64::NAN,
            p99_ms: f64::NAN,
            p99_from_sent_ms: f64::NAN,
            rewon: 0.0,
            reordered: 0,
            commands_per: f64::NAN,
            evalsha_per: f64::NAN,
            timeouts: 0,
            errors: vec![error],
        }
    }
}

/// Nearest-rank percentile of sorted latencies, in ms (NaN when empty).
fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let index = rank.clamp(1, sorted.len()) - 1;
    sorted[index].as_secs_f64() * 1000.0
}

/// `INFO commandstats` as command → calls.
async fn command_stats(store: &Store) -> Result<HashMap<String, u64>, String> {
    let text = info(store, "commandstats").await?;
    let mut stats = HashMap::new();
    for line in text.lines() {
        // cmdstat_evalsha:calls=12,usec=34,usec_per_call=2.83,rejected_calls=0,failed_calls=0
        let Some((name, fields)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let calls = fields
            .split(',')
            .find_map(|field| field.strip_prefix("calls="))
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| format!("cannot parse INFO commandstats line {line:?}"))?;
        stats.insert(name.to_string(), calls);
    }
    Ok(stats)
}

async fn info(store: &Store, section: &str) -> Result<String, String> {
    let mut cmd = redis::cmd("INFO");
    cmd.arg(section);
    store
        .raw::<String>(&cmd)
        .await
        .map_err(|e| format!("INFO {section}: {e}"))
}

async fn info_field(store: &Store, section: &str, field: &str) -> Option<String> {
    let text = info(store, section).await.ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

fn met(ok: bool) -> &'static str {
    if ok { "yes" } else { "**no**" }
}

fn print_report(
    load_before: &str,
    redis_version: &str,
    throughput: &[(usize, Rate, Rate, Rate)],
    handoffs: &[(usize, HandoffRun)],
    error_count: usize,
) {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("### latchkey benchmark");
    println!();
    println!(
        "nproc {nproc} (1-min load average {load_before} before the run), redis-server {redis_version} on \
         loopback, Redis pool {POOL_SIZE} connections (service and direct); client, service \
         and Redis share the cores. Errors: {error_count}."
    );
    println!();
    println!(
        "Uncontended acquire+release pairs/s (median of {ROUNDS} interleaved rounds of \
         {MEASURE:?} after {ROUND_WARM_UP:?} warm-up; each task on its own lock):"
    );
    println!();
    println!(
        "| concurrency | HTTP pairs/s | direct pairs/s | HTTP ÷ direct | target | met \
         | HTTP ceiling: /healthz pairs/s (no Redis) | HTTP ÷ ceiling |"
    );
    println!("|---:|---:|---:|---:|---|---|---:|---:|");
    for (c, http, direct, ceiling) in throughput {
        let ratio = http.pairs_per_s / direct.pairs_per_s;
        let (target, ok) = if *c == 64 {
            (
                format!("≥ {TARGET_RATIO_AT_64:.2}"),
                met(ratio >= TARGET_RATIO_AT_64),
            )
        } else {
            ("—".to_string(), "")
        };
        println!(
            "| {c} | {:.0} | {:.0} | {ratio:.2} | {target} | {ok} | {:.0} | {:.2} |",
            http.pairs_per_s,
            direct.pairs_per_s,
            ceiling.pairs_per_s,
            http.pairs_per_s / ceiling.pairs_per_s
        );
    }
    println!();
    println!(
        "Lock handoff over HTTP long-polls (release reply → next grant; {HANDOFF_RUN:?} per run, \
         percentiles after {WARM_UP:?}); Redis commands from INFO commandstats:"
    );
    println!();
    println!(
        "| waiters | handoffs (measured) | handoffs/s | p50 ms | p99 ms \
         | p99 ms from release sent | Redis cmds/handoff | EVALSHA/handoff | 409s | target | met |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|");
    for (w, run) in handoffs {
        let (target, ok) = if *w == 64 {
            (
                format!("p99 ≤ {TARGET_P99_MS_AT_64:.0} ms"),
                met(run.p99_ms <= TARGET_P99_MS_AT_64),
            )
        } else {
            ("—".to_string(), "")
        };
        println!(
            "| {w} | {} ({}) | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {target} | {ok} |",
            run.total,
            run.measured,
            run.per_s,
            run.p50_ms,
            run.p99_ms,
            run.p99_from_sent_ms,
            run.commands_per,
            run.evalsha_per,
            run.timeouts,
        );
    }
    let by_waiters = |w: usize| handoffs.iter().find(|(n, _)| *n == w).map(|(_, r)| r);
    if let (Some(few), Some(many)) = (by_waiters(8), by_waiters(64)) {
        let growth = many.commands_per / few.commands_per;
        let evalsha_growth = many.evalsha_per / few.evalsha_per;
        println!(
            "| 64 ÷ 8 | | | | | | {growth:.2} | {evalsha_growth:.2} | | cmds ≤ {TARGET_CMD_GROWTH:.2}× \
             (no herd) | {} |",
            met(growth <= TARGET_CMD_GROWTH)
        );
    }
    println!();
    for (w, run) in handoffs {
        println!(
            "- {w} waiters: the releaser itself re-won {:.0}% of handoffs (not a fair lock); \
             {} grant(s) reached the new holder before the old holder's release reply \
             (counted as 0 ms).",
            run.rewon * 100.0,
            run.reordered
        );
    }
}
