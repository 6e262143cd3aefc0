//! The goals table: one row per goal of the issues "Per-request cost,
//! round 2" and "round 3", each a latchkey figure against its reference measured in the
//! same run (same rounds, medians), their ratio, the goal and whether it
//! is met. A later phase adds its goals through [`crate::measured::Section`].

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

impl Goal {
    fn ratio(&self) -> f64 {
        self.latchkey / self.reference
    }

    fn goal(&self) -> String {
        match self.target {
            Target::AtLeast(x, None) => format!("≥ {x}"),
            Target::AtLeast(x, Some(s)) => format!("≥ {x} (stretch {s})"),
            Target::AtMost(x) => format!("≤ {x}"),
            Target::None => "none set".to_string(),
        }
    }

    fn met(&self) -> &'static str {
        let ratio = self.ratio();
        if !ratio.is_finite() {
            return match self.target {
                Target::None => "—",
                _ => "no (no figure)",
            };
        }
        match self.target {
            Target::AtLeast(_, Some(s)) if ratio >= s => "yes (stretch too)",
            Target::AtLeast(x, _) if ratio >= x => "yes",
            Target::AtMost(x) if ratio <= x => "yes",
            Target::None => "—",
            _ => "no",
        }
    }
}

/// `part ÷ whole` pairs/s at c=64: a throughput goal.
fn pairs(r: &throughput::Row, measure: String, ours: Kind, reference: Kind, t: Target) -> Goal {
    Goal {
        measure,
        latchkey: r.per_s(ours),
        reference: r.per_s(reference),
        decimals: 0,
        target: t,
    }
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
    goals.extend(others.map(|p| Goal {
        measure: format!(
            "Redis µs per script call, {}'s own scripts ÷ the plain lock's, called directly, c={C}",
            p.name()
        ),
        latchkey: r.of(own(p)).redis_us,
        reference: r.of(own(Primitive::Lock)).redis_us,
        decimals: 2,
        target: Target::AtMost(1.3),
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
    let p99 = |kind: handoff::Kind| {
        (rows.iter())
            .find(|r| r.kind == kind && r.waiters == WAITERS)
            .map_or(f64::NAN, |r| r.p99_ms)
    };
    let plain = p99(handoff::Kind::Plain);
    let floor = p99(handoff::Kind::Floor);
    let floor_what = "the wake-one floor straight on Redis";
    let stack_what = format!(
        "the stack handoff ({WAITERS} long-polls on bare axum + redis-rs with the lock's own \
         scripts and a pub/sub wake-one)"
    );
    let ratio = |measure: String, latchkey: f64, reference: f64, target: Target| Goal {
        measure,
        latchkey,
        reference,
        decimals: 2,
        target,
    };
    vec![
        ratio(
            format!(
                "handoff p99 ms, {WAITERS} waiters (release reply → next grant) ÷ {floor_what}"
            ),
            plain,
            floor,
            Target::AtMost(1.5),
        ),
        ratio(
            format!(
                "the bare axum handoff p99 ms ({WAITERS} GETs parked on an in-memory lock, \
                 HTTP only) ÷ {floor_what}"
            ),
            p99(handoff::Kind::Bare),
            floor,
            Target::None,
        ),
        ratio(
            format!("{stack_what} p99 ms ÷ {floor_what}"),
            p99(handoff::Kind::Stack),
            floor,
            Target::None,
        ),
        ratio(
            format!("handoff p99 ms, {WAITERS} waiters ÷ {stack_what}"),
            plain,
            p99(handoff::Kind::Stack),
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
    }
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
        },
    ]
}

fn bound_goal(r: &throughput::Row) -> Goal {
    let plain = r.of(Kind::Http(Primitive::Lock));
    Goal {
        measure: format!(
            "acquire p50 µs, c={} ÷ (bare GET p50 + one script call p50)",
            r.c
        ),
        latchkey: plain.acquire_p50_us(),
        reference: throughput::bound_us(r),
        decimals: 0,
        target: Target::AtMost(2.0),
    }
}

/// An extra row next to the c=1 bound: the acquire p50 against the same
/// acquire on bare axum + redis-rs (the stack floor).
fn stack_latency(r: &throughput::Row) -> Goal {
    Goal {
        measure: format!(
            "acquire p50 µs, c={} ÷ the same acquire on bare axum + redis-rs",
            r.c
        ),
        latchkey: r.of(Kind::Http(Primitive::Lock)).acquire_p50_us(),
        reference: r.of(STACK).acquire_p50_us(),
        decimals: 0,
        target: Target::None,
    }
}

/// Every goal, in the order, then the sections' own.
pub fn of(report: &Report) -> Vec<Goal> {
    let at = |c: usize| report.throughput.iter().find(|r| r.c == c);
    let mut goals = at(C).map(throughput_goals).unwrap_or_default();
    goals.extend(fanout_goals(&report.fanout));
    goals.extend(handoff_goals(&report.handoff));
    goals.extend(at(1).map(bound_goal));
    goals.extend(at(1).map(stack_latency));
    goals.extend(report.sections.iter().flat_map(|s| s.goals.clone()));
    goals
}

pub fn print(goals: &[Goal]) {
    println!("| goal: measure | latchkey | reference | ratio | goal | met |");
    println!("|---|---:|---:|---:|---|---|");
    for g in goals {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            g.measure,
            fig(g.latchkey, g.decimals),
            fig(g.reference, g.decimals),
            fig(g.ratio(), 2),
            g.goal(),
            g.met()
        );
    }
}
