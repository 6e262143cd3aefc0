//! Who holds it, for read-write locks and semaphores: owner labels in
//! state reads (`holds`, `queued`), in 409s and SSE `waiting` events
//! (`held_by`), nothing of a hold left in Redis once it is gone, never a
//! holder id or session id in a state read; and the rate limiter's
//! acquire validating `owner`.

use std::collections::HashMap;
use std::time::Duration;

use latchkey::config::Config;
use redis::AsyncCommands;
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

use crate::helpers::*;
use crate::semaphores::put;

async fn rw(app: &TestApp, name: &str, mode: &str, body: Value) -> Response {
    app.post(&format!("/rwlocks/{name}/{mode}/acquire"), body)
        .await
}

async fn sem(app: &TestApp, name: &str, body: Value) -> Response {
    app.post(&format!("/semaphores/{name}/acquire"), body).await
}

/// Takes a hold in `mode` and asserts the grant.
async fn take_rw(app: &TestApp, name: &str, mode: &str, body: Value) -> Value {
    granted(rw(app, name, mode, body).await).await
}

/// Takes permits and asserts the grant.
async fn take_sem(app: &TestApp, name: &str, body: Value) -> Value {
    granted(sem(app, name, body).await).await
}

/// Asserts a grant (201) and returns it.
async fn granted(response: Response) -> Value {
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "expected a grant: {body}");
    body
}

/// GET `path` as text, asserting 200; returns the text and its JSON.
async fn state(app: &TestApp, path: &str) -> (String, Value) {
    let response = app.client.get(app.url(path)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap();
    (text, value)
}

/// The holds of a state read, by owner (null owners as "").
fn by_owner(state: &Value) -> HashMap<String, Value> {
    state["holds"]
        .as_array()
        .unwrap_or_else(|| panic!("holds listed: {state}"))
        .iter()
        .map(|h| (h["owner"].as_str().unwrap_or("").to_string(), h.clone()))
        .collect()
}

/// `held_by` as a sorted list (null entries as "").
fn held_by(body: &Value) -> Vec<String> {
    let mut owners: Vec<String> = body["held_by"]
        .as_array()
        .unwrap_or_else(|| panic!("held_by listed: {body}"))
        .iter()
        .map(|o| o.as_str().unwrap_or("").to_string())
        .collect();
    owners.sort();
    owners
}

fn assert_fresh_hold(hold: &Value, lease_ms: u64) {
    let expires = hold["expires_in_ms"].as_u64().expect("expires_in_ms");
    let held_for = hold["held_for_ms"].as_u64().expect("held_for_ms");
    assert!(expires > 0 && expires <= lease_ms, "{hold}");
    assert!(held_for < lease_ms, "{hold}");
}

/// The fields of a hash in Redis (empty when the key is gone).
async fn fields(redis: &latchkey::devredis::RedisServer, key: &str) -> Vec<String> {
    let mut conn = redis_conn(redis).await;
    let all: HashMap<String, String> = conn.hgetall(key).await.unwrap();
    all.into_keys().collect()
}

/// Three holders acquire ("gone" for 300 ms, "freed", "stays"; each
/// labelled with its id); "freed" releases and "gone" expires. Then the
/// state at `object` lists "stays" only, and once a script has run (an
/// acquire by "stays") no field of the hash `key` names the other two.
async fn one_released_one_expired(
    app: &TestApp,
    redis: &latchkey::devredis::RedisServer,
    acquire: &str,
    object: &str,
    key: &str,
) {
    for (holder, lease_ms) in [("gone", 300), ("freed", 30000), ("stays", 30000)] {
        let body = json!({"holder": holder, "owner": holder, "lease_ms": lease_ms});
        granted(app.post(acquire, body).await).await;
    }
    assert!(fields(redis, key).await.iter().any(|f| f.contains("gone")));
    let response = app
        .client
        .delete(app.url(&format!("{object}/holders/freed")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, s) = state(app, object).await;
    let owners: Vec<String> = by_owner(&s).into_keys().collect();
    assert_eq!(owners, vec!["stays".to_string()], "{s}");
    granted(app.post(acquire, json!({"holder": "stays"})).await).await;
    let left = fields(redis, key).await;
    assert!(
        !left
            .iter()
            .any(|f| f.contains("gone") || f.contains("freed")),
        "{left:?}"
    );
}

async fn sse(
    app: &TestApp,
    path: &str,
    body: Value,
) -> tokio::sync::mpsc::UnboundedReceiver<(String, Value)> {
    let response = app
        .client
        .post(app.url(path))
        .header("accept", "text/event-stream")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    sse_events(response)
}

#[tokio::test]
async fn rwlock_state_lists_each_hold_with_its_owner_mode_and_count() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let r1 = json!({"holder": "reader-one", "owner": "web-7 pid 42", "lease_ms": 20000});
    take_rw(&app, "x", "read", r1.clone()).await;
    take_rw(&app, "x", "read", r1).await;
    take_rw(
        &app,
        "x",
        "read",
        json!({"holder": "reader-two", "lease_ms": 20000}),
    )
    .await;
    let (text, s) = state(&app, "/rwlocks/x").await;
    let holds = by_owner(&s);
    assert_eq!(holds.len(), 2, "{s}");
    let one = &holds["web-7 pid 42"];
    assert_eq!(
        (&one["mode"], &one["hold_count"], &one["session"]),
        (&json!("read"), &json!(2), &json!(false))
    );
    assert_fresh_hold(one, 20000);
    let two = &holds[""];
    assert_eq!(two["owner"], Value::Null, "{s}");
    assert_eq!(
        (&two["mode"], &two["hold_count"]),
        (&json!("read"), &json!(1))
    );
    assert_eq!(s["queued"], 0);
    assert!(
        !text.contains("reader-one") && !text.contains("reader-two"),
        "{text}"
    );

    // The write hold of a writer in a session: mode write, session true.
    let created = app.post("/sessions", json!({"ttl_ms": 20000})).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let session = created.json::<Value>().await.unwrap()["session"]
        .as_str()
        .unwrap()
        .to_string();
    let w = json!({"holder": "writer-one", "owner": "cron nightly", "session": session});
    take_rw(&app, "y", "write", w.clone()).await;
    take_rw(&app, "y", "write", w).await;
    let (text, s) = state(&app, "/rwlocks/y").await;
    let holds = by_owner(&s);
    let w = &holds["cron nightly"];
    assert_eq!(
        (&w["mode"], &w["hold_count"], &w["session"]),
        (&json!("write"), &json!(2), &json!(true)),
        "{s}"
    );
    assert_fresh_hold(w, 20000);
    assert!(
        !text.contains(&session) && !text.contains("writer-one"),
        "{text}"
    );
}

#[tokio::test]
async fn rwlock_refusals_name_the_owners_that_block_them() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    take_rw(
        &app,
        "x",
        "read",
        json!({"holder": "a", "owner": "reader A"}),
    )
    .await;
    take_rw(&app, "x", "read", json!({"holder": "b"})).await;
    // A write request is blocked by every reader.
    let problem = assert_problem(
        rw(
            &app,
            "x",
            "write",
            json!({"holder": "w", "owner": "would-be writer"}),
        )
        .await,
        409,
        "lock-held",
    )
    .await;
    assert_eq!(
        held_by(&problem),
        vec!["".to_string(), "reader A".into()],
        "{problem}"
    );

    // A read request is blocked by the writer only (the writer's own read
    // hold, a downgrade, does not block it more).
    take_rw(
        &app,
        "y",
        "write",
        json!({"holder": "w", "owner": "the writer"}),
    )
    .await;
    take_rw(&app, "y", "read", json!({"holder": "w"})).await;
    let problem = assert_problem(
        rw(&app, "y", "read", json!({"holder": "r"})).await,
        409,
        "lock-held",
    )
    .await;
    assert_eq!(
        held_by(&problem),
        vec!["the writer".to_string()],
        "{problem}"
    );

    // The SSE waiting event of a write request names the writer too.
    let mut events = sse(
        &app,
        "/rwlocks/y/write/acquire",
        json!({"holder": "v", "wait_ms": 5000}),
    )
    .await;
    let (name, data) = events.recv().await.expect("a waiting event");
    assert_eq!(name, "waiting");
    assert!(held_by(&data).contains(&"the writer".to_string()), "{data}");
    let (_, data) = {
        let mut read_events = sse(
            &app,
            "/rwlocks/y/read/acquire",
            json!({"holder": "q", "wait_ms": 5000}),
        )
        .await;
        read_events.recv().await.expect("a waiting event")
    };
    assert_eq!(held_by(&data), vec!["the writer".to_string()], "{data}");
}

#[tokio::test]
async fn queued_counts_the_waiters_of_every_instance() {
    let redis = redis();
    let one = spawn_app(test_config(&redis)).await;
    let two = spawn_app(test_config(&redis)).await;
    take_rw(&one, "x", "write", json!({"holder": "w", "owner": "w"})).await;
    let _waiting = two.spawn_post(
        "/rwlocks/x/read/acquire",
        json!({"holder": "r", "wait_ms": 5000}),
    );
    put(&one, "s", 1).await;
    take_sem(&one, "s", json!({"holder": "a"})).await;
    let _also = two.spawn_post(
        "/semaphores/s/acquire",
        json!({"holder": "b", "wait_ms": 5000}),
    );
    for path in ["/rwlocks/x", "/semaphores/s"] {
        let queued = eventually(Duration::from_secs(3), || async {
            let (_, s) = state(&one, path).await;
            s["queued"] == 1 && s["waiters"] == 0
        })
        .await;
        assert!(queued, "{path}: {}", state(&one, path).await.0);
    }
}

#[tokio::test]
async fn a_released_or_expired_rwlock_hold_is_unlisted_and_leaves_nothing_behind() {
    let redis = redis();
    let config = Config {
        min_lease_ms: 100,
        ..test_config(&redis)
    };
    let app = spawn_app(config).await;
    one_released_one_expired(
        &app,
        &redis,
        "/rwlocks/x/read/acquire",
        "/rwlocks/x",
        "latchkey:{x}:rw",
    )
    .await;
    // A write hold's owner goes with it; a force unlock removes all.
    take_rw(
        &app,
        "y",
        "write",
        json!({"holder": "w", "owner": "writer"}),
    )
    .await;
    take_rw(&app, "y", "read", json!({"holder": "w", "owner": "reader"})).await;
    let response = app
        .client
        .delete(app.url("/rwlocks/y/holders/w?mode=write"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let (_, s) = state(&app, "/rwlocks/y").await;
    let owners: Vec<String> = by_owner(&s).into_keys().collect();
    assert_eq!(owners, vec!["reader".to_string()], "{s}");
    let left = fields(&redis, "latchkey:{y}:rw").await;
    let mut conn = redis_conn(&redis).await;
    let all: HashMap<String, String> = conn.hgetall("latchkey:{y}:rw").await.unwrap();
    assert!(!all.values().any(|v| v == "writer"), "{left:?}");
    app.delete_json("/rwlocks/y").await;
    let exists: bool = conn.exists("latchkey:{y}:rw").await.unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn semaphore_state_lists_permit_holders_with_owners() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    put(&app, "s", 5).await;
    let a = json!({"holder": "holder-a", "owner": "worker a", "permits": 2, "lease_ms": 20000});
    take_sem(&app, "s", a).await;
    take_sem(&app, "s", json!({"holder": "holder-b", "lease_ms": 20000})).await;
    let created = app.post("/sessions", json!({"ttl_ms": 20000})).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let session = created.json::<Value>().await.unwrap()["session"]
        .as_str()
        .unwrap()
        .to_string();
    let c = json!({"holder": "holder-c", "owner": "in a session", "session": session});
    take_sem(&app, "s", c).await;
    let (text, s) = state(&app, "/semaphores/s").await;
    let holds = by_owner(&s);
    assert_eq!(holds.len(), 3, "{s}");
    assert_eq!(
        (&holds["worker a"]["permits"], &holds["worker a"]["session"]),
        (&json!(2), &json!(false))
    );
    assert_fresh_hold(&holds["worker a"], 20000);
    assert_eq!(
        (&holds[""]["permits"], &holds[""]["owner"]),
        (&json!(1), &Value::Null)
    );
    assert_eq!(
        (
            &holds["in a session"]["permits"],
            &holds["in a session"]["session"]
        ),
        (&json!(1), &json!(true))
    );
    assert_eq!((&s["available"], &s["queued"]), (&json!(1), &json!(0)));
    for secret in ["holder-a", "holder-b", "holder-c", session.as_str()] {
        assert!(!text.contains(secret), "{text}");
    }

    // The refusal and the waiting event name the holders of permits.
    let problem = assert_problem(
        sem(&app, "s", json!({"permits": 2})).await,
        409,
        "no-permits",
    )
    .await;
    assert_eq!(
        held_by(&problem),
        vec!["".to_string(), "in a session".into(), "worker a".into()],
        "{problem}"
    );
    let mut events = sse(
        &app,
        "/semaphores/s/acquire",
        json!({"permits": 2, "wait_ms": 5000}),
    )
    .await;
    let (name, data) = events.recv().await.expect("a waiting event");
    assert_eq!(name, "waiting");
    assert_eq!(held_by(&data).len(), 3, "{data}");
    assert!(held_by(&data).contains(&"worker a".to_string()), "{data}");
}

/// A holder that asks for more permits than are left is not blocked by its
/// own: `held_by` names only the others.
#[tokio::test]
async fn a_semaphore_refusal_does_not_name_the_requesters_own_hold() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    put(&app, "s", 3).await;
    let a = json!({"holder": "holder-a", "owner": "worker a", "permits": 2, "lease_ms": 20000});
    take_sem(&app, "s", a).await;
    let b = json!({"holder": "holder-b", "owner": "worker b", "lease_ms": 20000});
    take_sem(&app, "s", b).await;
    let more = json!({"holder": "holder-a", "owner": "worker a", "permits": 1});
    let problem = assert_problem(sem(&app, "s", more).await, 409, "no-permits").await;
    assert_eq!(held_by(&problem), vec!["worker b".to_string()], "{problem}");
}

#[tokio::test]
async fn held_by_names_at_most_ten_holders() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    put(&app, "s", 12).await;
    for i in 0..12 {
        take_sem(&app, "s", json!({"owner": format!("owner {i}")})).await;
    }
    let problem = assert_problem(sem(&app, "s", json!({})).await, 409, "no-permits").await;
    assert_eq!(held_by(&problem).len(), 10, "{problem}");
    let (_, s) = state(&app, "/semaphores/s").await;
    assert_eq!(by_owner(&s).len(), 12, "{s}");
}

#[tokio::test]
async fn a_released_or_expired_semaphore_hold_leaves_nothing_behind() {
    let redis = redis();
    let config = Config {
        min_lease_ms: 100,
        ..test_config(&redis)
    };
    let app = spawn_app(config).await;
    put(&app, "s", 5).await;
    let key = "latchkey:{s}:sem:holds";
    one_released_one_expired(&app, &redis, "/semaphores/s/acquire", "/semaphores/s", key).await;
    // A re-grant that names no owner keeps the label; one that does
    // replaces it; the grant time stays.
    let (_, before) = state(&app, "/semaphores/s").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    take_sem(&app, "s", json!({"holder": "stays"})).await;
    let (_, kept) = state(&app, "/semaphores/s").await;
    assert_eq!(by_owner(&kept)["stays"]["permits"], 3, "{kept}");
    take_sem(&app, "s", json!({"holder": "stays", "owner": "renamed"})).await;
    let (_, after) = state(&app, "/semaphores/s").await;
    let hold = &by_owner(&after)["renamed"];
    assert_eq!(hold["permits"], 4, "{after}");
    let held_before = by_owner(&before)["stays"]["held_for_ms"].as_u64().unwrap();
    assert!(
        hold["held_for_ms"].as_u64().unwrap() >= held_before + 50,
        "{before} {after}"
    );
    app.delete_json("/semaphores/s").await;
    assert!(fields(&redis, key).await.is_empty());
}

#[tokio::test]
async fn bad_owners_are_400_on_every_acquire_here() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    put(&app, "s", 1).await;
    let configured = app
        .client
        .put(app.url("/rate-limiters/r"))
        .json(&json!({"rate": 10, "per_ms": 1000}))
        .send()
        .await
        .unwrap();
    assert_eq!(configured.status(), StatusCode::OK);
    let paths = [
        "/rwlocks/x/read/acquire",
        "/rwlocks/x/write/acquire",
        "/semaphores/s/acquire",
        "/rate-limiters/r/acquire",
    ];
    let too_long = "é".repeat(100) + "x";
    for path in paths {
        for bad in [
            json!(""),
            json!(too_long),
            json!("a\nb"),
            json!("tab\there"),
            json!(7),
        ] {
            let response = app.post(path, json!({ "owner": bad })).await;
            assert_problem(response, 400, "invalid-body").await;
        }
    }
    // 200 bytes of UTF-8 are fine.
    let longest = "é".repeat(100);
    let admitted = app
        .post("/rate-limiters/r/acquire", json!({"owner": longest}))
        .await;
    assert_eq!(admitted.status(), StatusCode::OK);
    take_rw(&app, "x", "read", json!({"owner": longest})).await;
    let (_, s) = state(&app, "/rwlocks/x").await;
    assert_eq!(s["holds"][0]["owner"], json!(longest));
}

#[tokio::test]
async fn a_hold_in_a_session_without_a_label_takes_the_sessions() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let created = app
        .post("/sessions", json!({"ttl_ms": 20000, "owner": "batch 12"}))
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let session = created.json::<Value>().await.unwrap()["session"].clone();
    take_rw(&app, "x", "read", json!({ "session": session })).await;
    take_rw(
        &app,
        "x",
        "read",
        json!({"session": session, "holder": "own", "owner": "own label"}),
    )
    .await;
    put(&app, "s", 2).await;
    take_sem(&app, "s", json!({ "session": session })).await;
    let (_, s) = state(&app, "/rwlocks/x").await;
    let holds = by_owner(&s);
    assert_eq!(holds.len(), 2, "{s}");
    assert_eq!(holds["batch 12"]["session"], true, "{s}");
    assert_eq!(holds["own label"]["session"], true, "{s}");
    let (_, s) = state(&app, "/semaphores/s").await;
    assert_eq!(by_owner(&s)["batch 12"]["permits"], 1, "{s}");
}

#[tokio::test]
async fn a_reentry_in_a_session_that_sends_no_owner_keeps_the_holds_own_label() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let created = app
        .post("/sessions", json!({"ttl_ms": 10_000, "owner": "worker 3"}))
        .await;
    assert_eq!(created.status(), 201);
    let session = created.json::<Value>().await.unwrap()["session"]
        .as_str()
        .unwrap()
        .to_string();
    put(&app, "s", 5).await;
    let own = json!({"holder": "h", "session": session, "owner": "step 2"});
    let none = json!({"holder": "h", "session": session});
    take_rw(&app, "x", "read", own.clone()).await;
    take_rw(&app, "x", "read", none.clone()).await;
    take_sem(&app, "s", own).await;
    take_sem(&app, "s", none).await;
    for path in ["/rwlocks/x", "/semaphores/s"] {
        let (_, s) = state(&app, path).await;
        let holds = s["holds"].as_array().unwrap();
        assert_eq!(holds.len(), 1, "{s}");
        assert_eq!(holds[0]["owner"], "step 2", "{path}: {s}");
    }
}
