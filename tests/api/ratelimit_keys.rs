//! Rate limits per key and several limits at once: each key's bound under
//! clients on two instances, keys independent of each other, no state
//! left in Redis by keys full again, a configuration change reaching
//! every key within 1 s (and never undone by a stale instance), keys
//! spread over a real Cluster's masters, all-or-nothing acquires of
//! several limits with a computed wait (standalone and Cluster), an
//! `Idempotency-Key` on a key's acquire, the `RateLimit-Policy` /
//! `RateLimit` header fields, a deletion ending a key's waiter, and a
//! corrupt bucket answered 503 and logged without its key or value.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use latchkey::config::RedisMode;
use latchkey::devredis::RedisCluster;
use redis::AsyncCommands;
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

use crate::helpers::*;
use crate::ratelimiters::{acquire, admitted, configure, limited};
use crate::sharded::ask;

/// `POST /rate-limiters/acquire` (several limits at once).
async fn acquire_all(app: &TestApp, body: Value) -> Response {
    app.post("/rate-limiters/acquire", body).await
}

/// `GET /rate-limiters/{name}` (`?key=` with a key), asserting 200.
async fn status(app: &TestApp, name: &str, key: Option<&str>) -> Value {
    let mut request = app.client.get(app.url(&format!("/rate-limiters/{name}")));
    if let Some(key) = key {
        request = request.query(&[("key", key)]);
    }
    let response = request.send().await.expect("sent");
    assert_eq!(response.status(), StatusCode::OK, "GET {name} key {key:?}");
    response.json().await.expect("JSON")
}

/// The permits available in `key`'s bucket (or the shared one).
async fn available(app: &TestApp, name: &str, key: Option<&str>) -> u64 {
    status(app, name, key).await["available"]
        .as_u64()
        .expect("available")
}

/// A real Cluster of three masters and an instance on it (started on the
/// test's own thread, as every Redis must be).
async fn on_a_cluster() -> (RedisCluster, TestApp) {
    let cluster = RedisCluster::start(3).expect("cluster starts");
    let app = spawn_app(Config {
        redis_mode: RedisMode::Cluster,
        ..test_config_for(cluster.urls())
    })
    .await;
    (cluster, app)
}

/// 1. Each key's bucket admits at most `burst + rate × elapsed / per_ms`
/// and comes close to it, with 8 clients per key spread over two
/// instances (a quarter of them reserving with `wait_ms`, the others
/// retrying soon after a 429). Every admission happened on Redis after
/// `started` and before the last answer, so the window is that span. The
/// `+ 1` allows for Redis's clock (the wall clock, `TIME`) and the test's
/// (monotonic) disagreeing by far less than a permit's 50 ms at the
/// window's edges: one permit due right at an edge may fall on either
/// side. The scripts themselves round only in the strict direction.
#[tokio::test]
async fn each_keys_bound_holds_and_is_reached_from_clients_on_two_instances() {
    let redis = redis();
    let one = Arc::new(spawn_app(test_config(&redis)).await);
    let two = Arc::new(spawn_app(test_config(&redis)).await);
    let (rate, per_ms, burst) = (20u64, 1000u64, 5u64);
    configure(
        &one,
        "per-key",
        json!({"rate": rate, "per_ms": per_ms, "burst": burst}),
    )
    .await;
    let keys: [&'static str; 3] = ["alice", "bob", "carol"];
    let counts: Arc<Vec<AtomicU64>> = Arc::new(keys.iter().map(|_| AtomicU64::new(0)).collect());
    let run = Duration::from_millis(2500);
    let started = Instant::now();
    let mut clients = Vec::new();
    for (k, key) in keys.into_iter().enumerate() {
        for c in 0..8u64 {
            let app = if c % 2 == 0 { one.clone() } else { two.clone() };
            let counts = counts.clone();
            let reserves = c % 4 == 3;
            clients.push(tokio::spawn(async move {
                let mut last = Instant::now();
                while started.elapsed() < run {
                    let body = match reserves {
                        true => json!({"key": key, "wait_ms": 300}),
                        false => json!({"key": key}),
                    };
                    let response = acquire(&app, "per-key", body).await;
                    match response.status().as_u16() {
                        200 => {
                            counts[k].fetch_add(1, Ordering::Relaxed);
                        }
                        429 => {
                            let problem: Value = response.json().await.unwrap();
                            let retry = problem["retry_after_ms"].as_u64().unwrap();
                            tokio::time::sleep(Duration::from_millis(retry.min(30) + c)).await;
                        }
                        other => panic!("unexpected {other}"),
                    }
                    last = Instant::now();
                }
                last
            }));
        }
    }
    let mut ended = started;
    for client in clients {
        ended = ended.max(client.await.unwrap());
    }
    let elapsed_ms = ended.duration_since(started).as_secs_f64() * 1000.0;
    let bound = burst as f64 + rate as f64 * elapsed_ms / per_ms as f64;
    for (k, key) in keys.iter().enumerate() {
        let admitted = counts[k].load(Ordering::Relaxed) as f64;
        assert!(
            admitted <= bound + 1.0,
            "key {key}: {admitted} admitted in {elapsed_ms:.0} ms, bound {bound:.1}"
        );
        assert!(
            admitted >= 0.8 * bound,
            "key {key}: only {admitted} admitted in {elapsed_ms:.0} ms, bound {bound:.1}"
        );
        eprintln!("key {key}: {admitted} admitted in {elapsed_ms:.0} ms (bound {bound:.1})");
    }
}

/// 2. Exhausting one key leaves every other key, and the shared bucket,
/// full.
#[tokio::test]
async fn keys_are_independent_of_each_other_and_of_the_shared_bucket() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let config = json!({"rate": 1, "per_ms": 3_600_000, "burst": 3});
    configure(&app, "indep", config).await;
    let grant = admitted(&app, "indep", json!({"key": "a", "permits": 3})).await;
    assert_eq!(grant, json!({"permits": 3, "available": 0}));
    let problem = limited(&app, "indep", json!({"key": "a"})).await;
    assert_eq!(problem["available"], 0, "{problem}");
    let a = status(&app, "indep", Some("a")).await;
    assert_eq!(
        a,
        json!({"name": "indep", "key": "a", "rate": 1, "per_ms": 3_600_000, "burst": 3, "available": 0})
    );
    assert_eq!(available(&app, "indep", Some("b")).await, 3);
    assert_eq!(available(&app, "indep", None).await, 3);
    assert!(status(&app, "indep", None).await.get("key").is_none());
    let grant = admitted(&app, "indep", json!({"key": "b", "permits": 2})).await;
    assert_eq!(grant, json!({"permits": 2, "available": 1}));
    let grant = admitted(&app, "indep", json!({"permits": 3})).await;
    assert_eq!(grant, json!({"permits": 3, "available": 0}), "shared");
    assert_eq!(available(&app, "indep", Some("a")).await, 0);
    assert_eq!(available(&app, "indep", Some("b")).await, 1);
    assert_eq!(available(&app, "indep", Some("c")).await, 3);
    // A key is any UTF-8 without control characters, up to 256 bytes.
    let long = "é".repeat(128);
    assert_eq!(available(&app, "indep", Some(&long)).await, 3);
    for bad in [json!(""), json!("a\nb"), json!("x".repeat(257))] {
        let response = acquire(&app, "indep", json!({"key": bad})).await;
        assert_problem(response, 400, "invalid-body").await;
    }
}

/// 3. 10 000 distinct keys leave nothing behind once full again: only the
/// limiter's own hash remains. A key's bucket has a TTL while not full.
///
/// Defect (seen in 4 of 14 to 17 runs, each time with other tests running
/// alongside; not in 3 runs alone): PUT `many` (1000 per 1000 ms, burst 1000),
/// then one acquire of 1 permit for each of 10 000 keys, 64 at a time, all
/// answered 200; 1.1 s later `KEYS *` still lists one bucket, e.g.
/// `latchkey:{many|2750ce52}:rlk:user-6043`, holding only
/// `last = <attempt id>` and with no TTL (PTTL -1): it never goes away.
/// Expected: only `latchkey:{many}:rl`. Redis's MONITOR showed that key's
/// one script (`rl_acquire.lua`, EVALSHA at 646.981992): HMGET; HSET tat,
/// frac, rate, ... at .982043; PEXPIRE 2 at .986127 (4 ms later: Redis
/// was descheduled mid-script); HSET last at .986201. Nothing else
/// touched the key. So the bucket was gone by the HSET of `last` (its
/// 2 ms had passed), which made it anew with `last` alone and no TTL.
/// `rl_multi.lua` has the same order (`store_bucket`, then HSET last).
/// Writing `last` in `store_bucket`'s HSET, before its PEXPIRE, and never
/// after a DEL, would leave no such key.
#[tokio::test]
async fn ten_thousand_keys_leave_nothing_behind_once_full_again() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let mut conn = redis_conn(&redis).await;
    let config = json!({"rate": 1000, "per_ms": 1000, "burst": 1000});
    configure(&app, "many", config).await;
    // A bucket drained of its whole burst is full again in 1 s.
    admitted(&app, "many", json!({"key": "drained", "permits": 1000})).await;
    let buckets: Vec<String> = conn.keys("*:rlk:*").await.unwrap();
    assert_eq!(buckets.len(), 1, "{buckets:?}");
    assert!(buckets[0].ends_with(":rlk:drained"), "{buckets:?}");
    // The script sets the time until full in whole ms plus 2 (one for a
    // fraction of a ms, one for the ms Redis's expiry may count from
    // before its clock was read): 1002 when read in the same ms.
    let ttl: i64 = conn.pttl(&buckets[0]).await.unwrap();
    assert!(
        (1..=1002).contains(&ttl),
        "a bucket not full expires: {ttl}"
    );

    let statuses: Vec<u16> = futures_util::stream::iter(0..10_000)
        .map(|i| {
            let app = &app;
            async move {
                let body = json!({"key": format!("user-{i}")});
                acquire(app, "many", body).await.status().as_u16()
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    assert!(statuses.iter().all(|s| *s == 200), "every key admits");
    // Every bucket is full again 1 ms after its acquire ("drained" 1 s).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let keys: Vec<String> = conn.keys("*").await.unwrap();
    for key in keys.iter().filter(|k| k.contains(":rlk:")) {
        let value: Option<String> = conn.get(key).await.unwrap();
        let ttl: i64 = conn.pttl(key).await.unwrap();
        eprintln!("LEFT {key}: {value:?}, PTTL {ttl}");
    }
    assert_eq!(keys, ["latchkey:{many}:rl"]);
    let cleared = eventually(Duration::from_secs(5), || {
        let mut conn = conn.clone();
        async move {
            let size: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
            size == 1
        }
    })
    .await;
    assert!(cleared, "expired buckets are removed from memory");
    assert_eq!(available(&app, "many", Some("user-7")).await, 1000);
}

/// The Redis key of the bucket of rate-limit key `key` (there must be
/// exactly one).
pub(crate) async fn key_bucket(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> String {
    let buckets: Vec<String> = conn.keys(format!("*:rlk:{key}")).await.unwrap();
    assert_eq!(buckets.len(), 1, "{buckets:?}");
    buckets.into_iter().next().unwrap()
}

/// A key's acquire asks Redis for the limiter's configuration, the time,
/// the key's bucket (one GET) and writes it back with its expiry (one
/// SET): a bucket kept as a hash took an HMGET, an HSET and a PEXPIRE.
/// The same whether the key has no bucket yet or one that is not full.
#[tokio::test]
async fn a_keys_acquire_reads_and_writes_its_bucket_with_one_command_each() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let mut conn = redis_conn(&redis).await;
    let config = json!({"rate": 1, "per_ms": 60_000, "burst": 3});
    configure(&app, "calls", config).await;
    for available in [2, 1] {
        reset_command_stats(&mut conn).await;
        let grant = admitted(&app, "calls", json!({"key": "k"})).await;
        assert_eq!(grant, json!({"permits": 1, "available": available}));
        let mut calls = crate::scripts::script_commands(&mut conn).await;
        // (The pub/sub connection's keep-alive may fall in the window.)
        calls.remove("ping");
        let want: std::collections::BTreeMap<String, u64> =
            [("hmget", 1), ("time", 1), ("get", 1), ("set", 1)]
                .map(|(c, n)| (c.to_string(), n))
                .into();
        assert_eq!(calls, want, "with {available} left after it");
    }
}

/// A key's bucket that an earlier version left in Redis as a hash (its
/// fields: rate, per_ms, burst, gen, ver, tat, frac, last) is read as it
/// stands, and the next write replaces it with today's string, with an
/// expiry.
#[tokio::test]
async fn a_keys_bucket_left_as_a_hash_by_an_earlier_version_is_read_and_replaced() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let mut conn = redis_conn(&redis).await;
    let config = json!({"rate": 1, "per_ms": 60_000, "burst": 2});
    configure(&app, "old", config).await;
    // The bucket's name, from a first acquire.
    admitted(&app, "old", json!({"key": "k"})).await;
    let bucket = &key_bucket(&mut conn, "k").await;
    let (gen_, ver): (String, String) = redis::cmd("HMGET")
        .arg("latchkey:{old}:rl")
        .arg(&["gen", "ver"])
        .query_async(&mut conn)
        .await
        .unwrap();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let now_us = secs * 1_000_000 + micros;
    // One permit of two taken (a permit is 60 s of emission time).
    let _: () = conn.del(bucket).await.unwrap();
    let fields = [
        ("rate", "1".to_string()),
        ("per_ms", "60000".to_string()),
        ("burst", "2".to_string()),
        ("gen", gen_),
        ("ver", ver),
        ("tat", (now_us + 60_000_000).to_string()),
        ("frac", "0".to_string()),
        ("last", "an-earlier-attempt".to_string()),
    ];
    let _: () = conn.hset_multiple(bucket, &fields).await.unwrap();
    let _: () = conn.pexpire(bucket, 60_000).await.unwrap();
    assert_eq!(available(&app, "old", Some("k")).await, 1, "read as a hash");
    let grant = admitted(&app, "old", json!({"key": "k"})).await;
    assert_eq!(grant, json!({"permits": 1, "available": 0}));
    let kind: String = redis::cmd("TYPE")
        .arg(bucket)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(kind, "string", "replaced by the write");
    let ttl: i64 = conn.pttl(bucket).await.unwrap();
    assert!(
        (60_000..=120_002).contains(&ttl),
        "it expires once full: {ttl}"
    );
    let problem = limited(&app, "old", json!({"key": "k"})).await;
    assert_eq!(problem["available"], 0, "{problem}");
}

/// 4. A PUT on one instance reaches every key on another within 1 s: the
/// keys obey the new burst and rate. And a key never goes back to an
/// older configuration: an instance whose copy is older than the key's
/// bucket does not apply it.
#[tokio::test]
async fn a_configuration_change_reaches_every_key_within_a_second_across_instances() {
    let redis = redis();
    let a = spawn_app(test_config(&redis)).await;
    let b = spawn_app(test_config(&redis)).await;
    configure(&a, "cfg", json!({"rate": 10, "per_ms": 1000, "burst": 10})).await;
    let keys = ["k0", "k1", "k2"];
    for key in keys {
        let grant = admitted(&b, "cfg", json!({"key": key})).await;
        assert_eq!(grant["available"], 9, "{key}");
    }
    // B reads the configuration again right before the PUT: the longest
    // it may then keep its copy.
    tokio::time::sleep(Duration::from_millis(600)).await;
    admitted(&b, "cfg", json!({"key": "fresh"})).await;
    let put = Instant::now();
    let slow = json!({"rate": 1, "per_ms": 60_000, "burst": 2});
    configure(&a, "cfg", slow).await;
    let mut probe = 0;
    let reached = loop {
        probe += 1;
        let body = json!({"key": format!("probe-{probe}"), "permits": 3});
        let response = acquire(&b, "cfg", body).await;
        if response.status() == StatusCode::BAD_REQUEST {
            let problem = assert_problem(response, 400, "out-of-range").await;
            assert_eq!(problem["maximum"], 2, "{problem}");
            break put.elapsed();
        }
        assert_eq!(response.status(), StatusCode::OK, "the old burst, 10");
        assert!(put.elapsed() < Duration::from_secs(2), "never reached B");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        reached < Duration::from_secs(1),
        "reached B after {reached:?}"
    );
    for key in keys {
        let response = acquire(&b, "cfg", json!({"key": key, "permits": 3})).await;
        let problem = assert_problem(response, 400, "out-of-range").await;
        assert_eq!(problem["maximum"], 2, "{key}: {problem}");
        let state = status(&b, "cfg", Some(key)).await;
        assert_eq!(
            (state["burst"].clone(), state["rate"].clone()),
            (json!(2), json!(1))
        );
        assert_eq!(
            state["available"], 2,
            "{key}: 9 available, at most the new burst"
        );
        let grant = admitted(&b, "cfg", json!({"key": key, "permits": 2})).await;
        assert_eq!(grant, json!({"permits": 2, "available": 0}), "{key}");
        let problem = limited(&b, "cfg", json!({"key": key})).await;
        let retry = problem["retry_after_ms"].as_u64().unwrap();
        assert!(retry > 55_000, "{key}: one permit a minute: {problem}");
    }

    // Never back: v2 reaches a key through A; B must not apply v1 to that
    // key. (On one Redis a key's script reads the configuration itself, so
    // B has no stale copy to apply; on a Cluster the key's bucket keeps
    // the newer version it runs under.)
    configure(&a, "back", json!({"rate": 10, "per_ms": 1000, "burst": 10})).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    admitted(&b, "back", json!({"key": "other"})).await;
    configure(&a, "back", json!({"rate": 1, "per_ms": 60_000, "burst": 3})).await;
    let grant = admitted(&a, "back", json!({"key": "x"})).await;
    assert_eq!(grant, json!({"permits": 1, "available": 2}), "v2 on A");
    let response = acquire(&b, "back", json!({"key": "x"})).await;
    // The answer describes the configuration the key's script ran under:
    // v2 (3 over the 180 s they take to refill at one a minute).
    let policy = header(&response, "ratelimit-policy");
    assert!(policy.contains("q=3;w=180"), "{policy}");
    assert_eq!(response.status(), StatusCode::OK, "v2's bucket on B");
    let grant: Value = response.json().await.unwrap();
    assert_eq!(grant, json!({"permits": 1, "available": 1}), "v2, not v1");
    let state = status(&a, "back", Some("x")).await;
    assert_eq!(
        (state["burst"].clone(), state["available"].clone()),
        (json!(3), json!(1)),
        "the key keeps v2: {state}"
    );
}

/// 5. On a real Cluster, one limiter's keys live on many slots of every
/// master, and a key's acquire admits, refuses and waits there.
#[tokio::test]
async fn on_a_cluster_a_limiters_keys_spread_over_the_masters_and_work() {
    let (cluster, app) = on_a_cluster().await;
    configure(
        &app,
        "spread",
        json!({"rate": 1, "per_ms": 60_000, "burst": 2}),
    )
    .await;
    for i in 0..50 {
        let grant = admitted(&app, "spread", json!({"key": format!("user-{i}")})).await;
        assert_eq!(grant["available"], 1, "user-{i}");
    }
    let mut masters = 0;
    let mut slots = std::collections::BTreeSet::new();
    let mut buckets = 0;
    for node in &cluster.nodes {
        let keys: Vec<String> = ask(node, &["KEYS", "*:rlk:*"]).await;
        masters += usize::from(!keys.is_empty());
        buckets += keys.len();
        for key in &keys {
            assert!(key.starts_with("latchkey:{spread|"), "{key}");
            let slot: i64 = ask(node, &["CLUSTER", "KEYSLOT", key]).await;
            slots.insert(slot);
        }
    }
    assert_eq!(buckets, 50, "one bucket per key");
    assert_eq!(masters, 3, "on every master");
    assert!(slots.len() >= 40, "{} slots for 50 keys", slots.len());
    // Admits, refuses, waits.
    let problem = limited(&app, "spread", json!({"key": "user-0", "permits": 2})).await;
    assert!(
        problem["retry_after_ms"].as_u64().unwrap() > 55_000,
        "{problem}"
    );
    assert_eq!(problem["available"], 1);
    admitted(&app, "spread", json!({"key": "user-0"})).await;
    limited(&app, "spread", json!({"key": "user-0"})).await;
    assert_eq!(available(&app, "spread", Some("user-1")).await, 1);
    configure(
        &app,
        "spread-wait",
        json!({"rate": 5, "per_ms": 1000, "burst": 1}),
    )
    .await;
    admitted(&app, "spread-wait", json!({"key": "w"})).await;
    let sent = Instant::now();
    let grant = admitted(&app, "spread-wait", json!({"key": "w", "wait_ms": 2000})).await;
    let waited = sent.elapsed();
    assert_eq!(grant, json!({"permits": 1, "available": 0}));
    assert!(
        waited >= Duration::from_millis(150) && waited < Duration::from_millis(600),
        "one permit's time (200 ms): {waited:?}"
    );
}

/// 6. Several limits at once on a single Redis.
#[tokio::test]
async fn several_limits_are_taken_all_or_nothing_with_a_computed_wait() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    several_limits_all_or_nothing(&app).await;
}

/// 6. Several limits at once on a real Cluster (reserved one by one, given
/// back on refusal).
#[tokio::test]
async fn on_a_cluster_several_limits_are_taken_all_or_nothing_with_a_computed_wait() {
    let (_cluster, app) = on_a_cluster().await;
    several_limits_all_or_nothing(&app).await;
}

/// 6. Two limits refuse: `retry_after_ms` is when both admit (the later
/// of the two), whichever is listed first; nothing is taken.
#[tokio::test]
async fn when_two_limits_refuse_retry_after_is_when_both_admit() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    retry_after_is_when_every_limit_admits(&app).await;
}

/// 6. As above, on a real Cluster.
///
/// Defect: on a Cluster the limits are reserved one by one, and the first
/// that refuses answers the 429 with its own wait. Sequence: PUT `user`
/// (2 per hour) and `ip` (5 per hour); take 1 from `user`/u1 and 2 from
/// `ip`/i1 (one acquire of both); then POST /rate-limiters/acquire
/// `[{ip, i1, permits 5}, {user, u1, permits 2}]`. Expected: 429 with
/// `retry_after_ms` ≈ 1 800 000 (user admits 2 in half an hour, ip 5 in
/// 24 minutes: both only in half an hour), as on a single Redis. Seen:
/// `retry_after_ms` 1 439 637 and `limit` `ip`/i1: a client retrying then
/// is refused again (`RateLimiters::acquire_all` returns on the first
/// `Limited` without asking the limits after it).
#[tokio::test]
async fn on_a_cluster_when_two_limits_refuse_retry_after_is_when_both_admit() {
    let (_cluster, app) = on_a_cluster().await;
    retry_after_is_when_every_limit_admits(&app).await;
}

async fn retry_after_is_when_every_limit_admits(app: &TestApp) {
    let hour = 3_600_000;
    for (name, rate) in [("user", 2), ("ip", 5)] {
        configure(app, name, json!({"rate": rate, "per_ms": hour})).await;
    }
    let response = acquire_all(
        app,
        json!({"limits": [{"name": "ip", "key": "i1", "permits": 2}, {"name": "user", "key": "u1"}]}),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let watched = [("user", Some("u1")), ("ip", Some("i1"))];
    let before = availables(app, &watched).await;
    assert_eq!(before, [1, 3]);
    let half_hour = 1_800_000;
    // Two refuse: retry_after_ms is when both admit (the later one).
    for limits in [
        json!([{"name": "ip", "key": "i1", "permits": 5}, {"name": "user", "key": "u1", "permits": 2}]),
        json!([{"name": "user", "key": "u1", "permits": 2}, {"name": "ip", "key": "i1", "permits": 5}]),
    ] {
        let response = acquire_all(app, json!({"limits": limits})).await;
        let problem = assert_problem(response, 429, "rate-limited").await;
        let retry = problem["retry_after_ms"].as_u64().unwrap();
        assert!(
            (half_hour - 60_000..=half_hour).contains(&retry),
            "user admits in half an hour, ip in 24 minutes; both then: {problem}"
        );
        assert_eq!(availables(app, &watched).await, before, "{limits}");
    }
}

/// The permits available in each of `limits` (name, key).
async fn availables(app: &TestApp, limits: &[(&str, Option<&str>)]) -> Vec<u64> {
    let mut all = Vec::new();
    for (name, key) in limits {
        all.push(available(app, name, *key).await);
    }
    all
}

/// Asserts a 429 of several limits naming `name`/`key`; returns it.
async fn refused_by(response: Response, name: &str, key: Option<&str>) -> Value {
    let problem = assert_problem(response, 429, "rate-limited").await;
    assert_eq!(
        problem["limit"],
        json!({"name": name, "key": key}),
        "{problem}"
    );
    problem
}

async fn several_limits_all_or_nothing(app: &TestApp) {
    let hour = 3_600_000;
    for (name, rate) in [("user", 2), ("ip", 5), ("global", 10)] {
        configure(app, name, json!({"rate": rate, "per_ms": hour})).await;
    }
    let watched = [
        ("user", Some("u1")),
        ("ip", Some("i1")),
        ("global", None),
        ("user", None),
        ("ip", Some("i2")),
    ];
    // All admit: each decreases by its permits.
    let response = acquire_all(
        app,
        json!({"limits": [
            {"name": "ip", "key": "i1", "permits": 2},
            {"name": "global", "permits": 3},
            {"name": "user", "key": "u1"},
        ]}),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let grant: Value = response.json().await.unwrap();
    assert_eq!(
        grant,
        json!({"limits": [
            {"name": "ip", "key": "i1", "permits": 2, "available": 3},
            {"name": "global", "key": null, "permits": 3, "available": 7},
            {"name": "user", "key": "u1", "permits": 1, "available": 1},
        ]})
    );
    let before = availables(app, &watched).await;
    assert_eq!(before, [1, 3, 7, 2, 5]);

    // One refuses, first or last: nothing is taken from any.
    let half_hour = 1_800_000;
    for limits in [
        json!([{"name": "ip", "key": "i1"}, {"name": "global"}, {"name": "user", "key": "u1", "permits": 2}]),
        json!([{"name": "user", "key": "u1", "permits": 2}, {"name": "ip", "key": "i1"}, {"name": "global"}]),
    ] {
        let response = acquire_all(app, json!({"limits": limits})).await;
        let problem = refused_by(response, "user", Some("u1")).await;
        let retry = problem["retry_after_ms"].as_u64().unwrap();
        assert!(
            (half_hour - 60_000..=half_hour).contains(&retry),
            "one permit of 2 an hour: {problem}"
        );
        assert_eq!(problem["available"], 1, "{problem}");
        assert_eq!(availables(app, &watched).await, before, "{limits}");
    }

    // 404 names the limiter; 400 beyond a burst names the limit.
    let response = acquire_all(
        app,
        json!({"limits": [{"name": "user", "key": "u1"}, {"name": "nope", "key": "x"}]}),
    )
    .await;
    let problem = assert_problem(response, 404, "not-found").await;
    assert_eq!(
        problem["limit"],
        json!({"name": "nope", "key": "x"}),
        "{problem}"
    );
    let response = acquire_all(
        app,
        json!({"limits": [{"name": "user", "key": "u1"}, {"name": "ip", "key": "i9", "permits": 6}]}),
    )
    .await;
    let problem = assert_problem(response, 400, "out-of-range").await;
    assert_eq!(
        problem["limit"],
        json!({"name": "ip", "key": "i9"}),
        "{problem}"
    );
    assert_eq!(problem["maximum"], 5, "{problem}");
    // Duplicates, an Idempotency-Key, no limits: 400.
    let response = acquire_all(
        app,
        json!({"limits": [{"name": "user", "key": "u1"}, {"name": "user", "key": "u1", "permits": 1}]}),
    )
    .await;
    assert_problem(response, 400, "invalid-body").await;
    let response = acquire_all(app, json!({"limits": []})).await;
    assert_problem(response, 400, "invalid-body").await;
    let response = app
        .client
        .post(app.url("/rate-limiters/acquire"))
        .header("idempotency-key", "once")
        .json(&json!({"limits": [{"name": "global"}]}))
        .send()
        .await
        .unwrap();
    assert_problem(response, 400, "invalid-body").await;
    assert_eq!(availables(app, &watched).await, before);
    assert_eq!(available(app, "ip", Some("i9")).await, 5);

    // The wait is computed: one permit every 100 ms in `wa`'s key, every
    // 250 ms in `wb`; both drained, both admit again in 250 ms. `wb`, the
    // later, is listed first: with the earlier first, a Cluster answers
    // the earlier's wait (the defect of
    // `on_a_cluster_when_two_limits_refuse_retry_after_is_when_both_admit`).
    configure(app, "wa", json!({"rate": 10, "per_ms": 1000, "burst": 1})).await;
    configure(app, "wb", json!({"rate": 4, "per_ms": 1000, "burst": 1})).await;
    let both = json!([{"name": "wb"}, {"name": "wa", "key": "k"}]);
    let response = acquire_all(app, json!({"limits": both})).await;
    assert_eq!(response.status(), StatusCode::OK);
    let sent = Instant::now();
    let response = acquire_all(app, json!({"limits": both})).await;
    let answered = Instant::now();
    let problem = refused_by(response, "wb", None).await;
    let retry = problem["retry_after_ms"].as_u64().unwrap();
    assert!((150..=250).contains(&retry), "{problem}");
    let due_from = sent + Duration::from_millis(retry);
    let due_to = answered + Duration::from_millis(retry);
    // The waiter lists `wa` first: on a Cluster, reserved for 100 ms
    // first, then again for `wb`'s instant.
    let reversed = json!([{"name": "wa", "key": "k"}, {"name": "wb"}]);
    let waiter = app.spawn_post(
        "/rate-limiters/acquire",
        json!({"limits": reversed, "wait_ms": 2000}),
    );
    // Meanwhile `wa`'s key could admit, but its next permit is the
    // waiter's, at the instant `wb` admits: another request is refused
    // until one interval after it.
    tokio::time::sleep(Duration::from_millis(40)).await;
    let asked = Instant::now();
    let problem = limited(app, "wa", json!({"key": "k"})).await;
    let wa_next = asked + Duration::from_millis(problem["retry_after_ms"].as_u64().unwrap());
    assert!(
        wa_next + Duration::from_millis(30) >= due_from + Duration::from_millis(100),
        "wa's next permit after the waiter's: {problem}"
    );
    let response = waiter.await.unwrap();
    let at = Instant::now();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        at + Duration::from_millis(50) >= due_from && at <= due_to + Duration::from_millis(300),
        "answered {:?} after the 429, due {retry} ms after it",
        at.duration_since(sent)
    );
    let grant: Value = response.json().await.unwrap();
    assert_eq!(
        grant,
        json!({"limits": [
            {"name": "wa", "key": "k", "permits": 1, "available": 0},
            {"name": "wb", "key": null, "permits": 1, "available": 0},
        ]})
    );
}

/// 7. A retried acquire of a key with the same `Idempotency-Key` counts
/// once and replays the first answer.
#[tokio::test]
async fn an_idempotency_key_on_a_keys_acquire_counts_once() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    configure(
        &app,
        "idem-key",
        json!({"rate": 1, "per_ms": 3_600_000, "burst": 5}),
    )
    .await;
    let keyed = |body: Value| {
        app.client
            .post(app.url("/rate-limiters/idem-key/acquire"))
            .header("idempotency-key", "job-1")
            .json(&body)
            .send()
    };
    let first: Value = keyed(json!({"key": "u1", "permits": 2}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(first, json!({"permits": 2, "available": 3}));
    admitted(&app, "idem-key", json!({"key": "u1"})).await;
    for _ in 0..3 {
        let retry = keyed(json!({"key": "u1", "permits": 2})).await.unwrap();
        assert_eq!(retry.status(), StatusCode::OK);
        assert_eq!(retry.json::<Value>().await.unwrap(), first, "replayed");
    }
    assert_eq!(available(&app, "idem-key", Some("u1")).await, 2);
    assert_eq!(available(&app, "idem-key", None).await, 5);
}

/// One header's value, asserting it is present.
fn header(response: &Response, name: &str) -> String {
    response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("a {name} header"))
        .to_str()
        .expect("visible ASCII")
        .to_string()
}

/// A structured-field bare item (RFC 8941), those these fields use.
#[derive(Debug, Clone, PartialEq)]
enum Item {
    String(String),
    Bytes(Vec<u8>),
    Integer(i64),
    Token(String),
    Boolean(bool),
}

/// A structured-field list member: an item and its parameters.
type Member = (Item, Vec<(String, Item)>);

/// Parses a structured-field List of items (no inner lists), strictly:
/// panics on anything RFC 8941 does not allow.
fn parse_list(input: &str) -> Vec<Member> {
    let s = input.as_bytes();
    let mut at = 0;
    let mut members = Vec::new();
    let fail = |at: usize| -> ! { panic!("not a structured-field list at {at}: {input:?}") };
    if s.is_empty() {
        return members;
    }
    loop {
        let item = parse_item(s, &mut at).unwrap_or_else(|| fail(at));
        let mut params = Vec::new();
        while s.get(at) == Some(&b';') {
            at += 1;
            while s.get(at) == Some(&b' ') {
                at += 1;
            }
            let start = at;
            if !s
                .get(at)
                .is_some_and(|c| c.is_ascii_lowercase() || *c == b'*')
            {
                fail(at);
            }
            while s.get(at).is_some_and(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-.*".contains(c)
            }) {
                at += 1;
            }
            let key = input[start..at].to_string();
            let value = match s.get(at) {
                Some(b'=') => {
                    at += 1;
                    parse_item(s, &mut at).unwrap_or_else(|| fail(at))
                }
                _ => Item::Boolean(true),
            };
            params.push((key, value));
        }
        members.push((item, params));
        while s.get(at).is_some_and(|c| *c == b' ' || *c == b'\t') {
            at += 1;
        }
        match s.get(at) {
            None => return members,
            Some(b',') => at += 1,
            Some(_) => fail(at),
        }
        while s.get(at).is_some_and(|c| *c == b' ' || *c == b'\t') {
            at += 1;
        }
        if at == s.len() {
            fail(at);
        }
    }
}

fn parse_item(s: &[u8], at: &mut usize) -> Option<Item> {
    use base64::Engine as _;
    match *s.get(*at)? {
        b'"' => {
            let mut out = String::new();
            *at += 1;
            loop {
                let c = *s.get(*at)?;
                *at += 1;
                match c {
                    b'"' => return Some(Item::String(out)),
                    b'\\' => {
                        let e = *s.get(*at)?;
                        *at += 1;
                        if e != b'"' && e != b'\\' {
                            return None;
                        }
                        out.push(e as char);
                    }
                    0x20..=0x7e => out.push(c as char),
                    _ => return None,
                }
            }
        }
        b':' => {
            let start = *at + 1;
            let end = start + s[start..].iter().position(|c| *c == b':')?;
            *at = end + 1;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(&s[start..end])
                .ok()?;
            Some(Item::Bytes(bytes))
        }
        b'?' => {
            let value = match s.get(*at + 1)? {
                b'1' => true,
                b'0' => false,
                _ => return None,
            };
            *at += 2;
            Some(Item::Boolean(value))
        }
        c if c.is_ascii_digit() || c == b'-' => {
            let start = *at;
            *at += 1;
            while s.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            let digits = std::str::from_utf8(&s[start..*at]).ok()?;
            (digits.trim_start_matches('-').len() <= 15)
                .then(|| digits.parse().ok().map(Item::Integer))
                .flatten()
        }
        c if c.is_ascii_alphabetic() || c == b'*' => {
            let start = *at;
            while s
                .get(*at)
                .is_some_and(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(c))
            {
                *at += 1;
            }
            Some(Item::Token(String::from_utf8_lossy(&s[start..*at]).into()))
        }
        _ => None,
    }
}

/// A member's parameter.
fn param<'a>(member: &'a Member, name: &str) -> Option<&'a Item> {
    member.1.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

/// Checks one member of both fields: the limiter's name, and a key's
/// bytes as its partition key.
fn names_limit(member: &Member, name: &str, key: Option<&str>) {
    assert_eq!(member.0, Item::String(name.into()), "{member:?}");
    let pk = key.map(|k| Item::Bytes(k.as_bytes().to_vec()));
    assert_eq!(param(member, "pk").cloned(), pk, "{member:?}");
}

/// The fields of an answer: its policies and its states.
fn fields(response: &Response) -> (Vec<Member>, Vec<Member>) {
    (
        parse_list(&header(response, "ratelimit-policy")),
        parse_list(&header(response, "ratelimit")),
    )
}

/// 8. `RateLimit-Policy` and `RateLimit` on 200 and 429 of both acquire
/// routes: structured-field lists, `r` the body's `available`, `pk` the
/// key's bytes (base64 in the field).
#[tokio::test]
async fn ratelimit_header_fields_describe_every_answer() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    configure(&app, "hdr", json!({"rate": 10, "per_ms": 1000, "burst": 3})).await;
    configure(&app, "hdr-hour", json!({"rate": 2, "per_ms": 3_600_000})).await;
    let key = "用户 42;\"x\"";
    // One limit, a key: 200 then 429.
    let response = acquire(&app, "hdr", json!({"key": key, "permits": 3})).await;
    assert_eq!(response.status(), StatusCode::OK);
    let (policies, states) = fields(&response);
    let body: Value = response.json().await.unwrap();
    assert_eq!((policies.len(), states.len()), (1, 1));
    names_limit(&policies[0], "hdr", Some(key));
    // The burst over the time it takes to refill (3 at 10/s: 0.3 s, one
    // whole second), so `r` is never more than `q`.
    assert_eq!(param(&policies[0], "q"), Some(&Item::Integer(3)));
    assert_eq!(param(&policies[0], "w"), Some(&Item::Integer(1)));
    names_limit(&states[0], "hdr", Some(key));
    assert_eq!(param(&states[0], "r"), Some(&Item::Integer(0)));
    assert_eq!(body["available"], 0);
    assert!(
        matches!(param(&states[0], "t"), Some(Item::Integer(0..=1))),
        "{states:?}"
    );
    let response = acquire(&app, "hdr", json!({"key": key})).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let (policies, states) = fields(&response);
    let problem: Value = response.json().await.unwrap();
    names_limit(&policies[0], "hdr", Some(key));
    names_limit(&states[0], "hdr", Some(key));
    assert_eq!(
        param(&states[0], "r"),
        Some(&Item::Integer(problem["available"].as_i64().unwrap()))
    );
    assert_eq!(param(&states[0], "t"), Some(&Item::Integer(1)), "{problem}");
    // The shared bucket: no pk.
    let response = acquire(&app, "hdr-hour", json!({})).await;
    let (policies, states) = fields(&response);
    names_limit(&policies[0], "hdr-hour", None);
    assert_eq!(param(&policies[0], "q"), Some(&Item::Integer(2)));
    assert_eq!(param(&policies[0], "w"), Some(&Item::Integer(3600)));
    assert_eq!(param(&states[0], "r"), Some(&Item::Integer(1)));

    // Several limits: 200 then 429.
    let limits = json!([{"name": "hdr-hour", "key": "ip"}, {"name": "hdr", "key": "u"}, {"name": "hdr-hour"}]);
    let response = acquire_all(&app, json!({"limits": limits})).await;
    assert_eq!(response.status(), StatusCode::OK);
    let (policies, states) = fields(&response);
    let grant: Value = response.json().await.unwrap();
    assert_eq!((policies.len(), states.len()), (3, 3), "{policies:?}");
    for (i, (name, key)) in [
        ("hdr-hour", Some("ip")),
        ("hdr", Some("u")),
        ("hdr-hour", None),
    ]
    .into_iter()
    .enumerate()
    {
        names_limit(&policies[i], name, key);
        names_limit(&states[i], name, key);
        let r = grant["limits"][i]["available"].as_i64().unwrap();
        assert_eq!(param(&states[i], "r"), Some(&Item::Integer(r)), "{grant}");
    }
    assert_eq!(param(&states[2], "r"), Some(&Item::Integer(0)));
    let response = acquire_all(&app, json!({"limits": limits})).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let (policies, states) = fields(&response);
    let problem: Value = response.json().await.unwrap();
    // A refusal describes the limit that refused (the one it names).
    assert_eq!(policies.len(), 1, "{policies:?}");
    names_limit(&policies[0], "hdr-hour", None);
    assert_eq!(
        problem["limit"],
        json!({"name": "hdr-hour", "key": null}),
        "{problem}"
    );
    let refusing: Vec<&Member> = states.iter().filter(|m| param(m, "pk").is_none()).collect();
    assert_eq!(refusing.len(), 1, "{states:?}");
    names_limit(refusing[0], "hdr-hour", None);
    assert_eq!(
        param(refusing[0], "r"),
        Some(&Item::Integer(problem["available"].as_i64().unwrap()))
    );
}

/// 9. Deleting a limiter ends a key's waiters (one limit and several)
/// with 404.
#[tokio::test]
async fn delete_ends_a_keys_waiters_with_404() {
    let redis = redis();
    let one = spawn_app(test_config(&redis)).await;
    let two = spawn_app(test_config(&redis)).await;
    configure(
        &one,
        "gone-key",
        json!({"rate": 1, "per_ms": 20_000, "burst": 1}),
    )
    .await;
    admitted(&one, "gone-key", json!({"key": "k"})).await;
    let single = two.spawn_post(
        "/rate-limiters/gone-key/acquire",
        json!({"key": "k", "wait_ms": 30_000}),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let several = one.spawn_post(
        "/rate-limiters/acquire",
        json!({"limits": [{"name": "gone-key", "key": "k"}], "wait_ms": 50_000}),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!single.is_finished() && !several.is_finished(), "both wait");
    let deleted = Instant::now();
    assert_eq!(
        one.delete_json("/rate-limiters/gone-key").await,
        json!({"deleted": true})
    );
    assert_problem(single.await.unwrap(), 404, "not-found").await;
    let problem = assert_problem(several.await.unwrap(), 404, "not-found").await;
    assert_eq!(
        problem["limit"],
        json!({"name": "gone-key", "key": "k"}),
        "{problem}"
    );
    assert!(
        deleted.elapsed() < Duration::from_secs(2),
        "{:?}",
        deleted.elapsed()
    );
}

/// A value at a key's bucket that latchkey did not write is answered 503
/// `backend-unavailable`, and the log line that says so names neither the
/// rate-limit key (often a user's id or address) nor the value.
#[tokio::test]
async fn a_corrupt_keys_bucket_is_logged_without_the_key_or_its_value() {
    let redis = redis();
    let (mut child, base, client) = ready_binary(&redis.url(), &[]).await;
    let put = (client.put(format!("{base}/rate-limiters/corrupt")))
        .json(&json!({"rate": 10, "per_ms": 1000}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::OK);
    let acquire = || {
        (client.post(format!("{base}/rate-limiters/corrupt/acquire")))
            .json(&json!({"key": "user-secret-42"}))
            .send()
    };
    assert_eq!(acquire().await.unwrap().status(), StatusCode::OK);
    let mut conn = redis_conn(&redis).await;
    let bucket = key_bucket(&mut conn, "user-secret-42").await;
    let _: () = conn.set(&bucket, "not-a-bucket-value").await.unwrap();
    let refused = acquire().await.unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["type"], "/problems/backend-unavailable", "{body}");
    let log = log_when_killed(&mut child);
    for secret in ["user-secret-42", "not-a-bucket-value"] {
        assert!(!log.contains(secret), "the log names {secret}: {log}");
    }
    assert!(
        log.contains("holds a value latchkey did not write"),
        "{log}"
    );
}
