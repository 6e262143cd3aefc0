//! RedLock throughput next to plain locks. The service runs with three
//! RedLock nodes (redis-servers of their own, on the service's core); `c`
//! workers, each on its own name, loop over
//!
//! - **redlock**: `POST /redlocks/{name}/acquire` (201) then
//!   `DELETE /redlocks/{name}/holders/{holder}` (200): an acquire asks the
//!   three nodes at once, a release removes the hold on all three and
//!   publishes a wake message on the main Redis;
//! - **plain**: the same pair on `/locks` (one Redis, one script each),
//!
//! in interleaved rounds (P R P R …), each figure the median over rounds,
//! so both see the same noise.

use std::collections::BTreeMap;

use crate::stats::median;
use crate::throughput::{Round, Targets, Timing, drive};

/// How many RedLock nodes the service gets.
pub const NODES: usize = 3;

/// Medians over the rounds at concurrency `c`.
#[derive(Debug, Default)]
pub struct Row {
    pub c: usize,
    pub redlock_pairs: f64,
    /// Plain-lock pairs in the same interleaved rounds.
    pub plain_pairs: f64,
    pub acquire_p50_us: f64,
    pub release_p50_us: f64,
    pub errors: Vec<String>,
}

pub async fn measure(t: &Targets, c: usize, rounds: usize, timing: Timing) -> Row {
    let mut cols: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut errors = Vec::new();
    for _ in 0..rounds {
        let plain = drive(t.http_pairs(c, "/locks", "acquire"), timing, &t.watch).await;
        let redlock = drive(t.http_pairs(c, "/redlocks", "acquire"), timing, &t.watch).await;
        let mut keep = |kind: &str, round: Round| {
            errors.extend(round.errors.iter().map(|e| format!("{kind} c={c}: {e}")));
            round
        };
        let plain = keep("plain (RedLock run)", plain);
        let redlock = keep("redlock", redlock);
        cols.entry("plain").or_default().push(plain.per_s);
        cols.entry("redlock").or_default().push(redlock.per_s);
        let steps = |i: usize| redlock.step_p50_us.get(i).copied().unwrap_or(f64::NAN);
        cols.entry("acq").or_default().push(steps(0));
        cols.entry("rel").or_default().push(steps(1));
    }
    let mut m = |name: &str| median(cols.remove(name).unwrap_or_default());
    Row {
        c,
        redlock_pairs: m("redlock"),
        plain_pairs: m("plain"),
        acquire_p50_us: m("acq"),
        release_p50_us: m("rel"),
        errors,
    }
}
