//! The output: machine notes, then ONE markdown table, then footnotes.
//! The throughput rows come per concurrency: plain-lock, read-lock and
//! semaphore pairs (the semaphore's against the plain lock's direct floor,
//! its share of the plain-lock rate and its c=64 latencies in a footnote).

use crate::{alongside, fanout, handoff, parked, throughput};

/// Everything measured.
pub struct Report {
    /// One line each, printed above the table.
    pub notes: Vec<String>,
    pub throughput: Vec<throughput::Row>,
    pub handoff: Vec<handoff::Row>,
    pub fanout: fanout::Row,
    pub parked: Vec<parked::Row>,
    /// Kinds measured next to plain locks.
    pub alongside: Vec<alongside::Row>,
    /// Labels of the CPU figures of the throughput rows.
    pub cpu_labels: Vec<String>,
    pub errors: Vec<String>,
}

/// A figure with `decimals` digits, "—" when there is none.
fn fig(value: f64, decimals: usize) -> String {
    if value.is_finite() {
        format!("{value:.decimals$}")
    } else {
        "—".to_string()
    }
}

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

fn throughput_rows(rows: &[throughput::Row]) {
    for r in rows {
        let c = r.c;
        let bare_pairs = r.bare_rps / 2.0;
        row(
            &format!("acquire+release pairs/s, c={c} (bare: pairs of GETs)"),
            r.latchkey_pairs,
            r.direct_pairs,
            bare_pairs,
            0,
        );
        // The direct floor is the plain lock's scripts: no ratio to it.
        row(
            &format!("read-lock acquire+release pairs/s, c={c} (bare: pairs of GETs)"),
            r.read_pairs,
            NONE,
            bare_pairs,
            0,
        );
        // Against the same floor as plain locks (their scripts): how far
        // the semaphore is from the cheapest acquire+release there is.
        row(
            &format!(
                "semaphore acquire+release pairs/s, c={c}, all on one semaphore of {} permits \
                 (direct: the plain lock's scripts; bare: pairs of GETs)",
                throughput::SEM_PERMITS
            ),
            r.sem_pairs,
            r.direct_pairs,
            bare_pairs,
            0,
        );
    }
    for r in rows.iter().filter(|r| r.c == 64) {
        row(
            "GET req/s, c=64: latchkey `/healthz` vs bare `/`",
            r.healthz_rps,
            NONE,
            r.bare_rps,
            0,
        );
    }
    for r in rows.iter().filter(|r| r.c == 1) {
        row(
            "p50 µs, c=1: acquire (direct: one script call; bare: one GET)",
            r.acquire_p50_us,
            r.direct_acquire_p50_us,
            r.bare_p50_us,
            0,
        );
        row(
            "p50 µs, c=1: release (direct: one script call; bare: one GET)",
            r.release_p50_us,
            r.direct_release_p50_us,
            r.bare_p50_us,
            0,
        );
        row(
            "p50 µs, c=1: GET `/healthz` (bare: GET `/`)",
            r.healthz_p50_us,
            NONE,
            r.bare_p50_us,
            0,
        );
    }
    for r in rows {
        row(
            &format!("Redis µs per EVALSHA (usec_per_call), c={}", r.c),
            r.redis_us_latchkey,
            r.redis_us_direct,
            NONE,
            2,
        );
    }
}

/// How a handoff row names its kind: plain-lock rows keep the unprefixed
/// labels of earlier runs.
fn handoff_label(kind: handoff::Kind) -> &'static str {
    match kind {
        handoff::Kind::Plain => "handoff",
        handoff::Kind::Fair => "fair handoff",
    }
}

fn handoff_rows(rows: &[handoff::Row]) {
    for r in rows {
        let (what, w) = (handoff_label(r.kind), r.waiters);
        row(
            &format!("{what} p50 ms, {w} waiters (release reply → next grant)"),
            r.p50_ms,
            NONE,
            NONE,
            2,
        );
        row(
            &format!("{what} p99 ms, {w} waiters"),
            r.p99_ms,
            NONE,
            NONE,
            2,
        );
        row(
            &format!("Redis commands per {what}, {w} waiters"),
            r.commands_per,
            NONE,
            NONE,
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
        let kinds: Vec<String> = (r.busy.iter())
            .map(|(kind, busy)| {
                let parts: Vec<String> = (labels.iter().zip(busy))
                    .filter(|(_, v)| **v >= 1.0)
                    .map(|(label, v)| format!("{label} {v:.0}"))
                    .collect();
                format!("{kind}: {}", parts.join(", "))
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
    for kind in handoff::Kind::ALL {
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

/// The read-lock pairs against the plain-lock pairs of the same rounds.
fn read_lock_footnote(rows: &[throughput::Row]) {
    let each = |f: fn(&throughput::Row) -> f64, decimals: usize| -> String {
        let parts: Vec<String> = (rows.iter())
            .map(|r| format!("c={} {}", r.c, fig(f(r), decimals)))
            .collect();
        parts.join(", ")
    };
    let ratio = each(|r| r.read_pairs / r.latchkey_pairs, 2);
    let redis_us = each(|r| r.redis_us_read, 2);
    let latency: Vec<String> = (rows.iter().filter(|r| r.c == 1))
        .map(|r| {
            format!(
                "; p50 µs at c=1: acquire {}, release {}",
                fig(r.read_acquire_p50_us, 0),
                fig(r.read_release_p50_us, 0)
            )
        })
        .collect();
    println!(
        "- read-lock pairs (`/rwlocks/{{name}}/read/acquire`, then release) ÷ plain-lock \
         pairs: {ratio}; Redis µs per EVALSHA behind them: {redis_us}{}.",
        latency.concat()
    );
}

/// The semaphore pairs against the plain-lock pairs of the same rounds;
/// the latencies at the concurrency they are meant for (c=64).
fn semaphore_footnote(rows: &[throughput::Row]) {
    let each = |f: fn(&throughput::Row) -> f64| -> String {
        let parts: Vec<String> = (rows.iter())
            .map(|r| format!("c={} {}", r.c, fig(f(r), 2)))
            .collect();
        parts.join(", ")
    };
    let ratio = each(|r| r.sem_pairs / r.latchkey_pairs);
    let redis_us = each(|r| r.redis_us_sem);
    let latency: Vec<String> = (rows.iter().filter(|r| r.c == 64))
        .map(|r| {
            format!(
                "; p50 µs at c=64: acquire {}, release {} (plain lock: {}, {})",
                fig(r.sem_acquire_p50_us, 0),
                fig(r.sem_release_p50_us, 0),
                fig(r.acquire_p50_us, 0),
                fig(r.release_p50_us, 0),
            )
        })
        .collect();
    println!(
        "- semaphore pairs (every worker on ONE semaphore of {} permits, one permit each: \
         nothing waits, all contend on its keys) ÷ plain-lock pairs (each worker on its own \
         lock): {ratio}; Redis µs per EVALSHA behind them: {redis_us}{}.",
        throughput::SEM_PERMITS,
        latency.concat()
    );
}

/// RedLock and multi-lock pairs; the bare column is the pairs of GETs at
/// the same concurrency from the throughput rows.
fn alongside_rows(report: &Report) {
    for r in &report.alongside {
        let bare = (report.throughput.iter())
            .find(|t| t.c == r.c)
            .map_or(NONE, |t| t.bare_rps / 2.0);
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
    busy_footnotes(&report.throughput, &report.cpu_labels);
    read_lock_footnote(&report.throughput);
    semaphore_footnote(&report.throughput);
    alongside_footnote(&report.alongside);
    for r in &report.handoff {
        let rewon = match r.kind {
            handoff::Kind::Plain => "not a fair lock",
            handoff::Kind::Fair => "it re-queues at the tail: 0 expected",
        };
        println!(
            "- {}, {} waiters: {} handoffs per run; p99 from release *sent* {} ms \
             (upper bound); EVALSHA per handoff {}; the releaser re-won {}% ({rewon}); \
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
    let f = &report.fanout;
    println!(
        "- latch fan-out: {} fan-outs counted; p99 from the count-down *sent* {} ms (upper \
         bound); Redis commands per fan-out at most {} (the count-down script and one INFO \
         included; a read per waiter would be {} or more).",
        f.fanouts,
        fig(f.p99_from_sent_ms, 2),
        fig(f.commands_max, 0),
        f.waiters,
    );
    for r in &report.parked {
        println!(
            "- parked {:?}: idle server RSS {} MiB.",
            r.variant,
            fig(r.rss_idle_kib / 1024.0, 1)
        );
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
    println!(
        "| measure | latchkey | direct floor | bare axum | latchkey ÷ direct | latchkey ÷ bare |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    throughput_rows(&report.throughput);
    alongside_rows(report);
    handoff_rows(&report.handoff);
    fanout_rows(&report.fanout);
    parked_rows(&report.parked);
    println!();
    footnotes(report);
}
