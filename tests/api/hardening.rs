//! The foundation under faults: lost replies, killed connections, a
//! stalled or restarted Redis, backend error replies, and the smaller
//! points of the HTTP contract. Every test here uses real redis-server
//! processes and injects the fault itself (SIGSTOP, CLIENT KILL, restart,
//! CONFIG SET).

use std::time::{Duration, Instant};

use latchkey::config::Config;
use latchkey::devredis::{RedisCluster, RedisServer};
use serde_json::json;

use crate::helpers::*;

/// A give-back must only undo what its own attempt granted. Here an
/// acquire on the instance that requires a replica acknowledgement gets
/// `blocked` and then fails `WAIT`; meanwhile the lock is freed and taken
/// by another request of the *same holder id* on another instance. That
/// request's hold must survive the failed attempt's clean-up.
#[tokio::test]
async fn a_failed_attempt_never_gives_back_a_hold_another_request_of_its_holder_owns() {
    let redis = redis();
    let plain = spawn_app(test_config(&redis)).await;
    // No replica exists, so every WAIT reports 0 acknowledgements, after
    // half the response timeout (1 s here).
    let strict = spawn_app(Config {
        min_replicas: 1,
        redis_response_timeout_ms: 2000,
        ..test_config(&redis)
    })
    .await;
    plain
        .must_acquire("shared", json!({"holder": "x", "lease_ms": 30000}))
        .await;
    let failing = {
        let client = strict.client.clone();
        let url = strict.url("/locks/shared/acquire");
        tokio::spawn(async move {
            client
                .post(url)
                .json(&json!({"holder": "h"}))
                .send()
                .await
                .unwrap()
        })
    };
    // The attempt has run (blocked by x) and its WAIT is pending.
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(plain.release("shared", "x").await.status(), 200);
    plain
        .must_acquire("shared", json!({"holder": "h", "lease_ms": 30000}))
        .await;
    assert_problem(failing.await.unwrap(), 503, "backend-unavailable").await;
    // Give a (wrong) background give-back time to land.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let state = plain.state("shared").await;
    assert_eq!(state["locked"], true, "{state}");
    assert_eq!(state["hold_count"], 1, "{state}");
}

/// An acquire that reached Redis but whose reply never came back (Redis
/// stalled past the response timeout) answers 503; the grant it made must
/// not stay held for the whole lease once Redis runs again.
#[tokio::test]
async fn an_acquire_whose_reply_is_lost_leaves_nothing_held() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("warm", json!({"holder": "w"})).await;
    redis.pause();
    let response = app
        .acquire("lost", json!({"holder": "h", "lease_ms": 60000}))
        .await;
    assert_problem(response, 503, "backend-unavailable").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.resume();
    // Whatever order the acquire and its undo reach Redis in, nothing may
    // be left held.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let freed = eventually(Duration::from_secs(8), || async {
        app.state("lost").await["locked"] == false
    })
    .await;
    assert!(freed, "{}", app.state("lost").await);
    // And the undo must not linger and cancel a later, real acquire.
    app.must_acquire("lost", json!({"holder": "h"})).await;
}

/// A wait outlives a burst of dead connections: the hub's subscriber and
/// every request connection are killed while it waits; it is still
/// granted when the lock frees, well before its deadline.
#[tokio::test]
async fn a_wait_survives_killed_connections_and_is_granted_before_its_deadline() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let waiter = app.held_with_waiter("blip", ("x", 1500), ("w", 8000)).await;
    for kind in ["pubsub", "normal"] {
        redis.kill_clients(kind).await.unwrap();
    }
    let started = Instant::now();
    let response = waiter.await.unwrap();
    assert_eq!(response.status(), 201, "{:?}", response.text().await);
    assert!(started.elapsed() < Duration::from_secs(4));
}

/// A wait outlives a short Redis restart (the restart loses the lock, so
/// the waiter is granted right after it).
#[tokio::test]
async fn a_wait_survives_a_short_redis_restart() {
    let mut redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let waiter = app
        .held_with_waiter("restart", ("x", 60000), ("w", 8000))
        .await;
    let started = Instant::now();
    redis.restart().expect("redis restarts");
    let response = waiter.await.unwrap();
    assert_eq!(response.status(), 201, "{:?}", response.text().await);
    assert!(started.elapsed() < Duration::from_secs(6));
}

/// Every try inside a wait is bounded by the time the request has left:
/// a one-second wait against a stalled Redis answers after about a second,
/// not after the (longer) Redis response timeout.
#[tokio::test]
async fn a_wait_against_a_stalled_redis_answers_by_its_deadline() {
    let redis = redis();
    let app = spawn_app(Config {
        redis_response_timeout_ms: 3000,
        ..test_config(&redis)
    })
    .await;
    app.must_acquire("stalled", json!({"holder": "x", "lease_ms": 30000}))
        .await;
    redis.pause();
    let started = Instant::now();
    let response = app
        .acquire("stalled", json!({"holder": "w", "wait_ms": 1000}))
        .await;
    let took = started.elapsed();
    redis.resume();
    assert_problem(response, 503, "backend-unavailable").await;
    assert!(
        took < Duration::from_millis(1400),
        "answered after {took:?}"
    );
}

/// The deadline starts when the request arrives, not when Redis first
/// answers: Redis stalls for 1.5 s of a 3 s wait, and the 409 still comes
/// at about 3 s (long-poll and SSE alike).
#[tokio::test]
async fn the_wait_deadline_starts_when_the_request_arrives() {
    let redis = redis();
    let app = spawn_app(Config {
        redis_response_timeout_ms: 3000,
        ..test_config(&redis)
    })
    .await;
    app.must_acquire("late", json!({"holder": "x", "lease_ms": 30000}))
        .await;
    for sse in [false, true] {
        redis.pause();
        let mut request = app
            .client
            .post(app.url("/locks/late/acquire"))
            .json(&json!({"holder": "w", "wait_ms": 3000}));
        if sse {
            request = request.header("accept", "text/event-stream");
        }
        let started = Instant::now();
        let pending = tokio::spawn(async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let body = if status == 200 {
                read_sse(response).await.last().unwrap().0.clone()
            } else {
                response.text().await.unwrap()
            };
            (status, body, started.elapsed())
        });
        tokio::time::sleep(Duration::from_millis(1500)).await;
        redis.resume();
        let (status, body, took) = pending.await.unwrap();
        if sse {
            assert_eq!((status, body.as_str()), (200, "timeout"));
        } else {
            assert_eq!(status, 409, "{body}");
        }
        assert!(
            took < Duration::from_millis(3400),
            "sse={sse}: answered after {took:?}"
        );
    }
}

/// Waiters queued behind the one that re-checks Redis still report what
/// blocks them now: the holder renewed its lease, so every 409 must say
/// the lock is taken for seconds, not the stale, aged-out first answer.
#[tokio::test]
async fn every_queued_waiter_reports_a_current_retry_after() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("renewed", json!({"holder": "x", "lease_ms": 800}))
        .await;
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            app.spawn_post(
                "/locks/renewed/acquire",
                json!({"holder": format!("w{i}"), "wait_ms": 2500}),
            )
        })
        .collect();
    app.wait_for_waiters("renewed", 3).await;
    let renewed = app
        .heartbeat("renewed", "x", json!({"lease_ms": 10000}))
        .await;
    assert_eq!(renewed.status(), 200);
    for waiter in waiters {
        let problem = assert_problem(waiter.await.unwrap(), 409, "lock-held").await;
        let retry_after = problem["retry_after_ms"].as_u64().unwrap();
        assert!(retry_after > 5000, "stale retry_after_ms: {problem}");
    }
}

/// A Redis that refuses writes (maxmemory reached under `noeviction`) is a
/// backend condition, not an internal error: 503, with a detail that names
/// it.
#[tokio::test]
async fn an_out_of_memory_redis_answers_503_naming_the_condition() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    refuse_writes(&redis).await;
    let response = app.acquire("oom", json!({"holder": "h"})).await;
    assert!(response.headers().contains_key("retry-after"));
    let problem = assert_problem(response, 503, "backend-unavailable").await;
    assert!(
        problem["detail"].as_str().unwrap().contains("memory"),
        "{problem}"
    );
}

/// Makes `redis` refuse every write (`maxmemory` of 1 byte, under what it
/// already uses).
async fn refuse_writes(redis: &latchkey::devredis::RedisServer) {
    let mut conn = redis_conn(redis).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// A request that logs names itself on its line, at the default level, as
/// a span called `request` would: its method, route template and request
/// id, in `span` and as the first of `spans` (the binary, its real log).
#[tokio::test]
async fn a_request_that_logs_names_its_request_on_the_line() {
    use std::io::{BufRead, BufReader};
    let redis = redis();
    /// Stops the binary however the test ends.
    struct Stopped(std::process::Child);
    impl Drop for Stopped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let (mut child, port) = start_binary(&redis.url(), &[("LATCHKEY_LOG", "info")]);
    let (sender, lines) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let _stopped = Stopped(child);
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    let (client, base) = (reqwest::Client::new(), format!("http://127.0.0.1:{port}"));
    assert!(
        binary_ready(&client, &base).await,
        "the binary became ready"
    );
    // Redis refuses every write: the acquire answers 503, which is logged.
    refuse_writes(&redis).await;
    let response = client
        .post(format!("{base}/locks/logged/acquire"))
        .header("x-request-id", "trace \"me\" 42")
        .json(&json!({"holder": "h"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    let line = std::iter::from_fn(|| lines.recv_timeout(Duration::from_secs(10)).ok())
        .find(|l| l.contains("response failed"));
    let line = line.expect("the 503 is logged");
    let log: serde_json::Value = serde_json::from_str(&line).expect("JSON log line");
    let request = json!({
        "method": "POST",
        "request_id": "trace \"me\" 42",
        "route": "/locks/{name}/acquire",
        "name": "request",
    });
    assert_eq!(log["level"], "ERROR", "{line}");
    assert_eq!(log["fields"]["status"], 503, "{line}");
    assert_eq!(log["span"], request, "{line}");
    assert_eq!(log["spans"], json!([request]), "{line}");
    // The keys in the order the JSON layer writes a span's.
    assert!(
        line.contains(r#""span":{"method":"POST","request_id":"trace \"me\" 42","route":"/locks/{name}/acquire","name":"request"}"#),
        "{line}"
    );
}

/// An eviction policy other than `noeviction` can silently drop fencing
/// counters and holds: the binary warns about it at start.
#[test]
fn an_evicting_redis_is_warned_about_at_start() {
    let redis = latchkey::devredis::RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"])
        .expect("redis starts");
    let lines = start_up_log(&redis.url(), &[]);
    let warning = lines
        .iter()
        .find(|l| l.contains("maxmemory-policy"))
        .unwrap_or_else(|| panic!("no eviction warning in {lines:?}"));
    let log: serde_json::Value = serde_json::from_str(warning).expect("JSON log line");
    assert_eq!(log["level"], "WARN", "{warning}");
    assert!(warning.contains("allkeys-lru"), "{warning}");
}

/// `Accept` is parsed, not substring-matched: `text/event-stream;q=0`
/// means "not SSE".
#[tokio::test]
async fn accept_with_q_zero_does_not_select_sse() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let response = app
        .client
        .post(app.url("/locks/q/acquire"))
        .header("accept", "text/event-stream;q=0, application/json")
        .json(&json!({"holder": "h"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()["content-type"], "application/json");
}

/// Browsers may send (and read) the `Idempotency-Key` header.
#[tokio::test]
async fn cors_allows_api_keys_and_allows_and_exposes_idempotency_keys() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let preflight = app
        .client
        .request(reqwest::Method::OPTIONS, app.url("/locks/c/acquire"))
        .header("origin", "http://localhost:3000")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "content-type,idempotency-key",
        )
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success());
    let allowed = preflight.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(allowed.contains("idempotency-key"), "{allowed}");
    // Browser clients send their API key (docs/src/api-keys.md).
    assert!(allowed.contains("authorization"), "{allowed}");
    let response = app
        .client
        .get(app.url("/locks/c"))
        .header("origin", "http://localhost:3000")
        .send()
        .await
        .unwrap();
    let exposed = response.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(exposed.contains("idempotency-key"), "{exposed}");
}

/// Connections that died with a Redis restart are replaced on the spot: a
/// read or an acquire that meets a dead connection is repeated once on a
/// fresh one, so no request answers 503 once Redis is back.
#[tokio::test]
async fn requests_after_a_redis_restart_do_not_meet_dead_connections() {
    let mut redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    // Warm several connections.
    let warm: Vec<_> = (0..16)
        .map(|i| app.spawn_post(&format!("/locks/warm{i}/acquire"), json!({})))
        .collect();
    for w in warm {
        assert_eq!(w.await.unwrap().status(), 201);
    }
    redis.restart().expect("redis restarts");
    for i in 0..16 {
        let response = app.acquire(&format!("after{i}"), json!({})).await;
        assert_eq!(response.status(), 201, "{:?}", response.text().await);
        let state = app
            .client
            .get(app.url(&format!("/locks/after{i}")))
            .send()
            .await
            .unwrap();
        assert_eq!(state.status(), 200);
    }
}

/// The scripts run as Redis functions (`FCALL`), one library each, not by
/// `EVALSHA`; libraries Redis lost (`FUNCTION FLUSH`, as after a restart
/// without persistence or a failover to a node that never had them) are
/// loaded again by the call that finds its function missing, and by
/// `/readyz`.
#[tokio::test]
async fn calls_after_function_flush_load_the_libraries_again() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let every = latchkey::store::scripts::ALL.len();
    assert_eq!(libraries(&redis, "latchkey_").await.len(), every);
    // With every library there, /readyz loads none.
    let loads = command_calls(&mut redis_conn(&redis).await, "function|load").await;
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(
        command_calls(&mut redis_conn(&redis).await, "function|load").await,
        loads
    );
    app.must_acquire("flushed", json!({"holder": "h"})).await;
    flush_functions(&redis).await;
    let release = app.release("flushed", "h").await;
    assert_eq!(release.status(), 200, "{:?}", release.text().await);
    let granted = app.must_acquire("flushed", json!({"holder": "h2"})).await;
    assert_eq!(granted["fencing_token"], 2, "{granted}");
    assert!(command_calls(&mut redis_conn(&redis).await, "fcall").await >= 4);
    assert_eq!(
        command_calls(&mut redis_conn(&redis).await, "evalsha").await,
        0
    );
    // /readyz loads what is missing: every library is back.
    flush_functions(&redis).await;
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(libraries(&redis, "latchkey_").await.len(), every);
}

/// A latchkey whose Redis holds lock `full` (holder `h`), then lost the
/// function libraries (as a failover to a node that never had them) and
/// is out of memory.
async fn full_without_the_libraries() -> (RedisServer, TestApp) {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("full", json!({"holder": "h"})).await;
    flush_functions(&redis).await;
    refuse_writes(&redis).await;
    (redis, app)
}

/// Redis out of memory refuses `FUNCTION LOAD` (not `SCRIPT LOAD`): a
/// Redis that lost the libraries (as a failover to a node that never had
/// them) while it is full still serves a release, by the script, and
/// `/readyz` still says ready.
#[tokio::test]
async fn a_full_redis_without_the_libraries_still_releases_by_the_scripts() {
    let (redis, app) = full_without_the_libraries().await;
    let release = app.release("full", "h").await;
    assert_eq!(release.status(), 200, "{:?}", release.text().await);
    assert!(command_calls(&mut redis_conn(&redis).await, "evalsha").await >= 1);
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    assert_problem(
        app.acquire("full", json!({"holder": "h2"})).await,
        503,
        "backend-unavailable",
    )
    .await;
    assert!(libraries(&redis, "latchkey_").await.is_empty());
}

/// While Redis out of memory refuses `FUNCTION LOAD`, calls whose library
/// is missing run by their scripts without sending the library (tens of
/// kilobytes) first, each: after a refused load, the next one is tried
/// only a while later.
#[tokio::test]
async fn a_full_redis_without_the_libraries_is_not_sent_a_library_per_call() {
    let (redis, app) = full_without_the_libraries().await;
    let mut conn = redis_conn(&redis).await;
    let loads_before = command_sent(&mut conn, "function|load").await;
    let scripts_before = command_calls(&mut conn, "evalsha").await;
    let calls = 20;
    let started = Instant::now();
    for _ in 0..calls / 2 {
        // A state read, and an acquire of the held lock (409): neither
        // writes, so both are answered under OOM.
        let state = app.client.get(app.url("/locks/full")).send().await.unwrap();
        assert_eq!(state.status(), 200);
        let busy = app.acquire("full", json!({"holder": "h2"})).await;
        assert_eq!(busy.status(), 409);
    }
    let loads = command_sent(&mut conn, "function|load").await - loads_before;
    let scripts = command_calls(&mut conn, "evalsha").await - scripts_before;
    assert!(scripts >= calls, "{scripts} scripts run for {calls} calls");
    // One refused load, and one more per second the calls took at most.
    let bound = 1 + started.elapsed().as_secs();
    assert!(
        loads <= bound,
        "{loads} FUNCTION LOADs sent for {calls} calls in {:?}",
        started.elapsed()
    );
}

/// Redis keeps a library until it is deleted, so an instance deletes at
/// start the libraries of other versions of latchkey (named like its
/// own), and only those.
#[tokio::test]
async fn a_start_deletes_the_libraries_of_other_versions_only() {
    let redis = redis();
    let mut conn = redis_conn(&redis).await;
    for name in [
        "latchkey_0000000000000000000000000000000000000000",
        "theirs",
    ] {
        let code = format!(
            "#!lua name={name}\nredis.register_function('{name}', function() return 1 end)"
        );
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(code)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let _app = spawn_app(test_config(&redis)).await;
    let ours = libraries(&redis, "latchkey_").await;
    assert_eq!(ours.len(), latchkey::store::scripts::ALL.len(), "{ours:?}");
    assert!(!ours.iter().any(|n| n.starts_with("latchkey_0000")));
    assert_eq!(libraries(&redis, "theirs").await, ["theirs"]);
}

/// While Redis is out of memory (`maxmemory` under `noeviction`), the
/// answers are those of the scripts, which Redis stops only at their
/// first command that may add memory: a release answers 200, an acquire
/// of a held lock 409 (it writes nothing), a retried count-down with the
/// same `Idempotency-Key` its recorded 200, and only what would add state
/// 503. For each queued kind and the plain lock.
#[tokio::test]
async fn answers_while_redis_is_out_of_memory_are_the_scripts() {
    let redis = redis();
    answers_while_writes_are_refused(&redis, Refusal::OutOfMemory).await;
}

/// While Redis refuses every write because its last background save
/// failed (`MISCONF`, under `stop-writes-on-bgsave-error`), it refuses a
/// function that may write before it runs, but a script only at its first
/// write: the store runs the script, so what writes nothing answers as
/// ever (an acquire of a held lock 409, a retried count-down its recorded
/// 200), and a release, which must write, 503.
#[tokio::test]
async fn answers_while_redis_refuses_writes_after_a_failed_save_are_the_scripts() {
    // A save point, so that a failed save stops the writes.
    let redis = RedisServer::start_with(&["--save", "3600 1"]).expect("redis-server starts");
    answers_while_writes_are_refused(&redis, Refusal::FailedSave).await;
}

/// How a test makes Redis refuse writes.
#[derive(Clone, Copy, PartialEq)]
enum Refusal {
    /// `maxmemory` 1 (`OOM`): what frees memory still runs.
    OutOfMemory,
    /// A background save that fails (`MISCONF`): no write runs.
    FailedSave,
}

/// Makes the next background save of `redis` fail, and waits until it
/// has: its file's name is a directory, so the save cannot put the file
/// in its place.
async fn fail_saves(redis: &RedisServer) {
    let mut conn = redis_conn(redis).await;
    // CONFIG GET of two names: [name, value, name, value], in Redis's order.
    let config: std::collections::HashMap<String, String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("dir")
        .arg("dbfilename")
        .query_async(&mut conn)
        .await
        .unwrap();
    std::fs::create_dir_all(std::path::Path::new(&config["dir"]).join(&config["dbfilename"]))
        .unwrap();
    let _: String = redis::cmd("BGSAVE").query_async(&mut conn).await.unwrap();
    let failed = info_within(redis, "persistence", |info| {
        info.contains("rdb_last_bgsave_status:err")
    })
    .await;
    assert!(failed, "the background save failed");
}

/// The body of the two tests above: four kinds of lock held, a latch
/// counted down with an `Idempotency-Key`, then Redis refuses writes.
async fn answers_while_writes_are_refused(redis: &RedisServer, refusal: Refusal) {
    let app = spawn_app(test_config(redis)).await;
    let configured = app
        .client
        .put(app.url("/semaphores/oom-sem"))
        .json(&json!({"permits": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(configured.status(), 200);
    let latch = app
        .client
        .put(app.url("/latches/oom-latch"))
        .json(&json!({"count": 5}))
        .send()
        .await
        .unwrap();
    assert_eq!(latch.status(), 201);
    let count_down = || {
        app.client
            .post(app.url("/latches/oom-latch/count-down"))
            .header("idempotency-key", "k1")
            .json(&json!({}))
            .send()
    };
    let counted = count_down().await.unwrap();
    assert_eq!(counted.status(), 200);
    let recorded: serde_json::Value = counted.json().await.unwrap();
    let kinds = [
        ("/locks/oom-lock/acquire", "/locks/oom-lock/holders/h"),
        (
            "/fair-locks/oom-fair/acquire",
            "/fair-locks/oom-fair/holders/h",
        ),
        ("/rwlocks/oom-rw/write/acquire", "/rwlocks/oom-rw/holders/h"),
        (
            "/semaphores/oom-sem/acquire",
            "/semaphores/oom-sem/holders/h",
        ),
    ];
    for (acquire, _) in kinds {
        let granted = app.post(acquire, json!({"holder": "h"})).await;
        assert_eq!(granted.status(), 201, "{acquire}");
    }
    match refusal {
        Refusal::OutOfMemory => refuse_writes(redis).await,
        Refusal::FailedSave => fail_saves(redis).await,
    }
    for (acquire, _) in kinds {
        let busy = app.post(acquire, json!({"holder": "h2"})).await;
        assert_eq!(busy.status(), 409, "{acquire}: {:?}", busy.text().await);
    }
    let replayed = count_down().await.unwrap();
    assert_eq!(replayed.status(), 200);
    assert_eq!(
        replayed.json::<serde_json::Value>().await.unwrap(),
        recorded
    );
    for (acquire, release) in kinds {
        let released = app.client.delete(app.url(release)).send().await.unwrap();
        if refusal == Refusal::FailedSave {
            assert_problem(released, 503, "backend-unavailable").await;
            continue;
        }
        assert_eq!(
            released.status(),
            200,
            "{release}: {:?}",
            released.text().await
        );
        assert_problem(
            app.post(acquire, json!({"holder": "h2"})).await,
            503,
            "backend-unavailable",
        )
        .await;
    }
}

/// A Redis that refuses every write for want of replicas
/// (`min-replicas-to-write` with none connected) still answers what only
/// reads: an object's state (its script writes nothing), while an acquire
/// answers 503.
#[tokio::test]
async fn reads_answer_while_redis_refuses_writes_for_want_of_replicas() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("read-only", json!({"holder": "h"})).await;
    let latch = app
        .client
        .put(app.url("/latches/read-only"))
        .json(&json!({"count": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(latch.status(), 201);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg("1")
        .query_async(&mut redis_conn(&redis).await)
        .await
        .unwrap();
    let state = app.state("read-only").await;
    assert_eq!(state["locked"], true, "{state}");
    assert_eq!(app.get_json("/latches/read-only").await["count"], 2);
    assert_problem(
        app.acquire("read-only-2", json!({"holder": "h"})).await,
        503,
        "backend-unavailable",
    )
    .await;
}

/// The slack a request that never waits may take beyond the Redis
/// response timeout while Redis stalls (docs/src/errors.md): scheduling and
/// the HTTP round trip, on a busy test machine.
const STALL_SLACK: Duration = Duration::from_millis(300);

/// Every request that does not wait answers within the response timeout
/// (plus [`STALL_SLACK`]) while Redis stalls: 503 naming the condition,
/// whatever the call needs meanwhile (a connection, a script load, a
/// repeat on a fresh connection). Two rounds: the first finds connections
/// that were healthy a moment ago, the second finds them discarded after
/// the first round's timeouts and must connect to the stalled server.
#[tokio::test]
async fn requests_that_do_not_wait_answer_within_the_response_timeout_while_redis_stalls() {
    let redis = redis();
    let timeout_ms = 1000;
    let app = spawn_app(Config {
        redis_response_timeout_ms: timeout_ms,
        redis_connect_timeout_ms: 1000,
        ..test_config(&redis)
    })
    .await;
    app.must_acquire("stall", json!({"holder": "h", "lease_ms": 60000}))
        .await;
    let put =
        |path: &str, body: serde_json::Value| app.client.put(app.url(path)).json(&body).send();
    assert_eq!(
        put("/semaphores/stall", json!({"permits": 2}))
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        put("/latches/stall", json!({"count": 5}))
            .await
            .unwrap()
            .status(),
        201
    );
    // Scripts are loaded and connections open; then Redis stops answering.
    redis.pause();
    let requests: Vec<(&str, &str, Option<serde_json::Value>)> = vec![
        ("GET", "/locks/stall", None),
        ("POST", "/locks/stall/holders/h/heartbeat", Some(json!({}))),
        ("POST", "/locks/stall/acquire", Some(json!({"holder": "x"}))),
        ("DELETE", "/locks/stall/holders/h", None),
        ("GET", "/fair-locks/stall", None),
        ("GET", "/rwlocks/stall", None),
        (
            "POST",
            "/rwlocks/stall/write/acquire",
            Some(json!({"holder": "x"})),
        ),
        ("GET", "/semaphores/stall", None),
        ("PUT", "/semaphores/stall", Some(json!({"permits": 3}))),
        (
            "POST",
            "/semaphores/stall/acquire",
            Some(json!({"holder": "x"})),
        ),
        ("GET", "/latches/stall", None),
        ("POST", "/latches/stall/count-down", Some(json!({}))),
        (
            "POST",
            "/multilocks/acquire",
            Some(json!({"names": ["stall", "stall2"]})),
        ),
        ("GET", "/readyz", None),
    ];
    let budget = Duration::from_millis(timeout_ms) + STALL_SLACK;
    let mut late = Vec::new();
    for round in 1..=2 {
        let calls = requests.iter().map(|(method, path, body)| {
            let mut request = app.client.request(method.parse().unwrap(), app.url(path));
            if let Some(body) = body {
                request = request.json(body);
            }
            async move {
                let started = Instant::now();
                let response = request.send().await.unwrap();
                let took = started.elapsed();
                let status = response.status().as_u16();
                let body = response.text().await.unwrap();
                (*method, *path, status, body, took)
            }
        });
        for (method, path, status, body, took) in futures_util::future::join_all(calls).await {
            if took > budget || status != 503 || !body.contains("backend-unavailable") {
                late.push(format!(
                    "round {round}: {method} {path}: {status} after {took:?}: {body}"
                ));
            }
        }
    }
    redis.resume();
    assert!(
        late.is_empty(),
        "over {budget:?} or not 503:\n{}",
        late.join("\n")
    );
}

/// A request that makes several Redis calls one after another (a
/// listing: its `SCAN`, then a read of each object; a session's heartbeat
/// or DELETE: the session's script, then one per hold) is bounded by the
/// response timeout as a whole, not per call ([`MidwayStall`]). The
/// request must still answer 503 within one response timeout, not one per
/// stage.
#[tokio::test]
async fn requests_of_several_calls_answer_within_the_response_timeout_when_redis_stalls_midway() {
    let redis = redis();
    let timeout_ms = 1000;
    let app = spawn_app(Config {
        redis_response_timeout_ms: timeout_ms,
        ..test_config(&redis)
    })
    .await;
    let created = app.post("/sessions", json!({"ttl_ms": 60000})).await;
    let created: serde_json::Value = created.json().await.unwrap();
    let id = created["session"].as_str().unwrap().to_string();
    for name in ["stall-a", "stall-b", "stall-c"] {
        let hold = json!({"holder": "h", "session": id});
        app.must_acquire(name, hold).await;
    }
    let mut stall = MidwayStall::new(&redis, timeout_ms);
    for (method, path) in [
        ("GET", "/locks?prefix=stall".to_string()),
        ("POST", format!("/sessions/{id}/heartbeat")),
        ("DELETE", format!("/sessions/{id}")),
    ] {
        stall.send(&app, method, &path, json!({})).await;
    }
    stall.assert_none_late();
}

/// On a Redis Cluster a multi-lock's requests make one call per lock, one
/// after another: its acquire (then the give-back of what it took when a
/// lock blocks or a call fails), its heartbeat and its release. Each is
/// bounded by the response timeout as a whole, as [`MidwayStall`]
/// shows with every lock of the set on the stalled master; an acquire cut
/// short leaves nothing held once Redis runs again.
#[tokio::test]
async fn a_multi_locks_requests_on_a_cluster_answer_within_the_response_timeout() {
    use crate::sharded::owner;
    let cluster = RedisCluster::start(3).expect("cluster starts");
    let timeout_ms = 1000;
    let app = spawn_app(Config {
        redis_mode: latchkey::config::RedisMode::Cluster,
        redis_response_timeout_ms: timeout_ms,
        ..test_config_for(cluster.urls())
    })
    .await;
    // Five names whose locks one master serves: two held, then a set of
    // three to take.
    let master = owner(&cluster, 0, "latchkey:{ms-0}:lock").await;
    let mut names = Vec::new();
    for i in 0.. {
        let name = format!("ms-{i}");
        if owner(&cluster, 0, &format!("latchkey:{{{name}}}:lock")).await == master {
            names.push(name);
        }
        if names.len() == 5 {
            break;
        }
    }
    let held = json!({"names": names[..2], "holder": "h", "lease_ms": 60000});
    let taken = app.post("/multilocks/acquire", held.clone()).await;
    assert_eq!(taken.status(), 201);
    let mut stall = MidwayStall::new(&cluster.nodes[master], timeout_ms);
    stall
        .send(&app, "POST", "/multilocks/heartbeat", held.clone())
        .await;
    let release = json!({"names": names[..2], "holder": "h"});
    stall
        .send(&app, "POST", "/multilocks/release", release)
        .await;
    let set = json!({"names": names[2..], "holder": "other", "lease_ms": 60000});
    stall.send(&app, "POST", "/multilocks/acquire", set).await;
    stall.assert_none_late();
    // Once Redis runs again, what the cut-short acquire took (the first
    // lock in the set's order, at the thaw) is given back.
    let first = names[2..].iter().min().unwrap();
    let state = app.get_json(&format!("/locks/{first}")).await;
    assert_eq!(state["fencing_token"], 1, "{first} was taken: {state}");
    for name in &names[2..] {
        let free = eventually(Duration::from_secs(5), || async {
            app.get_json(&format!("/locks/{name}")).await["locked"] == json!(false)
        })
        .await;
        assert!(free, "{name} is still held by the acquire cut short");
    }
}

/// Requests sent while their Redis stalls midway: frozen (SIGSTOP) as the
/// request starts, so its first call is queued, then a
/// `CLIENT PAUSE 2000` queued behind that call, then thawed half a
/// response timeout later. At the thaw the first call answers, late, and
/// every call after it stalls (reads too: a state's function only reads,
/// and `CLIENT PAUSE WRITE` would let it through). Each request must answer 503
/// `backend-unavailable` within one response timeout.
struct MidwayStall<'a> {
    redis: &'a RedisServer,
    timeout_ms: u64,
    /// A blocking connection, opened before any freeze, with no response
    /// timeout of its own (`None` only while a pause is being sent).
    conn: Option<redis::Connection>,
    late: Vec<String>,
}

impl<'a> MidwayStall<'a> {
    fn new(redis: &'a RedisServer, timeout_ms: u64) -> Self {
        let conn = redis::Client::open(redis.url())
            .unwrap()
            .get_connection()
            .unwrap();
        MidwayStall {
            redis,
            timeout_ms,
            conn: Some(conn),
            late: Vec::new(),
        }
    }

    async fn send(&mut self, app: &TestApp, method: &str, path: &str, body: serde_json::Value) {
        self.redis.pause();
        let started = Instant::now();
        let mut request = app.client.request(method.parse().unwrap(), app.url(path));
        if method == "POST" {
            request = request.json(&body);
        }
        let answer = tokio::spawn(async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.text().await.unwrap(), started.elapsed())
        });
        // The request's first call reaches Redis's socket first; the pause
        // is queued behind it.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut conn = self.conn.take().expect("a connection");
        let pause = tokio::task::spawn_blocking(move || {
            let paused = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(2000)
                .query::<()>(&mut conn);
            (conn, paused)
        });
        tokio::time::sleep(Duration::from_millis(self.timeout_ms / 2)).await;
        self.redis.resume();
        let (status, body, took) = answer.await.unwrap();
        let (mut conn, paused) = pause.await.unwrap();
        paused.unwrap();
        redis::cmd("CLIENT")
            .arg("UNPAUSE")
            .query::<()>(&mut conn)
            .unwrap();
        self.conn = Some(conn);
        let budget = self.budget();
        if took > budget || status != 503 || !body.contains("backend-unavailable") {
            self.late
                .push(format!("{method} {path}: {status} after {took:?}: {body}"));
        }
    }

    fn budget(&self) -> Duration {
        Duration::from_millis(self.timeout_ms) + STALL_SLACK
    }

    fn assert_none_late(&self) {
        assert!(
            self.late.is_empty(),
            "over {:?} or not 503:\n{}",
            self.budget(),
            self.late.join("\n")
        );
    }
}

/// A wake-up published while the hub's subscriber is away is lost (pub/sub
/// is at-most-once), and a latch has no lease whose end would make its
/// waiters look again. While the hub cannot subscribe, waiters must look by
/// themselves, often: here the hub is kept from re-subscribing (the ACL
/// refuses SUBSCRIBE and PSUBSCRIBE) and the latch opens meanwhile; its waiter must be
/// answered open soon after, not when the hub comes back.
#[tokio::test]
async fn a_latch_opened_while_the_hub_cannot_subscribe_still_releases_its_waiter() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let put = app
        .client
        .put(app.url("/latches/away"))
        .json(&json!({"count": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201);
    let waiter = {
        let client = app.client.clone();
        let url = app.url("/latches/away/wait?wait_ms=20000");
        tokio::spawn(async move {
            let response = client.get(url).send().await.unwrap();
            (
                Instant::now(),
                response.json::<serde_json::Value>().await.unwrap(),
            )
        })
    };
    let parked = eventually(Duration::from_secs(3), || async {
        app.metrics().await.contains("latchkey_waiters 1")
    })
    .await;
    assert!(parked, "the waiter never parked");
    let mut conn = redis_conn(&redis).await;
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "default", "-subscribe", "-psubscribe"])
        .query_async(&mut conn)
        .await
        .unwrap();
    redis.kill_clients("pubsub").await.unwrap();
    let away = eventually(Duration::from_secs(5), || async {
        app.metrics().await.contains("latchkey_pubsub_connected 0")
    })
    .await;
    assert!(away, "the hub never noticed its connection was gone");
    // Long enough for the hub's reconnect attempts to back off.
    tokio::time::sleep(Duration::from_millis(3300)).await;
    let opened = Instant::now();
    let down = app.post("/latches/away/count-down", json!({})).await;
    assert_eq!(down.status(), 200);
    let (answered, body) = waiter.await.unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "default", "+subscribe", "+psubscribe"])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(body["open"], true, "{body}");
    let late = answered.saturating_duration_since(opened);
    assert!(
        late < Duration::from_millis(900),
        "the waiter was answered {late:?} after the latch opened"
    );
}
