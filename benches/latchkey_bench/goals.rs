//! The goals table: one row per goal of the issues "Per-request cost,
//! round 2" and "round 3", each a latchkey figure against its reference
//! measured in the same run (the medians over the same interleaved rounds,
//! or for the latch fan-out the p99 pooled over all of them), their ratio,
//! the ratio of each round ("rounds": round i of the latchkey figure ÷
//! round i of the reference, which ran in the same pass and saw the same
//! noise), the goal and whether it is met. A goal counts as met when it
//! holds in every round: "met" is "yes" only when every round's ratio meets
//! it, "no (k of n rounds)" when only some do ([`Goal::met`] in
//! [`crate::verdict`]); the ratio column decides only for a row without
//! rounds, which says so. A later phase adds its goals through
//! [`crate::measured::Section`].

use crate::floors::{Floor, Redisson};
use crate::measured::{Goal, Report, Target};
use crate::ops::Primitive;
use crate::stats::fig;
use crate::throughput::{self, Kind, STACK, STACK_REDISSON, own};
use crate::{fanout, handoff};

/// The concurrency the throughput goals are set at.
const C: usize = 64;
/// The waiters the handoff goal is set at.
const WAITERS: usize = 64;

/// A goal on a throughput row: `figures` gives (latchkey, reference) of a
/// row; the goal's main figures are those of the row's medians, and its
/// rounds those of each round's own figures ([`throughput::Row::each_round`]).
fn on_row(
    r: &throughput::Row,
    measure: String,
    (decimals, target): (usize, Target),
    figures: impl Fn(&throughput::Row) -> (f64, f64),
) -> Goal {
    let (latchkey, reference) = figures(r);
    Goal {
        measure,
        latchkey,
        reference,
        decimals,
        target,
        rounds: r.each_round().map(|round| figures(&round)).collect(),
    }
}

/// `part ÷ whole` pairs/s at c=64: a throughput goal.
fn pairs(r: &throughput::Row, measure: String, ours: Kind, reference: Kind, t: Target) -> Goal {
    on_row(r, measure, (0, t), |r| (r.per_s(ours), r.per_s(reference)))
}

fn throughput_goals(r: &throughput::Row) -> Vec<Goal> {
    let plain = Kind::Http(Primitive::Lock);
    let redisson = Kind::Floor(Floor::Redisson(Redisson::Lock));
    let mut goals = vec![pairs(
        r,
        format!(
            "plain-lock acquire+release pairs/s, c={C} ÷ Redisson-style RLock scripts \
             pipelined on one connection straight to Redis"
        ),
        plain,
        redisson,
        Target::AtLeast(0.2, Some(0.3)),
    )];
    // Next to it, the floor of earlier runs (no goal of its own here).
    goals.push(pairs(
        r,
        format!(
            "plain-lock acquire+release pairs/s, c={C} ÷ latchkey's own lock scripts (direct floor)"
        ),
        plain,
        own(Primitive::Lock),
        Target::None,
    ));
    // Three more (no goal of their own): how much of the gap to Redisson
    // is latchkey's code, and what the stack under it (axum and redis-rs,
    // one script call per request) leaves for any code on top, with the
    // lock's own scripts and with Redisson's.
    goals.push(pairs(
        r,
        format!(
            "plain-lock acquire+release pairs/s, c={C} ÷ the same pairs on bare axum + \
             redis-rs (one call of the lock's own scripts per request, nothing else)"
        ),
        plain,
        STACK,
        Target::None,
    ));
    for (stack, scripts) in [
        (STACK, "the lock's own"),
        (STACK_REDISSON, "Redisson-style RLock"),
    ] {
        goals.push(pairs(
            r,
            format!(
                "bare axum + redis-rs pairs/s with {scripts} scripts, c={C} ÷ Redisson-style \
                 RLock scripts pipelined on one connection straight to Redis"
            ),
            stack,
            redisson,
            Target::None,
        ));
    }
    let others = [
        Primitive::Semaphore,
        Primitive::ReadLock,
        Primitive::FairLock,
    ];
    goals.extend(others.map(|p| {
        let measure = format!("{} pairs/s ÷ plain-lock pairs/s, c={C}", p.name());
        pairs(
            r,
            measure,
            Kind::Http(p),
            plain,
            Target::AtLeast(0.85, None),
        )
    }));
    goals.extend(others.map(|p| {
        let measure = format!(
            "Redis µs per script call, {}'s own scripts ÷ the plain lock's, called directly, c={C}",
            p.name()
        );
        on_row(r, measure, (2, Target::AtMost(1.3)), |r| {
            (r.of(own(p)).redis_us, r.of(own(Primitive::Lock)).redis_us)
        })
    }));
    goals.push(pairs(
        r,
        format!("GET req/s, c={C}: latchkey `/healthz` ÷ bare axum `/`"),
        Kind::Healthz,
        Kind::Bare,
        Target::AtLeast(0.8, None),
    ));
    // An extra row: the same at `LATCHKEY_LOG=warn` (no request span).
    goals.push(pairs(
        r,
        format!("GET req/s, c={C}: latchkey `/healthz` at `LATCHKEY_LOG=warn` ÷ bare axum `/`"),
        Kind::HealthzWarn,
        Kind::Bare,
        Target::None,
    ));
    goals
}

/// The handoff goal, then three extra rows (no goal of their own): how much
/// of it the HTTP ceiling (the bare axum handoff) and the stack floor
/// (the stack handoff) take by themselves, and latchkey against the
/// stack floor.
fn handoff_goals(rows: &[handoff::Row]) -> Vec<Goal> {
    let row = |kind: handoff::Kind| (rows.iter()).find(|r| r.kind == kind && r.waiters == WAITERS);
    let p99 = |kind| row(kind).map_or(f64::NAN, |r| r.p99_ms);
    let p99_rounds = |kind| row(kind).map_or(&[][..], |r| r.p99_ms_rounds.as_slice());
    let floor_what = "the wake-one floor straight on Redis";
    let stack_what = format!(
        "the stack handoff ({WAITERS} long-polls on bare axum + redis-rs with the lock's own \
         scripts and a pub/sub wake-one)"
    );
    // The medians of two kinds, and their p99s of the same round.
    let ratio = |measure: String, ours, reference, target: Target| Goal {
        measure,
        latchkey: p99(ours),
        reference: p99(reference),
        decimals: 2,
        target,
        rounds: (p99_rounds(ours).iter().copied())
            .zip(p99_rounds(reference).iter().copied())
            .collect(),
    };
    use handoff::Kind::{Bare, Floor, Plain, Stack};
    vec![
        ratio(
            format!(
                "handoff p99 ms, {WAITERS} waiters (release reply → next grant) ÷ {floor_what}"
            ),
            Plain,
            Floor,
            Target::AtMost(1.5),
        ),
        ratio(
            format!(
                "the bare axum handoff p99 ms ({WAITERS} GETs parked on an in-memory lock, \
                 HTTP only) ÷ {floor_what}"
            ),
            Bare,
            Floor,
            Target::None,
        ),
        ratio(
            format!("{stack_what} p99 ms ÷ {floor_what}"),
            Stack,
            Floor,
            Target::None,
        ),
        ratio(
            format!("handoff p99 ms, {WAITERS} waiters ÷ {stack_what}"),
            Plain,
            Stack,
            Target::None,
        ),
    ]
}

fn fanout_goal(r: &fanout::Row) -> Goal {
    Goal {
        measure: format!(
            "latch fan-out p99 ms, {} waiters on {} instances (count-down sent → last waiter \
             answered) ÷ the Redis latch + pub/sub floor",
            r.waiters, r.instances
        ),
        latchkey: r.p99_from_sent_ms,
        reference: r.floor_p99_ms,
        decimals: 2,
        target: Target::AtMost(2.0),
        rounds: fanout_rounds(r, |p| (p.from_sent_ms, p.floor_ms)),
    }
}

/// Each round's own p99s of a fan-out goal: (latchkey, reference).
fn fanout_rounds(r: &fanout::Row, pair: fn(&fanout::RoundP99) -> (f64, f64)) -> Vec<(f64, f64)> {
    r.rounds.iter().map(pair).collect()
}

/// The fan-out goal, then two extra rows (no goal of their own): how much
/// of it the HTTP ceiling, the bare axum fan-out, takes by itself.
fn fanout_goals(r: &fanout::Row) -> Vec<Goal> {
    let bare = format!(
        "the bare axum fan-out ({} GETs parked on ONE process, `/unpark` sent → last answered)",
        r.waiters
    );
    vec![
        fanout_goal(r),
        Goal {
            measure: format!(
                "latch fan-out p99 ms, bare axum: {} parked GETs released at once on ONE \
                 process (`/unpark` sent → last answered) ÷ the Redis latch + pub/sub floor",
                r.waiters
            ),
            latchkey: r.bare_p99_ms,
            reference: r.floor_p99_ms,
            decimals: 2,
            target: Target::None,
            rounds: fanout_rounds(r, |p| (p.bare_ms, p.floor_ms)),
        },
        Goal {
            measure: format!(
                "latchkey's latch fan-out p99 ms ({} waiters on {} instances, count-down sent) \
                 ÷ {bare}",
                r.waiters, r.instances
            ),
            latchkey: r.p99_from_sent_ms,
            reference: r.bare_p99_ms,
            decimals: 2,
            target: Target::None,
            rounds: fanout_rounds(r, |p| (p.from_sent_ms, p.bare_ms)),
        },
    ]
}

/// The c=1 bound: each round's from that round's own three figures.
fn bound_goal(r: &throughput::Row) -> Goal {
    let measure = format!(
        "acquire p50 µs, c={} ÷ (bare GET p50 + one script call p50)",
        r.c
    );
    on_row(r, measure, (0, Target::AtMost(2.0)), |r| {
        let plain = r.of(Kind::Http(Primitive::Lock));
        (plain.acquire_p50_us(), throughput::bound_us(r))
    })
}

/// An extra row next to the c=1 bound: the acquire p50 against the same
/// acquire on bare axum + redis-rs (the stack floor).
fn stack_latency(r: &throughput::Row) -> Goal {
    let measure = format!(
        "acquire p50 µs, c={} ÷ the same acquire on bare axum + redis-rs",
        r.c
    );
    on_row(r, measure, (0, Target::None), |r| {
        let plain = r.of(Kind::Http(Primitive::Lock));
        (plain.acquire_p50_us(), r.of(STACK).acquire_p50_us())
    })
}

/// Every goal, in the order, then the sections' own.
pub fn of(report: &Report) -> Vec<Goal> {
    let at = |c: usize| report.throughput.iter().find(|r| r.c == c);
    let mut goals = at(C).map(throughput_goals).unwrap_or_default();
    goals.extend(report.fanout.iter().flat_map(fanout_goals));
    // None when the phase did not run (`LATCHKEY_BENCH_PHASES`).
    if !report.handoff.is_empty() {
        goals.extend(handoff_goals(&report.handoff));
    }
    goals.extend(at(1).map(bound_goal));
    goals.extend(at(1).map(stack_latency));
    goals.extend(report.sections.iter().flat_map(|s| s.goals.clone()));
    goals
}

/// The table: the main figures and their ratio, each round's ratio, the
/// goal, and whether it held in every round.
pub fn print(goals: &[Goal]) {
    println!("| goal: measure | latchkey | reference | ratio | rounds | goal | met |");
    println!("|---|---:|---:|---:|---:|---|---|");
    for g in goals {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            g.measure,
            fig(g.latchkey, g.decimals),
            fig(g.reference, g.decimals),
            fig(g.ratio(), 2),
            g.rounds_column(),
            g.goal(),
            g.met()
        );
    }
}
