//! Blocking acquires: long-poll, SSE, wake-ups across instances,
//! disconnects and mutual exclusion.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn a_waiter_on_a_second_instance_is_woken_by_release_long_before_the_lease_ends() {
    let redis = redis();
    let a = spawn_app(test_config(&redis)).await;
    let b = spawn_app(test_config(&redis)).await;
    a.must_acquire("handoff", json!({"holder": "first", "lease_ms": 30000}))
        .await;

    let waiter = tokio::spawn({
        let client = b.client.clone();
        let url = b.url("/locks/handoff/acquire");
        async move {
            let started = Instant::now();
            let r = client
                .post(url)
                .json(&json!({"holder": "second", "wait_ms": 20000}))
                .send()
                .await
                .unwrap();
            (r.status(), started.elapsed())
        }
    });
    // Let the waiter settle into its wait on instance b.
    b.wait_for_waiters("handoff", 1).await;
    let released_at = Instant::now();
    assert_eq!(a.release("handoff", "first").await.status(), 200);
    let (status, _) = waiter.await.unwrap();
    let woken_after = released_at.elapsed();
    assert_eq!(status, 201);
    assert!(
        woken_after < Duration::from_secs(2),
        "woken after {woken_after:?}, lease was 30 s"
    );
    assert_eq!(b.state("handoff").await["waiters"], 0);
}

#[tokio::test]
async fn a_waiter_wins_when_the_holders_lease_lapses_without_a_release() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("crashed", json!({"holder": "dead", "lease_ms": 800}))
        .await;
    let started = Instant::now();
    let response = app
        .acquire("crashed", json!({"holder": "alive", "wait_ms": 5000}))
        .await;
    let waited = started.elapsed();
    assert_eq!(response.status(), 201);
    assert!(
        waited >= Duration::from_millis(600),
        "granted after {waited:?}, before the lease lapsed?"
    );
    assert!(
        waited < Duration::from_millis(2500),
        "granted only after {waited:?}"
    );
}

#[tokio::test]
async fn long_poll_times_out_with_409_and_an_aged_retry_hint() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("slow", json!({"holder": "a", "lease_ms": 10000}))
        .await;
    let started = Instant::now();
    let response = app
        .acquire("slow", json!({"holder": "b", "wait_ms": 700}))
        .await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(650) && waited < Duration::from_millis(2500),
        "{waited:?}"
    );
    let problem = assert_problem(response, 409, "lock-held").await;
    let hint = problem["retry_after_ms"].as_u64().unwrap();
    assert!(
        hint <= 9400 && hint > 8000,
        "hint aged by the wait: {problem}"
    );
}

#[tokio::test]
async fn sse_reports_waiting_then_acquired() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("sse", json!({"holder": "a", "lease_ms": 30000}))
        .await;
    let response = app
        .client
        .post(app.url("/locks/sse/acquire"))
        .header("accept", "text/event-stream")
        .json(&json!({"holder": "b", "wait_ms": 10000}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert_eq!(response.headers()["x-accel-buffering"], "no");
    let reader = tokio::spawn(read_sse(response));
    app.wait_for_waiters("sse", 1).await;
    app.release("sse", "a").await;
    let events = reader.await.unwrap();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"waiting"), "{events:?}");
    assert_eq!(names.last(), Some(&"acquired"), "{events:?}");
    assert!(
        names[..names.len() - 1].iter().all(|n| *n == "waiting"),
        "{events:?}"
    );
    assert!(events[0].1["retry_after_ms"].as_u64().unwrap() > 25000);
    assert!(
        !events[0].1.to_string().contains("\"a\""),
        "waiting events must not reveal the holder"
    );
    let grant = &events.last().unwrap().1;
    assert_eq!(grant["holder"], "b");
    assert_eq!(grant["hold_count"], 1);
}

#[tokio::test]
async fn sse_reports_waiting_then_timeout_with_the_problem() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("sse-t", json!({"holder": "a"})).await;
    let response = app
        .client
        .post(app.url("/locks/sse-t/acquire"))
        .header("accept", "text/event-stream")
        .json(&json!({"holder": "b", "wait_ms": 500}))
        .send()
        .await
        .unwrap();
    let events = read_sse(response).await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].0, "waiting");
    assert_eq!(events[1].0, "timeout");
    assert_eq!(events[1].1["type"], "/problems/lock-held");
    assert_eq!(events[1].1["status"], 409);
    assert!(events[1].1["retry_after_ms"].is_u64());
}

#[tokio::test]
async fn sse_grant_at_once_is_a_single_acquired_event() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let response = app
        .client
        .post(app.url("/locks/sse-now/acquire"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let events = read_sse(response).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "acquired");
    assert_eq!(events[0].1["name"], "sse-now");
}

#[tokio::test]
async fn a_client_that_disconnects_mid_wait_leaves_nothing_held() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("gone", json!({"holder": "a", "lease_ms": 30000}))
        .await;

    // A long-poll and an SSE stream, both abandoned while waiting.
    let poll = tokio::spawn({
        let (client, url) = (app.client.clone(), app.url("/locks/gone/acquire"));
        async move {
            client
                .post(url)
                .json(&json!({"holder": "ghost1", "wait_ms": 20000}))
                .send()
                .await
        }
    });
    let sse = app
        .client
        .post(app.url("/locks/gone/acquire"))
        .header("accept", "text/event-stream")
        .json(&json!({"holder": "ghost2", "wait_ms": 20000}))
        .send()
        .await
        .unwrap();
    app.wait_for_waiters("gone", 2).await;
    poll.abort();
    drop(sse);
    assert!(
        eventually(Duration::from_secs(3), || async {
            app.state("gone").await["waiters"] == 0
        })
        .await,
        "abandoned waits must leave the instance's wait registry"
    );
    app.release("gone", "a").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let state = app.state("gone").await;
    assert_eq!(
        state["locked"], false,
        "no departed client may be holding it: {state}"
    );
    let metrics = app.metrics().await;
    assert!(metrics.contains("latchkey_waiters 0"), "{metrics}");
    assert!(
        metrics.contains(r#"latchkey_acquisitions_total{outcome="abandoned",primitive="lock"} 2"#),
        "both departed clients are counted: {metrics}"
    );
    assert!(
        metrics.contains("latchkey_waiting_objects 0"),
        "no subscription left behind: {metrics}"
    );
}

#[tokio::test]
async fn mutual_exclusion_holds_under_contention_across_two_instances() {
    let redis = redis();
    let apps = Arc::new([
        spawn_app(test_config(&redis)).await,
        spawn_app(test_config(&redis)).await,
    ]);
    // A deliberately non-atomic counter: read, yield, write.
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicU64::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for task in 0..16 {
        let (apps, counter, inside, tokens) = (
            apps.clone(),
            counter.clone(),
            inside.clone(),
            tokens.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let app = &apps[task % 2];
            for i in 0..20 {
                let holder = format!("t{task}-{i}");
                let grant = app
                    .must_acquire(
                        "counter",
                        json!({"holder": holder, "wait_ms": 30000, "lease_ms": 10000}),
                    )
                    .await;
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders inside at once"
                );
                tokens
                    .lock()
                    .unwrap()
                    .push(grant["fencing_token"].as_u64().unwrap());
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                assert_eq!(app.release("counter", &holder).await.status(), 200);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(counter.load(Ordering::SeqCst), 320);
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), 320);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens in critical-section order must increase"
    );
}

#[tokio::test]
async fn the_waiter_limit_answers_429_too_many_waiters() {
    let redis = redis();
    let app = spawn_app(Config {
        max_waiters: 1,
        ..test_config(&redis)
    })
    .await;
    app.must_acquire("full", json!({"holder": "a", "lease_ms": 5000}))
        .await;
    let first = app.spawn_post(
        "/locks/full/acquire",
        json!({"holder": "b", "wait_ms": 3000}),
    );
    app.wait_for_waiters("full", 1).await;
    let response = app
        .acquire("full", json!({"holder": "c", "wait_ms": 3000}))
        .await;
    assert_eq!(response.headers()["retry-after"], "1");
    assert_problem(response, 429, "too-many-waiters").await;
    // A try without waiting is not a waiter and still gets its 409.
    assert_problem(
        app.acquire("full", json!({"holder": "c"})).await,
        409,
        "lock-held",
    )
    .await;
    app.release("full", "a").await;
    assert_eq!(first.await.unwrap().status(), 201);
}

#[tokio::test]
async fn local_waiters_are_served_in_arrival_order() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("fifo", json!({"holder": "h0", "lease_ms": 30000}))
        .await;
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 1..=4 {
        let (client, url, order) = (
            app.client.clone(),
            app.url("/locks/fifo/acquire"),
            order.clone(),
        );
        let base = app.base.clone();
        tasks.push(tokio::spawn(async move {
            let holder = format!("h{i}");
            let r = client
                .post(url)
                .json(&json!({"holder": holder, "wait_ms": 20000}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 201);
            order.lock().unwrap().push(i);
            client
                .delete(format!("{base}/locks/fifo/holders/{holder}"))
                .send()
                .await
                .unwrap();
        }));
        let expected = i;
        assert!(
            eventually(Duration::from_secs(3), || async {
                app.state("fifo").await["waiters"] == expected
            })
            .await
        );
    }
    app.release("fifo", "h0").await;
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![1, 2, 3, 4]);
}
