//! `latchkey` as a client of a latchkey service, in the same binary as the
//! server: run a command under a lock, a read or write lock or semaphore
//! permits, wait on a latch or count one down, take rate-limiter permits,
//! run a command in a session, list objects or show one (the book's "Client
//! tools" (docs/src/client-tools.md)).
//!
//! ```text
//! latchkey lock NAME [--fair] [--wait-ms N] [--lease-ms N] [--holder ID] -- cmd args…
//! latchkey rwlock NAME --read|--write … -- cmd args…
//! latchkey semaphore NAME [--permits K] … -- cmd args…
//! latchkey latch wait NAME [--wait-ms N]
//! latchkey latch count-down NAME [--by N] [--idempotency-key K]
//! latchkey rate NAME [--key K] [--permits N] [--wait-ms N] [-- cmd args…]
//! latchkey rate NAME --configure --rate N --per-ms P [--burst B]
//! latchkey session [--ttl-ms N] -- cmd args…
//! latchkey ls KIND [--prefix P] [--limit N] [--json]
//! latchkey status KIND NAME [--json]
//! ```

mod service;
mod show;
mod supervise;

use std::cell::RefCell;
use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use reqwest::Method;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

use crate::owner::{MAX_OWNER, unprintable};

use service::{Again, Answer, Failure, Service};
use supervise::{Hold, Signals};

/// Exit codes of the client commands besides the command's own (and 128+n
/// for a command ended by signal n); the book's "Client tools"
/// (docs/src/client-tools.md) lists them.
pub mod exit {
    /// The service refused the request (a bad name or value, a semaphore
    /// or latch that does not exist), or the command line is wrong.
    pub const USAGE: u8 = 64;
    /// The service could not be reached, or kept failing, within the wait.
    pub const UNAVAILABLE: u8 = 69;
    /// Not acquired within the wait (a latch: not open within the wait).
    pub const NOT_ACQUIRED: u8 = 75;
    /// The hold (or the session) was lost while the command ran; the
    /// command was stopped.
    pub const HOLD_LOST: u8 = 76;
    /// The command could not be started (not executable).
    pub const CANNOT_EXECUTE: u8 = 126;
    /// The command was not found.
    pub const NOT_FOUND: u8 = 127;
}

/// The first words that make `latchkey` a client rather than the server.
const SUBCOMMANDS: [&str; 8] = [
    "lock",
    "rwlock",
    "semaphore",
    "latch",
    "rate",
    "session",
    "ls",
    "status",
];

#[derive(Debug, Parser)]
#[command(
    name = "latchkey",
    version,
    about = "latchkey's client tools: run a command under a lock or in a session, take rate-limiter \
             permits, use a latch, or list and inspect objects",
    after_help = "Exit codes: the command's own (128+n if signal n ended it, or came \
                  while waiting for the hold); 64 refused or bad usage; 69 latchkey unreachable; \
                  75 not acquired (latch: not open; rate: not admitted) within the wait; \
                  76 the hold (or session) was lost and the command stopped; \
                  126/127 the command could not be run. \
                  `latchkey` or `latchkey serve` runs the server."
)]
struct ClientCli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a command while holding a lock (reentrant; --fair for a fair lock).
    Lock {
        /// The lock's name.
        name: String,
        /// Use a fair lock (/fair-locks): granted in order of arrival.
        #[arg(long)]
        fair: bool,
        #[command(flatten)]
        hold: HoldArgs,
    },
    /// Run a command while holding a read or a write lock of a read-write lock.
    Rwlock {
        /// The read-write lock's name.
        name: String,
        /// Hold the read lock (shared with other readers).
        #[arg(long, conflicts_with = "write", required_unless_present = "write")]
        read: bool,
        /// Hold the write lock (exclusive).
        #[arg(long)]
        write: bool,
        #[command(flatten)]
        hold: HoldArgs,
    },
    /// Run a command while holding permits of a semaphore (configured with PUT first).
    Semaphore {
        /// The semaphore's name.
        name: String,
        /// How many permits to hold.
        #[arg(long, default_value_t = 1)]
        permits: u64,
        #[command(flatten)]
        hold: HoldArgs,
    },
    /// Wait on a count-down latch, or count one down.
    #[command(subcommand)]
    Latch(LatchCommand),
    /// Take permits of a rate limiter (configured first, with --configure
    /// or PUT), then run a command if one is given; exit 75 when not
    /// admitted within the wait.
    Rate(RateArgs),
    /// Run a command in a session: holds its nested `latchkey lock
    /// --session "$LATCHKEY_SESSION"` (and siblings) take live as long as
    /// the session, which is renewed while the command runs and ended
    /// (releasing them all) when it exits.
    Session {
        #[command(flatten)]
        service: ServiceArgs,
        /// The session's TTL, in ms (renewed by heartbeats while the
        /// command runs); the service's default when omitted.
        #[arg(long)]
        ttl_ms: Option<u64>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// List the objects of a kind (every page): name, state and holders' owners.
    Ls {
        /// locks, fair-locks, rwlocks, semaphores, latches, redlocks,
        /// rate-limiters or sessions (or the singular).
        kind: String,
        /// Only names that start with this.
        #[arg(long)]
        prefix: Option<String>,
        /// At most this many objects in all.
        #[arg(long)]
        limit: Option<u64>,
        /// Print the items as one JSON array instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        service: ServiceArgs,
    },
    /// Show one object's state: its columns, then one line per hold.
    Status {
        /// locks, fair-locks, rwlocks, semaphores, latches, redlocks or
        /// rate-limiters (or the singular).
        kind: String,
        /// The object's name.
        name: String,
        /// Print the state as JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        service: ServiceArgs,
    },
}

#[derive(Debug, Subcommand)]
enum LatchCommand {
    /// Wait until the latch opens; exit 0 when it is open, 75 when the wait passed.
    Wait {
        /// The latch's name.
        name: String,
        #[command(flatten)]
        service: ServiceArgs,
        /// How long to wait, in ms (0: look once); without it, until it opens.
        #[arg(long)]
        wait_ms: Option<u64>,
    },
    /// Count the latch down; prints its count and whether it opened.
    CountDown {
        /// The latch's name.
        name: String,
        #[command(flatten)]
        service: ServiceArgs,
        /// How much to count down.
        #[arg(long, default_value_t = 1)]
        by: u64,
        /// Counts once however often it is sent (within 10 minutes); a
        /// random key is used when none is given, so this command's own
        /// retry counts once.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
}

#[derive(Debug, Args)]
struct ServiceArgs {
    /// latchkey's base URL.
    #[arg(long, env = "LATCHKEY_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// The API key, when the service has keys configured (prefer the
    /// variable: a flag shows in the process list).
    #[arg(long, env = "LATCHKEY_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
}

impl ServiceArgs {
    fn service(&self) -> Result<Service, Stop> {
        Service::new(&self.url, self.api_key.as_deref()).map_err(|e| Stop::new(exit::USAGE, e))
    }
}

#[derive(Debug, Args)]
struct HoldArgs {
    #[command(flatten)]
    service: ServiceArgs,
    /// How long to wait for the hold, in ms (0: try once); without it, until acquired.
    #[arg(long)]
    wait_ms: Option<u64>,
    /// The hold's lease, in ms (renewed by heartbeats while the command runs);
    /// the service's default when omitted.
    #[arg(long)]
    lease_ms: Option<u64>,
    /// The holder id (a capability: whoever knows it can renew and release
    /// the hold); a random one when omitted.
    #[arg(long)]
    holder: Option<String>,
    /// Take the hold in this session, in place of a lease: the session
    /// renews it, and its end releases it. Default: LATCHKEY_SESSION
    /// (which `latchkey session` sets for its command), unless --lease-ms
    /// is given: a command with a lease of its own keeps it, in a session
    /// or not.
    #[arg(long, conflicts_with = "lease_ms")]
    session: Option<String>,
    #[command(flatten)]
    run: RunArgs,
}

/// The command a hold (or a session) runs, and how.
#[derive(Debug, Args)]
struct RunArgs {
    /// The owner label of the hold (or session): not a secret, shown to
    /// every client of the namespace (state reads, listings, and to
    /// whoever is refused). Default: "<host> pid <pid> <command>". At most
    /// 200 bytes; control characters are replaced.
    #[arg(long)]
    owner: Option<String>,
    /// After the hold is lost, how long the command has between SIGTERM
    /// and SIGKILL, in ms.
    #[arg(long, visible_alias = "kill-after", default_value_t = 10_000)]
    kill_after_ms: u64,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

#[derive(Debug, Args)]
struct RateArgs {
    /// The rate limiter's name.
    name: String,
    #[command(flatten)]
    service: ServiceArgs,
    /// Draw from this key's own bucket (a user, an IP address), with the
    /// limiter's configuration; without it, the limiter's one bucket.
    #[arg(long, conflicts_with = "configure")]
    key: Option<String>,
    /// How many permits to take.
    #[arg(long, default_value_t = 1, conflicts_with = "configure")]
    permits: u64,
    /// How long to wait for the permits, in ms (0: now or never).
    #[arg(long, default_value_t = 0, conflicts_with = "configure")]
    wait_ms: u64,
    /// Configure the limiter (PUT) instead of taking permits: --rate
    /// permits per --per-ms, at most --burst at once. Prints the
    /// configuration.
    #[arg(long, requires_all = ["rate", "per_ms"])]
    configure: bool,
    /// With --configure: permits per --per-ms.
    #[arg(long, requires = "configure")]
    rate: Option<u64>,
    /// With --configure: the period of --rate, in ms.
    #[arg(long, requires = "configure")]
    per_ms: Option<u64>,
    /// With --configure: the most permits admitted at once (default: --rate).
    #[arg(long, requires = "configure")]
    burst: Option<u64>,
    /// The command to run once admitted, after `--` (without one, latchkey
    /// exits 0 when admitted).
    #[arg(last = true, value_name = "COMMAND", conflicts_with = "configure")]
    command: Vec<OsString>,
}

/// Runs the client command when `args` (with the program name first) asks
/// for one, or `None` when they are the server's.
pub fn run_if_client(args: &[OsString]) -> Option<ExitCode> {
    let first = args.get(1)?.to_str()?;
    if !SUBCOMMANDS.contains(&first) {
        return None;
    }
    let cli = match ClientCli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return Some(ExitCode::from(if e.use_stderr() { exit::USAGE } else { 0 }));
        }
    };
    // One thread: the command is spawned from the main thread, which lives
    // as long as latchkey does (see `child::die_with_parent`).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    Some(ExitCode::from(runtime.block_on(run(cli.command))))
}

async fn run(command: Command) -> u8 {
    let outcome = match command {
        Command::Lock { name, fair, hold } => {
            let kind = if fair { Kind::FairLock } else { Kind::Lock };
            hold_and_run(Target { kind, name }, hold).await
        }
        Command::Rwlock {
            name, write, hold, ..
        } => {
            let kind = if write { Kind::Write } else { Kind::Read };
            hold_and_run(Target { kind, name }, hold).await
        }
        Command::Semaphore {
            name,
            permits,
            hold,
        } => {
            let kind = Kind::Semaphore { permits };
            hold_and_run(Target { kind, name }, hold).await
        }
        Command::Rate(args) if args.configure => configure_rate(&args).await,
        Command::Rate(args) => rate(args).await,
        Command::Session {
            service,
            ttl_ms,
            run,
        } => session(&service, ttl_ms, run).await,
        Command::Latch(LatchCommand::Wait {
            name,
            service,
            wait_ms,
        }) => latch_wait(&name, &service, wait_ms).await,
        Command::Latch(LatchCommand::CountDown {
            name,
            service,
            by,
            idempotency_key,
        }) => count_down(&name, &service, by, idempotency_key).await,
        Command::Ls {
            kind,
            prefix,
            limit,
            json,
            service,
        } => ls(&kind, prefix.as_deref(), limit, json, &service).await,
        Command::Status {
            kind,
            name,
            json,
            service,
        } => show_status(&kind, &name, json, &service).await,
    };
    match outcome {
        Ok(code) => code,
        Err(Stop { code, message }) => {
            eprintln!("latchkey: {message}");
            code
        }
    }
}

/// Why a client command ends without running (or finishing) its work.
struct Stop {
    code: u8,
    message: String,
}

impl Stop {
    fn new(code: u8, message: impl Into<String>) -> Self {
        Stop {
            code,
            message: message.into(),
        }
    }

    /// The stop for a failed request about `what`.
    fn from_failure(what: &str, failure: Failure) -> Self {
        match failure {
            Failure::NotYet(answer) => Stop::new(
                exit::NOT_ACQUIRED,
                format!(
                    "{what}: not acquired within the wait: {}{}",
                    answer.detail(),
                    answer
                        .held_by()
                        .map(|owners| format!("; held by {owners}"))
                        .unwrap_or_default()
                ),
            ),
            Failure::Refused(answer) => {
                Stop::new(exit::USAGE, format!("{what}: refused: {}", answer.detail()))
            }
            Failure::Unavailable(why) => Stop::new(exit::UNAVAILABLE, format!("{what}: {why}")),
        }
    }
}

/// Which kind of hold a command runs under.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Lock,
    FairLock,
    Read,
    Write,
    Semaphore { permits: u64 },
}

/// One object to hold.
#[derive(Debug, Clone)]
pub struct Target {
    pub kind: Kind,
    pub name: String,
}

impl Target {
    /// The object's path (`/locks/orders`).
    fn object(&self) -> String {
        let collection = match self.kind {
            Kind::Lock => "locks",
            Kind::FairLock => "fair-locks",
            Kind::Read | Kind::Write => "rwlocks",
            Kind::Semaphore { .. } => "semaphores",
        };
        format!("/{collection}/{}", segment(&self.name))
    }

    fn acquire_path(&self) -> String {
        match self.kind {
            Kind::Read => format!("{}/read/acquire", self.object()),
            Kind::Write => format!("{}/write/acquire", self.object()),
            _ => format!("{}/acquire", self.object()),
        }
    }

    fn holder_path(&self, holder: &str) -> String {
        format!("{}/holders/{}", self.object(), segment(holder))
    }

    /// The release's path: a read-write lock's names the mode it releases.
    fn release_path(&self, holder: &str) -> String {
        match self.kind {
            Kind::Read => format!("{}?mode=read", self.holder_path(holder)),
            Kind::Write => format!("{}?mode=write", self.holder_path(holder)),
            _ => self.holder_path(holder),
        }
    }

    /// Sends the release of `holder`'s hold, which is also how a waiter
    /// leaves the queue; `Err` when no answer came within
    /// [`RELEASE_TIMEOUT`].
    async fn release(&self, service: &Service, holder: &str) -> Result<Answer, String> {
        delete(service, &self.release_path(holder)).await
    }

    /// Whether a wait for it takes a place in a queue that outlasts the
    /// request (the book's "Client tools" (docs/src/client-tools.md)): fair
    /// locks, read-write locks and semaphores; a plain lock keeps no queue.
    fn queues(&self) -> bool {
        !matches!(self.kind, Kind::Lock)
    }

    /// How messages name it: `lock orders`, `read lock of rwlock orders`.
    fn describe(&self) -> String {
        match self.kind {
            Kind::Lock => format!("lock {}", self.name),
            Kind::FairLock => format!("fair lock {}", self.name),
            Kind::Read => format!("read lock of rwlock {}", self.name),
            Kind::Write => format!("write lock of rwlock {}", self.name),
            Kind::Semaphore { permits } => {
                format!("{permits} permit(s) of semaphore {}", self.name)
            }
        }
    }
}

/// Sends a DELETE of `path` (a release, a leave, the end of a session);
/// `Err` when no answer came within [`RELEASE_TIMEOUT`].
async fn delete(service: &Service, path: &str) -> Result<Answer, String> {
    service
        .call(
            Method::DELETE,
            path,
            None,
            HeaderMap::new(),
            RELEASE_TIMEOUT,
        )
        .await
}

/// A name or holder as one path segment. Valid ones are URL-safe as they
/// are; anything else is escaped so the service refuses it by name.
fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"._~:-".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A random 128-bit holder id: the client names its holder itself so that
/// the polls of one wait are one waiter (a fair queue keeps its place).
fn random_holder() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS random number generator works");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The longest a release (or a leave) may take before latchkey gives up on
/// it: the lease then frees the hold, the queue grace the place.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

async fn hold_and_run(target: Target, args: HoldArgs) -> Result<u8, Stop> {
    let service = args.service.service()?;
    let holder = args.holder.unwrap_or_else(random_holder);
    let owner = owner_label(args.run.owner.as_deref(), &args.run.command);
    let session = match (args.session, args.lease_ms) {
        (Some(session), _) => Some(session),
        (None, None) => std::env::var("LATCHKEY_SESSION")
            .ok()
            .filter(|s| !s.is_empty()),
        (None, Some(_)) => None,
    };
    let session = session.as_deref();
    let what = target.describe();
    // From here on SIGINT, SIGTERM and SIGHUP no longer end latchkey at
    // once: while it waits, they end the wait (and it leaves the queue);
    // while the command runs, they are forwarded to it.
    let mut signals = Signals::install();
    let waited = tokio::select! {
        // Cancel safety: dropping the wait drops its request in flight;
        // whatever that request got is left below.
        acquired = acquire(&service, &target, &holder, &owner, args.lease_ms, session, args.wait_ms) => {
            acquired.map_err(|failure| Stop::from_failure(&what, failure))
        }
        signal = signals.recv() => Err(Stop::new(
            128u8.saturating_add(signal as u8),
            format!("{what}: interrupted while waiting (signal {signal}); the command never ran"),
        )),
    };
    let grant = match waited {
        Ok(grant) => grant,
        Err(stop) => {
            if target.queues() && args.wait_ms != Some(0) {
                leave(&service, &target, &holder, &mut signals).await;
            }
            return Err(stop);
        }
    };
    let hold = Hold::new(service, target, holder, &grant, session.is_some());
    supervise::run(
        Some(hold),
        signals,
        args.run.command,
        Duration::from_millis(args.run.kill_after_ms),
    )
    .await
}

/// A wait that gave up leaves the queue at once (a long-poll's place would
/// otherwise stay for the service's queue grace and hold up every waiter
/// behind it; a try takes none). The same DELETE releases a grant whose
/// answer never arrived. Best effort: one request of at most
/// [`RELEASE_TIMEOUT`], cut short by another signal; its answer (404 when
/// the place was gone already) and its failure change nothing.
async fn leave(service: &Service, target: &Target, holder: &str, signals: &mut Signals) {
    tokio::select! {
        _ = target.release(service, holder) => {}
        _ = signals.recv() => {}
    }
}

/// Acquires `target` for `holder` (in `session`, or for `lease_ms`),
/// waiting as asked. While it waits, each new set of owners that hold it
/// (the refusals' `held_by`) is said on stderr.
async fn acquire(
    service: &Service,
    target: &Target,
    holder: &str,
    owner: &str,
    lease_ms: Option<u64>,
    session: Option<&str>,
    wait_ms: Option<u64>,
) -> Result<Value, Failure> {
    let path = target.acquire_path();
    let what = target.describe();
    // The owners of the last refusal, and the ones last said.
    let seen: RefCell<(Option<String>, Option<String>)> = RefCell::new((None, None));
    let answer = service
        .wait_for(
            wait_ms.map(Duration::from_millis),
            |answer| {
                let pending = answer.status == reqwest::StatusCode::CONFLICT
                    && matches!(answer.slug(), "lock-held" | "no-permits");
                if pending {
                    seen.borrow_mut().0 = answer.held_by();
                }
                pending.then_some(Again::Now)
            },
            |piece_ms, timeout| {
                // A try after a refusal: the wait goes on.
                let mut seen = seen.borrow_mut();
                if seen.0.is_some() && seen.0 != seen.1 {
                    let owners = seen.0.clone().unwrap_or_default();
                    eprintln!("latchkey: {what}: waiting; held by {owners}");
                    seen.1 = seen.0.clone();
                }
                let mut body = json!({"holder": holder, "owner": owner, "wait_ms": piece_ms});
                if let Some(lease_ms) = lease_ms {
                    body["lease_ms"] = json!(lease_ms);
                }
                if let Some(session) = session {
                    body["session"] = json!(session);
                }
                if let Kind::Semaphore { permits } = target.kind {
                    body["permits"] = json!(permits);
                }
                let path = &path;
                async move {
                    service
                        .call(Method::POST, path, Some(&body), HeaderMap::new(), timeout)
                        .await
                }
            },
        )
        .await?;
    Ok(answer.body)
}

async fn latch_wait(name: &str, args: &ServiceArgs, wait_ms: Option<u64>) -> Result<u8, Stop> {
    let service = args.service()?;
    let what = format!("latch {name}");
    let answer = service
        .wait_for(
            wait_ms.map(Duration::from_millis),
            |answer: &Answer| {
                (answer.status.is_success() && answer.body["open"] == false).then_some(Again::Now)
            },
            |piece_ms, timeout| {
                let path = format!("/latches/{}/wait?wait_ms={piece_ms}", segment(name));
                let service = &service;
                async move {
                    service
                        .call(Method::GET, &path, None, HeaderMap::new(), timeout)
                        .await
                }
            },
        )
        .await;
    match answer {
        Ok(answer) => {
            println!("{}", answer.body);
            Ok(0)
        }
        Err(Failure::NotYet(answer)) => {
            println!("{}", answer.body);
            Err(Stop::new(
                exit::NOT_ACQUIRED,
                format!(
                    "{what}: not open within the wait (count {})",
                    answer.body["count"]
                ),
            ))
        }
        Err(failure) => Err(Stop::from_failure(&what, failure)),
    }
}

async fn count_down(
    name: &str,
    args: &ServiceArgs,
    by: u64,
    idempotency_key: Option<String>,
) -> Result<u8, Stop> {
    let service = args.service()?;
    let what = format!("latch {name}");
    let key = idempotency_key.unwrap_or_else(random_holder);
    let key = HeaderValue::from_str(&key)
        .map_err(|_| Stop::new(exit::USAGE, "--idempotency-key must be printable ASCII"))?;
    let path = format!("/latches/{}/count-down", segment(name));
    let mut headers = HeaderMap::new();
    headers.insert("idempotency-key", key);
    // A count-down with a key may be repeated safely: a lost answer or a
    // 503 is retried for up to 10 s, and counts once.
    let answer = send(
        &service,
        Method::POST,
        &path,
        &json!({"by": by}),
        headers,
        Duration::from_secs(10),
    )
    .await
    .map_err(|failure| Stop::from_failure(&what, failure))?;
    println!("{}", answer.body);
    Ok(0)
}

/// Sends a request that waits for nothing; a lost answer, a 429 or a 5xx
/// is sent again for up to `retry_for` (zero: sent once), so only a
/// request that is safe to repeat may have a `retry_for`.
async fn send(
    service: &Service,
    method: Method,
    path: &str,
    body: &Value,
    headers: HeaderMap,
    retry_for: Duration,
) -> Result<Answer, Failure> {
    service
        .wait_for(
            Some(retry_for),
            |_| None,
            |_, timeout| {
                let (method, headers) = (method.clone(), headers.clone());
                async move {
                    service
                        .call(method, path, Some(body), headers, timeout)
                        .await
                }
            },
        )
        .await
}

/// `latchkey rate NAME`: takes the permits, waiting up to `--wait-ms` for
/// them (the service says when they come: a wait that cannot last that
/// long ends at once), then runs the command, if one is given.
async fn rate(args: RateArgs) -> Result<u8, Stop> {
    let service = args.service.service()?;
    let what = match &args.key {
        Some(key) => format!("rate limiter {} (key {key:?})", args.name),
        None => format!("rate limiter {}", args.name),
    };
    let path = format!("/rate-limiters/{}/acquire", segment(&args.name));
    let mut body = json!({"permits": args.permits});
    if let Some(key) = &args.key {
        body["key"] = json!(key);
    }
    // Every poll carries one Idempotency-Key: a poll sent again after its
    // answer was lost counts once (a refusal is not recorded under it, so
    // a later poll still tries afresh).
    let idempotency_key =
        HeaderValue::from_str(&random_holder()).expect("hex digits are a header value");
    let admitted = service
        .wait_for(
            Some(Duration::from_millis(args.wait_ms)),
            |answer| {
                let limited = answer.status == reqwest::StatusCode::TOO_MANY_REQUESTS
                    && answer.slug() == "rate-limited";
                limited.then(|| Again::After(answer.retry_after()))
            },
            |piece_ms, timeout| {
                let mut body = body.clone();
                body["wait_ms"] = json!(piece_ms);
                let mut headers = HeaderMap::new();
                headers.insert("idempotency-key", idempotency_key.clone());
                let (service, path) = (&service, &path);
                async move {
                    service
                        .call(Method::POST, path, Some(&body), headers, timeout)
                        .await
                }
            },
        )
        .await;
    match admitted {
        Ok(_) => {}
        Err(Failure::NotYet(answer)) => {
            return Err(Stop::new(
                exit::NOT_ACQUIRED,
                format!(
                    "{what}: not admitted within the wait; {} permit(s) come in {} ms",
                    args.permits, answer.body["retry_after_ms"]
                ),
            ));
        }
        Err(failure) => return Err(Stop::from_failure(&what, failure)),
    }
    if args.command.is_empty() {
        return Ok(0);
    }
    supervise::run(None, Signals::install(), args.command, Duration::ZERO).await
}

/// `latchkey rate NAME --configure`: PUTs the configuration (safe to
/// repeat: retried for up to 10 s) and prints it.
async fn configure_rate(args: &RateArgs) -> Result<u8, Stop> {
    let service = args.service.service()?;
    let what = format!("rate limiter {}", args.name);
    let mut body = json!({"rate": args.rate, "per_ms": args.per_ms});
    if let Some(burst) = args.burst {
        body["burst"] = json!(burst);
    }
    let path = format!("/rate-limiters/{}", segment(&args.name));
    let answer = send(
        &service,
        Method::PUT,
        &path,
        &body,
        HeaderMap::new(),
        Duration::from_secs(10),
    )
    .await
    .map_err(|failure| Stop::from_failure(&what, failure))?;
    println!("{}", answer.body);
    Ok(0)
}

/// `latchkey session -- cmd`: creates a session (one request: a repeated
/// one could leave a second session behind until its TTL), runs the
/// command with `LATCHKEY_SESSION` in its environment while heartbeats
/// renew it, and ends it (releasing every hold taken in it) when the
/// command exits; a lost session stops the command as a lost hold does.
async fn session(args: &ServiceArgs, ttl_ms: Option<u64>, run: RunArgs) -> Result<u8, Stop> {
    let service = args.service()?;
    let mut body = json!({"owner": owner_label(run.owner.as_deref(), &run.command)});
    if let Some(ttl_ms) = ttl_ms {
        body["ttl_ms"] = json!(ttl_ms);
    }
    let created = send(
        &service,
        Method::POST,
        "/sessions",
        &body,
        HeaderMap::new(),
        Duration::ZERO,
    )
    .await
    .map_err(|failure| Stop::from_failure("session", failure))?;
    let signals = Signals::install();
    let hold = Hold::session(service, &created.body);
    supervise::run(
        Some(hold),
        signals,
        run.command,
        Duration::from_millis(run.kill_after_ms),
    )
    .await
}

/// `--owner`, or "<host> pid <pid> <command>": at most [`MAX_OWNER`]
/// bytes (cut on a character boundary), control characters replaced.
fn owner_label(given: Option<&str>, command: &[OsString]) -> String {
    let text = match given {
        Some(owner) => owner.to_string(),
        None => {
            let command: Vec<String> = command
                .iter()
                .map(|arg| arg.to_string_lossy().into_owned())
                .collect();
            format!(
                "{} pid {} {}",
                host_name(),
                std::process::id(),
                command.join(" ")
            )
        }
    };
    let mut label = String::with_capacity(text.len().min(MAX_OWNER));
    for c in (text.chars()).map(|c| if unprintable(c) { '?' } else { c }) {
        if label.len() + c.len_utf8() > MAX_OWNER {
            break;
        }
        label.push(c);
    }
    label
}

/// This machine's host name (Linux's, then `$HOSTNAME`, else
/// `localhost`).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// `latchkey ls KIND`.
async fn ls(
    kind: &str,
    prefix: Option<&str>,
    limit: Option<u64>,
    json: bool,
    args: &ServiceArgs,
) -> Result<u8, Stop> {
    let kind = show::collection(kind)?;
    let service = args.service()?;
    let items = show::list(&service, kind, prefix, limit).await?;
    if json {
        println!("{}", Value::Array(items));
    } else {
        for line in show::list_table(&items) {
            println!("{line}");
        }
    }
    Ok(0)
}

/// `latchkey status KIND NAME`.
async fn show_status(kind: &str, name: &str, json: bool, args: &ServiceArgs) -> Result<u8, Stop> {
    let kind = show::collection(kind)?;
    let service = args.service()?;
    let object = show::status(&service, kind, name).await?;
    if json {
        println!("{object}");
    } else {
        for line in show::status_table(&object) {
            println!("{line}");
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_labels_are_cut_on_a_character_boundary_without_control_characters() {
        assert_eq!(owner_label(Some("cron\tnightly\n"), &[]), "cron?nightly?");
        let long = "é".repeat(150);
        let cut = owner_label(Some(&long), &[]);
        assert_eq!(cut.len(), 200);
        assert!(cut.chars().all(|c| c == 'é'));
        let default = owner_label(None, &["sh".into(), "-c".into(), "exit 0".into()]);
        assert!(
            default.ends_with(&format!(" pid {} sh -c exit 0", std::process::id())),
            "{default}"
        );
    }
}
