//! Memory per parked request. A fresh server is started for every round
//! (so one round's freed memory, which the allocator keeps, cannot hide the
//! next round's growth). N waiters park on locks someone else holds, in
//! batches, each batch admitted once the service's `latchkey_waiters`
//! gauge shows the previous ones parked; the service's VmRSS is read just
//! before the first waiter and once all N are parked. Then the lock(s) are
//! freed; every waiter must be granted (each releases at once, which hands
//! the lock to the next) — a waiter that is not answered is an error.
//!
//! Variants: long-polls on one hot lock, SSE streams (`Accept:
//! text/event-stream`) on one hot lock, and long-polls each on its own
//! lock ("many objects"); and, as the reference, requests parked on the
//! bare axum server's `/park` route (what a pending request costs in
//! axum, hyper and tokio alone).

use std::time::{Duration, Instant};

use futures_util::{StreamExt, stream};
use reqwest::StatusCode;
use tokio::task::JoinSet;

use crate::client::{self, LOCKS, expect_status};
use crate::procs::{self, Service};
use crate::stats::median;
use crate::tasks::join_all;

/// Long-poll budget of a parked waiter (the service's max_wait_ms is
/// raised to match): parking and freeing must finish well within it.
pub const WAIT_MS: u64 = 300_000;
/// Waiters admitted at a time.
const BATCH: usize = 500;
/// Parking one batch, or freeing all, must finish within this.
const DEADLINE: Duration = Duration::from_secs(120);
/// HTTP requests in flight when acquiring or releasing many holders.
const HOLDER_CONCURRENCY: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    LongPoll,
    Sse,
    ManyObjects,
    Bare,
}

pub const VARIANTS: [Variant; 4] = [
    Variant::LongPoll,
    Variant::Sse,
    Variant::ManyObjects,
    Variant::Bare,
];

/// What one variant measured (medians over rounds).
#[derive(Debug)]
pub struct Row {
    pub variant: Variant,
    pub waiters: usize,
    pub kib_per_waiter: f64,
    /// Median RSS of the service with nobody parked, KiB.
    pub rss_idle_kib: f64,
    pub errors: Vec<String>,
}

/// Where and how many.
pub struct Setup {
    pub cpu: Option<usize>,
    pub redis_url: String,
    pub waiters: usize,
    /// Waiters parked and freed once before measuring (warms code paths).
    pub warm_up: usize,
}

/// The lock waiter `i` waits on.
fn lock_of(variant: Variant, tag: &str, i: usize) -> String {
    match variant {
        Variant::ManyObjects => format!("{tag}-{i}"),
        _ => tag.to_string(),
    }
}

/// Acquires (or releases) every distinct lock of `names` as "owner".
async fn owners(
    client: &reqwest::Client,
    base: &str,
    names: Vec<String>,
    take: bool,
) -> Result<(), String> {
    let calls = stream::iter(names).map(|name| async move {
        if take {
            let response = client::acquire(client, base, LOCKS, &name, "owner", 0)
                .send()
                .await;
            expect_status(response, StatusCode::CREATED, "owner acquire")
                .await
                .map(drop)
        } else {
            client::release(client, base, LOCKS, &name, "owner").await
        }
    });
    let results: Vec<_> = calls.buffer_unordered(HOLDER_CONCURRENCY).collect().await;
    results.into_iter().collect()
}

/// Takes (or frees) what the waiters wait for: the locks, or the bare
/// server's gate.
async fn hold(
    client: &reqwest::Client,
    base: &str,
    variant: Variant,
    names: Vec<String>,
    take: bool,
) -> Result<(), String> {
    match (variant, take) {
        (Variant::Bare, true) => Ok(()),
        (Variant::Bare, false) => {
            let response = client.get(format!("{base}/unpark")).send().await;
            expect_status(response, StatusCode::OK, "unpark")
                .await
                .map(drop)
        }
        _ => owners(client, base, names, take).await,
    }
}

/// One parked waiter: waits for its grant, then releases at once.
async fn waiter(
    client: reqwest::Client,
    base: String,
    name: String,
    holder: String,
    variant: Variant,
) -> Result<(), String> {
    if variant == Variant::Bare {
        let request = client
            .get(format!("{base}/park"))
            .timeout(Duration::from_millis(WAIT_MS));
        return expect_status(request.send().await, StatusCode::OK, "park")
            .await
            .map(drop);
    }
    let mut request = client::acquire(&client, &base, LOCKS, &name, &holder, WAIT_MS);
    if variant != Variant::Sse {
        let response = request.send().await;
        expect_status(response, StatusCode::CREATED, "parked acquire").await?;
        return client::release(&client, &base, LOCKS, &name, &holder).await;
    }
    request = request.header(reqwest::header::ACCEPT, "text/event-stream");
    let mut response = request
        .send()
        .await
        .map_err(|e| format!("SSE acquire: {e}"))?;
    if response.status() != StatusCode::OK {
        return Err(format!("SSE acquire: status {}", response.status()));
    }
    let mut seen = String::new();
    while !seen.contains("event: acquired") {
        if seen.contains("event: timeout") || seen.contains("event: error") {
            return Err(format!("SSE acquire ended without a grant: {seen}"));
        }
        match response.chunk().await {
            Ok(Some(chunk)) => seen.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(None) => return Err(format!("SSE stream ended without a grant: {seen}")),
            Err(e) => return Err(format!("SSE stream: {e}")),
        }
    }
    drop(response);
    client::release(&client, &base, LOCKS, &name, &holder).await
}

/// Requests parked: the service's `latchkey_waiters` gauge, or the bare
/// server's `/parked`.
pub async fn waiting(
    client: &reqwest::Client,
    base: &str,
    variant: Variant,
) -> Result<usize, String> {
    let path = if variant == Variant::Bare {
        "parked"
    } else {
        "metrics"
    };
    let response = client.get(format!("{base}/{path}")).send().await;
    let text = expect_status(response, StatusCode::OK, path).await?;
    if variant == Variant::Bare {
        return text
            .trim()
            .parse()
            .map_err(|e| format!("/parked {text:?}: {e}"));
    }
    text.lines()
        .find_map(|line| line.strip_prefix("latchkey_waiters "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as usize)
        .ok_or_else(|| "no latchkey_waiters in /metrics".to_string())
}

/// Waits until at least `n` requests wait on the service.
pub async fn until_waiting(
    client: &reqwest::Client,
    base: &str,
    variant: Variant,
    n: usize,
) -> Result<(), String> {
    let started = Instant::now();
    loop {
        let now = waiting(client, base, variant).await?;
        if now >= n {
            return Ok(());
        }
        if started.elapsed() > DEADLINE {
            return Err(format!(
                "only {now} of {n} waiters parked after {DEADLINE:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Parks `n` waiters of `variant` on locks tagged `tag`, reads the RSS
/// before and after, frees them, and checks every one was answered.
/// Returns (RSS before, RSS with all parked), KiB.
async fn park(
    server: &Service,
    variant: Variant,
    tag: &str,
    n: usize,
) -> Result<(u64, u64), String> {
    let (client, base) = (client::build()?, server.base.clone());
    let mut names: Vec<String> = (0..n).map(|i| lock_of(variant, tag, i)).collect();
    names.dedup();
    hold(&client, &base, variant, names.clone(), true).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = server.child.rss_kib()?;
    let mut tasks = JoinSet::new();
    for start in (0..n).step_by(BATCH) {
        for i in start..(start + BATCH).min(n) {
            let (c, b, name) = (client.clone(), base.clone(), lock_of(variant, tag, i));
            tasks.spawn(waiter(c, b, name, format!("w{i}"), variant));
        }
        until_waiting(&client, &base, variant, (start + BATCH).min(n)).await?;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let parked = server.child.rss_kib()?;
    hold(&client, &base, variant, names, false).await?;
    let mut errors = Vec::new();
    let answered = join_all(&mut tasks, DEADLINE, &mut errors).await.len();
    if answered != n {
        let first = errors.first().cloned().unwrap_or_default();
        return Err(format!(
            "{answered} of {n} waiters answered; first error: {first}"
        ));
    }
    Ok((before, parked))
}

/// One round of one variant on a fresh server: warm-up, then measure.
/// Returns (KiB per waiter, idle RSS KiB).
async fn round(setup: &Setup, variant: Variant, round: usize) -> Result<(f64, f64), String> {
    let max_waiters = setup.waiters + setup.warm_up;
    let server = if variant == Variant::Bare {
        let (child, base) = procs::start_bare(setup.cpu, crate::bare::MARKER, None)?;
        Service { child, base }
    } else {
        procs::start_service(setup.cpu, &setup.redis_url, Some((max_waiters, WAIT_MS)))?
    };
    let tag = format!("bench-parked-{variant:?}-r{round}").to_lowercase();
    if setup.warm_up > 0 {
        park(&server, variant, &format!("{tag}-warm"), setup.warm_up).await?;
    }
    let (before, parked) = park(&server, variant, &tag, setup.waiters).await?;
    server.child.stop();
    let kib = (parked as f64 - before as f64) / setup.waiters as f64;
    Ok((kib, before as f64))
}

/// Interleaved rounds of every variant; medians.
pub async fn measure(setup: &Setup, rounds: usize) -> Vec<Row> {
    let mut rows: Vec<Row> = VARIANTS
        .iter()
        .map(|&variant| Row {
            variant,
            waiters: setup.waiters,
            kib_per_waiter: f64::NAN,
            rss_idle_kib: f64::NAN,
            errors: Vec::new(),
        })
        .collect();
    let mut figures: Vec<(Vec<f64>, Vec<f64>)> =
        VARIANTS.iter().map(|_| Default::default()).collect();
    for r in 0..rounds {
        for (row, (kib, idle)) in rows.iter_mut().zip(figures.iter_mut()) {
            match round(setup, row.variant, r).await {
                Ok((k, i)) => {
                    kib.push(k);
                    idle.push(i);
                }
                Err(e) => row.errors.push(format!("parked {:?}: {e}", row.variant)),
            }
        }
    }
    for (row, (kib, idle)) in rows.iter_mut().zip(figures) {
        row.kib_per_waiter = median(kib);
        row.rss_idle_kib = median(idle);
    }
    rows
}
