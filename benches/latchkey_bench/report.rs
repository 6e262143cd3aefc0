//! The output: machine notes, the goals table ([`goals`]), then ONE
//! markdown table of every figure, then footnotes. The throughput rows
//! come per concurrency: plain-lock, read-lock, semaphore and fair-lock
//! pairs, each against its own scripts called directly (the direct
//! column), the plain lock's and the semaphore's against the
//! Redisson-style scripts, and the plain lock's against the stack floor
//! (bare axum + redis-rs, [`crate::bare`]); their shares of the plain-lock rate, Redis costs
//! and c=64 latencies are in footnotes. A phase added later brings its
//! rows, goals and footnotes as a [`Section`](crate::measured::Section).

use crate::floors::{Floor, Redisson};
use crate::measured::Report;
use crate::ops::{self, Primitive};
use crate::stats::fig;
use crate::throughput::{Kind, STACK, STACK_REDISSON, bound_us, own};
use crate::{alongside, fanout, goals, handoff, parked, throughput};

/// One table row: measure | latchkey | direct | bare | ÷ direct | ÷ bare.
fn row(measure: &str, latchkey: f64, direct: f64, bare: f64, decimals: usize) {
    println!(
        "| {measure} | {} | {} | {} | {} | {} |",
        fig(latchkey, decimals),
        fig(direct, decimals),
        fig(bare, decimals),
        fig(latchkey / direct, 2),
        fig(latchkey / bare, 2),
    );
}

const NONE: f64 = f64::NAN;

/// The label of a primitive's pairs row (plain locks keep the label of
/// earlier runs).
fn pairs_label(p: Primitive, c: usize) -> String {
    match p {
        Primitive::Lock => format!("acquire+release pairs/s, c={c} (bare: pairs of GETs)"),
        Primitive::Semaphore => format!(
            "semaphore acquire+release pairs/s, c={c}, all on one semaphore of {} permits \
             (direct: its own scripts, all on one such semaphore; bare: pairs of GETs)",
            ops::SEM_PERMITS
        ),
        p => format!(
            "{} acquire+release pairs/s, c={c} (bare: pairs of GETs)",
            p.name()
        ),
    }
}

fn throughput_rows(rows: &[throughput::Row]) {
    for r in rows {
        let c = r.c;
        let bare_pairs = r.per_s(Kind::Bare) / 2.0;
        for p in Primitive::ALL {
            let http = r.per_s(Kind::Http(p));
            row(&pairs_label(p, c), http, r.per_s(own(p)), bare_pairs, 0);
            let redisson = match p {
                Primitive::Lock => Redisson::Lock,
                Primitive::Semaphore => Redisson::Semaphore,
                _ => continue,
            };
            row(
                &redisson_label(redisson, c),
                http,
                r.per_s(Kind::Floor(Floor::Redisson(redisson))),
                bare_pairs,
                0,
            );
        }
    }
    for r in rows {
        for (stack, scripts) in [(STACK, "its own"), (STACK_REDISSON, "Redisson-style RLock")] {
            row(
                &format!(
                    "acquire+release pairs/s, c={} vs bare axum + redis-rs (direct: the same \
                     pairs on the bare server, one call of {scripts} scripts per request; \
                     bare: pairs of GETs)",
                    r.c
                ),
                r.per_s(Kind::Http(Primitive::Lock)),
                r.per_s(stack),
                r.per_s(Kind::Bare) / 2.0,
                0,
            );
        }
    }
    for r in rows.iter().filter(|r| r.c == 64) {
        row(
            "GET req/s, c=64: latchkey `/healthz` vs bare `/`",
            r.per_s(Kind::Healthz),
            NONE,
            r.per_s(Kind::Bare),
            0,
        );
        row(
            "GET req/s, c=64: latchkey `/healthz` at `LATCHKEY_LOG=warn` (not the default) vs bare `/`",
            r.per_s(Kind::HealthzWarn),
            NONE,
            r.per_s(Kind::Bare),
            0,
        );
    }
    for r in rows.iter().filter(|r| r.c == 1) {
        let (acquire, direct, bare) = (
            r.of(Kind::Http(Primitive::Lock)),
            r.of(own(Primitive::Lock)),
            r.of(Kind::Bare).acquire_p50_us(),
        );
        row(
            "p50 µs, c=1: acquire (direct: one script call; bare: one GET)",
            acquire.acquire_p50_us(),
            direct.acquire_p50_us(),
            bare,
            0,
        );
        row(
            "p50 µs, c=1: release (direct: one script call; bare: one GET)",
            acquire.release_p50_us(),
            direct.release_p50_us(),
            bare,
            0,
        );
        row(
            "p50 µs, c=1: acquire (direct: the bound, one bare GET + one script call)",
            acquire.acquire_p50_us(),
            bound_us(r),
            NONE,
            0,
        );
        let stack = r.of(STACK);
        row(
            "p50 µs, c=1: acquire (direct: the same on bare axum + redis-rs)",
            acquire.acquire_p50_us(),
            stack.acquire_p50_us(),
            NONE,
            0,
        );
        row(
            "p50 µs, c=1: GET `/healthz` (bare: GET `/`)",
            r.of(Kind::Healthz).acquire_p50_us(),
            NONE,
            bare,
            0,
        );
    }
    for r in rows {
        for p in Primitive::ALL {
            let what = match p {
                Primitive::Lock => String::new(),
                p => format!(", {}", p.name()),
            };
            row(
                &format!("Redis µs per script call (usec_per_call){what}, c={}", r.c),
                r.of(Kind::Http(p)).redis_us,
                r.of(own(p)).redis_us,
                NONE,
                2,
            );
        }
    }
}

/// The label of a row against a Redisson-style floor.
fn redisson_label(r: Redisson, c: usize) -> String {
    match r {
        Redisson::Lock => format!(
            "acquire+release pairs/s, c={c} vs Redisson-style RLock scripts (direct: those \
             scripts pipelined on one connection; bare: pairs of GETs)"
        ),
        Redisson::Semaphore => format!(
            "semaphore acquire+release pairs/s, c={c} vs Redisson-style permit-expirable \
             semaphore scripts (direct: those scripts pipelined on one connection, one \
             semaphore of {} permits; bare: pairs of GETs)",
            ops::SEM_PERMITS
        ),
    }
}

/// How a handoff row names its kind: plain-lock rows keep the unprefixed
/// labels of earlier runs.
fn handoff_label(kind: handoff::Kind) -> &'static str {
    match kind {
        handoff::Kind::Plain => "handoff",
        handoff::Kind::Fair => "fair handoff",
        handoff::Kind::Floor => "wake-one floor handoff (straight on Redis)",
        handoff::Kind::Bare => "bare axum handoff (HTTP only, an in-memory lock)",
        handoff::Kind::Stack => {
            "stack handoff (bare axum + redis-rs + pub/sub, the lock's own scripts)"
        }
    }
}

/// The run of reference `kind` (the floor, the bare handoff) with the
/// waiters of `r`, next to the plain lock's.
fn reference_of<'a>(
    rows: &'a [handoff::Row],
    r: &handoff::Row,
    kind: handoff::Kind,
) -> Option<&'a handoff::Row> {
    let of = |f: &&handoff::Row| f.kind == kind && f.waiters == r.waiters;
    match r.kind {
        handoff::Kind::Plain => rows.iter().find(of),
        _ => None,
    }
}

/// The plain and fair handoffs; the plain lock's next to its floor (the
/// direct column) and the stack handoff (the bare column), whose own
/// figures are in the footnotes with the bare axum handoff's.
fn handoff_rows(rows: &[handoff::Row]) {
    let references = [
        handoff::Kind::Floor,
        handoff::Kind::Bare,
        handoff::Kind::Stack,
    ];
    for r in rows.iter().filter(|r| !references.contains(&r.kind)) {
        let (what, w) = (handoff_label(r.kind), r.waiters);
        let floor = |f: fn(&handoff::Row) -> f64| {
            reference_of(rows, r, handoff::Kind::Floor).map_or(NONE, f)
        };
        let bare = |f: fn(&handoff::Row) -> f64| {
            reference_of(rows, r, handoff::Kind::Stack).map_or(NONE, f)
        };
        let direct = if r.kind == handoff::Kind::Plain {
            " (direct: the wake-one floor; bare: the stack handoff on bare axum + redis-rs)"
        } else {
            ""
        };
        row(
            &format!("{what} p50 ms, {w} waiters (release reply → next grant){direct}"),
            r.p50_ms,
            floor(|f| f.p50_ms),
            bare(|f| f.p50_ms),
            2,
        );
        row(
            &format!("{what} p99 ms, {w} waiters{direct}"),
            r.p99_ms,
            floor(|f| f.p99_ms),
            bare(|f| f.p99_ms),
            2,
        );
        row(
            &format!("Redis commands per {what}, {w} waiters{direct}"),
            r.commands_per,
            floor(|f| f.commands_per),
            bare(|f| f.commands_per),
            2,
        );
    }
}

fn fanout_rows(r: &fanout::Row) {
    let (w, n) = (r.waiters, r.instances);
    row(
        &format!(
            "latch fan-out p50 ms, {w} waiters on {n} instances (count-down reply → last waiter answered)"
        ),
        r.p50_ms,
        NONE,
        NONE,
        2,
    );
    row(
        &format!("latch fan-out p99 ms, {w} waiters on {n} instances"),
        r.p99_ms,
        NONE,
        NONE,
        2,
    );
    row(
        &format!(
            "latch fan-out p99 ms from the count-down sent, {w} waiters on {n} instances (direct: the Redis latch + pub/sub floor, from its count-down sent; bare: {w} GETs parked on the bare axum server, ONE process, from one `/unpark` sent)"
        ),
        r.p99_from_sent_ms,
        r.floor_p99_ms,
        r.bare_p99_ms,
        2,
    );
    row(
        &format!(
            "bare axum fan-out p50 ms, {w} GETs parked on ONE process (`/unpark` sent → last answered)"
        ),
        NONE,
        NONE,
        r.bare_p50_ms,
        2,
    );
    row(
        &format!("Redis commands per latch fan-out, {w} waiters"),
        r.commands_per,
        NONE,
        NONE,
        1,
    );
}

fn parked_rows(rows: &[parked::Row]) {
    let bare = (rows.iter())
        .find(|r| r.variant == parked::Variant::Bare)
        .map_or(NONE, |r| r.kib_per_waiter);
    for r in rows {
        let what = match r.variant {
            parked::Variant::LongPoll => "long-polls on one lock",
            parked::Variant::Sse => "SSE streams on one lock",
            parked::Variant::ManyObjects => "long-polls, each on its own lock",
            parked::Variant::Bare => continue, // the reference column
        };
        let measure = format!("KiB of server RSS per parked request, {} {what}", r.waiters);
        row(&measure, r.kib_per_waiter, NONE, bare, 2);
    }
}

/// Which side was saturated, per concurrency (only figures ≥ 1%).
fn busy_footnotes(rows: &[throughput::Row], labels: &[String]) {
    for r in rows {
        let kinds: Vec<String> = (r.kinds.iter())
            .map(|(kind, figures)| {
                let parts: Vec<String> = (labels.iter().zip(&figures.busy))
                    .filter(|(_, v)| **v >= 1.0)
                    .map(|(label, v)| format!("{label} {v:.0}"))
                    .collect();
                format!("{}: {}", kind.name(), parts.join(", "))
            })
            .collect();
        println!(
            "- CPU % of one core during the c={} rounds — {}.",
            r.c,
            kinds.join("; ")
        );
    }
}

/// Redis commands per handoff, most ÷ fewest waiters, for each kind (all
/// kinds run with the same waiter counts).
fn growth_footnote(rows: &[handoff::Row]) {
    let (mut counts, mut parts) = (None, Vec::new());
    // The bare handoff makes no Redis commands.
    for kind in handoff::Kind::ALL
        .into_iter()
        .filter(|&k| k != handoff::Kind::Bare)
    {
        let of_kind: Vec<&handoff::Row> = rows.iter().filter(|r| r.kind == kind).collect();
        if let [few, .., many] = of_kind.as_slice() {
            counts = Some((many.waiters, few.waiters));
            let growth = many.commands_per / few.commands_per;
            parts.push(format!("{} {}", kind.name(), fig(growth, 2)));
        }
    }
    if let Some((many, few)) = counts {
        println!(
            "- Redis commands per handoff, {many} ÷ {few} waiters: {} (a herd would scale it \
             with the waiters).",
            parts.join(", ")
        );
    }
}

/// `f` of every row: "c=1 x, c=16 y, …".
fn each_c(rows: &[throughput::Row], f: impl Fn(&throughput::Row) -> f64) -> String {
    let parts: Vec<String> = (rows.iter())
        .map(|r| format!("c={} {}", r.c, fig(f(r), 2)))
        .collect();
    parts.join(", ")
}

/// The read-lock, semaphore and fair-lock pairs against the plain-lock
/// pairs of the same rounds and against their own floors; their Redis
/// cost next to the plain lock's; their latencies at c=64.
fn primitive_footnotes(rows: &[throughput::Row]) {
    let plain = Kind::Http(Primitive::Lock);
    for p in [
        Primitive::ReadLock,
        Primitive::Semaphore,
        Primitive::FairLock,
    ] {
        let http = Kind::Http(p);
        let what = match p {
            Primitive::Semaphore => format!(
                "semaphore pairs (every worker on ONE semaphore of {} permits, one permit \
                 each: nothing waits, all contend on its keys)",
                ops::SEM_PERMITS
            ),
            Primitive::ReadLock => {
                "read-lock pairs (`/rwlocks/{name}/read/acquire`, then release)".to_string()
            }
            _ => "fair-lock pairs (`/fair-locks/{name}/acquire`, then release)".to_string(),
        };
        let latency: Vec<String> = (rows.iter().filter(|r| r.c == 64))
            .map(|r| {
                format!(
                    "; p50 µs at c=64: acquire {}, release {} (plain lock: {}, {})",
                    fig(r.of(http).acquire_p50_us(), 0),
                    fig(r.of(http).release_p50_us(), 0),
                    fig(r.of(plain).acquire_p50_us(), 0),
                    fig(r.of(plain).release_p50_us(), 0),
                )
            })
            .collect();
        println!(
            "- {what} ÷ plain-lock pairs (each worker on its own lock): {}; ÷ its own \
             floor: {}; its floor ÷ the plain lock's: {}; Redis µs per script call behind them: \
             {} (÷ the plain lock's: {}); called directly: {} (÷ the plain lock's scripts: \
             {}){}.",
            each_c(rows, |r| r.per_s(http) / r.per_s(plain)),
            each_c(rows, |r| r.per_s(http) / r.per_s(own(p))),
            each_c(rows, |r| r.per_s(own(p)) / r.per_s(own(Primitive::Lock))),
            each_c(rows, |r| r.of(http).redis_us),
            each_c(rows, |r| r.of(http).redis_us / r.of(plain).redis_us),
            each_c(rows, |r| r.of(own(p)).redis_us),
            each_c(rows, |r| r.of(own(p)).redis_us
                / r.of(own(Primitive::Lock)).redis_us),
            latency.concat()
        );
    }
}

/// How the Redisson-style floors compare with latchkey's own scripts.
fn redisson_footnote(rows: &[throughput::Row]) {
    let lock = Kind::Floor(Floor::Redisson(Redisson::Lock));
    let sem = Kind::Floor(Floor::Redisson(Redisson::Semaphore));
    println!(
        "- Redisson-style floors (EVALSHA pipelined on one connection, as a Redisson client \
         sends them; the scripts are in benches/latchkey_bench/floors.rs): RLock pairs ÷ \
         latchkey's own lock scripts (FCALL): {}; Redis µs per EVALSHA: {}; permit-expirable \
         semaphore pairs (one semaphore of {} permits, one permit each) ÷ latchkey's own \
         semaphore scripts: {}; Redis µs per EVALSHA: {}.",
        each_c(rows, |r| r.per_s(lock) / r.per_s(own(Primitive::Lock))),
        each_c(rows, |r| r.of(lock).redis_us),
        ops::SEM_PERMITS,
        each_c(rows, |r| r.per_s(sem) / r.per_s(own(Primitive::Semaphore))),
        each_c(rows, |r| r.of(sem).redis_us),
    );
}

/// RedLock and multi-lock pairs; the bare column is the pairs of GETs at
/// the same concurrency from the throughput rows.
fn alongside_rows(report: &Report) {
    for r in &report.alongside {
        let bare = (report.throughput.iter())
            .find(|t| t.c == r.c)
            .map_or(NONE, |t| t.per_s(Kind::Bare) / 2.0);
        row(
            &format!(
                "{} acquire+release pairs/s, c={} (bare: pairs of GETs)",
                r.kind.describe(),
                r.c
            ),
            r.pairs,
            NONE,
            bare,
            0,
        );
    }
}

/// The RedLock and multi-lock pairs against the plain-lock pairs of the
/// same rounds.
fn alongside_footnote(rows: &[alongside::Row]) {
    for r in rows {
        println!(
            "- {}, c={}: {} pairs/s against {} plain-lock pairs/s in the same interleaved \
             rounds (÷ {}); p50 µs: acquire {}, release {}; {}.",
            r.kind.describe(),
            r.c,
            fig(r.pairs, 0),
            fig(r.plain_pairs, 0),
            fig(r.pairs / r.plain_pairs, 2),
            fig(r.acquire_p50_us, 0),
            fig(r.release_p50_us, 0),
            r.kind.cost(),
        );
    }
}

fn footnotes(report: &Report) {
    // Each says something of every concurrency's row: none without them
    // (`LATCHKEY_BENCH_PHASES` without `throughput`).
    if !report.throughput.is_empty() {
        busy_footnotes(&report.throughput, &report.cpu_labels);
        primitive_footnotes(&report.throughput);
        redisson_footnote(&report.throughput);
    }
    alongside_footnote(&report.alongside);
    for r in &report.handoff {
        let rewon = match r.kind {
            handoff::Kind::Plain => "not a fair lock",
            handoff::Kind::Fair => "it re-queues at the tail: 0 expected",
            handoff::Kind::Floor => "it waits for a wake-up like the others",
            handoff::Kind::Bare => "it asks again only once its release is answered",
            handoff::Kind::Stack => "not a fair lock",
        };
        println!(
            "- {}, {} waiters: {} handoffs per run; p99 from release *sent* {} ms \
             (upper bound); script calls per handoff {}; the releaser re-won {}% ({rewon}); \
             {} grant(s) per run arrived before the release reply (counted 0 ms).",
            handoff_label(r.kind),
            r.waiters,
            fig(r.handoffs, 0),
            fig(r.p99_from_sent_ms, 2),
            fig(r.evalsha_per, 2),
            fig(r.rewon * 100.0, 0),
            fig(r.reordered, 0),
        );
    }
    growth_footnote(&report.handoff);
    if let Some(f) = &report.fanout {
        println!(
            "- latch fan-out: {} fan-outs counted; p99 from the count-down *sent* {} ms (upper \
             bound); Redis commands per fan-out at most {} (the count-down script and one \
             INFO included; a read per waiter would be {} or more); the bare axum fan-out (the \
             HTTP ceiling: {} GETs parked on ONE process, not {}, released by one `/unpark`) \
             p50 {} ms, p99 {} ms from `/unpark` sent.",
            f.fanouts,
            fig(f.p99_from_sent_ms, 2),
            fig(f.commands_max, 0),
            f.waiters,
            f.waiters,
            f.instances,
            fig(f.bare_p50_ms, 2),
            fig(f.bare_p99_ms, 2),
        );
    }
    for r in &report.parked {
        println!(
            "- parked {:?}: idle server RSS {} MiB.",
            r.variant,
            fig(r.rss_idle_kib / 1024.0, 1)
        );
    }
    for note in report.sections.iter().flat_map(|s| &s.notes) {
        println!("- {note}");
    }
    println!("- errors: {}.", report.errors.len());
}

pub fn print(report: &Report) {
    println!("### latchkey benchmark");
    println!();
    for note in &report.notes {
        println!("- {note}");
    }
    println!();
    goals::print(&goals::of(report));
    println!();
    println!(
        "| measure | latchkey | direct floor | bare axum | latchkey ÷ direct | latchkey ÷ bare |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    throughput_rows(&report.throughput);
    alongside_rows(report);
    handoff_rows(&report.handoff);
    if let Some(f) = &report.fanout {
        fanout_rows(f);
    }
    parked_rows(&report.parked);
    for line in report.sections.iter().flat_map(|s| &s.rows) {
        row(
            &line.measure,
            line.latchkey,
            line.direct,
            line.bare,
            line.decimals,
        );
    }
    println!();
    footnotes(report);
}
