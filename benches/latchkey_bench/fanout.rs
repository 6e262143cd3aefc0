//! Latch fan-out: W waiters (100) long-poll `/latches/{name}/wait`, spread
//! evenly over two service instances on the same Redis; the latch is set
//! to 1 and counted down once. A fan-out's latency is "count-down reply
//! received → the last of the W waiters answered" (the reply and the
//! wake-up travel in parallel, so a waiter answered before the reply counts
//! as 0); the upper bound from the count-down *sent* is kept too. Redis
//! commands per fan-out (`total_commands_processed` from just before the
//! count-down until every waiter answered; the count-down script's own
//! commands and one INFO included) must not grow with the waiters: every
//! waiter answers from the count-down's message, with no read.
//!
//! Each fan-out uses a fresh latch; before the count-down, every waiter
//! must be parked on its instance (its `latchkey_waiters` gauge) and past
//! its first read (its `latch_state` script count), so the count-down is
//! what releases them. The first fan-out of every round is a warm-up
//! (connections are opened there) and is not counted.
//!
//! Its reference, in the same rounds: the **Redis latch + pub/sub floor**,
//! a latch done straight on Redis as a Redisson client does it. The same
//! number of waiter tasks, spread over as many pub/sub connections as there
//! are instances (one per client process), each connection subscribed to
//! the latch's channel and waking all of its waiters on the message; the
//! count-down is one script (`DECR`, and `PUBLISH` when it reaches 0) on a
//! multiplexed connection. Its latency is measured from the count-down
//! *sent* to the last waiter task woken (from the reply it is 0: every
//! waiter is woken before the reply is read), and compared with the
//! service's figure from the count-down sent.
//!
//! And the HTTP ceiling, in the same rounds: the **bare axum fan-out**, the
//! same number of GET `/park` requests parked on the bare axum server (one
//! reqwest request, so one connection, each, as latchkey's waiters), all
//! released by one GET `/unpark` once `/parked` counts them; its latency is
//! `/unpark` *sent* → the last parked request answered (each body must be
//! "unparked"). What the floor never does, it does: write one HTTP response
//! per waiter. The bare server is ONE process, where latchkey's waiters are
//! spread over two instances.
//!
//! The row's percentiles pool the counted fan-outs of every round; each
//! round's own p99s (over that round's fan-outs of each kind) are kept
//! too, and the goals are judged on them round by round.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use reqwest::StatusCode;
use tokio::task::JoinSet;

use crate::client::expect_status;
use crate::parked::{self, Variant};
use crate::redisinfo::Redis;
use crate::stats::{median, percentile};
use crate::tasks::join_all;

/// Long-poll budget of a waiter: far longer than a fan-out.
const WAIT_MS: u64 = 30_000;
/// Parking the waiters, or answering them, must finish within this.
const DEADLINE: Duration = Duration::from_secs(30);

/// The figures over every counted fan-out.
#[derive(Debug)]
pub struct Row {
    pub waiters: usize,
    pub instances: usize,
    pub fanouts: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p99_from_sent_ms: f64,
    /// The Redis latch + pub/sub floor's p99 from the count-down sent
    /// (same rounds).
    pub floor_p99_ms: f64,
    /// The bare axum fan-out's p50 and p99 from `/unpark` sent (same
    /// rounds; one process).
    pub bare_p50_ms: f64,
    pub bare_p99_ms: f64,
    /// Median over fan-outs.
    pub commands_per: f64,
    /// The most in any fan-out.
    pub commands_max: f64,
    /// Each round's own p99s, in round order.
    pub rounds: Vec<RoundP99>,
    pub errors: Vec<String>,
}

/// One round's p99s (ms) over that round's counted fan-outs of each kind
/// (NaN where none succeeded); with fewer than 100 of them, the slowest.
#[derive(Clone, Copy, Debug)]
pub struct RoundP99 {
    /// latchkey's, from the count-down sent.
    pub from_sent_ms: f64,
    /// The Redis latch + pub/sub floor's, from the count-down sent.
    pub floor_ms: f64,
    /// The bare axum fan-out's, from `/unpark` sent.
    pub bare_ms: f64,
}

/// One fan-out's figures.
struct Sample {
    latency: Duration,
    from_sent: Duration,
    commands: u64,
}

/// A metric sample of one instance (0 when absent).
async fn metric(client: &reqwest::Client, base: &str, series: &str) -> Result<f64, String> {
    let response = client.get(format!("{base}/metrics")).send().await;
    let text = expect_status(response, StatusCode::OK, "GET /metrics").await?;
    Ok(text
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0))
}

const READS: &str = "latchkey_script_duration_seconds_count{script=\"latch_state\"}";

/// One fan-out of `waiters` over `bases` on the latch `name`.
async fn fan_out(
    client: &reqwest::Client,
    bases: &[String],
    admin: &Redis,
    name: &str,
    waiters: usize,
) -> Result<Sample, String> {
    let first = &bases[0];
    let response = client
        .put(format!("{first}/latches/{name}"))
        .json(&serde_json::json!({"count": 1}))
        .send()
        .await;
    expect_status(response, StatusCode::CREATED, "PUT latch").await?;
    let mut reads = Vec::new();
    for base in bases {
        reads.push(metric(client, base, READS).await?);
    }
    let mut tasks = JoinSet::new();
    for i in 0..waiters {
        let url = format!(
            "{}/latches/{name}/wait?wait_ms={WAIT_MS}",
            bases[i % bases.len()]
        );
        let request = client.get(url).timeout(Duration::from_millis(WAIT_MS) * 2);
        tasks.spawn(async move {
            let text = expect_status(request.send().await, StatusCode::OK, "latch wait").await?;
            let answered = Instant::now();
            if text != r#"{"count":0,"open":true}"# {
                return Err(format!("latch wait: expected open, got {text}"));
            }
            Ok(answered)
        });
    }
    // Every waiter parked and past its first read.
    let parked = Instant::now();
    loop {
        let mut ready = true;
        for (i, base) in bases.iter().enumerate() {
            let share = (waiters + bases.len() - 1 - i) / bases.len();
            let waiting = metric(client, base, "latchkey_waiters").await?;
            let read = metric(client, base, READS).await? - reads[i];
            ready &= waiting >= share as f64 && read >= share as f64;
        }
        if ready {
            break;
        }
        if parked.elapsed() > DEADLINE {
            tasks.abort_all();
            return Err(format!(
                "{waiters} waiters did not park within {DEADLINE:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let before = admin.total_commands().await?;
    let sent = Instant::now();
    let response = client
        .post(format!("{first}/latches/{name}/count-down"))
        .json(&serde_json::json!({}))
        .send()
        .await;
    let reply = expect_status(response, StatusCode::OK, "count-down").await?;
    let replied = Instant::now();
    if reply != r#"{"count":0,"open":true}"# {
        return Err(format!(
            "count-down: expected it to open the latch, got {reply}"
        ));
    }
    let answered = last_answer(&mut tasks, waiters, "waiters").await;
    let commands = admin.total_commands().await? - before;
    let last = answered?.unwrap_or(replied);
    Ok(Sample {
        latency: last.saturating_duration_since(replied),
        from_sent: last.saturating_duration_since(sent),
        commands,
    })
}

/// Waits for the tasks of `waiters` requests (`what`), which must all be
/// answered; the last answer's instant.
async fn last_answer(
    tasks: &mut JoinSet<Result<Instant, String>>,
    waiters: usize,
    what: &str,
) -> Result<Option<Instant>, String> {
    let mut errors = Vec::new();
    let answered = join_all(tasks, DEADLINE, &mut errors).await;
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    if answered.len() != waiters {
        return Err(format!("{} of {waiters} {what} answered", answered.len()));
    }
    Ok(answered.into_iter().max())
}

/// The count-down of the floor's latch: `KEYS[1]` its count, `KEYS[2]` its
/// channel.
const FLOOR_COUNT_DOWN: &str = "local left = redis.call('DECR', KEYS[1]) \
    if left <= 0 then redis.call('PUBLISH', KEYS[2], 'open') end return left";

/// One fan-out of the floor (see the module's doc) on the latch `name`:
/// count-down sent → the last of `waiters` tasks woken.
async fn floor_fan_out(
    (url, conn): (&str, &MultiplexedConnection),
    name: &str,
    waiters: usize,
    instances: usize,
) -> Result<Duration, String> {
    let client = redis::Client::open(url).map_err(|e| format!("redis URL {url}: {e}"))?;
    let (mut conn, channel) = (conn.clone(), format!("{name}:open"));
    let set: Result<(), _> = redis::cmd("SET")
        .arg(name)
        .arg(1)
        .query_async(&mut conn)
        .await;
    set.map_err(|e| format!("SET {name}: {e}"))?;
    let mut tasks = JoinSet::new();
    for i in 0..instances {
        let mut pubsub =
            (client.get_async_pubsub().await).map_err(|e| format!("pub/sub connection: {e}"))?;
        (pubsub.subscribe(&channel).await).map_err(|e| format!("SUBSCRIBE {channel}: {e}"))?;
        let (open, opened) = tokio::sync::watch::channel(false);
        for _ in 0..(waiters + instances - 1 - i) / instances {
            let mut opened = opened.clone();
            tasks.spawn(async move {
                (opened.wait_for(|open| *open).await).map_err(|e| format!("waiter: {e}"))?;
                Ok(Some(Instant::now()))
            });
        }
        tasks.spawn(async move {
            match pubsub.into_on_message().next().await {
                Some(_) => open.send_replace(true),
                None => return Err("the pub/sub connection closed".to_string()),
            };
            Ok(None)
        });
    }
    let count_down = redis::Script::new(FLOOR_COUNT_DOWN);
    let sent = Instant::now();
    let left: i64 = count_down
        .key(name)
        .key(&channel)
        .invoke_async(&mut conn)
        .await
        .map_err(|e| format!("floor count-down: {e}"))?;
    if left != 0 {
        tasks.abort_all();
        return Err(format!("floor count-down left {left}, not 0"));
    }
    let mut errors = Vec::new();
    let woken: Vec<Instant> = (join_all(&mut tasks, DEADLINE, &mut errors).await)
        .into_iter()
        .flatten()
        .collect();
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    if woken.len() != waiters {
        return Err(format!("{} of {waiters} floor waiters woken", woken.len()));
    }
    let last = woken.into_iter().max().unwrap_or(sent);
    Ok(last.saturating_duration_since(sent))
}

/// One fan-out of the bare axum server at `bare` (see the module's doc):
/// `/unpark` sent → the last of `waiters` parked GETs answered.
async fn bare_fan_out(
    client: &reqwest::Client,
    bare: &str,
    waiters: usize,
) -> Result<Duration, String> {
    // Parked already (none, unless an earlier fan-out failed): released
    // with these, but not counted as these.
    let before = parked::waiting(client, bare, Variant::Bare).await?;
    let mut tasks = JoinSet::new();
    for _ in 0..waiters {
        let request =
            (client.get(format!("{bare}/park"))).timeout(Duration::from_millis(WAIT_MS) * 2);
        tasks.spawn(async move {
            let text = expect_status(request.send().await, StatusCode::OK, "park").await?;
            let answered = Instant::now();
            if text != "unparked" {
                return Err(format!("park: expected unparked, got {text}"));
            }
            Ok(answered)
        });
    }
    let all_parked = parked::until_waiting(client, bare, Variant::Bare, before + waiters).await;
    let sent = Instant::now();
    let response = client.get(format!("{bare}/unpark")).send().await;
    let unparked = expect_status(response, StatusCode::OK, "unpark").await;
    if let Err(e) = all_parked.and(unparked) {
        tasks.abort_all();
        return Err(e);
    }
    let last = (last_answer(&mut tasks, waiters, "parked GETs").await?).unwrap_or(sent);
    Ok(last.saturating_duration_since(sent))
}

fn ms(d: Option<Duration>) -> f64 {
    d.map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

/// The p99 of some latencies, ms (NaN when there are none).
fn p99_ms(latencies: impl Iterator<Item = Duration>) -> f64 {
    let mut sorted: Vec<Duration> = latencies.collect();
    sorted.sort_unstable();
    ms(percentile(&sorted, 99.0))
}

/// `rounds` rounds of `per_round` counted fan-outs (after one warm-up each),
/// each round followed by as many of the floor's, straight on the Redis at
/// `direct` (its URL and a connection to it), then as many of the bare
/// axum server's at `bare`.
pub async fn measure(
    client: &reqwest::Client,
    bases: &[String],
    bare: &str,
    (admin, direct): (&Redis, (&str, &MultiplexedConnection)),
    waiters: usize,
    rounds: usize,
    per_round: usize,
) -> Row {
    let mut samples = Vec::new();
    let mut floor = Vec::new();
    let mut bare_fanouts = Vec::new();
    let mut round_p99s = Vec::new();
    let mut errors = Vec::new();
    for round in 0..rounds {
        // Where this round's fan-outs start in each list.
        let from = (samples.len(), floor.len(), bare_fanouts.len());
        for i in 0..=per_round {
            let name = format!("bench-fanout-r{round}-{i}");
            match fan_out(client, bases, admin, &name, waiters).await {
                Ok(sample) if i > 0 => samples.push(sample),
                Ok(_) => {}
                Err(e) => errors.push(format!("latch fan-out {name}: {e}")),
            }
        }
        for i in 0..=per_round {
            let name = format!("bench-floor-latch-r{round}-{i}");
            match floor_fan_out(direct, &name, waiters, bases.len()).await {
                Ok(latency) if i > 0 => floor.push(latency),
                Ok(_) => {}
                Err(e) => errors.push(format!("floor latch fan-out {name}: {e}")),
            }
        }
        for i in 0..=per_round {
            match bare_fan_out(client, bare, waiters).await {
                Ok(latency) if i > 0 => bare_fanouts.push(latency),
                Ok(_) => {}
                Err(e) => errors.push(format!("bare axum fan-out r{round}-{i}: {e}")),
            }
        }
        round_p99s.push(RoundP99 {
            from_sent_ms: p99_ms(samples[from.0..].iter().map(|s| s.from_sent)),
            floor_ms: p99_ms(floor[from.1..].iter().copied()),
            bare_ms: p99_ms(bare_fanouts[from.2..].iter().copied()),
        });
    }
    floor.sort_unstable();
    bare_fanouts.sort_unstable();
    let mut latencies: Vec<Duration> = samples.iter().map(|s| s.latency).collect();
    let mut from_sent: Vec<Duration> = samples.iter().map(|s| s.from_sent).collect();
    latencies.sort_unstable();
    from_sent.sort_unstable();
    let commands: Vec<f64> = samples.iter().map(|s| s.commands as f64).collect();
    Row {
        waiters,
        instances: bases.len(),
        fanouts: samples.len(),
        p50_ms: ms(percentile(&latencies, 50.0)),
        p99_ms: ms(percentile(&latencies, 99.0)),
        p99_from_sent_ms: ms(percentile(&from_sent, 99.0)),
        floor_p99_ms: ms(percentile(&floor, 99.0)),
        bare_p50_ms: ms(percentile(&bare_fanouts, 50.0)),
        bare_p99_ms: ms(percentile(&bare_fanouts, 99.0)),
        commands_per: median(commands.clone()),
        commands_max: commands.into_iter().fold(f64::NAN, f64::max),
        rounds: round_p99s,
        errors,
    }
}
