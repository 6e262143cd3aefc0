//! Semaphores with leased permits: the contract's rows and failures, the
//! bound (never more permits out than configured, across two instances),
//! leases that lapse, the waiting policy (arrival order, bounded
//! overtaking) and exact give-backs.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use latchkey::coord::semaphores::Semaphores;
use latchkey::coord::{Attempt, AttemptId, Wait};
use redis::AsyncCommands;
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

use crate::helpers::*;

/// Configures `permits` on semaphore `name`, asserting 200; returns the state.
pub async fn put(app: &TestApp, name: &str, permits: u64) -> Value {
    let response = app
        .client
        .put(app.url(&format!("/semaphores/{name}")))
        .json(&json!({ "permits": permits }))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::OK, "PUT {name}");
    response.json().await.expect("JSON")
}

async fn acquire(app: &TestApp, name: &str, body: Value) -> Response {
    app.post(&format!("/semaphores/{name}/acquire"), body).await
}

async fn granted(response: Response) -> Value {
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json().await.expect("grant is JSON")
}

async fn release(app: &TestApp, name: &str, holder: &str) -> Response {
    app.client
        .delete(app.url(&format!("/semaphores/{name}/holders/{holder}")))
        .send()
        .await
        .expect("sent")
}

async fn heartbeat(app: &TestApp, name: &str, holder: &str, body: Value) -> Response {
    app.post(
        &format!("/semaphores/{name}/holders/{holder}/heartbeat"),
        body,
    )
    .await
}

async fn sem_state(app: &TestApp, name: &str) -> Value {
    let response = app
        .client
        .get(app.url(&format!("/semaphores/{name}")))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.expect("JSON")
}

/// Waits until `app` counts `n` requests waiting on the semaphore.
async fn wait_until_waiting(app: &TestApp, name: &str, n: u64) {
    let reached = eventually(Duration::from_secs(3), || async {
        sem_state(app, name).await["waiters"] == n
    })
    .await;
    assert!(reached, "expected {n} waiter(s) on {name}");
}

fn spawn_acquire(app: &TestApp, name: &str, body: Value) -> tokio::task::JoinHandle<Response> {
    app.spawn_post(&format!("/semaphores/{name}/acquire"), body)
}

#[tokio::test]
async fn permits_are_configured_taken_renewed_and_given_back() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let configured = put(&app, "s", 3).await;
    assert_eq!(
        configured,
        json!({
            "name": "s", "permits": 3, "available": 3, "holders": 0, "waiters": 0,
            "queued": 0, "holds": []
        })
    );

    let response = acquire(&app, "s", json!({"holder": "a", "permits": 2})).await;
    assert_eq!(
        response.headers()["location"].to_str().unwrap(),
        "/semaphores/s/holders/a"
    );
    let a = granted(response).await;
    assert_eq!(a["permits"], 2);
    assert_eq!(a["hold_count"], 1);
    assert_eq!(a["lease_ms"], 30000);
    assert_eq!(a["heartbeat_interval_ms"], 10000);
    let token = a["fencing_token"].as_u64().unwrap();
    assert!(token >= 1);

    // More permits for the same holder: one hold, its total, its token,
    // the newest lease for the whole hold.
    let more = granted(acquire(&app, "s", json!({"holder": "a", "lease_ms": 5000})).await).await;
    assert_eq!(more["permits"], 3);
    assert_eq!(more["hold_count"], 2);
    assert_eq!(more["lease_ms"], 5000);
    assert_eq!(more["fencing_token"], token);
    let mut conn = redis_conn(&redis).await;
    let deadline: f64 = conn
        .zscore("latchkey:{s}:sem:leases", "a")
        .await
        .expect("a lease");
    let ttl: i64 = conn.pttl("latchkey:{s}:sem:holds").await.unwrap();
    // They live at least as long as the lease; a TTL is never shortened,
    // so here as long as the first lease it replaced at most.
    assert!(
        ttl > 4500 && ttl <= 30000,
        "the holds live as long as the lease: {ttl}"
    );
    assert!(deadline > 0.0);

    let state = sem_state(&app, "s").await;
    assert_eq!(
        (&state["available"], &state["holders"]),
        (&json!(0), &json!(1))
    );

    // Nothing left: 409 no-permits with what is available and the hint.
    let response = acquire(&app, "s", json!({"holder": "b"})).await;
    assert_eq!(response.headers()["retry-after"], "3");
    let problem = assert_problem(response, 409, "no-permits").await;
    assert_eq!(problem["available"], 0);
    assert_eq!(problem["position"], 0);
    let hint = problem["retry_after_ms"].as_u64().unwrap();
    assert!(hint > 0 && hint <= 5000, "{problem}");

    // A heartbeat renews the whole hold; without lease_ms, for its lease.
    let renewed = heartbeat(&app, "s", "a", json!({})).await;
    assert_eq!(renewed.status(), StatusCode::OK);
    let renewed: Value = renewed.json().await.unwrap();
    assert_eq!(
        (&renewed["permits"], &renewed["lease_ms"]),
        (&json!(3), &json!(5000))
    );
    assert_eq!(renewed["fencing_token"], token);

    let released = release(&app, "s", "a").await;
    assert_eq!(released.status(), StatusCode::OK);
    assert_eq!(
        released.json::<Value>().await.unwrap(),
        json!({"released_permits": 3, "left_queue": false})
    );
    let state = sem_state(&app, "s").await;
    assert_eq!(
        (&state["available"], &state["holders"]),
        (&json!(3), &json!(0))
    );
    for gone in ["latchkey:{s}:sem:holds", "latchkey:{s}:sem:leases"] {
        let exists: bool = conn.exists(gone).await.unwrap();
        assert!(!exists, "{gone} goes with the last hold");
    }
    // b's try (no `wait_ms`) took no place in the queue.
    let queued: bool = conn.exists("latchkey:{s}:sem:queue").await.unwrap();
    assert!(!queued, "a try queues nothing");

    // A new holder gets a larger token.
    let b = granted(acquire(&app, "s", json!({"holder": "b"})).await).await;
    assert!(b["fencing_token"].as_u64().unwrap() > token);

    // Gone holds: 404 not-held for heartbeat and release.
    assert_problem(heartbeat(&app, "s", "a", json!({})).await, 404, "not-held").await;
    assert_problem(release(&app, "s", "a").await, 404, "not-held").await;
}

#[tokio::test]
async fn unknown_semaphores_and_impossible_requests_are_answered_at_once() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let started = Instant::now();
    assert_problem(
        acquire(&app, "nope", json!({"wait_ms": 5000})).await,
        404,
        "not-found",
    )
    .await;
    let response = app
        .client
        .get(app.url("/semaphores/nope"))
        .send()
        .await
        .unwrap();
    assert_problem(response, 404, "not-found").await;
    put(&app, "s", 2).await;
    let problem = assert_problem(
        acquire(&app, "s", json!({"permits": 3, "wait_ms": 5000})).await,
        400,
        "out-of-range",
    )
    .await;
    assert_eq!(problem["field"], "permits");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "never waited for what can never be granted"
    );
    let keys: Vec<String> = redis_conn(&redis)
        .await
        .keys("latchkey:{nope}:*")
        .await
        .unwrap();
    assert!(
        keys.is_empty(),
        "a refused request leaves nothing: {keys:?}"
    );
}

#[tokio::test]
async fn bad_semaphore_inputs_get_problems() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let put_raw = |body: &'static str, json: bool| {
        let mut request = app.client.put(app.url("/semaphores/s")).body(body);
        if json {
            request = request.header("content-type", "application/json");
        }
        request.send()
    };
    for (body, slug) in [
        (r#"{"permits": 0}"#, "out-of-range"),
        (r#"{"permits": 1000001}"#, "out-of-range"),
        (r#"{"permits": -1}"#, "out-of-range"),
        (r#"{"permits": "3"}"#, "invalid-body"),
        (r#"{}"#, "invalid-body"),
        (r#"{"permits": 3, "extra": 1}"#, "invalid-body"),
    ] {
        assert_problem(put_raw(body, true).await.unwrap(), 400, slug).await;
    }
    assert_problem(put_raw("", true).await.unwrap(), 400, "invalid-body").await;
    assert_problem(
        put_raw(r#"{"permits": 3}"#, false).await.unwrap(),
        415,
        "unsupported-media-type",
    )
    .await;
    put(&app, "s", 3).await;
    for body in [json!({"permits": 0}), json!({"permits": 1_000_001})] {
        assert_problem(acquire(&app, "s", body).await, 400, "out-of-range").await;
    }
    assert_problem(
        acquire(&app, "s", json!({"lease_ms": 10})).await,
        400,
        "out-of-range",
    )
    .await;
    assert_problem(
        acquire(&app, "s", json!({"holder": "a b"})).await,
        400,
        "invalid-body",
    )
    .await;
    assert_problem(acquire(&app, "s{x}", json!({})).await, 400, "invalid-name").await;
    let response = app
        .client
        .patch(app.url("/semaphores/s"))
        .send()
        .await
        .unwrap();
    assert_problem(response, 405, "method-not-allowed").await;
    // Nothing was taken by any of them.
    assert_eq!(sem_state(&app, "s").await["available"], 3);
}

#[tokio::test]
async fn changing_permits_never_revokes_live_holds() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    put(&app, "s", 3).await;
    granted(acquire(&app, "s", json!({"holder": "a", "permits": 3})).await).await;
    let lowered = put(&app, "s", 1).await;
    assert_eq!(
        (
            &lowered["permits"],
            &lowered["available"],
            &lowered["holders"]
        ),
        (&json!(1), &json!(0), &json!(1)),
        "available is never negative"
    );
    assert_eq!(
        heartbeat(&app, "s", "a", json!({})).await.status(),
        StatusCode::OK
    );
    assert_problem(
        acquire(&app, "s", json!({"holder": "b"})).await,
        409,
        "no-permits",
    )
    .await;
    assert_problem(
        acquire(&app, "s", json!({"holder": "b", "permits": 2})).await,
        400,
        "out-of-range",
    )
    .await;
    let released: Value = release(&app, "s", "a").await.json().await.unwrap();
    assert_eq!(released["released_permits"], 3);
    assert_eq!(sem_state(&app, "s").await["available"], 1);
    granted(acquire(&app, "s", json!({"holder": "b"})).await).await;
    // Raising the permits serves a waiter at once.
    let waiter = spawn_acquire(&app, "s", json!({"holder": "c", "wait_ms": 10000}));
    wait_until_waiting(&app, "s", 1).await;
    let started = Instant::now();
    put(&app, "s", 3).await;
    let c = granted(waiter.await.unwrap()).await;
    assert_eq!(c["permits"], 1);
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// The bound: 24 workers on two instances take 1 or 2 permits of 3 and
/// give them back, many times; the permits out never exceed 3, tokens are
/// never reused, and at the end every permit is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_on_two_instances_never_hold_more_than_the_permits() {
    let redis = redis();
    let one = Arc::new(spawn_app(test_config(&redis)).await);
    let two = Arc::new(spawn_app(test_config(&redis)).await);
    put(&one, "bound", 3).await;
    let inside = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let mut workers = Vec::new();
    for w in 0..24 {
        let app = if w % 2 == 0 { one.clone() } else { two.clone() };
        let (inside, most) = (inside.clone(), most.clone());
        workers.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            let permits = 1 + (w % 2) as i64;
            for round in 0..6 {
                let holder = format!("w{w}-{round}");
                let response = acquire(
                    &app,
                    "bound",
                    json!({"holder": holder, "permits": permits, "wait_ms": 20000}),
                )
                .await;
                let grant = granted(response).await;
                let now = inside.fetch_add(permits, Ordering::SeqCst) + permits;
                most.fetch_max(now, Ordering::SeqCst);
                tokens.push(grant["fencing_token"].as_u64().unwrap());
                tokio::time::sleep(Duration::from_millis(3)).await;
                inside.fetch_sub(permits, Ordering::SeqCst);
                let released: Value = release(&app, "bound", &holder).await.json().await.unwrap();
                assert_eq!(released["released_permits"], permits);
            }
            tokens
        }));
    }
    let mut tokens = Vec::new();
    for worker in workers {
        tokens.extend(worker.await.expect("worker finished"));
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} permits were out at once");
    assert!(most >= 2, "the workers did overlap ({most})");
    let count = tokens.len();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), count, "every grant got its own token");
    let state = sem_state(&one, "bound").await;
    assert_eq!(
        (&state["available"], &state["holders"]),
        (&json!(3), &json!(0)),
        "every permit came back"
    );
}

#[tokio::test]
async fn permits_of_a_holder_that_stops_heartbeating_go_to_a_waiter() {
    let redis = redis();
    let one = spawn_app(test_config(&redis)).await;
    let two = spawn_app(test_config(&redis)).await;
    put(&one, "s", 2).await;
    granted(
        acquire(
            &one,
            "s",
            json!({"holder": "crashed", "permits": 2, "lease_ms": 1000}),
        )
        .await,
    )
    .await;
    let started = Instant::now();
    let waiter = spawn_acquire(
        &two,
        "s",
        json!({"holder": "next", "permits": 2, "wait_ms": 8000}),
    );
    let next = granted(waiter.await.unwrap()).await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(800) && waited < Duration::from_millis(2500),
        "granted when the lease ended, not before and not much after: {waited:?}"
    );
    assert_eq!(next["permits"], 2);
    assert_problem(
        heartbeat(&one, "s", "crashed", json!({})).await,
        404,
        "not-held",
    )
    .await;
    let state = sem_state(&one, "s").await;
    assert_eq!(
        (&state["available"], &state["holders"]),
        (&json!(0), &json!(1))
    );
}

/// A release serves as many waiters as the permits allow, in order: here
/// the first two (3 + 1 of 4), not the third (2 more), and without a
/// lease running out.
#[tokio::test]
async fn a_release_serves_every_waiter_the_permits_allow_in_order() {
    let redis = redis();
    let one = spawn_app(test_config(&redis)).await;
    let two = spawn_app(test_config(&redis)).await;
    put(&one, "s", 4).await;
    granted(acquire(&one, "s", json!({"holder": "x", "permits": 4})).await).await;
    let w1 = spawn_acquire(
        &one,
        "s",
        json!({"holder": "w1", "permits": 3, "wait_ms": 10000}),
    );
    wait_until_waiting(&one, "s", 1).await;
    let w2 = spawn_acquire(
        &two,
        "s",
        json!({"holder": "w2", "permits": 1, "wait_ms": 10000}),
    );
    wait_until_waiting(&two, "s", 1).await;
    let w3 = spawn_acquire(
        &two,
        "s",
        json!({"holder": "w3", "permits": 2, "wait_ms": 2500}),
    );
    wait_until_waiting(&two, "s", 2).await;
    let started = Instant::now();
    assert_eq!(release(&one, "s", "x").await.status(), StatusCode::OK);
    assert_eq!(granted(w1.await.unwrap()).await["permits"], 3);
    assert_eq!(granted(w2.await.unwrap()).await["permits"], 1);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "woken by the release: {:?}",
        started.elapsed()
    );
    let problem = assert_problem(w3.await.unwrap(), 409, "no-permits").await;
    assert_eq!(problem["available"], 0);
}

/// The policy: a request that fits overtakes a waiter that does not, but
/// at most 16 times; then it waits behind it, and the big waiter is served
/// as soon as enough permits come back.
#[tokio::test]
async fn a_big_waiter_is_overtaken_a_bounded_number_of_times() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    put(&app, "s", 3).await;
    granted(acquire(&app, "s", json!({"holder": "x", "permits": 2})).await).await;
    let big = spawn_acquire(
        &app,
        "s",
        json!({"holder": "big", "permits": 3, "wait_ms": 20000}),
    );
    wait_until_waiting(&app, "s", 1).await;
    for i in 0..16 {
        let holder = format!("small{i}");
        let response = acquire(&app, "s", json!({"holder": holder})).await;
        assert_eq!(
            response.status(),
            StatusCode::CREATED,
            "overtake {i} of 16: a request that fits goes past a waiter that does not"
        );
        release(&app, "s", &holder).await;
    }
    let problem = assert_problem(
        acquire(&app, "s", json!({"holder": "late"})).await,
        409,
        "no-permits",
    )
    .await;
    assert_eq!(
        problem["available"], 1,
        "it would fit, but the head was overtaken enough"
    );
    assert_eq!(problem["position"], 1, "behind the big waiter");
    release(&app, "s", "x").await;
    assert_eq!(granted(big.await.unwrap()).await["permits"], 3);
}

/// A waiter for 3 of 3 under a continuous stream of 1-permit acquirers on
/// two instances gets its permits (Redisson's semaphores starve it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_big_waiter_is_served_under_a_stream_of_small_acquirers() {
    let redis = redis();
    let one = Arc::new(spawn_app(test_config(&redis)).await);
    let two = Arc::new(spawn_app(test_config(&redis)).await);
    put(&one, "s", 3).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let served = Arc::new(AtomicI64::new(0));
    let mut smalls = Vec::new();
    for w in 0..6 {
        let app = if w % 2 == 0 { one.clone() } else { two.clone() };
        let (stop, served) = (stop.clone(), served.clone());
        smalls.push(tokio::spawn(async move {
            let holder = format!("small{w}");
            while !stop.load(Ordering::Relaxed) {
                let response = acquire(&app, "s", json!({"holder": holder, "wait_ms": 2000})).await;
                if response.status() == StatusCode::CREATED {
                    served.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    release(&app, "s", &holder).await;
                }
            }
        }));
    }
    // The stream is flowing before the big waiter arrives.
    assert!(
        eventually(Duration::from_secs(3), || async {
            served.load(Ordering::Relaxed) >= 20
        })
        .await
    );
    let started = Instant::now();
    let big = acquire(
        &two,
        "s",
        json!({"holder": "big", "permits": 3, "wait_ms": 20000}),
    )
    .await;
    let waited = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    assert_eq!(granted(big).await["permits"], 3, "served after {waited:?}");
    for small in smalls {
        small.await.unwrap();
    }
    let state = sem_state(&one, "s").await;
    assert!(state["available"].as_u64().unwrap() <= 3);
}

/// A waiter whose client goes away gets nothing later, and its holder's
/// other permits stay exactly as they were.
#[tokio::test]
async fn a_departed_waiter_takes_nothing_and_keeps_its_holders_other_permits() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    put(&app, "s", 2).await;
    granted(acquire(&app, "s", json!({"holder": "h"})).await).await;
    granted(acquire(&app, "s", json!({"holder": "x"})).await).await;
    let impatient = app
        .client
        .post(app.url("/semaphores/s/acquire"))
        .json(&json!({"holder": "h", "wait_ms": 10000}))
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(impatient.is_err(), "the client gave up");
    wait_until_waiting(&app, "s", 0).await;
    release(&app, "s", "x").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let renewed: Value = heartbeat(&app, "s", "h", json!({}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        renewed["permits"], 1,
        "h still has exactly its first permit"
    );
    assert_eq!(sem_state(&app, "s").await["available"], 1);
}

/// Below HTTP: an undo gives back exactly what its attempt was granted,
/// never the holder's other permits, and makes a late copy grant nothing.
#[tokio::test]
async fn an_undo_gives_back_exactly_its_attempts_permits() {
    let redis = redis();
    let sems = Semaphores::new(test_store(&redis).await, 5000);
    sems.set("s", 5).await.unwrap();
    let (first, second) = (AttemptId::new(), AttemptId::new());
    let grant = |a: Attempt<_>| match a {
        Attempt::Granted(g) => g,
        other => panic!("expected a grant, got {other:?}"),
    };
    grant(
        sems.try_acquire("s", "h", 1, 30000, None, &first)
            .await
            .unwrap(),
    );
    let both = grant(
        sems.try_acquire("s", "h", 2, 30000, None, &second)
            .await
            .unwrap(),
    );
    assert_eq!(both.permits, 3);
    // The same attempt again grants nothing more.
    let again = grant(
        sems.try_acquire("s", "h", 2, 30000, None, &second)
            .await
            .unwrap(),
    );
    assert_eq!(again.permits, 3);
    assert!(sems.undo("s", "h", &second, Wait::default()).await.unwrap());
    let state = sems.state("s").await.unwrap().unwrap();
    assert_eq!((state.available, state.holders), (4, 1));
    assert!(
        !sems.undo("s", "h", &second, Wait::default()).await.unwrap(),
        "undone once"
    );
    let kept = sems.heartbeat("s", "h", None).await.unwrap().unwrap();
    assert_eq!((kept.permits, kept.grants), (1, 1));
    // An attempt undone before it ran grants nothing when it arrives.
    let late = AttemptId::new();
    assert!(!sems.undo("s", "h", &late, Wait::default()).await.unwrap());
    assert!(
        sems.try_acquire("s", "h", 1, 30000, None, &late)
            .await
            .is_err()
    );
    assert_eq!(sems.state("s").await.unwrap().unwrap().available, 4);
    assert!(sems.undo("s", "h", &first, Wait::default()).await.unwrap());
    let state = sems.state("s").await.unwrap().unwrap();
    assert_eq!((state.available, state.holders), (5, 0));
}

#[tokio::test]
async fn deleting_a_semaphore_ends_open_waits_with_404_and_keeps_tokens_increasing() {
    let redis = redis();
    let one = spawn_app(test_config(&redis)).await;
    let two = spawn_app(test_config(&redis)).await;
    put(&one, "s", 1).await;
    let first = granted(acquire(&one, "s", json!({"holder": "a"})).await).await;
    let waiter = spawn_acquire(&two, "s", json!({"holder": "b", "wait_ms": 10000}));
    wait_until_waiting(&two, "s", 1).await;
    let stream = two
        .client
        .post(two.url("/semaphores/s/acquire"))
        .header("accept", "text/event-stream")
        .json(&json!({"holder": "c", "wait_ms": 10000}))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    let mut events = sse_events(stream);
    let (name, data) = events.recv().await.expect("a waiting event");
    assert_eq!(name, "waiting");
    assert_eq!(
        (&data["position"], &data["available"]),
        (&json!(1), &json!(0)),
        "{data}"
    );
    let started = Instant::now();
    assert_eq!(
        one.delete_json("/semaphores/s").await,
        json!({"deleted": true})
    );
    assert_problem(waiter.await.unwrap(), 404, "not-found").await;
    let (name, data) = events.recv().await.expect("a final event");
    assert_eq!(
        (name.as_str(), &data["type"]),
        ("error", &json!("/problems/not-found"))
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(
        one.delete_json("/semaphores/s").await,
        json!({"deleted": false})
    );
    let response = one
        .client
        .get(one.url("/semaphores/s"))
        .send()
        .await
        .unwrap();
    assert_problem(response, 404, "not-found").await;
    let keys: Vec<String> = redis_conn(&redis)
        .await
        .keys("latchkey:{s}:sem*")
        .await
        .unwrap();
    assert_eq!(keys, vec!["latchkey:{s}:sem:fence".to_string()]);
    put(&one, "s", 1).await;
    let later = granted(acquire(&one, "s", json!({"holder": "a"})).await).await;
    assert!(later["fencing_token"].as_u64() > first["fencing_token"].as_u64());
}

#[tokio::test]
async fn a_waiter_streams_its_place_and_is_granted_on_release() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    put(&app, "s", 2).await;
    granted(acquire(&app, "s", json!({"holder": "a", "permits": 2})).await).await;
    let stream = app
        .client
        .post(app.url("/semaphores/s/acquire"))
        .header("accept", "text/event-stream")
        .json(&json!({"holder": "b", "permits": 2, "wait_ms": 10000}))
        .send()
        .await
        .unwrap();
    let mut events = sse_events(stream);
    let (name, data) = events.recv().await.unwrap();
    assert_eq!(name, "waiting");
    assert_eq!(data["position"], 0);
    assert_eq!(data["available"], 0);
    release(&app, "s", "a").await;
    let (name, data) = events.recv().await.unwrap();
    assert_eq!(name, "acquired");
    assert_eq!(
        (&data["holder"], &data["permits"]),
        (&json!("b"), &json!(2))
    );
    assert!(events.recv().await.is_none(), "the stream ends");
}

/// An acquire reads the holds before it reclaims expired leases, and reads
/// them again only when some were reclaimed: a holder whose lease ended
/// starts over (a first grant, a new token), the permits it had are free,
/// and a release of the ended hold finds nothing. Then the releases of
/// a hold with others left, and of the last one (which deletes the holds
/// whole), leave the counts right.
#[tokio::test]
async fn an_ended_holders_next_acquire_is_a_first_grant_and_its_permits_are_free() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    put(&app, "e", 3).await;
    let first = granted(
        acquire(
            &app,
            "e",
            json!({"holder": "a", "permits": 2, "lease_ms": 500}),
        )
        .await,
    )
    .await;
    let token = first["fencing_token"].as_u64().unwrap();
    granted(acquire(&app, "e", json!({"holder": "b", "permits": 1})).await).await;
    tokio::time::sleep(Duration::from_millis(800)).await;

    // The first call after the lease ended is the acquire.
    let again = granted(acquire(&app, "e", json!({"holder": "a", "permits": 1})).await).await;
    assert_eq!(
        (&again["hold_count"], &again["permits"]),
        (&json!(1), &json!(1)),
        "{again}"
    );
    assert!(again["fencing_token"].as_u64().unwrap() > token);
    let state = sem_state(&app, "e").await;
    assert_eq!(
        (&state["available"], &state["holders"]),
        (&json!(1), &json!(2)),
        "{state}"
    );
    // The first call after this lease ended is the release.
    granted(
        acquire(
            &app,
            "e",
            json!({"holder": "c", "permits": 1, "lease_ms": 500}),
        )
        .await,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_problem(release(&app, "e", "c").await, 404, "not-held").await;

    assert_eq!(release(&app, "e", "b").await.status(), StatusCode::OK);
    let state = sem_state(&app, "e").await;
    assert_eq!(
        (&state["available"], &state["holders"]),
        (&json!(2), &json!(1)),
        "{state}"
    );
    assert_eq!(release(&app, "e", "a").await.status(), StatusCode::OK);
    let state = sem_state(&app, "e").await;
    assert_eq!(
        (&state["available"], &state["holders"]),
        (&json!(3), &json!(0)),
        "{state}"
    );
    let mut conn = redis_conn(&redis).await;
    let left: u64 = conn
        .exists(&["latchkey:{e}:sem:holds", "latchkey:{e}:sem:leases"])
        .await
        .unwrap();
    assert_eq!(left, 0, "the last release deletes the holds");
    let all = granted(acquire(&app, "e", json!({"holder": "c", "permits": 3})).await).await;
    assert_eq!(all["permits"], 3);
}

/// A release with other holders left drops the holder's session fields
/// only when it read that the hold has a session (and a first grant reads
/// a holder's hold only when it has a lease): a hold taken in a session,
/// released, leaves nothing of the session behind, so the holder's holds
/// without one are granted and re-entered afterwards.
#[tokio::test]
async fn a_released_session_hold_leaves_no_session_behind_while_others_hold() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    put(&app, "p", 3).await;
    granted(acquire(&app, "p", json!({"holder": "other"})).await).await;
    let created = app.post("/sessions", json!({"ttl_ms": 30000})).await;
    assert_eq!(created.status(), 201);
    let session: Value = created.json().await.unwrap();
    let in_session = json!({"holder": "h", "session": session["session"]});
    granted(acquire(&app, "p", in_session.clone()).await).await;
    // Without a session while the hold is in one: refused.
    assert_problem(
        acquire(&app, "p", json!({"holder": "h"})).await,
        409,
        "session-mismatch",
    )
    .await;
    assert_eq!(release(&app, "p", "h").await.status(), StatusCode::OK);

    let mut conn = redis_conn(&redis).await;
    let fields: Vec<String> = conn.hkeys("latchkey:{p}:sem:holds").await.unwrap();
    assert!(
        !fields.iter().any(|f| f.ends_with("|h")),
        "nothing of h is left: {fields:?}"
    );
    let first = granted(acquire(&app, "p", json!({"holder": "h"})).await).await;
    let again = granted(acquire(&app, "p", json!({"holder": "h"})).await).await;
    assert_eq!(
        (
            &first["hold_count"],
            &again["hold_count"],
            &again["permits"]
        ),
        (&json!(1), &json!(2), &json!(2)),
        "{again}"
    );
}

/// Many holders' holds are one hash: Redis keeps a small hash as a flat
/// list, where every field a script reads is a scan of it, so the scripts
/// keep a hash of many holders as a hash table. A semaphore of a few
/// holders stays compact, one of many is a table, state reads see only
/// the holders, and the last release still leaves nothing behind.
#[tokio::test]
async fn the_holds_of_many_holders_are_kept_as_a_hash_table() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    put(&app, "many", 64).await;
    let holds = "latchkey:{many}:sem:holds";
    granted(acquire(&app, "many", json!({"holder": "h0"})).await).await;
    granted(acquire(&app, "many", json!({"holder": "h1"})).await).await;
    assert_ne!(object_encoding(&redis, holds).await, "hashtable");
    for i in 2..12 {
        let holder = format!("h{i}");
        granted(acquire(&app, "many", json!({"holder": holder})).await).await;
    }
    assert_eq!(object_encoding(&redis, holds).await, "hashtable");
    let state = sem_state(&app, "many").await;
    assert_eq!(state["available"], json!(52), "{state}");
    assert_eq!(state["holders"], json!(12), "{state}");
    assert_eq!(state["holds"].as_array().unwrap().len(), 12, "{state}");
    for i in 0..12 {
        assert_eq!(
            release(&app, "many", &format!("h{i}")).await.status(),
            StatusCode::OK
        );
    }
    let mut conn = redis_conn(&redis).await;
    let left: i64 = conn
        .exists(&[holds, "latchkey:{many}:sem:leases"])
        .await
        .unwrap();
    assert_eq!(left, 0, "the last release deletes the holds");
}

/// A lease that ends before every other one is reclaimed when it ends,
/// whether an acquire or a heartbeat made it the first to end: every
/// script that writes such a lease lowers the reclaim floor, before which
/// the scripts do not look for ended leases.
#[tokio::test]
async fn a_lease_that_ends_before_the_others_is_reclaimed_when_it_ends() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for name in ["short", "cut"] {
        put(&app, name, 3).await;
        granted(acquire(&app, name, json!({"holder": "long", "lease_ms": 30000})).await).await;
    }
    // Past the floor's first horizon, a read sets it to the long lease's end.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for name in ["short", "cut"] {
        assert_eq!(sem_state(&app, name).await["available"], 2, "{name}");
    }
    granted(acquire(&app, "short", json!({"holder": "a", "lease_ms": 1000})).await).await;
    granted(acquire(&app, "cut", json!({"holder": "a", "lease_ms": 30000})).await).await;
    let renewed = heartbeat(&app, "cut", "a", json!({"lease_ms": 1000})).await;
    assert_eq!(renewed.status(), StatusCode::OK);
    for name in ["short", "cut"] {
        assert_eq!(sem_state(&app, name).await["available"], 1, "{name}");
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for name in ["short", "cut"] {
        let state = sem_state(&app, name).await;
        assert_eq!(
            (&state["available"], &state["holders"]),
            (&json!(2), &json!(1)),
            "{name}: a's permit is back, the long hold stays"
        );
    }
}

/// The holds live as long as the longest lease, whichever was granted
/// first, and Redis expires them once every lease has ended unreleased,
/// a lease after the last one at the latest (a grant on keys that were
/// there extends them a lease past its own: `kept` in sem_acquire.lua):
/// an acquire only ever extends their TTL, and sets one on keys it
/// created.
#[tokio::test]
async fn the_holds_outlive_every_lease_and_expire_after_the_last() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    put(&app, "s", 3).await;
    granted(acquire(&app, "s", json!({"holder": "short", "lease_ms": 1000})).await).await;
    granted(acquire(&app, "s", json!({"holder": "long", "lease_ms": 2000})).await).await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let state = sem_state(&app, "s").await;
    assert_eq!(
        (&state["available"], &state["holders"]),
        (&json!(2), &json!(1)),
        "the short hold ended, the long one stays"
    );
    let mut conn = redis_conn(&redis).await;
    let keys = ["latchkey:{s}:sem:holds", "latchkey:{s}:sem:leases"];
    for key in keys {
        let ttl: i64 = conn.pttl(key).await.unwrap();
        assert!(
            (1000..=2700).contains(&ttl),
            "{key} outlives the long lease, by a lease at most: {ttl}"
        );
    }
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let left: i64 = conn.exists(&keys).await.unwrap();
    assert_eq!(
        left, 0,
        "the keys expired a lease after the last lease at most"
    );
}

/// The holds and the leases live at least as long as every lease. A grant
/// on keys that were there extends them to a lease past its own, and
/// records that (`kept`): a grant whose lease ends by then extends nothing,
/// so a semaphore in steady use pays no `PEXPIRE`s per grant. Keys a grant
/// creates live as long as its lease, and go with the last hold.
#[tokio::test]
async fn a_grant_within_what_the_holds_outlive_extends_nothing() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    put(&app, "k", 10).await;
    let mut conn = redis_conn(&redis).await;
    let keys = ["latchkey:{k}:sem:holds", "latchkey:{k}:sem:leases"];
    // Each key's PTTL, checked to outlive `lease_ms` (less the test's
    // own time since the grant); the holds' `kept` must not exceed it.
    async fn ttls(conn: &mut redis::aio::MultiplexedConnection, keys: [&str; 2]) -> [i64; 2] {
        let mut out = [0; 2];
        for (i, key) in keys.iter().enumerate() {
            out[i] = conn.pttl(key).await.unwrap();
        }
        out
    }

    granted(acquire(&app, "k", json!({"holder": "a", "lease_ms": 10000})).await).await;
    let [holds, leases] = ttls(&mut conn, keys).await;
    assert!(
        (9000..=10000).contains(&holds) && (9000..=10000).contains(&leases),
        "keys a grant creates live as long as its lease: {holds} {leases}"
    );

    // On keys that were there: a lease past the grant's own.
    granted(acquire(&app, "k", json!({"holder": "b", "lease_ms": 10000})).await).await;
    let [holds, leases] = ttls(&mut conn, keys).await;
    assert!(
        (19000..=20000).contains(&holds) && (19000..=20000).contains(&leases),
        "extended a lease past b's: {holds} {leases}"
    );
    let kept: i64 = conn.hget(keys[0], "kept").await.unwrap();
    let now = redis_ms(&mut conn).await as i64;
    assert!(
        (now + holds - 1000..=now + holds + 50).contains(&kept),
        "kept ({kept}) is when the keys expire, at the latest (now {now}, TTL {holds})"
    );

    // Leases that end by then: no PEXPIRE at all.
    reset_command_stats(&mut conn).await;
    for holder in ["c", "d", "e"] {
        granted(acquire(&app, "k", json!({"holder": holder, "lease_ms": 15000})).await).await;
    }
    assert_eq!(command_calls(&mut conn, "pexpire").await, 0);
    let [after, _] = ttls(&mut conn, keys).await;
    assert!(after <= holds, "nothing extended: {after} after {holds}");

    // A lease past it extends the keys again, past that lease.
    granted(acquire(&app, "k", json!({"holder": "f", "lease_ms": 60000})).await).await;
    let [holds, leases] = ttls(&mut conn, keys).await;
    assert!(
        holds >= 119000 && leases >= 119000,
        "extended a lease past f's: {holds} {leases}"
    );
    assert_eq!(command_calls(&mut conn, "pexpire").await, 2);

    // A heartbeat that lengthens a lease past `kept` extends the keys too.
    let beat = heartbeat(&app, "k", "a", json!({"lease_ms": 200000})).await;
    assert_eq!(beat.status(), StatusCode::OK);
    let [holds, leases] = ttls(&mut conn, keys).await;
    assert!(
        holds >= 199000 && leases >= 199000,
        "the keys outlive a's new lease: {holds} {leases}"
    );

    for holder in ["a", "b", "c", "d", "e", "f"] {
        assert_eq!(release(&app, "k", holder).await.status(), StatusCode::OK);
    }
    let left: i64 = conn.exists(&keys).await.unwrap();
    assert_eq!(left, 0, "the last release deletes the holds");
}
