//! Handoff latency, on a plain lock (`/locks`) and on a fair lock
//! (`/fair-locks`). W waiters (8, then 64) fight over one lock with
//! long-polls; whoever is granted releases at once and polls again with
//! the same holder (on the fair lock that is a new place at the tail of
//! the queue, so the releaser should never re-win). A handoff is "release
//! reply received by the releaser → next grant received by its client",
//! paired by fencing token (tokens strictly increase per lock, so grant
//! `t + 1` is the handoff from the holder of grant `t`, whatever order the
//! replies arrived in). The release reply and the waiter's wake-up travel
//! in parallel (Redis answers the release and publishes the wake message
//! in the same script), so that latency can be tiny or "negative" (counted
//! as 0); the p99 from the moment the release was *sent* is kept as an
//! upper bound. Redis commands per handoff (`total_commands_processed`,
//! script-internal calls included, over the handoffs of the run) must not
//! grow with W, for either kind: no thundering herd. The plain lock's
//! floor is the same handoff done straight on Redis with one wake-up per
//! release ([`wakeone`]), logged and paired the same way; its HTTP ceiling
//! is the bare axum handoff (the bare server's in-memory lock, whose
//! release wakes one parked request: the HTTP hops of a handoff and
//! nothing else), and its stack floor the stack handoff (the same
//! long-polls on the bare server's stack floor: axum, redis-rs, the lock's
//! own scripts and one pub/sub wake-up per release, on the service's
//! core), both logged and paired the same way. The runs interleave (plain
//! W₁ W₂, fair W₁ W₂, floor W₁ W₂, bare W₁ W₂, stack W₁ W₂, plain W₁ …),
//! each on a fresh lock name; a row's figures are medians over rounds, and
//! each round's p99 is kept too (round i of every kind in the same pass).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use reqwest::StatusCode;
use tokio::task::JoinSet;

use crate::client;
use crate::handofflog::{Event, Shared};
use crate::redisinfo::Redis;
use crate::stats::{median, percentile};
use crate::tasks::join_all;
use crate::wakeone;

/// Long-poll budget of a waiter: far longer than a run.
const WAIT_MS: u64 = 30_000;
/// A run (including the drain) must finish within this after its stop.
const DRAIN_DEADLINE: Duration = Duration::from_secs(60);

/// Length of a run and its discarded start (TCP connects happen there).
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub run: Duration,
    pub warm_up: Duration,
}

/// Which lock the waiters fight over, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Plain,
    Fair,
    /// The same handoff straight on Redis, the plain lock's floor
    /// ([`wakeone`]).
    Floor,
    /// The bare axum handoff: HTTP only, on the bare server.
    Bare,
    /// The stack handoff: the plain lock's long-polls on the bare
    /// server's stack floor (axum + redis-rs + pub/sub).
    Stack,
}

impl Kind {
    /// Every kind, in the order their runs interleave.
    pub const ALL: [Kind; 5] = [
        Kind::Plain,
        Kind::Fair,
        Kind::Floor,
        Kind::Bare,
        Kind::Stack,
    ];

    /// The route prefix of its operations (None: not over HTTP).
    fn route(self) -> Option<&'static str> {
        match self {
            Kind::Plain | Kind::Stack => Some(client::LOCKS),
            Kind::Fair => Some(client::FAIR_LOCKS),
            Kind::Floor | Kind::Bare => None,
        }
    }

    /// A short name for lock names and error messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Fair => "fair",
            Kind::Floor => "floor",
            Kind::Bare => "bare",
            Kind::Stack => "stack",
        }
    }
}

/// Where the HTTP waiters send their requests.
struct Http {
    client: reqwest::Client,
    base: String,
    route: &'static str,
    name: String,
}

/// One waiter: acquire (long-poll), log, release, log, until stopped.
async fn waiter(w: Arc<Shared>, http: Arc<Http>, task: usize) -> Result<(), String> {
    let holder = format!("t{task}");
    let (base, route, name) = (http.base.as_str(), http.route, http.name.as_str());
    let client = &http.client;
    while !w.stop.is_cancelled() {
        let response = client::acquire(client, base, route, name, &holder, WAIT_MS)
            .send()
            .await
            .map_err(|e| format!("acquire: request failed: {e}"))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| format!("acquire body: {e}"))?;
        if status == StatusCode::CONFLICT {
            w.timeouts.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if status != StatusCode::CREATED {
            return Err(format!("acquire: expected 201, got {status}: {text}"));
        }
        let token = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|grant| grant["fencing_token"].as_u64())
            .ok_or_else(|| format!("acquire: no fencing_token in {text}"))?;
        w.log.record(Event::Granted { token, task });
        w.log.record(Event::ReleaseSent(token));
        client::release(client, base, route, name, &holder).await?;
        w.log.record(Event::Released(token));
    }
    Ok(())
}

/// One waiter of the bare handoff: acquire (parked until the lock is
/// free), log, release, log, until stopped. The grant's number stands for
/// the fencing token.
async fn bare_waiter(
    w: Arc<Shared>,
    (client, base): (reqwest::Client, Arc<str>),
    task: usize,
) -> Result<(), String> {
    let get = |what: &'static str| {
        let (client, url) = (client.clone(), format!("{base}/handoff/{what}"));
        async move {
            let response = (client.get(&url).send().await)
                .map_err(|e| format!("bare {what}: request failed: {e}"))?;
            let status = response.status();
            let text = (response.text().await).map_err(|e| format!("bare {what} body: {e}"))?;
            if status != StatusCode::OK {
                return Err(format!("bare {what}: expected 200, got {status}: {text}"));
            }
            Ok(text)
        }
    };
    while !w.stop.is_cancelled() {
        let text = get("acquire").await?;
        let token: u64 = (text.parse()).map_err(|_| format!("bare acquire answered {text}"))?;
        w.log.record(Event::Granted { token, task });
        w.log.record(Event::ReleaseSent(token));
        let released = get("release").await?;
        if released != "released" {
            return Err(format!("bare release answered {released}"));
        }
        w.log.record(Event::Released(token));
    }
    Ok(())
}

/// Handoffs paired up from the log.
#[derive(Default)]
struct Pairing {
    latencies: Vec<Duration>,
    from_sent: Vec<Duration>,
    total: usize,
    rewon: usize,
    reordered: usize,
}

/// Pairs the release of token t with the grant of token t + 1; only
/// releases after `measured_from` enter the percentiles.
fn pair(log: &[(Event, Instant)], measured_from: Instant) -> Pairing {
    let (mut grants, mut sent, mut releases) = (HashMap::new(), HashMap::new(), Vec::new());
    for &(event, at) in log {
        match event {
            Event::Granted { token, task } => drop(grants.insert(token, (at, task))),
            Event::ReleaseSent(t) => drop(sent.insert(t, at)),
            Event::Released(t) => releases.push((t, at)),
        }
    }
    let mut p = Pairing::default();
    for (token, released) in releases {
        let Some(&(granted, next_task)) = grants.get(&(token + 1)) else {
            continue; // the last release of the run: nobody was waiting
        };
        p.total += 1;
        p.rewon += usize::from(grants.get(&token).is_some_and(|&(_, t)| t == next_task));
        let latency = granted.checked_duration_since(released).unwrap_or_else(|| {
            p.reordered += 1;
            Duration::ZERO
        });
        if released >= measured_from {
            p.latencies.push(latency);
            let sent = sent.get(&token).copied().unwrap_or(released);
            p.from_sent.push(granted.saturating_duration_since(sent));
        }
    }
    p.latencies.sort_unstable();
    p.from_sent.sort_unstable();
    p
}

/// One run's figures (ms; per handoff).
struct Run {
    p50_ms: f64,
    p99_ms: f64,
    p99_from_sent_ms: f64,
    commands_per: f64,
    evalsha_per: f64,
    handoffs: usize,
    rewon: f64,
    reordered: usize,
}

fn ms(d: Option<Duration>) -> f64 {
    d.map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

/// Where the waiters go: the service over HTTP, or Redis (the floor).
pub struct Setup {
    pub client: reqwest::Client,
    /// The service's base URL.
    pub base: String,
    /// Statistics connection.
    pub admin: Redis,
    /// The floor's Redis: its URL (for the pub/sub connection) and the
    /// scripts' shared connection.
    pub redis_url: String,
    pub direct: MultiplexedConnection,
    /// The bare server's base URL (the bare and the stack handoffs).
    pub bare: String,
}

/// Spawns a run's waiters (and the floor's subscriber) on `tasks`.
async fn spawn(
    setup: &Setup,
    shared: &Arc<Shared>,
    tasks: &mut JoinSet<Result<(), String>>,
    (kind, name, waiters): (Kind, String, usize),
) -> Result<(), String> {
    if kind == Kind::Bare {
        // One lock per bare server: the runs do not overlap.
        let base: Arc<str> = Arc::from(setup.bare.as_str());
        for task in 0..waiters {
            let http = (setup.client.clone(), base.clone());
            tasks.spawn(bare_waiter(shared.clone(), http, task));
        }
        return Ok(());
    }
    let Some(route) = kind.route() else {
        let redis = (setup.redis_url.as_str(), &setup.direct);
        return wakeone::spawn(tasks, shared, redis, name, waiters).await;
    };
    let base = if kind == Kind::Stack {
        &setup.bare
    } else {
        &setup.base
    };
    let http = Arc::new(Http {
        client: setup.client.clone(),
        base: base.clone(),
        route,
        name,
    });
    for task in 0..waiters {
        tasks.spawn(waiter(shared.clone(), http.clone(), task));
    }
    Ok(())
}

/// One run with `waiters` waiters on the lock of `kind` called `name`;
/// every error is pushed.
async fn run(
    setup: &Setup,
    lock: (Kind, String, usize),
    timing: Timing,
    errors: &mut Vec<String>,
) -> Result<Run, String> {
    let (shared, admin) = (Arc::new(Shared::default()), &setup.admin);
    let kind = lock.0;
    admin.reset_stats().await?;
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    let spawned = spawn(setup, &shared, &mut tasks, lock).await;
    if spawned.is_ok() {
        tokio::time::sleep(timing.run).await;
    }
    shared.stop.cancel();
    join_all(&mut tasks, DRAIN_DEADLINE, errors).await;
    spawned?;
    let (commands, evalsha) = (admin.total_commands().await?, admin.scripts().await?);
    let timeouts = shared.timeouts.load(Ordering::Relaxed);
    if timeouts > 0 {
        errors.push(match kind {
            Kind::Floor => format!(
                "{timeouts} grant(s) after a waiter looked by itself ({:?} without a wake-up)",
                wakeone::RECHECK
            ),
            _ => format!("{timeouts} long-poll(s) timed out with 409"),
        });
    }
    let log = std::mem::take(&mut *shared.log.0.lock().expect("handoff log poisoned"));
    let p = pair(&log, started + timing.warm_up);
    if p.total == 0 {
        return Err("no handoff happened".into());
    }
    let per = |n: u64| n as f64 / p.total as f64;
    Ok(Run {
        p50_ms: ms(percentile(&p.latencies, 50.0)),
        p99_ms: ms(percentile(&p.latencies, 99.0)),
        p99_from_sent_ms: ms(percentile(&p.from_sent, 99.0)),
        commands_per: per(commands),
        evalsha_per: per(evalsha.calls),
        handoffs: p.total,
        rewon: p.rewon as f64 / p.total as f64,
        reordered: p.reordered,
    })
}

/// Medians over rounds for one kind and waiter count.
#[derive(Debug)]
pub struct Row {
    pub kind: Kind,
    pub waiters: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Each round's p99 (NaN where its run failed), in round order.
    pub p99_ms_rounds: Vec<f64>,
    pub p99_from_sent_ms: f64,
    pub commands_per: f64,
    pub evalsha_per: f64,
    pub handoffs: f64,
    pub rewon: f64,
    pub reordered: f64,
    pub errors: Vec<String>,
}

/// Interleaved rounds (plain W₁ W₂, fair W₁ W₂, floor W₁ W₂, plain W₁ …)
/// of every kind and waiter count; one row each, in [`Kind::ALL`] order.
pub async fn measure(
    setup: &Setup,
    waiter_counts: &[usize],
    rounds: usize,
    timing: Timing,
) -> Vec<Row> {
    let cases: Vec<(Kind, usize)> = (Kind::ALL.iter())
        .flat_map(|&kind| waiter_counts.iter().map(move |&w| (kind, w)))
        .collect();
    let mut runs: Vec<Vec<Run>> = cases.iter().map(|_| Vec::new()).collect();
    // Every round's p99, NaN for a failed run: round i stays at index i.
    let mut p99s: Vec<Vec<f64>> = cases.iter().map(|_| Vec::new()).collect();
    let mut errors: Vec<Vec<String>> = cases.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for (i, &(kind, w)) in cases.iter().enumerate() {
            let kind_name = kind.name();
            let lock = (kind, format!("bench-handoff-{kind_name}-w{w}-r{round}"), w);
            let mut errs = Vec::new();
            match run(setup, lock, timing, &mut errs).await {
                Ok(r) => {
                    p99s[i].push(r.p99_ms);
                    runs[i].push(r);
                }
                Err(e) => {
                    p99s[i].push(f64::NAN);
                    errs.push(e);
                }
            }
            let what = format!("handoff {kind_name} W={w}");
            errors[i].extend(errs.into_iter().map(|e| format!("{what}: {e}")));
        }
    }
    let rows = cases.into_iter().zip(runs).zip(p99s).zip(errors);
    rows.map(|((((kind, waiters), runs), p99_ms_rounds), errors)| {
        let m = |f: fn(&Run) -> f64| median(runs.iter().map(f).collect());
        Row {
            kind,
            waiters,
            p50_ms: m(|r| r.p50_ms),
            p99_ms: m(|r| r.p99_ms),
            p99_ms_rounds,
            p99_from_sent_ms: m(|r| r.p99_from_sent_ms),
            commands_per: m(|r| r.commands_per),
            evalsha_per: m(|r| r.evalsha_per),
            handoffs: m(|r| r.handoffs as f64),
            rewon: m(|r| r.rewon),
            reordered: m(|r| r.reordered as f64),
            errors,
        }
    })
    .collect()
}
