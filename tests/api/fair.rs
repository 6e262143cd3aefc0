//! Fair locks: arrival order across instances, positions, the queue grace,
//! and what a handoff costs Redis.

use std::sync::Arc;
use std::time::{Duration, Instant};

use latchkey::config::Config;
use parking_lot::Mutex;
use redis::AsyncCommands;
use reqwest::Response;
use serde_json::{Value, json};

use crate::helpers::*;

fn acquire_path(name: &str) -> String {
    format!("/fair-locks/{name}/acquire")
}

async fn fair_acquire(app: &TestApp, name: &str, body: Value) -> Response {
    app.post(&acquire_path(name), body).await
}

async fn fair_release(app: &TestApp, name: &str, holder: &str) -> Value {
    app.delete_json(&format!("/fair-locks/{name}/holders/{holder}"))
        .await
}

/// A 409 `lock-held` with this position; returns the problem.
async fn assert_queued(response: Response, position: u64) -> Value {
    let problem = assert_problem(response, 409, "lock-held").await;
    assert_eq!(problem["position"], position, "{problem}");
    problem
}

async fn fair_waiters(app: &TestApp, name: &str) -> u64 {
    app.get_json(&format!("/fair-locks/{name}")).await["waiters"]
        .as_u64()
        .expect("waiters")
}

async fn wait_for_fair_waiters(app: &TestApp, name: &str, n: u64) {
    let reached = eventually(Duration::from_secs(3), || async {
        fair_waiters(app, name).await == n
    })
    .await;
    assert!(reached, "expected {n} fair waiter(s) on {name}");
}

fn with_grace(redis: &latchkey::devredis::RedisServer, grace_ms: u64) -> Config {
    Config {
        queue_grace_ms: grace_ms,
        ..test_config(redis)
    }
}

#[tokio::test]
async fn ten_waiters_across_two_instances_are_granted_in_arrival_order() {
    let redis = redis();
    let apps = [
        Arc::new(spawn_app(test_config(&redis)).await),
        Arc::new(spawn_app(test_config(&redis)).await),
    ];
    assert_eq!(
        fair_acquire(&apps[0], "q", json!({"holder": "owner"}))
            .await
            .status(),
        201
    );
    let granted = Arc::new(Mutex::new(Vec::new()));
    let mut waiting = Vec::new();
    for i in 0..10u64 {
        let app = apps[(i % 2) as usize].clone();
        let granted = granted.clone();
        waiting.push(tokio::spawn(async move {
            let holder = format!("w{i}");
            let response = fair_acquire(
                &app,
                "q",
                json!({"holder": holder, "wait_ms": 20000, "lease_ms": 30000}),
            )
            .await;
            assert_eq!(response.status(), 201, "w{i}");
            let grant: Value = response.json().await.unwrap();
            granted
                .lock()
                .push((i, grant["fencing_token"].as_u64().unwrap()));
            fair_release(&app, "q", &holder).await;
        }));
        // The next one arrives only once this one is queued.
        wait_for_fair_waiters(&apps[(i % 2) as usize], "q", i / 2 + 1).await;
    }
    fair_release(&apps[1], "q", "owner").await;
    for w in waiting {
        w.await.unwrap();
    }
    let granted = granted.lock().clone();
    let order: Vec<u64> = granted.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, (0..10).collect::<Vec<_>>(), "grant order");
    assert!(
        granted.windows(2).all(|w| w[0].1 < w[1].1),
        "tokens increase: {granted:?}"
    );
}

#[tokio::test]
async fn position_counts_down_in_409s_and_in_sse_waiting_events() {
    let redis = redis();
    let a = spawn_app(test_config(&redis)).await;
    let b = spawn_app(test_config(&redis)).await;
    fair_acquire(&a, "p", json!({"holder": "owner"})).await;
    // Short long-polls take places (a try would take none).
    let poll = |holder: &str| json!({"holder": holder, "wait_ms": 100});
    assert_queued(fair_acquire(&a, "p", poll("w1")).await, 0).await;
    assert_queued(fair_acquire(&b, "p", poll("w2")).await, 1).await;
    // w3 streams from instance b.
    let stream = b
        .client
        .post(b.url(&acquire_path("p")))
        .header("accept", "text/event-stream")
        .json(&json!({"holder": "w3", "wait_ms": 15000}))
        .send()
        .await
        .unwrap();
    let mut events = sse_events(stream);
    // Each change of position is awaited before the next step, so a
    // step's event cannot be superseded by the next one. (A `waiting`
    // event may repeat a position: the hint it carries moved.)
    let mut seen = None;
    let mut next_position = async || loop {
        let (event, data) = tokio::time::timeout(Duration::from_secs(5), events.recv())
            .await
            .expect("an event within 5 s")
            .expect("the stream is open");
        assert_eq!(event, "waiting", "{data}");
        let position = data["position"].as_u64().expect("position in waiting");
        if seen != Some(position) {
            seen = Some(position);
            return position;
        }
    };
    assert_eq!(next_position().await, 2);

    // Each step frees the head's turn; the head (polling again within the
    // grace) takes it, then lets go.
    fair_release(&a, "p", "owner").await;
    let grant = fair_acquire(&a, "p", json!({"holder": "w1", "wait_ms": 5000})).await;
    assert_eq!(grant.status(), 201);
    assert_eq!(next_position().await, 1);
    assert_queued(fair_acquire(&b, "p", poll("w2")).await, 0).await;
    fair_release(&a, "p", "w1").await;
    let grant = fair_acquire(&b, "p", json!({"holder": "w2", "wait_ms": 5000})).await;
    assert_eq!(grant.status(), 201);
    assert_eq!(next_position().await, 0);
    fair_release(&b, "p", "w2").await;
    let (last, grant) = loop {
        let event = events.recv().await.expect("a final event");
        if event.0 != "waiting" {
            break event;
        }
    };
    assert_eq!(last, "acquired", "{grant}");
    assert_eq!(grant["holder"], "w3");
}

#[tokio::test]
async fn a_waiter_queued_on_the_same_instance_longer_than_the_grace_keeps_its_place() {
    let redis = redis();
    let app = Arc::new(spawn_app(with_grace(&redis, 300)).await);
    fair_acquire(&app, "g", json!({"holder": "owner"})).await;
    let first = app.spawn_post(&acquire_path("g"), json!({"holder": "w1", "wait_ms": 5000}));
    wait_for_fair_waiters(&app, "g", 1).await;
    let second = app.spawn_post(&acquire_path("g"), json!({"holder": "w2", "wait_ms": 5000}));
    wait_for_fair_waiters(&app, "g", 2).await;
    // Four graces pass while both wait without a new poll of their own.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_queued(fair_acquire(&app, "g", json!({"holder": "late"})).await, 2).await;
    fair_release(&app, "g", "owner").await;
    assert_eq!(first.await.unwrap().status(), 201);
    assert_eq!(
        fair_acquire(&app, "g", json!({"holder": "late"}))
            .await
            .status(),
        409,
        "w2 is still ahead of late"
    );
    fair_release(&app, "g", "w1").await;
    assert_eq!(second.await.unwrap().status(), 201);
}

#[tokio::test]
async fn polling_again_within_the_grace_keeps_the_place_and_after_it_loses_it() {
    let redis = redis();
    let app = spawn_app(with_grace(&redis, 400)).await;
    fair_acquire(&app, "r", json!({"holder": "owner"})).await;
    // Polls are short long-polls: a try would take no place.
    let poll = |holder: &str| json!({"holder": holder, "wait_ms": 50});
    assert_queued(fair_acquire(&app, "r", poll("w1")).await, 0).await;
    assert_queued(fair_acquire(&app, "r", poll("w2")).await, 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_queued(fair_acquire(&app, "r", poll("w1")).await, 0).await;
    // w2 keeps polling; w1 stops.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        fair_acquire(&app, "r", poll("w2")).await;
    }
    assert_queued(fair_acquire(&app, "r", poll("w2")).await, 0).await;
    assert_queued(fair_acquire(&app, "r", poll("w1")).await, 1).await;
}

#[tokio::test]
async fn a_waiter_that_stops_polling_is_skipped_once_its_grace_runs_out() {
    let redis = redis();
    let app = spawn_app(with_grace(&redis, 600)).await;
    fair_acquire(&app, "s", json!({"holder": "owner"})).await;
    let poll = json!({"holder": "gone", "wait_ms": 50});
    assert_queued(fair_acquire(&app, "s", poll).await, 0).await;
    let waiter = app.spawn_post(
        &acquire_path("s"),
        json!({"holder": "patient", "wait_ms": 5000}),
    );
    wait_for_fair_waiters(&app, "s", 1).await;
    let released = Instant::now();
    fair_release(&app, "s", "owner").await;
    assert_eq!(waiter.await.unwrap().status(), 201);
    let waited = released.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_millis(2000),
        "the head kept its turn for its grace, then was skipped: {waited:?}"
    );
}

#[tokio::test]
async fn a_departed_clients_queue_entry_is_gone_after_the_grace() {
    let redis = redis();
    let app = spawn_app(with_grace(&redis, 300)).await;
    fair_acquire(&app, "d", json!({"holder": "owner"})).await;
    // The client gives up after 300 ms of a 20 s wait.
    let gave_up = app
        .client
        .post(app.url(&acquire_path("d")))
        .timeout(Duration::from_millis(300))
        .json(&json!({"holder": "leaver", "wait_ms": 20000}))
        .send()
        .await;
    assert!(gave_up.is_err(), "the client timed out");
    let mut conn = redis_conn(&redis).await;
    let score: Option<f64> = conn
        .zscore("latchkey:{d}:fair:queue", "leaver")
        .await
        .unwrap();
    assert!(score.is_some(), "queued while within its grace");
    let gone = eventually(Duration::from_secs(3), || async {
        let exists: bool = redis_conn(&redis)
            .await
            .exists("latchkey:{d}:fair:queue")
            .await
            .unwrap();
        !exists
    })
    .await;
    assert!(
        gone,
        "the entry (and the queue's keys) are gone after the grace"
    );
    // Nobody is ahead of a newcomer any more.
    assert_queued(fair_acquire(&app, "d", json!({"holder": "next"})).await, 0).await;
}

/// The scripts a handoff chain of `n` queued waiters runs in Redis, per
/// handoff.
async fn scripts_per_handoff(redis: &latchkey::devredis::RedisServer, name: &str, n: u64) -> f64 {
    let app: Arc<TestApp> = Arc::new(spawn_app(test_config(redis)).await);
    fair_acquire(&app, name, json!({"holder": "owner"})).await;
    let mut waiting = Vec::new();
    for i in 0..n {
        let (task_app, task_name) = (app.clone(), name.to_string());
        waiting.push(tokio::spawn(async move {
            let (app, name) = (task_app, task_name);
            let holder = format!("w{i}");
            let response =
                fair_acquire(&app, &name, json!({"holder": holder, "wait_ms": 20000})).await;
            assert_eq!(response.status(), 201);
            fair_release(&app, &name, &holder).await;
        }));
        wait_for_fair_waiters(&app, name, i + 1).await;
    }
    let mut conn = redis_conn(redis).await;
    reset_command_stats(&mut conn).await;
    fair_release(&app, name, "owner").await;
    for w in waiting {
        w.await.unwrap();
    }
    let calls = script_calls(&mut conn).await as f64;
    calls / n as f64
}

#[tokio::test]
async fn redis_commands_per_handoff_do_not_grow_with_the_queue() {
    let redis = redis();
    let short = scripts_per_handoff(&redis, "short", 4).await;
    let long = scripts_per_handoff(&redis, "long", 24).await;
    eprintln!("scripts per handoff: {short:.2} with 4 waiters, {long:.2} with 24");
    assert!(
        long <= short + 1.0 && long < 5.0,
        "scripts per handoff: {short:.2} with 4 waiters, {long:.2} with 24"
    );
}

#[tokio::test]
async fn fair_locks_reenter_renew_report_and_force_unlock_like_locks() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let first = fair_acquire(&app, "ops", json!({"holder": "h", "lease_ms": 2000})).await;
    assert_eq!(first.status(), 201);
    assert_eq!(
        first.headers()["location"],
        "/fair-locks/ops/holders/h",
        "Location is the hold's URL"
    );
    let again: Value = fair_acquire(&app, "ops", json!({"holder": "h"}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["hold_count"], 2);
    let renewed = app
        .post(
            "/fair-locks/ops/holders/h/heartbeat",
            json!({"lease_ms": 9000}),
        )
        .await;
    assert_eq!(renewed.status(), 200);
    let state = app.get_json("/fair-locks/ops").await;
    assert_eq!(state["locked"], true);
    assert_eq!(state["hold_count"], 2);
    assert!(state["ttl_ms"].as_u64().unwrap() > 8000);
    assert!(state.get("holder").is_none(), "never the holder id");
    // A plain lock of the same name is another object.
    assert_eq!(
        app.acquire("ops", json!({"holder": "other"}))
            .await
            .status(),
        201
    );
    let forced = app.delete_json("/fair-locks/ops").await;
    assert_eq!(forced["released"], true);
    assert_problem(
        app.post("/fair-locks/ops/holders/h/heartbeat", json!({}))
            .await,
        404,
        "not-held",
    )
    .await;
    assert_problem(
        fair_acquire(&app, "bad{name}", json!({})).await,
        400,
        "invalid-name",
    )
    .await;
}

/// Queued waiters (fair lock and rwlock writer) outlive a short Redis
/// restart: the restart loses the holds and the queue, the hub's
/// reconnect makes every waiter look again, and each is granted.
#[tokio::test]
async fn queued_waiters_survive_a_short_redis_restart() {
    let mut redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let kinds = [
        ("/fair-locks/rs/acquire", "/fair-locks/rs"),
        ("/rwlocks/rs/write/acquire", "/rwlocks/rs"),
    ];
    let mut waiting = Vec::new();
    for (acquire, state) in kinds {
        let held = app
            .post(acquire, json!({"holder": "x", "lease_ms": 60000}))
            .await;
        assert_eq!(held.status(), 201, "{acquire}");
        waiting.push(app.spawn_post(acquire, json!({"holder": "w", "wait_ms": 8000})));
        let queued = eventually(Duration::from_secs(3), || async {
            app.get_json(state).await["waiters"] == 1
        })
        .await;
        assert!(queued, "{acquire} waits");
    }
    let started = Instant::now();
    redis.restart().expect("redis restarts");
    for waiter in waiting {
        let response = waiter.await.unwrap();
        assert_eq!(response.status(), 201, "{:?}", response.text().await);
    }
    // Sooner than their own re-check (half the 5 s grace): the reconnect
    // woke them.
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "granted after {took:?}");
}
