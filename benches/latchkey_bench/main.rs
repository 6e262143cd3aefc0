//! latchkey's benchmark: `cargo bench --bench latchkey-bench`
//! (`-- --quick` or `LATCHKEY_BENCH_QUICK=1` for a fast smoke run).
//!
//! It runs the real release binary as its own process against its own
//! redis-server, with both pinned to one core and this process (the load
//! generator) pinned to another, next to its references: a bare axum server
//! (this benchmark re-executed, same core as the service — the HTTP
//! ceiling) and the floors, Lua scripts called directly on Redis over one
//! multiplexed connection: each primitive's own scripts, and Redisson-style
//! lock and semaphore scripts ([`floors`]). It measures uncontended
//! throughput and latency of plain, read and fair locks, and of one
//! semaphore shared by all workers with a permit for each
//! ([`throughput`]), handoff latency and Redis commands per handoff on a
//! plain and on a fair lock, next to the same handoff straight on Redis
//! with one wake-up per release ([`handoff`], [`wakeone`]), a latch's
//! fan-out to 100 waiters on two service instances next to 100 requests
//! parked on the bare server and released at once ([`fanout`]), memory
//! per parked waiter ([`parked`]), and RedLock pairs over three nodes and
//! multi-lock pairs next to plain-lock pairs ([`alongside`]) — and, given
//! another build as `LATCHKEY_BENCH_BASELINE`, that build's plain-lock
//! pairs next to this one's — each figure the median of interleaved
//! rounds, and prints the goals table ([`goals`]) and one markdown table
//! ([`report`]). Any failed request or check (a script's reply included)
//! makes it exit non-zero (after printing), so a broken service cannot
//! produce a good-looking number.

mod alongside;
mod bare;
mod client;
mod cpu;
mod fanout;
mod floors;
mod goals;
mod handoff;
mod handofflog;
mod measured;
mod ops;
mod parked;
mod pinning;
mod procs;
mod ratelimit;
mod redisinfo;
mod report;
mod stats;
mod tasks;
mod throughput;
mod verdict;
mod wakeone;

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use cpu::Watch;
use pinning::Placement;
use redisinfo::Redis;

/// Concurrency levels of the throughput runs.
const CONCURRENCY: [usize; 3] = [1, 16, 64];

// The semaphore kind has a permit for every worker: nothing may wait.
const _: () = {
    let mut i = 0;
    while i < CONCURRENCY.len() {
        assert!(CONCURRENCY[i] <= ops::SEM_PERMITS);
        i += 1;
    }
};
/// Waiter counts of the handoff runs.
const WAITERS: [usize; 2] = [8, 64];

/// The path of another build of the service to compare with this one
/// (plain-lock pairs at c=16 and c=64, in interleaved rounds).
const BASELINE: &str = "LATCHKEY_BENCH_BASELINE";
/// Waiters of a latch fan-out (spread over two service instances).
const FANOUT_WAITERS: usize = 100;

/// The phases of a run, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Pairs, floors, `/healthz` and the stack floor at every concurrency.
    Throughput,
    /// RedLock and multi-lock pairs (and the baseline build's) next to
    /// plain-lock pairs.
    Alongside,
    RateLimiters,
    Handoff,
    Fanout,
    Parked,
}

impl Phase {
    const ALL: [Phase; 6] = [
        Phase::Throughput,
        Phase::Alongside,
        Phase::RateLimiters,
        Phase::Handoff,
        Phase::Fanout,
        Phase::Parked,
    ];

    fn name(self) -> &'static str {
        match self {
            Phase::Throughput => "throughput",
            Phase::Alongside => "alongside",
            Phase::RateLimiters => "rate-limiters",
            Phase::Handoff => "handoff",
            Phase::Fanout => "fanout",
            Phase::Parked => "parked",
        }
    }

    /// `LATCHKEY_BENCH_PHASES`: a comma-separated list of phase names, or
    /// every phase when unset.
    fn chosen(list: Option<&str>) -> Result<Vec<Phase>, String> {
        let Some(list) = list else {
            return Ok(Phase::ALL.to_vec());
        };
        let names: Vec<&str> = list.split(',').map(str::trim).collect();
        let every = || Phase::ALL.map(Phase::name).join(", ");
        for name in &names {
            if !Phase::ALL.iter().any(|p| p.name() == *name) {
                return Err(format!(
                    "LATCHKEY_BENCH_PHASES: no phase {name:?} (the phases: {})",
                    every()
                ));
            }
        }
        Ok(Phase::ALL
            .into_iter()
            .filter(|p| names.contains(&p.name()))
            .collect())
    }
}

/// How long and how often; see [`Settings::read`].
#[derive(Debug)]
struct Settings {
    quick: bool,
    /// The phases to run ([`Phase::chosen`]).
    phases: Vec<Phase>,
    rounds: usize,
    throughput: throughput::Timing,
    handoff: handoff::Timing,
    parked: usize,
    /// Counted latch fan-outs per round.
    fanouts: usize,
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

impl Settings {
    /// Full run by default; `--quick` / `LATCHKEY_BENCH_QUICK=1` shortens
    /// everything. `LATCHKEY_BENCH_ROUNDS`, `LATCHKEY_BENCH_ROUND_MS` (one
    /// measured throughput round), `LATCHKEY_BENCH_HANDOFF_MS` (one handoff
    /// run), `LATCHKEY_BENCH_PARKED` (waiters parked) and
    /// `LATCHKEY_BENCH_FANOUTS` (latch fan-outs per round) override either;
    /// `LATCHKEY_BENCH_PHASES` runs only the phases it names.
    fn read() -> Result<Settings, String> {
        let quick = std::env::args().any(|a| a == "--quick")
            || std::env::var("LATCHKEY_BENCH_QUICK").is_ok_and(|v| v == "1");
        let pick = |name: &str, full: u64, fast: u64| {
            env_number(name).unwrap_or(if quick { fast } else { full })
        };
        let round_ms = pick("LATCHKEY_BENCH_ROUND_MS", 1000, 200);
        let handoff_ms = pick("LATCHKEY_BENCH_HANDOFF_MS", 4000, 1000);
        let phases = std::env::var("LATCHKEY_BENCH_PHASES").ok();
        Ok(Settings {
            quick,
            phases: Phase::chosen(phases.as_deref())?,
            rounds: pick("LATCHKEY_BENCH_ROUNDS", 5, 1).max(1) as usize,
            throughput: throughput::Timing {
                warm_up: Duration::from_millis(round_ms * 3 / 10),
                measure: Duration::from_millis(round_ms),
            },
            handoff: handoff::Timing {
                run: Duration::from_millis(handoff_ms),
                warm_up: Duration::from_millis(handoff_ms / 8),
            },
            parked: pick("LATCHKEY_BENCH_PARKED", 10_000, 1_000).max(1) as usize,
            fanouts: pick("LATCHKEY_BENCH_FANOUTS", 20, 5).max(1) as usize,
        })
    }

    fn runs(&self, phase: Phase) -> bool {
        self.phases.contains(&phase)
    }
}

impl Settings {
    /// The note that says what ran and for how long.
    fn describe(&self, redis_version: &str) -> String {
        format!(
            "redis-server {redis_version} (no persistence) and the release `latchkey` binary \
             at its default settings (log level info; max_waiters and max_wait_ms raised for \
             the parked runs only; one more instance at log level warn for the extra \
             `/healthz` row) on loopback; \
             {} interleaved rounds per figure, medians; throughput rounds {:?} (every kind \
             twice, in order then in reverse, half of it each, after {:?} of warm-up each); \
             handoff runs {:?}; {} latch fan-outs per round (after one warm-up); \
             {} parked requests on a fresh server per round{}{}",
            self.rounds,
            self.throughput.measure,
            self.throughput.warm_up,
            self.handoff.run,
            self.fanouts,
            self.parked,
            if self.quick { "; QUICK MODE" } else { "" },
            if self.phases.len() < Phase::ALL.len() {
                let names: Vec<&str> = self.phases.iter().map(|p| p.name()).collect();
                format!(
                    "; ONLY THE PHASES {} (LATCHKEY_BENCH_PHASES): rows and goals of the others \
                     are left out",
                    names.join(", ")
                )
            } else {
                String::new()
            }
        )
    }
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some(bare::MARKER) {
        return bare::serve();
    }
    let settings = match Settings::read() {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("benchmark FAILED: {e}");
            return ExitCode::FAILURE;
        }
    };
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let placement = Placement::apply();
    let nofile = pinning::raise_nofile();
    let notes = vec![
        machine_note(cores),
        placement.note.clone(),
        format!("open-file limit raised to {nofile} (bench) and to the hard limit (children)"),
    ];
    match run(&settings, &placement, notes) {
        Ok(report) if report.errors.is_empty() => {
            report::print(&report);
            ExitCode::SUCCESS
        }
        Ok(report) => {
            report::print(&report);
            eprintln!("benchmark FAILED: {} error(s):", report.errors.len());
            report.errors.iter().for_each(|e| eprintln!("  - {e}"));
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("benchmark FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Cores, CPU model and load before the run.
fn machine_note(cores: usize) -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, m)| m.trim())
        })
        .unwrap_or("unknown CPU");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().next().unwrap_or("?");
    format!("{cores} core(s) available ({model}); 1-min load average {load} before the run")
}

/// The long-lived children: Redis, the service, the bare server.
struct Children {
    redis: procs::Child,
    redis_url: String,
    service: procs::Service,
    /// A second instance on the same core and Redis (latch fan-out).
    second: procs::Service,
    /// An instance at `LATCHKEY_LOG=warn` (the extra `/healthz` row).
    warn: procs::Service,
    bare: procs::Child,
    bare_url: String,
    /// The RedLock nodes the service uses (kept alive with it).
    redlock_nodes: Vec<procs::Child>,
    /// Another build compared with this one (`LATCHKEY_BENCH_BASELINE`),
    /// on the same core and Redis.
    baseline: Option<procs::Service>,
}

/// Starts the children, runs every phase, and stops everything.
fn run(
    settings: &Settings,
    placement: &Placement,
    notes: Vec<String>,
) -> Result<measured::Report, String> {
    let cpu = placement.server_cpu;
    let (redis, redis_url) = procs::start_redis(cpu)?;
    let mut redlock_nodes = Vec::new();
    let mut redlock_urls = Vec::new();
    for _ in 0..alongside::NODES {
        let (node, url) = procs::start_redis(cpu)?;
        redlock_nodes.push(node);
        redlock_urls.push(url);
    }
    // Defaults suit the handoff runs; the parked phase starts its own.
    let nodes = ("LATCHKEY_REDLOCK_NODES", redlock_urls.join(","));
    let service = procs::start_service_with(cpu, &redis_url, None, std::slice::from_ref(&nodes))?;
    let second = procs::start_service_with(cpu, &redis_url, None, &[nodes])?;
    // Its "latchkey listening" line (info) still names its address.
    let warn_log = ("LATCHKEY_LOG", "warn,latchkey::app=info".to_string());
    let warn = procs::start_service_with(cpu, &redis_url, None, &[warn_log])?;
    let (bare, bare_url) = procs::start_bare(cpu, bare::MARKER, Some(&redis_url))?;
    let baseline = match std::env::var_os(BASELINE) {
        Some(path) => Some(procs::start_build(
            cpu,
            Path::new(&path),
            &redis_url,
            None,
            &[],
        )?),
        None => None,
    };
    let children = Children {
        redis,
        redis_url,
        service,
        second,
        warn,
        bare,
        bare_url,
        redlock_nodes,
        baseline,
    };
    // Its worker threads inherit this thread's core (the load generator's).
    let runtime = tokio::runtime::Runtime::new().map_err(|e| format!("tokio runtime: {e}"))?;
    let result = runtime.block_on(phases(settings, placement, &children, notes));
    runtime.shutdown_timeout(Duration::from_secs(2));
    result
}

async fn phases(
    settings: &Settings,
    placement: &Placement,
    children: &Children,
    mut notes: Vec<String>,
) -> Result<measured::Report, String> {
    let admin = Redis::connect(&children.redis_url).await?;
    let version = admin.field("server", "redis_version").await?;
    notes.push(settings.describe(&version));
    notes.push(format!(
        "the service has {} RedLock nodes (redis-servers without persistence, on its core)",
        children.redlock_nodes.len()
    ));
    let client = client::build()?;
    let targets = throughput::Targets {
        latchkey: children.service.base.clone(),
        warn: children.warn.base.clone(),
        baseline: children.baseline.as_ref().map(|b| b.base.clone()),
        bare: children.bare_url.clone(),
        direct: Redis::connect(&children.redis_url).await?.conn(),
        admin: admin.clone(),
        watch: watch(placement, children),
    };
    let mut throughput = Vec::new();
    let concurrency: &[usize] = match settings.runs(Phase::Throughput) {
        true => &CONCURRENCY,
        false => &[],
    };
    for &c in concurrency {
        throughput
            .push(throughput::measure(&targets, c, settings.rounds, settings.throughput).await);
    }
    let mut alongside = Vec::new();
    let (rounds, timing) = (settings.rounds, settings.throughput);
    if settings.runs(Phase::Alongside) {
        for kind in [alongside::Kind::RedLock, alongside::Kind::MultiLock] {
            alongside.push(alongside::measure(&targets, kind, 16, rounds, timing).await);
        }
        if targets.baseline.is_some() {
            for c in [16, 64] {
                let kind = alongside::Kind::Baseline;
                alongside.push(alongside::measure(&targets, kind, c, rounds, timing).await);
            }
        }
    }
    let (sections, rate_errors) = match settings.runs(Phase::RateLimiters) {
        true => {
            let (rate_limiters, errors) = ratelimit::measure(&targets, rounds, timing).await;
            (vec![rate_limiters], errors)
        }
        false => (Vec::new(), Vec::new()),
    };
    let base = &children.service.base;
    let setup = handoff::Setup {
        client: client.clone(),
        base: base.clone(),
        admin: admin.clone(),
        redis_url: children.redis_url.clone(),
        direct: Redis::connect(&children.redis_url).await?.conn(),
        bare: children.bare_url.clone(),
    };
    let handoff = match settings.runs(Phase::Handoff) {
        true => handoff::measure(&setup, &WAITERS, settings.rounds, settings.handoff).await,
        false => Vec::new(),
    };
    let bases = [base.clone(), children.second.base.clone()];
    let fanout = match settings.runs(Phase::Fanout) {
        true => Some(
            fanout::measure(
                &client,
                &bases,
                &children.bare_url,
                (&admin, (&children.redis_url, &setup.direct)),
                FANOUT_WAITERS,
                settings.rounds,
                settings.fanouts,
            )
            .await,
        ),
        false => None,
    };
    let setup = parked::Setup {
        cpu: placement.server_cpu,
        redis_url: children.redis_url.clone(),
        waiters: settings.parked,
        // Few: the allocator keeps what they freed for the measured run.
        warm_up: (settings.parked / 1000).max(10),
    };
    let parked = match settings.runs(Phase::Parked) {
        true => parked::measure(&setup, settings.rounds).await,
        false => Vec::new(),
    };
    let errors = (throughput.iter().flat_map(|r| r.errors.clone()))
        .chain(handoff.iter().flat_map(|r| r.errors.clone()))
        .chain(fanout.iter().flat_map(|r| r.errors.clone()))
        .chain(parked.iter().flat_map(|r| r.errors.clone()))
        .chain(alongside.iter().flat_map(|r| r.errors.clone()))
        .chain(rate_errors)
        .collect();
    Ok(measured::Report {
        notes,
        throughput,
        handoff,
        fanout,
        parked,
        alongside,
        // Later phases that add rows, goals and footnotes of their own.
        sections,
        cpu_labels: targets.watch.labels(),
        errors,
    })
}

/// The cores in use (all allowed ones when unpinned) and our processes.
fn watch(placement: &Placement, children: &Children) -> Watch {
    let cores = match (placement.server_cpu, placement.client_cpu) {
        (Some(server), Some(client)) => vec![server, client],
        _ => pinning::allowed_cpus(),
    };
    Watch {
        cores,
        processes: vec![
            ("latchkey", children.service.child.pid()),
            ("redis-server", children.redis.pid()),
            ("bare axum", children.bare.pid()),
            ("load generator", std::process::id()),
        ],
    }
}
