//! Rate limiters: acquires per second on ONE limiter at c=64 (a limiter
//! fast enough that the service, not the limit, is the bound; every answer
//! must be 200), and the accuracy of the admitted rate (a limiter slower
//! than the clients: the permits admitted per second while 64 clients ask
//! as fast as they can, against the configured rate; 429s are expected).
//! Per key: the fast limiter's acquires spread over [`KEYS`] keys, each
//! its own bucket (a bucket created, drawn from and left to expire per
//! key), against the one shared bucket in the same run.
//! The kinds run in interleaved rounds (medians; the goals carry each
//! round's figures too, and are judged round by round).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hyper::body::Bytes;
use hyper::{Method, StatusCode};

use crate::client::Conn;
use crate::measured::{Goal, Line, Section, Target};
use crate::ops::Op;
use crate::stats::fig;
use crate::stats::median;
use crate::throughput::{Lazy, Targets, Timing, drive};

const C: usize = 64;
/// The fast limiter: far above what one core serves.
const FAST_RATE: u64 = 1_000_000;
/// The slow limiter: well below what the clients ask for.
const SLOW_RATE: u64 = 2_000;
const SLOW_BURST: u64 = 20;
const PER_MS: u64 = 1_000;
/// The distinct keys of the per-key rounds.
const KEYS: u64 = 10_000;

/// One acquire of one permit; counts admissions answered inside the
/// measured window (the round's warm-up and tail are not counted).
struct Acquire {
    conn: Lazy,
    path: String,
    body: Bytes,
    /// Per key: the next key this client sends (each client walks its own
    /// stride of the [`KEYS`] keys), and the stride.
    keyed: Option<(u64, u64)>,
    /// 429 is an answer too (the slow limiter); anything else fails.
    refusals_expected: bool,
    window: (Instant, Instant),
    admitted: Arc<AtomicU64>,
}

impl Op for Acquire {
    async fn run(&mut self) -> Result<Vec<Duration>, String> {
        if let Some((next, stride)) = &mut self.keyed {
            self.body = Bytes::from(format!("{{\"permits\": 1, \"key\": \"user-{next}\"}}"));
            *next = (*next + *stride) % KEYS;
        }
        let conn: &mut Conn = self.conn.get().await?;
        let t0 = Instant::now();
        let (status, body) = conn
            .send(Method::POST, &self.path, Some(&self.body))
            .await?;
        let took = t0.elapsed();
        let now = Instant::now();
        match status {
            StatusCode::OK => {
                if t0 >= self.window.0 && now <= self.window.1 {
                    self.admitted.fetch_add(1, Ordering::Relaxed);
                }
            }
            StatusCode::TOO_MANY_REQUESTS if self.refusals_expected => {}
            other => {
                let body = String::from_utf8_lossy(&body);
                return Err(format!("{}: got {other}: {body}", self.path));
            }
        }
        Ok(vec![took])
    }
}

async fn configure(t: &Targets, name: &str, rate: u64, burst: u64) -> Result<(), String> {
    let body = serde_json::json!({ "rate": rate, "per_ms": PER_MS, "burst": burst });
    let mut conn = Conn::open(&t.latchkey).await?;
    conn.call(
        Method::PUT,
        &format!("/rate-limiters/{name}"),
        Some(&Bytes::from(body.to_string())),
        StatusCode::OK,
    )
    .await
    .map(drop)
    .map_err(|e| format!("configuring rate limiter {name}: {e}"))
}

/// One round on limiter `name`: (acquires answered per second, p50 µs,
/// permits admitted per second inside the measured window).
async fn round(
    t: &Targets,
    name: &str,
    slow: bool,
    keyed: bool,
    timing: Timing,
) -> (f64, f64, f64, Vec<String>) {
    let base: Arc<str> = t.latchkey.as_str().into();
    let admitted = Arc::new(AtomicU64::new(0));
    let start = Instant::now() + timing.warm_up;
    let ops = (0..C)
        .map(|i| Acquire {
            conn: Lazy::new(&base),
            path: format!("/rate-limiters/{name}/acquire"),
            body: Bytes::from_static(b"{\"permits\": 1}"),
            // 64 clients, strides of 7 and 13: every key is used, none by
            // two clients in step.
            keyed: keyed.then_some((i as u64 * 157, if i % 2 == 0 { 7 } else { 13 })),
            refusals_expected: slow,
            window: (start, start + timing.measure),
            admitted: admitted.clone(),
        })
        .collect();
    let r = drive(ops, timing, &t.watch).await;
    let admitted_per_s = admitted.load(Ordering::Relaxed) as f64 / timing.measure.as_secs_f64();
    let p50 = r.step_p50_us.first().copied().unwrap_or(f64::NAN);
    (r.per_s, p50, admitted_per_s, r.errors)
}

/// The rate-limiter rows, goals (none set by the issue: measured) and notes.
pub async fn measure(t: &Targets, rounds: usize, timing: Timing) -> (Section, Vec<String>) {
    let (fast, slow) = ("bench-rl-fast", "bench-rl-slow");
    let mut errors = Vec::new();
    for (name, rate, burst) in [(fast, FAST_RATE, 1_000), (slow, SLOW_RATE, SLOW_BURST)] {
        if let Err(e) = configure(t, name, rate, burst).await {
            errors.push(e);
        }
    }
    let (mut per_s, mut p50, mut slow_per_s, mut slow_admitted) = (vec![], vec![], vec![], vec![]);
    let (mut keyed_per_s, mut keyed_p50) = (vec![], vec![]);
    for _ in 0..rounds {
        let (r, p, _, e) = round(t, fast, false, false, timing).await;
        per_s.push(r);
        p50.push(p);
        errors.extend(e.into_iter().map(|e| format!("rate limiter (fast): {e}")));
        let (r, p, _, e) = round(t, fast, false, true, timing).await;
        keyed_per_s.push(r);
        keyed_p50.push(p);
        errors.extend(
            e.into_iter()
                .map(|e| format!("rate limiter (per key): {e}")),
        );
        let (r, _, a, e) = round(t, slow, true, false, timing).await;
        slow_per_s.push(r);
        slow_admitted.push(a);
        errors.extend(e.into_iter().map(|e| format!("rate limiter (slow): {e}")));
    }
    // Round i of each kind ran in the same pass: (latchkey, reference).
    let keyed_rounds: Vec<(f64, f64)> = keyed_per_s.iter().copied().zip(per_s.clone()).collect();
    let admitted_rounds: Vec<(f64, f64)> = (slow_admitted.iter())
        .map(|&a| (a, SLOW_RATE as f64))
        .collect();
    let (per_s, p50) = (median(per_s), median(p50));
    let (keyed_per_s, keyed_p50) = (median(keyed_per_s), median(keyed_p50));
    let (slow_per_s, admitted) = (median(slow_per_s), median(slow_admitted));
    let line = |measure: String, latchkey: f64, decimals| Line {
        measure,
        latchkey,
        direct: f64::NAN,
        bare: f64::NAN,
        decimals,
    };
    let bound = SLOW_RATE as f64 + SLOW_BURST as f64 / timing.measure.as_secs_f64();
    let section = Section {
        rows: vec![
            line(
                format!("rate-limiter acquires/s, c={C}, one limiter (every answer 200)"),
                per_s,
                0,
            ),
            line(format!("rate-limiter acquire p50 µs, c={C}"), p50, 0),
            line(
                format!(
                    "rate-limiter acquires/s, c={C}, per key over {KEYS} keys (every answer 200)"
                ),
                keyed_per_s,
                0,
            ),
            line(
                format!("rate-limiter acquire p50 µs, c={C}, per key"),
                keyed_p50,
                0,
            ),
            line(
                format!(
                    "rate-limiter admitted permits/s, c={C} asking {slow_per_s:.0}/s of a limiter of {SLOW_RATE}/s"
                ),
                admitted,
                1,
            ),
        ],
        goals: vec![
            Goal {
                measure: format!(
                    "rate limiter: acquires/s per key over {KEYS} keys ÷ one shared bucket, c={C}"
                ),
                latchkey: keyed_per_s,
                reference: per_s,
                decimals: 0,
                target: Target::AtLeast(0.9, None),
                rounds: keyed_rounds,
            },
            Goal {
                measure: format!(
                    "rate limiter: admitted permits/s ÷ configured rate ({SLOW_RATE}/s, burst {SLOW_BURST}), c={C} asking more"
                ),
                latchkey: admitted,
                reference: SLOW_RATE as f64,
                decimals: 1,
                target: Target::None,
                rounds: admitted_rounds,
            },
        ],
        notes: vec![format!(
            "rate limiters: one limiter of {FAST_RATE}/s answered {} acquires/s at c={C} (p50 {} µs); \
             a limiter of {SLOW_RATE} per {PER_MS} ms (burst {SLOW_BURST}) asked {} times/s by {C} clients \
             admitted {} permits/s inside the measured window ({}× the rate; the bound rate + burst/window is {}); \
             spread over {KEYS} keys of that limiter (each its own bucket, created and drawn from per key) it \
             answered {} acquires/s (p50 {} µs)",
            fig(per_s, 0),
            fig(p50, 0),
            fig(slow_per_s, 0),
            fig(admitted, 1),
            fig(admitted / SLOW_RATE as f64, 3),
            fig(bound, 1),
            fig(keyed_per_s, 0),
            fig(keyed_p50, 0),
        )],
    };
    (section, errors)
}
