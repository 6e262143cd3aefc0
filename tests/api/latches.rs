//! Count-down latches (`/latches`): set, count down, read, delete, wait
//! (long-poll and SSE) across two instances, expiry, idempotent
//! count-downs, and the cost of releasing many waiters.

use std::time::{Duration, Instant};

use reqwest::Response;
use serde_json::{Value, json};

use crate::helpers::*;

async fn set(app: &TestApp, name: &str, body: Value) -> Response {
    app.client
        .put(app.url(&format!("/latches/{name}")))
        .json(&body)
        .send()
        .await
        .expect("sent")
}

async fn must_set(app: &TestApp, name: &str, count: u64) {
    let response = set(app, name, json!({ "count": count })).await;
    assert_eq!(response.status(), 201, "set {name}");
}

async fn count_down(app: &TestApp, name: &str, body: Value, key: Option<&str>) -> Response {
    let mut request = app
        .client
        .post(app.url(&format!("/latches/{name}/count-down")))
        .json(&body);
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request.send().await.expect("sent")
}

/// Counts down by 1 without a key and returns the 200 body.
async fn must_count_down(app: &TestApp, name: &str) -> Value {
    let response = count_down(app, name, json!({}), None).await;
    assert_eq!(response.status(), 200, "count-down {name}");
    response.json().await.expect("JSON")
}

async fn wait(app: &TestApp, name: &str, wait_ms: u64) -> Response {
    app.client
        .get(app.url(&format!("/latches/{name}/wait?wait_ms={wait_ms}")))
        .send()
        .await
        .expect("sent")
}

/// A wait on `app` in the background: its status, body and duration.
fn spawn_wait(
    app: &TestApp,
    name: &str,
    wait_ms: u64,
) -> tokio::task::JoinHandle<(u16, Value, Duration)> {
    let request = app
        .client
        .get(app.url(&format!("/latches/{name}/wait?wait_ms={wait_ms}")));
    tokio::spawn(async move {
        let started = Instant::now();
        let response = request.send().await.expect("sent");
        let status = response.status().as_u16();
        let body = response.json().await.expect("JSON");
        (status, body, started.elapsed())
    })
}

fn sse_wait(app: &TestApp, name: &str, wait_ms: u64) -> reqwest::RequestBuilder {
    app.client
        .get(app.url(&format!("/latches/{name}/wait?wait_ms={wait_ms}")))
        .header("accept", "text/event-stream")
}

/// How many state reads of a latch this instance made (0 before its
/// first: the series appears with it).
async fn latch_reads(app: &TestApp) -> f64 {
    app.metric_or_zero("latchkey_script_duration_seconds_count{script=\"latch_state\"}")
        .await
}

/// Waits until `app` counts `n` open waits, all past their first read.
async fn until_waiting(app: &TestApp, n: u64, reads_before: f64) {
    let settled = eventually(Duration::from_secs(10), || async {
        app.metric("latchkey_waiters").await == n as f64
            && latch_reads(app).await >= reads_before + n as f64
    })
    .await;
    assert!(settled, "expected {n} waiter(s) past their first read");
}

async fn total_commands(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("total_commands_processed")
}

#[tokio::test]
async fn set_answers_201_and_setting_a_closed_latch_is_409_latch_exists() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let response = set(&app, "job", json!({"count": 3})).await;
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body, json!({"name": "job", "count": 3, "open": false}));

    let problem = assert_problem(
        set(&app, "job", json!({"count": 5})).await,
        409,
        "latch-exists",
    )
    .await;
    assert!(
        problem["detail"].as_str().unwrap().contains('3'),
        "{problem}"
    );
    // The count was left alone.
    let state = app.get_json("/latches/job").await;
    assert_eq!(state, json!({"name": "job", "count": 3, "open": false}));

    // Still 409 after a count-down (count 2 > 0).
    must_count_down(&app, "job").await;
    assert_problem(
        set(&app, "job", json!({"count": 1})).await,
        409,
        "latch-exists",
    )
    .await;
}

#[tokio::test]
async fn a_latch_that_opened_can_be_set_again() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    must_set(&app, "again", 2).await;
    assert_eq!(
        must_count_down(&app, "again").await,
        json!({"count": 1, "open": false})
    );
    assert_eq!(
        must_count_down(&app, "again").await,
        json!({"count": 0, "open": true})
    );
    assert_eq!(
        app.get_json("/latches/again").await,
        json!({"name": "again", "count": 0, "open": true})
    );
    let response = set(&app, "again", json!({"count": 7})).await;
    assert_eq!(response.status(), 201);
    assert_eq!(
        app.get_json("/latches/again").await,
        json!({"name": "again", "count": 7, "open": false})
    );
}

#[tokio::test]
async fn count_down_stops_at_zero_and_a_missing_or_opened_latch_is_404() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    assert_problem(
        count_down(&app, "never", json!({}), None).await,
        404,
        "not-found",
    )
    .await;

    must_set(&app, "floor", 3).await;
    let response = count_down(&app, "floor", json!({"by": 2}), None).await;
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"count": 1, "open": false})
    );
    // By more than is left: 0, never below.
    let response = count_down(&app, "floor", json!({"by": 10}), None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"count": 0, "open": true})
    );
    // It opened: no such latch any more.
    assert_problem(
        count_down(&app, "floor", json!({}), None).await,
        404,
        "not-found",
    )
    .await;
    let mut conn = redis_conn(&redis).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*floor*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(keys.is_empty(), "an open latch leaves no key: {keys:?}");
}

#[tokio::test]
async fn a_missing_latch_reads_open_with_count_0_and_its_wait_answers_at_once() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    assert_eq!(
        app.get_json("/latches/nothing").await,
        json!({"name": "nothing", "count": 0, "open": true})
    );
    let started = Instant::now();
    let response = wait(&app, "nothing", 10_000).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"count": 0, "open": true})
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    // With wait_ms 0 (the default) a closed latch answers its state.
    must_set(&app, "closed", 4).await;
    let response = app
        .client
        .get(app.url("/latches/closed/wait"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"count": 4, "open": false})
    );
}

#[tokio::test]
async fn a_long_poll_on_one_instance_is_released_at_once_by_a_count_down_on_another() {
    let redis = redis();
    let a = spawn_app(test_config(&redis)).await;
    let b = spawn_app(test_config(&redis)).await;
    must_set(&a, "gate", 2).await;
    let reads = latch_reads(&b).await;
    let waiter = spawn_wait(&b, "gate", 20_000);
    until_waiting(&b, 1, reads).await;
    must_count_down(&a, "gate").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "count 1 left: still waiting");
    let opened = Instant::now();
    assert_eq!(
        must_count_down(&a, "gate").await,
        json!({"count": 0, "open": true})
    );
    let (status, body, _) = waiter.await.unwrap();
    let after = opened.elapsed();
    assert_eq!(status, 200);
    assert_eq!(body, json!({"count": 0, "open": true}));
    assert!(
        after < Duration::from_secs(1),
        "released {after:?} after the count-down"
    );
    assert_eq!(b.metric("latchkey_waiters").await, 0.0);
    assert_eq!(
        b.metric("latchkey_acquisitions_total{outcome=\"opened\",primitive=\"latch\"}")
            .await,
        1.0
    );
}

#[tokio::test]
async fn a_wait_that_times_out_answers_200_with_the_count() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    must_set(&app, "slow", 3).await;
    must_count_down(&app, "slow").await;
    let started = Instant::now();
    let response = wait(&app, "slow", 600).await;
    let waited = started.elapsed();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"count": 2, "open": false})
    );
    assert!(
        waited >= Duration::from_millis(550) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    assert_eq!(
        app.metric("latchkey_acquisitions_total{outcome=\"timeout\",primitive=\"latch\"}")
            .await,
        1.0
    );
}

#[tokio::test]
async fn wait_ms_beyond_max_wait_ms_or_not_a_number_is_400() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    must_set(&app, "w", 1).await;
    let problem = assert_problem(wait(&app, "w", 60_001).await, 400, "out-of-range").await;
    assert_eq!(problem["field"], "wait_ms");
    for bad in ["-1", "abc", "1.5"] {
        let response = app
            .client
            .get(app.url(&format!("/latches/w/wait?wait_ms={bad}")))
            .send()
            .await
            .unwrap();
        let slug = if bad == "-1" {
            "out-of-range"
        } else {
            "invalid-body"
        };
        assert_problem(response, 400, slug).await;
    }
    let response = app
        .client
        .get(app.url("/latches/a%20b/wait"))
        .send()
        .await
        .unwrap();
    assert_problem(response, 400, "invalid-name").await;
}

#[tokio::test]
async fn a_latch_opens_when_its_ttl_passes_and_waiters_see_it_without_a_message() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let response = set(&app, "short", json!({"count": 5, "ttl_ms": 1000})).await;
    assert_eq!(response.status(), 201);
    let mut conn = redis_conn(&redis).await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg("latchkey:{short}:latch")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 900 && ttl <= 1000, "a Redis TTL: {ttl}");

    // A waiter is released by the expiry itself (no message is sent):
    // it looks again when the latch's life ends.
    let started = Instant::now();
    let response = wait(&app, "short", 10_000).await;
    let waited = started.elapsed();
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"count": 0, "open": true})
    );
    assert!(
        waited >= Duration::from_millis(800) && waited < Duration::from_millis(2500),
        "released after {waited:?}"
    );
    assert_eq!(
        app.get_json("/latches/short").await,
        json!({"name": "short", "count": 0, "open": true})
    );
    assert_problem(
        count_down(&app, "short", json!({}), None).await,
        404,
        "not-found",
    )
    .await;
}

#[tokio::test]
async fn sse_reports_the_count_on_every_change_then_open() {
    let redis = redis();
    let a = spawn_app(test_config(&redis)).await;
    let b = spawn_app(test_config(&redis)).await;
    must_set(&a, "stream", 3).await;
    let response = sse_wait(&b, "stream", 20_000).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert_eq!(response.headers()["x-accel-buffering"], "no");
    let mut events = sse_events(response);
    let first = events.recv().await.expect("a first event");
    assert_eq!(
        first,
        ("count".to_string(), json!({"count": 3, "open": false}))
    );
    for left in [2, 1] {
        must_count_down(&a, "stream").await;
        let event = tokio::time::timeout(Duration::from_secs(2), events.recv())
            .await
            .expect("an event per change")
            .expect("the stream is open");
        assert_eq!(
            event,
            ("count".to_string(), json!({"count": left, "open": false}))
        );
    }
    must_count_down(&a, "stream").await;
    let mut rest = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(2), events.recv())
        .await
        .expect("the stream ends")
    {
        rest.push(event);
    }
    assert_eq!(
        rest,
        vec![("open".to_string(), json!({"count": 0, "open": true}))]
    );
}

#[tokio::test]
async fn sse_times_out_with_the_latch_state_as_data() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    must_set(&app, "sse-t", 2).await;
    let events = read_sse(sse_wait(&app, "sse-t", 500).send().await.unwrap()).await;
    assert_eq!(
        events,
        vec![
            ("count".to_string(), json!({"count": 2, "open": false})),
            ("timeout".to_string(), json!({"count": 2, "open": false})),
        ]
    );
    // Open already: a single `open` event.
    let events = read_sse(sse_wait(&app, "none", 500).send().await.unwrap()).await;
    assert_eq!(
        events,
        vec![("open".to_string(), json!({"count": 0, "open": true}))]
    );
}

#[tokio::test]
async fn deleting_a_latch_releases_its_waiters() {
    let redis = redis();
    let a = spawn_app(test_config(&redis)).await;
    let b = spawn_app(test_config(&redis)).await;
    must_set(&a, "gone", 10).await;
    let reads = latch_reads(&b).await;
    let long_poll = spawn_wait(&b, "gone", 20_000);
    let stream = sse_wait(&b, "gone", 20_000).send().await.unwrap();
    let stream = tokio::spawn(read_sse(stream));
    until_waiting(&b, 2, reads).await;
    let deleted = Instant::now();
    assert_eq!(
        a.delete_json("/latches/gone").await,
        json!({"deleted": true})
    );
    let (status, body, _) = long_poll.await.unwrap();
    assert_eq!((status, body), (200, json!({"count": 0, "open": true})));
    let events = stream.await.unwrap();
    assert_eq!(
        events.last(),
        Some(&("open".to_string(), json!({"count": 0, "open": true})))
    );
    assert!(deleted.elapsed() < Duration::from_secs(1));
    assert_eq!(
        a.delete_json("/latches/gone").await,
        json!({"deleted": false})
    );
    assert_problem(
        count_down(&a, "gone", json!({}), None).await,
        404,
        "not-found",
    )
    .await;
}

#[tokio::test]
async fn racing_retries_with_one_idempotency_key_count_down_once() {
    let redis = redis();
    let a = spawn_app(test_config(&redis)).await;
    let b = spawn_app(test_config(&redis)).await;
    must_set(&a, "idem", 10).await;
    let mut retries = Vec::new();
    for i in 0..20 {
        let app = if i % 2 == 0 { &a } else { &b };
        let request = app
            .client
            .post(app.url("/latches/idem/count-down"))
            .header("idempotency-key", "job-7f3a")
            .json(&json!({"by": 2}));
        retries.push(tokio::spawn(async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }));
    }
    let mut replies = Vec::new();
    for retry in retries {
        replies.push(retry.await.unwrap());
    }
    let first = replies[0].clone();
    assert_eq!(first.0, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&first.1).unwrap(),
        json!({"count": 8, "open": false})
    );
    assert!(replies.iter().all(|r| *r == first), "{replies:?}");
    assert_eq!(a.get_json("/latches/idem").await["count"], 8);

    // Another key counts again; the first key still replays its answer.
    let response = count_down(&b, "idem", json!({}), Some("job-8")).await;
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"count": 7, "open": false})
    );
    let response = count_down(&a, "idem", json!({"by": 2}), Some("job-7f3a")).await;
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"count": 8, "open": false})
    );
    assert_eq!(a.get_json("/latches/idem").await["count"], 7);

    // The record lives 10 minutes on Redis's clock.
    let mut conn = redis_conn(&redis).await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg("latchkey:{idem}:latch:idem:job-7f3a")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 590_000 && ttl <= 600_000, "{ttl}");

    // A key whose count-down found no latch is not remembered.
    assert_problem(
        count_down(&a, "later", json!({}), Some("k1")).await,
        404,
        "not-found",
    )
    .await;
    must_set(&a, "later", 2).await;
    let response = count_down(&a, "later", json!({}), Some("k1")).await;
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"count": 1, "open": false})
    );
}

#[tokio::test]
async fn one_count_down_releases_many_waiters_without_a_read_per_waiter() {
    const WAITERS: u64 = 50;
    let redis = redis();
    let a = spawn_app(test_config(&redis)).await;
    let b = spawn_app(test_config(&redis)).await;
    must_set(&a, "fan", 2).await;
    let reads = latch_reads(&b).await;
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| spawn_wait(&b, "fan", 20_000))
        .collect();
    until_waiting(&b, WAITERS, reads).await;
    let mut conn = redis_conn(&redis).await;

    // A count-down that leaves the latch closed: the waiters learn the new
    // count from the message, and stay.
    let reads = latch_reads(&b).await;
    let commands = total_commands(&mut conn).await;
    must_count_down(&a, "fan").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(waiters.iter().all(|w| !w.is_finished()), "count 1 left");

    // The last count-down releases all of them.
    let opened = Instant::now();
    must_count_down(&a, "fan").await;
    for waiter in waiters {
        let (status, body, _) = waiter.await.unwrap();
        assert_eq!((status, body), (200, json!({"count": 0, "open": true})));
    }
    let released_in = opened.elapsed();
    let spent = total_commands(&mut conn).await - commands;
    let read = latch_reads(&b).await - reads;
    assert_eq!(read, 0.0, "waiters answer from the message: no state read");
    // Two count-down scripts (a handful of commands each) and the two INFO
    // calls; a read per waiter would be 50 or more.
    assert!(
        spent < 20,
        "{spent} Redis commands for two count-downs and {WAITERS} waiters"
    );
    assert!(released_in < Duration::from_secs(2), "{released_in:?}");
    assert_eq!(b.metric("latchkey_waiters").await, 0.0);
}

#[tokio::test]
async fn after_a_pubsub_reconnect_one_read_serves_every_waiter_of_an_instance() {
    const WAITERS: u64 = 20;
    let redis = redis();
    let a = spawn_app(test_config(&redis)).await;
    let b = spawn_app(test_config(&redis)).await;
    must_set(&a, "lost", 1).await;
    let reads = latch_reads(&b).await;
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| spawn_wait(&b, "lost", 20_000))
        .collect();
    until_waiting(&b, WAITERS, reads).await;
    let reads = latch_reads(&b).await;

    // Cut b's subscription (a has no waiter, so its subscriber connection
    // is subscribed to nothing and is no pub/sub client), and open the
    // latch while it may be away: its message can be lost, the reconnect
    // must make up for it (well before the 15 s safety re-check).
    let mut conn = redis_conn(&redis).await;
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(killed, 1);
    let opened = Instant::now();
    must_count_down(&a, "lost").await;
    for waiter in waiters {
        let (status, body, _) = waiter.await.unwrap();
        assert_eq!((status, body), (200, json!({"count": 0, "open": true})));
    }
    assert!(
        opened.elapsed() < Duration::from_secs(3),
        "{:?}",
        opened.elapsed()
    );
    // The disconnect and the reconnect each call for a look: one read for
    // the group each time, not one per waiter.
    let read = latch_reads(&b).await - reads;
    assert!(read <= 3.0, "{read} state reads for {WAITERS} waiters");
}

#[tokio::test]
async fn bad_latch_requests_are_problems() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    assert_problem(
        set(&app, "a%20b", json!({"count": 1})).await,
        400,
        "invalid-name",
    )
    .await;
    assert_problem(
        set(&app, "{x}", json!({"count": 1})).await,
        400,
        "invalid-name",
    )
    .await;
    for (body, slug, field) in [
        (json!({"count": 0}), "out-of-range", Some("count")),
        (json!({"count": -3}), "out-of-range", Some("count")),
        (
            json!({"count": 1_000_000_001u64}),
            "out-of-range",
            Some("count"),
        ),
        (
            json!({"count": 2, "ttl_ms": 999}),
            "out-of-range",
            Some("ttl_ms"),
        ),
        (
            json!({"count": 2, "ttl_ms": 604_800_001u64}),
            "out-of-range",
            Some("ttl_ms"),
        ),
        (json!({"count": 1.5}), "invalid-body", None),
        (json!({"count": "3"}), "invalid-body", None),
        (json!({"ttl_ms": 5000}), "invalid-body", None),
        (json!({"count": 1, "extra": true}), "invalid-body", None),
    ] {
        let problem = assert_problem(set(&app, "bad", body.clone()).await, 400, slug).await;
        if let Some(field) = field {
            assert_eq!(problem["field"], field, "{body}");
        }
    }
    // An omitted body has no count.
    let response = app
        .client
        .put(app.url("/latches/bad"))
        .send()
        .await
        .unwrap();
    assert_problem(response, 400, "invalid-body").await;
    // Not JSON.
    let response = app
        .client
        .put(app.url("/latches/bad"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("count=3")
        .send()
        .await
        .unwrap();
    assert_problem(response, 415, "unsupported-media-type").await;
    assert_eq!(
        app.get_json("/latches/bad").await["open"],
        true,
        "nothing was set"
    );

    must_set(&app, "bad", 5).await;
    for by in [json!(0), json!(-1), json!(1_000_000_001u64)] {
        let response = count_down(&app, "bad", json!({ "by": by }), None).await;
        let problem = assert_problem(response, 400, "out-of-range").await;
        assert_eq!(problem["field"], "by");
    }
    let too_long = "k".repeat(256);
    for key in [too_long.as_str(), "has space", ""] {
        let response = count_down(&app, "bad", json!({}), Some(key)).await;
        assert_problem(response, 400, "invalid-body").await;
    }
    let response = app
        .client
        .post(app.url("/latches/bad/count-down"))
        .header("content-type", "text/plain")
        .body("{\"by\": 1}")
        .send()
        .await
        .unwrap();
    assert_problem(response, 415, "unsupported-media-type").await;
    assert_eq!(
        app.get_json("/latches/bad").await["count"],
        5,
        "nothing counted"
    );
    let response = app
        .client
        .patch(app.url("/latches/bad"))
        .send()
        .await
        .unwrap();
    assert_problem(response, 405, "method-not-allowed").await;
}

/// A full instance (every waiter slot taken) still answers a wait on a
/// latch that is already open: only a request that must wait needs a slot.
#[tokio::test]
async fn a_full_instance_still_answers_a_wait_on_an_open_latch() {
    let redis = redis();
    let app = spawn_app(Config {
        max_waiters: 1,
        ..test_config(&redis)
    })
    .await;
    must_set(&app, "closed", 1).await;
    let parked = spawn_wait(&app, "closed", 5000);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let response = wait(&app, "never-set", 1000).await;
    assert_eq!(response.status(), 200, "an open latch needs no waiter slot");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body, json!({"count": 0, "open": true}));
    // A wait that would have to wait still gets 429.
    must_set(&app, "other", 1).await;
    assert_problem(wait(&app, "other", 1000).await, 429, "too-many-waiters").await;
    must_count_down(&app, "closed").await;
    let (status, _, _) = parked.await.unwrap();
    assert_eq!(status, 200);
}
