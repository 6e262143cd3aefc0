//! Reentrant locks over HTTP.

use std::time::Duration;

use redis::AsyncCommands;
use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn acquire_without_body_returns_a_grant_with_location_and_generated_holder() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let response = app
        .client
        .post(app.url("/locks/orders/acquire"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let location = response.headers()["location"].to_str().unwrap().to_string();
    let grant: serde_json::Value = response.json().await.unwrap();
    let holder = grant["holder"].as_str().unwrap();
    assert_eq!(holder.len(), 32, "128 random bits as hex: {grant}");
    assert_eq!(location, format!("/locks/orders/holders/{holder}"));
    assert_eq!(grant["name"], "orders");
    assert_eq!(grant["hold_count"], 1);
    assert_eq!(grant["lease_ms"], 30000);
    assert_eq!(grant["expires_in_ms"], 30000);
    assert_eq!(grant["heartbeat_interval_ms"], 10000);
    assert!(grant["fencing_token"].as_u64().unwrap() >= 1);
}

#[tokio::test]
async fn empty_body_with_json_content_type_counts_as_omitted() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let response = app
        .client
        .post(app.url("/locks/swagger/acquire"))
        .header("content-type", "application/json")
        .body("")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
}

#[tokio::test]
async fn reentrant_acquire_counts_holds_and_keeps_the_token() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let first = app.must_acquire("re", json!({"holder": "h1"})).await;
    let second = app.must_acquire("re", json!({"holder": "h1"})).await;
    assert_eq!(first["hold_count"], 1);
    assert_eq!(second["hold_count"], 2);
    assert_eq!(first["fencing_token"], second["fencing_token"]);
    assert_eq!(app.state("re").await["hold_count"], 2);

    let r: serde_json::Value = app.release("re", "h1").await.json().await.unwrap();
    assert_eq!(r, json!({"released": false, "hold_count": 1}));
    assert_eq!(app.state("re").await["locked"], true);
    let r: serde_json::Value = app.release("re", "h1").await.json().await.unwrap();
    assert_eq!(r, json!({"released": true, "hold_count": 0}));
    assert_eq!(app.state("re").await["locked"], false);
    assert_problem(app.release("re", "h1").await, 404, "not-held").await;
}

#[tokio::test]
async fn release_all_drops_every_reentrant_hold() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for _ in 0..3 {
        app.must_acquire("all", json!({"holder": "h"})).await;
    }
    let response = app
        .client
        .delete(app.url("/locks/all/holders/h?all=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let r: serde_json::Value = response.json().await.unwrap();
    assert_eq!(r, json!({"released": true, "hold_count": 0}));
    let bad = app
        .client
        .delete(app.url("/locks/all/holders/h?all=maybe"))
        .send()
        .await
        .unwrap();
    assert_problem(bad, 400, "invalid-body").await;
}

#[tokio::test]
async fn acquire_returns_409_while_another_holder_holds_the_lock() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("busy", json!({"holder": "owner", "lease_ms": 5000}))
        .await;
    let response = app.acquire("busy", json!({"holder": "other"})).await;
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let problem = assert_problem(response, 409, "lock-held").await;
    let hint = problem["retry_after_ms"].as_u64().unwrap();
    assert!(hint > 4000 && hint <= 5000, "{problem}");
    assert_eq!(retry_after, hint.div_ceil(1000).max(1));
    assert!(
        !problem.to_string().contains("owner"),
        "409 must not reveal the holder: {problem}"
    );
}

#[tokio::test]
async fn state_never_reveals_the_holder_id() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire(
        "secret",
        json!({"holder": "capability-xyz", "lease_ms": 5000}),
    )
    .await;
    let state = app.state("secret").await;
    assert_eq!(state["locked"], true);
    assert_eq!(state["hold_count"], 1);
    assert!(state["ttl_ms"].as_u64().unwrap() > 4000);
    assert_eq!(state["waiters"], 0);
    assert!(!state.to_string().contains("capability-xyz"), "{state}");
    let metrics = app.metrics().await;
    assert!(!metrics.contains("capability-xyz") && !metrics.contains("secret"));
}

#[tokio::test]
async fn state_of_a_never_locked_name_is_free_with_token_zero() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let state = app.state("fresh").await;
    assert_eq!(
        state,
        json!({"name": "fresh", "locked": false, "hold_count": 0, "ttl_ms": 0, "fencing_token": 0, "waiters": 0, "holds": []})
    );
}

#[tokio::test]
async fn lease_expiry_frees_the_lock() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("lapse", json!({"holder": "a", "lease_ms": 500}))
        .await;
    tokio::time::sleep(Duration::from_millis(650)).await;
    assert_eq!(app.state("lapse").await["locked"], false);
    app.must_acquire("lapse", json!({"holder": "b"})).await;
    assert_problem(
        app.heartbeat("lapse", "a", json!({})).await,
        404,
        "not-held",
    )
    .await;
    assert_problem(app.release("lapse", "a").await, 404, "not-held").await;
}

#[tokio::test]
async fn heartbeat_extends_the_lease() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("hb", json!({"holder": "a", "lease_ms": 600}))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let response = app.heartbeat("hb", "a", json!({"lease_ms": 2000})).await;
    assert_eq!(response.status(), 200);
    let grant: serde_json::Value = response.json().await.unwrap();
    assert_eq!(grant["lease_ms"], 2000);
    assert_eq!(grant["heartbeat_interval_ms"], 666);
    assert_eq!(grant["holder"], "a");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        app.state("hb").await["locked"],
        true,
        "the old 600 ms lease would have lapsed"
    );

    // Without lease_ms, the hold is renewed for the lease it already has.
    let grant: serde_json::Value = app
        .heartbeat("hb", "a", json!({}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(grant["lease_ms"], 2000);
    let ttl = app.state("hb").await["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 1800, "renewed to the full 2000 ms lease, ttl {ttl}");
    // An omitted body works too.
    let bare = app
        .client
        .post(app.url("/locks/hb/holders/a/heartbeat"))
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 200);
}

#[tokio::test]
async fn heartbeat_by_a_stranger_is_not_held_and_does_not_touch_the_lease() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("hb2", json!({"holder": "a", "lease_ms": 1000}))
        .await;
    assert_problem(
        app.heartbeat("hb2", "b", json!({"lease_ms": 60000})).await,
        404,
        "not-held",
    )
    .await;
    assert!(app.state("hb2").await["ttl_ms"].as_u64().unwrap() <= 1000);
}

#[tokio::test]
async fn fencing_tokens_strictly_increase_across_holders_expiry_force_unlock_and_key_deletion() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let mut tokens = Vec::new();
    let mut take = |g: serde_json::Value| tokens.push(g["fencing_token"].as_u64().unwrap());

    // Two holders in turn.
    take(app.must_acquire("fence", json!({"holder": "a"})).await);
    app.release("fence", "a").await;
    take(
        app.must_acquire("fence", json!({"holder": "b", "lease_ms": 500}))
            .await,
    );
    // Expiry.
    tokio::time::sleep(Duration::from_millis(650)).await;
    take(app.must_acquire("fence", json!({"holder": "c"})).await);
    // Force unlock.
    let forced: serde_json::Value = app.delete_json("/locks/fence").await;
    assert_eq!(forced, json!({"released": true}));
    take(app.must_acquire("fence", json!({"holder": "d"})).await);
    // Somebody deletes the lock's key behind our back.
    let mut conn = redis_conn(&redis).await;
    let deleted: i64 = conn.del("latchkey:{fence}:lock").await.unwrap();
    assert_eq!(deleted, 1, "key layout is {{prefix}}{{name}}:lock");
    take(app.must_acquire("fence", json!({"holder": "e"})).await);

    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "tokens {tokens:?}");
    assert_eq!(
        app.state("fence").await["fencing_token"].as_u64(),
        tokens.last().copied()
    );
}

#[tokio::test]
async fn force_unlock_of_a_free_lock_reports_false() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let r: serde_json::Value = app.delete_json("/locks/idle").await;
    assert_eq!(r, json!({"released": false}));
}

#[tokio::test]
async fn key_prefix_setting_is_used_for_every_key() {
    let redis = redis();
    let app = spawn_app(Config {
        key_prefix: "tenant7:".into(),
        ..test_config(&redis)
    })
    .await;
    app.must_acquire("p", json!({"holder": "a"})).await;
    let mut conn = redis_conn(&redis).await;
    let mut keys: Vec<String> = conn.keys("*").await.unwrap();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            "tenant7:{p}:lock".to_string(),
            "tenant7:{p}:lock:fence".to_string()
        ]
    );
}

/// Plain-lock waiters of one instance take turns asking Redis (one baton):
/// when the waiter that asked is granted, the next one does not ask again
/// before the lock is released (a release publishes, and the grant's lease
/// bounds the wait), so each handoff costs the release and the one try
/// that is granted.
#[tokio::test]
async fn a_handoff_between_local_waiters_costs_one_release_and_one_granted_try() {
    let redis = redis();
    let app = std::sync::Arc::new(spawn_app(test_config(&redis)).await);
    app.must_acquire("turns", json!({"holder": "owner"})).await;
    let waiters: u64 = 8;
    let mut tasks = Vec::new();
    for i in 0..waiters {
        let task_app = app.clone();
        tasks.push(tokio::spawn(async move {
            let app = task_app;
            let holder = format!("w{i}");
            let granted = app
                .acquire("turns", json!({"holder": holder, "wait_ms": 20000}))
                .await;
            assert_eq!(granted.status(), 201);
            let released = app.release("turns", &holder).await;
            assert_eq!(released.status(), 200);
        }));
        app.wait_for_waiters("turns", i + 1).await;
    }
    let mut conn = redis_conn(&redis).await;
    reset_command_stats(&mut conn).await;
    let released = app.release("turns", "owner").await;
    assert_eq!(released.status(), 200);
    for task in tasks {
        task.await.unwrap();
    }
    let scripts = script_calls(&mut conn).await;
    // The owner's release, then per waiter a granted try and its release:
    // 1 + 2 × 8. Before, each waiter that took the turn from a granted one
    // asked at once and was refused: 7 more.
    assert_eq!(
        scripts,
        1 + 2 * waiters,
        "scripts run for {waiters} handoffs"
    );
}

/// The waiter that takes the turn from a granted one waits for the
/// release's message; when none comes (the new holder crashed and its
/// lease ran out), it looks by itself at the lease's end and is granted.
#[tokio::test]
async fn the_next_local_waiter_takes_a_lock_whose_new_holder_never_releases() {
    let redis = redis();
    let app = std::sync::Arc::new(spawn_app(test_config(&redis)).await);
    app.must_acquire("crashed", json!({"holder": "owner"}))
        .await;
    let first_app = app.clone();
    let first = tokio::spawn(async move {
        let body = json!({"holder": "first", "wait_ms": 20000, "lease_ms": 1500});
        first_app.acquire("crashed", body).await
    });
    app.wait_for_waiters("crashed", 1).await;
    let second_app = app.clone();
    let second = tokio::spawn(async move {
        let body = json!({"holder": "second", "wait_ms": 20000});
        let started = std::time::Instant::now();
        let response = second_app.acquire("crashed", body).await;
        (response, started.elapsed())
    });
    app.wait_for_waiters("crashed", 2).await;
    let released = app.release("crashed", "owner").await;
    assert_eq!(released.status(), 200);
    // "first" is granted and never releases (its client is gone).
    assert_eq!(first.await.unwrap().status(), 201);
    let (response, took) = second.await.unwrap();
    assert_eq!(response.status(), 201);
    assert!(
        took < Duration::from_millis(5000),
        "granted {took:?} after it asked: not at the first hold's end"
    );
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["holder"], "second");
}
