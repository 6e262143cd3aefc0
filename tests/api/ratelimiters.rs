//! Rate limiters: the GCRA bound and its reach under concurrent clients on
//! two instances, exact `retry_after_ms`, waiters admitted in arrival
//! order at their reserved time (long-poll and SSE), rate changes, delete
//! ending waits, idempotency keys, give-backs, input checks, and O(1)
//! Redis state.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{FutureExt, StreamExt};
use redis::AsyncCommands;
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

use crate::helpers::*;

/// `PUT /rate-limiters/{name}`, asserting 200; returns the status.
pub(crate) async fn configure(app: &TestApp, name: &str, body: Value) -> Value {
    let response = app
        .client
        .put(app.url(&format!("/rate-limiters/{name}")))
        .json(&body)
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::OK, "configure {name}");
    response.json().await.expect("status is JSON")
}

pub(crate) async fn acquire(app: &TestApp, name: &str, body: Value) -> Response {
    app.post(&format!("/rate-limiters/{name}/acquire"), body)
        .await
}

/// Acquires and asserts 200; returns the answer.
pub(crate) async fn admitted(app: &TestApp, name: &str, body: Value) -> Value {
    let response = acquire(app, name, body).await;
    assert_eq!(response.status(), StatusCode::OK, "acquire {name}");
    response.json().await.expect("JSON")
}

/// Acquires and asserts 429 `rate-limited` with a consistent
/// `Retry-After`; returns the problem.
pub(crate) async fn limited(app: &TestApp, name: &str, body: Value) -> Value {
    let response = acquire(app, name, body).await;
    let retry_after: u64 = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After header");
    let problem = assert_problem(response, 429, "rate-limited").await;
    let ms = problem["retry_after_ms"].as_u64().expect("retry_after_ms");
    assert_eq!(retry_after, ms.div_ceil(1000).max(1), "{problem}");
    problem
}

#[tokio::test]
async fn configure_get_and_delete_follow_the_contract() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let status = configure(&app, "api", json!({"rate": 10, "per_ms": 1000})).await;
    assert_eq!(
        status,
        json!({"name": "api", "rate": 10, "per_ms": 1000, "burst": 10, "available": 10}),
        "burst defaults to rate; a new limiter is full"
    );
    assert_eq!(app.get_json("/rate-limiters/api").await, status);
    let grant = admitted(&app, "api", json!({"permits": 3})).await;
    assert_eq!(grant, json!({"permits": 3, "available": 7}));
    let omitted = app
        .client
        .post(app.url("/rate-limiters/api/acquire"))
        .send()
        .await
        .expect("sent");
    assert_eq!(omitted.status(), 200, "the body may be omitted");
    assert_eq!(omitted.json::<Value>().await.unwrap()["permits"], 1);
    assert_eq!(
        app.delete_json("/rate-limiters/api").await,
        json!({"deleted": true})
    );
    let gone = app
        .client
        .get(app.url("/rate-limiters/api"))
        .send()
        .await
        .unwrap();
    assert_problem(gone, 404, "not-found").await;
    let again = app
        .client
        .delete(app.url("/rate-limiters/api"))
        .send()
        .await
        .unwrap();
    assert_problem(again, 404, "not-found").await;
    assert_problem(acquire(&app, "api", json!({})).await, 404, "not-found").await;
}

#[tokio::test]
async fn bad_input_is_400_and_never_500() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let put = |body: Value| {
        app.client
            .put(app.url("/rate-limiters/bad"))
            .json(&body)
            .send()
    };
    for (body, field, maximum) in [
        (json!({"rate": 0, "per_ms": 1000}), "rate", 1_000_000),
        (
            json!({"rate": 1_000_001, "per_ms": 1000}),
            "rate",
            1_000_000,
        ),
        (json!({"rate": -3, "per_ms": 1000}), "rate", 1_000_000),
        (json!({"rate": 1, "per_ms": 0}), "per_ms", 3_600_000),
        (json!({"rate": 1, "per_ms": 3_600_001}), "per_ms", 3_600_000),
        (json!({"rate": 1, "per_ms": 1e30}), "per_ms", 3_600_000),
        (
            json!({"rate": 1, "per_ms": 10, "burst": 0}),
            "burst",
            1_000_000,
        ),
        (
            json!({"rate": 1, "per_ms": 10, "burst": 1_000_001}),
            "burst",
            1_000_000,
        ),
    ] {
        let problem = assert_problem(put(body.clone()).await.unwrap(), 400, "out-of-range").await;
        assert_eq!(problem["field"], field, "{body}");
        assert_eq!(problem["maximum"], maximum, "{body}");
    }
    for body in [
        json!({"rate": 10}),
        json!({"per_ms": 10}),
        json!({}),
        json!({"rate": "10", "per_ms": 10}),
        json!({"rate": 1.5, "per_ms": 10}),
        json!({"rate": 1, "per_ms": 10, "per": 3}),
    ] {
        assert_problem(put(body.clone()).await.unwrap(), 400, "invalid-body").await;
    }
    // The largest configuration is exact and works.
    let big = json!({"rate": 1_000_000, "per_ms": 3_600_000, "burst": 1_000_000});
    assert_eq!(put(big).await.unwrap().status(), 200);
    let smallest_rate = json!({"rate": 1, "per_ms": 3_600_000, "burst": 1_000_000});
    assert_eq!(put(smallest_rate).await.unwrap().status(), 200);
    let grant = admitted(&app, "bad", json!({"permits": 1_000_000})).await;
    assert_eq!(grant, json!({"permits": 1_000_000, "available": 0}));
    let problem = limited(&app, "bad", json!({"permits": 1})).await;
    let retry = problem["retry_after_ms"].as_u64().unwrap();
    assert!(
        (3_599_000..=3_600_000).contains(&retry),
        "one hour per permit, less the ms since the admission: {problem}"
    );

    configure(
        &app,
        "small",
        json!({"rate": 5, "per_ms": 1000, "burst": 3}),
    )
    .await;
    for (permits, maximum) in [(0, 1_000_000), (4, 3), (1_000_001, 1_000_000)] {
        let response = acquire(&app, "small", json!({"permits": permits})).await;
        let problem = assert_problem(response, 400, "out-of-range").await;
        assert_eq!(problem["field"], "permits");
        assert_eq!(problem["maximum"], maximum, "permits {permits}");
    }
    let response = acquire(&app, "small", json!({"wait_ms": 60_001})).await;
    assert_problem(response, 400, "out-of-range").await;
    let response = app
        .client
        .post(app.url("/rate-limiters/small/acquire"))
        .body("permits=1")
        .send()
        .await
        .unwrap();
    assert_problem(response, 415, "unsupported-media-type").await;
}

/// `retry_after_ms` is exact: one acquire sent that long after the 429
/// succeeds, and one sent well before fails (and says the same instant).
/// 3 permits per second make an emission interval of 333⅓ ms: no whole
/// number of µs.
#[tokio::test]
async fn retry_after_ms_is_exactly_when_the_permits_are_available() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    configure(&app, "exact", json!({"rate": 3, "per_ms": 1000})).await;
    admitted(&app, "exact", json!({"permits": 3})).await;
    let sent = Instant::now();
    let first = limited(&app, "exact", json!({"permits": 2})).await;
    let answered = Instant::now();
    let retry = first["retry_after_ms"].as_u64().unwrap();
    assert!((600..=667).contains(&retry), "two permits' time: {first}");
    assert_eq!(first["available"], 0);

    tokio::time::sleep_until((sent + Duration::from_millis(retry - 250)).into()).await;
    let before = Instant::now();
    let early = limited(&app, "exact", json!({"permits": 2})).await;
    let hint = early["retry_after_ms"].as_u64().unwrap();
    let said = before.elapsed() + Duration::from_millis(hint);
    let promised = (sent + Duration::from_millis(retry)).saturating_duration_since(before);
    assert!(
        said.abs_diff(promised) < Duration::from_millis(60),
        "the same instant: {said:?} vs {promised:?}"
    );

    // The hint counts from when Redis answered, before the answer came.
    tokio::time::sleep_until((answered + Duration::from_millis(retry)).into()).await;
    let grant = admitted(&app, "exact", json!({"permits": 2})).await;
    assert_eq!(grant, json!({"permits": 2, "available": 0}));
    // And nothing more: the next permit is 333⅓ ms away.
    let next = limited(&app, "exact", json!({})).await;
    let next = next["retry_after_ms"].as_u64().unwrap();
    assert!((280..=334).contains(&next), "{next}");
}

/// Several clients on two instances, some waiting (reservations), some
/// retrying after `retry_after_ms`, for several seconds: in every window
/// the permits admitted never exceed `burst + rate × window`, and over
/// the run they reach it.
#[tokio::test]
async fn admitted_permits_never_exceed_the_bound_and_reach_it_across_two_instances() {
    let redis = redis();
    let one = Arc::new(spawn_app(test_config(&redis)).await);
    let two = Arc::new(spawn_app(test_config(&redis)).await);
    let (rate, per_ms, burst) = (40u64, 1000u64, 8u64);
    configure(
        &one,
        "bound",
        json!({"rate": rate, "per_ms": per_ms, "burst": burst}),
    )
    .await;
    let started = Instant::now();
    let run = Duration::from_secs(4);
    // (sent, answered, permits) of every admission, on the test's clock.
    let grants: Arc<Mutex<Vec<(f64, f64, u64)>>> = Arc::default();
    let ms = move |at: Instant| at.duration_since(started).as_secs_f64() * 1000.0;
    let mut clients = Vec::new();
    for c in 0..8u64 {
        let app = if c % 2 == 0 { one.clone() } else { two.clone() };
        let grants = grants.clone();
        clients.push(tokio::spawn(async move {
            let permits = 1 + c % 3;
            let waits = c % 4 < 2;
            while started.elapsed() < run {
                let body = match waits {
                    true => json!({"permits": permits, "wait_ms": 1500}),
                    false => json!({"permits": permits}),
                };
                let sent = Instant::now();
                let response = acquire(&app, "bound", body).await;
                let answered = Instant::now();
                match response.status().as_u16() {
                    200 => grants
                        .lock()
                        .unwrap()
                        .push((ms(sent), ms(answered), permits)),
                    429 => {
                        let problem: Value = response.json().await.unwrap();
                        let retry = problem["retry_after_ms"].as_u64().unwrap();
                        tokio::time::sleep(Duration::from_millis(retry.min(300))).await;
                    }
                    other => panic!("unexpected {other}"),
                }
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    let grants = grants.lock().unwrap().clone();
    // Every admission happened on Redis between its request's sending and
    // its answer: those inside [from, to] were admitted in that window.
    let per = |window: f64| burst as f64 + rate as f64 * window / per_ms as f64;
    let mut worst = f64::MIN;
    for &(from, _, _) in &grants {
        for &(_, to, _) in &grants {
            if to < from {
                continue;
            }
            let inside: u64 = grants
                .iter()
                .filter(|(s, a, _)| *s >= from && *a <= to)
                .map(|g| g.2)
                .sum();
            assert!(
                inside as f64 <= per(to - from),
                "{inside} permits in [{from:.1}, {to:.1}] ms: more than {:.1}",
                per(to - from)
            );
            worst = worst.max(inside as f64 - per(to - from));
        }
    }
    // Reach: from the first sending to the last answer, the clients were
    // always asking, so the permits admitted come close to the bound.
    let total: u64 = grants.iter().map(|g| g.2).sum();
    let span = grants.iter().map(|g| g.1).fold(0.0, f64::max);
    let bound = per(span);
    assert!(
        total as f64 >= 0.9 * bound - 3.0,
        "only {total} permits admitted in {span:.0} ms; the bound is {bound:.1}"
    );
    eprintln!("{total} permits in {span:.0} ms (bound {bound:.1}; closest window {worst:.1})");
}

/// Waiters are admitted in the order they arrived, each at its reserved
/// time: a large request queued before small ones is served first, across
/// instances.
#[tokio::test]
async fn waiters_are_served_in_arrival_order_so_a_large_request_is_not_starved() {
    let redis = redis();
    let one = spawn_app(test_config(&redis)).await;
    let two = spawn_app(test_config(&redis)).await;
    // One permit every 100 ms, 4 at once.
    configure(
        &one,
        "order",
        json!({"rate": 10, "per_ms": 1000, "burst": 4}),
    )
    .await;
    admitted(&one, "order", json!({"permits": 4})).await;
    let started = Instant::now();
    let large = one.spawn_post(
        "/rate-limiters/order/acquire",
        json!({"permits": 4, "wait_ms": 5000}),
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut small = Vec::new();
    for i in 0..4 {
        let app = if i % 2 == 0 { &two } else { &one };
        let request = app
            .client
            .post(app.url("/rate-limiters/order/acquire"))
            .json(&json!({"permits": 1, "wait_ms": 5000}));
        small.push(tokio::spawn(async move {
            let response = request.send().await.expect("sent");
            (response.status(), Instant::now())
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let large = large.await.unwrap();
    let large_at = started.elapsed();
    assert_eq!(large.status(), 200);
    assert_eq!(large.json::<Value>().await.unwrap()["permits"], 4);
    assert!(
        (Duration::from_millis(330)..Duration::from_millis(700)).contains(&large_at),
        "4 permits' time (400 ms): {large_at:?}"
    );
    let mut previous = large_at;
    for (i, waiter) in small.into_iter().enumerate() {
        let (status, at) = waiter.await.unwrap();
        let at = at.duration_since(started);
        assert_eq!(status, 200, "small waiter {i}");
        assert!(
            at > previous,
            "small waiter {i} at {at:?}, before {previous:?}"
        );
        let due = Duration::from_millis(400 + 100 * (i as u64 + 1));
        assert!(
            at + Duration::from_millis(60) >= due && at < due + Duration::from_millis(300),
            "small waiter {i} due at {due:?}, answered at {at:?}"
        );
        previous = at;
    }
}

#[tokio::test]
async fn sse_reports_waiting_then_acquired_at_the_reserved_time() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    configure(
        &app,
        "stream",
        json!({"rate": 2, "per_ms": 1000, "burst": 1}),
    )
    .await;
    admitted(&app, "stream", json!({})).await;
    let started = Instant::now();
    let response = app
        .client
        .post(app.url("/rate-limiters/stream/acquire"))
        .header("accept", "text/event-stream")
        .json(&json!({"wait_ms": 3000}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let events = read_sse(response).await;
    let elapsed = started.elapsed();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"waiting"), "{events:?}");
    assert_eq!(names.last(), Some(&"acquired"), "{events:?}");
    assert_eq!(names.iter().filter(|n| **n != "waiting").count(), 1);
    let retry = events[0].1["retry_after_ms"].as_u64().unwrap();
    assert!((400..=500).contains(&retry), "{events:?}");
    assert_eq!(
        events.last().unwrap().1,
        json!({"permits": 1, "available": 0})
    );
    assert!(
        elapsed >= Duration::from_millis(430) && elapsed < Duration::from_millis(900),
        "{elapsed:?}"
    );
    // Too late for wait_ms: the stream ends at once with `timeout`.
    let response = app
        .client
        .post(app.url("/rate-limiters/stream/acquire"))
        .header("accept", "text/event-stream")
        .json(&json!({"permits": 1, "wait_ms": 100}))
        .send()
        .await
        .unwrap();
    let events = read_sse(response).await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[1].0, "timeout");
    assert_eq!(events[1].1["type"], "/problems/rate-limited");
}

/// A change of rate applies at once, and keeps the permits available.
#[tokio::test]
async fn a_rate_change_applies_at_once_and_keeps_what_is_available() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    configure(&app, "change", json!({"rate": 10, "per_ms": 1000})).await;
    admitted(&app, "change", json!({"permits": 4})).await;
    let status = configure(&app, "change", json!({"rate": 20, "per_ms": 1000})).await;
    assert_eq!(status["available"], 6, "{status}");
    assert_eq!(status["burst"], 20);
    // Slow: 1 permit per 10 s, at most 1. The 6 available become 1.
    configure(
        &app,
        "change",
        json!({"rate": 1, "per_ms": 10000, "burst": 1}),
    )
    .await;
    admitted(&app, "change", json!({})).await;
    let slow = limited(&app, "change", json!({})).await;
    assert!(slow["retry_after_ms"].as_u64().unwrap() > 9500, "{slow}");
    // Fast: 100 permits a second, 1 at once: 10 ms apart, from now on.
    configure(
        &app,
        "change",
        json!({"rate": 100, "per_ms": 1000, "burst": 1}),
    )
    .await;
    let started = Instant::now();
    let mut admitted_permits = 0;
    while started.elapsed() < Duration::from_secs(1) {
        let response = acquire(&app, "change", json!({"wait_ms": 100})).await;
        assert_eq!(response.status(), 200);
        admitted_permits += 1;
    }
    assert!(
        (80..=102).contains(&admitted_permits),
        "{admitted_permits} permits in 1 s at 100/s"
    );
}

/// A PUT of the configuration a limiter already has hands out nothing:
/// clients that PUT "to make sure" before every acquire get no permit
/// from it. 2000 identical PUTs on a drained limiter (a permit every 333⅓
/// or 142⁶⁄₇ µs: no whole number of µs) leave its schedule exactly where
/// it was, and PUTs that alternate between two configurations of the same
/// interval never move it earlier.
#[tokio::test]
async fn a_put_of_the_same_configuration_hands_out_no_permit() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let mut conn = redis_conn(&redis).await;
    // The schedule: tat (µs) and frac (ticks of 1/rate µs).
    let schedule = |conn: &mut redis::aio::MultiplexedConnection, name: &str| {
        let mut conn = conn.clone();
        let key = format!("latchkey:{{{name}}}:rl");
        async move {
            let at: (u64, u64) = redis::cmd("HMGET")
                .arg(&key)
                .arg("tat")
                .arg("frac")
                .query_async(&mut conn)
                .await
                .unwrap();
            at
        }
    };
    for rate in [3u64, 7] {
        let name = format!("same-{rate}");
        let config = json!({"rate": rate, "per_ms": 1, "burst": 1_000_000});
        configure(&app, &name, config.clone()).await;
        admitted(&app, &name, json!({"permits": 1_000_000})).await;
        let before = schedule(&mut conn, &name).await;
        futures_util::stream::iter(0..2000)
            .for_each_concurrent(8, |_| configure(&app, &name, config.clone()).map(drop))
            .await;
        let after = schedule(&mut conn, &name).await;
        assert_eq!(after, before, "rate {rate}: (tat µs, frac ticks) moved");
    }
    // 3 per ms and 6 per 2 ms: the same interval, ticks of ⅓ and ⅙ µs.
    let (three, six) = (
        json!({"rate": 3, "per_ms": 1, "burst": 1_000_000}),
        json!({"rate": 6, "per_ms": 2, "burst": 1_000_000}),
    );
    configure(&app, "alternating", three.clone()).await;
    admitted(&app, "alternating", json!({"permits": 1_000_000})).await;
    let before = schedule(&mut conn, "alternating").await;
    for _ in 0..250 {
        configure(&app, "alternating", six.clone()).await;
        configure(&app, "alternating", three.clone()).await;
    }
    let after = schedule(&mut conn, "alternating").await;
    assert!(after >= before, "moved earlier: {before:?} then {after:?}");
}

/// Deleting a limiter ends its waits with 404 on every instance, at once.
#[tokio::test]
async fn delete_ends_waiters_with_404_at_once() {
    let redis = redis();
    let one = spawn_app(test_config(&redis)).await;
    let two = spawn_app(test_config(&redis)).await;
    configure(
        &one,
        "gone",
        json!({"rate": 1, "per_ms": 20000, "burst": 1}),
    )
    .await;
    admitted(&one, "gone", json!({})).await;
    let poll = two.spawn_post("/rate-limiters/gone/acquire", json!({"wait_ms": 30000}));
    // The poll reserves the next permit (due in 20 s) first.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stream = one
        .client
        .post(one.url("/rate-limiters/gone/acquire"))
        .header("accept", "text/event-stream")
        .json(&json!({"wait_ms": 50000}))
        .send()
        .await
        .unwrap();
    let mut events = sse_events(stream);
    let (first, data) = events.recv().await.expect("a waiting event");
    assert_eq!(first, "waiting");
    assert!(data["retry_after_ms"].as_u64().unwrap() > 30_000, "{data}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let deleted = Instant::now();
    assert_eq!(
        one.delete_json("/rate-limiters/gone").await,
        json!({"deleted": true})
    );
    assert_problem(poll.await.unwrap(), 404, "not-found").await;
    let (last, data) = events.recv().await.expect("a final event");
    assert_eq!(last, "error");
    assert_eq!(data["type"], "/problems/not-found");
    assert!(events.recv().await.is_none(), "the stream ends");
    assert!(
        deleted.elapsed() < Duration::from_secs(2),
        "{:?}",
        deleted.elapsed()
    );
    // A limiter created again under the name does not honour them.
    configure(
        &one,
        "gone",
        json!({"rate": 1, "per_ms": 20000, "burst": 1}),
    )
    .await;
    assert_eq!(one.get_json("/rate-limiters/gone").await["available"], 1);
}

#[tokio::test]
async fn an_idempotency_key_counts_once_and_a_retry_waits_for_the_same_reservation() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let keyed = |key: &str, body: Value| {
        app.client
            .post(app.url("/rate-limiters/idem/acquire"))
            .header("idempotency-key", key)
            .json(&body)
            .send()
    };
    configure(
        &app,
        "idem",
        json!({"rate": 1, "per_ms": 60000, "burst": 2}),
    )
    .await;
    let first = keyed("job-1", json!({})).await.unwrap();
    assert_eq!(first.json::<Value>().await.unwrap()["available"], 1);
    for _ in 0..3 {
        let retry = keyed("job-1", json!({})).await.unwrap();
        assert_eq!(retry.status(), 200, "replayed");
    }
    assert_eq!(app.get_json("/rate-limiters/idem").await["available"], 1);
    assert_eq!(keyed("job-2", json!({})).await.unwrap().status(), 200);
    assert_problem(
        keyed("job-3", json!({})).await.unwrap(),
        429,
        "rate-limited",
    )
    .await;
    let bad = keyed("", json!({})).await.unwrap();
    assert_problem(bad, 400, "invalid-body").await;

    // A keyed waiter whose client gives up keeps its reservation: the
    // retry waits for the same time, and only one permit is taken.
    configure(&app, "idem", json!({"rate": 2, "per_ms": 1000, "burst": 1})).await;
    admitted(&app, "idem", json!({"wait_ms": 1000})).await;
    let started = Instant::now();
    let gave_up = tokio::time::timeout(
        Duration::from_millis(150),
        keyed("job-4", json!({"wait_ms": 2000})),
    )
    .await;
    assert!(gave_up.is_err(), "the first request waits");
    let retry = keyed("job-4", json!({"wait_ms": 2000})).await.unwrap();
    assert_eq!(retry.status(), 200);
    let at = started.elapsed();
    assert!(
        at >= Duration::from_millis(420) && at < Duration::from_millis(800),
        "the first request's time (500 ms): {at:?}"
    );
    // The next permit is one interval after that one, not two.
    let next = limited(&app, "idem", json!({})).await;
    assert!(next["retry_after_ms"].as_u64().unwrap() <= 500, "{next}");
    let mut conn = redis_conn(&redis).await;
    let ttl: i64 = conn.pttl("latchkey:{idem}:rl:idem:job-4").await.unwrap();
    assert!(
        ttl > 590_000 && ttl <= 600_000,
        "the record lives 10 minutes: {ttl}"
    );
}

/// A waiter whose client leaves gives its reservation back (when nothing
/// was reserved after it): the permits are admitted to the next comer.
/// The same for a key's bucket.
#[tokio::test]
async fn a_waiter_that_leaves_gives_its_reservation_back() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for (name, body) in [("leave", json!({})), ("leave-key", json!({"key": "k"}))] {
        configure(&app, name, json!({"rate": 1, "per_ms": 1000, "burst": 1})).await;
        admitted(&app, name, body.clone()).await;
        let started = Instant::now();
        let mut waits = body.clone();
        waits["wait_ms"] = json!(5000);
        let gave_up =
            tokio::time::timeout(Duration::from_millis(200), acquire(&app, name, waits)).await;
        assert!(gave_up.is_err(), "{name}: it waited");
        // Its permit was due at 1 s; without the give-back the next would
        // be at 2 s.
        tokio::time::sleep_until((started + Duration::from_millis(1100)).into()).await;
        let grant = admitted(&app, name, body).await;
        assert_eq!(grant["available"], 0, "{name}");
    }
}

/// A key's waiter admitted at its reserved time settles the reservation:
/// the key's bucket forgets it as its last acquire (no give-back can take
/// it back any more), and keeps its lag and its expiry.
#[tokio::test]
async fn a_keys_settled_reservation_is_no_longer_its_buckets_last_acquire() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let mut conn = redis_conn(&redis).await;
    configure(
        &app,
        "settle",
        json!({"rate": 1, "per_ms": 1000, "burst": 1}),
    )
    .await;
    admitted(&app, "settle", json!({"key": "k"})).await;
    let bucket = crate::ratelimit_keys::key_bucket(&mut conn, "k").await;
    let fields = |conn: &mut redis::aio::MultiplexedConnection| {
        let (mut conn, bucket) = (conn.clone(), bucket.clone());
        async move {
            let value: String = conn.get(&bucket).await.unwrap();
            value.split(' ').map(str::to_string).collect::<Vec<_>>()
        }
    };
    let first = fields(&mut conn).await;
    assert_eq!(
        first.len(),
        8,
        "rate per_ms burst gen ver tat frac last: {first:?}"
    );
    let waiter = app.spawn_post(
        "/rate-limiters/settle/acquire",
        json!({"key": "k", "wait_ms": 5000}),
    );
    // The reservation, for ~1 s from the first acquire, is the last
    // acquire as soon as it is made.
    let reserved_in_time = eventually(Duration::from_millis(800), || {
        let (fields, mut conn, first) = (&fields, conn.clone(), first.clone());
        async move {
            let now = fields(&mut conn).await;
            now.len() == 8 && now[7] != first[7]
        }
    })
    .await;
    assert!(reserved_in_time, "the reservation is the last acquire");
    let reserved = fields(&mut conn).await;
    assert_eq!(reserved.len(), 8, "{reserved:?}");
    let answer = waiter.await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK, "{:?}", answer.text().await);
    let settled = fields(&mut conn).await;
    assert_eq!(settled, reserved[..7], "only `last` is gone");
    let ttl: i64 = conn.pttl(&bucket).await.unwrap();
    assert!(
        (1..=1002).contains(&ttl),
        "it still expires once full: {ttl}"
    );
}

/// However many acquires, a limiter is one hash of a few fields: no key
/// or field grows with traffic (the idempotency records of keyed
/// acquires expire by themselves).
#[tokio::test]
async fn no_redis_key_grows_with_traffic() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    configure(
        &app,
        "steady",
        json!({"rate": 7, "per_ms": 1000, "burst": 5}),
    )
    .await;
    admitted(&app, "steady", json!({})).await;
    let mut conn = redis_conn(&redis).await;
    let usage = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move {
            let bytes: i64 = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg("latchkey:{steady}:rl")
                .query_async(&mut conn)
                .await
                .unwrap();
            bytes
        }
    };
    let before = usage(&mut conn).await;
    let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
    for i in 0..600 {
        let body = match i % 50 {
            0 => json!({"wait_ms": 200}),
            _ => json!({"permits": 1 + i % 3}),
        };
        let status = acquire(&app, "steady", body).await.status().as_u16();
        *statuses.entry(status).or_default() += 1;
    }
    assert!(statuses[&200] > 5 && statuses[&429] > 100, "{statuses:?}");
    let keys: Vec<String> = conn.keys("*").await.unwrap();
    assert_eq!(keys, ["latchkey:{steady}:rl"]);
    let fields: u64 = conn.hlen("latchkey:{steady}:rl").await.unwrap();
    assert!(fields <= 8, "{fields} fields");
    let after = usage(&mut conn).await;
    assert!(after <= before + 64, "{before} bytes, then {after}");
}

/// A waiter's check at its reserved time that fails on a stalled Redis
/// (its outcome unknown, though it changes nothing) must not give the
/// reservation back while the wait goes on: the waiter is still admitted
/// at its time, so a give-back would let another request take the same
/// permit, beyond the bound.
#[tokio::test]
async fn a_failed_check_at_the_reserved_time_does_not_give_the_reservation_back() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    configure(
        &app,
        "stall",
        json!({"rate": 1, "per_ms": 2000, "burst": 1}),
    )
    .await;
    admitted(&app, "stall", json!({})).await;
    // Reserved for ~2 s from now; Redis stalls across that time, longer
    // than the response timeout (1 s), so the check at the slot fails.
    let waiter = app.spawn_post("/rate-limiters/stall/acquire", json!({"wait_ms": 8000}));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    redis.pause();
    tokio::time::sleep(Duration::from_millis(1800)).await;
    redis.resume();
    let answer = waiter.await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK, "{:?}", answer.text().await);
    // Give a (wrong) background give-back time to land; the next permit
    // is due ~4 s after the first, so a request now must be refused.
    tokio::time::sleep(Duration::from_millis(300)).await;
    limited(&app, "stall", json!({})).await;
}

/// A waiter whose checks at its reserved time fail on a stalled Redis
/// (each one's outcome unknown, each starting a background give-back that
/// retries with backoff) and that is then admitted keeps its permits: no
/// later retry of those give-backs returns them to the limiter. Checked
/// against the bound itself: the permits admitted since the first one
/// never exceed `burst + rate × elapsed / per_ms`.
#[tokio::test]
async fn a_reservation_admitted_after_a_stall_is_never_given_back_later() {
    let redis = redis();
    let app = spawn_app(Config {
        redis_response_timeout_ms: 300,
        ..test_config(&redis)
    })
    .await;
    // One permit every 200 ms, 100 at once.
    let (rate, per_ms, burst) = (100u64, 20_000u64, 100u64);
    configure(
        &app,
        "stalled",
        json!({"rate": rate, "per_ms": per_ms, "burst": burst}),
    )
    .await;
    let started = Instant::now();
    admitted(&app, "stalled", json!({"permits": burst})).await;
    // 15 permits, due 3 s after the first admission.
    let waiter = app.spawn_post(
        "/rate-limiters/stalled/acquire",
        json!({"permits": 15, "wait_ms": 20000}),
    );
    // Redis stalls from before the reserved time until ~9 s: the checks at
    // the slot time out (300 ms), and the give-back started by the first
    // one (failing from 3.3 s, backing off 0.1, 0.2, ... 3.2 s) is asleep
    // when Redis comes back, and tries again only after the waiter was
    // admitted.
    tokio::time::sleep_until((started + Duration::from_millis(2600)).into()).await;
    let mut conn = redis_conn(&redis).await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(6400)
        .arg("ALL")
        .query_async(&mut conn)
        .await
        .unwrap();
    let answer = waiter.await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK, "{:?}", answer.text().await);
    // Look until the limiter would be full again even without a give-back
    // (23 s), while any give-back still retrying would land.
    while started.elapsed() < Duration::from_secs(14) {
        let available = app.get_json("/rate-limiters/stalled").await["available"]
            .as_u64()
            .unwrap();
        let elapsed_ms = started.elapsed().as_millis() as u64;
        let bound = burst + rate * elapsed_ms / per_ms;
        assert!(
            burst + 15 + available <= bound,
            "{} permits admitted or available at {elapsed_ms} ms: more than {bound}",
            burst + 15 + available
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A retried acquire with the same `Idempotency-Key` counts once and
/// replays the first answer exactly, its `available` too (as a latch's
/// count-down does), whatever was taken since; for a reservation, the
/// answer given at its time.
#[tokio::test]
async fn a_retry_with_the_same_idempotency_key_replays_the_first_answer() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let keyed = |name: &str, key: &str, body: Value| {
        app.client
            .post(app.url(&format!("/rate-limiters/{name}/acquire")))
            .header("idempotency-key", key)
            .json(&body)
            .send()
    };
    let answer = |response: Response| async move {
        assert_eq!(response.status(), StatusCode::OK);
        response.json::<Value>().await.unwrap()
    };
    configure(
        &app,
        "replay",
        json!({"rate": 10, "per_ms": 60000, "burst": 10}),
    )
    .await;
    let first = answer(keyed("replay", "k1", json!({"permits": 2})).await.unwrap()).await;
    assert_eq!(first, json!({"permits": 2, "available": 8}));
    admitted(&app, "replay", json!({"permits": 3})).await;
    for _ in 0..2 {
        let retry = answer(keyed("replay", "k1", json!({"permits": 2})).await.unwrap()).await;
        assert_eq!(retry, first, "the first answer, replayed");
    }
    assert_eq!(app.get_json("/rate-limiters/replay").await["available"], 5);

    // A reservation's answer comes at its time; a retry after it replays
    // that answer, though the limiter has refilled since.
    configure(
        &app,
        "later",
        json!({"rate": 10, "per_ms": 1000, "burst": 1}),
    )
    .await;
    admitted(&app, "later", json!({})).await;
    let first = answer(
        keyed("later", "k2", json!({"wait_ms": 1000}))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(first, json!({"permits": 1, "available": 0}));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.get_json("/rate-limiters/later").await["available"], 1);
    let retry = answer(
        keyed("later", "k2", json!({"wait_ms": 1000}))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(retry, first, "the first answer, replayed");
}

/// Permits that waiters reserved stay owed across a slowdown and back: a
/// PUT to a much slower rate (an operator "pausing" a limiter: one permit
/// an hour) and a PUT back to the first configuration must not shorten
/// what is owed, or new requests are admitted alongside the reserved
/// waiters beyond `burst + rate × elapsed / per_ms`.
#[tokio::test]
#[ignore = "defect: rl_set.lua caps owed time at one day at the new rate, so a slowdown forgets permits owed to waiters and a PUT back hands them out again"]
async fn a_slowdown_and_back_keeps_what_waiters_reserved_owed() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let config = json!({"rate": 100, "per_ms": 1000, "burst": 100});
    configure(&app, "pause", config.clone()).await;
    let started = Instant::now();
    admitted(&app, "pause", json!({"permits": 100})).await;
    // Three waiters reserve 100 permits each, due at +1, +2 and +3 s.
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            app.spawn_post(
                "/rate-limiters/pause/acquire",
                json!({"permits": 100, "wait_ms": 5000}),
            )
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(app.get_json("/rate-limiters/pause").await["available"], 0);
    configure(
        &app,
        "pause",
        json!({"rate": 1, "per_ms": 3_600_000, "burst": 1}),
    )
    .await;
    configure(&app, "pause", config).await;
    // At +1.5 s the first waiter took its 100; 200 more are owed.
    tokio::time::sleep_until((started + Duration::from_millis(1500)).into()).await;
    let available = app.get_json("/rate-limiters/pause").await["available"]
        .as_u64()
        .unwrap();
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let bound = 100 + 100 * elapsed_ms / 1000;
    assert!(
        200 + available <= bound,
        "{} permits admitted or available at {elapsed_ms} ms: more than {bound}",
        200 + available
    );
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap().status(), StatusCode::OK);
    }
}
