//! Read-write locks: sharing, exclusion, per-reader leases, downgrade and
//! upgrade, the arrival-order policy, tokens, and a mutual-exclusion
//! checker across two instances.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use reqwest::Response;
use serde_json::{Value, json};

use crate::helpers::*;

async fn read(app: &TestApp, name: &str, body: Value) -> Response {
    app.post(&format!("/rwlocks/{name}/read/acquire"), body)
        .await
}

async fn write(app: &TestApp, name: &str, body: Value) -> Response {
    app.post(&format!("/rwlocks/{name}/write/acquire"), body)
        .await
}

/// Asserts 201 and returns the grant.
async fn granted(response: Response) -> Value {
    assert_eq!(response.status(), 201, "expected a grant");
    response.json().await.unwrap()
}

async fn release(app: &TestApp, name: &str, holder: &str, query: &str) -> Response {
    app.client
        .delete(app.url(&format!("/rwlocks/{name}/holders/{holder}{query}")))
        .send()
        .await
        .unwrap()
}

async fn rw_state(app: &TestApp, name: &str) -> Value {
    app.get_json(&format!("/rwlocks/{name}")).await
}

#[tokio::test]
async fn readers_share_and_a_writer_excludes_everyone() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let r1 = granted(read(&app, "x", json!({"holder": "r1"})).await).await;
    assert_eq!(r1["mode"], "read");
    granted(read(&app, "x", json!({"holder": "r2"})).await).await;
    let state = rw_state(&app, "x").await;
    assert_eq!(
        (state["mode"].clone(), state["readers"].clone()),
        (json!("read"), json!(2))
    );
    assert!(state.get("holder").is_none());
    assert_problem(
        write(&app, "x", json!({"holder": "w"})).await,
        409,
        "lock-held",
    )
    .await;
    release(&app, "x", "r1", "").await;
    release(&app, "x", "r2", "").await;
    let w = granted(write(&app, "x", json!({"holder": "w"})).await).await;
    assert_eq!(w["mode"], "write");
    assert_problem(
        read(&app, "x", json!({"holder": "r3"})).await,
        409,
        "lock-held",
    )
    .await;
    assert_problem(
        write(&app, "x", json!({"holder": "w2"})).await,
        409,
        "lock-held",
    )
    .await;
    let state = rw_state(&app, "x").await;
    assert_eq!(state["mode"], "write");
    assert_eq!(state["writer_hold_count"], 1);
    let released: Value = release(&app, "x", "w", "").await.json().await.unwrap();
    assert_eq!(
        released,
        json!({"released": true, "hold_count": 0, "mode": "write", "left_queue": false})
    );
    assert_eq!(rw_state(&app, "x").await["mode"], Value::Null);
}

#[tokio::test]
async fn every_readers_lease_is_its_own() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    granted(read(&app, "l", json!({"holder": "brief", "lease_ms": 600})).await).await;
    granted(read(&app, "l", json!({"holder": "long", "lease_ms": 30000})).await).await;
    tokio::time::sleep(Duration::from_millis(900)).await;
    let state = rw_state(&app, "l").await;
    assert_eq!(state["readers"], 1, "{state}");
    assert!(state["ttl_ms"].as_u64().unwrap() > 20000);
    assert_problem(
        app.post("/rwlocks/l/holders/brief/heartbeat", json!({}))
            .await,
        404,
        "not-held",
    )
    .await;
    assert_problem(
        write(&app, "l", json!({"holder": "w"})).await,
        409,
        "lock-held",
    )
    .await;
    // The crashed reader's share expired alone; the other renews.
    let renewed: Value = app
        .post(
            "/rwlocks/l/holders/long/heartbeat",
            json!({"lease_ms": 9000}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(renewed["mode"], "read");
    assert_eq!(renewed["lease_ms"], 9000);
}

#[tokio::test]
async fn the_writer_downgrades_by_reading_then_releasing_the_write() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let w = granted(write(&app, "d", json!({"holder": "h"})).await).await;
    let r = granted(read(&app, "d", json!({"holder": "h"})).await).await;
    assert_eq!(r["mode"], "read");
    assert_eq!(
        (r["read_hold_count"].clone(), r["write_hold_count"].clone()),
        (json!(1), json!(1))
    );
    let beat: Value = app
        .post("/rwlocks/d/holders/h/heartbeat", json!({"lease_ms": 9000}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(beat["mode"], "write", "mode is write while it writes");
    let released: Value = release(&app, "d", "h", "?mode=write")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        released,
        json!({"released": false, "hold_count": 0, "mode": "write", "left_queue": false})
    );
    let state = rw_state(&app, "d").await;
    assert_eq!(
        (state["mode"].clone(), state["readers"].clone()),
        (json!("read"), json!(1))
    );
    let other = granted(read(&app, "d", json!({"holder": "other"})).await).await;
    assert!(other["fencing_token"].as_u64() > r["fencing_token"].as_u64());
    assert!(r["fencing_token"].as_u64() > w["fencing_token"].as_u64());
}

#[tokio::test]
async fn the_only_reader_upgrades_and_one_of_several_is_refused_at_once() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let r = granted(read(&app, "u", json!({"holder": "a"})).await).await;
    let w = granted(write(&app, "u", json!({"holder": "a"})).await).await;
    assert_eq!(w["mode"], "write");
    assert_eq!(w["read_hold_count"], 1, "the read hold is kept");
    assert!(w["fencing_token"].as_u64() > r["fencing_token"].as_u64());
    // Releasing the write leaves it a reader; then a second reader joins.
    release(&app, "u", "a", "?mode=write").await;
    granted(read(&app, "u", json!({"holder": "b"})).await).await;
    let started = Instant::now();
    let refused = write(&app, "u", json!({"holder": "a", "wait_ms": 5000})).await;
    let problem = assert_problem(refused, 409, "upgrade-would-deadlock").await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused at once, not after waiting"
    );
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("read") && !detail.contains("  "),
        "{detail}"
    );
}

#[tokio::test]
async fn readers_queued_before_a_writer_go_first_and_later_readers_wait_behind_it() {
    let redis = redis();
    let a = Arc::new(spawn_app(test_config(&redis)).await);
    let b = Arc::new(spawn_app(test_config(&redis)).await);
    granted(write(&a, "p", json!({"holder": "w0"})).await).await;
    // Arrival order: reader r1 (on b), writer w1 (on a), reader r2 (on b).
    let r1 = b.spawn_post(
        "/rwlocks/p/read/acquire",
        json!({"holder": "r1", "wait_ms": 10000}),
    );
    wait_until_waiting(&b, "p", 1).await;
    let w1 = a.spawn_post(
        "/rwlocks/p/write/acquire",
        json!({"holder": "w1", "wait_ms": 10000}),
    );
    wait_until_waiting(&a, "p", 1).await;
    let r2 = b.spawn_post(
        "/rwlocks/p/read/acquire",
        json!({"holder": "r2", "wait_ms": 10000}),
    );
    wait_until_waiting(&b, "p", 2).await;

    release(&a, "p", "w0", "").await;
    granted(r1.await.unwrap()).await;
    // r1 reads; w1 waits for it; r2 waits behind w1.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!w1.is_finished() && !r2.is_finished());
    release(&b, "p", "r1", "").await;
    granted(w1.await.unwrap()).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!r2.is_finished(), "r2 waits for the writer");
    release(&a, "p", "w1", "").await;
    granted(r2.await.unwrap()).await;
}

async fn wait_until_waiting(app: &TestApp, name: &str, n: u64) {
    let reached = eventually(Duration::from_secs(3), || async {
        rw_state(app, name).await["waiters"] == n
    })
    .await;
    assert!(reached, "expected {n} waiter(s) on rwlock {name}");
}

#[tokio::test]
async fn a_writer_behind_a_continuous_stream_of_readers_gets_in() {
    let redis = redis();
    let app = Arc::new(spawn_app(test_config(&redis)).await);
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for i in 0..4 {
        let (app, stop) = (app.clone(), stop.clone());
        readers.push(tokio::spawn(async move {
            let holder = format!("reader{i}");
            while !stop.load(Ordering::Relaxed) {
                let r = read(&app, "s", json!({"holder": holder, "wait_ms": 10000})).await;
                if r.status() == 201 {
                    tokio::time::sleep(Duration::from_millis(40)).await;
                    release(&app, "s", &holder, "").await;
                }
            }
        }));
    }
    // The readers overlap: the rwlock is never free while they run.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let w = write(&app, "s", json!({"holder": "writer", "wait_ms": 10000})).await;
    let waited = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    granted(w).await;
    assert!(
        waited < Duration::from_secs(2),
        "the writer waited {waited:?}"
    );
    release(&app, "s", "writer", "").await;
    for r in readers {
        r.await.unwrap();
    }
}

#[tokio::test]
async fn fencing_tokens_increase_across_modes() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let mut tokens = Vec::new();
    for (mode, holder) in [
        ("read", "a"),
        ("read", "b"),
        ("write", "c"),
        ("read", "c"),
        ("read", "d"),
    ] {
        if holder == "c" && mode == "write" {
            release(&app, "t", "a", "").await;
            release(&app, "t", "b", "").await;
        }
        if holder == "d" {
            release(&app, "t", "c", "?mode=write").await;
        }
        let g = granted(
            app.post(
                &format!("/rwlocks/t/{mode}/acquire"),
                json!({"holder": holder}),
            )
            .await,
        )
        .await;
        tokens.push(g["fencing_token"].as_u64().unwrap());
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert_eq!(
        rw_state(&app, "t").await["fencing_token"],
        *tokens.last().unwrap()
    );
}

#[tokio::test]
async fn readers_and_writers_on_two_instances_never_overlap_wrongly() {
    let redis = redis();
    let apps = [
        Arc::new(spawn_app(test_config(&redis)).await),
        Arc::new(spawn_app(test_config(&redis)).await),
    ];
    let writers_in = Arc::new(AtomicI64::new(0));
    let readers_in = Arc::new(AtomicI64::new(0));
    let violations = Arc::new(AtomicU64::new(0));
    let (reads_done, writes_done) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let until = Instant::now() + Duration::from_secs(3);
    let mut workers = Vec::new();
    for i in 0..8 {
        let app = apps[i % 2].clone();
        let (writers_in, readers_in, violations) =
            (writers_in.clone(), readers_in.clone(), violations.clone());
        let (reads_done, writes_done) = (reads_done.clone(), writes_done.clone());
        workers.push(tokio::spawn(async move {
            let holder = format!("worker{i}");
            let writer = i % 3 == 0;
            while Instant::now() < until {
                let mode = if writer { "write" } else { "read" };
                let r = app
                    .post(
                        &format!("/rwlocks/mx/{mode}/acquire"),
                        json!({"holder": holder, "wait_ms": 5000}),
                    )
                    .await;
                if r.status() != 201 {
                    continue;
                }
                if writer {
                    let others = writers_in.fetch_add(1, Ordering::SeqCst);
                    if others != 0 || readers_in.load(Ordering::SeqCst) != 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    writers_in.fetch_sub(1, Ordering::SeqCst);
                    writes_done.fetch_add(1, Ordering::Relaxed);
                } else {
                    readers_in.fetch_add(1, Ordering::SeqCst);
                    if writers_in.load(Ordering::SeqCst) != 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    readers_in.fetch_sub(1, Ordering::SeqCst);
                    reads_done.fetch_add(1, Ordering::Relaxed);
                }
                let released = release(&app, "mx", &holder, "").await;
                assert_eq!(released.status(), 200);
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(violations.load(Ordering::SeqCst), 0);
    let (reads, writes) = (
        reads_done.load(Ordering::Relaxed),
        writes_done.load(Ordering::Relaxed),
    );
    assert!(
        reads > 10 && writes > 5,
        "both modes made progress: {reads} reads, {writes} writes"
    );
}

#[tokio::test]
async fn a_waiting_writer_streams_and_is_granted_when_the_readers_leave() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    granted(read(&app, "e", json!({"holder": "r"})).await).await;
    let stream = app
        .client
        .post(app.url("/rwlocks/e/write/acquire"))
        .header("accept", "text/event-stream")
        .json(&json!({"holder": "w", "wait_ms": 10000}))
        .send()
        .await
        .unwrap();
    let events = tokio::spawn(read_sse(stream));
    wait_until_waiting(&app, "e", 1).await;
    release(&app, "e", "r", "").await;
    let events = events.await.unwrap();
    assert_eq!(events.first().unwrap().0, "waiting");
    assert!(events.first().unwrap().1.get("position").is_none());
    let (last, grant) = events.last().unwrap();
    assert_eq!(last, "acquired");
    assert_eq!(grant["mode"], "write");
}

#[tokio::test]
async fn bad_rwlock_inputs_get_problems() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    assert_problem(read(&app, "bad{x}", json!({})).await, 400, "invalid-name").await;
    assert_problem(
        write(&app, "ok", json!({"lease_ms": 1})).await,
        400,
        "out-of-range",
    )
    .await;
    granted(read(&app, "ok", json!({"holder": "h"})).await).await;
    let bad_mode = release(&app, "ok", "h", "?mode=sideways").await;
    assert_problem(bad_mode, 400, "invalid-body").await;
    assert_problem(
        release(&app, "ok", "h", "?mode=write").await,
        404,
        "not-held",
    )
    .await;
    assert_problem(
        app.client
            .put(app.url("/rwlocks/ok/read/acquire"))
            .send()
            .await
            .unwrap(),
        405,
        "method-not-allowed",
    )
    .await;
    let forced = app.delete_json("/rwlocks/ok").await;
    assert_eq!(forced["released"], true);
}

/// An acquire and a release read the hash before they drop ended holds,
/// and read it again only when some were dropped (a long read hold keeps
/// the hash from expiring meanwhile): a write hold whose lease ended
/// blocks no reader, a reader whose lease ended reads again as a new hold
/// (count 1, a new token) and releases nothing, and the last release
/// frees the lock while one with another reader left does not.
#[tokio::test]
async fn ended_holds_are_dropped_before_an_acquire_or_a_release_reads_them() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    granted(write(&app, "e", json!({"holder": "w", "lease_ms": 500})).await).await;
    granted(read(&app, "e", json!({"holder": "w", "lease_ms": 30000})).await).await;
    tokio::time::sleep(Duration::from_millis(800)).await;

    // Each first call after a lease ended is the one that matters.
    let first = granted(read(&app, "e", json!({"holder": "r", "lease_ms": 500})).await).await;
    let token = first["fencing_token"].as_u64().unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let again = granted(read(&app, "e", json!({"holder": "r"})).await).await;
    assert_eq!(
        (&again["hold_count"], &again["read_hold_count"]),
        (&json!(1), &json!(1)),
        "{again}"
    );
    assert!(again["fencing_token"].as_u64().unwrap() > token);
    granted(read(&app, "e", json!({"holder": "t", "lease_ms": 500})).await).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_problem(release(&app, "e", "t", "").await, 404, "not-held").await;

    let released: Value = release(&app, "e", "r", "").await.json().await.unwrap();
    assert_eq!(released["released"], false, "w still reads: {released}");
    let released: Value = release(&app, "e", "w", "").await.json().await.unwrap();
    assert_eq!(
        (&released["released"], &released["mode"]),
        (&json!(true), &json!("read")),
        "{released}"
    );
    assert_eq!(rw_state(&app, "e").await["mode"], Value::Null);
}

/// The release script on its own (a DELETE runs the leave script before
/// it, which drops ended holds first): it reads the hash before it drops
/// ended holds, and again when some were dropped, so a read hold whose
/// lease ended releases nothing while another keeps the hash.
#[tokio::test]
async fn a_release_of_a_read_hold_whose_lease_ended_releases_nothing() {
    use latchkey::coord::rwlocks::{Mode, RwLocks};
    use latchkey::coord::{Attempt, AttemptId};
    let redis = redis();
    let rw = RwLocks::new(test_store(&redis).await, 5000);
    for (holder, lease) in [("long", 30000), ("brief", 500)] {
        let attempt = rw
            .try_acquire("l", holder, Mode::Read, lease, None, &AttemptId::new())
            .await
            .unwrap();
        assert!(matches!(attempt, Attempt::Granted(_)), "{attempt:?}");
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let released = rw.release("l", "brief", None, false).await.unwrap();
    assert!(released.is_none(), "{released:?}");
    let released = rw.release("l", "long", None, false).await.unwrap();
    assert!(released.is_some_and(|r| r.released && r.hold_count == 0));
}

/// As a semaphore's: the hash of many readers' holds is kept as a hash
/// table (every field a script reads is a scan of a small hash's flat
/// list), a lock of few holds stays compact, state reads see only the
/// holds, and the last release still leaves nothing behind.
#[tokio::test]
async fn the_holds_of_many_readers_are_kept_as_a_hash_table() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let hash = "latchkey:{many}:rw";
    granted(read(&app, "many", json!({"holder": "r0"})).await).await;
    granted(read(&app, "many", json!({"holder": "r1"})).await).await;
    assert_ne!(object_encoding(&redis, hash).await, "hashtable");
    for i in 2..12 {
        granted(read(&app, "many", json!({"holder": format!("r{i}")})).await).await;
    }
    assert_eq!(object_encoding(&redis, hash).await, "hashtable");
    let state = rw_state(&app, "many").await;
    assert_eq!(state["readers"], json!(12), "{state}");
    assert_eq!(state["holds"].as_array().unwrap().len(), 12, "{state}");
    for i in 0..12 {
        let released = release(&app, "many", &format!("r{i}"), "").await;
        assert_eq!(released.status(), 200);
    }
    let mut conn = redis_conn(&redis).await;
    let left: i64 = redis::AsyncCommands::exists(&mut conn, &[hash, "latchkey:{many}:rw:readers"])
        .await
        .unwrap();
    assert_eq!(left, 0, "the last release deletes the hash");
}

/// A reader's lease that ends before every other one is dropped when it
/// ends, whether its acquire or its heartbeat made it the first to end
/// (the readers' reclaim floor is lowered with it): a writer then waits
/// only for the long reader.
#[tokio::test]
async fn a_read_lease_that_ends_before_the_others_is_dropped_when_it_ends() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for name in ["short", "cut"] {
        granted(read(&app, name, json!({"holder": "long", "lease_ms": 30000})).await).await;
    }
    // Past the floor's first horizon, a read sets it to the long lease's end.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for name in ["short", "cut"] {
        assert_eq!(rw_state(&app, name).await["readers"], 1, "{name}");
    }
    granted(read(&app, "short", json!({"holder": "a", "lease_ms": 1000})).await).await;
    granted(read(&app, "cut", json!({"holder": "a", "lease_ms": 30000})).await).await;
    let renewed = app
        .post(
            "/rwlocks/cut/holders/a/heartbeat",
            json!({"lease_ms": 1000}),
        )
        .await;
    assert_eq!(renewed.status(), 200);
    for name in ["short", "cut"] {
        assert_eq!(rw_state(&app, name).await["readers"], 2, "{name}");
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for name in ["short", "cut"] {
        assert_eq!(
            rw_state(&app, name).await["readers"],
            1,
            "{name}: a's read hold ended"
        );
        let released = release(&app, name, "long", "").await;
        assert_eq!(released.status(), 200, "{name}");
        // Nothing is held: a's ended read hold was dropped, not kept.
        let body: Value = released.json().await.unwrap();
        assert_eq!(body["released"], true, "{name}: {body}");
        granted(write(&app, name, json!({"holder": "w"})).await).await;
    }
}

/// A reader recorded where the hash carries no reclaim floor (an instance
/// of an older version wrote it, or its hash is gone while its lease
/// lives) still blocks a writer, and its lease still ends: an acquire that
/// finds no floor looks for readers before it takes the lock.
#[tokio::test]
async fn readers_without_a_reclaim_floor_still_block_a_writer() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let mut conn = redis_conn(&redis).await;
    for name in ["floorless", "hashless"] {
        granted(read(&app, name, json!({"holder": "r", "lease_ms": 1500})).await).await;
    }
    let _: () = redis::cmd("HDEL")
        .arg("latchkey:{floorless}:rw")
        .arg("soonest")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg("latchkey:{hashless}:rw")
        .query_async(&mut conn)
        .await
        .unwrap();
    for name in ["floorless", "hashless"] {
        let refused = write(&app, name, json!({"holder": "w"})).await;
        assert_eq!(refused.status(), 409, "{name}: the reader still holds");
    }
    tokio::time::sleep(Duration::from_millis(1600)).await;
    for name in ["floorless", "hashless"] {
        granted(write(&app, name, json!({"holder": "w"})).await).await;
    }
}
