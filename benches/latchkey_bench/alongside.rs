//! Kinds measured at one concurrency next to plain locks, in interleaved
//! rounds (P K P K …, each figure the median over rounds, so both see the
//! same noise). `c` workers, each on its own names, loop over
//!
//! - **redlock**: `POST /redlocks/{name}/acquire` (201) then
//!   `DELETE /redlocks/{name}/holders/{holder}` (200). The service runs
//!   with [`NODES`] RedLock nodes (redis-servers of their own, on the
//!   service's core): an acquire asks every node at once, a release removes
//!   the hold on every node and publishes a wake message on the main Redis;
//! - **multi-lock**: `POST /multilocks/acquire` (201) then
//!   `POST /multilocks/release` (200) of a set of [`SET_SIZE`] names: one
//!   script over the set's eight locks each;
//! - **baseline**: the `/locks` pair on another build of the service,
//!   given as `LATCHKEY_BENCH_BASELINE` (e.g. the previous main's release
//!   binary), started like this one, on its core and its Redis: an A/B in
//!   one run, so both builds see the same noise;
//! - **plain**: the pair on `/locks` (one Redis, one script each).

use std::collections::BTreeMap;

use crate::stats::median;
use crate::throughput::{HttpPair, Round, Targets, Timing, drive};

/// How many RedLock nodes the service gets.
pub const NODES: usize = 3;

/// How many names a multi-lock of the benchmark takes.
pub const SET_SIZE: usize = 8;

/// What is measured next to plain locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    RedLock,
    MultiLock,
    Baseline,
}

impl Kind {
    pub fn describe(self) -> String {
        match self {
            Kind::RedLock => format!("RedLock ({NODES} nodes)"),
            Kind::MultiLock => format!("multi-lock of {SET_SIZE} names"),
            Kind::Baseline => "baseline build (`LATCHKEY_BENCH_BASELINE`)".to_string(),
        }
    }

    /// What one pair costs the Redis side.
    pub fn cost(self) -> &'static str {
        match self {
            Kind::RedLock => {
                "a pair is one script on every node for the acquire and for the release, and \
                 one PUBLISH on the main Redis"
            }
            Kind::MultiLock => "a pair is one script over the set's locks for each step",
            Kind::Baseline => "the same plain-lock pairs, sent to the other build",
        }
    }

    fn pairs(self, t: &Targets, c: usize) -> Vec<HttpPair> {
        match self {
            Kind::RedLock => t.http_pairs(c, "/redlocks", "acquire"),
            Kind::MultiLock => t.multi_pairs(c, SET_SIZE),
            Kind::Baseline => match &t.baseline {
                Some(base) => t.http_pairs_on(base, c, "/locks", "acquire"),
                None => Vec::new(),
            },
        }
    }
}

/// Medians over the rounds at concurrency `c`.
#[derive(Debug)]
pub struct Row {
    pub kind: Kind,
    pub c: usize,
    pub pairs: f64,
    /// Plain-lock pairs in the same interleaved rounds.
    pub plain_pairs: f64,
    pub acquire_p50_us: f64,
    pub release_p50_us: f64,
    pub errors: Vec<String>,
}

pub async fn measure(t: &Targets, kind: Kind, c: usize, rounds: usize, timing: Timing) -> Row {
    let mut cols: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut errors = Vec::new();
    let label = kind.describe();
    for _ in 0..rounds {
        let plain = drive(t.http_pairs(c, "/locks", "acquire"), timing, &t.watch).await;
        let other = drive(kind.pairs(t, c), timing, &t.watch).await;
        let mut keep = |what: &str, round: Round| {
            errors.extend(round.errors.iter().map(|e| format!("{what} c={c}: {e}")));
            round
        };
        let plain = keep(&format!("plain (next to {label})"), plain);
        let other = keep(&label, other);
        cols.entry("plain").or_default().push(plain.per_s);
        cols.entry("other").or_default().push(other.per_s);
        let steps = |i: usize| other.step_p50_us.get(i).copied().unwrap_or(f64::NAN);
        cols.entry("acq").or_default().push(steps(0));
        cols.entry("rel").or_default().push(steps(1));
    }
    let mut m = |name: &str| median(cols.remove(name).unwrap_or_default());
    Row {
        kind,
        c,
        pairs: m("other"),
        plain_pairs: m("plain"),
        acquire_p50_us: m("acq"),
        release_p50_us: m("rel"),
        errors,
    }
}
