//! The Lua scripts tested directly through the store, below HTTP: the
//! Redis-side invariants each script header promises.

use std::time::Duration;

use futures_util::StreamExt;
use latchkey::coord::locks::{LockGrant, LockKind, Locks, Released};
use latchkey::coord::ratelimiters::{Due, RateConfig, RateLimiters, Taken};
use latchkey::coord::rwlocks::{Mode as RwMode, RwLocks};
use latchkey::coord::semaphores::Semaphores;
use latchkey::coord::{Attempt, AttemptId, Blocked, Wait};
use latchkey::metrics::Metrics;
use latchkey::store::{Publish, Store, StoreConfig};
use redis::AsyncCommands;

use crate::helpers::*;

async fn locks(redis: &latchkey::devredis::RedisServer) -> Locks {
    locks_on(latchkey::config::RedisMode::Standalone, vec![redis.url()]).await
}

async fn locks_on(mode: latchkey::config::RedisMode, urls: Vec<String>) -> Locks {
    Locks::new(store_on(mode, urls).await, LockKind::Plain)
}

async fn store_on(mode: latchkey::config::RedisMode, urls: Vec<String>) -> Store {
    let config = StoreConfig {
        mode,
        urls,
        sentinel_master: String::new(),
        prefix: "t:".into(),
        pool_size: 4,
        connect_timeout: Duration::from_millis(500),
        response_timeout: Duration::from_millis(1000),
        min_replicas: 0,
        tls: Default::default(),
    };
    Store::open(&config, Metrics::new()).await.unwrap()
}

async fn rate_limiters(redis: &latchkey::devredis::RedisServer) -> RateLimiters {
    let mode = latchkey::config::RedisMode::Standalone;
    RateLimiters::new(store_on(mode, vec![redis.url()]).await)
}

/// The emission interval of 3 permits a second is 333⅓ ms: the scripts
/// keep it exact (whole µs plus ticks of ⅓ µs), store whole numbers only,
/// and say exactly when permits come.
#[tokio::test]
async fn rate_limiter_times_are_exact_when_the_interval_is_no_whole_number_of_us() {
    let redis = redis();
    let limiters = rate_limiters(&redis).await;
    let config = RateConfig {
        rate: 3,
        per_ms: 1000,
        burst: 3,
    };
    assert_eq!(limiters.configure("r", config).await.unwrap(), 3);
    let take = |permits, max_wait_us| {
        let limiters = limiters.clone();
        async move {
            (limiters.acquire("r", None, permits, max_wait_us, &AttemptId::new(), None))
                .await
                .unwrap()
        }
    };
    assert_eq!(
        take(3, 0).await,
        Taken::Admitted {
            permits: 3,
            available: 0,
            config,
        }
    );
    let Taken::Limited { wait_us, .. } = take(3, 0).await else {
        panic!("limited")
    };
    // Three intervals: 1 000 000 µs, minus the few µs since the admission.
    assert!((990_000..=1_000_000).contains(&wait_us), "{wait_us}");
    let Taken::Reserved { wait_us, .. } = take(1, 2_000_000).await else {
        panic!("reserved")
    };
    assert!((323_000..=333_334).contains(&wait_us), "{wait_us}");
    let mut conn = redis_conn(&redis).await;
    let fields: std::collections::HashMap<String, String> = conn.hgetall("t:{r}:rl").await.unwrap();
    for field in ["tat", "frac", "gen", "rate", "per_ms", "burst"] {
        assert!(
            fields[field].bytes().all(|b| b.is_ascii_digit()),
            "{field} = {:?}, a whole number",
            fields[field]
        );
    }
    // 4 permits' time from the first admission: 1 333 333⅓ µs.
    let frac: u64 = fields["frac"].parse().unwrap();
    assert_eq!(frac, 1, "⅓ µs");
    assert_eq!(
        limiters.state("r", None).await.unwrap().unwrap().available,
        0
    );
}

/// A give-back takes back only the last acquire (nothing reserved after
/// it), once, and not across a reconfiguration.
#[tokio::test]
async fn a_rate_limiter_gives_back_only_the_last_acquire_and_only_once() {
    let redis = redis();
    let limiters = rate_limiters(&redis).await;
    let config = RateConfig {
        rate: 1,
        per_ms: 1000,
        burst: 1,
    };
    limiters.configure("g", config).await.unwrap();
    let (first, second) = (AttemptId::new(), AttemptId::new());
    let admitted = limiters
        .acquire("g", None, 1, 0, &first, None)
        .await
        .unwrap();
    assert!(matches!(admitted, Taken::Admitted { .. }));
    let reserved = limiters
        .acquire("g", None, 1, 5_000_000, &second, None)
        .await;
    let Ok(Taken::Reserved { reservation, .. }) = reserved else {
        panic!("reserved: {reserved:?}")
    };
    assert!(
        !limiters.give_back("g", None, &first, 1).await.unwrap(),
        "not the last"
    );
    assert!(limiters.give_back("g", None, &second, 1).await.unwrap());
    assert!(
        !limiters.give_back("g", None, &second, 1).await.unwrap(),
        "only once"
    );
    // The reservation's incarnation still stands; a new one does not.
    assert!(matches!(
        limiters
            .settle("g", None, &reservation, None, None)
            .await
            .unwrap(),
        Due::In { .. }
    ));
    limiters.delete("g").await.unwrap();
    limiters.configure("g", config).await.unwrap();
    assert_eq!(
        limiters
            .settle("g", None, &reservation, None, None)
            .await
            .unwrap(),
        Due::Gone
    );
    // A reconfiguration ends what may be given back.
    let third = AttemptId::new();
    limiters
        .acquire("g", None, 1, 0, &third, None)
        .await
        .unwrap();
    limiters.configure("g", config).await.unwrap();
    assert!(!limiters.give_back("g", None, &third, 1).await.unwrap());
}

/// Settling a reservation at its time and giving it back exclude each
/// other: once settled (its waiter may be admitted), a give-back of its
/// acquire refuses, however often it is retried; settling again answers
/// the same.
#[tokio::test]
async fn a_settled_reservation_is_never_given_back() {
    let redis = redis();
    let limiters = rate_limiters(&redis).await;
    let config = RateConfig {
        rate: 10,
        per_ms: 1000,
        burst: 1,
    };
    limiters.configure("s", config).await.unwrap();
    limiters
        .acquire("s", None, 1, 0, &AttemptId::new(), None)
        .await
        .unwrap();
    let owner = AttemptId::new();
    let reserved = limiters
        .acquire("s", None, 1, 1_000_000, &owner, None)
        .await;
    let Ok(Taken::Reserved {
        wait_us,
        reservation,
        ..
    }) = reserved
    else {
        panic!("reserved: {reserved:?}")
    };
    let settle = || limiters.settle("s", None, &reservation, Some(&owner), None);
    assert!(matches!(settle().await.unwrap(), Due::In { .. }), "not yet");
    tokio::time::sleep(Duration::from_micros(wait_us + 1000)).await;
    assert_eq!(
        settle().await.unwrap(),
        Due::Now {
            available: 0,
            config
        }
    );
    for _ in 0..2 {
        assert!(!limiters.give_back("s", None, &owner, 1).await.unwrap());
    }
    assert_eq!(
        settle().await.unwrap(),
        Due::Now {
            available: 0,
            config
        }
    );
    assert_eq!(
        limiters.state("s", None).await.unwrap().unwrap().available,
        0
    );
}

#[tokio::test]
async fn acquire_sets_the_lease_as_a_redis_ttl_and_the_fence_never_expires() {
    let redis = redis();
    let locks = locks(&redis).await;
    let granted = locks
        .try_acquire("k", "h", 5000, None, &AttemptId::new())
        .await
        .unwrap();
    assert!(matches!(
        granted,
        Attempt::Granted(LockGrant {
            fencing_token: 1,
            hold_count: 1,
            lease_ms: 5000
        })
    ));
    let mut conn = redis_conn(&redis).await;
    let ttl: i64 = conn.pttl("t:{k}:lock").await.unwrap();
    assert!(ttl > 4900 && ttl <= 5000, "ttl {ttl}");
    let fence_ttl: i64 = conn.pttl("t:{k}:lock:fence").await.unwrap();
    assert_eq!(fence_ttl, -1, "the fence key has no expiry");
    let fence: u64 = conn.get("t:{k}:lock:fence").await.unwrap();
    assert_eq!(fence, 1);
}

#[tokio::test]
async fn acquire_by_another_holder_reports_the_remaining_lease() {
    let redis = redis();
    let locks = locks(&redis).await;
    locks
        .try_acquire("k", "a", 3000, None, &AttemptId::new())
        .await
        .unwrap();
    match locks
        .try_acquire("k", "b", 3000, None, &AttemptId::new())
        .await
        .unwrap()
    {
        Attempt::Blocked(Blocked {
            retry_after_ms,
            position: None,
            place: None,
            available: None,
            blocked_by: None,
            held_by,
            which: None,
        }) => {
            assert!(retry_after_ms > 2800 && retry_after_ms <= 3000);
            assert_eq!(held_by, vec![None], "a hold without an owner label");
        }
        other => panic!("expected blocked, got {other:?}"),
    }
    // A blocker whose TTL was removed by hand is re-checked once a second
    // rather than reported as "0 ms" (which would make waiters spin).
    let mut conn = redis_conn(&redis).await;
    let _: bool = conn.persist("t:{k}:lock").await.unwrap();
    assert!(matches!(
        locks
            .try_acquire("k", "b", 3000, None, &AttemptId::new())
            .await
            .unwrap(),
        Attempt::Blocked(Blocked {
            retry_after_ms: 1000,
            ..
        })
    ));
}

#[tokio::test]
async fn reentry_resets_the_lease_and_keeps_the_token() {
    let redis = redis();
    let locks = locks(&redis).await;
    locks
        .try_acquire("k", "a", 1000, None, &AttemptId::new())
        .await
        .unwrap();
    let again = locks
        .try_acquire("k", "a", 8000, None, &AttemptId::new())
        .await
        .unwrap();
    assert!(matches!(
        again,
        Attempt::Granted(LockGrant {
            fencing_token: 1,
            hold_count: 2,
            lease_ms: 8000
        })
    ));
    let mut conn = redis_conn(&redis).await;
    let ttl: i64 = conn.pttl("t:{k}:lock").await.unwrap();
    assert!(ttl > 7900, "reentry resets the lease: {ttl}");
}

#[tokio::test]
async fn release_publishes_exactly_when_the_lock_becomes_free() {
    let redis = redis();
    let locks = locks(&redis).await;
    let client = redis::Client::open(redis.url()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe("t:{k}:lock:wake").await.unwrap();
    let mut messages = pubsub.into_on_message();

    hold_twice(&locks, "k", "a").await;
    assert_eq!(
        locks.release("k", "a", false).await.unwrap(),
        Some(Released {
            released: false,
            hold_count: 1,
            left_queue: false
        })
    );
    assert_eq!(
        locks.release("k", "b", false).await.unwrap(),
        None,
        "a stranger cannot release"
    );
    assert_eq!(
        locks.release("k", "a", false).await.unwrap(),
        Some(Released {
            released: true,
            hold_count: 0,
            left_queue: false
        })
    );
    let message = tokio::time::timeout(Duration::from_secs(1), messages.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(message.get_channel_name(), "t:{k}:lock:wake");
    // Only one message: the partial release and the stranger published nothing.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), messages.next())
            .await
            .is_err()
    );

    locks
        .try_acquire("k", "c", 5000, None, &AttemptId::new())
        .await
        .unwrap();
    assert!(locks.force_unlock("k").await.unwrap());
    assert!(
        tokio::time::timeout(Duration::from_secs(1), messages.next())
            .await
            .is_ok()
    );
    assert!(!locks.force_unlock("k").await.unwrap());
    assert!(
        tokio::time::timeout(Duration::from_millis(200), messages.next())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn heartbeat_renews_only_for_the_holder_and_cannot_revive_an_expired_hold() {
    let redis = redis();
    let locks = locks(&redis).await;
    locks
        .try_acquire("k", "a", 500, None, &AttemptId::new())
        .await
        .unwrap();
    assert_eq!(locks.heartbeat("k", "b", Some(9000)).await.unwrap(), None);
    let renewed = locks.heartbeat("k", "a", None).await.unwrap().unwrap();
    assert_eq!(renewed.lease_ms, 500, "no lease_ms keeps the stored lease");
    tokio::time::sleep(Duration::from_millis(650)).await;
    assert_eq!(locks.heartbeat("k", "a", Some(9000)).await.unwrap(), None);
    let mut conn = redis_conn(&redis).await;
    let exists: bool = conn.exists("t:{k}:lock").await.unwrap();
    assert!(!exists, "a failed heartbeat must not recreate the key");
}

#[tokio::test]
async fn state_reads_one_snapshot_without_the_holder() {
    let redis = redis();
    let locks = locks(&redis).await;
    let free = locks.state("k").await.unwrap();
    assert!(!free.locked && free.fencing_token == 0 && free.ttl_ms == 0);
    hold_twice(&locks, "k", "a").await;
    let held = locks.state("k").await.unwrap();
    assert!(held.locked && held.hold_count == 2 && held.fencing_token == 1 && held.ttl_ms > 4800);
}

/// `holder` takes `name` and re-enters it: hold count 2.
async fn hold_twice(locks: &Locks, name: &str, holder: &str) {
    for _ in 0..2 {
        let attempt = AttemptId::new();
        let tried = locks.try_acquire(name, holder, 5000, None, &attempt).await;
        assert!(matches!(tried.unwrap(), Attempt::Granted(_)));
    }
}

fn count_of(attempt: Attempt<LockGrant>) -> u64 {
    match attempt {
        Attempt::Granted(grant) => grant.hold_count,
        other => panic!("not granted: {other:?}"),
    }
}

#[tokio::test]
async fn an_attempt_repeated_after_a_lost_reply_grants_once() {
    let redis = redis();
    let locks = locks(&redis).await;
    let attempt = AttemptId::new();
    let first = locks
        .try_acquire("k", "a", 5000, None, &attempt)
        .await
        .unwrap();
    let again = locks
        .try_acquire("k", "a", 5000, None, &attempt)
        .await
        .unwrap();
    assert_eq!((count_of(first), count_of(again)), (1, 1));
    assert_eq!(locks.state("k").await.unwrap().hold_count, 1);
}

#[tokio::test]
async fn undo_gives_back_only_what_its_own_attempt_granted() {
    let redis = redis();
    let locks = locks(&redis).await;
    let (first, second, blocked) = (AttemptId::new(), AttemptId::new(), AttemptId::new());
    locks
        .try_acquire("k", "a", 5000, None, &first)
        .await
        .unwrap();
    locks
        .try_acquire("k", "a", 5000, None, &second)
        .await
        .unwrap();
    assert!(matches!(
        locks
            .try_acquire("k", "b", 5000, None, &blocked)
            .await
            .unwrap(),
        Attempt::Blocked(_)
    ));
    // An attempt that granted nothing gives back nothing — not even when
    // its holder id is wrong or right.
    assert!(!locks.undo("k", "b", &blocked).await.unwrap());
    assert!(!locks.undo("k", "a", &AttemptId::new()).await.unwrap());
    assert_eq!(locks.state("k").await.unwrap().hold_count, 2);
    // The first attempt's hold goes; the second's stays, and can itself be
    // undone once (then the lock is free).
    assert!(locks.undo("k", "a", &first).await.unwrap());
    assert!(
        !locks.undo("k", "a", &first).await.unwrap(),
        "undo is idempotent"
    );
    assert_eq!(locks.state("k").await.unwrap().hold_count, 1);
    assert!(locks.undo("k", "a", &second).await.unwrap());
    assert!(!locks.state("k").await.unwrap().locked);
}

/// A queued primitive of each kind, for the tests every kind must pass.
enum Queued {
    Fair(Locks),
    Rw(RwLocks),
    Sem(Semaphores),
}

/// An attempt's outcome: granted, and the ticket of the place it was
/// given when blocked.
fn outcome<T>(tried: Attempt<T>) -> (bool, Option<u64>) {
    match tried {
        Attempt::Granted(_) => (true, None),
        Attempt::Blocked(b) => (false, b.place.map(|p| p.ticket)),
        Attempt::Refused(_) => (false, None),
    }
}

impl Queued {
    async fn all(redis: &latchkey::devredis::RedisServer) -> Vec<Queued> {
        let store = || store_on(latchkey::config::RedisMode::Standalone, vec![redis.url()]);
        let sem = Semaphores::new(store().await, 5000);
        for round in 0..4 {
            sem.set(&format!("q{round}"), 1).await.unwrap();
        }
        vec![
            Queued::Fair(Locks::new(store().await, LockKind::Fair { grace_ms: 5000 })),
            Queued::Rw(RwLocks::new(store().await, 5000)),
            Queued::Sem(sem),
        ]
    }

    /// A try of `holder` (a long-poll's with `wait.left_ms`), for the
    /// write hold of a rwlock and one permit of a semaphore.
    async fn try_acquire(
        &self,
        name: &str,
        holder: &str,
        wait: Wait,
        id: &AttemptId,
    ) -> (bool, Option<u64>) {
        let lease = (60000, wait);
        match self {
            Queued::Fair(l) => outcome(
                l.try_acquire_in(name, holder, 60000, wait, id, None, "")
                    .await
                    .unwrap(),
            ),
            Queued::Rw(r) => outcome(
                r.try_acquire_in(name, (holder, None), RwMode::Write, lease, id, None)
                    .await
                    .unwrap(),
            ),
            Queued::Sem(s) => outcome(
                s.try_acquire_in(name, (holder, None), 1, lease, id, None)
                    .await
                    .unwrap(),
            ),
        }
    }

    async fn release(&self, name: &str, holder: &str) {
        let released = match self {
            Queued::Fair(l) => l.release(name, holder, false).await.unwrap().is_some(),
            Queued::Rw(r) => r
                .release(name, holder, None, false)
                .await
                .unwrap()
                .is_some(),
            Queued::Sem(s) => s.release(name, holder).await.unwrap().is_some(),
        };
        assert!(released);
    }

    async fn undo(&self, name: &str, holder: &str, id: &AttemptId, wait: Wait) -> bool {
        match self {
            Queued::Fair(l) => l.undo_waiting(name, holder, id, wait).await,
            Queued::Rw(r) => r.undo(name, holder, id, wait).await,
            Queued::Sem(s) => s.undo(name, holder, id, wait).await,
        }
        .unwrap()
    }
}

/// A waiter whose grant is given back (the try that granted it was cut
/// short, by a Redis stall say, and its reply never reached the waiter)
/// keeps its place while its long-poll does: while it waits, and for the
/// grace after its wait ended (a last look at the deadline cut short
/// answers "not acquired", and such a long-poll keeps its place like any
/// other). The undo puts it back at its ticket, so no one who came after it
/// is granted first, until what is left of the grace. An undo of a try, or
/// of a long-poll whose grace has passed, keeps no place. Fair locks,
/// rwlocks and semaphores alike.
#[tokio::test]
async fn a_waiter_whose_grant_is_given_back_keeps_its_place() {
    let redis = redis();
    let mut conn = redis_conn(&redis).await;
    let fresh = AttemptId::new;
    let try_only = Wait::default();
    // What the undo sends, whether w keeps its place, and for how long
    // (ms, as Redis's clock says; the grace is 5 s).
    type Sent = fn(Wait) -> Wait;
    let rounds: [(Sent, bool, Option<u64>); 4] = [
        (|wait| wait, true, Some(5000)),
        (|_| Wait::default(), false, None),
        (
            |wait| Wait {
                left_ms: Some(0),
                ended_ms_ago: 1500,
                ..wait
            },
            true,
            Some(3500),
        ),
        (
            |wait| Wait {
                left_ms: Some(0),
                ended_ms_ago: 5000,
                ..wait
            },
            false,
            None,
        ),
    ];
    for (base, queued) in ["fair", "rw", "sem"]
        .into_iter()
        .zip(Queued::all(&redis).await)
    {
        for (round, (sent, kept, lasts)) in rounds.iter().enumerate() {
            let name = format!("q{round}");
            assert!(queued.try_acquire(&name, "x", try_only, &fresh()).await.0);
            // w long-polls: blocked, it takes a place.
            let long_poll = Wait::from(Some(10000));
            let (granted, ticket) = queued.try_acquire(&name, "w", long_poll, &fresh()).await;
            assert!(!granted);
            let wait = Wait {
                left_ms: Some(9000),
                ticket: ticket.expect("a long-poll behind a hold takes a place"),
                ..Wait::default()
            };
            queued.release(&name, "x").await;
            // w's next try is granted, but its reply is lost: given back.
            let lost = fresh();
            assert!(queued.try_acquire(&name, "w", wait, &lost).await.0);
            assert!(queued.undo(&name, "w", &lost, sent(wait)).await);
            if let Some(lasts) = lasts {
                let now = redis_ms(&mut conn).await;
                let deadlines = format!("t:{{{name}}}:{base}:deadlines");
                let member = match base {
                    "fair" => "w".to_string(),
                    "rw" => "w|w".to_string(),
                    _ => "1|w".to_string(),
                };
                let until: Option<f64> = conn.zscore(&deadlines, &member).await.unwrap();
                let until = until.unwrap_or_else(|| panic!("{base} round {round}: w has no place"));
                let left = until as u64 - now;
                assert!(
                    left <= *lasts && left + 500 > *lasts,
                    "{base} round {round}: w's place lasts {left} ms, not {lasts}"
                );
            }
            // n arrives after w: a try.
            let (n, _) = queued.try_acquire(&name, "n", try_only, &fresh()).await;
            assert_eq!(n, !kept, "{base} round {round}");
            if *kept {
                let (again, _) = queued.try_acquire(&name, "w", wait, &fresh()).await;
                assert!(again, "w keeps its place and goes");
            }
        }
    }
}

#[tokio::test]
async fn a_released_hold_is_not_given_back_twice() {
    let redis = redis();
    let locks = locks(&redis).await;
    let (first, second) = (AttemptId::new(), AttemptId::new());
    locks
        .try_acquire("k", "a", 5000, None, &first)
        .await
        .unwrap();
    locks
        .try_acquire("k", "a", 5000, None, &second)
        .await
        .unwrap();
    // The holder releases one hold (the latest, `second`'s) by itself.
    locks.release("k", "a", false).await.unwrap();
    assert!(!locks.undo("k", "a", &second).await.unwrap());
    assert!(
        locks.state("k").await.unwrap().locked,
        "first's hold survives"
    );
}

#[tokio::test]
async fn an_undo_that_arrives_first_keeps_its_late_attempt_from_granting() {
    let redis = redis();
    let locks = locks(&redis).await;
    let late = AttemptId::new();
    assert!(!locks.undo("k", "a", &late).await.unwrap());
    assert!(
        locks
            .try_acquire("k", "a", 5000, None, &late)
            .await
            .is_err()
    );
    assert!(!locks.state("k").await.unwrap().locked);
    let mut conn = redis_conn(&redis).await;
    let marker_ttl: i64 = conn
        .pttl(format!("t:{{k}}:lock:undone:{}", late.as_str()))
        .await
        .unwrap();
    assert!(marker_ttl > 0, "the marker expires by itself");
}

/// Both variants of every script compile (`SCRIPT LOAD`): the prelude
/// that names the publishing command is valid Lua for Redis.
#[tokio::test]
async fn every_script_loads_in_both_publishing_variants() {
    let redis = redis();
    let mut conn = redis_conn(&redis).await;
    for script in latchkey::store::scripts::ALL.iter() {
        for publish in [Publish::Classic, Publish::Sharded] {
            let loaded: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(script.source(publish))
                .query_async(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("{} ({publish:?}): {e}", script.name()));
            assert_eq!(
                loaded,
                script.redis(publish).get_hash(),
                "{}",
                script.name()
            );
        }
    }
}

/// On a Redis Cluster the scripts publish by `SPUBLISH`: a shard
/// subscriber of the channel hears a release (once, and only when the lock
/// becomes free), and pattern subscribers on the nodes hear nothing.
#[tokio::test]
async fn on_a_cluster_a_release_publishes_on_its_shard_only() {
    let cluster = latchkey::devredis::RedisCluster::start(3).expect("cluster starts");
    let locks = locks_on(latchkey::config::RedisMode::Cluster, cluster.urls()).await;
    let (tx, mut pushes) = tokio::sync::mpsc::unbounded_channel();
    let mut sharded = redis::cluster::ClusterClient::builder(cluster.urls())
        .use_protocol(redis::ProtocolVersion::RESP3)
        .push_sender(tx)
        .build()
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    sharded.ssubscribe("t:{k}:lock:wake").await.unwrap();
    let mut classic = Vec::new();
    for node in &cluster.nodes {
        let mut pubsub = node.client().get_async_pubsub().await.unwrap();
        pubsub.psubscribe("t:*").await.unwrap();
        classic.push(pubsub.into_on_message());
    }
    let mut messages = futures_util::stream::select_all(classic);
    let mut next_message = async || loop {
        let push = pushes.recv().await.expect("pushes");
        if push.kind == redis::PushKind::SMessage {
            return push.data;
        }
    };

    hold_twice(&locks, "k", "a").await;
    assert!(locks.release("k", "a", false).await.unwrap().is_some());
    assert!(locks.release("k", "a", false).await.unwrap().is_some());
    let data = tokio::time::timeout(Duration::from_secs(1), next_message())
        .await
        .expect("a shard message");
    assert_eq!(
        data,
        vec![
            redis::Value::BulkString(b"t:{k}:lock:wake".to_vec()),
            redis::Value::BulkString(b"free".to_vec())
        ]
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(200), next_message())
            .await
            .is_err(),
        "only when the lock became free"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(200), messages.next())
            .await
            .is_err(),
        "no classic message on any node"
    );
}

/// `lock_state` reports the hold (owner label, lease left, time held, no
/// holder id) and, on fair locks, the queue's places that have not lapsed
/// (a lapsed place no write has pruned yet is not counted); a blocked try
/// names the holder's owner.
#[tokio::test]
async fn lock_state_reports_the_hold_and_the_live_queue_places() {
    use latchkey::coord::Wait;
    let redis = redis();
    let store = test_store(&redis).await;
    let fair = Locks::new(store, LockKind::Fair { grace_ms: 200 });
    let take = |holder: &'static str, owner: &'static str, wait: Wait| {
        let fair = fair.clone();
        async move {
            fair.try_acquire_in("q", holder, 5000, wait, &AttemptId::new(), None, owner)
                .await
                .unwrap()
        }
    };
    assert!(matches!(
        take("a", "owner a", Wait::default()).await,
        Attempt::Granted(_)
    ));
    let waiting = Wait {
        left_ms: Some(100),
        ..Wait::default()
    };
    match take("b", "", waiting).await {
        Attempt::Blocked(blocked) => {
            assert_eq!(blocked.held_by, vec![Some("owner a".to_string())]);
            assert!(blocked.place.is_some(), "a long-poll takes a place");
        }
        other => panic!("expected blocked, got {other:?}"),
    }
    let state = fair.state("q").await.unwrap();
    assert_eq!(state.queued, Some(1));
    let hold = &state.holds[..];
    assert_eq!(hold.len(), 1);
    assert_eq!(hold[0].owner.as_deref(), Some("owner a"));
    assert_eq!((hold[0].count, hold[0].session), (1, false));
    assert!(hold[0].expires_in_ms <= 5000);
    // b's place lapses at its wait (100 ms) plus the grace (200 ms).
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(fair.state("q").await.unwrap().queued, Some(0));
    let plain = locks(&redis).await;
    let free = plain.state("q").await.unwrap();
    assert_eq!((free.holds.len(), free.queued), (0, None));
}

#[tokio::test]
async fn a_release_that_nobody_waits_behind_reads_no_queue() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let put = app
        .client
        .put(app.url("/semaphores/quiet"))
        .json(&serde_json::json!({"permits": 4}))
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{}", put.status());
    let mut conn = redis_conn(&redis).await;
    // Every release is a DELETE of the holder, which first looks for the
    // holder in the queue: with no queue (one EXISTS says so), it does not
    // count the queue too. (A read-write lock's release counts its
    // readers once: whether anything stays held.)
    for (acquire, release, zcard) in [
        (
            "/semaphores/quiet/acquire",
            "/semaphores/quiet/holders/h1",
            0,
        ),
        (
            "/rwlocks/quiet/read/acquire",
            "/rwlocks/quiet/holders/h1",
            1,
        ),
        (
            "/rwlocks/quiet/write/acquire",
            "/rwlocks/quiet/holders/h1",
            1,
        ),
    ] {
        let granted = app.post(acquire, serde_json::json!({"holder": "h1"})).await;
        assert_eq!(granted.status(), 201, "{acquire}");
        reset_command_stats(&mut conn).await;
        let released = app.client.delete(app.url(release)).send().await.unwrap();
        assert_eq!(released.status(), 200, "{release}");
        let body: serde_json::Value = released.json().await.unwrap();
        assert_eq!(body["left_queue"], false, "{release}: {body}");
        assert_eq!(command_calls(&mut conn, "zcard").await, zcard, "{release}");
        assert!(command_calls(&mut conn, "exists").await > 0, "{release}");
    }
}

/// Every Redis command the scripts ran since the last `CONFIG RESETSTAT`,
/// the script calls themselves and the test's own commands left out.
pub(crate) async fn script_commands(
    conn: &mut redis::aio::MultiplexedConnection,
) -> std::collections::BTreeMap<String, u64> {
    let mut called = commands_called(conn).await;
    called.retain(|name, _| {
        !(["fcall", "evalsha", "eval", "info"].contains(&name.as_str())
            || name.starts_with("config")
            || name.starts_with("function"))
    });
    called
}

/// What a pair (an acquire, then the DELETE of its holder) asks of Redis,
/// with nobody queued: no scan of the leases for ended holds while none
/// can have ended (the reclaim floor), no read of the last lease to move
/// the keys' TTL (an acquire only ever extends it, a release never
/// shortens it), and a last hold's release deletes the keys without
/// first taking its fields out of them.
#[tokio::test]
async fn a_pair_that_nobody_waits_behind_asks_redis_only_what_it_changes() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let mut conn = redis_conn(&redis).await;
    crate::semaphores::put(&app, "busy", 8).await;
    // The benchmark's shape: others hold permits of the same semaphore.
    for other in ["o1", "o2"] {
        let granted = app
            .post(
                "/semaphores/busy/acquire",
                serde_json::json!({"holder": other}),
            )
            .await;
        assert_eq!(granted.status(), 201);
    }
    let pair = |acquire: &'static str, release: &'static str| {
        let app = &app;
        let mut conn = conn.clone();
        async move {
            reset_command_stats(&mut conn).await;
            let granted = app.post(acquire, serde_json::json!({"holder": "h1"})).await;
            assert_eq!(granted.status(), 201, "{acquire}");
            let acquired = script_commands(&mut conn).await;
            reset_command_stats(&mut conn).await;
            let released = app.client.delete(app.url(release)).send().await.unwrap();
            assert_eq!(released.status(), 200, "{release}");
            (acquired, script_commands(&mut conn).await)
        }
    };
    let total = |c: &std::collections::BTreeMap<String, u64>| c.values().sum::<u64>();

    let (acquired, released) =
        pair("/semaphores/busy/acquire", "/semaphores/busy/holders/h1").await;
    for (what, calls) in [("acquire", &acquired), ("release", &released)] {
        assert_eq!(
            calls.get("zrangebyscore"),
            None,
            "semaphore {what}: {calls:?}"
        );
        assert_eq!(calls.get("zrange"), None, "semaphore {what}: {calls:?}");
    }
    assert_eq!(released.get("pexpire"), None, "{released:?}");
    // (One of them an HLEN: a small hash is not kept as a table yet.)
    assert!(total(&acquired) <= 10, "semaphore acquire: {acquired:?}");
    assert!(total(&released) <= 6, "semaphore release: {released:?}");

    // The last hold of a semaphore, and of a read-write lock.
    for other in ["o1", "o2"] {
        let gone = app
            .client
            .delete(app.url(&format!("/semaphores/busy/holders/{other}")))
            .send()
            .await
            .unwrap();
        assert_eq!(gone.status(), 200);
    }
    let (acquired, released) =
        pair("/semaphores/busy/acquire", "/semaphores/busy/holders/h1").await;
    assert_eq!(acquired.get("hlen"), None, "first hold: {acquired:?}");
    assert!(total(&acquired) <= 9, "first semaphore hold: {acquired:?}");
    assert!(
        total(&released) <= 4,
        "last semaphore release: {released:?}"
    );
    assert_eq!(released.get("hdel"), None, "{released:?}");
    // A read hold on a free read-write lock: the EXISTS that looks for the
    // attempt's marker and the queue finds no readers either, so nothing
    // is scanned for ended leases, this hold is the last to end, and the
    // hash holds its fields alone (no HLEN).
    let (acquired, released) =
        pair("/rwlocks/alone/read/acquire", "/rwlocks/alone/holders/h1").await;
    assert_eq!(acquired.get("zrange"), None, "{acquired:?}");
    assert_eq!(acquired.get("exists"), Some(&1), "{acquired:?}");
    assert_eq!(acquired.get("hlen"), None, "{acquired:?}");
    assert!(total(&acquired) <= 8, "read acquire: {acquired:?}");
    assert!(total(&released) <= 5, "last read release: {released:?}");
    assert_eq!(released.get("hdel"), None, "{released:?}");
    assert_eq!(released.get("zrangebyscore"), None, "{released:?}");
    // A fair lock nobody waits on: one EXISTS asks for the attempt's
    // marker and the queue at once, the grant time is the script's one
    // TIME, and a release leaves the queue it found absent alone.
    let (acquired, released) =
        pair("/fair-locks/alone/acquire", "/fair-locks/alone/holders/h1").await;
    assert_eq!(acquired.get("exists"), Some(&1), "{acquired:?}");
    assert_eq!(acquired.get("time"), Some(&1), "{acquired:?}");
    assert!(total(&acquired) <= 6, "fair acquire: {acquired:?}");
    assert_eq!(released.get("zrange"), None, "{released:?}");
    assert_eq!(released.get("del"), Some(&1), "{released:?}");
    assert!(total(&released) <= 4, "fair release: {released:?}");
    let left: i64 = redis::cmd("EXISTS")
        .arg("latchkey:{busy}:sem:holds")
        .arg("latchkey:{busy}:sem:leases")
        .arg("latchkey:{alone}:rw")
        .arg("latchkey:{alone}:rw:readers")
        .arg("latchkey:{alone}:fair")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, 0, "the last release deletes the holds");
}

/// The scripts write a grant time as text made of TIME's reply (time_text
/// in holds.lua: the seconds, then the ms of the microseconds in three
/// digits), not as a number Redis must format: each case of the
/// microseconds gives the ms the arithmetic gives.
#[tokio::test]
async fn a_grant_time_as_text_is_the_ms_of_redis_s_clock() {
    let redis = redis();
    let mut conn = redis_conn(&redis).await;
    let source = format!(
        "{}\nreturn time_text(ARGV)",
        include_str!("../../src/store/scripts/holds.lua")
    );
    let script = redis::Script::new(&source);
    for micros in [0u64, 7, 999, 1000, 1999, 59_999, 100_000, 123_456, 999_999] {
        let text: String = script
            .arg("1795752474")
            .arg(micros.to_string())
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            text,
            (1_795_752_474u64 * 1000 + micros / 1000).to_string(),
            "{micros} µs"
        );
    }
}

/// A lock's, a semaphore hold's and a read hold's grant time is Redis's
/// clock when it was granted, in ms: between TIME read before and after
/// the acquire.
#[tokio::test]
async fn every_grant_time_is_redis_s_clock_in_ms() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let mut conn = redis_conn(&redis).await;
    crate::semaphores::put(&app, "g", 4).await;
    for (acquire, key, field) in [
        ("/locks/g/acquire", "latchkey:{g}:lock", "t"),
        ("/semaphores/g/acquire", "latchkey:{g}:sem:holds", "th|h"),
        ("/rwlocks/g/read/acquire", "latchkey:{g}:rw", "tr|h"),
    ] {
        let before = redis_ms(&mut conn).await;
        let granted = app.post(acquire, serde_json::json!({"holder": "h"})).await;
        assert_eq!(granted.status(), 201, "{acquire}");
        let after = redis_ms(&mut conn).await;
        let at: String = conn.hget(key, field).await.unwrap();
        let at: u64 = at.parse().expect("a whole number of ms");
        assert!(
            before <= at && at <= after,
            "{acquire}: granted at {at}, between {before} and {after}?"
        );
    }
}
