//! Who holds it: owner labels in state reads (`holds`), in refusals
//! (`held_by` in 409s and SSE `waiting` events), and `queued` — for locks,
//! fair locks, multi-locks, RedLock and sessions (docs/src/who-holds-it.md).
//! No state read or refusal ever shows a holder id or a session id.

use std::time::Duration;

use latchkey::devredis::RedisServer;
use reqwest::Response;
use serde_json::{Value, json};

use crate::helpers::*;

const OWNER: &str = "web-7 pid 4242 POST /orders/42";

/// A POST asking for Server-Sent Events.
async fn post_sse(app: &TestApp, path: &str, body: Value) -> Response {
    app.client
        .post(app.url(path))
        .header("accept", "text/event-stream")
        .json(&body)
        .send()
        .await
        .expect("sent")
}

/// A GET's status and body text.
async fn get_text(app: &TestApp, path: &str) -> String {
    let response = app.client.get(app.url(path)).send().await.expect("sent");
    assert_eq!(response.status(), 200, "GET {path}");
    response.text().await.expect("a body")
}

/// Asserts that none of `secrets` appears in `body`.
fn reveals_none(body: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(!body.contains(secret), "{secret} appears in {body}");
    }
}

/// The only hold of a state read.
fn only_hold(state: &Value) -> &Value {
    let holds = state["holds"].as_array().expect("holds is a list");
    assert_eq!(holds.len(), 1, "one hold: {state}");
    &holds[0]
}

/// A refused try (409 with `held_by`), then an SSE request that waits
/// `wait_ms` and ends with a timeout: returns the 409's body and the SSE
/// events.
async fn refused_both_ways(
    app: &TestApp,
    path: &str,
    body: Value,
) -> (Value, Vec<(String, Value)>) {
    let refused = assert_problem(app.post(path, body.clone()).await, 409, "lock-held").await;
    let mut waiting = body;
    waiting["wait_ms"] = json!(300);
    let events = read_sse(post_sse(app, path, waiting).await).await;
    (refused, events)
}

/// Asserts that the only hold's `held_for_ms` grew by at least `ms`
/// between two state reads.
fn held_longer(first: &Value, later: &Value, ms: u64) {
    let before = only_hold(first)["held_for_ms"].as_u64().unwrap();
    let after = only_hold(later)["held_for_ms"].as_u64().unwrap();
    assert!(
        after >= before + ms,
        "held_for_ms grows: {before} then {after}"
    );
}

/// A main Redis and three RedLock nodes, and the configuration using them.
fn redlock_deployment() -> (RedisServer, Vec<RedisServer>, Config) {
    let main = redis();
    let nodes: Vec<RedisServer> = (0..3).map(|_| redis()).collect();
    let config = Config {
        redlock_nodes: nodes.iter().map(RedisServer::url).collect(),
        ..test_config(&main)
    };
    (main, nodes, config)
}

/// The first `waiting` event's data.
fn first_waiting(events: &[(String, Value)]) -> &Value {
    &events
        .iter()
        .find(|(name, _)| name == "waiting")
        .unwrap_or_else(|| panic!("a waiting event in {events:?}"))
        .1
}

#[tokio::test]
async fn a_lock_shows_its_holds_owner_lease_and_age_and_refusals_name_it() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let free = app.state("orders").await;
    assert_eq!(free["holds"], json!([]), "free: no holds");
    assert!(free.get("queued").is_none(), "plain locks keep no queue");

    app.must_acquire(
        "orders",
        json!({"holder": "secret-holder-1", "lease_ms": 5000, "owner": OWNER}),
    )
    .await;
    let first = app.state("orders").await;
    let hold = only_hold(&first);
    assert_eq!(hold["owner"], OWNER);
    assert_eq!(hold["session"], false);
    assert_eq!(hold["hold_count"], 1);
    assert!(hold["expires_in_ms"].as_u64().unwrap() <= 5000, "{hold}");
    assert!(hold.get("mode").is_none() && hold.get("permits").is_none());
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A re-entry without an owner keeps the label and the grant time.
    app.must_acquire(
        "orders",
        json!({"holder": "secret-holder-1", "lease_ms": 5000}),
    )
    .await;
    let text = get_text(&app, "/locks/orders").await;
    reveals_none(&text, &["secret-holder-1"]);
    let later: Value = serde_json::from_str(&text).unwrap();
    let hold = only_hold(&later);
    assert_eq!(hold["owner"], OWNER);
    assert_eq!(hold["hold_count"], 2);
    held_longer(&first, &later, 250);
    // A re-entry with an owner replaces the label.
    app.must_acquire(
        "orders",
        json!({"holder": "secret-holder-1", "owner": "web-7 retry"}),
    )
    .await;
    assert_eq!(
        only_hold(&app.state("orders").await)["owner"],
        "web-7 retry"
    );

    let (refused, events) = refused_both_ways(
        &app,
        "/locks/orders/acquire",
        json!({"holder": "secret-holder-2"}),
    )
    .await;
    assert_eq!(refused["held_by"], json!(["web-7 retry"]));
    assert_eq!(first_waiting(&events)["held_by"], json!(["web-7 retry"]));
    let (last, data) = events.last().unwrap();
    assert_eq!(last, "timeout");
    assert_eq!(data["held_by"], json!(["web-7 retry"]));
    reveals_none(&format!("{refused} {events:?}"), &["secret-holder-1"]);

    // A hold without an owner: null, in state and in refusals.
    app.must_acquire("plain", json!({"holder": "secret-holder-3"}))
        .await;
    assert_eq!(only_hold(&app.state("plain").await)["owner"], Value::Null);
    let refused = assert_problem(
        app.acquire("plain", json!({"holder": "other"})).await,
        409,
        "lock-held",
    )
    .await;
    assert_eq!(refused["held_by"], json!([null]));
    let metrics = app.metrics().await;
    reveals_none(&metrics, &[OWNER, "web-7", "secret-holder"]);
}

#[tokio::test]
async fn a_fair_lock_shows_its_owner_and_counts_waiters_queued_on_every_instance() {
    let redis = redis();
    let a = spawn_app(test_config(&redis)).await;
    let b = spawn_app(test_config(&redis)).await;
    let acquire = "/fair-locks/jobs/acquire";
    let taken = a
        .post(
            acquire,
            json!({"holder": "secret-holder-1", "lease_ms": 10_000, "owner": "cron nightly-export"}),
        )
        .await;
    assert_eq!(taken.status(), 201);
    let state = a.get_json("/fair-locks/jobs").await;
    assert_eq!(only_hold(&state)["owner"], "cron nightly-export");
    assert_eq!(only_hold(&state)["hold_count"], 1);
    assert_eq!(state["queued"], 0);

    // A waiter on the other instance: queued counts it, waiters (this
    // instance's) does not.
    let waiter = b.spawn_post(acquire, json!({"holder": "secret-waiter", "wait_ms": 5000}));
    let queued = eventually(Duration::from_secs(3), || async {
        a.get_json("/fair-locks/jobs").await["queued"] == 1
    })
    .await;
    assert!(queued, "the other instance's waiter is queued");
    let text = get_text(&a, "/fair-locks/jobs").await;
    reveals_none(&text, &["secret-holder-1", "secret-waiter"]);
    let state: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(state["waiters"], 0, "no waiter on this instance: {state}");

    let (refused, events) =
        refused_both_ways(&a, acquire, json!({"holder": "secret-holder-2"})).await;
    assert_eq!(refused["held_by"], json!(["cron nightly-export"]));
    assert_eq!(
        first_waiting(&events)["held_by"],
        json!(["cron nightly-export"])
    );
    reveals_none(
        &format!("{refused} {events:?}"),
        &["secret-holder-1", "secret-waiter"],
    );

    let released = a
        .client
        .delete(a.url("/fair-locks/jobs/holders/secret-holder-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(released.status(), 200);
    assert_eq!(waiter.await.unwrap().status(), 201);
    let state = a.get_json("/fair-locks/jobs").await;
    assert_eq!(
        only_hold(&state)["owner"],
        Value::Null,
        "the waiter sent none"
    );
    // The SSE long-poll that timed out keeps its place for the queue
    // grace; the waiter granted has left the queue.
    assert_eq!(state["queued"], 1);
}

#[tokio::test]
async fn each_lock_of_a_multi_lock_records_its_owner_and_refusals_name_the_blockers() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let taken = app
        .post(
            "/multilocks/acquire",
            json!({"names": ["a", "b"], "holder": "secret-holder-1", "owner": "batch 7"}),
        )
        .await;
    assert_eq!(taken.status(), 201);
    for name in ["a", "b"] {
        let text = get_text(&app, &format!("/locks/{name}")).await;
        reveals_none(&text, &["secret-holder-1"]);
        let state: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(only_hold(&state)["owner"], "batch 7", "{name}");
    }
    app.must_acquire(
        "c",
        json!({"holder": "secret-holder-2", "owner": "single c"}),
    )
    .await;

    let (refused, events) = refused_both_ways(
        &app,
        "/multilocks/acquire",
        json!({"names": ["b", "c", "d"], "holder": "secret-holder-3"}),
    )
    .await;
    assert_eq!(refused["blocked_by"], json!(["b", "c"]));
    assert_eq!(refused["held_by"], json!(["batch 7", "single c"]));
    let waiting = first_waiting(&events);
    assert_eq!(waiting["held_by"], json!(["batch 7", "single c"]));
    reveals_none(
        &format!("{refused} {events:?}"),
        &["secret-holder-1", "secret-holder-2"],
    );
    // A single lock blocked by the multi-lock names it too.
    let refused = assert_problem(
        app.acquire("a", json!({"holder": "other"})).await,
        409,
        "lock-held",
    )
    .await;
    assert_eq!(refused["held_by"], json!(["batch 7"]));
}

#[tokio::test]
async fn a_redlock_shows_the_hold_its_nodes_agree_on_and_refusals_name_its_owner() {
    let (_main, _nodes, config) = redlock_deployment();
    let app = spawn_app(config).await;
    let free = app.get_json("/redlocks/report").await;
    assert_eq!(free["holds"], json!([]));
    let taken = app
        .post(
            "/redlocks/report/acquire",
            json!({"holder": "secret-holder-1", "lease_ms": 5000, "owner": OWNER}),
        )
        .await;
    assert_eq!(taken.status(), 201);
    let first = app.get_json("/redlocks/report").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let text = get_text(&app, "/redlocks/report").await;
    reveals_none(&text, &["secret-holder-1"]);
    let state: Value = serde_json::from_str(&text).unwrap();
    let hold = only_hold(&state);
    assert_eq!(hold["owner"], OWNER);
    assert_eq!(hold["session"], false);
    assert_eq!(hold["hold_count"], 1);
    assert!(hold["expires_in_ms"].as_u64().unwrap() <= 5000, "{hold}");
    held_longer(&first, &state, 250);

    let (refused, events) = refused_both_ways(
        &app,
        "/redlocks/report/acquire",
        json!({"holder": "secret-holder-2"}),
    )
    .await;
    assert_eq!(refused["held_by"], json!([OWNER]), "each owner once");
    assert_eq!(first_waiting(&events)["held_by"], json!([OWNER]));
    reveals_none(&format!("{refused} {events:?}"), &["secret-holder-1"]);
}

#[tokio::test]
async fn a_session_keeps_its_owner_and_lends_it_to_holds_that_send_none() {
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
    let state = app.get_json(&format!("/sessions/{session}")).await;
    assert_eq!(state["owner"], "worker 3");
    let plain = app.post("/sessions", json!({})).await;
    let plain = plain.json::<Value>().await.unwrap()["session"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        app.get_json(&format!("/sessions/{plain}")).await["owner"],
        Value::Null
    );

    // Without its own owner, a hold in the session takes the session's;
    // with one, its own.
    app.must_acquire(
        "x",
        json!({"holder": "secret-holder-1", "session": session}),
    )
    .await;
    app.must_acquire(
        "y",
        json!({"holder": "secret-holder-1", "session": session, "owner": "step 2"}),
    )
    .await;
    let fair = app
        .post(
            "/fair-locks/z/acquire",
            json!({"holder": "secret-holder-1", "session": session}),
        )
        .await;
    assert_eq!(fair.status(), 201);
    for (path, owner) in [
        ("/locks/x", "worker 3"),
        ("/locks/y", "step 2"),
        ("/fair-locks/z", "worker 3"),
    ] {
        let text = get_text(&app, path).await;
        reveals_none(&text, &["secret-holder-1", &session]);
        let state: Value = serde_json::from_str(&text).unwrap();
        let hold = only_hold(&state);
        assert_eq!(hold["owner"], owner, "{path}");
        assert_eq!(hold["session"], true, "{path}");
        assert!(hold["expires_in_ms"].as_u64().unwrap() <= 10_000);
    }

    let (refused, events) = refused_both_ways(
        &app,
        "/locks/x/acquire",
        json!({"holder": "secret-holder-2"}),
    )
    .await;
    assert_eq!(refused["held_by"], json!(["worker 3"]));
    assert_eq!(first_waiting(&events)["held_by"], json!(["worker 3"]));
    reveals_none(
        &format!("{refused} {events:?}"),
        &["secret-holder-1", &session],
    );
    // A hold outside any session says so.
    app.must_acquire("w", json!({"owner": "direct"})).await;
    assert_eq!(only_hold(&app.state("w").await)["session"], false);
}

#[tokio::test]
async fn owners_longer_than_200_bytes_or_with_control_characters_are_refused() {
    let (_main, _nodes, config) = redlock_deployment();
    let app = spawn_app(config).await;
    let long = "x".repeat(201);
    let routes: [(&str, Value); 5] = [
        ("/locks/o/acquire", json!({})),
        ("/fair-locks/o/acquire", json!({})),
        ("/multilocks/acquire", json!({"names": ["m"]})),
        ("/redlocks/o/acquire", json!({})),
        ("/sessions", json!({})),
    ];
    for (path, body) in routes {
        // Invisible characters that would reorder or hide the text around
        // them where the label is shown: a right-to-left override, a
        // zero-width space.
        let hidden = ["web-7 \u{202E}ssap", "web\u{200B}-7"];
        for bad in [long.as_str(), "web-7\nPOST", "tab\there", ""]
            .into_iter()
            .chain(hidden)
        {
            let mut body = body.clone();
            body["owner"] = json!(bad);
            let problem = assert_problem(app.post(path, body).await, 400, "invalid-body").await;
            let detail = problem["detail"].as_str().unwrap();
            assert!(detail.contains("owner"), "{path}: {detail}");
        }
        // 200 bytes (of 2-byte characters) is the most.
        let mut body = body.clone();
        body["owner"] = json!("é".repeat(100));
        assert_eq!(app.post(path, body).await.status(), 201, "{path}");
    }
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
    app.must_acquire(
        "y",
        json!({"holder": "secret-holder-1", "session": session, "owner": "step 2"}),
    )
    .await;
    // A re-entry that sends none keeps the label (docs/src/who-holds-it.md).
    let again = app
        .must_acquire(
            "y",
            json!({"holder": "secret-holder-1", "session": session}),
        )
        .await;
    assert_eq!(again["hold_count"], 2);
    let state = app.state("y").await;
    assert_eq!(only_hold(&state)["owner"], "step 2", "{state}");
}
