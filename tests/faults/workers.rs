//! The clients of a fault-injection run: each drives one primitive over
//! HTTP through a random instance, the way a careful user would (long-poll
//! or try, heartbeat, write to the protected resource with the fencing
//! token, release, leave a queue it gives up on), sometimes pausing past
//! its lease or vanishing without a release, and records what it saw for
//! the checkers.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::checks::{
    Beat, BeatOutcome, Busy, Call, FairWaiter, FencedWrite, Hold, IdleProbe, LatchRound, MayHold,
    Mode, PermitsBack, RateGrant, RateLimit, Refused, session_valid_until,
};

/// A small deterministic generator (xorshift64*), one per client, seeded
/// from the run's seed so that a run can be repeated.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `low..high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low).max(1)
    }
    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.range(0, 100) < percent
    }
}

/// Everything the clients recorded.
#[derive(Default)]
pub struct Record {
    pub holds: Vec<Hold>,
    pub calls: Vec<Call>,
    pub writes: Vec<FencedWrite>,
    pub fair: Vec<FairWaiter>,
    pub latches: Vec<LatchRound>,
    pub permits_back: Vec<PermitsBack>,
    /// Admissions by the clients of `rate_loop`, with the bucket each
    /// counts in (`<limiter>` or `<limiter>?key=<key>`): an admission of
    /// several limits counts in each of them.
    pub rates: Vec<(String, RateGrant)>,
    /// Admissions by the limiters of `rate_stall_loop`, with the limiter's
    /// name.
    pub stalled_rates: Vec<(String, RateGrant)>,
    /// Redis stalls a client caused (`rate_stall_loop`): (from, to, what),
    /// fault windows like the nemesis's.
    pub stalls: Vec<(f64, f64, String)>,
    /// When the idle probers' objects may have been held or queued for.
    pub idle_busy: Vec<Busy>,
    /// The idle probers' tries.
    pub idle_probes: Vec<IdleProbe>,
    /// When each owner label may have held each object.
    pub may_hold: Vec<MayHold>,
    /// The holders' refusals and the owners they named.
    pub refusals: Vec<Refused>,
    /// Rounds of session heartbeats: all, those through two instances at
    /// once, and those that set a new TTL.
    pub beat_rounds: [u64; 3],
    /// Client-side failures (no answer, or an answer the client did not
    /// expect), by kind: reported, not judged.
    pub failures: HashMap<String, u64>,
}

pub struct Ctx {
    pub start: Instant,
    pub urls: Vec<String>,
    pub client: reqwest::Client,
    pub record: Mutex<Record>,
    pub stop: AtomicBool,
    /// The highest token written to each protected resource.
    fenced: Mutex<HashMap<String, u64>>,
    holder_seq: std::sync::atomic::AtomicU64,
}

/// What one answer said.
pub struct Answer {
    pub status: Option<u16>,
    pub body: Value,
    pub sent: f64,
    pub answered: f64,
}

impl Answer {
    pub fn is(&self, status: u16) -> bool {
        self.status == Some(status)
    }
}

impl Ctx {
    pub fn new(urls: Vec<String>) -> Arc<Ctx> {
        Arc::new(Ctx {
            start: Instant::now(),
            urls,
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(4)
                .build()
                .expect("an HTTP client"),
            record: Mutex::new(Record::default()),
            stop: AtomicBool::new(false),
            fenced: Mutex::new(HashMap::new()),
            holder_seq: Default::default(),
        })
    }

    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1000.0
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub fn holder(&self, prefix: &str) -> String {
        let n = self.holder_seq.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}-{n}")
    }

    pub fn failed(&self, kind: &str) {
        *self
            .record
            .lock()
            .failures
            .entry(kind.to_string())
            .or_default() += 1;
    }

    /// One request through a random instance, recorded as a [`Call`].
    pub async fn call(
        &self,
        rng: &mut Rng,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        wait_ms: u64,
        idempotency_key: Option<&str>,
    ) -> Answer {
        let instance = rng.range(0, self.urls.len() as u64) as usize;
        (self.call_on(instance, method, path, body, wait_ms, idempotency_key)).await
    }

    /// One request through instance `instance`, recorded as a [`Call`].
    pub async fn call_on(
        &self,
        instance: usize,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        wait_ms: u64,
        idempotency_key: Option<&str>,
    ) -> Answer {
        let url = &self.urls[instance];
        let mut request = self
            .client
            .request(method.clone(), format!("{url}{path}"))
            .timeout(Duration::from_millis(wait_ms + 15_000));
        if let Some(body) = body {
            request = request.json(&body);
        }
        if let Some(key) = idempotency_key {
            request = request.header("idempotency-key", key);
        }
        let sent = self.now();
        let response = request.send().await;
        let (status, body) = match response {
            Ok(r) => {
                let status = r.status().as_u16();
                (Some(status), r.json().await.unwrap_or(Value::Null))
            }
            Err(_) => (None, Value::Null),
        };
        let answered = self.now();
        let what = format!("{method} {}", path.split('?').next().unwrap_or(path));
        if status.is_none() {
            self.failed("no answer (instance killed?)");
        }
        self.record.lock().calls.push(Call {
            what,
            sent,
            answered,
            status,
            wait_ms,
        });
        Answer {
            status,
            body,
            sent,
            answered,
        }
    }

    /// Writes to the protected resource `object`: accepted unless a higher
    /// token was written before.
    pub fn write_fenced(&self, object: &str, holder: &str, token: u64) {
        let at = self.now();
        let accepted = {
            let mut fenced = self.fenced.lock();
            let highest = fenced.entry(object.to_string()).or_default();
            let accepted = token >= *highest;
            if accepted {
                *highest = token;
            }
            accepted
        };
        self.record.lock().writes.push(FencedWrite {
            object: object.to_string(),
            holder: holder.to_string(),
            token,
            at,
            accepted,
        });
    }
}

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// The routes and body of one kind of hold.
#[derive(Clone)]
pub enum Kind {
    Lock,
    FairLock,
    Read,
    Write,
    Semaphore,
    Redlock,
    /// A multi-lock over these lock names.
    Multi(Vec<String>),
}

impl Kind {
    fn acquire_path(&self, object: &str) -> String {
        match self {
            Kind::Lock => format!("/locks/{object}/acquire"),
            Kind::FairLock => format!("/fair-locks/{object}/acquire"),
            Kind::Read => format!("/rwlocks/{object}/read/acquire"),
            Kind::Write => format!("/rwlocks/{object}/write/acquire"),
            Kind::Semaphore => format!("/semaphores/{object}/acquire"),
            Kind::Redlock => format!("/redlocks/{object}/acquire"),
            Kind::Multi(_) => "/multilocks/acquire".to_string(),
        }
    }

    fn base(&self, object: &str) -> String {
        match self {
            Kind::Lock => format!("/locks/{object}"),
            Kind::FairLock => format!("/fair-locks/{object}"),
            Kind::Read | Kind::Write => format!("/rwlocks/{object}"),
            Kind::Semaphore => format!("/semaphores/{object}"),
            Kind::Redlock => format!("/redlocks/{object}"),
            Kind::Multi(_) => "/multilocks".to_string(),
        }
    }

    fn mode(&self, permits: u64) -> Mode {
        match self {
            Kind::Read => Mode::Shared,
            Kind::Semaphore => Mode::Permits(permits),
            _ => Mode::Exclusive,
        }
    }
}

/// The holds one grant gave: (object, token).
fn granted_holds(kind: &Kind, object: &str, body: &Value) -> Vec<(String, u64)> {
    match kind {
        Kind::Multi(_) => body["locks"]
            .as_array()
            .map(|locks| {
                locks
                    .iter()
                    .map(|l| {
                        (
                            l["name"].as_str().unwrap_or_default().to_string(),
                            l["fencing_token"].as_u64().unwrap_or(0),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
        _ => vec![(
            object.to_string(),
            body["fencing_token"].as_u64().unwrap_or(0),
        )],
    }
}

/// How long a grant is certainly valid, counted from its request's sending:
/// RedLock's validity (the lease less the time the nodes took and the
/// drift), else the lease.
fn certain_ms(kind: &Kind, body: &Value, lease_ms: u64) -> f64 {
    match kind {
        Kind::Redlock => body["validity_ms"].as_u64().unwrap_or(0) as f64,
        _ => lease_ms as f64,
    }
}

/// How much later than its answer a request may still act on Redis: the
/// longest freeze or stop the nemesis makes, with room for the instance's
/// own Redis timeout (a request without a definite answer may run late).
const MAY_RUN_LATE_MS: f64 = 5000.0;

/// Every worker's holder labels its holds; the label names the holder, so
/// that the checker can tell when a label may have held an object.
fn owner_of(holder: &str) -> String {
    format!("worker {holder}")
}

/// The objects a request of `kind` names.
fn objects_of(kind: &Kind, object: &str) -> Vec<String> {
    match kind {
        Kind::Multi(names) => names.clone(),
        _ => vec![object.to_string()],
    }
}

/// Records that `holder` may have held `kind`'s objects from `from` until
/// `until`.
fn may_have_held(ctx: &Ctx, kind: &Kind, object: &str, holder: &str, from: f64, until: f64) {
    let owner = owner_of(holder);
    let mut record = ctx.record.lock();
    for object in objects_of(kind, object) {
        record.may_hold.push(MayHold {
            object,
            owner: owner.clone(),
            from,
            until,
        });
    }
}

/// What a hold's lease is: its own, or its session's (and the most one
/// poll in it may wait, so that the session is renewed between polls).
#[derive(Clone, Copy)]
enum Lease<'a> {
    Own(u64),
    Session(&'a str, u64),
}

/// Acquires (polling until granted, the run stops, or the polls run out:
/// 20 with a lease of its own, one in a session) and, for a fair lock,
/// records the waiter's place. Returns the grant's answer and when the
/// holder first asked.
///
/// On the queued primitives (fair locks, rwlocks, semaphores) some polls
/// with a lease of their own are tries (`wait_ms` 0), which take no place
/// and keep none: a waiter's place dates from its first long-poll (or from
/// a try that may have granted), and only a long-poll's 409 renews it. A
/// client that gives up with a place usually leaves the queue with a
/// DELETE (else its place lapses after the grace).
async fn acquire(
    ctx: &Ctx,
    rng: &mut Rng,
    kind: &Kind,
    object: &str,
    holder: &str,
    lease: Lease<'_>,
    permits: u64,
) -> Option<(Answer, f64)> {
    let fair = matches!(kind, Kind::FairLock);
    let queued = matches!(
        kind,
        Kind::FairLock | Kind::Read | Kind::Write | Kind::Semaphore
    );
    let mut waiter = FairWaiter {
        object: object.to_string(),
        holder: holder.to_string(),
        first_sent: f64::NAN,
        queued: None,
        kept_until: f64::NAN,
        granted: None,
    };
    // When the holder first asked (any request).
    let mut asked = f64::NAN;
    // Whether every poll so far kept the place (answered, and the next sent
    // well within the queue grace of the last long-poll's answer).
    let mut intact = true;
    let mut last_answered: Option<f64> = None;
    // Whether a request may have left a place or a hold behind.
    let mut left_something = false;
    let mut result = None;
    let polls = if matches!(lease, Lease::Own(_)) {
        20
    } else {
        1
    };
    for _ in 0..polls {
        if ctx.stopping() {
            break;
        }
        let wait_ms = match lease {
            Lease::Own(_) if queued && rng.chance(25) => 0,
            Lease::Own(_) => rng.range(200, 2000),
            Lease::Session(_, most) => rng.range(100, most.max(101)),
        };
        let mut body = json!({"holder": holder, "wait_ms": wait_ms, "owner": owner_of(holder)});
        match lease {
            Lease::Own(lease_ms) => body["lease_ms"] = json!(lease_ms),
            Lease::Session(id, _) => body["session"] = json!(id),
        }
        match kind {
            Kind::Semaphore => body["permits"] = json!(permits),
            Kind::Multi(names) => body["names"] = json!(names),
            _ => {}
        }
        let path = kind.acquire_path(object);
        let answer = ctx
            .call(rng, reqwest::Method::POST, &path, Some(body), wait_ms, None)
            .await;
        if asked.is_nan() {
            asked = answer.sent;
        }
        // A try refused keeps nothing: the holder arrives (takes a place,
        // or may have been granted) with any other request.
        let arrives = wait_ms > 0 || !answer.is(409);
        if arrives && waiter.first_sent.is_nan() {
            waiter.first_sent = answer.sent;
            waiter.kept_until = answer.sent;
        }
        left_something |= arrives;
        if let Some(previous) = last_answered {
            let gap = answer.sent - previous;
            intact &= gap < (crate::cluster::QUEUE_GRACE_MS as f64) / 2.0;
        }
        if intact && waiter.queued.is_some() {
            waiter.kept_until = answer.sent;
        }
        match answer.status {
            Some(201) => {
                waiter.granted = Some((answer.sent, answer.answered));
                result = Some(answer);
                break;
            }
            Some(409) => {
                let held_by = answer.body["held_by"].as_array().map(|owners| {
                    (owners.iter())
                        .map(|o| o.as_str().map(str::to_string))
                        .collect()
                });
                ctx.record.lock().refusals.push(Refused {
                    objects: objects_of(kind, object),
                    sent: answer.sent,
                    answered: answer.answered,
                    held_by,
                });
                if wait_ms > 0 {
                    if intact && fair {
                        waiter.queued.get_or_insert(answer.answered);
                        waiter.kept_until = answer.answered;
                    }
                    last_answered = Some(answer.answered);
                }
                // A short pause, well within the queue grace.
                sleep_ms(rng.range(0, 50)).await;
            }
            // No such object or session: polling again cannot help.
            Some(404) => {
                ctx.failed("acquire answered 404");
                break;
            }
            other => {
                intact = false;
                ctx.failed(&format!("acquire answered {other:?}"));
                sleep_ms(rng.range(50, 300)).await;
                last_answered = Some(ctx.now());
            }
        }
    }
    if result.is_none() && queued && left_something && rng.chance(80) {
        // Gives up: leaves its place at once (or releases a grant it may
        // have got unseen).
        let path = format!("{}/holders/{holder}", kind.base(object));
        let left = ctx
            .call(rng, reqwest::Method::DELETE, &path, None, 0, None)
            .await;
        if !(left.is(200) || left.is(404)) {
            ctx.failed(&format!("leave answered {:?}", left.status));
        }
    }
    if fair && !waiter.first_sent.is_nan() {
        ctx.record.lock().fair.push(waiter);
    }
    if result.is_none() && !asked.is_nan() {
        // Gave up: a request may still have granted unseen, for its lease.
        let lease_ms = match lease {
            Lease::Own(ms) => ms as f64,
            Lease::Session(..) => f64::INFINITY,
        };
        let until = ctx.now() + lease_ms + MAY_RUN_LATE_MS;
        may_have_held(ctx, kind, object, holder, asked, until);
    }
    result.map(|answer| (answer, asked))
}

/// Repeats holding `object` (or, for a multi-lock, its set) until the run
/// stops: acquire, write with the token, heartbeat, sometimes pause past the
/// lease or vanish, release. Records every hold.
pub async fn hold_loop(
    ctx: Arc<Ctx>,
    mut rng: Rng,
    kinds: Vec<Kind>,
    object: String,
    max_permits: u64,
) {
    while !ctx.stopping() {
        let kind = kinds[rng.range(0, kinds.len() as u64) as usize].clone();
        let holder = ctx.holder(&object);
        let lease_ms = rng.range(600, 1500);
        let permits = rng.range(1, max_permits + 1);
        let lease = Lease::Own(lease_ms);
        let Some((grant, asked)) =
            acquire(&ctx, &mut rng, &kind, &object, &holder, lease, permits).await
        else {
            continue;
        };
        let holds = granted_holds(&kind, &object, &grant.body);
        let mut valid_until = grant.sent + certain_ms(&kind, &grant.body, lease_ms);
        let mut lost = false;
        let mut vanished = false;
        for _ in 0..rng.range(1, 4) {
            if ctx.stopping() {
                break;
            }
            // Most of the time act well within the lease; sometimes pause
            // past it, as a client stalled by GC or a frozen VM would.
            let paused_past = rng.chance(8);
            let pause = if paused_past {
                lease_ms + rng.range(100, 600)
            } else {
                rng.range(20, lease_ms / 3)
            };
            sleep_ms(pause).await;
            // Fencing orders exclusive holders; shared ones (read holds,
            // permits) write concurrently by design.
            if kind.mode(permits) == Mode::Exclusive {
                for (object, token) in &holds {
                    ctx.write_fenced(object, &holder, *token);
                }
            }
            if rng.chance(5) {
                // Crashed: no heartbeat, no release.
                vanished = true;
                break;
            }
            let (path, body) = match &kind {
                Kind::Multi(names) => (
                    "/multilocks/heartbeat".to_string(),
                    json!({"names": names, "holder": holder, "lease_ms": lease_ms}),
                ),
                _ => (
                    format!("{}/holders/{holder}/heartbeat", kind.base(&object)),
                    json!({"lease_ms": lease_ms}),
                ),
            };
            let beat = ctx
                .call(&mut rng, reqwest::Method::POST, &path, Some(body), 0, None)
                .await;
            match beat.status {
                Some(200) => {
                    let renewed = beat.sent + certain_ms(&kind, &beat.body, lease_ms);
                    valid_until = valid_until.max(renewed);
                }
                Some(404) => {
                    lost = true;
                    break;
                }
                other => ctx.failed(&format!("heartbeat answered {other:?}")),
            }
        }
        if !vanished && !lost {
            let mode = match kind {
                Kind::Read => "?mode=read",
                Kind::Write => "?mode=write",
                _ => "",
            };
            let released = match &kind {
                Kind::Multi(names) => {
                    ctx.call(
                        &mut rng,
                        reqwest::Method::POST,
                        "/multilocks/release",
                        Some(json!({"names": names, "holder": holder})),
                        0,
                        None,
                    )
                    .await
                }
                _ => {
                    let path = format!("{}/holders/{holder}{mode}", kind.base(&object));
                    ctx.call(&mut rng, reqwest::Method::DELETE, &path, None, 0, None)
                        .await
                }
            };
            valid_until = valid_until.min(released.sent);
            if !(released.is(200) || released.is(404)) {
                ctx.failed(&format!("release answered {:?}", released.status));
            }
        }
        // The last request was answered by now: whatever it started runs
        // out within its lease (a request without an answer may run late).
        let until = ctx.now() + lease_ms as f64 + MAY_RUN_LATE_MS;
        may_have_held(&ctx, &kind, &object, &holder, asked, until);
        let mut record = ctx.record.lock();
        for (object, token) in holds {
            record.holds.push(Hold {
                object,
                holder: holder.clone(),
                mode: kind.mode(permits),
                token,
                asked,
                granted: grant.answered,
                valid_until,
            });
        }
    }
}

/// An operator's view through the faults: lists a kind of object (or the
/// sessions) page by page, following the cursor, through any instance.
/// Every answer is recorded as a [`Call`], so the `statuses` and
/// `deadlines` checkers judge listings too; a page that is not 200 or 503,
/// or whose cursor is refused, counts as a client failure.
pub async fn list_loop(ctx: Arc<Ctx>, mut rng: Rng) {
    const KINDS: [&str; 6] = [
        "locks",
        "fair-locks",
        "rwlocks",
        "semaphores",
        "latches",
        "sessions",
    ];
    while !ctx.stopping() {
        let kind = KINDS[rng.range(0, KINDS.len() as u64) as usize];
        let limit = rng.range(1, 20);
        let prefix = if kind == "sessions" { "" } else { "&prefix=f-" };
        let mut cursor: Option<String> = None;
        for _ in 0..20 {
            let mut path = format!("/{kind}?limit={limit}{prefix}");
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={c}"));
            }
            let page = ctx
                .call(&mut rng, reqwest::Method::GET, &path, None, 0, None)
                .await;
            if !page.is(200) {
                if !page.is(503) && page.status.is_some() {
                    ctx.failed(&format!("listing answered {:?}", page.status));
                }
                break;
            }
            match page.body["cursor"].as_str() {
                Some(next) => cursor = Some(next.to_string()),
                None => break,
            }
        }
        sleep_ms(rng.range(100, 400)).await;
    }
}

/// Which queued primitive an idle prober drives.
#[derive(Clone, Copy)]
pub enum Queued {
    FairLock,
    /// Each request reads or writes at random.
    RwLock,
    /// Configured with one permit.
    Semaphore,
}

impl Queued {
    fn acquire_path(self, rng: &mut Rng, object: &str) -> String {
        match self {
            Queued::FairLock => format!("/fair-locks/{object}/acquire"),
            Queued::RwLock if rng.chance(50) => format!("/rwlocks/{object}/read/acquire"),
            Queued::RwLock => format!("/rwlocks/{object}/write/acquire"),
            Queued::Semaphore => format!("/semaphores/{object}/acquire"),
        }
    }

    fn holder_path(self, object: &str, holder: &str) -> String {
        let kind = match self {
            Queued::FairLock => "fair-locks",
            Queued::RwLock => "rwlocks",
            Queued::Semaphore => "semaphores",
        };
        format!("/{kind}/{object}/holders/{holder}")
    }
}

/// What one holder of an idle prober's object may keep there (a hold, or a
/// place in its queue): from its request's sending until it certainly
/// ended. `definite` while every answer was (a grant, or a long-poll's
/// 409): then the holder kept one kind of thing, which an answered DELETE
/// ends.
struct Kept {
    from: f64,
    until: f64,
    definite: bool,
}

/// The longest Redis freeze of the nemesis: a request without an answer
/// may reach Redis only when it thaws.
const FREEZE_MS: f64 = 2500.0;

impl Kept {
    /// What an acquire with this answer may keep: a grant its lease, a
    /// long-poll's 409 a place for the grace, a try's 409 nothing, and a
    /// request without a definite answer either, counted from the latest
    /// it may have run (its deadline and last look, or a thaw). A
    /// long-poll's 409 may come while one of its tries, cut short by a
    /// Redis freeze, is still to run (or the give-back of one, which keeps
    /// a waiter's place): its place then lasts the grace from the thaw.
    fn of(answer: &Answer, wait_ms: u64, lease_ms: u64) -> Option<Kept> {
        let grace = crate::cluster::QUEUE_GRACE_MS as f64;
        let (until, definite) = match answer.status {
            Some(201) => (answer.answered + lease_ms as f64, true),
            Some(409) if wait_ms == 0 => return None,
            Some(409) => (answer.answered + FREEZE_MS + grace, true),
            _ => {
                let ran_by = answer.answered.max(answer.sent + wait_ms as f64 + 100.0) + FREEZE_MS;
                (ran_by + grace.max(lease_ms as f64), false)
            }
        };
        Some(Kept {
            from: answer.sent,
            until,
            definite,
        })
    }
}

/// One request of an idle prober for `holder` (a try unless `wait_ms`),
/// and what it may keep.
async fn idle_acquire(
    ctx: &Ctx,
    rng: &mut Rng,
    queued: Queued,
    object: &str,
    holder: &str,
    wait_ms: u64,
) -> (Answer, Option<Kept>) {
    let lease_ms = rng.range(600, 1500);
    let path = queued.acquire_path(rng, object);
    let body = json!({"holder": holder, "wait_ms": wait_ms, "lease_ms": lease_ms});
    let answer = ctx
        .call(rng, reqwest::Method::POST, &path, Some(body), wait_ms, None)
        .await;
    let kept = Kept::of(&answer, wait_ms, lease_ms);
    (answer, kept)
}

/// Ends what a holder keeps (releases its hold, or leaves the queue) and
/// records the time its object may have been busy for it.
async fn idle_end(
    ctx: &Ctx,
    rng: &mut Rng,
    queued: Queued,
    object: &str,
    holder: &str,
    kept: Kept,
) {
    let mut kept = kept;
    let path = queued.holder_path(object, holder);
    let ended = ctx
        .call(rng, reqwest::Method::DELETE, &path, None, 0, None)
        .await;
    if ended.is(200) && kept.definite {
        kept.until = kept.until.min(ended.answered);
    }
    if !(ended.is(200) || ended.is(404)) {
        ctx.failed(&format!("idle release answered {:?}", ended.status));
    }
    ctx.record.lock().idle_busy.push(Busy {
        object: object.to_string(),
        from: kept.from,
        until: kept.until,
    });
}

/// The "no idle queue" prober, the only client of `object` (a queued
/// primitive): rounds of "A holds; B tries; sometimes W long-polls and
/// then leaves with a DELETE (or, now and then, just goes, keeping its
/// place for the grace); A releases; C tries". Records every time the
/// object may have been held or queued for ([`Busy`]) and C's tries
/// ([`IdleProbe`]): whenever nothing was, C must be granted.
pub async fn idle_loop(ctx: Arc<Ctx>, mut rng: Rng, queued: Queued, object: String) {
    let rng = &mut rng;
    while !ctx.stopping() {
        let mut ending = Vec::new();
        let a = ctx.holder("idle-a");
        let (held, kept) = idle_acquire(&ctx, rng, queued, &object, &a, 0).await;
        ending.extend(kept.map(|k| (a, k)));
        if held.is(201) {
            let b = ctx.holder("idle-b");
            let (_, kept) = idle_acquire(&ctx, rng, queued, &object, &b, 0).await;
            ending.extend(kept.map(|k| (b, k)));
            if rng.chance(60) {
                let w = ctx.holder("idle-w");
                let wait_ms = rng.range(100, 400);
                let (_, kept) = idle_acquire(&ctx, rng, queued, &object, &w, wait_ms).await;
                match kept {
                    Some(kept) if rng.chance(85) => ending.push((w, kept)),
                    // Goes without a word: its place lapses after the grace.
                    Some(kept) => ctx.record.lock().idle_busy.push(Busy {
                        object: object.clone(),
                        from: kept.from,
                        until: kept.until,
                    }),
                    None => {}
                }
            }
        } else {
            // Held, queued or down: fewer rounds until it settles.
            sleep_ms(rng.range(200, 800)).await;
        }
        for (holder, kept) in ending {
            idle_end(&ctx, rng, queued, &object, &holder, kept).await;
        }
        let c = ctx.holder("idle-c");
        let (probe, kept) = idle_acquire(&ctx, rng, queued, &object, &c, 0).await;
        if probe.is(201) || probe.is(409) {
            ctx.record.lock().idle_probes.push(IdleProbe {
                object: object.clone(),
                sent: probe.sent,
                answered: probe.answered,
                granted: probe.is(201),
                said: ["type", "detail", "held_by", "position", "retry_after_ms"]
                    .map(|field| format!("{field} {}", probe.body[field]))
                    .join(", "),
            });
        }
        if let Some(kept) = kept {
            idle_end(&ctx, rng, queued, &object, &c, kept).await;
        }
        sleep_ms(rng.range(20, 200)).await;
    }
}

/// Configures an object (`PUT path`), retrying through faults.
pub async fn configure(ctx: &Ctx, rng: &mut Rng, path: &str, body: Value) {
    for _ in 0..100 {
        let put = reqwest::Method::PUT;
        let answer = ctx.call(rng, put, path, Some(body.clone()), 0, None).await;
        if answer.is(200) {
            return;
        }
        sleep_ms(100).await;
    }
    panic!("could not configure {path}");
}

/// Configures a semaphore, retrying through faults.
pub async fn configure_semaphore(ctx: &Ctx, rng: &mut Rng, name: &str, permits: u64) {
    let body = json!({"permits": permits});
    configure(ctx, rng, &format!("/semaphores/{name}"), body).await;
}

/// What a client of rate limiters takes from: one limiter's shared
/// bucket, one key's, or several limits at once (`(limiter, key)` each).
#[derive(Debug, Clone)]
pub enum RateTarget {
    Shared(String),
    Key(String, String),
    Several(Vec<(String, Option<String>)>),
}

impl RateTarget {
    /// The buckets an admission counts in (see [`Record::rates`]).
    fn buckets(&self) -> Vec<String> {
        let label = |name: &str, key: Option<&str>| match key {
            Some(key) => format!("{name}?key={key}"),
            None => name.to_string(),
        };
        match self {
            RateTarget::Shared(name) => vec![label(name, None)],
            RateTarget::Key(name, key) => vec![label(name, Some(key))],
            RateTarget::Several(limits) => (limits.iter())
                .map(|(name, key)| label(name, key.as_deref()))
                .collect(),
        }
    }

    fn path(&self) -> String {
        match self {
            RateTarget::Shared(name) | RateTarget::Key(name, _) => {
                format!("/rate-limiters/{name}/acquire")
            }
            RateTarget::Several(_) => "/rate-limiters/acquire".to_string(),
        }
    }

    fn body(&self, permits: u64, wait_ms: u64) -> serde_json::Value {
        match self {
            RateTarget::Shared(_) => json!({"permits": permits, "wait_ms": wait_ms}),
            RateTarget::Key(_, key) => json!({"permits": permits, "wait_ms": wait_ms, "key": key}),
            RateTarget::Several(limits) => json!({
                "limits": (limits.iter())
                    .map(|(name, key)| json!({"name": name, "key": key, "permits": permits}))
                    .collect::<Vec<_>>(),
                "wait_ms": wait_ms,
            }),
        }
    }

    /// The permits an answer says were admitted, the same in every limit.
    fn admitted(&self, body: &serde_json::Value) -> u64 {
        match self {
            RateTarget::Several(_) => body["limits"][0]["permits"].as_u64().unwrap_or(0),
            _ => body["permits"].as_u64().unwrap_or(0),
        }
    }
}

/// A client of rate limiters: acquires of 1 to 3 permits, half of them
/// waiting (reservations). One limit's acquires carry their own
/// `Idempotency-Key` and are sent again with it while unanswered or 503
/// (so each counts once); an acquire of several limits takes no key, so
/// it is sent once (an answer lost may hide an admission, which only
/// makes the check below see fewer). After a 429 it sleeps as
/// `retry_after_ms` says. Sometimes it sends a wait and goes away at once
/// (its reservation is given back). Records every admission in every
/// bucket it counts in, for `rate_within`.
pub async fn rate_loop(ctx: Arc<Ctx>, mut rng: Rng, target: RateTarget) {
    let path = target.path();
    let several = matches!(target, RateTarget::Several(_));
    while !ctx.stopping() {
        if rng.chance(10) {
            let url = &ctx.urls[rng.range(0, ctx.urls.len() as u64) as usize];
            let request = (ctx.client.post(format!("{url}{path}")))
                .timeout(Duration::from_millis(rng.range(20, 200)))
                .json(&target.body(1, 1500));
            let _ = request.send().await;
            continue;
        }
        let permits = rng.range(1, 4);
        let wait_ms = match rng.chance(50) {
            true => rng.range(100, 1500),
            false => 0,
        };
        let key = (!several).then(|| ctx.holder("rate"));
        let body = target.body(permits, wait_ms);
        let mut first_sent = None;
        for _ in 0..5 {
            let post = reqwest::Method::POST;
            let answer = (ctx.call(
                &mut rng,
                post,
                &path,
                Some(body.clone()),
                wait_ms,
                key.as_deref(),
            ))
            .await;
            let sent = *first_sent.get_or_insert(answer.sent);
            match answer.status {
                Some(200) => {
                    let grant = RateGrant {
                        permits: target.admitted(&answer.body),
                        sent,
                        answered: answer.answered,
                    };
                    let mut record = ctx.record.lock();
                    for bucket in target.buckets() {
                        record.rates.push((bucket, grant.clone()));
                    }
                    break;
                }
                Some(429) => {
                    let retry = answer.body["retry_after_ms"].as_u64().unwrap_or(100);
                    sleep_ms(retry.min(500)).await;
                    break;
                }
                None | Some(503) if !several => sleep_ms(100).await,
                None | Some(503) => break,
                Some(other) => {
                    ctx.failed(&format!("rate limiter answered {other} to {path} {body}"));
                    break;
                }
            }
        }
    }
}

/// Waiters of rate limiters whose reserved times fall in a Redis stall.
/// Each round, on each of `names` (limiters of `limit`, this client's
/// alone, with a backlog of several seconds once drained): wait until it
/// is full, take every permit, and ask over SSE, without an
/// `Idempotency-Key` (so the reservation is one that could be given
/// back), for permits due a little later (each limiter's at another
/// moment). Then pause Redis (`CLIENT PAUSE … ALL`) from before those
/// times for longer than the instances' response timeout, so that their
/// checks at the reserved times fail (each starting a background
/// give-back), but not past the waits, so that the waiters are still
/// admitted. Nothing else is reserved on those limiters for a while (a
/// give-back takes back only the last reservation), then everything
/// available is taken: a give-back of permits whose waiter was admitted
/// shows as more than `burst + rate × elapsed / per_ms` since the first
/// take (`rate_within`, per limiter). Records every admission and every
/// stall (a fault window).
pub async fn rate_stall_loop(
    ctx: Arc<Ctx>,
    mut rng: Rng,
    names: Vec<String>,
    limit: RateLimit,
    redis: redis::Client,
) {
    use crate::cluster::{MAX_WAIT_MS, RESPONSE_TIMEOUT_MS};
    let body = json!({"rate": limit.rate, "per_ms": limit.per_ms, "burst": limit.burst});
    for name in &names {
        configure(
            &ctx,
            &mut rng,
            &format!("/rate-limiters/{name}"),
            body.clone(),
        )
        .await;
    }
    let interval_ms = limit.per_ms as f64 / limit.rate as f64;
    while !ctx.stopping() {
        // Full limiters (a round's last take drained them).
        let mut full = Vec::new();
        for name in &names {
            let path = format!("/rate-limiters/{name}");
            for _ in 0..100 {
                let get = reqwest::Method::GET;
                let state = ctx.call(&mut rng, get, &path, None, 0, None).await;
                if state.is(200) && state.body["available"] == limit.burst {
                    full.push(name.clone());
                    break;
                }
                if ctx.stopping() {
                    return;
                }
                sleep_ms(200).await;
            }
        }
        // Take everything, then wait for permits due 300, 550, 800, ...
        // ms later.
        let mut waiters = Vec::new();
        let (reserved, mut reservations) = tokio::sync::mpsc::unbounded_channel();
        for (i, name) in full.iter().enumerate() {
            let path = format!("/rate-limiters/{name}/acquire");
            let all = json!({"permits": limit.burst});
            let post = reqwest::Method::POST;
            let taken = ctx.call(&mut rng, post, &path, Some(all), 0, None).await;
            if !taken.is(200) {
                continue;
            }
            stalled_grant(&ctx, name, limit.burst, taken.sent, taken.answered);
            let due_ms = 300.0 + 250.0 * i as f64;
            let permits = ((due_ms / interval_ms).round() as u64).clamp(1, limit.burst);
            let url = ctx.urls[rng.range(0, ctx.urls.len() as u64) as usize].clone();
            waiters.push(tokio::spawn(stalled_waiter(
                ctx.clone(),
                format!("{url}{path}"),
                (name.clone(), permits),
                reserved.clone(),
            )));
        }
        if waiters.is_empty() {
            continue;
        }
        // Once every waiter has its reservation (a try that Redis does not
        // answer reserves nothing), Redis pauses, before the first time,
        // until at most 600 ms before the waits end.
        let all_reserved = async {
            for _ in 0..waiters.len() {
                reservations.recv().await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), all_reserved).await;
        let shortest = RESPONSE_TIMEOUT_MS + 200;
        let ms = rng.range(shortest, MAX_WAIT_MS - 600);
        let from = ctx.now();
        if pause_redis(&redis, ms).await {
            sleep_ms(ms).await;
            let what = format!("CLIENT PAUSE {ms} ms across reserved times");
            ctx.record.lock().stalls.push((from, ctx.now(), what));
        }
        for waiter in waiters {
            let _ = waiter.await;
        }
        // Give-backs in flight land (they retry with backoff), then
        // everything available is taken.
        sleep_ms(3000).await;
        for name in &full {
            let path = format!("/rate-limiters/{name}");
            let get = reqwest::Method::GET;
            let state = ctx.call(&mut rng, get, &path, None, 0, None).await;
            let available = state.body["available"].as_u64().unwrap_or(0);
            if !state.is(200) || available == 0 {
                continue;
            }
            let post = reqwest::Method::POST;
            let all = Some(json!({"permits": available}));
            let taken = (ctx.call(&mut rng, post, &format!("{path}/acquire"), all, 0, None)).await;
            if taken.is(200) {
                stalled_grant(&ctx, name, available, taken.sent, taken.answered);
            }
        }
    }
}

fn stalled_grant(ctx: &Ctx, name: &str, permits: u64, sent: f64, answered: f64) {
    let grant = RateGrant {
        permits,
        sent,
        answered,
    };
    let mut record = ctx.record.lock();
    record.stalled_rates.push((name.to_string(), grant));
}

/// One SSE acquire of `permits` on `name` that waits as long as a request
/// may; says on `reserved` when it waits (its permits are reserved), and
/// records its admission and the call.
async fn stalled_waiter(
    ctx: Arc<Ctx>,
    url: String,
    (name, permits): (String, u64),
    reserved: tokio::sync::mpsc::UnboundedSender<()>,
) {
    let wait_ms = crate::cluster::MAX_WAIT_MS;
    let request = (ctx.client.post(&url))
        .header("accept", "text/event-stream")
        .timeout(Duration::from_millis(wait_ms + 15_000))
        .json(&json!({"permits": permits, "wait_ms": wait_ms}));
    let sent = ctx.now();
    let Ok(response) = request.send().await else {
        ctx.failed("no answer (instance killed?)");
        return;
    };
    let status = Some(response.status().as_u16());
    let mut events = sse_events(response);
    while let Some((event, data)) = events.recv().await {
        match event.as_str() {
            "waiting" => {
                let _ = reserved.send(());
            }
            "acquired" => {
                let permits = data["permits"].as_u64().unwrap_or(0);
                stalled_grant(&ctx, &name, permits, sent, ctx.now());
                break;
            }
            _ => break,
        }
    }
    let what = format!("POST /rate-limiters/{name}/acquire (SSE)");
    let answered = ctx.now();
    ctx.record.lock().calls.push(Call {
        what,
        sent,
        answered,
        status,
        wait_ms,
    });
}

/// `CLIENT PAUSE ms ALL` on the main Redis; whether it was paused (Redis
/// may be down, killed by the nemesis).
async fn pause_redis(redis: &redis::Client, ms: u64) -> bool {
    let pause = async {
        let mut conn = redis.get_multiplexed_async_connection().await?;
        redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(ms)
            .arg("ALL")
            .query_async::<()>(&mut conn)
            .await
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), pause).await,
        Ok(Ok(()))
    )
}

/// The `(event, data)` pairs of a Server-Sent Events response as they
/// arrive; the channel closes when the stream ends or breaks.
fn sse_events(
    response: reqwest::Response,
) -> tokio::sync::mpsc::UnboundedReceiver<(String, Value)> {
    use futures_util::StreamExt;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = response.bytes_stream();
        let mut buffer = String::new();
        while let Some(Ok(chunk)) = stream.next().await {
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let mut name = String::from("message");
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        name = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if let Ok(data) = serde_json::from_str(&data) {
                    let _ = tx.send((name, data));
                }
            }
        }
    });
    rx
}

/// A holder takes every permit of `name` and vanishes; a prober then waits
/// for them: they must come back within the lease (+ the checker's slack).
pub async fn permits_back_loop(ctx: Arc<Ctx>, mut rng: Rng, name: String, permits: u64) {
    let lease_ms = 800;
    let path = format!("/semaphores/{name}/acquire");
    // Every permit for `holder`, waiting up to 3 s.
    let take_all = |rng: &mut Rng, holder: String, lease_ms: u64| {
        let body =
            json!({"holder": holder, "permits": permits, "lease_ms": lease_ms, "wait_ms": 3000});
        let (ctx, path, mut rng) = (ctx.clone(), path.clone(), Rng::new(rng.next()));
        async move {
            ctx.call(
                &mut rng,
                reqwest::Method::POST,
                &path,
                Some(body),
                3000,
                None,
            )
            .await
        }
    };
    while !ctx.stopping() {
        let grant = take_all(&mut rng, ctx.holder("crashed"), lease_ms).await;
        if !grant.is(201) {
            sleep_ms(200).await;
            continue;
        }
        let expired_by = grant.answered + lease_ms as f64;
        let prober = ctx.holder("prober");
        let regained = loop {
            let answer = take_all(&mut rng, prober.clone(), 2000).await;
            if answer.is(201) {
                break Some(answer.answered);
            }
            if ctx.stopping() && ctx.now() > expired_by + 20_000.0 {
                break None;
            }
            if !answer.is(409) {
                sleep_ms(100).await;
            }
        };
        let Some(regained) = regained else { break };
        ctx.record.lock().permits_back.push(PermitsBack {
            object: name.clone(),
            expired_by,
            regained,
            excused_ms: 0.0,
        });
        let release = format!("/semaphores/{name}/holders/{prober}");
        ctx.call(&mut rng, reqwest::Method::DELETE, &release, None, 0, None)
            .await;
    }
}

/// Rounds of a latch: set to 3, counted down with three idempotency keys,
/// each sent several times, while three clients wait on it.
pub async fn latch_loop(ctx: Arc<Ctx>, mut rng: Rng, prefix: String) {
    let mut round = 0;
    while !ctx.stopping() {
        round += 1;
        let name = format!("{prefix}-{round}");
        let base = format!("/latches/{name}");
        let set = retry(
            &ctx,
            &mut rng,
            reqwest::Method::PUT,
            &base,
            Some(json!({"count": 3, "ttl_ms": 120000})),
            None,
        )
        .await;
        if set.is_none() {
            continue;
        }
        let waits = Arc::new(Mutex::new(Vec::new()));
        let open = Arc::new(AtomicBool::new(false));
        let mut waiters = Vec::new();
        for i in 0..3 {
            let (ctx, waits, open, name) = (ctx.clone(), waits.clone(), open.clone(), name.clone());
            let mut rng = Rng::new(rng.next() ^ i);
            waiters.push(tokio::spawn(async move {
                let started = ctx.now();
                while !open.load(Ordering::Relaxed) && ctx.now() - started < 60_000.0 {
                    let wait_ms = rng.range(300, 2500);
                    let path = format!("/latches/{name}/wait?wait_ms={wait_ms}");
                    let answer = ctx
                        .call(&mut rng, reqwest::Method::GET, &path, None, wait_ms, None)
                        .await;
                    if answer.is(200) {
                        let is_open = answer.body["open"].as_bool().unwrap_or(false);
                        waits.lock().push((answer.sent, answer.answered, is_open));
                        if is_open {
                            break;
                        }
                    } else {
                        sleep_ms(50).await;
                    }
                }
            }));
        }
        let mut latch = LatchRound {
            object: name.clone(),
            ..LatchRound::default()
        };
        let path = format!("{base}/count-down");
        for key in 0..3 {
            let idempotency_key = format!("{name}-key-{key}");
            if key == 2 {
                let state = retry(&ctx, &mut rng, reqwest::Method::GET, &base, None, None).await;
                latch.count_before_last = state.and_then(|s| s["count"].as_u64());
                sleep_ms(rng.range(0, 800)).await;
            }
            let mut acknowledged = false;
            let mut first_sent = f64::NAN;
            for attempt in 0..40 {
                let answer = ctx
                    .call(
                        &mut rng,
                        reqwest::Method::POST,
                        &path,
                        Some(json!({})),
                        0,
                        Some(&idempotency_key),
                    )
                    .await;
                if first_sent.is_nan() {
                    first_sent = answer.sent;
                }
                if answer.is(200) && !acknowledged {
                    acknowledged = true;
                    if key == 2 {
                        latch.opened = answer.answered;
                    }
                }
                // Sent at least twice, and until acknowledged.
                if acknowledged && attempt > rng.range(0, 2) {
                    break;
                }
                sleep_ms(rng.range(10, 150)).await;
            }
            if key == 2 {
                latch.last_key_sent = first_sent;
            }
            if !acknowledged {
                ctx.failed("a count-down was never acknowledged");
            }
        }
        for waiter in waiters {
            let _ = waiter.await;
        }
        latch.waits = std::mem::take(&mut *waits.lock());
        if latch.opened > 0.0 {
            ctx.record.lock().latches.push(latch);
        }
        retry(&ctx, &mut rng, reqwest::Method::DELETE, &base, None, None).await;
    }
}

/// Sends a request that does not wait until it is answered 2xx (at most
/// about 20 s); returns the body.
async fn retry(
    ctx: &Ctx,
    rng: &mut Rng,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
    key: Option<&str>,
) -> Option<Value> {
    for _ in 0..100 {
        let answer = ctx
            .call(rng, method.clone(), path, body.clone(), 0, key)
            .await;
        if matches!(answer.status, Some(200..=299)) {
            return Some(answer.body);
        }
        sleep_ms(200).await;
    }
    ctx.failed(&format!("{method} {path} never succeeded"));
    None
}

/// Holds several objects through one session, heartbeating only the
/// session: a lock, a semaphore permit and a read hold (objects the other
/// clients use too), each through a random instance. Some heartbeats set a
/// new TTL (shorter or longer), and some go through two instances at once
/// with different TTLs (either may run last). Every hold is certainly
/// valid until what the heartbeats allow (`session_valid_until`), or the
/// DELETE, or the session's creation; sometimes the client pauses past
/// the TTL, or vanishes without a DELETE. Records every hold for the same
/// checkers as the others'.
pub async fn session_loop(ctx: Arc<Ctx>, mut rng: Rng, plan: Vec<(Kind, String)>) {
    while !ctx.stopping() {
        // The TTL the session may have: after two heartbeats at once, the
        // shorter of theirs (the pauses below are planned from it).
        let mut ttl_ms = rng.range(600, 1500);
        let created = ctx
            .call(
                &mut rng,
                reqwest::Method::POST,
                "/sessions",
                Some(json!({"ttl_ms": ttl_ms, "owner": "worker session"})),
                0,
                None,
            )
            .await;
        let Some(id) = created.body["session"].as_str().map(str::to_string) else {
            ctx.failed(&format!("session create answered {:?}", created.status));
            sleep_ms(rng.range(50, 300)).await;
            continue;
        };
        // The session (and so each hold) is certainly valid for the TTL
        // from the sending of its creation, then as its heartbeats allow.
        let mut valid_until = created.sent + ttl_ms as f64;
        let holder = ctx.holder("f-sess");
        let mut holds: Vec<(Kind, String, Answer, f64)> = Vec::new();
        let mut lost = false;
        for (kind, object) in &plan {
            if ctx.stopping() || lost {
                break;
            }
            // One short poll at a time, keeping the session (and what it
            // holds) between them.
            for _ in 0..10 {
                let lease = Lease::Session(&id, ttl_ms / 3);
                let granted = acquire(&ctx, &mut rng, kind, object, &holder, lease, 1).await;
                let got = granted.is_some();
                if let Some((grant, asked)) = granted {
                    holds.push((kind.clone(), object.clone(), grant, asked));
                }
                let beats = session_beats(&ctx, &mut rng, &id, holds.len(), &mut ttl_ms).await;
                valid_until = session_valid_until(valid_until, &beats);
                lost = lost_some(&beats);
                if got || lost || ctx.stopping() {
                    break;
                }
            }
        }
        lost |= holds.is_empty();
        let mut vanished = false;
        for _ in 0..rng.range(1, 5) {
            if ctx.stopping() || lost {
                break;
            }
            let paused_past = rng.chance(8);
            let pause = if paused_past {
                ttl_ms + rng.range(100, 600)
            } else {
                rng.range(20, ttl_ms / 3)
            };
            sleep_ms(pause).await;
            for (kind, object, grant, _) in &holds {
                if kind.mode(1) == Mode::Exclusive {
                    let token = grant.body["fencing_token"].as_u64().unwrap_or(0);
                    ctx.write_fenced(object, &holder, token);
                }
            }
            if rng.chance(5) {
                vanished = true;
                break;
            }
            let beats = session_beats(&ctx, &mut rng, &id, holds.len(), &mut ttl_ms).await;
            valid_until = session_valid_until(valid_until, &beats);
            lost = lost_some(&beats);
        }
        if !vanished {
            let path = format!("/sessions/{id}");
            let ended = ctx
                .call(&mut rng, reqwest::Method::DELETE, &path, None, 0, None)
                .await;
            // A DELETE that was sent may have released the holds, whatever
            // its answer (a 503 part-way, or an answer that never came).
            valid_until = valid_until.min(ended.sent);
            if !(ended.is(200) || ended.is(404)) {
                ctx.failed(&format!("session delete answered {:?}", ended.status));
            }
        }
        for (kind, object, _, asked) in &holds {
            // A session's holds last as long as it does: no bound is kept
            // here for them.
            may_have_held(&ctx, kind, object, &holder, *asked, f64::INFINITY);
        }
        let mut record = ctx.record.lock();
        for (kind, object, grant, asked) in holds {
            record.holds.push(Hold {
                object,
                holder: holder.clone(),
                mode: kind.mode(1),
                token: grant.body["fencing_token"].as_u64().unwrap_or(0),
                asked,
                granted: grant.answered,
                valid_until,
            });
        }
    }
}

/// One round of session heartbeats, each with an explicit TTL: mostly one
/// (sometimes with a new TTL, shorter or longer), sometimes two at once
/// through two instances, one keeping the TTL and one setting another.
/// `ttl_ms` becomes the TTL the session may now have (the shorter of the
/// two). Returns each beat as its client saw it (`holds` is how many holds
/// a full renewal counts).
async fn session_beats(
    ctx: &Ctx,
    rng: &mut Rng,
    id: &str,
    holds: usize,
    ttl_ms: &mut u64,
) -> Vec<Beat> {
    let path = format!("/sessions/{id}/heartbeat");
    let other_ttl = |rng: &mut Rng| match rng.chance(60) {
        true => rng.range(500, *ttl_ms + 1),
        false => rng.range(600, 1500),
    };
    let mut ttls = vec![*ttl_ms];
    if rng.chance(20) {
        ttls[0] = other_ttl(rng);
    }
    let instances = ctx.urls.len() as u64;
    let first = rng.range(0, instances) as usize;
    if instances > 1 && rng.chance(30) {
        ttls.push(other_ttl(rng));
    }
    let beats = ttls.iter().enumerate().map(|(i, ttl)| {
        let instance = (first + i) % instances as usize;
        let body = json!({"ttl_ms": ttl});
        let path = path.as_str();
        async move {
            let post = reqwest::Method::POST;
            let beat = ctx.call_on(instance, post, path, Some(body), 0, None).await;
            let outcome = match beat.status {
                Some(200) if beat.body["holds"].as_u64() == Some(holds as u64) => {
                    BeatOutcome::Renewed
                }
                Some(200) => BeatOutcome::Partial,
                Some(404) => BeatOutcome::Gone,
                other => {
                    ctx.failed(&format!("session heartbeat answered {other:?}"));
                    BeatOutcome::Unknown
                }
            };
            Beat {
                sent: beat.sent,
                ttl_ms: *ttl as f64,
                outcome,
            }
        }
    });
    let beats = futures_util::future::join_all(beats).await;
    {
        let rounds = &mut ctx.record.lock().beat_rounds;
        rounds[0] += 1;
        rounds[1] += u64::from(ttls.len() > 1);
        rounds[2] += u64::from(ttls.iter().any(|t| t != ttl_ms));
    }
    *ttl_ms = ttls.into_iter().min().unwrap_or(*ttl_ms);
    beats
}

/// Whether a round of heartbeats found the session, or one of its holds,
/// gone.
fn lost_some(beats: &[Beat]) -> bool {
    beats
        .iter()
        .any(|b| matches!(b.outcome, BeatOutcome::Partial | BeatOutcome::Gone))
}
